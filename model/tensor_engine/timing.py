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
   ``t >= t_LS' + M' * II'`` (the loader is free: ``t_LS'``, ``M'``, ``II'`` of the previous
   accepted LS) and ``t >= L + 1`` with ``L`` the cycle of the last moving beat of the latest
   accepted MM that reads the target bank (an LS may issue in the cycle after that beat, not in
   the same cycle).  Its beat ``j`` (``j < M``, carrying stationary column ``M - 1 - j``) is
   consumed in cycle ``t + j * II``: the first beat in the issue cycle.
5. **MM** (reads the bank of the last accepted LS) issues in cycle ``t`` when
   ``t >= t_MM' + max(N', 64) * II'`` (the sequencer is free: ``t_MM'``, ``N'``, ``II'`` of the
   previous accepted MM) and ``t >= `` the cycle of the last beat of its LS: **the first moving
   beat may share the cycle with the LS's last stationary beat**.  Its beat ``j`` (``j < N``) is
   consumed in cycle ``t + j * II``; the first beat in the issue cycle.
6. **Output** vector ``j`` of an MM is presented in cycle ``(beat j cycle) + latency(rows, cols)``
   with ``latency = rows + cols + P_PREFIX + 1``.
7. ``II`` is ``Instruction.beat_interval``: 4 for fp32 (matmul), 2 for fp32 transpose, else 1.

Rules 4 and 5 are one principle: *a stationary beat consumed in cycle t is used by the moving
beats consumed in cycles >= t and by none consumed before t*, in every PE.  The datapath must
honour it: the bank contents of PE ``(r, c)`` as updated by stationary beat ``t`` become visible
exactly in cycle ``t + r + c + 1``, on the moving wavefront (moving beat ``t`` is in
``x_reg[r][c]`` then).  A whole-row shift at the row skew alone would be too early for columns
``c >= 1``, where the previous MM's last beats are still passing.

Consequences: back-to-back MMs on one stationary start every ``max(N, 64) * II`` cycles; an LS
issued right after an MM is hidden (the next MM follows with no bubble) iff
``M <= max(N, 64)`` (same ``II``); a lone LS + MM from cycle 0 presents its first output in cycle
``(M - 1) * II + latency`` (``M >= 2``).

A transpose whose moving beat is not a selection column is a data error the RTL flags while
streaming; this model has no data and does not predict it.
"""

from dataclasses import dataclass, field

from ncrtl.model.modes import get_mode, mode_by_code

from .isa import MIN_MM_CYCLES, Error, Instruction, Op, check, decode

__all__ = [
    "P_PREFIX",
    "ERROR_DELAY",
    "CLOCK_HZ",
    "latency",
    "simulate",
    "Record",
    "Schedule",
    "macs_per_beat",
    "peak_macs_per_cycle",
    "peak_tflops",
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
    ``K * M`` times the mode's products per PE step."""
    if ins.op != Op.MM or ins.transpose:
        return 0
    return ins.k * ins.m * ins.pe_mode.products


def peak_macs_per_cycle(rows, cols, mode):
    """Peak MACs per cycle of a mode (a :class:`Mode`, code or name): ``rows*cols`` times its
    products per step over its beat interval (x2 double_row, /4 fp32)."""
    pe_mode = get_mode(mode) if isinstance(mode, str) else mode_by_code(mode)
    return pe_mode.macs_per_cycle(rows, cols)


def peak_tflops(rows, cols, mode, clock_hz=CLOCK_HZ):
    """Peak TFLOPS (2 FLOP per MAC) of a mode: 78.6 bf16, 157.3 double_row, 19.7 fp32 (128x128)."""
    return 2 * peak_macs_per_cycle(rows, cols, mode) * clock_hz / 1e12


@dataclass(frozen=True)
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
    beats : tuple of int
        Cycles of its stationary (LS; beat ``j`` is column ``M-1-j``) or moving (MM) beats.
    outputs : tuple of int
        Cycles its output vectors are presented (MM; vector ``j`` from moving beat ``j``).
    """

    index: int
    instruction: Instruction
    issue: int
    error: Error = Error.NONE
    message: str = ""
    error_cycle: int = None
    bank: int = None
    beats: tuple = ()
    outputs: tuple = ()

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

    @property
    def total_cycles(self):
        """Cycles from cycle 0 up to and including the last event (0 for an empty program)."""
        return 1 + max(r.last_cycle for r in self.records) if self.records else 0

    @property
    def macs(self):
        """MACs of the whole program (accepted MMs; transposes count 0)."""
        return sum(
            macs_per_beat(r.instruction) * len(r.beats)
            for r in self.records
            if r.accepted and r.instruction.op == Op.MM
        )

    def mm_window(self):
        """``(start, stop)``: first MM issue to the end of the last MM's sequencer occupancy.

        The steady-state window: ``stop`` is ``t + max(N, 64) * II`` of the last accepted MM.
        None if no MM was accepted.
        """
        mms = [r for r in self.records if r.accepted and r.instruction.op == Op.MM]
        if not mms:
            return None
        last = mms[-1].instruction
        return mms[0].issue, mms[-1].issue + max(last.n, MIN_MM_CYCLES) * last.beat_interval

    def _window(self, start, stop):
        start = 0 if start is None else start
        stop = self.total_cycles if stop is None else stop
        if stop <= start:
            raise ValueError(f"empty window [{start}, {stop})")
        macs = sum(
            macs_per_beat(r.instruction) * sum(start <= b < stop for b in r.beats)
            for r in self.records
            if r.accepted and r.instruction.op == Op.MM
        )
        return macs, stop - start

    def utilization(self, start=None, stop=None):
        """MACs per cycle in ``[start, stop)`` over the peak ``rows * cols``.

        Counts the MACs of the moving beats consumed in the window (default: the whole program).
        Steady state reaches 1.0 in bf16/fp16/tf32/fp8, 2.0 in double_row, 0.25 in fp32.
        """
        macs, cycles = self._window(start, stop)
        return macs / (cycles * self.rows * self.cols)

    def tflops(self, start=None, stop=None, clock_hz=CLOCK_HZ):
        """Equivalent TFLOPS (2 FLOP per MAC) in ``[start, stop)`` at ``clock_hz``."""
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


def simulate(program, rows=128, cols=128, *, tile_unit=32):
    """Timing of ``program`` on a ``rows x cols`` array (rules in the module docstring).

    Parameters
    ----------
    program : iterable of Instruction or int
        The instruction stream (ints are instruction words, see :func:`isa.decode`).
    rows, cols : int
    tile_unit : int
        The engine's tile unit (32 on the hardware; :func:`isa.check`).

    Returns
    -------
    Schedule
    """
    lat = latency(rows, cols)
    records = []
    prev_issue = -1
    loader_free = 0  # first cycle the loader can take a new LS
    seq_free = 0  # first cycle the moving sequencer can take a new MM
    next_bank = 0  # bank of the next accepted LS
    last_ls = None  # (instruction, bank, cycle of its last beat)
    bank_last_read = [-1, -1]  # last moving-beat cycle of the latest MM reading each bank
    for index, ins in enumerate(program):
        if not isinstance(ins, Instruction):
            ins = decode(int(ins))
        t = prev_issue + 1
        bad = check(ins, rows, cols, last_ls[0] if last_ls else None, tile_unit=tile_unit)
        if bad is not None:
            records.append(Record(index, ins, t, bad[0], bad[1], error_cycle=t + ERROR_DELAY))
            prev_issue = t
            continue
        ii = ins.beat_interval
        if ins.op == Op.LS:
            bank = next_bank
            t = max(t, loader_free, bank_last_read[bank] + 1)
            beats = tuple(t + j * ii for j in range(ins.m))
            loader_free = t + ins.m * ii
            next_bank ^= 1
            last_ls = (ins, bank, beats[-1])
            records.append(Record(index, ins, t, bank=bank, beats=beats))
        else:
            _, bank, ls_last = last_ls
            t = max(t, seq_free, ls_last)
            beats = tuple(t + j * ii for j in range(ins.n))
            seq_free = t + max(ins.n, MIN_MM_CYCLES) * ii
            bank_last_read[bank] = beats[-1]
            records.append(
                Record(index, ins, t, bank=bank, beats=beats, outputs=tuple(b + lat for b in beats))
            )
        prev_issue = t
    return Schedule(rows, cols, tuple(records))
