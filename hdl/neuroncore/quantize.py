"""``Quantize``: the Vector Engine's ``quantize_mx`` on the SBUF, a group of every 8 partitions
through :class:`~ncrtl.hdl.vector_engine.quantize_mx.QuantizeMX` per cycle."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals, span_mask
from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.vector_engine.quantize_mx import QuantizeMX
from ncrtl.model.neuroncore.isa import QUANTIZE_FORMATS, QUANTIZE_SLOT
from ncrtl.model.tensor_engine.matmul import MX_GROUP_PARTITIONS, QUADRANT, mx_scale_partition

from .isa import quantize_layout
from .ports import ErrorStrobe, InstrQueue, SbufPort

__all__ = ["Quantize", "QuantizeError"]

#: Source elements of a partition in one beat (a group is 8 partitions x 4 elements).
_QUAD = 4
#: Bytes of a partition's four element codes (an FP8 ``_x4`` element).
_CODES = 4
#: Source words read ahead of the quantizer.
_AHEAD = 3


class _WordStage:
    """A destination word (of every partition) filled a slot at a time in ``acc`` with its
    byte strobes, moved when full or at the operation's end to a write register (``pend``,
    ``word``, ``data``, ``wstrobe``) that holds it until the SBUF takes it: the codes' word and
    the scales' word of :class:`Quantize`."""

    def __init__(self, name, geo):
        W, P = geo.word_bytes, geo.partitions
        self.acc = Signal(8 * W * P, name=f"{name}_acc")
        self.strobe = Signal(W, name=f"{name}_strobe")
        self.pend = Signal(name=f"{name}_pend")
        self.word = Signal(geo.addr_bits, name=f"{name}_word")
        self.data = Signal(8 * W * P, name=f"{name}_data")
        self.wstrobe = Signal(W, name=f"{name}_wstrobe")

    def place(self, m, closes, word, placed, bit):
        """A beat taken: its slots ``placed`` (every partition's word with them) and their
        strobe ``bit``; to the write register if it ``closes`` the word (``word``: its
        address)."""
        with m.If(closes):
            m.d.sync += [
                self.pend.eq(1),
                self.word.eq(word),
                self.data.eq(Cat(*placed)),
                self.wstrobe.eq(self.strobe | bit),
                self.acc.eq(0),
                self.strobe.eq(0),
            ]
        with m.Else():
            m.d.sync += [self.acc.eq(Cat(*placed)), self.strobe.eq(self.strobe | bit)]

    def write(self, m, req):
        """The write register on the SBUF request ``req``, emptied when it is taken (a beat
        that closes the word waits while it is full, so none refills it in that cycle)."""
        m.d.comb += [
            req.payload.word.eq(self.word),
            req.payload.data.eq(self.data),
            req.payload.strobe.eq(self.wstrobe),
        ]
        with m.If(req.ready):
            m.d.sync += self.pend.eq(0)


class QuantizeError:
    """``error.code`` of :class:`Quantize`: why an operation was refused (nothing written)."""

    FORMAT = 1  #: an element format that is not an FP8 ``_x4`` destination
    SHAPE = 2  #: partitions that are not whole quadrants, or elements not a positive multiple of 4


class Quantize(wiring.Component):
    """One :class:`~ncrtl.model.neuroncore.isa.QuantizeOp` at a time, a beat (four elements of
    every partition: one group per 8 partitions) per cycle in the steady state:

    * **read**: each SBUF word the source spans, once, at most three ahead of the quantizer
      (a FIFO that covers the cycles the port spends on writes); a word holds
      ``word_bytes / 8`` beats;
    * **quantize**: the beat's 8-byte slot of every partition into
      :class:`~ncrtl.hdl.vector_engine.quantize_mx.QuantizeMX` (``src_fmt``, ``elem_fmt``,
      the Trainium3 scale rule: the golden's :func:`ncrtl.model.vector_engine.quantize_mx`);
    * **place**: its four codes per partition into the destination word and its scales into
      the scale word (group ``g``'s at partition ``32 (g // 4) + g % 4``, the quadrant's other
      partitions 0); a word moves to its write register when full or at the operation's end,
      and the next beat waits only when that register still holds the previous word.  Writes
      take the SBUF port before reads (codes, then scales).

    ``queue.done`` strobes once the last words are written.  An operation with an element
    format other than FP8 ``_x4`` (:data:`~ncrtl.model.neuroncore.isa.QUANTIZE_FORMATS`), or
    partitions that are not whole quadrants, or an element count that is not a positive
    multiple of 4, writes nothing: ``error`` strobes (:class:`QuantizeError`) and ``done``
    with it.

    Parameters
    ----------
    geo : ncrtl.model.neuroncore.Geometry
        Partitions a multiple of 32, ``word_bytes`` a multiple of 8.
    instance : bool
        The quantizer's lanes as instances of one Verilog module
        (:meth:`~ncrtl.hdl.vector_engine.quantize_mx.QuantizeMX.cells`) or Amaranth
        submodules.

    Interface
    ---------
    queue : In(InstrQueue(quantize_layout(geo)))
    sbuf : Out(SbufPort(...))
    error : Out(ErrorStrobe(2))
    """

    @validated_init
    def __init__(self, geo, *, instance=False):
        if geo.partitions % QUADRANT or geo.word_bytes % QUANTIZE_SLOT:
            raise ValueError(
                f"Quantize needs partitions a multiple of {QUADRANT} and word_bytes a multiple "
                f"of {QUANTIZE_SLOT}, not {geo.partitions} and {geo.word_bytes}"
            )
        self.geo = geo
        self.words = geo.partition_bytes // geo.word_bytes
        self.quantizer = QuantizeMX(geo.partitions // MX_GROUP_PARTITIONS, instance=instance)
        super().__init__(
            {
                "queue": In(InstrQueue(quantize_layout(geo))),
                "sbuf": Out(SbufPort(geo.partitions, self.words, geo.word_bytes)),
                "error": Out(ErrorStrobe(2)),
            }
        )

    def cells(self):
        return self.quantizer.cells()

    def elaborate(self, platform):
        m = Module()
        geo = self.geo
        P, W = geo.partitions, geo.word_bytes
        wbits = (W - 1).bit_length()
        m.submodules.quantizer = qm = self.quantizer
        op = Signal(quantize_layout(geo))
        busy = Signal()
        sreq, sresp = self.sbuf.req, self.sbuf.resp
        beats = Signal(len(op.n) - 1)
        m.d.comb += beats.eq(op.n >> 2)

        # -- read: every source word once, _AHEAD ahead ----------------------------------------
        fifo = SyncFIFO(width=8 * W * P, depth=_AHEAD)
        m.submodules.source = fifo
        rw = Signal(geo.addr_bits)  # the next word to read
        last_word = Signal(geo.addr_bits)
        m.d.comb += last_word.eq((op.src_addr + (op.n << 1) - 1) >> wbits)
        inflight = Signal(range(_AHEAD + 1))
        room = fifo.level + inflight < _AHEAD
        writing = Signal()  # a write has the SBUF port this cycle
        issue = busy & (rw <= last_word) & room & ~writing
        with m.If(issue & sreq.ready):
            m.d.sync += rw.eq(rw + 1)
        m.d.comb += [
            sresp.ready.eq(1),
            fifo.w_en.eq(sresp.valid),
            fifo.w_data.eq(sresp.payload),
        ]
        m.d.sync += inflight.eq(inflight + (issue & sreq.ready) - fifo.w_en)

        # -- quantize: beat ``bi``'s slot of the FIFO's head -----------------------------------
        slots = W // QUANTIZE_SLOT
        bi = Signal(len(beats) + 1)
        b_byte = Signal(geo.addr_bits + 1)
        m.d.comb += b_byte.eq(op.src_addr + (bi << 3))
        slot = b_byte[3:wbits] if slots > 1 else Const(0, 1)
        head = fifo.r_data
        src = Signal(64 * P)
        with m.Switch(slot):
            for j in range(slots):
                with m.Default() if j == slots - 1 else m.Case(j):
                    m.d.comb += src.eq(Cat(*(head[8 * W * p + 64 * j :][:64] for p in range(P))))
        m.d.comb += [
            qm.src.valid.eq(busy & fifo.r_rdy & (bi < beats)),
            qm.src.payload.data.eq(src),
            qm.src.payload.src_fmt.eq(op.src_fmt),
            qm.src.payload.elem_fmt.eq(op.elem_fmt),
            qm.src.payload.scale_rule.eq(0),
        ]
        with m.If(qm.src.valid & qm.src.ready):
            m.d.sync += bi.eq(bi + 1)
            m.d.comb += fifo.r_en.eq(equals(slot, slots - 1) | (bi + 1 == beats))

        # -- place: beat ``oi``'s codes and scales into their words ----------------------------
        oi = Signal(len(beats) + 1)
        o_last = oi + 1 == beats
        d_byte = Signal(geo.addr_bits + 1)
        s_byte = Signal(geo.addr_bits + 1)
        m.d.comb += [d_byte.eq(op.dst_addr + (oi << 2)), s_byte.eq(op.scale_addr + oi)]
        d_slots = W // _CODES
        d_pos = d_byte[2:wbits] if d_slots > 1 else Const(0, 1)
        s_pos = s_byte[:wbits]
        d_closes = equals(d_pos, d_slots - 1) | o_last
        s_closes = equals(s_pos, W - 1) | o_last

        codes = qm.dst.payload.data
        scales = qm.dst.payload.scale
        dw, sw = _WordStage("codes", geo), _WordStage("scales", geo)
        d_acc, s_acc = dw.acc, sw.acc
        d_placed, s_placed = [], []
        # the partition of each group's scale (the golden's layout); the others get 0
        holder = {
            int(mx_scale_partition(MX_GROUP_PARTITIONS * g)): g
            for g in range(P // MX_GROUP_PARTITIONS)
        }
        for p in range(P):
            word = Signal(8 * W, name=f"codes{p}")
            for j in range(d_slots):
                cur = d_acc[8 * W * p + 32 * j :][:32]
                m.d.comb += word[32 * j :][:32].eq(Mux(equals(d_pos, j), codes[32 * p :][:32], cur))
            d_placed.append(word)
            g = holder.get(p)
            scale = scales[8 * g :][:8] if g is not None else Const(0, 8)
            word = Signal(8 * W, name=f"scales{p}")
            for j in range(W):
                cur = s_acc[8 * W * p + 8 * j :][:8]
                m.d.comb += word[8 * j :][:8].eq(Mux(equals(s_pos, j), scale, cur))
            s_placed.append(word)
        d_bit = Signal(W)
        m.d.comb += d_bit.eq(Const((1 << _CODES) - 1, W) << (d_pos << 2))
        s_bit = Signal(W)
        m.d.comb += s_bit.eq(Const(1, W) << s_pos)

        # the write registers: a word waits there until the SBUF takes it
        d_pend, s_pend = dw.pend, sw.pend
        ended = Signal()  # the last beat is placed
        m.d.comb += qm.dst.ready.eq(~(d_pend & d_closes) & ~(s_pend & s_closes))
        put = qm.dst.valid & qm.dst.ready
        with m.If(put):
            m.d.sync += oi.eq(oi + 1)
            with m.If(o_last):
                m.d.sync += ended.eq(1)
            dw.place(m, d_closes, d_byte >> wbits, d_placed, d_bit)
            sw.place(m, s_closes, s_byte >> wbits, s_placed, s_bit)

        m.d.comb += [
            writing.eq(d_pend | s_pend),
            sreq.valid.eq(d_pend | s_pend | issue),
            sreq.payload.write.eq(d_pend | s_pend),
            sreq.payload.mask.eq(span_mask(op.part, op.parts, P)),
        ]
        with m.If(d_pend):
            dw.write(m, sreq)
        with m.Elif(s_pend):
            sw.write(m, sreq)
        with m.Else():
            m.d.comb += sreq.payload.word.eq(rw)

        # done: the last beat placed and its words written
        with m.If(busy & ended & ~d_pend & ~s_pend):
            m.d.comb += self.queue.done.eq(1)
            m.d.sync += [busy.eq(0), ended.eq(0)]

        # -- the next operation once this one is written, or refused ---------------------------
        nxt = self.queue.op.payload
        fp8 = nxt.elem_fmt < len(QUANTIZE_FORMATS)
        # (reductions rather than ``== 0``, which Verilog gets as a LOGNOT of a slice)
        q_bits = (QUADRANT - 1).bit_length()
        quadrants = ~nxt.part[:q_bits].any() & ~nxt.parts[:q_bits].any() & nxt.parts.any()
        shaped = quadrants & ~nxt.n[:2].any() & nxt.n.any()
        m.d.comb += self.queue.op.ready.eq(~busy)
        with m.If(self.queue.op.valid & ~busy):
            with m.If(fp8 & shaped):
                m.d.sync += [
                    op.eq(nxt),
                    busy.eq(1),
                    bi.eq(0),
                    oi.eq(0),
                    rw.eq(nxt.src_addr >> wbits),
                ]
            with m.Else():
                m.d.comb += [
                    self.error.valid.eq(1),
                    self.error.code.eq(Mux(fp8, QuantizeError.SHAPE, QuantizeError.FORMAT)),
                    self.queue.done.eq(1),
                ]
        return m
