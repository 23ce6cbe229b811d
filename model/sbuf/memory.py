"""The SBUF's two ports, its near-memory read-add-write unit, and who gets a partition in a
cycle.

Every partition is an SRAM of ``partition_bytes / word_bytes`` words with one read port and one
write port (a read and a write in the same cycle; a read returns the word as it was before the
cycle's write).  Two request ports reach it: the **DMA port** (one partition, one word per
request: a read, a write, or a read-add-write) and the **engine port** (one word of every
partition in a mask, read or write, the way a compute engine accesses a column of all
partitions at once).

Arbitration: when both ports want the DMA's partition in the same cycle, the engine wins, unless
the DMA request has already waited ``dma_wait`` cycles; then the DMA wins and the engine waits
one cycle.  So a compute engine is never slowed by more than one cycle in ``dma_wait + 1`` while
the DMA is guaranteed a grant within ``dma_wait + 1`` cycles of a conflict.  A request is held
back (``blocked``, it takes no part in the arbitration that cycle) when

* it is a read and its port's previous response has not been taken (one response in flight per
  port);
* it touches a word a read-add-write is still adding (granted in one of the last
  :data:`ADD_LATENCY` cycles): every access sees every earlier grant's result;
* it is a write to a partition whose read-add-write sum is written this cycle (the write port is
  taken).

**Read-add-write** (NeuronCore-v4, seed 001): the DMA hands the unit beside the SBUF a word
``A``; at the grant the unit reads the word ``B`` from the SRAM, adds lane by lane
(:func:`ncrtl.model.dma.engine.add_elements`, FP32 or BF16 as the request says) and writes the
sum's strobed bytes :data:`ADD_LATENCY` cycles after the grant, on the write port, while the
read port serves the next request: one read-add-write per cycle, the rate of a DMA write.

:class:`SbufArbiter` is that rule cycle by cycle, which the RTL (``ncrtl.hdl.sbuf.memory``)
matches; :class:`SbufMemory` is the storage, ``[partitions, partition_bytes]`` bytes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ncrtl.model.dma.engine import add_elements
from ncrtl.model.dma.isa import AddDtype

__all__ = [
    "SbufArbiter",
    "PortsArbiter",
    "SbufMemory",
    "DMA_WAIT",
    "ADD_LATENCY",
    "Access",
    "write_strobed",
]

#: Default cycles a conflicting DMA request waits before it wins over the engine port.
DMA_WAIT = 4

#: Cycles from a read-add-write's grant to the write of its sum: the SRAM read (1) and the
#: adder's register (1).
ADD_LATENCY = 2


class Access(enum.IntEnum):
    """What a DMA port request does."""

    READ = 0
    WRITE = 1
    ADD = 2  #: read-add-write


@dataclass
class PortsArbiter:
    """:class:`SbufArbiter` for an SBUF with ``ports`` DMA ports (one per DMA engine of a
    core) and the engine port.

    A partition takes one DMA port's request per cycle: among the ports that ask for the same
    partition and are not held back, the first from ``turn`` on wins (``turn`` advances by one
    every cycle, so no port waits more than ``ports - 1`` cycles for a partition another keeps
    asking for); ports on different partitions are all served in the same cycle.  The engine
    port against a DMA port that won its partition follows :class:`SbufArbiter`'s rule, per
    DMA port: the engine wins unless that port has waited ``dma_wait`` cycles.  Every port
    has its own read-add-write pipeline; two sums never meet in one partition's write port
    (their reads would have met in its read port).  ``adding`` holds, newest first, the
    ``(partition, word)`` pairs of the read-add-writes granted in each of the last
    :data:`ADD_LATENCY` cycles."""

    ports: int
    dma_wait: int = DMA_WAIT
    turn: int = 0
    waited: list = None
    adding: list = None

    def __post_init__(self):
        if self.waited is None:
            self.waited = [0] * self.ports
        if self.adding is None:
            self.adding = [[] for _ in range(ADD_LATENCY)]

    def blocked(self, partitions, word, write):
        """As :meth:`SbufArbiter.blocked`, over every port's read-add-writes."""
        for i, slots in enumerate(self.adding):
            for part, w in slots:
                if (partitions >> part) & 1 and (w == word or (write and i == ADD_LATENCY - 1)):
                    return True
        return False

    def step(self, dma, eng=None):
        """``(dma_grants, eng_grant)`` for one cycle.

        ``dma``: per port None or ``(partition, word, access, resp_blocked)`` (``resp_blocked``:
        a read whose port's previous response has not been taken); ``eng``: None or ``(mask,
        word, write, resp_blocked)``."""
        n = self.ports
        active = []
        for r in dma:
            ok = r is not None and not r[3]
            if ok:
                ok = not self.blocked(1 << r[0], r[1], r[2] == Access.WRITE)
            active.append(ok)
        rank = [(i - self.turn) % n for i in range(n)]
        win = [
            active[i]
            and not any(
                active[j] and dma[j][0] == dma[i][0] and rank[j] < rank[i] for j in range(n)
            )
            for i in range(n)
        ]
        eng_ok = eng is not None and not eng[3] and not self.blocked(eng[0], eng[1], eng[2])
        conflict = [win[i] and eng is not None and (eng[0] >> dma[i][0]) & 1 for i in range(n)]
        dma_first = any(conflict[i] and self.waited[i] >= self.dma_wait for i in range(n))
        eng_go = bool(eng_ok and not dma_first)
        go = [bool(win[i] and not (conflict[i] and eng_go)) for i in range(n)]
        self.waited = [
            self.waited[i] + 1 if dma[i] is not None and not go[i] else 0 for i in range(n)
        ]
        added = [(dma[i][0], dma[i][1]) for i in range(n) if go[i] and dma[i][2] == Access.ADD]
        self.adding = [added] + self.adding[:-1]
        self.turn = (self.turn + 1) % n
        return go, eng_go


class SbufArbiter:
    """One decision per cycle for the SBUF with one DMA port: :meth:`step` with what each port
    offers returns the grants.  It is :class:`PortsArbiter` with one port (``ports``), in the
    form the single-port engine's timing uses."""

    def __init__(self, dma_wait=DMA_WAIT):
        self.ports = PortsArbiter(1, dma_wait)

    def blocked(self, partitions, word, write):
        """Whether a request touching ``word`` of the ``partitions`` (a bit mask) waits for a
        read-add-write in flight."""
        return self.ports.blocked(partitions, word, write)

    def step(
        self,
        dma_valid,
        dma_partition,
        dma_blocked,
        eng_valid,
        eng_mask,
        eng_blocked,
        *,
        dma_word=0,
        dma_access=Access.READ,
        eng_word=0,
        eng_write=False,
    ):
        """``(dma_grant, eng_grant)`` for one cycle.

        ``*_blocked``: the port's request is a read and its previous response has not been
        taken.  ``eng_mask``: a set or a bit mask int of the engine request's partitions.  The
        words and kinds of the requests decide the waits for read-add-writes in flight."""
        mask = eng_mask if isinstance(eng_mask, int) else sum(1 << p for p in eng_mask)
        dma = (dma_partition, dma_word, dma_access, dma_blocked) if dma_valid else None
        eng = (mask, eng_word, eng_write, eng_blocked) if eng_valid else None
        (go,), eng_go = self.ports.step([dma], eng)
        return go, eng_go


class SbufMemory:
    """The SBUF's bytes: ``[partitions, partition_bytes]`` uint8, word accesses."""

    def __init__(self, partitions, partition_bytes, word_bytes):
        self.word_bytes = word_bytes
        self.data = np.zeros((partitions, partition_bytes), dtype=np.uint8)

    def read(self, partition, word):
        w = self.word_bytes
        return self.data[partition, word * w : (word + 1) * w].copy()

    def write(self, partition, word, data, strobe):
        """Write the bytes of ``data`` (``word_bytes`` uint8, or an int) whose ``strobe`` bit
        is set."""
        w = self.word_bytes
        write_strobed(self.data[partition, word * w : (word + 1) * w], data, strobe)

    def add(self, partition, word, data, strobe, dtype):
        """A read-add-write: the word plus ``data`` lane by lane (an
        :class:`ncrtl.model.dma.isa.AddDtype`), its ``strobe`` bytes written."""
        w = self.word_bytes
        if isinstance(data, int):
            data = np.frombuffer(data.to_bytes(w, "little"), np.uint8)
        esize = 4 if AddDtype(dtype) == AddDtype.FP32 else 2
        old = self.read(partition, word).reshape(-1, esize)
        total = add_elements(old, np.asarray(data, np.uint8).reshape(-1, esize), dtype)
        self.write(partition, word, total.reshape(-1), strobe)


def write_strobed(target, data, strobe):
    """A memory word write with byte enables: byte ``i`` of ``data`` (a uint8 array, or an int
    read little-endian) goes to ``target[i]`` (a uint8 view) where bit ``i`` of ``strobe`` is
    set; the SBUF's and the AXI4 ``WSTRB`` semantics."""
    n = len(target)
    if isinstance(data, int):
        data = np.frombuffer(data.to_bytes(n, "little"), np.uint8)
    keep = ((int(strobe) >> np.arange(n)) & 1).astype(bool)
    target[keep] = np.asarray(data, dtype=np.uint8)[keep]
