"""Kernels in the older ``neuronxcc.nki`` language, for tests/test_legacy_language.py: index
expressions, masks, block dimensions, tiles as values, that era's ``nisa`` forms.  Small
shapes; each kernel's numpy reference is in the test."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def add_tiles(a, b):
    """The tutorial's pattern: each instance adds its [32, 64] tile, indexed by expressions."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 32 + nl.arange(32)[:, None]
    iy = nl.program_id(1) * 64 + nl.arange(64)[None, :]
    c = nl.load(a[ix, iy]) + nl.load(b[ix, iy])
    nl.store(out[ix, iy], value=c)
    return out


@nki.jit
def free_transpose(x, f1, f2):
    """[P, f1 * f2] rows as f1 x f2 matrices, each transposed by one copy's access patterns."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    ip = nl.arange(x.shape[0])[:, None, None]
    i1 = nl.arange(f1)[None, :, None]
    i2 = nl.arange(f2)[None, None, :]
    o = nl.ndarray((x.shape[0], f1 * f2), dtype=x.dtype)
    o[ip, i2 * f1 + i1] = nl.copy(t[ip, i1 * f2 + i2])  # LINE copy
    nl.store(out, value=o)
    return out


@nki.jit
def pool(x, k):
    """Average pooling by a 5-D view (nl.mgrid) reduced on two axes that are not the last."""
    c, h, w = x.shape
    out = nl.ndarray((c, h // k, w // k), dtype=x.dtype, buffer=nl.shared_hbm)
    i0, i1, i2, i3, i4 = nl.mgrid[0:c, 0 : h // k, 0:k, 0 : w // k, 0:k]
    t = nl.load(x)
    s = nl.sum(t[i0, k * i1 + i2, k * i3 + i4], axis=[2, 4]) / (k * k)
    nl.store(out, value=s)
    return out


@nki.jit
def masked_exp(x):
    """exp of [N, F] in tiles of 64 rows, the last one partial (masks on load, exp, store)."""
    n, f = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(64)[:, None]
    jf = nl.arange(f)[None, :]
    for i in nl.affine_range((n + 63) // 64):
        rows = i * 64 + ip
        t = nl.load(x[rows, jf], mask=(rows < n))
        e = nl.exp(t, mask=(rows < n))
        nl.store(out[rows, jf], value=e, mask=(rows < n))
    return out


@nki.jit
def blocks_scan(d, a, b):
    """Block dimensions and the older nisa forms: per block, exp(d * a) scanned with b,
    accumulated (+=) into a block tensor made by nl.zeros."""
    nb, p, f = d.shape
    out = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((nb, nl.par_dim(p), f), dtype=d.dtype)
    for r in nl.affine_range(2):
        for i in nl.affine_range(nb):
            di = nl.load(d[i])
            ai = nl.load(a[i, 0:p, r])
            da = nisa.activation(op=nl.exp, data=di, scale=ai)
            bi = nl.load(b[i])
            s = nisa.tensor_tensor_scan(da, bi, initial=0, op0=np.multiply, op1=np.add)
            acc[i, 0:p, 0:f] += s
    for i in nl.affine_range(nb):
        nl.store(out[i], acc[i])
    return out


@nki.jit
def psum_accumulate(x, y):
    """x.T @ y over K tiles of 32 partitions: += of nc_matmul into PSUM (zeros, and a block
    of an uninitialized block tensor), evicted by nisa.tensor_copy into a view."""
    k, m = x.shape
    n = y.shape[1]
    out = nl.ndarray((2, m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    zeroed = nl.zeros((m, n), dtype=nl.float32, buffer=nl.psum)
    blocks = nl.ndarray((2, nl.par_dim(m), n), dtype=nl.float32, buffer=nl.psum)
    for kt in nl.affine_range(k // 32):
        xs = nl.load(x[kt * 32 : kt * 32 + 32, :])
        ys = nl.load(y[kt * 32 : kt * 32 + 32, :])
        zeroed += nisa.nc_matmul(xs, ys)  # LINE accumulate
        blocks[1] += nisa.nc_matmul(stationary=xs, moving=ys)
    res = nl.ndarray((m, 2, n), dtype=nl.float32)
    res[:, 0, :] = nisa.tensor_copy(zeroed)
    res[:, 1, :] = nisa.tensor_copy(blocks[1])
    nl.store(out[0], res[:, 0, :])
    nl.store(out[1], res[:, 1, :])
    return out


@nki.jit
def operators(a, b):
    """Python's operators on tiles, and the language's functions with dtype=."""
    out = nl.ndarray((6,) + a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    r = nl.ndarray((a.shape[0], 6, a.shape[1]), dtype=nl.float32)
    r[:, 0, :] = x + y
    r[:, 1, :] = x * 2.0
    r[:, 2, :] = 1.0 - x
    r[:, 3, :] = -x / y
    r[:, 4, :] = nl.maximum(x, y, dtype=nl.float32)
    r[:, 5, :] = nl.subtract(x, nl.max(x, axis=1))
    for i in nl.affine_range(6):
        nl.store(out[i], r[:, i, :])
    return out


@nki.jit
def attention(q, k, v):
    """The tutorial's language-level attention on [d, s] inputs."""
    d, s = q.shape
    out = nl.ndarray((s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    qs, ks, vs = nl.load(q), nl.load(k), nl.load(v)
    qk = nl.matmul(qs, ks, transpose_x=True)
    e = nl.exp(nl.subtract(qk, nl.max(qk, axis=1)))
    scores = nl.divide(e, nl.sum(e, axis=1))
    vt = nl.transpose(vs)
    nl.store(out, value=nl.matmul(scores, vt, transpose_x=False))
    return out


@nki.jit
def causal(x):
    """nisa.iota of an index expression, nisa.affine_select of a predicate (i_q >= i_k)."""
    p, f = x.shape
    out = nl.ndarray((2, p, f), dtype=nl.float32, buffer=nl.shared_hbm)
    iq = nl.arange(p)[:, None]
    ik = nl.arange(f)[None, :]
    io = nisa.iota(iq * 3 + ik, dtype=nl.int32)
    t = nl.load(x)
    sel = nisa.affine_select(iq >= ik, t, -1000.0)
    nl.store(out[0], nisa.tensor_copy(io, dtype=nl.float32))
    nl.store(out[1], sel)
    return out


@nki.jit
def reduce_loop(x):
    """nl.loop_reduce over a loop of tiles (the maximum)."""
    n, p, f = x.shape
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        t = nl.load(x[i])
        m = nl.loop_reduce(t, op=np.maximum, loop_indices=[i])
    nl.store(out, m)
    return out


@nki.jit
def bad(x, case):
    """One rule broken per ``case`` (tests/test_legacy_language.py)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.arange(8)[:, None]
    j = nl.arange(8)[None, :]
    t = nl.load(x)
    if case == "product":
        nl.load(x[i * j, j])  # LINE product
    if case == "mask":
        nl.load(x[i, j], mask=(i + j < 8))  # LINE mask
    if case == "block":
        blk = nl.ndarray((2, nl.par_dim(8), 8), dtype=x.dtype)
        blk[0:2] = t  # LINE block
    if case == "unmodelled":
        nl.atomic_rmw(x, value=t, op=np.add)  # LINE unmodelled
    if case == "bounds":
        nl.load(x[i + 4, j])  # LINE bounds
    if case == "shape":
        o = nl.ndarray((8, 4), dtype=x.dtype)
        o[...] = nl.exp(t)  # LINE shape
    nl.store(out, t)
    return out


@nki.jit
def gather_rows(table, idx):
    """Rows of a device table at indices held in SBUF (a tile as an index: a DMA gather); the
    [1, k] indices transposed on the Tensor Engine (int32) to one per partition; each row's
    maximum by nisa.tensor_reduce(np.max)."""
    n, f = table.shape
    k = idx.shape[1]
    rows = nl.ndarray((k, f), dtype=table.dtype, buffer=nl.shared_hbm)
    top = nl.ndarray((k, 1), dtype=table.dtype, buffer=nl.shared_hbm)
    col = nl.copy(nl.transpose(nl.load(idx)))
    g = nl.load(table[col, nl.arange(f)[None, :]])  # LINE gather
    nl.store(rows, g)
    nl.store(top, nisa.tensor_reduce(np.max, g, axis=(1,)))
    return rows, top


@nki.jit
def kept(a):
    """A result viewed before its assignment is copied there; one assigned at once is written
    there directly."""
    out = nl.ndarray((2,) + a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype)
    x = nl.exp(nl.load(a))
    v = x[:, :]
    t[...] = x  # LINE kept
    u = nl.ndarray(a.shape, dtype=a.dtype)
    u[...] = nl.exp(t)  # LINE direct
    nl.store(out[0], v)
    nl.store(out[1], u)
    return out


@nki.jit
def spilled(x, y):
    """17 PSUM blocks of one bank each, 16 written before any is read: more than the PSUM
    holds, so the blocks move to SBUF (a copy after each matmul); += into a spilled block
    starts its group as in PSUM."""
    k, m = x.shape
    n = y.shape[1]
    out = nl.ndarray((17, m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    xs, ys = nl.load(x), nl.load(y)
    qk = nl.ndarray((17, nl.par_dim(m), n), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(16):
        qk[i] = nisa.nc_matmul(xs, ys)  # LINE spilled
    for j in nl.affine_range(2):
        qk[16] += nisa.nc_matmul(xs, ys)
    for i in nl.affine_range(17):
        nl.store(out[i], qk[i])
    return out


@nki.jit
def misc(a, b, seed):
    """nl.load_transpose2d, nl.where, nl.mean, nl.static_cast, nl.random_seed and nl.dropout."""
    p, f = a.shape
    out = nl.ndarray((4, f, p), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((f, 4, p), dtype=nl.float32)
    r[:, 0, :] = nl.load_transpose2d(a)
    x, y = nl.load(a), nl.load(b)
    w = nl.where(nl.greater(x, y), x, y)
    m = nl.mean(w, axis=1)
    r[:, 1, :] = nl.static_cast(nl.transpose(nl.subtract(w, m)), nl.float32)
    nl.random_seed(nl.load(seed))
    d = nl.dropout(nl.transpose(x), 0.0)
    r[:, 2, :] = d
    r[:, 3, :] = nl.copy(nl.transpose(x), dtype=nl.bfloat16)
    for i in nl.affine_range(4):
        nl.store(out[i], r[:, i, :])
    return out
