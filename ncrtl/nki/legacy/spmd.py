"""The older API's SPMD launch grids: ``kernel[gx, gy]``, ``nl.nc(2)`` and ``nl.spmd_dim``.

``kernel[4, 2]`` launches 8 instances of the kernel, ``nl.program_id(axis)`` each one's index
along an axis.  With no ``nl.nc`` in the grid they all run on one NeuronCore, one after another
(what NKI's compiler does for a kernel of one NeuronCore; the current API's ``kernel[2]`` is a
logical core of two instead).  ``nl.nc(2)`` is a grid axis of 2 instances, one on each core of
the logical core; ``nl.spmd_dim(*dims)`` is one grid axis of ``prod(dims)`` instances tiled by
its sub-dimensions, row-major, one of them possibly ``nl.nc(2)``: the instance's sub-index
along that one is its core.  ``kernel[nl.spmd_dim(nl.nc(2), 2), 2]`` runs ``kernel[0..1, *]``
on core 0 and ``kernel[2..3, *]`` on core 1; ``kernel[nl.spmd_dim(2, nl.nc(2)), 2]``
interleaves them (even indices on core 0).  docs/nki/legacy.md, "Launch grids".

``legacy.language`` exports :func:`nc` and :func:`spmd_dim` as ``nl.nc`` / ``nl.spmd_dim``.
"""

from __future__ import annotations

import math

import numpy as np

from .._trace import NkiError, caller_line

__all__ = ["nc", "spmd_dim", "launch_grid", "CORES"]

#: The physical cores of a logical NeuronCore (NeuronCore-v3 and later).
CORES = 2


def _fail(call, message):
    raise NkiError(f"{caller_line()}: {call}: {message}")


def _count(call, value, what):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        _fail(call, f"{what} {value!r} is not an integer")
    if value < 1:
        _fail(call, f"{what} {int(value)} must be at least 1")
    return int(value)


class nc:
    """``nl.nc(n)``: a launch-grid dimension of ``n`` instances, one on each of ``n`` physical
    cores of the logical core (``n`` is 1 or 2)."""

    __slots__ = ("n",)

    def __init__(self, n):
        n = _count("nl.nc", n, "the core count")
        if n > CORES:
            _fail("nl.nc", f"nl.nc({n}): a logical NeuronCore has {CORES} physical cores")
        self.n = n

    def __repr__(self):
        return f"nl.nc({self.n})"

    def __eq__(self, other):
        return isinstance(other, nc) and other.n == self.n

    def __hash__(self):
        return hash(("nc", self.n))


class spmd_dim:
    """``nl.spmd_dim(*dims)``: one launch-grid dimension of ``prod(dims)`` instances, tiled
    row-major by its sub-dimensions (integers, at most one ``nl.nc(n)``)."""

    __slots__ = ("dims",)

    def __init__(self, *dims):
        if not dims:
            _fail("nl.spmd_dim", "give its sub-dimensions (nl.spmd_dim(2, nl.nc(2)))")
        out = []
        for d in dims:
            out.append(d if isinstance(d, nc) else _count("nl.spmd_dim", d, "sub-dimension"))
        if sum(isinstance(d, nc) for d in out) > 1:
            _fail("nl.spmd_dim", f"{self._text(out)} has more than one nl.nc: give one")
        self.dims = tuple(out)

    @staticmethod
    def _text(dims):
        return "nl.spmd_dim(" + ", ".join(repr(d) for d in dims) + ")"

    def __repr__(self):
        return self._text(self.dims)

    @property
    def size(self):
        return math.prod(d.n if isinstance(d, nc) else d for d in self.dims)


def launch_grid(name, grid):
    """``(dims, cores, core_of)`` of ``kernel[grid]`` for the kernel ``name``: the grid's
    sizes, the physical cores it runs on (1, or 2 with an ``nl.nc(2)``) and a function from an
    instance's grid position to its core (None on one core)."""
    items = grid if isinstance(grid, tuple) else (grid,)
    text = f"{name}[{', '.join(repr(g) for g in items)}]"
    if not items:
        _fail(text, "the launch grid is positive integers, nl.nc(n) or nl.spmd_dim(...)")
    dims, subs = [], []
    for g in items:
        if isinstance(g, nc):
            sub = (g,)
        elif isinstance(g, spmd_dim):
            sub = g.dims
        elif isinstance(g, (int, np.integer)) and not isinstance(g, (bool, np.bool_)) and g >= 1:
            sub = (int(g),)
        else:
            _fail(
                text,
                f"grid dimension {g!r}: a positive integer, nl.nc(n) or nl.spmd_dim(...) "
                "(kernel[2, 4], kernel[nl.spmd_dim(2, nl.nc(2)), 4])",
            )
        sizes = tuple(s.n if isinstance(s, nc) else s for s in sub)
        dims.append(math.prod(sizes))
        subs.append((sub, sizes))
    spread = [
        (axis, k, sizes)
        for axis, (sub, sizes) in enumerate(subs)
        for k, s in enumerate(sub)
        if isinstance(s, nc)
    ]
    if len(spread) > 1:
        _fail(text, "more than one nl.nc in the launch grid: the logical core's cores are one axis")
    if not spread or spread[0][2][spread[0][1]] == 1:
        return tuple(dims), 1, None
    axis, k, sizes = spread[0]
    inner, n = math.prod(sizes[k + 1 :]), sizes[k]

    def core_of(position):
        return (position[axis] // inner) % n

    return tuple(dims), n, core_of
