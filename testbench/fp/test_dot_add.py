"""cocotb conformance of :class:`ncrtl.hdl.fp.dot_add.FusedDotAdd` against ``ncrtl.model.fp.fp32_dot_add``.

Run through :mod:`ncrtl.testbench.conformance` (``ncrtl conformance fp.dot_add --param mode=mx``): the
block parameters, vector count, seed and stall probability come from the environment.  For every
pair of formats the mode accepts, a corner block (exhaustive code pairs where both formats are
FP8/FP4 and equal) and ``count / pairs`` random vectors stream through the unit with random stalls
and backpressure; every result is compared bit for bit with the golden.
"""

import itertools

import cocotb
import numpy as np

from ncrtl.blocks import get
from ncrtl.model.fp import fp32_dot_add, from_bits, get_format
from ncrtl.model.modes import get_mode
from ncrtl.testbench.conformance import tb_settings as settings
from ncrtl.testbench.fp.vectors import dot_add_vectors
from ncrtl.testbench.lanes import LanesTB
from ncrtl.testbench.scoreboard import Scoreboard


def golden(psum, a, b, fa, fb, scale_exp, scale_nan):
    """FP32 result bits the contract gives for one format pair."""
    out = fp32_dot_add(
        psum.view(np.float32),
        from_bits(a, fa),
        from_bits(b, fb),
        a_format=fa,
        b_format=fb,
        scale_exp=scale_exp,
        scale_nan=scale_nan,
    ).view(np.uint32)
    return out


class DotAddTB(LanesTB):
    """Streams per-format-pair vector sets through the fused dot-add lanes."""

    def __init__(self, dut, params, *, stall, seed):
        self.params = params
        mode = get_mode(params["mode"])
        self.formats_a, self.formats_b = mode.formats_s, mode.formats_m
        self.k, self.scale = mode.products, mode.scale
        super().__init__(dut, get("fp.dot_add").component(params), stall=stall, seed=seed)

    def fields(self, psum, a, b, ia, ib, scale_exp, scale_nan):
        """Per-operation port values, named as the unit's ``i_*`` ports."""
        wa = max(get_format(f).container_bits for f in self.formats_a)
        wb = max(get_format(f).container_bits for f in self.formats_b)
        pack = lambda x, w: sum(x[:, i].astype(object) << (i * w) for i in range(self.k))
        f = {"i_psum": psum, "i_a": pack(a, wa), "i_b": pack(b, wb)}
        if len(self.formats_a) > 1:
            f["i_fmt_a"] = np.full(len(psum), ia)
        if len(self.formats_b) > 1:
            f["i_fmt_b"] = np.full(len(psum), ib)
        if self.scale:
            f["i_scale_exp"] = scale_exp
            f["i_scale_nan"] = scale_nan.astype(np.int64)
        return f


@cocotb.test()
async def test_dot_add(dut):
    """Every format pair of the mode: corners (or exhaustive pairs) plus random vectors."""
    params, count, seed, stall = settings()
    tb = DotAddTB(dut, params, stall=stall, seed=seed)
    await tb.reset()
    rng = np.random.default_rng(seed)
    pairs = list(itertools.product(range(len(tb.formats_a)), range(len(tb.formats_b))))
    per_pair = max(1, count // len(pairs))
    for ia, ib in pairs:
        fa, fb = tb.formats_a[ia], tb.formats_b[ib]
        psum, a, b, se = dot_add_vectors(
            rng, fa, fb, tb.k, per_pair, scale=tb.scale, exhaustive=(fa == fb)
        )
        snan = (rng.random(len(psum)) < 0.01) if tb.scale else np.zeros(len(psum), bool)
        got = await tb.run(tb.fields(psum, a, b, ia, ib, se, snan))
        sb = Scoreboard(
            f"dot_add.{fa}x{fb}",
            "fp32",
            bits=32,
            decode=lambda x: np.asarray(x, np.uint32).view(np.float32),
        )
        want = golden(psum, a, b, fa, fb, se if tb.scale else None, snan)
        sb.compare(
            got["o_result"].astype(np.int64),
            want,
            inputs=(psum, a, b, se) if tb.scale else (psum, a, b),
        )
        sb.write_json()
        dut._log.info(sb.report())
        sb.assert_clean()
    tb.record_cycles()
