"""The DMA queues' port arbiter RTL (``ncrtl.hdl.dma.qos``) against its golden, cycle for
cycle, and its Verilog."""

import numpy as np
import pytest

from ncrtl.model.dma.qos import CLASSES, SLOTS, PortArbiter, slot_table


def _random_shares(rng):
    shares = [0] * CLASSES
    for _ in range(int(rng.integers(0, SLOTS + 1))):
        shares[int(rng.integers(0, CLASSES))] += 1
    return shares


@pytest.mark.parametrize("seed", range(3))
def test_port_arbiter_rtl_matches_the_golden_every_cycle(seed):
    """:class:`ncrtl.hdl.dma.qos.PortArbiter` in the Amaranth simulator: random calendars and
    random requests, the grant equal to the golden's in every cycle."""
    from amaranth.sim import Simulator

    from ncrtl.hdl.dma.qos import PortArbiter as Rtl

    rng = np.random.default_rng(seed)
    dut = Rtl()
    shares = _random_shares(rng) if seed else [0, 0, 0, 0]
    table = slot_table(shares)
    gold = PortArbiter(table)

    async def bench(ctx):
        ctx.set(
            dut.calendar,
            [{"owned": int(o is not None), "klass": o or 0} for o in table],
        )
        for cycle in range(600):
            req = [bool(rng.random() < 0.5) for _ in range(CLASSES)]
            ctx.set(dut.requests, sum(int(r) << c for c, r in enumerate(req)))
            await ctx.delay(1e-9)
            want = gold.step(req)
            assert ctx.get(dut.slot) == cycle % SLOTS
            assert ctx.get(dut.grant) == (0 if want is None else 1 << want), cycle
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.synth
def test_port_arbiter_verilog_lint_clean_and_latch_free():
    from ncrtl.hdl.dma.qos import PortArbiter as Rtl
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.lint import lint_verilog, synth_check

    top = "port_arbiter"
    lint_verilog(convert(Rtl(), top), top).check()
    synth_check(convert(Rtl(), top, synthesis=True), top).check()
