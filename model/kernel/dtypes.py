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

__all__ = ["Dtype", "DTYPES", "dtype_of", "file_dtype", "reference_bound", "FLOAT_NAMES"]


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

    @property
    def unit_roundoff(self):
        """Half the gap above 1 of the format (2^-24 for float32, 2^-8 for bfloat16, 2^-11
        for tfloat32); 0 for integers, bool and the packed types (compared bit for bit)."""
        if not self.is_float:
            return 0.0
        from ncrtl.model.fp.formats import get_format

        f = get_format(self.fmt)
        return 2.0 ** -(f.man_bits - f.ignored_low_bits + 1)

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


def file_dtype(stored, named=None):
    """The :class:`Dtype` of the elements a ``.npy`` file holds: ``stored`` (the numpy dtype of
    its header), ``named`` (the dtype the user names for it, the ``:DTYPE`` of ``A.npy:DTYPE``;
    None if none).

    numpy saves the ml_dtypes types (bfloat16, fp8) as raw bytes (``|V2``, ``|V1``): a name
    says what those bytes are, and must be one of that width.  A typed file (float16, int32
    ...) says what it holds itself: a name, if given, must be that type (or a type stored the
    same way: float32 read as tfloat32, unsigned integers as the packed ``_x4`` types), never a
    reinterpretation of its bits.

    Raises
    ------
    ValueError
        A raw file without a name, a name of another width or type, a type with no NKI name.
    """
    stored = np.dtype(stored)
    raw = stored.kind == "V" and stored.fields is None
    if named is None:
        if raw:
            raise ValueError(
                f"the file holds raw {stored.itemsize}-byte elements (numpy saves bfloat16 and "
                f"fp8 so); name their dtype: {_raw_names(stored.itemsize)}"
            )
        try:
            return dtype_of(stored)
        except ValueError:
            raise ValueError(
                f"the file holds {stored}, not a dtype of the kernels: {', '.join(DTYPES)}"
            ) from None
    d = dtype_of(named)
    if raw:
        if stored.itemsize != d.itemsize:
            raise ValueError(
                f"the file holds raw {stored.itemsize}-byte elements, {d.name} has "
                f"{d.itemsize}: {_raw_names(stored.itemsize)}"
            )
        return d
    if stored != d.storage:
        raise ValueError(
            f"the file holds {stored}, not {d.name}: a :DTYPE names the dtype of raw-byte "
            f"files (bfloat16, fp8); save the array as {d.name}, or leave out the :DTYPE"
        )
    return d


def _raw_names(itemsize):
    """The dtypes a raw file of ``itemsize``-byte elements may hold, as a hint."""
    names = [
        n
        for n, d in DTYPES.items()
        # ml_dtypes' own types (numpy's isbuiltin 2): the ones np.save writes as raw bytes
        if d.itemsize == itemsize and d.packed == 1 and d.storage.isbuiltin == 2
    ]
    if not names:
        return f"no dtype of the kernels has {itemsize}-byte raw elements"
    return "one of " + ", ".join(f":{n}" for n in names)


#: The reference check's bound, in unit roundoffs of the output's dtype (:func:`reference_bound`).
REFERENCE_ROUNDOFFS = 8


def reference_bound(dtype, ref):
    """The largest |error| an output of ``dtype`` may keep from its float64 reference ``ref``
    (``ncrtl run --reference``): :data:`REFERENCE_ROUNDOFFS` unit roundoffs of the dtype times
    the reference's largest magnitude, for every element (normwise: a sum that cancels leaves
    its small elements the absolute error of the large); 0 for integer and bool outputs, which
    must equal it."""
    ref = np.asarray(ref, dtype=np.float64)
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    return REFERENCE_ROUNDOFFS * dtype_of(dtype).unit_roundoff * scale
