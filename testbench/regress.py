"""Regressions on a Dask cluster: a plan (TOML) expanded into tasks, run by Dask workers (a local
cluster by default, a scheduler's address, or a farm through dask-jobqueue), results in one place.

A plan is a TOML file of tables, each a grid whose list values are crossed
(docs/regress.md)::

    [[conformance]]            # ncrtl conformance BLOCK --param ... --count --seed --stall
    block = ["fp.add", "fp.mul"]
    count = [200]
    seed = [1, 2]

    [[run]]                    # ncrtl run KERNEL (or --example NAME) --core ... [--rtl ...]
    example = ["matmul_basic"]
    core = ["v3", "v4"]

    [[run]]                    # a kernel over shapes: random tensors (ncrtl run --shapes)
    kernel = "ncrtl/kernels/matmul.py::matmul_tiled"
    shapes = ["256x128:bfloat16 256x512:bfloat16", "512x128:bfloat16 512x512:bfloat16"]

    [[timing]]                 # ncrtl timing matmul ARGS
    args = ["--k 128 --n 512", "--sparse 4:16 --n 512"]
    timeout = 600              # seconds a task may run (default TASK_TIMEOUT)

Every task carries the one ``ncrtl`` command that reproduces it on one machine.  A task is a
*pass*, a *fail* (a mismatch, a rule broken: the command's verdict) or an *error* (the task
died: its worker was lost twice, it raised, or it ran past its time limit); an error is never
counted as a pass.

The plan's own rules (its tables, keys, the type of every value, the number of tasks) are
here; each task's arguments are its command's to check (``ncrtl regress`` asks the command
before any cluster starts).  A task runs in a process group of its own, which is ended when the
task runs past its time limit, is cancelled, or its worker dies.

Dask (``distributed``, ``dask-jobqueue``) is the optional extra ``ncrtl[cluster]``; everything
else here is plain Python, so plans are checked before any cluster starts.
"""

import contextlib
import csv
import io
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from xml.etree import ElementTree

import tomllib

from .regress_leader import GRACE

__all__ = [
    "PlanError",
    "ClusterError",
    "Task",
    "TaskResult",
    "load_plan",
    "parse_plan",
    "count_tasks",
    "expand",
    "command_argv",
    "run_task",
    "check_cluster",
    "start_client",
    "run_plan",
    "write_results",
    "summary_table",
    "JOBQUEUES",
    "MAX_TASKS",
    "TASK_TIMEOUT",
    "GRACE",
]

#: The plan's tables and the keys each takes (a value or a list of values; lists are crossed).
TABLES = {
    "conformance": ("block", "mode", "geometry", "param", "count", "seed", "stall", "timeout"),
    "run": (
        "kernel",
        "example",
        "args",
        "shapes",
        "kwarg",
        "core",
        "seed",
        "rtl",
        "partitions",
        "rows",
        "cols",
        "dma_engines",
        "timeout",
    ),
    "timing": ("args", "timeout"),
}

#: The type of each key's values (a list of them is crossed): ``float`` takes an integer too;
#: ``dict`` is a TOML table of scalars (``param = { sparse = 1 }``).  A value's range is its
#: command's rule (the task's command checks it), never repeated here.
KEY_TYPES = {
    "block": (str,),
    "mode": (str,),
    "geometry": (str,),
    "param": (str, dict),
    "count": (int,),
    "seed": (int,),
    "stall": (float,),
    "kernel": (str,),
    "example": (str,),
    "args": (str,),
    "shapes": (str,),
    "kwarg": (str, dict),
    "core": (str,),
    "rtl": (bool,),
    "partitions": (int,),
    "rows": (int,),
    "cols": (int,),
    "dma_engines": (int,),
    "timeout": (float,),
}

#: Keys that take one value, never a list to cross: a time limit is not a variant of a task.
SINGLE = ("timeout",)

#: The most tasks a plan may expand to without ``--max-tasks``: a grid of a few long lists
#: crosses to millions by accident (each task a process, each result a row).
MAX_TASKS = 10_000

#: A task's time limit in seconds unless its table gives ``timeout``: an hour, above the
#: longest task of the project (a 128 x 128 conformance build and run, 4 to 10 minutes), so
#: that a kernel that loops forever ends as an error instead of holding its worker.
TASK_TIMEOUT = 3600.0

#: The command a task's arguments are given to: the ``ncrtl`` of this Python.
NCRTL = (sys.executable, "-m", "ncrtl.cli")


#: Seconds between a running task's looks at its deadline and at its cancellation.
POLL = 0.2

#: ``--jobqueue`` names and their dask-jobqueue cluster classes.
JOBQUEUES = {
    "slurm": "SLURMCluster",
    "lsf": "LSFCluster",
    "pbs": "PBSCluster",
    "sge": "SGECluster",
    "htcondor": "HTCondorCluster",
}

#: The command each farm's jobs are submitted with: it must be on PATH (the farm's submit host).
SUBMIT = {
    "slurm": "sbatch",
    "lsf": "bsub",
    "pbs": "qsub",
    "sge": "qsub",
    "htcondor": "condor_submit",
}

#: Local worker processes per core at most: each runs one task's simulator, so more than a few
#: per core only queue for the CPU (and each costs its memory).
WORKERS_PER_CORE = 4

#: The most jobs ``--jobqueue`` asks of a farm at once.
MAX_JOBS = 1000

#: Seconds to wait for the scheduler at ``--cluster`` (its address is checked before).
CONNECT_TIMEOUT = 5.0

#: The schemes of a Dask scheduler's address.
SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")


class PlanError(ValueError):
    """A plan that cannot be expanded: the message names the table, the key and the rule."""


class ClusterError(ValueError):
    """A cluster that cannot be used (its options, its address, a scheduler that does not
    answer): the message names the option and the rule."""


@dataclass(frozen=True)
class Task:
    """One unit of work: ``kind`` (a plan table), ``argv`` (the ``ncrtl`` arguments that run
    it), ``label`` (what the summary groups it under: block and mode, kernel and its inputs
    and core, or timing), ``design`` (the build it needs, for grouping; None when it builds
    nothing), ``timeout`` (seconds it may run) and ``origin`` (where the plan makes it: its
    table, grid, task number and combination)."""

    index: int
    kind: str
    argv: tuple
    label: str
    design: str = None
    timeout: float = TASK_TIMEOUT
    origin: str = ""

    @property
    def command(self):
        """The one command that reproduces the task on one machine."""
        return "ncrtl " + " ".join(shlex.quote(a) for a in self.argv)


@dataclass
class TaskResult:
    """What a task gave: ``status`` (``pass``, ``fail``, ``error``), the figures of its kind
    (``vectors``, ``mismatches``, ``cycles``, ``te_utilization``, ``tflops``, ...), its wall
    seconds, the worker it ran on, and a message for a fail or an error."""

    index: int
    status: str
    seconds: float = 0.0
    worker: str = ""
    message: str = ""
    figures: dict = field(default_factory=dict)


# -- the plan ------------------------------------------------------------------------------------


def load_plan(path):
    """The plan's tables from a TOML file: ``{table: [grid dicts]}``; :class:`PlanError` for a
    file that is not UTF-8 TOML or breaks a rule of :func:`parse_plan`."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise PlanError(f"plan {path}: cannot be read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError(
            f"plan {path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            f"a plan is TOML, which is UTF-8"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"plan {path}: not TOML ({exc})") from None
    return parse_plan(data, str(path))


def _toml(value):
    """``value`` as the plan writes it (strings quoted, booleans true / false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean (true or false)",
    dict: "a table of name = value",
    list: "a list",
}


def _type_name(value):
    for t in (bool, str, int, float, dict, list):
        if isinstance(value, t):
            return _TYPE_NAMES[t]
    return type(value).__name__


def _is(value, t):
    if isinstance(value, bool):  # TOML's true is Python's 1: never a number here
        return t is bool
    if t is float:
        return isinstance(value, (int, float))
    if t is dict:
        return isinstance(value, dict) and all(
            isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value.values()
        )
    return isinstance(value, t)


def _check_key(where, key, value):
    """A key's value (or each of its list's values) against :data:`KEY_TYPES`: one line
    naming the key, the value and the type it takes."""
    types = KEY_TYPES[key]
    takes = " or ".join(_TYPE_NAMES[t] for t in types)
    if isinstance(value, list):
        if key in SINGLE:
            raise PlanError(f"{where}: {key} = {_toml(value)}: {key} takes one value, {takes}")
        if not value:
            raise PlanError(
                f"{where}: {key} = [] gives no value, so no task; give a value or a list of them"
            )
        values = value
    else:
        values = [value]
    for v in values:
        if not any(_is(v, t) for t in types):
            raise PlanError(f"{where}: {key} = {_toml(v)} is {_type_name(v)}; {key} takes {takes}")
    if key == "timeout":
        check_timeout(value, f"{where}: timeout =")


def check_timeout(value, what):
    """A time limit: a positive, finite number of seconds; :class:`PlanError` naming ``what``
    (the plan's key or the option) otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(f"{what} {_toml(value)} is not a number of seconds")
    if not (math.isfinite(value) and value > 0):
        raise PlanError(f"{what} {value:g} must be a positive number of seconds")
    return float(value)


def parse_plan(data, where="plan"):
    """The plan's tables ``{table: [grid dicts]}`` from TOML's data: every table one the plan
    takes (a table or an array of tables), every key one its table takes, every value of the
    key's type (:data:`KEY_TYPES`), no empty list; :class:`PlanError` naming the first broken
    rule."""
    out = {}
    for table, grids in data.items():
        if table not in TABLES:
            raise PlanError(
                f"{where}: table [[{table}]] is not one a plan takes; tables: "
                f"{', '.join(f'[[{t}]]' for t in TABLES)}"
            )
        if isinstance(grids, dict):
            grids = [grids]
        if not isinstance(grids, list) or not all(isinstance(g, dict) for g in grids):
            raise PlanError(
                f"{where}: {table} = {_toml(grids)} is not a table; write [[{table}]] and its "
                f"keys below it"
            )
        for i, grid in enumerate(grids):
            here = f"{where}: [[{table}]] #{i + 1}"
            for key, value in grid.items():
                if key not in TABLES[table]:
                    raise PlanError(
                        f"{here}: key {key!r} is not one it takes; keys: {', '.join(TABLES[table])}"
                    )
                _check_key(here, key, value)
        out[table] = list(grids)
    if not out:
        raise PlanError(f"{where}: no table; a plan has [[conformance]], [[run]] or [[timing]]")
    return out


def _grid_tasks(grid):
    """How many tasks a grid crosses to: the product of its lists' lengths."""
    return math.prod(len(v) for k, v in grid.items() if isinstance(v, list) and k not in SINGLE)


def count_tasks(plan):
    """How many tasks a plan expands to, without expanding it."""
    return sum(_grid_tasks(g) for grids in plan.values() for g in grids)


def _cross(grid):
    """Every combination of a grid's values (a scalar is a list of one); ``timeout`` is not
    crossed."""
    keys = [k for k in grid if k not in SINGLE]
    values = [grid[k] if isinstance(grid[k], list) else [grid[k]] for k in keys]
    for combo in itertools.product(*values):
        yield dict(zip(keys, combo))


def expand(plan, *, max_tasks=MAX_TASKS, timeout=TASK_TIMEOUT):
    """The tasks of a plan, in plan order, each with its time limit (its table's ``timeout``,
    else ``timeout``); :class:`PlanError` for a plan of more than ``max_tasks`` tasks (counted
    before any is made) or a combination that makes no task (a block unknown, no kernel),
    naming the table, the combination and the rule.  Each task's arguments are its command's
    to check (``ncrtl regress`` does, before any cluster starts)."""
    from ncrtl import blocks

    n = count_tasks(plan)
    if n > max_tasks:
        raise PlanError(
            f"the plan crosses to {n:,} tasks, more than the limit of {max_tasks:,}; give "
            f"--max-tasks {n} to run them all"
        )
    tasks = []
    for table, grids in plan.items():
        for i, grid in enumerate(grids):
            limit = float(grid.get("timeout", timeout))
            for combo in _cross(grid):
                where = f"[[{table}]] #{i + 1} task {len(tasks) + 1} {_toml(combo)}"
                build = {"conformance": _conformance, "run": _run, "timing": _timing}[table]
                try:
                    argv, label, design = build(combo, blocks)
                except (blocks.BlockError, ValueError) as exc:
                    raise PlanError(f"{where}: {exc}") from None
                tasks.append(Task(len(tasks), table, tuple(argv), label, design, limit, where))
    return tasks


def _params(value):
    """A ``param`` value: a table ``{name = value}`` or a ``"name=value"`` string."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if "=" not in value:
        raise ValueError(f"param {value!r} is not of the form name=value")
    k, v = value.split("=", 1)
    return {k.strip(): v.strip()}


def _conformance(c, blocks):
    if "block" not in c:
        raise ValueError("a [[conformance]] task needs a block")
    block = blocks.get(c["block"])
    user = _params(c.get("param"))
    if "mode" in c:
        user["mode"] = c["mode"]
    if "geometry" in c:
        g = c["geometry"].lower().split("x")
        if len(g) != 2 or not all(x.isdigit() for x in g):
            raise ValueError(f"geometry {c['geometry']!r} is not ROWSxCOLS (8x8)")
        user["rows"], user["cols"] = g
    params, _ = block.resolve_run(user)  # the build the command makes: the task's design
    argv = ["conformance", block.name]
    argv += [f"--param={k}={v}" for k, v in user.items()]
    for key in ("count", "seed", "stall"):  # the command's defaults where the plan gives none
        if key in c:
            argv += [f"--{key}", str(c[key])]
    label = block.name + (f" mode={params['mode']}" if "mode" in params else "")
    return argv, label, block.top_name(params)


#: The ``[[run]]`` keys passed as ``--KEY VALUE`` (``dma_engines`` as ``--dma-engines``) and
#: that tell one kernel run from another in the summary; ``seed`` only changes the values.
_RUN_FLAGS = ("core", "seed")
_RTL_FLAGS = ("partitions", "rows", "cols", "dma_engines")


def _run(c, blocks):
    if ("kernel" in c) == ("example" in c):
        raise ValueError("a [[run]] task names a kernel (FILE.py::FUNCTION) or an example")
    what = c.get("example") or c["kernel"]
    argv = ["run"] + (["--example", what] if "example" in c else [what])
    label = [what]
    if c.get("args"):  # one task's device tensors: "q.npy:bfloat16 k.npy:bfloat16"
        argv += ["--args", *c["args"].split()]
        label.append(c["args"])
    if c.get("shapes"):  # one task's tensors: "128x512:bfloat16 512x512:bfloat16"
        argv += ["--shapes", *c["shapes"].split()]
        label.append(c["shapes"])
    kwargs = c.get("kwarg")
    if isinstance(kwargs, dict):
        kwargs = [f"{k}={v}" for k, v in kwargs.items()]
    for kw in [kwargs] if isinstance(kwargs, str) else kwargs or ():
        argv += ["--kwarg", kw]
        label.append(kw)
    for key in _RUN_FLAGS:
        if key in c:
            argv += [f"--{key}", str(c[key])]
    if "core" in c:
        label.append(f"core={c['core']}")
    design = None
    if c.get("rtl"):
        argv.append("--rtl")
        geometry = [f"{k}={c[k]}" for k in _RTL_FLAGS if k in c]
        for key in _RTL_FLAGS:
            if key in c:
                argv += [f"--{key.replace('_', '-')}", str(c[key])]
        label.append(" ".join(["rtl", *geometry]))
        design = "neuroncore " + " ".join(f"{k}={c[k]}" for k in (*_RTL_FLAGS, "core") if k in c)
    return argv, " ".join(label), design


def _timing(c, blocks):
    args = c.get("args", "")
    try:
        words = shlex.split(args)
    except ValueError as exc:  # an unclosed quote
        raise ValueError(f"args {args!r} cannot be split into arguments ({exc})") from None
    return ["timing", "matmul", *words], "timing matmul " + args, None


# -- one task on a worker -------------------------------------------------------------------------


def command_argv(task, tmp):
    """The ``ncrtl`` arguments a task runs with, its outputs in the folder ``tmp`` (a run's
    report, a conformance run's JUnit file): the task's command as :func:`run_task` runs it,
    and as ``ncrtl regress`` checks it before any cluster starts."""
    argv = list(task.argv)
    if task.kind == "run":
        argv += ["--out", str(Path(tmp) / "out")]
    elif task.kind == "conformance":
        argv += ["--junit", str(Path(tmp) / "junit.xml")]
    return argv


def run_task(task, build=None, *, stop=None):
    """Run one task (on a Dask worker, or here): ``ncrtl`` in a subprocess of this Python, its
    figures read from its report (``run``), its summary (``conformance``: the JUnit file) or
    its output lines (``timing``).  ``build``: the result of the design's build task (only an
    ordering dependency).  Exit status 0 is a pass, 1 or 2 a fail (a mismatch, a broken rule);
    anything else, or a Python traceback, an error.

    The command runs in a process group of its own (a session, so a Ctrl-C at the terminal
    reaches the regression, not the tasks), under a leader
    (:mod:`ncrtl.testbench.regress_leader`) that ends the group when this process dies.  Past ``task.timeout`` seconds, or once ``stop()`` is true (default:
    the task's Dask future was cancelled, or its worker is closing), the group is ended
    (SIGTERM, SIGKILL after :data:`GRACE` seconds) and the task is an error naming why.  Its
    temporary folder is removed in every case."""
    t0 = time.perf_counter()
    worker = os.environ.get("DASK_WORKER_NAME", "") or _worker_name()
    stop = stop or _cancelled_check()
    with tempfile.TemporaryDirectory(prefix="ncrtl-regress-", ignore_cleanup_errors=True) as tmp:
        cmd = [*NCRTL, *command_argv(task, tmp)]
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ncrtl.testbench.regress_leader", tmp, *cmd],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env={**os.environ, "NCRTL_NO_PROGRESS": "1"},
                start_new_session=True,
            )
            why = None
            try:
                why = _wait(proc, task.timeout, stop)
            finally:
                if why is not None or proc.returncode is None:  # also on an exception here
                    _end_group(proc)
                else:  # a process the command started and left running
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                proc.stdin.close()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        figures = {} if why else _figures(task, stdout, Path(tmp))
    seconds = time.perf_counter() - t0
    crashed = "Traceback (most recent call last)" in stderr
    if why:
        tail = "\n".join((stderr.strip() or stdout.strip()).splitlines()[-5:])
        status, message = "error", why + (f"; its last lines:\n{tail}" if tail else "")
    elif proc.returncode == 0:
        status, message = "pass", ""
    elif proc.returncode in (1, 2) and not crashed:
        status = "fail"
        message = (stderr.strip() or stdout.strip()).splitlines()[-20:]
        message = "\n".join(message)
    else:
        status = "error"
        message = f"ncrtl exited with status {proc.returncode}: {stderr.strip()[-2000:]}"
    return TaskResult(task.index, status, seconds, worker, message, figures)


def _wait(proc, timeout, stop):
    """Wait for the task's process: None when it ended, else why it must be ended (its time
    limit passed, or ``stop()``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc.wait(timeout=min(POLL, max(0.0, deadline - time.monotonic())))
            return None
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() >= deadline:
            return (
                f"timed out after {timeout:g} s (the task's time limit: its table's timeout, "
                f"else --task-timeout)"
            )
        if stop():
            return "cancelled"


def _end_group(proc):
    """End the task's process group: SIGTERM, then SIGKILL for whatever is left after
    :data:`GRACE` seconds (descendants that outlive the leader included)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        if sig == signal.SIGTERM:
            try:
                proc.wait(timeout=GRACE)
            except subprocess.TimeoutExpired:
                pass
    proc.wait()


def _cancelled_check():
    """A function that says whether the Dask task running here is no longer wanted: its future
    cancelled (Ctrl-C in ``ncrtl regress``) or released, or its worker closing.  Outside a
    worker, never.  (The worker's task state is Dask's own; any surprise there reads as
    'wanted', so a task is never stopped by a change in Dask.)"""
    try:
        from distributed import get_worker

        worker = get_worker()
        key = worker.get_current_task()
    except Exception:
        return lambda: False

    def cancelled():
        try:
            ts = worker.state.tasks.get(key)
            return (
                ts is None
                or ts.state in ("cancelled", "released")
                or worker.status.name in ("closing", "closed", "failed")
            )
        except Exception:
            return False

    return cancelled


def _worker_name():
    try:
        from distributed import get_worker

        return get_worker().name
    except (ImportError, ValueError):
        return "local"


def _figures(task, stdout, tmp):
    """The figures a task's command left: conformance vectors and mismatches (its JUnit
    properties), a run's cycles and Tensor Engine utilization (report.json), a timing run's
    total cycles and TFLOPS (its output lines)."""
    out = {}
    if task.kind == "conformance" and (tmp / "junit.xml").exists():
        root = ElementTree.parse(tmp / "junit.xml").getroot()
        for prop in root.iter("property"):
            name = prop.get("name")
            if name in ("vectors", "mismatches"):
                out[name] = out.get(name, 0) + int(prop.get("value"))
    elif task.kind == "run" and (tmp / "out" / "report.json").exists():
        report = json.loads((tmp / "out" / "report.json").read_text())
        names = {"tensor_engine_cycles": "total_cycles", "total_ns": "total_ns"}
        names.update({k: k for k in ("te_utilization", "te_tflops")})
        for key, name in names.items():
            if key in report:
                out[name] = report[key]
        if isinstance(report.get("rtl"), dict) and "cycles" in report["rtl"]:
            out["rtl_cycles"] = report["rtl"]["cycles"]
    elif task.kind == "timing":
        for line in stdout.splitlines():
            if line.startswith("total:"):
                out["total_cycles"] = int(line.split()[1])
            elif line.startswith("TFLOPS"):
                out["tflops"] = float(line.split(":", 1)[1].split()[0])
            elif line.startswith("utilization:"):
                out["utilization"] = float(line.split()[1])
    return out


def _build_design(task):
    """The build task of a design: its first conformance task's build, made (or found in the
    node's cache) on the worker that runs it, so that the design's tasks find it there."""
    if task.kind != "conformance":
        return None
    from ncrtl import blocks
    from ncrtl.testbench.conformance import build_block

    block = blocks.get(task.argv[1])
    user = dict(a.split("=", 2)[1:] for a in task.argv if a.startswith("--param="))
    params, _ = block.resolve_run(user)  # the build the command makes
    try:
        built, _ = build_block(block, params)
    except Exception as exc:  # the task itself reports a failed build
        return f"build failed: {exc}"
    return str(built.directory)


# -- the run --------------------------------------------------------------------------------------


def local_worker_limit():
    """The most local worker processes: :data:`WORKERS_PER_CORE` per core of this machine."""
    return WORKERS_PER_CORE * (os.cpu_count() or 1)


_ADDRESS = re.compile(
    r"(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):(?P<port>\d+)"
)


def check_cluster(
    *, cluster=None, jobqueue=None, workers=None, jobqueue_options=(), connect_timeout=None
):
    """The cluster options' rules, before anything is read or started: one cluster named, a
    scheduler's address of the form ``[SCHEME://]HOST:PORT``, ``workers`` at least 1 and at
    most :func:`local_worker_limit` local processes or :data:`MAX_JOBS` farm jobs (none with
    ``cluster``: that scheduler's workers are the ones started for it), options of the form
    ``KEY=VALUE`` (with ``jobqueue`` only), the farm's submit command on PATH;
    :class:`ClusterError` naming the option and the rule."""
    if cluster is not None and jobqueue:
        raise ClusterError("--cluster and --jobqueue name two clusters; give one")
    if cluster is not None:
        m = _ADDRESS.fullmatch(cluster)
        if not m or (m["scheme"] and m["scheme"] not in SCHEMES) or not 1 <= int(m["port"]) < 65536:
            raise ClusterError(
                f"--cluster {cluster!r} is not a Dask scheduler's address: give "
                f"[{'|'.join(SCHEMES)}://]HOST:PORT, e.g. tcp://sched-host:8786"
            )
    if workers is not None:
        if cluster is not None:
            raise ClusterError(
                "--workers is for a local cluster or --jobqueue; the scheduler at --cluster "
                "runs the workers started for it"
            )
        if jobqueue:
            limit, rule = MAX_JOBS, "the jobs --jobqueue asks of the farm at once"
        else:
            limit = local_worker_limit()
            rule = (
                f"a local cluster runs at most {WORKERS_PER_CORE} worker processes per core "
                f"({os.cpu_count() or 1} here); for more, a farm (--jobqueue) or a scheduler "
                f"of your own (--cluster)"
            )
        if not 1 <= workers <= limit:
            raise ClusterError(f"--workers {workers} must be in 1..{limit}: {rule}")
    if jobqueue_options and not jobqueue:
        raise ClusterError("--jobqueue-option needs --jobqueue (the farm it configures)")
    for item in jobqueue_options or ():
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ClusterError(f"--jobqueue-option {item!r} is not of the form KEY=VALUE")
    if connect_timeout is not None:
        try:
            check_timeout(connect_timeout, "--connect-timeout")
        except PlanError as exc:
            raise ClusterError(str(exc)) from None
    if jobqueue and shutil.which(SUBMIT[jobqueue]) is None:
        raise ClusterError(
            f"--jobqueue {jobqueue} submits its workers with {SUBMIT[jobqueue]}, which is not on "
            f"PATH: run ncrtl regress on the farm's submit host"
        )


def start_client(
    *, cluster=None, jobqueue=None, workers=None, jobqueue_options=(), connect_timeout=None
):
    """A Dask client: on the scheduler at ``cluster`` (an address; :class:`ClusterError` when
    none answers within ``connect_timeout`` seconds, default :data:`CONNECT_TIMEOUT`), on a
    dask-jobqueue cluster (``jobqueue``, one of :data:`JOBQUEUES`, asking the farm for
    ``workers`` jobs; options ``KEY=VALUE`` for the cluster class), else a local cluster of
    ``workers`` processes (this machine's cores).  The options are checked first
    (:func:`check_cluster`).  A task whose worker dies is retried once elsewhere
    (``distributed.scheduler.allowed-failures`` = 1), then reported as an error."""
    check_cluster(
        cluster=cluster,
        jobqueue=jobqueue,
        workers=workers,
        jobqueue_options=jobqueue_options,
        connect_timeout=connect_timeout,
    )
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise ClusterError(
            "ncrtl regress needs Dask: pip install 'ncrtl[cluster]' (make install installs it)"
        ) from None
    dask.config.set({"distributed.scheduler.allowed-failures": 1})
    if cluster:
        timeout = CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
        try:
            return Client(cluster, timeout=timeout), None
        except Exception as exc:  # refused, timed out, or something that speaks no Dask
            raise ClusterError(
                f"--cluster {cluster}: no Dask scheduler answered within {timeout:g} s "
                f"({type(exc).__name__}: {exc})"
            ) from None
    if jobqueue:
        farm = jobqueue_cluster(jobqueue, jobqueue_options)
        farm.scale(jobs=workers or 1)
        return Client(farm), farm
    n = workers or os.cpu_count() or 1
    with _sigint_ignored():
        local = LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            preload=[__name__],  # dask_setup: a worker restarted later ignores SIGINT too
        )
    return Client(local), local


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while the local workers start, so that they inherit it ignored: a Ctrl-C
    at the terminal reaches every process of its group, and it is the regression's to handle
    (it cancels the tasks, waits for them to end their processes, closes the workers), not each
    worker's to die of mid-task."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to inherit from here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def dask_setup(worker):
    """Dask's preload hook, run in each local worker process as it starts (its main thread):
    SIGINT ignored, as :func:`_sigint_ignored` gives the workers started with the cluster,
    for a worker the cluster starts again after one died."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def jobqueue_cluster(name, options=()):
    """The dask-jobqueue cluster of a farm (``name`` one of :data:`JOBQUEUES`), its options
    from ``KEY=VALUE`` strings (numbers as numbers), no job submitted yet; its workers retry a
    lost task once, as the local cluster's.  :class:`ClusterError` for dask-jobqueue missing
    or an option its cluster class does not take."""
    try:
        import dask
        import dask_jobqueue
    except ImportError:
        raise ClusterError(
            "--jobqueue needs dask-jobqueue: pip install 'ncrtl[cluster]' (make install "
            "installs it)"
        ) from None

    dask.config.set({"distributed.scheduler.allowed-failures": 1})
    opts = {"cores": 1, "memory": "4GB", "processes": 1}
    for item in options:
        k, v = item.split("=", 1)
        opts[k.strip().replace("-", "_")] = _literal(v.strip())
    try:
        return getattr(dask_jobqueue, JOBQUEUES[name])(**opts)
    except (TypeError, ValueError) as exc:
        raise ClusterError(f"--jobqueue {name} with {' '.join(options)}: {exc}") from None


def _literal(v):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def run_plan(tasks, client, *, progress=True, on_result=None):
    """Run ``tasks`` on ``client``: per design one build task first (its tasks depend on it, so
    Dask places them where the build is), then every task, each retried once if it raises;
    returns the :class:`TaskResult` s in task order (an error for a task that died).  Ctrl-C
    cancels what is left and returns what finished (the others as errors, ``interrupted``)."""
    import uuid

    from distributed import as_completed

    prefix = f"ncrtl-{uuid.uuid4().hex[:8]}-"  # this run's tasks among a scheduler's others
    builds = {}
    for t in tasks:
        if t.design and t.kind == "conformance" and t.design not in builds:
            key = f"{prefix}build-{t.index}"
            builds[t.design] = client.submit(_build_design, t, key=key, pure=False)
    futures = {}
    for t in sorted(tasks, key=lambda t: (t.design or "", t.index)):
        dep = builds.get(t.design)
        key = f"{prefix}task-{t.index}"
        futures[client.submit(run_task, t, dep, key=key, pure=False, retries=1)] = t
    results = {}
    done = failed = 0
    bar = _Progress(len(tasks)) if progress else None
    try:
        for fut in as_completed(list(futures)):
            t = futures[fut]
            try:
                r = fut.result()
            except Exception as exc:  # the task died (worker lost twice) or raised twice
                r = TaskResult(t.index, "error", message=f"{type(exc).__name__}: {exc}")
            results[t.index] = r
            done += 1
            failed += r.status != "pass"
            if on_result:
                on_result(t, r)
            if bar:
                bar.show(done, len(tasks) - done, failed)
    except KeyboardInterrupt:
        # a cancelled task ends its process group at its next look (run_task); the workers
        # closed after this end the groups of any task that still runs (their leaders)
        client.cancel(list(futures) + list(builds.values()), force=True)
        _wait_for_running(client, prefix + "task-", GRACE + 2 * POLL)
        for t in tasks:
            results.setdefault(t.index, TaskResult(t.index, "error", message="interrupted"))
    finally:
        if bar:
            bar.close()
    return [results[t.index] for t in tasks]


def _wait_for_running(client, prefix, timeout):
    """Wait (at most ``timeout`` seconds) until no worker runs a task whose key begins with
    ``prefix``: cancelled, each ends its process group at its next look, and the workers can
    then be closed with nothing of theirs still running."""

    def running(dask_worker):
        return sum(str(k).startswith(prefix) for k in dask_worker.active_threads.values())

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not any(client.run(running).values()):
                return
        except Exception:  # a worker gone meanwhile: its leaders end its tasks' groups
            return
        time.sleep(POLL)


class _Progress:
    """``tasks: D done, R running or queued, F failed`` on one stderr line."""

    def __init__(self, total):
        self.total = total
        self.tty = sys.stderr.isatty()

    def show(self, done, left, failed):
        line = f"tasks: {done}/{self.total} done, {left} running or queued, {failed} failed"
        if self.tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        elif done == self.total or done % 10 == 0:
            print(line, file=sys.stderr, flush=True)

    def close(self):
        if self.tty:
            print(file=sys.stderr)


# -- results --------------------------------------------------------------------------------------


def summary_table(tasks, results):
    """The summary, as text: per conformance block and mode (tasks, vectors, mismatches, time),
    per kernel run (its kernel, inputs, core and RTL geometry: the timing model's cycles, the
    RTL's cycles, Tensor Engine utilization), per timing run (cycles, TFLOPS), then the totals
    and the command of every task that did not pass (with an error's reason)."""
    by = {}
    for t, r in zip(tasks, results):
        by.setdefault((t.kind, t.label), []).append(r)
    lines = []
    w = max((len(label) for _, label in by), default=10) + 2
    for kind, title, cols in (
        ("conformance", "conformance", ("vectors", "mismatches")),
        ("run", "kernels", ("total_cycles", "rtl_cycles", "te_utilization")),
        ("timing", "timing", ("total_cycles", "tflops")),
    ):
        rows = [(label, rs) for (k, label), rs in by.items() if k == kind]
        if not rows:
            continue
        lines.append(f"{title}:")
        head = f"  {'':{w}s}{'tasks':>6s}{'pass':>6s}{'fail':>6s}{'error':>6s}"
        lines.append(head + "".join(f"{c:>16s}" for c in cols) + f"{'time s':>9s}")
        for label, rs in rows:
            counts = [sum(r.status == s for r in rs) for s in ("pass", "fail", "error")]
            figs = []
            for c in cols:
                vals = [r.figures[c] for r in rs if c in r.figures]
                if not vals:
                    figs.append("-")
                elif c in ("vectors", "mismatches"):
                    figs.append(f"{sum(vals):,}")
                elif c in ("total_cycles", "rtl_cycles"):
                    figs.append(f"{max(vals):,}" if len(set(vals)) > 1 else f"{vals[0]:,}")
                else:
                    figs.append(f"{sum(vals) / len(vals):.3f}")
            secs = sum(r.seconds for r in rs)
            lines.append(
                f"  {label:{w}s}{len(rs):>6d}"
                + "".join(f"{n:>6d}" for n in counts)
                + "".join(f"{f:>16s}" for f in figs)
                + f"{secs:>9.1f}"
            )
    n_pass = sum(r.status == "pass" for r in results)
    n_fail = sum(r.status == "fail" for r in results)
    n_err = sum(r.status == "error" for r in results)
    lines.append(f"total: {len(results)} tasks, {n_pass} passed, {n_fail} failed, {n_err} errors")
    bad = [(t, r) for t, r in zip(tasks, results) if r.status != "pass"]
    if bad:
        lines.append("to reproduce on one machine:")
        for t, r in bad:  # an error says why (a fail's reason is the command's own output)
            why = r.message.splitlines()[0] if r.status == "error" and r.message else ""
            lines.append(f"  [{r.status}] {t.command}" + (f"  ({why})" if why else ""))
    return "\n".join(lines)


def write_results(tasks, results, out_dir, junit=None):
    """Write ``summary.txt``, ``results.csv`` (a row per task: its kind, label, status, seconds,
    worker, figures and command) and the JUnit XML (``junit`` or ``out_dir/junit.xml``: a
    testcase per task, a failure or an error element for the others) into ``out_dir``;
    returns the paths written."""
    from ncrtl.testbench.outputs import write_output

    out = write_output(out_dir, "--out", lambda p: None, folder=True)
    keys = sorted({k for r in results for k in r.figures})
    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow(["index", "kind", "label", "status", "seconds", "worker", *keys, "command"])
    for t, r in zip(tasks, results):
        wr.writerow(
            [t.index, t.kind, t.label, r.status, f"{r.seconds:.3f}", r.worker]
            + [r.figures.get(k, "") for k in keys]
            + [t.command]
        )
    paths = {
        "summary": out / "summary.txt",
        "csv": out / "results.csv",
        "junit": Path(junit) if junit else out / "junit.xml",
    }
    write_output(
        paths["summary"],
        "--out",
        lambda p: Path(p).write_text(summary_table(tasks, results) + "\n"),
    )
    write_output(paths["csv"], "--out", lambda p: Path(p).write_text(buf.getvalue()))
    suite = ElementTree.Element(
        "testsuite",
        name="ncrtl.regress",
        tests=str(len(results)),
        failures=str(sum(r.status == "fail" for r in results)),
        errors=str(sum(r.status == "error" for r in results)),
    )
    for t, r in zip(tasks, results):
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"regress.{t.kind}",
            name=t.label + f" #{t.index}",
            time=f"{r.seconds:.3f}",
        )
        props = ElementTree.SubElement(case, "properties")
        ElementTree.SubElement(props, "property", name="command", value=t.command)
        for k, v in r.figures.items():
            ElementTree.SubElement(props, "property", name=k, value=str(v))
        if r.status != "pass":
            tag = "failure" if r.status == "fail" else "error"
            ElementTree.SubElement(case, tag, message=f"{r.status}: {t.command}").text = r.message
    write_output(
        paths["junit"],
        "--junit",
        lambda p: ElementTree.ElementTree(suite).write(p, encoding="utf-8", xml_declaration=True),
    )
    rows = [{**asdict(r), "command": t.command} for t, r in zip(tasks, results)]
    write_output(out / "results.json", "--out", lambda p: p.write_text(json.dumps(rows, indent=1)))
    return paths
