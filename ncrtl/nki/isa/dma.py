"""The DMA instructions: ``dma_copy``, ``dma_transpose``, ``dma_compute`` and ``sendrecv``
(between the two cores of a logical core), with the descriptor generation each asks for
(:func:`dge`), the run-time offsets of their views (:func:`indirect_args`: ``.ap`` with
``scalar_offset`` / ``vector_offset``, a dynamic ``select``, ``vector_select``; and
NeuronCore-v4's ``.indirect`` views of the compute engines), and :func:`get_nc_sub_version`.
docs/nki/dma.md states each one's semantics, rules and cost."""

from __future__ import annotations

import math

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of

from .._trace import NkiTensor, current, fail
from .enums import dge_mode, dma_engine, engine, oob_mode
from .enums import dge_mode as DGE_MODE
from .operands import emit, free_size, op_name, operand

__all__ = [
    "dma_copy",
    "dma_transpose",
    "dma_compute",
    "sendrecv",
    "get_nc_sub_version",
]

#: The permutation of each rank's transpose (the reference's: 2-D [1, 0], 3-D [2, 1, 0], 4-D
#: [3, 1, 2, 0]).
TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def get_nc_sub_version():
    """The silicon revision within the core version: 0, the first (ncrtl models the first
    revision of each NeuronCore version)."""
    current("nisa.get_nc_sub_version")
    return 0


def _dyn(t):
    return t._dyn if isinstance(t, NkiTensor) else None


def _oob(call, mode, *views):
    """``oob_mode`` as the stream carries it (``"skip"`` or nothing); ``skip`` only where a
    view has a run-time offset (there is nothing to skip otherwise)."""
    if mode in (None, oob_mode.error):
        return {}
    if mode != oob_mode.skip:
        fail(call, f"oob_mode={mode!r}: nisa.oob_mode.error or nisa.oob_mode.skip")
    if not any(_dyn(v) is not None for v in views):
        fail(call, "oob_mode=skip skips run-time indices out of bounds: no view here has one")
    return {"oob_mode": "skip"}


def _priority(call, priority):
    """``priority`` (DMA QoS, NeuronCore-v4): 0 (served first) to 3; None the default."""
    if priority is None:
        return {}
    if isinstance(priority, bool) or not isinstance(priority, (int, np.integer)):
        fail(call, f"priority must be an integer 0 to 3, not {priority!r}")
    if not 0 <= int(priority) <= 3:
        fail(call, f"priority {priority}: the DMA QoS levels are 0 (first) to 3")
    if current(call).core.name in ("v2", "v3"):
        fail(call, "priority (DMA quality of service) is NeuronCore-v4 and later")
    return {"priority": int(priority)}


def _dynamic_dge(call, mode, views, trigger=engine.unknown):
    """The descriptor generation of a transfer with run-time offsets: a ``vector_offset``
    (gather / scatter) on the software DGE (GpSimd) only; a scalar offset on a DGE, the
    hardware one on NeuronCore-v3 and later unless ``swdge`` is asked; precomputed
    descriptors (``dge_mode.none``) cannot hold a run-time address."""
    kinds = {d.kind for v in views if (d := _dyn(v)) is not None}
    if not kinds:
        return dge(call, mode, trigger)
    if mode == dge_mode.none:
        fail(call, "dge_mode=none: precomputed descriptors cannot hold a run-time offset")
    if "vector" in kinds:
        if mode == dge_mode.hwdge:
            fail(
                call,
                "dge_mode=hwdge: a vector_offset (gather / scatter) runs on the software DGE "
                "(nisa.dge_mode.swdge)",
            )
        return {"dge": "sw"}
    if mode in (dge_mode.unknown, None):
        mode = dge_mode.swdge if current(call).core.name == "v2" else dge_mode.hwdge
    return dge(call, mode, trigger)


def indirect_args(engine_name, dsts, srcs, args, call):
    """``(srcs, args)`` of an instruction with operands of run-time offsets
    (:class:`~ncrtl.nki._trace.IndirectOperand`): each one's index tensor appended to the
    sources, and ``args["indirect"]`` one entry per such operand: ``side`` (``"dst"`` /
    ``"src"``) and ``at`` (its position), ``kind`` (``scalar``, ``vector``, ``ti``),
    ``stride`` (elements per index unit), ``index`` (the index's position in the sources; a
    scalar offset held in a register instead names it, ``register``, and the instruction's
    ``regs`` lists it);
    ``ti`` also ``group`` (16, or 32 on the Tensor Engine) and ``free`` (the elements of a
    partition it gathers from).  A DMA takes scalar and vector offsets, the compute engines
    NeuronCore-v4's ``.indirect`` views."""
    out, specs, regs = list(srcs), [], []
    for side, ops in (("dst", dsts), ("src", srcs)):
        for at, o in enumerate(ops):
            dyn = getattr(o, "dyn", None)
            if dyn is None:
                continue
            name = o.decl.name
            spec = {"side": side, "at": at, "kind": dyn.kind, "stride": dyn.stride}
            if dyn.kind == "ti":
                if engine_name not in ("tensor", "vector", "scalar", "gpsimd"):
                    fail(
                        call,
                        f"{side} {name}: an .indirect view is the compute engines'; a DMA takes "
                        ".ap(scalar_offset= / vector_offset=) views",
                    )
                group = 32 if engine_name == "tensor" else 16
                ix = dyn.index
                cols = free_size(ix)
                if dyn.num > group * cols or ix.shape[0] < min(group, dyn.num):
                    fail(
                        call,
                        f"{side} {name}: offset i of an .indirect view is index[i % {group}, "
                        f"i // {group}] on the {engine_name} engine; {dyn.num} offsets need "
                        f"{min(group, dyn.num)} partitions and {math.ceil(dyn.num / group)} "
                        f"columns, index {ix.name} is {list(ix.shape)} (pass num_elem=)",
                    )
                spec.update(group=group, free=dyn.free)
            elif not engine_name.startswith("dma"):
                fail(
                    call,
                    f"{side} {name}: a run-time offset (.ap scalar_offset / vector_offset, a "
                    "dynamic select) is read by the DMA; the compute engines take "
                    "NeuronCore-v4's .indirect views",
                )
            if not isinstance(dyn.index, NkiTensor):  # a register: read on the sequencer
                spec["register"] = dyn.index.name
                regs.append(dyn.index.name)
            else:
                spec["index"] = len(out)
                out.append(dyn.index._operand(call, f"the index of {side} {name}"))
            specs.append(spec)
    args = {**args, "indirect": tuple(specs)}
    if regs:
        args["regs"] = (*args.get("regs", ()), *regs)
    return tuple(out), args


def _dge_mode(call, value):
    """``dge_mode=`` as its enumeration member: a member, its integer value (kernels pass
    ``3``) or None."""
    if value is None or isinstance(value, DGE_MODE):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        try:
            return DGE_MODE(int(value))
        except ValueError:
            pass
    fail(call, f"dge_mode={value!r}: one of nisa.dge_mode's unknown, swdge, hwdge, none (0-3)")


def dma_copy(
    dst,
    src,
    priority=None,
    oob_mode=oob_mode.error,
    dge_mode=dge_mode.unknown,
    engine=engine.unknown,
    name=None,
):
    """Copy ``src`` to ``dst`` with the DMA engines (device memory and SBUF, either way); a
    view with a run-time offset gathers (``src``) or scatters (``dst``)."""
    call = "nisa.dma_copy"
    s = operand(call, "src", src, ("sbuf", "hbm"))
    d = operand(call, "dst", dst, ("sbuf", "hbm"))
    if src.size != dst.size:
        fail(
            call, f"src {list(src.shape)} has {src.size} elements, dst {list(dst.shape)} {dst.size}"
        )
    if dtype_of(src.dtype).packed != dtype_of(dst.dtype).packed:
        fail(call, f"src {src.dtype} and dst {dst.dtype}: packed types are copied as they are")
    args = _dynamic_dge(call, _dge_mode(call, dge_mode), (dst, src), engine)
    args.update(_oob(call, oob_mode, dst, src), **_priority(call, priority))
    emit("dma", "dma_copy", [d], [s], args, call)


def dma_transpose(
    dst,
    src,
    axes=None,
    priority=None,
    dge_mode=dge_mode.unknown,
    oob_mode=oob_mode.error,
    name=None,
):
    """Transpose ``src`` (device memory or SBUF; 2-D, 3-D or 4-D) into SBUF with the DMA
    engines: ``dst[i_axes[0], ...] = src[...]``, ``dst.shape[k] == src.shape[axes[k]]``; a
    ``src`` with a ``vector_offset`` gathers its rows first (the indirect transpose)."""
    call = "nisa.dma_transpose"
    s = operand(call, "src", src, ("sbuf", "hbm"))
    d = operand(call, "dst", dst, ("sbuf",))
    if src.dtype != dst.dtype or dtype_of(src.dtype).itemsize not in (2, 4):
        fail(call, f"src {src.dtype} and dst {dst.dtype} must be one 2- or 4-byte dtype")
    rank = len(src.shape)
    default = TRANSPOSE_AXES.get(rank)
    if axes is None:
        if default is None:
            fail(call, f"src {list(src.shape)}: a DMA transpose is of 2-D, 3-D or 4-D views")
        axes = default
    try:
        axes = tuple(int(a) for a in axes)
    except (TypeError, ValueError):
        fail(call, f"axes must be a tuple of dimensions, not {axes!r}")
    if axes not in TRANSPOSE_AXES.values():
        fail(call, f"axes={axes}: the DMA transposes by (1, 0), (2, 1, 0) or (3, 1, 2, 0)")
    if len(axes) != rank:
        if rank == 2 or len(axes) != 2:
            fail(call, f"axes={axes} for the {rank}-D src {list(src.shape)}")
        # a 2-D transpose of a view of more dimensions: its partitions by the rest
        shape = (src.shape[0], free_size(src))
    else:
        shape = tuple(src.shape)
    want = tuple(shape[a] for a in axes)
    if tuple(dst.shape) != want and not (len(axes) == 2 and (dst.shape[0], free_size(dst)) == want):
        fail(
            call,
            f"dst {list(dst.shape)} must be src {list(src.shape)} by axes {axes}: {list(want)}",
        )
    dyn = _dyn(src)
    if _dyn(dst) is not None:
        fail(call, "dst has a run-time offset: a DMA transpose gathers through src only")
    mode = _dge_mode(call, dge_mode)
    if dyn is not None:
        _indirect_transpose(call, src, dyn, mode)
        args = {"dge": "sw"}
    else:
        # the reference names unknown and hwdge; none (precomputed descriptors, which
        # nki-library passes) is the compiler's transpose as unknown is
        if mode == DGE_MODE.swdge:
            fail(call, f"dge_mode={mode!r}: a DMA transpose takes unknown, none or hwdge")
        if mode == DGE_MODE.hwdge:
            _hwdge_transpose(call, src, rank)
        args = dge(call, mode, engine.unknown)
    args["axes"] = axes
    args.update(_oob(call, oob_mode, src), **_priority(call, priority))
    emit("dma", "dma_transpose", [d], [s], args, call)


def _hwdge_transpose(call, src, rank):
    """The hardware DGE transpose's limits (the reference's "DMA Direct Transpose")."""
    p = src.shape[0]
    if rank == 2 and p != 16:
        fail(call, f"dge_mode=hwdge: a 2-D src has 16 rows, not {p}")
    if rank > 2 and (p not in (1, 2, 4, 8, 16) or (p * src.shape[-2]) % 16):
        fail(
            call,
            f"dge_mode=hwdge: a {rank}-D src's first dimension is 1, 2, 4, 8 or 16 and times "
            f"its shape[-2] a multiple of 16, not {list(src.shape)}",
        )
    if src.shape[-1] > 128:
        fail(call, f"dge_mode=hwdge: src.shape[-1] {src.shape[-1]} is at most 128")
    if dtype_of(src.dtype).itemsize != 2:
        fail(call, f"dge_mode=hwdge: src is a 2-byte dtype, not {src.dtype}")


def _indirect_transpose(call, src, dyn, mode):
    """The indirect transpose's limits (the reference's "DMA Indirect Transpose")."""
    if mode not in (dge_mode.unknown, dge_mode.swdge, None):
        fail(call, f"dge_mode={mode!r}: an indirect transpose takes unknown or swdge")
    if current(call).core.name == "v2":
        fail(call, "an indirect transpose (src with a vector_offset) is NeuronCore-v3 and later")
    if dyn.kind != "vector":
        fail(call, "src has a scalar run-time offset: an indirect transpose takes a vector_offset")
    ix = dyn.index
    shape = src.shape
    rules = (
        (len(shape) != 4 or 1 in (shape[1], shape[2]), "a 4-D src has shape[1] or shape[2] 1"),
        (shape[-1] <= 128, f"src.shape[-1] {shape[-1]} is at most 128"),
        (dtype_of(src.dtype).itemsize == 2, f"src is a 2-byte dtype, not {src.dtype}"),
        (shape[0] % 16 == 0, f"src.shape[0] {shape[0]} is a multiple of 16"),
        (len(ix.shape) == 2, f"the indices {list(ix.shape)} are 2-D"),
        (ix.size >= shape[0], f"the indices {list(ix.shape)} hold src.shape[0] {shape[0]} or more"),
        (
            16 <= ix.shape[0] <= 128 and ix.shape[0] % 16 == 0,
            f"the indices' {ix.shape[0]} partitions are 16 to 128, a multiple of 16",
        ),
        (
            len(ix.shape) != 2 or ix.shape[1] == 1 or ix.shape[0] == 128,
            f"indices of {ix.shape[1]} columns have 128 partitions, not {ix.shape[0]}",
        ),
        (ix.dtype in ("uint32", "int32"), f"the indices are uint32, not {ix.dtype}"),
    )
    for ok, rule in rules:
        if not ok:
            fail(call, f"indirect transpose (src with a vector_offset): {rule}")


def dma_compute(
    dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=oob_mode.error, name=None
):
    """``dst = reduce_op(srcs[0] * scales[0], srcs[1] * scales[1], ...)`` in the DMA engines'
    arithmetic (float32, then one rounding to ``dst``): ``reduce_op`` ``nl.add``, every scale
    1.0; with a ``vector_offset``, the read-modify-write of a scatter (``dst`` in device
    memory, ``srcs`` ``dst`` itself and SBUF data) or a gather (``dst`` in SBUF, ``srcs``
    gathered device memory and ``dst`` itself)."""
    call = "nisa.dma_compute"
    d = operand(call, "dst", dst, ("sbuf", "hbm"))
    if isinstance(srcs, NkiTensor) or not isinstance(srcs, (list, tuple)):
        fail(call, f"srcs must be a list of tensors, not {srcs!r}")
    if not 1 <= len(srcs) <= 16:
        fail(call, f"srcs has {len(srcs)} tensors: 1 to 16")
    ops = [operand(call, f"srcs[{k}]", t, ("sbuf", "hbm")) for k, t in enumerate(srcs)]
    for k, t in enumerate(srcs):
        if t.size != dst.size:
            fail(
                call,
                f"srcs[{k}] {list(t.shape)} has {t.size} elements, dst {list(dst.shape)} "
                f"{dst.size}",
            )
        if dtype_of(t.dtype).packed != 1:
            fail(call, f"srcs[{k}] is the packed type {t.dtype}: the DMA computes on values")
    if dtype_of(dst.dtype).packed != 1:
        fail(call, f"dst is the packed type {dst.dtype}: the DMA computes on values")
    if op_name(call, "reduce_op", reduce_op, ("add",)) != "add":
        fail(call, "reduce_op: only nl.add")
    if scales is not None:
        if not isinstance(scales, (list, tuple)) or len(scales) != len(srcs):
            fail(
                call,
                f"scales must be a list of {len(srcs)} numbers (one per source), not {scales!r}",
            )
        if any(not isinstance(x, (int, float, np.number)) or float(x) != 1.0 for x in scales):
            fail(call, f"scales {list(scales)}: every scale is 1.0")
    views = (dst, *srcs)
    vectors = [v for v in views if (y := _dyn(v)) is not None and y.kind == "vector"]
    if any(_dyn(v) is not None and _dyn(v).kind != "vector" for v in views):
        fail(
            call,
            "a scalar run-time offset: dma_compute's views have static addresses or a vector_offset",
        )
    if vectors:
        _read_modify_write(call, dst, srcs, unique_indices)
        args = {"dge": "sw"}
    else:
        args = {}
    args.update(_oob(call, oob_mode, *views))
    # the DMA's passes over the data: each source read once through the engine; on
    # NeuronCore-v4 the source that is the SBUF dst itself is read by the SBUF's near-memory
    # read-add-write (seed 001), at no cost to the engine
    near = current(call).core.name not in ("v2", "v3") and dst.on_chip
    args["passes"] = sum(1 for t in srcs if not (near and _same_view(t, dst)))
    emit("dma", "dma_compute", [d], ops, args, call)


def _same_view(a, b):
    return (
        a._decl is b._decl
        and a.shape == b.shape
        and a.strides == b.strides
        and a.offset == b.offset
        and a.dtype == b.dtype
    )


def _read_modify_write(call, dst, srcs, unique_indices):
    """The forms of a dma_compute with a vector_offset (the reference's scatter and gather
    read-modify-writes)."""
    if len(srcs) != 2:
        fail(call, f"a read-modify-write (a vector_offset) has exactly 2 sources, not {len(srcs)}")
    if unique_indices is not True:
        fail(call, "unique_indices=False: a read-modify-write's indices are unique (True)")
    same = [k for k, t in enumerate(srcs) if _same_view(t, dst) and _dyn(t) is _dyn(dst)]
    dyn = _dyn(dst)
    if dyn is not None:  # scatter: dst(HBM)[indices] += src(SBUF)
        other = srcs[1 - same[0]] if same else None
        if not same or other.buffer != "sbuf":
            fail(
                call,
                "a scatter read-modify-write (dst with a vector_offset) takes dst itself and "
                "SBUF data as its two sources",
            )
        return
    if dst.buffer != "sbuf" or not same:
        fail(
            call,
            "a gather read-modify-write (a source with a vector_offset) writes an SBUF dst and "
            "takes dst itself as its other source",
        )
    other = srcs[1 - same[0]]
    if _dyn(other) is None or other.buffer != "shared_hbm" and other.on_chip:
        fail(call, "a gather read-modify-write reads device memory through a vector_offset")


def dge(call, mode, trigger):
    """A transfer's descriptor generation as the timing model takes it (docs/kernels.md,
    "Costs"): ``{"dge": "hw", "dge_engine": ...}`` (the hardware DGE, NeuronCore-v3 and later,
    triggered by the Scalar or Sync engine's queue), ``{"dge": "sw"}`` (on the GpSimd engine),
    nothing for precomputed descriptors (``none``, or ``unknown``: the compiler's choice)."""
    if mode in (dge_mode.unknown, dge_mode.none, None):
        return {}
    if mode == dge_mode.swdge:
        return {"dge": "sw"}
    if mode != dge_mode.hwdge:
        fail(call, f"dge_mode={mode!r}: one of nisa.dge_mode's unknown, none, swdge, hwdge")
    name = current(call).core.name
    if name == "v2":
        fail(call, "dge_mode=hwdge: the hardware descriptor generator is NeuronCore-v3 and later")
    by = {engine.scalar: "scalar", engine.sync: "sync"}
    if trigger not in (None, engine.unknown, *by):
        fail(
            call,
            f"engine={trigger!r}: only nisa.engine.scalar or nisa.engine.sync trigger the "
            "hardware descriptor generator (dge_mode=hwdge)",
        )
    return {"dge": "hw", **({"dge_engine": by[trigger]} if trigger in by else {})}


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma, name=None):
    """Send ``src`` to the other core's ``dst`` while receiving its ``src`` into this core's
    ``dst`` (a logical core of two, ``kernel[2]``; NeuronCore-v3 or later)."""
    call = "nisa.sendrecv"
    tr = current(call)
    if tr.core.name == "v2":
        fail(call, "sendrecv needs NeuronCore-v3 or later")
    if tr.num_programs != 2:
        fail(call, "sendrecv runs between the two cores of a logical core: launch kernel[2]")
    s = operand(call, "src", src, ("sbuf",))
    d = operand(call, "dst", dst, ("sbuf",))
    path = {dma_engine.dma: "dma", dma_engine.gpsimd_dma: "gpsimd_dma"}.get(dma_engine)
    if path is None:
        fail(call, f"dma_engine={dma_engine!r}: nisa.dma_engine.dma or nisa.dma_engine.gpsimd_dma")
    for what, v in (
        ("send_to_rank", send_to_rank),
        ("recv_from_rank", recv_from_rank),
        ("pipe_id", pipe_id),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            fail(call, f"{what} must be an integer known when the kernel is traced, not {v!r}")
    from ncrtl.model.dma.sendrecv import SendRecv, Tile, side_error

    # The rules of one side that need no placement (ranks, shapes, the gpsimd limits): the
    # sendrecv golden's, on the tiles placed apart.
    def tile(t, byte):
        return Tile(0, t.shape[0], byte, free_size(t), dtype_of(t.dtype).itemsize)

    far = tile(src, 0).nbytes
    op = SendRecv(
        tile(src, 0), tile(dst, far), int(send_to_rank), int(recv_from_rank), int(pipe_id), path
    )
    bad = side_error(op, tr.program_id, tr.core.partitions, 2 * far + 1)
    if bad is not None:
        fail(call, f"{bad[0].name}: {bad[1]}")
    turn = tr.pipes.get(int(pipe_id), 0)
    tr.pipes[int(pipe_id)] = turn + 1
    args = {
        "send_to_rank": int(send_to_rank),
        "recv_from_rank": int(recv_from_rank),
        "pipe_id": int(pipe_id),
        "dma_engine": path,
        "turn": turn,
    }
    emit("gpsimd" if path == "gpsimd_dma" else "dma", "sendrecv", [d], [s], args, call)
