"""Amaranth-simulator tests of the FP RTL (``hdl/fp``, ``hdl/common``) against the golden model.

Every unit is checked bit for bit against ``ncrtl.model.fp`` on corner cases (signed zeros, subnormals,
extreme normals, Inf, NaN, exact cancellation, huge exponent gaps, ties, overflow, underflow to
subnormal and to zero, scale extremes) and a few thousand random vectors; a handful of corner
results are also asserted against hand-computed encodings, which checks the golden itself.
The generated Verilog of every unit (behind a ``StreamLanes`` top) must be lint-clean under
``verilator -Wall`` (with the waivers of ``hdl/lint.vlt``) and latch-free under Yosys
(``@pytest.mark.sim``).  Heavy conformance runs through cocotb/Verilator (``testbench/``).
"""

import itertools

import ml_dtypes
import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from ncrtl.hdl.common.bits import shift_left, shift_right_sticky
from ncrtl.hdl.common.stream import StreamLanes
from ncrtl.hdl.fp.add import Fp32Add
from ncrtl.hdl.fp.add_round import AddRound
from ncrtl.hdl.fp.convert import Bf16Rounding, Fp32ToBf16, Fp32ToFloat, Fp32ToFp16
from ncrtl.hdl.fp.dot_add import FusedDotAdd
from ncrtl.hdl.fp.exact import ExactLayout, fixed_point_window
from ncrtl.hdl.fp.mul import ExactMul
from ncrtl.hdl.fp.split_sum import split_plan
from ncrtl.hdl.fp.unpack import Unpack
from ncrtl.hdl.fp.xorwow import Xorwow, pack_state
from ncrtl.hdl.verilog import convert
from ncrtl.model.fp import (
    decode_fields,
    encode,
    fp32_add,
    fp32_dot_add,
    fp32_to_bf16,
    fp32_to_fp16,
    from_bits,
    get_format,
)
from ncrtl.model.fp.xorwow import XORWOW_INIT
from ncrtl.model.fp.xorwow import Xorwow as ModelXorwow
from ncrtl.model.modes import MODES
from ncrtl.testbench.lint import CheckError, lint_verilog, synth_check
from tests.exact_ref import marsaglia_xorwow

FP8 = ["fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2"]
MX = ["fp8_e4m3fn", "fp8_e5m2", "fp4_e2m1fn"]
ALL_OPERANDS = [
    "fp32",
    "tf32",
    "bf16",
    "fp16",
    "fp8_e4m3",
    "fp8_e4m3fn",
    "fp8_e5m2",
    "fp8_e3m4",
    "fp4_e2m1fn",
]

# Casting signalling NaNs to float64 in the golden warns; the values are right.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


# -- simulation harness -------------------------------------------------------------------------


def _field(dut, name):
    """Port ``name`` of ``dut``; ``"o_value.sig"`` is a field of a struct port."""
    value = dut
    for part in name.split("."):
        value = getattr(value, part)
    return value


def simulate(dut, rows, outputs=("o_result",)):
    """Apply one row of input values per clock (``en`` = 1) and collect the outputs.

    Every ``i_*`` port is driven every cycle (0 when the row omits it); a struct port is driven
    by field (``"i_a.sig"``), and an output may name a field (``"o_value.exp"``).  Returns
    ``{output: int64 array}`` aligned with ``rows``: row ``k``'s results are read ``latency``
    clocks after it was applied (at once for combinational units).
    """
    latency = dut.latency
    ports = []
    for name, member in dut.signature.members.items():
        if name.startswith("i_"):
            port = getattr(dut, name)
            if isinstance(member.shape, data.StructLayout):  # an exact value: by field
                ports += [(f"{name}.{f}", getattr(port, f)) for f, _ in member.shape]
            else:
                ports.append((name, port))
    outs = [_field(dut, o) for o in outputs]
    got = {o: [] for o in outputs}
    n = len(rows)

    async def bench(ctx):
        for i in range(n + latency):
            if i < n:
                row = rows[i]
                for name, port in ports:
                    ctx.set(port, int(row.get(name, 0)))
            if latency == 0:
                for o, s in zip(outputs, outs):
                    got[o].append(ctx.get(s))
                continue
            await ctx.tick()
            if i >= latency - 1 and len(got[outputs[0]]) < n:
                for o, s in zip(outputs, outs):
                    got[o].append(ctx.get(s))

    sim = Simulator(dut)
    if latency:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return {o: np.array(v, dtype=np.int64) for o, v in got.items()}


def bits_of(fmt, values):
    """Encodings of float values in ``fmt`` (exact values: no rounding happens)."""
    return np.asarray(encode(np.asarray(values, dtype=np.float64), fmt)).astype(np.int64)


def f32(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.int64)


def assert_bits_equal(got, want, what, inputs=()):
    got = np.asarray(got, dtype=np.int64)
    want = np.asarray(want, dtype=np.int64)
    bad = np.nonzero(got != want)[0]
    if len(bad):
        lines = []
        for i in bad[:8]:
            ins = ", ".join(f"{np.asarray(x)[i]!r}" for x in inputs)
            lines.append(f"  #{i}: got {int(got[i]):#x} want {int(want[i]):#x}  inputs {ins}")
        raise AssertionError(f"{what}: {len(bad)} of {len(got)} mismatches\n" + "\n".join(lines))


# -- stimulus -----------------------------------------------------------------------------------

FP32_CORNERS = np.array(
    [
        0x00000000,
        0x80000000,
        0x00000001,
        0x80000001,
        0x00000002,
        0x007FFFFF,
        0x807FFFFF,
        0x00800000,
        0x80800000,
        0x00800001,
        0x3F800000,
        0xBF800000,
        0x3F800001,
        0x3F7FFFFF,
        0x3FFFFFFF,
        0x4B800000,
        0x33800000,
        0x34000000,
        0x7F7FFFFF,
        0xFF7FFFFF,
        0x7F7FFFFE,
        0x7F000000,
        0x7F800000,
        0xFF800000,
        0x7FC00000,
        0xFFC00000,
        0x7F800001,
        0x7FBFFFFF,
        0x0C000000,
        0x8C000000,
        0x73000000,
        0x01000000,
        0x00400000,
        0x00C00000,
        0x3F801FFF,
        0x7F801FFF,
        0x00001FFF,
    ],
    dtype=np.int64,
)


def corner_codes(fmt):
    """Corner encodings of an operand format."""
    f = get_format(fmt)
    if f.container_bits == 32:
        return FP32_CORNERS
    if f.bits <= 8:
        # The two extreme binades (zeros, subnormals, Inf/NaN/max) and the binade of 1.0.
        codes = np.arange(1 << f.bits)
        ef = (codes >> f.man_bits) & ((1 << f.exp_bits) - 1)
        keep = (ef <= 1) | (ef >= (1 << f.exp_bits) - 2) | (ef == min(f.bias, ef.max()))
        return codes[keep].astype(np.int64)
    vals = [
        0.0,
        -0.0,
        f.smallest_subnormal,
        -f.smallest_subnormal,
        2.0**f.emin,
        2.0**f.emin - f.smallest_subnormal,
        f.max_finite,
        -f.max_finite,
        1.0,
        -1.0,
        1.0 + 2.0**-f.man_bits,
        1.5,
        np.inf,
        -np.inf,
    ]
    nan = ((1 << f.exp_bits) - 1) << f.man_bits
    return np.concatenate([bits_of(f, vals), [nan | 1, (1 << f.bits) - 1]])


def random_codes(rng, fmt, n, special_rate=0.02):
    """Random encodings; FP32/TF32 mostly in a band of exponents so that sums interact."""
    f = get_format(fmt)
    if f.container_bits == 32:
        bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.int64)
        band = (bits & 0x807FFFFF) | (rng.integers(100, 155, n) << 23)
        return np.where(rng.random(n) < 0.75, band, bits)
    bits = rng.integers(0, 1 << f.bits, n).astype(np.int64)
    kind = decode_fields(bits, f)[4]
    # Thin out Inf/NaN: clear the exponent MSB of most of them.
    thin = (kind != 0) & (rng.random(n) >= special_rate)
    return np.where(thin, bits & ~(1 << (f.bits - 2)), bits)


# -- golden helpers -----------------------------------------------------------------------------


def golden_dot_add(psum, a, b, fa, fb, scale_exp=None, scale_nan=None):
    """FP32 result bits of the contract for one format pair (vectorised)."""
    fa_, fb_ = get_format(fa), get_format(fb)
    av = from_bits(np.asarray(a).astype(fa_.storage_dtype), fa_)
    bv = from_bits(np.asarray(b).astype(fb_.storage_dtype), fb_)
    out = fp32_dot_add(
        np.asarray(psum, dtype=np.uint32).view(np.float32),
        av,
        bv,
        a_format=fa,
        b_format=fb,
        scale_exp=scale_exp,
        scale_nan=scale_nan,
    )
    return out.view(np.uint32).astype(np.int64)


class DotAddCase:
    """A set of fused dot-add vectors for one FusedDotAdd configuration."""

    def __init__(self, dut):
        self.dut = dut
        self.k = dut.n_products
        self.rows, self.psum, self.a, self.b = [], [], [], []
        self.ia, self.ib, self.se, self.snan = [], [], [], []

    def add(self, psum, a, b, ia=0, ib=0, se=0, snan=0):
        """One vector: psum bits, k codes of a and of b, format indices, scale."""
        a, b = list(a), list(b)
        assert len(a) == len(b) == self.k
        self.psum.append(int(psum) & 0xFFFFFFFF)
        self.a.append(a)
        self.b.append(b)
        self.ia.append(ia)
        self.ib.append(ib)
        self.se.append(se)
        self.snan.append(snan)

    def run(self, label):
        dut = self.dut
        wa, wb = dut.operand_width_a, dut.operand_width_b
        rows = []
        for i in range(len(self.psum)):
            row = {
                "i_psum": self.psum[i],
                "i_a": sum(int(x) << (j * wa) for j, x in enumerate(self.a[i])),
                "i_b": sum(int(x) << (j * wb) for j, x in enumerate(self.b[i])),
                "i_fmt_a": self.ia[i],
                "i_fmt_b": self.ib[i],
            }
            if dut.scale:
                row["i_scale_exp"] = self.se[i] & 0x3FF
                row["i_scale_nan"] = self.snan[i]
            rows.append(row)
        got = simulate(dut, rows)["o_result"]
        psum = np.array(self.psum, dtype=np.int64)
        a, b = np.array(self.a, dtype=np.int64), np.array(self.b, dtype=np.int64)
        ia, ib = np.array(self.ia), np.array(self.ib)
        se, snan = np.array(self.se, dtype=np.int64), np.array(self.snan, dtype=bool)
        want = np.zeros(len(psum), dtype=np.int64)
        for x, y in itertools.product(range(len(dut.formats_a)), range(len(dut.formats_b))):
            sel = (ia == x) & (ib == y)
            if sel.any():
                want[sel] = golden_dot_add(
                    psum[sel],
                    a[sel],
                    b[sel],
                    dut.formats_a[x].name,
                    dut.formats_b[y].name,
                    se[sel] if dut.scale else None,
                    snan[sel] if dut.scale else None,
                )
        assert_bits_equal(got, want, label, (psum, a, b, ia, ib, se))
        return got, want


# -- constructor validation ---------------------------------------------------------------------


def test_constructor_errors():
    with pytest.raises(ValueError, match=r"^Unpack formats must list at least one format$"):
        Unpack([])
    with pytest.raises(
        TypeError,
        match=r"^Unpack formats must be a list of format names, "
        r"not 'fp32'$",
    ):
        Unpack("fp32")
    with pytest.raises(ValueError, match=r"^Unpack formats: unknown number format 'fp7'"):
        Unpack(["fp7"])
    with pytest.raises(ValueError, match=r"^Unpack formats lists format 'bf16' more than once$"):
        Unpack(["bf16", "bfloat16"])
    with pytest.raises(
        ValueError,
        match=r"^ExactMul formats_a: e8m0 is a scale format, "
        r"not a multiplier operand$",
    ):
        ExactMul(["e8m0"], ["fp8_e4m3"])
    with pytest.raises(
        ValueError,
        match=r"^FusedDotAdd with 2 products of formats_a \[bf16\] x "
        r"formats_b \[bf16\] needs a 524-bit fixed-point "
        r"product sum, more than the 128-bit limit; use "
        r"n_products=1 for these formats$",
    ):
        FusedDotAdd(["bf16"], ["bf16"], 2)
    with pytest.raises(ValueError, match=r"formats_a \[fp32, tf32\] x formats_b \[fp32\] needs "):
        FusedDotAdd(["fp32", "tf32"], ["fp32"], 4)
    with pytest.raises(ValueError, match=r"^FusedDotAdd n_products must be at least 1, not 0$"):
        FusedDotAdd(["fp16"], ["fp16"], 0)
    with pytest.raises(TypeError, match=r"^FusedDotAdd n_products must be an integer, not 2.0$"):
        FusedDotAdd(["fp16"], ["fp16"], 2.0)
    with pytest.raises(TypeError, match=r"^FusedDotAdd scale must be a bool, not 1$"):
        FusedDotAdd(["fp16"], ["fp16"], 1, scale=1)
    with pytest.raises(TypeError, match=r"^AddRound a must be an ExactLayout, not 24$"):
        AddRound(24, ExactLayout(24, range(0, 1)))
    with pytest.raises(ValueError, match=r"^ExactLayout sig_width must be at least 1, not 0$"):
        ExactLayout(0, range(0, 1))
    with pytest.raises(
        ValueError,
        match=r"^ExactLayout exp_range must be a non-empty range with "
        r"step 1",
    ):
        ExactLayout(24, range(0))
    with pytest.raises(TypeError, match=r"^ExactLayout exp_range must be a range, not \(0, 1\)$"):
        ExactLayout(24, (0, 1))
    with pytest.raises(TypeError, match=r"^Unit factory must be callable, not 3$"):
        StreamLanes(3, 2)
    with pytest.raises(ValueError, match=r"^Lane count must be at least 1, not 0$"):
        StreamLanes(Fp32Add, 0)
    with pytest.raises(ValueError, match=r"^XORWOW state must be six 32-bit words"):
        pack_state([1, 2, 3])


def test_fixed_point_windows_of_the_pe_modes():
    f = [get_format(x) for x in FP8]
    assert tuple(fixed_point_window(f, f, 2)) == (-32, 64, 66)  # e5m2 x e5m2 sets both ends
    f = [get_format(x) for x in MX]
    assert tuple(fixed_point_window(f, f, 4)) == (-32, 64, 67)
    f = [get_format("fp16")]
    assert tuple(fixed_point_window(f, f, 2)) == (-48, 80, 82)
    # The unit of every mode of the mode table elaborates (constructor-level), with its latency.
    for mode in MODES:
        dut = FusedDotAdd.for_mode(mode)
        dut._MustUse__silence = True  # constructed only, never elaborated
        assert dut.latency == (5 if mode.products == 1 else 6)


def test_split_plans_of_the_pe_modes():
    """The split sum's plan for the windows wider than 64-bit words (hdl/fp/split_sum.py):
    the all-mode PE's (lane 0's 48-bit FP32 product), the fp8 and mx families' (an FP8
    product), and a window two limbs cannot hold."""
    f = [get_format(x) for x in MX]
    plan = split_plan(fixed_point_window(f, f, 4), out_min=48)
    assert (plan.lsb, plan.lo, plan.hi, plan.out, plan.wide) == (-33, 35, 35, 48, 35)
    assert (plan.width, plan.cut, plan.top) == (70, 21, 68)
    # The bounds the proof needs: 2 out >= width + 24, out >= 27, 26 <= wide < out.
    for window in (fixed_point_window(f, f, 4), fixed_point_window(f[:2], f[:2], 2)):
        p = split_plan(window, out_min=10)
        assert 2 * p.out >= p.width + 24 and p.out >= 27 and 26 <= p.wide < p.out
        assert max(p.lo, p.hi) + 24 <= 64 and 0 < p.cut < p.lo
    with pytest.raises(ValueError, match="does not split"):
        split_plan(fixed_point_window([get_format("fp16")], [get_format("fp32")], 4), out_min=48)


def test_shift_left_and_right_sticky_without_wide_words():
    """``bits.shift_left`` (a left shift cut to its word) and ``shift_right_sticky`` against
    Python for every amount, on words that take the stepped path and the plain one."""
    rng = np.random.default_rng(5)
    m = Module()
    cases = []
    for n, amt_bits in ((48, 6), (52, 6), (60, 3), (13, 5)):
        value, amount = Signal(n), Signal(amt_bits)
        shl = shift_left(m, value, amount, name=f"shl{n}")
        shr, sticky = shift_right_sticky(m, value, amount, name=f"shr{n}")
        cases.append((n, amt_bits, value, amount, shl, shr, sticky))

    async def bench(ctx):
        for n, amt_bits, value, amount, shl, shr, sticky in cases:
            values = [0, 1, (1 << n) - 1, *(int(v) for v in rng.integers(0, 1 << n, 12))]
            for v in values:
                for a in range(1 << amt_bits):
                    ctx.set(value, v)
                    ctx.set(amount, a)
                    assert ctx.get(shl) == (v << a) & ((1 << n) - 1), (n, v, a)
                    assert ctx.get(shr) == v >> a, (n, v, a)
                    assert ctx.get(sticky) == int(v & ((1 << min(a, n)) - 1) != 0), (n, v, a)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


# -- Unpack -------------------------------------------------------------------------------------


def test_unpack_narrow_formats_exhaustive():
    """Every code of every format of at most 8 bits, through one runtime-selected decoder."""
    names = ["fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "fp8_e3m4", "fp4_e2m1fn", "e8m0"]
    dut = Unpack(names)
    rows, want = [], []
    for idx, name in enumerate(names):
        f = get_format(name)
        codes = np.arange(1 << f.bits)
        rows += [{"i_bits": int(c), "i_fmt": idx} for c in codes]
        want.append((name, codes, decode_fields(codes, f)))
    got = simulate(
        dut,
        rows,
        (
            "o_value.sign",
            "o_value.exp",
            "o_value.sig",
            "o_value.zero",
            "o_value.inf",
            "o_value.nan",
        ),
    )
    _check_unpack(got, want)


def test_unpack_wide_formats():
    rng = np.random.default_rng(1)
    names = ["fp32", "tf32", "bf16", "fp16"]
    dut = Unpack(names)
    rows, want = [], []
    for idx, name in enumerate(names):
        f = get_format(name)
        codes = np.concatenate(
            [
                corner_codes(name),
                FP32_CORNERS & ((1 << f.bits) - 1),
                rng.integers(0, 1 << f.container_bits, 600, dtype=np.uint64).astype(np.int64),
            ]
        )
        rows += [{"i_bits": int(c), "i_fmt": idx} for c in codes]
        want.append((name, codes, decode_fields(codes, f)))
    got = simulate(
        dut,
        rows,
        (
            "o_value.sign",
            "o_value.exp",
            "o_value.sig",
            "o_value.zero",
            "o_value.inf",
            "o_value.nan",
        ),
    )
    _check_unpack(got, want)


def test_unpack_out_of_range_select_decodes_as_first_format():
    dut = Unpack(["fp16", "bf16", "fp8_e5m2"])  # i_fmt is 2 bits: index 3 is unused
    got = simulate(
        dut,
        [{"i_bits": 0x3C00, "i_fmt": 3}, {"i_bits": 0x3C00, "i_fmt": 0}],
        ("o_value.exp", "o_value.sig"),
    )
    assert (
        got["o_value.exp"].tolist() == [-10, -10] and got["o_value.sig"].tolist() == [1 << 10] * 2
    )


def test_unpack_single_format_and_tf32_payload():
    dut = Unpack(["tf32"])
    assert "i_fmt" not in dut.signature.members
    codes = [0x7F801FFF, 0x7F802000, 0x3F801FFF, 0x00001FFF, 0x80001FFF]
    got = simulate(
        dut,
        [{"i_bits": c} for c in codes],
        ("o_value.sign", "o_value.sig", "o_value.zero", "o_value.inf", "o_value.nan"),
    )
    # A payload only in the ignored bits reads as Inf; the others lose their low bits.
    assert got["o_value.inf"].tolist() == [1, 0, 0, 0, 0]
    assert got["o_value.nan"].tolist() == [0, 1, 0, 0, 0]
    assert got["o_value.zero"].tolist() == [0, 0, 0, 1, 1]
    assert got["o_value.sig"][2] == 1 << 23 and got["o_value.sign"][4] == 1


def _check_unpack(got, want):
    start = 0
    for name, codes, (value, sign, sig, exp, kind) in want:
        sl = slice(start, start + len(codes))
        start += len(codes)
        finite = kind == 0
        what = f"Unpack {name}"
        assert_bits_equal(got["o_value.nan"][sl], kind == 2, what + " nan", (codes,))
        assert_bits_equal(got["o_value.inf"][sl], kind == 1, what + " inf", (codes,))
        assert_bits_equal(got["o_value.zero"][sl], finite & (sig == 0), what + " zero", (codes,))
        assert_bits_equal(got["o_value.sig"][sl], np.where(finite, sig, 0), what + " sig", (codes,))
        assert_bits_equal(
            np.where(finite, got["o_value.exp"][sl], 0),
            np.where(finite, exp, 0),
            what + " exp",
            (codes,),
        )
        assert_bits_equal(got["o_value.sign"][sl], sign, what + " sign", (codes,))


# -- ExactMul -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "formats_a,formats_b,n",
    [
        (FP8 + ["fp8_e3m4"], FP8 + ["fp8_e3m4"], 2500),
        (MX, ["fp4_e2m1fn", "fp8_e5m2"], 800),
        (["fp32", "tf32"], ["fp32"], 1200),
        (["bf16", "fp16"], ["fp16", "bf16"], 1000),
    ],
)
def test_exact_mul(formats_a, formats_b, n):
    rng = np.random.default_rng(len(formats_a) * 7 + n)
    dut = ExactMul(formats_a, formats_b)
    ia = rng.integers(0, len(formats_a), n)
    ib = rng.integers(0, len(formats_b), n)
    a = np.array([int(random_codes(rng, formats_a[i], 1, 0.1)[0]) for i in ia])
    b = np.array([int(random_codes(rng, formats_b[i], 1, 0.1)[0]) for i in ib])
    # Corner pairs of the first format pair.
    ca, cb = corner_codes(formats_a[0]), corner_codes(formats_b[0])
    pa, pb = (x.reshape(-1) for x in np.meshgrid(ca, cb, indexing="ij"))
    a, b = np.concatenate([pa, a]), np.concatenate([pb, b])
    ia = np.concatenate([np.zeros(len(pa), int), ia])
    ib = np.concatenate([np.zeros(len(pa), int), ib])
    rows = [
        {"i_a": int(x), "i_b": int(y), "i_fmt_a": int(i), "i_fmt_b": int(j)}
        for x, y, i, j in zip(a, b, ia, ib)
    ]
    got = simulate(
        dut,
        rows,
        (
            "o_product.sign",
            "o_product.exp",
            "o_product.sig",
            "o_product.zero",
            "o_product.inf",
            "o_product.nan",
        ),
    )
    for x, y in itertools.product(range(len(formats_a)), range(len(formats_b))):
        sel = (ia == x) & (ib == y)
        if not sel.any():
            continue
        va, sa, ma, ea, ka = decode_fields(a[sel], formats_a[x])
        vb, sb, mb, eb, kb = decode_fields(b[sel], formats_b[y])
        with np.errstate(invalid="ignore"):
            prod = va * vb
        what = f"ExactMul {formats_a[x]} x {formats_b[y]}"
        finite = np.isfinite(prod)
        assert_bits_equal(
            got["o_product.nan"][sel], np.isnan(prod), what + " nan", (a[sel], b[sel])
        )
        assert_bits_equal(
            got["o_product.inf"][sel], np.isinf(prod), what + " inf", (a[sel], b[sel])
        )
        assert_bits_equal(got["o_product.zero"][sel], prod == 0, what + " zero", (a[sel], b[sel]))
        assert_bits_equal(got["o_product.sign"][sel], sa ^ sb, what + " sign", (a[sel], b[sel]))
        sig = np.where(finite, got["o_product.sig"][sel], 0)
        assert_bits_equal(sig, np.where(finite, ma * mb, 0), what + " sig", (a[sel], b[sel]))
        nz = finite & (prod != 0)
        assert_bits_equal(
            np.where(nz, got["o_product.exp"][sel], 0),
            np.where(nz, ea + eb, 0),
            what + " exp",
            (a[sel], b[sel]),
        )


# -- FusedDotAdd --------------------------------------------------------------------------------


def _psums_for(rng, case, n):
    """Psums that interact with the products: random, near-cancelling, a few binades away."""
    psum0 = np.zeros(n, dtype=np.int64)
    dut = case.dut
    a = np.array(case.a[-n:], dtype=np.int64)
    b = np.array(case.b[-n:], dtype=np.int64)
    ia, ib = np.array(case.ia[-n:]), np.array(case.ib[-n:])
    se = np.array(case.se[-n:], dtype=np.int64)
    s = np.zeros(n, dtype=np.int64)
    for x, y in itertools.product(range(len(dut.formats_a)), range(len(dut.formats_b))):
        sel = (ia == x) & (ib == y)
        if sel.any():
            s[sel] = golden_dot_add(
                psum0[sel],
                a[sel],
                b[sel],
                dut.formats_a[x].name,
                dut.formats_b[y].name,
                se[sel] if dut.scale else None,
            )
    cancel = ((s ^ 0x80000000) + rng.integers(-3, 4, n)) & 0xFFFFFFFF
    near = (s + (rng.integers(-26, 27, n) << 23)) & 0xFFFFFFFF
    near ^= np.where(rng.random(n) < 0.5, 0x80000000, 0)
    rand = random_codes(rng, "fp32", n)
    pick = rng.integers(0, 3, n)
    out = np.where(pick == 0, rand, np.where(pick == 1, cancel, near))
    special = ((out >> 23) & 0xFF) == 0xFF
    return np.where(special & (rng.random(n) > 0.05), rand, out)


def _random_block(rng, case, n, scale_values=None):
    dut = case.dut
    for _ in range(n):
        ia = int(rng.integers(0, len(dut.formats_a)))
        ib = int(rng.integers(0, len(dut.formats_b)))
        a = random_codes(rng, dut.formats_a[ia], case.k)
        b = random_codes(rng, dut.formats_b[ib], case.k)
        se = int(rng.integers(-254, 255)) if dut.scale else 0
        if scale_values is not None and rng.random() < 0.3:
            se = int(rng.choice(scale_values))
        case.add(0, a, b, ia, ib, se, int(dut.scale and rng.random() < 0.01))
    psums = _psums_for(rng, case, n)
    for j in range(n):
        case.psum[len(case.psum) - n + j] = int(psums[j])


def _corner_block(rng, case):
    """Corner operand pairs in product 0 (others random), against the FP32 corner psums."""
    dut = case.dut
    for x, y in itertools.product(range(len(dut.formats_a)), range(len(dut.formats_b))):
        ca, cb = corner_codes(dut.formats_a[x].name), corner_codes(dut.formats_b[y].name)
        if len(dut.formats_a) * len(dut.formats_b) > 4 or len(ca) * len(cb) > 400:
            ca = rng.choice(ca, min(len(ca), 12), replace=False)
            cb = rng.choice(cb, min(len(cb), 12), replace=False)
        for i, (p, q) in enumerate(itertools.product(ca, cb)):
            a = list(random_codes(rng, dut.formats_a[x].name, case.k))
            b = list(random_codes(rng, dut.formats_b[y].name, case.k))
            a[0], b[0] = int(p), int(q)
            if rng.random() < 0.5:  # often make the other products vanish
                b[1:] = [0] * (case.k - 1)
            se = int(rng.choice([-254, -140, -60, 0, 60, 140, 254])) if dut.scale else 0
            case.add(int(FP32_CORNERS[i % len(FP32_CORNERS)]), a, b, x, y, se)


#: Random vectors per configuration of the mode table's modes.
MODE_VECTORS = {
    "fp32": 1200,
    "tf32": 500,
    "bf16": 800,
    "fp16": 800,
    "fp8": 600,
    "double_row": 800,
    "mx": 800,
}

#: Every PE mode (the mode table), plus configurations the unit allows beyond the modes.
DOT_ADD_CONFIGS = {
    **{
        m.name: (list(m.formats_s), list(m.formats_m), m.products, m.scale, MODE_VECTORS[m.name])
        for m in MODES
    },
    "tf32xfp32": (["tf32"], ["tf32", "fp32"], 1, False, 500),
    "fp16x2": (["fp16"], ["fp16"], 2, False, 300),
}


@pytest.mark.long
@pytest.mark.parametrize("mode", list(DOT_ADD_CONFIGS))
def test_dot_add_corners_and_random(mode):
    fa, fb, k, scale, n = DOT_ADD_CONFIGS[mode]
    rng = np.random.default_rng(sum(map(ord, mode)))
    case = DotAddCase(FusedDotAdd(fa, fb, k, scale=scale))
    _corner_block(rng, case)
    _random_block(rng, case, n, scale_values=[-512, -254, -200, 200, 254, 511])
    case.run(f"FusedDotAdd {mode}")


def test_fma_fp32_hand_computed():
    """Directed FMA cases with hand-computed results (checks the golden as well)."""
    case = DotAddCase(FusedDotAdd(["fp32"], ["fp32"], 1))
    p = lambda x: int(f32([x])[0])
    vectors = [
        # psum, a, b, expected
        (1.0, 2.0**-12, 2.0**-12, 0x3F800000),  # 1 + 2^-24: tie -> even (down)
        (p(1.0) + 1, 2.0**-12, 2.0**-12, 0x3F800002),  # odd + half ulp: tie -> up
        (1.0, 2.0**-12 * (1 + 2.0**-23), 2.0**-12, 0x3F800001),  # just above the tie
        (1.0, -(2.0**-13), 2.0**-12, 0x3F800000),  # 1 - 2^-25: tie -> even (1.0)
        (1.0, -(2.0**-13) * (1 + 2.0**-23), 2.0**-12, 0x3F7FFFFF),
        (1.0, -(2.0**-75), 2.0**-75, 0x3F800000),  # huge gap, sticky only
        (1.5, -1.5, 1.0, 0x00000000),  # exact cancellation: +0
        (-0.0, -0.0, 1.0, 0x80000000),  # -0 + -0 = -0
        (-0.0, 0.0, 1.0, 0x00000000),  # -0 + +0 = +0
        (0.0, -0.0, 1.0, 0x00000000),
        (-0.0, -1.0, 0.0, 0x80000000),  # (-1)(+0) = -0
        (-0.0, -1.0, -0.0, 0x00000000),  # (-1)(-0) = +0
        (0.0, 2.0**-75, 2.0**-75, 0x00000000),  # 2^-150: tie -> 0
        (0.0, 1.5 * 2.0**-75, 2.0**-75, 0x00000001),  # -> min subnormal
        (0.0, -(2.0**-75), 2.0**-75, 0x80000000),  # rounds to -0, keeps sign
        (0.0, -(2.0**-100), 2.0**-100, 0x80000000),
        (2.0**-149, -(2.0**-75), 2.0**-75, 0x00000000),  # 2^-150 left: tie -> +0
        (-(2.0**-149), 2.0**-75, 2.0**-75, 0x80000000),
        (
            p(np.float32(2.0**-126) - np.float32(2.0**-149)),
            2.0**-75,
            2.0**-74,
            0x00800000,
        ),  # max subnormal + lsb -> normal
        (np.float32(3.4028234663852886e38), 2.0**52, 2.0**51, 0x7F800000),  # max + half ulp
        (np.float32(3.4028234663852886e38), 2.0**52 * (1 - 2.0**-24), 2.0**51, 0x7F7FFFFF),
        (0.0, 2.0**127, 2.0**127, 0x7F800000),  # product beyond FP32: Inf
        (np.float32(-3.4028234663852886e38), 2.0**127, 2.0**1, 0x73800000),  # 2^128 - max
        (0.0, -(2.0**127), 2.0**127, 0xFF800000),
        (np.inf, -1.0, np.inf, 0x7FC00000),  # Inf - Inf
        (np.inf, 0.0, np.inf, 0x7FC00000),  # Inf * 0
        (np.inf, 1.0, 1.0, 0x7F800000),
        (-np.inf, 2.0**127, 2.0**127, 0xFF800000),  # finite product is no Inf
        (1.0, np.nan, 1.0, 0x7FC00000),
    ]
    for psum, a, b, _ in vectors:
        psum_bits = psum if isinstance(psum, int) else p(psum)
        case.add(psum_bits, [p(a)], [p(b)])
    case.add(0x7F800001, [p(1.0)], [p(1.0)])  # signalling NaN psum
    case.add(0xFFC00001, [p(1.0)], [p(1.0)])  # negative NaN with payload
    got, want = case.run("FMA fp32 directed")
    expected = [v[3] for v in vectors] + [0x7FC00000, 0x7FC00000]
    assert_bits_equal(want, expected, "golden vs hand-computed")


def test_dot_add_scaled_and_multi_product_directed():
    """Directed MX / double-row cases: scale extremes, NaN scale, cancellation, Inf mixes."""
    mx = DotAddCase(FusedDotAdd(MX, MX, 4, scale=True))
    e4 = lambda v: int(bits_of("fp8_e4m3fn", [v])[0])
    e5 = lambda v: int(bits_of("fp8_e5m2", [v])[0])
    one, mone, zero, mzero = e4(1.0), e4(-1.0), e4(0.0), e4(-0.0)
    p = lambda x: int(f32([x])[0])
    mx.add(p(-0.0), [one, mone, zero, zero], [one, one, one, one])  # cancel -> +0
    mx.add(p(-0.0), [mzero, zero, mzero, mzero], [one, mone, one, one])  # all -0 -> -0
    mx.add(p(-0.0), [mzero, mzero, mzero, zero], [one, one, one, one])  # one +0 -> +0
    mx.add(p(1.0), [one] * 4, [one] * 4, 0, 0, 254)  # 4 * 2^254: Inf
    mx.add(p(1.0), [e5(57344.0)] * 4, [e5(57344.0)] * 4, 1, 1, -254)  # tiny sticky
    mx.add(p(0.0), [e5(2.0**-16)] * 4, [e5(2.0**-16)] * 4, 1, 1, -254)  # -> +0
    mx.add(p(0.0), [e5(-(2.0**-16))] + [zero] * 3, [e5(2.0**-16)] * 4, 1, 1, -130)  # -0
    mx.add(p(0.0), [one] + [zero] * 3, [one] * 4, 0, 0, -150)  # 2^-150: tie -> 0
    mx.add(p(0.0), [one] + [zero] * 3, [one] * 4, 0, 0, -149)  # min subnormal
    mx.add(p(1.0), [one] * 4, [one] * 4, 0, 0, 511)  # port extremes
    mx.add(p(1.0), [one] * 4, [one] * 4, 0, 0, -512)
    mx.add(p(1.0), [one] * 4, [one] * 4, 0, 0, 0, snan=1)  # NaN scale
    mx.add(p(1.0), [e4(448.0), e4(-448.0), one, one], [e4(448.0), e4(448.0), one, one], 0, 0, 3)
    mx.add(p(np.inf), [one] * 4, [one] * 4, 0, 0, 254)  # Inf + big
    mx.add(p(-np.inf), [one] * 4, [one] * 4, 0, 0, 254)  # finite, no NaN
    mx.add(p(1.0), [0x7F, one, one, one], [one] * 4)  # e4m3fn NaN
    mx.add(p(1.0), [e5(np.inf), e5(-np.inf), one, one], [one] * 4, 1, 0)  # +Inf - Inf
    mx.add(p(1.0), [e5(np.inf), e5(np.inf), one, one], [one, one, one, one], 1, 0)
    mx.add(p(1.0), [e5(np.inf), zero, one, one], [zero, one, one, one], 1, 0)  # Inf * 0
    mx.add(p(-np.inf), [e5(np.inf), zero, one, one], [one, one, one, one], 1, 0)
    got, want = mx.run("MX directed")
    assert got.tolist() == [
        0,
        0x80000000,
        0,
        0x7F800000,
        0x3F800000,
        0,
        0x80000000,
        0,
        1,
        0x7F800000,
        0x3F800000,
        0x7FC00000,
        0x41880000,
        0x7F800000,
        0xFF800000,
        0x7FC00000,
        0x7FC00000,
        0x7F800000,
        0x7FC00000,
        0x7FC00000,
    ]

    dr = DotAddCase(FusedDotAdd(FP8, FP8, 2))
    e43 = lambda v: int(bits_of("fp8_e4m3", [v])[0])
    # 1 + 2^-24 + 2^-32 (e5m2 min subnormal squared): tie broken by a far-away sticky.
    t = e5(2.0**-12)
    dr.add(p(1.0), [t, e5(2.0**-16)], [t, e5(2.0**-16)], 2, 2)
    dr.add(p(1.0), [t, e5(-(2.0**-16))], [t, e5(2.0**-16)], 2, 2)
    dr.add(p(-0.0), [e43(240.0), e43(-240.0)], [e43(1.0), e43(1.0)], 0, 0)
    dr.add(p(1.0), [0x78, 0xF8], [e43(1.0), e43(1.0)], 0, 0)  # e4m3 +Inf - Inf
    dr.add(p(1.0), [0x78, e43(1.0)], [e43(1.0), e43(1.0)], 0, 0)  # e4m3 Inf
    dr.add(p(1.0), [0x78, e43(1.0)], [0x7E, e43(1.0)], 0, 1)  # Inf x 448 (fn)
    got, want = dr.run("double-row directed")
    assert got.tolist()[:6] == [0x3F800001, 0x3F800000, 0, 0x7FC00000, 0x7F800000, 0x7F800000]


# -- Fp32Add and AddRound -----------------------------------------------------------------------


def test_fp32_add():
    rng = np.random.default_rng(3)
    pa, pb = (x.reshape(-1) for x in np.meshgrid(FP32_CORNERS, FP32_CORNERS, indexing="ij"))
    n = 2500
    a = random_codes(rng, "fp32", n)
    b = random_codes(rng, "fp32", n)
    near = rng.random(n) < 0.4  # same binade +- a few, both signs: cancellation
    b = (
        np.where(
            near,
            (a & 0xFF800000) ^ (rng.integers(0, 2, n) << 31) ^ (rng.integers(-2, 3, n) << 23)
            | (b & 0x7FFFFF),
            b,
        )
        & 0xFFFFFFFF
    )
    a, b = np.concatenate([pa, a]), np.concatenate([pb, b])
    got = simulate(Fp32Add(), [{"i_a": int(x), "i_b": int(y)} for x, y in zip(a, b)])
    want = fp32_add(
        a.astype(np.uint32).view(np.float32), b.astype(np.uint32).view(np.float32)
    ).view(np.uint32)
    assert_bits_equal(got["o_result"], want, "Fp32Add", (a, b))
    # Independent check of the golden on the finite cases: numpy's float32 addition.
    with np.errstate(all="ignore"):
        npsum = a.astype(np.uint32).view(np.float32) + b.astype(np.uint32).view(np.float32)
    ok = np.isfinite(npsum) | np.isinf(npsum)
    assert_bits_equal(want[ok], npsum.view(np.uint32)[ok], "golden fp32_add vs numpy")


def test_add_round_wide_unnormalized_operands():
    """AddRound with an unnormalized 40-bit operand B over a wide exponent range."""
    rng = np.random.default_rng(9)
    dut = AddRound(ExactLayout(24, range(-149, 106)), ExactLayout(40, range(-400, 301)))
    n = 1500
    a = random_codes(rng, "fp32", n)
    va, sa, ma, ea, ka = decode_fields(a, "fp32")
    sig_b = rng.integers(0, 1 << 40, n, dtype=np.uint64).astype(np.int64) >> rng.integers(0, 40, n)
    exp_b = np.where(rng.random(n) < 0.5, ea + rng.integers(-60, 30, n), rng.integers(-400, 301, n))
    exp_b = np.clip(exp_b, -400, 300)
    sign_b = rng.integers(0, 2, n)
    rows = [
        {
            "i_a.sign": int(sa[i]),
            "i_a.exp": int(ea[i]),
            "i_a.sig": int(ma[i]),
            "i_a.inf": int(ka[i] == 1),
            "i_a.nan": int(ka[i] == 2),
            "i_b.sign": int(sign_b[i]),
            "i_b.exp": int(exp_b[i]),
            "i_b.sig": int(sig_b[i]),
        }
        for i in range(n)
    ]
    got = simulate(dut, rows)["o_result"]
    # The golden: psum + (sig_b * 2**(exp_b - k)) * 2**k with an exact float64 product.
    from ncrtl.model.fp.ops import exact_sum_round

    hi = (sig_b >> 20).astype(np.float64)
    lo = (sig_b & 0xFFFFF).astype(np.float64)
    sgn = np.where(sign_b == 1, -1.0, 1.0)
    t1 = sgn * np.ldexp(hi, (exp_b + 20).astype(np.int32))
    t2 = sgn * np.ldexp(lo, exp_b.astype(np.int32))
    ok = (exp_b >= -1000) & (exp_b + 60 < 1000)
    psum = a.astype(np.uint32).view(np.float32).astype(np.float64)
    want = exact_sum_round([psum, t1, t2], "fp32").astype(np.int64)
    # A zero operand B carries its sign: -0 only when both the parts are -0.
    zero_b = sig_b == 0
    neg0 = zero_b & (sign_b == 1) & (a == 0x80000000)
    want = np.where(neg0, 0x80000000, want)
    assert_bits_equal(got[ok], want[ok], "AddRound wide", (a, sig_b, exp_b, sign_b))


# -- converters ---------------------------------------------------------------------------------


def test_fp32_to_bf16_rne_and_sr():
    rng = np.random.default_rng(4)
    n = 3000
    x = np.concatenate(
        [FP32_CORNERS, rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.int64)]
    )
    # Ties and near-ties of the BF16 rounding: low halves 0x8000 / 0x7FFF / 0x8001.
    ties = (rng.integers(0, 1 << 16, 300) << 16) | rng.choice([0x8000, 0x7FFF, 0x8001], 300)
    x = np.concatenate([x, ties, [0x7F7F8000, 0x7F7FFFFF, 0xFF7F8000, 0x00008000, 0x00018000]])
    r = rng.integers(0, 1 << 16, len(x))
    r[:40] = 0xFFFF
    mode = rng.integers(0, 2, len(x))
    got = simulate(
        Fp32ToBf16(),
        [{"i_value": int(v), "i_mode": int(m), "i_rand": int(q)} for v, m, q in zip(x, mode, r)],
    )["o_result"]
    xf = x.astype(np.uint32).view(np.float32)
    rne = fp32_to_bf16(xf, "rne").view(np.uint16).astype(np.int64)
    sr = fp32_to_bf16(xf, "sr", r).view(np.uint16).astype(np.int64)
    assert_bits_equal(got, np.where(mode == Bf16Rounding.SR, sr, rne), "Fp32ToBf16", (x, mode, r))
    # Golden RNE vs ml_dtypes on non-NaN inputs.
    nn = ~np.isnan(xf)
    assert_bits_equal(
        rne[nn], xf[nn].astype(ml_dtypes.bfloat16).view(np.uint16), "golden bf16 vs ml_dtypes"
    )


def test_fp32_to_fp16():
    rng = np.random.default_rng(5)
    n = 3000
    x = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.int64)
    # Most inputs around the FP16 range (subnormals 2^-24.. and overflow 2^16).
    band = (x & 0x807FFFFF) | (rng.integers(127 - 28, 127 + 18, n) << 23)
    x = np.where(rng.random(n) < 0.8, band, x)
    edges = f32(
        [
            65504.0,
            65519.99,
            65520.0,
            -65520.0,
            2.0**-24,
            2.0**-25,
            1.5 * 2.0**-25,
            2.0**-25 * (1 + 2.0**-23),
            -(2.0**-26),
            2.0**-14 - 2.0**-25,
            6.0e-8,
            1.0 + 2.0**-11,
            1.0 + 3 * 2.0**-11,
        ]
    )
    x = np.concatenate([FP32_CORNERS, edges, x])
    got = simulate(Fp32ToFp16(), [{"i_value": int(v)} for v in x])["o_result"]
    xf = x.astype(np.uint32).view(np.float32)
    want = fp32_to_fp16(xf).view(np.uint16).astype(np.int64)
    assert_bits_equal(got, want, "Fp32ToFp16", (x,))
    nn = ~np.isnan(xf)
    with np.errstate(over="ignore"):
        ref = xf[nn].astype(np.float16)
    assert_bits_equal(want[nn], ref.view(np.uint16), "golden fp16 vs numpy")


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "fp8_e3m4", "fp16"])
def test_fp32_to_float_is_the_golden_conversion(fmt):
    """FP32 -> each narrower format ``tensor_copy`` writes: bit for bit the golden's
    conversion (``ncrtl.model.kernel.golden.convert``: one rounding to nearest even), on values
    around the format's range (subnormals, the largest finite and just past it, ties), zeros,
    infinities and NaNs."""
    from ncrtl.model.fp import get_format
    from ncrtl.model.kernel.golden import convert as golden

    f = get_format(fmt)
    rng = np.random.default_rng(len(fmt))
    n = 1500
    x = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.int64)
    # Most inputs from below the smallest subnormal to past the largest finite value.
    lo = int(np.log2(f.smallest_subnormal)) - 3
    hi = int(np.log2(f.max_finite)) + 3
    band = (x & 0x807FFFFF) | (rng.integers(127 + lo, 127 + hi, n) << 23)
    x = np.where(rng.random(n) < 0.85, band, x)
    m = float(f.max_finite)
    ulp = 2.0 ** (np.floor(np.log2(m)) - f.man_bits)
    edges = f32(
        [
            m,
            -m,
            m + ulp / 2,
            m + ulp / 2 * 0.999,
            m + ulp,
            f.smallest_subnormal,
            f.smallest_subnormal / 2,
            f.smallest_subnormal * 0.51,
            1.0 + 2.0 ** -(f.man_bits + 1),
        ]
    )
    x = np.concatenate([FP32_CORNERS, edges, x])
    got = simulate(Fp32ToFloat(fmt), [{"i_value": int(v)} for v in x])["o_result"]
    xf = x.astype(np.uint32).view(np.float32)
    want = np.asarray(golden(xf, {"fp16": "float16"}.get(fmt, "float" + fmt[2:])))
    want = want.view(np.uint8 if f.bits == 8 else np.uint16).astype(np.int64)
    assert_bits_equal(got, want, f"Fp32ToFloat({fmt})", (x,))
    with pytest.raises(ValueError, match="converts to one of"):
        Fp32ToFloat("bf16")


def test_converter_holds_when_disabled():
    dut = Fp32ToFp16()

    async def bench(ctx):
        ctx.set(dut.i_value, 0x3F800000)
        await ctx.tick()
        assert ctx.get(dut.o_result) == 0x3C00
        ctx.set(dut.en, 0)
        ctx.set(dut.i_value, 0x40000000)
        await ctx.tick()
        assert ctx.get(dut.o_result) == 0x3C00  # frozen
        ctx.set(dut.en, 1)
        await ctx.tick()
        assert ctx.get(dut.o_result) == 0x4000

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


# -- XORWOW -------------------------------------------------------------------------------------


def test_xorwow_matches_model():
    dut = Xorwow()
    seeds = [0, 1, 0x0123456789ABCDEF, (1 << 64) - 1]
    rows, want = [], []
    # Out of reset: Marsaglia's published state.
    rows += [{"i_next": 1}] * 5
    want += marsaglia_xorwow(XORWOW_INIT, 5)
    for s in seeds:
        st = pack_state(ModelXorwow.seed_state(s))
        m = ModelXorwow(s)
        ref = [int(m.next_u32()) for _ in range(40)]
        # Load and step in one cycle, then steps with idle cycles in between.
        rows.append({"i_state": st, "i_load": 1, "i_next": 1})
        want.append(ref[0])
        for k in range(1, 40):
            if k % 7 == 0:
                rows.append({"i_next": 0})
                want.append(ref[k - 1])
            rows.append({"i_next": 1})
            want.append(ref[k])
        # Load alone: v + d of the loaded words; the next step gives the first output.
        rows.append({"i_state": st, "i_load": 1})
        words = ModelXorwow.seed_state(s)
        want.append((words[4] + words[5]) & 0xFFFFFFFF)
        rows.append({"i_next": 1})
        want.append(ref[0])
    got = simulate(dut, rows, ("o_value",))["o_value"]
    assert_bits_equal(got, want, "Xorwow")
    m = ModelXorwow(7)
    assert int(m.next_u16()) == marsaglia_xorwow(ModelXorwow.seed_state(7), 1)[0] >> 16


# -- StreamLanes --------------------------------------------------------------------------------


def _stream_run(top, beats, rng, p_valid=0.7, p_ready=0.6, max_cycles=5000):
    """Drive a StreamLanes top with random input valid / output ready; return the output
    payloads."""
    got = []

    async def bench(ctx):
        pending = list(beats)
        cycles = 0
        while len(got) < len(beats):
            cycles += 1
            assert cycles < max_cycles, "stream stalled"
            offer = bool(pending) and rng.random() < p_valid
            ctx.set(top.i_stream.valid, int(offer))
            ctx.set(top.i_stream.payload, pending[0] if offer else int(rng.integers(0, 1 << 30)))
            ready = rng.random() < p_ready
            ctx.set(top.o_stream.ready, int(ready))
            _, _, i_ready, o_valid, o_data = await ctx.tick().sample(
                top.i_stream.ready, top.o_stream.valid, top.o_stream.payload
            )
            if offer and i_ready:
                pending.pop(0)
            if o_valid and ready:
                got.append(o_data)

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


def test_stream_lanes_backpressure_fp32_add():
    rng = np.random.default_rng(11)
    top = StreamLanes(Fp32Add, 3)
    assert top.in_fields == [("i_a", 32), ("i_b", 32)] and top.out_fields == [("o_result", 32)]
    assert top.latency == Fp32Add.latency and top.in_lane_width == 64
    n = 120
    a = random_codes(rng, "fp32", 3 * n)
    b = random_codes(rng, "fp32", 3 * n)
    beats = [
        top.pack_inputs([{"i_a": a[3 * j + i], "i_b": b[3 * j + i]} for i in range(3)])
        for j in range(n)
    ]
    out = _stream_run(top, beats, rng)
    assert len(out) == n
    got = np.array([lane["o_result"] for w in out for lane in top.unpack_outputs(w)])
    want = fp32_add(
        a.astype(np.uint32).view(np.float32), b.astype(np.uint32).view(np.float32)
    ).view(np.uint32)
    assert_bits_equal(got, want, "StreamLanes(Fp32Add) under backpressure", (a, b))


def test_stream_lanes_mx_layout_and_stream():
    rng = np.random.default_rng(12)
    top = StreamLanes(lambda: FusedDotAdd(MX, MX, 4, scale=True), 2)
    assert top.in_fields == [
        ("i_psum", 32),
        ("i_a", 32),
        ("i_b", 32),
        ("i_fmt_a", 2),
        ("i_fmt_b", 2),
        ("i_scale_exp", 10),
        ("i_scale_nan", 1),
    ]
    assert top.out_fields == [("o_result", 32)]
    assert len(top.i_stream.payload) == 2 * 111 and len(top.o_stream.payload) == 64
    word = top.pack_inputs([{"i_psum": 1, "i_scale_exp": -1}, {"i_psum": 2, "i_fmt_b": 3}])
    assert word & 0xFFFFFFFF == 1 and (word >> 100) & 0x3FF == 0x3FF
    assert (word >> 111) & 0xFFFFFFFF == 2 and (word >> (111 + 98)) & 3 == 3
    # A short stream with stalls, both lanes.
    n = 40
    rows = []
    for j in range(2 * n):
        ia, ib = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        a = random_codes(rng, MX[ia], 4)
        b = random_codes(rng, MX[ib], 4)
        rows.append(
            dict(
                i_psum=int(random_codes(rng, "fp32", 1)[0]),
                i_a=sum(int(x) << (8 * i) for i, x in enumerate(a)),
                i_b=sum(int(x) << (8 * i) for i, x in enumerate(b)),
                i_fmt_a=ia,
                i_fmt_b=ib,
                i_scale_exp=int(rng.integers(-254, 255)),
                i_scale_nan=0,
                a=a,
                b=b,
            )
        )
    beats = [top.pack_inputs(rows[2 * j : 2 * j + 2]) for j in range(n)]
    out = _stream_run(top, beats, rng, p_valid=0.5, p_ready=0.5)
    got = [lane["o_result"] for w in out for lane in top.unpack_outputs(w)]
    for r, g in zip(rows, got):
        want = golden_dot_add(
            [r["i_psum"]],
            [r["a"]],
            [r["b"]],
            MX[r["i_fmt_a"]],
            MX[r["i_fmt_b"]],
            np.array([r["i_scale_exp"]]),
        )[0]
        assert g == want


def test_stream_lanes_combinational_unit():
    """A latency-0 unit gets one output register: the top is clocked like every other."""
    top = StreamLanes(lambda: Unpack(["fp8_e5m2"]), 2)
    assert top.unit_latency == 0 and top.latency == 1
    out_fields = [
        ("o_value.sign", 1),
        ("o_value.exp", 5),
        ("o_value.sig", 3),
        ("o_value.zero", 1),
        ("o_value.inf", 1),
        ("o_value.nan", 1),
    ]
    assert top.out_fields == out_fields

    async def bench(ctx):
        ctx.set(top.i_stream.valid, 1)
        ctx.set(top.o_stream.ready, 0)
        ctx.set(top.i_stream.payload, 0x3C | (0x84 << 8))  # 1.0 and -2^-14
        assert ctx.get(top.i_stream.ready) == 1 and ctx.get(top.o_stream.valid) == 0
        await ctx.tick()
        ctx.set(top.i_stream.payload, 0x7C)  # held off: output ready is 0
        assert ctx.get(top.o_stream.valid) == 1 and ctx.get(top.i_stream.ready) == 0
        await ctx.tick()
        lanes = top.unpack_outputs(ctx.get(top.o_stream.payload))
        value = lambda sign, exp, sig, zero, inf, nan: {  # noqa: E731
            "o_value.sign": sign,
            "o_value.exp": exp,
            "o_value.sig": sig,
            "o_value.zero": zero,
            "o_value.inf": inf,
            "o_value.nan": nan,
        }
        assert lanes[0] == value(0, -2, 4, 0, 0, 0)
        assert lanes[1] == value(1, -16, 4, 0, 0, 0)
        ctx.set(top.o_stream.ready, 1)
        assert ctx.get(top.i_stream.ready) == 1
        await ctx.tick()
        lanes = top.unpack_outputs(ctx.get(top.o_stream.payload))
        assert lanes[0]["o_value.inf"] == 1 and lanes[1]["o_value.zero"] == 1

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_stream_lanes_xorwow_generators():
    rng = np.random.default_rng(13)
    top = StreamLanes(Xorwow, 2)
    seeds = [5, 99]
    load = top.pack_inputs(
        [
            {"i_state": pack_state(ModelXorwow.seed_state(s)), "i_load": 1, "i_next": 1}
            for s in seeds
        ]
    )
    step = top.pack_inputs([{"i_next": 1}] * 2)
    out = _stream_run(top, [load] + [step] * 30, rng)
    got = np.array([[lane["o_value"] for lane in top.unpack_outputs(w)] for w in out])
    want = ModelXorwow(np.array(seeds, dtype=object)).stream_u32(31)
    assert (got == want.astype(np.int64)).all()


def test_stream_lanes_rejects_bad_units():
    class NoEn(wiring.Component):
        latency = 1

        def __init__(self):
            super().__init__({"i_x": In(1), "o_y": Out(1)})

        def elaborate(self, platform):
            m = Module()
            r = Signal()
            m.d.sync += r.eq(self.i_x)
            m.d.comb += self.o_y.eq(r)
            return m

    class BadName(wiring.Component):
        latency = 0

        def __init__(self):
            super().__init__({"x": In(1), "o_y": Out(1)})

        def elaborate(self, platform):
            return Module()

    with pytest.raises(TypeError, match=r"has latency 1 but no 'en' clock enable$"):
        StreamLanes(NoEn, 1)
    with pytest.raises(TypeError, match=r"^Unit port 'x' \(In\) is neither an 'i_\*' input"):
        StreamLanes(BadName, 1)

    class NoLatency(BadName):
        def __init__(self):
            wiring.Component.__init__(self, {"i_x": In(1), "o_y": Out(1)})

    NoLatency.latency = None
    with pytest.raises(TypeError, match=r"must have a non-negative integer latency, not None$"):
        StreamLanes(NoLatency, 1)


# -- generated Verilog: lint and synthesis ------------------------------------------------------

LINT_UNITS = {
    "unpack_all": lambda: Unpack(ALL_OPERANDS + ["e8m0"]),
    "unpack_tf32": lambda: Unpack(["tf32"]),
    "mul_fp8": lambda: ExactMul(FP8, FP8),
    "mul_fp32": lambda: ExactMul(["fp32"], ["fp32"]),
    "dot_add_fp32": lambda: FusedDotAdd(["fp32"], ["fp32"], 1),
    "dot_add_tf32": lambda: FusedDotAdd(["tf32"], ["tf32"], 1),
    "dot_add_bf16": lambda: FusedDotAdd(["bf16"], ["bf16"], 1),
    "dot_add_fp16": lambda: FusedDotAdd(["fp16"], ["fp16"], 1),
    "dot_add_fp8": lambda: FusedDotAdd(FP8 + ["fp8_e3m4"], FP8 + ["fp8_e3m4"], 1),
    "dot_add_double_row": lambda: FusedDotAdd(FP8, FP8, 2),
    "dot_add_mx": lambda: FusedDotAdd(MX, MX, 4, scale=True),
    "fp32_add": Fp32Add,
    "to_bf16": Fp32ToBf16,
    "to_fp16": Fp32ToFp16,
    "to_fp8_e4m3fn": lambda: Fp32ToFloat("fp8_e4m3fn"),
    "to_fp8_e5m2": lambda: Fp32ToFloat("fp8_e5m2"),
    "xorwow": Xorwow,
}


@pytest.mark.synth
@pytest.mark.parametrize("name", list(LINT_UNITS))
def test_verilog_lint_clean_and_latch_free(name):
    top = StreamLanes(LINT_UNITS[name], 2)
    text = convert(top, name)
    lint = lint_verilog(text, name)
    assert lint.ok, lint.log[:4000]
    synth = synth_check(text, name)
    assert synth.ok, synth.log[-4000:]


@pytest.mark.synth
def test_checks_catch_problems():
    # A width truncation is not waived.
    bad = "module t(input [7:0] a, output [3:0] y);\n  assign y = a;\nendmodule\n"
    res = lint_verilog(bad, "t")
    assert not res.ok and "WIDTHTRUNC" in res.log
    with pytest.raises(CheckError, match="verilator check of t failed"):
        res.check()
    # An incomplete combinational assignment is a latch.
    latch = "\n".join(
        [
            "module \\latch",
            "  wire input 1 \\en",
            "  wire input 2 \\d",
            "  wire output 3 \\q",
            "  wire $0\\q",
            "  process $p",
            "    assign $0\\q \\q",
            "    switch \\en",
            "      case 1'1",
            "        assign $0\\q \\d",
            "      case",
            "    end",
            "    sync always",
            "      update \\q $0\\q",
            "  end",
            "end",
        ]
    )
    res = synth_check(latch, "latch")
    assert not res.ok and "Assertion failed" in res.log
    # Verilog passes.
    assert synth_check(convert(Fp32ToBf16(), "bf"), "bf").ok
