"""XORWOW pseudo-random generator (Marsaglia 2003): the stochastic-rounding bit source."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import validated_init
from ncrtl.model.fp.xorwow import XORWOW_D_STEP, XORWOW_INIT

__all__ = ["Xorwow", "STATE_WORDS", "pack_state"]

#: Order of the 32-bit words in ``i_state``, least significant first.
STATE_WORDS = ("x", "y", "z", "w", "v", "d")


def pack_state(words):
    """The ``i_state`` integer of six state words ``(x, y, z, w, v, d)`` (x in bits 0..31).

    E.g. ``pack_state(ncrtl.model.fp.xorwow.Xorwow.seed_state(seed))``.
    """
    words = [int(w) for w in words]
    if len(words) != 6 or any(not 0 <= w < 1 << 32 for w in words):
        raise ValueError(f"XORWOW state must be six 32-bit words, not {words!r}")
    return sum(w << (32 * i) for i, w in enumerate(words))


def _step(x, y, z, w, v, d):
    """One XORWOW step on (x, y, z, w, v, d) Values; returns the next state (32-bit Values)."""
    t = x ^ (x >> 2)
    v_next = (v ^ (v << 4)) ^ (t ^ (t << 1))
    return y, z, w, v, v_next[:32], (d + XORWOW_D_STEP)[:32]


class Xorwow(wiring.Component):
    """XORWOW generator, bit-exact with :class:`ncrtl.model.fp.xorwow.Xorwow`.

    State ``(x, y, z, w, v, d)``; one step::

        t = x ^ (x >> 2);  x, y, z, w = y, z, w, v
        v = (v ^ (v << 4)) ^ (t ^ (t << 1));  d += 362437;  output = v + d   (mod 2**32)

    Seeding is software's job, as on the hardware: the six state words are written through
    ``i_state`` (``ncrtl.model.fp.xorwow.Xorwow.seed_state(seed)`` expands a 64-bit seed into them;
    :func:`pack_state` packs them).  Reset loads Marsaglia's published state
    (``XORWOW_INIT``) unless ``init`` gives other words.

    When ``o_value`` shows what
    ---------------------------
    ``o_value`` is always ``v + d`` of the state register.  On a clock edge with ``en`` set:

    * ``i_load`` loads ``i_state``; with ``i_next`` also set, the loaded state is stepped once
      in the same cycle;
    * ``i_next`` alone steps the state once;
    * neither: the state holds.

    So after loading the state of seed ``s`` together with ``i_next`` (or loading, then one
    ``i_next``) and ``k - 1`` further ``i_next`` cycles, ``o_value`` equals the ``k``-th value
    returned by ``ncrtl.model.fp.xorwow.Xorwow(s).next_u32()``; a stochastic-rounding draw is
    ``o_value[16:]`` (``next_u16``).  Right after a load without ``i_next``, ``o_value`` is
    ``v + d`` of the loaded state, which the model never returns.

    Parameters
    ----------
    init : sequence of 6 int, optional
        Reset state ``(x, y, z, w, v, d)``; default ``XORWOW_INIT``.  A block with many
        generators (PSUM: one per partition) gives each its own, e.g.
        ``ncrtl.model.fp.xorwow.Xorwow.seed_state(p)``, so that they are independent out of reset.

    Attributes
    ----------
    init : tuple of 6 int
        The reset state.
    latency : int
        1: the effect of an input cycle is visible on ``o_value`` after the next clock edge.
        The generator holds its state while ``en`` is 0, so it fits
        :class:`~ncrtl.hdl.common.stream.StreamLanes` directly (one beat = one load and/or step, the
        output beat is ``o_value`` after it; one lane = one independent generator).

    Interface
    ---------
    en : In(1, init=1)
        Clock enable (the state changes only when set).
    i_state : In(192)
        State words ``x, y, z, w, v, d``, 32 bits each, ``x`` in bits 0..31; read on ``i_load``.
    i_load : In(1)
        Load ``i_state``.
    i_next : In(1)
        Advance one step (after the load, if both).
    o_value : Out(32)
        ``v + d`` of the current state.
    """

    latency = 1

    @validated_init
    def __init__(self, *, init=None):
        if init is None:
            init = XORWOW_INIT
        try:
            words = tuple(int(w) for w in init)
        except (TypeError, ValueError):
            words = None
        if words is None or len(words) != 6 or any(not 0 <= w < 1 << 32 for w in words):
            raise ValueError(
                f"Xorwow init must be six 32-bit words (x, y, z, w, v, d), not {init!r}"
            )
        self.init = words
        super().__init__(
            {
                "en": In(1, init=1),
                "i_state": In(32 * len(STATE_WORDS)),
                "i_load": In(1),
                "i_next": In(1),
                "o_value": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        regs = [Signal(32, name=n, init=c) for n, c in zip(STATE_WORDS, self.init)]
        # Start state of this cycle's step: the registers, or the loaded words.
        start = [Signal(32, name=f"{n}_start") for n in STATE_WORDS]
        with m.If(self.i_load):
            m.d.comb += [s.eq(self.i_state[32 * i : 32 * (i + 1)]) for i, s in enumerate(start)]
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
