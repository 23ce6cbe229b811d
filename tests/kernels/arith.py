"""Kernels for tests/test_nki_arith.py: the Vector, Scalar and GpSimd arithmetic, the
accumulator registers, the reductions, scans and statistics, and their rules.  Operators come
in as their ``nl`` names (``"add"``)."""

import nki
import nki.isa as nisa
import nki.language as nl


def _load(x, dtype=None):
    t = nl.ndarray(x.shape, dtype=dtype or x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _store(t):
    o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    return o


def _stack(tiles):
    """The tiles ``[P, F]`` as one ``[n, P, F]`` device tensor."""
    n = len(tiles)
    out = nl.ndarray((n, *tiles[0].shape), dtype=tiles[0].dtype, buffer=nl.shared_hbm)
    for i, t in enumerate(tiles):
        nisa.dma_copy(dst=out[i], src=t)
    return out


def _engine(name):
    return nisa.engine.unknown if name is None else getattr(nisa.engine, name)


@nki.jit
def binary(a, b, ops, dtype=None, engine=None):
    """``tensor_tensor(a, b, op)`` for each op, into ``dtype`` (a's by default)."""
    x, y = _load(a), _load(b)
    outs = []
    for op in ops:
        d = nl.ndarray(a.shape, dtype=dtype or a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=d, data1=x, data2=y, op=getattr(nl, op), engine=_engine(engine))
        outs.append(d)
    return _stack(outs)


@nki.jit
def scalar(a, col, ops, operand, reverse=False, op1=None, operand1=None, engine=None):
    """``tensor_scalar(a, op, operand)`` for each op; ``operand`` a number or ``"col"`` (the
    ``[P, 1]`` tensor ``col``)."""
    x = _load(a)
    c = _load(col)
    outs = []
    for op in ops:
        d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(
            dst=d,
            data=x,
            op0=getattr(nl, op),
            operand0=c if operand == "col" else operand,
            reverse0=reverse,
            op1=None if op1 is None else getattr(nl, op1),
            operand1=operand1,
            engine=_engine(engine),
        )
        outs.append(d)
    return _stack(outs)


@nki.jit
def activations(a, ops, scale=1.0, bias=None):
    """``activation(op, a * scale + bias)`` for each op."""
    x = _load(a)
    outs = []
    for op in ops:
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=d, op=getattr(nl, op), data=x, scale=scale, bias=bias)
        outs.append(d)
    return _stack(outs)


@nki.jit
def accumulate(a, b):
    """The Scalar Engine's registers across instructions: a's row sums reset then b's added
    (read out), then a reset alone (read out: 0), then an idle activation (unchanged)."""
    x, y = _load(a), _load(b)
    P = a.shape[0]
    d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((P, 3), dtype=nl.float32, buffer=nl.sbuf)
    cmd = nisa.reduce_cmd
    nisa.activation(dst=d, op=nl.copy, data=x, reduce_op=nl.add, reduce_cmd=cmd.reset_reduce)
    nisa.activation(
        dst=d, op=nl.copy, data=y, reduce_op=nl.add, reduce_cmd=cmd.reduce, reduce_res=r[:, 0:1]
    )
    nisa.activation(dst=d, op=nl.copy, data=y, reduce_cmd=cmd.reset, reduce_res=r[:, 1:2])
    nisa.activation_reduce(dst=d, op=nl.square, data=x, reduce_op=nl.add, reduce_res=r[:, 2:3])
    return _store(r), _store(d)


@nki.jit
def activate2_kernel(a, op, op0, op1, imm0, imm1, reduce_op, relu_param=0.0, reverse0=False):
    """activate2 with its registers reset-reduced and read out."""
    x = _load(a)
    P = a.shape[0]
    d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activate2(
        dst=d,
        op=getattr(nl, op),
        data=x,
        imm0=imm0,
        imm1=imm1,
        op0=getattr(nl, op0),
        op1=getattr(nl, op1),
        relu_param=relu_param,
        reverse0=reverse0,
        reduce_op=getattr(nl, reduce_op),
        reduce_res=r,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
    )
    return _store(d), _store(r)


@nki.jit
def reduce(a, op, axis, negate=False, keepdims=False, dtype=None):
    """``tensor_reduce`` of ``a`` over ``axis``."""
    x = _load(a)
    shape = [a.shape[0]]
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    first = min(x % len(a.shape) for x in axes)
    shape += list(a.shape[1:first]) + ([1] * (len(a.shape) - first) if keepdims else [])
    if len(shape) == 1:
        shape.append(1)
    d = nl.ndarray(tuple(shape), dtype=dtype or a.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(
        dst=d, op=getattr(nl, op), data=x, axis=axis, negate=negate, keepdims=keepdims
    )
    return _store(d)


@nki.jit
def partition_reduce(a, op):
    x = _load(a)
    d = nl.ndarray((1, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(dst=d, op=getattr(nl, op), data=x)
    return _store(d)


@nki.jit
def scans(a, b, col):
    """tensor_tensor_scan (a running ``a * prev + b`` from col, reversed subtract), and
    tensor_scalar_cumulative (running sums of ``a * 2`` reset, continued with reduce, loaded
    from 5)."""
    x, y, c = _load(a), _load(b), _load(col)
    outs = []
    for op0, op1, r0, r1 in (("multiply", "add", False, False), ("subtract", "subtract", 1, 1)):
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(
            dst=d,
            data0=x,
            data1=y,
            initial=c,
            op0=getattr(nl, op0),
            op1=getattr(nl, op1),
            reverse0=bool(r0),
            reverse1=bool(r1),
        )
        outs.append(d)
    cmd = nisa.reduce_cmd
    for kw in ({}, {"reduce_cmd": cmd.reduce}, {"reduce_cmd": cmd.load_reduce, "imm1": 5.0}):
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=d, src=x, op0=nl.multiply, op1=nl.add, imm0=2.0, **kw)
        outs.append(d)
    d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(dst=d, src=x, op0=nl.add, op1=nl.maximum, imm0=c)
    outs.append(d)
    return _stack(outs)


@nki.jit
def vector_reductions(a, b):
    """tensor_scalar_reduce (max of a * 3, negated; sum loaded from 10 then continued),
    scalar_tensor_tensor ((a - 1) * b, and reversed: b / (1 - a)), reciprocal."""
    x, y = _load(a), _load(b)
    P = a.shape[0]
    r = nl.ndarray((P, 3), dtype=nl.float32, buffer=nl.sbuf)
    d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    cmd = nisa.reduce_cmd
    nisa.tensor_scalar_reduce(
        dst=d,
        data=x,
        op0=nl.multiply,
        operand0=3.0,
        reduce_op=nl.max,
        reduce_res=r[:, 0:1],
        reduce_res_negate=True,
    )
    nisa.tensor_scalar_reduce(
        dst=d,
        data=x,
        op0=nl.add,
        operand0=0.0,
        reduce_op=nl.add,
        reduce_cmd=cmd.load_reduce,
        reduce_init=10.0,
    )
    nisa.tensor_scalar_reduce(
        dst=d,
        data=y,
        op0=nl.abs,
        operand0=None,
        reduce_op=nl.add,
        reduce_res=r[:, 1:2],
        reduce_cmd=cmd.reduce,
    )
    nisa.tensor_scalar_reduce(
        dst=d, data=x, op0=nl.subtract, operand0=1.0, reduce_op=nl.minimum, reduce_res=r[:, 2:3]
    )
    outs = [d]
    for rev in (False, True):
        e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(
            dst=e,
            data=x,
            op0=nl.subtract,
            operand0=1.0,
            op1=nl.multiply if not rev else nl.divide,
            operand1=y,
            reverse0=rev,
            reverse1=rev,
        )
        outs.append(e)
    e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=e, data=x)
    outs.append(e)
    return _store(r), _stack(outs)


@nki.jit
def exponentials(a, col):
    """NeuronCore-v4's exponential: exp(a - col) summed (reset_reduce), exp(a - 1) added
    (reduce, read out), exp(a) from a loaded 7 (read out)."""
    x, c = _load(a), _load(col)
    P = a.shape[0]
    r = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
    outs = []
    cmd = nisa.reduce_cmd
    for kw in (
        {"max_value": c, "reduce_cmd": cmd.reset_reduce},
        {"max_value": 1.0, "reduce_cmd": cmd.reduce, "reduce_res": r[:, 0:1]},
        {"reduce_cmd": cmd.load_reduce, "reduce_init": 7.0, "reduce_res": r[:, 1:2]},
    ):
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=d, src=x, **kw)
        outs.append(d)
    return _store(r), _stack(outs)


@nki.jit
def stats(a):
    """bn_stats of each 64-element half of a, and bn_aggr of the two."""
    x = _load(a)
    P, F = a.shape
    h = F // 2
    s = nl.ndarray((P, 12), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_stats(dst=s[:, 0:6], data=x[:, 0:h])
    nisa.bn_stats(dst=s[:, 6:12], data=x[:, h:F])
    m = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=m, data=s)
    return _store(s), _store(m)


@nki.jit
def copy_as(a, dtype, into=None, engine=None):
    """tensor_copy of a into ``dtype``, passing ``dtype=`` as the public kernels do, into a
    tile of ``into`` (``dtype`` by default)."""
    x = _load(a)
    d = nl.ndarray(a.shape, dtype=into or dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=d, src=x, dtype=dtype, engine=_engine(engine))
    return _store(d)


@nki.jit
def one(a, what):
    """One instruction of ``what`` on a [P, F] tile (the timing tests)."""
    x = _load(a)
    P, F = a.shape
    d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    r = nl.ndarray((P, 1), dtype=a.dtype, buffer=nl.sbuf)
    if what == "reciprocal":
        nisa.reciprocal(dst=d, data=x)
    elif what == "tensor_reduce":
        nisa.tensor_reduce(dst=r, op=nl.add, data=x, axis=1)
        return _store(r)
    elif what == "exponential":
        nisa.exponential(dst=d, src=x)
    elif what == "activation_exp":
        nisa.activation(dst=d, op=nl.exp, data=x)
    elif what == "activation_reduce":
        nisa.activation(
            dst=d,
            op=nl.exp,
            data=x,
            reduce_op=nl.add,
            reduce_res=r,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )
    elif what == "bn_stats":
        s = nl.ndarray((P, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=s, data=x)
        return _store(s)
    elif what == "scan":
        nisa.tensor_tensor_scan(dst=d, data0=x, data1=x, initial=0.0, op0=nl.multiply, op1=nl.add)
    return _store(d)


# -- rules: each call breaks one (the line marked names it) ----------------------------------------


@nki.jit
def bad(a, case):
    x = _load(a)
    P, F = a.shape
    d = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    i = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    if case == "copy_dtype":
        b = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=b, src=x, dtype=nl.float32)  # LINE copy_dtype
    elif case == "bitvec_float":
        nisa.tensor_tensor(dst=d, data1=x, data2=x, op=nl.bitwise_and)  # LINE bitvec_float
    elif case == "mixed_kinds":
        nisa.tensor_scalar(  # LINE mixed_kinds
            dst=i, data=i, op0=nl.bitwise_and, operand0=3, op1=nl.add, operand1=1.0
        )
    elif case == "scalar_pair":
        nisa.tensor_scalar(  # LINE scalar_pair
            dst=d, data=x, op0=nl.subtract, operand0=1.0, engine=nisa.engine.scalar
        )
    elif case == "abs_max_v3":
        nisa.tensor_tensor(dst=d, data1=x, data2=x, op=nl.abs_max)  # LINE abs_max_v3
    elif case == "power_vector":
        nisa.tensor_tensor(  # LINE power_vector
            dst=d, data1=x, data2=x, op=nl.power, engine=nisa.engine.vector
        )
    elif case == "reduce_axis0":
        nisa.tensor_reduce(dst=r, op=nl.add, data=x, axis=0)  # LINE reduce_axis0
    elif case == "reduce_not_last":
        t = nl.ndarray((P, 4, F // 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r, op=nl.add, data=t, axis=1)  # LINE reduce_not_last
    elif case == "reduce_dst":
        nisa.tensor_reduce(dst=d, op=nl.add, data=x, axis=1)  # LINE reduce_dst
    elif case == "reduce_op":
        nisa.tensor_reduce(dst=r, op=nl.power, data=x, axis=1)  # LINE reduce_op
    elif case == "activation_reduce_op":
        nisa.activation(  # LINE activation_reduce_op
            dst=d, op=nl.exp, data=x, reduce_op=nl.maximum, reduce_cmd=nisa.reduce_cmd.reduce
        )
    elif case == "activation_not_fn":
        nisa.activation(dst=d, op=nl.divide, data=x)  # LINE activation_not_fn
    elif case == "reduce_res_shape":
        nisa.activation(dst=d, op=nl.exp, data=x, reduce_res=d)  # LINE reduce_res_shape
    elif case == "exponential_v3":
        nisa.exponential(dst=d, src=x)  # LINE exponential_v3
    elif case == "activate2_v3":
        nisa.activate2(  # LINE activate2_v3
            dst=d, op=nl.exp, data=x, imm0=1.0, imm1=0.0, op0=nl.multiply, op1=nl.add
        )
    elif case == "bn_stats_fmax":
        t = nl.ndarray((P, 1024), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((P, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=s, data=t)  # LINE bn_stats_fmax
    elif case == "bn_aggr_triples":
        s = nl.ndarray((P, 7), dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=m, data=s)  # LINE bn_aggr_triples
    elif case == "cumulative_int32":
        nisa.tensor_scalar_cumulative(  # LINE cumulative_int32
            dst=i, src=i, op0=nl.add, op1=nl.add, imm0=0.0
        )
    elif case == "scalar_operand_shape":
        nisa.tensor_scalar(dst=d, data=x, op0=nl.add, operand0=d)  # LINE scalar_operand_shape
    elif case == "reduce_init_cmd":
        nisa.tensor_scalar_reduce(  # LINE reduce_init_cmd
            dst=d, data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_init=3.0
        )
    elif case == "partition_reduce_op":
        p1 = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(dst=p1, op=nl.multiply, data=x)  # LINE partition_reduce_op
    return _store(d)
