"""cocotb run behind ``ncrtl bench --only dma``'s quality-of-service figure: the latency of a
high-priority queue's short transfers while low-priority queues keep the engine busy, on
:class:`ncrtl.hdl.dma.top.DmaQueuesSystem` (either policy), no stalls, the memory model at one
beat per cycle.

For each load ``L`` in 0..:data:`LOW_QUEUES`, ``L`` low-priority queues (queue ``q`` of class
``q``: 0, 1, 2) each stream copies of :data:`LOW_BYTES` bytes per partition from the device
memory, two in their queue at any time, while queue 15 (class 3, the highest) sends
:data:`PROBES` probes of :data:`PROBE_BYTES` bytes per partition one after the other, a seeded
pause between them; a probe's latency is the cycles from the moment it is handed to the
descriptor stream to its completion.  Counters ``lat_sum_<L>``, ``lat_max_<L>``, ``probes_<L>``,
``words_<L>`` (device-memory words read in the window: the engine's load), ``window_<L>`` (its cycles).  With the
priority policy the run is repeated with traffic shaping (:data:`SHARES`), counters prefixed
``shaped_``.  Every completion is checked to be error-free; each queue works in its own region of both memories.
"""

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from ncrtl.model.dma import Descriptor, Geometry, Memories, Op, Side, Space
from ncrtl.model.dma.qos import QUEUES, slot_table
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.dma.test_dma_queues import QueuesTB
from ncrtl.testbench.scoreboard import Scoreboard, write_counters

#: Low-priority queues at most (classes 0, 1, 2), bytes per partition of their copies.
LOW_QUEUES, LOW_BYTES = 3, 4096
#: Probes per load point and their bytes per partition.
PROBES, PROBE_BYTES = 6, 256
#: The probes' queue (class 3).
PROBE_QUEUE = QUEUES - 1
#: Traffic-shaping shares (sixteenths) of classes 0..3 in the ``shaped_`` runs (priority only):
#: each lower class owns 4 slots of the calendar.
SHARES = (4, 4, 4, 0)
#: Polling period of the feeder, cycles (the latencies come from the completions' cycles).
POLL = 8


def _copy(geo, hbm_base, sbuf_base, size, tag):
    n = size // 4
    p = geo.partitions
    return Descriptor(
        Op.COPY,
        Side(Space.HBM, hbm_base, n, p * n, [(n, p), (1, n)], 4),
        Side(Space.SBUF, sbuf_base, n, p * n, [(n, p), (1, n)], 4),
        tag=tag,
    )


@cocotb.test()
async def test_latency_under_load(dut):
    params, _, seed, _ = tb_settings()
    geo = Geometry(params["partitions"], params["partition_bytes"], params["hbm_bytes"])
    need = LOW_QUEUES * LOW_BYTES + PROBE_BYTES
    assert geo.partition_bytes >= need, f"the bench needs {need} bytes per partition"
    rng = np.random.default_rng(seed)
    mem = Memories(
        np.zeros((geo.partitions, geo.partition_bytes), np.uint8),
        rng.integers(0, 256, geo.hbm_bytes, dtype=np.uint8),
    )
    tb = QueuesTB(dut, params, mem.hbm.copy(), stall=0.0, seed=seed, latency=6)
    tb.mem.bandwidth = 1.0
    klass = [0] * QUEUES
    for q in range(LOW_QUEUES):
        klass[q] = q
    klass[PROBE_QUEUE] = 3
    await tb.reset()
    region = geo.hbm_bytes // (LOW_QUEUES + 1)
    low = [_copy(geo, q * region, q * LOW_BYTES, LOW_BYTES, q) for q in range(LOW_QUEUES)]
    probe = _copy(geo, LOW_QUEUES * region, LOW_QUEUES * LOW_BYTES, PROBE_BYTES, 0xF0)
    status = Scoreboard("dma_queues.bench", "completion codes (all 0)", bits=4)
    seen = 0
    outstanding = [0] * QUEUES
    figures = {}

    def completions():
        """New completions since the last call: ``[(queue, code, cycle)]``."""
        nonlocal seen
        out = []
        while seen < len(tb.status.words):
            w, c = tb.status.words[seen], tb.status.cycles[seen]
            q, _, code = tb.completion(w)
            outstanding[q] -= 1
            out.append((q, code, c))
            seen += 1
        return out

    def send(q, desc):
        outstanding[q] += 1
        tb.send([(q, desc)])

    variants = [("", [0] * 4)]
    if params["policy"] == "priority":
        variants.append(("shaped_", list(SHARES)))
    for prefix, shares in variants:
        tb.configure(klass, slot_table(shares))
        for load in range(LOW_QUEUES + 1):
            lat, probes = [], 0
            start, reads = int(tb.status.cycle), tb.mem.read_beats
            probe_sent = None
            pause = int(tb.status.cycle) + 200
            while probes < PROBES:
                for q in range(load):
                    while outstanding[q] < 2:
                        send(q, low[q])
                now = int(tb.status.cycle)
                if probe_sent is None and now >= pause:
                    probe_sent = now
                    send(PROBE_QUEUE, probe)
                await ClockCycles(dut.clk, POLL)
                for q, code, cycle in completions():
                    status.compare_sequence([code], [0])
                    if q == PROBE_QUEUE:
                        lat.append(cycle - probe_sent)
                        probes += 1
                        probe_sent = None
                        pause = cycle + int(rng.integers(100, 1000))
            window = int(tb.status.cycle) - start
            moved = tb.mem.read_beats - reads  # a word per read data beat
            figures.update(
                {
                    f"{prefix}lat_sum_{load}": sum(lat),
                    f"{prefix}lat_max_{load}": max(lat),
                    f"{prefix}probes_{load}": len(lat),
                    f"{prefix}words_{load}": moved,
                    f"{prefix}window_{load}": window,
                }
            )
            dut._log.info(
                f"{prefix or 'unshaped '}{load} low-priority queues: probe latency mean "
                f"{sum(lat) / len(lat):.0f}, max {max(lat)} cycles; {moved} words in {window} "
                f"cycles"
            )
            while any(outstanding):  # drain before the next load point
                await ClockCycles(dut.clk, POLL)
                for _, code, _ in completions():
                    status.compare_sequence([code], [0])
    status.write_json()
    write_counters(**figures)
    status.assert_clean()
