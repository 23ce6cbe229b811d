"""A kernel's streams on :class:`ncrtl.hdl.neuroncore.top.NeuronCore` in the Amaranth
simulator: the device memory behind every DMA engine's AXI4 port
(:func:`ncrtl.hdl.common.axi.sim_memory`, one array), each queue fed its words with random
stalls, the run over when every stream's semaphore has reached its count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ncrtl.model.kernel.golden import CoreState
from ncrtl.model.neuroncore.isa import encode

__all__ = ["RtlRun", "device_image", "run_core"]


@dataclass
class RtlRun:
    """What a run gives: the kernel's outputs (arrays of their dtypes), the core's cycles
    from reset to the last semaphore count, the device memory at the end."""

    outputs: list
    cycles: int
    hbm: np.ndarray


def device_image(program, inputs, size):
    """The device memory of ``size`` bytes with every input at its tensor's base (the golden's
    :class:`~ncrtl.model.kernel.golden.CoreState` places and checks them)."""
    st = CoreState(program, inputs)
    hbm = np.zeros(size, np.uint8)
    hbm[: st.hbm.size] = st.hbm
    return hbm, st


def run_core(
    program,
    inputs,
    geo,
    *,
    core=None,
    stall=0.0,
    latency=4,
    seed=0,
    max_cycles=200_000,
    modes="bf16",
    dge_cycles=4,
):
    """Run ``program`` (traced at ``geo.core()``) on a :class:`NeuronCore` of ``geo`` (or the
    given ``core``) in the Amaranth simulator; returns an :class:`RtlRun`.  ``stall``: the
    probability of a not-ready or idle cycle on every AXI4 channel and of an idle cycle on
    every queue's input."""
    from amaranth.sim import Simulator

    from ncrtl.hdl.common.axi import sim_memory
    from ncrtl.hdl.neuroncore.isa import pack
    from ncrtl.hdl.neuroncore.top import NeuronCore

    enc = encode(program, geo)
    dut = core or NeuronCore(geo, modes=modes, dge_cycles=dge_cycles)
    hbm, state = device_image(program, inputs, geo.hbm_bytes)
    rng = np.random.default_rng(seed)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for k in range(geo.dma_engines):
        r, w = sim_memory(dut.axi(k), hbm, geo.word_bytes, latency=latency, stall=stall, rng=rng)
        sim.add_testbench(r, background=True)
        sim.add_testbench(w, background=True)

    def feeder(name, words):
        port = dut.queue_port(name)

        async def feed(ctx):
            for w in words:
                while stall and rng.random() < stall:
                    ctx.set(port.valid, 0)
                    await ctx.tick()
                ctx.set(port.payload.as_value(), w)
                ctx.set(port.valid, 1)
                await ctx.tick().until(port.ready)
            ctx.set(port.valid, 0)

        return feed

    for name, entries in enc.queues.items():
        if entries:
            sim.add_testbench(feeder(name, [pack(e, geo) for e in entries]), background=True)
    totals = [enc.totals[s] for s in geo.streams()]
    result = {}

    async def watch(ctx):
        cycle = 0
        while True:
            await ctx.tick()
            cycle += 1
            counts = [int(c) for c in ctx.get(dut.sem)]
            if ctx.get(dut.error.valid):
                code = ctx.get(dut.error.code)
                raise AssertionError(f"the core strobed error {code:#04x} in cycle {cycle}")
            if counts == totals:
                result["cycles"] = cycle
                return
            if cycle >= max_cycles:
                raise AssertionError(
                    f"the core did not finish in {max_cycles} cycles: semaphores "
                    f"{dict(zip(geo.streams(), counts))}, expected "
                    f"{dict(zip(geo.streams(), totals))}"
                )

    sim.add_testbench(watch)
    sim.run()
    state.hbm = hbm  # the outputs as the golden reads them, from the core's device memory
    return RtlRun([state.tensor(n) for n in program.outputs], result["cycles"], hbm)
