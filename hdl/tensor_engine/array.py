"""The systolic PE array: ``rows x cols`` PEs, input skew lines, output de-skew.

* Left side, per row ``r``: an ``r``-cycle delay line for the moving lane word (a memory from
  3 cycles up, :func:`ncrtl.hdl.common.delay.delay_line`).  The beat tag is the same for every
  row of a row group, so it travels down a one-register-per-row chain (row ``r`` sees it ``r``
  cycles late, like its data) and each row derives its own ``valid`` / ``first_row`` from the
  beat's row range.  With parallel tiles every row group (``tile_granule`` rows) has its own
  tag chain, and every column group ``j`` an injection point: its words and tags delayed ``j *
  chain_width`` cycles, then the same row skew, taking a row's place at the group's first
  column when they carry a beat (a column tile's moving data enters at its own columns).
* LoadStationary chains: the columns are cut into chains of ``chain_width`` columns
  (:func:`ncrtl.model.tensor_engine.timing.chain_width`: 4 chains of 32 at 128 columns), each
  fed by its own lane words and control and all loading at once.  Chain ``k`` enters PE column
  ``k * chain_width``; its words and control are delayed ``k * chain_width`` cycles before the
  row skew, so that they reach PE ``(r, c)`` in the same cycle as a moving beat applied with
  them (the moving wavefront: a bank write is visible exactly when the beats that must see it
  arrive): the lag, then one ``r``-cycle row skew carrying every chain's word of row ``r``,
  both memory delay lines; the chains' control (per row group) goes down a register per row.
  The word a chain's last PE displaces is dropped.  A column tile starts at a chain (chains
  are ``tile_granule`` columns wide), so its LS enters at its own columns.
* Bottom: column ``c`` goes through a ``cols - 1 - c`` cycle de-skew line into the output vector
  register (``o_psum``); with parallel tiles the same below every row group (an output tap
  ``(g + 1) * tile_granule - rows`` cycles earlier than the bottom).

A beat applied to ``i_x`` / ``i_tag`` in cycle ``t`` (with ``en``) is in ``x_reg`` of PE
``(r, c)`` in cycle ``t + r + c + 1`` and its psum is in ``o_psum`` in cycle
``t + rows + cols + P_PREFIX + 1`` (:attr:`SystolicArray.latency`).

PEs are placed as ``Instance(PE_MODULE, ...)`` of the one PE module when ``instance=True``
(Verilog generation: :meth:`SystolicArray.cells` lists the PE, and :func:`ncrtl.hdl.verilog.convert`
emits it once for the whole array), or as Amaranth submodules otherwise (the Amaranth simulator
cannot run instances).  With ``instance=True`` and a ``block`` size ``B > 1``, the PEs are grouped
into ``B x B`` tiles: one tile module (:data:`TILE_MODULE`, :class:`PETile`, also a cell) that
places its PEs, and the array places ``(rows / B) x (cols / B)`` tile instances.  The tiles are pure wiring (the
timing is that of the PE grid), but they let a simulator compile one flat tile and reuse it: a
Verilator hierarchical block per tile instead of per PE (see hdl/tensor_engine/verilator.vlt).
"""

from amaranth.hdl import (
    Cat,
    ClockSignal,
    Const,
    Instance,
    Module,
    Mux,
    ResetSignal,
    Shape,
    Signal,
    Value,
)
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import bits_for_range
from ncrtl.hdl.common.delay import delay_line
from ncrtl.hdl.common.params import check_bool, check_int, validated_init
from ncrtl.hdl.verilog import Cell
from ncrtl.model.tensor_engine.timing import chain_count, chain_width

from .pe import (
    GROUP_ROWS,
    LANE_WIDTH,
    LS_CTL_LAYOUT,
    P_PREFIX,
    PE,
    TAG_LAYOUT,
    build_modes,
    moving_width,
)

__all__ = ["SystolicArray", "PETile", "PE_MODULE", "TILE_MODULE", "PE_WIDTHS", "default_block"]

#: Verilog module name of the PE.
PE_MODULE = "te_pe"
#: Verilog module name of a ``B x B`` tile of PEs (one tile size per design).
TILE_MODULE = "te_tile"

_TAG_BITS = Shape.cast(TAG_LAYOUT).width
_LSC_BITS = Shape.cast(LS_CTL_LAYOUT).width


def default_block(rows, cols, granule):
    """The tile size :class:`SystolicArray` uses by default: the largest of 8, 4, 2 dividing
    ``rows``, ``cols`` and the column-tile ``granule`` (so no column-group border falls inside a
    tile), or 1 (PEs placed one by one)."""
    for b in (8, 4, 2):
        if rows % b == 0 and cols % b == 0 and granule % b == 0:
            return b
    return 1


def beat_tag_layout(rows):
    """Tag of a moving beat at the array's left edge: the PE tag (``pe``, its ``first_row`` not
    yet set) and the row range ``[row_lo, row_hi)`` of the rows that compute; each row derives
    its own ``valid`` and ``first_row`` from the range."""
    return data.StructLayout(
        {
            "pe": TAG_LAYOUT,
            "row_lo": bits_for_range(0, rows),
            "row_hi": bits_for_range(0, rows),
        }
    )


#: Port widths of the PE: ``x``, ``tag``, ``ls``, ``ls_ctl``, ``psum`` (a cell placed like the PE
#: has the same ports, maybe narrower: the background plane's).
PE_WIDTHS = (LANE_WIDTH, _TAG_BITS, LANE_WIDTH, _LSC_BITS, 32)


def _place_pe(m, name, en, x, tag, ls, lsc, psum, module=PE_MODULE, widths=PE_WIDTHS, grp=None):
    """Place one instance of the PE (or of a cell ``module`` with the PE's ports of
    ``widths``; ``grp``: a sparse PE's ``i_grp``); return its (o_x, o_tag, o_ls, o_ls_ctl,
    o_psum) signals."""
    wx, wt, wl, wc, wp = widths
    o_x = Signal(wx, name=f"x_{name}")
    o_tag = Signal(wt, name=f"tag_{name}")
    o_ls = Signal(wl, name=f"ls_{name}")
    o_lsc = Signal(wc, name=f"lsc_{name}")
    o_psum = Signal(wp, name=f"psum_{name}")
    extra = {} if grp is None else {"i_i_grp": grp}
    m.submodules[f"pe_{name}"] = Instance(
        module,
        **extra,
        i_clk=ClockSignal(),
        i_rst=ResetSignal(),
        i_en=en,
        i_i_x=x,
        i_i_tag=Value.cast(tag),
        i_i_ls=ls,
        i_i_ls_ctl=Value.cast(lsc),
        i_i_psum=psum,
        o_o_x=o_x,
        o_o_tag=Value.cast(o_tag),
        o_o_ls=o_ls,
        o_o_ls_ctl=Value.cast(o_lsc),
        o_o_psum=o_psum,
    )
    return o_x, o_tag, o_ls, o_lsc, o_psum


def grid_ports(rows, cols, chains):
    """The members of an array (or engine) with ``external_grid``: see
    :class:`SystolicArray`."""
    return {
        "o_grid_en": Out(1),
        "o_grid_x": Out(rows * LANE_WIDTH),
        "o_grid_tag": Out(rows * _TAG_BITS),
        "o_grid_ls": Out(chains * rows * LANE_WIDTH),
        "o_grid_ls_ctl": Out(chains * rows * _LSC_BITS),
        "i_grid_psum": In(cols * 32),
    }


def place_tile(m, instance, name, prefix, module, en, inputs, widths, size, grp=None):
    """Place one ``size x size`` tile instance ``instance`` of ``module`` (a :class:`PETile` of
    cells with the port ``widths``); ``inputs``: its ``(x, tag, ls, ls_ctl, psum)`` values;
    ``grp``: a sparse tile's ``i_grp``.  Returns its outputs ``{"x", "tag", "ls", "lsc",
    "psum"}`` (and a sparse tile's ``"xall"``), signals named ``<prefix><key>_<name>``."""
    o = {
        k: Signal(size * w, name=f"{prefix}{k}_{name}")
        for k, w in zip(("x", "tag", "ls", "lsc", "psum"), widths)
    }
    x, tag, ls, lsc, psum = inputs
    extra = {}
    if grp is not None:
        o["xall"] = Signal(size * size * widths[0], name=f"{prefix}xall_{name}")
        extra = {"i_i_grp": grp, "o_o_xall": o["xall"]}
    m.submodules[instance] = Instance(
        module,
        **extra,
        i_clk=ClockSignal(),
        i_rst=ResetSignal(),
        i_en=en,
        i_i_x=x,
        i_i_tag=tag,
        i_i_ls=ls,
        i_i_ls_ctl=lsc,
        i_i_psum=psum,
        o_o_x=o["x"],
        o_o_tag=o["tag"],
        o_o_ls=o["ls"],
        o_o_ls_ctl=o["lsc"],
        o_o_psum=o["psum"],
    )
    return o


class PETile(wiring.Component):
    """``size x size`` PEs as ``Instance`` of :data:`PE_MODULE`, wired like the array: moving
    words, tags and the LS chain enter on the left (one lane per row) and leave on the right,
    psums enter on top (one lane per column) and leave at the bottom.  No logic of its own.

    Parameters
    ----------
    size : int
        PEs per side.
    module : str
        The cell's Verilog module (:data:`PE_MODULE`; the background plane places its own).
    widths : tuple of int
        The cell's port widths ``(x, tag, ls, ls_ctl, psum)`` (:data:`PE_WIDTHS`).
    sparse : bool
        The PEs' sparse path: every PE's group words come in on ``i_grp`` and every PE's
        moving word leaves on ``o_xall`` (the array wires one to the other, across tiles).

    Interface
    ---------
    en : In(1, init=1)
    i_x, o_x : In / Out(size * LANE_WIDTH)
        Moving lane word of row ``r`` in bits ``[40r, 40r+40)``.
    i_tag, o_tag : In / Out(size * bits of TAG_LAYOUT)
    i_ls, o_ls : In / Out(size * LANE_WIDTH)
    i_ls_ctl, o_ls_ctl : In / Out(size * bits of LS_CTL_LAYOUT)
    i_psum, o_psum : In / Out(size * 32)
        Psum lane of column ``c`` in bits ``[32c, 32c+32)``.
    i_grp : In(size * size * 4 * x width), o_xall : Out(size * size * x width)
        With ``sparse``: PE ``(r, c)``'s ``i_grp`` in word ``r * size + c`` (of ``4 * x``
        bits), its ``o_x`` in word ``r * size + c``.
    """

    @validated_init
    def __init__(self, size, *, module=PE_MODULE, widths=PE_WIDTHS, sparse=False):
        self.size = check_int(size, "PETile size", minimum=1, maximum=64)
        self.module, self.widths = module, tuple(widths)
        self.sparse = check_bool(sparse, "PETile sparse")
        W, T, _, L, P = self.widths
        extra = {}
        if self.sparse:
            extra = {
                "i_grp": In(size * size * GROUP_ROWS * W),
                "o_xall": Out(size * size * W),
            }
        super().__init__(
            {
                **extra,
                "en": In(1, init=1),
                "i_x": In(size * W),
                "i_tag": In(size * T),
                "i_ls": In(size * self.widths[2]),
                "i_ls_ctl": In(size * L),
                "i_psum": In(size * P),
                "o_x": Out(size * W),
                "o_tag": Out(size * T),
                "o_ls": Out(size * self.widths[2]),
                "o_ls_ctl": Out(size * L),
                "o_psum": Out(size * P),
            }
        )

    def elaborate(self, platform):
        m = Module()
        B = self.size
        W, T, S, L, P = self.widths
        above = [self.i_psum[c * P : (c + 1) * P] for c in range(B)]
        G = GROUP_ROWS * W
        for r in range(B):
            x, ls = self.i_x[r * W : (r + 1) * W], self.i_ls[r * S : (r + 1) * S]
            tag, lsc = self.i_tag[r * T : (r + 1) * T], self.i_ls_ctl[r * L : (r + 1) * L]
            for c in range(B):
                i = r * B + c
                grp = self.i_grp[i * G : (i + 1) * G] if self.sparse else None
                x, tag, ls, lsc, above[c] = _place_pe(
                    m,
                    f"{r}_{c}",
                    self.en,
                    x,
                    tag,
                    ls,
                    lsc,
                    above[c],
                    self.module,
                    self.widths,
                    grp=grp,
                )
                if self.sparse:
                    m.d.comb += self.o_xall[i * W : (i + 1) * W].eq(x)
            m.d.comb += [
                self.o_x[r * W : (r + 1) * W].eq(x),
                self.o_ls[r * S : (r + 1) * S].eq(ls),
                self.o_tag[r * T : (r + 1) * T].eq(tag),
                self.o_ls_ctl[r * L : (r + 1) * L].eq(lsc),
            ]
        for c in range(B):
            m.d.comb += self.o_psum[c * P : (c + 1) * P].eq(above[c])
        return m


class SystolicArray(wiring.Component):
    """``rows x cols`` PEs with their skew lines (see the module docstring).

    Parameters
    ----------
    rows, cols : int
        Array size.
    instance : bool
        Place the PEs as ``Instance`` of :data:`PE_MODULE` (True; the Verilog then needs the PE
        module: :meth:`cells`) or as Amaranth submodules (False, for simulation).
    tile_granule : int
        Column-group width of column tiles (32 on the hardware; smaller in tests).
    block : int or None
        With ``instance``: PEs per side of a :class:`PETile` (must divide ``rows``, ``cols`` and
        ``tile_granule``; 1 places PEs one by one); ``None`` picks :func:`default_block`.
    modes : sequence of PeMode or None
        The modes the PE is built for (:class:`~ncrtl.hdl.tensor_engine.pe.PE`; None: every
        engine mode).
    parallel_tiles : bool
        The paths parallel tiles need: the rows cut into row groups of ``tile_granule`` rows,
        each with its own beat tags and LoadStationary control; a moving injection point at
        the first column of every column group (a column tile's moving data enters there); an
        output tap below every row group (a row tile's results leave there).
    sparse : bool
        The PEs' sparse path (:class:`~ncrtl.hdl.tensor_engine.pe.PE`): moving lane words of
        :func:`~ncrtl.hdl.tensor_engine.pe.moving_width` bits, and every PE's ``i_grp`` wired
        to the ``x_reg`` of the PEs of its row group (rows ``4g .. 4g + 3``) that hold its beat:
        the beat in PE ``(r, c)`` is in PE ``(r', c + r - r')`` in the same cycle, so group row
        ``i`` of PE ``(4g + j, c)`` is PE ``(4g + i, c + j - i)``.  Left of column 0 that is the
        row's skew line ``i - j`` cycles before its end, right of the last column three more
        registers after the row's last PE.  In tiles, every PE's group words enter its tile
        and every PE's moving word leaves it (:class:`PETile` ``sparse``): the wiring is the
        array's.  Rows a multiple of 4; not with ``external_grid``.
    external_grid : bool
        The array without its PE grid (serial engine only): what the grid's left edge and
        LoadStationary chain entries would receive leaves on the ``o_grid_*`` ports and the
        psums of the grid's bottom row enter on ``i_grid_psum``, for a simulation that steps
        the grid as column bands (:mod:`ncrtl.hdl.tensor_engine.band`).

    Attributes
    ----------
    latency : int
        ``rows + cols + P_PREFIX + 1``: cycles of ``en`` from a beat on ``i_x`` to its result
        vector on the bottom tap of ``o_psum``; tap ``g`` (parallel tiles) is ``(g + 1) *
        tile_granule - rows`` cycles earlier.
    chain_width, chains : int
        Columns per LoadStationary chain and the number of chains.
    row_groups, injections : int
        Row groups (output taps) and moving injection points (the column groups): 1 and 1
        without parallel tiles.

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of the whole array.
    i_x : In(injections * rows * LANE_WIDTH)
        Moving beat of injection point ``j`` (column ``j * chain_width``): lane word ``j * rows
        + r`` (bits ``[40i, 40i+40)``: data, then the MX scale) enters PE row ``r`` there.
        Injection ``j``'s words are delayed ``j * chain_width`` cycles so that they join the
        wavefront of the left edge.
    i_tag : In(data.ArrayLayout(beat_tag_layout(rows), injections * row_groups))
        Its tag, per injection ``j`` and row group ``g`` (index ``j * row_groups + g``); rows
        outside ``[row_lo, row_hi)`` get ``valid = 0`` (psum passes through), row ``row_lo``
        gets ``first_row``.  At an injection point ``j >= 1`` a beat with ``pe.valid`` takes
        the row's place, else the words from the left pass on.
    i_ls : In(chains * rows * LANE_WIDTH)
        LoadStationary beat: lane word ``k * rows + r`` shifts into row ``r`` of chain ``k``.
    i_ls_ctl : In(data.ArrayLayout(LS_CTL_LAYOUT, row_groups * chains))
        Per row group ``g`` and chain ``k`` (index ``g * chains + k``): ``valid``, target
        ``bank``.
    o_psum : Out(row_groups * cols * 32)
        Output vector registers: lane word ``g * cols + c`` is the psum leaving PE column ``c``
        below row group ``g`` (one tap, the bottom, without parallel tiles).
    o_grid_en, o_grid_x, o_grid_tag, o_grid_ls, o_grid_ls_ctl, i_grid_psum
        With ``external_grid`` only: the grid's clock enable; row ``r``'s moving word and PE
        tag entering column 0 (``rows`` lanes); chain ``k``'s LoadStationary word and control
        entering row ``r`` of its first column (lane ``k * rows + r``); the psum leaving the
        bottom of column ``c`` (lane ``c``).
    """

    @validated_init
    def __init__(
        self,
        rows,
        cols,
        *,
        instance=True,
        tile_granule=32,
        block=None,
        parallel_tiles=False,
        modes=None,
        external_grid=False,
        sparse=False,
    ):
        check_int(rows, "SystolicArray rows", minimum=1, maximum=255)
        check_int(cols, "SystolicArray cols", minimum=1, maximum=255)
        check_int(tile_granule, "SystolicArray tile_granule", minimum=1)
        check_bool(instance, "SystolicArray instance")
        check_bool(parallel_tiles, "SystolicArray parallel_tiles")
        check_bool(external_grid, "SystolicArray external_grid")
        check_bool(sparse, "SystolicArray sparse")
        if sparse and (rows % GROUP_ROWS or external_grid):
            raise ValueError(
                f"SystolicArray sparse needs rows a multiple of {GROUP_ROWS} (not {rows}) and "
                f"its own grid (not external_grid)"
            )
        if external_grid and parallel_tiles:
            raise ValueError(
                "SystolicArray external_grid is for the serial array, not parallel tiles"
            )
        if block is None:
            block = default_block(rows, cols, tile_granule) if instance else 1
        check_int(block, "SystolicArray block", minimum=1)
        if rows % block or cols % block or tile_granule % block:
            raise ValueError(
                f"SystolicArray block {block} must divide rows={rows}, cols={cols} "
                f"and tile_granule={tile_granule}"
            )
        if block > 1 and not instance:
            raise ValueError(
                "SystolicArray block > 1 needs instance=True (tiles are Verilog instances)"
            )
        if parallel_tiles and (rows % tile_granule or cols % tile_granule):
            raise ValueError(
                f"SystolicArray with parallel tiles needs rows and cols that are multiples of "
                f"tile_granule {tile_granule}, not {rows} x {cols}"
            )
        self.block = block
        self.modes = build_modes(modes)
        self.sparse = sparse
        #: Bits of a moving lane word.
        self.x_width = moving_width(self.modes, sparse)
        if sparse and not any(md.sparse for md in self.modes):
            raise ValueError(
                f"SystolicArray sparse needs a mode with sparse matmuls, not "
                f"{[md.name for md in self.modes]}"
            )
        self.rows, self.cols = rows, cols
        self.instance = instance
        self.tile_granule = tile_granule
        self.parallel = parallel_tiles
        self.latency = rows + cols + P_PREFIX + 1
        self.chain_width = chain_width(cols, tile_granule)
        self.chains = chain_count(cols, tile_granule)
        self.row_groups = rows // tile_granule if parallel_tiles else 1
        self.injections = self.chains if parallel_tiles else 1
        RG, J, C = self.row_groups, self.injections, self.chains
        self.external_grid = external_grid
        members = {
            "en": In(1, init=1),
            "i_x": In(J * rows * self.x_width),
            "i_tag": In(data.ArrayLayout(beat_tag_layout(rows), J * RG)),
            "i_ls": In(C * rows * LANE_WIDTH),
            "i_ls_ctl": In(data.ArrayLayout(LS_CTL_LAYOUT, RG * C)),
            "o_psum": Out(RG * cols * 32),
        }
        if external_grid:
            members.update(grid_ports(rows, cols, C))
        super().__init__(members)

    def cells(self):
        """The modules the array places with ``Instance`` (:class:`ncrtl.hdl.verilog.Cell`):
        the PE, and the tile module when the PEs are tiled; none with ``instance=False`` or
        ``external_grid``."""
        if not self.instance or self.external_grid:
            return []
        modes, sparse = self.modes, self.sparse
        cells = [Cell(PE_MODULE, lambda: PE(modes, sparse))]
        if self.block > 1:
            block, widths = self.block, (self.x_width,) + PE_WIDTHS[1:]
            cells.append(
                Cell(TILE_MODULE, lambda: PETile(block, widths=widths, sparse=sparse), flat=False)
            )
        return cells

    def elaborate(self, platform):
        m = Module()
        rows, cols, W, en = self.rows, self.cols, self.x_width, self.en
        RG, J, C, G = self.row_groups, self.injections, self.chains, self.chain_width
        per = rows // RG  # rows per row group
        layout = beat_tag_layout(rows)
        T = Shape.cast(layout).width

        # ---- moving: injection j lagged j * chain_width (its words and its tags) ----------
        xs, tags = [], []
        for j in range(J):
            word = Cat(
                self.i_x[j * rows * W : (j + 1) * rows * W],
                *(self.i_tag[j * RG + g].as_value() for g in range(RG)),
            )
            word = delay_line(m, en, f"x_j{j}_lag", word, j * G)
            xs.append(word[: rows * W])
            tags.append([word[rows * W + g * T : rows * W + (g + 1) * T] for g in range(RG)])
        # Row group g's tags (of every injection) delayed g * per, then a register per row (row r
        # sees them r cycles late, like its data); each row derives its own valid / first_row.
        tag_rows = []
        for g in range(RG):
            t = delay_line(m, en, f"tag_g{g}", Cat(*(tags[j][g] for j in range(J))), g * per)
            for i in range(per):
                r = g * per + i
                if i:
                    nt = Signal(J * T, name=f"beat_tag_r{r}", reset_less=True)
                    with m.If(en):
                        m.d.sync += nt.eq(t)
                    t = nt
                tag_rows.append([data.View(layout, t[j * T : (j + 1) * T]) for j in range(J)])
        # x_in[r][j], tag_in[r][j], sel_in[r][j]: what injection j gives row r, and whether it
        # carries a beat there (it then takes the row's place at its column).
        x_in, tag_in, sel_in = [], [], []
        # left_taps[r][k] (sparse): what PE (r, -k) would hold, the word that enters PE (r, 0)
        # k cycles later: the skew line's input delayed r + 1 - k (k = 1: its output).  Row
        # 4g + i needs k up to i (for the group rows above it).
        self._left_taps = [[None] * GROUP_ROWS for _ in range(rows)]
        for r in range(rows):
            word = Cat(*(xs[j][r * W : (r + 1) * W] for j in range(J)))
            taps = r % GROUP_ROWS if self.sparse else 0
            skewed = delay_line(m, en, f"x_skew_r{r}", word, r + 1 - taps if taps else r)
            for k in range(taps, 0, -1):
                self._left_taps[r][k] = skewed[:W]
                if k > 1:
                    nxt = Signal(len(word), name=f"x_skew_r{r}_t{k - 1}", reset_less=True)
                    with m.If(en):
                        m.d.sync += nxt.eq(skewed)
                    skewed = nxt
            xr, tr_, sr = [], [], []
            for j in range(J):
                bt = tag_rows[r][j]
                pt = Signal(TAG_LAYOUT, name=f"pe_tag_r{r}_j{j}" if J > 1 else f"pe_tag_r{r}")
                inside = Signal(name=f"row_inside_r{r}_j{j}" if J > 1 else f"row_inside_r{r}")
                # (Row 0 compares with ~x.any(): Amaranth writes x == 0 as a WIDTHTRUNC-ing !x.)
                m.d.comb += [
                    inside.eq((bt.row_lo <= r if r else ~bt.row_lo.any()) & (bt.row_hi > r)),
                    pt.eq(bt.pe),
                    pt.valid.eq(bt.pe.valid & inside),
                    pt.first_row.eq(bt.row_lo == r if r else ~bt.row_lo.any()),
                ]
                xr.append(skewed[j * W : (j + 1) * W])
                tr_.append(pt)
                sr.append(bt.pe.valid)
            x_in.append(xr)
            tag_in.append(tr_)
            sel_in.append(sr)

        # ---- LoadStationary chains: chain k delayed k * chain_width, then the row skew --------
        # (The chains share one row skew, a word of every chain per row, and one control chain
        # down the rows: the same bits as a skew per chain in a quarter of the registers.)
        L = Shape.cast(LS_CTL_LAYOUT).width
        W = LANE_WIDTH  # the stationary words
        words, ctls = [], [[None] * C for _ in range(RG)]
        for k in range(C):
            beat = Cat(
                self.i_ls[k * rows * W : (k + 1) * rows * W],
                *(self.i_ls_ctl[g * C + k].as_value() for g in range(RG)),
            )
            beat = delay_line(m, en, f"ls_c{k}_lag", beat, k * G)
            words.append(beat[: rows * W])
            for g in range(RG):
                ctls[g][k] = beat[rows * W + g * L : rows * W + (g + 1) * L]
        ctl_chain = [Cat(*(ctls[g][k] for g in range(RG) for k in range(C)))]
        for r in range(1, rows):
            c = Signal(RG * C * L, name=f"ls_ctl_r{r}", reset_less=True)
            with m.If(en):
                m.d.sync += c.eq(ctl_chain[-1])
            ctl_chain.append(c)
        # ls_in[k][r], lsc_in[k][r]: what enters PE (r, k * chain_width)
        ls_in = [[None] * rows for _ in range(C)]
        lsc_in = [[None] * rows for _ in range(C)]
        for r in range(rows):
            row = Cat(*(words[k][r * W : (r + 1) * W] for k in range(C)))
            row = delay_line(m, en, f"ls_skew_r{r}", row, r)
            g = r // per
            for k in range(C):
                ls_in[k][r] = row[k * W : (k + 1) * W]
                at = (g * C + k) * L
                lsc_in[k][r] = data.View(LS_CTL_LAYOUT, ctl_chain[r][at : at + L])

        # ---- the PE grid --------------------------------------------------------------
        inputs = (x_in, tag_in, sel_in, ls_in, lsc_in)
        if self.external_grid:
            taps = self._external(m, *inputs)
        elif self.block > 1:
            taps = self._tiles(m, *inputs)
        else:
            taps = self._grid(m, *inputs)

        # ---- below every tap: de-skew into the output vector register ------------------------
        out = Signal(RG * cols * 32, name="out_vec", reset_less=True)
        for g, bottom in enumerate(taps):
            for c in range(cols):
                lane = (g * cols + c) * 32
                name = f"deskew_g{g}_c{c}" if RG > 1 else f"deskew_c{c}"
                late = delay_line(m, en, name, bottom[c], cols - 1 - c)
                with m.If(en):
                    m.d.sync += out[lane : lane + 32].eq(late)
        m.d.comb += self.o_psum.eq(out)
        return m

    def _external(self, m, x_in, tag_in, sel_in, ls_in, lsc_in):
        """No grid: its inputs leave on the ``o_grid_*`` ports, its bottom psums enter on
        ``i_grid_psum``; return the one tap."""
        rows, C = self.rows, self.chains
        m.d.comb += [
            self.o_grid_en.eq(self.en),
            self.o_grid_x.eq(Cat(*(x_in[r][0] for r in range(rows)))),
            self.o_grid_tag.eq(Cat(*(Value.cast(tag_in[r][0]) for r in range(rows)))),
            self.o_grid_ls.eq(Cat(*(ls_in[k][r] for k in range(C) for r in range(rows)))),
            self.o_grid_ls_ctl.eq(
                Cat(*(Value.cast(lsc_in[k][r]) for k in range(C) for r in range(rows)))
            ),
        ]
        return [[self.i_grid_psum[c * 32 : (c + 1) * 32] for c in range(self.cols)]]

    def _inject(self, m, moving, r, c, x, tag):
        """The moving word and tag entering PE (r, c): at the first column of a column group
        (parallel tiles) the injection point's when it carries a beat, else ``x`` and ``tag``
        from the left."""
        x_in, tag_in, sel_in = moving
        if c == 0:
            return x_in[r][0], tag_in[r][0]
        if not self.parallel or c % self.chain_width:
            return x, tag
        j = c // self.chain_width
        xi = Signal(self.x_width, name=f"x_inject_r{r}_c{c}")
        ti = Signal(TAG_LAYOUT, name=f"tag_inject_r{r}_c{c}")
        sel = sel_in[r][j]
        m.d.comb += [
            xi.eq(Mux(sel, x_in[r][j], x)),
            ti.eq(Mux(sel, Value.cast(tag_in[r][j]), Value.cast(tag))),
        ]
        return xi, ti

    def _grid(self, m, x_in, tag_in, sel_in, ls_in, lsc_in):
        """PEs one by one; return per tap the psum signals leaving its row group's last row."""
        rows, cols = self.rows, self.cols
        per = rows // self.row_groups
        psum_above = [None] * cols
        G = self.chain_width
        taps = []
        for r in range(rows):
            x = tag = None
            for c in range(cols):
                if c % G == 0:  # a chain enters here
                    ls, lsc = ls_in[c // G][r], lsc_in[c // G][r]
                x, tag = self._inject(m, (x_in, tag_in, sel_in), r, c, x, tag)
                psum = psum_above[c] if psum_above[c] is not None else Const(0, 32)
                outs = self._pe(m, r, c, x, tag, ls, lsc, psum)
                x, tag, ls, lsc, psum_above[c] = outs
            if (r + 1) % per == 0:
                taps.append(list(psum_above))
        if self.sparse:
            self._group_words(m)
        return taps

    def _group_words(self, m):
        """Wire every PE's ``i_grp``: group row ``i`` of PE ``(4g + j, c)`` is the ``x_reg`` of
        PE ``(4g + i, c + j - i)``, the left taps of the skew lines left of column 0, three
        registers after the last column right of it."""
        rows, cols, W = self.rows, self.cols, self.x_width
        right = []
        for r in range(rows):
            ext, prev = [], self._x_out[r][cols - 1]
            for k in range(GROUP_ROWS - 1):
                nxt = Signal(W, name=f"x_after_r{r}_{k}", reset_less=True)
                with m.If(self.en):
                    m.d.sync += nxt.eq(prev)
                ext.append(nxt)
                prev = nxt
            right.append(ext)

        def word(r, c):
            if c < 0:
                return self._left_taps[r][-c]
            if c >= cols:
                return right[r][c - cols]
            return self._x_out[r][c]

        for r in range(rows):
            g, j = divmod(r, GROUP_ROWS)
            for c in range(cols):
                words = [word(GROUP_ROWS * g + i, c + j - i) for i in range(GROUP_ROWS)]
                m.d.comb += self._grp[r][c].eq(Cat(*words))

    def _tiles(self, m, x_in, tag_in, sel_in, ls_in, lsc_in):
        """``B x B`` tile instances; return per tap the psum signals leaving its row group's
        last row.  Column-group and row-group borders fall between tiles (``B`` divides the
        granule)."""
        B, W, T, L = self.block, self.x_width, _TAG_BITS, _LSC_BITS
        moving = (x_in, tag_in, sel_in)
        per = self.rows // self.row_groups
        psum_above = [Const(0, B * 32)] * (self.cols // B)
        G = self.chain_width
        widths = (W,) + PE_WIDTHS[1:]
        taps = []
        if self.sparse:
            self._grp = [[None] * self.cols for _ in range(self.rows)]
            self._x_out = [[None] * self.cols for _ in range(self.rows)]
            tile_grp = {}
        for tr in range(self.rows // B):
            rs = range(tr * B, (tr + 1) * B)
            xs = [None] * B
            tags = [None] * B
            for tc in range(self.cols // B):
                c0 = tc * B
                for i, r in enumerate(rs):
                    xs[i], tags[i] = self._inject(m, moving, r, c0, xs[i], tags[i])
                if c0 % G == 0:  # a chain enters here
                    ls = Cat(*(ls_in[c0 // G][r] for r in rs))
                    lsc = [lsc_in[c0 // G][r] for r in rs]
                name = f"{tr}_{tc}"
                inputs = (
                    Cat(*xs),
                    Cat(*(Value.cast(t) for t in tags)),
                    ls,
                    Cat(*(Value.cast(v) for v in lsc)),
                    psum_above[tc],
                )
                grp = None
                if self.sparse:
                    grp = tile_grp[tr, tc] = Signal(B * B * GROUP_ROWS * W, name=f"tgrp_{name}")
                o = place_tile(
                    m, f"tile_{name}", name, "t", TILE_MODULE, self.en, inputs, widths, B, grp
                )
                if self.sparse:
                    for i, r in enumerate(rs):
                        for c in range(B):
                            at = (i * B + c) * W
                            self._x_out[r][c0 + c] = o["xall"][at : at + W]
                xs = [o["x"][i * W : (i + 1) * W] for i in range(B)]
                tags = [o["tag"][i * T : (i + 1) * T] for i in range(B)]
                ls, psum_above[tc] = o["ls"], o["psum"]
                lsc = [o["lsc"][i * L : (i + 1) * L] for i in range(B)]
            if ((tr + 1) * B) % per == 0:
                taps.append(
                    [psum_above[c // B][(c % B) * 32 : (c % B + 1) * 32] for c in range(self.cols)]
                )
        if self.sparse:
            # every PE's group words, wired like the grid's; then into their tiles' i_grp
            GW = GROUP_ROWS * W
            for r in range(self.rows):
                for c in range(self.cols):
                    self._grp[r][c] = Signal(GW, name=f"grp_{r}_{c}")
            self._group_words(m)
            for (tr, tc), sig in tile_grp.items():
                words = [self._grp[tr * B + i][tc * B + c] for i in range(B) for c in range(B)]
                m.d.comb += sig.eq(Cat(*words))
        return taps

    def _pe(self, m, r, c, x, tag, ls, lsc, psum):
        """Place PE (r, c); return its (o_x, o_tag, o_ls, o_ls_ctl, o_psum) signals.  A
        sparse PE's ``i_grp`` is ``self._grp[r][c]`` (wired by :meth:`_group_words`) and its
        ``o_x`` is kept in ``self._x_out[r][c]``."""
        grp = None
        if self.sparse:
            if r == 0 and c == 0:
                self._grp = [[None] * self.cols for _ in range(self.rows)]
                self._x_out = [[None] * self.cols for _ in range(self.rows)]
            grp = self._grp[r][c] = Signal(GROUP_ROWS * self.x_width, name=f"grp_{r}_{c}")
        if not self.instance:
            m.submodules[f"pe_{r}_{c}"] = pe = PE(self.modes, self.sparse)
            m.d.comb += [
                pe.en.eq(self.en),
                pe.i_x.eq(x),
                pe.i_tag.eq(tag),
                pe.i_ls.eq(ls),
                pe.i_ls_ctl.eq(lsc),
                pe.i_psum.eq(psum),
            ]
            if grp is not None:
                m.d.comb += pe.i_grp.eq(grp)
            outs = pe.o_x, pe.o_tag, pe.o_ls, pe.o_ls_ctl, pe.o_psum
        else:
            widths = (self.x_width,) + PE_WIDTHS[1:]
            outs = _place_pe(m, f"{r}_{c}", self.en, x, tag, ls, lsc, psum, widths=widths, grp=grp)
        if self.sparse:
            self._x_out[r][c] = outs[0]
        return outs
