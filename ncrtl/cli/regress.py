"""``ncrtl regress``: a plan of conformance, kernel and timing runs on a Dask cluster."""

import contextlib
import io
import re
import sys
import tempfile

from .. import blocks
from ..testbench.outputs import OutputError, check_output
from .common import UsageError


def _cmd_regress(args):
    from ..testbench import regress

    cluster = dict(
        cluster=args.cluster,
        jobqueue=args.jobqueue,
        workers=args.workers,
        jobqueue_options=args.jobqueue_option or (),
        connect_timeout=args.connect_timeout,
    )
    try:
        regress.check_cluster(**cluster)
        if args.max_tasks < 1:
            raise regress.PlanError(f"--max-tasks {args.max_tasks} must be >= 1")
        timeout = regress.check_timeout(args.task_timeout, "--task-timeout")
        plan = regress.load_plan(args.plan)
        try:
            tasks = regress.expand(plan, max_tasks=args.max_tasks, timeout=timeout)
        except regress.PlanError as exc:
            raise regress.PlanError(f"{args.plan}: {exc}") from None
    except (regress.PlanError, regress.ClusterError) as exc:
        raise UsageError(str(exc)) from None
    check_tasks(tasks, args.plan)
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
        client, cluster = regress.start_client(**cluster)
    except regress.ClusterError as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        print("interrupted while the cluster started: no task ran", file=sys.stderr)
        return 130
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


def check_tasks(tasks, plan="plan"):
    """Check every task as its command checks it, before any cluster starts: its arguments
    parsed by the command's own parser, then the command module's ``check`` (everything the
    command refuses before its work), with the outputs where :func:`regress.run_task` puts
    them.  The first task refused is one :class:`UsageError` naming the plan, the table, the
    task and its combination, and the command's message; nothing is printed for the others."""
    from ..testbench import progress, regress
    from . import build_parser, conformance, run, timing

    checks = {"conformance": conformance.check, "run": run.check, "timing": timing.check}
    parser = build_parser()
    with (
        tempfile.TemporaryDirectory(prefix="ncrtl-regress-check-") as tmp,
        progress.step(f"checking {len(tasks):,} task(s)") as state,
    ):
        for i, task in enumerate(tasks):
            state["detail"] = f"{i:,} checked"
            said = io.StringIO()  # what the command would print (a PE build, usage) is not said
            try:
                with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
                    checks[task.kind](parser.parse_args(regress.command_argv(task, tmp)))
            except SystemExit as exc:  # argparse: it printed its message and exited
                raise UsageError(f"{plan}: {task.origin}: {_argparse_message(said, exc)}") from None
            except (UsageError, blocks.BlockError, OutputError) as exc:
                raise UsageError(f"{plan}: {task.origin}: {exc}") from None


def _argparse_message(said, exc):
    """argparse's last line (``ncrtl timing: error: ...``) without its prefix."""
    lines = [line for line in said.getvalue().splitlines() if line.strip()]
    if not lines:
        return f"its arguments stop the command before it runs (exit status {exc.code})"
    return re.sub(r"^ncrtl( \w+)?: error: ", "", lines[-1])


def _kinds(tasks):
    counts = {}
    for t in tasks:
        counts[t.kind] = counts.get(t.kind, 0) + 1
    return counts.items()


def add_parser(sub, raw):
    """The ``regress`` subcommand's arguments."""
    from ..testbench.regress import (
        CONNECT_TIMEOUT,
        JOBQUEUES,
        MAX_JOBS,
        MAX_TASKS,
        TASK_TIMEOUT,
        WORKERS_PER_CORE,
    )

    s = sub.add_parser(
        "regress",
        help="run a plan of conformance, kernel and timing runs on a Dask cluster",
        description=(
            "Expand PLAN.toml (tables [[conformance]], [[run]], [[timing]]; list values are "
            "crossed) into tasks, check every task as its command does, and run them on a "
            "local Dask cluster of this machine's cores, on the scheduler at --cluster, or on "
            "workers asked of a farm with --jobqueue (docs/regress.md).  Needs the extra "
            "ncrtl[cluster]."
        ),
        formatter_class=raw,
    )
    s.add_argument("plan", help="the plan (TOML)")
    s.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="a Dask scheduler's address, [tcp|tls|ws|wss|ucx://]HOST:PORT (tcp://host:8786)",
    )
    s.add_argument(
        "--connect-timeout",
        type=float,
        default=CONNECT_TIMEOUT,
        metavar="SECONDS",
        help=f"seconds to wait for the scheduler at --cluster (default {CONNECT_TIMEOUT:g})",
    )
    s.add_argument(
        "--jobqueue",
        choices=tuple(JOBQUEUES),
        help="ask the farm for workers through dask-jobqueue (its submit command on PATH)",
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
        help=f"local worker processes (default: the machine's cores; at most "
        f"{WORKERS_PER_CORE} per core), or jobs asked of the farm (at most {MAX_JOBS})",
    )
    s.add_argument(
        "--task-timeout",
        type=float,
        default=TASK_TIMEOUT,
        metavar="SECONDS",
        help=f"a task's time limit unless its table gives timeout: past it the task's processes "
        f"are ended and it is an error (default {TASK_TIMEOUT:g}, an hour)",
    )
    s.add_argument(
        "--max-tasks",
        type=int,
        default=MAX_TASKS,
        metavar="N",
        help=f"refuse a plan of more than N tasks (default {MAX_TASKS:,})",
    )
    s.add_argument("--junit", help="JUnit XML of every task (default OUT/junit.xml)")
    s.add_argument(
        "--out",
        default="build/regress",
        help="folder for summary.txt, results.csv, results.json and junit.xml "
        "(default build/regress)",
    )
    s.set_defaults(func=_cmd_regress)
