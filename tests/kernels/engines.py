"""Kernels for the timing tests of the Vector, Scalar and GpSimd engines."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def copies(x):
    """One SBUF -> SBUF tensor_copy of x's dtype."""
    P, F = x.shape
    a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.tensor_copy(dst=b, src=a)
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=b)
    return out


@nki.jit
def psum_readers(x, same_bank):
    """Vector and Scalar each read a PSUM tile: the same one, or one in another bank."""
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    q = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=p, value=1.0)
    nisa.memset(dst=q, value=2.0)
    a = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=a, src=p)
    nisa.activation(dst=b, op=nl.copy, data=p if same_bank else q)
    out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0], src=a)
    nisa.dma_copy(dst=out[1], src=b)
    return out
