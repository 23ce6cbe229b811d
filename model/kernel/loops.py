"""Dynamic loops and the engines' registers in a kernel's streams (docs/nki/control.md).

A dynamic loop (``nl.dynamic_range``, ``nl.fori_loop``, ``nl.while_loop``, ``while reg:``)
is traced once: its body is one run of instructions, between a ``loop_begin`` and a
``loop_end`` on every stream that has work in it.  The engines' sequencers run it as the
hardware does: each holds its own copy of the registers the loop reads (a register the kernel
loads from memory is loaded by every sequencer that reads it: one ``register_load`` per
stream, each a read of the tensor that the semaphores order like any other), tests the loop's
condition at ``loop_begin`` (zero iterations: on past its ``loop_end``) and again at
``loop_end`` (another iteration: back to the instruction after ``loop_begin``).  So the trip
count is read at run time, on every stream, from the register the kernel wrote.

Three parts:

* :func:`expand`: the builder's first step.  The tracer gives the register instructions and
  the loops' bounds to no engine (``engine`` :data:`TRACED`); each register is placed on the
  streams that read it (a loop's registers on every stream of its body), each loop on the
  streams of its body.  :class:`Layout` tells the builder where each loop begins and ends and
  how long a tensor used in a loop keeps its space.
* :class:`Runner`: one stream's sequencer at run time: its position, its executed count (its
  semaphore), the loops it is in and their iterations, its registers.  A wait ``(stream,
  count)`` names an instruction of the static stream; :meth:`Runner.target` turns it into the
  count that stream must reach in this iteration (docs/nki/control.md, "Semaphores").
* :func:`run`, the golden run of streams with loops (``golden.run`` hands them here), and
  :func:`trip_counts`, the loops' trip counts for a timing run without the golden's values
  (``--timing-only``): the golden run of only the instructions the registers depend on.
"""

from __future__ import annotations

import dataclasses
import math
import random as _random
import warnings

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.stream import ENGINES
from ncrtl.model.kernel.values import KernelError, where

__all__ = [
    "TRACED",
    "CONTROL_OPS",
    "REGISTER_OPS",
    "SEQUENCER_OPS",
    "REGISTERS_PER_ENGINE",
    "MAX_ITERATIONS",
    "SEQUENCER_CYCLES",
    "LoopError",
    "Layout",
    "expand",
    "holds",
    "carried_waits",
    "dynamic",
    "Flow",
    "Runner",
    "runners",
    "timing_runners",
    "deadlock",
    "run",
    "trip_counts",
    "wrap32",
]

#: The engine the tracer gives a register instruction or a loop's bound: :func:`expand` places
#: it on the streams that need it.
TRACED = "seq"
#: The loop instructions of a stream (sequencer branches, no data path).
CONTROL_OPS = ("loop_begin", "loop_end")
#: The register instructions (a sequencer's own; a load or store reads or writes one element).
REGISTER_OPS = ("register_move", "register_load", "register_store")
SEQUENCER_OPS = CONTROL_OPS + REGISTER_OPS
#: Physical registers of one engine sequencer (the NKI reference: 64 x 32-bit on v2-v4).
REGISTERS_PER_ENGINE = 64
#: Iterations one entry of a loop may run in a golden run before it is stopped as a register
#: holding a count the kernel did not mean (the hardware would run on).
MAX_ITERATIONS = 1 << 16
#: Cycles of its engine's clock a sequencer instruction occupies the engine: a register move
#: or a loop's test and branch (the reference gives no figure; docs/nki/control.md).
SEQUENCER_CYCLES = 4


class LoopError(ValueError):
    """A rule of the registers or loops broken when the streams are built (more registers on
    an engine than it has)."""


def wrap32(v):
    """``v`` as a 32-bit two's complement register value."""
    v = int(v) & 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _order(stream):
    if stream.startswith("dma"):
        return (1, int(stream[3:]))
    return (0, ENGINES.index(stream) if stream in ENGINES else len(ENGINES))


def _regs_of(p):
    """The registers entry ``p`` (a traced entry) reads, as names."""
    a = p.args
    if p.op == "loop_open" or p.op == "loop_close":
        return [
            v for k in ("start", "stop", "init", "next", "var") if isinstance(v := a.get(k), str)
        ]
    if p.op == "register_move":
        return [a["src"]] if isinstance(a.get("src"), str) else []
    if p.op == "register_store":
        return [a["src"]]
    return list(a.get("regs", ()))


# -- the builder's step: registers and loops onto streams -----------------------------------------


@dataclasses.dataclass
class Layout:
    """Where the loops of the expanded entries are: ``begin[loop]`` the position of its first
    ``loop_begin``, ``end[loop]`` of its last ``loop_end``; ``hold[decl] = (from, to)`` the
    positions between which a tensor used in a loop keeps its space when that is longer than
    its first to last use (it is used before or after a loop it is used in: its value lives
    through every iteration)."""

    begin: dict
    end: dict
    hold: dict


def expand(pending):
    """The traced entries ``pending`` (the builder's, in program order) with every register
    instruction and loop bound placed on streams; returns ``(entries, layout)``.

    Raises :class:`LoopError` where an engine would hold more live registers than
    :data:`REGISTERS_PER_ENGINE`."""
    stack, loops, nests = [], {}, []
    need = {}  # register -> streams that hold it

    def holders(r):
        s = need.get(r)
        if s is None:
            s = need[r] = set()
        return s

    for p in pending:
        nests.append(tuple(stack))
        if p.engine != TRACED:
            for lp in stack:
                loops[lp]["streams"].add(p.engine)
            for r in p.args.get("regs", ()):
                holders(r).add(p.engine)
            continue
        for r in _regs_of(p):
            holders(r)
        if p.op == "loop_open":
            loops[p.args["loop"]] = {"open": p, "streams": set(), "regs": set(_regs_of(p))}
            stack.append(p.args["loop"])
        elif p.op == "loop_close":
            lp = stack.pop()
            loops[lp]["regs"].update(_regs_of(p))
            nests[-1] = tuple(stack)
        elif p.op in ("register_move", "register_load"):
            holders(p.args["dst"])

    def store_stream(r):
        return min(need[r], key=_order)

    # every stream of a loop's body holds the loop's registers; a register moved into one a
    # stream holds is held there too; a register instruction in a loop puts its streams in it
    def propagate():
        while True:
            before = sum(map(len, need.values())) + sum(len(lp["streams"]) for lp in loops.values())
            for lp in loops.values():
                for r in lp["regs"]:
                    need[r] |= lp["streams"]
            for p, nest in zip(pending, nests):
                if p.engine != TRACED:
                    continue
                if p.op == "register_move" and isinstance(p.args.get("src"), str):
                    need[p.args["src"]] |= need[p.args["dst"]]
                if p.op in ("register_move", "register_load"):
                    streams = need[p.args["dst"]]
                elif p.op == "register_store":
                    streams = {store_stream(p.args["src"])} if need[p.args["src"]] else set()
                elif p.op == "loop_open":
                    streams = loops[p.args["loop"]]["streams"]
                else:
                    continue
                for lp in nest:
                    loops[lp]["streams"] |= streams
            after = sum(map(len, need.values())) + sum(len(lp["streams"]) for lp in loops.values())
            if after == before:
                return

    # every stream of a loop's body holds the loop's registers; a register moved into one a
    # stream holds is held there too; a register instruction in a loop puts its streams in it.
    # What nothing places goes to GpSimd (a loop with no work, a register nothing reads: its
    # instructions still run, and are checked), the innermost loop or register first.
    propagate()
    while True:
        empty = [lp for lp in reversed(loops.values()) if not lp["streams"]]
        empty_regs = [r for r, s in need.items() if not s]
        if empty:
            empty[0]["streams"].add("gpsimd")
        elif empty_regs:
            need[empty_regs[0]].add("gpsimd")
        else:
            break
        propagate()

    out = []
    for p, nest in zip(pending, nests):
        if p.engine != TRACED:
            out.append(p)
            continue
        if p.op == "loop_open":
            streams = loops[p.args["loop"]]["streams"]
            out += [
                dataclasses.replace(p, engine=s, op="loop_begin")
                for s in sorted(streams, key=_order)
            ]
        elif p.op == "loop_close":
            lp = loops[p.args["loop"]]
            args = {**lp["open"].args, **p.args}
            out += [
                dataclasses.replace(p, engine=s, op="loop_end", args=args)
                for s in sorted(lp["streams"], key=_order)
            ]
        elif p.op == "register_store":
            out.append(dataclasses.replace(p, engine=store_stream(p.args["src"])))
        else:
            out += [
                dataclasses.replace(p, engine=s) for s in sorted(need[p.args["dst"]], key=_order)
            ]
    layout = _layout(out)
    _check_registers(out, layout, need)
    return out, layout


def _layout(entries):
    begin, end = {}, {}
    for seq, p in enumerate(entries):
        if p.op == "loop_begin":
            begin.setdefault(p.args["loop"], seq)
        elif p.op == "loop_end":
            end[p.args["loop"]] = seq
    return Layout(begin, end, {})


def holds(entries, layout):
    """Fill ``layout.hold``: the tensors used in a loop and before or after it keep their
    space through the whole loop (its value lives through every iteration).  Each tensor's
    ``first`` and ``last`` use are known."""
    begin, end = layout.begin, layout.end
    touched = {}  # tensor -> the loops it is used in
    stack = []
    for seq, p in enumerate(entries):
        if p.op == "loop_begin" and begin[p.args["loop"]] == seq:
            stack.append(p.args["loop"])
        elif p.op == "loop_end" and end[p.args["loop"]] == seq:
            stack.pop()
        elif stack:
            for o in (*p.dsts, *p.srcs):
                got = touched.get(o.decl)
                if got is None:
                    touched[o.decl] = set(stack)
                else:
                    got.update(stack)
    for d, lps in touched.items():
        lo, hi = d.first, d.last
        moved = True
        while moved:
            moved = False
            for lp in lps:
                if (lo < begin[lp] or hi > end[lp]) and (lo > begin[lp] or hi < end[lp]):
                    lo, hi, moved = min(lo, begin[lp]), max(hi, end[lp]), True
        if (lo, hi) != (d.first, d.last):
            layout.hold[d] = (lo, hi)


def carried_waits(body, begin, streams, tracks, kept, spaces):
    """At the end of a loop (the builder's last ``loop_end`` of it), each instruction of its
    body gets the waits on the previous iteration (``carried``): on the latest access, per
    stream, to what it reads or writes by an instruction at or after it in the body (the
    builder's ``tracks`` of the live tensors, ``kept`` of those released in the loop), and,
    where it uses a tensor first, on the latest access to the tensors placed in its space
    (``spaces``).  ``body``: ``(instruction, operand boxes)`` in program order since the
    outermost loop began; this loop's are those after position ``begin``."""
    import bisect

    start = bisect.bisect_right(body, begin, key=lambda e: e[0].seq)
    for ins, boxes in body[start:]:
        found = set(ins.carried)
        own = None if ins.engine.startswith("dma") else ins.engine  # in order: no wait
        for d, write, box in boxes:
            track = tracks.get(d) or kept.get(d)
            if track is not None:
                for s, latest in track[write].items():
                    i = latest.get(box)
                    if i >= 0 and s != own and streams[s][i].seq >= ins.seq:
                        found.add((s, i + 1))
            if d.first == ins.seq and d.space in spaces:
                out = {}
                spaces[d.space].latest_each(d.base, d.base + d.span, out)
                for s, c in out.items():
                    if s != own and streams[s][c - 1].seq >= ins.seq:
                        found.add((s, c))
        if found:
            ins.carried = tuple(sorted(found))


def _check_registers(entries, layout, need):
    """Each stream holds at most :data:`REGISTERS_PER_ENGINE` registers at once: a register is
    live from its first instruction to its last (through the whole of a loop it is used in)."""
    span = {}  # register -> [first position, last position, line of its first instruction]
    stack = []
    for seq, p in enumerate(entries):
        if p.op == "loop_begin" and layout.begin[p.args["loop"]] == seq:
            stack.append(p.args["loop"])
        names = _regs_of(_as_traced(p))
        if p.op in ("register_move", "register_load"):
            names.append(p.args["dst"])
        for r in names:
            s = span.get(r)
            if s is None:
                s = span[r] = [seq, seq, p.line]
            s[1] = seq
            for lp in stack:
                s[0], s[1] = min(s[0], layout.begin[lp]), max(s[1], layout.end[lp])
        if p.op == "loop_end" and layout.end[p.args["loop"]] == seq:
            stack.pop()
    for stream in {s for holders in need.values() for s in holders}:
        events = []
        for r, (lo, hi, line) in span.items():
            if stream in need.get(r, ()):
                events += [(lo, 1, r, line), (hi + 1, -1, r, line)]
        live = 0
        for _, delta, r, line in sorted(events, key=lambda e: (e[0], e[1])):
            live += delta
            if live > REGISTERS_PER_ENGINE:
                raise LoopError(
                    f"{line}: register {r}: the {stream} sequencer would hold {live} registers "
                    f"at once; an engine sequencer has {REGISTERS_PER_ENGINE} (NeuronCore-v2 to "
                    f"v4; a register lives from its first instruction to its last use, through "
                    f"every loop it is used in)"
                )


def _as_traced(p):
    """An expanded entry read as the tracer's (a loop's begin and end as its open and close)."""
    if p.op == "loop_begin":
        return dataclasses.replace(p, op="loop_open")
    if p.op == "loop_end":
        return dataclasses.replace(p, op="loop_close")
    return p


# -- run time: a stream's sequencer ---------------------------------------------------------------


def dynamic(program):
    """Whether ``program`` (or any of a logical core's programs) has sequencer instructions
    (registers, loops): its streams then run through :class:`Runner`."""
    programs = program if isinstance(program, (list, tuple)) else (program,)
    for p in programs:
        flag = getattr(p, "_dynamic", None)
        if flag is None:
            flag = any(i.op in SEQUENCER_OPS for s in p.streams.values() for i in s)
            try:
                p._dynamic = flag
            except AttributeError:
                pass
        if flag:
            return True
    return False


class Flow:
    """The loops of one static stream: per instruction its loops (``nest``, outermost first;
    a ``loop_end`` is in its loop, a ``loop_begin`` outside it) and the first instruction of
    its segment (``seg``: the run of instructions between two loop instructions, which a
    stream enters as a whole), per loop the instruction after its ``loop_begin`` (``body``)
    and after its ``loop_end`` (``exit``), and the matching ``loop_begin`` / ``loop_end``."""

    __slots__ = ("nest", "seg", "match", "body", "exit")

    def __init__(self, instrs):
        n = len(instrs)
        self.nest, self.seg = [()] * n, [0] * n
        self.match, self.body, self.exit = {}, {}, {}
        stack, loops, seg = [], (), 0
        for i, ins in enumerate(instrs):
            if ins.op == "loop_begin":
                self.nest[i], self.seg[i] = loops, seg
                stack.append(i)
                loops = loops + (ins.args["loop"],)
                seg = i + 1
            elif ins.op == "loop_end":
                self.nest[i], self.seg[i] = loops, seg
                b = stack.pop()
                lp = ins.args["loop"]
                self.match[i], self.match[b] = b, i
                self.body[lp], self.exit[lp] = b + 1, i + 1
                loops = loops[:-1]
                seg = i + 1
            else:
                self.nest[i], self.seg[i] = loops, seg


class Runner:
    """One stream's sequencer when the streams run: ``pos`` its next static instruction,
    ``count`` the instructions it has executed (its semaphore counts them as they complete),
    ``stack`` its loops ``[loop, iteration, loop_begin index]``, ``entries`` the count at
    which it entered each segment in each iteration, ``regs`` its registers.

    ``trips`` maps ``(loop, outer iterations)`` to the loop's trip count: a golden run
    (``values`` True) fills it from the registers; a timing run reads it."""

    __slots__ = (
        "name",
        "instrs",
        "flow",
        "pos",
        "count",
        "stack",
        "entries",
        "watch",
        "regs",
        "trips",
        "values",
        "peers",
        "defer",
    )

    def __init__(self, name, instrs, trips, values, regs=None):
        self.name, self.instrs = name, instrs
        self.flow = Flow(instrs)
        self.pos = self.count = 0
        self.stack = []
        self.entries = {(0, ()): 0}
        self.watch = {}
        self.regs = {} if regs is None else regs
        self.trips, self.values = trips, values
        self.peers = {}  # stream name -> Runner of the same core
        self.defer = None  # how a watcher's callback is run (the timing run: as an event)

    def current(self):
        return self.instrs[self.pos] if self.pos < len(self.instrs) else None

    def _iters(self, depth):
        return tuple([it for _, it, _ in self.stack[:depth]])

    def _enter(self, start):
        key = (start, self._iters(len(self.stack)))
        self.entries[key] = self.count
        for cb in self.watch.pop(key, ()):
            cb() if self.defer is None else self.defer(cb)

    # -- waits ------------------------------------------------------------------------------

    def target(self, ins, stream, k, carried=False):
        """``(count, None)``: the count ``stream`` must reach for this stream's next
        instruction ``ins`` to pass its wait ``(stream, k)`` (``carried``: on the previous
        iteration); ``(None, key)`` where that stream has not reached the segment that
        decides it (``key``: the segment, to watch)."""
        other = self.peers[stream]
        fo, t = other.flow, k - 1
        tn, wn = fo.nest[t], self.flow.nest[self.pos]
        c = 0
        while c < len(tn) and c < len(wn) and tn[c] == wn[c]:
            c += 1
        ctx = list(self._iters(c))
        if carried:
            if c == 0:  # not in a common loop: an ordinary wait
                carried = False
            elif ctx[-1] == 0:  # the first iteration: the loop's start on that stream
                key = (fo.body[wn[c - 1]], tuple(ctx))
                got = other.entries.get(key)
                return (None, key) if got is None else (got, None)
            else:
                ctx[-1] -= 1
        if len(tn) == c:
            key = (fo.seg[t], tuple(ctx))
            extra = t - fo.seg[t] + 1
        else:  # inside a loop the waiter is not in: that loop's end in this iteration
            key = (fo.exit[tn[c]], tuple(ctx))
            extra = 0
        got = other.entries.get(key)
        return (None, key) if got is None else (got + extra, None)

    def resolve(self, ins, again=None):
        """The waits of ``ins`` (this stream's next instruction) as ``[(stream, count)]`` in
        executed counts, or None where one is not yet known (``again`` is then called once the
        stream it waits on gets there)."""
        out = []
        for group, carried in ((ins.waits, False), (ins.carried, True)):
            for s, k in group:
                count, key = self.target(ins, s, k, carried)
                if count is None:
                    if again is not None:
                        self.peers[s].watch.setdefault(key, []).append(again)
                    return None
                out.append((s, count))
        return out

    # -- execution --------------------------------------------------------------------------

    def _value(self, v, ins):
        if not isinstance(v, str):
            return wrap32(v)
        got = self.regs.get(v)
        if got is None:
            raise KernelError(
                f"{where(ins)}reads register {v} on the {self.name} sequencer, which nothing "
                f"wrote (nisa.register_alloc() without a value, then no register_move or "
                f"register_load)"
            )
        return got

    def _decide(self, ins, first):
        """Whether the loop of ``ins`` runs an(other) iteration: from the registers (a golden
        run) or the trip counts (a timing run)."""
        a = ins.args
        if not self.values:
            outer = self._iters(len(self.stack) - (0 if first else 1))
            n = self.trips.get((a["loop"], outer))
            if n is None:
                raise KernelError(
                    f"{where(ins)}no trip count for this loop at outer iterations "
                    f"{list(outer)}: the golden run the timing follows never got there"
                )
            return n > 0 if first else self.stack[-1][1] + 1 < n
        r = a["var"]
        if a["kind"] == "range":
            if first:
                self.regs[r] = self._value(a["start"], ins)
            else:
                self.regs[r] = wrap32(self.regs[r] + a["step"])
            return self.regs[r] < self._value(a["stop"], ins)
        self.regs[r] = self._value(a["init"] if first else a["next"], ins)
        return self.regs[r] != 0

    def _trip(self, ins, n):
        """Record (a golden run) the trip count of the loop of ``ins`` just left."""
        if not self.values:
            return
        key = (ins.args["loop"], self._iters(len(self.stack)))
        got = self.trips.setdefault(key, n)
        if got != n:
            raise KernelError(
                f"{where(ins)}the {self.name} sequencer ran this loop {n} times where another "
                f"stream ran it {got} times: their registers differ"
            )

    def step(self, ins):
        """Execute ``ins`` (this stream's next instruction; its operation, if any, already
        applied): the loop instructions branch.  Returns the next position."""
        self.count += 1
        i = self.pos
        if ins.op == "loop_begin":
            if self._decide(ins, True):
                self.stack.append([ins.args["loop"], 0, i])
                self.pos = i + 1
            else:
                self._trip(ins, 0)
                self.pos = self.flow.match[i] + 1
            self._enter(self.pos)
        elif ins.op == "loop_end":
            top = self.stack[-1]
            if self._decide(ins, False):
                top[1] += 1
                if self.values and top[1] >= MAX_ITERATIONS:
                    raise KernelError(
                        f"{where(ins)}this loop ran {MAX_ITERATIONS:,} iterations (register "
                        f"{ins.args['var']} = {self.regs.get(ins.args['var'])}): stopped, as a "
                        f"count the kernel did not mean (docs/nki/control.md)"
                    )
                self.pos = top[2] + 1
            else:
                self.stack.pop()
                self._trip(ins, top[1] + 1)
                self.pos = i + 1
            self._enter(self.pos)
        else:
            self.pos = i + 1
        return self.pos

    def where_now(self):
        """Its loops and iterations, for a message."""
        return ", ".join(f"loop {lp} iteration {it}" for lp, it, _ in self.stack)


def runners(program, trips=None, values=True, states=None):
    """``{(core, stream): Runner}`` of ``program`` (a program or a logical core's programs);
    ``trips``: per core the trip-count table (filled by a golden run, read by a timing run);
    ``states``: per core the golden's state whose ``registers`` the runners hold."""
    programs = list(program) if isinstance(program, (list, tuple)) else [program]
    out = {}
    for c, p in enumerate(programs):
        table = trips[c] if trips is not None else {}
        regs = None
        if states is not None:
            regs = states[c].registers = getattr(states[c], "registers", None) or {}
        mine = {}
        for n, s in p.streams.items():
            r = Runner(n, s, table, values, None if regs is None else regs.setdefault(n, {}))
            mine[n] = out[(c, n)] = r
        for r in mine.values():
            r.peers = mine
    return out


def timing_runners(programs, defer=None):
    """The runners of a timing run of ``programs``: each loop follows the trip counts of the
    golden run (``program.trips``); a program with loops and none is refused, naming its first
    loop.  ``defer(callback)``: how a stream waiting for another to reach an iteration is woken
    (an event, not a call inside the other's step)."""
    tables = []
    for p in programs:
        if p.trips is None:
            first = next((i for s in p.streams.values() for i in s if i.op in CONTROL_OPS), None)
            if first is not None:
                raise KernelError(
                    f"{where(first)}the trip count of this dynamic loop is read from a register "
                    f"when the streams run: the timing run follows the golden run's (run the "
                    f"golden first; ncrtl run --timing-only computes the registers from the "
                    f"instructions they depend on)"
                )
        tables.append(p.trips or {})
    rs = runners(programs, tables, values=False)
    for r in rs.values():
        r.defer = defer
    return rs


def deadlock(programs, rs):
    """The message for streams with loops that cannot go on (``rs``: their runners)."""
    return _deadlock(programs, rs)


# -- the golden run ---------------------------------------------------------------------------------


def run(programs, states, *, order="program", seed=0, only=None):
    """The golden run of ``programs`` (a logical core's, one per core) with sequencer
    instructions, on ``states``: any stream whose next instruction's waits are met runs it
    (``order`` picks among them as :func:`ncrtl.model.kernel.golden.run` does); the loops
    branch on their registers.  Sets each program's ``trips``.  ``only``: the ids of the
    instructions whose operations run (the others pass without effect: :func:`trip_counts`)."""
    from ncrtl.model.kernel import golden
    from ncrtl.model.kernel.collective import GROUP_OPS, members, rendezvous

    trips = [{} for _ in programs]
    rs = runners(programs, trips, True, states)
    rng = _random.Random(seed)
    partners = {}
    for c, p in enumerate(programs):
        for s in p.streams.values():
            for i in s:
                if i.op in GROUP_OPS:
                    partners[(c, *rendezvous(i))] = i
    turns = {}  # (core, rendezvous key) -> times run

    def met(r, ins):
        waits = r.resolve(ins)
        return waits is not None and all(r.peers[s].count >= k for s, k in waits)

    def ready(c, r):
        ins = r.current()
        if ins is None or not met(r, ins):
            return None
        if ins.op in GROUP_OPS:
            key = rendezvous(ins)
            for o in members(ins, c):
                other = partners.get((o, *key))
                ro = None if other is None else rs[(o, other.engine)]
                if (
                    ro is None
                    or ro.current() is not other
                    or not met(ro, other)
                    or turns.get((o, key), 0) != turns.get((c, key), 0)
                ):
                    return None
        return ins

    live = [cn for cn, r in rs.items() if r.instrs]
    while live:
        cands = []
        for cn in live:
            r = rs[cn]
            ins = ready(cn[0], r)
            if ins is not None:
                cands.append((cn[0], r, ins))
        if not cands:
            raise KernelError(_deadlock(programs, rs))
        if order == "program":
            c, r, ins = min(cands, key=lambda x: (x[2].seq, x[0]))
        elif order == "reverse":
            c, r, ins = max(cands, key=lambda x: (x[2].seq, x[0]))
        else:
            c, r, ins = rng.choice(cands)
        if ins.op in GROUP_OPS:
            key = rendezvous(ins)
            sides = {c: ins, **{o: partners[(o, *key)] for o in members(ins, c)}}
            if only is None or any(id(i) in only for i in sides.values()):
                if ins.op == "sendrecv":
                    a, b = sorted(sides)  # the two cores of one logical core (of one rank)
                    golden._sendrecv((states[a], states[b]), (sides[a], sides[b]))
                else:
                    golden.group_execute(states, sides)
            for o, i in sides.items():
                turns[(o, key)] = turns.get((o, key), 0) + 1
                rs[(o, i.engine)].step(i)
        else:
            if ins.op not in CONTROL_OPS and (only is None or id(ins) in only):
                golden.execute(states[c], ins)
            r.step(ins)
        live = [cn for cn in live if rs[cn].current() is not None]
    for p, t in zip(programs, trips):
        p.trips = t
    return trips


def _deadlock(programs, rs):
    lines = ["the streams cannot finish: every next instruction waits on a semaphore"]
    for (c, n), r in rs.items():
        ins = r.current()
        if ins is None:
            continue
        core = f"core {c}: " if len(programs) > 1 else ""
        unmet = []
        for group, carried in ((ins.waits, False), (ins.carried, True)):
            for s, k in group:
                count, _ = r.target(ins, s, k, carried)
                if count is None:
                    unmet.append(f"{s} to reach {s}[{k - 1}] of this iteration (not there yet)")
                elif r.peers[s].count < count:
                    unmet.append(f"{s} to reach {count} (at {r.peers[s].count})")
        if not unmet:
            unmet = ["its sides on the other cores"]
        loops = f" in {r.where_now()}" if r.stack else ""
        lines.append(f"  {core}{ins.label} ({ins.line}){loops} waits for {', '.join(unmet)}")
    return "\n".join(lines)


# -- trip counts without the golden's values ---------------------------------------------------------


def _key(c, ref):
    return ("hbm", ref.tensor, ref.base) if ref.space == "hbm" else (c, ref.space, ref.tensor)


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _slice(programs):
    """The ids of the instructions the registers depend on: the register and loop instructions,
    the operations several cores run together, and every instruction that writes bytes an
    included one reads (through the loops: until nothing more is included)."""
    from ncrtl.model.kernel.collective import GROUP_OPS

    needed = {}  # tensor key -> boxes read by included instructions (a bounding box past 8)
    included = set()

    def box_of(ins, ref):
        if "indirect" in ins.args or ins.args.get("regs"):  # a run-time offset: any of it
            row = math.prod(ref.shape[1:]) * dtype_of(ref.dtype).itemsize
            return (0, ref.shape[0], ref.base, ref.base + row)
        return ref.extent()

    def add(c, ins, ref):
        k = _key(c, ref)
        box = box_of(ins, ref)
        boxes = needed.setdefault(k, [])
        boxes.append(box)
        if len(boxes) > 8:
            needed[k] = [
                (
                    min(b[0] for b in boxes),
                    max(b[1] for b in boxes),
                    min(b[2] for b in boxes),
                    max(b[3] for b in boxes),
                )
            ]

    def wanted(c, ins):
        if ins.op in SEQUENCER_OPS or ins.op in GROUP_OPS:
            return True
        for ref in ins.dsts:
            boxes = needed.get(_key(c, ref))
            if boxes:
                box = box_of(ins, ref)
                if any(_overlap(box, b) for b in boxes):
                    return True
        return False

    order = [
        (ins.seq, c, ins) for c, p in enumerate(programs) for s in p.streams.values() for ins in s
    ]
    order.sort(key=lambda x: (x[0], x[1]), reverse=True)
    grown = True
    while grown:
        grown = False
        for _, c, ins in order:
            if id(ins) in included or not wanted(c, ins):
                continue
            included.add(id(ins))
            grown = True
            for ref in ins.srcs:
                add(c, ins, ref)
    return included


def trip_counts(program, inputs):
    """The trip counts of ``program``'s loops (set as each program's ``trips``) without the
    golden run of the whole kernel: the golden run of the instructions its registers depend on
    (:func:`_slice`) on ``inputs``; the others pass without effect."""
    from ncrtl.model.kernel.golden import core_states

    programs = list(program) if isinstance(program, (list, tuple)) else [program]
    states = core_states(programs, inputs, uninitialized="warn")
    only = _slice(programs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run(programs, states, only=only)
