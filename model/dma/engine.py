"""The DMA engine's golden model: a descriptor applied to the SBUF and the device memory.

:func:`execute` is what the RTL is compared with, byte for byte over both memories, for every
descriptor, legal or not: a descriptor that breaks a rule (:func:`ncrtl.model.dma.isa.check`)
changes nothing and completes with its error code.  Otherwise the source elements are read in
the source pattern's loop order and written in the destination pattern's loop order:

* ``COPY``: element ``i`` of the source view goes to element ``i`` of the destination view, the
  bytes unchanged;
* ``TRANSPOSE``: the source view ``[A, B]`` goes to the destination view ``[B, A]`` with
  ``dst[j, i] = src[i, j]``, the bytes unchanged (NaN payloads kept), for 2- and 4-byte elements;
* ``ADD`` (SBUF read-add-write): ``dst[i] = dst[i] + src[i]``, FP32 with one rounding to
  nearest even, or BF16 widened exactly to FP32, added and rounded (RNE) to FP32, then rounded
  (RNE) to BF16; a NaN result is the canonical quiet NaN of the format.

Where a destination pattern visits an element twice the writes happen in loop order: a copy
leaves the later value, a read-add-write adds both.

The user-level functions (:func:`dma_copy`, :func:`dma_transpose`, :func:`dma_add`) take numpy
tensors and access patterns, NKI style, and raise ``ValueError`` naming the rule.
"""

from __future__ import annotations

import numpy as np

from ncrtl.model.dma.access import AccessPattern, _as_dtype, ap_indices, ap_view, ap_write
from ncrtl.model.dma.isa import (
    AddDtype,
    Error,
    Op,
    Space,
    check,
    dynamic_offsets,
    side_addresses,
)
from ncrtl.model.fp import fp32_add, fp32_to_bf16

__all__ = ["execute", "add_elements", "dma_copy", "dma_transpose", "dma_add", "Memories"]


class Memories:
    """The SBUF (``[partitions, partition_bytes]`` uint8) and the device memory (flat uint8)."""

    def __init__(self, sbuf, hbm):
        self.sbuf = np.asarray(sbuf, dtype=np.uint8)
        self.hbm = np.asarray(hbm, dtype=np.uint8)

    def copy(self):
        return Memories(self.sbuf.copy(), self.hbm.copy())


def _byte_index(side, addr):
    """Per element, the ``esize`` byte positions: HBM flat indices, SBUF (partition, byte)."""
    k = np.arange(side.esize)
    if side.space == Space.HBM:
        return addr.reshape(-1, 1) + k
    part, byte = addr
    return part.reshape(-1, 1) + 0 * k, byte.reshape(-1, 1) + k


def _read(mem, side, addr):
    pos = _byte_index(side, addr)
    return mem.hbm[pos] if side.space == Space.HBM else mem.sbuf[pos]


def _write(mem, side, addr, data):
    """Write ``data`` (``[count, esize]`` uint8) in loop order: the last visit of an element
    stays."""
    pos = _byte_index(side, addr)
    key = pos if side.space == Space.HBM else pos[0] * mem.sbuf.shape[1] + pos[1]
    first_byte = key[:, 0]
    _, last = np.unique(first_byte[::-1], return_index=True)
    keep = first_byte.size - 1 - last
    if side.space == Space.HBM:
        mem.hbm[pos[keep]] = data[keep]
    else:
        mem.sbuf[pos[0][keep], pos[1][keep]] = data[keep]


def _visits(key):
    """For each element of ``key`` (flat positions in loop order), how many earlier elements
    have the same position: the round of a sequential read-add-write it belongs to."""
    order = np.argsort(key, kind="stable")
    sk = key[order]
    start = np.r_[0, np.flatnonzero(sk[1:] != sk[:-1]) + 1]
    rank = np.empty(key.size, dtype=np.int64)
    rank[order] = np.arange(key.size) - np.repeat(start, np.diff(np.r_[start, key.size]))
    return rank


def add_elements(b, a, dtype):
    """Read-add-write arithmetic on raw little-endian bytes ``[count, esize]``: ``b + a``."""
    if AddDtype(dtype) == AddDtype.FP32:
        fa = np.ascontiguousarray(a).view("<f4").reshape(-1)
        fb = np.ascontiguousarray(b).view("<f4").reshape(-1)
        out = fp32_add(fb, fa)
        return out.view(np.uint8).reshape(-1, 4)
    ha = np.ascontiguousarray(a).view("<u2").reshape(-1).astype(np.uint32) << 16
    hb = np.ascontiguousarray(b).view("<u2").reshape(-1).astype(np.uint32) << 16
    s = fp32_add(hb.view(np.float32), ha.view(np.float32))
    out = np.asarray(fp32_to_bf16(s, "rne")).view(np.uint16)
    return out.view(np.uint8).reshape(-1, 2)


def execute(desc, geo, mem):
    """Apply ``desc`` to ``mem`` (:class:`Memories`, not modified): ``(Memories, Error,
    message)``; on an error the memories returned are the ones given, unchanged."""
    bad = check(desc, geo, mem.sbuf)
    if bad is not None:
        return mem, bad[0], bad[1]
    out = mem.copy()
    src, dst = desc.src, desc.dst
    s_addr = side_addresses(src, dynamic_offsets(src, mem.sbuf))
    d_addr = side_addresses(dst, dynamic_offsets(dst, mem.sbuf))
    data = _read(mem, src, s_addr)  # [count, esize], source loop order
    if desc.op == Op.TRANSPOSE:
        a, b = src.shape
        data = data.reshape(a, b, -1).transpose(1, 0, 2).reshape(a * b, -1)
    if desc.op != Op.ADD:
        _write(out, dst, d_addr, data)
        return out, Error.NONE, ""
    # Read-add-write in loop order: a destination element visited r times gets r adds, so the
    # adds are applied in rounds of distinct elements.
    pos = _byte_index(dst, d_addr)
    key = pos[:, 0] if dst.space == Space.HBM else pos[0][:, 0] * mem.sbuf.shape[1] + pos[1][:, 0]
    rank = _visits(key)
    for r in range(int(rank.max()) + 1 if rank.size else 0):
        sel = np.flatnonzero(rank == r)
        part = (d_addr[0].reshape(-1)[sel], d_addr[1].reshape(-1)[sel])
        cur = _read(out, dst, part)
        _write(out, dst, part, add_elements(cur, data[sel], desc.add_dtype))
    return out, Error.NONE, ""


# -- user level: numpy tensors and NKI access patterns ------------------------------------------


def _ap(ap):
    return ap if isinstance(ap, AccessPattern) else AccessPattern(tuple(ap))


def dma_copy(dst, dst_ap, src, src_ap, *, dst_sbuf=False, src_sbuf=False):
    """``nisa.dma_copy(dst.ap(...), src.ap(...))`` on numpy tensors: a copy of ``dst`` with the
    source view's elements written through the destination pattern (element sizes must match;
    the bytes are moved unchanged)."""
    dst_ap, src_ap = _ap(dst_ap), _ap(src_ap)
    vals = ap_view(src, src_ap, partition_rule=src_sbuf)
    if vals.size != dst_ap.size:
        raise ValueError(f"src has {vals.size} elements, dst {dst_ap.size}")
    return ap_write(dst, dst_ap, vals, partition_rule=dst_sbuf)


def dma_transpose(dst, dst_ap, src, src_ap, *, src_sbuf=False):
    """DMA transpose into an SBUF tensor: the source view ``[A, B]`` (2- or 4-byte elements)
    lands as ``[B, A]``, bit for bit."""
    dst_ap, src_ap = _ap(dst_ap), _ap(src_ap)
    vals = ap_view(src, src_ap, partition_rule=src_sbuf)
    if vals.dtype.itemsize not in (2, 4):
        raise ValueError(
            f"DMA transpose of {vals.dtype.itemsize}-byte elements: only 2-byte and 4-byte dtypes"
        )
    if vals.ndim != 2 or dst_ap.shape != vals.shape[::-1]:
        raise ValueError(
            f"transpose of a view of shape {list(vals.shape)} into {list(dst_ap.shape)}: the "
            f"views must be [A, B] and [B, A]"
        )
    return ap_write(dst, dst_ap, vals.T, partition_rule=True)


def dma_add(dst, dst_ap, src, src_ap, *, src_sbuf=False):
    """SBUF read-add-write ``dst.ap(...) += src.ap(...)``: float32 or bfloat16 on both sides."""
    import ml_dtypes

    dst_ap, src_ap = _ap(dst_ap), _ap(src_ap)
    a = ap_view(src, src_ap, partition_rule=src_sbuf)
    d = np.asarray(dst)
    kinds = {np.dtype(np.float32): AddDtype.FP32, np.dtype(ml_dtypes.bfloat16): AddDtype.BF16}
    dt = np.dtype(dst_ap.dtype) if dst_ap.dtype is not None else d.dtype
    if a.dtype not in kinds or dt != a.dtype:
        raise ValueError(
            f"read-add-write needs float32 or bfloat16 on both sides with the same dtype, got "
            f"src {a.dtype} and dst {dt}"
        )
    if a.size != dst_ap.size:
        raise ValueError(f"src has {a.size} elements, dst {dst_ap.size}")
    out = np.array(d, copy=True)
    flat, shape = _as_dtype(out, dst_ap.dtype)
    idx = ap_indices(shape, dst_ap, partition_rule=True).reshape(-1)
    av = a.reshape(-1)
    esize = a.dtype.itemsize
    rank = _visits(idx)  # repeated destination elements: one pass per visit, in loop order
    for r in range(int(rank.max()) + 1 if rank.size else 0):
        sel = np.flatnonzero(rank == r)
        cur = flat[idx[sel]].view(np.uint8).reshape(-1, esize)
        new = add_elements(cur, av[sel].view(np.uint8).reshape(-1, esize), kinds[a.dtype])
        flat[idx[sel]] = new.reshape(-1).view(flat.dtype)
    return out
