"""One QuantizeMX element: a BF16 / FP16 value divided by its group's scale, rounded into an MX
element format (combinational)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import count_leading_zeros
from ncrtl.hdl.fp.round import round_pack, rounding_grid
from ncrtl.hdl.fp.unpack import Unpack, unpack_geometry
from ncrtl.model.fp import get_format
from ncrtl.model.vector_engine import (
    ELEMENT_FORMATS,
    SOURCE_FORMATS,
    group_nan_code,
    max_code,
)

__all__ = ["QuantizeLane", "rounding_grid"]

_FP32_BIAS = get_format("fp32").bias


class QuantizeLane(wiring.Component):
    """Quantize one source element with its group's scale (``ncrtl.model.vector_engine``).

    ``o_code`` is ``x / 2**(i_scale - 127)`` rounded once to nearest-even into the element
    format ``i_elem_fmt``, subnormals kept, saturated to the largest finite value, with the sign
    of ``x`` (also on zeros and on values that round to zero); with ``i_nan`` (the group holds a
    NaN or an Inf) it is the format's group NaN code (``0x7F`` e4m3fn, ``0x7E`` e5m2, ``0x0``
    e2m1fn).  An ``i_elem_fmt`` of 3 gives 0.

    How: the source is decoded (:class:`~ncrtl.hdl.fp.unpack.Unpack`), its significand
    normalized with a leading-zero count (BF16 and FP16 subnormals included), and the exponent
    of its leading one, minus the scale's, goes with the significand to one
    :func:`~ncrtl.hdl.fp.round.round_pack` per element format on that format's
    :func:`rounding_grid`.  Dividing by a power of two is exact, so that rounding is the only
    one.

    Attributes
    ----------
    latency : int
        0: combinational.

    Interface
    ---------
    i_bits : In(16)
        BF16 or FP16 encoding.
    i_src_fmt : In(1)
        Index in :data:`~ncrtl.model.vector_engine.SOURCE_FORMATS`: 0 BF16, 1 FP16.
    i_elem_fmt : In(2)
        Index in :data:`~ncrtl.model.vector_engine.ELEMENT_FORMATS`: 0 e4m3fn, 1 e5m2,
        2 e2m1fn.
    i_scale : In(8)
        The group's E8M0 scale byte (0..254).
    i_nan : In(1)
        The group holds a NaN or an Inf.
    o_code : Out(8)
        Element encoding; FP4 in the low 4 bits (the high 4 are 0).
    """

    latency = 0

    def __init__(self):
        super().__init__(
            {
                "i_bits": In(16),
                "i_src_fmt": In(1),
                "i_elem_fmt": In(2),
                "i_scale": In(8),
                "i_nan": In(1),
                "o_code": Out(8),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.unpack = up = Unpack(SOURCE_FORMATS)
        m.d.comb += [up.i_bits.eq(self.i_bits), up.i_fmt.eq(self.i_src_fmt)]
        v = up.o_value
        _, width, exp_range = unpack_geometry([get_format(f) for f in SOURCE_FORMATS])
        lz = count_leading_zeros(m, v.sig, name="lz")
        # The significand with its leading one at the top (zero stays zero).
        sig = Signal(width, name="sig")
        m.d.comb += sig.eq(v.sig << lz)
        # Exponent of the leading one of x / 2**(scale - 127).
        lo = exp_range.start - 1 + _FP32_BIAS - 255
        hi = exp_range.stop - 1 + width - 1 + _FP32_BIAS
        e_top = Signal(range(lo, hi + 1), name="e_top")
        m.d.comb += e_top.eq(v.exp + (width - 1 + _FP32_BIAS) - lz - self.i_scale)
        codes = [
            self._element(m, get_format(f), e_top, sig, v, name=f"e{i}")
            for i, f in enumerate(ELEMENT_FORMATS)
        ]
        with m.Switch(self.i_elem_fmt):
            for i, code in enumerate(codes):
                with m.Case(i):
                    m.d.comb += self.o_code.eq(code)
            with m.Default():
                m.d.comb += self.o_code.eq(0)
        return m

    def _element(self, m, fmt, e_top, sig, v, *, name):
        """The code of one element format (8 bits, zero-extended)."""
        mag, ovf = round_pack(m, rounding_grid(fmt), e_top, sig, Const(0, 1), name=name)
        top = max_code(fmt)
        sat = Signal(name=f"{name}_sat")
        m.d.comb += sat.eq(ovf | (mag > top))
        res = Signal(fmt.bits - 1, name=f"{name}_res")
        # A zero significand has no leading one to place: round_pack's code would be garbage.
        m.d.comb += res.eq(Mux(v.zero, 0, Mux(sat, top, mag)))
        code = Signal(8, name=f"{name}_code")
        m.d.comb += code.eq(Mux(self.i_nan, group_nan_code(fmt), Cat(res, v.sign)))
        return code
