"""Kernels that place their tensors themselves (``nl.ndarray(address=...)``)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def halves(a, b):
    """``a + b``: the halves of ``a`` loaded into two placed tiles, added as one placed tile
    over both (partitions 0-63 and 64-127 of the same bytes)."""
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    top = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf, address=(0, 1024))
    bottom = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf, address=(64, 1024))
    nisa.dma_copy(dst=top, src=a[0:64, :])
    nisa.dma_copy(dst=bottom, src=a[64:128, :])
    both = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, address=(0, 1024))
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=b)
    nisa.tensor_tensor(dst=both, data1=both, data2=t, op=nl.add)
    # an access pattern over the placed tile: its steps are the tile's own (64 elements a
    # partition), not its memory's
    nisa.dma_copy(dst=out, src=both.ap([[64, 128], [1, 64]]))
    return out


@nki.jit
def one_bank(a, n=3):
    """``n`` transposes of ``a`` into PSUM tiles all placed on bank 5, each evicted before the
    next: every tile's write waits on the previous tile's eviction."""
    out = nl.ndarray((n, 128, 128), nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    for i in range(n):
        ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum, address=(0, 5 * 2048))
        nisa.nc_transpose(dst=ps, data=x)
        y = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=ps, op0=nl.add, operand0=float(i))
        nisa.dma_copy(dst=out[i], src=y)
    return out


BAD = [(100, 0), (0, 2), (0, 10**9), (0,), (0, 1.5)]


@nki.jit
def bad_address(a, case):
    """A [64, 64] float32 SBUF tensor at the address ``BAD[case]``."""
    address = BAD[case]
    nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf, address=address)  # LINE bad_address
    return a
