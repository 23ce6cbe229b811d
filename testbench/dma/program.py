"""Random DMA descriptors for the engine's tests and conformance: copies in every direction,
DMA transposes into the SBUF, SBUF read-add-writes, mostly legal, now and then out of bounds.

Every generator takes a ``numpy.random.Generator``, the :class:`ncrtl.model.dma.Geometry` and
the descriptor's tag, and returns a :class:`ncrtl.model.dma.Descriptor`; the patterns are 2-D
views (a partition or outer entry and a free entry, steps 1, -1 or 2), placed at random inside
the memories.
"""

from dataclasses import replace

import numpy as np

from ncrtl import blocks
from ncrtl.model.dma import AddDtype, Descriptor, Geometry, Indirect, Op, Side, Space
from ncrtl.model.dma.sendrecv import GPSIMD_PARTITIONS, SendRecv, Tile
from ncrtl.model.sbuf.memory import Access

__all__ = [
    "random_copy",
    "random_transpose",
    "random_descriptors",
    "with_dynamic_offset",
    "queue_program",
    "interleave",
    "sbuf_requests",
    "sbuf_engine_requests",
    "sendrecv_program",
    "OFFSET_AREA",
    "QUEUE_REGION",
    "SENDRECV_SLOT",
]

#: Bytes per partition of each destination slot of :func:`sendrecv_program` by default.
#: Bytes per partition of a destination slot of the sendrecv program (the registry states
#: the program's capacity, ``ncrtl.blocks.sendrecv_pairs``).
SENDRECV_SLOT = blocks.SENDRECV_SLOT

#: The bytes per SBUF partition a queue's region of :func:`queue_program` needs: the widest
#: row :func:`random_copy` draws (14 elements of 4 bytes), rounded up.
QUEUE_REGION = 64


def random_memories(rng, geo):
    """Both memories of ``geo`` (an :class:`~ncrtl.model.dma.Geometry`) filled with random
    bytes."""
    from ncrtl.model.dma import Memories

    return Memories(
        rng.integers(0, 256, (geo.partitions, geo.partition_bytes), dtype=np.uint8),
        rng.integers(0, 256, geo.hbm_bytes, dtype=np.uint8),
    )


def random_copy(rng, geo, tag, *, add=None):
    """A random COPY between the device memory and the SBUF (any direction), mostly legal; with
    ``add`` (an AddDtype) a read-add-write of that dtype into the SBUF instead."""
    esize = int(rng.choice([1, 2, 4])) if add is None else (4 if add == AddDtype.FP32 else 2)
    a = int(rng.integers(1, 5))
    b = int(rng.integers(1, 12))
    sides = []
    for k in range(2):
        if rng.random() < 0.5 or (add is not None and k == 1):
            row = b + int(rng.integers(0, 4))
            rows = a + int(rng.integers(0, 3))
            step = 1 if rng.random() < 0.7 else -1
            off = int(rng.integers(0, rows - a + 1)) * row + (
                int(rng.integers(0, row - b + 1))
                if step == 1
                else b - 1 + int(rng.integers(0, row - b + 1))
            )
            part = int(rng.integers(0, geo.partitions - rows + 1))
            base = int(rng.integers(0, (geo.partition_bytes - row * esize) // esize + 1)) * esize
            sides.append(
                Side(Space.SBUF, base, row, rows * row, [(row, a), (step, b)], esize, off, part)
            )
        else:
            row = b + int(rng.integers(0, 6))
            rows = a + int(rng.integers(0, 3))
            step = 1 if rng.random() < 0.7 else int(rng.choice([-1, 2]))
            span = (b - 1) * abs(step) + 1
            row = max(row, span)
            off = int(rng.integers(0, rows - a + 1)) * row + (0 if step > 0 else span - 1)
            base = int(rng.integers(0, (geo.hbm_bytes - rows * row * esize) // esize // 2)) * esize
            sides.append(Side(Space.HBM, base, row, rows * row, [(row, a), (step, b)], esize, off))
    src, dst = sides
    if rng.random() < 0.1:  # a broken one now and then: out of bounds
        dst = Side(
            dst.space,
            dst.base,
            dst.row,
            dst.extent,
            dst.pattern,
            dst.esize,
            dst.extent,
            dst.partition,
        )
    if add is not None:
        return Descriptor(Op.ADD, src, dst, add, tag=tag)
    return Descriptor(Op.COPY, src, dst, tag=tag)


def random_transpose(rng, geo, tag, *, word_bytes=None):
    """A random DMA transpose into the SBUF, from the device memory or the SBUF, free steps 1 or
    -1.  With ``word_bytes``, half of them have views whose sides are multiples of the engine's
    tile (``word_bytes`` / element bytes): the tiled path."""
    esize = int(rng.choice([2, 4]))
    a, b = int(rng.integers(1, 5)), int(rng.integers(1, 7))
    if word_bytes is not None and rng.random() < 0.5:
        tile = word_bytes // esize
        a, b = tile * int(rng.integers(1, 3)), tile * int(rng.integers(1, 3))
        if max(a, b) > geo.partitions or (32 + (b + 2) * esize) > geo.partition_bytes:
            a = b = tile
        if tile > geo.partitions or (32 + (b + 2) * esize) > geo.partition_bytes:
            a, b = 1, 1
    row = b + int(rng.integers(0, 3))
    step = 1 if rng.random() < 0.7 else -1
    off = 0 if step == 1 else b - 1
    if rng.random() < 0.5:
        base = int(rng.integers(0, 64)) * esize
        src = Side(Space.HBM, base, row, a * row, [(row, a), (step, b)], esize, off)
    else:
        part = int(rng.integers(0, geo.partitions - a + 1))
        src = Side(Space.SBUF, 32, row, a * row, [(row, a), (step, b)], esize, off, part)
    drow = a + int(rng.integers(0, 3))
    dstep = 1 if rng.random() < 0.8 else -1
    part = int(rng.integers(0, geo.partitions - b + 1))
    doff = 0 if dstep == 1 else a - 1
    dst = Side(Space.SBUF, 0, drow, b * drow, [(drow, b), (dstep, a)], esize, doff, part)
    return Descriptor(Op.TRANSPOSE, src, dst, tag=tag)


#: Bytes at the top of the device memory that hold dynamic offsets (``random_descriptors``).
OFFSET_AREA = 256


def with_dynamic_offset(rng, geo, desc, hbm, slot, *, which=None, kind=None):
    """``desc`` with a dynamic offset on one side, the same elements addressed (now and then an
    index outside the tensor), and the descriptor that puts the int32 values into the SBUF
    first: ``[prelude, desc]``.  The values are written to ``hbm`` at ``slot`` (16 bytes in the
    offset area at the top of the device memory) and copied from there to a random place in
    the SBUF just before ``desc``.  ``which``: ``"src"`` or ``"dst"``; ``kind``: ``"scalar"``
    or ``"vector"`` (random when None)."""
    which = which or ("src" if rng.random() < 0.7 else "dst")
    side = getattr(desc, which)
    kind = kind or ("scalar" if rng.random() < 0.5 else "vector")
    rows = side.extent // side.row
    start = side.offset // side.row
    if kind == "scalar":
        stride = side.row if rng.random() < 0.6 else 1  # indirect_dim 0 or the last one
        values = [int(rng.integers(0, side.offset // stride + 1))] if side.offset >= 0 else [0]
        offset = side.offset - values[0] * stride
        if rng.random() < 0.1:
            values[0] += rows * side.row // stride
    else:
        stride = 0
        # The offset keeps a part of the start row (s0), the values pick rows from there.
        n = side.pattern[0][1]
        s0 = int(rng.integers(0, max(start, 0) + 1))
        offset = side.offset - (start - s0) * side.row
        values = [int(v) for v in rng.integers(0, max(rows - s0, 1), n)]
        if rng.random() < 0.1:
            values[int(rng.integers(0, n))] = rows + int(rng.integers(0, 3))
    n = len(values)
    addr = geo.hbm_bytes - OFFSET_AREA + 16 * slot
    hbm[addr : addr + 4 * n] = np.asarray(values, "<i4").view(np.uint8)
    part = int(rng.integers(0, geo.partitions - n + 1))
    byte = 4 * int(rng.integers(0, geo.partition_bytes // 4))
    prelude = Descriptor(
        Op.COPY,
        Side(Space.HBM, addr, 1, n, [(1, n), (1, 1)], 4),
        Side(Space.SBUF, byte, 1, n, [(1, n), (1, 1)], 4, 0, part),
        tag=desc.tag,
    )
    side = replace(side, offset=offset, indirect=Indirect(kind, part, byte, stride))
    return [prelude, replace(desc, **{which: side}, tag=(desc.tag + 1) % 256)]


def random_descriptors(rng, geo, n, *, word_bytes=None, hbm=None):
    """``n`` descriptors, tags 0..n-1 modulo 256: a quarter transposes (half of them tiled for
    an engine of ``word_bytes``, when given), a quarter read-add-writes (FP32 or BF16), the
    rest copies.

    With ``hbm`` (the device memory's initial bytes, written here) about a fifth of them have
    a dynamic offset (:func:`with_dynamic_offset`: scalar or vector on copies and
    read-add-writes, scalar on transposes), each after the copy that puts its values into the
    SBUF; the other descriptors stay out of the top ``OFFSET_AREA`` bytes of the device memory,
    where the values are kept."""
    out = []
    place = geo
    if hbm is not None:
        place = Geometry(geo.partitions, geo.partition_bytes, geo.hbm_bytes - OFFSET_AREA)
    slot = 0
    while len(out) < n:
        t = len(out)
        kind = rng.random()
        if kind < 0.25:
            desc = random_transpose(rng, place, t % 256, word_bytes=word_bytes)
        elif kind < 0.5:
            desc = random_copy(rng, place, t % 256, add=AddDtype(int(rng.integers(0, 2))))
        else:
            desc = random_copy(rng, place, t % 256)
        if hbm is not None and len(out) + 2 <= n and rng.random() < 0.35:
            which = "src" if desc.op == Op.TRANSPOSE else None
            kind = "scalar" if desc.op == Op.TRANSPOSE else None
            out += with_dynamic_offset(rng, geo, desc, hbm, slot, which=which, kind=kind)
            slot = (slot + 1) % (OFFSET_AREA // 16)
        else:
            out.append(desc)
    return out


def _shift(desc, hbm_off, sbuf_off):
    """``desc`` moved by ``hbm_off`` bytes in the device memory and ``sbuf_off`` bytes in
    every SBUF partition."""

    def side(x):
        return replace(x, base=x.base + (hbm_off if x.space == Space.HBM else sbuf_off))

    return replace(desc, src=side(desc.src), dst=side(desc.dst))


def queue_program(rng, geo, queues, n, *, word_bytes=None):
    """``n`` random descriptors (:func:`random_descriptors`, no dynamic offsets) for each of
    ``queues`` queues, queue ``q`` in its own ``1 / queues`` of the device memory and of every
    SBUF partition, so that the result does not depend on how the queues interleave; tags
    ``q << 6 | i``.  A list per queue.  A descriptor that is illegal in its region but would be
    legal (and write elsewhere) in the whole memories is left out: every descriptor has the
    same golden code in both.  Each region needs at least :data:`QUEUE_REGION` bytes per
    partition (the widest random row)."""
    from ncrtl.model.dma import Memories, execute

    per = geo.partition_bytes // queues // 8 * 8
    if per < QUEUE_REGION:
        raise ValueError(
            f"{queues} queues need at least {QUEUE_REGION * queues} bytes per partition "
            f"({QUEUE_REGION} each), not {geo.partition_bytes}"
        )
    sub = Geometry(geo.partitions, per, geo.hbm_bytes // queues // 8 * 8)
    whole = Memories(
        np.zeros((geo.partitions, geo.partition_bytes), np.uint8),
        np.zeros(geo.hbm_bytes, np.uint8),
    )
    part = Memories(
        np.zeros((sub.partitions, sub.partition_bytes), np.uint8),
        np.zeros(sub.hbm_bytes, np.uint8),
    )
    out = []
    for q in range(queues):
        descs = []
        while len(descs) < n:
            for d in random_descriptors(rng, sub, 2 * n, word_bytes=word_bytes):
                moved = _shift(d, q * sub.hbm_bytes, q * sub.partition_bytes)
                if execute(moved, geo, whole)[1] == execute(d, sub, part)[1]:
                    descs.append(replace(moved, tag=(q << 6) | len(descs)))
                if len(descs) == n:
                    break
        out.append(descs)
    return out


def interleave(rng, program):
    """The lists of ``program`` (one per queue) interleaved at random, each in its order:
    ``[(queue, item)]``."""
    order = [q for q, items in enumerate(program) for _ in items]
    rng.shuffle(order)
    nxt = [0] * len(program)
    out = []
    for q in order:
        out.append((q, program[q][nxt[q]]))
        nxt[q] += 1
    return out


def _sendrecv_tile(rng, partitions, parts, count, esize, lo, hi):
    """A tile of ``parts`` x ``count`` elements in bytes ``[lo, hi)`` of random partitions."""
    nbytes = count * esize
    byte = lo + esize * int(rng.integers(0, (hi - lo - nbytes) // esize + 1))
    return Tile(int(rng.integers(0, partitions - parts + 1)), parts, byte, count, esize)


def sendrecv_program(
    rng, partitions, partition_bytes, pipes, depth, n_pairs, *, broken=0.3, slot=None
):
    """Two cores' sendrecv programs (lists of :class:`ncrtl.model.dma.sendrecv.SendRecv`): ``n_pairs`` pairs on random pipes, posted in a different random
    order on each core (each pipe in its order); sources in the lower half of each SBUF,
    each destination in its own slot of the upper half, so the result does not depend on
    the order pairs run in.  ``broken``: the share of pairs with a rule broken on one side.
    One sendrecv without a partner closes the program of core 0.  Each destination takes
    ``slot`` bytes per partition; at most ``depth`` sendrecvs go to one pipe of a core, so
    posting never blocks (the condition under which any posting order pairs without
    deadlock)."""
    SLOT = SENDRECV_SLOT if slot is None else slot
    P, B, PIPES, DEPTH = partitions, partition_bytes, pipes, depth
    if n_pairs >= PIPES * DEPTH or (n_pairs + 1) * SLOT > B // 2:
        raise ValueError(
            f"{n_pairs} pairs do not fit {PIPES} pipes of {DEPTH} and destination slots of "
            f"{SLOT} bytes in half of {B}"
        )
    per_core = [[], []]
    pipes = [int(p) for p in rng.permutation([p for p in range(PIPES) for _ in range(DEPTH)])]
    pipes.remove(PIPES - 1)
    for k in range(n_pairs):
        pipe = pipes[k]
        esize = int(rng.choice([1, 2, 4]))
        gpsimd = P >= GPSIMD_PARTITIONS and rng.random() < 0.2
        parts = (
            GPSIMD_PARTITIONS * int(rng.integers(1, P // GPSIMD_PARTITIONS + 1))
            if gpsimd
            else int(rng.integers(1, P + 1))
        )
        count = int(rng.integers(1, SLOT // esize + 1))
        engine = "gpsimd_dma" if gpsimd else "dma"
        ops = []
        for r in (0, 1):
            src = _sendrecv_tile(rng, P, parts, count, esize, 0, B // 2)
            dst = _sendrecv_tile(
                rng, P, parts, count, esize, B // 2 + SLOT * k, B // 2 + SLOT * (k + 1)
            )
            ops.append(SendRecv(src, dst, 1 - r, 1 - r, pipe, engine, tag=k))
        if rng.random() < broken:
            r = int(rng.integers(0, 2))
            o = ops[r]
            how = int(rng.integers(0, 6))
            if how == 0:
                o = SendRecv(o.src, o.dst, r, 1 - r, pipe, engine, tag=k)  # RANK
            elif how == 1 and count > 1:  # SHAPE on one side
                o = SendRecv(
                    o.src,
                    Tile(o.dst.partition, parts, o.dst.byte, count - 1, esize),
                    1 - r,
                    1 - r,
                    pipe,
                    engine,
                    tag=k,
                )
            elif how == 2 and count > 1:  # both shapes right, the pair's disagree: PAIR
                t = [Tile(x.partition, parts, x.byte, count - 1, esize) for x in (o.src, o.dst)]
                o = SendRecv(t[0], t[1], 1 - r, 1 - r, pipe, engine, tag=k)
            elif how == 3:  # partitions past the SBUF: TENSOR
                t = Tile(P - parts + 1, parts, o.dst.byte, count, esize) if parts > 1 else o.dst
                o = SendRecv(o.src, t, 1 - r, 1 - r, pipe, engine, tag=k)
            elif how == 4:  # the other path, or too few partitions for gpsimd: PAIR or LIMIT
                o = SendRecv(
                    o.src, o.dst, 1 - r, 1 - r, pipe, "dma" if gpsimd else "gpsimd_dma", tag=k
                )
            else:  # receive into what is sent: OVERLAP
                o = SendRecv(o.src, o.src, 1 - r, 1 - r, pipe, engine, tag=k)
            ops[r] = o
        for r in (0, 1):
            per_core[r].append(ops[r])
    programs = []
    for r in (0, 1):
        order = [int(i) for i in rng.permutation(n_pairs)]
        # keep each pipe's order: re-sort the chosen positions per pipe
        by_pipe = {}
        for i in range(n_pairs):
            by_pipe.setdefault(per_core[r][i].pipe_id, []).append(i)
        queue = {p: list(v) for p, v in by_pipe.items()}
        out = []
        for i in order:
            out.append(per_core[r][queue[per_core[r][i].pipe_id].pop(0)])
        programs.append(out)
    lone = Tile(0, 1, 0, 1, 1)
    programs[0].append(SendRecv(lone, Tile(0, 1, B - 1, 1, 1), 1, 1, PIPES - 1, tag=200))
    return programs


def sbuf_requests(
    rng, partitions, words, word_bytes, n, *, again=0.3, hot=0.0, mix=(0.3, 0.3, 0.4)
):
    """``n`` random requests of an SBUF DMA port (``ncrtl.hdl.sbuf.memory.dma_request_layout``
    fields): reads, writes and read-add-writes in the proportions ``mix``, FP32 or BF16, random
    data and strobes; with probability ``hot`` on partition 0 (ports meeting there), else with
    probability ``again`` on the word just drawn (read-add-write hazards)."""
    last = {"partition": 0, "word": 0}
    out = []
    for _ in range(n):
        is_hot = bool(hot) and rng.random() < hot
        same = rng.random() < again
        r = dict(
            partition=0
            if is_hot
            else (last["partition"] if same else int(rng.integers(0, partitions))),
            word=last["word"] if same else int(rng.integers(0, words)),
            access=int(rng.choice([Access.READ, Access.WRITE, Access.ADD], p=list(mix))),
            dtype=int(rng.integers(0, 2)),
            data=int(rng.integers(0, 1 << (8 * word_bytes))),
            strobe=int(rng.integers(0, 1 << word_bytes)),
        )
        last.update(partition=r["partition"], word=r["word"])
        out.append(r)
    return out


def sbuf_engine_requests(rng, partitions, words, word_bytes, n, *, near=0.0, word=0):
    """``n`` random requests of the SBUF's engine port (``engine_request_layout`` fields):
    random masks, reads and writes; with probability ``near`` on ``word``."""
    out = []
    for _ in range(n):
        out.append(
            dict(
                mask=int(rng.integers(1, 1 << partitions)),
                word=word if near and rng.random() < near else int(rng.integers(0, words)),
                write=int(rng.random() < 0.5),
                data=int.from_bytes(
                    rng.integers(0, 256, partitions * word_bytes, dtype=np.uint8).tobytes(),
                    "little",
                ),
                strobe=int(rng.integers(0, 1 << word_bytes)),
            )
        )
    return out
