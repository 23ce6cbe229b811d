"""cocotb run behind ``ncrtl sim matmul``: one LoadStationary and one MultiplyMoving of a given
shape (``NCRTL_MATMUL``: JSON with k, m, n) and mode, compared with the golden and the timing
model; the cycle figures go to the summary file."""

import json
import os

import cocotb
import numpy as np

from model.tensor_engine.isa import Instruction, Mode, Op
from testbench.conformance import tb_settings
from testbench.scoreboard import write_counters
from testbench.tensor_engine.program import MODES, Program, Step, _selection, _values
from testbench.tensor_engine.test_tensor_engine import run_program


def matmul_program(rows, cols, mode_name, k, m, n, seed):
    mode, transpose = MODES[mode_name]
    rng = np.random.default_rng(seed)
    from model.tensor_engine.isa import MODE_FORMATS
    fmt = MODE_FORMATS[mode][0]
    dr = mode == Mode.DOUBLE_ROW
    prog = Program(rows, cols)
    prog.steps.append(Step(Instruction(Op.LS, mode, k=k, m=m, transpose=transpose),
                           _values(rng, fmt, (k, 2, m) if dr else (k, m), special=0)))
    x = _selection(rng, k, n, fmt) if transpose else _values(rng, fmt, (k, 2, n) if dr else (k, n),
                                                           special=0)
    prog.steps.append(Step(Instruction(Op.MM, mode, k=k, m=m, n=n, transpose=transpose), x))
    return prog


@cocotb.test()
async def test_sim_matmul(dut):
    """One LS + MM, no stalls: values and output cycles checked, cycle figures recorded."""
    params, _, seed, _ = tb_settings()
    shape = json.loads(os.environ["NCRTL_MATMUL"])
    prog = matmul_program(params["rows"], params["cols"], params["mode"], shape["k"],
                          shape["m"], shape["n"], seed)
    cycles = await run_program(dut, prog, stall=0.0, seed=seed, check_timing=True)
    write_counters(first_instr=cycles["first_instr"], first_out=cycles["first_out"],
                   last_out=cycles["last_out"])
