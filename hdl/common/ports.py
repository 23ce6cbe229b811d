"""Port signatures shared by the blocks: a named :class:`~amaranth.lib.wiring.Signature` per
kind of port, so that a composite joins its blocks with :func:`amaranth.lib.wiring.connect`
and a testbench finds the same Verilog names on every block (``<port>__valid``,
``<port>__code``)."""

from amaranth.lib import wiring
from amaranth.lib.wiring import Out

__all__ = ["ErrorStrobe", "exposed", "expose"]


class ErrorStrobe(wiring.Signature):
    """``valid``: one cycle per rejected request or instruction; ``code``: why (the block's
    error enumeration)."""

    def __init__(self, code_bits):
        self.code_bits = code_bits
        super().__init__({"valid": Out(1), "code": Out(code_bits)})

    def __eq__(self, other):
        return isinstance(other, ErrorStrobe) and other.code_bits == self.code_bits

    def __hash__(self):
        return hash((ErrorStrobe, self.code_bits))


def exposed(inner, names):
    """The members of ``inner``'s signature a composite presents as its own: ``names`` maps
    each outer name to the inner member's name; the members keep their flows (what
    :func:`expose` joins)."""
    members = inner.signature.members
    return {outer: members[name] for outer, name in names.items()}


def expose(m, outer, inner, names):
    """Join the members :func:`exposed` took from ``inner`` to ``outer``'s members of the same
    description (``names``: outer name -> inner name), in module ``m``: an interface with
    :func:`~amaranth.lib.wiring.connect`, a plain port with one assignment in its direction."""
    members = inner.signature.members
    for o, i in names.items():
        member = members[i]
        mine, theirs = getattr(outer, o), getattr(inner, i)
        if member.is_signature:
            if member.flow == wiring.Out:
                wiring.connect(m, theirs, wiring.flipped(mine))
            else:
                wiring.connect(m, wiring.flipped(mine), theirs)
        elif member.flow == wiring.Out:
            m.d.comb += mine.eq(theirs)
        else:
            m.d.comb += theirs.eq(mine)
