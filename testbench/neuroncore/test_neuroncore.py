"""cocotb testbench of :class:`ncrtl.hdl.neuroncore.top.NeuronCore`: kernels' instruction streams
on the Verilator build of the core, their outputs against the kernel golden bit for bit.

Each kernel (a traced :class:`~ncrtl.model.kernel.stream.Program` and its inputs) runs from a
reset: its inputs placed in the device memory as the golden places them, every queue's packed
entries after them (:func:`ncrtl.hdl.neuroncore.isa.program_image`), a start per stream sent
by a stream source with random idle cycles, the instruction fetch's and every DMA engine's
AXI4 port served by an :class:`~ncrtl.testbench.dma.memory.AxiMemory` on the one device memory
(multi-beat bursts, a latency, random not-ready and idle cycles); the run is over in the cycle every stream's semaphore has reached its count, and an
error strobe or a hang fails it.  The outputs are read from the device memory as the golden
reads them and compared with the golden's, element for element; the memory models prove that
no AXI4 beat was lost or duplicated.

The kernels: a job file (``NCRTL_NEURONCORE_JOB``, :mod:`ncrtl.testbench.neuroncore.jobs`: what
``ncrtl run --rtl`` runs), or without one the conformance set of the core's geometry
(:func:`~ncrtl.testbench.neuroncore.jobs.conformance_jobs`: the shipped examples that scale with
the geometry and random kernels, ``--count`` of them).
"""

import os

import cocotb
import numpy as np
from amaranth.hdl import Const
from amaranth.lib import data, stream
from amaranth.lib.wiring import In
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from ncrtl.hdl.common.axi import AxiManager
from ncrtl.hdl.neuroncore.isa import program_image
from ncrtl.hdl.neuroncore.top import ErrorSource, core_signature
from ncrtl.model.kernel import golden
from ncrtl.model.modes import pe_modes
from ncrtl.model.neuroncore.isa import encode
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.dma.memory import AxiMemory
from ncrtl.testbench.neuroncore import jobs
from ncrtl.testbench.scoreboard import Scoreboard, write_counters
from ncrtl.testbench.stream import StreamBus, StreamSource

#: The range the conformance run draws the memory model's latency from (cycles from a read
#: address to its first beat, from a write's last beat to its response).
LATENCIES = (2, 16)


class CoreTB:
    """Clock, reset, a stream source of starts and the device memory behind the instruction
    fetch and every DMA engine (one array, an :class:`AxiMemory` per port)."""

    def __init__(self, dut, geo, *, stall, seed, latency):
        self.dut, self.geo = dut, geo
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        clk, rst = dut.clk, dut.rst
        self.streams = geo.streams()
        # the drivers from the core's signature: a stream source per input stream (the
        # starts), a memory model per AXI4 manager port
        members = core_signature(geo).members
        self.sources, self.mems = {}, []
        self.hbm = np.zeros(geo.hbm_bytes, np.uint8)
        for i, (name, member) in enumerate(members.items()):
            sig = member.signature if member.is_signature else None
            if isinstance(sig, stream.Signature) and member.flow == In:
                bus = StreamBus.from_prefix(dut, name)
                self.sources[name] = StreamSource(bus, clk, rst, stall=stall, seed=seed + i)
            elif isinstance(sig, AxiManager):
                self.mems.append(
                    AxiMemory(
                        dut,
                        name,
                        self.hbm,
                        data_bytes=sig.data_bytes,
                        addr_bits=sig.addr_bits,
                        id_bits=sig.id_bits,
                        latency=latency,
                        stall=stall,
                        seed=seed + 100 + 8 * i,
                    )
                )
        assert set(self.sources) == {"start"} and len(self.mems) == geo.dma_engines + 1
        self.sem_layout = members["sem"].shape
        self.start_layout = members["start"].signature.members["payload"].shape

    def counts(self):
        return [int(c) for c in data.Const(self.sem_layout, int(self.dut.sem.value))]

    async def run(self, program, inputs, *, max_cycles):
        """Run ``program`` from a reset; returns ``(state, cycles, done)``: the golden's
        :class:`~ncrtl.model.kernel.golden.CoreState` reading the core's device memory, the
        cycles from the first cycle out of reset to the one in which the last semaphore
        reached its count, and per stream the cycle in which each instruction completed (its
        semaphore counted it)."""
        geo, dut = self.geo, self.dut
        enc = encode(program, geo)
        state = golden.CoreState(program, inputs)
        hbm = np.zeros(geo.hbm_bytes, np.uint8)
        hbm[: state.hbm.size] = state.hbm
        base, image, starts = program_image(enc, geo)
        hbm[base : base + image.size] = image
        for m in self.mems:
            m.mem = hbm
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        layout = data.StructLayout.cast(self.start_layout)
        self.sources["start"].send(
            [
                Const.cast(
                    layout.const(
                        {"stream": self.streams.index(s), "addr": addr, "entries": entries}
                    )
                ).value
                for s, (addr, entries) in starts.items()
            ]
        )
        totals = [enc.totals[s] for s in self.streams]
        done = {s: [] for s in self.streams}  # the cycle each instruction completed
        cycles = 0
        while True:
            await RisingEdge(dut.clk)
            cycles += 1
            if int(dut.error__valid.value):
                code = int(dut.error__code.value)
                raise AssertionError(
                    f"{program.kernel}: the core strobed error {code:#04x} (source "
                    f"{code >> 4}: {_source(code >> 4)}, code {code & 15}) in cycle {cycles}"
                )
            counts = self.counts()
            for s, c in zip(self.streams, counts):
                done[s] += [cycles] * (c - len(done[s]))
            if counts == totals:
                break
            if cycles >= max_cycles:
                raise AssertionError(
                    f"{program.kernel}: the core did not finish in {max_cycles} cycles; "
                    f"semaphores {dict(zip(self.streams, counts))}, expected "
                    f"{dict(zip(self.streams, totals))}"
                )
        # every response the memory models still owe is out within their latency
        await ClockCycles(dut.clk, 2 * self.mems[0].latency + 4)
        for m in self.mems:
            m.check_quiet()
        state.hbm = hbm
        return state, cycles, done


def _source(src):
    names = {v: k for k, v in vars(ErrorSource).items() if isinstance(v, int)}
    return names.get(src, "unknown")


@cocotb.test()
async def test_kernels(dut):
    """Every kernel of the job (or of the conformance set) from a reset, its outputs bit for
    bit against the golden's."""
    params, count, seed, stall = tb_settings()
    from ncrtl import blocks

    geo = blocks.neuroncore_geometry(params)
    rng = np.random.default_rng(seed)
    job = os.environ.get(jobs.JOB_ENV)
    if job:
        todo = jobs.load(job)
    else:
        modes = [m.name for m in pe_modes(params["pe_modes"])]
        todo = jobs.conformance_jobs(geo, rng, count, modes)
    latency = jobs.latency_of(job) if job else int(rng.integers(*LATENCIES))
    tb = CoreTB(dut, geo, stall=stall, seed=seed, latency=latency)
    dut._log.info(f"{len(todo)} kernels, memory latency {latency} cycles, stall {stall}")
    boards, results = [], {}
    total = 0
    for j in todo:
        want, _ = golden.run(j.program, j.inputs)
        state, cycles, done = await tb.run(j.program, j.inputs, max_cycles=j.max_cycles)
        got = [state.tensor(n) for n in j.program.outputs]
        for i, (g, w) in enumerate(zip(got, want)):
            w = np.asarray(w)
            bits = 8 * w.dtype.itemsize
            sb = Scoreboard(f"{j.name}.out{i}", f"{w.dtype} elements of output {i}", bits=bits)
            view = np.dtype(f"u{w.dtype.itemsize}")
            sb.compare(np.asarray(g).view(view).ravel(), w.view(view).ravel())
            boards.append(sb)
        results[j.name] = {"cycles": cycles, "outputs": got, "done": done}
        total += cycles
        dut._log.info(f"{j.name}: {cycles} cycles")
    if job:
        jobs.save_results(job, results)
    for b in boards:
        b.write_json()
        dut._log.info(b.report())
    write_counters(cycles=total, kernels=len(todo), latency=latency)
    for b in boards:
        b.assert_clean()
