"""The Tensor Engine's instructions: ``nc_matmul``, ``nc_matmul_mx``, ``nc_matmul_sparse`` and
``nc_transpose``.

The rules of the Tensor Engine (modes, shapes, tiles, MX layouts, sparse operands) are its
golden's (:func:`ncrtl.model.tensor_engine.matmul.instructions`,
:func:`~ncrtl.model.tensor_engine.sparse.sparse_instructions`): checked here on the operands'
shapes and dtypes, and the LoadStationary / MultiplyMoving words the Tensor Engine takes go into
the stream."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.tensor_engine import isa as te_isa
from ncrtl.model.tensor_engine.matmul import instructions, mx_instructions
from ncrtl.model.tensor_engine.sparse import sparse_instructions

from .._trace import current, fail, not_modelled
from .enums import engine, matmul_perf_mode
from .operands import emit, free_size, int_pair, need_tensor, operand, pick_engine, zeros_of


def _accumulate(tr, dst_op, accumulate):
    """``accumulate=None``: overwrite on a location's first matmul write, accumulate after,
    until another engine reads or writes the location (:func:`emit`)."""
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
    d = operand(call, "dst", dst, ("psum",))
    if dst.dtype not in dtypes:
        fail(
            call,
            f"dst dtype {dst.dtype}: on NeuronCore-{tr.core.name} a matmul writes {' or '.join(dtypes)} PSUM",
        )
    if dst.shape[0] != m or free_size(dst) != n:
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
    s = operand(call, "stationary", stationary, ("sbuf",))
    x = operand(call, "moving", moving, ("sbuf",))
    need_tensor(call, "dst", dst)
    pm = getattr(perf_mode, "value", perf_mode)
    pm = None if pm in (None, "none") else pm
    if pm is not None and tr.core.name == "v2":
        fail(call, "perf_mode double_row needs NeuronCore-v3 or later")
    pos = int_pair(call, "tile_position", tile_position)
    size = int_pair(call, "tile_size", tile_size)
    fs = "tf32" if stationary.dtype == "tfloat32" else None
    fm = "tf32" if moving.dtype == "tfloat32" else None
    n_all = moving.shape[-1] if pm == "double_row" else free_size(moving)
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
                zeros_of(stationary.dtype, stationary.shape),
                zeros_of(moving.dtype, first),
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
    emit("tensor", "matmul", [d], [s, x], args, call)


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
    s = operand(call, "stationary", stationary, ("sbuf",))
    x = operand(call, "moving", moving, ("sbuf",))
    ss = operand(call, "stationary_scale", stationary_scale, ("sbuf",))
    xs = operand(call, "moving_scale", moving_scale, ("sbuf",))
    need_tensor(call, "dst", dst)
    for what, t in (("stationary", stationary), ("moving", moving)):
        if dtype_of(t.dtype).packed != 4:
            fail(
                call,
                f"{what} dtype {t.dtype} must be float8_e4m3fn_x4, float8_e5m2_x4 or float4_e2m1fn_x4",
            )
    for what, t in (("stationary_scale", stationary_scale), ("moving_scale", moving_scale)):
        if dtype_of(t.dtype).itemsize != 1 or dtype_of(t.dtype).fmt is not None:
            fail(call, f"{what} dtype {t.dtype} must be uint8 / float8_e8m0fnu (E8M0 scales)")
    pos = int_pair(call, "tile_position", tile_position)
    size = int_pair(call, "tile_size", tile_size)
    from ncrtl.model.fp import get_format

    def unpacked(t):
        f = get_format(dtype_of(t.dtype).fmt)
        return np.broadcast_to(np.zeros((), f.dtype), (t.shape[0], free_size(t), 4))

    psum_dtype = "bf16" if dst.dtype == "bfloat16" else "fp32"
    n_all = free_size(moving)
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
        if free_size(t) != free:
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
    emit("tensor", "matmul_mx", [d], [s, x, ss, xs], args, call)


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
    s = operand(call, "stationary", stationary, ("sbuf",))
    x = operand(call, "moving", moving, ("sbuf",))
    t = operand(call, "tag", tag, ("sbuf",))
    try:
        ls, mm = sparse_instructions(
            zeros_of(moving.dtype, moving.shape),
            zeros_of(stationary.dtype, stationary.shape),
            zeros_of(tag.dtype, tag.shape),
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
        from .. import language as nl

        dst = nl.ndarray((mm.m, mm.n), nl.float32, buffer=nl.psum, name=name or "")
    d = _psum_dst(call, tr, dst, mm.m, mm.n, ("float32",))
    args = {
        # the MultiplyMoving's beat reads R elements of each of the K partitions: the moving
        # operand is the whole [K, R, N] view, the stationary's LoadStationary reads the tags
        "te": [te_isa.encode(ls), te_isa.encode(mm)],
        "accumulate": _accumulate(tr, d, accumulate),
    }
    emit("tensor", "matmul_sparse", [d], [s, x, t], args, call)
    return dst


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    """Transpose ``data [P, F]`` into ``dst [F, P]``: on the Tensor Engine (a matmul against an
    identity, into PSUM) or, for tiles up to 32 x 32, on the Vector Engine."""
    call = "nisa.nc_transpose"
    tr = current(call)
    need_tensor(call, "dst", dst)
    need_tensor(call, "data", data)
    p, f = data.shape[0], free_size(data)
    small = p <= 32 and f <= 32
    default = "vector" if small and dst._decl.space == "sbuf" else "tensor"
    which = pick_engine(call, engine, ("tensor", "vector"), default)
    if dst.dtype != data.dtype:
        fail(call, f"dst dtype {dst.dtype} must be data's {data.dtype}")
    if dst.shape[0] != f or free_size(dst) != p:
        fail(call, f"dst {list(dst.shape)} must be [{f}, {p}] for data {list(data.shape)}")
    if which == "vector":
        if not small:
            fail(call, f"the Vector Engine transposes at most 32 x 32, data is {list(data.shape)}")
        src = operand(call, "data", data, ("sbuf", "psum"))
        d = operand(call, "dst", dst, ("sbuf", "psum"))
        emit("vector", "transpose", [d], [src], {}, call)
        return
    key = (p, data.dtype)
    ident = tr.identities.get(key)
    if ident is None:
        from .. import language as nl

        ident = nl.ndarray((p, p), data.dtype, buffer=nl.sbuf, name=f"identity_{p}_{data.dtype}")
        emit("gpsimd", "identity", [operand(call, "identity", ident, ("sbuf",))], [], {}, call)
        tr.identities[key] = ident
    flat = data if len(data.shape) == 2 else data.reshape((p, f))
    nc_matmul(dst, flat, ident, is_transpose=True)
