"""Cycle-level timing model of the Tensor Engine control (docs/tensor_engine.md, timing).

The RTL (``ncrtl.hdl.tensor_engine``) is built to match this model cycle for cycle; the testbench
compares every event.  The model assumes always-valid instruction, stationary and moving streams
and an always-ready output; cycles are enabled clock cycles (a backpressure freeze does not
count).

Timing conventions
------------------
Every event "in cycle t" is a stream handshake (valid & ready) in cycle t, or an output / error
strobe that is high in cycle t.

1. **Cycle 0** is the first cycle in which the first instruction is presented; it issues in cycle
   0 if its conditions hold.
2. **Issue order.** Instructions issue in program order, at most one per cycle: instruction ``i``
   issues in the first cycle ``t_i >= t_{i-1} + 1`` (``t_0 >= 0``) in which its conditions hold;
   a waiting instruction blocks the ones behind it.  The issue cycle is the cycle of the
   instruction-stream handshake.
3. **Rejected instructions.** An instruction for which ``isa.check(ins, rows, cols, last
   accepted LS)`` returns an error issues (is dropped) in cycle ``t_{i-1} + 1`` without waiting for
   any resource; ``o_error`` is high with the code for one cycle, in cycle ``t_i + ERROR_DELAY``
   (``ERROR_DELAY = 1``: a registered output).  It consumes no data beats, emits no output, does
   not toggle the bank and does not replace the last accepted LS.
4. **LS** (target bank = number of LS accepted before it, mod 2) issues in cycle ``t`` when
   ``t >= t_LS' + B' * II'`` (the loader is free: ``t_LS'``, ``B'``, ``II'`` of the previous
   accepted LS, ``B`` an LS's beats: :func:`ls_beats`, the most columns one of its
   LoadStationary chains loads) and ``t >= L + 1`` with ``L`` the cycle of the last moving beat
   of the latest accepted MM that reads the target bank (an LS may issue in the cycle after
   that beat, not in the same cycle).  Its beat ``j`` (``j < B``, carrying each chain's column
   of :func:`ls_chain_columns`) is consumed in cycle ``t + j * II``: the first beat in the issue
   cycle.
5. **MM** (reads the bank of the last accepted LS) issues in cycle ``t`` when
   ``t >= t_MM' + max(N', F') * II'`` (the sequencer is free: ``t_MM'``, ``N'``, ``II'`` of the
   previous accepted MM, ``F`` its floor :meth:`Rules.floor`, ``min(64, M)``) and ``t >= `` the
   cycle of the last beat of its LS: **the first moving
   beat may share the cycle with the LS's last stationary beat**.  Its beat ``j`` (``j < N``) is
   consumed in cycle ``t + j * II``; the first beat in the issue cycle.
6. **Output** vector ``j`` of an MM is presented in cycle ``(beat j cycle) + latency(rows, cols)``
   with ``latency = rows + cols + P_PREFIX + 1``.
7. ``II`` is ``Instruction.beat_interval``: 4 for fp32 (matmul), 2 for fp32 transpose, else 1.
   A sparse instruction (``sparse`` = ``R``) times as the dense one of its ``K`` compressed rows
   (a moving beat carries ``R`` elements per row, one beat per cycle); it counts ``R`` times
   the MACs (:func:`macs_per_beat`, dense-equivalent).

Rules 4 and 5 are one principle: *a stationary beat consumed in cycle t is used by the moving
beats consumed in cycles >= t and by none consumed before t*, in every PE.  The datapath must
honour it: the bank contents of PE ``(r, c)`` as updated by stationary beat ``t`` become visible
exactly in cycle ``t + r + c + 1``, on the moving wavefront (moving beat ``t`` is in
``x_reg[r][c]`` then).  A whole-row shift at the row skew alone would be too early for columns
``c >= 1``, where the previous MM's last beats are still passing.

Consequences: back-to-back MMs on one stationary start every ``max(N, F) * II`` cycles; an LS
issued right after an MM is hidden (the next MM follows with no bubble) iff ``B <= max(N, F)``
(same ``II``; always with 4 chains); a lone LS + MM from cycle 0 presents its first output in
cycle ``(B - 1) * II + latency`` (``B >= 2``).

A transpose whose moving beat is not a selection column is a data error the RTL flags while
streaming; this model has no data and does not predict it.

Rules 1 to 7 as written are those of :data:`HDL_SERIAL` (``TensorEngine(parallel_tiles=False)``:
4 LoadStationary chains, the floor ``min(64, M)``); :data:`ONE_CHAIN` has one chain (``B = M``)
and a floor of 64.  :data:`HDL_PARALLEL` (``TensorEngine(parallel_tiles=True)``) adds parallel
tiles; the documented engine (:data:`DOCUMENTED`, the default) adds two more (:class:`Rules`;
docs/tensor_engine.md, "Timing as documented"): instructions on disjoint tiles run at the same
time (per-tile loaders, sequencers, banks; a row tile's outputs leave below its last row), and
transposes may run on a second plane.
"""

from collections import deque
from dataclasses import dataclass, field

from ncrtl.model.modes import SPARSE_GROUP, get_mode, mode_by_code

from .isa import MIN_MM_CYCLES, Error, Instruction, Mode, Op, check, decode

__all__ = [
    "P_PREFIX",
    "ERROR_DELAY",
    "CLOCK_HZ",
    "latency",
    "simulate",
    "Sequencer",
    "Record",
    "Schedule",
    "macs_per_beat",
    "peak_macs_per_cycle",
    "peak_tflops",
    "Rules",
    "DOCUMENTED",
    "HDL_RULES",
    "HDL_SERIAL",
    "HDL_PARALLEL",
    "HDL_BACKGROUND",
    "ONE_CHAIN",
    "Throttle",
    "THROTTLE_NS",
    "throttle_at",
    "ls_plane",
    "ls_beats",
    "LS_CHAINS",
    "chain_width",
    "chain_count",
    "ls_chain_columns",
    "tile_positions",
    "tile_slots",
    "tile_slot",
    "tile_tap",
    "tile_col_groups",
    "matmul_program",
    "steady_cycles",
    "chrome_trace",
]

#: Pipeline stages of the PE product prefix (decode and exact multiply; product sum) before its
#: psum adder.  The PE (``ncrtl.hdl.tensor_engine.pe``) is built with this many stages.
P_PREFIX = 2
#: ``o_error`` is high this many cycles after the rejected instruction's issue cycle.
ERROR_DELAY = 1
#: Clock of the TFLOPS figures (Trainium2 Tensor Engine).
CLOCK_HZ = 2.4e9


def latency(rows, cols):
    """Cycles from a moving beat's consumption to its output: ``rows + cols + P_PREFIX + 1``."""
    return rows + cols + P_PREFIX + 1


def macs_per_beat(ins):
    """Multiply-accumulates one moving beat of MM ``ins`` performs (0 for LS and transpose):
    ``K * M`` times the mode's products per PE step, times the compression ratio ``R`` of a
    sparse MM (its dense-equivalent MACs: the beat does the work of a dense beat over ``K R``
    rows, the dropped zeros' products included)."""
    if ins.op != Op.MM or ins.transpose:
        return 0
    return ins.k * ins.m * ins.pe_mode.products * (ins.sparse or 1)


def peak_macs_per_cycle(rows, cols, mode, sparse=0):
    """Peak MACs per cycle of a mode (a :class:`Mode`, code or name): ``rows*cols`` times its
    products per step over its beat interval (x2 double_row, /4 fp32), times the compression
    ratio ``sparse`` of a sparse matmul (dense-equivalent MACs; 0: dense).  ``ValueError`` with
    the sparse rule's message (:func:`isa.check`) for a ratio the mode does not run."""
    pe_mode = get_mode(mode) if isinstance(mode, str) else mode_by_code(mode)
    if sparse:
        _check_sparse(
            Instruction(Op.LS, Mode(pe_mode.code), k=SPARSE_GROUP, m=1, sparse=sparse),
            rows,
            cols,
        )
    return pe_mode.macs_per_cycle(rows, cols) * (sparse or 1)


def peak_tflops(rows, cols, mode, clock_hz=CLOCK_HZ, sparse=0):
    """Peak TFLOPS (2 FLOP per MAC) of a mode: 78.6 bf16, 157.3 double_row, 19.7 fp32
    (128x128); a sparse matmul's dense-equivalent at ratio ``sparse``: 157.3 at 4:8, 235.9 at
    4:12, 314.6 at 4:16 (bf16, fp16, tf32, fp8)."""
    return 2 * peak_macs_per_cycle(rows, cols, mode, sparse) * clock_hz / 1e12


def _check_sparse(ins, rows, cols, stationary=None, tile_unit=32):
    """``ValueError`` ("CODE: message") if ``ins`` breaks one of the rules its ``sparse`` field
    brings (:func:`isa.check`: a mode or ratio without sparse, ``Error.SPARSE``; sparse with
    tiling or transpose, ``Error.MODE_COMBO``); other rules are left to the engine."""
    bad = check(ins, rows, cols, stationary, tile_unit=tile_unit)
    if bad is not None and bad[0] in (Error.SPARSE, Error.MODE_COMBO):
        raise ValueError(f"{bad[0].name}: {bad[1]}")


@dataclass(frozen=True, slots=True)
class Record:
    """What one instruction did.

    Attributes
    ----------
    index : int
        Position in the program.
    instruction : Instruction
    issue : int
        Cycle of its instruction-stream handshake.
    error : isa.Error
        ``Error.NONE`` if accepted.
    message : str
        The rule's message for a rejected instruction.
    error_cycle : int or None
        Cycle ``o_error`` is high (``issue + ERROR_DELAY``), rejected instructions only.
    bank : int or None
        Stationary bank written (LS) or read (MM).
    beats : range
        Cycles of its stationary (LS; beat ``j`` carries the columns :func:`ls_chain_columns`
        gives) or moving (MM) beats: a beat every ``beat_interval`` cycles, kept as a
        ``range`` (a record's size does not grow with N; a long run keeps 10^6 matmuls in a
        few hundred MB).
    outputs : range
        Cycles its output vectors are presented (MM; vector ``j`` from moving beat ``j``).
    plane : int
        0, or 1 for a transpose run in the background (:attr:`Rules.background_transpose`).
    busy_until : int or None
        The first cycle its loader chains (LS) or its sequencer (MM) are free again.
    """

    index: int
    instruction: Instruction
    issue: int
    error: Error = Error.NONE
    message: str = ""
    error_cycle: int = None
    bank: int = None
    beats: range = range(0)
    outputs: range = range(0)
    plane: int = 0
    busy_until: int = None
    throttled: bool = False

    @property
    def accepted(self):
        return self.error == Error.NONE

    @property
    def last_cycle(self):
        """Cycle of its last event (issue, error strobe, beat or output)."""
        return max(
            [self.issue]
            + [c for c in (self.error_cycle,) if c is not None]
            + list(self.beats[-1:])
            + list(self.outputs[-1:])
        )


@dataclass(frozen=True)
class Schedule:
    """The timing of a program: one :class:`Record` per instruction, plus summary figures."""

    rows: int
    cols: int
    records: tuple = field(default_factory=tuple)
    #: the cycles the warm-up throttle added to the MMs' occupancy (:class:`Throttle`)
    throttle_cycles: int = 0

    @property
    def throttled(self):
        """The MMs that ran throttled."""
        return sum(1 for r in self.records if r.throttled)

    @property
    def total_cycles(self):
        """Cycles from cycle 0 up to and including the last event (0 for an empty program)."""
        return 1 + max(r.last_cycle for r in self.records) if self.records else 0

    @property
    def macs(self):
        """MACs of the whole program (accepted MMs; transposes count 0; a sparse MM its
        dense-equivalent MACs, :func:`macs_per_beat`)."""
        return sum(
            macs_per_beat(r.instruction) * len(r.beats)
            for r in self.records
            if r.accepted and r.instruction.op == Op.MM
        )

    def mm_window(self):
        """``(start, stop)``: first MM issue to the end of the last MM's sequencer occupancy.

        The steady-state window: ``stop`` is the latest end of an accepted MM's sequencer
        occupancy (``t + max(N, floor) * II``).  None if no MM was accepted.
        """
        mms = [r for r in self.records if r.accepted and r.instruction.op == Op.MM]
        if not mms:
            return None
        return mms[0].issue, max(r.busy_until for r in mms)

    def _window(self, start, stop):
        start = 0 if start is None else start
        stop = self.total_cycles if stop is None else stop
        if stop <= start:
            raise ValueError(f"empty window [{start}, {stop})")
        macs = sum(
            macs_per_beat(r.instruction) * _count_in(r.beats, start, stop)
            for r in self.records
            if r.accepted and r.instruction.op == Op.MM
        )
        return macs, stop - start

    def utilization(self, start=None, stop=None):
        """MACs per cycle in ``[start, stop)`` over the peak ``rows * cols``.

        Counts the MACs of the moving beats consumed in the window (default: the whole program;
        a sparse MM's dense-equivalent MACs).  Steady state reaches 1.0 in bf16/fp16/tf32/fp8,
        2.0 in double_row, 0.25 in fp32, and ``R`` in a sparse matmul of ratio ``R`` (2, 3, 4 at
        4:8, 4:12, 4:16).
        """
        macs, cycles = self._window(start, stop)
        return macs / (cycles * self.rows * self.cols)

    def tflops(self, start=None, stop=None, clock_hz=CLOCK_HZ):
        """Equivalent TFLOPS (2 FLOP per MAC) in ``[start, stop)`` at ``clock_hz`` (a sparse
        MM's dense-equivalent MACs: 314.6 in the steady state of 4:16 at 128x128)."""
        macs, cycles = self._window(start, stop)
        return 2 * macs * clock_hz / cycles / 1e12

    def events(self):
        """Every event, sorted: ``(cycle, kind, index, j)``.

        ``kind`` is ``"issue"``, ``"error"``, ``"stationary"`` (LS beat ``j``), ``"moving"`` (MM
        beat ``j``) or ``"output"`` (MM output vector ``j``); ``j`` is 0 for issue and error.
        """
        ev = []
        for r in self.records:
            ev.append((r.issue, "issue", r.index, 0))
            if r.error_cycle is not None:
                ev.append((r.error_cycle, "error", r.index, 0))
            kind = "stationary" if r.instruction.op == Op.LS else "moving"
            ev += [(c, kind, r.index, j) for j, c in enumerate(r.beats)]
            ev += [(c, "output", r.index, j) for j, c in enumerate(r.outputs)]
        return sorted(ev, key=lambda e: (e[0], e[2], e[1], e[3]))


@dataclass(frozen=True)
class Rules:
    """Which of the documented timing mechanisms an engine has (docs/tensor_engine.md,
    "Timing as documented").

    Attributes
    ----------
    ls_chains : int
        LoadStationary chains: the columns are cut into this many groups of ``cols /
        ls_chains``, each loaded through its own chain at one column per beat, all at once, so
        an LS of ``M`` columns takes as many beats as its widest group holds (``min(M, 32)`` at
        4 chains and 128 columns: the documented "up to 4x faster" LoadStationary).  1: one
        chain, ``M`` beats.
    mm_floor : str
        An MM's least occupancy of its sequencer in beat slots: ``"stationary"``
        ``min(64, M)`` (the documented back-to-back cost ``max(min(64, M), N)``) or
        ``"fixed"`` 64.
    parallel_tiles : bool
        Instructions on disjoint tiles run at the same time, each tile with its own loader,
        sequencer, stationary and moving streams and output tap (a row tile's results leave
        below its last row); an instruction on a tile that overlaps a different tile with beats
        still to come is an error (``Error.TILE_BUSY``).  The array is cut into PE groups of
        ``tile_unit x tile_unit``; an LS or an MM occupies the loader or the sequencer of every
        group of its tile, and an LS writes one bank in all of them: the bank its tile's first
        group would write next (the groups of a tile then always hold its stationary in one
        bank).  False: one loader and one sequencer for the whole array, tiles one after
        another.
    background_transpose : bool
        NeuronCore-v4: a transpose may run on a second plane (its own loader, sequencer, banks
        and output path) beside a matmul or another transpose.  The plane follows from the
        instruction sequence alone (:func:`ls_plane`): a transpose LS goes to plane 1 unless
        the latest accepted LS on its tile is on plane 1 (then plane 0: consecutive
        transposes alternate); a matmul LS to plane 0; an MM to the plane of the latest LS on
        its tile.
    """

    ls_chains: int = 4
    mm_floor: str = "stationary"
    parallel_tiles: bool = True
    background_transpose: bool = True

    def __post_init__(self):
        if not isinstance(self.ls_chains, int) or self.ls_chains < 1:
            raise ValueError(f"Rules ls_chains must be a positive int, not {self.ls_chains!r}")
        if self.mm_floor not in ("stationary", "fixed"):
            raise ValueError(
                f"Rules mm_floor must be 'stationary' or 'fixed', not {self.mm_floor!r}"
            )

    def floor(self, ins):
        """The least beat slots MM ``ins`` occupies its sequencer."""
        if self.mm_floor == "fixed":
            return MIN_MM_CYCLES
        return min(MIN_MM_CYCLES, ins.m)


#: The warm-up throttle's figures (the NKI performance guide and profiler documentation:
#: Trainium2 and 3): full rate after about 3 us of work, throttled again when the utilization
#: over about 3 us falls below 50%.
THROTTLE_NS = 3000


@dataclass(frozen=True)
class Throttle:
    """The Tensor Engine's warm-up throttle (Trainium2 and Trainium3; docs/kernels.md,
    "Costs"), in cycles of the engine's clock.

    The engine starts throttled: an MM that issues throttled moves its beats ``factor`` times
    apart (half rate).  Once the MMs issued throttled have occupied it ``warmup`` cycles (of
    wall time: MMs on parallel tiles at once count once), the next MM runs at full rate.  An MM that issues at full rate when the engine's occupancy
    (the union of its MMs' sequencer occupancy) over the ``window`` cycles before its issue is
    below ``threshold`` of the window engages the throttle again, from no warm-up: it and the
    MMs after it run throttled.  The throttle is decided per MM (an MM that begins throttled
    runs throttled throughout).  LoadStationary is not throttled."""

    window: int
    warmup: int
    threshold: float = 0.5
    factor: int = 2

    def __post_init__(self):
        for name in ("window", "warmup", "factor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Throttle {name} must be a positive int, not {v!r}")
        if not 0 <= self.threshold <= 1:
            raise ValueError(f"Throttle threshold must be in 0..1, not {self.threshold!r}")


def throttle_at(mhz, ns=THROTTLE_NS):
    """The documented :class:`Throttle` at a clock of ``mhz`` MHz: a window and a warm-up of
    ``ns`` each."""
    cycles = round(ns * mhz / 1000)
    return Throttle(window=cycles, warmup=cycles)


class _ThrottleState:
    """A :class:`Throttle`'s state in a :class:`Sequencer`: whether it holds, the warm-up so
    far, and the recent occupancy as merged intervals (no older than the window)."""

    __slots__ = ("t", "on", "warm", "spans", "added")

    def __init__(self, throttle):
        self.t = throttle
        self.on = True
        self.warm = 0
        self.spans = deque()  # merged (start, end) of MM occupancy, oldest first
        self.added = 0

    def at_issue(self, t):
        """Whether an MM issued in cycle ``t`` runs throttled."""
        lo = t - self.t.window
        spans = self.spans
        while spans and spans[0][1] <= lo:
            spans.popleft()
        if not self.on:
            busy = sum(min(b, t) - max(a, lo) for a, b in spans if a < t)
            if busy < self.t.threshold * self.t.window:
                self.on, self.warm = True, 0
        return self.on

    def occupied(self, start, end, throttled, extra):
        """An MM occupied the engine from ``start`` to ``end`` (``extra`` cycles of it the
        throttle's)."""
        spans = self.spans
        if spans and start <= spans[-1][1]:
            new = max(0, end - spans[-1][1])  # MMs on parallel tiles overlap: wall time
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            new = end - start
            spans.append((start, end))
        if throttled:
            self.added += extra
            self.warm += new
            if self.warm >= self.t.warmup:
                self.on = False


#: The documented Tensor Engine (the default of :func:`simulate`).
DOCUMENTED = Rules()
#: The rules of ``TensorEngine(parallel_tiles=False)``: the 4 LS chains and the ``min(64, M)``
#: MM floor, tiles one after another, no background transpose.  The RTL equals
#: :func:`simulate` with its rules, cycle for cycle.
HDL_SERIAL = Rules(parallel_tiles=False, background_transpose=False)
#: The rules of ``TensorEngine(parallel_tiles=True)``: :data:`HDL_SERIAL` and parallel tiles.
HDL_PARALLEL = Rules(background_transpose=False)
#: The rules of ``TensorEngine(background_transpose=True)``: :data:`HDL_SERIAL` and the
#: background transpose plane (NeuronCore-v4), tiles one after another.
HDL_BACKGROUND = Rules(parallel_tiles=False)
#: The rules of the default ``TensorEngine``.
HDL_RULES = HDL_SERIAL
#: One LS chain and a 64-slot MM floor, tiles one after another: the plain weight-stationary
#: engine (an LS costs a beat per column; back-to-back MMs ``max(N, 64)``).
ONE_CHAIN = Rules(ls_chains=1, mm_floor="fixed", parallel_tiles=False, background_transpose=False)


#: LoadStationary chains of the documented engine (and of the RTL).
LS_CHAINS = 4


def chain_width(cols, tile_unit=32, chains=LS_CHAINS):
    """Columns of each LoadStationary chain: the least multiple of ``tile_unit`` (so every tile
    position falls on a chain or inside the first chain of its tile) with ``chains`` chains
    covering the ``cols`` columns (32 at 128 columns)."""
    u = max(1, tile_unit)
    return u * -(-cols // (chains * u))


def chain_count(cols, tile_unit=32, chains=LS_CHAINS):
    """The LoadStationary chains of a ``cols``-column array: ``chains`` or fewer, of
    :func:`chain_width` columns each (the last one may be narrower)."""
    return -(-cols // chain_width(cols, tile_unit, chains))


def ls_chain_columns(ins, cols, tile_unit=32, chains=LS_CHAINS):
    """Per chain ``k`` of LS ``ins`` (whole): ``(first column, columns)`` it loads, the array's
    columns ``[first, first + columns)``; a chain's beat ``j`` carries column ``first +
    columns - 1 - j``."""
    width = chain_width(cols, tile_unit, chains)
    lo, hi = ins.tile_col, ins.tile_col + ins.m
    out = []
    for k in range(chain_count(cols, tile_unit, chains)):
        first = max(lo, k * width)
        out.append((first, max(0, min(hi, (k + 1) * width) - first)))
    return out


def ls_beats(ins, cols, chains, tile_unit=32):
    """Beats of LS ``ins`` (whole) on ``chains`` chains: the most columns one chain loads."""
    return max(n for _, n in ls_chain_columns(ins, cols, tile_unit, chains))


def tile_slots(rows, cols, tile_unit=32):
    """Loaders and sequencers of an engine with parallel tiles: ``max(row groups, column
    groups)`` of ``tile_unit`` (4 at 128 x 128)."""
    u = max(1, tile_unit)
    return max(-(-rows // u), -(-cols // u))


def tile_slot(ins, rows, cols, tile_unit=32):
    """The loader / sequencer (and the ``stationary`` / ``moving`` stream) of an engine with
    parallel tiles that runs ``ins``: its tile's first row group for a row tile, its first
    column group for a column tile, 0 for the whole array.  Two tiles of one slot always
    share a PE group, so a slot never runs two instructions at once that the rules would let
    run in parallel."""
    ins = ins.whole(rows, cols)
    u = max(1, tile_unit)
    return ins.tile_row // u + ins.tile_col // u


def tile_tap(ins, rows, cols, tile_unit=32):
    """The output tap (row group) below which the results of MM ``ins`` leave an engine with
    parallel tiles: its tile's last row group."""
    ins = ins.whole(rows, cols)
    u = max(1, tile_unit)
    return -(-(ins.tile_row + ins.tile_rows) // u) - 1


def tile_col_groups(ins, rows, cols, tile_unit=32):
    """The column groups (of ``tile_unit`` columns) of the tile of ``ins``."""
    ins = ins.whole(rows, cols)
    u = max(1, tile_unit)
    return range(ins.tile_col // u, -(-(ins.tile_col + ins.tile_cols) // u))


def ls_plane(ins, latest_plane):
    """The plane an accepted LS ``ins`` loads with the background transpose plane
    (:attr:`Rules.background_transpose`): 1 for a transpose unless ``latest_plane``, the plane
    of the latest accepted LS on its tile (None: none), is 1; 0 for a matmul.

    The rule reads the instruction sequence only, never the timing, so a driver knows which
    plane's streams carry an instruction's data whatever the stalls: consecutive transposes
    alternate between the planes (a chain of transposes runs two at a time), and a transpose
    after a matmul LS goes beside it on plane 1."""
    return int(bool(ins.transpose) and latest_plane != 1)


class _Uniform:
    """The state every PE group of a plane holds when they all hold the same (the usual case:
    whole-array instructions only), kept once instead of per group."""

    __slots__ = ("next_bank", "last_read", "last_ls", "busy", "loader_free", "seq_free")

    def __init__(self):
        self.next_bank = 0
        self.last_read = {}  # bank -> the last moving beat reading it
        self.last_ls = None
        self.busy = None
        self.loader_free = 0
        self.seq_free = 0


class _Plane:
    """The state of one plane (the array's, or the background transpose's): per PE group the
    bank the next LS writes, the last moving beat reading each bank, the last LS, the
    instruction with beats last and the first cycle its loader and its sequencer are free.

    While every group holds the same state it is kept once, in :attr:`uniform` (the per-group
    dicts are then empty): a whole-array instruction reads and writes it in one step instead
    of once per group.  An instruction on a tile spreads it over the groups first
    (:meth:`materialize`); a whole-array instruction that leaves every group equal folds it
    back (:meth:`collapse`).  Both forms hold the same values, so the schedule is the same."""

    def __init__(self):
        self.next_bank = {}
        self.last_read = {}
        self.last_ls = {}  # group -> (record, bank written, cycle of its last beat)
        self.busy = {}  # group -> (region, cycle of its last beat)
        self.loader_free = {}
        self.seq_free = {}
        self.uniform = _Uniform()

    def _clear(self):
        for d in (
            self.next_bank,
            self.last_read,
            self.last_ls,
            self.busy,
            self.loader_free,
            self.seq_free,
        ):
            d.clear()

    def materialize(self, all_groups):
        u = self.uniform
        if u is None:
            return
        self.uniform = None
        self._clear()
        for g in all_groups:
            self.next_bank[g] = u.next_bank
            for b, v in u.last_read.items():
                self.last_read[(g, b)] = v
            if u.last_ls is not None:
                self.last_ls[g] = u.last_ls
            if u.busy is not None:
                self.busy[g] = u.busy
            self.loader_free[g] = u.loader_free
            self.seq_free[g] = u.seq_free

    def _state(self, g):
        ls = self.last_ls.get(g)
        return (
            self.next_bank.get(g, 0),
            self.last_read.get((g, 0), -1),
            self.last_read.get((g, 1), -1),
            None if ls is None else (id(ls[0]), ls[1], ls[2]),
            self.busy.get(g),
            self.loader_free.get(g, 0),
            self.seq_free.get(g, 0),
        )

    def collapse(self, all_groups):
        first = self._state(all_groups[0])
        if any(self._state(g) != first for g in all_groups[1:]):
            return
        g = all_groups[0]
        u = _Uniform()
        u.next_bank = self.next_bank.get(g, 0)
        u.last_read = {b: self.last_read[(g, b)] for b in (0, 1) if (g, b) in self.last_read}
        u.last_ls = self.last_ls.get(g)
        u.busy = self.busy.get(g)
        u.loader_free = self.loader_free.get(g, 0)
        u.seq_free = self.seq_free.get(g, 0)
        self._clear()
        self.uniform = u


def simulate(
    program, rows=128, cols=128, *, tile_unit=32, rules=DOCUMENTED, modes=None, throttle=None
):
    """Timing of ``program`` on a ``rows x cols`` array (rules in the module docstring and
    :class:`Rules`).

    Parameters
    ----------
    program : iterable of Instruction or int
        The instruction stream (ints are instruction words, see :func:`isa.decode`).
    rows, cols : int
    tile_unit : int
        The engine's tile unit (32 on the hardware; :func:`isa.check`).
    rules : Rules
        :data:`DOCUMENTED` (default), :data:`HDL_PARALLEL` or :data:`HDL_SERIAL` (the RTL
        with and without parallel tiles).
    modes : sequence of PeMode or None
        The modes the engine is built for (``isa.check``); None: every engine mode.
    throttle : Throttle or None
        The warm-up throttle (:func:`throttle_at`), or None (the default, as the RTL).

    Returns
    -------
    Schedule
    """
    engine = Sequencer(rows, cols, tile_unit=tile_unit, rules=rules, modes=modes, throttle=throttle)
    for raw in program:
        engine.issue(raw)
    return engine.schedule()


class Sequencer:
    """The Tensor Engine's issue logic as a process: :meth:`issue` takes the next instruction
    of the stream and gives its :class:`Record` at once.

    :func:`simulate` issues a whole program from cycle 0; the whole-core timing model
    (:mod:`ncrtl.model.kernel.timing`) issues each instruction when its semaphore waits are
    met, by passing ``earliest``: rule 2 then reads ``t_i >= max(t_{i-1} + 1, earliest)``.  A
    stream issued with every ``earliest`` 0 is :func:`simulate`'s program, cycle for cycle.
    """

    def __init__(
        self,
        rows=128,
        cols=128,
        *,
        tile_unit=32,
        rules=DOCUMENTED,
        modes=None,
        fold=True,
        throttle=None,
    ):
        if not isinstance(rules, Rules):
            raise TypeError(f"rules must be a Rules, not {rules!r}")
        if throttle is not None and not isinstance(throttle, Throttle):
            raise TypeError(f"throttle must be a Throttle or None, not {throttle!r}")
        self.throttle = _ThrottleState(throttle) if throttle is not None else None
        self.rows, self.cols, self.tile_unit, self.rules, self.modes = (
            rows,
            cols,
            tile_unit,
            rules,
            modes,
        )
        self.lat = latency(rows, cols)
        self.unit = max(1, tile_unit)
        self.planes = [_Plane(), _Plane()]
        # fold: keep a plane's state once while all its groups hold the same (_Plane); False
        # keeps it per group throughout (the reference the folded form is tested against)
        self.fold = fold
        if rules.parallel_tiles:
            n_r, n_c = -(-rows // self.unit), -(-cols // self.unit)
            self.all_groups = tuple((r, c) for r in range(n_r) for c in range(n_c))
        else:
            self.all_groups = ((0, 0),)
        self.records = []
        self.prev_issue = -1
        # A long program repeats a few instructions (matmul_program shares them): their rule
        # checks and whole-array forms are pure, computed once per distinct instruction.
        self._memo_check, self._memo_whole = {}, {}
        self._memo_groups, self._memo_region = {}, {}
        self._memo_beats = {}

    def schedule(self):
        """The records so far as a :class:`Schedule`."""
        added = self.throttle.added if self.throttle is not None else 0
        return Schedule(self.rows, self.cols, tuple(self.records), added)

    @property
    def throttle_cycles(self):
        """The cycles the warm-up throttle has added to the MMs' occupancy so far."""
        return self.throttle.added if self.throttle is not None else 0

    # The memos are keyed by object identity (each entry keeps its instruction alive, so an id
    # is never reused while its entry stands): a dataclass's hash walks all its fields, and a
    # stream of repeated instructions would pay it dozens of times per issue.

    def _checked(self, ins, ls):
        key = (id(ins), id(ls))
        hit = self._memo_check.get(key)
        if hit is None or hit[0] is not ins or hit[1] is not ls:
            value = check(ins, self.rows, self.cols, ls, tile_unit=self.tile_unit, modes=self.modes)
            hit = self._memo_check[key] = (ins, ls, value)
        return hit[2]

    def _whole_of(self, ins):
        hit = self._memo_whole.get(id(ins))
        if hit is None or hit[0] is not ins:
            hit = self._memo_whole[id(ins)] = (ins, ins.whole(self.rows, self.cols))
        return hit[1]

    def _groups(self, ins):
        """The PE groups of the tile of ``ins`` (one group for the array when tiles do not run
        in parallel), once per distinct instruction."""
        if not self.rules.parallel_tiles:
            return ((0, 0),)
        hit = self._memo_groups.get(id(ins))
        if hit is None or hit[0] is not ins:
            unit = self.unit
            rg = range(ins.tile_row // unit, -(-(ins.tile_row + ins.tile_rows) // unit))
            cg = range(ins.tile_col // unit, -(-(ins.tile_col + ins.tile_cols) // unit))
            hit = self._memo_groups[id(ins)] = (ins, tuple((r, c) for r in rg for c in cg))
        return hit[1]

    def _ls_beats(self, whole):
        hit = self._memo_beats.get(id(whole))
        if hit is None or hit[0] is not whole:
            n = ls_beats(whole, self.cols, self.rules.ls_chains, self.tile_unit)
            hit = self._memo_beats[id(whole)] = (whole, n)
        return hit[1]

    def _region(self, ins):
        hit = self._memo_region.get(id(ins))
        if hit is None or hit[0] is not ins:
            region = (ins.tile_row, ins.tile_rows, ins.tile_col, ins.tile_cols)
            hit = self._memo_region[id(ins)] = (ins, region)
        return hit[1]

    def _latest_ls(self, ins):
        """``(plane, record, intact)`` of the latest accepted LS on the first PE group of the
        tile of ``ins``, in either plane (None: none), ``intact`` when every group of the tile
        still holds it."""
        best = None
        for p, plane in enumerate(self.planes):
            if plane.uniform is not None:
                held0, intact = plane.uniform.last_ls, True
            else:
                held = [plane.last_ls.get(g) for g in self._groups(ins)]
                held0 = held[0]
                intact = held0 is not None and all(h is not None and h[0] is held0[0] for h in held)
            if held0 is not None and (best is None or held0[0].index > best[1].index):
                best = (p, held0[0], intact)
        return best

    def _overlapped(self, plane, ins, t):
        """An instruction on a different, overlapping tile has beats in or after cycle t."""
        if not self.rules.parallel_tiles:
            return False
        region = self._region(ins)
        if plane.uniform is not None:
            busy = plane.uniform.busy
            return busy is not None and busy[1] >= t and busy[0] != region
        busy = plane.busy
        return any(
            busy.get(g, (None, -1))[1] >= t and busy[g][0] != region for g in self._groups(ins)
        )

    def issue(self, raw, earliest=0):
        """Issue the next instruction (an :class:`Instruction` or its word) no earlier than
        cycle ``earliest``; returns its :class:`Record` (also kept for :meth:`schedule`)."""
        rules, cols, planes = self.rules, self.cols, self.planes
        index = len(self.records)
        ins = raw if isinstance(raw, Instruction) else decode(int(raw))
        t0 = max(self.prev_issue + 1, earliest)
        whole = self._whole_of(ins)
        groups = self._groups
        plane_id = 0
        # the shape rules first (an MM checked against itself passes the stationary rules)
        bad = self._checked(ins, ins if ins.op == Op.MM else None)
        best = self._latest_ls(whole)
        if bad is None and ins.op == Op.MM:
            # its LoadStationary: the latest on its tile, in either plane
            if best is None:
                bad = self._checked(ins, None)
            else:
                plane_id, ls, intact = best
                bad = self._checked(ins, ls.instruction)
                if bad is None and not intact:
                    bad = (
                        Error.MODE_MISMATCH,
                        "the stationary of this MultiplyMoving's tile was partly replaced by a "
                        "LoadStationary on an overlapping tile",
                    )
        if bad is None and ins.op == Op.LS:
            plane_id = 0
            if rules.background_transpose:
                plane_id = ls_plane(ins, best[0] if best else None)
        if bad is None and self._overlapped(planes[plane_id], whole, t0):
            bad = (
                Error.TILE_BUSY,
                f"tile (rows {whole.tile_row}+{whole.tile_rows}, columns "
                f"{whole.tile_col}+{whole.tile_cols}) overlaps a different tile whose "
                f"instructions still have beats to come",
            )
        if bad is not None:
            rec = Record(index, ins, t0, bad[0], bad[1], error_cycle=t0 + ERROR_DELAY)
            self.records.append(rec)
            self.prev_issue = t0
            return rec
        ii = ins.beat_interval
        p = plane_id
        plane = planes[p]
        mine = groups(whole)
        region = self._region(whole)
        every = len(mine) == len(self.all_groups)
        if every and plane.uniform is not None and self.fold:
            rec = self._issue_uniform(plane, ins, whole, region, t0, p, index)
            self.records.append(rec)
            self.prev_issue = rec.issue
            return rec
        plane.materialize(self.all_groups)
        if ins.op == Op.LS:
            bank = plane.next_bank.get(mine[0], 0)
            t = max(
                [t0]
                + [plane.loader_free.get(g, 0) for g in mine]
                + [plane.last_read.get((g, bank), -1) + 1 for g in mine]
            )
            n_beats = self._ls_beats(whole)
            beats = range(t, t + n_beats * ii, ii)
            free = t + n_beats * ii
            rec = Record(index, ins, t, bank=bank, beats=beats, plane=p, busy_until=free)
            for g in mine:
                plane.loader_free[g] = free
                plane.next_bank[g] = bank ^ 1
                plane.last_ls[g] = (rec, bank, beats[-1])
                plane.busy[g] = (region, beats[-1])
        else:
            seq = max(plane.seq_free.get(g, 0) for g in mine)
            t = max(t0, plane.last_ls[mine[0]][2], seq)
            ii, slow = self._throttled(t, ii)
            beats = range(t, t + ins.n * ii, ii)
            free = t + max(ins.n, rules.floor(whole)) * ii
            self._occupied(t, free, slow, ii, ins.n, whole)
            out_lat = (
                (whole.tile_row + whole.tile_rows + cols + P_PREFIX + 1)
                if rules.parallel_tiles
                else self.lat
            )
            for g in mine:
                plane.seq_free[g] = free
                plane.last_read[(g, plane.last_ls[g][1])] = beats[-1]
                plane.busy[g] = (region, beats[-1])
            rec = Record(
                index,
                ins,
                t,
                bank=plane.last_ls[mine[0]][1],
                beats=beats,
                outputs=range(beats.start + out_lat, beats.stop + out_lat, ii),
                plane=p,
                busy_until=free,
                throttled=slow,
            )
        if every and self.fold:
            plane.collapse(self.all_groups)
        self.records.append(rec)
        self.prev_issue = t
        return rec

    def _issue_uniform(self, plane, ins, whole, region, t0, p, index):
        """:meth:`issue` of a whole-array instruction on a plane whose groups all hold the
        same state: the same rules, on the one copy of that state."""
        u = plane.uniform
        ii = ins.beat_interval
        if ins.op == Op.LS:
            bank = u.next_bank
            t = max(t0, u.loader_free, u.last_read.get(bank, -1) + 1)
            n_beats = self._ls_beats(whole)
            beats = range(t, t + n_beats * ii, ii)
            free = t + n_beats * ii
            rec = Record(index, ins, t, bank=bank, beats=beats, plane=p, busy_until=free)
            u.loader_free = free
            u.next_bank = bank ^ 1
            u.last_ls = (rec, bank, beats[-1])
            u.busy = (region, beats[-1])
            return rec
        t = max(t0, u.last_ls[2], u.seq_free)
        ii, slow = self._throttled(t, ii)
        beats = range(t, t + ins.n * ii, ii)
        free = t + max(ins.n, self.rules.floor(whole)) * ii
        self._occupied(t, free, slow, ii, ins.n, whole)
        out_lat = (
            (whole.tile_row + whole.tile_rows + self.cols + P_PREFIX + 1)
            if self.rules.parallel_tiles
            else self.lat
        )
        u.seq_free = free
        u.last_read[u.last_ls[1]] = beats[-1]
        u.busy = (region, beats[-1])
        return Record(
            index,
            ins,
            t,
            bank=u.last_ls[1],
            beats=beats,
            outputs=range(beats.start + out_lat, beats.stop + out_lat, ii),
            plane=p,
            busy_until=free,
            throttled=slow,
        )

    def _throttled(self, t, ii):
        """``(beat interval, throttled)`` of an MM issued in cycle ``t`` (:class:`Throttle`)."""
        if self.throttle is None or not self.throttle.at_issue(t):
            return ii, False
        return ii * self.throttle.t.factor, True

    def _occupied(self, t, free, slow, ii, n, whole):
        if self.throttle is not None:
            base = max(n, self.rules.floor(whole)) * (ii // self.throttle.t.factor if slow else ii)
            self.throttle.occupied(t, free, slow, free - t - base)


def _count_in(cycles, start, stop):
    """How many of ``cycles`` (a ``range`` with a positive step) lie in ``[start, stop)``."""
    if not cycles:
        return 0
    step = cycles.step
    lo = max(0, -(-(start - cycles.start) // step))
    hi = min(len(cycles), -(-(stop - cycles.start) // step))
    return max(0, hi - lo)


#: Most matmuls :func:`matmul_program` repeats, and the memory a schedule keeps per matmul
#: (its LS and MM records, measured with tracemalloc: 761-771 bytes from 10^4 to 10^5 matmuls).
MAX_REPEAT = 1_000_000
RECORD_BYTES = 800


def tile_positions(rows, cols, tile_rows, tile_cols):
    """The ``(tile_row, tile_col)`` of every tile of ``tile_rows x tile_cols`` on a ``rows x
    cols`` array, in row-major order (one tile when the size is the whole array)."""
    return [(r, c) for r in range(0, rows, tile_rows) for c in range(0, cols, tile_cols)]


def matmul_program(
    k,
    m,
    n,
    operation="bf16",
    *,
    repeat=1,
    tile=None,
    tiles=1,
    rows=128,
    cols=128,
    bf16_out=False,
    sparse=0,
):
    """``repeat`` nc_matmuls as NKI issues them (each its LoadStationary then its
    MultiplyMoving), matmul ``i`` on tile ``i % tiles`` of size ``tile`` (``(tile_rows,
    tile_cols)``, None: the whole array; :func:`tile_positions` order).  ``operation`` names
    a mode's matmul or transpose (:func:`ncrtl.model.modes.operations`); ``bf16_out``: the
    MMs accumulate into a BF16 PSUM tile (MX then takes N up to 1024).

    ``sparse``: 0 for dense matmuls, else the compression ratio ``R`` (2, 3, 4: 4:8, 4:12,
    4:16) of M:N sparse ones (``nc_matmul_sparse``): ``k`` counts the compressed rows (PE rows),
    a logical contraction of ``k * R`` rows.  ``ValueError`` with :func:`isa.check`'s rule for
    a ratio the operation's mode does not run, or sparse with a tile or a transpose; the other
    rules are the engine's (a broken one is a rejected instruction of :func:`simulate`)."""
    from ncrtl.model.modes import operation as operation_of

    pe_mode, transpose = operation_of(operation)
    tr, tc = tile or (rows, cols)
    if tr < 1 or tc < 1 or rows % tr or cols % tc:
        raise ValueError(
            f"tile size ({tr}, {tc}) must divide the {rows} x {cols} array into whole tiles"
        )
    places = tile_positions(rows, cols, tr, tc)
    if not 1 <= tiles <= len(places):
        raise ValueError(
            f"tiles={tiles} must be in 1..{len(places)} (tiles of ({tr}, {tc}) on the {rows} x "
            f"{cols} array)"
        )
    if not 1 <= repeat <= MAX_REPEAT:
        raise ValueError(
            f"repeat={repeat} must be in 1..{MAX_REPEAT}: the schedule keeps a record of each "
            f"instruction (about {RECORD_BYTES} bytes a matmul; {MAX_REPEAT} matmuls take about "
            f"{MAX_REPEAT * RECORD_BYTES / 1e9:.1f} GB); the steady state is reached after a "
            f"few"
        )
    sized = {} if (tr, tc) == (rows, cols) else {"tile_rows": tr, "tile_cols": tc}
    pairs = []  # one (LS, MM) pair per tile, shared by its repeats (instructions are immutable)
    for r0, c0 in places[:tiles]:
        common = dict(
            mode=Mode(pe_mode.code),
            k=k,
            m=m,
            transpose=transpose,
            sparse=sparse,
            tile_row=r0,
            tile_col=c0,
        )
        ls = Instruction(Op.LS, **common, **sized)
        mm = Instruction(Op.MM, n=n, bf16_out=bf16_out, **common, **sized)
        if sparse:
            _check_sparse(ls, rows, cols)
        pairs.append((ls, mm))
    prog = []
    for i in range(repeat):
        prog.extend(pairs[i % tiles])
    return prog


def steady_cycles(schedule):
    """Cycles per matmul in steady state: the spacing of the MMs' sequencer releases over the
    second half of the run (the whole run for fewer than 3 matmuls)."""
    mms = [r for r in schedule.records if r.accepted and r.instruction.op == Op.MM]
    if len(mms) < 3:
        return schedule.total_cycles / max(1, len(mms))
    ends = sorted(r.busy_until for r in mms)
    h = len(ends) // 2
    return (ends[-1] - ends[h - 1]) / (len(ends) - h)


def chrome_trace(schedule, clock_hz=CLOCK_HZ):
    """The schedule as a Chrome / Perfetto trace (a dict for ``json.dump``): a process per tile
    (and per plane), an LS and an MM track in each, a slice per instruction from its issue to
    the end of its loader (LS) or sequencer (MM) occupancy, its outputs in the MM slice's
    arguments; rejected instructions as instant events.  Times in microseconds at
    ``clock_hz``."""
    return {"traceEvents": list(chrome_trace_events(schedule, clock_hz)), "displayTimeUnit": "ns"}


def chrome_trace_events(schedule, clock_hz=CLOCK_HZ):
    """The events of :func:`chrome_trace` one at a time (a long run's trace is written as it
    is formed, never held whole)."""
    us = 1e6 / clock_hz
    procs, wholes = {}, {}
    for r in schedule.records:
        if r.instruction not in wholes:
            wholes[r.instruction] = r.instruction.whole(schedule.rows, schedule.cols)
        ins = wholes[r.instruction]
        key = (r.plane, ins.tile_row, ins.tile_rows, ins.tile_col, ins.tile_cols)
        if key not in procs:
            pid = procs[key] = len(procs)
            plane = " (background)" if r.plane else ""
            name = (
                f"tile rows {ins.tile_row}..{ins.tile_row + ins.tile_rows - 1}, cols "
                f"{ins.tile_col}..{ins.tile_col + ins.tile_cols - 1}{plane}"
            )
            yield {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}
            for tid, track in ((0, "LoadStationary"), (1, "MultiplyMoving")):
                yield (
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": pid,
                        "tid": tid,
                        "args": {"name": track},
                    }
                )
        op = "LS" if ins.op == Op.LS else "MM"
        event = {"pid": procs[key], "tid": int(ins.op == Op.MM), "ts": r.issue * us}
        event["args"] = {"index": r.index, "issue_cycle": r.issue, "k": ins.k, "m": ins.m}
        if ins.sparse:
            event["args"]["sparse"] = ins.sparse
        if not r.accepted:  # an instant event on its track
            event["args"]["error"] = f"{r.error.name}: {r.message}"
            yield {**event, "ph": "i", "name": f"{op} rejected", "s": "t"}
            continue
        if ins.op == Op.MM:
            first, last = r.outputs[0], r.outputs[-1]
            event["args"].update(n=ins.n, first_output_cycle=first, last_output_cycle=last)
        dur = (r.busy_until - r.issue) * us
        yield {**event, "ph": "X", "name": f"{op} {r.index}", "dur": dur}
