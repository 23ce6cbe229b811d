"""cocotb run behind ``ncrtl sim matmul``: one LoadStationary and one MultiplyMoving of a given
shape (``NCRTL_MATMUL``: JSON with k, m, n) and mode, compared with the golden and the timing
model; the cycle figures go to the summary file.  ``repeat`` in ``NCRTL_MATMUL`` runs that many
pairs back to back (the benchmark's long runs).

With ``data`` in ``NCRTL_MATMUL`` (an ``.npz`` path: ``stationary`` / ``moving`` encodings in
:func:`tile_shape`, ``fmt_s`` / ``fmt_m`` format indices and, in the MX mode,
``stationary_scale`` / ``moving_scale`` uint8 scales of every PE row) the matmul runs on that
data instead of random data; with ``out`` the result ``[M, N]`` (FP32 bits as uint32, as the RTL
produced them; a transpose's raw encodings) is written to that ``.npy`` path.  A sparse matmul
(``ncrtl sim matmul --sparse``) comes as data only: ``sparse`` its compression ratio,
``stationary`` the compressed encodings ``[K, M]``, ``tags`` their physical tags ``[K, M]`` and
``moving`` the encodings ``[K, R, N]``, on an engine built with ``sparse=1``.  Random data is in
the formats ``fmt_s`` / ``fmt_m`` (indices, default 0) and, with ``special`` true, has signed
zeros, subnormals, infinities and NaNs mixed in (:func:`special_values`).
"""

import json
import os
import time

import cocotb
import numpy as np

from ncrtl.hdl.tensor_engine.pe import moving_width, sparse_slot_width
from ncrtl.model.modes import operation, pe_modes
from ncrtl.model.tensor_engine.isa import Instruction, Op
from ncrtl.model.tensor_engine.matmul import mx_row_scales
from ncrtl.testbench.conformance import tb_settings
from ncrtl.testbench.scoreboard import write_counters, write_timings
from ncrtl.testbench.tensor_engine.program import (
    Program,
    Step,
    _selection,
    _values,
    special_values,
    tile_shape,
)
from ncrtl.testbench.tensor_engine.test_tensor_engine import run_program


def matmul_program(
    rows,
    cols,
    op_name,
    k,
    m,
    n,
    seed,
    data=None,
    repeat=1,
    formats=(0, 0),
    special=False,
    engine_modes=None,
):
    """``repeat`` LS + MM pairs of an operation (a mode's matmul or transpose) back to back:
    random data in the formats of indices ``formats`` (``special``: with special values), or
    the arrays of ``data`` (a mapping, see the module docstring; one pair).  ``engine_modes``:
    the PE modes of an engine built with the sparse path (its moving words), else None."""
    prog = Program(rows, cols)
    if engine_modes is not None:
        prog.sparse, prog.slot = True, sparse_slot_width(engine_modes)
        prog.x_width = moving_width(engine_modes, True)
    rng = np.random.default_rng(seed)
    for _ in range(repeat if data is None else 1):
        _append_matmul(prog, rng, op_name, k, m, n, data, formats, special)
    return prog


def _append_matmul(prog, rng, op_name, k, m, n, data, formats=(0, 0), special=False):
    pe_mode, transpose = operation(op_name)
    ratio, tags = 0, None
    if data is not None and "sparse" in data:
        ratio, tags = int(data["sparse"]), data["tags"]
    if data is not None:
        fs, fm = int(data["fmt_s"]), int(data["fmt_m"])
        st, x = data["stationary"], data["moving"]
        ss, xs = (data["stationary_scale"], data["moving_scale"]) if pe_mode.scale else (None, None)
    else:
        fs, fm = formats
        if special:
            # Zeros and subnormals in a tenth of the elements; infinities and NaNs in about a
            # fifth of the output values, whatever K.
            nonfinite = 0.1 / (k * pe_mode.products)

            def values(fmt, shape):
                return special_values(rng, fmt, shape, 0.1, nonfinite)
        else:

            def values(fmt, shape):
                return _values(rng, fmt, shape, special=0)

        def scale(x):
            """MX: SBUF scale tensors near 1.0 in the quadrant layout, as PE rows see them."""
            if not pe_mode.scale:
                return None
            sbuf = (127 + rng.integers(-4, 5, (k, x))).astype(np.uint8)
            return mx_row_scales(sbuf, k)

        st = values(pe_mode.formats_s[fs], tile_shape(pe_mode, k, m))
        ss = scale(m)
        x = (
            _selection(rng, k, n, pe_mode.formats_s[fs])
            if transpose
            else values(pe_mode.formats_m[fm], tile_shape(pe_mode, k, n))
        )
        xs = scale(n)
    fields = dict(k=k, m=m, fmt_s=fs, fmt_m=fm, transpose=transpose, sparse=ratio)
    prog.steps.append(Step(Instruction(Op.LS, pe_mode.code, **fields), st, ss, tags=tags))
    prog.steps.append(Step(Instruction(Op.MM, pe_mode.code, n=n, **fields), x, xs))


@cocotb.test()
async def test_sim_matmul(dut):
    """One LS + MM, no stalls: values and output cycles checked, cycle figures recorded."""
    t_start = time.time()
    params, _, seed, _ = tb_settings()
    shape = json.loads(os.environ["NCRTL_MATMUL"])
    t0 = time.perf_counter()
    data = np.load(shape["data"]) if shape.get("data") else None
    prog = matmul_program(
        params["rows"],
        params["cols"],
        params["mode"],
        shape["k"],
        shape["m"],
        shape["n"],
        seed,
        data,
        repeat=int(shape.get("repeat", 1)),
        formats=(int(shape.get("fmt_s", 0)), int(shape.get("fmt_m", 0))),
        special=bool(shape.get("special", False)),
        engine_modes=pe_modes(params.get("pe_modes", "all")) if params.get("sparse") else None,
    )
    stimulus = time.perf_counter() - t0
    cycles = await run_program(dut, prog, stall=0.0, seed=seed, check_timing=True, t_start=t_start)
    if shape.get("out"):
        result = np.asarray(cycles["vectors"][:, : shape["m"]]).T.astype(np.uint32)
        np.save(shape["out"], result)
    write_timings(stimulus_s=stimulus)
    write_counters(
        first_instr=cycles["first_instr"],
        first_out=cycles["first_out"],
        last_out=cycles["last_out"],
    )
