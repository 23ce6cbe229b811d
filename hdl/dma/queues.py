"""``DmaQueues``: a DMA engine's 16 descriptor queues, served round robin or by class of service."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.axi import AxiManager
from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.hdl.sbuf.memory import dma_request_layout
from ncrtl.model.dma.qos import CLASSES, POLICIES, QUEUES, SLOTS
from ncrtl.model.sbuf.memory import Access

from .check import descriptor_layout
from .engine import DmaEngine
from .qos import PortArbiter, slot_layout

__all__ = ["DmaQueues", "queued_layout", "queue_status_layout"]

QUEUE_BITS = (QUEUES - 1).bit_length()


def queued_layout(wd):
    """A descriptor for a queue: ``queue`` and ``desc`` (:func:`ncrtl.hdl.dma.check.
    descriptor_layout`)."""
    return data.StructLayout({"queue": QUEUE_BITS, "desc": descriptor_layout(wd)})


def queue_status_layout():
    """A completion: the descriptor's ``queue``, ``tag`` and ``error`` (an
    :class:`ncrtl.model.dma.isa.Error` code, 0 when done)."""
    return data.StructLayout({"queue": QUEUE_BITS, "tag": 8, "error": 4})


def _mux(index, values, n):
    """``values[index]`` as a mux chain (an Array read is an incomplete case in the Verilog)."""
    out = values[0]
    for i in range(1, n):
        out = Mux(equals(index, i), values[i], out)
    return out


class DmaQueues(wiring.Component):
    """The descriptor queues of one DMA engine and the channels that serve them
    (:mod:`ncrtl.model.dma.qos`, docs/dma.md "Queues and quality of service").

    A descriptor enters the queue it names (``desc.queue``; ``desc.ready`` is low while that
    queue is full); each queue is in order.  ``policy = "round_robin"``: one channel (a
    :class:`~ncrtl.hdl.dma.engine.DmaEngine`) serves every queue, a descriptor at a time, the
    queues in turn.  ``policy = "priority"``: a channel per class of service; queue ``q``
    belongs to class ``klass[q]`` and its class's channel serves it, the class's queues in turn;
    the channels share the device memory's read channel (``ar``, answers routed back by
    ``id``), its write channels (``aw`` + ``w``, a channel's address and data beat granted
    together; responses routed by ``id``) and the SBUF's DMA port (a read's response routed to
    the channel whose read it answers) through a :class:`~ncrtl.hdl.dma.qos.PortArbiter` per
    port with the ``calendar``.  A grant on an AXI4 channel is held while its beat waits
    for ``ready`` (AXI4: a payload is held until taken), and the write channels stay with one
    channel until its burst's address and last data beat are taken, so the data follow the
    addresses in order.

    Completions leave on ``status`` with their queue, the highest class first when several
    channels complete at once; ``done[q]`` counts queue ``q``'s completions (a semaphore a
    consumer waits on, wrapping at 2^16).

    Parameters
    ----------
    word_bytes, widths, partitions, partition_bytes, hbm_bytes, overhead, outstanding, burst
        Every channel's (:class:`~ncrtl.hdl.dma.engine.DmaEngine`).
    policy : str
        ``"round_robin"`` or ``"priority"``.
    depth : int
        Descriptors each queue holds.

    Interface
    ---------
    desc : In(stream.Signature(queued_layout(widths)))
    status : Out(stream.Signature(queue_status_layout()))
    klass : In(data.ArrayLayout(2, QUEUES))
        Each queue's class (``priority``); held while descriptors are queued.
    calendar : In(data.ArrayLayout(slot_layout(), SLOTS))
        The traffic-shaping calendar (``priority``).
    done : Out(data.ArrayLayout(16, QUEUES))
    axi : Out(AxiManager(word_bytes, widths.addr_bits, id_bits=2))
        ``id`` is the channel (its class).
    sbuf_req, sbuf_resp
        The SBUF's DMA port.
    """

    @validated_init
    def __init__(
        self,
        word_bytes=16,
        *,
        policy="priority",
        depth=4,
        widths=None,
        partitions=128,
        partition_bytes=192 * 1024,
        hbm_bytes=1 << 30,
        overhead=0,
        outstanding=8,
        burst=16,
    ):
        if policy not in POLICIES:
            raise ValueError(f"DmaQueues policy must be one of {POLICIES}, not {policy!r}")
        self.policy = policy
        self.depth = check_int(depth, "DmaQueues depth", minimum=1, maximum=64)
        self.channels = CLASSES if policy == "priority" else 1
        self.engines = [
            DmaEngine(
                word_bytes,
                widths=widths,
                partitions=partitions,
                partition_bytes=partition_bytes,
                hbm_bytes=hbm_bytes,
                overhead=overhead,
                outstanding=outstanding,
                burst=burst,
            )
            for _ in range(self.channels)
        ]
        self.wd = wd = self.engines[0].wd
        self.word_bytes = word_bytes
        words = partition_bytes // word_bytes
        self.arbiters = {}
        super().__init__(
            {
                "desc": In(stream.Signature(queued_layout(wd))),
                "status": Out(stream.Signature(queue_status_layout())),
                "klass": In(data.ArrayLayout(2, QUEUES)),
                "calendar": In(data.ArrayLayout(slot_layout(), SLOTS)),
                "done": Out(data.ArrayLayout(16, QUEUES)),
                "axi": Out(AxiManager(word_bytes, wd.addr_bits, id_bits=2)),
                "sbuf_req": Out(
                    stream.Signature(dma_request_layout(partitions, words, word_bytes))
                ),
                "sbuf_resp": In(stream.Signature(8 * word_bytes)),
            }
        )
        if self.channels > 1:
            self.arbiters = {name: PortArbiter() for name in ("ar", "write", "sbuf")}

    def elaborate(self, platform):
        m = Module()
        n = self.channels
        engines = self.engines
        for k, eng in enumerate(engines):
            m.submodules[f"channel{k}"] = eng
        for name, arb in self.arbiters.items():
            m.submodules[f"{name}_arbiter"] = arb
            m.d.comb += arb.calendar.eq(self.calendar)

        # -- the queues ------------------------------------------------------------------------
        width = Signal(descriptor_layout(self.wd)).shape().size
        fifos = [SyncFIFO(width=width, depth=self.depth) for _ in range(QUEUES)]
        for q, f in enumerate(fifos):
            m.submodules[f"queue{q}"] = f
            m.d.comb += [
                f.w_data.eq(self.desc.payload.desc.as_value()),
                f.w_en.eq(self.desc.valid & equals(self.desc.payload.queue, q)),
            ]
        m.d.comb += self.desc.ready.eq(
            _mux(self.desc.payload.queue, [f.w_rdy for f in fifos], QUEUES)
        )

        # -- each channel takes its class's queues in turn ---------------------------------
        pops = [[Signal(name=f"pop_{k}_{q}") for q in range(QUEUES)] for k in range(n)]
        current = [Signal(QUEUE_BITS, name=f"current{k}") for k in range(n)]
        for k, eng in enumerate(engines):
            waiting = Signal(QUEUES, name=f"waiting{k}")
            for q, f in enumerate(fifos):
                mine = equals(self.klass[q], k) if n > 1 else 1
                m.d.comb += waiting[q].eq(f.r_rdy & mine)
            last = Signal(QUEUE_BITS, name=f"last{k}", init=QUEUES - 1)
            pick = Signal(QUEUE_BITS, name=f"pick{k}")
            # The first waiting queue after ``last``: the farthest offsets first, nearer ones
            # override.
            m.d.comb += pick.eq(0)
            for off in range(QUEUES, 0, -1):
                q = Signal(QUEUE_BITS, name=f"at{k}_{off}")
                m.d.comb += q.eq(last + off)
                with m.If((waiting >> q)[0]):
                    m.d.comb += pick.eq(q)
            m.d.comb += [
                eng.desc.valid.eq(waiting.any()),
                eng.desc.payload.eq(_mux(pick, [f.r_data for f in fifos], QUEUES)),
            ]
            with m.If(eng.desc.valid & eng.desc.ready):
                m.d.sync += [last.eq(pick), current[k].eq(pick)]
                for q in range(QUEUES):
                    m.d.comb += pops[k][q].eq(equals(pick, q))
        for q, f in enumerate(fifos):
            m.d.comb += f.r_en.eq(Cat(*(pops[k][q] for k in range(n))).any())

        # -- completions: the highest class first ------------------------------------------
        chosen = Signal(range(max(n, 2)))
        for k in range(n):  # higher channels override
            with m.If(engines[k].status.valid):
                m.d.comb += chosen.eq(k)
        m.d.comb += [
            self.status.valid.eq(Cat(*(e.status.valid for e in engines)).any()),
            self.status.payload.queue.eq(_mux(chosen, current, n)),
            self.status.payload.tag.eq(_mux(chosen, [e.status.payload.tag for e in engines], n)),
            self.status.payload.error.eq(
                _mux(chosen, [e.status.payload.error for e in engines], n)
            ),
        ]
        for k, eng in enumerate(engines):
            m.d.comb += eng.status.ready.eq(self.status.ready & equals(chosen, k))
        with m.If(self.status.valid & self.status.ready):
            for q in range(QUEUES):
                with m.If(equals(self.status.payload.queue, q)):
                    m.d.sync += self.done[q].eq(self.done[q] + 1)

        # -- the shared ports --------------------------------------------------------------
        if n == 1:
            eng = engines[0]
            wiring.connect(m, eng.sbuf_req, wiring.flipped(self.sbuf_req))
            wiring.connect(m, wiring.flipped(self.sbuf_resp), eng.sbuf_resp)
            axi = self.axi
            for ch in ("ar", "aw"):
                src, dst = getattr(eng.axi, ch), getattr(axi, ch)
                m.d.comb += [
                    dst.valid.eq(src.valid),
                    dst.payload.addr.eq(src.payload.addr),
                    dst.payload.len.eq(src.payload.len),
                    dst.payload.size.eq(src.payload.size),
                    dst.payload.burst.eq(src.payload.burst),
                    src.ready.eq(dst.ready),
                ]
            wiring.connect(m, eng.axi.w, wiring.flipped(axi.w))
            m.d.comb += [
                eng.axi.r.valid.eq(axi.r.valid),
                eng.axi.r.payload.data.eq(axi.r.payload.data),
                eng.axi.r.payload.resp.eq(axi.r.payload.resp),
                eng.axi.r.payload.last.eq(axi.r.payload.last),
                axi.r.ready.eq(eng.axi.r.ready),
                eng.axi.b.valid.eq(axi.b.valid),
                eng.axi.b.payload.resp.eq(axi.b.payload.resp),
                axi.b.ready.eq(eng.axi.b.ready),
            ]
            return m

        axi = self.axi
        # Read addresses: a grant is held while its beat waits for ready.
        ar = self.arbiters["ar"]
        ar_hold = Signal()
        ar_owner = Signal(range(n))
        ar_grant = Signal(n)
        m.d.comb += ar.requests.eq(Cat(*(e.axi.ar.valid for e in engines)))
        m.d.comb += ar_grant.eq(Mux(ar_hold, 1 << ar_owner, ar.grant))
        ar_k = Signal(range(n))
        for k in range(n):
            with m.If(ar_grant[k]):
                m.d.comb += ar_k.eq(k)
        src = [e.axi.ar for e in engines]
        m.d.comb += [
            axi.ar.valid.eq(ar_grant.any()),
            axi.ar.payload.id.eq(ar_k),
            axi.ar.payload.addr.eq(_mux(ar_k, [s.payload.addr for s in src], n)),
            axi.ar.payload.len.eq(_mux(ar_k, [s.payload.len for s in src], n)),
            axi.ar.payload.size.eq(_mux(ar_k, [s.payload.size for s in src], n)),
            axi.ar.payload.burst.eq(_mux(ar_k, [s.payload.burst for s in src], n)),
        ]
        for k in range(n):
            m.d.comb += src[k].ready.eq(ar_grant[k] & axi.ar.ready)
        m.d.sync += [ar_hold.eq(axi.ar.valid & ~axi.ar.ready), ar_owner.eq(ar_k)]
        # Read data back to the channel its id names.
        for k, e in enumerate(engines):
            m.d.comb += [
                e.axi.r.valid.eq(axi.r.valid & equals(axi.r.payload.id, k)),
                e.axi.r.payload.data.eq(axi.r.payload.data),
                e.axi.r.payload.resp.eq(axi.r.payload.resp),
                e.axi.r.payload.last.eq(axi.r.payload.last),
            ]
        m.d.comb += axi.r.ready.eq(_mux(axi.r.payload.id, [e.axi.r.ready for e in engines], n))

        # Writes: the address and data channels go to one channel until both beats are taken.
        wr = self.arbiters["write"]
        w_lock = Signal()
        w_owner = Signal(range(n))
        aw_got = Signal()
        w_got = Signal()
        w_grant = Signal(n)
        m.d.comb += wr.requests.eq(Cat(*(e.axi.aw.valid | e.axi.w.valid for e in engines)))
        m.d.comb += w_grant.eq(Mux(w_lock, 1 << w_owner, wr.grant))
        w_k = Signal(range(n))
        for k in range(n):
            with m.If(w_grant[k]):
                m.d.comb += w_k.eq(k)
        aws = [e.axi.aw for e in engines]
        ws = [e.axi.w for e in engines]
        m.d.comb += [
            axi.aw.valid.eq(_mux(w_k, [a.valid for a in aws], n) & w_grant.any()),
            axi.aw.payload.id.eq(w_k),
            axi.aw.payload.addr.eq(_mux(w_k, [a.payload.addr for a in aws], n)),
            axi.aw.payload.len.eq(_mux(w_k, [a.payload.len for a in aws], n)),
            axi.aw.payload.size.eq(_mux(w_k, [a.payload.size for a in aws], n)),
            axi.aw.payload.burst.eq(_mux(w_k, [a.payload.burst for a in aws], n)),
            axi.w.valid.eq(_mux(w_k, [x.valid for x in ws], n) & w_grant.any()),
            axi.w.payload.data.eq(_mux(w_k, [x.payload.data for x in ws], n)),
            axi.w.payload.strb.eq(_mux(w_k, [x.payload.strb for x in ws], n)),
            axi.w.payload.last.eq(_mux(w_k, [x.payload.last for x in ws], n)),
        ]
        for k in range(n):
            m.d.comb += [
                aws[k].ready.eq(w_grant[k] & axi.aw.ready),
                ws[k].ready.eq(w_grant[k] & axi.w.ready),
            ]
        aw_now = aw_got | (axi.aw.valid & axi.aw.ready)
        last_now = w_got | (axi.w.valid & axi.w.ready & axi.w.payload.last)
        with m.If(w_grant.any()):
            with m.If(aw_now & last_now):  # the burst is complete: its address and last beat
                m.d.sync += [w_lock.eq(0), aw_got.eq(0), w_got.eq(0)]
            with m.Else():
                m.d.sync += [
                    w_lock.eq(1),
                    w_owner.eq(w_k),
                    aw_got.eq(aw_now),
                    w_got.eq(last_now),
                ]
        for k, e in enumerate(engines):
            m.d.comb += [
                e.axi.b.valid.eq(axi.b.valid & equals(axi.b.payload.id, k)),
                e.axi.b.payload.resp.eq(axi.b.payload.resp),
            ]
        m.d.comb += axi.b.ready.eq(_mux(axi.b.payload.id, [e.axi.b.ready for e in engines], n))

        # The SBUF's DMA port: a grant per cycle; a read's response goes to its channel.
        sb = self.arbiters["sbuf"]
        reqs = [e.sbuf_req for e in engines]
        m.d.comb += sb.requests.eq(Cat(*(r.valid for r in reqs)))
        s_k = Signal(range(n))
        for k in range(n):
            with m.If(sb.grant[k]):
                m.d.comb += s_k.eq(k)
        m.d.comb += [
            self.sbuf_req.valid.eq(sb.grant.any()),
            self.sbuf_req.payload.eq(_mux(s_k, [r.payload for r in reqs], n)),
        ]
        for k in range(n):
            m.d.comb += reqs[k].ready.eq(sb.grant[k] & self.sbuf_req.ready)
        resp_owner = Signal(range(n))
        with m.If(
            self.sbuf_req.valid
            & self.sbuf_req.ready
            & equals(self.sbuf_req.payload.access, Access.READ)
        ):
            m.d.sync += resp_owner.eq(s_k)
        for k, e in enumerate(engines):
            m.d.comb += [
                e.sbuf_resp.valid.eq(self.sbuf_resp.valid & equals(resp_owner, k)),
                e.sbuf_resp.payload.eq(self.sbuf_resp.payload),
            ]
        m.d.comb += self.sbuf_resp.ready.eq(
            _mux(resp_owner, [e.sbuf_resp.ready for e in engines], n)
        )
        return m
