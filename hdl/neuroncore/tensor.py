"""``TensorFeed``: the Tensor Engine's queue side: a matmul's operands read from SBUF and handed
to the engine as its LoadStationary and MultiplyMoving beats, its PSUM write sent to PSUM."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals, span_mask
from ncrtl.hdl.common.fsm import states
from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.psum.control import INSTR_LAYOUT as PSUM_INSTR_LAYOUT
from ncrtl.hdl.tensor_engine.control import INSTR_LAYOUT as TE_INSTR_LAYOUT
from ncrtl.model.tensor_engine.timing import chain_count, chain_width

from .isa import matmul_layout
from .ports import InstrQueue, SbufPort

__all__ = ["TensorFeed", "LANE_BITS"]

#: A Tensor Engine lane word: the element's container (up to 32 bits) and an MX scale.
LANE_BITS = 40


def element(m, word, pos, code, name):
    """The element at index ``pos`` of ``word`` (bytes), ``1 << code`` bytes wide (codes 0 to 2;
    a larger code reads the widest), zero-extended to 32 bits.

    Each size's element is the low bits of ``word`` shifted right by whole elements, kept in a
    word as wide as ``word`` (a shift cut to the element's width is WIDTHTRUNC for
    ``verilator -Wall``)."""
    out = Signal(32, name=name)
    codes = [c for c in (0, 1, 2) if len(word) >= 8 << c]
    with m.Switch(code):
        for c in codes:
            shifted = Signal(len(word), name=f"{name}_sh{c}")
            m.d.comb += shifted.eq(word >> (pos << (c + 3)))
            with m.Default() if c == codes[-1] else m.Case(c):
                m.d.comb += out.eq(shifted[: 8 << c])
    return out


class _Feed(enum.Enum, shape=3):
    """TensorFeed's states, in the order an operation passes them."""

    IDLE = 0
    LS_WORD = 1
    S_READ = 2
    LS_BEATS = 3
    MM_WORD = 4
    MOVE = 5


class TensorFeed(wiring.Component):
    """One :class:`~ncrtl.model.neuroncore.isa.MatmulOp` at a time: the LoadStationary word to
    the Tensor Engine, the stationary tile ``[K, M]`` read into a buffer (every word of it,
    then its beats: chain ``k``'s beat ``j`` is column ``first + count - 1 - j`` of its columns,
    :func:`~ncrtl.model.tensor_engine.timing.ls_chain_columns`), the MultiplyMoving word, then
    the moving tile ``[K, N]`` streamed word by word (two words buffered) into its ``N``
    beats; the PSUM write goes out when the operation is taken.  PE row ``r`` reads SBUF
    partition ``r``; rows outside the tile get zero lanes.

    Parameters
    ----------
    geo : ncrtl.model.neuroncore.Geometry

    Interface
    ---------
    queue : In(InstrQueue(matmul_layout(geo)))
        ``done``: ``psum_done`` passed on (a matmul completes when PSUM has written its group).
    psum_done : In(1)
    sbuf : Out(SbufPort(...))
    te_instr, stationary, moving, psum_instr : Out(stream.Signature(...))
        The Tensor Engine's and PSUM's input streams (``ncrtl.hdl.core.top.MatmulCore``).
    """

    @validated_init
    def __init__(self, geo):
        self.geo = geo
        self.words = geo.partition_bytes // geo.word_bytes
        self.chains = chain_count(geo.cols, geo.tile_unit)
        self.width = chain_width(geo.cols, geo.tile_unit)
        W = geo.word_bytes
        # the stationary buffer: a tile's M elements of up to 4 bytes, from any byte of a word
        self.s_words = -(-(W - 1 + 4 * geo.cols) // W)
        super().__init__(
            {
                "queue": In(InstrQueue(matmul_layout(geo))),
                "psum_done": In(1),
                "sbuf": Out(SbufPort(geo.partitions, self.words, W)),
                "te_instr": Out(stream.Signature(TE_INSTR_LAYOUT)),
                "stationary": Out(stream.Signature(self.chains * geo.rows * LANE_BITS)),
                "moving": Out(stream.Signature(geo.rows * LANE_BITS)),
                "psum_instr": Out(stream.Signature(PSUM_INSTR_LAYOUT)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        geo = self.geo
        P, R, W = geo.partitions, geo.rows, geo.word_bytes
        wbits = (W - 1).bit_length()
        op = Signal(matmul_layout(geo))
        ls, mm = op.ls, op.mm
        m.d.comb += self.queue.done.eq(self.psum_done)

        # -- the PSUM write: out once the operation is taken -----------------------------------
        psum_pending = Signal()
        m.d.comb += [self.psum_instr.payload.eq(op.psum), self.psum_instr.valid.eq(psum_pending)]
        with m.If(self.psum_instr.ready):
            m.d.sync += psum_pending.eq(0)

        # -- SBUF reads: ``rd_count`` words from ``rd_base``, one in flight ---------------------
        rd_base = Signal(range(self.words + 1))
        rd_count = Signal(range(self.words + 2))
        rd_i = Signal(range(self.words + 2))
        rd_open = Signal()  # this phase may issue reads now
        rows_mask = Signal(P)
        lo = ls.tile_row
        m.d.comb += rows_mask.eq(span_mask(lo, ls.k, P))
        req = self.sbuf.req
        m.d.comb += [
            req.payload.mask.eq(rows_mask),
            req.payload.word.eq(rd_base + rd_i),
            req.payload.write.eq(0),
            req.valid.eq(rd_open & (rd_i < rd_count)),
        ]
        with m.If(req.valid & req.ready):
            m.d.sync += rd_i.eq(rd_i + 1)
        resp = self.sbuf.resp
        got = Signal(range(self.s_words + 1))

        # -- element sizes, tile extents -------------------------------------------------------
        s_off = op.s_addr[:wbits] if wbits else Const(0, 1)
        m_off = op.m_addr[:wbits] if wbits else Const(0, 1)

        def nwords(off, count, code):
            return (off + (count << code) + (W - 1)) >> wbits

        # -- the stationary buffer and the LoadStationary beats --------------------------------
        buf = [Signal(8 * W * P, name=f"sbuf_word{i}") for i in range(self.s_words)]
        beat = Signal(range(geo.cols + 1))
        hi = ls.tile_col + ls.m
        lanes, counts = [], []
        for k in range(self.chains):
            first = Signal(range(geo.cols + 1), name=f"first{k}")
            count = Signal(range(geo.cols + 1), name=f"count{k}")
            top = Signal(range(geo.cols + 1), name=f"top{k}")
            k0, k1 = k * self.width, min(geo.cols, (k + 1) * self.width)
            m.d.comb += [
                first.eq(Mux(ls.tile_col > k0, ls.tile_col, k0)),
                top.eq(Mux(hi < k1, hi, k1)),
                count.eq(Mux(top > first, top - first, 0)),
            ]
            counts.append(count)
            col = first + count - 1 - beat
            live = beat < count
            pos = Signal(range(self.s_words * W + 1), name=f"spos{k}")
            # the element's index in the buffer, in elements of its size
            m.d.comb += pos.eq(((col - ls.tile_col) + (s_off >> op.s_esize)))
            for r in range(R):
                bytes_r = Cat(*(b[8 * W * r : 8 * W * (r + 1)] for b in buf))
                e = element(m, bytes_r, pos, op.s_esize, f"s{k}_{r}")
                lanes.append(Mux(live & rows_mask[r], e, 0))
        m.d.comb += self.stationary.payload.eq(
            Cat(*(Cat(x, Const(0, LANE_BITS - 32)) for x in lanes))
        )

        # -- the moving words and beats ---------------------------------------------------------
        fifo = SyncFIFO(width=8 * W * P, depth=2)
        m.submodules.moving_words = fifo
        n = Signal(range(2048))
        mpos = Signal(range(W + 1))  # the beat's element in the head word
        per_word = Signal(range(W + 1))
        m.d.comb += per_word.eq(W >> op.m_esize)
        mlanes = []
        for r in range(R):
            e = element(m, fifo.r_data[8 * W * r : 8 * W * (r + 1)], mpos, op.m_esize, f"m{r}")
            mlanes.append(Cat(Mux(rows_mask[r], e, 0), Const(0, LANE_BITS - 32)))
        m.d.comb += self.moving.payload.eq(Cat(*mlanes))

        # -- the sequence ----------------------------------------------------------------------
        # an LS takes as many beats as its widest chain has columns
        ls_beats = Signal(range(geo.cols + 1))
        most = counts[0]
        for c in counts[1:]:
            most = Mux(c > most, c, most)
        m.d.comb += ls_beats.eq(most)

        state, at = states(m, _Feed, "feed")
        with m.If(at[_Feed.IDLE]):
            m.d.comb += self.queue.op.ready.eq(~psum_pending)
            with m.If(self.queue.op.valid & ~psum_pending):
                m.d.sync += [op.eq(self.queue.op.payload), psum_pending.eq(1)]
                m.d.sync += state.eq(_Feed.LS_WORD)
        with m.If(at[_Feed.LS_WORD]):
            m.d.comb += [self.te_instr.payload.eq(ls), self.te_instr.valid.eq(1)]
            with m.If(self.te_instr.ready):
                m.d.sync += [
                    rd_base.eq(op.s_addr >> wbits),
                    rd_count.eq(nwords(s_off, ls.m, op.s_esize)),
                    rd_i.eq(0),
                    got.eq(0),
                ]
                m.d.sync += state.eq(_Feed.S_READ)
        with m.If(at[_Feed.S_READ]):
            m.d.comb += [rd_open.eq(1), resp.ready.eq(1)]
            with m.If(resp.valid):
                for i, b in enumerate(buf):
                    with m.If(equals(got, i)):
                        m.d.sync += b.eq(resp.payload)
                m.d.sync += got.eq(got + 1)
            with m.If((got == rd_count) | (resp.valid & (got + 1 == rd_count))):
                m.d.sync += beat.eq(0)
                m.d.sync += state.eq(_Feed.LS_BEATS)
        with m.If(at[_Feed.LS_BEATS]):
            m.d.comb += self.stationary.valid.eq(1)
            with m.If(self.stationary.ready):
                m.d.sync += beat.eq(beat + 1)
                with m.If(beat + 1 >= ls_beats):
                    m.d.sync += state.eq(_Feed.MM_WORD)
        with m.If(at[_Feed.MM_WORD]):
            m.d.comb += [self.te_instr.payload.eq(mm), self.te_instr.valid.eq(1)]
            with m.If(self.te_instr.ready):
                m.d.sync += [
                    rd_base.eq(op.m_addr >> wbits),
                    rd_count.eq(nwords(m_off, mm.n, op.m_esize)),
                    rd_i.eq(0),
                    n.eq(0),
                    mpos.eq(m_off >> op.m_esize),
                ]
                m.d.sync += state.eq(_Feed.MOVE)
        with m.If(at[_Feed.MOVE]):
            inflight = Signal()
            # a read is issued only with room for its word: the FIFO's words plus the one
            # in flight stay within its depth
            m.d.comb += [
                rd_open.eq(fifo.level + inflight < 2),
                fifo.w_data.eq(resp.payload),
                fifo.w_en.eq(resp.valid),
                resp.ready.eq(fifo.w_rdy),
            ]
            with m.If(req.valid & req.ready):
                m.d.sync += inflight.eq(1)
            with m.Elif(resp.valid & resp.ready):
                m.d.sync += inflight.eq(0)
            m.d.comb += self.moving.valid.eq(fifo.r_rdy)
            with m.If(self.moving.valid & self.moving.ready):
                last = n + 1 == mm.n
                m.d.sync += [n.eq(n + 1), mpos.eq(mpos + 1)]
                with m.If((mpos + 1 == per_word) | last):
                    m.d.comb += fifo.r_en.eq(1)
                    m.d.sync += mpos.eq(0)
                with m.If(last):
                    m.d.sync += state.eq(_Feed.IDLE)
        return m
