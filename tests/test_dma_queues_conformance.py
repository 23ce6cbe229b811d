"""``DmaQueuesSystem`` vs the golden through cocotb on Verilator (``ncrtl conformance
dma_queues``): several queues at once with random classes, shares and stalls; each queue's
completions in order, the memories and the completion counters bit for bit."""

import pytest

from ncrtl import blocks
from ncrtl.testbench.conformance import run_block

GROUP = [p for _, p in blocks.GROUPS["dma_queues"]]


def _check(res, n):
    assert res.passed, res.report()
    units = {u["name"] for u in res.units}
    assert units == {"dma_queues.status", "dma_queues.done", "dma_queues.sbuf", "dma_queues.hbm"}
    assert res.counters["descriptors"] >= n


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("params", GROUP, ids=lambda p: p["policy"])
def test_dma_queues_with_stalls(params):
    block = blocks.get("dma_queues")
    p = block.resolve({k: str(v) for k, v in params.items()})
    _check(run_block(block, p, count=80, seed=5, stall=0.3), 60)
