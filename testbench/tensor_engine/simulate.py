"""``ncrtl sim matmul``: one matmul on the Tensor Engine RTL, with its cycle figures.

Builds the engine, runs one LoadStationary + MultiplyMoving through
``ncrtl.testbench.tensor_engine.test_sim`` (values checked against the golden, output cycles against
the timing model) and prints cycles, utilization and the equivalent TFLOPS at 2.4 GHz.
"""

import json

from ncrtl import blocks
from ncrtl.model.modes import operation
from ncrtl.testbench.conformance import run_block

__all__ = ["sim_matmul", "CLOCK_HZ"]

#: Tensor Engine clock of Trainium2 (documented 2.4 GHz).
CLOCK_HZ = 2.4e9


def sim_matmul(*, rows, cols, dtype, k, m, n, seed=1, waves=False):
    """Run the matmul and print its figures; return the exit status (0 = matched)."""
    block = blocks.get("pe_array")
    params = block.resolve({"rows": str(rows), "cols": str(cols), "mode": dtype})
    res = run_block(
        block,
        params,
        count=n,
        seed=seed,
        stall=0.0,
        waves=True if waves else None,
        testbench="ncrtl.testbench.tensor_engine.test_sim",
        extra_env={"NCRTL_MATMUL": json.dumps({"k": k, "m": m, "n": n})},
    )
    pe_mode, transpose = operation(dtype)
    c = res.counters
    if not c.get("last_out"):
        print(f"simulation failed: {res.message}")
        return 1
    cycles = c["last_out"] - c["first_instr"] + 1
    products = pe_mode.products
    macs = 0 if transpose else k * m * n * products
    peak = pe_mode.macs_per_cycle(rows, cols)
    util = macs / (cycles * rows * cols * products) if macs else 0.0
    tflops = 2 * macs / (cycles / CLOCK_HZ) / 1e12
    stream = n * pe_mode.interval(transpose)
    print(f"matmul {dtype} K={k} M={m} N={n} on a {rows}x{cols} array")
    print(f"  cycles (first instruction to last output vector): {cycles}")
    print(
        f"  first output vector after {c['first_out'] - c['first_instr']} cycles; "
        f"moving stream {stream} cycles"
    )
    if macs:
        print(
            f"  MACs {macs}: {macs / cycles:.1f} per cycle, utilization {util:.3f} of "
            f"{rows * cols * products} MACs/cycle"
        )
        print(
            f"  equivalent {tflops:.2f} TFLOPS at {CLOCK_HZ / 1e9:.1f} GHz "
            f"(mode peak {2 * peak * CLOCK_HZ / 1e12:.1f} TFLOPS in steady state)"
        )
    if c.get("run_us"):
        print(
            f"  simulation speed {c['run_cycles'] / (c['run_us'] / 1e6):.1f} cycles/s "
            f"(wall time of the streaming, {c['run_us'] / 1e6:.1f} s)"
        )
    for u in res.units:
        print(f"  {u['name']}: {u['vectors']} compared, {u['mismatches']} mismatches")
    print(
        f"  result {'MATCHES' if res.passed else 'DOES NOT MATCH'} the golden model and the "
        f"timing model"
    )
    if not res.passed:
        print(res.message)
    return 0 if res.passed else 1
