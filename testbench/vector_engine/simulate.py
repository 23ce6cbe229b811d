"""QuantizeMX on the RTL for user data: :func:`quantize_tiles` runs SBUF tiles through the
``quantize_mx`` block (``ncrtl.testbench.vector_engine.test_quantize_tensor``) and returns the
element codes and scales the RTL produced, checked against the golden on the way."""

import json
import tempfile
from pathlib import Path

import numpy as np

from ncrtl import blocks
from ncrtl.model.fp import to_bits
from ncrtl.testbench.conformance import run_block

__all__ = ["quantize_tiles"]


def quantize_tiles(tiles, elem_fmt, *, src_fmt="bf16", scale_rule="trn3", groups=16, seed=1):
    """Quantize ``tiles`` on the RTL QuantizeMX.

    Parameters
    ----------
    tiles : dict of str to ndarray ``[P, F]``
        Source tiles (bfloat16 or float16 arrays, or their uint16 encodings).
    elem_fmt : dict of str to str
        The element format of each tile (``fp8_e4m3fn``, ``fp8_e5m2``, ``fp4_e2m1fn``).
    src_fmt, scale_rule : str
        ``bf16`` / ``fp16``; ``trn3`` / ``ocp``.
    groups : int
        Groups per beat of the build (16: 128 partitions per cycle, the hardware rate).

    Returns
    -------
    (dict, BlockResult)
        ``{name: (data codes uint8 [P, F/4, 4], scales uint8 [P, F/4])}`` as the RTL produced them
        (empty if the run failed), and the run's result (its scoreboards compared every code and
        scale with :func:`ncrtl.model.vector_engine.quantize_mx`).
    """
    block = blocks.get("quantize_mx")
    params = block.resolve({"groups": str(groups)})
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "src.npz", Path(tmp) / "out.npz"
        np.savez(
            src, **{k: to_bits(np.asarray(v), src_fmt).astype(np.uint16) for k, v in tiles.items()}
        )
        job = {
            "in": str(src),
            "out": str(out),
            "src_fmt": src_fmt,
            "scale_rule": scale_rule,
            "elem_fmt": dict(elem_fmt),
        }
        res = run_block(
            block,
            params,
            count=1,
            seed=seed,
            stall=0.0,
            testbench="ncrtl.testbench.vector_engine.test_quantize_tensor",
            extra_env={"NCRTL_QUANTIZE": json.dumps(job)},
            progress=True,
        )
        if not out.exists():
            return {}, res
        with np.load(out) as f:
            result = {k: (f[f"{k}.data"], f[f"{k}.scales"]) for k in tiles}
    return result, res
