"""``QuantizeMX``: the Vector Engine's MX quantizer, ``groups`` 32-element groups per beat."""

from amaranth.hdl import Cat, Instance, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import clamp, count_leading_zeros
from ncrtl.hdl.common.params import check_bool, check_int, validated_init
from ncrtl.hdl.fp.unpack import Unpack
from ncrtl.hdl.verilog import Cell
from ncrtl.model.fp import get_format
from ncrtl.model.vector_engine import (
    ELEMENT_FORMATS,
    GROUP_SIZE,
    SCALE_NAN,
    SCALE_RULES,
    SOURCE_FORMATS,
    scale_emax,
)

from .lane import QuantizeLane

__all__ = ["QuantizeMX", "LANE_MODULE", "MAX_GROUPS", "src_layout", "dst_layout"]

#: Verilog module name of :class:`~ncrtl.hdl.vector_engine.lane.QuantizeLane`.
LANE_MODULE = "quantize_mx_lane"

#: Groups of one beat at the hardware rate: 128 partitions / 8, 4 elements per partition.
MAX_GROUPS = 16

_SRC_BITS = 16
_CODE_BITS = 8
_FP32_BIAS = get_format("fp32").bias


def src_layout(groups):
    """Input beat: ``data`` (group ``g``'s element ``e = 4r + j`` in bits
    ``[16 (32g + e), +16)``), ``src_fmt`` (1), ``elem_fmt`` (2), ``scale_rule`` (1), LSB first."""
    return data.StructLayout(
        {
            "data": groups * GROUP_SIZE * _SRC_BITS,
            "src_fmt": 1,
            "elem_fmt": 2,
            "scale_rule": 1,
        }
    )


def dst_layout(groups):
    """Output beat: ``data`` (element code ``32g + e`` in bits ``[8 (32g + e), +8)``), ``scale``
    (group ``g``'s E8M0 byte in bits ``[8g, 8g + 8)``), ``error`` (1), LSB first."""
    return data.StructLayout(
        {"data": groups * GROUP_SIZE * _CODE_BITS, "scale": groups * 8, "error": 1}
    )


class QuantizeMX(wiring.Component):
    """QuantizeMX: BF16 / FP16 groups to MXFP8 / MXFP4 element codes and E8M0 scales, bit-exact
    with :func:`ncrtl.model.vector_engine.quantize_groups` (docs/vector_engine.md).

    A beat carries ``groups`` groups of 32 source elements (8 partitions x 4 elements each: the
    4-elements-per-partition-per-cycle rate of the instruction) with their configuration, and
    gives one output beat of ``groups * 32`` element codes and ``groups`` scale bytes.  Every
    input beat gives exactly one output beat, in order.

    Per group: the magnitudes (the encodings without their sign bits, which order BF16 and FP16
    values as integers) meet in a max tree; the maximum's FP32 exponent field ``E`` comes from
    its decode and a leading-zero count, and the scale is ``clamp(E - emax', 0, 254)``
    (``emax'`` from :func:`~ncrtl.model.vector_engine.scale_emax` for the beat's element format
    and rule), 0 for an all-zero group, ``0xFF`` for a group holding NaN or Inf.  Per element:
    one :class:`~ncrtl.hdl.vector_engine.lane.QuantizeLane`.

    An ``elem_fmt`` of 3 is an invalid configuration: its output beat has ``error`` set and all
    data and scales 0 (a consumer writes nothing for it); the unit goes on with the next beat.

    Pipeline (each ``|`` a register): max tree, scale ``|`` lanes ``|``: latency 2.  The
    pipeline advances when its output register is empty or being taken
    (``advance = ~dst.valid | dst.ready``, the clock enable of every stage), and ``src`` is
    ready exactly then, so no beat is lost or duplicated under any stall pattern and the output
    holds while it waits.  ``src.ready`` depends combinationally on ``dst.ready`` (no skid
    buffer); a bubble inside the pipeline is not squeezed out while the output stalls.  One beat
    per cycle without backpressure.

    Parameters
    ----------
    groups : int
        Groups per beat, 1..16 (16: all 128 partitions, the hardware rate).
    instance : bool
        Lanes as Verilog instances of the one lane module :data:`LANE_MODULE` (True, for Verilog
        generation: see :meth:`cells`) or as Amaranth submodules (False, for the Amaranth
        simulator, which cannot run instances).

    Attributes
    ----------
    latency : int
        2: a beat taken at a clock edge is on ``dst`` after two pipeline advances.

    Interface
    ---------
    src : In(stream.Signature(src_layout(groups)))
        ``data``: ``groups * 32`` 16-bit source encodings, group ``g``'s element ``4r + j``
        (partition ``8g + r`` of the beat's partitions, free element ``j`` of the quad) in bits
        ``[16 (32g + 4r + j), +16)``; ``src_fmt``: 0 BF16, 1 FP16; ``elem_fmt``: 0 e4m3fn,
        1 e5m2, 2 e2m1fn, 3 invalid; ``scale_rule``: 0 Trainium3 (``emax - 1``), 1 OCP
        (``emax``).
    dst : Out(stream.Signature(dst_layout(groups)))
        ``data``: the element codes, one 8-bit slot each in the order of ``src.data`` (FP4 in
        the low 4 bits); ``scale``: group ``g``'s E8M0 byte in bits ``[8g, 8g + 8)``; ``error``:
        the beat's ``elem_fmt`` was invalid.
    """

    latency = 2

    @validated_init
    def __init__(self, groups=MAX_GROUPS, *, instance=True):
        self.groups = check_int(groups, "QuantizeMX groups", minimum=1, maximum=MAX_GROUPS)
        self.instance = check_bool(instance, "QuantizeMX instance")
        super().__init__(
            {
                "src": In(stream.Signature(src_layout(groups))),
                "dst": Out(stream.Signature(dst_layout(groups))),
            }
        )

    def __repr__(self):
        return f"QuantizeMX(groups={self.groups})"

    def cells(self):
        """The lane module, placed with ``Instance`` once per element (none with
        ``instance=False``)."""
        return [Cell(LANE_MODULE, QuantizeLane)] if self.instance else []

    def elaborate(self, platform):
        m = Module()
        src, dst = self.src, self.dst
        G = self.groups

        valid = Signal(self.latency, name="valid")  # valid[k]: stage k + 1 holds a beat
        advance = Signal(name="advance")
        m.d.comb += [
            advance.eq(~valid[-1] | dst.ready),
            src.ready.eq(advance),
            dst.valid.eq(valid[-1]),
        ]
        with m.If(advance):
            m.d.sync += valid.eq(Cat(src.valid, valid[:-1]))

        # Stage 1: the group maxima and scales.
        p = src.payload
        emax = self._emax(m, p.elem_fmt, p.scale_rule)
        scales, nans = zip(*(self._group_scale(m, g, p, emax) for g in range(G)))
        s1_data = Signal(len(p.data), name="s1_data", reset_less=True)
        s1_src_fmt = Signal(1, name="s1_src_fmt", reset_less=True)
        s1_elem_fmt = Signal(2, name="s1_elem_fmt", reset_less=True)
        s1_scale = Signal(8 * G, name="s1_scale", reset_less=True)
        s1_nan = Signal(G, name="s1_nan", reset_less=True)
        with m.If(advance):
            m.d.sync += [
                s1_data.eq(p.data),
                s1_src_fmt.eq(p.src_fmt),
                s1_elem_fmt.eq(p.elem_fmt),
                s1_scale.eq(Cat(*scales)),
                s1_nan.eq(Cat(*nans)),
            ]

        # Stage 2: the lanes.
        codes = []
        for g in range(G):
            for e in range(GROUP_SIZE):
                k = g * GROUP_SIZE + e
                codes.append(
                    self._lane(
                        m,
                        f"g{g}_e{e}",
                        s1_data[_SRC_BITS * k : _SRC_BITS * (k + 1)],
                        s1_src_fmt,
                        s1_elem_fmt,
                        s1_scale[8 * g : 8 * g + 8],
                        s1_nan[g],
                    )
                )
        error = Signal(name="error")
        m.d.comb += error.eq(s1_elem_fmt >= len(ELEMENT_FORMATS))
        out_data = Signal(len(dst.payload.data), name="out_data", reset_less=True)
        out_scale = Signal(8 * G, name="out_scale", reset_less=True)
        out_error = Signal(name="out_error", reset_less=True)
        group_scales = [Mux(s1_nan[g], SCALE_NAN, s1_scale[8 * g : 8 * g + 8]) for g in range(G)]
        with m.If(advance):
            m.d.sync += [
                out_data.eq(Mux(error, 0, Cat(*codes))),
                out_scale.eq(Mux(error, 0, Cat(*group_scales))),
                out_error.eq(error),
            ]
        m.d.comb += [
            dst.payload.data.eq(out_data),
            dst.payload.scale.eq(out_scale),
            dst.payload.error.eq(out_error),
        ]
        return m

    @staticmethod
    def _emax(m, elem_fmt, rule):
        """``emax'`` of the beat's element format and scale rule (0 for an invalid format)."""
        table = {
            (i, r): scale_emax(f, rule_name)
            for i, f in enumerate(ELEMENT_FORMATS)
            for r, rule_name in enumerate(SCALE_RULES)
        }
        emax = Signal(range(max(table.values()) + 1), name="emax")
        with m.Switch(Cat(elem_fmt, rule)):
            for (i, r), value in table.items():
                with m.Case(i | (r << len(elem_fmt))):
                    m.d.comb += emax.eq(value)
            with m.Default():
                m.d.comb += emax.eq(0)
        return emax

    @staticmethod
    def _group_scale(m, g, p, emax):
        """``(scale byte, holds NaN/Inf)`` of group ``g`` of the input beat ``p``."""
        base = g * GROUP_SIZE * _SRC_BITS
        mags, specials = [], []
        for e in range(GROUP_SIZE):
            x = p.data[base + _SRC_BITS * e : base + _SRC_BITS * (e + 1)]
            mags.append(x[: _SRC_BITS - 1])
            # Exponent field all ones: Inf or NaN, per source format.
            fields = [x[get_format(f).man_bits : _SRC_BITS - 1].all() for f in SOURCE_FORMATS]
            specials.append(Mux(p.src_fmt, fields[1], fields[0]))
        nan = Signal(name=f"g{g}_nan")
        m.d.comb += nan.eq(Cat(*specials).any())
        level = 0
        while len(mags) > 1:
            level += 1
            nxt = []
            for j in range(0, len(mags), 2):
                a, b = mags[j], mags[j + 1]
                node = Signal(_SRC_BITS - 1, name=f"g{g}_max{level}_{j // 2}")
                m.d.comb += node.eq(Mux(a > b, a, b))
                nxt.append(node)
            mags = nxt
        m.submodules[f"g{g}_unpack"] = up = Unpack(SOURCE_FORMATS)
        m.d.comb += [up.i_bits.eq(mags[0]), up.i_fmt.eq(p.src_fmt)]
        v = up.o_value
        lz = count_leading_zeros(m, v.sig, name=f"g{g}_lz")
        # floor(log2 max) + 127 - emax'.  A BF16 subnormal maximum lies below the FP32 normals
        # (exponent field 0): the clamp at 0 gives the scale the field would.
        width = len(v.sig)
        unclamped = Signal(range(-512, 512), name=f"g{g}_e")
        m.d.comb += unclamped.eq(v.exp + (width - 1 + _FP32_BIAS) - lz - emax)
        clamped = clamp(m, unclamped, 0, 254, name=f"g{g}_clamp")
        scale = Signal(8, name=f"g{g}_scale")
        m.d.comb += scale.eq(Mux(v.zero, 0, clamped))
        return scale, nan

    def _lane(self, m, name, bits, src_fmt, elem_fmt, scale, nan):
        code = Signal(_CODE_BITS, name=f"code_{name}")
        ports = {
            "i_bits": bits,
            "i_src_fmt": src_fmt,
            "i_elem_fmt": elem_fmt,
            "i_scale": scale,
            "i_nan": nan,
        }
        if self.instance:
            m.submodules[f"lane_{name}"] = Instance(
                LANE_MODULE, **{f"i_{k}": v for k, v in ports.items()}, o_o_code=code
            )
        else:
            m.submodules[f"lane_{name}"] = lane = QuantizeLane()
            m.d.comb += [getattr(lane, k).eq(v) for k, v in ports.items()]
            m.d.comb += code.eq(lane.o_code)
        return code
