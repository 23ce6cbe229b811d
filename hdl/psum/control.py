"""PSUM write-instruction control: the instruction queue, the rules, the accumulation groups."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.common.stream import vector_layout
from ncrtl.model.psum.isa import FIELDS, INSTR_BITS, Dtype, Error, Flag, Rounding

__all__ = ["WriteControl", "INSTR_LAYOUT", "check_logic"]

#: The instruction word of ``isa.encode`` (``isa.FIELDS``, LSB first).
INSTR_LAYOUT = data.StructLayout({name: width for name, width in FIELDS})
assert INSTR_LAYOUT.size == INSTR_BITS

#: Width of an element column (``col``) and of a beat count (``n``).
COL_BITS = dict(FIELDS)["col"]
N_BITS = dict(FIELDS)["n"]

#: A queued write: what the beats of one instruction need (decoded once, when it is taken).
ENTRY_LAYOUT = data.StructLayout(
    {
        "legal": 1,  # 0: a rejected write whose beats are drained
        "bank": 4,
        "elem": COL_BITS,  # element column of the next beat
        "left": N_BITS,  # beats still to come (>= 1 while queued)
        "dtype": 2,
        "sr": 1,  # BF16 with stochastic rounding: every beat draws
        "overwrite": 1,  # flag bit0
        "closes": 1,  # flag bit1: the last beat completes the group
    }
)


def check_logic(m, ins, geometry, group_open, group_dtype, *, name="check"):
    """The :func:`ncrtl.model.psum.isa.check` rules as logic: the :class:`Error` code (0 when legal).

    Parameters
    ----------
    m : Module
    ins : View of INSTR_LAYOUT
    geometry : ncrtl.model.psum.isa.Geometry
    group_open, group_dtype : Value
        The group state of the addressed bank (don't care when the bank is out of range).

    Returns
    -------
    Signal(4)
        The first broken rule's code, in :func:`isa.check`'s order.
    """
    g = geometry
    fp32 = equals(ins.dtype, Dtype.FP32)
    cap = Mux(fp32, g.rows, 2 * g.rows)
    opens = (ins.flags & (Flag.FIRST | Flag.FIRST_ACCUMULATE)).any()
    end = Signal(COL_BITS + 1, name=f"{name}_end")
    m.d.comb += end.eq(ins.col + ins.n)
    rules = [  # (code, broken), tested in order
        (Error.BANK, ins.bank >= g.banks),
        (Error.DTYPE, ins.dtype == 3),
        (Error.COUNT, ~ins.n.any()),
        (Error.RANGE, end > cap),
        (Error.FLAGS, ins.flags[0] & ins.flags[2]),
        (Error.ROUNDING, (ins.rounding == Rounding.SR) & ~equals(ins.dtype, Dtype.BF16)),
        (Error.RAW_ACCUMULATE, equals(ins.dtype, Dtype.RAW16) & ~ins.flags[0]),
        (Error.NO_GROUP, ~opens & ~group_open),
        (Error.GROUP_DTYPE, ~opens & (group_dtype != ins.dtype)),
    ]
    code = Signal(4, name=f"{name}_code")
    with m.If(rules[0][1]):
        m.d.comb += code.eq(rules[0][0])
    for c, broken in rules[1:]:
        with m.Elif(broken):
            m.d.comb += code.eq(c)
    return code


class WriteControl(wiring.Component):
    """In-order write-instruction handling of PSUM: which beat goes where, and the rule errors.

    Instructions are checked (:func:`check_logic`) when they are taken; a legal one updates its
    bank's group state at once (bit0 or bit2 open the group with the write's dtype, bit1 closes
    it), exactly as :meth:`ncrtl.model.psum.Psum.issue` does, so the next instruction is checked
    against the state it would see in the golden.  Checking at take time is exact because only
    takes change the group state.

    Taken writes wait in a two-entry queue, ``cur`` (the write owning the next data beat) and
    ``nxt`` (prefetched).  ``instr.ready`` is high while ``nxt`` is free or ``cur`` ends in
    this cycle, and a write taken into an empty queue goes straight to ``cur``: a write taken in
    cycle ``c`` presents its first beat from cycle ``c + 1`` on (once the writes before it are
    done), and back-to-back writes, even of one beat each, run at one beat per cycle.

    A legal ``cur`` presents its bank when a data beat is valid (``o_present``); the beat is taken
    when the arbiter grants it (``i_grant``).  The beats of a rejected write are taken as they
    come (``data.ready``) without presenting: they are drained, nothing is written.  A rejected
    write with ``n = 0`` has no beats and never enters the queue.

    Parameters
    ----------
    geometry : ncrtl.model.psum.isa.Geometry

    Interface
    ---------
    instr : In(stream.Signature(INSTR_LAYOUT))
        ``isa.encode`` words (32 bits).
    data : In(stream.Signature(vector_layout(partitions)))
        Tensor Engine data beats: ``ready`` is high in the cycle a beat is taken (granted, or
        drained).  The payload is not read here (the pipeline takes it); ``last`` is not read
        at all: the write instruction's ``n`` counts the beats.
    o_present : Out(1)
        ``cur`` is legal and a beat is offered: request ``o_bank`` from the arbiter.
    i_grant : In(1)
        The arbiter grants the request.
    o_bank : Out(4), o_elem : Out(11), o_dtype : Out(2), o_sr : Out(1), o_overwrite : Out(1)
        The presented beat: bank, element column, dtype, stochastic rounding, overwrite.
    o_done : Out(1)
        The presented beat is the last of a write with bit1 (it completes the group).
    o_error : Out(1)
        One-cycle pulse, the cycle after an instruction breaking a rule is taken.
    o_error_code : Out(4)
        Its :class:`~ncrtl.model.psum.isa.Error` (valid with ``o_error``).
    """

    def __init__(self, geometry):
        self.geometry = geometry
        super().__init__(
            {
                "instr": In(stream.Signature(INSTR_LAYOUT)),
                "data": In(stream.Signature(vector_layout(geometry.partitions))),
                "o_present": Out(1),
                "i_grant": In(1),
                "o_bank": Out(4),
                "o_elem": Out(COL_BITS),
                "o_dtype": Out(2),
                "o_sr": Out(1),
                "o_overwrite": Out(1),
                "o_done": Out(1),
                "o_error": Out(1),
                "o_error_code": Out(4),
            }
        )

    def elaborate(self, platform):
        m = Module()
        g = self.geometry
        ins = self.instr.payload

        # Group state per bank.
        g_open = [Signal(name=f"group{b}_open") for b in range(g.banks)]
        g_dtype = [Signal(2, name=f"group{b}_dtype") for b in range(g.banks)]
        bank_ix = Signal(range(max(g.banks, 2)), name="check_bank")  # never 0 bits wide
        # An out-of-range bank is rejected by the first rule; clamp it so the lookup is defined.
        m.d.comb += bank_ix.eq(Mux(ins.bank < g.banks, ins.bank, 0))
        sel_open = Signal(name="check_group_open")
        sel_dtype = Signal(2, name="check_group_dtype")
        for b in range(g.banks):
            with m.If(equals(bank_ix, b)):
                m.d.comb += [sel_open.eq(g_open[b]), sel_dtype.eq(g_dtype[b])]
        code = check_logic(m, ins, g, sel_open, sel_dtype)

        cur = Signal(ENTRY_LAYOUT, name="cur")
        nxt = Signal(ENTRY_LAYOUT, name="nxt")
        cur_valid = Signal(name="cur_valid")
        nxt_valid = Signal(name="nxt_valid")

        # -- the beat of cur ------------------------------------------------------------------
        take_beat = Signal(name="take_beat")
        m.d.comb += [
            self.o_present.eq(cur_valid & cur.legal & self.data.valid),
            # A legal beat is taken when granted; a rejected write's beat whenever offered.
            self.data.ready.eq(Mux(cur.legal, self.i_grant, cur_valid)),
            take_beat.eq(cur_valid & self.data.valid & self.data.ready),
            self.o_bank.eq(cur.bank),
            self.o_elem.eq(cur.elem),
            self.o_dtype.eq(cur.dtype),
            self.o_sr.eq(cur.sr),
            self.o_overwrite.eq(cur.overwrite),
            self.o_done.eq(cur.closes & (cur.left == 1)),
        ]
        pop = Signal(name="pop")  # cur is free at the next edge
        m.d.comb += pop.eq(~cur_valid | (take_beat & (cur.left == 1)))

        # -- taking an instruction --------------------------------------------------------------
        take = Signal(name="take")
        push = Signal(name="push")  # it has beats: it joins the queue
        new = Signal(ENTRY_LAYOUT, name="new")
        m.d.comb += [
            self.instr.ready.eq(~nxt_valid | pop),
            take.eq(self.instr.valid & self.instr.ready),
            push.eq(take & ins.n.any()),
            new.legal.eq(~code.any()),
            new.bank.eq(ins.bank),
            new.elem.eq(ins.col),
            new.left.eq(ins.n),
            new.dtype.eq(ins.dtype),
            new.sr.eq(ins.rounding == Rounding.SR),
            new.overwrite.eq(ins.flags[0]),
            new.closes.eq(ins.flags[1]),
        ]
        for b in range(g.banks):
            with m.If(take & ~code.any() & equals(bank_ix, b)):
                with m.If((ins.flags & (Flag.FIRST | Flag.FIRST_ACCUMULATE)).any()):
                    m.d.sync += [g_open[b].eq(1), g_dtype[b].eq(ins.dtype)]
                with m.If(ins.flags[1]):
                    m.d.sync += g_open[b].eq(0)
        m.d.sync += [self.o_error.eq(take & code.any()), self.o_error_code.eq(code)]

        # -- the queue --------------------------------------------------------------------------
        with m.If(pop):
            with m.If(nxt_valid):
                m.d.sync += [cur.eq(nxt), cur_valid.eq(1), nxt.eq(new), nxt_valid.eq(push)]
            with m.Else():
                m.d.sync += [cur.eq(new), cur_valid.eq(push)]
        with m.Else():
            with m.If(take_beat):
                m.d.sync += [cur.elem.eq(cur.elem + 1), cur.left.eq(cur.left - 1)]
            with m.If(push):
                m.d.sync += [nxt.eq(new), nxt_valid.eq(1)]
        return m
