"""The golden of selection, index generation, sorting and gathering (docs/nki/select.md):
``iota``, ``affine_select``, ``select_reduce``, ``range_select``, ``tensor_copy_predicated``,
``max8``, ``nc_find_index8``, ``nc_match_replace8``, ``topk``, ``nonzero_with_count``,
``sequence_bounds``, ``nc_stream_shuffle``, ``local_gather`` and ``nc_n_gather``.

Index arithmetic is exact (int32, wrapping as the engines' adders do); a value selected or moved
keeps its bits when its destination has its dtype, else it goes through float32 and is rounded
once to the destination (:func:`~ncrtl.model.kernel.values.convert`); comparisons are float32's
(IEEE: NaN equals nothing, -0 equals +0).  An instruction reads only the elements it uses (a
partition GpSimd leaves alone, the columns past a snake's ``n``, a gather's unselected
elements): those may be unwritten; one it uses and nothing wrote is the golden's uninitialized
read."""

from __future__ import annotations

import math

import numpy as np

from ncrtl.model.kernel import taint
from ncrtl.model.kernel.values import KernelError, accumulator, convert, where

from .elementwise import accumulate

__all__ = ["OPS", "STREAMS"]

GPSIMD_PARTITIONS = 16
QUADRANT = 32
SHUFFLE_KEEP = 255
#: Per element count of ``nc_n_gather``: one underlying GpSimd instruction per 512 elements.
N_GATHER_CHUNK = 512
GPSIMD_STARTUP = 150  # cycles; ComputeCosts.gpsimd_startup

_CMP = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "less": np.less,
    "less_equal": np.less_equal,
}


# -- reading and writing part of a view --------------------------------------------------------


def _raw(st, ref):
    """``(values, written)``: the view's elements (its storage dtype, ``view_shape``) and
    whether each was written, without the uninitialized-read rule (the caller applies it to
    the elements it uses, :func:`_need`); in a taint probe run the unwritten ones hold the
    probe's fill (:func:`ncrtl.model.kernel.taint.raw`)."""
    return taint.raw(st, ref)


def _need(st, ins, ref, written, used):
    """The uninitialized-read rule on the elements ``used`` (a mask of ``view_shape``): an
    unwritten one is the instruction's taint (:func:`ncrtl.model.kernel.taint.need`)."""
    taint.need(st, ins, ref, written, used)


def _used(st, ins, ref, used):
    """The view's elements (``view_shape``), the rule checked on those ``used``."""
    if np.all(used):
        return st.read(ref, ins)
    data, written = _raw(st, ref)
    _need(st, ins, ref, written, np.broadcast_to(used, ref.view_shape))
    return data


def _write_where(st, ref, values, mask):
    """Write ``values`` (``view_shape`` or as many elements) to the view's elements where
    ``mask``; the others keep their bytes (and their written-or-not)."""
    mask = np.broadcast_to(np.asarray(mask, bool).reshape(-1), (ref.size,))
    if mask.all():
        st.write(ref, values)
        return
    if not mask.any():
        return
    storage = ref.element.storage
    v = np.ascontiguousarray(np.asarray(values).astype(storage, copy=False).reshape(-1))
    isz = ref.element.itemsize
    data = v[mask].view(np.uint8).reshape(-1, isz)
    part, byte = st._positions(ref)
    byte = byte.reshape(-1, isz)[mask]
    mem, written = st._memory(ref.space)
    if part is None:
        mem[byte] = data
        written[byte] = True
        return
    part = part.reshape(-1, isz)[mask]
    mem[part, byte] = data
    written[part, byte] = True
    if ref.space == "psum":
        st._store_psum(mem)


def _unwrite(st, ref, mask):
    """Mark the view's elements where ``mask`` as written by nothing (an engine wrote them from
    values nothing wrote)."""
    taint.forget(st, ref, mask)


def _rows(v):
    """A view's values as ``[partitions, elements per partition]``."""
    return v.reshape(v.shape[0], -1)


def _start_partition(ref):
    return ref.offset // math.prod(ref.tensor_shape()[1:])


def _f32(v):
    return np.asarray(v).astype(np.float32)


def _moved(values, src, dst):
    """Selected elements of ``src``'s dtype as ``dst``'s: the same bits when the dtypes agree,
    else through float32 (one rounding)."""
    if src.view_dtype == dst.view_dtype:
        return np.asarray(values)
    return convert(_f32(values), dst.view_dtype)


def _wrap32(v):
    """int64 values as int32 two's complement (the engine's 32-bit adder)."""
    v = np.asarray(v, np.int64)
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _affine(ins, p):
    """The int32 ``offset + c * channel_multiplier + sum(i_k * step_k)`` of iota /
    affine_select, ``[p, elements]``, the pattern's last entry the fastest."""
    a = ins.args
    value = np.zeros((), np.int64)
    for step, num in a["pattern"]:
        value = value[..., None] + np.arange(num, dtype=np.int64) * step
    free = value.reshape(-1)
    chan = np.arange(p, dtype=np.int64)[:, None] * a["channel_multiplier"]
    return _wrap32(a["offset"] + chan + free[None, :])


def _scalar(value, dtype):
    """A number as ``dtype`` (through float32, the engines' immediate)."""
    return convert(np.asarray([value], np.float32), dtype)[0]


# -- index generation ------------------------------------------------------------------------


def _iota(st, ins):
    (dst,) = ins.dsts
    v = _affine(ins, dst.view_shape[0])
    st.write(dst, convert(v, dst.view_dtype).reshape(dst.view_shape))


def _affine_select(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    p = dst.view_shape[0]
    keep = _CMP[ins.args["cmp_op"]](_affine(ins, p), 0)
    on_true = _rows(_used(st, ins, src, keep.reshape(src.view_shape)))
    false = _scalar(ins.args["on_false_value"], dst.view_dtype)
    out = np.where(keep, _moved(on_true, src, dst), false)
    st.write(dst, out.reshape(dst.view_shape))


# -- selection -------------------------------------------------------------------------------


def _accumulate_max(st, ins, values, cmd, reduce_res):
    """The accumulator's ``cmd`` with the float32 ``values [P, F]`` (maximum), then its
    registers into ``reduce_res`` (when given)."""
    accumulate(st, ins, values, "maximum", cmd)
    if reduce_res is not None:
        p = values.shape[0]
        regs = accumulator(st, ins.engine)[:p].copy()
        st.write(reduce_res, convert(regs, reduce_res.view_dtype).reshape(reduce_res.view_shape))


def _select_reduce(st, ins):
    dst, *rest = ins.dsts
    reduce_res = rest[0] if ins.args["reduce_res"] else None
    pred, on_true = ins.srcs[0], ins.srcs[1]
    p = dst.view_shape[0]
    keep = _rows(st.read(pred, ins, matters="predicate")) != 0
    if ins.args["reverse_pred"]:
        keep = ~keep
    x = _rows(_used(st, ins, on_true, keep.reshape(on_true.view_shape)))
    false = ins.args["on_false"]
    if isinstance(false, dict):
        f = _f32(st.read(ins.srcs[false["tensor"]], ins)).reshape(p, 1)
        false_dst = convert(f, dst.view_dtype)
    else:
        f = np.float32(false)
        false_dst = _scalar(false, dst.view_dtype)
    chosen = np.where(keep, _moved(x, on_true, dst), false_dst)
    st.write(dst, chosen.reshape(dst.view_shape))
    values = np.where(keep, _f32(x), f).astype(np.float32)
    _accumulate_max(st, ins, values, ins.args["reduce_cmd"], reduce_res)


def _range_select(st, ins):
    dst, *rest = ins.dsts
    reduce_res = rest[0] if ins.args["reduce_res"] else None
    on_true, b0, b1 = ins.srcs
    a = ins.args
    p = dst.view_shape[0]
    x = _f32(_rows(st.read(on_true, ins)))
    j = (a["range_start"] + np.arange(x.shape[1], dtype=np.int64)).astype(np.float32)
    lo = _f32(st.read(b0, ins)).reshape(p, 1)
    hi = _f32(st.read(b1, ins)).reshape(p, 1)
    keep = _CMP[a["comp_op0"]](j[None, :], lo) & _CMP[a["comp_op1"]](j[None, :], hi)
    values = np.where(keep, x, np.float32(a["on_false_value"])).astype(np.float32)
    st.write(dst, convert(values, dst.view_dtype).reshape(dst.view_shape))
    _accumulate_max(st, ins, values, a["reduce_cmd"], reduce_res)


def _tensor_copy_predicated(st, ins):
    (dst,) = ins.dsts
    pred = ins.srcs[0]
    keep = _rows(st.read(pred, ins, matters="predicate")).reshape(-1) != 0
    if ins.args["reverse_pred"]:
        keep = ~keep
    if len(ins.srcs) > 1:
        src = ins.srcs[1]
        values = _used(st, ins, src, keep.reshape(src.view_shape)).reshape(-1)
    else:
        values = np.broadcast_to(_scalar(ins.args["value"], dst.view_dtype), keep.shape)
    _write_where(st, dst, values, keep)


# -- sorting and finding ---------------------------------------------------------------------


def _descending(x):
    """Per row of float32 ``x``, the element positions from the largest value down: NaN above
    +inf, equal values (-0 and +0 among them) in the order of their positions."""
    key = np.where(np.isnan(x), np.inf, x)
    nan = np.isnan(x)
    # lexsort: the last key is the primary one
    pos = np.broadcast_to(np.arange(x.shape[1]), x.shape)
    return np.lexsort((pos, -key, ~nan), axis=-1)


def _max8(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    x = _f32(_rows(st.read(src, ins)))
    order = _descending(x)[:, :8]
    top = np.take_along_axis(x, order, axis=1)
    st.write(dst, convert(top, dst.view_dtype).reshape(dst.view_shape))


def _matches(data, vals, order):
    """Per row, the data position each of the 8 ``vals`` takes, visiting the vals in
    ``order``: each takes the first position equal to it (float32 equality) that no val
    before it took; -1 where none is left."""
    p = data.shape[0]
    out = np.full((p, 8), -1, np.int64)
    for r in range(p):
        taken = set()
        row = data[r]
        for i in order:
            hits = np.flatnonzero(row == vals[r, i])
            for h in hits:
                if int(h) not in taken:
                    taken.add(int(h))
                    out[r, i] = h
                    break
    return out


def _indices(pos, ref):
    """Positions as the index dtype (uint16 / uint32): -1 (not found) all ones."""
    bits = np.iinfo(ref.element.storage).max
    return np.where(pos < 0, bits, pos).astype(ref.element.storage)


def _find_index8(st, ins):
    (dst,), (data, vals) = ins.dsts, ins.srcs
    x = _f32(_rows(st.read(data, ins)))
    v = _f32(_rows(st.read(vals, ins)))
    pos = _matches(x, v, range(8))
    st.write(dst, _indices(pos, dst).reshape(dst.view_shape))


def _match_replace8(st, ins):
    dst, *rest = ins.dsts
    data, vals = ins.srcs
    raw = _rows(st.read(data, ins))
    x = _f32(raw)
    v = _f32(_rows(st.read(vals, ins)))
    pos = _matches(x, v, range(7, -1, -1))
    out = _moved(raw, data, dst).copy()
    imm = _scalar(ins.args["imm"], dst.view_dtype)
    rows = np.nonzero(pos >= 0)
    out[rows[0], pos[rows]] = imm
    if rest:  # dst_idx, written before dst: the two may not overlap (the builder's order)
        st.write(rest[0], _indices(pos, rest[0]).reshape(rest[0].view_shape))
    st.write(dst, out.reshape(dst.view_shape))


def _topk(st, ins):
    val_dst, idx_dst = ins.dsts
    (src,) = ins.srcs
    n, k = ins.args["n"], ins.args["k"]
    p = src.view_shape[0]
    cols = -(-n // GPSIMD_PARTITIONS)
    # the snake: element e at partition e % 16 of its group, column e // 16
    e = np.arange(GPSIMD_PARTITIONS * cols)
    used = np.zeros((p, src.size // p), bool)
    for g in range(0, p, GPSIMD_PARTITIONS):
        used[g + e[:n] % GPSIMD_PARTITIONS, e[:n] // GPSIMD_PARTITIONS] = True
    raw = _rows(_used(st, ins, src, used.reshape(src.view_shape)))
    vals = np.empty((p, k), raw.dtype)
    idx = np.empty((p, k), np.uint32)
    for g in range(0, p, GPSIMD_PARTITIONS):
        snake = raw[g : g + GPSIMD_PARTITIONS, :cols].T.reshape(-1)[:n]
        order = _descending(_f32(snake)[None, :])[0, :k][::-1]  # ascending
        vals[g : g + GPSIMD_PARTITIONS] = snake[order]
        idx[g : g + GPSIMD_PARTITIONS] = order
    st.write(val_dst, vals.reshape(val_dst.view_shape))
    st.write(idx_dst, idx.reshape(idx_dst.view_shape))


def _nonzero_with_count(st, ins):
    """Each GpSimd core's 0th partition (absolute partitions 0, 16, ...): a core whose
    partition nothing wrote (a kernel that loads only the cores it uses, as the library's
    benchmark loads partition 0) computes on garbage: its output row is left unwritten, so
    that reading it is the uninitialized read; a partition written in part is one."""
    (dst,), (src,) = ins.dsts, ins.srcs
    p = src.view_shape[0]
    p0 = _start_partition(src)
    active = (p0 + np.arange(p)) % GPSIMD_PARTITIONS == 0
    x, written = _raw(st, src)
    x, written = _rows(x), _rows(written)
    garbage = active & ~written.any(axis=1)
    active &= ~garbage
    _need(
        st,
        ins,
        src,
        written.reshape(src.view_shape),
        np.broadcast_to(active[:, None], written.shape).reshape(src.view_shape),
    )
    t = x.shape[1]
    out = np.zeros((p, t + 1), np.int64)
    for r in np.flatnonzero(active):
        nz = np.flatnonzero(x[r] != 0)  # float: -0 is zero, NaN is not
        out[r, : nz.size] = _wrap32(nz + ins.args["index_offset"])
        out[r, nz.size : t] = ins.args["padding_val"]
        out[r, t] = nz.size
    _write_where(st, dst, out.astype(np.int32), np.broadcast_to(active[:, None], (p, t + 1)))
    _unwrite(st, dst, np.broadcast_to(garbage[:, None], (p, t + 1)))


def _sequence_bounds(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    ids = st.read(src, ins).reshape(-1)
    n = ids.size
    bad = (ids < 0) | (ids != np.floor(ids)) if ids.dtype.kind == "f" else ids < 0
    if ids.dtype.kind == "f":
        bad |= ~np.isfinite(ids)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise KernelError(
            f"{where(ins)}segment_ids[{i}] = {ids[i]}: segment IDs are non-negative integers"
        )
    start = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    # a run of equal nonzero IDs is one segment: its first position, one past its last
    first = 0
    for i in range(n):
        if i > 0 and ids[i] != ids[i - 1]:
            first = i
        start[i] = first
    last = n
    for i in range(n - 1, -1, -1):
        if i < n - 1 and ids[i] != ids[i + 1]:
            last = i + 1
        end[i] = last
    pad = ids == 0
    start[pad] = n
    end[pad] = -1
    out = np.concatenate([start, end])
    st.write(dst, convert(out, dst.view_dtype).reshape(dst.view_shape))


# -- moving and gathering --------------------------------------------------------------------


def _stream_shuffle(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    mask = ins.args["mask"]
    pd = dst.view_shape[0]
    ps = src.view_shape[0]
    take = np.full(pd, -1, np.int64)
    for i in range(pd):
        m = mask[i % QUADRANT]
        if m != SHUFFLE_KEEP:
            take[i] = (i // QUADRANT) * QUADRANT + m
    if (take >= ps).any():
        i = int(np.flatnonzero(take >= ps)[0])
        raise KernelError(
            f"{where(ins)}dst partition {i} takes src partition {take[i]}; src has {ps}"
        )
    rows = np.zeros(ps, bool)
    rows[take[take >= 0]] = True
    f = src.size // ps
    x = _rows(_used(st, ins, src, np.broadcast_to(rows[:, None], (ps, f)).reshape(src.view_shape)))
    out = x[np.maximum(take, 0)]
    mask_rows = np.broadcast_to((take >= 0)[:, None], (pd, f))
    _write_where(st, dst, out, mask_rows)


def _local_gather(st, ins):
    (dst,), (src, index) = ins.dsts, ins.srcs
    e, valid = ins.args["elems"], ins.args["valid"]
    p = src.view_shape[0]
    idx = _rows(st.read(index, ins, matters="index")).astype(np.int64)
    f = src.size // p
    want = np.zeros((p, f), bool)
    picks = []
    for g in range(0, p, GPSIMD_PARTITIONS):
        flat = idx[g : g + GPSIMD_PARTITIONS].T.reshape(-1)[:valid]  # partition first
        if flat.size and (flat.max() + e > f):
            k = int(np.flatnonzero(flat + e > f)[0])
            raise KernelError(
                f"{where(ins)}index {int(flat[k])} (the core of partitions {g}..{g + 15}, "
                f"valid index {k}) + {e} elements leaves src_buffer's {f} per partition"
            )
        cols = (flat[:, None] + np.arange(e)).reshape(-1)
        want[g : g + GPSIMD_PARTITIONS, cols] = True
        picks.append(cols)
    x = _rows(_used(st, ins, src, want.reshape(src.view_shape)))
    out = np.empty((p, valid * e), x.dtype)
    for c, cols in enumerate(picks):
        g = c * GPSIMD_PARTITIONS
        out[g : g + GPSIMD_PARTITIONS] = x[g : g + GPSIMD_PARTITIONS][:, cols]
    st.write(dst, out.reshape(dst.view_shape))


def _n_gather(st, ins):
    (dst,), (data, indices) = ins.dsts, ins.srcs
    p = data.view_shape[0]
    idx = _rows(st.read(indices, ins, matters="index")).astype(np.int64)
    f = data.size // p
    if (idx >= f).any():
        r, c = (int(i) for i in np.argwhere(idx >= f)[0])
        raise KernelError(
            f"{where(ins)}indices[{r}, {c}] = {idx[r, c]} leaves data's {f} elements per partition"
        )
    want = np.zeros((p, f), bool)
    np.put_along_axis(want, idx, True, axis=1)
    x = _rows(_used(st, ins, data, want.reshape(data.view_shape)))
    st.write(dst, np.take_along_axis(x, idx, axis=1).reshape(dst.view_shape))


OPS = {
    "iota": _iota,
    "affine_select": _affine_select,
    "select_reduce": _select_reduce,
    "range_select": _range_select,
    "tensor_copy_predicated": _tensor_copy_predicated,
    "max8": _max8,
    "nc_find_index8": _find_index8,
    "nc_match_replace8": _match_replace8,
    "topk": _topk,
    "nonzero_with_count": _nonzero_with_count,
    "sequence_bounds": _sequence_bounds,
    "nc_stream_shuffle": _stream_shuffle,
    "local_gather": _local_gather,
    "nc_n_gather": _n_gather,
}


# -- costs -----------------------------------------------------------------------------------


def _per_partition(ref):
    return ref.size // ref.view_shape[0]


def _streams_first_input(ins):
    """max8 / nc_find_index8 / nc_match_replace8 / nonzero_with_count stream their data once
    (the 8 vals and the small outputs ride along)."""
    return _per_partition(ins.srcs[0]), 1


def _streams_topk(ins):
    """The reference's estimate: ``4 n + K`` GpSimd cycles."""
    return 4 * ins.args["n"] + ins.args["k"], 1


def _streams_sequence_bounds(ins):
    return _per_partition(ins.srcs[0]), 1


def _streams_gathered(ins):
    """local_gather: one cycle per element gathered into a partition."""
    return _per_partition(ins.dsts[0]), 1


def _streams_n_gather(ins):
    """nc_n_gather: ``ceil(F / 512)`` GpSimd instructions for ``F`` gathered elements per
    partition, each with the engine's start-up; one cycle per element."""
    f = _per_partition(ins.dsts[0])
    return f + GPSIMD_STARTUP * (-(-f // N_GATHER_CHUNK) - 1), 1


STREAMS = {
    "max8": _streams_first_input,
    "nc_find_index8": _streams_first_input,
    "nc_match_replace8": _streams_first_input,
    "nonzero_with_count": _streams_first_input,
    "topk": _streams_topk,
    "sequence_bounds": _streams_sequence_bounds,
    "local_gather": _streams_gathered,
    "nc_n_gather": _streams_n_gather,
}
