"""``nc_matmul``: one Tensor Engine matmul whose output vectors PSUM combines into a bank.

The composition the RTL ``ncrtl.hdl.core.MatmulCore`` implements: the Tensor Engine result
``out[m, n]`` (:func:`ncrtl.model.tensor_engine.matmul.matmul`) leaves the array as ``N`` output
vectors of ``cols`` lanes (lane ``tile_col + m`` carries ``out[m, n]``, the other lanes +0.0, raw
transpose words zero-extended to 32 bits), and PSUM applies them as the ``N`` beats of one write
instruction (:meth:`ncrtl.model.psum.Psum.write`).  A contraction longer than the array is split into
chunks of ``rows`` partitions, each chunk one ``nc_matmul`` of one accumulation group
(:func:`chunk_flags`).
"""

import numpy as np

from ncrtl.model.psum import Flag, Psum, Write
from ncrtl.model.tensor_engine.matmul import matmul_bits

__all__ = ["nc_matmul", "chunk_flags"]


def chunk_flags(index, count):
    """``psum_accumulate_flag`` of chunk ``index`` of ``count`` chunks of one accumulation group:
    the first overwrites (bit0), the last closes the group (bit1), a single chunk both (3), the
    middle ones accumulate (0)."""
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"chunk count must be a positive integer, not {count!r}")
    if not isinstance(index, int) or not 0 <= index < count:
        raise ValueError(f"chunk index {index!r} is outside 0..{count - 1}")
    flags = 0
    if index == 0:
        flags |= Flag.FIRST
    if index == count - 1:
        flags |= Flag.LAST
    return int(flags)


def nc_matmul(psum, write, stationary, moving, *, tile_position=None, **matmul_kwargs):
    """Run one matmul on the golden Tensor Engine and write its result into ``psum``.

    Parameters
    ----------
    psum : ncrtl.model.psum.Psum
        PSUM state; its partitions are the array's columns (``cols``).
    write : ncrtl.model.psum.Write
        Where the ``N`` output vectors go (``write.n`` must equal ``N``).
    stationary, moving, tile_position, **matmul_kwargs
        As :func:`ncrtl.model.tensor_engine.matmul.matmul` (``cols`` defaults to the partitions).

    Returns
    -------
    int or None
        The bank whose accumulation group this write completed, else None.

    Raises
    ------
    ValueError
        A Tensor Engine rule (nothing is written), ``write.n`` different from ``N``, or a PSUM
        rule (PSUM unchanged).
    """
    if not isinstance(psum, Psum):
        raise ValueError(f"psum must be a ncrtl.model.psum.Psum, not {type(psum).__name__}")
    cols = matmul_kwargs.setdefault("cols", psum.geometry.partitions)
    if cols != psum.geometry.partitions:
        raise ValueError(
            f"the array's {cols} columns must equal PSUM's {psum.geometry.partitions} partitions"
        )
    bits = np.asarray(
        matmul_bits(stationary, moving, tile_position=tile_position, **matmul_kwargs)
    ).astype(np.uint32)  # [M, N]
    m, n = bits.shape
    if not isinstance(write, Write) or write.n != n:
        raise ValueError(
            f"the PSUM write must be a Write of n={n} vectors (the matmul's N), not {write!r}"
        )
    col0 = 0 if tile_position is None else int(tile_position[1])
    beats = np.zeros((n, cols), dtype=np.uint32)
    beats[:, col0 : col0 + m] = bits.T
    return psum.write(write, beats)
