"""``ncrtl sim matmul --psum``: a K-long contraction as K / rows Tensor Engine matmuls
accumulated in one PSUM group, on the ``core`` block (Tensor Engine -> PSUM), with its figures."""

from ncrtl import blocks
from ncrtl.model.modes import operation
from ncrtl.testbench.conformance import run_block
from ncrtl.testbench.tensor_engine.simulate import CLOCK_HZ

__all__ = ["sim_matmul_psum"]


def sim_matmul_psum(*, rows, cols, dtype, k, n, psum, rounding="rne", seed=1, waves=False):
    """Run the chunked matmul; print cycles, utilization and the match; return the exit status."""
    block = blocks.get("core")
    chunks = k // rows
    bank_bytes = 2048
    params = block.resolve(
        {
            "rows": str(rows),
            "cols": str(cols),
            "mode": dtype,
            "psum": psum,
            "rounding": rounding,
            "chunks": str(chunks),
            "n": str(n),
            "bank_bytes": str(bank_bytes),
        }
    )
    res = run_block(
        block, params, count=n, seed=seed, stall=0.0, waves=True if waves else None, progress=True
    )
    pe_mode, transpose = operation(dtype)
    c = res.counters
    if not c.get("cycles"):
        print(f"simulation failed: {res.message}")
        return 1
    cycles = c["cycles"]
    products = pe_mode.products
    macs = 0 if transpose else k * products * cols * n
    print(
        f"matmul {dtype} K={k * products} M={cols} N={n} on a {rows}x{cols} array: "
        f"{chunks} matmul(s) of K={rows * products} accumulated in a "
        f"{psum}{' ' + rounding if psum == 'bf16' else ''} PSUM group"
    )
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
        f"  accumulated result {'MATCHES' if res.passed else 'DOES NOT MATCH'} the golden "
        f"model (ncrtl.model.core.nc_matmul into ncrtl.model.psum)"
    )
    if not res.passed:
        print(res.message)
    return 0 if res.passed else 1
