"""Kernels whose errors ``ncrtl run`` tells at this file's line
(tests/test_run_kernel_errors.py)."""

import nki
import nki.isa as nisa
import nki.language as nl


class Tiles(nl.NKIObject):
    """A kernel's own class on an NKI base class ncrtl does not model."""

    def __init__(self, n):
        self.n = n


@nki.jit
def bad_call(x):
    nisa.nc_transpose(x, 2.5)  # LINE bad_call


@nki.jit
def bad_tile_position(x):
    t = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, t, t, tile_position=5)  # LINE tile_position


@nki.jit
def float_range(x):
    for i in nl.affine_range(2.5):  # LINE float_range
        pass


@nki.jit
def divide(x):
    t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.divide)  # LINE divide_op


@nki.jit
def divide_called(x):
    return nl.divide(x, x)  # LINE divide_called


@nki.jit
def own_class(x):
    tiles = Tiles(4)
    t = nl.ndarray((128, tiles.n), dtype=nl.float32, buffer=nl.sbuf)
    out = nl.ndarray((128, tiles.n), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.memset(dst=t, value=1.0)
    nisa.dma_copy(dst=out, src=t)
    return out
