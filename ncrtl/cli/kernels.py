"""``ncrtl kernels``: the shipped example kernels."""


def _cmd_kernels(args):
    from ..kernels import EXAMPLES

    width = max(len(n) for n in EXAMPLES)
    for name, e in EXAMPLES.items():
        print(f"{name:{width}s}  {e.file}::{e.function}  {e.description}")
    print("run one: ncrtl run --example NAME [--out DIR --trace T.json]")
    return 0


def add_parser(sub, raw):
    s = sub.add_parser("kernels", help="list the shipped example NKI kernels")
    s.set_defaults(func=_cmd_kernels)
