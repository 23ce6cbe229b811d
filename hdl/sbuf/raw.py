"""``AddWords``: the read-add-write arithmetic of the SBUF, one memory word per cycle."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import check_int, validated_init
from ncrtl.hdl.fp.add import Fp32Add
from ncrtl.hdl.fp.convert import Bf16Rounding, Fp32ToBf16
from ncrtl.model.dma.isa import AddDtype

__all__ = ["AddWords"]


class AddWords(wiring.Component):
    """``i_old + i_new`` lane by lane over a ``word_bytes`` word, FP32 or BF16, bit-exact with
    :func:`ncrtl.model.dma.engine.add_elements`.

    FP32: ``word_bytes / 4`` lanes of :class:`~ncrtl.hdl.fp.add.Fp32Add` (round to nearest
    even). BF16: ``word_bytes / 2`` lanes, each operand widened exactly to FP32 (its bits
    shifted up 16), the same FP32 adder, then :class:`~ncrtl.hdl.fp.convert.Fp32ToBf16` (RNE).
    The BF16 lanes reuse the FP32 adders: the word has as many adders as BF16 lanes, and an FP32
    word uses every other one.

    Attributes
    ----------
    latency : int
        1: the result of the operands of cycle ``t`` is on ``o_sum`` in cycle ``t + 1`` (the
        adders are combinational, the converter's register is the stage).

    Interface
    ---------
    i_old, i_new : In(8 * word_bytes)
        Little-endian lanes.
    i_dtype : In(1)
        :class:`ncrtl.model.dma.isa.AddDtype`.
    o_sum : Out(8 * word_bytes)
    """

    latency = 1

    @validated_init
    def __init__(self, word_bytes=16):
        self.word_bytes = check_int(word_bytes, "AddWords word_bytes", minimum=4, maximum=64)
        w = word_bytes
        super().__init__(
            {"i_old": In(8 * w), "i_new": In(8 * w), "i_dtype": In(1), "o_sum": Out(8 * w)}
        )

    def elaborate(self, platform):
        m = Module()
        w = self.word_bytes
        bf16 = self.i_dtype == AddDtype.BF16
        fp32_out = Signal(8 * w)
        bf16_out = []
        for lane in range(w // 2):
            add = Fp32Add(pipelined=False)
            cvt = Fp32ToBf16()
            m.submodules[f"add{lane}"] = add
            m.submodules[f"cvt{lane}"] = cvt
            h = slice(16 * lane, 16 * lane + 16)
            if lane % 2 == 0:  # lanes 0, 2, 4, ... also add the FP32 words
                f = slice(16 * lane, 16 * lane + 32)
                a32, b32 = self.i_old[f], self.i_new[f]
            else:
                a32 = b32 = 0
            m.d.comb += [
                add.i_a.eq(Mux(bf16, self.i_old[h] << 16, a32)),
                add.i_b.eq(Mux(bf16, self.i_new[h] << 16, b32)),
                cvt.i_value.eq(add.o_result),
                cvt.i_mode.eq(Bf16Rounding.RNE),
            ]
            if lane % 2 == 0:
                m.d.sync += fp32_out[16 * lane : 16 * lane + 32].eq(add.o_result)
            bf16_out.append(cvt.o_result)
        dtype = Signal()
        m.d.sync += dtype.eq(bf16)
        m.d.comb += self.o_sum.eq(Mux(dtype, Cat(*bf16_out), fp32_out))
        return m
