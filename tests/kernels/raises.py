"""Kernels whose own Python fails, or that run past the tracing bounds: ``ncrtl run`` says each
in one line naming the exception and this file's line (tests/test_run_kernel_errors.py)."""

import sys
import time

import nki
import nki.isa as nisa
import nki.language as nl

NOT_A_KERNEL = 3


class Tiles(nl.NKIObject):
    """A kernel's own class on NKI's base of kernel-side classes."""

    def __init__(self, n):
        self.n = n


def _helper(x):
    return {"a": 1}[x]  # LINE key_error


@nki.jit
def value_error(x):
    raise ValueError("the kernel refuses")  # LINE value_error


@nki.jit
def runtime_error(x):
    raise RuntimeError("no")  # LINE runtime_error


@nki.jit
def zero_division(x):
    n = x.shape[0] // 0  # LINE zero_division
    return n


@nki.jit
def key_error(x):
    return _helper("b")


@nki.jit
def index_error(x):
    return [x][3]  # LINE index_error


def _down(n):
    return _down(n + 1)  # LINE recursion


@nki.jit
def recursion(x):
    return _down(0)


@nki.jit
def assertion(x):
    assert x.shape[0] == 3  # LINE assertion


@nki.jit
def exits(x):
    sys.exit(3)  # LINE exits


@nki.jit
def two_dims(x):
    p, f = x.shape  # LINE two_dims
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out


@nki.jit
def bad_call(x):
    nisa.nc_transpose(x, 2.5)  # LINE bad_call


@nki.jit
def bad_tile_position(x):
    t = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, t, t, tile_position=5)  # LINE tile_position


@nki.jit
def wrong_keyword(x):
    t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0, colour=1)  # LINE wrong_keyword


@nki.jit
def missing_argument(x):
    t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t)  # LINE missing_argument


@nki.jit
def too_many(x):
    nl.ndarray((128, 4), nl.float32, nl.sbuf, "t", None, 5)  # LINE too_many


@nki.jit
def float_range(x):
    for i in nl.affine_range(2.5):  # LINE float_range
        pass


@nki.jit
def divide(x):
    t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.hypot)  # LINE divide_op


@nki.jit
def divide_called(x):
    return nl.hypot(x, x)  # LINE divide_called


@nki.jit
def own_class(x):
    tiles = Tiles(4)
    t = nl.ndarray((128, tiles.n), dtype=nl.float32, buffer=nl.sbuf)
    out = nl.ndarray((128, tiles.n), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.memset(dst=t, value=1.0)  # LINE own_class
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def many(x):
    t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
    for i in range(1000):
        nisa.memset(dst=t, value=1.0)  # LINE many


@nki.jit
def spins(x, seconds=30.0):
    # a Python loop that emits nothing (bounded, so that a broken limit fails, not hangs)
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # LINE spins
        pass
