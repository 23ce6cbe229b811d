"""``DmaIssue``: the DMA queues' side of the descriptor generators: transfers issued in queue
order, each on a semaphore of its own, retired in order."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.arbiter import round_robin
from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.dma.core import DGES, instruction_layout
from ncrtl.hdl.dma.dge import dge_status_layout

from .isa import dma_layout, dma_widths
from .ports import ErrorStrobe, InstrQueue

__all__ = ["DmaIssue"]


class DmaIssue(wiring.Component):
    """``dma_queues`` queues onto the two DGEs (queue ``q`` on DGE ``q % 2``, round robin
    among its queues), each queue with ``dma_inflight`` transfers in flight.

    A transfer takes semaphore ``q * dma_inflight + slot`` of the DMA engines
    (:class:`~ncrtl.hdl.dma.core.DmaCore`), its slot the queue's next in a ring; the queue
    keeps the count that semaphore reaches when all the transfer's parts are done (its value
    at issue plus ``parts``: nothing else counts on it while the slot is taken).  The oldest
    transfer retires when its semaphore reaches that count, and strobes its queue's
    ``done``: a queue's transfers complete in order, whichever engine finishes first.  A DGE
    status with an error strobes ``error`` with its code (the encoder refuses what the DGE
    would, so none is expected).

    Interface
    ---------
    queue{q} : In(InstrQueue(dma_layout(geo)))
    dge{d} : Out(stream.Signature(instruction_layout(widths, semaphores)))
    dge_status{d} : In(stream.Signature(dge_status_layout(engines)))
    sem : In(data.ArrayLayout(16, semaphores))
    error : Out(ErrorStrobe(4))
    """

    @validated_init
    def __init__(self, geo):
        self.geo = geo
        self.semaphores = geo.dma_queues * geo.dma_inflight
        wd = dma_widths(geo)
        members = {f"queue{q}": In(InstrQueue(dma_layout(geo))) for q in range(geo.dma_queues)}
        for d in range(DGES):
            members[f"dge{d}"] = Out(stream.Signature(instruction_layout(wd, self.semaphores)))
            members[f"dge_status{d}"] = In(stream.Signature(dge_status_layout(geo.dma_engines)))
        members["sem"] = In(data.ArrayLayout(16, self.semaphores))
        members["error"] = Out(ErrorStrobe(4))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        geo = self.geo
        Q, D = geo.dma_queues, geo.dma_inflight
        queues = [getattr(self, f"queue{q}") for q in range(Q)]
        heads, tails, useds, targets = [], [], [], []
        for q in range(Q):
            heads.append(Signal(range(max(D, 2)), name=f"q{q}_head"))
            tails.append(Signal(range(max(D, 2)), name=f"q{q}_tail"))
            useds.append(Signal(range(D + 1), name=f"q{q}_used"))
            targets.append([Signal(16, name=f"q{q}_target{s}") for s in range(D)])

        def sem_of(q, slot):
            out = Signal(16, name=f"q{q}_sem_at")
            for s in range(D):
                with m.If(equals(slot, s)):
                    m.d.comb += out.eq(self.sem[q * D + s])
            return out

        grants = [Signal(name=f"q{q}_issue") for q in range(Q)]
        for d in range(DGES):
            mine = [q for q in range(Q) if q % DGES == d]
            port = getattr(self, f"dge{d}")
            if not mine:
                m.d.comb += port.valid.eq(0)
                continue
            asks = [queues[q].op.valid & (useds[q] < D) for q in mine]
            pick, any_, last = round_robin(m, asks, f"dge{d}")
            m.d.comb += port.valid.eq(any_)
            for j, q in enumerate(mine):
                with m.If(equals(pick, j)):
                    m.d.comb += [
                        port.payload.desc.eq(queues[q].op.payload.desc),
                        port.payload.sem.eq(q * D + tails[q]),
                    ]
                m.d.comb += grants[q].eq(any_ & equals(pick, j) & port.ready)
            with m.If(port.valid & port.ready):
                m.d.sync += last.eq(pick)
            status = getattr(self, f"dge_status{d}")
            m.d.comb += status.ready.eq(1)
            with m.If(status.valid & status.payload.error.any()):
                m.d.comb += [self.error.valid.eq(1), self.error.code.eq(status.payload.error)]

        for q in range(Q):
            qp = queues[q]
            m.d.comb += qp.op.ready.eq(grants[q])
            at_tail = sem_of(q, tails[q])
            with m.If(grants[q]):
                for s in range(D):
                    with m.If(equals(tails[q], s)):
                        m.d.sync += targets[q][s].eq(at_tail + qp.op.payload.parts)
                m.d.sync += tails[q].eq(tails[q] + 1 if D > 1 else 0)
            target = Signal(16, name=f"q{q}_head_target")
            for s in range(D):
                with m.If(equals(heads[q], s)):
                    m.d.comb += target.eq(targets[q][s])
            retire = Signal(name=f"q{q}_retire")
            m.d.comb += retire.eq((useds[q] > 0) & (sem_of(q, heads[q]) == target))
            with m.If(retire):
                m.d.sync += heads[q].eq(heads[q] + 1 if D > 1 else 0)
            m.d.comb += qp.done.eq(retire)
            m.d.sync += useds[q].eq(useds[q] + grants[q] - retire)
        return m
