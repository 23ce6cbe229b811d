"""Golden FP operations of the numeric contract, vectorised over numpy arrays.

The contract (docs/numerics.md):

* Products of two inputs are exact.
* One fused step computes ``round_fp32(psum + 2**scale_exp * sum_i a_i * b_i)`` with a single
  round-to-nearest-even of the exact value; subnormals are kept, overflow gives +-Inf.
* NaN in, ``Inf * 0`` or ``Inf - Inf`` give the canonical quiet NaN.
* An exact zero sum is -0 only when every addend is -0 (IEEE 754 rule for round-to-nearest).

How exactness is obtained: every input value and every product (at most 24 x 24 significand bits)
is exactly a float64, and so is a product times a power-of-two scale.  The sum of the terms is
computed with error-free transformations (TwoSum); where a partial sum of products is not exact in
float64 the element falls back to rational arithmetic.  The exact result reaches
:func:`round_to_format` as a float64 plus the sign of its residual, which rounds it once.
"""

from fractions import Fraction

import numpy as np

from .codec import QNAN, decode, round_to_format
from .formats import format_of_dtype, get_format

__all__ = [
    "two_sum",
    "exact_sum_round",
    "fp32_dot_add",
    "fp32_add",
    "check_ieee_float32",
    "fp32_to_bf16",
    "check_rand",
    "fp32_to_fp16",
    "round_fp32",
    "MAX_SCALE_EXP",
]

#: Largest |scale_exp| accepted: keeps every scaled product a normal float64.
MAX_SCALE_EXP = 600

_FP32 = get_format("fp32")


def two_sum(a, b):
    """Error-free transformation: ``s = fl(a + b)`` and ``e`` with ``a + b == s + e`` exactly."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def _as_values(x, fmt, what):
    """Exact float64 values of ``x`` (format from ``fmt`` or from the dtype)."""
    arr = np.asarray(x)
    try:
        f = get_format(fmt) if fmt is not None else format_of_dtype(arr.dtype)
        return decode(arr, f), f
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def exact_sum_round(terms, fmt="fp32"):
    """Round the exact sum of float64 ``terms`` (a list of equal-shape arrays) once to ``fmt``.

    Every term must be a float64 holding an exact value.  Non-finite terms follow IEEE rules
    (``+Inf + -Inf`` is NaN).  Returns the encodings of ``fmt``.
    """
    f = get_format(fmt)
    terms = [np.asarray(t, dtype=np.float64) for t in terms]
    shape = np.broadcast_shapes(*(t.shape for t in terms))
    terms = [np.broadcast_to(t, shape) for t in terms]
    # Plain float64 sum: right for every non-finite case (NaN, Inf, Inf - Inf).
    plain = terms[0].copy()
    with np.errstate(invalid="ignore"):
        for t in terms[1:]:
            plain = plain + t
    special = ~np.isfinite(plain)
    # An exact zero sum is -0 only when every addend is -0 (IEEE 754, round to nearest).
    all_negzero = np.ones(shape, dtype=bool)
    for t in terms:
        all_negzero &= (t == 0) & np.signbit(t)

    # Running TwoSum: exact == s + (sum of the error terms).  With at most one nonzero error the
    # final TwoSum(s, e) is an exact float64 pair with |residual| <= ulp/2; two or more nonzero
    # errors send the element to the rational path.
    with np.errstate(invalid="ignore"):
        s = terms[0].copy()
        e_keep = np.zeros(shape, dtype=np.float64)
        n_err = np.zeros(shape, dtype=np.int64)
        for t in terms[1:]:
            s, e = two_sum(s, t)
            nz = e != 0
            n_err += nz
            e_keep = np.where(nz, e, e_keep)
        s, r = two_sum(s, e_keep)
    rs = np.sign(np.where(special, 0.0, r)).astype(np.int64)
    s = np.where(special, plain, s)
    slow = (n_err >= 2) & ~special
    if slow.any():
        idx = np.nonzero(slow)
        cols = [t[idx] for t in terms]
        for j in range(len(idx[0])):
            exact = sum((Fraction(float(c[j])) for c in cols), Fraction(0))
            sj = exact.numerator / exact.denominator  # int true division: correctly rounded
            key = tuple(ix[j] for ix in idx)
            s[key] = sj
            rs[key] = (exact > Fraction(sj)) - (exact < Fraction(sj))
    s = np.where((s == 0) & ~special, np.where(all_negzero, -0.0, 0.0), s)
    return round_to_format(s, f, rs)


def fp32_dot_add(psum, a, b, *, a_format=None, b_format=None, scale_exp=None, scale_nan=None):
    """Fused dot-product-add: ``round_fp32(psum + 2**scale_exp * sum_k a[..., k] * b[..., k])``.

    Parameters
    ----------
    psum : ndarray of float32
        Incoming partial sums, broadcastable to ``a.shape[:-1]``.
    a, b : ndarray
        Operands of a datapath format dtype (float32, bfloat16, float16, float8_*,
        float4_e2m1fn), same shape ``[..., k]``; the products are summed over the last axis.
    a_format, b_format : str, optional
        Override the format the dtype implies (``"tf32"`` for float32 data read as TF32).
    scale_exp : int or ndarray of int, optional
        Power-of-two exponent applied to the sum of products (MX: the sum of the two unbiased
        E8M0 scale exponents), broadcastable to ``a.shape[:-1]``; ``|scale_exp| <= 600``.
    scale_nan : bool or ndarray of bool, optional
        A block scale is NaN (E8M0 0xFF), broadcastable to ``a.shape[:-1]``: the result is
        the canonical NaN ``0x7FC00000`` there (``scale_exp`` is not read there).

    Returns
    -------
    ndarray of float32
        Shape ``broadcast(psum.shape, a.shape[:-1])``.
    """
    psum = np.asarray(psum)
    if psum.dtype != np.float32:
        raise ValueError(f"psum must be float32 (the PSUM accumulation format), got {psum.dtype}")
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("a and b need a last axis of products (shape [..., k])")
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}")
    va, fa = _as_values(a, a_format, "a")
    vb, fb = _as_values(b, b_format, "b")
    for f, what in ((fa, "a"), (fb, "b")):
        if f.name == "e8m0":
            raise ValueError(f"{what}: e8m0 is a scale format, not a multiplier operand")
    if (fa.name in ("fp32", "tf32")) != (fb.name in ("fp32", "tf32")):
        raise ValueError(
            f"fp32/tf32 operands cannot be mixed with 16-bit or 8-bit operands "
            f"(got {fa.name} x {fb.name})"
        )
    out_shape = a.shape[:-1]
    try:
        shape = np.broadcast_shapes(psum.shape, out_shape)
    except ValueError:
        raise ValueError(
            f"psum shape {psum.shape} does not broadcast to a.shape[:-1] = {out_shape}"
        ) from None
    with np.errstate(invalid="ignore"):  # Inf * 0 is NaN, as the contract says
        prods = va * vb  # exact: <= 48 significand bits, exponents within float64's normal range
    if scale_exp is not None:
        se = np.asarray(scale_exp)
        if se.dtype.kind not in "iu":
            raise ValueError(f"scale_exp must be an integer array, got dtype {se.dtype}")
        if se.size and int(np.abs(se).max()) > MAX_SCALE_EXP:
            raise ValueError(f"|scale_exp| must be <= {MAX_SCALE_EXP}, got {int(np.abs(se).max())}")
        prods = np.ldexp(prods, se.astype(np.int32)[..., None])
    terms = [np.broadcast_to(decode(psum).astype(np.float64), shape)]
    terms += [np.broadcast_to(prods[..., i], shape) for i in range(prods.shape[-1])]
    out = exact_sum_round(terms, _FP32)
    if scale_nan is not None:
        out = np.where(np.broadcast_to(np.asarray(scale_nan, bool), shape), QNAN["fp32"], out)
        out = out.astype(np.uint32)
    return out.view(np.float32)


#: Float32 probes of :func:`check_ieee_float32`: ``2**-149 * 2`` reads a subnormal input,
#: ``2**-126 * 0.5`` makes a subnormal result; both are nonzero unless subnormals are flushed.
_PROBE = (np.array([2.0**-149, 2.0**-126], np.float32), np.array([2.0, 0.5], np.float32))


def check_ieee_float32():
    """Raise ``RuntimeError`` where this thread's float32 arithmetic flushes subnormals to zero
    (FTZ / DAZ, which a library built with fast-math may switch on): the goldens' float32
    roads are IEEE float32 arithmetic, gradual underflow included (docs/numerics.md)."""
    if not (_PROBE[0] * _PROBE[1]).all():
        raise RuntimeError(
            "this process's float32 arithmetic flushes subnormals to zero (FTZ/DAZ, switched on "
            "by a library built with fast-math): the golden model needs IEEE gradual underflow"
        )


def fp32_add(x, y):
    """``round_fp32(x + y)`` for float32 arrays (RNE, subnormals kept, canonical NaN).

    The sum of two float32 values is IEEE float32 addition: one rounding to nearest even of
    the exact sum, gradual underflow, overflow to infinity, ``+0 + -0 = +0`` and ``-0 + -0 =
    -0`` (the contract's signed-zero rule); a nonzero exact sum is a multiple of ``2**-149``,
    so it never rounds to zero.  Only NaN needs the contract's canonical encoding.
    ``tests/test_model_fp.py::test_fp32_add_vs_rational`` checks it against the rational
    reference."""
    x = np.asarray(x)
    y = np.asarray(y)
    for v, what in ((x, "x"), (y, "y")):
        if v.dtype != np.float32:
            raise ValueError(f"{what} must be float32, got {v.dtype}")
    check_ieee_float32()
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.asarray(np.add(x, y))
    nan = np.isnan(out)
    if nan.any():
        out = np.where(nan, np.uint32(QNAN["fp32"]).view(np.float32), out)
    return out


def round_fp32(values):
    """Round exact float64 values once to FP32 (RNE); canonical NaN."""
    return round_to_format(np.asarray(values, dtype=np.float64), _FP32).view(np.float32)


def check_rand(rand, shape, what):
    """``rand`` as an array of stochastic-rounding draws for operands of ``shape`` (named
    ``what`` in messages): integers in [0, 65535], one per operand; ``ValueError`` otherwise."""
    if rand is None:
        raise ValueError(
            f"stochastic rounding needs rand (16-bit random values, same shape as {what})"
        )
    r = np.asarray(rand)
    if r.shape != tuple(shape):
        raise ValueError(f"rand shape {r.shape} must equal {what} shape {tuple(shape)}")
    if r.dtype.kind not in "iu" or (r.size and (int(r.min()) < 0 or int(r.max()) > 0xFFFF)):
        raise ValueError("rand must hold integers in [0, 65535]")
    return r


def fp32_to_bf16(x, rounding="rne", rand=None):
    """Convert float32 to bfloat16.

    Parameters
    ----------
    x : ndarray of float32
    rounding : {"rne", "sr"}
        ``"rne"``: round to nearest even.  ``"sr"``: stochastic rounding, the magnitude bits plus
        ``rand`` (16-bit) truncated to the upper 16 bits; the sign is kept, Inf passes unchanged.
    rand : ndarray of uint16-range integers
        The random values for ``"sr"`` (see :class:`ncrtl.model.fp.xorwow.Xorwow`), same shape as x.

    NaN gives the canonical BF16 quiet NaN 0x7FC0 in both modes.
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    import ml_dtypes

    if rounding == "rne":
        # BF16 is the upper half of FP32, so rounding to nearest even is integer arithmetic on
        # the encoding: add just under half the dropped part's weight, plus the kept part's last
        # bit (the tie goes to even), and drop the low half.  The same addition carries into
        # the exponent (a subnormal rounding up to the least normal, the largest finite
        # overflowing to Inf) and keeps the sign; only NaN needs the canonical encoding.
        bits = x.view(np.uint32)
        up = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        out = ((bits + up) >> np.uint32(16)).astype(np.uint16)
        nan = np.isnan(x)
        if nan.any():
            out[nan] = QNAN["bf16"]
        return out.view(ml_dtypes.bfloat16)
    if rounding != "sr":
        raise ValueError(f"unknown rounding {rounding!r}; allowed: 'rne', 'sr'")
    r = check_rand(rand, x.shape, "x")
    bits = x.view(np.uint32).astype(np.uint64)
    sign = bits & 0x80000000
    mag = bits & 0x7FFFFFFF
    out = ((mag + r.astype(np.uint64)) >> 16) | (sign >> 16)
    is_inf = mag == 0x7F800000
    is_nan = mag > 0x7F800000
    out = np.where(is_inf, bits >> 16, out)
    out = np.where(is_nan, QNAN["bf16"], out)
    return out.astype(np.uint16).view(ml_dtypes.bfloat16)


def fp32_to_fp16(x):
    """Convert float32 to float16 with round to nearest even (overflow -> Inf, canonical NaN)."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    with np.errstate(invalid="ignore"):  # signalling NaNs widen quietly; they map to qNaN
        wide = x.astype(np.float64)
    return round_to_format(wide, "fp16").view(np.float16)
