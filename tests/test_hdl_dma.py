"""The DMA engine's RTL in the Amaranth simulator: the address generator against the golden
runs (:func:`ncrtl.model.dma.agu.runs`), random patterns, random stalls on its output."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from ncrtl.hdl.dma.agu import AddressGenerator
from ncrtl.model.dma import Side, Space
from ncrtl.model.dma.agu import command_fields, pattern_bounds, runs


def _random_side(rng, space, esize):
    """A random legal side: 1-5 pattern entries, negative and zero steps, inside its tensor."""
    while True:
        dims = int(rng.integers(1, 6))
        pat = [(int(rng.integers(-5, 6)), int(rng.integers(1, 5))) for _ in range(dims)]
        if rng.random() < 0.5 and (dims > 1 or space == Space.HBM):
            pat[-1] = (1, int(rng.integers(1, 40)))  # often a contiguous run, as in real use
        if space == Space.SBUF:
            rows = pat[0][1] + int(rng.integers(0, 3))
            lo, hi = pattern_bounds(pat, 1)
            row = int(rng.integers(hi - lo + 1, hi - lo + 20))
            pat[0] = (row, pat[0][1])
            off = int(rng.integers(0, rows - pat[0][1] + 1)) * row + int(
                rng.integers(-lo, row - hi)
            )
            return Side(
                space,
                int(rng.integers(0, 8)) * esize,
                row=row,
                extent=rows * row,
                pattern=pat,
                esize=esize,
                offset=off,
                partition=int(rng.integers(0, 4)),
            )
        lo, hi = pattern_bounds(pat)
        extent = hi - lo + 1 + int(rng.integers(0, 30))
        row = 1
        return Side(
            space,
            int(rng.integers(0, 64)) * esize,
            row=row,
            extent=extent,
            pattern=pat,
            esize=esize,
            offset=int(rng.integers(-lo, extent - hi)),
        )


def _play(dut, commands, stall, seed):
    """Feed ``commands`` and collect every run, with random idle cycles on ``run.ready``."""
    rng = np.random.default_rng(seed)
    got = []

    async def bench(ctx):
        for fields in commands:
            ctx.set(dut.cmd.payload, fields)
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            runs_ = []
            while True:
                ready = int(rng.random() >= stall)
                ctx.set(dut.run.ready, ready)
                await ctx.delay(1e-9)
                fire = ready and ctx.get(dut.run.valid)
                if fire:
                    p = ctx.get(dut.run.payload)
                    runs_.append((p.partition, p.addr, p.bytes, p.last))
                await ctx.tick()
                if fire and runs_[-1][3]:
                    break
            got.append(runs_)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("word_bytes", [4, 16])
def test_address_generator_matches_the_golden_runs(word_bytes):
    rng = np.random.default_rng(word_bytes)
    dut = AddressGenerator(word_bytes, addr_bits=16, count_bits=8, part_bits=4)
    sides = [
        _random_side(rng, space, esize)
        for space in (Space.HBM, Space.SBUF)
        for esize in (1, 2, 4)
        for _ in range(12)
    ]
    got = _play(dut, [command_fields(s) for s in sides], stall=0.3, seed=1)
    for side, g in zip(sides, got):
        want = runs(side, word_bytes)
        have = np.array([(p, a, b) for p, a, b, _ in g], dtype=np.int64).reshape(-1, 3)
        assert np.array_equal(have, want), (side, have[:6], want[:6])
        assert [last for *_, last in g] == [0] * (len(g) - 1) + [1]
