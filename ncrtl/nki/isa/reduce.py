"""Reductions, scans and statistics on the Vector and GpSimd engines: ``tensor_reduce``,
``tensor_partition_reduce``, ``tensor_scalar_reduce``, ``tensor_scalar_cumulative``,
``tensor_tensor_scan``, ``bn_stats`` and ``bn_aggr`` (the golden:
:mod:`ncrtl.model.kernel.ops.reduce`; the rules and costs: docs/nki/arith.md)."""

from __future__ import annotations

import math

from ncrtl.model.kernel.values import ALU_OPS, BITVEC_OPS, REDUCE_OPS, UNARY_OPS

from .._trace import _int, fail
from .enums import reduce_cmd
from .operands import at_most_one_psum, emit, free_size, operand, same_layout
from .vector import (
    alu_op,
    cmd_name,
    need_ints,
    reduce_res_operand,
    scalar_operand,
)

__all__ = [
    "tensor_reduce",
    "tensor_partition_reduce",
    "tensor_scalar_reduce",
    "tensor_scalar_cumulative",
    "tensor_tensor_scan",
    "bn_stats",
    "bn_aggr",
]

#: ``bn_stats``'s largest free size (``nl.tile_size.bn_stats_fmax``)
BN_STATS_FMAX = 512


def _axes(call, axis, ndim):
    """``axis`` (an int or a list of them) as a sorted tuple: free dimensions, the last ones,
    contiguous."""
    items = list(axis) if isinstance(axis, (tuple, list)) else [axis]
    if not items:
        fail(call, "axis is empty: name the free dimensions to reduce")
    axes = []
    for a in items:
        a = _int(a, "axis", call)
        a = a + ndim if a < 0 else a
        if not 0 <= a < ndim:
            fail(call, f"axis={axis!r}: the tile has {ndim} dimensions")
        axes.append(a)
    axes = sorted(set(axes))
    if axes[0] == 0:
        fail(call, f"axis={axis!r}: the partition axis 0 cannot be reduced (free axes only)")
    if axes != list(range(axes[0], ndim)):
        fail(
            call,
            f"axis={axis!r}: the reduced axes must be the last free dimensions, contiguous and "
            f"ending at dimension {ndim - 1}",
        )
    return tuple(axes)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """``dst = op`` over ``data``'s last free ``axis`` (or axes) on the Vector Engine, folded
    in order from the first element (float32; bitvec operators on integer bits)."""
    call = "nisa.tensor_reduce"
    opname = alu_op(call, "op", op, {k: 0 for k in REDUCE_OPS})
    s = operand(call, "data", data, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    axes = _axes(call, axis, len(data.shape))
    keep = math.prod(data.shape[1 : axes[0]])
    if dst.shape[0] != data.shape[0] or free_size(dst) != keep:
        kept = [data.shape[0], *data.shape[1 : axes[0]]]
        fail(
            call,
            f"dst {list(dst.shape)} must have data's partitions and the {keep} elements per "
            f"partition left after reducing axes {list(axes)} of data {list(data.shape)} "
            f"({kept}{' with ones' if keepdims else ''})",
        )
    if opname in BITVEC_OPS:
        need_ints(call, opname, ("data", data), ("dst", dst))
        if negate:
            fail(call, f"negate=True with the bitvec operator nl.{opname} (arithmetic only)")
    emit(
        "vector",
        "tensor_reduce",
        [d],
        [s],
        {"op": opname, "keep": keep, "negate": bool(negate)},
        call,
    )


PARTITION_REDUCE = ("add", "average", "maximum", "bitwise_or", "bitwise_and")


def tensor_partition_reduce(dst, op, data, name=None):
    """``dst [1, F]`` = ``op`` over ``data``'s partitions on the GpSimd Engine, folded from
    partition 0 (float32; ``average`` the sum over the partition count)."""
    call = "nisa.tensor_partition_reduce"
    opname = alu_op(call, "op", op, {k: 0 for k in PARTITION_REDUCE})
    s = operand(call, "data", data, ("sbuf",))
    d = operand(call, "dst", dst, ("sbuf",))
    f = free_size(data)
    if dst.shape[0] != 1 or free_size(dst) != f:
        fail(call, f"dst {list(dst.shape)} must be [1, {f}]: one partition, data's free size")
    if opname in BITVEC_OPS:
        need_ints(call, opname, ("data", data), ("dst", dst))
    emit("gpsimd", "tensor_partition_reduce", [d], [s], {"op": opname}, call)


TENSOR_SCALAR_REDUCE = ("add", "multiply", "maximum", "minimum")


def tensor_scalar_reduce(
    dst,
    data,
    op0,
    operand0,
    reduce_op,
    reduce_res=None,
    reverse0=False,
    reduce_cmd=reduce_cmd.reset_reduce,
    reduce_init=None,
    reduce_res_negate=False,
    name=None,
):
    """``dst = data op0 operand0`` on the Vector Engine, its results folded by ``reduce_op``
    into the engine's accumulator registers (``reduce_cmd``), read into ``reduce_res``
    (negated by ``reduce_res_negate``)."""
    call = "nisa.tensor_scalar_reduce"
    n0 = alu_op(call, "op0", op0, {**ALU_OPS, **UNARY_OPS})
    rop = alu_op(call, "reduce_op", reduce_op, {**ALU_OPS, **BITVEC_OPS})
    if rop not in TENSOR_SCALAR_REDUCE:
        fail(call, f"reduce_op=nl.{rop}: it reduces with {', '.join(TENSOR_SCALAR_REDUCE)}")
    if reverse0:
        fail(call, "reverse0=True is not supported by tensor_scalar_reduce (the reference)")
    cmd = cmd_name(call, reduce_cmd, ("reset_reduce", "reduce", "load_reduce"))
    if (cmd == "load_reduce") != (reduce_init is not None):
        fail(call, "reduce_init is given with reduce_cmd=load_reduce, and only then")
    srcs = [operand(call, "data", data, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    p = data.shape[0]
    args = {"op0": n0, "reduce_op": rop, "reduce_cmd": cmd, "negate": bool(reduce_res_negate)}
    if n0 in UNARY_OPS:
        if operand0 not in (None, 0, 0.0):
            fail(call, f"operand0 must be None or 0 with the unary operator nl.{n0}")
        args["operand0"] = 0.0
    elif operand0 is None:
        fail(call, f"operand0 is None: nl.{n0} takes a number or a [{p}, 1] tensor")
    else:
        args["operand0"] = scalar_operand(call, "operand0", operand0, srcs, p, ("float32",))
    if reduce_init is not None:
        args["reduce_init"] = scalar_operand(
            call, "reduce_init", reduce_init, srcs, p, ("float32",)
        )
    dsts = [d]
    r = reduce_res_operand(call, reduce_res, p)
    if r is not None:
        dsts.append(r)
    emit("vector", "tensor_scalar_reduce", dsts, srcs, args, call)


CUMULATIVE = ("add", "subtract", "multiply", "maximum", "minimum")
_CUMULATIVE_DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3", "float8_e4m3fn")
_CUMULATIVE_DTYPES += ("float8_e5m2", "float8_e3m4", "uint8", "uint16", "int8", "int16")


def tensor_scalar_cumulative(
    dst, src, op0, op1, imm0, imm1=None, reduce_cmd=reduce_cmd.reset_reduce, name=None
):
    """``reg = op1(src op0 imm0, reg)`` along each partition on the Vector Engine, every step
    written to ``dst`` (a running sum, product, max or min); the register is the engine's
    accumulator (``reduce_cmd``: reset_reduce, reduce, load_reduce from ``imm1``)."""
    call = "nisa.tensor_scalar_cumulative"
    n0 = alu_op(call, "op0", op0, ALU_OPS)
    n1 = alu_op(call, "op1", op1, ALU_OPS)
    if n1 not in CUMULATIVE:
        fail(call, f"op1=nl.{n1}: the cumulative operator is one of {', '.join(CUMULATIVE)}")
    cmd = cmd_name(call, reduce_cmd, ("reset_reduce", "reduce", "load_reduce"))
    srcs = [operand(call, "src", src, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("src", src))
    for what, t in (("src", src), ("dst", dst)):
        if t.dtype not in _CUMULATIVE_DTYPES:
            fail(call, f"{what} is {t.dtype}; it must be one of {', '.join(_CUMULATIVE_DTYPES)}")
    p = src.shape[0]
    args = {"op0": n0, "op1": n1, "reduce_cmd": cmd}
    if imm0 is None:
        fail(call, f"imm0 is None: nl.{n0} takes a number or a [{p}, 1] tensor")
    args["imm0"] = scalar_operand(call, "imm0", imm0, srcs, p, ("float32",))
    if cmd == "load_reduce":
        if imm1 is None:
            fail(call, "reduce_cmd=load_reduce loads imm1: give it")
        args["imm1"] = scalar_operand(call, "imm1", imm1, srcs, p, ("float32",))
    emit("vector", "tensor_scalar_cumulative", [d], srcs, args, call)


def tensor_tensor_scan(
    dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None
):
    """``dst[:, i] = op1(op0(data0[:, i], dst[:, i-1]), data1[:, i])`` on the Vector Engine,
    from ``initial``."""
    call = "nisa.tensor_tensor_scan"
    n0 = alu_op(call, "op0", op0, ALU_OPS)
    n1 = alu_op(call, "op1", op1, ALU_OPS)
    a = operand(call, "data0", data0, ("sbuf", "psum"))
    b = operand(call, "data1", data1, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    at_most_one_psum(call, data0, data1)
    same_layout(call, dst, ("data0", data0), ("data1", data1))
    srcs = [a, b]
    p = data0.shape[0]
    if initial is None:
        fail(call, f"initial is None: a number or a [{p}, 1] tensor")
    args = {"op0": n0, "op1": n1, "reverse0": bool(reverse0), "reverse1": bool(reverse1)}
    args["initial"] = scalar_operand(call, "initial", initial, srcs, p)
    emit("vector", "tensor_tensor_scan", [d], srcs, args, call)


def bn_stats(dst, data, name=None):
    """Per partition ``(count, mean, variance x count)`` of ``data``'s even elements, then of
    its odd ones (6 elements), on the Vector Engine."""
    call = "nisa.bn_stats"
    s = operand(call, "data", data, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    f = free_size(data)
    if f > BN_STATS_FMAX:
        fail(call, f"data has {f} elements per partition; at most {BN_STATS_FMAX} (bn_stats_fmax)")
    if dst.shape[0] != data.shape[0] or free_size(dst) != 6:
        fail(call, f"dst {list(dst.shape)} must be [{data.shape[0]}, 6]")
    emit("vector", "bn_stats", [d], [s], {}, call)


def bn_aggr(dst, data, name=None):
    """Per partition ``(mean, variance)`` of one or more ``bn_stats`` outputs (``data``:
    ``(count, mean, variance x count)`` triples) on the Vector Engine."""
    call = "nisa.bn_aggr"
    s = operand(call, "data", data, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    f = free_size(data)
    if f % 3:
        fail(call, f"data has {f} elements per partition; bn_stats triples make a multiple of 3")
    if dst.shape[0] != data.shape[0] or free_size(dst) != 2:
        fail(call, f"dst {list(dst.shape)} must be [{data.shape[0]}, 2] (mean, variance)")
    emit("vector", "bn_aggr", [d], [s], {}, call)
