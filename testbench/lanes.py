"""cocotb testbench base for blocks wrapped in :class:`ncrtl.hdl.common.stream.StreamLanes`.

A :class:`LanesTB` owns the clock, the reset, a :class:`~ncrtl.testbench.stream.StreamSource` on
the ``i_stream`` and a :class:`~ncrtl.testbench.stream.StreamSink` on the ``o_stream``.  Test vectors are
given per field as numpy arrays (one element per operation); the TB packs them into beats of
``lanes`` operations (lane 0 in the low bits, fields in the unit's signature order, the layout
:class:`StreamLanes` documents), streams them with random stalls and backpressure, and unpacks the
results into per-field arrays in the same order.
"""

import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from ncrtl.testbench.scoreboard import write_counters
from ncrtl.testbench.stream import StreamBus, StreamSink, StreamSource

__all__ = ["LanesTB", "pack_fields", "unpack_fields"]


def pack_fields(fields, layout, lanes):
    """Pack ``{name: array[n]}`` into ``ceil(n / lanes)`` beat integers (missing lanes are 0)."""
    names = [name for name, _ in layout]
    missing = set(names) - set(fields)
    extra = set(fields) - set(names)
    if missing or extra:
        raise ValueError(
            f"fields must be exactly {names}; missing {sorted(missing)}, unexpected {sorted(extra)}"
        )
    n = len(next(iter(fields.values())))
    beats = -(-n // lanes)
    lane_word = np.zeros(beats * lanes, dtype=object)
    off = 0
    for name, width in layout:
        v = np.asarray(fields[name])
        if v.shape != (n,):
            raise ValueError(f"field {name} has shape {v.shape}, expected ({n},)")
        col = np.zeros(beats * lanes, dtype=object)
        col[:n] = [int(x) & ((1 << width) - 1) for x in v.tolist()]
        lane_word += col << off
        off += width
    lane_width = off
    words = lane_word.reshape(beats, lanes)
    out = np.zeros(beats, dtype=object)
    for lane in range(lanes):
        out += words[:, lane] << (lane * lane_width)
    return [int(w) for w in out]


def unpack_fields(words, layout, lanes, n):
    """Inverse of :func:`pack_fields`: ``{name: object array[n]}`` of Python ints."""
    lane_width = sum(w for _, w in layout)
    w = np.array([int(x) for x in words], dtype=object)
    per_lane = np.empty((len(words), lanes), dtype=object)
    lane_mask = (1 << lane_width) - 1
    for lane in range(lanes):
        per_lane[:, lane] = (w >> (lane * lane_width)) & lane_mask
    flat = per_lane.reshape(-1)[:n]
    out = {}
    off = 0
    for name, width in layout:
        out[name] = (flat >> off) & ((1 << width) - 1)
        off += width
    return out


class LanesTB:
    """Drive a ``StreamLanes`` top.

    Parameters
    ----------
    dut : cocotb handle
        The top (ports ``clk``, ``rst`` and the streams ``i_stream``, ``o_stream``).
    top : StreamLanes
        The Amaranth component the Verilog came from (for the field layout).
    stall : float
        Probability of an idle input cycle and of a backpressure cycle.
    seed : int
        Seed of the stall patterns.
    """

    def __init__(self, dut, top, *, stall=0.0, seed=0):
        self.dut = dut
        self.top = top
        self.lanes = len(top.units)
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        self.source = StreamSource(
            StreamBus.from_prefix(dut, "i_stream"), dut.clk, dut.rst, stall=stall, seed=seed
        )
        self.sink = StreamSink(
            StreamBus.from_prefix(dut, "o_stream"),
            dut.clk,
            dut.rst,
            backpressure=stall,
            seed=seed + 1,
        )

    async def reset(self, cycles=2):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0

    async def run(self, fields, *, timeout=10_000):
        """Stream the operations in ``fields``; return the output fields, same order."""
        n = len(next(iter(fields.values())))
        words = pack_fields(fields, self.top.in_fields, self.lanes)
        self.source.send(words)
        got = await self.sink.recv(len(words), timeout=timeout)
        return unpack_fields(got, self.top.out_fields, self.lanes, n)

    def record_cycles(self):
        """Add the cycles simulated so far to the ``NCRTL_SUMMARY`` file."""
        write_counters(cycles=self.sink.cycle)
