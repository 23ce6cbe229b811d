"""Amaranth-simulator tests of the Tensor Engine RTL (``hdl/tensor_engine``).

* One PE in every mode (fp32, tf32, bf16, fp16, fp8 x 16 format pairs, double_row x 9, first-row
  psum cut, bubbles, transpose words) against ``ncrtl.model.fp.fp32_dot_add``.
* The systolic array alone: LS + MM bf16 4x4 against a chain computed with ``fp32_dot_add``.
* The whole engine on tiny arrays: random LS / MM programs in every mode (values against
  ``ncrtl.model.tensor_engine.matmul``, every output and error cycle against
  ``ncrtl.model.tensor_engine.timing``), input stalls and output backpressure, illegal instructions
  (codes of ``isa.check``, engine usable afterwards), transpose NaN payloads and selection errors,
  row and column tiling (with a small ``tile_unit``), the hardware ``isa.check`` against the golden
  on random instruction words of a 128 x 128 engine.
* Verilog: a 4x4 engine lint-clean and latch-free with one PE module; a 128x128 engine with one
  PE module definition (``@pytest.mark.slow``).
"""

import re
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module, Shape
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from ncrtl.hdl.tensor_engine.array import PE_MODULE, TILE_MODULE, SystolicArray, beat_tag_layout
from ncrtl.hdl.tensor_engine.control import INSTR_LAYOUT, LS_DESC_LAYOUT, check_logic
from ncrtl.hdl.tensor_engine.pe import (
    LANE_WIDTH,
    LS_CTL_LAYOUT,
    P_PREFIX,
    PE,
    TAG_LAYOUT,
    decode_tag,
    tag_fields,
)
from ncrtl.hdl.tensor_engine.top import TensorEngine, stationary_beats
from ncrtl.hdl.verilog import convert, flat_module
from ncrtl.model.fp import encode, fp32_dot_add, from_bits, get_format
from ncrtl.model.modes import (
    ENGINE_MODES,
    get_mode,
    mode_by_code,
    operand_formats,
    operation,
    operations,
    pe_modes,
)
from ncrtl.model.tensor_engine import isa, timing
from ncrtl.model.tensor_engine.isa import FP8_FORMATS, Error, Instruction, Mode, Op
from ncrtl.model.tensor_engine.matmul import matmul
from ncrtl.testbench.lint import lint_verilog, synth_check
from ncrtl.testbench.tensor_engine.program import (
    background_program,
    golden_bits,
    interleave,
    lane_words,
    random_scales,
    tile_shape,
    tile_steps,
)
from tests.test_hdl_fp import FP32_CORNERS, corner_codes, golden_dot_add, random_codes

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

#: Bits of one input lane word (data and MX scale) and of one result lane.
LANE = LANE_WIDTH
RESULT_LANE = 32


def pack(layout, **fields):
    """Integer value of a struct layout with the given fields (others 0)."""
    v = 0
    for name, field in layout:
        width = Shape.cast(field.shape).width
        v |= (int(fields.get(name, 0)) & ((1 << width) - 1)) << field.offset
    return v


def lanes(words, width=LANE):
    return sum(int(w) << (width * i) for i, w in enumerate(words))


def unlanes(value, n):
    return [(value >> (RESULT_LANE * i)) & 0xFFFFFFFF for i in range(n)]


# -- one PE -------------------------------------------------------------------------------------


def beat_tag(tag, bank):
    """The PE tag fields of a beat given as ``mode``, ``fmt_s``, ``fmt_m``, ``transpose``,
    ``first_row`` (and ``valid=0`` for a bubble), through the mode table's decode."""
    if not tag.get("valid", 1):
        return {"valid": 0}
    return tag_fields(
        mode_by_code(tag["mode"]),
        tag.get("fmt_s", 0),
        tag.get("fmt_m", 0),
        bool(tag.get("transpose", 0)),
        valid=1,
        bank=bank,
        first_row=bool(tag.get("first_row", 0)),
    )


def run_pe(beats):
    """Stream ``beats`` (dicts: ``s``, ``x``, ``psum`` words, ``tag`` fields) through one PE, one
    per cycle, each with its own stationary word (alternating banks; the LS beat shares the
    cycle with its moving beat); ``psum`` arrives P_PREFIX cycles after ``x_reg``.  Returns the
    ``o_psum`` of every beat."""
    dut = PE()
    n = len(beats)
    out = []
    lag = P_PREFIX + 1  # input cycle -> cycle the PE adds i_psum

    async def bench(ctx):
        for i in range(n + lag + 1):
            if i < n:
                b = beats[i]
                ctx.set(dut.i_ls, b["s"])
                ctx.set(dut.i_ls_ctl.as_value(), pack(LS_CTL_LAYOUT, valid=1, bank=i % 2))
                ctx.set(dut.i_x, b["x"])
                ctx.set(dut.i_tag.as_value(), pack(TAG_LAYOUT, **beat_tag(b["tag"], i % 2)))
            else:
                ctx.set(dut.i_ls_ctl.as_value(), 0)
                ctx.set(dut.i_tag.as_value(), 0)
            if 0 <= i - lag < n:
                ctx.set(dut.i_psum, beats[i - lag]["psum"])
            await ctx.tick()
            if 0 <= i - lag < n:
                out.append(ctx.get(dut.o_psum))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return np.array(out, dtype=np.int64)


def _pe_case(rng, beats, want, mode, fa, fb, fs, fm, n):
    """Corner pairs (a sample) against FP32 corner psums, then random vectors."""
    ca, cb = corner_codes(fa), corner_codes(fb)
    pairs = [
        (int(p), int(q))
        for p in rng.choice(ca, min(len(ca), 10), replace=False)
        for q in rng.choice(cb, min(len(cb), 6), replace=False)
    ]
    a = np.concatenate([[p for p, _ in pairs], random_codes(rng, fa, n)]).astype(np.int64)
    b = np.concatenate([[q for _, q in pairs], random_codes(rng, fb, n)]).astype(np.int64)
    psum = np.concatenate(
        [FP32_CORNERS[np.arange(len(pairs)) % len(FP32_CORNERS)], random_codes(rng, "fp32", n)]
    )
    first = rng.random(len(a)) < 0.15
    want += list(golden_dot_add(np.where(first, 0, psum), a[:, None], b[:, None], fa, fb))
    for i in range(len(a)):
        beats.append(
            dict(
                s=int(a[i]),
                x=int(b[i]),
                psum=int(psum[i]),
                tag=dict(mode=mode, fmt_s=fs, fmt_m=fm, first_row=int(first[i])),
            )
        )


def fused_beats(a, b, psum, mode, fmt_s, fmt_m, es=None, ex=None):
    """One PE beat per row of the operand codes ``a`` / ``b`` (``[n, lanes]``; lane ``j`` in bits
    ``[8j, 8j + 8)`` of the word, the E8M0 scales ``es`` / ``ex`` in bits ``[32, 40)``)."""

    def word(row, scale):
        return int(sum(int(v) << (8 * t) for t, v in enumerate(row)) | int(scale) << 32)

    none = np.zeros(len(a), dtype=np.int64)
    es, ex = none if es is None else es, none if ex is None else ex
    return [
        dict(
            s=word(a[k], es[k]),
            x=word(b[k], ex[k]),
            psum=int(psum[k]),
            tag=dict(mode=mode, fmt_s=fmt_s, fmt_m=fmt_m),
        )
        for k in range(len(a))
    ]


@pytest.mark.long
def test_pe_every_mode():
    rng = np.random.default_rng(11)
    beats, want = [], []
    for mode, fmt in (
        (Mode.FP32, "fp32"),
        (Mode.TF32, "tf32"),
        (Mode.BF16, "bf16"),
        (Mode.FP16, "fp16"),
    ):
        _pe_case(rng, beats, want, mode, fmt, fmt, 0, 0, 60)
    for i, fa in enumerate(FP8_FORMATS):
        for j, fb in enumerate(FP8_FORMATS):
            _pe_case(rng, beats, want, Mode.FP8, fa, fb, i, j, 12)
    # double_row: two FP8 products fused with the psum (value j in bits [8j, 8j+8)).
    for i, fa in enumerate(FP8_FORMATS[:3]):
        for j, fb in enumerate(FP8_FORMATS[:3]):
            n = 40
            a = random_codes(rng, fa, 2 * n).reshape(n, 2)
            b = random_codes(rng, fb, 2 * n).reshape(n, 2)
            a[:4, 1] = corner_codes(fa)[:4]  # zeros and tiny values
            b[4:8, 0] = b[4:8, 1] = 0
            psum = random_codes(rng, "fp32", n)
            # Near-cancelling psums: minus the exact product sum, +- a few ulps.
            s = golden_dot_add(np.zeros(n, dtype=np.int64), a, b, fa, fb)
            cancel = ((s ^ 0x80000000) + rng.integers(-2, 3, n)) & 0xFFFFFFFF
            psum = np.where(rng.random(n) < 0.4, cancel, psum)
            want += list(golden_dot_add(psum, a, b, fa, fb))
            beats += fused_beats(a, b, psum, Mode.DOUBLE_ROW, i, j)
    # MX: four products fused and scaled by 2**(Es + Ex - 254) (scales in bits [32, 40) of the
    # lane words; 0xFF is NaN), every element format pair, scale extremes on both sides.
    mx = get_mode("mx")
    for i, fa in enumerate(mx.formats_s):
        for j, fb in enumerate(mx.formats_m):
            n = 30
            a = random_codes(rng, fa, 4 * n).reshape(n, 4)
            b = random_codes(rng, fb, 4 * n).reshape(n, 4)
            a[:4, 1] = corner_codes(fa)[:4]
            es = (127 + rng.integers(-8, 9, n)).astype(np.int64)
            ex = (127 + rng.integers(-8, 9, n)).astype(np.int64)
            es[:6] = [0, 254, 255, 0, 254, 127]
            ex[:6] = [0, 254, 127, 254, 0, 255]
            psum = random_codes(rng, "fp32", n)
            nan = (es == 255) | (ex == 255)
            se = np.where(nan, 0, es + ex - 254)
            s0 = golden_dot_add(np.zeros(n, dtype=np.int64), a, b, fa, fb, se)
            cancel = ((s0 ^ 0x80000000) + rng.integers(-2, 3, n)) & 0xFFFFFFFF
            psum = np.where(rng.random(n) < 0.4, cancel, psum)
            want += list(golden_dot_add(psum, a, b, fa, fb, se, nan))
            beats += fused_beats(a, b, psum, Mode.MX, i, j, es, ex)
    # Bubbles and rows outside the tile pass the psum through untouched (NaN payload too).
    for p in (0x7F800001, 0x80000000, 0x3F800000):
        beats.append(dict(s=0x3F800000, x=0x7FC00000, psum=p, tag=dict(valid=0)))
        want.append(p)
    got = run_pe(beats)
    bad = np.nonzero(got != np.array(want))[0]
    assert not len(bad), [(int(i), beats[i], hex(got[i]), hex(want[i])) for i in bad[:6]]


def _e5m2_split_cases(rng, lanes, n):
    """``n`` e5m2 operand rows of ``lanes`` products whose exact sums need every bit of the
    67-bit window (huge and subnormal products side by side), and the exact sums."""
    f = get_format("fp8_e5m2")
    big = np.arange(0x70, 0x7C)  # 2**13 .. 57344
    tiny = np.array([0x01, 0x02, 0x03, 0x04, 0x81, 0x82, 0x83])  # subnormals, the least normal
    pools = (big, big | 0x80, tiny, random_codes(rng, "fp8_e5m2", 64, special_rate=0))
    a = np.empty((n, lanes), dtype=np.int64)
    b = np.empty((n, lanes), dtype=np.int64)
    for k in range(n):
        for j in range(lanes):
            pool = pools[(k + j) % 4 if k % 3 else (j % 2) * 2]
            a[k, j], b[k, j] = rng.choice(pool), rng.choice(pool)
    av = from_bits(a.astype(f.storage_dtype), f).astype(np.float64)
    bv = from_bits(b.astype(f.storage_dtype), f).astype(np.float64)
    exact = [sum(Fraction(x) * Fraction(y) for x, y in zip(ar, br)) for ar, br in zip(av, bv)]
    return a, b, exact


def _split_psums(rng, exact, se):
    """FP32 psums at the bounds of the split sum's proof (``hdl/fp/split_sum.py``) for exact
    sums ``exact`` scaled by ``2**se``: minus the sum's FP32 rounding +- ulps and minus its
    largest part (the psum cancels the top, the 2**-32 bits decide), around the far-above bound
    (2**(35 + se)), with bits below the window (2**(-33 + se)), subnormal, signed zeros,
    Inf and NaN."""
    out = []
    for k, s in enumerate(exact):
        v = float(s * Fraction(2) ** int(se[k]))
        near = np.float32(-v).view(np.uint32).astype(np.int64) if np.isfinite(np.float32(v)) else 0
        choice = k % 8
        if choice == 0:
            p = (near + rng.integers(-2, 3)) & 0xFFFFFFFF
        elif choice == 1:
            top = np.float32(float(-s.numerator // s.denominator if s else 0) * 2.0 ** int(se[k]))
            p = int(top.view(np.uint32))
        elif choice == 2:
            e = 35 + int(se[k]) + rng.integers(-2, 2)
            p = int(
                np.float32(rng.choice([-1, 1]) * 2.0**e * (1 + rng.integers(0, 3) / 8)).view(
                    np.uint32
                )
            )
        elif choice == 3:
            e = -33 + int(se[k]) - rng.integers(-4, 12)
            p = int(np.float32(rng.choice([-1, 1]) * 2.0**e * (1 + rng.random())).view(np.uint32))
        elif choice == 4:
            p = int(rng.integers(1, 1 << 23)) | int(rng.integers(0, 2)) << 31
        else:
            p = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000][k % 5]
        out.append(int(p) & 0xFFFFFFFF)
    return np.array(out, dtype=np.int64)


def test_pe_split_sum_bounds():
    """The e5m2 sums wider than 64 bits, kept in two limbs with the psum folded in
    (``hdl/fp/split_sum.py``): double_row and MX beats at every bound of the proof, bit for
    bit against the contract (``fp32_dot_add``, itself proven against exact arithmetic)."""
    rng = np.random.default_rng(29)
    beats, want = [], []
    e5 = "fp8_e5m2"
    n = 96
    a, b, exact = _e5m2_split_cases(rng, 2, n)
    psum = _split_psums(rng, exact, np.zeros(n, dtype=np.int64))
    want += list(golden_dot_add(psum, a, b, e5, e5))
    i = FP8_FORMATS.index(e5)
    beats += fused_beats(a, b, psum, Mode.DOUBLE_ROW, i, i)
    # MX: scales that put the sum at the FP32 subnormal boundary, under it, at 1.0 and high.
    mx = get_mode("mx")
    a, b, exact = _e5m2_split_cases(rng, 4, 4 * n)
    total = rng.choice([0, 60, 98, 100, 127 + 127, 300, 400, 508], 4 * n)
    es = np.minimum(total // 2, 254)
    ex = total - es
    se = es + ex - 254
    psum = _split_psums(rng, exact, se)
    want += list(golden_dot_add(psum, a, b, e5, e5, se, np.zeros(4 * n, dtype=bool)))
    i = mx.formats_s.index(e5)
    beats += fused_beats(a, b, psum, Mode.MX, i, i, es, ex)
    got = run_pe(beats)
    bad = np.nonzero(got != np.array(want))[0]
    assert not len(bad), [(int(i), beats[i], hex(got[i]), hex(want[i])) for i in bad[:6]]


def test_pe_transpose_words():
    """Transpose: the raw stationary word (zero-extended from its container) where the moving
    value is exactly 1.0 in its format, else the psum (+0 on the first row)."""
    beats, want = [], []
    cases = [  # (mode, fmt index, stationary, moving one, moving not-one)
        (Mode.FP32, 0, 0x7F800001, 0x3F800000, 0x3F800001),
        (Mode.TF32, 0, 0xFFC01234, 0x3F801FFF, 0x3F802000),  # TF32 ignores 13 low bits
        (Mode.BF16, 0, 0xABCD7F81, 0x3F80, 0xBF80),
        (Mode.FP16, 0, 0x12347C01, 0x3C00, 0x3C01),
    ] + [
        (Mode.FP8, j, 0xFFFFFF7F, int(encode([1.0], f)[0]), 0x80) for j, f in enumerate(FP8_FORMATS)
    ]
    for mode, fmt, s, one, other in cases:
        width = get_format(mode_by_code(mode).formats_s[fmt]).container_bits
        raw = s & ((1 << width) - 1)
        for x, first, psum, w in (
            (one, 0, 0x1111, raw),
            (one, 1, 0x1111, raw),
            (other, 0, 0x7FC1, 0x7FC1),
            (other, 1, 0x7FC1, 0),
            (0, 0, 0xFFFF, 0xFFFF),
        ):
            beats.append(
                dict(
                    s=s,
                    x=x,
                    psum=psum,
                    tag=dict(mode=mode, fmt_s=fmt, fmt_m=fmt, transpose=1, first_row=first),
                )
            )
            want.append(w)
    got = run_pe(beats)
    assert [hex(g) for g in got] == [hex(w) for w in want]


def test_pe_latency_and_tag_decode():
    """The PE's pipeline is the timing model's; the hardware tag decode (the control's) gives
    the mode table's tag fields (:func:`tag_fields`) for every mode and format index."""
    pe = PE()
    pe._MustUse__silence = True
    assert P_PREFIX is timing.P_PREFIX and pe.latency == P_PREFIX + 1
    dut = _DecodeUnit()
    cases = [
        (md, fs, fm, tr)
        for md in ENGINE_MODES
        for fs in range(len(md.formats_s))
        for fm in range(len(md.formats_m))
        for tr in ((False, True) if md.transposes else (False,))
    ]

    async def bench(ctx):
        for md, fs, fm, tr in cases:
            ctx.set(dut.i_mode, md.code)
            ctx.set(dut.i_fmt_s, fs)
            ctx.set(dut.i_fmt_m, fm)
            ctx.set(dut.i_transpose, tr)
            want = tag_fields(md, fs, fm, tr, valid=False)
            assert ctx.get(dut.o_tag.as_value()) == pack(TAG_LAYOUT, **want), (md.name, fs, fm)

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


class _DecodeUnit(wiring.Component):
    def __init__(self):
        super().__init__(
            {
                "i_mode": In(3),
                "i_fmt_s": In(2),
                "i_fmt_m": In(2),
                "i_transpose": In(1),
                "o_tag": Out(TAG_LAYOUT),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.o_tag.eq(
            decode_tag(
                m,
                self.i_mode,
                self.i_fmt_s,
                self.i_fmt_m,
                self.i_transpose,
                valid=0,
                bank=0,
                first_row=0,
            )
        )
        return m


# -- the array alone ----------------------------------------------------------------------------


@pytest.mark.long
def test_array_ls_mm_bf16_chain():
    """LS (columns M-1 first) then MM on a 4x4 array; the MM's first beat shares the cycle with
    the last LS beat.  Results against the psum chain computed with fp32_dot_add."""
    R = C = 4
    K, M, N = 4, 4, 6
    rng = np.random.default_rng(3)
    S = encode(rng.normal(size=(K, M)) * 4, "bf16").astype(np.int64)
    X = encode(rng.normal(size=(K, N)), "bf16").astype(np.int64)
    S[1, 2] = 0x7F80  # +Inf weight: Inf or NaN (Inf * 0) results
    X[3, 1] = 0
    bf = lambda a: a.astype(np.uint16).view(ml_dtypes.bfloat16)
    want = np.zeros((M, N), dtype=np.float32)
    for k in range(K):
        want = fp32_dot_add(
            want,
            np.broadcast_to(bf(S[k])[:, None, None], (M, N, 1)),
            np.broadcast_to(bf(X[k])[None, :, None], (M, N, 1)),
        )
    want = want.view(np.uint32)
    arr = SystolicArray(R, C, instance=False)
    assert arr.latency == timing.latency(R, C)
    tl = beat_tag_layout(R)
    got = {}

    async def bench(ctx):
        start = M - 1
        for cyc in range(start + N + arr.latency + 1):
            ls = cyc < M
            mv = start <= cyc < start + N
            ctx.set(arr.i_ls, lanes(S[:, M - 1 - cyc]) if ls else 0)
            ctx.set(arr.i_ls_ctl.as_value(), pack(LS_CTL_LAYOUT, valid=ls, bank=1))
            ctx.set(arr.i_x, lanes(X[:, cyc - start]) if mv else 0)
            pe = pack(TAG_LAYOUT, **tag_fields(get_mode("bf16"), 0, 0, False, valid=mv, bank=1))
            ctx.set(arr.i_tag.as_value(), pack(tl, pe=pe, row_lo=0, row_hi=K))
            await ctx.tick()
            j = cyc + 1 - start - arr.latency
            if 0 <= j < N:
                got[j] = unlanes(ctx.get(arr.o_psum), C)

    sim = Simulator(arr)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert np.array([got[j] for j in range(N)]).T.tolist() == want.astype(np.int64).tolist()


# -- the whole engine ---------------------------------------------------------------------------


def engine_rules(te):
    """The timing rules an engine is built to: ``timing.HDL_PARALLEL``, ``HDL_BACKGROUND`` or
    ``HDL_SERIAL``."""
    if te.parallel:
        return timing.HDL_PARALLEL
    return timing.HDL_BACKGROUND if te.planes > 1 else timing.HDL_SERIAL


def engine_lanes(te, ins, plane):
    """The ``stationary`` / ``moving`` streams an instruction's beats take, ``[(index,
    lanes)]``: its lane groups with parallel tiles, its plane's stream with the background
    plane."""
    if te.parallel:
        return te.lane_groups(ins)
    return [(plane, slice(None))]


def accepted_mask(te, instrs):
    """Whether the engine accepts each instruction (and its plane): ``isa.check`` in program
    order on the serial engine; else the timing model's records (``TILE_BUSY`` depends on
    timing; the plane on the instruction sequence)."""
    if te.parallel or te.planes > 1:
        sched = timing.simulate(
            instrs, te.rows, te.cols, tile_unit=te.tile_unit, rules=engine_rules(te), modes=te.modes
        )
        return [(r.accepted, r.plane) for r in sched.records]
    out, last_ls = [], None
    for ins in instrs:
        ok = isa.check(
            ins,
            te.rows,
            te.cols,
            last_ls,
            tile_unit=te.tile_unit,
            modes=te.modes,
            sparse=getattr(te, "sparse", False),
        )
        ok = ok is None
        if ok and ins.op == Op.LS:
            last_ls = ins
        out.append((ok, 0))
    return out


def run_engine(te, programs, *, stall=0.0, backpressure=0.0, seed=0, max_cycles=4000, outputs=None):
    """Stream each program (list of ``(Instruction, beats)``, beats a list of lane-word lists
    for the instructions the engine accepts) into the engine, one after the other in ONE
    simulation (compiling the design dominates the run time), with a reset in between.  With
    parallel tiles each instruction's beats go to the streams of its slot
    (``timing.tile_slot``).

    Returns one event dict per program: ``issue`` (instruction handshake cycles), ``stat`` /
    ``mov`` (beat cycles), ``out`` (``(cycle, [lane words], last)``; with parallel tiles a
    dict of such lists per ``(tap, column group)``, split from the ``result`` handshakes),
    ``err`` (``(cycle, code)``).  Cycle 0 is
    the first cycle the program's first instruction is presented.  ``stall`` and
    ``backpressure`` are probabilities, or one per program (a fixture's runs with and without
    stalls share one simulation).
    """
    rows, cols = te.rows, te.cols
    rng = np.random.default_rng(seed)
    top = Module()
    top.domains.sync = cd = ClockDomain("sync")
    top.submodules.te = te
    results = []
    split = te.parallel or te.planes > 1  # streams per lane group or plane, result per tap
    if split:
        stat_ports, mov_ports = list(te.stationary), list(te.moving)
        taps = te.row_groups if te.parallel else te.planes
        keys = [(g, j) for g in range(taps) for j in range(te.col_groups)]
    else:
        stat_ports, mov_ports = [te.stationary], [te.moving]
        keys = [None]
    G = cols // te.col_groups

    def streams(program):
        words = [isa.encode(ins) for ins, _ in program]
        stat, mov = [[] for _ in stat_ports], [[] for _ in mov_ports]
        for (ins, beats), (ok, plane) in zip(program, accepted_mask(te, [i for i, _ in program])):
            if not ok:
                continue
            if not split:
                (stat if ins.op == Op.LS else mov)[0].extend(beats)
                continue
            for i, lanes_of in engine_lanes(te, ins, plane):
                (stat if ins.op == Op.LS else mov)[i].extend([b[lanes_of] for b in beats])
        return words, stat, mov

    per = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * len(programs)  # noqa: E731
    stalls, pressures = per(stall), per(backpressure)
    counts = per(outputs)  # result vectors to wait for (None: one per moving beat)
    widths = [LANE] * len(stat_ports) + [te.x_width] * len(mov_ports)

    async def bench(ctx):
        for program, stall, backpressure, count in zip(programs, stalls, pressures, counts):
            ctx.set(cd.rst, 1)
            await ctx.tick()
            ctx.set(cd.rst, 0)
            words, stat, mov = streams(program)
            ev = dict(issue=[], stat=[], mov=[], out={k: [] for k in keys}, err=[])
            qi, qs, qm = 0, [0] * len(stat), [0] * len(mov)
            quiet = 0
            n_out = sum(len(m) for m in mov) * (1 if not split else 0) if count is None else count
            for cyc in range(max_cycles):
                vi = qi < len(words) and rng.random() >= stall
                ctx.set(te.instr.valid, vi)
                ctx.set(te.instr.payload.as_value(), words[qi] if qi < len(words) else 0)
                vs = [q < len(x) and rng.random() >= stall for q, x in zip(qs, stat)]
                vm = [q < len(x) and rng.random() >= stall for q, x in zip(qm, mov)]
                for port, v, q, x, w in zip(
                    stat_ports + mov_ports, vs + vm, qs + qm, stat + mov, widths
                ):
                    ctx.set(port.valid, v)
                    ctx.set(port.payload, lanes(x[q], w) if v else 0)
                ready = rng.random() >= backpressure
                ctx.set(te.result.ready, ready)
                if vi and ctx.get(te.instr.ready):
                    ev["issue"].append(cyc)
                    qi += 1
                for k in range(len(stat)):
                    if vs[k] and ctx.get(stat_ports[k].ready):
                        ev["stat"].append((cyc, k) if split else cyc)
                        qs[k] += 1
                for k in range(len(mov)):
                    if vm[k] and ctx.get(mov_ports[k].ready):
                        ev["mov"].append((cyc, k) if split else cyc)
                        qm[k] += 1
                frozen = ctx.get(te.result.valid) and not ready
                if ctx.get(te.result.valid) and ready:
                    vec = unlanes(ctx.get(te.result.payload.data), len(keys) * G)
                    if split:
                        groups = ctx.get(te.result.payload.groups)
                        last = ctx.get(te.result.payload.last)
                        for i, key in enumerate(keys):
                            if groups >> i & 1:
                                got = vec[i * G : (i + 1) * G]
                                ev["out"][key].append((cyc, got, last >> i & 1))
                            else:
                                assert not any(vec[i * G : (i + 1) * G]), "lanes of no vector"
                    else:
                        ev["out"][None].append((cyc, vec, ctx.get(te.result.payload.last)))
                if ctx.get(te.error.valid):
                    ev["err"].append((cyc, ctx.get(te.error.code)))
                await ctx.tick()
                done = (
                    qi == len(words)
                    and qs == [len(x) for x in stat]
                    and qm == [len(x) for x in mov]
                    and (split or len(ev["out"][None]) == n_out)
                )
                quiet = (quiet + (not frozen)) if done else 0
                if quiet > rows + cols + 8:  # outputs and error strobes landed, chains drained
                    break
            ctx.set(te.instr.valid, 0)
            for port in stat_ports + mov_ports:
                ctx.set(port.valid, 0)
            if not split:
                ev["out"] = ev["out"][None]
            results.append(ev)

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


def tile_beats(ins, tile, rows, scale=None, *, cols=None, tile_unit=32):
    """Beats of an instruction's data ``[K, X]`` (``[K, P, X]`` with ``P`` products per step,
    or with ``scale`` an MX tile ``[K, X, 4]``: value ``j`` in bits ``[8j, 8j+8)``, the row's
    scale ``scale[k, x]`` in bits ``[32, 40)``): lane ``tile_row + k`` of beat ``x`` holds
    element ``k``; LS beats as ``stationary_beats`` packs them (per chain, columns last
    first)."""
    words = lane_words(tile, scale)  # [X, K]
    if ins.op == Op.LS:
        beats = stationary_beats(words, ins, rows, cols or rows, tile_unit)
        return [[int(v) for v in b] for b in beats]
    beats = np.zeros((words.shape[0], rows), dtype=np.int64)
    beats[:, ins.tile_row : ins.tile_row + words.shape[1]] = words
    return [list(b) for b in beats]


def _codes(rng, fmt, shape):
    """Random encodings of ``fmt`` (values over a few binades, some zeros / specials)."""
    f = get_format(fmt)
    n = int(np.prod(shape))
    v = rng.normal(size=n) * np.exp2(rng.integers(-3, 4, n))
    codes = encode(np.minimum(np.abs(v), f.max_finite) * np.sign(v), f).astype(np.int64)
    special = random_codes(rng, fmt, n)
    codes = np.where(rng.random(n) < 0.1, special, codes)
    return codes.reshape(shape)


def _selection(rng, k, n, fmt):
    one = int(encode([1.0], fmt)[0])
    sel = np.zeros((k, n), dtype=np.int64)
    where = rng.integers(0, k, n)
    has = rng.random(n) < 0.9
    sel[where[has], np.nonzero(has)[0]] = one
    return sel


def _as_dtype(codes, fmt):
    f = get_format(fmt)
    return (
        np.asarray(codes)
        .astype(f.storage_dtype)
        .view(np.float32 if f.container_bits == 32 else f.dtype)
    )


def make_program(
    rng,
    rows,
    cols,
    name,
    *,
    groups=2,
    max_n=10,
    errors=True,
    tiles=((0, 0, 0, 0),),
    mms=None,
    tile_unit=32,
):
    """A random program: ``groups`` LS, each followed by 1..2 MMs, illegal words mixed in.

    Returns ``(program, expected)``: program as for :func:`run_engine`, expected the golden
    ``[M, N]`` result bits and column offset of every accepted MM, in order.
    """
    pe_mode, transpose = operation(name)
    mode, names = pe_mode.code, pe_mode.formats_s
    shape = lambda k, x: tile_shape(pe_mode, k, x)  # noqa
    k_step, m_step = pe_mode.k_step(tile_unit), pe_mode.m_multiple
    scales = (lambda x: random_scales(rng, x, special=0.08)) if pe_mode.scale else (lambda x: None)  # noqa
    program, expected = [], []
    for g in range(groups):
        r0, tr, c0, tc = tiles[g % len(tiles)]
        tile = dict(tile_row=r0, tile_rows=tr, tile_col=c0, tile_cols=tc)
        k = k_step * int(rng.integers(1, (tr or rows) // k_step + 1))
        m = m_step * int(rng.integers(1, (tc or cols) // m_step + 1))
        fs = int(rng.integers(0, len(names)))
        fm = int(rng.integers(0, len(names))) if len(names) > 1 else fs
        ls = Instruction(Op.LS, mode, k=k, m=m, fmt_s=fs, fmt_m=fm, transpose=transpose, **tile)
        s = _codes(rng, names[fs], shape(k, m))
        s_scale = scales((k, m))
        program.append((ls, tile_beats(ls, s, rows, s_scale, cols=cols, tile_unit=tile_unit)))
        for _ in range(mms or int(rng.integers(1, 3))):
            n = int(rng.integers(1, max_n + 1))
            mm = Instruction(
                Op.MM, mode, k=k, m=m, n=n, fmt_s=fs, fmt_m=fm, transpose=transpose, **tile
            )
            x = (
                _selection(rng, k, n, names[fm])
                if transpose
                else _codes(rng, names[fm], shape(k, n))
            )
            x_scale = scales((k, n))
            program.append((mm, tile_beats(mm, x, rows, x_scale)))
            bits = _golden_bits(mm, (s, s_scale), (x, x_scale), rows, cols, tile_unit)
            expected.append((bits, c0))
            if pe_mode.scale:
                continue
            if errors and rng.random() < 0.5:
                bad = [
                    replace_ins(mm, n=isa.MAX_N + 1),
                    replace_ins(ls, k=0),
                    replace_ins(mm, m=m % cols + 1),
                    replace_ins(ls, mode=7),
                ]
                program.append((bad[int(rng.integers(0, len(bad)))], []))
    return program, expected


def replace_ins(ins, **kw):
    from dataclasses import replace

    return replace(ins, **kw)


def check_engine_run(te, program, expected, ev, *, timed):
    rows, cols = te.rows, te.cols
    got = ev["out"]
    assert len(got) == sum(b.shape[1] for b, _ in expected)
    pos = 0
    for bits, c0 in expected:
        m, n = bits.shape
        vecs = np.array([g[1] for g in got[pos : pos + n]], dtype=np.int64)
        assert vecs[:, c0 : c0 + m].T.tolist() == bits.tolist(), f"MM #{len(expected)} values"
        assert not np.delete(vecs, range(c0, c0 + m), axis=1).any(), "lanes outside M not 0"
        assert [g[2] for g in got[pos : pos + n]] == [0] * (n - 1) + [1]
        pos += n
    instrs = [ins for ins, _ in program]
    want_codes, last_ls = [], None
    for ins in instrs:
        e = isa.check(ins, rows, cols, last_ls, tile_unit=te.tile_unit, modes=te.modes)
        if e is None and ins.op == Op.LS:
            last_ls = ins
        if e is not None:
            want_codes.append(int(e[0]))
    assert [c for _, c in ev["err"]] == want_codes
    if timed:
        sched = timing.simulate(
            instrs, rows, cols, tile_unit=te.tile_unit, rules=timing.HDL_RULES, modes=te.modes
        )
        t0 = ev["issue"][0]
        assert t0 == 0
        assert ev["issue"] == [r.issue for r in sched.records]
        assert [c for c, _, _ in got] == [c for r in sched.records for c in r.outputs]
        assert [c for c, _ in ev["err"]] == [r.error_cycle for r in sched.records if not r.accepted]
        beats = [c for r in sched.records if r.accepted for c in r.beats]
        assert sorted(ev["stat"] + ev["mov"]) == sorted(beats)


def _illegal_program(rng, R, tile_unit=32):
    """Every rule broken once (before and after the first LS), then a legal LS + MM."""
    s = _codes(rng, "fp16", (3, 2))
    x = _codes(rng, "fp16", (3, 5))
    ls = Instruction(Op.LS, Mode.FP16, k=3, m=2)
    mm = Instruction(Op.MM, Mode.FP16, k=3, m=2, n=5)
    before = [
        replace_ins(mm, mode=7),  # MODE (no row of the mode table)
        Instruction(Op.MM, Mode.FP16, k=3, m=2, n=5),  # NO_STATIONARY
        replace_ins(ls, fmt_s=1),  # FORMAT
        Instruction(Op.LS, Mode.DOUBLE_ROW, k=2, m=2, fmt_s=3),  # FORMAT (e3m4)
        Instruction(Op.LS, Mode.DOUBLE_ROW, k=2, m=2, transpose=True),  # MODE_COMBO
        replace_ins(ls, tile_rows=2),  # TILE
        replace_ins(ls, tile_row=1),  # TILE
        replace_ins(ls, k=5),
        replace_ins(ls, k=0),  # K_RANGE
        replace_ins(ls, m=5),
        replace_ins(ls, m=0),  # M_RANGE
    ]
    after = [
        replace_ins(mm, n=0),
        replace_ins(mm, n=513),  # N_RANGE
        replace_ins(mm, k=2),
        replace_ins(mm, transpose=True),  # MODE_MISMATCH
        replace_ins(mm, mode=Mode.BF16),
    ]
    program = (
        [(b, []) for b in before]
        + [(ls, tile_beats(ls, s, R, cols=R, tile_unit=tile_unit))]
        + [(b, []) for b in after]
        + [(mm, tile_beats(mm, x, R))]
    )
    want = matmul(_as_dtype(s, "fp16"), _as_dtype(x, "fp16"), rows=R, cols=R).view(np.uint32)
    codes = [int(isa.check(b, R, R, None)[0]) for b in before] + [
        int(isa.check(b, R, R, ls)[0]) for b in after
    ]
    return program, [(want.astype(np.int64), 0)], codes


def _transpose_programs(R, *, data=False, tile_unit=32):
    """Transposes of NaN payloads, -0 and TF32's low bits (bf16, fp8, tf32): the program and
    the expected results, or with ``data`` the program and each instruction's encodings."""
    program, expected, codes = [], [], []
    for mode, fmt, s in (
        (Mode.BF16, "bf16", [[0x7F81, 0xFFC1, 0x8000], [0x0001, 0x7F80, 0x3F80]]),
        (Mode.FP8, "fp8_e4m3", [[0x7F, 0xF9, 0x80], [0x01, 0x78, 0x38]]),
        (
            Mode.TF32,
            "tf32",
            [[0x7F800001, 0xFFC01FFF, 0x80000000], [0x3F801FFF, 0x00000001, 0x7FFFFFFF]],
        ),
    ):
        s = np.array(s, dtype=np.int64)
        one = int(encode([1.0], fmt)[0])
        x = np.array([[one, 0, 0, 0, one], [0, one, 0, 0, 0]], dtype=np.int64)
        ls = Instruction(Op.LS, mode, k=2, m=3, transpose=True)
        mm = Instruction(Op.MM, mode, k=2, m=3, n=5, transpose=True)
        want = matmul(
            _as_dtype(s, fmt),
            _as_dtype(x, fmt),
            is_transpose=True,
            rows=R,
            cols=R,
            stationary_format=fmt,
            moving_format=fmt,
        )
        program += [
            (ls, tile_beats(ls, s, R, cols=R, tile_unit=tile_unit)),
            (mm, tile_beats(mm, x, R)),
        ]
        expected.append((want.astype(np.int64), 0))
        codes += [s, x]
    return (program, codes) if data else (program, expected)


def _selection_error_program(R, tile_unit=32):
    """Bad selection beats: two ones, a 0.5; a one outside the K rows is ignored."""
    s = np.array([[0x3F80, 0x4000], [0x4040, 0x4080]], dtype=np.int64)
    x = np.array([[0x3F80, 0x3F80, 0x3F00, 0, 0x3F80], [0, 0x3F80, 0, 0x3F80, 0]], dtype=np.int64)
    ls = Instruction(Op.LS, Mode.BF16, k=2, m=2, transpose=True)
    mm = Instruction(Op.MM, Mode.BF16, k=2, m=2, n=5, transpose=True)
    mov = tile_beats(mm, x, R)
    mov[0][2] = 0x3F80  # lane 2: outside K = 2
    return [(ls, tile_beats(ls, s, R, cols=R, tile_unit=tile_unit)), (mm, mov)]


@pytest.fixture(scope="module")
def engine4_runs():
    """One 4x4 engine simulation running: a random program per mode, the illegal-instruction
    program, the transpose payload program and the selection-error program."""
    R = 4
    te = TensorEngine(R, R, instance=False)
    runs = {}
    for name in ENGINE4_OPERATIONS:
        rng = np.random.default_rng(sum(map(ord, name)))
        runs[name] = make_program(rng, R, R, name)
    ill_prog, ill_exp, ill_codes = _illegal_program(np.random.default_rng(9), R)
    runs["illegal"] = (ill_prog, ill_exp)
    runs["transpose_payloads"] = _transpose_programs(R)
    runs["selection_error"] = (_selection_error_program(R), None)
    events = run_engine(te, [p for p, _ in runs.values()])
    out = {name: (te, prog, exp, ev) for (name, (prog, exp)), ev in zip(runs.items(), events)}
    out["illegal_codes"] = ill_codes
    return out


#: The operations of the 4 x 4 engine of tile_unit 32 (MX needs K a multiple of 32 there: it
#: runs on its own engine, :func:`test_engine_mx`).
ENGINE4_OPERATIONS = [op for op in operations() if not operation(op)[0].scale]


@pytest.mark.long
@pytest.mark.parametrize("name", ENGINE4_OPERATIONS)
def test_engine_program_values_and_timing(engine4_runs, name):
    te, program, expected, ev = engine4_runs[name]
    check_engine_run(te, program, expected, ev, timed=True)
    if name in ("fp32", "transpose_fp32"):  # the fp32 rates: one beat per 4 / 2 cycles
        ii = 4 if name == "fp32" else 2
        first_mm = program[1][0]
        assert np.diff(ev["mov"][: first_mm.n]).tolist() == [ii] * (first_mm.n - 1)
        assert np.diff(ev["stat"][: program[0][0].m]).tolist() == [ii] * (program[0][0].m - 1)


@pytest.mark.long
def test_illegal_instructions_then_engine_works(engine4_runs):
    te, program, expected, ev = engine4_runs["illegal"]
    codes = [c for _, c in ev["err"]]
    assert codes == engine4_runs["illegal_codes"]
    assert set(codes) == set(range(1, 11)) - {Error.SELECTION}
    check_engine_run(te, program, expected, ev, timed=True)


@pytest.mark.long
def test_transpose_nan_payloads(engine4_runs):
    te, program, expected, ev = engine4_runs["transpose_payloads"]
    check_engine_run(te, program, expected, ev, timed=True)
    assert expected[0][0][0, 0] == 0x7F81 and expected[2][0][1, 0] == 0xFFC01FFF


@pytest.mark.long
def test_transpose_selection_error(engine4_runs):
    """A moving beat that is not a selection column flags Error.SELECTION once (the cycle after
    the beat) and gives a zero vector; the other vectors are unaffected."""
    te, program, _, ev = engine4_runs["selection_error"]
    assert [c for _, c in ev["err"]] == [Error.SELECTION]
    assert ev["err"][0][0] == ev["mov"][1] + 1
    got = [o[1][:2] for o in ev["out"]]
    assert got == [[0x3F80, 0x4000], [0, 0], [0, 0], [0x4040, 0x4080], [0x3F80, 0x4000]]


@pytest.mark.long
def test_engine_mx():
    """The MX mode on a 4 x 4 engine of tile_unit 2 (K a multiple of 2, M even): every format
    pair, per-row E8M0 scales with extremes and NaN, the scaled fused sum against
    ``matmul_mx_rows`` bit for bit and the timing model cycle for cycle; then its rules:
    K not a multiple of the granule, odd M, column tiling (K_RANGE, M_RANGE, TILE), N above 512
    with an FP32 result, above 1024 with a BF16 one, above 512 in another mode whatever its
    result (N_RANGE), and the engine working afterwards."""
    te = TensorEngine(4, 4, instance=False, tile_unit=2)
    rng = np.random.default_rng(33)
    program, expected = make_program(rng, 4, 4, "mx", groups=4, max_n=6, errors=False, tile_unit=2)
    ls = program[0][0]
    bad = [
        replace_ins(ls, k=3),
        replace_ins(ls, m=3),
        replace_ins(ls, tile_col=2, tile_cols=2),
    ]
    program[1:1] = [(b, []) for b in bad]
    # N up to 1024 with a BF16 result (bf16_out), 512 with an FP32 one; 1024 is MX's alone.  (A
    # legal MM of N > 512 runs in the cocotb conformance, where 1024 beats are quick.)
    ls = program[0][0]
    mm = Instruction(Op.MM, Mode.MX, k=ls.k, m=ls.m, n=513, fmt_s=ls.fmt_s, fmt_m=ls.fmt_m)
    program[1:1] = [
        (mm, []),
        (replace_ins(mm, n=1025, bf16_out=True), []),
        (replace_ins(mm, mode=Mode.BF16, fmt_s=0, fmt_m=0, bf16_out=True), []),  # not MX: 512
    ]
    (ev,) = run_engine(te, [program])
    check_engine_run(te, program, expected, ev, timed=True)
    assert [c for _, c in ev["err"]] == [Error.N_RANGE] * 3 + [
        Error.K_RANGE,
        Error.M_RANGE,
        Error.TILE,
    ]


@pytest.mark.long
def test_engine_stalls_and_backpressure():
    te = TensorEngine(3, 5, instance=False)
    rng = np.random.default_rng(5)
    runs = [
        make_program(rng, 3, 5, name, max_n=6) for name in ("bf16", "double_row", "transpose_fp32")
    ]
    events = run_engine(te, [p for p, _ in runs], stall=0.3, backpressure=0.35, seed=1)
    for (program, expected), ev in zip(runs, events):
        check_engine_run(te, program, expected, ev, timed=False)


@pytest.mark.long
def test_row_and_column_tiles():
    """Tiling on a 4x4 engine with tile_unit=1 (tile sizes 1 and 2, ``isa.check(tile_unit=1)``
    scales the rules alike): row tiles cut the psum chain at the tile's first row, column tiles
    load and emit at their columns; values equal the whole-array matmul, timing the model's."""
    te = TensorEngine(4, 4, instance=False, tile_unit=1)
    rng = np.random.default_rng(21)
    tiles = ((2, 2, 0, 0), (3, 1, 0, 0), (0, 0, 2, 2), (0, 0, 1, 1), (0, 0, 3, 1), (1, 1, 0, 0))
    program, expected = make_program(
        rng, 4, 4, "bf16", groups=len(tiles), max_n=4, errors=False, tiles=tiles, mms=1, tile_unit=1
    )
    program.insert(3, (replace_ins(program[0][0], tile_row=1), []))  # misaligned: TILE
    program.insert(5, (replace_ins(program[0][0], tile_col=2, tile_cols=2), []))  # both: TILE
    (ev,) = run_engine(te, [program])
    check_engine_run(te, program, expected, ev, timed=True)
    assert [c for _, c in ev["err"]] == [Error.TILE, Error.TILE]


class _CheckUnit(wiring.Component):
    """The control's combinational ``isa.check`` on its own."""

    def __init__(self, rows, cols, sparse=False):
        self.rows, self.cols, self.sparse = rows, cols, sparse
        super().__init__(
            {
                "i_ins": In(INSTR_LAYOUT),
                "i_st_valid": In(1),
                "i_st": In(LS_DESC_LAYOUT),
                "o_code": Out(4),
            }
        )

    def elaborate(self, platform):
        m = Module()
        code, _, _, _ = check_logic(
            m, self.i_ins, self.rows, self.cols, 32, self.i_st_valid, self.i_st, sparse=self.sparse
        )
        m.d.comb += self.o_code.eq(code)
        return m


def _random_instruction(rng, rows, cols):
    pick = lambda *vals: int(vals[int(rng.integers(0, len(vals)))])
    return Instruction(
        Op(int(rng.integers(0, 2))),
        pick(0, 1, 2, 3, 4, 5, 5, 4, 6, 7),
        k=pick(0, 1, 17, 32, 33, 64, 65, rows, rows + 1, 255),
        m=pick(0, 1, 31, 32, 64, cols, cols + 1, 200),
        n=pick(0, 1, 64, 512, 513, 1023),
        fmt_s=pick(0, 0, 1, 2, 3),
        fmt_m=pick(0, 0, 1, 2, 3),
        transpose=bool(rng.random() < 0.2),
        sparse=pick(0, 0, 0, 0, 2, 3, 4, 1, 7),
        tile_row=pick(0, 0, 0, 16, 32, 64, 96, 128),
        tile_rows=pick(0, 0, 0, 32, 64, 96, rows),
        tile_col=pick(0, 0, 0, 16, 32, 64, 96, 128),
        tile_cols=pick(0, 0, 0, 32, 64, 100, cols),
    )


@pytest.mark.parametrize("sparse", [False, True])
def test_hardware_check_equals_isa_check(sparse):
    """The control's check logic of a 128 x 128 engine (with and without the sparse path)
    against ``isa.check`` on random words (edge values of every field) and on one-field
    mutations of legal instructions."""
    rows = cols = 128
    dut = _CheckUnit(rows, cols, sparse)
    rng = np.random.default_rng(4)
    legal = [
        Instruction(Op.LS, Mode.BF16, k=128, m=128),
        Instruction(Op.LS, Mode.FP8, k=3, m=5, fmt_s=3, fmt_m=1),
        Instruction(Op.LS, Mode.DOUBLE_ROW, k=64, m=7, fmt_s=2, fmt_m=1),
        Instruction(Op.LS, Mode.FP32, k=32, m=9, transpose=True, tile_row=96, tile_rows=32),
        Instruction(Op.LS, Mode.FP16, k=64, m=64, tile_row=64, tile_rows=64),
        Instruction(Op.LS, Mode.TF32, k=100, m=32, tile_col=96, tile_cols=32),
        Instruction(Op.LS, Mode.BF16, k=1, m=64, tile_col=64, tile_cols=64),
        Instruction(Op.LS, Mode.BF16, k=128, m=128, sparse=4),
        Instruction(Op.LS, Mode.FP8, k=64, m=100, fmt_s=2, fmt_m=3, sparse=2),
        Instruction(Op.LS, Mode.TF32, k=12, m=128, sparse=3),
    ]
    cases = []
    for _ in range(1200):
        ins = _random_instruction(rng, rows, cols)
        st = legal[int(rng.integers(0, len(legal)))] if rng.random() < 0.8 else None
        cases.append((ins, st))
    fields = [name for name, _ in isa.FIELDS]
    for _ in range(1200):
        st = legal[int(rng.integers(0, len(legal)))]
        ins = replace_ins(st, op=Op(int(rng.integers(0, 2))), n=int(rng.integers(1, 513)))
        if rng.random() < 0.7:
            f = fields[int(rng.integers(1, len(fields)))]
            width = dict(isa.FIELDS)[f]
            val = int(
                rng.choice(
                    [
                        0,
                        1,
                        2,
                        3,
                        32,
                        64,
                        96,
                        128,
                        (1 << width) - 1,
                        int(rng.integers(0, 1 << width)),
                    ]
                )
            ) & ((1 << width) - 1)
            ins = replace_ins(ins, **{f: bool(val) if f == "transpose" else val})
        cases.append((ins, None if rng.random() < 0.1 else st))

    async def bench(ctx):
        for ins, st in cases:
            ctx.set(dut.i_ins.as_value(), isa.encode(ins))
            ctx.set(dut.i_st_valid, st is not None)
            if st is not None:
                w = st.whole(rows, cols)
                ctx.set(
                    dut.i_st.as_value(),
                    pack(
                        LS_DESC_LAYOUT,
                        mode=w.mode,
                        fmt_s=w.fmt_s,
                        k=w.k,
                        m=w.m,
                        transpose=w.transpose,
                        sparse=w.sparse,
                        tile_row=w.tile_row,
                        tile_rows=w.tile_rows,
                        tile_col=w.tile_col,
                        tile_cols=w.tile_cols,
                    ),
                )
            want = isa.check(ins, rows, cols, st, sparse=sparse)
            got = ctx.get(dut.o_code)
            assert got == (int(want[0]) if want else 0), (ins, st, want)

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    seen = {
        int(e[0]) if e else 0
        for e in (isa.check(i, rows, cols, s, sparse=sparse) for i, s in cases)
    }
    # every rule but the data rules (SELECTION, TAG) and the parallel tiles' TILE_BUSY
    assert seen == set(range(0, 11)) - {Error.SELECTION} | {Error.SPARSE}


# -- Verilog ------------------------------------------------------------------------------------


@pytest.mark.synth
def test_verilog_4x4_lint_clean_latch_free_one_pe_module():
    text = convert(TensorEngine(4, 4), "te_4x4")
    assert re.findall(rf"^module \\?{PE_MODULE}\b.*", text, re.M) == [
        f"module {PE_MODULE}(i_x, i_tag, i_ls, i_ls_ctl, i_psum, clk, rst, o_x, o_tag, o_ls, "
        f"o_ls_ctl, o_psum, en);"
    ]  # one flat module
    assert len(re.findall(rf"^\s*{PE_MODULE} ", text, re.M)) == 16  # instances
    lint = lint_verilog(text, "te_4x4")
    assert lint.ok, lint.log[:4000]
    # Latch-free: the PE on its own, then the top around PE black boxes (the same text
    # otherwise; synthesizing 16 PEs would take minutes).
    pe = flat_module(PE(), PE_MODULE)
    assert text.startswith(pe)
    synth = synth_check(pe, PE_MODULE)
    assert synth.ok, synth.log[-4000:]
    synth = synth_check(convert(TensorEngine(4, 4), "te_4x4", blackbox=[PE_MODULE]), "te_4x4")
    assert synth.ok, synth.log[-4000:]
    assert re.search(rf"\b16 +{PE_MODULE}\b", synth.log) or "yosys" != synth.tool


@pytest.mark.synth
@pytest.mark.slow
def test_verilog_sparse_lint_clean_latch_free():
    """The sparse engine (8 x 4, two row groups: the group words across both edges): the whole
    Verilog lint-clean; the sparse PE latch-free on its own and the top around PE black
    boxes."""
    te = TensorEngine(8, 4, tile_unit=2, sparse=True)
    text = convert(te, "te_sparse")
    lint = lint_verilog(text, "te_sparse")
    assert lint.ok, lint.log[:4000]
    synth = synth_check(flat_module(PE(sparse=True), PE_MODULE), PE_MODULE)
    assert synth.ok, synth.log[-4000:]
    boxed = convert(TensorEngine(8, 4, tile_unit=2, sparse=True), "te_sparse", blackbox=[PE_MODULE])
    synth = synth_check(boxed, "te_sparse")
    assert synth.ok, synth.log[-4000:]


@pytest.mark.synth
def test_verilog_chains_lint_clean_latch_free():
    """An 8 x 8 engine of tile_unit 2: 4 LoadStationary chains, their lags and the row skew in
    memories; lint-clean and latch-free around PE black boxes (the PE module is the 4 x 4
    engine's, linted and synthesized by :func:`test_verilog_4x4_lint_clean_latch_free_one_pe_module`)."""
    _lint_and_synth_around_the_pe(TensorEngine(8, 8, tile_unit=2), "te_8x8")


def _lint_and_synth_around_the_pe(te, top):
    """``te``'s Verilog with the PE as a black box of the same ports: Verilator lint (every
    port connection checked against the PE's declared widths) and the latch-free synthesis.
    The PE itself (the same module in every engine of one mode set) is checked once."""
    assert te.array.modes == TensorEngine(4, 4).array.modes  # the PE the 4 x 4 test checks
    boxed = convert(te, top, blackbox=[PE_MODULE])
    lint = lint_verilog(boxed, top)
    assert lint.ok, lint.log[:4000]
    synth = synth_check(boxed, top)
    assert synth.ok, synth.log[-4000:]


@pytest.mark.slow
def test_verilog_128x128_one_pe_module():
    text = convert(TensorEngine(128, 128), "te_128x128")
    pe_modules = re.findall(rf"^module \\?{PE_MODULE}\b.*", text, re.M)
    assert len(pe_modules) == 1 and pe_modules[0].startswith(f"module {PE_MODULE}(")
    # 16 x 16 tiles of 8 x 8 PEs: 64 PE instances in the one tile module, 256 tile instances.
    assert len(re.findall(rf"^module \\?{TILE_MODULE}\b", text, re.M)) == 1
    assert len(re.findall(rf"^\s*{PE_MODULE} ", text, re.M)) == 64
    assert len(re.findall(rf"^\s*{TILE_MODULE} ", text, re.M)) == 256


@pytest.mark.long
def test_engine_chains_and_back_to_back_cost():
    """An 8 x 8 engine of tile_unit 2 has 4 LoadStationary chains of 2 columns: an 8-column LS
    takes 2 beats, and a run of nc_matmuls (LS M = 8 + MM N = 3) costs ``max(min(64, M), N) =
    8`` cycles each (a single chain and a 64-slot floor would give 64), values bit for bit.
    (A bf16-family PE: the chains and the issue cost are the control's, the same for every PE,
    at a third of the simulation time.)"""
    R = 8
    te = TensorEngine(R, R, instance=False, tile_unit=2, modes="bf16")
    rng = np.random.default_rng(41)
    program, expected = [], []
    for _ in range(6):
        ls = Instruction(Op.LS, Mode.BF16, k=R, m=R)
        mm = Instruction(Op.MM, Mode.BF16, k=R, m=R, n=3)
        s, x = _codes(rng, "bf16", (R, R)), _codes(rng, "bf16", (R, 3))
        program += [
            (ls, tile_beats(ls, s, R, cols=R, tile_unit=2)),
            (mm, tile_beats(mm, x, R)),
        ]
        want = matmul(_as_dtype(s, "bf16"), _as_dtype(x, "bf16"), rows=R, cols=R)
        expected.append((want.view(np.uint32).astype(np.int64), 0))
    (ev,) = run_engine(te, [program])
    check_engine_run(te, program, expected, ev, timed=True)
    assert len(ev["stat"]) == 6 * 2
    mm_issues = ev["issue"][1::2]
    assert np.diff(mm_issues).tolist() == [8] * 5


# -- parallel tiles -------------------------------------------------------------------------------


def _golden_bits(ins, ls_data, mm_data, rows, cols, tile_unit):
    """The golden ``[M, N]`` result bits of MM ``ins`` on the stationary ``ls_data``
    (encodings, MX scales) with moving ``mm_data``, as int64."""
    return golden_bits(ins, ls_data, mm_data, rows, cols, tile_unit).astype(np.int64)


def tile_sequences(rng, rows, cols, name, tiles, *, tile_unit, max_n=6, pairs=2):
    """Per tile a sequence of ``pairs`` LS, each followed by 1..2 MMs of random shapes
    (``program.tile_steps``), the sequences interleaved at random (each keeps its order):
    ``[(Instruction, beats, data)]``, ``data`` the encodings and MX scales the golden needs."""
    pe_mode, transpose = operation(name)
    seqs = [
        tile_steps(rng, rows, cols, pe_mode, transpose, t, pairs, max_n, tile_unit) for t in tiles
    ]
    return _program_of(interleave(rng, seqs), rows, cols, tile_unit)


def check_parallel_run(te, program, ev, *, timed=True):
    """Every accepted MM's vectors on the streams of its tap and column groups, bit for bit
    against the golden on the stationary of the latest accepted LS of its tile; errors (and
    with ``timed`` every issue, beat and output cycle) against ``timing.simulate(rules=
    HDL_PARALLEL)``.  With the background plane (no parallel tiles) the vectors of an MM on the
    stream of its plane, against the golden on the latest accepted LS."""
    rows, cols, unit = te.rows, te.cols, te.tile_unit
    G = cols // te.col_groups
    instrs = [ins for ins, _, _ in program]
    sched = timing.simulate(
        instrs, rows, cols, tile_unit=unit, rules=engine_rules(te), modes=te.modes
    )
    pos = {key: 0 for key in ev["out"]}
    held = {}  # tile -> the data of its latest accepted LS
    for rec, (ins, _, data) in zip(sched.records, program):
        if not rec.accepted:
            continue
        whole = ins.whole(rows, cols)
        region = (whole.tile_row, whole.tile_rows, whole.tile_col, whole.tile_cols)
        if not te.parallel:
            region = None  # one stationary: the latest LS
        if ins.op == Op.LS:
            held[region] = data
            continue
        want = _golden_bits(ins, held[region], data, rows, cols, unit)
        g = timing.tile_tap(ins, rows, cols, unit) if te.parallel else rec.plane
        vec = np.zeros((ins.n, cols), dtype=np.int64)
        groups = timing.tile_col_groups(ins, rows, cols, unit) if te.parallel else [0]
        for j in groups:
            got = ev["out"][(g, j)][pos[(g, j)] : pos[(g, j)] + ins.n]
            pos[(g, j)] += ins.n
            assert len(got) == ins.n, f"instruction {rec.index}: vectors on tap {g} group {j}"
            if timed:
                assert [c for c, _, _ in got] == list(rec.outputs), f"instruction {rec.index}"
            assert [x[2] for x in got] == [0] * (ins.n - 1) + [1]
            vec[:, j * G : (j + 1) * G] = [x[1] for x in got]
        c0 = ins.tile_col
        assert vec[:, c0 : c0 + ins.m].T.tolist() == want.tolist(), f"instruction {rec.index}"
        assert not np.delete(vec, range(c0, c0 + ins.m), axis=1).any(), "lanes outside M not 0"
    assert pos == {key: len(v) for key, v in ev["out"].items()}, "vectors no MM accounts for"
    want_err = [(r.error_cycle, int(r.error)) for r in sched.records if not r.accepted]
    if timed:
        assert ev["err"] == want_err
        assert ev["issue"] == [r.issue for r in sched.records]
        # every beat: a handshake of each lane group of its instruction, in its cycle
        for kind, op in (("stat", Op.LS), ("mov", Op.MM)):
            want = [
                (c, i)
                for r in sched.records
                if r.accepted and r.instruction.op == op
                for c in r.beats
                for i, _ in engine_lanes(te, r.instruction, r.plane)
            ]
            assert sorted(ev[kind]) == sorted(want), kind
    else:
        assert [c for _, c in ev["err"]] == [c for _, c in want_err]
    return sched


ROW_TILES_4 = ((0, 1, 0, 0), (1, 1, 0, 0), (2, 1, 0, 0), (3, 1, 0, 0))
COL_TILES_4 = ((0, 0, 0, 1), (0, 0, 1, 1), (0, 0, 2, 1), (0, 0, 3, 1))


@pytest.fixture(scope="module")
def parallel4():
    """A 4 x 4 engine with parallel tiles (tile_unit 1: 4 row groups, 4 column groups, 4
    slots) and its runs: programs of tiles running side by side, values and timing checked."""
    te = TensorEngine(4, 4, instance=False, tile_unit=1, parallel_tiles=True)
    rng = np.random.default_rng(77)
    cases = {
        "row tiles bf16": tile_sequences(rng, 4, 4, "bf16", ROW_TILES_4, tile_unit=1),
        "column tiles bf16": tile_sequences(rng, 4, 4, "bf16", COL_TILES_4, tile_unit=1),
        "2-row tiles fp8": tile_sequences(
            rng, 4, 4, "fp8", ((0, 2, 0, 0), (2, 2, 0, 0)), tile_unit=1
        ),
        "2-column tiles fp32": tile_sequences(
            rng, 4, 4, "fp32", ((0, 0, 0, 2), (0, 0, 2, 2)), tile_unit=1
        ),
        "mixed tiles transpose_bf16": tile_sequences(
            rng, 4, 4, "transpose_bf16", ((0, 1, 0, 0), (2, 2, 0, 0), (1, 1, 0, 0)), tile_unit=1
        ),
        "row tiles and the whole array": tile_sequences(
            rng, 4, 4, "bf16", ((0, 1, 0, 0), (0, 0, 0, 0), (3, 1, 0, 0)), tile_unit=1
        ),
        "column and row tiles": tile_sequences(
            rng, 4, 4, "fp16", ((0, 0, 1, 1), (2, 1, 0, 0), (0, 0, 3, 1)), tile_unit=1
        ),
    }
    # The runs of test_parallel_tiles_stalls_and_backpressure, in the same simulation.
    rng = np.random.default_rng(79)
    cases["stalled row tiles bf16"] = tile_sequences(
        rng, 4, 4, "bf16", ROW_TILES_4, tile_unit=1, pairs=3
    )
    cases["stalled column tiles fp8"] = tile_sequences(
        rng, 4, 4, "fp8", COL_TILES_4, tile_unit=1, pairs=3
    )
    stalled = [0.3 if name.startswith("stalled") else 0.0 for name in cases]
    events = run_engine(
        te,
        [[(i, b) for i, b, _ in p] for p in cases.values()],
        stall=stalled,
        backpressure=stalled,
        seed=2,
    )
    return te, dict(zip(cases, zip(cases.values(), events)))


@pytest.mark.long
@pytest.mark.parametrize(
    "name",
    [
        "row tiles bf16",
        "column tiles bf16",
        "2-row tiles fp8",
        "2-column tiles fp32",
        "mixed tiles transpose_bf16",
        "row tiles and the whole array",
        "column and row tiles",
    ],
)
def test_parallel_tiles_values_and_timing(parallel4, name):
    """Tiles run side by side on the RTL exactly as ``timing.simulate(rules=HDL_PARALLEL)``
    schedules them (every issue, beat, output and error cycle), each MM's vectors at its
    tile's tap and column groups, bit for bit."""
    te, runs = parallel4
    program, ev = runs[name]
    sched = check_parallel_run(te, program, ev)
    mms = [r for r in sched.records if r.accepted and r.instruction.op == Op.MM]
    assert mms, "no MM ran"


@pytest.mark.long
def test_parallel_tiles_overlap(parallel4):
    """The tiles in flight at once: in the runs of 4 row tiles and of 4 column tiles, MMs of
    different tiles have moving beats in the same cycles."""
    _, runs = parallel4
    for name in ("row tiles bf16", "column tiles bf16"):
        program, ev = runs[name]
        instrs = [i for i, _, _ in program]
        sched = timing.simulate(instrs, 4, 4, tile_unit=1, rules=timing.HDL_PARALLEL)
        cycles = [set(r.beats) for r in sched.records if r.accepted and r.instruction.op == Op.MM]
        shared = [a & b for i, a in enumerate(cycles) for b in cycles[i + 1 :]]
        assert any(shared), name


@pytest.mark.long
@pytest.mark.parametrize("R", [4, pytest.param(8, marks=pytest.mark.slow)])
def test_parallel_tiles_modes_and_rules(R):
    """An R x R engine with parallel tiles of tile_unit 2 (groups of 2 x 2 PEs, chains of 2
    columns): MX on R / 2 row tiles, double_row on 2 row tiles of R / 2, bf16 on column tiles
    of 2 (and of 4 at R = 8) side by side, values and timing; then the illegal combinations
    (double_row or MX on a column tile, a tile overlapping a tile in flight) get their codes
    and the engine goes on.  R = 4 in make test, 8 in the slow suite (4 row groups: the same
    rules with more tiles in flight)."""
    g = R // 2
    te = TensorEngine(R, R, instance=False, tile_unit=2, parallel_tiles=True)
    assert (te.slots, te.row_groups, te.col_groups) == (g, g, g)
    rng = np.random.default_rng(78)
    mx = tile_sequences(rng, R, R, "mx", tuple((2 * i, 2, 0, 0) for i in range(g)), tile_unit=2)
    dr = tile_sequences(rng, R, R, "double_row", ((0, g, 0, 0), (g, g, 0, 0)), tile_unit=2)
    col_tiles = ((0, 0, 0, 2), (0, 0, 2, 2)) + (((0, 0, 4, 4),) if R == 8 else ())
    cols = tile_sequences(rng, R, R, "bf16", col_tiles, tile_unit=2)
    # a column tile of 2 in flight while the illegal instructions come
    ls = Instruction(Op.LS, Mode.BF16, k=R, m=2, tile_col=R // 2, tile_cols=2)
    mm = Instruction(Op.MM, Mode.BF16, k=R, m=2, n=6, tile_col=ls.tile_col, tile_cols=2)
    s, x = _codes(rng, "bf16", (R, 2)), _codes(rng, "bf16", (R, 6))
    legal = [
        (ls, tile_beats(ls, s, R, cols=R, tile_unit=2), (s, None)),
        (mm, tile_beats(mm, x, R), (x, None)),
    ]
    other = 2 if R == 8 else 0  # a column tile not in flight
    illegal = [
        (Instruction(Op.LS, Mode.DOUBLE_ROW, k=R, m=2, tile_col=other, tile_cols=2), [], None),
        (Instruction(Op.LS, Mode.MX, k=R, m=2, tile_col=other, tile_cols=2), [], None),
        (Instruction(Op.LS, Mode.BF16, k=R, m=R), [], None),  # the whole array: busy
        (Instruction(Op.LS, Mode.BF16, k=2, m=2, tile_row=g, tile_rows=2), [], None),  # busy
    ]
    ls_l = replace_ins(ls, tile_col=R - 2 if R == 8 else 0)  # then one more column tile
    mm_l = replace_ins(mm, tile_col=ls_l.tile_col)
    rules = legal + illegal
    rules += [
        (ls_l, tile_beats(ls_l, s, R, cols=R, tile_unit=2), (s, None)),
        (mm_l, tile_beats(mm_l, x, R), (x, None)),
    ]
    runs = [mx, dr, cols, rules]
    events = run_engine(te, [[(i, b) for i, b, _ in p] for p in runs])
    for program, ev in zip(runs, events):
        check_parallel_run(te, program, ev)
    codes = [c for _, c in events[3]["err"]]
    assert codes == [Error.MODE_COMBO, Error.TILE, Error.TILE_BUSY, Error.TILE_BUSY]
    # the last tile's MM ran after the errors
    assert len(events[3]["out"][(g - 1, ls_l.tile_col // 2)]) == 6


@pytest.mark.long
def test_parallel_tiles_stalls_and_backpressure(parallel4):
    """Random stalls on every instruction, stationary and moving stream and backpressure on
    the result stream: 4 row tiles and 4 column tiles side by side lose and repeat nothing
    (values bit for bit; no tile ever waits on a different one, so the errors are the
    model's)."""
    te, runs = parallel4
    for name in ("stalled row tiles bf16", "stalled column tiles fp8"):
        program, ev = runs[name]
        check_parallel_run(te, program, ev, timed=False)


@pytest.mark.synth
def test_verilog_parallel_tiles_lint_clean_latch_free():
    """An 8 x 8 engine with parallel tiles (tile_unit 2: 4 slots, 4 row groups, 4 injection
    points, 4 output taps of 4 column groups): lint-clean, and latch-free around PE black
    boxes."""
    _lint_and_synth_around_the_pe(
        TensorEngine(8, 8, tile_unit=2, parallel_tiles=True), "te_par_8x8"
    )


def _step(rng, ins, rows=8, cols=8, tile_unit=2):
    """``(ins, beats, data)`` of a bf16 instruction with random data, for ``run_engine``."""
    if ins.op == Op.LS:
        s = _codes(rng, "bf16", (ins.k, ins.m))
        return ins, tile_beats(ins, s, rows, cols=cols, tile_unit=tile_unit), (s, None)
    x = _codes(rng, "bf16", (ins.k, ins.n))
    return ins, tile_beats(ins, x, rows), (x, None)


@pytest.mark.long
def test_parallel_tiles_load_into_different_banks():
    """Two column tiles load in the same cycle, each into its own bank (the right tile's
    earlier LS took bank 0 there, so its next one writes bank 1 while the left tile's writes
    bank 0): every chain's words go to the bank of the LS that loads that chain.  (A
    bf16-family PE: the banks are the control's, the same for every PE, at a third of the
    simulation time.)"""
    te = TensorEngine(8, 8, instance=False, tile_unit=2, parallel_tiles=True, modes="bf16")
    rng = np.random.default_rng(80)
    right = dict(tile_col=4, tile_cols=4)
    left = dict(tile_col=0, tile_cols=4)
    program = [
        _step(rng, Instruction(Op.LS, Mode.BF16, k=1, m=3, **right)),
        _step(rng, Instruction(Op.MM, Mode.BF16, k=1, m=3, n=6, **right)),
        _step(rng, Instruction(Op.LS, Mode.BF16, k=1, m=4, **left)),
        _step(rng, Instruction(Op.LS, Mode.BF16, k=5, m=4, **right)),
        _step(rng, Instruction(Op.MM, Mode.BF16, k=5, m=4, n=10, **right)),
        _step(rng, Instruction(Op.MM, Mode.BF16, k=1, m=4, n=10, **left)),
    ]
    (ev,) = run_engine(te, [[(i, b) for i, b, _ in program]])
    sched = check_parallel_run(te, program, ev)
    ls_left, ls_right = sched.records[2], sched.records[3]
    assert set(ls_left.beats) & set(ls_right.beats), "the two LS must load in the same cycle"
    assert (ls_left.bank, ls_right.bank) == (0, 1)


# -- the background transpose plane ---------------------------------------------------------------


def _program_of(steps, rows, cols, tile_unit):
    """``[(Instruction, beats, data)]`` of ``program.tile_steps`` steps."""
    program = []
    for step in steps:
        ins = step.ins
        if ins.op == Op.LS:
            beats = tile_beats(ins, step.data, rows, step.scale, cols=cols, tile_unit=tile_unit)
        else:
            beats = tile_beats(ins, step.data, rows, step.scale)
        program.append((ins, beats, (step.data, step.scale)))
    return program


def background_steps(rng, rows, cols, ops, groups, *, tile_unit, max_n=6, tile_share=0.3):
    """``program.background_program`` as ``[(Instruction, beats, data)]``."""
    prog = background_program(
        rng, rows, cols, ops, groups=groups, max_n=max_n, tile_unit=tile_unit, tile_share=tile_share
    )
    return _program_of(prog.steps, rows, cols, tile_unit)


TRANSPOSES = ("transpose_bf16", "transpose_fp8", "transpose_fp32", "transpose_fp16")


def _with_data(pairs, data):
    """``(ins, beats)`` pairs and each accepted instruction's encodings as ``[(ins, beats,
    (data, None))]``."""
    return [(ins, beats, (d, None)) for (ins, beats), d in zip(pairs, data)]


@pytest.fixture(scope="module")
def background4():
    """A 4 x 4 engine with the background transpose plane (tile_unit 1) and its runs in one
    simulation: a chain of transposes, matmuls and transposes mixed on every tile, transposes
    of NaN payloads, illegal instructions, a selection error on plane 1."""
    te = TensorEngine(4, 4, instance=False, tile_unit=1, background_transpose=True)
    rng = np.random.default_rng(83)
    runs = {
        "chain": background_steps(rng, 4, 4, TRANSPOSES, 10, tile_unit=1, max_n=8),
        "mixed": background_steps(
            rng,
            4,
            4,
            ("bf16", "fp8", "fp32", "double_row", *TRANSPOSES),
            16,
            tile_unit=1,
            tile_share=0.8,
        ),
    }
    runs["payloads"] = _with_data(*_transpose_programs(4, data=True, tile_unit=1))
    ill, _, _ = _illegal_program(np.random.default_rng(9), 4, 1)
    runs["illegal"] = [(ins, beats, None) for ins, beats in ill]
    runs["selection"] = [(ins, beats, None) for ins, beats in _selection_error_program(4, 1)]
    # The runs of test_background_plane_stalls_and_backpressure, in the same simulation.
    rng = np.random.default_rng(84)
    names = ("bf16", "fp32", *TRANSPOSES)
    for run in "ab":
        runs[f"stalled {run}"] = background_steps(rng, 4, 4, names, 14, tile_unit=1, tile_share=0.8)
    stalled = [0.3 if name.startswith("stalled") else 0.0 for name in runs]
    events = run_engine(
        te,
        [[(i, b) for i, b, _ in p] for p in runs.values()],
        stall=stalled,
        backpressure=stalled,
        seed=3,
    )
    return te, {name: (prog, ev) for (name, prog), ev in zip(runs.items(), events)}


@pytest.mark.long
def test_background_plane_values_and_timing(background4):
    """Matmuls and transposes on both planes run exactly as ``timing.simulate(rules=
    HDL_BACKGROUND)`` schedules them (every issue, beat, output and error cycle), each MM's
    vectors on its plane's output bit for bit; a chain of transposes alternates between the
    planes and runs two at a time."""
    te, runs = background4
    for name in ("chain", "mixed", "payloads"):
        program, ev = runs[name]
        sched = check_parallel_run(te, program, ev)
        accepted = [r for r in sched.records if r.accepted]
        assert {r.plane for r in accepted} == {0, 1}, name
        assert all(r.plane == 0 for r in accepted if not r.instruction.transpose), name
    sched = timing.simulate(
        [i for i, _, _ in runs["chain"][0]], 4, 4, tile_unit=1, rules=timing.HDL_BACKGROUND
    )
    mms = [r for r in sched.records if r.instruction.op == Op.MM]
    both = [set(a.beats) & set(b.beats) for a in mms for b in mms if a.plane != b.plane]
    assert any(both), "no two transposes streamed at once"


@pytest.mark.long
def test_background_plane_payloads_and_errors(background4):
    """Transposes of NaN payloads, -0 and TF32's low bits come out raw on both planes; illegal
    instructions get the serial engine's codes; a non-selection beat on plane 1 flags
    ``SELECTION`` once and gives a zero vector on plane 1's output."""
    te, runs = background4
    program, ev = runs["illegal"]
    codes = [c for _, c in ev["err"]]
    assert set(codes) == set(range(1, 11)) - {Error.SELECTION}
    sched = timing.simulate(
        [i for i, _, _ in program], 4, 4, tile_unit=1, rules=timing.HDL_BACKGROUND
    )
    assert ev["err"] == [(r.error_cycle, int(r.error)) for r in sched.records if not r.accepted]
    program, ev = runs["selection"]
    assert [c for _, c in ev["err"]] == [Error.SELECTION]
    assert ev["err"][0][0] == ev["mov"][1][0] + 1
    assert ev["out"][(0, 0)] == []  # the transpose ran on plane 1
    got = [o[1][:2] for o in ev["out"][(1, 0)]]
    assert got == [[0x3F80, 0x4000], [0, 0], [0, 0], [0x4040, 0x4080], [0x3F80, 0x4000]]


@pytest.mark.long
def test_background_plane_stalls_and_backpressure(background4):
    """Random stalls on every stream and backpressure on the result: both planes lose and
    repeat nothing (values bit for bit, in order, the errors the model's)."""
    te, runs = background4
    for name in ("stalled a", "stalled b"):
        program, ev = runs[name]
        check_parallel_run(te, program, ev, timed=False)


@pytest.mark.long
@pytest.mark.parametrize("R", [4, pytest.param(8, marks=pytest.mark.slow)])
def test_background_plane_tile_unit_2(R):
    """An R x R engine (tile_unit 2: chains of 2 columns) with the background plane: every
    transpose container and MX, fp32 and double_row matmuls between them, values and
    timing.  R = 4 in make test, 8 in the slow suite."""
    te = TensorEngine(R, R, instance=False, tile_unit=2, background_transpose=True)
    rng = np.random.default_rng(85 if R == 4 else 86)  # seeds whose programs hold every kind
    names = ("mx", "fp32", "double_row", "bf16", *TRANSPOSES)
    program = background_steps(rng, R, R, names, 14, tile_unit=2, max_n=10)
    (ev,) = run_engine(te, [[(i, b) for i, b, _ in program]])
    sched = check_parallel_run(te, program, ev)
    accepted = [r.instruction for r in sched.records if r.accepted]
    assert {r.plane for r in sched.records if r.accepted} == {0, 1}
    assert {i.mode for i in accepted if not i.transpose} >= {Mode.MX, Mode.FP32, Mode.DOUBLE_ROW}


@pytest.mark.synth
def test_verilog_background_plane_lint_clean_latch_free():
    """An 8 x 8 engine with the background plane (its own cells included): lint-clean,
    latch-free around PE black boxes."""
    _lint_and_synth_around_the_pe(
        TensorEngine(8, 8, tile_unit=2, background_transpose=True), "te_bg_8x8"
    )


def test_background_plane_not_with_parallel_tiles():
    with pytest.raises(ValueError, match="background plane is built for the serial engine"):
        TensorEngine(
            4, 4, instance=False, tile_unit=1, parallel_tiles=True, background_transpose=True
        )


# -- a PE built for part of the mode table ---------------------------------------------------------


@pytest.mark.parametrize(
    "family", ["bf16", *(pytest.param(f, marks=pytest.mark.slow) for f in ("fp8", "fp32", "mx"))]
)
def test_pe_modes_family_values_timing_and_other_modes_rejected(family):
    """An engine whose PE is built for one mode family (``pe_modes``): random programs in each
    of its modes (their transposes too) bit for bit and cycle for cycle, and an instruction of
    a mode the build lacks rejected with ``Error.MODE`` while the engine goes on."""
    modes = pe_modes(family)
    unit = 4 if family == "mx" else 32
    te = TensorEngine(4, 4, instance=False, tile_unit=unit, modes=family)
    assert te.modes == modes
    pe = PE(modes)
    pe._MustUse__silence = True
    assert pe.lanes == max(m.products for m in modes) and pe.wide == operand_formats(modes)
    names = [n for n in operations(modes)]
    other = next(m for m in ENGINE_MODES if m not in modes)
    runs = []
    for name in names:
        rng = np.random.default_rng(sum(map(ord, name)) + 7)
        runs.append(make_program(rng, 4, 4, name, tile_unit=unit))
    # a foreign LS and MM between two legal pairs: both rejected, the rest runs
    prog, expected = runs[0]
    k = other.k_step(unit)
    foreign = [
        (Instruction(Op.LS, other.code, k=k, m=2), []),
        (Instruction(Op.MM, other.code, k=k, m=2, n=3), []),
    ]
    runs.append((prog[:2] + foreign + prog[2:], expected))
    events = run_engine(te, [p for p, _ in runs])
    for (program, expected), ev in zip(runs, events):
        check_engine_run(te, program, expected, ev, timed=True)
    codes = [c for _, c in events[-1]["err"]]
    assert codes.count(Error.MODE) >= 2


@pytest.mark.synth
def test_verilog_pe_modes_bf16_lint_clean_latch_free():
    """A 4 x 4 engine with a bf16-family PE: lint-clean, latch-free (the PE on its own, then the
    top around PE black boxes, as for the all-mode engine), and its PE module smaller than the
    all-mode one."""
    text = convert(TensorEngine(4, 4, modes="bf16"), "te_bf16_4x4")
    lint = lint_verilog(text, "te_bf16_4x4")
    assert lint.ok, lint.log[:4000]
    pe = flat_module(PE(pe_modes("bf16")), PE_MODULE)
    assert text.startswith(pe)
    synth = synth_check(pe, PE_MODULE)
    assert synth.ok, synth.log[-4000:]
    boxed = convert(TensorEngine(4, 4, modes="bf16"), "te_bf16_4x4", blackbox=[PE_MODULE])
    synth = synth_check(boxed, "te_bf16_4x4")
    assert synth.ok, synth.log[-4000:]
    assert re.search(rf"\b16 +{PE_MODULE}\b", synth.log)
    assert len(pe) < len(flat_module(PE(), PE_MODULE)) / 2


@pytest.mark.slow
@pytest.mark.synth
def test_verilog_pe_modes_bf16_whole_engine_latch_free():
    """The 4 x 4 bf16-family engine synthesized whole, its 16 PEs flattened into the top (about
    four minutes with the whole flow; ``make test`` synthesizes the PE and the top around PE
    black boxes)."""
    text = convert(TensorEngine(4, 4, modes="bf16"), "te_bf16_4x4")
    synth = synth_check(text, "te_bf16_4x4")
    assert synth.ok, synth.log[-4000:]


def test_band_plan_and_band_arguments():
    """Bands cut the columns evenly; a band divides a LoadStationary chain or holds whole
    chains, and its entries say which chain starts at its left edge (none: the left
    neighbour's chain goes on)."""
    from ncrtl.hdl.tensor_engine.band import PEBand, band_plan

    assert band_plan(128, 4, 32) == [(0, 32, [0]), (32, 32, [1]), (64, 32, [2]), (96, 32, [3])]
    assert band_plan(128, 2, 32) == [(0, 64, [0, 1]), (64, 64, [2, 3])]
    assert band_plan(8, 8, 2)[:3] == [(0, 1, [0]), (1, 1, []), (2, 1, [1])]
    with pytest.raises(ValueError, match=r"^bands=3 must divide the 128 columns$"):
        band_plan(128, 3, 32)
    with pytest.raises(ValueError, match=r"^a band of 24 columns must divide the chain width 32"):
        band_plan(96, 4, 32)
    band = PEBand(128, 64, chain_width=32)
    assert band.entries == 2 and band.block == 8
    assert len(band.i_ls) == 2 * 128 * 40 and len(band.o_psum) == 64 * 32
    with pytest.raises(ValueError, match=r"^PEBand cols=48 must be a multiple of the chain width"):
        PEBand(8, 48, chain_width=32, block=8)


@pytest.mark.synth
def test_verilog_band_and_gridless_engine_lint_clean_latch_free():
    """The two designs of the column-band simulation, a band of an 8 x 8 grid and the engine
    without its grid: lint-clean and latch-free like every generated design."""
    from ncrtl.hdl.tensor_engine.band import BAND_MODULE, PEBand

    band = PEBand(8, 4, chain_width=8, block=4, modes=pe_modes("bf16"))
    for design, top in (
        (band, BAND_MODULE),
        (TensorEngine(8, 8, modes="bf16", external_grid=True), "te_grid_8x8"),
    ):
        lint = lint_verilog(convert(design, top), top)
        assert lint.ok, lint.log[:4000]
        # The band is wiring around its PEs (synthesized in the engine tests): they are black
        # boxes here, so the check takes seconds.
        synth = synth_check(convert(design, top, blackbox=["te_pe"] if design is band else ()), top)
        assert synth.ok, synth.log[-4000:]
    assert "te_pe" not in convert(TensorEngine(8, 8, modes="bf16", external_grid=True), "t")


# -- sparse -------------------------------------------------------------------------------------


#: The PE of the sparse tests: every sparse mode and fp32 (a mode without sparse), not the
#: multi-product lanes of double_row and MX (the same sparse path, a third of the simulation).
SPARSE_TEST_MODES = "fp32+tf32+bf16+fp16+fp8"


def sparse_lanes(moving, slot):
    """Moving lane words of a sparse beat: row ``p``'s ``R`` elements, element ``e`` in bits
    ``[e * slot, +slot)`` (``moving[:, :, n]`` as int codes)."""
    out = []
    for row in moving:
        out.append(sum(int(v) << (slot * e) for e, v in enumerate(row)))
    return out


@pytest.mark.parametrize(
    "fmt,r",
    [
        # (the engine test below runs every sparse mode and ratio through this array, and
        # test_small_array_programs[4x4-sparse-b2-sparse] the same on Verilator)
        pytest.param("bf16", 4, marks=pytest.mark.slow),
        pytest.param("tf32", 3, marks=pytest.mark.slow),
        pytest.param("fp8_e4m3", 2, marks=pytest.mark.slow),
    ],
)
def test_array_sparse_picks_the_group_element(fmt, r):
    """A sparse LS then MM on an 8 x 4 array (two groups), bubbles between the moving beats:
    every PE picks the element its tag names from the words of its row group (rows above and
    below it, across the left and right edges), against the golden ``matmul_sparse``."""
    from ncrtl.hdl.tensor_engine.pe import sparse_slot_width
    from ncrtl.model.tensor_engine.matmul import mode_of
    from ncrtl.model.tensor_engine.sparse import matmul_sparse, pack_tags

    R, C = 8, 4
    K, M, N = 8, 4, 5
    rng = np.random.default_rng(zlib.crc32(f"sparse {fmt} {r}".encode()))
    f = "fp32" if fmt == "tf32" else fmt
    codes = lambda shape: _codes(rng, fmt, shape).astype(np.int64)
    S, X = codes((K, M)), codes((K, r, N))
    phys = np.zeros((K, M), dtype=np.int64)
    for g in range(K // 4):
        for col in range(M):
            pos = rng.choice(4 * r, size=4, replace=False)
            phys[4 * g : 4 * g + 4, col] = ((pos // r) << 2) | (pos % r)
    as_dtype = lambda a: from_bits(a.astype(get_format(f).storage_dtype), f)
    kw = {"stationary_format": "tf32", "moving_format": "tf32"} if fmt == "tf32" else {}
    want = matmul_sparse(as_dtype(X), as_dtype(S), pack_tags(phys), r, rows=R, cols=C, **kw)
    want = want.view(np.uint32).astype(np.int64)
    arr = SystolicArray(R, C, instance=False, sparse=True, modes=pe_modes(SPARSE_TEST_MODES))
    mode, fs, fm = mode_of(fmt, fmt)
    pe_mode = mode_by_code(mode)
    slot = sparse_slot_width(arr.modes)
    tl = beat_tag_layout(R)
    ls_words = S | (phys << 32)
    beats = [n for n in range(N) for _ in range(1 + int(rng.integers(0, 2)))]  # repeats: bubbles
    mv_cycles, seen = {}, set()
    cyc = M - 1
    for n in beats:
        if n not in seen:
            mv_cycles[cyc] = n
            seen.add(n)
        cyc += 1
    last = max(mv_cycles)
    got = {}

    async def bench(ctx):
        for cyc in range(last + arr.latency + 2):
            ls = cyc < M
            n = mv_cycles.get(cyc)
            ctx.set(arr.i_ls, lanes(ls_words[:, M - 1 - cyc]) if ls else 0)
            ctx.set(arr.i_ls_ctl.as_value(), pack(LS_CTL_LAYOUT, valid=ls, bank=1))
            words = sparse_lanes(X[:, :, n], slot) if n is not None else [0] * R
            ctx.set(arr.i_x, sum(w << (arr.x_width * i) for i, w in enumerate(words)))
            fields = tag_fields(pe_mode, fs, fm, False, valid=n is not None, bank=1, sparse=True)
            ctx.set(
                arr.i_tag.as_value(), pack(tl, pe=pack(TAG_LAYOUT, **fields), row_lo=0, row_hi=K)
            )
            await ctx.tick()
            out = cyc + 1 - arr.latency
            if out in mv_cycles:
                got[mv_cycles[out]] = unlanes(ctx.get(arr.o_psum), C)

    sim = Simulator(arr)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert np.array([got[j] for j in range(N)]).T.tolist() == want.tolist()


def _sparse_pair(rng, te, fmt, r, k, n, tags="good"):
    """A sparse LS + MM of ``te`` (``M`` its columns) on random operands: ``(program steps,
    golden bits or None, error)``:
    ``tags`` ``"good"``, ``"element"`` (an element not below the ratio) or ``"repeat"`` (a
    position twice in a group)."""
    from ncrtl.hdl.tensor_engine.pe import sparse_slot_width
    from ncrtl.model.tensor_engine.sparse import matmul_sparse, pack_tags, sparse_instructions

    rows, m = te.rows, te.cols
    f = "fp32" if fmt == "tf32" else fmt
    S, X = _codes(rng, fmt, (k, m)), _codes(rng, fmt, (k, r, n))
    phys = np.zeros((k, m), dtype=np.int64)
    for g in range(k // 4):
        for col in range(m):
            pos = rng.choice(4 * r, size=4, replace=False)
            phys[4 * g : 4 * g + 4, col] = ((pos // r) << 2) | (pos % r)
    err = None
    if tags == "element":
        phys[1, m - 1] = (phys[1, m - 1] & 0xC) | 3
        err = Error.TAG
    elif tags == "repeat":
        phys[k - 1, 0] = phys[k - 2, 0]
        err = Error.TAG
    as_dtype = lambda a: from_bits(a.astype(get_format(f).storage_dtype), f)  # noqa: E731
    kw = {"stationary_format": "tf32", "moving_format": "tf32"} if fmt == "tf32" else {}
    ls, mm = sparse_instructions(
        as_dtype(X), as_dtype(S), pack_tags(phys), r, rows=rows, cols=m, **kw
    )
    want = None
    if err is None:
        got = matmul_sparse(as_dtype(X), as_dtype(S), pack_tags(phys), r, rows=rows, cols=m, **kw)
        want = got.view(np.uint32).astype(np.int64)
    words = (S | (phys << 32)).T  # [M, K] lane words
    st = [[int(v) for v in b] for b in stationary_beats(words, ls, rows, m, te.tile_unit)]
    slot = sparse_slot_width(te.modes)
    mv = []
    for j in range(n):
        col = [sum(int(X[p, e, j]) << (slot * e) for e in range(r)) for p in range(k)]
        mv.append(col + [0] * (rows - k))
    return [(ls, st), (mm, mv)], want, err


def test_engine_sparse_values_tags_and_rules():
    """A sparse-capable 8 x 4 engine: sparse matmuls of every sparse mode and ratio between
    dense ones, with stalls and backpressure; stationaries with broken tags give no result
    vector and one TAG error each, and the engine goes on; a sparse fp32 instruction is
    rejected with SPARSE.  Values against the golden matmul_sparse / matmul."""
    R, C = 8, 2  # two row groups; two columns: the group words cross both edges
    rng = np.random.default_rng(11)
    te = TensorEngine(R, C, instance=False, tile_unit=2, sparse=True, modes=SPARSE_TEST_MODES)
    assert te.x_width == 128  # four TF32 elements per row
    cases = [
        ("bf16", 4, "good"),
        ("tf32", 3, "good"),
        ("fp8_e5m2", 2, "element"),
        ("fp16", 2, "good"),
        ("fp8_e4m3", 4, "repeat"),
        ("fp8_e3m4", 3, "good"),
    ]
    program, wants, errors = [], [], []
    for i, (fmt, r, tags) in enumerate(cases):
        k = 8 if i % 2 == 0 else 4
        steps, want, err = _sparse_pair(rng, te, fmt, r, k, 3 + i, tags)
        program += steps
        wants.append(want)
        if err is not None:
            errors.append(err)
        if i == 2:  # a dense matmul on the engine between sparse ones
            s, x = _codes(rng, "bf16", (R, C)), _codes(rng, "bf16", (R, 2))
            ls = Instruction(Op.LS, Mode.BF16, k=R, m=C)
            mm = Instruction(Op.MM, Mode.BF16, k=R, m=C, n=2)
            program += [
                (ls, tile_beats(ls, s, R, cols=C, tile_unit=2)),
                (mm, tile_beats(mm, x, R, tile_unit=2)),
            ]
            bf = lambda a: from_bits(a.astype(np.uint16), "bf16")  # noqa: E731
            dense = matmul(bf(s), bf(x), rows=R, cols=C).view(np.uint32).astype(np.int64)
            wants.append(dense)
        if i == 3:  # sparse on a mode without sparse, and a ratio the engine lacks
            program.append((Instruction(Op.LS, Mode.FP32, k=4, m=C, sparse=2), []))
            program.append((Instruction(Op.LS, Mode.BF16, k=4, m=C, sparse=5), []))
            errors += [Error.SPARSE, Error.SPARSE]
    want_vectors = [v for w in wants if w is not None for v in w.T.tolist()]
    (ev,) = run_engine(
        te, [program], stall=0.3, backpressure=0.3, seed=5, outputs=len(want_vectors)
    )
    assert [v for _, v, _ in ev["out"]] == want_vectors
    assert [code for _, code in ev["err"]] == [int(e) for e in errors]
