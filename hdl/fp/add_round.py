"""Two-operand exact add with a single rounding to FP32: the core of every fused FP32 unit."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import (
    bits_for_range,
    clamp,
    count_leading_zeros,
    shift_left,
    shift_right_sticky,
)
from ncrtl.hdl.common.params import check_bool, validated_init
from ncrtl.model.fp.codec import QNAN
from ncrtl.model.fp.formats import get_format

from .exact import ExactLayout
from .round import round_pack

__all__ = ["AddRound", "GUARD_BITS"]

#: Bits kept below the LSB of the wider significand during alignment (guard, round, sticky).
GUARD_BITS = 3

_FP32 = get_format("fp32")


class AddRound(wiring.Component):
    """``round_fp32(a + b)`` of two exact operands, with one round-to-nearest-even.

    Each operand is an exact value (:class:`~ncrtl.hdl.fp.exact.ExactLayout`):
    ``(-1)**sign * sig * 2**exp`` with an integer significand of any width, possibly
    unnormalized (leading zeros allowed, zero allowed) and an exponent of any range: an FP32
    number, an exact 48-bit product, a wide fixed-point sum of products.  The result is the FP32
    rounding of their exact sum.  The operands' ``zero`` flags are not read (a zero operand is
    one with ``sig == 0``, carrying its sign).  Intermediate
    exponents are as wide as the operand ranges need, so nothing overflows or flushes before the
    single rounding.

    Result rules: subnormal results are kept (gradual underflow); overflow gives +-Inf; a NaN
    operand or ``Inf - Inf`` gives the canonical quiet NaN ``0x7FC00000``; an Inf operand gives
    that Inf; an exact zero sum is -0 only when both operands are -0 (a zero operand carries its
    sign in ``i_*_sign``); a nonzero sum that rounds to zero keeps its sign.

    Parameters
    ----------
    a, b : ExactLayout
        Layouts of the operands: their significand widths and every LSB exponent they can carry
        (wider ranges only cost exponent bits).  Connect a producer's value of the same layout
        (``add.i_a.eq(unpack.o_value)``).
    pipelined : bool
        ``True`` (default): the four steps below are separated by registers (latency 4, clock
        enable ``en``).  ``False``: the same logic without any register (latency 0, no ``en``),
        for a parent that registers the result itself (the Tensor Engine PE).

    Attributes
    ----------
    latency : int
        4 cycles of ``en`` (0 when not ``pipelined``): (1) normalize both operands (LZC +
        shift), (2) compare magnitudes, swap, align the smaller with guard/round/sticky bits,
        (3) add or subtract and count the leading zeros of the sum, (4) normalize, round, pack,
        specials.
    width : int
        ``max(a.sig_width, b.sig_width, 24)``: the significand width both operands are
        normalized to.
    window : int
        ``width + GUARD_BITS``: the alignment window.

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of the whole pipeline; every register holds while it is 0.  Only when
        ``pipelined``.
    i_a : In(a)
        Operand A (``sig`` and ``exp`` are ignored when ``inf`` or ``nan``).
    i_b : In(b)
        Operand B.
    o_result : Out(32)
        FP32 encoding of the rounded sum, ``latency`` enabled cycles after the operands (in the
        same cycle when not ``pipelined``).

    Notes
    -----
    Why one rounding of the truncated window is exact (``W = width``, ``G = GUARD_BITS = 3``):
    after normalization the larger magnitude ``X`` occupies bits ``[W+G-1 : G]`` of the window
    and is a multiple of ``2**G``.  The smaller ``Y`` is shifted right by the exponent difference
    ``d``; bits leaving the window are ORed into window bit 0 (jamming).  If ``d <= G`` no bit is
    lost and the sum is exact.  Otherwise the jammed ``Y'`` lies in the same open interval
    ``(2k, 2k+2)`` as ``Y`` (or equals it), and so do ``X +- Y'`` and ``X +- Y`` since ``X`` is
    even: the computed sum is odd exactly when the true one is not on the even grid.  And since
    ``d >= G + 1`` bounds the cancellation (``X - Y > 2**(W+G-2)``), the FP32 rounding position
    is at window bit ``(W+G-2) - 23 >= 2`` or higher (``W >= 24``): the rounding decision only
    looks at multiples of 2, where the jammed and exact sums agree.  Subnormal results round at
    an even higher position.  With ``d <= 1`` (massive cancellation possible) the sum is exact
    and the left shift that normalizes it brings in zeros only.
    """

    #: Latency of the default (pipelined) unit; instances carry their own ``latency``.
    latency = 4

    @validated_init
    def __init__(self, a, b, *, pipelined=True):
        for value, what in ((a, "a"), (b, "b")):
            if not isinstance(value, ExactLayout):
                raise TypeError(f"AddRound {what} must be an ExactLayout, not {value!r}")
        self.a, self.b = a, b
        self.pipelined = check_bool(pipelined, "AddRound pipelined")
        self.latency = 4 if pipelined else 0
        self.width = max(a.sig_width, b.sig_width, _FP32.precision)
        self.window = self.width + GUARD_BITS
        # Exponent of the MSB of a normalized operand: exp + width_i - 1 - lzc, lzc in [0, W].
        tops = [
            (
                lay.exp_range.start + lay.sig_width - 1 - self.width,
                lay.exp_range.stop - 1 + lay.sig_width - 1,
            )
            for lay in (a, b)
        ]
        self._top_lo = min(t[0] for t in tops)
        self._top_hi = max(t[1] for t in tops)
        members = {"en": In(1, init=1)} if pipelined else {}
        super().__init__({**members, "i_a": In(a), "i_b": In(b), "o_result": Out(32)})

    def __repr__(self):
        extra = "" if self.pipelined else ", pipelined=False"
        return f"AddRound({self.a!r}, {self.b!r}{extra})"

    def elaborate(self, platform):
        m = Module()
        W, N = self.width, self.window
        top_shape = bits_for_range(self._top_lo, self._top_hi)

        def stage(name, value, shape=None):
            """A pipeline register loaded from `value` when en is set (a wire when not
            pipelined)."""
            reg = Signal(shape if shape is not None else len(value), name=name, reset_less=True)
            if not self.pipelined:
                m.d.comb += reg.eq(value)
                return reg
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # ---- stage 1: normalize each operand to W bits with its MSB at the top ---------------
        norm = {}
        for op, layout in (("a", self.a), ("b", self.b)):
            value = getattr(self, f"i_{op}")
            sig, exp, width = value.sig, value.exp, layout.sig_width
            wide = Signal(W, name=f"s1_{op}_wide")
            m.d.comb += wide.eq(sig << (W - width))
            lz = count_leading_zeros(m, wide, name=f"s1_{op}_lzc")
            shifted = shift_left(m, wide, lz, name=f"s1_{op}_norm")
            top = Signal(top_shape, name=f"s1_{op}_top")
            m.d.comb += top.eq(exp + (width - 1) - lz)
            norm[op] = dict(
                sig=stage(f"r1_{op}_sig", shifted),
                top=stage(f"r1_{op}_top", top, top_shape),
                zero=stage(f"r1_{op}_zero", ~sig.any()),
                sign=stage(f"r1_{op}_sign", value.sign),
                inf=stage(f"r1_{op}_inf", value.inf),
                nan=stage(f"r1_{op}_nan", value.nan),
            )
        a, b = norm["a"], norm["b"]

        # ---- stage 2: order by magnitude, align the smaller one -------------------------------
        # A zero operand always loses (its normalized exponent is meaningless).
        a_ge_b = Signal(name="s2_a_ge_b")
        m.d.comb += a_ge_b.eq(
            b["zero"]
            | (
                ~a["zero"]
                & ((a["top"] > b["top"]) | ((a["top"] == b["top"]) & (a["sig"] >= b["sig"])))
            )
        )
        x_sig, y_sig = Signal(W, name="s2_x_sig"), Signal(W, name="s2_y_sig")
        x_top, y_top = Signal(top_shape, name="s2_x_top"), Signal(top_shape, name="s2_y_top")
        x_sign, y_sign = Signal(name="s2_x_sign"), Signal(name="s2_y_sign")
        m.d.comb += [
            x_sig.eq(Mux(a_ge_b, a["sig"], b["sig"])),
            y_sig.eq(Mux(a_ge_b, b["sig"], a["sig"])),
            x_top.eq(Mux(a_ge_b, a["top"], b["top"])),
            y_top.eq(Mux(a_ge_b, b["top"], a["top"])),
            x_sign.eq(Mux(a_ge_b, a["sign"], b["sign"])),
            y_sign.eq(Mux(a_ge_b, b["sign"], a["sign"])),
        ]
        # A zero Y may have a larger (garbage) exponent: the clamp to 0 keeps it harmless.
        dist = clamp(m, x_top - y_top, 0, N, name="s2_dist")
        y_win = Signal(N, name="s2_y_win")
        m.d.comb += y_win.eq(Cat(Const(0, GUARD_BITS), y_sig))
        y_shr, y_lost = shift_right_sticky(m, y_win, dist, name="s2_align")
        y_al = Cat(y_shr[0] | y_lost, y_shr[1:])  # jam the lost bits into bit 0
        nan = a["nan"] | b["nan"] | (a["inf"] & b["inf"] & (a["sign"] ^ b["sign"]))
        r2_x = stage("r2_x", Cat(Const(0, GUARD_BITS), x_sig))
        r2_y = stage("r2_y", y_al)
        r2_sub = stage("r2_sub", x_sign ^ y_sign)
        r2_sign = stage("r2_sign", x_sign)
        r2_top = stage("r2_top", x_top, top_shape)
        r2_zsign = stage("r2_zero_sign", a["sign"] & b["sign"])
        r2_nan = stage("r2_nan", nan)
        r2_inf = stage("r2_inf", a["inf"] | b["inf"])
        r2_inf_sign = stage("r2_inf_sign", Mux(a["inf"], a["sign"], b["sign"]))

        # ---- stage 3: add / subtract (X >= Y, so no negative result), count leading zeros ----
        total = Signal(N + 1, name="s3_sum")
        m.d.comb += total.eq(Mux(r2_sub, r2_x - r2_y, r2_x + r2_y))
        lz = count_leading_zeros(m, total, name="s3_lzc")
        r3_sum = stage("r3_sum", total)
        r3_lz = stage("r3_lz", lz)
        r3_sign = stage("r3_sign", r2_sign)
        r3_top = stage("r3_top", r2_top, top_shape)
        r3_zsign = stage("r3_zero_sign", r2_zsign)
        r3_nan = stage("r3_nan", r2_nan)
        r3_inf = stage("r3_inf", r2_inf)
        r3_inf_sign = stage("r3_inf_sign", r2_inf_sign)

        # ---- stage 4: normalize, round once, pack, specials ----------------------------------
        normed = shift_left(m, r3_sum, r3_lz, name="s4_norm")
        # Bit N of the sum has exponent x_top + 1.
        e_top = Signal(bits_for_range(self._top_lo - N, self._top_hi + 1), name="s4_e_top")
        m.d.comb += e_top.eq(r3_top + 1 - r3_lz)
        mag, ovf = round_pack(m, _FP32, e_top, normed, Const(0, 1), name="s4_rnd")
        is_zero = r3_lz == N + 1
        result = Signal(32, name="s4_result")
        with m.If(r3_nan):
            m.d.comb += result.eq(QNAN["fp32"])
        with m.Elif(r3_inf):
            m.d.comb += result.eq(Cat(Const(0x7F800000, 31), r3_inf_sign))
        with m.Elif(is_zero):
            m.d.comb += result.eq(Cat(Const(0, 31), r3_zsign))
        with m.Elif(ovf):
            m.d.comb += result.eq(Cat(Const(0x7F800000, 31), r3_sign))
        with m.Else():
            m.d.comb += result.eq(Cat(mag, r3_sign))
        m.d.comb += self.o_result.eq(stage("r4_result", result))
        return m
