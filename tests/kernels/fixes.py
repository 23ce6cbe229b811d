"""Kernels of tests/test_kernel_fixes.py: the shapes of nki-library's kernels that ncrtl once
mishandled, each reduced to the one thing it got wrong."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def private_count(x, n):
    """acc = n * x on each core, n read at run time through a device tensor of the core's own
    (``nl.private_hbm``): on ``kernel[2]`` the second core's copy lies past the first core's
    device tensors, and the loop's count depends on it."""
    c = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.private_hbm)
    nisa.dma_copy(dst=c, src=n)
    s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=c)
    reg = nisa.register_alloc()
    nisa.register_load(reg, s)
    P, F = x.shape
    xt = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    acc = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for _ in nl.dynamic_range(reg):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=xt, op=nl.add)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    half = P // nl.num_programs(axes=0)
    lo = nl.program_id(axis=0) * half
    nisa.dma_copy(dst=out[lo : lo + half, :], src=acc[lo : lo + half, :])
    return out


private_count2 = private_count[2]


@nki.jit
def tiled_copy(x, tile=4):
    """out = x, ``tile`` rows at a time: a shape of fewer rows than a tile copies nothing and
    the rows past the last whole tile stay unwritten (the shape of nki-library's dropping MoE
    at a block under its tile of 1024 tokens)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(P // tile):
        t = nl.ndarray((tile, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * tile : (i + 1) * tile, :])
        nisa.dma_copy(dst=out[i * tile : (i + 1) * tile, :], src=t)
    return out
