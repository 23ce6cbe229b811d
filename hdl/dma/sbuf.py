"""``Sbuf``: the state buffer, one SRAM per partition, a DMA port, an engine port and the
near-memory read-add-write unit."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_bool, check_int, validated_init
from ncrtl.hdl.psum.bank import BankMemory, place_bank
from ncrtl.hdl.verilog import Cell
from ncrtl.model.dma.sbuf import DMA_WAIT, Access

from .raw import AddWords

__all__ = [
    "Sbuf",
    "partition_module",
    "dma_request_layout",
    "engine_request_layout",
    "SYNTH_SRAM_BITS",
    "sim_load",
    "sim_read",
]

#: Largest partition memory (bits) the synthesis view builds; larger ones are SRAM macros.
SYNTH_SRAM_BITS = 1 << 16


def partition_module(word_bytes, words):
    """Verilog module name of one partition's SRAM (a byte-enabled
    :class:`~ncrtl.hdl.psum.bank.BankMemory`)."""
    return f"sbuf_partition_{8 * word_bytes}x{words}"


def dma_request_layout(partitions, words, word_bytes):
    """``partition``, ``word``, ``access`` (an :class:`ncrtl.model.dma.sbuf.Access`: read,
    write or read-add-write), ``dtype`` (a read-add-write's
    :class:`ncrtl.model.dma.isa.AddDtype`), ``data`` (``word_bytes`` bytes, byte ``i`` in bits
    ``[8i, 8i + 8)``), ``strobe`` (a bit per byte written)."""
    return data.StructLayout(
        {
            "partition": range(partitions),
            "word": range(words),
            "access": 2,
            "dtype": 1,
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

    Each partition is an SRAM of ``partition_bytes / word_bytes`` words with a read port and a
    write port (byte write enables, zeros out of power-on, a read returns the word before the
    cycle's write).  The DMA port reaches one word of one partition per request (a read, a
    write or a read-add-write); the engine port one word of every partition in its mask.  A
    conflict on the DMA's partition goes to the engine unless the DMA request has waited
    ``dma_wait`` cycles (:class:`ncrtl.model.dma.sbuf.SbufArbiter`, cycle for cycle).

    The read-add-write unit sits beside the partitions: a read-add-write reads its word at the
    grant, adds the request's data lane by lane in the next cycle
    (:class:`~ncrtl.hdl.dma.raw.AddWords`, FP32 or BF16) and writes the sum's strobed bytes
    :data:`~ncrtl.model.dma.sbuf.ADD_LATENCY` cycles after the grant on the write port, while
    the read port serves the next request: one per cycle, a DMA write's rate.  A request that
    touches a word still being added, or writes a partition whose sum is written that cycle,
    waits.

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
        dma_reads = dq.access != Access.WRITE  # a read or a read-add-write uses the read port
        dma_read = equals(dq.access, Access.READ)

        # Read-add-writes in flight: s1 granted last cycle (its word is on the SRAM output and
        # goes into the adder), s2 the cycle before (its sum is written now).
        slot = data.StructLayout(
            {"valid": 1, "partition": range(self.partitions), "word": range(self.words)}
        )
        s1, s2 = Signal(slot), Signal(slot)
        s1_data, s1_dtype = Signal(w8), Signal()
        s1_strobe, s2_strobe = Signal(self.word_bytes), Signal(self.word_bytes)
        m.submodules.adder = adder = AddWords(self.word_bytes)

        def in_mask(p):
            """Whether partition ``p`` (a signal) is in the engine request's mask."""
            return Cat(*(eq_.mask[k] & equals(p, k) for k in range(self.partitions))).any()

        def waits(hit, word, write):
            """A request that touches a word being added, or writes where a sum is written."""
            return (s1.valid & hit(s1.partition) & (s1.word == word)) | (
                s2.valid & hit(s2.partition) & ((s2.word == word) | write)
            )

        # Arbitration (SbufArbiter): a read waits for its port's response slot.
        dma_blocked = Signal()
        eng_blocked = Signal()
        m.d.comb += [
            dma_blocked.eq(
                (dma_read & self.dma_resp.valid & ~self.dma_resp.ready)
                | waits(lambda p: p == dq.partition, dq.word, dq.access == Access.WRITE)
            ),
            eng_blocked.eq(
                (~eq_.write & self.eng_resp.valid & ~self.eng_resp.ready)
                | waits(lambda p: in_mask(p), eq_.word, eq_.write)
            ),
        ]
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

        adding = dma_go & (dq.access == Access.ADD)
        m.d.sync += [
            s1.valid.eq(adding),
            s1.partition.eq(dq.partition),
            s1.word.eq(dq.word),
            s1_data.eq(dq.data),
            s1_dtype.eq(dq.dtype),
            s1_strobe.eq(dq.strobe),
            s2.eq(s1),
            s2_strobe.eq(s1_strobe),
        ]

        # Responses: valid the cycle after a read grant, held until taken.  The SRAM output of a
        # partition changes when the other port reads it, so a response is taken from the SRAM
        # in the cycle after its grant ("fresh") and from a holding register after that.
        dma_part = Signal.like(dq.partition)
        dma_fresh, eng_fresh = Signal(), Signal()
        m.d.sync += [dma_fresh.eq(dma_go & dma_read), eng_fresh.eq(eng_go & ~eq_.write)]
        with m.If(dma_go & dma_read):
            m.d.sync += [self.dma_resp.valid.eq(1), dma_part.eq(dq.partition)]
        with m.Elif(self.dma_resp.ready):
            m.d.sync += self.dma_resp.valid.eq(0)
        with m.If(eng_go & ~eq_.write):
            m.d.sync += self.eng_resp.valid.eq(1)
        with m.Elif(self.eng_resp.ready):
            m.d.sync += self.eng_resp.valid.eq(0)

        rdata = []
        for p in range(self.partitions):
            module = partition_module(self.word_bytes, self.words) if self.instance else None
            port = place_bank(m, f"p{p}", w8, self.words, granularity=8, module=module)
            dma_here = dma_go & equals(dq.partition, p)
            eng_here = eng_go & eq_.mask[p]
            sum_here = s2.valid & equals(s2.partition, p)
            m.d.comb += [
                port["raddr"].eq(Mux(dma_here, dq.word, eq_.word)),
                port["ren"].eq((dma_here & dma_reads) | (eng_here & ~eq_.write)),
            ]
            with m.If(sum_here):
                m.d.comb += [
                    port["waddr"].eq(s2.word),
                    port["wen"].eq(s2_strobe),
                    port["wdata"].eq(adder.o_sum),
                ]
            with m.Elif(dma_here & (dq.access == Access.WRITE)):
                m.d.comb += [
                    port["waddr"].eq(dq.word),
                    port["wen"].eq(dq.strobe),
                    port["wdata"].eq(dq.data),
                ]
            with m.Elif(eng_here & eq_.write):
                m.d.comb += [
                    port["waddr"].eq(eq_.word),
                    port["wen"].eq(eq_.strobe),
                    port["wdata"].eq(eq_.data[w8 * p : w8 * (p + 1)]),
                ]
            rdata.append(port["rdata"])
        eng_live = Cat(*rdata)
        dma_live = rdata[0]
        add_old = rdata[0]
        for p in range(1, self.partitions):
            dma_live = Mux(dma_part == p, rdata[p], dma_live)
            add_old = Mux(s1.partition == p, rdata[p], add_old)
        m.d.comb += [
            adder.i_old.eq(add_old),
            adder.i_new.eq(s1_data),
            adder.i_dtype.eq(s1_dtype),
        ]
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


# -- simulation helpers (Amaranth simulator) -------------------------------------------------


async def sim_load(ctx, sbuf, contents):
    """Write ``contents`` (``[partitions, partition_bytes]`` uint8) into ``sbuf`` through its
    engine port, one word of every partition per cycle (an Amaranth simulator testbench)."""
    w = sbuf.word_bytes
    full = (1 << sbuf.partitions) - 1
    for word in range(sbuf.partition_bytes // w):
        chunk = contents[:, word * w : (word + 1) * w]
        ctx.set(
            sbuf.eng_req.payload,
            {
                "mask": full,
                "word": word,
                "write": 1,
                "data": int.from_bytes(chunk.tobytes(), "little"),
                "strobe": (1 << w) - 1,
            },
        )
        ctx.set(sbuf.eng_req.valid, 1)
        await ctx.tick().until(sbuf.eng_req.ready)
    ctx.set(sbuf.eng_req.valid, 0)


async def sim_read(ctx, sbuf):
    """The contents of ``sbuf`` read through its engine port: ``[partitions, partition_bytes]``
    uint8 (an Amaranth simulator testbench)."""
    import numpy as np

    w, parts = sbuf.word_bytes, sbuf.partitions
    out = np.zeros((parts, sbuf.partition_bytes), dtype=np.uint8)
    ctx.set(sbuf.eng_resp.ready, 1)
    for word in range(sbuf.partition_bytes // w):
        ctx.set(
            sbuf.eng_req.payload,
            {"mask": (1 << parts) - 1, "word": word, "write": 0, "data": 0, "strobe": 0},
        )
        ctx.set(sbuf.eng_req.valid, 1)
        await ctx.tick().until(sbuf.eng_req.ready)
        ctx.set(sbuf.eng_req.valid, 0)
        await ctx.tick().until(sbuf.eng_resp.valid)
        raw = ctx.get(sbuf.eng_resp.payload).to_bytes(parts * w, "little")
        out[:, word * w : (word + 1) * w] = np.frombuffer(raw, np.uint8).reshape(parts, w)
    ctx.set(sbuf.eng_resp.ready, 0)
    return out
