"""``TileTranspose``: the transpose buffer of a DMA engine, square tiles of one word per row."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init

__all__ = ["TileTranspose"]


class TileTranspose(wiring.Component):
    """Transposes square tiles of ``E x E`` elements, ``E = word_bytes / element bytes``.

    The input is a tile's rows, one ``word_bytes`` word each (``E`` elements, element ``c`` in
    bytes ``[c s, c s + s)`` for ``s``-byte elements); after the tile's ``E`` rows the output is
    its columns, one word each: column ``c``'s word holds element ``c`` of rows ``0 .. E - 1`` in
    that order.  Two tile buffers: a tile's columns leave while the next tile's rows arrive, so
    both streams move one word per cycle.

    A DMA transpose whose source view ``[A, B]`` has ``A`` and ``B`` multiples of ``E`` walks its
    source in ``E x E`` tiles, row by row, and its destination in the same tiles, column by
    column; this buffer turns the one order into the other (``ncrtl.hdl.dma.engine``).

    Parameters
    ----------
    word_bytes : int
        4 to 64, a power of two.

    Interface
    ---------
    i_esize : In(2)
        log2 of the element bytes: 1 (2-byte elements) or 2 (4-byte); held while tiles pass.
    rows : In(stream.Signature(8 * word_bytes))
    cols : Out(stream.Signature(8 * word_bytes))
    """

    @validated_init
    def __init__(self, word_bytes=16):
        self.word_bytes = check_int(word_bytes, "TileTranspose word_bytes", minimum=4, maximum=64)
        if word_bytes & (word_bytes - 1):
            raise ValueError(f"TileTranspose word_bytes must be a power of two, not {word_bytes}")
        w = word_bytes
        super().__init__(
            {
                "i_esize": In(2),
                "rows": In(stream.Signature(8 * w)),
                "cols": Out(stream.Signature(8 * w)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.word_bytes
        rows_max = w // 2  # E for 2-byte elements; 4-byte tiles use the first w / 4 rows
        last = Signal(range(rows_max))  # E - 1
        m.d.comb += last.eq(Mux(self.i_esize == 2, w // 4 - 1, rows_max - 1))
        bufs = [[Signal(8 * w, name=f"tile{b}_row{r}") for r in range(rows_max)] for b in range(2)]
        full = Signal(2)
        fill, drain = Signal(), Signal()  # the buffer being filled, the one being drained
        r = Signal(range(rows_max))
        c = Signal(range(rows_max))

        # -- fill: rows into the buffer ``fill`` -----------------------------------------------
        m.d.comb += self.rows.ready.eq(~Mux(fill, full[1], full[0]))
        with m.If(self.rows.valid & self.rows.ready):
            for b in range(2):
                for i in range(rows_max):
                    with m.If((fill == b) & equals(r, i)):
                        m.d.sync += bufs[b][i].eq(self.rows.payload)
            with m.If(r == last):
                m.d.sync += [r.eq(0), fill.eq(~fill)]
            with m.Else():
                m.d.sync += r.eq(r + 1)

        # -- drain: column ``c`` of the buffer ``drain`` -------------------------------------
        def column(rows, s, k):
            """Element ``k`` (``s`` bytes) of each of the ``w / s`` rows, in row order."""
            return Cat(*(rows[i][8 * s * k : 8 * s * (k + 1)] for i in range(w // s)))

        cols = []
        for k in range(rows_max):
            word = Signal(8 * w, name=f"col{k}")
            b16 = Mux(drain, column(bufs[1], 2, k), column(bufs[0], 2, k))
            if k < w // 4:
                b32 = Mux(drain, column(bufs[1], 4, k), column(bufs[0], 4, k))
                m.d.comb += word.eq(Mux(self.i_esize == 2, b32, b16))
            else:
                m.d.comb += word.eq(b16)
            cols.append(word)
        # A mux chain, not an Array: the Verilog of an Array read is an incomplete case.
        out = cols[0]
        for k in range(1, rows_max):
            out = Mux(equals(c, k), cols[k], out)
        m.d.comb += [
            self.cols.valid.eq(Mux(drain, full[1], full[0])),
            self.cols.payload.eq(out),
        ]
        done_fill = self.rows.valid & self.rows.ready & (r == last)
        done_drain = self.cols.valid & self.cols.ready & (c == last)
        with m.If(self.cols.valid & self.cols.ready):
            with m.If(c == last):
                m.d.sync += [c.eq(0), drain.eq(~drain)]
            with m.Else():
                m.d.sync += c.eq(c + 1)
        for b in range(2):
            set_ = done_fill & (fill == b)
            clr = done_drain & (drain == b)
            with m.If(set_ & ~clr):
                m.d.sync += full[b].eq(1)
            with m.Elif(clr & ~set_):
                m.d.sync += full[b].eq(0)
        return m
