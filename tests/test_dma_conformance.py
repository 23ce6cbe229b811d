"""DMA engine with its SBUF vs the golden (``ncrtl.model.dma``) through cocotb on Verilator:
random copies, DMA transposes and read-add-writes, some out of bounds, with random stalls and an
AXI4 memory model with latency; completions and both whole memories after every descriptor, bit
for bit, and no AXI4 beat lost or duplicated.

The ``dma`` group (small SBUF and device memory) runs in ``make test``; a 128-partition SBUF in
the slow suite.
"""

import pytest

from ncrtl import blocks
from ncrtl.testbench.conformance import run_block

GROUP = [p for _, p in blocks.GROUPS["dma"]]
#: make test builds one geometry (the 16-byte data path; the engine's Amaranth-simulator tests
#: cover 4- and 8-byte paths); the slow suite runs the whole group.
FAST = GROUP[-1:]


def _check(res, n):
    assert res.passed, res.report()
    units = {u["name"]: u for u in res.units}
    assert set(units) == {"dma.status", "dma.sbuf", "dma.hbm"}
    assert res.counters["descriptors"] == n


@pytest.mark.sim
@pytest.mark.parametrize(
    "params", FAST, ids=lambda p: f"w{p['word_bytes']}_{p['partitions']}x{p['partition_bytes']}"
)
@pytest.mark.parametrize("stall", [0.0, 0.3])
def test_dma_random_descriptors(params, stall):
    block = blocks.get("dma")
    p = block.resolve({k: str(v) for k, v in params.items()})
    res = run_block(block, p, count=60, seed=7, stall=stall)
    _check(res, 60)


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("params", GROUP, ids=lambda p: f"w{p['word_bytes']}_{p['partitions']}")
def test_dma_group_with_stalls(params):
    block = blocks.get("dma")
    p = block.resolve({k: str(v) for k, v in params.items()})
    _check(run_block(block, p, count=200, seed=11, stall=0.3), 200)


@pytest.mark.sim
@pytest.mark.slow
def test_dma_128_partitions():
    block = blocks.get("dma")
    p = block.resolve({"partitions": "128", "partition_bytes": "2048", "hbm_bytes": "65536"})
    res = run_block(block, p, count=100, seed=3, stall=0.2)
    _check(res, 100)
