"""The golden run of a kernel's streams: every instruction on the project's goldens, over one
shared state (SBUF, PSUM, device memory), in any order the semaphores allow.

:func:`run` executes a :class:`~ncrtl.model.kernel.stream.Program` on a :class:`CoreState`:
repeatedly the next instruction of some stream whose waits are met (``order`` picks which:
``"program"``, the earliest in program order; ``"reverse"``, the latest, as far from program
order as the semaphores allow; ``"random"``), until every stream is done.  Streams whose
semaphores leave them all waiting are reported with each waiting instruction.

No numeric rule is restated here; each operation calls the block's golden:

* ``dma_copy`` / ``dma_transpose``: :func:`ncrtl.model.dma.dma_copy`,
  :func:`~ncrtl.model.dma.dma_transpose` (bytes moved unchanged, the access-pattern and
  partition rules of :mod:`ncrtl.model.dma.access`);
* ``matmul`` (``nc_matmul``, ``nc_transpose`` on the Tensor Engine): the Tensor Engine golden
  (:func:`ncrtl.model.tensor_engine.matmul_bits`) and PSUM's read-add-write
  (:meth:`ncrtl.model.psum.Psum.write`: FP32, BF16 with RNE or SR, raw transposes);
  ``matmul_mx``: :func:`ncrtl.model.tensor_engine.matmul_mx_rows` with the scales of
  :func:`~ncrtl.model.tensor_engine.mx_row_scales`; ``matmul_sparse`` (``nc_matmul_sparse``):
  :func:`ncrtl.model.tensor_engine.matmul_sparse` at its LoadStationary's ratio;
* ``quantize_mx``: :func:`ncrtl.model.vector_engine.quantize_mx`;
* conversions to a narrower float (``tensor_copy``, ``memset``, the results of arithmetic):
  one rounding to nearest even (:func:`ncrtl.model.fp.encode`);
* Vector / Scalar / GpSimd arithmetic (``tensor_tensor``, ``tensor_scalar``, ``activation``),
  which has no RTL here: float32 numpy, then that rounding (docs/kernels.md).

Reading SBUF, PSUM or device memory that nothing wrote is no error by itself: the results that
depend on it are marked unwritten (tainted), element by element (:mod:`ncrtl.model.kernel.taint`);
tainted data reaching the kernel's outputs is a warning; reaching a register, a run-time offset
or index, a predicate or a collective it is an error (:class:`KernelError`), or a warning with
``uninitialized="warn"``.
"""

from __future__ import annotations

import heapq
import math
import random
import warnings
from dataclasses import replace

import numpy as np

from ncrtl.model.dma.access import pattern_bounds
from ncrtl.model.kernel import loops, taint
from ncrtl.model.kernel.collective import GROUP_OPS, members, rendezvous
from ncrtl.model.kernel.collective import execute as _group_execute
from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.ops import OPS as MORE_OPS
from ncrtl.model.kernel.values import ACTIVATIONS, ALU_OPS, KernelError, convert, unpack_x4
from ncrtl.model.kernel.values import where as _where
from ncrtl.model.psum import Dtype, Flag, Geometry, Psum, Rounding, Write
from ncrtl.model.tensor_engine import isa as te_isa
from ncrtl.model.tensor_engine import (
    matmul_bits,
    matmul_mx_rows,
    matmul_sparse,
    mx_row_scales,
    result_bits,
)

__all__ = [
    "CoreState",
    "core_states",
    "KernelError",
    "UninitializedRead",
    "run",
    "ALU_OPS",
    "ACTIVATIONS",
    "convert",
    "contiguous",
    "psum_write",
]


class UninitializedRead(UserWarning):
    """A read of memory that nothing wrote, with ``uninitialized="warn"``: the message names
    the instruction and its kernel line.  Shown as one line, ``ncrtl: warning: <message>``
    (never golden.py's line: the read is the kernel's)."""


def _formatwarning(message, category, filename, lineno, line=None, _shown=warnings.formatwarning):
    if isinstance(category, type) and issubclass(category, UninitializedRead):
        return f"ncrtl: warning: {message}\n"
    return _shown(message, category, filename, lineno, line)


warnings.formatwarning = _formatwarning


class CoreState:
    """The memories of one NeuronCore as the streams see them.

    ``sbuf``: uint8 ``[partitions, SBUF bytes per partition]``; ``psum``: a
    :class:`ncrtl.model.psum.Psum` (its memory read and written through :meth:`psum_bytes` by
    the engines); ``hbm``: the device memory, uint8, each device tensor at its base.  Every
    memory has a mask of the bytes written so far."""

    def __init__(self, program, inputs, *, seed=0, uninitialized="error"):
        if uninitialized not in ("error", "warn"):
            raise ValueError(f"uninitialized must be 'error' or 'warn', not {uninitialized!r}")
        self.program = program
        self.uninitialized = uninitialized
        self.taint = None  # the run's taint origins, once a read of unwritten memory made one
        self._probe = None  # taint: None, or the probe / real run of an instruction
        self._said = None  # taint: the warnings given for the instruction running
        core = program.core
        p = core.partitions
        self.sbuf = np.zeros((p, core.sbuf_partition_bytes), np.uint8)
        self.sbuf_written = np.zeros(self.sbuf.shape, bool)
        self.psum = Psum(Geometry(p, core.psum_banks, core.psum_bank_bytes), seed)
        self.psum_written = np.zeros((p, core.psum_partition_bytes), bool)
        hbm = [t for t in program.tensors.values() if t.space == "hbm"]
        size = max((t.base + t.nbytes for t in hbm), default=0)
        self.hbm = np.zeros(size, np.uint8)
        self.hbm_written = np.zeros(size, bool)
        if len(inputs) != len(program.inputs):
            raise KernelError(
                f"the kernel takes {len(program.inputs)} device tensors "
                f"({', '.join(program.inputs)}), got {len(inputs)} arrays"
            )
        for name, arr in zip(program.inputs, inputs):
            t = program.tensors[name]
            a = np.ascontiguousarray(arr)
            if a.nbytes != t.nbytes:
                raise KernelError(
                    f"input {name}: {a.nbytes} bytes given for a {list(t.shape)} {t.dtype} tensor"
                )
            self.hbm[t.base : t.base + t.nbytes] = a.reshape(-1).view(np.uint8)
            self.hbm_written[t.base : t.base + t.nbytes] = True

    # -- memories as arrays ----------------------------------------------------------------

    def psum_bytes(self):
        """PSUM as uint8 ``[partitions, banks * bank bytes]`` (a copy)."""
        m = self.psum.mem  # [banks, rows, partitions] uint32
        return np.ascontiguousarray(m.transpose(2, 0, 1)).view(np.uint8).reshape(m.shape[2], -1)

    def _store_psum(self, b):
        m = self.psum.mem
        words = np.ascontiguousarray(b).view(np.uint32).reshape(m.shape[2], m.shape[0], m.shape[1])
        m[...] = words.transpose(1, 2, 0)

    def _psum_banks(self, layout):
        """``(bytes, origin)``: the PSUM banks a :func:`_layout` reaches as ``[partitions,
        bytes]`` (not the whole of :meth:`psum_bytes`), and the byte their first column is."""
        _, byte, shape, steps = layout
        lo, hi = pattern_bounds(tuple(zip(steps, (n for n in shape[1:]))))
        bank = self.program.core.psum_bank_bytes
        first, last = (byte + lo) // bank, (byte + hi) // bank
        m = self.psum.mem[first : last + 1]
        mem = np.ascontiguousarray(m.transpose(2, 0, 1)).view(np.uint8).reshape(m.shape[2], -1)
        return mem, first * bank

    def _memory(self, space):
        if space == "sbuf":
            return self.sbuf, self.sbuf_written
        if space == "psum":
            return self.psum_bytes(), self.psum_written
        return self.hbm, self.hbm_written

    def _positions(self, ref):
        """Per view element its byte positions: ``(partitions, bytes)`` index arrays of shape
        ``view_shape + (itemsize,)`` (device memory: partitions all 0)."""
        idx = ref.indices()
        isz = ref.element.itemsize
        k = np.arange(isz)
        if ref.space == "hbm":
            return None, ref.base + idx[..., None] * isz + k
        row = math.prod(ref.tensor_shape()[1:])
        part, within = np.divmod(idx, row)
        return part[..., None] + 0 * k, ref.base + within[..., None] * isz + k

    def _slab(self, ref):
        """``(partitions, bytes)`` slices when the view is whole contiguous rows of bytes
        (one run per partition, or one run of device memory), else None."""
        pat = ref.pattern
        inner = pat[1:] if ref.on_chip else pat
        step = 1
        for s_, num in reversed(inner):
            if num > 1 and s_ != step:
                return None
            step *= num
        isz = ref.element.itemsize
        ref.indices()  # the access rules
        if not ref.on_chip:
            b0 = ref.base + ref.offset * isz
            return None, slice(b0, b0 + ref.size * isz)
        row = math.prod(ref.tensor_shape()[1:])
        p0, within = divmod(ref.offset, row)
        if pat[0][1] > 1 and pat[0][0] != row:
            return None
        b0 = ref.base + within * isz
        return slice(p0, p0 + pat[0][1]), slice(b0, b0 + step * isz)

    def read(self, ref, ins=None, matters=None):
        """The view's elements, shape ``view_shape``, as its storage dtype.  Elements nothing
        wrote (or tainted) are the instruction's taint (:mod:`~ncrtl.model.kernel.taint`);
        ``matters`` (``"register"``, ``"offset"``, ``"index"``, ``"predicate"``, ...): what the
        values feed, where tainted data is the error (or the warning)."""
        lay = _layout(ref)
        if lay is not None:
            if ref.space == "psum":
                mem, origin = self._psum_banks(lay)
                written = self.psum_written
            else:
                (mem, written), origin = self._memory(ref.space), 0
            w = _at(written, lay)
            if w.all():
                data = np.ascontiguousarray(_at(mem, lay, origin))
                return data.view(ref.element.storage).reshape(ref.view_shape)
            org = taint.origins(self, ref.space)
            org = None if org is None else taint.at(org, lay)
            return taint.unwritten_read(self, ref, ins, _at(mem, lay, origin), w, org, matters)
        mem, written = self._memory(ref.space)
        part, byte = self._positions(ref)
        sel = byte if part is None else (part, byte)
        w = written[sel]
        if not w.all():
            org = taint.origins(self, ref.space)
            org = None if org is None else org[sel]
            return taint.unwritten_read(self, ref, ins, mem[sel], w, org, matters)
        data = mem[sel]
        return np.ascontiguousarray(data).view(ref.element.storage).reshape(ref.view_shape)

    def write(self, ref, values):
        """Write ``values`` (``view_shape`` or as many elements) through the view; where it
        visits an element twice the later write stays."""
        v = np.ascontiguousarray(np.asarray(values).astype(ref.element.storage, copy=False))
        if v.size != ref.size:
            raise KernelError(f"{v.size} values for a view of {ref.size} elements ({ref})")
        lay = _layout(ref) if _one_visit(ref) else None
        if lay is not None:
            mem, written = self._memory(ref.space)
            _at(mem, lay)[...] = v.reshape(-1).view(np.uint8).reshape(lay[2])
            _at(written, lay)[...] = True
            if ref.space == "psum":
                self._store_psum(mem)
            return
        part, byte = self._positions(ref)
        isz = ref.element.itemsize
        flat_b = byte.reshape(-1, isz)
        key = (
            flat_b[:, 0] if part is None else part.reshape(-1, isz)[:, 0] * (1 << 40) + flat_b[:, 0]
        )
        _, last = np.unique(key[::-1], return_index=True)
        keep = key.size - 1 - last
        data = v.reshape(-1).view(np.uint8).reshape(-1, isz)[keep]
        mem, written = self._memory(ref.space)
        if part is None:
            mem[flat_b[keep]] = data
            written[flat_b[keep]] = True
        else:
            pk = part.reshape(-1, isz)[keep]
            mem[pk, flat_b[keep]] = data
            written[pk, flat_b[keep]] = True
            if ref.space == "psum":
                self._store_psum(mem)

    def tensor(self, name):
        """A device tensor's current value (a copy), by name."""
        t = self.program.tensors[name]
        d = dtype_of(t.dtype)
        return self.hbm[t.base : t.base + t.nbytes].copy().view(d.storage).reshape(t.shape)


def _layout(ref):
    """Where the view's bytes lie, as ``(first partition or None, first byte, shape, byte
    steps of the free dimensions)`` for :func:`_at`, when the view is rows of its tensor
    (:meth:`Ref.box <ncrtl.model.kernel.stream.Ref.box>`: its corners inside the tensor and
    its partitions whole, so every access rule holds); else None (the caller forms the
    indices, which check the rules).  The shape is ``view_shape + (itemsize,)``."""
    if ref.box() is None:
        return None
    isz = ref.element.itemsize
    if not ref.on_chip:
        steps = tuple(s * isz for s, _ in ref.pattern) + (1,)
        return None, ref.base + ref.offset * isz, ref.view_shape + (isz,), steps
    row = math.prod(ref.tensor_shape()[1:])
    p0, c0 = divmod(ref.offset, row)
    inner = ref.pattern[1:]
    steps = tuple(s * isz for s, _ in inner) + (1,)
    return p0, ref.base + c0 * isz, ref.view_shape + (isz,), steps


def _at(mem, layout, origin=0):
    """The bytes of a :func:`_layout` in ``mem`` (device memory ``[bytes]``, or on chip
    ``[partitions, bytes]``, uint8; a ``written`` mask alike) as a numpy view, no index per
    element; ``origin``: the byte of a partition that ``mem``'s first column holds.  numpy
    checks that the view stays inside ``mem``."""
    p0, byte, shape, steps = layout
    if p0 is None:
        return np.ndarray(shape, mem.dtype, mem, byte - origin, steps)
    offset = p0 * mem.strides[0] + byte - origin
    return np.ndarray(shape, mem.dtype, mem, offset, (mem.strides[0],) + steps)


def _one_visit(ref):
    """Whether the view visits no element twice, so that writing it through one numpy view
    leaves what sequential writes leave (:func:`_layout`): the free dimensions (on chip; every dimension in
    device memory, whose rows are elements too), ordered by step, each step beyond every
    offset the smaller ones reach, give each element one view index (partitions are distinct
    by themselves)."""
    dims = ref.pattern[1:] if ref.on_chip else ref.pattern
    reach = 0
    for step, num in sorted((abs(s), n) for s, n in dims if n > 1):
        if step <= reach:
            return False
        reach += step * (num - 1)
    return True


# -- the operations ---------------------------------------------------------------------------


def _psum_target(core, ins, dst, m, n):
    """``(bank, col, first partition)`` of a matmul's PSUM destination ``[M, N]``."""
    row = math.prod(dst.tensor_shape()[1:])
    p0, within = divmod(dst.offset, row)
    isz = dst.element.itemsize
    pat = dst.pattern
    ok = (
        len(pat) >= 2
        and pat[0] == (row, m)
        and math.prod(num for _, num in pat[1:]) == n
        and contiguous(pat[1:])
    )
    if not ok:
        raise KernelError(
            f"{_where(ins)}writes PSUM through {dst}: a matmul's destination is [M={m} "
            f"partitions, N={n} contiguous elements]"
        )
    byte = dst.base + within * isz
    bank, off = divmod(byte, core.psum_bank_bytes)
    if off + n * isz > core.psum_bank_bytes:
        raise KernelError(
            f"{_where(ins)}writes PSUM bytes {byte}..{byte + n * isz - 1} of each partition: a "
            f"matmul's result stays inside one {core.psum_bank_bytes}-byte bank"
        )
    return bank, off // isz, p0


def contiguous(pat):
    """Whether the ``[step, num]`` entries ``pat`` walk consecutive elements (entries of one
    element step anywhere)."""
    step = 1
    for s, num in reversed(pat):
        if num > 1 and s != step:
            return False
        step *= num
    return True


def psum_write(core, ins, dst, m, n, psum_dtype):
    """The PSUM write of a matmul's result ``[M, N]`` at ``dst`` (its bank, column, the
    instruction's accumulate flag and rounding) and the first partition it writes; a
    destination that is not ``[M partitions, N contiguous elements]`` in one bank raises."""
    bank, col, p0 = _psum_target(core, ins, dst, m, n)
    acc = bool(ins.args.get("accumulate"))
    flags = (Flag.FIRST_ACCUMULATE if acc else Flag.FIRST) | Flag.LAST
    rounding = Rounding.SR if ins.args.get("rounding") == "sr" else Rounding.RNE
    try:
        return Write(bank, col, n, psum_dtype, rounding, int(flags)), p0
    except ValueError as e:
        raise KernelError(f"{_where(ins)}PSUM: {e}") from None


def _psum_write(st, ins, dst, bits, psum_dtype):
    """Apply ``bits`` ``[M, N]`` through PSUM's read-add-write at ``dst``'s bank and column,
    on the lanes of ``dst``'s partitions only."""
    m, n = bits.shape
    w, p0 = psum_write(st.program.core, ins, dst, m, n, psum_dtype)
    cols = st.psum.geometry.partitions
    if p0 + m > cols:
        raise KernelError(f"{_where(ins)}writes partitions {p0}..{p0 + m - 1} of {cols}")
    bits = np.asarray(bits, dtype=np.uint32)
    if m == cols:
        beats = bits.T  # every lane: the result as it stands, no copy
    else:
        beats = np.zeros((n, cols), np.uint32)
        beats[:, p0 : p0 + m] = bits.T
    try:  # only the tile's columns reach PSUM
        st.psum.write(w, beats, lanes=slice(p0, p0 + m))
    except ValueError as e:
        raise KernelError(f"{_where(ins)}PSUM: {e}") from None
    isz = 4 if psum_dtype == Dtype.FP32 else 2
    base = w.bank * st.program.core.psum_bank_bytes + w.col * isz
    st.psum_written[p0 : p0 + m, base : base + n * isz] = True


def _te_operand(st, ref, ins):
    v = st.read(ref, ins)
    fmt = "tf32" if ref.view_dtype == "tfloat32" else None
    return v, fmt


def _chunk_refs(dst, chunks):
    """``(first column, columns, destination)`` of each MultiplyMoving of a matmul (one, or
    one per column chunk over several PSUM banks)."""
    if not chunks:
        return [(0, None, dst)]
    row = math.prod(dst.tensor_shape()[1:])
    m = dst.view_shape[0]
    return [
        (c0, n, replace(dst, pattern=((row, m), (1, n)), offset=dst.offset + c0))
        for c0, n in chunks
    ]


def _matmul(st, ins):
    (dst,), (stat, mov) = ins.dsts, ins.srcs
    s, fs = _te_operand(st, stat, ins)
    x, fm = _te_operand(st, mov, ins)
    for c0, n, d in _chunk_refs(dst, ins.args.get("chunks")):
        _matmul_chunk(st, ins, d, s, fs, x if n is None else x[..., c0 : c0 + n], fm)


def _matmul_chunk(st, ins, dst, s, fs, x, fm):
    core = st.program.core
    a = ins.args
    try:
        bits = matmul_bits(
            s,
            x,
            perf_mode=a.get("perf_mode"),
            is_transpose=bool(a.get("is_transpose")),
            tile_position=a.get("tile_position"),
            tile_size=a.get("tile_size"),
            rows=core.rows,
            cols=core.cols,
            stationary_format=fs,
            moving_format=fm,
            tile_unit=core.tile_unit,
        )
    except ValueError as e:
        raise KernelError(f"{_where(ins)}{e}") from None
    if a.get("is_transpose"):
        kind = Dtype.RAW16 if bits.dtype == np.uint16 else Dtype.FP32
    else:
        kind = Dtype.BF16 if dst.view_dtype == "bfloat16" else Dtype.FP32
    _psum_write(st, ins, dst, bits, kind)


def _matmul_mx(st, ins):
    (dst,), (stat, mov, s_scale, m_scale) = ins.dsts, ins.srcs
    core = st.program.core
    s = unpack_x4(st.read(stat, ins), stat.view_dtype)
    x = unpack_x4(st.read(mov, ins), mov.view_dtype)
    k = s.shape[0]
    a = ins.args
    try:
        ss = mx_row_scales(st.read(s_scale, ins).view(np.uint8), k, "stationary_scale")
        xs = mx_row_scales(st.read(m_scale, ins).view(np.uint8), k, "moving_scale")
    except ValueError as e:
        raise KernelError(f"{_where(ins)}{e}") from None
    kind = Dtype.BF16 if dst.view_dtype == "bfloat16" else Dtype.FP32
    for c0, n, d in _chunk_refs(dst, a.get("chunks")):
        cols = slice(None) if n is None else slice(c0, c0 + n)
        try:
            res = matmul_mx_rows(
                s,
                x[:, cols],
                ss,
                xs[:, cols],
                tile_position=a.get("tile_position"),
                tile_size=a.get("tile_size"),
                rows=core.rows,
                cols=core.cols,
                psum_dtype="bf16" if dst.view_dtype == "bfloat16" else "fp32",
                tile_unit=core.tile_unit,
            )
        except ValueError as e:
            raise KernelError(f"{_where(ins)}{e}") from None
        _psum_write(st, ins, d, result_bits(res), kind)


def _matmul_sparse(st, ins):
    (dst,), (stat, mov, tag) = ins.dsts, ins.srcs
    core = st.program.core
    s, fs = _te_operand(st, stat, ins)
    x, fm = _te_operand(st, mov, ins)
    t = st.read(tag, ins)
    try:
        res = matmul_sparse(
            x,
            s,
            t,
            te_isa.decode(int(ins.args["te"][0])).sparse,
            rows=core.rows,
            cols=core.cols,
            stationary_format=fs,
            moving_format=fm,
            tile_unit=core.tile_unit,
        )
    except ValueError as e:
        code = getattr(getattr(e, "error", None), "name", "NONE")
        msg = (f"{code}: " if code != "NONE" else "") + str(e)
        raise KernelError(f"{_where(ins)}{msg}") from None
    _psum_write(st, ins, dst, result_bits(res), Dtype.FP32)


OPS = {
    "matmul": _matmul,
    "matmul_mx": _matmul_mx,
    "matmul_sparse": _matmul_sparse,
    **MORE_OPS,
}


def execute(state, ins):
    """Apply one instruction to ``state``."""
    try:
        fn = OPS[ins.op]
    except KeyError:
        raise KernelError(f"{_where(ins)}the golden has no operation {ins.op!r}") from None
    if "indirect" in ins.args:  # run-time offsets: the views with the index values read now
        from ncrtl.model.kernel.ops.dma import resolve

        ins = resolve(state, ins)
        if ins is None:  # every element skipped (oob_mode=skip)
            return
    if state._said is not None:
        state._said = None
    if state.taint is not None and state.taint.texts and taint.precheck(state, ins):
        taint.slow(state, fn, ins)
        return
    try:
        fn(state, ins)
    except taint.Tainted:  # it read memory nothing wrote: again, the taint followed
        taint.slow(state, fn, ins)


def group_execute(states, sides):
    """A group operation (a collective, a barrier) on the cores of ``sides``: its sources
    checked for taint (:func:`ncrtl.model.kernel.taint.group_check`), then
    :func:`ncrtl.model.kernel.collective.execute`."""
    taint.group_check(states, sides)
    for st in states:
        st._probe = taint.REAL  # warned: the values as they are
    try:
        _group_execute(states, sides)
    finally:
        for st in states:
            st._probe = None


def core_states(programs, inputs, *, seed=0, uninitialized="error"):
    """The :class:`CoreState` of each of ``programs`` (the cores of a logical core) over one
    device memory, as large as every core's device tensors need (a core's private ones lie
    after the first core's), with ``inputs`` in it."""
    states = [CoreState(programs[0], inputs, seed=seed, uninitialized=uninitialized)]
    size = max(
        (t.base + t.nbytes for p in programs for t in p.tensors.values() if t.space == "hbm"),
        default=0,
    )
    grow = size - states[0].hbm.size
    if grow > 0:
        states[0].hbm = np.concatenate([states[0].hbm, np.zeros(grow, np.uint8)])
        states[0].hbm_written = np.concatenate([states[0].hbm_written, np.zeros(grow, bool)])
    for p in programs[1:]:
        st = CoreState(p, inputs, seed=seed, uninitialized=uninitialized)
        st.hbm, st.hbm_written = states[0].hbm, states[0].hbm_written  # one device memory
        states.append(st)
    return states


def run(program, inputs, *, order="program", seed=0, uninitialized="error", state=None):
    """Run ``program`` on the goldens; returns ``(outputs, state)``: the output tensors (numpy
    arrays of their dtypes, in return order) and the final :class:`CoreState`.

    ``program`` may also be the programs of the two cores of a logical core (``kernel[2]``):
    they share the device memory, each has its own SBUF and PSUM, a ``sendrecv`` runs when
    its partner on the other core (the same pipe's same turn) is ready too; ``state`` is then
    the list of the cores' states.

    Raises
    ------
    KernelError
        A rule an instruction breaks, an uninitialized read, or streams that cannot finish
        (each waiting instruction named).
    """
    if order not in ("program", "reverse", "random"):
        raise ValueError(f"order must be 'program', 'reverse' or 'random', not {order!r}")
    programs = list(program) if isinstance(program, (list, tuple)) else [program]
    if state is None:
        states = core_states(programs, inputs, seed=seed, uninitialized=uninitialized)
    else:
        states = list(state) if isinstance(state, (list, tuple)) else [state]
    taint.share(states)
    if loops.dynamic(programs):  # registers and dynamic loops: each stream's sequencer runs
        loops.run(programs, states, order=order, seed=seed)
        taint.check_outputs(states)
        return [states[0].tensor(n) for n in programs[0].outputs], (
            states[0] if len(states) == 1 else states
        )
    streams = {(c, n): s for c, p in enumerate(programs) for n, s in p.streams.items() if s}
    done = {(c, n): 0 for c, p in enumerate(programs) for n in p.streams}
    partners = {}
    for c, p in enumerate(programs):
        for n, s in p.streams.items():
            for i in s:
                if i.op in GROUP_OPS:
                    partners[(c, *rendezvous(i))] = i
    rng = random.Random(seed)
    remaining = sum(len(s) for s in streams.values())

    def met(c, ins):
        return all(done[(c, w)] >= k for w, k in ins.waits)

    def head(c, ins):
        return done[(c, ins.engine)] == ins.index and met(c, ins)

    def runnable(c, n):
        """The next instruction of stream ``(c, n)`` when it can run now, else None."""
        s, i = streams[(c, n)], done[(c, n)]
        if i >= len(s) or not met(c, s[i]):
            return None
        ins = s[i]
        if ins.op in GROUP_OPS:  # runs when its sides on the other cores can run too
            key = rendezvous(ins)
            for o in members(ins, c):
                other = partners.get((o, *key))
                if other is None or not head(o, other):
                    return None
        return ins

    # The streams' next instructions by program position: in program order the earliest is
    # the one to run whenever it can (its waits name earlier instructions), so a step looks at
    # one stream, not at all of them; the others are found by looking at every stream.
    nexts = [(s[0].seq, c, n, 0) for (c, n), s in streams.items()]
    heapq.heapify(nexts)

    def advance(c, n):
        i = done[(c, n)]
        if i < len(streams[(c, n)]):
            heapq.heappush(nexts, (streams[(c, n)][i].seq, c, n, i))

    while remaining:
        ins = None
        if order == "program":
            while done[nexts[0][1:3]] != nexts[0][3]:
                heapq.heappop(nexts)  # a stream that has moved on since
            _, c, n, _ = nexts[0]
            ins = runnable(c, n)
        if ins is None:
            ready = [(c, i) for c, n in streams if (i := runnable(c, n)) is not None]
            if not ready:
                raise KernelError(deadlock(programs, done))
            if order == "program":
                c, ins = min(ready, key=lambda ci: (ci[1].seq, ci[0]))
            elif order == "reverse":
                c, ins = max(ready, key=lambda ci: (ci[1].seq, ci[0]))
            else:
                c, ins = rng.choice(ready)
        if ins.op in GROUP_OPS:
            key = rendezvous(ins)
            sides = {c: ins, **{o: partners[(o, *key)] for o in members(ins, c)}}
            if ins.op == "sendrecv":
                a, b = sorted(sides)  # the two cores of one logical core (of one rank)
                _sendrecv((states[a], states[b]), (sides[a], sides[b]))
            else:
                group_execute(states, sides)
            for r, i in sides.items():
                done[(r, i.engine)] += 1
                advance(r, i.engine)
            remaining -= len(sides)
            continue
        execute(states[c], ins)
        done[(c, ins.engine)] += 1
        advance(c, ins.engine)
        remaining -= 1
    taint.check_outputs(states)
    return [states[0].tensor(n) for n in programs[0].outputs], (
        states[0] if len(states) == 1 else states
    )


def _tile(st, ref, ins):
    from ncrtl.model.dma.sendrecv import Tile

    slab = st._slab(ref)
    if slab is None or slab[0] is None:
        raise KernelError(
            f"{_where(ins)}sendrecv tiles are whole partitions of contiguous bytes, not {ref}"
        )
    parts, byts = slab
    isz = ref.element.itemsize
    return Tile(
        parts.start, parts.stop - parts.start, byts.start, (byts.stop - byts.start) // isz, isz
    )


def _sendrecv(states, pair):
    """One sendrecv pair on the two cores: the rules and data of
    :func:`ncrtl.model.dma.sendrecv.exchange`."""
    from ncrtl.model.dma.sendrecv import Code, SendRecv, exchange

    ops = []
    for r, ins in enumerate(pair):
        a = ins.args
        src = _tile(states[r], ins.srcs[0], ins)
        dst = _tile(states[r], ins.dsts[0], ins)
        ops.append(
            SendRecv(
                src, dst, a["send_to_rank"], a["recv_from_rank"], a["pipe_id"], a["dma_engine"]
            )
        )
    sbufs, codes, msgs = exchange([[ops[0]], [ops[1]]], [states[0].sbuf, states[1].sbuf])
    for r in (0, 1):
        if codes[r][0] != Code.NONE:
            raise KernelError(f"{_where(pair[r])}{Code(codes[r][0]).name}: {msgs[r][0]}")
    for r in (0, 1):
        states[r].sbuf[...] = sbufs[r]
    # the written mask goes with the bytes: what was sent unwritten arrives tainted
    taint.sendrecv_masks(states, pair, [(o.src, o.dst) for o in ops])


def deadlock(programs, done):
    """The message for streams that cannot go on: each stream's waiting instruction and the
    semaphores it waits for (``done`` counts by ``(core, stream)``, or by stream for one
    program)."""
    programs = list(programs) if isinstance(programs, (list, tuple)) else [programs]
    lines = ["the streams cannot finish: every next instruction waits on a semaphore"]
    for c, program in enumerate(programs):
        count = (
            (lambda n, c=c: done[(c, n)])
            if (c, next(iter(program.streams))) in done
            else done.__getitem__
        )
        core = f"core {c}: " if len(programs) > 1 else ""
        for n, s in program.streams.items():
            if count(n) < len(s):
                ins = s[count(n)]
                unmet = [f"{w} to reach {k} (at {count(w)})" for w, k in ins.waits if count(w) < k]
                if ins.op == "sendrecv" and not unmet:
                    unmet = [
                        f"its partner on the other core (pipe {ins.args['pipe_id']}, turn {ins.args['turn']})"
                    ]
                elif ins.op in GROUP_OPS and not unmet:
                    unmet = [
                        f"its sides on cores {list(members(ins, c))} (group operation "
                        f"{ins.args['turn']} of each core)"
                    ]
                lines.append(f"  {core}{ins.label} ({ins.line}) waits for {', '.join(unmet)}")
    return "\n".join(lines)
