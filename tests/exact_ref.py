"""Exact rational reference for the numeric contract, written independently of ``ncrtl.model.fp``.

Everything here is Python ``Fraction`` / ``int`` arithmetic on one element at a time: slow, but
with no floating point anywhere, so it can judge the vectorised golden model.
"""

from fractions import Fraction

# (exp_bits, man_bits, bias, has_inf) of the rounding targets the contract uses.
TARGETS = {"fp32": (8, 23, 127), "bf16": (8, 7, 127), "fp16": (5, 10, 15)}


def value_of_bits(bits, exp_bits, man_bits, bias, special="ieee", ignored=0):
    """Exact value of one encoding: a Fraction, or the strings 'inf', '-inf', 'nan'."""
    bits &= ~((1 << ignored) - 1)
    sign = -1 if (bits >> (exp_bits + man_bits)) & 1 else 1
    e = (bits >> man_bits) & ((1 << exp_bits) - 1)
    m = bits & ((1 << man_bits) - 1)
    allones = (1 << exp_bits) - 1
    if special == "ieee" and e == allones:
        return ("inf" if sign > 0 else "-inf") if m == 0 else "nan"
    if special == "fn" and e == allones and m == (1 << man_bits) - 1:
        return "nan"
    if e == 0:
        mag = Fraction(m) * Fraction(2) ** (1 - bias - man_bits)
    else:
        mag = Fraction((1 << man_bits) | m) * Fraction(2) ** (e - bias - man_bits)
    return sign * mag


def _round_on_grid(q, target, negzero, round_up):
    """Encoding of the rational ``q`` rounded to ``target``'s grid: ``round_up(lo, frac)`` says
    whether the magnitude ``(lo + frac) * ulp`` (``0 <= frac < 1``) goes up to ``lo + 1``.
    ``negzero`` gives the sign of an exact zero; overflow gives Inf."""
    exp_bits, man_bits, bias = TARGETS[target]
    sign_bit = 1 << (exp_bits + man_bits)
    if q == 0:
        return sign_bit if negzero else 0
    sign = sign_bit if q < 0 else 0
    q = abs(q)
    emin = 1 - bias
    emax = (1 << exp_bits) - 2 - bias
    # Binade: largest E with 2**E <= q.
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    e = max(e, emin)
    n = q / Fraction(2) ** (e - man_bits)
    lo = n.numerator // n.denominator
    if round_up(lo, n - lo):
        lo += 1
    # lo * ulp is the rounded magnitude.
    if lo == 1 << (man_bits + 1):
        lo >>= 1
        e += 1
    if e > emax:
        return sign | (((1 << exp_bits) - 1) << man_bits)
    if lo < 1 << man_bits:  # subnormal (only possible at e == emin)
        return sign | lo
    return sign | ((e + bias) << man_bits) | (lo - (1 << man_bits))


def round_rational(q, target="fp32", negzero=False):
    """Encoding of the rational ``q`` rounded once, to nearest with ties to even.

    ``negzero`` gives the sign of an exact zero.  Overflow gives Inf.
    """
    half = Fraction(1, 2)
    return _round_on_grid(
        q, target, negzero, lambda lo, frac: frac > half or (frac == half and lo % 2 == 1)
    )


def dot_add_reference(psum_bits, a_vals, b_vals, scale_exp=0):
    """Contract result (FP32 encoding) of one fused step from exact operand values.

    ``a_vals`` / ``b_vals`` hold Fractions or 'inf' / '-inf' / 'nan' strings.
    """
    p = value_of_bits(psum_bits, 8, 23, 127)
    terms = [p]
    negzero_terms = [psum_bits == 0x80000000]
    for x, y in zip(a_vals, b_vals):
        if "nan" in (x, y):
            return 0x7FC00000
        xs = isinstance(x, str)
        ys = isinstance(y, str)
        if xs or ys:
            other = y if xs else x
            if not isinstance(other, str) and other == 0:
                return 0x7FC00000
            sx = -1 if (x.startswith("-") if xs else x < 0) else 1
            sy = -1 if (y.startswith("-") if ys else y < 0) else 1
            terms.append("inf" if sx * sy > 0 else "-inf")
            negzero_terms.append(False)
            continue
        prod = x * y
        terms.append(prod * Fraction(2) ** scale_exp)
        # The sign of a zero product: negative when exactly one factor is negative (or -0).
        negzero_terms.append(prod == 0 and _is_neg(x) != _is_neg(y))
    if "nan" in terms:
        return 0x7FC00000
    infs = {t for t in terms if isinstance(t, str)}
    if infs == {"inf", "-inf"}:
        return 0x7FC00000
    if infs:
        return 0x7F800000 if "inf" in infs else 0xFF800000
    total = sum(terms, Fraction(0))
    return round_rational(total, "fp32", negzero=all(negzero_terms))


def _is_neg(v):
    # Fractions lose the sign of zero: a -0 operand arrives as a NegZero.
    return isinstance(v, NegZero) or v < 0


class NegZero(Fraction):
    """A Fraction equal to 0 that remembers it was -0."""

    def __new__(cls):
        return super().__new__(cls, 0)


def exact_operand(bits, fmt):
    """Exact operand value of one encoding of a model format (with -0 preserved)."""
    from ncrtl.model.fp.formats import get_format

    f = get_format(fmt)
    v = (
        value_of_bits(
            int(bits),
            f.exp_bits,
            f.man_bits,
            f.bias,
            special=f.special if f.special in ("ieee", "fn") else "none",
            ignored=f.ignored_low_bits,
        )
        if f.signed
        else None
    )
    if v == 0 and f.signed and (int(bits) >> (f.bits - 1)) & 1:
        return NegZero()
    return v


def marsaglia_xorwow(state, n):
    """Marsaglia's published ``xorwow()`` (2003) on a six-word state, in plain Python ints."""
    g = MarsagliaStream(state)
    return [g.next_u32() for _ in range(n)]


def round_stochastic_rational(q, r, target="bf16", rbits=16, negzero=False):
    """Encoding of the rational ``q`` stochastically rounded with the random value ``r``.

    ``|q|`` lies between two neighbouring codes ``a <= |q| < b`` of ``target``; the result is
    ``b`` when ``(|q| - a) / (b - a) + r / 2**rbits >= 1``, else ``a``, with the sign of ``q``
    (``negzero`` for an exact zero).  Rounding up past the largest finite code gives Inf.
    """
    return _round_on_grid(q, target, negzero, lambda lo, frac: frac + Fraction(r, 1 << rbits) >= 1)


def fp32_add_reference(a_bits, b_bits):
    """FP32 encoding of ``a + b`` (two FP32 encodings), rounded once, canonical NaN."""
    a = value_of_bits(a_bits, 8, 23, 127)
    b = value_of_bits(b_bits, 8, 23, 127)
    if "nan" in (a, b) or {a, b} == {"inf", "-inf"}:
        return 0x7FC00000
    for v in (a, b):
        if isinstance(v, str):
            return 0x7F800000 if v == "inf" else 0xFF800000
    return round_rational(a + b, "fp32", negzero=a_bits == b_bits == 0x80000000)


def fp32_to_bf16_reference(bits, rounding="rne", r=None):
    """BF16 encoding of one FP32 encoding: RNE, or stochastic with the 16-bit value ``r``."""
    v = value_of_bits(bits, 8, 23, 127)
    if v == "nan":
        return 0x7FC0
    if isinstance(v, str):
        return 0x7F80 if v == "inf" else 0xFF80
    neg = bits == 0x80000000
    if rounding == "rne":
        return round_rational(v, "bf16", negzero=neg)
    return round_stochastic_rational(v, r, "bf16", 16, negzero=neg)


def psum_slot_reference(old, value, dtype, overwrite, rounding="rne", r=None):
    """New bits of one PSUM slot (docs/psum.md, "Element semantics"), one element at a time.

    ``dtype`` is "fp32", "bf16" or "raw16"; ``old`` and ``value`` are ints (slot and beat bits).
    """
    if dtype == "fp32":
        return value if overwrite else fp32_add_reference(old, value)
    if dtype == "raw16":
        assert overwrite, "raw16 slots are only overwritten"
        return value & 0xFFFF
    s = value if overwrite else fp32_add_reference(old << 16, value)
    return fp32_to_bf16_reference(s, rounding, r)


def splitmix64_state(seed):
    """XORWOW state words (x, y, z, w, v, d) of a 64-bit seed: SplitMix64 (Steele, Lea, Flood
    2014) outputs 1..3, low word first, and Marsaglia's d = 6615241."""
    z = seed
    words = []
    for _ in range(3):
        z = (z + 0x9E3779B97F4A7C15) % (1 << 64)
        r = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % (1 << 64)
        r = ((r ^ (r >> 27)) * 0x94D049BB133111EB) % (1 << 64)
        r ^= r >> 31
        words += [r % (1 << 32), r >> 32]
    assert any(words[:5]), "the all-zero xorshift state needs Marsaglia's replacement"
    return tuple(words[:5]) + (6615241,)


class MarsagliaStream:
    """Marsaglia's ``xorwow()`` as a stateful stream of plain Python ints (one generator)."""

    def __init__(self, state):
        self.state = tuple(int(s) for s in state)

    def next_u32(self):
        x, y, z, w, v, d = self.state
        t = (x ^ (x >> 2)) & 0xFFFFFFFF
        x, y, z, w = y, z, w, v
        v = ((v ^ (v << 4)) ^ (t ^ (t << 1))) & 0xFFFFFFFF
        d = (d + 362437) & 0xFFFFFFFF
        self.state = (x, y, z, w, v, d)
        return (v + d) & 0xFFFFFFFF
