"""Selection, index generation, sorting and gathering (docs/nki/select.md): each instruction's
values against a reference written here (Python loops over exact integers and numpy), its
cost against the closed form, its rules at the kernel's line."""

import os

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from ncrtl.model.kernel.values import KernelError
from tests.kernel_lines import kernel_line

HERE = os.path.dirname(__file__)
KERNELS = os.path.join(HERE, "kernels", "select.py")
BF16 = ml_dtypes.bfloat16
FP32_MIN = float(np.finfo(np.float32).min)
RNG = np.random.default_rng(50)


def _run(name, arrays, kw=None, core="v3", timing=False):
    return nki.run(load_file(KERNELS, name), arrays, kw or {}, core=core, timing=timing)


def _out(name, arrays, kw=None, core="v3"):
    outs = _run(name, arrays, kw, core).outputs
    return outs[0] if len(outs) == 1 else outs


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _wrap(v):
    """A Python int as int32 two's complement."""
    return (v + 2**31) % 2**32 - 2**31


def _as(values, dtype):
    """Exact integers / floats as ``dtype`` the way a conversion rounds: floats to nearest
    even (numpy's and ml_dtypes' casts from float64), integers to nearest even, saturated."""
    v = np.asarray(values, np.float64)
    d = np.dtype(dtype)
    if d.kind in "iu":
        info = np.iinfo(d)
        return np.clip(np.round(v), info.min, info.max).astype(d)
    return v.astype(d)


# -- iota --------------------------------------------------------------------------------------

IOTA = [
    ([[1, 64]], 0, 0, np.int32),
    ([[1, 64]], 3, 2, np.int32),
    ([[8, 8], [1, 8]], -5, 64, np.int32),
    ([[1000, 2], [-100, 2], [10, 4], [1, 4]], 7, -3, np.int32),
    ([[1, 64]], 2**31 - 40, 1, np.int32),  # wraps past int32's top
    ([[0, 64]], 0, 1, np.float32),
    ([[1, 64]], 2**24 - 8, 3, np.float32),  # 2^24 + odd rounds to even
    ([[3, 64]], 250, 1, ml_dtypes.bfloat16),
    ([[1, 64]], 200, 1, np.uint8),  # saturates at 255
    ([[1, 64]], -100, 1, np.uint32),  # negative values saturate at 0
]


@pytest.mark.parametrize("pattern, offset, cm, dtype", IOTA)
def test_iota_generates_the_affine_pattern_in_int32(pattern, offset, cm, dtype):
    x = np.zeros((128, 64), dtype)
    got = _out("iota", (x,), {"pattern": pattern, "offset": offset, "channel_multiplier": cm})
    want = np.zeros((128, 64), np.float64)
    steps = [s for s, _ in pattern]
    nums = [n for _, n in pattern]
    for c in range(128):
        for j in range(64):
            idx, rest = [], j
            for n in reversed(nums):
                idx.append(rest % n)
                rest //= n
            idx.reverse()
            want[c, j] = _wrap(offset + c * cm + sum(i * s for i, s in zip(idx, steps)))
    assert _bits(got).tobytes() == _bits(_as(want, dtype)).tobytes()


# -- affine_select -----------------------------------------------------------------------------

CMPS = {
    "equal": lambda v: v == 0,
    "not_equal": lambda v: v != 0,
    "greater": lambda v: v > 0,
    "greater_equal": lambda v: v >= 0,
    "less": lambda v: v < 0,
    "less_equal": lambda v: v <= 0,
}


def _specials(shape, dtype):
    """Random values with NaN (a payload), infinities, -0, ties of rounding."""
    x = RNG.standard_normal(shape).astype(np.float32) * 100
    flat = x.reshape(-1)
    flat[::7] = -0.0
    flat[1::11] = np.inf
    flat[2::13] = -np.inf
    flat[3::17] = np.float32(1) + np.float32(2**-8)  # a bf16 tie: rounds to 1.0
    flat[4::19] = np.uint32(0x7FC01234).view(np.float32)  # NaN with a payload
    return x.astype(dtype)


@pytest.mark.parametrize(
    "cmp, src, dst",
    [(c, np.float32, np.float32) for c in sorted(CMPS)]
    + [("greater_equal", np.float32, BF16), ("less", BF16, np.float32)]
    + [("not_equal", np.int32, np.int32)],
)
def test_affine_select_picks_by_the_affine_predicate(cmp, src, dst):
    if src is np.int32:
        x = RNG.integers(-(2**31), 2**31, (128, 64)).astype(np.int32)
        false = -7.0
    else:
        x = _specials((128, 64), np.float32).astype(src)
        false = -np.inf
    pattern, offset, cm = [[2, 4], [-1, 16]], -20, 1
    kw = {"pattern": pattern, "offset": offset, "channel_multiplier": cm, "cmp": cmp}
    kw.update(false=false, dtype="bfloat16" if dst is BF16 else np.dtype(dst).name)
    got = _out("affine_select", (x,), kw)
    c, j = np.arange(128)[:, None], np.arange(64)[None, :]
    keep = CMPS[cmp](offset + c * cm + (j // 16) * 2 - (j % 16))
    # the same dtype keeps the bits (NaN payloads, -0); another goes through float32
    moved = x if src is dst else x.astype(np.float32).astype(dst)
    want = np.where(keep, moved, np.asarray(false, np.float32).astype(dst))
    assert _bits(got).tobytes() == _bits(want.astype(dst)).tobytes()


def test_affine_select_in_place_causal_mask():
    """The attention kernels' mask, in place: keep column j <= row c, else FP32_MIN."""
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    got = _out("causal_mask", (x,))
    want = np.where(np.arange(64)[None, :] <= np.arange(128)[:, None], x, FP32_MIN)
    assert got.tobytes() == want.astype(np.float32).tobytes()


# -- select_reduce and range_select ------------------------------------------------------------


def _nanmax(row):
    """The running maximum of the Vector Engine's accumulator: NaN once seen."""
    acc = -np.inf
    for v in row:
        acc = v if (np.isnan(v) or np.isnan(acc)) and not np.isnan(acc) else max(acc, v)
    return acc


@pytest.mark.parametrize(
    "reverse, false, cmds",
    [
        (False, -1e30, ("reset_reduce",)),
        (True, None, ("reset_reduce", "reduce")),
        (False, None, ("reset_reduce", "idle", "reduce")),
    ],
)
def test_select_reduce_selects_and_keeps_the_maximum(reverse, false, cmds):
    p, f = 128, 96
    pred = RNG.choice(np.array([0, 1, 2, 255], np.uint8), (p, f))
    x = RNG.standard_normal((p, f)).astype(np.float32) * 10
    x[5, 3] = -0.0
    x[7, :] = -np.inf
    dst, res = _out(
        "select_reduce",
        (pred, x),
        {"false": false, "reverse": reverse, "cmds": list(cmds), "dtype": "bfloat16"},
    )
    keep = (pred != 0) != reverse
    fv = np.full((p, 1), false, np.float32) if false is not None else -(np.arange(p) + 1.0)[:, None]
    sel = np.where(keep, x, fv).astype(np.float32)
    assert _bits(dst).tobytes() == _bits(sel.astype(BF16)).tobytes()
    w = f // len(cmds)
    for r in range(p):
        vals = [sel[r, i * w : (i + 1) * w] for i, c in enumerate(cmds) if c != "idle"]
        assert res[r, 0] == _nanmax(np.concatenate(vals)), r


def test_select_reduce_reads_on_true_from_psum():
    p, f = 128, 64
    pred = (RNG.random((p, f)) < 0.5).astype(np.uint8)
    x = RNG.standard_normal((p, f)).astype(np.float32)
    dst, res = _out(
        "select_reduce",
        (pred, x),
        {
            "false": 0.0,
            "reverse": False,
            "cmds": ["reset_reduce"],
            "dtype": "float32",
            "psum": True,
        },
    )
    sel = np.where(pred != 0, x, np.float32(0))
    assert dst.tobytes() == sel.tobytes()
    assert res[:, 0].tobytes() == sel.max(axis=1).tobytes()


RANGE_OPS = {
    "equal": np.equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}


@pytest.mark.parametrize(
    "op0, op1, start, dtype",
    [
        ("greater_equal", "less", 0, "float32"),
        ("greater", "less_equal", 37, "bfloat16"),
        ("equal", "less", 5, "float32"),
    ],
)
def test_range_select_masks_by_the_free_index(op0, op1, start, dtype):
    p, f = 128, 64
    x = (RNG.standard_normal((p, f)) * 4).astype(np.float32)
    lo = (RNG.integers(0, 80, (p, 1)) + RNG.choice([0.0, 0.5], (p, 1))).astype(np.float32)
    hi = (lo + RNG.integers(-4, 40, (p, 1))).astype(np.float32)
    dst, res = _out(
        "range_select",
        (x, lo, hi),
        {"op0": op0, "op1": op1, "start": start, "dtype": dtype},
    )
    for r in range(p):
        row = []
        for j in range(f):
            i = float(start + j)
            ok = RANGE_OPS[op0](i, lo[r, 0]) and RANGE_OPS[op1](i, hi[r, 0])
            row.append(x[r, j] if ok else FP32_MIN)
        row = np.array(row, np.float32)
        want = row if dtype == "float32" else row.astype(BF16)  # FP32_MIN rounds to -inf
        assert _bits(dst[r]).tobytes() == _bits(want).tobytes(), r
        assert res[r, 0] == row.max(), r  # the float32 values: FP32_MIN, never -inf


# -- tensor_copy_predicated ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "pred_dtype, reverse, scalar",
    [(np.uint8, False, None), (np.uint16, True, None), (np.uint32, False, 2.5)],
)
def test_tensor_copy_predicated_copies_where_the_predicate_holds(pred_dtype, reverse, scalar):
    p, f = 128, 64
    init = _specials((p, f), np.float32)
    src = _specials((p, f), np.float32)[::-1].copy()
    pred = RNG.choice(np.array([0, 1, 256 % np.iinfo(pred_dtype).max, 7], pred_dtype), (p, f))
    got = _out("copy_predicated", (init, src, pred), {"reverse": reverse, "scalar": scalar})
    keep = (pred != 0) != reverse
    new = src if scalar is None else np.full((p, f), scalar, np.float32)
    assert _bits(got).tobytes() == _bits(np.where(keep, new, init)).tobytes()


# -- max8, nc_find_index8, nc_match_replace8 ------------------------------------------------------


def _top8_positions(row):
    """Positions of the 8 largest float32 values: NaN first, ties by position."""

    def key(i):
        v = float(row[i])
        return (0 if np.isnan(v) else 1, -v if not np.isnan(v) else 0.0, i)

    return sorted(range(len(row)), key=key)[:8]


@pytest.mark.parametrize(
    "dtype, out",
    [(np.float32, "float32"), (BF16, "float32"), (np.float32, "bfloat16"), (np.int32, "float32")],
)
def test_max8_gives_the_eight_largest_in_descending_order(dtype, out):
    p, f = 128, 40
    if dtype is np.int32:
        x = RNG.integers(-(2**30), 2**30, (p, f)).astype(np.int32)
        x[0, :9] = 2**24 + 1  # not a float32: rounds to 2^24
    else:
        x = RNG.integers(-6, 6, (p, f)).astype(np.float32)  # many ties
        x[1, :3] = [-0.0, 0.0, -0.0]
        x[2, 5] = np.nan
        x[3, :10] = np.inf
        x[4, :] = -np.inf
        x = x.astype(dtype)
    got = _out("max8", (x,), {"dtype": out})
    for r in range(p):
        row = x[r].astype(np.float32)
        want = np.array([row[i] for i in _top8_positions(row)], np.float32)
        want = want if out == "float32" else want.astype(BF16)
        assert _bits(got[r]).tobytes() == _bits(want).tobytes(), r


def _pair(data_row, vals_row, order):
    """Each val, in ``order``, takes the first position equal to it not yet taken; -1 if
    none (float32 equality)."""
    taken, out = set(), [-1] * 8
    for i in order:
        for j, d in enumerate(data_row):
            if j not in taken and np.float32(d) == np.float32(vals_row[i]):
                taken.add(j)
                out[i] = j
                break
    return out


@pytest.mark.parametrize("dtype", ["uint32", "uint16"])
def test_nc_find_index8_pairs_values_with_positions(dtype):
    p, f = 128, 64
    data = RNG.integers(-5, 5, (p, f)).astype(np.float32)
    data[0, 10] = -0.0
    vals = RNG.integers(-6, 7, (p, 8)).astype(np.float32)
    vals[0] = [0.0, 3, 3, 3, 99, np.nan, -5, 0.0]  # +0 finds -0; duplicates take later ones
    vals[1] = np.float32(data[1, 0])
    got = _out("find_index8", (data, vals), {"dtype": dtype})
    ones = np.iinfo(np.dtype(dtype)).max
    for r in range(p):
        want = [ones if j < 0 else j for j in _pair(data[r], vals[r], range(8))]
        assert got[r].tolist() == want, r


def test_nc_match_replace8_scans_the_values_in_reverse():
    """The reference's example: data [1, 2, 3, 4, 8 x 7], vals [3, 8 x 7] give dst_idx
    [2, 10, 9, 8, 7, 6, 5, 4]."""
    data = np.array([[1, 2, 3, 4] + [8] * 7], np.float32)
    vals = np.array([[3] + [8] * 7], np.float32)
    dst, idx = _out("match_replace8", (data, vals), {"imm": -1.0})
    assert idx[0].tolist() == [2, 10, 9, 8, 7, 6, 5, 4]
    assert dst[0].tolist() == [1, 2, -1, 4] + [-1] * 7


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_nc_match_replace8_replaces_and_records_positions(dtype):
    p, f = 128, 48
    data = RNG.integers(-4, 4, (p, f)).astype(np.float32).astype(dtype)
    vals = RNG.integers(-5, 5, (p, 8)).astype(np.float32).astype(dtype)
    dst, idx = _out("match_replace8", (data, vals), {"imm": float("-inf")})
    for r in range(p):
        pos = _pair(data[r], vals[r], range(7, -1, -1))
        want = data[r].copy()
        for j in pos:
            if j >= 0:
                want[j] = -np.inf
        assert _bits(dst[r]).tobytes() == _bits(want).tobytes(), r
        assert idx[r].tolist() == [0xFFFFFFFF if j < 0 else j for j in pos], r


def test_top_k_by_max8_and_match_replace8():
    """The library's top-k loop (max8, then nc_match_replace8 in place) against a sort."""
    p, f, k = 128, 256, 16
    x = RNG.permutation(np.arange(p * f, dtype=np.float32)).reshape(p, f)
    vals, idx = _out("topk_by_max8", (x,), {"k": k})
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    assert idx.astype(np.int64).tolist() == order.tolist()
    assert vals.tobytes() == np.take_along_axis(x, order, 1).tobytes()


# -- topk ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, k", [(42, 8), (64, 1), (100, 17), (8, 8)])
def test_topk_of_each_group_snake(n, k):
    p = 32
    cols = -(-n // 16) + 1
    x = RNG.integers(-20, 20, (p, cols)).astype(np.float32).astype(BF16)  # ties
    vals, idx = _out("topk", (x,), {"n": n, "k": k})
    for g in range(0, p, 16):
        snake = [x[g + e % 16, e // 16] for e in range(n)]
        # largest first, ties by position; written ascending
        top = sorted(range(n), key=lambda e: (-float(snake[e]), e))[:k][::-1]
        for r in range(g, g + 16):
            assert idx[r].tolist() == top, (g, r)
            assert _bits(vals[r]).tolist() == [_bits(np.asarray(snake[e])).item() for e in top]


# -- nonzero_with_count, sequence_bounds ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("first", [0, 16])
def test_nonzero_with_count_on_each_gpsimd_core_partition(dtype, first):
    p, t = 64, 40
    x = (RNG.random((p, t)) < 0.3).astype(dtype) * RNG.integers(1, 5, (p, t)).astype(dtype)
    if dtype is np.float32:
        x[0, :4] = [-0.0, np.nan, 0.0, -1.0]  # -0 is zero, NaN is not
    x[16] = 0  # none
    x[32] = 1  # all
    init = np.full((p, t + 1), -99, np.int32)
    got = _out(
        "nonzero_with_count", (x, init), {"index_offset": 1000, "padding_val": -7, "first": first}
    )
    for r in range(p):
        if r % 16:  # a partition no GpSimd core reads or writes
            assert (got[r] == -99).all(), r
            continue
        nz = [j + 1000 for j in range(t) if x[r, j] != 0]
        assert got[r].tolist() == nz + [-7] * (t - len(nz)) + [len(nz)], r


def test_nonzero_with_count_of_a_core_nothing_loaded_is_unwritten():
    """Only partition 0 loaded (as the library's benchmark): its result is right; partition
    16's core computed on garbage, so its row of dst (set before) is unwritten after, and
    storing it as an output is the warning naming the reader's line; a partition no core
    writes keeps its value."""
    x = np.array([[0, 3, 0, 1, 0, 0, 2, 0]], np.float32)
    assert _out("nonzero_partition0", (x,), {"store_row": 0}).tolist() == [
        [1, 3, 6, -1, -1, -1, -1, -1, 3]
    ]
    assert _out("nonzero_partition0", (x,), {"store_row": 1}).tolist() == [[5] * 9]
    from ncrtl.model.kernel.golden import UninitializedRead

    with pytest.warns(UninitializedRead) as rec:
        _run("nonzero_partition0", (x,), {"store_row": 16})
    msg = str(rec[0].message)
    assert msg.startswith(kernel_line(KERNELS, "store_row")), msg
    assert "which nothing wrote" in msg and "the kernel's output 0" in msg


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_sequence_bounds_of_runs_of_segment_ids(dtype):
    ids = np.array([[1, 1, 2, 2, 2, 0, 0, 3, 1, 1, 0, 4, 4, 4, 4, 5]], dtype)
    got = _out("sequence_bounds", (ids,), {"dtype": np.dtype(dtype).name})
    n = ids.shape[1]
    start, end = [], []
    for i, s in enumerate(ids[0]):
        if s == 0:
            start.append(n)
            end.append(-1)
            continue
        a = i
        while a > 0 and ids[0, a - 1] == s:
            a -= 1
        b = i
        while b < n - 1 and ids[0, b + 1] == s:
            b += 1
        start.append(a)
        end.append(b + 1)
    assert got.shape == (1, 2, n)
    assert got[0, 0].tolist() == start and got[0, 1].tolist() == end


# -- nc_stream_shuffle ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "p, mask, src_rows, dst_rows, in_place",
    [
        (128, list(range(31, -1, -1)), None, None, False),
        (64, [255, 3, 255, 0] + list(range(4, 32)), None, None, False),
        (32, [0] * 32, (0, 1), None, False),  # the library's broadcast of one partition
        (64, [5] + [255] * 31, (32, 64), (32, 64), False),
        (128, [16] + [255] * 31, None, None, True),  # in place, as find_nonzero_indices
    ],
)
def test_nc_stream_shuffle_moves_partitions_within_quadrants(p, mask, src_rows, dst_rows, in_place):
    x = _specials((p, 24), np.float32)
    init = np.full((p, 24), 7.0, np.float32)
    got = _out(
        "stream_shuffle",
        (x, init),
        {"mask": mask, "src_rows": src_rows, "dst_rows": dst_rows, "in_place": in_place},
    )
    want = (x if in_place else init).copy()
    s0, s1 = src_rows or (0, p)
    d0, d1 = dst_rows or (0, p)
    src = x[s0:s1]
    for i in range(d1 - d0):
        m = mask[i % 32]
        if m != 255:
            want[d0 + i] = src[(i // 32) * 32 + m]
    assert _bits(got).tobytes() == _bits(want).tobytes()


# -- local_gather, nc_n_gather -------------------------------------------------------------------


@pytest.mark.parametrize("e, valid", [(1, None), (4, None), (2, 20), (32, 3)])
def test_local_gather_per_gpsimd_core(e, valid):
    p, f, w = 64, 96, 2
    x = _specials((p, f), np.float32)
    index = RNG.integers(0, f - e + 1, (p, w)).astype(np.uint16)
    got = _out("local_gather", (x, index), {"num_elem_per_idx": e, "num_valid_indices": valid})
    n = valid or 16 * w
    want = np.empty((p, n * e), np.float32)
    for g in range(0, p, 16):
        flat = [int(index[g + k % 16, k // 16]) for k in range(16 * w)][:n]
        for r in range(g, g + 16):
            want[r] = [x[r, i + d] for i in flat for d in range(e)]
    assert _bits(got).tobytes() == _bits(want).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int8])
def test_nc_n_gather_within_each_partition(dtype):
    p = 128
    data = (
        _specials((p, 4, 10), np.float32).astype(dtype)
        if dtype is not np.int8
        else (RNG.integers(-128, 128, (p, 4, 10)).astype(np.int8))
    )
    indices = RNG.integers(0, 40, (p, 24)).astype(np.uint32)
    got = _out("n_gather", (data, indices))
    flat = data.reshape(p, -1)
    want = np.array([[flat[r, indices[r, j]] for j in range(24)] for r in range(p)], dtype)
    assert _bits(got).tobytes() == _bits(want).tobytes()


# -- costs ---------------------------------------------------------------------------------------

# (op, engine, F, n, K): occupancy and completion latency in the engine's cycles
COSTS = {
    ("iota", "gpsimd", 64, 0, 0): (150 + 64, 60),
    ("iota", "gpsimd", 512, 0, 0): (150 + 512, 60),
    ("affine_select", "gpsimd", 256, 0, 0): (150 + 256, 120),
    ("max8", "vector", 64, 0, 0): (64, 120),  # the initiation interval
    ("max8", "vector", 1024, 0, 0): (1024, 120),  # its input's elements, not its 8
    ("nc_find_index8", "vector", 512, 0, 0): (512, 180),
    ("nc_match_replace8", "vector", 512, 0, 0): (512, 180),
    ("topk", "gpsimd", 64, 64, 8): (150 + 4 * 64 + 8, 180),  # 4 n + K
    ("topk", "gpsimd", 256, 1000, 100): (150 + 4 * 1000 + 100, 180),
    ("nonzero_with_count", "gpsimd", 256, 0, 0): (150 + 256, 120),
    ("nc_stream_shuffle", "vector", 256, 0, 0): (256, 120),
    ("local_gather", "gpsimd", 64, 0, 0): (150 + 64, 120),  # 16 indices x 4 elements
    ("nc_n_gather", "gpsimd", 512, 0, 0): (150 + 512, 180),
    ("nc_n_gather", "gpsimd", 1100, 0, 0): (3 * 150 + 1100, 180),  # 3 instructions of <= 512
}


@pytest.mark.parametrize("shape", sorted(COSTS))
def test_costs_of_each_instruction(shape):
    op, engine, f, n, k = shape
    x = np.zeros((128, f), np.float32)
    res = _run("one", (x,), {"op": op, "f": f, "n": n, "k": k}, timing=True)
    (rec,) = [r for r in res.report.records[engine] if r.ins.op == op]
    period = res.report.core.clocks[engine].period
    assert ((rec.end - rec.start) // period, (rec.done - rec.end) // period) == COSTS[shape]


# -- rules ---------------------------------------------------------------------------------------

RULES = [
    ("iota_psum", "nisa.iota", "dst", "must be in SBUF"),
    ("iota_pattern", "nisa.iota", "pattern", "generates 32 elements per partition"),
    ("iota_offset", "nisa.iota", "offset=2147483648", "outside int32"),
    ("iota_keyword", "nisa.iota", "'start'", "no argument"),
    ("affine_cmp", "nisa.affine_select", "cmp_op=nl.add", "not modelled"),
    ("affine_false", "nisa.affine_select", "on_false_value", "must be a number"),
    ("select_pred_dtype", "nisa.select_reduce", "predicate dtype float32", "int8"),
    ("select_both_psum", "nisa.select_reduce", "both in PSUM", "at most one"),
    ("select_cmd", "nisa.select_reduce", "reduce_cmd", "reset_reduce"),
    ("select_res", "nisa.select_reduce", "reduce_res", "[128, 1]"),
    ("range_version", "nisa.range_select", "NeuronCore-v3", "v2"),
    ("range_false", "nisa.range_select", "on_false_value=0.0", "FP32_MIN"),
    ("range_op", "nisa.range_select", "comp_op0=nl.not_equal", "not modelled"),
    ("predicated_dtype", "nisa.tensor_copy_predicated", "src dtype bfloat16", "the same"),
    ("predicated_indirect", "nisa.tensor_copy_predicated", "src: an .indirect", "dst and"),
    ("max8_few", "nisa.max8", "src", "8 to 16384"),
    ("max8_dst", "nisa.max8", "dst [128, 16]", "[128, 8]"),
    ("find_dtype", "nisa.nc_find_index8", "dst dtype float32", "uint16 or uint32"),
    ("match_v2_idx", "nisa.nc_match_replace8", "dst_idx", "NeuronCore-v3"),
    ("topk_partitions", "nisa.topk", "src [8, 4]", "multiple of 16"),
    ("topk_k", "nisa.topk", "K=64", "K <= n=40"),
    ("nonzero_version", "nisa.nonzero_with_count", "NeuronCore-v3", "v2"),
    ("nonzero_size", "nisa.nonzero_with_count", "dst [128, 64]", "one element more"),
    ("bounds_partitions", "nisa.sequence_bounds", "segment_ids [2, 64]", "must be 1"),
    ("shuffle_mask", "nisa.nc_stream_shuffle", "shuffle_mask", "32 partition numbers"),
    ("shuffle_start", "nisa.nc_stream_shuffle", "dst starts at partition 16", "0 or 32"),
    ("gather_elems", "nisa.local_gather", "num_elem_per_idx=3", "[1, 2, 4, 8, 16, 32]"),
    ("gather_index", "nisa.local_gather", "index dtype uint32", "uint16"),
    ("n_gather_dtype", "nisa.nc_n_gather", "dst dtype bfloat16", "the same"),
]
V2 = {"range_version", "match_v2_idx", "nonzero_version"}
V4 = {"predicated_indirect"}


@pytest.mark.parametrize("case, call, what, rule", RULES)
def test_rules_at_the_kernels_line(case, call, what, rule):
    x = np.zeros((128, 64), np.float32)
    with pytest.raises(nki.NkiError) as e:
        _run("bad", (x,), {"case": case}, core="v2" if case in V2 else "v4" if case in V4 else "v3")
    msg = str(e.value)
    assert msg.startswith(f"{kernel_line(KERNELS, case)}: {call}: "), msg
    assert what in msg and rule in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    "case, line, x, ix, rule",
    [
        (
            "n_gather",
            "n_gather_range",
            np.zeros((4, 8), np.float32),
            np.array([[0] * 3 + [8]] * 4, np.uint32),
            "indices[0, 3] = 8 leaves data's 8",
        ),
        (
            "local_gather",
            "local_gather_range",
            np.zeros((16, 8), np.float32),
            np.array([[7]] * 15 + [[8]], np.uint16),
            "index 8",
        ),
        (
            "bounds",
            "bounds_negative",
            np.array([[1, 1, -2, 0]], np.float32),
            np.zeros((1, 1), np.uint32),
            "segment_ids[2] = -2.0",
        ),
    ],
)
def test_value_rules_when_the_golden_runs(case, line, x, ix, rule):
    with pytest.raises(KernelError) as e:
        _run("bad_values", (x, ix), {"case": case})
    msg = str(e.value)
    assert msg.startswith(kernel_line(KERNELS, line)) and rule in msg, msg
