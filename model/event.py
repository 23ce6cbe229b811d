"""The event core the timing models run on: clock domains, processes, semaphores and a trace.

Time is an integer count of *ticks*, the period of the least common multiple of every clock of
the core (in MHz): a NeuronCore-v3's 2,400 (Tensor), 960 (Vector), 1,200 (Scalar, GpSimd) and
1,400 MHz (DMA) share a 33.6 GHz tick, so each clock's cycle is a whole number of ticks (14, 35,
28, 24) and no rounding accumulates however long a run is.

* :class:`Clock` -- a clock domain: converts between its cycles and ticks.
* :class:`EventCore` -- the event queue: :meth:`EventCore.at` runs a callback at a tick, in
  the order the events were scheduled among events of one tick; :meth:`EventCore.clocked`
  steps a state machine once per cycle of its clock; :meth:`EventCore.run` runs them to the
  end.
* :class:`Semaphore` -- a counter that processes wait on (:meth:`Semaphore.wait`: call back
  once the count reaches a value) and that a completion increments.
* :class:`Trace` -- slices on named tracks and flow arrows, written as a Chrome / Perfetto JSON
  trace (``ui.perfetto.dev`` opens it).
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field

__all__ = ["Clock", "EventCore", "Semaphore", "Trace"]


@dataclass
class Clock:
    """A clock domain of ``mhz`` MHz (an integer); :attr:`period` is set by the core."""

    name: str
    mhz: int
    period: int = 0

    def __post_init__(self):
        if not isinstance(self.mhz, int) or self.mhz <= 0:
            raise ValueError(
                f"clock {self.name} must be a positive integer of MHz, not {self.mhz!r}"
            )

    def ticks(self, cycles):
        """Ticks of ``cycles`` cycles of this clock."""
        return cycles * self.period

    def cycle_at(self, tick):
        """The first cycle of this clock starting at or after ``tick``."""
        return -(-tick // self.period)

    @property
    def ghz(self):
        return self.mhz / 1000


class EventCore:
    """The event queue of one simulation over ``clocks`` (their periods are set here)."""

    def __init__(self, clocks):
        self.clocks = {c.name: c for c in clocks}
        self.tick_mhz = math.lcm(*(c.mhz for c in clocks))
        for c in clocks:
            c.period = self.tick_mhz // c.mhz
        self.now = 0
        self._queue = []
        self._seq = 0
        self.events = 0

    def ns(self, tick):
        """``tick`` in nanoseconds."""
        return tick * 1000 / self.tick_mhz

    def at(self, tick, callback, *args):
        """Run ``callback(*args)`` at ``tick`` (not before now)."""
        if tick < self.now:
            raise ValueError(f"an event at tick {tick} is in the past (now {self.now})")
        heapq.heappush(self._queue, (tick, self._seq, callback, args))
        self._seq += 1

    def clocked(self, clock, step, first=0):
        """A clocked process: ``step(cycle)`` at every cycle of ``clock`` from ``first``, as
        long as it returns True (a cycle-stepped state machine, such as a DMA engine's)."""

        def tick(c):
            if step(c):
                self.at((c + 1) * clock.period, tick, c + 1)

        self.at(first * clock.period, tick, first)

    def run(self):
        """Run every event in time order; returns the tick of the last one."""
        q = self._queue
        while q:
            tick, _, callback, args = heapq.heappop(q)
            self.now = tick
            self.events += 1
            callback(*args)
        return self.now


class Semaphore:
    """A counting semaphore of one stream: its completions in order."""

    __slots__ = ("name", "count", "_waiters", "history", "_order")

    def __init__(self, name):
        self.name = name
        self.count = 0
        self._waiters = []  # heap of (count wanted, seq, arrival, callback)
        self._order = 0
        self.history = []  # tick of each increment: increment i made the count i + 1

    def signal(self, tick):
        """One more completion at ``tick``; wakes every waiter whose count is now reached."""
        self.count += 1
        self.history.append(tick)
        w = self._waiters
        while w and w[0][0] <= self.count:
            callback = heapq.heappop(w)[-1]
            callback()

    def reached_at(self, count):
        """The tick the semaphore reached ``count`` (None: not yet; 0 for count 0)."""
        if count <= 0:
            return 0
        return self.history[count - 1] if count <= len(self.history) else None

    def wait(self, count, callback, seq=0):
        """Call ``callback()`` once the count is at least ``count`` (at once when it is)."""
        if self.count >= count:
            callback()
        else:
            # the arrival order breaks ties, so callbacks are never compared
            self._order += 1
            heapq.heappush(self._waiters, (count, seq, self._order, callback))

    @property
    def waiting(self):
        return len(self._waiters)


@dataclass
class Trace:
    """Slices on tracks (grouped in processes) and flow arrows, in ticks of ``core``.

    A track is ``(process, thread)`` names; slices and flows are kept as tuples and turned
    into Chrome trace events only when written, so a long run's trace costs a tuple per
    instruction."""

    core: EventCore
    slices: list = field(default_factory=list)
    flows: list = field(default_factory=list)

    def slice(self, track, name, start, end, args=None):
        self.slices.append((track, name, start, end, args))
        return len(self.slices) - 1

    def flow(self, src_slice, dst_slice):
        """An arrow from the end of slice ``src_slice`` to the start of ``dst_slice``."""
        self.flows.append((src_slice, dst_slice))

    def events(self):
        """The Chrome trace events: metadata, then a complete event per slice, then flows."""
        us = 1 / (self.core.tick_mhz)  # ticks -> microseconds
        pids, tids = {}, {}
        for track, *_ in self.slices:
            proc, thread = track
            if proc not in pids:
                pids[proc] = len(pids)
                yield {"ph": "M", "name": "process_name", "pid": pids[proc], "args": {"name": proc}}
                yield {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": pids[proc],
                    "args": {"sort_index": pids[proc]},
                }
            if track not in tids:
                tids[track] = len(tids)
                yield {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pids[proc],
                    "tid": tids[track],
                    "args": {"name": thread},
                }
        for track, name, start, end, args in self.slices:
            yield {
                "ph": "X",
                "name": name,
                "pid": pids[track[0]],
                "tid": tids[track],
                "ts": start * us,
                "dur": max(end - start, 0) * us,
                "args": args or {},
            }
        for n, (a, b) in enumerate(self.flows):
            ta, tb = self.slices[a], self.slices[b]
            common = {"name": "wait", "cat": "semaphore", "id": n, "bp": "e"}
            yield {**common, "ph": "s", "pid": pids[ta[0][0]], "tid": tids[ta[0]], "ts": ta[3] * us}
            yield {**common, "ph": "f", "pid": pids[tb[0][0]], "tid": tids[tb[0]], "ts": tb[2] * us}

    def write(self, path):
        """Write the trace as JSON to ``path`` (a file object or a path)."""
        own = isinstance(path, (str, bytes)) or hasattr(path, "__fspath__")
        f = open(path, "w") if own else path
        try:
            f.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
            first = True
            for ev in self.events():
                f.write(("" if first else ",\n") + json.dumps(ev))
                first = False
            f.write("\n]}\n")
        finally:
            if own:
                f.close()
