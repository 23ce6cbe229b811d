"""The read-add-write arithmetic of one PSUM slot: one partition's add+round stage."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.bits import equals
from ncrtl.hdl.fp.add import Fp32Add
from ncrtl.hdl.fp.convert import Fp32ToBf16
from ncrtl.model.psum.isa import Dtype

__all__ = ["SlotUpdate"]


class SlotUpdate(wiring.Component):
    """New contents of one 32-bit PSUM slot after one beat (:func:`ncrtl.model.psum.read_add_write`).

    ====== ============================== ====================================================
    dtype  overwrite                      accumulate
    ====== ============================== ====================================================
    FP32   ``value``                      ``fp32_add(old, value)`` (RNE)
    BF16   ``fp32_to_bf16(value, r)``     ``fp32_to_bf16(fp32_add(old_half << 16, value), r)``
    RAW16  ``value & 0xFFFF``             (illegal; never presented)
    ====== ============================== ====================================================

    The add is a combinational :class:`~ncrtl.hdl.fp.add.Fp32Add` (``pipelined=False``) and the
    BF16 rounding the combinational logic of :class:`~ncrtl.hdl.fp.convert.Fp32ToBf16`, whose output
    register is this unit's output register: the whole add+round is one cycle, so PSUM's
    forwarding loop (this register -> the next beat's operand -> this adder) closes every cycle.

    Attributes
    ----------
    latency : int
        1: ``o_word`` shows the result of the inputs of the previous cycle.

    Interface
    ---------
    i_old : In(32)
        The slot's current contents (after forwarding).
    i_value : In(32)
        The beat (FP32 Tensor Engine output).
    i_dtype : In(2)
        :class:`~ncrtl.model.psum.isa.Dtype`.
    i_half : In(1)
        16-bit dtypes: the half of the slot written (the accumulate reads that half of ``i_old``).
    i_overwrite : In(1)
        Flag bit0.
    i_sr : In(1)
        Stochastic rounding (BF16).
    i_rand : In(16)
        The partition's draw (upper 16 bits of its XORWOW output) when ``i_sr``.
    o_word : Out(32)
        The new slot word: the FP32 result, or the 16-bit result in both halves (the memory's
        half write enable picks one).
    """

    latency = 1

    def __init__(self):
        super().__init__(
            {
                "i_old": In(32),
                "i_value": In(32),
                "i_dtype": In(2),
                "i_half": In(1),
                "i_overwrite": In(1),
                "i_sr": In(1),
                "i_rand": In(16),
                "o_word": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.add = add = Fp32Add(pipelined=False)
        m.submodules.bf16 = bf16 = Fp32ToBf16()
        old_half = Mux(self.i_half, self.i_old[16:], self.i_old[:16])
        a = Signal(32, name="a")
        # A BF16 slot widens exactly to FP32 (its 16 bits in the upper half).
        m.d.comb += [
            a.eq(Mux(self.i_dtype == Dtype.BF16, Cat(Const(0, 16), old_half), self.i_old)),
            add.i_a.eq(a),
            add.i_b.eq(self.i_value),
        ]
        x = Signal(32, name="x")  # the FP32 value to store or to round
        m.d.comb += [
            x.eq(Mux(self.i_overwrite, self.i_value, add.o_result)),
            bf16.i_value.eq(x),
            bf16.i_mode.eq(self.i_sr),
            bf16.i_rand.eq(self.i_rand),
        ]
        word = Signal(32, name="word", reset_less=True)
        is_bf16 = Signal(name="is_bf16", reset_less=True)
        raw = self.i_value[:16]
        m.d.sync += [
            word.eq(Mux(equals(self.i_dtype, Dtype.FP32), x, Cat(raw, raw))),
            is_bf16.eq(self.i_dtype == Dtype.BF16),
        ]
        m.d.comb += self.o_word.eq(Mux(is_bf16, Cat(bf16.o_result, bf16.o_result), word))
        return m
