"""The documented engine costs of the kernel timing model (docs/kernels.md, "Costs"), each
rule against its closed form."""

import os

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.kernels import load_file
from ncrtl.model.kernel import timing as ktiming

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
    costs: matmul_basic on the small core keeps its 1,916 cycles (docs/kernels.md)."""
    from ncrtl import blocks
    from ncrtl.model.neuroncore.timing import rtl_params
    from ncrtl.testbench.neuroncore import jobs
    from ncrtl.testbench.neuroncore.run import model_at_rtl

    small = blocks.neuroncore_geometry(
        blocks.get("neuroncore").resolve(blocks.GROUPS["neuroncore"][0][1])
    )
    assert rtl_params(small, 8).dma_costs is None
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
