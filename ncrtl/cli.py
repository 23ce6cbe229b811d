"""The ``ncrtl`` command line: generate Verilog, lint, run conformance and benchmarks.

Every command takes a block name from :mod:`ncrtl.blocks` (``ncrtl list`` shows them) and block
parameters as ``--param name=value``.  Bad input (unknown block, parameter or value) gets one line
naming the bad value and the allowed ones, and exit status 2.
"""

import argparse
import sys
import time
from pathlib import Path

from . import blocks
from .model.modes import MX_DTYPES, MX_FORMATS, operation
from .model.tensor_engine import isa
from .model.tensor_engine.isa import Instruction, Mode, Op

__all__ = ["main"]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


def _parse_params(items, args=None):
    params = {}
    # Shortcut flags (--rows 8 is --param rows=8).
    for flag in ("rows", "cols", "mode"):
        value = getattr(args, flag, None) if args is not None else None
        if value is not None:
            params[flag] = str(value)
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"--param {item!r} is not of the form name=value")
        k, v = item.split("=", 1)
        params[k.strip()] = v.strip()
    return params


def _cmd_list(args):
    for b in blocks.all_blocks():
        print(f"{b.name:14s} {b.summary}")
        for p in b.params:
            choices = f" (one of: {', '.join(map(str, p.choices))})" if p.choices else ""
            print(
                f"{'':16s}--param {p.name}=<{p.kind.__name__}>  default {p.default!r}{choices}: {p.help}"
            )
    for g, members in blocks.GROUPS.items():
        names = sorted({b for b, _ in members})
        print(f"{g:14s} group of {len(members)} configurations of {', '.join(names)}")
    return 0


def _cmd_verilog(args):
    block = blocks.get(args.block)
    params = block.resolve(_parse_params(args.param, args))
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    text, top = block.verilog(params)
    path = out / f"{top}.v"
    path.write_text(text)
    print(
        f"wrote {path} ({len(text.splitlines())} lines, top module {top}) "
        f"in {time.perf_counter() - t0:.2f} s"
    )
    return 0


def _expand(name, param_items, args=None):
    """A block or a group -> list of (block, resolved params).

    A name that is both a group and a block (``psum``) means the group, or the block when
    parameters are given."""
    user = _parse_params(param_items, args)
    is_block = name in {b.name for b in blocks.all_blocks()}
    if name in blocks.GROUPS and not (user and is_block):
        if user:
            raise UsageError(f"--param is not accepted with the group {name!r}; name one block")
        return [(blocks.get(b), blocks.get(b).resolve(p)) for b, p in blocks.GROUPS[name]]
    b = blocks.get(name)
    return [(b, b.resolve(user))]


def _cmd_lint(args):
    from ncrtl.testbench.lint import lint_verilog, synth_check

    failed = 0
    for block, params in _expand(args.block, args.param, args):
        text, top = block.verilog(params)
        lint = lint_verilog(text, top)
        synth = synth_check(block.verilog(params, synthesis=True)[0], top)
        ok = lint.ok and synth.ok
        failed += not ok
        print(
            f"{block.label(params):44s} lint {'clean' if lint.ok else 'FAILED'}   "
            f"synth {'ok, no latches' if synth.ok else 'FAILED'}"
        )
        if not lint.ok:
            print(lint.log)
        if not synth.ok:
            print(synth.log)
    return 1 if failed else 0


def _cmd_conformance(args):
    from ncrtl.testbench.conformance import run_conformance

    runs = _expand(args.block, args.param, args)
    if args.count < 1:
        raise UsageError(f"--count must be >= 1, got {args.count}")
    return run_conformance(
        runs,
        count=args.count,
        seed=args.seed,
        junit=args.junit,
        stall=args.stall,
        waves=args.waves,
        progress=True,
    )


def _cmd_sim(args):
    from ncrtl.testbench.tensor_engine.simulate import sim_matmul

    if args.what != "matmul":
        raise UsageError(f"unknown simulation {args.what!r}; allowed: matmul")
    if args.dtype in MX_DTYPES:
        return _sim_mx(args)
    if args.moving_dtype is not None:
        raise UsageError(
            f"--moving-dtype applies to the MX dtypes ({', '.join(MX_DTYPES)}), not to "
            f"--dtype {args.dtype}"
        )
    if args.dtype not in blocks.TE_MODES:
        raise UsageError(
            f"--dtype {args.dtype!r} is not allowed; allowed: "
            f"{', '.join(blocks.TE_MODES + tuple(MX_DTYPES))}"
        )
    if args.psum is not None:
        from ncrtl.testbench.core.simulate import sim_matmul_psum

        if args.dtype not in blocks.CORE_MODES:
            raise UsageError(
                f"--dtype {args.dtype!r} is not allowed with --psum; allowed: "
                f"{', '.join(blocks.CORE_MODES)}"
            )
        if args.k < 1 or args.k % args.rows:
            raise UsageError(
                f"--k {args.k} must be a positive multiple of --rows {args.rows} with "
                f"--psum (one accumulated matmul per {args.rows} rows)"
            )
        if args.m != args.cols:
            raise UsageError(
                f"--m {args.m} must equal --cols {args.cols} with --psum (every "
                f"partition of the bank is written)"
            )
        pe_mode, transpose = operation(args.dtype)
        limit = pe_mode.n_limit(args.psum == "bf16" and not transpose)
        if not 1 <= args.n <= limit:
            raise UsageError(
                f"--n {args.n} must be in 1..{limit} ({args.dtype} into {args.psum} PSUM)"
            )
        return sim_matmul_psum(
            rows=args.rows,
            cols=args.cols,
            dtype=args.dtype,
            k=args.k,
            n=args.n,
            psum=args.psum,
            rounding=args.rounding,
            seed=args.seed,
            waves=args.waves,
        )
    if args.rounding != "rne":
        raise UsageError("--rounding applies to a BF16 PSUM: give --psum bf16")
    for name, value, hi in (("k", args.k, args.rows), ("m", args.m, args.cols), ("n", args.n, 512)):
        if not 1 <= value <= hi:
            raise UsageError(f"--{name} {value} must be in 1..{hi}")
    return sim_matmul(
        rows=args.rows,
        cols=args.cols,
        dtype=args.dtype,
        k=args.k,
        m=args.m,
        n=args.n,
        seed=args.seed,
        waves=args.waves,
    )


def _sim_mx(args):
    """``ncrtl sim matmul --dtype mxfp8_*|mxfp4_*``: the QuantizeMX + MX matmul chain."""
    from ncrtl.testbench.tensor_engine.simulate import sim_matmul_mx

    moving = args.moving_dtype or args.dtype
    if moving not in MX_DTYPES:
        raise UsageError(
            f"--moving-dtype {moving!r} is not an MX dtype; allowed: {', '.join(MX_DTYPES)}"
        )
    if args.psum is not None or args.rounding != "rne":
        raise UsageError(
            "--psum and --rounding do not apply to the MX chain; --dtype mx --psum fp32|bf16 "
            "runs MX matmuls into PSUM"
        )
    if args.rows < 32 or args.rows % 32:
        raise UsageError(
            f"--rows {args.rows}: the MX chain needs a multiple of 32 rows (QuantizeMX groups "
            f"and the scale quadrants span 32 partitions)"
        )
    # The engine's own rules for the LS + MM pair (K partitions, M, N), with its messages.
    fields = dict(k=args.k, m=args.m, fmt_s=MX_FORMATS.index(MX_DTYPES[args.dtype]))
    fields["fmt_m"] = MX_FORMATS.index(MX_DTYPES[moving])
    ls = Instruction(Op.LS, Mode.MX, **fields)
    for ins, st in ((ls, None), (Instruction(Op.MM, Mode.MX, n=args.n, **fields), ls)):
        bad = isa.check(ins, args.rows, args.cols, st)
        if bad is not None:
            raise UsageError(f"--k {args.k} --m {args.m} --n {args.n}: {bad[1]}")
    return sim_matmul_mx(
        rows=args.rows,
        cols=args.cols,
        dtype=args.dtype,
        moving_dtype=moving,
        k=args.k,
        m=args.m,
        n=args.n,
        scale_rule=args.scale_rule,
        seed=args.seed,
        waves=args.waves,
    )


def _cmd_bench(args):
    from ncrtl.testbench.bench import run_bench

    if not 0 <= args.psum_partitions <= 128:
        raise UsageError(f"--psum-partitions {args.psum_partitions} must be in 0..128")
    if not 1 <= args.dma_partitions <= 128:
        raise UsageError(f"--dma-partitions {args.dma_partitions} must be in 1..128")
    if not 0 <= args.harness_size <= 128 or args.harness_size == 1:
        raise UsageError(f"--harness-size {args.harness_size} must be 0 or in 2..128")
    if args.harness_repeat < 1:
        raise UsageError(f"--harness-repeat must be >= 1, got {args.harness_repeat}")
    if args.psum_count < 1:
        raise UsageError(f"--psum-count must be >= 1, got {args.psum_count}")
    from ncrtl.model.modes import get_mode, pe_modes

    for spec in args.pe_modes.split(","):
        try:
            served = pe_modes(spec)
        except ValueError as e:
            raise UsageError(f"--pe-modes: {e}") from None
        if args.only in (None, "te") and args.te_size and get_mode("bf16") not in served:
            raise UsageError(
                f"--pe-modes {spec!r} does not serve bf16, the mode of the measured matmul"
            )
    return run_bench(args)


def _cmd_timing(args):
    """``ncrtl timing matmul``: figures of R nc_matmuls from the timing model alone."""
    from .model.modes import operations
    from .model.tensor_engine import timing

    if args.what != "matmul":
        raise UsageError(f"timing {args.what!r} is not a timing command; allowed: matmul")
    if args.dtype not in operations():
        raise UsageError(
            f"--dtype {args.dtype!r} is not allowed; allowed: {', '.join(operations())}"
        )
    for name in ("rows", "cols"):
        value = getattr(args, name)
        if not 1 <= value <= 255:
            raise UsageError(f"--{name} {value} must be in 1..255 (8-bit instruction fields)")
    if args.tile_unit < 1:
        raise UsageError(f"--tile-unit {args.tile_unit} must be at least 1")
    tile = None
    if args.tile_size is not None:
        try:
            tile = tuple(int(v) for v in args.tile_size.split(","))
        except ValueError:
            tile = ()
        if len(tile) != 2:
            raise UsageError(f"--tile-size {args.tile_size!r} must be ROWS,COLS (two integers)")
    rules = {
        "documented": timing.DOCUMENTED,
        "hdl": timing.HDL_SERIAL,
        "hdl-parallel": timing.HDL_PARALLEL,
        "hdl-background": timing.HDL_BACKGROUND,
        "one-chain": timing.ONE_CHAIN,
    }[args.rules]
    try:
        prog = timing.matmul_program(
            args.k,
            args.m,
            args.n,
            args.dtype,
            repeat=args.repeat,
            tile=tile,
            tiles=args.tiles,
            rows=args.rows,
            cols=args.cols,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sched = timing.simulate(prog, args.rows, args.cols, tile_unit=args.tile_unit, rules=rules)
    bad = next((r for r in sched.records if not r.accepted), None)
    if bad is not None:
        raise UsageError(
            f"instruction {bad.index} ({bad.instruction.op.name}) is rejected: "
            f"{bad.error.name}: {bad.message}"
        )
    mms = [r for r in sched.records if r.instruction.op == Op.MM]
    print(
        f"{args.repeat} x nc_matmul {args.dtype} K={args.k} M={args.m} N={args.n} on "
        f"{args.tiles} tile(s) of {tile or (args.rows, args.cols)}, {args.rows} x {args.cols} "
        f"array, {args.rules} rules"
    )
    print(f"total: {sched.total_cycles} cycles")
    print(f"steady state: {timing.steady_cycles(sched):.1f} cycles per matmul")
    print(f"first output: cycle {mms[0].outputs[0]}, last output: cycle {mms[-1].outputs[-1]}")
    start, stop = sched.mm_window()
    clock = timing.CLOCK_HZ
    if prog[0].transpose:
        moved = args.repeat * args.m * args.n  # N output vectors of M lanes each
        print(
            f"transposed: {moved / (stop - start):.1f} elements per cycle (first MM to the last "
            f"MM's end); a transpose does no multiply-accumulates (no utilization or TFLOPS)"
        )
        return _write_trace(args, sched, timing)
    print(
        f"utilization: {sched.utilization(start, stop):.3f} (first MM to the last MM's end), "
        f"{sched.utilization():.3f} (whole run)"
    )
    print(
        f"TFLOPS at {clock / 1e9:.1f} GHz: {sched.tflops(start, stop):.1f} (first MM to the "
        f"last MM's end), {sched.tflops():.1f} (whole run); peak "
        f"{timing.peak_tflops(args.rows, args.cols, prog[0].mode):.1f}"
    )
    return _write_trace(args, sched, timing)


def _write_trace(args, sched, timing):
    import json

    if args.trace:
        try:
            with open(args.trace, "w") as f:
                json.dump(timing.chrome_trace(sched), f)
        except OSError as exc:
            raise UsageError(f"cannot write --trace {args.trace}: {exc.strerror}") from None
        print(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
    return 0


def _shortcuts(parser):
    parser.add_argument("--rows", type=int, help="same as --param rows=N")
    parser.add_argument("--cols", type=int, help="same as --param cols=N")
    parser.add_argument("--mode", help="same as --param mode=NAME")


def build_parser():
    p = argparse.ArgumentParser(prog="ncrtl", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="list blocks, their parameters and groups")
    s.set_defaults(func=_cmd_list)

    s = sub.add_parser("verilog", help="write the Verilog of a block")
    s.add_argument("block")
    s.add_argument("--param", action="append", metavar="NAME=VALUE")
    s.add_argument("-o", "--output", default=".", help="output folder (default: .)")
    _shortcuts(s)
    s.set_defaults(func=_cmd_verilog)

    s = sub.add_parser("lint", help="verilator --lint-only -Wall and a Yosys latch check")
    s.add_argument("block")
    s.add_argument("--param", action="append", metavar="NAME=VALUE")
    _shortcuts(s)
    s.set_defaults(func=_cmd_lint)

    s = sub.add_parser("conformance", help="run hardware vs golden and print a summary")
    s.add_argument("block")
    s.add_argument("--param", action="append", metavar="NAME=VALUE")
    s.add_argument(
        "--count", type=int, default=10000, help="random vectors per unit (default 10000)"
    )
    s.add_argument("--seed", type=int, default=1)
    s.add_argument(
        "--stall",
        type=float,
        default=0.2,
        help="probability of an idle input cycle and of a backpressure cycle (default 0.2)",
    )
    s.add_argument("--junit", default="build/conformance.xml", help="JUnit XML report path")
    s.add_argument("--waves", action="store_true", help="record FST waveforms (same as WAVES=1)")
    _shortcuts(s)
    s.set_defaults(func=_cmd_conformance)

    s = sub.add_parser(
        "sim",
        help="simulate one Tensor Engine matmul (optionally accumulated in "
        "PSUM) and print its figures",
    )
    s.add_argument("what", help="matmul")
    s.add_argument("--rows", type=int, default=128)
    s.add_argument("--cols", type=int, default=128)
    s.add_argument(
        "--dtype",
        default="bf16",
        metavar="OPERATION",
        help=f"a mode's matmul or transpose (default bf16): "
        f"{', '.join(blocks.TE_MODES)}; with --psum: {', '.join(blocks.CORE_MODES)}; or an MX "
        f"dtype ({', '.join(MX_DTYPES)}): BF16 inputs quantized by the RTL QuantizeMX, then the "
        f"MX matmul, with the error against float64 (K partitions: a multiple of 32)",
    )
    s.add_argument(
        "--moving-dtype",
        metavar="MXDTYPE",
        help="the moving side's MX dtype (default: --dtype); the sides may differ",
    )
    s.add_argument(
        "--scale-rule",
        choices=("trn3", "ocp"),
        default="trn3",
        help="QuantizeMX scale rule of the MX chain (default trn3)",
    )
    s.add_argument("--k", type=int, default=128)
    s.add_argument("--m", type=int, default=128)
    s.add_argument("--n", type=int, default=512)
    s.add_argument(
        "--psum",
        choices=("fp32", "bf16"),
        help="write the result into PSUM (Tensor Engine + PSUM): K is split into "
        "K / rows matmuls accumulated in one group of this dtype",
    )
    s.add_argument(
        "--rounding",
        choices=("rne", "sr"),
        default="rne",
        help="BF16 PSUM rounding (with --psum bf16)",
    )
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--waves", action="store_true")
    s.set_defaults(func=_cmd_sim)

    s = sub.add_parser(
        "timing",
        help="figures of back-to-back nc_matmuls from the timing model alone (no RTL)",
    )
    s.add_argument("what", help="matmul")
    s.add_argument("--k", type=int, default=128, help="contraction rows K (default 128)")
    s.add_argument("--m", type=int, default=128, help="stationary free size M (default 128)")
    s.add_argument("--n", type=int, default=512, help="moving free size N (default 512)")
    s.add_argument(
        "--dtype",
        default="bf16",
        metavar="OPERATION",
        help=f"a mode's matmul or transpose (default bf16): {', '.join(blocks.TE_MODES)}",
    )
    s.add_argument("--repeat", type=int, default=16, help="nc_matmuls back to back (default 16)")
    s.add_argument(
        "--tile-size",
        metavar="ROWS,COLS",
        help="tile of each matmul (default: the whole array), e.g. 32,128 for row tiles",
    )
    s.add_argument(
        "--tiles",
        type=int,
        default=1,
        help="spread the matmuls over this many different tiles of --tile-size (default 1)",
    )
    s.add_argument("--rows", type=int, default=128, help="array rows (default 128)")
    s.add_argument("--cols", type=int, default=128, help="array columns (default 128)")
    s.add_argument(
        "--tile-unit", type=int, default=32, help="the smallest tile (default 32, the hardware's)"
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
    s.add_argument("--trace", metavar="FILE", help="write a Chrome / Perfetto trace (JSON)")
    s.set_defaults(func=_cmd_timing)

    s = sub.add_parser("bench", help="benchmarks: generation, build and simulation speed")
    s.add_argument("--count", type=int, default=200000, help="vectors per unit for throughput")
    s.add_argument(
        "--only",
        choices=("pe", "fp", "harness", "te", "psum", "dma"),
        help="run one section: the PE in a C++ loop, the FP units, the testbench against a C++ "
        "loop, the Tensor Engine, PSUM or the DMA engine's bandwidth",
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
        help="PSUM partitions to measure, 8 banks x 2 KiB (0 skips it)",
    )
    s.add_argument(
        "--psum-count",
        type=int,
        default=1000,
        help="random Tensor Engine beats of the PSUM program (default 1000)",
    )
    s.add_argument(
        "--te-size",
        type=int,
        default=128,
        help="Tensor Engine array size to measure (0 skips it; 128 takes ~15 minutes)",
    )
    s.add_argument(
        "--pe-modes",
        default="all",
        help="PE builds to measure, comma-separated, each in turn: all (default, every mode), "
        "a family (bf16, fp8, fp32, mx) or modes joined by '+'; --only te: each must serve "
        "bf16 (the measured matmul); --only pe: each build's operations",
    )
    s.add_argument(
        "--harness-size",
        type=int,
        default=16,
        help="engine size of the testbench-against-C++-loop measurement (default 16; 0 skips it)",
    )
    s.add_argument(
        "--harness-repeat",
        type=int,
        default=40,
        help="bf16 matmuls (K = M = size, N = 512) it streams back to back (default 40)",
    )
    s.set_defaults(func=_cmd_bench)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, blocks.BlockError) as exc:
        print(f"ncrtl: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
