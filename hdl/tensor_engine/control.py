"""Tensor Engine control: instruction issue and validation, LS loader, MM sequencer, output info.

Implements the timing conventions of docs/tensor_engine.md (``ncrtl.model.tensor_engine.timing``)
cycle for cycle:

* one instruction word per cycle at most, in order; a rejected instruction (``isa.check`` rules,
  same order, same codes) is taken at once and raises ``o_error`` one cycle later;
* an LS issues when the loader is free (``B * II`` cycles after the previous LS issued, ``B``
  its beats: the most columns one of its LoadStationary chains loads) and no moving beat of an
  MM reading its target bank is still to come (its last beat strictly before); its first beat
  is consumed in the issue cycle, then one every ``II`` cycles;
* an MM issues when the sequencer is free (``max(N, min(64, M)) * II`` cycles after the previous
  MM) and its LS has no stationary beat left after this cycle (the first moving beat may share
  the cycle with the last stationary beat); its first beat is consumed in the issue cycle;
* a beat that is due but whose stream is not valid stalls its loader / sequencer (the beat and
  everything after it move later: bubbles), and ``en = 0`` (output backpressure) freezes all.

The moving beat goes to the array with its tag combinationally in the cycle it is consumed; the
output info (valid, last, column range) follows it through a ``latency``-stage delay line.
"""

from amaranth.hdl import Cat, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import bits_for_range, equals
from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.model.fp import get_format
from ncrtl.model.modes import ENGINE_MODES, FORMAT_BITS, MODE_BITS, TILE_SIZES
from ncrtl.model.tensor_engine.isa import FIELDS, MAX_N_ANY, MIN_MM_CYCLES, Error, Op
from ncrtl.model.tensor_engine.timing import LS_CHAINS, chain_count, chain_width

from .array import beat_tag_layout
from .pe import LANE_WIDTH, LS_CTL_LAYOUT, WIDE_FORMATS, decode_tag, one_code

__all__ = ["TensorControl", "INSTR_LAYOUT", "ERROR_SHAPE", "check_logic"]

#: The instruction word (``isa.FIELDS``, LSB first).
INSTR_LAYOUT = data.StructLayout({name: width for name, width in FIELDS})

#: Shape of ``o_error_code``.
ERROR_SHAPE = bits_for_range(0, max(Error))

#: The longest beat interval of any engine mode (fp32: 4 cycles per beat).
MAX_INTERVAL = max(max(m.interval(False), m.interval(True) or 1) for m in ENGINE_MODES)

assert all(set(m.row_tiles) | set(m.col_tiles) <= set(TILE_SIZES) for m in ENGINE_MODES), (
    "the control places tiles of the sizes TILE_SIZES only"
)


def mode_rules(m, ins, tile_unit):
    """The instruction's mode as the mode table describes it, as signals: ``known`` (a mode the
    engine serves), ``bad_fmt`` (a format index the mode lacks), ``no_transpose``,
    ``no_tiling``, ``row_size_ok`` / ``col_size_ok`` (the tile size, scaled by ``tile_unit /
    32``, is one the mode accepts), ``k_misaligned`` / ``m_misaligned`` (K is no multiple of
    the mode's K granule, M of its M multiple: MX), ``n_over`` (N above the mode's limit for the
    instruction's result dtype) and ``ii`` (cycles per beat of this instruction)."""
    rules = {
        name: Signal(name=f"mode_{name}")
        for name in (
            "known",
            "bad_fmt",
            "no_transpose",
            "no_tiling",
            "row_size_ok",
            "col_size_ok",
            "k_misaligned",
            "m_misaligned",
            "n_over",
        )
    }
    ii = Signal(range(MAX_INTERVAL + 1), name="mode_ii")
    size = bits_for_range(0, 255)
    tr = Signal(size, name="mode_tile_rows")
    tc = Signal(size, name="mode_tile_cols")
    m.d.comb += [tr.eq(ins.tile_rows), tc.eq(ins.tile_cols)]

    def one_of(value, sizes):
        hits = [value == s * tile_unit // 32 for s in sizes]
        return Cat(*hits).any() if hits else Const(0, 1)

    def not_multiple(value, step):
        if step == 1:
            return Const(0, 1)
        if step & (step - 1) == 0:
            return value[: step.bit_length() - 1].any()
        return value % step != 0

    with m.Switch(ins.mode):
        for pe_mode in ENGINE_MODES:
            with m.Case(pe_mode.code):
                bad = []
                for field, formats in (
                    (ins.fmt_s, pe_mode.formats_s),
                    (ins.fmt_m, pe_mode.formats_m),
                ):
                    if len(formats) < 1 << FORMAT_BITS:
                        bad.append(field >= len(formats))
                m.d.comb += [
                    rules["known"].eq(1),
                    rules["bad_fmt"].eq(Cat(*bad).any() if bad else 0),
                    rules["no_transpose"].eq(not pe_mode.transposes),
                    rules["no_tiling"].eq(not pe_mode.tiles),
                    rules["row_size_ok"].eq(one_of(tr, pe_mode.row_tiles)),
                    rules["col_size_ok"].eq(one_of(tc, pe_mode.col_tiles)),
                    rules["k_misaligned"].eq(not_multiple(ins.k, pe_mode.k_step(tile_unit))),
                    rules["m_misaligned"].eq(not_multiple(ins.m, pe_mode.m_multiple)),
                    rules["n_over"].eq(
                        ins.n > Mux(ins.bf16_out, pe_mode.n_limit(True), pe_mode.n_limit(False))
                    ),
                    ii.eq(Mux(ins.transpose, pe_mode.interval(True) or 1, pe_mode.interval(False))),
                ]
        with m.Default():
            m.d.comb += [v.eq(0) for v in rules.values()] + [ii.eq(0)]
    return rules, ii


def check_logic(m, ins, rows, cols, tile_unit, st_valid, st):
    """Hardware ``isa.check``: the code of the first rule ``ins`` breaks (0 if none).

    ``ins`` is an :data:`INSTR_LAYOUT` view, ``st`` a view of the last accepted LS (fields
    ``mode, fmt_s, k, m, transpose, tile_row, tile_rows, tile_col, tile_cols`` with the tile
    sizes already made whole), ``st_valid`` whether there is one.  Tile sizes are the mode
    table's scaled by ``tile_unit / 32`` (32 and 64 on the hardware).  Returns
    ``(code, tr, tc, ii)``: the error code signal, the instruction's whole tile sizes and its
    cycles per beat.
    """
    size = bits_for_range(0, 255)
    tr = Signal(size, name="chk_tile_rows")
    tc = Signal(size, name="chk_tile_cols")
    m.d.comb += [
        tr.eq(Mux(ins.tile_rows.any(), ins.tile_rows, rows)),
        tc.eq(Mux(ins.tile_cols.any(), ins.tile_cols, cols)),
    ]
    whole = Signal(INSTR_LAYOUT, name="chk_whole")
    m.d.comb += [whole.eq(ins), whole.tile_rows.eq(tr), whole.tile_cols.eq(tc)]
    rules, ii = mode_rules(m, whole, tile_unit)
    row_t = Signal(name="chk_row_tiled")
    col_t = Signal(name="chk_col_tiled")
    tiled = Signal(name="chk_tiled")
    m.d.comb += [
        row_t.eq(tr != rows),
        col_t.eq(tc != cols),
        tiled.eq(row_t | col_t | ins.tile_row.any() | ins.tile_col.any()),
    ]
    bad_combo = Signal(name="chk_mode_combo")
    m.d.comb += bad_combo.eq((ins.transpose & rules["no_transpose"]) | (tiled & rules["no_tiling"]))
    u = tile_unit
    sizes = sorted({s * u // 32 for s in TILE_SIZES})

    def pos_bad(name, pos, t, whole_axis, total):
        """``pos % t or pos + t > total`` for ``t`` one of the tile sizes or, when not tiled on
        this axis, ``t == total`` (then: ``pos != 0``)."""
        low = Signal(name=f"chk_{name}_bad")
        mis = Const(0, 1)
        for s in sizes:  # t is one of them, or the size check flags the instruction
            if s & (s - 1) == 0:
                lb = s.bit_length() - 1
                off = pos[:lb].any() if lb else Const(0, 1)
            else:
                off = pos % s != 0
            mis = Mux(t == s, off, mis)
        m.d.comb += low.eq(Mux(whole_axis, pos.any(), mis | (pos + t > total)))
        return low

    bad_tile = Signal(name="chk_tile")
    row_size_bad = ~rules["row_size_ok"] | ins.tile_col.any()
    col_size_bad = ~rules["col_size_ok"] | ins.tile_row.any()
    m.d.comb += bad_tile.eq(
        tiled
        & (
            (row_t & col_t)
            | (row_t & row_size_bad)
            | (col_t & col_size_bad)
            | pos_bad("tile_row", ins.tile_row, tr, ~row_t, rows)
            | pos_bad("tile_col", ins.tile_col, tc, ~col_t, cols)
        )
    )
    bad_k = Signal(name="chk_k")
    bad_m = Signal(name="chk_m")
    bad_n = Signal(name="chk_n")
    m.d.comb += [
        bad_k.eq(equals(ins.k, 0) | (ins.k > tr) | rules["k_misaligned"]),
        bad_m.eq(equals(ins.m, 0) | (ins.m > tc) | rules["m_misaligned"]),
        bad_n.eq((ins.op == Op.MM) & (equals(ins.n, 0) | rules["n_over"])),
    ]
    bad_nost = Signal(name="chk_no_stationary")
    m.d.comb += bad_nost.eq((ins.op == Op.MM) & ~st_valid)
    same = Signal(name="chk_same_as_ls")
    m.d.comb += same.eq(
        (st.mode == ins.mode)
        & (st.fmt_s == ins.fmt_s)
        & (st.k == ins.k)
        & (st.m == ins.m)
        & (st.transpose == ins.transpose)
        & (st.tile_row == ins.tile_row)
        & (st.tile_rows == tr)
        & (st.tile_col == ins.tile_col)
        & (st.tile_cols == tc)
    )
    bad_mismatch = Signal(name="chk_mismatch")
    m.d.comb += bad_mismatch.eq((ins.op == Op.MM) & ~same)
    code = Signal(ERROR_SHAPE, name="chk_code")
    checks = [
        (~rules["known"], Error.MODE),
        (rules["bad_fmt"], Error.FORMAT),
        (bad_combo, Error.MODE_COMBO),
        (bad_tile, Error.TILE),
        (bad_k, Error.K_RANGE),
        (bad_m, Error.M_RANGE),
        (bad_n, Error.N_RANGE),
        (bad_nost, Error.NO_STATIONARY),
        (bad_mismatch, Error.MODE_MISMATCH),
    ]
    with m.If(checks[0][0]):
        m.d.comb += code.eq(checks[0][1])
    for cond, err in checks[1:]:
        with m.Elif(cond):
            m.d.comb += code.eq(err)
    with m.Else():
        m.d.comb += code.eq(Error.NONE)
    return code, tr, tc, ii


#: The last accepted LS, as the MM rules compare it (tile sizes whole).
LS_DESC_LAYOUT = data.StructLayout(
    {
        "mode": MODE_BITS,
        "fmt_s": FORMAT_BITS,
        "k": 8,
        "m": 8,
        "transpose": 1,
        "tile_row": 8,
        "tile_rows": 8,
        "tile_col": 8,
        "tile_cols": 8,
    }
)

#: Per-output-vector info carried through the latency delay line.
OUT_INFO_LAYOUT = data.StructLayout({"valid": 1, "last": 1, "col_lo": 8, "col_hi": 9})


class TensorControl(wiring.Component):
    """Issue, validation, LS loader, MM sequencer, selection check and output info.

    Parameters
    ----------
    rows, cols : int
        Array size.
    latency : int
        Cycles from a moving beat to its output vector (the array's latency).
    tile_unit : int
        Row / column tile sizes are ``tile_unit`` and ``2 * tile_unit`` (32 / 64 on the
        hardware); column tiles start at a multiple of ``tile_unit`` columns.

    Interface
    ---------
    en : In(1, init=1)
        Global clock enable (0 freezes every register; no handshake happens).
    instr : In(stream.Signature(INSTR_LAYOUT))
        Instructions.
    stationary : In(stream.Signature(chains * rows * LANE_WIDTH))
        Stationary beats, a lane word per row for each LoadStationary chain (chain ``k``'s row
        ``r`` in lane ``k * rows + r``); the payload goes to the array as ``o_ls``.
    moving : In(stream.Signature(rows * LANE_WIDTH))
        Moving beats; the payload is checked (transpose selection) and passed on as ``o_x``.
    o_x : Out(rows * LANE_WIDTH), o_tag : Out(beat_tag_layout(rows))
        Moving beat and tag for the array (``o_tag.pe.valid`` = a beat was consumed).
    o_ls : Out(chains * rows * LANE_WIDTH), o_ls_ctl : Out(data.ArrayLayout(LS_CTL_LAYOUT, chains))
        LS beat and control per chain for the array (``valid``: the chain has a column in the
        stationary beat consumed).

    o_info : Out(OUT_INFO_LAYOUT)
        Info of the output vector in the array's output register (``latency`` cycles after its
        beat): valid, last of its MM, its column range ``[col_lo, col_hi)``.
    o_error, o_error_code : Out
        One-cycle (enabled cycle) error strobe and its ``isa.Error`` code.

    Attributes
    ----------
    chain_width, chains : int
        Columns per LoadStationary chain (:func:`ncrtl.model.tensor_engine.timing.chain_width`)
        and the number of chains.
    """

    @validated_init
    def __init__(self, rows, cols, latency, *, tile_unit=32):
        # 8-bit instruction fields: at most 255 rows and columns.
        check_int(rows, "TensorControl rows", minimum=1, maximum=255)
        check_int(cols, "TensorControl cols", minimum=1, maximum=255)
        check_int(latency, "TensorControl latency", minimum=1)
        check_int(tile_unit, "TensorControl tile_unit", minimum=1)
        if cols > LS_CHAINS * tile_unit:
            raise ValueError(
                f"TensorControl with {cols} columns at tile_unit {tile_unit}: column tiles start "
                f"at multiples of tile_unit, each on its own LoadStationary chain, at most "
                f"{LS_CHAINS} per row"
            )
        self.rows, self.cols, self.latency, self.tile_unit = rows, cols, latency, tile_unit
        self.chain_width = chain_width(cols, tile_unit)
        self.chains = chain_count(cols, tile_unit)
        C = self.chains
        super().__init__(
            {
                "en": In(1, init=1),
                "instr": In(stream.Signature(INSTR_LAYOUT)),
                "stationary": In(stream.Signature(C * rows * LANE_WIDTH)),
                "moving": In(stream.Signature(rows * LANE_WIDTH)),
                "o_x": Out(rows * LANE_WIDTH),
                "o_tag": Out(beat_tag_layout(rows)),
                "o_ls": Out(C * rows * LANE_WIDTH),
                "o_ls_ctl": Out(data.ArrayLayout(LS_CTL_LAYOUT, C)),
                "o_info": Out(OUT_INFO_LAYOUT),
                "o_error": Out(1),
                "o_error_code": Out(ERROR_SHAPE),
            }
        )

    def elaborate(self, platform):
        m = Module()
        live = Signal(name="live")  # a cycle in which handshakes may happen
        m.d.comb += live.eq(self.en & ~ResetSignal())
        s = _State(self.rows, self.chains)
        issue = self._issue(m, s, live)
        self._loader(m, s, live, issue)
        sel_error = self._sequencer(m, s, live, issue)
        self._accept(m, s, issue)
        self._errors(m, issue, sel_error)
        return m

    def _issue(self, m, s, live):
        """Check the presented instruction and decide whether it issues (or is dropped) now."""
        ins = self.instr.payload
        code, tr, tc, ii = check_logic(
            m, ins, self.rows, self.cols, self.tile_unit, s.st_valid, s.st
        )
        rejected = Signal(name="rejected")
        m.d.comb += rejected.eq(code != Error.NONE)
        ls_free = Signal(name="ls_free")
        mm_free = Signal(name="mm_free")
        m.d.comb += [
            ls_free.eq(equals(s.ls_beats, 0) & equals(s.ls_phase, 0)),
            mm_free.eq(equals(s.mm_slots, 0) & equals(s.mm_phase, 0)),
        ]
        # LS: the loader is free and no moving beat reading the target bank is still to come.
        ls_can = Signal(name="ls_can_issue")
        m.d.comb += ls_can.eq(ls_free & ~(s.mm_beats.any() & (s.mm_bank == s.next_bank)))
        # MM: the sequencer is free and the LS has no beat after this cycle.
        ls_last_now = Signal(name="ls_last_beat_now")
        m.d.comb += ls_last_now.eq(
            (s.ls_beats == 1) & equals(s.ls_phase, 0) & self.stationary.valid
        )
        mm_can = Signal(name="mm_can_issue")
        m.d.comb += mm_can.eq(mm_free & (equals(s.ls_beats, 0) | ls_last_now))
        ready = Signal(name="instr_ready")
        m.d.comb += ready.eq(live & (rejected | Mux(ins.op == Op.LS, ls_can, mm_can)))
        take = Signal(name="instr_take")
        m.d.comb += [take.eq(self.instr.valid & ready), self.instr.ready.eq(ready)]
        ls_issue = Signal(name="ls_issue")
        mm_issue = Signal(name="mm_issue")
        m.d.comb += [
            ls_issue.eq(take & ~rejected & (ins.op == Op.LS)),
            mm_issue.eq(take & ~rejected & (ins.op == Op.MM)),
        ]
        return dict(
            code=code, tr=tr, tc=tc, ii=ii, rejected=rejected, take=take, ls=ls_issue, mm=mm_issue
        )

    def _loader(self, m, s, live, issue):
        """The LoadStationary loader: one stationary beat every ``II`` cycles from the issue
        cycle on (a new LS starts in its issue cycle); a missing beat stalls it.  The chains
        load together: chain ``k`` has a column in the first ``cnt_k`` of the LS's ``B = max
        cnt_k`` beats (:func:`~ncrtl.model.tensor_engine.timing.ls_chain_columns`)."""
        ins, en = self.instr.payload, self.en
        C, G = self.chains, self.chain_width
        e_beats = Signal.like(s.ls_beats, name="e_ls_beats")
        e_phase = Signal.like(s.ls_phase, name="e_ls_phase")
        e_ii = Signal.like(s.ls_ii, name="e_ls_ii")
        e_bank = Signal(name="e_ls_bank")
        e_lim = [Signal.like(s.ls_lim[k], name=f"e_ls_lim{k}") for k in range(C)]
        # Per chain: the columns it loads of [tile_col, tile_col + M) (a column tile starts at a
        # chain: chains are tile_unit columns wide).
        c0 = ins.tile_col
        hi = Signal(9, name="ls_col_hi")
        m.d.comb += hi.eq(c0 + ins.m)
        cnt = []
        for k in range(C):
            lo_k = Signal(9, name=f"ls_lo{k}")
            hi_k = Signal(9, name=f"ls_hi{k}")
            n_k = Signal(range(G + 1), name=f"ls_cnt{k}")
            top = (k + 1) * G
            m.d.comb += [
                lo_k.eq(Mux(c0 > k * G, c0, k * G) if k else c0),
                hi_k.eq(Mux(hi < top, hi, top)),
                n_k.eq(Mux(hi_k > lo_k, hi_k - lo_k, 0)),
            ]
            cnt.append(n_k)
        most = cnt[0]
        for k in range(1, C):
            bigger = Signal(range(G + 1), name=f"ls_most{k}")
            m.d.comb += bigger.eq(Mux(cnt[k] > most, cnt[k], most))
            most = bigger
        with m.If(issue["ls"]):
            m.d.comb += [
                e_beats.eq(most),
                e_phase.eq(0),
                e_ii.eq(issue["ii"]),
                e_bank.eq(s.next_bank),
            ]
            m.d.comb += [e_lim[k].eq(most - cnt[k]) for k in range(C)]
        with m.Else():
            m.d.comb += [
                e_beats.eq(s.ls_beats),
                e_phase.eq(s.ls_phase),
                e_ii.eq(s.ls_ii),
                e_bank.eq(s.ls_bank),
            ]
            m.d.comb += [e_lim[k].eq(s.ls_lim[k]) for k in range(C)]
        due = Signal(name="ls_due")
        m.d.comb += due.eq(e_beats.any() & equals(e_phase, 0))
        m.d.comb += self.stationary.ready.eq(live & due)
        beat = Signal(name="ls_beat")
        m.d.comb += beat.eq(live & due & self.stationary.valid)
        for k in range(C):
            m.d.comb += [
                self.o_ls_ctl[k].valid.eq(beat & (e_beats > e_lim[k])),
                self.o_ls_ctl[k].bank.eq(e_bank),
            ]
        m.d.comb += self.o_ls.eq(self.stationary.payload)
        with m.If(en):
            m.d.sync += [s.ls_ii.eq(e_ii), s.ls_bank.eq(e_bank)]
            m.d.sync += [s.ls_lim[k].eq(e_lim[k]) for k in range(C)]
            with m.If(beat):
                m.d.sync += [s.ls_beats.eq(e_beats - 1), s.ls_phase.eq(e_ii - 1)]
            with m.Elif(~due):
                m.d.sync += [
                    s.ls_beats.eq(e_beats),
                    s.ls_phase.eq(Mux(e_phase.any(), e_phase - 1, 0)),
                ]
            with m.Else():  # stalled on a missing stationary beat
                m.d.sync += [s.ls_beats.eq(e_beats), s.ls_phase.eq(e_phase)]

    def _sequencer(self, m, s, live, issue):
        """The MultiplyMoving sequencer: ``max(N, min(64, M))`` beat slots of ``II`` cycles, a moving
        beat in each of the first ``N`` (a missing beat stalls it); the beat and its tag go to
        the array, its output info down the latency line.  Returns the selection-error
        strobe."""
        ins, en = self.instr.payload, self.en
        e_beats = Signal.like(s.mm_beats, name="e_mm_beats")
        e_slots = Signal.like(s.mm_slots, name="e_mm_slots")
        e_phase = Signal.like(s.mm_phase, name="e_mm_phase")
        e_ii = Signal.like(s.mm_ii, name="e_mm_ii")
        e_tag = Signal(beat_tag_layout(self.rows), name="e_mm_tag")
        e_cols = Signal(OUT_INFO_LAYOUT, name="e_mm_cols")
        e_flagged = Signal(name="e_mm_flagged")
        e_bank = Signal(name="e_mm_bank")
        new_tag = Signal(beat_tag_layout(self.rows), name="new_mm_tag")
        pe_tag = decode_tag(
            m,
            ins.mode,
            ins.fmt_s,
            ins.fmt_m,
            ins.transpose,
            valid=1,
            bank=~s.next_bank,
            first_row=0,
            name="new_pe_tag",
        )
        m.d.comb += [
            new_tag.pe.eq(pe_tag),
            new_tag.row_lo.eq(ins.tile_row),
            new_tag.row_hi.eq(ins.tile_row + ins.k),
        ]
        # the least slots: min(64, M) (the documented back-to-back cost max(min(64, M), N))
        floor = Signal(range(MIN_MM_CYCLES + 1), name="mm_floor")
        m.d.comb += floor.eq(Mux(ins.m > MIN_MM_CYCLES, MIN_MM_CYCLES, ins.m))
        with m.If(issue["mm"]):
            m.d.comb += [
                e_beats.eq(ins.n),
                e_slots.eq(Mux(ins.n > floor, ins.n, floor)),
                e_phase.eq(0),
                e_ii.eq(issue["ii"]),
                e_tag.eq(new_tag),
                e_cols.col_lo.eq(ins.tile_col),
                e_cols.col_hi.eq(ins.tile_col + ins.m),
                e_flagged.eq(0),
                e_bank.eq(~s.next_bank),
            ]
        with m.Else():
            m.d.comb += [
                e_beats.eq(s.mm_beats),
                e_slots.eq(s.mm_slots),
                e_phase.eq(s.mm_phase),
                e_ii.eq(s.mm_ii),
                e_tag.eq(s.mm_tag),
                e_cols.eq(s.mm_cols),
                e_flagged.eq(s.mm_flagged),
                e_bank.eq(s.mm_bank),
            ]
        slot_start = Signal(name="mm_slot_start")
        due = Signal(name="mm_due")
        m.d.comb += [
            slot_start.eq(e_slots.any() & equals(e_phase, 0)),
            due.eq(slot_start & e_beats.any()),
        ]
        m.d.comb += self.moving.ready.eq(live & due)
        beat = Signal(name="mm_beat")
        m.d.comb += beat.eq(live & due & self.moving.valid)
        stalled = Signal(name="mm_stalled")
        m.d.comb += stalled.eq(due & ~beat)

        # Transpose: every lane of the tile must be 0 or 1 in the moving format, one 1 at most.
        sel_bad = self._selection_check(m, e_tag)
        zero_beat = Signal(name="zero_beat")
        m.d.comb += zero_beat.eq(e_tag.pe.transpose & sel_bad)
        m.d.comb += self.o_x.eq(Mux(zero_beat, 0, self.moving.payload))
        m.d.comb += [self.o_tag.eq(e_tag), self.o_tag.pe.valid.eq(beat)]
        new_flag = Signal(name="sel_error_now")
        m.d.comb += new_flag.eq(beat & zero_beat & ~e_flagged)

        with m.If(en):
            m.d.sync += [
                s.mm_ii.eq(e_ii),
                s.mm_tag.eq(e_tag),
                s.mm_cols.eq(e_cols),
                s.mm_bank.eq(e_bank),
                s.mm_flagged.eq(e_flagged | new_flag),
            ]
            with m.If(stalled):
                m.d.sync += [s.mm_beats.eq(e_beats), s.mm_slots.eq(e_slots), s.mm_phase.eq(e_phase)]
            with m.Elif(slot_start):
                m.d.sync += [
                    s.mm_beats.eq(e_beats - beat),
                    s.mm_slots.eq(e_slots - 1),
                    s.mm_phase.eq(e_ii - 1),
                ]
            with m.Else():
                m.d.sync += [
                    s.mm_beats.eq(e_beats),
                    s.mm_slots.eq(e_slots),
                    s.mm_phase.eq(Mux(e_phase.any(), e_phase - 1, 0)),
                ]

        # The output info follows the beat through a `latency`-stage delay line.
        info = Signal(OUT_INFO_LAYOUT, name="info_in")
        m.d.comb += [
            info.valid.eq(beat),
            info.last.eq(e_beats == 1),
            info.col_lo.eq(e_cols.col_lo),
            info.col_hi.eq(e_cols.col_hi),
        ]
        value = info
        for i in range(self.latency):
            stage = Signal(OUT_INFO_LAYOUT, name=f"info_d{i + 1}")
            with m.If(en):
                m.d.sync += stage.eq(value)
            value = stage
        m.d.comb += self.o_info.eq(value)
        return new_flag

    def _accept(self, m, s, issue):
        """Architectural state of an accepted LS: the bank toggles, the LS is remembered."""
        ins = self.instr.payload
        with m.If(self.en & issue["ls"]):
            m.d.sync += [
                s.next_bank.eq(~s.next_bank),
                s.st_valid.eq(1),
                s.st.mode.eq(ins.mode),
                s.st.fmt_s.eq(ins.fmt_s),
                s.st.k.eq(ins.k),
                s.st.m.eq(ins.m),
                s.st.transpose.eq(ins.transpose),
                s.st.tile_row.eq(ins.tile_row),
                s.st.tile_rows.eq(issue["tr"]),
                s.st.tile_col.eq(ins.tile_col),
                s.st.tile_cols.eq(issue["tc"]),
            ]

    def _errors(self, m, issue, sel_error):
        """``o_error``: registered, high in one enabled cycle per rejected instruction and per
        transpose MM with a bad selection beat (an instruction error wins the cycle; the
        selection error follows in the next)."""
        en = self.en
        err = Signal(name="err_pending")
        err_code = Signal(ERROR_SHAPE, name="err_code")
        sel_pending = Signal(name="sel_err_pending")
        instr_err = Signal(name="instr_err")
        m.d.comb += instr_err.eq(issue["take"] & issue["rejected"])
        with m.If(en):
            with m.If(instr_err):
                m.d.sync += [
                    err.eq(1),
                    err_code.eq(issue["code"]),
                    sel_pending.eq(sel_pending | sel_error),
                ]
            with m.Elif(sel_pending | sel_error):
                m.d.sync += [err.eq(1), err_code.eq(Error.SELECTION), sel_pending.eq(0)]
            with m.Else():
                m.d.sync += [err.eq(0), err_code.eq(Error.NONE)]
        m.d.comb += [self.o_error.eq(err & en), self.o_error_code.eq(err_code)]

    def _selection_check(self, m, tag):
        """1 when the moving payload is not a selection column over the rows
        ``[row_lo, row_hi)`` in the moving format of ``tag``."""
        one = Signal(LANE_WIDTH, name="sel_one_code")
        mask = Signal(LANE_WIDTH, name="sel_mask")  # bits that count
        mag = Signal(LANE_WIDTH, name="sel_mag_mask")  # ... without the sign
        with m.Switch(tag.pe.fmt_m):
            for i, name in enumerate(WIDE_FORMATS):
                code, msk = one_code(name)
                with m.Case(i):
                    m.d.comb += [
                        one.eq(code),
                        mask.eq(msk),
                        mag.eq(msk & ~(1 << (get_format(name).bits - 1))),
                    ]
            with m.Default():  # no format of that index (the instruction was rejected)
                m.d.comb += [one.eq(1), mask.eq(0), mag.eq(0)]  # never a one
        any_bad, ones = [], []
        for r in range(self.rows):
            x = self.moving.payload[r * LANE_WIDTH : (r + 1) * LANE_WIDTH]
            inside = Signal(name=f"sel_in_r{r}")
            is_one = Signal(name=f"sel_one_r{r}")
            is_zero = Signal(name=f"sel_zero_r{r}")
            lo_ok = (tag.row_lo <= r) if r else equals(tag.row_lo, 0)
            m.d.comb += [
                inside.eq(lo_ok & (tag.row_hi > r)),
                is_one.eq(inside & ((x & mask) == one)),
                is_zero.eq(equals(x & mag, 0)),
            ]
            any_bad.append(inside & ~is_one & ~is_zero)
            ones.append(is_one)
        # At least one / at least two ones, as a tree.
        nodes = [(o, Const(0, 1)) for o in ones]
        level = 0
        while len(nodes) > 1:
            nxt = []
            for j in range(0, len(nodes) - 1, 2):
                (a1, t1), (a2, t2) = nodes[j], nodes[j + 1]
                a, two = Signal(name=f"sel_any{level}_{j}"), Signal(name=f"sel_two{level}_{j}")
                m.d.comb += [a.eq(a1 | a2), two.eq(t1 | t2 | (a1 & a2))]
                nxt.append((a, two))
            if len(nodes) % 2:
                nxt.append(nodes[-1])
            nodes = nxt
            level += 1
        bad = Signal(name="sel_bad")
        m.d.comb += bad.eq(Cat(*any_bad).any() | nodes[0][1])
        return bad


class _State:
    """The control's registers: the bank of the next LS and the last accepted LS, the loader's
    and the sequencer's counters."""

    def __init__(self, rows, chains):
        self.next_bank = Signal(name="next_bank")  # bank of the next accepted LS
        self.st_valid = Signal(name="st_valid")  # an LS was accepted
        self.st = Signal(LS_DESC_LAYOUT, name="st_desc", reset_less=True)
        # LS loader
        self.ls_beats = Signal(range(256), name="ls_beats_left")
        self.ls_phase = Signal(range(MAX_INTERVAL), name="ls_phase")
        self.ls_ii = Signal(range(MAX_INTERVAL + 1), name="ls_ii", reset_less=True)
        self.ls_bank = Signal(name="ls_bank", reset_less=True)
        # per chain: its beats are the first ``ls_beats - ls_lim`` of the LS
        self.ls_lim = [
            Signal(range(256), name=f"ls_lim{k}", reset_less=True) for k in range(chains)
        ]
        # MM sequencer
        self.mm_beats = Signal(range(MAX_N_ANY + 1), name="mm_beats_left")
        self.mm_slots = Signal(range(MAX_N_ANY + 1), name="mm_slots_left")
        self.mm_phase = Signal(range(MAX_INTERVAL), name="mm_phase")
        self.mm_ii = Signal(range(MAX_INTERVAL + 1), name="mm_ii", reset_less=True)
        self.mm_tag = Signal(beat_tag_layout(rows), name="mm_tag", reset_less=True)
        self.mm_cols = Signal(OUT_INFO_LAYOUT, name="mm_cols", reset_less=True)
        self.mm_flagged = Signal(name="mm_sel_flagged")  # selection error reported for this MM
        self.mm_bank = Signal(name="mm_bank", reset_less=True)
