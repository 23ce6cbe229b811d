"""The Vector, Scalar and GpSimd engines' element-wise instructions: ``tensor_copy``, ``memset``,
``tensor_tensor``, ``tensor_scalar``, ``activation`` and ``quantize_mx`` (the arithmetic is
the golden's, :mod:`ncrtl.model.kernel.golden`)."""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.golden import ACTIVATIONS, ALU_OPS

from .._trace import NkiTensor, current, fail, not_modelled
from .enums import engine, reduce_cmd
from .operands import (
    at_most_one_psum,
    emit,
    free_size,
    op_name,
    operand,
    pick_engine,
    same_layout,
)


def tensor_copy(dst, src, engine=engine.unknown, name=None):
    """Copy an on-chip tensor into another, converting to ``dst``'s dtype (PSUM -> SBUF
    eviction)."""
    call = "nisa.tensor_copy"
    which = pick_engine(call, engine, ("vector", "scalar", "gpsimd"), "vector")
    s = operand(call, "src", src, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    if which == "gpsimd" and "psum" in (src._decl.space, dst._decl.space):
        fail(call, "the GpSimd engine cannot access PSUM")
    same_layout(call, dst, ("src", src))
    emit(which, "tensor_copy", [d], [s], {}, call)


def memset(dst, value, engine=engine.unknown, name=None):
    """Fill ``dst`` with a constant."""
    call = "nisa.memset"
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    default = "gpsimd" if dst._decl.space == "sbuf" else "vector"
    which = pick_engine(call, engine, ("vector", "gpsimd"), default)
    if which == "gpsimd" and dst._decl.space == "psum":
        fail(call, "the GpSimd engine cannot access PSUM")
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        fail(call, f"value must be a number known when the kernel is traced, not {value!r}")
    if dtype_of(dst.dtype).packed != 1 and value != 0:
        fail(call, f"a packed {dst.dtype} tensor can only be set to 0")
    emit(which, "memset", [d], [], {"value": float(value)}, call)


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """``dst = op(data1, data2)`` elementwise (float32 arithmetic)."""
    call = "nisa.tensor_tensor"
    which = pick_engine(call, engine, ("vector", "gpsimd"), "vector")
    opname = op_name(call, "op", op, ALU_OPS)
    a = operand(call, "data1", data1, ("sbuf", "psum"))
    b = operand(call, "data2", data2, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    at_most_one_psum(call, data1, data2)
    same_layout(call, dst, ("data1", data1), ("data2", data2))
    emit(which, "tensor_tensor", [d], [a, b], {"op": opname}, call)


def scalar_operand(call, what, value, srcs):
    if value is None:
        return None
    if isinstance(value, NkiTensor):
        if free_size(value) != 1:
            fail(call, f"{what} {list(value.shape)} must be a number or a [P, 1] tensor")
        srcs.append(operand(call, what, value, ("sbuf", "psum")))
        return {"tensor": len(srcs) - 1}
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    fail(call, f"{what} must be a number or a [P, 1] tensor, not {value!r}")


def tensor_scalar(
    dst,
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    engine=engine.unknown,
    name=None,
):
    """``dst = (data op0 operand0) op1 operand1``, operands numbers or ``[P, 1]`` tensors."""
    call = "nisa.tensor_scalar"
    which = pick_engine(call, engine, ("vector", "scalar", "gpsimd"), "vector")
    table = {**ALU_OPS, **ACTIVATIONS}
    n0 = op_name(call, "op0", op0, table)
    n1 = None if op1 is None else op_name(call, "op1", op1, table)
    srcs = [operand(call, "data", data, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    args = {
        "op0": n0,
        "operand0": scalar_operand(call, "operand0", operand0, srcs),
        "reverse0": bool(reverse0),
        "op1": n1,
        "operand1": scalar_operand(call, "operand1", operand1, srcs),
        "reverse1": bool(reverse1),
    }
    emit(which, "tensor_scalar", [d], srcs, args, call)


def activation(
    dst,
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    name=None,
):
    """``dst = op(data * scale + bias)`` on the Scalar Engine (float32)."""
    call = "nisa.activation"
    if reduce_op is not None or reduce_res is not None:
        not_modelled("nisa.activation with reduce_op / reduce_res")
    opname = op_name(call, "op", op, ACTIVATIONS)
    srcs = [operand(call, "data", data, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    args = {
        "op": opname,
        "scale": scalar_operand(call, "scale", scale, srcs),
        "bias": scalar_operand(call, "bias", bias, srcs),
    }
    emit("scalar", "activation", [d], srcs, args, call)


def quantize_mx(dst, src, dst_scale, name=None):
    """QuantizeMX (NeuronCore-v4, Vector Engine): BF16/FP16 ``src [P, F]`` to ``_x4`` data
    ``[P, F/4]`` and E8M0 scales."""
    call = "nisa.quantize_mx"
    tr = current(call)
    if tr.core.name != "v4":
        fail(call, f"QuantizeMX needs NeuronCore-v4, the kernel targets {tr.core.name}")
    s = operand(call, "src", src, ("sbuf",))
    d = operand(call, "dst", dst, ("sbuf",))
    sc = operand(call, "dst_scale", dst_scale, ("sbuf",))
    if dtype_of(dst.dtype).packed != 4 or dtype_of(dst.dtype).itemsize != 4:
        fail(call, f"dst dtype {dst.dtype} must be float8_e4m3fn_x4 or float8_e5m2_x4")
    if src.dtype not in ("bfloat16", "float16"):
        fail(call, f"src dtype {src.dtype} must be bfloat16 or float16")
    p, f = src.shape[0], free_size(src)
    if p % 32 or f % 4:
        fail(call, f"src {list(src.shape)}: P must be a multiple of 32 and F of 4")
    if dst.shape[0] != p or free_size(dst) != f // 4:
        fail(call, f"dst {list(dst.shape)} must be [{p}, {f // 4}]")
    if dst_scale.shape[0] != p or free_size(dst_scale) != f // 4:
        fail(
            call,
            f"dst_scale {list(dst_scale.shape)} must be [{p}, {f // 4}] (scales in their quadrants)",
        )
    emit("vector", "quantize_mx", [d, sc], [s], {}, call)
