"""The per-engine instruction streams of a kernel: the envelope, the operands, the program.

A kernel traced by :mod:`ncrtl.nki` becomes one :class:`Program`: a stream of
:class:`Instruction` per engine (``tensor``, ``vector``, ``scalar``, ``gpsimd``) and per DMA
queue (``dma0`` ...), each instruction an envelope around its operation:

* ``engine``, ``op`` and the operation's arguments (``args``, the fields the engine's own
  instruction takes: a matmul's mode, tile and PSUM accumulation flags, a DMA's kind ...);
* its operands, :class:`Ref`\\ s: a tensor's placement (memory, byte address, shape, dtype)
  and the NKI access pattern of the view (:class:`ncrtl.model.dma.AccessPattern`: ``[step,
  num]`` pairs in elements, an offset, a dtype to read the bytes as);
* ``waits``: the semaphores it waits on, ``(stream, count)``: the instruction starts once
  ``stream`` has completed ``count`` instructions.  Every instruction signals its own stream's
  semaphore when it completes; a stream's instructions complete in order, so a count names
  one instruction and all before it.  In a dynamic loop a count names the instruction in the
  current iteration, and ``carried`` waits name it in the previous one
  (:mod:`ncrtl.model.kernel.loops`, docs/nki/control.md);
* where it came from: the kernel's ``file:line`` and the NKI call.

The streams serialize to JSON (:meth:`Program.to_json`, :meth:`Program.from_json`) with every
field above, so the golden (:mod:`ncrtl.model.kernel.golden`), the timing model
(:mod:`ncrtl.model.kernel.timing`) and an RTL core run the same streams; :meth:`Program.dump`
prints them one instruction per line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from ncrtl.model.dma.access import AccessPattern, ap_indices, reinterpret_shape
from ncrtl.model.kernel.dtypes import DTYPES, dtype_of

__all__ = [
    "SPACES",
    "ENGINES",
    "CORES",
    "Core",
    "Ref",
    "Instruction",
    "TensorInfo",
    "Program",
    "dma_queue",
]

#: The memories an operand lives in.
SPACES = ("sbuf", "psum", "hbm")
#: The compute engines, in the order streams are listed.
ENGINES = ("tensor", "vector", "scalar", "gpsimd")


def dma_queue(q):
    """The stream name of DMA queue ``q``."""
    return f"dma{q}"


@dataclass(frozen=True)
class Core:
    """A NeuronCore version's parameters (the seeds' figures).

    ``sbuf_partition_bytes``: 192 / 224 / 256 KiB per partition (24 / 28 / 32 MiB); clocks in
    MHz (Tensor, Vector, Scalar, GpSimd, DMA); PSUM 8 banks of 2 KiB per partition; 16 DMA
    engines; ``device_bytes``: the device memory (HBM) a kernel on one NeuronCore may address,
    the core's share of its device's (:meth:`check_device_memory`)."""

    name: str
    sbuf_partition_bytes: int
    tensor_mhz: int
    vector_mhz: int
    scalar_mhz: int
    gpsimd_mhz: int
    dma_mhz: int = 1400
    partitions: int = 128
    psum_banks: int = 8
    psum_bank_bytes: int = 2048
    rows: int = 128
    cols: int = 128
    dma_engines: int = 16
    dma_queues: int = 16
    #: The Tensor Engine's tile granule (tile sizes ``tile_unit`` and ``2 x tile_unit``; 32 on
    #: the hardware, smaller on the RTL core's small geometries).
    tile_unit: int = 32
    device_bytes: int = 16 << 30

    @property
    def psum_partition_bytes(self):
        return self.psum_banks * self.psum_bank_bytes

    def bytes_of(self, space):
        """Bytes per partition of ``space`` (``"sbuf"`` or ``"psum"``)."""
        return self.sbuf_partition_bytes if space == "sbuf" else self.psum_partition_bytes

    def to_dict(self):
        return dict(self.__dict__)

    def check_device_memory(self, nbytes, what, cores=1):
        """Raise ``ValueError`` naming ``what``, its size, the limit and the core version when
        ``nbytes`` of device tensors exceed what a kernel on ``cores`` NeuronCores (a logical
        core's 1 or 2) may address: checked before anything of that size is allocated."""
        limit = self.device_bytes * cores
        if nbytes > limit:
            on = f"{cores} NeuronCore-{self.name}s" if cores > 1 else f"a NeuronCore-{self.name}"
            raise ValueError(
                f"{what}: {_size(nbytes)} exceed the {_size(limit)} of device memory (HBM) a "
                f"kernel on {on} may address (its share of the device's; docs/kernels.md)"
            )


def _size(nbytes):
    return f"{nbytes / (1 << 30):,.1f} GiB ({nbytes:,} bytes)"


#: The device memory per NeuronCore: Trainium1's 32 GiB over its 2 NeuronCore-v2s, Trainium2's
#: 96 GiB over 8 NeuronCore-v3s, Trainium3's 144 GiB over 8 NeuronCore-v4s (the architecture
#: guides; docs/kernels.md).
CORES = {
    "v2": Core("v2", 192 * 1024, 2800, 1120, 1400, 1400, device_bytes=16 << 30),
    "v3": Core("v3", 224 * 1024, 2400, 960, 1200, 1200, device_bytes=12 << 30),
    "v4": Core("v4", 256 * 1024, 2400, 1200, 1200, 1200, device_bytes=18 << 30),
}


@dataclass(frozen=True, slots=True)
class Ref:
    """One operand: a view of a placed tensor.

    Attributes
    ----------
    space : str
        ``"sbuf"``, ``"psum"`` or ``"hbm"``.
    tensor : str
        The tensor's name (unique in the program).
    base : int
        Its first byte: in every partition (SBUF, PSUM: the tensor holds partitions
        ``0 .. shape[0] - 1``), or in the device memory.
    shape, dtype : tuple, str
        The tensor's shape and element type.
    pattern : tuple of (step, num)
        The view's access pattern, in elements of ``view_dtype``.
    offset : int
        The view's first element.
    view_dtype : str
        The type the view reads the bytes as (the tensor's own unless reinterpreted).
    """

    space: str
    tensor: str
    base: int
    shape: tuple
    dtype: str
    pattern: tuple
    offset: int = 0
    view_dtype: str = None
    #: The view's elements (from the pattern; kept, the timing run asks for it often).
    size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.space not in SPACES:
            raise ValueError(f"space must be one of {SPACES}, not {self.space!r}")
        object.__setattr__(self, "shape", tuple(map(int, self.shape)))
        object.__setattr__(self, "pattern", tuple([(int(s), int(n)) for s, n in self.pattern]))
        if self.view_dtype is None:
            object.__setattr__(self, "view_dtype", self.dtype)
        object.__setattr__(self, "size", math.prod([n for _, n in self.pattern]))

    @classmethod
    def of(cls, space, tensor, base, shape, dtype, pattern, offset, view_dtype):
        """A Ref of fields already in their form (``shape`` and ``pattern`` tuples of ints,
        ``view_dtype`` given): the tracer's, made without converting them again."""
        ref = object.__new__(cls)
        put = object.__setattr__
        put(ref, "space", space)
        put(ref, "tensor", tensor)
        put(ref, "base", base)
        put(ref, "shape", shape)
        put(ref, "dtype", dtype)
        put(ref, "pattern", pattern)
        put(ref, "offset", offset)
        put(ref, "view_dtype", view_dtype)
        put(ref, "size", math.prod([n for _, n in pattern]))
        return ref

    @property
    def view_shape(self):
        return tuple([n for _, n in self.pattern])

    @property
    def element(self):
        """The view's :class:`~ncrtl.model.kernel.dtypes.Dtype`."""
        return DTYPES.get(self.view_dtype) or dtype_of(self.view_dtype)

    @property
    def on_chip(self):
        return self.space != "hbm"

    def access_pattern(self):
        """The view as a :class:`ncrtl.model.dma.AccessPattern` of the tensor."""
        dt = None if self.view_dtype == self.dtype else dtype_of(self.view_dtype).storage
        return AccessPattern(self.pattern, self.offset, dtype=dt)

    def tensor_shape(self):
        """The tensor's shape in elements of the view's dtype."""
        if self.view_dtype == self.dtype:
            return self.shape
        return reinterpret_shape(
            self.shape, dtype_of(self.dtype).itemsize, dtype_of(self.view_dtype).itemsize
        )

    def indices(self):
        """Flat element indices of the view in the tensor (elements of ``view_dtype``), the
        access rules checked (:func:`ncrtl.model.dma.access.ap_indices`)."""
        return ap_indices(self.tensor_shape(), self.access_pattern(), partition_rule=self.on_chip)

    def box(self):
        """:meth:`extent` from the pattern's corners, without forming the indices, when the
        view is rows of its tensor (its first entry steps whole rows: whole partitions on chip,
        one each; the rest stays inside a row): every access rule then holds too.  None when
        the view is not of that form (:meth:`extent` then forms the indices)."""
        shape = self.tensor_shape()
        if len(shape) < 2:
            return None
        row = math.prod(shape[1:])
        (s0, n0), inner = self.pattern[0], self.pattern[1:]
        if n0 > 1 and (s0 != row if self.on_chip else s0 <= 0 or s0 % row):
            return None
        lo = hi = 0  # the corners of the rest (pattern_bounds, inline: called per operand)
        for s, n in inner:
            corner = s * (n - 1)
            if corner > 0:
                hi += corner
            else:
                lo += corner
        r0, c0 = divmod(self.offset, row)
        r1 = r0 + (s0 // row) * (n0 - 1)
        if r0 < 0 or r1 >= shape[0] or c0 + lo < 0 or c0 + hi >= row:
            return None
        isz = self.element.itemsize
        return (r0, r1 + 1, self.base + (c0 + lo) * isz, self.base + (c0 + hi + 1) * isz)

    def extent(self):
        """``(first partition, last partition + 1, first byte, last byte + 1)`` the view
        touches, bytes counted from the partition's start plus ``base`` (in the device memory:
        rows of the tensor's first dimension): the box the dependency analysis compares."""
        fast = self.box()
        if fast is not None:
            return fast
        idx = self.indices()
        isz = dtype_of(self.view_dtype).itemsize
        # rows of the tensor's first dimension (partitions on chip) by bytes within a row: a
        # tile of a device tensor is the box of its rows and columns, not its flat span
        row = math.prod(self.tensor_shape()[1:])
        part, within = np.divmod(idx, row)
        return (
            int(part.min()),
            int(part.max()) + 1,
            self.base + int(within.min()) * isz,
            self.base + (int(within.max()) + 1) * isz,
        )

    def to_dict(self):
        return {
            "space": self.space,
            "tensor": self.tensor,
            "base": self.base,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "pattern": [list(p) for p in self.pattern],
            "offset": self.offset,
            "view_dtype": self.view_dtype,
        }

    @classmethod
    def from_dict(cls, d):
        return cls(**{**d, "shape": tuple(d["shape"]), "pattern": tuple(map(tuple, d["pattern"]))})

    def __str__(self):
        pat = ",".join(f"[{s},{n}]" for s, n in self.pattern)
        dt = "" if self.view_dtype == self.dtype else f" as {self.view_dtype}"
        return f"{self.space}:{self.tensor}@{self.base}+{self.offset}[{pat}]{dt}"


@dataclass(slots=True)
class Instruction:
    """One instruction of a stream (see the module docstring)."""

    engine: str
    op: str
    dsts: tuple = ()
    srcs: tuple = ()
    args: dict = field(default_factory=dict)
    waits: tuple = ()
    line: str = ""
    call: str = ""
    seq: int = 0
    index: int = 0
    #: Waits on the previous iteration of the innermost dynamic loop around both instructions
    #: (docs/nki/control.md): ``(stream, count)`` as ``waits``.
    carried: tuple = ()

    @property
    def label(self):
        """``engine[index] op`` -- how errors and the trace name it."""
        return f"{self.engine}[{self.index}] {self.op}"

    @property
    def where(self):
        """``file:line: call (label)`` -- how a rule's message names the instruction."""
        return f"{self.line}: {self.call or self.op} ({self.label})"

    def to_dict(self):
        return {
            "engine": self.engine,
            "op": self.op,
            "dsts": [r.to_dict() for r in self.dsts],
            "srcs": [r.to_dict() for r in self.srcs],
            "args": _jsonable(self.args),
            "waits": [list(w) for w in self.waits],
            "line": self.line,
            "call": self.call,
            "seq": self.seq,
            "index": self.index,
            **({"carried": [list(w) for w in self.carried]} if self.carried else {}),
        }

    @classmethod
    def from_dict(cls, d):
        return cls(
            engine=d["engine"],
            op=d["op"],
            dsts=tuple(Ref.from_dict(r) for r in d["dsts"]),
            srcs=tuple(Ref.from_dict(r) for r in d["srcs"]),
            args=_from_json(d["args"]),
            waits=tuple((s, int(c)) for s, c in d["waits"]),
            line=d["line"],
            call=d["call"],
            seq=d["seq"],
            index=d["index"],
            carried=tuple((s, int(c)) for s, c in d.get("carried", ())),
        )

    def describe(self):
        """One readable line: index, op, operands, arguments, waits, source line."""
        args = " ".join(f"{k}={v}" for k, v in self.args.items() if v is not None)
        waits = " ".join(
            [f"{s}>={c}" for s, c in self.waits] + [f"{s}>={c}@prev" for s, c in self.carried]
        )
        dst = ", ".join(map(str, self.dsts))
        src = ", ".join(map(str, self.srcs))
        return (
            f"{self.index:5d} {self.op:14s} {dst} <- {src}"
            + (f"  {args}" if args else "")
            + (f"  wait {waits}" if waits else "")
            + (f"  # {self.line}" if self.line else "")
        )


def _jsonable(v):
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return (
            {"__tuple__": [_jsonable(x) for x in v]}
            if isinstance(v, tuple)
            else [_jsonable(x) for x in v]
        )
    if isinstance(v, np.generic):
        return v.item()
    return v


def _from_json(v):
    if isinstance(v, dict):
        if set(v) == {"__tuple__"}:
            return tuple(_from_json(x) for x in v["__tuple__"])
        return {k: _from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    return v


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A placed tensor: ``kind`` is ``"input"`` (a kernel argument), ``"output"`` (returned),
    or ``"internal"``; ``first`` and ``last`` the program positions (``seq``) of its first and
    last use, between which its space is its own."""

    name: str
    space: str
    base: int
    shape: tuple
    dtype: str
    kind: str = "internal"
    line: str = ""
    first: int = -1
    last: int = -1

    @property
    def nbytes(self):
        return math.prod(self.shape) * dtype_of(self.dtype).itemsize

    @property
    def partition_bytes(self):
        """Bytes per partition (on chip)."""
        return math.prod(self.shape[1:]) * dtype_of(self.dtype).itemsize

    def to_dict(self):
        return {**{f: getattr(self, f) for f in self.__slots__}, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, d):
        return cls(**{**d, "shape": tuple(d["shape"])})


@dataclass
class Program:
    """A traced kernel: its streams, its tensors, its inputs and outputs, on one core version
    (``logical_cores`` > 1: the same streams run on each core of a logical core, with
    ``core_id`` the only difference)."""

    core: Core
    streams: dict
    tensors: dict
    inputs: list
    outputs: list
    kernel: str = ""
    logical_cores: int = 1
    core_id: int = 0
    #: The trip counts of its dynamic loops, ``(loop, outer iterations) -> count``, from a
    #: golden run (:func:`ncrtl.model.kernel.loops.run`): what the timing run follows (not
    #: part of the streams' JSON).
    trips: dict = field(default=None, repr=False, compare=False)

    def instructions(self):
        """Every instruction in program order."""
        return sorted((i for s in self.streams.values() for i in s), key=lambda i: i.seq)

    def counts(self):
        """Instructions per stream."""
        return {name: len(s) for name, s in self.streams.items()}

    def to_json(self):
        return json.dumps(
            {
                "format": "ncrtl.kernel.streams/1",
                "kernel": self.kernel,
                "core": self.core.to_dict(),
                "logical_cores": self.logical_cores,
                "core_id": self.core_id,
                "tensors": [t.to_dict() for t in self.tensors.values()],
                "inputs": self.inputs,
                "outputs": self.outputs,
                "streams": {n: [i.to_dict() for i in s] for n, s in self.streams.items()},
            }
        )

    @classmethod
    def from_json(cls, text):
        d = json.loads(text)
        if d.get("format") != "ncrtl.kernel.streams/1":
            raise ValueError(
                f"not a stream file of format ncrtl.kernel.streams/1: {d.get('format')!r}"
            )
        tensors = {t["name"]: TensorInfo.from_dict(t) for t in d["tensors"]}
        streams = {n: [Instruction.from_dict(i) for i in s] for n, s in d["streams"].items()}
        return cls(
            Core(**d["core"]),
            streams,
            tensors,
            d["inputs"],
            d["outputs"],
            d["kernel"],
            d["logical_cores"],
            d.get("core_id", 0),
        )

    def dump(self):
        """The streams as text: the tensors and their placement, then each stream."""
        core = f", core {self.core_id} of {self.logical_cores}" if self.logical_cores > 1 else ""
        out = [f"kernel {self.kernel} on NeuronCore-{self.core.name}{core}"]
        out.append("tensors:")
        for t in self.tensors.values():
            out.append(
                f"  {t.name:24s} {t.space:5s} @{t.base:<8d} {t.dtype:10s} {list(t.shape)} "
                f"{t.kind}  # {t.line}"
            )
        for name, stream in self.streams.items():
            if not stream:
                continue
            out.append(f"stream {name} ({len(stream)} instructions):")
            out += [i.describe() for i in stream]
        return "\n".join(out)
