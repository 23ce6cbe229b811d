"""The older ``neuronxcc.nki`` language (docs/nki/legacy_language.md): index expressions and the
views they make, masks, block dimensions, tiles as values (an assignment right after a call
writes its view directly), that era's ``nisa`` forms, their values against numpy references
written here and their instruction streams; the errors, one line at the kernel's line."""

import importlib
import os

import numpy as np
import pytest

import ncrtl.nki as cur
from ncrtl.kernels import load_file
from ncrtl.nki import NkiError, NotModelled
from tests.kernel_lines import kernel_line

HERE = os.path.dirname(__file__)
KERNELS = os.path.join(HERE, "kernels", "legacy.py")
RNG = np.random.default_rng(51)
# the module (the package answers names it does not have with NotModelled stand-ins)
ix = importlib.import_module("ncrtl.nki.legacy.index")


def kernel(name):
    return load_file(KERNELS, name)


def ops(program, line=None):
    """``engine:op`` of each instruction (of the kernel line ``line``), in program order."""
    ins = sorted(
        (i for s in program.streams.values() for i in s if line is None or i.line == line),
        key=lambda i: i.seq,
    )
    return [
        f"{'dma' if e.startswith('dma') or e.startswith('q') else e}:{i.op}"
        for e, i in ((i.engine, i) for i in ins)
    ]


def f32(*shape):
    return RNG.normal(size=shape).astype(np.float32)


# -- index expressions -------------------------------------------------------------------------


def test_index_expressions_are_affine_and_broadcast_as_numpy():
    i = ix.arange(4)[:, None]
    j = ix.arange(2, 10, 2)[None, :]
    e = 3 + i * 5 - j
    assert e.shape == (4, 4)
    want = 3 + np.arange(4)[:, None] * 5 - np.arange(2, 10, 2)[None, :]
    assert (e.values() == want).all()
    g = ix.mgrid[0:3, 0:5]
    assert (g.p.values() == np.mgrid[0:3, 0:5][0]).all() and g.x.shape == (1, 5)
    assert (e[1:3, ::2].values() == want[1:3, ::2]).all()


@pytest.mark.parametrize(
    "expr, rule",
    [
        (lambda i, j: i * j, "not affine"),
        (lambda i, j: i // 2, "not affine"),
        (lambda i, j: i % 3, "not affine"),
    ],
)
def test_index_expressions_that_are_not_affine_are_one_line(expr, rule):
    i, j = ix.arange(4)[:, None], ix.arange(4)[None, :]
    with pytest.raises(NkiError, match=rule) as e:
        expr(i, j)
    assert "\n" not in str(e.value)


def test_masks_are_boxes_of_the_iteration_space():
    i, j = ix.arange(64)[:, None], ix.arange(16)[None, :]
    assert ix.box_of("t", (100 - 64 > i) & (j >= 3)) == {-2: (0, 36), -1: (3, 16)}
    assert ix.box_of("t", i + 64 < 100) == {-2: (0, 36)}
    with pytest.raises(NkiError, match="bounds one axis"):
        ix.box_of("t", i + j < 8)


# -- the tutorials' patterns ----------------------------------------------------------------


def test_tiles_indexed_by_expressions_on_a_launch_grid():
    a, b = f32(64, 128), f32(64, 128)
    got = kernel("add_tiles")[2, 2](a, b)
    np.testing.assert_array_equal(got, a + b)


def test_a_copy_assigned_to_a_view_is_one_instruction_with_both_access_patterns():
    x = np.arange(5 * 12, dtype=np.int8).reshape(5, 12)
    k = kernel("free_transpose")
    np.testing.assert_array_equal(k(x, 3, 4), x.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12))
    program = cur.run(k, [x, 3, 4], timing=False).program
    assert ops(program, kernel_line(KERNELS, "copy")) == ["vector:tensor_copy"]


def test_pooling_reduces_axes_that_are_not_the_last_through_a_permuted_view():
    x = np.arange(2 * 6 * 8, dtype=np.float16).reshape(2, 6, 8)
    got = kernel("pool")(x, 2)
    want = x.reshape(2, 3, 2, 4, 2).astype(np.float32).mean(axis=(2, 4))
    np.testing.assert_array_equal(got, want.astype(np.float16))


def test_masks_run_each_instruction_on_the_partial_tile():
    x = f32(100, 16)
    k = kernel("masked_exp")
    got = k(x)
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)
    program = cur.run(k, [x], timing=False).program
    ins = [i for s in program.streams.values() for i in s if i.op == "activation"]
    assert [i.dsts[0].size for i in ins] == [64 * 16, 36 * 16]


def test_block_dimensions_nisa_results_and_in_place_accumulation():
    nb, p, f = 2, 32, 16
    d = RNG.random((nb, p, f), dtype=np.float32) * 0.1
    a = -RNG.random((nb, p, 2), dtype=np.float32)
    b = RNG.random((nb, p, f), dtype=np.float32)
    got = kernel("blocks_scan")(d, a, b)
    want = np.zeros_like(d)
    for r in range(2):
        da = np.exp(d * a[:, :, r : r + 1])
        h = np.zeros((nb, p))
        for t in range(f):
            h = da[..., t] * h + b[..., t]
            want[..., t] += h
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


def test_matmul_accumulates_in_psum_without_copies():
    x, y = f32(96, 64), f32(96, 32)
    k = kernel("psum_accumulate")
    got = k(x, y)
    want = x.T.astype(np.float64) @ y
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], want, rtol=1e-4, atol=1e-4)
    program = cur.run(k, [x, y], timing=False).program
    line = kernel_line(KERNELS, "accumulate")
    assert ops(program, line) == ["tensor:matmul"] * 3
    acc = [i.args["accumulate"] for s in program.streams.values() for i in s if i.line == line]
    assert acc == [False, True, True]  # after the memset: the group's first write, then adds
    assert not any(i.op == "tensor_tensor" for s in program.streams.values() for i in s)


def test_operators_and_functions_on_tiles():
    a, b = f32(16, 24), RNG.random((16, 24), dtype=np.float32) + 0.5
    got = kernel("operators")(a, b)
    want = [a + b, a * 2, 1 - a, -a / b, np.maximum(a, b), a - a.max(1, keepdims=True)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_language_level_attention():
    q, k, v = f32(32, 64), f32(32, 64), f32(32, 64)
    got = kernel("attention")(q, k, v)
    qk = q.T.astype(np.float64) @ k
    e = np.exp(qk - qk.max(1, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(1, keepdims=True)) @ v.T, rtol=1e-4, atol=1e-4)


def test_iota_and_affine_select_take_index_expressions():
    x = f32(16, 16)
    got = kernel("causal")(x)
    iq, ik = np.arange(16)[:, None], np.arange(16)[None, :]
    np.testing.assert_array_equal(got[0], (iq * 3 + ik).astype(np.float32))
    np.testing.assert_array_equal(got[1], np.where(iq >= ik, x, -1000.0))


def test_loop_reduce_accumulates_across_the_loop():
    x = f32(3, 8, 16)
    np.testing.assert_array_equal(kernel("reduce_loop")(x), x.max(axis=0))


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case, cls, rule",
    [
        ("product", NkiError, "not affine"),
        ("mask", NkiError, "bounds one axis per comparison"),
        ("block", NkiError, "a block is selected by an integer"),
        ("unmodelled", NotModelled, "language.atomic_rmw is not modelled"),
        ("bounds", NkiError, "nl.load: lowered to nisa.dma_copy: src x"),
        ("shape", NkiError, "elements"),
    ],
)
def test_errors_are_one_line_at_the_kernel_line(case, cls, rule):
    x = f32(8, 8)
    with pytest.raises(cls, match=rule) as e:
        kernel("bad")(x, case)
    text = str(e.value)
    assert "\n" not in text and text.startswith(kernel_line(KERNELS, case))


def test_a_tile_of_indices_gathers_rows_by_dma():
    table = f32(40, 24)
    idx = RNG.integers(0, 40, size=(1, 16)).astype(np.int32)
    k = kernel("gather_rows")
    rows, top = k(table, idx)
    np.testing.assert_array_equal(rows, table[idx[0]])
    np.testing.assert_array_equal(top[:, 0], table[idx[0]].max(axis=1))
    program = cur.run(k, [table, idx], timing=False).program
    assert ops(program, kernel_line(KERNELS, "gather")) == ["dma:dma_copy"]


def test_only_a_result_nothing_read_yet_is_written_in_place():
    a = f32(16, 8) * 0.1
    k = kernel("kept")
    got = k(a)
    np.testing.assert_allclose(got[0], np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(got[1], np.exp(np.exp(a)), rtol=1e-6)
    program = cur.run(k, [a], timing=False).program
    assert ops(program, kernel_line(KERNELS, "kept")) == ["vector:tensor_copy"]
    assert ops(program, kernel_line(KERNELS, "direct")) == ["scalar:activation"]


def test_blocks_that_overflow_psum_are_spilled_to_sbuf():
    x, y = f32(16, 32), f32(16, 512)
    k = kernel("spilled")
    got = k(x, y)
    want = x.T.astype(np.float64) @ y
    for i in range(16):
        np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[16], 2 * want, rtol=1e-4, atol=1e-4)
    program = cur.run(k, [x, y], timing=False).program
    line = kernel_line(KERNELS, "spilled")
    assert ops(program, line) == ["tensor:matmul", "vector:tensor_copy"] * 16


def test_the_other_functions_return_tiles():
    a, b = f32(16, 32), f32(16, 32)
    seed = np.array([[7]], np.int32)
    got = kernel("misc")(a, b, seed)
    w = np.maximum(a, b)
    np.testing.assert_array_equal(got[0], a.T)
    np.testing.assert_allclose(got[1], (w - w.mean(1, keepdims=True)).T, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[2], a.T)  # rate 0: every value kept
    import ml_dtypes

    np.testing.assert_array_equal(got[3], a.T.astype(ml_dtypes.bfloat16).astype(np.float32))
