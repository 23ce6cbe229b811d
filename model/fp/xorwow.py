"""XORWOW pseudo-random generator (Marsaglia 2003, "Xorshift RNGs"), vectorised.

The Trainium3 Vector Engine PRNG, used here as the source of stochastic-rounding bits.  One step::

    t = x ^ (x >> 2)
    x, y, z, w = y, z, w, v
    v = (v ^ (v << 4)) ^ (t ^ (t << 1))
    d = d + 362437
    out = v + d                      (all mod 2**32)

Seeding is software's job, as on the hardware, whose generator state is written by the runtime:
:meth:`Xorwow.seed_state` expands a 64-bit seed with SplitMix64 (Steele, Lea, Flood 2014) into the
five xorshift words ``x, y, z, w, v`` (three SplitMix64 outputs, low word first; an all-zero
xorshift state, which would stay zero, is replaced by Marsaglia's published one) and ``d`` starts at
Marsaglia's 6615241.  The RTL generator (``ncrtl.hdl.fp.xorwow``) loads those six words.  Hashing the seed
matters: seeds that differ in a few low bits (one per PSUM partition) would otherwise give nearly
equal first outputs.  A stochastic-rounding draw is the upper 16 bits of one output.
"""

import numpy as np

__all__ = ["Xorwow", "XORWOW_INIT", "XORWOW_D_STEP"]

#: Marsaglia's initial (x, y, z, w, v, d).
XORWOW_INIT = (123456789, 362436069, 521288629, 88675123, 5783321, 6615241)
XORWOW_D_STEP = 362437


class Xorwow:
    """A vector of independent XORWOW generators.

    Parameters
    ----------
    seed : int or array_like of int
        One 64-bit seed per generator (``0 <= seed < 2**64``); the result has the seed's shape.
    """

    def __init__(self, seed):
        s = np.asarray(seed, dtype=object)
        self.shape = s.shape
        words = [self.seed_state(int(v)) for v in s.reshape(-1)]
        cols = np.array(words, dtype=np.uint32).reshape(self.shape + (6,))
        self.x, self.y, self.z, self.w, self.v, self.d = (cols[..., i].copy() for i in range(6))

    @staticmethod
    def seed_state(seed):
        """The six 32-bit state words ``(x, y, z, w, v, d)`` that a 64-bit seed programs."""
        if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 1 << 64:
            raise ValueError(f"XORWOW seed {seed!r} is outside [0, 2**64)")
        z = int(seed)
        words = []
        for _ in range(3):
            z = (z + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
            r = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
            r = ((r ^ (r >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
            r ^= r >> 31
            words += [r & 0xFFFFFFFF, r >> 32]
        xs = words[:5]
        if not any(xs):
            xs = list(XORWOW_INIT[:5])
        return tuple(xs) + (XORWOW_INIT[5],)

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
