"""Kernels for the tests of selection, index generation, sorting and gathering
(tests/test_nki_select.py): each runs one instruction between a load and a store."""

import nki
import nki.isa as nisa
import nki.language as nl


def _load(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _store(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def iota(x, pattern, offset=0, channel_multiplier=0):
    """x: the shape and dtype of the generated tile (its values unused)."""
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.iota(dst, pattern, offset=offset, channel_multiplier=channel_multiplier)
    return _store(dst)


@nki.jit
def affine_select(x, pattern, offset, channel_multiplier, cmp, false, dtype):
    src = _load(x)
    dst = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
    nisa.affine_select(
        dst=dst,
        pattern=pattern,
        offset=offset,
        channel_multiplier=channel_multiplier,
        cmp_op=getattr(nl, cmp),
        on_true_tile=src,
        on_false_value=false,
    )
    return _store(dst)


@nki.jit
def causal_mask(x):
    """In place, as attention kernels mask their scores: keep column <= row."""
    t = _load(x)
    nisa.affine_select(
        dst=t,
        pattern=[[-1, x.shape[1]]],
        channel_multiplier=1,
        on_true_tile=t,
        on_false_value=-3.4028235e38,
        cmp_op=nl.greater_equal,
    )
    return _store(t)


@nki.jit
def select_reduce(pred, on_true, false, reverse, cmds, dtype, psum=False):
    """One select_reduce per entry of ``cmds`` (each on a slice of the columns), the last with
    reduce_res; ``false``: a number, or None for a [P, 1] tensor of -(row + 1)."""
    p, f = on_true.shape
    pr = _load(pred)
    t = _load(on_true)
    if psum:
        tp = nl.ndarray((p, f), dtype=on_true.dtype, buffer=nl.psum)
        nisa.tensor_copy(dst=tp, src=t)
        t = tp
    if false is None:
        col = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(col, [[0, 1]], offset=-1, channel_multiplier=-1)
        false = col
    dst = nl.ndarray((p, f), dtype=dtype, buffer=nl.sbuf)
    res = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    w = f // len(cmds)
    for i, cmd in enumerate(cmds):
        cols = nl.ds(i * w, w)
        last = i == len(cmds) - 1
        nisa.select_reduce(
            dst=dst[:, cols],
            predicate=pr[:, cols],
            on_true=t[:, cols],
            on_false=false,
            reduce_res=res if last else None,
            reduce_cmd=getattr(nisa.reduce_cmd, cmd),
            reverse_pred=reverse,
        )
    return _store(dst), _store(res)


@nki.jit
def range_select(x, b0, b1, op0, op1, start, dtype, cmd="reset_reduce"):
    t = _load(x)
    lo = _load(b0)
    hi = _load(b1)
    dst = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
    res = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(
        dst=dst,
        on_true_tile=t,
        comp_op0=getattr(nl, op0),
        comp_op1=getattr(nl, op1),
        bound0=lo,
        bound1=hi,
        reduce_cmd=getattr(nisa.reduce_cmd, cmd),
        reduce_res=res,
        range_start=start,
    )
    return _store(dst), _store(res)


@nki.jit
def copy_predicated(init, src, pred, reverse, scalar=None):
    d = _load(init)
    p = _load(pred)
    s = scalar if scalar is not None else _load(src)
    nisa.tensor_copy_predicated(dst=d, src=s, predicate=p, reverse_pred=reverse)
    return _store(d)


@nki.jit
def max8(x, dtype):
    t = _load(x)
    dst = nl.ndarray((x.shape[0], 8), dtype=dtype, buffer=nl.sbuf)
    nisa.max8(dst=dst, src=t)
    return _store(dst)


@nki.jit
def find_index8(data, vals, dtype):
    a = _load(data)
    v = _load(vals)
    dst = nl.ndarray((data.shape[0], 8), dtype=dtype, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=dst, data=a, vals=v)
    return _store(dst)


@nki.jit
def match_replace8(data, vals, imm, with_idx=True, dtype=None):
    a = _load(data)
    v = _load(vals)
    dst = nl.ndarray(data.shape, dtype=dtype or data.dtype, buffer=nl.sbuf)
    idx = nl.ndarray((data.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_match_replace8(dst=dst, data=a, vals=v, imm=imm, dst_idx=idx if with_idx else None)
    if with_idx:
        return _store(dst), _store(idx)
    return _store(dst)


@nki.jit
def topk_by_max8(x, k):
    """The library's way: max8 then nc_match_replace8 (in place), k/8 times."""
    data = _load(x)
    p = x.shape[0]
    vals = nl.ndarray((p, k), dtype=x.dtype, buffer=nl.sbuf)
    idx = nl.ndarray((p, k), dtype=nl.uint32, buffer=nl.sbuf)
    for i in range(k // 8):
        cols = nl.ds(8 * i, 8)
        nisa.max8(dst=vals[:, cols], src=data)
        nisa.nc_match_replace8(
            dst=data, data=data, vals=vals[:, cols], imm=float("-inf"), dst_idx=idx[:, cols]
        )
    return _store(vals), _store(idx)


@nki.jit
def topk(x, n, k):
    t = _load(x)
    vals = nl.ndarray((x.shape[0], k), dtype=nl.bfloat16, buffer=nl.sbuf)
    idx = nl.ndarray((x.shape[0], k), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.topk(val_dst=vals, idx_dst=idx, src=t, n=n)
    return _store(vals), _store(idx)


@nki.jit
def nonzero_with_count(x, init, index_offset, padding_val, first=0):
    """``x`` loaded into partitions ``first ..`` of a tile, only where a GpSimd core reads (its
    0th partition: 0, 16, ...); the instruction's views start at ``first``."""
    p, t = x.shape
    src = nl.ndarray((first + p, t), dtype=x.dtype, buffer=nl.sbuf)
    for q in range(first, first + p):
        if q % 16 == 0:
            nisa.dma_copy(dst=src[q : q + 1, :], src=x[q - first : q - first + 1, :])
    dst = nl.ndarray((first + p, t + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=dst[first : first + p, :], src=init)
    nisa.nonzero_with_count(
        dst=dst[first : first + p, :],
        src=src[first : first + p, :],
        index_offset=index_offset,
        padding_val=padding_val,
    )
    return _store(dst[first : first + p, :])


@nki.jit
def sequence_bounds(ids, dtype):
    s = _load(ids)
    dst = nl.ndarray((1, 2, ids.shape[1]), dtype=dtype, buffer=nl.sbuf)
    nisa.sequence_bounds(dst=dst, segment_ids=s)
    return _store(dst)


@nki.jit
def stream_shuffle(x, init, mask, src_rows=None, dst_rows=None, in_place=False):
    s = _load(x)
    d = s if in_place else _load(init)
    sv = s if src_rows is None else s[src_rows[0] : src_rows[1], :]
    dv = d if dst_rows is None else d[dst_rows[0] : dst_rows[1], :]
    nisa.nc_stream_shuffle(dst=dv, src=sv, shuffle_mask=mask)
    return _store(d)


@nki.jit
def local_gather(src, index, num_elem_per_idx, num_valid_indices):
    s = _load(src)
    i = _load(index)
    valid = num_valid_indices or 16 * index.shape[1]
    dst = nl.ndarray((src.shape[0], valid * num_elem_per_idx), dtype=src.dtype, buffer=nl.sbuf)
    nisa.local_gather(
        dst=dst,
        src_buffer=s,
        index=i,
        num_elem_per_idx=num_elem_per_idx,
        num_valid_indices=num_valid_indices,
    )
    return _store(dst)


@nki.jit
def n_gather(data, indices):
    a = _load(data)
    i = _load(indices)
    dst = nl.ndarray(indices.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.nc_n_gather(dst=dst, data=a, indices=i)
    return _store(dst)


@nki.jit
def one(x, op, f=64, n=64, k=8):
    """One instruction of ``op`` on [128, f] SBUF tiles, for the timing tests."""
    p = x.shape[0]
    a = _load(x)
    if op == "iota":
        d = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(d, [[1, f]])
    elif op == "affine_select":
        d = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
        nisa.affine_select(d, [[1, f]], 1, a, 0.0)
    elif op == "max8":
        d = nl.ndarray((p, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.max8(d, a)
    elif op == "nc_find_index8":
        d = nl.ndarray((p, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.nc_find_index8(d, a, a[:, 0:8])
    elif op == "nc_match_replace8":
        d = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_match_replace8(d, a, a[:, 0:8], 0.0)
    elif op == "topk":
        s = nl.ndarray((p, f), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=a)
        d = nl.ndarray((p, k), dtype=nl.bfloat16, buffer=nl.sbuf)
        i = nl.ndarray((p, k), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(d, i, s, n)
    elif op == "nc_n_gather":
        ix = nl.ndarray((p, f), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.iota(ix, [[0, f]])
        d = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(d, a, ix)
    elif op == "local_gather":
        ix = nl.ndarray((p, 1), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.iota(ix, [[0, 1]])
        d = nl.ndarray((p, 16 * 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.local_gather(d, a, ix, num_elem_per_idx=4)
    elif op == "nonzero_with_count":
        d = nl.ndarray((p, f + 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(d, a)
        d = d[0:1, :]  # the partitions GpSimd wrote: 0, 16, ...
    elif op == "nc_stream_shuffle":
        d = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(d, a, list(range(32)))
    else:
        raise ValueError(op)
    return _store(d)


@nki.jit
def bad(x, case):
    """One broken rule per ``case``, on the line marked with it."""
    p = x.shape[0]
    a = _load(x)  # [128, 64] float32
    f32 = nl.ndarray((p, 64), dtype=nl.float32, buffer=nl.sbuf)
    ps = nl.ndarray((p, 64), dtype=nl.float32, buffer=nl.psum)
    u8 = nl.ndarray((p, 64), dtype=nl.uint8, buffer=nl.sbuf)
    col = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    e8 = nl.ndarray((p, 8), dtype=nl.uint32, buffer=nl.sbuf)
    if case == "iota_psum":
        nisa.iota(ps, [[1, 64]])  # LINE iota_psum
    elif case == "iota_pattern":
        nisa.iota(f32, [[1, 32]])  # LINE iota_pattern
    elif case == "iota_offset":
        nisa.iota(f32, [[1, 64]], offset=1 << 31)  # LINE iota_offset
    elif case == "iota_keyword":
        nisa.iota(f32, [[1, 64]], start=1)  # LINE iota_keyword
    elif case == "affine_cmp":
        nisa.affine_select(f32, [[1, 64]], 1, a, 0.0, cmp_op=nl.add)  # LINE affine_cmp
    elif case == "affine_false":
        nisa.affine_select(f32, [[1, 64]], 1, a, a)  # LINE affine_false
    elif case == "select_pred_dtype":
        nisa.select_reduce(dst=f32, predicate=a, on_true=a, on_false=0.0)  # LINE select_pred_dtype
    elif case == "select_both_psum":
        pp = nl.ndarray((p, 64), dtype=nl.uint8, buffer=nl.psum)
        nisa.select_reduce(dst=f32, predicate=pp, on_true=ps, on_false=0.0)  # LINE select_both_psum
    elif case == "select_cmd":
        nisa.select_reduce(  # LINE select_cmd
            dst=f32, predicate=u8, on_true=a, on_false=0.0, reduce_cmd=nisa.reduce_cmd.load_reduce
        )
    elif case == "select_res":
        nisa.select_reduce(  # LINE select_res
            dst=f32, predicate=u8, on_true=a, on_false=0.0, reduce_res=e8
        )
    elif case == "range_version":
        nisa.range_select(  # LINE range_version
            dst=f32, on_true_tile=a, comp_op0=nl.less, comp_op1=nl.less, bound0=col, bound1=col
        )
    elif case == "range_false":
        nisa.range_select(  # LINE range_false
            dst=f32,
            on_true_tile=a,
            comp_op0=nl.less,
            comp_op1=nl.less,
            bound0=col,
            bound1=col,
            on_false_value=0.0,
        )
    elif case == "range_op":
        nisa.range_select(  # LINE range_op
            dst=f32, on_true_tile=a, comp_op0=nl.not_equal, comp_op1=nl.less, bound0=col, bound1=col
        )
    elif case == "predicated_dtype":
        b = nl.ndarray((p, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy_predicated(dst=f32, src=b, predicate=u8)  # LINE predicated_dtype
    elif case == "max8_few":
        nisa.max8(dst=f32[:, 0:8], src=a[:, 0:4])  # LINE max8_few
    elif case == "max8_dst":
        nisa.max8(dst=f32[:, 0:16], src=a)  # LINE max8_dst
    elif case == "find_dtype":
        nisa.nc_find_index8(dst=f32[:, 0:8], data=a, vals=a[:, 0:8])  # LINE find_dtype
    elif case == "match_v2_idx":
        nisa.nc_match_replace8(  # LINE match_v2_idx
            dst=f32, data=a, vals=a[:, 0:8], imm=0.0, dst_idx=e8
        )
    elif case == "topk_partitions":
        s = nl.ndarray((8, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
        v = nl.ndarray((8, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.topk(v, e8[0:8, :], s, 40)  # LINE topk_partitions
    elif case == "topk_k":
        s = nl.ndarray((p, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
        v = nl.ndarray((p, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        i = nl.ndarray((p, 64), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(v, i, s, 40)  # LINE topk_k
    elif case == "nonzero_version":
        d = nl.ndarray((p, 65), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(d, a)  # LINE nonzero_version
    elif case == "nonzero_size":
        d = nl.ndarray((p, 64), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(d, a)  # LINE nonzero_size
    elif case == "bounds_partitions":
        d = nl.ndarray((2, 2, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.sequence_bounds(d, a[0:2, :])  # LINE bounds_partitions
    elif case == "shuffle_mask":
        nisa.nc_stream_shuffle(f32, a, list(range(31)))  # LINE shuffle_mask
    elif case == "shuffle_start":
        nisa.nc_stream_shuffle(f32[16:48, :], a[0:32, :], list(range(32)))  # LINE shuffle_start
    elif case == "gather_elems":
        ix = nl.ndarray((p, 1), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.local_gather(f32[:, 0:48], a, ix, num_elem_per_idx=3)  # LINE gather_elems
    elif case == "gather_index":
        ix = nl.ndarray((p, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.local_gather(f32[:, 0:16], a, ix)  # LINE gather_index
    elif case == "n_gather_dtype":
        b = nl.ndarray((p, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.nc_n_gather(b, a, e8)  # LINE n_gather_dtype
    elif case == "predicated_indirect":
        ix = nl.ndarray((p, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(ix, [[1, 4]])
        nisa.tensor_copy_predicated(f32[:, 0:64], a.indirect(ix), u8)  # LINE predicated_indirect
    return _store(a)


@nki.jit
def bad_values(x, ix, case):
    """Rules on the values, broken when the golden runs: a gather index out of range,
    a negative segment ID."""
    a = _load(x)
    i = _load(ix)
    if case == "n_gather":
        d = nl.ndarray(ix.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.nc_n_gather(d, a, i)  # LINE n_gather_range
    elif case == "local_gather":
        d = nl.ndarray((x.shape[0], 16 * ix.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.local_gather(d, a, i)  # LINE local_gather_range
    else:
        d = nl.ndarray((1, 2, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(d, a)  # LINE bounds_negative
    return _store(d)


@nki.jit
def nonzero_partition0(x, store_row):
    """The library's benchmark: only partition 0 loaded, the instruction over 128 partitions;
    dst set first, then the row ``store_row`` stored."""
    t = x.shape[1]
    src = nl.ndarray((128, t), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src[0:1, :], src=x)
    dst = nl.ndarray((128, t + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=dst, value=5)
    nisa.nonzero_with_count(dst=dst, src=src)
    out = nl.ndarray((1, t + 1), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst[store_row : store_row + 1, :])  # LINE store_row
    return out
