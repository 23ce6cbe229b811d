"""Exact product of two decoded operands."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import check_formats, format_names, validated_init

from .exact import ExactLayout
from .unpack import Unpack, unpack_geometry

__all__ = ["ExactMul", "product_layout"]


def product_layout(formats_a, formats_b):
    """The :class:`~ncrtl.hdl.fp.exact.ExactLayout` of the exact product of an operand of
    ``formats_a`` and one of ``formats_b`` (validated :class:`~ncrtl.model.fp.Format` lists):
    what :class:`ExactMul` outputs."""
    _, sig_a, exp_a = unpack_geometry(formats_a)
    _, sig_b, exp_b = unpack_geometry(formats_b)
    return ExactLayout(
        sig_a + sig_b, range(exp_a.start + exp_b.start, exp_a.stop - 1 + exp_b.stop - 1 + 1)
    )


class ExactMul(wiring.Component):
    """Exact product of an operand of ``formats_a`` and one of ``formats_b``.

    The product ``(-1)**sign * sig * 2**exp`` of ``o_product`` is exact: ``sig`` holds the full
    significand product (``sig_width_a + sig_width_b`` bits, e.g. 48 for FP32 x FP32) and no
    rounding happens.  IEEE rules for the specials:

    * ``nan``: either operand is NaN, or ``Inf * 0``;
    * ``inf``: an operand is Inf and the product is not NaN (sign ``sign``);
    * ``zero``: an operand is zero and the other is finite (the sign is the XOR of the operand
      signs, so ``-0 * +x = -0``, which the fused units need for the -0 rule).

    ``sig`` and ``exp`` are only meaningful when the product is finite.

    Parameters
    ----------
    formats_a, formats_b : list of str or Format
        Formats each operand may take; selected at run time by ``i_fmt_a`` / ``i_fmt_b`` (index
        into the list) when more than one is listed.  E8M0 is refused (a scale, not an operand).

    Attributes
    ----------
    sig_width : int
        Significand width of the product.
    exp_range : range
        Every exponent the product can carry.
    layout : ExactLayout
        ``ExactLayout(sig_width, exp_range)``: the layout of ``o_product``.
    latency : int
        0: purely combinational (no ``en``).  :class:`~ncrtl.hdl.fp.dot_add.FusedDotAdd` registers the
        products in its first pipeline stage.

    Interface
    ---------
    i_a : In(width of the widest container of formats_a)
    i_b : In(width of the widest container of formats_b)
    i_fmt_a, i_fmt_b : In(range(len(formats)))
        Only present for lists of more than one format.
    o_product : Out(ExactLayout(sig_width, exp_range))
        The product, see above.
    """

    latency = 0

    @validated_init
    def __init__(self, formats_a, formats_b):
        self.formats_a = check_formats(formats_a, "ExactMul formats_a")
        self.formats_b = check_formats(formats_b, "ExactMul formats_b")
        in_a = unpack_geometry(self.formats_a)[0]
        in_b = unpack_geometry(self.formats_b)[0]
        self.layout = product_layout(self.formats_a, self.formats_b)
        self.sig_width, self.exp_range = self.layout.sig_width, self.layout.exp_range
        members = {"i_a": In(in_a), "i_b": In(in_b)}
        if len(self.formats_a) > 1:
            members["i_fmt_a"] = In(range(len(self.formats_a)))
        if len(self.formats_b) > 1:
            members["i_fmt_b"] = In(range(len(self.formats_b)))
        members["o_product"] = Out(self.layout)
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
        a, b, p = ua.o_value, ub.o_value, self.o_product
        inf_times_zero = (a.inf & b.zero) | (a.zero & b.inf)
        nan = a.nan | b.nan | inf_times_zero
        m.d.comb += [
            p.sign.eq(a.sign ^ b.sign),
            p.exp.eq(a.exp + b.exp),
            p.sig.eq(a.sig * b.sig),
            p.nan.eq(nan),
            p.inf.eq((a.inf | b.inf) & ~nan),
            p.zero.eq((a.zero | b.zero) & ~(a.inf | b.inf | nan)),
        ]
        return m
