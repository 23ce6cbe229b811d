"""The NeuronCore's engine ports, one named :class:`~amaranth.lib.wiring.Signature` each, seen
from the engine (the memory or the queue is the flipped side), in the manner of amaranth-soc's
bus signatures: the core joins its engines with :func:`amaranth.lib.wiring.connect`, and a
testbench derives its drivers from the same objects."""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.ports import ErrorStrobe
from ncrtl.hdl.psum.psum import PsumPort
from ncrtl.hdl.sbuf.memory import SbufDmaPort, SbufPort

__all__ = ["ErrorStrobe", "SbufPort", "SbufDmaPort", "PsumPort", "InstrQueue", "Semaphores"]

# ``ErrorStrobe`` (``ncrtl.hdl.common.ports``), ``PsumPort`` (PSUM's, ``ncrtl.hdl.psum.psum``),
# ``SbufPort`` and ``SbufDmaPort`` (the SBUF's, ``ncrtl.hdl.sbuf.memory``) are their blocks',
# listed here with the other engine ports.


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
