"""The DMA engines of a core (``ncrtl.hdl.dma.core.DmaCore``): two DGEs and precomputed
descriptors feeding the engines on a multi-port SBUF, completions counted on semaphores,
against the golden."""

import numpy as np
import pytest

from ncrtl.model.dma import Descriptor, Geometry, Op, Side, Space, execute
from ncrtl.model.dma.dge import generate
from ncrtl.model.dma.isa import Error, encode
from ncrtl.testbench.dma.core_bench import make_core
from ncrtl.testbench.dma.program import queue_program, random_memories

GEO = Geometry(8, 256, 4096)
W = 8


def _core(engines, rng, depth=2):
    """The core under test (8 partitions, 8-byte words, overhead 3, 4 reads in flight, DGE
    cycles 6, 4 semaphores) and random memories for it."""
    params = dict(overhead=3, outstanding=4, dge_cycles=6, semaphores=4, depth=depth)
    return make_core(GEO, engines, W, **params), random_memories(rng, GEO)


def _run(engines, seed, stall, n=8):
    from amaranth.sim import Simulator

    from ncrtl.hdl.common.axi import sim_memory
    from ncrtl.hdl.sbuf.memory import sim_load, sim_read

    rng = np.random.default_rng(seed)
    dut, mem = _core(engines, rng)
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
            # an engine moving data: an address, a read beat or a write beat on its port
            busy = sum(
                any(ctx.get(getattr(dut.axi(k), ch).valid) for ch in ("ar", "r", "aw", "w"))
                for k in range(engines)
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


@pytest.mark.synth
def test_core_verilog_lint_clean():
    """Lint-clean under ``verilator --lint-only -Wall`` with two engines; the engines' and the
    SBUF's synthesis are checked on their own."""
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.lint import lint_verilog

    geo = Geometry(4, 64, 1024)
    dut = make_core(geo, 2, 4, outstanding=4, dge_cycles=4, semaphores=2, instance=True)
    lint_verilog(convert(dut, "dma_core"), "dma_core").check()


def _timed(engines, seed, n=6, depth=2):
    """The RTL's cycles with every stream offered back to back and memories that never stall:
    per DGE ``(accepted, status taken)`` per instruction, per precomputed descriptor the cycle
    it was taken, per engine ``(accepted, completion)`` per descriptor."""
    from amaranth.sim import Simulator

    from ncrtl.hdl.common.axi import sim_memory
    from ncrtl.hdl.sbuf.memory import sim_load

    rng = np.random.default_rng(seed)
    dut, mem = _core(engines, rng, depth)
    program = queue_program(rng, GEO, 3, n, word_bytes=W)
    # SBUF-to-SBUF transposes in DGE 0's region: every engine reads every partition
    p = GEO.partitions
    for esize in (4, 2):
        src = Side(Space.SBUF, 0, p, p * p, [(p, p), (1, p)], esize)
        dst = Side(Space.SBUF, 8 * esize, p, p * p, [(p, p), (1, p)], esize)
        program[0].insert(1, Descriptor(Op.TRANSPOSE, src, dst))
    direct = [(int(rng.integers(0, engines)), 2, d) for d in program[2]]
    hbm = mem.hbm.copy()
    got = {"dge0": [], "dge1": [], "direct": [], "engines": [[] for _ in range(engines)]}
    state = {"start": None, "done": False}

    async def main(ctx):
        await sim_load(ctx, dut, mem.sbuf)
        for _ in range(seed % engines + 1):  # the streams start at some turn of the arbiter
            await ctx.tick()
        streams = [list(program[0]), list(program[1]), list(direct)]
        ports = [dut.instr0, dut.instr1, dut.direct]
        for p in (dut.dge_status0, dut.dge_status1):
            ctx.set(p.ready, 1)
        open_ = [None] * engines
        c = 0
        while True:
            for s, (port, items) in enumerate(zip(ports, streams)):
                if items:
                    d = items[0]
                    ctx.set(
                        port.payload,
                        {"sem": s, "desc": encode(d)}
                        if s < 2
                        else {"engine": d[0], "sem": 2, "desc": encode(d[2])},
                    )
                ctx.set(port.valid, int(bool(items)))
            await ctx.delay(1e-9)
            for s, port in enumerate(ports):
                if streams[s] and ctx.get(port.ready):
                    if state["start"] is None:
                        state["start"] = ctx.get(dut.sbuf.turn)
                    streams[s].pop(0)
                    got[("dge0", "dge1", "direct")[s]].append([c])
            for d, p in enumerate((dut.dge_status0, dut.dge_status1)):
                if ctx.get(p.valid):
                    got[f"dge{d}"][-1].append(c)
            for k, eng in enumerate(dut.dma_engines):
                if ctx.get(eng.desc.valid) and ctx.get(eng.desc.ready):
                    open_[k] = c
                if ctx.get(eng.status.valid):
                    got["engines"][k].append((open_[k], c))
            busy = any(streams) or any(
                ctx.get(e.desc.valid) or ctx.get(e.status.valid) for e in dut.dma_engines
            )
            idle = not busy and all(
                len(got[f"dge{d}"]) == len(program[d]) and len(got[f"dge{d}"][-1]) == 2
                for d in (0, 1)
            )
            if idle and sum(map(len, got["engines"])) == state.get("want", -1):
                break
            await ctx.tick()
            c += 1
            assert c < 50_000

    # how many completions to wait for: the DGEs' part counts and the precomputed ones
    from ncrtl.model.dma.dge import generate as gen

    state["want"] = sum(gen(d, GEO, engines).count for d in program[0] + program[1]) + len(direct)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(main)
    for k in range(engines):
        rd, wr = sim_memory(dut.axi(k), hbm, W, latency=3, rng=rng)
        sim.add_testbench(rd, background=True)
        sim.add_testbench(wr, background=True)
    sim.run()
    got["turn"] = state["start"]
    return mem, program, direct, got


@pytest.mark.parametrize(("engines", "seed", "depth"), [(4, 3, 2), (2, 4, 1)])
def test_core_timing_model(engines, seed, depth):
    """``ncrtl.model.dma.core.core_schedule`` against the RTL, cycle for cycle: every
    instruction's acceptance and status, every precomputed descriptor's entry, every engine's
    acceptance and completion of every descriptor, with both DGEs and the precomputed stream
    offered back to back (engines contending for the SBUF, queues full)."""
    from ncrtl.model.dma.core import core_schedule
    from ncrtl.model.dma.dge import DgeTiming
    from ncrtl.model.dma.timing import EngineTiming

    mem, program, direct, got = _timed(engines, seed, depth=depth)
    timing = EngineTiming(
        word_bytes=W, overhead=3, outstanding=4, part_bits=3, read_latency=3, write_latency=3
    )
    instrs, pre = core_schedule(
        [(d, 0) for d in program[0]],
        [(d, 1) for d in program[1]],
        direct,
        geo=GEO,
        mem=mem,
        engines=engines,
        depth=depth,
        timing=timing,
        dge=DgeTiming(6),
        turn=got["turn"],
    )
    t0 = got["dge0"][0][0]  # cycle 0 of the model: the streams' first offer
    for d in (0, 1):
        model = [[i.accepted + t0, i.status + t0] for i in instrs[d]]
        assert model == got[f"dge{d}"], f"DGE {d}"
    model_engines = [[] for _ in range(engines)]
    parts = [p for s in instrs for i in s for p in i.parts] + pre
    for p in sorted(parts, key=lambda p: p.accepted):
        model_engines[p.engine].append((p.accepted + t0, p.done + t0))
    assert model_engines == got["engines"]
    assert [[p.queued + t0] for p in pre] == got["direct"]
    # the schedule was busy: queues were waited on and engines overlapped
    assert any(p.accepted > p.queued + 1 for p in parts)
