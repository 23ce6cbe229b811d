"""The older ``neuronxcc.nki`` API's entry points, launch grids and module aliases
(docs/nki/legacy.md): ``nki.jit`` / ``baremetal`` / ``simulate_kernel`` (golden values),
``benchmark`` (the timing run's latency), ``profile`` (its files), ``kernel[gx, gy]`` with
``nl.spmd_dim`` / ``nl.nc``, and their errors (one line at the test's own line).

The kernels here write their bodies with the current API's calls (``nisa.dma_copy(dst=...)``),
so that the entry points are tested apart from the older language; tests/kernels/legacy_entry.py
has kernels in the older language itself."""

import json
import os
import sys

import numpy as np
import pytest

import ncrtl.nki as cur
import ncrtl.nki.isa as nisa
import ncrtl.nki.language as nl
import ncrtl.nki.legacy as nki
from ncrtl.nki.legacy import spmd

HERE = os.path.basename(__file__)
T = 64  # each instance's tile: [T, T] float32


@nki.jit
def tile_add(a, b):
    """Instance (i, j) adds tile (i, j) of a and b; the grid covers the inputs."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    rows, cols = slice(i * T, (i + 1) * T), slice(j * T, (j + 1) * T)
    sa = nl.ndarray((T, T), dtype=a.dtype, buffer=nl.sbuf)
    sb = nl.ndarray((T, T), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sa, src=a[rows, cols])
    nisa.dma_copy(dst=sb, src=b[rows, cols])
    nisa.tensor_tensor(dst=sa, data1=sa, data2=sb, op=nl.add)
    nisa.dma_copy(dst=out[rows, cols], src=sa)
    return out


def _inputs(gx=2, gy=2, seed=0):
    rng = np.random.default_rng(seed)
    shape = (gx * T, gy * T)
    return rng.random(shape, dtype=np.float32), rng.random(shape, dtype=np.float32)


# -- module aliases ----------------------------------------------------------------------------


def test_aliases_resolve_neuronxcc_to_the_older_api_and_nki_to_the_current():
    cur.install_aliases()
    import neuronxcc
    import neuronxcc.nki as old
    import neuronxcc.nki.compiler as compiler
    import neuronxcc.nki.typing as nt
    import nki as current
    from neuronxcc import nki as same

    assert old is nki and same is nki and current is cur
    assert sys.modules["neuronxcc.nki"] is sys.modules["ncrtl.nki.legacy"]
    assert old.__name__ == "ncrtl.nki.legacy" and nt.__name__ == "ncrtl.nki.legacy.typing"
    assert neuronxcc.nki is old and old.typing is nt and old.compiler is compiler
    assert nt.tensor[128, 512] is nt.tensor and old.tensor is nt.tensor
    # a module of the older API ncrtl does not model: NotModelled naming it, at the import
    with pytest.raises(cur.NotModelled, match=rf"{HERE}:\d+: neuronxcc.nki.kernels is not"):
        import neuronxcc.nki.kernels.attention  # noqa: F401
    # a name the module does not have: a stand-in raising NotModelled when used
    with pytest.raises(cur.NotModelled, match=rf"{HERE}:\d+: neuronxcc.nki.FrameworkKernel is not"):
        old.FrameworkKernel()


def test_compiler_directives_change_nothing_and_allocations_name_their_buffer():
    import ncrtl.nki.legacy.compiler as c

    assert c.skip_middle_end_transformations(tile_add) is tile_add
    assert c.force_auto_alloc(tile_add) is tile_add
    got = c.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,))
    assert got == nl.sbuf and got.allocation == {"base_addr": 0, "num_free_tiles": (2,)}
    assert c.psum.mod_alloc(base_bank=0, num_bank_tiles=(8,)) == nl.psum
    assert c.psum.alloc(lambda i: i) == nl.psum and c.sbuf.auto_alloc() == nl.sbuf
    assert "no_reorder" in repr(c.no_reorder())
    with pytest.raises(cur.NkiError, match=rf"{HERE}:\d+: nki.compiler.sbuf.mod_alloc: give"):
        c.sbuf.mod_alloc(0)


# -- values: jit, baremetal, simulate_kernel ----------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    ["jit", "baremetal", "baremetal()", "jit(mode='baremetal')", "simulate_kernel"],
)
def test_values_from_the_golden_through_each_entry_point(entry):
    a, b = _inputs()
    if entry == "simulate_kernel":
        got = nki.simulate_kernel(tile_add[2, 2], a, b)
    else:
        deco = eval(f"nki.{entry}")
        k = deco(tile_add.fn)
        assert isinstance(k, cur.Kernel)
        got = k[2, 2](a, b)
    np.testing.assert_array_equal(got, a + b)


def test_device_tensors_given_by_name_and_a_plain_function():
    a, b = _inputs(1, 2)
    np.testing.assert_array_equal(tile_add[1, 2](b=b, a=a), a + b)
    np.testing.assert_array_equal(nki.simulate_kernel(tile_add[1, 2], a, b=b), a + b)

    def host(a, b):  # host code launching the grid, traced as one kernel
        return tile_add[1, 2](a, b)

    np.testing.assert_array_equal(nki.simulate_kernel(host, a, b), a + b)


# -- launch grids ------------------------------------------------------------------------------


def _instances(kernel, a, b):
    programs = cur.trace(kernel, [a, b])
    programs = programs if isinstance(programs, tuple) else (programs,)
    return [[pos for pos, _, _ in p.instances] for p in programs]


def test_a_grid_runs_on_one_core_one_instance_after_another():
    a, b = _inputs(2, 2)
    assert tile_add[2, 2].lnc == 1 and tile_add[2, 2].grid == (2, 2)
    assert _instances(tile_add[2, 2], a, b) == [[(0, 0), (0, 1), (1, 0), (1, 1)]]


@pytest.mark.parametrize(
    "grid, cores",
    [
        # nl.nc(2): the axis's two instances on the two cores
        ((spmd.nc(2), 2), [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]),
        # spmd_dim(2, nc(2)): interleaved, even indices on core 0 (the tutorial's sharding)
        ((spmd.spmd_dim(2, spmd.nc(2)), 1), [[(0, 0), (2, 0)], [(1, 0), (3, 0)]]),
        # spmd_dim(nc(2), 2): blocks, the first half on core 0
        ((spmd.spmd_dim(spmd.nc(2), 2), 1), [[(0, 0), (1, 0)], [(2, 0), (3, 0)]]),
        # nc(1): one core
        ((spmd.spmd_dim(2, spmd.nc(1)), 2), [[(0, 0), (0, 1), (1, 0), (1, 1)]]),
    ],
)
def test_spmd_dim_and_nc_spread_an_axis_over_the_two_cores(grid, cores):
    k = tile_add[grid]
    dims = tuple(g.size if isinstance(g, spmd.spmd_dim) else getattr(g, "n", g) for g in grid)
    assert k.grid == dims and k.lnc == len(cores)
    a, b = _inputs(*dims)
    assert _instances(k, a, b) == cores
    np.testing.assert_array_equal(k(a, b), a + b)


@pytest.mark.parametrize(
    "grid, rule",
    [
        ((0, 2), "grid dimension 0: a positive integer"),
        (("2",), "grid dimension '2'"),
        ((True,), "grid dimension True"),
        ((spmd.nc(2), spmd.nc(2)), "more than one nl.nc in the launch grid"),
        ((), "the launch grid is positive integers"),
    ],
)
def test_bad_grids_are_one_line_at_the_launch(grid, rule):
    with pytest.raises(cur.NkiError, match=rf"^[^\n]*{HERE}:\d+: tile_add\[.*{rule}"):
        tile_add[grid]


@pytest.mark.parametrize(
    "make, rule",
    [
        (lambda: spmd.nc(3), r"nl.nc: nl.nc\(3\): a logical NeuronCore has 2 physical cores"),
        (lambda: spmd.nc(0), "nl.nc: the core count 0 must be at least 1"),
        (lambda: spmd.spmd_dim(), "nl.spmd_dim: give its sub-dimensions"),
        (lambda: spmd.spmd_dim(2, 1.5), "nl.spmd_dim: sub-dimension 1.5 is not an integer"),
        (lambda: spmd.spmd_dim(spmd.nc(2), spmd.nc(2)), r"nl.spmd_dim: .*has more than one nl.nc"),
    ],
)
def test_bad_spmd_dims_are_one_line(make, rule):
    with pytest.raises(cur.NkiError, match=rf"{HERE}:\d+: {rule}"):
        make()


# -- benchmark ---------------------------------------------------------------------------------


def test_benchmark_latency_is_the_timing_runs_in_microseconds_at_every_percentile(capsys):
    a, b = _inputs()
    bench = nki.benchmark(warmup=5, iters=10)(tile_add)[2, 2]
    assert bench.benchmark_result is None
    assert bench(a, b) is None
    res = bench.benchmark_result
    want = cur.run(tile_add[2, 2], [a, b], golden=False).report.total_ns / 1000
    assert res.nc_latency.get_latency_percentile(50) == pytest.approx(want)
    assert {res.nc_latency.get_latency_percentile(p) for p in (0, 1, 50, 99, 99.9, 100)} == {
        res.nc_latency.get_latency_percentile(50)
    }
    assert (res.warmup, res.iters) == (5, 10) and res.report.total_ns == res.latency_ns
    assert "every percentile" in capsys.readouterr().out
    # as a decorator without arguments too
    plain = nki.benchmark(tile_add.fn)[2, 2]
    plain(a, b)
    assert plain.benchmark_result.latency_ns == res.latency_ns


@pytest.mark.parametrize(
    "call, rule",
    [
        (lambda r: r.get_latency_percentile(101), "percentile 101 is outside 0 to 100"),
        (lambda r: r.get_latency_percentile("p99"), "percentile 'p99' is not a number"),
    ],
)
def test_bad_percentiles_are_one_line(call, rule):
    res = nki.LatencyResult(1.5)
    with pytest.raises(
        cur.NkiError, match=rf"{HERE}:\d+: nc_latency.get_latency_percentile: {rule}"
    ):
        call(res)


@pytest.mark.parametrize(
    "make, rule",
    [
        (lambda: nki.benchmark(warmpu=3), "nki.benchmark: no argument 'warmpu'"),
        (lambda: nki.benchmark(iters=0), "nki.benchmark: iters=0: an integer of at least 1"),
        (lambda: nki.benchmark(warmup=-1), "nki.benchmark: warmup=-1: an integer of at least 0"),
        (lambda: nki.profile(), "nki.profile: give working_directory="),
        (
            lambda: nki.profile(working_directory="rel"),
            "nki.profile: working_directory='rel' is not an abs",
        ),
        (
            lambda: nki.profile(working_directory="/x", profile_nth=0),
            "nki.profile: profile_nth=0: an int",
        ),
        (lambda: nki.jit(mode="fast"), "nki.jit: mode='fast': one of auto"),
        (
            lambda: nki.jit(mode="benchmark", overwrite=True),
            "nki.jit: no argument 'overwrite' with mode",
        ),
        (lambda: nki.baremetal(save_neff_name=3), "nki.baremetal: save_neff_name=3: a file or"),
        (lambda: nki.simulate_kernel(3), "nki.simulate_kernel: 3 is not a kernel"),
    ],
)
def test_bad_entry_point_arguments_are_one_line(make, rule):
    with pytest.raises(cur.NkiError, match=rf"^[^\n]*{HERE}:\d+: {rule}"):
        make()


# -- profile and the files of baremetal --------------------------------------------------------


def test_profile_writes_the_trace_streams_and_report_in_its_working_directory(tmp_path):
    a, b = _inputs()
    folder = tmp_path / "profiles"
    prof = nki.profile(working_directory=str(folder), profile_nth=2)(tile_add)[2, 2]
    assert prof(a, b) is None
    files = sorted(os.listdir(folder))
    assert files == ["file.neff", "profile.ntff", "profile.ntff.json"]
    trace = json.loads((folder / "profile.ntff").read_text())
    assert trace["traceEvents"]
    report = json.loads((folder / "profile.ntff.json").read_text())
    assert report["total_ns"] == pytest.approx(prof.benchmark_result.latency_ns, rel=1e-6)
    assert "dma_copy" in (folder / "file.neff").read_text()
    # overwrite=False (the default) refuses the files of a previous run; True replaces them
    with pytest.raises(cur.NkiError, match=rf"{HERE}:\d+: nki.profile: .*file.neff exists"):
        prof(a, b)
    again = nki.profile(working_directory=str(folder), overwrite=True, save_trace_name="t.json")
    again(tile_add)[2, 2](a, b)
    assert "t.json" in os.listdir(folder) and "t.json.json" in os.listdir(folder)


def test_baremetal_writes_its_named_files_and_returns_the_values(tmp_path):
    a, b = _inputs(1, 1)
    k = nki.baremetal(
        artifacts_dir=str(tmp_path), save_neff_name="k.neff", save_trace_name="k.ntff"
    )
    got = k(tile_add)[1, 1](a, b)
    np.testing.assert_array_equal(got, a + b)
    assert sorted(os.listdir(tmp_path)) == ["k.neff", "k.ntff"]


# -- kernels in the older language (tests/kernels/legacy_entry.py) ------------------------------

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels", "legacy_entry.py")


@pytest.fixture(scope="module")
def legacy():
    """The kernel file, imported as ``ncrtl run`` imports it (``neuronxcc.nki`` aliased)."""
    from ncrtl.kernels import load_module

    return load_module(KERNELS)


def _ab(rows, cols, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((2, rows, cols)).astype(np.float32)


def test_older_language_kernels_through_the_entry_points(legacy):
    a, b = _ab(64, 128)
    want = legacy.reference(a, b)
    np.testing.assert_array_equal(legacy.grid_add[2, 2](a, b), want)
    np.testing.assert_array_equal(legacy.host_add(a, b), want)
    np.testing.assert_array_equal(nki.simulate_kernel(legacy.host_add, a, b), want)
    np.testing.assert_array_equal(
        nki.baremetal(legacy.add_nc2)(*_ab(128, 64)), np.add(*_ab(128, 64))
    )
    got = nki.simulate_kernel(legacy.scaled, a, factor=3.0)
    np.testing.assert_array_equal(got, a * np.float32(3.0))  # one float32 multiply
    bench = nki.benchmark(warmup=2, iters=3)(legacy.grid_add[2, 2])
    bench(a, b)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(99) > 0


def test_ncrtl_run_times_an_older_api_grid_and_runs_its_host_code(capsys):
    from ncrtl.cli import main

    shapes = ["--shapes", "64x128:float32", "64x128:float32"]
    assert main(["run", f"{KERNELS}::add_2x2", *shapes, "--timing-only"]) == 0
    out = capsys.readouterr().out
    assert "launch grid: 4 instances" in out and "core 0" in out
    assert main(["run", f"{KERNELS}::add_nc2", "--shapes", "128x64:float32", "128x64:float32"]) == 0
    out = capsys.readouterr().out
    assert "core 1" in out
    assert main(["run", f"{KERNELS}::host_add", *shapes]) == 0


def test_ncrtl_run_a_bad_launch_is_one_line_at_its_line(capsys):
    from ncrtl.cli import main

    from .kernel_lines import kernel_line

    shapes = ["--shapes", "64x128:float32", "64x128:float32"]
    assert main(["run", f"{KERNELS}::bad_grid", *shapes]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{kernel_line(KERNELS, 'bad_grid')}: grid_add[2, 0]: grid dimension 0" in err


def test_ncrtl_run_psum_rounding_keeps_an_older_api_kernel(capsys):
    from ncrtl.cli import main

    shapes = ["--shapes", "64x128:float32", "64x128:float32"]
    assert (
        main(["run", f"{KERNELS}::add_2x2", *shapes, "--psum-rounding", "sr", "--core", "v4"]) == 0
    )
