"""The Vector, Scalar and GpSimd arithmetic and reductions (docs/nki/arith.md): every operator
and activation function against references written here (plain numpy in float64, Python
loops), on adversarial values; the accumulator registers across instructions; the reductions'
order; their costs against the closed forms; one rule per class, each naming the kernel's
line."""

import math
import os

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from tests.kernel_lines import kernel_line

ARITH = os.path.join(os.path.dirname(__file__), "kernels", "arith.py")
F32 = np.float32
P, F = 8, 16  # small tiles: every value an adversarial one


def _run(name, args, core="v3", **kw):
    return nki.run(load_file(ARITH, name), args, kw, core=core, timing=False).outputs


def _adversarial(rng, p=P, f=F):
    """Tiles a, b holding NaN, +-inf, +-0, ties, small and large values, in every pairing."""
    specials = np.array(
        [
            np.nan,
            np.inf,
            -np.inf,
            0.0,
            -0.0,
            1.0,
            -1.0,
            2.5,
            -2.5,
            3.0,
            7.0,
            -7.0,
            0.5,
            1e-30,
            3e38,
            -1.5,
        ],
        F32,
    )
    a = np.resize(specials, (p, f))
    b = np.resize(np.roll(specials, 5), (p, f))
    a[4:] = rng.standard_normal((p - 4, f)) * 4
    b[4:] = rng.standard_normal((p - 4, f)) * 4
    b[4:, :4] = a[4:, :4]  # equal values
    b[5:, 4:8] = -a[5:, 4:8]  # equal magnitudes
    return a.astype(F32), b.astype(F32)


def _same(got, want):
    """Equal bit for bit, NaN for NaN (any payload), -0 apart from +0."""
    got, want = np.asarray(got, F32), np.asarray(want, F32)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), np.argwhere(np.isnan(got) != nan)[:5]
    bad = ~nan & (got.view(np.uint32) != want.view(np.uint32))
    assert not bad.any(), (np.argwhere(bad)[:5], got[bad][:5], want[bad][:5])


def _py_mod(x, y):
    if y == 0 or math.isnan(x) or math.isnan(y) or math.isinf(x):
        return math.nan
    return x % y


def _py_fmod(x, y):
    if y == 0 or math.isnan(x) or math.isnan(y) or math.isinf(x):
        return math.nan
    return math.fmod(x, y)


def _py_abs_pick(bigger):
    def pick(x, y):
        if math.isnan(x) or math.isnan(y):
            return y if math.isnan(y) else (x if math.isnan(x) else y)
        return x if (abs(x) > abs(y) if bigger else abs(x) < abs(y)) else y

    return pick


def _cmp(fn):
    return lambda x, y: 1.0 if fn(x, y) else 0.0


def _logical(fn):
    return lambda x, y: 1.0 if fn(x != 0, y != 0) else 0.0


def _pow(x, y):
    with np.errstate(all="ignore"):
        return float(np.power(np.float64(x), np.float64(y)))


def _div(x, y):
    with np.errstate(all="ignore"):
        return float(np.float64(x) / np.float64(y))


# The float64 result of each operator, element by element (float32 inputs: +, -, *, / and
# their float64 results round to the float32 result exactly)
BINARY = {
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x * y,
    "divide": _div,
    "maximum": lambda x, y: math.nan if math.isnan(x) or math.isnan(y) else max(x, y),
    "minimum": lambda x, y: math.nan if math.isnan(x) or math.isnan(y) else min(x, y),
    "power": _pow,
    "mod": _py_mod,
    "fmod": _py_fmod,
    "equal": _cmp(lambda x, y: x == y),
    "not_equal": _cmp(lambda x, y: x != y),
    "greater": _cmp(lambda x, y: x > y),
    "greater_equal": _cmp(lambda x, y: x >= y),
    "less": _cmp(lambda x, y: x < y),
    "less_equal": _cmp(lambda x, y: x <= y),
    "logical_and": _logical(lambda x, y: x and y),
    "logical_or": _logical(lambda x, y: x or y),
    "logical_xor": _logical(lambda x, y: x != y),
    "abs_max": _py_abs_pick(True),
    "abs_min": _py_abs_pick(False),
}


def _elementwise(fn, a, b):
    out = np.empty(a.shape, np.float64)
    for i in np.ndindex(a.shape):
        with np.errstate(all="ignore"):
            try:
                out[i] = fn(float(a[i]), float(b[i]))
            except OverflowError:
                out[i] = math.inf
    with np.errstate(all="ignore"):
        return out.astype(F32)


def test_every_binary_operator_on_adversarial_values():
    """tensor_tensor with each arithmetic operator: float32 operands, one float32 result per
    element (comparisons and logical operators 1.0 / 0.0; abs_max / abs_min the signed value
    of the larger / smaller magnitude, the second on a tie; mod the divisor's sign, fmod the
    dividend's), NaN, infinities and -0 as IEEE gives them."""
    a, b = _adversarial(np.random.default_rng(1))
    ops = [op for op in BINARY if op not in ("abs_max", "abs_min", "power")]
    (out,) = _run("binary", (a, b), ops=ops)
    for k, op in enumerate(ops):
        if op in ("mod", "fmod"):  # the zero and infinite divisors' NaN aside, the remainder
            ok = np.isfinite(a) & (b != 0)
            _same(out[k][ok], _elementwise(BINARY[op], a, b)[ok])
            assert np.isnan(out[k][(b == 0) | np.isinf(a)]).all(), op
        else:
            _same(out[k], _elementwise(BINARY[op], a, b))
    (out,) = _run("binary", (a, b), core="v4", ops=["abs_max", "abs_min"])
    for k, op in enumerate(["abs_max", "abs_min"]):
        fine = ~np.isnan(a) & ~np.isnan(b)
        _same(out[k][fine], _elementwise(BINARY[op], a, b)[fine])


def test_power_runs_on_gpsimd_and_rounds_once():
    a = np.abs(np.random.default_rng(2).standard_normal((P, F)).astype(F32)) + F32(0.5)
    b = np.random.default_rng(3).standard_normal((P, F)).astype(F32)
    res = nki.run(load_file(ARITH, "binary"), (a, b), {"ops": ["power"]}, core="v3")
    np.testing.assert_allclose(res.outputs[0][0], _elementwise(_pow, a, b), rtol=2**-23)
    assert [i.engine for i in res.program.streams["gpsimd"]] == ["gpsimd"]


def test_one_rounding_to_a_narrow_destination():
    """a + b rounds once from float32 to bfloat16 (not through a wider type first)."""
    a, b = _adversarial(np.random.default_rng(4))
    (out,) = _run("binary", (a, b), ops=["add", "multiply"], dtype="bfloat16")
    with np.errstate(all="ignore"):
        want = np.stack([(a + b).astype(ml_dtypes.bfloat16), (a * b).astype(ml_dtypes.bfloat16)])
    got = out.view(np.uint16)
    fine = ~np.isnan(want.astype(F32))
    assert (got[fine] == want.view(np.uint16)[fine]).all()


def _bits(v, width=32):
    return int(v) & ((1 << width) - 1)


@pytest.mark.parametrize("dtype", ["int32", "uint16", "int8"])
def test_bitvec_operators_work_on_integer_bits(dtype):
    """bitwise and / or / xor and the logical shifts on the operands' 32-bit patterns (an
    integer sign- or zero-extended), the destination keeping the low bits (no saturation);
    shift counts past 31 give 0; invert the complement."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    a = rng.integers(info.min, info.max, (P, F), endpoint=True).astype(dtype)
    b = rng.integers(info.min, info.max, (P, F), endpoint=True).astype(dtype)
    a[0, :4] = [info.min, info.max, -1 if info.min else 0, 0]
    (out,) = _run("binary", (a, b), ops=["bitwise_and", "bitwise_or", "bitwise_xor"])
    width = 8 * np.dtype(dtype).itemsize
    for k, fn in enumerate((lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x ^ y)):
        want = [[_bits(fn(_bits(x), _bits(y)), width) for x, y in zip(r, s)] for r, s in zip(a, b)]
        assert (out[k].astype(np.int64) & ((1 << width) - 1) == np.array(want)).all()
    shifts = np.resize(np.array([0, 1, 3, 7, 31, 32, 40], dtype), (P, F))
    (out,) = _run("binary", (a, shifts), ops=["left_shift", "right_shift"])
    for k, fn in enumerate((lambda x, n: x << n, lambda x, n: x >> n)):
        want = [
            [_bits(fn(_bits(x), int(n)) if 0 <= n < 32 else 0, width) for x, n in zip(r, s)]
            for r, s in zip(a, shifts)
        ]
        assert (out[k].astype(np.int64) & ((1 << width) - 1) == np.array(want)).all(), dtype
    col = np.zeros((P, 1), dtype)
    (out,) = _run("scalar", (a, col), ops=["invert"], operand=None)
    want = [[_bits(~_bits(x), width) for x in r] for r in a]
    assert (out[0].astype(np.int64) & ((1 << width) - 1) == np.array(want)).all()


def test_int32_tensor_tensor_is_native_on_gpsimd_and_float32_on_vector():
    """All-int32 tiles default to the GpSimd engine's exact integer arithmetic (wrapping at 32
    bits, division truncating toward zero, a zero divisor giving 0); engine=vector computes in
    float32 and saturates."""
    a = np.array([[2**31 - 1, -7, 7, 2**24 + 1, 5, -(2**31)]] * 2, np.int32)
    b = np.array([[1, 2, -2, 0, 0, -1]] * 2, np.int32)
    res = nki.run(load_file(ARITH, "binary"), (a, b), {"ops": ["add", "divide", "mod"]})
    out = res.outputs[0]
    assert out[0, 0].tolist() == [-(2**31), -5, 5, 2**24 + 1, 5, 2**31 - 1]
    assert out[1, 0].tolist() == [2**31 - 1, -3, -3, 0, 0, -(2**31)]
    assert out[2, 0].tolist() == [0, 1, -1, 0, 0, 0]
    assert {i.engine for i in res.program.streams["gpsimd"]} == {"gpsimd"}
    (out,) = _run("binary", (a, b), ops=["add"], engine="vector")
    assert out[0, 0].tolist() == [2**31 - 1, -5, 5, 2**24, 5, -(2**31)]  # float32, saturated


def test_tensor_scalar_operands_reverse_and_unary_operators():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((P, F)).astype(F32)
    col = rng.standard_normal((P, 1)).astype(F32)
    (out,) = _run("scalar", (a, col), ops=["subtract", "divide"], operand="col", reverse=True)
    _same(out[0], (col.astype(np.float64) - a).astype(F32))
    _same(out[1], (col.astype(np.float64) / a).astype(F32))
    (out,) = _run("scalar", (a, col), ops=["multiply"], operand=3.0, op1="maximum", operand1=0.5)
    _same(out[0], np.maximum((a * F32(3)).astype(F32), F32(0.5)))
    ops = ["abs", "square", "relu", "rsqrt", "reciprocal"]
    (out,) = _run("scalar", (np.abs(a) + F32(0.1), col), ops=ops, operand=None)
    x = (np.abs(a) + F32(0.1)).astype(np.float64)
    for k, want in enumerate((x, x * x, x, 1 / np.sqrt(x), 1 / x)):
        _same(out[k], want.astype(F32))


def _f64_activation(op, x):
    """Each activation function from its definition, in float64 per element."""
    s = lambda v: 1 / (1 + math.exp(-v)) if v > -700 else 0.0  # noqa: E731
    sp = lambda v: math.log1p(math.exp(v)) if v < 30 else v + math.log1p(math.exp(-v))  # noqa: E731
    phi = lambda v: math.exp(-v * v / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    fns = {
        "copy": lambda v: v,
        "square": lambda v: v * v,
        "abs": abs,
        "sign": lambda v: (v > 0) - (v < 0),
        "relu": lambda v: max(v, 0.0),
        "sigmoid": s,
        "tanh": math.tanh,
        "exp": math.exp,
        "log": math.log,
        "sqrt": math.sqrt,
        "rsqrt": lambda v: 1 / math.sqrt(v),
        "reciprocal": lambda v: _div(1.0, v),
        "sin": math.sin,
        "arctan": math.atan,
        "softplus": sp,
        "mish": lambda v: v * math.tanh(sp(v)),
        "erf": math.erf,
        "erf_dx": lambda v: 2 / math.sqrt(math.pi) * math.exp(-v * v),
        "gelu": lambda v: v * 0.5 * (1 + math.erf(v / math.sqrt(2))),
        "gelu_dx": lambda v: 0.5 * (1 + math.erf(v / math.sqrt(2))) + v * phi(v),
        "gelu_apprx_tanh": lambda v: (
            0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
        ),
        "gelu_apprx_sigmoid": lambda v: v * s(1.702 * v),
        "gelu_apprx_sigmoid_dx": lambda v: s(1.702 * v) * (1 + 1.702 * v * (1 - s(1.702 * v))),
        "silu": lambda v: v * s(v),
        "silu_dx": lambda v: s(v) * (1 + v * (1 - s(v))),
        "prelu": lambda v: max(v, 0.0),
    }
    return np.array([[fns[op](float(v)) for v in row] for row in x]).astype(F32)


def test_every_activation_function():
    """activation with each function of the reference against its definition in float64,
    rounded to float32: exact where numpy float32 is exact, within one float32 ulp for the
    transcendental ones (numpy's, not the hardware's undocumented approximation); scale and
    bias before it."""
    from ncrtl.model.kernel.values import ACTIVATIONS

    rng = np.random.default_rng(7)
    a = (rng.standard_normal((P, F)) * 2).astype(F32)
    a[0, :3] = [0.0, -0.0, 1.0]
    ops = sorted(ACTIVATIONS)
    positive = {"log", "sqrt", "rsqrt"}
    (out,) = _run("activations", (a,), ops=[o for o in ops if o not in positive])
    (pos,) = _run("activations", (np.abs(a) + F32(0.25),), ops=sorted(positive))
    got = dict(zip([o for o in ops if o not in positive], out)) | dict(zip(sorted(positive), pos))
    for op in ops:
        x = np.abs(a) + F32(0.25) if op in positive else a
        want = _f64_activation(op, x)
        ulp = np.spacing(np.abs(want)).astype(np.float64)
        with np.errstate(invalid="ignore"):
            err = np.abs(got[op].astype(np.float64) - want)
        assert ((got[op] == want) | (err <= ulp)).all(), (op, err.max())
    (out,) = _run("activations", (a,), ops=["copy"], scale=2.0, bias=None)
    _same(out[0], a * F32(2))


def _seq(values, acc=0.0, op=lambda s, v: s + v):
    acc = F32(acc)
    for v in values:
        acc = F32(op(acc, F32(v)))
    return acc


def test_scalar_engine_accumulator_across_instructions():
    """activation's registers: reset_reduce then reduce fold each row in order in float32
    (1e8 + 1 + 1 ... stays 1e8 where a float64 sum would not), read out by a second
    instruction; reset alone reads 0; activation_reduce of squares."""
    a = np.full((P, F), 1.0, F32)
    a[:, 0] = 1e8
    b = np.random.default_rng(8).standard_normal((P, F)).astype(F32)
    res = nki.run(load_file(ARITH, "accumulate"), (a, b), core="v3")
    r, _ = res.outputs
    for i in range(P):
        assert r[i, 0] == _seq(b[i], _seq(a[i]))
        assert r[i, 2] == _seq(a[i] * a[i])
    assert (r[:, 1] == 0).all()
    assert r[0, 0] != F32(np.float64(a[0]).sum() + np.float64(b[0]).sum())
    ops = [i.op for i in res.program.streams["scalar"]]
    assert ops.count("accumulator_read") == 3 and ops.count("activation") == 4


def test_activate2_pipeline_and_reductions():
    rng = np.random.default_rng(9)
    a = rng.standard_normal((P, F)).astype(F32)
    d, r = _run(
        "activate2_kernel",
        (a,),
        core="v4",
        op="prelu",
        op0="multiply",
        op1="subtract",
        imm0=2.0,
        imm1=0.5,
        reduce_op="abs_max",
        relu_param=0.25,
    )
    t = ((a * F32(2)).astype(F32) - F32(0.5)).astype(F32)
    want = np.where(t > 0, t, (t * F32(0.25)).astype(F32))
    _same(d, want)
    for i in range(P):
        assert r[i, 0] == _seq(want[i], 0.0, lambda s, v: v if abs(v) >= abs(s) else s)
    d, r = _run(
        "activate2_kernel",
        (a,),
        core="v4",
        op="exp",
        op0="subtract",
        op1="bypass",
        imm0=1.0,
        imm1=0.0,
        reduce_op="minimum",
        reverse0=True,
    )
    want = _f64_activation("exp", (F32(1) - a).astype(F32))
    np.testing.assert_allclose(d, want, rtol=2**-23)
    assert (r[:, 0] == d.min(axis=1)).all()


@pytest.mark.parametrize(
    "op, axis, keepdims, negate",
    [
        ("add", 2, False, False),
        ("add", (1, 2), True, True),
        ("subtract", -1, False, False),
        ("multiply", 2, False, False),
        ("maximum", (1, 2), False, True),
        ("minimum", 2, True, False),
        ("logical_or", 2, False, False),
    ],
)
def test_tensor_reduce_folds_in_order(op, axis, keepdims, negate):
    """tensor_reduce over the last free axes, folded from the first element in order in
    float32 (subtract: x0 - x1 - ...), negated after, dst of the kept dimensions."""
    rng = np.random.default_rng(10)
    a = rng.standard_normal((P, 4, 8)).astype(F32)
    a[0, 0, :] = [1e8, 1, 1, 1, 1, 1, 1, 1]
    a[1, 0, :2] = [np.nan, 1.0]
    (out,) = _run("reduce", (a,), op=op, axis=axis, keepdims=keepdims, negate=negate)
    fold = {
        "add": lambda s, v: s + v,
        "subtract": lambda s, v: s - v,
        "multiply": lambda s, v: s * v,
        "maximum": lambda s, v: s if np.isnan(s) or s >= v else v,
        "minimum": lambda s, v: s if np.isnan(s) or s <= v else v,
        "logical_or": lambda s, v: F32(1.0 if (s != 0) or (v != 0) else 0.0),
    }[op]
    axes = axis if isinstance(axis, tuple) else (axis % 3,)
    rows = a.reshape(P, -1) if len(axes) == 2 else a.reshape(P * 4, 8)
    start = (lambda r: F32(1.0 if r[0] != 0 else 0.0)) if op == "logical_or" else (lambda r: r[0])
    want = np.array([_seq(r[1:], start(r), fold) for r in rows], F32)
    if negate:
        want = -want
    _same(out.reshape(-1), want)


def test_tensor_reduce_bitvec_and_partition_reduce():
    rng = np.random.default_rng(11)
    ints = rng.integers(0, 2**20, (P, 2, 8)).astype(np.int32)
    (out,) = _run("reduce", (ints,), op="bitwise_xor", axis=2)
    want = [[np.bitwise_xor.reduce(r) for r in t] for t in ints]
    assert (out.reshape(P, 2) == np.array(want)).all()
    a = rng.standard_normal((P, F)).astype(F32)
    (out,) = _run("partition_reduce", (a,), op="add")
    _same(out[0], np.array([_seq(a[1:, j], a[0, j]) for j in range(F)], F32))
    (out,) = _run("partition_reduce", (a,), op="average")
    want = np.array([_seq(a[1:, j], a[0, j]) for j in range(F)], F32) / F32(P)
    _same(out[0], want.astype(F32))


def test_scans_and_cumulative_registers():
    """tensor_tensor_scan (a * prev + b from col; reversed: b - (prev - a)), and
    tensor_scalar_cumulative's running register (reset, continued, loaded, max)."""
    rng = np.random.default_rng(12)
    a = rng.standard_normal((P, F)).astype(F32)
    b = rng.standard_normal((P, F)).astype(F32)
    col = rng.standard_normal((P, 1)).astype(F32)
    (out,) = _run("scans", (a, b, col))
    for i in range(P):
        prev = col[i, 0]
        for j in range(F):
            prev = F32(F32(a[i, j] * prev) + b[i, j])
            assert out[0, i, j] == prev
        prev = col[i, 0]
        for j in range(F):
            prev = F32(b[i, j] - F32(prev - a[i, j]))
            assert out[1, i, j] == prev
        run = F32(0)
        for k, start in ((2, 0.0), (3, None), (4, 5.0)):
            run = F32(start) if start is not None else run
            for j in range(F):
                run = F32(F32(a[i, j] * 2) + run)
                assert out[k, i, j] == run, (k, i, j)
        run = F32(-np.inf)
        for j in range(F):
            run = max(F32(a[i, j] + col[i, 0]), run)
            assert out[5, i, j] == run


def test_vector_accumulator_instructions():
    """tensor_scalar_reduce (max negated on read-out; load_reduce 10 then reduce of |b|; min
    of a - 1), scalar_tensor_tensor both ways round, reciprocal."""
    rng = np.random.default_rng(13)
    a = (rng.standard_normal((P, F)) + 3).astype(F32)
    b = rng.standard_normal((P, F)).astype(F32)
    r, out = _run("vector_reductions", (a, b))
    for i in range(P):
        assert r[i, 0] == -max(F32(v * 3) for v in a[i])
        assert r[i, 1] == _seq(np.abs(b[i]), _seq(a[i], 10.0))
        assert r[i, 2] == min(F32(v - 1) for v in a[i])
    _same(out[0], (a - F32(1)).astype(F32))
    _same(out[1], ((a - F32(1)).astype(F32) * b).astype(F32))
    _same(out[2], (b.astype(np.float64) / (F32(1) - a).astype(F32)).astype(F32))
    _same(out[3], (1 / a.astype(np.float64)).astype(F32))


def test_exponential_and_its_registers_on_v4():
    rng = np.random.default_rng(14)
    a = rng.standard_normal((P, F)).astype(F32)
    col = rng.standard_normal((P, 1)).astype(F32)
    r, out = _run("exponentials", (a, col), core="v4")
    e0 = _f64_activation("exp", (a - col).astype(F32))
    e1 = _f64_activation("exp", (a - F32(1)).astype(F32))
    e2 = _f64_activation("exp", a)
    for k, e in enumerate((e0, e1, e2)):
        np.testing.assert_allclose(out[k], e, rtol=2**-23)
    for i in range(P):
        assert r[i, 0] == _seq(out[1, i], _seq(out[0, i]))
        assert r[i, 1] == _seq(out[2, i], 7.0)


def test_bn_stats_and_bn_aggr_layouts():
    """bn_stats: (count, mean, variance x count) of the even elements then the odd ones, in
    float32 (the mean a sequential sum over the count, then the squared deviations summed in
    order); bn_aggr: (mean, population variance) of the triples."""
    rng = np.random.default_rng(15)
    a = (rng.standard_normal((P, 2 * F)) * 3 + 1).astype(F32)
    s, m = _run("stats", (a,))
    for i in range(P):
        for half, x in enumerate((a[i, :F], a[i, F:])):
            for k, part in enumerate((x[0::2], x[1::2])):
                mean = F32(_seq(part[1:], part[0]) / F32(len(part)))
                m2 = _seq([F32(F32(v - mean) ** 2) for v in part[1:]], F32(part[0] - mean) ** 2)
                got = s[i, 6 * half + 3 * k : 6 * half + 3 * k + 3]
                assert got.tolist() == [len(part), mean, m2], (i, half, k)
    x = a.astype(np.float64)
    np.testing.assert_allclose(m[:, 0], x.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m[:, 1], x.var(axis=1), rtol=1e-5)


@pytest.mark.parametrize(
    "dtype, into", [("bfloat16", None), ("float32", None), ("int8", None), ("bfloat16", "float32")]
)
def test_tensor_copy_dtype_names_the_conversions_target(dtype, into):
    """dtype= (as nki-samples passes it) is the conversion's target: the values round to it
    through float32 (an integer to nearest even, saturating, NaN to 0), then sit in dst's
    dtype, which holds them exactly (bfloat16 values in a float32 tile)."""
    a = np.array([[1.5, 2.5, -2.5, 300.0, np.nan, -np.inf, 0.1, 1e-3]] * 2, F32)
    (out,) = _run("copy_as", (a,), dtype=dtype, into=into)
    want = {
        "bfloat16": a.astype(ml_dtypes.bfloat16),
        "float32": a,
        "int8": np.array([[2, 2, -2, 127, 0, -128, 0, 0]] * 2, np.int8),
    }[dtype]
    if into is not None:
        want = want.astype(into)
    assert out.tobytes() == np.asarray(want).tobytes()


# -- costs -----------------------------------------------------------------------------------------

COSTS = {
    # (what, F, core): (stream, occupancy cycles of the instruction, instructions on it)
    ("reciprocal", 512, "v3"): ("vector", 8 * 512),  # 8 cycles an element
    ("reciprocal", 4, "v3"): ("vector", 64),  # the initiation interval
    ("tensor_reduce", 512, "v3"): ("vector", 512),  # the input's elements, not dst's one
    ("exponential", 512, "v4"): ("vector", 128),  # 4x activation(exp)
    ("activation_exp", 512, "v4"): ("scalar", 512),
    ("bn_stats", 512, "v3"): ("vector", 512),
    ("scan", 512, "v3"): ("vector", 1024),  # two tensor inputs
}


@pytest.mark.parametrize("shape", list(COSTS), ids=["-".join(map(str, k)) for k in COSTS])
def test_costs_against_their_closed_forms(shape):
    what, f, core = shape
    stream, cycles = COSTS[shape]
    a = np.ones((128, f), F32)
    res = nki.run(load_file(ARITH, "one"), (a,), {"what": what}, core=core)
    (rec,) = res.report.records[stream]
    period = res.report.core.clocks[stream].period
    assert (rec.end - rec.start) // period == cycles


def test_a_read_out_is_a_second_scalar_instruction():
    """activation with reduce_res: the activation's own N cycles, then a one-element read-out
    of the registers (the initiation interval), as the reference's extra instruction."""
    a = np.ones((128, 512), F32)
    res = nki.run(load_file(ARITH, "one"), (a,), {"what": "activation_reduce"}, core="v3")
    recs = res.report.records["scalar"]
    period = res.report.core.clocks["scalar"].period
    assert [(r.end - r.start) // period for r in recs] == [512, 64]


# -- rules -----------------------------------------------------------------------------------------

RULES = [
    ("copy_dtype", "nisa.tensor_copy: dtype=float32 and dst", "v3"),
    ("bitvec_float", "nisa.tensor_tensor: data1", "v3"),
    ("mixed_kinds", "both bitvec or both arithmetic", "v3"),
    ("scalar_pair", "the Scalar Engine on v3 takes the operator pairs", "v3"),
    ("abs_max_v3", "op=nl.abs_max needs NeuronCore-v4", "v3"),
    ("power_vector", "nl.power runs on the GpSimd engine, not engine=vector", "v3"),
    ("reduce_axis0", "the partition axis 0 cannot be reduced", "v3"),
    ("reduce_not_last", "must be the last free dimensions", "v3"),
    ("reduce_dst", "nisa.tensor_reduce: dst [8, 16] must have data's partitions", "v3"),
    ("reduce_op", "op=nl.power is not modelled", "v3"),
    ("activation_reduce_op", "reduce_op=nl.maximum: this instruction reduces with add", "v3"),
    ("activation_not_fn", "nisa.activation: op=nl.divide is not modelled", "v3"),
    ("reduce_res_shape", "reduce_res [8, 16] must be [8, 1]", "v3"),
    ("exponential_v3", "exponential needs NeuronCore-v4", "v3"),
    ("activate2_v3", "activate2 needs NeuronCore-v4", "v3"),
    ("bn_stats_fmax", "at most 512 (bn_stats_fmax)", "v3"),
    ("bn_aggr_triples", "a multiple of 3", "v3"),
    ("cumulative_int32", "src is int32; it must be one of", "v3"),
    ("scalar_operand_shape", "operand0 [8, 16] must be a number or a [8, 1] tensor", "v3"),
    ("reduce_init_cmd", "reduce_init is given with reduce_cmd=load_reduce", "v3"),
    ("partition_reduce_op", "op=nl.multiply is not modelled", "v3"),
]


@pytest.mark.parametrize("case, message, core", RULES, ids=[r[0] for r in RULES])
def test_each_rule_is_one_line_naming_the_call_and_the_kernels_line(case, message, core):
    a = np.zeros((P, F), F32)
    with pytest.raises(nki.NkiError) as e:
        nki.trace(load_file(ARITH, "bad"), (a,), {"case": case}, core=core)
    text = str(e.value)
    assert text.startswith(kernel_line(ARITH, case) + ": nisa."), text
    assert message in text and "\n" not in text, text
