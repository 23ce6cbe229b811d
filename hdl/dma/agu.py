"""``AddressGenerator``: an access pattern walked as the memory accesses of a DMA engine."""

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init

__all__ = ["AddressGenerator", "DIMS", "command_layout", "run_layout"]

#: Pattern entries the generator walks: the partition (or outermost) dimension and 4 free ones.
DIMS = 5


def command_layout(addr_bits, index_bits, count_bits, part_bits):
    """One side of a descriptor as the generator takes it, LSB first: ``base`` (byte address of
    element 0 in the device memory, or byte offset of element 0 in every SBUF partition),
    ``offset`` (signed element offset: the whole offset in the device memory, the offset inside
    the partition row in the SBUF), ``partition`` (SBUF: first partition of the access),
    ``esize`` (log2 of the element bytes), ``step``, ``pstep`` and ``num`` (5 entries,
    outermost first; unused outer entries are ``[0, 1]``): an iteration of level ``d`` adds
    ``step[d]`` elements and ``pstep[d]`` partitions (an SBUF pattern's partition level has
    ``step`` 0 and ``pstep`` 1; a DMA transpose's tiled walk steps partitions on two levels)."""
    return data.StructLayout(
        {
            "base": addr_bits,
            "offset": signed(index_bits),
            "partition": part_bits,
            "esize": 2,
            "step": data.ArrayLayout(signed(index_bits), DIMS),
            "pstep": data.ArrayLayout(part_bits, DIMS),
            "num": data.ArrayLayout(count_bits, DIMS),
            "vector": 1,
            "vlevel": 3,
        }
    )


def run_layout(addr_bits, part_bits, word_bytes, count_bits=16):
    """One access: ``partition``, ``addr`` (byte address, or byte in the partition), ``bytes``
    (1 to ``word_bytes``, inside one aligned word), ``last`` (the pattern's last access),
    ``span`` (bytes from ``addr`` to the end of the contiguous elements this run begins: the
    rest of its innermost iteration along a step of 1, else ``bytes``; a reader sizes its
    bursts by it)."""
    return data.StructLayout(
        {
            "partition": part_bits,
            "addr": addr_bits,
            "bytes": word_bytes.bit_length(),
            "last": 1,
            "span": count_bits + 3,
        }
    )


class AddressGenerator(wiring.Component):
    """Walks one side of a DMA descriptor: the runs of :func:`ncrtl.model.dma.agu.runs`.

    A command is an access pattern already checked (``ncrtl.model.dma.isa.check``: every
    address inside its tensor); the generator emits its accesses in loop order, one per cycle:
    along an innermost dimension of step 1, a run of consecutive elements up to the end of the
    aligned ``word_bytes`` word (so one run is one memory word access); otherwise one element.

    It keeps, per pattern level ``d``, the element index at the start of the level's current
    iteration (``start[d]``) and the loop counters; an access adds the run's element count (step
    1) or the innermost step to the current index, and the end of a level's iteration adds that
    level's step to ``start[d]`` and restarts every inner level there: additions only, no
    multiplier.  The partition is kept the same way (``pstep``): in the SBUF the end of a level-0
    iteration moves to the next partition (the partition step is a whole row, seed 003) while the
    free index restarts at ``offset``.

    Parameters
    ----------
    word_bytes : int
        Data path width in bytes (4 to 64, a power of two).
    addr_bits : int
        Byte address width.
    count_bits : int
        Width of a pattern entry's ``num``.
    part_bits : int
        Width of a partition number.

    A ``vector`` command (a vector dynamic offset, NKI's ``indirect_dim = 0``) starts every
    iteration ``i`` of level ``vlevel`` at ``offset + lead_index`` and partition ``partition +
    lead_part``, the values of entry ``lead_at = i`` of the engine's table of offsets, read
    combinationally (``lead_at`` is 0 while idle, for the first iteration).

    Interface
    ---------
    cmd : In(stream.Signature(command_layout(...)))
        Taken when the generator is idle.
    run : Out(stream.Signature(run_layout(...)))
        The accesses; ``last`` on the final one, after which ``cmd`` is ready again.
    lead_at : Out(part_bits)
    lead_index : In(signed(addr_bits + 1))
    lead_part : In(part_bits)
    """

    @validated_init
    def __init__(self, word_bytes=16, *, addr_bits=32, count_bits=16, part_bits=7):
        self.word_bytes = check_int(
            word_bytes, "AddressGenerator word_bytes", minimum=4, maximum=64
        )
        if word_bytes & (word_bytes - 1):
            raise ValueError(
                f"AddressGenerator word_bytes must be a power of two, not {word_bytes}"
            )
        self.addr_bits = check_int(addr_bits, "AddressGenerator addr_bits", minimum=8, maximum=48)
        self.count_bits = check_int(
            count_bits, "AddressGenerator count_bits", minimum=2, maximum=24
        )
        self.part_bits = check_int(part_bits, "AddressGenerator part_bits", minimum=1, maximum=8)
        self.index_bits = addr_bits + 1
        super().__init__(
            {
                "cmd": In(
                    stream.Signature(
                        command_layout(addr_bits, self.index_bits, count_bits, part_bits)
                    )
                ),
                "run": Out(
                    stream.Signature(run_layout(addr_bits, part_bits, word_bytes, count_bits))
                ),
                "lead_at": Out(part_bits),
                "lead_index": In(signed(self.index_bits)),
                "lead_part": In(part_bits),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.word_bytes
        wb = (w - 1).bit_length()
        cfg = Signal.like(self.cmd.payload)
        busy = Signal()
        count = [Signal(self.count_bits, name=f"i{d}") for d in range(DIMS)]
        start = [Signal(signed(self.index_bits + 2), name=f"start{d}") for d in range(DIMS)]
        cur = Signal(signed(self.index_bits + 2))
        part = Signal(self.part_bits)
        pstart = [Signal(self.part_bits, name=f"pstart{d}") for d in range(DIMS)]

        # A vector command's level ``vlevel`` starts its iterations from the lead table.
        vec = self.cmd.payload.vector
        first = Signal(signed(self.index_bits + 2))
        firstp = Signal(self.part_bits)
        m.d.comb += [
            first.eq(self.cmd.payload.offset + Mux(vec, self.lead_index, 0)),
            firstp.eq(self.cmd.payload.partition + Mux(vec, self.lead_part, 0)),
        ]
        m.d.comb += self.cmd.ready.eq(~busy)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [cfg.eq(self.cmd.payload), busy.eq(1), cur.eq(first)]
            m.d.sync += [c.eq(0) for c in count]
            m.d.sync += [s.eq(first) for s in start]
            m.d.sync += part.eq(firstp)
            m.d.sync += [p.eq(firstp) for p in pstart]
        lead_count = count[0]
        for d in range(1, DIMS):
            lead_count = Mux(cfg.vlevel == d, count[d], lead_count)
        m.d.comb += self.lead_at.eq(Mux(busy, lead_count[: self.part_bits] + 1, 0))

        esize = cfg.esize
        addr = Signal(self.addr_bits)
        m.d.comb += addr.eq(cfg.base + (cur << esize))
        inner = DIMS - 1
        inner_lead = cfg.vector & equals(cfg.vlevel, inner)  # a one-entry pattern's vector offset
        contiguous = (cfg.step[inner] == 1) & ~cfg.pstep[inner].any() & ~inner_lead
        left = Signal(self.count_bits + 3)  # bytes left in the innermost iteration
        m.d.comb += left.eq((cfg.num[inner] - count[inner]) << esize)
        room = Signal(wb + 1)  # bytes to the end of the aligned word
        m.d.comb += room.eq(w - addr[:wb])
        nbytes = Signal(wb + 1)
        m.d.comb += nbytes.eq(Mux(contiguous, Mux(left < room, left, room), Const(1, 3) << esize))
        elems = Signal(wb + 1)
        m.d.comb += elems.eq(nbytes >> esize)

        # Level d wraps when its counter is at its last value and every inner level wraps.
        wraps = [Signal(name=f"wrap{d}") for d in range(DIMS)]
        m.d.comb += wraps[inner].eq(count[inner] + elems == cfg.num[inner])
        for d in range(DIMS - 2, -1, -1):
            m.d.comb += wraps[d].eq(wraps[d + 1] & (count[d] + 1 == cfg.num[d]))

        m.d.comb += [
            self.run.valid.eq(busy),
            self.run.payload.partition.eq(part),
            self.run.payload.addr.eq(addr),
            self.run.payload.bytes.eq(nbytes),
            self.run.payload.last.eq(wraps[0]),
            self.run.payload.span.eq(Mux(contiguous, left, nbytes)),
        ]
        with m.If(self.run.valid & self.run.ready):
            with m.If(~wraps[inner]):
                m.d.sync += [
                    count[inner].eq(count[inner] + elems),
                    part.eq(
                        Mux(inner_lead, cfg.partition + self.lead_part, part + cfg.pstep[inner])
                    ),
                    cur.eq(
                        Mux(
                            inner_lead,
                            cfg.offset + self.lead_index,
                            cur + Mux(contiguous, elems, cfg.step[inner]),
                        )
                    ),
                ]
            with m.Elif(wraps[0]):
                m.d.sync += busy.eq(0)
            with m.Else():
                # The innermost level that does not wrap advances; the levels inside it restart
                # at its new start and partition.
                for d in range(DIMS - 1):
                    with m.If(wraps[d + 1] & ~wraps[d]):
                        lead = cfg.vector & (equals(cfg.vlevel, d))
                        new = Mux(lead, cfg.offset + self.lead_index, start[d] + cfg.step[d])
                        newp = Mux(lead, cfg.partition + self.lead_part, pstart[d] + cfg.pstep[d])
                        m.d.sync += [count[d].eq(count[d] + 1), cur.eq(new), part.eq(newp)]
                        m.d.sync += [start[e].eq(new) for e in range(d, DIMS)]
                        m.d.sync += [pstart[e].eq(newp) for e in range(d, DIMS)]
                        m.d.sync += [count[e].eq(0) for e in range(d + 1, DIMS)]
        return m
