"""Golden model of one Tensor Engine matmul (``nc_matmul``): values bit for bit as the PE chain.

The contract is docs/tensor_engine.md ("Instruction semantics") on top of docs/numerics.md.  One
call is one LoadStationary + MultiplyMoving pair on a ``rows x cols`` array:

* **matmul**: ``out[m, n]`` is the FP32 psum leaving the bottom of PE column ``m`` for moving
  vector ``n``: ``p = +0.0``; for ``k = 0 .. K-1``: ``p = round_fp32(p + s[k, m] * x[k, n])``
  (double_row: ``round_fp32(p + s[k,0,m]*x[k,0,n] + s[k,1,m]*x[k,1,n])``), each step one correctly
  rounded :func:`ncrtl.model.fp.fp32_dot_add`.
* **transpose**: ``out[m, n]`` is the raw encoding of ``stationary[k, m]`` for the single ``k``
  with ``moving[k, n] == 1``; no arithmetic, so NaN payloads survive.
* **MX** (:func:`matmul_mx`, ``nc_matmul_mx``): stationary ``[K, M, 4]`` and moving ``[K, N, 4]``
  MXFP8 / MXFP4 elements with E8M0 scales; PE row ``p`` computes
  ``round_fp32(p + 2**(Es + Ex - 254) * sum_j s[p, m, j] * x[p, n, j])`` in one rounding, a NaN
  scale (0xFF) giving NaN.

Every rule is checked through :func:`ncrtl.model.tensor_engine.isa.check` on the LS / MM instructions
built from the arguments, so the golden and the RTL reject exactly the same instructions; the
golden raises :class:`InstructionError` (a ``ValueError``) with the rule's message and code.
"""

from dataclasses import replace

import numpy as np

from ncrtl.model.fp import (
    QNAN,
    Format,
    check_ieee_float32,
    decode,
    decode_float32,
    format_of_dtype,
    fp32_dot_add,
    fp32_sum_rounder,
    get_format,
    to_bits,
    two_sum,
)
from ncrtl.model.modes import ENGINE_MODES, get_mode, mode_by_code, operand_formats

from .isa import Error, Instruction, Mode, Op, check, check_array

__all__ = [
    "matmul",
    "instructions",
    "mx_instructions",
    "matmul_mx",
    "matmul_mx_rows",
    "mx_row_scales",
    "mx_scale_partition",
    "mx_scale_partitions",
    "MX_GROUP_PARTITIONS",
    "QUADRANT",
    "matmul_bits",
    "result_bits",
    "mode_of",
    "InstructionError",
    "OPERAND_FORMATS",
    "PERF_MODES",
]

#: Formats a Tensor Engine operand of :func:`matmul` may have (TF32 is float32 data with
#: ``*_format="tf32"``).  The MX element formats are :func:`matmul_mx`'s.
OPERAND_FORMATS = operand_formats([m for m in ENGINE_MODES if not m.scale])

#: The MX mode (``nc_matmul_mx``): a row of the mode table.
MX_MODE = get_mode("mx")

#: Partitions of one MX scale group (x 4 packed elements = 32 elements along the contraction).
MX_GROUP_PARTITIONS = 8

#: Partitions of an SBUF quadrant; each holds the scales of its 32 data partitions in its first
#: ``QUADRANT // MX_GROUP_PARTITIONS`` = 4 partitions.
QUADRANT = 32

#: Accepted ``perf_mode`` values (None: one product per PE step).
PERF_MODES = (None,) + tuple(m.perf_mode for m in ENGINE_MODES if m.perf_mode)


class InstructionError(ValueError):
    """A rule of the Tensor Engine contract is violated.

    Attributes
    ----------
    error : isa.Error
        The error code the RTL raises on ``o_error_code`` for the same instruction
        (``Error.NONE`` for argument errors that have no instruction encoding, e.g. a wrong dtype).
    """

    def __init__(self, message, error=Error.NONE):
        super().__init__(message)
        self.error = Error(error)


def _format(spec, what):
    """The :class:`ncrtl.model.fp.Format` of a dtype, a dtype-like or a format name."""
    if isinstance(spec, Format):
        return spec
    if isinstance(spec, str):
        try:
            return get_format(spec)
        except ValueError:
            pass  # maybe a dtype name such as "float32"
    try:
        return format_of_dtype(spec)
    except (TypeError, ValueError):
        raise InstructionError(
            f"{what} format {spec!r} is not a Tensor Engine operand format; "
            f"allowed: {', '.join(OPERAND_FORMATS)}"
        ) from None


def mode_of(stationary, moving, perf_mode=None):
    """Mode and format indices of an instruction on operands of the given formats.

    Parameters
    ----------
    stationary, moving : numpy dtype, dtype-like, format name or ncrtl.model.fp.Format
        Operand formats (a format name such as ``"tf32"`` or ``"fp8_e5m2"``, or a dtype such as
        ``ml_dtypes.bfloat16``; a float32 dtype means fp32).
    perf_mode : None or "double_row"

    Returns
    -------
    (Mode, int, int)
        ``(mode, fmt_s, fmt_m)``: the engine mode (:data:`ncrtl.model.modes.ENGINE_MODES`)
        that multiplies the two formats (the one ``perf_mode`` names, else the first without a
        ``perf_mode``) and the formats' indices in its ``formats_s`` / ``formats_m``.

    Raises
    ------
    InstructionError
        For a format that is no operand format, fp32/tf32 mixed with another format, a pair no
        mode multiplies (bf16 x fp16), a format the ``perf_mode`` does not take, or an unknown
        ``perf_mode``: pairs no instruction can encode.
    """
    if perf_mode not in PERF_MODES:
        raise InstructionError(
            f"perf_mode {perf_mode!r} is not supported; allowed: {', '.join(map(repr, PERF_MODES))}"
        )
    fs = _format(stationary, "stationary")
    fm = _format(moving, "moving")
    for f, side in ((fs, "stationary"), (fm, "moving")):
        if f.name not in OPERAND_FORMATS and f.name in MX_MODE.formats_s + MX_MODE.formats_m:
            raise InstructionError(
                f"{side} format {f.name} is an MX element format: MX matmuls take block "
                f"scales (matmul_mx)",
                Error.FORMAT,
            )
        if f.name not in OPERAND_FORMATS:
            raise InstructionError(
                f"{side} format {f.name} is not a Tensor Engine operand "
                f"format; allowed: {', '.join(OPERAND_FORMATS)}",
                Error.FORMAT,
            )
    pair = f"{fs.name} x {fm.name}"
    if perf_mode is not None:
        mode = next(m for m in ENGINE_MODES if m.perf_mode == perf_mode)
        for f, side, names in ((fs, "stationary", mode.formats_s), (fm, "moving", mode.formats_m)):
            if f.name not in names:
                raise InstructionError(
                    f"{mode.name} {side} format {f.name} is not allowed "
                    f"({pair}); allowed: {', '.join(names)}",
                    Error.FORMAT,
                )
    else:
        mode = next(
            (
                m
                for m in ENGINE_MODES
                if m.perf_mode is None
                and not m.scale
                and fs.name in m.formats_s
                and fm.name in m.formats_m
            ),
            None,
        )
    if mode is None:
        wide = {"fp32", "tf32"}
        if (fs.name in wide) != (fm.name in wide):
            raise InstructionError(
                f"fp32/tf32 operands cannot be mixed with narrower formats, got {pair}",
                Error.FORMAT,
            )
        raise InstructionError(
            f"stationary and moving formats must be equal outside the fp8 modes, got {pair}",
            Error.FORMAT,
        )
    return Mode(mode.code), mode.formats_s.index(fs.name), mode.formats_m.index(fm.name)


def _operand(arr, fmt, what):
    """``(ndarray, Format)`` of one operand, checking its dtype against its format."""
    a = np.asarray(arr)
    try:
        dfmt = format_of_dtype(a.dtype)
    except ValueError:
        dfmt = None
    if dfmt is not None and dfmt.name not in OPERAND_FORMATS and dfmt.name in MX_MODE.formats_s:
        raise InstructionError(
            f"{what} dtype {a.dtype}: {dfmt.name} is an MX element format; MX matmuls take "
            f"block scales (matmul_mx)"
        )
    if dfmt is None or dfmt.name not in OPERAND_FORMATS:
        raise InstructionError(
            f"{what} dtype {a.dtype} is not a Tensor Engine operand dtype; "
            f"allowed: float32, bfloat16, float16, float8_e4m3, "
            f"float8_e4m3fn, float8_e5m2, float8_e3m4"
        )
    if fmt is None:
        return a, dfmt
    f = _format(fmt, f"{what}_format")
    if f is dfmt or (f.name == "tf32" and dfmt.name == "fp32"):
        return a, f
    raise InstructionError(
        f"{what}_format {f.name} does not match the {what} dtype {a.dtype} "
        f"(tf32 takes float32 data; other formats must equal the dtype's)"
    )


def _pair(name, value):
    """A 2-tuple of ints, or InstructionError naming the argument."""
    try:
        a, b = value
        if int(a) != a or int(b) != b:
            raise ValueError
        a, b = int(a), int(b)
    except (TypeError, ValueError):
        raise InstructionError(
            f"{name} must be a pair of integers, got {value!r}", Error.TILE
        ) from None
    # A zero size would read as "whole array" in the instruction word: reject it here.
    if name == "tile_size" and (a <= 0 or b <= 0):
        raise InstructionError(f"tile_size {(a, b)} must hold positive integers", Error.TILE)
    return a, b


def _instructions(
    mode, fmt_s, fmt_m, k, m, n, transpose, tile_position, tile_size, bf16_out=False, sparse=0
):
    """The LS and MM of one call (tile fields filled in only when tiling is requested;
    ``sparse`` the compression ratio of a sparse matmul)."""
    if (tile_position is None) != (tile_size is None):
        raise InstructionError(
            "tile_position and tile_size must be given together "
            f"(got tile_position={tile_position!r}, tile_size={tile_size!r})",
            Error.TILE,
        )
    tile = {}
    if tile_size is not None:
        r0, c0 = _pair("tile_position", tile_position)
        tr, tc = _pair("tile_size", tile_size)
        tile = dict(tile_row=r0, tile_rows=tr, tile_col=c0, tile_cols=tc)
    ls = Instruction(
        Op.LS, mode, k=k, m=m, fmt_s=fmt_s, fmt_m=fmt_m, transpose=transpose, sparse=sparse, **tile
    )
    return ls, replace(ls, op=Op.MM, n=n, bf16_out=bf16_out)


#: Calls that passed :func:`_validate`, by everything its rules read (dtypes, shapes and the
#: arguments, never the values): ``(fs, fm, mode, (K, M, N))``.  A kernel repeats a handful
#: of matmul shapes thousands of times.
_VALID = {}
_VALID_MAX = 4096


def _validate(
    stationary,
    moving,
    perf_mode,
    is_transpose,
    tile_position,
    tile_size,
    rows,
    cols,
    stationary_format,
    moving_format,
    tile_unit=32,
):
    """Check every rule; return ``(s, fs, x, fm, mode, (K, M, N))``."""
    s, x = np.asarray(stationary), np.asarray(moving)
    key = hit = None
    tiles = (tile_position, tile_size)
    if all(t is None or isinstance(t, (tuple, list)) for t in tiles):
        key = (s.dtype, s.shape, x.dtype, x.shape, perf_mode, bool(is_transpose))
        key += tuple(t if t is None else tuple(t) for t in tiles)
        # the array sizes' types too: rows=128.0 breaks a rule that rows=128 keeps
        key += tuple((type(v), v) for v in (rows, cols, tile_unit))
        key += (stationary_format, moving_format)
        try:
            hit = _VALID.get(key)
        except TypeError:  # an argument that is no value (a list as a format): checked anew
            key = None
    if hit is not None:
        return (s, hit[0], x, hit[1]) + hit[2:]
    got = _check_rules(
        s,
        x,
        perf_mode,
        is_transpose,
        tile_position,
        tile_size,
        rows,
        cols,
        stationary_format,
        moving_format,
        tile_unit,
    )
    if key is not None and len(_VALID) < _VALID_MAX:
        _VALID[key] = (got[1], got[3]) + got[4:]
    return got


def _check_rules(
    stationary,
    moving,
    perf_mode,
    is_transpose,
    tile_position,
    tile_size,
    rows,
    cols,
    stationary_format,
    moving_format,
    tile_unit,
):
    """:func:`_validate` without its memory of earlier calls."""
    _array_size(rows, cols, tile_unit)
    s, fs = _operand(stationary, stationary_format, "stationary")
    x, fm = _operand(moving, moving_format, "moving")
    mode, fmt_s, fmt_m = mode_of(fs, fm, perf_mode)
    products = mode_by_code(mode).products
    if products > 1:
        want = f"[K, {products}, M] and [K, {products}, N] ({mode_by_code(mode).name})"
        ok = s.ndim == 3 and x.ndim == 3 and s.shape[1] == products and x.shape[1] == products
    else:
        want = "[K, M] and [K, N]"
        ok = s.ndim == 2 and x.ndim == 2
    if not ok:
        raise InstructionError(
            f"operand shapes must be {want}, got stationary {s.shape} and moving {x.shape}"
        )
    k, m, n = s.shape[0], s.shape[-1], x.shape[-1]
    _check_pair(
        (mode, fmt_s, fmt_m, bool(is_transpose)),
        s,
        x,
        (m, n),
        tile_position,
        tile_size,
        rows,
        cols,
        tile_unit,
    )
    return s, fs, x, fm, mode, (k, m, n)


def instructions(
    stationary,
    moving,
    *,
    perf_mode=None,
    is_transpose=False,
    tile_position=None,
    tile_size=None,
    rows=128,
    cols=128,
    stationary_format=None,
    moving_format=None,
    tile_unit=32,
):
    """The LoadStationary and MultiplyMoving of one :func:`matmul` call, every rule of
    :func:`matmul` checked but nothing computed: the operands need only their shapes and
    dtypes (``np.broadcast_to`` of one element will do).  What a kernel's Tensor Engine
    stream carries; raises :class:`InstructionError` as :func:`matmul` does."""
    _, fs, _, fm, _, (k, m, n) = _validate(
        stationary,
        moving,
        perf_mode,
        is_transpose,
        tile_position,
        tile_size,
        rows,
        cols,
        stationary_format,
        moving_format,
        tile_unit,
    )
    mode, fmt_s, fmt_m = mode_of(fs, fm, perf_mode)
    return _instructions(mode, fmt_s, fmt_m, k, m, n, bool(is_transpose), tile_position, tile_size)


def mx_instructions(
    stationary,
    moving,
    *,
    tile_position=None,
    tile_size=None,
    rows=128,
    cols=128,
    tile_unit=32,
    psum_dtype="fp32",
):
    """The LoadStationary and MultiplyMoving of one :func:`matmul_mx_rows` call (operands
    ``[K, M, 4]`` / ``[K, N, 4]`` of MX element dtypes), its rules checked, nothing
    computed."""
    bf16_out = _psum_dtype(psum_dtype)
    s, fs = _mx_operand(stationary, "stationary")
    x, fm = _mx_operand(moving, "moving")
    _array_size(rows, cols, tile_unit)
    fmt_s, fmt_m = MX_MODE.formats_s.index(fs.name), MX_MODE.formats_m.index(fm.name)
    op = (Mode(MX_MODE.code), fmt_s, fmt_m, False)
    mn = (s.shape[1], x.shape[1])
    _check_pair(op, s, x, mn, tile_position, tile_size, rows, cols, tile_unit, bf16_out=bf16_out)
    mode, fmt_s, fmt_m, transpose = op
    return _instructions(
        mode, fmt_s, fmt_m, s.shape[0], *mn, transpose, tile_position, tile_size, bf16_out
    )


def _array_size(rows, cols, tile_unit):
    """:func:`isa.check_array`: the array sizes the instruction word encodes."""
    bad = check_array(rows, cols, tile_unit)
    if bad is not None:
        raise InstructionError(bad)


def _check_pair(
    op, s, x, mn, tile_position, tile_size, rows, cols, tile_unit, *, bf16_out=False, sparse=0
):
    """The rules of the LS + MM pair of one call: ``op`` = ``(mode, fmt_s, fmt_m,
    transpose)``, ``s`` / ``x`` the operands (same K), ``mn`` = ``(M, N)``, ``bf16_out`` the
    MM's result dtype flag, ``sparse`` its compression ratio (0: dense); raises :class:`InstructionError` with :func:`isa.check`'s message
    and code."""
    if s.shape[0] != x.shape[0]:
        raise InstructionError(
            f"stationary and moving must have the same K (partitions), got "
            f"stationary {s.shape} and moving {x.shape}"
        )
    mode, fmt_s, fmt_m, transpose = op
    ls, mm = _instructions(
        mode, fmt_s, fmt_m, s.shape[0], *mn, transpose, tile_position, tile_size, bf16_out, sparse
    )
    for ins, st in ((ls, None), (mm, ls)):
        bad = check(ins, rows, cols, st, tile_unit=tile_unit)
        if bad is not None:
            raise InstructionError(bad[1], bad[0])


def matmul(
    stationary,
    moving,
    *,
    perf_mode=None,
    is_transpose=False,
    tile_position=None,
    tile_size=None,
    rows=128,
    cols=128,
    stationary_format=None,
    moving_format=None,
    tile_unit=32,
):
    """Golden result of one Tensor Engine matmul or transpose.

    Parameters
    ----------
    stationary : ndarray ``[K, M]`` (double_row: ``[K, 2, M]``)
        Weights; dtype float32, ``ml_dtypes.bfloat16``, float16 or ``ml_dtypes.float8_e4m3``,
        ``float8_e4m3fn``, ``float8_e5m2``, ``float8_e3m4``.
    moving : ndarray ``[K, N]`` (double_row: ``[K, 2, N]``)
        Moving data, same dtype rules.  In double_row, element ``(p, j)`` is contraction index
        ``j*128 + p`` and PE row ``p`` computes both products in one fused step.
    perf_mode : None or "double_row"
    is_transpose : bool
        Transpose: ``moving`` must be a selection matrix (every entry exactly 0 or 1 in the
        moving format, at most one 1 per column; -0 counts as 0).
    tile_position, tile_size : (int, int) or None
        Both or neither.  Only validated (row tiles ``(64|32, cols)`` at ``(r0, 0)``, column
        tiles ``(rows, 64|32)`` at ``(0, c0)``, positions multiples of the size); the values are
        those of the same matmul on the whole array.
    rows, cols : int
        Array size (128 x 128 on the hardware), each in 1..255 (:data:`isa.MAX_ARRAY`: what the
        instruction's 8-bit fields encode).
    stationary_format, moving_format : str or None
        ``"tf32"`` reads float32 data as TF32 (low 13 mantissa bits ignored); any other name must
        be the dtype's own format.
    tile_unit : int
        32 on the hardware; a smaller value scales the tile-size rules like :func:`isa.check`
        (engines built with a small ``tile_unit`` for tests).

    Returns
    -------
    ndarray ``[M, N]``
        matmul: float32 (use :func:`result_bits` for the encodings).  Transpose: the raw
        stationary encodings, uint16 for 8- and 16-bit formats (FP8 in the low byte, upper byte
        zero) and uint32 for fp32 / tf32 (the whole 32-bit container, TF32's low bits included:
        data movement does not interpret them).

    Raises
    ------
    InstructionError (ValueError)
        For every rule violation, with the message of :func:`isa.check` where the rule is an
        instruction rule (and its code in ``.error``), or a message naming the argument rule
        (dtype, shape, format pairing, selection matrix).
    """
    s, fs, x, fm, mode, (k, m, n) = _validate(
        stationary,
        moving,
        perf_mode,
        is_transpose,
        tile_position,
        tile_size,
        rows,
        cols,
        stationary_format,
        moving_format,
        tile_unit,
    )
    if is_transpose:
        return _transpose(s, fs, x, fm)
    # The psum chain of column m for moving vector n, all (m, n) at once: one fused, correctly
    # rounded step per PE row, starting from +0.0 (the first row of the tile adds to +0).
    if mode_by_code(mode).products == 1:
        if _short_products(fs, fm):
            bits = _precision(fs) + _precision(fm)
            return _chain_short(decode_float32(s, fs), decode_float32(x, fm), bits)
        return _chain_two_sum(decode(s, fs), decode(x, fm))
    return _chain_double_row(s, x, fs, fm)  # the other mode nc_matmul takes (MX: matmul_mx)


#: Most significand bits of a product for which one float64 addition, then the float64 ->
#: float32 conversion, is the correctly rounded ``round_fp32(psum + product)``
#: (:func:`_chain_float64`, where the bound is proved).
SHORT_PRODUCT_BITS = 24


def _precision(fmt):
    f = get_format(fmt)
    return f.man_bits + 1 - f.ignored_low_bits


def _short_products(fs, fm):
    """The products of ``fs x fm`` operands have at most :data:`SHORT_PRODUCT_BITS` significand
    bits: bf16 16, fp16 and tf32 22, the fp8 pairs 8 at most (fp32 and fp32 x tf32 do not)."""
    return _precision(fs) + _precision(fm) <= SHORT_PRODUCT_BITS


#: Exponent of float32's last bit: a value of at most 24 significand bits whose last bit is at
#: or above ``2**-149`` and whose magnitude is below ``2**128`` is a float32.
_FP32_LAST_BIT = -149

_MAGNITUDE = np.uint32(0x7FFFFFFF)
_INF_BITS = np.uint32(0x7F800000)


def _magnitudes(v):
    """Per row of a float32 array ``[K, X]``: its largest finite and its least nonzero
    magnitude (float64; 0 and inf where the row has none), from the encodings, whose order
    is the magnitudes' order (NaN above infinity)."""
    a = v.view(np.uint32) & _MAGNITUDE
    hi = a.max(axis=1, initial=0)
    if (hi >= _INF_BITS).any():
        hi = np.where(a < _INF_BITS, a, 0).max(axis=1, initial=0)
    # zero wraps past every other encoding, so the least of a - 1 is the least nonzero's
    lo = (a - np.uint32(1)).min(axis=1, initial=0xFFFFFFFF) + np.uint32(1)
    lo = np.where((lo == 0) | (lo >= _INF_BITS), _INF_BITS, lo)
    return hi.view(np.float32).astype(np.float64), lo.view(np.float32).astype(np.float64)


def float32_steps(s32, x32, bits):
    """Per step ``k`` of a chain, whether every product ``s32[k, m] * x32[k, n]`` of finite
    operands is a float32 value, so that float32 multiplication computes it exactly.  ``s32
    [K, M]``, ``x32 [K, N]``: the operands' exact values as float32; ``bits``: the most
    significand bits a product has (at most 24).  Zeros, infinities and NaN take no part
    (their float32 products are the exact ones: signed zeros, infinities, NaN).

    A product ``q`` of ``bits`` significand bits is a float32 when ``|q| < 2**128`` and its
    last bit is at or above ``2**-149``.  Its last bit is the product of the operands' last
    bits, each above ``|v| * 2**-p`` for a value of ``p`` significand bits (its leading bit is
    above ``|v| / 2``), so it is above ``|q| * 2**-bits``: when the product of the step's
    least nonzero magnitudes, one per operand, is at least ``2**(bits - 149)``, every
    product's last bit is above ``2**-149``; when the product of the largest finite ones is
    below ``2**128``, so is every product.  Data away from the ends of float32's range (any
    ML tensor) passes; a step holding a product in float32's subnormal range, or past its
    largest value, does not."""
    hs, ls = _magnitudes(s32)
    hx, lx = _magnitudes(x32)
    with np.errstate(over="ignore"):
        return (hs * hx < 2.0**128) & (ls * lx >= 2.0 ** (bits + _FP32_LAST_BIT))


def _negative_zero(p):
    """Whether a float32 array holds -0."""
    return bool((p.view(np.uint32) == np.uint32(0x80000000)).any())


def _chain_short(s32, x32, bits):
    """The psum chains of a one-product mode with short products (``bits`` significand bits
    at most, :func:`_short_products`), ``s32 [K, M]`` and ``x32 [K, N]`` the operands' exact
    values as float32 (every operand format of these modes is a subset of float32).  A step
    whose products are all float32 values (:func:`float32_steps`: every step of data away
    from the ends of float32's range) is computed in float32: the products by float32
    multiplication, exact, then one float32 addition ``p + q`` of two float32 values, which
    IEEE rounds once to nearest even with gradual underflow and overflow to infinity: the
    contract's ``round_fp32(p + q)`` itself.  Any other step is the float64 step of
    :func:`float64_chain` (its proof there), so each step is exact whichever road it takes,
    and the roads mix freely along a chain.

    Signed zeros: ``np.einsum`` computes the products as ``0 + s * x``, so a product that is
    -0 comes out +0.  That changes nothing while the psum holds no -0: ``p + q`` is -0 only
    for ``p = q = -0``, and the sum of a float32 psum and an exact nonzero float32 product is
    never rounded to zero (it is a nonzero multiple of ``2**-149``).  A psum can become -0 only
    in a float64 step (a negative product too small for float32, rounded to -0); from then on,
    while the psum holds a -0, the products are taken by ``np.multiply``, which keeps their
    signs.  NaN results are the canonical quiet NaN.  The float32 arithmetic is the host's
    IEEE arithmetic, as the float64 -> float32 conversion of :func:`float64_chain` is: a host
    that flushes subnormals to zero is refused (:func:`ncrtl.model.fp.check_ieee_float32`)."""
    check_ieee_float32()
    k, m, n = s32.shape[0], s32.shape[1], x32.shape[1]
    fast = float32_steps(s32, x32, bits).tolist()
    p = np.zeros((m, n), dtype=np.float32)
    q = np.empty((m, n), dtype=np.float32)
    negzero = False
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(k):
            if fast[i] and not negzero:
                np.einsum("i,j->ij", s32[i], x32[i], out=q)
                p += q
            elif fast[i]:
                np.multiply.outer(s32[i], x32[i], out=q)
                p += q
                negzero = _negative_zero(p)
            else:
                t = np.multiply.outer(s32[i].astype(np.float64), x32[i].astype(np.float64))
                t += p
                p = t.astype(np.float32)
                negzero = _negative_zero(p)
    return _canonical_nan(p)


def _chain_float64(sv, xv):
    """The psum chains of a one-product mode with short products, ``sv [K, M]`` and ``xv [K,
    N]`` the operands' exact values (float64): :func:`float64_chain` of their outer
    products."""
    steps = (np.multiply.outer(sv[i], xv[i]) for i in range(sv.shape[0]))
    return float64_chain(steps, sv.shape[1], xv.shape[1])


def float64_chain(products, m, n):
    """The psum chains ``[m, n]`` of a one-product mode with short products
    (:func:`_short_products`), ``products`` yielding each step's products ``q`` (float64
    ``[m, n]``: the exact products of the operands' values).  Step ``k`` is
    computed as one float64 multiplication, one float64 addition and the float64 -> float32
    conversion (round to nearest even, subnormals and overflow included).  That equals the
    contract's ``round_fp32(p + q)``, ``p`` the float32 psum and ``q = s * x``:

    * ``q`` is exact in float64 (at most 24 significand bits; exponents far inside float64's
      range).  Write ``span`` for the bits from a value's leading to its last nonzero bit:
      ``span(p) <= 24``, ``span(q) <= 24``.
    * If the operands' bits overlap, or a gap of ``g`` bits separates them with
      ``span(H) + g + span(L) <= 52`` (``H`` the operand with the higher leading bit, ``L`` the
      other), the sum needs at most 53 bits, carry included: the addition is exact and the
      conversion is the one rounding.
    * Otherwise ``g + span(H) >= 53 - span(L) >= 29``, so ``|L| < 2**(lead(H) - 28)``, less
      than a sixteenth of the float32 spacing at ``H`` (at least ``2**(lead(H) - 24)``, below a
      power of two too).  ``H`` is a float32 value: ``p`` is; ``q`` has at most 24 bits, and
      when it is in the subnormal range its last bit lies above the leading bit of the nonzero
      float32 ``p`` below it, so on the grid ``2**-149``; above the largest float32 it is at
      least ``2**128`` and both results are infinite.  So ``round_fp32(H + L) = H``; the float64
      sum lies between ``H`` and ``H + L`` and converts to ``H`` as well.  A zero operand
      makes the sum exact.

    Signed zeros, infinities and NaN follow IEEE (``+0 + -0 = +0``, ``Inf * 0`` and ``Inf - Inf``
    are NaN); a NaN result is the canonical quiet NaN, as :func:`fp32_dot_add` gives it.
    ``tests/test_model_tensor_engine.py`` checks this path bit for bit against the exact one on
    adversarial operands of every short format pair."""
    p = np.zeros((m, n), dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for q in products:
            q = q + p
            p = q.astype(np.float32)
    nan = np.isnan(p)
    if nan.any():
        p[nan] = np.uint32(QNAN["fp32"]).view(np.float32)
    return p


def _chain_two_sum(sv, xv):
    """The psum chains of a one-product mode with long products (fp32: 48 significand bits,
    exact in float64): step ``k`` is TwoSum of the float32 psum and the product, an exact
    float64 pair ``t + e``, rounded once to FP32 with ``e`` deciding a tie
    (:func:`ncrtl.model.fp.round_fp32_sum`: the residual formed only where the float64 sum
    lies on an FP32 rounding boundary; the rounding of :func:`fp32_dot_add`).  Two terms never
    leave more than one error term, so this is ``fp32_dot_add``'s exact path without its
    per-call checks and general term loop.  IEEE addition gives the signed zeros (``+0 + -0 =
    +0``); a non-finite sum has no residual."""
    shape = (sv.shape[1], xv.shape[1])
    p = np.zeros(shape, dtype=np.float32)
    p64, q = np.empty(shape, np.float64), np.empty(shape, np.float64)
    rounder = fp32_sum_rounder(shape)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(sv.shape[0]):
            np.copyto(p64, p)
            np.multiply.outer(sv[i], xv[i], out=q)
            rounder(p64, q, out=p)
    return _canonical_nan(p)


def _canonical_nan(p):
    """``p`` (float32) with every NaN the canonical quiet NaN."""
    nan = np.isnan(p)
    if nan.any():
        p[nan] = np.uint32(QNAN["fp32"]).view(np.float32)
    return p


def _products_sum_exactly(fs, fm, terms=2):
    """``terms`` finite products of ``fs x fm`` operands always sum exactly in float64, in any
    order: from the smallest subnormal product's last bit to the largest product's leading bit,
    with the carries of ``terms`` addends, there are at most 53 bits (e4m3 pairs: 2**-18 ..
    2**17; not e5m2 x e5m2, 2**-32 .. 2**31)."""
    a, b = get_format(fs), get_format(fm)
    low = (1 - a.bias - a.man_bits) + (1 - b.bias - b.man_bits)  # the least product's bit
    high = int(np.floor(np.log2(a.max_finite))) + int(np.floor(np.log2(b.max_finite))) + 1
    return high - low + 1 + int(np.ceil(np.log2(terms))) <= 53


def _chain_mx(sv, xv, ss, xs):
    """The psum chains of the MX mode when its four products always sum exactly in float64
    (:func:`_products_sum_exactly`: every element pair but e5m2 x e5m2): step ``k`` is the
    products' sum scaled by ``2**(Es + Ex - 254)``, TwoSum with the psum and one rounding
    (:func:`ncrtl.model.fp.round_fp32_sum`); a NaN scale (0xFF) makes the step NaN.  The
    scale is taken into the operands first, ``s * 2**(Es - 127)`` and ``x * 2**(Ex - 127)``:
    powers of two far inside float64's range, so each scaled product is the product times the
    scale and the four still sum exactly (in any order) to the scaled sum; an element of a row
    whose scale is NaN becomes NaN, and so does every product it enters.  ``sv [K, M, 4]``,
    ``xv [K, N, 4]``: the elements' exact values; ``ss [K, M]``, ``xs [K, N]``: the E8M0
    scales of each PE row."""
    sv = _mx_scaled(sv, ss)
    xv = _mx_scaled(xv, xs)
    shape = (sv.shape[1], xv.shape[1])
    p = np.zeros(shape, dtype=np.float32)
    p64, q, r = (np.empty(shape, np.float64) for _ in range(3))
    rounder = fp32_sum_rounder(shape)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(sv.shape[0]):
            np.multiply.outer(sv[i, :, 0], xv[i, :, 0], out=q)
            for j in range(1, sv.shape[2]):
                q += np.multiply.outer(sv[i, :, j], xv[i, :, j], out=r)
            np.copyto(p64, p)
            rounder(p64, q, out=p)
    return _canonical_nan(p)


def _mx_scaled(values, scales):
    """MX element values ``[K, X, 4]`` times their rows' E8M0 scales ``[K, X]`` (``2**(E -
    127)``, exact), NaN where the scale is NaN (0xFF)."""
    with np.errstate(invalid="ignore"):
        out = np.ldexp(values, (scales.astype(np.int32) - 127)[..., None])
        out[scales == 0xFF] = np.nan
    return out


def _chain_double_row(s, x, fs, fm):
    """The psum chains of the double-row mode: step ``k`` adds two FP8 products with one
    rounding.  The two products' sum (plain float64 where it is always exact,
    :func:`_products_sum_exactly`, else TwoSum), then TwoSum of the psum and that sum:
    where the first is exact (always, but for e5m2 products more than about 45 binades apart)
    the step is the exact pair ``t + e`` rounded once (:func:`ncrtl.model.fp.round_fp32_sum`);
    the other elements take :func:`fp32_dot_add`, which handles two error terms."""
    sv, xv = decode(s, fs), decode(x, fm)
    p = np.zeros((sv.shape[2], xv.shape[2]), dtype=np.float32)
    exact_pairs = _products_sum_exactly(fs, fm)
    rounder = fp32_sum_rounder(p.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(sv.shape[0]):
            q1 = np.multiply.outer(sv[i, 0], xv[i, 0])
            q2 = np.multiply.outer(sv[i, 1], xv[i, 1])
            if exact_pairs:
                s1, e1 = q1 + q2, None
            else:
                s1, e1 = two_sum(q1, q2)
            step = rounder(p.astype(np.float64), s1)
            hard = None if e1 is None else (e1 > 0) | (e1 < 0)
            if hard is not None and hard.any():
                mi, ni = np.nonzero(hard)
                step[hard] = fp32_dot_add(
                    p[hard], s[i][:, mi].T, x[i][:, ni].T, a_format=fs, b_format=fm
                )
            p = step
    return _canonical_nan(p)


def _transpose(s, fs, x, fm):
    """Raw-bit selection ``out[m, n] = bits(s[k, m])`` for the ``k`` with ``x[k, n] == 1``."""
    xv = decode(x, fm)
    bad = ~((xv == 0) | (xv == 1))
    if bad.any():
        k, n = (int(i[0]) for i in np.nonzero(bad))
        raise InstructionError(
            f"transpose: moving[{k}, {n}] = {float(xv[k, n])!r} is neither 0 "
            f"nor 1 (moving must be a selection matrix)",
            Error.SELECTION,
        )
    ones = xv == 1
    count = ones.sum(axis=0)
    if (count > 1).any():
        n = int(np.nonzero(count > 1)[0][0])
        ks = [int(i) for i in np.nonzero(ones[:, n])[0]]
        raise InstructionError(
            f"transpose: moving column {n} has a 1 at k = {ks}; a selection "
            f"column has at most one 1",
            Error.SELECTION,
        )
    bits = to_bits(s, fs).astype(np.uint64)
    # At most one 1 per column: the integer product picks that encoding exactly (0 if none).
    out = bits.T @ ones.astype(np.uint64)
    return out.astype(np.uint32 if fs.container_bits == 32 else np.uint16)


def mx_scale_partition(p):
    """Scale partition of data partition ``p`` (int or int array), the quadrant layout of seed
    001 that the MX matmul reads and QuantizeMX writes: ``32 * (p // 32) + (p % 32) // 8``."""
    p = np.asarray(p)
    return QUADRANT * (p // QUADRANT) + (p % QUADRANT) // MX_GROUP_PARTITIONS


def mx_scale_partitions(k):
    """:func:`mx_scale_partition` of every data partition ``p < k``, as an int array ``[k]``."""
    return mx_scale_partition(np.arange(k))


def mx_row_scales(scale, k, what="scale"):
    """The scale byte each of ``k`` PE rows uses: ``scale[32 * (p // 32) + (p % 32) // 8, :]``
    for row ``p``, from an SBUF scale tensor ``[partitions, X]`` of uint8 (E8M0).  Returns
    ``[k, X]`` uint8; a tensor without the partitions the layout reads is an error naming its
    shape and the rule."""
    sc = np.asarray(scale)
    if sc.dtype != np.uint8:
        raise InstructionError(f"{what} must be uint8 (E8M0 bytes), got dtype {sc.dtype}")
    if sc.ndim != 2:
        raise InstructionError(f"{what} must be [partitions, free], got shape {sc.shape}")
    need = int(mx_scale_partitions(k).max()) + 1 if k else 0
    if sc.shape[0] < need:
        raise InstructionError(
            f"{what} has {sc.shape[0]} partitions; K={k} data partitions need at least "
            f"{need} (the scale of partition p is at 32 * (p // 32) + (p % 32) // 8)"
        )
    return sc[mx_scale_partitions(k)]


def _mx_operand(arr, what):
    """``(ndarray [K, X, 4], Format)`` of one MX data operand."""
    a = np.asarray(arr)
    try:
        f = format_of_dtype(a.dtype)
    except ValueError:
        f = None
    names = MX_MODE.formats_s
    if f is None or f.name not in names:
        raise InstructionError(
            f"{what} dtype {a.dtype} is not an MX element dtype; allowed: float8_e4m3fn, "
            f"float8_e5m2, float4_e2m1fn"
        )
    if a.ndim != 3 or a.shape[2] != MX_MODE.products:
        raise InstructionError(
            f"{what} must be [K, free, {MX_MODE.products}] (4 packed elements per partition), "
            f"got shape {a.shape}"
        )
    return a, f


def matmul_mx_rows(
    stationary,
    moving,
    stationary_scale,
    moving_scale,
    *,
    tile_position=None,
    tile_size=None,
    rows=128,
    cols=128,
    tile_unit=32,
    psum_dtype="fp32",
):
    """:func:`matmul_mx` with the scales as the PE rows see them: ``stationary_scale[p, m]`` and
    ``moving_scale[p, n]`` (uint8 ``[K, M]`` / ``[K, N]``) are the E8M0 scales of PE row ``p``
    (:func:`mx_row_scales` of the SBUF tensors).  ``tile_unit`` scales the size rules like
    :func:`isa.check` (32 on the hardware)."""
    bf16_out = _psum_dtype(psum_dtype)
    s, fs = _mx_operand(stationary, "stationary")
    x, fm = _mx_operand(moving, "moving")
    k, m, n = s.shape[0], s.shape[1], x.shape[1]
    for what, sc, free in (
        ("stationary_scale", stationary_scale, m),
        ("moving_scale", moving_scale, n),
    ):
        sc = np.asarray(sc)
        if sc.dtype != np.uint8 or sc.shape != (k, free):
            raise InstructionError(
                f"{what} (per PE row) must be uint8 [{k}, {free}], got {sc.dtype} {sc.shape}"
            )
    _array_size(rows, cols, tile_unit)
    fmt_s, fmt_m = MX_MODE.formats_s.index(fs.name), MX_MODE.formats_m.index(fm.name)
    _check_pair(
        (Mode(MX_MODE.code), fmt_s, fmt_m, False),
        s,
        x,
        (m, n),
        tile_position,
        tile_size,
        rows,
        cols,
        tile_unit,
        bf16_out=bf16_out,
    )
    ss = np.asarray(stationary_scale).astype(np.int32)
    xs = np.asarray(moving_scale).astype(np.int32)
    if _products_sum_exactly(fs.name, fm.name, MX_MODE.products):
        return _chain_mx(decode(s, fs), decode(x, fm), ss, xs)
    p = np.zeros((m, n), dtype=np.float32)
    shape = (m, n, MX_MODE.products)
    for i in range(k):
        nan = (ss[i][:, None] == 0xFF) | (xs[i][None, :] == 0xFF)
        exp = (ss[i][:, None] - 127) + (xs[i][None, :] - 127)
        # A NaN scale makes the step NaN; the chain carries it to the output.
        p = fp32_dot_add(
            p,
            np.broadcast_to(s[i][:, None, :], shape),
            np.broadcast_to(x[i][None, :, :], shape),
            scale_exp=np.where(nan, 0, exp),
            scale_nan=nan,
        )
    return p


def matmul_mx(
    stationary,
    moving,
    stationary_scale,
    moving_scale,
    *,
    tile_position=None,
    tile_size=None,
    rows=128,
    cols=128,
    psum_dtype="fp32",
):
    """Golden result of one MX matmul (``nc_matmul_mx``, NeuronCore-v4).

    Parameters
    ----------
    stationary : ndarray ``[K, M, 4]``
        MX elements, dtype ``ml_dtypes.float8_e4m3fn``, ``float8_e5m2`` or ``float4_e2m1fn``.
        Element ``(p, m, j)`` is contraction index ``j * K + p``; PE row ``p`` holds the 4
        elements of partition ``p``.
    moving : ndarray ``[K, N, 4]``
        Same rules (its own dtype: fp8 x fp4 is allowed).
    stationary_scale, moving_scale : ndarray of uint8 ``[partitions, M]`` / ``[partitions, N]``
        E8M0 scales (bias 127, 0xFF = NaN) in the quadrant layout: the scale of data partition
        ``p`` is at partition ``32 * (p // 32) + (p % 32) // 8``; at least
        ``32 * (K / 32 - 1) + 4`` partitions, the others are ignored.
    tile_position, tile_size : (int, int) or None
        Row tiling only: ``tile_size`` ``(64 | 32, cols)`` at ``(r0, 0)``.
    rows, cols : int
        Array size (128 x 128 on the hardware).
    psum_dtype : ``"fp32"`` or ``"bf16"``
        The dtype PSUM accumulates the result in: N may be up to 512 with ``"fp32"``, up to 1024
        with ``"bf16"`` (a 2 KiB bank row).  The values returned are the FP32 vectors that leave
        the array either way; PSUM's BF16 path rounds them (:mod:`ncrtl.model.psum`).

    Returns
    -------
    ndarray ``[M, N]`` of float32
        ``out[m, n]``: the psum chain ``p = +0``; for ``p`` in ``0 .. K-1``:
        ``p = round_fp32(p + 2**(Es + Ex - 254) * sum_j s[p, m, j] * x[p, n, j])``, one
        rounding per step, subnormals kept, a NaN scale or element giving NaN.

    Raises
    ------
    InstructionError (ValueError)
        K not a multiple of 32 or above the tile, odd M, N above 512 (1024 with ``psum_dtype``
        ``"bf16"``), column tiling, a non-MX dtype, shapes that do not fit, a scale tensor that
        is not uint8 or lacks partitions, an unknown ``psum_dtype``.
    """
    s, _ = _mx_operand(stationary, "stationary")
    x, _ = _mx_operand(moving, "moving")
    k = s.shape[0]
    ss = mx_row_scales(stationary_scale, k, "stationary_scale")
    xs = mx_row_scales(moving_scale, x.shape[0], "moving_scale")
    for what, sc, free in (("stationary_scale", ss, s.shape[1]), ("moving_scale", xs, x.shape[1])):
        if sc.shape[1] != free:
            raise InstructionError(
                f"{what} free size {sc.shape[1]} does not match the data's {free}"
            )
    return matmul_mx_rows(
        s,
        x,
        ss,
        xs,
        tile_position=tile_position,
        tile_size=tile_size,
        rows=rows,
        cols=cols,
        psum_dtype=psum_dtype,
    )


def _psum_dtype(psum_dtype):
    """``bf16_out`` of a ``psum_dtype`` argument (``"fp32"`` or ``"bf16"``)."""
    if psum_dtype not in ("fp32", "bf16"):
        raise InstructionError(
            f"psum_dtype must be 'fp32' or 'bf16' (the PSUM accumulation dtype), not {psum_dtype!r}"
        )
    return psum_dtype == "bf16"


def result_bits(result):
    """Encodings of a :func:`matmul` result: uint32 FP32 bits (a transpose result as is)."""
    r = np.asarray(result)
    return r.view(np.uint32) if r.dtype == np.float32 else r


def matmul_bits(stationary, moving, **kwargs):
    """:func:`matmul` returning encodings: uint32 FP32 bits, or the transpose's raw bits."""
    return result_bits(matmul(stationary, moving, **kwargs))
