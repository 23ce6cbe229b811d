"""NeuronCore-v4 kernels for the tests: a matmul over several PSUM banks, BF16 PSUM with SR."""

import nki
import nki.isa as nisa
import nki.language as nl


def _wide(a, b, psum_dtype):
    K, M = a.shape
    _, N = b.shape
    result = nl.ndarray((M, N), dtype=psum_dtype, buffer=nl.shared_hbm)
    sa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sa, src=a)
    nisa.dma_copy(dst=sb, src=b)
    ps = nl.ndarray((M, N), dtype=psum_dtype, buffer=nl.psum)
    nisa.nc_matmul(ps, sa, sb)  # LINE wide
    out = nl.ndarray((M, N), dtype=psum_dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=ps)
    nisa.dma_copy(dst=result, src=out)
    return result


@nki.jit(platform_target="trn3")
def wide_fp32(a, b):
    return _wide(a, b, nl.float32)


@nki.jit(platform_target="trn3")
def wide_bf16(a, b):
    return _wide(a, b, nl.bfloat16)


@nki.jit(platform_target="trn3", psum_rounding="sr")
def wide_bf16_sr(a, b):
    return _wide(a, b, nl.bfloat16)


@nki.jit(platform_target="trn2")
def wide_on_v3(a, b):
    return _wide(a, b, nl.float32)
