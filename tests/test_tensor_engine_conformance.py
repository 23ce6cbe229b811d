"""Tensor Engine RTL vs the golden (values, bit for bit), isa.check (error codes) and the timing
model (the cycle of every output vector and error pulse), through cocotb on Verilator.

Small arrays in every mode run in ``make test`` (every mode at 4 x 4, and each way of building
the array once); the rest of the small configurations and the full 128 x 128 array (K = 128,
M = 128, N = 512 for bf16, fp32, double_row, mx and transpose) run in the slow suite.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from ncrtl import blocks
from ncrtl.testbench.conformance import run_block

# 16 x 16 is built of 2 x 2 tiles of 8 x 8 PEs (the default block); 8 x 8 with block 2 of 4 x 4
# tiles of 2 x 2, and with block 1 of PEs placed one by one.
ALL_SMALL = (
    [p for _, p in blocks.GROUPS["tensor_engine"]]
    + [{"rows": 16, "cols": 16, "mode": m} for m in ("bf16", "double_row", "transpose_fp8")]
    # The tile of 8 x 8 PEs, 2 x 2 of them, with the bf16-family PE (a third of the build of
    # the all-mode one; the tiling is the same for every PE, every mode runs at 4 x 4).
    + [{"rows": 16, "cols": 16, "mode": "bf16", "pe_modes": "bf16"}]
    # Sparse matmuls in tiles of 2 x 2 PEs: row groups of 4 rows span two tiles, so the group
    # words cross the tiles' edges (the group's own 8 x 8 build is one tile).
    + [{"rows": 8, "cols": 8, "mode": "sparse", "sparse": 1, "block": 2}]
    + [
        {"rows": 8, "cols": 8, "mode": "fp8", "block": 2},
        {"rows": 8, "cols": 8, "mode": "double_row", "block": 1},
    ]
)


def _id(p):
    return (
        f"{p['rows']}x{p['cols']}-{p['mode']}"
        + (f"-b{p['block']}" if "block" in p else "")
        + (f"-pe_modes={p['pe_modes']}" if "pe_modes" in p else "")
        + ("-sparse" if p.get("sparse") else "")
    )


#: ``make test`` runs every mode on a 4 x 4 array of 2 x 2 tiles of 2 x 2 PEs (below) and the
#: tile of 8 x 8 PEs, 2 x 2 of them at 16 x 16 (which holds the one tile of 8 x 8); the other
#: small configurations (every mode at 8 x 8, 8 x 8 in tiles of 2 x 2, the all-mode 16 x 16,
#: more 16 x 16 modes, PEs placed one by one) run in the slow suite.
FAST_IDS = {"16x16-bf16-pe_modes=bf16"}
#: The 4 x 4 arrays of ``make test`` are built of tiles of 2 x 2 PEs (``block=2``: Verilator
#: compiles one tile model, a quarter of the group's one tile of 4 x 4 PEs; 26 s to build
#: against about 10 s); the group's own 4 x 4 builds run in the slow suite.  They are built
#: with the sparse path (``sparse=1``: 12 s), so that the dense modes' programs run on the
#: engine that also runs the sparse programs (its row group spans two tiles), one build for
#: all (the MX builds of tile_unit 4 stay without it: no sparse program runs there); the 8 x 8
#: sparse engines (two row groups) run in the slow suite.
SMALL = (
    [
        {**p, "block": 2, **({} if "tile_unit" in p else {"sparse": 1})}
        for p in ALL_SMALL
        if p["rows"] == 4
    ]
    + [{"rows": 4, "cols": 4, "mode": "sparse", "block": 2, "sparse": 1}]
    + [p for p in ALL_SMALL if _id(p) in FAST_IDS]
)
MORE_SMALL = [p for p in ALL_SMALL if _id(p) not in FAST_IDS]


def _check(res):
    assert res.passed, res.report()


def _small_programs(params):
    block = blocks.get("pe_array")
    p = block.resolve({k: str(v) for k, v in params.items()})
    res = run_block(block, p, count=600, seed=3, stall=0.25)
    _check(res)
    assert sum(u["vectors"] for u in res.units) > 0


@pytest.mark.sim
@pytest.mark.parametrize("params", SMALL, ids=_id)
def test_small_array_programs(params):
    """Random LS/MM programs with illegal instructions mixed in; random stalls in one test."""
    _small_programs(params)


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("params", MORE_SMALL, ids=_id)
def test_more_small_array_programs(params):
    """The rest of the ``tensor_engine`` group and the other small builds."""
    _small_programs(params)


#: Parallel tiles (tile_unit 2 on 8 x 8: 4 row groups x 4 column groups): the conformance
#: program interleaves the tiles of one tiling of the mode; values, errors (TILE_BUSY from the
#: timing model) and every output and error cycle against ``timing.HDL_PARALLEL``.
#: ``make test`` runs the bf16 program on an engine with the bf16-family PE (the tiles' paths
#: and control are the same for every PE; the modes on the all-mode PE in the slow suite and,
#: in the Amaranth simulator, test_hdl_tensor_engine's test_parallel_tiles_modes_and_rules).
PARALLEL = [
    {"rows": 8, "cols": 8, "mode": m, "tile_unit": 2, "parallel_tiles": 1}
    for m in ("bf16", "mx", "fp32", "transpose_fp8", "double_row")
]
PARALLEL_FAST = [{**PARALLEL[0], "pe_modes": "bf16"}]


def _family_id(p):
    return f"-pe_modes={p['pe_modes']}" if "pe_modes" in p else ""


@pytest.mark.sim
@pytest.mark.parametrize(
    "params",
    [pytest.param(p) for p in PARALLEL_FAST]
    + [pytest.param(p, marks=[pytest.mark.slow]) for p in PARALLEL],
    ids=lambda p: f"8x8-{p['mode']}-parallel{_family_id(p)}",
)
def test_parallel_tiles_programs(params):
    """Tiles side by side on the Verilog: random stalls in one test, exact timing in the
    other."""
    _small_programs(params)


#: The background transpose plane (8 x 8, tile_unit 2): the conformance program mixes the
#: mode's matmuls and transposes, one after another; values, errors and every output and error
#: cycle against ``timing.HDL_BACKGROUND``.
BACKGROUND = [
    {"rows": 8, "cols": 8, "mode": m, "tile_unit": 2, "background_transpose": 1}
    for m in ("bf16", "transpose_fp32", "fp8", "transpose_fp16")
]
#: ``make test``: the bf16 matmuls and transposes on the bf16-family PE (the plane and its
#: control are the same for every PE; the all-mode engine in the slow suite and in the Amaranth
#: simulator, test_hdl_tensor_engine's test_background_plane_tile_unit_2).
BACKGROUND_FAST = [{**BACKGROUND[0], "pe_modes": "bf16"}]


@pytest.mark.sim
@pytest.mark.parametrize(
    "params",
    [pytest.param(p) for p in BACKGROUND_FAST]
    + [pytest.param(p, marks=[pytest.mark.slow]) for p in BACKGROUND],
    ids=lambda p: f"8x8-{p['mode']}-background{_family_id(p)}",
)
def test_background_plane_programs(params):
    """Matmuls and transposes on both planes on the Verilog: random stalls in one test, exact
    timing in the other."""
    _small_programs(params)


#: PEs built for one mode family (``pe_modes``), each running one of its modes.
PE_MODES = [
    {"rows": 8, "cols": 8, "mode": "bf16", "pe_modes": "bf16"},
    {"rows": 8, "cols": 8, "mode": "transpose_fp16", "pe_modes": "bf16"},
    {"rows": 8, "cols": 8, "mode": "double_row", "pe_modes": "fp8"},
    {"rows": 8, "cols": 8, "mode": "tf32", "pe_modes": "fp32"},
    {"rows": 8, "cols": 8, "mode": "mx", "pe_modes": "mx", "tile_unit": 8},
]


#: All in the slow suite: ``make test`` runs the bf16 family at 16 x 16
#: (test_small_array_programs[16x16-bf16-pe_modes=bf16]), the parallel tiles and the background
#: plane with it.
@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize(
    "params", PE_MODES, ids=lambda p: f"8x8-{p['mode']}-pe_modes={p['pe_modes']}"
)
def test_pe_modes_programs(params):
    """An engine whose PE serves one mode family, on the Verilog."""
    _small_programs(params)


@pytest.mark.sim
@pytest.mark.slow
def test_full_array_sparse_programs():
    """128 x 128 engine with the sparse path (bf16-family PEs, tiles of 8 x 8): random sparse
    programs of both bf16-family modes and every ratio, K up to 128 (32 row groups), dense
    pairs and illegal instructions, without and with stalls."""
    params = {"rows": 128, "cols": 128, "mode": "sparse", "sparse": 1, "pe_modes": "bf16"}
    block = blocks.get("pe_array")
    p = block.resolve({k: str(v) for k, v in params.items()})
    res = run_block(block, p, count=800, seed=1, stall=0.1)
    _check(res)
    assert sum(u["vectors"] for u in res.units) > 0


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("mode", blocks.TE_MODES)
def test_full_array_conformance_on_bands(mode, monkeypatch):
    """128 x 128, each operation's conformance program (without and with stalls) as
    ``ncrtl conformance pe_array --mode MODE`` runs it: on the narrowest PE family serving it,
    as 2 column bands on 2 threads (whatever the machine's cores), checked bit for bit and, the
    timed program, cycle for cycle."""
    from ncrtl.testbench.conformance import run_conformance
    from ncrtl.testbench.tensor_engine import loop_run

    monkeypatch.setattr(loop_run, "available_cores", lambda: 2)
    block = blocks.get("pe_array")
    params, why = block.resolve_run({"mode": mode})
    assert why is not None and params["pe_modes"] != "all"
    assert loop_run.band_choice(params).bands == 2
    assert run_conformance([(block, params)], count=2000, seed=3, stall=0.2) == 0


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bf16", "fp32", "double_row", "mx", "transpose_bf16"])
def test_full_array_matmul(mode):
    """128 x 128 array, K = 128, M = 128, N = 512: values and output cycles."""
    block = blocks.get("pe_array")
    p = block.resolve({"rows": "128", "cols": "128", "mode": mode})
    res = run_block(
        block,
        p,
        count=512,
        seed=5,
        stall=0.0,
        testbench="ncrtl.testbench.tensor_engine.test_sim",
        extra_env={"NCRTL_MATMUL": json.dumps({"k": 128, "m": 128, "n": 512})},
    )
    _check(res)
    assert sum(u["vectors"] for u in res.units) >= 128 * 512


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bf16", "fp8", "transpose_bf16"])
def test_tiled_programs_64x64(mode):
    """64 x 64 array (8 x 8 tiles of PEs, column-group borders between tiles): random programs
    whose groups run on 32-row / 32-column tiles of the hardware sizes, with stalls."""
    block = blocks.get("pe_array")
    p = block.resolve({"rows": "64", "cols": "64", "mode": mode, "max_n": "48"})
    res = run_block(block, p, count=600, seed=11, stall=0.2)
    _check(res)
    assert sum(u["vectors"] for u in res.units) > 0


@pytest.mark.sim
@pytest.mark.parametrize("mode", ["mx"])
def test_programs_through_the_verilog_stream_players(mode):
    """The same random programs played by the Verilog stream players instead of the Python
    drivers (seeded idle cycles on the three sources, seeded backpressure on the result): values,
    last flags, error codes and, without stalls, every output and error cycle."""
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    block = blocks.get("pe_array")
    params = {"rows": "4", "cols": "4", "mode": mode}
    if mode == "mx":
        params.update(tile_unit="4", max_n="1024")
    p = block.resolve(params)
    res = run_block(block, p, count=600, seed=3, stall=0.25, player=player_ports(4, 4))
    _check(res)
    assert {u["name"] for u in res.units} >= {
        f"tensor_engine.{block.top_name(p)}_player",
        "tensor_engine.output_cycles",
    }


@pytest.mark.sim
@pytest.mark.slow
def test_the_cpp_loop_replays_a_player_run_byte_for_byte(tmp_path):
    """The reference ``ncrtl bench`` measures the testbench against: the same engine in a C++
    loop doing the players' work (:mod:`ncrtl.testbench.stream_loop`) on the files of a player
    run with idle cycles and backpressure writes the same transfer logs, output beats and error
    strobes, cycle for cycle, in the same number of cycles."""
    import filecmp
    import shutil

    from ncrtl.testbench.stream_loop import build_loop, run_loop
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    block = blocks.get("pe_array")
    p = block.resolve({"rows": "4", "cols": "4", "mode": "bf16"})
    ports = player_ports(4, 4)
    # One test in the simulation, so that its cycles count from the simulation's start as the
    # loop's do.
    res = run_block(
        block, p, count=200, seed=5, stall=0.25, player=ports, testcase="test_program_stalls"
    )
    _check(res)
    played = Path(res.steps["run_dir"]) / "player"
    text, top = block.verilog(p)
    binary, _ = build_loop(text, top, ports, extra_args=block.build_args(p))
    files = tmp_path / "files"
    files.mkdir()
    for port in ports:
        if port.kind == "source":
            shutil.copy(played / f"{port.name}.in", files)
    shutil.copy(played / "config", files)
    cycles, seconds = run_loop(binary, files)
    assert cycles > 0 and seconds > 0
    outputs = [f"{q.name}.log" for q in ports if q.kind == "source"]
    outputs += [f"{q.name}.out" for q in ports if q.kind in ("sink", "strobe")]
    assert (played / "result.out").stat().st_size > 0
    for name in outputs:
        assert filecmp.cmp(played / name, files / name, shallow=False), name


def _replay(played, ports, folder, run):
    """Run ``run(folder)`` on a copy of a player run's inputs; the outputs that differ."""
    import filecmp
    import shutil

    folder.mkdir()
    for port in ports:
        if port.kind == "source":
            shutil.copy(played / f"{port.name}.in", folder)
    shutil.copy(played / "config", folder)
    cycles, seconds = run(folder)
    assert cycles > 0 and seconds > 0
    outputs = [f"{q.name}.log" for q in ports if q.kind == "source"]
    outputs += [f"{q.name}.out" for q in ports if q.kind in ("sink", "strobe")]
    return [n for n in outputs if not filecmp.cmp(played / n, folder / n, shallow=False)]


@pytest.mark.sim
def test_bands_play_every_conformance_program_as_the_one_model(tmp_path, monkeypatch, capsys):
    """Every conformance program of the engine (a random program of each operation of the mode
    table, illegal instructions mixed in), with idle cycles and backpressure and without, run
    as ``ncrtl sim`` runs a full-size engine: on column bands (an all-mode 4 x 4 engine, 2
    bands of 2 columns, a LoadStationary chain each), checked by the testbench's checks
    (values bit for bit, error codes, without stalls every output and error cycle), and the
    same player files on the one model in the C++ loop: the same transfer logs, output beats
    and error strobes in the same cycles, byte for byte."""
    from ncrtl.testbench.stream_loop import build_loop, run_loop
    from ncrtl.testbench.tensor_engine.loop_run import BandChoice, run_on_bands
    from ncrtl.testbench.tensor_engine.program import random_program
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    block = blocks.get("pe_array")
    hw = {"rows": "4", "cols": "4", "tile_unit": "2", "pe_modes": "all", "max_n": "24"}
    ports = player_ports(4, 4, 2)
    text, top = block.verilog(block.resolve(hw))
    one, _ = build_loop(text, top, ports, extra_args=block.build_args(block.resolve(hw)))
    rng = np.random.default_rng(7)
    for i, op in enumerate(blocks.TE_MODES):
        params = block.resolve({**hw, "mode": op})
        prog = random_program(rng, 4, 4, op, groups=3, max_n=24, tile_unit=2)
        for stall in (0.0, 0.25):
            played = tmp_path / f"{op}-{stall}"
            res, _ = run_on_bands(
                block,
                params,
                prog,
                BandChoice(2, 2, "test"),
                seed=i,
                stall=stall,
                check_timing=not stall,
                progress=False,
                folder=played,
            )
            _check(res)
            assert res.vectors > 0
            differ = _replay(
                played, ports, tmp_path / f"{op}-{stall}-one", lambda f: run_loop(one, f)
            )
            assert differ == [], (op, stall, differ)
    # a conformance run of an engine the band rule cuts (here from 16 PEs on 2 cores) runs the
    # testbench's two programs on the bands
    from ncrtl.testbench import conformance
    from ncrtl.testbench.tensor_engine import loop_run

    monkeypatch.setattr(loop_run, "BAND_MIN_PES", 16)
    monkeypatch.setattr(loop_run, "available_cores", lambda: 2)
    params = block.resolve({**hw, "mode": "double_row"})
    assert conformance.run_conformance([(block, params)], count=300, seed=4, stall=0.3) == 0
    out = capsys.readouterr().out
    assert "tensor_engine.tensor_engine_4x4_u2_bands" in out and "1/1 configurations passed" in out


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize(
    "bands", [pytest.param(8, id="8-bands-chains-cross-the-edges"), pytest.param(2)]
)
def test_column_bands_replay_a_player_run_byte_for_byte(tmp_path, bands):
    """The engine stepped as column bands on threads (:mod:`ncrtl.testbench.tensor_engine.band_loop`)
    on the files of a player run with idle cycles and backpressure writes the same transfer
    logs, output beats and error strobes in the same cycles, on one thread and on two: the band
    edges are exact one-cycle cuts.  With 8 bands of one column on an array of 4 LoadStationary
    chains of 2 columns, half the band edges continue a chain and half start one.  (A
    bf16-family PE: the cut is the same for every PE, and it builds in a third of the time.)"""
    from ncrtl.model.modes import pe_modes
    from ncrtl.testbench.tensor_engine.band_loop import build_band_loop
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    block = blocks.get("pe_array")
    p = block.resolve(
        {"rows": "8", "cols": "8", "mode": "bf16", "tile_unit": "2", "pe_modes": "bf16"}
    )
    ports = player_ports(8, 8, 2)
    res = run_block(
        block, p, count=200, seed=5, stall=0.25, player=ports, testcase="test_program_stalls"
    )
    _check(res)
    played = Path(res.steps["run_dir"]) / "player"
    assert (played / "result.out").stat().st_size > 0
    loop = build_band_loop(8, 8, bands, tile_unit=2, modes=pe_modes("bf16"))
    for threads in (1, 2):
        folder = tmp_path / f"threads{threads}"
        assert _replay(played, ports, folder, lambda f: loop.run(f, threads)) == []


def test_full_size_runs_say_why_they_run_as_one_model(monkeypatch, capsys):
    """Where column bands do not apply, a full-size conformance run is left to the cocotb
    testbench (the runner returns None) and says why in one line; the band rule names what a
    band cut would break."""
    from ncrtl.testbench.tensor_engine import loop_run

    monkeypatch.setattr(loop_run, "available_cores", lambda: 16)
    block = blocks.get("pe_array")
    cases = {
        "parallel tiles stream per lane group": {"parallel_tiles": "1"},
        "the background plane streams per plane": {"background_transpose": "1"},
        "the sparse path takes moving words from up to three columns": {
            "mode": "sparse",
            "sparse": "1",
        },
        "a profile-guided build is of the one model": {"pgo": "1"},
    }
    for why, user in cases.items():
        params = block.resolve(user)
        kw = dict(count=100, seed=1, stall=0.2, progress=True)
        assert loop_run.run_conformance_on_bands(block, params, **kw) is None
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"simulated as one model: {why}" in err, err
    assert loop_run.run_conformance_on_bands(block, params, waves=True, **kw) is None
    assert "waves are recorded from the one model" in capsys.readouterr().err
    # 16 cores: 16 bands of 8 columns, each within a LoadStationary chain of 32
    choice = loop_run.band_choice(block.resolve({}))
    assert (choice.bands, choice.threads) == (16, 16)
    choice = loop_run.band_choice(block.resolve({"rows": "64", "cols": "64"}), cores=3)
    assert (choice.bands, choice.threads) == (2, 2)
    assert loop_run.band_choice(block.resolve({"rows": "32", "cols": "32"})).bands == 1
