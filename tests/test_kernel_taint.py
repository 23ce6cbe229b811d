"""Reads of memory nothing wrote, as the hardware has them (model/kernel/taint.py): no error by
themselves; the results that depend on them are tainted element by element; tainted data that
reaches a returned output is a warning line; a register, a run-time offset or a predicate is the
error (a warning
with ``uninitialized="warn"``), naming the instruction that first read the unwritten memory."""

import os

import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from ncrtl.model.kernel import golden as kgolden
from ncrtl.model.kernel import taint
from ncrtl.model.kernel.golden import KernelError, UninitializedRead
from tests.kernel_lines import kernel_line

KERNELS = os.path.join(os.path.dirname(__file__), "kernels", "taint.py")
RNG = np.random.default_rng(50)


def _run(name, arrays, kw=None, **opts):
    return nki.run(load_file(KERNELS, name), arrays, kw or {}, timing=False, **opts)


def _out(name, arrays, kw=None):
    outs = _run(name, arrays, kw).outputs
    return outs[0] if len(outs) == 1 else outs


def _error(name, arrays, kw=None):
    with pytest.raises(KernelError) as e:
        _run(name, arrays, kw)
    return str(e.value)


def _warned(name, arrays, kw=None):
    """The warning line of an output that depends on unwritten memory (the run completes)."""
    with pytest.warns(UninitializedRead) as rec:
        _run(name, arrays, kw)
    texts = [str(w.message) for w in rec if "the kernel's output" in str(w.message)]
    assert len(texts) == 1, [str(w.message) for w in rec]
    return texts[0]


def _x(p, f):
    return RNG.standard_normal((p, f)).astype(np.float32)


def test_transpose_of_a_tile_written_in_part():
    """nki-library's find_nonzero_indices: a tile written in 4 of its 16 columns is transposed
    on the Tensor Engine; the 4 rows that came from the written columns are right, and storing
    only those is no error.  Storing a row from an unwritten column is a warning, naming the
    output, its first tainted element and the transpose that read the unwritten columns."""
    x = _x(32, 16)
    got = _out("transpose_rows", (x,), {"cols": 4, "rows": 4})
    np.testing.assert_array_equal(got, x.T[:4])
    msg = _warned("transpose_rows", (x,), {"cols": 4, "rows": 5})
    assert msg.startswith(kernel_line(KERNELS, "transpose") + ": nisa.nc_matmul"), msg
    assert "reads SBUF tensor" in msg and "which nothing wrote" in msg
    assert "the kernel's output 0 (" in msg and "the first at index [4, 0]" in msg


@pytest.mark.parametrize(
    "kw, tainted",
    [
        ({"mcols": 3, "ncols": 8, "keep_m": 3, "keep_n": 8}, None),
        ({"mcols": 3, "ncols": 8, "keep_m": 4, "keep_n": 8}, [3, 0]),
        ({"mcols": 8, "ncols": 5, "keep_m": 8, "keep_n": 6}, [0, 5]),
        ({"mcols": 3, "ncols": 8, "keep_m": 3, "keep_n": 8, "again": True}, None),
        ({"mcols": 3, "ncols": 8, "keep_m": 4, "keep_n": 8, "again": True}, [3, 0]),
    ],
)
def test_matmul_taints_the_rows_and_columns_of_its_unwritten_operands(kw, tainted):
    """``out[m, n]`` depends on ``stationary[:, m]`` and ``moving[:, n]`` only: a stationary
    column nothing wrote taints row ``m``, a moving column column ``n``; a matmul that
    accumulates onto tainted PSUM elements keeps them tainted."""
    a, b = _x(16, 8), _x(16, 8)
    if tainted is None:
        got = _out("matmul_parts", (a, b), kw)
        want = a.T.astype(np.float64) @ b
        if kw.get("again"):
            want = want * 2
        m, n = kw["keep_m"], kw["keep_n"]
        np.testing.assert_allclose(got, want[:m, :n], rtol=1e-5, atol=1e-5)
        return
    msg = _warned("matmul_parts", (a, b), kw)
    assert msg.startswith(kernel_line(KERNELS, "matmul") + ": nisa.nc_matmul"), msg
    assert f"the first at index {tainted}" in msg


@pytest.mark.parametrize("op", ["add", "greater", "equal", "maximum"])
def test_elementwise_taints_the_same_elements(op):
    """An element-wise operation: each result element from the operand element in its place
    (a comparison and a maximum too: NaN goes through them in the probe)."""
    x = _x(8, 12)
    got = _out("elementwise", (x,), {"cols": 5, "keep": 5, "op": op})
    ref = {"add": x + 2, "greater": (x > 2) * 1.0, "equal": (x == 2) * 1.0}
    ref["maximum"] = np.maximum(x, 2)
    np.testing.assert_array_equal(got, ref[op][:, :5].astype(np.float32))
    msg = _warned("elementwise", (x,), {"cols": 5, "keep": 6, "op": op})
    assert msg.startswith(kernel_line(KERNELS, "elementwise") + ": nisa.tensor_scalar"), msg
    assert "the first at index [0, 5]" in msg


def test_integer_comparison_is_tainted():
    """``x > 5`` of integers nothing wrote: 0 under the memory's zeros and under the first two
    probes (-1), 1 under the third (0x7F7F7F7F): tainted."""
    x = RNG.integers(-10, 10, (4, 8)).astype(np.int32)
    np.testing.assert_array_equal(_out("integers", (x,), {"cols": 3, "keep": 3}), (x > 5)[:, :3])
    msg = _warned("integers", (x,), {"cols": 3, "keep": 4})
    assert msg.startswith(kernel_line(KERNELS, "integers")), msg
    assert "the first at index [0, 3]" in msg


def test_a_reduction_taints_the_partitions_it_reduced_from():
    x = _x(8, 6)
    got = _out("row_sums", (x,), {"rows": 5, "keep": 5})
    np.testing.assert_allclose(got[:, 0], x[:5].sum(axis=1), rtol=1e-5)
    msg = _warned("row_sums", (x,), {"rows": 5, "keep": 6})
    assert msg.startswith(kernel_line(KERNELS, "reduce") + ": nisa.tensor_reduce"), msg
    assert "the first at index [5, 0]" in msg


def test_the_accumulator_registers_carry_taint_until_reset():
    """A fold of unwritten elements into the accumulators taints them (their read-out is the
    output's taint); a reset clears them (the second read-out is right)."""
    x = _x(4, 6)
    got = _out("accumulated", (x,), {"cols": 2, "taint": False})
    twice = 2 * x[:, :2].sum(1)
    np.testing.assert_allclose(got, np.stack([twice, twice], 1), rtol=1e-5)
    msg = _warned("accumulated", (x,), {"cols": 2, "taint": True})
    assert msg.startswith(kernel_line(KERNELS, "accumulate") + ": nisa.activation"), msg
    assert "the first at index [0, 0]" in msg
    with pytest.warns(kgolden.UninitializedRead, match=r"at index \[0, 0\]"):
        res = _run("accumulated", (x,), {"cols": 2, "taint": True}, uninitialized="warn")
    np.testing.assert_allclose(res.outputs[0][:, 1], twice, rtol=1e-5)


def test_a_register_loaded_from_tainted_data_is_the_error():
    """A register value that depends on memory nothing wrote is refused at the register_load,
    naming the instruction that first read the unwritten memory; an element that does not is
    loaded."""
    x = np.array([[41, 7, 9]], np.int32)
    assert _out("register_of", (x,), {"col": 0}).tolist() == [[42]]
    msg = _error("register_of", (x,), {"col": 1})
    assert msg.startswith(kernel_line(KERNELS, "register") + ": nisa.register_load"), msg
    assert "as a register value, which depends on memory nothing wrote" in msg
    assert kernel_line(KERNELS, "plus_one") + ": nisa.tensor_scalar" in msg


def test_a_tainted_predicate_is_the_error():
    x = _x(8, 4) + 3
    np.testing.assert_array_equal(_out("predicated", (x,), {"rows": 8}), x)
    msg = _error("predicated", (x,), {"rows": 6})
    assert msg.startswith(kernel_line(KERNELS, "predicate") + ": nisa.tensor_copy_predicated")
    assert "at view index [6, 0] as a predicate, which depends on memory nothing wrote" in msg


def test_a_tainted_run_time_offset_is_the_error():
    data = _x(16, 4)
    idx = RNG.integers(0, 16, (8, 1)).astype(np.int32)
    np.testing.assert_array_equal(_out("gathered", (data, idx), {"rows": 8}), data[idx[:, 0]])
    msg = _error("gathered", (data, idx), {"rows": 5})
    assert msg.startswith(kernel_line(KERNELS, "gather") + ": nisa.dma_copy"), msg
    assert "at view index [5, 0] as a run-time offset, which nothing wrote" in msg


def test_warned_the_kernel_runs_on_what_the_memory_held():
    x = _x(32, 16)
    with pytest.warns(kgolden.UninitializedRead) as rec:
        res = _run("transpose_rows", (x,), {"cols": 4, "rows": 16}, uninitialized="warn")
    assert len(rec) == 1 and "the kernel's output 0" in str(rec[0].message)
    np.testing.assert_array_equal(res.outputs[0][:4], x.T[:4])
    np.testing.assert_array_equal(res.outputs[0][4:], 0)  # the golden's memory: zeros


def test_a_kernel_that_reads_only_what_it_wrote_never_follows_taint(monkeypatch):
    """The fast paths stay: no instruction of a clean kernel takes the taint path."""

    def refuse(*_):
        raise AssertionError("the taint path ran")

    monkeypatch.setattr(taint, "slow", refuse)
    x = _x(16, 8)
    res = _run("clean", (x,))
    np.testing.assert_array_equal(res.outputs[0], 2 * x.T)
    st = res.state[0] if isinstance(res.state, list) else res.state
    assert st.taint.texts == [] and taint.origins(st, "sbuf") is None


def test_sendrecv_carries_the_written_mask_with_the_bytes():
    """What a core sends unwritten arrives tainted on the other core (from the sendrecv that
    read it); what it sends written arrives as written."""
    x = _x(8, 6)
    k = load_file(KERNELS, "swapped")[2]
    got = nki.run(k, (x,), {"cols": 4, "keep": 4}, timing=False).outputs[0]
    np.testing.assert_array_equal(got, np.concatenate([x[:, :4], x[:, :4]], axis=1))
    with pytest.warns(UninitializedRead) as rec:
        nki.run(k, (x,), {"cols": 4, "keep": 5}, timing=False)
    msg = str(rec[0].message)
    assert msg.startswith(kernel_line(KERNELS, "swap") + ": nisa.sendrecv"), msg
    assert "at view index [0, 4], which nothing wrote" in msg and "at index [0, 4]" in msg
