"""``ncrtl list``: the blocks, their parameters and groups."""

from .. import blocks


def _cmd_list(args):
    """Every block and its parameters; a parameter of the conformance program or of the
    simulation build (not of the design) is marked ``[program]`` or ``[build]``."""
    for b in blocks.all_blocks():
        print(f"{b.name:14s} {b.summary}")
        for p in b.params:
            choices = f" (one of: {', '.join(map(str, p.choices))})" if p.choices else ""
            role = "" if p.role == "hardware" else f" [{p.role}]"
            print(
                f"{'':16s}--param {p.name}=<{p.kind.__name__}>{role}  default {p.default!r}"
                f"{choices}: {p.help}"
            )
        for name, source in b.follows:
            print(f"{'':16s}{name} follows {source} unless given")
        for name, values in b.presets.items():
            shown = ", ".join(f"{k}={v}" for k, v in values.items())
            print(f"{'':16s}preset {name}: {shown}")
    for g, members in blocks.GROUPS.items():
        names = sorted({b for b, _ in members})
        print(f"{g:14s} group of {len(members)} configurations of {', '.join(names)}")
    return 0


def add_parser(sub, raw):
    """The ``list`` subcommand's arguments."""
    s = sub.add_parser("list", help="list blocks, their parameters and groups")
    s.set_defaults(func=_cmd_list)
