"""Fused dot-product-add: ``round_fp32(psum + 2**scale_exp * sum_i a_i * b_i)``, one rounding."""

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import (
    check_bool,
    check_formats,
    check_int,
    format_names,
    validated_init,
)

from .add_round import AddRound
from .exact import ExactLayout, fixed_point_window, product_sum
from .mul import ExactMul
from .unpack import Unpack

__all__ = ["FusedDotAdd", "MAX_FIXED_POINT_WIDTH", "SCALE_EXP_SHAPE"]

#: Widest fixed-point product sum FusedDotAdd accepts (bits, sign included).
MAX_FIXED_POINT_WIDTH = 128

#: Shape of ``i_scale_exp``: -512..511 covers the sum of two unbiased E8M0 exponents (+-254).
SCALE_EXP_SHAPE = signed(10)


class FusedDotAdd(wiring.Component):
    """Fused dot-product-add with one round-to-nearest-even to FP32.

    Computes ``o_result = round_fp32(psum + 2**scale_exp * sum_i a_i * b_i)`` (the golden
    :func:`ncrtl.model.fp.ops.fp32_dot_add`): products are exact, the sum of products and its scaling
    are exact, and the only rounding is the final one, so with one product this is an FMA.
    Exponents are as wide as the operands need: nothing overflows or flushes before the
    rounding.  Subnormals are kept on input and output, overflow gives +-Inf.  A NaN input,
    ``Inf * 0``, ``Inf - Inf`` (between products or with ``psum``) or a NaN scale give
    ``0x7FC00000``.  An exact zero result is -0 only when ``psum`` and every product are -0.

    Structure
    ---------
    * ``n_products == 1``: the exact product (48 bits for FP32) is operand B of
      :class:`AddRound`, psum operand A.
    * ``n_products > 1``: the exact products are summed by
      :func:`~ncrtl.hdl.fp.exact.product_sum` (each shifted into a fixed-point word whose LSB is
      the smallest product LSB exponent of the listed formats,
      :func:`~ncrtl.hdl.fp.exact.fixed_point_window`, and added exactly), and the magnitude of
      the sum (possibly unnormalized, possibly zero) is operand B of :class:`AddRound` with
      exponent ``lsb + scale_exp``.  Format sets whose window would exceed
      :data:`MAX_FIXED_POINT_WIDTH` bits (BF16, FP32/TF32) are refused: use one product.

    Parameters
    ----------
    formats_a, formats_b : list of str or Format
        Formats each operand may take (index-selected at run time by ``i_fmt_a`` / ``i_fmt_b``
        when more than one is listed; all products of one cycle share the selects).
        E.g. the double-row FP8 mode: ``["fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2"]`` twice with
        ``n_products=2``; the MX mode: ``["fp8_e4m3fn", "fp8_e5m2", "fp4_e2m1fn"]`` twice with
        ``n_products=4, scale=True``.
    n_products : int
        Products summed per step.
    scale : bool
        Adds the ``i_scale_exp`` / ``i_scale_nan`` inputs (MX block scales).

    Attributes
    ----------
    latency : int
        5 cycles of ``en`` for one product (decode + multiply, then :class:`AddRound`), 6 for
        more (decode + multiply + fixed-point alignment, exact product sum, then AddRound).
    operand_width_a, operand_width_b : int
        Width of one operand slot in ``i_a`` / ``i_b`` (the widest container of the formats).

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of the whole pipeline.
    i_psum : In(32)
        FP32 partial sum.
    i_a, i_b : In(n_products * operand_width)
        Operands, product ``k`` in bits ``[k*w, (k+1)*w)``; a narrower format (FP4 in an 8-bit
        slot) reads the low bits of its slot.
    i_fmt_a, i_fmt_b : In(range(len(formats)))
        Format selects (only for lists of more than one format).
    i_scale_exp : In(signed(10))
        With ``scale=True``: exponent applied to the product sum (sum of the two unbiased E8M0
        scale exponents, -254..254; any value of the port is handled exactly).
    i_scale_nan : In(1)
        With ``scale=True``: a scale was NaN (E8M0 0xFF); the result is NaN.
    o_result : Out(32)
        FP32 encoding of the result, ``latency`` enabled cycles after the inputs.
    """

    @validated_init
    def __init__(self, formats_a, formats_b, n_products, *, scale=False):
        self.formats_a = check_formats(formats_a, "FusedDotAdd formats_a")
        self.formats_b = check_formats(formats_b, "FusedDotAdd formats_b")
        self.n_products = check_int(n_products, "FusedDotAdd n_products", minimum=1)
        self.scale = check_bool(scale, "FusedDotAdd scale")
        if n_products > 1:
            window = fixed_point_window(self.formats_a, self.formats_b, n_products)
            if window.total > MAX_FIXED_POINT_WIDTH:
                raise ValueError(
                    f"FusedDotAdd with {n_products} products of formats_a "
                    f"{format_names(self.formats_a)} x formats_b {format_names(self.formats_b)} "
                    f"needs a {window.total}-bit fixed-point product sum, more than the "
                    f"{MAX_FIXED_POINT_WIDTH}-bit limit; use n_products=1 for these formats"
                )
            self._window = window
        self.latency = 5 if n_products == 1 else 6
        self.operand_width_a = max(f.container_bits for f in self.formats_a)
        self.operand_width_b = max(f.container_bits for f in self.formats_b)
        members = {
            "en": In(1, init=1),
            "i_psum": In(32),
            "i_a": In(n_products * self.operand_width_a),
            "i_b": In(n_products * self.operand_width_b),
        }
        if len(self.formats_a) > 1:
            members["i_fmt_a"] = In(range(len(self.formats_a)))
        if len(self.formats_b) > 1:
            members["i_fmt_b"] = In(range(len(self.formats_b)))
        if scale:
            members["i_scale_exp"] = In(SCALE_EXP_SHAPE)
            members["i_scale_nan"] = In(1)
        members["o_result"] = Out(32)
        super().__init__(members)

    @classmethod
    def for_mode(cls, mode):
        """The unit of a PE mode (a row of :data:`ncrtl.model.modes.MODES`): its formats, its
        products per step and its block scale."""
        return cls(mode.formats_s, mode.formats_m, mode.products, scale=mode.scale)

    def __repr__(self):
        return (
            f"FusedDotAdd({format_names(self.formats_a)}, {format_names(self.formats_b)}, "
            f"{self.n_products}, scale={self.scale})"
        )

    def _scale_range(self):
        if not self.scale:
            return 0, 0
        w = SCALE_EXP_SHAPE.width
        return -(1 << (w - 1)), (1 << (w - 1)) - 1

    def elaborate(self, platform):
        m = Module()

        def stage(name, value):
            """A pipeline register of ``value`` (a value or an exact-value view), loaded when
            ``en`` is set."""
            reg = Signal(value.shape(), name=name, reset_less=True)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # ---- stage 1: decode psum, decode + multiply every pair (+ align: product_sum) -------
        m.submodules.unpack_psum = up = Unpack(["fp32"])
        m.d.comb += up.i_bits.eq(self.i_psum)
        products = []
        wa, wb = self.operand_width_a, self.operand_width_b
        for k in range(self.n_products):
            m.submodules[f"mul{k}"] = mul = ExactMul(self.formats_a, self.formats_b)
            m.d.comb += [
                mul.i_a.eq(self.i_a[k * wa : (k + 1) * wa]),
                mul.i_b.eq(self.i_b[k * wb : (k + 1) * wb]),
            ]
            if len(self.formats_a) > 1:
                m.d.comb += mul.i_fmt_a.eq(self.i_fmt_a)
            if len(self.formats_b) > 1:
                m.d.comb += mul.i_fmt_b.eq(self.i_fmt_b)
            products.append(mul.o_product)
        psum = stage("r1_psum", up.o_value)
        if self.scale:
            scale_exp = stage("r1_scale_exp", self.i_scale_exp)
            scale_nan = stage("r1_scale_nan", self.i_scale_nan)

        if self.n_products == 1:
            product = stage("r1_product", products[0])
        else:
            # ---- stage 2: the exact sum of the aligned products ------------------------------
            product = stage(
                "r2_sum", product_sum(m, products, self._window, name="s2_sum", stage=stage)
            )
            psum = stage("r2_psum", psum)
            if self.scale:
                scale_exp = stage("r2_scale_exp", scale_exp)
                scale_nan = stage("r2_scale_nan", scale_nan)

        # Operand B: the product (sum), scaled by 2**scale_exp (exact: an exponent shift).
        if self.scale:
            lo, hi = self._scale_range()
            p = product.shape()
            b = Signal(
                ExactLayout(p.sig_width, range(p.exp_range.start + lo, p.exp_range.stop + hi)),
                name="b",
            )
            m.d.comb += [
                b.sign.eq(product.sign),
                b.exp.eq(product.exp + scale_exp),
                b.sig.eq(product.sig),
                b.zero.eq(product.zero),
                b.inf.eq(product.inf),
                b.nan.eq(product.nan | scale_nan),
            ]
        else:
            b = product
        m.submodules.core = core = AddRound(psum.shape(), b.shape())
        m.d.comb += [
            core.en.eq(self.en),
            core.i_a.eq(psum),
            core.i_b.eq(b),
            self.o_result.eq(core.o_result),
        ]
        return m
