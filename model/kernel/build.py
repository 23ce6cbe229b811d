"""From a kernel's calls in program order to its streams: placement and semaphores.

:class:`Builder` receives what a traced kernel did (:meth:`Builder.tensor` for each tensor it
created, :meth:`Builder.emit` for each instruction, with operands naming those tensors) and
:meth:`Builder.finish` turns it into a :class:`~ncrtl.model.kernel.stream.Program`:

1. **Lifetimes.** A tensor's space is its own from its first use to its last, in program
   order (a tensor never used takes no space).
2. **Placement.** SBUF: every partition's bytes ``[base, base + bytes per partition)``, aligned
   to :data:`ALIGN` bytes; PSUM: whole 2 KiB banks.  Space is given in a ring: the next tensor
   goes at the first gap at or after where the previous one ended, wrapping to the start, so
   the space freed longest ago is reused first.  A tile allocated inside a loop then lands in
   a different place each iteration until the ring wraps -- multi-buffering, as NKI's
   compiler gives it -- and the reuse that does come is a dependency like any other.  Device
   memory: the inputs, then the outputs, then the kernel's own device tensors, one after
   another (never reused).  A tensor that does not fit names the live tensors.
3. **Semaphores.** Two instructions whose operands overlap, at least one writing (RAW, WAR,
   WAW), in different streams, get a wait: the later waits for the earlier's stream to reach
   the earlier's count.  A tensor placed where earlier tensors were waits, at its first use,
   for every access of theirs.  Within one stream, the compute engines run in order (no wait
   needed); a DMA queue's transfers overlap, so it waits on itself too.  A wait implied by an
   earlier wait of the same stream is left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.stream import ENGINES, Instruction, Program, Ref, TensorInfo, dma_queue

__all__ = ["Builder", "Operand", "Decl", "ALIGN", "PlacementError"]

#: Alignment of an SBUF tensor's first byte (a DMA data-path word is 16 bytes; 64 keeps every
#: tensor on whole words of the widest access).
ALIGN = 64
#: Alignment of device-memory tensors.
HBM_ALIGN = 64


class PlacementError(ValueError):
    """A tensor does not fit its memory (the message names the live tensors)."""


@dataclass(eq=False)
class Decl:
    """A tensor the kernel created: ``space``, ``shape``, ``dtype``, ``kind`` (``input``,
    ``output``, ``internal``), where it was created; ``base`` once placed."""

    name: str
    space: str
    shape: tuple
    dtype: str
    kind: str = "internal"
    line: str = ""
    base: int = None
    first: int = -1
    last: int = -1
    prior: list = field(default_factory=list)  # tensors placed before where this one is
    span: int = 0  # bytes per partition it holds (a whole number of units)

    @property
    def partition_bytes(self):
        shape = self.shape if len(self.shape) > 1 else (1,) + tuple(self.shape)
        return int(np.prod(shape[1:])) * dtype_of(self.dtype).itemsize

    @property
    def nbytes(self):
        return int(np.prod(self.shape)) * dtype_of(self.dtype).itemsize


@dataclass(frozen=True, eq=False)
class Operand:
    """An operand as traced: a tensor and a view of it (pattern and offset in elements of
    ``view_dtype``)."""

    decl: Decl
    pattern: tuple
    offset: int = 0
    view_dtype: str = None

    def ref(self):
        d = self.decl
        return Ref(
            d.space,
            d.name,
            d.base,
            d.shape,
            d.dtype,
            self.pattern,
            self.offset,
            self.view_dtype or d.dtype,
        )


@dataclass
class _Pending:
    engine: str
    op: str
    dsts: tuple
    srcs: tuple
    args: dict
    line: str
    call: str


class Builder:
    """Collects a kernel's tensors and instructions; :meth:`finish` makes the program."""

    def __init__(self, core, kernel=""):
        self.core = core
        self.kernel = kernel
        self.decls = []
        self.pending = []
        self._names = set()
        self._dma_next = 0

    def tensor(self, space, shape, dtype, *, name=None, kind="internal", line=""):
        """A new tensor; ``name`` made unique (``name.1`` ...)."""
        base = name or f"{space}{len(self.decls)}"
        unique, n = base, 0
        while unique in self._names:
            n += 1
            unique = f"{base}.{n}"
        self._names.add(unique)
        decl = Decl(unique, space, tuple(int(s) for s in shape), dtype_of(dtype).name, kind, line)
        self.decls.append(decl)
        return decl

    def emit(self, engine, op, dsts=(), srcs=(), args=None, *, line="", call=""):
        """Append an instruction; ``engine`` ``"dma"`` takes the next DMA queue in turn.
        Returns its program position."""
        if engine == "dma":
            engine = dma_queue(self._dma_next % self.core.dma_queues)
            self._dma_next += 1
        self.pending.append(
            _Pending(engine, op, tuple(dsts), tuple(srcs), dict(args or {}), line, call)
        )
        return len(self.pending) - 1

    # -- 1. lifetimes, 2. placement --------------------------------------------------------

    def _lifetimes(self):
        for seq, p in enumerate(self.pending):
            for o in p.dsts + p.srcs:
                d = o.decl
                if d.first < 0:
                    d.first = seq
                d.last = seq

    def _place_hbm(self, internal_base=0):
        addr = 0
        for kind in ("input", "output", "internal"):
            if kind == "internal":
                addr = max(addr, internal_base)
            for d in self.decls:
                if d.space == "hbm" and d.kind == kind and (d.first >= 0 or kind != "internal"):
                    d.base = addr
                    addr += -(-max(d.nbytes, 1) // HBM_ALIGN) * HBM_ALIGN

    def _place_on_chip(self, space):
        core = self.core
        size = core.bytes_of(space)
        unit = ALIGN if space == "sbuf" else core.psum_bank_bytes
        mine = sorted(
            (d for d in self.decls if d.space == space and d.first >= 0), key=lambda d: d.first
        )
        live = []  # placed and not yet past their last use
        freed = []  # placed and past their last use (the reuse dependencies)
        ptr = 0
        for d in mine:
            still = []
            for t in live:
                (freed if t.last < d.first else still).append(t)
            live = still
            need = -(-max(d.partition_bytes, 1) // unit) * unit
            if d.shape[0] > core.partitions:
                raise PlacementError(
                    f"{space} tensor {d.name} {list(d.shape)} ({d.line}) has {d.shape[0]} "
                    f"partitions; the {space.upper()} has {core.partitions}"
                )
            base = self._gap(live, ptr, need, size)
            if base is None:
                base = self._gap(live, 0, need, size)
            if base is None:
                used = sum(t.partition_bytes for t in live)
                names = ", ".join(
                    f"{t.name} {list(t.shape)} {t.dtype} ({t.partition_bytes} B, {t.line})"
                    for t in sorted(live, key=lambda t: t.base)
                )
                raise PlacementError(
                    f"{space.upper()} overflow: {d.name} {list(d.shape)} {d.dtype} ({d.line}) "
                    f"needs {need} bytes per partition; {used} of {size} are held by the live "
                    f"tensors: {names}"
                )
            d.base, d.span = base, need
            d.prior = [t for t in freed if t.base < base + need and base < t.base + t.span]
            live.append(d)
            ptr = base + need
            if ptr >= size:
                ptr = 0

    @staticmethod
    def _gap(live, start, need, size):
        """The first address >= start where ``need`` bytes fit between the live tensors."""
        addr = start
        for t in sorted(live, key=lambda t: t.base):
            end = t.base + t.span
            if end <= addr:
                continue
            if t.base >= addr + need:
                break
            addr = max(addr, end)
        return addr if addr + need <= size else None

    # -- 3. semaphores ---------------------------------------------------------------------

    def finish(self, inputs, outputs, *, hbm_internal_base=0, core_id=0, logical_cores=1):
        """The program: ``inputs`` and ``outputs`` are the device-memory tensors (Decls) in
        argument and return order; the kernel's own device tensors start at
        ``hbm_internal_base`` (the second core of a logical core places its own after the
        first's)."""
        self._lifetimes()
        self._place_hbm(hbm_internal_base)
        for space in ("sbuf", "psum"):
            self._place_on_chip(space)
        streams = {e: [] for e in ENGINES}
        streams.update({dma_queue(q): [] for q in range(self.core.dma_queues)})
        accesses = {}  # decl -> list of (stream, index, write, box)
        implied = {}  # stream -> {stream: count already waited for}
        for seq, p in enumerate(self.pending):
            dsts = tuple(o.ref() for o in p.dsts)
            srcs = tuple(o.ref() for o in p.srcs)
            stream = streams[p.engine]
            index = len(stream)
            need = {}
            ops = [(o, r, True) for o, r in zip(p.dsts, dsts)]
            ops += [(o, r, False) for o, r in zip(p.srcs, srcs)]
            boxes = []
            for o, r, write in ops:
                box = r.extent()
                boxes.append((o.decl, write, box))
                d = o.decl
                if d.first == seq:
                    for t in d.prior:
                        for s, i, _, _ in accesses.get(t, ()):
                            need[s] = max(need.get(s, 0), i + 1)
                for s, i, w, b in reversed(accesses.get(d, ())):
                    if (w or write) and _overlap(b, box) and need.get(s, 0) < i + 1:
                        need[s] = i + 1
            for d, write, box in boxes:
                accesses.setdefault(d, []).append((p.engine, index, write, box))
            if not p.engine.startswith("dma"):
                need.pop(p.engine, None)
            seen = implied.setdefault(p.engine, {})
            waits = tuple((s, c) for s, c in sorted(need.items()) if c > seen.get(s, 0))
            for s, c in waits:
                seen[s] = c
            stream.append(
                Instruction(p.engine, p.op, dsts, srcs, p.args, waits, p.line, p.call, seq, index)
            )
        tensors = {
            d.name: TensorInfo(
                d.name, d.space, d.base, d.shape, d.dtype, d.kind, d.line, d.first, d.last
            )
            for d in self.decls
            if d.base is not None
        }
        return Program(
            self.core,
            streams,
            tensors,
            [d.name for d in inputs],
            [d.name for d in outputs],
            self.kernel,
            logical_cores,
            core_id,
        )


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
