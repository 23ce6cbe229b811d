"""``TensorFeed``: the Tensor Engine's queue side: a matmul's operands read from SBUF and handed
to the engine as its LoadStationary and MultiplyMoving beats, its PSUM write sent to PSUM."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals, span_mask
from ncrtl.hdl.common.fsm import states
from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.psum.control import INSTR_LAYOUT as PSUM_INSTR_LAYOUT
from ncrtl.hdl.tensor_engine.control import INSTR_LAYOUT as TE_INSTR_LAYOUT
from ncrtl.model.neuroncore.isa import Second
from ncrtl.model.tensor_engine.matmul import mx_scale_partition
from ncrtl.model.tensor_engine.timing import chain_count, chain_width

from .isa import matmul_layout
from .ports import InstrQueue, SbufPort

__all__ = ["TensorFeed", "LANE_BITS", "elements", "element_codes"]

#: A Tensor Engine lane word: the element's container (up to 32 bits) and an MX scale.
LANE_BITS = 40


def element_codes(width):
    """Element size codes (``1 << code`` bytes, 0 to 2) a ``width``-byte word holds."""
    return [c for c in (0, 1, 2) if width >= 1 << c]


def elements(m, words, lanes, width, pos, code, name):
    """Element ``pos`` (counted in elements of ``1 << code`` bytes; codes 0 to 2, a larger one
    reads the widest) of every lane's ``width``-byte word in ``words`` (lane ``l`` at bits
    ``8 * width * l``), zero-extended to 32 bits: ``lanes`` x 32 bits.

    A switch over the size and the index whose every case is one concatenation of fixed slices
    across the lanes: a multiplexer per lane bit, no shifter per lane (a 128-lane shifter of
    the whole word is what made the full-size core too large to generate)."""
    out = Signal(32 * lanes, name=name)
    codes = element_codes(width)
    with m.Switch(code):
        for c in codes:
            w = 8 << c
            n = 8 * width // w
            with m.Default() if c == codes[-1] else m.Case(c):
                with m.Switch(pos):
                    for j in range(n):
                        lanes_j = (
                            Cat(words[8 * width * lane + w * j :][:w], Const(0, 32 - w))
                            for lane in range(lanes)
                        )
                        with m.Default() if j == n - 1 else m.Case(j):
                            m.d.comb += out.eq(Cat(*lanes_j))
    return out


class _Feed(enum.Enum, shape=3):
    """TensorFeed's states, in the order an operation passes them (an MX matmul passes
    ``S_READ`` and ``S_FLUSH`` twice: its stationary elements, then their scales)."""

    IDLE = 0
    LS_WORD = 1
    S_READ = 2
    S_FLUSH = 3
    LS_BEATS = 4
    MM_WORD = 5
    MOVE = 6


def scale_partition(r):
    """The partition of PE row ``r``'s MX scales (seed 001's quadrant layout, the golden's
    :func:`~ncrtl.model.tensor_engine.matmul.mx_scale_partition`), a Python int for wiring."""
    return int(mx_scale_partition(r))


class TensorFeed(wiring.Component):
    """One :class:`~ncrtl.model.neuroncore.isa.MatmulOp` at a time: the LoadStationary word to
    the Tensor Engine, the stationary tile ``[K, M]`` read word by word into a register per PE
    column (realigned on the way, see ``elaborate``), then its beats: chain ``k``'s beat ``j``
    is column ``first + count - 1 - j`` of its columns
    (:func:`~ncrtl.model.tensor_engine.timing.ls_chain_columns`), the MultiplyMoving word, then
    the moving tile ``[K, N]`` streamed word by word (two words buffered) into its ``N``
    beats; the PSUM write goes out when the operation is taken.  PE row ``r`` reads SBUF
    partition ``r``; rows outside the tile get zero lanes.

    A matmul with a second pass (``op.second``, :class:`~ncrtl.model.neuroncore.isa.Second`)
    reads a byte per row and PE column of the stationary from ``s_addr2`` after its elements,
    the same way, and streams a byte per row and beat of the moving from ``m_addr2`` beside its
    elements (a second two-word FIFO; its word holds ``word_bytes`` beats' bytes):

    * an MX matmul (``mx=True``): its E8M0 scales, row ``r``'s from partition
      :func:`scale_partition` ``(r)`` (fixed wires), in bits ``[32, 40)`` of its lane word
      (an element word holds ``word_bytes / 4`` beats' ``_x4`` elements);
    * a double-row matmul (``double_row=True``): its second row, row ``r``'s from partition
      ``r``, in bits ``[8, 16)`` beside the first row's byte.

    Parameters
    ----------
    geo : ncrtl.model.neuroncore.Geometry
    mx : bool
        Build the MX scale paths (a core whose PEs have the MX mode).
    double_row : bool
        Build the double-row paths (a core whose PEs have the double-row mode).

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
    def __init__(self, geo, *, mx=False, double_row=False):
        self.geo = geo
        self.mx, self.double_row = bool(mx), bool(double_row)
        self.second = self.mx or self.double_row
        self.words = geo.partition_bytes // geo.word_bytes
        self.chains = chain_count(geo.cols, geo.tile_unit)
        self.width = chain_width(geo.cols, geo.tile_unit)
        W = geo.word_bytes
        # the SBUF words a stationary tile spans: M elements of up to 4 bytes from any byte
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
        m.d.comb += [req.payload.mask.eq(rows_mask), req.payload.write.eq(0)]
        # the moving scales' reads (MX): ``sc_count`` words from ``sc_base``, when ``use_sc``
        sc_base = Signal(range(self.words + 1))
        sc_count = Signal(range(self.words + 2))
        sc_i = Signal(range(self.words + 2))
        sc_open = Signal()
        use_sc = Signal()
        word, valid = rd_base + rd_i, rd_open & (rd_i < rd_count)
        if self.second:
            word = Mux(use_sc, sc_base + sc_i, word)
            valid = Mux(use_sc, sc_open & (sc_i < sc_count), valid)
        m.d.comb += [req.payload.word.eq(word), req.valid.eq(valid)]
        with m.If(req.valid & req.ready):
            if self.second:
                with m.If(use_sc):
                    m.d.sync += sc_i.eq(sc_i + 1)
                with m.Else():
                    m.d.sync += rd_i.eq(rd_i + 1)
            else:
                m.d.sync += rd_i.eq(rd_i + 1)
        resp = self.sbuf.resp
        got = Signal(range(self.s_words + 1))

        # -- element sizes, tile extents -------------------------------------------------------
        s_off = op.s_addr[:wbits] if wbits else Const(0, 1)
        m_off = op.m_addr[:wbits] if wbits else Const(0, 1)

        def read_window(addr, off, count, code):
            """The reads of ``count`` elements of ``1 << code`` bytes from byte ``addr``
            (``off`` its byte in the word): the words they span, from the first."""
            return [
                rd_base.eq(addr >> wbits),
                rd_count.eq((off + (count << code) + (W - 1)) >> wbits),
                rd_i.eq(0),
            ]

        # -- the stationary tile in column registers and the LoadStationary beats -----------
        # ``scol[c]``: PE column c's element of every row (32 bits per row).  The SBUF words
        # of the tile are realigned so that aligned word ``i`` holds the elements of PE
        # columns ``i * per .. i * per + per - 1`` (``per`` elements to a word): element e of
        # the tile is at byte ``s_off + e * esize`` of the read words and belongs to column
        # ``tile_col + e``, so aligned word i is the read words' bytes from ``W * i + d``,
        # ``d = s_off - tile_col * esize``: two consecutive read words (a zero word before
        # the first and after the last) shifted by ``d mod W`` bytes, at index ``j - 1 -
        # floor(d / W)`` for the pair ending with read word j.  Each column then takes a
        # fixed slice of the aligned word of its index: no multiplexer over the tile's bytes.
        # A second pass (``sc_phase``) reads a byte per element the same way: an MX matmul's
        # scales into ``sscale[c]`` (row r's byte from partition ``scale_partition(r)``), a
        # double-row matmul's second row into bits [8, 16) of ``scol[c]``.
        codes = element_codes(W)
        is_mx = op.second == Second.MX_SCALES
        is_dr = op.second == Second.DOUBLE_ROW
        has2 = op.second.any()
        sc_phase = Signal()
        cur_code = Signal(2)
        m.d.comb += cur_code.eq(Mux(sc_phase, 0, op.s_esize))
        sc_off = op.s_addr2[:wbits] if wbits else Const(0, 1)
        scol = [Signal(32 * R, name=f"scol{c}") for c in range(geo.cols)]
        sscale = [Signal(8 * R, name=f"sscale{c}") for c in range(geo.cols)] if self.mx else []
        prev = Signal(8 * W * R)  # the previous read word of every PE row's partition
        flush = Signal()  # the pair after the last read word
        hi_word = Signal(8 * W * R)
        m.d.comb += hi_word.eq(Mux(flush, 0, resp.payload[: 8 * W * R]))
        d = Signal(signed(len(op.s_addr) + 10))
        m.d.comb += d.eq(Mux(sc_phase, sc_off - ls.tile_col, s_off - (ls.tile_col << op.s_esize)))
        aligned = Signal(8 * W * R)
        with m.Switch(d[:wbits] if wbits else Const(0, 1)):
            for b in range(W):
                pairs = [
                    Cat(prev[8 * W * r + 8 * b : 8 * W * (r + 1)], hi_word[8 * W * r :][: 8 * b])
                    for r in range(R)
                ]
                with m.Default() if b == W - 1 else m.Case(b):
                    m.d.comb += aligned.eq(Cat(*pairs))
        a_we = Signal()
        a_idx = Signal(signed(len(d) + 2))
        m.d.comb += a_idx.eq(got - 1 - (d >> wbits))
        # ``slot[t]``: element ``t mod per`` of the aligned word, widened to 32 bits per row
        # (the size chosen once); column c takes slot ``c mod W`` (``per`` divides W) when the
        # aligned word is the one of its index
        slot = [Signal(32 * R, name=f"sslot{t}") for t in range(W)]
        with m.Switch(cur_code):
            for code in codes:
                w, per = 8 << code, W >> code
                with m.Default() if code == codes[-1] else m.Case(code):
                    for t, sig in enumerate(slot):
                        rows_t = [
                            Cat(aligned[8 * W * r + w * (t % per) :][:w], Const(0, 32 - w))
                            for r in range(R)
                        ]
                        m.d.comb += sig.eq(Cat(*rows_t))
        for c, reg in enumerate(scol):
            hit = Signal(name=f"scol_we{c}")
            with m.Switch(cur_code):
                for code in codes:
                    with m.Default() if code == codes[-1] else m.Case(code):
                        m.d.comb += hit.eq(a_we & equals(a_idx, c // (W >> code)))
            with m.If(hit & ~sc_phase):
                m.d.sync += reg.eq(slot[c % W])
            if self.mx:
                with m.If(hit & sc_phase & is_mx):
                    m.d.sync += sscale[c].eq(
                        Cat(*(slot[c % W][32 * scale_partition(r) :][:8] for r in range(R)))
                    )
            if self.double_row:
                with m.If(hit & sc_phase & is_dr):
                    m.d.sync += reg.eq(
                        Cat(
                            *(
                                Cat(reg[32 * r :][:8], slot[c % W][32 * r :][:8], Const(0, 16))
                                for r in range(R)
                            )
                        )
                    )

        beat = Signal(range(geo.cols + 1))
        hi = ls.tile_col + ls.m
        row_bits = Signal(32 * R)  # ones in the 32 bits of every row inside the tile
        m.d.comb += row_bits.eq(Cat(*(rows_mask[r].replicate(32) for r in range(R))))
        row_bytes = Signal(8 * R)  # the same for a scale byte per row
        m.d.comb += row_bytes.eq(Cat(*(rows_mask[r].replicate(8) for r in range(R))))
        lanes, scales, counts = [], [], []
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
            # beat j: column first + count - 1 - j of the chain's columns k0 .. k1 - 1
            idx = Signal(range(k1 - k0 + 1), name=f"scol_idx{k}")
            m.d.comb += idx.eq(first + count - 1 - beat - k0)
            chain = Signal(32 * R, name=f"chain{k}")
            with m.Switch(idx):
                for c in range(k0, k1):
                    with m.Default() if c == k1 - 1 else m.Case(c - k0):
                        m.d.comb += chain.eq(scol[c])
            live = Signal(name=f"live{k}")
            m.d.comb += live.eq(beat < count)
            # a signal, so that each row's slice below does not repeat the whole expression
            lane = Signal(32 * R, name=f"slanes{k}")
            m.d.comb += lane.eq(Mux(live, chain & row_bits, 0))
            lanes.append(lane)
            scale = Signal(8 * R, name=f"sscales{k}")
            if self.mx:
                schain = Signal(8 * R, name=f"sscale_chain{k}")
                with m.Switch(idx):
                    for c in range(k0, k1):
                        with m.Default() if c == k1 - 1 else m.Case(c - k0):
                            m.d.comb += schain.eq(sscale[c])
                m.d.comb += scale.eq(Mux(live & is_mx, schain & row_bytes, 0))
            scales.append(scale)
        m.d.comb += self.stationary.payload.eq(
            Cat(
                *(
                    Cat(x[32 * r :][:32], sc[8 * r :][: LANE_BITS - 32])
                    for x, sc in zip(lanes, scales)
                    for r in range(R)
                )
            )
        )

        # -- the moving words and beats ---------------------------------------------------------
        fifo = SyncFIFO(width=8 * W * P, depth=2)
        m.submodules.moving_words = fifo
        n = Signal(range(2048))
        mpos = Signal(range(W + 1))  # the beat's element in the head word
        per_word = Signal(range(W + 1))
        m.d.comb += per_word.eq(W >> op.m_esize)
        mel = elements(m, fifo.r_data, R, W, mpos, op.m_esize, "moving_elements")
        mel_rows = Signal(32 * R)
        m.d.comb += mel_rows.eq(mel & row_bits)
        # the second pass's bytes: beat n's byte of the second FIFO's word, row r's from its
        # scale partition (MX) or its own (double row)
        sfifo = SyncFIFO(width=8 * W * R, depth=2) if self.second else None
        spos = Signal(range(W + 1))
        mscale = Signal(8 * R)
        mrow2 = Signal(8 * R)
        if self.second:
            m.submodules.moving_second = sfifo
            with m.Switch(spos):
                for j in range(W):
                    with m.Default() if j == W - 1 else m.Case(j):
                        if self.mx:
                            sp = [scale_partition(r) for r in range(R)]
                            m.d.comb += mscale.eq(
                                Cat(*(sfifo.r_data[8 * W * p + 8 * j :][:8] for p in sp))
                                & row_bytes
                                & is_mx.replicate(8 * R)
                            )
                        if self.double_row:
                            m.d.comb += mrow2.eq(
                                Cat(*(sfifo.r_data[8 * W * r + 8 * j :][:8] for r in range(R)))
                                & row_bytes
                                & is_dr.replicate(8 * R)
                            )
        # a double row's first byte is the element (one byte), its second the second row's
        mlanes = Cat(
            *(
                Cat(
                    mel_rows[32 * r :][:8],
                    mel_rows[32 * r + 8 :][:8] | mrow2[8 * r :][:8],
                    mel_rows[32 * r + 16 :][:16],
                )
                for r in range(R)
            )
        )
        m.d.comb += self.moving.payload.eq(
            Cat(*(Cat(mlanes[32 * r :][:32], mscale[8 * r :][: LANE_BITS - 32]) for r in range(R)))
        )

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
                m.d.sync += read_window(op.s_addr, s_off, ls.m, op.s_esize) + [got.eq(0)]
                m.d.sync += state.eq(_Feed.S_READ)
        with m.If(at[_Feed.S_READ]):
            m.d.comb += [rd_open.eq(1), resp.ready.eq(1)]
            with m.If(resp.valid):
                m.d.comb += a_we.eq(1)
                m.d.sync += [prev.eq(resp.payload[: 8 * W * R]), got.eq(got + 1)]
                with m.If(got + 1 == rd_count):
                    m.d.sync += state.eq(_Feed.S_FLUSH)
        with m.If(at[_Feed.S_FLUSH]):  # the last aligned word: the last read word's tail
            m.d.comb += [flush.eq(1), a_we.eq(1)]
            m.d.sync += [prev.eq(0), sc_phase.eq(0), beat.eq(0), state.eq(_Feed.LS_BEATS)]
            if self.second:
                with m.If(has2 & ~sc_phase):  # then the stationary's second pass
                    m.d.sync += read_window(op.s_addr2, sc_off, ls.m, 0) + [got.eq(0)]
                    m.d.sync += [sc_phase.eq(1), state.eq(_Feed.S_READ)]
        with m.If(at[_Feed.LS_BEATS]):
            m.d.comb += self.stationary.valid.eq(1)
            with m.If(self.stationary.ready):
                m.d.sync += beat.eq(beat + 1)
                with m.If(beat + 1 >= ls_beats):
                    m.d.sync += state.eq(_Feed.MM_WORD)
        with m.If(at[_Feed.MM_WORD]):
            m.d.comb += [self.te_instr.payload.eq(mm), self.te_instr.valid.eq(1)]
            with m.If(self.te_instr.ready):
                m.d.sync += read_window(op.m_addr, m_off, mm.n, op.m_esize) + [
                    n.eq(0),
                    mpos.eq(m_off >> op.m_esize),
                ]
                if self.second:
                    msc_off = op.m_addr2[:wbits] if wbits else Const(0, 1)
                    m.d.sync += [
                        sc_base.eq(op.m_addr2 >> wbits),
                        sc_count.eq(Mux(has2, (msc_off + mm.n + (W - 1)) >> wbits, 0)),
                        sc_i.eq(0),
                        spos.eq(msc_off),
                    ]
                m.d.sync += state.eq(_Feed.MOVE)
        with m.If(at[_Feed.MOVE]):
            inflight = Signal()
            resp_sc = Signal()  # the read in flight is a scale word's
            # a read is issued only with room for its word: the FIFO's words plus the one
            # in flight stay within its depth
            m.d.comb += [
                rd_open.eq(fifo.level + (inflight & ~resp_sc) < 2),
                fifo.w_data.eq(resp.payload),
                fifo.w_en.eq(resp.valid & ~resp_sc),
                resp.ready.eq(Mux(resp_sc, sfifo.w_rdy if self.second else 0, fifo.w_rdy)),
            ]
            if self.second:
                # a scale word first when the scales' FIFO is empty or no element word is due
                data_due = rd_open & (rd_i < rd_count)
                m.d.comb += [
                    sc_open.eq(sfifo.level + (inflight & resp_sc) < 2),
                    use_sc.eq(sc_open & (sc_i < sc_count) & (~sfifo.level.any() | ~data_due)),
                    sfifo.w_data.eq(resp.payload[: 8 * W * R]),
                    sfifo.w_en.eq(resp.valid & resp_sc),
                ]
            with m.If(req.valid & req.ready):
                m.d.sync += [inflight.eq(1), resp_sc.eq(use_sc)]
            with m.Elif(resp.valid & resp.ready):
                m.d.sync += inflight.eq(0)
            scales_ready = (sfifo.r_rdy | ~has2) if self.second else 1
            m.d.comb += self.moving.valid.eq(fifo.r_rdy & scales_ready)
            with m.If(self.moving.valid & self.moving.ready):
                last = n + 1 == mm.n
                m.d.sync += [n.eq(n + 1), mpos.eq(mpos + 1)]
                with m.If((mpos + 1 == per_word) | last):
                    m.d.comb += fifo.r_en.eq(1)
                    m.d.sync += mpos.eq(0)
                if self.second:
                    with m.If(has2):
                        m.d.sync += spos.eq(spos + 1)
                        with m.If((spos + 1 == W) | last):
                            m.d.comb += sfifo.r_en.eq(1)
                            m.d.sync += spos.eq(0)
                with m.If(last):
                    m.d.sync += state.eq(_Feed.IDLE)
        return m
