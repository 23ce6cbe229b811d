"""What the RTL NeuronCore's instruction queues take, made from a kernel's streams.

The core (``ncrtl.hdl.neuroncore``) has one instruction queue per stream it runs: the Tensor
Engine's (``tensor``), the Vector Engine's (``vector``: ``tensor_copy`` and, on NeuronCore-v4,
``quantize_mx``) and one per DMA queue
(``dma0`` ...).  A queue holds two kinds of entry:

* :class:`Wait` ``(sem, count)``: the queue stops until semaphore ``sem`` has reached ``count``;
* an operation of its engine: :class:`MatmulOp`, :class:`CopyOp`, :class:`QuantizeOp` or
  :class:`DmaOp`.

Every stream has one semaphore, in the order of :meth:`Geometry.streams` (``tensor``,
``vector``, ``dma0`` ...), counting the stream's completed instructions; a stream's
instructions complete in order (a DMA queue retires its transfers in order, however its
engines finish them), so a kernel's waits ``(stream, count)`` are the queues' waits as they
are.

:func:`encode` turns a traced :class:`~ncrtl.model.kernel.stream.Program` into the entries of
every queue, or raises :class:`Unsupported` naming the first instruction the RTL core does not
run, its kernel line and the rule (docs/neuroncore.md lists them).  The bit layouts of the
entries are the hardware's (:mod:`ncrtl.hdl.neuroncore.isa`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ncrtl.model.dma import dge
from ncrtl.model.dma.isa import Descriptor, Op, Side, Space
from ncrtl.model.dma.isa import Geometry as DmaGeometry
from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.golden import contiguous, psum_write
from ncrtl.model.kernel.stream import CORES
from ncrtl.model.psum.isa import Dtype
from ncrtl.model.psum.isa import encode as psum_encode
from ncrtl.model.tensor_engine import isa as te_isa
from ncrtl.model.tensor_engine.matmul import QUADRANT

__all__ = [
    "SEM_BITS",
    "COUNT_BITS",
    "Geometry",
    "Wait",
    "MatmulOp",
    "CopyOp",
    "QuantizeOp",
    "QUANTIZE_FORMATS",
    "Second",
    "Convert",
    "DmaOp",
    "Encoded",
    "Unsupported",
    "encode",
    "side_of",
    "CONVERSIONS",
]

#: Bits of a semaphore number in a :class:`Wait` (32 streams).
SEM_BITS = 5
#: Bits of a semaphore's count: a stream runs at most ``2**16 - 1`` instructions.
COUNT_BITS = 16


class Unsupported(ValueError):
    """A kernel instruction the RTL core does not run (the message names it, its kernel line
    and the rule)."""


@dataclass(frozen=True)
class Geometry:
    """The RTL core's parameters; the defaults are NeuronCore-v3's (seed 000).

    ``partitions`` x ``partition_bytes`` of SBUF, accessed ``word_bytes`` per partition;
    ``rows`` x ``cols`` PEs; ``psum_banks`` of ``psum_bank_bytes`` per partition (PSUM has
    ``cols`` partitions); ``dma_engines`` DMA engines and ``dma_queues`` DMA queues, each with
    ``dma_inflight`` transfers in flight; ``hbm_bytes`` of device memory; the Tensor Engine's
    ``tile_unit`` (32 on the hardware)."""

    partitions: int = 128
    partition_bytes: int = 224 * 1024
    rows: int = 128
    cols: int = 128
    psum_banks: int = 8
    psum_bank_bytes: int = 2048
    dma_engines: int = 16
    dma_queues: int = 16
    dma_inflight: int = 4
    word_bytes: int = 16
    hbm_bytes: int = 1 << 24
    tile_unit: int = 32
    version: str = "v3"

    def __post_init__(self):
        for name in ("partitions", "rows", "cols"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 1 <= v <= 128:
                raise ValueError(f"NeuronCore {name} must be an int from 1 to 128, not {v!r}")
        if self.cols != self.partitions:
            # PSUM has a partition per PE column, and an eviction moves partition p to p.
            raise ValueError(
                f"NeuronCore cols ({self.cols}) must equal partitions ({self.partitions}): PE "
                f"column c writes PSUM partition c, which the eviction engine moves to SBUF "
                f"partition c"
            )
        if self.rows > self.partitions:
            raise ValueError(
                f"NeuronCore rows ({self.rows}) must be at most partitions ({self.partitions}): "
                f"PE row r reads SBUF partition r"
            )
        for name in ("dma_engines", "dma_queues", "dma_inflight"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"NeuronCore {name} must be a power of two, not {v!r}")
        if self.dma_queues * self.dma_inflight > 64:
            raise ValueError(
                f"NeuronCore dma_queues x dma_inflight ({self.dma_queues} x "
                f"{self.dma_inflight}) must be at most 64: a transfer in flight holds one of the "
                f"DMA engines' 64 semaphores"
            )
        if 2 + self.dma_queues > 1 << SEM_BITS:
            raise ValueError(f"NeuronCore dma_queues must be at most {(1 << SEM_BITS) - 2}")
        if self.version not in CORES:
            raise ValueError(f"NeuronCore version must be one of {sorted(CORES)}")

    @property
    def addr_bits(self):
        """Bits of a byte address inside an SBUF partition."""
        return max(1, (self.partition_bytes - 1).bit_length())

    @property
    def psum_addr_bits(self):
        """Bits of a byte address inside a PSUM partition."""
        return max(1, (self.psum_banks * self.psum_bank_bytes - 1).bit_length())

    def streams(self):
        """The streams, in semaphore order."""
        return ("tensor", "vector") + tuple(f"dma{q}" for q in range(self.dma_queues))

    def core(self):
        """The kernel :class:`~ncrtl.model.kernel.stream.Core` of this geometry (its version's
        clocks), which a kernel is traced on."""
        return replace(
            CORES[self.version],
            sbuf_partition_bytes=self.partition_bytes,
            partitions=self.partitions,
            rows=self.rows,
            cols=self.cols,
            psum_banks=self.psum_banks,
            psum_bank_bytes=self.psum_bank_bytes,
            dma_engines=self.dma_engines,
            dma_queues=self.dma_queues,
            tile_unit=self.tile_unit,
        )

    @property
    def quantize_mx(self):
        """Whether the core has QuantizeMX: a NeuronCore-v4 whose partitions are whole
        32-partition quadrants (a quadrant holds its groups' scales)."""
        return self.version == "v4" and self.partitions % QUADRANT == 0

    def dma_geometry(self):
        return DmaGeometry(self.partitions, self.partition_bytes, self.hbm_bytes)


@dataclass(frozen=True)
class Wait:
    """Stop until semaphore ``sem`` reaches ``count``."""

    sem: int
    count: int


@dataclass(frozen=True)
class MatmulOp:
    """One ``nc_matmul``: the Tensor Engine's LoadStationary ``ls`` and MultiplyMoving ``mm``
    (:func:`ncrtl.model.tensor_engine.isa.encode` words), the PSUM write ``psum``
    (:func:`ncrtl.model.psum.isa.encode` word) of its result, and where its operands are: the
    stationary ``[K, M]`` at byte ``s_addr`` of partitions ``tile_row ..``, the moving ``[K,
    N]`` at ``m_addr``, ``s_esize`` / ``m_esize`` bytes per element.  ``second``
    (:class:`Second`) says what a second pass over each operand reads, from bytes ``s_addr2``
    / ``m_addr2`` of the same partitions: an ``nc_matmul_mx``'s E8M0 scales (its operands
    ``_x4``, four elements in 4 bytes; row ``r``'s scales on partition ``32 (r // 32) + (r %
    32) // 8``: the quadrant layout), or a double-row matmul's second row of each partition
    (``[K, 2, M]`` / ``[K, 2, N]`` FP8 operands: ``s_addr2 = s_addr + M``)."""

    ls: int
    mm: int
    psum: int
    s_addr: int
    m_addr: int
    s_esize: int
    m_esize: int
    second: int = 0
    s_addr2: int = 0
    m_addr2: int = 0


class Second:
    """:attr:`MatmulOp.second`: what a matmul's second pass over its operands reads."""

    NONE = 0
    MX_SCALES = 1  #: the E8M0 scales of an ``nc_matmul_mx``
    DOUBLE_ROW = 2  #: the second row of a double-row (FP8 perf mode) matmul


class Convert:
    """What an eviction does to each element: ``RAW`` copies its bytes, the others round an
    FP32 to nearest even into BF16, FP16 or an FP8 format (the golden's conversion)."""

    RAW = 0
    BF16 = 1
    FP16 = 2
    FP8_E4M3 = 3
    FP8_E4M3FN = 4
    FP8_E5M2 = 5
    FP8_E3M4 = 6


#: (source dtype, destination dtype) -> Convert, for the pairs that convert.
CONVERSIONS = {
    ("float32", "bfloat16"): Convert.BF16,
    ("float32", "float16"): Convert.FP16,
    ("float32", "float8_e4m3"): Convert.FP8_E4M3,
    ("float32", "float8_e4m3fn"): Convert.FP8_E4M3FN,
    ("float32", "float8_e5m2"): Convert.FP8_E5M2,
    ("float32", "float8_e3m4"): Convert.FP8_E3M4,
}


@dataclass(frozen=True)
class CopyOp:
    """One ``tensor_copy``: ``n`` elements in each of ``parts`` partitions from ``part``, from
    byte ``src_addr`` of SBUF or (``src_psum``) PSUM to byte ``dst_addr`` of SBUF, each element
    ``src_esize`` bytes in and ``dst_esize`` out, through ``convert``."""

    src_psum: bool
    src_addr: int
    dst_addr: int
    part: int
    parts: int
    n: int
    src_esize: int
    dst_esize: int
    convert: int


#: The element formats of QuantizeMX's ``_x4`` destinations, as its ``elem_fmt`` codes
#: (:class:`ncrtl.hdl.vector_engine.quantize_mx.QuantizeMX`).
QUANTIZE_FORMATS = {"float8_e4m3fn_x4": 0, "float8_e5m2_x4": 1}
#: QuantizeMX's source formats, as its ``src_fmt`` codes.
QUANTIZE_SOURCES = {"bfloat16": 0, "float16": 1}
#: The bytes of a QuantizeMX beat's four source elements of a partition: one aligned slot.
QUANTIZE_SLOT = 8


@dataclass(frozen=True)
class QuantizeOp:
    """One ``quantize_mx`` (NeuronCore-v4): ``n`` BF16 / FP16 (``src_fmt`` 0 / 1) elements in
    each of ``parts`` partitions from ``part`` at byte ``src_addr``, in groups of 8 partitions
    x 4 elements, to ``elem_fmt`` codes (:data:`QUANTIZE_FORMATS`) at byte ``dst_addr`` (four
    codes, an ``_x4`` element, per four source elements) and E8M0 scales at byte
    ``scale_addr`` (a byte per four source elements; a quadrant's groups' scales on its first
    four partitions, the other 28 written 0)."""

    src_addr: int
    dst_addr: int
    scale_addr: int
    part: int
    parts: int
    n: int
    src_fmt: int
    elem_fmt: int


@dataclass(frozen=True)
class DmaOp:
    """One DMA transfer: the descriptor the DGE takes, and the parts it cuts it into (one per
    engine it uses: :func:`ncrtl.model.dma.dge.split`), which the queue counts to retire it."""

    desc: Descriptor
    parts: int


@dataclass
class Encoded:
    """A program as the RTL core's queues take it: ``queues[stream]`` the entries of each queue
    (every stream of :meth:`Geometry.streams`, empty ones included), ``totals[stream]`` the
    instructions each stream completes (its semaphore's final count), ``hbm_end`` the first
    device-memory byte after the kernel's tensors."""

    geometry: Geometry
    queues: dict
    totals: dict
    hbm_end: int = 0

    def modes(self):
        """The names of the PE modes its matmuls use (``ncrtl.model.modes``), in table order:
        what a core built for fewer modes must still have."""
        from ncrtl.model.modes import ENGINE_MODES, mode_by_code

        used = {
            mode_by_code(te_isa.decode(e.ls).mode).name
            for e in self.queues.get("tensor", ())
            if isinstance(e, MatmulOp)
        }
        return tuple(m.name for m in ENGINE_MODES if m.name in used)


def _refuse(ins, why):
    raise Unsupported(f"{ins.where}: the RTL NeuronCore {why}")


def _rows(ref):
    """A view that is rows of its tensor, each a contiguous run: ``(first partition,
    partitions, first byte in the partition, elements per partition)``, or None."""
    shape = ref.tensor_shape()
    row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    pat = list(ref.pattern)
    (s0, n0), inner = pat[0], pat[1:]
    if n0 > 1 and s0 != row:
        return None
    if not contiguous(inner):
        return None
    count = int(np.prod([n for _, n in inner]))
    p0, c0 = divmod(ref.offset, row)
    if c0 + count > row or p0 + n0 > shape[0]:
        return None
    isz = dtype_of(ref.view_dtype).itemsize
    return p0, n0, ref.base + c0 * isz, count


def _matmul(ins, geo):
    a = ins.args
    for key, what in (("is_transpose", "transposes"), ("chunks", "multi-bank chunks")):
        if a.get(key):
            _refuse(ins, f"has no matmul {what} yet ({key}={a[key]!r})")
    if a.get("perf_mode") not in (None, "double_row"):
        _refuse(ins, f"has no matmul perf mode {a['perf_mode']!r} (double_row only)")
    (dst,), (stat, mov) = ins.dsts, ins.srcs
    ls_word, mm_word = a["te"]
    ls, mm = te_isa.decode(ls_word), te_isa.decode(mm_word)
    ls, mm = ls.whole(geo.rows, geo.cols), mm.whole(geo.rows, geo.cols)
    for ref, what in ((stat, "stationary"), (mov, "moving")):
        r = _rows(ref)
        if r is None or ref.space != "sbuf":
            _refuse(
                ins,
                f"reads the {what} operand as rows of contiguous SBUF elements; {ref} is not",
            )
        if r[0] != ls.tile_row:
            _refuse(
                ins,
                f"reads PE row r from SBUF partition r: the {what} operand starts at partition "
                f"{r[0]}, its tile at row {ls.tile_row}",
            )
    if dst.view_dtype not in ("float32", "bfloat16"):
        _refuse(ins, f"writes FP32 or BF16 PSUM, not {dst.view_dtype}")
    if dst.view_dtype == "bfloat16" and a.get("rounding") == "sr":
        # PSUM's generators start from their reset state on the core; the golden's are seeded
        _refuse(ins, "rounds BF16 PSUM writes to nearest even only (no stochastic rounding)")
    kind = Dtype.BF16 if dst.view_dtype == "bfloat16" else Dtype.FP32
    write, p0 = psum_write(geo.core(), ins, dst, ls.m, mm.n, kind)
    if p0 != mm.tile_col:
        _refuse(
            ins,
            f"writes PE column c to PSUM partition c: the result starts at partition {p0}, its "
            f"tile at column {mm.tile_col}",
        )
    (_, _, s_addr, s_count), (_, _, m_addr, m_count) = _rows(stat), _rows(mov)
    op = MatmulOp(
        ls_word,
        mm_word,
        psum_encode(write),
        s_addr,
        m_addr,
        dtype_of(stat.view_dtype).itemsize,
        dtype_of(mov.view_dtype).itemsize,
    )
    if a.get("perf_mode") == "double_row":
        # [K, 2, M]: each partition's two rows one after the other (FP8: a byte each)
        if (s_count, m_count) != (2 * ls.m, 2 * mm.n):
            _refuse(
                ins,
                f"reads a double-row operand as a partition's two rows one after the other: "
                f"{s_count} and {m_count} elements per partition, not 2 x {ls.m} and 2 x {mm.n}",
            )
        op = replace(op, second=Second.DOUBLE_ROW, s_addr2=s_addr + ls.m, m_addr2=m_addr + mm.n)
    return op


def _matmul_mx(ins, geo):
    """An ``nc_matmul_mx``: :func:`_matmul`'s rules, and its scales on the operands'
    partitions from a quadrant's first (the rows' scale partitions are then fixed wires)."""
    if ins.args.get("chunks"):
        _refuse(ins, f"has no matmul multi-bank chunks yet (chunks={ins.args['chunks']!r})")
    stat, mov, s_scale, m_scale = ins.srcs
    op = _matmul(replace(ins, srcs=(stat, mov)), geo)
    row = te_isa.decode(op.ls).whole(geo.rows, geo.cols).tile_row
    addrs = []
    for ref, what in ((s_scale, "stationary_scale"), (m_scale, "moving_scale")):
        r = _rows(ref)
        if r is None or ref.space != "sbuf":
            _refuse(ins, f"reads {what} as rows of contiguous SBUF bytes; {ref} is not")
        if r[0] != row or row % QUADRANT:
            _refuse(
                ins,
                f"reads a row's MX scale from its quadrant's scale partitions: {what} must "
                f"start at the operands' partition {row}, a multiple of {QUADRANT}; it starts "
                f"at {r[0]}",
            )
        addrs.append(r[2])
    return replace(op, second=Second.MX_SCALES, s_addr2=addrs[0], m_addr2=addrs[1])


def _copy(ins, geo):
    (dst,), (src,) = ins.dsts, ins.srcs
    if dst.space != "sbuf":
        _refuse(ins, f"evicts into the SBUF only, not {dst.space}")
    s, d = _rows(src), _rows(dst)
    for r, ref, what in ((s, src, "source"), (d, dst, "destination")):
        if r is None:
            _refuse(ins, f"copies rows of contiguous elements; the {what} {ref} is not")
    if s[:2] != d[:2] or s[3] != d[3]:
        _refuse(
            ins,
            f"copies partition p to partition p, the same elements in each: source partitions "
            f"{s[0]}..{s[0] + s[1] - 1} x {s[3]}, destination {d[0]}..{d[0] + d[1] - 1} x {d[3]}",
        )
    sd, dd = src.view_dtype, dst.view_dtype
    if sd == dd:
        conv = Convert.RAW
    elif (sd, dd) in CONVERSIONS:
        conv = CONVERSIONS[(sd, dd)]
    else:
        _refuse(
            ins,
            f"converts float32 to {', '.join(d for _, d in CONVERSIONS)}, or copies a dtype as "
            f"it is; not {sd} to {dd}",
        )
    if src.space == "psum" and sd not in ("float32", "bfloat16"):
        _refuse(ins, f"reads FP32 or BF16 PSUM, not {sd}")
    return CopyOp(
        src.space == "psum",
        s[2],
        d[2],
        s[0],
        s[1],
        s[3],
        dtype_of(sd).itemsize,
        dtype_of(dd).itemsize,
        conv,
    )


def _quantize(ins, geo):
    (dst, scale), (src,) = ins.dsts, ins.srcs
    if not geo.quantize_mx:
        _refuse(
            ins,
            f"has QuantizeMX on NeuronCore-v4 with whole 32-partition quadrants only, not on "
            f"{geo.version} with {geo.partitions} partitions",
        )
    rows = {}
    for ref, what in ((src, "source"), (dst, "destination"), (scale, "scales")):
        r = _rows(ref)
        if r is None:
            _refuse(ins, f"quantizes rows of contiguous elements; the {what} {ref} is not")
        rows[what] = r
    s, d, c = rows["source"], rows["destination"], rows["scales"]
    if s[0] % QUADRANT:
        _refuse(
            ins,
            f"quantizes whole 32-partition quadrants (its groups and their scales' layout are "
            f"the quadrant's): the source starts at partition {s[0]}",
        )
    if d[:2] != s[:2] or c[:2] != s[:2] or d[3] != s[3] // 4 or c[3] != s[3] // 4:
        _refuse(
            ins,
            f"writes partition p's elements and scales to partition p: source partitions "
            f"{s[0]}..{s[0] + s[1] - 1} x {s[3]}, destination {d[0]}.. x {d[3]}, scales "
            f"{c[0]}.. x {c[3]}",
        )
    if geo.word_bytes % QUANTIZE_SLOT or s[2] % QUANTIZE_SLOT:
        _refuse(
            ins,
            f"reads each partition's four source elements of a group from one aligned "
            f"{QUANTIZE_SLOT}-byte slot: the source starts at byte {s[2]}",
        )
    return QuantizeOp(
        s[2],
        d[2],
        c[2],
        s[0],
        s[1],
        s[3],
        QUANTIZE_SOURCES[src.view_dtype],
        QUANTIZE_FORMATS[dst.view_dtype],
    )


def side_of(ref):
    """The DMA :class:`~ncrtl.model.dma.isa.Side` of a kernel operand."""
    shape = ref.tensor_shape()
    row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return Side(
        Space.HBM if ref.space == "hbm" else Space.SBUF,
        ref.base,
        row,
        int(np.prod(shape)),
        ref.pattern,
        dtype_of(ref.view_dtype).itemsize,
        ref.offset,
    )


def _dma(ins, geo):
    (dst,), (src,) = ins.dsts, ins.srcs
    if "psum" in (dst.space, src.space):
        _refuse(ins, "moves data between the device memory and the SBUF; the DMA has no PSUM port")
    if src.view_dtype != dst.view_dtype or ins.args.get("rmw"):
        _refuse(ins, "copies bytes unchanged (no dtype conversion or read-add-write yet)")
    desc = Descriptor(Op.COPY, side_of(src), side_of(dst))
    gen = dge.generate(desc, geo.dma_geometry(), geo.dma_engines)
    if gen.error:
        _refuse(
            ins,
            f"sends DMA instructions through its descriptor generator, which refuses "
            f"this one: {gen.message}",
        )
    return DmaOp(desc, len(gen.parts))


_OPS = {
    "tensor": {"matmul": _matmul, "matmul_mx": _matmul_mx},
    "vector": {"tensor_copy": _copy, "quantize_mx": _quantize},
}


def encode(program, geo):
    """The queue entries of ``program`` on a core of geometry ``geo`` (see the module
    docstring); raises :class:`Unsupported` for the first instruction it cannot run."""
    c = program.core
    want = geo.core()
    for name in ("partitions", "rows", "cols", "psum_banks", "psum_bank_bytes", "tile_unit"):
        if getattr(c, name) != getattr(want, name):
            raise Unsupported(
                f"{program.kernel}: traced for {name} = {getattr(c, name)}, the RTL core has "
                f"{getattr(want, name)}: trace it at the core's geometry"
            )
    if c.sbuf_partition_bytes > geo.partition_bytes:
        raise Unsupported(
            f"{program.kernel}: traced for {c.sbuf_partition_bytes} SBUF bytes per partition, "
            f"the RTL core has {geo.partition_bytes}"
        )
    if program.logical_cores != 1:
        raise Unsupported(f"{program.kernel}: the RTL NeuronCore is one core (no kernel[2] yet)")
    hbm_end = max(
        (t.base + t.nbytes for t in program.tensors.values() if t.space == "hbm"), default=0
    )
    if hbm_end > geo.hbm_bytes:
        raise Unsupported(
            f"{program.kernel}: its device tensors need {hbm_end} bytes, the RTL core's device "
            f"memory has {geo.hbm_bytes}"
        )
    sems = {name: i for i, name in enumerate(geo.streams())}
    queues = {name: [] for name in geo.streams()}
    totals = {name: 0 for name in geo.streams()}
    for name, stream in program.streams.items():
        if not stream:
            continue
        if name not in sems:
            ins = stream[0]
            _refuse(ins, f"has no {name} stream (it runs {', '.join(geo.streams())})")
        entries = queues[name]
        for ins in stream:
            for s, count in ins.waits:
                if s not in sems:
                    _refuse(ins, f"has no {s} stream to wait on")
                entries.append(Wait(sems[s], count))
            if name.startswith("dma"):
                if ins.op != "dma_copy":
                    _refuse(ins, f"has no DMA operation {ins.op} yet (dma_copy only)")
                entries.append(_dma(ins, geo))
            else:
                make = _OPS[name].get(ins.op)
                if make is None:
                    have = ", ".join(sorted(_OPS[name]))
                    _refuse(ins, f"has no {ins.op} on its {name} engine (it runs {have})")
                entries.append(make(ins, geo))
        totals[name] = len(stream)
        if len(stream) >= 1 << COUNT_BITS:
            raise Unsupported(
                f"{program.kernel}: stream {name} has {len(stream)} instructions; a semaphore "
                f"counts to {(1 << COUNT_BITS) - 1}"
            )
    return Encoded(geo, queues, totals, hbm_end)
