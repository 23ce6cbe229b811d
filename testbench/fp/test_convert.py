"""cocotb conformance of the FP32 converters (:mod:`ncrtl.hdl.fp.convert`) against the golden.

Every BF16 value as the upper half of an FP32 input, with low halves 0, 0x7FFF, 0x8000 (ties),
0x8001, 0xFFFF and a random one, plus ``count`` random FP32 encodings.  ``fp.bf16`` runs each
input through round-to-nearest-even and through stochastic rounding with random bits;
``fp.fp16`` through FP32 -> FP16 RNE.
"""

import cocotb
import ml_dtypes
import numpy as np

from ncrtl.blocks import get
from ncrtl.model.fp import fp32_to_bf16, fp32_to_fp16, to_bits
from ncrtl.testbench.conformance import tb_block
from ncrtl.testbench.conformance import tb_settings as settings
from ncrtl.testbench.fp.vectors import random_codes
from ncrtl.testbench.lanes import LanesTB
from ncrtl.testbench.scoreboard import Scoreboard


def convert_inputs(rng, count):
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = [
        np.zeros_like(hi),
        hi * 0 + 0x7FFF,
        hi * 0 + 0x8000,
        hi * 0 + 0x8001,
        hi * 0 + 0xFFFF,
        rng.integers(0, 1 << 16, hi.size).astype(np.uint32),
    ]
    x = np.concatenate([hi | lo for lo in lows] + [random_codes(rng, "fp32", count)])
    return x.astype(np.uint32)


class ConvertTB(LanesTB):
    def __init__(self, dut, block, params, *, stall, seed):
        self.block = block
        super().__init__(dut, get(block).component(params), stall=stall, seed=seed)


def _board(name, fmt, bits16):
    view = ml_dtypes.bfloat16 if fmt == "bf16" else np.float16
    return Scoreboard(
        name, fmt, bits=16, decode=lambda x: np.asarray(x, np.uint16).view(view).astype(np.float32)
    )


@cocotb.test()
async def test_convert(dut):
    """All BF16 upper halves x tie-making low halves, plus random FP32."""
    params, count, seed, stall = settings()
    block = tb_block()
    tb = ConvertTB(dut, block, params, stall=stall, seed=seed)
    await tb.reset()
    rng = np.random.default_rng(seed)
    x = convert_inputs(rng, count)
    boards = []
    if block == "fp.bf16":
        n = x.size
        for mode, name in ((0, "bf16.rne"), (1, "bf16.sr")):
            r = rng.integers(0, 1 << 16, n)
            out = await tb.run({"i_value": x, "i_mode": np.full(n, mode), "i_rand": r})
            if mode == 0:
                want = to_bits(fp32_to_bf16(x.view(np.float32)))
            else:
                want = to_bits(fp32_to_bf16(x.view(np.float32), "sr", r))
            sb = _board(name, "bf16", 16)
            sb.compare(out["o_result"].astype(np.int64), want, inputs=(x, r) if mode else x)
            boards.append(sb)
    elif block == "fp.fp16":
        out = await tb.run({"i_value": x})
        sb = _board("fp16.rne", "fp16", 16)
        sb.compare(
            out["o_result"].astype(np.int64), to_bits(fp32_to_fp16(x.view(np.float32))), inputs=x
        )
        boards.append(sb)
    else:
        raise ValueError(f"test_convert checks fp.bf16 or fp.fp16, not {block!r}")
    for sb in boards:
        sb.write_json()
        dut._log.info(sb.report())
    tb.record_cycles()
    for sb in boards:
        sb.assert_clean()
