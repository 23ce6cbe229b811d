"""Defects nki-library's kernels found in ncrtl, each as a class: a small kernel of our own
(tests/kernels/fixes.py) that had the defect's shape."""

import pathlib

import numpy as np

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
