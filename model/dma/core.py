"""The timing of the DMA engines of a core (``ncrtl.hdl.dma.core.DmaCore``), cycle by cycle.

:func:`core_schedule` plays the two DGEs' instruction streams and the stream of precomputed
descriptors through the core: the DGEs (:class:`~ncrtl.model.dma.dge.DgeTiming`'s states, each
part waiting while its engine's queue is full or an earlier source writes it), the engines'
queues (``depth`` descriptors, a descriptor readable the cycle after it enters), the engines
(the channel of :mod:`ncrtl.model.dma.queues`: the engine of :mod:`ncrtl.model.dma.timing` as
a state machine) and, every cycle, the engines' SBUF requests through the golden
:class:`~ncrtl.model.sbuf.memory.PortsArbiter`.  It gives every part's passage, cycle for cycle
the RTL's when

* every engine's device memory never says not-ready and answers with fixed latencies (as in
  :mod:`ncrtl.model.dma.timing`), the DGE statuses are taken when offered and the SBUF's
  engine port is idle;
* each stream is offered from cycle 0, its next element the cycle after one is taken;
* the SBUF bytes holding dynamic offsets are not written by the streams.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ncrtl.model.dma.dge import ENGINES, DgeTiming, generate
from ncrtl.model.dma.isa import Error
from ncrtl.model.dma.queues import _Channel, _plan
from ncrtl.model.dma.timing import DMA_MHZ, EngineTiming, ReadPort
from ncrtl.model.event import Clock, EventCore
from ncrtl.model.sbuf.memory import PortsArbiter

__all__ = ["CorePart", "CoreInstruction", "core_schedule"]

#: Where a descriptor came from: DGE 0, DGE 1, or the precomputed-descriptor stream.
SOURCES = ("dge0", "dge1", "direct")


@dataclass(frozen=True)
class CorePart:
    """One descriptor's passage through the core: its ``source`` (an index into
    :data:`SOURCES`), ``index`` (its instruction's or precomputed descriptor's place in its
    stream), ``engine``, ``sem``, the cycle it entered its engine's queue (``queued``), the
    cycle the engine accepted it (``accepted``), the cycle its completion was counted on the
    semaphore (``done``: the semaphore shows it from the next cycle) and its ``error``."""

    source: int
    index: int
    engine: int
    sem: int
    queued: int
    accepted: int
    done: int
    error: Error


@dataclass(frozen=True)
class CoreInstruction:
    """One DGE instruction: the cycle it was ``accepted``, the cycle its ``status`` was taken,
    its ``code`` and its ``parts`` (the :class:`CorePart`\\ s, by engine)."""

    accepted: int
    status: int
    code: Error
    parts: tuple

    @property
    def done(self):
        """The cycle its last part was counted (its status's, for an instruction refused)."""
        return max((p.done for p in self.parts), default=self.status)


class _Dge:
    """One DGE's states: the instruction it works on, the next part it offers."""

    def __init__(self, d, stream, geo, engines, timing):
        self.d, self.stream, self.geo = d, deque(stream), geo
        self.engines, self.timing = engines, timing
        self.index = -1
        self.busy = False
        self.accepted = []  # per instruction: (cycle, code, sem)
        self.statuses = []

    def offer(self, c):
        """``(engine, sem, desc)`` of the part offered in cycle ``c``, or None."""
        if self.busy and self.parts and c >= self.emit:
            return self.parts[0]
        return None

    def edge(self, c, taken):
        """The clock edge at the end of cycle ``c``: ``taken``: the offered part entered its
        queue."""
        if not self.busy:
            if self.stream:
                desc, sem = self.stream.popleft()
                self.index += 1
                g = generate(desc, self.geo, self.engines)
                self.accepted.append((c, g.error, sem))
                self.parts = deque((k, sem, p) for k, p in enumerate(g.parts))
                self.emit = c + (2 if g.error != Error.NONE else self.timing.cycles)
                self.busy = True
            return
        if taken:
            self.parts.popleft()
        elif not self.parts and c >= self.emit:  # the status, taken when offered
            self.statuses.append(c)
            self.busy = False


def core_schedule(
    instr0=(),
    instr1=(),
    direct=(),
    *,
    geo,
    mem,
    engines=ENGINES,
    depth=2,
    timing=None,
    dge=None,
    turn=0,
):
    """``(instructions, precomputed)``: the :class:`CoreInstruction` of every ``(desc, sem)``
    of ``instr0`` and ``instr1`` (DGE 0's and DGE 1's streams) and the :class:`CorePart` of
    every ``(engine, sem, desc)`` of ``direct``, on :class:`~ncrtl.hdl.dma.core.DmaCore` with
    ``engines`` engines of ``timing`` (an :class:`~ncrtl.model.dma.timing.EngineTiming`),
    queues of ``depth`` and DGEs of ``dge`` (a :class:`~ncrtl.model.dma.dge.DgeTiming`), on
    the memories ``mem`` (whose SBUF holds any dynamic offsets); ``turn`` is the SBUF
    arbiter's turn in cycle 0 (``MultiPortSbuf.turn``: it advances every cycle from reset)."""
    timing = timing or EngineTiming()
    dge = dge or DgeTiming()
    dges = [_Dge(d, s, geo, engines, dge) for d, s in enumerate((instr0, instr1))]
    feed = deque(enumerate(direct))
    channels = [_Channel(k) for k in range(engines)]
    for ch in channels:
        ch.w = timing.word_bytes
        ch.port = ReadPort()  # each engine has its own device-memory port
    arb = PortsArbiter(engines, turn=turn % engines)
    queues = [deque() for _ in range(engines)]  # (readable from, source, index, engine, sem, desc)
    parts = [[[] for _ in d.stream] for d in dges]
    precomputed = [None] * len(feed)
    ev = EventCore([Clock("dma", DMA_MHZ)])

    def busy():
        return (
            feed
            or any(d.stream or d.busy for d in dges)
            or any(queues)
            or any(ch.phases is not None for ch in channels)
        )

    def cycle(c):
        assert c < 10_000_000, "the core never drained"
        wants = [ch.wants(c) for ch in channels]
        go, _ = arb.step([None if w[2] is None else (*w[2], False) for w in wants])
        # Into each engine's queue: DGE 0, then DGE 1, then a precomputed descriptor.
        offers = [d.offer(c) for d in dges]
        offers.append((feed[0][1][0], feed[0][1][1], feed[0][1][2]) if feed else None)
        taken = [False] * len(SOURCES)
        pushes = []
        for k in range(engines):
            first = next((i for i, o in enumerate(offers) if o is not None and o[0] == k), None)
            if first is not None and len(queues[k]) < depth:
                taken[first] = True
                index = dges[first].index if first < 2 else feed[0][0]
                _, sem, desc = offers[first]
                pushes.append((k, (c + 1, first, index, k, sem, desc)))
        # The engines: a completion counted at once, an idle engine takes its queue's head.
        done = [ch for ch in channels if ch.phases is not None and ch.status]
        start = [
            ch for ch in channels if ch.phases is None and queues[ch.k] and queues[ch.k][0][0] <= c
        ]
        # -- the clock edge --------------------------------------------------------------
        for ch in channels:
            ch.edge(c, True, True, go[ch.k])
        for ch in done:
            item = ch.item
            part = CorePart(item[1], item[2], ch.k, item[4], item[0] - 1, ch.accepted, c, ch.code)
            if part.source < 2:
                parts[part.source][part.index].append(part)
            else:
                precomputed[part.index] = part
            ch.phases = None
            ch.status = False
        for ch in start:
            item = queues[ch.k].popleft()
            phases, code = _plan(item[5], geo, mem, timing, ch.port)
            ch.start(item, phases, code, c)
        for d, dg in enumerate(dges):
            dg.edge(c, taken[d])
        if taken[2]:
            feed.popleft()
        for k, item in pushes:
            queues[k].append(item)
        return busy()

    # The DGEs, queues and engines as a clocked process of the event core.
    if busy():
        ev.clocked(ev.clocks["dma"], cycle)
    ev.run()
    instructions = [
        [
            CoreInstruction(a, s, code, tuple(sorted(p, key=lambda x: x.engine)))
            for (a, code, _), s, p in zip(dg.accepted, dg.statuses, parts[d])
        ]
        for d, dg in enumerate(dges)
    ]
    return instructions, precomputed
