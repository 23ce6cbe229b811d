"""``Dge``: the Descriptor Generation Engine, one DMA instruction turned into the descriptors of
the core's engines in hardware."""

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.model.dma.agu import DIMS
from ncrtl.model.dma.dge import DGE_CYCLES, ENGINES
from ncrtl.model.dma.isa import Error, Op, Space

from .check import DescriptorCheck, Widths, descriptor_layout, lead_level

__all__ = ["Dge", "part_layout", "dge_status_layout"]


def part_layout(widths, engines):
    """One descriptor the DGE makes: ``engine`` (the engine it is for) and ``desc``."""
    return data.StructLayout({"engine": range(max(engines, 2)), "desc": descriptor_layout(widths)})


def dge_status_layout(engines):
    """An instruction's completion: ``tag``, ``error`` (an :class:`ncrtl.model.dma.isa.Error`
    code, 0 when its descriptors went out) and ``parts`` (how many: the semaphore increment a
    consumer waits for)."""
    return data.StructLayout({"tag": 8, "error": 4, "parts": range(engines + 1)})


class Dge(wiring.Component):
    """One instruction in, its engines' descriptors out: :mod:`ncrtl.model.dma.dge` cycle for
    cycle.

    The instruction's rules are those of :class:`~ncrtl.hdl.dma.check.DescriptorCheck`, tested
    on the registered instruction before any descriptor leaves; a dynamic offset is refused
    first (``DGE_INDIRECT``).  A legal instruction is cut along one pattern entry per side
    (:func:`ncrtl.model.dma.dge.split`): the outermost of a copy or read-add-write when both
    sides' counts agree (and a device-memory destination's rows are apart), the destination's
    partition entry and the source's inner entry of a transpose; otherwise it leaves whole.
    The cut needs no divider (``engines`` is a power of two: ``n >> log2 engines`` entries
    each, the first ``n & (engines - 1)`` parts one more) and one multiplier per side, run once
    per instruction: each part's offset is the previous one's plus ``count x step``, with
    ``count x step`` one of ``q x step`` and ``q x step + step``.  An SBUF side cut along its
    partition entry moves its ``start`` (first row) instead, its step being the row.

    Parameters
    ----------
    widths : Widths
    engines : int
        DMA engines of the core, a power of two (16).
    cycles : int
        Cycles from an instruction's acceptance to its first descriptor (at least 2;
        :data:`ncrtl.model.dma.dge.DGE_CYCLES`).
    partitions, partition_bytes, hbm_bytes : int
        The memories the rules check against.

    Interface
    ---------
    instr : In(stream.Signature(descriptor_layout(widths)))
        Instructions: a descriptor over the whole transfer.
    part : Out(stream.Signature(part_layout(widths, engines)))
        Descriptors, part ``k`` of an instruction for engine ``k``, in order; a part not taken
        holds the ones after it.
    status : Out(stream.Signature(dge_status_layout(engines)))
        One per instruction, after its last part was taken (or without parts, on an error).
    """

    @validated_init
    def __init__(
        self,
        widths,
        *,
        engines=ENGINES,
        cycles=DGE_CYCLES,
        partitions=128,
        partition_bytes=192 * 1024,
        hbm_bytes=1 << 30,
    ):
        if not isinstance(widths, Widths):
            raise TypeError(f"Dge widths must be a Widths, not {widths!r}")
        self.wd = widths
        self.engines = check_int(engines, "Dge engines", minimum=1, maximum=128)
        if engines & (engines - 1):
            raise ValueError(f"Dge engines must be a power of two, not {engines}")
        self.cycles = check_int(cycles, "Dge cycles", minimum=2, maximum=1 << 16)
        self.partitions, self.partition_bytes, self.hbm_bytes = (
            partitions,
            partition_bytes,
            hbm_bytes,
        )
        super().__init__(
            {
                "instr": In(stream.Signature(descriptor_layout(widths))),
                "part": Out(stream.Signature(part_layout(widths, engines))),
                "status": Out(stream.Signature(dge_status_layout(engines))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        wd, E = self.wd, self.engines
        log2e = E.bit_length() - 1
        m.submodules.check = check = DescriptorCheck(
            wd,
            partitions=self.partitions,
            partition_bytes=self.partition_bytes,
            hbm_bytes=self.hbm_bytes,
        )
        desc = Signal(descriptor_layout(wd))
        m.d.comb += check.desc.eq(desc)
        src, dst = desc.src, desc.dst
        wide = signed(wd.index_bits + wd.count_bits + 2)

        def at(array, level):
            out = array[0]
            for d in range(1, DIMS):
                out = Mux(equals(level, d), array[d], out)
            return out

        # -- the cut, from the registered instruction (valid in the check cycle) ---------------
        transpose = equals(desc.op, Op.TRANSPOSE)
        s_lead, d_lead = lead_level(src), lead_level(dst)
        s_level = Signal(range(DIMS))
        d_level = Signal(range(DIMS))
        m.d.comb += [
            s_level.eq(Mux(transpose, DIMS - 1, s_lead)),
            d_level.eq(Mux(transpose, 0, d_lead)),
        ]
        d_step_lead = at(dst.step, d_lead)
        span = 0
        for d in range(DIMS):
            t = Signal(wide, name=f"span{d}")
            m.d.comb += t.eq(Mux(dst.step[d] < 0, -dst.step[d], dst.step[d]) * (dst.num[d] - 1))
            span = span + Mux(equals(d_lead, d), 0, t)
        apart = Signal()
        m.d.comb += apart.eq(
            equals(dst.space, Space.SBUF) | (Mux(d_step_lead < 0, -d_step_lead, d_step_lead) > span)
        )
        s_num, d_num = at(src.num, s_level), at(dst.num, d_level)
        cuttable = Signal()
        m.d.comb += cuttable.eq(transpose | ((s_num == d_num) & apart))

        error = Signal(4)
        dynamic = equals(src.ind, 1) | equals(src.ind, 2) | equals(dst.ind, 1) | equals(dst.ind, 2)
        m.d.comb += error.eq(Mux(dynamic, Error.DGE_INDIRECT, check.error))

        # per instruction: the parts, entries per part, the per-side steps
        whole = Signal()
        parts = Signal(range(E + 1))
        q = Signal(wd.count_bits)
        r = Signal(range(max(E, 2)))
        s_lvl = Signal(range(DIMS))
        d_lvl = Signal(range(DIMS))
        s_start = Signal()  # the source is cut along an SBUF partition entry: move start
        d_start = Signal()
        s_step = Signal(signed(wd.index_bits))
        d_step = Signal(signed(wd.index_bits))
        s_qstep = Signal(wide)
        d_qstep = Signal(wide)
        # per part
        k = Signal(range(max(E, 2)))
        s_acc = Signal(wide)  # the offset (or start) the next part begins at
        d_acc = Signal(wide)
        wait = Signal(range(max(self.cycles, 2)))

        big = d_num >= E
        q_now = Mux(big, d_num >> log2e, 1)
        s_is_start = equals(src.space, Space.SBUF) & equals(s_level, 0)
        d_is_start = equals(dst.space, Space.SBUF) & equals(d_level, 0)

        count = Signal(wd.count_bits)
        m.d.comb += count.eq(q + (k < r))

        # The state as a plain register and an If chain (an FSM's case statement does not lint
        # clean).
        IDLE, CHECK, WAIT, EMIT, STATUS = range(5)
        state = Signal(range(5))
        with m.If(~state.any()):  # IDLE
            m.d.comb += self.instr.ready.eq(1)
            with m.If(self.instr.valid):
                m.d.sync += [desc.eq(self.instr.payload), state.eq(CHECK)]
        with m.Elif(state == CHECK):
            m.d.sync += [
                whole.eq(~cuttable),
                parts.eq(Mux(cuttable, Mux(big, E, d_num), 1)),
                q.eq(q_now),
                r.eq(Mux(big, d_num[:log2e] if log2e else 0, 0)),
                s_lvl.eq(s_level),
                d_lvl.eq(d_level),
                s_start.eq(s_is_start),
                d_start.eq(d_is_start),
                s_step.eq(at(src.step, s_level)),
                d_step.eq(at(dst.step, d_level)),
                s_qstep.eq(Mux(s_is_start, q_now, q_now * at(src.step, s_level))),
                d_qstep.eq(Mux(d_is_start, q_now, q_now * at(dst.step, d_level))),
                s_acc.eq(Mux(s_is_start, src.start, src.offset)),
                d_acc.eq(Mux(d_is_start, dst.start, dst.offset)),
                k.eq(0),
                wait.eq(max(self.cycles - 3, 0)),
            ]
            with m.If(error.any()):
                m.d.sync += [parts.eq(0), state.eq(STATUS)]
            with m.Else():
                m.d.sync += state.eq(EMIT if self.cycles == 2 else WAIT)
        with m.Elif(state == WAIT):
            m.d.sync += wait.eq(wait - 1)
            with m.If(~wait.any()):
                m.d.sync += state.eq(EMIT)
        with m.Elif(state == EMIT):
            out = self.part.payload
            m.d.comb += [
                self.part.valid.eq(1),
                out.engine.eq(k),
                out.desc.eq(desc),
            ]
            with m.If(~whole):
                for side, lvl, start, acc in (
                    (out.desc.src, s_lvl, s_start, s_acc),
                    (out.desc.dst, d_lvl, d_start, d_acc),
                ):
                    for d in range(DIMS):
                        with m.If(equals(lvl, d)):
                            m.d.comb += side.num[d].eq(count)
                    with m.If(start):
                        m.d.comb += side.start.eq(acc)
                    with m.Else():
                        m.d.comb += side.offset.eq(acc)
            with m.If(self.part.ready):
                extra = k < r
                m.d.sync += [
                    k.eq(k + 1),
                    s_acc.eq(s_acc + s_qstep + Mux(extra, Mux(s_start, 1, s_step), 0)),
                    d_acc.eq(d_acc + d_qstep + Mux(extra, Mux(d_start, 1, d_step), 0)),
                ]
                with m.If(k == parts - 1):
                    m.d.sync += state.eq(STATUS)
        with m.Elif(state == STATUS):
            m.d.comb += [
                self.status.valid.eq(1),
                self.status.payload.tag.eq(desc.tag),
                self.status.payload.error.eq(Mux(dynamic, Error.DGE_INDIRECT, check.error)),
                self.status.payload.parts.eq(parts),
            ]
            with m.If(self.status.ready):
                m.d.sync += state.eq(IDLE)
        return m
