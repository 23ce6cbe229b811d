"""Kernels whose instruction count grows with ``n`` and whose every step repeats the same work:
the test of linear cost (tests/test_kernel_linear.py) runs each at n and 4n."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def tiles(a, b, n):
    """n steps of a tiled matmul: fresh tiles of 4 KiB per partition (the SBUF ring wraps every
    few groups, in the same places each time; PSUM every 8 groups) loaded on the DMA queues,
    accumulated in PSUM in groups of four, evicted by the Vector or the Scalar Engine, stored
    into a column band of the output; every third load by software descriptor generation
    (GpSimd's queue).  Each DMA queue's first store, loads and software descriptors are in a
    prologue, so that the loop's steps all cost the same from the first."""
    K, N = b.shape
    out = nl.ndarray((128, 4 * N), nl.float32, buffer=nl.shared_hbm)
    z = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    for q in range(16):
        c = (q % 4) * N
        nisa.dma_copy(dst=out[:, c : c + 512], src=z[:, 0:512])
    for src in (a, b):
        for q in range(16):
            t = nl.ndarray((128, N), src.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t[:, 0 : src.shape[1]], src=src, dge_mode=nisa.dge_mode.swdge)
    for g in range(n // 4):
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        for k in range(4):
            w = nl.ndarray((128, N), a.dtype, buffer=nl.sbuf)
            x = nl.ndarray((128, N), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=w[:, 0:128], src=a[:, 0:128])
            mode = nisa.dge_mode.swdge if (g + k) % 3 == 0 else nisa.dge_mode.unknown
            nisa.dma_copy(dst=x, src=b, dge_mode=mode)
            nisa.nc_matmul(dst=acc, stationary=w[:, 0:128], moving=x[:, 0:512])
        r = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
        if g % 2:
            nisa.tensor_copy(dst=r[:, 0:512], src=acc)
        else:
            nisa.activation(dst=r[:, 0:512], op=nl.copy, data=acc)
        c = (g % 4) * N
        nisa.dma_copy(dst=out[:, c : c + 512], src=r[:, 0:512])
    return out


@nki.jit
def in_place(x, n):
    """n operations on one tile, in place, on the Vector, Scalar and GpSimd engines in turn:
    the whole tile, a quarter of its columns, every other column, half its partitions."""
    P, F = x.shape
    t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    engines = (nisa.vector_engine, nisa.scalar_engine, nisa.gpsimd_engine)
    q = F // 4
    for i in range(n):
        views = (t, t[:, (i % 4) * q : (i % 4 + 1) * q], t[:, ::2], t[0 : P // 2, :])
        v = views[i % 4]
        nisa.tensor_scalar(dst=v, data=v, op0=nl.add, operand0=1.0, engine=engines[i % 3])
    out = nl.ndarray((P, F), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def columns(x, n):
    """n operations each on its own column of one tile (more views of it than the builder keeps
    as a list), a whole-tile read every 64th."""
    P, F = x.shape
    t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    s = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for i in range(n):
        c = (7 * i) % F
        if i % 64 == 63:
            nisa.tensor_copy(dst=s, src=t, engine=nisa.gpsimd_engine)
        else:
            nisa.tensor_scalar(dst=t[:, c : c + 1], data=t[:, c : c + 1], op0=nl.add, operand0=1.0)
    out = nl.ndarray((P, F), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
