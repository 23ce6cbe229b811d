"""Random DMA descriptors for the engine's tests and conformance: copies in every direction,
DMA transposes into the SBUF, SBUF read-add-writes, mostly legal, now and then out of bounds.

Every generator takes a ``numpy.random.Generator``, the :class:`ncrtl.model.dma.Geometry` and
the descriptor's tag, and returns a :class:`ncrtl.model.dma.Descriptor`; the patterns are 2-D
views (a partition or outer entry and a free entry, steps 1, -1 or 2), placed at random inside
the memories.
"""

from ncrtl.model.dma import AddDtype, Descriptor, Op, Side, Space

__all__ = ["random_copy", "random_transpose", "random_descriptors"]


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


def random_descriptors(rng, geo, n, *, word_bytes=None):
    """``n`` descriptors, tags 0..n-1 modulo 256: a quarter transposes (half of them tiled for
    an engine of ``word_bytes``, when given), a quarter read-add-writes (FP32 or BF16), the
    rest copies."""
    out = []
    for t in range(n):
        kind = rng.random()
        if kind < 0.25:
            out.append(random_transpose(rng, geo, t % 256, word_bytes=word_bytes))
        elif kind < 0.5:
            out.append(random_copy(rng, geo, t % 256, add=AddDtype(int(rng.integers(0, 2)))))
        else:
            out.append(random_copy(rng, geo, t % 256))
    return out
