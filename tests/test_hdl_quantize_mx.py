"""Amaranth-simulator tests of the QuantizeMX RTL (``ncrtl.hdl.vector_engine``) against the golden.

The lane alone on corner and random elements of every configuration and on every element code
(each must come back unchanged with scale 2**0); the whole unit streaming beats of every
configuration, with invalid ones between them, under random stalls on both streams (output
beats bit for bit, nothing lost or duplicated, the error status), at one beat per cycle with a
latency of 2 without stalls; constructor refusals; and (``@pytest.mark.sim``) the Verilog of
the registry block lint-clean under ``verilator -Wall`` and latch-free in Yosys.
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from ncrtl import blocks
from ncrtl.hdl.vector_engine.lane import QuantizeLane, rounding_grid
from ncrtl.hdl.vector_engine.quantize_mx import LANE_MODULE, QuantizeMX
from ncrtl.model.fp import decode, encode, from_bits, get_format
from ncrtl.model.vector_engine import (
    ELEMENT_FORMATS,
    SCALE_RULES,
    SOURCE_FORMATS,
    group_nan_code,
    max_code,
    quantize_groups,
)
from ncrtl.testbench.lint import lint_verilog, synth_check
from ncrtl.testbench.vector_engine.beats import (
    Beats,
    beats_of,
    expected,
    pack_beats,
    unpack_beats,
)
from ncrtl.testbench.vector_engine.vectors import corner_groups, random_groups

CONFIGS = [
    (s, e, r)
    for s in range(len(SOURCE_FORMATS))
    for e in range(len(ELEMENT_FORMATS))
    for r in range(len(SCALE_RULES))
]

# Casting signalling NaNs to float64 in the golden warns; the values are right.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


# -- the lane -----------------------------------------------------------------------------------


def run_lane(rows):
    """``o_code`` of a :class:`QuantizeLane` for each row ``(bits, src, elem, scale, nan)``."""
    lane = QuantizeLane()
    got = []

    async def bench(ctx):
        for bits, s, e, scale, nan in rows:
            ctx.set(lane.i_bits, int(bits))
            ctx.set(lane.i_src_fmt, int(s))
            ctx.set(lane.i_elem_fmt, int(e))
            ctx.set(lane.i_scale, int(scale))
            ctx.set(lane.i_nan, int(nan))
            got.append(ctx.get(lane.o_code))

    sim = Simulator(lane)
    sim.add_testbench(bench)
    sim.run()
    return np.array(got, dtype=np.int64)


def lane_rows(groups, s, e, r):
    """Lane inputs and golden codes of every element of ``groups`` in one configuration."""
    codes, scales = quantize_groups(
        from_bits(groups, SOURCE_FORMATS[s]), ELEMENT_FORMATS[e], scale_rule=SCALE_RULES[r]
    )
    nan = np.repeat(scales == 0xFF, groups.shape[1])
    scale = np.repeat(np.where(scales == 0xFF, 0, scales), groups.shape[1])
    rows = list(zip(groups.reshape(-1), [s] * nan.size, [e] * nan.size, scale, nan))
    return rows, codes.reshape(-1).astype(np.int64)


@pytest.mark.parametrize("s", range(len(SOURCE_FORMATS)), ids=SOURCE_FORMATS)
def test_lane_matches_golden(s):
    rng = np.random.default_rng(20 + s)
    src = SOURCE_FORMATS[s]
    rows, want = [], []
    for _, e, r in [c for c in CONFIGS if c[0] == s]:
        groups = np.concatenate([corner_groups(src, rng), random_groups(rng, src, 40)])
        # Every element of every corner group would take minutes: a stride keeps all kinds.
        rw, wt = lane_rows(groups, s, e, r)
        rows += rw[::3]
        want.append(wt[::3])
    got = run_lane(rows)
    want = np.concatenate(want)
    bad = np.flatnonzero(got != want)
    assert not bad.size, [(rows[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


@pytest.mark.parametrize("e", range(len(ELEMENT_FORMATS)), ids=ELEMENT_FORMATS)
def test_lane_every_element_code_comes_back(e):
    """Every finite element value, given as FP16 (which holds them all) with the scale 2**0,
    is its own code."""
    fmt = get_format(ELEMENT_FORMATS[e])
    codes = np.arange(1 << fmt.bits)
    values = decode(codes.astype(np.uint8), fmt)
    keep = np.isfinite(values)
    src = encode(values[keep], "fp16")
    assert np.array_equal(decode(src, "fp16"), values[keep])
    got = run_lane([(b, 1, e, 127, 0) for b in src])
    assert np.array_equal(got, codes[keep])
    grid = rounding_grid(fmt)
    same = ("bias", "man_bits", "emin", "lsb_exp_min", "precision")
    assert [getattr(grid, a) for a in same] == [getattr(fmt, a) for a in same]
    assert grid.special == "ieee" and grid.exp_bits == fmt.exp_bits + 1


def test_lane_nan_and_invalid_format():
    rows = [(0x3F80, 0, e, 127, 1) for e in range(len(ELEMENT_FORMATS))]
    rows += [(0x3F80, 0, 3, 127, 0), (0x3F80, 0, 3, 127, 1)]
    got = run_lane(rows)
    want = [group_nan_code(f) for f in ELEMENT_FORMATS] + [0, 0]
    assert list(got) == want


def test_lane_saturates_and_keeps_signs():
    # BF16 -480.0 with scale 2**0 into e4m3fn: the NaN code's value saturates to -448 (0xFE).
    # -0.0 stays -0; -2**-20 rounds to -0.
    rows = [(0xC3F0, 0, 0, 127, 0), (0x8000, 0, 0, 127, 0), (0xB580, 0, 0, 127, 0)]
    rows += [(0x4780, 0, 1, 127, 0), (0x4100, 0, 2, 127, 0)]  # 65536 -> e5m2 max; 8 -> fp4 6
    got = run_lane(rows)
    assert list(got) == [
        0x80 | max_code("fp8_e4m3fn"),
        0x80,
        0x80,
        max_code("fp8_e5m2"),
        max_code("fp4_e2m1fn"),
    ]


# -- the unit -----------------------------------------------------------------------------------


def stream(dut, words, *, stall=0.0, seed=0, max_cycles=20000):
    """Drive ``words`` into ``dut.src`` (a presented word held until taken) with random idle
    cycles, take ``dut.dst`` beats with random backpressure; return ``(out words, cycle of
    every input transfer, cycle of every output transfer)``."""
    rng = np.random.default_rng(seed)
    out, t_in, t_out = [], [], []

    async def bench(ctx):
        k, presented, quiet = 0, False, 0
        for cycle in range(max_cycles):
            if not presented and k < len(words):
                presented = not (stall and rng.random() < stall)
            ctx.set(dut.src.valid, presented)
            ctx.set(dut.src.payload.as_value(), words[k] if k < len(words) else 0)
            ready = not (stall and rng.random() < stall)
            ctx.set(dut.dst.ready, ready)
            if presented and ctx.get(dut.src.ready):
                t_in.append(cycle)
                k, presented = k + 1, False
            if ready and ctx.get(dut.dst.valid):
                out.append(ctx.get(dut.dst.payload.as_value()))
                t_out.append(cycle)
            await ctx.tick()
            quiet = quiet + 1 if k == len(words) and not presented else 0
            if quiet > 2 * dut.latency + 8:
                return
        raise TimeoutError(f"{len(out)} of {len(words)} beats after {max_cycles} cycles")

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out, t_in, t_out


def mixed_beats(rng, groups, per_config):
    """Beats of every configuration, shuffled, with invalid-format beats between them."""
    parts = []
    for s, e, r in CONFIGS:
        src = SOURCE_FORMATS[s]
        g = np.concatenate([corner_groups(src, rng)[::25], random_groups(rng, src, per_config)])
        parts.append(beats_of(g, groups, s, e, r))
    bad = beats_of(random_groups(rng, "bf16", 3 * groups), groups, 0, 3, 0)
    bad.scale_rule = np.arange(len(bad)) % 2
    parts.append(bad)
    beats = Beats.concat(parts)
    order = rng.permutation(len(beats))
    return Beats(*(np.asarray(getattr(beats, f))[order] for f in beats.__dataclass_fields__))


@pytest.mark.parametrize("groups,stall", [(1, 0.3), (2, 0.5)])
def test_unit_streams_every_configuration(groups, stall):
    rng = np.random.default_rng(groups)
    beats = mixed_beats(rng, groups, 6 * groups)
    dut = QuantizeMX(groups, instance=False)
    out, t_in, _ = stream(dut, pack_beats(beats, groups), stall=stall, seed=groups)
    # Count first: every beat once.
    assert len(t_in) == len(beats) and len(out) == len(beats)
    got = unpack_beats(out, groups)
    want = expected(beats, groups)
    assert want[2].sum() >= 3 and (want[1] == 0xFF).any()
    for name, g, w in zip(("codes", "scales", "error"), got, want):
        bad = np.flatnonzero((g != w).reshape(len(beats), -1).any(axis=1))
        assert not bad.size, f"{name} differ in beats {bad[:5]}: {g[bad[0]]} vs {w[bad[0]]}"


def test_unit_full_rate_and_latency():
    groups = 1
    rng = np.random.default_rng(4)
    beats = beats_of(random_groups(rng, "fp16", 12), groups, "fp16", "fp8_e5m2", "trn3")
    dut = QuantizeMX(groups, instance=False)
    out, t_in, t_out = stream(dut, pack_beats(beats, groups))
    assert t_in == list(range(len(beats)))  # one beat per cycle, no bubble
    assert t_out == [t + dut.latency for t in t_in]
    got, want = unpack_beats(out, groups), expected(beats, groups)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize(
    "args,kwargs,exc,message",
    [
        ((0,), {}, ValueError, "QuantizeMX groups must be at least 1, not 0"),
        ((17,), {}, ValueError, "QuantizeMX groups must be at most 16, not 17"),
        (("4",), {}, TypeError, "QuantizeMX groups must be an integer, not '4'"),
        ((True,), {}, TypeError, "QuantizeMX groups must be an integer, not True"),
        ((4,), {"instance": 1}, TypeError, "QuantizeMX instance must be a bool, not 1"),
    ],
)
def test_constructor_refuses(args, kwargs, exc, message):
    with pytest.raises(exc) as info:
        QuantizeMX(*args, **kwargs)
    assert str(info.value) == message


def test_cells_and_payloads():
    units = [QuantizeMX(2), QuantizeMX(2, instance=False), QuantizeMX(3)]
    for unit in units:
        unit._MustUse__silence = True  # only its signature and cells are read
    assert [c.name for c in units[0].cells()] == [LANE_MODULE]
    assert units[1].cells() == []
    assert len(units[2].src.payload.data) == 3 * 32 * 16
    assert len(units[2].dst.payload.data) == 3 * 32 * 8


# -- generated Verilog: lint and synthesis ------------------------------------------------------


@pytest.mark.synth
def test_verilog_lint_clean_and_latch_free():
    """One group: every lane is the one lane module, so more groups add copies, not kinds."""
    groups = 1
    block = blocks.get("quantize_mx")
    params = block.resolve({"groups": str(groups)})
    text, top = block.verilog(params)
    assert text.count(f"module {LANE_MODULE}(") == 1
    assert text.count(f"{LANE_MODULE} lane_") == 32 * groups
    lint = lint_verilog(text, top)
    assert lint.ok, lint.log[:4000]
    synth = synth_check(block.verilog(params, synthesis=True)[0], top)
    assert synth.ok, synth.log[-4000:]
