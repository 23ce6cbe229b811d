"""The golden of the Vector, Scalar and GpSimd engines' element-wise operations:
``tensor_copy``, ``memset``, the Tensor Engine transpose's identity, the Vector Engine's
32 x 32 ``transpose``, ``tensor_tensor``, ``tensor_scalar``, ``activation`` and
``quantize_mx`` (:func:`ncrtl.model.vector_engine.quantize_mx`).  Arithmetic in float32 numpy,
then one rounding to the destination's dtype (:func:`~ncrtl.model.kernel.values.convert`)."""

from __future__ import annotations

import math

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.values import (
    ACTIVATIONS,
    ALU_OPS,
    KernelError,
    convert,
    float32_of,
    pack_x4,
    same_elements,
    scalar_operand,
    where,
)
from ncrtl.model.vector_engine import quantize_mx


def _elementwise_input(st, ins):
    """``(dst, srcs, partitions, data as float32 [P, F])`` of a tensor_scalar / activation."""
    (dst,), srcs = ins.dsts, ins.srcs
    same_elements(ins, dst, srcs[0])
    p = dst.view_shape[0]
    return dst, srcs, p, float32_of(st, srcs[0], ins).reshape(p, -1)


def _tensor_copy(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    same_elements(ins, dst, src)
    v = st.read(src, ins)
    if src.view_dtype == dst.view_dtype:
        st.write(dst, v.reshape(dst.view_shape))  # bit for bit
        return
    st.write(dst, convert(v, dst.view_dtype).reshape(dst.view_shape))


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
    fa = float32_of(st, a, ins).reshape(dst.view_shape)
    fb = float32_of(st, b, ins).reshape(dst.view_shape)
    with np.errstate(all="ignore"):
        out = ALU_OPS[ins.args["op"]](fa, fb).astype(np.float32)
    st.write(dst, convert(out, dst.view_dtype))


def _tensor_scalar(st, ins):
    dst, srcs, p, x = _elementwise_input(st, ins)
    a = ins.args
    with np.errstate(all="ignore"):
        for op, operand, reverse in (
            (a["op0"], a.get("operand0"), a.get("reverse0")),
            (a.get("op1"), a.get("operand1"), a.get("reverse1")),
        ):
            if op is None:
                continue
            if op in ACTIVATIONS:
                x = ACTIVATIONS[op](x).astype(np.float32)
                continue
            y = scalar_operand(st, ins, operand, srcs, p)
            x = (ALU_OPS[op](y, x) if reverse else ALU_OPS[op](x, y)).astype(np.float32)
    st.write(dst, convert(x, dst.view_dtype).reshape(dst.view_shape))


def _activation(st, ins):
    dst, srcs, p, x = _elementwise_input(st, ins)
    a = ins.args
    scale = scalar_operand(st, ins, a.get("scale", 1.0), srcs, p)
    bias = a.get("bias")
    with np.errstate(all="ignore"):
        x = (x * scale).astype(np.float32)
        if bias is not None:
            x = (x + scalar_operand(st, ins, bias, srcs, p)).astype(np.float32)
        x = ACTIVATIONS[a["op"]](x).astype(np.float32)
    st.write(dst, convert(x, dst.view_dtype).reshape(dst.view_shape))


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


OPS = {
    "tensor_copy": _tensor_copy,
    "memset": _memset,
    "identity": _identity,
    "transpose": _vector_transpose,
    "tensor_tensor": _tensor_tensor,
    "tensor_scalar": _tensor_scalar,
    "activation": _activation,
    "quantize_mx": _quantize_mx,
}
