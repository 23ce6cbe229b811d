"""``DescriptorCheck``: the rules of a DMA descriptor, in hardware, before anything moves."""

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.model.dma.agu import DIMS
from ncrtl.model.dma.isa import AddDtype, Error, Op, Space

__all__ = [
    "DescriptorCheck",
    "side_layout",
    "descriptor_layout",
    "Widths",
    "lead_level",
    "lead_num",
]


class Widths:
    """Field widths of a descriptor: ``addr_bits`` (device memory byte addresses),
    ``count_bits`` (a pattern entry's num), ``part_bits`` (a partition number); element
    indices, steps and offsets are signed ``addr_bits + 2`` bits."""

    def __init__(self, addr_bits=32, count_bits=16, part_bits=7):
        self.addr_bits = check_int(addr_bits, "addr_bits", minimum=8, maximum=48)
        self.count_bits = check_int(count_bits, "count_bits", minimum=2, maximum=24)
        self.part_bits = check_int(part_bits, "part_bits", minimum=1, maximum=8)
        self.index_bits = addr_bits + 2

    @classmethod
    def for_memories(cls, hbm_bytes, partitions):
        """The widths of a block on ``hbm_bytes`` of device memory and ``partitions`` SBUF
        partitions: its device-memory addresses (8 bits at least), 16-bit nums, its partition
        numbers."""
        return cls(max(8, (hbm_bytes - 1).bit_length()), 16, max(1, (partitions - 1).bit_length()))


def side_layout(wd):
    """One side (:func:`ncrtl.model.dma.isa.encode_side`), LSB first."""
    return data.StructLayout(
        {
            "space": 1,
            "esize": 2,
            "dims": 3,
            "base": wd.addr_bits,
            "extent": wd.index_bits,
            "row": wd.index_bits,
            "rows": wd.index_bits,  # the tensor's rows: partitions in the SBUF, any count in HBM
            "partition": wd.part_bits,
            "start": signed(wd.index_bits),
            "offset": signed(wd.index_bits),
            "step": data.ArrayLayout(signed(wd.index_bits), DIMS),
            "num": data.ArrayLayout(wd.count_bits, DIMS),
            # the dynamic offset: 0 none, 1 scalar, 2 vector; where its int32 values are
            "ind": 2,
            "ipart": wd.part_bits,
            "ibyte": wd.addr_bits,
            "istride": wd.index_bits,
        }
    )


def lead_level(side):
    """The level holding a side's leading pattern entry (a vector offset's dimension): 0 in the
    SBUF (the partition entry comes first), ``DIMS - dims`` in the device memory (patterns are
    padded on the outside)."""
    return Mux(side.space == Space.SBUF, 0, DIMS - side.dims)


def lead_num(side):
    """``num`` of the leading pattern entry (:func:`lead_level`)."""
    level = lead_level(side)
    out = side.num[0]
    for d in range(1, DIMS):
        out = Mux(level == d, side.num[d], out)
    return out


def descriptor_layout(wd):
    """A descriptor (:func:`ncrtl.model.dma.isa.encode`): ``op`` (2), ``add_dtype`` (1),
    ``tag`` (8), ``src``, ``dst``."""
    return data.StructLayout(
        {"op": 2, "add_dtype": 1, "tag": 8, "src": side_layout(wd), "dst": side_layout(wd)}
    )


class DescriptorCheck(wiring.Component):
    """The first rule a descriptor breaks, as :func:`ncrtl.model.dma.isa.check` orders them
    (descriptors without dynamic offsets), plus ``OPCODE`` for an operation code the golden
    cannot express: combinational.

    The bounds of a pattern come from its corners (``offset + sum(min(0, step (num - 1)))`` and
    the same with ``max``), which for a loop nest is the check of every address
    (:func:`ncrtl.model.dma.agu.pattern_bounds`).

    Parameters
    ----------
    widths : Widths
    partitions, partition_bytes : int
        The SBUF.
    hbm_bytes : int
        The device memory behind the AXI4 port.

    A side with a dynamic offset is checked in two steps, as the golden does: the rules up to
    ``TENSOR`` (its static ones: where the int32 values are), then, once the engine has read
    the values and written the side's offsets and leading entry as a static side over the same
    box (:func:`ncrtl.model.dma.isa.static_side`), its bounds, as ``INDIRECT``.  The separate
    outputs let the engine take them in that order.

    Interface
    ---------
    desc : In(descriptor_layout(widths))
    error : Out(4)
        An :class:`ncrtl.model.dma.isa.Error` code, 0 when the descriptor is legal (for a
        descriptor without dynamic offsets: the first rule it breaks).
    static_error : Out(4)
        The first rule broken up to ``TENSOR`` (and ``OPCODE``), 0 if none.
    src_bounds, dst_bounds : Out(1)
        The side's pattern forms an address outside its tensor.
    overlap : Out(1)
        The sides' address boxes intersect in one memory.
    """

    @validated_init
    def __init__(self, widths, *, partitions=128, partition_bytes=192 * 1024, hbm_bytes=1 << 30):
        if not isinstance(widths, Widths):
            raise TypeError(f"DescriptorCheck widths must be a Widths, not {widths!r}")
        self.wd = widths
        self.partitions = check_int(
            partitions, "DescriptorCheck partitions", minimum=1, maximum=128
        )
        self.partition_bytes = check_int(partition_bytes, "partition_bytes", minimum=4)
        self.hbm_bytes = check_int(hbm_bytes, "hbm_bytes", minimum=4)
        super().__init__(
            {
                "desc": In(descriptor_layout(widths)),
                "error": Out(4),
                "static_error": Out(4),
                "src_bounds": Out(1),
                "dst_bounds": Out(1),
                "overlap": Out(1),
            }
        )

    def _side(self, m, side, name):
        """Per-side figures: ``count``, ``lo``/``hi`` of the free (SBUF) or whole (HBM)
        pattern, the transpose view ``(A, B)``."""
        wide = signed(self.wd.index_bits + self.wd.count_bits + 4)
        terms_lo, terms_hi = [], []
        for d in range(DIMS):
            t = Signal(wide, name=f"{name}_t{d}")
            m.d.comb += t.eq(side.step[d] * (side.num[d] - 1))
            free = Signal(name=f"{name}_f{d}")
            m.d.comb += free.eq((side.space == Space.HBM) | (d > 0))
            terms_lo.append(Mux(free & (t < 0), t, 0))
            terms_hi.append(Mux(free & (t > 0), t, 0))
        lo = Signal(wide, name=f"{name}_lo")
        hi = Signal(wide, name=f"{name}_hi")
        m.d.comb += [lo.eq(sum(terms_lo)), hi.eq(sum(terms_hi))]
        count = Signal(DIMS * self.wd.count_bits, name=f"{name}_count")
        prod = side.num[0]
        for d in range(1, DIMS):
            prod = prod * side.num[d]
        m.d.comb += count.eq(prod)
        a = Mux(side.space == Space.SBUF, side.num[0], side.num[3])
        return count, lo, hi, a, side.num[4]

    def elaborate(self, platform):
        m = Module()
        desc = self.desc
        src, dst = desc.src, desc.dst
        s_count, s_lo, s_hi, s_a, s_b = self._side(m, src, "src")
        d_count, d_lo, d_hi, d_a, d_b = self._side(m, dst, "dst")

        def dims_bad(side):
            bad = (side.dims < 1) | (side.dims > DIMS)
            for d in range(DIMS):
                bad = bad | ~side.num[d].any()
            return bad

        def step_bad(side):
            static = ~side.ind.any()  # a dynamic side's partitions come from its values
            return (
                static & (side.space == Space.SBUF) & (side.num[0] > 1) & (side.step[0] != side.row)
            )

        def indirect_bad(side):
            """Where a dynamic offset's int32 values are: aligned, inside a partition, and one
            partition per value inside the SBUF."""
            n = Mux(side.ind == 2, lead_num(side), 1)
            bad = (side.ibyte[:2] != 0) | (side.ibyte + 4 > self.partition_bytes)
            bad = bad | (side.ipart + n > self.partitions)
            return side.ind.any() & bad

        def tensor_bad(side):
            esz = side.esize
            bad = ~side.row.any() | ~side.extent.any()
            bad = bad | (side.rows * side.row != side.extent)
            bad = bad | ((side.base & ((1 << esz) - 1)) != 0)
            hbm_end = side.base + (side.extent << esz)
            sbuf_bad = (side.partition + side.rows > self.partitions) | (
                side.base + (side.row << esz) > self.partition_bytes
            )
            return bad | Mux(side.space == Space.HBM, hbm_end > self.hbm_bytes, sbuf_bad)

        def bounds_bad(side, lo, hi):
            hbm = (side.offset + lo < 0) | (side.offset + hi >= side.extent)
            sbuf = (
                (side.start < 0)
                | (side.start + side.num[0] - 1 >= side.rows)
                | (side.offset + lo < 0)
                | (side.offset + hi >= side.row)
            )
            return Mux(side.space == Space.HBM, hbm, sbuf)

        def box(side, lo, hi):
            """Byte interval ``[a, b)`` and partition interval ``[p, q)`` of a side."""
            a = (side.base + ((side.offset + lo) << side.esize)).as_signed()
            b = (side.base + ((side.offset + hi + 1) << side.esize)).as_signed()
            p = side.partition + side.start
            return a, b, p, p + side.num[0]

        def overlap(s, s_lo, s_hi, t, t_lo, t_hi):
            sa, sb, sp, sq = box(s, s_lo, s_hi)
            ta, tb, tp, tq = box(t, t_lo, t_hi)
            bytes_meet = (sa < tb) & (ta < sb)
            parts_meet = (sp < tq) & (tp < sq)
            same = s.space == t.space
            return same & bytes_meet & Mux(s.space == Space.SBUF, parts_meet, 1)

        op = desc.op
        add_size = Mux(desc.add_dtype == AddDtype.FP32, 2, 1)
        transpose_shape_bad = (src.dims != 2) | (dst.dims != 2) | (s_a != d_b) | (s_b != d_a)
        # a gather or scatter is a copy: a transpose's views have no vector offset
        transpose_shape_bad = transpose_shape_bad | (src.ind == 2) | (dst.ind == 2)
        static_rules = [
            ((op == 3) | (src.ind == 3) | (dst.ind == 3), Error.OPCODE),
            (src.esize == 3, Error.ELEMENT_SIZE),
            (dims_bad(src), Error.SHAPE),
            (dst.esize == 3, Error.ELEMENT_SIZE),
            (dims_bad(dst), Error.SHAPE),
            (src.esize != dst.esize, Error.ELEMENT_SIZE),
            ((op == Op.TRANSPOSE) & ~src.esize.any(), Error.ELEMENT_SIZE),
            ((op == Op.ADD) & (src.esize != add_size), Error.ELEMENT_SIZE),
            ((op != Op.COPY) & (dst.space == Space.HBM), Error.SPACE),
            (Mux(op == Op.TRANSPOSE, transpose_shape_bad, s_count != d_count), Error.SHAPE),
            (step_bad(src), Error.PARTITION_STEP),
            (step_bad(dst), Error.PARTITION_STEP),
            (tensor_bad(src) | indirect_bad(src), Error.TENSOR),
            (tensor_bad(dst) | indirect_bad(dst), Error.TENSOR),
        ]
        m.d.comb += [
            self.src_bounds.eq(bounds_bad(src, s_lo, s_hi)),
            self.dst_bounds.eq(bounds_bad(dst, d_lo, d_hi)),
            self.overlap.eq(overlap(src, s_lo, s_hi, dst, d_lo, d_hi)),
        ]
        rules = static_rules + [
            (self.src_bounds, Error.BOUNDS),
            (self.dst_bounds, Error.BOUNDS),
            (self.overlap, Error.OVERLAP),
        ]

        def first(rules):
            code = Const(0, 4)
            for cond, err in reversed(rules):
                code = Mux(cond, int(err), code)
            return code

        m.d.comb += [self.static_error.eq(first(static_rules)), self.error.eq(first(rules))]
        return m
