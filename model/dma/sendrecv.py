"""``sendrecv`` between the two cores of a logical core (LNC = 2, seed 002): the golden.

Each core posts ``sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine)``: it
sends its SBUF tile ``src`` to the ``dst`` of the core ``send_to_rank`` names, and receives
into its own ``dst`` what the core ``recv_from_rank`` names sends.  With two cores (ranks 0
and 1) a legal exchange is always between the two: core ``r`` sends to ``1 - r`` and receives
from ``1 - r``.

The contract this model states (docs/dma.md, "sendrecv"):

* **Pairing by pipe.** The ``k``-th sendrecv a core posts with ``pipe_id`` ``p`` pairs with the
  ``k``-th the other core posts with ``p``.  A pair completes on both cores together (the
  group synchronises: "all operations in the group must complete before any can proceed");
  sendrecvs of different pipes do not wait for each other, so two cores that post pipes in
  different orders do not deadlock.  A sendrecv whose pipe has no partner on the other core
  never completes (:data:`PENDING`).
* **Rules of one side**, checked on the posting core in this order (:class:`Code`): ranks in
  ``{0, 1}`` and naming the other core (``RANK``); ``src`` and ``dst`` of the same element
  size, partitions and elements per partition (``SHAPE``, seed 002: "same data type", "same
  partition dimension size and the same number of elements per partition"); on the gpsimd
  path a partition count that is a multiple of 16 and at most 1024 / 512 / 256 bytes per
  partition for 4- / 2- / 1-byte elements (``LIMIT``, seed 002); both tiles inside the SBUF
  (``TENSOR``); ``src`` and ``dst`` not overlapping (``OVERLAP``: the data streams, so a core
  may not receive into what it is sending).
* **Rules of the pair**: both sides on the same path (``dma`` or ``gpsimd_dma``) and the tile
  each sends the shape the other receives (``PAIR``).  A broken rule on either side fails both
  sendrecvs of the pair with that code (each core reports its own side's first broken rule,
  or ``PAIR`` when only the other side broke one) and writes nothing on either core.
* **Data**: a legal pair writes each core's ``dst`` with the other core's ``src`` bytes,
  partition for partition, bit for bit.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "Code",
    "Tile",
    "SendRecv",
    "ENGINES",
    "GPSIMD_LIMITS",
    "GPSIMD_PARTITIONS",
    "PENDING",
    "side_error",
    "exchange",
    "ring",
]

#: The two transfer paths (seed 002 ``dma_engine``).
ENGINES = ("dma", "gpsimd_dma")
#: gpsimd path: most bytes per partition by element size (seed 002).
GPSIMD_LIMITS = {4: 1024, 2: 512, 1: 256}
#: gpsimd path: the partition count is a multiple of this (seed 002).
GPSIMD_PARTITIONS = 16
#: The code of a sendrecv that never completes (no partner on its pipe).
PENDING = None


class Code(enum.IntEnum):
    """A sendrecv's completion code, in the order the rules are checked."""

    NONE = 0
    RANK = 1  #: a rank not in {0, 1}, or not the other core's
    SHAPE = 2  #: src and dst differ in element size, partitions or elements per partition
    LIMIT = 3  #: gpsimd path: partitions not a multiple of 16, or too many bytes per partition
    TENSOR = 4  #: a tile outside the SBUF
    OVERLAP = 5  #: src and dst overlap on the posting core
    PAIR = 6  #: the two sides disagree (path, shape) or the other side broke a rule


@dataclass(frozen=True)
class Tile:
    """An SBUF tile: ``partitions`` partitions from ``partition``, ``count`` elements of
    ``esize`` bytes per partition from byte ``byte`` (contiguous in each partition)."""

    partition: int
    partitions: int
    byte: int
    count: int
    esize: int = 4

    @property
    def nbytes(self):
        """Bytes per partition."""
        return self.count * self.esize


@dataclass(frozen=True)
class SendRecv:
    """One core's sendrecv (seed 002's arguments)."""

    src: Tile
    dst: Tile
    send_to_rank: int
    recv_from_rank: int
    pipe_id: int = 0
    engine: str = "dma"
    tag: int = 0

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"sendrecv dma_engine must be one of {ENGINES}, not {self.engine!r}")


def _tile_error(t, partitions, partition_bytes):
    if t.partitions < 1 or t.count < 1 or t.esize not in GPSIMD_LIMITS:
        return "is empty or has an element size not in 1/2/4"
    if t.partition < 0 or t.partition + t.partitions > partitions:
        return (
            f"partitions [{t.partition}, {t.partition + t.partitions}) outside the SBUF's "
            f"{partitions}"
        )
    if t.byte < 0 or t.byte % t.esize or t.byte + t.nbytes > partition_bytes:
        return (
            f"bytes [{t.byte}, {t.byte + t.nbytes}) outside a partition of {partition_bytes} "
            f"(or not aligned to its {t.esize}-byte elements)"
        )
    return None


def side_error(op, rank, partitions, partition_bytes):
    """The first rule ``op`` posted on core ``rank`` breaks on its own: ``(Code, message)`` or
    None."""
    other = 1 - rank
    for name in ("send_to_rank", "recv_from_rank"):
        v = getattr(op, name)
        if v not in (0, 1):
            return Code.RANK, f"{name} {v}: ranks of an LNC = 2 logical core are 0 and 1"
        if v != other:
            return Code.RANK, (
                f"{name} {v} on core {rank}: sendrecv exchanges with the other core ({other})"
            )
    s, d = op.src, op.dst
    if (s.esize, s.partitions, s.count) != (d.esize, d.partitions, d.count):
        return Code.SHAPE, (
            f"src [{s.partitions}, {s.count}] of {s.esize}-byte elements, dst [{d.partitions}, "
            f"{d.count}] of {d.esize}-byte elements: src and dst must have the same data type, "
            f"partitions and elements per partition"
        )
    if op.engine == "gpsimd_dma":
        if s.partitions % GPSIMD_PARTITIONS:
            return Code.LIMIT, (
                f"gpsimd_dma: {s.partitions} partitions, not a multiple of {GPSIMD_PARTITIONS}"
            )
        limit = GPSIMD_LIMITS.get(s.esize)
        if limit is not None and s.nbytes > limit:
            return Code.LIMIT, (
                f"gpsimd_dma: {s.nbytes} bytes per partition of {s.esize}-byte elements, at "
                f"most {limit}"
            )
    for t, what in ((s, "src"), (d, "dst")):
        msg = _tile_error(t, partitions, partition_bytes)
        if msg:
            return Code.TENSOR, f"{what} {msg}"
    parts = s.partition < d.partition + d.partitions and d.partition < s.partition + s.partitions
    bytes_ = s.byte < d.byte + d.nbytes and d.byte < s.byte + s.nbytes
    if parts and bytes_:
        return Code.OVERLAP, "src and dst overlap: a core may not receive into what it sends"
    return None


def _pair_error(a, b):
    if a.engine != b.engine:
        return f"the cores use different paths ({a.engine}, {b.engine})"
    for x, y, i in ((a, b, 0), (b, a, 1)):
        if (x.src.esize, x.src.partitions, x.src.count) != (
            y.dst.esize,
            y.dst.partitions,
            y.dst.count,
        ):
            return (
                f"core {i} sends [{x.src.partitions}, {x.src.count}] of {x.src.esize}-byte "
                f"elements, core {1 - i} receives [{y.dst.partitions}, {y.dst.count}] of "
                f"{y.dst.esize}-byte elements"
            )
    return None


def _pairs(programs):
    """``[(i0, i1)]``: the indices of the ops each pipe's ``k``-th pair takes on cores 0 and 1,
    in the order core 0 posted them; and the unpaired ops' ``(core, index)``."""
    by_pipe = [{}, {}]
    for core in (0, 1):
        for i, op in enumerate(programs[core]):
            by_pipe[core].setdefault(op.pipe_id, []).append(i)
    pairs, lone = [], []
    for pipe in sorted(set(by_pipe[0]) | set(by_pipe[1])):
        a, b = by_pipe[0].get(pipe, []), by_pipe[1].get(pipe, [])
        pairs += list(zip(a, b))
        lone += [(0, i) for i in a[len(b) :]] + [(1, i) for i in b[len(a) :]]
    pairs.sort()
    return pairs, lone


def exchange(programs, sbufs):
    """Run the two cores' sendrecv programs (lists of :class:`SendRecv`, in posting order)
    against their SBUFs (``[partitions, partition_bytes]`` uint8 arrays, not modified).

    Returns ``(sbufs, codes, messages)``: the SBUFs after every pair, and per core a list of
    codes (:class:`Code`, or :data:`PENDING` for a sendrecv without a partner) and messages.
    Pairs touch their tiles only, so their order does not matter for legal programs whose
    pairs write disjoint tiles; they are applied in core 0's posting order."""
    partitions, partition_bytes = sbufs[0].shape
    out = [s.copy() for s in sbufs]
    codes = [[PENDING] * len(p) for p in programs]
    msgs = [[""] * len(p) for p in programs]
    pairs, _ = _pairs(programs)
    for i0, i1 in pairs:
        ops = (programs[0][i0], programs[1][i1])
        own = [side_error(ops[r], r, partitions, partition_bytes) for r in (0, 1)]
        pair = _pair_error(*ops) if own[0] is None and own[1] is None else None
        for r, idx in ((0, i0), (1, i1)):
            if own[r] is not None:
                codes[r][idx], msgs[r][idx] = own[r]
            elif own[1 - r] is not None:
                codes[r][idx] = Code.PAIR
                msgs[r][idx] = f"core {1 - r}'s side broke a rule: {own[1 - r][1]}"
            elif pair is not None:
                codes[r][idx], msgs[r][idx] = Code.PAIR, pair
            else:
                codes[r][idx] = Code.NONE
        if codes[0][i0] != Code.NONE:
            continue
        data = [_read(out[r], ops[r].src) for r in (0, 1)]  # both read, then both written
        for r in (0, 1):
            _write(out[r], ops[r].dst, data[1 - r])
    return out, codes, msgs


def _read(sbuf, t):
    return sbuf[t.partition : t.partition + t.partitions, t.byte : t.byte + t.nbytes].copy()


def _write(sbuf, t, values):
    sbuf[t.partition : t.partition + t.partitions, t.byte : t.byte + t.nbytes] = values


def ring(rank, src, dst, pipe_id=0, engine="dma"):
    """Seed 002's ring example for two cores: send to ``(rank + 1) % 2``, receive from
    ``(rank - 1) % 2``."""
    return SendRecv(src, dst, (rank + 1) % 2, (rank - 1) % 2, pipe_id, engine)
