"""cocotb conformance of :class:`ncrtl.hdl.dma.top.DmaSystem` (a DMA engine with its SBUF)
against the golden :func:`ncrtl.model.dma.execute`.

Random descriptors (:mod:`ncrtl.testbench.dma.program`: copies in every direction, DMA
transposes, FP32 and BF16 read-add-writes, some out of bounds) run one after another on random
SBUF and device-memory contents; the device memory is :class:`~ncrtl.testbench.dma.memory.
AxiMemory` with a latency and random not-ready cycles, the descriptor and completion streams
have random stalls.  After every descriptor the completion (tag and code) is compared with the
golden's and both memories, whole, byte for byte: nothing outside a destination changes, a
broken descriptor changes nothing.  At the end the memory model proves no AXI4 beat was lost or
duplicated.
"""

import cocotb
import numpy as np
from amaranth.hdl import Const
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from ncrtl.hdl.dma.check import descriptor_layout
from ncrtl.hdl.dma.engine import status_layout
from ncrtl.model.dma import Geometry, execute
from ncrtl.model.dma.isa import encode
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.dma.memory import AxiMemory
from ncrtl.testbench.dma.program import random_descriptors, random_memories
from ncrtl.testbench.sbuf.port import SbufEnginePort
from ncrtl.testbench.scoreboard import Scoreboard, write_counters
from ncrtl.testbench.stream import StreamBus, StreamSink, StreamSource

#: Cycles from an accepted read address to its data in the memory model (the bench's; the
#: conformance run draws its own from the seed, :data:`LATENCIES`).
LATENCY = 6
#: The range the conformance run draws the memory model's latency from.
LATENCIES = (1, 16)
#: Read beats per cycle the memory model delivers at most.
BANDWIDTH = 0.75


class DmaTB:
    """Clock, reset, the descriptor source, the completion sink, the SBUF's engine port (to load
    and read back the SBUF) and the AXI4 memory model."""

    def __init__(self, dut, params, hbm, *, stall, seed, latency=LATENCY, id_bits=1):
        from ncrtl.blocks import dma_widths

        self.dut, self.p = dut, params
        self.wd = dma_widths(**params)
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        clk, rst = dut.clk, dut.rst

        def bus(name):
            return StreamBus.from_prefix(dut, name)

        self.desc = StreamSource(bus("desc"), clk, rst, stall=stall, seed=seed)
        self.status = StreamSink(bus("status"), clk, rst, backpressure=stall, seed=seed + 1)
        self.sbuf = SbufEnginePort(
            dut,
            "eng_req",
            "eng_resp",
            partitions=params["partitions"],
            partition_bytes=params["partition_bytes"],
            word_bytes=params["word_bytes"],
            seed=seed + 2,
        )
        self.mem = AxiMemory(
            dut,
            "axi",
            hbm,
            data_bytes=params["word_bytes"],
            addr_bits=self.wd.addr_bits,
            id_bits=id_bits,
            latency=latency,
            stall=stall,
            bandwidth=BANDWIDTH,
            seed=seed + 4,
        )
        self._desc_layout = descriptor_layout(self.wd)

    async def reset(self):
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 1)

    async def load_sbuf(self, sbuf):
        await self.sbuf.load(sbuf)

    async def read_sbuf(self):
        return await self.sbuf.read()

    async def run(self, desc):
        """Send one descriptor and return its completion ``(tag, code)``."""
        self.desc.send([Const.cast(self._desc_layout.const(encode(desc))).value])
        (word,) = await self.status.recv(1, timeout=200_000)
        done = data.Const(status_layout(), word)
        return done.tag, done.error


@cocotb.test()
async def test_random_descriptors(dut):
    """Random descriptors with random stalls: completions and both whole memories after every
    one, bit for bit."""
    params, count, seed, stall = tb_settings()
    geo = Geometry(params["partitions"], params["partition_bytes"], params["hbm_bytes"])
    rng = np.random.default_rng(seed)
    mem = random_memories(rng, geo)
    n = max(1, min(count, 400))
    # Descriptors first: those with dynamic offsets keep their values in the device memory.
    descs = random_descriptors(rng, geo, n, word_bytes=params["word_bytes"], hbm=mem.hbm)
    hbm = mem.hbm.copy()
    latency = int(rng.integers(*LATENCIES))
    tb = DmaTB(dut, params, hbm, stall=stall, seed=seed, latency=latency)
    dut._log.info(f"memory model latency {latency} cycles")
    await tb.reset()
    await tb.load_sbuf(mem.sbuf)
    status = Scoreboard("dma.status", "tag, then code", bits=16)
    sbuf_sb = Scoreboard("dma.sbuf", "bytes of the whole SBUF", bits=8)
    hbm_sb = Scoreboard("dma.hbm", "bytes of the whole device memory", bits=8)
    gold = mem
    start = int(tb.status.cycle)
    for desc in descs:
        gold, code, _ = execute(desc, geo, gold)
        tag, got = await tb.run(desc)
        status.compare_sequence([tag, got], [desc.tag, int(code)])
        sbuf_sb.compare(await tb.read_sbuf(), gold.sbuf)
        hbm_sb.compare(tb.mem.mem, gold.hbm)
    await ClockCycles(dut.clk, 2 * latency + 4)
    tb.mem.check_quiet()
    boards = (status, sbuf_sb, hbm_sb)
    for b in boards:
        b.write_json()
        dut._log.info(b.report())
    write_counters(cycles=int(tb.status.cycle) - start, descriptors=n, latency=latency)
    for b in boards:
        b.assert_clean()
