"""Matrices a user gives ``ncrtl sim matmul`` (``--stationary S.npy --moving X.npy``), as the
encodings of an operand format.

``numpy.save`` writes an array of an ``ml_dtypes`` dtype (bfloat16, float8_*) as raw bytes
(dtype ``|V2`` / ``|V1``): the dtype's name is lost.  So an operand file may hold

* an array of the format's own dtype (``ml_dtypes.bfloat16`` for bf16, float32 for fp32 and
  tf32), taken as it is;
* raw bytes (``|V1``, ``|V2``, ``|V4``) or unsigned integers of the format's container width
  (uint8 for FP8, uint16 for BF16 / FP16, uint32 for FP32 / TF32), read as its bit patterns;
* numbers of any other float or integer dtype (float64, float32, int, bool), each of which
  must be exactly a value of the format (NaN means the format's NaN, ``-0.0`` stays negative);
  the first one that is not is an error naming its index, its value and the nearest value of
  the format.

TF32 is FP32 data whose 13 low mantissa bits the hardware ignores; they are kept as given.
"""

import numpy as np

from ncrtl.model.fp import decode, encode, format_of_dtype, get_format

__all__ = ["OperandError", "operand_codes", "load_operand"]


class OperandError(ValueError):
    """An operand file that cannot be read as encodings of its format (the message names the
    file, the rule and, for a value, the first offending element)."""


def _index(flat, shape):
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def operand_codes(arr, fmt, what="operand"):
    """The encodings of ``fmt`` (its unsigned storage dtype) of the array ``arr``.

    Parameters
    ----------
    arr : ndarray
        See the module docstring for the dtypes taken.
    fmt : str or Format
        The operand format.
    what : str
        How messages name the array (``"--stationary S.npy"``).

    Raises
    ------
    OperandError
        A dtype that is neither the format's, nor bit patterns of its width, nor numbers; a
        value that is not exactly a value of the format.
    """
    f = get_format(fmt)
    a = np.asarray(arr)
    nbytes = f.container_bits // 8 if f.container_bits >= 8 else 1
    raw = a.dtype.kind == "V" or a.dtype.kind == "u"
    if raw:
        if a.dtype.itemsize != nbytes or (a.dtype.kind == "V" and a.dtype.fields):
            raise OperandError(
                f"{what}: dtype {a.dtype} holds {a.dtype.itemsize}-byte bit patterns; {f.name} "
                f"takes {nbytes}-byte ones (or numbers of a float or signed integer dtype)"
            )
        codes = np.ascontiguousarray(a).view(f.storage_dtype)
        limit = 1 << f.bits if f.container_bits == f.bits else 1 << f.container_bits
        if codes.size and int(codes.max()) >= limit:
            flat = int(np.argmax(codes >= limit))
            raise OperandError(
                f"{what}: element {_index(flat, a.shape)} = {int(codes.flat[flat]):#x} is not a "
                f"{f.name} bit pattern (at most {limit - 1:#x})"
            )
        return codes.reshape(a.shape)
    try:
        own = format_of_dtype(a.dtype)
    except (TypeError, ValueError):
        own = None
    if own is f or (f.name == "tf32" and own is not None and own.name == "fp32"):
        return np.ascontiguousarray(a).view(f.storage_dtype)
    if a.dtype.kind not in "fib" and own is None:
        raise OperandError(
            f"{what}: dtype {a.dtype} is neither {f.name} data, nor {nbytes}-byte bit patterns, "
            f"nor numbers"
        )
    values = decode(a) if own is not None else a.astype(np.float64)
    if not f.has_nan and np.isnan(values).any():
        flat = int(np.argmax(np.isnan(values).reshape(-1)))
        raise OperandError(
            f"{what}: element {_index(flat, a.shape)} is NaN, which {f.name} cannot encode"
        )
    codes = encode(values, f)
    back = decode(codes.astype(f.storage_dtype), f)
    # -0.0 == +0.0 in a float comparison: the sign must survive too (a NaN's need not).
    same = (back == values) & (np.signbit(back) == np.signbit(values))
    same |= np.isnan(back) & np.isnan(values)
    if not same.all():
        flat = int(np.argmin(same.reshape(-1)))
        got, near = float(values.reshape(-1)[flat]), float(back.reshape(-1)[flat])
        if np.isinf(got) and not f.has_inf:
            why = f"{f.name} has no infinity"
        elif abs(got) > f.max_finite:
            why = f"outside the finite range of {f.name}, +-{f.max_finite!r}"
        else:
            why = f"the nearest {f.name} value is {near!r}"
        raise OperandError(
            f"{what}: element {_index(flat, a.shape)} = {got!r} is not exactly representable in "
            f"{f.name} ({why})"
        )
    return codes.astype(f.storage_dtype).reshape(a.shape)


def load_operand(path, fmt, what=None):
    """:func:`operand_codes` of the array in the ``.npy`` file ``path``; an unreadable file is an
    :class:`OperandError` naming it."""
    what = what or str(path)
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise OperandError(f"{what}: cannot read a .npy array: {exc}") from None
    if not isinstance(arr, np.ndarray):
        raise OperandError(
            f"{what}: holds no single array (a .npz archive?); save one with np.save"
        )
    return operand_codes(arr, fmt, what)
