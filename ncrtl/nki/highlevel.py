"""The language's high-level functions (``nl.load``, ``nl.add``, ``nl.matmul``, ``nl.softmax``,
...), each lowered to instructions of the ISA: every function here calls ``nki.isa`` as a
kernel written with it would, so its streams, golden values and timing are those of the
instructions it lowers to.  The lowering table, with the engine of each instruction and why,
is docs/nki/highlevel.md; a function's error names the function, the instruction it lowered to
where that instruction refused, and the kernel's ``file:line``.

The functions of the operator tokens (``nl.add(x, y)``, ``nl.exp(x)``, ``nl.max(x, axis)``:
the names an ``nki.isa`` call also takes as ``op=``) are :data:`FUNCTIONS`, which the tokens'
``__call__`` runs; the other functions are this module's ``__all__``.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of

from . import _trace
from . import isa as nisa
from . import language as nl
from ._trace import NkiError, NkiTensor, caller_line, current, fail, not_modelled
from .isa.operands import emit, free_size, operand

__all__ = [
    "load",
    "store",
    "copy",
    "matmul",
    "transpose",
    "load_transpose2d",
    "softmax",
    "rms_norm",
    "sum",
    "mean",
    "prod",
    "var",
    "all",
    "where",
    "zeros_like",
    "empty_like",
    "expand_dims",
    "broadcast_to",
    "gather_flattened",
    "device_print",
    "no_reorder",
]

#: The operator tokens' functions (``nl.add(x, y)``), by token name (checked signatures).
FUNCTIONS = {}

_depth = threading.local()


def _lowered(call):
    """The decorator of a high-level function ``call`` (``"nl.softmax"``): an error of an
    instruction it lowers to is reported as the function's, ``file:line: nl.softmax: lowered
    to nisa.tensor_reduce: ...`` (the kernel's line; functions lowered inside another keep
    the outer one's name)."""

    def wrap(fn):
        @functools.wraps(fn)
        def lowered(*args, **kwargs):
            depth = getattr(_depth, "n", 0)
            _depth.n = depth + 1
            try:
                return fn(*args, **kwargs)
            except NkiError as e:
                text, at = str(e), f"{caller_line()}: "
                if depth or not text.startswith(at) or text.startswith(f"{at}{call}:"):
                    raise
                raise type(e)(f"{at}{call}: lowered to {text[len(at) :]}") from None
            finally:
                _depth.n = depth

        return lowered

    return wrap


def _token(name, call=None):
    """Register ``fn`` as the function of the operator token ``nl.<name>``."""

    def put(fn):
        FUNCTIONS[name] = _trace.checked_call(f"nl.{name}", _lowered(call or f"nl.{name}")(fn))
        return fn

    return put


# -- operands, new tiles, dtypes --------------------------------------------------------------------


def _is_number(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
        v, (bool, np.bool_)
    )


def _tile(call, what, t, spaces=("sbuf", "psum")):
    """``t`` as an on-chip tile (SBUF or PSUM unless ``spaces`` says otherwise)."""
    if not isinstance(t, NkiTensor):
        fail(call, f"{what} must be a tile (an nl.ndarray or a view of one), not {t!r}")
    if t._decl.space not in spaces:
        if t._decl.space == "hbm":
            fail(call, f"{what} {t.name} is in device memory (HBM): load it into SBUF (nl.load)")
        where = " or ".join("device memory (HBM)" if s == "hbm" else s.upper() for s in spaces)
        fail(call, f"{what} {t.name} is in {t.buffer}; it must be in {where}")
    return t


def _tile_or_number(call, what, v):
    if _is_number(v):
        return v
    return _tile(call, what, v)


def _dtype(call, dtype, default):
    if dtype is None:
        return default
    try:
        return dtype_of(dtype).name
    except ValueError as e:
        fail(call, f"dtype: {e}")


def _new(shape, dtype, name, buffer=None):
    """A new tile (SBUF unless ``buffer``) for a function's result or a step of it."""
    return nl.ndarray(tuple(shape), dtype, buffer=buffer or nl.sbuf, name=name)


def _float_rank(d):
    return {1: 0, 2: 1, 4: 2}[d.itemsize]


def promote(a, b):
    """The dtype of an operation on tiles of dtypes ``a`` and ``b`` (names): the same dtype;
    an integer and a float: the float; two floats: the wider, bfloat16 with float16 float32,
    two different 8-bit floats bfloat16, tfloat32 with float32 float32; two integers: the
    narrowest that holds both (numpy's rule), int32 where that would take 64 bits; bool_
    with any: the other (docs/nki/highlevel.md, "Dtypes")."""
    if a == b:
        return a
    da, db = dtype_of(a), dtype_of(b)
    if da.name == "bool_":
        return db.name
    if db.name == "bool_":
        return da.name
    if da.is_float != db.is_float:
        return (da if da.is_float else db).name
    if not da.is_float:
        p = np.promote_types(da.storage, db.storage)
        return "int32" if p.itemsize > 4 else dtype_of(p).name
    ra, rb = _float_rank(da), _float_rank(db)
    if ra != rb:
        return (da if ra > rb else db).name
    return {0: "bfloat16", 1: "float32", 2: "float32"}[ra]


def _with_number(dtype, number):
    """A tile of ``dtype`` with a number: a float number (``2.0`` too) makes an integer
    tile's result float32; otherwise the tile's dtype."""
    if isinstance(number, (float, np.floating)) and not dtype_of(dtype).is_float:
        return "float32"
    return dtype


def _broadcast(call, shapes):
    """The shape tiles of ``shapes`` broadcast to: the partition dimensions equal, the free
    dimensions by numpy's rule (aligned from the last)."""
    shapes = [tuple(s) for s in shapes]
    p = {s[0] for s in shapes}
    if len(p) > 1:
        fail(
            call,
            f"tiles {' and '.join(str(list(s)) for s in shapes)}: partition dimensions "
            f"{' and '.join(str(s[0]) for s in shapes)} differ; each engine lane computes its "
            f"own partition (nl.broadcast_to copies a tile across partitions)",
        )
    try:
        free = np.broadcast_shapes(*(s[1:] for s in shapes))
    except ValueError:
        fail(
            call,
            f"tiles {' and '.join(str(list(s)) for s in shapes)}: the free dimensions do not "
            f"broadcast (each must match or be 1)",
        )
    out = (shapes[0][0],) + tuple(free)
    return out if len(out) > 1 else out + (1,)


def _expand(t, shape):
    """``t`` read as ``shape`` (its free dimensions broadcast: a dimension of 1 read again with
    step 0), a view: no instruction."""
    if tuple(t.shape) == tuple(shape):
        return t
    lead = len(shape) - len(t.shape)
    dims = [(t.shape[0], t.strides[0])] + [(1, 0)] * lead + list(zip(t.shape[1:], t.strides[1:]))
    strides = [s if n == want else 0 for (n, s), want in zip(dims, shape)]
    return t._view(tuple(shape), tuple(strides), t.offset)


def _per_partition(t, shape):
    """Whether tile ``t`` is one value per partition of ``shape`` (``[P, 1]``): a
    ``tensor_scalar`` operand."""
    return free_size(t) == 1 and math.prod(shape[1:]) > 1


# -- element-wise functions ---------------------------------------------------------------------------


def _binary(name, x, y, dtype, out=None):
    """``nl.<name>(x, y)``: tiles or numbers, broadcast (docs/nki/highlevel.md)."""
    call = f"nl.{name}"
    x = _tile_or_number(call, "x", x)
    y = _tile_or_number(call, "y", y)
    xt, yt = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
    if not xt and not yt:
        fail(call, f"x={x!r} and y={y!r} are numbers: at least one must be a tile")
    op = getattr(nl, name)
    if xt and yt:
        shape = _broadcast(call, (x.shape, y.shape))
        dt = _dtype(call, dtype, promote(x.dtype, y.dtype))
        out = out if out is not None else _new(shape, dt, name)
        if _per_partition(y, shape) and not _per_partition(x, shape):
            nisa.tensor_scalar(dst=out, data=_expand(x, shape), op0=op, operand0=y)
        elif _per_partition(x, shape) and not _per_partition(y, shape):
            nisa.tensor_scalar(dst=out, data=_expand(y, shape), op0=op, operand0=x, reverse0=True)
        else:
            nisa.tensor_tensor(dst=out, data1=_expand(x, shape), data2=_expand(y, shape), op=op)
        return out
    tile, number = (x, y) if xt else (y, x)
    shape = tile.shape if len(tile.shape) > 1 else (tile.shape[0], 1)
    dt = _dtype(call, dtype, _with_number(tile.dtype, number))
    out = out if out is not None else _new(shape, dt, name)
    nisa.tensor_scalar(dst=out, data=tile, op0=op, operand0=number, reverse0=not xt)
    return out


_BINARY = (
    "add subtract multiply divide maximum minimum power mod fmod abs_max abs_min equal not_equal "
    "greater greater_equal less less_equal bitwise_and bitwise_or bitwise_xor left_shift "
    "right_shift logical_and logical_or logical_xor"
).split()

for _name in _BINARY:

    def _make(name):
        def binary(x, y, dtype=None):
            return _binary(name, x, y, dtype)

        binary.__name__ = binary.__qualname__ = name
        binary.__doc__ = f"``nl.{name}(x, y, dtype=None)``, element-wise (docs/nki/highlevel.md)."
        return binary

    _token(_name)(_make(_name))

#: The unary functions the Scalar Engine's activation computes (``nisa.activation``).
_ACTIVATION = (
    "exp log sqrt rsqrt tanh sigmoid relu gelu gelu_apprx_sigmoid gelu_apprx_tanh gelu_dx "
    "gelu_apprx_sigmoid_dx silu silu_dx softplus mish erf erf_dx sin cos tan arctan square abs "
    "sign"
).split()


def _unary_tile(call, x, dtype, name):
    x = _tile(call, "x", x)
    shape = x.shape if len(x.shape) > 1 else (x.shape[0], 1)
    return x, _new(shape, _dtype(call, dtype, x.dtype), name)


for _name in _ACTIVATION:

    def _make(name):
        def unary(x, dtype=None):
            x, out = _unary_tile(f"nl.{name}", x, dtype, name)
            nisa.activation(dst=out, op=getattr(nl, name), data=x)
            return out

        unary.__name__ = unary.__qualname__ = name
        unary.__doc__ = f"``nl.{name}(x, dtype=None)``: ``nisa.activation(op=nl.{name})``."
        return unary

    _token(_name)(_make(_name))
del _name, _make


@_token("reciprocal")
def reciprocal(x, dtype=None):
    """``1 / x``: ``nisa.reciprocal`` (the Vector Engine's float32 division, not the Scalar
    Engine's table)."""
    x, out = _unary_tile("nl.reciprocal", x, dtype, "reciprocal")
    nisa.reciprocal(dst=out, data=x)
    return out


@_token("negative")
def negative(x, dtype=None):
    """``-x``: ``x * -1`` (``nisa.tensor_scalar``; exact, ``-0`` for ``0``)."""
    x, out = _unary_tile("nl.negative", x, dtype, "negative")
    nisa.tensor_scalar(dst=out, data=x, op0=nl.multiply, operand0=-1.0)
    return out


@_token("logical_not")
def logical_not(x, dtype=None):
    """``x XOR 1`` as the reference implements it (``nisa.tensor_scalar(op0=logical_xor)``:
    1 where ``x`` is 0, else 0)."""
    x, out = _unary_tile("nl.logical_not", x, dtype, "logical_not")
    nisa.tensor_scalar(dst=out, data=x, op0=nl.logical_xor, operand0=1)
    return out


@_token("invert")
def invert(x, dtype=None):
    """Bitwise NOT: XOR with all ones, as the reference implements it
    (``nisa.tensor_scalar(op0=bitwise_xor, operand0=-1)``, -1 being all ones)."""
    x, out = _unary_tile("nl.invert", x, dtype, "invert")
    nisa.tensor_scalar(dst=out, data=x, op0=nl.bitwise_xor, operand0=-1)
    return out


def _floor_into(out, x, name):
    """``out = x - mod(x, 1)`` (``mod``'s result has the divisor's sign: ``x``'s floor)."""
    frac = _new(out.shape, "float32", f"{name}_frac")
    nisa.tensor_scalar(dst=frac, data=x, op0=nl.mod, operand0=1.0)
    nisa.tensor_tensor(dst=out, data1=x, data2=frac, op=nl.subtract)


@_token("floor")
def floor(x, dtype=None):
    """``x - mod(x, 1)``: two Vector instructions (docs/nki/highlevel.md)."""
    x, out = _unary_tile("nl.floor", x, dtype, "floor")
    _floor_into(out, x, "floor")
    return out


@_token("ceil")
def ceil(x, dtype=None):
    """``-floor(-x)``: four Vector instructions (``-0`` for ``-1 < x < 0``, as numpy)."""
    x, out = _unary_tile("nl.ceil", x, dtype, "ceil")
    neg = _new(out.shape, "float32", "ceil_neg")
    nisa.tensor_scalar(dst=neg, data=x, op0=nl.multiply, operand0=-1.0)
    low = _new(out.shape, "float32", "ceil_floor")
    _floor_into(low, neg, "ceil")
    nisa.tensor_scalar(dst=out, data=low, op0=nl.multiply, operand0=-1.0)
    return out


@_token("trunc")
def trunc(x, dtype=None):
    """``x - fmod(x, 1)`` (``fmod``'s result has ``x``'s sign): two Vector instructions."""
    x, out = _unary_tile("nl.trunc", x, dtype, "trunc")
    frac = _new(out.shape, "float32", "trunc_frac")
    nisa.tensor_scalar(dst=frac, data=x, op0=nl.fmod, operand0=1.0)
    nisa.tensor_tensor(dst=out, data1=x, data2=frac, op=nl.subtract)
    return out


# -- data movement --------------------------------------------------------------------------------


@_token("copy")
def copy(x, dtype=None):
    """A new SBUF tile with ``x``'s values (``nisa.tensor_copy``, converted to ``dtype``)."""
    x, out = _unary_tile("nl.copy", x, dtype, "copy")
    nisa.tensor_copy(dst=out, src=x)
    return out


def one_mode(x, y):
    """SBUF matmul operands ``x``, ``y`` of one dtype: the Tensor Engine multiplies operands
    of one mode, so of two dtypes the narrower is copied to the wider's (exact: bf16, fp16 and
    fp8 values are float32 values) and the product is the wider mode's (the older API's
    attention multiplies float32 by bfloat16 tiles)."""
    if x.dtype == y.dtype:
        return x, y
    wide = max((x, y), key=lambda t: dtype_of(t.dtype).itemsize).dtype
    if x.dtype != wide:
        x = _converted(x, wide, "matmul_x")
    if y.dtype != wide:
        y = _converted(y, wide, "matmul_y")
    return x, y


def _converted(x, dtype, name):
    """An SBUF tile ``x`` copied into a new tile of ``dtype`` (``nisa.tensor_copy``)."""
    t = _new(x.shape, dtype, name)
    nisa.tensor_copy(dst=t, src=x)
    return t


def _sbuf(x, name):
    """``x`` in SBUF: itself, or (a PSUM tile) its copy (``nisa.tensor_copy``)."""
    if x._decl.space == "sbuf":
        return x
    out = _new(x.shape, x.dtype, name)
    nisa.tensor_copy(dst=out, src=x)
    return out


def _on_chip_shape(call, what, t):
    if len(t.shape) < 2:
        fail(
            call,
            f"{what} {list(t.shape)} is 1-D: a tile is [partitions, free...] (reshape it to "
            f"[1, {t.shape[0]}] or [{t.shape[0]}, 1])",
        )
    parts = current(call).core.partitions
    if t.shape[0] > parts:
        fail(
            call,
            f"{what} {list(t.shape)}: its first dimension is the tile's partition dimension, "
            f"at most {parts} (load a slice: t[0:{parts}])",
        )


@_lowered("nl.load")
def load(src, dtype=None):
    """A new SBUF tile of ``src`` (device memory): one ``nisa.dma_copy`` (converting to
    ``dtype`` on the way where given)."""
    call = "nl.load"
    src = _tile(call, "src", src, ("hbm",))
    _on_chip_shape(call, "src", src)
    out = _new(src.shape, _dtype(call, dtype, src.dtype), "load")
    nisa.dma_copy(dst=out, src=src)
    return out


@_lowered("nl.store")
def store(dst, value):
    """``value`` (SBUF; a PSUM tile is first copied to SBUF) into ``dst`` (device memory): one
    ``nisa.dma_copy``."""
    call = "nl.store"
    dst = _tile(call, "dst", dst, ("hbm",))
    value = _tile(call, "value", value)
    if value.size != dst.size:
        fail(
            call,
            f"value {list(value.shape)} has {value.size} elements, dst {list(dst.shape)} "
            f"{dst.size}",
        )
    nisa.dma_copy(dst=dst, src=_sbuf(value, "store"))


@_lowered("nl.load_transpose2d")
def load_transpose2d(src, dtype=None):
    """A new SBUF tile ``[B, A]`` of the 2-D device tensor ``src [A, B]`` transposed:
    ``nisa.dma_transpose`` (then a ``nisa.tensor_copy`` where ``dtype`` differs)."""
    call = "nl.load_transpose2d"
    src = _tile(call, "src", src, ("hbm",))
    if len(src.shape) != 2:
        fail(call, f"src {list(src.shape)} must be 2-D")
    a, b = src.shape
    _on_chip_shape(call, "src transposed", src._view((b, a), src.strides[::-1], src.offset))
    out = _new((b, a), src.dtype, "load_transpose2d")
    nisa.dma_transpose(dst=out, src=src)
    dt = _dtype(call, dtype, src.dtype)
    if dt == src.dtype:
        return out
    conv = _new((b, a), dt, "load_transpose2d")
    nisa.tensor_copy(dst=conv, src=out)
    return conv


def _pe_transpose(x, name):
    """``x [P, F]`` (SBUF) transposed into a new PSUM tile ``[F, P]`` of its dtype: the
    Tensor Engine's transpose (``nisa.nc_transpose``, a matmul against an identity)."""
    out = _new((free_size(x), x.shape[0]), x.dtype, name, nl.psum)
    nisa.nc_transpose(dst=out, data=x)
    return out


@_lowered("nl.transpose")
def transpose(x, dtype=None):
    """A new PSUM tile ``[F, P]``: ``x [P, F]`` transposed on the Tensor Engine
    (``nisa.nc_transpose``; a PSUM ``x`` first copied to SBUF), then converted to ``dtype``
    into another PSUM tile where given."""
    call = "nl.transpose"
    x = _tile(call, "x", x)
    if len(x.shape) != 2:
        fail(call, f"x {list(x.shape)} must be a 2-D tile")
    out = _pe_transpose(_sbuf(x, "transpose_in"), "transpose")
    dt = _dtype(call, dtype, x.dtype)
    if dt == x.dtype:
        return out
    conv = _new(out.shape, dt, "transpose", nl.psum)
    nisa.tensor_copy(dst=conv, src=out)
    return conv


@_lowered("nl.matmul")
def matmul(x, y, transpose_x=False):
    """``x @ y`` (or ``x.T @ y`` with ``transpose_x``) into a new FP32 PSUM tile: one
    ``nisa.nc_matmul`` with ``x.T`` stationary and ``y`` moving; without ``transpose_x`` the
    Tensor Engine first transposes ``x`` (``nisa.nc_transpose`` into PSUM, a
    ``nisa.tensor_copy`` back to SBUF); PSUM operands are first copied to SBUF."""
    call = "nl.matmul"
    x = _tile(call, "x", x)
    y = _tile(call, "y", y)
    if len(x.shape) != 2:
        fail(call, f"x {list(x.shape)} must be a 2-D tile")
    x = _sbuf(x, "matmul_x")
    y = _sbuf(y, "matmul_y")
    x, y = one_mode(x, y)
    if not transpose_x:
        if x.shape[1] != y.shape[0]:
            fail(
                call,
                f"x {list(x.shape)} @ y {list(y.shape)}: x's free dimension {x.shape[1]} must "
                f"be y's partition dimension {y.shape[0]} (the contraction)",
            )
        xt = _pe_transpose(x, "matmul_xT")
        x = _new(xt.shape, xt.dtype, "matmul_xT")
        nisa.tensor_copy(dst=x, src=xt)
    elif x.shape[0] != y.shape[0]:
        fail(
            call,
            f"x {list(x.shape)}, y {list(y.shape)} with transpose_x: their partition dimensions "
            f"{x.shape[0]} and {y.shape[0]} must be the same (the contraction)",
        )
    out = _new((x.shape[1],) + tuple(y.shape[1:]), "float32", "matmul", nl.psum)
    nisa.nc_matmul(dst=out, stationary=x, moving=y)
    return out


@_lowered("nl.broadcast_to")
def broadcast_to(x, shape, dtype=None):
    """``x`` broadcast to ``shape`` (the same rank; each dimension equal or from 1): ``x``
    itself where the shape is its own (a ``nisa.tensor_copy`` where ``dtype`` differs); else a
    new SBUF tile: the free dimensions by one ``nisa.tensor_copy`` reading ``x`` with step 0,
    the partitions (``x`` of one partition) by DMA copies within the tile, each doubling the
    partitions written (``1 + ceil(log2 P)`` instructions in all)."""
    call = "nl.broadcast_to"
    x = _tile(call, "x", x)
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        fail(call, f"shape must be a tuple of integers, not {shape!r}")
    if len(shape) != len(x.shape) or any(
        a != b and a != 1 for a, b in zip(x.shape, shape, strict=True)
    ):
        fail(
            call,
            f"x {list(x.shape)} does not broadcast to {list(shape)} (the same rank, each "
            f"dimension equal or 1)",
        )
    dt = _dtype(call, dtype, x.dtype)
    if shape == tuple(x.shape):
        return x if dt == x.dtype else copy(x, dtype=dt)
    out = _new(shape, dt, "broadcast_to")
    p = shape[0]
    if x.shape[0] == p:
        nisa.tensor_copy(dst=out, src=_expand(x, shape))
        return out
    nisa.tensor_copy(dst=out[0:1], src=_expand(x, (1,) + shape[1:]))
    done = 1
    while done < p:
        n = done if 2 * done <= p else p - done
        nisa.dma_copy(dst=out[done : done + n], src=out[0:n])
        done += n
    return out


@_lowered("nl.expand_dims")
def expand_dims(x, axis):
    """A view of ``x`` with a dimension of 1 at ``axis`` (no instruction); a tile's partition
    dimension stays first."""
    call = "nl.expand_dims"
    if not isinstance(x, NkiTensor):
        fail(call, f"x must be a tile or a tensor, not {x!r}")
    n = len(x.shape) + 1
    a = _trace._int(axis, "axis", call)
    if not -n <= a < n:
        fail(call, f"axis {a} is outside the {n} dimensions of the result")
    a %= n
    if a == 0 and x.on_chip:
        fail(call, "axis 0: a tile's first dimension is its partition dimension")
    shape = x.shape[:a] + (1,) + x.shape[a:]
    strides = x.strides[:a] + (1,) + x.strides[a:]
    return x._view(shape, strides, x.offset)


@_lowered("nl.zeros_like")
def zeros_like(x, dtype=None, buffer=None, name=""):
    """A new tensor of ``x``'s shape set to zero (``nl.zeros``: one ``nisa.memset``), in
    ``buffer`` (default SBUF)."""
    call = "nl.zeros_like"
    if not isinstance(x, NkiTensor):
        fail(call, f"x must be a tensor, not {x!r}")
    dt = _dtype(call, dtype, x.dtype)
    return nl.zeros(x.shape, dt, buffer=nl.sbuf if buffer is None else buffer, name=name)


@_lowered("nl.empty_like")
def empty_like(x, dtype=None, buffer=None, name=""):
    """A new tensor of ``x``'s shape, uninitialized (``nl.ndarray``: no instruction), in
    ``buffer`` (default ``x``'s)."""
    call = "nl.empty_like"
    if not isinstance(x, NkiTensor):
        fail(call, f"x must be a tensor, not {x!r}")
    dt = _dtype(call, dtype, x.dtype)
    return nl.ndarray(x.shape, dt, buffer=x.buffer if buffer is None else buffer, name=name)


@_lowered("nl.gather_flattened")
def gather_flattened(data, indices, axis=0, dtype=None):
    """``out[p, i] = data[p].flatten()[indices[p, i]]``: ``nisa.nc_n_gather`` (GpSimd; the
    indices first converted to uint32 where they are another integer type, the result
    converted to ``dtype`` where given)."""
    call = "nl.gather_flattened"
    data = _tile(call, "data", data)
    indices = _tile(call, "indices", indices)
    if axis != 0:
        not_modelled(f"nl.gather_flattened(axis={axis!r}) (the reference's default axis=0 only)")
    if indices.dtype != "uint32":
        d = dtype_of(indices.dtype)
        if d.is_float or d.packed != 1:
            fail(call, f"indices {indices.name} is {indices.dtype}: indices are integers")
        conv = _new(indices.shape, "uint32", "gather_indices")
        nisa.tensor_copy(dst=conv, src=indices)
        indices = conv
    out = _new(indices.shape, data.dtype, "gather_flattened")
    nisa.nc_n_gather(dst=out, data=data, indices=indices)
    dt = _dtype(call, dtype, data.dtype)
    if dt == data.dtype:
        return out
    conv = _new(out.shape, dt, "gather_flattened")
    nisa.tensor_copy(dst=conv, src=out)
    return conv


@_lowered("nl.where")
def where(condition, x, y, dtype=None):
    """``x`` where ``condition`` is not 0, else ``y`` (tiles or numbers, broadcast): the
    predicate ``condition != 0`` as uint8 (``nisa.tensor_scalar``), ``y`` into the result
    (``nisa.tensor_copy``, or ``nisa.memset`` for a number), then ``x`` over it where the
    predicate holds (``nisa.tensor_copy_predicated``, ``x`` first converted to the result's
    dtype where it differs): values moved, never computed."""
    call = "nl.where"
    condition = _tile(call, "condition", condition)
    x = _tile_or_number(call, "x", x)
    y = _tile_or_number(call, "y", y)
    tiles = [t for t in (x, y) if isinstance(t, NkiTensor)]
    shape = _broadcast(call, [condition.shape] + [t.shape for t in tiles])
    default = "float32"
    if tiles:
        default = tiles[0].dtype if len(tiles) == 1 else promote(x.dtype, y.dtype)
    out = _new(shape, _dtype(call, dtype, default), "where")
    pred = _new(shape, "uint8", "where_predicate")
    nisa.tensor_scalar(dst=pred, data=_expand(condition, shape), op0=nl.not_equal, operand0=0.0)
    if isinstance(y, NkiTensor):
        nisa.tensor_copy(dst=out, src=_expand(y, shape))
    else:
        nisa.memset(dst=out, value=y)
    if isinstance(x, NkiTensor):
        if x.dtype != out.dtype:
            conv = _new(shape, out.dtype, "where_x")
            nisa.tensor_copy(dst=conv, src=_expand(x, shape))
            x = conv
        x = _expand(x, shape)
    nisa.tensor_copy_predicated(dst=out, src=x, predicate=pred)
    return out


# -- reductions ---------------------------------------------------------------------------------------


def free_axes(call, x, axis):
    """``axis`` (an int or a tuple / list of them) as the sorted tuple of the free dimensions of
    ``x`` it names (each in range, none the partition dimension)."""
    n = len(x.shape)
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    if not items:
        fail(call, "axis names no dimension")
    axes = []
    for a in items:
        a = _trace._int(a, "axis", call)
        if not -n <= a < n:
            fail(call, f"axis {a} is outside the {n} dimensions of x {list(x.shape)}")
        axes.append(a % n)
    axes = tuple(sorted(set(axes)))
    if 0 in axes:
        fail(
            call,
            "axis 0 is the partition dimension: a reduction runs along the free dimensions "
            "(transpose the tile first, nl.transpose)",
        )
    return axes


def _axes(call, x, axis):
    """:func:`free_axes`, which must be the last ones of ``x`` (as ``nisa.tensor_reduce``
    reduces)."""
    n = len(x.shape)
    axes = free_axes(call, x, axis)
    if axes != tuple(range(n - len(axes), n)):
        last = [list(range(k, n)) for k in range(n - 1, 0, -1)]
        fail(
            call,
            f"axis {list(axes)} of x {list(x.shape)}: the reduced axes must be the last free "
            f"dimensions ({', '.join(map(str, last))})",
        )
    return axes


def _reduced_shape(x, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return shape if len(shape) > 1 else shape + (1,)


def _reduce(call, op, x, axes, dtype, keepdims, name, negate=False):
    out = _new(_reduced_shape(x, axes, keepdims), dtype, name)
    nisa.tensor_reduce(dst=out, op=op, data=x, axis=axes, negate=negate, keepdims=keepdims)
    return out


def _make_reduction(name, op):
    call = f"nl.{name}"

    def reduction(x, axis, dtype=None, keepdims=False):
        x = _tile(call, "x", x)
        axes = _axes(call, x, axis)
        return _reduce(call, op(), x, axes, _dtype(call, dtype, x.dtype), keepdims, name)

    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = f"``{call}(x, axis, dtype=None, keepdims=False)``: ``nisa.tensor_reduce``."
    return reduction


_token("max")(_make_reduction("max", lambda: nl.maximum))
_token("min")(_make_reduction("min", lambda: nl.minimum))
sum = _lowered("nl.sum")(_make_reduction("sum", lambda: nl.add))  # noqa: A001
prod = _lowered("nl.prod")(_make_reduction("prod", lambda: nl.multiply))


@_lowered("nl.all")
def all(x, axis, dtype=None):  # noqa: A001
    """1 where every element along ``axis`` is not 0, else 0: ``nisa.tensor_reduce`` with
    ``logical_and``."""
    call = "nl.all"
    x = _tile(call, "x", x)
    axes = _axes(call, x, axis)
    return _reduce(call, nl.logical_and, x, axes, _dtype(call, dtype, x.dtype), False, "all")


def _count(x, axes):
    return math.prod(x.shape[a] for a in axes)


def _divide_into(out, src, n):
    nisa.tensor_scalar(dst=out, data=src, op0=nl.divide, operand0=float(n))


@_lowered("nl.mean")
def mean(x, axis, dtype=None, keepdims=False):
    """The float32 sum (``nisa.tensor_reduce``) divided by the count (``nisa.tensor_scalar``):
    two roundings, the sum's and the quotient's."""
    call = "nl.mean"
    x = _tile(call, "x", x)
    axes = _axes(call, x, axis)
    total = _reduce(call, nl.add, x, axes, "float32", keepdims, "mean_sum")
    out = _new(total.shape, _dtype(call, dtype, x.dtype), "mean")
    _divide_into(out, total, _count(x, axes))
    return out


@_lowered("nl.var")
def var(x, axis, dtype=None, keepdims=False):
    """The population variance, in two passes in float32: the mean (as :func:`mean`), the
    deviations ``x - mean`` and their squares, their sum divided by the count; the result
    keeps the reduced axes as 1 whatever ``keepdims`` (the reference's note)."""
    call = "nl.var"
    x = _tile(call, "x", x)
    axes = _axes(call, x, axis)
    n = _count(x, axes)
    total = _reduce(call, nl.add, x, axes, "float32", True, "var_sum")
    avg = _new(total.shape, "float32", "var_mean")
    _divide_into(avg, total, n)
    dev = _binary("subtract", x, avg, "float32")
    sq = _new(dev.shape, "float32", "var_square")
    nisa.tensor_tensor(dst=sq, data1=dev, data2=dev, op=nl.multiply)
    ss = _reduce(call, nl.add, sq, axes, "float32", True, "var_sum_squares")
    out = _new(ss.shape, _dtype(call, dtype, x.dtype), "var")
    _divide_into(out, ss, n)
    return out


@_lowered("nl.softmax")
def softmax(x, axis=-1, dtype=None):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``, in float32: the negated maximum
    (``nisa.tensor_reduce(negate=True)``), the exponentials (``nisa.activation(exp)`` with the
    negated maximum as its bias where it is one value per partition; else a
    ``nisa.tensor_tensor`` add first), their sum (``nisa.tensor_reduce``), the quotient
    (``nisa.tensor_scalar`` / ``nisa.tensor_tensor`` divide) rounded once to ``dtype``."""
    call = "nl.softmax"
    x = _tile(call, "x", x)
    axes = _axes(call, x, axis)
    shape = x.shape if len(x.shape) > 1 else (x.shape[0], 1)
    negmax = _reduce(call, nl.maximum, x, axes, "float32", True, "softmax_negmax", negate=True)
    e = _new(shape, "float32", "softmax_exp")
    if _per_partition(negmax, shape):
        nisa.activation(dst=e, op=nl.exp, data=x, bias=negmax)
    else:
        shifted = _binary("add", x, negmax, "float32")
        nisa.activation(dst=e, op=nl.exp, data=shifted)
    total = _reduce(call, nl.add, e, axes, "float32", True, "softmax_sum")
    return _binary("divide", e, total, _dtype(call, dtype, x.dtype))


@_lowered("nl.rms_norm")
def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None):
    """``x / sqrt(sum(x^2) / n + epsilon) * w``: the squares (``nisa.activation(square)``),
    their sum (``nisa.tensor_reduce``), ``/ n + epsilon`` (one ``nisa.tensor_scalar``), the
    reciprocal square root (``nisa.activation(rsqrt)``), ``x`` times it (``nisa.tensor_scalar``
    or ``tensor_tensor``) in ``compute_dtype`` (default float32), times ``w`` (broadcast as
    :func:`nl.multiply <add>` does) rounded once to ``dtype``."""
    call = "nl.rms_norm"
    x = _tile(call, "x", x)
    w = _tile(call, "w", w)
    axes = _axes(call, x, axis)
    count = _trace._int(n, "n", call)
    if count < 1:
        fail(call, f"n={count}: the count of values must be positive")
    if not _is_number(epsilon):
        fail(call, f"epsilon must be a number, not {epsilon!r}")
    cd = _dtype(call, compute_dtype, "float32")
    shape = x.shape if len(x.shape) > 1 else (x.shape[0], 1)
    sq = _new(shape, cd, "rms_norm_square")
    nisa.activation(dst=sq, op=nl.square, data=x)
    ss = _reduce(call, nl.add, sq, axes, cd, True, "rms_norm_sum")
    ms = _new(ss.shape, cd, "rms_norm_mean")
    nisa.tensor_scalar(
        dst=ms, data=ss, op0=nl.divide, operand0=float(count), op1=nl.add, operand1=float(epsilon)
    )
    r = _new(ss.shape, cd, "rms_norm_rsqrt")
    nisa.activation(dst=r, op=nl.rsqrt, data=ms)
    y = _binary("multiply", x, r, cd)
    return _binary("multiply", y, w, _dtype(call, dtype, x.dtype))


# -- debugging and scheduling -------------------------------------------------------------------------


@_lowered("nl.device_print")
def device_print(print_prefix, tensor):
    """Print ``print_prefix`` and ``tensor``'s values when the golden runs it: one DMA
    instruction (``device_print``) that copies the tensor (SBUF or device memory) to a
    device-memory buffer of its own, as the runtime's debug stream does, timed as that
    transfer."""
    call = "nl.device_print"
    if not isinstance(print_prefix, str):
        fail(
            call,
            f"print_prefix must be a string known when the kernel is traced, not {print_prefix!r}",
        )
    t = _tile(call, "tensor", tensor, ("sbuf", "hbm"))
    buf = nl.ndarray(t.shape, t.dtype, buffer=nl.private_hbm, name="device_print")
    d = operand(call, "tensor", buf, ("hbm",))
    s = operand(call, "tensor", t, ("sbuf", "hbm"))
    emit("dma", "device_print", [d], [s], {"prefix": print_prefix}, call)


class _NoReorder:
    """``with nl.no_reorder():`` -- ncrtl never reorders a kernel's instructions (each engine
    runs its stream in program order; engines wait on each other only where data flows), so
    the block changes no stream; the trace counts the blocks it is inside
    (``trace.no_reorder``)."""

    def __enter__(self):
        tr = current("nl.no_reorder")
        tr.no_reorder = getattr(tr, "no_reorder", 0) + 1
        self.trace = tr
        return None

    def __exit__(self, *exc):
        self.trace.no_reorder -= 1
        return False


def no_reorder():
    """``with nl.no_reorder():``: the block's instructions stay in program order
    (:class:`_NoReorder`)."""
    current("nl.no_reorder")
    return _NoReorder()
