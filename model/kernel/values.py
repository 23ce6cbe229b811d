"""What every operation of the kernel golden shares: its error (:class:`KernelError`), the
float32 arithmetic tables of the Vector, Scalar and GpSimd engines (:data:`ALU_OPS`,
:data:`ACTIVATIONS`), the one conversion of a result to its destination's dtype
(:func:`convert`), and the operand helpers of the element-wise operations."""

from __future__ import annotations

import numpy as np

from ncrtl.model.fp import encode, fp32_to_bf16, from_bits, get_format, to_bits
from ncrtl.model.kernel.dtypes import dtype_of

__all__ = [
    "KernelError",
    "ALU_OPS",
    "ACTIVATIONS",
    "convert",
    "where",
    "float32_of",
    "same_elements",
    "scalar_operand",
    "pack_x4",
    "unpack_x4",
]


class KernelError(ValueError):
    """A rule broken while running the streams: the message names the instruction, its
    kernel line and the rule."""


def where(ins):
    """The instruction's ``file:line: call`` and a space, to start an error with."""
    return "" if ins is None else f"{ins.where} "


def _f32(fn):
    return lambda *a: fn(*a).astype(np.float32)


#: Vector-engine ALU operations (float32 numpy), by NKI name.
ALU_OPS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": _f32(np.equal),
    "not_equal": _f32(np.not_equal),
    "greater": _f32(np.greater),
    "greater_equal": _f32(np.greater_equal),
    "less": _f32(np.less),
    "less_equal": _f32(np.less_equal),
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
    "power": np.power,
}

#: Unary operations of ``tensor_scalar`` (operand ignored) and ``activation`` functions.
ACTIVATIONS = {
    "copy": lambda x: x,
    "exp": np.exp,
    "relu": lambda x: np.maximum(x, np.float32(0)),
    "tanh": np.tanh,
    "sigmoid": lambda x: np.float32(1) / (np.float32(1) + np.exp(-x)),
    "silu": lambda x: x / (np.float32(1) + np.exp(-x)),
    "square": np.square,
    "abs": np.abs,
    "sign": np.sign,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: np.float32(1) / np.sqrt(x),
    "reciprocal": lambda x: np.float32(1) / x,
    "log": np.log,
    "softplus": lambda x: np.log1p(np.exp(x)),
}


def convert(values, dtype):
    """Values (any float or int array) as ``dtype`` (a kernel dtype name): floats rounded once
    to nearest even (:func:`ncrtl.model.fp.encode`), integers rounded to nearest even and
    clipped to the type's range."""
    d = dtype_of(dtype)
    v = np.asarray(values)
    if d.packed != 1:
        raise KernelError(f"values cannot be converted to the packed type {d.name}")
    if d.fmt is None:
        if d.storage == np.bool_:
            return v != 0
        info = np.iinfo(d.storage)
        return np.clip(np.rint(v.astype(np.float64)), info.min, info.max).astype(d.storage)
    if d.name == "float32" and v.dtype == np.float32:
        return v.copy()
    if d.name == "bfloat16" and v.dtype == np.float32:
        return fp32_to_bf16(v)  # the contract's FP32 -> BF16 rounding, that of encode
    return from_bits(encode(v.astype(np.float64), get_format(d.fmt)), d.fmt).astype(d.storage)


def float32_of(st, ref, ins):
    v = st.read(ref, ins)
    if ref.element.packed != 1:
        raise KernelError(f"{where(ins)}arithmetic on the packed type {ref.view_dtype}")
    return v.astype(np.float32)


def same_elements(ins, dst, *srcs):
    for src in srcs:
        if src.view_shape[0] != dst.view_shape[0] or src.size != dst.size:
            raise KernelError(
                f"{where(ins)}src {list(src.view_shape)} and dst {list(dst.view_shape)} must have "
                f"the same partitions and elements per partition"
            )


def scalar_operand(st, ins, value, srcs, p):
    """A tensor_scalar / activation operand: a number, or the next ``[P, 1]`` source."""
    if isinstance(value, dict) and "tensor" in value:
        ref = srcs[value["tensor"]]
        return float32_of(st, ref, ins).reshape(p, 1)
    return np.float32(value)


def unpack_x4(v, dtype):
    """A packed ``_x4`` array ``[..., F]`` as ``[..., F, 4]`` elements of its format."""
    d = dtype_of(dtype)
    fmt = get_format(d.fmt)
    if d.itemsize == 4:
        codes = np.ascontiguousarray(v).view(np.uint8).reshape(v.shape + (4,))
    else:  # four 4-bit codes in 16 bits, element j in bits [4j, 4j + 4)
        w = np.asarray(v).astype(np.uint16)[..., None]
        codes = ((w >> (4 * np.arange(4, dtype=np.uint16))) & 0xF).astype(np.uint8)
    return from_bits(codes, fmt)


def pack_x4(elements, dtype):
    d = dtype_of(dtype)
    codes = to_bits(elements, get_format(d.fmt)).astype(np.uint32)
    if d.itemsize == 4:
        return (
            np.ascontiguousarray(codes.astype(np.uint8)).view(np.uint32).reshape(codes.shape[:-1])
        )
    shift = 4 * np.arange(4, dtype=np.uint32)
    return (codes << shift).sum(axis=-1).astype(np.uint16)
