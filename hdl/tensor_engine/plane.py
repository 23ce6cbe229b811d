"""The background transpose plane (NeuronCore-v4): a second plane of the PE array for transposes.

A transpose moves data and multiplies nothing: output lane ``c`` of moving beat ``n`` is the
stationary word of the row whose moving lane is exactly 1.0 (the control checks that the beat
is a selection column and reduces it to one *select* bit per row).  So the second plane needs,
per PE, only what that movement needs, and none of the PE's arithmetic:

* two 32-bit stationary banks, written by the same skewed LoadStationary shift chain as the
  PE's (a displaced-word register and the chain control to the right neighbour);
* the beat's select bit and bank bit (``x_reg``), passed right one PE per cycle;
* a 32-bit pass register down the column: the PE's bank word where its select bit is set, else
  the word from the PE above.

Every path has the PE array's timing (docs/tensor_engine.md, rule 6): chain ``k`` is delayed
``k * chain_width`` cycles, then the row skew; the select bits go through the row skew; a bank
write is visible in PE ``(r, c)`` exactly when the moving wavefront arrives.  A beat applied in
cycle ``t`` is in ``x_reg`` of PE ``(r, c)`` in cycle ``t + r + c + 1`` and its word leaves
the bottom in ``t + rows + c + 1``; the column de-skew adds ``cols - 1 - c + P_PREFIX`` cycles
so that the output register holds it in ``t + latency``, the main array's latency: both planes'
results leave ``latency`` cycles after their beats.

The PEs of a row are described together, as wide words of ``cols`` lanes (``bank0``, ``bank1``,
``ls_out``, ``word``: 32 bits per PE; ``x_sel``, ``x_bank``: one): the same registers and the
same per-PE logic as a grid of cells, without 16,384 cell instances at 128 x 128.
"""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.delay import delay_line
from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.model.tensor_engine.timing import chain_count, chain_width

from .pe import LANE_WIDTH, LS_CTL_LAYOUT, P_PREFIX

__all__ = ["TransposePlane", "WORD_WIDTH"]

#: Bits of a plane word: the widest transpose container (FP32).
WORD_WIDTH = 32


def _spread(bits, width):
    """Each bit of ``bits`` repeated ``width`` times: a lane mask of ``len(bits)`` lanes."""
    return Cat(*(bits[i].replicate(width) for i in range(len(bits))))


def _select(mask, a, b):
    """Per bit ``a`` where ``mask`` is 1, else ``b``."""
    return (a & mask) | (b & ~mask)


class TransposePlane(wiring.Component):
    """The background transpose plane of a ``rows x cols`` array (see the module docstring).

    Parameters
    ----------
    rows, cols : int
        Array size.
    tile_granule : int
        Column-group width (the LoadStationary chains: :func:`~ncrtl.model.tensor_engine.
        timing.chain_width`).

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
    def __init__(self, rows, cols, *, tile_granule=32):
        check_int(rows, "TransposePlane rows", minimum=1, maximum=255)
        check_int(cols, "TransposePlane cols", minimum=1, maximum=255)
        check_int(tile_granule, "TransposePlane tile_granule", minimum=1)
        self.rows, self.cols = rows, cols
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

    def elaborate(self, platform):
        m = Module()
        rows, cols, en = self.rows, self.cols, self.en
        C, G, W = self.chains, self.chain_width, WORD_WIDTH

        # ---- LoadStationary: chain k delayed k * chain_width (words and control) -------------
        words, ctls = [], []
        for k in range(C):
            lanes = [self.i_ls[(k * rows + r) * LANE_WIDTH :][:W] for r in range(rows)]
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

        above = Const(0, cols * W)
        for r in range(rows):
            ls = delay_line(
                m, en, f"ls_skew_r{r}", Cat(*(words[k][r * W : (r + 1) * W] for k in range(C))), r
            )
            mv = delay_line(m, en, f"sel_skew_r{r}", Cat(self.i_sel[r], self.i_bank), r)
            above = self._row(m, r, ls, ctl_chain[r], mv, above)

        # ---- bottom: de-skew column c by cols - 1 - c + P_PREFIX into the output register ------
        out = Signal(cols * W, name="out_vec", reset_less=True)
        for c in range(cols):
            late = delay_line(
                m, en, f"deskew_c{c}", above[c * W : (c + 1) * W], cols - 1 - c + P_PREFIX
            )
            with m.If(en):
                m.d.sync += out[c * W : (c + 1) * W].eq(late)
        m.d.comb += self.o_word.eq(out)
        return m

    def _row(self, m, r, ls, ctl, mv, above):
        """The PEs of row ``r``: ``ls`` the chains' words entering it, ``ctl`` their control,
        ``mv`` the beat's select and bank bits, ``above`` the pass registers of the row above.
        Returns the row's pass registers."""
        cols, en, C, G, W = self.cols, self.en, self.chains, self.chain_width, WORD_WIDTH

        def reg(name, width):
            return Signal(width, name=f"{name}_r{r}", reset_less=True)

        banks = [reg("bank0", cols * W), reg("bank1", cols * W)]
        ls_out, ls_ctl = reg("ls_out", cols * W), reg("ls_ctl", cols * 2)
        x_sel, x_bank, word = reg("x_sel", cols), reg("x_bank", cols), reg("word", cols * W)
        # What each PE's chain input carries: at a chain's first column the chain's word and
        # control, elsewhere the left neighbour's displaced word and control.
        in_ls, in_ctl = [], []
        for k in range(C):
            lo, hi = k * G, min(cols, (k + 1) * G)
            in_ls += [ls[k * W : (k + 1) * W], ls_out[lo * W : (hi - 1) * W]]
            in_ctl += [ctl[2 * k : 2 * k + 2], ls_ctl[2 * lo : 2 * (hi - 1)]]
        i_ls = Signal(cols * W, name=f"ls_in_r{r}")
        i_ctl = Signal(data.ArrayLayout(LS_CTL_LAYOUT, cols), name=f"ls_ctl_in_r{r}")
        m.d.comb += [i_ls.eq(Cat(*in_ls)), i_ctl.as_value().eq(Cat(*in_ctl))]
        valid = Cat(*(i_ctl[c].valid for c in range(cols)))
        bank = Cat(*(i_ctl[c].bank for c in range(cols)))
        to_bank = _spread(bank, W)
        with m.If(en):
            m.d.sync += [
                banks[0].eq(_select(_spread(valid & ~bank, W), i_ls, banks[0])),
                banks[1].eq(_select(_spread(valid & bank, W), i_ls, banks[1])),
                ls_out.eq(_select(to_bank, banks[1], banks[0])),  # the displaced word
                ls_ctl.eq(i_ctl.as_value()),
                x_sel.eq(Cat(mv[0], x_sel[:-1])),
                x_bank.eq(Cat(mv[1], x_bank[:-1])),
                word.eq(
                    _select(
                        _spread(x_sel, W),
                        _select(_spread(x_bank, W), banks[1], banks[0]),
                        above,
                    )
                ),
            ]
        return word
