"""The device memory behind a DMA engine's AXI4 manager port, for cocotb testbenches.

:class:`AxiMemory` answers the five channels of :class:`ncrtl.hdl.common.axi.AxiManager` (ports
``<prefix>__ar__valid`` and so on) from a numpy byte array: the first data beat of a read
address accepted in cycle ``t`` is valid in cycle ``t + latency``, and the write response of a
write burst whose address and last data beat are in by cycle ``t`` in cycle ``t + latency``
(the timing :class:`ncrtl.model.dma.timing.EngineTiming` assumes); every channel it receives has seeded random
not-ready cycles (``stall``) and every channel it drives seeded random idle cycles.  Bursts of
any length (``len``) of ``INCR`` type are served, one beat per data word.

It counts what it saw, so a test can prove nothing was lost or duplicated: every read address
got exactly its beats, every write address exactly one data burst and one response
(:meth:`check_quiet`).  cocotbext-axi's ``AxiRam`` would be the library choice, but it does not
run on cocotb 2.x; this one is built on the project's :mod:`ncrtl.testbench.stream` drivers.
"""

from __future__ import annotations

from collections import deque

import cocotb
from amaranth.lib import data

from ncrtl.hdl.common.axi import AxiManager
from ncrtl.model.sbuf.memory import write_strobed
from ncrtl.testbench.stream import StreamBus, StreamSink, StreamSource

__all__ = ["AxiMemory"]


def _fields(layout):
    """``{name: (offset, width)}`` of a struct layout."""
    out = {}
    for name, field in data.Layout.cast(layout):
        out[name] = (field.offset, field.width)
    return out


def _get(word, f):
    off, width = f
    return (word >> off) & ((1 << width) - 1)


class AxiMemory:
    """A byte-addressed memory serving an AXI4 manager port (see the module docstring).

    Parameters
    ----------
    dut : cocotb handle
        The top with the port, its ``clk`` and ``rst``.
    prefix : str
        The port's name (``axi`` for ``axi__ar__valid`` ...).
    memory : ndarray of uint8
        The contents; the model reads and writes it in place.
    data_bytes, addr_bits, id_bits : int
        The port's data width in bytes, its address width and its id width; responses carry
        the id of their address.
    latency : int
        Cycles from the cycle a read address is accepted to the cycle its first data beat is
        valid, and from the cycle a write is complete to the cycle its response is valid (at
        least 1).
    stall : float
        Probability of a not-ready cycle on ``ar``/``aw``/``w`` and of an idle cycle on
        ``r``/``b``.
    bandwidth : float
        Read data beats per cycle the memory delivers at most (0 < bandwidth <= 1): a token
        bucket filled by ``bandwidth`` every cycle releases one beat per token, so a long read
        runs at that rate whatever the engine asks.
    seed : int
    """

    def __init__(
        self,
        dut,
        prefix,
        memory,
        *,
        data_bytes,
        addr_bits,
        id_bits=1,
        latency=4,
        stall=0.0,
        bandwidth=1.0,
        seed=0,
    ):
        if latency < 1:
            raise ValueError(f"AxiMemory latency {latency} must be at least 1 cycle")
        if not 0 < bandwidth <= 1:
            raise ValueError(f"AxiMemory bandwidth {bandwidth} must be in (0, 1] beats per cycle")
        self.bandwidth = float(bandwidth)
        self.mem = memory
        self.data_bytes = data_bytes
        self.latency = latency
        sig = AxiManager(data_bytes, addr_bits, id_bits)
        members = sig.members
        self._a = _fields(members["ar"].signature.members["payload"].shape)
        self._r = _fields(members["r"].signature.members["payload"].shape)
        self._w = _fields(members["w"].signature.members["payload"].shape)
        self._b = _fields(members["b"].signature.members["payload"].shape)
        clk, rst = dut.clk, dut.rst

        def bus(ch):
            return StreamBus.from_prefix(dut, f"{prefix}__{ch}")

        self.ar = StreamSink(bus("ar"), clk, rst, backpressure=stall, seed=seed)
        self.aw = StreamSink(bus("aw"), clk, rst, backpressure=stall, seed=seed + 1)
        self.w = StreamSink(bus("w"), clk, rst, backpressure=stall, seed=seed + 2)
        self.r = StreamSource(bus("r"), clk, rst, stall=stall, seed=seed + 3)
        self.b = StreamSource(bus("b"), clk, rst, stall=stall, seed=seed + 4)
        self.reads = self.writes = self.read_beats = self.write_beats = 0
        self._pending_r, self._pending_b, self._ready_r = deque(), deque(), deque()
        self._task = cocotb.start_soon(self._serve(clk))

    def _beat_addrs(self, word):
        addr = _get(word, self._a["addr"])
        n = _get(word, self._a["len"]) + 1
        size = 1 << _get(word, self._a["size"])
        base = addr - addr % size
        return [base + i * size for i in range(n)], _get(word, self._a["id"])

    async def _serve(self, clk):
        pending_r, pending_b = self._pending_r, self._pending_b  # (due cycle, words)
        ready_r = self._ready_r  # read beats due, waiting for bandwidth
        tokens = 0.0
        ar_seen = aw_seen = w_seen = 0
        writes = deque()  # accepted write addresses waiting for their data
        w_beats = []
        cycle = 0
        wb = self.data_bytes
        while True:
            await clk.rising_edge
            cycle += 1
            while ar_seen < len(self.ar.words):
                word, when = self.ar.words[ar_seen], self.ar.cycles[ar_seen]
                ar_seen += 1
                addrs, ident = self._beat_addrs(word)
                beats = []
                for i, a in enumerate(addrs):
                    chunk = self.mem[a : a + wb]
                    value = int.from_bytes(chunk.tobytes(), "little") << self._r["data"][0]
                    value |= ident << self._r["id"][0]
                    value |= int(i == len(addrs) - 1) << self._r["last"][0]
                    beats.append(value)
                self.reads += 1
                # A word sent after the edge of cycle c is valid in cycle c + 1.
                pending_r.append((when + self.latency - 1, beats))
            while aw_seen < len(self.aw.words):
                addrs, ident = self._beat_addrs(self.aw.words[aw_seen])
                writes.append((addrs, ident, self.aw.cycles[aw_seen]))
                aw_seen += 1
            while w_seen < len(self.w.words):
                w_beats.append((self.w.words[w_seen], self.w.cycles[w_seen]))
                w_seen += 1
            while writes and len(w_beats) >= len(writes[0][0]):
                addrs, ident, done = writes.popleft()
                for a in addrs:
                    word, when = w_beats.pop(0)
                    done = max(done, when)
                    payload = _get(word, self._w["data"])
                    write_strobed(self.mem[a : a + wb], payload, _get(word, self._w["strb"]))
                    self.write_beats += 1
                self.writes += 1
                pending_b.append((done + self.latency - 1, [ident << self._b["id"][0]]))
            while pending_r and pending_r[0][0] <= cycle:
                ready_r.extend(pending_r.popleft()[1])
            tokens = min(tokens + self.bandwidth, 1.0)
            if ready_r and tokens >= 1.0 and self.r.pending < 2:
                tokens -= 1.0
                self.read_beats += 1
                self.r.send([ready_r.popleft()])
            while pending_b and pending_b[0][0] <= cycle:
                self.b.send(pending_b.popleft()[1])

    def check_quiet(self):
        """Raise AssertionError unless every read was answered and taken, and every write
        address got one data burst and one response that was taken."""
        problems = []
        if self.r.pending or self.r.sent != self.read_beats or self._ready_r or self._pending_r:
            problems.append(f"{self.r.pending} read beats not taken")
        if len(self.aw.words) != self.writes:
            problems.append(f"{len(self.aw.words) - self.writes} write addresses without data")
        if len(self.w.words) != self.write_beats:
            problems.append(f"{len(self.w.words) - self.write_beats} write beats without address")
        if self.b.pending or self.b.sent != self.writes or self._pending_b:
            problems.append(f"{self.b.pending} write responses not taken")
        if len(self.ar.words) != self.reads:
            problems.append("read addresses not served")
        if problems:
            raise AssertionError("AXI4 memory model: " + "; ".join(problems))
