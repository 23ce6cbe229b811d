"""``neuronxcc.nki``: the NKI API before NKI 0.2 ("beta 1"), on ncrtl's NeuronCore models.

Kernels written for it (``import neuronxcc.nki as nki``, ``import neuronxcc.nki.language as
nl``) run unmodified under ``ncrtl run`` and after :func:`ncrtl.nki.install_aliases`; the
current API (``import nki``) stays as it is beside it.  This module holds that API's entry
points, each a decorator with and without arguments as that API had them:

- ``@nki.jit`` and ``@nki.baremetal``: called with numpy arrays, the kernel runs on the goldens
  and returns its outputs (``save_trace_name=`` / ``save_neff_name=`` also write the timing
  run's Perfetto trace and the instruction streams);
- ``nki.simulate_kernel(kernel, *args, **kwargs)``: the outputs, from the goldens;
- ``@nki.benchmark(warmup=, iters=)``: the timing run; afterwards
  ``kernel.benchmark_result.nc_latency.get_latency_percentile(p)`` is the latency in
  microseconds.  The timing model is deterministic: every percentile is the one latency, and
  ``warmup`` / ``iters`` are accepted and change nothing;
- ``@nki.profile(working_directory=...)``: the timing run, writing the Perfetto trace
  (``save_trace_name``), the instruction streams (``save_neff_name``) and the report
  (``<save_trace_name>.json``) in the working directory; returns None.

``kernel[gx, gy]`` launches an SPMD grid (:mod:`.spmd`: ``nl.spmd_dim``, ``nl.nc``).  The
submodules: ``language``, ``isa``, ``typing``, ``compiler``.  docs/nki/legacy.md.
"""

from __future__ import annotations

import importlib
import inspect
import os

import numpy as np

from .. import _trace
from .._trace import NkiError, NotModelled
from ..kernel import Kernel as _Kernel
from ..kernel import instances_of
from ..kernel import run as _run
from . import spmd, typing
from .typing import tensor

__all__ = [
    "jit",
    "baremetal",
    "benchmark",
    "profile",
    "simulate_kernel",
    "Kernel",
    "BenchmarkResult",
    "LatencyResult",
    "tensor",
    "language",
    "isa",
    "typing",
    "compiler",
    "spmd",
    "NkiError",
    "NotModelled",
]

#: The submodules, imported when first used (``nki.language`` is the older API's language).
SUBMODULES = ("language", "isa", "typing", "compiler", "spmd")

#: The modes of ``nki.jit(mode=...)`` and the entry point each runs as.
MODES = {
    "auto": "jit",
    "baremetal": "baremetal",
    "simulation": "simulation",
    "torchxla": "jit",
    "jax": "jit",
    "benchmark": "benchmark",
    "profile": "profile",
}

#: The arguments each entry point takes (compiler options are accepted and change nothing).
_COMPILE = (
    "additional_compile_opt",
    "debug_kernel",
    "show_compiler_tb",
    "experimental_flags",
    "enable_out_of_bound_check",
    "platform_target",
    "psum_rounding",
)
ARGUMENTS = {
    "jit": _COMPILE + ("mode", "artifacts_dir", "save_neff_name", "save_trace_name"),
    "baremetal": _COMPILE + ("artifacts_dir", "save_neff_name", "save_trace_name"),
    "simulation": _COMPILE,
    "benchmark": _COMPILE
    + ("warmup", "iters", "device_count", "save_neff_name", "save_trace_name"),
    "profile": _COMPILE
    + ("working_directory", "save_neff_name", "save_trace_name", "overwrite", "profile_nth"),
}


def __getattr__(name):
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("__"):
        raise AttributeError(name)
    return _trace.stand_in("neuronxcc.nki", "nki", name)


# -- benchmark results -----------------------------------------------------------------------------


class LatencyResult:
    """``benchmark_result.nc_latency``: the kernel's latency on the timing model."""

    def __init__(self, latency_us):
        self.latency_us = latency_us

    def get_latency_percentile(self, percentile):
        """The ``percentile``-th percentile of the latency, in microseconds: the timing model is
        deterministic, so every percentile (0 to 100) is the one latency."""
        call = "nc_latency.get_latency_percentile"
        if isinstance(percentile, (bool, np.bool_)) or not isinstance(
            percentile, (int, float, np.integer, np.floating)
        ):
            _trace.fail(call, f"percentile {percentile!r} is not a number (50, 99)")
        if not 0 <= percentile <= 100:
            _trace.fail(call, f"percentile {percentile} is outside 0 to 100")
        return self.latency_us

    def __repr__(self):
        return f"<nc_latency {self.latency_us:.3f} us (every percentile)>"


class BenchmarkResult:
    """``kernel.benchmark_result`` after a ``@nki.benchmark`` kernel's call: ``nc_latency``,
    and ncrtl's timing report (``report``: its engines, DMA queues, trace)."""

    def __init__(self, report, warmup, iters):
        self.report = report
        self.latency_ns = report.total_ns
        self.nc_latency = LatencyResult(report.total_ns / 1000.0)
        self.warmup, self.iters = warmup, iters

    def __repr__(self):
        return f"<benchmark_result {self.nc_latency.latency_us:.3f} us>"


# -- kernels ---------------------------------------------------------------------------------------


class Kernel(_Kernel):
    """A kernel of the older API, decorated with ``@nki.jit``, ``@nki.baremetal``,
    ``@nki.benchmark`` or ``@nki.profile`` (its ``mode``); ``kernel[gx, gy]`` its SPMD launch
    grid.  Called with numpy arrays outside a kernel, it runs as its entry point does; called
    by a kernel being traced, its calls join the caller's streams (a gridded one runs its
    instances there, one after another)."""

    def __init__(self, fn, platform_target=None, lnc=1, *, mode="jit", settings=None, **options):
        super().__init__(fn, platform_target, lnc, **options)
        self.mode = mode
        self.settings = dict(settings or {})
        self.benchmark_result = None

    def _again(self, fn=None, mode=None, settings=None, lnc=None, **options):
        return Kernel(
            fn or self.fn,
            self.platform_target,
            self.lnc if lnc is None else lnc,
            mode=mode or self.mode,
            settings=self.settings if settings is None else settings,
            **{**self.options, **options},
        )

    def __getitem__(self, grid):
        dims, cores, core_of = spmd.launch_grid(self.fn.__name__, grid)
        return self._again(lnc=cores, _grid=dims, _core_of=core_of)

    def __call__(self, *args, **kwargs):
        tr = _trace.current_or_none()
        if tr is not None:
            return self._inline(tr, args, kwargs)
        if self.mode == "benchmark":
            return self._benchmark(args, kwargs)
        if self.mode == "profile":
            return self._profile(args, kwargs)
        return self._values(args, kwargs)

    def __repr__(self):
        return f"<nki.{self.mode} kernel {self.fn.__name__}>"

    def replan(self, error):
        """After a trace's placement overflow: spill the block tensor whose blocks overflowed
        (PSUM to SBUF, SBUF to device memory) and trace again, as this API's compiler spilled
        (``ncrtl.nki.legacy.tile.spill_after``)."""
        from .tile import spill_after

        return spill_after(error)

    def argument(self, t):
        """A device tensor as this API's kernels take it (its indexing, operators, assignment:
        ``ncrtl.nki.legacy.tile``)."""
        from .tile import tile_of

        return tile_of(t, None)

    def _device(self, v):
        if isinstance(v, _trace.NkiTensor) and v._decl.space == "hbm":
            return self.argument(v)
        return v

    # a kernel called by a kernel being traced -----------------------------------------------

    def _inline(self, tr, args, kwargs):
        # device tensors of a caller in the current API (host code traced by ``ncrtl run``)
        # as this API's
        args = tuple(self._device(a) for a in args)
        kwargs = {k: self._device(v) for k, v in kwargs.items()}
        if self.grid is None:
            return self.fn(*args, **kwargs)
        core_of = self.options.get("_core_of")
        if core_of is not None and tr.num_programs == self.lnc:
            positions = [
                p for p in instances_of(self.grid, tr.program_id, tr.num_programs, core_of)
            ]
            positions = [p for p in positions if p is not None]
        else:  # the caller's one core runs every instance
            positions = instances_of(self.grid, 0, 1)
        saved = tr.grid, tr.position, tr.instance, tr.made, tr.device
        ret = None
        try:
            tr.device = []
            for k, position in enumerate(positions):
                tr.grid, tr.position, tr.instance, tr.made = self.grid, position, k, 0
                ret = self.fn(*args, **kwargs)
        finally:
            tr.grid, tr.position, tr.instance, tr.made, tr.device = saved
        return ret

    # the entry points -----------------------------------------------------------------------

    def _launch(self, args, kwargs, **how):
        args, kwargs = _positional(self.fn, args, kwargs)
        return _run(self, args, kwargs, **how)

    def _values(self, args, kwargs):
        s = self.settings
        traced = bool(s.get("save_trace_name") or s.get("save_neff_name"))
        result = self._launch(
            args, kwargs, timing=traced, trace_file=bool(s.get("save_trace_name"))
        )
        if traced:
            folder = s.get("artifacts_dir") or os.getcwd()
            _write(f"nki.{self.mode}", result, folder, s, overwrite=True)
        outs = result.outputs
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    def _benchmark(self, args, kwargs):
        s = self.settings
        result = self._launch(
            args, kwargs, golden=False, timing=True, trace_file=bool(s.get("save_trace_name"))
        )
        self.benchmark_result = BenchmarkResult(result.report, s.get("warmup"), s.get("iters"))
        if s.get("save_trace_name") or s.get("save_neff_name"):
            _write("nki.benchmark", result, os.getcwd(), s, overwrite=True)
        us = self.benchmark_result.nc_latency.latency_us
        print(
            f"nki.benchmark {self.fn.__name__}: latency {us:,.3f} us on ncrtl's timing model "
            f"(deterministic: every percentile is this latency)"
        )
        return None

    def _profile(self, args, kwargs):
        s = self.settings
        folder = s["working_directory"]
        result = self._launch(args, kwargs, golden=False, timing=True, trace_file=True)
        self.benchmark_result = BenchmarkResult(result.report, None, None)
        _write("nki.profile", result, folder, s, overwrite=s.get("overwrite", False))
        return None


def _positional(fn, args, kwargs):
    """``(args, kwargs)`` with every device tensor (numpy array) given by name moved to its
    place among the positional arguments (the parameters before it filled with their
    defaults): the device tensors are the kernel's positional arguments."""
    if not any(isinstance(v, np.ndarray) for v in kwargs.values()):
        return args, kwargs
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return args, kwargs  # the trace names the arguments that do not fit
    last = max(
        (i for i, p in enumerate(params) if isinstance(bound.arguments.get(p.name), np.ndarray)),
        default=-1,
    )
    if last < len(args) or any(p.kind not in kinds for p in params[: last + 1]):
        return args, kwargs
    out = []
    for p in params[: last + 1]:
        if p.name in bound.arguments:
            out.append(bound.arguments[p.name])
        elif p.default is not p.empty:
            out.append(p.default)
        else:
            return args, kwargs
    rest = {k: v for k, v in kwargs.items() if k not in {p.name for p in params[: last + 1]}}
    return tuple(out), rest


def _write(call, result, folder, settings, overwrite):
    """The run's files in ``folder``: the instruction streams (``save_neff_name``), the
    Perfetto trace (``save_trace_name``) and, for ``nki.profile``, the report
    (``<save_trace_name>.json``)."""
    import json

    streams_name = settings.get("save_neff_name")
    trace_name = settings.get("save_trace_name")
    files = {}
    if streams_name:
        programs = result.program if isinstance(result.program, tuple) else (result.program,)
        files[streams_name] = lambda p: _text(p, "\n".join(q.dump() for q in programs) + "\n")
    if trace_name and result.report is not None and result.report.trace is not None:
        files[trace_name] = result.report.trace.write
    if call == "nki.profile" and trace_name:
        summary = json.dumps(result.report.summary(), indent=2) + "\n"
        files[trace_name + ".json"] = lambda p: _text(p, summary)
    paths = {os.path.join(folder, name): write for name, write in files.items()}
    if not overwrite:
        there = [p for p in paths if os.path.exists(p)]
        if there:
            _trace.fail(call, f"{there[0]} exists (overwrite=True replaces it)")
    try:
        os.makedirs(folder, exist_ok=True)
        for path, write in paths.items():
            write(path)
    except OSError as e:
        _trace.fail(call, f"cannot write {e.filename or folder}: {e.strerror}")


def _text(path, text):
    with open(path, "w") as f:
        f.write(text)


# -- the decorators ------------------------------------------------------------------------------


def _check_settings(call, mode, settings):
    allowed = ARGUMENTS[mode]
    for k in settings:
        if k not in allowed:
            _trace.fail(call, f"no argument {k!r} (its arguments: {', '.join(allowed)})")
    for k in ("warmup", "iters", "profile_nth", "device_count"):
        if k in settings:
            v = settings[k]
            least = 0 if k == "warmup" else 1
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
                _trace.fail(call, f"{k}={v!r}: an integer of at least {least}")
    for k in ("save_neff_name", "save_trace_name", "artifacts_dir", "working_directory"):
        v = settings.get(k)
        if v is not None and not (isinstance(v, (str, os.PathLike)) and str(v)):
            _trace.fail(call, f"{k}={v!r}: a file or folder name")
    if mode == "profile":
        wd = settings.get("working_directory")
        if wd is None:
            _trace.fail(call, "give working_directory= (an absolute path: where it writes)")
        if not os.path.isabs(str(wd)):
            _trace.fail(call, f"working_directory={str(wd)!r} is not an absolute path")
        settings.setdefault("save_neff_name", "file.neff")
        settings.setdefault("save_trace_name", "profile.ntff")
    rounding = settings.get("psum_rounding", "rne")
    if rounding not in ("rne", "sr"):
        _trace.fail(call, f"psum_rounding={rounding!r}: 'rne' or 'sr' (BF16 PSUM, NeuronCore-v4)")


def _entry(call, mode, kernel, settings):
    _check_settings(call, mode, settings)
    options = {"psum_rounding": settings["psum_rounding"]} if "psum_rounding" in settings else {}
    target = settings.get("platform_target")
    if isinstance(kernel, _Kernel):
        base = kernel.options if isinstance(kernel, Kernel) else dict(kernel.options)
        merged = {**getattr(kernel, "settings", {}), **settings}
        return Kernel(
            kernel.fn,
            target or kernel.platform_target,
            kernel.lnc,
            mode=mode,
            settings=merged,
            **{**base, **options},
        )
    if not callable(kernel):
        _trace.fail(call, f"{kernel!r} is not a kernel function")
    return Kernel(kernel, target, mode=mode, settings=settings, **options)


def _decorator(call, mode, kernel, settings):
    if kernel is None:
        _check_settings(call, mode, dict(settings))
        return lambda k: _entry(call, mode, k, dict(settings))
    return _entry(call, mode, kernel, dict(settings))


def jit(func=None, mode="auto", **kwargs):
    """``@nki.jit`` / ``@nki.jit(mode=..., ...)``: called with numpy arrays, the kernel runs on
    the goldens and returns its outputs (``mode="benchmark"`` / ``"profile"`` as those
    decorators)."""
    if mode not in MODES:
        _trace.fail("nki.jit", f"mode={mode!r}: one of {', '.join(MODES)}")
    kind = MODES[mode]
    if kind not in ("jit",):
        allowed = set(ARGUMENTS[kind])
        bad = [k for k in kwargs if k not in allowed]
        if bad:
            _trace.fail("nki.jit", f"no argument {bad[0]!r} with mode={mode!r}")
    return _decorator("nki.jit", kind, func, kwargs)


def baremetal(kernel=None, **kwargs):
    """``@nki.baremetal`` / ``@nki.baremetal(save_neff_name=..., save_trace_name=...)``: the
    kernel's outputs from the goldens (its files also written when named)."""
    return _decorator("nki.baremetal", "baremetal", kernel, kwargs)


def benchmark(kernel=None, **kwargs):
    """``@nki.benchmark(warmup=5, iters=10)``: the timing run; ``kernel.benchmark_result``
    afterwards."""
    return _decorator("nki.benchmark", "benchmark", kernel, kwargs)


def profile(func=None, **kwargs):
    """``@nki.profile(working_directory="/abs/path", save_neff_name=..., save_trace_name=...,
    overwrite=False, profile_nth=1)``: the timing run, its files in the working directory."""
    return _decorator("nki.profile", "profile", func, kwargs)


def simulate_kernel(kernel, *args, **kwargs):
    """``nki.simulate_kernel(kernel, *arrays, **kwargs)``: the kernel's outputs from the
    goldens (a kernel of any decorator, launch grid included, or a plain function)."""
    if _trace.current_or_none() is not None:
        _trace.fail("nki.simulate_kernel", "runs a kernel from host code, not inside a kernel")
    if isinstance(kernel, Kernel):
        k = kernel._again(mode="simulation", settings={})
    elif isinstance(kernel, _Kernel):
        k = _entry("nki.simulate_kernel", "simulation", kernel, {})
    elif callable(kernel):
        k = Kernel(kernel, mode="simulation")
    else:
        _trace.fail("nki.simulate_kernel", f"{kernel!r} is not a kernel")
    return k._values(args, kwargs)
