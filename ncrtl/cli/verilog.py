"""``ncrtl verilog``: a block's Verilog."""

import time

from .. import blocks
from ..testbench.outputs import check_output, write_output
from .common import _block_args, _blocks_epilog, _parse_params, _shortcuts


def _cmd_verilog(args):
    from ncrtl.testbench import progress

    block = blocks.get(args.block)
    params = block.resolve(_parse_params(args.param, args))
    out = check_output(args.output, "-o", folder=True)
    t0 = time.perf_counter()
    with progress.step(f"Verilog generation of {block.top_name(params)}"):
        text, top = block.verilog(params)
    path = out / f"{top}.v"
    write_output(out, "-o", lambda folder: path.write_text(text), folder=True)
    print(
        f"wrote {path} ({len(text.splitlines())} lines, top module {top}) "
        f"in {time.perf_counter() - t0:.2f} s"
    )
    return 0


def add_parser(sub, raw):
    """The ``verilog`` subcommand's arguments."""
    s = sub.add_parser(
        "verilog", help="write the Verilog of a block", epilog=_blocks_epilog(), formatter_class=raw
    )
    _block_args(s, groups=False)
    s.add_argument(
        "-o",
        "--output",
        default=".",
        help="output folder, created if missing (default: the current folder)",
    )
    _shortcuts(s)
    s.set_defaults(func=_cmd_verilog)
