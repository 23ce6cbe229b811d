"""Kernels in the older neuronxcc.nki API, for the tests of its entry points and launch grids
(tests/test_legacy_entry.py): a tiled add over an SPMD grid, host code launching it, the grids
named for `ncrtl run`, and a launch that breaks a rule."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import numpy as np

P, F = 32, 64  # each instance's tile


@nki.jit
def grid_add(a, b):
    """Instance (i, j) of the grid adds tile (i, j) of a and b."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * P + nl.arange(P)[:, None]
    jf = nl.program_id(1) * F + nl.arange(F)[None, :]
    x = nl.load(a[ip, jf])
    y = nl.load(b[ip, jf])
    nl.store(out[ip, jf], value=x + y)
    return out


@nki.jit
def scaled(a, factor=2.0):
    """One instance: a * factor (a keyword a test passes)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(a), factor))
    return out


def host_add(a, b):
    """Host code as the tutorials write it: the grid from the shapes, then the launch."""
    return grid_add[a.shape[0] // P, a.shape[1] // F](a, b)


# launch grids for `ncrtl run tests/kernels/legacy_entry.py::NAME`
add_2x2 = grid_add[2, 2]  # one core, four instances
add_nc2 = grid_add[nl.spmd_dim(2, nl.nc(2)), 1]  # 4 x 1 instances, even rows on core 0


def bad_grid(a, b):
    return grid_add[2, 0](a, b)  # LINE bad_grid


def reference(a, b):
    return np.asarray(a) + np.asarray(b)
