"""``ncrtl conformance``: hardware against the golden, with a summary and a JUnit report."""

from ..testbench.outputs import check_output
from .common import (
    UsageError,
    _block_args,
    _blocks_epilog,
    _check_seed,
    _check_stall,
    _expand,
    _seed_arg,
    _shortcuts,
)


def check(args):
    """Everything ``ncrtl conformance`` refuses before it builds: the count, the seed, the
    stall, the report's path, the block, its parameters and their build, and the program
    against the design.  Returns the runs (block, parameters); :class:`UsageError` (or the
    block's error) naming the first rule broken."""
    if args.count < 1:
        raise UsageError(f"--count must be >= 1, got {args.count}")
    _check_seed(args.seed)
    _check_stall(args.stall)
    if args.junit:
        check_output(args.junit, "--junit")
    return _expand(args.block, args.param, args, run=True)  # last: it says the PE build


def _cmd_conformance(args):
    from ncrtl.testbench.conformance import run_conformance

    runs = check(args)
    return run_conformance(
        runs,
        count=args.count,
        seed=args.seed,
        junit=args.junit,
        stall=args.stall,
        waves=args.waves,
        progress=True,
    )


def add_parser(sub, raw):
    """The ``conformance`` subcommand's arguments."""
    s = sub.add_parser(
        "conformance",
        help="run hardware vs golden and print a summary",
        epilog=_blocks_epilog(),
        formatter_class=raw,
    )
    _block_args(s)
    s.add_argument(
        "--count",
        type=int,
        default=10000,
        help="size of the random stimulus, >= 1 (default 10000): random vectors per unit for "
        "the FP units; each block says what it runs (exhaustive sets and fixed programs "
        "ignore it) in the first lines of the output",
    )
    _seed_arg(s)
    s.add_argument(
        "--stall",
        type=float,
        default=0.2,
        help="probability of an idle input cycle and of a backpressure cycle, in [0, 1) "
        "(default 0.2)",
    )
    s.add_argument(
        "--junit",
        default="build/conformance.xml",
        help="JUnit XML report path (default build/conformance.xml)",
    )
    s.add_argument(
        "--waves", action="store_true", help="record FST waveforms (same as WAVES=1; default off)"
    )
    _shortcuts(s)
    s.set_defaults(func=_cmd_conformance)
