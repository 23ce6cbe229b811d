"""``nki.isa`` as ncrtl models it: each call checks its operands against the ISA's rules when
the kernel is traced and appends one instruction to its engine's stream.

The rules of the Tensor Engine (modes, shapes, tiles, MX layouts, sparse operands) are its
golden's (:func:`ncrtl.model.tensor_engine.matmul.instructions`,
:func:`~ncrtl.model.tensor_engine.sparse.sparse_instructions`): checked here on the operands'
shapes and dtypes, and the LoadStationary / MultiplyMoving words the Tensor Engine takes go into
the stream.  Every error starts with the kernel's ``file:line``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import replace

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.golden import ACTIVATIONS, ALU_OPS
from ncrtl.model.tensor_engine import isa as te_isa
from ncrtl.model.tensor_engine.matmul import instructions, mx_instructions
from ncrtl.model.tensor_engine.sparse import sparse_instructions

from . import _trace
from ._trace import NkiTensor, caller_line, current, fail, not_modelled


class engine(enum.IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


tensor_engine, scalar_engine, gpsimd_engine, vector_engine, unknown_engine = (
    engine.tensor,
    engine.scalar,
    engine.gpsimd,
    engine.vector,
    engine.unknown,
)


class matmul_perf_mode(str, enum.Enum):
    none = "none"
    double_row = "double_row"


class dge_mode(enum.IntEnum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.IntEnum):
    error = 0
    skip = 1


class reduce_cmd(enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dma_engine(enum.IntEnum):
    dma = 1
    gpsimd_dma = 2


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version():
    return nc_version(int(current("nisa.get_nc_version").core.name[1]))


# -- helpers -----------------------------------------------------------------------------------


def _is_tensor(call, what, t):
    if not isinstance(t, NkiTensor):
        fail(call, f"{what} must be a tensor (nl.ndarray or a view of one), not {t!r}")


def _pair(call, what, v):
    """``tile_position`` / ``tile_size``: a tuple of integers, or None where not given."""
    if v is None or (isinstance(v, (tuple, list)) and not v):
        return None
    if not isinstance(v, (tuple, list)):
        fail(call, f"{what} must be a tuple of integers, not {v!r}")
    return tuple(_trace._int(i, what, call) for i in v)


def _tensor(call, what, t, spaces):
    """The operand of argument ``what``: an NkiTensor in one of ``spaces``."""
    _is_tensor(call, what, t)
    if t._decl.space not in spaces:
        where = " or ".join(s.upper() if s != "hbm" else "device memory (HBM)" for s in spaces)
        fail(call, f"{what} {t.name} is in {t.buffer}; it must be in {where}")
    return t._operand(call, what)


def _emit(engine_name, op, dsts, srcs, args, call):
    tr = current(call)
    if tr.bounds is not None:
        tr.bounds.emit(call)
    if op not in ("matmul", "matmul_mx", "matmul_sparse"):
        # Another engine reading (an eviction) or writing a PSUM location ends its matmul
        # accumulation there: with accumulate=None the next matmul into it overwrites.
        for o in (*dsts, *srcs):
            seen = tr.matmul_written.get(o.decl)
            if seen:
                box = o.extent0
                seen.difference_update([b for b in seen if _overlaps(b, box)])
    return tr.builder.emit(engine_name, op, dsts, srcs, args, line=caller_line(), call=call)


def _overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _engine(call, value, allowed, default):
    if value in (None, engine.unknown):
        return default
    names = {
        engine.vector: "vector",
        engine.scalar: "scalar",
        engine.gpsimd: "gpsimd",
        engine.tensor: "tensor",
    }
    name = names.get(value)
    if name not in allowed:
        fail(call, f"engine={value!r}: this instruction runs on {', '.join(allowed)}")
    return name


def _free(t):
    return math.prod(t.shape[1:]) if len(t.shape) > 1 else 1


def _op_name(call, what, op, table):
    name = getattr(op, "name", op)
    if not isinstance(name, str) or name not in table:
        fail(call, f"{what}={op!r} is not modelled; modelled: {', '.join(sorted(table))}")
    return name


def _zeros(dtype, shape):
    d = dtype_of(dtype)
    return np.broadcast_to(np.zeros((), d.storage), shape)


def _no_psum_pair(call, *ts):
    if sum(1 for t in ts if isinstance(t, NkiTensor) and t._decl.space == "psum") > 1:
        fail(call, "at most one input may be in PSUM")


def _same_layout(call, dst, *srcs):
    for what, s in srcs:
        if s.shape[0] != dst.shape[0] or _free(s) != _free(dst):
            fail(
                call,
                f"{what} {list(s.shape)} and dst {list(dst.shape)} must have the same partitions "
                f"and elements per partition",
            )


# -- Tensor Engine ------------------------------------------------------------------------------


def _accumulate(tr, dst_op, accumulate):
    """``accumulate=None``: overwrite on a location's first matmul write, accumulate after,
    until another engine reads or writes the location (:func:`_emit`)."""
    box = dst_op.extent0
    seen = tr.matmul_written.setdefault(dst_op.decl, set())
    first = box not in seen
    seen.add(box)
    if accumulate is None:
        return not first
    return bool(accumulate)


def _chunks(call, tr, n, limit):
    """The column chunks ``[(first, n)]`` of a matmul of ``n`` moving columns: one when ``n``
    fits one MultiplyMoving (``limit``), else -- NeuronCore-v4's matmuls up to 4096 (FP32) /
    8192 (BF16) columns -- one MultiplyMoving per ``limit`` columns on the one
    LoadStationary, each into its own PSUM bank (or half bank)."""
    if n <= limit:
        return [(0, n)]
    most = 8 * limit
    if tr.core.name != "v4" or n > most:
        fail(
            call,
            f"moving free size N={n}: at most {limit} on NeuronCore-{tr.core.name}"
            + (f" ({most} on v4)" if tr.core.name != "v4" else f", {most} on v4"),
        )
    return [(c, min(limit, n - c)) for c in range(0, n, limit)]


def _psum_dst(call, tr, dst, m, n, dtypes, chunk=None):
    d = _tensor(call, "dst", dst, ("psum",))
    if dst.dtype not in dtypes:
        fail(
            call,
            f"dst dtype {dst.dtype}: on NeuronCore-{tr.core.name} a matmul writes {' or '.join(dtypes)} PSUM",
        )
    if dst.shape[0] != m or _free(dst) != n:
        fail(call, f"dst {list(dst.shape)} must be [M={m}, N={n}] (stationary.T @ moving)")
    # PSUM tensors are placed on whole banks: where the view starts in its tensor's row
    # decides whether its N elements stay in one bank
    bank = tr.core.psum_bank_bytes
    isz = dtype_of(dst.dtype).itemsize
    start = (dst.offset % dst._row_elements()) * isz
    step = chunk or n
    if step < n and not _contiguous_free(dst):
        fail(call, f"dst {dst.name}: a matmul over several PSUM banks writes contiguous columns")
    for c in range(0, n, step):
        lo, width = start + c * isz, min(step, n - c) * isz
        if lo % bank + width > bank:
            fail(
                call,
                f"dst {dst.name} bytes {lo}..{lo + width - 1} of each partition cross a "
                f"{bank}-byte PSUM bank: each MultiplyMoving writes one bank (N <= "
                f"{bank // isz} {dst.dtype}"
                + (f"; start the destination on a bank of {step} columns)" if step < n else ")"),
            )
    return d


def _contiguous_free(t):
    step = 1
    for n, s in zip(reversed(t.shape[1:]), reversed(t.strides[1:])):
        if n > 1 and s != step:
            return False
        step *= n
    return True


#: The Tensor Engine's words of the matmuls traced so far, by everything they follow from (the
#: operands' dtypes and shapes, the arguments, the core's array): the rules are checked and the
#: words encoded once per shape, not once per call.
_MATMULS = {}
_MATMULS_MAX = 4096


def nc_matmul(
    dst,
    stationary,
    moving,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    accumulate=None,
    tile_position=(),
    tile_size=(),
    perf_mode=matmul_perf_mode.none,
    name=None,
):
    """``dst = stationary.T @ moving`` on the Tensor Engine (PSUM ``dst``, SBUF operands)."""
    call = "nisa.nc_matmul"
    tr = current(call)
    s = _tensor(call, "stationary", stationary, ("sbuf",))
    x = _tensor(call, "moving", moving, ("sbuf",))
    _is_tensor(call, "dst", dst)
    pm = getattr(perf_mode, "value", perf_mode)
    pm = None if pm in (None, "none") else pm
    if pm is not None and tr.core.name == "v2":
        fail(call, "perf_mode double_row needs NeuronCore-v3 or later")
    pos = _pair(call, "tile_position", tile_position)
    size = _pair(call, "tile_size", tile_size)
    fs = "tf32" if stationary.dtype == "tfloat32" else None
    fm = "tf32" if moving.dtype == "tfloat32" else None
    n_all = moving.shape[-1] if pm == "double_row" else _free(moving)
    chunks = _chunks(call, tr, n_all, 512) if not is_transpose else [(0, n_all)]
    first = moving.shape[:-1] + (chunks[0][1],) if len(chunks) > 1 else moving.shape
    c = tr.core
    key = (stationary.dtype, stationary.shape, moving.dtype, first, pm, bool(is_transpose), pos)
    key += (size, c.rows, c.cols, c.tile_unit, fs, fm, tuple(chunks))
    try:
        hit = _MATMULS.get(key)
    except TypeError:  # an argument that is no value (a list as perf_mode): checked anew
        key = hit = None
    if hit is None:
        try:
            ls, mm = instructions(
                _zeros(stationary.dtype, stationary.shape),
                _zeros(moving.dtype, first),
                perf_mode=pm,
                is_transpose=bool(is_transpose),
                tile_position=pos,
                tile_size=size,
                rows=c.rows,
                cols=c.cols,
                stationary_format=fs,
                moving_format=fm,
                tile_unit=c.tile_unit,
            )
        except ValueError as e:
            fail(
                call,
                f"stationary {list(stationary.shape)} {stationary.dtype}, moving {list(moving.shape)} {moving.dtype}: {e}",
            )
        hit = (mm, [te_isa.encode(ls)] + [te_isa.encode(replace(mm, n=cn)) for _, cn in chunks])
        if key is not None and len(_MATMULS) < _MATMULS_MAX:
            _MATMULS[key] = hit
    mm, words = hit
    if is_transpose:
        if dtype_of(stationary.dtype).itemsize == 1:
            not_modelled(
                "nisa.nc_matmul(is_transpose=True) of 1-byte data into PSUM (the Tensor Engine "
                "leaves FP8 encodings in 16-bit PSUM slots)"
            )
        if dst.dtype != stationary.dtype:
            fail(
                call,
                f"a transpose writes the stationary's dtype {stationary.dtype}, dst is {dst.dtype}",
            )
        dtypes = (stationary.dtype,)
    else:
        dtypes = ("float32", "bfloat16") if tr.core.name == "v4" else ("float32",)
    d = _psum_dst(call, tr, dst, mm.m, n_all, dtypes, chunks[0][1])
    if pos is not None and dst.offset // max(1, dst._row_elements()) != pos[1]:
        fail(
            call,
            f"dst must start at partition {pos[1]} (the tile's first column), not {dst.offset // dst._row_elements()}",
        )
    acc = _accumulate(tr, d, accumulate) if not is_transpose else False
    args = {
        "te": list(words),
        "chunks": [list(c) for c in chunks] if len(chunks) > 1 else None,
        "perf_mode": pm,
        "is_transpose": bool(is_transpose),
        "tile_position": pos,
        "tile_size": size,
        "accumulate": acc,
        "rounding": tr.psum_rounding if dst.dtype == "bfloat16" and not is_transpose else None,
    }
    _emit("tensor", "matmul", [d], [s, x], args, call)


def nc_matmul_mx(
    dst,
    stationary,
    moving,
    stationary_scale,
    moving_scale,
    tile_position=None,
    tile_size=None,
    accumulate=None,
    name=None,
):
    """The MX matmul (NeuronCore-v4): ``_x4`` operands with their E8M0 scales."""
    call = "nisa.nc_matmul_mx"
    tr = current(call)
    if tr.core.name != "v4":
        fail(call, f"MX matmuls need NeuronCore-v4, the kernel targets {tr.core.name}")
    s = _tensor(call, "stationary", stationary, ("sbuf",))
    x = _tensor(call, "moving", moving, ("sbuf",))
    ss = _tensor(call, "stationary_scale", stationary_scale, ("sbuf",))
    xs = _tensor(call, "moving_scale", moving_scale, ("sbuf",))
    _is_tensor(call, "dst", dst)
    for what, t in (("stationary", stationary), ("moving", moving)):
        if dtype_of(t.dtype).packed != 4:
            fail(
                call,
                f"{what} dtype {t.dtype} must be float8_e4m3fn_x4, float8_e5m2_x4 or float4_e2m1fn_x4",
            )
    for what, t in (("stationary_scale", stationary_scale), ("moving_scale", moving_scale)):
        if dtype_of(t.dtype).itemsize != 1 or dtype_of(t.dtype).fmt is not None:
            fail(call, f"{what} dtype {t.dtype} must be uint8 / float8_e8m0fnu (E8M0 scales)")
    pos = _pair(call, "tile_position", tile_position)
    size = _pair(call, "tile_size", tile_size)
    from ncrtl.model.fp import get_format

    def unpacked(t):
        f = get_format(dtype_of(t.dtype).fmt)
        return np.broadcast_to(np.zeros((), f.dtype), (t.shape[0], _free(t), 4))

    psum_dtype = "bf16" if dst.dtype == "bfloat16" else "fp32"
    n_all = _free(moving)
    chunks = _chunks(call, tr, n_all, 1024 if psum_dtype == "bf16" else 512)
    try:
        ls, mm = mx_instructions(
            unpacked(stationary),
            unpacked(moving)[:, : chunks[0][1]],
            tile_position=pos,
            tile_size=size,
            rows=tr.core.rows,
            cols=tr.core.cols,
            psum_dtype=psum_dtype,
        )
    except ValueError as e:
        fail(call, f"stationary {list(stationary.shape)}, moving {list(moving.shape)}: {e}")
    for what, t, free in (
        ("stationary_scale", stationary_scale, mm.m),
        ("moving_scale", moving_scale, n_all),
    ):
        if _free(t) != free:
            fail(call, f"{what} {list(t.shape)} must hold {free} scales per partition")
    d = _psum_dst(call, tr, dst, mm.m, n_all, ("float32", "bfloat16"), chunks[0][1])
    acc = _accumulate(tr, d, accumulate)
    args = {
        "te": [te_isa.encode(ls)] + [te_isa.encode(replace(mm, n=cn)) for _, cn in chunks],
        "chunks": [list(c) for c in chunks] if len(chunks) > 1 else None,
        "tile_position": pos,
        "tile_size": size,
        "accumulate": acc,
        "rounding": tr.psum_rounding if dst.dtype == "bfloat16" else None,
    }
    _emit("tensor", "matmul_mx", [d], [s, x, ss, xs], args, call)


def nc_matmul_sparse(moving, stationary, tag, compress_ratio, dst=None, accumulate=None, name=None):
    """The M:N structured-sparse matmul (NeuronCore-v3 on, seed 000): ``moving [K, R, N]``
    (partition ``p`` holds dense rows ``p R .. p R + R - 1``), the compressed ``stationary
    [K, M]`` and its packed position tags ``tag`` (uint16 ``[K, ceil(M / 4)]``), all in SBUF,
    at compression ratio ``compress_ratio`` = ``R``.  Returns a new FP32 PSUM tile ``[M, N]``
    (the seed's form), or writes ``dst=`` (as ``nc_matmul``: ``accumulate=None`` overwrites a
    location on its first matmul write and accumulates after).  Values and rules are the
    golden's, :func:`ncrtl.model.tensor_engine.matmul_sparse`; the tags' values are checked
    when the stream runs."""
    call = "nisa.nc_matmul_sparse"
    tr = current(call)
    if tr.core.name == "v2":
        fail(call, "sparse matmuls need NeuronCore-v3 or later")
    s = _tensor(call, "stationary", stationary, ("sbuf",))
    x = _tensor(call, "moving", moving, ("sbuf",))
    t = _tensor(call, "tag", tag, ("sbuf",))
    try:
        ls, mm = sparse_instructions(
            _zeros(moving.dtype, moving.shape),
            _zeros(stationary.dtype, stationary.shape),
            _zeros(tag.dtype, tag.shape),
            compress_ratio,
            rows=tr.core.rows,
            cols=tr.core.cols,
            stationary_format="tf32" if stationary.dtype == "tfloat32" else None,
            moving_format="tf32" if moving.dtype == "tfloat32" else None,
            tile_unit=tr.core.tile_unit,
        )
    except ValueError as e:
        code = getattr(getattr(e, "error", None), "name", "NONE")
        fail(
            call,
            f"moving {list(moving.shape)} {moving.dtype}, stationary {list(stationary.shape)} "
            f"{stationary.dtype}, tag {list(tag.shape)} {tag.dtype}, compress_ratio "
            f"{compress_ratio!r}: " + (f"{code}: " if code != "NONE" else "") + str(e),
        )
    if dst is None:
        from . import language as nl

        dst = nl.ndarray((mm.m, mm.n), nl.float32, buffer=nl.psum, name=name or "")
    d = _psum_dst(call, tr, dst, mm.m, mm.n, ("float32",))
    args = {
        # the MultiplyMoving's beat reads R elements of each of the K partitions: the moving
        # operand is the whole [K, R, N] view, the stationary's LoadStationary reads the tags
        "te": [te_isa.encode(ls), te_isa.encode(mm)],
        "accumulate": _accumulate(tr, d, accumulate),
    }
    _emit("tensor", "matmul_sparse", [d], [s, x, t], args, call)
    return dst


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    """Transpose ``data [P, F]`` into ``dst [F, P]``: on the Tensor Engine (a matmul against an
    identity, into PSUM) or, for tiles up to 32 x 32, on the Vector Engine."""
    call = "nisa.nc_transpose"
    tr = current(call)
    _is_tensor(call, "dst", dst)
    _is_tensor(call, "data", data)
    p, f = data.shape[0], _free(data)
    small = p <= 32 and f <= 32
    default = "vector" if small and dst._decl.space == "sbuf" else "tensor"
    which = _engine(call, engine, ("tensor", "vector"), default)
    if dst.dtype != data.dtype:
        fail(call, f"dst dtype {dst.dtype} must be data's {data.dtype}")
    if dst.shape[0] != f or _free(dst) != p:
        fail(call, f"dst {list(dst.shape)} must be [{f}, {p}] for data {list(data.shape)}")
    if which == "vector":
        if not small:
            fail(call, f"the Vector Engine transposes at most 32 x 32, data is {list(data.shape)}")
        src = _tensor(call, "data", data, ("sbuf", "psum"))
        d = _tensor(call, "dst", dst, ("sbuf", "psum"))
        _emit("vector", "transpose", [d], [src], {}, call)
        return
    key = (p, data.dtype)
    ident = tr.identities.get(key)
    if ident is None:
        from . import language as nl

        ident = nl.ndarray((p, p), data.dtype, buffer=nl.sbuf, name=f"identity_{p}_{data.dtype}")
        _emit("gpsimd", "identity", [_tensor(call, "identity", ident, ("sbuf",))], [], {}, call)
        tr.identities[key] = ident
    flat = data if len(data.shape) == 2 else data.reshape((p, f))
    nc_matmul(dst, flat, ident, is_transpose=True)


# -- Vector / Scalar / GpSimd -------------------------------------------------------------------


def tensor_copy(dst, src, engine=engine.unknown, name=None):
    """Copy an on-chip tensor into another, converting to ``dst``'s dtype (PSUM -> SBUF
    eviction)."""
    call = "nisa.tensor_copy"
    which = _engine(call, engine, ("vector", "scalar", "gpsimd"), "vector")
    s = _tensor(call, "src", src, ("sbuf", "psum"))
    d = _tensor(call, "dst", dst, ("sbuf", "psum"))
    if which == "gpsimd" and "psum" in (src._decl.space, dst._decl.space):
        fail(call, "the GpSimd engine cannot access PSUM")
    _same_layout(call, dst, ("src", src))
    _emit(which, "tensor_copy", [d], [s], {}, call)


def memset(dst, value, engine=engine.unknown, name=None):
    """Fill ``dst`` with a constant."""
    call = "nisa.memset"
    d = _tensor(call, "dst", dst, ("sbuf", "psum"))
    default = "gpsimd" if dst._decl.space == "sbuf" else "vector"
    which = _engine(call, engine, ("vector", "gpsimd"), default)
    if which == "gpsimd" and dst._decl.space == "psum":
        fail(call, "the GpSimd engine cannot access PSUM")
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        fail(call, f"value must be a number known when the kernel is traced, not {value!r}")
    if dtype_of(dst.dtype).packed != 1 and value != 0:
        fail(call, f"a packed {dst.dtype} tensor can only be set to 0")
    _emit(which, "memset", [d], [], {"value": float(value)}, call)


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """``dst = op(data1, data2)`` elementwise (float32 arithmetic)."""
    call = "nisa.tensor_tensor"
    which = _engine(call, engine, ("vector", "gpsimd"), "vector")
    opname = _op_name(call, "op", op, ALU_OPS)
    a = _tensor(call, "data1", data1, ("sbuf", "psum"))
    b = _tensor(call, "data2", data2, ("sbuf", "psum"))
    d = _tensor(call, "dst", dst, ("sbuf", "psum"))
    _no_psum_pair(call, data1, data2)
    _same_layout(call, dst, ("data1", data1), ("data2", data2))
    _emit(which, "tensor_tensor", [d], [a, b], {"op": opname}, call)


def _scalar_operand(call, what, value, srcs):
    if value is None:
        return None
    if isinstance(value, NkiTensor):
        if _free(value) != 1:
            fail(call, f"{what} {list(value.shape)} must be a number or a [P, 1] tensor")
        srcs.append(_tensor(call, what, value, ("sbuf", "psum")))
        return {"tensor": len(srcs) - 1}
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    fail(call, f"{what} must be a number or a [P, 1] tensor, not {value!r}")


def tensor_scalar(
    dst,
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    engine=engine.unknown,
    name=None,
):
    """``dst = (data op0 operand0) op1 operand1``, operands numbers or ``[P, 1]`` tensors."""
    call = "nisa.tensor_scalar"
    which = _engine(call, engine, ("vector", "scalar", "gpsimd"), "vector")
    table = {**ALU_OPS, **ACTIVATIONS}
    n0 = _op_name(call, "op0", op0, table)
    n1 = None if op1 is None else _op_name(call, "op1", op1, table)
    srcs = [_tensor(call, "data", data, ("sbuf", "psum"))]
    d = _tensor(call, "dst", dst, ("sbuf", "psum"))
    _same_layout(call, dst, ("data", data))
    args = {
        "op0": n0,
        "operand0": _scalar_operand(call, "operand0", operand0, srcs),
        "reverse0": bool(reverse0),
        "op1": n1,
        "operand1": _scalar_operand(call, "operand1", operand1, srcs),
        "reverse1": bool(reverse1),
    }
    _emit(which, "tensor_scalar", [d], srcs, args, call)


def activation(
    dst,
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    name=None,
):
    """``dst = op(data * scale + bias)`` on the Scalar Engine (float32)."""
    call = "nisa.activation"
    if reduce_op is not None or reduce_res is not None:
        not_modelled("nisa.activation with reduce_op / reduce_res")
    opname = _op_name(call, "op", op, ACTIVATIONS)
    srcs = [_tensor(call, "data", data, ("sbuf", "psum"))]
    d = _tensor(call, "dst", dst, ("sbuf", "psum"))
    _same_layout(call, dst, ("data", data))
    args = {
        "op": opname,
        "scale": _scalar_operand(call, "scale", scale, srcs),
        "bias": _scalar_operand(call, "bias", bias, srcs),
    }
    _emit("scalar", "activation", [d], srcs, args, call)


def quantize_mx(dst, src, dst_scale, name=None):
    """QuantizeMX (NeuronCore-v4, Vector Engine): BF16/FP16 ``src [P, F]`` to ``_x4`` data
    ``[P, F/4]`` and E8M0 scales."""
    call = "nisa.quantize_mx"
    tr = current(call)
    if tr.core.name != "v4":
        fail(call, f"QuantizeMX needs NeuronCore-v4, the kernel targets {tr.core.name}")
    s = _tensor(call, "src", src, ("sbuf",))
    d = _tensor(call, "dst", dst, ("sbuf",))
    sc = _tensor(call, "dst_scale", dst_scale, ("sbuf",))
    if dtype_of(dst.dtype).packed != 4 or dtype_of(dst.dtype).itemsize != 4:
        fail(call, f"dst dtype {dst.dtype} must be float8_e4m3fn_x4 or float8_e5m2_x4")
    if src.dtype not in ("bfloat16", "float16"):
        fail(call, f"src dtype {src.dtype} must be bfloat16 or float16")
    p, f = src.shape[0], _free(src)
    if p % 32 or f % 4:
        fail(call, f"src {list(src.shape)}: P must be a multiple of 32 and F of 4")
    if dst.shape[0] != p or _free(dst) != f // 4:
        fail(call, f"dst {list(dst.shape)} must be [{p}, {f // 4}]")
    if dst_scale.shape[0] != p or _free(dst_scale) != f // 4:
        fail(
            call,
            f"dst_scale {list(dst_scale.shape)} must be [{p}, {f // 4}] (scales in their quadrants)",
        )
    _emit("vector", "quantize_mx", [d, sc], [s], {}, call)


# -- DMA ------------------------------------------------------------------------------------------


def dma_copy(
    dst,
    src,
    priority=None,
    oob_mode=oob_mode.error,
    dge_mode=dge_mode.unknown,
    engine=engine.unknown,
    name=None,
):
    """Copy ``src`` to ``dst`` with the DMA engines (device memory and SBUF, either way)."""
    call = "nisa.dma_copy"
    s = _tensor(call, "src", src, ("sbuf", "hbm"))
    d = _tensor(call, "dst", dst, ("sbuf", "hbm"))
    if src.size != dst.size:
        fail(
            call, f"src {list(src.shape)} has {src.size} elements, dst {list(dst.shape)} {dst.size}"
        )
    if dtype_of(src.dtype).packed != dtype_of(dst.dtype).packed:
        fail(call, f"src {src.dtype} and dst {dst.dtype}: packed types are copied as they are")
    _emit("dma", "dma_copy", [d], [s], _dge(call, dge_mode, engine), call)


def dma_transpose(
    dst,
    src,
    axes=None,
    priority=None,
    dge_mode=dge_mode.unknown,
    oob_mode=oob_mode.error,
    name=None,
):
    """Transpose a 2-D ``src`` (device memory or SBUF) into SBUF with the DMA engines."""
    call = "nisa.dma_transpose"
    if axes not in (None, (1, 0), [1, 0]):
        not_modelled(f"nisa.dma_transpose(axes={axes}) (2-D transposes only)")
    s = _tensor(call, "src", src, ("sbuf", "hbm"))
    d = _tensor(call, "dst", dst, ("sbuf",))
    if src.dtype != dst.dtype or dtype_of(src.dtype).itemsize not in (2, 4):
        fail(call, f"src {src.dtype} and dst {dst.dtype} must be one 2- or 4-byte dtype")
    if len(src.shape) != 2 or tuple(dst.shape) != tuple(src.shape[::-1]):
        fail(call, f"dst {list(dst.shape)} must be src {list(src.shape)} transposed (2-D)")
    _emit("dma", "dma_transpose", [d], [s], _dge(call, dge_mode, engine.unknown), call)


def _dge(call, mode, trigger):
    """A transfer's descriptor generation as the timing model takes it (docs/kernels.md,
    "Costs"): ``{"dge": "hw", "dge_engine": ...}`` (the hardware DGE, NeuronCore-v3 and later,
    triggered by the Scalar or Sync engine's queue), ``{"dge": "sw"}`` (on the GpSimd engine),
    nothing for precomputed descriptors (``none``, or ``unknown``: the compiler's choice)."""
    if mode in (dge_mode.unknown, dge_mode.none, None):
        return {}
    if mode == dge_mode.swdge:
        return {"dge": "sw"}
    if mode != dge_mode.hwdge:
        fail(call, f"dge_mode={mode!r}: one of nisa.dge_mode's unknown, none, swdge, hwdge")
    name = current(call).core.name
    if name == "v2":
        fail(call, "dge_mode=hwdge: the hardware descriptor generator is NeuronCore-v3 and later")
    by = {engine.scalar: "scalar", engine.sync: "sync"}
    if trigger not in (None, engine.unknown, *by):
        fail(
            call,
            f"engine={trigger!r}: only nisa.engine.scalar or nisa.engine.sync trigger the "
            "hardware descriptor generator (dge_mode=hwdge)",
        )
    return {"dge": "hw", **({"dge_engine": by[trigger]} if trigger in by else {})}


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma, name=None):
    """Send ``src`` to the other core's ``dst`` while receiving its ``src`` into this core's
    ``dst`` (a logical core of two, ``kernel[2]``; NeuronCore-v3 or later)."""
    call = "nisa.sendrecv"
    tr = current(call)
    if tr.core.name == "v2":
        fail(call, "sendrecv needs NeuronCore-v3 or later")
    if tr.num_programs != 2:
        fail(call, "sendrecv runs between the two cores of a logical core: launch kernel[2]")
    s = _tensor(call, "src", src, ("sbuf",))
    d = _tensor(call, "dst", dst, ("sbuf",))
    path = {dma_engine.dma: "dma", dma_engine.gpsimd_dma: "gpsimd_dma"}.get(dma_engine)
    if path is None:
        fail(call, f"dma_engine={dma_engine!r}: nisa.dma_engine.dma or nisa.dma_engine.gpsimd_dma")
    for what, v in (
        ("send_to_rank", send_to_rank),
        ("recv_from_rank", recv_from_rank),
        ("pipe_id", pipe_id),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            fail(call, f"{what} must be an integer known when the kernel is traced, not {v!r}")
    from ncrtl.model.dma.sendrecv import SendRecv, Tile, side_error

    # The rules of one side that need no placement (ranks, shapes, the gpsimd limits): the
    # sendrecv golden's, on the tiles placed apart.
    def tile(t, byte):
        return Tile(0, t.shape[0], byte, _free(t), dtype_of(t.dtype).itemsize)

    far = tile(src, 0).nbytes
    op = SendRecv(
        tile(src, 0), tile(dst, far), int(send_to_rank), int(recv_from_rank), int(pipe_id), path
    )
    bad = side_error(op, tr.program_id, tr.core.partitions, 2 * far + 1)
    if bad is not None:
        fail(call, f"{bad[0].name}: {bad[1]}")
    turn = tr.pipes.get(int(pipe_id), 0)
    tr.pipes[int(pipe_id)] = turn + 1
    args = {
        "send_to_rank": int(send_to_rank),
        "recv_from_rank": int(recv_from_rank),
        "pipe_id": int(pipe_id),
        "dma_engine": path,
        "turn": turn,
    }
    _emit("gpsimd" if path == "gpsimd_dma" else "dma", "sendrecv", [d], [s], args, call)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _trace.stand_in("nki.isa", "nisa", name)
