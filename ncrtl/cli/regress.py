"""``ncrtl regress``: a plan of conformance, kernel and timing runs on a Dask cluster."""

import sys

from ..testbench.outputs import check_output
from .common import UsageError


def _cmd_regress(args):
    from ..testbench import regress

    try:
        tasks = regress.expand(regress.load_plan(args.plan))
    except regress.PlanError as exc:
        raise UsageError(str(exc)) from None
    if args.cluster and args.jobqueue:
        raise UsageError("--cluster and --jobqueue name two clusters; give one")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    for item in args.jobqueue_option or ():
        if "=" not in item:
            raise UsageError(f"--jobqueue-option {item!r} is not of the form KEY=VALUE")
    if args.junit:
        check_output(args.junit, "--junit")
    check_output(args.out, "--out", folder=True)
    designs = len({t.design for t in tasks if t.design})
    print(
        f"regress: {len(tasks)} task(s) from {args.plan} "
        f"({', '.join(f'{n} {k}' for k, n in _kinds(tasks))}; {designs} design(s) to build)",
        flush=True,
    )
    try:
        client, cluster = regress.start_client(
            cluster=args.cluster,
            jobqueue=args.jobqueue,
            workers=args.workers,
            jobqueue_options=args.jobqueue_option or (),
        )
    except regress.PlanError as exc:
        raise UsageError(str(exc)) from None
    where = args.cluster or (f"{args.jobqueue} jobs" if args.jobqueue else "a local cluster")
    print(f"on {where}: {len(client.scheduler_info()['workers'])} worker(s) now", flush=True)
    interrupted = False
    try:
        results = regress.run_plan(tasks, client, progress=True)
        interrupted = any(r.message == "interrupted" for r in results)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    paths = regress.write_results(tasks, results, args.out, junit=args.junit)
    print(regress.summary_table(tasks, results))
    print(f"results: {paths['summary']}, {paths['csv']}, {paths['junit']}")
    if interrupted:
        print(
            "interrupted: the tasks that had not finished are reported as errors", file=sys.stderr
        )
        return 130
    return 0 if all(r.status == "pass" for r in results) else 1


def _kinds(tasks):
    counts = {}
    for t in tasks:
        counts[t.kind] = counts.get(t.kind, 0) + 1
    return counts.items()


def add_parser(sub, raw):
    """The ``regress`` subcommand's arguments."""
    s = sub.add_parser(
        "regress",
        help="run a plan of conformance, kernel and timing runs on a Dask cluster",
        description=(
            "Expand PLAN.toml (tables [[conformance]], [[run]], [[timing]]; list values are "
            "crossed) into tasks and run them on a local Dask cluster of this machine's cores, "
            "on the scheduler at --cluster, or on workers asked of a farm with --jobqueue "
            "(docs/regress.md).  Needs the extra ncrtl[cluster]."
        ),
        formatter_class=raw,
    )
    s.add_argument("plan", help="the plan (TOML)")
    s.add_argument("--cluster", help="a Dask scheduler's address (tcp://host:8786)")
    s.add_argument(
        "--jobqueue",
        choices=("slurm", "lsf", "pbs", "sge", "htcondor"),
        help="ask the farm for workers through dask-jobqueue",
    )
    s.add_argument(
        "--jobqueue-option",
        action="append",
        metavar="KEY=VALUE",
        help="a dask-jobqueue cluster option (queue=..., cores=4, memory=16GB, walltime=...)",
    )
    s.add_argument(
        "--workers",
        type=int,
        help="local worker processes (default: the machine's cores), or jobs asked of the farm",
    )
    s.add_argument("--junit", help="JUnit XML of every task (default OUT/junit.xml)")
    s.add_argument(
        "--out",
        default="build/regress",
        help="folder for summary.txt, results.csv, results.json and junit.xml "
        "(default build/regress)",
    )
    s.set_defaults(func=_cmd_regress)
