"""A traced kernel on the Verilator build of the RTL NeuronCore (what ``ncrtl run --rtl``
does): the ``neuroncore`` block built at the program's geometry, for the PE modes its matmuls
use, and its testbench run on a job file of this one kernel."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RtlResult", "block_params", "plan", "run_rtl", "completions", "model_at_rtl", "LATENCY"]

#: Cycles of the device memory model behind every DMA engine (``ncrtl run --rtl``): from an
#: accepted read address to its first data beat, and from a write burst's last beat to its
#: response (:class:`~ncrtl.testbench.dma.memory.AxiMemory`).
LATENCY = 8


@dataclass
class RtlResult:
    """A kernel's run on the RTL core: its outputs as the core left them in the device memory,
    the core's cycles (first cycle out of reset to the one in which the last semaphore reached
    its count), the block's label, the PE modes built, the seconds of each step, and per stream
    the cycle in which each instruction completed."""

    outputs: list
    cycles: int
    label: str
    pe_modes: str
    steps: dict
    done: dict


def block_params(geo, pe_modes):
    """The ``neuroncore`` block's parameters of ``geo``, built for ``pe_modes``."""
    from ncrtl import blocks

    names = [p.name for p in blocks.get("neuroncore").params]
    values = {k: getattr(geo, k) for k in names if k != "pe_modes"}
    return blocks.get("neuroncore").resolve(
        {**{k: str(v) for k, v in values.items()}, "pe_modes": pe_modes}
    )


def plan(program, geo, pe_modes=None):
    """``(pe_modes, why)``: the PE build that runs ``program`` on the core of ``geo`` (the
    narrowest family serving its matmuls, ``why`` in words; or ``pe_modes`` as given, ``why``
    None).  Raises :class:`~ncrtl.model.neuroncore.isa.Unsupported` for a program the core does
    not run or whose streams do not fit its device memory, ``ValueError`` for ``pe_modes`` that
    do not serve its matmuls: what ``ncrtl run --rtl`` checks before its golden run."""
    from ncrtl.hdl.neuroncore.isa import program_image
    from ncrtl.model.modes import narrowest_pe_modes
    from ncrtl.model.modes import pe_modes as modes_of
    from ncrtl.model.neuroncore.isa import encode

    enc = encode(program, geo)
    program_image(enc, geo)
    used = enc.modes()
    if pe_modes is None:
        return narrowest_pe_modes(used)
    built = {m.name for m in modes_of(pe_modes)}
    missing = [m for m in used if m not in built]
    if missing:
        raise ValueError(
            f"pe_modes={pe_modes!r} does not serve the kernel's {', '.join(missing)} "
            f"matmuls; its modes: {', '.join(sorted(built))} (leave pe_modes out: the "
            f"narrowest build serving the kernel)"
        )
    return pe_modes, None


def run_rtl(
    program, inputs, geo, *, pe_modes=None, stall=0.0, seed=1, latency=LATENCY, progress=False
):
    """Run ``program`` (traced at ``geo.core()``) on the Verilator build of the core; returns
    an :class:`RtlResult`.  ``pe_modes``: the PE modes to build (default: the narrowest family
    serving the program's matmuls, :func:`ncrtl.model.modes.narrowest_pe_modes`, said in one
    line with ``progress``); ``stall``: the probability of an idle cycle
    on the start stream and of a not-ready or idle cycle on every AXI4 channel (the
    instruction fetch's and the DMA engines').  Raises
    :class:`~ncrtl.model.neuroncore.isa.Unsupported` before anything is built for a kernel the
    core does not run, ``RuntimeError`` when the run fails (a mismatch with the golden, an
    error strobe, a hang), with the testbench's report."""
    from ncrtl import blocks
    from ncrtl.testbench.conformance import run_block
    from ncrtl.testbench.tensor_engine.loop_run import BAND_MIN_PES

    from . import jobs

    modes, why = plan(program, geo, pe_modes)  # refuses before anything is built
    if why and progress:
        from ncrtl.testbench.progress import say_pe_build

        say_pe_build(f"pe_modes={modes}: {why}", "--param pe_modes=...")
    if progress and geo.rows * geo.cols >= BAND_MIN_PES:
        from ncrtl.testbench.progress import say

        say(
            "simulated as one model: the core's Tensor Engine steps inside the core's model "
            "(column bands cut the Tensor Engine alone: ncrtl sim matmul)"
        )
    params = block_params(geo, modes)
    block = blocks.get("neuroncore")
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.pkl"
        jobs.write(job, [jobs.Job(program.kernel, program, list(inputs))], latency=latency)
        res = run_block(
            block,
            params,
            own_program=True,  # the job's kernel, checked by plan(), not the conformance one
            count=1,
            seed=seed,
            stall=stall,
            extra_env={jobs.JOB_ENV: str(job)},
            progress=progress,
        )
        results = jobs.read_results(job)
    if not res.passed or results is None:
        raise RuntimeError(res.report())
    (got,) = results.values()
    return RtlResult(got["outputs"], got["cycles"], res.label, modes, dict(res.steps), got["done"])


def model_at_rtl(program, geo, latency=LATENCY, *, trace=False):
    """The timing model of ``program`` at the RTL core's figures
    (:func:`ncrtl.model.neuroncore.timing.simulate_at_rtl`), each stream starting where the
    core's instruction fetch delivers its first entry
    (:func:`ncrtl.hdl.neuroncore.isa.fetch_starts`)."""
    from ncrtl.hdl.neuroncore.isa import fetch_starts
    from ncrtl.model.neuroncore.isa import encode
    from ncrtl.model.neuroncore.timing import simulate_at_rtl

    starts = fetch_starts(encode(program, geo), geo, latency)
    return simulate_at_rtl(program, geo, latency, trace=trace, starts=starts)


def completions(done, report):
    """Per stream, ``(rtl, model)`` completion cycles of each instruction in order: the RTL's
    (``done``: :attr:`RtlResult.done`) and the timing model's at the RTL's figures (``report``:
    :func:`ncrtl.model.neuroncore.timing.simulate_at_rtl`'s)."""
    out = {}
    for name, recs in report.records.items():
        model = [round(report.core.ns(r.done)) for r in recs]
        out[name] = list(zip(done.get(name, []), model))
    return out
