"""Round-robin choice among requests, the arbitration every shared port of the core uses."""

from amaranth.hdl import Mux, Signal

from .bits import equals

__all__ = ["round_robin"]


def round_robin(m, requests, name):
    """Round-robin choice among ``requests`` (1-bit values): ``(pick, any, last)``, ``pick``
    the first asking after ``last`` (a register the caller sets to ``pick`` on a grant)."""
    n = len(requests)
    last = Signal(range(max(n, 2)), name=f"{name}_last")
    pick = Signal(range(max(n, 2)), name=f"{name}_pick")
    any_ = Signal(name=f"{name}_any")
    for off in reversed(range(1, n + 1)):
        i = Signal(range(max(n, 2)), name=f"{name}_cand{off}")
        m.d.comb += i.eq(Mux(last + off >= n, last + off - n, last + off))
        asks = 0
        for k, r in enumerate(requests):
            asks = asks | (equals(i, k) & r)
        with m.If(asks):
            m.d.comb += [pick.eq(i), any_.eq(1)]
    return pick, any_, last
