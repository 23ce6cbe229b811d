"""``SendRecv``: one core's side of ``sendrecv`` between the two cores of an LNC = 2 logical
core, over a link to the other core's unit."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.hdl.sbuf.memory import check_geometry, dma_request_layout
from ncrtl.model.dma.sendrecv import GPSIMD_LIMITS, GPSIMD_PARTITIONS, Code
from ncrtl.model.sbuf.memory import Access

__all__ = [
    "SendRecv",
    "tile_layout",
    "sendrecv_layout",
    "header_layout",
    "link_layout",
    "sendrecv_status_layout",
    "encode_sendrecv",
]

#: Element sizes by their 2-bit code (3: a size the hardware does not have).
_ESIZES = {1: 0, 2: 1, 4: 2}


def tile_layout(partitions, partition_bytes):
    """An SBUF tile (:class:`ncrtl.model.dma.sendrecv.Tile`): ``partition``, ``partitions``,
    ``byte``, ``count`` (elements per partition), ``esize`` (log2 of the element bytes; 3 for
    a size the hardware does not have)."""
    return data.StructLayout(
        {
            "partition": range(partitions),
            "partitions": range(partitions + 1),
            "byte": range(partition_bytes),
            "count": range(partition_bytes + 1),
            "esize": 2,
        }
    )


def sendrecv_layout(partitions, partition_bytes, pipes):
    """One sendrecv: ``src``, ``dst`` (tiles), ``send_to`` and ``recv_from`` (ranks, 2 bits so
    a bad one can be said), ``pipe``, ``gpsimd`` (the gpsimd-DMA path), ``tag``."""
    tile = tile_layout(partitions, partition_bytes)
    return data.StructLayout(
        {
            "src": tile,
            "dst": tile,
            "send_to": 2,
            "recv_from": 2,
            "pipe": range(max(pipes, 2)),
            "gpsimd": 1,
            "tag": 8,
        }
    )


def header_layout(partitions, partition_bytes, word_bytes):
    """What a unit tells the other of the sendrecv at the head of a pipe: its own ``error``
    code, its path, the shapes it sends and receives, and where its destination's rows start
    inside a word (``d_align``: the sender aligns its words to it)."""
    n = range(partition_bytes + 1)
    p = range(partitions + 1)
    return data.StructLayout(
        {
            "error": 4,
            "gpsimd": 1,
            "s_esize": 2,
            "s_parts": p,
            "s_count": n,
            "d_esize": 2,
            "d_parts": p,
            "d_count": n,
            "d_align": range(max(word_bytes, 2)),
        }
    )


def link_layout(partitions, partition_bytes, word_bytes, pipes):
    """A word on the link between the two units: a ``header`` or a data word of ``pipe``."""
    return data.StructLayout(
        {
            "is_header": 1,
            "pipe": range(max(pipes, 2)),
            "data": 8 * word_bytes,
            "header": header_layout(partitions, partition_bytes, word_bytes),
        }
    )


def sendrecv_status_layout(pipes):
    """A completed sendrecv: ``pipe``, ``tag``, ``code`` (a
    :class:`ncrtl.model.dma.sendrecv.Code`)."""
    return data.StructLayout({"pipe": range(max(pipes, 2)), "tag": 8, "code": 4})


def encode_sendrecv(op):
    """``op`` (:class:`ncrtl.model.dma.sendrecv.SendRecv`) as :func:`sendrecv_layout` fields;
    ranks outside 0..3 and element sizes outside 1/2/4 are encoded as 3."""

    def tile(t):
        return {
            "partition": t.partition,
            "partitions": t.partitions,
            "byte": t.byte,
            "count": t.count,
            "esize": _ESIZES.get(t.esize, 3),
        }

    return {
        "src": tile(op.src),
        "dst": tile(op.dst),
        "send_to": op.send_to_rank if 0 <= op.send_to_rank <= 3 else 3,
        "recv_from": op.recv_from_rank if 0 <= op.recv_from_rank <= 3 else 3,
        "pipe": op.pipe_id,
        "gpsimd": int(op.engine == "gpsimd_dma"),
        "tag": op.tag,
    }


class SendRecv(wiring.Component):
    """One core's sendrecv unit: :func:`ncrtl.model.dma.sendrecv.exchange` with the other
    core's unit, bit for bit, on the core's SBUF through a DMA port.

    A sendrecv enters its pipe's queue (``depth`` each, in order).  The unit offers the head
    of every pipe to the other unit as a header on the link (its own rule check, its shapes,
    its destination's alignment) and keeps the headers it receives, per pipe.  A pipe whose
    own head and the other side's header are both there is a pair; the unit decides its code
    the way the golden does (its own first broken rule, else ``PAIR`` if the other side broke
    one or the two disagree), and for a legal pair sends its source tile's bytes, row by row,
    already aligned to the other core's destination (each link word is two source words
    funnel-shifted, so a row of ``n`` destination words costs ``n + 1`` reads), while it
    writes the words it receives into its destination with byte strobes.  A pair completes
    when its data went both ways (at once, for an illegal pair); the status names the pipe,
    the tag and the code.  Pipes are served lowest first among the ready ones and do not wait
    for one another, so two cores that post pipes in different orders do not deadlock.

    The unit has one SBUF port: a received word's write goes before the next read of the
    source, so an exchange in both directions at once moves a word per cycle in all.  The
    gpsimd path is this data path with the gpsimd limits checked.

    Parameters
    ----------
    word_bytes : int
        SBUF word and link data width, a power of two, 4 to 64.
    partitions, partition_bytes : int
        The SBUF.
    pipes : int
        Pipe ids (``pipe_id`` in ``0 .. pipes - 1``), a power of two.
    depth : int
        Sendrecvs each pipe's queue holds.

    Interface
    ---------
    rank : In(1)
        This core's rank.
    op : In(stream.Signature(sendrecv_layout(...)))
    status : Out(stream.Signature(sendrecv_status_layout(pipes)))
    tx : Out(stream.Signature(link_layout(...)))
        To the other core's ``rx``.
    rx : In(stream.Signature(link_layout(...)))
    sbuf_req : Out(stream.Signature(dma_request_layout(...)))
    sbuf_resp : In(stream.Signature(8 * word_bytes))
        A DMA port of the core's :class:`~ncrtl.hdl.sbuf.memory.Sbuf`.
    """

    @validated_init
    def __init__(
        self, word_bytes=16, *, partitions=128, partition_bytes=192 * 1024, pipes=4, depth=2
    ):
        self.partitions, self.partition_bytes, self.word_bytes, self.words = check_geometry(
            "SendRecv", partitions, partition_bytes, word_bytes
        )
        self.pipes = check_int(pipes, "SendRecv pipes", minimum=1, maximum=16)
        if pipes & (pipes - 1):
            # every value of the pipe field names a queue
            raise ValueError(f"SendRecv pipes must be a power of two, not {pipes}")
        self.depth = check_int(depth, "SendRecv depth", minimum=1, maximum=16)
        P, B, W = partitions, partition_bytes, word_bytes
        link = link_layout(P, B, W, pipes)
        super().__init__(
            {
                "rank": In(1),
                "op": In(stream.Signature(sendrecv_layout(P, B, pipes))),
                "status": Out(stream.Signature(sendrecv_status_layout(pipes))),
                "tx": Out(stream.Signature(link)),
                "rx": In(stream.Signature(link)),
                "sbuf_req": Out(stream.Signature(dma_request_layout(P, self.words, W))),
                "sbuf_resp": In(stream.Signature(8 * W)),
            }
        )

    # -- the rules of one side ---------------------------------------------------------------

    def _nbytes(self, tile):
        return tile.count << tile.esize

    def own_error(self, m, op, name):
        """The first rule ``op`` breaks on its own (``side_error``), a 4-bit code."""
        P, B = self.partitions, self.partition_bytes
        other = ~self.rank
        s, d = op.src, op.dst
        rank_bad = (op.send_to != other) | (op.recv_from != other)
        shape_bad = (s.esize != d.esize) | (s.partitions != d.partitions) | (s.count != d.count)
        nbytes = Signal(range(4 * B + 1), name=f"{name}_nbytes")
        m.d.comb += nbytes.eq(self._nbytes(s))
        limit = Mux(
            equals(s.esize, 0),
            GPSIMD_LIMITS[1],
            Mux(equals(s.esize, 1), GPSIMD_LIMITS[2], GPSIMD_LIMITS[4]),
        )
        parts_odd = s.partitions[: (GPSIMD_PARTITIONS - 1).bit_length()].any()
        limit_bad = op.gpsimd & (parts_odd | (~equals(s.esize, 3) & (nbytes > limit)))

        def tile_bad(t):
            n = self._nbytes(t)
            align = Mux(equals(t.esize, 1), t.byte[0], Mux(equals(t.esize, 2), t.byte[:2].any(), 0))
            return (
                ~t.partitions.any()
                | ~t.count.any()
                | equals(t.esize, 3)
                | (t.partition + t.partitions > P)
                | align
                | (t.byte + n > B)
            )

        parts_meet = (s.partition < d.partition + d.partitions) & (
            d.partition < s.partition + s.partitions
        )
        bytes_meet = (s.byte < d.byte + self._nbytes(d)) & (d.byte < s.byte + nbytes)
        rules = [
            (rank_bad, Code.RANK),
            (shape_bad, Code.SHAPE),
            (limit_bad, Code.LIMIT),
            (tile_bad(s) | tile_bad(d), Code.TENSOR),
            (parts_meet & bytes_meet, Code.OVERLAP),
        ]
        code = Const(0, 4)
        for cond, c in reversed(rules):
            code = Mux(cond, int(c), code)
        out = Signal(4, name=f"{name}_error")
        m.d.comb += out.eq(code)
        return out

    def elaborate(self, platform):
        m = Module()
        P, B, W = self.partitions, self.partition_bytes, self.word_bytes
        n_pipes, log2w = self.pipes, W.bit_length() - 1
        op_shape = sendrecv_layout(P, B, n_pipes)
        hdr_shape = header_layout(P, B, W)

        def pick(items, index):
            """``items[index]`` as a mux chain (lint-clean, unlike an Array)."""
            out = items[0]
            for i in range(1, len(items)):
                out = Mux(equals(index, i), items[i], out)
            return out

        def lowest(bits):
            """``(any, index)`` of the lowest set bit."""
            idx = Const(0, range(max(n_pipes, 2)))
            for i in reversed(range(n_pipes)):
                idx = Mux(bits[i], i, idx)
            return Cat(*bits).any(), idx

        # -- per pipe: the queue of own sendrecvs, the other side's headers, the flags --------
        ops, heads, hdrs = [], [], []
        offered = Signal(n_pipes)
        sent = Signal(n_pipes)
        recvd = Signal(n_pipes)
        decided = Signal(n_pipes)
        codes = [Signal(4, name=f"code{p}") for p in range(n_pipes)]
        own_errs = [Signal(4, name=f"own{p}") for p in range(n_pipes)]
        for p in range(n_pipes):
            q = SyncFIFO(width=op_shape.size, depth=self.depth)
            h = SyncFIFO(width=hdr_shape.size, depth=2)
            m.submodules[f"ops{p}"] = q
            m.submodules[f"hdrs{p}"] = h
            ops.append(q)
            hdrs.append(h)
            heads.append(data.View(op_shape, q.r_data))

        # op intake
        m.d.comb += self.op.ready.eq(
            pick([q.w_rdy for q in ops], self.op.payload.pipe) if n_pipes > 1 else ops[0].w_rdy
        )
        for p, q in enumerate(ops):
            m.d.comb += [
                q.w_data.eq(self.op.payload.as_value()),
                q.w_en.eq(self.op.valid & self.op.ready & equals(self.op.payload.pipe, p)),
            ]

        have = Cat(*(q.r_rdy for q in ops))
        peer = Cat(*(h.r_rdy for h in hdrs))
        pair = Signal(n_pipes)
        m.d.comb += pair.eq(have & offered & peer)

        # -- offers: the lowest pipe whose head is not offered yet ----------------------------
        want_offer, offer_pipe = lowest([have[p] & ~offered[p] for p in range(n_pipes)])
        offer_op = data.View(op_shape, pick([q.r_data for q in ops], offer_pipe))
        offer_err = self.own_error(m, offer_op, "offer")
        hdr = Signal(hdr_shape)
        m.d.comb += [
            hdr.error.eq(offer_err),
            hdr.gpsimd.eq(offer_op.gpsimd),
            hdr.s_esize.eq(offer_op.src.esize),
            hdr.s_parts.eq(offer_op.src.partitions),
            hdr.s_count.eq(offer_op.src.count),
            hdr.d_esize.eq(offer_op.dst.esize),
            hdr.d_parts.eq(offer_op.dst.partitions),
            hdr.d_count.eq(offer_op.dst.count),
            hdr.d_align.eq(offer_op.dst.byte[:log2w] if log2w else 0),
        ]

        # -- decisions: the lowest ready pair not decided -------------------------------------
        want_dec, dec_pipe = lowest([pair[p] & ~decided[p] for p in range(n_pipes)])
        dec_op = data.View(op_shape, pick([q.r_data for q in ops], dec_pipe))
        dec_hdr = data.View(hdr_shape, pick([h.r_data for h in hdrs], dec_pipe))
        dec_own = pick(own_errs, dec_pipe)
        mismatch = (
            (dec_op.gpsimd != dec_hdr.gpsimd)
            | (dec_op.src.esize != dec_hdr.d_esize)
            | (dec_op.src.partitions != dec_hdr.d_parts)
            | (dec_op.src.count != dec_hdr.d_count)
            | (dec_hdr.s_esize != dec_op.dst.esize)
            | (dec_hdr.s_parts != dec_op.dst.partitions)
            | (dec_hdr.s_count != dec_op.dst.count)
        )
        dec_code = Mux(
            dec_own.any(), dec_own, Mux(dec_hdr.error.any() | mismatch, int(Code.PAIR), 0)
        )

        # -- the sender: the lowest decided legal pair not sent -------------------------------
        s_busy = Signal()
        s_pipe = Signal(range(max(n_pipes, 2)))
        s_row = Signal(range(P + 1))
        s_issue = Signal(range(self.words + 2))  # reads issued in the row
        s_got = Signal(range(self.words + 2))  # responses taken in the row
        s_prev = Signal(8 * W)
        s_first = Signal(signed(20 + log2w))  # word index of the row's first read
        s_shift = Signal(range(max(W, 2)))
        s_nw = Signal(range(self.words + 2))  # link words per row
        s_parts = Signal(range(P + 1))
        s_part0 = Signal(range(P))
        legal = [decided[p] & ~codes[p].any() for p in range(n_pipes)]
        want_send, send_pipe = lowest([pair[p] & legal[p] & ~sent[p] for p in range(n_pipes)])
        send_op = data.View(op_shape, pick([q.r_data for q in ops], send_pipe))
        send_hdr = data.View(hdr_shape, pick([h.r_data for h in hdrs], send_pipe))
        a0 = Signal(signed(20 + log2w))  # the source byte under the first link word's byte 0
        m.d.comb += a0.eq(send_op.src.byte - send_hdr.d_align)
        nbytes_send = self._nbytes(send_op.src)

        # -- the receiver: link data into the destination -------------------------------------
        r_busy = Signal()
        r_pipe = Signal(range(max(n_pipes, 2)))
        r_row = Signal(range(P + 1))
        r_j = Signal(range(self.words + 2))
        # The link arrives through a two-word buffer: the other unit's tx.ready then does not
        # depend on this unit's SBUF port, which depends on its own tx.ready (a combinational
        # loop through both units otherwise).
        link_shape = link_layout(P, B, W, n_pipes)
        m.submodules.rx_buf = rx_buf = SyncFIFO(width=link_shape.size, depth=2)
        m.d.comb += [
            rx_buf.w_data.eq(self.rx.payload.as_value()),
            rx_buf.w_en.eq(self.rx.valid),
            self.rx.ready.eq(rx_buf.w_rdy),
        ]
        rx = data.View(link_shape, rx_buf.r_data)
        rx_valid = rx_buf.r_rdy
        r_op = data.View(op_shape, pick([q.r_data for q in ops], Mux(r_busy, r_pipe, rx.pipe)))
        r_nbytes = self._nbytes(r_op.dst)
        r_first_word = r_op.dst.byte >> log2w
        r_nw = ((r_op.dst.byte[:log2w] if log2w else 0) + r_nbytes - 1 >> log2w) + 1
        r_word = Signal(range(self.words + 2))
        m.d.comb += r_word.eq(r_first_word + r_j)
        lo = Signal(signed(24))  # the destination's first byte relative to this word
        hi = Signal(signed(24))
        m.d.comb += [
            lo.eq(r_op.dst.byte - (r_word << log2w)),
            hi.eq(r_op.dst.byte + r_nbytes - (r_word << log2w)),
        ]
        strobe = Cat(*((lo <= b) & (b < hi) for b in range(W)))

        # -- the SBUF port: a received word's write first, else the sender's next read -------
        rx_data = rx_valid & ~rx.is_header
        req = self.sbuf_req.payload
        reads_left = s_busy & (s_issue <= s_nw)
        write_now = rx_data
        m.d.comb += self.sbuf_req.valid.eq(write_now | reads_left)
        rd_word = Signal(signed(20 + log2w))
        m.d.comb += rd_word.eq(s_first + s_issue)
        rd_clamped = Mux(rd_word < 0, 0, Mux(rd_word >= self.words, self.words - 1, rd_word))
        # No read-add-write here: dtype is 0, written as an expression of a signal because a
        # constant into part of a port becomes an `always @*` that reads nothing (ALWNEVER).
        m.d.comb += req.dtype.eq(self.rank & 0)
        with m.If(write_now):
            m.d.comb += [
                req.partition.eq(r_op.dst.partition + r_row),
                req.word.eq(r_word),
                req.access.eq(Access.WRITE),
                req.data.eq(rx.data),
                req.strobe.eq(strobe),
            ]
        with m.Else():
            m.d.comb += [
                req.partition.eq(s_part0 + s_row),
                req.word.eq(rd_clamped),
                req.access.eq(Access.READ),
            ]

        # -- the link out: headers first, else the sender's aligned data ---------------------
        funnel = Cat(s_prev, self.sbuf_resp.payload)
        shifted = Signal(8 * W)
        m.d.comb += shifted.eq(pick([funnel[8 * k : 8 * (k + W)] for k in range(W)], s_shift))
        data_out = s_busy & self.sbuf_resp.valid & s_got.any()
        tx = self.tx.payload
        with m.If(want_offer):
            m.d.comb += [
                self.tx.valid.eq(1),
                tx.is_header.eq(1),
                tx.pipe.eq(offer_pipe),
                tx.header.eq(hdr),
            ]
        with m.Else():
            m.d.comb += [
                self.tx.valid.eq(data_out),
                tx.pipe.eq(s_pipe),
                tx.data.eq(shifted),
            ]
        offer_taken = want_offer & self.tx.ready
        # a response is taken as the row's first word (kept), or as the second half of a
        # link word that leaves this cycle
        take_resp = s_busy & self.sbuf_resp.valid & (~s_got.any() | (~want_offer & self.tx.ready))
        m.d.comb += self.sbuf_resp.ready.eq(take_resp)

        # -- the link in ----------------------------------------------------------------------
        hdr_in_pipe = rx.pipe
        rx_take = Signal()
        m.d.comb += rx_take.eq(
            rx_valid
            & Mux(
                rx.is_header,
                pick([h.w_rdy for h in hdrs], hdr_in_pipe) if n_pipes > 1 else hdrs[0].w_rdy,
                self.sbuf_req.ready,
            )
        )
        m.d.comb += rx_buf.r_en.eq(rx_take)
        for p, h in enumerate(hdrs):
            m.d.comb += [
                h.w_data.eq(rx.header.as_value()),
                h.w_en.eq(rx_valid & rx.is_header & equals(rx.pipe, p) & h.w_rdy),
            ]

        # -- completions: the lowest pipe whose pair is decided, sent and received ------------
        want_done, done_pipe = lowest(
            [pair[p] & decided[p] & sent[p] & recvd[p] for p in range(n_pipes)]
        )
        m.d.comb += [
            self.status.valid.eq(want_done),
            self.status.payload.pipe.eq(done_pipe),
            self.status.payload.tag.eq(pick([hd.tag for hd in heads], done_pipe)),
            self.status.payload.code.eq(pick(codes, done_pipe)),
        ]
        done_now = want_done & self.status.ready

        # -- state updates --------------------------------------------------------------------
        for p in range(n_pipes):
            popped = done_now & equals(done_pipe, p)
            m.d.comb += [ops[p].r_en.eq(popped), hdrs[p].r_en.eq(popped)]
            with m.If(popped):
                m.d.sync += [
                    offered[p].eq(0),
                    decided[p].eq(0),
                    sent[p].eq(0),
                    recvd[p].eq(0),
                ]
            with m.If(offer_taken & equals(offer_pipe, p)):
                m.d.sync += [offered[p].eq(1), own_errs[p].eq(offer_err)]
            with m.If(want_dec & equals(dec_pipe, p)):
                m.d.sync += [decided[p].eq(1), codes[p].eq(dec_code)]
                with m.If(dec_code.any()):  # nothing moves either way
                    m.d.sync += [sent[p].eq(1), recvd[p].eq(1)]

        # sender
        with m.If(~s_busy):
            with m.If(want_send):
                m.d.sync += [
                    s_busy.eq(1),
                    s_pipe.eq(send_pipe),
                    s_row.eq(0),
                    s_issue.eq(0),
                    s_got.eq(0),
                    s_first.eq(a0 >> log2w),
                    s_shift.eq(a0[:log2w] if log2w else 0),
                    s_nw.eq(((send_hdr.d_align + nbytes_send - 1) >> log2w) + 1),
                    s_parts.eq(send_op.src.partitions),
                    s_part0.eq(send_op.src.partition),
                ]
        with m.Else():
            with m.If(reads_left & ~write_now & self.sbuf_req.ready):
                m.d.sync += s_issue.eq(s_issue + 1)
            with m.If(take_resp):
                m.d.sync += [s_prev.eq(self.sbuf_resp.payload), s_got.eq(s_got + 1)]
                with m.If(s_got == s_nw):  # the row's last link word leaves
                    m.d.sync += [s_row.eq(s_row + 1), s_issue.eq(0), s_got.eq(0)]
                    with m.If(s_row + 1 == s_parts):
                        m.d.sync += s_busy.eq(0)
                        for p in range(n_pipes):
                            with m.If(equals(s_pipe, p)):
                                m.d.sync += sent[p].eq(1)

        # receiver
        with m.If(rx_data & self.sbuf_req.ready):
            m.d.sync += [r_busy.eq(1), r_pipe.eq(rx.pipe), r_j.eq(r_j + 1)]
            with m.If(r_j + 1 == r_nw):
                m.d.sync += [r_j.eq(0), r_row.eq(r_row + 1)]
                with m.If(r_row + 1 == r_op.dst.partitions):
                    m.d.sync += [r_busy.eq(0), r_row.eq(0)]
                    for p in range(n_pipes):
                        with m.If(equals(Mux(r_busy, r_pipe, rx.pipe), p)):
                            m.d.sync += recvd[p].eq(1)
        return m
