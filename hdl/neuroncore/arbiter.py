"""``SbufArbiter``: the compute engines' SBUF ports onto the SBUF's one engine port."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init

from .ports import SbufPort

__all__ = ["SbufArbiter", "round_robin"]


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


class SbufArbiter(wiring.Component):
    """``clients`` engines' :class:`~ncrtl.hdl.neuroncore.ports.SbufPort` s shared round
    robin on one.

    A request is granted when the SBUF takes it, among the clients that ask, the first from a
    turn just past the last client granted.  A read's response goes back to its client; a
    client's next read, or another client's, is granted only once that response is taken (the
    SBUF's engine port holds one response in flight), in the cycle it is taken at the
    earliest.  Writes complete at the grant.

    Interface
    ---------
    client{i} : In(SbufPort(...))
    sbuf : Out(SbufPort(...))
    """

    @validated_init
    def __init__(self, clients, partitions, words, word_bytes):
        self.clients = check_int(clients, "SbufArbiter clients", minimum=1, maximum=8)
        sig = SbufPort(partitions, words, word_bytes)
        members = {f"client{i}": In(sig) for i in range(clients)}
        members["sbuf"] = Out(sig)
        super().__init__(members)

    def client(self, i):
        return getattr(self, f"client{i}")

    def elaborate(self, platform):
        m = Module()
        n = self.clients
        cs = [self.client(i) for i in range(n)]
        sb = self.sbuf
        pending = Signal()  # a read's response not yet taken
        owner = Signal(range(max(n, 2)))
        taken = sb.resp.valid & sb.resp.ready
        free = ~pending | taken
        pick, any_req, last = round_robin(m, [c.req.valid for c in cs], "client")
        for i, c in enumerate(cs):
            with m.If(equals(pick, i)):
                m.d.comb += sb.req.payload.eq(c.req.payload)
            m.d.comb += c.req.ready.eq(free & any_req & equals(pick, i) & sb.req.ready)
            m.d.comb += c.resp.payload.eq(sb.resp.payload)
            m.d.comb += c.resp.valid.eq(sb.resp.valid & equals(owner, i))
            with m.If(equals(owner, i)):
                m.d.comb += sb.resp.ready.eq(c.resp.ready)
        m.d.comb += sb.req.valid.eq(free & any_req)
        granted = sb.req.valid & sb.req.ready
        with m.If(granted):
            m.d.sync += last.eq(pick)
        with m.If(granted & ~sb.req.payload.write):
            m.d.sync += [pending.eq(1), owner.eq(pick)]
        with m.Elif(taken):
            m.d.sync += pending.eq(0)
        return m
