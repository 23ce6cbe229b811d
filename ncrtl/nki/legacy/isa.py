"""``neuronxcc.nki.isa`` (the API before NKI 0.2) as ncrtl models it: each instruction
**returns its result**, a new tile (``res = nisa.nc_matmul(a, b)``), with ``dtype=`` (the
result's type: the instruction converts on its write) and ``mask=`` (it runs on the box of its
iteration space the mask leaves); instructions that write a tile they are given
(``nisa.dma_copy``, ``nisa.tensor_copy_predicated``) write it.

Each function calls the current API's instruction (:mod:`ncrtl.nki.isa`) with a new tile as
its ``dst``: the rules, the golden and the timing are that instruction's.  Results are SBUF
tiles except the Tensor Engine's (``nc_matmul``, ``nc_transpose`` on the Tensor Engine): FP32
PSUM tiles (a transpose keeps its data's dtype).  ``t[...] = nisa.f(...)`` writes ``t``
directly and ``psum += nisa.nc_matmul(...)`` accumulates in it (docs/nki/legacy_language.md,
"Tiles as values").  A name of that API ncrtl does not model raises ``NotModelled``.
"""

from __future__ import annotations

import importlib

from .. import _trace, highlevel
from .. import isa as cisa
from .. import language as cnl
from .._trace import fail, not_modelled
from ..isa.enums import (
    dge_mode,
    engine,
    get_nc_version,
    gpsimd_engine,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from ..isa.operands import free_size

_ix = importlib.import_module(f"{__package__}.index")  # the module, not the package's stand-in
_nl = importlib.import_module(f"{__package__}.language")  # the module, not the package's stand-in
_tl = importlib.import_module(f"{__package__}.tile")  # the module, not the package's stand-in
produce = _tl.produce

_op = _nl._op_of
_value, _value_or_number, _r, _shape2, _dt = (
    _nl._value,
    _nl._value_or_number,
    _nl._r,
    _nl._shape2,
    _nl._dt,
)


def _operand(call, what, v):
    """A tile or a number (a ``[P, 1]`` tile or a scalar operand)."""
    if v is None:
        return None
    return _value_or_number(call, what, v)


def _tile_or_none(call, what, v):
    return None if v is None else _value(call, what, v)


# -- the Tensor Engine ------------------------------------------------------------------------------


def nc_matmul(
    stationary,
    moving,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    tile_position=(),
    tile_size=(),
    mask=None,
    perf_mode=None,
):
    """``stationary.T @ moving`` into a new FP32 PSUM tile ``[stationary free, moving free]``
    (a transpose, ``is_transpose``: the stationary's dtype)."""
    call = "nisa.nc_matmul"
    s = _value(call, "stationary", stationary)
    x = _value(call, "moving", moving)
    if mask is not None:
        not_modelled("nisa.nc_matmul(mask=...)")
    shape = (free_size(s), free_size(x))
    dt = s.dtype if is_transpose else "float32"
    kw = {}
    if perf_mode is not None:
        kw["perf_mode"] = perf_mode

    def emit(dst, box, acc):
        cisa.nc_matmul(
            dst=dst,
            stationary=s,
            moving=x,
            is_stationary_onezero=is_stationary_onezero,
            is_moving_onezero=is_moving_onezero,
            is_transpose=is_transpose,
            accumulate=None if acc else False,
            tile_position=tile_position,
            tile_size=tile_size,
            **kw,
        )

    dtypes = (dt,) if is_transpose else ("float32", "bfloat16")
    return produce(
        call,
        shape,
        dt,
        emit,
        buffer="psum",
        name="nc_matmul",
        spaces=("psum",),
        dtypes=dtypes,
        accumulates=not is_transpose,
    )


def nc_transpose(data, engine=engine.unknown, dtype=None, mask=None):
    """``data [P, F]`` transposed into a new tile ``[F, P]``: PSUM on the Tensor Engine, SBUF
    on the Vector Engine (the default up to 32 x 32, as the reference chooses)."""
    call = "nisa.nc_transpose"
    x = _value(call, "data", data)
    if mask is not None:
        not_modelled("nisa.nc_transpose(mask=...)")
    p, f = x.shape[0], free_size(x)
    small = p <= 32 and f <= 32
    vector = engine == cisa.engine.vector or (engine in (None, cisa.engine.unknown) and small)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        if dst.dtype == x.dtype:
            cisa.nc_transpose(dst=_nl._bits(dst), data=_nl._bits(x), engine=engine)
            return
        t = _tl.new_tile((f, p), x.dtype, "sbuf" if vector else "psum", "nc_transpose")
        cisa.nc_transpose(dst=_nl._bits(t), data=_nl._bits(x), engine=engine)
        cisa.tensor_copy(dst=dst, src=t)

    buf = "sbuf" if vector else "psum"
    return produce(call, (f, p), dt, emit, buffer=buf, name="nc_transpose", spaces=(buf,))


# -- the Scalar Engine ------------------------------------------------------------------------------


def activation(
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    dtype=None,
    mask=None,
):
    """``op(data * scale + bias)`` into a new tile (``reduce_res``: the accumulator read)."""
    call = "nisa.activation"
    x = _value(call, "data", data)
    b = _operand(call, "bias", bias)
    sc = _operand(call, "scale", scale)
    res = _tile_or_none(call, "reduce_res", reduce_res)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.activation(
            dst=r(dst),
            op=_op(op),
            data=r(x),
            bias=r(b),
            scale=r(sc),
            reduce_op=_op(reduce_op),
            reduce_res=r(res),
            reduce_cmd=reduce_cmd,
        )

    return produce(call, _shape2(x.shape), dt, emit, name="activation", mask=mask)


def activation_reduce(op, data, reduce_op, reduce_res, bias=None, scale=1.0, dtype=None, mask=None):
    """``nisa.activation`` and its reduction into ``reduce_res``."""
    call = "nisa.activation_reduce"
    x = _value(call, "data", data)
    b = _operand(call, "bias", bias)
    sc = _operand(call, "scale", scale)
    res = _value(call, "reduce_res", reduce_res)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.activation_reduce(
            dst=r(dst),
            op=_op(op),
            data=r(x),
            reduce_op=_op(reduce_op),
            reduce_res=r(res),
            bias=r(b),
            scale=r(sc),
        )

    return produce(call, _shape2(x.shape), dt, emit, name="activation_reduce", mask=mask)


# -- the Vector Engine (and GpSimd) -----------------------------------------------------------------


def tensor_reduce(op, data, axis, negate=False, keepdims=False, dtype=None, mask=None):
    """``op`` over ``data``'s free ``axis`` (any free axes: the view is read with them last)
    into a new tile (``keepdims``: the axes kept as 1; else removed, a tile keeping one free
    dimension)."""
    call = "nisa.tensor_reduce"
    x = _value(call, "data", data)
    axes, view, last = _nl._reduce_axes(call, x, axis)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.tensor_reduce(
            dst=r(dst), op=_op(op), data=r(view), axis=last, negate=negate, keepdims=keepdims
        )

    return produce(call, _nl._reduced(x, axes, keepdims), dt, emit, name="tensor_reduce", mask=mask)


def tensor_partition_reduce(op, data, dtype=None, mask=None):
    """``op`` over ``data``'s partitions into a new tile ``[1, free...]`` (GpSimd)."""
    call = "nisa.tensor_partition_reduce"
    x = _value(call, "data", data)
    if mask is not None:
        not_modelled("nisa.tensor_partition_reduce(mask=...)")
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        cisa.tensor_partition_reduce(dst=dst, op=_op(op), data=x)

    return produce(call, (1,) + tuple(x.shape[1:]), dt, emit, name="tensor_partition_reduce")


def tensor_tensor(data1, data2, op, engine=engine.unknown, dtype=None, mask=None):
    """``op(data1, data2)`` element-wise into a new tile (the promoted dtype unless
    ``dtype``)."""
    call = "nisa.tensor_tensor"
    a = _value(call, "data1", data1)
    b = _value(call, "data2", data2)
    dt = _dt(call, dtype, highlevel.promote(a.dtype, b.dtype))

    def emit(dst, box, acc):
        r = _r(box)
        cisa.tensor_tensor(dst=r(dst), data1=r(a), data2=r(b), op=_op(op), engine=engine)

    return produce(call, _shape2(a.shape), dt, emit, name="tensor_tensor", mask=mask)


def tensor_tensor_scan(
    data0, data1, initial, op0, op1, reverse0=False, reverse1=False, dtype=None, mask=None
):
    """The scan ``op1(op0(data0[:, i], res[:, i-1]), data1[:, i])`` from ``initial`` into a
    new tile."""
    call = "nisa.tensor_tensor_scan"
    a = _value(call, "data0", data0)
    b = _value(call, "data1", data1)
    init = _operand(call, "initial", initial)
    dt = _dt(call, dtype, highlevel.promote(a.dtype, b.dtype))

    def emit(dst, box, acc):
        r = _r(box)
        cisa.tensor_tensor_scan(
            dst=r(dst),
            data0=r(a),
            data1=r(b),
            initial=r(init),
            op0=_op(op0),
            op1=_op(op1),
            reverse0=reverse0,
            reverse1=reverse1,
        )

    return produce(call, _shape2(a.shape), dt, emit, name="tensor_tensor_scan", mask=mask)


def scalar_tensor_tensor(
    data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None, mask=None
):
    """``(data op0 operand0) op1 operand1`` into a new tile (the Vector Engine)."""
    call = "nisa.scalar_tensor_tensor"
    x = _value(call, "data", data)
    o0 = _operand(call, "operand0", operand0)
    o1 = _value(call, "operand1", operand1)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.scalar_tensor_tensor(
            dst=r(dst),
            data=r(x),
            op0=_op(op0),
            operand0=r(o0),
            op1=_op(op1),
            operand1=r(o1),
            reverse0=reverse0,
            reverse1=reverse1,
        )

    return produce(call, _shape2(x.shape), dt, emit, name="scalar_tensor_tensor", mask=mask)


def tensor_scalar(
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    engine=engine.unknown,
    dtype=None,
    mask=None,
):
    """``(data op0 operand0) op1 operand1`` (numbers or ``[P, 1]`` tiles) into a new tile."""
    call = "nisa.tensor_scalar"
    x = _value(call, "data", data)
    o0 = _operand(call, "operand0", operand0)
    o1 = _operand(call, "operand1", operand1)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.tensor_scalar(
            dst=r(dst),
            data=r(x),
            op0=_op(op0),
            operand0=r(o0),
            reverse0=reverse0,
            op1=_op(op1),
            operand1=r(o1),
            reverse1=reverse1,
            engine=engine,
        )

    return produce(call, _shape2(x.shape), dt, emit, name="tensor_scalar", mask=mask)


def tensor_scalar_reduce(
    data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None
):
    """``data op0 operand0`` into a new tile, its reduction by ``reduce_op`` into
    ``reduce_res``."""
    call = "nisa.tensor_scalar_reduce"
    x = _value(call, "data", data)
    o0 = _operand(call, "operand0", operand0)
    res = _value(call, "reduce_res", reduce_res)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.tensor_scalar_reduce(
            dst=r(dst),
            data=r(x),
            op0=_op(op0),
            operand0=r(o0),
            reduce_op=_op(reduce_op),
            reduce_res=r(res),
            reverse0=reverse0,
        )

    return produce(call, _shape2(x.shape), dt, emit, name="tensor_scalar_reduce", mask=mask)


def tensor_copy(src, engine=engine.unknown, dtype=None, mask=None):
    """A copy of ``src`` into a new tile (converted to ``dtype``)."""
    call = "nisa.tensor_copy"
    x = _value(call, "src", src)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.tensor_copy(dst=r(dst), src=r(x), engine=engine)

    return produce(call, _shape2(x.shape), dt, emit, name="tensor_copy", mask=mask)


def tensor_copy_predicated(src, dst, predicate, reverse_pred=False, mask=None, dtype=None):
    """``dst = src`` where ``predicate`` is not 0 (``reverse_pred``: where it is 0), in place."""
    call = "nisa.tensor_copy_predicated"
    s = _value_or_number(call, "src", src)
    d = _value(call, "dst", dst)
    p = _value(call, "predicate", predicate)
    box = _ix.box_of(call, mask)
    if _ix.empty(box):
        return
    r = _r(box)
    cisa.tensor_copy_predicated(dst=r(d), src=r(s), predicate=r(p), reverse_pred=reverse_pred)


def reciprocal(data, dtype=None, mask=None):
    """``1 / data`` into a new tile (the Vector Engine)."""
    call = "nisa.reciprocal"
    x = _value(call, "data", data)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.reciprocal(dst=r(dst), data=r(x))

    return produce(call, _shape2(x.shape), dt, emit, name="reciprocal", mask=mask)


def memset(shape, value, dtype, mask=None, engine=engine.unknown):
    """A new tile ``shape`` of ``dtype`` set to ``value``."""
    call = "nisa.memset"
    shape, _ = _nl._shape_of(call, shape)

    def emit(dst, box, acc):
        cisa.memset(dst=_r(box)(dst), value=value, engine=engine)

    return produce(call, shape, _dt(call, dtype, "float32"), emit, name="memset", mask=mask)


def iota(expr, dtype, mask=None):
    """The values of the index expression ``expr`` (``nl.arange(128)[:, None] * 4 +
    nl.arange(64)[None, :]``) into a new tile of its shape: ``nisa.iota`` with the
    expression's partition coefficient as ``channel_multiplier``, its free coefficients as
    the pattern."""
    call = "nisa.iota"
    if isinstance(expr, int):
        expr = _ix.Index((1, 1), expr, (0, 0))
    if not isinstance(expr, _ix.Index):
        fail(call, f"expr must be an index expression (nl.arange, nl.mgrid), not {expr!r}")
    e = expr if expr.ndim > 1 else expr[:, None]
    pattern = [[c, n] for c, n in zip(e.coefs[1:], e.shape[1:])]

    def emit(dst, box, acc):
        if box:
            not_modelled("nisa.iota(mask=...)")
        cisa.iota(dst=dst, pattern=pattern, offset=e.const, channel_multiplier=e.coefs[0])

    return produce(
        call, e.shape, _dt(call, dtype, "int32"), emit, name="iota", mask=mask, spaces=("sbuf",)
    )


_CMP = {"<": cnl.less, "<=": cnl.less_equal, ">": cnl.greater, ">=": cnl.greater_equal}
_CMP["=="] = cnl.equal


def affine_select(pred, on_true_tile, on_false_value, dtype=None, mask=None):
    """``on_true_tile`` where the affine predicate holds (``i_q >= i_k``), else
    ``on_false_value``, into a new tile: ``nisa.affine_select`` with the predicate's
    expression (its partition coefficient, free coefficients and constant)."""
    call = "nisa.affine_select"
    t = _value(call, "on_true_tile", on_true_tile)
    if not isinstance(pred, _ix.Predicate):
        fail(call, f"pred must be a comparison of index expressions (i_q >= i_k), not {pred!r}")
    if len(pred.terms) != 1:
        not_modelled("nisa.affine_select of a conjunction (one comparison per instruction)")
    e, op = pred.terms[0]
    rank = len(t.shape)
    if e.ndim > rank:
        fail(call, f"pred has {e.ndim} axes, on_true_tile {list(t.shape)} {rank}")
    coefs = (0,) * (rank - e.ndim) + e.coefs
    pattern = [[c, n] for c, n in zip(coefs[1:], t.shape[1:])]
    dt = _dt(call, dtype, t.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        if box:
            not_modelled("nisa.affine_select(mask=...)")
        cisa.affine_select(
            dst=r(dst),
            pattern=pattern,
            channel_multiplier=coefs[0],
            on_true_tile=r(t),
            on_false_value=on_false_value,
            cmp_op=_CMP[op],
            offset=e.const,
        )

    return produce(
        call, _shape2(t.shape), dt, emit, name="affine_select", mask=mask, spaces=("sbuf",)
    )


def dropout(data, prob, dtype=None, mask=None):
    """``data`` with each element dropped (0) at rate ``prob``, the rest scaled, into a new
    tile."""
    call = "nisa.dropout"
    x = _value(call, "data", data)
    p = _operand(call, "prob", prob)
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.dropout(dst=r(dst), data=r(x), prob=r(p))

    return produce(call, _shape2(x.shape), dt, emit, name="dropout", mask=mask)


def bn_stats(data, dtype=None, mask=None):
    """Per partition ``(count, mean, variance x count)`` twice into a new ``[P, 6]`` tile."""
    call = "nisa.bn_stats"
    if mask is not None:
        not_modelled("nisa.bn_stats(mask=...)")
    x = _value(call, "data", data)

    def emit(dst, box, acc):
        cisa.bn_stats(dst=dst, data=x)

    return produce(call, (x.shape[0], 6), _dt(call, dtype, x.dtype), emit, name="bn_stats")


def bn_aggr(data, dtype=None, mask=None):
    """Per partition ``(mean, variance)`` of ``bn_stats`` outputs into a new ``[P, 2]`` tile."""
    call = "nisa.bn_aggr"
    if mask is not None:
        not_modelled("nisa.bn_aggr(mask=...)")
    x = _value(call, "data", data)

    def emit(dst, box, acc):
        cisa.bn_aggr(dst=dst, data=x)

    return produce(call, (x.shape[0], 2), _dt(call, dtype, x.dtype), emit, name="bn_aggr")


def max8(src, dtype=None, mask=None):
    """The 8 largest values of each partition, descending, into a new ``[P, 8]`` tile."""
    call = "nisa.max8"
    if mask is not None:
        not_modelled("nisa.max8(mask=...)")
    x = _value(call, "src", src)

    def emit(dst, box, acc):
        cisa.max8(dst=dst, src=x)

    return produce(call, (x.shape[0], 8), _dt(call, dtype, x.dtype), emit, name="max8")


def nc_find_index8(data, vals, dtype=None, mask=None):
    """The index of each of ``vals``' 8 values in each partition of ``data`` (uint32)."""
    call = "nisa.nc_find_index8"
    if mask is not None:
        not_modelled("nisa.nc_find_index8(mask=...)")
    x = _value(call, "data", data)
    v = _value(call, "vals", vals)

    def emit(dst, box, acc):
        cisa.nc_find_index8(dst=dst, data=x, vals=v)

    return produce(call, (x.shape[0], 8), _dt(call, dtype, "uint32"), emit, name="nc_find_index8")


def nc_match_replace8(data, vals, imm, dst_idx=None, dtype=None, mask=None):
    """``data`` with ``vals``' 8 values of each partition replaced by ``imm``, a new tile."""
    call = "nisa.nc_match_replace8"
    if mask is not None:
        not_modelled("nisa.nc_match_replace8(mask=...)")
    x = _value(call, "data", data)
    v = _value(call, "vals", vals)
    di = _tile_or_none(call, "dst_idx", dst_idx)

    def emit(dst, box, acc):
        cisa.nc_match_replace8(dst=dst, data=x, vals=v, imm=imm, dst_idx=di)

    return produce(
        call, _shape2(x.shape), _dt(call, dtype, x.dtype), emit, name="nc_match_replace8"
    )


# -- the DMA engines --------------------------------------------------------------------------------


def dma_copy(dst, src, mask=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error):
    """``src`` into ``dst`` by the DMA engines (device memory and SBUF), in place."""
    call = "nisa.dma_copy"
    d = _value(call, "dst", dst, ("sbuf", "hbm"))
    s = _value(call, "src", src, ("sbuf", "hbm"))
    box = _ix.box_of(call, mask)
    if _ix.empty(box):
        return
    r = _r(box)
    cisa.dma_copy(dst=r(d), src=r(s), dge_mode=dge_mode, oob_mode=oob_mode)


def dma_transpose(src, axes=None, mask=None, dtype=None):
    """``src`` (device memory or SBUF, 2-D) transposed by the DMA engines into a new SBUF
    tile ``[F, P]``."""
    call = "nisa.dma_transpose"
    x = _value(call, "src", src, ("sbuf", "hbm"))
    if mask is not None:
        not_modelled("nisa.dma_transpose(mask=...)")
    if len(x.shape) != 2 or axes not in (None, (1, 0), [1, 0]):
        not_modelled("nisa.dma_transpose of more than 2 dimensions in the older API")
    a, b = x.shape
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        if dst.dtype == x.dtype:
            cisa.dma_transpose(dst=dst, src=x)
            return
        t = _tl.new_tile((b, a), x.dtype, name="dma_transpose")
        cisa.dma_transpose(dst=t, src=x)
        cisa.tensor_copy(dst=dst, src=t)

    return produce(call, (b, a), dt, emit, name="dma_transpose", spaces=("sbuf",))


__all__ = [
    "nc_matmul",
    "nc_transpose",
    "activation",
    "activation_reduce",
    "tensor_reduce",
    "tensor_partition_reduce",
    "tensor_tensor",
    "tensor_tensor_scan",
    "scalar_tensor_tensor",
    "tensor_scalar",
    "tensor_scalar_reduce",
    "tensor_copy",
    "tensor_copy_predicated",
    "reciprocal",
    "memset",
    "iota",
    "affine_select",
    "dropout",
    "bn_stats",
    "bn_aggr",
    "max8",
    "nc_find_index8",
    "nc_match_replace8",
    "dma_copy",
    "dma_transpose",
    "engine",
    "reduce_cmd",
    "dge_mode",
    "oob_mode",
    "nc_version",
    "get_nc_version",
    "tensor_engine",
    "vector_engine",
    "scalar_engine",
    "gpsimd_engine",
    "unknown_engine",
]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _trace.stand_in("neuronxcc.nki.isa", "nisa", name)


_trace.checked_module(globals(), "nisa")
