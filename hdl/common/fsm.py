"""State machines that lint clean: a state register and one flag per state.

Amaranth's ``m.FSM`` and a ``m.Switch`` over a state both become Verilog case statements, one
per signal they assign, which Yosys writes without the branches (the default included) that do
not assign that signal; ``verilator -Wall`` then reports every such case as CASEINCOMPLETE.
Here each state is a 1-bit flag decoded once, and a state's logic sits under ``m.If(flag)``:
plain ``if`` statements, the same logic.
"""

from amaranth.hdl import Signal

from .bits import equals

__all__ = ["states"]


def states(m, shape, name):
    """``(state, at)``: the state register of enumeration ``shape`` (reset: its first member)
    and ``at[member]``, a 1-bit signal set in that state.  Go to a state with
    ``m.d.sync += state.eq(member)``; at most one flag is set in a cycle."""
    state = Signal(shape, name=f"{name}_state")
    at = {}
    for member in shape:
        flag = Signal(name=f"{name}_{member.name.lower()}")
        m.d.comb += flag.eq(equals(state.as_value(), member.value))
        at[member] = flag
    return state, at
