"""``EngineQueue``: one stream's instruction queue: waits on semaphores, hands its engine the
operations, counts their completions on the stream's semaphore."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.model.neuroncore.isa import COUNT_BITS

from .isa import queue_layout
from .ports import ErrorStrobe, InstrQueue, Semaphores

__all__ = ["EngineQueue", "QueueError"]


class QueueError:
    """``error.code`` of a queue."""

    SEMAPHORE = 1  #: a wait on a semaphore the core does not have (the wait is dropped)


class EngineQueue(wiring.Component):
    """The queue of one stream (:mod:`ncrtl.model.neuroncore.isa`).

    The head entry, a wait, is taken in the cycle its semaphore has reached its count (a wait
    on a semaphore number the core lacks is dropped with an error strobe, so the queue keeps
    going); an operation goes to the engine on ``engine.op`` as it is.  ``count`` is the
    stream's semaphore: one more per ``engine.done`` strobe.

    Parameters
    ----------
    op : Layout
        The engine's operation layout (:func:`ncrtl.hdl.neuroncore.isa.op_layouts`).
    streams : int
        The core's semaphores (one per stream).

    Interface
    ---------
    entries : In(stream.Signature(queue_layout(op)))
    sems : In(Semaphores(streams))
    engine : Out(InstrQueue(op))
    count : Out(COUNT_BITS)
    error : Out(ErrorStrobe(1))
    """

    @validated_init
    def __init__(self, op, streams):
        self.op = op
        self.streams = check_int(streams, "EngineQueue streams", minimum=1, maximum=32)
        super().__init__(
            {
                "entries": In(stream.Signature(queue_layout(op))),
                "sems": In(Semaphores(streams, COUNT_BITS)),
                "engine": Out(InstrQueue(op)),
                "count": Out(COUNT_BITS),
                "error": Out(ErrorStrobe(1)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        head = self.entries.payload
        wait = head.body.wait
        have = wait.sem < self.streams
        level = Signal(COUNT_BITS)
        for s in range(self.streams):
            with m.If(equals(wait.sem, s)):
                m.d.comb += level.eq(self.sems.count[s])
        reached = have & (level >= wait.count)
        is_op = head.kind == 1
        m.d.comb += [
            self.engine.op.payload.eq(head.body.op),
            self.engine.op.valid.eq(self.entries.valid & is_op),
            self.entries.ready.eq(Mux(is_op, self.engine.op.ready, reached | ~have)),
            self.error.valid.eq(self.entries.valid & ~is_op & ~have),
            self.error.code.eq(QueueError.SEMAPHORE),
        ]
        with m.If(self.engine.done):
            m.d.sync += self.count.eq(self.count + 1)
        return m
