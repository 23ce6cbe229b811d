"""``ncrtl sim matmul --psum``: a K-long contraction as K / rows Tensor Engine matmuls
accumulated in one PSUM group, on the ``core`` block (Tensor Engine -> PSUM), with its figures.
A transpose writes its raw 16-bit words into PSUM (RAW16): one overwrite, nothing accumulated."""

import json
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

from ncrtl import blocks
from ncrtl.model.modes import operation
from ncrtl.testbench.conformance import run_block
from ncrtl.testbench.tensor_engine.simulate import (
    CLOCK_HZ,
    k_text,
    result_values,
    save_result,
)

__all__ = ["sim_matmul_psum", "core_build", "bank_values"]


def bank_values(words, n, kind, dtype=None, fmt_s=0):
    """The ``[M, N]`` float32 result in the bank words read back (``[slots, partitions]``
    uint32): ``kind`` ``"fp32"`` words, or 16-bit elements (element ``c`` is half ``c % 2`` of
    word ``c // 2``, half 0 the low bits) holding ``"bf16"`` values or ``"raw16"`` encodings of
    the transpose ``dtype``'s stationary format (index ``fmt_s``)."""
    w = np.asarray(words, dtype=np.uint32)
    if kind == "fp32":
        return w[:n].T.copy().view(np.float32)
    halves = np.stack([w & np.uint32(0xFFFF), w >> np.uint32(16)], axis=1)
    halves = halves.reshape(2 * w.shape[0], w.shape[1]).astype(np.uint16)[:n].T.copy()
    if kind == "bf16":
        return halves.view(ml_dtypes.bfloat16).astype(np.float32)
    return result_values(halves, dtype, fmt_s)


def core_build(rows, cols, dtype, psum, rounding, chunks, n, pe_modes=None):
    """``(block, params, None, why)`` of the ``core`` build ``ncrtl sim matmul --psum`` runs:
    the engine with a PSUM of 2 KiB banks (no stream players), its PE built for ``pe_modes``
    (None: the narrowest family serving ``dtype``; ``why`` says which and why, as
    :meth:`ncrtl.blocks.Block.resolve_run`)."""
    block = blocks.get("core")
    user = {
        "rows": str(rows),
        "cols": str(cols),
        "mode": dtype,
        "psum": psum,
        "rounding": rounding,
        "chunks": str(chunks),
        "n": str(n),
        "bank_bytes": "2048",
    }
    if pe_modes is not None:
        user["pe_modes"] = pe_modes
    params, why = block.resolve_run(user)
    return block, params, None, why


def sim_matmul_psum(
    *,
    rows,
    cols,
    dtype,
    k,
    n,
    psum,
    rounding="rne",
    seed=1,
    waves=False,
    formats=(0, 0),
    special=False,
    data=None,
    source="",
    out=None,
    pe_modes=None,
):
    """Run the chunked matmul; print cycles, utilization and the match; return the exit status.

    ``formats``: the stationary and moving format indices of the mode; ``special``: random data
    with signed zeros, subnormals, infinities and NaNs; ``data``: ``{"stationary": codes,
    "moving": codes}`` of the whole contraction (``[K, M]`` / ``[K, N]`` encodings, double_row
    ``[K, 2, ...]``) instead of random data, ``source`` naming it; ``out``: write the bank's
    result there as float32 ``[M, N]``."""
    chunks = k // rows
    block, params, _, _ = core_build(rows, cols, dtype, psum, rounding, chunks, n, pe_modes)
    pe_mode, transpose = operation(dtype)
    fs, fm = pe_mode.formats_s[formats[0]], pe_mode.formats_m[formats[1]]
    what = source or f"random {'special' if special else 'normal'} values"
    if transpose:
        print(
            f"transpose {dtype} K={k} M={cols} N={n} on a {rows}x{cols} array, {fs}, {what}: "
            f"written to PSUM as raw 16-bit words (RAW16, one overwrite: the --psum dtype and "
            f"rounding do not apply)",
            flush=True,
        )
    else:
        print(
            f"matmul {dtype} {k_text(pe_mode, k)} M={cols} N={n} on a {rows}x{cols} array, "
            f"{fs} x {fm}, {what}: {chunks} matmul(s) of {k_text(pe_mode, rows)} accumulated "
            f"in one {psum}{' ' + rounding if psum == 'bf16' else ''} PSUM group",
            flush=True,
        )
    with tempfile.TemporaryDirectory() as tmp:
        job = {"fmt_s": int(formats[0]), "fmt_m": int(formats[1]), "special": bool(special)}
        job["out"] = str(Path(tmp) / "bank.npy")
        if data is not None:
            job["data"] = str(Path(tmp) / "data.npz")
            np.savez(job["data"], fmt_s=formats[0], fmt_m=formats[1], **data)
        res = run_block(
            block,
            params,
            count=n,
            seed=seed,
            stall=0.0,
            waves=True if waves else None,
            progress=True,
            extra_env={"NCRTL_CORE_JOB": json.dumps(job)},
        )
        words = np.load(job["out"]) if Path(job["out"]).exists() else None
    c = res.counters
    if not c.get("cycles"):
        print(f"simulation failed: {res.message}")
        return 1
    cycles = c["cycles"]
    products = pe_mode.products
    macs = 0 if transpose else k * products * cols * n
    print(f"  cycles (first instruction to group complete): {cycles}")
    if macs:
        util = macs / (cycles * rows * cols * products)
        tflops = 2 * macs / (cycles / CLOCK_HZ) / 1e12
        print(
            f"  MACs {macs}: {macs / cycles:.1f} per cycle, utilization {util:.3f} of "
            f"{rows * cols * products} MACs/cycle; {tflops:.2f} TFLOPS equivalent at "
            f"{CLOCK_HZ / 1e9:.1f} GHz"
        )
    for u in res.units:
        print(f"  {u['name']}: {u['vectors']} compared, {u['mismatches']} mismatches")
    print(
        f"  {'transposed' if transpose else 'accumulated'} result "
        f"{'MATCHES' if res.passed else 'DOES NOT MATCH'} the golden model "
        f"(ncrtl.model.core.nc_matmul into ncrtl.model.psum)"
    )
    if out is not None and words is not None:
        kind = "raw16" if transpose else psum
        save_result(out, bank_values(words, n, kind, dtype, formats[0]))
    if not res.passed:
        print(res.message)
    return 0 if res.passed else 1
