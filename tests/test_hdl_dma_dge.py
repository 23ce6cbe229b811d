"""The Descriptor Generation Engine RTL (``ncrtl.hdl.dma.dge.Dge``) against its golden
(``ncrtl.model.dma.dge``): every descriptor it makes, field for field, every status, and its
timing cycle for cycle."""

import numpy as np
import pytest
from amaranth.hdl import Const

from ncrtl.blocks import dma_widths
from ncrtl.hdl.dma.check import descriptor_layout
from ncrtl.hdl.dma.dge import Dge
from ncrtl.model.dma import Descriptor, Error, Geometry, Op, Side, Space
from ncrtl.model.dma.dge import DgeTiming, generate
from ncrtl.model.dma.isa import encode
from ncrtl.testbench.dma.program import random_descriptors, with_dynamic_offset


def _word(layout, desc):
    return Const.cast(layout.const(encode(desc))).value


def _instructions(rng, geo, n):
    """Random instructions of every kind (a few with dynamic offsets, which the DGE refuses),
    whole-partition copies and transposes that cut into many parts, and broken ones."""
    out = []
    hbm = np.zeros(geo.hbm_bytes, np.uint8)
    for i, d in enumerate(random_descriptors(rng, geo, n, word_bytes=8)):
        if rng.random() < 0.1 and d.op != Op.TRANSPOSE:
            d = with_dynamic_offset(rng, geo, d, hbm, 0)[1]
        out.append(d)
        if i % 5 == 0:  # a full-partition transfer
            p, b = geo.partitions, int(rng.integers(1, 9))
            step = int(rng.choice([1, -1]))
            sb = Side(Space.SBUF, 0, b, p * b, [(b, p), (step, b)], 2, 0 if step > 0 else b - 1)
            hb = Side(Space.HBM, 64 * int(rng.integers(0, 4)), b, p * b, [(b, p), (1, b)], 2)
            pick = rng.random()
            if pick < 0.3:
                out.append(Descriptor(Op.COPY, hb, sb, tag=i))
            elif pick < 0.5:  # into device-memory rows that overlap: one part, in order
                s = max(1, b - int(rng.integers(0, 2)))
                ob = Side(Space.HBM, 0, b, p * b, [(s, p), (1, b)], 2)
                out.append(Descriptor(Op.COPY, sb, ob, tag=i))
            else:
                tb = Side(Space.HBM, 0, p, b * p, [(p, b), (1, p)], 2)
                out.append(Descriptor(Op.TRANSPOSE, tb, sb, tag=i))
    return out


def _run(geo, engines, cycles, seed, stall):
    from amaranth.sim import Simulator

    rng = np.random.default_rng(seed)
    wd = dma_widths(geo.hbm_bytes, geo.partitions)
    dut = Dge(
        wd,
        engines=engines,
        cycles=cycles,
        partitions=geo.partitions,
        partition_bytes=geo.partition_bytes,
        hbm_bytes=geo.hbm_bytes,
    )
    layout = descriptor_layout(wd)
    instrs = _instructions(rng, geo, 40)
    want_parts, want_status = [], []
    for d in instrs:
        g = generate(d, geo, engines)
        want_parts += [(k, _word(layout, p)) for k, p in enumerate(g.parts)]
        want_status.append((d.tag, int(g.error), g.count))
    got_parts, got_status, times = [], [], {"accept": [], "part": [], "status": []}

    async def feed(ctx):
        for d in instrs:
            if stall and rng.random() < stall:
                await ctx.tick()
            ctx.set(dut.instr.payload, encode(d))
            ctx.set(dut.instr.valid, 1)
            await ctx.tick().until(dut.instr.ready)
            ctx.set(dut.instr.valid, 0)

    async def drain(ctx):
        cycle = 0
        while len(got_status) < len(instrs):
            assert cycle < 200_000, "the DGE stopped"
            take_part = int(rng.random() >= stall)
            take_status = int(rng.random() >= stall)
            ctx.set(dut.part.ready, take_part)
            ctx.set(dut.status.ready, take_status)
            await ctx.delay(1e-9)
            if ctx.get(dut.instr.valid) and ctx.get(dut.instr.ready):
                times["accept"].append(cycle)
            if take_part and ctx.get(dut.part.valid):
                p = ctx.get(dut.part.payload)
                got_parts.append((p.engine, Const.cast(layout.const(p.desc)).value))
                times["part"].append(cycle)
            if take_status and ctx.get(dut.status.valid):
                s = ctx.get(dut.status.payload)
                got_status.append((s.tag, s.error, s.parts))
                times["status"].append(cycle)
            await ctx.tick()
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(feed)
    sim.add_testbench(drain)
    sim.run()
    assert got_status == want_status
    assert len(got_parts) == len(want_parts)
    for i, (g, w) in enumerate(zip(got_parts, want_parts)):
        assert g == w, f"part {i}: engine {g[0]} vs {w[0]}"
    if not stall:
        sched = DgeTiming(cycles).schedule(instrs, geo, engines)
        t0 = times["accept"][0]
        assert [a - t0 for a in times["accept"]] == [a for a, _, _ in sched]
        assert [p - t0 for p in times["part"]] == [c for _, ps, _ in sched for c in ps]
        assert [s - t0 for s in times["status"]] == [s for _, _, s in sched]
    return want_status


@pytest.mark.parametrize(
    ("geo", "engines", "cycles", "seed", "stall"),
    [
        (Geometry(16, 256, 4096), 4, 2, 0, 0.0),
        (Geometry(16, 256, 4096), 16, 5, 1, 0.0),
        (Geometry(8, 256, 4096), 16, 3, 2, 0.3),
        (Geometry(16, 256, 4096), 8, 7, 3, 0.3),
    ],
)
def test_dge_rtl_matches_the_golden(geo, engines, cycles, seed, stall):
    """Random instructions with random stalls on all three streams: every part equal to the
    golden's (engine and every descriptor field), every status (tag, code, parts); without
    stalls every acceptance, part and status in the golden schedule's cycle."""
    status = _run(geo, engines, cycles, seed, stall)
    codes = {c for _, c, _ in status}
    assert Error.NONE in codes and len(codes) >= 3, codes  # legal, broken, refused
    assert max(n for _, _, n in status) == min(engines, geo.partitions)


def _small_dge():
    return Dge(
        dma_widths(4096, 16),
        engines=16,
        cycles=8,
        partitions=16,
        partition_bytes=256,
        hbm_bytes=4096,
    )


@pytest.mark.synth
def test_dge_verilog_lint_clean():
    """Lint-clean under ``verilator --lint-only -Wall``; synthesis in the slow suite (the
    descriptor check's and the cut's multipliers take Yosys minutes)."""
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.lint import lint_verilog

    lint_verilog(convert(_small_dge(), "dge"), "dge").check()


@pytest.mark.synth
@pytest.mark.slow
def test_dge_synthesis_latch_free():
    """Yosys without a latch, on narrow fields (the descriptor check's and the cut's
    multipliers make wide ones take Yosys far longer)."""
    from ncrtl.hdl.dma.check import Widths
    from ncrtl.hdl.verilog import convert
    from ncrtl.testbench.lint import synth_check

    dut = Dge(
        Widths(12, 4, 2), engines=4, cycles=4, partitions=4, partition_bytes=64, hbm_bytes=1024
    )
    synth_check(convert(dut, "dge", synthesis=True), "dge").check()


def test_dge_arguments_are_checked():
    wd = dma_widths(4096, 16)
    with pytest.raises(ValueError, match="Dge engines must be a power of two, not 12"):
        Dge(wd, engines=12)
    with pytest.raises(ValueError, match="Dge cycles"):
        Dge(wd, cycles=1)
