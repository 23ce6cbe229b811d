"""``TensorEngine``: the Tensor Engine top (control + systolic array).

Ports (all synchronous to ``clk``, reset ``rst``); each stream ``x`` is an
:class:`amaranth.lib.stream.Signature` with the Verilog ports ``x__valid``, ``x__ready`` and
``x__payload``:

=================  ======================  =======================================================
port               payload                 meaning
=================  ======================  =======================================================
``instr``          ``INSTR_LAYOUT`` (67)   in: ``isa.encode`` words (``isa.FIELDS``, LSB first)
``stationary``     chains*rows*40          in: per LoadStationary chain ``k`` (``chains``
                                           of ``chain_width`` columns: 4 of 32 at 128), lane
                                           word ``k * rows + r`` = ``stationary[r - tile_row,
                                           m]`` (PE row ``r``), bits ``[32, 40)`` its MX
                                           scale; chain ``k``'s beat ``j`` is column ``m = first
                                           + count - 1 - j`` of its columns
                                           (``timing.ls_chain_columns``), zero past its count
                                           (:func:`stationary_beats` packs them)
``moving``         rows*40                 in: lane word ``r`` = ``moving[r - tile_row, n]``
                                           and its MX scale, as for ``stationary``
``result``         ``vector_layout(cols)`` out: ``data`` lane word ``c`` = result of PE column
                                           ``c`` (FP32 bits, or the raw transpose word
                                           zero-extended; lanes outside ``[tile_col, tile_col +
                                           M)`` are 0); ``last``: the vector is the last
                                           (``n = N - 1``) of its MM.  ``result.valid &
                                           ~result.ready`` freezes the whole engine that cycle
``error``          ``ErrorStrobe(4)``      ``valid``: one (enabled) cycle per rejected
                                           instruction, or per transpose MM with a
                                           non-selection moving beat; ``code``: its
                                           ``isa.Error``
=================  ======================  =======================================================

With ``parallel_tiles=True`` (tiles run side by side, ``timing.HDL_PARALLEL``):
``stationary`` is ``row_groups * chains`` streams of ``rows / row_groups`` lane words, stream
``g * chains + k`` the words of chain ``k`` for the rows of row group ``g``; ``moving`` is
``chains * row_groups`` streams, stream ``j * row_groups + g`` the words of row group ``g``
entering at column group ``j`` (``j`` = 0 but for a column tile: its first column group); an
instruction's beat takes a word from every group of its tile in one cycle
(:meth:`TensorEngine.lane_groups`).  ``result`` carries every output tap's vector
(:func:`tap_vector_layout`): a row tile's results leave below its last row group, the others'
at the bottom.

With ``background_transpose=True`` (NeuronCore-v4, ``timing.HDL_BACKGROUND``): a second
plane for transposes (:class:`~ncrtl.hdl.tensor_engine.plane.TransposePlane`) beside the PE
array; ``stationary`` and ``moving`` are a stream per plane (``stationary[p]``,
``moving[p]``, each as above), an instruction's data on the streams of its plane
(``timing.ls_plane``: it follows from the instruction sequence alone, so a driver knows the
plane without the timing); ``result`` carries both planes' vectors
(:func:`tap_vector_layout` with 2 taps of one column group: tap ``p`` is plane ``p``).

Verilog: the array places every PE as an instance of the one PE module
(:data:`~ncrtl.hdl.tensor_engine.array.PE_MODULE`), listed with the tile module in
:meth:`TensorEngine.cells`; :func:`ncrtl.hdl.verilog.convert` emits them once, then the top.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ncrtl.hdl.common.params import validated_init
from ncrtl.hdl.common.ports import ErrorStrobe
from ncrtl.hdl.common.stream import vector_layout
from ncrtl.model.modes import ENGINE_MODES, pe_modes
from ncrtl.model.tensor_engine.isa import Op

from .array import SystolicArray, grid_ports
from .control import ERROR_SHAPE, INSTR_LAYOUT, TensorControl
from .pe import container
from .plane import TransposePlane

__all__ = ["TensorEngine", "stationary_beats", "lane_groups", "tap_vector_layout"]

#: The ``external_grid`` outputs the engine forwards from its array.
_GRID_OUT = ("o_grid_en", "o_grid_x", "o_grid_tag", "o_grid_ls", "o_grid_ls_ctl")


def stationary_beats(words, ins, rows, cols, tile_unit=32):
    """The ``stationary`` beats of LS ``ins`` (a simulation helper): ``words`` are its tile's
    lane words, ``[M, K]`` (column ``m``'s word for row ``k``); returns ``[beats, chains *
    rows]`` lane words, chain ``k``'s row ``r`` in lane ``k * rows + r`` (zero where a chain has
    no column in a beat)."""
    import numpy as np

    from ncrtl.model.tensor_engine.timing import chain_count, ls_chain_columns

    ins = ins.whole(rows, cols)
    words = np.asarray(words, dtype=np.uint64)
    chains = chain_count(cols, tile_unit)
    per = ls_chain_columns(ins, cols, tile_unit)
    out = np.zeros((max(n for _, n in per), chains * rows), dtype=np.uint64)
    k_rows = slice(ins.tile_row, ins.tile_row + words.shape[1])
    for k, (first, n) in enumerate(per):
        for j in range(n):
            col = first + n - 1 - j - ins.tile_col
            out[j, k * rows : (k + 1) * rows][k_rows] = words[col]
    return out


def lane_groups(ins, rows, cols, tile_unit=32):
    """The lane groups of the ``stationary`` (LS) or ``moving`` (MM) port of a ``rows x cols``
    engine with parallel tiles that every beat of ``ins`` takes a word from, ``[(index,
    lanes)]``: ``lanes`` slices that group's words out of the instruction's whole-array beat
    (:func:`stationary_beats`'s ``chains * rows`` lane words; a moving beat's ``rows``).

    An LS takes stationary group ``g * chains + k`` for every row group ``g`` and chain ``k``
    of its tile; an MM takes moving group ``j * row_groups + g`` for every row group ``g`` of
    its tile at its injection point ``j`` (a column tile's first column group, else 0).  All of
    an instruction's groups hand over a beat in the same cycle."""
    from ncrtl.model.tensor_engine.timing import chain_count, tile_col_groups

    whole = ins.whole(rows, cols)
    per, row_groups = tile_unit, rows // tile_unit
    chains = chain_count(cols, tile_unit)
    rgs = range(whole.tile_row // per, -(-(whole.tile_row + whole.tile_rows) // per))
    cgs = tile_col_groups(ins, rows, cols, tile_unit)
    if ins.op == Op.LS:
        return [
            (g * chains + k, slice(k * rows + g * per, k * rows + (g + 1) * per))
            for g in rgs
            for k in cgs
        ]
    j = cgs[0] if whole.tile_cols != cols else 0
    return [(j * row_groups + g, slice(g * per, (g + 1) * per)) for g in rgs]


def tap_vector_layout(taps, cols, col_groups):
    """Payload of the ``result`` stream of an engine with parallel tiles: ``data``, the vector
    below every output tap (tap ``g``'s lane ``c`` in bits ``[32 (g cols + c), ..)``);
    ``groups``, bit ``g * col_groups + j``: tap ``g``'s column group ``j`` carries a result
    vector (its lanes past the MM's columns are 0; lanes of groups without one are 0);
    ``last``, same bits: that vector is the last of its MM.  One handshake takes them all, so
    the tiles' results leave in step and backpressure freezes the whole engine."""
    n = taps * col_groups
    return data.StructLayout({"data": 32 * taps * cols, "groups": n, "last": n})


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
    parallel_tiles : bool
        Instructions on disjoint tiles run at the same time (``timing.HDL_PARALLEL``): the
        ``stationary`` and ``moving`` ports become a stream per lane group (:func:`lane_groups`)
        and ``result`` carries a vector per output tap and column group
        (:func:`tap_vector_layout`).  False: tiles one after another (``timing.HDL_SERIAL``),
        one stream each.
    background_transpose : bool
        The background transpose plane (NeuronCore-v4, ``timing.HDL_BACKGROUND``): a transpose
        runs beside a matmul or another transpose (see the module docstring); not with
        ``parallel_tiles``.
    external_grid : bool
        The engine without its PE grid, for a simulation that steps the grid as column bands
        (:mod:`~ncrtl.hdl.tensor_engine.band`): the array's ``o_grid_*`` / ``i_grid_psum``
        ports become the engine's (serial engine only).
    modes : sequence of PeMode, str or None
        The modes the PE is built for (``ncrtl.model.modes.pe_modes``: a family such as
        ``"bf16"``, mode names, or PeModes; None: every engine mode, the synthesis design).
        A PE for fewer modes simulates faster; an instruction of a mode the build lacks is
        rejected with ``Error.MODE`` (``isa.check(..., modes=engine.modes)``).
    sparse : bool
        The sparse path (:class:`~ncrtl.hdl.tensor_engine.pe.PE`): sparse matmuls
        (``nc_matmul_sparse``) run; the ``moving`` lane words are
        :attr:`x_width` bits (a sparse beat's elements of each row); without it a sparse
        instruction is rejected with ``Error.SPARSE`` (``isa.check(..., sparse=False)``).
        Rows a multiple of 4, serial engine without background plane.

    Attributes
    ----------
    latency : int
        ``rows + cols + P_PREFIX + 1``: a moving beat consumed in cycle ``t`` gives its output
        vector in cycle ``t + latency`` (at the bottom; a row tile's at its tap, ``rows - (g +
        1) * tile_unit`` cycles earlier).
    slots, row_groups, col_groups : int
        With parallel tiles: the loader / sequencer pairs
        (:func:`~ncrtl.model.tensor_engine.timing.tile_slot`), the row groups (output taps)
        and the column groups (1, 1, 1 without).
    planes : int
        2 with the background transpose plane, else 1.
    """

    @validated_init
    def __init__(
        self,
        rows=128,
        cols=128,
        *,
        instance=True,
        tile_unit=32,
        block=None,
        parallel_tiles=False,
        background_transpose=False,
        modes=None,
        external_grid=False,
        sparse=False,
    ):
        modes = ENGINE_MODES if modes is None else pe_modes(modes)
        if external_grid and background_transpose:
            raise ValueError("TensorEngine external_grid is for the serial engine only")
        self.array = SystolicArray(
            rows,
            cols,
            instance=instance,
            tile_granule=tile_unit,
            block=block,
            parallel_tiles=parallel_tiles,
            modes=modes,
            external_grid=external_grid,
            sparse=sparse,
        )
        self.modes = self.array.modes
        self.sparse = sparse
        #: Bits of a moving lane word.
        self.x_width = self.array.x_width
        self.control = TensorControl(
            rows,
            cols,
            self.array.latency,
            tile_unit=tile_unit,
            parallel_tiles=parallel_tiles,
            background_transpose=background_transpose,
            modes=self.modes,
            sparse=sparse,
        )
        self.plane = None
        if background_transpose:
            self.plane = TransposePlane(
                rows, cols, tile_granule=tile_unit, instance=instance, block=self.array.block
            )
        self.rows, self.cols, self.instance, self.tile_unit = rows, cols, instance, tile_unit
        self.parallel = parallel_tiles
        self.latency = self.array.latency
        ctl = self.control
        self.slots, self.row_groups = ctl.slots, ctl.row_groups
        self.col_groups = ctl.chains if parallel_tiles else 1
        self.planes = ctl.planes
        members = {
            "instr": In(stream.Signature(INSTR_LAYOUT)),
            "stationary": ctl.signature.members["stationary"],
            "moving": ctl.signature.members["moving"],
            "error": Out(ErrorStrobe(ERROR_SHAPE.width)),
        }
        if parallel_tiles:
            layout = tap_vector_layout(self.row_groups, cols, self.col_groups)
            members["result"] = Out(stream.Signature(layout))
        elif background_transpose:
            members["result"] = Out(stream.Signature(tap_vector_layout(2, cols, 1)))
        else:
            members["result"] = Out(stream.Signature(vector_layout(cols)))
        if external_grid:
            members.update(grid_ports(rows, cols, self.array.chains))
        self.external_grid = external_grid
        super().__init__(members)

    def lane_groups(self, ins):
        """With parallel tiles: :func:`lane_groups` of ``ins`` on this engine."""
        if not self.parallel:
            raise ValueError("lane_groups: the engine has no parallel tiles (one stream each)")
        return lane_groups(ins, self.rows, self.cols, self.tile_unit)

    def _keep(self, m, info, vector, suffix):
        """The lanes of ``vector`` (32 bits per column) inside the info's column range
        ``[col_lo, col_hi)``, 0 outside."""
        W, lanes = 32, []
        for c in range(self.cols):
            keep = Signal(name=f"out_keep{suffix}_c{c}")
            lo_ok = (info.col_lo <= c) if c else ~info.col_lo.any()
            m.d.comb += keep.eq(info.valid & lo_ok & (info.col_hi > c))
            lanes.append(Mux(keep, vector[c * W : (c + 1) * W], 0))
        return lanes

    def cells(self):
        """The modules the engine places with ``Instance``: the array's (the PE, the tile) and
        the background plane's (its cell, its tile)."""
        return self.array.cells() + (self.plane.cells() if self.plane is not None else [])

    def elaborate(self, platform):
        m = Module()
        m.submodules.control = ctl = self.control
        m.submodules.array = arr = self.array
        # Output backpressure freezes the whole engine (the array has no skid buffer).
        en = Signal(name="en")
        m.d.comb += en.eq(~(self.result.valid & ~self.result.ready))
        connect(m, flipped(self.instr), ctl.instr)
        if self.parallel or self.planes > 1:
            for k in range(len(ctl.stationary)):
                connect(m, flipped(self.stationary[k]), ctl.stationary[k])
            for k in range(len(ctl.moving)):
                connect(m, flipped(self.moving[k]), ctl.moving[k])
        else:
            connect(m, flipped(self.stationary), ctl.stationary)
            connect(m, flipped(self.moving), ctl.moving)
        m.d.comb += [
            ctl.en.eq(en),
            arr.en.eq(en),
            arr.i_x.eq(ctl.o_x),
            arr.i_tag.eq(ctl.o_tag),
            arr.i_ls.eq(ctl.o_ls),
            arr.i_ls_ctl.eq(ctl.o_ls_ctl),
            self.error.valid.eq(ctl.o_error),
            self.error.code.eq(ctl.o_error_code),
        ]
        if self.external_grid:
            m.d.comb += [getattr(self, n).eq(getattr(arr, n)) for n in _GRID_OUT]
            m.d.comb += arr.i_grid_psum.eq(self.i_grid_psum)
        W = 32  # an FP32 result (or a transpose word) per column
        if self.parallel:
            # Per tap g and column group j: its lanes, the first `count` of them kept.
            G, C = ctl.chain_width, self.col_groups
            lanes, valid, last = [], [], []
            for g in range(self.row_groups):
                for j in range(C):
                    info = ctl.o_info[g * C + j]
                    valid.append(info.valid)
                    last.append(info.last)
                    for i in range(G):
                        at = (g * self.cols + j * G + i) * W
                        keep = Signal(name=f"out_keep_g{g}_c{j * G + i}")
                        m.d.comb += keep.eq(info.valid & (info.count > i))
                        lanes.append(Mux(keep, arr.o_psum[at : at + W], 0))
            m.d.comb += [
                self.result.valid.eq(Cat(*valid).any()),
                self.result.payload.groups.eq(Cat(*valid)),
                self.result.payload.last.eq(Cat(*last)),
                self.result.payload.data.eq(Cat(*lanes)),
            ]
            return m
        info = ctl.o_info
        lanes = self._keep(m, info, arr.o_psum, "")
        if self.planes > 1:
            m.submodules.plane = plane = self.plane
            m.d.comb += [
                plane.en.eq(en),
                plane.i_sel.eq(ctl.o_sel_t),
                plane.i_bank.eq(ctl.o_bank_t),
                plane.i_ls.eq(ctl.o_ls_t),
                plane.i_ls_ctl.eq(ctl.o_ls_ctl_t),
            ]
            info_t = ctl.o_info_t
            # the plane's words cut to the transpose container (32, 16 or 8 bits), as the PE cuts
            words = Cat(
                *(
                    container(m, info_t.raw, plane.o_word[c * W : (c + 1) * W], f"out_t_c{c}")
                    for c in range(self.cols)
                )
            )
            lanes += self._keep(m, info_t, words, "_t")
            m.d.comb += [
                self.result.valid.eq(info.valid | info_t.valid),
                self.result.payload.groups.eq(Cat(info.valid, info_t.valid)),
                self.result.payload.last.eq(Cat(info.last, info_t.last)),
                self.result.payload.data.eq(Cat(*lanes)),
            ]
            return m
        m.d.comb += [
            self.result.valid.eq(info.valid),
            self.result.payload.last.eq(info.last),
            self.result.payload.data.eq(Cat(*lanes)),
        ]
        return m
