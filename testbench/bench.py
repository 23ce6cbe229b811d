"""``ncrtl bench``: measured figures for generation, build, simulation and the golden model.

Every figure printed here is measured on this machine by this command; tests never time
anything.  Builds are done in a fresh temporary build directory so the cache cannot hide their
cost; peak memory is the largest resident set of the build's child processes.
"""

import contextlib
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from ncrtl import blocks
from ncrtl.model.modes import get_mode
from ncrtl.testbench.conformance import streaming_rate

__all__ = ["run_bench", "BENCH_CONFIGS"]

#: (block, params) measured by default: one of each kind of FP unit.
BENCH_CONFIGS = [
    ("fp.dot_add", {"mode": "bf16"}),
    ("fp.dot_add", {"mode": "fp32"}),
    ("fp.dot_add", {"mode": "double_row"}),
    ("fp.dot_add", {"mode": "mx"}),
    ("fp.add", {}),
    ("fp.bf16", {}),
]


def _children_maxrss_mib():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


@contextlib.contextmanager
def _fresh_build_dir():
    """A new, empty ``NCRTL_BUILD_DIR`` (so every build is measured from scratch), restored on
    exit: ``bench/fresh-*`` beside the build cache.  On exit the builds are removed but their
    ``build.log`` files stay, so that the paths the builds printed (a warning, a failure) still
    lead to their logs."""
    from ncrtl.testbench import sim

    old = os.environ.get("NCRTL_BUILD_DIR")
    parent = sim.build_root().parent / "bench"
    parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="fresh-", dir=parent)
    os.environ["NCRTL_BUILD_DIR"] = tmp
    try:
        yield tmp
    finally:
        if old is None:
            os.environ.pop("NCRTL_BUILD_DIR", None)
        else:
            os.environ["NCRTL_BUILD_DIR"] = old
        _keep_logs(Path(tmp))


def _keep_logs(root):
    """Remove everything under ``root`` but the build logs (``*/build.log``)."""
    for path in sorted(root.rglob("*"), key=lambda q: len(q.parts), reverse=True):
        if path.name == "build.log" and path.parent.parent == root:
            continue
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.rmdir()  # only once empty: a build folder with its log stays
        else:
            with contextlib.suppress(OSError):
                path.unlink()


def _generate_and_build(block, params):
    """``(text, generation s, Build, peak build MiB)`` of a fresh build of ``block``."""
    from ncrtl.testbench import sim

    t0 = time.perf_counter()
    text, top = block.verilog(params)
    gen = time.perf_counter() - t0
    rss0 = _children_maxrss_mib()
    built = sim.build(text, top, extra_args=block.build_args(params), progress=True)
    return text, gen, built, max(_children_maxrss_mib(), rss0)


def _golden_rate(mode, n=200_000):
    """Golden fused dot-add operations per second for a PE mode."""
    from ncrtl.model.fp import fp32_dot_add, from_bits
    from ncrtl.testbench.fp.vectors import random_codes

    pe_mode = get_mode(mode)
    fa, fb, k, scale = pe_mode.formats_s, pe_mode.formats_m, pe_mode.products, pe_mode.scale
    rng = np.random.default_rng(0)
    a = random_codes(rng, fa[0], n * k).reshape(n, k)
    b = random_codes(rng, fb[0], n * k).reshape(n, k)
    psum = random_codes(rng, "fp32", n).view(np.float32)
    se = rng.integers(-20, 20, n) if scale else None
    t0 = time.perf_counter()
    fp32_dot_add(
        psum, from_bits(a, fa[0]), from_bits(b, fb[0]), a_format=fa[0], b_format=fb[0], scale_exp=se
    )
    return n / (time.perf_counter() - t0)


def run_bench(args):
    only = getattr(args, "only", None)
    ok = True
    if only in (None, "pe"):
        for family in _families(getattr(args, "pe_modes", "all")):
            ok &= _bench_pe(getattr(args, "pe_cycles", 20000), pe_modes=family)
    if only in (None, "fp"):
        ok &= _bench_fp(args)
    if only in (None, "golden", "kernel"):
        ok &= _bench_golden()
    if only in (None, "kernel"):
        ok &= _bench_kernel()
    if only in (None, "harness") and getattr(args, "harness_size", 16):
        ok &= _bench_harness(args.harness_size, getattr(args, "harness_repeat", 40))
    if only in (None, "te") and args.te_size:
        for family in _families(getattr(args, "pe_modes", "all")):
            ok &= _bench_tensor_engine(args.te_size, family, pgo=getattr(args, "pgo", False))
    if only == "bands":
        for family in _families(getattr(args, "pe_modes", "all")):
            ok &= _bench_bands(
                args.te_size,
                getattr(args, "bands", 4),
                family,
                _thread_counts(getattr(args, "band_threads", None)),
            )
    if only in (None, "dma-curve"):
        ok &= _bench_dma_curve()
    if only in (None, "dma"):
        ok &= _bench_dma(getattr(args, "dma_partitions", 16))
        ok &= _bench_dma_qos()
        ok &= _bench_dma_core()
    psum = getattr(args, "psum_partitions", 0)
    if only in (None, "psum") and psum:
        ok &= _bench_psum(psum, getattr(args, "psum_count", 1000))
    if only in (None, "neuroncore"):
        ok &= _bench_neuroncore(getattr(args, "nc_size", 8))
    if only == "regress":
        ok &= _bench_regress()
    if only == "defaults":
        ok &= _bench_defaults(args.te_size or 128, getattr(args, "te_repeat", 1))
    return 0 if ok else 1


#: The runs of ``ncrtl bench --only defaults``: (what, pe_modes, bands: None for the default).
DEFAULT_RUNS = (
    ("the earlier default: all modes, one model (cocotb, stream players)", "all", 1),
    ("bf16 program, default: the bf16 family on column bands", None, None),
    ("all-mode program, default: all modes on column bands", "all", None),
)


def _bench_defaults(size=128, repeat=1):
    """``ncrtl sim matmul``'s defaults at ``size x size``: ``repeat`` bf16 K = M = ``size``, N =
    512 matmuls back to back on the engine ``ncrtl sim matmul`` builds by default for a bf16
    program (the narrowest PE family, column bands on the machine's cores) and for a program of
    every mode (the all-mode PE on bands), against the earlier default (the all-mode PE, one
    model stepped by the cocotb testbench with its stream players), in one run: each build (or
    the cached build), then a run on the cached build, streaming and end-to-end cycles/s."""
    from ncrtl.testbench.conformance import print_time_split
    from ncrtl.testbench.tensor_engine.loop_run import available_cores
    from ncrtl.testbench.tensor_engine.simulate import engine_build, run_matmul

    print(
        f"\nncrtl sim matmul's defaults: {size} x {size} engine, {repeat} bf16 matmul(s) K = M = "
        f"{size}, N = 512, {available_cores()} cores"
    )
    ok, rates = True, {}
    for what, spec, bands in DEFAULT_RUNS:
        shape = dict(rows=size, cols=size, dtype="bf16", k=size, m=size, n=512, seed=1)
        rss0 = _children_maxrss_mib()
        t0 = time.perf_counter()
        first, _ = run_matmul(**shape, pe_modes=spec, bands=bands, repeat=repeat)
        first_s = time.perf_counter() - t0
        res, _ = run_matmul(**shape, pe_modes=spec, bands=bands, repeat=repeat, progress=False)
        if not (first.passed and res.passed):
            print(f"  {what}: FAILED: {(res if first.passed else first).message}")
            ok = False
            continue
        built = first.steps
        build = (
            "cached"
            if built.get("cached")
            else f"built in {built.get('generate', 0) + built.get('build', 0):.0f} s"
        )
        params = engine_build(size, size, "bf16", pe_modes=spec)[1]
        stream, end = streaming_rate(res), res.cycles / res.seconds
        rates[what] = stream
        how = f"{res.steps['bands']} bands" if res.steps.get("bands") else "one model"
        print(f"  {what} (pe_modes={params['pe_modes']}, {how}):")
        print(
            f"    build {build} (first run {first_s:.0f} s, peak build process "
            f"{max(_children_maxrss_mib(), rss0):.0f} MiB so far)"
        )
        print(
            f"    streaming {stream:.1f} cycles/s, end to end {end:.1f} cycles/s = "
            f"{end / stream:.2f} x streaming ({res.cycles} cycles in {res.seconds:.2f} s; "
            f"target >= 0.8)"
        )
        print_time_split(res)
    base = rates.get(DEFAULT_RUNS[0][0])
    for (what, _, _), target in zip(DEFAULT_RUNS[1:], (1000.0, 200.0)):
        if base and what in rates:
            print(
                f"  {what.split(',')[0]}: {rates[what]:.1f} cycles/s streaming = "
                f"{rates[what] / base:.2f} x the earlier default (target >= {target:.0f} "
                f"cycles/s: {'met' if rates[what] >= target else 'NOT met'})"
            )
    return ok


def _bench_regress(tasks=16, workers=(1, 2)):
    """``ncrtl regress`` on a local Dask cluster: ``tasks`` timing what-ifs (each an ``ncrtl
    timing matmul`` process, about a second) and two fp.add conformance runs of one design,
    on 1 and on 2 worker processes: tasks per second (cluster start excluded) and the
    speed-up.  The build is made before the first measurement (both runs find it)."""
    from ncrtl.testbench import regress

    plan = {
        "timing": [{"args": [f"--k 128 --n 512 --repeat {64 + i}" for i in range(tasks)]}],
        "conformance": [{"block": "fp.add", "count": 2000, "seed": [1, 2]}],
    }
    todo = regress.expand(regress.parse_plan(plan))
    print(f"regress: {len(todo)} tasks ({tasks} timing what-ifs, 2 fp.add conformance runs)")
    regress.run_task(todo[-1])  # the fp.add build, outside the measurement
    rates = {}
    ok = True
    for n in workers:
        t0 = time.perf_counter()
        client, cluster = regress.start_client(workers=n)
        started = time.perf_counter() - t0
        try:
            t1 = time.perf_counter()
            results = regress.run_plan(todo, client, progress=False)
            wall = time.perf_counter() - t1
        finally:
            client.close()
            cluster.close()
        passed = sum(r.status == "pass" for r in results)
        ok &= passed == len(todo)
        rates[n] = len(todo) / wall
        print(
            f"  {n} worker(s): {len(todo)} tasks in {wall:.1f} s = {rates[n]:.2f} tasks/s "
            f"({passed} passed; cluster start {started:.1f} s)"
        )
    if len(rates) > 1:
        lo, hi = min(rates), max(rates)
        print(f"  speed-up {lo} -> {hi} workers: {rates[hi] / rates[lo]:.2f}x")
    return ok


def _bench_neuroncore(size):
    """The RTL NeuronCore at ``size`` partitions (8: the ``neuroncore`` group's small core; 128:
    the real core's geometry with bf16-family PEs), built from scratch: Verilog generation,
    Verilator build and the peak of the processes it started, then the shipped example
    matmul_tiled at that geometry (``ncrtl run --example matmul_tiled --rtl``): its cycles,
    the simulation's cycles per second end to end (the simulator process, start to exit), and
    the timing model's cycles at the RTL's clock and DMA figures."""
    from ncrtl.testbench.neuroncore import jobs
    from ncrtl.testbench.neuroncore.run import (
        LATENCY,
        block_params,
        completions,
        model_at_rtl,
        run_rtl,
    )

    block = blocks.get("neuroncore")
    if size == 8:
        params = block.resolve(blocks.GROUPS["neuroncore"][0][1])
    else:
        params = block.resolve({"pe_modes": "bf16"})
    geo = blocks.neuroncore_geometry(params)
    job = jobs.example_job("matmul_tiled", geo, np.random.default_rng(0))
    print(f"\nneuroncore {block.label(block_params(geo, params['pe_modes']))}:")
    print(f"  matmul_tiled {[list(a.shape) for a in job.inputs]} (from scratch: a fresh build)")
    rss0 = _children_maxrss_mib()
    with _fresh_build_dir():
        try:
            res = run_rtl(job.program, job.inputs, geo, pe_modes=params["pe_modes"], progress=True)
        except RuntimeError as e:
            print(f"  run FAILED: {e}")
            return False
    peak = max(_children_maxrss_mib(), rss0)
    st = res.steps
    print(
        f"  Verilog generation {st['generate']:.1f} s, Verilator build {st['build']:.1f} s, "
        f"peak child process (build or simulation) {peak:.0f} MiB"
    )
    report = model_at_rtl(job.program, geo, LATENCY)
    model = round(report.total_ns)
    print(
        f"  {res.cycles:,} cycles in {st['simulate']:.1f} s: {res.cycles / st['simulate']:.1f} "
        f"cycles/s end to end (simulator start to exit); timing model at the RTL's figures "
        f"{model:,} cycles ({res.cycles / model:.3f}x)"
    )
    # Where the two differ: per stream, each instruction's completion, RTL minus model.
    print("  per stream, completion cycles RTL - model: first, largest, last (instruction index)")
    for name, pairs in completions(res.done, report).items():
        if not pairs:
            continue
        diffs = [a - b for a, b in pairs]
        big = max(range(len(diffs)), key=lambda i: abs(diffs[i]))
        print(
            f"    {name:8s} {len(pairs):3d} instructions: {diffs[0]:+d} (0), {diffs[big]:+d} "
            f"({big}), {diffs[-1]:+d} ({len(diffs) - 1})"
        )
    return True


#: ``ncrtl bench --only kernel``: the shipped ``matmul_tiled`` at M x N = 4096 x 8192 bf16 and
#: these K (7,168, 25,600 and 99,328 instructions; 8192 is the NKI tutorial's size).
KERNEL_SIZES = (512, 2048, 8192)
#: The phases of ``ncrtl run`` the kernel bench times, in the order the command runs them.
RUN_PHASES = (
    "inputs",
    "tracing",
    "placement",
    "semaphores",
    "golden",
    "timing",
    "report",
    "trace",
)


def _kernel_command_child(argv):
    """:func:`ncrtl.cli.bench.kernel_command` (the command line's layer: it times ``ncrtl
    run``'s own entry point) in a fresh interpreter; adds ``"wall"``, the child's whole time
    (start-up, imports and exit included)."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys; from ncrtl.cli.bench import kernel_command; "
        "print(json.dumps(kernel_command(sys.argv[1:])))"
    )
    env = {**os.environ, "NCRTL_NO_PROGRESS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"ncrtl run {' '.join(argv)} failed:\n{proc.stderr}")
    return {**json.loads(proc.stdout.splitlines()[-1]), "wall": wall}


def _kernel_traced_memory(kernel, k):
    """``(instructions, peak bytes)``: Python's allocations (tracemalloc) while ``kernel`` at
    M x N x K = 4096 x 8192 x ``k`` is traced and timed and its report made, its inputs
    apart."""
    import tracemalloc

    import ml_dtypes

    from ncrtl import kernels, nki
    from ncrtl.model.kernel import timing as ktiming

    path, _, name = kernel.partition("::")
    fn = kernels.load_file(path, name)
    args = [np.zeros((k, 4096), ml_dtypes.bfloat16), np.zeros((k, 8192), ml_dtypes.bfloat16)]
    tracemalloc.start()
    try:
        program = nki.trace(fn, args)
        ktiming.simulate(program).summary()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return sum(program.counts().values()), peak


def _bench_kernel(repeat=50_000):
    """``ncrtl run`` as a user calls it, each phase timed (:func:`kernel_command`, a fresh
    interpreter per run): the shipped ``matmul_tiled`` at M x N = 4096 x 8192 and three K
    (:data:`KERNEL_SIZES`) with ``--timing-only``, its Perfetto trace and report.json written,
    then with golden values at 256 x 512 x 2048; then the timing model alone on a Tensor Engine
    stream of ``repeat`` matmuls (its cycles equal to ``ncrtl timing matmul``'s)."""
    import tracemalloc

    from ncrtl.kernels import HERE
    from ncrtl.model.kernel import timing as ktiming
    from ncrtl.model.kernel.stream import CORES, Instruction, Program
    from ncrtl.model.tensor_engine import isa as te_isa
    from ncrtl.model.tensor_engine import timing as te_timing

    kernel = os.path.join(HERE, "matmul.py") + "::matmul_tiled"
    print("\nncrtl run, the whole command (ncrtl.cli.main; a fresh interpreter per run), one core")
    head = "".join(f"{p:>11s}" for p in RUN_PHASES if p != "golden")
    print(
        f"  matmul_tiled M x N x K = 4096 x 8192 x K, bf16, --timing-only --trace --out; seconds:"
        f"\n  {'K':>5s}{'instr.':>9s}{'start-up':>10s}{head}{'command':>9s}{'instr./s':>10s}"
        f"{'B/instr.':>9s}"
    )
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for k in KERNEL_SIZES:
            argv = [
                kernel,
                "--shapes",
                f"{k}x4096:bfloat16",
                f"{k}x8192:bfloat16",
                "--timing-only",
                "--trace",
                os.path.join(tmp, "t.json"),
                "--out",
                os.path.join(tmp, "out"),
            ]
            r = _kernel_command_child(argv)
            ok &= r["rc"] == 0
            n, ph = r["instructions"], r["phases"]
            model = r["seconds"] - ph["inputs"]
            cols = "".join(f"{ph[p]:11.2f}" for p in RUN_PHASES if p != "golden")
            per = f"{r['bytes'] / n:9,.0f}" if r["bytes"] is not None else f"{'-':>9s}"
            print(
                f"  {k:5d}{n:9,d}{r['wall'] - r['seconds']:10.2f}{cols}{r['seconds']:9.2f}"
                f"{n / model:10,.0f}{per}"
            )
        print(
            "  (instr./s: instructions over the command's seconds less its inputs; B/instr.: the "
            "peak resident set\n  above the one when tracing began, per instruction)"
        )
        n, peak = _kernel_traced_memory(kernel, KERNEL_SIZES[0])
        print(
            f"  K = {KERNEL_SIZES[0]} without --trace, by tracemalloc: {peak / n:,.0f} bytes per "
            f"instruction at the peak of the trace and timing run (the report's figures included)"
        )
        argv = [
            kernel,
            "--shapes",
            "2048x256:bfloat16",
            "2048x512:bfloat16",
            "--out",
            os.path.join(tmp, "out"),
        ]
        r = _kernel_command_child(argv)
        ok &= r["rc"] == 0
        ph = r["phases"]
        mm = 256 // 128 * 512 // 512 * 2048 // 128
        print(
            f"  with golden values, matmul_tiled 256 x 512 x 2048 ({r['instructions']} "
            f"instructions, {mm} bf16 128 x 128 x 512 matmuls): golden run {ph['golden']:.2f} s, "
            f"{ph['golden'] / mm * 1000:.1f} ms per matmul; the command {r['seconds']:.2f} s"
        )

    print("\nwhole-core timing model (ncrtl.model.kernel.timing) alone, one core")
    prog = te_timing.matmul_program(128, 128, 512, "bf16", repeat=repeat)
    words = [te_isa.encode(prog[0]), te_isa.encode(prog[1])]
    stream = [
        Instruction("tensor", "matmul", args={"te": words}, index=i, seq=i) for i in range(repeat)
    ]
    program = Program(CORES["v3"], {"tensor": stream}, {}, [], [], "te_only")
    t0 = time.perf_counter()
    rep = ktiming.simulate(program)
    dt = time.perf_counter() - t0
    # the memory on a tenth of the stream (tracemalloc slows Python several times over)
    small = Program(CORES["v3"], {"tensor": stream[: repeat // 10]}, {}, [], [], "te_only")
    tracemalloc.start()
    ktiming.simulate(small)
    peak = tracemalloc.get_traced_memory()[1] * 10
    tracemalloc.stop()
    # ncrtl timing matmul's rules, the warm-up throttle the kernel model applies on v3 with them
    throttle = ktiming.Params().throttle_for(CORES["v3"])
    want = te_timing.simulate(prog, throttle=throttle).total_cycles
    ok &= rep.te_cycles == want
    print(
        f"  {repeat:,} matmuls (bf16 128 x 128 x 512) alone: {repeat / dt:,.0f} instructions/s, "
        f"{peak / repeat:,.0f} bytes per instruction at the peak; {rep.te_cycles:,} cycles "
        f"({'equal to' if rep.te_cycles == want else 'DIFFERENT from'} ncrtl timing matmul's "
        f"{want:,})"
    )
    return ok


def _bench_golden(k=128, m=128, n=512, runs=3):
    """Seconds of one bit-exact golden ``nc_matmul`` (``ncrtl.model.tensor_engine.matmul``) of
    ``K x M x N`` per mode on random normal operands, the best of ``runs``, against the
    general road (``fp32_dot_add`` one row at a time) that every mode took before."""
    import ml_dtypes

    from ncrtl.model.fp import fp32_dot_add
    from ncrtl.model.tensor_engine.matmul import matmul

    rng = np.random.default_rng(1)
    print(f"\ngolden nc_matmul, K={k} M={m} N={n}, one core (best of {runs})")
    print(f"{'mode':>12s}{'seconds':>10s}{'fp32_dot_add':>14s}{'speed-up':>10s}")
    modes = (
        ("fp32", np.float32, 1, {}),
        ("tf32", np.float32, 1, {"stationary_format": "tf32", "moving_format": "tf32"}),
        ("bf16", ml_dtypes.bfloat16, 1, {}),
        ("fp16", np.float16, 1, {}),
        ("fp8_e4m3", ml_dtypes.float8_e4m3, 1, {}),
        ("double_row", ml_dtypes.float8_e4m3, 2, {"perf_mode": "double_row"}),
    )
    for name, dtype, w, fmt in modes:
        s = rng.standard_normal((k, w, m)).astype(dtype)
        x = rng.standard_normal((k, w, n)).astype(dtype)
        if w == 1:
            s, x = s[:, 0], x[:, 0]
        best = general = float("inf")
        for _ in range(runs):
            t0 = time.perf_counter()
            got = matmul(s, x, **fmt)
            best = min(best, time.perf_counter() - t0)
        t0 = time.perf_counter()
        p = np.zeros((m, n), dtype=np.float32)
        a_fmt, b_fmt = fmt.get("stationary_format"), fmt.get("moving_format")
        s3, x3 = s.reshape(k, w, m), x.reshape(k, w, n)
        for i in range(k):
            a = np.broadcast_to(s3[i].T[:, None, :], (m, n, w))
            b = np.broadcast_to(x3[i].T[None, :, :], (m, n, w))
            p = fp32_dot_add(p, a, b, a_format=a_fmt, b_format=b_fmt)
        general = time.perf_counter() - t0
        if not np.array_equal(got.view(np.uint32), p.view(np.uint32)):
            print(f"  FAILED: {name}: the golden differs from fp32_dot_add")
            return False
        print(f"{name:>12s}{best:10.4f}{general:14.3f}{general / best:9.0f}x")
    return _bench_golden_mx(rng, k, m, n, runs)


def _bench_golden_mx(rng, k, m, n, runs):
    """The MX row of :func:`_bench_golden`: e4m3fn elements, per-row scales around 2**0."""
    import ml_dtypes

    from ncrtl.model.fp import fp32_dot_add
    from ncrtl.model.tensor_engine.matmul import matmul_mx_rows

    e4 = ml_dtypes.float8_e4m3fn
    s = rng.standard_normal((k, m, 4)).astype(e4)
    x = rng.standard_normal((k, n, 4)).astype(e4)
    ss = rng.integers(120, 135, (k, m)).astype(np.uint8)
    xs = rng.integers(120, 135, (k, n)).astype(np.uint8)
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        got = matmul_mx_rows(s, x, ss, xs, rows=k, cols=m)
        best = min(best, time.perf_counter() - t0)
    t0 = time.perf_counter()
    p = np.zeros((m, n), dtype=np.float32)
    for i in range(k):
        exp = (ss[i][:, None].astype(np.int32) - 127) + (xs[i][None, :].astype(np.int32) - 127)
        a = np.broadcast_to(s[i][:, None, :], (m, n, 4))
        b = np.broadcast_to(x[i][None, :, :], (m, n, 4))
        p = fp32_dot_add(p, a, b, scale_exp=exp)
    general = time.perf_counter() - t0
    if not np.array_equal(got.view(np.uint32), p.view(np.uint32)):
        print("  FAILED: mx: the golden differs from fp32_dot_add")
        return False
    print(f"{'mx':>12s}{best:10.4f}{general:14.3f}{general / best:9.0f}x")
    return True


def _bench_pe(cycles, size=8, runs=5, pe_modes="all"):
    """ns per PE-cycle of one ``size x size`` tile in a C++ loop, per operation
    (:mod:`ncrtl.testbench.tensor_engine.pe_loop`): the best of ``runs`` runs (the least
    disturbed by the rest of the machine).  ``pe_modes``: the modes the PE is built for; the
    operations measured are those of :data:`OPERATIONS` it serves."""
    from ncrtl.model.modes import operation
    from ncrtl.model.modes import pe_modes as modes_of
    from ncrtl.testbench.tensor_engine.pe_loop import (
        OPERATIONS,
        build_tile_loop,
        run_tile_loop,
        tile_stimulus,
        write_stimulus,
    )

    modes = modes_of(pe_modes)
    ops = [op for op in OPERATIONS if operation(op)[0] in modes]
    with tempfile.TemporaryDirectory() as tmp:
        binary, build_s = build_tile_loop(size, tmp, modes)
        print(
            f"\nPE (modes {pe_modes}): one {size} x {size} tile in a C++ loop (build "
            f"{build_s:.1f} s), {cycles} cycles per operation, best of {runs} runs"
        )
        print(f"{'operation':18s}{'ns per PE-cycle':>17s}{'tile cycles/s':>15s}")
        figures = []
        for op in ops:
            path = Path(tmp) / f"{op}.stim"
            write_stimulus(path, tile_stimulus(op, size, 1000), size)
            best = min(
                (run_tile_loop(binary, path, max(1, cycles // 1000)) for _ in range(runs)),
                key=lambda r: r[1] / r[0],
            )
            n, ns = best
            per = ns / (n * size * size)
            figures.append(per)
            print(f"{op:18s}{per:17.1f}{n / (ns / 1e9):15.0f}")
        print(f"{'mean':18s}{sum(figures) / len(figures):17.1f}")
    return True


def _bench_fp(args):
    from ncrtl.testbench import sim
    from ncrtl.testbench.conformance import run_block

    count = args.count
    rows = []
    with _fresh_build_dir():
        for name, p in BENCH_CONFIGS:
            block = blocks.get(name)
            params = block.resolve(p)
            label = block.label(params)
            t0 = time.perf_counter()
            text, top = block.verilog(params)
            gen = time.perf_counter() - t0
            rss0 = _children_maxrss_mib()
            built = sim.build(block.component(params), top, progress=True)
            rss = max(_children_maxrss_mib(), rss0)
            res = run_block(block, params, count=count, seed=1, stall=0.0)
            sim_s = max(res.seconds - res.build_seconds, 1e-9)
            golden = _golden_rate(params["mode"]) if name == "fp.dot_add" else float("nan")
            rows.append(
                (label, gen, built.seconds, rss, res.vectors, res.cycles, sim_s, res.passed, golden)
            )
            print(f"measured {label}", flush=True)
    print()
    print(
        f"{'block':32s}{'gen s':>7s}{'build s':>9s}{'build MiB':>10s}{'vectors':>9s}"
        f"{'cycles':>8s}{'cycles/s':>10s}{'vectors/s':>11s}{'golden op/s':>13s}  result"
    )
    for label, gen, bld, rss, vec, cyc, s, ok, golden in rows:
        g = f"{golden:13.3g}" if golden == golden else f"{'-':>13s}"
        print(
            f"{label:32s}{gen:7.2f}{bld:9.1f}{rss:10.0f}{vec:9d}{cyc:8d}{cyc / s:10.0f}"
            f"{vec / s:11.0f}{g}  {'PASS' if ok else 'FAIL'}"
        )
    print(
        "\nbuild MiB: peak resident memory of the largest build child process so far (Verilator "
        "or the C++ compiler).\ncycles/s and vectors/s: end-to-end run of the testbench "
        "(stimulus, golden and scoreboard included), no stalls."
    )
    return all(r[7] for r in rows)


def _families(spec):
    """The PE builds ``--pe-modes`` lists, in its order: comma-separated ``pe_modes`` values
    (``all``, a family, or modes joined by ``+``), each checked."""
    from ncrtl.model.modes import pe_modes

    out = [s.strip() for s in str(spec).split(",") if s.strip()]
    for s in out:
        pe_modes(s)  # ValueError naming the bad item
    return out or ["all"]


def _te_params(size, pe_modes, pgo):
    """The ``pe_array`` parameters of the benchmark's engine."""
    return blocks.get("pe_array").resolve(
        {
            "rows": str(size),
            "cols": str(size),
            "mode": "bf16",
            "pe_modes": pe_modes,
            "pgo": "1" if pgo else "0",
        }
    )


def _bench_tensor_engine(size, pe_modes="all", pgo=False):
    """A ``size x size`` Tensor Engine running one bf16 K = M = ``size``, N = 512 matmul as
    ``ncrtl sim matmul`` runs it (Verilog stream players, build cache): the build (or the cached
    build), then a run on the cached build with its time split, streaming against end-to-end
    cycles/s and the model start-up; the golden model's time for the same tile.  ``pe_modes``:
    the modes its PE is built for (the family must serve bf16); ``pgo``: the profile-guided
    build (``pe_array`` parameter ``pgo=1``)."""
    import ml_dtypes

    from ncrtl.model.tensor_engine.matmul import matmul
    from ncrtl.testbench.conformance import build_block, print_time_split, time_split
    from ncrtl.testbench.tensor_engine.program import _values
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    block = blocks.get("pe_array")
    params = _te_params(size, pe_modes, pgo)
    build = ", profile-guided build" if pgo else ""
    print(
        f"\ntensor engine {size}x{size}, PE modes {pe_modes}{build}, bf16 K=M={size} N=512 "
        f"(ncrtl sim matmul's run):"
    )
    rss0 = _children_maxrss_mib()
    built, steps = build_block(block, params, player=player_ports(size, size), progress=True)
    if steps["cached"]:
        print(f"  cached build ({steps['directory']}), found in {steps['build']:.1f} s")
    else:
        print(
            f"  Verilog generation {steps['generate']:.1f} s, Verilator build "
            f"{steps['build']:.1f} s, peak build process "
            f"{max(_children_maxrss_mib(), rss0):.0f} MiB ({steps['directory']})"
        )
    res = _te_stream_run(size, repeat=1, player=True, pe_modes=pe_modes, pgo=pgo)
    if not res.passed:
        print(f"  run FAILED: {res.message}")
        return False
    split = dict(time_split(res))
    stream, end = streaming_rate(res), res.cycles / res.seconds
    print(f"  streaming: {stream:.1f} cycles/s (PE modes {pe_modes}{build})")
    print(
        f"  {res.cycles} cycles: end to end {end:.1f} cycles/s = {end / stream:.2f} x "
        f"streaming (target >= 0.8)"
    )
    print(
        f"  model start-up (simulator process start to the testbench's first line) "
        f"{split.get('model start-up', float('nan')):.1f} s (target <= 5 s)"
    )
    print_time_split(res)
    rng = np.random.default_rng(0)
    a = _values(rng, "bf16", (size, size)).view(ml_dtypes.bfloat16)
    b = _values(rng, "bf16", (size, 512)).view(ml_dtypes.bfloat16)
    t0 = time.perf_counter()
    matmul(a, b, rows=size, cols=size)
    print(f"  golden matmul of the tile {time.perf_counter() - t0:.2f} s")
    print(f"  result {'PASS' if res.passed else 'FAIL'}")
    return res.passed


def _bench_psum(partitions, count):
    """PSUM of ``partitions`` x 8 banks x 2 KiB: generation, build, and the figures of its
    conformance program (``ncrtl.testbench.psum.program``): latencies, beats per cycle without a
    conflict and while hammering one address, the shares of the TE and the VE port fighting
    for one bank, simulation speed."""
    from ncrtl.testbench.conformance import run_block

    block = blocks.get("psum")
    params = block.resolve({"partitions": str(partitions)})
    with _fresh_build_dir():
        text, gen, built, rss = _generate_and_build(block, params)
        res = run_block(block, params, count=count, seed=1, stall=0.2)
    c = res.counters
    comp = block.component(params)
    comp._MustUse__silence = True
    sim_s = max(res.seconds - res.build_seconds, 1e-9)

    def rate(beats, cycles):
        return c.get(beats, 0) / max(c.get(cycles, 0), 1)

    print(f"\nPSUM {block.label(params)}:")
    print(f"  Verilog generation {gen:.1f} s ({len(text.splitlines())} lines)")
    print(
        f"  Verilator build {built.seconds:.1f} s, peak build process {rss:.0f} MiB (log "
        f"{built.directory / 'build.log'})"
    )
    print(
        f"  read-add-write: a beat granted in cycle t is read at t, forwarded at t+1, added and "
        f"rounded at t+2, written at t+{comp.raw_latency}; an access granted at t+1 sees it"
    )
    print(
        f"  measured: group-complete {c.get('latency_done', -1)} cycles after the last beat's "
        f"grant, engine read response {c.get('latency_read', -1)} cycles after the grant"
    )
    print(
        f"  TE beats/cycle, no conflict:          {rate('full_rate_beats', 'full_rate_cycles'):.3f}"
        f"  ({c.get('full_rate_beats', 0)} beats)"
    )
    print(
        f"  TE beats/cycle, one address hammered: {rate('hammer_beats', 'hammer_cycles'):.3f}"
        f"  ({c.get('hammer_beats', 0)} N=1 accumulations)"
    )
    print(
        f"  TE and VE on one bank every cycle:    TE {rate('contention_te', 'contention_cycles'):.3f}"
        f", VE {rate('contention_ve', 'contention_cycles'):.3f} grants/cycle over "
        f"{c.get('contention_cycles', 0)} cycles"
    )
    print(
        f"  simulated {res.cycles} cycles in {sim_s:.1f} s ({res.cycles / sim_s:.0f} cycles/s, "
        f"stimulus, golden and scoreboards included), {res.vectors} vectors"
    )
    print(f"  result {'PASS' if res.passed else 'FAIL'}")
    return res.passed


def _te_stream_run(size, *, repeat, player, seed=1, progress=True, pe_modes="all", pgo=False):
    """One ``ncrtl sim matmul``-style run of ``repeat`` bf16 K = M = ``size``, N = 512 pairs on
    a ``size x size`` engine (build cache used; its PE built for ``pe_modes``, profile-guided
    with ``pgo``): a :class:`BlockResult`."""
    import json

    from ncrtl.testbench.conformance import run_block
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    block = blocks.get("pe_array")
    params = _te_params(size, pe_modes, pgo)
    return run_block(
        block,
        params,
        count=512,
        seed=seed,
        stall=0.0,
        testbench="ncrtl.testbench.tensor_engine.test_sim",
        extra_env={"NCRTL_MATMUL": json.dumps({"k": size, "m": size, "n": 512, "repeat": repeat})},
        player=player_ports(size, size) if player else None,
        progress=progress,
    )


def _bench_harness(size=16, repeat=40, runs=3):
    """What the testbench costs on top of the simulated hardware: the same Verilated engine
    streaming the same files through the testbench (Verilog stream players, cocotb) and through
    a C++ loop (:mod:`ncrtl.testbench.stream_loop`), the outputs of the two compared byte for
    byte, best of ``runs`` runs each; the Python drivers for reference."""
    import filecmp
    import shutil

    from ncrtl.testbench.conformance import print_time_split
    from ncrtl.testbench.stream_loop import build_loop, run_loop
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    print(
        f"\nharness: {size} x {size} engine, {repeat} bf16 matmuls K = M = {size}, N = 512 "
        f"back to back, no stalls; best of {runs} runs"
    )
    results = [_te_stream_run(size, repeat=repeat, player=True) for _ in range(runs)]
    if not all(r.passed for r in results):
        bad = next(r for r in results if not r.passed)
        print(f"  testbench run FAILED: {bad.message}")
        return False
    best = max(results, key=streaming_rate)
    folder = Path(best.steps["run_dir"]) / "player"
    block = blocks.get("pe_array")
    params = block.resolve({"rows": str(size), "cols": str(size), "mode": "bf16"})
    ports = player_ports(size, size)
    with tempfile.TemporaryDirectory() as tmp:
        text, top = block.verilog(params)
        binary, build_s = build_loop(text, top, ports, extra_args=block.build_args(params))
        files = Path(tmp) / "files"
        files.mkdir()
        inputs = ["config"] + [f"{p.name}.in" for p in ports if p.kind == "source"]
        for name in inputs:
            shutil.copy(folder / name, files / name)
        loops = [run_loop(binary, files) for _ in range(runs)]
        outputs = [f"{p.name}.log" for p in ports if p.kind == "source"] + [
            f"{p.name}.out" for p in ports if p.kind in ("sink", "strobe")
        ]
        differ = [n for n in outputs if not filecmp.cmp(folder / n, files / n, shallow=False)]
    loop_cycles, loop_s = min(loops, key=lambda r: r[1])
    c = best.counters
    tb_rate, loop_rate = streaming_rate(best), loop_cycles / loop_s
    if differ or loop_cycles != c["run_cycles"]:
        print(
            f"  the C++ loop did not reproduce the testbench's run ({', '.join(differ) or 'cycles'}"
            f" differ; {loop_cycles} vs {c['run_cycles']} cycles): figures not comparable"
        )
        return False
    python = _te_stream_run(size, repeat=repeat, player=False)
    print(
        f"  the same files in both: {c['run_cycles']} cycles from go to done, every output beat, "
        f"error and transfer cycle identical"
    )
    print(f"  C++ loop (the design alone, build {build_s:4.0f} s)   {loop_rate:10.0f} cycles/s")
    print(
        f"  testbench, Verilog stream players + cocotb {tb_rate:10.0f} cycles/s streaming"
        f" = {tb_rate / loop_rate:.2f} x the C++ loop (target >= 0.9)"
    )
    if python.passed:
        print(
            f"  testbench, Python drivers                  {streaming_rate(python):10.0f} cycles/s "
            f"streaming = {streaming_rate(python) / loop_rate:.2f} x the C++ loop"
        )
    print(f"  end to end (players): {best.cycles / best.seconds:.0f} cycles/s")
    print_time_split(best)
    return True


def _thread_counts(spec):
    """``--band-threads``: comma-separated thread counts (default 1, 2, 4, ... up to the cores
    of the machine)."""
    if spec:
        return [int(t) for t in str(spec).split(",")]
    cores, out = os.cpu_count() or 1, [1]
    while out[-1] * 2 <= cores:
        out.append(out[-1] * 2)
    return out


def _bench_bands(size, bands, pe_modes="all", threads=(1, 2), repeat=4):
    """The engine as column bands on threads (:mod:`ncrtl.testbench.tensor_engine.band_loop`)
    against the one-model C++ loop (Verilator's own threads), both on the files of one
    testbench run of ``repeat`` bf16 K = M = ``size``, N = 512 matmuls and both checked to
    reproduce its outputs byte for byte: the scaling with cores."""
    import filecmp
    import shutil

    from ncrtl.model.modes import pe_modes as modes_of
    from ncrtl.testbench.stream_loop import build_loop, run_loop
    from ncrtl.testbench.tensor_engine.band_loop import build_band_loop
    from ncrtl.testbench.tensor_engine.test_tensor_engine import player_ports

    print(
        f"\ncolumn bands: {size} x {size} engine, PE modes {pe_modes}, {bands} bands, {repeat} "
        f"bf16 matmuls K = M = {size}, N = 512 (the files of a testbench run); "
        f"{os.cpu_count()} cores"
    )
    res = _te_stream_run(size, repeat=repeat, player=True, pe_modes=pe_modes)
    if not res.passed:
        print(f"  testbench run FAILED: {res.message}")
        return False
    played = Path(res.steps["run_dir"]) / "player"
    ports = player_ports(size, size)
    outputs = [f"{p.name}.log" for p in ports if p.kind == "source"]
    outputs += [f"{p.name}.out" for p in ports if p.kind in ("sink", "strobe")]
    block = blocks.get("pe_array")
    params = _te_params(size, pe_modes, False)

    def replay(run, tmp, name):
        files = Path(tmp) / name
        files.mkdir()
        for f in ["config"] + [f"{p.name}.in" for p in ports if p.kind == "source"]:
            shutil.copy(played / f, files / f)
        cycles, seconds = run(files)
        differ = [n for n in outputs if not filecmp.cmp(played / n, files / n, shallow=False)]
        return cycles, seconds, differ

    rss0 = _children_maxrss_mib()
    text, top = block.verilog(params)
    one, one_s = build_loop(text, top, ports, extra_args=block.build_args(params))
    t0 = time.perf_counter()
    loop = build_band_loop(size, size, bands, modes=modes_of(pe_modes))
    band_s = time.perf_counter() - t0
    print(
        f"  builds: one model {one_s:.0f} s; bands {band_s:.0f} s (Verilog "
        f"{loop.parts['verilog']:.0f} s, the band {loop.parts['band']:.0f} s, the engine and "
        f"the loop {loop.parts['loop']:.0f} s); peak build process "
        f"{max(_children_maxrss_mib(), rss0):.0f} MiB (0 s: cached)"
    )
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        cycles, seconds, differ = replay(lambda f: run_loop(one, f), tmp, "one")
        base = cycles / seconds
        ok &= not differ
        print(
            f"  one model, {block.threads(**params)} Verilator thread(s): {base:8.1f} cycles/s"
            + (f"  DIFFERS: {', '.join(differ)}" if differ else "")
        )
        for t in threads:
            cycles, seconds, differ = replay(lambda f, t=t: loop.run(f, t), tmp, f"bands{t}")
            ok &= not differ
            print(
                f"  {bands} bands on {t:2d} thread(s):   {cycles / seconds:8.1f} cycles/s = "
                f"{cycles / seconds / base:.2f} x one model"
                + (f"  DIFFERS: {', '.join(differ)}" if differ else "")
            )
    print(
        f"  {res.vectors} output values, every output beat and cycle identical: "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return ok


#: Documented fixed cost of one DMA transfer (seeds README: about 1.3 us).
DMA_OVERHEAD_S = 1.3e-6


def _pyplot():
    """matplotlib's pyplot on the Agg backend, or None (with a line saying so) when the plot
    extra is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "  (no plot: matplotlib is not installed; install the plot extra: "
            ".venv/bin/pip install -e '.[plot]')"
        )
        return None
    return plt


#: ``ncrtl bench --only dma-curve``: bytes per partition (64 B to 64 KiB) and partitions.
CURVE_BYTES = tuple(64 << i for i in range(11))
CURVE_PARTITIONS = (1, 2, 4, 8, 16, 32, 64, 128)


def _documented_point(nbytes):
    """The NKI DMA bandwidth guide's range that ``nbytes`` per partition falls in."""
    if nbytes < 256:
        return "< 256 B: overhead-bound"
    if nbytes < 2048:
        return "256 B - 2 KiB: improving"
    if nbytes < 4096:
        return ">= 2 KiB: near peak"
    return ">= 4 KiB: saturating"


def _bench_dma_curve():
    """The kernel timing model's DMA costs (docs/kernels.md, "Costs"): the achieved GB/s of
    one device memory -> SBUF copy (its data, the 1.3 us latency apart, as in a stream of
    transfers) against bytes per partition and partitions, per core version, beside the
    documented points."""
    from ncrtl.model.kernel import timing as ktiming
    from ncrtl.model.kernel.stream import CORES, Instruction, Program, Ref

    def achieved(core, partitions, nbytes):
        f = nbytes // 2
        pattern = ((f, partitions), (1, f))
        ins = Instruction(
            "dma0",
            "dma_copy",
            dsts=(Ref("sbuf", "a", 0, (partitions, f), "bfloat16", pattern),),
            srcs=(Ref("hbm", "x", 0, (partitions, f), "bfloat16", pattern),),
        )
        rep = ktiming.simulate(Program(core, {"dma0": [ins]}, {}, [], [], "dma_curve"))
        rec = rep.records["dma0"][0]
        return partitions * nbytes / rep.core.ns(rec.end - rec.start)

    t0 = time.perf_counter()
    print("\nDMA costs of the kernel timing model: GB/s of one device memory -> SBUF copy")
    print("(its data; the 1.3 us latency overlaps other transfers), by partitions")
    for name in ("v2", "v3", "v4"):
        core = CORES[name]
        c = ktiming.dma_costs(core)
        peak = c.bytes_per_ns * core.dma_engines
        print(
            f"\nNeuronCore-{name}: {c.bytes_per_ns:g} B/ns per engine, {peak:g} GB/s for "
            f"{core.dma_engines}; a packet costs {c.packet_bytes:g} bytes' time "
            f"({c.packet_ns:.1f} ns)"
        )
        head = "".join(f"{p:>8}" for p in CURVE_PARTITIONS)
        print(f"{'bytes/partition':>15}{head}  of peak  documented")
        for b in CURVE_BYTES:
            row = [achieved(core, p, b) for p in CURVE_PARTITIONS]
            cells = "".join(f"{g:8.1f}" for g in row)
            print(f"{b:>15}{cells}  {row[-1] / peak:7.3f}  {_documented_point(b)}")
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    return True


def _bench_dma(partitions=16, word_bytes=16, clock_ghz=1.4, plot="build/bench/dma_bandwidth.png"):
    """Bandwidth of one DMA engine against bytes per partition, per kind of transfer, from the
    RTL (``ncrtl.testbench.dma.test_dma_bench``: no stalls, the memory model at one
    beat per cycle), with the documented per-transfer overhead in cycles at ``clock_ghz``."""
    from ncrtl.testbench.conformance import run_block
    from ncrtl.testbench.dma.test_dma_bench import BENCH_KINDS, BENCH_SIZES

    overhead = round(DMA_OVERHEAD_S * clock_ghz * 1e9)
    block = blocks.get("dma")
    params = block.resolve(
        {
            "word_bytes": str(word_bytes),
            "partitions": str(partitions),
            "partition_bytes": str(max(BENCH_SIZES)),
            "hbm_bytes": str(max(1 << 20, partitions * max(BENCH_SIZES))),
            "overhead": str(overhead),
        }
    )
    res = run_block(
        block,
        params,
        count=1,
        seed=1,
        stall=0.0,
        testbench="ncrtl.testbench.dma.test_dma_bench",
        progress=True,
    )
    print(
        f"\nDMA: one engine, {word_bytes}-byte data path at {clock_ghz} GHz "
        f"({word_bytes * clock_ghz:.1f} GB/s peak), {partitions} partitions, per-transfer "
        f"overhead {overhead} cycles ({DMA_OVERHEAD_S * 1e6:.1f} us)"
    )
    if not res.passed:
        print(f"  FAILED: {res.message}")
        return False
    c = res.counters
    timing = {u["name"]: u for u in res.units}.get("dma.timing")
    if timing:
        print(
            f"  timing model (ncrtl.model.dma.timing): {timing['vectors']} transfers, "
            f"{timing['mismatches']} differ from the RTL's cycles"
        )
    kinds = BENCH_KINDS
    print(f"{'bytes/partition':>16s}" + "".join(f"{k + ' GB/s':>20s}" for k in kinds))
    rows = {}
    for size in BENCH_SIZES:
        line, vals = f"{size:16d}", {}
        for k in kinds:
            cyc = c.get(f"bw_{k}_{size}")
            if cyc:
                gbs = c[f"bytes_{k}_{size}"] / (cyc / (clock_ghz * 1e9)) / 1e9
                vals[k] = gbs
                line += f"{gbs:20.2f}"
            else:
                line += f"{'-':>20s}"
        rows[size] = vals
        print(line)
    big = max(s for s in rows if "copy" in rows[s])
    copy = rows[big]["copy"]
    for k, target in (("transpose", 0.9), ("add", 1.0)):
        if k in rows[big]:
            print(
                f"  {k} / copy at {big} B per partition: {rows[big][k] / copy:.2f} "
                f"(documented: {'up to' if target < 1 else 'the same as copy,'} {target:.0%})"
            )
    if c.get("sbuf_transpose") and c.get("sbuf_transpose_copy"):
        words = partitions * partitions * 4 // word_bytes
        print(
            f"  SBUF -> SBUF transpose [{partitions}, {partitions}] FP32, less the overhead: "
            f"{words / c['sbuf_transpose']:.2f} of the data path's word per cycle "
            f"({words} words in {c['sbuf_transpose']} cycles; documented: up to 50% of the DMA "
            f"throughput); against a copy of the same bytes from the device memory "
            f"{c['sbuf_transpose_copy'] / c['sbuf_transpose']:.2f} ({c['sbuf_transpose_copy']} "
            f"cycles)"
        )
    plt = _pyplot()
    if plt is None:
        return True
    Path(plot).parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    for k in kinds:
        xs = [s for s in BENCH_SIZES if k in rows[s]]
        ax.plot(xs, [rows[s][k] for s in xs], marker="o", label=k)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per partition")
    ax.set_ylabel("GB/s")
    ax.set_title(f"one DMA engine, {word_bytes} B at {clock_ghz} GHz, {overhead}-cycle overhead")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot)
    print(f"  plot: {plot}")
    return True


def _bench_dma_qos(
    word_bytes=16, partitions=8, clock_ghz=1.4, plot="build/bench/dma_qos_latency.png"
):
    """A high-priority queue's latency while low-priority queues load the engine, both
    policies, from the RTL (``ncrtl.testbench.dma.test_dma_queues_bench``), with the
    documented per-transfer overhead."""
    from ncrtl.testbench.conformance import run_block
    from ncrtl.testbench.dma.test_dma_queues_bench import (
        LOW_BYTES,
        LOW_QUEUES,
        PROBE_BYTES,
        PROBES,
        SHARES,
    )

    overhead = round(DMA_OVERHEAD_S * clock_ghz * 1e9)
    block = blocks.get("dma_queues")
    results = {}
    for policy in ("priority", "round_robin"):
        params = block.resolve(
            {
                "word_bytes": str(word_bytes),
                "partitions": str(partitions),
                "partition_bytes": "16384",
                "hbm_bytes": str(1 << 20),
                "overhead": str(overhead),
                "outstanding": "8",
                "policy": policy,
            }
        )
        res = run_block(
            block,
            params,
            count=1,
            seed=1,
            stall=0.0,
            testbench="ncrtl.testbench.dma.test_dma_queues_bench",
            progress=True,
        )
        if not res.passed:
            print(f"\nDMA queues ({policy}): FAILED: {res.message}")
            return False
        results[policy] = res.counters
    shaped = "/".join(map(str, SHARES))
    series = {
        "priority": ("priority", ""),
        f"shares {shaped}": ("priority", "shaped_"),
        "round robin": ("round_robin", ""),
    }
    print(
        f"\nDMA queues: a class-3 queue's {PROBE_BYTES}-byte-per-partition copies ({PROBES} per "
        f"point) while 0..{LOW_QUEUES} queues of classes 0..2 stream {LOW_BYTES}-byte-per-"
        f"partition copies; one engine, {word_bytes}-byte data path, {partitions} partitions, "
        f"overhead {overhead} cycles; latency in cycles ({clock_ghz} GHz); shares {shaped}: "
        f"classes 0, 1, 2 each own {SHARES[0]} of the 16 calendar slots"
    )
    head = f"{'low queues':>11s}{'load':>7s}"
    for name in series:
        head += f"{name + ' mean':>22s}{'max':>8s}"
    print(head)
    rows = []
    for load in range(LOW_QUEUES + 1):
        c = results["priority"]
        util = c[f"words_{load}"] / c[f"window_{load}"]
        line = f"{load:11d}{util:7.2f}"
        row = {"load": load, "util": util}
        for name, (policy, prefix) in series.items():
            c = results[policy]
            mean = c[f"{prefix}lat_sum_{load}"] / c[f"{prefix}probes_{load}"]
            row[name] = (mean, c[f"{prefix}lat_max_{load}"])
            line += f"{mean:22.0f}{c[f'{prefix}lat_max_{load}']:8d}"
        rows.append(row)
        print(line)
    print(
        "  load: device-memory words read per cycle during the priority run's window "
        "(1.00 = the data path saturated)"
    )
    plt = _pyplot()
    if plt is None:
        return True
    Path(plot).parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["load"] for r in rows]
    for name in series:
        line = ax.plot(xs, [r[name][0] for r in rows], marker="o", label=f"{name} (mean)")[0]
        ax.plot(xs, [r[name][1] for r in rows], ls="--", color=line.get_color(), label="max")
    ax.set_xticks(xs, [f"{r['load']}\n({r['util']:.2f})" for r in rows])
    ax.set_xlabel("lower-class queues streaming (words read per cycle)")
    ax.set_ylabel("high-priority copy latency (cycles)")
    ax.set_title(f"DMA QoS: {PROBE_BYTES} B/partition probes, {overhead}-cycle overhead")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot)
    print(f"  plot: {plot}")
    return True


def _bench_dma_core(partitions=32, size=1024, esize=2, engines=(1, 2, 4), word_bytes=16):
    """The engines of a core (``DmaCore``): one instruction of each kind through a DGE, the
    data movement alone (no per-transfer overhead, 2 DGE cycles), memory latency 6, 8 reads
    in flight; on 1, 2 and 4 engines in the Amaranth simulator, each figure checked against
    the timing model (:mod:`ncrtl.model.dma.core`), then at full size (16 engines, 128
    partitions) from the timing model."""
    from ncrtl.model.dma import Geometry
    from ncrtl.model.dma.dge import ENGINES
    from ncrtl.testbench.dma.core_bench import (
        CORE_KINDS,
        core_cycles,
        core_instruction,
        core_model_cycles,
    )

    def row(label, cyc, base, p, size):
        # words per cycle of the SBUF transpose against the copy's
        ratio = (p * p * esize / cyc[2]) / (p * size / cyc[0])
        print(
            f"{label:>8s}" + "".join(f"{c:22d}" for c in cyc) + f"{base / cyc[0]:14.2f}"
            f"{cyc[0] / cyc[1]:16.2f}{ratio:13.2f}"
        )

    head = f"{'engines':>8s}" + "".join(f"{k + ' cycles':>22s}" for k in CORE_KINDS)
    head += f"{'copy speedup':>14s}{'transpose/copy':>16s}{'sbuf_t/copy':>13s}"
    geo = Geometry(partitions, 2 * size, max(1 << 16, partitions * size))
    print(
        f"\nDMA engines of a core (DmaCore, Amaranth simulator): {partitions} partitions, "
        f"{size} B per partition of {esize}-byte elements, {word_bytes}-byte data path, one "
        f"instruction through a DGE, cycles to its semaphore (no per-transfer overhead)"
    )
    print(head)
    base = None
    differ = 0
    from ncrtl.testbench import progress

    for e in engines:
        ins = [core_instruction(geo, k, size, esize) for k in CORE_KINDS]
        try:
            with progress.step(
                f"Amaranth simulation of {e} DMA engine(s), {len(ins)} instructions"
            ):
                cyc, turns = core_cycles(e, ins, geo, word_bytes=word_bytes)
        except AssertionError as exc:
            print(f"  FAILED: {exc}")
            return False
        model = core_model_cycles(e, ins, geo, word_bytes=word_bytes, turns=turns)
        differ += sum(a != b for a, b in zip(cyc, model))
        base = base or cyc[0]
        row(str(e), cyc, base, partitions, size)
    print(
        f"  timing model (ncrtl.model.dma.core): {len(engines) * len(CORE_KINDS)} "
        f"instructions, {differ} differ from the RTL's cycles"
    )
    p = 128
    print(
        f"\nDMA engines of a core, full size (timing model, equal to the RTL above): {p} "
        f"partitions, {esize}-byte elements, {word_bytes}-byte data path, the same memories"
    )
    for size_full in (1024, 16384):
        geo = Geometry(p, 2 * size_full, 2 * p * size_full)
        print(f"  {size_full} B per partition")
        print(head)
        base = None
        for e in (1, 4, ENGINES):
            ins = [core_instruction(geo, k, size_full, esize) for k in CORE_KINDS]
            cyc = core_model_cycles(e, ins, geo, word_bytes=word_bytes)
            base = base or cyc[0]
            row(str(e), cyc, base, p, size_full)
        gbs = p * size_full / cyc[0] * 1.4
        print(f"  copy on {ENGINES} engines: {gbs:.1f} GB/s at 1.4 GHz")
    print(
        f"  sbuf_transpose: [P, P] within the SBUF; copy and transpose: [P, n] from the device "
        f"memory; sbuf_t/copy: the SBUF transpose's bytes per cycle against the copy's "
        f"(documented: up to 50%; transpose/copy documented up to 90%); {ENGINES} engines at "
        f"{word_bytes} B per cycle and 1.4 GHz: {ENGINES * word_bytes * 1.4:.1f} GB/s peak"
    )
    return differ == 0
