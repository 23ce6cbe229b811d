"""FP32 adder: ``round_fp32(a + b)`` on :class:`~ncrtl.hdl.fp.add_round.AddRound`."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.hdl.common.params import check_bool, validated_init

from .add_round import AddRound
from .unpack import Unpack

__all__ = ["Fp32Add"]


class Fp32Add(wiring.Component):
    """IEEE FP32 addition, round to nearest even (the golden :func:`ncrtl.model.fp.ops.fp32_add`).

    Subnormal inputs and results are kept, overflow gives +-Inf, a NaN input or ``Inf - Inf``
    gives ``0x7FC00000``, ``(-0) + (-0) = -0`` and every other exact zero sum is +0.

    The FP32 decode is folded into the first :class:`AddRound` stage (it is a few gates).

    Parameters
    ----------
    pipelined : bool
        ``True`` (default): the four :class:`AddRound` stages, clock enable ``en``.  ``False``:
        the same logic without registers (latency 0, no ``en``), for a parent that registers the
        sum itself (the PSUM read-add-write, whose forwarding loop closes in one cycle).

    Attributes
    ----------
    latency : int
        4 (that of :class:`AddRound`), or 0 when not ``pipelined``.

    Interface
    ---------
    en : In(1, init=1)
        Clock enable of the pipeline (only when ``pipelined``).
    i_a, i_b : In(32)
        FP32 encodings.
    o_result : Out(32)
        FP32 encoding of the sum, ``latency`` enabled cycles later.
    """

    latency = AddRound.latency

    @validated_init
    def __init__(self, *, pipelined=True):
        self.pipelined = check_bool(pipelined, "Fp32Add pipelined")
        self.latency = AddRound.latency if pipelined else 0
        super().__init__(
            {
                **({"en": In(1, init=1)} if pipelined else {}),
                "i_a": In(32),
                "i_b": In(32),
                "o_result": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.unpack_a = ua = Unpack(["fp32"])
        m.submodules.unpack_b = ub = Unpack(["fp32"])
        m.submodules.core = core = AddRound(ua.layout, ub.layout, pipelined=self.pipelined)
        m.d.comb += [
            ua.i_bits.eq(self.i_a),
            ub.i_bits.eq(self.i_b),
            core.i_a.eq(ua.o_value),
            core.i_b.eq(ub.o_value),
            self.o_result.eq(core.o_result),
        ]
        if self.pipelined:
            m.d.comb += core.en.eq(self.en)
        return m
