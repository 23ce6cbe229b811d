"""The DMA engine's transfer timing: the cycles of one descriptor, cycle for cycle the RTL's.

:func:`transfer_cycles` gives, for one descriptor on an idle engine, the cycle its completion
is valid, counted from the cycle the engine accepted it (cycle 0), and when each phase began.
The RTL (``ncrtl.hdl.dma.engine``) matches it exactly when

* the completion is taken the cycle it is valid (the next descriptor can then be accepted one
  cycle later: a descriptor occupies ``cycles + 1`` cycles of a back-to-back stream);
* the device memory never says not-ready and answers with a fixed latency per burst: the first
  data beat of a read address accepted in cycle ``t`` is valid in cycle ``t + read_latency``,
  the others one per cycle after it, and a burst's beats follow the beats of the bursts
  accepted before it (one read data channel: :class:`ReadPort`); the write response of a write
  whose address and data are accepted in cycle ``t`` is valid in cycle ``t + write_latency``;
* the SBUF's compute-engine port is idle (the DMA port is granted unless a read-add-write in
  flight holds it back: :class:`ncrtl.model.sbuf.memory.SbufArbiter`).

The phases, in the engine's order (docs/dma.md, "The engine"):

1. **Check** (cycle 1): every rule of :func:`ncrtl.model.dma.isa.check`; a broken one completes
   the descriptor in cycle 2.  A descriptor with a dynamic offset checks only the rules before
   the bounds here, then each side in turn (source first): one cycle for a side without an
   offset; for a side with one, a cycle to start, the SBUF reads of its values (one issued per
   cycle, the last answered one cycle after it) and a cycle after the last, a cycle for a
   scalar's range (and ``part_bits + 1`` for the SBUF division) or a vector's, a cycle for the
   bounds; then a cycle for the overlap rule.
2. **Overhead**: ``overhead + 1`` cycles, then a cycle to start the two address generators.
3. **Move**: the generators' runs (:func:`ncrtl.model.dma.agu.runs`), one per cycle each; a
   read of the device memory is a burst of the source's runs (:func:`burst_beats`: from a run's
   word to the end of its contiguous span, at most ``burst`` words, not across a
   ``burst``-word boundary), issued with its first run, its other runs taken a cycle each after
   it; an SBUF read is one run; at most ``outstanding`` reads in flight until their last
   beat's bytes are in the byte queue; a beat's data passes a two-cycle buffer into the queue; a destination run is written
   when its bytes are all in the queue (a tiled transpose: after the tile buffer); the SBUF's
   one DMA port takes the writer's request before the reader's.  This phase is a cycle-stepped
   walk of those queues and counters, the same state the RTL keeps, so it is exact for any
   pattern, not only the steady state.
4. **Complete**: the cycle after the last write is done and every write response is in.

Steady state, for the record: a read of ``b`` beats holds its slot from its issue to the cycle
after its last bytes enter the queue, ``read_latency + 2 + b`` cycles, so reads of ``b`` words
stream at ``min(1, outstanding x b / (read_latency + 2 + b))`` words per cycle: a long copy of
whole words takes about ``words x max(1, (read_latency + 2 + b) / (outstanding x b))`` cycles
after the overhead (:func:`bandwidth_cycles`), and single-word reads (a tiled transpose's rows)
stream at ``outstanding / (read_latency + 3)``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ncrtl.model.dma.agu import runs
from ncrtl.model.dma.isa import (
    Error,
    Op,
    Space,
    _vector,
    check,
    dynamic_offsets,
    side_addresses,
)
from ncrtl.model.event import Clock, EventCore
from ncrtl.model.sbuf.memory import Access, SbufArbiter

__all__ = [
    "EngineTiming",
    "ReadPort",
    "Transfer",
    "transfer_cycles",
    "tiled_transpose",
    "burst_beats",
    "check_burst",
    "DMA_MHZ",
]

#: AXI4: a burst does not cross a 4 KiB boundary, nor hold more than 256 beats.
AXI_BOUNDARY = 4096
AXI_MAX_BEATS = 256


def check_burst(burst, word_bytes, owner="EngineTiming"):
    """``burst`` (the most beats of a DMA engine's read) checked: a power of two from 1 to 256
    whose bytes (``burst x word_bytes``) fit AXI4's 4 KiB boundary, so that a burst that stays
    inside its ``burst``-word boundary never crosses it."""
    if isinstance(burst, bool) or not isinstance(burst, int):
        raise TypeError(f"{owner} burst must be an int, not {burst!r}")
    if not 1 <= burst <= AXI_MAX_BEATS or burst & (burst - 1):
        raise ValueError(
            f"{owner} burst must be a power of two from 1 to {AXI_MAX_BEATS} beats, not {burst}"
        )
    if burst * word_bytes > AXI_BOUNDARY:
        raise ValueError(
            f"{owner} burst of {burst} beats x {word_bytes} bytes crosses AXI4's "
            f"{AXI_BOUNDARY}-byte boundary: at most {AXI_BOUNDARY // word_bytes} beats"
        )
    return burst


def burst_beats(addr, span, word_bytes, burst):
    """The beats of the read that begins with a run at byte ``addr`` whose contiguous span
    (``ncrtl.model.dma.agu.runs(..., spans=True)``) is ``span`` bytes: the words from the run's
    to the span's last, at most to the next ``burst``-word boundary."""
    words = (addr % word_bytes + span + word_bytes - 1) // word_bytes
    room = burst - (addr // word_bytes) % burst
    return min(words, room)


class ReadPort:
    """The device memory's read data channel as the timing sees it: one beat per cycle, the
    bursts in the order their addresses were accepted.  Shared by the channels of an engine
    (``ncrtl.model.dma.queues``); every :class:`Mover` of one engine gets the same."""

    def __init__(self):
        self.free = 0  # the first cycle no beat is due in

    def beats(self, c, n, latency):
        """The cycles the ``n`` beats of a read accepted in cycle ``c`` are valid in."""
        first = max(c + latency, self.free)
        self.free = first + n
        return range(first, first + n)


#: The DMA engines' clock, MHz (the figures of docs/dma.md are at 1.4 GHz): the clock domain of
#: the engines' processes on the event core (:mod:`ncrtl.model.event`).
DMA_MHZ = 1400

#: Rules checked before any dynamic offset is read (all but the bounds and the overlap).
_STATIC_RULES = (
    Error.ELEMENT_SIZE,
    Error.SPACE,
    Error.SHAPE,
    Error.PARTITION_STEP,
    Error.TENSOR,
)


@dataclass(frozen=True)
class EngineTiming:
    """The engine's and its memories' timing parameters (``ncrtl.hdl.dma.engine.DmaEngine``).

    Attributes
    ----------
    word_bytes : int
        Data path width.
    overhead : int
        Cycles of the fixed per-transfer cost.
    outstanding : int
        Reads in flight (a read: a burst of the device memory, or an SBUF word).
    burst : int
        The most beats of a device memory read (:func:`check_burst`).
    part_bits : int
        Width of a partition number (the descriptor's ``Widths.part_bits``): the SBUF
        division of a scalar offset takes that many steps.
    read_latency, write_latency : int
        The device memory's (at least 1).
    """

    word_bytes: int = 16
    overhead: int = 0
    outstanding: int = 8
    burst: int = 16
    part_bits: int = 7
    read_latency: int = 6
    write_latency: int = 6

    def __post_init__(self):
        for name in ("read_latency", "write_latency", "outstanding", "word_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"EngineTiming {name} must be at least 1, not {getattr(self, name)}"
                )
        if self.overhead < 0:
            raise ValueError(f"EngineTiming overhead must be at least 0, not {self.overhead}")
        check_burst(self.burst, self.word_bytes)


@dataclass(frozen=True)
class Transfer:
    """One descriptor's timing: ``cycles`` from its acceptance to its completion being valid;
    ``error`` its code; ``start`` the cycle the address generators' first runs are valid (None
    when the descriptor broke a rule); ``reads`` and ``writes`` the memory word accesses."""

    cycles: int
    error: Error
    start: int | None = None
    reads: int = 0
    writes: int = 0


def tiled_transpose(desc, word_bytes):
    """Whether the engine takes a TRANSPOSE's tiled path: both sides of the source view are
    multiples of ``word_bytes / element bytes``."""
    if desc.op != Op.TRANSPOSE:
        return False
    e = word_bytes // desc.src.esize
    a, b = desc.src.shape
    return a % e == 0 and b % e == 0


def _side_check_cycles(side, dyn, t, timing):
    """The dynamic-offset walk of one side, its ``SIDE`` state in cycle ``t``: ``(next cycle,
    error or None)``; on an error the completion is valid in the returned cycle."""
    if side.indirect is None:
        try:
            side_addresses(side)
        except ValueError:
            return t + 1, Error.BOUNDS
        return t + 1, None
    n = side.pattern[0][1] if _vector(side) else 1
    t += 1 + n + 1  # SIDE, then the reads: one issued per cycle, answered the next
    if not _vector(side):
        first = side.offset + int(dyn) * side.indirect.stride
        if not 0 <= first < side.extent:
            return t + 1, Error.INDIRECT
        t += 1  # SCALE
        if side.space == Space.SBUF:
            t += timing.part_bits + 1  # DIVIDE
    else:
        rows = side.extent // side.row
        if any(not 0 <= v < rows for v in dyn):
            return t + 1, Error.INDIRECT
        t += 1  # VFIX
    try:
        side_addresses(side, dyn)
    except ValueError:
        return t + 1, Error.INDIRECT
    return t + 1, None  # BOUND


def transfer_cycles(desc, geo, mem, timing=None):
    """The :class:`Transfer` of ``desc`` (on the memories ``mem``, :class:`ncrtl.model.dma.
    engine.Memories`, whose SBUF holds any dynamic offsets) on an idle engine with ``timing``
    (:class:`EngineTiming`)."""
    timing = timing or EngineTiming()
    broken = check(desc, geo, mem.sbuf)
    code = Error.NONE if broken is None else broken[0]
    dynamic = desc.src.indirect is not None or desc.dst.indirect is not None
    if not dynamic:
        if code != Error.NONE:
            return Transfer(2, code)
        wait = 2
    else:
        if code in _STATIC_RULES:
            return Transfer(2, code)
        t = 2
        dyns = []
        for side in (desc.src, desc.dst):
            dyn = dynamic_offsets(side, mem.sbuf)
            dyns.append(dyn)
            t, err = _side_check_cycles(side, dyn, t, timing)
            if err is not None:
                return Transfer(t, err)
        if code == Error.OVERLAP:
            return Transfer(t + 1, code)
        wait = t + 1
    assert code == Error.NONE, code
    start = wait + timing.overhead + 2
    dyn_src = dynamic_offsets(desc.src, mem.sbuf)
    dyn_dst = dynamic_offsets(desc.dst, mem.sbuf)
    w = timing.word_bytes
    if tiled_transpose(desc, w):
        src_runs = runs(desc.src, w, dyn_src, tiled="source", spans=True)
        dst_runs = runs(desc.dst, w, dyn_dst, tiled="destination", spans=True)
        tiled = True
    else:
        src_runs = runs(desc.src, w, dyn_src, transpose=desc.op == Op.TRANSPOSE, spans=True)
        dst_runs = runs(desc.dst, w, dyn_dst, spans=True)
        tiled = False
    end = _move(desc, src_runs, dst_runs, tiled, start, timing)
    return Transfer(end, Error.NONE, start, len(src_runs), len(dst_runs))


def _move(desc, src_runs, dst_runs, tiled, c, timing):
    """Cycle-stepped move phase from cycle ``c`` (the first runs valid) on an idle engine: the
    cycle the completion is valid."""
    mover = Mover(desc, src_runs, dst_runs, tiled, timing)
    arb = SbufArbiter()
    last = [c - 1]

    def cycle(c):
        want = mover.wants()
        if want.sbuf is not None:
            part, word, access = want.sbuf
            grant, _ = arb.step(
                True, part, False, False, 0, False, dma_word=word, dma_access=access
            )
        else:
            grant = arb.step(False, 0, False, False, 0, False)[0]
        mover.edge(c, ar=True, write=True, sbuf=grant)
        last[0] = c
        return not mover.finished()

    # The move as a clocked process of the event core, from cycle c.
    if not mover.finished():
        ev = EventCore([Clock("dma", DMA_MHZ)])
        ev.clocked(ev.clocks["dma"], cycle, first=c)
        ev.run()
    return last[0] + 2


@dataclass
class Wants:
    """What a moving engine asks for in a cycle: ``ar`` (a device memory read address),
    ``write`` (a device memory write: address and data), ``sbuf`` (``(partition, word,
    access)`` of its SBUF request, the writer's before the reader's, or None)."""

    ar: bool
    write: bool
    sbuf: tuple | None


class Mover:
    """The move phase of one descriptor, cycle by cycle: the state the RTL keeps (module
    docstring, "Move"). Each cycle :meth:`wants` says what the engine asks of its ports and
    :meth:`edge` applies the clock edge with the grants; :meth:`finished` is the RUN state's
    exit (the last write done and every write response in: the completion is valid the next
    cycle)."""

    def __init__(self, desc, src_runs, dst_runs, tiled, timing, port=None):
        w = self.w = timing.word_bytes
        self.timing = timing
        self.port = port if port is not None else ReadPort()
        self.tiled = tiled
        self.src_hbm = desc.src.space == Space.HBM
        self.dst_hbm = desc.dst.space == Space.HBM
        self.access = Access.ADD if desc.op == Op.ADD else Access.WRITE
        self.s_part = src_runs[:, 0].tolist()
        self.s_word = (src_runs[:, 1] // w).tolist()
        self.s_bytes = src_runs[:, 2].tolist()
        if self.src_hbm and src_runs.shape[1] > 3:
            self.s_beats = [
                burst_beats(a, n, w, timing.burst) for a, n in src_runs[:, [1, 3]].tolist()
            ]
        else:
            self.s_beats = [1] * len(self.s_bytes)
        self.d_part = dst_runs[:, 0].tolist()
        self.d_word = (dst_runs[:, 1] // w).tolist()
        self.d_bytes = dst_runs[:, 2].tolist()
        if self.dst_hbm and dst_runs.shape[1] > 3:
            self.d_beats = [
                burst_beats(a, n, w, timing.burst) for a, n in dst_runs[:, [1, 3]].tolist()
            ]
        else:
            self.d_beats = [1] * len(self.d_bytes)
        self.wfollow = 0  # data beats of the write burst in flight still to send
        self.ns, self.nd = len(self.s_bytes), len(self.d_bytes)
        self.si = self.di = 0
        self.follow = 0  # runs of the burst in flight still to take
        self.held = 0  # reads issued whose last beat's bytes are not yet in the byte queue
        self.inflight = deque()  # (bytes, the read's last beat) of the runs taken, in order
        self.answers = deque()  # cycles the beats of the reads issued arrive
        self.inner = deque()  # the read buffer's first stage: (cycle readable, bytes, last)
        self.out = None  # its output register: (bytes, last), or None
        self.count = 0  # bytes in the byte queue
        # The tile buffer of a tiled transpose and the queue after it.
        self.e = w // desc.src.esize
        self.tile_count = 0
        self.full = [False, False]
        self.fill = self.drain = 0
        self.rows = self.cols = 0
        self.responses = deque()  # write responses due
        self.pending_b = 0
        self.written = False

    def finished(self):
        return self.written and self.pending_b == 0

    def writing(self):
        """A write burst has data beats still to send (it holds a shared write channel)."""
        return self.wfollow > 0

    def _have(self):
        wcount = self.tile_count if self.tiled else self.count
        return self.di < self.nd and wcount >= self.d_bytes[self.di]

    def _can(self):
        return not self.follow and self.si < self.ns and self.held < self.timing.outstanding

    def wants(self):
        have, can = self._have(), self._can()
        sbuf = None
        if not self.dst_hbm and have:
            sbuf = (self.d_part[self.di], self.d_word[self.di], self.access)
        elif not self.src_hbm and can:
            sbuf = (self.s_part[self.si], self.s_word[self.si], Access.READ)
        return Wants(can and self.src_hbm, have and self.dst_hbm, sbuf)

    def edge(self, c, *, ar, write, sbuf):
        """The clock edge at the end of cycle ``c``: ``ar``, ``write``: this engine's device
        memory read address and write are taken; ``sbuf``: its SBUF request is granted."""
        w, timing = self.w, self.timing
        have, can = self._have(), self._can()
        reader_sbuf = not self.src_hbm and can and (self.dst_hbm or not have)
        issue = can and (ar if self.src_hbm else reader_sbuf and sbuf)
        follow = bool(self.follow)
        complete = have and (write if self.dst_hbm else sbuf)
        # Read answers: the device memory's beat, or the SBUF's response the cycle after the
        # grant; either way taken at once (a slot is reserved for each).
        fire = bool(self.answers) and self.answers[0] <= c
        # The read buffer's output into the byte queue, while the queue holds at most a word.
        push = self.out is not None and self.count <= w
        pushed, done = self.out if push else (0, False)
        take = 0
        if self.tiled:
            row_fire = self.count >= w and not self.full[self.fill]
            col_fire = self.full[self.drain] and self.tile_count <= w
            take = w if row_fire else 0
        elif complete:
            take = self.d_bytes[self.di]
        if issue:
            n = self.s_beats[self.si]
            self.inflight.append((self.s_bytes[self.si], n == 1))
            if self.src_hbm:
                self.answers.extend(self.port.beats(c, n, timing.read_latency))
            else:
                self.answers.append(c + 1)
            self.follow = n - 1
            self.si += 1
        elif follow:
            self.follow -= 1
            self.inflight.append((self.s_bytes[self.si], self.follow == 0))
            self.si += 1
        if fire:
            self.answers.popleft()
            self.inner.append((c + 1, *self.inflight.popleft()))
        if push or self.out is None:
            self.out = self.inner.popleft()[1:] if self.inner and self.inner[0][0] <= c else None
        self.held += int(issue) - int(done)
        self.count = self.count - take + pushed
        if self.tiled:
            if row_fire:
                self.rows += 1
                if self.rows == self.e:
                    self.rows, self.full[self.fill], self.fill = 0, True, 1 - self.fill
            if col_fire:
                self.cols += 1
                if self.cols == self.e:
                    self.cols, self.full[self.drain], self.drain = 0, False, 1 - self.drain
            taken = self.d_bytes[self.di] if complete else 0
            self.tile_count = self.tile_count - taken + (w if col_fire else 0)
        if self.responses and self.responses[0] <= c:
            self.responses.popleft()
            self.pending_b -= 1
        if complete:
            if self.dst_hbm:
                if self.wfollow:
                    self.wfollow -= 1
                else:
                    self.wfollow = self.d_beats[self.di] - 1
                if not self.wfollow:  # the burst's last beat: its response is due
                    self.responses.append(c + timing.write_latency)
                    self.pending_b += 1
            self.di += 1
            self.written = self.di == self.nd


def bandwidth_cycles(words, timing=None, beats=None):
    """The steady-state estimate of the module docstring: cycles to read ``words`` whole words
    from the device memory after the overhead, in reads of ``beats`` words (default: the
    longest burst, as a long contiguous copy reads)."""
    timing = timing or EngineTiming()
    b = timing.burst if beats is None else max(1, min(beats, timing.burst))
    slot = (timing.read_latency + 2 + b) / (timing.outstanding * b)
    return int(np.ceil(words * max(1.0, slot)))
