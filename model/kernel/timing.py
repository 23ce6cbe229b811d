"""The timing of a kernel's streams on one NeuronCore: an event-driven model on
:mod:`ncrtl.model.event`.

Each stream is a process at its engine's clock that takes its next instruction once the
instruction's semaphore waits are met and the engine can take it, and signals its stream's
semaphore when the instruction completes (a stream's instructions complete in order).  The
engines charge by the rules the project's block models state (docs/kernels.md lists every
approximation):

* **Tensor Engine** (2.4 GHz; 2.8 on v2): each matmul or transpose is its LoadStationary and
  MultiplyMoving issued to :class:`ncrtl.model.tensor_engine.timing.Sequencer`, the same rules
  as ``ncrtl timing matmul`` (loader and sequencer occupancy, the 4 LoadStationary chains,
  parallel tiles, the background transpose plane), issued no earlier than the cycle its waits
  are met; it completes when its last output vector reaches PSUM.  A stream of matmuls alone
  gives exactly ``ncrtl timing matmul``'s cycles.  A sparse matmul (``nc_matmul_sparse``) is
  its LoadStationary and MultiplyMoving with the ratio in their ``sparse`` field: the dense
  timing of its ``K`` compressed rows, its MACs the dense-equivalent ones.
* **DMA**: a transfer's elements are split by partition over the 16 engines (at most one part
  per partition group); each part moves its words (16-byte data-path words, counted per
  contiguous run of either side) at the rate of :func:`ncrtl.model.dma.timing.bandwidth_cycles`
  (device-memory reads in bursts of a source run's words, a DMA transpose's a word each) on
  its engine (1.4 GHz), one part after another per engine, and completes the fixed latency
  of the engine's timing later (the documented 1.3 us per-transfer overhead, the address
  generators' start and the memory's latency), which the engine overlaps with other parts'
  data; an SBUF -> SBUF transpose moves at half the rate (the block model's measured 0.50).  The
  transfer completes when its last part has.
* **Vector / Scalar / GpSimd** (0.96 / 1.2 / 1.2 GHz on v3): an instruction occupies its engine
  one cycle per element of a partition per tensor input (``N`` with one input, ``2N`` with
  two), divided by the Vector Engine's performance mode (4x / 2x for BF16/FP16, seed 000), and
  completes :data:`FIXED_LATENCY` cycles after (the documented fixed cost of a small or
  dependent instruction; independent ones overlap it).  The Vector Engine in its performance
  mode shares an SBUF bus with the GpSimd Engine (on v2 every Vector SBUF access does), and
  the Vector and Scalar engines share each PSUM bank (on v2 the whole PSUM): an instruction
  waits for a gap where the other engine does not hold what it uses.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

from ncrtl.model.dma.timing import EngineTiming, bandwidth_cycles
from ncrtl.model.event import Clock, EventCore, Semaphore, Trace
from ncrtl.model.kernel import loops
from ncrtl.model.kernel.build import collector_paused
from ncrtl.model.kernel.collective import GROUP_OPS, LINKS
from ncrtl.model.kernel.collective import link_ns as group_link_ns
from ncrtl.model.kernel.collective import members as group_members
from ncrtl.model.kernel.collective import rendezvous as group_key
from ncrtl.model.kernel.golden import KernelError, deadlock
from ncrtl.model.kernel.ops import STREAMS
from ncrtl.model.kernel.ops.shared import LOADED
from ncrtl.model.modes import SPARSE_GROUP
from ncrtl.model.tensor_engine import isa as te_isa
from ncrtl.model.tensor_engine.timing import (
    DOCUMENTED,
    Sequencer,
    macs_per_beat,
    peak_macs_per_cycle,
    throttle_at,
)

__all__ = [
    "simulate",
    "Report",
    "Params",
    "DgeStage",
    "DmaCosts",
    "DMA_COSTS",
    "ComputeCosts",
    "dma_costs",
    "FIXED_LATENCY",
    "DMA_WORD_BYTES",
]

#: Cycles from the end of a Vector / Scalar / GpSimd instruction's occupancy to its completion.
FIXED_LATENCY = 100
#: The DMA engines' data-path word.
DMA_WORD_BYTES = 16
#: The documented per-transfer overhead, 1.3 us, in cycles of the 1.4 GHz DMA clock.
DMA_OVERHEAD = 1820


@dataclass(frozen=True)
class DmaCosts:
    """The DMA engines' costs as the documentation states them (docs/kernels.md, "Costs"):
    ``bytes_per_ns`` one engine's peak (the NKI DMA bandwidth guide: 17 / 23 / 33 B/ns on
    Trainium1 / 2 / 3), ``packet_bytes`` the per-packet (descriptor) cost as the bytes an engine
    moves in that time (fitted to the guide's payload curve: below 256 B per partition the
    packet costs more than its data), ``latency_ns`` the cross-engine semaphore-to-start
    latency (overlapped with other transfers' data), the rate of a DMA transpose against a copy
    from the device memory and from the SBUF (seed 000: up to 90%, up to 50%), and ``dge_ns``
    a descriptor generator's time per instruction (seed 000: about 600 ns on NeuronCore-v3).

    One engine moves ``rows`` partitions of ``b`` bytes each, ``k`` packets per partition, in
    ``rows x (k x packet_bytes + b / rate) / bytes_per_ns`` ns (:meth:`engine_ns`); a transfer
    of ``P`` partitions uses ``min(16, P)`` engines, each ``ceil(P / engines)`` partitions."""

    bytes_per_ns: float
    packet_bytes: float = 256
    latency_ns: float = 1300
    transpose_hbm: float = 0.9
    transpose_sbuf: float = 0.5
    dge_ns: float = 600

    @property
    def packet_ns(self):
        return self.packet_bytes / self.bytes_per_ns

    def engine_ns(self, rows, bytes_per_row, packets_per_row=1, rate=1.0):
        """ns one engine takes to move ``rows`` partitions (rows of the transfer) of
        ``bytes_per_row`` bytes in ``packets_per_row`` packets each, at ``rate`` of a copy."""
        return rows * (
            packets_per_row * self.packet_ns + bytes_per_row / (rate * self.bytes_per_ns)
        )

    def transfer_ns(
        self, partitions, bytes_per_partition, packets_per_partition=1, engines=16, rate=1.0
    ):
        """ns of data movement of a lone transfer (the latency apart): its busiest engine's."""
        parts = max(1, min(engines, partitions))
        rows = -(-partitions // parts)
        return self.engine_ns(rows, bytes_per_partition, packets_per_partition, rate)

    def efficiency(self, bytes_per_packet):
        """The fraction of an engine's peak a stream of packets of ``bytes_per_packet`` gets."""
        return bytes_per_packet / (bytes_per_packet + self.packet_bytes)


@dataclass(frozen=True)
class ComputeCosts:
    """The Vector, Scalar and GpSimd engines' costs as the NKI ISA reference and performance
    guide state them (docs/kernels.md, "Costs"), in cycles of the engine's clock: an
    instruction of ``N`` elements per partition per tensor input (``N`` with one input, ``2N``
    with two) streams them at one a cycle, divided by a performance mode (the Vector Engine's
    4x / 2x on v3 and v4; the Scalar Engine's 2x BF16/FP16 ``tensor_copy`` / ``tensor_scalar``
    on v4: ``scalar_bf16``) or, outside one, halved when an operand's innermost stride is
    above ``stride_bytes``; it occupies its engine at least ``min_ii`` cycles (the minimum
    initiation interval), a GpSimd instruction ``gpsimd_startup`` cycles more (and no
    ``min_ii``); it completes ``access_cycles`` per tensor it reads or writes after that (the
    fixed cost of a tensor access, which independent instructions overlap)."""

    min_ii: int = 64
    access_cycles: int = 60
    stride_bytes: int = 16
    gpsimd_startup: int = 150
    scalar_bf16: bool = False

    def cycles(self, engine, elements, factor=1, strided=False, accesses=2):
        """``(occupancy, completion latency)`` in cycles of an instruction on ``engine``
        (``"vector"``, ``"scalar"``, ``"gpsimd"``) streaming ``elements`` element-cycles
        (elements per partition x tensor inputs) at ``factor`` x one a cycle."""
        if strided and factor == 1:
            factor = 0.5
        stream = -(-elements // factor) if factor >= 1 else elements * round(1 / factor)
        if engine == "gpsimd":
            occ = self.gpsimd_startup + stream
        else:
            occ = max(self.min_ii, stream)
        return occ, self.access_cycles * accesses


#: Per-engine DMA bandwidth by NeuronCore version (the NKI DMA bandwidth guide's table:
#: TRN1 17, TRN2 23, TRN3 33 B/ns; 272 / 368 / 528 GB/s over 16 engines).
DMA_COSTS = {"v2": DmaCosts(17), "v3": DmaCosts(23), "v4": DmaCosts(33)}


def dma_costs(core):
    """The documented :class:`DmaCosts` of ``core`` (a :class:`~ncrtl.model.kernel.stream.Core`
    or its name)."""
    name = getattr(core, "name", core)
    if name not in DMA_COSTS:
        raise ValueError(f"no documented DMA costs for core {name!r}: {', '.join(DMA_COSTS)}")
    return DMA_COSTS[name]


@dataclass(frozen=True)
class DgeStage:
    """Descriptor generators in front of the DMA engines, as the RTL core has them
    (``ncrtl.hdl.neuroncore.dma.DmaIssue`` on ``ncrtl.hdl.dma.dge.Dge``): stream ``dma{q}``
    (of ``queues``) issues to generator ``q % count``, which takes one transfer at a time (its
    first part ``cycles`` DMA cycles after it takes it, a part per cycle, the next transfer
    ``cycles + parts + 1`` cycles after; :meth:`ncrtl.model.dma.dge.DgeTiming.schedule`),
    among the streams asking round robin from the one after the last it took (the second of
    its queues first); a stream keeps ``in_flight`` transfers issued and not complete.
    Without it (the default) a transfer's issue cost is part of the DMA engines' fixed
    overhead."""

    cycles: int
    count: int = 2
    in_flight: int = 4
    queues: int = 16


@dataclass(frozen=True)
class Params:
    """The timing model's parameters: the Tensor Engine's rules, the DMA engines' timing, the
    descriptor generators (:class:`DgeStage`; none by default), and ``starts``: per stream
    (``"tensor"``, ``"dma0"`` ...) the cycle of its engine's clock from which it may take its
    first instruction (every stream from 0 by default; the RTL core's instruction fetch
    staggers them: ``ncrtl.hdl.neuroncore.isa.fetch_starts``).

    ``dma_costs``: ``"documented"`` (the default) charges a transfer the documented costs of
    its core version (:data:`DMA_COSTS`); a :class:`DmaCosts` those; None the data-path words
    of ``dma`` (:func:`~ncrtl.model.dma.timing.bandwidth_cycles`) and its fixed latency, as
    the RTL core moves them.

    ``compute``: ``"documented"`` (the default) charges Vector, Scalar and GpSimd instructions
    the documented costs (:class:`ComputeCosts`); None one cycle per element per tensor input
    (over the Vector Engine's performance mode) and ``fixed_latency`` after.

    ``throttle``: ``"documented"`` (the default) gives the Tensor Engine of NeuronCore-v3 and
    v4 its warm-up throttle (:func:`~ncrtl.model.tensor_engine.timing.throttle_at` its clock);
    a :class:`~ncrtl.model.tensor_engine.timing.Throttle` that one; None none (v2, the RTL,
    ``--no-throttle``).

    ``link``: the device-to-device link a collective between ranks crosses
    (:class:`~ncrtl.model.kernel.collective.Link`): ``"documented"`` (the default) the core
    version's (:data:`~ncrtl.model.kernel.collective.LINKS`), None no link time."""

    te_rules: object = DOCUMENTED
    dma: EngineTiming = EngineTiming(word_bytes=DMA_WORD_BYTES, overhead=DMA_OVERHEAD)
    fixed_latency: int = FIXED_LATENCY
    dge: DgeStage | None = None
    starts: dict | None = None
    dma_costs: object = "documented"
    throttle: object = "documented"
    compute: object = "documented"
    link: object = "documented"

    def compute_for(self, core):
        """The :class:`ComputeCosts` on ``core`` (None: the element-per-cycle rule and
        ``fixed_latency``, as the RTL comparison runs)."""
        if self.compute == "documented":
            return ComputeCosts(scalar_bf16=core.name == "v4")
        return self.compute

    def throttle_for(self, core):
        """The Tensor Engine's throttle on ``core`` (None: none)."""
        if self.throttle == "documented":
            return throttle_at(core.tensor_mhz) if core.name in ("v3", "v4") else None
        return self.throttle

    def costs_for(self, core):
        """The :class:`DmaCosts` a run on ``core`` uses (None: the data-path word model)."""
        if self.dma_costs == "documented":
            return dma_costs(core)
        return self.dma_costs

    @property
    def dma_latency(self):
        """Cycles from a part's last word to its completion: the overhead, the address
        generators' start and the memory's latency (``ncrtl.model.dma.timing``'s phases)."""
        d = self.dma
        return d.overhead + 4 + d.read_latency + 4


@dataclass(slots=True)
class Record:
    """One instruction's timing in ticks: ``ready`` (its waits met), ``start``, ``end`` (its
    engine free of it), ``done`` (completion signalled); ``waited`` the ticks it waited after
    its engine could have started it, and on which ``(stream, index)``."""

    ins: object
    ready: int
    start: int
    end: int
    done: int
    waited: int = 0
    blocker: tuple = None
    stream: str = ""

    @property
    def label(self):
        """``stream[index] op`` (the stream's name carries the core of a logical core)."""
        return f"{self.stream or self.ins.engine}[{self.ins.index}] {self.ins.op}"


@dataclass
class Report:
    """The result of :func:`simulate` (times in ns unless named cycles)."""

    program: object
    core: EventCore
    records: dict
    total_ticks: int
    te_cycles: int
    busy: dict
    macs: int
    peak_macs_per_cycle: float
    dma_bytes: int
    trace: Trace = None
    te_window: tuple = None
    te_dtype: str = None
    events: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def total_ns(self):
        return self.core.ns(self.total_ticks)

    def utilization(self, window=False):
        """The Tensor Engine's MACs over its peak in the run (``window``: between its first
        matmul's issue and its last matmul's end)."""
        te = self.core.clocks["tensor"]
        if window and self.te_window:
            cycles = max(1, (self.te_window[1] - self.te_window[0]) // te.period)
        else:
            cycles = max(1, self.total_ticks // te.period)
        if not self.peak_macs_per_cycle:
            return 0.0
        return self.macs / (cycles * self.peak_macs_per_cycle)

    def tflops(self, window=False):
        te = self.core.clocks["tensor"]
        ticks = (
            (self.te_window[1] - self.te_window[0])
            if window and self.te_window
            else self.total_ticks
        )
        if not ticks:
            return 0.0
        seconds = ticks / (self.core.tick_mhz * 1e6)
        return 2 * self.macs / seconds / 1e12 if te else 0.0

    def peak_tflops(self):
        return 2 * self.peak_macs_per_cycle * self.core.clocks["tensor"].mhz * 1e6 / 1e12

    def longest_waits(self, n=10):
        """The ``n`` longest waits: ``(ns, waiter record, blocker record)``."""
        recs = [r for rs in self.records.values() for r in rs if r.waited > 0]
        recs.sort(key=lambda r: -r.waited)
        out = []
        for r in recs[:n]:
            b = self.records[r.blocker[0]][r.blocker[1]] if r.blocker else None
            out.append((self.core.ns(r.waited), r, b))
        return out

    def peak_flops_ns(self):
        """The Tensor Engine's peak FLOPs per ns in the widest mode the kernel used."""
        return 2 * self.peak_macs_per_cycle * self.core.clocks["tensor"].mhz / 1000

    def mfu(self):
        """Useful FLOPs (the matmuls', transposes apart) over the peak's in the run."""
        peak = self.peak_flops_ns() * self.total_ns
        return 2 * self.macs / peak if peak else 0.0

    def hfu(self):
        """Issued FLOPs (every matmul the PE array ran, transposes as the identity matmuls
        they are) over the peak's in the run (a kernel of transposes alone: their mode's)."""
        per_cycle = self.extra.get("issued_peak", self.peak_macs_per_cycle)
        peak = 2 * per_cycle * self.core.clocks["tensor"].mhz / 1000 * self.total_ns
        return 2 * self.extra.get("issued_macs", self.macs) / peak if peak else 0.0

    def mbu(self):
        """DMA bytes over what the DMA engines' peak moves in the run."""
        peak = self.extra.get("dma_peak_gbps", 0) * self.total_ns
        return self.dma_bytes / peak if peak else 0.0

    def instances(self):
        """The launch grid's instances: core, position, start, end and span in ns."""
        return _instances(self)

    def ranks(self):
        """Over N simulated ranks (``ncrtl run --ranks N``): per rank its time in ns, from
        the run's start to its cores' last completion (empty for a run on one device)."""
        programs = self.program if isinstance(self.program, list) else [self.program]
        if getattr(programs[0], "rank", None) is None:
            return []
        ends = {}
        for n, rs in self.records.items():
            c = int(n.partition(".")[0][4:]) if len(programs) > 1 else 0
            r = programs[c].rank
            ends[r] = max([ends.get(r, 0)] + [x.done for x in rs])
        nranks = max(p.rank for p in programs) + 1
        return [{"rank": r, "ns": round(self.core.ns(ends.get(r, 0)), 3)} for r in range(nranks)]

    def _ranks_summary(self):
        ranks = self.ranks()
        if not ranks:
            return {}
        slow = max(ranks, key=lambda r: r["ns"])
        return {"ranks": ranks, "slowest_rank": slow["rank"], "slowest_rank_ns": slow["ns"]}

    def dma_queues(self):
        """Per DMA queue (and ``"dma_engines"``, the engines together): its bytes, the GB/s it
        achieved while it had transfers moving (the engines: over the run) and its fraction of
        the generation's peak, the average payload per partition."""
        peak = self.extra.get("dma_peak_gbps", 0)
        cores = len(self.program) if isinstance(self.program, list) else 1
        out = {}
        total_bytes = total_rows = 0
        for name, recs in self.records.items():
            local = name.rsplit(".", 1)[-1]
            if not local.startswith("dma") or not recs:
                continue
            nbytes = rows = 0
            for r in recs:
                if not _moves(r.ins):
                    continue
                b, p, _ = _dma_shape(r.ins)
                nbytes, rows = nbytes + b, rows + p
            ns = self.core.ns(_union([(r.start, r.end) for r in recs]))
            gbps = nbytes / ns if ns else 0.0
            out[name] = _queue_entry(nbytes, gbps, peak / cores, rows)  # its core's engines
            total_bytes, total_rows = total_bytes + nbytes, total_rows + rows
        if out:
            gbps = total_bytes / self.total_ns if self.total_ns else 0.0
            out["dma_engines"] = _queue_entry(total_bytes, gbps, peak, total_rows)
        return out

    def dma_engines(self):
        """Per DMA engine of each core (``dma_engine0`` .. ``dma_engine15``, a logical core's
        with its ``coreN.``): the bytes it moved, its GB/s over the run and that fraction of
        one engine's peak, its payload per partition.  A transfer of ``R`` rows spreads over
        ``min(engines, R)`` engines, ``ceil`` or ``floor(R / engines)`` rows each, the first
        engines taking the extra rows (the rule the DMA queues' cost follows: fewer partitions
        use fewer engines, docs/kernels.md "Costs")."""
        programs = self.program if isinstance(self.program, list) else [self.program]
        engines = programs[0].core.dma_engines
        peak = self.extra.get("dma_peak_gbps", 0) / (engines * len(programs))
        moved = {}
        for name, recs in self.records.items():
            core, _, local = name.rpartition(".")
            if not local.startswith("dma") or not recs:
                continue
            prefix = f"{core}." if core else ""
            shapes = {}  # (bytes, rows) -> transfers: a kernel repeats few shapes
            for r in recs:
                if not _moves(r.ins):
                    continue
                b, rows, _ = _dma_shape(r.ins)
                shapes[b, rows] = shapes.get((b, rows), 0) + 1
            for (b, rows), times in shapes.items():
                parts = min(engines, rows)
                each, extra = divmod(rows, parts)
                for e in range(parts):
                    n = each + (e < extra)
                    got = moved.setdefault(f"{prefix}dma_engine{e}", [0, 0])
                    got[0] += times * (b * n // rows)
                    got[1] += times * n
        out = {}
        for key in sorted(
            moved, key=lambda k: (k.rpartition("dma_engine")[0], int(k.rpartition("dma_engine")[2]))
        ):
            nbytes, rows = moved[key]
            gbps = nbytes / self.total_ns if self.total_ns else 0.0
            out[key] = _queue_entry(nbytes, gbps, peak, rows)
        return out

    def engine_waits(self):
        """``{engine: {engine it waited on: ns}}``: the time each engine's instructions waited
        past the moment it could have started them, by the engine of what they waited for (a
        core's DMA queues together as ``dma``)."""
        out = {}
        for recs in self.records.values():
            for r in recs:
                if r.waited > 0 and r.blocker:
                    w, b = _engine_of(r.stream), _engine_of(r.blocker[0])
                    row = out.setdefault(w, {})
                    row[b] = row.get(b, 0) + r.waited
        return {
            w: {b: round(self.core.ns(t), 3) for b, t in sorted(row.items())}
            for w, row in sorted(out.items())
        }

    def summary(self):
        """The report as a dict (``report.json``)."""
        c = self.core
        te = c.clocks["tensor"]
        programs = self.program if isinstance(self.program, list) else [self.program]
        if len(programs) == 1:
            counts = programs[0].counts()
        else:
            counts = {
                f"core{i}.{k}": v for i, p in enumerate(programs) for k, v in p.counts().items()
            }
        return {
            "kernel": programs[0].kernel,
            "core": programs[0].core.name,
            "logical_cores": len(programs),
            "total_ns": round(self.total_ns, 3),
            "tensor_engine_cycles": self.te_cycles,
            "tensor_engine_ghz": te.ghz,
            "instructions": {k: v for k, v in counts.items() if v},
            # dynamic loops run their bodies many times: the instructions each stream ran
            **(
                {"instructions_run": {n: len(r) for n, r in self.records.items() if r}}
                if any(p.trips for p in programs)
                else {}
            ),
            "busy_fraction": {k: round(v, 4) for k, v in self.busy.items()},
            "te_utilization": round(self.utilization(), 4),
            "te_utilization_matmul_window": round(self.utilization(window=True), 4),
            "te_matmul_window_cycles": (
                (self.te_window[1] - self.te_window[0]) // te.period if self.te_window else 0
            ),
            "te_tflops": round(self.tflops(), 3),
            "te_peak_tflops": round(self.peak_tflops(), 3),
            "te_dtype": self.te_dtype,
            "dma_bytes": self.dma_bytes,
            "dma_gbps": round(self.dma_bytes / self.total_ns, 3) if self.total_ns else 0.0,
            "dma_peak_gbps": round(self.extra.get("dma_peak_gbps", 0), 3),
            "dma_queues": self.dma_queues(),
            "dma_engines": self.dma_engines(),
            "mfu": round(self.mfu(), 4),
            "hfu": round(self.hfu(), 4),
            "mbu": round(self.mbu(), 4),
            "throttle": self.extra.get("throttle", {"modelled": False}),
            "engine_waits_ns": self.engine_waits(),
            "instances": self.instances(),
            **self._ranks_summary(),
            "longest_waits": [
                {
                    "ns": round(ns, 3),
                    "instruction": r.label,
                    "line": r.ins.line,
                    "waited_on": b.label if b else None,
                    "waited_on_line": b.ins.line if b else None,
                }
                for ns, r, b in self.longest_waits()
            ],
        }


def _queue_entry(nbytes, gbps, peak, rows):
    return {
        "bytes": nbytes,
        "gbps": round(gbps, 3),
        "of_peak": round(gbps / peak, 4) if peak else 0.0,
        "bytes_per_partition": round(nbytes / rows, 1) if rows else 0.0,
    }


def _engine_of(stream):
    """The engine of a stream: its name, a DMA queue's ``dma`` (a logical core's with its
    ``coreN.``)."""
    core, _, local = stream.rpartition(".")
    if local.startswith("dma"):
        local = "dma"
    return f"{core}.{local}" if core else local


def _moves(ins):
    """Whether a DMA queue's instruction moves data on the engines (not a loop's or a
    register's instruction on the queue, nor a constant loaded with the model)."""
    return bool(ins.dsts) and bool(ins.srcs) and ins.op not in LOADED


def _dma_shape(ins):
    """``(bytes, rows, packets)`` of a transfer: its destination's bytes; its rows, the
    partitions of its on-chip side (device memory to device memory: the source's outer
    entries); its packets, the contiguous runs of either side (a transpose: of its
    destination), at least one per row; a collective's pairs together."""
    if len(ins.dsts) > 1:  # a collective's (src, dst) pairs (coalesced tensors, channels)
        parts = [_dma_shape(replace(ins, dsts=(d,), srcs=(r,))) for d, r in zip(ins.dsts, ins.srcs)]
        return tuple(sum(p[k] for p in parts) for k in range(3))
    (dst,), src = ins.dsts, ins.srcs[0]
    side = dst if dst.on_chip else src
    rows = max(1, side.view_shape[0])
    if ins.op == "dma_transpose":
        # the engines write the destination's tiles together: its runs are the packets
        packets = max(rows, _runs(dst))
    else:
        packets = max(rows, _runs(dst), _runs(src))
    for spec in ins.args.get("indirect", ()):
        if spec["kind"] == "vector":  # a gathered / scattered row is packets of its own
            ref = (ins.dsts if spec["side"] == "dst" else ins.srcs)[spec["at"]]
            one = replace(ref, pattern=((ref.pattern[0][0], 1), *ref.pattern[1:]))
            packets = max(packets, ref.view_shape[0] * _runs(one))
    # dma_compute: the engine's passes over the data (each source it reads)
    passes = ins.args.get("passes", 1)
    return dst.size * dst.element.itemsize * passes, rows, packets * passes


class _Stream:
    __slots__ = (
        "name",
        "instrs",
        "pos",
        "sem",
        "clock",
        "free",
        "last_done",
        "records",
        "busy",
        "core",
        "local",
        "issued",
        "pending",
        "flow",
    )

    def __init__(self, name, instrs, clock):
        self.name, self.instrs, self.clock = name, instrs, clock
        self.pos = 0
        self.issued = 0  # with a DgeStage: transfers issued (``pos``: completed)
        self.pending = []  # with a DgeStage: issued transfers, oldest first
        self.sem = Semaphore(name)
        self.free = 0  # tick the engine can take its next instruction
        self.last_done = 0
        self.records = []
        self.busy = 0
        self.flow = None  # its sequencer (ncrtl.model.kernel.loops.Runner) where loops run


class _DmaPool:
    """The DMA engines as one pool shared by the transfers in flight: each gets an equal share
    of the engines, at most one engine per part (water-filling), recomputed whenever a transfer
    starts or ends (the queues' round robin at descriptor granularity, as a fluid)."""

    def __init__(self, ev, engines, on_rate=None):
        self.ev, self.engines = ev, engines
        self.on_rate = on_rate  # called with the engines in use whenever the shares change
        self.active = []  # [remaining engine-ticks, cap (engines), callback]
        self.rates = []
        self.last = 0
        self.version = 0
        self.busy = 0.0  # engine-ticks moved

    def _progress(self):
        dt = self.ev.now - self.last
        if dt:
            for a, r in zip(self.active, self.rates):
                a[0] -= r * dt
                self.busy += r * dt
        self.last = self.ev.now

    def _water_fill(self):
        n = len(self.active)
        rates = [0.0] * n
        free = float(self.engines)
        # strict priority (NeuronCore-v4 DMA QoS): a level's transfers share what the levels
        # before it leave
        for level in sorted({a[3] for a in self.active}):
            left = sorted(
                (i for i in range(n) if self.active[i][3] == level),
                key=lambda i: self.active[i][1],
            )
            for k, i in enumerate(left):
                share = free / (len(left) - k)
                rates[i] = min(self.active[i][1], share)
                free -= rates[i]
        self.rates = rates

    def _reschedule(self):
        self._water_fill()
        if self.on_rate is not None:
            self.on_rate(sum(self.rates))
        self.version += 1
        if self.active:
            t = min(a[0] / r for a, r in zip(self.active, self.rates) if r > 0)
            self.ev.at(
                self.ev.now + max(0, -(-int(t * 1000) // 1000)), self._complete, self.version
            )

    def submit(self, work, cap, callback, level=3):
        """Start a transfer of ``work`` engine-ticks on at most ``cap`` engines at QoS
        ``level`` (0 first .. 3, the default); ``callback`` when it is done."""
        self._progress()
        self.active.append([float(work), cap, callback, level])
        self._reschedule()

    def _complete(self, version):
        if version != self.version:
            return
        self._progress()
        # done: what is left is under the thousandth of a tick the completion is timed to (a
        # float's residue of large work at fractional rates; timed again it would be 0 ticks
        # away, and the run would never advance)
        left = [a[0] <= 1e-6 or a[0] < r * 1e-3 for a, r in zip(self.active, self.rates)]
        done = [a for a, gone in zip(self.active, left) if gone]
        self.active = [a for a, gone in zip(self.active, left) if not gone]
        for a in done:
            self.busy += a[0]  # the rounding of the last step
        self._reschedule()
        for a in done:
            a[2]()


@dataclass
class _KernelTrace(Trace):
    """The kernel's trace with counter tracks (Perfetto draws them as graphs): the DMA
    engines in use, the Tensor Engine's rate under its warm-up throttle."""

    counters: list = field(default_factory=list)

    def counter(self, name, tick, value):
        last = self.counters[-1] if self.counters else None
        if last is not None and last[0] == name and last[1] == tick:
            self.counters[-1] = (name, tick, value)  # the last change of a tick stands
        else:
            self.counters.append((name, tick, value))

    def events(self):
        # a slice keeps its instruction and wait until written: its name and arguments (the
        # operands as text) are formed here, not held for every instruction of the run
        for ev in super().events():
            held = ev.get("args")
            if type(held) is tuple:
                ins, waited = held
                ev["name"] = f"{ins.op} {ins.line}"
                ev["args"] = {
                    "line": ins.line,
                    "call": ins.call,
                    "dst": ", ".join(map(str, ins.dsts)),
                    "src": ", ".join(map(str, ins.srcs)),
                    "wait_ns": round(self.core.ns(waited), 3),
                }
            yield ev
        if self.counters:
            pid = 1 << 20  # a process of its own, after the engines'
            yield {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "counters"}}
            us = 1 / self.core.tick_mhz
            for name, tick, value in self.counters:
                yield {"ph": "C", "name": name, "pid": pid, "ts": tick * us, "args": {name: value}}


class _Busy:
    """A shared resource: per engine the intervals it holds it, in time order (an engine's own
    follow each other; one that overlaps the last is merged into it, the same time held), so
    that an engine's request finds the gaps the others leave by bisection, however long the
    run.  Spans of an engine out of time order (none of the model's) are kept in one sorted
    list, searched whole."""

    __slots__ = ("starts", "ends", "unordered")

    #: Spans the searches for a gap visited, over every run (a test of linear cost counts
    #: them, never seconds).
    visited = 0

    def __init__(self):
        self.starts = {}  # engine -> the starts of its spans, in time order
        self.ends = {}  # engine -> their ends (in order too: the spans do not overlap)
        self.unordered = None  # every (start, end, engine), once one came out of order

    def add(self, start, end, engine):
        if self.unordered is None:
            starts = self.starts.setdefault(engine, [])
            ends = self.ends.setdefault(engine, [])
            if not starts or start >= ends[-1]:
                starts.append(start)
                ends.append(end)
                return
            if start >= starts[-1]:
                ends[-1] = max(ends[-1], end)
                return
            self.unordered = sorted(
                (a, b, e) for e, sts in self.starts.items() for a, b in zip(sts, self.ends[e])
            )
        bisect.insort(self.unordered, (start, end, engine))


def _earliest(holds, t, dur, engine):
    """The first start >= t at which none of ``holds`` is held by another engine for ``dur``."""
    moved = True
    while moved:
        moved = False
        for h in holds:
            if h.unordered is not None:
                _Busy.visited += len(h.unordered)
                for a, b, e in h.unordered:
                    if e != engine and a < t + dur and t < b:
                        t, moved = b, True
                continue
            for e, ends in h.ends.items():
                if e == engine:
                    continue
                starts = h.starts[e]
                i = first = bisect.bisect_right(ends, t)  # the first that ends after t
                n = len(ends)
                while i < n and starts[i] < t + dur:
                    if t < ends[i]:
                        t, moved = ends[i], True
                    i += 1
                _Busy.visited += i - first + 1
    return t


def _strided(ref, limit):
    """Whether the view ``ref``'s innermost stride (its last entry of more than one element)
    is above ``limit`` bytes."""
    for step, num in reversed(ref.pattern[1:]):
        if num > 1:
            return abs(step) * ref.element.itemsize > limit
    return False


def _runs(ref):
    """The contiguous runs of bytes of the view ``ref`` (an on-chip view's partitions apart):
    the packets a DMA engine moves it in."""
    return max(1, ref.size * ref.element.itemsize // _run_bytes(ref))


def _run_bytes(ref):
    """Bytes of one contiguous run of the view ``ref``."""
    run = ref.element.itemsize
    step = 1
    pat = ref.pattern
    for s, num in reversed(pat[1:] if ref.on_chip else pat):
        if num == 1:
            continue
        if s != step:
            break
        run *= num
        step *= num
    return run


def _runs_words(ref, *, per_run=False):
    """Data-path words to move the view ``ref``: per contiguous run of bytes, its words (with
    ``per_run``: the words of one run, the longest read burst the view allows)."""
    words = -(-_run_bytes(ref) // DMA_WORD_BYTES)
    return words if per_run else _runs(ref) * words


def simulate(program, *, params=None, trace=False):
    """The timing of ``program`` (or of the two programs of a logical core, ``kernel[2]``:
    each core its own engines and DMA pool, their streams named ``core0.tensor`` ...);
    returns a :class:`Report` (with a :class:`Trace` when ``trace``)."""
    params = params or Params()
    programs = list(program) if isinstance(program, (list, tuple)) else [program]
    core = programs[0].core
    clocks = {
        "tensor": Clock("tensor", core.tensor_mhz),
        "vector": Clock("vector", core.vector_mhz),
        "scalar": Clock("scalar", core.scalar_mhz),
        "gpsimd": Clock("gpsimd", core.gpsimd_mhz),
        "dma": Clock("dma", core.dma_mhz),
    }
    ev = EventCore(list(clocks.values()))
    tr = _KernelTrace(ev) if trace else None
    many = len(programs) > 1

    def key(c, name):
        return f"core{c}.{name}" if many else name

    streams = {}
    for c, p in enumerate(programs):
        for name, instrs in p.streams.items():
            clock = clocks["dma"] if name.startswith("dma") else clocks[name]
            st = _Stream(key(c, name), instrs, clock)
            st.core, st.local = c, name
            streams[st.name] = st
    throttle = params.throttle_for(core)
    link = LINKS.get(core.name) if params.link == "documented" else params.link
    # the trace's process per core: over N ranks its rank and its core in the rank
    core_names = [f"NeuronCore {c}" if many else "NeuronCore" for c in range(len(programs))]
    if getattr(programs[0], "rank", None) is not None and many:
        per = len(programs) // (max(p.rank for p in programs) + 1)
        core_names = [f"rank {p.rank} NeuronCore {c % per}" for c, p in enumerate(programs)]
    seqs = [
        Sequencer(
            core.rows, core.cols, tile_unit=core.tile_unit, rules=params.te_rules, throttle=throttle
        )
        for _ in programs
    ]
    pools = [
        _DmaPool(
            ev,
            core.dma_engines,
            (lambda v, c=c: tr.counter(key(c, "DMA engines in use"), ev.now, round(v, 3)))
            if tr is not None
            else None,
        )
        for c in range(len(programs))
    ]
    costs = params.costs_for(core)
    compute = params.compute_for(core)
    # a transfer completes this many ticks after its data has moved
    if costs is not None:
        dma_latency = round(costs.latency_ns * ev.tick_mhz / 1000)
    else:
        dma_latency = params.dma_latency * clocks["dma"].period
    dge = params.dge
    dge_state = [
        [{"free": 0, "last": 0, "asking": {}} for _ in range(dge.count if dge else 0)]
        for _ in programs
    ]
    v2 = core.name == "v2"
    # Per core: the SBUF bus VectorE (in its performance mode; on v2, always) shares with
    # GpSimdE, and each PSUM bank VectorE and ScalarE share (on v2, PSUM as one).
    buses = [_Busy() for _ in programs]
    banks = [[_Busy() for _ in range(core.psum_banks)] for _ in programs]
    # Descriptor generation (documented costs only): the two hardware DGEs' free ticks per
    # core, and the GpSimd engine as software DGE holds it (only when a transfer asks for it,
    # so that GpSimd's own instructions keep no spans otherwise).
    hw_dge_free = [[0, 0] for _ in programs]
    dge_ticks = round(costs.dge_ns * ev.tick_mhz / 1000) if costs is not None else 0
    sw_dge = costs is not None and any(
        i.args.get("dge") == "sw"
        for p in programs
        for n, st in p.streams.items()
        if n.startswith("dma")
        for i in st
    )
    gpsimd_engine = [_Busy() for _ in programs]
    decoded = {}  # instruction word -> Instruction, one object per distinct word
    stats = {
        "macs": 0,
        "issued_macs": 0,
        "issued_peak": 0.0,
        "dma_bytes": 0,
        "peak": 0.0,
        "dtype": None,
        "te_window": None,
    }
    slices = {n: [] for n in streams}  # stream -> its instructions' trace slices, in order
    rendezvous = {}  # (pipe, turn) -> {core: (stream, instruction, ready, waited, blocker)}

    def te_timing(s, ins, ready):
        period = s.clock.period
        earliest = s.clock.cycle_at(ready)
        first = None
        rec = None
        busy = 0
        for w in ins.args["te"]:  # its LoadStationary, then its MultiplyMoving(s)
            ins_w = decoded.get(w)
            if ins_w is None:
                ins_w = decoded[w] = te_isa.decode(int(w))
            rec = seqs[s.core].issue(ins_w, earliest)
            if not rec.accepted:
                raise KernelError(
                    f"{ins.line}: {ins.call} ({ins.label}): the Tensor Engine refused it: "
                    f"{rec.message}"
                )
            first = rec.issue if first is None else first
            busy = max(busy, rec.busy_until)
            mm = rec.instruction
            if mm.op == te_isa.Op.MM:
                stats["issued_macs"] += mm.k * mm.m * mm.pe_mode.products * (mm.sparse or 1) * mm.n
                if mm.transpose and not stats["issued_peak"]:
                    # a kernel of transposes alone: their mode's peak for HFU
                    stats["issued_peak"] = peak_macs_per_cycle(core.rows, core.cols, mm.mode)
            if mm.op == te_isa.Op.MM and not mm.transpose:
                # a sparse MM counts its dense-equivalent MACs against the sparse peak
                stats["macs"] += macs_per_beat(mm) * mm.n
                peak = peak_macs_per_cycle(core.rows, core.cols, mm.mode, mm.sparse)
                name = mm.pe_mode.name
                if mm.sparse:
                    name += f" {SPARSE_GROUP}:{SPARSE_GROUP * mm.sparse}"
                if peak > stats["peak"]:
                    stats["peak"], stats["dtype"] = peak, name
        if rec.instruction.op == te_isa.Op.MM and not rec.instruction.transpose:
            lo, hi = stats["te_window"] or (first * period, busy * period)
            stats["te_window"] = (min(lo, first * period), max(hi, busy * period))
        start, end = first * period, busy * period
        if tr is not None and throttle is not None and rec.instruction.op == te_isa.Op.MM:
            rate = 1 / throttle.factor if rec.throttled else 1.0
            tr.counter(key(s.core, "Tensor Engine rate (throttle)"), rec.issue * period, rate)
        done = (rec.outputs[-1] + 1) * period if rec.outputs else end
        return start, end, done

    def dma_work(ins):
        """``(engine-ticks of data movement, engines it can use)`` of a transfer."""
        (dst,), src = ins.dsts, ins.srcs[0]
        stats["dma_bytes"] += dst.size * dst.element.itemsize
        if costs is not None:
            return documented_dma_work(ins, dst, src)
        parts = max(
            1, min(core.dma_engines, dst.view_shape[0] if dst.on_chip else src.view_shape[0])
        )
        words = max(_runs_words(dst), _runs_words(src))
        # Reads from the device memory are bursts of a source run's words; a DMA transpose
        # reads a word per tile row.
        beats = None
        if not src.on_chip:
            beats = 1 if ins.op == "dma_transpose" else _runs_words(src, per_run=True)
        cycles = bandwidth_cycles(-(-words // parts), params.dma, beats)
        if ins.op == "dma_transpose" and src.on_chip and dst.on_chip:
            cycles *= 2
        return cycles * parts * clocks["dma"].period, parts

    def documented_dma_work(ins, dst, src):
        """The documented costs (:class:`DmaCosts`): the transfer's rows (partitions of its
        on-chip side, else the device side's outer entries) over ``min(16, rows)`` engines,
        each row its packets (the contiguous runs of the side cut finer, at least one) and
        its bytes at the engine's rate (a transpose's 90% from the device memory, 50% SBUF to
        SBUF)."""
        nbytes, rows, packets = _dma_shape(ins)
        rate = 1.0
        if ins.op == "dma_transpose":
            rate = costs.transpose_sbuf if src.on_chip else costs.transpose_hbm
        parts = min(core.dma_engines, rows)
        ns = costs.engine_ns(-(-rows // parts), nbytes / rows, packets / rows, rate)
        return ns * ev.tick_mhz / 1000 * parts, parts

    def compute_timing(s, ins, ready):
        period = s.clock.period
        dst = ins.dsts[0] if ins.dsts else ins.srcs[0]
        tensors = [r for r in ins.srcs if r.size > r.view_shape[0]]
        shape = STREAMS.get(ins.op)
        if shape is not None:  # an operation whose stream is not its destination's elements
            n, inputs = shape(ins)
        else:
            n = dst.size // dst.view_shape[0] if dst.view_shape else 1
            inputs = max(1, len(tensors))
        factor = vector_perf(ins, tensors) if s.local == "vector" else 1
        if compute is None:
            occ = -(-n * inputs // factor) * period
            latency = params.fixed_latency * period
        else:
            if s.local == "scalar":
                factor = scalar_perf(ins, tensors)
            occ, latency = compute.cycles(
                s.local,
                n * inputs,
                factor,
                any(_strided(r, compute.stride_bytes) for r in (*ins.dsts, *tensors)),
                len(ins.dsts) + len(tensors),
            )
            occ, latency = occ * period, latency * period
        # The shared resources it holds while it streams: the VectorE-GpSimdE SBUF bus, the
        # PSUM banks it touches (docs/kernels.md, "Shared SBUF and PSUM access").
        holds = []
        on_sbuf = any(r.space == "sbuf" for r in (*ins.dsts, *ins.srcs))
        if on_sbuf and (s.local == "gpsimd" or (s.local == "vector" and (factor > 1 or v2))):
            holds.append(buses[s.core])
        if sw_dge and s.local == "gpsimd":
            holds.append(gpsimd_engine[s.core])
        if s.local in ("vector", "scalar"):
            for r in (*ins.dsts, *ins.srcs):
                if r.space == "psum":
                    for bank in psum_banks(r):
                        holds.append(banks[s.core][0 if v2 else bank])
        start = max(ready, s.free)
        start = _earliest(holds, start, occ, s.local)
        for h in holds:
            h.add(start, start + occ, s.local)
        end = start + occ
        return start, end, end + latency

    def scalar_perf(ins, tensors):
        """The Scalar Engine's BF16/FP16 mode (NeuronCore-v4, seed 001): 2x for a
        tensor_copy / tensor_scalar whose tensors are all BF16/FP16; else 1."""
        if not compute.scalar_bf16 or ins.op not in ("tensor_copy", "tensor_scalar"):
            return 1
        refs = [ins.dsts[0], *tensors]
        return 2 if all(r.view_dtype in ("bfloat16", "float16") for r in refs) else 1

    def vector_perf(ins, tensors):
        """The Vector Engine's performance mode (NeuronCore-v3 and later, seed 000): 4x for a
        tensor_copy / tensor_scalar of BF16/FP16 in SBUF with contiguous innermost elements,
        2x for one not contiguous or with one side in PSUM, and for a tensor_tensor of BF16/FP16
        with both inputs in SBUF; NeuronCore-v4's exponential 4x (seed 001: 4x
        activation(exp)'s rate), any dtype; else 1."""
        if v2 or not ins.dsts:  # no destination (a generator's seed): no mode
            return 1
        if ins.op == "exponential":
            return 4
        f16 = ("bfloat16", "float16")
        dst = ins.dsts[0]
        refs = [dst, *tensors]
        if not all(r.view_dtype in f16 for r in refs):
            return 1
        if ins.op in ("tensor_copy", "tensor_scalar"):
            contiguous = all(r.pattern[-1][0] == 1 or r.pattern[-1][1] == 1 for r in refs)
            in_psum = sum(r.space == "psum" for r in refs)
            if in_psum == 0:
                return 4 if contiguous else 2
            return 2 if contiguous and in_psum == 1 else 1
        if ins.op == "tensor_tensor" and all(r.space == "sbuf" for r in tensors):
            return 2
        return 1

    def psum_banks(r):
        lo, hi = r.extent()[2:]
        return range(lo // core.psum_bank_bytes, -(-hi // core.psum_bank_bytes))

    def sendrecv(s, ins, ready, waited, blocker):
        """Both cores' sides of a pair move their data on their own DMA engines once both are
        ready, and complete together (the pipe's group synchronises)."""
        key_ = group_key(ins)
        if ins.op == "sendrecv":  # the pair of one logical core (of one rank, over ranks)
            key_ = (key_, s.core >> 1)
        sides = rendezvous.setdefault(key_, {})
        sides[s.core] = (s, ins, max(ready, s.free, ev.now), waited, blocker)
        if len(sides) < 1 + len(group_members(ins, s.core)):
            return
        del rendezvous[key_]
        start = max(v[2] for v in sides.values())
        moved = {}
        if ins.op == "core_barrier":
            # each core's remote semaphore update, then its wait: one transfer's latency
            for st, i, _ready, w, b in sides.values():
                finish(st, i, _ready, start, start + dma_latency, start + dma_latency, w, b)
            for st, *_ in sides.values():
                advance(st)
            return

        def one_moved(c):
            moved[c] = ev.now
            if len(moved) < len(sides):
                return
            end = max(moved.values())
            # between devices, no sooner than the link carries it (docs/nki/multicore.md)
            far = max(group_link_ns(v[1], link) for v in sides.values())
            end = max(end, start + round(far * ev.tick_mhz / 1000))
            for st, i, _ready, w, b in sides.values():
                done = max(end + dma_latency, st.last_done)
                finish(st, i, _ready, start, end, done, w, b)
            for st, *_ in sides.values():
                advance(st)

        for c, (st, i, *_rest) in sides.items():
            if i.op == "collective":  # each (src, dst) pair as a transfer of its dst's bytes
                parts = [dma_work(replace(i, dsts=(d,), srcs=(r,))) for d, r in zip(i.dsts, i.srcs)]
                work, cap = sum(p[0] for p in parts), max(p[1] for p in parts)
            else:
                work, cap = dma_work(i)
            ev.at(start, pools[c].submit, work, cap, lambda c=c: one_moved(c))

    def waits_met(s, ins, again):
        """``(ready, blocker)`` of ``ins``, or ``None`` with ``again`` called once they are."""
        c = s.core
        waits = ins.waits
        if s.flow is not None:  # in dynamic loops: this iteration's counts
            waits = s.flow.resolve(ins, again)
            if waits is None:
                return None
        for w, k in waits:
            sem = streams[key(c, w)].sem
            if sem.count < k:
                sem.wait(k, again, ins.seq)
                return None
        ready = 0
        blocker = None
        for w, k in waits:
            t = streams[key(c, w)].sem.reached_at(k)
            if t > ready:
                ready, blocker = t, (key(c, w), k - 1)
        return ready, blocker

    def issue_dge(s):
        """A DMA stream's next transfer asks its descriptor generator (:class:`DgeStage`) once
        its waits are met and it has a slot; the generator takes the askers round robin."""
        c = s.core
        if s.issued >= len(s.instrs) or s.issued - s.pos >= dge.in_flight:
            return
        g = int(s.local[3:]) % dge.count
        gen = dge_state[c][g]
        if s in gen["asking"]:
            return
        ins = s.instrs[s.issued]
        met = waits_met(s, ins, lambda s=s: issue_dge(s))
        if met is None:
            return
        if ins.op in GROUP_OPS:
            raise KernelError(f"{ins.line}: {ins.call}: no descriptor generator path")
        gen["asking"][s] = met
        ev.at(max(met[0], ev.now, gen["free"]), take_dge, c, g)

    def take_dge(c, g):
        """Generator ``g`` takes the first asking stream after the last one it took (its
        queues in order, ``q // count`` each: ``DmaIssue``'s round robin), if it is free."""
        gen = dge_state[c][g]
        now = ev.now
        if now < gen["free"]:
            ev.at(gen["free"], take_dge, c, g)
            return
        asking = {
            int(st.local[3:]) // dge.count: st for st, (r, _) in gen["asking"].items() if r <= now
        }
        if not asking:
            return
        n = len(range(g, dge.queues, dge.count))
        j = next(j for off in range(1, n + 1) if (j := (gen["last"] + off) % n) in asking)
        s = asking[j]
        gen["last"] = j
        ready, blocker = gen["asking"].pop(s)
        period = s.clock.period
        ins = s.instrs[s.issued]
        work, cap = dma_work(ins)
        gen["free"] = now + (dge.cycles + cap + 1) * period
        waited = max(0, ready - s.free) if blocker else 0
        entry = [ins, ready, now, None, waited, blocker]
        s.pending.append(entry)
        s.issued += 1
        s.free = now + period

        def moved(s=s, entry=entry):
            entry[3] = ev.now
            while s.pending and s.pending[0][3] is not None:
                i, r, start, end, w, b = s.pending.pop(0)
                done = max(end + dma_latency, s.last_done)
                finish(s, i, r, start, end, done, w, b)
            issue_dge(s)

        level = ins.args.get("priority", 3)
        ev.at(now + dge.cycles * period, pools[c].submit, work, cap, moved, level)
        issue_dge(s)
        if gen["asking"]:
            ev.at(gen["free"], take_dge, c, g)

    def advance(s):
        if dge is not None and s.local.startswith("dma"):
            issue_dge(s)
            return
        while s.pos < len(s.instrs):
            ins = s.instrs[s.pos]
            met = waits_met(s, ins, lambda s=s: advance(s))
            if met is None:
                return
            ready, blocker = met
            c = s.core
            could = s.free
            waited = max(0, ready - could) if blocker else 0
            if ins.op in GROUP_OPS:  # sendrecv, core_barrier, collectives: with the other cores
                sendrecv(s, ins, ready, waited, blocker)
                return
            if s.flow is not None and ins.op in loops.SEQUENCER_OPS:
                start, end, done = sequencer_timing(s, ins, ready)
                finish(s, ins, ready, start, end, max(done, s.last_done), waited, blocker)
                continue
            if ins.op in LOADED:  # loaded with the model, before the kernel: no time
                t = max(ready, s.free, ev.now)
                finish(s, ins, ready, t, t, t, 0, None)
                continue
            if s.local.startswith("dma"):
                start = max(ready, s.free, ev.now)
                work, cap = dma_work(ins)
                data = start + descriptors(s, ins, start)

                def moved(s=s, ins=ins, ready=ready, start=start, waited=waited, blocker=blocker):
                    end = ev.now
                    done = max(end + dma_latency, s.last_done)
                    finish(s, ins, ready, start, end, done, waited, blocker)
                    advance(s)

                level = ins.args.get("priority", 3)
                if data > ev.now:
                    ev.at(data, pools[c].submit, work, cap, moved, level)
                else:
                    pools[c].submit(work, cap, moved, level)
                return
            if s.local == "tensor":
                start, end, done = te_timing(s, ins, max(ready, 0))
            else:
                start, end, done = compute_timing(s, ins, ready)
            done = max(done, s.last_done)
            finish(s, ins, ready, start, end, done, waited, blocker)

    def descriptors(s, ins, start):
        """Ticks from a transfer's start to its data's (documented costs): a hardware DGE's
        wait and time (queue ``q`` on DGE ``q % 2``, or the one of its ``dge_engine``: Sync 0,
        Scalar 1), the GpSimd engine's as software DGE, nothing for precomputed descriptors."""
        mode = ins.args.get("dge") if costs is not None else None
        if mode == "hw":
            which = ins.args.get("dge_engine")
            g = {"sync": 0, "scalar": 1}.get(which, int(s.local[3:]) % 2)
            free = hw_dge_free[s.core]
            t = max(start, free[g])
            free[g] = t + dge_ticks
            return free[g] - start
        if mode == "sw":
            gp = gpsimd_engine[s.core]
            # held as the queue's, so that two queues' generations take turns
            t = _earliest([gp], start, dge_ticks, s.name)
            gp.add(t, t + dge_ticks, s.name)
            return t + dge_ticks - start
        return 0

    def finish(s, ins, ready, start, end, done, waited, blocker):
        rec = Record(ins, ready, start, end, done, waited, blocker if waited else None, s.name)
        s.records.append(rec)
        s.busy += end - start if s.local != "tensor" else 0
        s.free = end
        s.last_done = done
        if tr is not None:
            track = (core_names[s.core], s.local)
            # named and described when written (_KernelTrace.events)
            mine = slices[s.name]
            mine.append(tr.slice(track, ins, start, done, (ins, waited)))
            if waited and rec.blocker is not None:
                theirs = slices.get(rec.blocker[0], ())
                if rec.blocker[1] < len(theirs):
                    tr.flow(theirs[rec.blocker[1]], mine[-1])
        ev.at(done, s.sem.signal, done)
        s.pos = s.pos + 1 if s.flow is None else s.flow.step(ins)

    def sequencer_timing(s, ins, ready):
        """A register or loop instruction: its engine's sequencer, no data path
        (docs/nki/control.md): ``loops.SEQUENCER_CYCLES`` cycles, a load or store of a
        register completing a tensor access's latency after."""
        period = s.clock.period
        start = max(ready, s.free)
        end = start + loops.SEQUENCER_CYCLES * period
        access = 0
        if ins.op in ("register_load", "register_store"):
            access = compute.access_cycles if compute is not None else params.fixed_latency
        return start, end, end + access * period

    flows = None
    if loops.dynamic(programs):  # registers and dynamic loops: each stream's sequencer
        if dge is not None:
            raise KernelError("dynamic loops with the descriptor-generator stage: not modelled")
        flows = loops.timing_runners(programs, lambda cb: ev.at(ev.now, cb))
        for (c, n), r in flows.items():
            streams[key(c, n)].flow = r
    starts = params.starts or {}
    for s in streams.values():
        ev.at(starts.get(s.local, 0) * s.clock.period, advance, s)
    with collector_paused():
        ev.run()
    if any(s.pos < len(s.instrs) for s in streams.values()):
        if flows is not None:
            raise KernelError(loops.deadlock(programs, flows))
        counts = {(s.core, s.local): s.sem.count for s in streams.values()}
        raise KernelError(deadlock(programs, counts))
    total = max((s.last_done for s in streams.values()), default=0)
    te_clock = clocks["tensor"]
    te_cycles = -(-total // te_clock.period)
    busy = {}
    if total:
        for n, s in streams.items():
            if not s.records:
                continue
            if s.local == "tensor":
                busy[n] = _union([(r.start, r.end) for r in s.records]) / total
            elif s.local.startswith("dma"):
                busy[n] = _union([(r.start, r.done) for r in s.records]) / total
            else:
                busy[n] = s.busy / total
        if stats["dma_bytes"]:
            for c, pool in enumerate(pools):
                busy[key(c, "dma_engines")] = pool.busy / (total * core.dma_engines)
    records = {n: s.records for n, s in streams.items()}
    if costs is not None:
        peak_gbps = costs.bytes_per_ns * core.dma_engines
    else:  # the data path's words at the DMA clock
        peak_gbps = params.dma.word_bytes * core.dma_mhz / 1000 * core.dma_engines
    te_period = clocks["tensor"].period
    extra = {
        "issued_macs": stats["issued_macs"],
        "issued_peak": (stats["peak"] or stats["issued_peak"]) * len(programs),
        "dma_peak_gbps": peak_gbps * len(programs),
        "throttle": {
            "modelled": throttle is not None,
            "matmuls_throttled": sum(sq.schedule().throttled for sq in seqs) if throttle else 0,
            "ns": round(ev.ns(sum(sq.throttle_cycles for sq in seqs) * te_period), 3),
        },
    }
    return Report(
        programs[0] if not many else programs,
        ev,
        records,
        total,
        te_cycles,
        busy,
        stats["macs"],
        stats["peak"] * len(programs),
        stats["dma_bytes"],
        tr,
        stats["te_window"],
        stats["dtype"],
        ev.events,
        extra,
    )


def _instances(report):
    """Per instance of a launch grid (``kernel[g0, ...]``; none for a kernel without one):
    its core, grid position, first start and last completion (ns) and their span."""
    programs = report.program if isinstance(report.program, list) else [report.program]
    many = len(programs) > 1
    out = []
    for c, p in enumerate(programs):
        spans = getattr(p, "instances", None)
        if not getattr(p, "grid", None) or not spans:
            continue
        recs = [
            r
            for n, rs in report.records.items()
            if not many or n.startswith(f"core{c}.")
            for r in rs
        ]
        for position, first, end in spans:
            mine = [r for r in recs if first <= r.ins.seq < end]
            if not mine:
                continue
            t0, t1 = min(r.start for r in mine), max(r.done for r in mine)
            out.append(
                {
                    "core": c,
                    "program_id": list(position),
                    "start_ns": round(report.core.ns(t0), 3),
                    "end_ns": round(report.core.ns(t1), 3),
                    "ns": round(report.core.ns(t1 - t0), 3),
                }
            )
    return out


def _union(intervals):
    """Total length of the union of ``(start, end)`` intervals."""
    total, cur_s, cur_e = 0, None, None
    for a, b in sorted(intervals):
        if cur_e is None or a > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def plot(report, path):
    """A PNG of the engines' occupancy over time (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, rs in report.records.items() if rs]
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.4 * len(names)))
    us = 1 / report.core.tick_mhz
    for y, n in enumerate(names):
        spans = [(r.start * us, max(r.end - r.start, 1) * us) for r in report.records[n]]
        ax.broken_barh(spans, (y - 0.4, 0.8))
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("time (us)")
    first = report.program[0] if isinstance(report.program, list) else report.program
    ax.set_title(f"{first.kernel}: engine occupancy ({report.total_ns / 1000:.2f} us)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
