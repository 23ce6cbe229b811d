"""FP32 -> BF16 (RNE or stochastic rounding), FP32 -> FP16 and FP32 -> FP8 (RNE) converters."""

import enum

import numpy as np
from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import validated_init
from ncrtl.model.fp.codec import QNAN
from ncrtl.model.fp.formats import get_format

from .round import round_pack, rounding_grid
from .unpack import Unpack

__all__ = ["Bf16Rounding", "Fp32ToBf16", "Fp32ToFp16", "Fp32ToFloat"]


class Bf16Rounding(enum.IntEnum):
    """Values of :class:`Fp32ToBf16`'s ``i_mode`` input."""

    RNE = 0  #: round to nearest, ties to even
    SR = 1  #: stochastic rounding with ``i_rand``


class Fp32ToBf16(wiring.Component):
    """FP32 -> BF16 conversion, RNE or stochastic (the golden :func:`ncrtl.model.fp.ops.fp32_to_bf16`).

    RNE: ``(bits + 0x7FFF + bits[16]) >> 16`` on the magnitude.  BF16 has FP32's exponent range,
    so this one addition rounds normals and subnormals alike, carries into the exponent when the
    mantissa rounds up, and turns values above the largest BF16 into Inf.

    Stochastic rounding: ``((bits & 0x7FFFFFFF) + i_rand) >> 16`` with the sign re-attached, so a
    value rounds away from zero with probability equal to its discarded fraction; Inf passes
    unchanged (adding ``i_rand < 2**16`` to ``0x7F800000`` does not reach the next BF16 code).

    NaN gives the canonical ``0x7FC0`` in both modes.

    Attributes
    ----------
    latency : int
        1 (one output register).

    Interface
    ---------
    en : In(1, init=1)
        Clock enable.
    i_value : In(32)
        FP32 encoding.
    i_mode : In(1)
        :class:`Bf16Rounding`: 0 RNE, 1 SR.
    i_rand : In(16)
        Random bits for SR (e.g. the upper 16 bits of :class:`~ncrtl.hdl.fp.xorwow.Xorwow`'s
        ``o_value``); ignored in RNE mode.
    o_result : Out(16)
        BF16 encoding, ``latency`` enabled cycles later.
    """

    latency = 1

    def __init__(self):
        super().__init__(
            {
                "en": In(1, init=1),
                "i_value": In(32),
                "i_mode": In(1),
                "i_rand": In(16),
                "o_result": Out(16),
            }
        )

    def elaborate(self, platform):
        m = Module()
        sign = self.i_value[31]
        mag = self.i_value[:31]
        is_nan = mag > 0x7F800000
        addend = Signal(16, name="addend")
        with m.If(self.i_mode == Bf16Rounding.SR):
            m.d.comb += addend.eq(self.i_rand)
        with m.Else():
            m.d.comb += addend.eq(0x7FFF + self.i_value[16])
        total = Signal(32, name="total")  # <= 0x7FFFFFFF + 0xFFFF: fits 32 bits
        m.d.comb += total.eq(mag + addend)
        result = Signal(16, name="result")
        with m.If(is_nan):
            m.d.comb += result.eq(QNAN["bf16"])
        with m.Else():
            # NaN is the only case where total[31] could be set (mag >= 0x7FFF0001).
            m.d.comb += result.eq(Cat(total[16:31], sign))
        out = Signal(16, name="out", reset_less=True)
        with m.If(self.en):
            m.d.sync += out.eq(result)
        m.d.comb += self.o_result.eq(out)
        return m


class Fp32ToFloat(wiring.Component):
    """FP32 -> ``fmt``, round to nearest even: the golden ``ncrtl.model.fp.encode`` of the value
    (what ``tensor_copy`` does to an FP32 written as ``fmt``).

    ``fmt`` is a narrower format of :mod:`ncrtl.model.fp`: IEEE-style (``fp16``, ``fp8_e4m3``,
    ``fp8_e5m2``, ``fp8_e3m4``: gradual underflow into subnormals, overflow to +-Inf, Inf
    passes, NaN gives the format's quiet NaN) or ``fp8_e4m3fn`` (no Inf: a value that rounds
    past the largest finite, 448, and an Inf give the NaN code with the value's sign, a NaN
    ``0x7F``).  The sign of zero (and of values that round to zero) is kept.  FP32 subnormals
    (below ``2**-126``) are far below half the smallest subnormal of any of these formats and
    round to +-0, so the rounding takes the FP32 significand as is, without normalizing it.

    Attributes
    ----------
    latency : int
        1 (one output register).

    Interface
    ---------
    en : In(1, init=1)
        Clock enable.
    i_value : In(32)
        FP32 encoding.
    o_result : Out(fmt.bits)
        The encoding, ``latency`` enabled cycles later.
    """

    latency = 1
    #: The formats it converts to.
    FORMATS = ("fp16", "fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "fp8_e3m4")

    @validated_init
    def __init__(self, fmt):
        if fmt not in self.FORMATS:
            raise ValueError(f"Fp32ToFloat converts to one of {self.FORMATS}, not {fmt!r}")
        self.fmt = get_format(fmt)
        super().__init__(
            {
                "en": In(1, init=1),
                "i_value": In(32),
                "o_result": Out(self.fmt.bits),
            }
        )

    def elaborate(self, platform):
        from ncrtl.model.fp import encode

        m = Module()
        fmt = self.fmt
        n = fmt.bits
        m.submodules.unpack = up = Unpack(["fp32"])
        m.d.comb += up.i_bits.eq(self.i_value)
        # MSB exponent assuming the implicit bit: exact for normals; subnormals end up far
        # below the target's range either way (see the class docstring).
        e_top = Signal(range(-160, 160), name="e_top")
        v = up.o_value
        m.d.comb += e_top.eq(v.exp + (up.sig_width - 1))
        # A format without Inf (e4m3fn) rounds on a grid one exponent bit wider; past its
        # largest finite value it gives its NaN code, where an IEEE-style format gives Inf.
        ieee = fmt.special == "ieee"
        grid = fmt if ieee else rounding_grid(fmt)
        mag, ovf = round_pack(m, grid, e_top, v.sig, Const(0, 1), name="rnd")
        nan_code = int(encode(np.array([np.nan]), fmt)[0])
        if ieee:
            over, over_code = ovf, ((1 << fmt.exp_bits) - 1) << fmt.man_bits
        else:
            top = int(encode(np.array([fmt.max_finite]), fmt)[0])
            over, over_code = ovf | (mag > top), nan_code
        result = Signal(n, name="result")
        with m.If(v.nan):
            m.d.comb += result.eq(nan_code)
        with m.Elif(v.inf | over):
            m.d.comb += result.eq(Cat(Const(over_code, n - 1), v.sign))
        with m.Else():
            m.d.comb += result.eq(Cat(mag[: n - 1], v.sign))
        out = Signal(n, name="out", reset_less=True)
        with m.If(self.en):
            m.d.sync += out.eq(result)
        m.d.comb += self.o_result.eq(out)
        return m


class Fp32ToFp16(Fp32ToFloat):
    """FP32 -> FP16, round to nearest even (the golden :func:`fp32_to_fp16`):
    ``Fp32ToFloat("fp16")``.  Gradual underflow into FP16 subnormals, overflow to +-Inf, Inf
    passes, NaN gives ``0x7E00``, the sign of zero (and of values that round to zero) kept."""

    def __init__(self):
        super().__init__("fp16")
