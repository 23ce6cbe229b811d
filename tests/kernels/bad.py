"""Kernels that break rules, for the error tests (each error names this file and the line)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def moving_too_wide(a, b):
    sa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sa, src=a)
    nisa.dma_copy(dst=sb, src=b)
    ps = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, sa, sb)  # LINE moving_too_wide
    return None


@nki.jit
def stationary_in_hbm(a, b):
    sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, a, sb)  # LINE stationary_in_hbm
    return None


@nki.jit
def psum_overflow(a):
    tiles = []
    for i in range(9):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, name=f"acc{i}")
        nisa.memset(dst=t, value=0.0)
        tiles.append(t)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    for t in tiles:
        nisa.tensor_tensor(dst=out, data1=t, data2=out, op=nl.add)
    return None


@nki.jit
def reads_unwritten(a):
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)  # LINE reads_unwritten
    return out


@nki.jit
def not_modelled(a):
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nl.logsumexp(t, axis=1)  # LINE not_modelled
    return None


@nki.jit
def lonely_pipes(x):
    me = nl.program_id(0)
    a = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.sendrecv(src=a, dst=b, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=me)
    return None


@nki.jit
def sendrecv_one_core(x):
    a = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=a, dst=b, send_to_rank=1, recv_from_rank=1, pipe_id=0)  # LINE one_core
    return None


@nki.jit
def sendrecv_to_itself(x):
    me = nl.program_id(0)
    a = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=a, dst=b, send_to_rank=me, recv_from_rank=1 - me, pipe_id=0)  # LINE itself
    return None


@nki.jit
def crosses_a_bank(a, b):
    sa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    ps = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps[0:128, 256:768], sa, sb)  # LINE crosses_a_bank
    return None


@nki.jit
def psum_tile_reused(a, b):
    """One PSUM tile for two products: evicted between them, so the second overwrites."""
    out = nl.ndarray((2, 64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    sa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sa, src=a)
    nisa.dma_copy(dst=sb, src=b)
    ps = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.psum)
    for i in range(2):
        nisa.nc_matmul(ps, sa, sb)
        nisa.nc_matmul(ps, sa, sb)  # accumulates: twice the product
        t = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=ps)
        nisa.dma_copy(dst=out[i], src=t)
    return out
