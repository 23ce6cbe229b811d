"""A column band of the PE array: the PE grid of columns ``[c0, c0 + cols)``, on its own.

The array (:class:`~ncrtl.hdl.tensor_engine.array.SystolicArray`) is the PE grid and its edges
(skew lines, LoadStationary chain entries, de-skew); between two columns of the grid only
registers meet: the moving word, its tag and the LoadStationary chain leave every PE in its
``x_reg``, ``tag_reg`` and ``ls_out`` registers, and the next PE to the right only loads them
into registers of its own.  So the grid cut into column bands is the same hardware with its
band edges as exact one-cycle cuts: a band's inputs in a cycle are its left neighbour's
register outputs of that cycle.  A simulator can compile the band once, place several, and
step them in parallel (:mod:`ncrtl.testbench.tensor_engine.band_loop`): every band computes
its cycle from values that were all fixed before the clock edge.

The engine top with ``external_grid=True`` is the rest (control, edges): its ``o_grid_*``
ports are what the grid's left edge and chain entries receive, its ``i_grid_psum`` what
leaves the grid's bottom row.
"""

from amaranth.hdl import Cat, Const, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.hdl.verilog import Cell, convert, flat_module, loop_memory_inits

from .array import PE_MODULE, PE_WIDTHS, TILE_MODULE, PETile, default_block, place_tile
from .pe import PE, build_modes

__all__ = ["PEBand", "BAND_MODULE", "band_plan", "tile_verilog"]

#: Verilog module name of a band.
BAND_MODULE = "te_band"


def band_plan(cols, bands, chain_width):
    """The bands of a ``cols``-column grid cut into ``bands`` equal bands: a list of ``(c0,
    width, entries)``, ``entries`` the LoadStationary chains (indices) entering the band, the
    first at its left edge, or ``[]`` when the band's left edge continues its left neighbour's
    chain.  ``ValueError`` unless the width divides ``cols`` and either divides the chain width
    or is a multiple of it (a chain never starts inside a band elsewhere than at the band's
    chain boundaries)."""
    check_int(bands, "bands", minimum=1)
    if cols % bands:
        raise ValueError(f"bands={bands} must divide the {cols} columns")
    width = cols // bands
    if chain_width % width and width % chain_width:
        raise ValueError(
            f"a band of {width} columns must divide the chain width {chain_width} or be a "
            f"multiple of it"
        )
    plan = []
    for b in range(bands):
        c0 = b * width
        starts = [c for c in range(c0, c0 + width) if c % chain_width == 0]
        plan.append((c0, width, [c // chain_width for c in starts]))
    return plan


def tile_verilog(block, modes=None):
    """The Verilog of a band's ``block x block`` tile and its PE (built for ``modes``): the
    modules of :meth:`PEBand.cells`, as a band's own Verilog has them, without the band; for a
    simulator that places and steps the tiles itself
    (:mod:`ncrtl.testbench.tensor_engine.band_loop`)."""
    check_int(block, "tile block", minimum=1)
    pe = loop_memory_inits(flat_module(PE(build_modes(modes)), PE_MODULE))
    return pe + convert(PETile(block), TILE_MODULE)


class PEBand(wiring.Component):
    """``rows x cols`` PEs in ``block x block`` tiles (:class:`~ncrtl.hdl.tensor_engine.array.PETile`
    instances), wired as the array wires them, with nothing else: a column band of the grid
    (see the module docstring).

    Parameters
    ----------
    rows, cols : int
        The band's PEs.
    chain_width : int
        Columns per LoadStationary chain of the whole array: a chain enters every column of
        the band that is a multiple of it, counted from the band's left edge (``entries``).
    block : int or None
        PEs per side of a tile (dividing ``rows`` and ``cols``); None:
        :func:`~ncrtl.hdl.tensor_engine.array.default_block`.
    modes : sequence of PeMode or None
        The modes the PE is built for.

    Attributes
    ----------
    entries : int
        LoadStationary entry points: the left edge, then every ``chain_width`` columns.

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of every PE (the engine's).
    i_x, i_tag : In(rows * LANE_WIDTH), In(rows * bits of TAG_LAYOUT)
        Row ``r``'s moving word and PE tag entering the band's first column.
    i_ls, i_ls_ctl : In(entries * rows * LANE_WIDTH), In(entries * rows * bits of
        LS_CTL_LAYOUT)
        LoadStationary words and control of entry ``e`` (column ``e * chain_width``), row
        ``r`` at index ``e * rows + r``.
    o_x, o_tag, o_ls, o_ls_ctl : Out, per row
        What leaves the band's last column (the next band's inputs; the last band's are
        dropped, as the array drops them).
    o_psum : Out(cols * 32)
        The psum leaving the bottom PE of each column.
    """

    @validated_init
    def __init__(self, rows, cols, *, chain_width, block=None, modes=None):
        check_int(rows, "PEBand rows", minimum=1, maximum=255)
        check_int(cols, "PEBand cols", minimum=1, maximum=255)
        check_int(chain_width, "PEBand chain_width", minimum=1)
        if block is None:
            block = default_block(rows, cols, min(cols, chain_width))
        check_int(block, "PEBand block", minimum=1)
        if rows % block or cols % block or (cols > chain_width and chain_width % block):
            raise ValueError(
                f"PEBand block {block} must divide rows={rows}, cols={cols} and the chain "
                f"width {chain_width}"
            )
        if cols > chain_width and cols % chain_width:
            raise ValueError(
                f"PEBand cols={cols} must be a multiple of the chain width {chain_width} "
                f"or at most it"
            )
        self.rows, self.cols, self.block = rows, cols, block
        self.chain_width = chain_width
        self.modes = build_modes(modes)
        self.entries = max(1, cols // chain_width)
        W, T, S, L, P = PE_WIDTHS
        E = self.entries
        super().__init__(
            {
                "en": In(1, init=1),
                "i_x": In(rows * W),
                "i_tag": In(rows * T),
                "i_ls": In(E * rows * S),
                "i_ls_ctl": In(E * rows * L),
                "o_x": Out(rows * W),
                "o_tag": Out(rows * T),
                "o_ls": Out(rows * S),
                "o_ls_ctl": Out(rows * L),
                "o_psum": Out(cols * P),
            }
        )

    def cells(self):
        """The PE and the tile module (:class:`ncrtl.hdl.verilog.Cell`)."""
        modes, block = self.modes, self.block
        return [
            Cell("te_pe", lambda: PE(modes)),
            Cell(TILE_MODULE, lambda: PETile(block), flat=False),
        ]

    def elaborate(self, platform):
        m = Module()
        B, rows = self.block, self.rows
        W, T, S, L, P = PE_WIDTHS
        psum_above = [Const(0, B * P)] * (self.cols // B)
        for tr in range(rows // B):
            rs = slice(tr * B * W, (tr + 1) * B * W)
            x, tag = self.i_x[rs], self.i_tag[tr * B * T : (tr + 1) * B * T]
            for tc in range(self.cols // B):
                c0 = tc * B
                if c0 % self.chain_width == 0:  # a chain enters here
                    e = c0 // self.chain_width
                    ls = self.i_ls[(e * rows + tr * B) * S : (e * rows + (tr + 1) * B) * S]
                    lsc = self.i_ls_ctl[(e * rows + tr * B) * L : (e * rows + (tr + 1) * B) * L]
                name = f"{tr}_{tc}"
                inputs = (x, tag, ls, lsc, psum_above[tc])
                o = place_tile(
                    m, f"tile_{name}", name, "t", TILE_MODULE, self.en, inputs, PE_WIDTHS, B
                )
                x, tag, ls, lsc, psum_above[tc] = o["x"], o["tag"], o["ls"], o["lsc"], o["psum"]
            m.d.comb += [
                self.o_x[tr * B * W : (tr + 1) * B * W].eq(x),
                self.o_tag[tr * B * T : (tr + 1) * B * T].eq(tag),
                self.o_ls[tr * B * S : (tr + 1) * B * S].eq(ls),
                self.o_ls_ctl[tr * B * L : (tr + 1) * B * L].eq(lsc),
            ]
        m.d.comb += self.o_psum.eq(Cat(*psum_above))
        return m
