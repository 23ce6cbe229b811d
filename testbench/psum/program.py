"""PSUM stimulus: phases of write instructions with their beats, engine requests and seed loads.

A :class:`Program` is a list of :class:`Phase`; the testbench (``ncrtl.testbench.psum.test_psum``)
streams one phase at a time into the RTL (all its streams concurrently), waits until it has
drained, and replays everything it observes through the golden (``ncrtl.testbench.psum.replay``).

:func:`random_program` draws the conformance program of a geometry:

* ``random``: interleaved FP32 / BF16 accumulation groups of 1..8 writes in several banks with
  random flag sequences (bit0 or bit2 first, bit1 last), RNE and SR, single RAW16 writes, corner
  values (NaN with payloads, +-Inf so that Inf - Inf happens, subnormals, beats cancelling the
  group's first write to an exact zero, FP32 values that overflow BF16), illegal instructions of
  every :class:`~ncrtl.model.psum.isa.Error` code (and random illegal words breaking several rules at
  once), seed loads, and engine reads and writes (good and
  bad) concentrated on the banks and rows the Tensor Engine is writing;
* ``seeds``: BF16 SR writes back to back while a seed is loaded every cycle;
* ``hammer``: N = 1 accumulations into one address every cycle (FP32, BF16 SR, BF16 RNE), no
  stalls: must run at one beat per cycle;
* ``full_rate``: legal writes of 1..8 beats back to back with engine traffic on other banks only,
  no stalls: one beat per cycle, no bubble;
* ``contention``: the TE and the VE port on one bank every cycle, no stalls (the arbiter shares
  it);
* ``latency``: one write, one read, alone: the latencies the bench reports;
* ``readback``: both engine ports read every word of every bank (the final memory).
"""

from dataclasses import dataclass, field

import numpy as np

from ncrtl.hdl.psum.psum import REQ_FIELDS, SEED_FIELDS
from ncrtl.model.fp.xorwow import Xorwow
from ncrtl.model.psum import isa
from ncrtl.model.psum.isa import Dtype, Error, Flag, Geometry, GroupState, Rounding, Write

__all__ = [
    "EngineReq",
    "Phase",
    "Program",
    "random_program",
    "req_word",
    "seed_word",
    "beat_values",
]


@dataclass
class EngineReq:
    """One engine-port request: a read (``we = 0``) or a write of ``data`` with half ``mask``."""

    we: int
    mask: int
    bank: int
    row: int
    data: np.ndarray = None  # uint32 [partitions]; zeros when None

    def ok(self, geometry):
        return self.bank < geometry.banks and self.row < geometry.rows


@dataclass
class Phase:
    """Streams sent together.  ``stall`` None: the run's stall probability; 0: no stall and no
    backpressure.  ``full_rate``: the TE beats must be taken in consecutive cycles."""

    name: str
    writes: list = field(default_factory=list)  # (Write, uint32 beats [n, partitions])
    ve: list = field(default_factory=list)  # EngineReq
    se: list = field(default_factory=list)
    seeds: list = field(default_factory=list)  # (partition, six words)
    stall: float = None
    full_rate: bool = False

    @property
    def beats(self):
        return sum(w.n for w, _ in self.writes)


@dataclass
class Program:
    geometry: Geometry
    phases: list = field(default_factory=list)

    def phase(self, name):
        return next(p for p in self.phases if p.name == name)


def req_word(req, partitions):
    """The ``i_{e}_req`` integer of an :class:`EngineReq` (``ncrtl.hdl.psum.REQ_FIELDS``)."""
    data = 0
    if req.data is not None:
        data = int.from_bytes(np.asarray(req.data, dtype="<u4").tobytes(), "little")
    values = {"we": req.we, "mask": req.mask, "bank": req.bank, "row": req.row, "data": data}
    word, pos = 0, 0
    for name, width in REQ_FIELDS:
        width = width if width is not None else 32 * partitions
        word |= (int(values[name]) & ((1 << width) - 1)) << pos
        pos += width
    return word


def seed_word(partition, words):
    """The ``i_seed`` integer: partition, then ``x, y, z, w, v, d`` (``ncrtl.hdl.psum.SEED_FIELDS``)."""
    values = [partition, *words]
    word, pos = 0, 0
    for v, (_, width) in zip(values, SEED_FIELDS):
        word |= (int(v) & ((1 << width) - 1)) << pos
        pos += width
    return word


# -- values -------------------------------------------------------------------------------------

#: FP32 corner encodings: zeros, NaNs with payloads, Infs, subnormals, the largest finite (BF16
#: RNE overflows it to Inf), a BF16 tie, values around 1.
CORNERS = np.array(
    [
        0x00000000,
        0x80000000,
        0x7FC00000,
        0x7F800001,
        0xFFC12345,
        0x7FBFFFFF,
        0x7F800000,
        0xFF800000,
        0x00000001,
        0x807FFFFF,
        0x00400000,
        0x7F7FFFFF,
        0xFF7FFFFF,
        0x7F7F8000,
        0x3F808000,
        0x3F818000,
        0x3F800000,
        0xBF800000,
        0x33800000,
    ],
    dtype=np.uint32,
)


def beat_values(rng, shape, *, corner=0.08):
    """Random FP32 beat bits: values over a few binades around 1 (so sums interact and round),
    some exactly representable in BF16, and ``corner`` of them from :data:`CORNERS`."""
    n = int(np.prod(shape))
    mag = np.exp2(rng.integers(-8, 9, n)).astype(np.float64) * (1 + rng.random(n))
    v = (np.where(rng.random(n) < 0.5, -1.0, 1.0) * mag).astype(np.float32).view(np.uint32)
    v = np.where(rng.random(n) < 0.2, v & np.uint32(0xFFFF0000), v)  # BF16-exact
    pick = rng.random(n) < corner
    v = np.where(pick, CORNERS[rng.integers(0, len(CORNERS), n)], v)
    return v.astype(np.uint32).reshape(shape)


# -- the random phase ---------------------------------------------------------------------------


class _Planner:
    """Draws the random phase, tracking the group state the writes leave (legal ones only change
    it, exactly as :func:`isa.check` sees it), so that every illegal kind can be aimed at."""

    def __init__(self, rng, geometry):
        self.rng, self.g = rng, geometry
        self.groups = [GroupState() for _ in range(geometry.banks)]
        self.plans = {}  # bank -> the open group's plan
        self.writes = []

    def _apply(self, w, beats):
        err = isa.check(w, self.g, self.groups[w.bank] if w.bank < self.g.banks else None)
        if err is None:
            st = self.groups[w.bank]
            if w.opens:
                st.open, st.dtype = True, Dtype(w.dtype)
            if w.closes:
                st.open = False
        self.writes.append((w, beats))
        return err

    def start_group(self, bank):
        rng, g = self.rng, self.g
        dtype = Dtype(rng.choice([Dtype.FP32, Dtype.BF16, Dtype.RAW16], p=[0.45, 0.45, 0.1]))
        cap = g.capacity(dtype)
        n = int(rng.integers(1, min(8, cap) + 1))
        col = int(rng.integers(0, cap - n + 1))
        length = 1 if dtype == Dtype.RAW16 else int(rng.integers(1, 9))
        self.plans[bank] = dict(dtype=dtype, col=col, n=n, left=length, first=None)

    def group_write(self, bank):
        rng, g = self.rng, self.g
        plan = self.plans[bank]
        dtype = plan["dtype"]
        first = plan["first"] is None
        if first:
            flags = (
                Flag.FIRST if dtype == Dtype.RAW16 or rng.random() < 0.7 else Flag.FIRST_ACCUMULATE
            )
        else:
            flags = 0
        if plan["left"] == 1:
            flags |= Flag.LAST
        col, n = plan["col"], plan["n"]
        if not first and rng.random() < 0.3:  # a sub-range of the group's region
            n = int(rng.integers(1, plan["n"] + 1))
            col = plan["col"] + int(rng.integers(0, plan["n"] - n + 1))
        rounding = Rounding.SR if dtype == Dtype.BF16 and rng.random() < 0.5 else Rounding.RNE
        w = Write(bank=bank, col=col, n=n, dtype=dtype, rounding=rounding, flags=int(flags))
        beats = beat_values(rng, (n, g.partitions))
        if first:
            plan["first"] = (col, beats.copy())
        elif rng.random() < 0.25:
            # Cancel the first write: the same magnitudes with the sign flipped, in some
            # partitions (an exact zero, or Inf - Inf = NaN).
            c0, b0 = plan["first"]
            for j in range(n):
                k = col + j - c0
                if 0 <= k < len(b0):
                    sel = rng.random(g.partitions) < 0.6
                    beats[j] = np.where(sel, b0[k] ^ np.uint32(0x80000000), beats[j])
        err = self._apply(w, beats)
        assert err is None, (w, err)
        plan["left"] -= 1
        if plan["left"] == 0:
            del self.plans[bank]

    def illegal(self, kind):
        """Append a write breaking rule ``kind`` (if the state allows it); return success."""
        rng, g = self.rng, self.g
        bank = int(rng.integers(0, g.banks))
        base = dict(
            bank=bank,
            col=0,
            n=int(rng.integers(1, min(3, g.rows) + 1)),
            dtype=Dtype.FP32,
            rounding=Rounding.RNE,
            flags=3,
        )
        if kind == Error.BANK:
            if g.banks == 16:
                return False
            base["bank"] = int(rng.integers(g.banks, 16))
        elif kind == Error.DTYPE:
            base["dtype"] = 3
        elif kind == Error.COUNT:
            base["n"] = 0
        elif kind == Error.RANGE:
            base["col"] = g.rows - base["n"] + int(rng.integers(1, base["n"] + 1))
        elif kind == Error.FLAGS:
            base["flags"] = int(rng.choice([5, 7]))
        elif kind == Error.ROUNDING:
            base.update(rounding=Rounding.SR, dtype=Dtype(rng.choice([Dtype.FP32, Dtype.RAW16])))
        elif kind == Error.RAW_ACCUMULATE:
            base.update(dtype=Dtype.RAW16, flags=int(rng.choice([0, 2, 4, 6])))
        elif kind in (Error.NO_GROUP, Error.GROUP_DTYPE):
            want_open = kind == Error.GROUP_DTYPE
            banks = [b for b in range(g.banks) if self.groups[b].open == want_open]
            if not banks:
                return False
            bank = int(rng.choice(banks))
            dtype = Dtype.BF16 if self.groups[bank].dtype == Dtype.FP32 else Dtype.FP32
            if not want_open:
                dtype = Dtype(rng.choice([Dtype.FP32, Dtype.BF16]))
            base.update(bank=bank, dtype=dtype, flags=int(rng.choice([0, 2])))
        w = Write(**base)
        err = self._apply(w, beat_values(self.rng, (w.n, g.partitions)))
        assert err is not None and err[0] == kind, (w, err, kind)
        return True

    def illegal_random(self):
        """Append an illegal write with random fields (a short ``n``): such writes often break
        several rules at once, which checks the order of the rules."""
        rng, g = self.rng, self.g
        while True:
            w = Write(
                bank=int(rng.integers(0, 16)),
                col=int(rng.integers(0, 2048)),
                n=int(rng.integers(0, 4)),
                dtype=int(rng.integers(0, 4)),
                rounding=int(rng.integers(0, 2)),
                flags=int(rng.integers(0, 8)),
            )
            if rng.random() < 0.7:  # mostly in range, so that the later rules matter
                w = Write(
                    bank=w.bank % g.banks,
                    col=int(rng.integers(0, 4)),
                    n=w.n,
                    dtype=w.dtype,
                    rounding=w.rounding,
                    flags=w.flags,
                )
            state = self.groups[w.bank] if w.bank < g.banks else None
            if isa.check(w, g, state) is not None:
                break
        self._apply(w, beat_values(rng, (w.n, g.partitions)))


def _engine_reqs(rng, g, count, hot_banks, hot_rows, *, bad=0.05, only_hot=False):
    """``count`` engine requests: reads and masked writes, mostly (``only_hot``: only) on the hot
    banks and rows (to meet the TE's accesses and each other), ``bad`` of them with a bad bank
    or row."""
    out = []
    for _ in range(count):
        if (only_hot or rng.random() < 0.8) and hot_banks:
            bank = int(rng.choice(hot_banks))
        else:
            bank = int(rng.integers(0, g.banks))
        row = int(rng.choice(hot_rows)) if rng.random() < 0.7 else int(rng.integers(0, g.rows))
        if rng.random() < bad:
            if rng.random() < 0.5 and g.banks < 16:
                bank = int(rng.integers(g.banks, 16))
            else:
                row = int(rng.integers(g.rows, 2048))
        we = int(rng.random() < 0.5)
        out.append(
            EngineReq(
                we,
                int(rng.integers(0, 4)) if we else 0,
                bank,
                row,
                beat_values(rng, (g.partitions,)) if we else None,
            )
        )
    return out


def _random_phase(rng, g, beats):
    pl = _Planner(rng, g)
    kinds = [k for k in Error if k != Error.NONE]
    total = 0
    while total < beats:
        before = len(pl.writes)
        r = rng.random()
        if r < 0.07:
            pl.illegal(Error(rng.choice(kinds)))
        elif r < 0.12:
            pl.illegal_random()
        else:
            bank = int(rng.integers(0, g.banks))
            if bank not in pl.plans:
                pl.start_group(bank)
            pl.group_write(bank)
        total += sum(w.n for w, _ in pl.writes[before:])
    # Every illegal kind at least once.
    for k in kinds:
        pl.illegal(k)
    hot_banks = sorted({w.bank for w, _ in pl.writes if w.bank < g.banks})
    hot_rows = sorted(
        {
            (w.col + j) // (1 if w.dtype == Dtype.FP32 else 2)
            for w, _ in pl.writes
            for j in range(w.n)
            if w.bank < g.banks and w.dtype in (0, 1, 2) and w.col + w.n <= g.capacity(w.dtype)
        }
    )
    ve = _engine_reqs(rng, g, max(1, beats // 3), hot_banks, hot_rows)
    se = _engine_reqs(rng, g, max(1, beats // 3), hot_banks, hot_rows)
    return Phase("random", pl.writes, ve, se, _seeds(rng, g, max(2, beats // 10)))


def _seeds(rng, g, count):
    """``count`` generator loads: random partitions, states of random 63-bit seeds."""
    return [
        (int(rng.integers(0, g.partitions)), Xorwow.seed_state(int(rng.integers(0, 1 << 63))))
        for _ in range(count)
    ]


def _seed_phase(rng, g, beats):
    """BF16 SR writes back to back while a seed is loaded every cycle: loads land in the same
    cycle as SR beats (the beat draws from the new state), before and after them."""
    writes = []
    while sum(w.n for w, _ in writes) < beats:
        n = int(rng.integers(1, min(8, 2 * g.rows) + 1))
        col = int(rng.integers(0, 2 * g.rows - n + 1))
        w = Write(
            bank=int(rng.integers(0, g.banks)),
            col=col,
            n=n,
            dtype=Dtype.BF16,
            rounding=Rounding.SR,
            flags=3,
        )
        writes.append((w, beat_values(rng, (n, g.partitions), corner=0.0)))
    return Phase("seeds", writes, seeds=_seeds(rng, g, beats), stall=0.0, full_rate=True)


def _hammer_phase(rng, g, beats):
    """N = 1 accumulations into one address every cycle: FP32, BF16 SR, BF16 RNE."""
    writes = []
    per = max(4, beats // 3)
    for k, (dtype, rounding) in enumerate(
        ((Dtype.FP32, Rounding.RNE), (Dtype.BF16, Rounding.SR), (Dtype.BF16, Rounding.RNE))
    ):
        bank = k % g.banks
        col = int(rng.integers(0, g.capacity(dtype)))
        for j in range(per):
            flags = Flag.FIRST if j == 0 else (Flag.LAST if j == per - 1 else 0)
            w = Write(bank=bank, col=col, n=1, dtype=dtype, rounding=rounding, flags=int(flags))
            # Small values around 1 keep the running sum from saturating; a few corners.
            writes.append((w, beat_values(rng, (1, g.partitions), corner=0.01)))
    return Phase("hammer", writes, stall=0.0, full_rate=True)


def _full_rate_phase(rng, g, beats):
    """Legal writes back to back (one-write groups and longer groups), engines elsewhere."""
    te_banks = list(range(max(1, g.banks // 2)))
    other = [b for b in range(g.banks) if b not in te_banks]
    pl = _Planner(rng, g)
    total = 0
    while total < beats:
        bank = int(rng.choice(te_banks))
        if bank not in pl.plans:
            pl.start_group(bank)
        before = len(pl.writes)
        pl.group_write(bank)
        total += sum(w.n for w, _ in pl.writes[before:])
    # Close what is still open, so the next phases start clean.
    for bank in list(pl.plans):
        pl.plans[bank]["left"] = 1
        pl.group_write(bank)
    ve = se = []
    if other:
        ve = _engine_reqs(rng, g, beats // 2, other, list(range(g.rows)), bad=0.0, only_hot=True)
        se = _engine_reqs(rng, g, beats // 2, other, list(range(g.rows)), bad=0.0, only_hot=True)
    return Phase("full_rate", pl.writes, ve, se, stall=0.0, full_rate=True)


def _contention_phase(rng, g, beats):
    """TE writes of 8 beats back to back and VE reads, all on bank 0, every cycle."""
    writes = []
    n = min(8, g.rows)
    for j in range(max(1, beats // n)):
        w = Write(bank=0, col=0, n=n, dtype=Dtype.FP32, flags=3)
        writes.append((w, beat_values(rng, (n, g.partitions))))
    ve = [EngineReq(0, 0, 0, int(rng.integers(0, g.rows))) for _ in range(beats)]
    return Phase("contention", writes, ve=ve, stall=0.0)


def _latency_phase(rng, g):
    w = Write(bank=0, col=0, n=1, dtype=Dtype.FP32, flags=3)
    return Phase("latency", [(w, beat_values(rng, (1, g.partitions)))], stall=0.0)


def _latency_read_phase(g):
    return Phase("latency_read", ve=[EngineReq(0, 0, 0, 0)], stall=0.0)


def _readback_phase(g):
    words = [(b, r) for b in range(g.banks) for r in range(g.rows)]
    ve = [EngineReq(0, 0, b, r) for b, r in words]
    se = [EngineReq(0, 0, b, r) for b, r in reversed(words)]
    return Phase("readback", ve=ve, se=se)


def random_program(rng, geometry, beats=2000):
    """The conformance program of ``geometry``: about ``beats`` Tensor Engine beats in the random
    phase, and the other phases (module docstring) scaled from it."""
    g = geometry
    prog = Program(g)
    prog.phases.append(_latency_phase(rng, g))
    prog.phases.append(_latency_read_phase(g))
    prog.phases.append(_random_phase(rng, g, beats))
    prog.phases.append(_seed_phase(rng, g, max(16, beats // 10)))
    prog.phases.append(_hammer_phase(rng, g, max(12, beats // 4)))
    prog.phases.append(_full_rate_phase(rng, g, max(16, beats // 4)))
    prog.phases.append(_contention_phase(rng, g, max(16, beats // 8)))
    prog.phases.append(_readback_phase(g))
    return prog
