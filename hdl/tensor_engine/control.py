"""Tensor Engine control: instruction issue and validation, LS loader, MM sequencer, output info.

Implements the timing conventions of docs/tensor_engine.md (``model.tensor_engine.timing``)
cycle for cycle:

* one instruction word per cycle at most, in order; a rejected instruction (``isa.check`` rules,
  same order, same codes) is taken at once and raises ``o_error`` one cycle later;
* an LS issues when the loader is free (``M * II`` cycles after the previous LS issued) and no
  moving beat of an MM reading its target bank is still to come (its last beat strictly before);
  its first beat is consumed in the issue cycle, then one every ``II`` cycles;
* an MM issues when the sequencer is free (``max(N, 64) * II`` cycles after the previous MM) and
  its LS has no stationary beat left after this cycle (the first moving beat may share the cycle
  with the last stationary beat); its first beat is consumed in the issue cycle;
* a beat that is due but whose stream is not valid stalls its loader / sequencer (the beat and
  everything after it move later: bubbles), and ``en = 0`` (output backpressure) freezes all.

The moving beat goes to the array with its tag combinationally in the cycle it is consumed; the
output info (valid, last, column range) follows it through a ``latency``-stage delay line.
"""

from amaranth.hdl import Cat, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.common.bits import bits_for_range, equals
from model.fp import encode, get_format
from model.tensor_engine.isa import (FIELDS, MAX_N, MIN_MM_CYCLES, MODE_FORMATS, Error, Mode,
                                     Op)

from .array import beat_tag_layout
from .pe import LANE0_FORMATS, LANE_WIDTH, LS_CTL_LAYOUT, SKIP_BITS, lane0_format_index

__all__ = ["TensorControl", "INSTR_LAYOUT", "ERROR_SHAPE", "check_logic"]

#: The instruction word (``isa.FIELDS``, LSB first).
INSTR_LAYOUT = data.StructLayout({name: width for name, width in FIELDS})

#: Shape of ``o_error_code``.
ERROR_SHAPE = bits_for_range(0, max(Error))


def check_logic(m, ins, rows, cols, tile_unit, st_valid, st):
    """Hardware ``isa.check``: the code of the first rule ``ins`` breaks (0 if none).

    ``ins`` is an :data:`INSTR_LAYOUT` view, ``st`` a view of the last accepted LS (fields
    ``mode, fmt_s, k, m, transpose, tile_row, tile_rows, tile_col, tile_cols`` with the tile
    sizes already made whole), ``st_valid`` whether there is one.  Tile sizes are
    ``(tile_unit, 2 * tile_unit)`` (32, 64 on the hardware).  Returns ``(code, tr, tc)``: the
    error code signal and the instruction's whole tile sizes.
    """
    size = bits_for_range(0, 255)
    tr = Signal(size, name="chk_tile_rows")
    tc = Signal(size, name="chk_tile_cols")
    m.d.comb += [tr.eq(Mux(ins.tile_rows.any(), ins.tile_rows, rows)),
                 tc.eq(Mux(ins.tile_cols.any(), ins.tile_cols, cols))]
    mode = ins.mode
    bad_mode = Signal(name="chk_mode")
    m.d.comb += bad_mode.eq(mode > max(Mode))
    # Formats each mode accepts per side: fp8 all 4, double_row 3, the others only index 0.
    n_fmt = {md: len(MODE_FORMATS[md]) for md in Mode}
    bad_fmt = Signal(name="chk_format")
    with m.Switch(mode):
        for md in Mode:
            with m.Case(md):
                lim = n_fmt[md]
                if lim >= 4:
                    m.d.comb += bad_fmt.eq(0)
                elif lim == 1:
                    m.d.comb += bad_fmt.eq(ins.fmt_s.any() | ins.fmt_m.any())
                else:
                    m.d.comb += bad_fmt.eq((ins.fmt_s >= lim) | (ins.fmt_m >= lim))
        with m.Default():
            m.d.comb += bad_fmt.eq(0)
    row_t = Signal(name="chk_row_tiled")
    col_t = Signal(name="chk_col_tiled")
    tiled = Signal(name="chk_tiled")
    m.d.comb += [row_t.eq(tr != rows), col_t.eq(tc != cols),
                 tiled.eq(row_t | col_t | ins.tile_row.any() | ins.tile_col.any())]
    bad_combo = Signal(name="chk_dr_combo")
    m.d.comb += bad_combo.eq((mode == Mode.DOUBLE_ROW) & (tiled | ins.transpose))
    u = tile_unit
    ok_sizes = (u, 2 * u)

    def pos_bad(name, pos, t, whole, total):
        """``pos % t or pos + t > total`` for ``t`` in {u, 2u} or, when not tiled on this axis,
        ``t == total`` (then: ``pos != 0``)."""
        low = Signal(name=f"chk_{name}_bad")
        if (u & (u - 1)) == 0:
            lb = u.bit_length() - 1
            mis = Mux(t == u, pos[:lb].any() if lb else 0, pos[:lb + 1].any())
        else:
            mis = Mux(t == u, pos % u != 0, pos % (2 * u) != 0)
        m.d.comb += low.eq(Mux(whole, pos.any(), mis | (pos + t > total)))
        return low

    bad_tile = Signal(name="chk_tile")
    row_size_bad = ~((tr == ok_sizes[0]) | (tr == ok_sizes[1])) | ins.tile_col.any()
    col_size_bad = ~((tc == ok_sizes[0]) | (tc == ok_sizes[1])) | ins.tile_row.any()
    m.d.comb += bad_tile.eq(tiled & (
        (row_t & col_t) | (row_t & row_size_bad) | (col_t & col_size_bad)
        | pos_bad("tile_row", ins.tile_row, tr, ~row_t, rows)
        | pos_bad("tile_col", ins.tile_col, tc, ~col_t, cols)))
    bad_k = Signal(name="chk_k")
    bad_m = Signal(name="chk_m")
    bad_n = Signal(name="chk_n")
    m.d.comb += [bad_k.eq(equals(ins.k, 0) | (ins.k > tr)),
                 bad_m.eq(equals(ins.m, 0) | (ins.m > tc)),
                 bad_n.eq((ins.op == Op.MM) & (equals(ins.n, 0) | (ins.n > MAX_N)))]
    bad_nost = Signal(name="chk_no_stationary")
    m.d.comb += bad_nost.eq((ins.op == Op.MM) & ~st_valid)
    same = Signal(name="chk_same_as_ls")
    m.d.comb += same.eq((st.mode == mode) & (st.fmt_s == ins.fmt_s) & (st.k == ins.k)
                        & (st.m == ins.m) & (st.transpose == ins.transpose)
                        & (st.tile_row == ins.tile_row) & (st.tile_rows == tr)
                        & (st.tile_col == ins.tile_col) & (st.tile_cols == tc))
    bad_mismatch = Signal(name="chk_mismatch")
    m.d.comb += bad_mismatch.eq((ins.op == Op.MM) & ~same)
    code = Signal(ERROR_SHAPE, name="chk_code")
    rules = [(bad_mode, Error.MODE), (bad_fmt, Error.FORMAT), (bad_combo, Error.DOUBLE_ROW_COMBO),
             (bad_tile, Error.TILE), (bad_k, Error.K_RANGE), (bad_m, Error.M_RANGE),
             (bad_n, Error.N_RANGE), (bad_nost, Error.NO_STATIONARY),
             (bad_mismatch, Error.MODE_MISMATCH)]
    with m.If(rules[0][0]):
        m.d.comb += code.eq(rules[0][1])
    for cond, err in rules[1:]:
        with m.Elif(cond):
            m.d.comb += code.eq(err)
    with m.Else():
        m.d.comb += code.eq(Error.NONE)
    return code, tr, tc


#: The last accepted LS, as the MM rules compare it (tile sizes whole).
LS_DESC_LAYOUT = data.StructLayout({
    "mode": 3, "fmt_s": 2, "k": 8, "m": 8, "transpose": 1,
    "tile_row": 8, "tile_rows": 8, "tile_col": 8, "tile_cols": 8,
})

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
    i_instr_valid, i_instr, o_instr_ready
        Instruction stream (``INSTR_LAYOUT``).
    i_stat_valid, o_stat_ready
        Stationary stream handshake (the data goes straight to the array).
    i_mov_valid, i_mov, o_mov_ready
        Moving stream; ``i_mov`` is checked (transpose selection) and passed on as ``o_x``.
    o_x : Out(rows * 32), o_tag : Out(beat_tag_layout(rows))
        Moving beat and tag for the array (``o_tag.valid`` = a beat was consumed).
    o_ls_ctl : Out(LS_CTL_LAYOUT)
        LS control for the array (``valid`` = a stationary beat was consumed).
    o_info : Out(OUT_INFO_LAYOUT)
        Info of the output vector in the array's output register (``latency`` cycles after its
        beat): valid, last of its MM, its column range ``[col_lo, col_hi)``.
    o_error, o_error_code : Out
        One-cycle (enabled cycle) error strobe and its ``isa.Error`` code.
    """

    def __init__(self, rows, cols, latency, *, tile_unit=32):
        if cols > (1 << SKIP_BITS) * tile_unit:
            self._MustUse__silence = True
            raise ValueError(f"TensorControl with {cols} columns needs more than {SKIP_BITS} "
                             f"column-tile skip bits at tile_unit {tile_unit}")
        if rows > 255 or cols > 255:
            self._MustUse__silence = True
            raise ValueError(f"TensorControl of {rows} x {cols}: at most 255 rows and columns "
                             f"(8-bit instruction fields)")
        self.rows, self.cols, self.latency, self.tile_unit = rows, cols, latency, tile_unit
        super().__init__({
            "en": In(1, init=1),
            "i_instr_valid": In(1), "i_instr": In(INSTR_LAYOUT), "o_instr_ready": Out(1),
            "i_stat_valid": In(1), "o_stat_ready": Out(1),
            "i_mov_valid": In(1), "i_mov": In(rows * LANE_WIDTH), "o_mov_ready": Out(1),
            "o_x": Out(rows * LANE_WIDTH), "o_tag": Out(beat_tag_layout(rows)),
            "o_ls_ctl": Out(LS_CTL_LAYOUT),
            "o_info": Out(OUT_INFO_LAYOUT),
            "o_error": Out(1), "o_error_code": Out(ERROR_SHAPE),
        })

    def elaborate(self, platform):
        m = Module()
        rows, cols = self.rows, self.cols
        en = self.en
        ins = self.i_instr
        live = Signal(name="live")                  # a cycle in which handshakes may happen
        m.d.comb += live.eq(en & ~ResetSignal())

        # ---- architectural state ---------------------------------------------------------
        next_bank = Signal(name="next_bank")        # bank of the next accepted LS
        st_valid = Signal(name="st_valid")          # an LS was accepted
        st = Signal(LS_DESC_LAYOUT, name="st_desc", reset_less=True)
        # LS loader
        ls_beats = Signal(range(256), name="ls_beats_left")
        ls_phase = Signal(range(4), name="ls_phase")
        ls_ii = Signal(range(5), name="ls_ii", reset_less=True)
        ls_bank = Signal(name="ls_bank", reset_less=True)
        ls_skip = Signal(SKIP_BITS, name="ls_skip", reset_less=True)
        # MM sequencer
        mm_beats = Signal(range(MAX_N + 1), name="mm_beats_left")
        mm_slots = Signal(range(MAX_N + 1), name="mm_slots_left")
        mm_phase = Signal(range(4), name="mm_phase")
        mm_ii = Signal(range(5), name="mm_ii", reset_less=True)
        mm_tag = Signal(beat_tag_layout(rows), name="mm_tag", reset_less=True)
        mm_cols = Signal(OUT_INFO_LAYOUT, name="mm_cols", reset_less=True)
        mm_flagged = Signal(name="mm_sel_flagged")  # selection error reported for this MM
        mm_bank = Signal(name="mm_bank", reset_less=True)

        # ---- decode and check the presented instruction ----------------------------------
        code, tr, tc = check_logic(m, ins, rows, cols, self.tile_unit, st_valid, st)
        rejected = Signal(name="rejected")
        m.d.comb += rejected.eq(code != Error.NONE)
        ii = Signal(range(5), name="ins_ii")
        m.d.comb += ii.eq(Mux(equals(ins.mode, 0), Mux(ins.transpose, 2, 4), 1))  # fp32

        ls_free = Signal(name="ls_free")
        mm_free = Signal(name="mm_free")
        m.d.comb += [ls_free.eq(equals(ls_beats, 0) & equals(ls_phase, 0)),
                     mm_free.eq(equals(mm_slots, 0) & equals(mm_phase, 0))]
        # LS: the loader is free and no moving beat reading the target bank is still to come.
        ls_can = Signal(name="ls_can_issue")
        m.d.comb += ls_can.eq(ls_free & ~(mm_beats.any() & (mm_bank == next_bank)))
        # MM: the sequencer is free and the LS has no beat after this cycle.
        ls_last_now = Signal(name="ls_last_beat_now")
        m.d.comb += ls_last_now.eq((ls_beats == 1) & equals(ls_phase, 0) & self.i_stat_valid)
        mm_can = Signal(name="mm_can_issue")
        m.d.comb += mm_can.eq(mm_free & (equals(ls_beats, 0) | ls_last_now))

        take = Signal(name="instr_take")
        m.d.comb += take.eq(self.i_instr_valid & live & (
            rejected | Mux(ins.op == Op.LS, ls_can, mm_can)))
        m.d.comb += self.o_instr_ready.eq(live & (rejected | Mux(ins.op == Op.LS, ls_can, mm_can)))
        ls_issue = Signal(name="ls_issue")
        mm_issue = Signal(name="mm_issue")
        m.d.comb += [ls_issue.eq(take & ~rejected & (ins.op == Op.LS)),
                     mm_issue.eq(take & ~rejected & (ins.op == Op.MM))]

        # ---- LS loader: effective state this cycle (a new LS starts in its issue cycle) ----
        e_ls_beats = Signal.like(ls_beats, name="e_ls_beats")
        e_ls_phase = Signal.like(ls_phase, name="e_ls_phase")
        e_ls_ii = Signal.like(ls_ii, name="e_ls_ii")
        e_ls_bank = Signal(name="e_ls_bank")
        e_ls_skip = Signal(SKIP_BITS, name="e_ls_skip")
        skip_of = (ins.tile_col >> (self.tile_unit.bit_length() - 1)
                   if (self.tile_unit & (self.tile_unit - 1)) == 0
                   else ins.tile_col // self.tile_unit)
        with m.If(ls_issue):
            m.d.comb += [e_ls_beats.eq(ins.m), e_ls_phase.eq(0), e_ls_ii.eq(ii),
                         e_ls_bank.eq(next_bank), e_ls_skip.eq(skip_of)]
        with m.Else():
            m.d.comb += [e_ls_beats.eq(ls_beats), e_ls_phase.eq(ls_phase), e_ls_ii.eq(ls_ii),
                         e_ls_bank.eq(ls_bank), e_ls_skip.eq(ls_skip)]
        ls_due = Signal(name="ls_due")
        m.d.comb += ls_due.eq(e_ls_beats.any() & equals(e_ls_phase, 0))
        m.d.comb += self.o_stat_ready.eq(live & ls_due)
        ls_beat = Signal(name="ls_beat")
        m.d.comb += ls_beat.eq(live & ls_due & self.i_stat_valid)
        m.d.comb += [self.o_ls_ctl.valid.eq(ls_beat), self.o_ls_ctl.bank.eq(e_ls_bank),
                     self.o_ls_ctl.skip.eq(e_ls_skip)]
        with m.If(en):
            m.d.sync += [ls_ii.eq(e_ls_ii), ls_bank.eq(e_ls_bank), ls_skip.eq(e_ls_skip)]
            with m.If(ls_beat):
                m.d.sync += [ls_beats.eq(e_ls_beats - 1), ls_phase.eq(e_ls_ii - 1)]
            with m.Elif(~ls_due):
                m.d.sync += [ls_beats.eq(e_ls_beats),
                             ls_phase.eq(Mux(e_ls_phase.any(), e_ls_phase - 1, 0))]
            with m.Else():                          # stalled on a missing stationary beat
                m.d.sync += [ls_beats.eq(e_ls_beats), ls_phase.eq(e_ls_phase)]

        # ---- MM sequencer --------------------------------------------------------------
        e_mm_beats = Signal.like(mm_beats, name="e_mm_beats")
        e_mm_slots = Signal.like(mm_slots, name="e_mm_slots")
        e_mm_phase = Signal.like(mm_phase, name="e_mm_phase")
        e_mm_ii = Signal.like(mm_ii, name="e_mm_ii")
        e_mm_tag = Signal(beat_tag_layout(rows), name="e_mm_tag")
        e_mm_cols = Signal(OUT_INFO_LAYOUT, name="e_mm_cols")
        e_mm_flagged = Signal(name="e_mm_flagged")
        e_mm_bank = Signal(name="e_mm_bank")
        new_tag = Signal(beat_tag_layout(rows), name="new_mm_tag")
        m.d.comb += [
            new_tag.valid.eq(1), new_tag.bank.eq(~next_bank), new_tag.mode.eq(ins.mode),
            new_tag.fmt_s.eq(ins.fmt_s), new_tag.fmt_m.eq(ins.fmt_m),
            new_tag.transpose.eq(ins.transpose),
            new_tag.row_lo.eq(ins.tile_row), new_tag.row_hi.eq(ins.tile_row + ins.k),
        ]
        with m.If(mm_issue):
            m.d.comb += [
                e_mm_beats.eq(ins.n),
                e_mm_slots.eq(Mux(ins.n > MIN_MM_CYCLES, ins.n, MIN_MM_CYCLES)),
                e_mm_phase.eq(0), e_mm_ii.eq(ii), e_mm_tag.eq(new_tag),
                e_mm_cols.col_lo.eq(ins.tile_col), e_mm_cols.col_hi.eq(ins.tile_col + ins.m),
                e_mm_flagged.eq(0), e_mm_bank.eq(~next_bank),
            ]
        with m.Else():
            m.d.comb += [e_mm_beats.eq(mm_beats), e_mm_slots.eq(mm_slots),
                         e_mm_phase.eq(mm_phase), e_mm_ii.eq(mm_ii), e_mm_tag.eq(mm_tag),
                         e_mm_cols.eq(mm_cols), e_mm_flagged.eq(mm_flagged),
                         e_mm_bank.eq(mm_bank)]
        slot_start = Signal(name="mm_slot_start")
        mm_due = Signal(name="mm_due")
        m.d.comb += [slot_start.eq(e_mm_slots.any() & equals(e_mm_phase, 0)),
                     mm_due.eq(slot_start & e_mm_beats.any())]
        m.d.comb += self.o_mov_ready.eq(live & mm_due)
        mm_beat = Signal(name="mm_beat")
        m.d.comb += mm_beat.eq(live & mm_due & self.i_mov_valid)
        stalled = Signal(name="mm_stalled")
        m.d.comb += stalled.eq(mm_due & ~mm_beat)

        # Transpose: every lane of the tile must be 0 or 1 in the moving format, one 1 at most.
        sel_bad = self._selection_check(m, e_mm_tag)
        zero_beat = Signal(name="zero_beat")
        m.d.comb += zero_beat.eq(e_mm_tag.transpose & sel_bad)
        m.d.comb += self.o_x.eq(Mux(zero_beat, 0, self.i_mov))
        m.d.comb += [self.o_tag.eq(e_mm_tag), self.o_tag.valid.eq(mm_beat)]
        new_flag = Signal(name="sel_error_now")
        m.d.comb += new_flag.eq(mm_beat & zero_beat & ~e_mm_flagged)

        with m.If(en):
            m.d.sync += [mm_ii.eq(e_mm_ii), mm_tag.eq(e_mm_tag), mm_cols.eq(e_mm_cols),
                         mm_bank.eq(e_mm_bank), mm_flagged.eq(e_mm_flagged | new_flag)]
            with m.If(stalled):
                m.d.sync += [mm_beats.eq(e_mm_beats), mm_slots.eq(e_mm_slots),
                             mm_phase.eq(e_mm_phase)]
            with m.Elif(slot_start):
                m.d.sync += [mm_beats.eq(e_mm_beats - mm_beat), mm_slots.eq(e_mm_slots - 1),
                             mm_phase.eq(e_mm_ii - 1)]
            with m.Else():
                m.d.sync += [mm_beats.eq(e_mm_beats), mm_slots.eq(e_mm_slots),
                             mm_phase.eq(Mux(e_mm_phase.any(), e_mm_phase - 1, 0))]

        # ---- architectural updates on accepted instructions -------------------------------
        with m.If(en & ls_issue):
            m.d.sync += [
                next_bank.eq(~next_bank), st_valid.eq(1),
                st.mode.eq(ins.mode), st.fmt_s.eq(ins.fmt_s), st.k.eq(ins.k), st.m.eq(ins.m),
                st.transpose.eq(ins.transpose), st.tile_row.eq(ins.tile_row),
                st.tile_rows.eq(tr), st.tile_col.eq(ins.tile_col), st.tile_cols.eq(tc),
            ]

        # ---- errors: registered, high in one enabled cycle ----------------------------------
        err = Signal(name="err_pending")
        err_code = Signal(ERROR_SHAPE, name="err_code")
        sel_pending = Signal(name="sel_err_pending")
        instr_err = Signal(name="instr_err")
        m.d.comb += instr_err.eq(take & rejected)
        with m.If(en):
            with m.If(instr_err):
                m.d.sync += [err.eq(1), err_code.eq(code),
                             sel_pending.eq(sel_pending | new_flag)]
            with m.Elif(sel_pending | new_flag):
                m.d.sync += [err.eq(1), err_code.eq(Error.SELECTION), sel_pending.eq(0)]
            with m.Else():
                m.d.sync += [err.eq(0), err_code.eq(Error.NONE)]
        m.d.comb += [self.o_error.eq(err & en), self.o_error_code.eq(err_code)]

        # ---- output info delay line ------------------------------------------------------
        info = Signal(OUT_INFO_LAYOUT, name="info_in")
        m.d.comb += [info.valid.eq(mm_beat), info.last.eq(e_mm_beats == 1),
                     info.col_lo.eq(e_mm_cols.col_lo), info.col_hi.eq(e_mm_cols.col_hi)]
        value = info
        for i in range(self.latency):
            stage = Signal(OUT_INFO_LAYOUT, name=f"info_d{i + 1}")
            with m.If(en):
                m.d.sync += stage.eq(value)
            value = stage
        m.d.comb += self.o_info.eq(value)
        return m

    def _selection_check(self, m, tag):
        """1 when the moving beat on ``i_mov`` is not a selection column over the rows
        ``[row_lo, row_hi)`` in the moving format of ``tag``."""
        fmt = Signal(range(len(LANE0_FORMATS)), name="sel_fmt")
        m.d.comb += fmt.eq(lane0_format_index(tag.mode, tag.fmt_m))
        one = Signal(LANE_WIDTH, name="sel_one_code")
        mask = Signal(LANE_WIDTH, name="sel_mask")          # bits that count
        mag = Signal(LANE_WIDTH, name="sel_mag_mask")       # ... without the sign
        with m.Switch(fmt):
            for i, name in enumerate(LANE0_FORMATS):
                f = get_format(name)
                code = int(encode([1.0], f)[0])
                msk = ((1 << f.container_bits) - 1) & ~((1 << f.ignored_low_bits) - 1)
                with m.Case(i):
                    m.d.comb += [one.eq(code), mask.eq(msk),
                                 mag.eq(msk & ~(1 << (f.bits - 1)))]
        any_bad, ones = [], []
        for r in range(self.rows):
            x = self.i_mov[r * LANE_WIDTH:(r + 1) * LANE_WIDTH]
            inside = Signal(name=f"sel_in_r{r}")
            is_one = Signal(name=f"sel_one_r{r}")
            is_zero = Signal(name=f"sel_zero_r{r}")
            lo_ok = (tag.row_lo <= r) if r else equals(tag.row_lo, 0)
            m.d.comb += [inside.eq(lo_ok & (tag.row_hi > r)),
                         is_one.eq(inside & ((x & mask) == one)),
                         is_zero.eq(equals(x & mag, 0))]
            any_bad.append(inside & ~is_one & ~is_zero)
            ones.append(is_one)
        # At least one / at least two ones, as a tree.
        nodes = [(o, Const(0, 1)) for o in ones]
        level = 0
        while len(nodes) > 1:
            nxt = []
            for j in range(0, len(nodes) - 1, 2):
                (a1, t1), (a2, t2) = nodes[j], nodes[j + 1]
                a, t = Signal(name=f"sel_any{level}_{j}"), Signal(name=f"sel_two{level}_{j}")
                m.d.comb += [a.eq(a1 | a2), t.eq(t1 | t2 | (a1 & a2))]
                nxt.append((a, t))
            if len(nodes) % 2:
                nxt.append(nodes[-1])
            nodes = nxt
            level += 1
        bad = Signal(name="sel_bad")
        m.d.comb += bad.eq(Cat(*any_bad).any() | nodes[0][1])
        return bad
