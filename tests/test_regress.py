"""``ncrtl regress``: plans expanded into tasks (every rule checked before a cluster starts), and a
small plan on a local Dask cluster of two worker processes with its results in one place.  The
separate scheduler and worker processes, with a worker killed mid-run, are in the slow suite."""

import contextlib
import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest
import tomllib

from ncrtl.cli import main
from ncrtl.testbench import regress
from ncrtl.testbench.regress import (
    GRACE,
    PlanError,
    Task,
    TaskResult,
    expand,
    parse_plan,
    summary_table,
)

#: Seconds a test waits for a process group to end: the SIGTERM's grace and a margin.
GRACE_WAIT = GRACE + 3

PLAN = """
[[conformance]]
block = ["fp.add"]
count = [200]
seed = [1, 2]

[[timing]]
args = ["--k 64 --m 64 --n 128 --repeat 4", "--sparse 4:16 --n 128 --repeat 4"]

[[run]]
example = ["matmul_basic"]
core = ["v3", "v4"]
"""


def test_a_plan_is_crossed_into_tasks_with_their_commands():
    tasks = expand(parse_plan(__import__("tomllib").loads(PLAN)))
    assert [t.kind for t in tasks] == ["conformance"] * 2 + ["timing"] * 2 + ["run"] * 2
    c = tasks[1]
    assert (
        c.command == ("ncrtl conformance fp.add --count 200 --seed 2")  # the default stall
        and c.design
        and c.label == "fp.add"
    )
    assert tasks[0].design == tasks[1].design  # one build for both seeds
    assert tasks[3].command == "ncrtl timing matmul --sparse 4:16 --n 128 --repeat 4"
    assert tasks[5].command == "ncrtl run --example matmul_basic --core v4"
    assert tasks[5].label == "matmul_basic core=v4" and tasks[5].design is None


def test_the_documented_plan_is_checked_as_a_regression_checks_it():
    """docs/regress.md's plan crosses to its tasks and every one passes its command's check,
    but the [[run]] of the reader's own kernel, whose file is theirs."""
    from ncrtl.cli.regress import check_tasks

    doc = (Path(__file__).parents[1] / "docs" / "regress.md").read_text()
    plan = parse_plan(tomllib.loads(re.search(r"```toml\n(.*?)```", doc, re.S)[1]))
    assert plan["run"][2]["kernel"] == "my_kernels.py::attention"
    assert plan["run"][2]["timeout"] == 7200
    del plan["run"][2]
    tasks = expand(plan)
    assert len(tasks) == 4 + 6 + 4 + 4 + 2
    check_tasks(tasks)
    pe = [t for t in tasks if t.label.startswith("pe_array")]
    assert all("--param=sparse=1" in t.argv and "--param=block=2" in t.argv for t in pe)


def test_a_grid_with_params_and_geometry():
    plan = parse_plan(
        {
            "conformance": [
                {
                    "block": "pe_array",
                    "mode": ["bf16", "fp16", "fp8"],
                    "geometry": ["4x4", "8x8"],
                    "param": ["block=2"],
                    "count": 100,
                }
            ]
        }
    )
    tasks = expand(plan)
    assert len(tasks) == 6
    assert "--param=rows=8" in tasks[5].argv and "--param=mode=fp8" in tasks[5].argv
    # crossed in key order, the last key fastest: (bf16, 4x4), (bf16, 8x8), (fp16, 4x4), ...
    assert tasks[0].design != tasks[1].design  # 4x4 and 8x8: two designs
    # each task builds the narrowest PE serving its mode, as its command does: bf16 and fp16
    # are programs of the bf16-family design, fp8 of the fp8 family's
    assert tasks[0].design == tasks[2].design == "tensor_engine_4x4_b2_mbf16_fp16"
    assert tasks[4].design == "tensor_engine_4x4_b2_mfp8_double_row"


@pytest.mark.parametrize(
    "data,match",
    [
        ({"lint": [{}]}, r"table \[\[lint\]\] is not one a plan takes"),
        ({"conformance": [{"blok": "fp.add"}]}, r"key 'blok' is not one it takes"),
        ({"conformance": [{"block": "fp.nope"}]}, r"\[\[conformance\]\] #1 .*fp\.nope"),
        (
            {"conformance": [{"block": "pe_array", "geometry": "8by8"}]},
            r"geometry '8by8' is not ROWSxCOLS",
        ),
        ({"run": [{"core": "v3"}]}, r"names a kernel .* or an example"),
        ({}, r"no table"),
        ({"timing": 5}, r"timing = 5 is not a table; write \[\[timing\]\]"),
        # typed values, each value on its own
        ({"run": [{"example": "matmul_basic", "rtl": "yes"}]}, r'rtl = "yes" is a string; rtl'),
        ({"conformance": [{"block": "fp.add", "seed": [1, 2.5]}]}, r"seed = 2.5 is a number"),
        ({"conformance": [{"block": "fp.add", "count": True}]}, r"count = true is a boolean"),
        ({"conformance": [{"block": "fp.add", "stall": "0.1"}]}, r'stall = "0.1" is a string'),
        ({"run": [{"example": "matmul_basic", "kwarg": [["a=1"]]}]}, r"kwarg = \[\"a=1\"\]"),
        ({"timing": [{"args": "--n 8", "timeout": [60, 120]}]}, r"timeout takes one value"),
        ({"timing": [{"args": "--n 8", "timeout": 0}]}, r"timeout = 0 must be a positive"),
        # an empty list crosses to no task: an error, never a plan of nothing that passes
        ({"conformance": [{"block": []}]}, r"#1: block = \[\] gives no value"),
        ({"timing": [{"args": ["--n 8"]}, {"args": []}]}, r"\[\[timing\]\] #2: args = \[\]"),
    ],
)
def test_bad_plans_name_the_table_and_the_rule(data, match):
    """The plan's own rules: its tables, its keys, each value's type (a range is the task's
    command's rule, checked by the command: test_every_task_is_checked_as_its_command)."""
    with pytest.raises(PlanError, match=match):
        expand(parse_plan(data))


def _refused(argv, capsys, tmp_path, *, connects=False):
    """``ncrtl regress ARGV --out OUT``: exit status 2 within a few seconds, one line on
    stderr, no OUT, and nothing printed on stdout (``connects``: only the plan's line, the
    cluster asked for and refused); returns the line."""
    out = tmp_path / "o"
    t0 = time.perf_counter()
    assert main(["regress", *argv, "--out", str(out)]) == 2
    assert time.perf_counter() - t0 < 5
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and "Traceback" not in cap.err, cap.err
    assert not out.exists()
    assert cap.out.startswith("regress: ") if connects else cap.out == "", cap.out
    assert "worker(s) now" not in cap.out
    return cap.err


#: ``(plan, what the one line says)``: each task refused as its command refuses it, naming the
#: plan's table, the task and its combination, then the command's own message.
CHECKED = [
    ('[[conformance]]\nblock = ["fp.nope"]\n', r"\[\[conformance\]\] #1 task 1 .*fp\.nope"),
    (
        '[[conformance]]\nblock = "fp.add"\nseed = [1, -1]\n',
        r'#1 task 2 \{block = "fp.add", seed = -1\}: --seed -1 must be in 0\.\.4294967295',
    ),
    (  # the stall alone is blamed, never the default count beside it
        '[[conformance]]\nblock = "fp.add"\nstall = [1.5]\n',
        r"stall = 1.5\}: --stall 1.5 must be a probability in \[0, 1\): [^,]*$",
    ),
    ('[[conformance]]\nblock = "fp.add"\ncount = 0\n', r"--count must be >= 1, got 0"),
    (
        '[[conformance]]\nblock = "pe_array"\ngeometry = "8x8"\nparam = "mode=nope"\n',
        r"\[\[conformance\]\] #1 task 1 .*nope",
    ),
    (  # a rule of the engine, found before any simulation
        '[[timing]]\nargs = ["--n 8", "--k 0"]\n',
        r'\[\[timing\]\] #1 task 2 \{args = "--k 0"\}: instruction 0 \(LS\) is rejected: '
        r"K_RANGE: K=0",
    ),
    (  # argparse's own message, in one line
        '[[timing]]\nargs = "--k abc"\n',
        r'\{args = "--k abc"\}: argument --k: invalid int value: .abc.',
    ),
    ('[[timing]]\nargs = "--bogus 1"\n', r"unrecognized arguments: --bogus 1"),
    ('[[timing]]\nargs = "--sparse 3:7"\n', r"--sparse '3:7' is not an M:N pattern"),
    ('[[run]]\nexample = "matmul_basic"\nrtl = "yes"\n', r'rtl = "yes" is a string'),
    ('[[run]]\nexample = "matmul_basic"\nkwarg = "oops"\n', r"--kwarg 'oops': give NAME=VALUE"),
    ('[[run]]\nkernel = "nope.py::k"\nshapes = "8x8:float32"\n', r"nope\.py: no such kernel"),
    ('[[run]]\nexample = ["matmul_basic", "nope"]\n', r"task 2 .*no example 'nope'"),
    ('[[run]]\nexample = "matmul_basic"\ncore = "v9"\n', r"argument --core: invalid choice"),
    ('[[run]]\nexample = "matmul_basic"\nseed = -1\n', r"--seed -1 must be in 0\.\."),
    (
        '[[run]]\nexample = "matmul_basic"\nrtl = true\npartitions = [8, 300]\n',
        r"task 2 .*partitions=300 is above the maximum 128",
    ),
    ("[[conformance]]\nblock = []\n", r"block = \[\] gives no value"),
    (  # counted before anything is crossed: a million combinations are never made
        '[[conformance]]\nblock = "fp.add"\nseed = [%s]\ncount = [%s]\n'
        % (", ".join(map(str, range(1001))), ", ".join(map(str, range(1, 1001)))),
        r"crosses to 1,001,000 tasks, more than the limit of 10,000; give --max-tasks 1001000",
    ),
    ("not = toml = at all", r"not TOML"),
    (b'[[timing]]\nargs = "--n \xff"\n', r"not UTF-8 text \(byte 0xff at offset 23\)"),
]


@pytest.mark.parametrize("plan,match", CHECKED)
def test_every_task_is_checked_as_its_command(plan, match, tmp_path, capsys):
    """Before any cluster starts or any file is written, every task's arguments go through its
    command's parser and its command's check (the rules the command applies before its work),
    and the plan's values are typed: a bad plan is one line, exit status 2."""
    path = tmp_path / "p.toml"
    path.write_bytes(plan if isinstance(plan, bytes) else plan.encode())
    err = _refused([str(path)], capsys, tmp_path)
    assert re.search(match, err.strip()), err


def test_a_plan_of_many_tasks_needs_max_tasks(tmp_path, capsys):
    """The limit on tasks is an option: a plan over it runs with --max-tasks."""
    plan = tmp_path / "p.toml"
    plan.write_text("[[timing]]\nargs = [%s]\n" % ", ".join(f'"--repeat {i}"' for i in range(1, 4)))
    assert "crosses to 3 tasks" in _refused([str(plan), "--max-tasks", "2"], capsys, tmp_path)
    tasks = expand(regress.load_plan(plan), max_tasks=3)
    assert len(tasks) == 3 and regress.count_tasks(regress.load_plan(plan)) == 3


@pytest.fixture
def not_dask(tmp_path):
    """The address of a server that speaks something else than Dask (HTTP): the client reads
    its reply as a message length (3 EiB, before the connection was bounded)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 8)

    threading.Thread(target=serve, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    server.close()


@pytest.mark.parametrize(
    "options,match",
    [
        (["--cluster", "bogus"], r"--cluster 'bogus' is not a Dask scheduler's address: give "),
        (["--cluster", "tcp://host:99999"], r"is not a Dask scheduler's address"),
        (["--cluster", "http://host:80"], r"is not a Dask scheduler's address"),
        (
            ["--cluster", "CLOSED", "--connect-timeout", "0.5"],
            r"no Dask scheduler answered within 0.5 s",
        ),
        (["--cluster", "NOT_DASK"], r"no Dask scheduler answered within 5 s"),
        (["--cluster", "tcp://h:1", "--workers", "2"], r"--workers is for a local cluster"),
        (["--jobqueue", "slurm"], r"--jobqueue slurm submits its workers with sbatch, which is"),
        (["--jobqueue", "htcondor"], r"with condor_submit, which is not on PATH"),
        (["--jobqueue", "slurm", "--workers", "100000"], r"--workers 100000 must be in 1\.\.1000"),
        (["--workers", "100000"], r"--workers 100000 must be in 1\.\.\d+: a local cluster runs "),
        (["--workers", "0"], r"--workers 0 must be in 1\.\."),
        (["--jobqueue-option", "queue=sim"], r"--jobqueue-option needs --jobqueue"),
        (["--task-timeout", "0"], r"--task-timeout 0 must be a positive number of seconds"),
        (["--max-tasks", "0"], r"--max-tasks 0 must be >= 1"),
    ],
)
def test_cluster_options_are_one_line_within_seconds(
    options, match, tmp_path, capsys, monkeypatch, not_dask
):
    """Each cluster option is checked before anything (the address's form, the farm's submit
    command on PATH, the workers' bound); a scheduler that does not answer, or answers
    something else than Dask, is one line after the connection's time limit."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no farm's submit command
    plan = tmp_path / "p.toml"
    plan.write_text('[[timing]]\nargs = "--n 8"\n')
    closed = f"tcp://127.0.0.1:{_free_port()}"
    options = [{"CLOSED": closed, "NOT_DASK": not_dask}.get(o, o) for o in options]
    err = _refused([str(plan), *options], capsys, tmp_path, connects=match.startswith("no Dask"))
    assert re.search(match, err), err


#: A task's command that never ends: it starts a process of its own (as a run starts its
#: simulator), writes its process group and the pids, and sleeps.
SLEEPER = (
    "import os, subprocess, sys, time; c = subprocess.Popen(['sleep', '60']); "
    "open(sys.argv[-1] + '.part', 'w').write(f'{os.getpgrp()} {os.getpid()} {c.pid}'); "
    "os.rename(sys.argv[-1] + '.part', sys.argv[-1]); time.sleep(60)"
)


def _group(pgid):
    """The live processes (zombies not counted) of process group ``pgid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(stat.parent.name))
    return out


def _ended(pids, tmp, seconds=GRACE_WAIT):
    """Wait until the sleeper's group has no live process and ``tmp`` holds nothing."""
    pgid = int(pids.read_text().split()[0])
    deadline = time.monotonic() + seconds
    while (_group(pgid) or any(tmp.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _group(pgid) == [] and list(tmp.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", ["timeout", "cancelled"])
def test_a_task_past_its_time_limit_or_cancelled_ends_its_process_group(how, tmp_path, monkeypatch):
    """A task runs in a process group of its own: past its time limit (the plan's timeout), or
    once cancelled, the whole group is ended (the command and what it started) and its
    temporary folder removed; the task is an error naming why."""
    monkeypatch.setattr(regress, "NCRTL", (sys.executable, "-c", SLEEPER))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    pids = tmp_path / "pids"
    plan = {"timing": [{"args": str(pids), "timeout": 1 if how == "timeout" else 60}]}
    (task,) = expand(parse_plan(plan), timeout=30)  # the table's timeout over --task-timeout
    assert task.timeout == (1 if how == "timeout" else 60)
    assert expand(parse_plan({"timing": [{}]}), timeout=30)[0].timeout == 30
    assert expand(parse_plan({"timing": [{}]}))[0].timeout == regress.TASK_TIMEOUT == 3600
    stop = pids.exists if how == "cancelled" else None
    r = regress.run_task(task, stop=stop)
    assert r.status == "error" and pids.exists(), r.message
    assert r.message.startswith("timed out after 1 s" if how == "timeout" else "cancelled")
    _ended(pids, tmp)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_dead_worker_s_task_is_ended_by_its_leader(tmp_path):
    """The worker that runs a task is killed (SIGKILL: nothing of it runs again): the task's
    group leader sees its pipe from the worker end, ends the group and removes the task's
    temporary folder."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pids = tmp_path / "pids"
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, tempfile; from ncrtl.testbench import regress; "
            f"regress.NCRTL = (sys.executable, '-c', {SLEEPER!r}); tempfile.tempdir = {str(tmp)!r}; "
            f"regress.run_task(regress.Task(0, 'timing', ('timing', {str(pids)!r}), 'sleeper'))",
        ]
    )
    try:
        deadline = time.monotonic() + 20
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids.exists() and any(tmp.iterdir())
    finally:
        worker.kill()
        worker.wait()
    _ended(pids, tmp)


def test_the_summary_has_a_row_per_kernel_input_and_the_rtl_cycles():
    """A kernel's tasks over shapes are one row each (seeds, which change only the values,
    share it); an RTL run's row says its geometry and the RTL's cycles beside the model's."""
    tasks = expand(
        parse_plan(
            {
                "run": [
                    {"kernel": "k.py::f", "shapes": ["128x64:float32", "256x64:float32"]},
                    {"example": "matmul_basic", "rtl": True, "partitions": 8, "seed": [1, 2]},
                ]
            }
        )
    )
    figures = [{"total_cycles": 100}, {"total_cycles": 200}] + [
        {"total_cycles": 3238, "rtl_cycles": 3222, "te_utilization": 0.5}
    ] * 2
    results = [TaskResult(t.index, "pass", 1.0, "w", figures=f) for t, f in zip(tasks, figures)]
    text = summary_table(tasks, results)
    assert re.search(r"^ +tasks +pass +fail +error +total_cycles +rtl_cycles +te_util", text, re.M)
    assert re.search(r"^  k\.py::f 128x64:float32 +1 +1 +0 +0 +100 +- +- ", text, re.M), text
    assert re.search(r"^  k\.py::f 256x64:float32 +1 +1 +0 +0 +200 +- +- ", text, re.M), text
    rtl = r"^  matmul_basic rtl partitions=8 +2 +2 +0 +0 +3,238 +3,222 +0\.500 +2\.0$"
    assert re.search(rtl, text, re.M), text


def test_results_name_every_failure_with_its_command(tmp_path):
    tasks = [
        Task(0, "conformance", ("conformance", "fp.add", "--seed", "1"), "fp.add", "d"),
        Task(1, "timing", ("timing", "matmul", "--k", "0"), "timing matmul --k 0"),
        Task(2, "run", ("run", "--example", "matmul_basic"), "matmul_basic"),
    ]
    results = [
        TaskResult(0, "pass", 1.5, "w0", figures={"vectors": 200, "mismatches": 0}),
        TaskResult(1, "fail", 0.2, "w1", "K=0 must be in 1..128"),
        TaskResult(2, "error", 0.0, "", "KilledWorker: lost twice"),
    ]
    paths = regress.write_results(tasks, results, tmp_path / "out")
    text = paths["summary"].read_text()
    assert "total: 3 tasks, 1 passed, 1 failed, 1 errors" in text
    assert "[fail] ncrtl timing matmul --k 0" in text and "[error] ncrtl run --example" in text
    rows = list(csv.DictReader(paths["csv"].open()))
    assert [r["status"] for r in rows] == ["pass", "fail", "error"]
    assert rows[0]["vectors"] == "200" and rows[1]["command"] == "ncrtl timing matmul --k 0"
    suite = ElementTree.parse(paths["junit"]).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = suite.findall("testcase")
    assert cases[1].find("failure") is not None and cases[2].find("error") is not None


#: The plan of the local-cluster test: small (the default suite's budget), every kind, and a
#: kernel that breaks a rule only its run finds (a fail, never refused before the run).
SMALL_PLAN = """
[[conformance]]
block = "fp.add"
count = 100
seed = [1, 2]

[[timing]]
args = "--k 64 --m 64 --n 128 --repeat 4"

[[run]]
example = "matmul_basic"

[[run]]
kernel = "%s::psum_overflow"
shapes = "128x64:float32"
""" % (Path(__file__).parent / "kernels" / "bad.py")


@pytest.mark.sim
def test_a_plan_on_a_local_cluster_of_two_workers(tmp_path, capsys):
    """Two worker processes: a conformance of fp.add (one build for both seeds), a timing run,
    a kernel run and a kernel run that breaks a rule (a fail with its command)."""
    plan = tmp_path / "plan.toml"
    plan.write_text(SMALL_PLAN)
    out = tmp_path / "out"
    rc = main(["regress", str(plan), "--workers", "2", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 1, text  # the kernel's PSUM overflow fails the regression
    assert "total: 5 tasks, 4 passed, 1 failed, 0 errors" in text
    assert "bad.py::psum_overflow --shapes 128x64:float32" in text.split("[fail] ncrtl run ")[1]
    rows = list(csv.DictReader((out / "results.csv").open()))
    conf = [r for r in rows if r["kind"] == "conformance"]
    assert all(r["status"] == "pass" and int(r["vectors"]) > 0 for r in conf)
    assert all(int(r["mismatches"]) == 0 for r in conf)
    runs = [r for r in rows if r["kind"] == "run" and r["status"] == "pass"]
    assert len(runs) == 1 and int(runs[0]["total_cycles"]) > 0
    timing = [r for r in rows if r["kind"] == "timing" and r["status"] == "pass"]
    assert {float(r["tflops"]) > 0 for r in timing} == {True}
    assert len({r["worker"] for r in rows}) == 2  # both workers took tasks
    assert json.loads((out / "results.json").read_text())[0]["command"].startswith("ncrtl ")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_in_second_task(session):
    """Kill the processes of ``session`` (a ``dask worker`` and its worker process) once they
    have started a second task (a second task's group leader), whatever a task's time."""
    leaders = set()
    deadline = time.monotonic() + 300
    while len(leaders) < 2:
        if time.monotonic() > deadline:
            return  # the test says w0 was not killed
        for proc in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                if "_leader" in (proc / "cmdline").read_text() and _ancestor(proc.name, session):
                    leaders.add(proc.name)
        time.sleep(0.1)
    os.killpg(session, signal.SIGKILL)


def _ancestor(pid, ancestor):
    """``ancestor`` is the parent of ``pid``, or its parent's parent, ..."""
    while pid not in ("0", "1"):
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = stat.rsplit(")", 1)[1].split()[1]
        if int(pid) == ancestor:
            return True
    return False


@pytest.mark.sim
@pytest.mark.slow
def test_separate_scheduler_and_workers_with_a_worker_killed(tmp_path, capsys):
    """``dask scheduler`` and two ``dask worker`` processes on the loopback address; one worker
    is killed while it runs tasks: its tasks are retried on the other, none is lost or reported
    as a pass without running."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    # (the retry limit is the scheduler's: a task whose worker dies twice is an error)
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    procs = [
        subprocess.Popen(
            dask + ["--host", "127.0.0.1", "--port", str(port), "--dashboard-address", ":0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    ]
    worker = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1"]
    try:
        time.sleep(3)
        for name in ("w0", "w1"):
            procs.append(
                subprocess.Popen(
                    worker + ["--name", name, "--dashboard-address", ":0"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        time.sleep(3)
        plan = tmp_path / "plan.toml"
        # 8 what-ifs of a few seconds each: w0 dies in its second task
        plan.write_text(
            "[[timing]]\nargs = ["
            + ", ".join(f'"--k 128 --n 512 --repeat {150000 + i}"' for i in range(8))
            + "]\n"
        )
        killer = threading.Thread(target=_kill_in_second_task, args=(procs[1].pid,), daemon=True)
        killer.start()
        rc = main(["regress", str(plan), "--cluster", address, "--out", str(tmp_path / "o")])
        killer.join()
        text = capsys.readouterr().out
        assert procs[1].poll() is not None  # w0 was killed
        assert rc == 0, text
        assert "total: 8 tasks, 8 passed, 0 failed, 0 errors" in text
        rows = list(csv.DictReader((tmp_path / "o" / "results.csv").open()))
        assert all(r["status"] == "pass" and int(r["total_cycles"]) > 0 for r in rows)
        workers = [r["worker"] for r in rows]
        assert "w0" in workers and workers.count("w1") > workers.count("w0")  # w1 took the rest
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL) if p is not procs[0] else p.kill()


def test_results_paths_are_refused_before_a_run(tmp_path):
    plan = tmp_path / "p.toml"
    plan.write_text('[[timing]]\nargs = ["--n 8"]\n')
    (tmp_path / "file").write_text("x")
    assert main(["regress", str(plan), "--out", str(tmp_path / "file" / "sub")]) == 2
    assert main(["regress", str(plan), "--workers", "0"]) == 2
    assert not Path(tmp_path / "file" / "sub").exists()


def test_a_farm_job_script_carries_the_options():
    """--jobqueue slurm: the dask-jobqueue cluster's job script (nothing submitted) holds the
    options given as KEY=VALUE."""
    pytest.importorskip("dask_jobqueue")
    farm = regress.jobqueue_cluster("slurm", ["queue=sim", "cores=4", "memory=16GB"])
    try:
        script = farm.job_script()
    finally:
        farm.close()
    assert "#SBATCH -p sim" in script and "#SBATCH --cpus-per-task=4" in script
    assert "distributed.cli.dask_worker" in script and "--nthreads 4" in script


@pytest.mark.sim
def test_ctrl_c_reports_what_finished(tmp_path):
    """Ctrl-C after the first result: the finished task keeps its verdict, the others are
    errors marked interrupted (never passes), and the cluster is left to close."""
    tasks = expand(
        parse_plan({"timing": [{"args": [f"--k 64 --n 64 --repeat {4 + i}" for i in range(6)]}]})
    )
    client, cluster = regress.start_client(workers=1)

    def stop(task, result):
        raise KeyboardInterrupt

    try:
        results = regress.run_plan(tasks, client, progress=False, on_result=stop)
    finally:
        client.close()
        cluster.close()
    done = [r for r in results if r.message != "interrupted"]
    assert len(done) == 1 and done[0].status == "pass"
    assert all(r.status == "error" for r in results if r.message == "interrupted")
    assert len(results) == 6


def test_kernel_what_ifs_over_shapes(tmp_path, capsys):
    """[[run]] shapes: each task's random device tensors (ncrtl run --shapes, one command that
    reproduces it); bad shapes are refused by the command."""
    tasks = expand(
        parse_plan(
            {
                "run": [
                    {
                        "kernel": "ncrtl/kernels/matmul.py::matmul_tiled",
                        "shapes": ["256x128:bfloat16 256x512:bfloat16"],
                        "core": ["v3", "v4"],
                    }
                ]
            }
        )
    )
    assert tasks[1].command == (
        "ncrtl run ncrtl/kernels/matmul.py::matmul_tiled --shapes 256x128:bfloat16 "
        "256x512:bfloat16 --core v4"
    )
    r = regress.run_task(tasks[0])
    assert r.status == "pass" and r.figures["total_cycles"] > 0, r.message
    out = tmp_path / "o"
    argv = ["run", "ncrtl/kernels/matmul.py::matmul_tiled", "--out", str(out)]
    assert main(argv + ["--shapes", "256by128:bfloat16"]) == 2
    assert "give ROWSxCOLS" in capsys.readouterr().err
    assert main(argv + ["--shapes", "8x8:bfloat16", "--args", "a.npy"]) == 2
    assert main(["run", "--example", "matmul_basic", "--shapes", "8x8"]) == 2
    assert not out.exists()
