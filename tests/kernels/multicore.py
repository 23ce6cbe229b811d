"""Kernels for the tests of launch grids, core barriers, collectives, shared constants and
random numbers (tests/test_nki_multicore.py)."""

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt


@nki.jit
def grid_ids(x: nt.tensor):
    """Row ``i`` (the instance's linear index) of a [instances, 4] int32 output: its
    program_id along axes 0 and 1, num_programs() of the grid, program_ndim()."""
    n = nl.num_programs(axes=None)
    ndim = nl.program_ndim()
    i0 = nl.program_id(0)
    i1 = nl.program_id(1) if ndim > 1 else 0
    n1 = nl.num_programs(1) if ndim > 1 else 1
    row = i0 * n1 + i1
    out = nl.ndarray((n, 4), nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 4), nl.int32, buffer=nl.sbuf)
    for k, v in enumerate((i0, i1, n, ndim)):
        nisa.memset(dst=t[:, k : k + 1], value=v)
    nisa.dma_copy(dst=out[row : row + 1, :], src=t)
    return out


@nki.jit
def grid_rows(x):
    """Instance ``i`` of a 1-D grid adds ``i`` to its 32 rows of x."""
    i = nl.program_id(0)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((32, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[i * 32 : (i + 1) * 32, :])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(i))
    nisa.dma_copy(dst=out[i * 32 : (i + 1) * 32, :], src=t)
    return out


@nki.jit(platform_target="trn2")
def private_scratch(x):
    """Each core writes x + its id to its own private_hbm scratch and copies it back to its half
    of the output: the cores' scratch tensors are different memory."""
    P, F = x.shape
    c = nl.program_id(0)
    scratch = nl.ndarray((P, F), x.dtype, buffer=nl.private_hbm)
    out = nl.ndarray((2 * P, F), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(c))
    nisa.dma_copy(dst=scratch, src=t)
    u = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=scratch)
    nisa.dma_copy(dst=out[c * P : (c + 1) * P, :], src=u)
    return out


@nki.jit(platform_target="trn2")
def exchange(x, engine=nisa.engine.gpsimd):
    """Each core writes x + id to its half of a shared scratch, both meet at a core_barrier, each
    copies the other core's half into its half of the output."""
    P, F = x.shape
    c = nl.program_id(0)
    scratch = nl.ndarray((2 * P, F), x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((2 * P, F), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(c))
    nisa.dma_copy(dst=scratch[c * P : (c + 1) * P, :], src=t)
    nisa.core_barrier(data=scratch, cores=(0, 1), engine=engine)
    o = 1 - c
    u = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=scratch[o * P : (o + 1) * P, :])
    nisa.dma_copy(dst=out[c * P : (c + 1) * P, :], src=u)
    return out


@nki.jit(platform_target="trn2")
def barrier(x, cores):
    """One core_barrier on x's copy (a rule test)."""
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=t, src=x)
    nisa.core_barrier(t, cores)
    return t


def _scaled(x, dtype):
    """x (a [P, F] device tensor) times (rank + 1) in SBUF, as ``dtype``."""
    r = ncc.rank_id()
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    s = nl.ndarray(x.shape, dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=s, data=t, op0=nl.multiply, operand0=float(r + 1))
    return s


@nki.jit(platform_target="trn2")
def sbuf_collective(x, kind, op=nl.add, dim=1, out_dtype=None):
    """Rank r's source is x * (r + 1); the collective ``kind`` in SBUF; rank r's destination
    lands at out[r]."""
    P, F = x.shape
    r = ncc.rank_id()
    g = ncc.ReplicaGroup([[0, 1]])
    s = _scaled(x, x.dtype)
    if kind == "all_reduce":
        shape = (P, F)
    elif kind == "all_gather":
        shape = (2 * P, F) if dim == 0 else (P, 2 * F)
    else:  # reduce_scatter
        shape = (P // 2, F)
    d = nl.ndarray(shape, out_dtype or x.dtype, buffer=nl.sbuf)
    if kind == "all_reduce":
        ncc.all_reduce(srcs=[s], dsts=[d], replica_group=g, op=op)
    elif kind == "all_gather":
        ncc.all_gather(srcs=[s], dsts=[d], replica_group=g, collective_dim=dim)
    else:
        ncc.reduce_scatter(srcs=[s], dsts=[d], replica_group=g, collective_dim=0, op=op)
    out = nl.ndarray((2,) + shape, d.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[r], src=d)
    return out


@nki.jit(platform_target="trn2")
def hbm_collective(x, kind):
    """Rank r's source (device memory) is x * (r + 1); the collective ``kind`` from one private
    device tensor to another; rank r's destination lands at out[r]."""
    P, F = x.shape
    r = ncc.rank_id()
    s = _scaled(x, x.dtype)
    src = nl.ndarray((P, F), x.dtype, buffer=nl.private_hbm)
    nisa.dma_copy(dst=src, src=s)
    dst = nl.ndarray((P, F), x.dtype, buffer=nl.private_hbm)
    if kind == "all_to_all":
        ncc.all_to_all(
            srcs=[src], dsts=[dst], replica_group=ncc.ReplicaGroup([[0, 1]]), collective_dim=0
        )
    else:  # a swap
        ncc.collective_permute(srcs=[src], dsts=[dst], source_target_pairs=[(0, 1), (1, 0)])
    out = nl.ndarray((2, P, F), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=dst)
    nisa.dma_copy(dst=out[r], src=t)
    return out


@nki.jit(platform_target="trn2")
def bad_collective(x, case):
    """A collective breaking one rule (``case``)."""
    P, F = x.shape
    g = ncc.ReplicaGroup([[0, 1]])
    s = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=x)
    h = nl.ndarray((P, F), x.dtype, buffer=nl.shared_hbm)
    if case == "shape":
        d = nl.ndarray((P, F + 1), x.dtype, buffer=nl.sbuf)
        ncc.all_reduce(srcs=[s], dsts=[d], replica_group=g, op=nl.add)
    elif case == "mixed":
        ncc.all_reduce(srcs=[s], dsts=[h], replica_group=g, op=nl.add)
    elif case == "dim":
        d = nl.ndarray((P, 2 * F), x.dtype, buffer=nl.sbuf)
        ncc.all_gather(srcs=[s], dsts=[d], replica_group=g, collective_dim=2)
    elif case == "rank":
        ncc.all_reduce(srcs=[s], dsts=[s], replica_group=ncc.ReplicaGroup([[0, 3]]), op=nl.add)
    elif case == "op":
        ncc.all_reduce(srcs=[s], dsts=[s], replica_group=g, op=nl.multiply)
    elif case == "sbuf_all_to_all":
        ncc.all_to_all(srcs=[s], dsts=[s], replica_group=g, collective_dim=0)
    elif case == "keyword":
        ncc.all_reduce(srcs=[s], dsts=[s], replica_group=g, op=nl.add, axis=0)
    return h


@nki.jit
def constants(x, c):
    """x's shape of output: [the constant c | the identity of P rows as float32]."""
    P = x.shape[0]
    F = c.shape[1]
    out = nl.ndarray((P, F + P), nl.float32, buffer=nl.shared_hbm)
    k = nl.shared_constant(c)
    t = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=k)
    nisa.dma_copy(dst=out[:, 0:F], src=t)
    ident = nl.shared_identity_matrix(P, dtype=nl.float32)
    again = nl.shared_identity_matrix(n=P, dtype=nl.float32)
    assert again is ident  # one per size and dtype
    nisa.dma_copy(dst=out[:, F : F + P], src=ident)
    return out


@nki.jit
def random_bits(x, engine=nisa.engine.vector, dtype=nl.uint32, seed=None):
    """nisa.rng into a tile of x's shape (after set_rng_seed(seed) when given)."""
    if seed is not None:
        s = nl.ndarray((1, 1), nl.uint32, buffer=nl.sbuf)
        nisa.memset(dst=s, value=seed)
        nisa.set_rng_seed(s)
    t = nl.ndarray(x.shape, dtype, buffer=nl.sbuf)
    nisa.rng(dst=t, engine=engine)
    out = nl.ndarray(x.shape, dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit(platform_target="trn3")
def uniform(x, lo, hi, dtype=nl.float32):
    """nisa.rand2 into a tile of x's shape (min lo, max hi)."""
    t = nl.ndarray(x.shape, dtype, buffer=nl.sbuf)
    nisa.rand2(dst=t, min=lo, max=hi)
    out = nl.ndarray(x.shape, dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def dropped(x, prob):
    """nisa.dropout of x with probability ``prob`` (a number, or "tile": x's first column)."""
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    p = t[:, 0:1] if prob == "tile" else prob
    d = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=d, data=t, prob=p)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=d)
    return out


@nki.jit(platform_target="trn2")
def state_roundtrip(seeds):
    """rand_set_state(seeds) on GpSimd, one rng of 5 elements, rand_get_state: [P, 5 + 6]."""
    P = seeds.shape[0]
    s = nl.ndarray((P, 6), nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=seeds)
    nisa.rand_set_state(src_seeds=s, engine=nisa.engine.gpsimd)
    r = nl.ndarray((P, 5), nl.uint32, buffer=nl.sbuf)
    nisa.rng(dst=r, engine=nisa.engine.gpsimd)
    g = nl.ndarray((P, 6), nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=g)
    out = nl.ndarray((P, 11), nl.uint32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:5], src=r)
    nisa.dma_copy(dst=out[:, 5:11], src=g)
    return out


@nki.jit
def language_random(x):
    """nl.random_seed, nl.rand and nl.dropout: [rand | dropout(x, 0.5)]."""
    P, F = x.shape
    s = nl.full((1, 1), 7, nl.int32, buffer=nl.sbuf)
    nl.random_seed(s)
    r = nl.rand((P, F), nl.float32)
    t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    d = nl.dropout(t, 0.5)
    out = nl.ndarray((P, 2 * F), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:F], src=r)
    nisa.dma_copy(dst=out[:, F : 2 * F], src=d)
    return out


# -- over N simulated ranks (kernel.ranks(N)) ------------------------------------------------------


@nki.jit(platform_target="trn2")
def rank_collective(x, kind, n=4, op=nl.add, dtype=None):
    """Each rank's x (its own, [P, F]) through the collective ``kind`` over ranks 0 .. n-1; the
    rank's destination is its output.  SBUF: all_reduce, all_gather (dim 1), reduce_scatter;
    device memory: all_to_all, collective_permute (a shift: r to r + 1)."""
    P, F = x.shape
    g = ncc.ReplicaGroup([list(range(n))])
    dt = dtype or x.dtype
    s = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=x)
    shape = {"all_gather": (P, n * F), "reduce_scatter": (P // n, F)}.get(kind, (P, F))
    out = nl.ndarray(shape, dt, buffer=nl.shared_hbm)
    if kind in ("all_to_all", "collective_permute"):
        src = nl.ndarray((P, F), x.dtype, buffer=nl.private_hbm)
        nisa.dma_copy(dst=src, src=s)
        if kind == "all_to_all":
            ncc.all_to_all(srcs=[src], dsts=[out], replica_group=g, collective_dim=0)
        else:
            pairs = [(r, (r + 1) % n) for r in range(n)]
            ncc.collective_permute(srcs=[src], dsts=[out], source_target_pairs=pairs)
        return out
    d = nl.ndarray(shape, dt, buffer=nl.sbuf)
    if kind == "all_reduce":
        ncc.all_reduce(srcs=[s], dsts=[d], replica_group=g, op=op)
    elif kind == "all_gather":
        ncc.all_gather(srcs=[s], dsts=[d], replica_group=g, collective_dim=1)
    else:
        ncc.reduce_scatter(srcs=[s], dsts=[d], replica_group=g, collective_dim=0, op=op)
    nisa.dma_copy(dst=out, src=d)
    return out


@nki.jit(platform_target="trn2")
def ring_gather(x, n=4, channels=1, groups=None):
    """An all-gather as a ring of collective_permute_implicit: each step's received block lands
    at the rows of the rank collective_permute_implicit_current_processing_rank_id names (a
    register, the DMA's scalar offset); the output is [n, P, F], rank r's x at [r].  With
    ``channels`` 2, each channel carries half of the columns."""
    P, F = x.shape
    g = ncc.ReplicaGroup(groups or [list(range(n))])
    out = nl.ndarray((n, P, F), x.dtype, buffer=nl.shared_hbm)
    bufs = [nl.ndarray((P, F), x.dtype, buffer=nl.sbuf) for _ in range(2)]
    nisa.dma_copy(dst=bufs[0], src=x)
    w = F // channels
    for it in range(n):
        cur = bufs[it % 2]
        for ch in range(channels):
            who = ncc.collective_permute_implicit_current_processing_rank_id(
                iteration_id=it, replica_group=g, channel_id=ch
            )
            dst = out.ap(pattern=[[F, P], [1, w]], offset=ch * w, scalar_offset=who, indirect_dim=0)
            nisa.dma_copy(dst=dst, src=cur[:, ch * w : (ch + 1) * w])
        if it + 1 < n:
            nxt = bufs[(it + 1) % 2]
            ncc.collective_permute_implicit(
                srcs_by_channel=[[cur[:, c * w : (c + 1) * w]] for c in range(channels)],
                dsts_by_channel=[[nxt[:, c * w : (c + 1) * w]] for c in range(channels)],
                replica_group=g,
                channel_ids=list(range(channels)),
            )
    return out


@nki.jit(platform_target="trn2")
def ring_reduce(x, y, n=4, op=nl.add, dtype=None):
    """collective_permute_implicit_reduce once: each rank's output is its predecessor's
    op(x, y) (x and y its own, device memory)."""
    dt = dtype or x.dtype
    out = nl.ndarray(x.shape, dt, buffer=nl.shared_hbm)
    ncc.collective_permute_implicit_reduce(
        srcs0_by_channel=[[x]],
        srcs1_by_channel=[[y]],
        dsts_by_channel=[[out]],
        replica_group=ncc.ReplicaGroup([list(range(n))]),
        op=op,
    )
    return out


@nki.jit(platform_target="trn2")
def gather_v(x, meta, known=False):
    """all_gather_v of x (flat, device memory) with the rank's metadata (uint32 [3, 4]) on
    core 0 of each rank (kernel[2], 4 ranks); the output holds 4 slots of x's size."""
    out = nl.ndarray((4 * x.shape[0], x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0)
    for k in range(4):
        nisa.dma_copy(dst=out[k * x.shape[0] : (k + 1) * x.shape[0], :], src=t)
    if nl.program_id(0) == 0:
        ncc.all_gather_v(
            srcs=[x],
            dsts=[out],
            replica_group=ncc.ReplicaGroup([[0, 1, 2, 3]]),
            metadata_tensor=meta,
            recv_counts_known=known,
        )
    return out


@nki.jit(platform_target="trn2")
def to_all_v(x, meta, n=2):
    """all_to_all_v of x (device memory) with the rank's metadata (uint32 [3, n]); the output
    holds n slots of x's size, zero where nothing landed."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0)
    nisa.dma_copy(dst=out, src=t)
    ncc.all_to_all_v(
        srcs=[x], dsts=[out], replica_group=ncc.ReplicaGroup([list(range(n))]), metadata_tensor=meta
    )
    return out


@nki.jit(platform_target="trn2")
def bad_ring(x, case):
    """A ring collective breaking one rule (``case``), 4 ranks."""
    g = ncc.ReplicaGroup([[0, 1, 2, 3]])
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    if case == "channels":
        ncc.collective_permute_implicit([[x]], [[out]], g, channel_ids=[0, 1])
    elif case == "channel_ids":
        ncc.collective_permute_implicit([[x], [x]], [[out], [out]], g, channel_ids=[1, 2])
    elif case == "inner":
        ncc.collective_permute_implicit([x], [out], g)
    elif case == "iteration":
        ncc.collective_permute_implicit_current_processing_rank_id(-1, g)
    elif case == "register":
        r = nisa.register_alloc(0)
        ncc.collective_permute_implicit_current_processing_rank_id(r, g)
    elif case == "gather_v_lnc":
        m = nl.ndarray((3, 4), nl.uint32, buffer=nl.shared_hbm)
        ncc.all_gather_v([x], [out], g, m)
    elif case == "meta_shape":
        m = nl.ndarray((3, 3), nl.uint32, buffer=nl.shared_hbm)
        ncc.all_to_all_v([x], [out], g, m)
    elif case == "rdispls":
        m = nl.ndarray((4, 4), nl.uint32, buffer=nl.shared_hbm)
        ncc.all_to_all_v([x], [out], g, m, has_rdispls=True)
    return out


@nki.jit(platform_target="trn2")
def swap(x):
    """The two cores (kernel[2]) each load x + their id and swap it with sendrecv: the output
    is [x + 1 | x] (core c's received tile at columns c)."""
    P, F = x.shape
    c = nl.program_id(0)
    out = nl.ndarray((P, 2 * F), x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=float(c))
    b = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=a, dst=b, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)
    nisa.dma_copy(dst=out[:, c * F : (c + 1) * F], src=b)
    return out
