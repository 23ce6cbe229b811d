"""The QuantizeMX golden (``ncrtl.model.vector_engine``) against an exact rational reference, against
ml_dtypes casts, and against the MX matmul that consumes its layout; its refusals of bad input.

The reference below is written from the contract alone (docs/vector_engine.md): its format
constants are typed in, not read from the model, and it computes with ``Fraction`` and ``int``.
"""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from ncrtl.model.fp import decode, from_bits, to_bits
from ncrtl.model.tensor_engine.matmul import matmul_mx, mx_scale_partitions
from ncrtl.model.vector_engine import (
    group_nan_code,
    max_code,
    quantize_groups,
    quantize_mx,
    scale_emax,
    scale_partition,
)
from ncrtl.testbench.vector_engine.vectors import (
    all_code_groups,
    corner_groups,
    finite_mask,
    random_groups,
)
from tests.exact_ref import value_of_bits

# (exp_bits, man_bits, bias) of the sources; (exp_bits, man_bits, bias, emax, largest, NaN code)
# of the element formats.
SRC = {"bf16": (8, 7, 127), "fp16": (5, 10, 15)}
ELEM = {
    "fp8_e4m3fn": (4, 3, 7, 8, Fraction(448), 0x7F),
    "fp8_e5m2": (5, 2, 15, 15, Fraction(57344), 0x7E),
    "fp4_e2m1fn": (2, 1, 1, 2, Fraction(6), 0x00),
}
DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}
ML = {
    "fp8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp4_e2m1fn": ml_dtypes.float4_e2m1fn,
}
CONFIGS = [(e, r) for e in ELEM for r in ("trn3", "ocp")]

# Casting signalling NaNs to float64 warns; the values are right.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def floor_log2(q):
    """The largest ``e`` with ``2**e <= q`` for a positive Fraction."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    return e


def round_element(q, negative, elem):
    """Encoding of ``q`` rounded once to nearest-even into ``elem``, saturated, with the sign
    bit ``negative`` (which also signs a zero)."""
    eb, mb, bias, _, largest, _ = ELEM[elem]
    sign = (1 << (eb + mb)) if negative else 0
    a = abs(q)
    if a == 0:
        return sign
    emin = 1 - bias
    e = max(floor_log2(a), emin)
    ulp = Fraction(2) ** (e - mb)
    n = a / ulp
    lo = n.numerator // n.denominator
    frac = n - lo
    if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and lo % 2):
        lo += 1
    r = min(lo * ulp, largest)
    if r == 0:
        return sign
    e2 = floor_log2(r)
    if e2 < emin:
        return sign | int(r / Fraction(2) ** (emin - mb))
    return sign | ((e2 + bias) << mb) | int(r / Fraction(2) ** (e2 - mb) - (1 << mb))


def reference_group(bits, src, elem, rule):
    """``(codes, scale)`` of one group of 32 source encodings, from the contract."""
    vals = [value_of_bits(int(b), *SRC[src]) for b in bits]
    nan_code = ELEM[elem][5]
    if any(isinstance(v, str) for v in vals):
        return [nan_code] * len(vals), 0xFF
    amax = max(abs(v) for v in vals)
    # The FP32 exponent field: 0 for zero and for values below 2**-126 (FP32 subnormals).
    e_field = 0 if amax == 0 else max(floor_log2(amax) + 127, 0)
    emax_ = ELEM[elem][3] - (1 if rule == "trn3" else 0)
    scale = min(max(e_field - emax_, 0), 254)
    unit = Fraction(2) ** (scale - 127)
    sign_bit = 1 << (SRC[src][0] + SRC[src][1])
    codes = [round_element(v / unit, bool(int(b) & sign_bit), elem) for v, b in zip(vals, bits)]
    return codes, scale


def check_against_reference(codes, src, elem, rule):
    got_c, got_s = quantize_groups(from_bits(codes, src), elem, scale_rule=rule)
    bad = []
    for g, bits in enumerate(codes):
        want_c, want_s = reference_group(bits, src, elem, rule)
        if int(got_s[g]) != want_s or [int(c) for c in got_c[g]] != want_c:
            bad.append((g, [hex(int(b)) for b in bits], int(got_s[g]), want_s))
    assert not bad, f"{len(bad)} of {len(codes)} groups differ; first: {bad[:2]}"
    return got_c, got_s


# -- the golden against the exact reference ---------------------------------------------------


@pytest.mark.parametrize("src", list(SRC))
@pytest.mark.parametrize("elem,rule", CONFIGS)
def test_corner_groups_match_exact_reference(src, elem, rule):
    codes = corner_groups(src, np.random.default_rng(7))
    got_c, got_s = check_against_reference(codes, src, elem, rule)
    # The corners reach what they are for: NaN groups, a scale clamped at 0 (BF16), ties,
    # elements rounding to signed zero and (OCP) saturation.
    assert (got_s == 0xFF).any() and (got_s < 0xFF).any()
    if src == "bf16":
        assert ((got_s == 0) & finite_mask(codes, src).all(axis=1) & (codes != 0).any(axis=1)).any()
    sign = 1 << (ELEM[elem][0] + ELEM[elem][1])
    finite = got_s != 0xFF
    mags = got_c[finite] & (sign - 1)
    src_nonzero = (codes[finite] & 0x7FFF) != 0
    assert ((mags == 0) & src_nonzero & ((got_c[finite] & sign) != 0)).any()
    if rule == "ocp":
        assert (mags == max_code(elem)).sum() > 10


@pytest.mark.parametrize("src", list(SRC))
@pytest.mark.parametrize("elem,rule", CONFIGS)
def test_random_groups_match_exact_reference(src, elem, rule):
    rng = np.random.default_rng(10 * list(SRC).index(src) + CONFIGS.index((elem, rule)))
    check_against_reference(random_groups(rng, src, 150), src, elem, rule)


@pytest.mark.parametrize("src", list(SRC))
def test_every_source_code_matches_exact_reference(src):
    """Every BF16 / FP16 code once (code order and shuffled), e4m3fn with the Trainium3 rule."""
    codes = np.concatenate([all_code_groups(src), all_code_groups(src, np.random.default_rng(3))])
    check_against_reference(codes[::5], src, "fp8_e4m3fn", "trn3")


@pytest.mark.slow
@pytest.mark.parametrize("src", list(SRC))
@pytest.mark.parametrize("elem,rule", CONFIGS)
def test_every_source_code_matches_exact_reference_slow(src, elem, rule):
    codes = np.concatenate([all_code_groups(src), all_code_groups(src, np.random.default_rng(3))])
    check_against_reference(codes, src, elem, rule)


def test_reference_by_hand():
    """A few results computed on paper, which checks the reference and the golden alike."""
    g = np.zeros(32)
    g[:4] = [7.25, -1.0, 0.3, 2.0**-12]
    x = g.astype(ml_dtypes.bfloat16)
    # max 7.25: E = 129; e4m3fn trn3: scale 129 - 7 = 122 (2**-5): 7.25 * 32 = 232 = 1.8125 *
    # 2**7 -> mantissa 0b1101 rounds (tie, 0b110 even) to 1.75 * 2**7 = 224: 0x76.
    codes, scales = quantize_groups(x.reshape(1, 32), "fp8_e4m3fn")
    assert scales[0] == 122
    assert codes[0, 0] == 0x76
    assert codes[0, 1] == 0xE0  # -32 = -1.0 * 2**5: field 5 + 7 = 12, mantissa 0
    # 0.3 (BF16 0.30078125) * 32 = 9.625 -> 1.203 * 2**3 -> 1.25 * 2**3: field 10, mantissa 2
    assert codes[0, 2] == 0x52
    # 2**-12 * 2**5 = 2**-7: below the smallest normal 2**-6, subnormal 0.5 * 2**-6 = 4 * 2**-9
    assert codes[0, 3] == 0x04
    # OCP: scale 121, 7.25 * 64 = 464 is the tie between 448 and 480 (the NaN code's value):
    # to even is 448 = 0x7E, and it would saturate to 0x7E anyway.
    codes, scales = quantize_groups(x.reshape(1, 32), "fp8_e4m3fn", scale_rule="ocp")
    assert scales[0] == 121 and codes[0, 0] == 0x7E
    # FP4, trn3: scale 129 - 1 = 128 (2**1): 3.625 -> 4.0 (0b110); -0.5 (0b1001).
    codes, scales = quantize_groups(x.reshape(1, 32), "fp4_e2m1fn")
    assert scales[0] == 128 and codes[0, 0] == 0x6 and codes[0, 1] == 0x9
    # An all-zero group: scale 0 (2**-127), signed zeros kept.
    z = np.zeros((1, 32), dtype=ml_dtypes.bfloat16)
    z[0, 5] = -0.0
    codes, scales = quantize_groups(z, "fp8_e5m2")
    assert scales[0] == 0 and codes[0, 5] == 0x80 and codes[0, 4] == 0


def test_nan_groups():
    x = np.ones((3, 32), dtype=ml_dtypes.bfloat16)
    x[0, 9] = np.nan
    x[1, 0] = -np.inf
    for elem, nan in (("fp8_e4m3fn", 0x7F), ("fp8_e5m2", 0x7E), ("fp4_e2m1fn", 0x0)):
        codes, scales = quantize_groups(x, elem)
        assert list(scales) == [0xFF, 0xFF, 127 - scale_emax(elem)]
        assert (codes[:2] == nan).all() and group_nan_code(elem) == nan
        assert (codes[2] != nan).all()


# -- independent checks: ml_dtypes casts, the scale rule of the seeds, the matmul layout ---------


@pytest.mark.parametrize("src", list(SRC))
@pytest.mark.parametrize("elem,rule", CONFIGS)
def test_every_source_code_matches_ml_dtypes(src, elem, rule):
    """Every code in code order and shuffled: ``clip(x * 2**(127 - scale), +-max)`` cast by
    ml_dtypes (one rounding, to nearest even) with the scale of the seed's formula
    ``floor(log2 amax) - emax'``; clipping before a rounding is saturation after it."""
    codes = np.concatenate([all_code_groups(src), all_code_groups(src, np.random.default_rng(5))])
    got_c, got_s = quantize_groups(from_bits(codes, src), elem, scale_rule=rule)
    x = from_bits(codes, src).astype(np.float64)
    finite = np.isfinite(x).all(axis=1)
    amax = np.abs(np.where(np.isfinite(x), x, 0)).max(axis=1)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))), -1000)
    emax_ = ELEM[elem][3] - (rule == "trn3")
    scale = np.clip(e + 127 - emax_, 0, 254).astype(np.int64)
    assert (got_s[finite] == scale[finite]).all()
    assert (got_s[~finite] == 0xFF).all()
    largest = float(ELEM[elem][4])
    scaled = np.clip(np.ldexp(x[finite], (127 - scale[finite])[:, None]), -largest, largest)
    want = to_bits(scaled.astype(ML[elem]))
    assert np.array_equal(got_c[finite], want)


def test_scale_partitions_match_the_mx_matmul():
    assert np.array_equal(scale_partition(np.arange(128)), mx_scale_partitions(128))


@pytest.mark.parametrize("elem", list(ELEM))
def test_matmul_mx_reads_the_quantized_layout(elem):
    """Quantize a stationary tile [K, 4M] and pick each element out with a one-hot moving
    matrix: ``nc_matmul_mx`` must see exactly ``src[p, 4m + j]`` quantized, with its scale."""
    rng = np.random.default_rng(11)
    K, M = 64, 8
    src = (rng.standard_normal((K, 4 * M)) * 2.0 ** rng.integers(-8, 8, (K, 4 * M))).astype(
        ml_dtypes.bfloat16
    )
    data, scales = quantize_mx(src, elem)
    assert data.shape == (K, M, 4) and scales.shape == (K, M)
    # One-hot moving operand: column n = j * K + p selects contraction index j * K + p.
    moving = np.zeros((K, 4 * K, 4), dtype=ml_dtypes.float8_e4m3fn)
    for p in range(K):
        for j in range(4):
            moving[p, j * K + p, j] = 1.0
    out = matmul_mx(data, moving, scales, np.full((K, 4 * K), 127, dtype=np.uint8))
    want = np.zeros((M, 4 * K))
    for p in range(K):
        for j in range(4):
            deq = decode(data[p, :, j]) * 2.0 ** (scales[scale_partition(p)].astype(int) - 127)
            want[:, j * K + p] = deq
    assert np.array_equal(out.astype(np.float64), want)


def test_layout_of_quantize_mx():
    """Groups are 8 partitions x 4 free elements; scales fill 4 partitions per quadrant."""
    rng = np.random.default_rng(2)
    P, F = 96, 12
    src = rng.standard_normal((P, F)).astype(np.float16)
    data, scales = quantize_mx(src, "fp8_e5m2", scale_rule="ocp")
    for g in range(P // 8):
        for f in range(F // 4):
            block = src[8 * g : 8 * g + 8, 4 * f : 4 * f + 4].reshape(1, 32)
            codes, sc = quantize_groups(block, "fp8_e5m2", scale_rule="ocp")
            assert np.array_equal(to_bits(data[8 * g : 8 * g + 8, f, :]).reshape(32), codes[0])
            assert scales[32 * (g // 4) + g % 4, f] == sc[0]
    used = np.zeros(P, bool)
    used[scale_partition(np.arange(P))] = True
    assert used.sum() == P // 8 and (scales[~used] == 0).all()
    assert data.dtype == ml_dtypes.float8_e5m2


def test_out_dtype_spellings_agree():
    x = np.arange(64, dtype=np.float16).reshape(32, 2).repeat(2, axis=1)
    want = quantize_mx(x, "fp4_e2m1fn")
    for spelling in (ml_dtypes.float4_e2m1fn, np.dtype(ml_dtypes.float4_e2m1fn), "fp4", "e2m1fn"):
        got = quantize_mx(x, spelling)
        assert np.array_equal(to_bits(got[0]), to_bits(want[0]))
        assert np.array_equal(got[1], want[1])


# -- bad input ----------------------------------------------------------------------------------

_X = np.zeros((32, 4), dtype=ml_dtypes.bfloat16)


@pytest.mark.parametrize(
    "src,out,rule,message",
    [
        (
            np.zeros(32, ml_dtypes.bfloat16),
            "fp8_e4m3fn",
            "trn3",
            r"^quantize_mx: src must be a 2-D \[P, F\] array, not 1-D \(32,\)$",
        ),
        (
            np.zeros((32, 4), np.float32),
            "fp8_e4m3fn",
            "trn3",
            r"^quantize_mx: src dtype float32 is not a QuantizeMX source format; "
            r"allowed: bfloat16 \(bf16\), float16 \(fp16\)$",
        ),
        (
            np.zeros((40, 4), np.float16),
            "fp8_e4m3fn",
            "trn3",
            r"^quantize_mx: P=40 partitions is not a positive multiple of 32 ",
        ),
        (
            np.zeros((0, 4), np.float16),
            "fp8_e4m3fn",
            "trn3",
            r"^quantize_mx: P=0 partitions is not a positive multiple of 32 ",
        ),
        (
            np.zeros((32, 6), np.float16),
            "fp8_e4m3fn",
            "trn3",
            r"^quantize_mx: F=6 free elements is not a positive multiple of 4 ",
        ),
        (
            _X,
            "bf16",
            "trn3",
            r"^out_dtype 'bf16' is not an MX element format; allowed: fp8_e4m3fn, fp8_e5m2, "
            r"fp4_e2m1fn \(a name or the ml_dtypes dtype\)$",
        ),
        (_X, "fp9", "trn3", r"^out_dtype 'fp9' is not an MX element format"),
        (_X, ml_dtypes.float8_e4m3, "trn3", r"is not an MX element format"),
        (_X, np.uint8, "trn3", r"is not an MX element format"),
        (
            _X,
            "fp8_e4m3fn",
            "nvidia",
            r"^quantize_mx: scale_rule 'nvidia' is not a QuantizeMX scale rule; "
            r"allowed: trn3, ocp$",
        ),
    ],
)
def test_bad_input_is_refused(src, out, rule, message):
    with pytest.raises(ValueError, match=message):
        quantize_mx(src, out, scale_rule=rule)


def test_quantize_groups_refuses_bad_shapes():
    with pytest.raises(ValueError, match=r"^quantize_groups: values must be a \[G, 32\] array"):
        quantize_groups(np.zeros((2, 16), np.float16), "fp8_e5m2")
    with pytest.raises(ValueError, match=r"^quantize_groups: src dtype uint16 is not"):
        quantize_groups(np.zeros((2, 32), np.uint16), "fp8_e5m2")
