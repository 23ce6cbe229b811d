"""Defects nki-library's kernels found in ncrtl, each as a class: a small kernel of our own
(tests/kernels/fixes.py) that had the defect's shape."""

import pathlib
import warnings

import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.cli import main
from ncrtl.kernels import load_file

KERNELS = pathlib.Path(__file__).parent / "kernels" / "fixes.py"


def _k(name):
    return load_file(str(KERNELS), name)


def _x(p=4, f=8):
    return np.arange(p * f, dtype=np.float32).reshape(p, f) / 8


def test_timing_only_trip_counts_see_every_cores_device_tensors(tmp_path):
    """The trip counts without the golden run (--timing-only) run on one device memory as
    large as both cores' device tensors: the second core's private tensor, which its loop's
    count is read through, lies past the first core's (it once ran past the memory's end,
    a traceback)."""
    x, n = _x(), np.array([[3]], np.int32)
    k = _k("private_count2")
    with_golden = nki.run(k, (x, n))
    alone = nki.run(k, (x, n), golden=False)
    assert np.array_equal(with_golden.outputs[0], 3 * x)
    assert [p.trips for p in alone.program] == [p.trips for p in with_golden.program]
    assert alone.report.total_ns == with_golden.report.total_ns
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "n.npy", n)
    rc = main(
        ["run", f"{KERNELS}::private_count2", "--args", str(tmp_path / "x.npy"),
         str(tmp_path / "n.npy"), "--out", str(tmp_path / "o"), "--timing-only"]
    )  # fmt: skip
    assert rc in (0, None)


@pytest.mark.parametrize(
    "rows, message",
    [
        (8, None),
        (6, r"tiled_copy: output 0 \(hbm\d+ \[6, 3\] \(.*fixes.py:\d+\)\): 6 of its 18 elements written by no "
            r"instruction \(the first at \[4, 0\]\)"),
        (2, r"tiled_copy: output 0 \(hbm\d+ \[2, 3\] \(.*fixes.py:\d+\)\): no instruction wrote it"),
    ],
)  # fmt: skip
def test_an_output_nothing_wrote_is_told(rows, message):
    """An output element no instruction wrote is what the device memory held on the hardware
    and 0 in the golden: one warning line per output names how many and the first, so that
    zeros from a shape that runs no tile are never taken for the kernel's result."""
    x = _x(rows, 3)
    if message is None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert np.array_equal(nki.run(_k("tiled_copy"), (x,), timing=False).outputs[0], x)
        return
    with pytest.warns(nki.kernel.UnwrittenOutput, match=message):
        out = nki.run(_k("tiled_copy"), (x,), timing=False).outputs[0]
    whole = rows // 4 * 4
    assert np.array_equal(out[:whole], x[:whole]) and not out[whole:].any()


def test_the_command_line_tells_an_output_nothing_wrote(tmp_path, capsys):
    np.save(tmp_path / "x.npy", _x(2, 3))
    with pytest.warns(nki.kernel.UnwrittenOutput, match="no instruction wrote it"):
        main(
            ["run", f"{KERNELS}::tiled_copy", "--args", str(tmp_path / "x.npy"),
             "--out", str(tmp_path / "o")]
        )  # fmt: skip
