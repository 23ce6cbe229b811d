"""cocotb conformance of :class:`ncrtl.hdl.vector_engine.quantize_mx.QuantizeMX` against the golden
:func:`ncrtl.model.vector_engine.quantize_groups`.

Run through :mod:`ncrtl.testbench.conformance` (``ncrtl conformance quantize_mx --param
groups=4``): the block parameters, vector count, seed and stall probability come from the
environment.  For both source formats, every element format and both scale rules (12
configurations): every 16-bit source code once in code order and once shuffled, the corner
groups, and ``count / 12`` random groups; plus beats with the invalid element format 3.  All
beats stream in one random order (the configuration changes from beat to beat) with random idle
cycles on ``src`` and random backpressure on ``dst``.  Scoreboards: the beat sequence (the
count first, then every beat's error flag: nothing lost, nothing duplicated, checked again after
the pipeline has drained), and per configuration every element code and every scale byte, bit
for bit; the invalid beats' data and scales must be 0.
"""

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from ncrtl.hdl.vector_engine.quantize_mx import QuantizeMX
from ncrtl.model.fp import decode
from ncrtl.model.vector_engine import (
    ELEMENT_FORMATS,
    GROUP_SIZE,
    SCALE_RULES,
    SOURCE_FORMATS,
)
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.scoreboard import Scoreboard, write_counters
from ncrtl.testbench.stream import StreamBus, StreamSink, StreamSource
from ncrtl.testbench.vector_engine.beats import (
    INVALID_ELEM_FMT,
    Beats,
    beats_of,
    expected,
    pack_beats,
    unpack_beats,
)
from ncrtl.testbench.vector_engine.vectors import all_code_groups, corner_groups, random_groups

_CFG = ("src_fmt", "elem_fmt", "scale_rule")
CONFIGS = [
    (s, e, r)
    for s in range(len(SOURCE_FORMATS))
    for e in range(len(ELEMENT_FORMATS))
    for r in range(len(SCALE_RULES))
]


class QuantizeMXTB:
    """Clock, reset, the ``src`` source with random idle cycles and the ``dst`` sink with random
    backpressure (seeded).

    Parameters
    ----------
    dut : cocotb handle
        The top (``clk``, ``rst``, streams ``src`` and ``dst``).
    groups : int
        Groups per beat of the build.
    stall : float
        Idle-cycle probability of ``src`` and backpressure probability of ``dst``.
    seed : int
    """

    def __init__(self, dut, groups, *, stall=0.0, seed=0):
        self.dut, self.groups = dut, groups
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        self.src = StreamSource(
            StreamBus.from_prefix(dut, "src"), dut.clk, dut.rst, stall=stall, seed=seed
        )
        self.dst = StreamSink(
            StreamBus.from_prefix(dut, "dst"), dut.clk, dut.rst, backpressure=stall, seed=seed + 1
        )

    async def reset(self, cycles=2):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0

    async def run(self, beats):
        """Stream ``beats``; return the output words received (at least one per beat, and any
        extra one that arrives while the pipeline drains)."""
        self.src.send(pack_beats(beats, self.groups))
        await self.dst.wait(len(beats))
        await ClockCycles(self.dut.clk, 4 * QuantizeMX.latency + 8)
        return await self.dst.recv(self.dst.available)


def stimulus(rng, groups, count):
    """Beats of every configuration in one random order, and the invalid beats among them."""
    parts = []
    per_config = max(1, count // len(CONFIGS))
    for s, e, r in CONFIGS:
        src = SOURCE_FORMATS[s]
        g = np.concatenate(
            [
                all_code_groups(src),
                all_code_groups(src, rng),
                corner_groups(src, rng),
                random_groups(rng, src, per_config),
            ]
        )
        parts.append(beats_of(g, groups, s, e, r))
    invalid = beats_of(random_groups(rng, "bf16", 16 * groups), groups, 0, INVALID_ELEM_FMT, 0)
    invalid.src_fmt = rng.integers(0, 2, len(invalid))
    invalid.scale_rule = rng.integers(0, 2, len(invalid))
    parts.append(invalid)
    beats = Beats.concat(parts)
    order = rng.permutation(len(beats))
    return Beats(beats.codes[order], *(getattr(beats, f)[order] for f in _CFG))


@cocotb.test()
async def test_quantize_mx(dut):
    """Every source code, corners and random groups of every configuration, invalid beats."""
    params, count, seed, stall = tb_settings()
    groups = int(params["groups"])
    tb = QuantizeMXTB(dut, groups, stall=stall, seed=seed)
    await tb.reset()
    rng = np.random.default_rng(seed)
    beats = stimulus(rng, groups, count)
    words = await tb.run(beats)
    want_c, want_s, want_e = expected(beats, groups)
    n = min(len(words), len(beats))
    got_c, got_s, got_e = unpack_beats(words[:n], groups)
    boards = []

    # The beat count first, then each beat's error flag: a lost or an extra beat is a mismatch.
    sb = Scoreboard("qmx.beats", bits=1)
    sb.compare_sequence(list(unpack_beats(words, groups)[2]), list(want_e))
    boards.append(sb)
    cfg = np.stack([beats.src_fmt, beats.elem_fmt, beats.scale_rule], axis=1)[:n]
    for s, e, r in CONFIGS:
        sel = np.flatnonzero((cfg == (s, e, r)).all(axis=1))
        name = f"{SOURCE_FORMATS[s]}.{ELEMENT_FORMATS[e]}.{SCALE_RULES[r]}"
        fmt = ELEMENT_FORMATS[e]
        src_codes = beats.codes[sel].reshape(-1, GROUP_SIZE)
        sb = Scoreboard(
            f"qmx.{name}", fmt, bits=8, decode=lambda x, f=fmt: decode(np.asarray(x, np.uint8), f)
        )
        sb.compare(got_c[sel], want_c[sel], inputs=src_codes.reshape(-1))
        boards.append(sb)
        sb = Scoreboard(f"qmx.{name}.scale", "e8m0", bits=8)
        sb.compare(got_s[sel], want_s[sel], inputs=src_codes)
        boards.append(sb)
    bad = np.flatnonzero(beats.elem_fmt[:n] >= INVALID_ELEM_FMT)
    sb = Scoreboard("qmx.invalid", "data and scales of invalid beats", bits=8)
    sb.compare(
        np.concatenate([got_c[bad], got_s[bad]], axis=1),
        np.zeros((bad.size, (GROUP_SIZE + 1) * groups), np.uint8),
    )
    boards.append(sb)

    for sb in boards:
        sb.write_json()
        dut._log.info(sb.report())
    write_counters(cycles=tb.dst.cycle, beats=len(beats))
    for sb in boards:
        sb.assert_clean()
