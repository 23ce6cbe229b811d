"""``ncrtl run``: an NKI kernel on the golden and the timing model of one NeuronCore."""

from ..testbench.outputs import check_output, write_output
from .common import UsageError, _parse_params, load_npy


def _kernel(args):
    """``(kernel, example or None)`` of ``KERNEL.py::FUNCTION`` or ``--example``."""
    from .. import kernels

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


def _arrays(args):
    """The ``--args`` files (``PATH`` or ``PATH:DTYPE``) as numpy arrays, or with ``--shapes``
    random tensors of those shapes (``ROWSxCOLS[x...]:DTYPE``: standard normal values of
    ``--seed`` in the dtype)."""
    import numpy as np

    from ..model.kernel.dtypes import dtype_of

    if args.shapes:
        if args.args:
            raise UsageError("--shapes and --args both give the device tensors; give one")
        rng = np.random.default_rng(args.seed)
        out = []
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
            try:
                d = dtype_of(dt or "float32")
            except ValueError as e:
                raise UsageError(f"--shapes {item}: {e}") from None
            out.append(rng.standard_normal(dims).astype(np.float32).astype(d.storage))
        return out
    out = []
    for item in args.args or ():
        path, _, dt = item.partition(":") if not item.endswith(".npy") else (item, "", "")
        arr = load_npy(path, "--args")
        if dt:
            try:
                d = dtype_of(dt)
            except ValueError as e:
                raise UsageError(f"--args {item}: {e}") from None
            if arr.dtype.itemsize != d.itemsize:
                raise UsageError(
                    f"--args {item}: the file holds {arr.dtype.itemsize}-byte elements, "
                    f"{d.name} has {d.itemsize}"
                )
            arr = np.ascontiguousarray(arr).view(d.storage)
        elif arr.dtype.kind == "V":
            raise UsageError(
                f"--args {item}: the file holds raw {arr.dtype.itemsize}-byte elements (numpy "
                f"saves bfloat16 and fp8 so); name their dtype: {path}:bfloat16"
            )
        out.append(arr)
    return out


def _kwargs(args):
    out = {}
    for item in args.kwarg or ():
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"--kwarg {item!r}: give NAME=VALUE")
        if name in out:
            raise UsageError(f"--kwarg {name} is given twice")
        for conv in (int, float):
            try:
                out[name] = conv(value)
                break
            except ValueError:
                continue
        else:
            out[name] = value
    return out


def _cmd_run(args):
    import json

    import numpy as np

    from .. import nki
    from ..model.kernel import golden as kgolden
    from ..model.kernel import timing as ktiming

    kernel, example = _kernel(args)
    if args.psum_rounding:
        from ..nki.kernel import Kernel

        options = {**kernel.options, "psum_rounding": args.psum_rounding}
        kernel = Kernel(kernel.fn, kernel.platform_target, kernel.lnc, **options)
    geo = _geometry(args, kernel)
    if example is not None:
        if args.args or args.shapes:
            raise UsageError("--example runs on its own random inputs: leave out --args / --shapes")
        try:
            arrays = example.arrays(
                np.random.default_rng(args.seed), geo.core() if geo is not None else None
            )
        except ValueError as e:
            raise UsageError(str(e)) from None
        kwargs = dict(example.kwargs)
    else:
        arrays = _arrays(args)
        kwargs = {}
    kwargs.update(_kwargs(args))
    for path, flag, folder in (
        (args.out, "--out", True),
        (args.trace, "--trace", False),
        (args.plot, "--plot", False),
    ):
        if path:
            check_output(path, flag, folder=folder)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib (pip install matplotlib)") from None
    try:
        program = nki.trace(
            kernel, arrays, kwargs, core=geo.core() if geo is not None else args.core
        )
    except (nki.NkiError, TypeError, AssertionError) as e:
        raise UsageError(_kernel_error(e)) from None
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
    outputs = []
    if not args.timing_only:
        try:
            outputs, _ = kgolden.run(
                program,
                arrays,
                uninitialized="warn" if args.allow_uninitialized else "error",
            )
        except kgolden.KernelError as e:
            raise UsageError(str(e)) from None
    try:
        report = ktiming.simulate(program, trace=bool(args.trace))
    except kgolden.KernelError as e:
        raise UsageError(str(e)) from None
    summary = report.summary()
    if example is not None and outputs:
        summary["reference"] = _check_example(example, arrays, outputs)
    _print(summary, report)
    if geo is not None:
        summary["rtl"] = _run_rtl(args, program, arrays, geo, outputs)
        if not summary["rtl"]["outputs_equal"]:
            return 1  # a failed run writes nothing
    if args.out:

        def write(folder):
            for i, o in enumerate(outputs):
                np.save(folder / f"out{i}.npy", o)
            (folder / "report.json").write_text(json.dumps(summary, indent=2) + "\n")

        write_output(args.out, "--out", write, folder=True)
        print(f"outputs: {args.out}/out0.npy ... ({len(outputs)}), report: {args.out}/report.json")
    if args.trace:
        write_output(args.trace, "--trace", report.trace.write)
        print(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
    if args.plot:
        write_output(args.plot, "--plot", lambda p: ktiming.plot(report, p))
        print(f"plot: {args.plot}")
    if example is not None and outputs and not summary["reference"]["within_bound"]:
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


def _kernel_error(e):
    import traceback

    if isinstance(e, AssertionError):
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return f"{tb.filename}:{tb.lineno}: the kernel's assertion failed: {tb.line}"
    if isinstance(e, TypeError):
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return f"{tb.filename}:{tb.lineno}: {e}"
    return str(e)


def _check_example(example, arrays, outputs):
    import numpy as np

    refs = example.reference(*arrays)
    worst, ok = 0.0, True
    for o, r in zip(outputs, refs):
        err = np.abs(np.asarray(o).astype(np.float64) - r)
        bound = example.bound(r, arrays)
        ok = ok and bool((err <= bound).all())
        worst = max(worst, float(err.max()))
    return {"within_bound": ok, "max_abs_error": worst}


def _print(summary, report):
    s = summary
    print(f"kernel {s['kernel']} on NeuronCore-{s['core']}")
    print(
        f"total: {s['total_ns']:,.1f} ns = {s['tensor_engine_cycles']:,} Tensor Engine cycles "
        f"at {s['tensor_engine_ghz']} GHz"
    )
    print("instructions: " + ", ".join(f"{k} {v}" for k, v in s["instructions"].items()))
    print("busy: " + ", ".join(f"{k} {v:.2f}" for k, v in s["busy_fraction"].items()))
    if s["te_dtype"]:
        print(
            f"Tensor Engine: utilization {s['te_utilization']:.3f} (whole run), "
            f"{s['te_utilization_matmul_window']:.3f} (first to last matmul); "
            f"{s['te_tflops']:.1f} TFLOPS of {s['te_peak_tflops']:.1f} peak ({s['te_dtype']})"
        )
    print(f"DMA: {s['dma_bytes']:,} bytes, {s['dma_gbps']:.1f} GB/s")
    if s["longest_waits"]:
        print("longest waits:")
        for w in s["longest_waits"][:5]:
            print(
                f"  {w['ns']:10,.1f} ns  {w['instruction']} ({w['line']}) on "
                f"{w['waited_on']} ({w['waited_on_line']})"
            )
    if "reference" in s:
        r = s["reference"]
        verdict = "within the bound" if r["within_bound"] else "OUTSIDE the bound"
        print(f"float64 reference: max |error| {r['max_abs_error']:.3g}, {verdict}")


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
        "(128x512:bfloat16), standard normal values of --seed (what-ifs over shapes)",
    )
    s.add_argument("--kwarg", action="append", metavar="NAME=VALUE", help="a keyword argument")
    s.add_argument("--out", help="folder for out0.npy ... and report.json")
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
    s.add_argument("--trace", help="Perfetto / Chrome trace file (JSON)")
    s.add_argument("--plot", help="PNG of the engines' occupancy (matplotlib)")
    s.add_argument("--dump-streams", action="store_true", help="print the instruction streams")
    s.add_argument(
        "--allow-uninitialized",
        action="store_true",
        help="reading SBUF / PSUM that nothing wrote warns instead of failing",
    )
    s.add_argument(
        "--seed", type=int, default=0, help="inputs of --example and --shapes (default 0)"
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
