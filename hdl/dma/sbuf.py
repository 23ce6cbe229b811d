"""``Sbuf``: the state buffer, one single-ported SRAM per partition, a DMA port and an engine
port."""

from amaranth.hdl import Cat, ClockSignal, Instance, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_bool, check_int, validated_init
from ncrtl.hdl.psum.bank import BankMemory
from ncrtl.hdl.verilog import Cell
from ncrtl.model.dma.sbuf import DMA_WAIT

__all__ = [
    "Sbuf",
    "partition_module",
    "dma_request_layout",
    "engine_request_layout",
    "SYNTH_SRAM_BITS",
]

#: Largest partition memory (bits) the synthesis view builds; larger ones are SRAM macros.
SYNTH_SRAM_BITS = 1 << 16


def partition_module(word_bytes, words):
    """Verilog module name of one partition's SRAM (a byte-enabled
    :class:`~ncrtl.hdl.psum.bank.BankMemory`)."""
    return f"sbuf_partition_{8 * word_bytes}x{words}"


def dma_request_layout(partitions, words, word_bytes):
    """``partition``, ``word``, ``write``, ``data`` (``word_bytes`` bytes, byte ``i`` in bits
    ``[8i, 8i + 8)``), ``strobe`` (a bit per byte written)."""
    return data.StructLayout(
        {
            "partition": range(partitions),
            "word": range(words),
            "write": 1,
            "data": 8 * word_bytes,
            "strobe": word_bytes,
        }
    )


def engine_request_layout(partitions, words, word_bytes):
    """``mask`` (a bit per partition accessed), ``word``, ``write``, ``data`` (partition ``p``'s
    word in bits ``[8 word_bytes p, +8 word_bytes)``), ``strobe`` (the same bytes in every
    partition)."""
    return data.StructLayout(
        {
            "mask": partitions,
            "word": range(words),
            "write": 1,
            "data": 8 * word_bytes * partitions,
            "strobe": word_bytes,
        }
    )


class Sbuf(wiring.Component):
    """The SBUF: ``partitions`` x ``partition_bytes``, as :mod:`ncrtl.model.dma.sbuf` defines it.

    Each partition is a single-ported SRAM of ``partition_bytes / word_bytes`` words (one read
    or one write per cycle, byte write enables, zeros out of power-on).  The DMA port reaches
    one word of one partition per request; the engine port one word of every partition in its
    mask.  A conflict on the DMA's partition goes to the engine unless the DMA request has
    waited ``dma_wait`` cycles (:class:`ncrtl.model.dma.sbuf.SbufArbiter`, cycle for cycle).

    A granted read's data is on the port's response stream the next cycle and held there until
    taken; a port's next read is granted only in a cycle its response is taken or empty (one
    response in flight per port, so nothing is lost or duplicated under any backpressure).
    Writes complete at the grant; a read granted later sees them.

    Parameters
    ----------
    partitions : int
        1 to 128.
    partition_bytes : int
        Bytes per partition, a multiple of ``word_bytes`` (192, 224, 256 KiB on
        NeuronCore-v2/v3/v4; small in tests).
    word_bytes : int
        Bytes per access and partition: 4 to 64, a power of two.
    dma_wait : int
        Cycles a conflicting DMA request waits before it wins.
    instance : bool
        Place the partitions as Verilog instances of one SRAM module (True,
        for Verilog generation: :meth:`cells`) or as Amaranth submodules (False, for the
        Amaranth simulator).

    Interface
    ---------
    dma_req : In(stream.Signature(dma_request_layout(...)))
    dma_resp : Out(stream.Signature(8 * word_bytes))
    eng_req : In(stream.Signature(engine_request_layout(...)))
    eng_resp : Out(stream.Signature(8 * word_bytes * partitions))
        Partition ``p``'s word in bits ``[8 word_bytes p, +8 word_bytes)`` (partitions outside
        the mask read as whatever their SRAM output holds).
    """

    @validated_init
    def __init__(
        self,
        partitions=128,
        partition_bytes=192 * 1024,
        word_bytes=16,
        *,
        dma_wait=DMA_WAIT,
        instance=False,
    ):
        self.instance = check_bool(instance, "Sbuf instance")
        self.partitions = check_int(partitions, "Sbuf partitions", minimum=1, maximum=128)
        self.word_bytes = check_int(word_bytes, "Sbuf word_bytes", minimum=4, maximum=64)
        if word_bytes & (word_bytes - 1):
            raise ValueError(f"Sbuf word_bytes must be a power of two, not {word_bytes}")
        self.partition_bytes = check_int(
            partition_bytes, "Sbuf partition_bytes", minimum=word_bytes
        )
        if partition_bytes % word_bytes:
            raise ValueError(
                f"Sbuf partition_bytes {partition_bytes} must be a multiple of word_bytes "
                f"{word_bytes}"
            )
        self.dma_wait = check_int(dma_wait, "Sbuf dma_wait", minimum=0, maximum=255)
        self.words = partition_bytes // word_bytes
        super().__init__(
            {
                "dma_req": In(
                    stream.Signature(dma_request_layout(partitions, self.words, word_bytes))
                ),
                "dma_resp": Out(stream.Signature(8 * word_bytes)),
                "eng_req": In(
                    stream.Signature(engine_request_layout(partitions, self.words, word_bytes))
                ),
                "eng_resp": Out(stream.Signature(8 * word_bytes * partitions)),
            }
        )

    def cells(self):
        """The partition memory module placed with ``Instance`` (none with ``instance=False``);
        a macro (an SRAM of a real flow, a blackbox in the synthesis view) above
        :data:`SYNTH_SRAM_BITS` bits."""
        if not self.instance:
            return []
        w, n = self.word_bytes, self.words
        return [
            Cell(
                partition_module(w, n),
                lambda: BankMemory(8 * w, n, granularity=8),
                macro=8 * w * n > SYNTH_SRAM_BITS,
            )
        ]

    def elaborate(self, platform):
        m = Module()
        w8 = 8 * self.word_bytes
        dq, eq_ = self.dma_req.payload, self.eng_req.payload

        # Arbitration (SbufArbiter): a read waits for its port's response slot.
        dma_blocked = ~dq.write & self.dma_resp.valid & ~self.dma_resp.ready
        eng_blocked = ~eq_.write & self.eng_resp.valid & ~self.eng_resp.ready
        conflict = Signal()
        hits = [equals(dq.partition, p) & eq_.mask[p] for p in range(self.partitions)]
        m.d.comb += conflict.eq(self.dma_req.valid & self.eng_req.valid & Cat(*hits).any())
        waited = Signal(range(self.dma_wait + 2))
        dma_first = waited >= self.dma_wait
        eng_go = Signal()
        dma_go = Signal()
        m.d.comb += [
            eng_go.eq(self.eng_req.valid & ~eng_blocked & ~(conflict & dma_first & ~dma_blocked)),
            dma_go.eq(self.dma_req.valid & ~dma_blocked & ~(conflict & eng_go)),
            self.eng_req.ready.eq(eng_go),
            self.dma_req.ready.eq(dma_go),
        ]
        with m.If(self.dma_req.valid & ~dma_go):
            with m.If(waited <= self.dma_wait):
                m.d.sync += waited.eq(waited + 1)
        with m.Else():
            m.d.sync += waited.eq(0)

        # Responses: valid the cycle after a read grant, held until taken.  The SRAM output of a
        # partition changes when the other port reads it, so a response is taken from the SRAM
        # in the cycle after its grant ("fresh") and from a holding register after that.
        dma_part = Signal.like(dq.partition)
        dma_fresh, eng_fresh = Signal(), Signal()
        m.d.sync += [dma_fresh.eq(dma_go & ~dq.write), eng_fresh.eq(eng_go & ~eq_.write)]
        with m.If(dma_go & ~dq.write):
            m.d.sync += [self.dma_resp.valid.eq(1), dma_part.eq(dq.partition)]
        with m.Elif(self.dma_resp.ready):
            m.d.sync += self.dma_resp.valid.eq(0)
        with m.If(eng_go & ~eq_.write):
            m.d.sync += self.eng_resp.valid.eq(1)
        with m.Elif(self.eng_resp.ready):
            m.d.sync += self.eng_resp.valid.eq(0)

        rdata = []
        for p in range(self.partitions):
            port = dict(
                addr=Signal(range(self.words), name=f"p{p}_addr"),
                ren=Signal(name=f"p{p}_ren"),
                wen=Signal(self.word_bytes, name=f"p{p}_wen"),
                wdata=Signal(w8, name=f"p{p}_wdata"),
                rdata=Signal(w8, name=f"p{p}_rdata"),
            )
            if self.instance:
                m.submodules[f"p{p}"] = Instance(
                    partition_module(self.word_bytes, self.words),
                    i_clk=ClockSignal(),
                    i_rst=ResetSignal(),
                    i_i_raddr=port["addr"],
                    i_i_ren=port["ren"],
                    o_o_rdata=port["rdata"],
                    i_i_waddr=port["addr"],
                    i_i_wen=port["wen"],
                    i_i_wdata=port["wdata"],
                )
            else:
                m.submodules[f"p{p}"] = mem = BankMemory(w8, self.words, granularity=8)
                m.d.comb += [
                    mem.i_raddr.eq(port["addr"]),
                    mem.i_waddr.eq(port["addr"]),
                    mem.i_ren.eq(port["ren"]),
                    mem.i_wen.eq(port["wen"]),
                    mem.i_wdata.eq(port["wdata"]),
                    port["rdata"].eq(mem.o_rdata),
                ]
            dma_here = dma_go & equals(dq.partition, p)
            eng_here = eng_go & eq_.mask[p]
            m.d.comb += [
                port["addr"].eq(Mux(dma_here, dq.word, eq_.word)),
                port["ren"].eq((dma_here & ~dq.write) | (eng_here & ~eq_.write)),
                port["wdata"].eq(Mux(dma_here, dq.data, eq_.data[w8 * p : w8 * (p + 1)])),
            ]
            with m.If(dma_here & dq.write):
                m.d.comb += port["wen"].eq(dq.strobe)
            with m.Elif(eng_here & eq_.write):
                m.d.comb += port["wen"].eq(eq_.strobe)
            rdata.append(port["rdata"])
        eng_live = Cat(*rdata)
        dma_live = rdata[0]
        for p in range(1, self.partitions):
            dma_live = Mux(dma_part == p, rdata[p], dma_live)
        eng_hold = Signal.like(self.eng_resp.payload)
        dma_hold = Signal.like(self.dma_resp.payload)
        with m.If(eng_fresh):
            m.d.sync += eng_hold.eq(eng_live)
        with m.If(dma_fresh):
            m.d.sync += dma_hold.eq(dma_live)
        m.d.comb += [
            self.eng_resp.payload.eq(Mux(eng_fresh, eng_live, eng_hold)),
            self.dma_resp.payload.eq(Mux(dma_fresh, dma_live, dma_hold)),
        ]
        return m
