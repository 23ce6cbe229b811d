"""The SBUF's two ports and who gets a partition in a cycle.

Every partition is one single-ported SRAM of ``partition_bytes / word_bytes`` words: one access,
read or write, per cycle.  Two ports reach it: the **DMA port** (one partition, one word per
request) and the **engine port** (one word of every partition in a mask, the way a compute
engine reads or writes a column of all partitions at once).  When both want the DMA's partition
in the same cycle, the engine wins, unless the DMA request has already waited ``dma_wait``
cycles; then the DMA wins and the engine waits one cycle.  So a compute engine is never slowed
by more than one cycle in ``dma_wait + 1`` while the DMA is guaranteed a grant within
``dma_wait + 1`` cycles of a conflict.  A read is also held back while its port's response is
still waiting to be taken (one response in flight per port).

:class:`SbufArbiter` is that rule cycle by cycle, which the RTL (``ncrtl.hdl.dma.sbuf``)
matches; :class:`SbufMemory` is the storage, ``[partitions, partition_bytes]`` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SbufArbiter", "SbufMemory", "DMA_WAIT", "write_strobed"]

#: Default cycles a conflicting DMA request waits before it wins over the engine port.
DMA_WAIT = 4


@dataclass
class SbufArbiter:
    """One decision per cycle: :meth:`step` with what each port offers returns the grants."""

    dma_wait: int = DMA_WAIT
    waited: int = 0

    def step(self, dma_valid, dma_partition, dma_blocked, eng_valid, eng_mask, eng_blocked):
        """``(dma_grant, eng_grant)`` for one cycle.

        ``*_blocked``: the port's request is a read and its previous response has not been
        taken (it cannot be granted this cycle).  ``eng_mask``: a set or a bit mask int of the
        engine request's partitions."""
        mask = eng_mask if isinstance(eng_mask, int) else sum(1 << p for p in eng_mask)
        conflict = dma_valid and eng_valid and bool((mask >> dma_partition) & 1)
        dma_first = self.waited >= self.dma_wait
        eng = eng_valid and not eng_blocked and not (conflict and dma_first and not dma_blocked)
        dma = dma_valid and not dma_blocked and not (conflict and eng)
        self.waited = self.waited + 1 if dma_valid and not dma else 0
        return dma, eng


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


def write_strobed(target, data, strobe):
    """A memory word write with byte enables: byte ``i`` of ``data`` (a uint8 array, or an int
    read little-endian) goes to ``target[i]`` (a uint8 view) where bit ``i`` of ``strobe`` is
    set; the SBUF's and the AXI4 ``WSTRB`` semantics."""
    n = len(target)
    if isinstance(data, int):
        data = np.frombuffer(data.to_bytes(n, "little"), np.uint8)
    keep = ((int(strobe) >> np.arange(n)) & 1).astype(bool)
    target[keep] = np.asarray(data, dtype=np.uint8)[keep]
