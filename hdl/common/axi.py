"""AXI4 as five valid/ready streams: the device memory port of the DMA engine.

Each AXI4 channel is an :class:`amaranth.lib.stream.Signature` whose payload holds the channel's
signals (``ar``/``aw``: ``id``, ``addr``, ``len``, ``size``, ``burst``; ``w``: ``data``,
``strb``, ``last``; ``r``: ``id``, ``data``, ``resp``, ``last``; ``b``: ``id``, ``resp``), and
``VALID``/``READY`` are the stream's ``valid``/``ready``, with AXI4's handshake rules (a transfer
at a rising edge with both high; the source holds its payload until then).  In Verilog a channel
``ar`` of a top has the ports ``ar__valid``, ``ar__ready`` and ``ar__payload``; the fields are
the payload's bit ranges, LSB first in the order above.
"""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiManager", "address_layout", "BURST_INCR", "RESP_OKAY", "sim_memory"]

#: ``AxBURST`` of an incrementing burst.
BURST_INCR = 1
#: ``xRESP`` of a successful transfer.
RESP_OKAY = 0


def address_layout(addr_bits, id_bits):
    return data.StructLayout({"id": id_bits, "addr": addr_bits, "len": 8, "size": 3, "burst": 2})


class AxiManager(wiring.Signature):
    """The manager side of an AXI4 interface (``ar``, ``aw``, ``w`` out; ``r``, ``b`` in) with
    ``data_bytes`` of data, ``addr_bits`` of address and ``id_bits`` of ID."""

    def __init__(self, data_bytes, addr_bits, id_bits=1):
        self.data_bytes, self.addr_bits, self.id_bits = data_bytes, addr_bits, id_bits
        super().__init__(
            {
                "ar": Out(stream.Signature(address_layout(addr_bits, id_bits))),
                "r": In(
                    stream.Signature(
                        data.StructLayout(
                            {"id": id_bits, "data": 8 * data_bytes, "resp": 2, "last": 1}
                        )
                    )
                ),
                "aw": Out(stream.Signature(address_layout(addr_bits, id_bits))),
                "w": Out(
                    stream.Signature(
                        data.StructLayout({"data": 8 * data_bytes, "strb": data_bytes, "last": 1})
                    )
                ),
                "b": In(stream.Signature(data.StructLayout({"id": id_bits, "resp": 2}))),
            }
        )


# -- simulation helpers (Amaranth simulator) -------------------------------------------------


def sim_memory(axi, memory, data_bytes, *, latency=4, stall=0.0, rng=None, log=None):
    """Two Amaranth simulator testbenches serving the AXI4 manager port ``axi`` (``INCR``
    bursts of any length) from ``memory`` (a uint8 array, read and written in
    place): ``(read, write)``, to add with ``background=True``.  The first beat of a read
    address accepted in cycle ``t`` is valid from cycle ``t + latency``, the others one per
    cycle after it, every burst's beats after those of the bursts before it; a write burst's
    response ``latency`` cycles after its address and its last data beat are both in;
    ``stall`` is the probability of a not-ready cycle on ``ar``, ``aw`` and ``w`` and of an
    idle cycle on ``r`` while a beat is due (``rng``: a ``numpy.random.Generator``).  Responses carry their address's id.  ``log``: a list that
    gets ``(channel, addr, len)`` of every address accepted (``"ar"`` or ``"aw"``)."""
    import numpy as np

    from ncrtl.model.sbuf.memory import write_strobed

    rng = rng if rng is not None else np.random.default_rng(0)
    wb = data_bytes

    async def read(ctx):
        pending, cycle = [], 0
        while True:
            ready = int(rng.random() >= stall)
            ctx.set(axi.ar.ready, ready)
            await ctx.delay(1e-9)
            if ready and ctx.get(axi.ar.valid):
                p = ctx.get(axi.ar.payload)
                if log is not None:
                    log.append(("ar", p.addr, p.len))
                for i in range(p.len + 1):
                    pending.append((cycle + latency, p.addr + i * wb, p.id, i == p.len))
            if pending and pending[0][0] <= cycle and (not stall or rng.random() >= stall):
                _, addr, ident, last = pending[0]
                value = int.from_bytes(memory[addr : addr + wb].tobytes(), "little")
                ctx.set(axi.r.payload, {"id": ident, "data": value, "resp": 0, "last": last})
                ctx.set(axi.r.valid, 1)
                await ctx.delay(1e-9)
                if ctx.get(axi.r.ready):
                    pending.pop(0)
            else:
                ctx.set(axi.r.valid, 0)
            await ctx.tick()
            cycle += 1

    async def write(ctx):
        aws, ws, bs, cycle = [], [], [], 0
        while True:
            ra, rw = int(rng.random() >= stall), int(rng.random() >= stall)
            ctx.set(axi.aw.ready, ra)
            ctx.set(axi.w.ready, rw)
            await ctx.delay(1e-9)
            if ra and ctx.get(axi.aw.valid):
                p = ctx.get(axi.aw.payload)
                aws.append((p.addr, p.len + 1, p.id))
                if log is not None:
                    log.append(("aw", p.addr, p.len))
            if rw and ctx.get(axi.w.valid):
                ws.append((ctx.get(axi.w.payload.data), ctx.get(axi.w.payload.strb)))
            while aws and len(ws) >= aws[0][1]:
                addr, n, ident = aws.pop(0)
                for i in range(n):
                    value, strb = ws.pop(0)
                    write_strobed(memory[addr + i * wb : addr + (i + 1) * wb], value, strb)
                bs.append((cycle + latency, ident))
            if bs and bs[0][0] <= cycle:
                ctx.set(axi.b.valid, 1)
                ctx.set(axi.b.payload, {"id": bs[0][1], "resp": 0})
                await ctx.delay(1e-9)
                if ctx.get(axi.b.ready):
                    bs.pop(0)
            else:
                ctx.set(axi.b.valid, 0)
            await ctx.tick()
            cycle += 1

    return read, write
