"""Kernels (docs/kernels.md): NKI kernels traced into streams, run on the goldens and the
whole-core timing model; the shipped examples, the stream format, the rules and the CLI."""

import json
import os

import ml_dtypes
import numpy as np
import pytest

import ncrtl.nki as nki
from ncrtl.cli import main
from ncrtl.kernels import EXAMPLES, load, load_file
from ncrtl.model.fp import encode, fp32_add, from_bits
from ncrtl.model.kernel import golden as kgolden
from ncrtl.model.kernel import timing as ktiming
from ncrtl.model.kernel.stream import Instruction, Program
from ncrtl.model.tensor_engine import isa as te_isa
from ncrtl.model.tensor_engine import matmul_bits
from ncrtl.model.tensor_engine import timing as te_timing
from tests.kernel_lines import kernel_line

HERE = os.path.dirname(__file__)
BAD = os.path.join(HERE, "kernels", "bad.py")
QUICK = [n for n in EXAMPLES if n != "matmul_fully_optimized"]


def _line(tag):
    return kernel_line(BAD, tag)


@pytest.fixture(scope="module")
def runs():
    """Every quick example, run once: (example, inputs, Result)."""
    out = {}
    for name in QUICK:
        e, k = load(name)
        ins = e.inputs(np.random.default_rng(7))
        out[name] = (e, ins, nki.run(k, ins, e.kwargs))
    return out


@pytest.mark.parametrize("name", QUICK)
def test_examples_within_the_float64_bound(runs, name):
    e, ins, res = runs[name]
    for o, r in zip(res.outputs, e.reference(*ins)):
        err = np.abs(np.asarray(o).astype(np.float64) - r)
        assert (err <= e.bound(r, ins)).all(), (name, err.max())


@pytest.mark.parametrize("name", QUICK)
def test_golden_runs_in_any_order_the_semaphores_allow(runs, name):
    """The streams run as far from program order as the waits allow (and in random orders)
    give the same bytes: no dependency is missing a semaphore."""
    e, ins, res = runs[name]
    for order, seed in (("reverse", 0), ("random", 1), ("random", 2)):
        outs, _ = kgolden.run(res.program, ins, order=order, seed=seed)
        for a, b in zip(outs, res.outputs):
            assert a.tobytes() == np.asarray(b).tobytes(), (name, order)


def test_tiled_matmul_is_the_goldens_composed_bit_for_bit(runs):
    """matmul_tiled: per output tile, the Tensor Engine golden of each K tile, accumulated in
    PSUM in FP32 (RNE), rounded once to bf16 by tensor_copy."""
    e, (a, b), res = runs["matmul_tiled"]
    K, M = a.shape
    N = b.shape[1]
    want = np.zeros((M, N), ml_dtypes.bfloat16)
    for m in range(M // 128):
        for n in range(N // 512):
            acc = None
            for k in range(K // 128):
                bits = matmul_bits(
                    a[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128],
                    b[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512],
                )
                v = bits.view(np.float32)
                acc = v if acc is None else fp32_add(acc, v)
            tile = from_bits(encode(acc.astype(np.float64), "bf16"), "bf16")
            want[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512] = tile
    assert res.outputs[0].tobytes() == want.tobytes()


def test_transposes_are_bit_exact_with_nan_payloads():
    """A transpose moves bits: NaN payloads and signed zeros survive both engines."""
    for name in ("transpose_tensor_engine", "transpose_dma"):
        e, k = load(name)
        x = e.inputs(np.random.default_rng(3))[0]
        raw = x.view(np.uint16)
        raw[0, 1], raw[2, 0] = 0x7FC1, 0x8000  # a NaN with a payload, -0.0
        out = nki.simulate(k)(x)
        assert out.view(np.uint16).tobytes() == np.ascontiguousarray(raw.T).tobytes(), name


def test_streams_serialize_and_run_the_same(runs):
    e, ins, res = runs["matmul_tiled"]
    text = res.program.to_json()
    again = Program.from_json(text)
    assert again.to_json() == text
    outs, _ = kgolden.run(again, ins)
    assert outs[0].tobytes() == np.asarray(res.outputs[0]).tobytes()
    assert ktiming.simulate(again).total_ticks == res.report.total_ticks
    dump = again.dump()
    assert "stream tensor (8 instructions)" in dump and "matmul.py:" in dump


def test_a_matmul_only_stream_has_the_cycles_of_ncrtl_timing_matmul():
    """The Tensor Engine of the core model is the Sequencer of ``ncrtl timing matmul``, its
    warm-up throttle included."""
    from ncrtl.model.kernel.stream import CORES

    prog = te_timing.matmul_program(32, 128, 128, "bf16", repeat=40, tile=(32, 128), tiles=4)
    want = te_timing.simulate(prog, throttle=te_timing.throttle_at(2400)).total_cycles
    stream = []
    for i in range(0, len(prog), 2):
        words = [te_isa.encode(prog[i]), te_isa.encode(prog[i + 1])]
        stream.append(Instruction("tensor", "matmul", args={"te": words}, index=i // 2, seq=i))
    program = Program(CORES["v3"], {"tensor": stream}, {}, [], [], "te_only")
    rep = ktiming.simulate(program)
    assert rep.te_cycles == want


def test_fully_optimized_keeps_the_tensor_engine_busy():
    """The fully blocked bf16 matmul: >= 90% of the bf16 peak between its first and last
    matmul (timing model; its values are checked in the slow suite)."""
    e, k = load("matmul_fully_optimized")
    ins = e.inputs(np.random.default_rng(0))
    res = nki.run(k, ins, golden=False)
    assert res.report.utilization(window=True) >= 0.9
    assert res.report.te_dtype == "bf16"


@pytest.mark.slow
def test_fully_optimized_values():
    e, k = load("matmul_fully_optimized")
    ins = e.inputs(np.random.default_rng(0))
    out = nki.simulate(k)(*ins)
    r = e.reference(*ins)[0]
    assert (np.abs(out.astype(np.float64) - r) <= e.bound(r, ins)).all()


def test_basic_matmul_waits_on_its_dma(runs):
    e, ins, res = runs["matmul_basic"]
    ops = [b.ins.op for _, _, b in res.report.longest_waits()]
    assert "dma_copy" in ops[:3]


def test_multi_buffering_from_tile_lifetimes(runs):
    """Tiles allocated inside the loops land in different places until the ring wraps: the
    loads of the second K tile do not wait for the first matmul."""
    e, ins, res = runs["matmul_tiled"]
    loads = [
        i for i in res.program.instructions() if i.op == "dma_copy" and i.srcs[0].space == "hbm"
    ]
    assert len({i.dsts[0].base for i in loads}) == len(loads)
    assert all(not any(w.startswith("tensor") for w, _ in i.waits) for i in loads)


def _bf16(*shape):
    return np.zeros(shape, ml_dtypes.bfloat16)


def test_rule_errors_name_the_kernel_line():
    k = load_file(BAD, "moving_too_wide")
    with pytest.raises(nki.NkiError) as e:
        nki.trace(k, (_bf16(128, 128), _bf16(128, 1024)))
    assert str(e.value).startswith(_line("moving_too_wide") + ": nisa.nc_matmul")
    k = load_file(BAD, "stationary_in_hbm")
    with pytest.raises(nki.NkiError) as e:
        nki.trace(k, (_bf16(128, 128), _bf16(128, 512)))
    assert str(e.value).startswith(_line("stationary_in_hbm") + ": nisa.nc_matmul")
    assert "stationary" in str(e.value) and "SBUF" in str(e.value)


def test_psum_overflow_names_the_live_tensors():
    k = load_file(BAD, "psum_overflow")
    with pytest.raises(nki.NkiError) as e:
        nki.trace(k, (_bf16(128, 128),))
    msg = str(e.value)
    assert "PSUM overflow" in msg and "acc8" in msg and "acc0" in msg and "bad.py" in msg


def test_reading_what_nothing_wrote():
    """An output copied from memory nothing wrote: the run completes (as the hardware's) with
    a warning line naming the copy's line and the output (docs/kernels.md, "Golden run")."""
    k = load_file(BAD, "reads_unwritten")
    for run in (
        lambda: nki.simulate(k)(_bf16(4, 4)),
        lambda: nki.run(k, (_bf16(4, 4),), uninitialized="warn", timing=False),
    ):
        with pytest.warns(kgolden.UninitializedRead) as rec:
            run()
        (msg,) = [str(w.message) for w in rec]
        assert msg.startswith(_line("reads_unwritten")) and "nothing wrote" in msg
        assert "the kernel's output 0" in msg


def test_a_call_not_modelled_is_named():
    k = load_file(BAD, "not_modelled")
    with pytest.raises(nki.NotModelled) as e:
        nki.trace(k, (_bf16(4, 4),))
    assert str(e.value).startswith(
        _line("not_modelled") + ": nki.language.logsumexp is not modelled"
    )


def test_streams_that_cannot_finish_are_reported():
    _, k = load("matmul_basic")
    prog = nki.trace(k, EXAMPLES["matmul_basic"].inputs(np.random.default_rng(0)))
    first = prog.streams["dma0"][0]
    first.waits = (("vector", 1),)  # the load waits for the eviction that waits for it
    with pytest.raises(kgolden.KernelError, match="cannot finish") as ex:
        kgolden.run(prog, EXAMPLES["matmul_basic"].inputs(np.random.default_rng(0)))
    assert "dma0[0] dma_copy" in str(ex.value)
    with pytest.raises(kgolden.KernelError, match="cannot finish"):
        ktiming.simulate(prog)


def test_cli_run_example_writes_outputs_and_report(tmp_path, capsys):
    out = tmp_path / "o"
    assert (
        main(
            [
                "run",
                "--example",
                "matmul_basic",
                "--out",
                str(out),
                "--trace",
                str(tmp_path / "t.json"),
            ]
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert report["instructions"]["tensor"] == 1 and report["total_ns"] > 0
    assert report["reference"]["within_bound"]
    assert np.load(out / "out0.npy").shape == (64, 512)
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"tensor", "vector", "dma0"} <= names
    assert any(e.get("ph") == "s" for e in trace["traceEvents"])  # a semaphore wait arrow
    assert "Tensor Engine: utilization" in capsys.readouterr().out


def test_cli_run_kernel_file_with_args(tmp_path, capsys):
    a = np.random.default_rng(0).standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    b = np.random.default_rng(1).standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    kernel = os.path.join(os.path.dirname(nki.__file__), "..", "kernels", "matmul.py")
    argv = [
        "run",
        f"{kernel}::matmul_basic",
        "--args",
        f"{tmp_path}/a.npy:bfloat16",
        f"{tmp_path}/b.npy:bfloat16",
    ]
    assert main(argv + ["--out", str(tmp_path / "o"), "--dump-streams"]) == 0
    out = np.load(tmp_path / "o" / "out0.npy").view(ml_dtypes.bfloat16)
    assert out.tobytes() == nki.simulate(load("matmul_basic")[1])(a, b).tobytes()
    assert "stream tensor (1 instructions)" in capsys.readouterr().out
    # a bfloat16 file without its dtype, an unknown function, a broken rule: one line, exit 2,
    # nothing written
    bad_out = tmp_path / "never"
    assert (
        main(["run", f"{kernel}::matmul_basic", "--args", f"{tmp_path}/a.npy", f"{tmp_path}/b.npy"])
        == 2
    )
    assert main(["run", f"{kernel}::nope", "--out", str(bad_out)]) == 2
    assert (
        main(
            [
                "run",
                f"{BAD}::moving_too_wide",
                "--args",
                f"{tmp_path}/a.npy:bfloat16",
                f"{tmp_path}/b.npy:bfloat16",
                "--out",
                str(bad_out),
            ]
        )
        == 2
    )
    assert not bad_out.exists()
    err = capsys.readouterr().err
    assert "name their dtype" in err and "no function 'nope'" in err and "bad.py:" in err


def test_two_cores_exchange_with_sendrecv(runs):
    """kernel[2]: the two cores' programs share the device memory; each sendrecv pairs with
    the other core's on its pipe and moves the bytes of the sendrecv golden."""
    e, (x,), res = runs["exchange_halves"]
    assert isinstance(res.program, tuple) and len(res.program) == 2
    assert res.outputs[0].tobytes() == np.concatenate([x[128:], x[:128]]).tobytes()
    assert res.report.summary()["logical_cores"] == 2
    ops = [i.op for i in res.program[1].instructions()]
    assert ops == ["dma_copy", "sendrecv", "dma_copy"]


def test_sendrecv_rules():
    x = np.zeros((64, 32), np.float32)
    k = load_file(BAD, "lonely_pipes")[2]
    prog = nki.trace(k, (x,))
    with pytest.raises(kgolden.KernelError, match="its partner on the other core") as e:
        kgolden.run(prog, (x,))
    assert "core 0: dma1[0] sendrecv" in str(e.value) and "core 1:" in str(e.value)
    with pytest.raises(kgolden.KernelError, match="cannot finish"):
        ktiming.simulate(prog)
    with pytest.raises(nki.NkiError) as e:
        nki.trace(load_file(BAD, "sendrecv_one_core"), (x,))
    assert str(e.value).startswith(_line("one_core") + ": nisa.sendrecv") and "kernel[2]" in str(
        e.value
    )
    with pytest.raises(nki.NkiError) as e:
        nki.trace(load_file(BAD, "sendrecv_to_itself")[2], (x,))
    assert str(e.value).startswith(_line("itself") + ": nisa.sendrecv: RANK")


def test_cli_run_plot(tmp_path):
    png = tmp_path / "p.png"
    assert main(["run", "--example", "transpose_dma", "--plot", str(png), "--timing-only"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_matmul_stays_in_one_psum_bank():
    k = load_file(BAD, "crosses_a_bank")
    with pytest.raises(nki.NkiError) as e:
        nki.trace(k, (_bf16(128, 128), _bf16(128, 512)))
    assert str(e.value).startswith(_line("crosses_a_bank") + ": nisa.nc_matmul")
    assert "cross a 2048-byte PSUM bank" in str(e.value)


def test_dma_timing_against_its_closed_form(runs):
    """transpose_dma: a [256, 128] bf16 transpose into SBUF, then the [128, 256] tile out, one
    after the other (the second reads what the first wrote).  Each moves 128 partitions of
    512 bytes on 16 engines, 8 partitions each, a packet per partition (docs/kernels.md,
    "Costs"): the transpose at 90% of a copy's rate, the copy out at the rate; then each the
    1.3 us latency (NeuronCore-v3: 23 B/ns per engine, a packet the time of 256 bytes)."""
    e, ins, res = runs["transpose_dma"]
    c = ktiming.DMA_COSTS["v3"]
    assert c.transfer_ns(128, 512, rate=0.9) == pytest.approx(8 * (256 + 512 / 0.9) / 23)
    want = c.transfer_ns(128, 512, rate=0.9) + c.transfer_ns(128, 512) + 2 * 1300
    assert res.report.total_ns == pytest.approx(want, abs=2 * res.report.core.ns(1))


def test_tiled_matmul_timing_bounds(runs):
    """matmul_tiled: the Tensor Engine needs at least 8 x 512 cycles for its 8 matmuls, and
    no run is shorter than its DMA bytes over the 16 engines' peak (368 GB/s on v3)."""
    e, ins, res = runs["matmul_tiled"]
    rep = res.report
    lo, hi = rep.te_window
    assert (hi - lo) / rep.core.clocks["tensor"].period >= 8 * 512
    assert rep.total_ns >= rep.dma_bytes / 368
    assert rep.utilization(window=True) == pytest.approx(8 * 512 / ((hi - lo) / 14), rel=1e-9)


def test_box_from_corners_is_the_exact_extent():
    """``Ref.box`` (the dependency box from the pattern's corners, no index arrays) equals the
    box of the formed indices wherever it answers, and answers only for views that keep every
    access rule."""
    import random

    from ncrtl.model.kernel.stream import Ref

    rng = random.Random(0)
    answered = 0
    for _ in range(2000):
        space = rng.choice(["sbuf", "hbm"])
        shape = (rng.randint(1, 8), rng.randint(1, 6), rng.randint(1, 5))
        row = shape[1] * shape[2]
        s0 = row if space == "sbuf" else row * rng.randint(1, 2)
        pat = [
            (s0, rng.randint(1, shape[0])),
            (rng.choice([1, 2, shape[2], -1]), rng.randint(1, 4)),
            (rng.choice([1, 2]), rng.randint(1, 3)),
        ]
        r = Ref(space, "t", 64, shape, "float32", pat, rng.randint(0, shape[0] * row - 1))
        box = r.box()
        if box is None:
            continue
        part, within = np.divmod(r.indices(), row)  # raises if a rule were broken
        want = (int(part.min()), int(part.max()) + 1, 64 + int(within.min()) * 4)
        assert box == want + (64 + (int(within.max()) + 1) * 4,)
        answered += 1
    assert answered > 300


V4 = os.path.join(HERE, "kernels", "v4.py")


def test_v4_matmul_over_several_psum_banks():
    """NeuronCore-v4: an nc_matmul of N = 2048 is one LoadStationary and four MultiplyMoving
    of 512 columns, each into its own PSUM bank: bit for bit the Tensor Engine golden of each
    512-column chunk; back to back on the Tensor Engine; refused on v3."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((128, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 2048)).astype(ml_dtypes.bfloat16)
    res = nki.run(load_file(V4, "wide_fp32"), (a, b))
    want = np.concatenate(
        [matmul_bits(a, b[:, c : c + 512]).view(np.float32) for c in range(0, 2048, 512)], axis=1
    )
    assert res.outputs[0].tobytes() == want.tobytes()
    (mm,) = res.program.streams["tensor"]
    assert len(mm.args["te"]) == 5 and mm.args["chunks"] == [[c, 512] for c in range(0, 2048, 512)]
    assert res.report.macs == 128 * 128 * 2048
    lo, hi = res.report.te_window
    # the first MultiplyMoving starts on the LoadStationary's last (32nd) beat; the four run back
    # to back, at half rate (the warm-up throttle: 4 x 1,024 cycles are under its 3 us)
    assert (hi - lo) // res.report.core.clocks["tensor"].period == 31 + 4 * 2 * 512
    with pytest.raises(nki.NkiError) as e:
        nki.trace(load_file(V4, "wide_on_v3"), (a, b))
    assert "N=2048: at most 512 on NeuronCore-v3 (4096 on v4)" in str(e.value)


def test_v4_bf16_psum_with_stochastic_rounding():
    """``@nki.jit(psum_rounding="sr")``: the BF16 PSUM writes round stochastically: every
    value is one of the two BF16 neighbours of the FP32 result, and not all of them the
    nearest (RNE, the default, is)."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 1024)).astype(ml_dtypes.bfloat16)
    exact = np.concatenate(
        [matmul_bits(a, b[:, c : c + 512]).view(np.float32) for c in (0, 512)], axis=1
    )
    rne = nki.simulate(load_file(V4, "wide_bf16"))(a, b)
    sr = nki.simulate(load_file(V4, "wide_bf16_sr"))(a, b)
    assert rne.tobytes() == exact.astype(ml_dtypes.bfloat16).tobytes()
    # the two BF16 neighbours of each FP32 value: truncated, and one step away from zero
    bits = exact.view(np.uint32)
    toward = (bits >> 16).astype(np.uint16)
    away = toward + ((bits & 0xFFFF) != 0).astype(np.uint16)
    got = sr.view(np.uint16)
    assert ((got == toward) | (got == away)).all()
    assert 0.2 < (sr != rne).mean() < 0.8


def test_cli_run_names_a_missing_argument_and_sets_sr(tmp_path, capsys):
    a = np.zeros((128, 64), ml_dtypes.bfloat16)
    np.save(tmp_path / "a.npy", a)
    assert main(["run", f"{V4}::wide_bf16", "--args", f"{tmp_path}/a.npy:bfloat16"]) == 2
    assert "wide_bf16(a, b) called with 1 argument(s)" in capsys.readouterr().err
    b = np.random.default_rng(0).standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    a = np.random.default_rng(1).standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    args = ["--args", f"{tmp_path}/a.npy:bfloat16", f"{tmp_path}/b.npy:bfloat16"]
    for rounding in ("rne", "sr"):
        out = tmp_path / rounding
        assert (
            main(["run", f"{V4}::wide_bf16", *args, "--psum-rounding", rounding, "--out", str(out)])
            == 0
        )
    rne, sr = (np.load(tmp_path / r / "out0.npy") for r in ("rne", "sr"))
    assert rne.tobytes() == nki.simulate(load_file(V4, "wide_bf16"))(a, b).tobytes()
    assert sr.tobytes() == nki.simulate(load_file(V4, "wide_bf16_sr"))(a, b).tobytes()
    assert rne.tobytes() != sr.tobytes()


@pytest.mark.parametrize("name", ["matmul_basic", "matmul_fp8_double_row", "matmul_mx"])
def test_one_matmul_examples_against_the_tensor_engine_rules(runs, name):
    """A kernel of one matmul: its LoadStationary's 32 beats (4 chains of 32 columns), then
    the 512 moving beats starting on the last of them, at half rate (the engine's warm-up
    throttle): 31 + 2 x 512 Tensor Engine cycles between the matmul's issue and its
    sequencer's release; its MACs those of K x M x N (x2 double row, x4 MX)."""
    e, ins, res = runs[name]
    rep = res.report
    lo, hi = rep.te_window
    assert (hi - lo) // rep.core.clocks["tensor"].period == 31 + 2 * 512
    (mm,) = res.program.streams["tensor"]
    k = {"matmul_basic": 128 * 64, "matmul_fp8_double_row": 128 * 2 * 128}.get(name, 128 * 4 * 128)
    assert rep.macs == k * 512


def test_two_core_exchange_against_its_closed_form(runs):
    """exchange_halves: a load, the sendrecv and a store, one after the other on each core,
    each moving a [128, 64] FP32 tile (128 partitions of 256 bytes on 16 engines, 8 each, a
    packet per partition) and then the 1.3 us latency (docs/kernels.md, "Costs")."""
    e, ins, res = runs["exchange_halves"]
    one = ktiming.DMA_COSTS["v3"].transfer_ns(128, 256) + 1300
    assert res.report.total_ns == pytest.approx(3 * one, abs=3 * res.report.core.ns(1))


def test_accumulate_none_starts_over_after_an_eviction():
    """accumulate=None: the first matmul into a PSUM location overwrites, the next ones
    accumulate, and a read by another engine (the eviction) ends the group: the same tile
    used again starts from its first matmul's values."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    res = nki.run(load_file(BAD, "psum_tile_reused"), (a, b), timing=False)
    once = matmul_bits(a, b).view(np.float32)
    twice = fp32_add(once, once)
    assert res.outputs[0][0].tobytes() == twice.tobytes() == res.outputs[0][1].tobytes()
    flags = [i.args["accumulate"] for i in res.program.streams["tensor"]]
    assert flags == [False, True, False, True]


ENGINES_K = os.path.join(HERE, "kernels", "engines.py")


def _record(res, stream, op):
    return next(r for r in res.report.records[stream] if r.ins.op == op)


def test_vector_engine_performance_mode():
    """NeuronCore-v3's Vector Engine streams a BF16 SBUF -> SBUF copy with contiguous
    elements 4x as fast as an FP32 one (seed 000); on v2 at the same rate."""
    k = load_file(ENGINES_K, "copies")
    spans = {}
    for dtype in (np.float32, ml_dtypes.bfloat16):
        for core in ("v2", "v3"):
            x = np.ones((128, 2048), dtype)
            res = nki.run(k, (x,), core=core)
            r = _record(res, "vector", "tensor_copy")
            period = res.report.core.clocks["vector"].period
            spans[(np.dtype(dtype).name, core)] = (r.end - r.start) // period
    assert spans[("float32", "v3")] == spans[("float32", "v2")] == 2048
    assert spans[("bfloat16", "v3")] == 512 and spans[("bfloat16", "v2")] == 2048


@pytest.mark.parametrize("core", ["v2", "v3"])
def test_vector_and_scalar_share_psum_banks(core):
    """v3: the Vector and Scalar engines read PSUM in parallel unless they meet in one bank
    (seed 000); v2: never in parallel."""
    k = load_file(ENGINES_K, "psum_readers")
    x = np.zeros((1, 1), np.float32)
    overlap = {}
    for same in (True, False):
        res = nki.run(k, (x,), {"same_bank": same}, core=core)
        v = _record(res, "vector", "tensor_copy")
        s = _record(res, "scalar", "activation")
        overlap[same] = v.start < s.end and s.start < v.end
        assert res.outputs[0][0].tobytes() == np.ones((128, 512), np.float32).tobytes()
    assert overlap == {True: False, False: core == "v3"}


SPARSE_K = os.path.join(HERE, "kernels", "sparse.py")
SPARSE = "mm_sparse_128_512_cr4"


def _sparse_ins(rng, k=8, ratio=2, m=8, n=16):
    from ncrtl.kernels import _sparse_inputs

    moving, values, tag = _sparse_inputs(rng, k, n, ratio)
    return moving, values[:, :m], tag[:, : -(-m // 4)]


def test_sparse_example_is_the_sparse_golden(runs):
    """mm_sparse_128_512_cr4 (seed 000): the result is the sparse golden's bit for bit, the
    dense product of the decompressed weight within the FP32 bound; the Tensor Engine stream
    carries the LoadStationary and MultiplyMoving of ``sparse_instructions``, the moving
    operand read whole: R elements of every partition per beat."""
    from ncrtl.model.tensor_engine import decompress, matmul_sparse
    from ncrtl.model.tensor_engine.sparse import sparse_instructions

    e, (moving, values, tag), res = runs[SPARSE]
    out = res.outputs[0]
    assert out.tobytes() == matmul_sparse(moving, values, tag, 4).tobytes()
    dense = decompress(values, tag, 4).astype(np.float64).T @ moving.astype(np.float64).reshape(
        512, 512
    )
    assert (np.abs(out - dense) <= e.bound(dense, (moving, values, tag))).all()
    (ins,) = res.program.streams["tensor"]
    assert ins.op == "matmul_sparse" and ins.call == "nisa.nc_matmul_sparse"
    want = sparse_instructions(moving, values, tag, 4)
    assert [te_isa.decode(w) for w in ins.args["te"]] == list(want)
    stat, mov, tg = ins.srcs
    assert mov.view_shape == (128, 4, 512) and mov.size == 128 * 4 * 512
    assert tg.view_dtype == "uint16" and tg.view_shape == (128, 32)


def test_sparse_matmul_takes_r_times_fewer_tensor_engine_cycles(runs):
    """The 4:16 matmul over 512 logical rows is one MultiplyMoving of 128 compressed rows: its
    LoadStationary's 32 beats and 512 moving beats at half rate (the warm-up throttle),
    31 + 2 x 512 cycles from issue to release; matmul_tiled on the decompressed weight (the
    same logical K = 512, four dense matmuls, as throttled) keeps the Tensor Engine about 4
    times as long.  The MACs counted are the dense ones."""
    e, ins, res = runs[SPARSE]
    sparse = res.report.summary()
    assert sparse["te_matmul_window_cycles"] == 31 + 2 * 512
    assert sparse["te_dtype"] == "bf16 4:16" and res.report.macs == 128 * 4 * 128 * 512
    from ncrtl.kernels import _sparse_dense

    w, x = (a.astype(ml_dtypes.bfloat16) for a in _sparse_dense(ins))
    dense = nki.run(load("matmul_tiled")[1], (w, x), golden=False).report.summary()
    assert dense["instructions"]["tensor"] == 4
    ratio = dense["te_matmul_window_cycles"] / sparse["te_matmul_window_cycles"]
    assert 0.9 * 4 <= ratio <= 4, ratio


def test_sparse_matmul_into_dst_accumulates():
    """The ``dst=`` form: two sparse matmuls into one PSUM tile, the second accumulating (as
    ``nc_matmul``'s ``accumulate=None``)."""
    from ncrtl.model.tensor_engine import matmul_sparse

    ins = _sparse_ins(np.random.default_rng(4))
    res = nki.run(load_file(SPARSE_K, "sparse_into_dst"), ins, timing=False)
    once = matmul_sparse(*ins, 2)
    assert res.outputs[0].tobytes() == fp32_add(once, once).tobytes()
    assert [i.args["accumulate"] for i in res.program.streams["tensor"]] == [False, True]


def test_sparse_bad_input_is_one_error_naming_the_line_and_rule(tmp_path, capsys):
    """A tag tensor of the wrong dtype or shape, a ratio of 5, a moving not [K, R, N]: one
    line from the front end naming the kernel's line, the call and the golden's rule; bad tag
    values when the stream runs; a v2 core; and the same through ``ncrtl run``."""
    k = load_file(SPARSE_K, "sparse_any")
    moving, values, tag = _sparse_ins(np.random.default_rng(5))
    where = kernel_line(SPARSE_K, "sparse") + ": nisa.nc_matmul_sparse: "
    cases = [
        (
            (moving, values, tag.astype(np.int16)),
            {"compress_ratio": 2},
            "tag must be uint16 [8, 2]",
        ),
        ((moving, values, tag[:, :1]), {"compress_ratio": 2}, "got uint16 [8, 1]"),
        ((moving, values, tag), {"compress_ratio": 5}, "SPARSE: compress_ratio 5 is not one"),
        (
            (moving.reshape(8, 32), values, tag),
            {"compress_ratio": 2},
            "moving [K, compress_ratio=2",
        ),
    ]
    for args, kw, rule in cases:
        with pytest.raises(nki.NkiError) as e:
            nki.trace(k, args, kw)
        msg = str(e.value)
        assert msg.startswith(where) and rule in msg and "\n" not in msg, msg
    bad = tag.copy()
    bad[0, 0] = (bad[0, 0] & ~np.uint16(0xF)) | 0x3  # element 3 of a partition: not below R = 2
    with pytest.raises(kgolden.KernelError) as e:
        nki.run(k, (moving, values, bad), {"compress_ratio": 2}, timing=False)
    assert str(e.value).startswith(kernel_line(SPARSE_K, "sparse")) and "TAG: tag[0, 0]" in str(
        e.value
    )
    with pytest.raises(nki.NkiError, match="NeuronCore-v3 or later"):
        nki.trace(k, (moving, values, tag), {"compress_ratio": 2}, core="v2")
    for name, a in (("m", moving), ("s", values), ("t", tag)):
        np.save(tmp_path / f"{name}.npy", a)
    argv = ["run", f"{SPARSE_K}::sparse_any", "--args"]
    argv += [f"{tmp_path}/m.npy:bfloat16", f"{tmp_path}/s.npy:bfloat16", f"{tmp_path}/t.npy"]
    assert main([*argv, "--kwarg", "compress_ratio=5", "--out", str(tmp_path / "never")]) == 2
    assert not (tmp_path / "never").exists()
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ncrtl: error: {where}") and "SPARSE" in err and "\n" not in err


def test_cli_runs_the_sparse_kernel_file(tmp_path, capsys):
    """``ncrtl run more.py::mm_sparse_128_512_cr4 --args``: the golden's values and the
    report, as for any kernel."""
    from ncrtl.model.tensor_engine import matmul_sparse

    ins = _sparse_ins(np.random.default_rng(6), k=16, ratio=4, m=16, n=64)
    for name, a in zip("mst", ins):
        np.save(tmp_path / f"{name}.npy", a)
    kernel = os.path.join(os.path.dirname(nki.__file__), "..", "kernels", "more.py")
    argv = ["run", f"{kernel}::{SPARSE}", "--args", f"{tmp_path}/m.npy:bfloat16"]
    argv += [f"{tmp_path}/s.npy:bfloat16", f"{tmp_path}/t.npy", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    out = np.load(tmp_path / "o" / "out0.npy")
    assert out.tobytes() == matmul_sparse(*ins, 4).tobytes()
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["instructions"]["tensor"] == 1 and report["te_dtype"] == "bf16 4:16"
    assert "bf16 4:16" in capsys.readouterr().out


def test_rtl_core_refuses_a_sparse_matmul_before_building(tmp_path, capsys, monkeypatch):
    """``ncrtl run --rtl``: the RTL core has no sparse matmul; the kernel is refused when its
    streams are encoded, naming the instruction and its line, before anything is built."""
    import ncrtl.testbench.neuroncore.run as rtl_run

    def no_build(*a, **k):
        raise AssertionError("the RTL core was built")

    monkeypatch.setattr(rtl_run, "run_rtl", no_build)
    out = tmp_path / "o"
    argv = ["run", "--example", SPARSE, "--rtl", "--partitions", "8", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "more.py:" in err and "nisa.nc_matmul_sparse" in err and "matmul_sparse" in err
    assert "the RTL NeuronCore has no matmul_sparse" in err and not out.exists()


RETURNS = """
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def returns(a, how):
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    if how == "reshape":
        return out.reshape((64, 128))
    if how == "slice":
        return out[3:7, 10:20]
    if how == "view":
        return out.view(nl.int32)
    return out
"""


@pytest.mark.parametrize("how", ["whole", "reshape", "slice", "view"])
def test_a_kernel_returns_what_its_view_holds(how, tmp_path, capsys):
    """A returned view of an output tensor (a reshape, a slice, a reinterpretation) comes back
    as that view's elements in its shape and dtype, from a call and from ``ncrtl run --out``."""
    path = tmp_path / "returns.py"
    path.write_text(RETURNS)
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    want = {"whole": a, "reshape": a.reshape(64, 128), "slice": a[3:7, 10:20]}
    want["view"] = a.view(np.int32)
    got = load_file(str(path), "returns")(a, how)
    assert got.shape == want[how].shape and got.dtype == want[how].dtype
    assert np.array_equal(got, want[how])
    np.save(tmp_path / "a.npy", a)
    argv = ["run", f"{path}::returns", "--args", str(tmp_path / "a.npy"), "--kwarg", f"how={how}"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0
    assert np.array_equal(np.load(tmp_path / "o" / "out0.npy"), want[how])
    capsys.readouterr()


def test_nkiobject_subclasses_build_from_keywords():
    """``nl.NKIObject``, the base of a kernel's own classes: built with keywords (each an
    attribute); a field a subclass annotates without a default is None, under ``@dataclass``
    too, so a class built with only the fields one path uses works (as nki-library's do)."""
    from dataclasses import dataclass

    from ncrtl.nki import language as nl

    class Plain(nl.NKIObject):
        a = None
        b: int

    p = Plain(a=1, b=2)
    assert (p.a, p.b) == (1, 2) and Plain().b is None

    @dataclass
    class Sizes(nl.NKIObject):
        m: int
        n: int
        k: int = 4

    s = Sizes(m=3)
    assert (s.m, s.n, s.k) == (3, None, 4)
    assert Sizes(1, 2, 3) == Sizes(m=1, n=2, k=3)

    @dataclass
    class Section(nl.NKIObject):  # plain class attributes, no annotations
        index = None
        offset = 0
        LIMIT = 8

        def size(self):
            return self.offset + 1

    t = Section(index=2, offset=5)
    assert (t.index, t.offset, t.LIMIT, t.size()) == (2, 5, 8, 6)
    assert Section().offset == 0


SUBKERNEL = """
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def doubled(t):
    u = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=u, data1=t, data2=t, op=nl.add)
    return u


@nki.jit
def caller(a):
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    u = doubled(t)
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=u)
    return out
"""


def test_a_kernel_called_by_a_kernel_is_inlined(tmp_path):
    """An ``@nki.jit`` kernel called while another is traced runs as a function of it: its
    instructions join the caller's streams and it may return an SBUF tile."""
    path = tmp_path / "sub.py"
    path.write_text(SUBKERNEL)
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    res = nki.run(load_file(str(path), "caller"), (a,), {})
    assert np.array_equal(res.outputs[0], 2 * a)
    assert res.program.counts()["vector"] == 1


def test_a_kernel_file_of_a_package_imports_its_siblings(tmp_path, capsys):
    """``ncrtl run pkg/sub/kern.py::k``: a kernel file inside a package (its folders hold
    ``__init__.py``) resolves its relative imports in that package, as the package's own
    import would (nki-library's kernels import their helpers so)."""
    sub = tmp_path / "mylib" / "ops"
    sub.mkdir(parents=True)
    (tmp_path / "mylib" / "__init__.py").write_text("")
    (sub / "__init__.py").write_text("")
    (sub / "helpers.py").write_text("SCALE = 3.0\n")
    (tmp_path / "mylib" / "consts.py").write_text("ROWS = 128\n")
    (sub / "kern.py").write_text(
        "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
        "from .helpers import SCALE\nfrom ..consts import ROWS\n\n\n"
        "@nki.jit\ndef k(a):\n"
        "    t = nl.ndarray((ROWS, 4), nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=a)\n"
        "    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=SCALE)\n"
        "    out = nl.ndarray((ROWS, 4), nl.float32, buffer=nl.shared_hbm)\n"
        "    nisa.dma_copy(dst=out, src=t)\n"
        "    return out\n"
    )
    a = np.ones((128, 4), np.float32)
    np.save(tmp_path / "a.npy", a)
    out = tmp_path / "o"
    assert (
        main(["run", f"{sub / 'kern.py'}::k", "--args", str(tmp_path / "a.npy"), "--out", str(out)])
        == 0
    )
    assert np.array_equal(np.load(out / "out0.npy"), 3 * a)
    capsys.readouterr()


def test_memory_region_and_nki_tensor_names():
    """``nl.MemoryRegion``'s members are ``buffer=`` values equal to the buffer constants;
    ``nl.NkiTensor`` is the class of a kernel's tensors."""
    from ncrtl.nki import language as nl

    seen = {}

    @nki.jit
    def copy(a):
        seen["tensor"] = isinstance(a, nl.NkiTensor)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.MemoryRegion.sbuf)
        nisa_ = nki.isa
        nisa_.dma_copy(dst=t, src=a)
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.MemoryRegion.shared_hbm)
        nisa_.dma_copy(dst=out, src=t)
        return out

    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert np.array_equal(copy(a), a) and seen["tensor"]
    assert nl.MemoryRegion.psum == nl.psum and nl.MemoryRegion.sbuf == nl.sbuf
