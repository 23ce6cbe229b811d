"""DMA descriptors: what one transfer of a DMA engine does, its rules and its error codes.

A :class:`Descriptor` moves the elements one access pattern reads (:class:`Side` ``src``) to the
elements another addresses (``dst``), as a copy, a transpose or a read-add-write (``dst +=
src``).  A side names where its tensor lives (the device memory, byte addressed, or the SBUF:
a first partition and a byte offset in every partition), the tensor's geometry the pattern needs
(elements per partition row, elements in all) and the pattern itself with NKI's semantics
(:mod:`ncrtl.model.dma.access`), dynamic offsets included: the engine reads a ``scalar_offset``
or the ``vector_offset`` indices, int32, from the SBUF before it moves anything.

:func:`check` returns the first rule a descriptor breaks, as an :class:`Error` code and a
message, or None; the golden raises ``ValueError`` with the message from the user-level
functions and returns the code from :func:`ncrtl.model.dma.engine.execute`; the RTL completes
the descriptor with that code and writes nothing.  Every check is done before the first write.

See docs/dma.md for the contract.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from ncrtl.model.dma.access import MAX_DIMS, AccessPattern, ap_indices, integer

__all__ = [
    "Space",
    "Op",
    "AddDtype",
    "Error",
    "Indirect",
    "Side",
    "Descriptor",
    "Geometry",
    "check",
    "side_addresses",
    "ELEMENT_SIZES",
    "TRANSPOSE_SIZES",
]

#: Element sizes a pattern may use, bytes.
ELEMENT_SIZES = (1, 2, 4)
#: Dynamic offset kinds, in the order of their hardware codes 1 and 2 (0: none).
INDIRECT_KINDS = ("scalar", "vector")
#: Element sizes of a DMA transpose (2-byte and 4-byte dtypes, seed 000).
TRANSPOSE_SIZES = (2, 4)


class Space(enum.IntEnum):
    """Where a side's tensor lives."""

    HBM = 0  #: device memory, behind the engine's AXI4 manager port; byte addresses
    SBUF = 1  #: the state buffer: partitions x bytes, addressed per partition


class Op(enum.IntEnum):
    COPY = 0  #: dst = src, bytes unchanged
    TRANSPOSE = 1  #: dst[j, i] = src[i, j], bit-exact (seed 000 DMA transpose)
    ADD = 2  #: dst += src in the SBUF read-add-write unit (seed 001, NeuronCore-v4)


class AddDtype(enum.IntEnum):
    """Element type of a read-add-write (both sides)."""

    FP32 = 0  #: FP32 add, round to nearest even
    BF16 = 1  #: both widened to FP32 exactly, FP32 add (RNE), then RNE to BF16


class Error(enum.IntEnum):
    """Completion status of a descriptor (0 = done), in the order :func:`check` tests them."""

    NONE = 0
    ELEMENT_SIZE = 1  #: an element size not in 1/2/4, sides of different sizes, or a transpose
    #: of a 1-byte dtype, or a read-add-write whose dtype does not match the element size
    SPACE = 2  #: a transpose or read-add-write into the device memory
    SHAPE = 3  #: element counts differ (copy, add) or the views are not [A, B] and [B, A]
    PARTITION_STEP = 4  #: an SBUF pattern whose partition step is not one partition row
    TENSOR = 5  #: the tensor itself does not fit the memory (partitions, partition bytes, HBM)
    INDIRECT = 6  #: a dynamic offset outside the tensor (after reading it from the SBUF)
    BOUNDS = 7  #: an address the pattern forms lies outside its tensor
    OPCODE = 8  #: (hardware only) an operation code that is not COPY, TRANSPOSE or ADD
    OVERLAP = 9  #: the source's and the destination's address boxes intersect
    DGE_INDIRECT = 10  #: (descriptor generator only) a dynamic offset: the hardware DGE does
    #: no gather or scatter (seed 000); such transfers use precomputed descriptors


@dataclass(frozen=True)
class Indirect:
    """A dynamic offset read from the SBUF: ``kind`` ``"scalar"`` (one int32 at ``partition``,
    ``byte``; ``stride`` elements per unit, NKI's ``prod(shape[indirect_dim+1:])``) or
    ``"vector"`` (int32 ``i`` at partition ``partition + i``, ``byte``; indirect_dim 0, the
    stride is the side's ``row``)."""

    kind: str
    partition: int
    byte: int
    stride: int = 0

    def __post_init__(self):
        if self.kind not in INDIRECT_KINDS:
            raise ValueError(f"indirect kind must be 'scalar' or 'vector', not {self.kind!r}")


@dataclass(frozen=True)
class Side:
    """One end of a transfer: a tensor and the access pattern over it.

    Parameters
    ----------
    space : Space
    base : int
        HBM: byte address of the tensor's element 0.  SBUF: byte offset of element 0 in its
        partition (the same in every partition of the tensor).
    row : int
        Elements of one partition row of the tensor, ``prod(shape[1:])`` of the (reinterpreted)
        shape: the partition step of an SBUF pattern and the stride of a vector offset.
    extent : int
        Elements of the whole tensor.
    pattern : tuple of (step, num)
        NKI ``.ap`` pattern, outermost first (1 to 5 entries).
    esize : int
        Bytes per element (the pattern's dtype).
    offset : int
        Static offset, elements.
    partition : int
        SBUF: the tensor's first partition.
    indirect : Indirect or None
    """

    space: Space
    base: int
    row: int
    extent: int
    pattern: tuple
    esize: int = 4
    offset: int = 0
    partition: int = 0
    indirect: Indirect | None = None

    def __post_init__(self):
        object.__setattr__(self, "space", Space(self.space))
        # Integers only (a float step is no step); the ranges are check()'s statuses.
        for name in ("base", "row", "extent", "esize", "offset", "partition"):
            object.__setattr__(self, name, integer(getattr(self, name), f"Side {name}"))
        pattern = []
        for d, entry in enumerate(self.pattern):
            if isinstance(entry, (str, bytes)) or len(entry) != 2:
                raise ValueError(f"Side pattern entry {d} ({entry!r}) is not a [step, num] pair")
            step, num = entry
            pattern.append(
                (
                    integer(step, f"Side pattern entry {d} step"),
                    integer(num, f"Side pattern entry {d} num"),
                )
            )
        object.__setattr__(self, "pattern", tuple(pattern))

    @property
    def shape(self):
        return tuple(n for _, n in self.pattern)

    @property
    def count(self):
        return int(np.prod(self.shape))

    def access(self, dynamic=None):
        """The :class:`AccessPattern` with the dynamic offset ``dynamic`` (an int, or the
        vector of ints) filled in."""
        kind = self.indirect.kind if self.indirect else None
        return AccessPattern(
            self.pattern,
            self.offset,
            scalar_offset=dynamic if kind == "scalar" else None,
            vector_offset=dynamic if kind == "vector" else None,
        )


@dataclass(frozen=True)
class Geometry:
    """The memories a descriptor runs against: ``partitions`` x ``partition_bytes`` of SBUF and
    ``hbm_bytes`` of device memory."""

    partitions: int = 128
    partition_bytes: int = 192 * 1024
    hbm_bytes: int = 1 << 30


@dataclass(frozen=True)
class Descriptor:
    """One DMA transfer: ``dst`` op= ``src``."""

    op: Op
    src: Side
    dst: Side
    add_dtype: AddDtype = AddDtype.FP32
    tag: int = 0
    meta: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "op", Op(self.op))
        object.__setattr__(self, "add_dtype", AddDtype(self.add_dtype))


def _tensor_error(side, geo, what):
    """The tensor of ``side`` must lie in its memory."""
    if side.row < 1 or side.extent < 1:
        return f"{what}: row {side.row} and extent {side.extent} must be >= 1"
    if side.extent % side.row:
        return f"{what}: tensor extent {side.extent} is not whole rows of {side.row} elements"
    if side.base % side.esize:
        return f"{what}: tensor base {side.base} is not aligned to its {side.esize}-byte elements"
    if side.space == Space.HBM:
        end = side.base + side.extent * side.esize
        if side.base < 0 or end > geo.hbm_bytes:
            return (
                f"{what}: HBM tensor bytes [{side.base}, {end}) outside the device memory of "
                f"{geo.hbm_bytes} bytes"
            )
        return None
    parts = side.extent // side.row
    if side.partition < 0 or side.partition + parts > geo.partitions:
        return (
            f"{what}: SBUF tensor partitions [{side.partition}, {side.partition + parts}) "
            f"outside the {geo.partitions} partitions"
        )
    end = side.base + side.row * side.esize
    if side.base < 0 or end > geo.partition_bytes:
        return (
            f"{what}: SBUF tensor bytes [{side.base}, {end}) of each partition outside the "
            f"partition size {geo.partition_bytes}"
        )
    return None


def _indirect_error(side, geo, what):
    ind = side.indirect
    if ind is None:
        return None
    n = side.pattern[0][1] if ind.kind == "vector" else 1
    if ind.byte < 0 or ind.byte + 4 > geo.partition_bytes or ind.byte % 4:
        return (
            f"{what}: {ind.kind} offset at byte {ind.byte} is not an aligned int32 of a partition"
        )
    if ind.partition < 0 or ind.partition + n > geo.partitions:
        return (
            f"{what}: {ind.kind} offset partitions [{ind.partition}, {ind.partition + n}) "
            f"outside the {geo.partitions} partitions"
        )
    return None


def dynamic_offsets(side, sbuf):
    """The dynamic offset of ``side`` read from ``sbuf`` (a ``[partitions, bytes]`` uint8
    array): an int, a tuple of ints (vector), or None."""
    ind = side.indirect
    if ind is None:
        return None
    n = side.pattern[0][1] if ind.kind == "vector" else 1
    raw = np.ascontiguousarray(sbuf[ind.partition : ind.partition + n, ind.byte : ind.byte + 4])
    vals = raw.view("<i4").reshape(-1)
    return int(vals[0]) if ind.kind == "scalar" else tuple(int(v) for v in vals)


def side_addresses(side, dynamic=None):
    """Element addresses of a side in loop order, shape ``side.shape``: for HBM the byte
    address of every element, for SBUF ``(partition, byte)`` arrays.

    Raises ValueError (with the rule) for a partition step that is not a row, or an address
    outside the tensor; an SBUF access must also stay inside its partition row."""
    ap = side.access(dynamic)
    if side.indirect is not None and side.indirect.kind == "scalar":
        # NKI's stride of a scalar offset is prod(shape[indirect_dim+1:]) of the base tensor,
        # carried by the descriptor: fold it in as an offset.
        ap = AccessPattern(side.pattern, side.offset + int(dynamic) * side.indirect.stride)
    # An SBUF side: the partition rules of the NKI-level golden (``ap_indices``'s
    # ``partition_rule``: a contiguous partition step, every free address inside its row).
    sbuf = side.space == Space.SBUF
    idx = ap_indices((side.extent // side.row, side.row), ap, partition_rule=sbuf)
    if not sbuf:
        return side.base + idx * side.esize
    # The partition comes from the outer loop, the byte from the free loops.
    part = idx // side.row
    free = idx - part * side.row
    return side.partition + part, side.base + free * side.esize


def check(desc, geo, sbuf=None):
    """The first rule ``desc`` breaks against the memories of ``geo``: ``(Error, message)``,
    or None.  ``sbuf`` (the SBUF contents) is needed for descriptors with dynamic offsets."""
    src, dst = desc.src, desc.dst
    for side, what in ((src, "src"), (dst, "dst")):
        if side.esize not in ELEMENT_SIZES:
            return Error.ELEMENT_SIZE, f"{what}: element size {side.esize} not in {ELEMENT_SIZES}"
        if not 1 <= len(side.pattern) <= MAX_DIMS:
            return Error.SHAPE, f"{what}: pattern of {len(side.pattern)} entries (1..{MAX_DIMS})"
        if any(n < 1 for _, n in side.pattern):
            return Error.SHAPE, f"{what}: pattern {list(map(list, side.pattern))} has a num < 1"
    if src.esize != dst.esize:
        return Error.ELEMENT_SIZE, (
            f"src elements of {src.esize} bytes, dst elements of {dst.esize}: a DMA moves "
            f"elements unchanged"
        )
    if desc.op == Op.TRANSPOSE and src.esize not in TRANSPOSE_SIZES:
        return Error.ELEMENT_SIZE, (
            f"DMA transpose of {src.esize}-byte elements: only 2-byte and 4-byte dtypes"
        )
    if desc.op == Op.ADD:
        want = 4 if desc.add_dtype == AddDtype.FP32 else 2
        if src.esize != want:
            return Error.ELEMENT_SIZE, (
                f"read-add-write of {desc.add_dtype.name.lower()} needs {want}-byte elements on "
                f"both sides, got {src.esize}"
            )
    if desc.op in (Op.TRANSPOSE, Op.ADD) and dst.space != Space.SBUF:
        return Error.SPACE, f"{desc.op.name.lower()} writes the SBUF only, dst is in HBM"
    if desc.op == Op.TRANSPOSE:
        if len(src.shape) != 2 or dst.shape != src.shape[::-1]:
            return Error.SHAPE, (
                f"transpose of a view of shape {list(src.shape)} into {list(dst.shape)}: the "
                f"views must be [A, B] and [B, A]"
            )
        for side, what in ((src, "src"), (dst, "dst")):
            if _vector(side):
                return Error.SHAPE, (
                    f"{what}: a DMA transpose takes no vector offset (its views are whole "
                    f"[A, B] and [B, A] tiles; a gather or scatter is a copy)"
                )
    elif src.count != dst.count:
        return Error.SHAPE, f"src has {src.count} elements, dst {dst.count}"
    for side, what in ((src, "src"), (dst, "dst")):
        if (
            side.space == Space.SBUF
            and side.indirect is None
            and side.pattern[0][1] > 1
            and side.pattern[0][0] != side.row
        ):
            return Error.PARTITION_STEP, (
                f"{what}: SBUF partition step {side.pattern[0][0]} must be the partition row of "
                f"{side.row} elements (partition access is contiguous)"
            )
    for side, what in ((src, "src"), (dst, "dst")):
        msg = _tensor_error(side, geo, what) or _indirect_error(side, geo, what)
        if msg:
            return Error.TENSOR, msg
    fixed = []  # each side as a static side over the same addresses' box
    for side, what in ((src, "src"), (dst, "dst")):
        dyn = None
        if side.indirect is not None:
            if sbuf is None:
                raise ValueError(f"{what} has a dynamic offset: check needs the SBUF contents")
            dyn = dynamic_offsets(side, sbuf)
            rows = side.extent // side.row
            bad = [v for v in np.atleast_1d(dyn) if not 0 <= v < rows] if _vector(side) else []
            if bad:
                return Error.INDIRECT, (
                    f"{what}: vector offset {bad[0]} outside the tensor's {rows} rows"
                )
        try:
            side_addresses(side, dyn)
        except ValueError as exc:
            code = Error.INDIRECT if side.indirect is not None else Error.BOUNDS
            return code, f"{what}: {exc}"
        fixed.append(static_side(side, dyn))
    if src.space == dst.space:
        a, b = address_box(fixed[0]), address_box(fixed[1])
        if all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b)):
            return Error.OVERLAP, (
                f"the source's addresses {_box_text(a)} and the destination's {_box_text(b)} "
                f"overlap: the engine streams, so a transfer may not read what it writes"
            )
    return None


def static_side(side, dynamic=None):
    """A side without a dynamic offset whose :func:`address_box` holds every address ``side``
    forms with ``dynamic``: a scalar offset folded into the offset; a vector offset as a leading
    entry ``[row, max - min + 1]`` from the smallest index on (the box of the rows the indices
    name)."""
    from dataclasses import replace

    if side.indirect is None:
        return side
    if side.indirect.kind == "scalar":
        return replace(
            side, offset=side.offset + int(dynamic) * side.indirect.stride, indirect=None
        )
    lo, hi = min(dynamic), max(dynamic)
    pattern = ((side.row, hi - lo + 1),) + side.pattern[1:]
    return replace(side, pattern=pattern, offset=side.offset + lo * side.row, indirect=None)


def address_box(side):
    """The box of addresses a side's pattern touches: ``[(lo, hi)]`` half-open intervals, bytes
    for the device memory; partitions and bytes for the SBUF (from the pattern's corners)."""
    from ncrtl.model.dma.agu import pattern_bounds

    e = side.esize
    if side.space == Space.HBM:
        lo, hi = pattern_bounds(side.pattern)
        return [(side.base + (side.offset + lo) * e, side.base + (side.offset + hi + 1) * e)]
    start, off = divmod(side.offset, side.row)
    lo, hi = pattern_bounds(side.pattern, 1)
    p0 = side.partition + start
    return [
        (p0, p0 + side.pattern[0][1]),
        (side.base + (off + lo) * e, side.base + (off + hi + 1) * e),
    ]


def _box_text(box):
    names = ["bytes"] if len(box) == 1 else ["partitions", "bytes"]
    return ", ".join(f"{n} [{lo}, {hi})" for n, (lo, hi) in zip(names, box))


def _vector(side):
    return side.indirect is not None and side.indirect.kind == "vector"


# -- the hardware encoding ---------------------------------------------------------------------


def encode_side(side):
    """``side`` as the engine's descriptor carries it (``ncrtl.hdl.dma.engine.side_layout``):
    ``esize`` as log2 (3 for a size the hardware does not have), ``dims`` (pattern entries),
    the pattern padded to 5 entries (the device memory on the outside; an SBUF side keeps its
    partition entry first and pads between it and the free entries), the tensor (``extent``,
    ``row``, ``rows``, ``partition``) and the offset split the way the address generator takes
    it: in the SBUF ``start`` (first row of the access) and ``offset`` (inside the row); a
    scalar dynamic offset's side keeps its whole offset in ``offset`` (the engine splits it
    after adding the value read).  The dynamic offset: ``ind`` (0 none, 1 scalar, 2 vector),
    ``ipart`` and ``ibyte`` (where the int32 values are), ``istride`` (scalar)."""
    from ncrtl.model.dma.agu import DIMS

    pattern = list(side.pattern)
    dims = len(pattern)
    ind = side.indirect
    if side.space == Space.SBUF and dims:
        lead, free = pattern[0], pattern[1:]
        pattern = [lead] + [(0, 1)] * (DIMS - 1 - len(free)) + free
        start, offset = divmod(side.offset, side.row) if side.row > 0 else (0, side.offset)
        if ind is not None and ind.kind == "scalar":
            # The engine splits offset + value * stride into partition and byte once it has
            # read the value.
            start, offset = 0, side.offset
    else:
        pattern = [(0, 1)] * (DIMS - dims) + pattern
        start, offset = 0, side.offset
    return {
        "space": int(side.space),
        "esize": {1: 0, 2: 1, 4: 2}.get(side.esize, 3),
        "dims": dims,
        "base": side.base,
        "extent": side.extent,
        "row": side.row,
        "rows": side.extent // side.row if side.row > 0 else 0,
        "partition": side.partition,
        "start": start,
        "offset": offset,
        "step": [s for s, _ in pattern[:DIMS]],
        "num": [n for _, n in pattern[:DIMS]],
        "ind": INDIRECT_KINDS.index(ind.kind) + 1 if ind is not None else 0,
        "ipart": ind.partition if ind is not None else 0,
        "ibyte": ind.byte if ind is not None else 0,
        "istride": ind.stride if ind is not None and ind.kind == "scalar" else 0,
    }


def encode(desc):
    """The descriptor as ``ncrtl.hdl.dma.engine.descriptor_layout`` fields."""
    return {
        "op": int(desc.op),
        "add_dtype": int(desc.add_dtype),
        "tag": desc.tag,
        "src": encode_side(desc.src),
        "dst": encode_side(desc.dst),
    }
