"""``nki.language`` as ncrtl models it: buffers, tensor creation, slicing, loops, tile sizes,
dtypes and the operator tokens (docs/kernels.md lists what is modelled).

A name of the NKI language that ncrtl does not model is still an attribute, shown as its name
(``nl.hypot``): calling it raises :class:`~ncrtl.nki.NotModelled` naming it and the kernel's
line (never an AttributeError); a kernel may subclass it (``class X(nl.hypot)``).
"""

from __future__ import annotations

import enum
import math

import numpy as np

from ncrtl.model.kernel.dtypes import DTYPES, dtype_of

from . import _trace
from ._trace import _DS, NotModelled, _int, caller_line, current, fail, not_modelled

# -- memory buffers ------------------------------------------------------------------------------

sbuf = "sbuf"
psum = "psum"
private_hbm = "private_hbm"
hbm = private_hbm
shared_hbm = "shared_hbm"
_BUFFERS = {sbuf: "sbuf", psum: "psum", private_hbm: "hbm", shared_hbm: "hbm"}


class MemoryRegion(str, enum.Enum):
    """The memories as the reference's enumeration: each member equals its buffer constant
    (``nl.MemoryRegion.sbuf == nl.sbuf``), so either is a ``buffer=``."""

    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"


#: The class of a kernel's tensors and views (``isinstance(t, nl.NkiTensor)``, annotations).
NkiTensor = _trace.NkiTensor


def is_hbm(buf):
    return buf in (private_hbm, shared_hbm)


def is_on_chip(buf):
    return buf in (sbuf, psum)


def is_psum(buf):
    return buf == psum


def is_sbuf(buf):
    return buf == sbuf


# -- dtypes (their NKI names; a tensor's .dtype is one of these strings) -------------------------

bool_ = "bool_"
int8, uint8, int16, uint16, int32, uint32 = "int8", "uint8", "int16", "uint16", "int32", "uint32"
float16, float32, bfloat16, tfloat32 = "float16", "float32", "bfloat16", "tfloat32"
float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e3m4 = (
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e3m4",
)
float8_e8m0fnu = "uint8"  # an MX scale: E8M0 bytes
float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4 = (
    "float8_e4m3fn_x4",
    "float8_e5m2_x4",
    "float4_e2m1fn_x4",
)
assert all(n in DTYPES for n in (float8_e4m3fn_x4, float4_e2m1fn_x4, bfloat16))


# -- tile sizes ------------------------------------------------------------------------------------


class _TileSizes(type):
    """Tile limits follow the core a kernel is traced on (its partitions and PE columns);
    outside a trace, NeuronCore-v3's."""

    _GEOMETRY = {
        "pmax": lambda c: c.partitions,
        "gemm_stationary_fmax": lambda c: c.cols,
        "gemm_moving_fmax": lambda c: c.psum_bank_bytes // 4,
        "psum_bank_fmax": lambda c: c.psum_bank_bytes // 4,
        "psum_fmax": lambda c: c.psum_bank_bytes // 4,
        "psum_bank_fmax_bytes": lambda c: c.psum_bank_bytes,
        "psum_num_banks": lambda c: c.psum_banks,
        "sbuf_fmax_bytes": lambda c: c.sbuf_partition_bytes,
        "sbuf_fmax": lambda c: c.sbuf_partition_bytes // 4,
        "total_available_sbuf_size": lambda c: c.sbuf_partition_bytes,  # per partition
        "sbuf_size_bytes": lambda c: c.sbuf_partition_bytes * c.partitions,
    }

    def __getattribute__(cls, name):
        rule = type.__getattribute__(cls, "_GEOMETRY").get(name)
        if rule is not None:
            from ncrtl.nki import _trace

            tr = _trace.current_or_none()
            if tr is not None:
                return rule(tr.core)
        return super().__getattribute__(name)


class tile_size(metaclass=_TileSizes):
    """The hardware's tile limits (NeuronCore-v3's; inside a trace those of the core it is
    traced on: its partitions, PE columns and PSUM banks)."""

    pmax = 128
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    psum_fmax = 512
    psum_num_banks = 8
    bn_stats_fmax = 512  # nisa.bn_stats' largest free size
    sbuf_fmax_bytes = total_available_sbuf_size = 229376
    sbuf_fmax = 229376 // 4
    sbuf_size_bytes = 229376 * 128


# -- loops (unrolled when the kernel is traced, as NKI unrolls them) -------------------------------


_RANGE = ("start", "stop", "step")


def _range(call, start, stop, step):
    """``range(start, stop, step)`` (``range(start)`` without ``stop``), its arguments
    integers known when the kernel is traced."""
    if stop is None:
        start, stop = 0, start
    start, stop, step = (_int(v, what, call) for v, what in zip((start, stop, step), _RANGE))
    if step == 0:
        fail(call, "step must not be 0")
    return range(start, stop, step)


def affine_range(start, stop=None, step=1):
    return _range("nl.affine_range", start, stop, step)


def sequential_range(start, stop=None, step=1):
    return _range("nl.sequential_range", start, stop, step)


def static_range(start, stop=None, step=1):
    return _range("nl.static_range", start, stop, step)


def ds(start, size):
    """A slice of ``size`` elements from ``start``: ``t[:, nl.ds(i * 512, 512)]``."""
    call = "nl.ds"
    return _DS(_int(start, "start", call), _int(size, "size", call))


def _axis(call, grid, axis):
    a = _int(axis, "axis", call)
    if not -len(grid) <= a < len(grid):
        fail(call, f"axis {a} is outside the launch grid {list(grid)}")
    return a % len(grid)


def program_id(axis=0):
    """This instance's index along ``axis`` of the launch grid (``kernel[g0, g1, ...]``)."""
    tr = current("nl.program_id")
    grid = tr.grid or (1,)
    return tr.position[_axis("nl.program_id", grid, axis)]


def num_programs(axes=0):
    """The instances along ``axes`` (an axis or a tuple of them; None: the whole grid)."""
    call = "nl.num_programs"
    grid = current(call).grid or (1,)
    if axes is None:
        axes = tuple(range(len(grid)))
    if isinstance(axes, (tuple, list)):
        n = 1
        for a in axes:
            n *= grid[_axis(call, grid, a)]
        return n
    return grid[_axis(call, grid, axes)]


def program_ndim():
    """The launch grid's dimensions; 0 for a kernel called without one."""
    grid = current("nl.program_ndim").grid
    return len(grid) if grid else 0


# -- kernel-side classes ----------------------------------------------------------------------


class NKIObject:
    """The base of a kernel's own classes (configurations, tile plans): built with keywords,
    each set as an attribute.  A field a subclass annotates without a default defaults to None,
    also under ``@dataclass``: nki-library builds its dataclasses with only the fields a path
    uses, which NKI accepts (docs/kernels.md, "Supported API")."""

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        notes = cls.__dict__.get("__annotations__")
        if notes is None:
            notes = {}
            cls.__annotations__ = notes
        for name in notes:
            if name not in cls.__dict__:
                setattr(cls, name, None)
        # a plain class attribute (``section_idx = None``) is a field too, so that a
        # ``@dataclass`` subclass takes it as a keyword (nki-library's do)
        for name, value in list(cls.__dict__.items()):
            if name.startswith("_") or name in notes:
                continue
            if isinstance(value, (type(None), bool, int, float, str, tuple, frozenset)):
                notes[name] = type(value) if value is not None else object


# -- tensor creation -------------------------------------------------------------------------------


def ndarray(shape, dtype, buffer=sbuf, name="", address=None):
    """A new tensor (uninitialized) in ``buffer``; placed when the kernel is traced
    (docs/kernels.md, "Placement")."""
    call = "nl.ndarray"
    tr = current(call)
    if buffer not in _BUFFERS:
        fail(call, f"buffer must be nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm, not {buffer!r}")
    try:
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    except (TypeError, ValueError):
        fail(call, f"shape must hold integers known when the kernel is traced, not {shape!r}")
    if not shape or any(s < 1 for s in shape):
        fail(call, f"shape {list(shape)} must have positive sizes")
    try:
        d = dtype_of(dtype)
    except ValueError as e:
        fail(call, str(e))
    space = _BUFFERS[buffer]
    if space != "hbm":
        if len(shape) < 2:
            fail(call, f"an on-chip tensor is [partitions, free...], not {list(shape)}")
        if shape[0] > tr.core.partitions:
            fail(
                call, f"partition dimension {shape[0]} exceeds the {tr.core.partitions} partitions"
            )
    if space == "hbm":
        # refused before the golden allocates it: the core's device memory, alone and with
        # the device tensors already made (the inputs among them)
        nbytes = d.itemsize
        for s in shape:
            nbytes *= s
        held = tr.builder.hbm_bytes
        try:
            tr.core.check_device_memory(nbytes, f"{list(shape)} {d.name}", tr.num_programs)
            tr.core.check_device_memory(
                held + nbytes, "the device tensors with this one", tr.num_programs
            )
        except ValueError as e:
            fail(call, str(e))
    if address is not None:
        return _placed(call, tr, space, shape, d, address, name)
    # shared_hbm: one tensor for every instance of the grid (placed alike on both cores);
    # private_hbm (nl.hbm): each core's own
    kind = "output" if buffer == shared_hbm else "internal"
    line = caller_line()

    def make():
        return tr.builder.tensor(space, shape, d.name, name=name or None, kind=kind, line=line)

    decl = tr.device_tensor(make, shape, d.name) if space == "hbm" else make()
    return _trace.tensor(decl)


def _placed(call, tr, space, shape, d, address, name):
    """A tensor the kernel places itself (``address=(partition offset, byte offset)``): a view
    of its memory's manual placements (one tensor over the whole memory, docs/kernels.md
    "Placement"), so that two placements over the same bytes are the same memory to the
    dependency analysis, as they are to the hardware."""
    if space == "hbm":
        fail(call, "address= places SBUF and PSUM tensors; device tensors are placed by ncrtl")
    if (
        not isinstance(address, (tuple, list))
        or len(address) != 2
        or any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in address)
    ):
        fail(call, f"address must be (partition offset, byte offset), integers, not {address!r}")
    p0, f0 = int(address[0]), int(address[1])
    core = tr.core
    size = core.bytes_of(space)
    row = math.prod(shape[1:]) * d.itemsize
    if p0 < 0 or p0 + shape[0] > core.partitions:
        fail(
            call,
            f"address {tuple(address)}: partitions {p0}..{p0 + shape[0] - 1} of a {list(shape)} "
            f"tensor are outside the {core.partitions} partitions",
        )
    if f0 < 0 or f0 + row > size:
        fail(
            call,
            f"address {tuple(address)}: bytes {f0}..{f0 + row - 1} of each partition are outside "
            f"the {space.upper()}'s {size}",
        )
    if f0 % d.itemsize:
        fail(
            call,
            f"address {tuple(address)}: the byte offset must be a multiple of the {d.name} "
            f"element's {d.itemsize} bytes",
        )
    arena = tr.builder.arena(space, core.partitions, size)
    arena.pinned.append((f0, f0 + row))
    decl = tr.builder.tensor(space, shape, d.name, name=name or None, line=caller_line())
    decl.alias = (arena, p0, f0)
    return _trace.tensor(decl)


def zeros(shape, dtype, buffer=sbuf, name=""):
    """A new tensor set to zero (a ``memset`` instruction)."""
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    from . import isa

    isa.memset(t, 0)
    return t


def full(shape, fill_value, dtype, buffer=sbuf, name=""):
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    from . import isa

    isa.memset(t, fill_value)
    return t


def ones(shape, dtype, buffer=sbuf, name=""):
    return full(shape, 1, dtype, buffer=buffer, name=name)


# -- operator tokens ---------------------------------------------------------------------------------


class _Op:
    """An NKI operator: passed as ``op=`` to an ``nki.isa`` call (``nl.add``), or called as the
    language's function (``nl.add(x, y)``, ``nl.exp(x)``, ``nl.max(x, axis=1)``), which
    :mod:`ncrtl.nki.highlevel` lowers to ISA instructions (docs/nki/highlevel.md)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        fn = highlevel.FUNCTIONS.get(self.name)
        if fn is None:
            not_modelled(f"nl.{self.name}(...) as a function (pass it as op= to an nki.isa call)")
        return fn(*args, **kwargs)

    def __repr__(self):
        return f"nl.{self.name}"


#: The operator tokens: every name of the reference's nki.language that an ``nki.isa`` call
#: takes as ``op=`` (arithmetic, comparison, bitwise and logical operators, activation
#: functions, the reductions' ``max`` / ``min`` / ``average``), each callable as its function.
_OPS = (
    "add subtract multiply divide maximum minimum equal not_equal greater greater_equal less "
    "less_equal abs_max abs_min power mod fmod copy exp relu tanh sigmoid silu silu_dx square "
    "abs sign negative sqrt rsqrt reciprocal log softplus gelu gelu_apprx_tanh "
    "gelu_apprx_sigmoid gelu_apprx_sigmoid_dx gelu_dx erf erf_dx mish sin cos tan arctan ceil "
    "floor trunc invert bitwise_and bitwise_or bitwise_xor left_shift right_shift logical_and "
    "logical_or logical_xor logical_not max min average prelu bypass"
).split()
for _name in _OPS:
    globals()[_name] = _Op(_name)
del _name


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _trace.stand_in("nki.language", "nl", name)


__all__ = [
    "NotModelled",
    "sbuf",
    "psum",
    "hbm",
    "private_hbm",
    "shared_hbm",
    "NKIObject",
    "MemoryRegion",
    "NkiTensor",
    "ndarray",
    "zeros",
    "full",
    "ones",
    "ds",
    "affine_range",
    "sequential_range",
    "static_range",
    "tile_size",
    "program_id",
    "num_programs",
]

# The language's parts in modules of their own (docs/kernels.md, "Supported API")
from . import control, highlevel, shared  # noqa: E402
from .control import *  # noqa: E402, F403
from .highlevel import *  # noqa: E402, F403
from .shared import *  # noqa: E402, F403

__all__ += control.__all__ + highlevel.__all__ + shared.__all__

_trace.checked_module(globals(), "nl")
