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

from ncrtl.model.dma.isa import Space, side_addresses

__all__ = ["runs", "pattern_bounds", "command_fields", "DIMS"]

#: Pattern entries of the hardware: the partition (or outermost) dimension and 4 free ones.
DIMS = 5


def pattern_bounds(pattern, first=0):
    """``(lo, hi)``: the smallest and largest of ``sum(i_d * step_d)`` over the pattern's
    dimensions from ``first`` on (the corners of the loop nest)."""
    lo = sum(min(0, s * (n - 1)) for s, n in pattern[first:])
    hi = sum(max(0, s * (n - 1)) for s, n in pattern[first:])
    return lo, hi


def runs(side, word_bytes, dynamic=None, *, transpose=False):
    """The runs of ``side`` in loop order: an int64 array ``[n, 3]`` of ``(partition, byte
    address, bytes)``.  ``transpose``: the columns of the side's 2-D view ``[A, B]`` one after
    the other (the order a DMA transpose reads its source in), each element its own run unless
    the view's outer step is 1 in the device memory."""
    addr = side_addresses(side, dynamic)
    if side.space == Space.HBM:
        part = np.zeros(np.shape(addr), dtype=np.int64)
        byte = np.asarray(addr, dtype=np.int64)
    else:
        part, byte = (np.asarray(a, dtype=np.int64) for a in addr)
    if transpose:
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
                out.append((p_row[i], b_row[i], esize))
                i += 1
                continue
            room = word_bytes - b_row[i] % word_bytes
            take = min((inner - i) * esize, room) // esize
            out.append((p_row[i], b_row[i], take * esize))
            i += take
    return np.asarray(out, dtype=np.int64).reshape(-1, 3)


def command_fields(side, dynamic=None, *, transpose=False):
    """The address generator's command for ``side`` (``ncrtl.hdl.dma.agu.command_layout``):
    patterns padded to 5 entries on the outside (an SBUF side keeps its partition entry first
    and pads between it and the free entries), an SBUF offset split into the first partition
    and the offset inside the row.  A scalar dynamic offset is folded into the offset.
    ``transpose``: the column walk of a 2-D view (:func:`runs`); in the SBUF the partition
    level is then the innermost.  A level that steps partitions has ``step`` 0 and ``pstep``
    1."""
    pattern = list(side.pattern)
    offset = side.offset
    if side.indirect is not None and side.indirect.kind == "scalar":
        offset += int(dynamic) * side.indirect.stride
    pstep = [0] * DIMS
    if side.space == Space.SBUF:
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
