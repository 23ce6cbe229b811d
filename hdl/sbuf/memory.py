"""``Sbuf``: the state buffer, one SRAM per partition, a DMA port, an engine port and the
near-memory read-add-write unit."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import decode, equals, pick
from ncrtl.hdl.common.params import check_bool, check_int, validated_init
from ncrtl.hdl.psum.bank import BankMemory, place_bank
from ncrtl.hdl.verilog import Cell
from ncrtl.model.sbuf.memory import DMA_WAIT, Access

from .raw import AddWords

__all__ = [
    "check_geometry",
    "Sbuf",
    "MultiPortSbuf",
    "SbufPort",
    "SbufDmaPort",
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
    """``partition``, ``word``, ``access`` (an :class:`ncrtl.model.sbuf.memory.Access`: read,
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


class SbufPort(wiring.Signature):
    """An engine's SBUF port: requests (:func:`engine_request_layout`: one
    word of every partition in a mask, read or write) out, read responses (every partition's
    word, in request order) in."""

    def __init__(self, partitions, words, word_bytes):
        self.partitions, self.words, self.word_bytes = partitions, words, word_bytes
        super().__init__(
            {
                "req": Out(stream.Signature(engine_request_layout(partitions, words, word_bytes))),
                "resp": In(stream.Signature(8 * word_bytes * partitions)),
            }
        )


class SbufDmaPort(wiring.Signature):
    """A DMA engine's SBUF port: requests (:func:`dma_request_layout`: one word of one
    partition, a read, a write or a read-add-write) out, read responses (the word) in."""

    def __init__(self, partitions, words, word_bytes):
        self.partitions, self.words, self.word_bytes = partitions, words, word_bytes
        super().__init__(
            {
                "req": Out(stream.Signature(dma_request_layout(partitions, words, word_bytes))),
                "resp": In(stream.Signature(8 * word_bytes)),
            }
        )


def check_geometry(owner, partitions, partition_bytes, word_bytes):
    """Validate an SBUF geometry for ``owner`` (the class name in the messages):
    ``partitions`` 1 to 128, ``word_bytes`` a power of two from 4 to 64, ``partition_bytes`` a
    multiple of it; returns ``(partitions, partition_bytes, word_bytes, words)``."""
    partitions = check_int(partitions, f"{owner} partitions", minimum=1, maximum=128)
    word_bytes = check_int(word_bytes, f"{owner} word_bytes", minimum=4, maximum=64)
    if word_bytes & (word_bytes - 1):
        raise ValueError(f"{owner} word_bytes must be a power of two, not {word_bytes}")
    partition_bytes = check_int(partition_bytes, f"{owner} partition_bytes", minimum=word_bytes)
    if partition_bytes % word_bytes:
        raise ValueError(
            f"{owner} partition_bytes {partition_bytes} must be a multiple of word_bytes "
            f"{word_bytes}"
        )
    return partitions, partition_bytes, word_bytes, partition_bytes // word_bytes


class MultiPortSbuf(wiring.Component):
    """The SBUF with a DMA port per DMA engine of a core, and the engine port:
    :class:`ncrtl.model.sbuf.memory.PortsArbiter` cycle for cycle.

    Each DMA port is :class:`Sbuf`'s (a read, a write or a read-add-write of one word of one
    partition per request, one read response in flight, its own read-add-write pipeline and
    adder).  A partition serves one DMA port per cycle: among the ports that ask for it and are
    not held back, the first from a turn that advances every cycle; ports on different
    partitions are all served at once, which is what lets a core's engines, each on its own
    partitions, move ``ports`` words per cycle together.  The engine port against each DMA port
    follows :class:`Sbuf`'s rule (the engine first unless that DMA port has waited
    ``dma_wait`` cycles).

    With ``engine_ports`` above one, every compute engine has its own :class:`SbufPort`
    (``engine{j}``), shared round robin on the engine port
    (:class:`~ncrtl.hdl.sbuf.engines.EnginePorts`: a request per grant, a read granted once
    the previous read's response is taken).

    Parameters
    ----------
    ports : int
        DMA ports, 1 to 32.
    partitions, partition_bytes, word_bytes, dma_wait, instance
        As :class:`Sbuf`.
    engine_ports : int
        Compute-engine ports, 1 to 8.

    Interface
    ---------
    dma{i}_req : In(stream.Signature(dma_request_layout(...)))
    dma{i}_resp : Out(stream.Signature(8 * word_bytes))
        DMA port ``i`` (also :meth:`dma_req_port` / :meth:`dma_resp_port`).
    eng_req, eng_resp
        As :class:`Sbuf` (one engine port).
    engine{j} : In(SbufPort(partitions, words, word_bytes))
        Engine port ``j`` (more than one engine port; also :meth:`engine_port`).
    """

    @validated_init
    def __init__(
        self,
        ports=16,
        partitions=128,
        partition_bytes=192 * 1024,
        word_bytes=16,
        *,
        engine_ports=1,
        dma_wait=DMA_WAIT,
        instance=False,
    ):
        owner = type(self).__name__
        self.ports = check_int(ports, f"{owner} ports", minimum=1, maximum=32)
        self.engine_ports = check_int(engine_ports, f"{owner} engine_ports", minimum=1, maximum=8)
        self.instance = check_bool(instance, f"{owner} instance")
        self.partitions, self.partition_bytes, self.word_bytes, self.words = check_geometry(
            owner, partitions, partition_bytes, word_bytes
        )
        self.dma_wait = check_int(dma_wait, f"{owner} dma_wait", minimum=0, maximum=255)
        members = {}
        for i in range(ports):
            members[f"{self._port_name(i)}_req"] = In(
                stream.Signature(dma_request_layout(partitions, self.words, word_bytes))
            )
            members[f"{self._port_name(i)}_resp"] = Out(stream.Signature(8 * word_bytes))
        if engine_ports == 1:
            members["eng_req"] = In(
                stream.Signature(engine_request_layout(partitions, self.words, word_bytes))
            )
            members["eng_resp"] = Out(stream.Signature(8 * word_bytes * partitions))
        else:
            for j in range(engine_ports):
                members[f"engine{j}"] = In(SbufPort(partitions, self.words, word_bytes))
        super().__init__(members)
        # the arbiter's turn (a timing model starts from its value, as the golden's ``turn``)
        self.turn = Signal(range(max(ports, 2)))

    def _port_name(self, i):
        return f"dma{i}"

    def dma_req_port(self, i):
        """DMA port ``i``'s request stream."""
        return getattr(self, f"{self._port_name(i)}_req")

    def dma_resp_port(self, i):
        """DMA port ``i``'s response stream."""
        return getattr(self, f"{self._port_name(i)}_resp")

    def engine_port(self, j):
        """Engine port ``j`` (with more than one engine port)."""
        return getattr(self, f"engine{j}")

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
        # Everything that depends on a port's partition is written as operations on vectors
        # of ``partitions`` bits (a port's one-hot partition, the grants' index bits) and as
        # one shifted concatenation per selected word (``pick``), not as a chain of
        # conditionals per partition and port: the full-size SBUF verilates in 20.6 s and
        # 0.5 GB into 19 MB of C++ (69 s, 1.07 GB and 51 MB with the chains).
        m = Module()
        n, P, W = self.ports, self.partitions, self.word_bytes
        w8 = 8 * W
        reqs = [self.dma_req_port(i) for i in range(n)]
        resps = [self.dma_resp_port(i) for i in range(n)]
        if self.engine_ports == 1:
            eng_req, eng_resp = self.eng_req, self.eng_resp
        else:
            from .engines import EnginePorts  # (it takes this module's SbufPort)

            m.submodules.engines = arb = EnginePorts(self.engine_ports, P, self.words, W)
            for j in range(self.engine_ports):
                wiring.connect(m, wiring.flipped(self.engine_port(j)), arb.client(j))
            eng_req, eng_resp = arb.sbuf.req, arb.sbuf.resp
        eq_ = eng_req.payload
        slot = data.StructLayout({"valid": 1, "partition": range(P), "word": range(self.words)})
        s1 = [Signal(slot, name=f"s1_{i}") for i in range(n)]
        s2 = [Signal(slot, name=f"s2_{i}") for i in range(n)]
        s1_data = [Signal(w8, name=f"s1_data{i}") for i in range(n)]
        s1_dtype = [Signal(name=f"s1_dtype{i}") for i in range(n)]
        s1_strobe = [Signal(W, name=f"s1_strobe{i}") for i in range(n)]
        s2_strobe = [Signal(W, name=f"s2_strobe{i}") for i in range(n)]
        adders = []
        for i in range(n):
            m.submodules[f"adder{i}"] = a = AddWords(W)
            adders.append(a)

        def onehot(partition, enable, name):
            v = Signal(P, name=name)
            m.d.comb += v.eq(Mux(enable, decode(partition, P), 0))
            return v

        def waits(same_partition, word, write):
            out = 0
            for i in range(n):
                out = out | (s1[i].valid & same_partition(s1[i].partition) & (s1[i].word == word))
                out = out | (
                    s2[i].valid & same_partition(s2[i].partition) & ((s2[i].word == word) | write)
                )
            return out

        turn = self.turn
        m.d.sync += turn.eq(Mux(turn == n - 1, 0, turn + 1))
        rank = []
        for i in range(n):
            r = Signal(range(max(n, 2)), name=f"rank{i}")
            # the last port's rank needs no wrap (and a constant comparison does not lint)
            m.d.comb += r.eq(i - turn if i == n - 1 else Mux(turn <= i, i - turn, i + n - turn))
            rank.append(r)
        active, win = [], []
        for i in range(n):
            q = reqs[i].payload
            a = Signal(name=f"active{i}")
            blocked = (equals(q.access, Access.READ) & resps[i].valid & ~resps[i].ready) | waits(
                lambda p, q=q: p == q.partition, q.word, q.access == Access.WRITE
            )
            m.d.comb += a.eq(reqs[i].valid & ~blocked)
            active.append(a)
        for i in range(n):
            beaten = 0
            for j in range(n):
                if j != i:
                    same = reqs[j].payload.partition == reqs[i].payload.partition
                    beaten = beaten | (active[j] & same & (rank[j] < rank[i]))
            w = Signal(name=f"win{i}")
            m.d.comb += w.eq(active[i] & ~beaten)
            win.append(w)
        mask_bits = list(eq_.mask)
        eng_blocked = (~eq_.write & eng_resp.valid & ~eng_resp.ready) | waits(
            lambda p: pick(mask_bits, p), eq_.word, eq_.write
        )
        waited = [Signal(range(self.dma_wait + 2), name=f"waited{i}") for i in range(n)]
        conflict = []
        first = 0
        for i in range(n):
            c = Signal(name=f"conflict{i}")
            hit = pick(mask_bits, reqs[i].payload.partition)
            m.d.comb += c.eq(win[i] & eng_req.valid & hit)
            conflict.append(c)
            first = first | (c & (waited[i] >= self.dma_wait))
        eng_go = Signal()
        m.d.comb += [
            eng_go.eq(eng_req.valid & ~eng_blocked & ~first),
            eng_req.ready.eq(eng_go),
        ]
        go = []
        for i in range(n):
            g = Signal(name=f"go{i}")
            m.d.comb += [g.eq(win[i] & ~(conflict[i] & eng_go)), reqs[i].ready.eq(g)]
            go.append(g)
            with m.If(reqs[i].valid & ~g):
                with m.If(waited[i] <= self.dma_wait):
                    m.d.sync += waited[i].eq(waited[i] + 1)
            with m.Else():
                m.d.sync += waited[i].eq(0)
            q = reqs[i].payload
            m.d.sync += [
                s1[i].valid.eq(g & (q.access == Access.ADD)),
                s1[i].partition.eq(q.partition),
                s1[i].word.eq(q.word),
                s1_data[i].eq(q.data),
                s1_dtype[i].eq(q.dtype),
                s1_strobe[i].eq(q.strobe),
                s2[i].eq(s1[i]),
                s2_strobe[i].eq(s1_strobe[i]),
            ]

        # responses, as Sbuf's: fresh from the SRAM the cycle after the grant, held after
        part = [Signal(range(P), name=f"resp_part{i}") for i in range(n)]
        fresh = [Signal(name=f"fresh{i}") for i in range(n)]
        eng_fresh = Signal()
        m.d.sync += eng_fresh.eq(eng_go & ~eq_.write)
        with m.If(eng_go & ~eq_.write):
            m.d.sync += eng_resp.valid.eq(1)
        with m.Elif(eng_resp.ready):
            m.d.sync += eng_resp.valid.eq(0)
        for i in range(n):
            reading = go[i] & equals(reqs[i].payload.access, Access.READ)
            m.d.sync += fresh[i].eq(reading)
            with m.If(reading):
                m.d.sync += [resps[i].valid.eq(1), part[i].eq(reqs[i].payload.partition)]
            with m.Elif(resps[i].ready):
                m.d.sync += resps[i].valid.eq(0)

        # Per partition: whether a port was granted it (or writes a sum to it) and which one.
        # At most one port is granted a partition per cycle, and at most one sum lands on it,
        # so the port's index is the OR of the one-hot vectors of the ports with that index bit.
        index_bits = max(1, (n - 1).bit_length())

        def index_of(vectors, name):
            out = []
            for b in range(index_bits):
                v = Signal(P, name=f"{name}_bit{b}")
                m.d.comb += v.eq(or_all(vec for i, vec in enumerate(vectors) if (i >> b) & 1))
                out.append(v)
            return out

        def or_all(values):
            out = Const(0, P)
            for v in values:
                out = out | v
            return out

        granted = [onehot(reqs[i].payload.partition, go[i], f"granted{i}") for i in range(n)]
        writing = [
            onehot(
                reqs[i].payload.partition,
                go[i] & equals(reqs[i].payload.access, Access.WRITE),
                f"writing{i}",
            )
            for i in range(n)
        ]
        summing = [onehot(s2[i].partition, s2[i].valid, f"summing{i}") for i in range(n)]
        any_granted, any_writing, any_summing = (
            Signal(P, name=name) for name in ("any_granted", "any_writing", "any_summing")
        )
        m.d.comb += [
            any_granted.eq(or_all(granted)),
            any_writing.eq(or_all(writing)),
            any_summing.eq(or_all(summing)),
        ]
        grant_index = index_of(granted, "grant_index")
        sum_index = index_of(summing, "sum_index")
        dma_word = [q.payload.word for q in reqs]
        dma_data = [q.payload.data for q in reqs]
        dma_strobe = [q.payload.strobe for q in reqs]
        sum_word = [s.word for s in s2]
        sum_data = [a.o_sum for a in adders]

        rdata = []
        for p in range(P):
            module = partition_module(W, self.words) if self.instance else None
            port = place_bank(m, f"p{p}", w8, self.words, granularity=8, module=module)
            gi = Cat(*(v[p] for v in grant_index))
            si = Cat(*(v[p] for v in sum_index))
            m.d.comb += [
                port["raddr"].eq(Mux(any_granted[p], pick(dma_word, gi), eq_.word)),
                port["ren"].eq(
                    (any_granted[p] & ~any_writing[p]) | (eng_go & eq_.mask[p] & ~eq_.write)
                ),
            ]
            with m.If(any_summing[p]):
                m.d.comb += [
                    port["waddr"].eq(pick(sum_word, si)),
                    port["wen"].eq(pick(s2_strobe, si)),
                    port["wdata"].eq(pick(sum_data, si)),
                ]
            with m.Elif(any_writing[p]):
                m.d.comb += [
                    port["waddr"].eq(pick(dma_word, gi)),
                    port["wen"].eq(pick(dma_strobe, gi)),
                    port["wdata"].eq(pick(dma_data, gi)),
                ]
            with m.Elif(eng_go & eq_.mask[p] & eq_.write):
                m.d.comb += [
                    port["waddr"].eq(eq_.word),
                    port["wen"].eq(eq_.strobe),
                    port["wdata"].eq(eq_.data[w8 * p : w8 * (p + 1)]),
                ]
            rdata.append(port["rdata"])

        all_rdata = Signal(w8 * P)
        m.d.comb += all_rdata.eq(Cat(*rdata))
        for i in range(n):
            m.d.comb += [
                adders[i].i_old.eq(pick(rdata, s1[i].partition)),
                adders[i].i_new.eq(s1_data[i]),
                adders[i].i_dtype.eq(s1_dtype[i]),
            ]
            hold = Signal(w8, name=f"hold{i}")
            live = pick(rdata, part[i])
            with m.If(fresh[i]):
                m.d.sync += hold.eq(live)
            m.d.comb += resps[i].payload.eq(Mux(fresh[i], live, hold))
        eng_hold = Signal.like(eng_resp.payload)
        with m.If(eng_fresh):
            m.d.sync += eng_hold.eq(all_rdata)
        m.d.comb += eng_resp.payload.eq(Mux(eng_fresh, all_rdata, eng_hold))
        return m


class Sbuf(MultiPortSbuf):
    """The SBUF: ``partitions`` x ``partition_bytes``, as :mod:`ncrtl.model.sbuf.memory` defines it.

    Each partition is an SRAM of ``partition_bytes / word_bytes`` words with a read port and a
    write port (byte write enables, zeros out of power-on, a read returns the word before the
    cycle's write).  The DMA port reaches one word of one partition per request (a read, a
    write or a read-add-write); the engine port one word of every partition in its mask.  A
    conflict on the DMA's partition goes to the engine unless the DMA request has waited
    ``dma_wait`` cycles (:class:`ncrtl.model.sbuf.memory.SbufArbiter`, cycle for cycle).  It is
    :class:`MultiPortSbuf` with one DMA port, named ``dma_req`` / ``dma_resp``.

    The read-add-write unit sits beside the partitions: a read-add-write reads its word at the
    grant, adds the request's data lane by lane in the next cycle
    (:class:`~ncrtl.hdl.sbuf.raw.AddWords`, FP32 or BF16) and writes the sum's strobed bytes
    :data:`~ncrtl.model.sbuf.memory.ADD_LATENCY` cycles after the grant on the write port, while
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
        super().__init__(
            1, partitions, partition_bytes, word_bytes, dma_wait=dma_wait, instance=instance
        )

    def _port_name(self, i):
        return "dma"


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
