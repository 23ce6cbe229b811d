"""Kernels that read memory nothing wrote (tests/test_kernel_taint.py): the results that depend
on it are tainted, element by element; only where taint reaches a returned output, a register,
a run-time offset or a predicate is it the error.

Each loads ``x`` (device memory, float32 ``[P, F]``) only in part into the SBUF (``_partial``:
columns ``[0, cols)``, or partitions ``[0, rows)``), computes on the whole tile, and stores a
part of the result."""

import nki
import nki.isa as nisa
import nki.language as nl


def _partial(x, cols=None, rows=None, dtype=nl.float32):
    """``x`` into a new SBUF tile of which only columns ``[0, cols)`` (or partitions
    ``[0, rows)``) are written."""
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=dtype, buffer=nl.sbuf)
    if rows is None:
        nisa.dma_copy(dst=t[:, 0:cols], src=x[:, 0:cols])  # LINE load
    else:
        nisa.dma_copy(dst=t[0:rows, :], src=x[0:rows, :])
    return t


def _store(t, rows, cols):
    """``t[0:rows, 0:cols]`` into a new device tensor."""
    out = nl.ndarray((rows, cols), dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t[0:rows, 0:cols])  # LINE store
    return out


@nki.jit
def transpose_rows(x, cols, rows):
    """``x [P, F]`` loaded in its columns ``< cols``, transposed on the Tensor Engine (a matmul
    against the identity) into ``[F, P]``; rows ``[0, rows)`` of the result stored
    (nki-library's find_nonzero_indices: the rows from unwritten columns are never used)."""
    P, F = x.shape
    t = _partial(x, cols=cols)
    ident = nl.shared_identity_matrix(P, dtype=nl.float32)
    ps = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=t, moving=ident, is_transpose=True)  # LINE transpose
    s = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=ps)
    return _store(s, rows, P)


@nki.jit
def matmul_parts(a, b, mcols, ncols, keep_m, keep_n, again=False):
    """``out = a.T @ b`` (``a [K, M]``, ``b [K, N]``) with ``a`` loaded in its columns
    ``< mcols`` and ``b`` in its columns ``< ncols``; ``out[0:keep_m, 0:keep_n]`` stored.
    ``again``: a second matmul of the whole of ``a`` (loaded now) accumulates onto the first."""
    K, M = a.shape
    N = b.shape[1]
    sa = _partial(a, cols=mcols)
    sb = _partial(b, cols=ncols)
    ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=sa, moving=sb)  # LINE matmul
    if again:
        full = nl.ndarray((K, M), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=full, src=a)
        whole = nl.ndarray((K, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=whole, src=b)
        nisa.nc_matmul(dst=ps, stationary=full, moving=whole, accumulate=True)
    s = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=ps)
    return _store(s, keep_m, keep_n)


@nki.jit
def elementwise(x, cols, keep, op="add"):
    """``x`` loaded in its columns ``< cols``; ``op(x, 2)`` (an element-wise
    ``tensor_scalar``) over the whole tile; columns ``[0, keep)`` stored."""
    P, F = x.shape
    t = _partial(x, cols=cols)
    s = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    fn = {"add": nl.add, "greater": nl.greater, "equal": nl.equal, "maximum": nl.maximum}[op]
    nisa.tensor_scalar(dst=s, data=t, op0=fn, operand0=2.0)  # LINE elementwise
    return _store(s, P, keep)


@nki.jit
def integers(x, cols, keep):
    """``x`` (int32) loaded in its columns ``< cols``; ``x > 5`` (a comparison, 1 or 0) over
    the whole tile; columns ``[0, keep)`` stored."""
    P, F = x.shape
    t = _partial(x, cols=cols, dtype=nl.int32)
    s = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=s, data=t, op0=nl.greater, operand0=5)  # LINE integers
    return _store(s, P, keep)


@nki.jit
def row_sums(x, rows, keep):
    """``x`` loaded in its partitions ``< rows``; each partition's sum (``tensor_reduce``);
    partitions ``[0, keep)`` of the sums stored."""
    P, F = x.shape
    t = _partial(x, rows=rows)
    r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r, op=nl.add, data=t, axis=1)  # LINE reduce
    return _store(r, keep, 1)


@nki.jit
def accumulated(x, cols, taint):
    """The Scalar Engine's accumulators: reset and fold the written columns, then fold the
    whole tile (``taint``; else the written columns again), and read them out; then the same
    on the written columns only.  Returns both read-outs ``[P, 2]``."""
    P, F = x.shape
    t = _partial(x, cols=cols)
    d = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
    cmd = nisa.reduce_cmd
    nisa.activation(dst=d[:, 0:cols], op=nl.copy, data=t[:, 0:cols], reduce_cmd=cmd.reset_reduce)
    more = t if taint else t[:, 0:cols]
    nisa.activation(  # LINE accumulate
        dst=d[:, 0 : more.shape[1]],
        op=nl.copy,
        data=more,
        reduce_cmd=cmd.reduce,
        reduce_res=r[:, 0:1],
    )
    nisa.activation(dst=d[:, 0:cols], op=nl.copy, data=t[:, 0:cols], reduce_cmd=cmd.reset_reduce)
    nisa.activation(
        dst=d[:, 0:cols], op=nl.copy, data=t[:, 0:cols], reduce_cmd=cmd.reduce, reduce_res=r[:, 1:2]
    )
    return _store(r, P, 2)


@nki.jit
def register_of(x, col):
    """``x`` (int32 ``[1, F]``) loaded in its column 0, plus one (``tensor_scalar``), element
    ``col`` of that into a register, then stored from it."""
    t = _partial(x, cols=1, dtype=nl.int32)
    s = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=s, data=t, op0=nl.add, operand0=1)  # LINE plus_one
    r = nisa.register_alloc()
    nisa.register_load(r, s[0:1, col : col + 1])  # LINE register
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.register_store(out, r)
    return _store(out, 1, 1)


@nki.jit
def predicated(x, rows):
    """``x`` loaded in its partitions ``< rows``, ``x > -100`` (uint8) the predicate of a
    ``tensor_copy_predicated`` of ``x`` over a tile of zeros."""
    P, F = x.shape
    t = _partial(x, rows=rows)
    p = nl.ndarray((P, F), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=p, data=t, op0=nl.greater, operand0=-100.0)
    d = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=d, value=0.0)
    full = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=full, src=x)
    nisa.tensor_copy_predicated(dst=d, src=full, predicate=p)  # LINE predicate
    return _store(d, P, F)


@nki.jit
def gathered(data, idx, rows):
    """Rows ``idx[p]`` of ``data`` into partition ``p`` (an indirect DMA), the indices loaded
    in their partitions ``< rows`` only."""
    P = idx.shape[0]
    F = data.shape[1]
    i = nl.ndarray(idx.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=i[0:rows, :], src=idx[0:rows, :])
    t = nl.ndarray((P, F), dtype=data.dtype, buffer=nl.sbuf)
    src = data.ap(pattern=[[F, P], [1, F]], vector_offset=i, indirect_dim=0)
    nisa.dma_copy(dst=t, src=src)  # LINE gather
    return _store(t, P, F)


@nki.jit
def clean(x):
    """Every read written: ``2 x`` through a transpose and back."""
    P, F = x.shape
    t = _partial(x, cols=F)
    s = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=s, data=t, op0=nl.multiply, operand0=2.0)
    ident = nl.shared_identity_matrix(P, dtype=nl.float32)
    ps = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=s, moving=ident, is_transpose=True)
    u = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=ps)
    return _store(u, F, P)


@nki.jit(platform_target="trn2")
def swapped(x, cols, keep):
    """The two cores (kernel[2]) each load ``x``'s columns ``< cols`` into a tile and swap it
    with sendrecv; core ``c`` stores columns ``[0, keep)`` of what it received at columns
    ``c * keep`` of ``out [P, 2 keep]``."""
    P, F = x.shape
    c = nl.program_id(0)
    a = _partial(x, cols=cols)
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=a, dst=b, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)  # LINE swap
    out = nl.ndarray((P, 2 * keep), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, c * keep : (c + 1) * keep], src=b[:, 0:keep])
    return out
