"""Exact product of two decoded operands."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.common.bits import bits_for_range

from ._util import check_formats, format_names, validated_init
from .unpack import Unpack, unpack_geometry

__all__ = ["ExactMul"]


class ExactMul(wiring.Component):
    """Exact product of an operand of ``formats_a`` and one of ``formats_b``.

    The product ``(-1)**o_sign * o_sig * 2**o_exp`` is exact: ``o_sig`` holds the full
    significand product (``sig_width_a + sig_width_b`` bits, e.g. 48 for FP32 x FP32) and no
    rounding happens.  IEEE rules for the specials:

    * ``o_nan``: either operand is NaN, or ``Inf * 0``;
    * ``o_inf``: an operand is Inf and the product is not NaN (sign ``o_sign``);
    * ``o_zero``: an operand is zero and the other is finite (the sign is the XOR of the operand
      signs, so ``-0 * +x = -0``, which the fused units need for the -0 rule).

    ``o_sig`` and ``o_exp`` are only meaningful when the product is finite.

    Parameters
    ----------
    formats_a, formats_b : list of str or Format
        Formats each operand may take; selected at run time by ``i_fmt_a`` / ``i_fmt_b`` (index
        into the list) when more than one is listed.  E8M0 is refused (a scale, not an operand).

    Attributes
    ----------
    sig_width : int
        Width of ``o_sig``.
    exp_range : range
        Every value ``o_exp`` can take.
    latency : int
        0: purely combinational (no ``en``).  :class:`~hdl.fp.dot_add.FusedDotAdd` registers the
        products in its first pipeline stage.

    Interface
    ---------
    i_a : In(width of the widest container of formats_a)
    i_b : In(width of the widest container of formats_b)
    i_fmt_a, i_fmt_b : In(range(len(formats)))
        Only present for lists of more than one format.
    o_sign, o_exp, o_sig, o_zero, o_inf, o_nan : Out
        The product, see above.
    """

    latency = 0

    @validated_init
    def __init__(self, formats_a, formats_b):
        self.formats_a = check_formats(formats_a, "ExactMul formats_a")
        self.formats_b = check_formats(formats_b, "ExactMul formats_b")
        in_a, sig_a, exp_a = unpack_geometry(self.formats_a)
        in_b, sig_b, exp_b = unpack_geometry(self.formats_b)
        self.sig_width = sig_a + sig_b
        lo = exp_a.start + exp_b.start
        hi = (exp_a.stop - 1) + (exp_b.stop - 1)
        self.exp_range = range(lo, hi + 1)
        members = {"i_a": In(in_a), "i_b": In(in_b)}
        if len(self.formats_a) > 1:
            members["i_fmt_a"] = In(range(len(self.formats_a)))
        if len(self.formats_b) > 1:
            members["i_fmt_b"] = In(range(len(self.formats_b)))
        members.update({
            "o_sign": Out(1),
            "o_exp": Out(bits_for_range(lo, hi)),
            "o_sig": Out(self.sig_width),
            "o_zero": Out(1),
            "o_inf": Out(1),
            "o_nan": Out(1),
        })
        super().__init__(members)

    def __repr__(self):
        return f"ExactMul({format_names(self.formats_a)}, {format_names(self.formats_b)})"

    def elaborate(self, platform):
        m = Module()
        m.submodules.unpack_a = ua = Unpack(self.formats_a)
        m.submodules.unpack_b = ub = Unpack(self.formats_b)
        m.d.comb += [ua.i_bits.eq(self.i_a), ub.i_bits.eq(self.i_b)]
        if len(self.formats_a) > 1:
            m.d.comb += ua.i_fmt.eq(self.i_fmt_a)
        if len(self.formats_b) > 1:
            m.d.comb += ub.i_fmt.eq(self.i_fmt_b)
        inf_times_zero = (ua.o_inf & ub.o_zero) | (ua.o_zero & ub.o_inf)
        nan = ua.o_nan | ub.o_nan | inf_times_zero
        m.d.comb += [
            self.o_sign.eq(ua.o_sign ^ ub.o_sign),
            self.o_exp.eq(ua.o_exp + ub.o_exp),
            self.o_sig.eq(ua.o_sig * ub.o_sig),
            self.o_nan.eq(nan),
            self.o_inf.eq((ua.o_inf | ub.o_inf) & ~nan),
            self.o_zero.eq((ua.o_zero | ub.o_zero) & ~(ua.o_inf | ub.o_inf | nan)),
        ]
        return m
