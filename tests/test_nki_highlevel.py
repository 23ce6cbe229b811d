"""The language's high-level functions (docs/nki/highlevel.md): each lowered to the ISA
instructions of the doc's lowering table (read from the doc and compared with the traced
streams), their values against numpy references written here, their rules."""

import os
import re

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from ncrtl.nki import highlevel
from tests.kernel_lines import kernel_line

HERE = os.path.dirname(__file__)
KERNELS = os.path.join(HERE, "kernels", "highlevel.py")
DOC = os.path.join(HERE, os.pardir, "docs", "nki", "highlevel.md")
CALL = load_file(KERNELS, "call")
LINE = kernel_line(KERNELS, "call")

RNG = np.random.default_rng(50)
F = RNG.normal(size=(128, 64)).astype(np.float32)  # [P, F]
F2 = RNG.normal(size=(128, 64)).astype(np.float32)
C = RNG.normal(size=(128, 1)).astype(np.float32)  # one value per partition
R = RNG.normal(size=(1, 64)).astype(np.float32)  # one partition
M = RNG.normal(size=(64, 128)).astype(np.float32)  # [M, K] for x @ y
G = RNG.normal(size=(128, 4, 16)).astype(np.float32)  # [P, G, F]
G1 = RNG.normal(size=(128, 1, 16)).astype(np.float32)
I32 = RNG.integers(-(2**31), 2**31, size=(128, 64)).astype(np.int32)
U32 = RNG.integers(0, 64, size=(128, 8)).astype(np.uint32)

#: Adversarial float32 values: signed zeros, infinities, NaN, ties, tiny and huge.
SPECIAL = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 1.5, -2.5, 1e-30, -1e-30, 3e38, -3e38]
    + [8388607.5, -3.7, 3.7, 1.0, -1.0, 2.0, 7.25],
    np.float32,
)


def _special(shape=(128, 40), seed=0):
    rng = np.random.default_rng(seed)
    return rng.choice(SPECIAL, size=shape).astype(np.float32)


def run(arrays, fn, spec, kw=None, core="v3"):
    """``nl.<fn>`` on ``arrays`` (tests/kernels/highlevel.py ``call``): its result."""
    res = nki.run(CALL, arrays, {"fn": fn, "spec": spec, "kw": kw}, core=core, timing=False)
    return res.outputs[0]


def same(got, want):
    """Bit for bit as float32 values: NaN where NaN (any payload and sign), zeros' signs."""
    got = np.asarray(got, np.float32)
    want = np.asarray(want, np.float32).reshape(got.shape)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), (got[nan != np.isnan(got)], want[nan != np.isnan(got)])
    g, w = got[~nan], want[~nan]
    bad = (g != w) | (np.signbit(g) != np.signbit(w))
    assert not bad.any(), list(zip(g[bad][:5], w[bad][:5]))


# -- the lowering table -------------------------------------------------------------------------


def _table():
    """The doc's lowering table: ``{case: [instruction, ...]}`` (``engine:op(operator)``)."""
    rows = {}
    for line in open(DOC).read().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[1].startswith("`"):
            continue
        case = re.match(r"`([a-z_0-9]+)`", cells[1]).group(1)
        seq = []
        if cells[2] != "none":
            for tok, times in re.findall(
                r"`([a-z_]+:[a-z_0-9]+(?:\([a-z_,]+\))?)`(?: ×(\d+))?", cells[2]
            ):
                seq += [tok] * int(times or 1)
        rows[case] = seq
    return rows


TABLE = _table()

CASES = {
    "tiles": ((F, F2), "add", ("t0", "t1"), None),
    "column": ((F, C), "add", ("t0", "t1"), None),
    "column_first": ((C, F), "subtract", ("t0", "t1"), None),
    "number": ((F,), "subtract", (2.0, "t0"), None),
    "free_broadcast": ((G, G1), "multiply", ("t0", "t1"), None),
    "int_tiles": ((I32, I32), "add", ("t0", "t1"), None),
    "compare": ((F, F2), "greater", ("t0", "t1"), {"dtype": "uint8"}),
    "activation": ((F,), "exp", ("t0",), None),
    "reciprocal": ((F,), "reciprocal", ("t0",), None),
    "negative": ((F,), "negative", ("t0",), None),
    "logical_not": ((F,), "logical_not", ("t0",), None),
    "invert": ((I32,), "invert", ("t0",), None),
    "floor": ((F,), "floor", ("t0",), None),
    "ceil": ((F,), "ceil", ("t0",), None),
    "trunc": ((F,), "trunc", ("t0",), None),
    "copy": ((F,), "copy", ("p0",), None),
    "load": ((F,), "load", ("h0",), None),
    "load_transpose2d": ((F,), "load_transpose2d", ("h0",), None),
    "transpose": ((F,), "transpose", ("t0",), None),
    "matmul": ((M, F), "matmul", ("t0", "t1"), None),
    "matmul_transpose_x": ((F, F2), "matmul", ("t0", "t1"), {"transpose_x": True}),
    "broadcast_free": ((C,), "broadcast_to", ("t0", (128, 64)), None),
    "broadcast_partitions": ((R,), "broadcast_to", ("t0", (128, 64)), None),
    "expand_dims": ((F,), "expand_dims", ("t0", 2), None),
    "zeros_like": ((F,), "zeros_like", ("t0",), None),
    "empty_like": ((F,), "empty_like", ("t0",), None),
    "gather": ((F, U32), "gather_flattened", ("t0", "t1"), None),
    "gather_int32": ((F, U32.astype(np.int32)), "gather_flattened", ("t0", "t1"), None),
    "where": ((F, F2, C.repeat(64, 1)), "where", ("t0", "t1", "t2"), None),
    "where_number": ((F, F2), "where", ("t0", "t1", 0.0), None),
    "sum": ((F,), "sum", ("t0",), {"axis": 1}),
    "max": ((F,), "max", ("t0",), {"axis": 1}),
    "min": ((F,), "min", ("t0",), {"axis": 1}),
    "prod": ((F,), "prod", ("t0",), {"axis": 1}),
    "all": ((F,), "all", ("t0",), {"axis": 1}),
    "mean": ((F,), "mean", ("t0",), {"axis": 1}),
    "var": ((F,), "var", ("t0",), {"axis": 1}),
    "softmax": ((F,), "softmax", ("t0",), {"axis": 1}),
    "softmax_inner": ((G,), "softmax", ("t0",), {"axis": 2}),
    "rms_norm": ((F, F2), "rms_norm", ("t0", "t1"), {"axis": 1, "n": 64}),
    "rand": ((F,), "rand", ((128, 64), "float32"), None),
    "dropout": ((F,), "dropout", ("t0", 0.25), None),
}
#: Cases whose kernel is not ``call``: (kernel, arrays, kwargs, line tag)
SPECIAL_CASES = {
    "store": ("store", (F,), {"dtype": "float32"}, "store"),
    "store_psum": ("store", (F,), {"dtype": "float32"}, "store_psum"),
    "device_print": ("printed", (F,), {"prefix": "x"}, "device_print"),
    "no_reorder": ("ordered", (F, F2), {"block": True}, None),
    "random_seed": ("seeded", (np.full((1, 1), 7, np.int32),), {}, "random_seed"),
}


def _instructions(program, line):
    ins = sorted(
        (i for s in program.streams.values() for i in s if line is None or i.line == line),
        key=lambda i: i.seq,
    )
    out = []
    for i in ins:
        engine = "dma" if i.engine.startswith("dma") else i.engine
        a = i.args
        if i.op == "tensor_scalar":
            detail = ",".join(o for o in (a.get("op0"), a.get("op1")) if o)
        else:
            detail = a.get("op") if isinstance(a.get("op"), str) else None
        out.append(f"{engine}:{i.op}" + (f"({detail})" if detail else ""))
    return out


def test_the_lowering_table_has_a_case_for_each_row():
    assert set(TABLE) == set(CASES) | set(SPECIAL_CASES)


@pytest.mark.parametrize("case", sorted(TABLE))
def test_each_function_emits_the_instructions_of_the_lowering_table(case):
    """Tracing the function emits exactly the documented instructions, in order, on the
    documented engines (only the instructions of the function's own line)."""
    if case in SPECIAL_CASES:
        name, arrays, kw, tag = SPECIAL_CASES[case]
        program = nki.trace(load_file(KERNELS, name), arrays, kw)
        if case == "no_reorder":  # the block changes no stream
            plain = nki.trace(load_file(KERNELS, name), arrays, {"block": False})
            assert _instructions(program, None) == _instructions(plain, None)
            return
        line = kernel_line(KERNELS, tag)
    else:
        arrays, fn, spec, kw = CASES[case]
        program = nki.trace(CALL, arrays, {"fn": fn, "spec": spec, "kw": kw})
        line = LINE
    assert _instructions(program, line) == TABLE[case]


def test_the_lowering_is_the_same_on_every_core_version():
    for core in ("v2", "v4"):
        for case, (arrays, fn, spec, kw) in CASES.items():
            program = nki.trace(CALL, arrays, {"fn": fn, "spec": spec, "kw": kw}, core=core)
            assert _instructions(program, LINE) == TABLE[case], (core, case)


def test_a_function_has_the_streams_and_timing_of_the_same_kernel_written_with_nisa():
    a, b = F, F2
    iso = nki.run(load_file(KERNELS, "by_isa"), (a, b))
    lang = nki.run(load_file(KERNELS, "by_language"), (a, b))

    def streams(p):
        return {
            s: [(i.op, i.args, i.waits, [r.pattern for r in i.srcs]) for i in ins]
            for s, ins in p.streams.items()
        }

    assert streams(iso.program) == streams(lang.program)
    assert iso.report.total_ns == lang.report.total_ns
    assert iso.outputs[0].tobytes() == lang.outputs[0].tobytes()


# -- values: element-wise -------------------------------------------------------------------------

BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "greater": lambda a, b: (a > b).astype(np.float32),
    "equal": lambda a, b: (a == b).astype(np.float32),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("form", ["tiles", "column", "column_first", "number", "number_first"])
def test_binary_functions_compute_numpys_float32_values(name, form):
    """Adversarial values (NaN, infinities, signed zeros, overflow), every broadcasting form:
    the float32 result of numpy's operator, bit for bit."""
    a, b = _special(seed=1), _special(seed=2)
    col = b[:, :1]
    arrays, spec, x, y = {
        "tiles": ((a, b), ("t0", "t1"), a, b),
        "column": ((a, col), ("t0", "t1"), a, col),
        "column_first": ((col, a), ("t0", "t1"), col, a),
        "number": ((a,), ("t0", -2.5), a, np.float32(-2.5)),
        "number_first": ((a,), (-2.5, "t0"), np.float32(-2.5), a),
    }[form]
    with np.errstate(all="ignore"):
        want = BINARY[name](x, y).astype(np.float32)
    same(run(arrays, name, spec), np.broadcast_to(want, a.shape))


def test_a_result_rounds_once_to_dtype():
    """``dtype=nl.bfloat16``: the float32 sum rounded once to nearest even (ties included)."""
    a = np.full((128, 8), 1.0, np.float32)
    b = np.array([2.0**-8, 3 * 2.0**-8, 2.0**-9, -(2.0**-8), 1e-3, 0, 1, 1e38], np.float32)
    b = np.broadcast_to(b, (128, 8)).copy()
    got = run((a, b), "add", ("t0", "t1"), {"dtype": "bfloat16"})
    assert got.dtype == ml_dtypes.bfloat16
    assert got.tobytes() == (a + b).astype(ml_dtypes.bfloat16).tobytes()


def test_free_dimensions_broadcast_with_numpys_rule():
    got = run((G, G1), "multiply", ("t0", "t1"))
    same(got, G * G1)
    got = run((G, C), "subtract", ("t0", "t1"))  # [P, 1] against [P, G, F]
    same(got, G - C[:, :, None])


@pytest.mark.parametrize(
    "a, b, want",
    [
        ("float32", "float32", "float32"),
        ("bfloat16", "float32", "float32"),
        ("bfloat16", "float16", "float32"),
        ("float8_e4m3", "float8_e5m2", "bfloat16"),
        ("float8_e4m3", "bfloat16", "bfloat16"),
        ("int8", "float16", "float16"),
        ("uint8", "int8", "int16"),
        ("uint32", "int32", "int32"),
        ("int16", "int32", "int32"),
        ("bool_", "uint8", "uint8"),
        ("tfloat32", "float32", "float32"),
    ],
)
def test_dtype_promotion(a, b, want):
    assert highlevel.promote(a, b) == want == highlevel.promote(b, a)


def test_default_dtypes_of_results():
    bf = F.astype(ml_dtypes.bfloat16)
    assert run((bf, F.astype(np.float16)), "add", ("t0", "t1")).dtype == np.float32
    i = np.arange(128 * 4, dtype=np.int32).reshape(128, 4)
    assert run((i,), "add", ("t0", 1)).dtype == np.int32
    got = run((i,), "multiply", ("t0", 0.5))
    assert got.dtype == np.float32 and (got == i * np.float32(0.5)).all()
    assert run((i,), "add", ("t0", 2.0)).dtype == np.float32
    assert run((i,), "minimum", ("t0", np.inf)).dtype == np.float32
    assert run((bf,), "exp", ("t0",)).dtype == ml_dtypes.bfloat16
    assert run((F, F2), "less", ("t0", "t1"), {"dtype": "uint8"}).dtype == np.uint8


ACTIVATIONS = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "sin": np.sin,
    "square": np.square,
    "abs": np.abs,
    "relu": lambda x: np.maximum(x, 0),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_functions_within_one_float32_rounding(name):
    """The Scalar Engine's activation: float64 numpy's value within one float32 ulp (the
    engines' own approximations are not documented: docs/nki/arith.md)."""
    x = np.linspace(0.01, 6, 128 * 16).reshape(128, 16).astype(np.float32)
    if name not in ("log", "sqrt"):
        x[:, ::2] *= -1
    got = run((x,), name, ("t0",)).astype(np.float64)
    want = ACTIVATIONS[name](x.astype(np.float64))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert (np.abs(got - want) <= ulp).all()


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "negative", "reciprocal"])
def test_rounding_functions_on_every_float_edge(name):
    """Exact on every finite float32; the documented differences from numpy: +-inf give NaN
    for floor / ceil / trunc, trunc of a value in (-1, 0] gives +0."""
    x = _special(seed=3)
    with np.errstate(all="ignore"):
        want = {"negative": np.negative, "reciprocal": lambda v: np.float32(1) / v}.get(
            name, getattr(np, name)
        )(x)
    if name in ("floor", "ceil", "trunc"):
        want = np.where(np.isinf(x), np.nan, want)
    if name == "trunc":
        want = np.where(want == 0, np.float32(0), want)
    same(run((x,), name, ("t0",)), want)


def test_integer_and_logical_functions():
    same_bits = run((I32,), "invert", ("t0",))
    assert same_bits.dtype == np.int32 and (same_bits == ~I32).all()
    u8 = np.arange(128 * 8, dtype=np.uint8).reshape(128, 8)
    assert (run((u8,), "invert", ("t0",)) == ~u8).all()
    b = (RNG.random((128, 8)) > 0.5).astype(np.float32)
    assert (run((b,), "logical_not", ("t0",)) == 1 - b).all()
    assert (run((I32, I32), "bitwise_and", ("t0", 0xFF)) == I32 & 0xFF).all()


# -- values: reductions and composites -----------------------------------------------------------


def _fold(op, x):
    """Sequential float32 fold of the last axis (the documented order)."""
    acc = x[..., 0].astype(np.float32)
    for j in range(1, x.shape[-1]):
        acc = op(acc, x[..., j]).astype(np.float32)
    return acc


@pytest.mark.parametrize("axis", [2, (1, 2), -1])
def test_reductions_fold_in_order_in_float32(axis):
    x = G.copy()
    x[3, 1, 2] = 0
    axes = (axis,) if isinstance(axis, int) else axis
    n = len(axes) if axis != -1 else 1
    flat = x.reshape(128, -1) if n == 2 else x
    keep = (128, 1) if n == 2 else (128, 4)
    for name, op in (("sum", np.add), ("max", np.maximum), ("min", np.minimum)):
        got = run((x,), name, ("t0",), {"axis": axis})
        assert got.shape == keep
        same(got, _fold(op, flat).reshape(keep))
    got = run((x,), "prod", ("t0",), {"axis": axis, "keepdims": True})
    assert got.shape == ((128, 1, 1) if n == 2 else (128, 4, 1))
    same(got, _fold(np.multiply, flat).reshape(got.shape))
    same(run((x,), "all", ("t0",), {"axis": axis}), np.all(flat != 0, -1).astype(np.float32))
    total = _fold(np.add, flat)
    same(run((x,), "mean", ("t0",), {"axis": axis}), (total / np.float32(flat.shape[-1])))
    mean = (total / np.float32(flat.shape[-1])).astype(np.float32)
    dev = (flat - mean[..., None]).astype(np.float32)
    var = _fold(np.add, (dev * dev).astype(np.float32)) / np.float32(flat.shape[-1])
    same(run((x,), "var", ("t0",), {"axis": axis}), var)


def test_softmax_and_rms_norm():
    x = F * 4
    got = run((x,), "softmax", ("t0",), {"axis": 1})
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    assert np.abs(got - e / e.sum(1, keepdims=True)).max() < 1e-6
    assert np.abs(got.sum(1) - 1).max() < 1e-5
    got = run((G,), "softmax", ("t0",), {"axis": 2}).astype(np.float64)
    e = np.exp(G - G.max(2, keepdims=True).astype(np.float64))
    assert np.abs(got - e / e.sum(2, keepdims=True)).max() < 1e-6
    w = F2
    got = run((x, w), "rms_norm", ("t0", "t1"), {"axis": 1, "n": 64, "epsilon": 1e-3})
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).sum(1, keepdims=True) / 64 + 1e-3) * w
    assert np.abs(got - want).max() < 1e-5 * np.abs(want).max()
    bf = run((x, w), "rms_norm", ("t0", "t1"), {"axis": 1, "n": 64, "dtype": "bfloat16"})
    assert bf.dtype == ml_dtypes.bfloat16
    assert np.abs(bf.astype(np.float64) - want).max() <= 2.0**-8 * np.abs(want).max()


def test_matmul_transpose_and_loads():
    xm = M.astype(ml_dtypes.bfloat16)
    y = F.astype(ml_dtypes.bfloat16)
    got = run((xm, y), "matmul", ("t0", "t1"))
    want = xm.astype(np.float64) @ y.astype(np.float64)
    assert got.dtype == np.float32 and np.abs(got - want).max() < 1e-4
    got = run((y, F2.astype(ml_dtypes.bfloat16)), "matmul", ("p0", "t1"), {"transpose_x": True})
    want = y.astype(np.float64).T @ F2.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.abs(got - want).max() < 1e-4
    assert run((y,), "transpose", ("t0",)).tobytes() == np.ascontiguousarray(y.T).tobytes()
    assert run((M,), "load_transpose2d", ("h0",)).tobytes() == np.ascontiguousarray(M.T).tobytes()
    got = run((M,), "load_transpose2d", ("h0",), {"dtype": "bfloat16"})
    assert got.tobytes() == M.T.astype(ml_dtypes.bfloat16).tobytes()
    got = run((F,), "load", ("h0",), {"dtype": "bfloat16"})
    assert got.tobytes() == F.astype(ml_dtypes.bfloat16).tobytes()
    got = run((F,), "copy", ("p0",), {"dtype": "float16"})
    assert got.tobytes() == F.astype(np.float16).tobytes()


def test_store_from_sbuf_and_psum():
    out = nki.run(load_file(KERNELS, "store"), (F,), {"dtype": "bfloat16"}, timing=False)
    want = F.astype(ml_dtypes.bfloat16)
    assert out.outputs[0].tobytes() == np.stack([want, want]).tobytes()


def test_moves_are_bit_exact():
    """broadcast_to, where, gather_flattened, expand_dims, zeros_like move values unchanged."""
    x = _special((128, 16), seed=4)
    got = run((x[:1],), "broadcast_to", ("t0", (128, 16)))
    assert got.tobytes() == np.broadcast_to(x[:1], (128, 16)).tobytes()
    got = run((x[:100, :1],), "broadcast_to", ("t0", (100, 16)))
    assert got.tobytes() == np.broadcast_to(x[:100, :1], (100, 16)).tobytes()
    cond = RNG.choice(np.array([0, 1, -0.0, np.nan, 2], np.float32), size=(128, 16))
    y = _special((128, 16), seed=5)
    got = run((cond, x, y), "where", ("t0", "t1", "t2"))
    assert got.tobytes() == np.where(cond != 0, x, y).tobytes()
    got = run((cond, x), "where", ("t0", -7.0, "t1"), {"dtype": "float32"})
    assert got.tobytes() == np.where(cond != 0, np.float32(-7), x).tobytes()
    idx = RNG.integers(0, 16, size=(128, 5)).astype(np.int32)
    got = run((x, idx), "gather_flattened", ("t0", "t1"))
    assert got.tobytes() == np.take_along_axis(x, idx, 1).tobytes()
    assert run((x,), "expand_dims", ("t0", -1)).shape == (128, 16, 1)
    assert not run((x,), "zeros_like", ("t0",), {"dtype": "int8"}).any()


def test_an_attention_head_written_with_the_functions():
    q, k, v = (RNG.normal(size=(64, 128)).astype(np.float32) for _ in range(3))
    got = nki.run(load_file(KERNELS, "attention"), (q, k, v), timing=False).outputs[0]
    s = q.astype(np.float64).T @ k
    p = np.exp(s - s.max(1, keepdims=True))
    want = (p / p.sum(1, keepdims=True)) @ v.T
    assert np.abs(got - want).max() < 1e-4


def test_device_print_prints_when_the_golden_runs_it(capsys):
    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    res = nki.run(load_file(KERNELS, "printed"), (x,), {"prefix": "tile x:"})
    out = capsys.readouterr().out
    assert "tile x: [[  0.   1.   2.   3.]" in out and "tile x: hbm [[" in out
    recs = [r for s, rs in res.report.records.items() if "dma" in s for r in rs]
    assert sum(r.ins.op == "device_print" and r.end > r.start for r in recs) == 2
    nki.run(load_file(KERNELS, "printed"), (x,), {"prefix": "quiet"}, golden=False)
    assert "quiet" not in capsys.readouterr().out


# -- rules ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arrays, fn, spec, kw, message",
    [
        ((F, F[:64]), "add", ("t0", "t1"), None, "nl.add: tiles [128, 64] and [64, 64]: partition"),
        ((F, G), "add", ("t0", "t1"), None, "the free dimensions do not broadcast"),
        ((F,), "add", (1.0, 2.0), None, "nl.add: x=1.0 and y=2.0 are numbers"),
        ((F,), "exp", ("h0",), None, "nl.exp: x arg0 is in device memory (HBM): load it"),
        (
            (F,),
            "load",
            ("t0",),
            None,
            "nl.load: src load is in sbuf; it must be in device memory (HBM)",
        ),
        ((F,), "sum", ("t0",), {"axis": 0}, "nl.sum: axis 0 is the partition dimension"),
        ((G,), "max", ("t0",), {"axis": 1}, "nl.max: axis [1] of x [128, 4, 16]: the reduced"),
        ((G,), "mean", ("t0",), {"axis": 3}, "nl.mean: axis 3 is outside the 3 dimensions"),
        ((F, F2), "matmul", ("t0", "t1"), None, "nl.matmul: x [128, 64] @ y [128, 64]: x's"),
        ((C,), "broadcast_to", ("t0", (128, 2, 3)), None, "nl.broadcast_to: x [128, 1] does"),
        ((F,), "expand_dims", ("t0", 0), None, "nl.expand_dims: axis 0: a tile's first"),
        ((F, F), "abs_max", ("t0", "t1"), None, "nl.abs_max: lowered to nisa.tensor_tensor:"),
        ((F,), "add", ("t0", "t0"), {"dtyp": "float32"}, "nl.add: no argument 'dtyp'"),
        ((F,), "softmax", (), None, "nl.softmax: missing argument 'x'"),
        ((F,), "where", ("t0", "t0"), None, "nl.where: missing argument 'y'"),
        ((R[0],), "load", ("h0",), None, "nl.load: src [64] is 1-D"),
        ((np.ones((256, 4), np.float32),), "load", ("h0",), None, "at most 128 (load a slice"),
        ((F,), "device_print", (3, "t0"), None, "nl.device_print: print_prefix must be a str"),
        (
            (F, np.ones((128, 600), np.float32)),
            "matmul",
            ("t0", "t1"),
            {"transpose_x": True},
            "nl.matmul: lowered to nisa.nc_matmul: moving free size N=600: at most 512",
        ),
        ((G,), "transpose", ("t0",), None, "nl.transpose: x [128, 4, 16] must be a 2-D tile"),
        ((F, F[:64], F), "where", ("t0", "t1", "t2"), None, "nl.where: tiles [128, 64] and"),
    ],
)
def test_rules_name_the_function_and_the_kernels_line(arrays, fn, spec, kw, message):
    with pytest.raises(nki.NkiError) as e:
        nki.trace(CALL, arrays, {"fn": fn, "spec": spec, "kw": kw})
    text = str(e.value)
    assert text.startswith(f"{LINE}: ") and message in text, text
    assert "\n" not in text and "ncrtl/nki" not in text


def test_a_lowered_instructions_rule_names_the_core():
    got = run((F, F2), "abs_max", ("t0", "t1"), core="v4")
    same(got, np.where(np.abs(F) > np.abs(F2), F, F2))
    with pytest.raises(nki.NkiError, match=r"needs NeuronCore-v4, the kernel targets v3$"):
        nki.trace(CALL, (F, F2), {"fn": "abs_max", "spec": ("t0", "t1")}, core="v3")


def test_operator_tokens_stay_operators():
    """``nl.add`` is still what an nki.isa call takes as op=, and every token of the
    reference's element-wise functions is callable."""
    import ncrtl.nki.language as nl

    assert repr(nl.add) == "nl.add" and nl.add.name == "add"
    assert set(highlevel.FUNCTIONS) == set(nl._OPS) - {"average", "prelu", "bypass"}


def test_matmul_of_two_dtypes_runs_in_the_wider():
    """``nl.matmul`` of a float32 and a bfloat16 tile: the bfloat16 one is copied to float32
    (exactly) and the product is the float32 mode's (the older API's attention does so)."""
    import ml_dtypes

    @nki.jit
    def mixed(a, b):
        import nki.language as nl_

        x = nl_.load(a)
        y = nl_.load(b)
        p = nl_.matmul(x, y, transpose_x=True)
        out = nl_.ndarray(p.shape, nl_.float32, buffer=nl_.shared_hbm)
        nl_.store(out, nl_.copy(p))
        return out

    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 48)).astype(ml_dtypes.bfloat16)
    got = nki.run(mixed, (a, b), timing=False).outputs[0]
    # bit for bit the float32 matmul of the same values (bfloat16 -> float32 is exact)
    same = nki.run(mixed, (a, b.astype(np.float32)), timing=False).outputs[0]
    assert got.tobytes() == same.tobytes()
    want = a.astype(np.float64).T @ b.astype(np.float64)
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
