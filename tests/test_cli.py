"""The ``ncrtl`` command line: Verilog generation, errors on bad input, a small conformance run."""

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
