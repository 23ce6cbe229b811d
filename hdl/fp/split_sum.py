"""The exact wide product sum in two limbs, and the psum folded into it: every word <= 64 bits.

The exact sum of four FP8 e5m2 products spans 2**-32 to 2**34 (a 67-bit two's complement word),
and an FP32 psum can cancel its top, so the one rounding of ``psum + sum`` needs every bit of it
in the worst case.  A simulator pays for such words on every cycle of every mode (Verilator
evaluates a word wider than 64 bits as an array, and the adder normalizing it makes 128 to
197-bit temporaries).  This module keeps the same exact result with words of at most 64 bits:

1. :func:`split_product_sum` (the PE's stage 2): the exact two's complement sum ``S`` of the
   products in a fixed-point window of :attr:`SplitPlan.width` bits whose bit 0 has exponent
   :attr:`SplitPlan.lsb` (one bit below the smallest product LSB), held as two limbs.
2. :func:`fold_psum` (stage 3, with the psum ``A``): hands the rounding adder
   (:class:`~ncrtl.hdl.fp.add_round.AddRound`) two operands whose rounded sum is
   ``round_fp32(A + S * 2**se)`` exactly, the second of at most :attr:`SplitPlan.out` bits.

Why that is exact (units of ``2**(lsb + se)``, ``P = 24`` the psum's precision, ``W`` =
:attr:`SplitPlan.out`, ``c`` = :attr:`SplitPlan.cut`; ``RO_k(x)``: ``x`` truncated to a
multiple of ``2**k`` with any lost bit ORed into bit ``k``, round-to-odd).  Round-to-nearest at
a position ``r`` depends only on which open interval between multiples of ``2**(r-1)`` the value
is in, or which multiple it equals; ``RO_k`` keeps both for ``r - 1 >= k + 1``, and
``A + RO_k(S) = RO_k(A + S)`` when ``A`` is a multiple of ``2**(k+1)``.  ``|S| <
2**(width - 3)``:

* ``S`` narrow (``-2**wide <= S < 2**wide``, ``wide < W``): ``S`` fits ``W`` bits; the adder
  gets ``A`` and ``S`` exactly.
* ``S`` wide and ``A`` far above (``|A| >= 2**(width - 2)``, or Inf/NaN): ``|A| > 2|S|``, so the
  result has its MSB at ``width - 3`` or above and rounds at ``r >= width - 2 - P``; the adder
  gets ``A`` and ``RO_c(|S|)``, exact since ``W >= P + 3`` puts ``c + 1`` below ``r - 1`` and
  under ``A``'s LSB.
* ``S`` wide, ``A`` not far above: ``V = S + RO_0(A)`` (``A`` placed in the window, its bits
  below the window ORed into bit 0) is ``RO_0(A + S)``, exact when ``A`` fits; ``|V| <
  2**(width - 1)``.  The adder gets ``+0`` and ``V`` (``RO_c(|V|)`` when ``|V| >= 2**W``: its MSB
  at ``W`` or above rounds at ``r >= W - P + 1 >= c + 2`` since ``2W >= width + P``).  ``A``
  was cut only if it has bits below unit 0, then ``|A| < 2**P <= 2**(wide - 2)`` and ``|V| >=
  2**(wide - 1)`` rounds at ``r >= wide - P >= 2``.

Rounding positions only get coarser for subnormal results, so every bound above holds there too;
and a subnormal psum far above puts the whole window below ``2**-126``, so the cut's bit lies
below ``2**-151``, under the psum's LSB (``2**-149``).
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Mux, Signal

from ncrtl.hdl.common.bits import WORD, bits_for_range, clamp, shift_right_sticky

from .exact import ExactLayout

__all__ = ["SplitPlan", "split_plan", "split_product_sum", "fold_psum"]


@dataclass(frozen=True)
class SplitPlan:
    """Sizes of a split product sum (see the module docstring for the bounds they meet).

    Attributes
    ----------
    lsb : int
        Exponent of bit 0 of the window: one below the smallest product LSB.
    lo, hi : int
        Bits of the low limb and of the high limb (two's complement: its MSB is the sign);
        ``lo + hi`` is :attr:`width`.
    out : int
        Significand bits of the operand handed to the rounding adder (``W``).
    wide : int
        ``S`` is *wide* unless ``-2**wide <= S < 2**wide``.
    precision : int
        Significand bits of the psum (24, FP32).
    """

    lsb: int
    lo: int
    hi: int
    out: int
    wide: int
    precision: int = 24

    @property
    def width(self):
        """Bits of the window: ``S`` plus a psum of up to twice its magnitude, and the sign."""
        return self.lo + self.hi

    @property
    def cut(self):
        """Low bits of ``|V|`` ORed into one when it does not fit :attr:`out` bits."""
        return self.width - 1 - self.out

    @property
    def top(self):
        """Unit of the psum's MSB from which it is *far above* ``S``."""
        return self.width - 2


def split_plan(window, *, out_min, precision=24):
    """The :class:`SplitPlan` of a :class:`~ncrtl.hdl.fp.exact.Window` (a product sum of
    ``window.total`` bits, sign included), for an adder operand of at least ``out_min`` bits.

    ``ValueError`` if the window is too wide for two limbs of at most 64-bit words."""
    width = window.total + 3  # a guard bit below, a psum of twice |S| above
    out = max(out_min, -(-(width + precision) // 2), precision + 3)
    lo = -(-width // 2)
    hi = width - lo
    wide = max(precision + 2, lo)
    plan = SplitPlan(window.lsb - 1, lo, hi, out, wide, precision)
    if (
        not wide < out
        or max(lo, hi) + precision > WORD
        or not 0 < plan.cut < lo <= out
        or out - lo > hi - 1
        or out > WORD - 5
    ):
        raise ValueError(f"A product sum of {window.total} bits does not split into {plan!r}")
    return plan


def _place(m, sig, shift, width, offset, *, name):
    """Bits ``[offset, offset + width)`` of ``sig * 2**shift`` (``shift`` a signal, may be
    negative: bits below 0 drop), as a right shift of ``sig`` placed high in a word, so no
    word grows with the shift's range (Amaranth widens a variable left shift by
    ``2**len(shift)`` bits)."""
    n = len(sig)
    amount = clamp(m, offset + width - shift, 0, width + n, name=f"{name}_amt")
    out = Signal(width, name=name)
    m.d.comb += out.eq((Cat(Const(0, width), sig) >> amount)[:width])
    return out


def split_product_sum(m, terms, plan, *, name):
    """The exact two's complement sum of the finite ``terms`` (views of
    :class:`~ncrtl.hdl.fp.exact.ExactLayout`, every finite value in the plan's window) as two
    limbs, and the special-value flags of :func:`~ncrtl.hdl.fp.exact.product_sum`.

    Returns
    -------
    dict
        ``lo`` (``plan.lo`` bits), ``hi`` (``plan.hi`` bits, the sign on top), ``negzero``
        (every term is -0), ``inf_pos``, ``inf_neg``, ``nan`` (a NaN term): signals.
    """
    los, his, signs = [], [], []
    for k, t in enumerate(terms):
        sig = Signal(len(t.sig), name=f"{name}_sig{k}")
        m.d.comb += sig.eq(Mux(t.inf | t.nan, 0, t.sig))
        shift = t.exp - plan.lsb
        s = t.sign
        lo = _place(m, sig, shift, plan.lo, 0, name=f"{name}_lo{k}")
        hi = _place(m, sig, shift, plan.hi, plan.lo, name=f"{name}_hi{k}")
        los.append(lo ^ s.replicate(plan.lo))
        his.append(hi ^ s.replicate(plan.hi))
        signs.append(s)
    lo_sum = Signal(plan.lo + 3, name=f"{name}_lo_sum")
    m.d.comb += lo_sum.eq(sum(los) + sum(signs))
    lo, hi = Signal(plan.lo, name=f"{name}_lo"), Signal(plan.hi, name=f"{name}_hi")
    m.d.comb += [lo.eq(lo_sum[: plan.lo]), hi.eq(sum(his) + lo_sum[plan.lo :])]
    flags = {}
    for f, bits in (
        ("negzero", [t.zero & t.sign for t in terms]),
        ("inf_pos", [t.inf & ~t.sign for t in terms]),
        ("inf_neg", [t.inf & t.sign for t in terms]),
        ("nan", [t.nan for t in terms]),
    ):
        flags[f] = Signal(name=f"{name}_{f}")
        m.d.comb += flags[f].eq(Cat(*bits).all() if f == "negzero" else Cat(*bits).any())
    return dict(lo=lo, hi=hi, **flags)


def fold_psum(m, s, a, scale_exp, scale_nan, fused, plan, *, name):
    """Stage 3: the two operands of the rounding adder for ``a + S * 2**scale_exp``.

    Parameters
    ----------
    s : dict
        :func:`split_product_sum`'s result (registered).
    a : view of ExactLayout
        The psum, an FP32 value decoded by :class:`~ncrtl.hdl.fp.unpack.Unpack`.
    scale_exp, scale_nan : Value
        The block scale exponent (0 without one) and its NaN flag.
    fused : Value
        The beat is a fused one (else the operand B of the caller is not this one's and ``a``
        passes through).

    Returns
    -------
    (view, view)
        Operand A (``a``, or +0 when ``a`` went into the sum) and operand B
        (:class:`~ncrtl.hdl.fp.exact.ExactLayout` of ``plan.out`` bits).
    """
    lo_w, hi_w, p = plan.lo, plan.hi, plan.precision
    # Is S wide: bits [wide, width) of its two's complement not all equal?
    top = s["hi"][plan.wide - lo_w :]
    wide = Signal(name=f"{name}_wide")
    m.d.comb += wide.eq(~(~top.any() | top.all()))
    # a's LSB in window units, and whether its MSB reaches unit `top` (its sig shifted down by
    # the distance has a bit left: right for subnormal psums too).
    unit = Signal(bits_for_range(-1024, 1023), name=f"{name}_a_unit")
    m.d.comb += unit.eq(a.exp - scale_exp - plan.lsb)
    far = Signal(name=f"{name}_far")
    dist = clamp(m, plan.top - unit, 0, p, name=f"{name}_dist")
    m.d.comb += far.eq(a.inf | a.nan | (a.sig >> dist).any())
    into = Signal(name=f"{name}_into")  # a goes into the sum
    m.d.comb += into.eq(fused & wide & ~far)
    a_lo = _place(m, a.sig, unit, lo_w, 0, name=f"{name}_a_lo")
    a_hi = _place(m, a.sig, unit, hi_w, lo_w, name=f"{name}_a_hi")
    # a's bits below unit 0: the sticky of shifting it right by -unit.
    cut = clamp(m, -unit, 0, p, name=f"{name}_a_cut")
    _, lost = shift_right_sticky(m, a.sig, cut, name=f"{name}_a_jam")
    neg = into & a.sign
    add_lo = Signal(lo_w, name=f"{name}_add_lo")
    add_hi = Signal(hi_w, name=f"{name}_add_hi")
    m.d.comb += [
        add_lo.eq(Mux(into, a_lo | lost, 0) ^ neg.replicate(lo_w)),
        add_hi.eq(Mux(into, a_hi, 0) ^ neg.replicate(hi_w)),
    ]
    v_lo_sum = Signal(lo_w + 2, name=f"{name}_v_lo_sum")
    v_lo, v_hi = Signal(lo_w, name=f"{name}_v_lo"), Signal(hi_w, name=f"{name}_v_hi")
    m.d.comb += [
        v_lo_sum.eq(s["lo"] + add_lo + neg),
        v_lo.eq(v_lo_sum[:lo_w]),
        v_hi.eq(s["hi"] + add_hi + v_lo_sum[lo_w:]),
    ]
    # |V| in two limbs.
    vneg = v_hi[-1]
    mag_lo_sum = Signal(lo_w + 1, name=f"{name}_mag_lo_sum")
    mag_lo, mag_hi = Signal(lo_w, name=f"{name}_mag_lo"), Signal(hi_w - 1, name=f"{name}_mag_hi")
    m.d.comb += [
        mag_lo_sum.eq((v_lo ^ vneg.replicate(lo_w)) + vneg),
        mag_lo.eq(mag_lo_sum[:lo_w]),
        mag_hi.eq((v_hi ^ vneg.replicate(hi_w)) + mag_lo_sum[lo_w]),
    ]
    # Operand B: |V| exactly when it fits `out` bits, else RO_cut(|V|).
    out, cut = plan.out, plan.cut
    big = Signal(name=f"{name}_big")
    m.d.comb += big.eq(mag_hi[out - lo_w :].any())
    b_layout = ExactLayout(out, range(plan.lsb - 254, plan.lsb + 254 + cut + 1))
    b = Signal(b_layout, name=f"{name}_b")
    a_op = Signal(a.shape(), name=f"{name}_a")
    zero = ~(v_lo.any() | v_hi.any())
    inf = s["inf_pos"] | s["inf_neg"]
    m.d.comb += [
        b.sig.eq(
            Mux(
                big,
                Cat(mag_lo[: cut + 1].any(), mag_lo[cut + 1 :], mag_hi[: out - (lo_w - cut)]),
                Cat(mag_lo, mag_hi[: out - lo_w]),
            )
        ),
        b.exp.eq(plan.lsb + scale_exp + Mux(big, cut, 0)),
        b.sign.eq(Mux(inf, s["inf_neg"], vneg | (zero & s["negzero"]))),
        b.zero.eq(zero),
        b.inf.eq(inf),
        b.nan.eq(s["nan"] | (s["inf_pos"] & s["inf_neg"]) | scale_nan),
        a_op.sign.eq(a.sign & ~into),
        a_op.exp.eq(a.exp),
        a_op.sig.eq(Mux(into, 0, a.sig)),
        a_op.zero.eq(a.zero | into),
        a_op.inf.eq(a.inf),
        a_op.nan.eq(a.nan),
    ]
    return a_op, b
