"""``EnginePorts``: the compute engines' SBUF ports onto the SBUF's one engine port."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.arbiter import round_robin
from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init

from .memory import SbufPort

__all__ = ["EnginePorts"]


class EnginePorts(wiring.Component):
    """``clients`` compute engines' :class:`SbufPort` s shared round robin on the SBUF's
    engine port (:class:`~ncrtl.hdl.sbuf.memory.MultiPortSbuf` places it in front of that
    port when it has more than one engine port).

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
        self.clients = check_int(clients, "EnginePorts clients", minimum=1, maximum=8)
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
