"""The ``ncrtl`` command line: Verilog generation, errors on bad input, a small conformance run."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import ml_dtypes
import numpy as np
import pytest

from ncrtl.cli import main


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fp.dot_add" in out and "double_row" in out and "group of 22 configurations" in out


def test_verilog_writes_a_module(tmp_path, capsys):
    assert (
        main(
            [
                "verilog",
                "fp.dot_add",
                "--param",
                "mode=mx",
                "--param",
                "lanes=1",
                "-o",
                str(tmp_path),
            ]
        )
        == 0
    )
    text = (tmp_path / "fp_dot_add_mx.v").read_text()
    assert "module fp_dot_add_mx(" in text
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["verilog", "fp.nope"], "unknown block 'fp.nope'; known blocks: fp.mul"),
        (
            ["verilog", "fp.dot_add", "--param", "mode=bf8"],
            "parameter mode='bf8' is not allowed; allowed: fp32, tf32, bf16",
        ),
        (
            ["verilog", "fp.dot_add", "--param", "width=3"],
            "fp.dot_add: unknown parameter 'width'; allowed: mode, lanes",
        ),
        (["verilog", "fp.add", "--param", "lanes=x"], "parameter lanes='x' is not an integer"),
        (["verilog", "fp.add", "--param", "lanes=0"], "parameter lanes=0 is below the minimum 1"),
        (
            ["verilog", "fp.add", "--param", "lanes"],
            "--param 'lanes' is not of the form name=value",
        ),
        (
            ["conformance", "fp", "--param", "lanes=2"],
            "--param is not accepted with the group 'fp'",
        ),
        (["conformance", "fp.add", "--count", "0"], "--count must be >= 1, got 0"),
        (
            ["sim", "matmul", "--dtype", "mxfp8_e5m2", "--rows", "16", "--cols", "16"],
            "--rows 16: the MX chain needs a multiple of 32 rows",
        ),
        (
            ["sim", "matmul", "--dtype", "mxfp4_e2m1fn", "--k", "48"],
            "--k 48 --m 128 --n 512: mx K=48 must be a multiple of 32 partitions",
        ),
        (
            ["sim", "matmul", "--dtype", "mxfp8_e4m3fn", "--m", "7"],
            "--k 128 --m 7 --n 512: mx M=7 must be a multiple of 2",
        ),
        (
            ["sim", "matmul", "--dtype", "mxfp8_e4m3fn", "--n", "513"],
            "--n 513: N=513 must be in 1..512 (mx with an FP32 result",
        ),
        (
            ["sim", "matmul", "--dtype", "mxfp8_e4m3fn", "--moving-dtype", "bf16"],
            "--moving-dtype 'bf16' is not an MX dtype; allowed: mxfp8_e4m3fn, mxfp8_e5m2",
        ),
        (
            ["sim", "matmul", "--dtype", "bf16", "--moving-dtype", "mxfp8_e5m2"],
            "--moving-dtype applies to the MX dtypes",
        ),
        (
            ["sim", "matmul", "--dtype", "mxfp8_e4m3fn", "--psum", "bf16"],
            "--psum and --rounding do not apply to the MX chain",
        ),
        (
            ["sim", "matmul", "--dtype", "mx", "--psum", "fp32", "--n", "1024"],
            "--k 128 --m 128 --n 1024: N=1024 must be in 1..512 (mx into fp32 PSUM)",
        ),
        (
            ["sim", "matmul", "--dtype", "bf16", "--psum", "bf16", "--n", "1024"],
            "--k 128 --m 128 --n 1024: N=1024 must be in 1..512 (bf16 into bf16 PSUM)",
        ),
        (
            ["verilog", "pe_array", "--param", "pe_modes=bf17"],
            "pe_modes 'bf17' is neither a mode family (all, bf16, fp8, fp32, mx) nor an engine",
        ),
        (
            ["verilog", "pe_array", "--param", "pe_modes=fp8"],
            "pe_modes='fp8' does not serve mode='bf16' (the conformance program's)",
        ),
        (
            [
                "verilog",
                "pe_array",
                "--param",
                "parallel_tiles=1",
                "--param",
                "background_transpose=1",
            ],
            "parallel_tiles=1 and background_transpose=1 cannot be combined",
        ),
        (
            ["bench", "--only", "te", "--pe-modes", "all,fp8"],
            "--pe-modes 'fp8' does not serve bf16, the mode of the measured matmul",
        ),
        (["bench", "--only", "pe", "--pe-modes", "x"], "--pe-modes: pe_modes 'x' is neither"),
        # seeds and stall probabilities are checked before anything is built
        (
            ["sim", "matmul", "--rows", "8", "--cols", "8", "--seed", "-1"],
            "--seed -1 must be in 0..4294967295 (an unsigned 32-bit seed)",
        ),
        (
            ["conformance", "fp.add", "--count", "10", "--seed", "-1"],
            "--seed -1 must be in 0..4294967295",
        ),
        (["conformance", "fp.add", "--seed", str(1 << 32)], "--seed 4294967296 must be in"),
        *[
            (
                ["conformance", "fp.add", "--stall", v],
                f"--stall {float(v)} must be a probability in [0, 1): the share of idle input",
            )
            for v in ("1.0", "1.5", "-0.5", "nan", "inf")
        ],
        # sizes: --k / --m default to --rows / --cols (the message shows what was taken)
        (
            ["sim", "matmul", "--rows", "8", "--cols", "8", "--n", "600"],
            "--k 8 --m 8 --n 600: N=600 must be in 1..512 (bf16 with an FP32 result)",
        ),
        (
            ["sim", "matmul", "--rows", "8", "--cols", "8", "--k", "0"],
            "--k 0 --m 8 --n 512: K=0 must be in 1..8 (rows of the tile)",
        ),
        (["sim", "matmul", "--rows", "200"], "--rows 200 must be in 2..128 (the sizes of the RTL"),
        (
            ["sim", "matmul", "--rows", "8", "--cols", "8", "--dtype", "fp8", "--format", "bf16"],
            "--format 'bf16' is not a stationary format of fp8; allowed: fp8_e4m3, fp8_e4m3fn",
        ),
        # the PSUM path: what a transpose writes, what --psum takes
        (
            ["sim", "matmul", "--rows", "8", "--cols", "8", "--psum", "bf16"]
            + ["--dtype", "transpose_bf16", "--rounding", "sr"],
            "--rounding sr applies to a BF16 accumulation (--psum bf16), not to a transpose: it "
            "writes raw 16-bit words (RAW16)",
        ),
        (
            ["sim", "matmul", "--rows", "8", "--cols", "8", "--psum", "fp32"]
            + ["--dtype", "transpose_bf16", "--k", "32"],
            "a transpose into PSUM moves one tile of K = --rows 8 partitions",
        ),
        (
            ["sim", "matmul", "--rows", "8", "--cols", "8", "--psum", "fp32", "--k", "8000"],
            "K=8000 is 1000 matmuls of 8 rows; at most 64 accumulate in one run",
        ),
        (
            ["sim", "matmul", "--rows", "8", "--cols", "8", "--psum", "fp32", "--m", "4"],
            "--k 8 --m 4 --n 512: M=4 must equal --cols 8 with --psum",
        ),
        (
            ["sim", "matmul", "--rows", "8", "--cols", "8", "--stationary", "S.npy"],
            "--stationary and --moving go together",
        ),
        # column bands: a cut of the columns the grid takes, runs that can be cut
        (["sim", "matmul", "--bands", "3"], "--bands 3: bands=3 must divide the 128 columns"),
        (
            ["sim", "matmul", "--bands", "2", "--psum", "fp32"],
            "--bands 2: the matmul path into PSUM (--psum) runs as one model",
        ),
        (
            ["sim", "matmul", "--bands", "2", "--sparse", "4:8"],
            "--bands 2: the sparse path takes moving words from up to three columns to the "
            "left, across a band edge; --bands 1 runs it",
        ),
        (
            ["sim", "matmul", "--pe-modes", "fp8"],
            "pe_array: parameter pe_modes='fp8' does not serve mode='bf16'",
        ),
        (
            [
                *("conformance", "pe_array", "--rows", "8", "--cols", "8"),
                *("--param", "sparse=1", "--param", "parallel_tiles=1"),
            ],
            # the rule that is broken, not one that holds (rows 8 is a multiple of 4)
            "parameters sparse=1 and parallel_tiles=1 cannot be combined",
        ),
        (
            ["timing", "matmul", "--rows", "300"],
            "--rows 300 must be in 1..255 (the instruction's 8-bit K, M and tile fields)",
        ),
    ],
)
def test_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_entry_point_exit_status():
    r = subprocess.run(
        [sys.executable, "-m", "ncrtl.cli", "verilog", "fp.nope"], capture_output=True, text=True
    )
    assert r.returncode == 2 and "unknown block" in r.stderr


@pytest.mark.sim
def test_conformance_run_writes_junit(tmp_path, capsys):
    junit = tmp_path / "c.xml"
    assert (
        main(["conformance", "fp.add", "--count", "500", "--seed", "3", "--junit", str(junit)]) == 0
    )
    out = capsys.readouterr().out
    assert "add.fp32" in out and "PASS" in out and "0 mismatches" in out
    suite = ElementTree.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "0"


@pytest.mark.sim
@pytest.mark.slow
def test_sim_matmul_mx_chain(capsys):
    """BF16 tiles through the RTL QuantizeMX, then the MX matmul on a 32 x 32 RTL engine: both
    bit for bit with the golden chain, and the error against float64 printed."""
    argv = ["sim", "matmul", "--rows", "32", "--cols", "32", "--k", "32", "--m", "8", "--n", "16"]
    assert main(argv + ["--dtype", "mxfp8_e4m3fn", "--moving-dtype", "mxfp4_e2m1fn"]) == 0
    out = capsys.readouterr().out
    assert "quantize_mx.moving.data: 2049 compared, 0 mismatches" in out
    assert "RTL result vs the golden chain (quantize_mx, matmul_mx): 0 mismatching words" in out
    err = re.search(r"float64 matmul of the BF16 inputs: ([0-9.e+-]+) \(Frobenius", out)
    assert err and 0.01 < float(err.group(1)) < 0.5, out
    assert "result MATCHES" in out


def test_timing_matmul(tmp_path, capsys):
    """``ncrtl timing matmul``: the documented steady-state cost (without the warm-up
    throttle, which these short runs never leave), parallel tiles, a trace that Perfetto reads
    (a slice per instruction on its tile's LS or MM track)."""
    import json

    argv = ["timing", "matmul", "--k", "128", "--m", "32", "--n", "16", "--repeat", "32"]
    assert main([*argv, "--no-throttle"]) == 0
    out = capsys.readouterr().out
    assert "steady state: 32.0 cycles per matmul" in out and "total: " in out
    args = ["timing", "matmul", "--k", "128", "--m", "32", "--n", "16", "--repeat", "32"]
    assert main([*args, "--rules", "one-chain"]) == 0
    assert "steady state: 64.0 cycles per matmul" in capsys.readouterr().out
    assert main([*args, "--rules", "hdl"]) == 0
    assert "steady state: 32.0 cycles per matmul" in capsys.readouterr().out
    trace = tmp_path / "t.json"
    argv = ["timing", "matmul", "--k", "32", "--tile-size", "32,128", "--tiles", "4"]
    assert main([*argv, "--repeat", "8", "--no-throttle", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "utilization: 0.9" in out and "TFLOPS at 2.4 GHz" in out
    events = json.loads(trace.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 16 and len({e["pid"] for e in slices}) == 4
    assert {e["tid"] for e in slices} == {0, 1}
    # the RTL with parallel tiles runs the 4 row tiles side by side; the default RTL does not
    tiled = [*argv, "--m", "128", "--n", "512", "--repeat", "32"]
    assert main([*tiled, "--rules", "hdl-parallel"]) == 0
    assert "steady state: 128.0 cycles per matmul" in capsys.readouterr().out
    assert main([*tiled, "--rules", "hdl"]) == 0
    assert "steady state: 512.0 cycles per matmul" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--dtype", "bf17"], "--dtype 'bf17' is not allowed; allowed: fp32"),
        (["--tile-size", "64"], "--tile-size '64' must be ROWS,COLS"),
        (["--tile-size", "64,64"], "TILE: tile_size (64, 64) tiles rows and columns at once"),
        (["--tile-size", "32,128", "--tiles", "5"], "tiles=5 must be in 1..4"),
        (["--k", "200"], "K_RANGE: K=200 must be in 1..128"),
        (["--repeat", "0"], "repeat=0 must be in 1..1000000"),
        (["--repeat", "1000001"], "repeat=1000001 must be in 1..1000000: the schedule keeps"),
        (["--rows", "300"], "--rows 300 must be in 1..255"),
        (["--dtype", "mx", "--n", "1024"], "N=1024 must be in 1..512 (mx with an FP32 result"),
        (["--n", "1024", "--bf16-out"], "N=1024 must be in 1..512 (bf16 with a BF16 result)"),
        (["--tile-unit", "0"], "--tile-unit 0 must be one of 1, 2, 4, 8, 16, 32"),
        (
            ["--trace", "/proc/ncrtl/t.json"],
            "--trace /proc/ncrtl/t.json: cannot write in /proc:",
        ),
    ],
)
def test_timing_matmul_bad_input(argv, message, capsys):
    assert main(["timing", "matmul", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# -- paths, matrices, help, progress: what a user meets ------------------------------------------


def _error(argv, capsys):
    """Run ``argv``; the exit status must be 2 and stderr one line: return it."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_unwritable_paths_are_one_line(tmp_path, capsys):
    """Every path a command writes is checked before the work starts, by what the write would
    do (a file created and removed where it goes; root may write anywhere by its permission
    bits, not in /proc): a file where a folder is wanted, a folder where a file is wanted, a
    file in the way, a folder that takes no files."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert "-o " + str(a_file) + " is a file; give a folder" in _error(
        ["verilog", "fp.add", "-o", str(a_file)], capsys
    )
    err = _error(["verilog", "fp.add", "-o", str(a_file / "sub")], capsys)
    assert f"{a_file} is a file, not a folder" in err
    err = _error(["sim", "matmul", "--rows", "8", "--cols", "8", "--out", str(tmp_path)], capsys)
    assert f"--out {tmp_path} is a folder; give a file" in err
    err = _error(["conformance", "fp.add", "--junit", str(a_file / "c.xml")], capsys)
    assert f"--junit {a_file / 'c.xml'}: {a_file} is a file, not a folder" in err
    for argv, flag, path in (
        (["sim", "matmul", "--rows", "8", "--cols", "8", "--out"], "--out", "/proc/x.npy"),
        (["conformance", "dma", "--junit"], "--junit", "/proc/j.xml"),
        (["verilog", "fp.add", "-o"], "-o", "/proc/ncrtl/x"),
        (["timing", "matmul", "--trace"], "--trace", "/proc/t.json"),
    ):
        err = _error([*argv, path], capsys)
        assert f"{flag} {path}: cannot write in /proc: " in err, err
    assert not (tmp_path / "build").exists()
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if not os.access(locked, os.W_OK):  # root may write anywhere
        err = _error(["verilog", "fp.add", "-o", str(locked)], capsys)
        assert f"cannot write in {locked}" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["conformance", "pe_array", "--rows", "8", "--cols", "8", "--mode", "mx"],
            "pe_array: mode=mx takes K in multiples of 32 partitions at tile_unit=32, more "
            "than rows=8: none of its instructions fits (tile_unit=8 or less does)",
        ),
        (
            ["conformance", "sendrecv", "--param", "partitions=1", "--param", "word_bytes=4"]
            + ["--param", "partition_bytes=4"],
            "sendrecv: the conformance program needs room for one pair: partition_bytes=4 "
            "must be at least 64",
        ),
        (
            ["conformance", "sendrecv", "--param", "pipes=1", "--param", "depth=1"],
            "needs pipes x depth = 1 to be at least 2",
        ),
        (
            ["conformance", "dma", "--param", f"hbm_bytes={1 << 40}"],
            "dma: parameter hbm_bytes=1099511627776 is above the maximum 268435456",
        ),
        (
            ["conformance", "dma_queues", "--param", "partitions=2"],
            "dma_queues: the conformance program needs partitions >= 8 (got 2)",
        ),
        (
            ["verilog", "fp.add", "--param", "lanes=2", "--param", "lanes=4"],
            "--param lanes=4: lanes is already given by --param lanes=2; give each parameter once",
        ),
        (
            ["lint", "pe_array", "--rows", "4", "--param", "rows=8"],
            "--param rows=8: rows is already given by --rows 4",
        ),
        (["bench", "--count", "0"], "--count 0 must be in 1..100000000"),
        (["bench", "--count", "-1"], "--count -1 must be in 1..100000000"),
        (["bench", "--te-size", "1"], "--te-size 1 must be 0 (skip) or in 2..128"),
    ],
    ids=[
        "mx-under-its-granule",
        "sendrecv-no-room",
        "sendrecv-no-pipe-slot",
        "hbm-too-big",
        "dma-program-partitions",
        "param-twice",
        "param-and-shortcut",
        "bench-count-0",
        "bench-count-negative",
        "bench-te-size",
    ],
)
def test_combinations_that_cannot_run_are_refused_before_any_build(
    argv, message, capsys, monkeypatch, tmp_path
):
    """A parameter set the design or its conformance program can never run, a duplicated
    parameter, a bench that would never end: one line, exit 2, before anything is generated or
    built (``NCRTL_NO_BUILD`` makes any build attempt fail the test instead)."""
    monkeypatch.setenv("NCRTL_NO_BUILD", "1")
    monkeypatch.chdir(tmp_path)
    err = _error(argv, capsys)
    assert message in err, err
    assert not list(tmp_path.iterdir())


def test_timing_mx_with_a_bf16_result_takes_n_1024(capsys):
    """What ``ncrtl timing matmul --help`` promises: MX matmuls into a BF16 PSUM tile take N up
    to 1024, one beat a cycle (at full rate: without the warm-up throttle)."""
    argv = ["timing", "matmul", "--dtype", "mx", "--n", "1024", "--bf16-out", "--repeat", "4"]
    argv.append("--no-throttle")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "N=1024" in out and "steady state: 1024.0 cycles per matmul" in out


def test_long_steps_say_what_they_do(capsys, monkeypatch):
    """Every step that can take more than two seconds says so on stderr (here every step, the
    threshold at 0): lint's generation, Verilator and Yosys runs, the timing model's run with
    its instructions done."""
    from ncrtl.testbench import lint, progress

    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    ok = lint.CheckResult(True, "", "stub", "fp_add")
    monkeypatch.setattr(lint, "lint_verilog", lambda text, top, **kw: ok)
    monkeypatch.setattr(lint, "synth_check", lambda text, top, **kw: ok)
    assert main(["lint", "fp.add"]) == 0
    err = capsys.readouterr().err
    for step in ("Verilog generation of", "Verilator lint of", "Yosys synthesis of"):
        assert f"{step} fp_add ..." in err and f"{step} fp_add: done in" in err, err
    assert main(["timing", "matmul", "--repeat", "3"]) == 0
    err = capsys.readouterr().err
    assert "timing model: 6 instructions ..." in err and "timing model: 6 instructions: done" in err


def test_missing_output_folders_are_created_for_every_output(tmp_path, capsys):
    """One rule for every output path: the folders missing above it are created when it is
    written (not before: a refused run leaves none)."""
    trace = tmp_path / "a" / "b" / "t.json"
    assert main(["timing", "matmul", "--trace", str(trace)]) == 0
    assert json.loads(trace.read_text())
    out = tmp_path / "c" / "d"
    assert main(["verilog", "fp.add", "-o", str(out)]) == 0
    assert list(out.glob("*.v"))
    assert main(["timing", "matmul", "--k", "200", "--trace", str(tmp_path / "e" / "t.json")]) == 2
    assert not (tmp_path / "e").exists()
    capsys.readouterr()


def test_a_write_that_fails_at_the_end_is_one_line_and_keeps_the_results(
    tmp_path, capsys, monkeypatch
):
    """The output is checked before the work; should the write still fail at the end (here
    the check is skipped so that it does), the run says so in one line, exit 2, and what it
    printed stays printed."""
    import ncrtl.cli.timing as cli_timing
    from ncrtl.testbench.outputs import OutputError, check_output, write_output

    monkeypatch.setattr(cli_timing, "check_output", lambda path, flag, **kw: path)
    assert main(["timing", "matmul", "--trace", "/proc/t.json"]) == 2
    cap = capsys.readouterr()
    assert "cycles" in cap.out
    assert cap.err.startswith("ncrtl: error: cannot write --trace /proc/t.json: ")
    assert cap.err.count("\n") == 1
    with pytest.raises(OutputError, match="cannot write --out .*: No space left on device"):

        def full(path):
            raise OSError(28, "No space left on device")

        write_output(tmp_path / "r.npy", "--out", full)
    with pytest.raises(OutputError, match="--out: an empty path"):
        check_output("", "--out")
    existing = tmp_path / "r.npy"
    existing.write_bytes(b"keep")
    check_output(existing, "--out")  # an existing file is checked without being changed
    assert existing.read_bytes() == b"keep"
    assert not list(tmp_path.glob(".ncrtl-probe-*"))


def _save(path, arr):
    np.save(path, arr)
    return str(path)


def test_matrix_files_that_are_not_arrays_say_what_they_are(tmp_path, capsys):
    """A text file named .npy, an .npz archive, a .npy of Python objects, a folder, a missing
    file: one line saying what the file is, never numpy's advice to load pickles."""
    base = ["sim", "matmul", "--rows", "8", "--cols", "8", "--moving"]
    x8 = _save(tmp_path / "x8.npy", np.ones((8, 16)))
    text = tmp_path / "text.npy"
    text.write_text("1 2 3\n")
    npz = tmp_path / "two.npy"
    with open(npz, "wb") as f:
        np.savez(f, a=np.ones(2))
    objects = tmp_path / "obj.npy"
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    cases = [
        (text, "not a .npy file (it does not begin with the .npy header"),
        (npz, "an .npz archive; give one array saved with np.save"),
        (objects, "a .npy of Python objects; give an array of numbers"),
        (tmp_path, "a folder, not a .npy file"),
        (tmp_path / "none.npy", "no such file"),
    ]
    for path, message in cases:
        err = _error([*base, x8, "--stationary", str(path)], capsys)
        assert f"--stationary {path}: {message}" in err, err
        assert "allow_pickle" not in err


def test_own_matrices_that_do_not_fit_are_one_line(tmp_path, capsys):
    """Matrices are checked before anything is built: values the format cannot hold (the first
    one named), shapes, K of both sides, --k against the shapes, bit patterns of the wrong
    width, a transpose's selection matrix, the mx mode's scales."""
    s8 = _save(tmp_path / "s8.npy", np.ones((8, 8), ml_dtypes.bfloat16))
    x8 = _save(tmp_path / "x8.npy", np.ones((8, 16)))
    base = ["sim", "matmul", "--rows", "8", "--cols", "8"]
    bad = np.ones((8, 16))
    bad[2, 5] = 0.1
    err = _error(base + ["--stationary", s8, "--moving", _save(tmp_path / "b.npy", bad)], capsys)
    assert (
        "b.npy: element [2, 5] = 0.1 is not exactly representable in bf16 (the nearest bf16 "
        "value is 0.10009765625)"
    ) in err
    err = _error(base + ["--dtype", "fp8", "--stationary", s8, "--moving", x8], capsys)
    assert "dtype |V2 holds 2-byte bit patterns; fp8_e4m3 takes 1-byte ones" in err
    s8f = _save(tmp_path / "s8f.npy", np.ones((8, 8)))
    big = _save(tmp_path / "big.npy", np.full((8, 16), 1000.0))
    err = _error(base + ["--dtype", "fp8", "--stationary", s8f, "--moving", big], capsys)
    assert "element [0, 0] = 1000.0 is not exactly representable in fp8_e4m3 (outside" in err
    inf = _save(tmp_path / "inf.npy", np.full((8, 16), np.inf))
    argv = base + ["--dtype", "fp8", "--format", "fp8_e4m3fn"]
    err = _error(argv + ["--stationary", s8f, "--moving", inf], capsys)
    assert "(fp8_e4m3fn has no infinity)" in err
    x7 = _save(tmp_path / "x7.npy", np.ones((7, 16)))
    err = _error(base + ["--stationary", s8, "--moving", x7], capsys)
    assert "K differs (8 and 7 rows)" in err
    err = _error(base + ["--stationary", s8, "--moving", x8, "--k", "4"], capsys)
    assert "--k 4 does not match the matrices' K=8; leave --k out" in err
    err = _error(base + ["--dtype", "double_row", "--stationary", s8, "--moving", x8], capsys)
    assert "shapes [8, 8] and [8, 16]; double_row takes [K, 2, M] and [K, 2, N]" in err
    u32 = _save(tmp_path / "u32.npy", np.ones((8, 16), np.uint32))
    err = _error(base + ["--stationary", s8, "--moving", u32], capsys)
    assert "dtype uint32 holds 4-byte bit patterns; bf16 takes 2-byte ones" in err
    two = _save(tmp_path / "two.npy", 2 * np.eye(8, 16))
    err = _error(base + ["--dtype", "transpose_bf16", "--stationary", s8, "--moving", two], capsys)
    assert "moving[0, 0] = 2.0 is neither 0 nor 1 (moving must be a selection matrix)" in err
    err = _error(base + ["--dtype", "mx", "--stationary", s8, "--moving", x8], capsys)
    assert "the mx mode takes MX codes and block scales" in err
    err = _error(base + ["--stationary", str(tmp_path / "none.npy"), "--moving", x8], capsys)
    assert "none.npy: no such file" in err
    x9 = _save(tmp_path / "x9.npy", np.ones((9, 16)))
    s9 = _save(tmp_path / "s9.npy", np.ones((9, 8)))
    err = _error(base + ["--stationary", s9, "--moving", x9], capsys)
    assert "(K=9 M=8 N=16): K=9 must be in 1..8 (rows of the tile)" in err
    err = _error(base + ["--psum", "fp32", "--stationary", s9, "--moving", x9], capsys)
    assert "K=9 must be a positive multiple of --rows 8 with --psum" in err


def test_operand_files_read_numbers_dtypes_and_bit_patterns(tmp_path):
    """What np.save writes for an ml_dtypes array (raw |V2 bytes) is read as the format's bit
    patterns; numbers keep their value and sign (-0.0, NaN, Inf), integers too."""
    from ncrtl.testbench.tensor_engine.operands import OperandError, load_operand, operand_codes

    vals = np.array([[1.0, -0.0], [np.inf, -2.5]])
    want = np.array([[0x3F80, 0x8000], [0x7F80, 0xC020]], np.uint16)
    path = _save(tmp_path / "v.npy", vals.astype(ml_dtypes.bfloat16))
    assert np.load(path).dtype.kind == "V"
    assert (load_operand(path, "bf16") == want).all()
    assert (operand_codes(vals, "bf16") == want).all()
    assert (operand_codes(vals.astype(np.float32), "bf16") == want).all()
    assert (operand_codes(want, "bf16") == want).all()
    assert np.isnan(operand_codes(np.array([np.nan]), "bf16").view(ml_dtypes.bfloat16)).all()
    assert operand_codes(np.array([1, 0, -2]), "fp8_e4m3").tolist() == [0x38, 0, 0xC0]
    assert operand_codes(np.float32([1.5]), "tf32").tolist() == [0x3FC00000]
    with pytest.raises(OperandError, match="is NaN, which fp4_e2m1fn cannot encode"):
        operand_codes(np.array([np.nan]), "fp4_e2m1fn")
    with pytest.raises(OperandError, match=r"element \[1\] = 0x10 is not a fp4_e2m1fn bit"):
        operand_codes(np.array([1, 0x10], np.uint8), "fp4_e2m1fn")


def test_help_lists_dtypes_limits_and_blocks(capsys):
    """``sim matmul --help`` lists the operations with their formats and limits, the MX chain,
    the PSUM path and the matrix files; ``conformance --help`` the blocks and groups; every
    argument has help naming its default."""
    with pytest.raises(SystemExit):
        main(["sim", "--help"])
    out = capsys.readouterr().out
    for words in (
        "double_row     formats fp8_e4m3, fp8_e4m3fn, fp8_e5m2",
        "K a multiple of 32",
        "(1024 into BF16 PSUM)",
        "transpose_bf16",
        "MX chain: mxfp8_e4m3fn",
        "at most 64",
        "--values {normal,special}",
        "(default: --rows",
        "0..4294967295 (default 1)",
        "raw bytes (|V1, |V2",
    ):
        assert words in " ".join(out.split()) or words in out, words
    with pytest.raises(SystemExit):
        main(["conformance", "--help"])
    out = capsys.readouterr().out
    assert "quantize_mx" in out and "groups:" in out and "in [0, 1) (default 0.2)" in out
    parser = __import__("ncrtl.cli", fromlist=["build_parser"]).build_parser()
    for action in parser._subparsers._group_actions[0].choices.values():
        for a in action._actions:
            if a.dest != "help":
                assert a.help, f"{action.prog} {a.dest} has no help"


def test_timing_sizes_default_to_the_tile(capsys):
    """``ncrtl timing matmul`` takes K and M from the tile (the array without --tile-size)."""
    assert main(["timing", "matmul", "--rows", "64", "--cols", "32", "--n", "64"]) == 0
    assert "K=64 M=32 N=64 on 1 tile(s) of (64, 32)" in capsys.readouterr().out
    assert main(["timing", "matmul", "--tile-size", "32,128", "--n", "64"]) == 0
    assert "K=32 M=128 N=64" in capsys.readouterr().out


def test_conformance_says_what_each_configuration_runs(monkeypatch, capsys):
    """The header says what each configuration runs (an exhaustive set and a fixed program say
    that --count does not apply); each configuration's rows come as soon as it finishes."""
    from ncrtl import blocks
    from ncrtl.testbench import conformance

    order = []

    def fake_run_block(block, params, **kw):
        order.append(block.label(params))
        units = [{"name": "u", "vectors": 3, "mismatches": 0}]
        return conformance.BlockResult(block.label(params), True, units, 0.1)

    monkeypatch.setattr(conformance, "run_block", fake_run_block)
    mul = blocks.get("fp.mul")
    core = blocks.get("core")
    runs = [
        (mul, mul.resolve({"fmt_a": "fp8_e4m3", "fmt_b": "fp8_e5m2"})),
        (mul, mul.resolve({"fmt_a": "bf16", "fmt_b": "bf16"})),
        (core, core.resolve({"rows": "8", "cols": "8"})),
    ]
    assert conformance.run_conformance(runs, count=77, seed=3, jobs=1) == 0
    out = capsys.readouterr().out
    assert "conformance: 3 configuration(s), seed 3, stall 0.2, --count 77" in out
    assert "every code pair, 65,536 vectors (exhaustive: --count does not apply)" in out
    assert "the corner cross product and 77 random pairs" in out
    assert "4 x (LS + MM, N = 64) accumulated in one PSUM group" in out
    assert "--count does not apply)" in out.split("\n")[3]
    assert "random vectors each" not in out and out.count("PASS") == 3


def test_a_big_uncached_build_is_announced(monkeypatch, capsys):
    """Before an uncached build of a big engine, sim says that it takes minutes and GiB."""
    from ncrtl import blocks
    from ncrtl.cli import sim
    from ncrtl.testbench import conformance

    monkeypatch.setattr(conformance, "find_build", lambda *a, **k: None)
    block = blocks.get("pe_array")
    sim._announce(block, block.resolve({}))
    err = capsys.readouterr().err
    assert "the 128 x 128 pe_array build is not cached yet" in err and "11 GiB" in err
    sim._announce(block, block.resolve({"rows": "8", "cols": "8"}))
    assert capsys.readouterr().err == ""


def test_a_bare_sim_says_what_it_is_about_to_build(monkeypatch, capsys):
    """``ncrtl sim matmul`` with no arguments is a 128 x 128 engine: the narrowest PE serving
    bf16, as column bands on the machine's cores (one model where asked or where bands do not
    apply, with the reason); when the build is not cached the command says so (minutes, GiB)
    before it starts; K and M follow the array."""
    from ncrtl.testbench import conformance
    from ncrtl.testbench.tensor_engine import loop_run
    from ncrtl.testbench.tensor_engine import simulate as te_sim

    asked = []

    def fake_run(block, params, *a, **k):
        asked.append(params)
        return conformance.BlockResult("x", False, message="no"), None

    monkeypatch.setattr(conformance, "find_build", lambda *a, **k: None)
    monkeypatch.setattr(loop_run, "cached_bands", lambda *a, **k: None)
    monkeypatch.setattr(loop_run, "available_cores", lambda: 2)
    monkeypatch.setattr(loop_run, "run_on_bands", fake_run)
    monkeypatch.setattr(te_sim, "run_block", lambda *a, **k: fake_run(*a, **k)[0])
    assert main(["sim", "matmul"]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines()[:3] == [
        "PE build pe_modes=bf16: the narrowest build serving bf16 (the family: bf16, fp16); "
        "--pe-modes names another (all: the reference design)",
        "simulated as 2 column bands on 2 thread(s): 2 bands of 64 columns for this machine's "
        "2 cores; --bands 1 runs the one model",
        "note: the 128 x 128 pe_array build is not cached yet: it is generated and built first "
        "(the 128 x 128 engine as column bands took 1.5 to 2 minutes and 1.5 GiB (bf16 family) "
        "to 2 to 2.5 minutes (all modes) on a 2-core machine); later runs reuse it. --rows 8 "
        "--cols 8 builds in about a minute.",
    ]
    assert "matmul bf16 K=128 M=128 N=512 on a 128x128 array" in captured.out
    assert asked[-1]["pe_modes"] == "bf16"
    # one model where asked, or where bands do not apply: the all-mode build's figures
    assert main(["sim", "matmul", "--bands", "1", "--pe-modes", "all"]) == 1
    err = capsys.readouterr().err
    assert "simulated as one model: as --bands 1 asks" in err
    assert "4 to 5 minutes" in err and "11 GiB" in err
    assert main(["sim", "matmul", "--waves"]) == 1
    assert "simulated as one model: waves are recorded from the one model" in (
        capsys.readouterr().err
    )
    monkeypatch.setattr(loop_run, "available_cores", lambda: 1)
    assert main(["sim", "matmul"]) == 1
    assert "simulated as one model: this machine gives the process one core" in (
        capsys.readouterr().err
    )


def test_progress_steps_say_what_they_do():
    """A long step says what it does, its elapsed time and its end; a short one nothing."""
    import io
    import time

    from ncrtl.testbench import progress

    out = io.StringIO()
    with progress.step("quick", stream=out):
        pass
    assert out.getvalue() == ""
    with progress.step(
        "Verilator build of x", stream=out, after=0.0, done="built in {seconds:.0f} s"
    ):
        time.sleep(0.05)
    assert out.getvalue().splitlines() == [
        "Verilator build of x ...",
        "Verilator build of x: built in 0 s",
    ]


def test_simulation_builds_use_the_lint_waivers():
    """A simulation build reads the waivers ncrtl lint uses (no warning lint would not report),
    and they are part of the cache key."""
    from ncrtl.hdl.verilog import LINT_CONFIG
    from ncrtl.testbench import sim

    plan = sim._plan("module t(input a); endmodule\n", "t", waves=False)
    assert str(LINT_CONFIG) in plan.args
    assert sim._waivers()[1] == LINT_CONFIG.read_text()


def test_bench_keeps_the_build_logs(monkeypatch, tmp_path):
    """The bench's fresh builds are removed after the run, their build logs kept where the
    build printed them."""
    from ncrtl.testbench import bench

    monkeypatch.setenv("NCRTL_BUILD_DIR", str(tmp_path / "sim"))
    with bench._fresh_build_dir() as fresh:
        d = Path(fresh) / "psum_16x8x2048-0123"
        (d / "src").mkdir(parents=True)
        (d / "build.log").write_text("log")
        (d / "src" / "psum.v").write_text("v")
        (d / "psum_16x8x2048").write_text("binary")
    assert Path(fresh).parent == tmp_path / "bench"
    assert [p.relative_to(fresh).as_posix() for p in sorted(Path(fresh).rglob("*"))] == [
        "psum_16x8x2048-0123",
        "psum_16x8x2048-0123/build.log",
    ]
    assert os.environ["NCRTL_BUILD_DIR"] == str(tmp_path / "sim")


def test_sim_headers_say_what_runs(monkeypatch, capsys):
    """The figures' first line says what ran: double_row's K as elements and partitions with and
    without --psum, a transpose into PSUM as RAW16 overwrites (not an accumulation)."""
    from ncrtl.testbench import conformance
    from ncrtl.testbench.core import simulate as core_sim
    from ncrtl.testbench.tensor_engine import simulate as te_sim

    def fake_run_block(block, params, **kw):
        return conformance.BlockResult("x", False, message="not run")

    monkeypatch.setattr(te_sim, "run_block", fake_run_block)
    monkeypatch.setattr(core_sim, "run_block", fake_run_block)
    base = ["sim", "matmul", "--rows", "8", "--cols", "8", "--n", "16"]
    assert main(base + ["--dtype", "double_row"]) == 1
    assert "matmul double_row K=16 (8 partitions x 2) M=8 N=16" in capsys.readouterr().out
    assert main(base + ["--dtype", "double_row", "--psum", "fp32", "--k", "16"]) == 1
    out = capsys.readouterr().out
    assert "matmul double_row K=32 (16 partitions x 2) M=8 N=16" in out
    assert "2 matmul(s) of K=16 (8 partitions x 2) accumulated in one fp32 PSUM group" in out
    assert main(base + ["--dtype", "transpose_bf16", "--psum", "bf16"]) == 1
    out = capsys.readouterr().out
    assert "written to PSUM as raw 16-bit words (RAW16, one overwrite" in out
    assert "accumulated" not in out
    assert main(base + ["--values", "special", "--dtype", "fp8", "--format", "fp8_e5m2"]) == 1
    assert "fp8_e5m2 x fp8_e5m2, random special values" in capsys.readouterr().out


@pytest.mark.sim
def test_sim_matmul_on_own_matrices(tmp_path, capsys):
    """Your matrices through the RTL (a 4 x 4 engine): float64 numbers and raw bf16 bytes in,
    the float32 result out, bit for bit the golden's; a transpose and FP8 formats; random
    special values with the largest seed."""
    from ncrtl.model.tensor_engine.matmul import matmul

    rng = np.random.default_rng(5)
    s = rng.standard_normal((4, 4)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((4, 6)).astype(ml_dtypes.bfloat16)
    s[0, 0], x[1, 2] = -0.0, np.inf
    sp, xp, out = _save(tmp_path / "s.npy", s), tmp_path / "x.npy", tmp_path / "r.out"
    np.save(xp, x.astype(np.float64))
    base = ["sim", "matmul", "--rows", "4", "--cols", "4"]
    assert main(base + ["--stationary", sp, "--moving", str(xp), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "matmul bf16 K=4 M=4 N=6 on a 4x4 array, bf16 x bf16, --stationary" in text
    assert "result MATCHES the golden model" in text and f"result written to {out}" in text
    got = np.load(out)
    want = matmul(s, x, rows=4, cols=4)
    assert got.dtype == np.float32 and got.shape == (4, 6)
    assert (got.view(np.uint32) == want.view(np.uint32)).all()

    sel = np.zeros((4, 5))
    sel[[3, 0, 1], [0, 2, 4]] = 1
    selp = _save(tmp_path / "sel.npy", sel)
    argv = base + ["--dtype", "transpose_bf16", "--stationary", sp, "--moving", selp]
    assert main(argv + ["--out", str(out)]) == 0
    assert "transpose transpose_bf16 K=4 M=4 N=5" in capsys.readouterr().out
    moved = np.load(out)
    assert (moved[:, 0].view(np.uint32) == s[3].astype(np.float32).view(np.uint32)).all()
    assert (moved[:, 1] == 0).all()

    f8 = _save(tmp_path / "f8.npy", np.array([[0.5, -1.0, 448.0, 0.0]] * 4))
    argv = base + ["--dtype", "fp8", "--format", "fp8_e4m3fn", "--moving-format", "fp8_e5m2"]
    assert main(argv + ["--stationary", f8, "--moving", str(xp)]) == 2  # N(0, 1) values
    err = capsys.readouterr().err
    assert "is not exactly representable in fp8_e5m2" in err
    x8 = _save(tmp_path / "x8.npy", np.array([[1.0, -2.0, 0.25, 57344.0, -0.0, 3.0]] * 4))
    assert main(argv + ["--stationary", f8, "--moving", x8]) == 0
    assert "fp8_e4m3fn x fp8_e5m2" in capsys.readouterr().out

    argv = base + ["--values", "special", "--seed", "4294967295", "--n", "32"]
    assert main(argv) == 0
    assert "random special values" in capsys.readouterr().out


@pytest.mark.sim
def test_sim_matmul_psum_on_own_matrices(tmp_path, capsys):
    """Your matrices through the matmul path (4 x 4 engine, PSUM): K = 8 as two matmuls
    accumulated in a BF16 group, the bank's result out as float32, bit for bit the golden's."""
    from ncrtl.model.core import chunk_flags, nc_matmul
    from ncrtl.model.psum import Dtype, Geometry, Psum, Rounding, Write

    rng = np.random.default_rng(7)
    s = rng.standard_normal((8, 4)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((8, 6)).astype(ml_dtypes.bfloat16)
    sp, xp, out = _save(tmp_path / "s.npy", s), _save(tmp_path / "x.npy", x), tmp_path / "r.npy"
    argv = ["sim", "matmul", "--rows", "4", "--cols", "4", "--psum", "bf16"]
    assert main(argv + ["--stationary", sp, "--moving", xp, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 matmul(s) of K=4 accumulated in one bf16 rne PSUM group" in text
    assert "accumulated result MATCHES the golden model" in text
    ps = Psum(Geometry(4, 8, 2048))
    for i in range(2):
        w = Write(0, 0, 6, Dtype.BF16, Rounding.RNE, chunk_flags(i, 2))
        nc_matmul(ps, w, s[4 * i : 4 * i + 4], x[4 * i : 4 * i + 4], rows=4)
    want = ps.read(0, 0, 6, Dtype.BF16).astype(np.float32)
    assert (np.load(out).view(np.uint32) == want.view(np.uint32)).all()


def test_timing_matmul_sparse(tmp_path, capsys):
    """``ncrtl timing matmul --sparse 4:16``: the pattern and the logical K in the header,
    dense-equivalent utilization and TFLOPS against the sparse peak, and the dense matmuls of
    the same logical K run through the same model (4 x the cycles per output; without the
    warm-up throttle); --trace still writes a slice per instruction."""
    trace = tmp_path / "t.json"
    argv = ["timing", "matmul", "--sparse", "4:16", "--n", "512", "--repeat", "64", "--no-throttle"]
    assert main([*argv, "--trace", str(trace)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "64 x nc_matmul_sparse 4:16 bf16 K=128 (logical K=512) M=128 N=512 on 1 tile(s) of "
        "(128, 128), 128 x 128 array, documented rules"
    )
    assert "total: 33058 cycles" in lines
    assert "steady state: 512.0 cycles per matmul" in lines
    util = next(line for line in lines if line.startswith("utilization: "))
    assert util.startswith("utilization: 4.000 (first MM to the last MM's end)")
    tflops = next(line for line in lines if line.startswith("TFLOPS at 2.4 GHz: "))
    assert tflops.startswith("TFLOPS at 2.4 GHz: 314.6 (first MM to the last MM's end)")
    assert tflops.endswith("peak 314.6 (4:16 dense-equivalent; dense 78.6)")
    dense = next(line for line in lines if line.startswith("dense, same logical K=512: "))
    assert dense == (
        "dense, same logical K=512: 4 x K=128 nc_matmul bf16 per output, 256 in all: 131362 "
        "cycles (3.97 x the sparse run's); steady state 2048.0 cycles per output (4.00 x the "
        "sparse 512.0)"
    )
    events = json.loads(trace.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 128 and all(e["args"]["sparse"] == 4 for e in slices)
    # a compressed K below the array's rows: the dense matmuls of its logical K fill more rows
    assert main(["timing", "matmul", "--sparse", "4:8", "--k", "32", "--repeat", "16"]) == 0
    out = capsys.readouterr().out
    assert "K=32 (logical K=64)" in out and "dense, same logical K=64: 1 x K=64 " in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["--sparse", "4:7"],
            "--sparse '4:7' is not an M:N pattern of the Tensor Engine; allowed: 4:8, 4:12, 4:16",
        ),
        (["--sparse", "2:4"], "--sparse '2:4' is not an M:N pattern"),
        (["--sparse", "4:16", "--dtype", "fp32"], "SPARSE: mode fp32 cannot run a sparse matmul"),
        (["--sparse", "4:16", "--tile-size", "32,128"], "MODE_COMBO: a sparse matmul cannot"),
        (["--sparse", "4:16", "--dtype", "transpose_bf16"], "MODE_COMBO: a sparse matmul"),
        (["--sparse", "4:16", "--k", "6"], "K_RANGE: sparse K=6 must be a multiple of 4"),
    ],
)
def test_timing_matmul_sparse_bad_input(argv, message, capsys):
    """A bad --sparse pattern is a usage error naming it and the patterns; the model's sparse
    rules come back as one line, exit status 2."""
    assert main(["timing", "matmul", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--sparse", "4:7"], "--sparse '4:7' is not an M:N pattern of the Tensor Engine; allowed"),
        (["--sparse", "4:16", "--dtype", "fp32"], "mode fp32 cannot run a sparse matmul; sparse"),
        (["--sparse", "4:8", "--dtype", "mxfp8_e4m3fn"], "mode mx cannot run a sparse matmul"),
        (["--sparse", "4:8", "--dtype", "transpose_bf16"], "cannot be combined with tiling or"),
        (["--sparse", "4:12", "--k", "6"], "sparse K=6 must be a multiple of 4"),
        (["--sparse", "4:12", "--rows", "6"], "parameter sparse=1 needs rows a multiple of 4"),
        (["--sparse", "4:16", "--psum", "fp32"], "--psum / --rounding do not apply with --sparse"),
        (["--mask", "m.npy"], "--mask / --tags describe a sparse stationary: they go with --spar"),
        (["--sparse", "4:8", "--tags", "t.npy"], "--mask / --tags go with --stationary S.npy and"),
    ],
    ids=["pattern", "fp32", "mx", "transpose", "k", "rows", "psum", "mask-dense", "tags-random"],
)
def test_sim_sparse_bad_input(argv, message, capsys, monkeypatch, tmp_path):
    """``ncrtl sim matmul --sparse``: a bad pattern, a mode without sparse matmuls, sizes the
    sparse rules refuse, an engine that cannot have the sparse path, flags that do not go with
    it: one line (the model's rule), exit status 2, before anything is built or written."""
    monkeypatch.setenv("NCRTL_NO_BUILD", "1")
    monkeypatch.chdir(tmp_path)
    base = ["sim", "matmul", "--rows", "8", "--cols", "8", "--out", "o/r.npy"]
    err = _error(base + argv, capsys)
    assert message in err and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())


def _sparse_files(tmp_path, r=2, k=8, m=8, n=6, seed=3):
    """A dense bf16 stationary [K R, M] with 4 kept positions of every 4R rows (zeros
    elsewhere, a few zeros kept), its mask, its compressed values and tags, a moving [K R, N]:
    the paths, and the arrays."""
    rng = np.random.default_rng(seed)
    bf = ml_dtypes.bfloat16
    keep = rng.random((k // 4, 4 * r, m)).argsort(axis=1) < 4
    mask = keep.reshape(k * r, m)
    dense = np.where(mask, rng.standard_normal((k * r, m)), 0.0).astype(bf)
    dense[mask & (rng.random(mask.shape) < 0.1)] = 0
    x = rng.standard_normal((k * r, n)).astype(bf)
    from ncrtl.model.tensor_engine.sparse import compress

    values, tag = compress(dense, r, mask)
    paths = {
        "dense": _save(tmp_path / "d.npy", dense),
        "mask": _save(tmp_path / "mask.npy", mask),
        "values": _save(tmp_path / "v.npy", values),
        "tags": _save(tmp_path / "t.npy", tag),
        "x": _save(tmp_path / "x.npy", x.astype(np.float64)),
        "x3": _save(tmp_path / "x3.npy", x.reshape(k, r, n)),
    }
    return paths, {"dense": dense, "mask": mask, "values": values, "tag": tag, "x": x}


def test_sim_sparse_files_that_break_the_rules(tmp_path, capsys, monkeypatch):
    """Your sparse matrices are checked by the golden's rules before anything is built: a group
    with more than 4 non-zeros, a non-zero outside the mask, a mask that is not bool, both
    --mask and --tags, tags that leave the ratio's elements or repeat a position, tags of the
    wrong dtype, a moving that is neither [K R, N] nor [K, R, N]: one line, exit 2, nothing
    written."""
    monkeypatch.setenv("NCRTL_NO_BUILD", "1")
    p, a = _sparse_files(tmp_path)
    out = tmp_path / "o" / "r.npy"
    base = ["sim", "matmul", "--rows", "8", "--cols", "8", "--sparse", "4:8", "--out", str(out)]
    dense5 = a["dense"].copy()
    dense5[:8, 3] = 1.0
    too_many = _save(tmp_path / "d5.npy", dense5)
    outside = a["dense"].copy()
    outside[~a["mask"]] = 0
    row, col = (int(i) for i in np.argwhere(~a["mask"])[0])
    outside[row, col] = 2.0
    outside = _save(tmp_path / "out.npy", outside)
    element = a["tag"].copy()
    element[0, 0] = (element[0, 0] & 0xFFF0) | 0x3  # element 3 of a 4:8 group (R = 2)
    repeat = a["tag"].copy()
    repeat[1, 0] = (repeat[1, 0] & 0xFFF0) | (repeat[0, 0] & 0xF)
    dense_files = ["--stationary", p["dense"], "--moving", p["x"]]
    compressed = ["--stationary", p["values"], "--moving", p["x3"]]
    cases = [
        (
            ["--stationary", too_many, "--moving", p["x"]],
            "d5.npy x --moving ",
            "stationary column 3, group 0 (rows 0..7) holds non-zeros at rows [0, 1, 2, 3, 4, 5, "
            "6, 7]: more than 4 in a 4:8 group",
        ),
        (
            ["--stationary", outside, "--moving", p["x"], "--mask", p["mask"]],
            f"with --mask {p['mask']}: ",
            f"stationary[{row}, {col}] = ",
        ),
        (
            dense_files + ["--mask", _save(tmp_path / "mi.npy", a["mask"].astype(np.int8))],
            "mi.npy: dtype int8; ",
            "a mask is a bool array, True at the kept positions",
        ),
        (dense_files + ["--mask", p["mask"], "--tags", p["tags"]], "", "give one of them"),
        (
            compressed + ["--tags", _save(tmp_path / "te.npy", element)],
            "with --tags ",
            "tag[0, 0] = 3 selects element 3 of a partition; compress_ratio 2 (4:8) has elements "
            "0..1",
        ),
        (
            compressed + ["--tags", _save(tmp_path / "tr.npy", repeat)],
            "with --tags ",
            "of rows [0, 1, 2, 3] (group 0), column 0 repeat a position",
        ),
        (
            compressed + ["--tags", _save(tmp_path / "t32.npy", a["tag"].astype(np.uint32))],
            "",
            "tag must be uint16 [8, 2] (4 tags of 4 bits per word for M=8), got uint32 [8, 2]",
        ),
        (
            ["--stationary", p["values"], "--tags", p["tags"], "--moving"]
            + [_save(tmp_path / "x15.npy", np.ones((15, 6)))],
            "x15.npy: shape [15, 6]; ",
            "with --sparse 4:8 the moving is [K x 2, N] (dense rows) or [K, 2, N]",
        ),
        (
            ["--stationary", p["values"], "--tags", p["tags"], "--moving"]
            + [_save(tmp_path / "x4.npy", np.ones((8, 4, 6)))],
            "",
            "moving [K, compress_ratio=2, N], got stationary (8, 8) and moving (8, 4, 6)",
        ),
        (compressed + ["--tags", p["tags"], "--n", "7"], "", "--n 7 does not match the matrices"),
    ]
    for argv, where, message in cases:
        err = _error(base + argv, capsys)
        assert where in err and message in err and err.count("\n") == 1, err
    assert not out.parent.exists()


def test_sim_sparse_says_what_runs(tmp_path, monkeypatch, capsys):
    """The header of a sparse run: the pattern, the compressed and the logical K, the formats
    and where the data comes from (random, a dense stationary with its mask, a compressed one
    with its tags); the engine asked for is the one with the sparse path."""
    from ncrtl.testbench import conformance
    from ncrtl.testbench.tensor_engine import simulate as te_sim

    asked = []

    def fake_run_block(block, params, **kw):
        asked.append((params, kw["player"]))
        return conformance.BlockResult("x", False, message="not run")

    monkeypatch.setattr(te_sim, "run_block", fake_run_block)
    p, _ = _sparse_files(tmp_path)
    base = ["sim", "matmul", "--rows", "8", "--cols", "8"]
    assert main(base + ["--sparse", "4:16", "--n", "16"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(
        "nc_matmul_sparse 4:16 bf16 K=8 (logical K=32) M=8 N=16 on a 8x8 array, bf16 x bf16, "
        "random normal values, 4 of every 16 stationary rows kept at random"
    )
    # the narrowest PE serving bf16, said in one line; its sparse moving words 4 x 16 bits
    assert (
        "PE build pe_modes=bf16: the narrowest build serving bf16 (the family: bf16, fp16); "
        "--pe-modes names another (all: the reference design)\n"
    ) in captured.err
    params, ports = asked[-1]
    assert params["sparse"] == 1 and params["pe_modes"] == "bf16"
    assert next(q for q in ports if q.name == "moving").width == 8 * 64
    assert main(base + ["--sparse", "4:16", "--n", "16", "--pe-modes", "all"]) == 1
    assert "PE build" not in capsys.readouterr().err
    params, ports = asked[-1]
    assert params["pe_modes"] == "all" and next(q for q in ports if q.name == "moving").width == (
        8 * 128
    )
    argv = base + ["--sparse", "4:8", "--stationary", p["dense"], "--moving", p["x"]]
    assert main(argv + ["--mask", p["mask"]]) == 1
    assert "4:8 bf16 K=8 (logical K=16) M=8 N=6 on a 8x8 array, bf16 x bf16, --stationary " in (
        capsys.readouterr().out
    )
    argv = base + ["--sparse", "4:8", "--stationary", p["values"], "--moving", p["x3"]]
    assert main(argv + ["--tags", p["tags"], "--dtype", "bf16"]) == 1
    assert f"with --tags {p['tags']}" in capsys.readouterr().out


def test_sparse_dense_comparison_names_the_contract_exceptions():
    """The line against the dense golden counts the outputs that differ under the contract's
    reasons: a non-finite moving met by a dropped zero, a zero's sign, tags that do not ascend
    (another summation order); a result off elsewhere counts as none of them."""
    from ncrtl.model.tensor_engine.sparse import compress, matmul_sparse, squeeze_tags
    from ncrtl.testbench.tensor_engine.simulate import dense_comparison

    bf = ml_dtypes.bfloat16
    r = 2

    def compare(values, tag, x, bits=None):
        moving = x.reshape(-1, r, x.shape[1])
        got = matmul_sparse(moving, values, tag, r, rows=4, cols=4).view(np.uint32)
        bits = got if bits is None else bits
        return dense_comparison(
            values.view(np.uint16), tag, moving.view(np.uint16), r, ("bf16", "bf16"), bits
        )

    dense = np.zeros((8, 1), bf)
    dense[0, 0] = 1.0
    values, tag = compress(dense, r)
    x = np.ones((8, 1), bf)
    assert compare(values, tag, x) == dict(
        outputs=1, differ=0, nonfinite=0, zero_sign=0, order=0, other=0
    )
    assert compare(values, tag, x, np.array([[0x40000000]], np.uint32))["other"] == 1
    x[5, 0] = np.inf  # a dropped zero of the stationary
    assert compare(values, tag, x)["nonfinite"] == 1
    dense[:4, 0] = [1.0, -1.0, 2.0**-133, 1.0]
    x = np.ones((8, 1), bf)
    x[:4, 0] = [1.0, 1.0, -(2.0**-133), -0.0]
    values, tag = compress(dense, r)
    assert compare(values, tag, x)["zero_sign"] == 1
    # 1 + 2**-24 rounds to 1 in position order; -1 first keeps both small terms
    positions = np.array([[2], [0], [1], [3]])
    values = np.array([[-1.0], [1.0], [2.0**-24], [2.0**-24]], bf)
    cmp = compare(values, squeeze_tags(positions, r), np.ones((8, 1), bf))
    assert cmp["differ"] == cmp["order"] == 1
    # 128 compressed rows at 4:16: the dense chain of 512 rows, past the golden's 255
    from ncrtl.testbench.tensor_engine.simulate import sparse_operands

    ops = sparse_operands(np.random.default_rng(2), ("bf16", "bf16"), 128, 4, 3, 4)
    vals, x = ops["values"].view(bf), ops["moving"].view(bf)
    got = matmul_sparse(x, vals, ops["tag"], 4, rows=128, cols=4).view(np.uint32)
    cmp = dense_comparison(ops["values"], ops["tag"], ops["moving"], 4, ("bf16", "bf16"), got)
    assert cmp["outputs"] == 12 and cmp["differ"] == 0


@pytest.mark.sim
@pytest.mark.slow
def test_sim_matmul_sparse(tmp_path, capsys):
    """Sparse matmuls on the 8 x 8 engine with the sparse path: random 4:16 data, then your
    matrices at 4:8 as a dense stationary with its mask and as compressed values with their
    tags; the RTL result bit for bit the golden's (and the dense golden's), the cycles the
    timing model's."""
    from ncrtl.model.tensor_engine.sparse import matmul_sparse

    base = ["sim", "matmul", "--rows", "8", "--cols", "8"]
    assert main(base + ["--sparse", "4:16", "--n", "32"]) == 0
    out, err = capsys.readouterr()
    assert "Verilator warning" not in err  # the sparse path's word-level cycle is waived
    assert "tensor_engine_8x8_sp_player: 256 compared, 0 mismatches" in out
    assert "output_cycles: 34 compared, 0 mismatches" in out
    assert "result MATCHES the golden model (matmul_sparse) and the timing model" in out
    assert "(K=32 dense rows): all 256 outputs agree bit for bit" in out
    assert re.search(r"dense-equivalent [0-9.]+ TFLOPS at 2.4 GHz \(4:16 peak", out)
    p, a = _sparse_files(tmp_path)
    want = matmul_sparse(a["x"].reshape(8, 2, 6), a["values"], a["tag"], 2, rows=8, cols=8)
    for form in (
        ["--stationary", p["dense"], "--moving", p["x"], "--mask", p["mask"]],
        ["--stationary", p["values"], "--moving", p["x3"], "--tags", p["tags"]],
    ):
        res = tmp_path / "r.npy"
        assert main(base + ["--sparse", "4:8", "--out", str(res)] + form) == 0
        out = capsys.readouterr().out
        assert "result MATCHES the golden model (matmul_sparse)" in out
        assert "(K=16 dense rows): all 48 outputs agree bit for bit" in out
        assert (np.load(res).view(np.uint32) == want.view(np.uint32)).all()
