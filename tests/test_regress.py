"""``ncrtl regress``: plans expanded into tasks (every rule checked before a cluster starts), and a
small plan on a local Dask cluster of two worker processes with its results in one place.  The
separate scheduler and worker processes, with a worker killed mid-run, are in the slow suite."""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from ncrtl.cli import main
from ncrtl.testbench import regress
from ncrtl.testbench.regress import PlanError, Task, TaskResult, expand, parse_plan

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
        c.command == ("ncrtl conformance fp.add --count 200 --seed 2 --stall 0.2")
        and c.design
        and c.label == "fp.add"
    )
    assert tasks[0].design == tasks[1].design  # one build for both seeds
    assert tasks[3].command == "ncrtl timing matmul --sparse 4:16 --n 128 --repeat 4"
    assert tasks[5].command == "ncrtl run --example matmul_basic --core v4"
    assert tasks[5].label == "matmul_basic core=v4" and tasks[5].design is None


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
        ({"conformance": [{"block": "fp.add", "count": 0}]}, r"count 0 must be >= 1"),
        ({"run": [{"core": "v3"}]}, r"names a kernel .* or an example"),
        ({}, r"no table"),
    ],
)
def test_bad_plans_name_the_table_and_the_rule(data, match):
    with pytest.raises(PlanError, match=match):
        expand(parse_plan(data))


def test_the_cli_refuses_a_bad_plan_before_any_cluster(tmp_path, capsys):
    plan = tmp_path / "p.toml"
    plan.write_text('[[conformance]]\nblock = ["fp.nope"]\n')
    assert main(["regress", str(plan), "--out", str(tmp_path / "o")]) == 2
    assert "fp.nope" in capsys.readouterr().err
    plan.write_text("not = toml = at all")
    assert main(["regress", str(plan)]) == 2
    assert not (tmp_path / "o").exists()


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


#: The plan of the local-cluster test: small (the default suite's budget), every kind.
SMALL_PLAN = """
[[conformance]]
block = "fp.add"
count = 100
seed = [1, 2]

[[timing]]
args = ["--k 64 --m 64 --n 128 --repeat 4", "--k 0"]

[[run]]
example = "matmul_basic"
"""


@pytest.mark.sim
def test_a_plan_on_a_local_cluster_of_two_workers(tmp_path, capsys):
    """Two worker processes: a conformance of fp.add (one build for both seeds), a timing run,
    a kernel run and a timing run that breaks a rule (a fail with its command)."""
    plan = tmp_path / "plan.toml"
    plan.write_text(SMALL_PLAN)
    out = tmp_path / "out"
    rc = main(["regress", str(plan), "--workers", "2", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 1, text  # the broken timing run fails the regression
    assert "total: 5 tasks, 4 passed, 1 failed, 0 errors" in text
    assert "[fail] ncrtl timing matmul --k 0" in text
    rows = list(csv.DictReader((out / "results.csv").open()))
    conf = [r for r in rows if r["kind"] == "conformance"]
    assert all(r["status"] == "pass" and int(r["vectors"]) > 0 for r in conf)
    assert all(int(r["mismatches"]) == 0 for r in conf)
    runs = [r for r in rows if r["kind"] == "run"]
    assert all(int(r["total_cycles"]) > 0 for r in runs)
    timing = [r for r in rows if r["kind"] == "timing" and r["status"] == "pass"]
    assert {float(r["tflops"]) > 0 for r in timing} == {True}
    assert len({r["worker"] for r in rows}) == 2  # both workers took tasks
    assert json.loads((out / "results.json").read_text())[0]["command"].startswith("ncrtl ")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        # 8 what-ifs of about 4 s each: w0 dies in its second task
        plan.write_text(
            "[[timing]]\nargs = ["
            + ", ".join(f'"--k 128 --n 512 --repeat {150000 + i}"' for i in range(8))
            + "]\n"
        )
        killer = subprocess.Popen(
            [sys.executable, "-c", f"import time, os; time.sleep(7); os.killpg({procs[1].pid}, 9)"]
        )
        rc = main(["regress", str(plan), "--cluster", address, "--out", str(tmp_path / "o")])
        killer.wait()
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
