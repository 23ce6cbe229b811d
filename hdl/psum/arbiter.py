"""Least-recently-granted bank arbiter of the three PSUM requesters (TE, VE, SE)."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.model.psum.arbiter import PORTS

__all__ = ["BankArbiter"]


class BankArbiter(wiring.Component):
    """Grant at most one requester per bank and cycle, least recently granted first.

    The policy of docs/psum.md ("Ordering, hazards and arbitration"), bit-exact with
    :class:`ncrtl.model.psum.Arbiter`: a priority order of the requesters (initially TE, VE, SE);
    going down the order a presenting requester is granted unless one granted before it in this
    cycle has its bank; after the cycle every granted requester that beat another presenting
    requester for its bank moves to the end of the order, the movers keeping their relative
    order.

    The order is held as three precedence bits (``ahead[i][j]``: requester ``i`` comes before
    ``j``), which is all a permutation of three needs.  Two facts keep the grant logic flat:

    * requester ``i`` is granted exactly when it presents and no requester *ahead* of it presents
      the same bank (an earlier requester of that bank that lost did so to an even earlier one
      of the same bank, which blocks ``i`` as well), so the grants need no chain;
    * the new order keeps a pair's precedence when both or neither move, and otherwise puts the
      mover behind: ``ahead'[i][j] = ahead[i][j] if mover_i == mover_j else mover_j``.

    Parameters
    ----------
    banks : int
        Banks (1..16); bank numbers are 4 bits wide.

    Attributes
    ----------
    latency : int
        0: the grants are combinational from the requests (the order is the only state).

    Interface
    ---------
    i_present : In(3)
        Bit ``i``: requester :data:`~ncrtl.model.psum.PORTS` ``[i]`` presents a bank this cycle.
    i_bank : In(12)
        Requester ``i``'s bank in bits ``[4i, 4i + 4)``.
    o_grant : Out(3)
        Bit ``i``: requester ``i`` is granted this cycle.
    """

    latency = 0

    @validated_init
    def __init__(self, banks=8):
        self.banks = check_int(banks, "BankArbiter banks", minimum=1, maximum=16)
        n = len(PORTS)
        super().__init__(
            {
                "i_present": In(n),
                "i_bank": In(4 * n),
                "o_grant": Out(n),
            }
        )

    def elaborate(self, platform):
        m = Module()
        n = len(PORTS)
        # One register per unordered pair (i < j): set while i is ahead of j.  Reset: TE, VE, SE.
        pair = {
            (i, j): Signal(name=f"ahead_{PORTS[i]}_{PORTS[j]}", init=1)
            for i in range(n)
            for j in range(i + 1, n)
        }

        def ahead(i, j):
            return pair[i, j] if i < j else ~pair[j, i]

        present = [self.i_present[i] for i in range(n)]
        bank = [self.i_bank[4 * i : 4 * i + 4] for i in range(n)]
        # same[i][j]: i and j both present the same bank.
        same = {}
        for i in range(n):
            for j in range(i + 1, n):
                s = Signal(name=f"same_{PORTS[i]}_{PORTS[j]}")
                # as a reduction: a port tied to bank 0 would make the comparison a multi-bit
                # logical NOT (WIDTHTRUNC for verilator -Wall)
                m.d.comb += s.eq(present[i] & present[j] & ~(bank[i] ^ bank[j]).any())
                same[i, j] = same[j, i] = s
        grant, mover = [], []
        for i in range(n):
            g = Signal(name=f"grant_{PORTS[i]}")
            mv = Signal(name=f"mover_{PORTS[i]}")
            others = [j for j in range(n) if j != i]
            blocked = 0
            for j in others:
                blocked = blocked | (same[i, j] & ahead(j, i))
            beat = 0
            for j in others:
                beat = beat | same[i, j]
            m.d.comb += [g.eq(present[i] & ~blocked), mv.eq(g & beat)]
            grant.append(g)
            mover.append(mv)
        for (i, j), reg in pair.items():
            with m.If(mover[i] != mover[j]):
                m.d.sync += reg.eq(mover[j])
        m.d.comb += self.o_grant.eq(Cat(*grant))
        return m
