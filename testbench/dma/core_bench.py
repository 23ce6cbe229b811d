"""Cycles of DMA instructions on :class:`ncrtl.hdl.dma.core.DmaCore` in the Amaranth simulator,
for ``ncrtl bench --only dma``'s engines-of-a-core figures: one instruction at a time through
DGE 0, timed from its acceptance to its semaphore reaching its part count, every AXI4 port
served by :func:`ncrtl.hdl.common.axi.sim_memory` without stalls; the results checked against
the golden."""

from __future__ import annotations

import numpy as np

from ncrtl.model.dma import Descriptor, Memories, Op, Side, Space, execute
from ncrtl.model.dma.isa import encode
from ncrtl.testbench.dma.program import random_memories

__all__ = ["core_cycles", "core_instruction", "core_model_cycles", "make_core", "CORE_KINDS"]

#: Kinds of instruction the engines-of-a-core figures time.
CORE_KINDS = ("copy", "transpose", "sbuf_transpose")


def core_instruction(geo, kind, size, esize=4):
    """``kind`` ``copy`` (device memory ``[P, n]`` -> SBUF), ``transpose`` (device memory
    ``[n, P]`` -> SBUF ``[P, n]``) or ``sbuf_transpose`` (SBUF ``[P, P]`` at the upper half ->
    SBUF ``[P, P]``) over the ``P`` partitions of ``geo``, ``n = size / esize`` elements per
    partition."""
    p, n = geo.partitions, size // esize
    dst = Side(Space.SBUF, 0, n, p * n, [(n, p), (1, n)], esize)
    if kind == "copy":
        return Descriptor(Op.COPY, Side(Space.HBM, 0, n, p * n, [(n, p), (1, n)], esize), dst)
    if kind == "transpose":
        src = Side(Space.HBM, 0, p, p * n, [(p, n), (1, p)], esize)
        return Descriptor(Op.TRANSPOSE, src, dst)
    half = geo.partition_bytes // 2
    sq = Side(Space.SBUF, 0, p, p * p, [(p, p), (1, p)], esize)
    src = Side(Space.SBUF, half, p, p * p, [(p, p), (1, p)], esize)
    return Descriptor(Op.TRANSPOSE, src, sq)


def make_core(geo, engines, word_bytes, **params):
    """A :class:`~ncrtl.hdl.dma.core.DmaCore` of ``engines`` engines over the memories of
    ``geo`` (its descriptor widths those of a ``dma`` block of that geometry), with the other
    ``params`` as given."""
    from ncrtl.blocks import dma_widths
    from ncrtl.hdl.dma.core import DmaCore

    return DmaCore(
        word_bytes,
        engines=engines,
        widths=dma_widths(geo.hbm_bytes, geo.partitions),
        partitions=geo.partitions,
        partition_bytes=geo.partition_bytes,
        hbm_bytes=geo.hbm_bytes,
        **params,
    )


def core_cycles(engines, instructions, geo, *, word_bytes=16, outstanding=8, latency=6, seed=0):
    """Cycles of each instruction from its acceptance to its semaphore reaching its part count
    (DGE cycles 2 and no per-transfer overhead: the data movement alone), one after the
    other, and the SBUF arbiter's turn at each acceptance: ``(cycles, turns)``; raises
    AssertionError if the memories differ from the golden."""
    from amaranth.sim import Simulator

    from ncrtl.hdl.common.axi import sim_memory
    from ncrtl.hdl.sbuf.memory import sim_load, sim_read

    rng = np.random.default_rng(seed)
    dut = make_core(
        geo, engines, word_bytes, overhead=0, outstanding=outstanding, dge_cycles=2, semaphores=2
    )
    mem = random_memories(rng, geo)
    gold = mem
    for d in instructions:
        gold, code, msg = execute(d, geo, gold)
        assert code == 0, msg
    hbm = mem.hbm.copy()
    cycles, turns = [], []

    async def main(ctx):
        await sim_load(ctx, dut, mem.sbuf)
        target = 0
        status = dut.dge_status0
        for d in instructions:
            ctx.set(dut.instr0.payload, {"sem": 0, "desc": encode(d)})
            ctx.set(dut.instr0.valid, 1)
            await ctx.delay(1e-9)
            while not ctx.get(dut.instr0.ready):
                await ctx.tick()
                await ctx.delay(1e-9)
            turns.append(ctx.get(dut.sbuf.turn))
            await ctx.tick()
            ctx.set(dut.instr0.valid, 0)
            ctx.set(status.ready, 1)
            n = 1
            parts = None
            while parts is None or ctx.get(dut.sem[0]) != target & 0xFFFF:
                await ctx.delay(1e-9)
                if parts is None and ctx.get(status.valid):
                    parts = ctx.get(status.payload).parts
                    target += parts
                await ctx.tick()
                n += 1
                assert n < 1_000_000, "instruction never completed"
            ctx.set(status.ready, 0)
            cycles.append(n)
        back = await sim_read(ctx, dut)
        assert np.array_equal(back, gold.sbuf), "SBUF differs from the golden"

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(main)
    for k in range(engines):
        rd, wr = sim_memory(dut.axi(k), hbm, word_bytes, latency=latency, rng=rng)
        sim.add_testbench(rd, background=True)
        sim.add_testbench(wr, background=True)
    sim.run()
    assert np.array_equal(hbm, gold.hbm), "device memory differs from the golden"
    return cycles, turns


def core_model_cycles(
    engines,
    instructions,
    geo,
    *,
    word_bytes=16,
    outstanding=8,
    latency=6,
    overhead=0,
    dge=2,
    turns=None,
):
    """:func:`core_cycles` from the timing model (:func:`ncrtl.model.dma.core.core_schedule`):
    each instruction alone on an idle core, from its acceptance to the cycle its semaphore
    shows its last part (the RTL's count, cycle for cycle, given the SBUF arbiter's ``turns``
    at the acceptances; 0 if None)."""
    from ncrtl.blocks import dma_widths
    from ncrtl.model.dma.core import core_schedule
    from ncrtl.model.dma.dge import DgeTiming
    from ncrtl.model.dma.timing import EngineTiming

    timing = EngineTiming(
        word_bytes=word_bytes,
        overhead=overhead,
        outstanding=outstanding,
        part_bits=dma_widths(geo.hbm_bytes, geo.partitions).part_bits,
        read_latency=latency,
        write_latency=latency,
    )
    mem = Memories(
        np.zeros((geo.partitions, geo.partition_bytes), np.uint8),
        np.zeros(geo.hbm_bytes, np.uint8),
    )
    out = []
    for d, turn in zip(instructions, turns or [0] * len(instructions)):
        (done, _), _ = core_schedule(
            [(d, 0)],
            geo=geo,
            mem=mem,
            engines=engines,
            timing=timing,
            dge=DgeTiming(dge),
            turn=turn,
        )
        out.append(done[0].done - done[0].accepted + 1)
    return out
