"""Tensor Engine control: instruction issue and validation, LS loaders, MM sequencers, output info.

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

With parallel tiles (``timing.HDL_PARALLEL``) "the loader" and "the sequencer" above are those
of the instruction's slot and of every PE group of its tile, banks are per PE group, and an
instruction whose tile overlaps a different tile with beats still to come is rejected
(``TILE_BUSY``); docs/tensor_engine.md, "Microarchitecture (RTL)".

With the background transpose plane (``timing.HDL_BACKGROUND``) there are two loaders and two
sequencers, one per plane, each with its own banks, streams and output info; an LS goes to the
plane :func:`~ncrtl.model.tensor_engine.timing.ls_plane` names (a register remembers the plane
of the latest accepted LS), an MM to the plane of the latest LS, and an instruction waits only
for its own plane.
"""

from amaranth.hdl import Cat, Const, Module, Mux, ResetSignal, Shape, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import bits_for_range, equals
from ncrtl.hdl.common.delay import delay_line
from ncrtl.hdl.common.params import check_bool, check_int, validated_init
from ncrtl.model.fp import get_format
from ncrtl.model.modes import (
    ENGINE_MODES,
    FORMAT_BITS,
    MODE_BITS,
    SPARSE_GROUP,
    SPARSE_RATIOS,
    TILE_SIZES,
)
from ncrtl.model.tensor_engine.isa import FIELDS, MAX_N_ANY, MIN_MM_CYCLES, Error, Op
from ncrtl.model.tensor_engine.timing import LS_CHAINS, chain_count, chain_width, tile_slots

from .array import beat_tag_layout
from .pe import (
    DATA_WIDTH,
    LANE_WIDTH,
    LS_CTL_LAYOUT,
    RAW_WIDTHS,
    SPARSE_TAG_BITS,
    WIDE_FORMATS,
    decode_tag,
    moving_width,
    one_code,
)

__all__ = [
    "TensorControl",
    "INSTR_LAYOUT",
    "ERROR_SHAPE",
    "check_logic",
    "tap_info_layout",
    "PLANE_INFO_LAYOUT",
]

#: The instruction word (``isa.FIELDS``, LSB first).
INSTR_LAYOUT = data.StructLayout({name: width for name, width in FIELDS})

#: Shape of ``o_error_code``.
ERROR_SHAPE = bits_for_range(0, max(Error))

#: The longest beat interval of any engine mode (fp32: 4 cycles per beat).
MAX_INTERVAL = max(max(m.interval(False), m.interval(True) or 1) for m in ENGINE_MODES)

assert all(set(m.row_tiles) | set(m.col_tiles) <= set(TILE_SIZES) for m in ENGINE_MODES), (
    "the control places tiles of the sizes TILE_SIZES only"
)


def mode_rules(m, ins, tile_unit, modes=ENGINE_MODES):
    """The instruction's mode as the mode table describes it, as signals: ``known`` (a mode the
    engine serves), ``bad_fmt`` (a format index the mode lacks), ``no_transpose``,
    ``no_tiling``, ``row_size_ok`` / ``col_size_ok`` (the tile size, scaled by ``tile_unit /
    32``, is one the mode accepts), ``k_misaligned`` / ``m_misaligned`` (K is no multiple of
    the mode's K granule, M of its M multiple: MX), ``n_over`` (N above the mode's limit for the
    instruction's result dtype) and ``ii`` (cycles per beat of this instruction).  ``modes``:
    the modes the engine is built for (any other is unknown: ``Error.MODE``)."""
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
            "sparse_ok",
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
        for pe_mode in modes:
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
                    rules["sparse_ok"].eq(pe_mode.sparse),
                ]
        with m.Default():
            m.d.comb += [v.eq(0) for v in rules.values()] + [ii.eq(0)]
    return rules, ii


def whole_tile_sizes(m, ins, rows, cols, prefix):
    """The tile sizes of instruction ``ins`` made whole (0 is the whole axis): ``(tr, tc)``."""
    size = bits_for_range(0, 255)
    tr = Signal(size, name=f"{prefix}_tile_rows")
    tc = Signal(size, name=f"{prefix}_tile_cols")
    m.d.comb += [
        tr.eq(Mux(ins.tile_rows.any(), ins.tile_rows, rows)),
        tc.eq(Mux(ins.tile_cols.any(), ins.tile_cols, cols)),
    ]
    return tr, tc


def check_logic(
    m,
    ins,
    rows,
    cols,
    tile_unit,
    st_valid,
    st,
    intact=1,
    sizes=None,
    modes=ENGINE_MODES,
    sparse=False,
):
    """Hardware ``isa.check``: the code of the first rule ``ins`` breaks (0 if none).

    ``ins`` is an :data:`INSTR_LAYOUT` view, ``st`` a view of the last accepted LS (fields
    ``mode, fmt_s, k, m, transpose, tile_row, tile_rows, tile_col, tile_cols`` with the tile
    sizes already made whole), ``st_valid`` whether there is one, ``intact`` that no later LS
    on an overlapping tile replaced part of it (parallel tiles); ``sizes`` the instruction's
    whole tile sizes when the caller has them (:func:`whole_tile_sizes`).  Tile sizes are the mode
    table's scaled by ``tile_unit / 32`` (32 and 64 on the hardware); ``sparse``: the engine
    has the sparse path (``isa.check(..., sparse=)``).  Returns
    ``(code, tr, tc, ii)``: the error code signal, the instruction's whole tile sizes and its
    cycles per beat.
    """
    tr, tc = sizes if sizes is not None else whole_tile_sizes(m, ins, rows, cols, "chk")
    whole = Signal(INSTR_LAYOUT, name="chk_whole")
    m.d.comb += [whole.eq(ins), whole.tile_rows.eq(tr), whole.tile_cols.eq(tc)]
    rules, ii = mode_rules(m, whole, tile_unit, modes)
    row_t = Signal(name="chk_row_tiled")
    col_t = Signal(name="chk_col_tiled")
    tiled = Signal(name="chk_tiled")
    m.d.comb += [
        row_t.eq(tr != rows),
        col_t.eq(tc != cols),
        tiled.eq(row_t | col_t | ins.tile_row.any() | ins.tile_col.any()),
    ]
    is_sparse = ins.sparse.any()
    bad_sparse = Signal(name="chk_sparse")
    if sparse:
        ratio_ok = Cat(*(ins.sparse == r for r in SPARSE_RATIOS)).any()
        m.d.comb += bad_sparse.eq(is_sparse & (~rules["sparse_ok"] | ~ratio_ok))
    else:
        m.d.comb += bad_sparse.eq(is_sparse)  # no sparse path in this build
    bad_combo = Signal(name="chk_mode_combo")
    m.d.comb += bad_combo.eq(
        (ins.transpose & rules["no_transpose"])
        | (tiled & rules["no_tiling"])
        | (is_sparse & (ins.transpose | tiled))
    )
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
        bad_k.eq(
            equals(ins.k, 0)
            | (ins.k > tr)
            | rules["k_misaligned"]
            | (is_sparse & ins.k[: SPARSE_GROUP.bit_length() - 1].any())
        ),
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
        & (st.sparse == ins.sparse)
        & (st.tile_row == ins.tile_row)
        & (st.tile_rows == tr)
        & (st.tile_col == ins.tile_col)
        & (st.tile_cols == tc)
        & intact
    )
    bad_mismatch = Signal(name="chk_mismatch")
    m.d.comb += bad_mismatch.eq((ins.op == Op.MM) & ~same)
    code = Signal(ERROR_SHAPE, name="chk_code")
    checks = [
        (~rules["known"], Error.MODE),
        (rules["bad_fmt"], Error.FORMAT),
        (bad_sparse, Error.SPARSE),
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


#: The last accepted LS of a slot, as the MM rules compare it (tile sizes whole).
LS_DESC_LAYOUT = data.StructLayout(
    {
        "mode": MODE_BITS,
        "fmt_s": FORMAT_BITS,
        "k": 8,
        "m": 8,
        "transpose": 1,
        "sparse": dict(FIELDS)["sparse"],
        "tile_row": 8,
        "tile_rows": 8,
        "tile_col": 8,
        "tile_cols": 8,
    }
)

#: Per-output-vector info carried through the latency delay line (one slot: the whole array).
OUT_INFO_LAYOUT = data.StructLayout({"valid": 1, "last": 1, "col_lo": 8, "col_hi": 9})

#: The background plane's output info: :data:`OUT_INFO_LAYOUT` and the transpose container
#: (``raw``, an index into ``pe.RAW_WIDTHS``) the plane's 32-bit words are cut to.
PLANE_INFO_LAYOUT = data.StructLayout(
    {"valid": 1, "last": 1, "col_lo": 8, "col_hi": 9, "raw": range(len(RAW_WIDTHS))}
)


def tap_info_layout(width):
    """Per output tap and column group of ``width`` columns (parallel tiles): a result vector
    of that group leaves the tap (``valid``), it is the last of its MM, and its first
    ``count`` lanes are the MM's columns (the others are 0)."""
    return data.StructLayout({"valid": 1, "last": 1, "count": range(width + 1)})


def _any(bits):
    bits = list(bits)
    return Cat(*bits).any() if bits else Const(0, 1)


def _or_mux(pairs, width):
    """``OR`` of ``value if sel else 0`` over ``(sel, value)`` pairs: a one-hot mux."""
    out = Const(0, width)
    for sel, value in pairs:
        out = out | Mux(sel, value, 0)
    return out


def _effective(m, en, prefix, mine, fields, latch):
    """A loader's or a sequencer's *effective* state: per field ``name: (register, fresh)``
    the fresh value of the instruction issuing into it now (``mine``: its first beat may be
    consumed in its issue cycle), else the register.  The fields named in ``latch`` are
    registered from their effective value in every enabled cycle (the counters update on
    their own rules).  Returns the effective signals by name."""
    eff = {}
    for name, (reg, fresh) in fields.items():
        e = Signal(reg.shape(), name=f"e_{prefix}{name}")
        m.d.comb += e.eq(Mux(mine, fresh, reg))
        eff[name] = e
    with m.If(en):
        m.d.sync += [fields[name][0].eq(eff[name]) for name in latch]
    return eff


class TensorControl(wiring.Component):
    """Issue, validation, LS loaders, MM sequencers, selection check and output info.

    Parameters
    ----------
    rows, cols : int
        Array size.
    latency : int
        Cycles from a moving beat to its output vector at the bottom of the array (the array's
        latency).
    tile_unit : int
        Row / column tile sizes are ``tile_unit`` and ``2 * tile_unit`` (32 / 64 on the
        hardware); column tiles start at a multiple of ``tile_unit`` columns.
    parallel_tiles : bool
        False: one loader and one sequencer, tiles one after another
        (``timing.HDL_SERIAL``).  True: a loader and a sequencer per *slot*
        (:func:`~ncrtl.model.tensor_engine.timing.tile_slot`), each with its own stationary and
        moving stream, PE groups of ``tile_unit x tile_unit`` with their own banks, the
        results of a tile at the output tap below its last row group (``timing.HDL_PARALLEL``);
        ``rows`` and ``cols`` must then be multiples of ``tile_unit``.
    modes : sequence of PeMode or None
        The modes the engine's PE is built for (``ncrtl.model.modes.pe_modes``; None: every
        engine mode): an instruction of another mode is rejected with ``Error.MODE``.
    sparse : bool
        The array's PEs have the sparse path: sparse instructions pass the rules of
        ``isa.check`` (else ``Error.SPARSE``), the moving lane words are wider, and the tags of
        a sparse LS's stationary words are checked as they load: an MM on a stationary with a
        tag whose element is not below the ratio, or with a position repeated in a row group,
        emits no result vector and raises ``Error.TAG`` once.
    background_transpose : bool
        A second plane for transposes (NeuronCore-v4, ``timing.HDL_BACKGROUND``): a loader, a
        sequencer and a stationary and a moving stream per plane (``stationary[p]``,
        ``moving[p]``), plane 1's beats on the ``*_t`` outputs for a
        :class:`~ncrtl.hdl.tensor_engine.plane.TransposePlane`.  Not with ``parallel_tiles``.

    Interface
    ---------
    en : In(1, init=1)
        Global clock enable (0 freezes every register; no handshake happens).
    instr : In(stream.Signature(INSTR_LAYOUT))
        Instructions.
    stationary : In(stream.Signature(chains * rows * LANE_WIDTH))
        Stationary beats, a lane word per row for each LoadStationary chain (chain ``k``'s row
        ``r`` in lane ``k * rows + r``).  With parallel tiles a stream per lane group,
        ``.array(row_groups * chains)``: group ``g * chains + k`` carries chain ``k``'s words
        of row group ``g``; an LS beat takes one from every group of its tile at once.
    moving : In(stream.Signature(rows * x_width))
        Moving beats (lane ``r`` for PE row ``r``: ``LANE_WIDTH`` bits, or with ``sparse`` the
        PE's :func:`~ncrtl.hdl.tensor_engine.pe.moving_width`, a sparse beat's elements of
        the row); the payload is checked (transpose selection) and passed on as ``o_x``.  With parallel tiles ``.array(injections *
        row_groups)``: group ``j * row_groups + g`` carries row group ``g``'s words entering at
        injection point ``j``.
    o_x : Out(injections * rows * x_width)
        Moving lane words for the array, per injection point ``j`` (the left edge, then one per
        column group with parallel tiles: a column tile's moving data enters at its first
        column), row ``r`` in lane ``j * rows + r``.
    o_tag : Out(data.ArrayLayout(beat_tag_layout(rows), injections * row_groups))
        Beat tag of injection ``j`` for row group ``g`` at index ``j * row_groups + g``
        (``pe.valid``: a beat was consumed for those rows).
    o_ls : Out(chains * rows * LANE_WIDTH), o_ls_ctl : Out(data.ArrayLayout(LS_CTL_LAYOUT, row_groups * chains))
        LS beat, and per row group ``g`` and chain ``k`` (index ``g * chains + k``) its control
        (``valid``: the chain has a column in the beat for those rows; ``bank``).
    o_info : Out(OUT_INFO_LAYOUT), or Out(data.ArrayLayout(tap_info_layout(chain_width), row_groups * chains)) with parallel tiles
        Info of the output vector leaving the array: one slot, the whole array's (valid, last,
        column range ``[col_lo, col_hi)``), ``latency`` cycles after its beat; with parallel
        tiles per output tap ``g`` and column group ``j`` (index ``g * chains + j``),
        ``latency - rows + (g + 1) * tile_unit`` cycles after its beat.
    o_error, o_error_code : Out
        One-cycle (enabled cycle) error strobe and its ``isa.Error`` code.
    o_sel_t, o_bank_t, o_ls_t, o_ls_ctl_t, o_info_t : Out
        With the background plane: plane 1's moving beat (a select bit per row: the row's lane
        is the selection's 1; all 0 for no beat and for a beat that is not a selection), its
        bank, its LS beat and per chain control, and its output info
        (:data:`PLANE_INFO_LAYOUT`), ``latency`` cycles after the beat.

    Attributes
    ----------
    chain_width, chains : int
        Columns per LoadStationary chain (:func:`ncrtl.model.tensor_engine.timing.chain_width`)
        and the number of chains (the column groups).
    slots, row_groups, injections : int
        Loaders and sequencers, row groups (output taps) and moving injection points: 1, 1, 1
        without parallel tiles (2, 1, 1 with the background plane: a slot per plane).
    planes : int
        2 with the background transpose plane, else 1.
    """

    @validated_init
    def __init__(
        self,
        rows,
        cols,
        latency,
        *,
        tile_unit=32,
        parallel_tiles=False,
        background_transpose=False,
        modes=None,
        sparse=False,
    ):
        # 8-bit instruction fields: at most 255 rows and columns.
        check_int(rows, "TensorControl rows", minimum=1, maximum=255)
        check_int(cols, "TensorControl cols", minimum=1, maximum=255)
        check_int(latency, "TensorControl latency", minimum=1)
        check_int(tile_unit, "TensorControl tile_unit", minimum=1)
        check_bool(parallel_tiles, "TensorControl parallel_tiles")
        check_bool(background_transpose, "TensorControl background_transpose")
        if parallel_tiles and background_transpose:
            raise ValueError(
                "TensorControl with parallel_tiles and background_transpose: the background "
                "plane is built for the serial engine (docs/tensor_engine.md, the port budget)"
            )
        if cols > LS_CHAINS * tile_unit:
            raise ValueError(
                f"TensorControl with {cols} columns at tile_unit {tile_unit}: column tiles start "
                f"at multiples of tile_unit, each on its own LoadStationary chain, at most "
                f"{LS_CHAINS} per row"
            )
        if parallel_tiles and (rows % tile_unit or cols % tile_unit):
            raise ValueError(
                f"TensorControl with parallel tiles needs rows and cols that are multiples of "
                f"tile_unit {tile_unit} (whole PE groups), not {rows} x {cols}"
            )
        self.rows, self.cols, self.latency, self.tile_unit = rows, cols, latency, tile_unit
        self.parallel = parallel_tiles
        self.planes = 2 if background_transpose else 1
        self.modes = ENGINE_MODES if modes is None else tuple(modes)
        check_bool(sparse, "TensorControl sparse")
        self.sparse = sparse
        #: Bits of a moving lane word (wider with the sparse path: a beat's elements per row).
        self.x_width = moving_width(self.modes, sparse)
        self.chain_width = chain_width(cols, tile_unit)
        self.chains = chain_count(cols, tile_unit)
        if parallel_tiles:
            self.row_groups = rows // tile_unit
            self.slots = tile_slots(rows, cols, tile_unit)
            self.injections = self.chains
        else:
            self.row_groups = self.injections = 1
            self.slots = self.planes
        C, RG, J = self.chains, self.row_groups, self.injections

        W, XW, per = LANE_WIDTH, self.x_width, rows // RG
        if parallel_tiles:  # a stream per lane group: (row group, chain), (injection, row group)
            stationary = In(stream.Signature(per * W)).array(RG * C)
            moving = In(stream.Signature(per * XW)).array(J * RG)
        else:
            stationary = In(stream.Signature(C * rows * W))
            moving = In(stream.Signature(rows * XW))
            if background_transpose:  # a stream of each per plane
                stationary, moving = stationary.array(2), moving.array(2)

        if parallel_tiles:
            info = Out(data.ArrayLayout(tap_info_layout(self.chain_width), RG * C))
        else:
            info = Out(OUT_INFO_LAYOUT)
        members = {}
        if background_transpose:
            members = {
                "o_sel_t": Out(rows),
                "o_bank_t": Out(1),
                "o_ls_t": Out(C * rows * LANE_WIDTH),
                "o_ls_ctl_t": Out(data.ArrayLayout(LS_CTL_LAYOUT, C)),
                "o_info_t": Out(PLANE_INFO_LAYOUT),
            }
        super().__init__(
            {
                **members,
                "en": In(1, init=1),
                "instr": In(stream.Signature(INSTR_LAYOUT)),
                "stationary": stationary,
                "moving": moving,
                "o_x": Out(J * rows * XW),
                "o_tag": Out(data.ArrayLayout(beat_tag_layout(rows), J * RG)),
                "o_ls": Out(C * rows * LANE_WIDTH),
                "o_ls_ctl": Out(data.ArrayLayout(LS_CTL_LAYOUT, RG * C)),
                "o_info": info,
                "o_error": Out(1),
                "o_error_code": Out(ERROR_SHAPE),
            }
        )

    def _lanes(self, name, plane=0):
        """The lane groups of the ``stationary`` or ``moving`` port (of ``plane``): ``(stream,
        a, b)`` with ``(a, b)`` = (row group, chain) or (injection point, row group); one group
        ``(port, 0, 0)`` holding every lane without parallel tiles."""
        port = getattr(self, name)
        if self.planes > 1:
            return [(port[plane], 0, 0)]
        if not self.parallel:
            return [(port, 0, 0)]
        if name == "stationary":
            return [
                (port[g * self.chains + k], g, k)
                for g in range(self.row_groups)
                for k in range(self.chains)
            ]
        return [
            (port[j * self.row_groups + g], j, g)
            for j in range(self.injections)
            for g in range(self.row_groups)
        ]

    @staticmethod
    def _all_valid(lanes, cover):
        """Every lane group ``cover(a, b)`` selects has a valid beat."""
        return Cat(*(~cover(a, b) | st.valid for st, a, b in lanes)).all()

    def elaborate(self, platform):
        m = Module()
        live = Signal(name="live")  # a cycle in which handshakes may happen
        m.d.comb += live.eq(self.en & ~ResetSignal())
        s = _State(self)
        tile = self._tile(m, s)
        issue = self._issue(m, s, live, tile)
        self._loaders(m, s, live, issue, tile)
        sel_errors = self._sequencers(m, s, live, issue, tile)
        self._accept(m, s, issue, tile)
        self._errors(m, issue, sel_errors)
        return m

    # -- the presented instruction's tile --------------------------------------------------

    def _tile(self, m, s):
        """The PE groups of the presented instruction's tile (``rmask`` row groups, ``cmask``
        column groups), its first group, its slot (one-hot), its injection point and its plane
        (one-hot)."""
        ins, u = self.instr.payload, self.tile_unit
        C, S, RG = self.chains, self.slots, self.row_groups
        one = Const(1, 1)
        if not self.parallel:
            plane = [one]
            if self.planes > 1:
                # timing.ls_plane: a transpose LS on plane 1 unless the latest LS is there; an
                # MM on the latest LS's plane.  The slots are the planes.
                p1 = Signal(name="plane1")
                m.d.comb += p1.eq(
                    Mux(ins.op == Op.LS, ins.transpose & ~s.latest_plane, s.latest_plane)
                )
                plane = [~p1, p1]
            return dict(
                rmask=one,
                cmask=one,
                rfirst=[one],
                cfirst=[one],
                slot=plane,
                inj=one,
                sizes=None,
                plane=plane,
            )
        tr, tc = whole_tile_sizes(m, ins, self.rows, self.cols, "tile")
        col_t = Signal(name="tile_col_tiled")
        m.d.comb += col_t.eq(tc != self.cols)

        def groups(name, pos, size, n):
            mask = Signal(n, name=f"tile_{name}mask")
            end = Signal(9, name=f"tile_{name}_end")
            m.d.comb += end.eq(pos + size)
            for g in range(n):
                m.d.comb += mask[g].eq((pos < (g + 1) * u) & (end > g * u))
            first = [mask[0]] + [mask[g] & ~mask[g - 1] for g in range(1, n)]
            return mask, first

        rmask, rfirst = groups("r", ins.tile_row, tr, RG)
        cmask, cfirst = groups("c", ins.tile_col, tc, C)
        slot = Signal(S, name="tile_slot")
        for k in range(S):
            by_col = cfirst[k] if k < C else Const(0, 1)
            by_row = rfirst[k] if k < RG else Const(0, 1)
            m.d.comb += slot[k].eq(Mux(col_t, by_col, by_row))
        inj = Signal(C, name="tile_injection")
        m.d.comb += inj.eq(Mux(col_t, Cat(*cfirst), 1))
        return dict(
            rmask=rmask,
            cmask=cmask,
            rfirst=rfirst,
            cfirst=cfirst,
            slot=slot,
            inj=inj,
            sizes=(tr, tc),
            plane=[one],
        )

    # -- issue ---------------------------------------------------------------------------

    def _issue(self, m, s, live, tile):
        """Check the presented instruction and decide whether it issues (or is dropped) now."""
        ins = self.instr.payload
        S, C, RG = self.slots, self.chains, self.row_groups
        rmask, cmask = tile["rmask"], tile["cmask"]
        # The stationary this instruction would use: its slot's last LS; its bank and whether
        # every group of its tile still holds it (only LS on its tile wrote them since).
        if self.parallel:
            first = [
                (g, j, tile["rfirst"][g] & tile["cfirst"][j]) for g in range(RG) for j in range(C)
            ]
        else:
            first = [(0, 0, Const(1, 1))]
        psel = tile["plane"]  # the instruction's plane, one-hot
        st_valid = Signal(name="st_valid")
        bank = Signal(name="ls_target_bank")
        m.d.comb += [
            st_valid.eq(
                _any(
                    psel[p] & f & groups[g][j]["has_ls"]
                    for p, groups in enumerate(s.planes)
                    for g, j, f in first
                )
            ),
            bank.eq(
                _any(
                    psel[p] & f & groups[g][j]["next_bank"]
                    for p, groups in enumerate(s.planes)
                    for g, j, f in first
                )
            ),
        ]
        intact = Signal(name="st_intact")
        whole = []
        for p, groups in enumerate(s.planes):
            holds = []
            for g in range(len(groups)):
                for j in range(len(groups[g])):
                    gr = groups[g][j]
                    covered = rmask[g] & cmask[j]
                    holds.append(
                        ~covered | (gr["has_ls"] & (gr["reg_r"] == rmask) & (gr["reg_c"] == cmask))
                    )
            whole.append(psel[p] & Cat(*holds).all())
        m.d.comb += intact.eq(_any(whole))
        desc = Signal(LS_DESC_LAYOUT, name="st_desc")
        st_bank = Signal(name="st_bank")
        width = Shape.cast(LS_DESC_LAYOUT).width
        m.d.comb += [
            desc.eq(
                _or_mux([(tile["slot"][k], s.slots[k].desc.as_value()) for k in range(S)], width)
            ),
            st_bank.eq(_any(tile["slot"][k] & s.slots[k].desc_bank for k in range(S))),
        ]
        code, tr, tc, ii = check_logic(
            m,
            ins,
            self.rows,
            self.cols,
            self.tile_unit,
            st_valid,
            desc,
            intact,
            tile["sizes"],
            self.modes,
            self.sparse,
        )

        def overlap(r, c):
            return (r & rmask).any() & (c & cmask).any()

        ls_wait, hazard, mm_wait, pending, conflict = [], [], [], [], []
        for k, sl in enumerate(s.slots):
            # an instruction waits for the slots of its own plane only
            ov_ls = overlap(sl.ls_r, sl.ls_c) & tile["plane"][sl.plane]
            ov_mm = overlap(sl.mm_r, sl.mm_c) & tile["plane"][sl.plane]
            ls_busy = sl.ls_beats.any() | sl.ls_phase.any()
            mm_busy = sl.mm_slots.any() | sl.mm_phase.any()
            ls_wait.append(ls_busy & ov_ls)
            # no moving beat reading the LS's target bank still to come
            hazard.append(sl.mm_beats.any() & ov_mm & (sl.mm_bank == bank))
            mm_wait.append(mm_busy & ov_mm)
            # an MM's LS (on its slot) has no beat after this cycle
            ls_valid = self._all_valid(
                self._lanes("stationary", sl.plane), lambda g, c, sl=sl: sl.ls_r[g] & sl.ls_c[c]
            )
            last_now = (sl.ls_beats == 1) & equals(sl.ls_phase, 0) & ls_valid
            pending.append(tile["slot"][k] & sl.ls_beats.any() & ~last_now)
            if self.parallel:
                same_ls = (sl.ls_r == rmask) & (sl.ls_c == cmask)
                same_mm = (sl.mm_r == rmask) & (sl.mm_c == cmask)
                conflict.append(
                    (sl.ls_beats.any() & ov_ls & ~same_ls) | (sl.mm_beats.any() & ov_mm & ~same_mm)
                )
        final = Signal(ERROR_SHAPE, name="issue_code")
        busy = Signal(name="tile_busy")
        m.d.comb += [
            busy.eq(_any(conflict)),
            final.eq(Mux(code != Error.NONE, code, Mux(busy, Error.TILE_BUSY, Error.NONE))),
        ]
        rejected = Signal(name="rejected")
        m.d.comb += rejected.eq(final != Error.NONE)
        ls_can = Signal(name="ls_can_issue")
        mm_can = Signal(name="mm_can_issue")
        m.d.comb += [
            ls_can.eq(~_any(ls_wait) & ~_any(hazard)),
            mm_can.eq(~_any(mm_wait) & ~_any(pending)),
        ]
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
            code=final,
            tr=tr,
            tc=tc,
            ii=ii,
            rejected=rejected,
            take=take,
            ls=ls_issue,
            mm=mm_issue,
            bank=bank,
            st_bank=st_bank,
        )

    # -- LoadStationary loaders ----------------------------------------------------------------

    def _loaders(self, m, s, live, issue, tile):
        """The LoadStationary loaders, one per slot: one stationary beat every ``II`` cycles
        from the issue cycle on (a new LS starts in its issue cycle); a missing beat stalls it.
        The chains load together: chain ``k`` has a column in the first ``cnt_k`` of the LS's
        ``B = max cnt_k`` beats (:func:`~ncrtl.model.tensor_engine.timing.ls_chain_columns`).
        The array's LS lanes of a row group come from the loader with a beat for it."""
        ins = self.instr.payload
        C, G, RG, W = self.chains, self.chain_width, self.row_groups, LANE_WIDTH
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

        lanes = []  # per slot: (beat, rows mask, per chain valid, bank, lane groups taken)
        for k, sl in enumerate(s.slots):
            groups = self._lanes("stationary", sl.plane)
            p = f"ls{k}_" if self.slots > 1 else "ls_"
            mine = Signal(name=f"{p}issue")
            m.d.comb += mine.eq(issue["ls"] & tile["slot"][k])
            fields = {
                "beats": (sl.ls_beats, most),
                "phase": (sl.ls_phase, 0),
                "ii": (sl.ls_ii, issue["ii"]),
                "bank": (sl.ls_bank, issue["bank"]),
                "rmask": (sl.ls_r, tile["rmask"]),
                "cmask": (sl.ls_c, tile["cmask"]),
            }
            fields.update({f"lim{c}": (sl.ls_lim[c], most - cnt[c]) for c in range(C)})
            if self.sparse:
                fields.update(ratio=(sl.ls_ratio, ins.sparse), k=(sl.ls_k, ins.k))
            latch = [n for n in fields if n not in ("beats", "phase")]
            e = _effective(m, self.en, p, mine, fields, latch)
            e_beats, e_phase, e_ii, e_bank = e["beats"], e["phase"], e["ii"], e["bank"]
            e_r, e_c = e["rmask"], e["cmask"]
            e_lim = [e[f"lim{c}"] for c in range(C)]
            due = Signal(name=f"{p}due")
            m.d.comb += due.eq(e_beats.any() & equals(e_phase, 0))
            # a beat takes one word from every lane group of the LS's tile at once
            cover = lambda g, c, e_r=e_r, e_c=e_c: e_r[g] & e_c[c]  # noqa: E731
            beat = Signal(name=f"{p}beat")
            m.d.comb += beat.eq(live & due & self._all_valid(groups, cover))
            takes = [beat & cover(a, b) for _, a, b in groups]
            valid = []
            for c in range(C):
                v = Signal(name=f"{p}valid{c}")
                m.d.comb += v.eq(beat & (e_beats > e_lim[c]))
                valid.append(v)
            lanes.append((beat, e_r, valid, e_bank, takes))
            if self.sparse:
                bad = self._tag_check(m, groups, valid, e["ratio"], e["k"], p)
                sl.tag_bad_now = Signal(name=f"{p}tag_bad_now")
                m.d.comb += sl.tag_bad_now.eq((sl.st_tag_bad & ~mine) | bad)
                with m.If(self.en):
                    m.d.sync += sl.st_tag_bad.eq(sl.tag_bad_now)
            with m.If(self.en):
                with m.If(beat):
                    m.d.sync += [sl.ls_beats.eq(e_beats - 1), sl.ls_phase.eq(e_ii - 1)]
                with m.Elif(~due):
                    m.d.sync += [
                        sl.ls_beats.eq(e_beats),
                        sl.ls_phase.eq(Mux(e_phase.any(), e_phase - 1, 0)),
                    ]
                with m.Else():  # stalled on a missing stationary beat
                    m.d.sync += [sl.ls_beats.eq(e_beats), sl.ls_phase.eq(e_phase)]

        for p in range(self.planes):
            for i, (st, _, _) in enumerate(self._lanes("stationary", p)):
                takes = [lane[4][i] for sl, lane in zip(s.slots, lanes) if sl.plane == p]
                m.d.comb += st.ready.eq(_any(takes))
        groups = self._lanes("stationary")
        if not self.parallel:
            outs = [(self.o_ls, self.o_ls_ctl)]
            if self.planes > 1:
                outs.append((self.o_ls_t, self.o_ls_ctl_t))
            for p, (o_ls, o_ctl) in enumerate(outs):
                _, _, valid, bank, _ = lanes[p]
                m.d.comb += o_ls.eq(self._lanes("stationary", p)[0][0].payload)
                for c in range(C):
                    m.d.comb += [o_ctl[c].valid.eq(valid[c]), o_ctl[c].bank.eq(bank)]
            return
        # Lane group (g, c) feeds chain c's rows of row group g directly; its control comes
        # from the loader with a beat there (loaders with beats in one cycle load disjoint
        # groups).
        rows_per = self.rows // RG
        for i, (st, g, c) in enumerate(groups):
            lo = (c * self.rows + g * rows_per) * W
            m.d.comb += self.o_ls[lo : lo + rows_per * W].eq(st.payload)
            # the loader whose LS takes this lane group now (its tile's rows AND chains: two
            # column tiles load the same rows at once, each with its own bank)
            sel = [takes[i] for _, _, _, _, takes in lanes]
            ctl = self.o_ls_ctl[g * C + c]
            m.d.comb += [
                ctl.valid.eq(_any(sel[k] & lanes[k][2][c] for k in range(len(lanes)))),
                ctl.bank.eq(_any(sel[k] & lanes[k][3] for k in range(len(lanes)))),
            ]

    # -- MultiplyMoving sequencers --------------------------------------------------------------

    def _sequencers(self, m, s, live, issue, tile):
        """The MultiplyMoving sequencers, one per slot: ``max(N, min(64, M))`` beat slots of
        ``II`` cycles, a moving beat in each of the first ``N`` (a missing beat stalls it); the
        beat and its tag go to the array at the sequencer's injection point, its output info
        down the latency line of its output tap.  Returns the selection-error strobes."""
        ins = self.instr.payload
        C, G, RG, J = self.chains, self.chain_width, self.row_groups, self.injections
        new_tag = Signal(beat_tag_layout(self.rows), name="new_mm_tag")
        pe_tag = decode_tag(
            m,
            ins.mode,
            ins.fmt_s,
            ins.fmt_m,
            ins.transpose,
            valid=1,
            bank=issue["st_bank"],
            first_row=0,
            sparse=ins.sparse.any(),
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
        new_cols = Signal(OUT_INFO_LAYOUT, name="new_mm_cols")
        m.d.comb += [new_cols.col_lo.eq(ins.tile_col), new_cols.col_hi.eq(ins.tile_col + ins.m)]
        W, rows_per = self.x_width, self.rows // RG
        flags, beats, takes_all = [], [], []
        for k, sl in enumerate(s.slots):
            groups = self._lanes("moving", sl.plane)
            p = f"mm{k}_" if self.slots > 1 else "mm_"
            mine = Signal(name=f"{p}issue")
            m.d.comb += mine.eq(issue["mm"] & tile["slot"][k])
            fields = {
                "beats": (sl.mm_beats, ins.n),
                "slots": (sl.mm_slots, Mux(ins.n > floor, ins.n, floor)),
                "phase": (sl.mm_phase, 0),
                "flagged": (sl.mm_flagged, 0),
                "ii": (sl.mm_ii, issue["ii"]),
                "tag": (sl.mm_tag, new_tag),
                "cols": (sl.mm_cols, new_cols),
                "bank": (sl.mm_bank, issue["st_bank"]),
                "rmask": (sl.mm_r, tile["rmask"]),
                "cmask": (sl.mm_c, tile["cmask"]),
                "inj": (sl.mm_inj, tile["inj"]),
            }
            if self.sparse:
                fields["tag_bad"] = (sl.mm_tag_bad, sl.tag_bad_now)
            latch = [n for n in fields if n not in ("beats", "slots", "phase", "flagged")]
            e = _effective(m, self.en, p, mine, fields, latch)
            tag_bad = e["tag_bad"] if self.sparse else Const(0, 1)
            e_beats, e_slots, e_phase, e_ii = e["beats"], e["slots"], e["phase"], e["ii"]
            e_tag, e_cols, e_flagged = e["tag"], e["cols"], e["flagged"]
            e_r, e_c, e_inj = e["rmask"], e["cmask"], e["inj"]
            slot_start = Signal(name=f"{p}slot_start")
            due = Signal(name=f"{p}due")
            m.d.comb += [
                slot_start.eq(e_slots.any() & equals(e_phase, 0)),
                due.eq(slot_start & e_beats.any()),
            ]
            # a beat takes one word from every lane group of its injection point and rows
            cover = lambda j, g, e_inj=e_inj, e_r=e_r: e_inj[j] & e_r[g]  # noqa: E731
            beat = Signal(name=f"{p}beat")
            m.d.comb += beat.eq(live & due & self._all_valid(groups, cover))
            takes_all.append([beat & cover(a, b) for _, a, b in groups])
            # the beat's lanes, one per row, from its injection point's lane groups
            payload = Signal(self.rows * W, name=f"{p}payload")
            if self.parallel:
                m.d.comb += payload.eq(
                    Cat(
                        *(
                            _or_mux(
                                [(e_inj[j], groups[j * RG + g][0].payload) for j in range(J)],
                                rows_per * W,
                            )
                            for g in range(RG)
                        )
                    )
                )
            else:
                m.d.comb += payload.eq(groups[0][0].payload)
            stalled = Signal(name=f"{p}stalled")
            m.d.comb += stalled.eq(due & ~beat)

            # Transpose: every lane of the tile must be 0 or 1 in the moving format, one 1 at most.
            sel_bad, sel_ones = self._selection_check(m, e_tag, payload, p)
            zero_beat = Signal(name=f"{p}zero_beat")
            m.d.comb += zero_beat.eq(e_tag.pe.transpose & sel_bad)
            x = Signal(self.rows * W, name=f"{p}x")
            m.d.comb += x.eq(Mux(zero_beat, 0, payload))
            new_flag = Signal(name=f"{p}sel_error_now")
            m.d.comb += new_flag.eq(beat & zero_beat & ~e_flagged)
            flags.append((new_flag, Error.SELECTION))
            # a sparse MM on a stationary with broken tags: no result vector, one TAG error
            tag_flag = Signal(name=f"{p}tag_error_now")
            m.d.comb += tag_flag.eq(beat & tag_bad & ~e_flagged)
            if self.sparse:
                flags.append((tag_flag, Error.TAG))
            emit = Signal(name=f"{p}emit")
            m.d.comb += emit.eq(beat & ~tag_bad)
            last = Signal(name=f"{p}last")
            m.d.comb += last.eq(e_beats == 1)
            beats.append(
                dict(
                    emit=emit,
                    beat=beat,
                    x=x,
                    tag=e_tag,
                    r=e_r,
                    c=e_c,
                    inj=e_inj,
                    cols=e_cols,
                    last=last,
                    zero=zero_beat,
                    ones=sel_ones,
                )
            )

            with m.If(self.en):
                m.d.sync += sl.mm_flagged.eq(e_flagged | new_flag | tag_flag)
                with m.If(stalled):
                    m.d.sync += [
                        sl.mm_beats.eq(e_beats),
                        sl.mm_slots.eq(e_slots),
                        sl.mm_phase.eq(e_phase),
                    ]
                with m.Elif(slot_start):
                    m.d.sync += [
                        sl.mm_beats.eq(e_beats - beat),
                        sl.mm_slots.eq(e_slots - 1),
                        sl.mm_phase.eq(e_ii - 1),
                    ]
                with m.Else():
                    m.d.sync += [
                        sl.mm_beats.eq(e_beats),
                        sl.mm_slots.eq(e_slots),
                        sl.mm_phase.eq(Mux(e_phase.any(), e_phase - 1, 0)),
                    ]

        for p in range(self.planes):
            for i, (st, _, _) in enumerate(self._lanes("moving", p)):
                takes = [t[i] for sl, t in zip(s.slots, takes_all) if sl.plane == p]
                m.d.comb += st.ready.eq(_any(takes))
        groups = self._lanes("moving")
        if self.planes > 1:
            # Plane 1: a select bit per row (the beat's 1; none for a zeroed beat), its bank,
            # and its output info (with the container) down the latency line.
            b = beats[1]
            m.d.comb += [
                self.o_sel_t.eq(Mux(b["beat"] & ~b["zero"], b["ones"], 0)),
                self.o_bank_t.eq(b["tag"].pe.bank),
            ]
            self._info_line(m, b, self.o_info_t, "info_t")
        if not self.parallel:
            b = beats[0]
            m.d.comb += [
                self.o_x.eq(b["x"]),
                self.o_tag[0].eq(b["tag"]),
                self.o_tag[0].pe.valid.eq(b["beat"]),
            ]
            self._info_line(m, b, self.o_info, "info")
            return flags

        # Injection j, row group g: its lane group's words (zero for a transpose beat that is no
        # selection) and the tag of the sequencer with a beat there (sequencers with beats in
        # the same cycle feed disjoint groups).
        tag_bits = Shape.cast(beat_tag_layout(self.rows)).width
        for j in range(J):
            for g in range(RG):
                i = j * RG + g
                sel = [takes[i] for takes in takes_all]
                zero = _any(sel[k] & b["zero"] for k, b in enumerate(beats))
                at = (j * self.rows + g * rows_per) * W
                m.d.comb += self.o_x[at : at + rows_per * W].eq(Mux(zero, 0, groups[i][0].payload))
                tags = []
                for k, b in enumerate(beats):
                    t = Signal(beat_tag_layout(self.rows), name=f"mm_tag_j{j}_g{g}_s{k}")
                    m.d.comb += [t.eq(b["tag"]), t.pe.valid.eq(1)]
                    tags.append((sel[k], t.as_value()))
                m.d.comb += self.o_tag[j * RG + g].as_value().eq(_or_mux(tags, tag_bits))
        # Output info per tap (the last row group of the tile) and column group, down the
        # tap's latency line.
        layout = tap_info_layout(G)
        for g in range(RG):
            words = []
            for j in range(C):
                w = Signal(layout, name=f"info_in_g{g}_c{j}")
                parts = []
                for k, b in enumerate(beats):
                    tap = b["r"][g] & (~b["r"][g + 1] if g + 1 < RG else 1)
                    here = Signal(name=f"info_g{g}_c{j}_s{k}")
                    m.d.comb += here.eq(b["emit"] & tap & b["c"][j])
                    n = Signal(range(G + 1), name=f"info_count_g{g}_c{j}_s{k}")
                    over = Signal(10, name=f"info_over_g{g}_c{j}_s{k}")
                    m.d.comb += [
                        over.eq(b["cols"].col_hi - j * G),
                        n.eq(Mux(b["cols"].col_hi <= j * G, 0, Mux(over > G, G, over))),
                    ]
                    parts.append((here, b["last"], n))
                m.d.comb += [
                    w.valid.eq(_any(h for h, _, _ in parts)),
                    w.last.eq(_any(h & l for h, l, _ in parts)),
                    w.count.eq(_or_mux([(h, n) for h, _, n in parts], len(w.count))),
                ]
                words.append(w.as_value())
            lat = self.latency - self.rows + (g + 1) * rows_per
            out = delay_line(m, self.en, f"info_g{g}", Cat(*words), lat)
            bits = Shape.cast(layout).width
            for j in range(C):
                m.d.comb += self.o_info[g * C + j].as_value().eq(out[j * bits : (j + 1) * bits])
        return flags

    def _info_line(self, m, b, port, name):
        """The output info of sequencer beat ``b`` (valid, last, column range; and the
        transpose container where ``port`` has it) through a ``latency``-stage delay line
        into ``port``."""
        info = Signal(port.shape(), name=f"{name}_in")
        m.d.comb += [
            info.valid.eq(b["emit"]),
            info.last.eq(b["last"]),
            info.col_lo.eq(b["cols"].col_lo),
            info.col_hi.eq(b["cols"].col_hi),
        ]
        if "raw" in port.shape().members:
            m.d.comb += info.raw.eq(b["tag"].pe.raw)
        out = delay_line(m, self.en, name, info.as_value(), self.latency)
        m.d.comb += port.as_value().eq(out)

    def _accept(self, m, s, issue, tile):
        """Architectural state of an accepted LS: its groups' banks toggle and remember its
        tile, its slot remembers it."""
        ins = self.instr.payload
        with m.If(self.en & issue["ls"]):
            if self.planes > 1:
                m.d.sync += s.latest_plane.eq(tile["plane"][1])
            for g, row, p in (
                (g, row, p) for p, gs in enumerate(s.planes) for g, row in enumerate(gs)
            ):
                for j, gr in enumerate(row):
                    with m.If(tile["plane"][p] & tile["rmask"][g] & tile["cmask"][j]):
                        m.d.sync += [
                            gr["next_bank"].eq(~issue["bank"]),
                            gr["has_ls"].eq(1),
                            gr["reg_r"].eq(tile["rmask"]),
                            gr["reg_c"].eq(tile["cmask"]),
                        ]
            for k, sl in enumerate(s.slots):
                with m.If(tile["slot"][k]):
                    m.d.sync += [
                        sl.desc_bank.eq(issue["bank"]),
                        sl.desc.mode.eq(ins.mode),
                        sl.desc.fmt_s.eq(ins.fmt_s),
                        sl.desc.k.eq(ins.k),
                        sl.desc.m.eq(ins.m),
                        sl.desc.transpose.eq(ins.transpose),
                        sl.desc.sparse.eq(ins.sparse),
                        sl.desc.tile_row.eq(ins.tile_row),
                        sl.desc.tile_rows.eq(issue["tr"]),
                        sl.desc.tile_col.eq(ins.tile_col),
                        sl.desc.tile_cols.eq(issue["tc"]),
                    ]

    def _errors(self, m, issue, data_errors):
        """``o_error``: registered, high in one enabled cycle per rejected instruction and per
        MM with a data error (``data_errors``: ``(strobe, code)`` pairs: a transpose's bad
        selection beat, a sparse MM on broken tags).  An instruction error wins the cycle; data
        errors wait, counted per code, and follow one per cycle (SELECTION before TAG)."""
        en = self.en
        err = Signal(name="err_pending")
        err_code = Signal(ERROR_SHAPE, name="err_code")
        instr_err = Signal(name="instr_err")
        m.d.comb += instr_err.eq(issue["take"] & issue["rejected"])
        codes = sorted({code for _, code in data_errors})
        counters = []
        for code in codes:
            strobes = [f for f, c in data_errors if c == code]
            pending = Signal(range(2 * len(strobes) + 2), name=f"{code.name.lower()}_err_pending")
            new = Signal(range(len(strobes) + 1), name=f"{code.name.lower()}_err_new")
            m.d.comb += new.eq(sum(strobes))
            counters.append((code, pending, new))
        with m.If(en):
            with m.If(instr_err):
                m.d.sync += [err.eq(1), err_code.eq(issue["code"])]
                m.d.sync += [p.eq(p + n) for _, p, n in counters]
            for i, (code, pending, new) in enumerate(counters):
                with m.Elif(pending.any() | new.any()):
                    m.d.sync += [err.eq(1), err_code.eq(code), pending.eq(pending + new - 1)]
                    m.d.sync += [p.eq(p + n) for j, (_, p, n) in enumerate(counters) if j != i]
            with m.Else():
                m.d.sync += [err.eq(0), err_code.eq(Error.NONE)]
        m.d.comb += [self.o_error.eq(err & en), self.o_error_code.eq(err_code)]

    def _tag_check(self, m, groups, valid, ratio, k, prefix):
        """1 when this cycle's stationary beat of a sparse LS (``ratio`` its compression ratio,
        0 for a dense LS; ``k`` its rows) has a row group ``4g .. 4g + 3 < k``, in a chain with
        a column in the beat (``valid``), whose tags (bits ``[32, 36)`` of the words) select an
        element not below the ratio or repeat a position (``isa.Error.TAG``)."""
        W, C, rows = LANE_WIDTH, self.chains, self.rows
        per = rows // self.row_groups

        def word(c, r):
            if not self.parallel:
                return groups[0][0].payload[(c * rows + r) * W : (c * rows + r + 1) * W]
            port = groups[(r // per) * C + c][0].payload
            return port[(r % per) * W : (r % per + 1) * W]

        # element bits >= ratio: ratio 2 (elements 0, 1), 3 (0 .. 2), 4 (all)
        bad = []
        for c in range(C):
            for g in range(rows // SPARSE_GROUP):
                tags = [
                    word(c, SPARSE_GROUP * g + i)[DATA_WIDTH : DATA_WIDTH + SPARSE_TAG_BITS]
                    for i in range(SPARSE_GROUP)
                ]
                elem = [((ratio == 2) & t[1]) | ((ratio == 3) & t[:2].all()) for t in tags]
                dup = [
                    tags[i] == tags[j]
                    for i in range(SPARSE_GROUP)
                    for j in range(i + 1, SPARSE_GROUP)
                ]
                inside = k >= SPARSE_GROUP * (g + 1)
                bad.append(valid[c] & inside & (Cat(*elem).any() | Cat(*dup).any()))
        out = Signal(name=f"{prefix}tag_bad")
        m.d.comb += out.eq(ratio.any() & _any(bad))
        return out

    def _selection_check(self, m, tag, payload, prefix):
        """``(bad, ones)``: ``bad`` 1 when ``payload`` is not a selection column over the rows
        ``[row_lo, row_hi)`` in the moving format of ``tag``; ``ones`` bit ``r``: lane ``r`` is
        a 1 inside those rows."""
        one = Signal(LANE_WIDTH, name=f"{prefix}sel_one_code")
        mask = Signal(LANE_WIDTH, name=f"{prefix}sel_mask")  # bits that count
        mag = Signal(LANE_WIDTH, name=f"{prefix}sel_mag_mask")  # ... without the sign
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
            x = payload[r * self.x_width : r * self.x_width + LANE_WIDTH]
            inside = Signal(name=f"{prefix}sel_in_r{r}")
            is_one = Signal(name=f"{prefix}sel_one_r{r}")
            is_zero = Signal(name=f"{prefix}sel_zero_r{r}")
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
                a = Signal(name=f"{prefix}sel_any{level}_{j}")
                two = Signal(name=f"{prefix}sel_two{level}_{j}")
                m.d.comb += [a.eq(a1 | a2), two.eq(t1 | t2 | (a1 & a2))]
                nxt.append((a, two))
            if len(nodes) % 2:
                nxt.append(nodes[-1])
            nodes = nxt
            level += 1
        bad = Signal(name=f"{prefix}sel_bad")
        m.d.comb += bad.eq(Cat(*any_bad).any() | nodes[0][1])
        return bad, Cat(*ones)


class _Slot:
    """The registers of one loader and one sequencer (a slot) and of its last accepted LS."""

    def __init__(self, ctl, k):
        C, RG = ctl.chains, ctl.row_groups
        p = f"s{k}_" if ctl.parallel else ""
        # the plane of the slot's loader and sequencer (the slots are the planes, when two)
        self.plane = k if ctl.planes > 1 else 0
        if ctl.planes > 1:
            p = f"p{k}_"
        # LS loader
        self.ls_beats = Signal(range(256), name=f"{p}ls_beats_left")
        self.ls_phase = Signal(range(MAX_INTERVAL), name=f"{p}ls_phase")
        self.ls_ii = Signal(range(MAX_INTERVAL + 1), name=f"{p}ls_ii", reset_less=True)
        self.ls_bank = Signal(name=f"{p}ls_bank", reset_less=True)
        # per chain: its beats are the first ``ls_beats - ls_lim`` of the LS
        self.ls_lim = [Signal(range(256), name=f"{p}ls_lim{c}", reset_less=True) for c in range(C)]
        # the PE groups of the LS's tile (row groups, column groups)
        self.ls_r = Signal(RG, name=f"{p}ls_rmask", reset_less=True)
        self.ls_c = Signal(ctl.chains if ctl.parallel else 1, name=f"{p}ls_cmask", reset_less=True)
        # MM sequencer
        self.mm_beats = Signal(range(MAX_N_ANY + 1), name=f"{p}mm_beats_left")
        self.mm_slots = Signal(range(MAX_N_ANY + 1), name=f"{p}mm_slots_left")
        self.mm_phase = Signal(range(MAX_INTERVAL), name=f"{p}mm_phase")
        self.mm_ii = Signal(range(MAX_INTERVAL + 1), name=f"{p}mm_ii", reset_less=True)
        self.mm_tag = Signal(beat_tag_layout(ctl.rows), name=f"{p}mm_tag", reset_less=True)
        self.mm_cols = Signal(OUT_INFO_LAYOUT, name=f"{p}mm_cols", reset_less=True)
        self.mm_flagged = Signal(name=f"{p}mm_sel_flagged")  # selection error reported
        self.mm_bank = Signal(name=f"{p}mm_bank", reset_less=True)
        self.mm_r = Signal.like(self.ls_r, name=f"{p}mm_rmask")
        self.mm_c = Signal.like(self.ls_c, name=f"{p}mm_cmask")
        self.mm_inj = Signal(ctl.injections, name=f"{p}mm_inj", reset_less=True)
        # the last LS accepted on this slot and its bank
        self.desc = Signal(LS_DESC_LAYOUT, name=f"{p}st_desc", reset_less=True)
        self.desc_bank = Signal(name=f"{p}st_bank", reset_less=True)
        # sparse: the loading LS's ratio and K, whether its tags broke a rule (so far), and
        # whether the MM in the sequencer runs on such a stationary
        self.ls_ratio = Signal(dict(FIELDS)["sparse"], name=f"{p}ls_ratio", reset_less=True)
        self.ls_k = Signal(8, name=f"{p}ls_k", reset_less=True)
        self.st_tag_bad = Signal(name=f"{p}st_tag_bad")
        self.mm_tag_bad = Signal(name=f"{p}mm_tag_bad", reset_less=True)
        #: (set by the loaders) the stationary's tags are broken, this cycle's beat included
        self.tag_bad_now = None


class _State:
    """The control's registers: per plane and PE group (``tile_unit x tile_unit``; one group
    without parallel tiles) the bank its next LS writes, whether it holds an LS and that LS's
    tile; per slot a :class:`_Slot`; with the background plane the plane of the latest
    accepted LS."""

    def __init__(self, ctl):
        RG = ctl.row_groups
        CG = ctl.chains if ctl.parallel else 1

        def groups(p):
            q = f"p{p}_" if ctl.planes > 1 else ""
            return [
                [
                    dict(
                        next_bank=Signal(name=f"{q}g{g}_{j}_next_bank"),
                        has_ls=Signal(name=f"{q}g{g}_{j}_has_ls"),
                        reg_r=Signal(RG, name=f"{q}g{g}_{j}_ls_rmask", reset_less=True),
                        reg_c=Signal(CG, name=f"{q}g{g}_{j}_ls_cmask", reset_less=True),
                    )
                    for j in range(CG)
                ]
                for g in range(RG)
            ]

        #: per plane, per PE group
        self.planes = [groups(p) for p in range(ctl.planes)]
        self.groups = self.planes[0]
        #: the plane of the latest accepted LS (background plane)
        self.latest_plane = Signal(name="latest_ls_plane")
        self.slots = [_Slot(ctl, k) for k in range(ctl.slots)]
