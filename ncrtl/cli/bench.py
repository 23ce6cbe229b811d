"""``ncrtl bench``: generation, build and simulation speed."""

import contextlib
import os
import resource
import time

from .common import UsageError


def _cmd_bench(args):
    from ncrtl.testbench.bench import run_bench

    for flag, value, least in (("--count", args.count, 1), ("--pe-cycles", args.pe_cycles, 1)):
        if not least <= value <= 10**8:
            raise UsageError(f"{flag} {value} must be in {least}..{10**8}")
    if args.te_repeat < 1:
        raise UsageError(f"--te-repeat {args.te_repeat} must be >= 1")
    if not (args.te_size == 0 or 2 <= args.te_size <= 128):
        raise UsageError(f"--te-size {args.te_size} must be 0 (skip) or in 2..128")
    if args.bands < 1:
        raise UsageError(f"--bands {args.bands} must be at least 1")
    if not 0 <= args.psum_partitions <= 128:
        raise UsageError(f"--psum-partitions {args.psum_partitions} must be in 0..128")
    if not 1 <= args.dma_partitions <= 128:
        raise UsageError(f"--dma-partitions {args.dma_partitions} must be in 1..128")
    if not 0 <= args.harness_size <= 128 or args.harness_size == 1:
        raise UsageError(f"--harness-size {args.harness_size} must be 0 or in 2..128")
    if args.harness_repeat < 1:
        raise UsageError(f"--harness-repeat must be >= 1, got {args.harness_repeat}")
    if args.nc_size not in (8, 128):
        raise UsageError(f"--nc-size {args.nc_size} must be 8 or 128")
    if args.psum_count < 1:
        raise UsageError(f"--psum-count must be >= 1, got {args.psum_count}")
    from ncrtl.model.modes import get_mode, pe_modes

    for spec in args.pe_modes.split(","):
        try:
            served = pe_modes(spec)
        except ValueError as e:
            raise UsageError(f"--pe-modes: {e}") from None
        if args.only in (None, "te", "bands") and args.te_size and get_mode("bf16") not in served:
            raise UsageError(
                f"--pe-modes {spec!r} does not serve bf16, the mode of the measured matmul"
            )
    if args.only == "bands":
        from ..hdl.tensor_engine.band import band_plan
        from ..model.tensor_engine.timing import chain_width

        if not 2 <= args.te_size <= 128:
            raise UsageError(f"--only bands needs --te-size in 2..128, got {args.te_size}")
        try:
            band_plan(args.te_size, args.bands, chain_width(args.te_size))
        except ValueError as e:
            raise UsageError(f"--bands {args.bands}: {e}") from None
        spec = args.band_threads or "1"
        if not all(t.strip().isdigit() and int(t) >= 1 for t in spec.split(",")):
            raise UsageError(f"--band-threads {spec!r} must be thread counts >= 1, comma-separated")
    return run_bench(args)


def add_parser(sub, raw):
    """The ``bench`` subcommand's arguments."""
    s = sub.add_parser("bench", help="benchmarks: generation, build and simulation speed")
    s.add_argument(
        "--count",
        type=int,
        default=200000,
        help="vectors per FP unit for the throughput (default 200000)",
    )
    s.add_argument(
        "--only",
        choices=(
            "pe",
            "fp",
            "golden",
            "kernel",
            "harness",
            "te",
            "bands",
            "psum",
            "dma",
            "dma-curve",
            "neuroncore",
            "regress",
            "defaults",
        ),
        help="run one section: pe (the PE in a C++ loop), fp (the FP units), golden (the "
        "bit-exact golden matmul per mode), kernel (ncrtl run as a user calls it, each "
        "phase timed, at three sizes of matmul_tiled up to the NKI tutorial's; the timing model "
        "alone), harness (the "
        "testbench against a C++ loop), te (the Tensor Engine), bands (the Tensor Engine as "
        "column bands on threads against one model; only when named), psum, dma (the DMA "
        "engine's bandwidth), dma-curve (the kernel timing model's DMA GB/s against bytes per "
        "partition and partitions, per core version, beside the documented points), neuroncore (the RTL NeuronCore: build, simulation speed, the "
        "tiled matmul's cycles against the timing model), regress (ncrtl regress: tasks per "
        "second on a local Dask cluster of 1 and 2 workers; only when named), defaults (ncrtl "
        "sim matmul's default engines at --te-size, 128 unless given: the narrowest PE family "
        "and column bands against the all-mode one model; only when named) (default: all of "
        "them but bands, regress and defaults)",
    )
    s.add_argument(
        "--nc-size",
        type=int,
        default=8,
        help="--only neuroncore: the core's partitions (= PE rows and columns): 8 (default: the "
        "neuroncore group's small core, 2 DMA engines) or 128 (the real core's geometry, 16 DMA "
        "engines, bf16-family PEs)",
    )
    s.add_argument(
        "--pe-cycles",
        type=int,
        default=20000,
        help="tile cycles per operation of the PE measurement (default 20000)",
    )
    s.add_argument(
        "--dma-partitions",
        type=int,
        default=16,
        help="SBUF partitions of the DMA bandwidth measurement, 1..128 (default 16)",
    )
    s.add_argument(
        "--psum-partitions",
        type=int,
        default=128,
        help="PSUM partitions to measure, 8 banks x 2 KiB, 0..128 (default 128; 0 skips it)",
    )
    s.add_argument(
        "--psum-count",
        type=int,
        default=1000,
        help="random Tensor Engine beats of the PSUM program, >= 1 (default 1000)",
    )
    s.add_argument(
        "--te-size",
        type=int,
        default=128,
        help="Tensor Engine array size to measure, 2..128 (default 128, about 15 minutes; "
        "0 skips it; --only defaults: 128 when 0)",
    )
    s.add_argument(
        "--te-repeat",
        type=int,
        default=1,
        help="--only defaults: bf16 matmuls back to back in each run, >= 1 (default 1)",
    )
    s.add_argument(
        "--pe-modes",
        default="all",
        help="PE builds to measure, comma-separated, each in turn: all (default, every mode), "
        "a family (bf16, fp8, fp32, mx) or modes joined by '+'; --only te: each must serve "
        "bf16 (the measured matmul); --only pe: each build's operations",
    )
    s.add_argument(
        "--bands",
        type=int,
        default=4,
        help="--only bands: column bands the grid is cut into (default 4; dividing --te-size, "
        "each dividing the 32-column LoadStationary chain or holding whole chains)",
    )
    s.add_argument(
        "--band-threads",
        default=None,
        help="--only bands: thread counts to measure, comma-separated (default 1, 2, 4, ... "
        "up to the cores of this machine)",
    )
    s.add_argument(
        "--pgo",
        action="store_true",
        help="--only te: measure the profile-guided builds (pe_array --param pgo=1: compiled "
        "twice with a training run between, about twice the build time) instead of the plain "
        "ones",
    )
    s.add_argument(
        "--harness-size",
        type=int,
        default=16,
        help="engine size of the testbench-against-C++-loop measurement, 2..128 (default 16; "
        "0 skips it)",
    )
    s.add_argument(
        "--harness-repeat",
        type=int,
        default=40,
        help="bf16 matmuls (K = M = size, N = 512) it streams back to back, >= 1 (default 40)",
    )
    s.set_defaults(func=_cmd_bench)


def kernel_command(argv):
    """Run ``ncrtl run`` (``argv`` after ``run``) in this process as a user's command line does
    (:func:`ncrtl.cli.main`, its output kept from the terminal), timing its phases: the
    arguments checked and the inputs drawn, tracing (the kernel's Python and the ISA's rules),
    placement and semaphores (the builder's, ``ncrtl.model.kernel.build.work``), the golden run
    (without ``--timing-only``), the timing run, the report (summary, printed lines,
    ``--out``'s report.json) and the Perfetto trace (``--trace``).  Returns ``{"rc", "seconds"
    (the whole command), "phases" (seconds each), "instructions", "bytes" (the peak resident set
    above the one when tracing began)}``; meant for a fresh interpreter (the peak is the
    process's)."""
    import io

    from ncrtl import nki
    from ncrtl.cli import main
    from ncrtl.cli import run as run_cli
    from ncrtl.model.kernel import build
    from ncrtl.model.kernel import golden as kgolden
    from ncrtl.model.kernel import timing as ktiming
    from ncrtl.testbench.bench import RUN_PHASES

    phases = dict.fromkeys(RUN_PHASES, 0.0)
    seen = {"instructions": 0, "rss": None}

    def timed(phase, fn, after=None):
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
            finally:
                phases[phase] += time.perf_counter() - t0
            if after is not None:
                after(out)
            return out

        return call

    def traced(program):
        programs = program if isinstance(program, tuple) else (program,)
        seen["instructions"] = sum(sum(p.counts().values()) for p in programs)

    def trace(*args, **kwargs):
        seen["rss"] = _rss_bytes()
        return timed("tracing", original["trace"], traced)(*args, **kwargs)

    original = {"trace": nki.trace}
    patches = [
        (run_cli, "check", timed("inputs", run_cli.check)),
        (run_cli.Checked, "arrays", timed("inputs", run_cli.Checked.arrays)),
        (nki, "trace", trace),
        (kgolden, "run", timed("golden", kgolden.run)),
        (ktiming, "simulate", timed("timing", ktiming.simulate)),
        (ktiming.Report, "summary", timed("report", ktiming.Report.summary)),
        (run_cli, "_print", timed("report", run_cli._print)),
        (run_cli, "write_folder", timed("report", run_cli.write_folder)),
        (run_cli, "write_output", timed("trace", run_cli.write_output)),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, fn in patches:
        setattr(owner, name, fn)
    build.work.reset()
    try:
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(["run", *argv])
        seconds = time.perf_counter() - t0
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
    # the builder runs inside the trace: its seconds are placement and semaphores, not tracing
    phases["placement"] = build.work.placement_s
    phases["semaphores"] = build.work.semaphores_s
    phases["tracing"] -= phases["placement"] + phases["semaphores"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "rc": rc,
        "seconds": seconds,
        "phases": phases,
        "instructions": seen["instructions"],
        "bytes": peak - seen["rss"] if seen["rss"] is not None else None,
    }


def _rss_bytes():
    """This process's resident set now (Linux), or None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
