"""Amaranth-simulator tests of the PSUM RTL (``hdl/psum``).

* Constructor validation (exact messages) and the documented latencies.
* :class:`~ncrtl.hdl.psum.arbiter.BankArbiter` against :class:`ncrtl.model.psum.Arbiter`, cycle by cycle.
* :class:`~ncrtl.hdl.psum.update.SlotUpdate` against :func:`ncrtl.model.psum.read_add_write` on corner and
  random values, every dtype, overwrite and accumulate, RNE and SR, both halves.
* The whole :class:`~ncrtl.hdl.psum.psum.Psum` through ``tests.psum_sim`` (the testbench's replay
  scoreboard): one address hammered by N = 1 accumulations every cycle (full rate, nothing
  lost), both halves of one word hammered with engine writes and reads of that word in between,
  every error code, response backpressure, SR from the reset generator states, a short random
  program with stalls.
* Verilog: a small configuration lint-clean and latch-free; the full size generates (slow).
"""

import re

import numpy as np
import pytest
from amaranth.sim import Simulator

from ncrtl.hdl.fp.xorwow import Xorwow
from ncrtl.hdl.psum.arbiter import BankArbiter
from ncrtl.hdl.psum.bank import BankMemory
from ncrtl.hdl.psum.psum import SLOT_MODULE, Psum, bank_module
from ncrtl.hdl.psum.update import SlotUpdate
from ncrtl.hdl.verilog import convert
from ncrtl.model.psum import Arbiter, read_add_write
from ncrtl.model.psum.isa import Dtype, Error, Flag, Geometry, Rounding, Write
from ncrtl.testbench.lint import lint_verilog, synth_check
from ncrtl.testbench.psum.program import CORNERS, EngineReq, Phase, beat_values, random_program
from tests.psum_sim import run_phases

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def _clean(boards):
    bad = [b.report() for b in boards if b.mismatches]
    assert not bad, "\n".join(bad)


def _consecutive(cycles):
    return bool(cycles) and cycles[-1] - cycles[0] + 1 == len(cycles)


# -- construction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,kwargs,exc,message",
    [
        ((0,), {}, ValueError, "Psum partitions must be an integer in 1..128, not 0"),
        ((129,), {}, ValueError, "Psum partitions must be an integer in 1..128, not 129"),
        ((True,), {}, TypeError, "Psum partitions must be an integer, not True"),
        ((4.0,), {}, TypeError, "Psum partitions must be an integer, not 4.0"),
        ((4, 17), {}, ValueError, "Psum banks must be an integer in 1..16, not 17"),
        ((4, 4, 100), {}, ValueError, "Psum bank_bytes must be a power of two in 8..4096, not 100"),
        (
            (4, 4, 8192),
            {},
            ValueError,
            "Psum bank_bytes must be a power of two in 8..4096, not 8192",
        ),
        ((4, 4, 64), {"instance": 1}, TypeError, "Psum instance must be a bool, not 1"),
    ],
)
def test_psum_arguments(args, kwargs, exc, message):
    with pytest.raises(exc, match="^" + re.escape(message) + "$"):
        Psum(*args, **kwargs)


def test_unit_arguments():
    with pytest.raises(ValueError, match=r"^BankArbiter banks must be at least 1, not 0$"):
        BankArbiter(0)
    with pytest.raises(TypeError, match=r"^BankArbiter banks must be an integer, not '8'$"):
        BankArbiter("8")
    with pytest.raises(ValueError, match=r"^BankMemory width must be a multiple of 16, not 24$"):
        BankMemory(24, 4)
    with pytest.raises(ValueError, match=r"^BankMemory depth must be at least 1, not 0$"):
        BankMemory(32, 0)
    with pytest.raises(ValueError, match=r"^Xorwow init must be six 32-bit words"):
        Xorwow(init=(1, 2, 3))


def test_geometry_and_latencies():
    p = Psum()
    assert (p.partitions, p.banks, p.bank_bytes, p.rows) == (128, 8, 2048, 512)
    assert (p.raw_latency, p.read_latency, p.done_latency, p.error_latency, p.resp_depth) == (
        3,
        3,
        4,
        1,
        4,
    )
    assert len(p.data.payload.data) == 128 * 32
    assert len(p.ve.req.payload.as_value()) == 18 + 128 * 32
    assert len(p.seed.payload.as_value()) == 8 + 6 * 32 and len(p.o_grant) == 3
    small = Psum(4, 4, 64)
    assert repr(small) == "Psum(4, 4, 64)"
    for unused in (p, small):
        unused._MustUse__silence = True
    assert SlotUpdate.latency == 1 and BankArbiter.latency == 0


# -- the arbiter --------------------------------------------------------------------------------


def test_arbiter_matches_model():
    """Random presents and banks with heavy contention (2 banks), then 3 banks, cycle by cycle:
    the grants and the order's evolution of the golden."""
    rng = np.random.default_rng(5)
    dut = BankArbiter(4)
    gold = Arbiter()
    cycles, full = 3000, 30
    pres = rng.random((cycles + full, 3)) < 0.8
    banks = np.where(
        np.arange(cycles + full)[:, None] < cycles // 2,
        rng.integers(0, 2, (cycles + full, 3)),
        rng.integers(0, 3, (cycles + full, 3)),
    )
    # Then all three on one bank, every cycle.
    pres[cycles:], banks[cycles:] = True, 1
    cycles += full
    got, want = [], []

    async def bench(ctx):
        for t in range(cycles):
            ctx.set(dut.i_present, sum(int(pres[t, i]) << i for i in range(3)))
            ctx.set(dut.i_bank, sum(int(banks[t, i]) << (4 * i) for i in range(3)))
            got.append(ctx.get(dut.o_grant))
            g = gold.step([int(banks[t, i]) if pres[t, i] else None for i in range(3)])
            want.append(sum(int(x) << i for i, x in enumerate(g)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == want
    # Full contention on one bank: the three take turns.
    tail = want[-full:]
    assert all(tail.count(1 << i) == full // 3 for i in range(3))
    assert all(tail[k] != tail[k + 1] for k in range(full - 1))


# -- the slot update ----------------------------------------------------------------------------


def _slot_cases(rng, pairs=120, randoms=600):
    """(old word, value, dtype, half, overwrite, sr, rand) cases: ``pairs`` corner pairs for
    every mode (the cocotb conformance covers far more through the whole PSUM), then random
    values."""
    cases = []
    corners = [int(c) for c in CORNERS]
    olds = corners + [0x3F80BF80, 0x7FC00000 | 0x7F80, 0xFF80FF80, 0x00010001, 0x80008000]
    for dtype, over, sr in (
        (0, 1, 0),
        (0, 0, 0),
        (1, 1, 0),
        (1, 0, 0),
        (1, 1, 1),
        (1, 0, 1),
        (2, 1, 0),
    ):
        for _ in range(pairs):
            cases.append(
                (
                    int(rng.choice(olds)),
                    int(rng.choice(corners)),
                    dtype,
                    int(rng.integers(0, 2)),
                    over,
                    sr,
                    int(rng.integers(0, 1 << 16)),
                )
            )
    vals = beat_values(rng, (randoms,))
    olds = beat_values(rng, (randoms,))
    for k in range(randoms):
        dtype = int(rng.integers(0, 3))
        over = 1 if dtype == 2 else int(rng.integers(0, 2))
        sr = int(dtype == 1 and rng.random() < 0.5)
        cases.append(
            (
                int(olds[k]),
                int(vals[k]),
                dtype,
                int(rng.integers(0, 2)),
                over,
                sr,
                int(rng.integers(0, 1 << 16)),
            )
        )
    return cases


def _slot_golden(old, v, dtype, half, over, sr, rand):
    kw = dict(
        dtype=dtype,
        overwrite=bool(over),
        rounding=Rounding(sr),
        rand=np.array([rand]) if sr else None,
    )
    value = np.array([v], dtype=np.uint32)
    if dtype == Dtype.FP32:
        return int(read_add_write(np.array([old], dtype=np.uint32), value, **kw)[0])
    o16 = np.array([(old >> (16 * half)) & 0xFFFF], dtype=np.uint16)
    new = int(read_add_write(o16, value, **kw)[0])
    return new | new << 16


def test_slot_update_matches_golden():
    rng = np.random.default_rng(7)
    cases = _slot_cases(rng)
    dut = SlotUpdate()
    got = []

    async def bench(ctx):
        for k in range(len(cases) + 1):
            if k < len(cases):
                old, v, dtype, half, over, sr, rand = cases[k]
                for port, val in (
                    ("i_old", old),
                    ("i_value", v),
                    ("i_dtype", dtype),
                    ("i_half", half),
                    ("i_overwrite", over),
                    ("i_sr", sr),
                    ("i_rand", rand),
                ):
                    ctx.set(getattr(dut, port), val)
            await ctx.tick()
            got.append(ctx.get(dut.o_word))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    want = [_slot_golden(*c) for c in cases]
    bad = [(cases[k], hex(got[k]), hex(want[k])) for k in range(len(cases)) if got[k] != want[k]]
    assert not bad, bad[:5]


# -- the whole PSUM -----------------------------------------------------------------------------


def _hammer(bank, col, count, dtype, rounding, rng, partitions):
    writes = []
    for j in range(count):
        flags = Flag.FIRST if j == 0 else (Flag.LAST if j == count - 1 else 0)
        writes.append(
            (
                Write(bank=bank, col=col, n=1, dtype=dtype, rounding=rounding, flags=int(flags)),
                beat_values(rng, (1, partitions), corner=0.0),
            )
        )
    return writes


def test_hammer_one_address_full_rate():
    """N = 1 accumulations into one FP32 address, then one BF16 SR address, every cycle: one
    beat per cycle, every update kept (the final value is the golden's sequential sum)."""
    rng = np.random.default_rng(1)
    dut = Psum(4, 2, 64)
    writes = _hammer(1, 3, 40, Dtype.FP32, Rounding.RNE, rng, 4) + _hammer(
        0, 7, 40, Dtype.BF16, Rounding.SR, rng, 4
    )
    readback = Phase("readback", ve=[EngineReq(0, 0, 1, 3), EngineReq(0, 0, 0, 3)])
    replay, responses, boards, info = run_phases(
        dut, [Phase("hammer", writes, stall=0.0), readback]
    )
    _clean(boards)
    assert _consecutive(info["hammer"]) and len(info["hammer"]) == 80
    assert [b for _, b in replay.got_done] == [1, 0]
    gold = replay.golden
    assert (gold.read(1, 3, 1, Dtype.FP32).view(np.uint32)[:, 0] != 0).any()


def test_hammer_both_halves_with_engines():
    """BF16 accumulations alternating between the two halves of one word every cycle, while VE
    writes one half of that word (masks 1, 2) and SE reads it: per-half forwarding from every
    requester, arbitration on one bank."""
    rng = np.random.default_rng(2)
    P = 4
    dut = Psum(P, 2, 64)
    writes = [
        (
            Write(bank=1, col=10, n=1, dtype=Dtype.BF16, flags=int(Flag.FIRST)),
            beat_values(rng, (1, P)),
        ),
        (
            Write(bank=1, col=11, n=1, dtype=Dtype.BF16, flags=int(Flag.FIRST_ACCUMULATE)),
            beat_values(rng, (1, P)),
        ),
    ]
    for j in range(60):
        rounding = Rounding.SR if j % 3 else Rounding.RNE
        writes.append(
            (
                Write(
                    bank=1,
                    col=10 + j % 2,
                    n=1,
                    dtype=Dtype.BF16,
                    rounding=rounding,
                    flags=int(Flag.LAST) if j == 59 else 0,
                ),
                beat_values(rng, (1, P)),
            )
        )
    ve = [EngineReq(1, 1 + j % 2, 1, 5, beat_values(rng, (P,))) for j in range(30)]
    se = [EngineReq(0, 0, 1, 5) for _ in range(30)]
    replay, responses, boards, info = run_phases(dut, [Phase("halves", writes, ve, se, stall=0.0)])
    _clean(boards)
    # The three requesters shared bank 1: every one of them was granted, none twice in a cycle.
    assert all(replay.grant_cycles[p] for p in ("te", "ve", "se"))
    assert len(responses["se"]) == 30


def test_every_error_code():
    """An illegal write of every rule (and random multi-rule words), their beats drained, legal
    writes around them unaffected; bad engine requests flagged with code 1 or 2 (a bad read still
    answers zeros)."""
    from ncrtl.testbench.psum.program import _Planner

    rng = np.random.default_rng(3)
    g = Geometry(4, 4, 64)
    pl = _Planner(rng, g)
    for bank in range(g.banks):
        pl.start_group(bank)
        pl.group_write(bank)
    for kind in Error:
        if kind != Error.NONE:
            assert pl.illegal(kind)
            if 0 in pl.plans:
                pl.group_write(0)
    for _ in range(10):
        pl.illegal_random()
    ve = [
        EngineReq(0, 0, 9, 0),
        EngineReq(1, 3, 0, 100, beat_values(rng, (4,))),
        EngineReq(0, 0, 2, 1),
    ]
    se = [EngineReq(0, 0, 0, 16), EngineReq(1, 1, 15, 0, beat_values(rng, (4,)))]
    replay, responses, boards, _ = run_phases(
        Psum(4, 4, 64), [Phase("errors", pl.writes, ve, se)], stall=0.3, seed=3
    )
    _clean(boards)
    codes = sorted({c for _, c in replay.got_errors})
    assert codes == [int(k) for k in Error if k != Error.NONE]
    assert [c for _, c in replay.got_eng_errors["ve"]] == [1, 2]
    assert [c for _, c in replay.got_eng_errors["se"]] == [2, 1]
    assert responses["ve"][0] == 0 and responses["se"][0] == 0


def test_response_backpressure_loses_nothing():
    """Reads on both ports every cycle with heavy backpressure and stalls: every response
    arrives once, in order; requests wait while responses cannot be held."""
    rng = np.random.default_rng(4)
    fill = [(Write(bank=b, col=0, n=16, flags=3), beat_values(rng, (16, 4))) for b in range(4)]
    ve = [EngineReq(0, 0, int(rng.integers(0, 4)), int(rng.integers(0, 16))) for _ in range(80)]
    se = [EngineReq(0, 0, int(rng.integers(0, 4)), int(rng.integers(0, 16))) for _ in range(80)]
    replay, responses, boards, _ = run_phases(
        Psum(4, 4, 64),
        [Phase("fill", fill, stall=0.0), Phase("reads", ve=ve, se=se)],
        stall=0.7,
        seed=4,
    )
    _clean(boards)
    assert len(responses["ve"]) == 80 and len(responses["se"]) == 80


def test_sr_from_reset_states():
    """Without any seed load, SR writes draw from partition p's reset state seed_state(p) (the
    golden's Psum(seed=0)): values whose rounding depends on the draw."""
    rng = np.random.default_rng(6)
    P = 8
    writes = []
    for k in range(6):
        v = beat_values(rng, (4, P), corner=0.0) | np.uint32(0x00007FFF)  # never BF16-exact
        writes.append(
            (Write(bank=k % 2, col=4 * k, n=4, dtype=Dtype.BF16, rounding=Rounding.SR, flags=3), v)
        )
    readback = Phase("readback", ve=[EngineReq(0, 0, b, r) for b in range(2) for r in range(16)])
    _, _, boards, _ = run_phases(Psum(P, 2, 64), [Phase("sr", writes, stall=0.0), readback])
    _clean(boards)


@pytest.mark.parametrize(
    "geometry", [(4, 4, 64), (1, 1, 8), (3, 16, 8)], ids=lambda g: "x".join(map(str, g))
)
def test_random_program_small(geometry):
    """A short random program (every phase) with stalls and backpressure; also the smallest
    geometry (one partition, one bank of two rows) and the most banks."""
    g = Geometry(*geometry)
    prog = random_program(np.random.default_rng(8), g, beats=120)
    _, _, boards, info = run_phases(Psum(*geometry), prog.phases, stall=0.25, seed=8)
    _clean(boards)
    for name in ("hammer", "full_rate", "seeds"):
        assert _consecutive(info[name]), name


# -- Verilog ------------------------------------------------------------------------------------


@pytest.mark.synth
def test_verilog_small_lint_and_synth():
    """4 x 4 x 64 B lint-clean; 2 x 2 x 16 B (the same logic, fewer copies) synthesizes without
    a latch."""
    top = "psum_4x4x64"
    text = convert(Psum(4, 4, 64, instance=True), top)
    assert text.count(f"module {SLOT_MODULE}(") == 1
    assert text.count(f"module {bank_module(4, 16)}(") == 1
    lint_verilog(text, top).check()
    top = "psum_2x2x16"
    synth_check(convert(Psum(2, 2, 16, instance=True), top, synthesis=True), top).check()


@pytest.mark.synth
@pytest.mark.parametrize(
    "geometry", [(1, 1, 8), (3, 16, 8), (8, 8, 128)], ids=lambda g: "x".join(map(str, g))
)
def test_verilog_lint_geometries(geometry):
    top = "psum_t"
    lint_verilog(convert(Psum(*geometry, instance=True), top), top).check()


def test_synth_view_blackboxes_big_banks():
    """``ncrtl lint`` synthesizes big banks as blackbox SRAM macros, small ones for real."""
    big = convert(Psum(16, 8, 2048, instance=True), "t", synthesis=True)
    assert "(* blackbox *)\nmodule psum_bank_512x512(" in big
    assert "blackbox" not in convert(Psum(16, 8, 2048, instance=True), "t")
    small = convert(Psum(4, 4, 64, instance=True), "t", synthesis=True)
    assert "blackbox" not in small and "module psum_bank_128x16(" in small


@pytest.mark.synth
@pytest.mark.slow
def test_verilog_full_size():
    """128 x 8 x 2 KiB: one slot module, one bank module, lint-clean."""
    top = "psum_128x8x2048"
    text = convert(Psum(instance=True), top)
    assert text.count(f"module {SLOT_MODULE}(") == 1
    assert text.count(f"module {bank_module(128, 512)}(") == 1
    assert len(re.findall(rf"^\s*{SLOT_MODULE} ", text, re.M)) == 128
    lint_verilog(text, top).check()
