"""Tensor Engine instructions: fields, validation rules and the bit encoding the RTL decodes.

One :class:`Instruction` is a LoadStationary (LS) or a MultiplyMoving (MM).  :func:`check`
returns the first rule an instruction breaks (an :class:`Error` code and a message) or ``None``;
the golden raises ``ValueError`` with the message, the RTL raises ``o_error`` with the code and
drops the instruction.  :func:`encode` / :func:`decode` define the instruction word of
``ncrtl.hdl.tensor_engine``; the field layout is :data:`FIELDS` (LSB first).
"""

import enum
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from ncrtl.model.fields import pack_fields, unpack_fields
from ncrtl.model.modes import (
    ENGINE_MODES,
    FORMAT_BITS,
    FP8_FORMATS,
    MODE_BITS,
    MODES,
    SPARSE_GROUP,
    SPARSE_MODES,
    SPARSE_RATIOS,
    mode_by_code,
)

__all__ = [
    "Op",
    "Mode",
    "Error",
    "Instruction",
    "FIELDS",
    "FP8_FORMATS",
    "encode",
    "decode",
    "check",
    "instruction_bits",
    "MAX_N",
    "MAX_N_ANY",
    "MAX_ARRAY",
    "check_array",
    "MIN_MM_CYCLES",
]

#: Largest moving free size of one MM with an FP32 result (one PSUM bank row of FP32).
MAX_N = 512
#: Largest moving free size any mode accepts (MX with a BF16 result: a bank row of BF16).
MAX_N_ANY = max(max(m.max_n, m.max_n_bf16) for m in MODES)
#: An MM occupies the moving sequencer for at least this many beat slots.
MIN_MM_CYCLES = 64


class Op(enum.IntEnum):
    LS = 0
    MM = 1


#: The instruction's mode field: one member per row of the mode table
#: (:data:`ncrtl.model.modes.MODES`), named after it (``Mode.BF16``, ``Mode.DOUBLE_ROW``).
Mode = enum.IntEnum("Mode", [(m.name.upper(), m.code) for m in MODES])
Mode.__doc__ = "Datapath mode of an instruction: the ``code`` of a row of the mode table."


class Error(enum.IntEnum):
    """Error codes of ``o_error_code`` (0 = none)."""

    NONE = 0
    K_RANGE = 1  # K == 0 or K > rows (or > the row tile)
    M_RANGE = 2  # M == 0 or M > cols (or > the column tile)
    N_RANGE = 3  # MM with N == 0 or N > 512 (MX with bf16_out: 1024)
    FORMAT = 4  # a format index the mode does not accept
    TILE = 5  # tile size / position not allowed
    MODE_COMBO = 6  # a tiling or a transpose the mode cannot run (double_row)
    NO_STATIONARY = 7  # MM before any LS
    MODE_MISMATCH = 8  # MM whose mode / formats / shape differ from the loaded stationary
    SELECTION = 9  # transpose with a moving beat that is not a selection column
    MODE = 10  # a mode number the Tensor Engine does not serve
    TILE_BUSY = 11  # a tile overlapping a different tile whose instructions have beats to come
    SPARSE = 12  # a sparse instruction of a mode without sparse, or a ratio other than 2, 3, 4
    TAG = 13  # a sparse LS whose tags leave the ratio's positions or repeat within a group


@dataclass(frozen=True)
class Instruction:
    """One LS or MM.

    Parameters
    ----------
    op : Op
    mode : Mode
    fmt_s, fmt_m : int
        Stationary / moving format: index into the mode's ``formats_s`` / ``formats_m``
        (:data:`ncrtl.model.modes.MODES`; 0 in the one-format modes).
    k : int
        Rows used (contraction partitions; double_row: partitions, each holding 2 elements).
    m : int
        Stationary free size (columns used).
    n : int
        Moving free size (MM only; 0 for LS).
    transpose : bool
        ``is_transpose`` (data movement, no arithmetic).
    bf16_out : bool
        The result is accumulated in a BF16 PSUM tile (NKI: the destination tile's dtype).  The
        values leaving the array are FP32 either way (PSUM rounds them); it raises the N limit
        of a mode that allows it (:meth:`ncrtl.model.modes.PeMode.n_limit`: MX, 1024).
    sparse : int
        0 for a dense instruction; else the compression ratio of an M:N sparse matmul (2, 3
        or 4: 4:8, 4:12, 4:16; :mod:`ncrtl.model.tensor_engine.sparse`).  ``k`` counts the
        compressed rows (PE rows used); a moving beat carries ``sparse`` elements per row.
    tile_row, tile_rows, tile_col, tile_cols : int
        Tile position and size; the default ``(0, rows, 0, cols)`` is the whole array (use
        :meth:`whole` to fill in the array size).
    """

    op: Op
    mode: Mode
    k: int
    m: int
    n: int = 0
    fmt_s: int = 0
    fmt_m: int = 0
    transpose: bool = False
    bf16_out: bool = False
    sparse: int = 0
    tile_row: int = 0
    tile_rows: int = 0
    tile_col: int = 0
    tile_cols: int = 0

    def whole(self, rows, cols):
        """The instruction with an unset (0) tile size replaced by the whole array."""
        return replace(self, tile_rows=self.tile_rows or rows, tile_cols=self.tile_cols or cols)

    # pe_mode and beat_interval are read on every issue of a long stream: computed once per
    # instruction object (kept in its __dict__; the dataclass's fields, equality and hash are
    # untouched).
    @cached_property
    def pe_mode(self):
        """The row of the mode table (:class:`ncrtl.model.modes.PeMode`), or None."""
        return mode_by_code(self.mode)

    @property
    def formats(self):
        """``(stationary format, moving format)`` names (of a valid instruction)."""
        mode = self.pe_mode
        return mode.formats_s[self.fmt_s], mode.formats_m[self.fmt_m]

    @cached_property
    def beat_interval(self):
        """Cycles per stationary or moving beat: the mode's (1/4 rate fp32 matmul, 1/2 fp32
        transpose)."""
        return self.pe_mode.interval(self.transpose)


#: Instruction word layout, LSB first: (field, width).
FIELDS = (
    ("op", 1),
    ("mode", MODE_BITS),
    ("fmt_s", FORMAT_BITS),
    ("fmt_m", FORMAT_BITS),
    ("transpose", 1),
    ("bf16_out", 1),
    ("sparse", 3),
    ("k", 8),
    ("m", 8),
    ("n", 11),
    ("tile_row", 8),
    ("tile_rows", 8),
    ("tile_col", 8),
    ("tile_cols", 8),
)


#: Largest array size (rows or columns): the 8-bit K, M and tile fields of :data:`FIELDS` encode
#: every instruction of an array up to this size, so the golden, the timing model, the RTL
#: control and the command line take arrays of 1..MAX_ARRAY rows and columns.
MAX_ARRAY = min(
    (1 << w) - 1
    for name, w in FIELDS
    if name in ("k", "m", "tile_row", "tile_rows", "tile_col", "tile_cols")
)
assert MAX_N_ANY < 1 << dict(FIELDS)["n"], "the largest N must fit the instruction's n field"


def instruction_bits():
    return sum(w for _, w in FIELDS)


def encode(ins):
    """The instruction word (int) of ``ins``; sizes are stored as given (0 = whole array)."""
    return pack_fields(FIELDS, ins, "instruction")


def decode(word):
    vals = unpack_fields(FIELDS, word)
    vals["op"] = Op(vals["op"])
    vals["transpose"] = bool(vals["transpose"])
    vals["bf16_out"] = bool(vals["bf16_out"])
    return Instruction(**vals)


def _sizes(sizes, sep="|"):
    """``64|32``: tile sizes, largest first; ``none`` when the axis cannot be tiled."""
    return sep.join(map(str, sorted(sizes, reverse=True))) or "none"


def _tile_place(axis, pos, size, total, tile_unit):
    """The rule a tile of ``size`` at ``pos`` along an axis of ``total`` rows or columns breaks
    (its message), or None: a tile fits the array, starts at 0 or above and at a multiple of its
    size."""
    what = "rows" if axis == "row" else "columns"
    if size > total:
        return (
            f"{axis} tile size {size} is larger than the array's {total} {what} (tile sizes "
            f"are tile_unit={tile_unit} and 2 x tile_unit; a smaller array needs a smaller "
            f"tile_unit)"
        )
    if pos < 0:
        return f"tile_position {axis} {pos} is negative; a tile starts at {axis} 0 or above"
    if pos % size:
        return (
            f"tile_position {axis} {pos} is not a multiple of the tile size {size} (a tile of "
            f"{size} starts at a multiple of {size})"
        )
    if pos + size > total:
        return (
            f"a tile of {size} {what} at tile_position {axis} {pos} reaches past the array's "
            f"{total} {what} (the last one starts at {axis} {total - size})"
        )
    return None


def check_array(rows, cols, tile_unit=32):
    """The array-size rules every engine, the golden and the timing model share: ``rows`` and
    ``cols`` in 1..:data:`MAX_ARRAY` (the instruction's 8-bit K, M and tile fields encode every
    instruction of such an array; :func:`encode` cannot encode a larger one's), ``tile_unit`` a
    positive integer.  Returns the first rule broken (its message) or None."""
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_ARRAY:
            return (
                f"{name}={v!r} must be an integer in 1..{MAX_ARRAY} (the instruction's 8-bit K, M "
                f"and tile fields)"
            )
    if isinstance(tile_unit, bool) or not isinstance(tile_unit, (int, np.integer)) or tile_unit < 1:
        return f"tile_unit={tile_unit!r} must be a positive integer"
    return None


def check(ins, rows, cols, stationary=None, *, tile_unit=32, modes=None, sparse=True):
    """The first rule ``ins`` breaks on a ``rows x cols`` array, or ``None``.

    Parameters
    ----------
    ins : Instruction
    rows, cols : int
        Array size.
    stationary : Instruction or None
        The LS whose bank an MM would use (None: no LS yet).  Ignored for LS.
    tile_unit : int
        32 on the hardware.  An engine built with a smaller ``tile_unit`` (small test arrays)
        scales the size rules by ``tile_unit / 32``: tile sizes ``tile_unit`` and
        ``2 * tile_unit``, the MX K granule ``tile_unit`` (:meth:`PeMode.k_step`).
    modes : sequence of PeMode or None
        The modes the engine is built for (``modes.pe_modes``; None: every engine mode): an
        instruction of another mode breaks the mode rule (``Error.MODE``).
    sparse : bool
        The engine has the sparse path; without it every sparse instruction breaks the sparse
        rule (``Error.SPARSE``).

    Returns
    -------
    (Error, str) or None

    Raises
    ------
    ValueError
        An array size that breaks :func:`check_array` (no instruction of it is encodable).
    """
    bad = check_array(rows, cols, tile_unit)
    if bad is not None:
        raise ValueError(bad)
    mode = mode_by_code(ins.mode)
    if mode is None or not mode.engine:
        what = (
            f"unknown mode {int(ins.mode)}"
            if mode is None
            else (f"mode {int(ins.mode)} ({mode.name}) is not served by the Tensor Engine")
        )
        return Error.MODE, (
            f"{what}; modes: {', '.join(f'{m.code}={m.name}' for m in ENGINE_MODES)}"
        )
    if modes is not None and mode not in tuple(modes):
        return Error.MODE, (
            f"mode {int(ins.mode)} ({mode.name}) is not in this build of the PE; its modes: "
            f"{', '.join(f'{m.code}={m.name}' for m in modes)}"
        )
    ins = ins.whole(rows, cols)
    for side, idx, names in (
        ("stationary", ins.fmt_s, mode.formats_s),
        ("moving", ins.fmt_m, mode.formats_m),
    ):
        if idx >= len(names):
            return Error.FORMAT, (
                f"{mode.name} {side} format index {idx} is not allowed; "
                f"allowed: {', '.join(f'{i}={n}' for i, n in enumerate(names))}"
            )
    row_tiles = tuple(t * tile_unit // 32 for t in mode.row_tiles)
    col_tiles = tuple(t * tile_unit // 32 for t in mode.col_tiles)
    row_t = ins.tile_rows != rows
    col_t = ins.tile_cols != cols
    tiled = row_t or col_t or ins.tile_row or ins.tile_col
    if ins.sparse:
        if not sparse:
            return Error.SPARSE, "this build of the Tensor Engine has no sparse path"
        if not mode.sparse:
            return Error.SPARSE, (
                f"mode {mode.name} cannot run a sparse matmul; sparse modes: "
                f"{', '.join(m.name for m in SPARSE_MODES)}"
            )
        if ins.sparse not in SPARSE_RATIOS:
            return Error.SPARSE, (
                f"compression ratio {ins.sparse} is not one the Tensor Engine has; ratios: "
                f"{', '.join(f'{r} (4:{SPARSE_GROUP * r})' for r in SPARSE_RATIOS)}"
            )
        if ins.transpose or tiled:
            return Error.MODE_COMBO, "a sparse matmul cannot be combined with tiling or transpose"
    if (ins.transpose and not mode.transposes) or (tiled and not mode.tiles):
        return Error.MODE_COMBO, f"{mode.name} cannot be combined with tiling or transpose"
    if tiled:
        if row_t and col_t:
            return Error.TILE, (
                f"tile_size ({ins.tile_rows}, {ins.tile_cols}) tiles rows and "
                f"columns at once; allowed: ({_sizes(row_tiles)}, {cols}) "
                f"or ({rows}, {_sizes(col_tiles)})"
            )
        for axis, on, sizes, other in (
            ("rows", row_t, row_tiles, col_tiles),
            ("columns", col_t, col_tiles, row_tiles),
        ):
            if on and not sizes:
                return Error.TILE, (
                    f"{mode.name} cannot tile {axis}; it tiles "
                    f"{'rows' if axis == 'columns' else 'columns'} only "
                    f"({_sizes(other, ' or ')})"
                )
        if row_t and (ins.tile_rows not in row_tiles or ins.tile_col):
            return Error.TILE, (
                f"row tile size {ins.tile_rows} at column {ins.tile_col} is not "
                f"allowed; allowed: {_sizes(row_tiles, ' or ')} at column 0"
            )
        if col_t and (ins.tile_cols not in col_tiles or ins.tile_row):
            return Error.TILE, (
                f"column tile size {ins.tile_cols} at row {ins.tile_row} is not "
                f"allowed; allowed: {_sizes(col_tiles, ' or ')} at row 0"
            )
        for axis, pos, size, total in (
            ("row", ins.tile_row, ins.tile_rows, rows),
            ("column", ins.tile_col, ins.tile_cols, cols),
        ):
            bad = _tile_place(axis, pos, size, total, tile_unit)
            if bad is not None:
                return Error.TILE, bad
    if not 1 <= ins.k <= ins.tile_rows:
        return Error.K_RANGE, f"K={ins.k} must be in 1..{ins.tile_rows} (rows of the tile)"
    k_step = mode.k_step(tile_unit)
    if ins.k % k_step:
        return Error.K_RANGE, (
            f"{mode.name} K={ins.k} must be a multiple of {k_step} partitions (block-scale "
            f"groups of 8 partitions x 4 packed elements fill whole quadrants)"
        )
    if ins.sparse and ins.k % SPARSE_GROUP:
        return Error.K_RANGE, (
            f"sparse K={ins.k} must be a multiple of {SPARSE_GROUP} (compressed rows come in "
            f"groups of {SPARSE_GROUP}, the non-zeros of one group of positions)"
        )
    if not 1 <= ins.m <= ins.tile_cols:
        return Error.M_RANGE, f"M={ins.m} must be in 1..{ins.tile_cols} (columns of the tile)"
    if ins.m % mode.m_multiple:
        return Error.M_RANGE, f"{mode.name} M={ins.m} must be a multiple of {mode.m_multiple}"
    if ins.op == Op.MM:
        limit = mode.n_limit(ins.bf16_out)
        if not 1 <= ins.n <= limit:
            out = "a BF16" if ins.bf16_out else "an FP32"
            return Error.N_RANGE, (
                f"N={ins.n} must be in 1..{limit} ({mode.name} with {out} result"
                + (f"; {mode.max_n_bf16} with a BF16 result)" if mode.max_n_bf16 > limit else ")")
            )
        if stationary is None:
            return Error.NO_STATIONARY, "MultiplyMoving before any LoadStationary"
        st = stationary.whole(rows, cols)
        same = (
            st.mode == ins.mode
            and st.fmt_s == ins.fmt_s
            and st.k == ins.k
            and st.m == ins.m
            and st.transpose == ins.transpose
            and st.sparse == ins.sparse
            and st.tile_row == ins.tile_row
            and st.tile_rows == ins.tile_rows
            and st.tile_col == ins.tile_col
            and st.tile_cols == ins.tile_cols
        )
        if not same:
            return Error.MODE_MISMATCH, (
                "MultiplyMoving mode, stationary format, K, M, transpose, "
                "sparse ratio and tile must equal those of its LoadStationary"
            )
    return None
