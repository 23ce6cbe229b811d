"""``ncrtl run``'s inputs and outputs: every bad argument is one line, exit status 2, before any
work and with nothing written; ``--check`` checks them all and runs nothing; ``--reference``
checks a kernel's outputs against a numpy function."""

import json
import os

import ml_dtypes
import numpy as np
import pytest

from ncrtl.cli import main
from ncrtl.kernels import HERE

MATMUL = os.path.join(HERE, "matmul.py") + "::matmul_basic"

COPY = """\
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def copy(x):
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def huge(x):
    return nl.ndarray((128, 10**9), dtype=nl.float32, buffer=nl.hbm)
"""


def _error(argv, capsys):
    """Run ``argv``: exit status 2, one line on stderr, no traceback; return the line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _nothing_in(folder):
    return not folder.exists() or not any(folder.iterdir())


@pytest.fixture
def kernel(tmp_path):
    path = tmp_path / "copy.py"
    path.write_text(COPY)
    x = tmp_path / "x.npy"
    np.save(x, np.arange(128 * 4, dtype=np.float32).reshape(128, 4))
    return path, x


def test_check_runs_nothing_and_writes_nothing(tmp_path, capsys):
    """``--check`` checks every argument as the run does and stops: exit 0, no --out folder;
    a bad argument is the run's own line."""
    out = tmp_path / "o"
    argv = ["run", "--example", "matmul_basic", "--out", str(out), "--trace", str(tmp_path / "t")]
    assert main([*argv, "--check"]) == 0
    assert "nothing traced, run or written" in capsys.readouterr().out
    assert not out.exists() and not (tmp_path / "t").exists()
    assert "--seed 5000000000" in _error([*argv, "--check", "--seed", "5000000000"], capsys)


@pytest.mark.parametrize(
    "stored,suffix,message",
    [
        (np.float16, ":bfloat16", "holds float16, not bfloat16"),
        (np.float32, ":int32", "holds float32, not int32"),
        (ml_dtypes.float8_e4m3, "", "name their dtype: one of :float8_e4m3, :float8_e4m3fn"),
        (ml_dtypes.float8_e4m3, ":bfloat16", "raw 1-byte elements, bfloat16 has 2"),
        (ml_dtypes.bfloat16, "", "raw 2-byte elements (numpy saves bfloat16 and fp8 so)"),
        (np.float64, "", "holds float64, not a dtype of the kernels"),
    ],
)
def test_dtype_suffix_names_only_raw_files(tmp_path, capsys, stored, suffix, message):
    """A ``:DTYPE`` names what a raw-byte file holds (numpy's |V2 / |V1 for bfloat16 / fp8);
    on a typed file it must be the file's own dtype, never a reinterpretation of its bits; a
    1-byte raw file is pointed at the fp8 names."""
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(a, np.ones((128, 64), stored))
    np.save(b, np.ones((128, 512), ml_dtypes.bfloat16))
    err = _error(["run", MATMUL, "--args", f"{a}{suffix}", f"{b}:bfloat16"], capsys)
    assert message in err and f"--args {a}{suffix}" in err
    if stored is ml_dtypes.float8_e4m3 and not suffix:
        assert ":bfloat16" not in err
    assert main(["run", MATMUL, "--args", f"{b}:bfloat16", f"{b}:bfloat16", "--check"]) == 0


def test_device_memory_is_checked_before_allocation(kernel, capsys):
    """Inputs, ``--shapes`` and a kernel's device tensors beyond the core's device memory are
    refused before anything of their size is allocated, naming the size, the limit and the
    core version."""
    path, x = kernel
    err = _error(["run", f"{path}::copy", "--shapes", "100000x100000:float32"], capsys)
    assert "--shapes 100000x100000:float32: 37.3 GiB" in err
    assert "exceed the 12.0 GiB" in err and "NeuronCore-v3" in err
    both = ["--shapes", "60000x30000:float32", "60000x30000:float32"]
    assert "the 2 tensors of --shapes together" in _error(["run", f"{path}::copy", *both], capsys)
    assert "18.0 GiB" in _error(
        ["run", f"{path}::copy", "--core", "v4", "--shapes", "80000x80000:float32"], capsys
    )
    err = _error(["run", f"{path}::huge", "--args", str(x)], capsys)
    assert f"{path}:18: nl.ndarray: [128, 1000000000] float32: 476.8 GiB" in err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--seed", "-1"], "--seed -1 must be in 0..4294967295"),
        (["--seed", str(1 << 32)], "--seed 4294967296 must be in 0..4294967295"),
        (["--out", ""], "--out: an empty path; give a folder"),
        (["--trace", ""], "--trace: an empty path; give a file"),
        (["--plot", ""], "--plot: an empty path; give a file"),
        (["--bogus"], "ncrtl run: error: unrecognized arguments: --bogus (ncrtl run --help)"),
        (["--seed", "x"], "ncrtl run: error: argument --seed: invalid int value: 'x'"),
    ],
)
@pytest.mark.parametrize("inputs", [["--example", "matmul_basic"], [MATMUL, "--shapes"]])
def test_arguments_are_one_line(tmp_path, capsys, argv, message, inputs):
    """Seeds within 0..2^32-1 whatever the inputs; empty output paths refused; argparse's own
    errors one line naming the command's --help (no usage block)."""
    if inputs[-1] == "--shapes":
        inputs = [*inputs, "128x64:bfloat16", "128x512:bfloat16"]
    assert message in _error(["run", *inputs, *argv], capsys)


def test_argument_rules(capsys):
    """--shapes names its dtype; --tile-unit follows the Tensor Engine's tile granules; --help
    still prints the usage."""
    err = _error(["run", MATMUL, "--shapes", "128x64", "128x512:bfloat16"], capsys)
    assert "--shapes 128x64: name the dtype, 128x64:DTYPE; the dtypes: float32" in err
    err = _error(["timing", "matmul", "--tile-unit", "64"], capsys)
    assert "--tile-unit 64 must be one of 1, 2, 4, 8, 16, 32" in err
    assert "error: the following arguments are required: command (ncrtl --help)" in _error(
        [], capsys
    )
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0 and "--reference" in capsys.readouterr().out


def test_outputs_are_checked_first_and_written_whole(tmp_path, capsys):
    """--plot's format is its suffix; --trace, --plot and --out's files are distinct; an --out
    folder whose report.json is not a file is refused before anything is written; a write
    that fails is one line; a second run replaces the first's files (and says so), writing
    only what it has."""
    run = ["run", "--example", "matmul_basic"]
    out = tmp_path / "o"
    for argv, message in (
        (["--plot", str(tmp_path / "p.txt")], "the plot's format is its suffix, one of .png"),
        (["--plot", "/dev/full"], "(not none)"),
        (["--plot", str(tmp_path / "p.png"), "--trace", str(tmp_path / "p.png")], "both name"),
        (["--out", str(out), "--trace", str(out / "report.json")], "is a path --out"),
    ):
        assert message in _error([*run, *argv], capsys)
    (out / "report.json").mkdir(parents=True)
    assert "report.json there is a folder" in _error([*run, "--out", str(out)], capsys)
    assert [p.name for p in out.iterdir()] == ["report.json"]
    (out / "report.json").rmdir()
    full = tmp_path / "full.png"
    full.symlink_to("/dev/full")
    err = _error([*run, "--timing-only", "--plot", str(full)], capsys)
    assert "cannot write --plot" in err and "No space left on device" in err
    (out / "out1.npy").write_bytes(b"an earlier run's")
    assert main([*run, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"outputs: out0.npy, report.json in {out}" in said
    assert f"removed the previous run's out1.npy from {out}" in said
    assert sorted(p.name for p in out.iterdir()) == ["out0.npy", "report.json"]
    assert main([*run, "--out", str(out), "--timing-only"]) == 0
    said = capsys.readouterr().out
    assert f"outputs: report.json in {out}" in said and "out0.npy" not in said.split("removed")[0]
    assert [p.name for p in out.iterdir()] == ["report.json"]


REF = """\
import numpy as np


def same(x):
    return x


def off(x):
    return [x + 1]


def wrong_shape(x):
    return x.T


def fails(x):
    return {}["nope"]
"""


def test_reference_checks_each_output(kernel, tmp_path, capsys):
    """--reference REF.py::FN: each output's largest |error| against FN of the inputs (as
    float64), printed and in report.json; exit 1 naming the output beyond its dtype's bound;
    the function's own error, a shape or count that does not match, one line, exit 2."""
    path, x = kernel
    ref = tmp_path / "ref.py"
    ref.write_text(REF)
    run = ["run", f"{path}::copy", "--args", str(x)]
    out = tmp_path / "o"
    assert main([*run, "--reference", f"{ref}::same", "--out", str(out)]) == 0
    assert "out0 max |error| 0 within the bound 0.000244" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())["reference"]
    assert report["within_bound"] and report["outputs"][0]["max_abs_error"] == 0.0
    assert main([*run, "--reference", f"{ref}::off"]) == 1
    assert "out0 max |error| 1 OUTSIDE the bound" in capsys.readouterr().out
    for fn, message in (
        ("wrong_shape", "its out0 has shape [4, 128], the kernel's [128, 4]"),
        ("fails", f"{ref}:17: KeyError: 'nope'"),
        ("nope", "has no function 'nope'; its functions: fails, off, same, wrong_shape"),
    ):
        assert message in _error([*run, "--reference", f"{ref}::{fn}"], capsys)
    err = _error([*run, "--reference", f"{ref}::same", "--timing-only"], capsys)
    assert "not with --timing-only" in err


@pytest.mark.parametrize(
    "text, value",
    [
        ("3", 3),
        ("-2.5", -2.5),
        ("1e3", 1000.0),
        ("True", True),
        ("False", False),
        ("None", None),
        ("(0, 1024)", (0, 1024)),
        ("[1, 2]", [1, 2]),
        ("'x y'", "x y"),
        ("relu", "relu"),
        ("inf", float("inf")),
    ],
)
def testkwarg_values(text, value):
    """``--kwarg NAME=VALUE``: numbers, Python literals (``False`` is False, not the truthy
    text), else the text."""
    from ncrtl.cli.run import kwarg_value

    got = kwarg_value(text)
    assert got == value and type(got) is type(value)
