"""The NeuronCore's engine ports, one named :class:`~amaranth.lib.wiring.Signature` each, seen
from the engine (the memory or the queue is the flipped side), in the manner of amaranth-soc's
bus signatures: the core joins its engines with :func:`amaranth.lib.wiring.connect`, and a
testbench derives its drivers from the same objects."""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.psum.psum import req_layout
from ncrtl.hdl.sbuf.memory import SbufDmaPort, SbufPort

__all__ = ["ErrorStrobe", "SbufPort", "SbufDmaPort", "PsumPort", "InstrQueue", "Semaphores"]

# ``SbufPort`` and ``SbufDmaPort`` are the SBUF's (``ncrtl.hdl.sbuf.memory``), listed here with
# the other engine ports.


class ErrorStrobe(wiring.Signature):
    """``valid``: one cycle per rejected request or instruction; ``code``: why (the block's
    error enumeration)."""

    def __init__(self, code_bits):
        self.code_bits = code_bits
        super().__init__({"valid": Out(1), "code": Out(code_bits)})


class PsumPort(wiring.Signature):
    """An engine's PSUM port (``ncrtl.hdl.psum.psum``'s ``ve`` / ``se``): requests out, read
    responses (one 32-bit slot per partition) in."""

    def __init__(self, partitions):
        self.partitions = partitions
        super().__init__(
            {
                "req": Out(stream.Signature(req_layout(partitions))),
                "resp": In(stream.Signature(32 * partitions)),
            }
        )


class InstrQueue(wiring.Signature):
    """An instruction queue's side of its engine: operations of layout ``op`` out (the waits
    are the queue's own), one ``done`` strobe in per completed operation (the engine takes it
    as ``In(InstrQueue(op))``)."""

    def __init__(self, op):
        self.op = op
        super().__init__({"op": Out(stream.Signature(op)), "done": In(1)})


class Semaphores(wiring.Signature):
    """The semaphores of the core's streams, one ``count`` each, as the queues read them."""

    def __init__(self, streams, bits=16):
        self.streams, self.bits = streams, bits
        super().__init__({"count": Out(data.ArrayLayout(bits, streams))})
