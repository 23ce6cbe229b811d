"""Hardware-vs-golden conformance runs: build each block, run its cocotb testbench, summarise.

Used by ``ncrtl conformance`` and by the pytest conformance tests.  The testbench of a block reads
its parameters and run size from the environment (see :func:`tb_settings`) and leaves its
scoreboard summaries in the JSON file named by ``NCRTL_SUMMARY``; this module collects them into a
table and a JUnit XML report.
"""

import contextlib
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

from ncrtl.testbench.outputs import write_output

__all__ = [
    "run_block",
    "build_block",
    "time_split",
    "print_time_split",
    "run_conformance",
    "tb_settings",
    "tb_block",
    "BlockResult",
]


def tb_block():
    """Inside a cocotb testbench: the registry name of the block under test."""
    return os.environ.get("NCRTL_BLOCK", "")


def tb_settings():
    """Inside a cocotb testbench: ``(params, count, seed, stall)`` set by :func:`run_block`."""
    params = json.loads(os.environ.get("NCRTL_PARAMS", "{}"))
    count = int(os.environ.get("NCRTL_COUNT", "2000"))
    seed = int(os.environ.get("NCRTL_SEED", "1"))
    stall = float(os.environ.get("NCRTL_STALL", "0.2"))
    return params, count, seed, stall


@dataclass
class BlockResult:
    label: str
    passed: bool
    units: list = field(default_factory=list)  # scoreboard summaries
    seconds: float = 0.0
    build_seconds: float = 0.0
    cycles: int = 0
    message: str = ""
    counters: dict = field(default_factory=dict)
    #: Wall seconds of the steps outside the simulation: ``generate`` (Verilog; 0 when the build
    #: was found from the generator's sources), ``build`` (Verilator, or the cache lookup),
    #: ``simulate`` (the simulator process, start to exit); ``cached`` and ``directory`` of the
    #: build, ``run_dir`` (where the simulator ran: its log, waves and player files).
    steps: dict = field(default_factory=dict)

    @property
    def vectors(self):
        return sum(u["vectors"] for u in self.units)

    @property
    def mismatches(self):
        return sum(u["mismatches"] for u in self.units)

    def report(self):
        """The label, the failure message and every scoreboard's mismatch count with its first
        mismatches: what a failing test prints."""
        detail = "\n".join(
            f"{u['name']}: {u['mismatches']}/{u['vectors']} {u.get('first', [])[:3]}"
            for u in self.units
        )
        return f"{self.label}: {self.message}\n{detail}"


def run_block(
    block,
    params,
    *,
    count,
    seed,
    stall=0.2,
    waves=None,
    testcase=None,
    testbench=None,
    extra_env=None,
    player=None,
    progress=False,
    own_program=False,
):
    """Build ``block`` with ``params`` (wrapped in stream players: ``player``, see
    :func:`build_block`) and run its testbench (or the cocotb module ``testbench``) with
    ``extra_env``; return a :class:`BlockResult`.  ``own_program``: ``extra_env`` hands the
    testbench the caller's program, which the caller checked, in place of the block's
    conformance program (whose :meth:`~ncrtl.blocks.Block.check_program` then does not
    apply).  ``progress``: say on stderr what the build
    does (:func:`build_block`) and draw a progress bar while the simulation runs
    (:mod:`ncrtl.testbench.progress`: the work done for testbenches that report it, the elapsed
    time for the others)."""
    from ncrtl.testbench.progress import ENV, ProgressBar

    if not own_program:
        block.check_program(params)  # before anything is generated
    label = block.label(params)
    t0 = time.perf_counter()
    try:
        built, steps = build_block(block, params, waves=waves, player=player, progress=progress)
    except Exception as exc:  # a build failure is a result, not a crash of the whole run
        return BlockResult(
            label, False, message=f"build failed: {exc}", seconds=time.perf_counter() - t0
        )
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"
        env = _testbench_env(block, params, count, seed, stall, summary, extra_env)
        if progress:
            env[ENV] = str(Path(tmp) / "progress.json")
        t_sim = time.perf_counter()
        steps["simulate_start_unix"] = time.time()  # the testbench's clock readings compare to it
        bar = (
            ProgressBar(env[ENV], label=f"simulating {built.top}")
            if progress
            else contextlib.nullcontext()
        )
        with bar:
            res = built.run(
                testbench or block.testbench,
                testcase=testcase,
                env=env,
                seed=seed,
                results=Path(tmp) / "results.xml",
                log=True,  # <build>/runs/<testbench>/sim.log: beside the build it ran
            )
        steps["simulate"] = time.perf_counter() - t_sim
        steps["run_dir"] = str(res.run_dir)
        units = []
        cycles = 0
        counters = {}
        if summary.exists():
            data = json.loads(summary.read_text())
            units = list(data.get("scoreboards", []))
            cycles = int(data.get("cycles", 0))
            counters = {k: v for k, v in data.items() if k not in ("scoreboards", "timings")}
            steps.update(data.get("timings", {}))
    passed, msg = verdict(units, res.passed, res.message)
    if msg:
        msg += f"\n(log: {res.run_dir / 'sim.log'})"
    if res.waves:
        print(f"waves: {res.waves}", file=sys.stderr)
    return BlockResult(
        label, passed, units, time.perf_counter() - t0, built.seconds, cycles, msg, counters, steps
    )


def verdict(units, ran, message=""):
    """``(passed, message)`` of a run whose scoreboards left ``units`` (their summaries) and
    whose simulation ended well (``ran``) or with ``message``: a run passes when it ran, every
    scoreboard compared something and none found a mismatch."""
    empty = [u["name"] for u in units if not u["vectors"]]
    if ran and units and not empty and all(u["mismatches"] == 0 for u in units):
        return True, ""
    if empty and not any(u["mismatches"] for u in units):
        return False, (
            f"scoreboard(s) {', '.join(empty)} compared no vectors: a run that checked "
            f"nothing does not pass"
        )
    return False, message or "no scoreboard summary was written: the run checked nothing"


def streaming_rate(result):
    """Streaming cycles/s of a run whose testbench reported ``run_cycles`` and ``run_us`` (the
    cycles from the first input offered to the last output, and their wall time), else 0."""
    c = result.counters
    return c["run_cycles"] / (c["run_us"] / 1e6) if c.get("run_us") else 0.0


def time_split(result):
    """The wall-time split of a run as ``[(step, seconds)]``: ``generate`` and ``build`` (or
    ``cached build``), ``model start-up`` (simulator process start to the testbench's first
    line), the testbench's ``stimulus``, ``golden``, ``streaming``, ``compare`` and ``setup``
    (drivers, reset, the drain), ``exit`` (the rest of the simulator process), for a run on a
    C++ loop (``loop_s``) its ``loop start and exit``, ``total``.  Steps
    a testbench does not report are left out."""
    st = result.steps
    out = []
    if st.get("cached"):
        out.append(("cached build", st.get("build", 0.0)))
    else:
        out += [("generate", st.get("generate", 0.0)), ("build", st.get("build", 0.0))]
    sim = st.get("simulate")
    inside = 0.0
    if "start_unix" in st and "simulate_start_unix" in st:
        startup = max(0.0, st["start_unix"] - st["simulate_start_unix"])
        out.append(("model start-up", startup))
        inside += startup
    for key, name in (
        ("stimulus_s", "stimulus"),
        ("golden_s", "golden"),
        ("stream_s", "streaming"),
        ("compare_s", "compare"),
        ("setup_s", "setup"),
    ):
        if key in st:
            out.append((name, st[key]))
            inside += st[key]
    if sim is not None and inside:
        out.append(("exit", max(0.0, sim - inside)))
    if "loop_s" in st:  # a C++ loop's process: its start (the models, the files) and exit
        out.append(("loop start and exit", max(0.0, st["loop_s"] - st.get("stream_s", 0.0))))
    out.append(("total", result.seconds))
    return out


def print_time_split(result, file=None):
    """Print :func:`time_split` as two lines: the build (with its folder) and the steps."""
    split = time_split(result)
    build = ", ".join(
        f"{n} {v:.1f} s" for n, v in split if n in ("generate", "build", "cached build")
    )
    print(f"  build: {build} ({result.steps.get('directory', '?')})", file=file)
    rest = ", ".join(
        f"{n} {v:.1f} s" for n, v in split if n not in ("generate", "build", "cached build")
    )
    print(f"  time: {rest}", file=file)


def find_build(block, params, *, waves=None, player=None):
    """The cached build of ``block`` with ``params`` recorded under its source key (what
    :func:`build_block` would use without generating anything), or None."""
    from ncrtl.testbench import player as players
    from ncrtl.testbench import sim

    top = block.top_name(params)
    if player:
        top = players.player_top(top)
    key = sim.source_key(
        top,
        json.dumps([block.name, params], sort_keys=True),
        waves=waves,
        extra_args=block.build_args(params),
    )
    return sim.cached_build(key)


def build_block(block, params, *, waves=None, player=None, progress=False):
    """The Verilator model of ``block`` with ``params``: ``(Build, steps)``.

    A build recorded under the block's :func:`ncrtl.testbench.sim.source_key` (the generator's
    sources, the block, its parameters, the tools) is used without generating its Verilog, which
    at 128 x 128 takes most of a minute; otherwise the Verilog is generated and built (or found by
    its content hash, :func:`ncrtl.testbench.sim.build`) and recorded.  ``steps``: seconds of
    ``generate`` and ``build``, ``cached``, ``directory``.

    ``player``: a list of :class:`ncrtl.testbench.player.PlayerPort` of the design; the model is
    then the design wrapped in its stream players (:func:`ncrtl.testbench.player.player_verilog`),
    top :func:`~ncrtl.testbench.player.player_top`.

    ``progress``: say on stderr what takes time (:func:`ncrtl.testbench.progress.step`): the
    Verilog generation and the Verilator build with their elapsed time, and where the build is
    cached.

    A block with ``pgo=1`` gets a profile-guided build (:func:`ncrtl.testbench.sim.build`'s
    ``profile``) trained on the block's ``training`` run (:func:`_training`)."""
    from ncrtl.testbench import player as players
    from ncrtl.testbench import progress as report
    from ncrtl.testbench import sim

    top = block.top_name(params)
    args = block.build_args(params)
    if player:
        top = players.player_top(top)
    key = sim.source_key(
        top, json.dumps([block.name, params], sort_keys=True), waves=waves, extra_args=args
    )
    t0 = time.perf_counter()
    built = sim.cached_build(key)
    generate = 0.0
    if built is None:
        said = report.step(f"Verilog generation of {top}") if progress else contextlib.nullcontext()
        with said:
            text, design = block.verilog(params)
            if player:
                text += "\n" + players.player_verilog(design, player)
        generate = time.perf_counter() - t0
        profile = _training(block, params, player) if params.get("pgo") else None
        built = sim.build(
            text, top, waves=waves, extra_args=args, progress=progress, profile=profile
        )
        sim.remember_build(key, built)
    steps = {
        "generate": generate,
        "build": time.perf_counter() - t0 - generate,
        "cached": built.cached,
        "directory": str(built.directory),
    }
    return built, steps


def _testbench_env(block, params, count, seed, stall, summary, extra=None):
    """The environment a block's cocotb testbench reads (``NCRTL_*``), then ``extra``."""
    return {
        "NCRTL_PARAMS": json.dumps(params),
        "NCRTL_COUNT": str(count),
        "NCRTL_SEED": str(seed),
        "NCRTL_STALL": str(stall),
        "NCRTL_SUMMARY": str(summary),
        "NCRTL_LABEL": block.label(params),
        "NCRTL_BLOCK": block.name,
        **(extra or {}),
    }


def _training(block, params, player):
    """``profile(build)`` of a profile-guided build of ``block``: its ``training`` run on the
    instrumented model (seed 1, no stalls unless the testbench adds its own); a failing run
    fails the build."""
    from ncrtl.testbench import sim

    if block.training is None:
        raise sim.BuildError(f"{block.name}: no profile-guided build (pgo=1) for this block")
    test_module, extra = block.training(params, bool(player))

    def train(built):
        with tempfile.TemporaryDirectory() as tmp:
            env = _testbench_env(block, params, 1, 1, 0.0, Path(tmp) / "summary.json", extra)
            res = built.run(
                test_module,
                env=env,
                seed=1,
                results=Path(tmp) / "results.xml",
                log=built.directory / "training.log",
            )
            if not res.passed:
                raise sim.BuildError(
                    f"{block.label(params)}: the training run of the profile-guided build "
                    f"failed: {res.message}"
                )

    return train


def _junit(results, path):
    suite = ElementTree.Element(
        "testsuite",
        name="ncrtl.conformance",
        tests=str(len(results)),
        failures=str(sum(not r.passed for r in results)),
    )
    for r in results:
        case = ElementTree.SubElement(
            suite, "testcase", classname="conformance", name=r.label, time=f"{r.seconds:.3f}"
        )
        props = ElementTree.SubElement(case, "properties")
        ElementTree.SubElement(props, "property", name="vectors", value=str(r.vectors))
        ElementTree.SubElement(props, "property", name="mismatches", value=str(r.mismatches))
        if not r.passed:
            text = r.message + "".join("\n" + json.dumps(u.get("first", [])[:5]) for u in r.units)
            ElementTree.SubElement(
                case, "failure", message=f"{r.mismatches} mismatches"
            ).text = text
    write_output(
        path,
        "--junit",
        lambda p: ElementTree.ElementTree(suite).write(p, encoding="utf-8", xml_declaration=True),
    )


def run_conformance(
    runs, *, count, seed, junit=None, stall=0.2, waves=False, jobs=None, progress=False
):
    """Run every ``(block, params)`` in ``runs``; print what each runs, then its rows of the table
    as soon as it finishes, then the totals; return the exit status.  ``progress``: say on
    stderr what the builds and the simulations are doing (:func:`run_block`)."""
    for b, p in runs:  # every configuration before the first build
        b.check_program(p)
    jobs = jobs or min(len(runs), os.cpu_count() or 1)
    labels = [b.label(p) for b, p in runs]
    print(
        f"conformance: {len(runs)} configuration(s), seed {seed}, stall {stall}, --count {count}",
        flush=True,
    )
    for (b, p), label in zip(runs, labels):
        print(f"  {label}: {b.describe(p, count)}", flush=True)
    w = max(len(label) for label in labels) + 2
    print(
        f"{'block':{w}s}{'unit':>22s}{'vectors':>10s}{'mismatch':>10s}{'cycles':>9s}{'time s':>8s}  result",
        flush=True,
    )
    results = [None] * len(runs)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(
                _run,
                b,
                p,
                count=count,
                seed=seed,
                stall=stall,
                waves=True if waves else None,
                progress=progress,
            ): i
            for i, (b, p) in enumerate(runs)
        }
        for done in as_completed(futures):
            r = results[futures[done]] = done.result()
            _print_rows(r, w)
    total_v = sum(r.vectors for r in results)
    total_m = sum(r.mismatches for r in results)
    bad = [r for r in results if not r.passed]
    print(
        f"total: {total_v} vectors, {total_m} mismatches, "
        f"{len(results) - len(bad)}/{len(results)} configurations passed"
    )
    if junit:
        _junit(results, junit)
        print(f"junit: {junit}")
    return 1 if bad else 0


def _run(block, params, **kw):
    """One configuration of :func:`run_conformance`: the block's :attr:`~ncrtl.blocks.Block.
    runner` where it takes the run, else :func:`run_block`."""
    if block.runner:
        import importlib

        module, name = block.runner.split(":")
        res = getattr(importlib.import_module(module), name)(block, params, **kw)
        if res is not None:
            return res
    return run_block(block, params, **kw)


def _print_rows(r, w):
    """The table rows of one :class:`BlockResult` (a row per scoreboard), its failure details."""
    rows = r.units or [{"name": "-", "vectors": 0, "mismatches": 0}]
    for i, u in enumerate(rows):
        first = i == 0
        print(
            f"{r.label if first else '':{w}s}{u['name']:>22s}{u['vectors']:>10d}"
            f"{u['mismatches']:>10d}{(str(r.cycles) if first else ''):>9s}"
            f"{(f'{r.seconds:.1f}' if first else ''):>8s}  "
            f"{('PASS' if r.passed else 'FAIL') if first else ''}"
        )
    if not r.passed:
        if r.message:
            print("  " + r.message.replace("\n", "\n  "))
        for u in r.units:
            for m in u.get("first", [])[:5]:
                print(f"  {u['name']}: {m}")
    sys.stdout.flush()
