"""The ``ncrtl`` command line: Verilog generation, errors on bad input, a small conformance run."""

import re
import subprocess
import sys
from xml.etree import ElementTree

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
            "--n 1024 must be in 1..512 (mx into fp32 PSUM)",
        ),
        (
            ["sim", "matmul", "--dtype", "bf16", "--psum", "bf16", "--n", "1024"],
            "--n 1024 must be in 1..512 (bf16 into bf16 PSUM)",
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
    """``ncrtl timing matmul``: the documented steady-state cost, parallel tiles, a trace that
    Perfetto reads (a slice per instruction on its tile's LS or MM track)."""
    import json

    assert main(["timing", "matmul", "--k", "128", "--m", "32", "--n", "16", "--repeat", "32"]) == 0
    out = capsys.readouterr().out
    assert "steady state: 32.0 cycles per matmul" in out and "total: " in out
    args = ["timing", "matmul", "--k", "128", "--m", "32", "--n", "16", "--repeat", "32"]
    assert main([*args, "--rules", "one-chain"]) == 0
    assert "steady state: 64.0 cycles per matmul" in capsys.readouterr().out
    assert main([*args, "--rules", "hdl"]) == 0
    assert "steady state: 32.0 cycles per matmul" in capsys.readouterr().out
    trace = tmp_path / "t.json"
    argv = ["timing", "matmul", "--k", "32", "--tile-size", "32,128", "--tiles", "4"]
    assert main([*argv, "--repeat", "8", "--trace", str(trace)]) == 0
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
        (["--repeat", "0"], "repeat=0 must be at least 1"),
        (["--rows", "300"], "--rows 300 must be in 1..255"),
        (["--tile-unit", "0"], "--tile-unit 0 must be at least 1"),
        (["--trace", "/nonexistent/t.json"], "cannot write --trace /nonexistent/t.json"),
    ],
)
def test_timing_matmul_bad_input(argv, message, capsys):
    assert main(["timing", "matmul", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
