"""Kernels for the DMA instructions, the views' methods and run-time offsets
(tests/test_nki_dma.py)."""

import nki
import nki.isa as nisa
import nki.language as nl


def _index(idx):
    """``idx`` (device memory, int32 [P, K]) in the SBUF."""
    i = nl.ndarray(idx.shape, dtype=idx.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=i, src=idx)
    return i


def _out(t):
    """``t`` (an SBUF tile) copied to a new device tensor."""
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def gather(data, idx, skip=False):
    """Rows ``idx[p]`` of ``data`` into partition ``p`` (a vector_offset on the source); with
    ``skip`` the rows out of bounds are skipped (their partitions keep -1)."""
    P, F = idx.shape[0], data.shape[1]
    i = _index(idx)
    t = nl.ndarray((P, F), dtype=data.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=-1.0)
    src = data.ap(pattern=[[F, P], [1, F]], vector_offset=i, indirect_dim=0)
    nisa.dma_copy(dst=t, src=src, oob_mode=nisa.oob_mode.skip if skip else nisa.oob_mode.error)
    return _out(t)


@nki.jit
def scatter(src, idx, rows):
    """Partition ``p`` of ``src`` into row ``idx[p]`` of a ``[rows, F]`` zeroed tensor (a
    vector_offset on the destination, vector_select)."""
    P, F = src.shape
    i = _index(idx)
    t = nl.ndarray((P, F), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    z = nl.ndarray((rows, F), dtype=src.dtype, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    out = nl.ndarray((rows, F), dtype=src.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=z)
    nisa.dma_copy(dst=out.vector_select(0, i), src=t)
    return out


@nki.jit
def scalar_rows(data, start, rows, dim=0):
    """``rows`` rows of ``data`` from the run-time row ``start[0, 0]`` (``dim`` 0: ``.ap`` with
    ``scalar_offset`` on dimension 0 of ``data``; ``dim`` 1: of ``data`` reshaped to
    ``[1, R, F]``; ``dim`` 2: a dynamic ``select`` of ``data`` as ``[R, 1, F]``'s first
    dimension, one row; ``dim`` 3: ``scalar_offset`` a register loaded from ``start``)."""
    R, F = data.shape
    s = _index(start)
    t = nl.ndarray((rows, F), dtype=data.dtype, buffer=nl.sbuf)
    if dim == 0:
        src = data.ap(pattern=[[F, rows], [1, F]], scalar_offset=s, indirect_dim=0)
    elif dim == 3:  # the start in a register of the sequencer
        r = nisa.register_alloc()
        nisa.register_load(r, s)
        src = data.ap(pattern=[[F, rows], [1, F]], scalar_offset=r, indirect_dim=0)
    elif dim == 1:
        src = data.reshape((1, R, F)).ap(
            pattern=[[F, rows], [1, F]], scalar_offset=s, indirect_dim=1
        )
    else:
        src = data.reshape((R, 1, F)).select(0, s)
    nisa.dma_copy(dst=t, src=src)
    return _out(t)


@nki.jit
def scalar_store(src, start, rows, skip=True):
    """Partitions of ``src`` into rows ``start[0, 0] + p`` of a ``[rows, F]`` tensor of -1
    (``scalar_offset`` on the destination; rows outside skipped)."""
    P, F = src.shape
    s = _index(start)
    t = nl.ndarray((P, F), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    fill = nl.ndarray((rows, F), dtype=src.dtype, buffer=nl.sbuf)
    nisa.memset(dst=fill, value=-1.0)
    out = nl.ndarray((rows, F), dtype=src.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=fill)
    dst = out.ap(pattern=[[F, P], [1, F]], scalar_offset=s, indirect_dim=0)
    nisa.dma_copy(dst=dst, src=t, oob_mode=nisa.oob_mode.skip if skip else nisa.oob_mode.error)
    return out


@nki.jit
def compute(a, b, c, out_dtype):
    """``a + b + c`` by the DMA (device memory to device memory)."""
    out = nl.ndarray(a.shape, dtype=out_dtype, buffer=nl.shared_hbm)
    nisa.dma_compute(out, (a, b, c), nl.add, scales=(1.0, 1.0, 1.0))
    return out


@nki.jit
def compute_sbuf(a, b):
    """``a + b`` into an SBUF tile that is ``a`` itself (the read-add-write form)."""
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_compute(dst=t, srcs=[t, b], reduce_op=nl.add)
    return _out(t)


@nki.jit
def gather_add(table, idx, acc):
    """``acc[p] + table[idx[p]]`` (the gather read-modify-write)."""
    P, F = acc.shape
    i = _index(idx)
    t = nl.ndarray((P, F), dtype=acc.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=acc)
    rows = table.ap(pattern=[[F, P], [1, F]], vector_offset=i, indirect_dim=0)
    nisa.dma_compute(dst=t, srcs=[rows, t], reduce_op=nl.add, unique_indices=True)
    return _out(t)


@nki.jit
def scatter_add(table, idx, upd):
    """``table[idx[p]] += upd[p]`` on a copy of ``table`` (the scatter read-modify-write)."""
    R, F = table.shape
    P = upd.shape[0]
    i = _index(idx)
    u = nl.ndarray((P, F), dtype=upd.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=upd)
    out = nl.ndarray((R, F), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=table)
    rows = out.ap(pattern=[[F, P], [1, F]], vector_offset=i, indirect_dim=0)
    nisa.dma_compute(dst=rows, srcs=[rows, u], reduce_op=nl.add)
    return out


@nki.jit
def transpose(x, axes=None):
    """``x`` (device memory) transposed by the DMA into the SBUF, by ``axes``."""
    shape = x.shape
    order = axes or {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}[len(shape)]
    t = nl.ndarray(tuple(shape[a] for a in order), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x, axes=axes)
    return _out(t)


@nki.jit
def gather_transpose(src, idx):
    """Rows ``idx.T.flatten()`` of ``src`` [T, 128] gathered, transposed to [128, idx.size]."""
    i = _index(idx)
    n = idx.shape[0] * idx.shape[1]
    t = nl.ndarray((128, n), dtype=src.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0)
    view = src.ap(pattern=[[128, n], [1, 128]], vector_offset=i, indirect_dim=0)
    nisa.dma_transpose(dst=t, src=view, axes=(1, 0))
    return _out(t)


@nki.jit
def view_copy(x, how):
    """``x`` (device memory) through one of the views' methods, copied to a new device
    tensor of the view's shape (a DMA reads the view as it addresses the storage)."""
    v = {
        "permute": lambda: x.permute((2, 0, 1)),
        "broadcast": lambda: x[:, 0:1, :].broadcast(1, 3),
        "expand": lambda: x.expand_dim(1),
        "squeeze": lambda: x[:, 1:2, :].squeeze_dim(1),
        "reshape_dim": lambda: x.reshape_dim(2, (2, -1)),
        "flatten": lambda: x.flatten_dims(1, 2),
        "rearrange": lambda: x.rearrange(("a", "b", ("c", "d")), ("a", "d", "c", "b"), {"c": 2}),
        "slice": lambda: x.slice(2, 1, 7, 2),
        "select": lambda: x.select(1, 2),
        "reshape": lambda: x.permute((1, 0, 2)).reshape(
            (x.shape[1], 2, x.shape[0] // 2, x.shape[2])
        ),
    }[how]()
    out = nl.ndarray(v.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=v)
    return out


@nki.jit
def sbuf_view(x, how):
    """``x`` [P, F] in the SBUF through a view method, out through a tensor_copy."""
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    v = {
        "reshape_dim": lambda: t.reshape_dim(1, (2, F // 2)).permute((0, 2, 1)),
        "broadcast": lambda: t[:, 0:1].broadcast(1, F),
    }[how]()
    o = nl.ndarray(v.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=v)
    return _out(o)


@nki.jit
def column_gather(x, idx, num=None):
    """NeuronCore-v4: columns ``idx[i % 16, i // 16]`` of ``x`` [P, F] read by the Vector
    Engine through an ``.indirect`` view."""
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    i = _index(idx)
    v = t.indirect(i, num)
    o = nl.ndarray(v.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=v)
    return _out(o)


@nki.jit
def two_loads(x, first=None, second=None):
    """Two loads of ``x`` issued together with DMA QoS priorities (NeuronCore-v4)."""
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x, priority=first)
    nisa.dma_copy(dst=b, src=x, priority=second)
    return _out(a), _out(b)


@nki.jit
def sub_version(x):
    """A copy of ``x`` when get_nc_sub_version() is 0."""
    assert nisa.get_nc_sub_version() == 0
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return _out(t)


@nki.jit
def bad(x, idx, case):
    """One broken rule per ``case`` (tests/test_nki_dma.py::test_rules)."""
    P, F = x.shape
    i = _index(idx)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    f = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=f, value=0.0)
    o = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    gathered = x.ap(pattern=[[F, P], [1, F]], vector_offset=i, indirect_dim=0)
    if case == "vector_on_sbuf":
        t.ap(pattern=[[F, P], [1, F]], vector_offset=i)  # LINE vector_on_sbuf
    elif case == "float_index":
        x.ap(pattern=[[F, P], [1, F]], vector_offset=f)  # LINE float_index
    elif case == "vector_dim":
        x.ap(pattern=[[F, P], [1, F]], vector_offset=i, indirect_dim=1)  # LINE vector_dim
    elif case == "dge_none":
        nisa.dma_copy(dst=o, src=gathered, dge_mode=nisa.dge_mode.none)  # LINE dge_none
    elif case == "vector_hwdge":
        nisa.dma_copy(dst=o, src=gathered, dge_mode=nisa.dge_mode.hwdge)  # LINE vector_hwdge
    elif case == "skip_static":
        nisa.dma_copy(dst=o, src=x, oob_mode=nisa.oob_mode.skip)  # LINE skip_static
    elif case == "priority":
        nisa.dma_copy(dst=o, src=x, priority=0)  # LINE priority
    elif case == "to_compute":
        moved = t.ap(pattern=[[F, P], [1, 4]], scalar_offset=i[0:1, 0:1], indirect_dim=1)
        nisa.tensor_copy(dst=o[:, 0:4], src=moved)  # LINE to_compute
    elif case == "reduce_op":
        nisa.dma_compute(o, [t, t], nl.multiply)  # LINE reduce_op
    elif case == "scales":
        nisa.dma_compute(o, [t, t], nl.add, scales=[1.0, 2.0])  # LINE scales
    elif case == "sizes":
        nisa.dma_compute(o, [t, t[:, 0:1]], nl.add)  # LINE sizes
    elif case == "rmw_sources":
        nisa.dma_compute(o, [gathered, o, t], nl.add)  # LINE rmw_sources
    elif case == "axes":
        nisa.dma_transpose(dst=o, src=x, axes=(0, 1))  # LINE axes
    elif case == "dge_value":
        nisa.dma_copy(dst=t, src=x, dge_mode=7)  # LINE dge_value
    elif case == "transpose_swdge":
        ot = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=ot, src=x, dge_mode=nisa.dge_mode.swdge)  # LINE transpose_swdge
    elif case == "indirect_v3":
        t.indirect(i)  # LINE indirect_v3
    elif case == "partition_broadcast":
        t[0:1].broadcast(0, 4)  # LINE partition_broadcast
    elif case == "not_contiguous":
        x.permute((1, 0)).flatten_dims(0, 1)  # LINE not_contiguous
    elif case == "vector_slice":
        x.vector_select(0, i).slice(0, 0, 2)  # LINE vector_slice
    return _out(t)
