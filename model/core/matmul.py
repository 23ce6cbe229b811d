"""``nc_matmul``: one Tensor Engine matmul whose output vectors PSUM combines into a bank.

The composition the RTL ``ncrtl.hdl.core.MatmulCore`` implements: the Tensor Engine result
``out[m, n]`` (:func:`ncrtl.model.tensor_engine.matmul.matmul`) leaves the array as ``N`` output
vectors of ``cols`` lanes (lane ``tile_col + m`` carries ``out[m, n]``, the other lanes +0.0, raw
transpose words zero-extended to 32 bits), and PSUM applies them as the ``N`` beats of one write
instruction (:meth:`ncrtl.model.psum.Psum.write`); an MX matmul (``nc_matmul_mx``) the same way with its
block scales.  A contraction longer than the array is split into
chunks of ``rows`` partitions, each chunk one ``nc_matmul`` of one accumulation group
(:func:`chunk_flags`).
"""

import numpy as np

from ncrtl.model.psum import Dtype, Flag, Psum, Write
from ncrtl.model.tensor_engine.matmul import matmul_bits, matmul_mx_rows, result_bits

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


def nc_matmul(
    psum,
    write,
    stationary,
    moving,
    *,
    stationary_scale=None,
    moving_scale=None,
    tile_position=None,
    **matmul_kwargs,
):
    """Run one matmul on the golden Tensor Engine and write its result into ``psum``.

    Parameters
    ----------
    psum : ncrtl.model.psum.Psum
        PSUM state; its partitions are the array's columns (``cols``).
    write : ncrtl.model.psum.Write
        Where the ``N`` output vectors go (``write.n`` must equal ``N``).
    stationary, moving, tile_position, **matmul_kwargs
        As :func:`ncrtl.model.tensor_engine.matmul.matmul` (``cols`` defaults to the partitions).
    stationary_scale, moving_scale : ndarray of uint8 or None
        Given (both): an MX matmul (``nc_matmul_mx``) of ``[K, M, 4]`` / ``[K, N, 4]`` MX data
        with the E8M0 scales of every PE row, ``[K, M]`` / ``[K, N]``
        (:func:`ncrtl.model.tensor_engine.matmul.matmul_mx_rows`; ``mx_row_scales`` turns the
        SBUF quadrant layout into this); ``matmul_kwargs`` then takes ``tile_size``, ``rows``,
        ``cols`` and ``tile_unit``.  The write's dtype sets the MX N limit (512 for FP32, 1024
        for BF16).

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
    if not isinstance(write, Write):
        raise ValueError(f"write must be a ncrtl.model.psum.Write, not {write!r}")
    cols = matmul_kwargs.setdefault("cols", psum.geometry.partitions)
    if cols != psum.geometry.partitions:
        raise ValueError(
            f"the array's {cols} columns must equal PSUM's {psum.geometry.partitions} partitions"
        )
    if (stationary_scale is None) != (moving_scale is None):
        raise ValueError(
            "stationary_scale and moving_scale must be given together (an MX matmul) or not at all"
        )
    if stationary_scale is not None:
        psum_dtype = "bf16" if write.dtype == Dtype.BF16 else "fp32"
        res = matmul_mx_rows(
            stationary,
            moving,
            stationary_scale,
            moving_scale,
            tile_position=tile_position,
            psum_dtype=psum_dtype,
            **matmul_kwargs,
        )
        bits = result_bits(res)
    else:
        bits = matmul_bits(stationary, moving, tile_position=tile_position, **matmul_kwargs)
    bits = np.asarray(bits).astype(np.uint32)  # [M, N]
    m, n = bits.shape
    if write.n != n:
        raise ValueError(
            f"the PSUM write must be a Write of n={n} vectors (the matmul's N), not {write!r}"
        )
    col0 = 0 if tile_position is None else int(tile_position[1])
    beats = np.zeros((n, cols), dtype=np.uint32)
    beats[:, col0 : col0 + m] = bits.T
    return psum.write(write, beats)
