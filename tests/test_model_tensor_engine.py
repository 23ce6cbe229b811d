"""Tensor Engine golden (values) against an exact rational reference, and the timing model's facts.

Values: every result is compared bit for bit with the PE chain computed one element at a time by
``tests/exact_ref.py`` (Python ``Fraction``, no floating point).  Timing: the documented facts of
docs/tensor_engine.md, and :func:`timing.simulate` against an independent cycle-stepped model of
the same conventions.
"""

import time
import zlib

import ml_dtypes
import numpy as np
import pytest

from ncrtl.model.fp import decode as fp_decode
from ncrtl.model.fp import fp32_dot_add, from_bits, get_format, to_bits, two_sum
from ncrtl.model.tensor_engine import (
    P_PREFIX,
    InstructionError,
    latency,
    matmul,
    matmul_bits,
    matmul_mx,
    matmul_mx_rows,
    mode_of,
    mx_row_scales,
    result_bits,
    simulate,
    timing,
)
from ncrtl.model.tensor_engine.isa import (
    FP8_FORMATS,
    MAX_ARRAY,
    MIN_MM_CYCLES,
    Error,
    Instruction,
    Mode,
    Op,
    check,
    decode,
    encode,
)
from ncrtl.model.tensor_engine.timing import HDL_RULES
from tests.exact_ref import dot_add_reference, exact_operand

DTYPES = {
    "fp32": np.float32,
    "tf32": np.float32,
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "fp8_e4m3": ml_dtypes.float8_e4m3,
    "fp8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp8_e3m4": ml_dtypes.float8_e3m4,
    "fp4_e2m1fn": ml_dtypes.float4_e2m1fn,
}


# -- helpers -----------------------------------------------------------------------------------


def simulate_one_chain(program, rows=128, cols=128, **kw):
    """The timing model with one LoadStationary chain and a 64-slot MM floor
    (:data:`timing.ONE_CHAIN`): the plain weight-stationary rules."""
    return simulate(program, rows, cols, rules=timing.ONE_CHAIN, **kw)


def kw(fs, fm):
    """Format keyword arguments (only TF32 needs naming)."""
    out = {}
    if fs == "tf32":
        out["stationary_format"] = "tf32"
    if fm == "tf32":
        out["moving_format"] = "tf32"
    return out


def operands(rng, fmt, shape, specials=0.0, raw=0.2):
    """Random operands of ``fmt``: scaled normals, a fraction of raw bit patterns, some specials."""
    f = get_format(fmt)
    dt = DTYPES[fmt]
    scale = 2.0 ** rng.integers(-3, 4, size=shape)
    vals = (rng.standard_normal(shape) * scale).astype(np.float32)
    if f.bits <= 8:
        vals = np.clip(vals, -f.max_finite, f.max_finite)
    arr = vals.astype(dt)
    bits = to_bits(arr, "fp32" if fmt == "tf32" else fmt).astype(np.uint64)
    nbits = f.container_bits
    rnd = rng.integers(0, 1 << nbits, size=shape, dtype=np.uint64)
    take = rng.random(shape) < raw
    bits = np.where(take, rnd, bits)
    if specials:
        special = np.array(special_codes(fmt), dtype=np.uint64)
        take = rng.random(shape) < specials
        bits = np.where(take, special[rng.integers(0, len(special), size=shape)], bits)
    return from_bits(bits.astype(f.storage_dtype), "fp32" if fmt == "tf32" else fmt)


def special_codes(fmt):
    """NaN, +-Inf (or the largest finite), +-0, smallest subnormal, largest finite, one."""
    f = get_format(fmt)
    n = f.bits
    sign = 1 << (n - 1)
    emask = ((1 << f.exp_bits) - 1) << f.man_bits
    top = emask | ((1 << f.man_bits) - 1)  # S.1111.111
    maxf = (top - 1) if f.special == "fn" else (emask - 1)  # largest finite
    one = f.bias << f.man_bits
    codes = [0, sign, 1, sign | 1, maxf, sign | maxf, one, sign | one, top]
    if f.has_inf:
        codes += [emask, sign | emask]
    return codes


def bits_of(arr, fmt):
    return to_bits(arr, "fp32" if fmt == "tf32" else fmt).astype(np.int64)


def reference(s, x, fs, fm, double=False):
    """The PE chain of every output element, one element at a time, exactly (uint32 encodings)."""
    sb, xb = bits_of(s, fs), bits_of(x, fm)
    sv = np.vectorize(lambda b: exact_operand(b, fs), otypes=[object])(sb)
    xv = np.vectorize(lambda b: exact_operand(b, fm), otypes=[object])(xb)
    k_n, m_n, n_n = s.shape[0], s.shape[-1], x.shape[-1]
    out = np.zeros((m_n, n_n), dtype=np.uint32)
    for m in range(m_n):
        for n in range(n_n):
            p = 0
            for k in range(k_n):
                if double:
                    p = dot_add_reference(p, [sv[k, 0, m], sv[k, 1, m]], [xv[k, 0, n], xv[k, 1, n]])
                else:
                    p = dot_add_reference(p, [sv[k, m]], [xv[k, n]])
            out[m, n] = p
    return out


def assert_bits_equal(got, want):
    got = np.asarray(got)
    bad = got != want
    assert not bad.any(), [
        (tuple(i), hex(int(got[tuple(i)])), hex(int(want[tuple(i)]))) for i in np.argwhere(bad)[:5]
    ]


# -- values against the exact reference ------------------------------------------------------

PAIRS = [("fp32", "fp32"), ("tf32", "tf32"), ("bf16", "bf16"), ("fp16", "fp16")] + [
    (a, b) for a in FP8_FORMATS for b in FP8_FORMATS
]


@pytest.mark.parametrize("fs,fm", PAIRS)
@pytest.mark.parametrize("specials", [0.0, 0.08])
def test_matmul_matches_exact_chain(fs, fm, specials):
    rng = np.random.default_rng(zlib.crc32(f"{fs} {fm} {specials}".encode()))
    k, m, n = 7, 3, 5
    s = operands(rng, fs, (k, m), specials)
    x = operands(rng, fm, (k, n), specials)
    got = matmul(s, x, rows=8, cols=4, **kw(fs, fm))
    assert got.dtype == np.float32 and got.shape == (m, n)
    assert_bits_equal(result_bits(got), reference(s, x, fs, fm))


def _dot_add_chain(s, x, fs, fm):
    """The chains by ``fp32_dot_add``, one step per row (``[K, M]`` and ``[K, N]``, or
    double-row ``[K, 2, M]`` and ``[K, 2, N]``): the golden's general road."""
    s3 = s if s.ndim == 3 else s[:, None, :]
    x3 = x if x.ndim == 3 else x[:, None, :]
    m, n, w = s3.shape[2], x3.shape[2], s3.shape[1]
    p = np.zeros((m, n), dtype=np.float32)
    for i in range(s3.shape[0]):
        a = np.broadcast_to(s3[i].T[:, None, :], (m, n, w))
        b = np.broadcast_to(x3[i].T[None, :, :], (m, n, w))
        p = fp32_dot_add(p, a, b, a_format=fs, b_format=fm)
    return p


def _gap_operands(rng, fmt, shape):
    """Operands for the fast chain's proof: random significands at exponents spread over the
    format's normal range (at most +-60, so that the products stay finite and a chain holds
    huge and tiny products side by side), some subnormals and signed zeros, a few specials."""
    f = get_format(fmt)
    prec = f.man_bits - f.ignored_low_bits
    lo = max(1 - f.bias, -60)
    hi = min((2**f.exp_bits - 2) - f.bias if f.special != "fn" else 2**f.exp_bits - 1 - f.bias, 60)
    frac = rng.integers(0, 1 << prec, size=shape) / (1 << prec)
    vals = (1 + frac) * 2.0 ** rng.integers(lo, hi + 1, size=shape)
    vals *= rng.choice([-1.0, 1.0], size=shape)
    bits = to_bits(vals.astype(np.float32).astype(DTYPES[fmt]), "fp32" if fmt == "tf32" else fmt)
    bits = bits.astype(np.uint64)
    corner = np.array(special_codes(fmt), dtype=np.uint64)
    take = rng.random(shape) < 0.004
    bits = np.where(take, corner[rng.integers(0, len(corner), size=shape)], bits)
    return from_bits(bits.astype(f.storage_dtype), "fp32" if fmt == "tf32" else fmt)


def _inexact_additions(s, x, fs, fm):
    """How many float64 additions of the fast chain on ``s``, ``x`` were not exact (TwoSum's
    error term nonzero): the proof's second case."""
    sv, xv = fp_decode(s, fs), fp_decode(x, fm)
    p, count = np.zeros((s.shape[1], x.shape[1]), np.float32), 0
    with np.errstate(all="ignore"):
        for i in range(s.shape[0]):
            q = np.multiply.outer(sv[i], xv[i])
            t, err = two_sum(p.astype(np.float64), q)
            count += int((np.isfinite(t) & (err != 0)).sum())
            p = t.astype(np.float32)
    return count


@pytest.mark.parametrize("fs,fm", PAIRS)
def test_one_product_chains_equal_the_general_road(fs, fm):
    """``matmul`` chains one-product modes in float64 (products of at most 24 significand bits,
    ``matmul._chain_float64``, its proof in the docstring) or by TwoSum and one rounding
    (fp32, ``matmul._chain_two_sum``); both equal ``fp32_dot_add`` step by step, bit for bit,
    on adversarial operands: long chains over the whole exponent range (huge and subnormal
    products side by side: the data reaches the float64 additions that are not exact),
    products that cancel the psum to the last bit (the moving vector's second half negates its
    first half, in reverse order), specials; and a sample against the rational reference."""
    rng = np.random.default_rng(zlib.crc32(f"short {fs} {fm}".encode()))
    k, m, n = 48, 6, 10
    s = _gap_operands(rng, fs, (k, m))
    x = _gap_operands(rng, fm, (k, n))
    half = operands(rng, fm, (k // 2, n), 0.0, raw=0.5)
    x[:, : n // 2] = np.concatenate([half, -half[::-1]])[:, : n // 2]
    s[k // 2 :] = s[: k // 2][::-1]  # the same stationary rows: the products cancel exactly
    if get_format(fs).exp_bits + get_format(fm).exp_bits >= 10:  # a product range over 53 bits
        assert _inexact_additions(s, x, fs, fm) > 0, "no inexact float64 addition"
    got = matmul(s, x, rows=64, cols=8, **kw(fs, fm))
    assert_bits_equal(result_bits(got), result_bits(_dot_add_chain(s, x, fs, fm)))
    s12, x12 = s[:12, :2], x[:12, 3:8]
    got = matmul(s12, x12, rows=64, cols=8, **kw(fs, fm))
    assert_bits_equal(result_bits(got), reference(s12, x12, fs, fm))


@pytest.mark.parametrize("fs", FP8_FORMATS[:3])
@pytest.mark.parametrize("fm", FP8_FORMATS[:3])
def test_double_row_chain_equals_the_general_road(fs, fm):
    """The double-row chain (``matmul._chain_double_row``: TwoSum of the two products, then of
    the psum and their sum, one rounding) equals ``fp32_dot_add`` step by step, bit for bit:
    operands over the whole exponent range, rows whose two products cancel or lie far apart
    (e5m2: the largest product beside the smallest, where the products' sum is not exact in
    float64 and the step takes the general road), specials."""
    rng = np.random.default_rng(zlib.crc32(f"double road {fs} {fm}".encode()))
    k, m, n = 40, 5, 7
    s = _gap_operands(rng, fs, (k, 2, m))
    x = _gap_operands(rng, fm, (k, 2, n))
    s[1::4, 1] = -s[1::4, 0]  # the row's two products cancel where the moving halves agree
    x[1::4, 1] = x[1::4, 0]
    if (fs, fm) == ("fp8_e5m2", "fp8_e5m2"):
        f = get_format(fs)
        big, tiny = f.max_finite, 2.0 ** (1 - f.bias - f.man_bits)
        s[2::5, 0], x[2::5, 0] = big, big
        s[2::5, 1], x[2::5, 1] = tiny, tiny
        q1 = fp_decode(s[:, 0], fs)[:, :, None] * fp_decode(x[:, 0], fm)[:, None, :]
        q2 = fp_decode(s[:, 1], fs)[:, :, None] * fp_decode(x[:, 1], fm)[:, None, :]
        with np.errstate(invalid="ignore"):
            assert (q1 + q2 - q1 != q2)[np.isfinite(q1 + q2)].any(), "no inexact product sum"
    got = matmul(s, x, perf_mode="double_row", rows=64, cols=8)
    assert_bits_equal(result_bits(got), result_bits(_dot_add_chain(s, x, fs, fm)))


def test_double_row_breaks_a_tie_by_its_residual():
    """e5m2 rows: psum 2**21 + 2**-2, then the products 2**-3 and -2**-32: the float64 sum is
    the FP32 midpoint 2**21 + 3 * 2**-3 (the -2**-32 is a float64 tie, rounded to even) and
    converts to the even neighbour 2**21 + 2**-1; the exact sum is below the midpoint, so one
    rounding gives 2**21 + 2**-2, which the residual decides."""
    e5 = ml_dtypes.float8_e5m2
    s = np.array([[[2.0**10], [2.0**-1]], [[2.0**-1], [-(2.0**-16)]]], dtype=e5)  # [2, 2, 1]
    x = np.array([[[2.0**11], [2.0**-1]], [[2.0**-2], [2.0**-16]]], dtype=e5)
    got = matmul(s, x, perf_mode="double_row", rows=8, cols=8)
    assert got[0, 0] == np.float32(2.0**21 + 2.0**-2)
    assert_bits_equal(result_bits(got), reference(s, x, "fp8_e5m2", "fp8_e5m2", True))


def test_fp32_chain_breaks_a_tie_by_its_residual():
    """FP32 psum 1 + 2**-23 plus the product 2**-24 (1 - 2**-46): the float64 sum is the
    midpoint 1 + 3 * 2**-24 (the -2**-70 is below float64's last place) and converts to the
    even neighbour 1 + 2**-22; the exact sum is below the midpoint, so the contract's rounding
    gives 1 + 2**-23, which the TwoSum residual decides."""
    s = np.array([[1 + 2.0**-23], [2.0**-24 * (1 - 2.0**-23)]], dtype=np.float32)
    x = np.array([[1.0], [1 + 2.0**-23]], dtype=np.float32)
    got = matmul(s, x, rows=8, cols=8)
    assert got[0, 0] == np.float32(1 + 2.0**-23)
    assert_bits_equal(result_bits(got), reference(s, x, "fp32", "fp32"))


@pytest.mark.parametrize("fs", FP8_FORMATS[:3])
@pytest.mark.parametrize("fm", FP8_FORMATS[:3])
@pytest.mark.parametrize("specials", [0.0, 0.08])
def test_double_row_matches_exact_chain(fs, fm, specials):
    rng = np.random.default_rng(zlib.crc32(f"double {fs} {fm} {specials}".encode()))
    k, m, n = 6, 3, 4
    s = operands(rng, fs, (k, 2, m), specials)
    x = operands(rng, fm, (k, 2, n), specials)
    got = matmul(s, x, perf_mode="double_row", rows=8, cols=4)
    assert_bits_equal(
        matmul_bits(s, x, perf_mode="double_row", rows=8, cols=4),
        reference(s, x, fs, fm, double=True),
    )
    assert (result_bits(got) == matmul_bits(s, x, perf_mode="double_row", rows=8, cols=4)).all()


def test_double_row_is_one_rounding_per_row():
    """Row p adds both products with one rounding: 1 + 2**-24 + 2**-32 rounds up to 1 + 2**-23.

    Two roundings would give 1 (the tie 1 + 2**-24 goes to even, then 2**-32 is lost).
    """
    e5 = ml_dtypes.float8_e5m2
    s = np.array([[[1.0], [0.0]], [[2.0**-12], [2.0**-16]]], dtype=e5)  # [K=2, 2, M=1]
    x = np.array([[[1.0], [0.0]], [[2.0**-12], [2.0**-16]]], dtype=e5)
    got = matmul(s, x, perf_mode="double_row")
    assert got[0, 0] == np.float32(1.0 + 2.0**-23)
    assert_bits_equal(result_bits(got), reference(s, x, "fp8_e5m2", "fp8_e5m2", True))


# -- MX (nc_matmul_mx) -------------------------------------------------------------------------

MX_FORMATS = ("fp8_e4m3fn", "fp8_e5m2", "fp4_e2m1fn")


def mx_reference(s, x, ss, xs, fs, fm):
    """The MX PE chain exactly: row ``p`` adds ``2**(Es + Ex - 254) * sum_j s_j * x_j`` with one
    rounding; a NaN scale (0xFF) makes the step NaN.  ``ss`` / ``xs``: per-row scales."""
    sb, xb = bits_of(s, fs), bits_of(x, fm)
    sv = np.vectorize(lambda b: exact_operand(b, fs), otypes=[object])(sb)
    xv = np.vectorize(lambda b: exact_operand(b, fm), otypes=[object])(xb)
    k_n, m_n, n_n = s.shape[0], s.shape[1], x.shape[1]
    out = np.zeros((m_n, n_n), dtype=np.uint32)
    for m in range(m_n):
        for n in range(n_n):
            p = 0
            for k in range(k_n):
                if ss[k, m] == 255 or xs[k, n] == 255:
                    p = 0x7FC00000
                    continue
                e = int(ss[k, m]) + int(xs[k, n]) - 254
                p = dot_add_reference(p, list(sv[k, m]), list(xv[k, n]), scale_exp=e)
            out[m, n] = p
    return out


def mx_scales(rng, shape, extremes=0.1):
    sc = 127 + rng.integers(-10, 11, shape)
    pick = rng.random(shape)
    sc = np.where(pick < extremes, rng.choice([0, 1, 40, 220, 253, 254], shape), sc)
    sc = np.where(pick > 1 - extremes / 4, 255, sc)
    return sc.astype(np.uint8)


@pytest.mark.parametrize("fs", MX_FORMATS)
@pytest.mark.parametrize("fm", MX_FORMATS)
def test_mx_matches_exact_chain(fs, fm):
    """matmul_mx against the exact rational chain: every element format pair (fp8 x fp4 too),
    raw bit patterns (NaN, Inf where the format has them), scales from 2**-127 to 2**127 and
    NaN, through the quadrant scale layout (K = 64: two quadrants)."""
    rng = np.random.default_rng(zlib.crc32(f"mx {fs} {fm}".encode()))
    k, m, n = 64, 2, 3
    s = operands(rng, fs, (k, m, 4), 0.05)
    x = operands(rng, fm, (k, n, 4), 0.05)
    # SBUF scale tensors: 4 used partitions per quadrant, the others garbage (ignored).
    s_sbuf = rng.integers(0, 256, (k, m)).astype(np.uint8)
    x_sbuf = rng.integers(0, 256, (k, n)).astype(np.uint8)
    for q in range(k // 32):
        s_sbuf[32 * q : 32 * q + 4] = mx_scales(rng, (4, m))
        x_sbuf[32 * q : 32 * q + 4] = mx_scales(rng, (4, n))
    got = matmul_mx(s, x, s_sbuf, x_sbuf)
    assert got.dtype == np.float32 and got.shape == (m, n)
    ss, xs = mx_row_scales(s_sbuf, k), mx_row_scales(x_sbuf, k)
    # Rows 8g .. 8g + 7 share the scale of group g: quadrant q, partition 32q + (p % 32) // 8.
    assert (ss[40] == s_sbuf[33]).all() and (xs[7] == x_sbuf[0]).all()
    assert_bits_equal(result_bits(got), mx_reference(s, x, ss, xs, fs, fm))


@pytest.mark.parametrize("fs", MX_FORMATS)
@pytest.mark.parametrize("fm", MX_FORMATS)
def test_mx_chain_equals_the_general_road(fs, fm):
    """The MX chain (``matmul._chain_mx``: the four products' exact sum, the scale, TwoSum with
    the psum, one rounding; e5m2 x e5m2 keeps ``fp32_dot_add``) equals ``fp32_dot_add`` row by
    row, bit for bit: elements over the whole exponent range with specials, rows whose
    products cancel, scales from 2**-127 to 2**127 with their extremes and NaN."""
    rng = np.random.default_rng(zlib.crc32(f"mx road {fs} {fm}".encode()))
    k, m, n = 48, 4, 6
    s = _gap_operands(rng, fs, (k, m, 4))
    x = _gap_operands(rng, fm, (k, n, 4))
    s[1::3, :, 1] = -s[1::3, :, 0]  # products that cancel where the moving elements agree
    x[1::3, :, 1] = x[1::3, :, 0]
    ss = mx_scales(rng, (k, m)).astype(np.uint8)
    xs = mx_scales(rng, (k, n)).astype(np.uint8)
    ss[5, 0], xs[5, 0], ss[9, 1], xs[9, 1], ss[13, 2] = 0, 0, 254, 254, 255
    got = matmul_mx_rows(s, x, ss, xs, rows=64, cols=8, tile_unit=2)
    p = np.zeros((m, n), dtype=np.float32)
    for i in range(k):
        nan = (ss[i][:, None] == 0xFF) | (xs[i][None, :] == 0xFF)
        exp = (ss[i][:, None].astype(np.int32) - 127) + (xs[i][None, :].astype(np.int32) - 127)
        p = fp32_dot_add(
            p,
            np.broadcast_to(s[i][:, None, :], (m, n, 4)),
            np.broadcast_to(x[i][None, :, :], (m, n, 4)),
            scale_exp=np.where(nan, 0, exp),
            scale_nan=nan,
        )
    assert_bits_equal(result_bits(got), result_bits(p))


def test_mx_breaks_a_tie_by_its_residual():
    """Row 0 (scale 2**21): 1 x 1 + 2**-14 x 2**-9, so the psum is 2**21 + 2**-2; row 1
    (scale 2**-7): 2**2 x 2**2 - 2**-16 x 2**-9, so 2**-3 - 2**-32 more.  The float64 sum is the
    FP32 midpoint 2**21 + 3 * 2**-3 and converts to the even 2**21 + 2**-1; the exact sum is
    below it, one rounding gives 2**21 + 2**-2: the residual decides."""
    s = np.zeros((2, 2, 4), dtype=ml_dtypes.float8_e5m2)  # M = 2 (MX takes even M)
    x = np.zeros((2, 1, 4), dtype=ml_dtypes.float8_e4m3fn)
    s[0, 0, :2], x[0, 0, :2] = [1.0, 2.0**-14], [1.0, 2.0**-9]
    s[1, 0, :2], x[1, 0, :2] = [4.0, -(2.0**-16)], [4.0, 2.0**-9]
    ss = np.array([[127 + 21, 127], [127 - 7, 127]], dtype=np.uint8)
    xs = np.array([[127], [127]], dtype=np.uint8)
    got = matmul_mx_rows(s, x, ss, xs, rows=8, cols=8, tile_unit=2)
    assert got[0, 0] == np.float32(2.0**21 + 2.0**-2)
    assert_bits_equal(result_bits(got), mx_reference(s, x, ss, xs, "fp8_e5m2", "fp8_e4m3fn"))


def test_mx_one_rounding_per_row_and_scale_range():
    """Row p scales the exact 4-product sum, then rounds once: 1 + 2**-24 + 2**-26 (e5m2
    products under the scale 2**0) rounds up; a tiny scale 2**-254 sends the sum below FP32's
    subnormals (+0 / the smallest subnormal as RNE says); 2**254 overflows to Inf."""
    e5 = ml_dtypes.float8_e5m2
    s = np.zeros((32, 2, 4), dtype=e5)
    x = np.zeros((32, 1, 4), dtype=e5)
    s[0, 0, :3] = [1.0, 2.0**-12, 2.0**-13]
    x[0, 0, :3] = [1.0, 2.0**-12, 2.0**-13]
    one = np.full((32, 2), 127, np.uint8)
    got = matmul_mx(s, x, one, np.full((32, 1), 127, np.uint8))
    assert got[0, 0] == np.float32(1.0 + 2.0**-23)
    tiny = matmul_mx(s, x, np.zeros((32, 2), np.uint8), np.zeros((32, 1), np.uint8))
    assert tiny[0, 0] == 0.0
    big = matmul_mx(s, x, np.full((32, 2), 254, np.uint8), np.full((32, 1), 254, np.uint8))
    assert np.isinf(big[0, 0]) and big[0, 0] > 0
    nan = matmul_mx(s, x, one, np.full((32, 1), 255, np.uint8))
    assert result_bits(nan)[1, 0] == 0x7FC00000  # a zero data column with a NaN scale: NaN


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(k=16), r"K=16 must be a multiple of 32"),
        (dict(k=160), r"K=160 must be in 1..128"),
        (dict(m=3), r"M=3 must be a multiple of 2"),
        (dict(n=513), r"N=513 must be in 1..512 \(mx with an FP32 result; 1024 with a BF16"),
        (dict(n=1025, psum_dtype="bf16"), r"N=1025 must be in 1..1024 \(mx with a BF16 result\)"),
        (dict(psum_dtype="fp16"), r"psum_dtype must be 'fp32' or 'bf16'"),
        (dict(col_tile=True), r"mx cannot tile columns; it tiles rows only \(64 or 32\)"),
        (dict(s_dtype=ml_dtypes.bfloat16), r"stationary dtype bfloat16 is not an MX element"),
        (
            dict(s_parts=3),
            r"stationary_scale has 3 partitions; K=32 data partitions need at least 4",
        ),
        (dict(x_scale_dtype=np.int32), r"moving_scale must be uint8"),
        (dict(x_free=5), r"moving_scale free size 5 does not match the data's 4"),
        (dict(packed=2), r"stationary must be \[K, free, 4\]"),
    ],
)
def test_mx_bad_input(kwargs, match):
    k, m, n = kwargs.get("k", 32), kwargs.get("m", 2), kwargs.get("n", 4)
    s = np.zeros(
        (k, m, kwargs.get("packed", 4)), dtype=kwargs.get("s_dtype", ml_dtypes.float8_e4m3fn)
    )
    x = np.zeros((k, n, 4), dtype=ml_dtypes.float4_e2m1fn)
    ss = np.full((kwargs.get("s_parts", max(k, 4)), m), 127, np.uint8)
    xs = np.full((max(k, 4), kwargs.get("x_free", n)), 127, kwargs.get("x_scale_dtype", np.uint8))
    tile = dict(tile_position=(0, 64), tile_size=(128, 64)) if kwargs.get("col_tile") else {}
    dtype = {"psum_dtype": kwargs["psum_dtype"]} if "psum_dtype" in kwargs else {}
    with pytest.raises(InstructionError, match=match):
        matmul_mx(s, x, ss, xs, **tile, **dtype)


def test_mx_n_limit_follows_the_result_dtype():
    """N = 1024 is an MX matmul whose result PSUM accumulates in BF16 (a 2 KiB bank row of
    BF16); the vectors are the FP32 ones either way, and the other modes stay at 512."""
    rng = np.random.default_rng(8)
    s = operands(rng, "fp8_e5m2", (32, 2, 4))
    x = operands(rng, "fp8_e4m3fn", (32, 1024, 4))
    ss, xs = mx_scales(rng, (32, 2), 0.0), mx_scales(rng, (32, 1024), 0.0)
    wide = matmul_mx(s, x, ss, xs, psum_dtype="bf16")
    half = matmul_mx(s, x[:, :512], ss, xs[:, :512])
    assert wide.shape == (2, 1024)
    assert (result_bits(wide[:, :512]) == result_bits(half)).all()
    ls = Instruction(Op.LS, Mode.BF16, k=8, m=8)
    mm = Instruction(Op.MM, Mode.BF16, k=8, m=8, n=513, bf16_out=True)
    assert check(mm, 8, 8, ls) == (
        Error.N_RANGE,
        "N=513 must be in 1..512 (bf16 with a BF16 result)",
    )
    mx_ls = Instruction(Op.LS, Mode.MX, k=32, m=8)
    mx_mm = Instruction(Op.MM, Mode.MX, k=32, m=8, n=1024, bf16_out=True)
    assert check(mx_mm, 32, 8, mx_ls) is None
    assert decode(encode(mx_mm)) == mx_mm


def test_mx_row_tiles_and_mode_choice():
    """Row tiles give the whole-array values; fp4 data is refused by the plain matmul (MX
    elements take block scales) and an fp8 e4m3fn pair there is the fp8 mode, not MX."""
    rng = np.random.default_rng(5)
    s = operands(rng, "fp8_e4m3fn", (32, 4, 4))
    x = operands(rng, "fp4_e2m1fn", (32, 6, 4))
    ss, xs = mx_scales(rng, (32, 4), 0.0), mx_scales(rng, (32, 6), 0.0)
    whole = matmul_mx(s, x, ss, xs)
    tiled = matmul_mx(s, x, ss, xs, tile_position=(96, 0), tile_size=(32, 128))
    assert (result_bits(whole) == result_bits(tiled)).all()
    rows = matmul_mx_rows(s, x, mx_row_scales(ss, 32), mx_row_scales(xs, 32))
    assert (result_bits(rows) == result_bits(whole)).all()
    with pytest.raises(InstructionError, match="fp4_e2m1fn is an MX element format"):
        matmul(x[:, :, 0], x[:, :, 1])
    assert mode_of(ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fn)[0] == Mode.FP8


def test_chain_rounds_every_row():
    """Each PE row rounds: 1 + 2**-30 - 1 gives 0 (the whole-dot exact sum would be 2**-30)."""
    s = np.array([[1.0], [2.0**-30], [-1.0]], dtype=np.float32)
    x = np.ones((3, 1), dtype=np.float32)
    got = matmul(s, x)
    assert got[0, 0] == 0.0 and not np.signbit(got[0, 0])
    assert_bits_equal(result_bits(got), reference(s, x, "fp32", "fp32"))


def test_corner_values_fp32():
    f32 = np.float32
    big = np.finfo(f32).max
    tiny = np.float32(1e-45)
    cases = [
        # (stationary column, moving column, expected result bits)
        ([big, big], [1.0, 1.0], 0x7F800000),  # overflow in the rounding
        ([big, big, -np.inf], [1.0, 1.0, 1.0], 0x7FC00000),  # Inf - Inf
        ([np.inf, 0.0], [0.0, 1.0], 0x7FC00000),  # Inf * 0
        ([np.nan, 1.0], [1.0, 1.0], 0x7FC00000),  # NaN in
        ([-0.0, -0.0], [1.0, 1.0], 0x00000000),  # the chain starts at +0.0
        ([-tiny, -0.0], [tiny, 1.0], 0x80000000),  # underflow keeps -0, stays -0
        ([-tiny, 1.0], [tiny, 0.0], 0x00000000),  # -0 psum + (+0 product) is +0
        ([tiny, tiny], [0.5, 0.5], 0x00000000),  # 2**-150 ties to even (+0) twice
        ([tiny, tiny], [0.75, 0.75], 0x00000002),  # subnormal psum, rounds up
        ([1.0, -1.0], [2.0**-20, 2.0**-20], 0x00000000),  # exact cancellation -> +0
        ([big, -big, 3.0], [2.0, 2.0, 1.0], 0x7F800000),  # overflow is sticky in the chain
        ([big, -big], [1.0, 1.0], 0x00000000),  # no overflow: exact cancellation
    ]
    for sc, xc, want in cases:
        s = np.array(sc, dtype=f32)[:, None]
        x = np.array(xc, dtype=f32)[:, None]
        got = int(matmul_bits(s, x)[0, 0])
        ref = int(reference(s, x, "fp32", "fp32")[0, 0])
        assert got == ref == want, (sc, xc, hex(got), hex(ref))


def test_corner_values_narrow_formats():
    bf = ml_dtypes.bfloat16
    bmax = float(ml_dtypes.finfo(bf).max)
    s = np.array([[bmax], [bmax], [-bmax]], dtype=bf)
    x = np.array([[bmax], [-bmax], [1.0]], dtype=bf)  # 2**256-ish products: exact, then cancel
    assert_bits_equal(matmul_bits(s, x), reference(s, x, "bf16", "bf16"))
    # FP8: e4m3fn has no Inf (S.1111.111 is NaN); e4m3 has Inf; e5m2 subnormals.
    for fs in FP8_FORMATS:
        codes = np.array(special_codes(fs), dtype=np.uint8)
        c = len(codes)
        kk, jj = np.meshgrid(np.arange(c), np.arange(c), indexing="ij")
        s = from_bits(codes[(kk + jj) % c], fs)  # every pair of codes meets
        x = from_bits(codes[(3 * kk + jj) % c], fs)
        assert_bits_equal(matmul_bits(s, x, rows=16, cols=16), reference(s, x, fs, fs))


def test_tf32_ignores_low_bits():
    one_plus = np.float32(1.0 + 2.0**-20)  # below TF32's 10 mantissa bits
    s = np.array([[one_plus]], dtype=np.float32)
    x = np.array([[one_plus]], dtype=np.float32)
    assert matmul(s, x, stationary_format="tf32", moving_format="tf32")[0, 0] == 1.0
    assert matmul(s, x)[0, 0] == np.float32(one_plus * one_plus)
    # An FP32 NaN whose payload is only in the ignored bits reads as Inf.
    nan_low = np.array([[0x7F800001]], dtype=np.uint32).view(np.float32)
    got = matmul_bits(
        nan_low, np.ones((1, 1), np.float32), stationary_format="tf32", moving_format="tf32"
    )
    assert int(got[0, 0]) == 0x7F800000


def test_tiling_gives_whole_array_values():
    rng = np.random.default_rng(5)
    s = operands(rng, "bf16", (64, 32))
    x = operands(rng, "bf16", (64, 16))
    whole = matmul_bits(s, x)
    for pos, size in [
        ((0, 0), (64, 128)),
        ((64, 0), (64, 128)),
        ((0, 96), (128, 32)),
        ((0, 64), (128, 64)),
    ]:
        assert (matmul_bits(s, x, tile_position=pos, tile_size=size) == whole).all()
    assert (
        matmul_bits(s[:32], x[:32], tile_position=(96, 0), tile_size=(32, 128))
        == matmul_bits(s[:32], x[:32])
    ).all()


def test_full_size_bf16_is_fast_and_exact():
    rng = np.random.default_rng(11)
    s = operands(rng, "bf16", (128, 128), raw=0.0)
    x = operands(rng, "bf16", (128, 512), raw=0.0)
    t0 = time.perf_counter()
    got = matmul_bits(s, x)
    elapsed = time.perf_counter() - t0
    assert got.shape == (128, 512)
    assert elapsed < 10, f"128x128x512 bf16 took {elapsed:.1f} s"
    for m, n in [(0, 0), (127, 511), (5, 300), (64, 17)]:
        want = reference(s[:, m : m + 1], x[:, n : n + 1], "bf16", "bf16")[0, 0]
        assert int(got[m, n]) == int(want)


# -- transpose -------------------------------------------------------------------------------

TRANSPOSE_FORMATS = ["fp32", "tf32", "bf16", "fp16"] + list(FP8_FORMATS)


def selection(perm, k, fmt):
    """Moving [k, len(perm)]: column n has its 1 at row perm[n] (None: all-zero column)."""
    sel = np.zeros((k, len(perm)), dtype=np.float32)
    for n, p in enumerate(perm):
        if p is not None:
            sel[p, n] = 1.0
    return sel.astype(DTYPES[fmt])


@pytest.mark.parametrize("fmt", TRANSPOSE_FORMATS)
def test_transpose_identity_and_permutation(fmt):
    rng = np.random.default_rng(TRANSPOSE_FORMATS.index(fmt))
    f = get_format(fmt)
    k, m = 8, 6
    # Every bit pattern is fair game, NaN payloads and signalling NaNs included.
    raw = rng.integers(0, 1 << f.container_bits, size=(k, m), dtype=np.uint64)
    sign = 1 << (f.container_bits - 1)
    emask = ((1 << f.exp_bits) - 1) << f.man_bits
    raw[0, 0] = sign | emask | 1 if f.special == "ieee" else sign | emask | 7  # NaN payloads
    raw[1, 0] = emask | 1 if f.special == "ieee" else 0x7F
    s = from_bits(raw.astype(f.storage_dtype), "fp32" if fmt == "tf32" else fmt)
    sb = bits_of(s, fmt)
    out_dtype = np.uint32 if f.container_bits == 32 else np.uint16
    ident = matmul(s, selection(range(k), k, fmt), is_transpose=True, **kw(fmt, fmt))
    assert ident.dtype == out_dtype and ident.shape == (m, k)
    assert (ident.astype(np.int64) == sb.T).all()
    perm = list(rng.permutation(k)) + [None, 3]
    got = matmul(s, selection(perm, k, fmt), is_transpose=True, **kw(fmt, fmt))
    for n, p in enumerate(perm):
        want = np.zeros(m, np.int64) if p is None else sb[p]
        assert (got[:, n].astype(np.int64) == want).all(), (n, p)
    if f.bits == 8:
        assert (got >> 8 == 0).all()  # FP8: upper byte zero


def test_transpose_mixed_fp8_and_tiles():
    rng = np.random.default_rng(3)
    s = from_bits(rng.integers(0, 256, size=(32, 4), dtype=np.uint8), "fp8_e4m3")
    sel = selection([31, 0, 7], 32, "fp8_e5m2")
    got = matmul(s, sel, is_transpose=True, tile_position=(96, 0), tile_size=(32, 128))
    sb = bits_of(s, "fp8_e4m3")
    assert (got.astype(np.int64) == sb[[31, 0, 7]].T).all()
    # -0 in a selection matrix counts as 0.
    sel2 = sel.astype(np.float32)
    sel2[sel2 == 0] = -0.0
    assert (matmul(s, sel2.astype(ml_dtypes.float8_e5m2), is_transpose=True) == got).all()


@pytest.mark.parametrize(
    "bad,match",
    [
        (2.0, r"moving\[1, 0\] = 2.0 is neither 0 nor 1"),
        (np.nan, r"moving\[1, 0\] = nan is neither 0 nor 1"),
        (0.5, r"is neither 0 nor 1"),
    ],
)
def test_transpose_rejects_non_selection_entries(bad, match):
    s = np.ones((3, 2), dtype=ml_dtypes.bfloat16)
    x = np.zeros((3, 2), dtype=np.float32)
    x[1, 0] = bad
    with pytest.raises(ValueError, match=match) as exc:
        matmul(s, x.astype(ml_dtypes.bfloat16), is_transpose=True)
    assert exc.value.error == Error.SELECTION


def test_transpose_rejects_two_ones():
    s = np.ones((3, 2), dtype=np.float16)
    x = np.zeros((3, 2), dtype=np.float16)
    x[0, 1] = x[2, 1] = 1
    with pytest.raises(ValueError, match=r"moving column 1 has a 1 at k = \[0, 2\]"):
        matmul(s, x, is_transpose=True)


# -- validation ------------------------------------------------------------------------------

bf = ml_dtypes.bfloat16
f8 = ml_dtypes.float8_e4m3


def z(shape, dtype=bf):
    return np.zeros(shape, dtype=dtype)


ERROR_CASES = [
    # (stationary, moving, kwargs, message regex, error code)
    (z((129, 4)), z((129, 4)), {}, r"K=129 must be in 1\.\.128", Error.K_RANGE),
    (z((0, 4)), z((0, 4)), {}, r"K=0 must be in 1\.\.128", Error.K_RANGE),
    (z((4, 129)), z((4, 4)), {}, r"M=129 must be in 1\.\.128", Error.M_RANGE),
    (z((4, 4)), z((4, 513)), {}, r"N=513 must be in 1\.\.512", Error.N_RANGE),
    (z((4, 4)), z((4, 0)), {}, r"N=0 must be in 1\.\.512", Error.N_RANGE),
    (z((5, 4)), z((4, 4)), {}, r"same K", Error.NONE),
    (z((4, 4)), z((4, 4)), dict(rows=4, cols=2), r"M=4 must be in 1\.\.2", Error.M_RANGE),
    (
        z((4, 4), np.float32),
        z((4, 4)),
        {},
        r"fp32/tf32 operands cannot be mixed.*fp32 x bf16",
        Error.FORMAT,
    ),
    (
        z((4, 4), np.float32),
        z((4, 4), np.float32),
        dict(stationary_format="tf32"),
        r"formats must be equal.*tf32 x fp32",
        Error.FORMAT,
    ),
    (z((4, 4)), z((4, 4), np.float16), {}, r"formats must be equal.*bf16 x fp16", Error.FORMAT),
    (
        z((4, 2, 4)),
        z((4, 2, 4)),
        dict(perf_mode="double_row"),
        r"double_row stationary format bf16 is not allowed \(bf16 x bf16\)",
        Error.FORMAT,
    ),
    (
        z((4, 2, 4), ml_dtypes.float8_e3m4),
        z((4, 2, 4), f8),
        dict(perf_mode="double_row"),
        r"double_row stationary format fp8_e3m4 is not allowed",
        Error.FORMAT,
    ),
    (
        z((4, 2, 4), f8),
        z((4, 2, 4), f8),
        dict(perf_mode="double_row", tile_position=(0, 0), tile_size=(64, 128)),
        r"double_row cannot be combined with tiling or transpose",
        Error.MODE_COMBO,
    ),
    (
        z((4, 2, 4), f8),
        z((4, 2, 4), f8),
        dict(perf_mode="double_row", is_transpose=True),
        r"double_row cannot be combined with tiling or transpose",
        Error.MODE_COMBO,
    ),
    (
        z((4, 4), f8),
        z((4, 4), f8),
        dict(perf_mode="double_row"),
        r"operand shapes must be \[K, 2, M\] and \[K, 2, N\]",
        Error.NONE,
    ),
    (
        z((4, 2, 4), f8),
        z((4, 2, 4), f8),
        {},
        r"operand shapes must be \[K, M\] and \[K, N\]",
        Error.NONE,
    ),
    (z((4,)), z((4, 4)), {}, r"operand shapes must be", Error.NONE),
    (
        z((4, 4)),
        z((4, 4)),
        dict(tile_position=(32, 0), tile_size=(64, 128)),
        r"tile_position row 32 is not a multiple of the tile size 64",
        Error.TILE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(tile_position=(0, 16), tile_size=(128, 32)),
        r"tile_position column 16 is not a multiple of the tile size 32",
        Error.TILE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(tile_position=(-64, 0), tile_size=(64, 128)),
        r"tile_position row -64 is negative; a tile starts at row 0 or above",
        Error.TILE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(tile_position=(128, 0), tile_size=(64, 128)),
        r"a tile of 64 rows at tile_position row 128 reaches past the array's 128 rows \(the "
        r"last one starts at row 64\)",
        Error.TILE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(tile_position=(0, 128), tile_size=(128, 32)),
        r"a tile of 32 columns at tile_position column 128 reaches past the array's 128 columns",
        Error.TILE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(rows=8, cols=8, tile_position=(0, 0), tile_size=(32, 8)),
        r"row tile size 32 is larger than the array's 8 rows \(tile sizes are tile_unit=32 and 2 "
        r"x tile_unit; a smaller array needs a smaller tile_unit\)",
        Error.TILE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(rows=1000, cols=1000),
        r"rows=1000 must be an integer in 1\.\.255",
        Error.NONE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(cols=256),
        r"cols=256 must be an integer in 1\.\.255 \(the instruction's 8-bit K, M and tile fields\)",
        Error.NONE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(tile_unit=0),
        r"tile_unit=0 must be a positive integer",
        Error.NONE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(tile_position=(0, 0), tile_size=(64, 64)),
        r"tiles rows and columns at once",
        Error.TILE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(tile_position=(0, 0), tile_size=(48, 128)),
        r"row tile size 48 at column 0 is not allowed",
        Error.TILE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(tile_position=(0, 0), tile_size=(0, 128)),
        r"tile_size \(0, 128\) must hold positive integers",
        Error.TILE,
    ),
    (z((4, 4)), z((4, 4)), dict(tile_position=(0, 0)), r"must be given together", Error.TILE),
    (
        z((65, 4)),
        z((65, 4)),
        dict(tile_position=(64, 0), tile_size=(64, 128)),
        r"K=65 must be in 1\.\.64 \(rows of the tile\)",
        Error.K_RANGE,
    ),
    (
        z((4, 33)),
        z((4, 4)),
        dict(tile_position=(0, 32), tile_size=(128, 32)),
        r"M=33 must be in 1\.\.32 \(columns of the tile\)",
        Error.M_RANGE,
    ),
    (
        z((4, 4), np.float64),
        z((4, 4), np.float64),
        {},
        r"stationary dtype float64 is not a Tensor Engine operand dtype",
        Error.NONE,
    ),
    (
        z((4, 4)),
        z((4, 4), np.int32),
        {},
        r"moving dtype int32 is not a Tensor Engine operand",
        Error.NONE,
    ),
    (
        z((4, 4), ml_dtypes.float4_e2m1fn),
        z((4, 4)),
        {},
        r"stationary dtype float4_e2m1fn: fp4_e2m1fn is an MX element format; MX matmuls take",
        Error.NONE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(stationary_format="tf32"),
        r"stationary_format tf32 does not match the stationary dtype bfloat16",
        Error.NONE,
    ),
    (
        z((4, 4)),
        z((4, 4)),
        dict(perf_mode="quad"),
        r"perf_mode 'quad' is not supported",
        Error.NONE,
    ),
]


def test_the_array_limit_is_what_the_instruction_word_encodes():
    """On the largest array the rules take (MAX_ARRAY = 255, the 8-bit K, M and tile fields)
    the largest K, M and N and the last tile pass isa.check and encode; a larger array is a
    ValueError naming the limit, from check, the golden and the timing model alike."""
    assert MAX_ARRAY == 255
    for mode in (Mode.BF16, Mode.MX):
        ls = Instruction(Op.LS, mode, k=224 if mode == Mode.MX else 255, m=254)
        mm = Instruction(Op.MM, mode, k=ls.k, m=254, n=512)
        assert check(ls, 255, 255) is None and check(mm, 255, 255, ls) is None
        assert decode(encode(ls)) == ls and decode(encode(mm)) == mm
    tiled = Instruction(Op.LS, Mode.BF16, k=32, m=255, tile_row=192, tile_rows=32)
    assert check(tiled, 255, 255) is None and decode(encode(tiled)) == tiled
    for rows, cols in ((256, 8), (8, 1000), (0, 8)):
        with pytest.raises(ValueError, match=r"must be an integer in 1\.\.255"):
            check(Instruction(Op.LS, Mode.BF16, k=1, m=1), rows, cols)
        with pytest.raises(ValueError, match=r"must be an integer in 1\.\.255"):
            simulate([Instruction(Op.LS, Mode.BF16, k=1, m=1)], rows, cols)
    big = np.zeros((300, 4), ml_dtypes.bfloat16)
    with pytest.raises(InstructionError, match=r"rows=1000 must be an integer in 1\.\.255"):
        matmul(big, big, rows=1000, cols=1000)


@pytest.mark.parametrize("s,x,kwargs,match,code", ERROR_CASES)
def test_errors(s, x, kwargs, match, code):
    with pytest.raises(ValueError, match=match) as exc:
        matmul(s, x, **kwargs)
    assert isinstance(exc.value, InstructionError)
    assert exc.value.error == code


def test_mode_of():
    assert mode_of(np.float32, np.float32) == (Mode.FP32, 0, 0)
    assert mode_of("tf32", "tf32") == (Mode.TF32, 0, 0)
    assert mode_of(bf, "bfloat16") == (Mode.BF16, 0, 0)
    assert mode_of(np.dtype(np.float16), "fp16") == (Mode.FP16, 0, 0)
    assert mode_of(ml_dtypes.float8_e4m3fn, "fp8_e3m4") == (Mode.FP8, 1, 3)
    assert mode_of("fp8_e5m2", f8, "double_row") == (Mode.DOUBLE_ROW, 2, 0)
    for fs, fm in [(np.float32, bf), ("tf32", "fp8_e4m3"), (bf, np.float16)]:
        with pytest.raises(ValueError):
            mode_of(fs, fm)
    with pytest.raises(ValueError, match="not a Tensor Engine operand format"):
        mode_of("e8m0", bf)
    with pytest.raises(ValueError, match="not a Tensor Engine operand format"):
        mode_of(np.int8, bf)


def test_golden_and_check_agree_on_instructions():
    """The golden's instructions are those isa.check judges: mode_of + shapes build a valid pair."""
    mode, fs, fm = mode_of(f8, ml_dtypes.float8_e5m2, "double_row")
    ls = Instruction(Op.LS, mode, k=128, m=128, fmt_s=fs, fmt_m=fm)
    mm = Instruction(Op.MM, mode, k=128, m=128, n=512, fmt_s=fs, fmt_m=fm)
    assert check(ls, 128, 128) is None and check(mm, 128, 128, ls) is None


# -- timing ----------------------------------------------------------------------------------


def LS(m=128, mode=Mode.BF16, k=128, **kw_):
    return Instruction(Op.LS, mode, k=k, m=m, **kw_)


def MM(n, m=128, mode=Mode.BF16, k=128, **kw_):
    return Instruction(Op.MM, mode, k=k, m=m, n=n, **kw_)


def test_latency_constant():
    assert P_PREFIX == 2
    assert latency(128, 128) == 128 + 128 + 2 + 1
    assert latency(4, 8) == 15


@pytest.mark.parametrize(
    "mode,transpose,ii",
    [
        (Mode.BF16, False, 1),
        (Mode.FP32, False, 4),
        (Mode.FP32, True, 2),
        (Mode.TF32, False, 1),
        (Mode.DOUBLE_ROW, False, 1),
    ],
)
@pytest.mark.parametrize("n", [1, 32, 64, 65, 128, 512])
def test_back_to_back_mm_interval(mode, transpose, ii, n):
    prog = [LS(mode=mode, transpose=transpose)] + [MM(n, mode=mode, transpose=transpose)] * 4
    sched = simulate_one_chain(prog)
    issues = [r.issue for r in sched.records[1:]]
    assert all(r.accepted for r in sched.records)
    assert np.diff(issues).tolist() == [max(n, 64) * ii] * 3
    for r in sched.records[1:]:
        assert list(r.beats) == [r.issue + j * ii for j in range(n)]
        assert list(r.outputs) == [b + latency(128, 128) for b in r.beats]


@pytest.mark.parametrize("mode", [Mode.BF16, Mode.FP32])
@pytest.mark.parametrize("m,n", [(128, 128), (128, 127), (64, 32), (65, 32), (128, 512), (32, 128)])
def test_ls_hidden_behind_mm(mode, m, n):
    """An LS right after an MM is hidden iff M <= max(N, 64): the next MM follows with no gap."""
    ii = 4 if mode == Mode.FP32 else 1
    prog = [LS(m, mode), MM(n, m, mode), LS(m, mode), MM(n, m, mode)]
    r = simulate_one_chain(prog).records
    assert r[2].issue == max(r[1].issue + 1, r[0].issue + m * ii)  # behind the MM, loader free
    gap = r[3].issue - r[1].issue
    if m <= max(n, 64):
        assert gap == max(n, 64) * ii
    else:
        assert gap == r[2].beats[-1] - r[1].issue > max(n, 64) * ii
    assert r[3].issue == max(r[2].beats[-1], r[1].issue + max(n, 64) * ii)


def test_fill_and_drain_equal_latency():
    sched = simulate_one_chain([LS(128), MM(512)])
    ls, mm = sched.records
    assert ls.issue == 0 and tuple(ls.beats) == tuple(range(128))
    assert mm.issue == 127  # first moving beat with the last stationary beat
    assert mm.outputs[0] - mm.beats[0] == latency(128, 128)
    assert mm.outputs[-1] - mm.beats[-1] == latency(128, 128)
    assert sched.total_cycles == mm.outputs[-1] + 1 == 127 + 511 + latency(128, 128) + 1
    assert list(np.diff(mm.outputs)) == [1] * 511


def test_issue_rules():
    r = simulate_one_chain(
        [LS(8, k=8), LS(8, k=8), LS(8, k=8), MM(100, 8, k=8), LS(8, k=8), LS(8, k=8)],
        rows=16,
        cols=16,
    ).records
    assert [x.issue for x in r[:3]] == [0, 8, 16]  # loader: one LS every M * II
    assert [x.bank for x in r] == [0, 1, 0, 0, 1, 0]
    assert r[3].issue == 23  # MM with LS 2's last beat (cycle 23)
    assert r[4].issue == 24  # bank 1 is free: right behind the MM
    assert r[5].issue == r[3].beats[-1] + 1 == 123  # bank 0: after the MM's last beat
    # fp32: one beat every 4 cycles, loader busy M * 4.
    r = simulate_one_chain([LS(3, Mode.FP32), MM(2, 3, Mode.FP32), LS(3, Mode.FP32)]).records
    assert tuple(r[0].beats) == (0, 4, 8) and r[1].issue == 8 and tuple(r[1].beats) == (8, 12)
    assert r[2].issue == 12 and tuple(r[2].beats) == (12, 16, 20)
    # An LS of one column: the MM still issues the cycle after it (one issue per cycle).
    r = simulate_one_chain([LS(1), MM(1, 1)]).records
    assert (r[0].issue, r[1].issue) == (0, 1)


def test_rejected_instructions():
    prog = [
        MM(8),
        LS(8),
        MM(600, 8),
        MM(8, 16),
        LS(200),
        MM(8, 8),
        LS(8),
        MM(64, 8),
        Instruction(Op.MM, 7, k=8, m=8, n=8),
    ]
    sched = simulate_one_chain(prog)
    r = sched.records
    assert [x.error for x in r] == [
        Error.NO_STATIONARY,
        Error.NONE,
        Error.N_RANGE,
        Error.MODE_MISMATCH,
        Error.M_RANGE,
        Error.NONE,
        Error.NONE,
        Error.NONE,
        Error.MODE,
    ]
    assert (
        r[0].issue == 0
        and r[0].error_cycle == 1
        and tuple(r[0].beats) == ()
        and tuple(r[0].outputs) == ()
    )
    assert r[1].issue == 1 and r[1].bank == 0
    # Rejected instructions do not wait for resources: the loader is still busy until cycle 9.
    assert [x.issue for x in r[2:5]] == [2, 3, 4]
    assert r[5].issue == 8 and r[5].bank == 0  # the rejected LS did not toggle
    assert r[6].bank == 1 and r[7].bank == 1
    assert r[8].issue == r[7].issue + 1 and "unknown mode 7" in r[8].message
    errs = [e for e in sched.events() if e[1] == "error"]
    assert [(e[0], e[2]) for e in errs] == [
        (x.issue + timing.ERROR_DELAY, x.index) for x in r if not x.accepted
    ]


def test_instruction_words_and_events():
    prog = [LS(4, k=4), MM(2, 4, k=4)]
    a = simulate_one_chain(prog, rows=8, cols=8)
    b = simulate_one_chain([encode(i) for i in prog], rows=8, cols=8)
    assert [x.issue for x in a.records] == [x.issue for x in b.records]
    ev = a.events()
    assert ev[0] == (0, "issue", 0, 0) and ev[1] == (0, "stationary", 0, 0)
    assert (3, "moving", 1, 0) in ev and (3 + latency(8, 8), "output", 1, 0) in ev
    assert ev == sorted(ev, key=lambda e: (e[0], e[2], e[1], e[3]))
    assert simulate_one_chain([]).total_cycles == 0


@pytest.mark.parametrize(
    "mode,tflops,util",
    [
        (Mode.BF16, 78.6, 1.0),
        (Mode.DOUBLE_ROW, 157.3, 2.0),
        (Mode.FP32, 19.7, 0.25),
        (Mode.FP8, 78.6, 1.0),
    ],
)
def test_steady_state_throughput(mode, tflops, util):
    prog = []
    for _ in range(6):  # a fresh stationary for every N=512 MM
        prog += [LS(mode=mode), MM(512, mode=mode)]
    sched = simulate_one_chain(prog)
    start, stop = sched.mm_window()
    mms = [r for r in sched.records if r.instruction.op == Op.MM]
    ii = 4 if mode == Mode.FP32 else 1
    assert np.diff([r.issue for r in mms]).tolist() == [512 * ii] * 5  # no bubble
    assert sched.utilization(start, stop) == util
    assert round(sched.tflops(start, stop), 1) == tflops
    assert round(timing.peak_tflops(128, 128, mode), 1) == tflops
    # Whole program: fill + first load + drain make it a little less than steady state.
    assert sched.utilization() < util
    assert sched.macs == 6 * 512 * 128 * 128 * (2 if mode == Mode.DOUBLE_ROW else 1)


def test_transpose_counts_no_macs():
    sched = simulate_one_chain([LS(transpose=True), MM(512, transpose=True)])
    assert sched.macs == 0 and sched.utilization() == 0.0
    with pytest.raises(ValueError, match="empty window"):
        sched.utilization(5, 5)


# -- timing against an independent cycle-stepped model ----------------------------------------


def stepped(program, rows, cols, rules=None):
    """The timing conventions as a cycle-by-cycle state machine (as the RTL runs), with
    ``rules``' LoadStationary chains and MM floor (one chain and 64 without).

    Returns ``{index: (issue, error_cycle, beats, outputs)}``.
    """
    chains = rules.ls_chains if rules else 1

    def ls_len(ins):
        # the columns of each chain of chain_width(cols) columns, counted one by one
        w = timing.chain_width(cols, 32, chains)
        per = {}
        whole = ins.whole(rows, cols)
        for c in range(whole.tile_col, whole.tile_col + whole.m):
            per[c // w] = per.get(c // w, 0) + 1
        return max(per.values())

    def floor(ins):
        return min(MIN_MM_CYCLES, ins.m) if rules and rules.mm_floor == "stationary" else 64

    lat = latency(rows, cols)
    out = {}
    head = 0
    loader = None  # dict(index, left, wait, ii, bank)
    seq = None  # dict(index, left, wait, ii, slots, bank)
    last_ls = None  # dict(ins, index, bank)
    ls_left = {}  # LS index -> beats still to come
    bank_mm_left = [0, 0]
    next_bank = 0
    cycle = 0
    while head < len(program) or loader or seq:
        if head < len(program):
            ins = program[head]
            bad = check(ins, rows, cols, last_ls["ins"] if last_ls else None)
            go = False
            if bad is not None:
                out[head] = (cycle, cycle + 1, [], [])
                head += 1
            elif ins.op == Op.LS:
                go = loader is None and bank_mm_left[next_bank] == 0
                if go:
                    loader = dict(index=head, left=ls_len(ins), wait=0, ii=ins.beat_interval)
                    ls_left[head] = ls_len(ins)
                    last_ls = dict(ins=ins, index=head, bank=next_bank)
                    out[head] = (cycle, None, [], [])
                    next_bank ^= 1
                    head += 1
            else:
                left = ls_left[last_ls["index"]]
                ls_beats_now = (
                    loader is not None
                    and loader["index"] == last_ls["index"]
                    and loader["wait"] == 0
                )
                ls_ready = left == 0 or (left == 1 and ls_beats_now)
                go = seq is None and ls_ready
                if go:
                    seq = dict(
                        index=head,
                        left=ins.n,
                        wait=0,
                        ii=ins.beat_interval,
                        slots=max(ins.n, floor(ins)) * ins.beat_interval,
                        bank=last_ls["bank"],
                    )
                    bank_mm_left[seq["bank"]] = ins.n
                    out[head] = (cycle, None, [], [])
                    head += 1
        # Beats of this cycle.
        if loader is not None:
            if loader["wait"] == 0 and loader["left"]:
                out[loader["index"]][2].append(cycle)
                loader["left"] -= 1
                ls_left[loader["index"]] -= 1
                loader["wait"] = loader["ii"]
            loader["wait"] -= 1
            if loader["left"] == 0 and loader["wait"] == 0:
                loader = None
        if seq is not None:
            if seq["wait"] == 0 and seq["left"]:
                out[seq["index"]][2].append(cycle)
                out[seq["index"]][3].append(cycle + lat)
                seq["left"] -= 1
                bank_mm_left[seq["bank"]] -= 1
                seq["wait"] = seq["ii"]
            seq["wait"] -= 1
            seq["slots"] -= 1
            if seq["slots"] == 0:
                seq = None
        cycle += 1
    return out


def random_program(rng, length):
    prog = []
    for _ in range(length):
        mode = [Mode.BF16, Mode.FP32, Mode.DOUBLE_ROW, Mode.FP8][rng.integers(0, 4)]
        transpose = mode == Mode.FP32 and rng.random() < 0.3
        m = int(rng.choice([1, 2, 5, 16, 40, 64]))
        k = int(rng.integers(1, 33))
        tile = {}
        if mode != Mode.DOUBLE_ROW and rng.random() < 0.3:  # a column tile: the second chain
            tile = dict(tile_col=32 * int(rng.integers(0, 2)), tile_cols=32)
            m = min(m, 32)
        prog.append(Instruction(Op.LS, mode, k=k, m=m, transpose=transpose, **tile))
        for _ in range(int(rng.integers(0, 3))):
            n = int(rng.choice([1, 3, 63, 64, 65, 100]))
            bad_m = m + 1 if rng.random() < 0.1 else m  # sometimes a MODE_MISMATCH
            prog.append(Instruction(Op.MM, mode, k=k, m=bad_m, n=n, transpose=transpose, **tile))
        if rng.random() < 0.1:
            prog.append(Instruction(Op.LS, mode, k=40, m=m))  # K out of range: rejected
    return prog


@pytest.mark.parametrize("rules", ["one_chain", "hdl"])
@pytest.mark.parametrize("seed", range(12))
def test_simulate_matches_cycle_stepped_model(seed, rules):
    """:func:`timing.simulate` against the cycle-stepped state machine, with one LS chain and
    a 64-slot floor, and with the RTL's 4 chains and ``min(64, M)`` floor."""
    rng = np.random.default_rng(seed)
    prog = random_program(rng, 12)
    r = timing.ONE_CHAIN if rules == "one_chain" else HDL_RULES
    sched = simulate(prog, 32, 64, rules=r)
    ref = stepped(prog, 32, 64, r)
    assert len(sched.records) == len(prog) == len(ref)
    for r in sched.records:
        issue, err, beats, outs = ref[r.index]
        assert (r.issue, r.error_cycle, list(r.beats), list(r.outputs)) == (
            issue,
            err,
            beats,
            outs,
        ), (seed, r.index, r.instruction)


# -- the documented timing (timing.DOCUMENTED) --------------------------------------------------


def _pairs(m, n, mode=Mode.BF16, k=128, repeat=12, rules=timing.DOCUMENTED, **tile):
    prog = []
    for _ in range(repeat):
        prog += [LS(m, mode, k, **tile), MM(n, m, mode, k, **tile)]
    sched = simulate(prog, rules=rules)
    assert all(r.accepted for r in sched.records)
    return sched, [r.issue for r in sched.records if r.instruction.op == Op.MM]


@pytest.mark.parametrize(
    "mode,factor",
    [(Mode.BF16, 1), (Mode.FP16, 1), (Mode.TF32, 1), (Mode.FP8, 1), (Mode.FP32, 4)],
)
@pytest.mark.parametrize("m", [2, 16, 32, 33, 48, 64, 65, 96, 128])
@pytest.mark.parametrize("n", [2, 16, 32, 64, 65, 128, 512])
def test_documented_back_to_back_cost(mode, factor, m, n):
    """A long run of same-shaped nc_matmuls (each its LS and its MM) costs ``max(min(64, M),
    N)`` cycles per matmul, 4 x that in fp32, every matmul alike."""
    _, issues = _pairs(m, n, mode)
    assert set(np.diff(issues[2:]).tolist()) == {factor * max(min(64, m), n)}


def test_documented_cost_examples_and_the_issue_rate():
    """The documented examples: (M 128, N 64) costs 64 (128 with one LS chain and a fixed
    64-slot floor), (M 32, N 16) costs 32 (64), under the RTL's rules too; one instruction per
    cycle makes (M 1, N 1) cost 2."""
    for m, n, want, plain in ((128, 64, 64, 128), (32, 16, 32, 64)):
        assert np.diff(_pairs(m, n)[1])[-1] == want
        assert np.diff(_pairs(m, n, rules=HDL_RULES)[1])[-1] == want
        assert np.diff(_pairs(m, n, rules=timing.ONE_CHAIN)[1])[-1] == plain
    assert np.diff(_pairs(1, 1)[1])[-1] == 2


def test_fast_load_stationary():
    """Four chains, one per 32-column group, load at once: up to 4x faster than one chain."""
    whole = LS(128).whole(128, 128)
    assert timing.ls_beats(whole, 128, 4) == 32 and timing.ls_beats(whole, 128, 1) == 128
    assert timing.ls_beats(LS(48).whole(128, 128), 128, 4) == 32
    assert timing.ls_beats(LS(20).whole(128, 128), 128, 4) == 20
    tile = LS(64, tile_col=64, tile_cols=64).whole(128, 128)
    assert timing.ls_beats(tile, 128, 4) == 32 and timing.ls_beats(tile, 128, 1) == 64
    r = simulate([LS(128), MM(512)]).records
    assert tuple(r[0].beats) == tuple(range(32)) and r[1].issue == 31
    # fp32: a beat every 4 cycles
    r = simulate([LS(128, Mode.FP32), MM(4, mode=Mode.FP32)]).records
    assert tuple(r[0].beats) == tuple(range(0, 128, 4)) and r[1].issue == 124


def _tiled(tiles, k, m, n=512, repeat=8, rules=timing.DOCUMENTED):
    prog = []
    for _ in range(repeat):
        for t in tiles:
            prog += [LS(m, k=k, **t), MM(n, m, k=k, **t)]
    sched = simulate(prog, rules=rules)
    assert all(r.accepted for r in sched.records)
    return sched.utilization(*sched.mm_window())


@pytest.mark.parametrize(
    "tiles,k,m",
    [
        ([dict(tile_row=64 * i, tile_rows=64) for i in range(2)], 64, 128),
        ([dict(tile_row=32 * i, tile_rows=32) for i in range(4)], 32, 128),
        ([dict(tile_col=64 * i, tile_cols=64) for i in range(2)], 128, 64),
        ([dict(tile_col=32 * i, tile_cols=32) for i in range(4)], 128, 32),
    ],
)
def test_parallel_tiles(tiles, k, m):
    """2 and 4 row tiles and 2 and 4 column tiles run at once: utilization close to one
    full-array matmul's (1.0); tiles one after another give 1 / tiles."""
    assert _tiled([{}], 128, 128) == 1.0
    assert _tiled(tiles, k, m) >= 0.97
    assert _tiled(tiles, k, m, rules=HDL_RULES) == pytest.approx(1 / len(tiles), rel=0.02)


def test_row_tile_results_leave_below_the_tile():
    """A row tile's outputs leave at its own tap: ``tile_row + tile_rows + cols + P_PREFIX +
    1`` after the beat."""
    r = simulate([LS(128, k=32, tile_rows=32), MM(4, k=32, tile_rows=32)]).records[1]
    assert r.outputs[0] - r.beats[0] == 32 + 128 + P_PREFIX + 1
    r = simulate([LS(128, k=32, tile_row=96, tile_rows=32), MM(4, k=32, tile_row=96, tile_rows=32)])
    assert r.records[1].outputs[0] - r.records[1].beats[0] == latency(128, 128)


def test_background_transpose():
    """Transposes run on a second plane beside a matmul or another transpose: a long chain of
    transposes takes close to half the time; a matmul never goes to the second plane."""

    def chain(rules, n=512, mix=False):
        prog = []
        for _ in range(16):
            prog += [LS(transpose=True), MM(n, transpose=True)]
            if mix:
                prog += [LS(), MM(512)]
        sched = simulate(prog, rules=rules)
        assert all(r.accepted for r in sched.records)
        return sched

    alone = timing.Rules(background_transpose=False)
    both, one = chain(timing.DOCUMENTED), chain(alone)
    assert one.total_cycles / both.total_cycles > 1.85
    assert {r.plane for r in both.records} == {0, 1}
    mixed = chain(timing.DOCUMENTED, 128, True)
    assert all(r.plane == 0 for r in mixed.records if not r.instruction.transpose)
    assert mixed.total_cycles < chain(alone, 128, True).total_cycles


def test_background_plane_rule_reads_the_sequence_only():
    """The plane of each instruction follows from the sequence (``timing.ls_plane``): a
    transpose LS on plane 1 unless the latest LS is there, a matmul LS on plane 0, an MM on
    its LS's plane; the same planes whatever the shapes (so whatever the timing), on the serial
    RTL rules and the documented ones."""
    T = dict(transpose=True)
    kinds = [("M", {}), ("T", T), ("T", T), ("M", {}), ("T", T), ("T", T), ("T", T), ("M", {})]
    want = [0, 1, 0, 0, 1, 0, 1, 0]
    for rules in (timing.HDL_BACKGROUND, timing.DOCUMENTED):
        for n, m in ((1, 128), (512, 16), (64, 64)):
            prog = []
            for _, kw in kinds:
                prog += [LS(m, **kw), MM(n, m, **kw)]
            recs = simulate(prog, rules=rules).records
            assert all(r.accepted for r in recs)
            assert [r.plane for r in recs[::2]] == want
            assert [r.plane for r in recs[1::2]] == want
    assert [timing.ls_plane(LS(**T), p) for p in (None, 0, 1)] == [1, 1, 0]
    assert timing.ls_plane(LS(), None) == 0
    # an MM after a rejected LS keeps the plane of the LS it uses
    bad = LS(0, **T)  # M_RANGE
    recs = simulate([LS(**T), bad, MM(8, **T)], rules=timing.HDL_BACKGROUND).records
    assert [r.plane for r in recs if r.accepted] == [1, 1]


def test_background_plane_on_the_serial_rules():
    """``HDL_BACKGROUND`` (the RTL's background plane, tiles one after another): a chain of
    transposes streams close to twice as fast as on one plane; transposes between matmuls run
    beside them (cycles from the first MM to the end of the last one's sequencer)."""

    def run(rules, prog):
        sched = simulate(prog, rules=rules)
        assert all(r.accepted for r in sched.records)
        start, stop = sched.mm_window()
        return stop - start

    chain = [x for _ in range(16) for x in (LS(transpose=True), MM(128, transpose=True))]
    assert run(timing.HDL_SERIAL, chain) / run(timing.HDL_BACKGROUND, chain) > 1.85
    mixed = [
        x for _ in range(8) for x in (LS(), MM(256), LS(transpose=True), MM(128, transpose=True))
    ]
    assert run(timing.HDL_SERIAL, mixed) / run(timing.HDL_BACKGROUND, mixed) > 1.4


def test_illegal_tilings_are_errors_and_the_engine_goes_on():
    """double_row or MX with column tiles, and a tile overlapping a different tile with beats
    to come, are rejected with their codes; the next instructions run."""
    dr = Instruction(Op.LS, Mode.DOUBLE_ROW, k=64, m=64, tile_cols=64)
    mx = Instruction(Op.LS, Mode.MX, k=64, m=64, tile_cols=64)
    busy = LS(64, tile_col=64, tile_cols=64)
    prog = [LS(128), MM(512), dr, mx, busy, LS(128), MM(8)]
    r = simulate(prog).records
    assert [x.error for x in r] == [
        Error.NONE,
        Error.NONE,
        Error.MODE_COMBO,
        Error.TILE,
        Error.TILE_BUSY,
        Error.NONE,
        Error.NONE,
    ]
    assert "overlaps a different tile" in r[4].message
    # once the whole-array MM's beats are done, the column tile loads
    r = simulate([LS(128), MM(8), MM(8)] + [LS(64, tile_col=64, tile_cols=64)] * 12).records
    first = next(x for x in r[3:] if x.accepted)
    assert all(x.error == Error.TILE_BUSY for x in r[3 : first.index])
    assert first.issue == r[2].beats[-1] + 1


def _random_tiled(rng, length):
    kinds = [
        {},
        *[dict(tile_row=64 * i, tile_rows=64) for i in range(2)],
        *[dict(tile_row=32 * i, tile_rows=32) for i in range(4)],
        *[dict(tile_col=64 * i, tile_cols=64) for i in range(2)],
        *[dict(tile_col=32 * i, tile_cols=32) for i in range(4)],
    ]
    prog = []
    for _ in range(length):
        t = kinds[rng.integers(0, len(kinds))]
        rows, cols = t.get("tile_rows", 128), t.get("tile_cols", 128)
        k, m = int(rng.integers(1, rows + 1)), int(rng.integers(1, cols + 1))
        transpose = bool(rng.random() < 0.3)
        prog.append(LS(m, k=k, transpose=transpose, **t))
        for _ in range(int(rng.integers(1, 3))):
            prog.append(MM(int(rng.choice([1, 16, 64, 100])), m, k=k, transpose=transpose, **t))
    return prog


@pytest.mark.parametrize("seed", range(8))
def test_documented_schedule_invariants(seed):
    """Random programs over every tiling and both planes: in a plane, instructions on
    overlapping different tiles never have beats in flight together (the later one is
    rejected instead); on one tile an MM waits for its sequencer and its LS's last beat; an
    LS never loads a bank an earlier MM still reads."""
    prog = _random_tiled(np.random.default_rng(seed), 30)
    recs = simulate(prog).records
    done = [r for r in recs if r.accepted]
    assert len(done) > len(recs) // 4

    def cells(ins):
        w = ins.whole(128, 128)
        return {
            (r, c)
            for r in range(w.tile_row // 32, (w.tile_row + w.tile_rows) // 32)
            for c in range(w.tile_col // 32, (w.tile_col + w.tile_cols) // 32)
        }

    def region(ins):
        w = ins.whole(128, 128)
        return (w.tile_row, w.tile_rows, w.tile_col, w.tile_cols)

    for i, x in enumerate(done):
        for y in done[i + 1 :]:
            if x.plane != y.plane or not cells(x.instruction) & cells(y.instruction):
                continue
            if region(x.instruction) != region(y.instruction):
                assert y.issue > x.beats[-1], (x.index, y.index)
            elif x.instruction.op == y.instruction.op == Op.MM:
                assert y.issue >= x.busy_until
    for r in recs:
        if r.error == Error.TILE_BUSY:
            assert any(
                x.index < r.index
                and cells(x.instruction) & cells(r.instruction)
                and region(x.instruction) != region(r.instruction)
                and x.beats[-1] >= r.issue
                for x in done
            )
    # every MM's first beat comes with or after its LoadStationary's last
    last_ls = {}
    for r in done:
        key = (r.plane, region(r.instruction))
        if r.instruction.op == Op.LS:
            last_ls[key] = r
        else:
            assert r.beats[0] >= last_ls[key].beats[-1]


def test_bench_golden_section_checks_what_it_times(capsys):
    """``ncrtl bench --only golden`` times each road and refuses to print a figure for a golden
    that differs from ``fp32_dot_add`` (a small shape here)."""
    from ncrtl.testbench.bench import _bench_golden

    assert _bench_golden(k=32, m=4, n=16, runs=1)
    out = capsys.readouterr().out
    modes = ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "double_row", "mx")
    assert all(f"{mode:>12s}" in out for mode in modes)


@pytest.mark.parametrize("seed", range(4))
def test_sequencer_folded_state_gives_the_per_group_schedule(seed):
    """The Sequencer keeps a plane's state once while all its PE groups hold the same
    (``fold``): on random programs of whole-array and tile instructions of every mode, valid or
    not, issued with random earliest cycles, every record equals the per-group model's."""
    import random

    from ncrtl.model.modes import operations
    from ncrtl.model.tensor_engine import timing as tm

    rng = random.Random(seed)
    ops = [o for o in operations() if "mx" not in o]
    all_rules = (tm.DOCUMENTED, tm.HDL_SERIAL, tm.HDL_PARALLEL, tm.HDL_BACKGROUND, tm.ONE_CHAIN)
    for _ in range(60):
        size, unit = rng.choice([(128, 32), (64, 32), (8, 2)])
        rules = rng.choice(all_rules)
        pairs = []
        for _ in range(rng.randrange(1, 10)):
            tile = rng.choice(
                [None, (size // 2, size), (size // 4, size), (size, size // 2), (size, size // 4)]
            )
            tr, tc = tile or (size, size)
            try:
                prog = tm.matmul_program(
                    rng.randint(1, tr),
                    rng.randint(1, tc),
                    rng.randint(1, 512),
                    rng.choice(ops),
                    repeat=rng.randint(1, 3),
                    tile=tile,
                    tiles=rng.randint(1, (size // tr) * (size // tc)),
                    rows=size,
                    cols=size,
                )
            except ValueError:
                continue
            pairs += [prog[i : i + 2] for i in range(0, len(prog), 2)]
        rng.shuffle(pairs)
        prog = [i for p in pairs for i in p][rng.random() < 0.2 :]
        a = tm.Sequencer(size, size, tile_unit=unit, rules=rules)
        b = tm.Sequencer(size, size, tile_unit=unit, rules=rules, fold=False)
        for ins in prog:
            e = rng.choice([0, 0, rng.randrange(2000)])
            assert a.issue(ins, e) == b.issue(ins, e)


# -- timing of the sparse matmul (nc_matmul_sparse) ---------------------------------------------


@pytest.mark.parametrize("operation", ["bf16", "fp8", "tf32"])
@pytest.mark.parametrize("ratio", [2, 3, 4])
@pytest.mark.parametrize("n", [64, 512])
def test_sparse_matmul_takes_the_cycles_of_its_compressed_rows(operation, ratio, n):
    """A sparse LS + MM of K compressed rows is timed as the dense pair of K rows, event for
    event; the dense program of the same logical contraction (K R rows: R matmuls of K = 128
    per output, each its own LS and MM) takes R times the cycles after the fill.  Exactly:
    with ``f`` the first output's cycle (the same in both, 290 at 128 x 128: the 4-chain LS,
    then the latency), ``dense.total - f == R * (sparse.total - f)`` for N >= min(64, M), and
    the steady state is N cycles per sparse matmul against R N per dense output."""
    repeat = 12
    sparse = simulate(timing.matmul_program(128, 128, n, operation, repeat=repeat, sparse=ratio))
    same_k = simulate(timing.matmul_program(128, 128, n, operation, repeat=repeat))
    assert all(r.accepted for r in sparse.records)
    assert [(r.issue, r.beats, r.outputs, r.bank) for r in sparse.records] == [
        (r.issue, r.beats, r.outputs, r.bank) for r in same_k.records
    ]
    assert timing.steady_cycles(sparse) == timing.steady_cycles(same_k) == n
    logical = simulate(timing.matmul_program(128, 128, n, operation, repeat=repeat * ratio))
    f = sparse.records[1].outputs[0]
    assert f == logical.records[1].outputs[0] == 31 + latency(128, 128)
    assert logical.total_cycles - f == ratio * (sparse.total_cycles - f) == ratio * repeat * n
    assert timing.steady_cycles(logical) * ratio == ratio * n


@pytest.mark.parametrize("ratio,tflops", [(2, 157.3), (3, 235.9), (4, 314.6)])
def test_sparse_matmul_utilization_and_tflops_are_dense_equivalent(ratio, tflops):
    """A sparse beat does the work of R dense beats: utilization reaches R in steady state,
    TFLOPS are dense-equivalent and reach the sparse peak (R x 78.6 at 128 x 128, seed 000's
    316 at 4:16)."""
    sched = simulate(timing.matmul_program(128, 128, 512, "bf16", repeat=6, sparse=ratio))
    start, stop = sched.mm_window()
    assert sched.utilization(start, stop) == ratio
    assert sched.utilization() < ratio
    assert sched.macs == 6 * 512 * 128 * 128 * ratio
    assert round(sched.tflops(start, stop), 1) == tflops
    assert round(timing.peak_tflops(128, 128, Mode.BF16, sparse=ratio), 1) == tflops
    assert timing.peak_macs_per_cycle(128, 128, "fp8", ratio) == ratio * 128 * 128
    assert timing.peak_tflops(128, 128, Mode.BF16, sparse=0) == timing.peak_tflops(
        128, 128, Mode.BF16
    )
    mm, dense = MM(512, sparse=ratio), MM(512)
    assert timing.macs_per_beat(mm) == ratio * timing.macs_per_beat(dense) == ratio * 128 * 128


def test_sparse_mm_after_a_dense_or_another_ratio_ls_is_a_mode_mismatch():
    """An MM's ratio must be its LS's: a sparse MM on a dense stationary, or on one of another
    ratio, is rejected (MODE_MISMATCH) without waiting, and the engine goes on."""
    prog = [
        LS(),
        MM(512, sparse=4),
        LS(sparse=2),
        MM(512, sparse=4),
        MM(512),
        LS(sparse=4),
        MM(512, sparse=4),
    ]
    r = simulate(prog).records
    assert [x.error for x in r] == [
        Error.NONE,
        Error.MODE_MISMATCH,
        Error.NONE,
        Error.MODE_MISMATCH,
        Error.MODE_MISMATCH,
        Error.NONE,
        Error.NONE,
    ]
    assert r[1].message == check(prog[1], 128, 128, prog[0])[1]
    assert r[1].issue == 1 and r[1].error_cycle == 1 + timing.ERROR_DELAY and not r[1].beats
    assert r[6].issue == r[5].beats[-1] and len(r[6].beats) == 512


@pytest.mark.parametrize("mode", [Mode.FP32, Mode.DOUBLE_ROW, Mode.MX])
def test_sparse_on_a_mode_without_sparse_is_rejected(mode):
    """fp32 (and double_row, MX) has no sparse: the engine rejects the pair with SPARSE, and
    matmul_program and the sparse peak refuse it with isa.check's rule."""
    k = 128
    ls, mm = LS(mode=mode, k=k, sparse=4), MM(512, mode=mode, k=k, sparse=4)
    r = simulate([ls, mm]).records
    assert [x.error for x in r] == [Error.SPARSE, Error.SPARSE]
    rule = check(ls, 128, 128)
    assert rule[0] == Error.SPARSE and r[0].message == rule[1]
    name = mode_of_code(mode)
    with pytest.raises(ValueError) as exc:
        timing.matmul_program(k, 128, 512, name, sparse=4)
    assert str(exc.value) == f"SPARSE: {rule[1]}"
    with pytest.raises(ValueError) as exc:
        timing.peak_tflops(128, 128, mode, sparse=4)
    assert str(exc.value) == f"SPARSE: {rule[1]}"


def test_sparse_program_refuses_tiles_transposes_and_other_ratios():
    """matmul_program with sparse: a tile (one or several), a transpose or a ratio other than
    2, 3, 4 is refused with isa.check's rule (MODE_COMBO, SPARSE), stated once there."""
    cases = [
        (dict(tile=(32, 128)), LS(k=32, sparse=4, tile_rows=32), Error.MODE_COMBO),
        (dict(tile=(32, 128), tiles=4), LS(k=32, sparse=4, tile_rows=32), Error.MODE_COMBO),
        (dict(operation="transpose_bf16"), LS(sparse=4, transpose=True), Error.MODE_COMBO),
        (dict(), LS(sparse=5), Error.SPARSE),
    ]
    for kwargs, ins, code in cases:
        ratio = ins.sparse
        rule = check(ins, 128, 128)
        assert rule[0] == code
        with pytest.raises(ValueError) as exc:
            timing.matmul_program(ins.k, 128, 512, sparse=ratio, **kwargs)
        assert str(exc.value) == f"{code.name}: {rule[1]}"
    # K is the engine's rule: a K that is not a multiple of 4 is a rejected instruction
    r = simulate(timing.matmul_program(6, 128, 512, sparse=4)).records
    assert [x.error for x in r] == [Error.K_RANGE, Error.K_RANGE]


def mode_of_code(mode):
    """The operation name of an instruction mode (``Mode.FP32`` -> ``"fp32"``)."""
    return Mode(mode).name.lower()


def test_narrowest_pe_build_is_the_union_of_the_families():
    """The PE a simulation builds: the families of the modes it runs (a family shared by its
    modes, so that bf16 and fp16 runs share a build), all when that is every mode, the bf16
    family without a matmul; every build serves every mode asked for, and no smaller union
    of families does; the registry applies it unless pe_modes is named."""
    import itertools

    from ncrtl import blocks
    from ncrtl.model.modes import ENGINE_MODES, FAMILIES, narrowest_pe_modes, pe_modes

    assert narrowest_pe_modes(["fp16"]) == (
        "bf16",
        "the narrowest build serving fp16 (the family: bf16, fp16)",
    )
    assert narrowest_pe_modes(["mx", "double_row"])[0] == "fp8+mx"
    assert narrowest_pe_modes([m.name for m in ENGINE_MODES])[0] == "all"
    assert narrowest_pe_modes([]) == ("bf16", "the program has no matmul: the smallest build")
    families = [f for f in FAMILIES if f != "all"]
    for n in (1, 2, 3):
        for used in itertools.combinations([m.name for m in ENGINE_MODES], n):
            spec, _ = narrowest_pe_modes(used)
            built = {m.name for m in pe_modes(spec)}
            assert set(used) <= built
            smaller = [
                c
                for k in range(1, len(families) + 1)
                for c in itertools.combinations(families, k)
                if set(used) <= {m.name for m in pe_modes(list(c))}
                and len(pe_modes(list(c))) < len(built)
            ]
            assert smaller == [], (used, spec, smaller)
    block = blocks.get("pe_array")
    assert block.resolve_run({"mode": "transpose_fp32"})[0]["pe_modes"] == "fp32"
    assert block.resolve_run({"mode": "sparse", "sparse": "1"})[0]["pe_modes"] == "bf16+fp8+fp32"
    assert block.resolve_run({"mode": "fp8", "pe_modes": "all"}) == (
        block.resolve({"mode": "fp8", "pe_modes": "all"}),
        None,
    )
    assert blocks.get("neuroncore").resolve_run({})[0]["pe_modes"] == "bf16+fp8"
    assert blocks.get("core").resolve_run({"mode": "mx"})[0]["pe_modes"] == "mx"
