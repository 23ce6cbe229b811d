"""PSUM write instructions: fields, validation rules and the bit encoding the RTL decodes.

One :class:`Write` describes where the next ``n`` output vectors of the Tensor Engine go and how
they combine with what is there (NKI ``psum_accumulate_flag``).  :func:`check` returns the first
rule a write breaks (an :class:`Error` code and a message) or ``None``; the golden raises
``ValueError`` with the message, the RTL pulses ``o_error`` with the code, consumes the write's
``n`` data beats without writing anything and stays usable.  :func:`encode` / :func:`decode` define
the 32-bit instruction word of ``ncrtl.hdl.psum``; the layout is :data:`FIELDS` (LSB first).

See docs/psum.md for the contract.
"""

import enum
from dataclasses import dataclass

from ncrtl.model.fields import pack_fields, unpack_fields

__all__ = [
    "Dtype",
    "Rounding",
    "Flag",
    "Error",
    "Write",
    "Geometry",
    "FIELDS",
    "INSTR_BITS",
    "MAX_WRITE_N",
    "encode",
    "decode",
    "check",
    "GroupState",
]


class Dtype(enum.IntEnum):
    """Element type of a PSUM write."""

    FP32 = 0  #: 32-bit slots; overwrite stores the FP32 bits, accumulate adds in FP32 (RNE)
    BF16 = 1  #: 16-bit slots; FP32 -> BF16 before the write (RNE or SR), FP32 add on accumulate
    RAW16 = 2  #: 16-bit slots; the low 16 bits of the beat, unchanged (transpose outputs)


class Rounding(enum.IntEnum):
    """Rounding of a BF16 write (FP32 -> BF16)."""

    RNE = 0
    SR = 1


class Flag(enum.IntFlag):
    """``psum_accumulate_flag`` bits."""

    FIRST = 1  #: bit0: first of a group, overwrite
    LAST = 2  #: bit1: last of a group (accumulate unless FIRST), raises group-complete
    FIRST_ACCUMULATE = 4  #: bit2: first of a group, but accumulate onto the existing content


class Error(enum.IntEnum):
    """Error codes of ``o_error_code`` (0 = none), in the order :func:`check` tests them."""

    NONE = 0
    BANK = 1  # bank >= banks
    DTYPE = 2  # dtype field 3 (reserved)
    COUNT = 3  # n == 0, or n above what the n field encodes
    RANGE = 4  # col + n beyond the bank row (rows fp32 / 2*rows 16-bit slots)
    FLAGS = 5  # bit0 and bit2 together
    ROUNDING = 6  # stochastic rounding with a non-BF16 dtype
    RAW_ACCUMULATE = 7  # RAW16 without bit0 (raw writes can only overwrite)
    NO_GROUP = 8  # accumulate continuation (bit0, bit2 clear) into a bank with no open group
    GROUP_DTYPE = 9  # continuation whose dtype differs from its open group's


#: Instruction word layout, LSB first: (field, width).
FIELDS = (("bank", 4), ("col", 11), ("n", 11), ("dtype", 2), ("rounding", 1), ("flags", 3))
INSTR_BITS = sum(w for _, w in FIELDS)  # 32
#: Most output vectors of one write: what the ``n`` field encodes (a BF16 row of a 4 KiB bank,
#: 2048 values, takes two writes).
MAX_WRITE_N = (1 << dict(FIELDS)["n"]) - 1


@dataclass(frozen=True)
class Geometry:
    """PSUM geometry: ``partitions`` x ``banks`` banks of ``bank_bytes`` per partition.

    The hardware is 128 x 8 x 2 KiB (16 KiB per partition, 2 MiB).  A bank row of a partition
    holds ``rows = bank_bytes // 4`` FP32 or ``2 * rows`` 16-bit values.
    """

    partitions: int = 128
    banks: int = 8
    bank_bytes: int = 2048

    def __post_init__(self):
        for name in ("partitions", "banks", "bank_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
        if not 1 <= self.partitions <= 128:
            raise ValueError(f"partitions must be an integer in 1..128, not {self.partitions!r}")
        if not 1 <= self.banks <= 16:
            raise ValueError(f"banks must be an integer in 1..16, not {self.banks!r}")
        if self.bank_bytes < 8 or self.bank_bytes & (self.bank_bytes - 1) or self.bank_bytes > 4096:
            raise ValueError(
                f"bank_bytes must be a power of two in 8..4096, not {self.bank_bytes!r}"
            )

    @property
    def rows(self):
        """32-bit words per partition per bank (512 on the hardware)."""
        return self.bank_bytes // 4

    def capacity(self, dtype):
        """Elements of ``dtype`` in one bank row of a partition (512 FP32, 1024 BF16/RAW16)."""
        return self.rows if Dtype(dtype) == Dtype.FP32 else 2 * self.rows


@dataclass(frozen=True)
class Write:
    """One PSUM write instruction (the destination of ``n`` Tensor Engine output vectors).

    Parameters
    ----------
    bank : int
        PSUM bank.
    col : int
        First column (element index of ``dtype`` within the bank row).
    n : int
        Output vectors (columns ``col .. col + n - 1``), one data beat each.
    dtype : Dtype
    rounding : Rounding
        BF16 only: RNE or SR.
    flags : int
        ``psum_accumulate_flag`` (:class:`Flag` bits); 3 (first and last: a one-write group that
        overwrites) is the NKI default.
    """

    bank: int
    col: int
    n: int
    dtype: Dtype = Dtype.FP32
    rounding: Rounding = Rounding.RNE
    flags: int = 3

    @property
    def overwrite(self):
        return bool(self.flags & Flag.FIRST)

    @property
    def opens(self):
        return bool(self.flags & (Flag.FIRST | Flag.FIRST_ACCUMULATE))

    @property
    def closes(self):
        return bool(self.flags & Flag.LAST)


def encode(w):
    """The instruction word (int) of ``w``."""
    return pack_fields(FIELDS, w, "PSUM write")


def decode(word):
    vals = unpack_fields(FIELDS, word)
    return Write(**vals)


@dataclass
class GroupState:
    """Accumulation-group state of one bank: open or not, and the dtype of the open group."""

    open: bool = False
    dtype: int = 0


def check(w, geometry, group):
    """The first rule ``w`` breaks, or ``None``.

    Parameters
    ----------
    w : Write
    geometry : Geometry
    group : GroupState or None
        State of the addressed bank before ``w`` (``None``: no group open).

    Returns
    -------
    (Error, str) or None
    """
    g = geometry
    if not 0 <= w.bank < g.banks:
        return Error.BANK, f"bank {w.bank} is out of range; PSUM has banks 0..{g.banks - 1}"
    if int(w.dtype) not in tuple(Dtype):
        return Error.DTYPE, (
            f"dtype {int(w.dtype)} is reserved; dtypes: "
            + ", ".join(f"{d.value}={d.name.lower()}" for d in Dtype)
        )
    if w.n < 1:
        return Error.COUNT, f"n={w.n}: a write needs at least one output vector"
    if w.n > MAX_WRITE_N:
        return Error.COUNT, (
            f"n={w.n} does not fit the instruction's {dict(FIELDS)['n']}-bit n field: a write "
            f"takes at most {MAX_WRITE_N} output vectors"
        )
    cap = g.capacity(w.dtype)
    if w.col < 0 or w.col + w.n > cap:
        return Error.RANGE, (
            f"columns {w.col}..{w.col + w.n - 1} do not fit a bank row of "
            f"{cap} {Dtype(w.dtype).name.lower()} values"
        )
    if w.flags & Flag.FIRST and w.flags & Flag.FIRST_ACCUMULATE:
        return Error.FLAGS, (
            f"psum_accumulate_flag {w.flags}: bit0 (first, overwrite) and bit2 "
            f"(first, accumulate) are exclusive"
        )
    if int(w.rounding) == Rounding.SR and w.dtype != Dtype.BF16:
        return Error.ROUNDING, (
            f"stochastic rounding needs a bf16 destination, not {Dtype(w.dtype).name.lower()}"
        )
    if w.dtype == Dtype.RAW16 and not w.flags & Flag.FIRST:
        return Error.RAW_ACCUMULATE, (
            f"raw16 (transpose) writes can only overwrite: "
            f"psum_accumulate_flag {w.flags} lacks bit0"
        )
    if not w.opens:
        if group is None or not group.open:
            return Error.NO_GROUP, (
                f"psum_accumulate_flag {w.flags} accumulates into bank "
                f"{w.bank}, which has no open accumulation group"
            )
        if group.dtype != w.dtype:
            return Error.GROUP_DTYPE, (
                f"the group open in bank {w.bank} is "
                f"{Dtype(group.dtype).name.lower()}; a write of "
                f"{Dtype(w.dtype).name.lower()} cannot join it"
            )
    return None
