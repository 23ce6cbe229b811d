"""Tensor Engine modes and data movement beyond the bf16 matmul, written as for AWS's toolchain."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_fp8_double_row(lhsT, rhs):
    """An FP8 matmul in the double-row perf mode: K = 256 as [128, 2, M] and [128, 2, N]
    (element (p, j) is contraction index j * 128 + p)."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    P = nl.tile_size.pmax  # 128
    assert K == K_ == 2 * P and M <= nl.tile_size.gemm_stationary_fmax
    assert N <= nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((P, 2, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((P, 2, N), dtype=rhs.dtype, buffer=nl.sbuf)
    for j in nl.affine_range(2):
        nisa.dma_copy(dst=a[0:P, j, 0:M], src=lhsT[j * P : (j + 1) * P, 0:M])
        nisa.dma_copy(dst=b[0:P, j, 0:N], src=rhs[j * P : (j + 1) * P, 0:N])
    ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, a, b, perf_mode=nisa.matmul_perf_mode.double_row)
    sb = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=ps)
    nisa.dma_copy(dst=result, src=sb)
    return result


@nki.jit(platform_target="trn3")
def matmul_mx(lhsT, rhs):
    """An MXFP8 matmul: both operands quantized on the Vector Engine (QuantizeMX), multiplied
    with their block scales (nc_matmul_mx), K = 4 x 128 along partitions and the x4 packing."""
    P, F = lhsT.shape  # [128, 4 * M]: partition p holds contraction indices j * 128 + p
    P_, G = rhs.shape  # [128, 4 * N]
    M, N = F // 4, G // 4
    assert P == P_ == nl.tile_size.pmax and M <= nl.tile_size.gemm_stationary_fmax
    assert N <= nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((P, F), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((P, G), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    a_mx = nl.ndarray((P, M), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    a_scale = nl.ndarray((P, M), dtype=nl.uint8, buffer=nl.sbuf)
    b_mx = nl.ndarray((P, N), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    b_scale = nl.ndarray((P, N), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=a_mx, src=a, dst_scale=a_scale)
    nisa.quantize_mx(dst=b_mx, src=b, dst_scale=b_scale)
    ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(ps, a_mx, b_mx, a_scale, b_scale)
    sb = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=ps)
    nisa.dma_copy(dst=result, src=sb)
    return result


@nki.jit
def transpose_tensor_engine(x):
    """``x.T`` through the Tensor Engine (a matmul against an identity) into PSUM, then out."""
    P, F = x.shape
    assert P <= 128 and F <= 128
    result = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.shared_hbm)
    sb = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x)
    ps = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=ps, data=sb, engine=nisa.engine.tensor)
    out = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=ps)
    nisa.dma_copy(dst=result, src=out)
    return result


@nki.jit
def transpose_dma(x):
    """``x.T`` by the DMA engines, device memory -> SBUF, then back."""
    A, B = x.shape
    assert B <= 128
    result = nl.ndarray((B, A), dtype=x.dtype, buffer=nl.shared_hbm)
    sb = nl.ndarray((B, A), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=sb, src=x)
    nisa.dma_copy(dst=result, src=sb)
    return result


@nki.jit
def exchange_halves(x):
    """Two cores (``kernel[2]``) each load half of ``x``, swap halves with ``sendrecv`` and
    write what they received: the output is ``x`` with its two halves of rows exchanged."""
    R, F = x.shape
    assert R % 2 == 0 and R // 2 <= 128
    H = R // 2
    result = nl.ndarray((R, F), dtype=x.dtype, buffer=nl.shared_hbm)
    me = nl.program_id(0)
    mine = nl.ndarray((H, F), dtype=x.dtype, buffer=nl.sbuf)
    theirs = nl.ndarray((H, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[me * H : (me + 1) * H, 0:F])
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
    nisa.dma_copy(dst=result[me * H : (me + 1) * H, 0:F], src=theirs)
    return result


@nki.jit
def mm_sparse_128_512_cr4(moving_tensor, stationary_tensor, tag_tensor):
    """Seed 000's sparse matmul: ``moving_tensor [K, R, N]`` (the dense moving ``[K R, N]``
    reshaped: partition p holds rows p R .. p R + R - 1), ``stationary_tensor [K, M]`` (a
    4:4R sparse weight compressed to 4 of every 4R rows) and ``tag_tensor`` uint16
    ``[K, M / 4]`` (the kept rows' positions, four 4-bit tags a word); the result ``[M, N]``
    FP32, the dense product over the K R rows, in one MultiplyMoving of K rows."""
    K, compress_ratio, N = moving_tensor.shape
    K_, M = stationary_tensor.shape
    assert K == K_ <= nl.tile_size.pmax and M <= nl.tile_size.gemm_stationary_fmax
    assert N <= nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    moving = nl.ndarray(moving_tensor.shape, dtype=moving_tensor.dtype, buffer=nl.sbuf)
    stationary = nl.ndarray(stationary_tensor.shape, dtype=stationary_tensor.dtype, buffer=nl.sbuf)
    tag = nl.ndarray(tag_tensor.shape, dtype=tag_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=moving, src=moving_tensor)
    nisa.dma_copy(dst=stationary, src=stationary_tensor)
    nisa.dma_copy(dst=tag, src=tag_tensor)
    psum_buf = nisa.nc_matmul_sparse(
        moving,  # [K, R, N]: R elements of every partition per moving beat
        stationary,  # [K, M], compressed
        tag,  # [K, M / 4] uint16
        compress_ratio,
    )
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=psum_buf)
    nisa.dma_copy(dst=result, src=out)
    return result
