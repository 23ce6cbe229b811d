"""Conformance of every FP unit configuration: Verilator RTL vs the golden model, bit for bit.

Each configuration of the ``fp`` group (``ncrtl list``) is built in Verilator and driven by its
cocotb testbench with random stalls and backpressure: corner sets (exhaustive code pairs for
FP8/FP4) plus 1e5 random vectors here, 1e6 in the slow suite.
"""

import pytest

from ncrtl import blocks
from ncrtl.model.fp import get_format
from ncrtl.testbench.conformance import run_block

CONFIGS = [(b, p) for b, p in blocks.GROUPS["fp"]]


def _id(cfg):
    b, p = cfg
    return blocks.get(b).label(blocks.get(b).resolve(p))


def _minimum_vectors(block_name, params, count):
    """Vectors each scoreboard must have seen: ``count``, or every code pair where the testbench
    covers a pair of narrow formats exhaustively instead of drawing random pairs."""
    if block_name == "fp.mul":
        fa, fb = get_format(params["fmt_a"]), get_format(params["fmt_b"])
        if fa.bits <= 8 and fb.bits <= 8:
            return 1 << (fa.bits + fb.bits)
    return count


def _check(block_name, params, count, seed):
    block = blocks.get(block_name)
    params = block.resolve(params)
    res = run_block(block, params, count=count, seed=seed, stall=0.2)
    assert res.passed, res.report()
    # Multi-format modes split ``count`` over their format pairs; every board has its corners.
    need = _minimum_vectors(block_name, params, count)
    assert sum(u["vectors"] for u in res.units) >= need, f"too few vectors: {res.report()}"


@pytest.mark.sim
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_conformance(cfg):
    _check(*cfg, count=100_000, seed=1)


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_conformance_million(cfg):
    _check(*cfg, count=1_000_000, seed=2)
