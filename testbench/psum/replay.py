"""Replay of what the PSUM RTL did, cycle by cycle, through the golden (``ncrtl.model.psum``).

The RTL's behaviour is observable at its ports: instruction, data, request and response
handshakes, seed loads, ``o_grant``, the error pulses and ``o_done``.  :class:`Replay` takes one
:class:`Sample` of them per clock cycle and, in the cycle's order of events:

1. loads the seeds taken in the cycle into the golden generators (a seed taken with an SR beat
   is loaded first, as the RTL does);
2. issues into the golden :class:`~ncrtl.model.psum.Psum` the instructions taken in earlier cycles, as
   soon as the previous write has all its beats (the golden's group state only changes at issue,
   so the rule check is the one the RTL made when it took them);
3. works out what each requester presents (the TE: a data beat offered for a legal current
   write; an engine: a request with a good bank and row, and for a read a free response slot,
   counted from the handshakes as the RTL's credit counter counts them), runs
   :class:`ncrtl.model.psum.Arbiter` on it and compares its grants with ``o_grant``;
4. applies the accesses granted in the cycle (different banks, so in any order): the TE beat
   through :meth:`Psum.beat` (a drained beat of a rejected write too), engine writes and reads
   through :meth:`Psum.engine_write` / :meth:`Psum.engine_read`, queueing the expected
   responses, error pulses and group-complete events with the cycle they are due.

:meth:`Replay.finish` issues what is left, compares the event lists (error codes and cycles,
group-complete banks and cycles, engine errors) and the responses, bit for bit, with the golden's,
and returns the scoreboards.  The same replay serves the cocotb testbench and the Amaranth
simulator tests.
"""

import collections
from dataclasses import dataclass, field

import numpy as np

from ncrtl.model.psum import Arbiter, Psum
from ncrtl.model.psum.isa import Geometry
from ncrtl.testbench.scoreboard import Scoreboard

__all__ = ["Sample", "Replay", "Latencies", "ENGINES"]

ENGINES = ("ve", "se")


@dataclass(frozen=True)
class Latencies:
    """The RTL's documented latencies (``ncrtl.hdl.psum.Psum`` attributes) the replay times events by."""

    done: int = 4  # last beat granted -> o_done
    error: int = 1  # instruction / request taken -> error pulse
    resp_depth: int = 4  # read responses in flight per engine port

    @classmethod
    def of(cls, psum):
        return cls(psum.done_latency, psum.error_latency, psum.resp_depth)


@dataclass
class Sample:
    """The port activity of one clock cycle (the values the flops sample at its closing edge).

    ``req_valid`` / ``req_ready`` / ``resp`` / ``eng_error`` are per engine (``"ve"``, ``"se"``);
    ``resp`` is True when a response is taken (valid and ready); error fields hold the code of a
    pulse or None.
    """

    instr: bool = False  # instruction handshake
    data_valid: bool = False
    data: bool = False  # data handshake
    req_valid: dict = field(default_factory=dict)
    req_ready: dict = field(default_factory=dict)
    resp: dict = field(default_factory=dict)
    seed: bool = False  # seed handshake
    grant: int = 0  # o_grant
    error: int = None  # error.code when error.valid
    eng_error: dict = field(default_factory=dict)
    done: int = None  # o_done_bank when o_done


def _words_to_lanes(words, partitions):
    if not words:
        return np.zeros((0, partitions), dtype=np.uint32)
    raw = b"".join(int(w).to_bytes(4 * partitions, "little") for w in words)
    return np.frombuffer(raw, dtype="<u4").reshape(len(words), partitions).astype(np.uint32)


def _events(values):
    """Event list -> int64 array (cycle << 8 | code), for a scoreboard."""
    return np.array([(c << 8) | (int(v) & 0xFF) for c, v in values], dtype=np.int64)


class Replay:
    """Golden replay and scoreboards of one PSUM run (see the module docstring).

    Parameters
    ----------
    geometry : Geometry
    latencies : Latencies

    Feed it with :meth:`add_writes`, :meth:`add_requests`, :meth:`add_seeds` (the words each
    stream will carry, in order, before or while they are sent) and one :meth:`step` per cycle.
    """

    def __init__(self, geometry=Geometry(), latencies=Latencies()):
        self.g = geometry
        self.lat = latencies
        self.golden = Psum(geometry)
        self.arbiter = Arbiter()
        self.cycle = 0
        P = geometry.partitions
        self.instrs = []  # Write, in stream order
        self.beats = np.zeros((0, P), dtype=np.uint32)
        self._beat_chunks = []
        self.reqs = {e: [] for e in ENGINES}
        self.tags = {e: [] for e in ENGINES}
        self.seeds = []
        self._ni = self._nb = self._ns = 0
        self._nr = {e: 0 for e in ENGINES}
        self._taken = collections.deque()  # (take cycle, Write) not yet issued
        self._cur_legal = False
        self._cur_bank = 0
        self._in_flight = {e: 0 for e in ENGINES}
        self.want_resp = {e: [] for e in ENGINES}  # (tag, uint32[P])
        self.got_resp_count = {e: 0 for e in ENGINES}
        self.want_errors, self.got_errors = [], []
        self.want_done, self.got_done = [], []
        self.want_eng_errors = {e: [] for e in ENGINES}
        self.got_eng_errors = {e: [] for e in ENGINES}
        self.grants = Scoreboard("psum.grant", "o_grant", bits=3)
        self.flow = Scoreboard("psum.handshakes", "ready", bits=1)
        self._grant_got, self._grant_want = [], []
        self._flow_got, self._flow_want = [], []
        self.te_beats = []  # cycle of every TE data handshake
        self.grant_cycles = {p: [] for p in ("te", "ve", "se")}

    # -- stimulus bookkeeping -------------------------------------------------------------------

    def add_writes(self, writes):
        for w, beats in writes:
            self.instrs.append(w)
            if w.n:
                self._beat_chunks.append(np.asarray(beats, dtype=np.uint32).reshape(w.n, -1))

    def add_requests(self, engine, reqs, tag="read"):
        self.reqs[engine] += list(reqs)
        self.tags[engine] += [tag] * len(reqs)

    def add_seeds(self, seeds):
        self.seeds += list(seeds)

    def _beat(self, k):
        if self._beat_chunks:
            self.beats = np.concatenate([self.beats, *self._beat_chunks])
            self._beat_chunks = []
        return self.beats[k]

    # -- one cycle ----------------------------------------------------------------------------

    def step(self, s):
        c = self.cycle
        g, gold = self.g, self.golden
        # 1. seeds
        if s.seed:
            p, words = self.seeds[self._ns]
            self._ns += 1
            gold.set_rand_state(p, words)
        # 2. issue what was taken before this cycle
        self._issue(before=c)
        # 3. what each requester presents, the arbiter
        te = self._cur_bank if (s.data_valid and gold.pending and self._cur_legal) else None
        banks = [te]
        reqs = {}
        for e in ENGINES:
            r = self.reqs[e][self._nr[e]] if s.req_valid.get(e) else None
            reqs[e] = r
            can = r is not None and (r.we or self._in_flight[e] < self.lat.resp_depth)
            banks.append(r.bank if (can and r.ok(g)) else None)
        want = self.arbiter.step(banks)
        self._grant_got.append(s.grant)
        self._grant_want.append(sum(int(b) << i for i, b in enumerate(want)))
        for i, p in enumerate(("te", "ve", "se")):
            if s.grant >> i & 1:
                self.grant_cycles[p].append(c)
        # 4a. the TE beat
        if gold.pending:
            want_data = bool(s.grant & 1) if self._cur_legal else s.data_valid
        else:
            want_data = False
        self._flow_got.append(int(s.data))
        self._flow_want.append(int(want_data))
        if s.data and gold.pending:
            data = self._beat(self._nb)
            self._nb += 1
            self.te_beats.append(c)
            done = gold.beat(data)
            if done is not None:
                self.want_done.append((c + self.lat.done, done))
        elif s.data:
            self._nb += 1  # a beat the RTL should not have taken (flow mismatch above)
        # 4b. the engine requests
        for i, e in enumerate(ENGINES, start=1):
            r = reqs[e]
            if r is None:
                continue
            ok = r.ok(g)
            can = r.we or self._in_flight[e] < self.lat.resp_depth
            want_ready = bool(want[i]) if ok else bool(can)
            self._flow_got.append(int(bool(s.req_ready.get(e))))
            self._flow_want.append(int(want_ready))
            if not s.req_ready.get(e):
                continue
            tag = self.tags[e][self._nr[e]]
            self._nr[e] += 1
            if not ok:
                code = 1 if r.bank >= g.banks else 2
                self.want_eng_errors[e].append((c + self.lat.error, code))
                if not r.we:
                    self.want_resp[e].append((tag, np.zeros(g.partitions, dtype=np.uint32)))
            elif r.we:
                data = r.data if r.data is not None else np.zeros(g.partitions, dtype=np.uint32)
                gold.engine_write(r.bank, r.row, np.asarray(data, dtype=np.uint32), r.mask)
            else:
                self.want_resp[e].append((tag, gold.engine_read(r.bank, r.row)))
            if not r.we:
                self._in_flight[e] += 1
        # 5. responses taken, pulses seen
        for e in ENGINES:
            if s.resp.get(e):
                self._in_flight[e] -= 1
                self.got_resp_count[e] += 1
            if s.eng_error.get(e) is not None:
                self.got_eng_errors[e].append((c, s.eng_error[e]))
        if s.error is not None:
            self.got_errors.append((c, s.error))
        if s.done is not None:
            self.got_done.append((c, s.done))
        # 6. an instruction taken now is issued from the next cycle on
        if s.instr:
            self._taken.append((c, self.instrs[self._ni]))
            self._ni += 1
        self.cycle += 1

    def _issue(self, before):
        gold = self.golden
        while not gold.pending and self._taken and self._taken[0][0] < before:
            c, w = self._taken.popleft()
            err = gold.issue(w)
            if err is not None:
                self.want_errors.append((c + self.lat.error, int(err[0])))
            self._cur_legal = err is None
            self._cur_bank = w.bank

    # -- the end --------------------------------------------------------------------------------

    @property
    def idle(self):
        """Every request taken has been answered and every instruction issued."""
        return (
            not self.golden.pending
            and not self._taken
            and all(v == 0 for v in self._in_flight.values())
        )

    def finish(self, responses):
        """Compare everything; ``responses[e]`` is the list of response words of port ``e`` in
        order.  Returns the scoreboards (not yet asserted)."""
        self._issue(before=1 << 62)
        P = self.g.partitions
        boards = []
        self.grants.compare(np.array(self._grant_got), np.array(self._grant_want))
        self.flow.compare(np.array(self._flow_got), np.array(self._flow_want))
        if self.golden.pending:
            self.flow.compare(np.array([0]), np.array([1]))  # beats never sent / taken
        boards += [self.grants, self.flow]
        for e in ENGINES:
            got = _words_to_lanes(responses[e], P)
            want = self.want_resp[e]
            cnt = Scoreboard(f"psum.{e}_responses", "count", bits=32)
            cnt.compare(np.array([len(got)]), np.array([len(want)]))
            boards.append(cnt)
            for tag in sorted({t for t, _ in want}):
                sb = Scoreboard(f"psum.{e}_{tag}", "fp32/raw", bits=32)
                idx = [k for k, (t, _) in enumerate(want) if t == tag]
                g_rows = np.array(
                    [got[k] if k < len(got) else np.full(P, 0xDEADBEEF) for k in idx],
                    dtype=np.int64,
                )
                w_rows = np.array([want[k][1] for k in idx], dtype=np.int64)
                sb.compare(g_rows, w_rows)
                boards.append(sb)
        for name, got, want in [
            ("psum.errors", self.got_errors, self.want_errors),
            ("psum.done", self.got_done, self.want_done),
        ] + [
            (f"psum.{e}_errors", self.got_eng_errors[e], self.want_eng_errors[e]) for e in ENGINES
        ]:
            sb = Scoreboard(name, "count, then cycle<<8|code", bits=64)
            sb.compare_sequence(_events(got), _events(want))
            boards.append(sb)
        return boards
