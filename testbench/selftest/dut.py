"""Self-test DUTs: valid/ready streams that add one to every lane.

Small enough to build in seconds, but they have the properties the stream harness has to get
right: back-pressure and a latency of more than one cycle, so a driver that drops, duplicates or
reorders words is caught by the scoreboard.  :class:`StreamIncrement` is a FIFO (registered
``i_stream.ready``); :class:`StreamPipeline` is a stall-the-whole-pipeline design whose
``i_stream.ready`` depends combinationally on ``o_stream.ready``, like
:class:`ncrtl.hdl.common.stream.StreamLanes`.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamIncrement", "StreamPipeline"]


class StreamIncrement(wiring.Component):
    """FIFO of packed lane words whose output lanes are the input lanes plus one.

    Parameters
    ----------
    lanes : int
        Lanes per word.
    lane_bits : int
        Bits per lane; lane ``i`` occupies bits ``[i*lane_bits, (i+1)*lane_bits)``.
    depth : int
        FIFO depth (:class:`amaranth.lib.fifo.SyncFIFOBuffered`).

    Interface
    ---------
    i_stream : In(stream.Signature(lanes * lane_bits))
        Input words.
    o_stream : Out(stream.Signature(lanes * lane_bits))
        Output words; lane ``i`` is ``(lane_i(word) + 1) mod 2**lane_bits``.
    """

    def __init__(self, *, lanes=4, lane_bits=16, depth=4):
        if not isinstance(lanes, int) or lanes < 1:
            raise TypeError(f"Lanes must be a positive integer, not {lanes!r}")
        if not isinstance(lane_bits, int) or lane_bits < 1:
            raise TypeError(f"Lane bits must be a positive integer, not {lane_bits!r}")
        if not isinstance(depth, int) or depth < 2:
            raise TypeError(f"Depth must be an integer of at least 2, not {depth!r}")
        self._lanes = lanes
        self._lane_bits = lane_bits
        self._depth = depth
        width = lanes * lane_bits
        super().__init__(
            {
                "i_stream": In(stream.Signature(width)),
                "o_stream": Out(stream.Signature(width)),
            }
        )

    @property
    def lanes(self):
        return self._lanes

    @property
    def lane_bits(self):
        return self._lane_bits

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = q = fifo.SyncFIFOBuffered(
            width=self._lanes * self._lane_bits, depth=self._depth
        )
        i_s, o_s = self.i_stream, self.o_stream
        m.d.comb += [
            q.w_data.eq(i_s.payload),
            q.w_en.eq(i_s.valid),
            i_s.ready.eq(q.w_rdy),
            o_s.valid.eq(q.r_rdy),
            q.r_en.eq(o_s.ready),
        ]
        w = self._lane_bits
        for i in range(self._lanes):
            # Truncating add: lane + 1 mod 2**lane_bits, no carry into the next lane.
            m.d.comb += o_s.payload[i * w : (i + 1) * w].eq(q.r_data[i * w : (i + 1) * w] + 1)
        return m


class StreamPipeline(wiring.Component):
    """``stages``-deep pipeline that stalls as a whole; output lanes are input lanes plus one.

    Parameters
    ----------
    lanes : int
        Lanes per word.
    lane_bits : int
        Bits per lane; lane ``i`` occupies bits ``[i*lane_bits, (i+1)*lane_bits)``.
    stages : int
        Pipeline registers between input and output (the latency in cycles).

    Interface
    ---------
    i_stream : In(stream.Signature(lanes * lane_bits))
        Input words; ``ready = ~o_stream.valid | o_stream.ready``: combinational from
        ``o_stream.ready``.
    o_stream : Out(stream.Signature(lanes * lane_bits))
        Output words; lane ``i`` is ``(lane_i(word) + 1) mod 2**lane_bits``.
    """

    def __init__(self, *, lanes=4, lane_bits=16, stages=3):
        if not isinstance(lanes, int) or lanes < 1:
            raise TypeError(f"Lanes must be a positive integer, not {lanes!r}")
        if not isinstance(lane_bits, int) or lane_bits < 1:
            raise TypeError(f"Lane bits must be a positive integer, not {lane_bits!r}")
        if not isinstance(stages, int) or stages < 1:
            raise TypeError(f"Stages must be a positive integer, not {stages!r}")
        self._lanes = lanes
        self._lane_bits = lane_bits
        self._stages = stages
        width = lanes * lane_bits
        super().__init__(
            {
                "i_stream": In(stream.Signature(width)),
                "o_stream": Out(stream.Signature(width)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        width = self._lanes * self._lane_bits
        valid = [Signal(name=f"v{k}") for k in range(self._stages)]
        data = [Signal(width, name=f"d{k}") for k in range(self._stages)]
        advance = Signal()
        i_s, o_s = self.i_stream, self.o_stream
        m.d.comb += [
            advance.eq(~valid[-1] | o_s.ready),
            i_s.ready.eq(advance),
            o_s.valid.eq(valid[-1]),
        ]
        with m.If(advance):
            m.d.sync += [valid[0].eq(i_s.valid), data[0].eq(i_s.payload)]
            for k in range(1, self._stages):
                m.d.sync += [valid[k].eq(valid[k - 1]), data[k].eq(data[k - 1])]
        w = self._lane_bits
        for i in range(self._lanes):
            m.d.comb += o_s.payload[i * w : (i + 1) * w].eq(data[-1][i * w : (i + 1) * w] + 1)
        return m
