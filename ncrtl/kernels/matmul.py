"""Matrix multiplication in the forms of the NKI tutorial, written as for AWS's toolchain.

``lhsT [K, M]`` (the left operand transposed: K on the partitions), ``rhs [K, N]``; the result
``[M, N]`` in device memory.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_basic(lhsT, rhs):
    """One tile: K = 128, M <= 128, N <= 512 (K the core's partitions, M at most its PE
    columns)."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_ == nl.tile_size.pmax and M <= nl.tile_size.gemm_stationary_fmax
    assert N <= nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    lhs_sb = nl.ndarray(lhsT.shape, dtype=lhsT.dtype, buffer=nl.sbuf)
    rhs_sb = nl.ndarray(rhs.shape, dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=lhs_sb, src=lhsT)
    nisa.dma_copy(dst=rhs_sb, src=rhs)
    res_ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(res_ps, lhs_sb, rhs_sb)
    res_sb = nl.ndarray((M, N), dtype=result.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res_sb, src=res_ps)
    nisa.dma_copy(dst=result, src=res_sb)
    return result


@nki.jit
def matmul_tiled(lhsT, rhs):
    """Tiles of 128 x 128 (stationary) and 128 x 512 (moving), K accumulated in PSUM."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    TILE_M = nl.tile_size.gemm_stationary_fmax  # 128
    TILE_K = nl.tile_size.pmax  # 128
    TILE_N = nl.tile_size.gemm_moving_fmax  # 512
    assert K == K_ and M % TILE_M == 0 and N % TILE_N == 0 and K % TILE_K == 0
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            res_psum = nl.ndarray((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(
                    dst=lhsT_tile,
                    src=lhsT[k * TILE_K : (k + 1) * TILE_K, m * TILE_M : (m + 1) * TILE_M],
                )
                nisa.dma_copy(
                    dst=rhs_tile,
                    src=rhs[k * TILE_K : (k + 1) * TILE_K, n * TILE_N : (n + 1) * TILE_N],
                )
                nisa.nc_matmul(dst=res_psum, stationary=lhsT_tile, moving=rhs_tile)
            res_sb = nl.ndarray(res_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb, src=res_psum)
            nisa.dma_copy(
                dst=result[m * TILE_M : (m + 1) * TILE_M, n * TILE_N : (n + 1) * TILE_N],
                src=res_sb,
            )
    return result


@nki.jit
def matmul_hoist_load(lhsT, rhs):
    """The lhsT tiles loaded once per M tile, outside the N loop."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    TILE_M, TILE_K, TILE_N = 128, 128, 512
    assert K == K_ and M % TILE_M == 0 and N % TILE_N == 0 and K % TILE_K == 0
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        lhsT_tiles = []
        for k in nl.affine_range(K // TILE_K):
            t = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(
                dst=t, src=lhsT[k * TILE_K : (k + 1) * TILE_K, m * TILE_M : (m + 1) * TILE_M]
            )
            lhsT_tiles.append(t)
        for n in nl.affine_range(N // TILE_N):
            rhs_tiles = []
            for k in nl.affine_range(K // TILE_K):
                t = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(
                    dst=t, src=rhs[k * TILE_K : (k + 1) * TILE_K, n * TILE_N : (n + 1) * TILE_N]
                )
                rhs_tiles.append(t)
            res_psum = nl.ndarray((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                nisa.nc_matmul(dst=res_psum, stationary=lhsT_tiles[k], moving=rhs_tiles[k])
            res_sb = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb, src=res_psum)
            nisa.dma_copy(
                dst=result[m * TILE_M : (m + 1) * TILE_M, n * TILE_N : (n + 1) * TILE_N], src=res_sb
            )
    return result


@nki.jit
def matmul_block_free_dimension(lhsT, rhs):
    """Blocks of 2 x 2 tiles in the free dimensions: every loaded tile used twice."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    TILE_M, TILE_K, TILE_N = 128, 128, 512
    TILES_M, TILES_N = 2, 2
    BLOCK_M, BLOCK_N = TILE_M * TILES_M, TILE_N * TILES_N
    assert K == K_ and M % BLOCK_M == 0 and N % BLOCK_N == 0 and K % TILE_K == 0
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // BLOCK_M):
        lhsT_tiles = []
        for bm in nl.affine_range(TILES_M):
            row = []
            for k in nl.affine_range(K // TILE_K):
                t = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                m0 = (m * TILES_M + bm) * TILE_M
                nisa.dma_copy(dst=t, src=lhsT[k * TILE_K : (k + 1) * TILE_K, m0 : m0 + TILE_M])
                row.append(t)
            lhsT_tiles.append(row)
        for n in nl.affine_range(N // BLOCK_N):
            rhs_tiles = []
            for bn in nl.affine_range(TILES_N):
                row = []
                for k in nl.affine_range(K // TILE_K):
                    t = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                    n0 = (n * TILES_N + bn) * TILE_N
                    nisa.dma_copy(dst=t, src=rhs[k * TILE_K : (k + 1) * TILE_K, n0 : n0 + TILE_N])
                    row.append(t)
                rhs_tiles.append(row)
            for bm in nl.affine_range(TILES_M):
                for bn in nl.affine_range(TILES_N):
                    res_psum = nl.ndarray((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TILE_K):
                        nisa.nc_matmul(
                            dst=res_psum, stationary=lhsT_tiles[bm][k], moving=rhs_tiles[bn][k]
                        )
                    res_sb = nl.ndarray((TILE_M, TILE_N), dtype=result.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=res_sb, src=res_psum)
                    m0 = (m * TILES_M + bm) * TILE_M
                    n0 = (n * TILES_N + bn) * TILE_N
                    nisa.dma_copy(dst=result[m0 : m0 + TILE_M, n0 : n0 + TILE_N], src=res_sb)
    return result


@nki.jit
def matmul_fully_optimized(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """Blocked in M, N and K, the results accumulated in SBUF across K blocks."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    TILE_M, TILE_K, TILE_N = 128, 128, 512
    BLOCK_M = TILE_M * TILES_IN_BLOCK_M
    BLOCK_N = TILE_N * TILES_IN_BLOCK_N
    BLOCK_K = TILE_K * TILES_IN_BLOCK_K
    assert K == K_ and M % BLOCK_M == 0 and N % BLOCK_N == 0 and K % BLOCK_K == 0
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // BLOCK_N):
        result_tiles = []
        for m in nl.affine_range(M // TILE_M):
            r = nl.ndarray((TILE_M, TILES_IN_BLOCK_N, TILE_N), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.memset(dst=r, value=0.0)
            result_tiles.append(r)
        for k in nl.sequential_range(K // BLOCK_K):
            rhs_tiles = nl.ndarray(
                (TILE_K, TILES_IN_BLOCK_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf
            )
            for kt in nl.affine_range(TILES_IN_BLOCK_K):
                k0 = (k * TILES_IN_BLOCK_K + kt) * TILE_K
                nisa.dma_copy(
                    dst=rhs_tiles[0:TILE_K, kt, 0:BLOCK_N],
                    src=rhs[k0 : k0 + TILE_K, n * BLOCK_N : (n + 1) * BLOCK_N],
                )
            for m in nl.affine_range(M // BLOCK_M):
                lhsT_tiles = nl.ndarray(
                    (TILE_K, TILES_IN_BLOCK_K, BLOCK_M), dtype=lhsT.dtype, buffer=nl.sbuf
                )
                for kt in nl.affine_range(TILES_IN_BLOCK_K):
                    k0 = (k * TILES_IN_BLOCK_K + kt) * TILE_K
                    nisa.dma_copy(
                        dst=lhsT_tiles[0:TILE_K, kt, 0:BLOCK_M],
                        src=lhsT[k0 : k0 + TILE_K, m * BLOCK_M : (m + 1) * BLOCK_M],
                    )
                for nt in nl.affine_range(TILES_IN_BLOCK_N):
                    for mt in nl.affine_range(TILES_IN_BLOCK_M):
                        res_psum = nl.ndarray((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                        for kt in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(
                                dst=res_psum,
                                stationary=lhsT_tiles[
                                    0:TILE_K, kt, mt * TILE_M : (mt + 1) * TILE_M
                                ],
                                moving=rhs_tiles[0:TILE_K, kt, nt * TILE_N : (nt + 1) * TILE_N],
                            )
                        r = result_tiles[m * TILES_IN_BLOCK_M + mt]
                        nisa.tensor_tensor(
                            dst=r[0:TILE_M, nt, 0:TILE_N],
                            data1=r[0:TILE_M, nt, 0:TILE_N],
                            data2=res_psum,
                            op=nl.add,
                        )
        for m in nl.affine_range(M // TILE_M):
            nisa.dma_copy(
                dst=result[m * TILE_M : (m + 1) * TILE_M, n * BLOCK_N : (n + 1) * BLOCK_N],
                src=result_tiles[m].reshape((TILE_M, BLOCK_N)),
            )
    return result
