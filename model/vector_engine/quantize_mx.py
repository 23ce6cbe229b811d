"""QuantizeMX: BF16 / FP16 to MXFP8 / MXFP4 element codes and E8M0 scales (docs/vector_engine.md).

The contract, for one group of 32 source values (8 partitions x 4 consecutive free elements):

* ``E`` is the FP32 exponent field (biased, 0..255) of the group's largest magnitude, the value
  widened to FP32 exactly (a BF16 subnormal has ``E = 0``; every FP16 value is an FP32 normal).
* The scale byte is ``clamp(E - emax', 0, 254)`` where ``emax'`` is the element format's
  ``emax - 1`` (the Trainium3 rule ``"trn3"``: 7 for e4m3fn, 14 for e5m2, 1 for e2m1fn) or its
  ``emax`` (the OCP sample rule ``"ocp"``).  An all-zero group gets 0 (``2**-127``).
* Element ``x`` becomes ``x / 2**(scale - 127)`` rounded once to nearest-even into the element
  format, subnormals kept, saturating to the largest finite value (never Inf or NaN), the sign
  kept (also on zero and on values that round to zero).
* A group holding any NaN or Inf gets the scale ``0xFF`` (the E8M0 NaN) and every element the
  format's canonical NaN: ``0x7F`` (e4m3fn), ``0x7E`` (e5m2); e2m1fn has no NaN encoding, so its
  elements are ``0x0`` and the NaN scale alone carries the NaN.

Why the golden is exact: a BF16 / FP16 value times a power of two from ``2**-127`` to ``2**127``
is a float64 exactly (at most 11 significant bits, exponents between ``2**-260`` and
``2**255``), and :func:`ncrtl.model.fp.round_to_format` rounds an exact float64 once.
"""

import numpy as np

from ncrtl.model.fp import QNAN, Format, decode, encode, from_bits, get_format, round_to_format
from ncrtl.model.fp.formats import format_of_dtype
from ncrtl.model.tensor_engine.matmul import MX_GROUP_PARTITIONS, QUADRANT, mx_scale_partition

__all__ = [
    "SOURCE_FORMATS",
    "ELEMENT_FORMATS",
    "SCALE_RULES",
    "GROUP_ROWS",
    "GROUP_COLS",
    "GROUP_SIZE",
    "QUADRANT",
    "SCALE_NAN",
    "element_format",
    "scale_emax",
    "max_code",
    "group_nan_code",
    "scale_partition",
    "quantize_groups",
    "quantize_mx",
    "sbuf_groups",
    "sbuf_tiles",
]

#: Source formats; the index is the RTL's ``src_fmt`` code.
SOURCE_FORMATS = ("bf16", "fp16")
#: Element formats; the index is the RTL's ``elem_fmt`` code (3 is invalid).
ELEMENT_FORMATS = ("fp8_e4m3fn", "fp8_e5m2", "fp4_e2m1fn")
#: Scale rules; the index is the RTL's ``scale_rule`` code.
SCALE_RULES = ("trn3", "ocp")

#: A group: 8 partitions (the MX matmul's scale group) x 4 consecutive free elements.
GROUP_ROWS, GROUP_COLS = MX_GROUP_PARTITIONS, 4
GROUP_SIZE = GROUP_ROWS * GROUP_COLS
#: The E8M0 NaN: the scale of a group holding NaN or Inf.
SCALE_NAN = 0xFF

_FP32 = get_format("fp32")


def element_format(out_dtype, what="out_dtype"):
    """The :class:`~ncrtl.model.fp.Format` of an MX element type: a format name or alias
    (``"fp8_e4m3fn"``, ``"e5m2"``, ``"fp4"``), a Format, or an ml_dtypes dtype.

    Raises
    ------
    ValueError
        Anything else, naming the value and the allowed formats.
    """
    allowed = ", ".join(ELEMENT_FORMATS)
    message = (
        f"{what} {out_dtype!r} is not an MX element format; allowed: {allowed} "
        f"(a name or the ml_dtypes dtype)"
    )
    try:
        if isinstance(out_dtype, (str, Format)):
            fmt = get_format(out_dtype)
        else:
            fmt = format_of_dtype(np.dtype(out_dtype))
    except (TypeError, ValueError):
        raise ValueError(message) from None
    if fmt.name not in ELEMENT_FORMATS:
        raise ValueError(message)
    return fmt


def _rule(scale_rule, what):
    if not isinstance(scale_rule, str) or scale_rule not in SCALE_RULES:
        raise ValueError(
            f"{what}: scale_rule {scale_rule!r} is not a QuantizeMX scale rule; "
            f"allowed: {', '.join(SCALE_RULES)}"
        )
    return scale_rule


def scale_emax(fmt, scale_rule="trn3"):
    """``emax'``, the exponent the group maximum's binade is mapped to: the element format's
    ``emax - 1`` for ``"trn3"`` (the largest values round without saturating), ``emax`` for
    ``"ocp"`` (the OCP MX sample algorithm)."""
    fmt = element_format(fmt, "format")
    _rule(scale_rule, "scale_emax")
    return fmt.emax - (1 if scale_rule == "trn3" else 0)


def max_code(fmt):
    """Encoding of the largest finite magnitude of an element format (saturation target)."""
    fmt = element_format(fmt, "format")
    return int(encode(fmt.max_finite, fmt))


def group_nan_code(fmt):
    """Element code of every element of a group holding NaN or Inf: the canonical NaN
    (``0x7F`` e4m3fn, ``0x7E`` e5m2), or ``0x0`` for e2m1fn, which has no NaN."""
    fmt = element_format(fmt, "format")
    return QNAN[fmt.name] if fmt.has_nan else 0


#: Scale partition of data partition ``p``: the MX matmul's layout, one definition for both.
scale_partition = mx_scale_partition


def _source(values, what):
    arr = np.asarray(values)
    try:
        fmt = format_of_dtype(arr.dtype)
    except ValueError:
        fmt = None
    if fmt is None or fmt.name not in SOURCE_FORMATS:
        raise ValueError(
            f"{what}: src dtype {arr.dtype} is not a QuantizeMX source format; "
            f"allowed: bfloat16 (bf16), float16 (fp16)"
        )
    return arr, fmt


def _quantize(x, fmt, rule):
    """Element codes ``[G, 32]`` and scale bytes ``[G]`` of exact float64 groups ``x``."""
    special = ~np.isfinite(x).all(axis=1)
    finite = np.where(np.isfinite(x), x, 0.0)
    amax = np.abs(finite).max(axis=1) if x.shape[1] else np.zeros(x.shape[0])
    # The FP32 exponent field of the maximum: every BF16 / FP16 value is an FP32 value exactly.
    e_field = (amax.astype(np.float32).view(np.uint32) >> 23).astype(np.int64) & 0xFF
    scale = np.clip(e_field - scale_emax(fmt, rule), 0, 254)
    scaled = np.ldexp(finite, (_FP32.bias - scale)[:, None].astype(np.int32))
    codes = round_to_format(scaled, fmt).astype(np.int64)
    # Round once, then saturate: a magnitude above the largest finite one (e4m3fn's NaN code,
    # e5m2's Inf; FP4 saturates already) becomes the largest finite one, keeping the sign.
    sign = 1 << (fmt.bits - 1)
    top = max_code(fmt)
    codes = np.where((codes & (sign - 1)) > top, (codes & sign) | top, codes)
    codes = np.where(special[:, None], group_nan_code(fmt), codes)
    scale = np.where(special, SCALE_NAN, scale)
    return codes.astype(np.uint8), scale.astype(np.uint8)


def quantize_groups(values, out_dtype, *, scale_rule="trn3"):
    """QuantizeMX on groups given in group order: what one RTL beat carries per group.

    Parameters
    ----------
    values : ndarray [G, 32] of bfloat16 or float16
        Group ``g``'s element ``4 * r + j`` is partition ``r`` (0..7) of the group, free
        element ``j`` (0..3) of its quad.
    out_dtype : str, Format or ml_dtypes dtype
        ``fp8_e4m3fn``, ``fp8_e5m2`` or ``fp4_e2m1fn``.
    scale_rule : str
        ``"trn3"`` (default) or ``"ocp"``.

    Returns
    -------
    codes : ndarray [G, 32] of uint8
        Element encodings (FP4 in the low 4 bits).
    scales : ndarray [G] of uint8
        E8M0 scale bytes.
    """
    what = "quantize_groups"
    arr, src_fmt = _source(values, what)
    fmt = element_format(out_dtype)
    rule = _rule(scale_rule, what)
    if arr.ndim != 2 or arr.shape[1] != GROUP_SIZE:
        raise ValueError(
            f"{what}: values must be a [G, {GROUP_SIZE}] array (one group of 8 partitions x 4 "
            f"elements per row), not shape {arr.shape}"
        )
    return _quantize(decode(arr, src_fmt), fmt, rule)


def quantize_mx(src, out_dtype, *, scale_rule="trn3"):
    """The QuantizeMX instruction: quantize an SBUF tile ``[P, F]`` to MX data and scales.

    Parameters
    ----------
    src : ndarray [P, F] of ml_dtypes.bfloat16 or numpy.float16
        ``P`` a positive multiple of 32, ``F`` a positive multiple of 4.  A group is partitions
        ``8g .. 8g + 7`` by free elements ``4f .. 4f + 3``.
    out_dtype : str, Format or ml_dtypes dtype
        The element format: ``fp8_e4m3fn``, ``fp8_e5m2`` or ``fp4_e2m1fn`` (names as
        :func:`ncrtl.model.fp.get_format` takes them, or ``ml_dtypes.float8_e4m3fn``, ...).
    scale_rule : str
        ``"trn3"`` (default: ``emax' = emax - 1``) or ``"ocp"`` (``emax' = emax``).

    Returns
    -------
    data : ndarray [P, F/4, 4] of the element dtype
        ``data[p, f, j]`` is the quantization of ``src[p, 4f + j]``.
    scales : ndarray [P, F/4] of uint8
        The scale of the group of data partition ``p``, column ``f``, at partition
        :func:`scale_partition` ``(p)``: 4 used partitions per 32-partition quadrant; the other
        28 are 0.  The layout the MX matmul reads.

    Raises
    ------
    ValueError
        A src that is not 2-D, not BF16 / FP16, or of a bad shape; an unknown ``out_dtype`` or
        ``scale_rule``.
    """
    what = "quantize_mx"
    arr = np.asarray(src)
    if arr.ndim != 2:
        raise ValueError(f"{what}: src must be a 2-D [P, F] array, not {arr.ndim}-D {arr.shape}")
    arr, src_fmt = _source(arr, what)
    fmt = element_format(out_dtype)
    rule = _rule(scale_rule, what)
    P, F = arr.shape
    if P < QUADRANT or P % QUADRANT:
        raise ValueError(
            f"{what}: P={P} partitions is not a positive multiple of {QUADRANT} (a group spans "
            f"{GROUP_ROWS} partitions and every {QUADRANT}-partition quadrant holds its groups' "
            f"scales)"
        )
    if F < GROUP_COLS or F % GROUP_COLS:
        raise ValueError(
            f"{what}: F={F} free elements is not a positive multiple of {GROUP_COLS} (a group "
            f"takes {GROUP_COLS} consecutive free elements of each of its partitions)"
        )
    codes, group_scales = _quantize(sbuf_groups(decode(arr, src_fmt)), fmt, rule)
    data, scales = sbuf_tiles(codes, group_scales, P, F)
    return from_bits(data, fmt), scales


def sbuf_groups(tile):
    """The groups of an SBUF tile ``[P, F]`` (any dtype) in group order, ``[P/8 * F/4, 32]``:
    group ``(r, c)`` (partitions ``8r ..``, free elements ``4c ..``) is row ``r * F/4 + c``,
    its element ``4 * i + j`` the tile's ``[8r + i, 4c + j]`` (the order of
    :func:`quantize_groups` and of the RTL's beats)."""
    t = np.asarray(tile)
    P, F = t.shape
    R, C = P // GROUP_ROWS, F // GROUP_COLS
    return t.reshape(R, GROUP_ROWS, C, GROUP_COLS).transpose(0, 2, 1, 3).reshape(R * C, GROUP_SIZE)


def sbuf_tiles(codes, group_scales, P, F):
    """The inverse of :func:`sbuf_groups` for QuantizeMX outputs: element codes ``[G, 32]`` and
    group scales ``[G]`` of a ``[P, F]`` tile to ``(data [P, F/4, 4], scales [P, F/4])``, the
    scales at their :func:`scale_partition` (the other partitions 0)."""
    R, C = P // GROUP_ROWS, F // GROUP_COLS
    codes = np.asarray(codes)
    data = codes.reshape(R, C, GROUP_ROWS, GROUP_COLS).transpose(0, 2, 1, 3).reshape(P, C, 4)
    scales = np.zeros((P, C), dtype=np.uint8)
    scales[scale_partition(np.arange(R) * GROUP_ROWS)] = np.asarray(group_scales).reshape(R, C)
    return data, scales
