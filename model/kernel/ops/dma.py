"""The golden of the DMA engines' instructions: ``dma_copy`` (bytes moved unchanged, or a
dtype conversion through float32, or the SBUF read-add-write) and ``dma_transpose``, on the DMA
block's golden (:func:`ncrtl.model.dma.engine.dma_copy`, :func:`~ncrtl.model.dma.engine.dma_transpose`,
the access-pattern and partition rules of :mod:`ncrtl.model.dma.access`)."""

from __future__ import annotations

import numpy as np

from ncrtl.model.dma import engine as dma_golden
from ncrtl.model.dma.access import AccessPattern
from ncrtl.model.dma.engine import AddDtype, add_elements
from ncrtl.model.kernel.values import KernelError, convert
from ncrtl.model.kernel.values import where as _where


def _dma_copy(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    vals = st.read(src, ins)
    if src.view_dtype != dst.view_dtype:
        # A DMA with a dtype conversion: src -> float32 -> dst (functional, docs/kernels.md).
        if not (src.element.is_float or src.element.fmt is None) or dst.element.packed != 1:
            raise KernelError(
                f"{_where(ins)}copies {src.view_dtype} into {dst.view_dtype}: only unpacked "
                f"types convert"
            )
        st.write(dst, convert(vals.astype(np.float32), dst.view_dtype))
        return
    if ins.args.get("rmw") == "add":
        kinds = {"float32": AddDtype.FP32, "bfloat16": AddDtype.BF16}
        kind = kinds.get(dst.view_dtype)
        if kind is None or src.view_dtype != dst.view_dtype:
            raise KernelError(
                f"{_where(ins)}read-add-write needs float32 or bfloat16 on both sides, got "
                f"{src.view_dtype} and {dst.view_dtype}"
            )
        cur = st.read(dst, ins)
        isz = vals.dtype.itemsize
        out = add_elements(
            cur.reshape(-1).view(np.uint8).reshape(-1, isz),
            vals.reshape(-1).view(np.uint8).reshape(-1, isz),
            kind,
        )
        st.write(dst, out.reshape(-1).view(dst.element.storage))
        return
    if vals.size == dst.size:
        # The DMA golden's copy between two flat views of one size moves each element to its
        # own place: the bytes in source order, which the write puts through the destination
        # view (later visits stay).
        st.write(dst, vals.reshape(-1))
        return
    out = dma_golden.dma_copy(  # the DMA golden's rule for views of different sizes
        np.zeros(dst.size, vals.dtype),
        _flat_ap(dst.size),
        vals.reshape(-1),
        _flat_ap(vals.size),
    )
    st.write(dst, out)


def _flat_ap(n):
    return AccessPattern(((1, n),))


def _dma_transpose(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    vals = st.read(src, ins)
    if vals.ndim != 2:
        vals = vals.reshape(vals.shape[0], -1)
    out = dma_golden.dma_transpose(
        np.zeros(vals.shape[::-1], vals.dtype),
        _ap2(vals.shape[::-1]),
        vals,
        _ap2(vals.shape),
    )
    if dst.size != out.size:
        raise KernelError(f"{_where(ins)}transposes {vals.shape} into a view of {dst.view_shape}")
    st.write(dst, out)


def _ap2(shape):
    return AccessPattern(((shape[1], shape[0]), (1, shape[1])))


OPS = {"dma_copy": _dma_copy, "dma_transpose": _dma_transpose}
