"""``ncrtl timing matmul``: the Tensor Engine's timing model alone."""

from collections import Counter

from .. import blocks
from ..model.tensor_engine import isa
from ..model.tensor_engine.isa import Op
from ..testbench.outputs import check_output, write_output
from .common import SPARSE_PATTERNS, UsageError, sparse_ratio


def check(args):
    """Everything ``ncrtl timing matmul`` refuses before it simulates: the arguments, the
    program's size and tiles, and each of its distinct instructions against the engine's rules
    (the rules :func:`isa.check` states, which the simulation applies to every instruction).
    Returns ``(k, m, tile, sparse, rules, program)`` for the run; :class:`UsageError` naming
    the first rule broken."""
    from ..model.modes import operations
    from ..model.tensor_engine import timing

    if args.what != "matmul":
        raise UsageError(f"timing {args.what!r} is not a timing command; allowed: matmul")
    if args.dtype not in operations():
        raise UsageError(
            f"--dtype {args.dtype!r} is not allowed; allowed: {', '.join(operations())}"
        )
    for name in ("rows", "cols"):
        value = getattr(args, name)
        if not 1 <= value <= isa.MAX_ARRAY:
            raise UsageError(
                f"--{name} {value} must be in 1..{isa.MAX_ARRAY} (the instruction's 8-bit K, M "
                f"and tile fields)"
            )
    sparse = 0 if args.sparse is None else sparse_ratio(args.sparse)
    if args.trace:
        check_output(args.trace, "--trace")
    # the Tensor Engine's tile granules: the pe_array block's tile_unit, one rule for both
    units = {p.name: p for p in blocks.get("pe_array").params}["tile_unit"].choices
    if args.tile_unit not in units:
        raise UsageError(
            f"--tile-unit {args.tile_unit} must be one of {', '.join(map(str, units))}: a "
            f"32-partition quadrant on the hardware, a power-of-two share of it on small arrays"
        )
    tile = None
    if args.tile_size is not None:
        try:
            tile = tuple(int(v) for v in args.tile_size.split(","))
        except ValueError:
            tile = ()
        if len(tile) != 2:
            raise UsageError(f"--tile-size {args.tile_size!r} must be ROWS,COLS (two integers)")
    # K and M default to the tile's size: a full tile, whatever the array.
    k = args.k if args.k is not None else (tile or (args.rows, args.cols))[0]
    m = args.m if args.m is not None else (tile or (args.rows, args.cols))[1]
    rules = {
        "documented": timing.DOCUMENTED,
        "hdl": timing.HDL_SERIAL,
        "hdl-parallel": timing.HDL_PARALLEL,
        "hdl-background": timing.HDL_BACKGROUND,
        "one-chain": timing.ONE_CHAIN,
    }[args.rules]
    try:
        prog = timing.matmul_program(
            k,
            m,
            args.n,
            args.dtype,
            repeat=args.repeat,
            tile=tile,
            tiles=args.tiles,
            rows=args.rows,
            cols=args.cols,
            bf16_out=args.bf16_out,
            sparse=sparse,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # The program repeats one LS and MM per tile: the first tiles' pairs are all it holds.
    for i in range(0, min(len(prog), 2 * args.tiles), 2):
        for index, ins, ls in ((i, prog[i], None), (i + 1, prog[i + 1], prog[i])):
            bad = isa.check(ins, args.rows, args.cols, ls, tile_unit=args.tile_unit)
            if bad is not None:
                raise UsageError(_rejected(index, ins, *bad))
    return k, m, tile, sparse, rules, prog


def _rejected(index, ins, error, message):
    return f"instruction {index} ({ins.op.name}) is rejected: {error.name}: {message}"


def _cmd_timing(args):
    """``ncrtl timing matmul``: figures of R nc_matmuls from the timing model alone."""
    from ..model.tensor_engine import timing

    k, m, tile, sparse, rules, prog = check(args)
    sched = _simulate(prog, args, rules, "timing model")
    mms = [r for r in sched.records if r.instruction.op == Op.MM]
    what = f"nc_matmul {args.dtype} K={k}"
    if sparse:
        what = f"nc_matmul_sparse {args.sparse} {args.dtype} K={k} (logical K={k * sparse})"
    print(
        f"{args.repeat} x {what} M={m} N={args.n} on "
        f"{args.tiles} tile(s) of {tile or (args.rows, args.cols)}, {args.rows} x {args.cols} "
        f"array, {args.rules} rules"
    )
    print(f"total: {sched.total_cycles} cycles")
    if _throttle(args) is not None:
        print(
            f"warm-up throttle: {sched.throttled} of {len(mms)} matmuls at half rate, "
            f"+{sched.throttle_cycles} cycles (--no-throttle: without it)"
        )
    print(f"steady state: {timing.steady_cycles(sched):.1f} cycles per matmul")
    print(f"first output: cycle {mms[0].outputs[0]}, last output: cycle {mms[-1].outputs[-1]}")
    start, stop = sched.mm_window()
    clock = timing.CLOCK_HZ
    if prog[0].transpose:
        moved = args.repeat * m * args.n  # N output vectors of M lanes each
        print(
            f"transposed: {moved / (stop - start):.1f} elements per cycle (first MM to the last "
            f"MM's end); a transpose does no multiply-accumulates (no utilization or TFLOPS)"
        )
        return _write_trace(args, sched, timing)
    dense_equivalent = "; dense-equivalent MACs over the dense peak" if sparse else ""
    print(
        f"utilization: {sched.utilization(start, stop):.3f} (first MM to the last MM's end), "
        f"{sched.utilization():.3f} (whole run){dense_equivalent}"
    )
    peak = timing.peak_tflops(args.rows, args.cols, prog[0].mode, sparse=sparse)
    if sparse:
        dense_peak = timing.peak_tflops(args.rows, args.cols, prog[0].mode)
        peak = f"{peak:.1f} ({args.sparse} dense-equivalent; dense {dense_peak:.1f})"
    else:
        peak = f"{peak:.1f}"
    print(
        f"TFLOPS at {clock / 1e9:.1f} GHz: {sched.tflops(start, stop):.1f} (first MM to the "
        f"last MM's end), {sched.tflops():.1f} (whole run); peak {peak}"
    )
    if sparse:
        _dense_comparison(args, sched, k * sparse, m, rules, timing)
    return _write_trace(args, sched, timing)


def _simulate(prog, args, rules, label):
    """The schedule of ``prog`` (progress on stderr past two seconds); UsageError naming the
    first rejected instruction."""
    from ..model.tensor_engine import timing
    from ..testbench import progress

    with progress.step(f"{label}: {len(prog):,} instructions") as state:

        def counted():
            for i, ins in enumerate(prog):
                if i % 8192 == 0:
                    state["detail"] = f"{i:,} / {len(prog):,} instructions"
                yield ins

        sched = timing.simulate(
            counted(),
            args.rows,
            args.cols,
            tile_unit=args.tile_unit,
            rules=rules,
            throttle=_throttle(args),
        )
    bad = next((r for r in sched.records if not r.accepted), None)
    if bad is not None:
        raise UsageError(_rejected(bad.index, bad.instruction, bad.error, bad.message))
    return sched


def _throttle(args):
    """The Tensor Engine's warm-up throttle at 2.4 GHz (Trainium2 and 3) under the documented
    rules, unless ``--no-throttle``; the RTL's rules have none."""
    from ..model.tensor_engine import timing

    if args.rules != "documented" or args.no_throttle:
        return None
    return timing.throttle_at(round(timing.CLOCK_HZ / 1e6))


def _dense_comparison(args, sparse_sched, logical_k, m, rules, timing):
    """Print the dense matmuls of the sparse run's logical contraction, run through the same
    model: ``logical_k`` rows in chunks of the array's rows (NKI's partition tiles), every
    chunk its own LS and MM, the chunks of one output back to back."""
    full, rest = divmod(logical_k, args.rows)
    chunks = [args.rows] * full + [rest] * bool(rest)
    # the same outputs as the sparse run, as far as the timing model's limit on matmuls allows
    outputs = min(args.repeat, timing.MAX_REPEAT // len(chunks))
    pair = {
        c: timing.matmul_program(
            c, m, args.n, args.dtype, rows=args.rows, cols=args.cols, bf16_out=args.bf16_out
        )
        for c in set(chunks)
    }
    one = [ins for c in chunks for ins in pair[c]]
    dense = _simulate(one * outputs, args, rules, "timing model, the dense comparison")
    per_output = timing.steady_cycles(dense) * len(chunks)
    sparse_steady = timing.steady_cycles(sparse_sched)
    sizes = " + ".join(f"{n} x K={c}" for c, n in Counter(chunks).items())
    same = "" if outputs == args.repeat else f" (the first {outputs:,} outputs only)"
    total = f"{dense.total_cycles} cycles"
    if outputs == args.repeat:
        total += f" ({dense.total_cycles / sparse_sched.total_cycles:.2f} x the sparse run's)"
    print(
        f"dense, same logical K={logical_k}: {sizes} nc_matmul {args.dtype} per output, "
        f"{outputs * len(chunks):,} in all{same}: {total}; steady state {per_output:.1f} "
        f"cycles per output ({per_output / sparse_steady:.2f} x the sparse "
        f"{sparse_steady:.1f})"
    )


def _write_trace(args, sched, timing):
    import json

    if args.trace:
        from ..testbench import progress

        def write(path):
            # Event by event: a long run's trace is never held whole.
            with open(path, "w") as f:
                f.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
                for i, event in enumerate(timing.chrome_trace_events(sched)):
                    f.write((",\n" if i else "") + json.dumps(event))
                f.write("\n]}\n")

        with progress.step(f"writing the trace {args.trace}"):
            write_output(args.trace, "--trace", write)
        print(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
    return 0


def add_parser(sub, raw):
    """The ``timing`` subcommand's arguments."""
    s = sub.add_parser(
        "timing",
        help="figures of back-to-back nc_matmuls from the timing model alone (no RTL)",
    )
    s.add_argument("what", help="what to time: matmul")
    s.add_argument(
        "--k",
        type=int,
        help="contraction rows K, 1..tile rows (default: the tile's rows, --rows without "
        "--tile-size)",
    )
    s.add_argument(
        "--m",
        type=int,
        help="stationary free size M, 1..tile columns (default: the tile's columns)",
    )
    s.add_argument(
        "--n",
        type=int,
        default=512,
        help="moving free size N, 1..512 (MX with --bf16-out: 1..1024; default 512)",
    )
    s.add_argument(
        "--bf16-out",
        action="store_true",
        help="the matmuls accumulate into a BF16 PSUM tile (NKI: the destination's dtype), "
        "which lets MX take N up to 1024 (default: FP32)",
    )
    s.add_argument(
        "--dtype",
        default="bf16",
        metavar="OPERATION",
        help=f"a mode's matmul or transpose (default bf16): {', '.join(blocks.TE_MODES)}",
    )
    s.add_argument(
        "--sparse",
        metavar="M:N",
        help=f"M:N structured-sparse matmuls (nc_matmul_sparse): "
        f"{', '.join(SPARSE_PATTERNS)}; --k counts the compressed rows (PE rows), a logical "
        f"contraction of K x N/M rows; also runs the dense matmuls of that contraction for "
        f"comparison (default: dense)",
    )
    s.add_argument(
        "--repeat", type=int, default=16, help="nc_matmuls back to back, >= 1 (default 16)"
    )
    s.add_argument(
        "--tile-size",
        metavar="ROWS,COLS",
        help="tile of each matmul (default: the whole array), e.g. 32,128 for row tiles",
    )
    s.add_argument(
        "--tiles",
        type=int,
        default=1,
        help="spread the matmuls over this many different tiles of --tile-size, 1..the tiles "
        "of the array (default 1)",
    )
    s.add_argument(
        "--rows",
        type=int,
        default=128,
        help=f"array rows, 1..{isa.MAX_ARRAY} (default 128, the hardware's)",
    )
    s.add_argument(
        "--cols",
        type=int,
        default=128,
        help=f"array columns, 1..{isa.MAX_ARRAY} (default 128, the hardware's)",
    )
    s.add_argument(
        "--tile-unit",
        type=int,
        default=32,
        help="the smallest tile: 1, 2, 4, 8, 16 or 32 (default 32, the hardware's)",
    )
    s.add_argument(
        "--rules",
        choices=("documented", "hdl", "hdl-parallel", "hdl-background", "one-chain"),
        default="documented",
        help="documented: the vendor's timing (default); hdl: the RTL's default engine (tiles "
        "one after another, no background transpose); hdl-parallel: the RTL with "
        "parallel_tiles (tiles side by side, no background transpose); hdl-background: the "
        "RTL with background_transpose (tiles one after another); one-chain: an LS a "
        "column per beat and a 64-cycle MM floor",
    )
    s.add_argument(
        "--no-throttle",
        action="store_true",
        help="without the Tensor Engine's warm-up throttle (documented rules: the matmuls run "
        "at half rate until about 3 us of work, and again after utilization under 50%% over "
        "3 us; the hdl rules never have it)",
    )
    s.add_argument(
        "--trace",
        metavar="FILE",
        help="write a Chrome / Perfetto trace (JSON) to FILE (default: none)",
    )
    s.set_defaults(func=_cmd_timing)
