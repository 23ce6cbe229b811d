"""Tensor Engine instructions: fields, validation rules and the bit encoding the RTL decodes.

One :class:`Instruction` is a LoadStationary (LS) or a MultiplyMoving (MM).  :func:`check`
returns the first rule an instruction breaks (an :class:`Error` code and a message) or ``None``;
the golden raises ``ValueError`` with the message, the RTL raises ``o_error`` with the code and
drops the instruction.  :func:`encode` / :func:`decode` define the instruction word of
``hdl.tensor_engine``; the field layout is :data:`FIELDS` (LSB first).
"""

import enum
from dataclasses import dataclass, replace

from model.fields import pack_fields, unpack_fields

__all__ = ["Op", "Mode", "Error", "Instruction", "FIELDS", "FP8_FORMATS", "MODE_FORMATS",
           "encode", "decode", "check", "instruction_bits", "MAX_N", "MIN_MM_CYCLES"]

#: Largest moving free size of one MM (one PSUM bank of FP32).
MAX_N = 512
#: An MM occupies the moving sequencer for at least this many beat slots.
MIN_MM_CYCLES = 64


class Op(enum.IntEnum):
    LS = 0
    MM = 1


class Mode(enum.IntEnum):
    """Datapath mode of an instruction (selects the PE decoders and the rate)."""
    FP32 = 0
    TF32 = 1
    BF16 = 2
    FP16 = 3
    FP8 = 4
    DOUBLE_ROW = 5


#: FP8 formats of the fp8 / double_row modes, by their index in the fmt fields.
FP8_FORMATS = ("fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "fp8_e3m4")

#: Formats each mode accepts on each side (index into FP8_FORMATS for the FP8 modes).
MODE_FORMATS = {
    Mode.FP32: ("fp32",), Mode.TF32: ("tf32",), Mode.BF16: ("bf16",), Mode.FP16: ("fp16",),
    Mode.FP8: FP8_FORMATS, Mode.DOUBLE_ROW: FP8_FORMATS[:3],
}


class Error(enum.IntEnum):
    """Error codes of ``o_error_code`` (0 = none)."""
    NONE = 0
    K_RANGE = 1          # K == 0 or K > rows (or > the row tile)
    M_RANGE = 2          # M == 0 or M > cols (or > the column tile)
    N_RANGE = 3          # MM with N == 0 or N > 512
    FORMAT = 4           # a format index the mode does not accept
    TILE = 5             # tile size / position not allowed
    DOUBLE_ROW_COMBO = 6  # double_row with tiling or transpose
    NO_STATIONARY = 7    # MM before any LS
    MODE_MISMATCH = 8    # MM whose mode / formats / shape differ from the loaded stationary
    SELECTION = 9        # transpose with a moving beat that is not a selection column
    MODE = 10            # unknown mode number


@dataclass(frozen=True)
class Instruction:
    """One LS or MM.

    Parameters
    ----------
    op : Op
    mode : Mode
    fmt_s, fmt_m : int
        Stationary / moving format index into :data:`FP8_FORMATS` for the FP8 modes (0 for the
        others; fp8 may mix formats between the two sides).
    k : int
        Rows used (contraction partitions; double_row: partitions, each holding 2 elements).
    m : int
        Stationary free size (columns used).
    n : int
        Moving free size (MM only; 0 for LS).
    transpose : bool
        ``is_transpose`` (data movement, no arithmetic).
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
    tile_row: int = 0
    tile_rows: int = 0
    tile_col: int = 0
    tile_cols: int = 0

    def whole(self, rows, cols):
        """The instruction with an unset (0) tile size replaced by the whole array."""
        return replace(self, tile_rows=self.tile_rows or rows, tile_cols=self.tile_cols or cols)

    @property
    def formats(self):
        """``(stationary format, moving format)`` names."""
        names = MODE_FORMATS[Mode(self.mode)]
        return names[self.fmt_s % len(names)], names[self.fmt_m % len(names)]

    @property
    def beat_interval(self):
        """Cycles per stationary or moving beat (1/4 rate fp32 matmul, 1/2 fp32 transpose)."""
        if self.mode == Mode.FP32:
            return 2 if self.transpose else 4
        return 1


#: Instruction word layout, LSB first: (field, width).
FIELDS = (
    ("op", 1), ("mode", 3), ("fmt_s", 2), ("fmt_m", 2), ("transpose", 1),
    ("k", 8), ("m", 8), ("n", 10),
    ("tile_row", 8), ("tile_rows", 8), ("tile_col", 8), ("tile_cols", 8),
)


def instruction_bits():
    return sum(w for _, w in FIELDS)


def encode(ins):
    """The instruction word (int) of ``ins``; sizes are stored as given (0 = whole array)."""
    return pack_fields(FIELDS, ins, "instruction")


def decode(word):
    vals = unpack_fields(FIELDS, word)
    vals["op"] = Op(vals["op"])
    vals["transpose"] = bool(vals["transpose"])
    return Instruction(**vals)


_ROW_TILES = (32, 64)
_COL_TILES = (32, 64)


def check(ins, rows, cols, stationary=None):
    """The first rule ``ins`` breaks on a ``rows x cols`` array, or ``None``.

    Parameters
    ----------
    ins : Instruction
    rows, cols : int
        Array size.
    stationary : Instruction or None
        The LS whose bank an MM would use (None: no LS yet).  Ignored for LS.

    Returns
    -------
    (Error, str) or None
    """
    try:
        mode = Mode(ins.mode)
    except ValueError:
        return Error.MODE, f"unknown mode {int(ins.mode)}; modes: {', '.join(m.name.lower() for m in Mode)}"
    ins = ins.whole(rows, cols)
    names = MODE_FORMATS[mode]
    for side, idx in (("stationary", ins.fmt_s), ("moving", ins.fmt_m)):
        if idx >= len(names):
            return Error.FORMAT, (f"{mode.name.lower()} {side} format index {idx} is not allowed; "
                                  f"allowed: {', '.join(f'{i}={n}' for i, n in enumerate(names))}")
    tiled = (ins.tile_rows, ins.tile_cols) != (rows, cols) or ins.tile_row or ins.tile_col
    if mode == Mode.DOUBLE_ROW and (tiled or ins.transpose):
        return Error.DOUBLE_ROW_COMBO, "double_row cannot be combined with tiling or transpose"
    if tiled:
        row_t = ins.tile_rows != rows
        col_t = ins.tile_cols != cols
        if row_t and col_t:
            return Error.TILE, (f"tile_size ({ins.tile_rows}, {ins.tile_cols}) tiles rows and "
                                f"columns at once; allowed: (64|32, {cols}) or ({rows}, 64|32)")
        if row_t and (ins.tile_rows not in _ROW_TILES or ins.tile_col):
            return Error.TILE, (f"row tile size {ins.tile_rows} at column {ins.tile_col} is not "
                                f"allowed; allowed: 64 or 32 at column 0")
        if col_t and (ins.tile_cols not in _COL_TILES or ins.tile_row):
            return Error.TILE, (f"column tile size {ins.tile_cols} at row {ins.tile_row} is not "
                                f"allowed; allowed: 64 or 32 at row 0")
        if ins.tile_row < 0 or ins.tile_row % ins.tile_rows or ins.tile_row + ins.tile_rows > rows:
            return Error.TILE, (f"tile_position row {ins.tile_row} is not a multiple of the tile "
                                f"size {ins.tile_rows} within {rows} rows")
        if ins.tile_col < 0 or ins.tile_col % ins.tile_cols or ins.tile_col + ins.tile_cols > cols:
            return Error.TILE, (f"tile_position column {ins.tile_col} is not a multiple of the "
                                f"tile size {ins.tile_cols} within {cols} columns")
    if not 1 <= ins.k <= ins.tile_rows:
        return Error.K_RANGE, f"K={ins.k} must be in 1..{ins.tile_rows} (rows of the tile)"
    if not 1 <= ins.m <= ins.tile_cols:
        return Error.M_RANGE, f"M={ins.m} must be in 1..{ins.tile_cols} (columns of the tile)"
    if ins.op == Op.MM:
        if not 1 <= ins.n <= MAX_N:
            return Error.N_RANGE, f"N={ins.n} must be in 1..{MAX_N}"
        if stationary is None:
            return Error.NO_STATIONARY, "MultiplyMoving before any LoadStationary"
        st = stationary.whole(rows, cols)
        same = (st.mode == ins.mode and st.fmt_s == ins.fmt_s and st.k == ins.k and st.m == ins.m
                and st.transpose == ins.transpose and st.tile_row == ins.tile_row
                and st.tile_rows == ins.tile_rows and st.tile_col == ins.tile_col
                and st.tile_cols == ins.tile_cols)
        if not same:
            return Error.MODE_MISMATCH, ("MultiplyMoving mode, stationary format, K, M, transpose "
                                         "and tile must equal those of its LoadStationary")
    return None
