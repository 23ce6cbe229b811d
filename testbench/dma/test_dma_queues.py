"""cocotb conformance of :class:`ncrtl.hdl.dma.top.DmaQueuesSystem` (a DMA engine's queues and
channels with the SBUF) against the golden :func:`ncrtl.model.dma.execute`.

Random descriptors for several queues at once (:func:`ncrtl.testbench.dma.program.
queue_program`: each queue in its own region of both memories, so the result does not depend
on how the queues interleave), interleaved at random on the descriptor stream; random classes
of service and traffic-shaping shares; random stalls on the streams and random not-ready cycles
on the AXI4 memory model.  Each queue's completions are compared in order with the golden's
(tag and code), the whole memories byte for byte at the end, the per-queue completion counters,
and the memory model proves no AXI4 beat was lost or duplicated.
"""

import cocotb
import numpy as np
from amaranth.hdl import Const
from amaranth.lib import data
from cocotb.triggers import ClockCycles

from ncrtl.hdl.dma.qos import slot_layout
from ncrtl.hdl.dma.queues import queue_status_layout, queued_layout
from ncrtl.model.dma import Geometry, execute
from ncrtl.model.dma.isa import encode
from ncrtl.model.dma.qos import CLASSES, QUEUES, SLOTS, slot_table
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.dma.program import QUEUE_REGION, interleave, queue_program, random_memories
from ncrtl.testbench.dma.test_dma import LATENCIES, DmaTB
from ncrtl.testbench.scoreboard import Scoreboard, write_counters


class QueuesTB(DmaTB):
    """:class:`~ncrtl.testbench.dma.test_dma.DmaTB` for the queues: descriptors carry their
    queue, completions their queue, and the classes and the calendar are set through their
    ports."""

    def __init__(self, dut, params, hbm, *, stall, seed, latency):
        super().__init__(dut, params, hbm, stall=stall, seed=seed, latency=latency, id_bits=2)
        self._desc_layout = queued_layout(self.wd)

    def configure(self, klass, table):
        """Queue ``q``'s class ``klass[q]``; the calendar of
        :func:`ncrtl.model.dma.qos.slot_table` (None: a free slot)."""
        klass_layout = data.ArrayLayout(2, QUEUES)
        self.dut.klass.value = Const.cast(klass_layout.const(list(klass))).value
        slots = [{"owned": int(o is not None), "klass": o or 0} for o in table]
        calendar = data.ArrayLayout(slot_layout(), SLOTS)
        self.dut.calendar.value = Const.cast(calendar.const(slots)).value

    def completion(self, word):
        """A status word as ``(queue, tag, code)``."""
        c = data.Const(queue_status_layout(), word)
        return c.queue, c.tag, c.error

    def send(self, items):
        self.desc.send(
            [
                Const.cast(self._desc_layout.const({"queue": q, "desc": encode(d)})).value
                for q, d in items
            ]
        )

    def done(self):
        """The per-queue completion counters."""
        return list(data.Const(data.ArrayLayout(16, QUEUES), int(self.dut.done.value)))


@cocotb.test()
async def test_queues(dut):
    """Several queues at once with random classes and shares and random stalls: each queue's
    completions in order, the memories and the counters at the end, bit for bit."""
    params, count, seed, stall = tb_settings()
    geo = Geometry(params["partitions"], params["partition_bytes"], params["hbm_bytes"])
    rng = np.random.default_rng(seed)
    mem = random_memories(rng, geo)
    queues = int(rng.integers(2, min(5, geo.partition_bytes // QUEUE_REGION) + 1))
    per = max(1, min(count, 400) // queues)
    program = queue_program(rng, geo, queues, per, word_bytes=params["word_bytes"])
    klass = [int(rng.integers(0, CLASSES)) for _ in range(QUEUES)]
    shares = [0] * CLASSES
    for _ in range(int(rng.integers(0, 17))):
        shares[int(rng.integers(0, CLASSES))] += 1
    table = slot_table(shares)
    want, gold = {q: [] for q in range(queues)}, mem
    for q, descs in enumerate(program):
        for d in descs:
            gold, code, _ = execute(d, geo, gold)
            want[q].append((d.tag, int(code)))
    items = interleave(rng, program)
    latency = int(rng.integers(*LATENCIES))
    tb = QueuesTB(dut, params, mem.hbm.copy(), stall=stall, seed=seed, latency=latency)
    dut._log.info(
        f"{queues} queues of {per} descriptors, classes {klass[:queues]}, shares {shares}, "
        f"memory latency {latency}"
    )
    tb.configure(klass, table)
    await tb.reset()
    await tb.load_sbuf(mem.sbuf)
    start = int(tb.status.cycle)
    tb.send(items)
    words = await tb.status.recv(len(items), timeout=200_000)
    got = {q: [] for q in range(queues)}
    for word in words:
        q, tag, code = tb.completion(word)
        got[q].append((tag, code))
    await ClockCycles(dut.clk, 2 * latency + 8)
    status = Scoreboard("dma_queues.status", "per queue: tag, then code", bits=16)
    for q in range(queues):
        status.compare_sequence(
            [x for t, c in got[q] for x in (t, c)], [x for t, c in want[q] for x in (t, c)]
        )
    counters = Scoreboard("dma_queues.done", "completions per queue", bits=16)
    counters.compare_sequence(
        tb.done(), [len(program[q]) for q in range(queues)] + [0] * (QUEUES - queues)
    )
    sbuf_sb = Scoreboard("dma_queues.sbuf", "bytes of the whole SBUF", bits=8)
    hbm_sb = Scoreboard("dma_queues.hbm", "bytes of the whole device memory", bits=8)
    sbuf_sb.compare(await tb.read_sbuf(), gold.sbuf)
    hbm_sb.compare(tb.mem.mem, gold.hbm)
    tb.mem.check_quiet()
    boards = (status, counters, sbuf_sb, hbm_sb)
    for b in boards:
        b.write_json()
        dut._log.info(b.report())
    write_counters(
        cycles=int(tb.status.cycle) - start, descriptors=len(items), queues=queues, latency=latency
    )
    for b in boards:
        b.assert_clean()
