"""Number formats of the NeuronCore datapath: the single table both the golden model and the RTL read.

Every format is described by its bit layout and by the rule that decides which encodings are
special.  A finite encoding decodes *exactly* to ``(-1)**sign * sig * 2**exp`` where ``sig`` is the
integer significand (implicit bit included for normals) and ``exp`` the exponent of its least
significant bit.  Every value of every format here (FP32 included) is exactly representable in a
float64, which the golden model relies on.

Special-value rules (the ``special`` field):

``"ieee"``
    Exponent field all ones: mantissa zero is +-Inf, anything else NaN (FP32, TF32, BF16, FP16,
    FP8 e4m3 / e5m2 / e3m4).
``"fn"``
    OCP "finite" encoding: only ``S.1111.111`` is NaN, no infinities (FP8 e4m3fn).
``"none"``
    Every encoding is a finite number (FP4 e2m1fn).
``"e8m0"``
    Unsigned power-of-two scale ``2**(bits - 127)``; ``0xFF`` is NaN; there is no zero (E8M0).

TF32 lives in an FP32 container: the hardware ignores the low 13 mantissa bits, so decoding masks
them off (an FP32 NaN whose payload sits only in those bits therefore reads as Inf).
"""

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = ["Format", "FORMATS", "get_format", "format_of_dtype"]


@dataclass(frozen=True)
class Format:
    """Bit layout and special-value rule of one number format.

    Parameters
    ----------
    name : str
        Canonical project name (``"bf16"``, ``"fp8_e4m3"``, ...).
    exp_bits, man_bits : int
        Width of the exponent and (stored) mantissa fields.
    bias : int
        Exponent bias.
    special : str
        ``"ieee"``, ``"fn"``, ``"none"`` or ``"e8m0"`` (see the module docstring).
    signed : bool
        Whether the encoding has a sign bit.
    container_bits : int
        Width of the storage word (32 for TF32, whose encoding is an FP32 word).
    ignored_low_bits : int
        Low mantissa bits of the container the hardware ignores (13 for TF32).
    dtype : numpy dtype or None
        The numpy / ml_dtypes dtype whose values are exactly this format, if any.
    overflow : str
        What round-to-nearest does above the largest finite value when encoding:
        ``"inf"`` (IEEE), ``"nan"`` (e4m3fn, as ml_dtypes) or ``"saturate"`` (FP4, as ml_dtypes).
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    special: str
    signed: bool = True
    container_bits: int = 0
    ignored_low_bits: int = 0
    dtype: object = None
    overflow: str = "inf"
    aliases: tuple = field(default=(), compare=False)

    def __post_init__(self):
        if not self.container_bits:
            object.__setattr__(self, "container_bits", self.bits)

    # -- layout ------------------------------------------------------------------------------
    @property
    def bits(self):
        """Width of the encoding (sign + exponent + mantissa)."""
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def has_inf(self):
        return self.special == "ieee"

    @property
    def has_nan(self):
        return self.special in ("ieee", "fn", "e8m0")

    @property
    def has_zero(self):
        return self.special != "e8m0"

    @property
    def precision(self):
        """Significand width in bits, implicit bit included."""
        return self.man_bits + 1

    @property
    def emin(self):
        """Unbiased exponent of the smallest normal (also of the subnormals' scale)."""
        if self.special == "e8m0":
            return -self.bias  # code 0 is 2**-127: no subnormals, no zero
        return 1 - self.bias

    @property
    def emax(self):
        """Unbiased exponent of the largest finite binade."""
        top = (1 << self.exp_bits) - 1
        if self.special in ("ieee", "e8m0"):
            top -= 1  # the all-ones exponent is Inf/NaN (IEEE) or NaN (E8M0)
        return top - self.bias

    @property
    def lsb_exp_min(self):
        """Exponent of the least significant bit of the smallest subnormal."""
        return self.emin - self.man_bits

    @property
    def max_sig(self):
        """Integer significand of the largest finite value (at exponent ``emax - man_bits``)."""
        full = (1 << self.precision) - 1
        if self.special == "fn":
            full -= 1  # S.1111.111 is NaN, so the top binade ends one step lower
        return full

    @property
    def max_finite(self):
        return float(self.max_sig) * 2.0 ** (self.emax - self.man_bits)

    @property
    def smallest_subnormal(self):
        return 2.0**self.lsb_exp_min

    @property
    def storage_dtype(self):
        """Unsigned integer dtype that holds one container word."""
        return {8: np.uint8, 16: np.uint16, 32: np.uint32}[max(8, self.container_bits)]

    def __repr__(self):
        return f"Format({self.name!r})"


def _f(name, e, m, bias, special, dtype, **kw):
    return Format(
        name, e, m, bias, special, dtype=np.dtype(dtype) if dtype is not None else None, **kw
    )


#: Every format the datapath knows, by canonical name.
FORMATS = {
    f.name: f
    for f in (
        _f("fp32", 8, 23, 127, "ieee", np.float32, aliases=("float32",)),
        _f(
            "tf32",
            8,
            23,
            127,
            "ieee",
            None,
            container_bits=32,
            ignored_low_bits=13,
            aliases=("tfloat32",),
        ),
        _f("bf16", 8, 7, 127, "ieee", ml_dtypes.bfloat16, aliases=("bfloat16",)),
        _f("fp16", 5, 10, 15, "ieee", np.float16, aliases=("float16",)),
        _f("fp8_e4m3", 4, 3, 7, "ieee", ml_dtypes.float8_e4m3, aliases=("float8_e4m3", "e4m3")),
        _f(
            "fp8_e4m3fn",
            4,
            3,
            7,
            "fn",
            ml_dtypes.float8_e4m3fn,
            overflow="nan",
            aliases=("float8_e4m3fn", "e4m3fn"),
        ),
        _f("fp8_e5m2", 5, 2, 15, "ieee", ml_dtypes.float8_e5m2, aliases=("float8_e5m2", "e5m2")),
        _f("fp8_e3m4", 3, 4, 3, "ieee", ml_dtypes.float8_e3m4, aliases=("float8_e3m4", "e3m4")),
        _f(
            "fp4_e2m1fn",
            2,
            1,
            1,
            "none",
            ml_dtypes.float4_e2m1fn,
            overflow="saturate",
            aliases=("float4_e2m1fn", "e2m1fn", "fp4"),
        ),
        _f(
            "e8m0",
            8,
            0,
            127,
            "e8m0",
            ml_dtypes.float8_e8m0fnu,
            signed=False,
            overflow="nan",
            aliases=("float8_e8m0fnu", "e8m0fnu"),
        ),
    )
}

_ALIASES = {}
for _fmt in FORMATS.values():
    _ALIASES[_fmt.name] = _fmt
    for _a in _fmt.aliases:
        _ALIASES[_a] = _fmt


def get_format(name):
    """Look up a format by canonical name or alias; a :class:`Format` passes through.

    Raises
    ------
    ValueError
        For an unknown name, listing the known ones.
    """
    if isinstance(name, Format):
        return name
    if isinstance(name, str) and name in _ALIASES:
        return _ALIASES[name]
    raise ValueError(f"unknown number format {name!r}; known formats: {', '.join(FORMATS)}")


def format_of_dtype(dtype):
    """The format whose values a numpy dtype holds (FP32 for float32: TF32 must be named).

    Raises
    ------
    ValueError
        If the dtype is not one of the datapath's formats.
    """
    dtype = np.dtype(dtype)
    for fmt in FORMATS.values():
        if fmt.dtype is not None and fmt.dtype == dtype and fmt.name != "tf32":
            return fmt
    known = ", ".join(str(f.dtype) for f in FORMATS.values() if f.dtype is not None)
    raise ValueError(f"dtype {dtype} is not a datapath number format; known dtypes: {known}")
