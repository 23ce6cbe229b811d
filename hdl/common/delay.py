"""Delay lines with a clock enable: registers for short ones, memories for long ones.

A long delay line of wide words built from registers shifts every bit every cycle and makes a
netlist bit by bit; as a memory it costs one word write and one registered read per enabled
cycle and a pointer, whatever its depth (the Tensor Engine's skew lines hold up to 8,128 words
of a 128 x 128 array).
"""

from amaranth.hdl import Mux, Signal
from amaranth.lib.memory import Memory

__all__ = ["delay_regs", "delay_line"]


def delay_regs(m, en, name, value, n, shape=None):
    """``value`` delayed by ``n`` cycles of ``en`` through ``n`` registers (``name_d1`` ..)."""
    for i in range(n):
        r = Signal(
            shape if shape is not None else len(value), name=f"{name}_d{i + 1}", reset_less=True
        )
        with m.If(en):
            m.d.sync += r.eq(value)
        value = r
    return value


def delay_line(m, en, name, value, n):
    """``value`` delayed by ``n`` cycles of ``en``: a memory of ``n - 1`` words (a pointer, one
    write and one registered read per enabled cycle, the memory a submodule ``name``) from 3
    cycles up, registers below.  Call it outside any ``m.If`` / ``m.Switch`` block: its
    memory ports are driven by ``m.d.comb`` and must be unconditional."""
    if n < 3:
        return delay_regs(m, en, name, value, n)
    mem = Memory(shape=len(value), depth=n - 1, init=[])
    m.submodules[name] = mem
    wr, rd = mem.write_port(), mem.read_port(domain="sync")
    ptr = Signal(range(n - 1), name=f"{name}_ptr")
    with m.If(en):
        m.d.sync += ptr.eq(Mux(ptr == n - 2, 0, ptr + 1))
    # the word read at ptr was written n - 1 enabled cycles ago; its read register adds 1
    m.d.comb += [
        wr.addr.eq(ptr),
        wr.data.eq(value),
        wr.en.eq(en),
        rd.addr.eq(ptr),
        rd.en.eq(en),
    ]
    return rd.data
