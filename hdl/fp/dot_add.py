"""Fused dot-product-add: ``round_fp32(psum + 2**scale_exp * sum_i a_i * b_i)``, one rounding."""

import itertools

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.common.bits import bits_for_range

from ._util import check_formats, check_positive_int, format_names, validated_init
from .add_round import AddRound
from .mul import ExactMul
from .unpack import Unpack

__all__ = ["FusedDotAdd", "MAX_FIXED_POINT_WIDTH", "SCALE_EXP_SHAPE", "fixed_point_window"]

#: Widest fixed-point product sum FusedDotAdd accepts (bits, sign included).
MAX_FIXED_POINT_WIDTH = 128

#: Shape of ``i_scale_exp``: -512..511 covers the sum of two unbiased E8M0 exponents (+-254).
SCALE_EXP_SHAPE = signed(10)


def fixed_point_window(formats_a, formats_b, n_products):
    """``(lsb_exp, magnitude_bits, total_bits)`` of the exact fixed-point product sum.

    Every finite product of an ``a`` of ``formats_a`` and a ``b`` of ``formats_b`` is an integer
    multiple of ``2**lsb_exp`` (the smallest product LSB exponent over every format pair) below
    ``2**(lsb_exp + magnitude_bits)`` (the largest product over every pair), so the sum of
    ``n_products`` of them fits ``magnitude_bits + ceil(log2(n_products))`` bits plus a sign bit:
    ``total_bits``.
    """
    pairs = list(itertools.product(formats_a, formats_b))
    lsb = min(fa.lsb_exp_min + fb.lsb_exp_min for fa, fb in pairs)
    mag = max((fa.max_sig * fb.max_sig).bit_length() + (fa.emax - fa.man_bits)
              + (fb.emax - fb.man_bits) - lsb for fa, fb in pairs)
    growth = (n_products - 1).bit_length()
    return lsb, mag, mag + growth + 1


class FusedDotAdd(wiring.Component):
    """Fused dot-product-add with one round-to-nearest-even to FP32.

    Computes ``o_result = round_fp32(psum + 2**scale_exp * sum_i a_i * b_i)`` (the golden
    :func:`model.fp.ops.fp32_dot_add`): products are exact, the sum of products and its scaling
    are exact, and the only rounding is the final one, so with one product this is an FMA.
    Exponents are as wide as the operands need: nothing overflows or flushes before the
    rounding.  Subnormals are kept on input and output, overflow gives +-Inf.  A NaN input,
    ``Inf * 0``, ``Inf - Inf`` (between products or with ``psum``) or a NaN scale give
    ``0x7FC00000``.  An exact zero result is -0 only when ``psum`` and every product are -0.

    Structure
    ---------
    * ``n_products == 1``: the exact product (48 bits for FP32) is operand B of
      :class:`AddRound`, psum operand A.
    * ``n_products > 1``: each exact product is shifted into a two's complement fixed-point word
      whose LSB is the smallest product LSB exponent of the listed formats
      (:func:`fixed_point_window`), the words are added exactly, and the magnitude of the sum
      (possibly unnormalized, possibly zero) is operand B of :class:`AddRound` with exponent
      ``lsb + scale_exp``.  Format sets whose window would exceed
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
        self.n_products = check_positive_int(n_products, "FusedDotAdd n_products")
        if not isinstance(scale, bool):
            raise TypeError(f"FusedDotAdd scale must be a bool, not {scale!r}")
        self.scale = scale
        if n_products > 1:
            lsb, mag, total = fixed_point_window(self.formats_a, self.formats_b, n_products)
            if total > MAX_FIXED_POINT_WIDTH:
                raise ValueError(
                    f"FusedDotAdd with {n_products} products of formats_a "
                    f"{format_names(self.formats_a)} x formats_b {format_names(self.formats_b)} "
                    f"needs a {total}-bit fixed-point product sum, more than the "
                    f"{MAX_FIXED_POINT_WIDTH}-bit limit; use n_products=1 for these formats")
            self._fixed = (lsb, mag, total)
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

    def __repr__(self):
        return (f"FusedDotAdd({format_names(self.formats_a)}, {format_names(self.formats_b)}, "
                f"{self.n_products}, scale={self.scale})")

    def _scale_range(self):
        if not self.scale:
            return 0, 0
        w = SCALE_EXP_SHAPE.width
        return -(1 << (w - 1)), (1 << (w - 1)) - 1

    def elaborate(self, platform):
        m = Module()
        n = self.n_products

        def stage(name, value, shape=None):
            reg = Signal(shape if shape is not None else len(value), name=name, reset_less=True)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # ---- stage 1: decode psum, decode + multiply every pair ------------------------------
        m.submodules.unpack_psum = up = Unpack(["fp32"])
        m.d.comb += up.i_bits.eq(self.i_psum)
        muls = []
        for k in range(n):
            m.submodules[f"mul{k}"] = mul = ExactMul(self.formats_a, self.formats_b)
            wa, wb = self.operand_width_a, self.operand_width_b
            m.d.comb += [mul.i_a.eq(self.i_a[k * wa:(k + 1) * wa]),
                         mul.i_b.eq(self.i_b[k * wb:(k + 1) * wb])]
            if len(self.formats_a) > 1:
                m.d.comb += mul.i_fmt_a.eq(self.i_fmt_a)
            if len(self.formats_b) > 1:
                m.d.comb += mul.i_fmt_b.eq(self.i_fmt_b)
            muls.append(mul)
        p_sign = stage("r1_psum_sign", up.o_sign)
        p_exp = stage("r1_psum_exp", up.o_exp, up.o_exp.shape())
        p_sig = stage("r1_psum_sig", up.o_sig)
        p_inf = stage("r1_psum_inf", up.o_inf)
        p_nan = stage("r1_psum_nan", up.o_nan)
        s_lo, s_hi = self._scale_range()
        if self.scale:
            scale_exp = stage("r1_scale_exp", self.i_scale_exp, SCALE_EXP_SHAPE)
            scale_nan = stage("r1_scale_nan", self.i_scale_nan)
        else:
            scale_exp, scale_nan = Const(0, 1), Const(0, 1)

        if n == 1:
            mul = muls[0]
            b_sign = stage("r1_prod_sign", mul.o_sign)
            b_exp_raw = stage("r1_prod_exp", mul.o_exp, mul.o_exp.shape())
            b_sig = stage("r1_prod_sig", mul.o_sig)
            b_inf = stage("r1_prod_inf", mul.o_inf)
            b_nan_raw = stage("r1_prod_nan", mul.o_nan)
            b_lo, b_hi = mul.exp_range.start + s_lo, mul.exp_range.stop - 1 + s_hi
            b_exp = Signal(bits_for_range(b_lo, b_hi), name="s2_prod_exp")
            m.d.comb += b_exp.eq(b_exp_raw + scale_exp)
            b_nan = b_nan_raw | scale_nan
            b_width = mul.sig_width
            # Psum and product feed AddRound straight from the stage-1 registers.
            p_regs = (p_sign, p_exp, p_sig, p_inf, p_nan)
        else:
            lsb, mag, total = self._fixed
            terms, zeros, infs_pos, infs_neg, nans = [], [], [], [], []
            for k, mul in enumerate(muls):
                # Finite product -> exact fixed-point word; specials contribute 0 (and flags).
                # mul.exp_range starts at `lsb` (both are the smallest product LSB exponent).
                shift = Signal(range(0, mul.exp_range.stop - lsb), name=f"s1_shift{k}")
                m.d.comb += shift.eq(mul.o_exp - lsb)
                fixed = Signal(mag, name=f"s1_fixed{k}")
                finite = ~(mul.o_inf | mul.o_nan)
                m.d.comb += fixed.eq(Mux(finite, mul.o_sig << shift, 0))
                terms.append((stage(f"r1_fixed{k}", fixed), stage(f"r1_sign{k}", mul.o_sign)))
                zeros.append(mul.o_zero & mul.o_sign)
                infs_pos.append(mul.o_inf & ~mul.o_sign)
                infs_neg.append(mul.o_inf & mul.o_sign)
                nans.append(mul.o_nan)
            r1_negzero = stage("r1_all_negzero", Cat(*zeros).all())
            r1_inf_pos = stage("r1_inf_pos", Cat(*infs_pos).any())
            r1_inf_neg = stage("r1_inf_neg", Cat(*infs_neg).any())
            r1_nan = stage("r1_nan", Cat(*nans).any())
            # ---- stage 2: exact two's complement sum, magnitude ------------------------------
            acc = Signal(signed(total), name="s2_sum")
            m.d.comb += acc.eq(sum(Mux(sign, -fixed, fixed)
                                   for fixed, sign in terms))
            magnitude = Signal(total - 1, name="s2_magnitude")
            m.d.comb += magnitude.eq(Mux(acc[-1], -acc, acc))
            # The -0 rule: a cancelled sum is +0; only all -0 products make a -0 operand.  An
            # infinite sum carries the sign of its infinities (both signs make it NaN).
            b_sign = stage("r2_sum_sign", Mux(r1_inf_pos | r1_inf_neg, r1_inf_neg,
                                              acc[-1] | (~acc.any() & r1_negzero)))
            b_sig = stage("r2_sum_mag", magnitude)
            b_inf = stage("r2_sum_inf", r1_inf_pos | r1_inf_neg)
            b_nan = stage("r2_sum_nan", r1_nan | (r1_inf_pos & r1_inf_neg) | scale_nan)
            b_lo, b_hi = lsb + s_lo, lsb + s_hi
            b_exp = stage("r2_sum_exp", lsb + scale_exp, bits_for_range(b_lo, b_hi))
            b_width = total - 1
            p_regs = (stage("r2_psum_sign", p_sign), stage("r2_psum_exp", p_exp, p_exp.shape()),
                      stage("r2_psum_sig", p_sig), stage("r2_psum_inf", p_inf),
                      stage("r2_psum_nan", p_nan))

        m.submodules.core = core = AddRound(up.sig_width, up.exp_range, b_width,
                                            range(b_lo, b_hi + 1))
        m.d.comb += core.en.eq(self.en)
        for port, value in zip(("sign", "exp", "sig", "inf", "nan"), p_regs):
            m.d.comb += getattr(core, f"i_a_{port}").eq(value)
        m.d.comb += [
            core.i_b_sign.eq(b_sign), core.i_b_exp.eq(b_exp), core.i_b_sig.eq(b_sig),
            core.i_b_inf.eq(b_inf), core.i_b_nan.eq(b_nan),
            self.o_result.eq(core.o_result),
        ]
        return m
