"""``ncrtl run`` on kernels whose own Python fails, that run past the tracing bounds, or whose
messages name what the kernel wrote: one line naming the kernel's line, exit status 2, nothing
written (docs/kernels.md, "Kernel errors and tracing bounds")."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from ncrtl.cli import main
from ncrtl.model.kernel import golden as kgolden
from ncrtl.nki import language as nl
from ncrtl.testbench import progress

from .kernel_lines import kernel_line

HERE = os.path.dirname(os.path.abspath(__file__))
RAISES = os.path.join(HERE, "kernels", "raises.py")
BAD = os.path.join(HERE, "kernels", "bad.py")


def _line(tag):
    return kernel_line(RAISES, tag)


def _error(argv, capsys):
    """Run ``ncrtl run argv``: exit status 2 and stderr one line, no traceback; return it."""
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def npy(tmp_path):
    """``npy(shape)``: the path of a float32 .npy file of zeros of that shape."""

    def make(shape):
        path = tmp_path / f"x{len(shape)}.npy"
        np.save(path, np.zeros(shape, np.float32))
        return str(path)

    return make


# Kernel files whose module body fails, written to tmp_path: (text, what the line holds).
FILES = {
    "body.py": ("import nki\n\nTABLE = {}\nX = TABLE[1]\n", "body.py:4: KeyError: 1"),
    "exits.py": ("import sys\n\nsys.exit('bye')\n", "exits.py:3: SystemExit: the kernel's"),
    "syntax.py": ("def k(:\n", "syntax.py:1: the kernel file does not parse"),
}


@pytest.mark.parametrize(
    "kernel, shape, expected",
    [
        ("value_error", (128, 4), "{value_error}: ValueError: the kernel refuses"),
        ("runtime_error", (128, 4), "{runtime_error}: RuntimeError: no"),
        ("zero_division", (128, 4), "{zero_division}: ZeroDivisionError: integer division"),
        ("key_error", (128, 4), "{key_error}: KeyError: 'b'"),
        ("index_error", (128, 4), "{index_error}: IndexError: list index out of range"),
        ("recursion", (128, 4), "{recursion}: RecursionError: maximum recursion depth"),
        ("assertion", (128, 4), "{assertion}: AssertionError: the kernel's assertion failed"),
        ("exits", (128, 4), "{exits}: SystemExit: the kernel's code called sys.exit(3)"),
        # arguments of a rank the kernel does not expect: P, F = x.shape
        ("two_dims", (128,), "{two_dims}: ValueError: not enough values to unpack"),
        ("two_dims", (2, 3, 4), "{two_dims}: ValueError: too many values to unpack"),
        ("NOT_A_KERNEL", (128, 4), "raises.py::NOT_A_KERNEL is not a kernel function (it is of"),
        ("Tiles", (128, 4), "raises.py::Tiles is not a kernel function (it is a class)"),
        *((name, (128, 4), FILES[name][1]) for name in FILES),
        ("a .npy", (128, 4), "not a Python kernel file (it holds binary data)"),
    ],
)
def test_a_kernels_own_error_is_one_line(kernel, shape, expected, npy, tmp_path, capsys):
    """Any exception of the kernel's own Python (its file imported, the kernel traced),
    sys.exit included, a name that is no function, a file that is not Python: one line with
    the exception's type and message and the innermost line of the kernel's file (never one
    inside ncrtl), exit status 2, nothing written."""
    x = npy(shape)
    if kernel in FILES:
        (tmp_path / kernel).write_text(FILES[kernel][0])
        kernel = f"{tmp_path / kernel}::k"
    elif kernel == "a .npy":
        kernel = f"{x}::k"
    else:
        kernel = f"{RAISES}::{kernel}"
    out = tmp_path / "o"
    err = _error([kernel, "--args", x, "--out", str(out)], capsys)
    tags = ("value_error", "runtime_error", "zero_division", "key_error", "index_error")
    tags += ("recursion", "assertion", "exits", "two_dims")
    assert err.startswith("ncrtl: error: "), err
    assert expected.format(**{t: _line(t) for t in tags}) in err, err
    assert "ncrtl/nki" not in err and "ncrtl/cli" not in err
    assert not out.exists()


def _ncrtl_function(module, text):
    """A function defined in ncrtl's module ``module`` (its frames are ncrtl's)."""
    scope = {"__name__": module}
    exec(text, scope)
    return scope["f"]


def test_a_bug_in_ncrtl_is_told_apart(monkeypatch, capsys):
    """An exception raised inside ncrtl under the kernel's call names the kernel's line and
    where in ncrtl it was raised; one with no line of the kernel's keeps its traceback (a bug
    report's)."""
    from ncrtl.model.kernel.build import Builder

    module = "ncrtl.model.kernel.build"
    monkeypatch.setattr(Builder, "emit", _ncrtl_function(module, "def f(*a, **k): 1 / 0"))
    err = _error([f"{RAISES}::own_class", "--shapes", "128x4:float32"], capsys)
    assert (
        f"{_line('own_class')}: ZeroDivisionError: division by zero (raised inside ncrtl: " in err
    )
    assert f"{module} line 1)" in err
    monkeypatch.undo()
    monkeypatch.setattr(Builder, "finish", _ncrtl_function(module, "def f(*a, **k): 1 / 0"))
    with pytest.raises(ZeroDivisionError):
        main(["run", f"{RAISES}::own_class", "--shapes", "128x4:float32"])


def test_tracing_bounds(monkeypatch, capsys):
    """--max-instructions and --trace-timeout stop a trace with one line naming the bound and
    the kernel's line, a Python loop that emits nothing too; after SHOW_AFTER seconds the trace
    says what it does on stderr, unless NCRTL_NO_PROGRESS=1."""
    shapes = ["--shapes", "128x4:float32"]
    err = _error([f"{RAISES}::many", *shapes, "--max-instructions", "10"], capsys)
    assert f"{_line('many')}: nisa.memset: tracing stopped" in err
    assert "more than 10 instructions" in err and "--max-instructions" in err

    monkeypatch.setattr(progress, "SHOW_AFTER", 0.05)
    monkeypatch.setenv("NCRTL_NO_PROGRESS", "1")
    argv = [f"{RAISES}::spins", *shapes, "--trace-timeout", "0.3"]
    err = _error(argv, capsys)
    assert f"{_line('spins')}: tracing stopped after 0.3 s" in err and "--trace-timeout" in err
    monkeypatch.delenv("NCRTL_NO_PROGRESS")
    assert main(["run", *argv]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "tracing spins ..." and lines[-2].startswith("tracing spins: failed")
    assert lines[-1].startswith(f"ncrtl: error: {_line('spins')}: tracing stopped")

    for flag, value in (("--max-instructions", "0"), ("--trace-timeout", "-1")):
        assert f"{flag} {value}" in _error([f"{RAISES}::many", *shapes, flag, value], capsys)


@pytest.mark.parametrize(
    "function, expected",
    [
        ("float_range", "{float_range}: nl.affine_range: stop must be an integer"),
        ("bad_call", "{bad_call}: nisa.nc_transpose: data must be a tensor"),
        ("bad_tile_position", "{tile_position}: nisa.nc_matmul: tile_position must be a tuple"),
        ("divide", "{divide_op}: nisa.tensor_tensor: op=nl.hypot is not modelled"),
        ("divide_called", "{divide_called}: nki.language.hypot is not modelled"),
        ("own_class", None),
        (
            "wrong_keyword",
            "{wrong_keyword}: nisa.memset: no argument 'colour' (its arguments: dst, value, engine, name)",
        ),
        ("missing_argument", "{missing_argument}: nisa.tensor_copy: missing argument 'src'"),
        ("too_many", "{too_many}: nl.ndarray: takes at most 5 positional arguments"),
    ],
)
def test_messages_name_the_kernels_line_and_names(function, expected, capsys):
    """An argument error of nki.language / nki.isa names the kernel's line, not ncrtl's (a
    wrong keyword, a missing argument, too many: the call and the argument, never Python's own
    "unexpected keyword argument"); a name not in the reference shows as itself (nl.hypot) and
    is a class; a kernel's own class on ``nl.NKIObject`` runs."""
    argv = [f"{RAISES}::{function}", "--shapes", "128x4:float32"]
    if expected is None:
        assert main(["run", *argv]) == 0
        assert repr(nl.hypot) == "nl.hypot" and nl.hypot is nl.hypot
        return
    tags = ("float_range", "bad_call", "tile_position", "divide_op", "divide_called")
    tags += ("wrong_keyword", "missing_argument", "too_many")
    err = _error(argv, capsys)
    assert expected.format(**{t: _line(t) for t in tags}) in err, err
    assert "ncrtl/nki" not in err


def test_allow_uninitialized_warns_in_one_line(tmp_path):
    """--allow-uninitialized: an output that depends on memory nothing wrote is one line on
    stderr naming the kernel's line of the read (a real process: pytest records warnings
    instead of showing them)."""
    x = tmp_path / "a.npy"
    np.save(x, np.zeros((128, 64), np.float32))
    argv = ["run", f"{BAD}::reads_unwritten", "--args", str(x), "--allow-uninitialized"]
    res = subprocess.run(
        [sys.executable, "-m", "ncrtl.cli", *argv], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    line = kernel_line(BAD, "reads_unwritten")
    assert res.stderr.startswith(f"ncrtl: warning: {line}: nisa.dma_copy"), res.stderr
    assert res.stderr.count("\n") == 1 and "golden.py" not in res.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = warnings.formatwarning("m", kgolden.UninitializedRead, "golden.py", 1)
    assert text == "ncrtl: warning: m\n"
