"""Bit-level encode / decode of every datapath format, vectorised over numpy arrays.

Decoding is exact: every encoding of every format maps to a float64 holding exactly its value
(NaN for NaN encodings).  Encoding rounds a float64 once, to nearest with ties to even, with
gradual underflow, and overflows as the format's ``overflow`` rule says.

Rounding is done by :func:`round_to_format`, which also accepts the sign of a residual below the
float64 value: the golden FP operations hand it the exact result of a computation as a float64
``s`` plus the sign of ``exact - s`` so that one routine performs every rounding of the contract.
"""

import numpy as np

from .formats import format_of_dtype, get_format

__all__ = [
    "to_bits",
    "from_bits",
    "decode",
    "decode_fields",
    "decode_float32",
    "encode",
    "round_to_format",
    "round_fp32_pair",
    "round_fp32_sum",
    "fp32_sum_rounder",
    "bits_to_float",
    "QNAN",
]

#: Canonical quiet NaN encodings produced by the datapath.
QNAN = {
    "fp32": 0x7FC00000,
    "tf32": 0x7FC00000,
    "bf16": 0x7FC0,
    "fp16": 0x7E00,
    "fp8_e4m3": 0x7C,
    "fp8_e4m3fn": 0x7F,
    "fp8_e5m2": 0x7E,
    "fp8_e3m4": 0x78,
    "e8m0": 0xFF,
}

_DECODE_TABLES = {}


def _fmt(fmt):
    return get_format(fmt)


def to_bits(values, fmt=None):
    """Raw encodings of a numpy array of a format dtype, as the format's unsigned storage dtype.

    Parameters
    ----------
    values : array_like
        An array whose dtype is one of the format dtypes (float32, bfloat16, float8_*, ...),
        or an unsigned integer array already holding encodings (then ``fmt`` is required).
    fmt : str or Format, optional
        The format; required for TF32 and for integer input.  When given with a float dtype, it
        must agree with the dtype (TF32 takes float32).
    """
    arr = np.asarray(values)
    if arr.dtype.kind == "u":
        if fmt is None:
            raise ValueError(f"unsigned integer input (dtype {arr.dtype}) needs an explicit format")
        f = _fmt(fmt)
        limit = 1 << f.container_bits
        if arr.size and int(arr.max()) >= limit:
            raise ValueError(
                f"encoding {int(arr.max()):#x} does not fit the {f.container_bits}-bit "
                f"container of {f.name}"
            )
        return arr.astype(f.storage_dtype)
    dfmt = format_of_dtype(arr.dtype)
    f = dfmt if fmt is None else _fmt(fmt)
    if f.name == "tf32" and dfmt.name == "fp32":
        pass
    elif f is not dfmt:
        raise ValueError(f"array dtype {arr.dtype} holds {dfmt.name}, not {f.name}")
    if f.name == "fp4_e2m1fn":
        # ml_dtypes stores one FP4 value per byte, in its low nibble.
        return arr.view(np.uint8) & np.uint8(0xF)
    return arr.view(f.storage_dtype)


def from_bits(bits, fmt):
    """Inverse of :func:`to_bits`: a numpy array of the format dtype (float32 for TF32)."""
    f = _fmt(fmt)
    b = to_bits(np.asarray(bits).astype(f.storage_dtype), f)
    dt = np.dtype(np.float32) if f.name == "tf32" else f.dtype
    return b.view(dt)


def _table(f):
    """Decode table (value, sign, sig, exp, kind) for formats of at most 16 bits."""
    t = _DECODE_TABLES.get(f.name)
    if t is None:
        codes = np.arange(1 << f.bits, dtype=np.int64)
        t = _decode_arith(codes, f)
        _DECODE_TABLES[f.name] = t
    return t


KIND_FINITE, KIND_INF, KIND_NAN = 0, 1, 2


def _decode_arith(codes, f):
    codes = codes.astype(np.int64)
    if f.ignored_low_bits:
        codes = codes & ~np.int64((1 << f.ignored_low_bits) - 1)
    man = codes & ((1 << f.man_bits) - 1)
    ef = (codes >> f.man_bits) & ((1 << f.exp_bits) - 1)
    sign = (codes >> (f.bits - 1)) & 1 if f.signed else np.zeros_like(codes)
    normal = ef != 0
    if f.special == "e8m0":
        normal = np.ones_like(normal)
    sig = np.where(normal, man | (1 << f.man_bits), man)
    exp = np.where(normal, ef, 1) - f.bias - f.man_bits
    kind = np.zeros_like(codes)
    emask = (1 << f.exp_bits) - 1
    if f.special == "ieee":
        kind = np.where(ef == emask, np.where(man == 0, KIND_INF, KIND_NAN), KIND_FINITE)
    elif f.special == "fn":
        kind = np.where((ef == emask) & (man == (1 << f.man_bits) - 1), KIND_NAN, KIND_FINITE)
    elif f.special == "e8m0":
        kind = np.where(ef == emask, KIND_NAN, KIND_FINITE)
    mag = np.ldexp(sig.astype(np.float64), exp.astype(np.int32))
    mag = np.where(kind == KIND_INF, np.inf, mag)
    mag = np.where(kind == KIND_NAN, np.nan, mag)
    value = np.where(sign == 1, -mag, mag)
    return value, sign, np.where(kind == KIND_FINITE, sig, 0), exp, kind


def decode_fields(bits, fmt):
    """Decode encodings to ``(value, sign, sig, exp, kind)`` arrays.

    ``value`` is the exact float64 value (NaN for NaN).  For finite encodings
    ``value == (-1)**sign * sig * 2**exp``; ``kind`` is 0 (finite), 1 (Inf) or 2 (NaN).
    """
    f = _fmt(fmt)
    b = np.asarray(bits).astype(np.int64)
    if f.container_bits <= 16:
        t = _table(f)
        return tuple(col[b] for col in t)
    return _decode_arith(b, f)


def decode(values, fmt=None):
    """Exact float64 values of an array of a format dtype, or of encodings with ``fmt``."""
    arr = np.asarray(values)
    f = _fmt(fmt) if fmt is not None else format_of_dtype(arr.dtype)
    if f.name == "fp32" and arr.dtype == np.float32:
        return arr.astype(np.float64)  # every float32 is a float64; NaN stays NaN
    if f.name == "tf32" and arr.dtype == np.float32:
        # The low bits cleared, as _decode_arith does: the float32 left is the TF32 value
        # (a NaN whose payload was only in those bits reads as Inf).
        keep = np.uint32(~((1 << f.ignored_low_bits) - 1) & 0xFFFFFFFF)
        with np.errstate(invalid="ignore"):  # a signalling NaN widens quietly
            return (arr.view(np.uint32) & keep).view(np.float32).astype(np.float64)
    bits = to_bits(values, f)
    if f.container_bits <= 16:
        return _table(f)[0][np.asarray(bits).astype(np.int64)]
    return decode_fields(bits, f)[0]


def decode_float32(values, fmt=None):
    """:func:`decode` as float32: exact, since every value of every format is a float32
    (e8m0's least, ``2**-127``, is a subnormal one); NaN for NaN.  BF16 is the upper half of
    an FP32 encoding, TF32 an FP32 with its low bits cleared; the others widen from
    :func:`decode`."""
    arr = np.asarray(values)
    f = _fmt(fmt) if fmt is not None else format_of_dtype(arr.dtype)
    if f.name == "fp32" and arr.dtype == np.float32:
        return arr
    if f.name == "bf16" and arr.dtype == f.dtype:
        return (arr.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    if f.name == "tf32" and arr.dtype == np.float32:
        keep = np.uint32(~((1 << f.ignored_low_bits) - 1) & 0xFFFFFFFF)
        return (arr.view(np.uint32) & keep).view(np.float32)
    with np.errstate(invalid="ignore"):
        return decode(arr, f).astype(np.float32)


def bits_to_float(bits, fmt):
    """Exact float64 values of raw encodings (alias of ``decode_fields(...)[0]``)."""
    return decode_fields(bits, fmt)[0]


# -- rounding ------------------------------------------------------------------------------------

_F64_MAN = 52


def round_to_format(s, fmt, residual_sign=None):
    """Round ``s + eps`` once to ``fmt``, to nearest with ties to even; return encodings.

    Parameters
    ----------
    s : ndarray of float64
        The value, or the float64 nearest to an exact value.
    fmt : str or Format
        Target format.
    residual_sign : ndarray of int, optional
        Sign (-1, 0, +1) of ``exact - s`` where the exact value is not a float64.  The caller
        guarantees ``|exact - s|`` is at most half a float64 ulp of ``s`` (true for the error term
        of a TwoSum, or for ``s`` the round-to-nearest float64 of the exact value).

    Notes
    -----
    The exact value is replaced by ``2*m + d`` half-ulps of ``s`` (``m`` its 53-bit significand,
    ``d = +-1`` toward the residual).  When the residual is not exactly half an ulp that point is
    not the exact value, but no rounding boundary of a format of at most 52 mantissa bits lies
    strictly between them, so the rounded result is the same.  Zero keeps the sign of ``s``;
    NaN gives the canonical quiet NaN; overflow follows ``fmt.overflow``.
    """
    f = _fmt(fmt)
    s = np.asarray(s, dtype=np.float64)
    if f.name == "fp32" and s.size >= _FAST_MIN:
        return _round_fp32(s, residual_sign)
    return _round(s, f, residual_sign)


#: Arrays from this size up round to FP32 through :func:`_round_fp32`.
_FAST_MIN = 64
#: Low float64 significand bits below an FP32 normal's last place: 52 - 23.
_BELOW_FP32 = _F64_MAN - 23


#: The low bits of a float64 below FP32's last place, and their pattern halfway between two
#: FP32 neighbours (:func:`_needs_residual`).
_LOW_BITS = np.uint64((1 << _BELOW_FP32) - 1)
_HALFWAY = np.uint64(1 << (_BELOW_FP32 - 1))


def _needs_residual(s, nonzero):
    """Where the float64 -> float32 conversion of ``s`` is not the rounding of ``s + eps``
    (``eps`` a residual under half a float64 ulp, nonzero where ``nonzero``): ``s`` exactly
    halfway between two FP32 neighbours (its low 29 significand bits ``1000...0``), or in
    FP32's subnormal range."""
    low = s.view(np.uint64) & _LOW_BITS
    return nonzero & ((low == _HALFWAY) | (np.abs(s) < 2.0**-126))


def round_fp32_pair(t, e):
    """FP32 rounding of the exact sum ``t + e`` of a float64 pair from TwoSum (``|e|`` at most
    half an ulp of ``t``), as float32 values: :func:`round_to_format`'s rounding to FP32 with
    the residual ``e`` itself instead of its sign (a NaN ``e``, from a non-finite ``t``, counts
    as none).  NaN gives the canonical quiet NaN."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = t.astype(np.float32)
        slow = _needs_residual(t, (e > 0) | (e < 0))
    if slow.any():
        out[slow] = _round(t[slow], _fmt("fp32"), np.sign(e[slow]).astype(np.int64)).view(
            np.float32
        )
    nan = np.isnan(out)
    if nan.any():
        out[nan] = np.uint32(QNAN["fp32"]).view(np.float32)
    return out


def round_fp32_sum(a, b, out=None):
    """``round_fp32(a + b)`` as float32, for float64 arrays holding exact values: the
    :func:`round_fp32_pair` of their TwoSum, with the residual formed only where it can matter.
    The float64 sum ``t`` converts to the right FP32 value unless ``t`` lies on an FP32
    rounding boundary (exactly halfway between two FP32 neighbours, or in FP32's subnormal
    range; :func:`round_to_format`'s test), so only those elements take the TwoSum residual
    ``a + b - t`` and the exact rounding.  A NaN result keeps its payload (the caller makes it
    the canonical NaN).  ``out``: a float32 array to write, else a new one.
    :func:`fp32_sum_rounder` does the same with buffers kept from call to call."""
    return fp32_sum_rounder(np.broadcast_shapes(np.shape(a), np.shape(b)))(a, b, out)


def fp32_sum_rounder(shape):
    """:func:`round_fp32_sum` for float64 arrays of ``shape``, as a function ``f(a, b,
    out=None)`` that keeps its work arrays between calls: a chain of steps allocates (and
    faults in) no memory per step."""
    t = np.empty(shape, np.float64)
    low = np.empty(shape, np.uint64)
    edge = np.empty(shape, bool)
    tiny = np.empty(shape, bool)

    def rounder(a, b, out=None):
        out = np.empty(shape, np.float32) if out is None else out
        with np.errstate(over="ignore", invalid="ignore"):
            np.add(a, b, out=t)
            np.copyto(out, t, casting="same_kind")
        np.bitwise_and(t.view(np.uint64), _LOW_BITS, out=low)
        np.equal(low, _HALFWAY, out=edge)
        np.abs(t, out=low.view(np.float64))
        np.less(low.view(np.float64), 2.0**-126, out=tiny)
        np.logical_or(edge, tiny, out=edge)
        if edge.any():
            at = np.unravel_index(np.flatnonzero(edge), shape)
            ta, tb, tt = np.broadcast_to(a, shape)[at], np.broadcast_to(b, shape)[at], t[at]
            with np.errstate(over="ignore", invalid="ignore"):
                bb = tt - ta
                e = (ta - (tt - bb)) + (tb - bb)  # TwoSum: a + b == t + e exactly (t finite)
            d = np.sign(np.where(np.isnan(e), 0.0, e)).astype(np.int64)
            fix = d != 0
            if fix.any():
                rounded = _round(tt[fix], _fmt("fp32"), d[fix]).view(np.float32)
                out[tuple(i[fix] for i in at)] = rounded
        return out

    return rounder


def _round_fp32(s, residual_sign):
    """:func:`round_to_format` to FP32, the accumulator's rounding, done by the FPU.

    Converting a float64 to float32 is IEEE round-to-nearest-even, with gradual underflow and
    overflow to infinity: exactly the contract when ``s`` is the exact value.  With a residual,
    the exact value ``s + eps`` (``|eps|`` under half a float64 ulp) rounds like ``s`` unless ``s``
    lies on a rounding boundary of FP32, i.e. exactly halfway between two FP32 neighbours
    (its low 29 significand bits are ``1000...0``), or in FP32's subnormal range; those few
    elements go through the exact path :func:`_round`.  NaN becomes the canonical quiet NaN.
    """
    with np.errstate(over="ignore"):
        out = s.astype(np.float32).view(np.uint32)
    out = np.where(np.isnan(s), np.uint32(QNAN["fp32"]), out)
    if residual_sign is None:
        return out
    d = np.broadcast_to(np.asarray(residual_sign, dtype=np.int64), s.shape)
    slow = _needs_residual(s, d != 0)
    if slow.any():
        out = out.copy()
        out[slow] = _round(s[slow], _fmt("fp32"), d[slow])
    return out


def _round(s, f, residual_sign):
    """:func:`round_to_format`, in integer arithmetic for any format."""
    if residual_sign is None:
        d = np.zeros(s.shape, dtype=np.int64)
    else:
        d = np.broadcast_to(np.asarray(residual_sign, dtype=np.int64), s.shape)
    raw = (
        s.view(np.uint64).astype(np.int64)
        if s.ndim
        else np.array([s]).view(np.uint64).astype(np.int64)
    )
    raw = raw.reshape(s.shape)
    neg = (raw >> 63) & 1
    e64 = (raw >> _F64_MAN) & 0x7FF
    frac = raw & ((1 << _F64_MAN) - 1)
    finite = e64 != 0x7FF
    nonzero = (raw & 0x7FFFFFFFFFFFFFFF) != 0
    # Sub-normal float64 never occur in the datapath (every format's values, products and scaled
    # sums stay above 2**-1022); they are still rounded correctly here as values below every
    # format's smallest subnormal.
    m = np.where(e64 != 0, frac | (1 << _F64_MAN), frac)
    e_lsb = np.where(e64 != 0, e64, 1) - 1023 - _F64_MAN  # value = m * 2**e_lsb
    # Residual direction relative to the magnitude.
    sgn = np.where(neg == 1, -1, 1)
    dm = d * sgn
    m2 = 2 * m + dm  # magnitude in units of 2**(e_lsb - 1)
    e2 = e_lsb - 1
    # Position of the leading one of m2.
    with np.errstate(invalid="ignore", divide="ignore"):
        msb = np.floor(np.log2(np.maximum(m2, 1).astype(np.float64))).astype(np.int64)
    # float64 log2 of an integer < 2**54 can be off by one just below a power of two: fix it.
    msb = np.where((m2 >> np.minimum(msb, 62)) == 0, msb - 1, msb)
    msb = np.where((m2 >> np.minimum(msb + 1, 62)) != 0, msb + 1, msb)
    top = msb + e2  # exponent of the leading one
    lsb_exp = np.maximum(top - f.man_bits, f.lsb_exp_min)
    shift = lsb_exp - e2  # bits of m2 to drop (>= 1 always: m2 has 54 bits)
    big = shift > 60
    sh = np.clip(shift, 1, 60)
    q = m2 >> sh
    rem = m2 & ((np.int64(1) << sh) - 1)
    half = np.int64(1) << (sh - 1)
    up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    q = np.where(big, 0, q + up)
    lsb_exp = np.where(big, f.lsb_exp_min, lsb_exp)
    # q * 2**lsb_exp is the rounded magnitude; q <= 2**precision (a carry may have made it so).
    carry = q >> f.precision
    q = np.where(carry == 1, q >> 1, q)
    lsb_exp = lsb_exp + carry
    # Encode: biased exponent from the leading one; subnormals have q < 2**man_bits.
    is_norm = q >= (1 << f.man_bits)
    ebias = np.where(is_norm, lsb_exp + f.man_bits + f.bias, 0)
    code = (ebias << f.man_bits) | (q & ((1 << f.man_bits) - 1))
    if f.special == "e8m0":
        code = lsb_exp + f.bias
    overflow = (lsb_exp + f.man_bits > f.emax) | (
        (lsb_exp + f.man_bits == f.emax) & (q > f.max_sig)
    )
    if f.special == "e8m0":
        overflow = lsb_exp > f.emax
    sign_bit = (1 << (f.bits - 1)) if f.signed else 0
    if f.overflow == "inf":
        ovf_code = ((1 << f.exp_bits) - 1) << f.man_bits
    elif f.overflow == "nan":
        ovf_code = _nan_code(f)
    else:  # saturate
        ovf_code = ((f.emax + f.bias) << f.man_bits) | (f.max_sig & ((1 << f.man_bits) - 1))
    code = np.where(overflow, ovf_code, code)
    if f.special == "e8m0":
        # An unsigned power-of-two scale: zero, negatives and values below 2**-127 have no code.
        code = np.where(nonzero & (neg == 0) & (lsb_exp >= -f.bias), code, _nan_code(f))
        code = np.where(overflow, _nan_code(f), code)
    else:
        code = np.where(nonzero, code, 0)
        code = code | np.where(neg == 1, sign_bit, 0)
    # Inf and NaN inputs.
    inf_code = (((1 << f.exp_bits) - 1) << f.man_bits) if f.has_inf else ovf_code
    is_inf = (~finite) & (frac == 0)
    is_nan = (~finite) & (frac != 0)
    if f.special != "e8m0":
        code = np.where(is_inf, inf_code | np.where(neg == 1, sign_bit, 0), code)
    else:
        code = np.where(is_inf, _nan_code(f), code)
    if f.has_nan:
        code = np.where(is_nan, _nan_code(f), code)
    else:
        code = np.where(is_nan, 0, code)  # FP4 has no NaN: callers must not ask for one
    return code.astype(f.storage_dtype)


def _nan_code(f):
    if f.name in QNAN:
        return QNAN[f.name]
    return (1 << f.bits) - 1


def encode(values, fmt):
    """Round float64 values once to ``fmt`` (RNE) and return the encodings.

    For formats without infinities, overflow follows the format's rule (e4m3fn -> NaN,
    FP4 -> saturate to +-6, as ml_dtypes does).  FP4 has no NaN encoding: a NaN input raises.
    """
    f = _fmt(fmt)
    v = np.asarray(values, dtype=np.float64)
    if not f.has_nan and np.isnan(v).any():
        raise ValueError(f"{f.name} has no NaN encoding; input contains NaN")
    return round_to_format(v, f)
