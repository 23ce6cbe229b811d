"""XORWOW pseudo-random generator (Marsaglia 2003, "Xorshift RNGs"), vectorised.

The Trainium3 Vector Engine PRNG, used here as the source of stochastic-rounding bits.  One step::

    t = x ^ (x >> 2)
    x, y, z, w = y, z, w, v
    v = (v ^ (v << 4)) ^ (t ^ (t << 1))
    d = d + 362437
    out = v + d                      (all mod 2**32)

Seeding (the project's definition, shared with ``hdl.fp.xorwow``): a 64-bit seed is XORed into
Marsaglia's published initial state, low word into ``x``, high word into ``y``; ``z``, ``w``, ``v``
and ``d`` start at the published values.  ``z``, ``w`` and ``v`` stay nonzero, so every seed is a
valid xorshift state.  A stochastic-rounding draw is the upper 16 bits of one output.
"""

import numpy as np

__all__ = ["Xorwow", "XORWOW_INIT", "XORWOW_D_STEP"]

#: Marsaglia's initial (x, y, z, w, v, d).
XORWOW_INIT = (123456789, 362436069, 521288629, 88675123, 5783321, 6615241)
XORWOW_D_STEP = 362437

_M = np.uint32(0xFFFFFFFF)


class Xorwow:
    """A vector of independent XORWOW generators.

    Parameters
    ----------
    seed : int or array_like of int
        One 64-bit seed per generator (``0 <= seed < 2**64``); the result has the seed's shape.
    """

    def __init__(self, seed):
        s = np.asarray(seed, dtype=object)
        flat = [int(v) for v in s.reshape(-1)]
        for v in flat:
            if not 0 <= v < 1 << 64:
                raise ValueError(f"XORWOW seed {v} is outside [0, 2**64)")
        self.shape = s.shape
        lo = np.array([v & 0xFFFFFFFF for v in flat], dtype=np.uint32).reshape(self.shape)
        hi = np.array([v >> 32 for v in flat], dtype=np.uint32).reshape(self.shape)
        x0, y0, z0, w0, v0, d0 = (np.full(self.shape, c, dtype=np.uint32) for c in XORWOW_INIT)
        self.x, self.y, self.z, self.w, self.v, self.d = x0 ^ lo, y0 ^ hi, z0, w0, v0, d0

    def state(self):
        """The six state words ``(x, y, z, w, v, d)`` as uint32 arrays (copies)."""
        return tuple(a.copy() for a in (self.x, self.y, self.z, self.w, self.v, self.d))

    def next_u32(self):
        """Advance every generator one step; return the 32-bit outputs."""
        with np.errstate(over="ignore"):
            t = self.x ^ (self.x >> np.uint32(2))
            self.x, self.y, self.z, self.w = self.y, self.z, self.w, self.v
            v = self.v
            self.v = (v ^ (v << np.uint32(4))) ^ (t ^ (t << np.uint32(1)))
            self.d = self.d + np.uint32(XORWOW_D_STEP)
            return self.v + self.d

    def next_u16(self):
        """One stochastic-rounding draw per generator: the upper 16 bits of an output."""
        return (self.next_u32() >> np.uint32(16)).astype(np.uint16)

    def stream_u32(self, n):
        """``n`` outputs per generator, shape ``(n, *shape)``."""
        return np.stack([self.next_u32() for _ in range(n)])
