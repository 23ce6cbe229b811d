"""A Tensor Engine program on column bands stepped on threads: what ``ncrtl sim matmul`` runs at
full size.

The testbench's run with stream players (:mod:`ncrtl.testbench.tensor_engine.test_tensor_engine`)
writes the program's beats into player files, lets one Verilated model play them and checks what
the players recorded.  Here the same files are played by the band loop
(:mod:`ncrtl.testbench.tensor_engine.band_loop`: the engine without its PE grid, and the grid as
column bands compiled once, each band its own model, stepped in parallel), a C++ program with no
cocotb in it, and what it recorded is checked by the same checks
(``test_tensor_engine._check_serial``): every vector bit for bit against the golden, the last
flags, the error codes and, without stalls, every output and error cycle against the timing
model.  The band loop writes the same transfer logs, output beats and error strobes in the same
cycles as the one model (tests/test_tensor_engine_conformance.py), so the figures of a run do not
depend on how it was stepped.

:func:`band_choice` decides: bands on all the machine's cores from 64 x 64 PEs up, one model
(the cocotb testbench) where bands do not apply, with the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BandChoice",
    "band_choice",
    "available_cores",
    "build_bands",
    "cached_bands",
    "run_on_bands",
    "run_conformance_on_bands",
    "BAND_MIN_PES",
]

#: Engines of at least this many PEs run as column bands by default.  The bands build as a
#: second design (the engine without its grid, one band); a smaller engine builds and runs in
#: seconds as one model.
BAND_MIN_PES = 64 * 64


def available_cores():
    """The cores this process may run on (its CPU affinity where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class BandChoice:
    """How a run steps the engine: ``bands`` column bands (1: one model, the cocotb
    testbench) on ``threads`` threads, and ``why`` in words."""

    bands: int
    threads: int
    why: str

    def line(self):
        """The one line ``ncrtl sim`` says about it."""
        if self.bands == 1:
            return f"simulated as one model: {self.why}"
        return (
            f"simulated as {self.bands} column bands on {self.threads} thread(s): {self.why}; "
            f"--bands 1 runs the one model"
        )


def _plan_ok(cols, bands, tile_unit):
    """None when the grid cuts into ``bands`` bands (:func:`~ncrtl.hdl.tensor_engine.band.
    band_plan`), else the rule it breaks."""
    from ncrtl.hdl.tensor_engine.band import band_plan
    from ncrtl.model.tensor_engine.timing import chain_width

    try:
        band_plan(cols, bands, chain_width(cols, tile_unit))
    except ValueError as e:
        return str(e)
    return None


def band_choice(params, *, bands=None, waves=False, player=True, cores=None):
    """The :class:`BandChoice` of a ``pe_array`` run of ``params``: ``bands`` column bands when
    given (1: one model; ``ValueError`` naming the rule when the grid cannot be cut so or the
    design cannot run as bands), else as many as the machine's ``cores`` (default
    :func:`available_cores`) allow, from :data:`BAND_MIN_PES` PEs up.  One model where bands do
    not apply: waves (recorded from the one model), the Python drivers, the parallel tiles and
    the background plane (several streams of each kind), the sparse path (a PE takes moving
    words from PEs up to three columns to its left: they would cross a band edge), a
    profile-guided build (of the one model)."""
    rows, cols, unit = params["rows"], params["cols"], params["tile_unit"]
    cores = cores or available_cores()
    if bands == 1:
        return BandChoice(1, 1, "as --bands 1 asks")
    refusals = (
        (waves, "waves are recorded from the one model"),
        (not player, "the Python drivers drive the one model"),
        (params.get("parallel_tiles"), "parallel tiles stream per lane group"),
        (params.get("background_transpose"), "the background plane streams per plane"),
        (
            params.get("sparse"),
            "the sparse path takes moving words from up to three columns to the left, across "
            "a band edge",
        ),
        (params.get("pgo"), "a profile-guided build is of the one model"),
    )
    why = next((w for cond, w in refusals if cond), None)
    if bands is not None:
        if why is not None:
            raise ValueError(f"--bands {bands}: {why}; --bands 1 runs it")
        bad = _plan_ok(cols, bands, unit)
        if bad is not None:
            raise ValueError(f"--bands {bands}: {bad}")
        return BandChoice(bands, min(bands, cores), f"as --bands {bands} asks")
    if why is not None:
        return BandChoice(1, 1, why)
    if rows * cols < BAND_MIN_PES:
        return BandChoice(1, 1, f"bands apply from {BAND_MIN_PES} PEs (64 x 64) up")
    if cores < 2:
        return BandChoice(1, 1, "this machine gives the process one core")
    n = next(b for b in range(min(cores, cols), 0, -1) if _plan_ok(cols, b, unit) is None)
    if n == 1:
        return BandChoice(1, 1, f"no cut of the {cols} columns into up to {cores} bands")
    return BandChoice(
        n, min(n, cores), f"{n} bands of {cols // n} columns for this machine's {cores} cores"
    )


def _band_key(block, params, bands):
    """The build index key of the band loop of ``params`` cut into ``bands``: the generator's
    sources (:func:`ncrtl.testbench.sim.source_key`), the hardware parameters and the loops'
    own sources (the C++ they write)."""
    from ncrtl.testbench import sim, stream_loop
    from ncrtl.testbench.tensor_engine import band_loop

    loops = hashlib.sha256()
    for mod in (band_loop, stream_loop):
        loops.update(Path(mod.__file__).read_bytes())
    what = json.dumps(
        [block.name, block.hardware(params), bands, loops.hexdigest()], sort_keys=True
    )
    return sim.source_key(f"{block.top_name(params)}_bands{bands}", what)


def _band_index(block, params, bands):
    from ncrtl.testbench.sim import build_root

    return build_root() / "index" / f"bands-{_band_key(block, params, bands)}"


def cached_bands(block, params, bands):
    """The binary of the band loop :func:`build_bands` would find, or None."""
    from ncrtl.testbench.sim import build_root

    try:
        rec = json.loads(_band_index(block, params, bands).read_text())
        binary = build_root() / rec["binary"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return binary if binary.is_file() else None


def build_bands(block, params, bands):
    """The band loop of the engine of ``params`` cut into ``bands`` bands
    (:func:`~ncrtl.testbench.tensor_engine.band_loop.build_band_loop`), found without generating
    its Verilog when it was built from the same sources (the build index, as
    :func:`ncrtl.testbench.conformance.build_block` finds a block's model): a ``BandBuild``
    whose ``parts`` are all 0 when it was found."""
    from ncrtl.model.modes import pe_modes
    from ncrtl.testbench.sim import build_root
    from ncrtl.testbench.tensor_engine.band_loop import BandBuild, build_band_loop

    found = cached_bands(block, params, bands)
    if found is not None:
        return BandBuild(found, {"verilog": 0.0, "band": 0.0, "loop": 0.0})
    index = _band_index(block, params, bands)
    loop = build_band_loop(
        params["rows"],
        params["cols"],
        bands,
        tile_unit=params["tile_unit"],
        modes=pe_modes(params["pe_modes"]),
    )
    index.parent.mkdir(parents=True, exist_ok=True)
    tmp = index.with_name(f"{index.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"binary": str(Path(loop.binary).relative_to(build_root()))}))
    os.replace(tmp, index)
    return loop


class _Dut:
    """What the testbench's checks read of a cocotb handle: the design's name and a log."""

    def __init__(self, name):
        self._name = name
        self._log = logging.getLogger(f"ncrtl.bands.{name}")


def run_on_bands(
    block,
    params,
    prog,
    choice,
    *,
    seed,
    stall=0.0,
    check_timing=True,
    progress=True,
    folder=None,
    summary=None,
):
    """Run ``prog`` on ``choice.bands`` column bands of the engine of ``params`` (built, or
    found in the build cache) and check it as the testbench does: ``(BlockResult, result
    vectors)`` as :func:`ncrtl.testbench.conformance.run_block` and ``run_program`` return
    them, the steps' seconds (``generate``: the Verilog, ``build``: the band library and the
    loop, ``golden_s``, ``setup_s``: the player files, ``loop_s``: the loop's process, of which
    ``stream_s`` streaming, ``compare_s``) and the counters (``first_instr``,
    ``first_out``, ``last_out``, ``cycles``, ``run_cycles``, ``run_us``).  ``stall``: the
    probability of an idle cycle on each input stream and of backpressure on the result, as
    the players play it; ``folder``: where the player files are written and kept (default: a
    temporary folder); ``summary``: a JSON summary file the scoreboards are merged into, as a
    testbench's are (:meth:`~ncrtl.testbench.scoreboard.Scoreboard.write_json`)."""
    from ncrtl.model.tensor_engine.isa import Op
    from ncrtl.testbench import progress as report
    from ncrtl.testbench.conformance import BlockResult, verdict
    from ncrtl.testbench.stream_loop import run_loop
    from ncrtl.testbench.tensor_engine.program import expected_outputs
    from ncrtl.testbench.tensor_engine.test_tensor_engine import (
        _check_serial,
        read_player_files,
        write_player_files,
    )

    label = block.label(params)
    t0 = time.perf_counter()
    said = (
        report.step(f"column-band build of {block.top_name(params)} ({choice.bands} bands)")
        if progress
        else contextlib.nullcontext()
    )
    try:
        with said:
            loop = build_bands(block, params, choice.bands)
    except Exception as exc:  # a build failure is a result, as run_block makes it
        return BlockResult(
            label, False, message=f"build failed: {exc}", seconds=time.perf_counter() - t0
        ), None
    built_s = time.perf_counter() - t0
    generate = loop.parts.get("verilog", 0.0)
    steps = {
        "bands": choice.bands,
        "threads": choice.threads,
        "generate": generate,
        "build": built_s - generate,
        "cached": not any(loop.parts.values()),
        "directory": str(Path(loop.binary).parent),
    }
    t_golden = time.perf_counter()
    expect = expected_outputs(prog)
    steps["golden_s"] = time.perf_counter() - t_golden
    total = sum(s.ins.n for s, _ in prog.valid_steps() if s.ins.op == Op.MM)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(folder) if folder is not None else Path(tmp) / "player"
        t_setup = time.perf_counter()
        write_player_files(folder, prog, total, stall=stall, seed=seed)
        steps["setup_s"] = time.perf_counter() - t_setup
        if progress:
            report.say(
                f"simulating {block.top_name(params)} as {choice.bands} column bands on "
                f"{choice.threads} thread(s)"
            )
        t_sim = time.perf_counter()
        try:
            cycles, seconds = run_loop(loop.binary, folder, choice.threads)
        except RuntimeError as exc:
            return BlockResult(
                label, False, message=str(exc), seconds=time.perf_counter() - t0, steps=steps
            ), None
        steps["loop_s"] = time.perf_counter() - t_sim
        steps["stream_s"] = seconds
        obs = dict(
            read_player_files(folder),
            cycles=cycles + 2,  # with the reset cycles, as the testbench counts
            run_cycles=cycles,
            run_s=seconds,
        )
    t_compare = time.perf_counter()
    dut = _Dut(f"{block.top_name(params)}_bands")
    try:
        boards, got = _check_serial(dut, prog, expect, obs, check_timing)
        ran, message = True, ""
    except Exception as exc:  # what the output words could not be read as
        boards, got, ran, message = [], None, False, f"{type(exc).__name__}: {exc}"
    steps["compare_s"] = time.perf_counter() - t_compare
    units = [b.summary() for b in boards]
    if summary is not None:
        for b in boards:
            b.write_json(summary)
    passed, message = verdict(units, ran, message)
    if not passed and boards:
        message = "\n".join([message] + [b.report() for b in boards if b.mismatches])
    counters = {
        "cycles": obs["cycles"],
        "run_cycles": cycles,
        "run_us": int(seconds * 1e6),
        "first_instr": obs["accepted"][0] if obs["accepted"] else 0,
        "first_out": obs["out_cycles"][0] if obs["out_cycles"] else 0,
        "last_out": obs["out_cycles"][-1] if obs["out_cycles"] else 0,
    }
    res = BlockResult(
        label,
        passed,
        units,
        time.perf_counter() - t0,
        built_s,
        obs["cycles"],
        message,
        counters,
        steps,
    )
    return res, got


def run_conformance_on_bands(block, params, *, count, seed, stall, waves=None, progress=False):
    """A ``pe_array`` conformance run as the testbench makes it (its two programs: the timed one
    without stalls, then the one with ``max(stall, 0.2)`` idle and backpressure cycles) on
    column bands when :func:`band_choice` cuts the engine (one :class:`BlockResult`, the
    scoreboards of both programs added up), else None: the cocotb testbench runs it (the
    reason said with ``progress`` at full size)."""
    from ncrtl.testbench import progress as report
    from ncrtl.testbench.tensor_engine.test_tensor_engine import conformance_program

    choice = band_choice(params, waves=bool(waves), player=True)
    if choice.bands == 1:
        if progress and params["rows"] * params["cols"] >= BAND_MIN_PES:
            report.say(f"{block.label(params)}: {choice.line()}")
        return None
    if progress:
        report.say(f"{block.label(params)}: {choice.line()}")
    settings = (params, count)
    runs = (
        (conformance_program(seed, 1, settings=settings), 0.0, seed, True),
        (
            conformance_program(seed, 2, timed=False, settings=settings),
            max(stall, 0.2),
            seed + 11,
            False,
        ),
    )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"  # both programs' scoreboards, added up
        for prog, st, sd, timed in runs:
            res, _ = run_on_bands(
                block,
                params,
                prog,
                choice,
                seed=sd,
                stall=st,
                check_timing=timed,
                progress=progress,
                summary=summary,
            )
            results.append(res)
            if not res.passed:
                return res
        units = json.loads(summary.read_text())["scoreboards"]
    first, last = results
    return type(first)(
        first.label,
        True,
        units,
        sum(r.seconds for r in results),
        first.build_seconds,
        sum(r.cycles for r in results),
        "",
        {"cycles": first.cycles + last.cycles},
        first.steps,
    )
