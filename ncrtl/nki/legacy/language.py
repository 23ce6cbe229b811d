"""``neuronxcc.nki.language`` (the API before NKI 0.2) as ncrtl models it: index expressions
(``nl.arange``, ``nl.mgrid``), ``nl.par_dim`` and block dimensions, tiles as values
(``nl.load`` returns a tile, ``a + b`` computes one, ``t[...] = value`` writes a view) and the
high-level functions that return a new tile, each with that API's ``dtype=`` and ``mask=``.

Every function lowers to the instructions of docs/nki/highlevel.md's lowering table (the
current API's :mod:`ncrtl.nki.highlevel` is reused), with the older API's differences written
in docs/nki/legacy_language.md; a name of that API ncrtl does not model is a stand-in that
raises ``NotModelled`` naming it.  SBUF and PSUM placement is the allocator's, from the
tensors' lifetimes, as that API left it to the compiler.
"""

from __future__ import annotations

import importlib

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of

from .. import _trace, highlevel
from .. import isa as cisa
from .. import language as cnl
from .._trace import NkiTensor, caller_line, current, current_or_none, fail, not_modelled
from ..isa.operands import free_size

_ix = importlib.import_module(f"{__package__}.index")  # the module, not the package's stand-in
_tl = importlib.import_module(f"{__package__}.tile")  # the module, not the package's stand-in
from .index import arange, mgrid
from .tile import BlockTensor, ParDim, Tile, assign, par_dim, produce, tile_of

# -- what the current language already has, the same in this API -------------------------------

sbuf, psum, hbm, private_hbm, shared_hbm = (
    cnl.sbuf,
    cnl.psum,
    cnl.hbm,
    cnl.private_hbm,
    cnl.shared_hbm,
)
bool_, int8, uint8, int16, uint16, int32, uint32 = (
    cnl.bool_,
    cnl.int8,
    cnl.uint8,
    cnl.int16,
    cnl.uint16,
    cnl.int32,
    cnl.uint32,
)
float16, float32, bfloat16, tfloat32 = cnl.float16, cnl.float32, cnl.bfloat16, cnl.tfloat32
float8_e4m3, float8_e5m2, float8_e4m3fn = cnl.float8_e4m3, cnl.float8_e5m2, cnl.float8_e4m3fn
tile_size = cnl.tile_size
ds = cnl.ds
program_id, num_programs, program_ndim = cnl.program_id, cnl.num_programs, cnl.program_ndim
is_hbm, is_on_chip, is_psum, is_sbuf = cnl.is_hbm, cnl.is_on_chip, cnl.is_psum, cnl.is_sbuf
NKIObject = cnl.NKIObject


def _range(call, start, stop, step, directives):
    """A loop of the older API: unrolled when traced (``directives=``, e.g.
    ``nki.compiler.no_reorder()``, change nothing: ncrtl keeps program order)."""
    return cnl._range(call, start, stop, step)


def affine_range(start, stop=None, step=1, directives=None):
    return _range("nl.affine_range", start, stop, step, directives)


def sequential_range(start, stop=None, step=1, directives=None):
    return _range("nl.sequential_range", start, stop, step, directives)


def static_range(start, stop=None, step=1, directives=None):
    return _range("nl.static_range", start, stop, step, directives)


# -- values ----------------------------------------------------------------------------------------


def _is_number(v):
    return highlevel._is_number(v)


def _value(call, what, v, spaces=("sbuf", "psum")):
    """``v`` as a tile operand (a Tile) in one of ``spaces``."""
    if isinstance(v, BlockTensor):
        v._operand(call, what)
    if not isinstance(v, NkiTensor):
        fail(
            call,
            f"{what} must be a tile (an nl.ndarray, a view of one, a call's result), not {v!r}",
        )
    v = tile_of(v)
    highlevel._tile(call, what, v, spaces)
    _tl.touch(v)
    return v


def _value_or_number(call, what, v):
    if _is_number(v):
        return v
    return _value(call, what, v)


#: numpy's functions kernels pass as operators (``nisa.tensor_reduce(np.max, ...)``), by the
#: operator they name; numpy's ufuncs (``np.add``, ``np.exp``) the current API reads itself.
_NUMPY_FUNCTIONS = {
    np.max: cnl.maximum,
    np.amax: cnl.maximum,
    np.min: cnl.minimum,
    np.amin: cnl.minimum,
    np.sum: cnl.add,
    np.prod: cnl.multiply,
    np.all: cnl.logical_and,
    np.any: cnl.logical_or,
}


def _op_of(v):
    """The operator ``v`` names (a numpy reduction function as its operator token)."""
    try:
        return _NUMPY_FUNCTIONS.get(v, v)
    except TypeError:
        return v


def _r(box):
    """The function that cuts an operand to the mask's box."""
    return lambda t: _ix.restrict(t, box)


def _shape2(shape):
    shape = tuple(shape)
    return shape if len(shape) > 1 else shape + (1,)


def _dt(call, dtype, default):
    return _tl.dtype_name(call, dtype, default)


# -- tensor creation -------------------------------------------------------------------------------


def _shape_of(call, shape):
    items = shape if isinstance(shape, (tuple, list)) else (shape,)
    out, pdim = [], None
    for i, s in enumerate(items):
        if isinstance(s, ParDim):
            if pdim is not None:
                fail(call, f"shape {tuple(items)} has two nl.par_dim")
            pdim = i
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
            fail(call, f"shape must hold integers known when the kernel is traced, not {shape!r}")
        out.append(int(s))
    return tuple(out), pdim


def ndarray(shape, dtype, buffer=sbuf, name=""):
    """A new tensor: in device memory as the current API's; on chip ``[P, free...]``, or with
    block dimensions before ``nl.par_dim(P)`` (one tile per block, each placed from its own
    lifetime: :class:`~.tile.BlockTensor`)."""
    call = "nl.ndarray"
    shape, pdim = _shape_of(call, shape)
    buf = str(buffer) if isinstance(buffer, str) else buffer
    if buf not in (sbuf, psum, hbm, private_hbm, shared_hbm):
        if callable(buffer):
            not_modelled("nl.ndarray(buffer=<an allocation function>)")
        fail(call, f"buffer must be nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm, not {buffer!r}")
    if buf in (sbuf, psum) and pdim:
        current(call)
        d = dtype_of(dtype)
        # where a trace found the blocks overflowing their memory, they live further out, as
        # the compiler spilled them (tile.spill_after): PSUM blocks in SBUF, then in HBM
        line = caller_line()
        home = _tl.home_of(line, buf)
        return BlockTensor(
            shape[:pdim], shape[pdim:], d.name, buf, name or str(buffer), home, line=line
        )
    t = cnl.ndarray(shape, dtype, buffer=buf, name=name)
    return Tile.of(t, 0)


def _fill(t, value):
    tiles = t.all_blocks() if isinstance(t, BlockTensor) else [t]
    for b in tiles:
        cisa.memset(dst=b, value=value)
    return t


def zeros(shape, dtype, buffer=sbuf, name="", lazy_initialization=False):
    """A new tensor set to 0 (``nisa.memset``; one per block).  ``lazy_initialization``
    lets the compiler defer the zeros to the first use; ncrtl sets them here (the same
    values; each memset timed)."""
    return _fill(ndarray(shape, dtype, buffer=buffer, name=name), 0)


def ones(shape, dtype, buffer=sbuf, name=""):
    return _fill(ndarray(shape, dtype, buffer=buffer, name=name), 1)


def full(shape, fill_value, dtype, buffer=sbuf, name=""):
    return _fill(ndarray(shape, dtype, buffer=buffer, name=name), fill_value)


def empty_like(a, dtype=None, buffer=None, name=""):
    call = "nl.empty_like"
    if not isinstance(a, (NkiTensor, BlockTensor)):
        fail(call, f"a must be a tensor, not {a!r}")
    return ndarray(a.shape, _dt(call, dtype, a.dtype), buffer=buffer or a.buffer, name=name)


def zeros_like(a, dtype=None, buffer=None, name=""):
    t = empty_like(a, dtype=dtype, buffer=buffer, name=name)
    return _fill(t, 0) if t.buffer != "shared_hbm" else t


def ones_like(a, dtype=None, buffer=None, name=""):
    return _fill(empty_like(a, dtype=dtype, buffer=buffer, name=name), 1)


def full_like(a, fill_value, dtype=None, buffer=None, name=""):
    return _fill(empty_like(a, dtype=dtype, buffer=buffer, name=name), fill_value)


def shared_constant(constant, dtype=None):
    """A device tensor holding ``constant`` (converted to ``dtype`` where given)."""
    if dtype is not None:
        call = "nl.shared_constant"
        try:
            constant = np.asarray(constant).astype(dtype_of(dtype).storage)
        except (ValueError, TypeError) as e:
            fail(call, f"dtype={dtype!r}: {e}")
    return Tile.of(cnl.shared_constant(constant))


def shared_identity_matrix(n, dtype=uint8):
    return Tile.of(cnl.shared_identity_matrix(n, dtype=dtype), 0)


# -- memory: load, store, copy --------------------------------------------------------------------


def _hbm_2d(t):
    """A 1-D device view as ``[n, 1]`` (a tile keeps a free dimension)."""
    if len(t.shape) == 1:
        return t._view((t.shape[0], 1), (t.strides[0], 1), t.offset)
    return t


def load(src, mask=None, dtype=None):
    """A new SBUF tile of ``src`` (device memory): one ``nisa.dma_copy`` (converting to
    ``dtype`` on the way), on the mask's box."""
    call = "nl.load"
    src = _value(call, "src", src, ("hbm",))
    src = _hbm_2d(src)
    highlevel._on_chip_shape(call, "src", src)
    dt = _dt(call, dtype, src.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.dma_copy(dst=r(dst), src=r(src))

    return produce(call, src.shape, dt, emit, name="load", mask=mask, spaces=("sbuf",))


def store(dst, value, mask=None):
    """``value`` (SBUF; PSUM through a copy to SBUF) into ``dst`` (device memory): one
    ``nisa.dma_copy`` on the mask's box."""
    call = "nl.store"
    dst = _value(call, "dst", dst, ("hbm",))
    if _is_number(value):
        not_modelled("nl.store of a number (store a tile)")
    value = _value(call, "value", value)
    if value.size != dst.size:
        fail(
            call,
            f"value {list(value.shape)} has {value.size} elements, dst {list(dst.shape)} "
            f"{dst.size}",
        )
    if dst.shape != value.shape:
        try:
            dst = dst.reshape(value.shape)
        except _trace.NkiError:
            pass
    box = _ix.box_of(call, mask)
    if _ix.empty(box):
        return
    r = _r(box)
    with _tl.lowered(call):
        src = highlevel._sbuf(r(value), "store")
        cisa.dma_copy(dst=r(dst), src=src)


def load_transpose2d(src, mask=None, dtype=None):
    """A new SBUF tile ``[B, A]`` of the 2-D device view ``src [A, B]`` transposed:
    ``nisa.dma_transpose`` (a ``nisa.tensor_copy`` after it where ``dtype`` differs)."""
    call = "nl.load_transpose2d"
    src = _value(call, "src", src, ("hbm",))
    if len(src.shape) != 2:
        fail(call, f"src {list(src.shape)} must be 2-D")
    a, b = src.shape
    highlevel._on_chip_shape(
        call, "src transposed", src._view((b, a), src.strides[::-1], src.offset)
    )
    dt = _dt(call, dtype, src.dtype)
    if mask is not None:
        not_modelled("nl.load_transpose2d(mask=...)")

    def emit(dst, box, acc):
        if dst.dtype == src.dtype:
            cisa.dma_transpose(dst=dst, src=src)
            return
        tmp = _tl.new_tile((b, a), src.dtype, name="load_transpose2d")
        cisa.dma_transpose(dst=tmp, src=src)
        cisa.tensor_copy(dst=dst, src=tmp)

    return produce(call, (b, a), dt, emit, name="load_transpose2d", spaces=("sbuf",))


def copy(src, mask=None, dtype=None):
    """A new SBUF tile with ``src``'s values: ``nisa.tensor_copy`` (converting to ``dtype``)."""
    call = "nl.copy"
    src = _value(call, "src", src)
    dt = _dt(call, dtype, src.dtype)

    def emit(dst, box, acc):
        r = _r(box)
        cisa.tensor_copy(dst=r(dst), src=r(src))

    return produce(call, _shape2(src.shape), dt, emit, name="copy", mask=mask)


def static_cast(x, dtype):
    """``x`` converted to ``dtype``: in a kernel a new tile (``nisa.tensor_copy``, rounding to
    nearest even); outside one (the tutorials cast their numpy inputs) a numpy array."""
    call = "nl.static_cast"
    if current_or_none() is None or isinstance(x, np.ndarray):
        try:
            return np.asarray(x).astype(dtype_of(dtype).storage)
        except ValueError as e:
            raise _trace.NkiError(f"{call}: dtype={dtype!r}: {e}") from None
    return copy(x, dtype=dtype)


def _copy_into(call, dst, value):
    """``dst[...] = value`` where ``value`` is a tile not made for it: a copy (on chip
    ``nisa.tensor_copy``; to or from device memory one DMA, PSUM through SBUF)."""
    value = tile_of(value)
    if value.size != dst.size:
        fail(
            call,
            f"value {list(value.shape)} has {value.size} elements, the view {list(dst.shape)} "
            f"{dst.size}",
        )
    target = dst
    if dst.shape != value.shape:
        try:
            target = dst.reshape(value.shape)
        except _trace.NkiError:
            target = dst
    if dst._decl.space == "hbm" or value._decl.space == "hbm":
        src = value if value._decl.space != "psum" else highlevel._sbuf(value, "store")
        cisa.dma_copy(dst=target, src=src)
        return
    cisa.tensor_copy(dst=target, src=value)


def broadcast_to(src, shape):
    """``src`` broadcast to ``shape`` (free dimensions by a step-0 read, partitions by DMA
    copies doubling the rows: docs/nki/highlevel.md)."""
    call = "nl.broadcast_to"
    src = _value(call, "src", src)
    return Tile.of(highlevel.broadcast_to(src, shape), 0)


# -- element-wise ----------------------------------------------------------------------------------


def _binary_shape(call, x, y, dtype):
    xt, yt = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
    if not xt and not yt:
        fail(call, f"x={x!r} and y={y!r} are numbers: at least one must be a tile")
    if xt and yt:
        shape = highlevel._broadcast(call, (x.shape, y.shape))
        return shape, _dt(call, dtype, highlevel.promote(x.dtype, y.dtype))
    tile, number = (x, y) if xt else (y, x)
    return _shape2(tile.shape), _dt(call, dtype, highlevel._with_number(tile.dtype, number))


def _binary(name, x, y, dtype=None, mask=None):
    call = f"nl.{name}"
    x = _value_or_number(call, "x", x)
    y = _value_or_number(call, "y", y)
    shape, dt = _binary_shape(call, x, y, dtype)

    def emit(dst, box, acc):
        r = _r(box)
        highlevel._binary(name, r(x), r(y), dt, out=r(dst))

    return produce(call, shape, dt, emit, name=name, mask=mask)


def _binary_into(name, dst, x, y):
    """``dst = x <name> y`` (an in-place operator: ``t += u``)."""
    call = f"{dst.name} {name}="
    y = _value_or_number(call, "value", y)
    highlevel._binary(name, x, y, dst.dtype, out=dst)


def _unary(name, lower):
    def fn(x, dtype=None, mask=None):
        call = f"nl.{name}"
        x = _value(call, "x", x)
        dt = _dt(call, dtype, x.dtype)

        def emit(dst, box, acc):
            r = _r(box)
            lower(r(dst), r(x))

        return produce(call, _shape2(x.shape), dt, emit, name=name, mask=mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``nl.{name}(x, dtype=None, mask=None)``: a new tile (docs/nki/highlevel.md)."
    return fn


def _activation(name):
    return lambda dst, x: cisa.activation(dst=dst, op=getattr(cnl, name), data=x)


def _via_highlevel(name):
    """The current language's lowering of ``nl.<name>`` (several instructions into a new
    tile), then copied into ``dst``."""
    fn = highlevel.FUNCTIONS[name]

    def lower(dst, x):
        got = fn(x, dtype=dst.dtype)
        cisa.tensor_copy(dst=dst, src=got)

    return lower


_BINARY = highlevel._BINARY
for _name in _BINARY:

    def _make(name):
        def binary(x, y, dtype=None, mask=None):
            return _binary(name, x, y, dtype, mask)

        binary.__name__ = binary.__qualname__ = name
        binary.__doc__ = f"``nl.{name}(x, y, dtype=None, mask=None)``: element-wise, a new tile."
        return binary

    globals()[_name] = _make(_name)

for _name in highlevel._ACTIVATION:
    globals()[_name] = _unary(_name, _activation(_name))

reciprocal = _unary("reciprocal", lambda dst, x: cisa.reciprocal(dst=dst, data=x))
negative = _unary(
    "negative",
    lambda dst, x: cisa.tensor_scalar(dst=dst, data=x, op0=cnl.multiply, operand0=-1.0),
)
logical_not = _unary(
    "logical_not",
    lambda dst, x: cisa.tensor_scalar(dst=dst, data=x, op0=cnl.logical_xor, operand0=1),
)
invert = _unary(
    "invert",
    lambda dst, x: cisa.tensor_scalar(dst=dst, data=x, op0=cnl.bitwise_xor, operand0=-1),
)
floor = _unary("floor", _via_highlevel("floor"))
ceil = _unary("ceil", _via_highlevel("ceil"))
trunc = _unary("trunc", _via_highlevel("trunc"))
del _name, _make


def where(condition, x, y, dtype=None, mask=None):
    """``x`` where ``condition`` is not 0, else ``y``: docs/nki/highlevel.md's lowering."""
    call = "nl.where"
    if mask is not None:
        not_modelled("nl.where(mask=...)")
    condition = _value(call, "condition", condition)
    x = _value_or_number(call, "x", x)
    y = _value_or_number(call, "y", y)
    return Tile.of(highlevel.where(condition, x, y, dtype=dtype), 0)


# -- reductions ------------------------------------------------------------------------------------


def _reduce_axes(call, x, axis):
    """``axis`` (an int or a list of them) as sorted free axes of ``x``; the view of ``x``
    with them moved last (a permuted access pattern: no copy) and their positions there."""
    n = len(x.shape)
    axes = list(highlevel.free_axes(call, x, axis))
    keep = [d for d in range(n) if d not in axes]
    order = keep + axes
    view = x
    if order != list(range(n)):
        view = x._view(
            tuple(x.shape[d] for d in order), tuple(x.strides[d] for d in order), x.offset
        )
    return axes, view, tuple(range(len(keep), n))


def _reduced(x, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return _shape2(shape)


def _reduction(name, op, negate=False):
    def fn(x, axis, dtype=None, mask=None, keepdims=False):
        call = f"nl.{name}"
        x = _value(call, "x", x)
        axes, view, last = _reduce_axes(call, x, axis)
        dt = _dt(call, dtype, x.dtype)

        def emit(dst, box, acc):
            r = _r(box)
            cisa.tensor_reduce(dst=r(dst), op=op(), data=r(view), axis=last, negate=negate)

        return produce(call, _reduced(x, axes, keepdims), dt, emit, name=name, mask=mask)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``nl.{name}(x, axis, dtype=None, mask=None, keepdims=False)``: tensor_reduce."
    return fn


sum = _reduction("sum", lambda: cnl.add)  # noqa: A001
max = _reduction("max", lambda: cnl.maximum)  # noqa: A001
min = _reduction("min", lambda: cnl.minimum)  # noqa: A001
prod = _reduction("prod", lambda: cnl.multiply)
all = _reduction("all", lambda: cnl.logical_and)  # noqa: A001


def mean(x, axis, dtype=None, mask=None, keepdims=False):
    """The float32 sum divided by the count (two instructions: docs/nki/highlevel.md)."""
    call = "nl.mean"
    x = _value(call, "x", x)
    axes, view, last = _reduce_axes(call, x, axis)
    dt = _dt(call, dtype, x.dtype)
    n = int(np.prod([x.shape[a] for a in axes]))
    shape = _reduced(x, axes, keepdims)

    def emit(dst, box, acc):
        r = _r(box)
        total = _tl.new_tile(shape, "float32", name="mean_sum")
        cisa.tensor_reduce(dst=r(total), op=cnl.add, data=r(view), axis=last)
        cisa.tensor_scalar(dst=r(dst), data=r(total), op0=cnl.divide, operand0=float(n))

    return produce(call, shape, dt, emit, name="mean", mask=mask)


def var(x, axis, dtype=None, mask=None):
    call = "nl.var"
    if mask is not None:
        not_modelled("nl.var(mask=...)")
    x = _value(call, "x", x)
    axes, view, last = _reduce_axes(call, x, axis)
    return Tile.of(highlevel.var(view, list(last), dtype=dtype), 0)


_LOOP_OPS = {
    "add": cnl.add,
    "multiply": cnl.multiply,
    "maximum": cnl.maximum,
    "minimum": cnl.minimum,
    "max": cnl.maximum,
    "min": cnl.minimum,
}


def loop_reduce(x, op, loop_indices, dtype=None, mask=None):
    """``b = op(b, x)`` across the iterations of the loops ``loop_indices`` (the result of the
    same kernel line, the accumulator, is one tile): the first iteration (the loop indices'
    first values, met again when an outer loop starts over) copies ``x`` into a new tile
    (``nisa.tensor_copy``), the next ones ``nisa.tensor_tensor(op)`` into it."""
    from ..isa.operands import op_token

    call = "nl.loop_reduce"
    x = _value(call, "x", x)
    name = op_token(_op_of(op))
    if name not in _LOOP_OPS:
        fail(call, f"op={op!r}: one of {', '.join(sorted(_LOOP_OPS))}")
    items = loop_indices if isinstance(loop_indices, (tuple, list)) else (loop_indices,)
    idx = tuple(_trace._int(i, "loop_indices", call) for i in items)
    tr = current(call)
    accs = tr.__dict__.setdefault("legacy_loop_reduce", {})
    key = caller_line()
    dt = _dt(call, dtype, x.dtype)
    got = accs.get(key)
    if got is None or got[0] == idx:
        acc = copy(x, dtype=dt, mask=mask)
        accs[key] = (idx, acc)
        return acc
    acc = got[1]
    box = _ix.box_of(call, mask)
    r = _r(box)
    if not _ix.empty(box):
        cisa.tensor_tensor(dst=r(acc), data1=r(acc), data2=r(x), op=_LOOP_OPS[name])
    return acc


# -- the Tensor Engine -----------------------------------------------------------------------------


def matmul(x, y, transpose_x=False, mask=None):
    """``x @ y`` (``x.T @ y`` with ``transpose_x``) into a new FP32 PSUM tile:
    docs/nki/highlevel.md's lowering (``x`` transposed on the Tensor Engine first, PSUM
    operands copied to SBUF)."""
    call = "nl.matmul"
    x = _value(call, "x", x)
    y = _value(call, "y", y)
    if mask is not None:
        not_modelled("nl.matmul(mask=...)")
    if len(x.shape) != 2:
        fail(call, f"x {list(x.shape)} must be a 2-D tile")
    m = x.shape[0] if transpose_x else x.shape[1]
    k = x.shape[1] if not transpose_x else x.shape[0]
    shape = (x.shape[1] if transpose_x else x.shape[0],) + tuple(y.shape[1:])
    if k != y.shape[0]:
        fail(
            call,
            f"x {list(x.shape)}, y {list(y.shape)}: the contraction ({k} and {y.shape[0]}) "
            "must be the same",
        )
    del m

    def emit(dst, box, acc):
        xs = highlevel._sbuf(x, "matmul_x")
        ys = highlevel._sbuf(y, "matmul_y")
        xs, ys = highlevel.one_mode(xs, ys)
        if not transpose_x:
            xt = highlevel._pe_transpose(xs, "matmul_xT")
            xs = _tl.new_tile(xt.shape, xt.dtype, name="matmul_xT")
            cisa.tensor_copy(dst=xs, src=xt)
        cisa.nc_matmul(dst=dst, stationary=xs, moving=ys, accumulate=None if acc else False)

    return produce(
        call,
        shape,
        "float32",
        emit,
        buffer=psum,
        name="matmul",
        spaces=("psum",),
        dtypes=("float32",),
        accumulates=True,
    )


def _bits(t):
    """A 4-byte integer tile read as float32 (the same bits): the Tensor Engine's transpose
    moves data without arithmetic, so integers pass through it as float32 words, as the
    compiler transposes them."""
    d = dtype_of(t.dtype)
    if d.is_float or d.itemsize != 4 or d.packed != 1:
        return t
    return t._view(t.shape, t.strides, t.offset, "float32")


def transpose(x, dtype=None, mask=None):
    """``x [P, F]`` transposed into a new PSUM tile ``[F, P]`` (the Tensor Engine; a PSUM
    ``x`` copied to SBUF first, a conversion to ``dtype`` after where it differs)."""
    call = "nl.transpose"
    x = _value(call, "x", x)
    if mask is not None:
        not_modelled("nl.transpose(mask=...)")
    if len(x.shape) != 2:
        fail(call, f"x {list(x.shape)} must be a 2-D tile")
    dt = _dt(call, dtype, x.dtype)

    def emit(dst, box, acc):
        xs = highlevel._sbuf(x, "transpose_in")
        if dst.dtype == x.dtype:
            cisa.nc_transpose(dst=_bits(dst), data=_bits(xs))
            return
        t = _tl.new_tile((free_size(x), x.shape[0]), x.dtype, psum, "transpose")
        cisa.nc_transpose(dst=t, data=xs)
        cisa.tensor_copy(dst=dst, src=t)

    return produce(
        call, (free_size(x), x.shape[0]), dt, emit, buffer=psum, name="transpose", spaces=("psum",)
    )


# -- the rest, lowered by the current language ------------------------------------------------------


def softmax(x, axis, dtype=None, mask=None):
    if mask is not None:
        not_modelled("nl.softmax(mask=...)")
    return Tile.of(highlevel.softmax(_value("nl.softmax", "x", x), axis=axis, dtype=dtype), 0)


def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None, mask=None):
    if mask is not None:
        not_modelled("nl.rms_norm(mask=...)")
    out = highlevel.rms_norm(
        _value("nl.rms_norm", "x", x),
        _value("nl.rms_norm", "w", w),
        axis,
        n,
        epsilon=epsilon,
        dtype=dtype,
        compute_dtype=compute_dtype,
    )
    return Tile.of(out, 0)


def expand_dims(data, axis):
    return tile_of(highlevel.expand_dims(data, axis))


def dropout(x, rate, dtype=None, mask=None):
    """``nisa.dropout`` into a new SBUF tile (docs/nki/highlevel.md)."""
    if mask is not None:
        not_modelled("nl.dropout(mask=...)")
    return Tile.of(cnl.dropout(_value("nl.dropout", "x", x), rate, dtype=dtype), 0)


def random_seed(seed, mask=None):
    """``nisa.set_rng_seed`` of a ``[1, 1]`` int32 tile."""
    if mask is not None:
        not_modelled("nl.random_seed(mask=...)")
    return cnl.random_seed(_value("nl.random_seed", "seed", seed))


def rand(shape, dtype=float32, buffer=sbuf, name=""):
    return Tile.of(cnl.rand(shape, dtype, buffer=buffer, name=name), 0)


def gather_flattened(data, indices, axis=0, dtype=None, mask=None):
    if mask is not None:
        not_modelled("nl.gather_flattened(mask=...)")
    data = _value("nl.gather_flattened", "data", data)
    indices = _value("nl.gather_flattened", "indices", indices)
    return Tile.of(highlevel.gather_flattened(data, indices, axis=axis, dtype=dtype), 0)


def device_print(prefix, x):
    return highlevel.device_print(prefix, x)


no_reorder = highlevel.no_reorder


__all__ = [
    "sbuf",
    "psum",
    "hbm",
    "private_hbm",
    "shared_hbm",
    "tile_size",
    "par_dim",
    "arange",
    "mgrid",
    "ds",
    "affine_range",
    "sequential_range",
    "static_range",
    "program_id",
    "num_programs",
    "program_ndim",
    "ndarray",
    "zeros",
    "ones",
    "full",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
    "shared_constant",
    "shared_identity_matrix",
    "load",
    "store",
    "load_transpose2d",
    "copy",
    "static_cast",
    "broadcast_to",
    "where",
    "sum",
    "max",
    "min",
    "prod",
    "all",
    "mean",
    "var",
    "loop_reduce",
    "matmul",
    "transpose",
    "softmax",
    "rms_norm",
    "expand_dims",
    "dropout",
    "random_seed",
    "rand",
    "gather_flattened",
    "device_print",
    "no_reorder",
    "reciprocal",
    "negative",
    "logical_not",
    "invert",
    "floor",
    "ceil",
    "trunc",
]
__all__ += list(_BINARY) + list(highlevel._ACTIVATION)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    if name in ("nc", "spmd_dim"):  # the launch grid's (ncrtl.nki.legacy.spmd)
        from . import spmd

        return getattr(spmd, name)
    return _trace.stand_in("neuronxcc.nki.language", "nl", name)


_trace.checked_module(globals(), "nl")

# names the module keeps for its own use (not the API's)
_Tile, _BlockTensor, _assign = Tile, BlockTensor, assign
