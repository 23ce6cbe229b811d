"""The DMA engines of a core (``ncrtl.hdl.dma.core.DmaCore``): two DGEs and precomputed
descriptors feeding the engines on a multi-port SBUF, completions counted on semaphores,
against the golden."""

import numpy as np
import pytest

from ncrtl.model.dma import Geometry, Memories, execute
from ncrtl.model.dma.dge import generate
from ncrtl.model.dma.isa import Error, encode
from ncrtl.testbench.dma.program import queue_program

GEO = Geometry(8, 256, 4096)
W = 8


def _run(engines, seed, stall, n=8):
    from amaranth.sim import Simulator

    from ncrtl.blocks import dma_widths
    from ncrtl.hdl.common.axi import sim_memory
    from ncrtl.hdl.dma.core import DmaCore
    from ncrtl.hdl.dma.sbuf import sim_load, sim_read

    rng = np.random.default_rng(seed)
    dut = DmaCore(
        W,
        engines=engines,
        widths=dma_widths(GEO.hbm_bytes, GEO.partitions),
        partitions=GEO.partitions,
        partition_bytes=GEO.partition_bytes,
        hbm_bytes=GEO.hbm_bytes,
        overhead=3,
        outstanding=4,
        dge_cycles=6,
        semaphores=4,
    )
    mem = Memories(
        rng.integers(0, 256, (GEO.partitions, GEO.partition_bytes), dtype=np.uint8),
        rng.integers(0, 256, GEO.hbm_bytes, dtype=np.uint8),
    )
    # three streams in their own regions: DGE 0, DGE 1, precomputed descriptors
    program = queue_program(rng, GEO, 3, n, word_bytes=W)
    gold = mem
    want = {0: [], 1: [], 2: []}
    for s, descs in enumerate(program):
        for d in descs:
            g = generate(d, GEO, engines)
            gold, code, _ = execute(d, GEO, gold)
            want[s].append((d.tag, int(g.error), g.count) if s < 2 else (d.tag, int(code)))
    hbm = mem.hbm.copy()
    got = {0: [], 1: [], 2: []}
    loaded = {"done": False}
    stats = {"together": 0}
    finished = {"streams": 0}

    async def wait_sem(ctx, s, target):
        n = 0
        while ctx.get(dut.sem[s]) != target & 0xFFFF:
            await ctx.tick()
            n += 1
            assert n < 20_000, f"semaphore {s} stuck at {ctx.get(dut.sem[s])}, want {target}"

    def dge_stream(d):
        async def run(ctx):
            while not loaded["done"]:
                await ctx.tick()
            instr, status = getattr(dut, f"instr{d}"), getattr(dut, f"dge_status{d}")
            target = 0
            for desc in program[d]:
                ctx.set(instr.payload, {"sem": d, "desc": encode(desc)})
                ctx.set(instr.valid, 1)
                await ctx.tick().until(instr.ready)
                ctx.set(instr.valid, 0)
                ctx.set(status.ready, 1)
                while True:  # the status, read in the cycle it is taken
                    await ctx.delay(1e-9)
                    if ctx.get(status.valid):
                        p = ctx.get(status.payload)
                        await ctx.tick()
                        break
                    await ctx.tick()
                ctx.set(status.ready, 0)
                got[d].append((p.tag, p.error, p.parts))
                target += p.parts
                await wait_sem(ctx, d, target)  # the consumer: its parts are all done
                if stall and rng.random() < stall:
                    await ctx.tick()
            finished["streams"] += 1

        return run

    async def direct_stream(ctx):
        while not loaded["done"]:
            await ctx.tick()
        for i, desc in enumerate(program[2]):
            k = int(rng.integers(0, engines))
            ctx.set(dut.direct.payload, {"engine": k, "sem": 2, "desc": encode(desc)})
            ctx.set(dut.direct.valid, 1)
            await ctx.tick().until(dut.direct.ready)
            ctx.set(dut.direct.valid, 0)
            await wait_sem(ctx, 2, i + 1)
            got[2].append((desc.tag, ctx.get(dut.sem_error[2])))
        finished["streams"] += 1

    async def main(ctx):
        await sim_load(ctx, dut, mem.sbuf)
        loaded["done"] = True
        while finished["streams"] < 3:
            busy = sum(
                ctx.get(dut.axi(k).ar.valid) or ctx.get(dut.axi(k).aw.valid) for k in range(engines)
            )
            stats["together"] += busy > 1
            await ctx.tick()
        for _ in range(20):
            await ctx.tick()
        back = await sim_read(ctx, dut)
        assert np.array_equal(back, gold.sbuf), "SBUF differs from the golden"

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(main)
    sim.add_testbench(dge_stream(0))
    sim.add_testbench(dge_stream(1))
    sim.add_testbench(direct_stream)
    for k in range(engines):
        rd, wr = sim_memory(dut.axi(k), hbm, W, latency=3, stall=stall, rng=rng)
        sim.add_testbench(rd, background=True)
        sim.add_testbench(wr, background=True)
    sim.run()
    assert np.array_equal(hbm, gold.hbm), "device memory differs from the golden"
    for s in (0, 1):
        assert got[s] == want[s], f"DGE {s}"
    # a precomputed descriptor's error code lands in sem_error (the last one so far)
    last = 0
    for (tag, code), (_, err) in zip(want[2], got[2]):
        last = code or last
        assert err == last, tag
    return want, stats


@pytest.mark.parametrize(("engines", "seed", "stall"), [(4, 0, 0.0), (2, 1, 0.3)])
def test_core_engines_against_the_golden(engines, seed, stall):
    """Two DGE streams and a precomputed-descriptor stream at once, each in its own region,
    each instruction waited for on its semaphore: the DGEs' statuses (code and part count),
    the semaphores, the error record, both memories bit for bit; engines busy at the same
    time."""
    want, stats = _run(engines, seed, stall)
    assert max(c for _, _, c in want[0] + want[1]) > 1
    assert any(e != Error.NONE for _, e, _ in want[0] + want[1])
    assert stats["together"] > 20


def test_core_verilog_lint_clean():
    """Lint-clean under ``verilator --lint-only -Wall`` with two engines; the engines' and the
    SBUF's synthesis are checked on their own."""
    from ncrtl.blocks import dma_widths
    from ncrtl.hdl.dma.core import DmaCore
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.lint import lint_verilog

    dut = DmaCore(
        4,
        engines=2,
        widths=dma_widths(1024, 4),
        partitions=4,
        partition_bytes=64,
        hbm_bytes=1024,
        outstanding=4,
        dge_cycles=4,
        semaphores=2,
        instance=True,
    )
    lint_verilog(convert(dut, "dma_core"), "dma_core").check()
