"""cocotb conformance of :class:`ncrtl.hdl.fp.xorwow.Xorwow` against ``ncrtl.model.fp.Xorwow``.

Each lane is one generator.  Every beat may load the state of a fresh 64-bit seed (expanded by
``Xorwow.seed_state``, as software does), step the generator, both or neither; the output beat is
``v + d`` of the state after it, which must equal the model's state after the same operations
(after a step it is the value ``next_u32`` returned).
"""

import cocotb
import numpy as np

from ncrtl.blocks import get
from ncrtl.hdl.fp.xorwow import pack_state
from ncrtl.model.fp import Xorwow
from ncrtl.testbench.conformance import tb_settings as settings
from ncrtl.testbench.lanes import LanesTB
from ncrtl.testbench.scoreboard import Scoreboard


def xorwow_program(rng, n):
    """Per operation: (load, next, seed); the first operation of the stream loads and steps."""
    load = rng.random(n) < 0.01
    nxt = rng.random(n) < 0.85
    load[0] = nxt[0] = True
    seeds = rng.integers(0, 1 << 63, n, dtype=np.uint64) * 2 + rng.integers(0, 2, n).astype(
        np.uint64
    )
    return load, nxt, seeds


def golden_outputs(load, nxt, seeds):
    """``v + d`` after each operation, from the model (one generator)."""
    out = np.zeros(len(load), dtype=np.uint64)
    gen = None
    for i in range(len(load)):
        if load[i]:
            gen = Xorwow(int(seeds[i]))
        if nxt[i]:
            value = int(gen.next_u32())
        x, y, z, w, v, d = (int(a) for a in gen.state())
        out[i] = (v + d) & 0xFFFFFFFF
        if nxt[i]:
            assert out[i] == value  # next_u32 returns v + d of the stepped state
    return out


class XorwowTB(LanesTB):
    def __init__(self, dut, params, *, stall, seed):
        super().__init__(dut, get("fp.xorwow").component(params), stall=stall, seed=seed)


@cocotb.test()
async def test_xorwow(dut):
    """Random loads, steps and holds on every lane; every output word bit for bit."""
    params, count, seed, stall = settings()
    tb = XorwowTB(dut, params, stall=stall, seed=seed)
    await tb.reset()
    rng = np.random.default_rng(seed)
    lanes = tb.lanes
    beats = max(1, count // lanes)
    programs = [xorwow_program(rng, beats) for _ in range(lanes)]
    # Operation i of lane l is element i * lanes + l of the flat stream.
    load = np.stack([p[0] for p in programs], axis=1).reshape(-1)
    nxt = np.stack([p[1] for p in programs], axis=1).reshape(-1)
    seeds = np.stack([p[2] for p in programs], axis=1).reshape(-1)
    state = np.array(
        [pack_state(Xorwow.seed_state(int(s))) if ld else 0 for s, ld in zip(seeds, load)],
        dtype=object,
    )
    out = await tb.run({"i_state": state, "i_load": load.astype(int), "i_next": nxt.astype(int)})
    want = np.stack([golden_outputs(*p) for p in programs], axis=1).reshape(-1)
    sb = Scoreboard("xorwow", "u32", bits=32)
    sb.compare(
        out["o_value"].astype(np.int64),
        want.astype(np.int64),
        inputs=(load.astype(int), nxt.astype(int)),
    )
    sb.write_json()
    tb.record_cycles()
    dut._log.info(sb.report())
    sb.assert_clean()
