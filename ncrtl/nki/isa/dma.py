"""The DMA instructions: ``dma_copy``, ``dma_transpose`` and ``sendrecv`` (between the two cores
of a logical core), with the descriptor generation each asks for (:func:`dge`)."""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of

from .._trace import current, fail, not_modelled
from .enums import dge_mode, dma_engine, engine, oob_mode
from .operands import emit, free_size, operand


def dma_copy(
    dst,
    src,
    priority=None,
    oob_mode=oob_mode.error,
    dge_mode=dge_mode.unknown,
    engine=engine.unknown,
    name=None,
):
    """Copy ``src`` to ``dst`` with the DMA engines (device memory and SBUF, either way)."""
    call = "nisa.dma_copy"
    s = operand(call, "src", src, ("sbuf", "hbm"))
    d = operand(call, "dst", dst, ("sbuf", "hbm"))
    if src.size != dst.size:
        fail(
            call, f"src {list(src.shape)} has {src.size} elements, dst {list(dst.shape)} {dst.size}"
        )
    if dtype_of(src.dtype).packed != dtype_of(dst.dtype).packed:
        fail(call, f"src {src.dtype} and dst {dst.dtype}: packed types are copied as they are")
    emit("dma", "dma_copy", [d], [s], dge(call, dge_mode, engine), call)


def dma_transpose(
    dst,
    src,
    axes=None,
    priority=None,
    dge_mode=dge_mode.unknown,
    oob_mode=oob_mode.error,
    name=None,
):
    """Transpose a 2-D ``src`` (device memory or SBUF) into SBUF with the DMA engines."""
    call = "nisa.dma_transpose"
    if axes not in (None, (1, 0), [1, 0]):
        not_modelled(f"nisa.dma_transpose(axes={axes}) (2-D transposes only)")
    s = operand(call, "src", src, ("sbuf", "hbm"))
    d = operand(call, "dst", dst, ("sbuf",))
    if src.dtype != dst.dtype or dtype_of(src.dtype).itemsize not in (2, 4):
        fail(call, f"src {src.dtype} and dst {dst.dtype} must be one 2- or 4-byte dtype")
    if len(src.shape) != 2 or tuple(dst.shape) != tuple(src.shape[::-1]):
        fail(call, f"dst {list(dst.shape)} must be src {list(src.shape)} transposed (2-D)")
    emit("dma", "dma_transpose", [d], [s], dge(call, dge_mode, engine.unknown), call)


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
