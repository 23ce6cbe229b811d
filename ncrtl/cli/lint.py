"""``ncrtl lint``: Verilator's lint and a Yosys synthesis without latches."""

from .common import _block_args, _blocks_epilog, _expand, _shortcuts


def _cmd_lint(args):
    from ncrtl.testbench import progress
    from ncrtl.testbench.lint import lint_verilog, synth_check

    failed = 0
    for block, params in _expand(args.block, args.param, args):
        top = block.top_name(params)
        with progress.step(f"Verilog generation of {top}"):
            text, top = block.verilog(params)
        with progress.step(f"Verilator lint of {top}"):
            lint = lint_verilog(text, top)
        with progress.step(f"Yosys synthesis of {top}"):
            checks = [synth_check(t, name) for t, name in block.synthesis_units(params)]
        synth = next((c for c in checks if not c.ok), checks[0])
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


def add_parser(sub, raw):
    """The ``lint`` subcommand's arguments."""
    s = sub.add_parser(
        "lint",
        help="verilator --lint-only -Wall and a Yosys latch check",
        epilog=_blocks_epilog(),
        formatter_class=raw,
    )
    _block_args(s)
    _shortcuts(s)
    s.set_defaults(func=_cmd_lint)
