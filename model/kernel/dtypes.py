"""The element types a kernel's tensors hold, by their NKI names.

Each name maps to the numpy dtype its bytes are stored and read as, and (for the Tensor Engine)
the number format of :mod:`ncrtl.model.fp` its values have: ``tfloat32`` is float32 storage read
as TF32; the MX ``_x4`` types pack four elements into one 4-byte (FP8) or 2-byte (FP4) element
and are kept as unsigned integers of that size.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["Dtype", "DTYPES", "dtype_of", "FLOAT_NAMES"]


@dataclass(frozen=True)
class Dtype:
    """One element type: ``name`` (NKI's), ``storage`` (numpy dtype of its bytes), ``fmt`` (the
    :mod:`ncrtl.model.fp` format of its values, None for integers), ``packed`` (elements per
    storage element: 4 for the MX ``_x4`` types, else 1)."""

    name: str
    storage: np.dtype
    fmt: str | None = None
    packed: int = 1

    @property
    def itemsize(self):
        return self.storage.itemsize

    @property
    def is_float(self):
        return self.fmt is not None and self.packed == 1

    def __str__(self):
        return self.name


def _d(name, storage, fmt=None, packed=1):
    return Dtype(name, np.dtype(storage), fmt, packed)


DTYPES = {
    d.name: d
    for d in (
        _d("float32", np.float32, "fp32"),
        _d("tfloat32", np.float32, "tf32"),
        _d("bfloat16", ml_dtypes.bfloat16, "bf16"),
        _d("float16", np.float16, "fp16"),
        _d("float8_e4m3", ml_dtypes.float8_e4m3, "fp8_e4m3"),
        _d("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "fp8_e4m3fn"),
        _d("float8_e5m2", ml_dtypes.float8_e5m2, "fp8_e5m2"),
        _d("float8_e3m4", ml_dtypes.float8_e3m4, "fp8_e3m4"),
        _d("float8_e4m3fn_x4", np.uint32, "fp8_e4m3fn", 4),
        _d("float8_e5m2_x4", np.uint32, "fp8_e5m2", 4),
        _d("float4_e2m1fn_x4", np.uint16, "fp4_e2m1fn", 4),
        _d("int8", np.int8),
        _d("uint8", np.uint8),
        _d("int16", np.int16),
        _d("uint16", np.uint16),
        _d("int32", np.int32),
        _d("uint32", np.uint32),
        _d("bool_", np.bool_),
    )
}

#: The names of the float types (what arithmetic instructions read and write).
FLOAT_NAMES = tuple(n for n, d in DTYPES.items() if d.is_float)

_BY_STORAGE = {}
for _d_ in DTYPES.values():
    if _d_.packed == 1 and _d_.name != "tfloat32":
        _BY_STORAGE.setdefault(_d_.storage, _d_)


def dtype_of(value):
    """The :class:`Dtype` of a name, a :class:`Dtype`, or a numpy / ml_dtypes dtype.

    Raises
    ------
    ValueError
        For anything else, listing the names.
    """
    if isinstance(value, Dtype):
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt is not None and dt in _BY_STORAGE:
        return _BY_STORAGE[dt]
    raise ValueError(f"unknown dtype {value!r}; the dtypes are: {', '.join(DTYPES)}")
