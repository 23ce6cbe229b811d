"""``NeuronCore``: the blocks joined into one core that runs a kernel's instruction streams.

::

     start ─> InstrFetch <─ ifetch (device memory: every stream's queue words)
                 │ q_tensor ──> EngineQueue ──> TensorFeed ──LS/MM words, beats──> TensorEngine ──> PSUM
                 │ q_vector ──> EngineQueue ──> VectorEngine: Evict ────────── ve port ──────────┘
                 │                                            Quantize (v4)
                 └ q_dma{q} ──> EngineQueue ──> DmaIssue ──> DGE 0 / DGE 1 ──> DMA engines ──> axi{k}
                                                                                   │ sbuf{k}
     TensorFeed ── engine0 ──> SBUF <── engine1 ── VectorEngine   (a port per engine)

A ``start`` per stream tells the fetch unit where its queue words are in device memory and how
many (:func:`~ncrtl.hdl.neuroncore.isa.program_image` lays them out); it reads them on
``ifetch`` into each queue.  Every queue waits on the semaphores of all streams (``sem``, the streams' completion counts)
and counts its own engine's completions: a matmul when PSUM has written its group, a copy when
its last word is written, a ``quantize_mx`` when its last codes and scales are, a DMA transfer
when all its parts are done (in queue order).  See
docs/neuroncore.md and :mod:`ncrtl.model.neuroncore.isa`.
"""

from amaranth.hdl import Cat, Const, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ncrtl.hdl.common.axi import AxiManager
from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.core.top import MatmulCore
from ncrtl.hdl.dma.core import DmaCore
from ncrtl.hdl.sbuf.memory import MultiPortSbuf
from ncrtl.model.dma.dge import DGE_CYCLES
from ncrtl.model.neuroncore.isa import COUNT_BITS, Geometry

from .dma import DmaIssue
from .fetch import InstrFetch, start_layout
from .isa import dma_widths, op_layouts
from .ports import ErrorStrobe
from .queue import EngineQueue
from .tensor import TensorFeed
from .vector import VectorEngine

__all__ = ["NeuronCore", "ErrorSource", "core_signature", "SBUF_CLIENTS"]

#: The compute engines on the SBUF's engine ports, in port order.
SBUF_CLIENTS = ("tensor", "vector")


class ErrorSource:
    """``error.code[4:]``: which block strobed (``error.code[:4]`` is its own code)."""

    TENSOR = 1  #: the Tensor Engine rejected an instruction (``isa.Error``)
    PSUM = 2  #: PSUM rejected a write or a request
    QUEUE = 3  #: a queue dropped a wait on a semaphore the core lacks
    DGE = 4  #: a descriptor generator refused a transfer
    FETCH = 6  #: the instruction fetch took a bad start or read response (``fetch.FetchError``)
    VECTOR = 5  #: the Vector Engine refused an operation (``vector.VectorError``)


def core_signature(geo):
    """The :class:`NeuronCore`'s ports at geometry ``geo`` (its Interface), without building
    the core: what a testbench derives its drivers from."""
    streams = geo.streams()
    members = {
        "start": In(stream.Signature(start_layout(geo))),
        "ifetch": Out(AxiManager(geo.word_bytes, dma_widths(geo).addr_bits)),
    }
    for k in range(geo.dma_engines):
        members[f"axi{k}"] = Out(AxiManager(geo.word_bytes, dma_widths(geo).addr_bits))
    members["sem"] = Out(data.ArrayLayout(COUNT_BITS, len(streams)))
    members["error"] = Out(ErrorStrobe(8))
    return wiring.Signature(members)


class NeuronCore(wiring.Component):
    """One NeuronCore (the module docstring).

    Parameters
    ----------
    geo : Geometry
        Its parameters (:class:`ncrtl.model.neuroncore.isa.Geometry`: NeuronCore-v3's by
        default).
    instance : bool
        PEs, PSUM slots, memories and the Vector Engine's lanes as Verilog instances (True) or
        Amaranth submodules.
    modes : str or None
        The PE modes built (:class:`~ncrtl.hdl.tensor_engine.top.TensorEngine`).
    dge_cycles : int
        The descriptor generators' latency (:class:`~ncrtl.hdl.dma.dge.Dge`).
    outstanding : int
        Device-memory reads (bursts) each DMA engine keeps in flight.
    burst : int
        The most beats of a DMA engine's device-memory read.

    Interface
    ---------
    start : In(stream.Signature(start_layout(geo)))
        Where a stream's queue words are in device memory, and how many (``InstrFetch``).
    ifetch : Out(AxiManager(word_bytes, addr_bits))
        The instruction fetch's device-memory port (reads only).
    axi{k} : Out(AxiManager(word_bytes, addr_bits))
        DMA engine ``k``'s device-memory port.
    sem : Out(data.ArrayLayout(16, streams))
        Every stream's completed instructions.
    error : Out(ErrorStrobe(8))
    """

    @validated_init
    def __init__(
        self,
        geo=None,
        *,
        instance=False,
        modes=None,
        dge_cycles=DGE_CYCLES,
        outstanding=8,
        burst=16,
    ):
        geo = geo if geo is not None else Geometry()
        if not isinstance(geo, Geometry):
            raise TypeError(f"NeuronCore geo must be a Geometry, not {geo!r}")
        self.geo = geo
        self.layouts = op_layouts(geo)
        self.streams = geo.streams()
        self.matmul = MatmulCore(
            geo.rows,
            geo.cols,
            geo.psum_banks,
            geo.psum_bank_bytes,
            instance=instance,
            tile_unit=geo.tile_unit,
            modes=modes,
        )
        # the MX scale and double-row paths where the PEs have those modes
        built = {mode.name for mode in self.matmul.te.modes}
        self.feed = TensorFeed(geo, mx="mx" in built, double_row="double_row" in built)
        self.vector = VectorEngine(geo, instance=instance)
        self.issue = DmaIssue(geo)
        self.dma = DmaCore(
            geo.word_bytes,
            engines=geo.dma_engines,
            widths=dma_widths(geo),
            partitions=geo.partitions,
            partition_bytes=geo.partition_bytes,
            hbm_bytes=geo.hbm_bytes,
            outstanding=outstanding,
            burst=burst,
            dge_cycles=dge_cycles,
            semaphores=self.issue.semaphores,
            sbuf=False,
        )
        self.sbuf = MultiPortSbuf(
            geo.dma_engines,
            geo.partitions,
            geo.partition_bytes,
            geo.word_bytes,
            engine_ports=len(SBUF_CLIENTS),
            instance=instance,
        )
        self.queues = {s: EngineQueue(self.layouts[s], len(self.streams)) for s in self.streams}
        self.fetch = InstrFetch(geo, self.layouts)
        super().__init__(core_signature(geo))

    def axi(self, k):
        return getattr(self, f"axi{k}")

    def cells(self):
        """The modules placed with ``Instance``: the matmul path's, the SBUF's, the Vector
        Engine's."""
        return self.matmul.cells() + self.sbuf.cells() + self.vector.cells()

    def elaborate(self, platform):
        m = Module()
        geo = self.geo
        m.submodules.matmul = mc = self.matmul
        m.submodules.feed = feed = self.feed
        m.submodules.vector = ve = self.vector
        m.submodules.issue = iss = self.issue
        m.submodules.dma = dc = self.dma
        m.submodules.sbuf = sb = self.sbuf
        m.submodules.fetch = fetch = self.fetch
        connect(m, flipped(self.start), fetch.start)
        connect(m, fetch.axi, flipped(self.ifetch))

        # the queues, the semaphores
        counts = []
        for s in self.streams:
            q = self.queues[s]
            m.submodules[f"queue_{s}"] = q
            connect(m, fetch.queue(s), q.entries)
            counts.append(q.count)
        for s in self.streams:
            m.d.comb += self.queues[s].sems.count.eq(Cat(*counts))
        m.d.comb += self.sem.eq(Cat(*counts))
        connect(m, self.queues["tensor"].engine, feed.queue)
        connect(m, self.queues["vector"].engine, ve.queue)
        for q in range(geo.dma_queues):
            connect(m, self.queues[f"dma{q}"].engine, getattr(iss, f"queue{q}"))

        # the matmul path
        connect(m, feed.te_instr, mc.te_instr)
        connect(m, feed.stationary, mc.stationary)
        connect(m, feed.moving, mc.moving)
        connect(m, feed.psum_instr, mc.psum_instr)
        m.d.comb += feed.psum_done.eq(mc.o_done)
        connect(m, ve.psum, mc.ve)
        m.d.comb += [mc.se.req.valid.eq(0), mc.se.resp.ready.eq(1), mc.seed.valid.eq(0)]

        # the SBUF: a port per compute engine, a port per DMA engine
        for j, engine in enumerate((feed, ve)):
            connect(m, engine.sbuf, sb.engine_port(j))
        for k in range(geo.dma_engines):
            sport = dc.sbuf_port(k)
            connect(m, sport.req, sb.dma_req_port(k))
            connect(m, sb.dma_resp_port(k), sport.resp)

        # the DMA
        for d in range(2):
            connect(m, getattr(iss, f"dge{d}"), getattr(dc, f"instr{d}"))
            connect(m, getattr(dc, f"dge_status{d}"), getattr(iss, f"dge_status{d}"))
        m.d.comb += [iss.sem.eq(dc.sem), dc.direct.valid.eq(0)]
        for k in range(geo.dma_engines):
            connect(m, dc.axi(k), flipped(self.axi(k)))

        # errors: the first strobing source this cycle
        sources = [
            (mc.te_error.valid, ErrorSource.TENSOR, mc.te_error.code),
            (mc.psum_error.valid, ErrorSource.PSUM, mc.psum_error.code),
            (mc.ve_error.valid, ErrorSource.PSUM, mc.ve_error.code),
            (iss.error.valid, ErrorSource.DGE, iss.error.code),
            (ve.error.valid, ErrorSource.VECTOR, ve.error.code),
            (fetch.error.valid, ErrorSource.FETCH, fetch.error.code),
        ]
        sources += [(q.error.valid, ErrorSource.QUEUE, q.error.code) for q in self.queues.values()]
        for valid, src, code in reversed(sources):
            with m.If(valid):
                m.d.comb += [
                    self.error.valid.eq(1),
                    self.error.code.eq(Cat(Cat(code, Const(0, 4))[:4], Const(src, 4))),
                ]
        return m
