"""The golden of the Vector, Scalar and GpSimd engines' element-wise operations:
``tensor_copy``, ``memset``, the Tensor Engine transpose's identity, the Vector Engine's
32 x 32 ``transpose``, ``tensor_tensor``, ``tensor_scalar``, ``scalar_tensor_tensor``,
``activation`` and ``activate2`` (with the engine's accumulator registers and their read-out,
``accumulator_read``), ``exponential``, ``reciprocal`` and ``quantize_mx``
(:func:`ncrtl.model.vector_engine.quantize_mx`).  Arithmetic in float32 numpy, then one
rounding to the destination's dtype (:func:`~ncrtl.model.kernel.values.convert`); bitvec
operators on the operands' 32-bit patterns (docs/nki/arith.md)."""

from __future__ import annotations

import math

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.values import (
    ACC_INIT,
    ACTIVATIONS,
    ALU_OPS,
    BITVEC_OPS,
    BITVEC_UNARY,
    INT_OPS,
    PARAMETRIC,
    UNARY_OPS,
    KernelError,
    accumulator,
    convert,
    float32_of,
    fold,
    pack_x4,
    same_elements,
    scalar_operand,
    where,
)
from ncrtl.model.vector_engine import quantize_mx

__all__ = ["OPS", "STREAMS", "bits_of", "store_bits", "alu", "accumulate", "read_out"]


def _elementwise_input(st, ins):
    """``(dst, srcs, partitions, data as float32 [P, F])`` of a tensor_scalar / activation."""
    dst, srcs = ins.dsts[0], ins.srcs
    same_elements(ins, dst, srcs[0])
    p = dst.view_shape[0]
    return dst, srcs, p, float32_of(st, srcs[0], ins).reshape(p, -1)


def bits_of(st, ref, ins):
    """An integer view's values as int64 (their 32-bit patterns once masked)."""
    v = st.read(ref, ins)
    if ref.element.fmt is not None:
        raise KernelError(f"{where(ins)}a bitvec operator on the float type {ref.view_dtype}")
    return v.astype(np.int64)


def store_bits(st, dst, values):
    """Write 32-bit patterns (int64) to an integer view: its low bits, no saturation."""
    d = dst.element
    width = 8 * d.itemsize
    low = np.asarray(values, np.int64) & ((1 << width) - 1)
    unsigned = np.dtype(f"u{d.itemsize}") if d.storage != np.bool_ else np.dtype(np.uint8)
    out = low.astype(unsigned)
    out = out.view(d.storage) if d.storage != np.bool_ else out != 0
    st.write(dst, out.reshape(dst.view_shape))


def alu(op, a, b):
    """One arithmetic or unary operator in float32 (``b`` ignored by a unary one)."""
    with np.errstate(all="ignore"):
        if op in UNARY_OPS:
            return np.asarray(UNARY_OPS[op](a), np.float32)
        return np.asarray(ALU_OPS[op](a, b), np.float32)


def _bit_operand(st, ins, value, srcs, p):
    if isinstance(value, dict) and "tensor" in value:
        return bits_of(st, srcs[value["tensor"]], ins).reshape(p, 1)
    return np.int64(value if value is not None else 0)


def accumulate(st, ins, values, op, cmd, init=None):
    """Apply ``reduce_cmd`` ``cmd`` of the engine's accumulator registers to the float32
    ``values`` ``[P, F]`` of one instruction: reset them to ``op``'s identity (``reset``,
    ``reset_reduce``) or load ``init`` (``load_reduce``), then fold the values in, in order
    along the free axis (``reduce``, ``reset_reduce``, ``load_reduce``); ``idle`` leaves them."""
    if cmd == "idle" or cmd is None:
        return
    regs = accumulator(st, ins.engine)
    p = values.shape[0]
    if cmd in ("reset", "reset_reduce"):
        regs[:p] = ACC_INIT[op]
    elif cmd == "load_reduce":
        regs[:p] = np.broadcast_to(np.asarray(init, np.float32).reshape(-1), (p,))
    if cmd in ("reduce", "reset_reduce", "load_reduce"):
        regs[:p] = fold(op, regs[:p], values.reshape(p, -1))


def _tensor_copy(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    same_elements(ins, dst, src)
    via = ins.args.get("via")
    v = st.read(src, ins)
    if src.view_dtype == dst.view_dtype and ins.engine != "scalar" and via is None:
        st.write(dst, v.reshape(dst.view_shape))  # bit for bit
        return
    # a copy between dtypes (and every Scalar Engine copy) goes through float32; dtype= (via)
    # rounds to its type first, which dst's holds exactly
    x = float32_of(st, src, ins)
    if via is not None:
        x = convert(x, via).astype(np.float32)
    st.write(dst, convert(x, dst.view_dtype).reshape(dst.view_shape))


def _vector_transpose(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    v = st.read(src, ins)
    st.write(dst, v.reshape(v.shape[0], -1).T.copy())


def _memset(st, ins):
    (dst,) = ins.dsts
    value = ins.args["value"]
    d = dst.element
    if d.packed != 1:
        v = np.zeros(dst.view_shape, d.storage)
    else:
        v = np.broadcast_to(convert(np.asarray([value]), dst.view_dtype), dst.view_shape)
    st.write(dst, v)


def _identity(st, ins):
    (dst,) = ins.dsts
    p, f = dst.view_shape[0], math.prod(dst.view_shape[1:])
    st.write(dst, convert(np.eye(p, f, dtype=np.float32), dst.view_dtype))


def _tensor_tensor(st, ins):
    (dst,), (a, b) = ins.dsts, ins.srcs
    same_elements(ins, dst, a, b)
    op, mode = ins.args["op"], ins.args.get("mode", "float")
    if mode == "bitvec":
        x, y = bits_of(st, a, ins), bits_of(st, b, ins)
        store_bits(st, dst, BITVEC_OPS[op](x.reshape(-1), y.reshape(-1)))
        return
    if mode == "int":
        x = st.read(a, ins).astype(np.int64).reshape(-1)
        y = st.read(b, ins).astype(np.int64).reshape(-1)
        store_bits(st, dst, INT_OPS[op](x, y))
        return
    fa = float32_of(st, a, ins).reshape(dst.view_shape)
    fb = float32_of(st, b, ins).reshape(dst.view_shape)
    st.write(dst, convert(alu(op, fa, fb), dst.view_dtype))


def _tensor_scalar(st, ins):
    dst, srcs, p, x = _elementwise_input(st, ins)
    a = ins.args
    steps = [(a["op0"], a.get("operand0"), a.get("reverse0"))]
    if a.get("op1") is not None:
        steps.append((a["op1"], a.get("operand1"), a.get("reverse1")))
    if a.get("bitvec"):
        x = bits_of(st, srcs[0], ins).reshape(p, -1)
        for op, operand, reverse in steps:
            if op in BITVEC_UNARY:
                x = BITVEC_UNARY[op](x)
                continue
            y = _bit_operand(st, ins, operand, srcs, p)
            x = BITVEC_OPS[op](y, x) if reverse else BITVEC_OPS[op](x, y)
        store_bits(st, dst, x)
        return
    for op, operand, reverse in steps:
        if op in UNARY_OPS:
            x = alu(op, x, None)
            continue
        y = scalar_operand(st, ins, operand, srcs, p)
        x = alu(op, y, x) if reverse else alu(op, x, y)
    st.write(dst, convert(x, dst.view_dtype).reshape(dst.view_shape))


def _scalar_tensor_tensor(st, ins):
    dst, srcs, p, x = _elementwise_input(st, ins)
    a = ins.args
    y0 = scalar_operand(st, ins, a["operand0"], srcs, p)
    x = alu(a["op0"], y0, x) if a.get("reverse0") else alu(a["op0"], x, y0)
    other = srcs[a["operand1"]["tensor"]]
    same_elements(ins, dst, other)
    y1 = float32_of(st, other, ins).reshape(p, -1)
    x = alu(a["op1"], y1, x) if a.get("reverse1") else alu(a["op1"], x, y1)
    st.write(dst, convert(x, dst.view_dtype).reshape(dst.view_shape))


def _activate(x, op, alpha):
    with np.errstate(all="ignore"):
        if op in PARAMETRIC:
            return PARAMETRIC[op](x, np.float32(alpha)).astype(np.float32)
        return np.asarray(ACTIVATIONS[op](x), np.float32)


def _operand_or(st, ins, value, srcs, p, default):
    if value is None:
        return np.float32(default)
    return scalar_operand(st, ins, value, srcs, p)


def _activation(st, ins):
    dst, srcs, p, x = _elementwise_input(st, ins)
    a = ins.args
    scale = scalar_operand(st, ins, a.get("scale", 1.0), srcs, p)
    bias = a.get("bias")
    with np.errstate(all="ignore"):
        x = (x * scale).astype(np.float32)
        if bias is not None:
            x = (x + scalar_operand(st, ins, bias, srcs, p)).astype(np.float32)
    alpha = _operand_or(st, ins, a.get("alpha"), srcs, p, 0.0)
    x = _activate(x, a["op"], alpha)
    accumulate(st, ins, x, a.get("reduce_op") or "add", a.get("reduce_cmd"))
    st.write(dst, convert(x, dst.view_dtype).reshape(dst.view_shape))


def _activate2(st, ins):
    dst, srcs, p, x = _elementwise_input(st, ins)
    a = ins.args
    for op, imm, reverse in (
        (a["op0"], a["imm0"], a.get("reverse0")),
        (a["op1"], a["imm1"], a.get("reverse1")),
    ):
        if op == "bypass":
            continue
        y = scalar_operand(st, ins, imm, srcs, p)
        x = alu(op, y, x) if reverse else alu(op, x, y)
    alpha = _operand_or(st, ins, a.get("alpha"), srcs, p, 0.0)
    x = _activate(x, a["op"], alpha)
    accumulate(st, ins, x, a.get("reduce_op") or "add", a.get("reduce_cmd"))
    st.write(dst, convert(x, dst.view_dtype).reshape(dst.view_shape))


def _accumulator_read(st, ins):
    """``reduce_res`` from the engine's accumulator registers (negated when asked)."""
    (dst,) = ins.dsts
    p = dst.view_shape[0]
    if dst.size != p:
        raise KernelError(f"{where(ins)}reduce_res {list(dst.view_shape)} must be [{p}, 1]")
    regs = accumulator(st, ins.engine)[:p].copy()
    if ins.args.get("negate"):
        regs = -regs
    st.write(dst, convert(regs, dst.view_dtype).reshape(dst.view_shape))


def _exponential(st, ins):
    dst, srcs, p, x = _elementwise_input(st, ins)
    a = ins.args
    m = scalar_operand(st, ins, a.get("max_value", 0.0), srcs, p)
    with np.errstate(all="ignore"):
        x = ACTIVATIONS["exp"]((x - m).astype(np.float32))
    init = a.get("reduce_init")
    init = None if init is None else scalar_operand(st, ins, init, srcs, p)
    accumulate(st, ins, x, "add", a.get("reduce_cmd"), init)
    st.write(dst, convert(x, dst.view_dtype).reshape(dst.view_shape))
    if len(ins.dsts) > 1:
        read_out(st, ins, ins.dsts[1], p, False)


def read_out(st, ins, ref, p, negate):
    if ref.size != p:
        raise KernelError(f"{where(ins)}reduce_res {list(ref.view_shape)} must be [{p}, 1]")
    regs = accumulator(st, ins.engine)[:p].copy()
    st.write(ref, convert(-regs if negate else regs, ref.view_dtype).reshape(ref.view_shape))


def _reciprocal(st, ins):
    dst, _, _, x = _elementwise_input(st, ins)
    st.write(dst, convert(alu("reciprocal", x, None), dst.view_dtype).reshape(dst.view_shape))


def _quantize_mx(st, ins):
    (dst, dst_scale), (src,) = ins.dsts, ins.srcs
    v = st.read(src, ins)
    v = v.reshape(v.shape[0], -1)
    try:
        data, scales = quantize_mx(v, dtype_of(dst.view_dtype).fmt)
    except ValueError as e:
        raise KernelError(f"{where(ins)}{e}") from None
    if dst.size != data.shape[0] * data.shape[1] or dst_scale.size < scales.size:
        raise KernelError(
            f"{where(ins)}quantize_mx of a {list(v.shape)} tile writes [{v.shape[0]}, "
            f"{v.shape[1] // 4}] packed elements and scales, not dst {list(dst.view_shape)} and "
            f"dst_scale {list(dst_scale.view_shape)}"
        )
    st.write(dst, pack_x4(data, dst.view_dtype).reshape(dst.view_shape))
    st.write(dst_scale, scales.reshape(dst_scale.view_shape).view(dst_scale.element.storage))


def _per_partition(ref):
    return ref.size // ref.view_shape[0] if ref.view_shape else 1


OPS = {
    "tensor_copy": _tensor_copy,
    "memset": _memset,
    "identity": _identity,
    "transpose": _vector_transpose,
    "tensor_tensor": _tensor_tensor,
    "tensor_scalar": _tensor_scalar,
    "scalar_tensor_tensor": _scalar_tensor_tensor,
    "activation": _activation,
    "activate2": _activate2,
    "accumulator_read": _accumulator_read,
    "exponential": _exponential,
    "reciprocal": _reciprocal,
    "quantize_mx": _quantize_mx,
}

#: The Vector Engine's reciprocal streams 8 element-cycles per element (the reference's engine
#: selection table: ``max(MIN_II, 8 * N)``).
STREAMS = {"reciprocal": lambda ins: (8 * _per_partition(ins.srcs[0]), 1)}
