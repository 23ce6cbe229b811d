"""Quality of service between a DMA engine's queues: which one is served, cycle by cycle.

A DMA engine has :data:`QUEUES` descriptor queues, each in order.  How the engine chooses among
them is a parameter (``policy``):

* ``"round_robin"`` (NeuronCore-v2/v3): one channel serves every queue, a descriptor at a time,
  the queues in turn (:class:`QueueSelect`).
* ``"priority"`` (NeuronCore-v4 QoS, seed 001): every queue has one of :data:`CLASSES` classes of
  service (configured per queue, 0 lowest, 3 highest).  The engine has a channel per class; a
  channel serves its class's queues in turn, a descriptor at a time, and the channels share the
  engine's ports (the device memory's read and write channels, the SBUF's DMA port) beat by
  beat through a :class:`PortArbiter` per port: strict priority, "the transfers in a DMA queue
  with the highest priority are always scheduled first", so a higher class waits behind a lower
  one for at most the beat already granted, never for a descriptor.

**Traffic shaping** (seed 001: "configurable bandwidth allocation ... 4 distinct classes of
service") is a calendar of :data:`SLOTS` cycles: a class given a share of ``n`` sixteenths owns
``n`` slots of the calendar, spread evenly (:func:`slot_table`).  In its slot a class that asks
is granted whatever its priority; in a slot whose owner does not ask (or a slot nobody owns)
strict priority decides.  So with no shares the arbitration is strict priority; with shares a
class that keeps asking gets at least its ``n`` grants in every :data:`SLOTS` consecutive cycles
and never waits more than the gap to its next slot, while a higher class waits at most the
slots the lower ones own.  Shares add up to at most :data:`SLOTS`.

These classes are the contract the RTL (``ncrtl.hdl.dma.qos``) matches cycle for cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["QUEUES", "CLASSES", "SLOTS", "POLICIES", "slot_table", "PortArbiter", "QueueSelect"]

#: Descriptor queues of one engine.
QUEUES = 16
#: Classes of service (priorities 0 lowest .. 3 highest).
CLASSES = 4
#: Cycles of the traffic-shaping calendar; a share is a number of its slots.
SLOTS = 16
#: Arbitration policies between queues.
POLICIES = ("round_robin", "priority")

#: A calendar slot that no class owns.
FREE = None


def slot_table(shares):
    """The calendar of :data:`SLOTS` slots for ``shares`` (one int per class, sixteenths of the
    port's beats, at most :data:`SLOTS` in all): slot ``s`` belongs to a class or to nobody
    (``None``).  Each class's slots are spread evenly: class ``c`` with ``n`` slots wants slots
    ``floor(k * SLOTS / n)`` (plus a per-class phase), taken in class order from the highest
    and moved to the next free slot when taken.

    Raises ValueError (naming the value and the rule) for a wrong number of shares, a negative
    share, or shares over :data:`SLOTS` in all."""
    shares = list(shares)
    if len(shares) != CLASSES:
        raise ValueError(f"traffic shaping needs {CLASSES} shares (one per class), not {shares}")
    for c, n in enumerate(shares):
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"class {c} share {n!r} must be a whole number of slots >= 0")
    if sum(shares) > SLOTS:
        raise ValueError(
            f"shares {shares} add up to {sum(shares)} slots, more than the calendar's {SLOTS}"
        )
    table = [FREE] * SLOTS
    for c in reversed(range(CLASSES)):
        n = shares[c]
        for k in range(n):
            want = (k * SLOTS // n + c) % SLOTS
            while table[want] is not FREE:
                want = (want + 1) % SLOTS
            table[want] = c
    return table


@dataclass
class PortArbiter:
    """One shared port among the :data:`CLASSES` channels, a grant per cycle.

    :meth:`step` takes which channels ask this cycle (``requests[c]`` for class ``c``) and
    returns the class granted, or None: the slot's owner if it asks, else the highest class that
    asks.  The calendar advances every cycle whether or not anything is granted."""

    table: list = field(default_factory=lambda: [FREE] * SLOTS)
    slot: int = 0

    def step(self, requests):
        owner = self.table[self.slot]
        self.slot = (self.slot + 1) % SLOTS
        if owner is not FREE and requests[owner]:
            return owner
        for c in reversed(range(CLASSES)):
            if requests[c]:
                return c
        return None


@dataclass
class QueueSelect:
    """Round robin among queues, a descriptor at a time: :meth:`pick` with the queues that have a
    descriptor waiting (among those a channel serves) returns the first one after the last
    picked, in queue order, wrapping around, or None."""

    queues: int = QUEUES
    last: int = QUEUES - 1

    def pick(self, waiting):
        for k in range(1, self.queues + 1):
            q = (self.last + k) % self.queues
            if waiting[q]:
                self.last = q
                return q
        return None
