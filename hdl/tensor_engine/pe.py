"""The Tensor Engine processing element: one design for every mode.

See docs/tensor_engine.md ("RTL: hdl/tensor_engine") for the datapath, the port list and the
timing.  In short, one PE of the weight-stationary array:

* registers the moving lane word and its tag (``x_reg``) and passes them right;
* holds two stationary banks (one 32-bit lane word each), written by a skewed shift chain from the
  left neighbour during LoadStationary;
* runs a product pipeline of :data:`P_PREFIX` register stages off ``x_reg`` and
  ``bank[tag.bank]``: decode + exact multiply ``|`` product sum / select ``|``;
* adds the product (sum) to ``psum_in`` with ONE combinational, correctly rounded
  :class:`~hdl.fp.add_round.AddRound` and registers the FP32 result as ``psum_out``.

The same PE serves fp32, tf32, bf16, fp16, fp8 (e4m3 / e4m3fn / e5m2 / e3m4, per side), double_row
(two FP8 products fused with the psum) and transpose (raw data movement).
"""

import numpy as np
from amaranth.hdl import Cat, Const, EnableInserter, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.common.bits import bits_for_range
from hdl.fp.add_round import AddRound
from hdl.fp.mul import ExactMul
from hdl.fp.unpack import Unpack
from model.fp import encode, get_format
from model.tensor_engine.isa import FP8_FORMATS, MODE_FORMATS, Mode

__all__ = ["PE", "PE_SIGNATURE", "TAG_LAYOUT", "LS_CTL_LAYOUT", "LANE_WIDTH", "P_PREFIX", "LANE0_FORMATS",
           "FP8_LANE_FORMATS", "SKIP_BITS", "lane0_format_index"]

#: Bits of one lane word (one operand slot of the array).
LANE_WIDTH = 32

#: Register stages of the product pipeline between ``x_reg`` and the psum adder
#: (decode + exact multiply | product sum / select |).  Must equal
#: ``model.tensor_engine.timing.P_PREFIX``.
P_PREFIX = 2

#: Formats of product lane 0 (every operand format), indexed by :func:`lane0_format_index`:
#: the non-FP8 modes by their Mode number, the FP8 formats at ``4 + fmt``.
LANE0_FORMATS = ("fp32", "tf32", "bf16", "fp16") + FP8_FORMATS

#: Formats of the FP8 product lanes 1..3 (double_row uses lane 1; MX will use lanes 1..3 and add
#: fp4_e2m1fn).  Indexed by the fmt field directly.
FP8_LANE_FORMATS = tuple(MODE_FORMATS[Mode.DOUBLE_ROW])

#: Width of the LoadStationary column-tile skip count (column groups to pass through).
SKIP_BITS = 2

#: Tag of a moving beat, LSB first.  ``first_row``: this row starts the psum chain (+0.0).
TAG_LAYOUT = data.StructLayout({
    "valid": 1, "bank": 1, "mode": 3, "fmt_s": 2, "fmt_m": 2, "transpose": 1, "first_row": 1,
})

#: Control of a LoadStationary beat, LSB first.  ``skip`` != 0: the PE passes the beat on without
#: storing it (columns left of a column tile); the array decrements it at column-group borders.
LS_CTL_LAYOUT = data.StructLayout({"valid": 1, "bank": 1, "skip": SKIP_BITS})


#: Ports of the PE (the Verilog module has ``clk`` and ``rst`` too; ``rst`` is unused).
PE_SIGNATURE = wiring.Signature({
    "en": In(1, init=1),
    "i_x": In(LANE_WIDTH), "i_tag": In(TAG_LAYOUT),
    "i_ls": In(LANE_WIDTH), "i_ls_ctl": In(LS_CTL_LAYOUT),
    "i_psum": In(32),
    "o_x": Out(LANE_WIDTH), "o_tag": Out(TAG_LAYOUT),
    "o_ls": Out(LANE_WIDTH), "o_ls_ctl": Out(LS_CTL_LAYOUT),
    "o_psum": Out(32),
})


def lane0_format_index(mode, fmt):
    """Index into :data:`LANE0_FORMATS` of a side with Mode ``mode`` and format field ``fmt``
    (Amaranth values): ``mode`` for fp32 / tf32 / bf16 / fp16, ``4 + fmt`` for the FP8 modes."""
    return Mux(mode[2], Cat(fmt, Const(1, 1)), Cat(mode[:2], Const(0, 1)))


def _one_codes():
    """(code of 1.0, mask of the bits that count) of every lane-0 format."""
    out = []
    for name in LANE0_FORMATS:
        f = get_format(name)
        one = int(np.asarray(encode(np.array([1.0]), f)).astype(np.int64)[0])
        mask = ((1 << f.container_bits) - 1) & ~((1 << f.ignored_low_bits) - 1)
        out.append((one, mask))
    return out


class PE(wiring.Component):
    """One processing element (see the module docstring and docs/tensor_engine.md).

    Timing (``en`` = 1 every cycle): a beat in ``x_reg`` during cycle ``T`` reads
    ``bank[tag.bank]`` in cycle ``T``, has its product registered at ``T + 1`` and its product
    sum at ``T + 2`` (:data:`P_PREFIX` stages), is added to ``i_psum`` combinationally during
    cycle ``T + P_PREFIX`` and is in ``o_psum`` during ``T + P_PREFIX + 1``.  So ``i_psum`` must
    carry the psum of the same beat in cycle ``T + P_PREFIX`` (the PE above registered it one
    cycle earlier, having seen the beat one cycle earlier: the skew).

    Parameters
    ----------
    lanes : int
        Product lanes: 2 (lane 0 every format incl. the fp32 24 x 24 product, lane 1 FP8 for
        double_row).  The structure keeps lanes 1..3 as FP8 paths; MX (a later mode) will use
        ``lanes=4``.

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of every register.
    i_x : In(32), i_tag : In(TAG_LAYOUT)
        Moving lane word and tag from the left neighbour (or the row's skew line).
    i_ls : In(32), i_ls_ctl : In(LS_CTL_LAYOUT)
        LoadStationary shift chain from the left neighbour.
    i_psum : In(32)
        FP32 psum (or transpose word) from the PE above.
    o_x, o_tag : Out
        ``x_reg``: the moving lane word and tag, to the right neighbour.
    o_ls, o_ls_ctl : Out
        The shift chain to the right neighbour: the displaced bank word (or the passed-on one).
    o_psum : Out(32)
        ``psum_out`` register, to the PE below.
    """

    def __init__(self, lanes=2):
        if lanes != 2:
            self._MustUse__silence = True
            raise ValueError(f"PE lanes must be 2 (lanes 2..3 are reserved for MX), not {lanes!r}")
        self.lanes = lanes
        self.latency = P_PREFIX + 1
        super().__init__(PE_SIGNATURE)

    def elaborate(self, platform):
        m = Module()

        def reg(name, shape, value):
            r = Signal(shape, name=name, reset_less=True)
            m.d.sync += r.eq(value)
            return r

        # ---- moving register -------------------------------------------------------------
        x = reg("x_reg", LANE_WIDTH, self.i_x)
        tag = Signal(TAG_LAYOUT, name="tag_reg", reset_less=True)
        m.d.sync += tag.eq(self.i_tag)
        m.d.comb += [self.o_x.eq(x), self.o_tag.eq(tag)]

        # ---- stationary banks and the LoadStationary shift chain -------------------------
        banks = [Signal(LANE_WIDTH, name=f"bank{b}", reset_less=True) for b in range(2)]
        ls = self.i_ls_ctl
        ls_pass = Signal(name="ls_pass")            # left of a column tile: only pass it on
        ls_rd = Signal(LANE_WIDTH, name="ls_rd")    # word displaced from the target bank
        m.d.comb += [ls_pass.eq(ls.skip.any()), ls_rd.eq(Mux(ls.bank, banks[1], banks[0]))]
        for b in range(2):
            with m.If(ls.valid & ~ls_pass & (ls.bank == b)):
                m.d.sync += banks[b].eq(self.i_ls)
        ls_out = reg("ls_out", LANE_WIDTH, Mux(ls_pass, self.i_ls, ls_rd))
        ls_ctl = Signal(LS_CTL_LAYOUT, name="ls_ctl_reg", reset_less=True)
        m.d.sync += ls_ctl.eq(ls)
        m.d.comb += [self.o_ls.eq(ls_out), self.o_ls_ctl.eq(ls_ctl)]

        # ---- stage 1: decode + exact multiply (off x_reg and bank[tag.bank]) ---------------
        s_word = Signal(LANE_WIDTH, name="s_word")
        m.d.comb += s_word.eq(Mux(tag.bank, banks[1], banks[0]))
        sel_s = Signal(range(len(LANE0_FORMATS)), name="sel_s")
        sel_m = Signal(range(len(LANE0_FORMATS)), name="sel_m")
        m.d.comb += [sel_s.eq(lane0_format_index(tag.mode, tag.fmt_s)),
                     sel_m.eq(lane0_format_index(tag.mode, tag.fmt_m))]
        m.submodules.mul0 = mul0 = ExactMul(LANE0_FORMATS, LANE0_FORMATS)
        m.d.comb += [mul0.i_a.eq(s_word), mul0.i_b.eq(x),
                     mul0.i_fmt_a.eq(sel_s), mul0.i_fmt_b.eq(sel_m)]
        m.submodules.mul1 = mul1 = ExactMul(FP8_LANE_FORMATS, FP8_LANE_FORMATS)
        m.d.comb += [mul1.i_a.eq(s_word[8:16]), mul1.i_b.eq(x[8:16]),
                     mul1.i_fmt_a.eq(tag.fmt_s), mul1.i_fmt_b.eq(tag.fmt_m)]

        # Transpose: is the moving value exactly 1.0 in its format?  Raw stationary word,
        # zero-extended from its container (32 / 16 / 8 bits by mode).
        ones = [Signal(name=f"one_{get_format(f).name}") for f in LANE0_FORMATS]
        for sig, (code, mask) in zip(ones, _one_codes()):
            m.d.comb += sig.eq((x & mask) == code)
        is_one = Signal(name="is_one")
        with m.Switch(sel_m):
            for i, sig in enumerate(ones):
                with m.Case(i):
                    m.d.comb += is_one.eq(sig)
        raw = Signal(LANE_WIDTH, name="raw_s")
        m.d.comb += raw.eq(Mux(tag.mode[2], s_word[:8],
                               Mux(tag.mode[1], s_word[:16], s_word)))

        w0 = mul0.sig_width                          # 48
        r1_sig0 = reg("r1_sig0", w0, Mux(tag.transpose, raw, mul0.o_sig))
        r1_exp0 = reg("r1_exp0", mul0.o_exp.shape(), mul0.o_exp)
        r1_sign0 = reg("r1_sign0", 1, mul0.o_sign)
        r1_inf0 = reg("r1_inf0", 1, mul0.o_inf)
        r1_nan0 = reg("r1_nan0", 1, mul0.o_nan)
        r1_sig1 = reg("r1_sig1", mul1.sig_width, mul1.o_sig)
        r1_exp1 = reg("r1_exp1", mul1.o_exp.shape(), mul1.o_exp)
        r1_sign1 = reg("r1_sign1", 1, mul1.o_sign)
        r1_inf1 = reg("r1_inf1", 1, mul1.o_inf)
        r1_nan1 = reg("r1_nan1", 1, mul1.o_nan)
        r1_valid = reg("r1_valid", 1, tag.valid)
        r1_first = reg("r1_first", 1, tag.first_row)
        r1_tr = reg("r1_transpose", 1, tag.transpose)
        r1_dr = reg("r1_dr", 1, tag.mode == Mode.DOUBLE_ROW)
        r1_one = reg("r1_one", 1, is_one)

        # ---- stage 2: product sum (double_row) / select ------------------------------------
        # Double-row: the two FP8 products (lane 0's in the low bits of its 48-bit significand)
        # summed exactly, aligned to each other: the one with the larger exponent is shifted
        # left by the exponent difference d, the other added or subtracted, and the sum keeps
        # the smaller exponent.  Every finite double_row product lies in [2**lsb, 2**(lsb+mag))
        # with lsb the smallest FP8 product LSB, so the sum fits mag + 1 bits and d <= max_shift.
        # (Inf / NaN products have a zero significand: they only set the flags.)
        fp8 = [get_format(f) for f in FP8_LANE_FORMATS]
        lsb = min(f.lsb_exp_min for f in fp8) * 2
        mag = max((f.max_sig * f.max_sig).bit_length() + 2 * (f.emax - f.man_bits)
                  for f in fp8) - lsb
        max_shift = max(2 * (f.emax - f.man_bits) for f in fp8) - lsb
        total = mag + (self.lanes - 1).bit_length() + 1       # magnitude + carry + sign
        fp8_sig = mul1.sig_width
        sig0 = r1_sig0[:fp8_sig]
        d = Signal(signed(max(len(r1_exp0), len(r1_exp1)) + 1), name="s2_exp_diff")
        m.d.comb += d.eq(r1_exp0 - r1_exp1)
        swap = Signal(name="s2_swap")                          # lane 1 has the larger exponent
        m.d.comb += swap.eq(d[-1])
        shift = Signal(range(max_shift + 1), name="s2_shift")  # |d|, exact in double_row
        m.d.comb += shift.eq(Mux(swap, -d, d))
        big = Signal(mag, name="s2_big")
        small = Signal(fp8_sig, name="s2_small")
        big_sign = Signal(name="s2_big_sign")
        sub = Signal(name="s2_sub")
        m.d.comb += [big.eq(Mux(swap, r1_sig1, sig0) << shift),
                     small.eq(Mux(swap, sig0, r1_sig1)),
                     big_sign.eq(Mux(swap, r1_sign1, r1_sign0)),
                     sub.eq(r1_sign0 ^ r1_sign1)]
        acc = Signal(total, name="s2_dr_sum")                  # big +- small, two's complement
        small_x = Signal(total, name="s2_small_x")             # small or ~small (sub)
        m.d.comb += [small_x.eq(Cat(small, Const(0, total - fp8_sig)) ^ sub.replicate(total)),
                     acc.eq(big + small_x + sub)]
        dr_mag = Signal(total - 1, name="s2_dr_mag")
        neg = Signal(name="s2_neg")
        m.d.comb += [neg.eq(sub & acc[-1]), dr_mag.eq(Mux(neg, -acc, acc))]
        inf_pos = (r1_inf0 & ~r1_sign0) | (r1_inf1 & ~r1_sign1)
        inf_neg = (r1_inf0 & r1_sign0) | (r1_inf1 & r1_sign1)
        dr_nan = r1_nan0 | r1_nan1 | (inf_pos & inf_neg)
        dr_inf = inf_pos | inf_neg
        # An exact zero sum is -0 only when both products are -0 (then sub = 0 and big_sign = 1);
        # an infinite sum has the sign of its infinities.
        dr_sign = Mux(dr_inf, inf_neg, Mux(acc.any(), big_sign ^ neg, big_sign & ~sub))
        dr_exp = Mux(swap, r1_exp0, r1_exp1)

        b_width = max(total - 1, w0)
        b_lo = min(mul0.exp_range.start, lsb)
        b_hi = max(mul0.exp_range.stop - 1, lsb)
        b_shape = bits_for_range(b_lo, b_hi)
        r2_sig = reg("r2_b_sig", b_width, Mux(r1_dr, dr_mag, r1_sig0))
        r2_exp = reg("r2_b_exp", b_shape, Mux(r1_dr, dr_exp, r1_exp0))
        r2_sign = reg("r2_b_sign", 1, Mux(r1_dr, dr_sign, r1_sign0))
        r2_inf = reg("r2_b_inf", 1, Mux(r1_dr, dr_inf, r1_inf0))
        r2_nan = reg("r2_b_nan", 1, Mux(r1_dr, dr_nan, r1_nan0))
        r2_valid = reg("r2_valid", 1, r1_valid)
        r2_first = reg("r2_first", 1, r1_first)
        r2_tr = reg("r2_transpose", 1, r1_tr)
        r2_one = reg("r2_one", 1, r1_one)

        # ---- psum adder: combinational AddRound, registered psum_out ------------------------
        psum_eff = Signal(32, name="psum_eff")
        m.d.comb += psum_eff.eq(Mux(r2_first, 0, self.i_psum))
        m.submodules.unpack_psum = up = Unpack(["fp32"])
        m.d.comb += up.i_bits.eq(psum_eff)
        m.submodules.add = add = AddRound(up.sig_width, up.exp_range, b_width,
                                          range(b_lo, b_hi + 1), pipelined=False)
        m.d.comb += [
            add.i_a_sign.eq(up.o_sign), add.i_a_exp.eq(up.o_exp), add.i_a_sig.eq(up.o_sig),
            add.i_a_inf.eq(up.o_inf), add.i_a_nan.eq(up.o_nan),
            add.i_b_sign.eq(r2_sign), add.i_b_exp.eq(r2_exp), add.i_b_sig.eq(r2_sig),
            add.i_b_inf.eq(r2_inf), add.i_b_nan.eq(r2_nan),
        ]
        psum_next = Signal(32, name="psum_next")
        with m.If(~r2_valid):
            m.d.comb += psum_next.eq(self.i_psum)           # bubble / row outside the tile
        with m.Elif(r2_tr):
            m.d.comb += psum_next.eq(Mux(r2_one, r2_sig[:32], psum_eff))
        with m.Else():
            m.d.comb += psum_next.eq(add.o_result)
        psum = reg("psum_out", 32, psum_next)
        m.d.comb += self.o_psum.eq(psum)
        return EnableInserter(self.en)(m)
