"""``PortArbiter``: one port of a DMA engine shared by its class-of-service channels."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.model.dma.qos import CLASSES, SLOTS

__all__ = ["PortArbiter", "slot_layout"]


def slot_layout():
    """One slot of the traffic-shaping calendar: ``owned`` (a class owns it) and ``klass``."""
    return data.StructLayout({"owned": 1, "klass": range(CLASSES)})


class PortArbiter(wiring.Component):
    """A grant per cycle among the :data:`~ncrtl.model.dma.qos.CLASSES` channels of a DMA engine
    (class 0 lowest priority, 3 highest): :class:`ncrtl.model.dma.qos.PortArbiter` cycle for
    cycle.

    A free-running slot counter walks the ``calendar`` (:data:`~ncrtl.model.dma.qos.
    SLOTS` entries, written by software from :func:`ncrtl.model.dma.qos.slot_table`): when the
    current slot's owner asks it is granted, else the highest class that asks.  The grant is
    combinational from ``requests`` and the slot, so a channel sees it in the cycle it asks (a
    valid/ready handshake on the shared port: ``grant`` is the ready of each channel's
    request).

    Interface
    ---------
    calendar : In(data.ArrayLayout(slot_layout(), SLOTS))
        Held while the engine runs.
    requests : In(CLASSES)
        Bit ``c``: channel ``c`` asks for the port this cycle.
    grant : Out(CLASSES)
        One-hot: the channel granted, or 0.
    slot : Out(range(SLOTS))
        The calendar slot of this cycle.
    """

    def __init__(self):
        super().__init__(
            {
                "calendar": In(data.ArrayLayout(slot_layout(), SLOTS)),
                "requests": In(CLASSES),
                "grant": Out(CLASSES),
                "slot": Out(range(SLOTS)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.slot.eq(self.slot + 1)  # wraps at SLOTS, a power of two
        # The slot's entry: a mux chain over the calendar (an Array read is an incomplete case
        # in the Verilog).
        entry = Signal(slot_layout())
        chain = self.calendar[0]
        for s in range(1, SLOTS):
            chain = Mux(equals(self.slot, s), self.calendar[s], chain)
        m.d.comb += entry.eq(chain)
        owner_asks = Signal()
        m.d.comb += owner_asks.eq(entry.owned & (self.requests >> entry.klass)[0])
        # Strict priority: the highest class that asks.
        top = Signal(CLASSES)
        m.d.comb += top.eq(0)
        for c in range(CLASSES):  # later (higher) classes override
            with m.If(self.requests[c]):
                m.d.comb += top.eq(1 << c)
        owner = Signal(CLASSES)
        m.d.comb += owner.eq(Cat(*(equals(entry.klass, c) for c in range(CLASSES))))
        m.d.comb += self.grant.eq(Mux(owner_asks, owner, top))
        return m
