"""Kernels of the registers and dynamic loops (tests/test_nki_control.py, docs/nki/control.md).

Each takes ``x`` ``[P, F]`` float32 and one-element int32 tensors whose values set the loops'
counts at run time."""

import nki
import nki.isa as nisa
import nki.language as nl


def _load_int(t):
    """A one-element int32 device tensor into the SBUF, then into a new register."""
    s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=t)
    r = nisa.register_alloc()
    nisa.register_load(r, s)
    return r, s


def _tiles(x):
    P, F = x.shape
    xt = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    acc = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    return xt, acc


def _out(acc):
    out = nl.ndarray(acc.shape, dtype=acc.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def count_loop(x, n):
    """acc = n * x: x added n times, n read from ``n`` at run time."""
    reg, _ = _load_int(n)
    xt, acc = _tiles(x)
    for _ in nl.dynamic_range(reg):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=xt, op=nl.add)
    return _out(acc)


@nki.jit
def copy_loop(x, n):
    """out = x, loaded and stored ``n`` times (read at run time): transfers inside a device
    loop, so the DMA queues carry the loop's instructions too."""
    reg, _ = _load_int(n)
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    for _ in nl.dynamic_range(reg):
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def induction_sum(x, lo, hi, step=1, form="range"):
    """out[0, 0] = sum of range(lo, hi, step): the induction register stored each iteration
    (register_store) and added (``form``: ``range`` for nl.dynamic_range, ``fori`` for
    nl.fori_loop; ``lo`` and ``hi`` device tensors, or ``lo`` an int)."""
    hi_r, _ = _load_int(hi)
    lo_v = lo if isinstance(lo, int) else _load_int(lo)[0]
    acc = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0)
    i_t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)

    def body(i):
        nisa.register_store(i_t, i)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=i_t, op=nl.add)

    if form == "fori":
        nl.fori_loop(lo_v, hi_r, body, step=step)
    else:
        for i in nl.dynamic_range(lo_v, hi_r, step):
            body(i)
    return _out(acc)


@nki.jit
def countdown(x, n, form="while_loop"):
    """acc = n * x by a while loop on a register counting n down in the SBUF (``form``:
    ``while_loop`` for nl.while_loop, ``statement`` for ``while reg:``)."""
    reg, cnt = _load_int(n)
    xt, acc = _tiles(x)

    def step(r):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=xt, op=nl.add)
        nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.subtract, operand0=1)
        nisa.register_load(r, cnt)
        return r

    if form == "statement":
        while reg:
            step(reg)
    else:
        nl.while_loop(reg, step)
    return _out(acc)


@nki.jit
def nested(x, n, m):
    """acc = n * m * x: a dynamic loop in a dynamic loop."""
    rn, _ = _load_int(n)
    rm, _ = _load_int(m)
    xt, acc = _tiles(x)
    for _ in nl.dynamic_range(rn):
        for _ in nl.dynamic_range(rm):
            nisa.tensor_tensor(dst=acc, data1=acc, data2=xt, op=nl.add)
    return _out(acc)


@nki.jit
def staged(x, n):
    """Each iteration loads x into one tile, scales it on the Scalar Engine into another and
    adds it on the Vector Engine: the next iteration's load overwrites what this one's reads
    (waits on the previous iteration), out = n * 2x (+1 per iteration on the tile's last
    column, which the iteration's DMA rewrites)."""
    P, F = x.shape
    reg, _ = _load_int(n)
    acc = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    u = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    for _ in nl.dynamic_range(reg):
        nisa.dma_copy(dst=t, src=x)  # LINE staged_load
        nisa.activation(dst=u, op=nl.copy, data=t, scale=2.0)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=u, op=nl.add)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nisa.tensor_tensor(
            dst=acc[:, F - 1 : F], data1=acc[:, F - 1 : F], data2=t[:, 0:1], op=nl.subtract
        )
        nisa.tensor_tensor(
            dst=acc[:, F - 1 : F], data1=acc[:, F - 1 : F], data2=u[:, 0:1], op=nl.add
        )
    return _out(acc)


@nki.jit
def static_bounds(x):
    """A dynamic loop on immediates: acc = 3 x (its count known without the golden)."""
    xt, acc = _tiles(x)
    for _ in nl.dynamic_range(1, 7, 2):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=xt, op=nl.add)
    return _out(acc)


@nki.jit
def register_roundtrip(x, n):
    """out[0, 0] = n + 0, out[0, 1] = 7, out[0, 2] = -5 through registers (alloc with a value,
    move, load, store)."""
    a, _ = _load_int(n)
    b = nisa.register_alloc(7)
    c = nisa.register_alloc()
    nisa.register_move(c, -5)
    d = nisa.register_alloc()
    nisa.register_move(d, a)
    out = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.register_store(out[0:1, 0:1], d)
    nisa.register_store(out[0:1, 1:2], b)
    nisa.register_store(out[0:1, 2:3], c)
    return out


@nki.jit
def counted_copy(x, n):
    """The count from a chain of data-path instructions (x's first element, rounded to int32 on
    the Vector Engine, plus 1): the timing run without the golden computes it (--timing-only);
    out = count * x."""
    P, F = x.shape
    first = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=first, src=n)
    cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=cnt, data=first, op0=nl.add, operand0=1.0)
    reg = nisa.register_alloc()
    nisa.register_load(reg, cnt)
    xt, acc = _tiles(x)
    big = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=big, op=nl.exp, data=xt)  # not on the registers' path
    for _ in nl.dynamic_range(reg):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=xt, op=nl.add)
    return _out(acc)


@nki.jit
def columns(x, lo, hi):
    """out[:, i] = 2 x[:, i] for i in range(lo, hi), the rest 0: each iteration's DMAs at the
    induction register's column (a run-time scalar offset held in a register)."""
    P, F = x.shape
    lo_r, _ = _load_int(lo)
    hi_r, _ = _load_int(hi)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    z = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.dma_copy(dst=out, src=z)
    col = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.dynamic_range(lo_r, hi_r):
        nisa.dma_copy(dst=col, src=x.ap([[F, P], [1, 1]], scalar_offset=i, indirect_dim=1))
        nisa.tensor_scalar(dst=col, data=col, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out.ap([[F, P], [1, 1]], scalar_offset=i, indirect_dim=1), src=col)
    return out
