"""PSUM RTL vs the golden (``ncrtl.model.psum``) through cocotb on Verilator: values bit for bit, error
codes and cycles, group-complete events, arbitration (``o_grant`` vs ``ncrtl.model.psum.Arbiter``), the
final memory, and one beat per cycle in the stall-free phases.

The ``psum`` group (small geometries) runs in ``make test``; the full 128 x 8 x 2 KiB PSUM runs in
the slow suite.
"""

import pytest

from ncrtl import blocks
from ncrtl.testbench.conformance import run_block

GROUP = [p for _, p in blocks.GROUPS["psum"]]


def _id(p):
    return f"{p['partitions']}x{p['banks']}x{p['bank_bytes']}"


def _check(res):
    assert res.passed, res.report()
    names = {u["name"] for u in res.units}
    for board in (
        "psum.grant",
        "psum.handshakes",
        "psum.ve_read",
        "psum.se_read",
        "psum.ve_final",
        "psum.se_final",
        "psum.errors",
        "psum.done",
        "psum.full_rate",
    ):
        assert board in names, board
    c = res.counters
    # The no-bubble phases ran at one beat per cycle (also checked by psum.full_rate).
    for phase in ("hammer", "full_rate", "seeds"):
        assert c[f"{phase}_beats"] == c[f"{phase}_cycles"] > 0, phase
    # Full contention on one bank: the TE and the VE port take turns.
    assert abs(c["contention_te"] - c["contention_ve"]) <= 1


def _run(params, count, seed, stall):
    block = blocks.get("psum")
    p = block.resolve({k: str(v) for k, v in params.items()})
    return run_block(block, p, count=count, seed=seed, stall=stall)


@pytest.mark.sim
@pytest.mark.parametrize("params", GROUP, ids=_id)
def test_psum_group(params):
    """About 2500 random TE beats (plus the fixed phases) with 25 % stalls and backpressure."""
    res = _run(params, count=2500, seed=3, stall=0.25)
    _check(res)
    assert res.counters["te_beats"] >= 2500


@pytest.mark.sim
@pytest.mark.slow
def test_psum_full_size():
    """128 partitions x 8 banks x 2 KiB, the hardware geometry."""
    res = _run({"partitions": 128, "banks": 8, "bank_bytes": 2048}, count=1500, seed=5, stall=0.2)
    _check(res)
