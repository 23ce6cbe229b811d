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

Every task carries the one ``ncrtl`` command that reproduces it on one machine.  A task is a
*pass*, a *fail* (a mismatch, a rule broken: the command's verdict) or an *error* (the task
died: its worker was lost twice, or it raised); an error is never counted as a pass.

Dask (``distributed``, ``dask-jobqueue``) is the optional extra ``ncrtl[cluster]``; everything
else here is plain Python, so plans are checked before any cluster starts.
"""

import csv
import io
import itertools
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from xml.etree import ElementTree

import tomllib

__all__ = [
    "PlanError",
    "Task",
    "TaskResult",
    "load_plan",
    "expand",
    "run_task",
    "run_plan",
    "write_results",
    "summary_table",
    "JOBQUEUES",
]

#: The plan's tables and the keys each takes (a value or a list of values; lists are crossed).
TABLES = {
    "conformance": ("block", "mode", "geometry", "param", "count", "seed", "stall"),
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
    ),
    "timing": ("args",),
}

#: ``--jobqueue`` names and their dask-jobqueue cluster classes.
JOBQUEUES = {
    "slurm": "SLURMCluster",
    "lsf": "LSFCluster",
    "pbs": "PBSCluster",
    "sge": "SGECluster",
    "htcondor": "HTCondorCluster",
}


class PlanError(ValueError):
    """A plan that cannot be expanded: the message names the table, the key and the rule."""


@dataclass(frozen=True)
class Task:
    """One unit of work: ``kind`` (a plan table), ``argv`` (the ``ncrtl`` arguments that run
    it), ``label`` (what the summary groups it under: block and mode, kernel, or timing) and
    ``design`` (the build it needs, for grouping; None when it builds nothing)."""

    index: int
    kind: str
    argv: tuple
    label: str
    design: str = None

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
    file that is not TOML or a table or key the plan does not take."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise PlanError(f"plan {path}: cannot be read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"plan {path}: not TOML ({exc})") from None
    return parse_plan(data, str(path))


def parse_plan(data, where="plan"):
    out = {}
    for table, grids in data.items():
        if table not in TABLES:
            raise PlanError(
                f"{where}: table [[{table}]] is not one a plan takes; tables: "
                f"{', '.join(f'[[{t}]]' for t in TABLES)}"
            )
        if isinstance(grids, dict):
            grids = [grids]
        for i, grid in enumerate(grids):
            bad = [k for k in grid if k not in TABLES[table]]
            if bad:
                raise PlanError(
                    f"{where}: [[{table}]] #{i + 1}: key {bad[0]!r} is not one it takes; keys: "
                    f"{', '.join(TABLES[table])}"
                )
        out[table] = list(grids)
    if not out:
        raise PlanError(f"{where}: no table; a plan has [[conformance]], [[run]] or [[timing]]")
    return out


def _cross(grid):
    """Every combination of a grid's values (a scalar is a list of one)."""
    keys = list(grid)
    values = [v if isinstance(v, list) else [v] for v in grid.values()]
    for combo in itertools.product(*values):
        yield dict(zip(keys, combo))


def expand(plan):
    """The tasks of a plan, in plan order; each checked as its command would check it (a block,
    a parameter, a value out of range) before any task runs: :class:`PlanError` naming the
    table, the combination and the rule."""
    from ncrtl import blocks

    tasks = []
    for table, grids in plan.items():
        for i, grid in enumerate(grids):
            where = f"[[{table}]] #{i + 1}"
            for combo in _cross(grid):
                build = {"conformance": _conformance, "run": _run, "timing": _timing}[table]
                try:
                    argv, label, design = build(combo, blocks)
                except (blocks.BlockError, ValueError) as exc:
                    raise PlanError(f"{where} {combo}: {exc}") from None
                tasks.append(Task(len(tasks), table, tuple(argv), label, design))
    return tasks


def _params(value):
    """A ``param`` value: a table ``{name = value}`` or a list of ``"name=value"`` strings."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    items = [value] if isinstance(value, str) else value
    out = {}
    for item in items:
        if "=" not in str(item):
            raise ValueError(f"param {item!r} is not of the form name=value")
        k, v = str(item).split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _conformance(c, blocks):
    if "block" not in c:
        raise ValueError("a [[conformance]] task needs a block")
    block = blocks.get(str(c["block"]))
    user = _params(c.get("param"))
    if "mode" in c:
        user["mode"] = str(c["mode"])
    if "geometry" in c:
        g = str(c["geometry"]).lower().split("x")
        if len(g) != 2 or not all(x.isdigit() for x in g):
            raise ValueError(f"geometry {c['geometry']!r} is not ROWSxCOLS (8x8)")
        user["rows"], user["cols"] = g
    params, _ = block.resolve_run(user)  # every parameter rule, and the build, as the command's
    block.check_program(params)
    count, seed, stall = int(c.get("count", 10000)), int(c.get("seed", 1)), c.get("stall", 0.2)
    if count < 1 or not 0 <= float(stall) < 1:
        raise ValueError(f"count {count} must be >= 1 and stall {stall} in [0, 1)")
    argv = ["conformance", block.name]
    argv += [f"--param={k}={v}" for k, v in user.items()]
    argv += ["--count", str(count), "--seed", str(seed), "--stall", str(stall)]
    label = block.name + (f" mode={params['mode']}" if "mode" in params else "")
    return argv, label, block.top_name(params)


def _run(c, blocks):
    if ("kernel" in c) == ("example" in c):
        raise ValueError("a [[run]] task names a kernel (FILE.py::FUNCTION) or an example")
    argv = ["run"] + (["--example", str(c["example"])] if "example" in c else [str(c["kernel"])])
    args = c.get("args")
    if args:
        argv += ["--args", *([args] if isinstance(args, str) else [str(a) for a in args])]
    if c.get("shapes"):  # one task's tensors: "128x512:bfloat16 512x512:bfloat16"
        argv += ["--shapes", *str(c["shapes"]).split()]
    for kw in [c["kwarg"]] if isinstance(c.get("kwarg"), str) else c.get("kwarg", []):
        argv += ["--kwarg", str(kw)]
    for key in ("core", "seed"):
        if key in c:
            argv += [f"--{key}", str(c[key])]
    design = None
    if c.get("rtl"):
        argv.append("--rtl")
        for key in ("partitions", "rows", "cols", "dma_engines"):
            if key in c:
                argv += [f"--{key.replace('_', '-')}", str(c[key])]
        design = "neuroncore " + " ".join(
            f"{k}={c[k]}" for k in ("partitions", "rows", "cols", "dma_engines", "core") if k in c
        )
    label = str(c.get("example") or c.get("kernel")) + (f" core={c['core']}" if "core" in c else "")
    return argv, label, design


def _timing(c, blocks):
    args = c.get("args", "")
    return ["timing", "matmul", *shlex.split(str(args))], "timing matmul " + str(args), None


# -- one task on a worker -------------------------------------------------------------------------


def run_task(task, build=None):
    """Run one task (on a Dask worker, or here): ``ncrtl`` in a subprocess of this Python, its
    figures read from its report (``run``), its summary (``conformance``: the JUnit file) or
    its output lines (``timing``).  ``build``: the result of the design's build task (only an
    ordering dependency).  Exit status 0 is a pass, 1 or 2 a fail (a mismatch, a broken rule);
    anything else, or a Python traceback, an error."""
    t0 = time.perf_counter()
    worker = os.environ.get("DASK_WORKER_NAME", "") or _worker_name()
    with tempfile.TemporaryDirectory(prefix="ncrtl-regress-") as tmp:
        argv = list(task.argv)
        if task.kind == "run":
            argv += ["--out", str(Path(tmp) / "out")]
        elif task.kind == "conformance":
            argv += ["--junit", str(Path(tmp) / "junit.xml")]
        proc = subprocess.run(
            [sys.executable, "-m", "ncrtl.cli", *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "NCRTL_NO_PROGRESS": "1"},
        )
        figures = _figures(task, proc.stdout, Path(tmp))
    seconds = time.perf_counter() - t0
    crashed = "Traceback (most recent call last)" in proc.stderr
    if proc.returncode == 0:
        status, message = "pass", ""
    elif proc.returncode in (1, 2) and not crashed:
        status = "fail"
        message = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-20:]
        message = "\n".join(message)
    else:
        status = "error"
        message = f"ncrtl exited with status {proc.returncode}: {proc.stderr.strip()[-2000:]}"
    return TaskResult(task.index, status, seconds, worker, message, figures)


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


def start_client(*, cluster=None, jobqueue=None, workers=None, jobqueue_options=()):
    """A Dask client: on the scheduler at ``cluster`` (an address), on a dask-jobqueue cluster
    (``jobqueue``, one of :data:`JOBQUEUES`, asking the farm for ``workers`` jobs; options
    ``KEY=VALUE`` for the cluster class), else a local cluster of ``workers`` processes (this
    machine's cores).  A task whose worker dies is retried once elsewhere
    (``distributed.scheduler.allowed-failures`` = 1), then reported as an error."""
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise PlanError(
            "ncrtl regress needs Dask: pip install 'ncrtl[cluster]' (make install installs it)"
        ) from None
    dask.config.set({"distributed.scheduler.allowed-failures": 1})
    if cluster:
        return Client(cluster), None
    if jobqueue:
        farm = jobqueue_cluster(jobqueue, jobqueue_options)
        farm.scale(jobs=workers or 1)
        return Client(farm), farm
    n = workers or os.cpu_count() or 1
    local = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
    return Client(local), local


def jobqueue_cluster(name, options=()):
    """The dask-jobqueue cluster of a farm (``name`` one of :data:`JOBQUEUES`), its options
    from ``KEY=VALUE`` strings (numbers as numbers), no job submitted yet; its workers retry a
    lost task once, as the local cluster's."""
    import dask
    import dask_jobqueue

    dask.config.set({"distributed.scheduler.allowed-failures": 1})
    opts = {"cores": 1, "memory": "4GB", "processes": 1}
    for item in options:
        k, v = item.split("=", 1)
        opts[k.strip().replace("-", "_")] = _literal(v.strip())
    return getattr(dask_jobqueue, JOBQUEUES[name])(**opts)


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
    from distributed import as_completed

    builds = {}
    for t in tasks:
        if t.design and t.kind == "conformance" and t.design not in builds:
            builds[t.design] = client.submit(_build_design, t, key=f"build-{t.index}", pure=False)
    futures = {}
    for t in sorted(tasks, key=lambda t: (t.design or "", t.index)):
        dep = builds.get(t.design)
        futures[client.submit(run_task, t, dep, key=f"task-{t.index}", pure=False, retries=1)] = t
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
        for fut in futures:
            fut.cancel()
        for t in tasks:
            results.setdefault(t.index, TaskResult(t.index, "error", message="interrupted"))
    finally:
        if bar:
            bar.close()
    return [results[t.index] for t in tasks]


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
    per kernel (cycles, Tensor Engine utilization), per timing run (cycles, TFLOPS), then the
    totals and the command of every task that did not pass."""
    by = {}
    for t, r in zip(tasks, results):
        by.setdefault((t.kind, t.label), []).append(r)
    lines = []
    w = max((len(label) for _, label in by), default=10) + 2
    for kind, title, cols in (
        ("conformance", "conformance", ("vectors", "mismatches")),
        ("run", "kernels", ("total_cycles", "te_utilization")),
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
                elif c == "total_cycles":
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
        lines += [f"  [{r.status}] {t.command}" for t, r in bad]
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
