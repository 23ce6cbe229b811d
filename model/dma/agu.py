"""The address generator's contract: a side's pattern as the memory accesses the engine makes.

The DMA engine does not move one element per cycle: along an innermost dimension of step 1 the
elements are contiguous, and the address generator (``ncrtl.hdl.dma.agu``) emits them as
**runs**: up to one memory word (``word_bytes``, the data path width) of consecutive bytes that
do not cross a word boundary.  Any other innermost step gives one run per element.  Runs never
span two iterations of the innermost loop, even when the pattern happens to make them adjacent
(the generator does not look ahead).

:func:`runs` lists them in loop order, from the element addresses of
:func:`ncrtl.model.dma.isa.side_addresses`: ``(partition, byte address, bytes)``, the partition
0 for the device memory.  :func:`pattern_bounds` is the check the generator makes before a
descriptor moves anything: the smallest and largest element index a pattern forms, from its
corners, which for an affine loop nest is exactly the check of every address.
"""

from __future__ import annotations

import numpy as np

from ncrtl.model.dma.access import pattern_bounds
from ncrtl.model.dma.isa import Space, side_addresses

__all__ = ["runs", "pattern_bounds", "command_fields", "DIMS"]

#: Pattern entries of the hardware: the partition (or outermost) dimension and 4 free ones.
DIMS = 5


def runs(side, word_bytes, dynamic=None, *, transpose=False, tiled=None, spans=False):
    """The runs of ``side`` in loop order: an int64 array ``[n, 3]`` of ``(partition, byte
    address, bytes)``; with ``spans`` ``[n, 4]``, the fourth the run's span (bytes from its
    address to the end of its innermost iteration where that is contiguous, else its bytes:
    what a reader sizes its bursts by).  ``transpose``: the columns of the side's 2-D view ``[A, B]`` one after
    the other (the order a DMA transpose reads its source in on its element path), each element
    its own run unless the view's outer step is 1 in the device memory.

    ``tiled`` (``"source"`` or ``"destination"``): a tiled DMA transpose's walk of its 2-D view
    in ``E x E`` tiles, ``E = word_bytes / esize`` (both sides multiples of ``E``).  The source
    view ``[A, B]`` goes tile column by tile column (``B / E``), tile by tile down it, each tile
    row by row; the destination view ``[B, A]`` goes the same tiles (tile row by tile row), each
    tile row by row of the destination, which is column by column of the source."""
    addr = side_addresses(side, dynamic)
    if side.space == Space.HBM:
        part = np.zeros(np.shape(addr), dtype=np.int64)
        byte = np.asarray(addr, dtype=np.int64)
    else:
        part, byte = (np.asarray(a, dtype=np.int64) for a in addr)
    if tiled is not None:
        e = word_bytes // side.esize
        a, b = part.shape
        if a % e or b % e:
            raise ValueError(f"a tiled walk needs view sides that are multiples of {e}, not {a, b}")
        # [A / E, E, B / E, E]: the source's order is (col tile, row tile, row, col), the
        # destination's (row tile, col tile, row, col); the innermost level is a view row.
        axes = (2, 0, 1, 3) if tiled == "source" else (0, 2, 1, 3)
        part, byte = (x.reshape(a // e, e, b // e, e).transpose(axes) for x in (part, byte))
        contiguous = side.pattern[-1][0] == 1
        inner = e
    elif transpose:
        part, byte = part.T, byte.T
        contiguous = side.space == Space.HBM and side.pattern[0][0] == 1
        inner = side.pattern[0][1]
    else:
        contiguous = side.pattern[-1][0] == 1
        inner = side.pattern[-1][1]
    part = part.reshape(-1, inner)
    byte = byte.reshape(-1, inner)
    esize = side.esize
    out = []
    for p_row, b_row in zip(part, byte):
        i = 0
        while i < inner:
            if not contiguous:
                out.append((p_row[i], b_row[i], esize, esize))
                i += 1
                continue
            room = word_bytes - b_row[i] % word_bytes
            take = min((inner - i) * esize, room) // esize
            out.append((p_row[i], b_row[i], take * esize, (inner - i) * esize))
            i += take
    out = np.asarray(out, dtype=np.int64).reshape(-1, 4)
    return out if spans else out[:, :3]


def command_fields(side, dynamic=None, *, transpose=False, tiled=None, word_bytes=None):
    """The address generator's command for ``side`` (``ncrtl.hdl.dma.agu.command_layout``):
    patterns padded to 5 entries on the outside (an SBUF side keeps its partition entry first
    and pads between it and the free entries), an SBUF offset split into the first partition
    and the offset inside the row.  A scalar dynamic offset is folded into the offset.
    ``transpose``: the column walk of a 2-D view (:func:`runs`); in the SBUF the partition
    level is then the innermost.  A level that steps partitions has ``step`` 0 and ``pstep``
    1.  ``tiled`` with ``word_bytes``: the tiled walk of :func:`runs`, as the engine commands
    it."""
    pattern = list(side.pattern)
    offset = side.offset
    if side.indirect is not None and side.indirect.kind == "scalar":
        offset += int(dynamic) * side.indirect.stride
    pstep = [0] * DIMS
    if tiled is not None:
        e = word_bytes // side.esize
        (s0, n0), (s1, n1) = pattern
        sbuf = side.space == Space.SBUF
        outer = (0 if sbuf else s0 * e, n0 // e, e if sbuf else 0)  # (step, num, pstep)
        row = (0 if sbuf else s0, e, 1 if sbuf else 0)
        tile_of_1 = (s1 * e, n1 // e, 0)
        levels = [(0, 1, 0)]
        if tiled == "source":
            levels += [tile_of_1, outer, row, (s1, e, 0)]
        else:
            levels += [outer, tile_of_1, row, (s1, e, 0)]
        pattern = [(st, n) for st, n, _ in levels]
        pstep = [p for *_, p in levels]
        partition = 0
        if sbuf:
            partition = side.partition + offset // side.row
            offset = offset % side.row
    elif side.space == Space.SBUF:
        partition = side.partition + offset // side.row
        offset = offset % side.row
        lead, free = pattern[0], pattern[1:]
        if transpose:
            pattern = [(0, 1)] * 3 + [free[0], (0, lead[1])]
            pstep[4] = 1
        else:
            pattern = [(0, lead[1])] + [(0, 1)] * (4 - len(free)) + free
            pstep[0] = 1
    else:
        if transpose:
            pattern = pattern[::-1]
        pattern = [(0, 1)] * (5 - len(pattern)) + pattern
        partition = 0
    return {
        "base": side.base,
        "offset": offset,
        "partition": partition,
        "esize": side.esize.bit_length() - 1,
        "step": [s for s, _ in pattern],
        "pstep": pstep,
        "num": [n for _, n in pattern],
    }
