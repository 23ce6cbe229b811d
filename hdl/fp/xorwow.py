"""XORWOW pseudo-random generator (Marsaglia 2003): the stochastic-rounding bit source."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from model.fp.xorwow import XORWOW_D_STEP, XORWOW_INIT

__all__ = ["Xorwow"]


def _step(x, y, z, w, v, d):
    """One XORWOW step on (x, y, z, w, v, d) Values; returns the next state (32-bit Values)."""
    t = x ^ (x >> 2)
    v_next = (v ^ (v << 4)) ^ (t ^ (t << 1))
    return y, z, w, v, v_next[:32], (d + XORWOW_D_STEP)[:32]


class Xorwow(wiring.Component):
    """XORWOW generator, bit-exact with :class:`model.fp.xorwow.Xorwow`.

    State ``(x, y, z, w, v, d)``; one step::

        t = x ^ (x >> 2);  x, y, z, w = y, z, w, v
        v = (v ^ (v << 4)) ^ (t ^ (t << 1));  d += 362437;  output = v + d

    Seeding (shared with the model): Marsaglia's initial state with the 64-bit seed's low word
    XORed into ``x`` and its high word into ``y``.  Reset loads seed 0.

    When ``o_value`` shows what
    ---------------------------
    ``o_value`` is always ``v + d`` of the state register.  On a clock edge with ``en`` set:

    * ``i_load`` loads the seeded state (``i_seed``); with ``i_next`` also set, the loaded state
      is stepped once in the same cycle;
    * ``i_next`` alone steps the state once.

    So after loading seed ``s`` together with ``i_next`` (or loading, then one ``i_next``) and
    ``k - 1`` further ``i_next`` cycles, ``o_value`` equals the ``k``-th value returned by
    ``model.fp.xorwow.Xorwow(s).next_u32()``; a stochastic-rounding draw is ``o_value[16:]``
    (``next_u16``).  Right after a load without ``i_next``, ``o_value`` is ``v0 + d0`` of the
    seeded state, which the model never returns.

    Attributes
    ----------
    latency : int
        1: the effect of an input cycle is visible on ``o_value`` after the next clock edge.
        The generator holds its state while ``en`` is 0, so it fits
        :class:`~hdl.common.stream.StreamLanes` (one beat = one load and/or step; the output
        beat is the value after it).

    Interface
    ---------
    en : In(1, init=1)
        Clock enable (the state changes only when set).
    i_seed : In(64)
        Seed, used when ``i_load``.
    i_load : In(1)
        Load the seeded state.
    i_next : In(1)
        Advance one step (after the load, if both).
    o_value : Out(32)
        ``v + d`` of the current state.
    """

    latency = 1

    def __init__(self):
        super().__init__({
            "en": In(1, init=1),
            "i_seed": In(64),
            "i_load": In(1),
            "i_next": In(1),
            "o_value": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        names = ("x", "y", "z", "w", "v", "d")
        regs = [Signal(32, name=n, init=c) for n, c in zip(names, XORWOW_INIT)]
        # Start state of this cycle's step: the registers, or the seeded state on a load.
        start = [Signal(32, name=f"{n}_start") for n in names]
        with m.If(self.i_load):
            seeded = list(XORWOW_INIT)
            m.d.comb += [
                start[0].eq(seeded[0] ^ self.i_seed[:32]),
                start[1].eq(seeded[1] ^ self.i_seed[32:]),
            ] + [s.eq(c) for s, c in zip(start[2:], seeded[2:])]
        with m.Else():
            m.d.comb += [s.eq(r) for s, r in zip(start, regs)]
        stepped = _step(*start)
        with m.If(self.en & (self.i_load | self.i_next)):
            with m.If(self.i_next):
                m.d.sync += [r.eq(s) for r, s in zip(regs, stepped)]
            with m.Else():
                m.d.sync += [r.eq(s) for r, s in zip(regs, start)]
        m.d.comb += self.o_value.eq((regs[4] + regs[5])[:32])
        return m
