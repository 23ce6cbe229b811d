"""The sendrecv unit RTL (``ncrtl.hdl.dma.sendrecv.SendRecv``): two units, each with its SBUF,
linked as the two cores of an LNC = 2 logical core, against the golden
:func:`ncrtl.model.dma.sendrecv.exchange`."""

import numpy as np
import pytest

from ncrtl.hdl.dma.sendrecv import SendRecv as Unit
from ncrtl.hdl.dma.sendrecv import encode_sendrecv
from ncrtl.model.dma.sendrecv import PENDING, Code, exchange
from ncrtl.testbench.dma.program import SENDRECV_SLOT, sendrecv_program

P, B, W, PIPES, DEPTH = 16, 512, 8, 4, 4
SLOT = SENDRECV_SLOT  # bytes per partition of each destination slot (upper half)


def _run(seed, stall, n_pairs=15, broken=0.3):
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.sim import Simulator

    from ncrtl.hdl.sbuf.memory import Sbuf, sim_load, sim_read

    rng = np.random.default_rng(seed)
    programs = sendrecv_program(rng, P, B, PIPES, DEPTH, n_pairs, broken=broken, slot=SLOT)
    sbufs = [rng.integers(0, 256, (P, B), dtype=np.uint8) for _ in range(2)]
    want, codes, _ = exchange(programs, sbufs)

    m = Module()
    units = [Unit(W, partitions=P, partition_bytes=B, pipes=PIPES, depth=DEPTH) for _ in range(2)]
    sbs = [Sbuf(P, B, W) for _ in range(2)]
    from amaranth.hdl import Signal

    stall_bits = [Signal(name=f"stall{r}") for r in range(2)]
    for r in range(2):
        m.submodules[f"unit{r}"] = units[r]
        m.submodules[f"sbuf{r}"] = sbs[r]
        wiring.connect(m, units[r].sbuf_req, sbs[r].dma_req)
        wiring.connect(m, sbs[r].dma_resp, units[r].sbuf_resp)
        m.d.comb += units[r].rank.eq(r)
        a, b = units[r].tx, units[1 - r].rx  # the link r -> 1 - r, stalled now and then
        m.d.comb += [
            b.payload.eq(a.payload),
            b.valid.eq(a.valid & ~stall_bits[r]),
            a.ready.eq(b.ready & ~stall_bits[r]),
        ]
    got = [[], []]
    done = {"loaded": 0}
    expected = [sum(c is not PENDING for c in codes[r]) for r in (0, 1)]

    def feeder(r):
        async def run(ctx):
            await sim_load(ctx, sbs[r], sbufs[r])
            done["loaded"] += 1
            while done["loaded"] < 2:
                await ctx.tick()
            for op in programs[r]:
                ctx.set(units[r].op.payload, encode_sendrecv(op))
                ctx.set(units[r].op.valid, 1)
                await ctx.tick().until(units[r].op.ready)
                ctx.set(units[r].op.valid, 0)
                if stall and rng.random() < stall:
                    await ctx.tick()

        return run

    async def drain(ctx):
        cycle = 0
        while any(len(got[r]) < expected[r] for r in (0, 1)):
            assert cycle < 100_000, f"stopped: {got}"
            for r in (0, 1):
                ctx.set(stall_bits[r], int(rng.random() < stall))
                ctx.set(units[r].status.ready, int(rng.random() >= stall))
            await ctx.delay(1e-9)
            for r in (0, 1):
                if ctx.get(units[r].status.valid) and ctx.get(units[r].status.ready):
                    s = ctx.get(units[r].status.payload)
                    got[r].append((s.pipe, s.tag, s.code))
            await ctx.tick()
            cycle += 1
        for r in (0, 1):
            ctx.set(units[r].status.ready, 1)
            ctx.set(stall_bits[r], 0)
        for _ in range(200):  # the lone sendrecv stays pending
            await ctx.tick()
            for r in (0, 1):
                assert not ctx.get(units[r].status.valid), "a sendrecv without partner completed"
        for r in (0, 1):
            back = await sim_read(ctx, sbs[r])
            assert np.array_equal(back, want[r]), f"core {r}: SBUF differs from the golden"

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(feeder(0))
    sim.add_testbench(feeder(1))
    sim.add_testbench(drain)
    sim.run()
    for r in (0, 1):
        for pipe in range(PIPES):
            mine = [(t, c) for p, t, c in got[r] if p == pipe]
            gold = [
                (op.tag, int(c))
                for op, c in zip(programs[r], codes[r])
                if op.pipe_id == pipe and c is not PENDING
            ]
            assert mine == gold, f"core {r} pipe {pipe}"
    return codes


@pytest.mark.long
@pytest.mark.parametrize(
    ("seed", "stall"),
    [(0, 0.0), (1, 0.3), pytest.param(2, 0.5, marks=pytest.mark.slow)],
)
def test_two_cores_exchange_like_the_golden(seed, stall):
    """Two units linked as the two cores: random pairs on random pipes posted in different
    orders on the two cores, a third of them with a rule broken on one side, random stalls
    on the link, the statuses and the op streams; every completion (pipe, tag, code) in each
    pipe's order, both SBUFs bit for bit, and a sendrecv without a partner never completes
    while the others do."""
    codes = _run(seed, stall)
    seen = {c for cs in codes for c in cs if c is not PENDING}
    assert Code.NONE in seen and len(seen) >= 3, seen


@pytest.mark.synth
def test_sendrecv_verilog_lint_clean():
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.lint import lint_verilog

    lint_verilog(
        convert(Unit(W, partitions=P, partition_bytes=B, pipes=PIPES), "sendrecv"), "sendrecv"
    ).check()
