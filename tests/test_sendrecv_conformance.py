"""``SendRecvPair`` vs the golden through cocotb on Verilator (``ncrtl conformance
sendrecv``): random two-core programs on random pipes with broken rules and an unpaired
sendrecv, random stalls on the streams and the link; completions per pipe in order, both
SBUFs bit for bit."""

import pytest

from ncrtl import blocks
from ncrtl.testbench.conformance import run_block

GROUP = [p for _, p in blocks.GROUPS["sendrecv"]]


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("params", GROUP, ids=lambda p: f"w{p['word_bytes']}")
def test_sendrecv_with_stalls(params):
    block = blocks.get("sendrecv")
    p = block.resolve({k: str(v) for k, v in params.items()})
    res = run_block(block, p, count=20, seed=3, stall=0.4)
    assert res.passed, res.report()
    assert {u["name"] for u in res.units} == {
        "sendrecv.status",
        "sendrecv.pending",
        "sendrecv.sbuf",
    }
    assert res.counters["pairs"] >= 10
