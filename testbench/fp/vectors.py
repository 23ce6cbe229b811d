"""Stimulus for the FP units: corner sets, exhaustive pairs and random vectors, as raw encodings.

Everything returns numpy arrays of encodings (the format's storage dtype), generated from a seeded
``numpy.random.Generator`` so that a run is reproducible from ``(count, seed)``.
"""

import numpy as np

from ncrtl.model.fp import bits_to_float, encode, fp32_dot_add, from_bits, get_format

__all__ = [
    "corner_codes",
    "random_codes",
    "exhaustive_pairs",
    "psum_for",
    "dot_add_vectors",
    "fp32_corner_codes",
]


def fp32_corner_codes():
    """FP32 encodings every adder must see: zeros, subnormals, normals' edges, Inf, NaN, ties."""
    c = [
        0x00000000,
        0x80000000,
        0x00000001,
        0x80000001,
        0x00000002,
        0x007FFFFF,
        0x807FFFFF,
        0x00800000,
        0x80800000,
        0x00800001,
        0x3F800000,
        0xBF800000,
        0x3F800001,
        0x3F7FFFFF,
        0x3FFFFFFF,
        0x4B800000,
        0x33800000,
        0x34000000,
        0x7F7FFFFF,
        0xFF7FFFFF,
        0x7F7FFFFE,
        0x7F000000,
        0x7F800000,
        0xFF800000,
        0x7FC00000,
        0xFFC00000,
        0x7F800001,
        0x7FBFFFFF,
        0x0C000000,
        0x8C000000,
        0x73000000,
        0x01000000,
        0x00400000,
        0x00C00000,
    ]
    return np.array(c, dtype=np.uint32)


def corner_codes(fmt):
    """Corner encodings of ``fmt``: zeros, extreme subnormals and normals, Inf, NaN, one."""
    f = get_format(fmt)
    if f.container_bits == 32:
        c = fp32_corner_codes()
        if f.ignored_low_bits:  # TF32: also patterns whose only payload is in the ignored bits
            c = np.concatenate([c, np.array([0x3F801FFF, 0x7F801FFF, 0x00001FFF], np.uint32)])
        return c
    if f.bits <= 8:
        # Every code of the two extreme exponent fields (zeros, subnormals, the top binade with
        # Inf/NaN/max) and of the binade around 1.0; exhaustive pairs come from exhaustive_pairs.
        codes = np.arange(1 << f.bits)
        ef = (codes >> f.man_bits) & ((1 << f.exp_bits) - 1)
        keep = (
            (ef == 0) | (ef == (1 << f.exp_bits) - 1) | (ef == min(f.bias, (1 << f.exp_bits) - 1))
        )
        return codes[keep].astype(f.storage_dtype)
    vals = [
        0.0,
        -0.0,
        f.smallest_subnormal,
        -f.smallest_subnormal,
        2.0**f.emin,
        2.0**f.emin - f.smallest_subnormal,
        f.max_finite,
        -f.max_finite,
        1.0,
        -1.0,
        1.0 + 2.0**-f.man_bits,
        1.5,
        np.inf,
        -np.inf,
    ]
    codes = list(encode(np.array(vals), f))
    if f.has_nan:
        codes += [(((1 << f.exp_bits) - 1) << f.man_bits) | 1, (1 << f.bits) - 1]
    return np.array(codes, dtype=f.storage_dtype)


def random_codes(rng, fmt, n, special_rate=0.01):
    """``n`` random encodings of ``fmt``.

    Narrow formats draw uniformly over the codes but thin out Inf/NaN to ``special_rate``;
    FP32/TF32 draw most exponents from a band around 1.0 (so sums interact and cancel) and the
    rest uniformly over all encodings.
    """
    f = get_format(fmt)
    if f.container_bits == 32:
        bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        band = (bits & np.uint32(0x807FFFFF)) | (rng.integers(97, 158, n).astype(np.uint32) << 23)
        return np.where(rng.random(n) < 0.7, band, bits).astype(np.uint32)
    bits = rng.integers(0, 1 << f.bits, n).astype(f.storage_dtype)
    v = bits_to_float(bits, f)
    spec = ~np.isfinite(v)
    if spec.any():
        # Replace most specials by the finite value with the next lower exponent field.
        repl = rng.integers(0, 1 << f.bits, n).astype(f.storage_dtype) & f.storage_dtype(
            ((1 << (f.bits - 1)) | ((1 << (f.bits - 2)) - 1))
        )
        bits = np.where(spec & (rng.random(n) >= special_rate), repl, bits)
    return bits.astype(f.storage_dtype)


def exhaustive_pairs(fmt_a, fmt_b=None):
    """Every (a, b) pair of two narrow formats: arrays ``a, b`` of ``2**bits_a * 2**bits_b``."""
    fa = get_format(fmt_a)
    fb = get_format(fmt_b or fmt_a)
    a = np.repeat(np.arange(1 << fa.bits), 1 << fb.bits).astype(fa.storage_dtype)
    b = np.tile(np.arange(1 << fb.bits), 1 << fa.bits).astype(fb.storage_dtype)
    return a, b


def psum_for(rng, a, b, fmt_a, fmt_b, scale_exp=None):
    """FP32 psums that make the fused add interesting for the given products.

    A third are random FP32 codes, a third are the negated FP32 rounding of the sum of products
    nudged by a few ulps (deep cancellation, where the sticky logic is tested), a third sit a
    couple of binades away (alignment, ties and carries).
    """
    n = a.shape[0]
    fa, fb = get_format(fmt_a), get_format(fmt_b)
    zero = np.zeros(n, dtype=np.float32)
    s = fp32_dot_add(
        zero, from_bits(a, fa), from_bits(b, fb), a_format=fa, b_format=fb, scale_exp=scale_exp
    ).view(np.uint32)
    nudge = rng.integers(-3, 4, n).astype(np.int64)
    cancel = ((s.astype(np.int64) ^ 0x80000000) + nudge) & 0xFFFFFFFF
    shift = rng.integers(-30, 31, n).astype(np.int64) << 23
    near = (s.astype(np.int64) + shift) & 0xFFFFFFFF
    near = np.where(rng.random(n) < 0.5, near ^ 0x80000000, near)
    pick = rng.integers(0, 3, n)
    rand = random_codes(rng, "fp32", n).astype(np.int64)
    out = np.where(pick == 0, rand, np.where(pick == 1, cancel, near)).astype(np.uint32)
    # Keep psums that were derived from NaN/Inf sums from becoming all-NaN streams.
    bad = ~np.isfinite(out.view(np.float32))
    out[bad] = rand[bad].astype(np.uint32)
    return out


def dot_add_vectors(rng, fmt_a, fmt_b, n_products, count, *, scale=False, exhaustive=False):
    """Inputs for a fused dot-add unit: ``psum[n]``, ``a[n, k]``, ``b[n, k]``, ``scale_exp[n]``
    (zeros without ``scale``): a corner block, then ``count`` random vectors.

    The corner block pairs every corner code of ``a`` with every corner code of ``b`` in product
    0 (the other products random); with ``exhaustive`` and two formats of at most 8 bits it pairs
    every code with every code instead.
    """
    fa, fb = get_format(fmt_a), get_format(fmt_b)
    if exhaustive and fa.bits <= 8 and fb.bits <= 8:
        pa, pb = exhaustive_pairs(fa, fb)
    else:
        ca, cb = corner_codes(fa), corner_codes(fb)
        ia, ib = np.meshgrid(np.arange(len(ca)), np.arange(len(cb)), indexing="ij")
        pa, pb = ca[ia.reshape(-1)], cb[ib.reshape(-1)]
    nc = pa.size
    a = random_codes(rng, fa, (nc + count) * n_products).reshape(-1, n_products)
    b = random_codes(rng, fb, (nc + count) * n_products).reshape(-1, n_products)
    a[:nc, 0] = pa
    b[:nc, 0] = pb
    se = np.zeros(nc + count, dtype=np.int64)
    if scale:
        se = rng.integers(-254, 255, nc + count)
        se[:nc] = rng.choice(np.array([-254, -200, -127, 0, 1, 127, 200, 254]), nc)
    psum = psum_for(rng, a, b, fa, fb, se if scale else None)
    psum[: len(fp32_corner_codes())] = fp32_corner_codes()
    return psum, a, b, se
