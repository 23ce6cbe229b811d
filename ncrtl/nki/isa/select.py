"""Selection, index generation, sorting and gathering: ``iota``, ``affine_select``,
``select_reduce``, ``range_select``, ``tensor_copy_predicated``, ``max8``, ``nc_find_index8``,
``nc_match_replace8``, ``topk``, ``nonzero_with_count``, ``sequence_bounds``,
``nc_stream_shuffle``, ``local_gather`` and ``nc_n_gather`` on the Vector and GpSimd engines.

Each call checks its operands against the reference's rules when the kernel is traced (each
error one line: the kernel's ``file:line``, the call, the argument and the rule) and appends one
instruction to its engine's stream; the values are the golden's
(:mod:`ncrtl.model.kernel.ops.select`), the costs the timing run's (docs/nki/select.md)."""

from __future__ import annotations

import math

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of

from .._trace import NkiTensor, current, fail
from ..language import equal, maximum
from .enums import reduce_cmd
from .operands import emit, free_size, need_tensor, op_name, operand

__all__ = [
    "iota",
    "affine_select",
    "select_reduce",
    "range_select",
    "tensor_copy_predicated",
    "max8",
    "nc_find_index8",
    "nc_match_replace8",
    "topk",
    "nonzero_with_count",
    "sequence_bounds",
    "nc_stream_shuffle",
    "local_gather",
    "nc_n_gather",
]

INT32 = (-(1 << 31), (1 << 31) - 1)
#: ``range_select``'s one ``on_false_value`` (the reference's hardware constraint).
FP32_MIN = float(np.finfo(np.float32).min)
#: The comparisons of ``affine_select`` (``cmp_op``) and ``range_select`` (``comp_op0/1``).
AFFINE_CMPS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
RANGE_CMPS = ("equal", "less", "less_equal", "greater", "greater_equal")
#: ``reduce_cmd`` values the selecting reductions take (the reference's list for them).
SELECT_REDUCE_CMDS = ("idle", "reset", "reduce", "reset_reduce")
#: The elements per partition ``max8`` / ``nc_find_index8`` / ``nc_match_replace8`` read.
FIND_RANGE = (8, 16384)
GATHER_ELEMS = (1, 2, 4, 8, 16, 32)
GPSIMD_PARTITIONS = 16  # partitions per GpSimd core
QUADRANT = 32  # partitions a stream shuffle moves within
SHUFFLE_KEEP = 255  # shuffle_mask entry: leave the output partition as it is


# -- what the calls share ----------------------------------------------------------------------


def _int32(call, what, v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        fail(call, f"{what} must be an int32 known when the kernel is traced, not {v!r}")
    v = int(v)
    if not INT32[0] <= v <= INT32[1]:
        fail(call, f"{what}={v} is outside int32 [{INT32[0]}, {INT32[1]}]")
    return v


def _number(call, what, v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        fail(call, f"{what} must be a number known when the kernel is traced, not {v!r}")
    return float(v)


def _pattern(call, pattern, dst):
    """``[[step, num], ...]`` (1 to 4 entries, int32) whose nums multiply to ``dst``'s elements
    per partition; as a tuple of ``(step, num)``."""
    if not isinstance(pattern, (list, tuple)) or not pattern:
        fail(call, f"pattern must be a list of [step, num] (1 to 4 of them), not {pattern!r}")
    if len(pattern) > 4:
        fail(call, f"pattern has {len(pattern)} dimensions; at most 4 ([w, z, y, x])")
    out = []
    for i, pair in enumerate(pattern):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            fail(call, f"pattern[{i}] must be [step, num], not {pair!r}")
        step = _int32(call, f"pattern[{i}] step", pair[0])
        num = _int32(call, f"pattern[{i}] num", pair[1])
        if num < 1:
            fail(call, f"pattern[{i}] num {num} must be at least 1")
        out.append((step, num))
    n = math.prod(num for _, num in out)
    if n != free_size(dst):
        fail(
            call,
            f"pattern {[list(p) for p in out]} generates {n} elements per partition; dst "
            f"{list(dst.shape)} has {free_size(dst)}",
        )
    return tuple(out)


def _unpacked(call, what, t):
    if dtype_of(t.dtype).packed != 1:
        fail(call, f"{what} dtype {t.dtype}: a packed type holds no single elements to select")


def _dtype_in(call, what, t, allowed):
    if t.dtype not in allowed:
        fail(call, f"{what} dtype {t.dtype} must be {' or '.join(allowed)}")


def _float(call, what, t):
    if not dtype_of(t.dtype).is_float:
        fail(call, f"{what} dtype {t.dtype} must be a float type")


def _same_partitions(call, ref_what, ref, *others):
    for what, t in others:
        if t.shape[0] != ref.shape[0]:
            fail(
                call,
                f"{what} {list(t.shape)} and {ref_what} {list(ref.shape)} must have the same "
                f"partitions",
            )


def _same_layout(call, ref_what, ref, *others):
    for what, t in others:
        if t.shape[0] != ref.shape[0] or free_size(t) != free_size(ref):
            fail(
                call,
                f"{what} {list(t.shape)} and {ref_what} {list(ref.shape)} must have the same "
                f"partitions and elements per partition",
            )


def _column(call, what, t, p):
    """A ``[P, 1]`` tensor: one element per partition."""
    if t.shape[0] != p or free_size(t) != 1:
        fail(call, f"{what} {list(t.shape)} must be [{p}, 1] (one element per partition)")


def _one_in_psum(call, a_what, a, b_what, b):
    if isinstance(a, NkiTensor) and isinstance(b, NkiTensor):
        if a._decl.space == "psum" and b._decl.space == "psum":
            fail(call, f"{a_what} and {b_what} are both in PSUM; at most one of them may be")


def _start_partition(t):
    """The first partition an on-chip view reads (SBUF and PSUM tensors hold partitions
    0 .. shape[0] - 1)."""
    return t.offset // t._row_elements()


def _whole_partitions(call, what, t):
    """The view's partitions follow one another (no step over partitions)."""
    if t.shape[0] > 1 and t.strides[0] != t._row_elements():
        fail(call, f"{what} {t.name} must read consecutive partitions (a partition step of 1)")


def _version(call, least):
    tr = current(call)
    if int(tr.core.name[1]) < least:
        fail(call, f"needs NeuronCore-v{least} or newer; the kernel targets {tr.core.name}")
    return tr


def _reduce(call, reduce_op, cmd, reduce_res, p, srcs_dsts):
    """The accumulator arguments of select_reduce / range_select: ``(op, cmd name)``;
    ``reduce_res`` (a ``[P, 1]`` float tensor) appended to the destinations."""
    if op_name(call, "reduce_op", reduce_op, ("maximum",)) != "maximum":
        fail(call, "reduce_op: only nl.maximum")
    name = getattr(cmd, "name", None)
    if not isinstance(cmd, reduce_cmd) or name not in SELECT_REDUCE_CMDS:
        fail(
            call,
            f"reduce_cmd={cmd!r}: one of "
            + ", ".join(f"nisa.reduce_cmd.{c}" for c in SELECT_REDUCE_CMDS),
        )
    if reduce_res is not None:
        need_tensor(call, "reduce_res", reduce_res)
        _column(call, "reduce_res", reduce_res, p)
        _float(call, "reduce_res", reduce_res)
        srcs_dsts.append(operand(call, "reduce_res", reduce_res, ("sbuf", "psum")))
    return name


# -- index generation ------------------------------------------------------------------------


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """``dst[c, w, z, y, x] = offset + c * channel_multiplier + w * step_w + ... + x * step_x``
    in int32 on the GpSimd engine, converted to ``dst``'s dtype."""
    call = "nisa.iota"
    d = operand(call, "dst", dst, ("sbuf",))
    _unpacked(call, "dst", dst)
    args = {
        "pattern": _pattern(call, pattern, dst),
        "offset": _int32(call, "offset", offset),
        "channel_multiplier": _int32(call, "channel_multiplier", channel_multiplier),
    }
    emit("gpsimd", "iota", [d], [], args, call)


def affine_select(
    dst,
    pattern,
    channel_multiplier,
    on_true_tile,
    on_false_value,
    cmp_op=equal,
    offset=0,
    name=None,
):
    """``dst = on_true_tile where cmp_op(affine value, 0) else on_false_value`` on the GpSimd
    engine; the affine value as :func:`iota`'s."""
    call = "nisa.affine_select"
    t = operand(call, "on_true_tile", on_true_tile, ("sbuf",))
    d = operand(call, "dst", dst, ("sbuf",))
    _unpacked(call, "dst", dst)
    _unpacked(call, "on_true_tile", on_true_tile)
    _same_layout(call, "dst", dst, ("on_true_tile", on_true_tile))
    args = {
        "pattern": _pattern(call, pattern, dst),
        "offset": _int32(call, "offset", offset),
        "channel_multiplier": _int32(call, "channel_multiplier", channel_multiplier),
        "cmp_op": op_name(call, "cmp_op", cmp_op, AFFINE_CMPS),
        "on_false_value": _number(call, "on_false_value", on_false_value),
    }
    emit("gpsimd", "affine_select", [d], [t], args, call)


# -- selection -------------------------------------------------------------------------------


def select_reduce(
    dst,
    predicate,
    on_true,
    on_false,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    reduce_op=maximum,
    reverse_pred=False,
    name=None,
):
    """``dst = on_true where predicate (!= 0, reversed by reverse_pred) else on_false`` on the
    Vector engine, the maximum of each partition's result into the accumulator
    (``reduce_cmd``) and ``reduce_res``."""
    call = "nisa.select_reduce"
    pr = operand(call, "predicate", predicate, ("sbuf", "psum"))
    tr = operand(call, "on_true", on_true, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    _one_in_psum(call, "on_true", on_true, "predicate", predicate)
    _same_layout(call, "dst", dst, ("on_true", on_true), ("predicate", predicate))
    _unpacked(call, "dst", dst)
    _unpacked(call, "on_true", on_true)
    if on_true.dtype in ("tfloat32", "int32", "uint32"):
        fail(call, f"on_true dtype {on_true.dtype}: any type but tfloat32, int32 and uint32")
    _dtype_in(call, "predicate", predicate, ("int8", "uint8", "int16", "uint16"))
    srcs = [pr, tr]
    if isinstance(on_false, NkiTensor):
        _column(call, "on_false", on_false, dst.shape[0])
        srcs.append(operand(call, "on_false", on_false, ("sbuf", "psum")))
        false = {"tensor": 2}
    else:
        false = _number(call, "on_false", on_false)
    dsts = [d]
    cmd = _reduce(call, reduce_op, reduce_cmd, reduce_res, dst.shape[0], dsts)
    args = {
        "on_false": false,
        "reverse_pred": bool(reverse_pred),
        "reduce_cmd": cmd,
        "reduce_res": reduce_res is not None,
    }
    emit("vector", "select_reduce", dsts, srcs, args, call)


def range_select(
    dst,
    on_true_tile,
    comp_op0,
    comp_op1,
    bound0,
    bound1,
    reduce_cmd=reduce_cmd.reset_reduce,
    reduce_res=None,
    reduce_op=maximum,
    range_start=0,
    on_false_value=FP32_MIN,
    name=None,
):
    """``dst = on_true_tile where comp_op0(j, bound0) and comp_op1(j, bound1) else
    on_false_value``, ``j = range_start + free index`` (in float32), on the Vector engine
    (NeuronCore-v3 and newer); the maximum of each partition's result into the accumulator
    and ``reduce_res``."""
    call = "nisa.range_select"
    _version(call, 3)
    t = operand(call, "on_true_tile", on_true_tile, ("sbuf", "psum"))
    b0 = operand(call, "bound0", bound0, ("sbuf", "psum"))
    b1 = operand(call, "bound1", bound1, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    _same_layout(call, "dst", dst, ("on_true_tile", on_true_tile))
    p = on_true_tile.shape[0]
    for what, b in (("bound0", bound0), ("bound1", bound1)):
        _column(call, what, b, p)
        _dtype_in(call, what, b, ("float32",))
    _float(call, "on_true_tile", on_true_tile)
    _float(call, "dst", dst)
    ops = (
        op_name(call, "comp_op0", comp_op0, RANGE_CMPS),
        op_name(call, "comp_op1", comp_op1, RANGE_CMPS),
    )
    if on_false_value is Ellipsis:
        on_false_value = FP32_MIN
    false = _number(call, "on_false_value", on_false_value)
    if np.float32(false) != np.float32(FP32_MIN):
        fail(
            call,
            f"on_false_value={on_false_value!r}: the hardware takes only FP32_MIN ({FP32_MIN!r})",
        )
    start = _int32(call, "range_start", range_start)
    f = free_size(on_true_tile)
    if not (-(1 << 24) <= start and start + f - 1 <= 1 << 24):
        fail(
            call,
            f"range_start {start} + free index up to {f - 1} must stay within 2^24 (the indices "
            f"are compared as float32)",
        )
    dsts = [d]
    cmd = _reduce(call, reduce_op, reduce_cmd, reduce_res, p, dsts)
    args = {
        "comp_op0": ops[0],
        "comp_op1": ops[1],
        "range_start": start,
        "on_false_value": false,
        "reduce_cmd": cmd,
        "reduce_res": reduce_res is not None,
    }
    emit("vector", "range_select", dsts, [t, b0, b1], args, call)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """``dst = src`` where ``predicate`` is nonzero (zero with ``reverse_pred``), ``dst`` left
    as it is elsewhere, on the Vector engine; ``src`` a tensor or a number."""
    call = "nisa.tensor_copy_predicated"
    pr = operand(call, "predicate", predicate, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    _unpacked(call, "dst", dst)
    _dtype_in(call, "predicate", predicate, ("uint8", "uint16", "uint32"))
    srcs = [pr]
    if isinstance(src, NkiTensor):
        if src._dyn is not None:
            fail(call, "src: an .indirect / run-time offset view; only dst and predicate take one")
        srcs.append(operand(call, "src", src, ("sbuf", "psum")))
        _one_in_psum(call, "src", src, "predicate", predicate)
        _same_layout(call, "dst", dst, ("src", src), ("predicate", predicate))
        if src.dtype != dst.dtype:
            fail(call, f"src dtype {src.dtype} and dst dtype {dst.dtype} must be the same")
        value = None
    else:
        _same_layout(call, "dst", dst, ("predicate", predicate))
        value = _number(call, "src", src)
    args = {"value": value, "reverse_pred": bool(reverse_pred)}
    emit("vector", "tensor_copy_predicated", [d], srcs, args, call)


# -- sorting and finding ---------------------------------------------------------------------


def _find_input(call, what, t):
    n = free_size(t)
    _unpacked(call, what, t)
    if not FIND_RANGE[0] <= n <= FIND_RANGE[1]:
        fail(
            call,
            f"{what} {list(t.shape)} has {n} elements per partition; {FIND_RANGE[0]} to "
            f"{FIND_RANGE[1]}",
        )


def _eight(call, what, t, p):
    if t.shape[0] != p or free_size(t) != 8:
        fail(call, f"{what} {list(t.shape)} must be [{p}, 8]")


def max8(dst, src, name=None):
    """The 8 largest values of each partition of ``src``, in descending order, on the Vector
    engine (compared as float32, written in ``dst``'s dtype)."""
    call = "nisa.max8"
    s = operand(call, "src", src, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    _find_input(call, "src", src)
    _eight(call, "dst", dst, src.shape[0])
    _unpacked(call, "dst", dst)
    emit("vector", "max8", [d], [s], {}, call)


def nc_find_index8(dst, data, vals, name=None):
    """The index of the first occurrence in each partition of ``data`` of each of the 8
    ``vals`` (duplicates of a value take its later occurrences in turn); all ones where none,
    on the Vector engine."""
    call = "nisa.nc_find_index8"
    a = operand(call, "data", data, ("sbuf", "psum"))
    v = operand(call, "vals", vals, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    _find_input(call, "data", data)
    _unpacked(call, "vals", vals)
    _eight(call, "vals", vals, data.shape[0])
    _eight(call, "dst", dst, data.shape[0])
    _dtype_in(call, "dst", dst, ("uint16", "uint32"))
    emit("vector", "nc_find_index8", [d], [a, v], {}, call)


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """``data`` with the first occurrence of each of the 8 ``vals`` (taken in reverse order,
    ``vals[7]`` first) replaced by ``imm``, into ``dst``; the positions into ``dst_idx``, on
    the Vector engine."""
    call = "nisa.nc_match_replace8"
    tr = current(call)
    a = operand(call, "data", data, ("sbuf", "psum"))
    v = operand(call, "vals", vals, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    _find_input(call, "data", data)
    _unpacked(call, "vals", vals)
    _unpacked(call, "dst", dst)
    _eight(call, "vals", vals, data.shape[0])
    _same_layout(call, "data", data, ("dst", dst))
    dsts = [d]
    if dst_idx is not None:
        if tr.core.name == "v2":
            fail(call, "dst_idx needs NeuronCore-v3 or newer (on v2 use nisa.nc_find_index8)")
        dsts.append(operand(call, "dst_idx", dst_idx, ("sbuf", "psum")))
        _eight(call, "dst_idx", dst_idx, data.shape[0])
        _dtype_in(call, "dst_idx", dst_idx, ("uint16", "uint32"))
    args = {"imm": _number(call, "imm", imm), "dst_idx": dst_idx is not None}
    emit("vector", "nc_match_replace8", dsts, [a, v], args, call)


def topk(val_dst, idx_dst, src, n, name=None):
    """The K largest of the ``n`` BF16 values each 16-partition group of ``src`` holds as a
    snake (element ``e`` at partition ``e % 16``, column ``e // 16``), in ascending order,
    and their indices, written to every partition of the group, on the GpSimd engine
    (``4 n + K`` cycles)."""
    call = "nisa.topk"
    s = operand(call, "src", src, ("sbuf",))
    dv = operand(call, "val_dst", val_dst, ("sbuf",))
    di = operand(call, "idx_dst", idx_dst, ("sbuf",))
    _dtype_in(call, "src", src, ("bfloat16",))
    _dtype_in(call, "val_dst", val_dst, ("bfloat16",))
    _dtype_in(call, "idx_dst", idx_dst, ("uint32",))
    p = src.shape[0]
    if p % GPSIMD_PARTITIONS:
        fail(call, f"src {list(src.shape)}: the partitions must be a multiple of 16")
    if _start_partition(src) % GPSIMD_PARTITIONS:
        fail(call, f"src {src.name} must start on a multiple of 16 partitions (a GpSimd core's)")
    _whole_partitions(call, "src", src)
    n = _int32(call, "n", n)
    if not 8 <= n < 65536:
        fail(call, f"n={n}: 8 <= n < 65536")
    k = free_size(val_dst)
    for what, t in (("val_dst", val_dst), ("idx_dst", idx_dst)):
        if t.shape[0] != p:
            fail(call, f"{what} {list(t.shape)} must have src's {p} partitions")
    if free_size(idx_dst) != k:
        fail(call, f"idx_dst {list(idx_dst.shape)} and val_dst {list(val_dst.shape)}: [P, K] both")
    if not 1 <= k < 32768 or k > n:
        fail(call, f"K={k} (val_dst's elements per partition): 1 <= K < 32768 and K <= n={n}")
    if free_size(src) < -(-n // GPSIMD_PARTITIONS):
        fail(
            call,
            f"src {list(src.shape)} holds {free_size(src)} columns; n={n} needs "
            f"ceil(n / 16) = {-(-n // GPSIMD_PARTITIONS)}",
        )
    emit("gpsimd", "topk", [dv, di], [s], {"n": n, "k": k}, call)


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """Per GpSimd core (partitions 0, 16, ..., 112 only): the indices (+ ``index_offset``) of
    ``src``'s nonzero elements, then ``padding_val``, then their count (NeuronCore-v3 and
    newer)."""
    call = "nisa.nonzero_with_count"
    _version(call, 3)
    s = operand(call, "src", src, ("sbuf",))
    d = operand(call, "dst", dst, ("sbuf",))
    _dtype_in(call, "src", src, ("float32", "int32"))
    _dtype_in(call, "dst", dst, ("int32",))
    _same_partitions(call, "src", src, ("dst", dst))
    if free_size(dst) != free_size(src) + 1:
        fail(
            call,
            f"dst {list(dst.shape)} must have one element more per partition than src "
            f"{list(src.shape)} ({free_size(src) + 1})",
        )
    for what, t in (("src", src), ("dst", dst)):
        _whole_partitions(call, what, t)
    if _start_partition(src) != _start_partition(dst):
        fail(
            call,
            f"src starts at partition {_start_partition(src)}, dst at {_start_partition(dst)}: "
            f"each GpSimd core writes the partition it reads",
        )
    args = {
        "index_offset": _int32(call, "index_offset", index_offset),
        "padding_val": _int32(call, "padding_val", padding_val),
    }
    emit("gpsimd", "nonzero_with_count", [d], [s], args, call)


def sequence_bounds(dst, segment_ids, name=None):
    """Per element of ``segment_ids [1, n]`` the start and end (exclusive) of its run of equal
    IDs: ``dst [1, 2, n]`` (starts, then ends); padding (ID 0) gets ``n`` and ``-1``; on the
    GpSimd engine."""
    call = "nisa.sequence_bounds"
    s = operand(call, "segment_ids", segment_ids, ("sbuf",))
    d = operand(call, "dst", dst, ("sbuf",))
    _dtype_in(call, "segment_ids", segment_ids, ("float32", "int32"))
    _dtype_in(call, "dst", dst, ("float32", "int32"))
    if segment_ids.shape[0] != 1:
        fail(call, f"segment_ids {list(segment_ids.shape)}: the partition dimension must be 1")
    n = free_size(segment_ids)
    if dst.shape[0] != 1 or free_size(dst) != 2 * n:
        fail(call, f"dst {list(dst.shape)} must be [1, 2, {n}] (a start and an end per element)")
    emit("gpsimd", "sequence_bounds", [d], [s], {}, call)


# -- moving and gathering --------------------------------------------------------------------


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """``dst`` partition ``i`` of each 32-partition quadrant ``q`` = ``src`` partition
    ``32 q + shuffle_mask[i]`` (255: left as it is), on the Vector engine."""
    call = "nisa.nc_stream_shuffle"
    s = operand(call, "src", src, ("sbuf", "psum"))
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    if src.dtype != dst.dtype:
        fail(call, f"src dtype {src.dtype} and dst dtype {dst.dtype} must be the same")
    if free_size(src) != free_size(dst):
        fail(
            call,
            f"src {list(src.shape)} and dst {list(dst.shape)} must have the same elements per "
            f"partition",
        )
    if not isinstance(shuffle_mask, (list, tuple)) or len(shuffle_mask) != QUADRANT:
        fail(call, f"shuffle_mask must be a list of 32 partition numbers, not {shuffle_mask!r}")
    mask = []
    for i, m in enumerate(shuffle_mask):
        if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer)):
            fail(call, f"shuffle_mask[{i}] must be an integer, not {m!r}")
        m = int(m)
        if not (0 <= m < QUADRANT or m == SHUFFLE_KEEP):
            fail(call, f"shuffle_mask[{i}]={m}: a partition 0..31 of the quadrant, or 255")
        mask.append(m)
    for what, t in (("src", src), ("dst", dst)):
        _whole_partitions(call, what, t)
    active = -(-max(src.shape[0], dst.shape[0]) // QUADRANT) * QUADRANT
    starts = {128: (0,), 96: (0,), 64: (0, 64), 32: (0, 32, 64, 96)}[active]
    for what, t in (("src", src), ("dst", dst)):
        p0 = _start_partition(t)
        if p0 not in starts:
            fail(
                call,
                f"{what} starts at partition {p0}; with {active} active partitions it must "
                f"start at {' or '.join(map(str, starts))}",
            )
    for i in range(dst.shape[0]):
        m = mask[i % QUADRANT]
        if m != SHUFFLE_KEEP and (i // QUADRANT) * QUADRANT + m >= src.shape[0]:
            fail(
                call,
                f"dst partition {i} takes src partition {(i // QUADRANT) * QUADRANT + m} "
                f"(shuffle_mask[{i % QUADRANT}]={m}); src has {src.shape[0]}",
            )
    emit("vector", "nc_stream_shuffle", [d], [s], {"mask": tuple(mask)}, call)


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Per GpSimd core (16 partitions): its ``index`` values, flattened partition first, are
    element offsets into each of its partitions of ``src_buffer``; each gathers
    ``num_elem_per_idx`` elements from there into ``dst``."""
    call = "nisa.local_gather"
    s = operand(call, "src_buffer", src_buffer, ("sbuf",))
    ix = operand(call, "index", index, ("sbuf",))
    d = operand(call, "dst", dst, ("sbuf",))
    _dtype_in(call, "index", index, ("uint16",))
    if dst.dtype != src_buffer.dtype:
        fail(
            call,
            f"dst dtype {dst.dtype} and src_buffer dtype {src_buffer.dtype} must be the same "
            f"(a gather does not convert)",
        )
    p = src_buffer.shape[0]
    if index.shape[0] != p or p % GPSIMD_PARTITIONS:
        fail(
            call,
            f"src_buffer {list(src_buffer.shape)} and index {list(index.shape)} must have the "
            f"same partitions, a multiple of 16",
        )
    _same_partitions(call, "src_buffer", src_buffer, ("dst", dst))
    for what, t in (("src_buffer", src_buffer), ("index", index), ("dst", dst)):
        _whole_partitions(call, what, t)
        if _start_partition(t) % GPSIMD_PARTITIONS:
            fail(
                call,
                f"{what} starts at partition {_start_partition(t)}; a GpSimd core's 16 "
                f"partitions start on a multiple of 16",
            )
    if isinstance(num_elem_per_idx, bool) or num_elem_per_idx not in GATHER_ELEMS:
        fail(call, f"num_elem_per_idx={num_elem_per_idx!r}: one of {list(GATHER_ELEMS)}")
    per_core = GPSIMD_PARTITIONS * free_size(index)
    if per_core > 4096:
        fail(call, f"index {list(index.shape)} gives {per_core} indices per core; at most 4096")
    if num_valid_indices is None:
        valid = per_core
    else:
        valid = _int32(call, "num_valid_indices", num_valid_indices)
        if not 1 <= valid <= per_core:
            fail(
                call,
                f"num_valid_indices={valid}: 1 to the {per_core} indices of a core's 16 "
                f"partitions of index",
            )
    want = valid * int(num_elem_per_idx)
    if free_size(dst) != want:
        fail(
            call,
            f"dst {list(dst.shape)} must hold num_valid_indices x num_elem_per_idx = {want} "
            f"elements per partition",
        )
    args = {"elems": int(num_elem_per_idx), "valid": valid}
    emit("gpsimd", "local_gather", [d], [s, ix], args, call)


def nc_n_gather(dst, data, indices, name=None):
    """``dst[p, j] = data[p, indices[p, j]]``, ``data``'s free dimensions flattened, on the
    GpSimd engine."""
    call = "nisa.nc_n_gather"
    a = operand(call, "data", data, ("sbuf",))
    ix = operand(call, "indices", indices, ("sbuf",))
    d = operand(call, "dst", dst, ("sbuf",))
    _dtype_in(call, "indices", indices, ("uint32",))
    if dst.dtype != data.dtype:
        fail(call, f"dst dtype {dst.dtype} and data dtype {data.dtype} must be the same")
    _same_layout(call, "indices", indices, ("dst", dst))
    _same_partitions(call, "data", data, ("indices", indices))
    emit("gpsimd", "nc_n_gather", [d], [a, ix], {}, call)
