"""The matmul path (Tensor Engine -> PSUM) through cocotb on Verilator, against
``ncrtl.model.core.nc_matmul`` into ``ncrtl.model.psum``: a contraction done as several matmuls accumulated in
one PSUM group, read back bit for bit.

The ``core`` group (8 x 8 engine, K = 32 as four matmuls, FP32 and BF16 PSUM with RNE and SR,
bf16 / fp32 / fp8 / double_row / mx / transpose, and MX into a whole BF16 bank row of N = 1024 on
a 4 x 4 engine) runs with random stalls and backpressure, each mode family and PSUM rounding
in ``make test`` and the other combinations in the slow suite; the full 128 x 128 engine with a
128-partition PSUM and K = 512 runs in the slow suite.
"""

import pytest

from ncrtl import blocks
from ncrtl.testbench.conformance import run_block

ALL_CONFIGS = [p for _, p in blocks.GROUPS["core"]]


def _id(p):
    return f"{p['mode']}-{p['psum']}-{p.get('rounding', 'rne')}" + (
        f"-n{p['n']}" if "n" in p else ""
    )


#: ``make test``: each mode family and each PSUM rounding once; the other combinations of the
#: group run in the slow suite.
FAST_IDS = {
    "bf16-fp32-rne",
    "bf16-bf16-sr",
    "fp32-fp32-rne",
    "double_row-fp32-rne",
    "transpose_bf16-fp32-rne",
    "mx-bf16-rne-n1024",
}
CONFIGS = [p for p in ALL_CONFIGS if _id(p) in FAST_IDS]
MORE_CONFIGS = [p for p in ALL_CONFIGS if _id(p) not in FAST_IDS]


def _check(res, vectors):
    assert res.passed, res.report()
    assert sum(u["vectors"] for u in res.units) >= vectors


@pytest.mark.sim
@pytest.mark.parametrize("params", CONFIGS, ids=_id)
def test_chunked_matmul_small(params):
    """The engine in tiles of 2 x 2 PEs (``block=2``): the same datapath and control as the
    group's default tile of 8 x 8 PEs, in a quarter of the build (16 s against 70 s: Verilator
    compiles one tile model, and a 2 x 2 tile is a sixteenth of an 8 x 8 one).  The tile of
    8 x 8 PEs is built and run by the ``pe_array`` tests at 16 x 16; the group's own geometry
    runs in the slow suite."""
    _chunked({**params, "block": 2})


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("params", CONFIGS, ids=_id)
def test_chunked_matmul_small_group_tile(params):
    """The ``make test`` configurations with the group's own tile (8 x 8 PEs)."""
    _chunked(params)


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("params", MORE_CONFIGS, ids=_id)
def test_chunked_matmul_small_more(params):
    _chunked(params)


def _chunked(params):
    block = blocks.get("core")
    p = block.resolve({k: str(v) for k, v in params.items()})
    res = run_block(block, p, count=1, seed=7, stall=0.25)
    words = p["n"] if p["psum"] == "fp32" and not p["mode"].startswith("transpose") else p["n"] // 2
    _check(res, words * p["cols"])


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("psum,rounding", [("fp32", "rne"), ("bf16", "sr")])
def test_full_size_k512(psum, rounding):
    """128 x 128 engine, 128 x 8 x 2 KiB PSUM: K = 512 bf16 as four accumulated matmuls, N = 512."""
    block = blocks.get("core")
    p = block.resolve(
        {
            "rows": "128",
            "cols": "128",
            "mode": "bf16",
            "psum": psum,
            "rounding": rounding,
            "chunks": "4",
            "n": "512",
        }
    )
    res = run_block(block, p, count=1, seed=5, stall=0.0)
    _check(res, (512 if psum == "fp32" else 256) * 128)
