"""``TensorEngine``: the Tensor Engine top (control + systolic array), and its Verilog.

Ports (all synchronous to ``clk``, reset ``rst``):

==================  =====  ===================================================================
port                width  meaning
==================  =====  ===================================================================
``i_instr_valid``   1      instruction stream (valid / ready)
``i_instr_ready``   1      out
``i_instr``         67     ``isa.encode`` word (``isa.FIELDS``, LSB first)
``i_stat_valid``    1      stationary stream
``i_stat_ready``    1      out
``i_stat``          rows*32  lane word ``r`` = ``stationary[r - tile_row, m]`` (PE row ``r``); beat
                           ``j`` is column ``m = M - 1 - j``
``i_mov_valid``     1      moving stream
``i_mov_ready``     1      out
``i_mov``           rows*32  lane word ``r`` = ``moving[r - tile_row, n]``
``o_valid``         1      output stream
``o_ready``         1      in; ``o_valid & ~o_ready`` freezes the whole engine for that cycle
``o_data``          cols*32  lane word ``c`` = result of PE column ``c`` (FP32 bits, or the raw
                           transpose word zero-extended); lanes outside ``[tile_col,
                           tile_col + M)`` are 0
``o_last``          1      the vector is the last (``n = N - 1``) of its MM
``o_error``         1      one (enabled) cycle per rejected instruction, or per transpose MM
                           with a non-selection moving beat
``o_error_code``    4      ``isa.Error`` of that strobe
==================  =====  ===================================================================

Verilog: the array places every PE as an instance of the one PE module
(:data:`~ncrtl.hdl.tensor_engine.array.PE_MODULE`), listed with the tile module in
:meth:`TensorEngine.cells`; :func:`ncrtl.hdl.verilog.convert` emits them once, then the top.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ncrtl.model.tensor_engine.isa import instruction_bits

from .array import SystolicArray
from .control import ERROR_SHAPE, TensorControl
from .pe import LANE_WIDTH

__all__ = ["TensorEngine"]


class TensorEngine(wiring.Component):
    """The Tensor Engine: :class:`~ncrtl.hdl.tensor_engine.control.TensorControl` driving a
    :class:`~ncrtl.hdl.tensor_engine.array.SystolicArray` (ports in the module docstring).

    Parameters
    ----------
    rows, cols : int
        Array size (128 x 128 on the hardware).
    instance : bool
        PEs as Verilog instances of the one PE module (True, for Verilog generation: see
        :meth:`cells`) or as Amaranth submodules (False, for the Amaranth simulator).
    tile_unit : int
        Tile sizes are ``tile_unit`` and ``2 * tile_unit`` rows / columns: 32 on the hardware
        (``isa.check``); smaller values let tests exercise tiling on small arrays.
    block : int or None
        PEs per side of the Verilog tile module (see :class:`~ncrtl.hdl.tensor_engine.array.PETile`);
        ``None``: :func:`~ncrtl.hdl.tensor_engine.array.default_block` (8 at 128 x 128).

    Attributes
    ----------
    latency : int
        ``rows + cols + P_PREFIX + 1``: a moving beat consumed in cycle ``t`` gives its output
        vector in cycle ``t + latency``.
    """

    def __init__(self, rows=128, cols=128, *, instance=True, tile_unit=32, block=None):
        try:
            self.array = SystolicArray(rows, cols, instance=instance, tile_granule=tile_unit,
                                       block=block)
            self.control = TensorControl(rows, cols, self.array.latency, tile_unit=tile_unit)
        except (TypeError, ValueError):
            self._MustUse__silence = True
            raise
        self.rows, self.cols, self.instance, self.tile_unit = rows, cols, instance, tile_unit
        self.latency = self.array.latency
        super().__init__({
            "i_instr_valid": In(1), "i_instr_ready": Out(1), "i_instr": In(instruction_bits()),
            "i_stat_valid": In(1), "i_stat_ready": Out(1), "i_stat": In(rows * LANE_WIDTH),
            "i_mov_valid": In(1), "i_mov_ready": Out(1), "i_mov": In(rows * LANE_WIDTH),
            "o_valid": Out(1), "o_ready": In(1), "o_data": Out(cols * LANE_WIDTH),
            "o_last": Out(1),
            "o_error": Out(1), "o_error_code": Out(ERROR_SHAPE),
        })

    def cells(self):
        """The modules the engine places with ``Instance``: the array's (the PE, the tile)."""
        return self.array.cells()

    def elaborate(self, platform):
        m = Module()
        m.submodules.control = ctl = self.control
        m.submodules.array = arr = self.array
        en = Signal(name="en")
        m.d.comb += en.eq(~(self.o_valid & ~self.o_ready))
        m.d.comb += [
            ctl.en.eq(en), arr.en.eq(en),
            ctl.i_instr_valid.eq(self.i_instr_valid), ctl.i_instr.eq(self.i_instr),
            self.i_instr_ready.eq(ctl.o_instr_ready),
            ctl.i_stat_valid.eq(self.i_stat_valid), self.i_stat_ready.eq(ctl.o_stat_ready),
            ctl.i_mov_valid.eq(self.i_mov_valid), ctl.i_mov.eq(self.i_mov),
            self.i_mov_ready.eq(ctl.o_mov_ready),
            arr.i_x.eq(ctl.o_x), arr.i_tag.eq(ctl.o_tag),
            arr.i_ls.eq(self.i_stat), arr.i_ls_ctl.eq(ctl.o_ls_ctl),
            self.o_error.eq(ctl.o_error), self.o_error_code.eq(ctl.o_error_code),
        ]
        info = ctl.o_info
        W = LANE_WIDTH
        lanes = []
        for c in range(self.cols):
            keep = Signal(name=f"out_keep_c{c}")
            lo_ok = (info.col_lo <= c) if c else ~info.col_lo.any()
            m.d.comb += keep.eq(lo_ok & (info.col_hi > c))
            lanes.append(Mux(keep, arr.o_psum[c * W:(c + 1) * W], 0))
        m.d.comb += [self.o_valid.eq(info.valid), self.o_last.eq(info.last),
                     self.o_data.eq(Cat(*lanes))]
        return m
