"""cocotb conformance of :class:`ncrtl.hdl.fp.add.Fp32Add` against ``ncrtl.model.fp.fp32_add``.

Vectors: the FP32 corner cross product, near-cancelling pairs (``b = -a`` nudged by a few ulps),
pairs a few binades apart (alignment, ties, carries) and uniformly random encodings.
"""

import cocotb
import numpy as np

from ncrtl.blocks import get
from ncrtl.model.fp import fp32_add
from ncrtl.testbench.conformance import tb_settings as settings
from ncrtl.testbench.fp.vectors import fp32_corner_codes, random_codes
from ncrtl.testbench.lanes import LanesTB
from ncrtl.testbench.scoreboard import Scoreboard


def add_vectors(rng, count):
    c = fp32_corner_codes()
    a = [np.repeat(c, len(c))]
    b = [np.tile(c, len(c))]
    third = max(1, count // 3)
    x = random_codes(rng, "fp32", third).astype(np.int64)
    a.append(x)
    b.append((x ^ 0x80000000) + rng.integers(-4, 5, third))  # deep cancellation
    y = random_codes(rng, "fp32", third).astype(np.int64)
    a.append(y)
    b.append(y + (rng.integers(-26, 27, third) << 23) + rng.integers(-2, 3, third))  # alignment
    a.append(random_codes(rng, "fp32", count - 2 * third))
    b.append(random_codes(rng, "fp32", count - 2 * third))
    a = np.concatenate(a).astype(np.int64) & 0xFFFFFFFF
    b = np.concatenate(b).astype(np.int64) & 0xFFFFFFFF
    return a.astype(np.uint32), b.astype(np.uint32)


class AddTB(LanesTB):
    def __init__(self, dut, params, *, stall, seed):
        super().__init__(dut, get("fp.add").component(params), stall=stall, seed=seed)


@cocotb.test()
async def test_add(dut):
    """Corners, cancellation, alignment and random pairs, bit for bit."""
    params, count, seed, stall = settings()
    tb = AddTB(dut, params, stall=stall, seed=seed)
    await tb.reset()
    a, b = add_vectors(np.random.default_rng(seed), count)
    out = await tb.run({"i_a": a, "i_b": b})
    want = fp32_add(a.view(np.float32), b.view(np.float32)).view(np.uint32)
    sb = Scoreboard(
        "add.fp32", "fp32", bits=32, decode=lambda x: np.asarray(x, np.uint32).view(np.float32)
    )
    sb.compare(out["o_result"].astype(np.int64), want, inputs=(a, b))
    sb.write_json()
    tb.record_cycles()
    dut._log.info(sb.report())
    sb.assert_clean()
