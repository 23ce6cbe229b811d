"""cocotb run behind ``ncrtl sim matmul``: one LoadStationary and one MultiplyMoving of a given
shape (``NCRTL_MATMUL``: JSON with k, m, n) and mode, compared with the golden and the timing
model; the cycle figures go to the summary file."""

import json
import os

import cocotb
import numpy as np

from ncrtl.model.modes import operation
from ncrtl.model.tensor_engine.isa import Instruction, Op
from ncrtl.model.tensor_engine.matmul import mx_row_scales
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.scoreboard import write_counters
from ncrtl.testbench.tensor_engine.program import Program, Step, _selection, _values, tile_shape
from ncrtl.testbench.tensor_engine.test_tensor_engine import run_program


def matmul_program(rows, cols, op_name, k, m, n, seed):
    """One LS + MM of an operation (a mode's matmul or transpose), formats of index 0."""
    pe_mode, transpose = operation(op_name)
    rng = np.random.default_rng(seed)
    fs, fm = pe_mode.formats_s[0], pe_mode.formats_m[0]
    prog = Program(rows, cols)

    def scale(x):
        """MX: SBUF scale tensors near 1.0 in the quadrant layout, as PE rows see them."""
        if not pe_mode.scale:
            return None
        sbuf = (127 + rng.integers(-4, 5, (k, x))).astype(np.uint8)
        return mx_row_scales(sbuf, k)

    prog.steps.append(
        Step(
            Instruction(Op.LS, pe_mode.code, k=k, m=m, transpose=transpose),
            _values(rng, fs, tile_shape(pe_mode, k, m), special=0),
            scale(m),
        )
    )
    x = (
        _selection(rng, k, n, fs)
        if transpose
        else _values(rng, fm, tile_shape(pe_mode, k, n), special=0)
    )
    prog.steps.append(
        Step(Instruction(Op.MM, pe_mode.code, k=k, m=m, n=n, transpose=transpose), x, scale(n))
    )
    return prog


@cocotb.test()
async def test_sim_matmul(dut):
    """One LS + MM, no stalls: values and output cycles checked, cycle figures recorded."""
    params, _, seed, _ = tb_settings()
    shape = json.loads(os.environ["NCRTL_MATMUL"])
    prog = matmul_program(
        params["rows"], params["cols"], params["mode"], shape["k"], shape["m"], shape["n"], seed
    )
    cycles = await run_program(dut, prog, stall=0.0, seed=seed, check_timing=True)
    write_counters(
        first_instr=cycles["first_instr"],
        first_out=cycles["first_out"],
        last_out=cycles["last_out"],
    )
