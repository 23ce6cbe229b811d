"""The golden of the reductions, scans and statistics of the Vector and GpSimd engines:
``tensor_reduce``, ``tensor_partition_reduce``, ``tensor_scalar_reduce``,
``tensor_scalar_cumulative``, ``tensor_tensor_scan``, ``bn_stats`` and ``bn_aggr``.

Every reduction folds in order: along the free axis from its first element (or from the
engine's accumulator registers), over partitions from partition 0, each step one float32
operation (bitvec operators on 32-bit patterns), then one rounding to the destination
(docs/nki/arith.md)."""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.values import (
    ACC_INIT,
    BITVEC_OPS,
    KernelError,
    accumulator,
    convert,
    float32_of,
    fold,
    same_elements,
    scalar_operand,
    where,
)

from .elementwise import accumulate, alu, bits_of, read_out, store_bits

__all__ = ["OPS", "STREAMS"]


def _rows(ref):
    return ref.view_shape[0]


def _per_partition(ref):
    return ref.size // ref.view_shape[0] if ref.view_shape else 1


def _tensor_reduce(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    a = ins.args
    p, keep = _rows(src), a["keep"]
    if _rows(dst) != p or dst.size != p * keep:
        raise KernelError(
            f"{where(ins)}dst {list(dst.view_shape)} must hold [{p}, {keep}] reduced elements"
        )
    op = a["op"]
    if op in BITVEC_OPS:
        x = bits_of(st, src, ins).reshape(p * keep, -1)
        store_bits(st, dst, fold(op, None, x))
        return
    x = float32_of(st, src, ins).reshape(p * keep, -1)
    r = fold(op, None, x)
    if a.get("negate"):
        r = -r
    st.write(dst, convert(r, dst.view_dtype).reshape(dst.view_shape))


def _tensor_partition_reduce(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    op = ins.args["op"]
    p, f = _rows(src), _per_partition(src)
    if dst.size != f:
        raise KernelError(f"{where(ins)}dst {list(dst.view_shape)} must hold [1, {f}] elements")
    if op in BITVEC_OPS:
        x = bits_of(st, src, ins).reshape(p, f)
        store_bits(st, dst, fold(op, None, x.T))
        return
    x = float32_of(st, src, ins).reshape(p, f)
    if op == "average":
        r = (fold("add", None, x.T) / np.float32(p)).astype(np.float32)
    else:
        r = fold(op, None, x.T)
    st.write(dst, convert(r, dst.view_dtype).reshape(dst.view_shape))


def _tensor_scalar_reduce(st, ins):
    dst, src = ins.dsts[0], ins.srcs[0]
    same_elements(ins, dst, src)
    a, p = ins.args, _rows(dst)
    x = float32_of(st, src, ins).reshape(p, -1)
    y = scalar_operand(st, ins, a["operand0"], ins.srcs, p)
    x = alu(a["op0"], y, x) if a.get("reverse0") else alu(a["op0"], x, y)
    init = a.get("reduce_init")
    init = None if init is None else scalar_operand(st, ins, init, ins.srcs, p)
    accumulate(st, ins, x, a["reduce_op"], a["reduce_cmd"], init)
    st.write(dst, convert(x, dst.view_dtype).reshape(dst.view_shape))
    if len(ins.dsts) > 1:
        read_out(st, ins, ins.dsts[1], p, a.get("negate"))


def _tensor_scalar_cumulative(st, ins):
    (dst,), src = ins.dsts, ins.srcs[0]
    same_elements(ins, dst, src)
    a, p = ins.args, _rows(dst)
    x = float32_of(st, src, ins).reshape(p, -1)
    y = scalar_operand(st, ins, a["imm0"], ins.srcs, p)
    x = alu(a["op0"], y, x) if a.get("reverse0") else alu(a["op0"], x, y)
    regs = accumulator(st, ins.engine)
    op1, cmd = a["op1"], a["reduce_cmd"]
    if cmd == "reset_reduce":
        regs[:p] = ACC_INIT[op1]
    elif cmd == "load_reduce":
        init = scalar_operand(st, ins, a["imm1"], ins.srcs, p)
        regs[:p] = np.broadcast_to(np.asarray(init, np.float32).reshape(-1), (p,))
    out = np.empty_like(x)
    reg = regs[:p].copy()
    for j in range(x.shape[1]):
        reg = alu(op1, x[:, j], reg)  # the reference's reg = op1(op0(x, imm0), reg)
        out[:, j] = reg
    regs[:p] = reg
    st.write(dst, convert(out, dst.view_dtype).reshape(dst.view_shape))


def _tensor_tensor_scan(st, ins):
    (dst,), (d0, d1) = ins.dsts, ins.srcs[:2]
    same_elements(ins, dst, d0, d1)
    a, p = ins.args, _rows(dst)
    x0 = float32_of(st, d0, ins).reshape(p, -1)
    x1 = float32_of(st, d1, ins).reshape(p, -1)
    prev = np.broadcast_to(scalar_operand(st, ins, a["initial"], ins.srcs, p), (p, 1))[:, 0]
    out = np.empty_like(x0)
    op0, op1 = a["op0"], a["op1"]
    for j in range(x0.shape[1]):
        t = alu(op0, prev, x0[:, j]) if a.get("reverse0") else alu(op0, x0[:, j], prev)
        prev = alu(op1, x1[:, j], t) if a.get("reverse1") else alu(op1, t, x1[:, j])
        out[:, j] = prev
    st.write(dst, convert(out, dst.view_dtype).reshape(dst.view_shape))


def _stats(x):
    """``(count, mean, sum of squared deviations)`` of each row of ``x`` in float32: the sum
    and then the squared deviations folded in order."""
    n = x.shape[1]
    if n == 0:
        z = np.zeros(x.shape[0], np.float32)
        return z, z, z
    with np.errstate(all="ignore"):
        mean = (fold("add", None, x) / np.float32(n)).astype(np.float32)
        dev = (x - mean[:, None]).astype(np.float32)
        m2 = fold("add", None, (dev * dev).astype(np.float32))
    return np.full(x.shape[0], n, np.float32), mean, m2


def _bn_stats(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    p = _rows(src)
    if _rows(dst) != p or dst.size != 6 * p:
        raise KernelError(f"{where(ins)}dst {list(dst.view_shape)} must be [{p}, 6]")
    x = float32_of(st, src, ins).reshape(p, -1)
    even, odd = _stats(x[:, 0::2]), _stats(x[:, 1::2])
    out = np.stack([*even, *odd], axis=1)
    st.write(dst, convert(out, dst.view_dtype).reshape(dst.view_shape))


def _bn_aggr(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    p = _rows(src)
    if _rows(dst) != p or dst.size != 2 * p:
        raise KernelError(f"{where(ins)}dst {list(dst.view_shape)} must be [{p}, 2]")
    t = float32_of(st, src, ins).reshape(p, -1, 3)
    count, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
    with np.errstate(all="ignore"):
        n = fold("add", None, count)
        total = fold("add", None, (count * mean).astype(np.float32))
        mu = (total / n).astype(np.float32)
        dev = (mean - mu[:, None]).astype(np.float32)
        spread = (count * (dev * dev).astype(np.float32)).astype(np.float32)
        m2_all = (fold("add", None, m2) + fold("add", None, spread)).astype(np.float32)
        var = (m2_all / n).astype(np.float32)
    out = np.stack([mu, var], axis=1)
    st.write(dst, convert(out, dst.view_dtype).reshape(dst.view_shape))


OPS = {
    "tensor_reduce": _tensor_reduce,
    "tensor_partition_reduce": _tensor_partition_reduce,
    "tensor_scalar_reduce": _tensor_scalar_reduce,
    "tensor_scalar_cumulative": _tensor_scalar_cumulative,
    "tensor_tensor_scan": _tensor_tensor_scan,
    "bn_stats": _bn_stats,
    "bn_aggr": _bn_aggr,
}


def _by_input(ins):
    """A reduction streams its input's elements per partition (its destination holds fewer)."""
    return _per_partition(ins.srcs[0]), 1


STREAMS = {
    "tensor_reduce": _by_input,
    "tensor_partition_reduce": _by_input,
    "bn_stats": _by_input,
    "bn_aggr": _by_input,
}
