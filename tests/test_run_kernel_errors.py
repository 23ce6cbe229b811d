"""``ncrtl run``'s messages name what the kernel wrote: its line (never one inside ncrtl), the
names it used (docs/kernels.md, "Supported API", "Golden run")."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from ncrtl.cli import main
from ncrtl.model.kernel import golden as kgolden
from ncrtl.nki import language as nl

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


@pytest.mark.parametrize(
    "function, expected",
    [
        ("float_range", "{float_range}: nl.affine_range: stop must be an integer"),
        ("bad_call", "{bad_call}: nisa.nc_transpose: data must be a tensor"),
        ("bad_tile_position", "{tile_position}: nisa.nc_matmul: tile_position must be a tuple"),
        ("divide", "{divide_op}: nisa.tensor_tensor: op=nl.divide is not modelled"),
        ("divide_called", "{divide_called}: nki.language.divide is not modelled"),
        ("own_class", None),
    ],
)
def test_messages_name_the_kernels_line_and_names(function, expected, capsys):
    """An argument error of nki.language / nki.isa names the kernel's line, not ncrtl's; an
    unmodelled name shows as itself (nl.divide) and is a class a kernel may subclass
    (``class Tiles(nl.NKIObject)``: the kernel runs)."""
    argv = [f"{RAISES}::{function}", "--shapes", "128x4:float32"]
    if expected is None:
        assert main(["run", *argv]) == 0
        assert repr(nl.NKIObject) == "nl.NKIObject" and nl.NKIObject is nl.NKIObject
        return
    tags = ("float_range", "bad_call", "tile_position", "divide_op", "divide_called")
    err = _error(argv, capsys)
    assert expected.format(**{t: _line(t) for t in tags}) in err, err
    assert "ncrtl/nki" not in err


def test_allow_uninitialized_warns_in_one_line(tmp_path):
    """--allow-uninitialized: each read of memory nothing wrote is one line on stderr naming
    the kernel's line (a real process: pytest records warnings instead of showing them)."""
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
