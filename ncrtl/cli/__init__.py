"""The ``ncrtl`` command line: generate Verilog, lint, run conformance and benchmarks.

Every command takes a block name from :mod:`ncrtl.blocks` (``ncrtl list`` shows them) and block
parameters as ``--param name=value``.  Bad input (unknown block, parameter or value, a seed, a
probability or a size out of range, a path that cannot be written, a matrix file that does not
fit) gets one line naming the bad value and the rule, and exit status 2, before anything is
built; a command line argparse cannot parse too (``ncrtl run: error: ... (ncrtl run --help)``,
no usage block).
"""

import argparse
import sys

from .. import blocks
from ..testbench.outputs import OutputError
from . import bench, conformance, kernels, lint, regress, run, sim, timing, verilog
from . import list as list_command
from .common import UsageError

__all__ = ["main", "build_parser", "UsageError", "ArgumentError"]

#: The subcommands, in the order ``ncrtl --help`` lists them: one module each.
COMMANDS = (list_command, verilog, lint, conformance, sim, timing, run, kernels, regress, bench)


class ArgumentError(UsageError):
    """A command line argparse cannot parse: ``prog`` (``ncrtl run``) and the message, which
    points at ``prog --help`` in place of argparse's usage block."""

    def __init__(self, prog, message):
        super().__init__(f"{message} ({prog} --help)")
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """An argparse parser (and, as their parser class, its subcommands') whose errors are one
    line: :class:`ArgumentError` in place of a usage block and ``SystemExit``."""

    def error(self, message):
        raise ArgumentError(self.prog, message)

    def parse_args(self, args=None, namespace=None):
        # the top level sees the arguments no subcommand took: blame the subcommand
        args, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(args, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            raise ArgumentError(prog, f"unrecognized arguments: {' '.join(extra)}")
        return args


def build_parser():
    p = _Parser(prog="ncrtl", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    raw = argparse.RawDescriptionHelpFormatter
    for command in COMMANDS:
        command.add_parser(sub, raw)
    return p


def main(argv=None):
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except ArgumentError as exc:
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except (UsageError, blocks.BlockError, OutputError) as exc:
        print(f"ncrtl: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        # the sizes a command takes are checked before it allocates; this is a last resort
        print(
            "ncrtl: error: out of memory: this machine could not hold what the command "
            "allocates (a smaller size, or a machine with more memory)",
            file=sys.stderr,
        )
        return 2
