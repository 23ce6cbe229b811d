"""Random NKI kernels for the RTL NeuronCore's conformance: shapes, dtypes, access patterns and
dependencies across engines drawn from a seed, within what the core runs (docs/neuroncore.md).

A kernel is one to three *groups*, each a matmul accumulated in PSUM over ``chunks``
contraction tiles (in FP32, or on NeuronCore-v4 for a quarter of the groups in BF16 rounded to
nearest even):
the tiles DMA'd from windows of the device tensors (row windows of the contraction, a column
window of the stationary and of the moving side), the product evicted by ``tensor_copy`` into
SBUF in a drawn dtype (FP32 -> BF16 / FP16 rounded, or as it is), sometimes copied again SBUF
-> SBUF (as it is, or evicted as FP32 and converted by the SBUF -> SBUF copy), and DMA'd back
into a window of an output tensor.  The inputs span a wide exponent range with a few
infinities and NaNs, so the evictions meet overflow, subnormals, ties and NaN.  The groups
share their input tensors, may run on a Tensor Engine tile (``tile_position``: the
operands on partitions from the tile's row, the result on PSUM and SBUF partitions from its
column) and may reuse one SBUF tile for the next group's operands (the tracer then orders the engines with semaphores: a DMA waits for the matmul that
read the tile, the Tensor Engine for the DMAs, the eviction for the matmuls, the store for the
eviction).  Every dimension is drawn up to the core's limits: K up to its PE rows, M up to its
columns, N up to a PSUM bank row.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["Group", "random_plan", "random_job", "build_kernel", "wide_values"]

_IN_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
_OUT_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Group:
    """One accumulated matmul: ``chunks`` tiles of ``k`` contraction rows from row ``k0`` of
    the inputs, stationary columns ``m0 .. m0 + m`` and moving columns ``n0 .. n0 + n``; the
    result in ``out_dtype`` in output ``out`` (``m`` x ``n``); ``copy``: ``""`` (evicted
    into ``out_dtype`` and stored), ``"raw"`` (then copied SBUF -> SBUF as it is) or
    ``"convert"`` (evicted as FP32, converted by an SBUF -> SBUF copy); ``tile``: ``()`` (the
    whole array) or ``(row, col, rows, cols)``, a Tensor Engine tile (``tile_position``,
    ``tile_size``): the operands then sit on SBUF partitions from ``row``, the result on PSUM
    and SBUF partitions from ``col``; ``psum``: the PSUM accumulator's dtype (``"bfloat16"``:
    the chunks accumulate in BF16 PSUM, RNE, and the result is evicted as it is)."""

    chunks: int
    k: int
    k0: int
    m: int
    m0: int
    n: int
    n0: int
    out_dtype: str
    copy: str
    out: int
    tile: tuple = ()
    psum: str = "float32"


def random_plan(geo, rng):
    """``(in_dtype, shapes, groups)``: the inputs' dtype, ``[K, M]`` / ``[K, N]`` of the two
    input tensors, and the :class:`Group` s."""
    rows, cols, fmax = geo.rows, geo.cols, geo.psum_bank_bytes // 4
    in_dtype = str(rng.choice(list(_IN_DTYPES)))
    groups = []
    K = rows * 3
    M, N = cols + cols // 2, fmax + fmax // 2
    for g in range(int(rng.integers(1, 4))):
        chunks = int(rng.integers(1, 4))
        tile, k_top, m_top = (), rows, cols
        # a tile of rows x (tile_unit or 2 x tile_unit) columns, or the other way round
        sizes = [s for s in (geo.tile_unit, 2 * geo.tile_unit) if s < min(rows, cols)]
        if sizes and rng.random() < 0.4:
            size = int(rng.choice(sizes))
            if rng.random() < 0.5:
                tile = (0, size * int(rng.integers(0, cols // size)), rows, size)
            else:
                tile = (size * int(rng.integers(0, rows // size)), 0, size, cols)
            k_top, m_top = tile[2], tile[3]
        k = int(rng.integers(1, k_top + 1))
        k0 = int(rng.integers(0, K - chunks * k + 1))
        m = int(rng.integers(1, m_top + 1))
        n = int(rng.integers(1, fmax + 1))
        # BF16 PSUM is NeuronCore-v4's (a v3 matmul writes FP32 PSUM)
        bf16_psum = geo.version == "v4" and rng.random() < 0.25
        groups.append(
            Group(
                chunks,
                k,
                k0,
                m,
                int(rng.integers(0, M - m + 1)),
                n,
                int(rng.integers(0, N - n + 1)),
                "bfloat16" if bf16_psum else str(rng.choice(_OUT_DTYPES)),
                str(rng.choice(["", "raw"] if bf16_psum else ["", "", "raw", "convert"])),
                g,
                tile,
                "bfloat16" if bf16_psum else "float32",
            )
        )
    return in_dtype, ((K, M), (K, N)), groups


def build_kernel(groups, reuse):
    """The NKI kernel of ``groups``: ``kernel(lhsT, rhs)`` returning one output per group.
    ``reuse``: the groups' operand tiles share one SBUF tensor per chunk (write after read
    across groups)."""
    import ncrtl.nki as nki
    import ncrtl.nki.isa as nisa
    import ncrtl.nki.language as nl

    def kernel(lhsT, rhs):
        outs, shared = [], {}
        for g in groups:
            r0, c0 = g.tile[:2] if g.tile else (0, 0)
            where = {"tile_position": g.tile[:2], "tile_size": g.tile[2:]} if g.tile else {}
            res = nl.ndarray((g.m, g.n), dtype=g.out_dtype, buffer=nl.shared_hbm)
            ps = nl.ndarray((c0 + g.m, g.n), dtype=g.psum, buffer=nl.psum)[c0:, :]
            for c in range(g.chunks):
                lo = g.k0 + c * g.k
                if reuse:
                    if c not in shared:
                        ts = nl.tile_size
                        shared[c] = (
                            nl.ndarray((ts.pmax, ts.gemm_stationary_fmax), lhsT.dtype, nl.sbuf),
                            nl.ndarray((ts.pmax, ts.gemm_moving_fmax), rhs.dtype, nl.sbuf),
                        )
                    a = shared[c][0][r0 : r0 + g.k, : g.m]
                    b = shared[c][1][r0 : r0 + g.k, : g.n]
                else:
                    a = nl.ndarray((r0 + g.k, g.m), dtype=lhsT.dtype, buffer=nl.sbuf)[r0:, :]
                    b = nl.ndarray((r0 + g.k, g.n), dtype=rhs.dtype, buffer=nl.sbuf)[r0:, :]
                nisa.dma_copy(dst=a, src=lhsT[lo : lo + g.k, g.m0 : g.m0 + g.m])
                nisa.dma_copy(dst=b, src=rhs[lo : lo + g.k, g.n0 : g.n0 + g.n])
                nisa.nc_matmul(dst=ps, stationary=a, moving=b, **where)
            first = nl.float32 if g.copy == "convert" else g.out_dtype
            o = nl.ndarray((c0 + g.m, g.n), dtype=first, buffer=nl.sbuf)[c0:, :]
            nisa.tensor_copy(dst=o, src=ps)
            if g.copy:
                o2 = nl.ndarray((c0 + g.m, g.n), dtype=g.out_dtype, buffer=nl.sbuf)[c0:, :]
                nisa.tensor_copy(dst=o2, src=o)
                o = o2
            nisa.dma_copy(dst=res, src=o)
            outs.append(res)
        return tuple(outs)

    return nki.jit(kernel)


def random_job(geo, rng, name):
    """A random kernel traced on ``geo``'s core, with random inputs
    (:class:`~ncrtl.testbench.neuroncore.jobs.Job`)."""
    from ncrtl import nki

    from .jobs import Job

    in_dtype, (s_shape, m_shape), groups = random_plan(geo, rng)
    reuse = bool(rng.random() < 0.5)
    dt = _IN_DTYPES[in_dtype]
    inputs = [wide_values(rng, s_shape, dt), wide_values(rng, m_shape, dt)]
    program = nki.trace(build_kernel(groups, reuse), inputs, {}, core=geo.core())
    return Job(name, program, inputs)


def wide_values(rng, shape, dtype):
    """Normal values scaled over a wide exponent range (the dtype's own, so BF16 products
    overflow FP16 and FP32 sums reach subnormal BF16 / FP16), a few infinities and NaNs."""
    top = 60 if dtype is ml_dtypes.bfloat16 else 7
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-top, top + 1, shape)
    flat = x.reshape(-1)
    for v in (np.inf, -np.inf, np.nan):
        if rng.random() < 0.15:
            flat[int(rng.integers(0, flat.size))] = v
    return x.astype(dtype)
