"""``MatmulCore``: the Tensor Engine writing its output vectors into PSUM.

The NeuronCore's matmul path: :class:`~ncrtl.hdl.tensor_engine.top.TensorEngine`'s ``result``
stream (one FP32 value per PE column) is PSUM's ``data`` stream (one value per partition: PE
column ``c`` is partition ``c``), joined with :func:`amaranth.lib.wiring.connect`.  Where each MM's
vectors go and how they combine with PSUM (bank, column, dtype, rounding, accumulate flags) is a
PSUM write instruction on its own port, one per MM the Tensor Engine accepts, in the same order
(an ``nc_matmul`` is the pair).  PSUM back-pressures the Tensor Engine when a bank conflict
stalls its write stream (``o_ready`` low freezes the whole engine for that cycle).

Ports: the Tensor Engine's input streams ``te_instr``, ``stationary``, ``moving`` and its error
strobe ``o_te_error`` / ``o_te_error_code``; PSUM's ``psum_instr`` stream and error strobe
``o_psum_error`` / ``o_psum_error_code``, and its other ports under their own names
(``o_done*``, ``ve_req`` / ``ve_resp`` / ``o_ve_error*``, the same for ``se``, ``seed``,
``o_grant``).  See :mod:`ncrtl.hdl.tensor_engine.top` and :mod:`ncrtl.hdl.psum.psum` for each.

All ``cols`` lanes of a vector are written: lanes outside an MM's column range ``[tile_col,
tile_col + M)`` carry +0.0, so they overwrite with +0.0 or accumulate +0.0 (which turns a -0.0
into +0.0).  Use ``M = cols`` (or separate banks) where that matters.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import connect, flipped

from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.psum.psum import ENGINES, Psum
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
        te, ps = self.te.signature.members, self.psum.signature.members
        members = {
            "te_instr": te["instr"],
            "stationary": te["stationary"],
            "moving": te["moving"],
            "o_te_error": te["o_error"],
            "o_te_error_code": te["o_error_code"],
            "psum_instr": ps["instr"],
            "o_psum_error": ps["o_error"],
            "o_psum_error_code": ps["o_error_code"],
        }
        # PSUM's other ports keep their names.
        members.update(
            {
                name: member
                for name, member in ps.items()
                if name not in ("instr", "data", "o_error", "o_error_code")
            }
        )
        super().__init__(members)

    def cells(self):
        """The modules placed with ``Instance``: the Tensor Engine's, then PSUM's."""
        return self.te.cells() + self.psum.cells()

    def elaborate(self, platform):
        m = Module()
        m.submodules.te = te = self.te
        m.submodules.psum = ps = self.psum
        connect(m, flipped(self.te_instr), te.instr)
        connect(m, flipped(self.stationary), te.stationary)
        connect(m, flipped(self.moving), te.moving)
        connect(m, te.result, ps.data)  # PE column c is partition c
        connect(m, flipped(self.psum_instr), ps.instr)
        connect(m, flipped(self.seed), ps.seed)
        for e in ENGINES:
            connect(m, flipped(getattr(self, f"{e}_req")), getattr(ps, f"{e}_req"))
            connect(m, getattr(ps, f"{e}_resp"), flipped(getattr(self, f"{e}_resp")))
            m.d.comb += [
                getattr(self, f"o_{e}_error").eq(getattr(ps, f"o_{e}_error")),
                getattr(self, f"o_{e}_error_code").eq(getattr(ps, f"o_{e}_error_code")),
            ]
        m.d.comb += [
            self.o_te_error.eq(te.o_error),
            self.o_te_error_code.eq(te.o_error_code),
            self.o_psum_error.eq(ps.o_error),
            self.o_psum_error_code.eq(ps.o_error_code),
            self.o_done.eq(ps.o_done),
            self.o_done_bank.eq(ps.o_done_bank),
            self.o_grant.eq(ps.o_grant),
        ]
        return m
