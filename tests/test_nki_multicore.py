"""Launch grids, core barriers, collectives, shared constants and random numbers
(docs/nki/multicore.md), on the kernels of tests/kernels/multicore.py."""

import os

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from ncrtl.model.kernel import golden as kgolden

KERNELS = os.path.join(os.path.dirname(__file__), "kernels", "multicore.py")
M32 = 0xFFFFFFFF


def kernel(name):
    return load_file(KERNELS, name)


def run(k, *arrays, core=None, **kwargs):
    return nki.run(k, list(arrays), kwargs, core=core)


def error(k, *arrays, **kwargs):
    with pytest.raises(nki.NkiError) as e:
        nki.trace(k, list(arrays), kwargs)
    msg = str(e.value)
    assert "\n" not in msg and "multicore.py:" in msg, msg
    return msg


# -- launch grids --------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [(1,), (2,), (3,), (4,), (2, 3), (3, 1)])
def test_grid_program_ids_and_sizes(grid):
    """Every instance of kernel[g0, g1, ...] sees its own program_id per axis, the grid's size
    and dimensions; instance i (row-major) runs on core i % 2 (kernel[1] on one core)."""
    k = kernel("grid_ids")
    res = run(k[grid if len(grid) > 1 else grid[0]], np.zeros((1, 1), np.float32))
    n = int(np.prod(grid))
    flat = [np.unravel_index(i, grid) for i in range(n)]
    want = [[int(p[0]), int(p[1]) if len(grid) > 1 else 0, n, len(grid)] for p in flat]
    assert res.outputs[0].tolist() == want
    cores = 1 if n == 1 else 2
    inst = res.report.summary()["instances"]
    assert len(inst) == n
    assert sorted(i["core"] for i in inst) == sorted(i % cores for i in range(n))
    assert [tuple(i["program_id"]) for i in inst] == [
        tuple(int(v) for v in flat[i]) for c in range(cores) for i in range(c, n, cores)
    ]


def test_a_kernel_without_grid_has_ndim_0():
    out = run(kernel("grid_ids"), np.zeros((1, 1), np.float32)).outputs[0]
    assert out.tolist() == [[0, 0, 1, 0]]


def test_a_cores_instances_run_one_after_another():
    """kernel[4] on two cores: each core's second instance starts when its first has ended;
    the run lasts the two in turn, each as long as kernel[2]'s one."""
    x = np.random.default_rng(0).random((128, 64), np.float32)
    k = kernel("grid_rows")
    res = run(k[4], x)
    np.testing.assert_array_equal(
        res.outputs[0], x + np.repeat(np.arange(4, dtype=np.float32), 32)[:, None]
    )
    inst = res.report.summary()["instances"]
    for c in (0, 1):
        first, second = [i for i in inst if i["core"] == c]
        assert second["start_ns"] >= first["end_ns"]
    one = run(k[2], x[:64]).report.summary()["instances"]
    assert res.report.total_ns == pytest.approx(2 * one[0]["ns"], rel=0.02)
    assert res.report.total_ns == pytest.approx(max(i["end_ns"] for i in inst), rel=1e-6)


@pytest.mark.parametrize("order", ["program", "reverse", "random"])
def test_grid_values_in_any_order(order):
    x = np.random.default_rng(1).random((192, 8), np.float32)
    prog = nki.trace(kernel("grid_rows")[6], [x])
    outs, _ = kgolden.run(prog, [x], order=order)
    want = x + np.repeat(np.arange(6, dtype=np.float32), 32)[:, None]
    np.testing.assert_array_equal(outs[0], want)


@pytest.mark.parametrize("grid", [0, -1, (2, 0), "2", 1.5, True])
def test_grid_must_be_positive_integers(grid):
    with pytest.raises(nki.NkiError, match="launch grid is positive integers"):
        kernel("grid_rows")[grid]


def test_program_id_axis_outside_the_grid():
    import ncrtl.nki.language as nl

    @nki.jit
    def k(x):
        nl.program_id(2)
        return x

    with pytest.raises(nki.NkiError, match=r"nl.program_id: axis 2 is outside the launch grid"):
        nki.trace(k[2, 2], [np.zeros((1, 1), np.float32)])


def test_private_hbm_is_each_cores_own():
    x = np.random.default_rng(2).random((32, 8), np.float32)
    res = run(kernel("private_scratch")[2], x)
    np.testing.assert_array_equal(res.outputs[0], np.concatenate([x, x + np.float32(1)]))
    a, b = (p.tensors["hbm1"] for p in res.program)
    assert a.base != b.base


# -- core_barrier --------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["program", "reverse", "random"])
@pytest.mark.parametrize("engine", ["gpsimd", "vector"])
def test_core_barrier_orders_the_cores_accesses(order, engine):
    """After the barrier each core reads the half the other core wrote before it, in any
    order the semaphores allow."""
    import ncrtl.nki.isa as nisa

    x = np.random.default_rng(3).random((32, 8), np.float32)
    prog = nki.trace(kernel("exchange")[2], [x], {"engine": getattr(nisa.engine, engine)})
    outs, _ = kgolden.run(prog, [x], order=order)
    np.testing.assert_array_equal(outs[0], np.concatenate([x + np.float32(1), x]))


def test_core_barrier_timing_meets_both_cores():
    """Both sides of a barrier complete together, one transfer's latency after the later one
    arrives; the reads after it start after it."""
    x = np.zeros((32, 8), np.float32)
    rep = run(kernel("exchange")[2], x).report
    sides = [r for n, rs in rep.records.items() for r in rs if r.ins.op == "core_barrier"]
    assert len(sides) == 2
    assert sides[0].start == sides[1].start and sides[0].done == sides[1].done
    assert sides[0].start >= max(s.ready for s in sides)
    assert sides[0].done > sides[0].start


@pytest.mark.parametrize(
    "launch, cores, core, rule",
    [
        (2, (0, 1), "v2", "needs NeuronCore-v3"),
        (1, (0, 1), None, "runs on 1 core"),
        (2, (0, 2), None, "names core 2"),
        (2, (0, 0), None, "distinct cores"),
        (2, (0,), None, "leaves out core 1"),
        (2, "a", None, "core indices"),
    ],
)
def test_core_barrier_rules(launch, cores, core, rule):
    k = kernel("barrier")
    k = k[launch] if launch != 1 else k
    with pytest.raises(nki.NkiError) as e:
        nki.trace(k, [np.zeros((4, 4), np.float32)], {"cores": cores}, core=core)
    assert "nisa.core_barrier" in str(e.value) and rule in str(e.value)


def test_core_barrier_of_one_core():
    x = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(run(kernel("barrier"), x, cores=0).outputs[0], x)


# -- collectives ---------------------------------------------------------------------------------


def _bf16(a):
    return a.astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize(
    "dtype, op, fn",
    [
        (np.float32, "add", np.add),
        (np.float32, "maximum", np.maximum),
        (np.float32, "minimum", np.minimum),
        (ml_dtypes.bfloat16, "add", np.add),
        (np.int32, "add", np.add),
    ],
)
def test_all_reduce(dtype, op, fn):
    """Each rank's result is op over the ranks' sources in rank order, in float32 (int32
    exactly), rounded once to the destination."""
    import ncrtl.nki.language as nl

    rng = np.random.default_rng(4)
    x = (rng.standard_normal((32, 16)) * 1000).astype(dtype)
    if dtype == np.int32:
        x = rng.integers(-(1 << 22), 1 << 22, (32, 16)).astype(np.int32)  # exact in float32
    out = run(kernel("sbuf_collective")[2], x, kind="all_reduce", op=getattr(nl, op)).outputs[0]
    if dtype == np.int32:
        want = fn(x.astype(np.int64), 2 * x.astype(np.int64)).astype(np.int32)
    else:
        r0 = x.astype(np.float32)
        r1 = (x.astype(np.float32) * 2).astype(dtype).astype(np.float32)  # rank 1's source
        want = fn(r0, r1).astype(dtype)
    np.testing.assert_array_equal(out[0].view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(out[1].view(np.uint8), want.view(np.uint8))


def test_all_reduce_rounds_once_to_a_narrower_destination():
    """float32 sources, a bfloat16 destination: the float32 sum rounded once (a tie that
    separate roundings would break the other way)."""
    x = np.full((32, 4), np.float32(1 + 2**-9), np.float32)  # x + 2x = 3 + 3 * 2**-9
    out = run(kernel("sbuf_collective")[2], x, kind="all_reduce", out_dtype="bfloat16").outputs[0]
    want = _bf16(np.float32(x[0, 0]) + np.float32(2 * x[0, 0]))
    assert out.view(ml_dtypes.bfloat16)[0, 0, 0] == want


@pytest.mark.parametrize("dim", [0, 1])
def test_all_gather_in_sbuf(dim):
    x = np.random.default_rng(5).random((32, 8), np.float32)
    out = run(kernel("sbuf_collective")[2], x, kind="all_gather", dim=dim).outputs[0]
    want = np.concatenate([x, 2 * x], axis=dim)
    np.testing.assert_array_equal(out[0], want)
    np.testing.assert_array_equal(out[1], want)


def test_reduce_scatter():
    import ncrtl.nki.language as nl

    x = np.random.default_rng(6).random((32, 8), np.float32)
    out = run(kernel("sbuf_collective")[2], x, kind="reduce_scatter", op=nl.maximum).outputs[0]
    total = np.maximum(x, 2 * x)
    np.testing.assert_array_equal(out[0], total[:16])
    np.testing.assert_array_equal(out[1], total[16:])


@pytest.mark.parametrize("kind", ["all_to_all", "collective_permute"])
def test_device_memory_collectives(kind):
    x = np.random.default_rng(7).random((32, 8), np.float32)
    out = run(kernel("hbm_collective")[2], x, kind=kind).outputs[0]
    src = [x, 2 * x]
    if kind == "all_to_all":  # rank r gets piece r of every rank's source
        want = [np.concatenate([src[s][16 * r : 16 * (r + 1)] for s in (0, 1)]) for r in (0, 1)]
    else:  # (0 -> 1), (1 -> 0)
        want = [src[1], src[0]]
    np.testing.assert_array_equal(out[0], want[0])
    np.testing.assert_array_equal(out[1], want[1])


def test_collective_timing_moves_the_destination_on_both_cores():
    """Each side moves its destination's bytes on its core's DMA engines; both complete
    together, and the run's DMA bytes count them."""
    x = np.zeros((32, 8), np.float32)
    rep = run(kernel("sbuf_collective")[2], x, kind="all_gather").report
    sides = [r for rs in rep.records.values() for r in rs if r.ins.op == "collective"]
    assert len(sides) == 2
    assert sides[0].done == sides[1].done and sides[0].end > sides[0].start


@pytest.mark.parametrize(
    "case, rule",
    [
        ("shape", "one shape"),
        ("mixed", "all in device memory (HBM) or all in SBUF"),
        ("dim", "collective_dim=2"),
        ("rank", "names rank 3"),
        ("op", "op=nl.multiply is not modelled"),
        ("sbuf_all_to_all", "this collective takes them in device memory"),
        ("keyword", "no argument 'axis'"),
    ],
)
def test_collective_rules(case, rule):
    msg = error(kernel("bad_collective")[2], np.zeros((32, 8), np.float32), case=case)
    assert "ncc." in msg and rule in msg


def test_collectives_need_the_ranks():
    msg = error(kernel("sbuf_collective"), np.zeros((32, 8), np.float32), kind="all_reduce")
    assert "names rank 1" in msg and "kernel[2]" in msg


def test_variable_collectives_check_their_metadata():
    import ncrtl.nki.collectives as ncc

    @nki.jit
    def k(x):
        ncc.all_to_all_v([x], [x], ncc.ReplicaGroup([[0]]), x)
        return x

    with pytest.raises(nki.NkiError, match="ncc.all_to_all_v: metadata_tensor x is float32"):
        nki.trace(k, [np.zeros((2, 2), np.float32)])


# -- shared constants, typing ----------------------------------------------------------------------


def test_shared_constant_and_identity():
    x = np.zeros((64, 1), np.float32)
    c = (np.arange(64 * 8).reshape(64, 8) % 7).astype(np.float32)
    res = run(kernel("constants"), x, c=c)
    np.testing.assert_array_equal(res.outputs[0][:, :8], c)
    np.testing.assert_array_equal(res.outputs[0][:, 8:], np.eye(64, dtype=np.float32))
    loads = [r for rs in res.report.records.values() for r in rs if r.ins.op == "shared_constant"]
    assert len(loads) == 2 and all(r.end == r.start for r in loads)  # loaded with the model


def test_shared_constant_rules():
    import ncrtl.nki.language as nl

    @nki.jit
    def k(x):
        nl.shared_constant(np.zeros((2, 2), np.float64))
        return x

    with pytest.raises(nki.NkiError, match="nl.shared_constant"):
        nki.trace(k, [np.zeros((1, 1), np.float32)])

    @nki.jit
    def j(x):
        nl.shared_identity_matrix(256)
        return x

    with pytest.raises(nki.NkiError, match="n=256: an SBUF identity has 1 to 128 rows"):
        nki.trace(j, [np.zeros((1, 1), np.float32)])


def test_typing_dtype_and_constants_modules():
    nki.install_aliases()
    import nki as alias
    import nki.isa as nisa
    import nki.typing as nt
    from nki.isa.constants import dge_mode, oob_mode

    assert oob_mode is nisa.oob_mode and dge_mode is nisa.dge_mode
    assert isinstance("bfloat16", alias.dtype) and not isinstance("float64", alias.dtype)
    assert nt.tensor[128, "float32"] is nt.tensor
    assert issubclass(nt.mutable_tensor, nt.tensor)


# -- random numbers ------------------------------------------------------------------------------


def _splitmix_state(seed):
    """XORWOW's (x, y, z, w, v, d) from a 64-bit seed: three SplitMix64 outputs, low word
    first, and Marsaglia's d (written here from the published algorithms)."""
    z, words = seed, []
    for _ in range(3):
        z = (z + 0x9E3779B97F4A7C15) % 2**64
        r = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        r = ((r ^ (r >> 27)) * 0x94D049BB133111EB) % 2**64
        r ^= r >> 31
        words += [r & M32, r >> 32]
    return words[:5] + [6615241]


def _xorwow(state, n):
    x, y, z, w, v, d = state
    out = []
    for _ in range(n):
        t = x ^ (x >> 2)
        x, y, z, w = y, z, w, v
        v = (v ^ (v << 4) ^ t ^ (t << 1)) & M32
        d = (d + 362437) & M32
        out.append((v + d) & M32)
    return out, [x, y, z, w, v, d]


def _expected_bits(p, f, seed=0, engine="vector"):
    """Lane p's generators (4 on Vector, 1 on GpSimd) each step ceil(f / G) times; element j
    of the row is output j // G of generator j % G."""
    g = 4 if engine == "vector" else 1
    tag = 0 if engine == "vector" else 1
    rows = []
    for lane in range(p):
        outs = [
            _xorwow(_splitmix_state(seed << 32 | tag << 16 | lane << 2 | k), -(-f // g))[0]
            for k in range(g)
        ]
        rows.append([outs[j % g][j // g] for j in range(f)])
    return np.array(rows, np.uint64)


@pytest.mark.parametrize("engine", ["vector", "gpsimd"])
@pytest.mark.parametrize("dtype", ["uint32", "int16", "uint8"])
def test_rng_is_the_documented_stream(engine, dtype):
    """nisa.rng's bits are the lanes' XORWOW outputs (an independent implementation here), cut
    to the destination's low bits."""
    import ncrtl.nki.isa as nisa

    x = np.zeros((8, 7), np.float32)
    out = run(kernel("random_bits"), x, engine=getattr(nisa.engine, engine), dtype=dtype)
    got = out.outputs[0]
    bits = _expected_bits(8, 7, engine=engine)
    width = np.dtype(dtype).itemsize * 8
    want = (bits & ((1 << width) - 1)).astype(np.dtype(dtype).str.replace("i", "u"))
    np.testing.assert_array_equal(got.view(want.dtype), want)


def test_set_rng_seed_replays_and_seeds_differ():
    k = kernel("random_bits")
    x = np.zeros((16, 32), np.float32)
    a = run(k, x, seed=1234).outputs[0]
    b = run(k, x, seed=1234).outputs[0]
    c = run(k, x, seed=1235).outputs[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a.astype(np.uint64), _expected_bits(16, 32, seed=1234))
    assert (a != c).mean() > 0.99


def test_rng_statistics():
    """Over 128 x 64 draws each bit is set half the time and the lanes are not alike."""
    bits = run(kernel("random_bits"), np.zeros((128, 64), np.float32)).outputs[0]
    ones = np.unpackbits(bits.view(np.uint8)).mean()
    assert abs(ones - 0.5) < 0.005  # 262,144 bits: 10 sigma is 0.01
    assert len(np.unique(bits[:, 0])) == 128


@pytest.mark.parametrize("lo, hi", [(0.0, 1.0), (-3.0, 5.0)])
def test_rand2_uniform(lo, hi):
    u = run(kernel("uniform"), np.zeros((128, 64), np.float32), lo=lo, hi=hi).outputs[0]
    assert u.min() >= lo and u.max() <= hi
    mid, width = (lo + hi) / 2, hi - lo
    assert abs(u.mean() - mid) < 0.01 * width  # sigma of the mean 0.0011 of the width
    hist = np.histogram(u, bins=8, range=(lo, hi))[0]
    assert hist.min() > 0.9 * u.size / 8
    bits = _expected_bits(128, 64).astype(np.uint32)
    want = np.float32(lo) + ((bits >> 8).astype(np.float32) * np.float32(2**-24)) * np.float32(
        hi - lo
    )
    np.testing.assert_array_equal(u, want)


def test_rand2_rules():
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(nki.NkiError, match="rand2 needs NeuronCore-v4"):
        nki.trace(kernel("uniform"), [x], {"lo": 0.0, "hi": 1.0}, core="v3")
    with pytest.raises(nki.NkiError, match="min 2.0 must be below max 1.0"):
        nki.trace(kernel("uniform"), [x], {"lo": 2.0, "hi": 1.0})
    with pytest.raises(nki.NkiError, match="float4_e2m1fn_x4"):
        nki.trace(kernel("uniform"), [x], {"lo": 0.0, "hi": 1.0, "dtype": "float4_e2m1fn_x4"})


@pytest.mark.parametrize("prob", [0.0, 0.25, 1.0])
def test_dropout(prob):
    """An element is zeroed where its draw u < prob; the others keep their bits (negative zero,
    NaN and inf included)."""
    x = np.random.default_rng(8).standard_normal((128, 64)).astype(np.float32)
    x[0, :4] = [-0.0, np.nan, np.inf, -np.inf]
    out = run(kernel("dropped"), x, prob=prob).outputs[0]
    u = (_expected_bits(128, 64).astype(np.uint32) >> 8).astype(np.float64) * 2**-24
    keep = u >= prob
    np.testing.assert_array_equal(out.view(np.uint32), np.where(keep, x, 0).view(np.uint32))
    if prob == 0.25:
        assert abs((~keep).mean() - 0.25) < 0.01


def test_dropout_per_partition_probability():
    x = np.ones((128, 64), np.float32)
    x[:, 0] = np.linspace(0, 1, 128, dtype=np.float32)  # column 0 is the probability
    out = run(kernel("dropped"), x, prob="tile").outputs[0]
    dropped = (out[:, 1:] == 0).mean(axis=1)
    assert dropped[0] == 0 and dropped[-1] == 1
    assert np.corrcoef(dropped, x[:, 0])[0, 1] > 0.95


def test_rand_state_round_trip():
    """rand_set_state loads each lane's six words; rng then draws from them; rand_get_state
    gives the words after those draws."""
    rng = np.random.default_rng(9)
    seeds = rng.integers(0, 2**32, (16, 6), dtype=np.uint64).astype(np.uint32)
    out = run(kernel("state_roundtrip"), seeds).outputs[0]
    for p in range(16):
        draws, after = _xorwow([int(v) for v in seeds[p]], 5)
        assert out[p, :5].tolist() == draws
        assert out[p, 5:].tolist() == after


def test_rand_state_rules():
    import ncrtl.nki.isa as nisa

    @nki.jit(platform_target="trn2")
    def k(x):
        s = nki.language.ndarray((4, 24), "uint32", buffer=nki.language.sbuf)
        nisa.rand_get_state(s, engine=nisa.engine.vector)
        return x

    with pytest.raises(nki.NkiError, match="engine=.*this instruction runs on gpsimd"):
        nki.trace(k, [np.zeros((1, 1), np.float32)])

    @nki.jit(platform_target="trn2")
    def j(x):
        s = nki.language.ndarray((4, 24), "uint32", buffer=nki.language.sbuf)
        nisa.rand_set_state(s)
        return x

    with pytest.raises(nki.NkiError, match=r"XORWOW state is 6 uint32 words per partition"):
        nki.trace(j, [np.zeros((1, 1), np.float32)])


def test_language_random_replays():
    x = np.random.default_rng(10).random((32, 16), np.float32) + 1
    a = run(kernel("language_random"), x).outputs[0]
    b = run(kernel("language_random"), x).outputs[0]
    np.testing.assert_array_equal(a, b)
    r, d = a[:, :16], a[:, 16:]
    assert 0 <= r.min() and r.max() < 1
    assert np.all((d == 0) | (d == x))
    assert 0.3 < (d == 0).mean() < 0.7


# -- over N simulated ranks ------------------------------------------------------------------------


def _ranks(k, n, *arrays, **kwargs):
    """``k`` over ``n`` ranks; a list of arrays is a per-rank argument."""
    args = [nki.per_rank(a) if isinstance(a, list) else a for a in arrays]
    return nki.run(k.ranks(n), args, kwargs)


def _xs(n, shape=(8, 4), dtype=np.float32, seed=11):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) * 100).astype(dtype) for _ in range(n)]


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize(
    "kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"]
)
def test_collectives_over_ranks(kind, lnc):
    """Each rank a device of its own with its own input; the collective exchanges between
    them as the reference says (a reduction in rank order in float32, rounded once); every
    rank's outputs, rank 0's by default; on a kernel[2] each core meets its counterparts."""
    n = 4
    xs = _xs(n)
    k = kernel("rank_collective")
    res = _ranks(k[2] if lnc == 2 else k, n, xs, kind=kind)
    if kind == "all_reduce":
        acc = xs[0].copy()
        for x in xs[1:]:
            acc = acc + x
        want = [acc] * n
    elif kind == "all_gather":
        want = [np.concatenate(xs, axis=1)] * n
    elif kind == "reduce_scatter":
        acc = xs[0] + xs[1] + xs[2] + xs[3]
        want = [acc[2 * r : 2 * r + 2] for r in range(n)]
    elif kind == "all_to_all":
        want = [np.concatenate([x[2 * r : 2 * r + 2] for x in xs]) for r in range(n)]
    else:
        want = [xs[(r - 1) % n] for r in range(n)]
    assert len(res.rank_outputs) == n
    for r in range(n):
        np.testing.assert_array_equal(res.rank_outputs[r][0], want[r])
    np.testing.assert_array_equal(res.outputs[0], want[0])
    s = res.report.summary()
    assert [r["rank"] for r in s["ranks"]] == list(range(n))
    assert (
        s["slowest_rank_ns"]
        == max(r["ns"] for r in s["ranks"])
        == pytest.approx(res.report.total_ns)
    )


def test_all_reduce_over_ranks_rounds_once_in_rank_order():
    """bfloat16 ranks into a bfloat16 destination: the float32 sum in rank order, one
    rounding (a sum that rounding after each addition gives differently)."""
    vals = [1.0, 2.0**-8, 2.0**-8, 2.0**-8]  # each 2**-8 alone is below half an ulp of 1
    xs = [np.full((8, 4), v, np.float32).astype(ml_dtypes.bfloat16) for v in vals]
    out = _ranks(kernel("rank_collective"), 4, xs, kind="all_reduce").outputs[0]
    want = _bf16(np.float32(1 + 3 * 2.0**-8))
    assert out[0, 0] == want and want != ml_dtypes.bfloat16(1.0)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_rank_id_and_shared_inputs():
    """A plain array is every rank's; rank_id() is the rank (each rank writes its result at
    out[rank] of its own device memory)."""
    x = np.ones((8, 4), np.float32)
    res = _ranks(kernel("sbuf_collective"), 2, x, kind="all_gather")  # x * (rank + 1)
    np.testing.assert_array_equal(res.rank_outputs[1][0][1], np.concatenate([x, 2 * x], 1))


@pytest.mark.parametrize("channels", [1, 2])
def test_ring_permute_and_processing_rank(channels):
    """A ring all-gather of collective_permute_implicit steps: each step's block lands at the
    rank the processing-rank register names; every rank ends with every rank's block, on a
    ring in the group's own order too."""
    n = 4
    xs = _xs(n)
    res = _ranks(kernel("ring_gather"), n, xs, channels=channels)
    for r in range(n):
        np.testing.assert_array_equal(res.rank_outputs[r][0], np.stack(xs))
    res = _ranks(kernel("ring_gather"), n, xs, groups=[[2, 0, 3, 1]])
    np.testing.assert_array_equal(res.rank_outputs[3][0], np.stack(xs))


def test_ring_permute_reduce():
    n = 4
    xs, ys = _xs(n, seed=1), _xs(n, seed=2)
    res = _ranks(kernel("ring_reduce"), n, xs, ys, op=__import__("nki").language.maximum)
    for r in range(n):
        p = (r - 1) % n
        np.testing.assert_array_equal(res.rank_outputs[r][0], np.maximum(xs[p], ys[p]))


def test_ring_permute_timing_crosses_the_link():
    """Between devices a collective takes at least the link's latency per ring step and
    its bytes at the link's rate: a slower link makes the run longer by that much."""
    from ncrtl.model.kernel.collective import Link
    from ncrtl.model.kernel.timing import Params

    xs = _xs(4, shape=(128, 512))
    k = kernel("ring_reduce").ranks(4)
    fast = nki.run(k, [nki.per_rank(xs), nki.per_rank(xs)], {}, golden=False)
    slow = nki.run(
        k,
        [nki.per_rank(xs), nki.per_rank(xs)],
        {},
        golden=False,
        params=Params(link=Link(gbps=1.0, latency_ns=5000.0)),
    )
    nbytes = 128 * 512 * 4  # the destination, received from the predecessor in one step
    assert slow.report.total_ns >= 5000 + nbytes / 1.0 > fast.report.total_ns
    assert slow.report.total_ns < 5000 + nbytes + fast.report.total_ns


def test_gather_v_reads_the_counts_when_it_runs():
    """all_gather_v: each rank's chunk (its metadata's count and displacement, read when
    the streams run) lands in every rank's slot for it; row 2 gets the counts received."""
    n, P, F = 4, 2, 4
    xs = _xs(n, shape=(P, F))
    metas = []
    for r in range(n):
        m = np.zeros((3, n), np.uint32)
        m[0, 0], m[1, 0] = r + 1, 2  # send r + 1 elements from element 2
        metas.append(m)
    res = _ranks(kernel("gather_v")[2], n, xs, metas)
    for r in range(n):
        out = res.rank_outputs[r][0].reshape(n, P * F)
        for s in range(n):
            want = np.zeros(P * F, np.float32)
            want[: s + 1] = xs[s].reshape(-1)[2 : 3 + s]
            np.testing.assert_array_equal(out[s], want)
        assert metas[r][2].tolist() == [1, 2, 3, 4]  # written back (recv_counts)


def test_all_to_all_v_chunks():
    n = 2
    xs = _xs(n, shape=(2, 4))
    metas = [
        np.array([[1, 3], [0, 4], [0, 0]], np.uint32),
        np.array([[2, 2], [6, 0], [0, 0]], np.uint32),
    ]
    res = _ranks(kernel("to_all_v"), n, xs, metas)
    flat = [x.reshape(-1) for x in xs]
    want0 = np.zeros(8, np.float32)
    want0[0:1], want0[4:6] = flat[0][0:1], flat[1][6:8]
    want1 = np.zeros(8, np.float32)
    want1[0:3], want1[4:6] = flat[0][4:7], flat[1][0:2]
    np.testing.assert_array_equal(res.rank_outputs[0][0].reshape(-1), want0)
    np.testing.assert_array_equal(res.rank_outputs[1][0].reshape(-1), want1)
    assert metas[1][2].tolist() == [3, 2]


def test_variable_chunk_outside_its_slot_is_one_line():
    xs = _xs(2, shape=(2, 4))
    metas = [np.array([[5, 0], [0, 0], [0, 0]], np.uint32)] * 2  # 5 elements for slots of 4
    with pytest.raises(kgolden.KernelError, match="5 elements for a slot of 4"):
        _ranks(kernel("to_all_v"), 2, xs, metas)


def test_core_barrier_and_sendrecv_within_each_rank():
    """kernel[2] over ranks: a core barrier and a sendrecv pair the two cores of each rank,
    each rank's device memory its own."""
    xs = _xs(3, shape=(8, 4))
    res = _ranks(kernel("swap")[2], 3, xs)
    for r in range(3):
        np.testing.assert_array_equal(res.rank_outputs[r][0], np.concatenate([xs[r] + 1, xs[r]], 1))
    res = _ranks(kernel("exchange")[2], 2, xs[:2])
    for r in range(2):
        np.testing.assert_array_equal(res.rank_outputs[r][0], np.concatenate([xs[r] + 1, xs[r]]))


@pytest.mark.parametrize(
    "case, rule",
    [
        ("channels", "1 channel(s), channel_ids 2"),
        ("channel_ids", "consecutive integers starting from 0"),
        ("inner", "must be a list of exactly one tensor"),
        ("iteration", "iteration_id must be a non-negative integer"),
        ("register", "iteration_id is a register"),
        ("gather_v_lnc", "only LNC=2 is supported"),
        ("meta_shape", "must be [3, 4]"),
        ("rdispls", "NeuronSwitch instances only"),
    ],
)
def test_ring_and_variable_rules(case, rule):
    with pytest.raises(nki.NkiError) as e:
        nki.trace(kernel("bad_ring").ranks(4), [np.zeros((8, 4), np.float32)], {"case": case})
    msg = str(e.value)
    assert "\n" not in msg and "multicore.py:" in msg and rule in msg, msg


def test_ranks_rules():
    x = np.zeros((8, 4), np.float32)
    with pytest.raises(nki.NkiError, match="per-rank arrays need a run over ranks"):
        nki.trace(kernel("rank_collective"), [nki.per_rank([x, x])], {"kind": "all_reduce"})
    with pytest.raises(nki.NkiError, match="2 per-rank arrays for 4 ranks"):
        nki.trace(
            kernel("rank_collective").ranks(4), [nki.per_rank([x, x])], {"kind": "all_reduce"}
        )
    with pytest.raises(nki.NkiError, match="the ranks are a positive integer"):
        kernel("rank_collective").ranks(0)
    msg = error(kernel("rank_collective").ranks(2), x, kind="all_reduce")
    assert "names rank 2" in msg and "2 rank(s)" in msg


def test_ncrtl_run_ranks(tmp_path):
    """ncrtl run --ranks N --per-rank: each rank's time and the slowest; --all-ranks writes
    every rank's outputs as [ranks, ...]; the flags that need --ranks say so."""
    from ncrtl.cli import main

    xs = np.stack(_xs(4))
    np.save(tmp_path / "x.npy", xs)
    out = tmp_path / "out"
    rc = main(
        [
            "run",
            f"{KERNELS}::rank_collective",
            "--args",
            str(tmp_path / "x.npy"),
            "--kwarg",
            "kind='all_gather'",
            "--ranks",
            "4",
            "--per-rank",
            "--all-ranks",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    got = np.load(out / "out0.npy")
    assert got.shape == (4, 8, 16)
    for r in range(4):
        np.testing.assert_array_equal(got[r], np.concatenate(list(xs), axis=1))
    import json

    s = json.loads((out / "report.json").read_text())
    assert len(s["ranks"]) == 4 and "slowest_rank" in s
    assert (
        main(["run", f"{KERNELS}::rank_collective", "--shapes", "8x4:float32", "--all-ranks"]) == 2
    )
