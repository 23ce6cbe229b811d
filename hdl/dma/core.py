"""``DmaCore``: the DMA engines of one core, fed by its two Descriptor Generation Engines, on an
SBUF with a port per engine, with completion semaphores."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.axi import AxiManager
from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_bool, check_int, validated_init
from ncrtl.hdl.sbuf.memory import MultiPortSbuf, SbufDmaPort, engine_request_layout
from ncrtl.model.dma.dge import DGE_CYCLES, ENGINES

from .check import Widths, descriptor_layout
from .dge import Dge, dge_status_layout
from .engine import DmaEngine

__all__ = ["DmaCore", "instruction_layout", "direct_layout"]

#: Descriptor generators of a core (seed 000: "two instances of DGE").
DGES = 2


def instruction_layout(widths, semaphores):
    """An instruction for a DGE: the semaphore its parts count on, and the descriptor over the
    whole transfer."""
    return data.StructLayout({"sem": range(max(semaphores, 2)), "desc": descriptor_layout(widths)})


def direct_layout(widths, engines, semaphores):
    """A precomputed descriptor (the indirect path): its engine, semaphore and descriptor."""
    return data.StructLayout(
        {
            "engine": range(max(engines, 2)),
            "sem": range(max(semaphores, 2)),
            "desc": descriptor_layout(widths),
        }
    )


class DmaCore(wiring.Component):
    """``engines`` :class:`~ncrtl.hdl.dma.engine.DmaEngine`\\ s on a
    :class:`~ncrtl.hdl.sbuf.memory.MultiPortSbuf`, fed by two :class:`~ncrtl.hdl.dma.dge.Dge`\\ s
    and by precomputed descriptors, each completion counted on a semaphore.

    An instruction names a semaphore; its DGE cuts it into parts for the engines
    (:func:`ncrtl.model.dma.dge.split`), which enter the engines' queues (``depth``
    descriptors each) with the semaphore.  A precomputed descriptor (the path for gather and
    scatter, which the DGE refuses) names its engine and semaphore.  Into an engine's queue,
    per cycle, DGE 0 goes first, then DGE 1, then a precomputed descriptor.  Each engine adds
    one to its descriptor's semaphore when the descriptor completes (``sem[s]``, 16 bits,
    wrapping): a consumer waits for ``+ parts`` of its instruction (the DGE's status says how
    many).  A completion with an error code also records the code in ``sem_error[s]`` (the
    last one; 0 until one comes): a DGE-checked part never has one, a precomputed descriptor
    may.

    Every engine has its AXI4 manager port (``axi{k}``, the fabric joins them) and its SBUF
    port: on the :class:`~ncrtl.hdl.sbuf.memory.MultiPortSbuf` inside, whose engine port is
    then the compute engines' (and a testbench's), or with ``sbuf=False`` as the core's own
    port ``sbuf{k}`` for the SBUF of a larger design (the NeuronCore's).

    Parameters
    ----------
    word_bytes : int
    engines : int
        A power of two (16 on NeuronCore-v3).
    widths : Widths
    partitions, partition_bytes, hbm_bytes, overhead, outstanding, burst
        As :class:`~ncrtl.hdl.dma.engine.DmaEngine`.
    dge_cycles : int
        :class:`~ncrtl.hdl.dma.dge.Dge` ``cycles``.
    semaphores : int
    depth : int
        Descriptors each engine's queue holds.
    instance : bool
        The SBUF's partitions as instances of one Verilog module.
    sbuf : bool
        Place the SBUF (True) or leave it out, the engines' SBUF ports as the core's (False).

    Interface
    ---------
    instr0, instr1 : In(stream.Signature(instruction_layout(widths, semaphores)))
    dge_status0, dge_status1 : Out(stream.Signature(dge_status_layout(engines)))
    direct : In(stream.Signature(direct_layout(widths, engines, semaphores)))
    sem : Out(data.ArrayLayout(16, semaphores))
    sem_error : Out(data.ArrayLayout(4, semaphores))
    axi0 .. axi{engines-1} : Out(AxiManager(word_bytes, widths.addr_bits))
    eng_req, eng_resp
        The SBUF's engine port (with ``sbuf``).
    sbuf{k} : Out(SbufDmaPort(partitions, words, word_bytes))
        DMA engine ``k``'s SBUF port (without ``sbuf``).
    """

    @validated_init
    def __init__(
        self,
        word_bytes=16,
        *,
        engines=ENGINES,
        widths=None,
        partitions=128,
        partition_bytes=192 * 1024,
        hbm_bytes=1 << 30,
        overhead=0,
        outstanding=8,
        burst=16,
        dge_cycles=DGE_CYCLES,
        semaphores=4,
        depth=2,
        instance=False,
        sbuf=True,
    ):
        self.word_bytes = word_bytes
        self.partitions, self.partition_bytes = partitions, partition_bytes
        self.engines = check_int(engines, "DmaCore engines", minimum=1, maximum=32)
        if engines & (engines - 1):
            raise ValueError(f"DmaCore engines must be a power of two, not {engines}")
        self.wd = widths if widths is not None else Widths()
        if not isinstance(self.wd, Widths):
            raise TypeError(f"DmaCore widths must be a Widths, not {widths!r}")
        self.semaphores = check_int(semaphores, "DmaCore semaphores", minimum=1, maximum=64)
        self.depth = check_int(depth, "DmaCore depth", minimum=1, maximum=64)
        geo = dict(partitions=partitions, partition_bytes=partition_bytes, hbm_bytes=hbm_bytes)
        self.geo = geo
        self.dges = [Dge(self.wd, engines=engines, cycles=dge_cycles, **geo) for _ in range(DGES)]
        self.dma_engines = [
            DmaEngine(
                word_bytes,
                widths=self.wd,
                overhead=overhead,
                outstanding=outstanding,
                burst=burst,
                **geo,
            )
            for _ in range(engines)
        ]
        self.sbuf = (
            MultiPortSbuf(engines, partitions, partition_bytes, word_bytes, instance=instance)
            if check_bool(sbuf, "DmaCore sbuf")
            else None
        )
        words = partition_bytes // word_bytes
        members = {}
        for d in range(DGES):
            members[f"instr{d}"] = In(stream.Signature(instruction_layout(self.wd, semaphores)))
            members[f"dge_status{d}"] = Out(stream.Signature(dge_status_layout(engines)))
        members["direct"] = In(stream.Signature(direct_layout(self.wd, engines, semaphores)))
        members["sem"] = Out(data.ArrayLayout(16, semaphores))
        members["sem_error"] = Out(data.ArrayLayout(4, semaphores))
        for k in range(engines):
            members[f"axi{k}"] = Out(AxiManager(word_bytes, self.wd.addr_bits))
        if self.sbuf is not None:
            members["eng_req"] = In(
                stream.Signature(engine_request_layout(partitions, words, word_bytes))
            )
            members["eng_resp"] = Out(stream.Signature(8 * word_bytes * partitions))
        else:
            for k in range(engines):
                members[f"sbuf{k}"] = Out(SbufDmaPort(partitions, words, word_bytes))
        super().__init__(members)

    def axi(self, k):
        return getattr(self, f"axi{k}")

    def sbuf_port(self, k):
        """DMA engine ``k``'s SBUF port (without ``sbuf``)."""
        return getattr(self, f"sbuf{k}")

    def cells(self):
        """The SBUF's partition memory module (none without ``sbuf``)."""
        return self.sbuf.cells() if self.sbuf is not None else []

    def elaborate(self, platform):
        m = Module()
        E, S = self.engines, self.semaphores
        queued = data.StructLayout({"sem": range(max(S, 2)), "desc": descriptor_layout(self.wd)})
        sb = self.sbuf
        if sb is not None:
            m.submodules.sbuf = sb
            wiring.connect(m, wiring.flipped(self.eng_req), sb.eng_req)
            wiring.connect(m, sb.eng_resp, wiring.flipped(self.eng_resp))

        # the DGEs: instruction in (its semaphore kept until its parts are out), status out
        dge_sem = []
        for d, dge in enumerate(self.dges):
            m.submodules[f"dge{d}"] = dge
            instr = getattr(self, f"instr{d}")
            sem = Signal(range(max(S, 2)), name=f"dge{d}_sem")
            m.d.comb += [
                dge.instr.payload.eq(instr.payload.desc),
                dge.instr.valid.eq(instr.valid),
                instr.ready.eq(dge.instr.ready),
            ]
            with m.If(instr.valid & instr.ready):
                m.d.sync += sem.eq(instr.payload.sem)
            wiring.connect(m, dge.status, wiring.flipped(getattr(self, f"dge_status{d}")))
            dge_sem.append(sem)

        # the engines' queues: DGE 0, then DGE 1, then a precomputed descriptor
        fifos = []
        for k in range(E):
            q = SyncFIFO(width=queued.size, depth=self.depth)
            m.submodules[f"queue{k}"] = q
            fifos.append(q)
        sources = [
            (dge.part.valid, dge.part.payload.engine, dge_sem[d], dge.part.payload.desc, dge.part)
            for d, dge in enumerate(self.dges)
        ]
        direct = self.direct
        sources.append(
            (direct.valid, direct.payload.engine, direct.payload.sem, direct.payload.desc, direct)
        )
        grant = {}
        for k, q in enumerate(fifos):
            entry = Signal(queued, name=f"entry{k}")
            busy = 0  # a higher source already writes this queue
            wen = 0
            for i, (valid, engine, sem, desc, _) in enumerate(sources):
                wants = valid & equals(engine, k)
                mine = Signal(name=f"q{k}_src{i}")
                m.d.comb += mine.eq(wants & ~busy & q.w_rdy)
                grant[(k, i)] = mine
                with m.If(mine):
                    m.d.comb += [entry.sem.eq(sem), entry.desc.eq(desc)]
                busy = busy | wants
                wen = wen | mine
            m.d.comb += [q.w_data.eq(entry.as_value()), q.w_en.eq(wen)]
        for i, (_, _, _, _, port) in enumerate(sources):
            m.d.comb += port.ready.eq(Cat(*(grant[(k, i)] for k in range(E))).any())

        # the engines, their semaphores
        done = []
        for k, eng in enumerate(self.dma_engines):
            m.submodules[f"engine{k}"] = eng
            q = fifos[k]
            head = data.View(queued, q.r_data)
            sem = Signal(range(max(S, 2)), name=f"engine{k}_sem")
            m.d.comb += [
                eng.desc.payload.eq(head.desc),
                eng.desc.valid.eq(q.r_rdy),
                q.r_en.eq(eng.desc.ready),
            ]
            with m.If(q.r_rdy & eng.desc.ready):
                m.d.sync += sem.eq(head.sem)
            m.d.comb += eng.status.ready.eq(1)
            wiring.connect(m, eng.axi, wiring.flipped(self.axi(k)))
            if sb is not None:
                wiring.connect(m, eng.sbuf_req, sb.dma_req_port(k))
                wiring.connect(m, sb.dma_resp_port(k), eng.sbuf_resp)
            else:
                port = self.sbuf_port(k)
                wiring.connect(m, eng.sbuf_req, wiring.flipped(port.req))
                wiring.connect(m, wiring.flipped(port.resp), eng.sbuf_resp)
            done.append((eng.status.valid, sem, eng.status.payload.error))
        for s in range(S):
            hits = [valid & equals(sem, s) for valid, sem, _ in done]
            count = sum(hits[1:], hits[0]) if len(hits) > 1 else hits[0]
            m.d.sync += self.sem[s].eq(self.sem[s] + count)
            for valid, sem, error in done:
                with m.If(valid & equals(sem, s) & error.any()):
                    m.d.sync += self.sem_error[s].eq(error)
        return m
