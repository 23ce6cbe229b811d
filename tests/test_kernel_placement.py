"""Manual placement (``nl.ndarray(address=...)``, docs/kernels.md "Placement"): placed tensors
are views of one tensor over their memory, so overlapping placements are ordered by the
dependency analysis; automatic placement leaves their bytes alone; bad addresses are one line
naming the kernel's line."""

import os

import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.cli import main
from ncrtl.kernels import load_file
from ncrtl.model.kernel import golden as kgolden

from .kernel_lines import kernel_line

HERE = os.path.dirname(os.path.abspath(__file__))
PLACED = os.path.join(HERE, "kernels", "placed.py")


def test_placements_over_the_same_bytes_are_the_same_memory():
    a = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((128, 64)).astype(np.float32)
    k = load_file(PLACED, "halves")
    res = nki.run(k, (a, b), {})
    assert np.array_equal(res.outputs[0], a + b)
    (add,) = res.program.streams["vector"]
    # the add over both halves waits on the loads of each half (two other placements)
    loads = {n for n, s in res.program.streams.items() if s and s[0].srcs[0].space == "hbm"}
    assert loads <= {s for s, _ in add.waits}
    placed = add.dsts[0]
    assert placed.tensor == "sbuf_placed" and placed.base == 0
    # the automatic tile is outside the placed bytes [1024, 1280)
    auto = [r for r in add.srcs if r.tensor != "sbuf_placed"][0]
    assert auto.base + 256 <= 1024 or auto.base >= 1280
    # any order the semaphores allow gives the same values
    for order in ("reverse", "random"):
        out, _ = kgolden.run(res.program, [a, b], order=order)
        assert np.array_equal(out[0].view(np.float32), a + b)


def test_a_psum_bank_placed_again_waits_for_its_eviction():
    a = np.random.default_rng(3).standard_normal((128, 128)).astype(np.float32)
    k = load_file(PLACED, "one_bank")
    res = nki.run(k, (a,), {"n": 3})
    assert np.array_equal(res.outputs[0], np.stack([a.T + i for i in range(3)]))
    mms = res.program.streams["tensor"]
    assert all(m.dsts[0].tensor == "psum_placed" for m in mms)
    # the second and third transposes wait on the vector engine's reads of the bank before
    assert [dict(m.waits).get("vector", 0) for m in mms] == [0, 1, 2]
    for order in ("reverse", "random"):
        out, _ = kgolden.run(res.program, [a], order=order)
        assert np.array_equal(out[0].view(np.float32), np.stack([a.T + i for i in range(3)]))


@pytest.mark.parametrize(
    "case, message",
    [
        (0, "address (100, 0): partitions 100..163 of a [64, 64] tensor are outside"),
        (1, "address (0, 2): the byte offset must be a multiple of the float32"),
        (
            2,
            "address (0, 1000000000): bytes 1000000000..1000000255 of each partition are outside the SBUF's 229376",
        ),
        (3, "address must be (partition offset, byte offset), integers, not (0,)"),
        (4, "address must be (partition offset, byte offset), integers"),
    ],
)
def test_bad_addresses_are_one_line(case, message, capsys):
    argv = ["run", f"{PLACED}::bad_address", "--shapes", "4x4:float32", "--kwarg"]
    assert main([*argv, f"case={case}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"{kernel_line(PLACED, 'bad_address')}: nl.ndarray: {message}" in err, err
