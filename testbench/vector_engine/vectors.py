"""Stimulus for QuantizeMX: groups of 32 source encodings (uint16 ``[G, 32]``, group order).

Element ``4 * r + j`` of a group is partition ``r`` of the group, free element ``j`` (the order
of :func:`ncrtl.model.vector_engine.quantize_groups` and of the RTL beat).  Everything comes from
a seeded ``numpy.random.Generator``, so a run is reproducible from ``(count, seed)``.

* :func:`all_code_groups`: every 16-bit code of the source format exactly once, in code order
  (neighbours share a binade: rounding of every mantissa pattern next to the group maximum) and
  shuffled (every code among random magnitudes: underflow into the element's subnormals and to
  zero).
* :func:`random_groups`: groups whose elements lie a few binades below a random group exponent,
  with mantissa tails that make exact ties at random positions, mixed with uniform codes.
* :func:`corner_groups`: zeros of both signs, one non-zero element, subnormals only, mixed
  signs, NaN / Inf anywhere, the largest values, the scale clamp at 0, exact ties of every
  element format at every element exponent (subnormals included), and the saturation edge.
"""

import numpy as np

from ncrtl.model.fp import decode, encode, get_format
from ncrtl.model.vector_engine import (
    ELEMENT_FORMATS,
    GROUP_SIZE,
    SCALE_RULES,
    SOURCE_FORMATS,
    scale_emax,
)

__all__ = ["all_code_groups", "random_groups", "corner_groups", "finite_mask"]


def _src(src_fmt):
    f = get_format(src_fmt)
    if f.name not in SOURCE_FORMATS:
        raise ValueError(f"source format {f.name!r} is not one of {', '.join(SOURCE_FORMATS)}")
    return f


def finite_mask(codes, src_fmt):
    """True where a source encoding is finite (exponent field not all ones)."""
    f = _src(src_fmt)
    top = ((1 << f.exp_bits) - 1) << f.man_bits
    return (np.asarray(codes).astype(np.int64) & top) != top


def all_code_groups(src_fmt, rng=None):
    """Every code of ``src_fmt`` once: ``[2048, 32]`` in code order, or shuffled with ``rng``."""
    codes = np.arange(1 << 16, dtype=np.uint16)
    if rng is not None:
        codes = rng.permutation(codes)
    return codes.reshape(-1, GROUP_SIZE)


def random_groups(rng, src_fmt, n):
    """``n`` random finite-heavy groups (about 1 in 100 holds a NaN or Inf)."""
    f = _src(src_fmt)
    top_field = (1 << f.exp_bits) - 2  # the largest finite exponent field
    shape = (n, GROUP_SIZE)
    # Binade groups: element exponent fields a geometric number of binades below the group's.
    e0 = rng.integers(0, top_field + 1, (n, 1))
    below = np.minimum(rng.geometric(0.3, shape) - 1, 3 * f.man_bits + 12)
    field = np.clip(e0 - below, 0, top_field)
    man = rng.integers(0, 1 << f.man_bits, shape)
    # A tail "1 0 ... 0" of random length: an exact tie for some element format and exponent.
    tail = rng.integers(1, f.man_bits + 1, shape)
    tie = rng.random(shape) < 0.4
    man = np.where(tie, ((man >> tail) << tail) | (1 << (tail - 1)), man)
    sign = rng.integers(0, 2, shape)
    codes = (sign << 15) | (field << f.man_bits) | man
    codes = np.where(rng.random(shape) < 0.05, sign << 15, codes)  # signed zeros
    # Uniform groups: any code, the specials replaced by finite codes in most groups.
    uniform = rng.integers(0, 1 << 16, shape)
    fix = ~finite_mask(uniform, f) & (rng.random((n, 1)) < 0.95)
    uniform = np.where(fix, uniform & ~(1 << (f.bits - 2)), uniform)
    pick = rng.random((n, 1)) < 0.75
    out = np.where(pick, codes, uniform)
    # Rare specials in binade groups too.
    spots = rng.random(n) < 0.01
    out[spots, rng.integers(0, GROUP_SIZE, int(spots.sum()))] = _special_codes(f)[0]
    return out.astype(np.uint16)


def _special_codes(f):
    """+Inf, -Inf, the canonical NaN, a negative NaN and a signalling NaN of ``f``."""
    inf = ((1 << f.exp_bits) - 1) << f.man_bits
    return [inf, inf | 0x8000, inf | (1 << (f.man_bits - 1)), inf | 0x8000 | 0x3, inf | 1]


def _codes(values, f):
    """Encodings of float64 values that ``f`` holds exactly; None if any does not."""
    v = np.asarray(values, dtype=np.float64)
    c = encode(v, f)
    back = decode(c, f)
    if not np.array_equal(back, v) or not np.array_equal(np.signbit(back), np.signbit(v)):
        return None
    return c.astype(np.uint16)


def corner_groups(src_fmt, rng):
    """Corner groups of ``src_fmt`` for every element format and scale rule (``[G, 32]``)."""
    f = _src(src_fmt)
    groups = []

    def add(values):
        codes = _codes(values, f)
        if codes is not None:
            groups.append(codes)

    tiny = f.smallest_subnormal
    min_normal = 2.0**f.emin
    big = f.max_finite
    zero = np.zeros(GROUP_SIZE)
    add(zero)
    add(-zero)
    add(np.where(np.arange(GROUP_SIZE) % 2, -0.0, 0.0))
    for pos in (0, 3, 4, 7, 28, 31):
        for v in (1.0, -big, tiny, -min_normal, -tiny * 3):
            g = np.where(np.arange(GROUP_SIZE) % 3, -0.0, 0.0)
            g[pos] = v
            add(g)
    # Subnormals only, and the largest subnormal with the smallest.
    sub = rng.integers(1, 1 << f.man_bits, (4, GROUP_SIZE)) * tiny
    for g in sub:
        add(g * np.where(rng.random(GROUP_SIZE) < 0.5, -1, 1))
    add(np.array([(2**f.man_bits - 1) * tiny] + [tiny] * (GROUP_SIZE - 1)))
    # Mixed signs around one, and the largest values.
    add(np.linspace(-4, 4, GROUP_SIZE))
    add(np.array([big, -big] * (GROUP_SIZE // 2)))
    add(np.array([-big] + [min_normal] * (GROUP_SIZE - 1)))
    add(np.array([big] + [-tiny, tiny, -min_normal, min_normal] * 7 + [-tiny, tiny, -tiny]))
    # NaN / Inf at every position class, with finite neighbours.
    base = rng.integers(0, 1 << 8, GROUP_SIZE) * 2.0**-4
    for pos in (0, 5, 31):
        for code in _special_codes(f):
            g = _codes(base, f)
            g[pos] = code
            groups.append(g)
    groups.append(np.full(GROUP_SIZE, _special_codes(f)[2], dtype=np.uint16))
    # The group maximum at every binade edge where the scale clamps at 0 (BF16 only: the
    # smallest FP16 is 2**-24, an FP32 exponent field of 103).
    for fmt in ELEMENT_FORMATS:
        for rule in SCALE_RULES:
            emax_ = scale_emax(fmt, rule)
            for e_field in range(max(emax_ - 2, 0), emax_ + 3):
                m = 2.0 ** (e_field - 127) if e_field else tiny * 5
                add(np.array([m * 1.5] + [m * 0.75, -m * 0.375, tiny] * 10 + [m]))
    # Exact ties of each element format, at every element exponent, for a few scales.
    for fmt in ELEMENT_FORMATS:
        ef = get_format(fmt)
        for rule in SCALE_RULES:
            emax_ = scale_emax(fmt, rule)
            for shift in (-20, -3, 0, 5, 60):
                groups += _tie_groups(f, ef, emax_, shift, rng)
        for shift in (-20, -3, 0, 5, 60):
            groups += _saturation_groups(f, ef, shift)
    return np.array(groups, dtype=np.uint16)


def _tie_groups(f, ef, emax_, shift, rng):
    """Groups whose maximum puts the scale at ``2**shift`` times the element grid and whose
    other elements lie exactly halfway between two element values (both parities), from the
    top binade down into the element subnormals; values ``f`` cannot hold are skipped."""
    out = []
    lo_exp = ef.lsb_exp_min  # the smallest element subnormal's exponent
    ties = []
    for e in range(emax_, ef.emin - 1, -1):
        ulp = 2.0 ** max(e - ef.man_bits, lo_exp)
        for k in (0, 1, 2, 3, (1 << ef.man_bits) - 1, 1 << ef.man_bits):
            start = 2.0**e if e >= ef.emin else 0.0
            ties.append(start + (k + 0.5) * ulp)
    ties.append(0.5 * 2.0**lo_exp)  # half the smallest subnormal: rounds to zero (even)
    ties.append(1.5 * 2.0**lo_exp)
    ties = np.array(sorted(set(ties)))
    ties = ties[ties < 2.0 ** (emax_ + 1)]
    for start in range(0, len(ties), GROUP_SIZE - 1):
        chunk = ties[start : start + GROUP_SIZE - 1]
        vals = np.resize(chunk, GROUP_SIZE - 1) * np.where(rng.random(GROUP_SIZE - 1) < 0.5, -1, 1)
        g = np.concatenate([[1.0 * 2.0**emax_], vals]) * 2.0**shift
        codes = _codes(g, f)
        if codes is not None:
            out.append(codes)
    return out


def _saturation_groups(f, ef, shift):
    """Groups at the saturation edge of the OCP rule (the maximum in the element's top binade
    ``emax``): the largest element value, half an element ulp above it (a tie), just above
    that, just below it, and the largest value of the binade (rounds past it)."""
    top_ulp = 2.0 ** (ef.emax - ef.man_bits)
    edge = [
        ef.max_finite,
        ef.max_finite + top_ulp / 2,
        ef.max_finite + top_ulp / 2 + top_ulp / 8,
        ef.max_finite - top_ulp / 2,
        2.0 ** (ef.emax + 1) - top_ulp / 8,
    ]
    out = []
    for lead in (2.0**ef.emax, 2.0 ** (ef.emax + 1) - top_ulp / 16):
        vals = np.resize(np.array(edge + [-v for v in edge]), GROUP_SIZE - 1)
        g = np.concatenate([[lead], vals]) * 2.0**shift
        codes = _codes(g, f)
        if codes is not None:
            out.append(codes)
    return out
