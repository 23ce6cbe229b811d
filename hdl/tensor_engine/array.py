"""The systolic PE array: ``rows x cols`` PEs, input skew lines, output de-skew.

* Left side, per row ``r``: an ``r``-cycle delay line for the moving lane word.  The beat tag
  is the same for every row, so it travels down a one-register-per-row chain (row ``r`` sees it
  ``r`` cycles late, like its data) and each row derives its own ``valid`` / ``first_row`` from
  the beat's row range.
* LoadStationary chains: the columns are cut into chains of ``chain_width`` columns
  (:func:`ncrtl.model.tensor_engine.timing.chain_width`: 4 chains of 32 at 128 columns), each
  fed by its own lane words and control and all loading at once.  Chain ``k`` enters PE column
  ``k * chain_width``; its words and control are delayed ``k * chain_width`` cycles before the
  row skew, so that they reach PE ``(r, c)`` in the same cycle as a moving beat applied with
  them (the moving wavefront: a bank write is visible exactly when the beats that must see it
  arrive): the lag, then one ``r``-cycle row skew carrying every chain's word of row ``r``,
  both memory delay lines; the chains' control goes down a register per row.  The word a chain's last PE displaces is dropped.  A column tile starts at a chain
  (chains are ``tile_granule`` columns wide), so its LS enters at its own columns.
* Bottom: column ``c`` goes through a ``cols - 1 - c`` cycle de-skew line into the output vector
  register (``o_psum``).

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
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import bits_for_range
from ncrtl.hdl.common.params import check_bool, check_int, validated_init
from ncrtl.hdl.verilog import Cell
from ncrtl.model.tensor_engine.timing import chain_count, chain_width

from .pe import LANE_WIDTH, LS_CTL_LAYOUT, P_PREFIX, PE, TAG_LAYOUT

__all__ = ["SystolicArray", "PETile", "PE_MODULE", "TILE_MODULE", "default_block"]

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


def _place_pe(m, name, en, x, tag, ls, lsc, psum):
    """Place one PE instance; return its (o_x, o_tag, o_ls, o_ls_ctl, o_psum) signals."""
    o_x = Signal(LANE_WIDTH, name=f"x_{name}")
    o_tag = Signal(TAG_LAYOUT, name=f"tag_{name}")
    o_ls = Signal(LANE_WIDTH, name=f"ls_{name}")
    o_lsc = Signal(LS_CTL_LAYOUT, name=f"lsc_{name}")
    o_psum = Signal(32, name=f"psum_{name}")
    m.submodules[f"pe_{name}"] = Instance(
        PE_MODULE,
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


class PETile(wiring.Component):
    """``size x size`` PEs as ``Instance`` of :data:`PE_MODULE`, wired like the array: moving
    words, tags and the LS chain enter on the left (one lane per row) and leave on the right,
    psums enter on top (one lane per column) and leave at the bottom.  No logic of its own.

    Parameters
    ----------
    size : int
        PEs per side.

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
    """

    @validated_init
    def __init__(self, size):
        self.size = check_int(size, "PETile size", minimum=1, maximum=64)
        W = LANE_WIDTH
        super().__init__(
            {
                "en": In(1, init=1),
                "i_x": In(size * W),
                "i_tag": In(size * _TAG_BITS),
                "i_ls": In(size * W),
                "i_ls_ctl": In(size * _LSC_BITS),
                "i_psum": In(size * 32),
                "o_x": Out(size * W),
                "o_tag": Out(size * _TAG_BITS),
                "o_ls": Out(size * W),
                "o_ls_ctl": Out(size * _LSC_BITS),
                "o_psum": Out(size * 32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        B, W, T, L = self.size, LANE_WIDTH, _TAG_BITS, _LSC_BITS
        above = [self.i_psum[c * 32 : (c + 1) * 32] for c in range(B)]
        for r in range(B):
            x, ls = self.i_x[r * W : (r + 1) * W], self.i_ls[r * W : (r + 1) * W]
            tag, lsc = self.i_tag[r * T : (r + 1) * T], self.i_ls_ctl[r * L : (r + 1) * L]
            for c in range(B):
                x, tag, ls, lsc, above[c] = _place_pe(
                    m, f"{r}_{c}", self.en, x, tag, ls, lsc, above[c]
                )
            m.d.comb += [
                self.o_x[r * W : (r + 1) * W].eq(x),
                self.o_ls[r * W : (r + 1) * W].eq(ls),
                self.o_tag[r * T : (r + 1) * T].eq(tag),
                self.o_ls_ctl[r * L : (r + 1) * L].eq(lsc),
            ]
        for c in range(B):
            m.d.comb += self.o_psum[c * 32 : (c + 1) * 32].eq(above[c])
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

    Attributes
    ----------
    latency : int
        ``rows + cols + P_PREFIX + 1``: cycles of ``en`` from a beat on ``i_x`` to its result
        vector on ``o_psum``.
    chain_width, chains : int
        Columns per LoadStationary chain and the number of chains.

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of the whole array.
    i_x : In(rows * LANE_WIDTH)
        Moving beat: lane word ``r`` (bits ``[40r, 40r+40)``: data, then the MX scale) enters
        PE row ``r``.
    i_tag : In(beat_tag_layout(rows))
        Its tag; rows outside ``[row_lo, row_hi)`` get ``valid = 0`` (psum passes through), row
        ``row_lo`` gets ``first_row``.
    i_ls : In(chains * rows * LANE_WIDTH)
        LoadStationary beat: lane word ``k * rows + r`` shifts into row ``r`` of chain ``k``.
    i_ls_ctl : In(data.ArrayLayout(LS_CTL_LAYOUT, chains))
        Per chain: ``valid``, target ``bank``.
    o_psum : Out(cols * 32)
        Output vector register: lane word ``c`` is the psum leaving PE column ``c``.
    """

    @validated_init
    def __init__(self, rows, cols, *, instance=True, tile_granule=32, block=None):
        check_int(rows, "SystolicArray rows", minimum=1, maximum=255)
        check_int(cols, "SystolicArray cols", minimum=1, maximum=255)
        check_int(tile_granule, "SystolicArray tile_granule", minimum=1)
        check_bool(instance, "SystolicArray instance")
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
        self.block = block
        self.rows, self.cols = rows, cols
        self.instance = instance
        self.tile_granule = tile_granule
        self.latency = rows + cols + P_PREFIX + 1
        self.chain_width = chain_width(cols, tile_granule)
        self.chains = chain_count(cols, tile_granule)
        super().__init__(
            {
                "en": In(1, init=1),
                "i_x": In(rows * LANE_WIDTH),
                "i_tag": In(beat_tag_layout(rows)),
                "i_ls": In(self.chains * rows * LANE_WIDTH),
                "i_ls_ctl": In(data.ArrayLayout(LS_CTL_LAYOUT, self.chains)),
                "o_psum": Out(cols * 32),
            }
        )

    def cells(self):
        """The modules the array places with ``Instance`` (:class:`ncrtl.hdl.verilog.Cell`):
        the PE, and the tile module when the PEs are tiled; none with ``instance=False``."""
        if not self.instance:
            return []
        cells = [Cell(PE_MODULE, PE)]
        if self.block > 1:
            block = self.block
            cells.append(Cell(TILE_MODULE, lambda: PETile(block), flat=False))
        return cells

    def elaborate(self, platform):
        m = Module()
        rows, cols, W = self.rows, self.cols, LANE_WIDTH
        en = self.en

        def delay(name, value, n, shape=None):
            """``value`` delayed by ``n`` enabled cycles."""
            for i in range(n):
                r = Signal(
                    shape if shape is not None else len(value),
                    name=f"{name}_d{i + 1}",
                    reset_less=True,
                )
                with m.If(en):
                    m.d.sync += r.eq(value)
                value = r
            return value

        def delay_ram(name, value, n):
            """``value`` delayed by ``n`` enabled cycles in a memory of ``n - 1`` words (a
            pointer, one write and one registered read per cycle: the long LoadStationary
            delays cost one word of storage per stage and no shifting); registers below 3."""
            if n < 3:
                return delay(name, value, n)
            mem = Memory(shape=len(value), depth=n - 1, init=[])
            m.submodules[name] = mem
            wr, rd = mem.write_port(), mem.read_port(domain="sync")
            ptr = Signal(range(n - 1), name=f"{name}_ptr")
            with m.If(en):
                m.d.sync += ptr.eq(Mux(ptr == n - 2, 0, ptr + 1))
            # the word read at ptr was written n - 1 enabled cycles ago; its read register adds 1
            m.d.comb += [
                wr.addr.eq(ptr),
                wr.data.eq(value),
                wr.en.eq(en),
                rd.addr.eq(ptr),
                rd.en.eq(en),
            ]
            return rd.data

        # ---- left edge: per-row skew and tags -------------------------------------------
        tag_chain = [self.i_tag]
        for r in range(1, rows):
            t = Signal(self.i_tag.shape(), name=f"beat_tag_r{r}", reset_less=True)
            with m.If(en):
                m.d.sync += t.eq(tag_chain[-1])
            tag_chain.append(t)

        x_in, tag_in = [], []
        for r in range(rows):
            bt = tag_chain[r]
            pt = Signal(TAG_LAYOUT, name=f"pe_tag_r{r}")
            inside = Signal(name=f"row_inside_r{r}")
            # (Row 0 compares with ~x.any(): Amaranth writes x == 0 as a WIDTHTRUNC-ing !x.)
            m.d.comb += [
                inside.eq((bt.row_lo <= r if r else ~bt.row_lo.any()) & (bt.row_hi > r)),
                pt.eq(bt.pe),
                pt.valid.eq(bt.pe.valid & inside),
                pt.first_row.eq(bt.row_lo == r if r else ~bt.row_lo.any()),
            ]
            x_in.append(delay(f"x_skew_r{r}", self.i_x[r * W : (r + 1) * W], r))
            tag_in.append(pt)

        # ---- LoadStationary chains: chain k delayed k * chain_width, then the row skew --------
        # (The chains share one row skew, a word of every chain per row, and one control chain
        # down the rows: the same bits as a skew per chain in a quarter of the registers.)
        C, L = self.chains, Shape.cast(LS_CTL_LAYOUT).width
        words, ctls = [], []
        for k in range(C):
            lag = k * self.chain_width
            beat = Cat(self.i_ls[k * rows * W : (k + 1) * rows * W], self.i_ls_ctl[k])
            beat = delay_ram(f"ls_c{k}_lag", beat, lag)
            words.append(beat[: rows * W])
            ctls.append(beat[rows * W :])
        ctl_chain = [Cat(*ctls)]
        for r in range(1, rows):
            c = Signal(C * L, name=f"ls_ctl_r{r}", reset_less=True)
            with m.If(en):
                m.d.sync += c.eq(ctl_chain[-1])
            ctl_chain.append(c)
        # ls_in[k][r], lsc_in[k][r]: what enters PE (r, k * chain_width)
        ls_in = [[None] * rows for _ in range(C)]
        lsc_in = [[None] * rows for _ in range(C)]
        for r in range(rows):
            row = Cat(*(words[k][r * W : (r + 1) * W] for k in range(C)))
            row = delay_ram(f"ls_skew_r{r}", row, r)
            for k in range(C):
                ls_in[k][r] = row[k * W : (k + 1) * W]
                lsc_in[k][r] = data.View(LS_CTL_LAYOUT, ctl_chain[r][k * L : (k + 1) * L])

        # ---- the PE grid --------------------------------------------------------------
        if self.block > 1:
            bottom = self._tiles(m, x_in, tag_in, ls_in, lsc_in)
        else:
            bottom = self._grid(m, x_in, tag_in, ls_in, lsc_in)

        # ---- bottom: de-skew into the output vector register ------------------------------
        out = Signal(cols * 32, name="out_vec", reset_less=True)
        with m.If(en):
            for c in range(cols):
                m.d.sync += out[c * 32 : (c + 1) * 32].eq(
                    delay(f"deskew_c{c}", bottom[c], cols - 1 - c, 32)
                )
        m.d.comb += self.o_psum.eq(out)
        return m

    def _grid(self, m, x_in, tag_in, ls_in, lsc_in):
        """PEs one by one; return the psum signals leaving the bottom row."""
        rows, cols = self.rows, self.cols
        psum_above = [None] * cols
        G = self.chain_width
        for r in range(rows):
            x, tag = x_in[r], tag_in[r]
            for c in range(cols):
                if c % G == 0:  # a chain enters here
                    ls, lsc = ls_in[c // G][r], lsc_in[c // G][r]
                psum = psum_above[c] if psum_above[c] is not None else Const(0, 32)
                outs = self._pe(m, r, c, x, tag, ls, lsc, psum)
                x, tag, ls, lsc, psum_above[c] = outs
        return psum_above

    def _tiles(self, m, x_in, tag_in, ls_in, lsc_in):
        """``B x B`` tile instances; return the psum signals leaving the bottom row.  Column-group
        borders fall between tiles (``B`` divides the granule)."""
        B, W, T, L = self.block, LANE_WIDTH, _TAG_BITS, _LSC_BITS
        psum_above = [Const(0, B * 32)] * (self.cols // B)
        G = self.chain_width
        for tr in range(self.rows // B):
            rs = range(tr * B, (tr + 1) * B)
            x = Cat(*(x_in[r] for r in rs))
            tag = Cat(*(Value.cast(tag_in[r]) for r in rs))
            for tc in range(self.cols // B):
                c0 = tc * B
                if c0 % G == 0:  # a chain enters here
                    ls = Cat(*(ls_in[c0 // G][r] for r in rs))
                    lsc = [lsc_in[c0 // G][r] for r in rs]
                name = f"{tr}_{tc}"
                o = {
                    k: Signal(B * w, name=f"t{k}_{name}")
                    for k, w in (("x", W), ("tag", T), ("ls", W), ("lsc", L), ("psum", 32))
                }
                m.submodules[f"tile_{name}"] = Instance(
                    TILE_MODULE,
                    i_clk=ClockSignal(),
                    i_rst=ResetSignal(),
                    i_en=self.en,
                    i_i_x=x,
                    i_i_tag=tag,
                    i_i_ls=ls,
                    i_i_ls_ctl=Cat(*(Value.cast(v) for v in lsc)),
                    i_i_psum=psum_above[tc],
                    o_o_x=o["x"],
                    o_o_tag=o["tag"],
                    o_o_ls=o["ls"],
                    o_o_ls_ctl=o["lsc"],
                    o_o_psum=o["psum"],
                )
                x, tag, ls, psum_above[tc] = o["x"], o["tag"], o["ls"], o["psum"]
                lsc = [o["lsc"][i * L : (i + 1) * L] for i in range(B)]
        return [psum_above[c // B][(c % B) * 32 : (c % B + 1) * 32] for c in range(self.cols)]

    def _pe(self, m, r, c, x, tag, ls, lsc, psum):
        """Place PE (r, c); return its (o_x, o_tag, o_ls, o_ls_ctl, o_psum) signals."""
        if not self.instance:
            m.submodules[f"pe_{r}_{c}"] = pe = PE()
            m.d.comb += [
                pe.en.eq(self.en),
                pe.i_x.eq(x),
                pe.i_tag.eq(tag),
                pe.i_ls.eq(ls),
                pe.i_ls_ctl.eq(lsc),
                pe.i_psum.eq(psum),
            ]
            return pe.o_x, pe.o_tag, pe.o_ls, pe.o_ls_ctl, pe.o_psum
        return _place_pe(m, f"{r}_{c}", self.en, x, tag, ls, lsc, psum)
