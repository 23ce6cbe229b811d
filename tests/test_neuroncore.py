"""The RTL NeuronCore (docs/neuroncore.md): a kernel's streams as queue entries, its refusals,
kernels run on the Verilator build of the core against the golden, bit for bit (the conformance
set and ``ncrtl run --rtl``), the core's lint."""

import json
import os

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl import blocks
from ncrtl.cli import main
from ncrtl.hdl.neuroncore.isa import VectorKind, op_layouts, pack, queue_layout
from ncrtl.kernels import load, load_file
from ncrtl.model.kernel import golden
from ncrtl.model.neuroncore import CopyOp, DmaOp, Geometry, MatmulOp, Unsupported, Wait, encode
from ncrtl.model.neuroncore.isa import QuantizeOp
from ncrtl.nki.kernel import trace
from ncrtl.testbench.conformance import run_block
from tests.kernel_lines import kernel_line

HERE = os.path.dirname(__file__)
RTL = os.path.join(HERE, "kernels", "rtl.py")

#: The ``neuroncore`` group's small core (8 partitions, 8 x 8 PEs, 2 DMA engines, 4 DMA
#: queues), bf16-family PEs: one Verilator build for the conformance run and ``ncrtl run``.
SMALL_PARAMS = blocks.GROUPS["neuroncore"][0][1]
SMALL = blocks.neuroncore_geometry(blocks.get("neuroncore").resolve(SMALL_PARAMS))
#: The group's NeuronCore-v4 quadrant (32 partitions, 32 x 32 PEs, QuantizeMX).
V4_PARAMS = blocks.GROUPS["neuroncore"][2][1]


def _bf16(rng, *shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def _line(tag):
    return kernel_line(RTL, tag)


def test_matmul_streams_become_queue_entries():
    rng = np.random.default_rng(0)
    a, b = _bf16(rng, 8, 6), _bf16(rng, 8, 16)
    prog = trace(load("matmul_basic")[1], [a, b], core=SMALL.core())
    enc = encode(prog, SMALL)
    assert set(enc.queues) == set(SMALL.streams())
    t = enc.queues["tensor"]
    # the matmul waits for both loads (dma0, dma1: semaphores 2 and 3), then runs
    assert t[:2] == [Wait(2, 1), Wait(3, 1)] and isinstance(t[2], MatmulOp)
    assert (t[2].s_esize, t[2].m_esize) == (2, 2)
    v = enc.queues["vector"]
    assert v[0] == Wait(0, 1) and isinstance(v[1], CopyOp)
    assert (v[1].src_psum, v[1].parts, v[1].n, v[1].convert) == (True, 6, 16, 1)
    d = enc.queues["dma0"][0]
    assert isinstance(d, DmaOp) and d.parts == SMALL.dma_engines
    assert enc.totals == {"tensor": 1, "vector": 1, "dma0": 1, "dma1": 1, "dma2": 1, "dma3": 0}
    # every entry packs into its queue's word, each field where the hardware reads it
    layouts = op_layouts(SMALL)
    for name, entries in enc.queues.items():
        layout = queue_layout(layouts[name])
        for e in entries:
            bits = pack(e, SMALL)
            assert 0 <= bits < 1 << layout.size
            word = layout.from_bits(bits)
            assert word.kind == (0 if isinstance(e, Wait) else 1)
            if isinstance(e, Wait):
                assert (word.body.wait.sem, word.body.wait.count) == (e.sem, e.count)
                continue
            op = word.body.op
            if isinstance(e, MatmulOp):
                got = (op.ls.as_bits(), op.mm.as_bits(), op.psum.as_bits(), op.s_addr, op.m_addr)
                assert got == (e.ls, e.mm, e.psum, e.s_addr, e.m_addr)
                assert (1 << op.s_esize, 1 << op.m_esize) == (e.s_esize, e.m_esize)
            elif isinstance(e, CopyOp):
                assert op.kind == VectorKind.COPY
                op = op.body.copy
                got = (op.src_psum, op.src_addr, op.dst_addr, op.part, op.parts, op.n, op.convert)
                assert got == (e.src_psum, e.src_addr, e.dst_addr, e.part, e.parts, e.n, e.convert)
                assert (1 << op.src_esize, 1 << op.dst_esize) == (e.src_esize, e.dst_esize)
            else:
                assert op.parts == e.parts
                assert (op.desc.src.base, op.desc.dst.base) == (e.desc.src.base, e.desc.dst.base)


def _quantize_kernel(col, part):
    import ncrtl.nki.isa as nisa
    import ncrtl.nki.language as nl

    @nki.jit
    def quantize(x):
        P, F = x.shape
        a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        n = 9
        q = nl.ndarray((P, n), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        s = nl.ndarray((P, n), dtype=nl.uint8, buffer=nl.sbuf)
        rows = slice(part, part + 32)
        nisa.quantize_mx(dst=q[rows, :], src=a[rows, col : col + 36], dst_scale=s[rows, :])
        out = nl.ndarray((32, n), dtype=nl.float8_e5m2_x4, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=q[rows, :])
        return out

    return quantize


def test_quantize_streams_become_queue_entries():
    """A ``quantize_mx`` on the v4 quadrant is a :class:`QuantizeOp` in the vector queue, packed
    where the Vector Engine reads it; one from a partition that does not begin a quadrant, or
    from a source that is not 8-byte aligned, is refused naming the kernel line and the rule."""
    from dataclasses import replace

    geo = blocks.neuroncore_geometry(blocks.get("neuroncore").resolve(V4_PARAMS))
    x = np.zeros((32, 40), np.float16)
    enc = encode(trace(_quantize_kernel(4, 0), [x], core=geo.core()), geo)
    (wait, op) = enc.queues["vector"]
    assert wait == Wait(2, 1) and isinstance(op, QuantizeOp)
    assert (op.src_addr % 64, op.part, op.parts, op.n, op.src_fmt, op.elem_fmt) == (
        8,
        0,
        32,
        36,
        1,
        1,
    )
    layout = queue_layout(op_layouts(geo)["vector"])
    word = layout.from_bits(pack(op, geo))
    assert word.kind == 1 and word.body.op.kind == VectorKind.QUANTIZE
    q = word.body.op.body.quantize
    got = (q.src_addr, q.dst_addr, q.scale_addr, q.part, q.parts, q.n, q.src_fmt, q.elem_fmt)
    assert got == (op.src_addr, op.dst_addr, op.scale_addr, op.part, op.parts, op.n, 1, 1)
    # two quadrants: the second one's partitions are a quantization of their own
    geo64 = replace(geo, partitions=64, rows=64, cols=64)
    x64 = np.zeros((64, 40), np.float16)
    (_, op) = encode(trace(_quantize_kernel(0, 32), [x64], core=geo64.core()), geo64).queues[
        "vector"
    ]
    assert (op.part, op.parts) == (32, 32)
    for col, part, rule in ((2, 0, "aligned 8-byte slot"), (0, 16, "whole 32-partition quadrants")):
        with pytest.raises(Unsupported, match=rule) as e:
            encode(trace(_quantize_kernel(col, part), [x64], core=geo64.core()), geo64)
        assert "nisa.quantize_mx" in str(e.value)
    # a v3 core has no QuantizeMX: the front end refuses the kernel when it is traced


def test_double_row_matmul_becomes_a_two_pass_entry():
    """``matmul_fp8_double_row`` at the small geometry: a :class:`MatmulOp` whose second pass
    reads each partition's second row (``[K, 2, M]``: ``s_addr2 = s_addr + M``), packed where
    the feed reads it."""
    from ncrtl.model.neuroncore.isa import Second
    from ncrtl.testbench.neuroncore import jobs

    job = jobs.example_job("matmul_fp8_double_row", SMALL, np.random.default_rng(0))
    enc = encode(job.program, SMALL)
    (op,) = [e for e in enc.queues["tensor"] if isinstance(e, MatmulOp)]
    M, N = SMALL.cols, SMALL.psum_bank_bytes // 4
    assert (op.second, op.s_addr2 - op.s_addr, op.m_addr2 - op.m_addr) == (Second.DOUBLE_ROW, M, N)
    assert enc.modes() == ("double_row",)
    word = queue_layout(op_layouts(SMALL)["tensor"]).from_bits(pack(op, SMALL)).body.op
    assert (word.second, word.s_addr2, word.m_addr2) == (op.second, op.s_addr2, op.m_addr2)


def test_an_instruction_the_core_lacks_is_refused_naming_it():
    k = load_file(RTL, "uses_activation")
    x = np.ones((8, 4), np.float32)
    prog = trace(k, [x], core=SMALL.core())
    with pytest.raises(Unsupported) as e:
        encode(prog, SMALL)
    msg = str(e.value)
    assert _line("activation") in msg and "activation" in msg and "no scalar stream" in msg


def test_a_kernel_traced_for_another_geometry_is_refused():
    rng = np.random.default_rng(0)
    prog = trace(load("matmul_basic")[1], [_bf16(rng, 128, 8), _bf16(rng, 128, 16)])
    with pytest.raises(Unsupported, match="partitions = 128, the RTL core has 8"):
        encode(prog, SMALL)


def test_geometry_rules():
    with pytest.raises(ValueError, match="cols .* must equal partitions"):
        Geometry(partitions=8, rows=8, cols=4)
    with pytest.raises(ValueError, match="dma_queues x dma_inflight"):
        Geometry(dma_queues=32, dma_inflight=4)


def test_tile_sizes_follow_the_traced_core():
    seen = {}

    @nki.jit
    def probe(x):
        import nki.language as nl

        seen["pmax"] = nl.tile_size.pmax
        seen["fmax"] = nl.tile_size.gemm_moving_fmax
        return x

    trace(probe, [np.zeros((8, 4), np.float32)], core=SMALL.core())
    assert seen == {"pmax": 8, "fmax": 32}
    import ncrtl.nki.language as nl

    assert nl.tile_size.pmax == 128 and nl.tile_size.gemm_moving_fmax == 512


def _param_flags(params):
    return [x for k, v in params.items() for x in ("--param", f"{k}={v}")]


@pytest.mark.sim
def test_conformance_small_core_with_stalls():
    """The conformance set on the Verilator build of the small core, with a fifth of the start
    and AXI4 cycles stalled (the instruction fetch's port among them): matmul_basic, matmul_tiled, the evictions of special values and
    random kernels, every output bit for bit against the golden; the memory models saw no
    AXI4 beat lost or duplicated."""
    block = blocks.get("neuroncore")
    res = run_block(block, block.resolve(SMALL_PARAMS), count=4, seed=7, stall=0.2)
    assert res.passed, res.report()
    names = {u["name"].split(".")[0] for u in res.units}
    assert {"matmul_basic", "matmul_tiled", "evictions"} <= names
    assert sum(n.startswith("random") for n in names) == 4
    assert res.mismatches == 0 and res.vectors > 1500


@pytest.mark.sim
def test_run_rtl_reports_outputs_and_cycles(tmp_path):
    """``ncrtl run --example matmul_basic --rtl`` at the small core's geometry (the conformance
    test's build): the RTL's outputs equal the golden's and report.json has the RTL's cycles
    beside the timing model's."""
    out = tmp_path / "out"
    argv = ["run", "--example", "matmul_basic", "--rtl", "--preset", "small", "--out", str(out)]
    assert main(argv) == 0
    rtl = json.loads((out / "report.json").read_text())["rtl"]
    assert rtl["outputs_equal"] is True and rtl["pe_modes"] == "bf16"
    assert rtl["geometry"]["partitions"] == 8 and rtl["cycles"] > 100
    assert rtl["cycles_ratio"] == round(rtl["cycles"] / rtl["timing_model_cycles"], 4)


def test_run_rtl_refuses_a_kernel_before_building(monkeypatch, capsys, tmp_path):
    """A kernel with an instruction the core lacks: exit status 2 naming its line, nothing
    built."""
    from ncrtl.testbench import conformance

    def no_build(*a, **k):
        raise AssertionError("built")

    monkeypatch.setattr(conformance, "build_block", no_build)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((8, 4), np.float32))
    argv = ["run", f"{RTL}::uses_activation", "--args", str(x), "--rtl", "--partitions", "8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert _line("activation") in err and "no scalar stream" in err


def test_run_rtl_builds_the_family_the_kernel_needs(monkeypatch, capsys):
    """``--rtl`` builds the PE family of the kernel's matmuls (double-row FP8: the fp8 family),
    not the conformance program's, and runs the kernel in place of that program; PE modes
    that lack the kernel's matmuls are refused before the golden run."""
    from ncrtl.model.kernel import golden as kgolden
    from ncrtl.testbench import conformance
    from ncrtl.testbench.conformance import BlockResult

    asked = {}

    def fake_run_block(block, params, **kw):
        asked.update(params=params, own_program=kw.get("own_program"))
        return BlockResult("neuroncore[...]", False, message="not run here")

    monkeypatch.setattr(conformance, "run_block", fake_run_block)
    argv = ["run", "--example", "matmul_fp8_double_row", "--rtl", "--preset", "small"]
    assert main(argv) == 1  # the fake run's failure: after the build was asked for
    assert asked["params"]["pe_modes"] == "fp8" and asked["own_program"] is True
    assert asked["params"]["partitions"] == 8 and asked["params"]["dma_queues"] == 4
    capsys.readouterr()

    def no_golden(*a, **k):
        raise AssertionError("the golden ran")

    monkeypatch.setattr(kgolden, "run", no_golden)
    assert main(argv + ["--param", "pe_modes=bf16"]) == 2
    err = capsys.readouterr().err
    assert "pe_modes='bf16' does not serve the kernel's double_row matmuls" in err


def test_core_geometry_rules_are_the_blocks(capsys):
    """One rule for ``ncrtl run --rtl`` and ``ncrtl conformance neuroncore``: PE rows and
    columns follow the partitions unless given; a preset is the documented small core, which
    given parameters override; ``ncrtl list`` says both."""
    block = blocks.get("neuroncore")
    assert block.resolve({"partitions": "8"})["cols"] == 8
    assert block.resolve({"partitions": "8", "rows": "4"})["rows"] == 4
    small = block.resolve({}, preset="small")
    assert small == block.resolve({k: str(v) for k, v in blocks.NEURONCORE_SMALL.items()})
    assert block.resolve({"dma_engines": "1"}, preset="small")["dma_engines"] == 1
    with pytest.raises(blocks.BlockError, match="unknown preset 'tiny'; presets: small"):
        block.resolve({}, preset="tiny")
    assert main(["run", "--example", "matmul_basic", "--rtl", "--preset", "tiny"]) == 2
    assert "unknown preset 'tiny'" in capsys.readouterr().err
    assert main(["run", "--example", "matmul_basic", "--preset", "small"]) == 2
    assert "preset: parameters of the RTL core, only with --rtl" in capsys.readouterr().err
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "cols follows partitions unless given" in out and "preset small: partitions=8" in out


def test_run_rtl_options_need_rtl(capsys):
    assert main(["run", "--example", "matmul_basic", "--partitions", "8"]) == 2
    assert "only with --rtl" in capsys.readouterr().err
    assert main(["run", "--example", "matmul_basic", "--rtl", "--cols", "4"]) == 2
    assert "cols (4) must equal partitions (128)" in capsys.readouterr().err


@pytest.mark.synth
def test_small_core_lint_clean():
    """The small core under ``verilator --lint-only -Wall`` (the waivers of hdl/lint.vlt)."""
    from ncrtl.testbench.lint import lint_verilog

    text, top = blocks.get("neuroncore").verilog(blocks.get("neuroncore").resolve(SMALL_PARAMS))
    lint_verilog(text, top).check()


@pytest.mark.synth
def test_core_units_synthesize_without_latches():
    """Yosys synthesis of the core's own units at the small geometry (the block's synthesis
    parts, what ``ncrtl lint neuroncore`` synthesizes), each latch-free."""
    from ncrtl.testbench.lint import synth_check

    block = blocks.get("neuroncore")
    units = block.synthesis_units(block.resolve(SMALL_PARAMS))
    assert {name for _, name in units} >= {"neuroncore_feed", "neuroncore_vector"}
    for text, name in units:
        synth_check(text, name).check()


@pytest.mark.sim
@pytest.mark.slow
def test_conformance_v4_quadrant_with_quantize_and_mx():
    """The conformance set on the NeuronCore-v4 quadrant (32 partitions, QuantizeMX in its
    Vector Engine, double-row and MX PEs), a fifth of the cycles stalled: the quantizations'
    codes and scales, ``matmul_fp8_double_row``'s and ``matmul_mx``'s results bit for bit with
    the examples, evictions and random kernels."""
    block = blocks.get("neuroncore")
    res = run_block(block, block.resolve(V4_PARAMS), count=2, seed=5, stall=0.2)
    assert res.passed, res.report()
    names = {u["name"].split(".")[0] for u in res.units}
    want = {"matmul_basic", "matmul_tiled", "evictions", "quantize", "matmul_mx"}
    assert want | {"matmul_fp8_double_row"} <= names
    assert res.mismatches == 0


@pytest.mark.synth
@pytest.mark.slow
def test_v4_quadrant_lint_clean_and_units_latch_free():
    """The v4 quadrant core under ``verilator --lint-only -Wall`` and its own units (the
    Vector Engine with its quantizer and the Tensor Engine's feed with its MX scale paths among
    them) latch-free in Yosys."""
    from ncrtl.testbench.lint import lint_verilog, synth_check

    block = blocks.get("neuroncore")
    params = block.resolve(V4_PARAMS)
    text, top = block.verilog(params)
    lint_verilog(text, top).check()
    for text, name in block.synthesis_units(params):
        synth_check(text, name).check()


@pytest.mark.sim
@pytest.mark.slow
def test_matmul_tiled_full_size_core():
    """``matmul_tiled`` (256 x 256 x 1024 bf16) on the real core's geometry: 128 partitions, a
    128 x 128 Tensor Engine (bf16-family PEs), 8 PSUM banks, 16 DMA engines and queues, with a
    tenth of the start and AXI4 cycles stalled: the outputs bit for bit."""
    from ncrtl.testbench.neuroncore import jobs
    from ncrtl.testbench.neuroncore.run import run_rtl

    block = blocks.get("neuroncore")
    geo = blocks.neuroncore_geometry(block.resolve({}))
    job = jobs.example_job("matmul_tiled", geo, np.random.default_rng(1))
    want, _ = golden.run(job.program, job.inputs)
    res = run_rtl(job.program, job.inputs, geo, pe_modes="bf16", stall=0.1)
    assert len(res.outputs) == len(want)
    for g, w in zip(res.outputs, want):
        assert np.asarray(g).tobytes() == np.asarray(w).tobytes()


def test_a_failed_rtl_run_writes_nothing(monkeypatch, tmp_path, capsys):
    """When the RTL run fails (a mismatch, an error strobe, a hang: the testbench's report),
    ``ncrtl run --rtl`` prints the report, exits 1 and leaves ``--out`` unwritten."""
    from ncrtl.testbench.neuroncore import run as rtl_run

    def failing(*a, **k):
        raise RuntimeError("neuroncore[...]: 3 mismatches in matmul_basic.out0")

    monkeypatch.setattr(rtl_run, "run_rtl", failing)
    out = tmp_path / "out"
    argv = ["run", "--example", "matmul_basic", "--rtl", "--out", str(out)]
    params = {k: v for k, v in SMALL_PARAMS.items() if k != "pe_modes"}
    assert main(argv + _param_flags(params)) == 1
    assert not out.exists()
    assert "the run FAILED" in capsys.readouterr().out


def test_examples_scale_to_a_core_or_say_they_do_not():
    """``Example.arrays``: a scaling example's inputs follow the core's partitions and PSUM bank
    row; one written for 128 partitions is refused, naming the example and the core."""
    from ncrtl.kernels import EXAMPLES

    rng = np.random.default_rng(0)
    a, b = EXAMPLES["matmul_tiled"].arrays(rng, SMALL.core())
    assert a.shape == (16, 16) and b.shape == (16, 64)
    assert [x.shape for x in EXAMPLES["matmul_basic"].arrays(rng)] == [(128, 64), (128, 512)]
    with pytest.raises(ValueError, match="matmul_fully_optimized is written for 128 partitions"):
        EXAMPLES["matmul_fully_optimized"].arrays(rng, SMALL.core())


def test_bench_neuroncore_size_is_checked(capsys):
    assert main(["bench", "--only", "neuroncore", "--nc-size", "16"]) == 2
    assert "--nc-size 16 must be 8 or 128" in capsys.readouterr().err


def test_timing_at_rtl_has_the_descriptor_generators_of_the_rtl():
    """The timing model at the RTL's figures puts the RTL's two descriptor generators in
    front of the DMA engines: transfers on one generator start at least ``DGE_CYCLES`` + parts
    + 1 cycles apart, and none completes sooner than ``DGE_CYCLES`` after it starts; the
    default model (the real core's figures) has no such stage."""
    from ncrtl.model.dma.dge import DGE_CYCLES
    from ncrtl.model.kernel import timing
    from ncrtl.model.neuroncore.timing import DGES, rtl_params, simulate_at_rtl
    from ncrtl.testbench.neuroncore import jobs

    assert timing.Params().dge is None
    assert rtl_params(SMALL, 8).dge == timing.DgeStage(
        DGE_CYCLES, DGES, SMALL.dma_inflight, SMALL.dma_queues
    )
    job = jobs.example_job("matmul_tiled", SMALL, np.random.default_rng(0))
    rep = simulate_at_rtl(job.program, SMALL, 8)
    starts = {g: [] for g in range(DGES)}
    for name, records in rep.records.items():
        if name.startswith("dma"):
            for r in records:
                starts[int(name[3:]) % DGES].append(rep.core.ns(r.start))
                assert rep.core.ns(r.done - r.start) >= DGE_CYCLES
    assert all(len(s) > 1 for s in starts.values())
    for s in starts.values():
        assert np.diff(sorted(s)).min() >= DGE_CYCLES + 2


def test_fetch_starts_stagger_the_models_streams():
    """``fetch_starts``: the streams with entries, in stream order, each first entry after the
    memory latency and the earlier streams' first entries' words (the tensor queue's two words
    from cycle 1 + 8); the timing model at the RTL's figures then starts each stream there,
    and the total grows by no more than the last start."""
    from ncrtl.hdl.neuroncore.isa import entry_words, fetch_starts
    from ncrtl.model.neuroncore.timing import simulate_at_rtl
    from ncrtl.testbench.neuroncore import jobs

    job = jobs.example_job("matmul_basic", SMALL, np.random.default_rng(0))
    enc = encode(job.program, SMALL)
    st = fetch_starts(enc, SMALL, 8)
    assert list(st) == [s for s in SMALL.streams() if enc.queues[s]]
    layouts = op_layouts(SMALL)
    assert st["tensor"] == 1 + 8 + entry_words(layouts["tensor"], SMALL)
    assert all(b > a for a, b in zip(list(st.values()), list(st.values())[1:]))
    plain = simulate_at_rtl(job.program, SMALL, 8)
    late = simulate_at_rtl(job.program, SMALL, 8, starts=st)
    for name, first in st.items():
        assert late.core.ns(late.records[name][0].start) >= first
    assert plain.total_ns <= late.total_ns <= plain.total_ns + max(st.values())
