"""The ``ncrtl`` command line: generate Verilog, lint, run conformance and benchmarks.

Every command takes a block name from :mod:`ncrtl.blocks` (``ncrtl list`` shows them) and block
parameters as ``--param name=value``.  Bad input (unknown block, parameter or value, a seed, a
probability or a size out of range, a path that cannot be written, a matrix file that does not
fit) gets one line naming the bad value and the rule, and exit status 2, before anything is
built.
"""

import argparse
import sys

from .. import blocks
from ..testbench.outputs import OutputError
from . import bench, conformance, kernels, lint, regress, run, sim, timing, verilog
from . import list as list_command
from .common import UsageError

__all__ = ["main", "build_parser", "UsageError"]

#: The subcommands, in the order ``ncrtl --help`` lists them: one module each.
COMMANDS = (list_command, verilog, lint, conformance, sim, timing, run, kernels, regress, bench)


def build_parser():
    p = argparse.ArgumentParser(prog="ncrtl", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    raw = argparse.RawDescriptionHelpFormatter
    for command in COMMANDS:
        command.add_parser(sub, raw)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, blocks.BlockError, OutputError) as exc:
        print(f"ncrtl: error: {exc}", file=sys.stderr)
        return 2
