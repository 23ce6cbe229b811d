"""``DmaEngine``: one DMA engine between the SBUF and the device memory."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.axi import BURST_INCR, AxiManager
from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.hdl.sbuf.memory import dma_request_layout
from ncrtl.model.dma.isa import Error, Op, Space
from ncrtl.model.dma.timing import check_burst
from ncrtl.model.sbuf.memory import Access

from .agu import AddressGenerator
from .check import DescriptorCheck, Widths, descriptor_layout, lead_level, lead_num
from .gearbox import ByteQueue
from .tile import TileTranspose

__all__ = ["DmaEngine", "status_layout"]


def status_layout():
    """A descriptor's completion: ``tag`` (the descriptor's), ``error`` (an
    :class:`ncrtl.model.dma.isa.Error` code, 0 when done)."""
    return data.StructLayout({"tag": 8, "error": 4})


def burst_beats(m, run, word_bytes, burst, name):
    """The beats of a burst that begins with ``run`` (an address generator's run):
    :func:`ncrtl.model.dma.timing.burst_beats` combinationally, from its word to the end of its
    span, at most to the next ``burst``-word boundary."""
    wb = (word_bytes - 1).bit_length()
    bb = (burst - 1).bit_length()
    words = Signal(len(run.span) + 1, name=f"{name}_span_words")
    m.d.comb += words.eq((run.addr[:wb] + run.span + (word_bytes - 1)) >> wb)
    room = Signal(bb + 1, name=f"{name}_room")
    m.d.comb += room.eq(burst - (run.addr[wb : wb + bb] if bb else 0))
    beats = Signal(bb + 1, name=f"{name}_beats")
    m.d.comb += beats.eq(Mux(words < room, words, room))
    return beats


class DmaEngine(wiring.Component):
    """A DMA engine: descriptors in, completions out; the device memory behind an AXI4
    manager port, the SBUF behind its DMA port (:class:`ncrtl.hdl.sbuf.memory.Sbuf`).

    A descriptor (:func:`ncrtl.model.dma.isa.encode`) is taken when the engine is idle and
    checked (:class:`~ncrtl.hdl.dma.check.DescriptorCheck`); a broken rule completes it with
    the rule's code at once, before any access.  Otherwise, after ``overhead`` cycles (the
    fixed per-transfer cost), two :class:`~ncrtl.hdl.dma.agu.AddressGenerator` walk the source
    and the destination patterns.  The **reader** reads the source runs (an SBUF word read
    per run; from the device memory an AXI4 ``INCR`` burst per run of consecutive words: from
    a run's word to the end of its contiguous span, at most ``burst`` beats, never across a
    ``burst``-word boundary, :func:`burst_beats`), at most ``outstanding`` reads in flight,
    and pushes each run's bytes into a :class:`~ncrtl.hdl.dma.gearbox.ByteQueue` in order; the
    **writer** takes each destination run's bytes from the queue once they are all there,
    shifts them to the run's place in its word and writes it with byte strobes (an SBUF word
    write, or a data beat of an AXI4 write burst sized as a read's: the burst's first run sends
    its address with its beat, one response per burst).
    The descriptor completes when its last write is done and every AXI4 write response is in;
    a response other than OKAY does not stop it (the memory model never gives one).  SBUF
    reads and writes of one descriptor share the SBUF's DMA port, writes first.

    A TRANSPOSE whose source view ``[A, B]`` has both sides multiples of ``E = word_bytes /
    element bytes`` is tiled: the source walks ``E x E`` tiles row by row, the destination the
    same tiles column by column, and a :class:`~ncrtl.hdl.dma.tile.TileTranspose` between the
    byte queue and a second one reorders them, a word per cycle.  Any other TRANSPOSE reads its
    source view column by column (the source generator walks the view transposed), so the byte
    stream arrives in the destination's order and the rest is a copy, one element per read.  An
    ADD (SBUF read-add-write) writes each
    destination run as a read-add-write request to the SBUF, whose near-memory unit reads the
    word, adds and writes the sum: to the engine an ADD is a copy.

    Parameters
    ----------
    word_bytes : int
        Data path and AXI4 data width in bytes (4 to 64, a power of two).
    widths : Widths
    partitions, partition_bytes : int
        The SBUF.
    hbm_bytes : int
        The device memory's size (the descriptor checks use it).
    overhead : int
        Cycles between a legal descriptor's check and its first access.
    outstanding : int
        Reads in flight (a device-memory burst or an SBUF word each).
    burst : int
        The most beats of an AXI4 burst (a power of two, at most 4 KiB:
        :func:`ncrtl.model.dma.timing.check_burst`).

    Interface
    ---------
    desc : In(stream.Signature(descriptor_layout(widths)))
    status : Out(stream.Signature(status_layout()))
    axi : Out(AxiManager(word_bytes, widths.addr_bits))
    sbuf_req : Out(stream.Signature(dma_request_layout(...)))
    sbuf_resp : In(stream.Signature(8 * word_bytes))
    """

    @validated_init
    def __init__(
        self,
        word_bytes=16,
        *,
        widths=None,
        partitions=128,
        partition_bytes=192 * 1024,
        hbm_bytes=1 << 30,
        overhead=0,
        outstanding=8,
        burst=16,
    ):
        self.word_bytes = check_int(word_bytes, "DmaEngine word_bytes", minimum=4, maximum=64)
        if word_bytes & (word_bytes - 1):
            raise ValueError(f"DmaEngine word_bytes must be a power of two, not {word_bytes}")
        self.wd = widths if widths is not None else Widths()
        self.partitions = check_int(partitions, "DmaEngine partitions", minimum=1, maximum=128)
        self.partition_bytes = check_int(partition_bytes, "DmaEngine partition_bytes", minimum=4)
        self.hbm_bytes = check_int(hbm_bytes, "DmaEngine hbm_bytes", minimum=4)
        self.overhead = check_int(overhead, "DmaEngine overhead", minimum=0, maximum=1 << 16)
        self.outstanding = check_int(outstanding, "DmaEngine outstanding", minimum=1, maximum=64)
        self.burst = check_burst(burst, word_bytes, "DmaEngine")
        words = partition_bytes // word_bytes
        super().__init__(
            {
                "desc": In(stream.Signature(descriptor_layout(self.wd))),
                "status": Out(stream.Signature(status_layout())),
                "axi": Out(AxiManager(word_bytes, self.wd.addr_bits)),
                "sbuf_req": Out(
                    stream.Signature(dma_request_layout(partitions, words, word_bytes))
                ),
                "sbuf_resp": In(stream.Signature(8 * word_bytes)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.word_bytes
        wb = (w - 1).bit_length()
        wd = self.wd
        m.submodules.check = check = DescriptorCheck(
            wd,
            partitions=self.partitions,
            partition_bytes=self.partition_bytes,
            hbm_bytes=self.hbm_bytes,
        )
        agu_args = dict(addr_bits=wd.addr_bits, count_bits=wd.count_bits, part_bits=wd.part_bits)
        m.submodules.src_agu = src_agu = AddressGenerator(w, **agu_args)
        m.submodules.dst_agu = dst_agu = AddressGenerator(w, **agu_args)
        m.submodules.queue = queue = ByteQueue(w)
        m.submodules.tile = tile = TileTranspose(w)
        m.submodules.tile_queue = tile_queue = ByteQueue(w)
        # The beats in flight (offset, bytes, the read's last beat): an unbuffered FIFO, readable
        # the cycle after the run is taken, when an SBUF read's response arrives.
        m.submodules.inflight = inflight = SyncFIFO(
            width=wb + (w).bit_length() + 1, depth=self.outstanding * self.burst
        )

        d = Signal.like(self.desc.payload)
        src_hbm = d.src.space == Space.HBM
        dst_hbm = d.dst.space == Space.HBM

        # -- dynamic offsets ------------------------------------------------------------------
        # A side's vector offsets, as the address generator adds them at its leading level:
        # element index (device memory: value x row) or partition (SBUF: the value), one entry
        # per iteration, written while the values are read and read combinationally by the
        # generator.
        tables = []
        for k, (side, agu) in enumerate(((d.src, src_agu), (d.dst, dst_agu))):
            table = Memory(shape=signed(wd.index_bits), depth=1 << wd.part_bits, init=[])
            m.submodules[("src", "dst")[k] + "_lead"] = table
            rd = table.read_port(domain="comb")
            m.d.comb += [
                rd.addr.eq(agu.lead_at),
                agu.lead_index.eq(Mux(side.space == Space.HBM, rd.data, 0)),
                agu.lead_part.eq(Mux(side.space == Space.SBUF, rd.data[: wd.part_bits], 0)),
                agu.cmd.payload.vector.eq(side.ind == 2),
                agu.cmd.payload.vlevel.eq(lead_level(side)),
            ]
            tables.append(table.write_port())
        # The check sees a vector side as the static side over the same box
        # (``ncrtl.model.dma.isa.static_side``) once its values are read: the smallest entry
        # added to its start (SBUF) or offset (device memory), the leading entry spanning the
        # entries' range (``[span, 2]`` in the device memory, where the entries are indices).
        cd = Signal.like(d)
        vfix = [Signal(name=f"vfix_{n}") for n in ("src", "dst")]
        vmin = [Signal(signed(wd.index_bits), name=f"vmin_{n}") for n in ("src", "dst")]
        vmax = [Signal(signed(wd.index_bits), name=f"vmax_{n}") for n in ("src", "dst")]
        m.d.comb += cd.eq(d)
        for k, (side, fixed) in enumerate(((d.src, cd.src), (d.dst, cd.dst))):
            with m.If(vfix[k]):
                with m.If(side.space == Space.SBUF):
                    m.d.comb += [
                        fixed.start.eq(side.start + vmin[k]),
                        fixed.num[0].eq(vmax[k] - vmin[k] + 1),
                    ]
                with m.Else():
                    level = lead_level(side)
                    m.d.comb += fixed.offset.eq(side.offset + vmin[k])
                    for i in range(5):
                        with m.If(equals(level, i)):
                            m.d.comb += [
                                fixed.num[i].eq(2),
                                fixed.step[i].eq(vmax[k] - vmin[k]),
                            ]
        m.d.comb += check.desc.eq(cd)

        # -- control ----------------------------------------------------------------------
        error = Signal(4)
        wait = Signal(range(max(self.overhead, 1) + 1))
        outstanding_b = Signal(range(1 << 16))
        written = Signal()  # the destination's last run is written
        for side, agu in ((d.src, src_agu), (d.dst, dst_agu)):
            sbuf = side.space == Space.SBUF
            m.d.comb += [
                agu.cmd.payload.base.eq(side.base),
                agu.cmd.payload.offset.eq(side.offset),
                agu.cmd.payload.partition.eq(Mux(sbuf, side.partition + side.start, 0)),
                agu.cmd.payload.esize.eq(side.esize),
                # The SBUF's level 0 steps partitions.
                agu.cmd.payload.step[0].eq(Mux(sbuf, 0, side.step[0])),
            ]
            for i in range(5):
                m.d.comb += agu.cmd.payload.num[i].eq(side.num[i])
                if i:
                    m.d.comb += agu.cmd.payload.step[i].eq(side.step[i])
        # A transpose of a source view [A, B] (levels 3 and 4 in the device memory, 0 and 4 in
        # the SBUF; the destination [B, A] is in the SBUF, levels 0 and 4).
        sc, dc, s, t = src_agu.cmd.payload, dst_agu.cmd.payload, d.src, d.dst
        s_sbuf = s.space == Space.SBUF
        a_num = Mux(s_sbuf, s.num[0], s.num[3])
        b_num, b_step = s.num[4], s.step[4]
        # Tiled when A and B are multiples of E = word_bytes / element bytes: both sides walk
        # E x E tiles, the source row by row, the destination column by column, and the tile
        # buffer turns one order into the other, a word per cycle on both sides.
        log_e = Signal(range(wb + 1))
        m.d.comb += log_e.eq(wb - s.esize)
        e_mask = Signal(wd.count_bits)
        m.d.comb += e_mask.eq((1 << log_e) - 1)
        tiled = Signal()
        m.d.comb += tiled.eq(
            (d.op == Op.TRANSPOSE) & ~(a_num & e_mask).any() & ~(b_num & e_mask).any()
        )
        transpose = d.op == Op.TRANSPOSE
        # The levels that step partitions (one Cat per side: a constant-only field assignment
        # is an empty ``always @*`` in the Verilog).
        e = Signal(wd.part_bits)
        m.d.comb += e.eq(1 << log_e)
        zero = Const(0, wd.part_bits)
        m.d.comb += [
            sc.pstep.eq(
                Cat(
                    Mux(s_sbuf & ~transpose, 1, zero),
                    zero,
                    Mux(tiled & s_sbuf, e, zero),
                    Mux(tiled & s_sbuf, 1, zero),
                    Mux(~tiled & transpose & s_sbuf, 1, zero),
                )
            ),
            dc.pstep.eq(
                Cat(
                    Mux((t.space == Space.SBUF) & ~tiled, 1, zero),
                    Mux(tiled, e, zero),
                    zero,
                    Mux(tiled, 1, zero),
                    zero,
                )
            ),
        ]
        with m.If(tiled):
            m.d.comb += [
                # source: [col tile: E b_step][row tile][row: E][col: E]
                sc.step[0].eq(0),
                sc.num[0].eq(1),
                sc.step[1].eq(b_step << log_e),
                sc.num[1].eq(b_num >> log_e),
                sc.step[2].eq(Mux(s_sbuf, 0, s.step[3] << log_e)),
                sc.num[2].eq(a_num >> log_e),
                sc.step[3].eq(Mux(s_sbuf, 0, s.step[3])),
                sc.num[3].eq(e),
                sc.step[4].eq(b_step),
                sc.num[4].eq(e),
                # destination: [row tile: E partitions][col tile][row: E partitions][col: E]
                dc.num[0].eq(1),
                dc.step[1].eq(0),
                dc.num[1].eq(b_num >> log_e),
                dc.step[2].eq(t.step[4] << log_e),
                dc.num[2].eq(a_num >> log_e),
                dc.step[3].eq(0),
                dc.num[3].eq(e),
                dc.step[4].eq(t.step[4]),
                dc.num[4].eq(e),
            ]
        with m.Elif(d.op == Op.TRANSPOSE):
            # Otherwise the source view is read column by column, one element per read, so the
            # byte stream is already in the destination's order.
            with m.If(~s_sbuf):
                m.d.comb += [
                    sc.step[3].eq(s.step[4]),
                    sc.num[3].eq(s.num[4]),
                    sc.step[4].eq(s.step[3]),
                    sc.num[4].eq(s.num[3]),
                ]
            with m.Else():
                m.d.comb += [
                    sc.num[0].eq(1),
                    sc.step[3].eq(s.step[4]),
                    sc.num[3].eq(s.num[4]),
                    sc.step[4].eq(0),
                    sc.num[4].eq(s.num[0]),
                ]
        src_taken = Signal()
        dst_taken = Signal()
        # States as an If/Elif chain (an FSM's Verilog is one incomplete case per signal).
        IDLE, CHECK, WAIT, START, RUN, STATUS, SIDE, FETCH, SCALE, DIVIDE, VFIX, BOUND, OVER = (
            range(13)
        )
        state = Signal(range(13))
        # The side whose dynamic offset is being read (0 source, 1 destination) and its values.
        fside = Signal()
        fsd = Signal.like(d.src)
        m.d.comb += fsd.eq(Mux(fside, d.dst, d.src))
        f_sbuf = fsd.space == Space.SBUF
        f_vector = fsd.ind == 2
        f_count = Signal(wd.part_bits + 1)  # values to read
        issued = Signal(wd.part_bits + 1)
        got = Signal(wd.part_bits + 1)
        vbad = Signal()
        tval = Signal(signed(wd.index_bits + 36))  # offset + value x stride, exact
        rem = Signal(wd.index_bits)  # the divider's remainder and shifted divisor
        dsor = Signal(wd.index_bits + wd.part_bits)
        quot = Signal(wd.part_bits)
        dsteps = Signal(range(wd.part_bits + 1))
        dynamic = (d.src.ind != 0) | (d.dst.ind != 0)

        def set_side(field, value):
            """Write a field of the side being fetched."""
            with m.If(fside):
                m.d.sync += getattr(d.dst, field).eq(value)
            with m.Else():
                m.d.sync += getattr(d.src, field).eq(value)

        with m.If(~state.any()):  # IDLE (== 0 written as ~any(): lint-clean Verilog)
            m.d.comb += self.desc.ready.eq(1)
            with m.If(self.desc.valid):
                m.d.sync += [d.eq(self.desc.payload), state.eq(CHECK)]
                m.d.sync += [v.eq(0) for v in vfix]
        with m.Elif(state == CHECK):
            m.d.sync += [wait.eq(self.overhead), written.eq(0)]
            m.d.sync += [src_taken.eq(0), dst_taken.eq(0), fside.eq(0)]
            with m.If(~dynamic):
                err = check.error
                m.d.sync += [error.eq(err), state.eq(Mux(err.any(), STATUS, WAIT))]
            with m.Else():
                # The static rules first; then each side's dynamic offset is read and its
                # bounds checked, the source's before the destination's, as the golden orders.
                err = check.static_error
                m.d.sync += [error.eq(err), state.eq(Mux(err.any(), STATUS, SIDE))]
        with m.Elif(state == SIDE):
            with m.If(~fsd.ind.any()):
                with m.If(Mux(fside, check.dst_bounds, check.src_bounds)):
                    m.d.sync += [error.eq(Error.BOUNDS), state.eq(STATUS)]
                with m.Elif(fside):
                    m.d.sync += state.eq(OVER)
                with m.Else():
                    m.d.sync += fside.eq(1)
            with m.Else():
                m.d.sync += [
                    f_count.eq(Mux(f_vector, lead_num(fsd), 1)),
                    issued.eq(0),
                    got.eq(0),
                    vbad.eq(0),
                    state.eq(FETCH),
                ]
        with m.Elif(state == FETCH):
            # Read the int32 values, one SBUF word read per value (a vector's value i is in
            # partition ipart + i), all at the same byte.
            with m.If(issued < f_count):
                m.d.comb += [
                    self.sbuf_req.valid.eq(1),
                    self.sbuf_req.payload.partition.eq(fsd.ipart + issued),
                    self.sbuf_req.payload.word.eq(fsd.ibyte >> wb),
                    self.sbuf_req.payload.access.eq(Access.READ),
                ]
                with m.If(self.sbuf_req.ready):
                    m.d.sync += issued.eq(issued + 1)
            value = Signal(signed(32))
            m.d.comb += value.eq((self.sbuf_resp.payload >> (fsd.ibyte[:wb] << 3))[:32])
            entry = Signal(signed(wd.index_bits))
            m.d.comb += entry.eq(Mux(f_sbuf, value, value * fsd.row))
            with m.If(self.sbuf_resp.valid):
                m.d.sync += got.eq(got + 1)
                with m.If(~f_vector):
                    m.d.sync += [tval.eq(fsd.offset + value * fsd.istride), state.eq(SCALE)]
                with m.Else():
                    m.d.comb += [
                        tables[0].addr.eq(got),
                        tables[1].addr.eq(got),
                        tables[0].data.eq(entry),
                        tables[1].data.eq(entry),
                        tables[0].en.eq(~fside),
                        tables[1].en.eq(fside),
                    ]
                    m.d.sync += vbad.eq(vbad | (value < 0) | (value >= fsd.rows))
                    for k in range(2):
                        with m.If(fside == k):
                            with m.If(~got.any() | (entry < vmin[k])):
                                m.d.sync += vmin[k].eq(entry)
                            with m.If(~got.any() | (entry > vmax[k])):
                                m.d.sync += vmax[k].eq(entry)
                    with m.If(got + 1 == f_count):
                        m.d.sync += state.eq(VFIX)
        with m.Elif(state == SCALE):
            # A scalar offset: its first element must lie in the tensor; in the SBUF the
            # element index is then split into partition and offset in the row.
            with m.If((tval < 0) | (tval >= fsd.extent)):
                m.d.sync += [error.eq(Error.INDIRECT), state.eq(STATUS)]
            with m.Elif(f_sbuf):
                m.d.sync += [
                    rem.eq(tval),
                    dsor.eq(fsd.row << (wd.part_bits - 1)),
                    quot.eq(0),
                    dsteps.eq(wd.part_bits),
                    state.eq(DIVIDE),
                ]
            with m.Else():
                set_side("offset", tval)
                m.d.sync += state.eq(BOUND)
        with m.Elif(state == DIVIDE):
            # Restoring division, a quotient bit per cycle: the quotient is a row of the
            # tensor, so it has part_bits bits.
            with m.If(~dsteps.any()):
                set_side("start", quot)
                set_side("offset", rem)
                m.d.sync += state.eq(BOUND)
            with m.Else():
                fits = rem >= dsor
                m.d.sync += [
                    rem.eq(Mux(fits, rem - dsor, rem)),
                    quot.eq(Cat(fits, quot)),
                    dsor.eq(dsor >> 1),
                    dsteps.eq(dsteps - 1),
                ]
        with m.Elif(state == VFIX):
            with m.If(vbad):
                m.d.sync += [error.eq(Error.INDIRECT), state.eq(STATUS)]
            with m.Else():
                for k in range(2):
                    with m.If(fside == k):
                        m.d.sync += vfix[k].eq(1)
                m.d.sync += state.eq(BOUND)
        with m.Elif(state == BOUND):
            with m.If(Mux(fside, check.dst_bounds, check.src_bounds)):
                m.d.sync += [error.eq(Error.INDIRECT), state.eq(STATUS)]
            with m.Elif(fside):
                m.d.sync += state.eq(OVER)
            with m.Else():
                m.d.sync += [fside.eq(1), state.eq(SIDE)]
        with m.Elif(state == OVER):
            with m.If(check.overlap):
                m.d.sync += [error.eq(Error.OVERLAP), state.eq(STATUS)]
            with m.Else():
                m.d.sync += state.eq(WAIT)
        with m.Elif(state == WAIT):
            with m.If(~wait.any()):
                m.d.sync += state.eq(START)
            with m.Else():
                m.d.sync += wait.eq(wait - 1)
        with m.Elif(state == START):
            m.d.comb += [src_agu.cmd.valid.eq(~src_taken), dst_agu.cmd.valid.eq(~dst_taken)]
            with m.If(src_agu.cmd.ready):
                m.d.sync += src_taken.eq(1)
            with m.If(dst_agu.cmd.ready):
                m.d.sync += dst_taken.eq(1)
            with m.If((src_taken | src_agu.cmd.ready) & (dst_taken | dst_agu.cmd.ready)):
                m.d.sync += state.eq(RUN)
        with m.Elif(state == RUN):
            with m.If(written & ~outstanding_b.any()):
                m.d.sync += state.eq(STATUS)
        with m.Elif(state == STATUS):
            m.d.comb += [
                self.status.valid.eq(1),
                self.status.payload.tag.eq(d.tag),
                self.status.payload.error.eq(error),
            ]
            with m.If(self.status.ready):
                m.d.sync += state.eq(IDLE)

        # -- reader: a read per source run, or a burst of them ----------------------------
        # A read of the device memory is an AXI4 INCR burst of the source's consecutive words:
        # from a run's word to the end of the contiguous elements it begins (its ``span``), at
        # most ``burst`` beats, never across a ``burst``-word boundary (so never across 4 KiB).
        # The burst's first run issues the address; its other runs follow a run per cycle, each
        # with its own entry in ``inflight``.  An SBUF read is one word.  Every read holds one of
        # ``outstanding`` slots from its issue until its last beat's bytes are in the byte queue,
        # and a slot in ``rbuf`` per beat, so a read response is always taken at once: the
        # SBUF's responses (the reader's and the writer's, in order) never wait behind each
        # other, and the AXI4 R channel is never held up.
        sr = src_agu.run.payload
        writer_sbuf = Signal()  # the writer uses the SBUF port this cycle
        issue = Signal()  # a read's address (or SBUF request) is taken
        follow = Signal()  # a run of the burst in flight is taken
        beats_left = Signal(range(self.burst))  # runs of the burst still to take
        held = Signal(range(self.outstanding + 1))  # reads whose last beat is not yet queued
        beats = burst_beats(m, sr, w, self.burst, "read")
        first = ~beats_left.any()
        m.d.comb += [
            inflight.w_data.eq(
                Cat(sr.addr[:wb], sr.bytes, Mux(first, (beats == 1) | ~src_hbm, beats_left == 1))
            ),
            self.axi.ar.payload.addr.eq(Cat(Const(0, wb), sr.addr[wb:])),
            self.axi.ar.payload.len.eq(beats - 1),
            self.axi.ar.payload.size.eq(wb),
            self.axi.ar.payload.burst.eq(BURST_INCR),
        ]
        can = src_agu.run.valid & first & (held < self.outstanding)
        with m.If(~first):
            m.d.comb += follow.eq(src_agu.run.valid)  # always: the span's runs come a cycle each
            with m.If(follow):
                m.d.sync += beats_left.eq(beats_left - 1)
        with m.Elif(src_hbm):
            m.d.comb += [self.axi.ar.valid.eq(can), issue.eq(can & self.axi.ar.ready)]
            with m.If(issue):
                m.d.sync += beats_left.eq(beats - 1)
        with m.Else():
            with m.If(can & ~writer_sbuf):
                m.d.comb += [
                    self.sbuf_req.valid.eq(1),
                    self.sbuf_req.payload.partition.eq(sr.partition),
                    self.sbuf_req.payload.word.eq(sr.addr >> wb),
                    self.sbuf_req.payload.access.eq(Access.READ),
                    issue.eq(self.sbuf_req.ready),
                ]
        m.d.comb += [src_agu.run.ready.eq(issue | follow), inflight.w_en.eq(issue | follow)]

        m.submodules.rbuf = rbuf = SyncFIFOBuffered(
            width=8 * w + (w).bit_length() + 1, depth=self.outstanding * self.burst
        )
        off = inflight.r_data[:wb]
        nbytes = inflight.r_data[wb : wb + (w).bit_length()]
        end = inflight.r_data[-1]  # the read's last beat
        r_fire = Signal()
        m.d.comb += [
            self.axi.r.ready.eq(src_hbm & inflight.r_rdy),
            r_fire.eq(
                Mux(
                    src_hbm,
                    self.axi.r.valid & inflight.r_rdy,
                    self.sbuf_resp.valid & inflight.r_rdy,
                )
            ),
            rbuf.w_en.eq(r_fire),
            rbuf.w_data.eq(
                Cat(
                    Mux(src_hbm, self.axi.r.payload.data, self.sbuf_resp.payload) >> (off << 3),
                    nbytes,
                    end,
                )
            ),
            inflight.r_en.eq(r_fire),
            queue.push.valid.eq(rbuf.r_rdy),
            queue.push.payload.data.eq(rbuf.r_data[: 8 * w]),
            queue.push.payload.bytes.eq(rbuf.r_data[8 * w : -1]),
            rbuf.r_en.eq(queue.push.ready),
        ]
        done = rbuf.r_rdy & queue.push.ready & rbuf.r_data[-1]
        with m.If(issue & ~done):
            m.d.sync += held.eq(held + 1)
        with m.Elif(done & ~issue):
            m.d.sync += held.eq(held - 1)

        # -- tiled transpose: the queue's words through the tile buffer -----------------------
        m.d.comb += [
            tile.i_esize.eq(d.src.esize),
            tile.rows.valid.eq(tiled & (queue.count >= w)),
            tile.rows.payload.eq(queue.head),
            tile_queue.push.valid.eq(tile.cols.valid),
            tile_queue.push.payload.data.eq(tile.cols.payload),
            tile_queue.push.payload.bytes.eq(w),
            tile.cols.ready.eq(tile_queue.push.ready),
        ]

        # -- writer: a destination run once its bytes are all in the queue ----------------------
        head = Mux(tiled, tile_queue.head, queue.head)
        count = Mux(tiled, tile_queue.count, queue.count)
        dr = dst_agu.run.payload
        doff = dr.addr[:wb]
        wdata = Signal(8 * w)
        strobe = Signal(w)
        m.d.comb += [
            wdata.eq(head << (doff << 3)),
            strobe.eq(((Const(1, w + 1) << dr.bytes) - 1) << doff),
        ]
        have = dst_agu.run.valid & (count >= dr.bytes)
        # A write to the device memory is a burst too, sized as a read: its first run sends the
        # address with its data beat, its other runs their data beats as their bytes arrive.
        wbeats = burst_beats(m, dr, w, self.burst, "write")
        wleft = Signal(range(self.burst))  # data beats of the burst still to send
        wfirst = ~wleft.any()
        wlast = Mux(wfirst, wbeats == 1, wleft == 1)
        aw_done = Signal()
        w_done = Signal()
        complete = Signal()
        m.d.comb += [
            self.axi.aw.payload.addr.eq(Cat(Const(0, wb), dr.addr[wb:])),
            self.axi.aw.payload.len.eq(wbeats - 1),
            self.axi.aw.payload.size.eq(wb),
            self.axi.aw.payload.burst.eq(BURST_INCR),
            self.axi.w.payload.data.eq(wdata),
            self.axi.w.payload.strb.eq(strobe),
            self.axi.w.payload.last.eq(wlast),
        ]
        # Read-add-write: the SBUF's near-memory unit reads, adds and writes the word; to the
        # engine it is a write of the run's bytes.
        is_add = d.op == Op.ADD
        access = Mux(is_add, Access.ADD, Access.WRITE)

        sbuf_write = [
            writer_sbuf.eq(1),
            self.sbuf_req.valid.eq(1),
            self.sbuf_req.payload.partition.eq(dr.partition),
            self.sbuf_req.payload.word.eq(dr.addr >> wb),
            self.sbuf_req.payload.access.eq(access),
            self.sbuf_req.payload.dtype.eq(d.add_dtype),
            self.sbuf_req.payload.data.eq(wdata),
            self.sbuf_req.payload.strobe.eq(strobe),
        ]

        with m.If(dst_hbm):
            m.d.comb += [
                self.axi.aw.valid.eq(have & wfirst & ~aw_done),
                self.axi.w.valid.eq(have & ~w_done),
                complete.eq(
                    have & (aw_done | ~wfirst | self.axi.aw.ready) & (w_done | self.axi.w.ready)
                ),
            ]
            with m.If(complete):
                m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                m.d.sync += wleft.eq(Mux(wfirst, wbeats - 1, wleft - 1))
            with m.Else():
                with m.If(self.axi.aw.valid & self.axi.aw.ready):
                    m.d.sync += aw_done.eq(1)
                with m.If(self.axi.w.valid & self.axi.w.ready):
                    m.d.sync += w_done.eq(1)
        with m.Else():
            with m.If(have):
                m.d.comb += sbuf_write
                m.d.comb += complete.eq(self.sbuf_req.ready)
        m.d.comb += [
            self.sbuf_resp.ready.eq((~src_hbm & inflight.r_rdy) | (state == FETCH)),
            dst_agu.run.ready.eq(complete),
            queue.take.eq(
                Mux(tiled, Mux(tile.rows.valid & tile.rows.ready, w, 0), Mux(complete, dr.bytes, 0))
            ),
            tile_queue.take.eq(Mux(tiled & complete, dr.bytes, 0)),
        ]
        with m.If(complete & dr.last):
            m.d.sync += written.eq(1)

        # AXI4 write responses, one per burst: every one counted before the descriptor completes.
        m.d.comb += self.axi.b.ready.eq(1)
        inc = complete & dst_hbm & wlast
        dec = self.axi.b.valid
        with m.If(inc & ~dec):
            m.d.sync += outstanding_b.eq(outstanding_b + 1)
        with m.Elif(dec & ~inc):
            m.d.sync += outstanding_b.eq(outstanding_b - 1)
        return m
