"""``Evict``: the eviction engine, ``tensor_copy`` from PSUM or SBUF into SBUF with the golden's
dtype conversion."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals, span_mask
from ncrtl.hdl.common.fsm import states
from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.fp.convert import Fp32ToBf16, Fp32ToFp16
from ncrtl.model.neuroncore.isa import Convert

from .isa import copy_layout
from .ports import InstrQueue, PsumPort, SbufPort
from .tensor import elements

__all__ = ["Evict"]


class _Evict(enum.Enum, shape=3):
    """Evict's states, in the order an element passes them."""

    IDLE = 0
    FETCH = 1
    PSUM = 2
    SBUF = 3
    CONVERT = 4
    PLACE = 5
    WRITE = 6


class Evict(wiring.Component):
    """One :class:`~ncrtl.model.neuroncore.isa.CopyOp` at a time, element ``i`` of every
    partition in its range per step: read (a PSUM slot row, or the SBUF word holding the
    element, read once for all its elements), convert (``Convert``: the bytes as they are,
    or FP32 rounded to nearest even to BF16 or FP16, :mod:`ncrtl.hdl.fp.convert`), and place
    into the destination word, which is written (byte strobes: the partitions in range, the
    bytes placed) when it is full or the copy ends.  ``queue.done`` strobes once the last
    word is written.

    Parameters
    ----------
    geo : ncrtl.model.neuroncore.Geometry

    Interface
    ---------
    queue : In(InstrQueue(copy_layout(geo)))
    psum : Out(PsumPort(geo.partitions))
    sbuf : Out(SbufPort(...))
    """

    @validated_init
    def __init__(self, geo):
        self.geo = geo
        self.words = geo.partition_bytes // geo.word_bytes
        super().__init__(
            {
                "queue": In(InstrQueue(copy_layout(geo))),
                "psum": Out(PsumPort(geo.partitions)),
                "sbuf": Out(SbufPort(geo.partitions, self.words, geo.word_bytes)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        geo = self.geo
        P, W = geo.partitions, geo.word_bytes
        wbits = (W - 1).bit_length()
        op = Signal(copy_layout(geo))
        i = Signal(len(op.n))

        # byte positions of element i in its source and destination words
        src_byte = Signal(len(op.src_addr) + len(op.n) + 2)
        dst_byte = Signal(len(op.dst_addr) + len(op.n) + 2)
        m.d.comb += [
            src_byte.eq(op.src_addr + (i << op.src_esize)),
            dst_byte.eq(op.dst_addr + (i << op.dst_esize)),
        ]
        src_word = src_byte >> wbits
        dst_word = dst_byte >> wbits
        src_pos = src_byte[:wbits] >> op.src_esize if wbits else Const(0, 1)
        dst_pos = dst_byte[:wbits] >> op.dst_esize if wbits else Const(0, 1)
        mask = Signal(P)
        m.d.comb += mask.eq(span_mask(op.part, op.parts, P))

        # the source element of every partition
        held = Signal(8 * W * P)  # an SBUF word
        held_word = Signal(len(src_word))
        held_ok = Signal()
        slot = Signal(32 * P)  # a PSUM row
        sel = elements(m, held, P, W, src_pos, op.src_esize, "sbuf_elements")
        values = [Mux(op.src_psum, slot[32 * p :][:32], sel[32 * p :][:32]) for p in range(P)]

        # conversion: the converters register their result (latency 1)
        conv = []
        for p, v in enumerate(values):
            b = Fp32ToBf16()
            h = Fp32ToFp16()
            m.submodules[f"bf16_{p}"] = b
            m.submodules[f"fp16_{p}"] = h
            m.d.comb += [b.i_value.eq(v), b.i_mode.eq(0), h.i_value.eq(v)]
            raw = Signal(32, name=f"raw{p}")
            m.d.sync += raw.eq(v)
            out = Signal(32, name=f"out{p}")
            with m.Switch(op.convert):
                with m.Case(Convert.BF16):
                    m.d.comb += out.eq(b.o_result)
                with m.Case(Convert.FP16):
                    m.d.comb += out.eq(h.o_result)
                with m.Default():
                    m.d.comb += out.eq(raw)
            conv.append(out)

        # the destination word being filled
        acc = Signal(8 * W * P)
        strobe = Signal(W)
        placed = []
        # destination element sizes the word holds (codes 0 to 2; a larger code writes the
        # widest)
        codes = [c for c in (0, 1, 2) if W >= 1 << c]
        for p in range(P):
            word = Signal(8 * W, name=f"placed{p}")
            with m.Switch(op.dst_esize):
                for c in codes:
                    w = 8 << c
                    with m.Default() if c == codes[-1] else m.Case(c):
                        for j in range(8 * W // w):
                            cur = acc[8 * W * p + w * j : 8 * W * p + w * (j + 1)]
                            m.d.comb += word[w * j : w * (j + 1)].eq(
                                Mux(equals(dst_pos, j), conv[p][:w], cur)
                            )
            placed.append(word)
        new_strobe = Signal(W)
        with m.Switch(op.dst_esize):
            for c in codes:
                shifted = Signal(W, name=f"strobe{c}")
                m.d.comb += shifted.eq(Const((1 << (1 << c)) - 1, W) << (dst_pos << c))
                with m.Default() if c == codes[-1] else m.Case(c):
                    m.d.comb += new_strobe.eq(strobe | shifted)
        last = i + 1 == op.n
        full = ((dst_pos + 1) << op.dst_esize) == W

        sreq, sresp = self.sbuf.req, self.sbuf.resp
        preq, presp = self.psum.req, self.psum.resp
        m.d.comb += [
            preq.payload.we.eq(0),
            preq.payload.mask.eq(0b11),
            preq.payload.bank.eq(src_byte >> (geo.psum_bank_bytes - 1).bit_length()),
            preq.payload.row.eq(src_byte[2 : (geo.psum_bank_bytes - 1).bit_length()]),
            sreq.payload.mask.eq(mask),
        ]
        state, at = states(m, _Evict, "evict")
        with m.If(at[_Evict.IDLE]):
            m.d.comb += self.queue.op.ready.eq(1)
            with m.If(self.queue.op.valid):
                m.d.sync += [
                    op.eq(self.queue.op.payload),
                    i.eq(0),
                    held_ok.eq(0),
                    acc.eq(0),
                    strobe.eq(0),
                ]
                m.d.sync += state.eq(_Evict.FETCH)
        with m.If(at[_Evict.FETCH]):
            with m.If(op.src_psum):
                m.d.comb += preq.valid.eq(1)
                with m.If(preq.ready):
                    m.d.sync += state.eq(_Evict.PSUM)
            with m.Elif(held_ok & (held_word == src_word)):
                m.d.sync += state.eq(_Evict.CONVERT)
            with m.Else():
                m.d.comb += [sreq.valid.eq(1), sreq.payload.word.eq(src_word)]
                with m.If(sreq.ready):
                    m.d.sync += state.eq(_Evict.SBUF)
        with m.If(at[_Evict.PSUM]):
            m.d.comb += presp.ready.eq(1)
            with m.If(presp.valid):
                m.d.sync += slot.eq(presp.payload)
                m.d.sync += state.eq(_Evict.CONVERT)
        with m.If(at[_Evict.SBUF]):
            m.d.comb += sresp.ready.eq(1)
            with m.If(sresp.valid):
                m.d.sync += [held.eq(sresp.payload), held_word.eq(src_word), held_ok.eq(1)]
                m.d.sync += state.eq(_Evict.CONVERT)
        with m.If(at[_Evict.CONVERT]):  # the converters' register
            m.d.sync += state.eq(_Evict.PLACE)
        with m.If(at[_Evict.PLACE]):
            m.d.sync += [acc.eq(Cat(*placed)), strobe.eq(new_strobe)]
            with m.If(full | last):
                m.d.sync += state.eq(_Evict.WRITE)
            with m.Else():
                m.d.sync += i.eq(i + 1)
                m.d.sync += state.eq(_Evict.FETCH)
        with m.If(at[_Evict.WRITE]):
            m.d.comb += [
                sreq.valid.eq(1),
                sreq.payload.write.eq(1),
                sreq.payload.word.eq(dst_word),
                sreq.payload.data.eq(acc),
                sreq.payload.strobe.eq(strobe),
            ]
            with m.If(sreq.ready):
                m.d.sync += [acc.eq(0), strobe.eq(0), i.eq(i + 1)]
                with m.If(last):
                    m.d.comb += self.queue.done.eq(1)
                    m.d.sync += state.eq(_Evict.IDLE)
                with m.Else():
                    m.d.sync += state.eq(_Evict.FETCH)
        return m
