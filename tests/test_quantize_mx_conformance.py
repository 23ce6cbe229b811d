"""QuantizeMX RTL vs the golden (``ncrtl.model.vector_engine``) through cocotb on Verilator, bit for bit.

The testbench (``ncrtl.testbench.vector_engine.test_quantize_mx``) streams every BF16 and every
FP16 code (in code order and shuffled), the corner groups and random groups through all 12
configurations (source format x element format x scale rule) and beats with an invalid element
format, with random stalls and backpressure.  ``make test`` runs 4 groups per beat; the slow
suite runs the hardware rate, 16 groups (128 partitions) per beat, with more random groups.
"""

import pytest

from ncrtl import blocks
from ncrtl.testbench.conformance import run_block

#: Groups of every source code (each once in code order, once shuffled) per configuration.
EVERY_CODE = 2 * (1 << 16) // 32


def _check(groups, count, seed, stall):
    block = blocks.get("quantize_mx")
    res = run_block(
        block, block.resolve({"groups": str(groups)}), count=count, seed=seed, stall=stall
    )
    assert res.passed, res.report()
    units = {u["name"]: u for u in res.units}
    assert len(units) == 1 + 12 * 2 + 1, sorted(units)
    beats = res.counters["beats"]
    assert units["qmx.beats"]["vectors"] == beats + 1  # the count, then one flag per beat
    for name, u in units.items():
        if name.endswith(".scale"):
            # Every code of the source format, plus the corners and the random groups.
            assert u["vectors"] >= EVERY_CODE + count // 12, (name, u["vectors"])
    assert units["qmx.invalid"]["vectors"] > 0


@pytest.mark.sim
def test_conformance_4_groups():
    _check(groups=4, count=2400, seed=1, stall=0.25)


@pytest.mark.sim
@pytest.mark.slow
def test_conformance_hardware_rate():
    """16 groups per beat: the 128 partitions x 4 elements of one cycle."""
    _check(groups=16, count=120_000, seed=2, stall=0.2)
