"""The timing of a DMA engine's queues (``ncrtl.hdl.dma.queues.DmaQueues``), cycle by cycle.

:func:`queue_schedule` plays a stream of descriptors for the queues through the channels of
:class:`~ncrtl.hdl.dma.queues.DmaQueues` and gives, for every descriptor, the cycle its channel
accepted it and the cycle its completion was taken, cycle for cycle the RTL's when

* the device memory never says not-ready and answers with fixed latencies (as in
  :mod:`ncrtl.model.dma.timing`), the completion stream is always ready, and the SBUF's compute
  port is idle;
* the descriptors are offered one per cycle in the given order from cycle 0 (the feeder waits
  while the queue of the next one is full).

Each channel is the engine of :mod:`ncrtl.model.dma.timing` as a state machine (the checks,
the dynamic-offset reads, the overhead, the move of :class:`~ncrtl.model.dma.timing.Mover`,
the completion), and every cycle the channels' requests go through the golden arbiters of
:mod:`ncrtl.model.dma.qos`: the device memory's read channel, its write channels and the SBUF's
DMA port (whose :class:`~ncrtl.model.sbuf.memory.SbufArbiter` then applies the read-add-write
waits), and the completions (the highest class first).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ncrtl.model.dma.agu import runs
from ncrtl.model.dma.isa import Error, Op, Space, _vector, check, dynamic_offsets, side_addresses
from ncrtl.model.dma.qos import CLASSES, QUEUES, SLOTS, PortArbiter, QueueSelect
from ncrtl.model.dma.timing import (
    _STATIC_RULES,
    DMA_MHZ,
    EngineTiming,
    Mover,
    ReadPort,
    tiled_transpose,
)
from ncrtl.model.event import Clock, EventCore
from ncrtl.model.sbuf.memory import Access, SbufArbiter

__all__ = ["Served", "queue_schedule"]


@dataclass(frozen=True)
class Served:
    """One descriptor's passage: its ``queue``, ``tag``, ``channel``, the cycle its channel
    accepted it (``accepted``), the cycle its completion was taken (``done``), its ``error``."""

    queue: int
    tag: int
    channel: int
    accepted: int
    done: int
    error: Error


def _plan(desc, geo, mem, timing, port=None):
    """The phases of ``desc`` after its acceptance: ``("fixed", cycles)``, ``("fetch", side,
    values)``, ``("move", Mover)`` (reading through ``port``, a
    :class:`~ncrtl.model.dma.timing.ReadPort`); then the completion with its code."""
    broken = check(desc, geo, mem.sbuf)
    code = Error.NONE if broken is None else broken[0]
    dynamic = desc.src.indirect is not None or desc.dst.indirect is not None
    phases = [("fixed", 1)]  # CHECK
    if code in _STATIC_RULES or (code != Error.NONE and not dynamic):
        return phases, code
    if dynamic:
        for side in (desc.src, desc.dst):
            phases.append(("fixed", 1))  # SIDE
            if side.indirect is None:
                try:
                    side_addresses(side)
                except ValueError:
                    return phases, Error.BOUNDS
                continue
            dyn = dynamic_offsets(side, mem.sbuf)
            n = side.pattern[0][1] if _vector(side) else 1
            phases.append(("fetch", side, n))
            if not _vector(side):
                first = side.offset + int(dyn) * side.indirect.stride
                phases.append(("fixed", 1))  # SCALE
                if not 0 <= first < side.extent:
                    return phases, Error.INDIRECT
                if side.space == Space.SBUF:
                    phases.append(("fixed", timing.part_bits + 1))  # DIVIDE
            else:
                phases.append(("fixed", 1))  # VFIX
                rows = side.extent // side.row
                if any(not 0 <= v < rows for v in dyn):
                    return phases, Error.INDIRECT
            phases.append(("fixed", 1))  # BOUND
            try:
                side_addresses(side, dyn)
            except ValueError:
                return phases, Error.INDIRECT
        phases.append(("fixed", 1))  # OVER
        if code == Error.OVERLAP:
            return phases, code
    phases.append(("fixed", timing.overhead + 2))  # WAIT, START
    w = timing.word_bytes
    dyn_src = dynamic_offsets(desc.src, mem.sbuf)
    dyn_dst = dynamic_offsets(desc.dst, mem.sbuf)
    if tiled_transpose(desc, w):
        src = runs(desc.src, w, dyn_src, tiled="source", spans=True)
        dst = runs(desc.dst, w, dyn_dst, tiled="destination", spans=True)
        mover = Mover(desc, src, dst, True, timing, port)
    else:
        src = runs(desc.src, w, dyn_src, transpose=desc.op == Op.TRANSPOSE, spans=True)
        dst = runs(desc.dst, w, dyn_dst, spans=True)
        mover = Mover(desc, src, dst, False, timing, port)
    phases.append(("move", mover))
    return phases, Error.NONE


class _Channel:
    """One channel's engine, cycle by cycle."""

    def __init__(self, k):
        self.k = k
        self.phases = None  # None: IDLE
        self.item = None
        self.left = 0  # cycles left of a fixed phase
        self.issued = self.got = 0
        self.answer = None  # the cycle an SBUF read of the fetch is answered
        self.status = False

    def start(self, item, phases, code, c):
        self.item, self.code, self.accepted = item, code, c
        self.phases = deque(phases)
        self._enter()

    def _enter(self):
        """Start the next phase, or the completion."""
        self.status = not self.phases
        if self.status:
            return
        head = self.phases[0]
        if head[0] == "fixed":
            self.left = head[1]
        elif head[0] == "fetch":
            self.issued = self.got = 0

    def wants(self, c):
        """``(ar, write, sbuf request or None)`` in cycle ``c``."""
        if self.phases is None or self.status:
            return False, False, None
        head = self.phases[0]
        if head[0] == "move":
            want = head[1].wants()
            return want.ar, want.write, want.sbuf
        if head[0] == "fetch" and self.issued < head[2]:
            ind = head[1].indirect
            return False, False, (ind.partition + self.issued, ind.byte // self.w, Access.READ)
        return False, False, None

    def writing(self):
        """Its move has a write burst with data beats still to send."""
        head = self.phases[0] if self.phases else None
        return head is not None and head[0] == "move" and head[1].writing()

    def edge(self, c, ar, write, sbuf):
        """The clock edge at the end of cycle ``c`` with this channel's grants."""
        if self.phases is None or self.status:
            return
        head = self.phases[0]
        if head[0] == "fixed":
            self.left -= 1
            if not self.left:
                self.phases.popleft()
                self._enter()
        elif head[0] == "fetch":
            n = head[2]
            last = False
            if self.answer is not None and self.answer <= c:
                self.answer = None
                self.got += 1
                last = self.got == n or not _vector(head[1])
            if sbuf and self.issued < n:
                self.issued += 1
                self.answer = c + 1
            if last:
                self.phases.popleft()
                self._enter()
        else:
            mover = head[1]
            if mover.finished():
                self.phases.popleft()
                self._enter()
            else:
                mover.edge(c, ar=ar, write=write, sbuf=sbuf)


def queue_schedule(
    items, geo, mem, timing=None, *, policy="priority", klass=None, table=None, depth=4, slot=0
):
    """The :class:`Served` of every ``(queue, descriptor)`` of ``items`` (offered in that
    order), on the memories ``mem`` (whose SBUF holds any dynamic offsets; the descriptors of
    different queues are expected to touch different bytes), ``policy`` ``"priority"`` (a
    channel per class, ``klass[q]`` queue ``q``'s class, ``table`` the calendar of
    :func:`ncrtl.model.dma.qos.slot_table`) or ``"round_robin"``, ``depth`` descriptors per
    queue; ``slot`` is the calendar slot of cycle 0.  In the order the completions were
    taken."""
    timing = timing or EngineTiming()
    klass = list(klass or [0] * QUEUES)
    table = list(table or [None] * SLOTS)
    n = CLASSES if policy == "priority" else 1
    channels = [_Channel(k) for k in range(n)]
    for ch in channels:
        ch.w = timing.word_bytes
    arbs = [PortArbiter(table, slot) for _ in range(3)]
    port = ReadPort()  # the channels share the device memory's read data channel
    lock = [None]  # the channel whose write burst holds the write channels
    sbuf_arb = SbufArbiter()
    selects = [QueueSelect() for _ in range(n)]
    queues = [deque() for _ in range(QUEUES)]  # (item, cycle readable)
    feed = deque(items)
    out = []
    ev = EventCore([Clock("dma", DMA_MHZ)])

    def busy():
        return feed or any(queues) or any(ch.phases is not None for ch in channels)

    def cycle(c):
        assert c < 10_000_000, "the queues never drained"
        wants = [ch.wants(c) for ch in channels]
        wants += [(False, False, None)] * (CLASSES - n)
        ar = arbs[0].step([w[0] for w in wants])
        wr = arbs[1].step([w[1] for w in wants])
        if lock[0] is not None:  # a write burst holds the write channels to its last beat
            wr = lock[0]
        sel = arbs[2].step([w[2] is not None for w in wants])
        granted = False
        if sel is not None:
            part, word, access = wants[sel][2]
            granted, _ = sbuf_arb.step(
                True, part, False, False, 0, False, dma_word=word, dma_access=access
            )
        else:
            sbuf_arb.step(False, 0, False, False, 0, False)
        if n == 1:  # the ports pass straight through
            ar, wr = (0 if wants[0][0] else None), (0 if wants[0][1] else None)
        # Completions: the highest class first, taken at once.
        done = max((ch.k for ch in channels if ch.phases is not None and ch.status), default=None)
        # Dispatch: an idle channel takes the next of its class's queues with a descriptor.
        taken = []
        for ch in channels:
            if ch.phases is not None:
                continue
            waiting = [
                bool(queues[q]) and queues[q][0][1] <= c and (n == 1 or klass[q] == ch.k)
                for q in range(QUEUES)
            ]
            q = selects[ch.k].pick(waiting)
            if q is not None:
                taken.append((ch, q))
        # The feeder: the next descriptor enters its queue unless the queue is full.
        push = None
        if feed and len(queues[feed[0][0]]) < depth:
            push = feed.popleft()
        # -- the clock edge --------------------------------------------------------------
        for ch in channels:
            ch.edge(c, ch.k == ar, ch.k == wr, ch.k == sel and granted)
        lock[0] = wr if wr is not None and channels[wr].writing() else None
        if done is not None:
            ch = channels[done]
            q, desc = ch.item
            out.append(Served(q, desc.tag, ch.k, ch.accepted, c, ch.code))
            ch.phases = None
            ch.status = False
        for ch, q in taken:
            item = queues[q].popleft()[0]
            phases, code = _plan(item[1], geo, mem, timing, port)
            ch.start(item, phases, code, c)
        if push is not None:
            queues[push[0]].append((push, c + 1))
        return busy()

    # The queues and channels as a clocked process of the event core, one step per cycle.
    if busy():
        ev.clocked(ev.clocks["dma"], cycle)
    ev.run()
    return out
