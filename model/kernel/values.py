"""What every operation of the kernel golden shares: its error (:class:`KernelError`), the
float32 arithmetic tables of the Vector, Scalar and GpSimd engines (:data:`ALU_OPS`,
:data:`ACTIVATIONS`), the one conversion of a result to its destination's dtype
(:func:`convert`), and the operand helpers of the element-wise operations."""

from __future__ import annotations

import math

import numpy as np

from ncrtl.model.fp import encode, fp32_to_bf16, from_bits, get_format, to_bits
from ncrtl.model.kernel.dtypes import dtype_of

__all__ = [
    "KernelError",
    "ALU_OPS",
    "ACTIVATIONS",
    "UNARY_OPS",
    "BITVEC_OPS",
    "BITVEC_UNARY",
    "INT_OPS",
    "PARAMETRIC",
    "REDUCE_OPS",
    "ACC_INIT",
    "fold",
    "accumulator",
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
    return lambda *a: np.asarray(fn(*a)).astype(np.float32)


def _f64(fn):
    """A function evaluated on the float32 input in float64 numpy, rounded once to float32
    (the engine's float32 result; the hardware's own approximation is not documented)."""

    def one(x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(np.asarray(x, np.float64))).astype(np.float32)

    return one


def _abs_pick(bigger):
    """``abs_max`` / ``abs_min``: the signed value of the larger / smaller magnitude, ``b``
    on a tie (the reference's ``x if |x| > |y| else y``)."""

    def pick(a, b):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        take_a = np.abs(a) > np.abs(b) if bigger else np.abs(a) < np.abs(b)
        return np.where(take_a, a, b).astype(np.float32)

    return pick


def _logical(fn):
    return lambda a, b: fn(np.asarray(a) != 0, np.asarray(b) != 0).astype(np.float32)


#: Binary arithmetic operators (the reference's "Supported Math Operators", arithmetic): float32
#: operands, a float32 result; comparisons and logical operators give 1.0 / 0.0.  ``bypass``
#: passes its first (data) operand through.
ALU_OPS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": np.power,
    "mod": np.mod,
    "fmod": np.fmod,
    "abs_max": _abs_pick(True),
    "abs_min": _abs_pick(False),
    "equal": _f32(np.equal),
    "not_equal": _f32(np.not_equal),
    "greater": _f32(np.greater),
    "greater_equal": _f32(np.greater_equal),
    "less": _f32(np.less),
    "less_equal": _f32(np.less_equal),
    "logical_and": _logical(np.logical_and),
    "logical_or": _logical(np.logical_or),
    "logical_xor": _logical(np.logical_xor),
    "bypass": lambda a, b: np.asarray(a, np.float32),
}

#: Unary arithmetic operators of ``tensor_scalar`` (the reference's "Arithmetic Unary": the
#: operand is ignored).
UNARY_OPS = {
    "abs": np.abs,
    "square": np.square,
    "relu": lambda x: np.maximum(x, np.float32(0)),
    "rsqrt": _f64(lambda x: 1 / np.sqrt(x)),
    "reciprocal": lambda x: np.float32(1) / x,
}

_MASK32 = (1 << 32) - 1


def _shift(left):
    def shift(a, b):
        n = np.asarray(b, np.int64)
        a = np.asarray(a, np.int64) & _MASK32
        out = (a << np.clip(n, 0, 32)) if left else (a >> np.clip(n, 0, 32))
        return np.where((n < 0) | (n >= 32), 0, out & _MASK32)

    return shift


#: Bitvec operators: the operands' 32-bit patterns (an integer sign- or zero-extended to 32
#: bits), a 32-bit pattern whose low bits the destination keeps; shifts are logical, by the
#: second operand's value (0 to 31; any other count gives 0).
BITVEC_OPS = {
    "bitwise_and": lambda a, b: (np.asarray(a, np.int64) & np.asarray(b, np.int64)) & _MASK32,
    "bitwise_or": lambda a, b: (np.asarray(a, np.int64) | np.asarray(b, np.int64)) & _MASK32,
    "bitwise_xor": lambda a, b: (np.asarray(a, np.int64) ^ np.asarray(b, np.int64)) & _MASK32,
    "left_shift": _shift(True),
    "right_shift": _shift(False),
}

#: The unary bitvec operator (``invert``: the 32-bit pattern's complement).
BITVEC_UNARY = {"invert": lambda a: ~np.asarray(a, np.int64) & _MASK32}

_SQRT2 = np.sqrt(2.0)
_SQRT_2_PI = np.sqrt(2.0 / np.pi)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x


def _sigmoid(x):
    return 0.5 * (1 + np.tanh(0.5 * x))


def _softplus(x):
    return np.logaddexp(0.0, x)


def _gelu(x):
    return 0.5 * x * (1 + _erf(x / _SQRT2))


def _gelu_dx(x):
    return 0.5 * (1 + _erf(x / _SQRT2)) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(_SQRT_2_PI * (x + 0.044715 * x**3)))


def _gelu_sigmoid_dx(x):
    s = _sigmoid(1.702 * x)
    return s + 1.702 * x * s * (1 - s)


def _silu_dx(x):
    s = _sigmoid(x)
    return s * (1 + x * (1 - s))


#: The Scalar Engine's activation functions (the reference's "Supported Activation Functions"),
#: float32 in, float32 out: exact ones in float32 numpy, the others evaluated in float64 numpy
#: and rounded once to float32 (docs/nki/arith.md).  ``prelu`` takes its slope from
#: ``relu_param`` (``activate2``; 0 elsewhere: :data:`PARAMETRIC`).
ACTIVATIONS = {
    "copy": lambda x: x,
    "square": np.square,
    "abs": np.abs,
    "sign": np.sign,
    "relu": lambda x: np.maximum(x, np.float32(0)),
    "sigmoid": _f64(_sigmoid),
    "tanh": _f64(np.tanh),
    "exp": _f64(np.exp),
    "log": _f64(np.log),
    "sqrt": _f64(np.sqrt),
    "rsqrt": _f64(lambda x: 1 / np.sqrt(x)),
    "reciprocal": lambda x: np.float32(1) / x,
    "sin": _f64(np.sin),
    "arctan": _f64(np.arctan),
    "softplus": _f64(_softplus),
    "mish": _f64(lambda x: x * np.tanh(_softplus(x))),
    "erf": _f64(_erf),
    "erf_dx": _f64(lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x)),
    "gelu": _f64(_gelu),
    "gelu_dx": _f64(_gelu_dx),
    "gelu_apprx_tanh": _f64(_gelu_tanh),
    "gelu_apprx_sigmoid": _f64(lambda x: x * _sigmoid(1.702 * x)),
    "gelu_apprx_sigmoid_dx": _f64(_gelu_sigmoid_dx),
    "silu": _f64(lambda x: x * _sigmoid(x)),
    "silu_dx": _f64(_silu_dx),
    "prelu": lambda x: np.maximum(x, np.float32(0)),
}

#: Activation functions that take ``relu_param`` (``prelu``: ``x`` above 0, ``alpha * x``
#: below).
PARAMETRIC = {
    "prelu": lambda x, alpha: np.where(x > 0, x, (x * alpha).astype(np.float32)).astype(np.float32)
}

#: Operators legal as a reduction (the reference's "Legal Reduction op" column).
REDUCE_OPS = (
    "add",
    "subtract",
    "multiply",
    "maximum",
    "minimum",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
)

#: An engine's accumulator registers after a reset, by the reduction operator that folds into
#: them (its identity; ``abs_max`` / ``abs_min`` from 0 / inf give the first value back).
ACC_INIT = {
    "add": 0.0,
    "subtract": 0.0,
    "multiply": 1.0,
    "maximum": -np.inf,
    "minimum": np.inf,
    "abs_max": 0.0,
    "abs_min": np.inf,
}


def _int_div(fn):
    """An integer quotient / remainder; a zero divisor gives 0 (numpy's integer rule)."""

    def div(a, b):
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, 0, fn(a, safe))

    return div


def _trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _int_abs_pick(bigger):
    def pick(a, b):
        take_a = np.abs(a) > np.abs(b) if bigger else np.abs(a) < np.abs(b)
        return np.where(take_a, a, b)

    return pick


def _i(fn):
    return lambda a, b: np.asarray(fn(a, b)).astype(np.int64)


#: The GpSimd engine's native 32-bit integer arithmetic (``tensor_tensor`` whose tiles are all
#: int32 / uint32): exact int64 results, wrapped to 32 bits by the destination; a division
#: truncates toward zero, ``mod`` takes the divisor's sign, ``fmod`` the dividend's, a zero
#: divisor gives 0.  ``power`` is not among them (float32).
INT_OPS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": _int_div(_trunc_div),
    "mod": _int_div(np.mod),
    "fmod": _int_div(np.fmod),
    "maximum": np.maximum,
    "minimum": np.minimum,
    "abs_max": _int_abs_pick(True),
    "abs_min": _int_abs_pick(False),
    "equal": _i(np.equal),
    "not_equal": _i(np.not_equal),
    "greater": _i(np.greater),
    "greater_equal": _i(np.greater_equal),
    "less": _i(np.less),
    "less_equal": _i(np.less_equal),
    "logical_and": _i(lambda a, b: (a != 0) & (b != 0)),
    "logical_or": _i(lambda a, b: (a != 0) | (b != 0)),
    "logical_xor": _i(lambda a, b: (a != 0) ^ (b != 0)),
    "bypass": lambda a, b: np.asarray(a, np.int64),
}


def accumulator(st, engine):
    """The accumulator registers of ``engine`` (``"vector"``, ``"scalar"``) of a
    :class:`~ncrtl.model.kernel.golden.CoreState`: one float32 per lane, kept across
    instructions (lane ``i`` is row ``i`` of an instruction's tiles, whichever partition they
    start at); 0 before any instruction sets them."""
    regs = st.__dict__.setdefault("accumulators", {})
    acc = regs.get(engine)
    if acc is None:
        acc = regs[engine] = np.zeros(st.program.core.partitions, np.float32)
    return acc


def fold(op, acc, x):
    """``x`` ``[rows, n]`` folded along its last axis in order, from ``acc`` ``[rows]`` (None:
    from ``x[:, 0]``): ``op(...op(op(acc, x0), x1)..., x_{n-1})`` in float32 (bitvec ``op``:
    on 32-bit patterns, int64 arrays); ``[rows]``."""
    bitvec = op in BITVEC_OPS
    fn = BITVEC_OPS[op] if bitvec else ALU_OPS[op]
    x = np.asarray(x, np.int64 if bitvec else np.float32)
    if acc is None:
        acc, x = x[:, 0], x[:, 1:]
    acc = np.asarray(acc, x.dtype).copy()
    if x.shape[1] == 0:
        return acc
    ufunc = fn if isinstance(fn, np.ufunc) else None
    with np.errstate(all="ignore"):
        if ufunc is not None:
            both = np.concatenate([acc[:, None], x], axis=1)
            return ufunc.accumulate(both, axis=1, dtype=both.dtype)[:, -1]
        for j in range(x.shape[1]):
            acc = np.asarray(fn(acc, x[:, j]), x.dtype)
    return acc


def convert(values, dtype):
    """Values (any float or int array) as ``dtype`` (a kernel dtype name): floats rounded once
    to nearest even (:func:`ncrtl.model.fp.encode`), integers rounded to nearest even and
    clipped to the type's range (NaN to 0, infinities to the range's ends)."""
    d = dtype_of(dtype)
    v = np.asarray(values)
    if d.packed != 1:
        raise KernelError(f"values cannot be converted to the packed type {d.name}")
    if d.fmt is None:
        if d.storage == np.bool_:
            return v != 0
        info = np.iinfo(d.storage)
        if v.dtype.kind in "iub":
            return np.clip(v.astype(np.int64), info.min, info.max).astype(d.storage)
        f = v.astype(np.float64)
        f = np.where(np.isnan(f), 0.0, f)  # NaN converts to 0
        return np.clip(np.rint(f), info.min, info.max).astype(d.storage)
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
