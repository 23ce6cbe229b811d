"""The mode table: every PE mode, with what it computes and what it costs.

One row (:class:`PeMode`) per mode.  Everything that depends on the mode reads this table: the
golden (:mod:`ncrtl.model.tensor_engine.matmul`), the instruction rules
(:func:`ncrtl.model.tensor_engine.isa.check`) and the timing model, the PE and the control of the
RTL (``hdl/tensor_engine``), the fused dot-add unit's configurations, the block registry and the
CLI help.  A new mode is a new row.

What a mode fixes (the build options of an engine, such as its size or tile modules, are not
here):

* the formats of each side, indexed by the instruction's ``fmt_s`` / ``fmt_m`` fields;
* products per PE step: one fused, singly rounded ``psum + sum_j s_j * x_j`` per step;
* whether the product sum is scaled by E8M0 block scales (MX);
* the beat interval: cycles per stationary or moving beat, and for a transpose;
* the tilings the Tensor Engine accepts;
* whether the mode runs M:N structured-sparse matmuls (``sparse``: ``nc_matmul_sparse``, a
  compressed stationary with 4-bit position tags, :mod:`ncrtl.model.tensor_engine.sparse`).

The MX row (quad MXFP8 / MXFP4 with E8M0 block scales, NeuronCore-v4 ``nc_matmul_mx``) is
selected by its own instruction, never implied by operand formats (``scale``): its contraction
size is a multiple of 32 partitions (``k_multiple``: scale groups of 8 partitions x 4 packed
elements, 4 groups per 32-partition quadrant) and its stationary free size is even
(``m_multiple``).
"""

from dataclasses import dataclass

from .fp.formats import get_format

__all__ = [
    "PeMode",
    "MODES",
    "ENGINE_MODES",
    "FP8_FORMATS",
    "MX_FORMATS",
    "MX_DTYPES",
    "get_mode",
    "mode_by_code",
    "operand_formats",
    "operations",
    "operation",
    "MODE_BITS",
    "FORMAT_BITS",
    "FAMILIES",
    "pe_modes",
    "family_of",
    "narrowest_pe_modes",
    "SPARSE_RATIOS",
    "SPARSE_GROUP",
    "SPARSE_MODES",
]

#: The FP8 formats of the fp8 mode, in fmt-field order.
FP8_FORMATS = ("fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "fp8_e3m4")

#: The element formats of the MX mode (OCP MXFP8 / MXFP4), in fmt-field order.
MX_FORMATS = ("fp8_e4m3fn", "fp8_e5m2", "fp4_e2m1fn")

#: The MX data types by their OCP names (``mxfp8_e4m3fn``, ``mxfp8_e5m2``, ``mxfp4_e2m1fn``): the
#: element format of each.
MX_DTYPES = {f"mx{f}": f for f in MX_FORMATS}

#: Tile sizes of the row and column tiling modes (2 x 64 on NeuronCore-v2+, 4 x 32 on v3+).
TILE_SIZES = (32, 64)

#: Compression ratios of the sparse matmul (seed 000): 4:8, 4:12 and 4:16 (at most 4 non-zeros in
#: every 4 x ratio elements along the contraction).
SPARSE_RATIOS = (2, 3, 4)

#: Non-zeros kept per group (the ``M`` of ``M:N``): compressed stationary rows per group.
SPARSE_GROUP = 4

#: Width of the instruction's mode field and of each format field.
MODE_BITS = 3
FORMAT_BITS = 2


@dataclass(frozen=True)
class PeMode:
    """One row of the mode table.

    Parameters
    ----------
    name : str
        The mode's name (``"bf16"``, ``"double_row"``).
    code : int
        Value of the instruction's ``mode`` field.
    formats_s, formats_m : tuple of str
        Formats of the stationary and the moving side, indexed by ``fmt_s`` / ``fmt_m``.
    products : int
        Products per PE step (MACs per PE per beat): 1, 2 (double_row), 4 (MX).
    scale : bool
        The product sum is scaled by two E8M0 block scales (MX).
    beat_interval : int
        Cycles per stationary and per moving beat of a matmul (4 for fp32: quarter rate).
    transpose_interval : int or None
        Cycles per beat of a transpose in this mode; None: the mode cannot transpose.
    row_tiles, col_tiles : tuple of int
        Row / column tile sizes the mode accepts (empty: no tiling on that axis).
    engine : bool
        The Tensor Engine serves the mode.
    perf_mode : str or None
        The ``perf_mode`` argument of ``nc_matmul`` that selects the mode (``"double_row"``).
    k_multiple : int
        K (partitions) must be a multiple of this on the hardware (MX: 32); an engine whose
        tiles are scaled down (``tile_unit`` < 32) scales it alike (:meth:`k_step`).
    m_multiple : int
        M (stationary free size) must be a multiple of this (MX: 2).
    max_n, max_n_bf16 : int
        Largest moving free size N of one MultiplyMoving whose result PSUM accumulates in FP32
        (``max_n``: one 2 KiB bank row of FP32, 512) and in BF16 (``max_n_bf16``: the instruction's
        ``bf16_out``; MX: 1024, a bank row of BF16).
    sparse : bool
        The mode runs M:N structured-sparse matmuls (seed 000: FP8, BF16, FP16 and TF32; one
        product per PE step, the moving operand picked by the PE's tag).
    """

    name: str
    code: int
    formats_s: tuple
    formats_m: tuple
    products: int = 1
    scale: bool = False
    beat_interval: int = 1
    transpose_interval: object = 1
    row_tiles: tuple = TILE_SIZES
    col_tiles: tuple = TILE_SIZES
    engine: bool = True
    perf_mode: object = None
    k_multiple: int = 1
    m_multiple: int = 1
    max_n: int = 512
    max_n_bf16: int = 512
    sparse: bool = False

    def __post_init__(self):
        for side in (self.formats_s, self.formats_m):
            if not side or len(side) > 1 << FORMAT_BITS:
                raise ValueError(
                    f"mode {self.name}: 1..{1 << FORMAT_BITS} formats per side, not {len(side)}"
                )
            for f in side:
                get_format(f)  # a known format
        if not 0 <= self.code < 1 << MODE_BITS:
            raise ValueError(f"mode {self.name}: code {self.code} does not fit {MODE_BITS} bits")

    def __str__(self):
        return self.name

    @property
    def transposes(self):
        """The mode can run a transpose."""
        return self.transpose_interval is not None

    def interval(self, transpose=False):
        """Cycles per beat of a matmul or (``transpose``) a transpose in this mode."""
        return self.transpose_interval if transpose else self.beat_interval

    def format_of(self, side, index):
        """Format name of ``index`` on ``side`` (``"s"`` or ``"m"``), or None if out of range."""
        formats = self.formats_s if side == "s" else self.formats_m
        return formats[index] if 0 <= index < len(formats) else None

    def macs_per_cycle(self, rows, cols):
        """Peak MACs per cycle of a ``rows x cols`` array in this mode."""
        return rows * cols * self.products / self.beat_interval

    def n_limit(self, bf16_out=False):
        """Largest N of a MultiplyMoving whose result goes to FP32 (or, ``bf16_out``, BF16)
        PSUM."""
        return self.max_n_bf16 if bf16_out else self.max_n

    def k_step(self, tile_unit=32):
        """The K granule on an engine whose tile sizes are ``tile_unit`` and ``2 * tile_unit``
        (32 on the hardware): ``k_multiple`` scaled by ``tile_unit / 32``, at least 1."""
        return max(1, self.k_multiple * tile_unit // 32)

    @property
    def tiles(self):
        """The mode accepts a row or a column tiling."""
        return bool(self.row_tiles or self.col_tiles)


MODES = (
    PeMode("fp32", 0, ("fp32",), ("fp32",), beat_interval=4, transpose_interval=2),
    PeMode("tf32", 1, ("tf32",), ("tf32",), sparse=True),
    PeMode("bf16", 2, ("bf16",), ("bf16",), sparse=True),
    PeMode("fp16", 3, ("fp16",), ("fp16",), sparse=True),
    PeMode("fp8", 4, FP8_FORMATS, FP8_FORMATS, sparse=True),
    PeMode(
        "double_row",
        5,
        FP8_FORMATS[:3],
        FP8_FORMATS[:3],
        products=2,
        transpose_interval=None,
        row_tiles=(),
        col_tiles=(),
        perf_mode="double_row",
    ),
    PeMode(
        "mx",
        6,
        MX_FORMATS,
        MX_FORMATS,
        products=4,
        scale=True,
        transpose_interval=None,
        col_tiles=(),
        k_multiple=32,
        m_multiple=2,
        max_n_bf16=1024,
    ),
)

#: The modes the Tensor Engine serves.
ENGINE_MODES = tuple(m for m in MODES if m.engine)

#: The modes that run sparse matmuls.
SPARSE_MODES = tuple(m for m in ENGINE_MODES if m.sparse)

_BY_NAME = {m.name: m for m in MODES}
_BY_CODE = {m.code: m for m in MODES}
assert len(_BY_NAME) == len(_BY_CODE) == len(MODES), "mode names and codes must be unique"


def get_mode(name):
    """The :class:`PeMode` called ``name``; ``ValueError`` listing the modes otherwise."""
    if isinstance(name, PeMode):
        return name
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown mode {name!r}; modes: {', '.join(_BY_NAME)}") from None


def mode_by_code(code):
    """The :class:`PeMode` of an instruction's mode field value, or None."""
    return _BY_CODE.get(int(code))


def operand_formats(modes=ENGINE_MODES):
    """Every format some mode of ``modes`` takes on either side, in table order."""
    out = []
    for m in modes:
        for f in m.formats_s + m.formats_m:
            if f not in out:
                out.append(f)
    return tuple(out)


def operations(modes=ENGINE_MODES, *, max_transpose_bits=32):
    """Names of the Tensor Engine operations of ``modes``: a matmul in each mode (its name), and
    a transpose in each mode that can transpose (``transpose_<mode>``) whose stationary
    container has at most ``max_transpose_bits`` bits.  ``ncrtl sim matmul --dtype`` and the
    conformance programs take these names."""
    out = [m.name for m in modes]
    out += [
        f"transpose_{m.name}"
        for m in modes
        if m.transposes
        and max(get_format(f).container_bits for f in m.formats_s) <= max_transpose_bits
    ]
    return tuple(out)


def operation(name):
    """``(PeMode, transpose)`` of an operation name (:func:`operations`)."""
    transpose = isinstance(name, str) and name.startswith("transpose_")
    mode = get_mode(name[len("transpose_") :] if transpose else name)
    if transpose and not mode.transposes:
        raise ValueError(
            f"mode {mode.name} cannot transpose; operations: {', '.join(operations())}"
        )
    return mode, transpose


#: Mode families of a PE built for part of the mode table (``pe_modes``): the modes that share
#: their multipliers' formats.
FAMILIES = {
    "all": tuple(m.name for m in ENGINE_MODES),
    "bf16": ("bf16", "fp16"),
    "fp8": ("fp8", "double_row"),
    "fp32": ("fp32", "tf32"),
    "mx": ("mx",),
}


def pe_modes(spec="all"):
    """The engine modes a PE is built for, in table order, from ``spec``: a family of
    :data:`FAMILIES` (``all``, ``bf16``, ``fp8``, ``fp32``, ``mx``), a mode name, or several
    of these joined by ``,`` or ``+`` (``bf16,fp8``); a sequence of names or :class:`PeMode`
    works too.  ``ValueError`` naming the bad item and the choices otherwise."""
    items = spec.replace("+", ",").split(",") if isinstance(spec, str) else list(spec)
    names = set()
    for item in items:
        if isinstance(item, PeMode):
            item = item.name
        item = str(item).strip()
        if item in FAMILIES:
            names.update(FAMILIES[item])
        elif item in _BY_NAME and _BY_NAME[item].engine:
            names.add(item)
        else:
            raise ValueError(
                f"pe_modes {item!r} is neither a mode family ({', '.join(FAMILIES)}) nor an "
                f"engine mode ({', '.join(m.name for m in ENGINE_MODES)})"
            )
    if not names:
        raise ValueError(f"pe_modes {spec!r} names no mode")
    return tuple(m for m in ENGINE_MODES if m.name in names)


def family_of(mode):
    """The name of the family of :data:`FAMILIES` (other than ``all``) holding ``mode`` (a name
    or a :class:`PeMode`): the families split the engine modes between them."""
    name = get_mode(mode).name
    return next(f for f, names in FAMILIES.items() if f != "all" and name in names)


def narrowest_pe_modes(used):
    """``(spec, why)``: the narrowest PE build that serves every engine mode of ``used`` (names
    or :class:`PeMode`, e.g. the modes of a program's instructions), as a ``pe_modes`` spec, and
    the reason in words.

    The build is the union of the families of those modes (:func:`family_of`): a family is the
    unit a build is cached by, so a bf16 program and an fp16 one share the bf16-family build;
    ``all`` (the reference and synthesis design) when the union is every mode.  A program
    without a matmul gets the bf16 family, the smallest build."""
    names = [get_mode(m).name for m in used]
    if not names:
        return "bf16", "the program has no matmul: the smallest build"
    families = [f for f in FAMILIES if f != "all" and any(family_of(n) == f for n in names)]
    modes = pe_modes(families)
    spec = "all" if modes == ENGINE_MODES else "+".join(families)
    served = ", ".join(m.name for m in ENGINE_MODES if m.name in names)
    kind = "every mode" if spec == "all" else ("the family" if len(families) == 1 else "families")
    return (
        spec,
        f"the narrowest build serving {served} ({kind}: {', '.join(m.name for m in modes)})",
    )
