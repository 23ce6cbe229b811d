"""cocotb conformance of :class:`ncrtl.hdl.fp.mul.ExactMul`: the exact product of every code pair.

For FP8 and FP4 formats every ``a x b`` code pair is checked (exhaustive); wider formats get
their corner cross product and ``count`` random pairs.  The product must be exact, so the
scoreboard compares the float64 encoding of ``(-1)**sign * sig * 2**exp`` (exactly representable:
at most 48 significand bits) with that of the product of the golden decodings, and the
zero / Inf / NaN flags bit for bit.
"""

import cocotb
import numpy as np

from ncrtl.blocks import get
from ncrtl.model.fp import decode_fields, get_format
from ncrtl.testbench.conformance import tb_settings as settings
from ncrtl.testbench.fp.vectors import corner_codes, exhaustive_pairs, random_codes
from ncrtl.testbench.lanes import LanesTB
from ncrtl.testbench.scoreboard import Scoreboard

CANON_NAN = np.float64(np.nan).view(np.uint64)


def _signed(x, width):
    x = np.asarray(x, dtype=object)
    return np.where(x >= (1 << (width - 1)), x - (1 << width), x)


def golden_product(a, b, fa, fb):
    """``(value bits, flags)`` of the exact products: flags = zero | inf << 1 | nan << 2."""
    va = decode_fields(a, fa)[0]
    vb = decode_fields(b, fb)[0]
    with np.errstate(invalid="ignore"):
        p = va * vb  # exact in float64
    nan = np.isnan(p)
    inf = np.isinf(p)
    zero = p == 0
    bits = np.where(nan, CANON_NAN, p.view(np.uint64))
    return bits, zero.astype(int) | (inf.astype(int) << 1) | (nan.astype(int) << 2)


class MulTB(LanesTB):
    def __init__(self, dut, params, *, stall, seed):
        self.fa, self.fb = get_format(params["fmt_a"]), get_format(params["fmt_b"])
        super().__init__(dut, get("fp.mul").component(params), stall=stall, seed=seed)
        self.exp_width = dict(self.top.out_fields)["o_product.exp"]

    def rtl_product(self, out):
        """The same ``(value bits, flags)`` computed from the unit's output fields."""
        sig = np.array([float(x) for x in out["o_product.sig"]])
        exp = _signed(out["o_product.exp"], self.exp_width).astype(np.int64)
        sign = out["o_product.sign"].astype(np.int64)
        mag = np.ldexp(sig, exp.astype(np.int32))
        v = np.where(sign == 1, -mag, mag)
        inf = out["o_product.inf"].astype(np.int64) == 1
        nan = out["o_product.nan"].astype(np.int64) == 1
        zero = out["o_product.zero"].astype(np.int64) == 1
        v = np.where(inf, np.where(sign == 1, -np.inf, np.inf), v)
        v = np.where(zero, np.where(sign == 1, -0.0, 0.0), v)
        bits = np.where(nan, CANON_NAN, v.view(np.uint64))
        return bits, zero.astype(int) | (inf.astype(int) << 1) | (nan.astype(int) << 2)


@cocotb.test()
async def test_mul(dut):
    """Exhaustive code pairs for 8-bit formats; corners and random pairs otherwise."""
    params, count, seed, stall = settings()
    tb = MulTB(dut, params, stall=stall, seed=seed)
    await tb.reset()
    rng = np.random.default_rng(seed)
    fa, fb = tb.fa, tb.fb
    if fa.bits <= 8 and fb.bits <= 8:
        a, b = exhaustive_pairs(fa, fb)
    else:
        ca, cb = corner_codes(fa), corner_codes(fb)
        a = np.concatenate([np.repeat(ca, len(cb)), random_codes(rng, fa, count)])
        b = np.concatenate([np.tile(cb, len(ca)), random_codes(rng, fb, count)])
    fields = {"i_a": a, "i_b": b}
    out = await tb.run(fields)
    got_v, got_f = tb.rtl_product(out)
    want_v, want_f = golden_product(a, b, fa, fb)
    name = f"mul.{fa.name}x{fb.name}"
    sb = Scoreboard(
        name, "f64 product", bits=64, decode=lambda x: np.asarray(x, np.uint64).view(np.float64)
    )
    sb.compare(got_v, want_v, inputs=(a, b))
    fl = Scoreboard(name + ".flags", "zero|inf<<1|nan<<2", bits=4)
    fl.compare(got_f, want_f, inputs=(a, b))
    for s in (sb, fl):
        s.write_json()
        dut._log.info(s.report())
    tb.record_cycles()
    sb.assert_clean()
    fl.assert_clean()
