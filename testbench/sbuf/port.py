"""The SBUF's engine port in cocotb testbenches: load the whole SBUF and read it back, a word
of every partition per beat (:func:`ncrtl.hdl.sbuf.memory.engine_request_layout`)."""

import numpy as np
from amaranth.hdl import Const

from ncrtl.hdl.sbuf.memory import engine_request_layout
from ncrtl.testbench.stream import StreamBus, StreamSink, StreamSource

__all__ = ["SbufEnginePort"]


class SbufEnginePort:
    """The streams ``<req>`` and ``<resp>`` of a top (an SBUF's engine port) of
    ``partitions`` x ``partition_bytes`` with ``word_bytes`` words: :meth:`load` writes the
    whole SBUF, :meth:`read` returns it."""

    def __init__(self, dut, req, resp, *, partitions, partition_bytes, word_bytes, seed=0):
        clk, rst = dut.clk, dut.rst
        self.req = StreamSource(StreamBus.from_prefix(dut, req), clk, rst, seed=seed)
        self.resp = StreamSink(StreamBus.from_prefix(dut, resp), clk, rst, seed=seed + 1)
        self.partitions, self.word_bytes = partitions, word_bytes
        self.words = partition_bytes // word_bytes
        self._layout = engine_request_layout(partitions, self.words, word_bytes)

    def _word(self, word, write, value):
        fields = {
            "mask": (1 << self.partitions) - 1,
            "word": word,
            "write": write,
            "data": value,
            "strobe": (1 << self.word_bytes) - 1 if write else 0,
        }
        return Const.cast(self._layout.const(fields)).value

    async def load(self, contents):
        """Write ``contents`` (``[partitions, partition_bytes]`` uint8)."""
        w = self.word_bytes
        self.req.send(
            [
                self._word(
                    k, 1, int.from_bytes(contents[:, k * w : (k + 1) * w].tobytes(), "little")
                )
                for k in range(self.words)
            ]
        )
        await self.req.wait()

    async def read(self):
        """The whole SBUF, ``[partitions, partition_bytes]`` uint8."""
        w, parts, n = self.word_bytes, self.partitions, self.words
        self.req.send([self._word(k, 0, 0) for k in range(n)])
        words = await self.resp.recv(n, timeout=20 * n + 100)
        out = np.zeros((parts, n * w), dtype=np.uint8)
        for k, value in enumerate(words):
            raw = np.frombuffer(value.to_bytes(parts * w, "little"), np.uint8)
            out[:, k * w : (k + 1) * w] = raw.reshape(parts, w)
        return out
