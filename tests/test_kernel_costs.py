"""The documented engine costs of the kernel timing model (docs/kernels.md, "Costs"), each
rule against its closed form."""

import os

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from ncrtl.model.kernel import timing as ktiming
from ncrtl.model.tensor_engine import timing as te_timing

HERE = os.path.dirname(__file__)
COSTS = os.path.join(HERE, "kernels", "costs.py")
KIB = 1024


def _run(name, x, kwargs=None, core="v3", golden=False):
    return nki.run(load_file(COSTS, name), (x,), kwargs or {}, core=core, golden=golden)


def _bf16(p, nbytes):
    return np.zeros((p, nbytes // 2), ml_dtypes.bfloat16)


def _data_ns(rep, rec):
    """ns of a transfer's data movement (from its start to its last byte)."""
    return rep.core.ns(rec.end - rec.start)


@pytest.mark.parametrize("core, peak", [("v2", 17), ("v3", 23), ("v4", 33)])
def test_a_single_transfer_moves_at_the_documented_rate(core, peak):
    """One device memory -> SBUF copy of P partitions x B bytes: min(16, P) engines at the
    generation's B/ns each, ceil(P / 16) partitions per engine, a packet (the time of 256
    bytes) per partition; then the 1.3 us semaphore-to-start latency."""
    c = ktiming.DMA_COSTS[core]
    assert c.bytes_per_ns == peak and c.packet_bytes == 256 and c.latency_ns == 1300
    gbps = {}
    for p in (1, 8, 16, 17, 128):
        for b in (64, 256, 2 * KIB, 64 * KIB):
            rep = _run("load", _bf16(p, b), core=core).report
            rec = rep.records["dma0"][0]
            rows = -(-p // min(16, p))
            want = rows * (256 + b) / peak
            assert c.transfer_ns(p, b) == pytest.approx(want)
            assert _data_ns(rep, rec) == pytest.approx(want, abs=rep.core.ns(1)), (p, b)
            assert rep.core.ns(rec.done - rec.end) == pytest.approx(1300)
            gbps[p, b] = p * b / want
    for b in (64, 256, 2 * KIB, 64 * KIB):
        # fewer partitions use fewer engines: 1 and 8 partitions get 1/16 and 8/16 of 16's
        assert gbps[1, b] == pytest.approx(gbps[16, b] / 16)
        assert gbps[8, b] == pytest.approx(gbps[16, b] / 2)
        assert gbps[128, b] == pytest.approx(gbps[16, b])
        assert gbps[17, b] == pytest.approx(gbps[16, b] * 17 / 32)  # one engine takes 2


def test_the_payload_curve_lands_in_each_documented_range():
    """The NKI DMA bandwidth guide's points, as ranges of the fraction of an engine's peak a
    stream of transfers gets at B bytes per partition: below 256 B overhead-bound (the packet
    costs at least its data: <= 1/2; 64 B a small fraction, <= 1/4), 256 B - 2 KiB improving
    and below peak (the packet 10% or more of the time below 2 KiB: < 0.9 at 1 KiB), from 2 KiB near peak (>= 0.85), from 4 KiB saturating
    (>= 15/16).  The per-packet cost is the one value in [256, 4096 / 15] bytes these allow,
    256 (docs/kernels.md, "Costs")."""
    for core in ("v2", "v3", "v4"):
        c = ktiming.DMA_COSTS[core]
        eff = {b: c.efficiency(b) for b in (64, 128, 255, 256, 512, 1024, 2048, 4096, 65536)}
        assert eff[64] <= 0.25 and eff[255] < 0.5 and eff[256] == 0.5
        assert eff[256] < eff[512] < eff[1024] < 0.9 and eff[1024] < eff[2048]
        assert eff[2048] >= 0.85 and eff[4096] >= 15 / 16 and eff[65536] > 0.99
        for b, e in eff.items():
            p128 = 128 * b / c.transfer_ns(128, b)
            assert p128 == pytest.approx(e * 16 * c.bytes_per_ns)
    assert 256 <= ktiming.DmaCosts(23).packet_bytes <= 4096 / 15


@pytest.mark.parametrize("pieces", [1, 2, 4, 8])
def test_each_contiguous_run_is_a_packet(pieces):
    """A partition's 2 KiB read from the device memory in ``pieces`` separate runs is that many
    packets: the per-packet cost ``pieces`` times; the values are the copy's."""
    x = np.arange(128 * 2 * KIB).reshape(128, 2 * KIB).astype(ml_dtypes.bfloat16)
    res = _run("strided_load", x, {"pieces": pieces}, golden=True)
    rec = res.report.records["dma0"][0]
    want = ktiming.DMA_COSTS["v3"].transfer_ns(128, 2 * KIB, pieces)
    assert want == pytest.approx(8 * (256 * pieces + 2 * KIB) / 23)
    assert _data_ns(res.report, rec) == pytest.approx(want, abs=res.report.core.ns(1))
    ref = x.reshape(128, pieces, 2, KIB // pieces)[:, :, 0, :]
    assert res.outputs[0].tobytes() == np.ascontiguousarray(ref).tobytes()


def test_dma_transposes_move_at_their_documented_fractions():
    """A DMA transpose from the device memory moves at 90% of a copy's rate, SBUF to SBUF at
    50% (seed 000), a packet per destination partition; the values are the transposes'."""
    x = np.arange(128 * 64).reshape(128, 64).astype(np.float32).astype(ml_dtypes.bfloat16)
    res = _run("transposes", x, golden=True)
    c = ktiming.DMA_COSTS["v3"]
    rep = res.report
    hbm, sbuf = rep.records["dma0"][0], rep.records["dma1"][0]
    assert (hbm.ins.op, sbuf.ins.op) == ("dma_transpose", "dma_transpose")
    assert _data_ns(rep, hbm) == pytest.approx(4 * (256 + 256 / 0.9) / 23, abs=rep.core.ns(1))
    assert _data_ns(rep, sbuf) == pytest.approx(8 * (256 + 128 / 0.5) / 23, abs=rep.core.ns(1))
    assert c.transfer_ns(64, 256, rate=0.9) == pytest.approx(4 * (256 + 256 / 0.9) / 23)
    assert res.outputs[0].tobytes() == x.tobytes()


def test_descriptor_generation():
    """Precomputed descriptors (``dge_mode`` none or the compiler's choice) cost nothing more;
    the hardware DGE (v3 on) about 600 ns per instruction on one of two generators (queue q
    on generator q % 2), one instruction at a time each; software DGE the same time on the
    GpSimd engine, one at a time."""
    # 4 partitions each: the three transfers' data use 4 engines each, never shared
    x = _bf16(4, 2 * KIB)
    data = ktiming.DMA_COSTS["v3"].transfer_ns(4, 2 * KIB)

    def starts(dge):
        """When each transfer's data began (its end less its data time)."""
        rep = _run("loads", x, {"n": 3, "dge": dge}).report
        return [rep.core.ns(rep.records[f"dma{q}"][0].end) - data for q in range(3)]

    for dge in (None, "none"):
        assert starts(dge) == pytest.approx([0, 0, 0], abs=0.1)
    # dma0 and dma1 on the two generators at once, dma2 after dma0 on generator 0
    assert starts("hwdge") == pytest.approx([600, 600, 1200], abs=0.1)
    assert starts("swdge") == pytest.approx([600, 1200, 1800], abs=0.1)


def test_hardware_dge_on_v2_is_refused_naming_the_line(tmp_path, capsys):
    from ncrtl.cli import main

    np.save(tmp_path / "x.npy", np.zeros((128, 64), np.float32))
    argv = ["run", f"{COSTS}::load", "--args", str(tmp_path / "x.npy"), "--core", "v2"]
    argv += ["--kwarg", "dge=hwdge", "--timing-only"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "costs.py:" in err[0]
    assert "dge_mode=hwdge: the hardware descriptor generator is NeuronCore-v3" in err[0]


def test_the_rtl_comparison_keeps_the_rtl_data_path():
    """``model_at_rtl`` runs the timing model at the RTL's figures, none of the documented
    costs and no warm-up throttle: matmul_basic on the small core keeps its 1,916 cycles (docs/kernels.md)."""
    from ncrtl import blocks
    from ncrtl.model.neuroncore.timing import rtl_params
    from ncrtl.testbench.neuroncore import jobs
    from ncrtl.testbench.neuroncore.run import model_at_rtl

    small = blocks.neuroncore_geometry(
        blocks.get("neuroncore").resolve(blocks.GROUPS["neuroncore"][0][1])
    )
    rtl = rtl_params(small, 8)
    assert rtl.dma_costs is None and rtl.throttle is None and rtl.compute is None
    job = jobs.example_job("matmul_basic", small, np.random.default_rng(3))
    assert round(model_at_rtl(job.program, small).total_ns) == 1916


def test_bench_dma_curve_prints_the_model_beside_the_documented_points(capsys):
    """``ncrtl bench --only dma-curve``: per core version, the model's GB/s for 64 B to 64 KiB
    per partition and 1 to 128 partitions, each row beside the guide's range."""
    from ncrtl.cli import main

    assert main(["bench", "--only", "dma-curve"]) == 0
    out = capsys.readouterr().out
    for name, peak in (("v2", 272), ("v3", 368), ("v4", 528)):
        assert f"NeuronCore-{name}: " in out and f"{peak} GB/s for 16" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 3 * 11
    v3 = {int(r[0]): r for r in rows[11:22]}
    assert float(v3[2048][8]) == pytest.approx(16 * 23 * 2048 / (2048 + 256), abs=0.05)
    assert float(v3[2048][1]) == pytest.approx(23 * 2048 / (2048 + 256), abs=0.05)
    assert " ".join(v3[64][10:]) == "< 256 B: overhead-bound"
    assert " ".join(v3[4096][10:]) == ">= 4 KiB: saturating"


def _mm_issues(sched):
    return [r for r in sched.records if r.instruction.op == te_timing.Op.MM]


def test_throttle_ramp():
    """The Tensor Engine's warm-up throttle at 2.4 GHz (a 7,200-cycle window and warm-up): R
    bf16 matmuls of N = 512 back to back run at half rate (1,024 cycles each) until their
    occupancy reaches 7,200 cycles (8 of them: the decision is per matmul), then at full rate
    (512 each); the throttle added 8 x 512 cycles."""
    th = te_timing.throttle_at(2400)
    assert (th.window, th.warmup, th.threshold, th.factor) == (7200, 7200, 0.5, 2)
    prog = te_timing.matmul_program(128, 128, 512, "bf16", repeat=20)
    sched = te_timing.simulate(prog, throttle=th)
    mms = _mm_issues(sched)
    k = -(-7200 // 1024)
    assert [r.throttled for r in mms] == [True] * k + [False] * (20 - k)
    assert [r.issue for r in mms] == [
        31 + 1024 * min(i, k) + 512 * max(0, i - k) for i in range(20)
    ]
    assert mms[0].beats.step == 2 and mms[-1].beats.step == 1
    assert sched.throttle_cycles == k * 512 and sched.throttled == k
    plain = te_timing.simulate(prog)
    assert sched.total_cycles - plain.total_cycles == k * 512


@pytest.mark.parametrize("gap, throttled", [(3500, False), (3569, False), (3570, True)])
def test_throttle_engages_again_below_half_utilization(gap, throttled):
    """Warm, then idle: the next matmul (its LoadStationary ``gap`` cycles after the last
    matmul's end, itself 31 more) looks back 7,200 cycles, busy for 7,200 - gap - 31 of them;
    below half (a gap over 3,569) the throttle engages again, and that matmul runs at half
    rate."""
    seq = te_timing.Sequencer(throttle=te_timing.throttle_at(2400))
    prog = te_timing.matmul_program(128, 128, 512, "bf16", repeat=30)
    for ins in prog:
        seq.issue(ins)
    end = seq.records[-1].busy_until
    assert not seq.records[-1].throttled
    seq.issue(prog[0], end + gap)
    mm = seq.issue(prog[1])
    assert mm.issue == end + gap + 31 and mm.throttled == throttled
    assert mm.beats.step == (2 if throttled else 1)


def test_kernel_runs_throttled_on_v3_and_v4_not_v2_and_says_what_it_cost(capsys):
    """In the kernel timing run the Tensor Engine of v3 and v4 has the throttle (v2 none);
    ``--no-throttle`` runs without it; the report says how many matmuls ran at half rate and
    the Tensor Engine time it added."""
    from ncrtl.cli import main

    for core, modelled in (("v2", False), ("v3", True), ("v4", True)):
        rep = nki.run(*_example("matmul_basic"), core=core, golden=False).report
        t = rep.summary()["throttle"]
        assert t["modelled"] == modelled
        if modelled:
            assert t["matmuls_throttled"] == 1
            assert t["ns"] == pytest.approx(512 / 2.4, abs=0.01)
    assert main(["run", "--example", "matmul_basic", "--timing-only"]) == 0
    out = capsys.readouterr().out
    assert "Tensor Engine throttle: 1 matmuls at half rate, +213.3 ns of Tensor Engine time" in out
    assert main(["run", "--example", "matmul_basic", "--timing-only", "--no-throttle"]) == 0
    assert "Tensor Engine throttle" not in capsys.readouterr().out


def test_ncrtl_timing_matmul_throttles_under_the_documented_rules_only(capsys):
    from ncrtl.cli import main

    argv = ["timing", "matmul", "--repeat", "20"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "warm-up throttle: 8 of 20 matmuls at half rate, +4096 cycles" in out
    assert f"total: {31 + 8 * 1024 + 12 * 512 + 259} cycles" in out
    for more in (["--no-throttle"], ["--rules", "hdl"]):
        assert main(argv + more) == 0
        out = capsys.readouterr().out
        assert "throttle" not in out and f"total: {31 + 20 * 512 + 259} cycles" in out


def _example(name):
    from ncrtl.kernels import load

    e, k = load(name)
    return k, e.inputs(np.random.default_rng(0)), e.kwargs


def test_report_dma_queues_utilizations_and_waits(tmp_path):
    """The report: per DMA queue its bytes, GB/s while moving, fraction of the peak and
    payload per partition (and the engines together over the run); MFU, HFU, MBU against their
    closed forms (a Tensor Engine transpose is issued FLOPs, not useful ones); the waits of
    each engine by the engine it waited on; counter tracks in the Perfetto trace."""
    import json

    k, ins, kw = _example("matmul_tiled")
    res = nki.run(k, ins, kw, golden=False, trace_file=True)
    rep = res.report
    s = rep.summary()
    assert s["dma_peak_gbps"] == 368
    q = s["dma_queues"]
    assert sum(v["bytes"] for n, v in q.items() if n != "dma_engines") == rep.dma_bytes
    assert q["dma_engines"]["bytes"] == rep.dma_bytes
    assert q["dma_engines"]["gbps"] == pytest.approx(rep.dma_bytes / rep.total_ns, abs=1e-3)
    # dma4's one transfer: a [128, 512] bf16 load alone on the engines, at 80% of the peak
    assert q["dma4"]["bytes_per_partition"] == 1024 and q["dma4"]["of_peak"] == 0.8
    # per engine: 128-partition transfers spread evenly over the 16 engines, whose bytes add
    # up to the queues'
    e = s["dma_engines"]
    assert list(e) == [f"dma_engine{i}" for i in range(16)]
    assert sum(v["bytes"] for v in e.values()) == rep.dma_bytes
    assert len({v["bytes"] for v in e.values()}) == 1
    assert e["dma_engine0"]["of_peak"] == pytest.approx(q["dma_engines"]["of_peak"], abs=1e-3)
    peak_flops = 2 * 128 * 128 * 2.4  # bf16, per ns
    assert s["mfu"] == pytest.approx(2 * rep.macs / (peak_flops * rep.total_ns), abs=1e-4)
    assert s["mfu"] == pytest.approx(s["te_utilization"], abs=1e-3) and s["hfu"] == s["mfu"]
    assert s["mbu"] == pytest.approx(rep.dma_bytes / (368 * rep.total_ns), abs=1e-4)
    waits = s["engine_waits_ns"]
    assert set(waits) == {"tensor", "vector", "dma"} and set(waits["tensor"]) == {"dma"}
    total = sum(r.waited for rs in rep.records.values() for r in rs if r.blocker)
    assert sum(v for row in waits.values() for v in row.values()) == pytest.approx(
        rep.core.ns(total), abs=0.01
    )
    rep.trace.write(tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = {e["name"] for e in events if e["ph"] == "C"}
    assert names == {"DMA engines in use", "Tensor Engine rate (throttle)"}

    k, ins, kw = _example("transpose_tensor_engine")
    s = nki.run(k, ins, kw, golden=False).report.summary()
    assert s["mfu"] == 0 and s["hfu"] > 0
    # a logical core of two: each queue against its own core's engines, the engines of both
    k, ins, kw = _example("exchange_halves")
    s = nki.run(k, ins, kw, golden=False).report.summary()
    q = s["dma_queues"]["core1.dma0"]
    assert s["dma_peak_gbps"] == 2 * 368 and q["of_peak"] == pytest.approx(
        q["gbps"] / 368, abs=1e-4
    )
    assert {k.split(".")[0] for k in s["dma_engines"]} == {"core0", "core1"}
    assert sum(v["bytes"] for v in s["dma_engines"].values()) == s["dma_bytes"]


def test_fewer_partitions_use_fewer_dma_engines():
    """A transfer of R < 16 rows moves on R engines, the others idle (the report's
    ``dma_engines``: the kernel's load and its store); R = 20 puts two rows on the first four
    engines, one on the rest."""

    def report(rows):
        return _run("load", _bf16(rows, 512)).report.summary()["dma_engines"]

    four = report(4)
    assert list(four) == [f"dma_engine{i}" for i in range(4)]
    assert all(v["bytes"] == 1024 for v in four.values())
    twenty = report(20)
    assert [v["bytes"] // 1024 for v in twenty.values()] == [2] * 4 + [1] * 12


# (op, engine, dtype, F, step, core) -> (occupancy, completion latency) in engine cycles
SHAPES = {
    ("tensor_copy", None, "float32", 2048, 1, "v3"): (2048, 120),  # N, 2 accesses x 60
    ("tensor_copy", None, "float32", 16, 1, "v3"): (64, 120),  # the initiation interval
    ("tensor_tensor", None, "float32", 512, 1, "v3"): (1024, 180),  # 2N, 3 accesses
    ("tensor_copy", None, "bfloat16", 2048, 1, "v3"): (512, 120),  # performance mode 4x
    ("tensor_copy", None, "bfloat16", 2048, 1, "v2"): (2048, 120),  # none on v2
    ("tensor_tensor", None, "bfloat16", 512, 1, "v3"): (512, 180),  # 2x
    ("tensor_copy", None, "float32", 2048, 4, "v3"): (512, 120),  # stride 16 B: full rate
    ("tensor_copy", None, "float32", 2048, 8, "v3"): (512, 120),  # 32 B: half rate
    ("tensor_copy", "gpsimd", "float32", 512, 1, "v3"): (150 + 512, 120),  # start-up
    ("memset", "gpsimd", "float32", 16, 1, "v3"): (150 + 16, 60),  # no initiation interval
    ("activation", None, "float32", 512, 1, "v3"): (512, 120),
    ("activation", None, "float32", 16, 1, "v3"): (64, 120),
    ("tensor_scalar", "scalar", "bfloat16", 1024, 1, "v3"): (1024, 120),
    ("tensor_scalar", "scalar", "bfloat16", 1024, 1, "v4"): (512, 120),  # v4's BF16 2x
    ("tensor_copy", "scalar", "bfloat16", 1024, 1, "v4"): (512, 120),
    ("tensor_copy", "scalar", "float32", 1024, 1, "v4"): (1024, 120),
}


@pytest.mark.parametrize("shape", list(SHAPES), ids=["-".join(map(str, k)) for k in SHAPES])
def test_vector_scalar_gpsimd_instruction_costs(shape):
    """Each Vector / Scalar / GpSimd instruction shape against the documented closed form:
    occupancy max(64, N x inputs / mode) (GpSimd: 150 + N x inputs), an innermost stride over
    16 bytes halving the rate outside a performance mode, then 60 cycles per tensor access
    (inputs and output) before it completes."""
    op, engine, dtype, f, step, core = shape
    x = (
        np.arange(128 * f)
        .reshape(128, f)
        .astype(np.float32)
        .astype(getattr(ml_dtypes, dtype, dtype))
    )
    kw = {"op": op, "engine": engine, "step": step}
    res = nki.run(load_file(COSTS, "one_op"), (x,), kw, core=core)
    stream = engine or {"activation": "scalar"}.get(op, "vector")
    (rec,) = res.report.records[stream]
    period = res.report.core.clocks[stream].period
    assert ((rec.end - rec.start) // period, (rec.done - rec.end) // period) == SHAPES[shape]
