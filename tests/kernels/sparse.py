"""Sparse matmul kernels for the error tests: operands of any shape, the ratio a keyword (each
error names this file and the marked line)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def sparse_any(moving, stationary, tag, compress_ratio=4):
    """``nc_matmul_sparse`` on the operands as they are given, loaded into SBUF."""
    tiles = []
    for t in (moving, stationary, tag):
        sb = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=sb, src=t)
        tiles.append(sb)
    ps = nisa.nc_matmul_sparse(tiles[0], tiles[1], tiles[2], compress_ratio)  # LINE sparse
    out = nl.ndarray(ps.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=ps)
    result = nl.ndarray(ps.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=result, src=out)
    return result


@nki.jit
def sparse_into_dst(moving, stationary, tag):
    """The ``dst=`` form: two sparse matmuls into one PSUM tile (the second accumulates)."""
    K, R, N = moving.shape
    M = stationary.shape[1]
    x = nl.ndarray(moving.shape, dtype=moving.dtype, buffer=nl.sbuf)
    s = nl.ndarray(stationary.shape, dtype=stationary.dtype, buffer=nl.sbuf)
    t = nl.ndarray(tag.shape, dtype=tag.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=moving)
    nisa.dma_copy(dst=s, src=stationary)
    nisa.dma_copy(dst=t, src=tag)
    ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for _ in range(2):
        nisa.nc_matmul_sparse(moving=x, stationary=s, tag=t, compress_ratio=R, dst=ps)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=ps)
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=result, src=out)
    return result
