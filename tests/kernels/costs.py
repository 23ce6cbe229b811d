"""Kernels for the timing tests of the documented engine costs (tests/test_kernel_costs.py)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def load(x, dge=None, engine=None):
    """One device memory -> SBUF copy of ``x`` (its descriptors from ``dge``: a
    ``nisa.dge_mode`` name), then the tile back out."""
    P, F = x.shape
    a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    kw = {}
    if dge is not None:
        kw["dge_mode"] = getattr(nisa.dge_mode, dge)
    if engine is not None:
        kw["engine"] = getattr(nisa.engine, engine)
    nisa.dma_copy(dst=a, src=x, **kw)
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out


@nki.jit
def loads(x, n, dge=None):
    """``n`` device memory -> SBUF copies of ``x`` into tiles of their own (queues dma0,
    dma1 ... in turn), descriptors from ``dge``, and nothing after them."""
    P, F = x.shape
    kw = {} if dge is None else {"dge_mode": getattr(nisa.dge_mode, dge)}
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for _ in range(n):
        a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x, **kw)
    nisa.dma_copy(dst=out, src=a)
    return out


@nki.jit
def strided_load(x, pieces):
    """Every other block of ``x`` [P, 2 F] into SBUF [P, F]: each partition's F elements in
    ``pieces`` separate runs of the device memory."""
    P, F2 = x.shape
    F = F2 // 2
    w = F // pieces
    a = nl.ndarray((P, pieces, w), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x.ap([[F2, P], [2 * w, pieces], [1, w]]))
    out = nl.ndarray((P, pieces, w), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out


@nki.jit
def transposes(x):
    """``x`` [A, B] transposed by DMA from the device memory into SBUF, then SBUF -> SBUF back
    to [A, B]."""
    A, B = x.shape
    t = nl.ndarray((B, A), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x)
    u = nl.ndarray((A, B), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=u, src=t)
    out = nl.ndarray((A, B), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=u)
    return out


@nki.jit
def one_op(x, op, engine=None, step=1):
    """``x`` into SBUF, then one ``op`` on it (on ``engine``, a ``nisa.engine`` name; reading
    every ``step``-th element of each partition), its result out."""
    P, F = x.shape
    a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    src = a if step == 1 else a.ap([[F, P], [step, F // step]])
    b = nl.ndarray((P, F // step), dtype=x.dtype, buffer=nl.sbuf)
    kw = {} if engine is None else {"engine": getattr(nisa.engine, engine)}
    if op == "tensor_copy":
        nisa.tensor_copy(dst=b, src=src, **kw)
    elif op == "tensor_tensor":
        nisa.tensor_tensor(dst=b, data1=src, data2=src, op=nl.add, **kw)
    elif op == "tensor_scalar":
        nisa.tensor_scalar(dst=b, data=src, op0=nl.multiply, operand0=2.0, **kw)
    elif op == "activation":
        nisa.activation(dst=b, op=nl.exp, data=src)
    elif op == "memset":
        nisa.memset(dst=b, value=0.0, **kw)
    out = nl.ndarray((P, F // step), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=b)
    return out
