"""The background transpose plane (NeuronCore-v4): a second plane of the PE array for transposes.

A transpose moves data and multiplies nothing: output lane ``c`` of moving beat ``n`` is the
stationary word of the row whose moving lane is exactly 1.0 (the control checks that the beat
is a selection column and reduces it to one *select* bit per row).  So the second plane's cell,
:class:`TransposePE`, holds only what that movement needs, and none of the PE's arithmetic:

* two 32-bit stationary banks, written by the same skewed LoadStationary shift chain as the
  PE's (a displaced-word register and the chain control to the right neighbour);
* the beat's select bit and bank bit (``x_reg``), passed right one cell per cycle;
* a 32-bit pass register down the column: the cell's bank word where its select bit is set,
  else the word from the cell above.

The cell has the PE's ports (``i_x``: the select bit, ``i_tag``: the bank bit, ``i_ls``,
``i_ls_ctl``, ``i_psum``: the word from above), so the plane places it as the array places
the PE: as ``Instance`` of one module (:data:`TPE_MODULE`), in tiles of ``block x block``
cells (:class:`~ncrtl.hdl.tensor_engine.array.PETile` of :data:`TPE_TILE_MODULE`).

Every path has the PE array's timing (docs/tensor_engine.md, rule 6): chain ``k`` is delayed
``k * chain_width`` cycles, then the row skew; the select bits go through the row skew; a bank
write is visible in cell ``(r, c)`` exactly when the moving wavefront arrives.  A beat applied
in cycle ``t`` is in ``x_reg`` of cell ``(r, c)`` in cycle ``t + r + c + 1`` and its word leaves
the bottom in ``t + rows + c + 1``; the column de-skew adds ``cols - 1 - c + P_PREFIX`` cycles
so that the output register holds it in ``t + latency``, the main array's latency: both planes'
results leave ``latency`` cycles after their beats.
"""

from amaranth.hdl import (
    Cat,
    Const,
    EnableInserter,
    Module,
    Mux,
    Signal,
)
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.delay import delay_line
from ncrtl.hdl.common.params import check_bool, check_int, validated_init
from ncrtl.hdl.verilog import Cell
from ncrtl.model.tensor_engine.timing import chain_count, chain_width

from .array import PETile, _place_pe, default_block, place_tile
from .pe import LANE_WIDTH, LS_CTL_LAYOUT, P_PREFIX, registers, stationary_chain

__all__ = ["TransposePlane", "TransposePE", "WORD_WIDTH", "TPE_MODULE", "TPE_TILE_MODULE"]

#: Bits of a plane word: the widest transpose container (FP32).
WORD_WIDTH = 32
#: Verilog module names of the plane's cell and of its tile.
TPE_MODULE = "te_tpe"
TPE_TILE_MODULE = "te_ttile"
#: The cell's port widths ``(x, tag, ls, ls_ctl, psum)``: select, bank, word, control, word.
TPE_WIDTHS = (1, 1, WORD_WIDTH, 2, WORD_WIDTH)


class TransposePE(wiring.Component):
    """One cell of the background transpose plane (see the module docstring).

    Timing (``en`` = 1 every cycle): a beat in ``x_reg`` during cycle ``T`` reads
    ``bank[x_bank]`` in cycle ``T`` and its word (or the word from above) is in ``o_psum``
    during ``T + 1``; so ``i_psum`` must carry the same beat's word in cycle ``T`` (the cell
    above registered it, having seen the beat one cycle earlier).

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of every register.
    i_x, i_tag : In(1)
        The beat's select bit for this row and its bank bit, from the left.
    i_ls : In(WORD_WIDTH), i_ls_ctl : In(LS_CTL_LAYOUT)
        LoadStationary shift chain from the left neighbour.
    i_psum : In(WORD_WIDTH)
        The word from the cell above.
    o_x, o_tag, o_ls, o_ls_ctl : Out
        ``x_reg`` and the shift chain (the displaced bank word), to the right neighbour.
    o_psum : Out(WORD_WIDTH)
        The pass register, to the cell below.
    """

    def __init__(self):
        ports = dict(zip(("x", "tag", "ls", "ls_ctl", "psum"), TPE_WIDTHS))
        ports["ls_ctl"] = LS_CTL_LAYOUT
        super().__init__(
            {
                "en": In(1, init=1),
                **{f"i_{k}": In(v) for k, v in ports.items()},
                **{f"o_{k}": Out(v) for k, v in ports.items()},
            }
        )

    def elaborate(self, platform):
        m = Module()
        reg = registers(m)
        sel, bank = reg("x_sel", self.i_x), reg("x_bank", self.i_tag)
        word = stationary_chain(m, reg, self, bank)  # the PE's banks and chain, 32 bits
        m.d.comb += [
            self.o_x.eq(sel),
            self.o_tag.eq(bank),
            self.o_psum.eq(reg("word", Mux(sel, word, self.i_psum))),
        ]
        return EnableInserter(self.en)(m)


class TransposePlane(wiring.Component):
    """The background transpose plane of a ``rows x cols`` array (see the module docstring).

    Parameters
    ----------
    rows, cols : int
        Array size.
    tile_granule : int
        Column-group width (the LoadStationary chains: :func:`~ncrtl.model.tensor_engine.
        timing.chain_width`).
    instance : bool
        Cells as ``Instance`` of :data:`TPE_MODULE` (True, for Verilog: :meth:`cells`) or as
        Amaranth submodules (False, for the Amaranth simulator).
    block : int or None
        With ``instance``: cells per side of a tile (``None``: the array's
        :func:`~ncrtl.hdl.tensor_engine.array.default_block`).

    Attributes
    ----------
    latency : int
        ``rows + cols + P_PREFIX + 1``, the PE array's: a beat applied in cycle ``t`` has its
        vector in ``o_word`` in cycle ``t + latency``.

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of every register.
    i_sel : In(rows)
        Moving beat: bit ``r`` selects row ``r`` (its moving lane is 1.0; 0 in every row for
        no beat, or for a beat that is not a selection column).
    i_bank : In(1)
        The bank the beat reads.
    i_ls : In(chains * rows * LANE_WIDTH)
        LoadStationary beat, as :class:`~ncrtl.hdl.tensor_engine.array.SystolicArray`'s
        (lane word ``k * rows + r`` shifts into row ``r`` of chain ``k``); the plane keeps the
        low :data:`WORD_WIDTH` bits of a word.
    i_ls_ctl : In(data.ArrayLayout(LS_CTL_LAYOUT, chains))
        Per chain: ``valid``, target ``bank``.
    o_word : Out(cols * WORD_WIDTH)
        Output vector register: lane ``c`` is the word of the selected row in column ``c`` (0
        when no row was selected).
    """

    @validated_init
    def __init__(self, rows, cols, *, tile_granule=32, instance=True, block=None):
        check_int(rows, "TransposePlane rows", minimum=1, maximum=255)
        check_int(cols, "TransposePlane cols", minimum=1, maximum=255)
        check_int(tile_granule, "TransposePlane tile_granule", minimum=1)
        check_bool(instance, "TransposePlane instance")
        if block is None:
            block = default_block(rows, cols, tile_granule) if instance else 1
        check_int(block, "TransposePlane block", minimum=1)
        if rows % block or cols % block or (block > 1 and not instance):
            raise ValueError(
                f"TransposePlane block {block} must divide rows={rows} and cols={cols}, and "
                f"needs instance=True above 1"
            )
        self.rows, self.cols, self.instance, self.block = rows, cols, instance, block
        self.chain_width = chain_width(cols, tile_granule)
        self.chains = chain_count(cols, tile_granule)
        self.latency = rows + cols + P_PREFIX + 1
        super().__init__(
            {
                "en": In(1, init=1),
                "i_sel": In(rows),
                "i_bank": In(1),
                "i_ls": In(self.chains * rows * LANE_WIDTH),
                "i_ls_ctl": In(data.ArrayLayout(LS_CTL_LAYOUT, self.chains)),
                "o_word": Out(cols * WORD_WIDTH),
            }
        )

    def cells(self):
        """The modules the plane places with ``Instance``: its cell and its tile (none with
        ``instance=False``)."""
        if not self.instance:
            return []
        cells = [Cell(TPE_MODULE, TransposePE)]
        if self.block > 1:
            block = self.block
            tile = lambda: PETile(block, module=TPE_MODULE, widths=TPE_WIDTHS)  # noqa: E731
            cells.append(Cell(TPE_TILE_MODULE, tile, flat=False))
        return cells

    def elaborate(self, platform):
        m = Module()
        rows, cols, en = self.rows, self.cols, self.en
        C, G, W = self.chains, self.chain_width, WORD_WIDTH

        # ---- LoadStationary: chain k delayed k * chain_width (words and control) -------------
        words, ctls = [], []
        for k in range(C):
            # (one slice per lane: a slice of an open-ended slice builds the whole tail first)
            at = [(k * rows + r) * LANE_WIDTH for r in range(rows)]
            lanes = [self.i_ls[a : a + W] for a in at]
            beat = Cat(*lanes, self.i_ls_ctl[k].as_value())
            beat = delay_line(m, en, f"ls_c{k}_lag", beat, k * G)
            words.append(beat[: rows * W])
            ctls.append(beat[rows * W :])
        # the chains' control down the rows, a register per row (row r sees it r cycles late)
        ctl_chain = [Cat(*ctls)]
        for r in range(1, rows):
            c = Signal(2 * C, name=f"ls_ctl_r{r}", reset_less=True)
            with m.If(en):
                m.d.sync += c.eq(ctl_chain[-1])
            ctl_chain.append(c)
        # per row: the chains' words and the beat's select and bank bits, skewed r cycles
        ls_in, mv_in = [], []
        for r in range(rows):
            ls = Cat(*(words[k][r * W : (r + 1) * W] for k in range(C)))
            ls_in.append(delay_line(m, en, f"ls_skew_r{r}", ls, r))
            mv_in.append(delay_line(m, en, f"sel_skew_r{r}", Cat(self.i_sel[r], self.i_bank), r))

        bottom = self._tiles(m, ls_in, ctl_chain, mv_in) if self.block > 1 else None
        if bottom is None:
            bottom = self._grid(m, ls_in, ctl_chain, mv_in)

        # ---- bottom: de-skew column c by cols - 1 - c + P_PREFIX into the output register ------
        out = Signal(cols * W, name="out_vec", reset_less=True)
        for c in range(cols):
            late = delay_line(m, en, f"deskew_c{c}", bottom[c], cols - 1 - c + P_PREFIX)
            with m.If(en):
                m.d.sync += out[c * W : (c + 1) * W].eq(late)
        m.d.comb += self.o_word.eq(out)
        return m

    def _chain_in(self, ls_in, ctl_chain, r, k):
        """What chain ``k`` feeds into row ``r`` at its first column: ``(word, control)``."""
        W = WORD_WIDTH
        return ls_in[r][k * W : (k + 1) * W], ctl_chain[r][2 * k : 2 * k + 2]

    def _grid(self, m, ls_in, ctl_chain, mv_in):
        """Cells one by one; returns the words leaving the bottom row."""
        above = [Const(0, WORD_WIDTH)] * self.cols
        for r in range(self.rows):
            x, tag = mv_in[r][0], mv_in[r][1]
            for c in range(self.cols):
                if c % self.chain_width == 0:  # a chain enters here
                    ls, lsc = self._chain_in(ls_in, ctl_chain, r, c // self.chain_width)
                ports = (x, tag, ls, lsc, above[c])
                if self.instance:
                    x, tag, ls, lsc, above[c] = _place_pe(
                        m, f"t{r}_{c}", self.en, *ports, TPE_MODULE, TPE_WIDTHS
                    )
                    continue
                m.submodules[f"tpe_{r}_{c}"] = pe = TransposePE()
                m.d.comb += pe.en.eq(self.en)
                for port, value in zip(("i_x", "i_tag", "i_ls", "i_ls_ctl", "i_psum"), ports):
                    m.d.comb += getattr(pe, port).eq(value)
                x, tag, ls, lsc, above[c] = pe.o_x, pe.o_tag, pe.o_ls, pe.o_ls_ctl, pe.o_psum
        return above

    def _tiles(self, m, ls_in, ctl_chain, mv_in):
        """``block x block`` tile instances; returns the words leaving the bottom row (chain
        borders fall between tiles: ``block`` divides the granule)."""
        B, W = self.block, WORD_WIDTH
        G = self.chain_width
        above = [Const(0, B * W)] * (self.cols // B)
        for tr in range(self.rows // B):
            rs = range(tr * B, (tr + 1) * B)
            xs = Cat(*(mv_in[r][0] for r in rs))
            tags = Cat(*(mv_in[r][1] for r in rs))
            for tc in range(self.cols // B):
                c0 = tc * B
                if c0 % G == 0:  # a chain enters here
                    pairs = [self._chain_in(ls_in, ctl_chain, r, c0 // G) for r in rs]
                    ls, lsc = Cat(*(w for w, _ in pairs)), Cat(*(c for _, c in pairs))
                name = f"t{tr}_{tc}"
                inputs = (xs, tags, ls, lsc, above[tc])
                o = place_tile(
                    m, f"ttile_{name}", name, "tp", TPE_TILE_MODULE, self.en, inputs, TPE_WIDTHS, B
                )
                xs, tags, ls, lsc, above[tc] = o["x"], o["tag"], o["ls"], o["lsc"], o["psum"]
        return [above[c // B][(c % B) * W : (c % B + 1) * W] for c in range(self.cols)]
