"""From a kernel's calls in program order to its streams: placement and semaphores.

:class:`Builder` receives what a traced kernel did (:meth:`Builder.tensor` for each tensor it
created, :meth:`Builder.emit` for each instruction, with operands naming those tensors) and
:meth:`Builder.finish` turns it into a :class:`~ncrtl.model.kernel.stream.Program`:

1. **Lifetimes.** A tensor's space is its own from its first use to its last, in program
   order (a tensor never used takes no space).
2. **Placement.** SBUF: every partition's bytes ``[base, base + bytes per partition)``, aligned
   to :data:`ALIGN` bytes; PSUM: whole 2 KiB banks.  Space is given in a ring: the next tensor
   goes at the first gap at or after where the previous one ended, wrapping to the start, so
   the space freed longest ago is reused first.  A tile allocated inside a loop then lands in
   a different place each iteration until the ring wraps -- multi-buffering, as NKI's
   compiler gives it -- and the reuse that does come is a dependency like any other.  Device
   memory: the inputs, then the outputs, then the kernel's own device tensors, one after
   another (never reused).  A tensor that does not fit names the live tensors.
3. **Semaphores.** Two instructions whose operands overlap, at least one writing (RAW, WAR,
   WAW), in different streams, get a wait: the later waits for the earlier's stream to reach
   the earlier's count.  A tensor placed where earlier tensors were waits, at its first use,
   for every access of theirs.  Within one stream, the compute engines run in order (no wait
   needed); a DMA queue's transfers overlap, so it waits on itself too.  A wait implied by an
   earlier wait of the same stream is left out.

Every step costs a bounded amount per instruction, however long the kernel (docs/kernels.md,
"Speed"): a wait is on the *latest* conflicting access of each stream, so each tensor keeps,
per stream, the latest write and the latest access of every byte of it (:class:`_Latest`),
not the list of its accesses, and drops them after its last use; a tensor placed where
earlier ones were waits on the latest access of each stream to those bytes, one map per
memory (:class:`_Paint`, intervals painted over, the last one painted holding) that each
tensor joins at its last use.  Placement keeps the live tensors by address and by their last
use.  :data:`work` counts the steps.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import math
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from ncrtl.model.kernel import loops
from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.stream import ENGINES, Instruction, Program, TensorInfo, dma_queue

__all__ = [
    "Builder",
    "Operand",
    "Decl",
    "ALIGN",
    "PlacementError",
    "Work",
    "work",
    "collector_paused",
]

#: Alignment of an SBUF tensor's first byte (a DMA data-path word is 16 bytes; 64 keeps every
#: tensor on whole words of the widest access).
ALIGN = 64
#: Alignment of device-memory tensors.
HBM_ALIGN = 64


def _merged(intervals):
    """Byte intervals ``[(lo, hi)]`` merged where they overlap or touch, in order."""
    out = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


class PlacementError(ValueError):
    """A tensor does not fit its memory (the message names the live tensors)."""


class Work:
    """Steps the builder took, summed over every :meth:`Builder.finish` (the test of linear
    cost counts these, never seconds): ``placement`` (live tensors passed over looking for a
    gap, expired, inserted), ``semaphores`` (intervals visited or replaced in the access
    maps); and the seconds of each (``ncrtl bench --only kernel`` prints them)."""

    __slots__ = ("placement", "semaphores", "placement_s", "semaphores_s")

    def __init__(self):
        self.reset()

    def reset(self):
        self.placement = 0
        self.semaphores = 0
        self.placement_s = 0.0
        self.semaphores_s = 0.0


#: The builder's step counts (:class:`Work`).
work = Work()


@contextlib.contextmanager
def collector_paused():
    """Python's cycle collector paused for the block (as it was after): a kernel's trace, its
    streams and its timing run make objects by the hundred thousand that hold no cycles, and
    each full collection walks every one of them (a fifth of the run's time); what garbage
    with cycles the block leaves is collected after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_LOW = -(1 << 62)


class _Paint:
    """A line painted with intervals: each point holds the value of the last interval painted
    over it (None where none was).  Kept as the starts of its runs of one value, each run up to
    the next start; painting an interval replaces the runs it covers, so the runs are at most
    twice the intervals still visible, whatever was painted before.  A value may itself be a
    :class:`_Paint` (:meth:`paint2`: rows, then bytes within a row)."""

    __slots__ = ("starts", "values")

    def __init__(self, starts=None, values=None):
        self.starts = starts if starts is not None else [_LOW]
        self.values = values if values is not None else [None]

    def _cut(self, x):
        """The index of the run starting at ``x`` (the run holding ``x`` split there)."""
        starts = self.starts
        i = bisect_right(starts, x) - 1
        if starts[i] == x:
            return i
        v = self.values[i]
        starts.insert(i + 1, x)
        self.values.insert(i + 1, v.copy() if isinstance(v, _Paint) else v)
        return i + 1

    def copy(self):
        return _Paint(
            list(self.starts), [v.copy() if isinstance(v, _Paint) else v for v in self.values]
        )

    def paint(self, lo, hi, value):
        """``[lo, hi)`` holds ``value``."""
        i = self._cut(lo)
        j = self._cut(hi)
        work.semaphores += j - i + 1
        self.starts[i:j] = [lo]
        self.values[i:j] = [value]

    def latest(self, lo, hi):
        """The largest value held in ``[lo, hi)`` (-1 where none)."""
        starts, values = self.starts, self.values
        i = bisect_right(starts, lo) - 1
        n = len(starts)
        best = -1
        k = i
        while k < n and starts[k] < hi:
            v = values[k]
            if v is not None and v > best:
                best = v
            k += 1
        work.semaphores += k - i + 1
        return best

    def paint2(self, box, value):
        """Rows ``[box[0], box[1])``, bytes ``[box[2], box[3])`` of each, hold ``value``."""
        i = self._cut(box[0])
        j = self._cut(box[1])
        values = self.values
        for k in range(i, j):
            row = values[k]
            if row is None:
                row = values[k] = _Paint()
            row.paint(box[2], box[3], value)

    def merge(self, lo, hi, values):
        """``[lo, hi)`` holds ``values`` (a dict) over what it held (a dict per run)."""
        i = self._cut(lo)
        j = self._cut(hi)
        work.semaphores += j - i + 1
        runs = self.values
        for k in range(i, j):
            runs[k] = {**runs[k], **values} if runs[k] else dict(values)

    def latest_each(self, lo, hi, out):
        """``out[key]`` at least 1 + the largest value of ``key`` held in ``[lo, hi)``, for
        each key of the dicts held there."""
        starts, values = self.starts, self.values
        i = bisect_right(starts, lo) - 1
        n = len(starts)
        k = i
        while k < n and starts[k] < hi:
            for key, v in (values[k] or {}).items():
                if out.get(key, 0) <= v:
                    out[key] = v + 1
            k += 1
        work.semaphores += k - i + 1

    def latest2(self, box):
        """The largest value held in the box (-1 where none)."""
        starts, values = self.starts, self.values
        i = bisect_right(starts, box[0]) - 1
        n = len(starts)
        best = -1
        hi = box[1]
        while i < n and starts[i] < hi:
            row = values[i]
            if row is not None:
                v = row.latest(box[2], box[3])
                if v > best:
                    best = v
            i += 1
        return best


#: Boxes a :class:`_Latest` keeps as a list; past this it becomes a :class:`_Paint`.
_FEW = 8


class _Latest:
    """Per byte of a tensor (a box: rows, then bytes within a row), the latest of the values
    put over it.  A tensor is mostly used whole or in a few views: the boxes are kept as a
    list, each dropped when a later one holds it (the later value wins wherever the earlier
    could), so a view used again and again is one entry; a tensor used in more views than
    :data:`_FEW` at once turns into a :class:`_Paint` of rows and bytes."""

    __slots__ = ("boxes", "paint")

    def __init__(self):
        self.boxes = []  # (first row, end row, first byte, end byte, value), oldest first
        self.paint = None

    def put(self, box, value):
        if self.paint is not None:
            self.paint.paint2(box, value)
            return
        p0, p1, b0, b1 = box
        old = self.boxes
        work.semaphores += len(old) + 1
        if len(old) == 1:  # the usual: a view used again
            e = old[0]
            if p0 <= e[0] and e[1] <= p1 and b0 <= e[2] and e[3] <= b1:
                self.boxes = [(p0, p1, b0, b1, value)]
                return
        kept = [e for e in old if not (p0 <= e[0] and e[1] <= p1 and b0 <= e[2] and e[3] <= b1)]
        kept.append((p0, p1, b0, b1, value))
        if len(kept) > _FEW:
            self.paint = _Paint()
            for e in kept:
                self.paint.paint2(e[:4], e[4])
            kept = None
        self.boxes = kept

    def get(self, box):
        """The latest value put over any byte of ``box`` (-1 where none)."""
        if self.paint is not None:
            return self.paint.latest2(box)
        p0, p1, b0, b1 = box
        best = -1
        boxes = self.boxes
        work.semaphores += len(boxes)
        for e in boxes:
            if e[0] < p1 and p0 < e[1] and e[2] < b1 and b0 < e[3] and e[4] > best:
                best = e[4]
        return best


@dataclass(eq=False, slots=True)
class Decl:
    """A tensor the kernel created: ``space``, ``shape``, ``dtype``, ``kind`` (``input``,
    ``output``, ``internal``), where it was created; ``base`` once placed."""

    name: str
    space: str
    shape: tuple
    dtype: str
    kind: str = "internal"
    line: str = ""
    base: int = None
    first: int = -1
    last: int = -1
    span: int = 0  # bytes per partition it holds (a whole number of units)
    # where it is used in a dynamic loop and before or after it: the positions between which
    # its space stays its own (loops.Layout.hold), else None (first to last use)
    hold: tuple = None
    # a memory's manual placements (``nl.ndarray(address=...)``): the whole memory as one
    # tensor at base 0 whose views are the placed tensors, and the byte intervals of each
    # partition they take, which automatic placement leaves alone for the whole kernel
    pinned: list = None
    # a tensor the kernel placed itself: ``(its memory's placements tensor, first partition,
    # first byte)``; its operands are views of that tensor (never placed on its own)
    alias: tuple = None

    @property
    def held(self):
        """``(first, last)`` program positions its space is its own."""
        return (self.first, self.last) if self.hold is None else self.hold

    @property
    def partition_bytes(self):
        shape = self.shape if len(self.shape) > 1 else (1,) + tuple(self.shape)
        return math.prod(shape[1:]) * dtype_of(self.dtype).itemsize

    @property
    def nbytes(self):
        return math.prod(self.shape) * dtype_of(self.dtype).itemsize


class Operand:
    """An operand as traced: a tensor and ``view``, a :class:`~ncrtl.model.kernel.stream.Ref`
    of it with the tensor at address 0 (its pattern and offset in elements of its
    ``view_dtype``); ``extent0`` the view's
    :meth:`~ncrtl.model.kernel.stream.Ref.extent` there, where the tracer found it (None: found
    from the placed view)."""

    __slots__ = ("decl", "view", "extent0")

    def __init__(self, decl, view, extent0=None):
        self.decl, self.view, self.extent0 = decl, view, extent0

    def ref(self):
        """The view of the placed tensor: the tracer's own Ref, which nothing has kept, its
        base set once (not a copy per operand)."""
        view = self.view
        if view.base != self.decl.base:
            object.__setattr__(view, "base", self.decl.base)
        return view


@dataclass(slots=True)
class _Pending:
    engine: str
    op: str
    dsts: tuple
    srcs: tuple
    args: dict
    line: str
    call: str


class Builder:
    """Collects a kernel's tensors and instructions; :meth:`finish` makes the program."""

    def __init__(self, core, kernel=""):
        self.core = core
        self.kernel = kernel
        self.decls = []
        self.pending = []
        self._names = set()
        self._suffix = {}  # name -> the first suffix that may be free (those below are taken)
        self._dma_next = 0
        #: Bytes of the device-memory tensors made so far (the kernel's device memory bound).
        self.hbm_bytes = 0

    def tensor(self, space, shape, dtype, *, name=None, kind="internal", line=""):
        """A new tensor; ``name`` made unique (``name.1`` ...)."""
        base = name or f"{space}{len(self.decls)}"
        n = self._suffix.get(base, 0)
        unique = f"{base}.{n}" if n else base
        while unique in self._names:
            n += 1
            unique = f"{base}.{n}"
        self._suffix[base] = n + 1
        self._names.add(unique)
        decl = Decl(unique, space, tuple(int(s) for s in shape), dtype_of(dtype).name, kind, line)
        self.decls.append(decl)
        if space == "hbm":
            self.hbm_bytes += decl.nbytes
        return decl

    def emit(self, engine, op, dsts=(), srcs=(), args=None, *, line="", call=""):
        """Append an instruction; ``engine`` ``"dma"`` takes the next DMA queue in turn.
        Returns its program position."""
        if engine == "dma":
            engine = dma_queue(self._dma_next % self.core.dma_queues)
            self._dma_next += 1
        self.pending.append(
            _Pending(engine, op, tuple(dsts), tuple(srcs), dict(args or {}), line, call)
        )
        return len(self.pending) - 1

    # -- 1. lifetimes, 2. placement --------------------------------------------------------

    def _lifetimes(self):
        for seq, p in enumerate(self.pending):
            for o in p.dsts + p.srcs:
                d = o.decl
                if d.first < 0:
                    d.first = seq
                d.last = seq

    def _place_hbm(self, internal_base=0):
        addr = 0
        for kind in ("input", "output", "internal"):
            if kind == "internal":
                addr = max(addr, internal_base)
            for d in self.decls:
                if d.space == "hbm" and d.kind == kind and (d.first >= 0 or kind != "internal"):
                    d.base = addr
                    addr += -(-max(d.nbytes, 1) // HBM_ALIGN) * HBM_ALIGN

    def _place_on_chip(self, space):
        core = self.core
        size = core.bytes_of(space)
        unit = ALIGN if space == "sbuf" else core.psum_bank_bytes
        mine = sorted(
            (d for d in self.decls if d.space == space and d.first >= 0 and d.pinned is None),
            key=lambda d: d.held[0],
        )
        # The live tensors (placed and not yet past their last use) never overlap: by address
        # their ends are in order too, so a gap is found by bisection; they leave in the order
        # of their last use.  The bytes of manual placements are live throughout.
        bases, ends, held = [], [], []
        for arena in self.decls:
            if arena.space == space and arena.pinned is not None:
                arena.base, arena.span = 0, 0
                for lo, hi in _merged(arena.pinned):
                    i = bisect_left(bases, lo)
                    bases.insert(i, lo)
                    ends.insert(i, hi)
                    held.insert(i, arena)
        expiry = []  # (last use, placement order, decl)
        ptr = 0
        for n, d in enumerate(mine):
            while expiry and expiry[0][0] < d.held[0]:
                t = heapq.heappop(expiry)[2]
                i = bisect_left(bases, t.base)
                del bases[i], ends[i], held[i]
                work.placement += 1
            need = -(-max(d.partition_bytes, 1) // unit) * unit
            if d.shape[0] > core.partitions:
                raise PlacementError(
                    f"{space} tensor {d.name} {list(d.shape)} ({d.line}) has {d.shape[0]} "
                    f"partitions; the {space.upper()} has {core.partitions}"
                )
            base = self._gap(bases, ends, ptr, need, size)
            if base is None:
                base = self._gap(bases, ends, 0, need, size)
            if base is None:
                used = sum(t.partition_bytes for t in held)
                names = ", ".join(
                    f"{t.name} {list(t.shape)} {t.dtype} ({t.partition_bytes} B, {t.line})"
                    for t in held
                )
                raise PlacementError(
                    f"{space.upper()} overflow: {d.name} {list(d.shape)} {d.dtype} ({d.line}) "
                    f"needs {need} bytes per partition; {used} of {size} are held by the live "
                    f"tensors: {names}"
                )
            d.base, d.span = base, need
            i = bisect_left(bases, base)
            bases.insert(i, base)
            ends.insert(i, base + need)
            held.insert(i, d)
            heapq.heappush(expiry, (d.held[1], n, d))
            work.placement += 1
            ptr = base + need
            if ptr >= size:
                ptr = 0

    def arena(self, space, partitions, nbytes):
        """The tensor of ``space``'s manual placements (made on the first): ``[partitions,
        nbytes]`` uint8 at base 0."""
        for d in self.decls:
            if d.space == space and d.pinned is not None:
                return d
        d = self.tensor(space, (partitions, nbytes), "uint8", name=f"{space}_placed")
        d.pinned = []
        return d

    @staticmethod
    def _gap(bases, ends, start, need, size):
        """The first address >= start where ``need`` bytes fit between the live tensors
        (``bases`` and ``ends`` by address)."""
        addr = start
        i = bisect_right(ends, addr)  # the first that ends after addr
        n = len(bases)
        while i < n and bases[i] < addr + need:
            addr = ends[i]
            i += 1
            work.placement += 1
        return addr if addr + need <= size else None

    # -- 3. semaphores ---------------------------------------------------------------------

    def finish(self, inputs, outputs, *, hbm_internal_base=0, core_id=0, logical_cores=1):
        """The program: ``inputs`` and ``outputs`` are the device-memory tensors (Decls) in
        argument and return order; the kernel's own device tensors start at
        ``hbm_internal_base`` (the second core of a logical core places its own after the
        first's)."""
        with collector_paused():
            return self._finish(inputs, outputs, hbm_internal_base, core_id, logical_cores)

    def _finish(self, inputs, outputs, hbm_internal_base, core_id, logical_cores):
        t0 = time.perf_counter()
        layout = None
        if any(p.engine == loops.TRACED for p in self.pending):
            try:
                self.pending, layout = loops.expand(self.pending)
            except loops.LoopError as e:
                raise PlacementError(str(e)) from None
        self._lifetimes()
        if layout is not None:
            loops.holds(self.pending, layout)
            for d, hold in layout.hold.items():
                d.hold = hold
        self._place_hbm(hbm_internal_base)
        for space in ("sbuf", "psum"):
            self._place_on_chip(space)
        t1 = time.perf_counter()
        work.placement_s += t1 - t0
        streams = {e: [] for e in ENGINES}
        streams.update({dma_queue(q): [] for q in range(self.core.dma_queues)})
        # decl -> ({stream: its latest write per byte}, {stream: its latest access per byte},
        # {stream: its latest access}), while the tensor is used (_Latest)
        tracks = {}
        # on-chip memory -> per byte of a partition, {stream: the latest access} of the tensors
        # that were there (each put in at its last use): what a tensor placed there waits for
        spaces = {"sbuf": _Paint(), "psum": _Paint()}
        implied = {}  # stream -> {stream: count already waited for}
        pending = self.pending
        # dynamic loops (docs/nki/control.md): the loops open, the body's instructions with
        # their operands' boxes and the tracks of tensors released in it, until the outermost
        # loop ends (the waits on the previous iteration are found from them there); tensors
        # whose space a loop holds past their last use, by the position that releases them
        body, kept, open_loops, release = [], {}, 0, {}
        if layout is not None:
            ends = {e: lp for lp, e in layout.end.items()}
            for d in layout.hold:
                release.setdefault(d.held[1], []).append(d)
        for seq, p in enumerate(pending):
            pending[seq] = None  # the instruction replaces it
            dsts = tuple([o.ref() for o in p.dsts])
            srcs = tuple([o.ref() for o in p.srcs])
            engine = p.engine
            stream = streams[engine]
            index = len(stream)
            need = {}
            boxes = []
            for ops, refs, write in ((p.dsts, dsts, True), (p.srcs, srcs, False)):
                for o, r in zip(ops, refs):
                    d = o.decl
                    box = o.extent0
                    if box is None:
                        box = r.extent()
                    elif d.base:  # the same bytes, from the tensor's base on
                        box = (box[0], box[1], box[2] + d.base, box[3] + d.base)
                    boxes.append((d, write, box))
                    if d.first == seq:
                        if d.space in spaces and d.pinned is None:
                            # placed where earlier tensors were: after every access of theirs
                            spaces[d.space].latest_each(d.base, d.base + d.span, need)
                        continue
                    # RAW (a read after the latest write), WAR and WAW (a write after the
                    # latest access), per stream
                    for s, latest in tracks[d][write].items():
                        i = latest.get(box)
                        if i >= 0 and need.get(s, 0) <= i:
                            need[s] = i + 1
            for d, write, box in boxes:
                track = tracks.get(d)
                if track is None:
                    track = tracks[d] = ({}, {}, {})
                track[2][engine] = index
                for kind in (True, False) if write else (True,):
                    latest = track[kind].get(engine)
                    if latest is None:
                        latest = track[kind][engine] = _Latest()
                    latest.put(box, index)
            for d, _, _ in boxes:
                if d.last == seq and d in tracks and d.hold is None:
                    # no later access compares with it; a tensor placed there later waits
                    if d.space in spaces and d.pinned is None:
                        spaces[d.space].merge(d.base, d.base + d.span, tracks[d][2])
                    if open_loops:
                        kept[d] = tracks[d]
                    del tracks[d]
            if not engine.startswith("dma"):
                need.pop(engine, None)
            if layout is not None and p.op in loops.CONTROL_OPS:
                implied[engine] = {}  # a count is of one iteration: waits start afresh
            seen = implied.setdefault(engine, {})
            waits = tuple([(s, c) for s, c in sorted(need.items()) if c > seen.get(s, 0)])
            for s, c in waits:
                seen[s] = c
            ins = Instruction(engine, p.op, dsts, srcs, p.args, waits, p.line, p.call, seq, index)
            stream.append(ins)
            if layout is not None:
                if p.op == "loop_begin" and layout.begin[p.args["loop"]] == seq:
                    open_loops += 1
                elif open_loops and boxes:
                    body.append((ins, boxes))
                for d in release.pop(seq, ()):
                    if d in tracks:
                        if d.space in spaces:
                            spaces[d.space].merge(d.base, d.base + d.span, tracks[d][2])
                        if open_loops:
                            kept[d] = tracks[d]
                        del tracks[d]
                if seq in ends:
                    lp = ends[seq]
                    loops.carried_waits(body, layout.begin[lp], streams, tracks, kept, spaces)
                    open_loops -= 1
                    if not open_loops:
                        body, kept = [], {}
        self.pending = []
        work.semaphores_s += time.perf_counter() - t1
        tensors = {
            d.name: TensorInfo(
                d.name, d.space, d.base, d.shape, d.dtype, d.kind, d.line, d.first, d.last
            )
            for d in self.decls
            if d.base is not None
        }
        return Program(
            self.core,
            streams,
            tensors,
            [d.name for d in inputs],
            [d.name for d in outputs],
            self.kernel,
            logical_cores,
            core_id,
        )
