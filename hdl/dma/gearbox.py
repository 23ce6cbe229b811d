"""``ByteQueue``: the byte stream between a DMA engine's reader and its writer."""

from amaranth.hdl import Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import check_int, validated_init

__all__ = ["ByteQueue"]


class ByteQueue(wiring.Component):
    """A queue of bytes: up to ``word_bytes`` in per cycle, up to ``word_bytes`` out per cycle.

    The source side of a DMA reads whole memory words and keeps the bytes of its run; the
    destination side writes runs that start and end elsewhere in their words.  This queue joins
    the two: ``push`` appends the first ``bytes`` bytes of a word; ``head`` shows the oldest
    ``word_bytes`` bytes and ``count`` how many are held, and ``take`` removes that many from
    the front in the same cycle.  It holds ``2 word_bytes`` bytes: ``push`` is ready while at
    most ``word_bytes`` are held, so a push always fits whatever is taken.

    Interface
    ---------
    push : In(stream.Signature({data, bytes}))
        ``data``: the bytes in its low ``bytes`` bytes (byte ``i`` in bits ``[8i, 8i + 8)``).
    head : Out(8 * word_bytes)
    count : Out(range(2 * word_bytes + 1))
    take : In(range(word_bytes + 1))
        Bytes removed this cycle, at most ``count``.
    """

    @validated_init
    def __init__(self, word_bytes=16):
        self.word_bytes = check_int(word_bytes, "ByteQueue word_bytes", minimum=1, maximum=64)
        w = word_bytes
        super().__init__(
            {
                "push": In(
                    stream.Signature(data.StructLayout({"data": 8 * w, "bytes": range(w + 1)}))
                ),
                "head": Out(8 * w),
                "count": Out(range(2 * w + 1)),
                "take": In(range(w + 1)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.word_bytes
        buf = Signal(16 * w)
        m.d.comb += [
            self.head.eq(buf[: 8 * w]),
            self.push.ready.eq(self.count <= w),
        ]
        kept = Signal(range(2 * w + 1))
        m.d.comb += kept.eq(self.count - self.take)
        shifted = Signal(16 * w)
        m.d.comb += shifted.eq(buf >> (self.take << 3))
        with m.If(self.push.valid & self.push.ready):
            n = self.push.payload.bytes
            mask = Signal(8 * w)
            m.d.comb += mask.eq((Const(1, 8 * w + 1) << (n << 3)) - 1)
            new = Signal(16 * w)
            m.d.comb += new.eq((self.push.payload.data & mask) << (kept << 3))
            m.d.sync += [buf.eq(shifted | new), self.count.eq(kept + n)]
        with m.Else():
            m.d.sync += [buf.eq(shifted), self.count.eq(kept)]
        return m
