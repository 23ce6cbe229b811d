"""The kernels a run of the RTL NeuronCore's testbench executes (``test_neuroncore``).

A job file (``NCRTL_NEURONCORE_JOB``, a pickle written by :func:`write`) holds the memory
model's latency and a list of :class:`Job`: traced programs with their inputs (``ncrtl run
--rtl`` writes one).  The testbench leaves each kernel's cycles and outputs beside it
(:func:`save_results`, :func:`read_results`).  Without a job file the testbench runs
:func:`conformance_jobs`: the shipped examples that scale with the core's geometry and random
kernels (:mod:`ncrtl.testbench.neuroncore.random_kernels`), after the evictions of special
values.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "JOB_ENV",
    "Job",
    "write",
    "load",
    "latency_of",
    "save_results",
    "read_results",
    "example_job",
    "evictions_job",
    "quantize_job",
    "conformance_jobs",
    "CONFORMANCE_EXAMPLES",
]

#: The environment variable naming the job file.
JOB_ENV = "NCRTL_NEURONCORE_JOB"

#: The shipped examples every conformance run starts with (they scale with the geometry).
CONFORMANCE_EXAMPLES = ("matmul_basic", "matmul_tiled")


@dataclass
class Job:
    """One kernel: its name, its traced :class:`~ncrtl.model.kernel.stream.Program`, its
    inputs (arrays in argument order) and the cycles after which a run counts as hung."""

    name: str
    program: object
    inputs: list
    max_cycles: int = 1_000_000


def write(path, jobs, *, latency):
    """Write the job file ``path``: ``jobs`` run on a memory of ``latency`` cycles."""
    Path(path).write_bytes(pickle.dumps({"latency": int(latency), "jobs": list(jobs)}))


def load(path):
    return pickle.loads(Path(path).read_bytes())["jobs"]


def latency_of(path):
    return pickle.loads(Path(path).read_bytes())["latency"]


def _results(path):
    return Path(str(path) + ".results")


def save_results(path, results):
    """``{job name: {"cycles": int, "outputs": [arrays]}}`` beside the job file."""
    _results(path).write_bytes(pickle.dumps(results))


def read_results(path):
    """What :func:`save_results` left, or None when the testbench left nothing."""
    p = _results(path)
    return pickle.loads(p.read_bytes()) if p.exists() else None


def example_job(name, geo, rng):
    """The shipped example ``name`` traced on ``geo``'s core, on random inputs of its shapes
    at that geometry (``ValueError`` for an example that does not scale)."""
    from ncrtl import kernels, nki

    example, kernel = kernels.load(name)
    core = geo.core()
    arrays = example.arrays(rng, core)
    program = nki.trace(kernel, arrays, dict(example.kwargs), core=core)
    return Job(name, program, arrays)


def evictions_job(geo, rng):
    """FP32 values (ties, overflow, subnormals, infinities, NaN) DMA'd into SBUF, converted to
    BF16, FP16 and the four FP8 formats and copied as they are by SBUF -> SBUF
    ``tensor_copy``, each DMA'd back."""
    import ncrtl.nki as nki
    import ncrtl.nki.isa as nisa
    import ncrtl.nki.language as nl

    @nki.jit
    def evictions(x):
        P, F = x.shape
        a = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        outs = []
        for dt in (
            nl.bfloat16,
            nl.float16,
            nl.float32,
            nl.float8_e4m3,
            nl.float8_e4m3fn,
            nl.float8_e5m2,
            nl.float8_e3m4,
        ):
            b = nl.ndarray((P, F), dtype=dt, buffer=nl.sbuf)
            nisa.tensor_copy(dst=b, src=a)
            o = nl.ndarray((P, F), dtype=dt, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=o, src=b)
            outs.append(o)
        return tuple(outs)

    shape = (geo.partitions, 12)
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-140, 130, shape)).astype(np.float32)
    # a third of them in the FP8 formats' range (their subnormals to past their largest)
    near = (rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 18, shape)).astype(np.float32)
    x = np.where(rng.random(shape) < 0.35, near, x)
    # NaN, infinities, BF16 and FP16 overflow, an FP16 tie, a BF16 tie, an FP32 subnormal,
    # e4m3fn's largest and its NaN past it, an e4m3 tie
    specials = [np.nan, np.inf, -np.inf, 3e38, 65520.0, 1 + 2.0**-11, 1 + 2.0**-8, 2.0**-140]
    specials += [448.0, -464.5, 1 + 2.0**-4]
    x.reshape(-1)[: len(specials)] = specials
    program = nki.trace(evictions, [x], {}, core=geo.core())
    return Job("evictions", program, [x])


def quantize_job(geo, rng):
    """BF16 and FP16 tiles (wide and narrow exponents, infinities, NaN, zero groups) DMA'd into
    SBUF and quantized by ``quantize_mx`` to MXFP8 e4m3fn and e5m2, the second from a column
    window of its source; codes and scales DMA'd back (a core with QuantizeMX:
    ``geo.quantize_mx``)."""
    import ml_dtypes

    import ncrtl.nki as nki
    import ncrtl.nki.isa as nisa
    import ncrtl.nki.language as nl

    @nki.jit
    def quantize(x, y):
        P, F = x.shape
        outs = []
        for src, dt, lo in ((x, nl.float8_e4m3fn_x4, 0), (y, nl.float8_e5m2_x4, 4)):
            a = nl.ndarray((P, F), dtype=src.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=src)
            n = (F - lo) // 4
            q = nl.ndarray((P, n), dtype=dt, buffer=nl.sbuf)
            s = nl.ndarray((P, n), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.quantize_mx(dst=q, src=a[:, lo:F], dst_scale=s)
            oq = nl.ndarray((P, n), dtype=dt, buffer=nl.shared_hbm)
            os_ = nl.ndarray((P, n), dtype=nl.uint8, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=oq, src=q)
            nisa.dma_copy(dst=os_, src=s)
            outs += [oq, os_]
        return tuple(outs)

    shape = (geo.partitions, 40)

    def values(dtype):
        v = rng.standard_normal(shape) * 2.0 ** rng.integers(-30, 30, shape)
        near = rng.standard_normal(shape) * 2.0 ** rng.integers(-4, 4, shape)
        v = np.where(rng.random(shape) < 0.5, near, v).astype(dtype)
        flat = v.reshape(-1)
        flat[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 65504.0]
        v[8:16, 8:12] = 0  # a group of zeros
        return v

    x, y = values(ml_dtypes.bfloat16), values(np.float16)
    program = nki.trace(quantize, [x, y], {}, core=geo.core())
    return Job("quantize", program, [x, y])


def conformance_jobs(geo, rng, count, modes=("bf16", "fp16")):
    """The conformance set at ``geo`` on a core whose PEs have ``modes`` (mode names):
    :data:`CONFORMANCE_EXAMPLES`, the evictions of special values (:func:`evictions_job`), on
    a NeuronCore-v4 with QuantizeMX the quantizations (:func:`quantize_job`), the shipped
    ``matmul_fp8_double_row`` where the PEs have the double-row mode and ``matmul_mx``
    (QuantizeMX, then the MX matmul) where they have the MX mode, then ``count`` random
    kernels."""
    from .random_kernels import random_job

    out = [example_job(n, geo, rng) for n in CONFORMANCE_EXAMPLES] + [evictions_job(geo, rng)]
    if geo.quantize_mx:
        out.append(quantize_job(geo, rng))
    if "double_row" in modes and geo.version != "v2":
        out.append(example_job("matmul_fp8_double_row", geo, rng))
    if "mx" in modes and geo.quantize_mx:
        out.append(example_job("matmul_mx", geo, rng))
    out += [random_job(geo, rng, f"random{i}") for i in range(count)]
    return out
