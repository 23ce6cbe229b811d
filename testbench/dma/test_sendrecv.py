"""cocotb conformance of :class:`ncrtl.hdl.dma.top.SendRecvPair` (the two cores of an LNC = 2
logical core, a sendrecv unit and an SBUF each) against the golden
:func:`ncrtl.model.dma.sendrecv.exchange`.

Random programs (:func:`ncrtl.testbench.dma.program.sendrecv_program`): pairs on random
pipes posted in a different order on each core (each pipe in its order), a share of them with
a rule broken on one side, and one sendrecv without a partner; random stalls on the op and
status streams and on both directions of the link.  Each core's completions are compared per
pipe in order (tag, code), both whole SBUFs byte for byte at the end, and the unpaired
sendrecv must stay pending.
"""

import cocotb
import numpy as np
from amaranth.hdl import Const
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from ncrtl import blocks
from ncrtl.hdl.dma.sendrecv import encode_sendrecv, sendrecv_layout, sendrecv_status_layout
from ncrtl.model.dma.sendrecv import PENDING, exchange
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.dma.program import sendrecv_program
from ncrtl.testbench.sbuf.port import SbufEnginePort
from ncrtl.testbench.scoreboard import Scoreboard, write_counters
from ncrtl.testbench.stream import StreamBus, StreamSink, StreamSource


class SendRecvTB:
    """Clock, reset, per core the op source, the status sink and the SBUF's engine port, and
    a task that stalls each link direction at random."""

    def __init__(self, dut, params, *, stall, seed):
        self.dut, self.p = dut, params
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        dut.link_stall.value = 0
        clk, rst = dut.clk, dut.rst

        def bus(name):
            return StreamBus.from_prefix(dut, name)

        self.op = [
            StreamSource(bus(f"op{r}"), clk, rst, stall=stall, seed=seed + r) for r in (0, 1)
        ]
        self.status = [
            StreamSink(bus(f"status{r}"), clk, rst, backpressure=stall, seed=seed + 2 + r)
            for r in (0, 1)
        ]
        self.sbuf = [
            SbufEnginePort(
                dut,
                f"eng_req{r}",
                f"eng_resp{r}",
                partitions=params["partitions"],
                partition_bytes=params["partition_bytes"],
                word_bytes=params["word_bytes"],
                seed=seed + 4 + 2 * r,
            )
            for r in (0, 1)
        ]
        p = params
        self._op = sendrecv_layout(p["partitions"], p["partition_bytes"], p["pipes"])
        self._status = sendrecv_status_layout(p["pipes"])
        self._stall, self._rng = stall, np.random.default_rng(seed + 8)

    async def reset(self):
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 1)

    async def stall_links(self):
        """Hold each link direction with probability ``stall`` per cycle, for ever."""
        while True:
            await self.dut.clk.rising_edge
            bits = [int(self._rng.random() < self._stall) for _ in range(2)]
            self.dut.link_stall.value = bits[0] | bits[1] << 1

    async def load(self, r, sbuf):
        await self.sbuf[r].load(sbuf)

    async def read(self, r):
        return await self.sbuf[r].read()

    def completion(self, word):
        """A status word as ``(pipe, tag, code)``."""
        c = data.Const(self._status, word)
        return c.pipe, c.tag, c.code

    def post(self, r, ops):
        self.op[r].send([Const.cast(self._op.const(encode_sendrecv(o))).value for o in ops])


def _pairs_for(params, count):
    """As many pairs as ``count`` asks, within what the pipes and the SBUF hold."""
    cap = blocks.sendrecv_pairs(params["partition_bytes"], params["pipes"], params["depth"])
    return max(1, min(count, cap))


@cocotb.test()
async def test_sendrecv(dut):
    """Random two-core programs with random stalls: completions per pipe in order, both SBUFs
    bit for bit, the unpaired sendrecv pending."""
    params, count, seed, stall = tb_settings()
    P, B = params["partitions"], params["partition_bytes"]
    rng = np.random.default_rng(seed)
    n_pairs = _pairs_for(params, count)
    programs = sendrecv_program(rng, P, B, params["pipes"], params["depth"], n_pairs)
    sbufs = [rng.integers(0, 256, (P, B), dtype=np.uint8) for _ in range(2)]
    want, codes, _ = exchange(programs, sbufs)
    tb = SendRecvTB(dut, params, stall=stall, seed=seed)
    await tb.reset()
    for r in (0, 1):
        await tb.load(r, sbufs[r])
    cocotb.start_soon(tb.stall_links())
    start = int(tb.status[0].cycle)
    for r in (0, 1):
        tb.post(r, programs[r])
    status = Scoreboard("sendrecv.status", "per core and pipe: tag, then code", bits=8)
    for r in (0, 1):
        n = sum(c is not PENDING for c in codes[r])
        words = await tb.status[r].recv(n, timeout=100_000)
        done = [tb.completion(w) for w in words]
        for pipe in range(params["pipes"]):
            mine = [x for p, t, c in done if p == pipe for x in (t, c)]
            gold = []
            for op, c in zip(programs[r], codes[r]):
                if op.pipe_id == pipe and c is not PENDING:
                    gold += [op.tag, int(c)]
            status.compare_sequence(mine, gold)
    cycles = int(tb.status[0].cycle) - start
    await ClockCycles(dut.clk, 200)
    pending = Scoreboard("sendrecv.pending", "completions of the unpaired sendrecv", bits=8)
    pending.compare_sequence([tb.status[r].available for r in (0, 1)], [0, 0])
    dut.link_stall.value = 0
    sb = Scoreboard("sendrecv.sbuf", "bytes of both whole SBUFs", bits=8)
    for r in (0, 1):
        sb.compare(await tb.read(r), want[r])
    boards = (status, pending, sb)
    for b in boards:
        b.write_json()
        dut._log.info(b.report())
    write_counters(cycles=cycles, pairs=n_pairs)
    for b in boards:
        b.assert_clean()
