"""``MatmulCore``: the Tensor Engine writing its output vectors into PSUM.

The NeuronCore's matmul path: :class:`~ncrtl.hdl.tensor_engine.top.TensorEngine`'s output stream
(``o_valid`` / ``o_ready`` / ``o_data``, one FP32 value per PE column) is PSUM's data stream
(``i_data_*``, one value per partition: PE column ``c`` is partition ``c``).  Where each MM's
vectors go and how they combine with PSUM (bank, column, dtype, rounding, accumulate flags) is a
PSUM write instruction on its own port, one per MM the Tensor Engine accepts, in the same order
(an ``nc_matmul`` is the pair).  PSUM back-pressures the Tensor Engine when a bank conflict
stalls its write stream (``o_ready`` low freezes the whole engine for that cycle).

Ports: the Tensor Engine's input ports under their names (``i_instr_*``, ``i_stat_*``,
``i_mov_*``) with its error strobe as ``o_te_error`` / ``o_te_error_code``; PSUM's ports under
their names with ``psum_`` for the instruction port and error strobe (``i_psum_instr_*``,
``o_psum_error*``) and the others unchanged (``o_done*``, ``i_ve_*`` / ``o_ve_*``, ``i_se_*`` /
``o_se_*``, ``i_seed_*``, ``o_grant``).  See :mod:`ncrtl.hdl.tensor_engine.top` and
:mod:`ncrtl.hdl.psum.psum` for each.

All ``cols`` lanes of a vector are written: lanes outside an MM's column range ``[tile_col,
tile_col + M)`` carry +0.0, so they overwrite with +0.0 or accumulate +0.0 (which turns a -0.0
into +0.0).  Use ``M = cols`` (or separate banks) where that matters.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring

from ncrtl.hdl.psum.psum import Psum
from ncrtl.hdl.tensor_engine.top import TensorEngine

__all__ = ["MatmulCore", "TE_RENAME", "PSUM_RENAME"]

#: Tensor Engine ports not exposed (they connect to PSUM), and renamed ones.
_TE_INTERNAL = ("o_valid", "o_ready", "o_data", "o_last")
TE_RENAME = {"o_error": "o_te_error", "o_error_code": "o_te_error_code"}
#: PSUM ports not exposed (they connect to the Tensor Engine), and renamed ones.
_PSUM_INTERNAL = ("i_data_valid", "i_data_ready", "i_data")
PSUM_RENAME = {"i_instr_valid": "i_psum_instr_valid", "i_instr_ready": "i_psum_instr_ready",
               "i_instr": "i_psum_instr", "o_error": "o_psum_error",
               "o_error_code": "o_psum_error_code"}


class MatmulCore(wiring.Component):
    """Tensor Engine -> PSUM (see the module docstring).

    Parameters
    ----------
    rows, cols : int
        Tensor Engine array size; PSUM has ``cols`` partitions.
    banks, bank_bytes : int
        PSUM geometry (8 banks of 2 KiB per partition on the hardware).
    instance : bool
        Build the PEs, PSUM slot units and bank memories as Verilog instances (True: for
        :meth:`cells`) or as Amaranth submodules (False: for the Amaranth simulator).
    block : int or None
        Tensor Engine tile size (:class:`~ncrtl.hdl.tensor_engine.array.SystolicArray`).
    """

    def __init__(self, rows=128, cols=128, banks=8, bank_bytes=2048, *, instance=True,
                 block=None):
        try:
            self.te = TensorEngine(rows, cols, instance=instance, block=block)
            self.psum = Psum(cols, banks, bank_bytes, instance=instance)
        except (TypeError, ValueError):
            self._MustUse__silence = True
            raise
        self.rows, self.cols, self.instance = rows, cols, instance
        members = {}
        for sub, internal, rename in ((self.te, _TE_INTERNAL, TE_RENAME),
                                      (self.psum, _PSUM_INTERNAL, PSUM_RENAME)):
            for name, member in sub.signature.members.items():
                if name not in internal:
                    members[rename.get(name, name)] = member
        super().__init__(members)

    def cells(self):
        """The modules placed with ``Instance``: the Tensor Engine's, then PSUM's."""
        return self.te.cells() + self.psum.cells()

    def elaborate(self, platform):
        m = Module()
        m.submodules.te = te = self.te
        m.submodules.psum = ps = self.psum
        for sub, internal, rename in ((te, _TE_INTERNAL, TE_RENAME),
                                      (ps, _PSUM_INTERNAL, PSUM_RENAME)):
            for name, member in sub.signature.members.items():
                if name in internal:
                    continue
                outer = getattr(self, rename.get(name, name))
                inner = getattr(sub, name)
                if member.flow == wiring.In:
                    m.d.comb += inner.eq(outer)
                else:
                    m.d.comb += outer.eq(inner)
        m.d.comb += [ps.i_data_valid.eq(te.o_valid), ps.i_data.eq(te.o_data),
                     te.o_ready.eq(ps.i_data_ready)]
        return m
