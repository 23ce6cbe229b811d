"""``MatmulCore``: the Tensor Engine writing its output vectors into PSUM.

The NeuronCore's matmul path: :class:`~ncrtl.hdl.tensor_engine.top.TensorEngine`'s ``result``
stream (one FP32 value per PE column) is PSUM's ``data`` stream (one value per partition: PE
column ``c`` is partition ``c``), joined with :func:`amaranth.lib.wiring.connect`.  Where each MM's
vectors go and how they combine with PSUM (bank, column, dtype, rounding, accumulate flags) is a
PSUM write instruction on its own port, one per MM the Tensor Engine accepts, in the same order
(an ``nc_matmul`` is the pair).  PSUM back-pressures the Tensor Engine when a bank conflict
stalls its write stream (``o_ready`` low freezes the whole engine for that cycle).

Ports: the Tensor Engine's input streams ``te_instr``, ``stationary``, ``moving`` and its error
strobe ``te_error``; PSUM's ``psum_instr`` stream and error strobe ``psum_error``, and its other
ports under their own names (``o_done``, ``o_done_bank``, the engine ports ``ve`` / ``se``
(:class:`~ncrtl.hdl.psum.psum.PsumPort`) with their ``ve_error`` / ``se_error``, ``seed``,
``o_grant``), each the member of its block's signature
(:func:`~ncrtl.hdl.common.ports.exposed`).  See :mod:`ncrtl.hdl.tensor_engine.top` and
:mod:`ncrtl.hdl.psum.psum` for each.

All ``cols`` lanes of a vector are written: lanes outside an MM's column range ``[tile_col,
tile_col + M)`` carry +0.0, so they overwrite with +0.0 or accumulate +0.0 (which turns a -0.0
into +0.0).  Use ``M = cols`` (or separate banks) where that matters.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import connect

from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.common.ports import expose, exposed
from ncrtl.hdl.psum.psum import Psum
from ncrtl.hdl.tensor_engine.top import TensorEngine

__all__ = ["MatmulCore"]


class MatmulCore(wiring.Component):
    """Tensor Engine -> PSUM (see the module docstring).

    Parameters
    ----------
    rows, cols : int
        Tensor Engine array size; PSUM has ``cols`` partitions.
    banks, bank_bytes : int
        PSUM geometry (8 banks of 2 KiB per partition on the hardware).
    instance : bool
        Build the PEs, PSUM slot units and bank memories as Verilog instances (True: see
        :meth:`cells`) or as Amaranth submodules (False: for the Amaranth simulator).
    tile_unit : int
        Tensor Engine tile sizes ``tile_unit`` and ``2 * tile_unit`` and MX K granule (32 on the
        hardware: :class:`~ncrtl.hdl.tensor_engine.top.TensorEngine`).
    block : int or None
        Tensor Engine tile size (:class:`~ncrtl.hdl.tensor_engine.array.SystolicArray`).
    modes : str, sequence or None
        The modes the PEs are built for (:class:`~ncrtl.hdl.tensor_engine.top.TensorEngine`).
    """

    @validated_init
    def __init__(
        self,
        rows=128,
        cols=128,
        banks=8,
        bank_bytes=2048,
        *,
        instance=True,
        tile_unit=32,
        block=None,
        modes=None,
    ):
        self.te = TensorEngine(
            rows, cols, instance=instance, tile_unit=tile_unit, block=block, modes=modes
        )
        self.psum = Psum(cols, banks, bank_bytes, instance=instance)
        self.rows, self.cols, self.instance = rows, cols, instance
        # the Tensor Engine's ports and PSUM's under the core's names; PSUM's ``data`` is
        # the Tensor Engine's ``result``, inside
        self._te_ports = {
            "te_instr": "instr",
            "stationary": "stationary",
            "moving": "moving",
            "te_error": "error",
        }
        self._psum_ports = {"psum_instr": "instr", "psum_error": "error"}
        self._psum_ports.update(
            {
                name: name
                for name in self.psum.signature.members
                if name not in ("instr", "data", "error")
            }
        )
        members = exposed(self.te, self._te_ports) | exposed(self.psum, self._psum_ports)
        super().__init__(members)

    def cells(self):
        """The modules placed with ``Instance``: the Tensor Engine's, then PSUM's."""
        return self.te.cells() + self.psum.cells()

    def elaborate(self, platform):
        m = Module()
        m.submodules.te = te = self.te
        m.submodules.psum = ps = self.psum
        expose(m, self, te, self._te_ports)
        expose(m, self, ps, self._psum_ports)
        connect(m, te.result, ps.data)  # PE column c is partition c
        return m
