"""Exact values and the exact N-product sum: what every fused FP32 datapath is built from.

An *exact value* is ``(-1)**sign * sig * 2**exp`` with an integer significand of any width
(possibly unnormalized, possibly zero) and an exponent of any range, plus the class flags: the
decoded operand (:class:`~ncrtl.hdl.fp.unpack.Unpack`), the exact product
(:class:`~ncrtl.hdl.fp.mul.ExactMul`), the exact sum of products (:func:`product_sum`) and the two
operands of the one rounding (:class:`~ncrtl.hdl.fp.add_round.AddRound`) all travel as one
:class:`ExactLayout` each, so joining two of them is one assignment.

:func:`product_sum` is the one exact multi-product sum of the project: the fused dot-product-add
unit and the Tensor Engine PE (double_row, and the MX mode after it) are both built on it.
"""

import itertools
from dataclasses import dataclass

from amaranth.hdl import Cat, Mux, Signal, signed
from amaranth.lib import data

from ncrtl.hdl.common.bits import bits_for_range, clamp
from ncrtl.hdl.common.params import check_int

__all__ = [
    "ExactLayout",
    "Window",
    "fixed_point_window",
    "product_sum",
    "exact_signal",
    "resize_exact",
]


class ExactLayout(data.StructLayout):
    """Layout of an exact value: ``sign``, ``exp`` (LSB exponent), ``sig``, ``zero``, ``inf``,
    ``nan`` (LSB first).

    ``sig`` and ``exp`` are meaningful for finite values only (``inf`` / ``nan`` clear).  ``zero``
    marks an exact zero whose sign matters (the -0 rule of the fused sums); a consumer that only
    needs the value reads ``sig == 0``.

    Parameters
    ----------
    sig_width : int
        Significand bits.
    exp_range : range
        Every exponent the value can carry (sets the width of ``exp``; a signed field).
    """

    def __init__(self, sig_width, exp_range):
        check_int(sig_width, "ExactLayout sig_width", minimum=1)
        if not isinstance(exp_range, range):
            raise TypeError(f"ExactLayout exp_range must be a range, not {exp_range!r}")
        if exp_range.step != 1 or not len(exp_range):
            raise ValueError(
                f"ExactLayout exp_range must be a non-empty range with step 1, not {exp_range!r}"
            )
        self.sig_width, self.exp_range = sig_width, exp_range
        super().__init__(
            {
                "sign": 1,
                "exp": bits_for_range(exp_range.start, exp_range.stop - 1),
                "sig": sig_width,
                "zero": 1,
                "inf": 1,
                "nan": 1,
            }
        )

    def __repr__(self):
        return f"ExactLayout({self.sig_width}, {self.exp_range!r})"

    def union(self, other):
        """The layout holding every value of ``self`` and of ``other``."""
        lo = min(self.exp_range.start, other.exp_range.start)
        hi = max(self.exp_range.stop, other.exp_range.stop)
        return ExactLayout(max(self.sig_width, other.sig_width), range(lo, hi))


def exact_signal(layout, *, name):
    """A combinational signal of an :class:`ExactLayout` (a view)."""
    return Signal(layout, name=name)


def resize_exact(m, value, layout, *, name):
    """``value`` (a view of an :class:`ExactLayout`) as a signal of the wider ``layout``: each
    field assigned on its own, so the exponent is sign-extended and the significand
    zero-extended.  A narrower ``layout`` keeps the low significand bits and the exponent's low
    bits: correct for every value that fits it."""
    out = Signal(layout, name=name)
    m.d.comb += [
        out.sign.eq(value.sign),
        out.exp.eq(value.exp),
        out.sig.eq(value.sig),
        out.zero.eq(value.zero),
        out.inf.eq(value.inf),
        out.nan.eq(value.nan),
    ]
    return out


@dataclass(frozen=True)
class Window:
    """The fixed-point window of an exact sum of products.

    Attributes
    ----------
    lsb : int
        Exponent of the window's LSB: the smallest product LSB exponent.
    mag : int
        Magnitude bits of one product in the window.
    total : int
        Bits of the two's complement sum of all the products (carry growth and sign included).
    """

    lsb: int
    mag: int
    total: int

    def __iter__(self):
        return iter((self.lsb, self.mag, self.total))

    @property
    def layout(self):
        """:class:`ExactLayout` of the sum's magnitude (exponent fixed at ``lsb``)."""
        return ExactLayout(self.total - 1, range(self.lsb, self.lsb + 1))


def fixed_point_window(formats_a, formats_b, n_products):
    """The :class:`Window` of an exact sum of ``n_products`` products of an ``a`` of
    ``formats_a`` and a ``b`` of ``formats_b`` (:class:`~ncrtl.model.fp.Format` objects).

    Every finite product is an integer multiple of ``2**lsb`` (the smallest product LSB exponent
    over every format pair) below ``2**(lsb + mag)`` (the largest product over every pair), so
    the sum of ``n_products`` of them fits ``mag + ceil(log2(n_products))`` bits plus a sign bit:
    ``total``.
    """
    pairs = list(itertools.product(formats_a, formats_b))
    lsb = min(fa.lsb_exp_min + fb.lsb_exp_min for fa, fb in pairs)
    mag = max(
        (fa.max_sig * fb.max_sig).bit_length()
        + (fa.emax - fa.man_bits)
        + (fb.emax - fb.man_bits)
        - lsb
        for fa, fb in pairs
    )
    growth = (n_products - 1).bit_length()
    return Window(lsb, mag, mag + growth + 1)


def product_sum(m, terms, window, *, name, stage=None):
    """The exact sum of products, as an exact value: the sum of every fused datapath.

    Each finite term ``(-1)**sign * sig * 2**exp`` is shifted into a ``window.mag``-bit word
    whose LSB has exponent ``window.lsb``; the words are summed exactly in two's complement and
    the magnitude of the sum (possibly unnormalized, possibly zero) is the result's ``sig``, with
    ``exp = window.lsb``.  Specials: any NaN term, or infinities of both signs, give ``nan``; an
    infinity gives ``inf`` with its sign.  The -0 rule: a sum that is exactly zero is -0 only
    when every term is a -0 (``zero`` and ``sign``), so a cancelled sum is +0.

    Parameters
    ----------
    m : Module
    terms : list of views of :class:`ExactLayout`
        The products.  Every finite value of a term must lie in the window (the caller's
        formats define it, :func:`fixed_point_window`).  A term whose layout's exponent range
        reaches outside the window (a product of a wider multiplier carrying a narrow product)
        gets its shift clamped, which changes nothing for the values that fit; narrow such a
        term's significand to the window's formats first (:func:`resize_exact`), so the
        shifter stays small.
    window : Window
    name : str
        Prefix of the signals.
    stage : callable or None
        ``stage(name, value) -> value``: a pipeline register between the alignment and the sum
        (e.g. a clock-enabled register of the parent); None: all combinational.

    Returns
    -------
    view of ``window.layout``
    """
    lsb, mag, total = window
    stage = stage or (lambda _, value: value)
    words, signs, negzero, inf_pos, inf_neg, nan = [], [], [], [], [], []
    for k, t in enumerate(terms):
        layout = t.shape()
        # Shift of the term's LSB into the window.  A finite term's value fits the window, so
        # the shifted significand is truncated to `mag` bits without loss; a term whose layout
        # reaches beyond the window (only invalid values do) gets its shift clamped, which keeps
        # the shifter small.
        lo, hi = layout.exp_range.start - lsb, layout.exp_range.stop - 1 - lsb
        if lo >= 0 and hi <= mag:
            shift = Signal(range(hi + 1), name=f"{name}_shift{k}")
            m.d.comb += shift.eq(t.exp - lsb)
        else:
            shift = clamp(m, t.exp - lsb, 0, mag, name=f"{name}_shift{k}")
        word = Signal(mag, name=f"{name}_word{k}")
        m.d.comb += word.eq(Mux(t.inf | t.nan, 0, t.sig << shift))
        words.append(stage(f"{name}_word{k}", word))
        signs.append(stage(f"{name}_sign{k}", t.sign))
        negzero.append(t.zero & t.sign)
        inf_pos.append(t.inf & ~t.sign)
        inf_neg.append(t.inf & t.sign)
        nan.append(t.nan)
    r_negzero = stage(f"{name}_all_negzero", Cat(*negzero).all())
    r_inf_pos = stage(f"{name}_inf_pos", Cat(*inf_pos).any())
    r_inf_neg = stage(f"{name}_inf_neg", Cat(*inf_neg).any())
    r_nan = stage(f"{name}_nan", Cat(*nan).any())
    # Two's complement sum: -x = ~x + 1, the +1s added once as a count.
    acc = Signal(signed(total), name=f"{name}_acc")
    ext = [Signal(total, name=f"{name}_term{k}") for k in range(len(words))]
    for e, w, s in zip(ext, words, signs):
        m.d.comb += e.eq(w ^ s.replicate(total))
    m.d.comb += acc.eq(sum(ext) + sum(signs))
    magnitude = Signal(total - 1, name=f"{name}_mag")
    m.d.comb += magnitude.eq(Mux(acc[-1], -acc, acc))
    out = Signal(window.layout, name=name)
    inf = r_inf_pos | r_inf_neg
    m.d.comb += [
        out.sign.eq(Mux(inf, r_inf_neg, acc[-1] | (~acc.any() & r_negzero))),
        out.exp.eq(lsb),
        out.sig.eq(magnitude),
        out.zero.eq(~acc.any()),
        out.inf.eq(inf),
        out.nan.eq(r_nan | (r_inf_pos & r_inf_neg)),
    ]
    return out
