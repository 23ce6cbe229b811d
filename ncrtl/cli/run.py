"""``ncrtl run``: an NKI kernel on the golden and the timing model of one NeuronCore."""

from dataclasses import dataclass

from ..testbench.outputs import check_output, write_folder, write_output
from .common import MAX_SEED, UsageError, _check_seed, _parse_params, load_npy

#: The tracing bounds' defaults (docs/kernels.md, "Kernel errors and tracing bounds"): far
#: above a real kernel's trace (the NKI tutorial's tiled matmul at its largest size, 99,328
#: instructions, traces in about 8 s: docs/kernels.md, "Speed").
MAX_INSTRUCTIONS = 10**7
TRACE_TIMEOUT = 600.0


def _kernel(args):
    """``(kernel, example or None)`` of ``KERNEL.py::FUNCTION`` or ``--example``; the tracing
    bounds checked (``--max-instructions``, ``--trace-timeout``).  The kernel file's own error
    is one line naming its line (:func:`ncrtl.kernels.load_file`)."""
    import math

    from .. import kernels

    if args.max_instructions < 1:
        raise UsageError(f"--max-instructions {args.max_instructions} must be at least 1")
    if not (math.isfinite(args.trace_timeout) and args.trace_timeout > 0):
        raise UsageError(
            f"--trace-timeout {args.trace_timeout} must be a positive number of seconds"
        )
    if args.example:
        if args.kernel:
            raise UsageError("give a KERNEL.py::FUNCTION or --example NAME, not both")
        try:
            return kernels.load(args.example)[::-1]
        except ValueError as e:
            raise UsageError(str(e)) from None
    if not args.kernel:
        raise UsageError("give the kernel as KERNEL.py::FUNCTION, or --example NAME")
    path, sep, function = args.kernel.partition("::")
    if not sep or not function:
        raise UsageError(f"{args.kernel!r}: name the kernel as KERNEL.py::FUNCTION")
    try:
        return kernels.load_file(path, function), None
    except ValueError as e:
        raise UsageError(str(e)) from None


#: The files ``--out`` writes (and removes from a previous run: never a mix of two runs).
OUT_FILES = r"out\d+\.npy|report\.json"
OUT_NAMES = "out<N>.npy, report.json"
#: The ``--plot`` formats, by the file's suffix (what matplotlib writes with no extra package).
PLOT_FORMATS = (".png", ".svg", ".pdf")


@dataclass
class Checked:
    """What :func:`check` found a run needs: the kernel (with ``--psum-rounding``), the
    example (or None), the RTL geometry (or None), the kernel core the tensors are sized
    against, the keyword arguments, the reference function (or None), and the inputs as
    recipes: :meth:`arrays` makes them (files read, random tensors drawn) for the run only."""

    kernel: object
    example: object
    geo: object
    core: object
    kwargs: dict
    inputs: list
    seed: int
    reference: object = None

    def arrays(self):
        """The device tensors, in argument order."""
        import numpy as np

        from ..nki.kernel import PerRank

        rng = np.random.default_rng(self.seed)
        out = []
        for kind, value, d in self.inputs:
            if kind == "array":
                out.append(value)
            elif kind == "file":
                out.append(load_npy(value, "--args").view(d.storage))
            elif kind == "file-ranks":  # [ranks, ...]: rank r's at [r]
                out.append(PerRank(list(load_npy(value, "--args").view(d.storage))))
            elif kind == "random-ranks":
                ranks, dims = value
                out.append(PerRank([_standard_normal(rng, dims, d.storage) for _ in range(ranks)]))
            else:
                out.append(_standard_normal(rng, value, d.storage))
        return out


def _standard_normal(rng, dims, storage):
    """Standard normal values of ``rng`` in ``storage``, drawn in chunks: the tensor's own
    bytes and no float64 copy of it (the values are those of one draw)."""
    import numpy as np

    out = np.empty(dims, storage)
    flat = out.reshape(-1)
    chunk = 1 << 20
    for i in range(0, flat.size, chunk):
        n = min(chunk, flat.size - i)
        flat[i : i + n] = rng.standard_normal(n).astype(np.float32).astype(storage)
    return out


def check(args):
    """Check every argument of ``ncrtl run`` as the run does, and return what it needs
    (:class:`Checked`); :class:`UsageError` (or :class:`~ncrtl.testbench.outputs.OutputError`)
    for the first bad one.  Nothing is traced, run, allocated beyond the example's own inputs,
    or written: ``ncrtl run --check`` and ``ncrtl regress``'s check of its tasks call it."""
    from ..model.kernel.stream import CORES
    from ..nki.kernel import core_of

    _check_seed(args.seed)
    kernel, example = _kernel(args)
    if args.psum_rounding:
        # the kernel's own class: an older-API kernel keeps that API's device tensors
        options = {**kernel.options, "psum_rounding": args.psum_rounding}
        kernel = type(kernel)(kernel.fn, kernel.platform_target, kernel.lnc, **options)
    _check_ranks(args)
    if args.ranks is not None:
        kernel = kernel.ranks(args.ranks)
    geo = _geometry(args, kernel)
    core = geo.core() if geo is not None else CORES[core_of(args.core or kernel.core)]
    if example is not None:
        import numpy as np

        if args.args or args.shapes:
            raise UsageError("--example runs on its own random inputs: leave out --args / --shapes")
        if args.reference is not None:
            raise UsageError(
                "--example is checked against its own reference: --reference is for a "
                "KERNEL.py::FUNCTION"
            )
        try:
            arrays = example.arrays(
                np.random.default_rng(args.seed), geo.core() if geo is not None else None
            )
        except ValueError as e:
            raise UsageError(str(e)) from None
        if args.per_rank is not None:
            raise UsageError("--per-rank names --args / --shapes tensors; --example has its own")
        inputs = [("array", a, None) for a in arrays]
        kwargs = dict(example.kwargs)
    else:
        inputs = _inputs(args, core, kernel.lnc)
        kwargs = {}
    kwargs.update(_kwargs(args))
    _check_outputs(args)
    reference = _reference(args) if args.reference is not None else None
    return Checked(kernel, example, geo, core, kwargs, inputs, args.seed, reference)


def _check_ranks(args):
    """``--ranks`` and the options that go with it (docs/nki/multicore.md, "Ranks")."""
    if args.ranks is None:
        for flag, given in (
            ("--per-rank", args.per_rank is not None),
            ("--all-ranks", args.all_ranks),
            ("--link-gbps", args.link_gbps is not None),
            ("--link-latency-ns", args.link_latency_ns is not None),
        ):
            if given:
                raise UsageError(f"{flag} goes with --ranks N (a run over N simulated ranks)")
        return
    if args.ranks < 1:
        raise UsageError(f"--ranks {args.ranks} must be at least 1")
    if args.rtl:
        raise UsageError("--rtl runs one NeuronCore: leave out --ranks")
    if args.link_gbps is not None and not args.link_gbps > 0:
        raise UsageError(f"--link-gbps {args.link_gbps} must be a positive number")
    if args.link_latency_ns is not None and not args.link_latency_ns >= 0:
        raise UsageError(f"--link-latency-ns {args.link_latency_ns} must be 0 or more")
    n = len(args.shapes or args.args or ())
    for i in args.per_rank or ():
        if not 0 <= i < n:
            raise UsageError(
                f"--per-rank {i}: the device tensors are 0 to {n - 1} (--args / --shapes order)"
            )


def _inputs(args, core, lnc):
    """The recipes of the ``--args`` files (``PATH`` or ``PATH:DTYPE``, their headers read) or
    of the ``--shapes`` random tensors (``ROWSxCOLS[x...]:DTYPE``: standard normal values of
    ``--seed`` in the dtype), each and all together within the core's device memory."""
    import math

    from ..model.kernel.dtypes import DTYPES, dtype_of, file_dtype

    out, sizes = [], []
    if args.shapes:
        if args.args:
            raise UsageError("--shapes and --args both give the device tensors; give one")
        for item in args.shapes:
            shape, _, dt = item.partition(":")
            try:
                dims = tuple(int(d) for d in shape.lower().split("x"))
                if not dims or min(dims) < 1:
                    raise ValueError
            except ValueError:
                raise UsageError(
                    f"--shapes {item!r}: give ROWSxCOLS[xMORE]:DTYPE (128x512:bfloat16)"
                ) from None
            if not dt:
                raise UsageError(
                    f"--shapes {item}: name the dtype, {item}:DTYPE; the dtypes: "
                    f"{', '.join(DTYPES)}"
                )
            try:
                d = dtype_of(dt)
            except ValueError as e:
                raise UsageError(f"--shapes {item}: {e}") from None
            if _per_rank(args, len(out)):
                out.append(("random-ranks", (args.ranks, dims), d))
            else:
                out.append(("random", dims, d))
            sizes.append((f"--shapes {item}", math.prod(dims) * d.itemsize))
    else:
        from .common import npy_header

        for item in args.args or ():
            path, _, dt = item.rpartition(":") if not item.endswith(".npy") else ("", "", "")
            if not path:
                path, dt = item, ""
            shape, stored = npy_header(path, "--args")
            try:
                d = file_dtype(stored, dt or None)
            except ValueError as e:
                raise UsageError(f"--args {item}: {e}") from None
            if _per_rank(args, len(out)):
                if not shape or shape[0] != args.ranks:
                    raise UsageError(
                        f"--args {item} {list(shape)}: a --per-rank file holds [ranks, ...], "
                        f"rank r's tensor at [r] (--ranks {args.ranks})"
                    )
                out.append(("file-ranks", path, d))
                shape = shape[1:]
            else:
                out.append(("file", path, d))
            sizes.append((f"--args {item}", math.prod(shape) * stored.itemsize))
    try:
        for what, nbytes in sizes:
            core.check_device_memory(nbytes, what, lnc)
        if len(sizes) > 1:
            flag = "--shapes" if args.shapes else "--args"
            core.check_device_memory(
                sum(n for _, n in sizes), f"the {len(sizes)} tensors of {flag} together", lnc
            )
    except ValueError as e:
        raise UsageError(str(e)) from None
    return out


def _per_rank(args, i):
    """Whether device tensor ``i`` differs per rank (``--per-rank``; no positions: all)."""
    if args.ranks is None or args.per_rank is None:
        return False
    return not args.per_rank or i in args.per_rank


def _check_outputs(args):
    """``--out``, ``--trace`` and ``--plot``: each writable (an empty path refused), the plot's
    format known by its suffix, no two of them the same file, ``--out``'s files free to
    replace."""
    import importlib.util
    import re
    from pathlib import Path

    if args.plot is not None:
        suffix = Path(args.plot).suffix.lower()
        if args.plot and suffix not in PLOT_FORMATS:
            raise UsageError(
                f"--plot {args.plot}: the plot's format is its suffix, one of "
                f"{', '.join(PLOT_FORMATS)} (not {suffix or 'none'})"
            )
    for path, flag, folder in (
        (args.out, "--out", True),
        (args.trace, "--trace", False),
        (args.plot, "--plot", False),
    ):
        if path is not None:
            check_output(path, flag, folder=folder, owned=OUT_FILES if folder else None)
    if args.trace is not None and args.plot is not None:
        if Path(args.trace).resolve() == Path(args.plot).resolve():
            raise UsageError(f"--trace and --plot both name {args.plot}; give two files")
    if args.out is not None:
        out = Path(args.out).resolve()
        for path, flag in ((args.trace, "--trace"), (args.plot, "--plot")):
            if path is None:
                continue
            p = Path(path).resolve()
            if p == out or (p.parent == out and re.fullmatch(OUT_FILES, p.name)):
                raise UsageError(
                    f"{flag} {path} is a path --out {args.out} writes ({OUT_NAMES}); give another"
                )
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib (pip install matplotlib)")


def _kwargs(args):
    out = {}
    for item in args.kwarg or ():
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"--kwarg {item!r}: give NAME=VALUE")
        if name in out:
            raise UsageError(f"--kwarg {name} is given twice")
        out[name] = kwarg_value(value)
    return out


def kwarg_value(text):
    """A ``--kwarg`` value: an integer, a float, a Python literal (``True``, ``None``,
    ``(0, 1024)``, ``'text'``), else the text itself."""
    import ast

    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            continue
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _cmd_run(args):
    import json

    import numpy as np

    from .. import nki
    from ..model.kernel import golden as kgolden
    from ..model.kernel import loops as kloops
    from ..model.kernel import timing as ktiming

    checked = check(args)
    if args.check:
        print("ncrtl run: the arguments are good (--check: nothing traced, run or written)")
        return 0
    kernel, example, geo, kwargs = checked.kernel, checked.example, checked.geo, checked.kwargs
    arrays = checked.arrays()
    try:
        # the kernel's own errors are one line naming its line; a bug of ncrtl's keeps its
        # traceback (kernel_error); tracing says what it does after 2 s (its instructions)
        bounds = nki.Bounds(args.max_instructions, args.trace_timeout)
        with _tracing(kernel, bounds), nki.kernel_code():
            program = nki.trace(
                kernel,
                arrays,
                kwargs,
                core=geo.core() if geo is not None else args.core,
                bounds=bounds,
            )
    except nki.NkiError as e:
        raise UsageError(str(e)) from None
    if geo is not None:
        from ..testbench.neuroncore.run import plan

        try:
            # a kernel the RTL does not run, whose streams do not fit its device memory or
            # whose matmuls the PE build of --param pe_modes lacks: refused before the golden
            plan(program, geo, args.pe_modes)
        except ValueError as e:  # Unsupported is one
            raise UsageError(str(e)) from None
    if args.dump_streams:
        for p in program if isinstance(program, tuple) else (program,):
            print(p.dump())
    outputs, every = [], None
    ranks = args.ranks
    per = nki.kernel.rank_arrays(arrays, ranks) if ranks is not None else None
    if not args.timing_only:
        try:
            uninit = "warn" if args.allow_uninitialized else "error"
            if ranks is not None:  # each rank a device of its own
                every, _ = nki.kernel.golden_ranks(program, per, uninitialized=uninit)
                outputs = every[0]
            else:
                outputs, state = kgolden.run(program, arrays, uninitialized=uninit)
                outputs = nki.kernel.returned(program, outputs)
                nki.kernel.unwritten_outputs(program, state)
        except kgolden.KernelError as e:
            raise UsageError(str(e)) from None
    elif kloops.dynamic(program):
        try:  # dynamic loops: their trip counts from the instructions the registers depend on
            if ranks is not None:
                from ..model.kernel.collective import rank_trip_counts

                rank_trip_counts(program, per)
            else:
                kloops.trip_counts(program, arrays)
        except kgolden.KernelError as e:
            raise UsageError(str(e)) from None
    if per is not None:
        arrays = per[0]  # a reference or an example checks rank 0's outputs on its inputs
    try:
        params = ktiming.Params(throttle=None) if args.no_throttle else ktiming.Params()
        if args.link_gbps is not None or args.link_latency_ns is not None:
            from ..model.kernel.collective import LINKS, Link

            base = LINKS[program[0].core.name]
            params.link = Link(
                args.link_gbps if args.link_gbps is not None else base.gbps,
                args.link_latency_ns if args.link_latency_ns is not None else base.latency_ns,
            )
        report = ktiming.simulate(program, params=params, trace=bool(args.trace))
    except kgolden.KernelError as e:
        raise UsageError(str(e)) from None
    summary = report.summary()
    if example is not None and outputs:
        summary["reference"] = _check_example(example, arrays, outputs)
    elif checked.reference is not None and outputs:
        summary["reference"] = _check_reference(args.reference, checked.reference, arrays, outputs)
    _print(summary, report)
    if geo is not None:
        summary["rtl"] = _run_rtl(args, program, arrays, geo, outputs)
        if not summary["rtl"]["outputs_equal"]:
            return 1  # a failed run writes nothing
    if args.out is not None:

        def write(folder):
            saved = outputs
            if args.all_ranks and every is not None:  # [ranks, ...]: rank r's at [r]
                saved = [np.stack([e[i] for e in every]) for i in range(len(outputs))]
            for i, o in enumerate(saved):
                with open(folder / f"out{i}.npy", "wb") as f:
                    np.save(f, o)
            (folder / "report.json").write_text(json.dumps(summary, indent=2) + "\n")

        _, removed = write_folder(args.out, "--out", write, OUT_FILES)
        n = len(outputs)
        names = f"out0.npy ... out{n - 1}.npy ({n}), " if n > 1 else "out0.npy, " if n else ""
        print(f"outputs: {names}report.json in {args.out}")
        if removed:
            print(f"removed the previous run's {', '.join(removed)} from {args.out}")
    if args.trace is not None:
        write_output(args.trace, "--trace", report.trace.write)
        print(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
    if args.plot is not None:
        write_output(args.plot, "--plot", lambda p: ktiming.plot(report, p))
        print(f"plot: {args.plot}")
    if "reference" in summary and not summary["reference"]["within_bound"]:
        return 1
    return 0


def _geometry(args, kernel):
    """The RTL core's :class:`~ncrtl.model.neuroncore.isa.Geometry` of ``--rtl`` (None without
    it): the ``neuroncore`` block's parameters (``--param``, ``--partitions``, ``--rows``,
    ``--cols``, ``--dma-engines`` over ``--preset``'s or the real core's, PE rows and columns
    following ``--partitions`` unless given: the block's rule) at the kernel's core
    version."""
    from dataclasses import replace

    from .. import blocks
    from ..nki.kernel import NkiError, core_of

    user = _parse_params(args.param, args)
    for flag in ("partitions", "dma_engines"):
        value = getattr(args, flag)
        if value is not None:
            if flag in user:
                raise UsageError(f"--{flag.replace('_', '-')} and --param {flag}: give it once")
            user[flag] = str(value)
    if not args.rtl:
        if args.preset:
            user["preset"] = args.preset
        if user:
            raise UsageError(
                f"{', '.join(sorted(user))}: parameters of the RTL core, only with --rtl"
            )
        if args.stall:
            raise UsageError("--stall sets the RTL run: only with --rtl")
        return None
    if args.timing_only:
        raise UsageError(
            "--rtl compares the RTL core's outputs with the golden's: not with --timing-only"
        )
    if not 0 <= args.stall < 1:
        raise UsageError(f"--stall {args.stall} must be in [0, 1)")
    block = blocks.get("neuroncore")
    try:
        params = block.resolve(user, preset=args.preset)
        # --core, else a preset's or --param's version, else the kernel's platform target
        if args.core:
            version = core_of(args.core)
        elif "version" in user or "version" in block.presets.get(args.preset, {}):
            version = params["version"]
        else:
            version = kernel.core
        geo = replace(blocks.neuroncore_geometry(params), version=version)
    except (blocks.BlockError, ValueError, NkiError) as e:
        raise UsageError(f"--rtl: {e}") from None
    args.pe_modes = params["pe_modes"] if "pe_modes" in user else None
    return geo


def _run_rtl(args, program, arrays, geo, outputs):
    """The kernel on the RTL core: its outputs against the golden's, bit for bit, and its
    cycles against the timing model's at the RTL's clock and DMA figures
    (:func:`ncrtl.testbench.neuroncore.run.model_at_rtl`: its streams starting where the core's
    instruction fetch delivers their first entries); the ``rtl`` entry of
    report.json."""
    from dataclasses import asdict

    import numpy as np

    from ..model.kernel import golden as kgolden
    from ..testbench.neuroncore.run import LATENCY, model_at_rtl, run_rtl

    try:
        res = run_rtl(
            program,
            arrays,
            geo,
            pe_modes=args.pe_modes,
            stall=args.stall,
            seed=args.seed,
            progress=True,
        )
    except RuntimeError as e:
        return _rtl_failed(str(e), geo)
    equal = len(res.outputs) == len(outputs) and all(
        np.asarray(g).tobytes() == np.asarray(w).tobytes() for g, w in zip(res.outputs, outputs)
    )
    try:
        model = round(model_at_rtl(program, geo, LATENCY).total_ns)
    except kgolden.KernelError as e:
        model, why = None, str(e)
    out = {
        "geometry": asdict(geo),
        "block": res.label,
        "pe_modes": res.pe_modes,
        "memory_latency_cycles": LATENCY,
        "stall": args.stall,
        "outputs_equal": equal,
        "cycles": res.cycles,
        "timing_model_cycles": model,
        "cycles_ratio": round(res.cycles / model, 4) if model else None,
        "done_cycles": res.done,
        "seconds": {k: round(v, 2) for k, v in res.steps.items() if isinstance(v, float)},
    }
    versus = (
        f"the timing model at the RTL's clock and DMA figures {model:,} "
        f"({out['cycles_ratio']}x; docs/kernels.md says why they differ)"
        if model
        else f"the timing model cannot run it: {why}"
    )
    print(
        f"RTL core ({res.label}, PE modes {res.pe_modes}): outputs "
        f"{'equal to' if equal else 'DIFFERENT from'} the golden's, bit for bit; "
        f"{res.cycles:,} cycles, {versus}"
    )
    return out


def _rtl_failed(report, geo):
    from dataclasses import asdict

    print(f"RTL core: the run FAILED\n{report}")
    return {"geometry": asdict(geo), "outputs_equal": False, "failure": report}


def _tracing(kernel, bounds):
    """Say on stderr what tracing does once it takes :data:`~ncrtl.testbench.progress.SHOW_AFTER`
    seconds: the instructions so far (a line redrawn on a terminal, a line every
    :data:`~ncrtl.testbench.progress.STEP_LOG_EVERY` seconds in a log); nothing with
    ``NCRTL_NO_PROGRESS=1``."""
    import contextlib
    import os

    from ..testbench import progress

    if os.environ.get("NCRTL_NO_PROGRESS", "") not in ("", "0"):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def said():
        with progress.step(f"tracing {kernel.fn.__name__}") as state:
            state["detail"] = bounds  # read live: "12,345 instructions"
            yield
            state["done"] = f"{bounds} in {{seconds:.1f}} s"

    return said()


def _check_example(example, arrays, outputs):
    refs = example.reference(*arrays)
    return _compare(outputs, refs, [example.bound(r, arrays) for r in refs])


def _compare(outputs, refs, bounds):
    """The outputs against their float64 references: per output the largest |error| and
    whether every element keeps within its bound (the examples' bound functions, or
    :func:`~ncrtl.model.kernel.dtypes.reference_bound`); the ``reference`` entry of
    report.json."""
    import numpy as np

    rows = []
    for i, (o, r, bound) in enumerate(zip(outputs, refs, bounds)):
        err = np.abs(np.asarray(o).astype(np.float64) - r)
        rows.append(
            {
                "output": f"out{i}",
                "max_abs_error": float(err.max()) if err.size else 0.0,
                "bound": float(np.max(bound)) if np.size(bound) else 0.0,
                "within_bound": bool((err <= bound).all()),
            }
        )
    return {
        "within_bound": all(r["within_bound"] for r in rows),
        "max_abs_error": max((r["max_abs_error"] for r in rows), default=0.0),
        "outputs": rows,
    }


def _reference(args):
    """The function of ``--reference REF.py::FUNCTION``, its file imported as a kernel file is
    (:func:`ncrtl.kernels.load_module`: one line naming the file's line for an error in it)."""
    from .. import kernels
    from ..nki import NkiError

    if args.timing_only:
        raise UsageError("--reference checks the golden's outputs: not with --timing-only")
    path, sep, name = args.reference.rpartition("::")
    if not sep or not path or not name:
        raise UsageError(f"--reference {args.reference!r}: name it as REF.py::FUNCTION")
    try:
        module = kernels.load_module(path, "reference")
    except (ValueError, NkiError) as e:
        raise UsageError(f"--reference {args.reference}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        funcs = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise UsageError(
            f"--reference {args.reference}: {path} has no function {name!r}; its functions: "
            f"{', '.join(funcs) or 'none'}"
        )
    return fn


def _check_reference(given, fn, arrays, outputs):
    """The outputs against ``fn`` of the inputs (as float64 arrays): one float64 array per
    output, each output's error within :func:`reference_bound` of its dtype."""
    import numpy as np

    from ..model.kernel.dtypes import reference_bound
    from ..nki import NkiError, kernel_code

    try:
        with kernel_code():  # the user's function: its error at its line is the message
            refs = fn(*(np.asarray(a).astype(np.float64) for a in arrays))
    except NkiError as e:
        raise UsageError(f"--reference {given}: {e}") from None
    if not isinstance(refs, (tuple, list)):
        refs = [refs]
    if len(refs) != len(outputs):
        raise UsageError(
            f"--reference {given} returns {len(refs)} array(s); the kernel returns "
            f"{len(outputs)} output(s)"
        )
    out = []
    for i, (r, o) in enumerate(zip(refs, outputs)):
        try:
            r = np.asarray(r, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise UsageError(
                f"--reference {given}: its value for out{i} is not an array of numbers ({e})"
            ) from None
        if r.shape != np.shape(o):
            raise UsageError(
                f"--reference {given}: its out{i} has shape {list(r.shape)}, the kernel's "
                f"{list(np.shape(o))}"
            )
        out.append(r)
    bounds = [reference_bound(o.dtype, r) for o, r in zip(outputs, out)]
    result = _compare(outputs, out, bounds)
    result["function"] = given
    return result


def _print(summary, report):
    s = summary
    print(f"kernel {s['kernel']} on NeuronCore-{s['core']}")
    print(
        f"total: {s['total_ns']:,.1f} ns = {s['tensor_engine_cycles']:,} Tensor Engine cycles "
        f"at {s['tensor_engine_ghz']} GHz"
    )
    if s.get("instances"):
        print(
            f"launch grid: {len(s['instances'])} instances, one after another on each core: "
            + "; ".join(
                f"core {i['core']} {i['program_id']} {i['ns']:,.1f} ns" for i in s["instances"]
            )
        )
    if s.get("ranks"):
        print(
            f"ranks: {len(s['ranks'])}, each a device of its own: "
            + "; ".join(f"rank {r['rank']} {r['ns']:,.1f} ns" for r in s["ranks"])
            + f"; slowest rank {s['slowest_rank']} ({s['slowest_rank_ns']:,.1f} ns)"
        )
    print("instructions: " + ", ".join(f"{k} {v}" for k, v in s["instructions"].items()))
    print("busy: " + ", ".join(f"{k} {v:.2f}" for k, v in s["busy_fraction"].items()))
    if s["te_dtype"]:
        print(
            f"Tensor Engine: utilization {s['te_utilization']:.3f} (whole run), "
            f"{s['te_utilization_matmul_window']:.3f} (first to last matmul); "
            f"{s['te_tflops']:.1f} TFLOPS of {s['te_peak_tflops']:.1f} peak ({s['te_dtype']})"
        )
    print(f"DMA: {s['dma_bytes']:,} bytes, {s['dma_gbps']:.1f} GB/s of {s['dma_peak_gbps']:g} peak")
    queues = s["dma_queues"]
    if queues:
        print("DMA queues: bytes, GB/s while moving (of peak), bytes per partition")
        for name, q in queues.items():
            print(
                f"  {name:>11} {q['bytes']:>12,} {q['gbps']:8.1f} ({q['of_peak']:.3f}) "
                f"{q['bytes_per_partition']:9,.1f}"
            )
    engines = s["dma_engines"]
    if engines:
        busy = [q["of_peak"] for q in engines.values()]
        print(
            f"DMA engines: {len(engines)} moved data, {min(busy):.3f} to {max(busy):.3f} of one "
            "engine's peak over the run (report.json: dma_engines)"
        )
    print(f"MFU {s['mfu']:.3f}, HFU {s['hfu']:.3f}, MBU {s['mbu']:.3f}")
    t = s["throttle"]
    if t["modelled"] and any(k.endswith("tensor") for k in s["instructions"]):
        print(
            f"Tensor Engine throttle: {t['matmuls_throttled']:,} matmuls at half rate, "
            f"+{t['ns']:,.1f} ns of Tensor Engine time (--no-throttle to compare)"
        )
    if s["engine_waits_ns"]:
        print(
            "waits by engine: "
            + "; ".join(
                f"{w} on {b} {ns:,.1f} ns"
                for w, row in s["engine_waits_ns"].items()
                for b, ns in row.items()
            )
        )
    if s["longest_waits"]:
        print("longest waits:")
        for w in s["longest_waits"][:5]:
            print(
                f"  {w['ns']:10,.1f} ns  {w['instruction']} ({w['line']}) on "
                f"{w['waited_on']} ({w['waited_on_line']})"
            )
    if "reference" in s:
        r = s["reference"]
        if "function" not in r:
            verdict = "within the bound" if r["within_bound"] else "OUTSIDE the bound"
            print(f"float64 reference: max |error| {r['max_abs_error']:.3g}, {verdict}")
        else:
            print(
                f"reference {r['function']}: "
                + "; ".join(
                    f"{o['output']} max |error| {o['max_abs_error']:.3g} "
                    + ("within" if o["within_bound"] else "OUTSIDE")
                    + f" the bound {o['bound']:.3g}"
                    for o in r["outputs"]
                )
            )


def add_parser(sub, raw):
    """The ``run`` subcommand's arguments."""
    s = sub.add_parser(
        "run",
        help="run an NKI kernel on the golden and the timing model (docs/kernels.md)",
        description="Trace KERNEL.py::FUNCTION (written for AWS's toolchain: `import nki` "
        "resolves to ncrtl.nki) into per-engine instruction streams, run them on the bit-exact "
        "goldens and on the event-driven timing model of one NeuronCore.",
        formatter_class=raw,
    )
    s.add_argument("kernel", nargs="?", help="KERNEL.py::FUNCTION")
    s.add_argument("--example", help="a shipped example instead (ncrtl kernels lists them)")
    s.add_argument(
        "--args",
        nargs="*",
        metavar="A.npy[:DTYPE]",
        help="the device tensors, in argument order (bfloat16 / fp8 files: name the dtype)",
    )
    s.add_argument(
        "--shapes",
        nargs="*",
        metavar="SHAPE:DTYPE",
        help="random device tensors instead of --args, in argument order: ROWSxCOLS[x...]:DTYPE "
        "(128x512:bfloat16; the dtype is required), standard normal values of --seed (what-ifs "
        "over shapes)",
    )
    s.add_argument("--kwarg", action="append", metavar="NAME=VALUE", help="a keyword argument")
    s.add_argument(
        "--reference",
        metavar="REF.py::FUNCTION",
        help="a numpy function of the inputs (as float64 arrays) returning the float64 "
        "outputs (one array, or a tuple of them): each output's largest |error| against it, "
        "exit status 1 beyond the bound of its dtype (docs/kernels.md)",
    )
    s.add_argument(
        "--check",
        action="store_true",
        help="check every argument as the run does, then stop: nothing traced, run or "
        "written (exit status 0, or 2 with the first bad argument)",
    )
    s.add_argument(
        "--out",
        help="folder for out0.npy ... and report.json (replacing a previous run's out*.npy "
        "and report.json there)",
    )
    s.add_argument(
        "--core",
        choices=("v2", "v3", "v4", "trn1", "trn2", "trn3"),
        help="core version (default: the kernel's platform_target, else v3)",
    )
    s.add_argument(
        "--psum-rounding",
        choices=("rne", "sr"),
        help="BF16 PSUM matmul writes (NeuronCore-v4): round to nearest even or stochastically "
        "(default: the kernel's @nki.jit(psum_rounding=), else rne)",
    )
    s.add_argument("--timing-only", action="store_true", help="skip the golden values")
    s.add_argument(
        "--ranks",
        type=int,
        metavar="N",
        help="run over N simulated ranks, each a device of its own (its device memory and "
        "inputs; a logical core of the kernel's cores), nki.collectives between them; the "
        "report gives each rank's time and the slowest (docs/nki/multicore.md)",
    )
    s.add_argument(
        "--per-rank",
        nargs="*",
        type=int,
        metavar="I",
        help="with --ranks: the device tensors (by position; none named: all) that differ per "
        "rank: an --args file holds [ranks, ...] (rank r's at [r]), a --shapes tensor is "
        "drawn once per rank (default: every rank gets the same arrays)",
    )
    s.add_argument(
        "--all-ranks",
        action="store_true",
        help="with --ranks: --out writes every rank's outputs, each out<N>.npy [ranks, ...] "
        "(default: rank 0's)",
    )
    s.add_argument(
        "--link-gbps",
        type=float,
        help="with --ranks: the device-to-device link's GB/s per device (default the core "
        "version's documented NeuronLink: v2 412, v3 1280, v4 2560)",
    )
    s.add_argument(
        "--link-latency-ns",
        type=float,
        help="with --ranks: the link's latency per step of a collective (default 1000 ns)",
    )
    s.add_argument(
        "--no-throttle",
        action="store_true",
        help="time the Tensor Engine without its warm-up throttle (v3, v4: half rate until "
        'about 3 us of work; docs/kernels.md, "Costs"), to see what it costs',
    )
    s.add_argument("--trace", help="Perfetto / Chrome trace file (JSON)")
    s.add_argument(
        "--plot",
        help="the engines' occupancy (matplotlib), as its suffix says: " + ", ".join(PLOT_FORMATS),
    )
    s.add_argument("--dump-streams", action="store_true", help="print the instruction streams")
    s.add_argument(
        "--allow-uninitialized",
        action="store_true",
        help="reading SBUF / PSUM that nothing wrote warns instead of failing",
    )
    s.add_argument(
        "--seed",
        type=int,
        default=0,
        help=f"inputs of --example and --shapes, 0..{MAX_SEED} (default 0)",
    )
    s.add_argument(
        "--max-instructions",
        type=int,
        default=MAX_INSTRUCTIONS,
        metavar="N",
        help=f"stop tracing a kernel that emits more instructions (default {MAX_INSTRUCTIONS:,})",
    )
    s.add_argument(
        "--trace-timeout",
        type=float,
        default=TRACE_TIMEOUT,
        metavar="SECONDS",
        help=f"stop tracing a kernel that takes longer (default {TRACE_TIMEOUT:g} s)",
    )
    rtl = s.add_argument_group(
        "RTL core (docs/neuroncore.md)",
        "--rtl traces the kernel at the RTL core's geometry (the real core's unless set "
        "here) and runs its streams on the Verilator build of the core as well: outputs "
        "compared bit for bit with the golden's, cycles with the timing model's",
    )
    rtl.add_argument("--rtl", action="store_true", help="run on the RTL NeuronCore too")
    rtl.add_argument(
        "--preset",
        help="a documented core whose parameters the others override (ncrtl list: the "
        "neuroncore block's presets; small: 8 partitions, 2 DMA engines, the test suite's)",
    )
    rtl.add_argument("--partitions", type=int, help="SBUF partitions (default 128)")
    rtl.add_argument("--rows", type=int, help="PE rows (default: --partitions)")
    rtl.add_argument("--cols", type=int, help="PE columns, = partitions (default: --partitions)")
    rtl.add_argument("--dma-engines", type=int, help="DMA engines, a power of two (default 16)")
    rtl.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="a parameter of the RTL core (ncrtl list: the neuroncore block's; pe_modes: "
        "default the modes the kernel's matmuls use)",
    )
    rtl.add_argument(
        "--stall",
        type=float,
        default=0.0,
        help="probability of an idle start-stream cycle and of a not-ready or idle AXI4 cycle "
        "(default 0: the cycles compare with the timing model's)",
    )
    s.set_defaults(func=_cmd_run)
