"""Least-recently-granted bank arbitration of the three PSUM requesters (docs/psum.md).

Each PSUM bank serves one access per cycle.  The requesters are the Tensor Engine write stream
(TE), the Vector Engine port (VE) and the Scalar Engine port (SE); :class:`Arbiter` decides, cycle
by cycle, which of them are granted.  It is the golden of ``o_grant``: the testbench replays the
golden state model in the grant order it produces.
"""

__all__ = ["PORTS", "Arbiter"]

#: Requester names, in port-index order (the bit order of ``o_grant``).
PORTS = ("te", "ve", "se")


class Arbiter:
    """Least-recently-granted arbitration of :data:`PORTS` for the PSUM banks.

    The policy (docs/psum.md, "Ordering, hazards and arbitration"):

    * a priority order of the three requesters, initially TE, VE, SE (:attr:`order`);
    * each cycle, going down the order, a presenting requester is granted unless a requester
      granted earlier in this cycle has the same bank;
    * after the cycle, every granted requester that beat another presenting requester for its
      bank moves to the end of the order, keeping the relative order of those that move.

    Requesters of different banks never interact; under full contention the contenders of a bank
    are served round robin, so none waits more than two grants of its bank.
    """

    def __init__(self):
        self._order = list(range(len(PORTS)))

    @property
    def order(self):
        """Priority order, highest first: a list of port indices (a copy)."""
        return list(self._order)

    def step(self, banks):
        """Arbitrate one cycle.

        Parameters
        ----------
        banks : sequence of 3 items
            Per port (TE, VE, SE): the bank it presents this cycle (a non-negative int), or
            ``None`` when it does not present.

        Returns
        -------
        tuple of 3 bool
            The grants, per port.
        """
        banks = list(banks) if not isinstance(banks, (str, bytes)) else None
        if banks is None or len(banks) != len(PORTS):
            raise ValueError(f"banks must hold one bank or None per port {PORTS}, not {banks!r}")
        for port, b in zip(PORTS, banks):
            if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 0):
                raise ValueError(f"bank of port {port} must be None or an integer >= 0, not {b!r}")
        granted = [False] * len(PORTS)
        taken = set()
        for p in self._order:
            if banks[p] is not None and banks[p] not in taken:
                granted[p] = True
                taken.add(banks[p])
        # A winner moves back only if it actually beat someone: an uncontended grant costs nothing,
        # so a requester alone on its bank keeps its priority for a later conflict.
        movers = [
            p
            for p in self._order
            if granted[p] and any(q != p and banks[q] == banks[p] for q in range(len(PORTS)))
        ]
        self._order = [p for p in self._order if p not in movers] + movers
        return tuple(granted)
