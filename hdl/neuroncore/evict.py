"""``Evict``: the eviction engine, ``tensor_copy`` from PSUM or SBUF into SBUF with the golden's
dtype conversion."""

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals, span_mask
from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.fp.convert import Fp32ToBf16, Fp32ToFloat
from ncrtl.hdl.verilog import Cell
from ncrtl.model.neuroncore.isa import Convert

from .isa import copy_layout
from .ports import InstrQueue, PsumPort, SbufPort
from .tensor import element_codes, elements

__all__ = ["Evict", "EvictLane", "LANE_MODULE"]

#: The Verilog module of :class:`EvictLane`, placed once per partition.
LANE_MODULE = "ncrtl_evict_lane"

#: The converter of each ``Convert`` code but ``RAW`` and ``BF16`` (its format).
_FORMATS = {
    Convert.FP16: "fp16",
    Convert.FP8_E4M3: "fp8_e4m3",
    Convert.FP8_E4M3FN: "fp8_e4m3fn",
    Convert.FP8_E5M2: "fp8_e5m2",
    Convert.FP8_E3M4: "fp8_e3m4",
}


class EvictLane(wiring.Component):
    """One partition's element through the eviction engine's conversion: the FP32 ``value``
    rounded to nearest even into the format of ``convert`` (BF16, FP16, an FP8 format: the
    golden's conversion, :mod:`ncrtl.hdl.fp.convert`), or its bits as they are (``RAW``), one
    cycle later (every converter's result is registered; ``convert`` selects among them
    combinationally and is held while a copy runs).  A narrower result sits in the low bits.

    Interface
    ---------
    value : In(32)
    convert : In(3)
    result : Out(32)
    """

    def __init__(self):
        super().__init__({"value": In(32), "convert": In(3), "result": Out(32)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.bf16 = b = Fp32ToBf16()
        m.d.comb += [b.i_value.eq(self.value), b.i_mode.eq(0)]
        results = {Convert.BF16: b.o_result}
        for code, fmt in _FORMATS.items():
            m.submodules[fmt] = c = Fp32ToFloat(fmt)
            m.d.comb += c.i_value.eq(self.value)
            results[code] = c.o_result
        raw = Signal(32)
        m.d.sync += raw.eq(self.value)
        with m.Switch(self.convert):
            for code, r in results.items():
                with m.Case(code):
                    m.d.comb += self.result.eq(r)
            with m.Default():
                m.d.comb += self.result.eq(raw)
        return m


class Evict(wiring.Component):
    """One :class:`~ncrtl.model.neuroncore.isa.CopyOp` at a time, an element of every partition
    in its range per cycle in the steady state, in three stages:

    * **read**: a PSUM row per element (its slot of every partition: an FP32 element, or two
      BF16 ones, element ``c`` in half ``c % 2``), or each SBUF word the source spans once, at
      most two reads ahead of the consumer (a two-entry FIFO);
    * **convert**: the element of every partition from the FIFO's head through its partition's
      :class:`EvictLane` (``Convert``: the bytes as they are, or FP32 rounded to nearest even
      to BF16, FP16 or an FP8 format; the result registered);
    * **place**: into the destination word, which is written (byte strobes: the partitions in
      range, the bytes placed) when it is full or the copy ends.  A write takes the SBUF port
      before a read, and the next element waits while a word is being written (a cycle per
      word).

    ``queue.done`` strobes once the last word is written.

    Parameters
    ----------
    geo : ncrtl.model.neuroncore.Geometry
    instance : bool
        The partitions' :class:`EvictLane` as instances of one Verilog module
        (:data:`LANE_MODULE`, :meth:`cells`) or Amaranth submodules.

    Interface
    ---------
    queue : In(InstrQueue(copy_layout(geo)))
    psum : Out(PsumPort(geo.partitions))
    sbuf : Out(SbufPort(...))
    """

    @validated_init
    def __init__(self, geo, *, instance=False):
        self.geo = geo
        self.instance = bool(instance)
        self.words = geo.partition_bytes // geo.word_bytes
        super().__init__(
            {
                "queue": In(InstrQueue(copy_layout(geo))),
                "psum": Out(PsumPort(geo.partitions)),
                "sbuf": Out(SbufPort(geo.partitions, self.words, geo.word_bytes)),
            }
        )

    def cells(self):
        """The lane module, placed with ``Instance`` once per partition (none with
        ``instance=False``)."""
        return [Cell(LANE_MODULE, EvictLane)] if self.instance else []

    def elaborate(self, platform):
        m = Module()
        geo = self.geo
        P, W = geo.partitions, geo.word_bytes
        wbits = (W - 1).bit_length()
        bank_bits = (geo.psum_bank_bytes - 1).bit_length()
        op = Signal(copy_layout(geo))
        busy = Signal()
        sreq, sresp = self.sbuf.req, self.sbuf.resp
        preq, presp = self.psum.req, self.psum.resp

        def byte_of(addr, index, code):
            b = Signal(len(addr) + len(op.n) + 2)
            m.d.comb += b.eq(addr + (index << code))
            return b

        def pos_of(byte, code):
            return byte[:wbits] >> code if wbits else Const(0, 1)

        # -- read: element ``ri`` (PSUM) or source word ``rw`` (SBUF), two reads ahead ---------
        fifo = SyncFIFO(width=8 * W * P, depth=2)
        m.submodules.source = fifo
        ri = Signal(len(op.n) + 1)
        r_byte = byte_of(op.src_addr, ri, op.src_esize)
        rw = Signal(len(r_byte))  # the next SBUF word to read
        last_word = Signal(len(r_byte))
        m.d.comb += last_word.eq(byte_of(op.src_addr, op.n - 1, op.src_esize) >> wbits)
        inflight = Signal(range(3))
        room = fifo.level + inflight < 2
        write_now = Signal()  # the SBUF port carries a write this cycle
        issue_psum = busy & op.src_psum & (ri < op.n) & room
        issue_sbuf = busy & ~op.src_psum & (rw <= last_word) & room & ~write_now
        m.d.comb += [
            preq.valid.eq(issue_psum),
            preq.payload.we.eq(0),
            preq.payload.mask.eq(0b11),
            preq.payload.bank.eq(r_byte >> bank_bits),
            preq.payload.row.eq(r_byte[2:bank_bits]),
        ]
        issued = Signal()
        m.d.comb += issued.eq((preq.valid & preq.ready) | (issue_sbuf & sreq.ready))
        with m.If(preq.valid & preq.ready):
            m.d.sync += ri.eq(ri + 1)
        with m.If(issue_sbuf & sreq.ready):
            m.d.sync += rw.eq(rw + 1)
        # responses into the FIFO (room was kept for every read in flight)
        m.d.comb += [
            presp.ready.eq(1),
            sresp.ready.eq(1),
            fifo.w_en.eq((presp.valid & op.src_psum) | (sresp.valid & ~op.src_psum)),
            fifo.w_data.eq(Mux(op.src_psum, presp.payload, sresp.payload)),
        ]
        m.d.sync += inflight.eq(inflight + issued - fifo.w_en)

        # -- convert: element ``ci`` of the FIFO's head ----------------------------------------
        ci = Signal(len(op.n) + 1)
        c_byte = byte_of(op.src_addr, ci, op.src_esize)
        c_pos = pos_of(c_byte, op.src_esize)
        head = fifo.r_data
        sel = elements(m, head, P, W, c_pos, op.src_esize, "sbuf_elements")
        # a PSUM row holds one FP32 element per partition or two 16-bit ones (BF16: element c
        # in half c % 2, the byte order of the addresses)
        high = op.src_psum & (op.src_esize == 1) & c_byte[1]
        values = [
            Mux(
                op.src_psum,
                Mux(high, head[32 * p + 16 :][:16], head[32 * p :][:32]),
                sel[32 * p :][:32],
            )
            for p in range(P)
        ]
        blocked = Signal()  # a word is being written, or the placed element closes one
        take = Signal()
        m.d.comb += take.eq(busy & fifo.r_rdy & (ci < op.n) & ~blocked)
        c_last_in_word = ((c_pos + 1) << op.src_esize) == W
        with m.If(take):
            m.d.sync += ci.eq(ci + 1)
            m.d.comb += fifo.r_en.eq(op.src_psum | c_last_in_word | (ci + 1 == op.n))
        conv = []
        for p, v in enumerate(values):
            out = Signal(32, name=f"out{p}")
            if self.instance:
                m.submodules[f"lane{p}"] = Instance(
                    LANE_MODULE,
                    i_clk=ClockSignal(),
                    i_rst=ResetSignal(),
                    i_value=v,
                    i_convert=op.convert,
                    o_result=out,
                )
            else:
                m.submodules[f"lane{p}"] = lane = EvictLane()
                m.d.comb += [lane.value.eq(v), lane.convert.eq(op.convert), out.eq(lane.result)]
            conv.append(out)

        # -- place: the converted element (taken last cycle) into the destination word ------
        pv = Signal()  # an element is in the converters' registers
        pi = Signal(len(op.n) + 1)  # its index
        m.d.sync += pv.eq(take)
        with m.If(take):
            m.d.sync += pi.eq(ci)
        d_byte = byte_of(op.dst_addr, pi, op.dst_esize)
        dst_pos = pos_of(d_byte, op.dst_esize)
        acc = Signal(8 * W * P)
        strobe = Signal(W)
        codes = element_codes(W)  # a larger code writes the widest
        placed = []
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
        p_last = pi + 1 == op.n
        closes = pv & ((((dst_pos + 1) << op.dst_esize) == W) | p_last)

        # the word to write: held until the SBUF takes it
        wpend = Signal()
        wlast = Signal()
        wword = Signal(len(d_byte))
        wdata = Signal(8 * W * P)
        wstrobe = Signal(W)
        m.d.comb += blocked.eq(wpend | closes)
        with m.If(pv):
            with m.If(closes):
                m.d.sync += [
                    wpend.eq(1),
                    wlast.eq(p_last),
                    wword.eq(d_byte >> wbits),
                    wdata.eq(Cat(*placed)),
                    wstrobe.eq(new_strobe),
                    acc.eq(0),
                    strobe.eq(0),
                ]
            with m.Else():
                m.d.sync += [acc.eq(Cat(*placed)), strobe.eq(new_strobe)]
        m.d.comb += [
            write_now.eq(wpend),
            sreq.valid.eq(wpend | issue_sbuf),
            sreq.payload.write.eq(wpend),
            sreq.payload.word.eq(Mux(wpend, wword, rw)),
            sreq.payload.data.eq(wdata),
            sreq.payload.strobe.eq(wstrobe),
            sreq.payload.mask.eq(span_mask(op.part, op.parts, P)),
        ]
        with m.If(wpend & sreq.ready):
            m.d.sync += wpend.eq(0)
            with m.If(wlast):
                m.d.comb += self.queue.done.eq(1)
                m.d.sync += busy.eq(0)

        # -- the next operation once this one is written ---------------------------------------
        m.d.comb += self.queue.op.ready.eq(~busy)
        with m.If(self.queue.op.valid & ~busy):
            nxt = self.queue.op.payload
            m.d.sync += [
                op.eq(nxt),
                busy.eq(1),
                ri.eq(0),
                ci.eq(0),
                rw.eq(nxt.src_addr >> wbits),
            ]
        return m
