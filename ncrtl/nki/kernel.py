"""``nki.jit``, ``nki.simulate`` and ncrtl's own entry points: trace a kernel into streams, run
them on the goldens and on the timing model."""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import numpy as np

from ncrtl.model.kernel import golden as kgolden
from ncrtl.model.kernel import loops as kloops
from ncrtl.model.kernel import timing as ktiming
from ncrtl.model.kernel.build import Builder, PlacementError
from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.stream import CORES, Core

from . import _trace
from ._trace import NkiError, NkiTensor

__all__ = ["jit", "simulate", "Kernel", "trace", "run", "Result", "core_of", "returned"]

#: NKI platform targets and the core versions they name.
TARGETS = {
    "trn1": "v2",
    "inf2": "v2",
    "gen2": "v2",
    "trn2": "v3",
    "gen3": "v3",
    "trn3": "v4",
    "gen4": "v4",
    "v2": "v2",
    "v3": "v3",
    "v4": "v4",
}


def core_of(target):
    """The core version (``v2``/``v3``/``v4``) of a platform target or version name."""
    if target not in TARGETS:
        raise NkiError(f"platform target {target!r}: one of {', '.join(TARGETS)}")
    return TARGETS[target]


class Kernel:
    """A kernel decorated with ``@nki.jit``: call it with numpy arrays to run it (golden values),
    ``kernel[2]`` for the two cores of a logical core."""

    def __init__(self, fn, platform_target=None, lnc=1, **options):
        rounding = options.get("psum_rounding", "rne")
        if rounding not in ("rne", "sr"):
            raise NkiError(f"psum_rounding={rounding!r}: 'rne' or 'sr' (BF16 PSUM, NeuronCore-v4)")
        self.fn = fn
        self.platform_target = platform_target
        self.lnc = lnc
        self.options = options
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid):
        """``kernel[g0, g1, ...]``: the SPMD launch grid.  Its instances go to the two cores
        of a logical core in turn (instance ``i`` on core ``i % 2``; ``kernel[1]`` on one
        core), each core running its instances one after another."""
        dims = grid if isinstance(grid, tuple) else (grid,)
        bad = not dims or any(
            isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)) or g < 1
            for g in dims
        )
        if bad:
            raise NkiError(
                f"{self.fn.__name__}[{grid!r}]: the launch grid is positive integers "
                f"(kernel[2], kernel[2, 4])"
            )
        dims = tuple(int(g) for g in dims)
        lnc = 1 if math.prod(dims) == 1 else 2
        return Kernel(self.fn, self.platform_target, lnc, **{**self.options, "_grid": dims})

    @property
    def grid(self):
        """The launch grid (``kernel[2, 4]``: ``(2, 4)``), or None for a kernel called
        without one."""
        return self.options.get("_grid")

    @property
    def core(self):
        target = self.platform_target or os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
        return core_of(target) if target else "v3"

    def __call__(self, *args, **kwargs):
        if _trace.current_or_none() is not None:
            # a kernel called by a kernel being traced is a function of it: its calls join
            # the caller's streams and it returns what its Python returns (SBUF tiles too), as
            # NKI inlines a sub-kernel
            return self.fn(*args, **kwargs)
        result = run(self, args, kwargs, timing=False)
        outs = result.outputs
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self):
        return f"<nki kernel {self.fn.__name__}>"


def jit(fn=None, *, platform_target=None, mode=None, **options):
    """``@nki.jit`` / ``@nki.jit(platform_target="trn2")``.  ``psum_rounding="sr"`` (an
    ncrtl option; NKI gives the choice no argument) makes the kernel's BF16 PSUM matmul
    writes round stochastically (NeuronCore-v4), ``"rne"`` (default) to nearest even."""
    if fn is None:
        return lambda f: Kernel(f, platform_target, **options)
    return Kernel(fn, platform_target, **options)


def simulate(kernel):
    """``nki.simulate(kernel)(*arrays)``: run the kernel on the goldens, return its outputs."""
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    return kernel


def trace(kernel, args, kwargs=None, *, core=None, bounds=None):
    """Trace ``kernel`` on ``args`` (numpy arrays: the device tensors; other values passed as
    they are) into a :class:`~ncrtl.model.kernel.stream.Program`; ``kernel[2]`` gives the two
    cores' programs (a tuple), sharing the device tensors.  ``bounds``: a
    :class:`~ncrtl.nki.Bounds` on the instructions and the seconds the trace may take
    (:class:`~ncrtl.nki.TraceLimit` past one)."""
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    if bounds is None:
        return _traced(kernel, args, kwargs, core, None)
    with bounds:
        return _traced(kernel, args, kwargs, core, bounds)


def _traced(kernel, args, kwargs, core, bounds):
    grid = kernel.grid or ((2,) if kernel.lnc == 2 else None)
    if kernel.lnc == 1:
        return _trace_one(kernel, args, kwargs, core, 0, 1, 0, bounds, grid)
    first = _trace_one(kernel, args, kwargs, core, 0, 2, 0, bounds, grid)
    end = max((t.base + t.nbytes for t in first.tensors.values() if t.space == "hbm"), default=0)
    second = _trace_one(kernel, args, kwargs, core, 1, 2, end, bounds, grid)
    for name in first.inputs + first.outputs:
        a, b = first.tensors.get(name), second.tensors.get(name)
        if b is None or (a.base, a.shape, a.dtype) != (b.base, b.shape, b.dtype):
            raise NkiError(
                f"{kernel.fn.__name__}[2]: the two cores place device tensor {name} differently "
                f"(create the shared tensors in the same order on both cores)"
            )
    if first.outputs != second.outputs:
        raise NkiError(f"{kernel.fn.__name__}[2]: the two cores return different tensors")
    return first, second


def instances_of(grid, core_id, cores, core_of=None):
    """The grid positions core ``core_id`` of ``cores`` runs, in order: the instances ``i``
    (row-major) with ``i % cores == core_id``, or, given ``core_of`` (a position's core: the
    older API's ``nl.spmd_dim`` / ``nl.nc``), those it gives ``core_id``."""
    if grid is None:
        return [(0,)]
    n = math.prod(grid)
    if core_of is not None:
        every = [tuple(int(x) for x in np.unravel_index(i, grid)) for i in range(n)]
        return [p for p in every if core_of(p) == core_id] or [None]
    return [tuple(int(x) for x in np.unravel_index(i, grid)) for i in range(core_id, n, cores)] or [
        None
    ]


def _trace_one(
    kernel, args, kwargs, core, program_id, num_programs, hbm_internal_base, bounds, grid=None
):
    if isinstance(core, Core):
        c = core  # a geometry of its own (the RTL core's: ncrtl.model.neuroncore)
    else:
        c = CORES[core_of(core) if core else kernel.core]
    builder = Builder(c, kernel.fn.__name__)
    tr = _trace.Trace(
        builder, c, program_id, num_programs, kernel.options.get("psum_rounding", "rne"), bounds
    )
    tr.grid = grid
    names = kernel.fn.__code__.co_varnames[: kernel.fn.__code__.co_argcount]
    inputs, call_args = [], []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            try:
                d = dtype_of(a.dtype)
            except ValueError as e:
                raise NkiError(f"argument {i} of {kernel.fn.__name__}: {e}") from None
            name = names[i] if i < len(names) else f"arg{i}"
            decl = builder.tensor(
                "hbm", a.shape or (1,), d.name, name=name, kind="input", line="argument"
            )
            inputs.append(decl)
            call_args.append(_trace.tensor(decl))
        else:
            call_args.append(a)
    import inspect

    try:
        inspect.signature(kernel.fn).bind(*call_args, **(kwargs or {}))
    except TypeError as e:
        sig = inspect.signature(kernel.fn)
        raise NkiError(
            f"{kernel.fn.__name__}{sig} called with {len(call_args)} argument(s)"
            + (f" and {sorted(kwargs)}" if kwargs else "")
            + f": {e}"
        ) from None
    outputs, instances = None, []
    placed = kernel.options.get("_core_of")
    for k, position in enumerate(instances_of(grid, program_id, num_programs, placed)):
        if position is None:  # a grid of fewer instances than cores: this core idles
            break
        tr.position, tr.instance, tr.made = position, k, 0
        first = len(builder.pending)
        with _trace.active(tr):
            ret = kernel.fn(*call_args, **(kwargs or {}))
        instances.append((position, first, len(builder.pending)))
        if ret is None:
            rets = ()
        elif isinstance(ret, (tuple, list)):
            rets = tuple(ret)
        else:
            rets = (ret,)
        mine, views = [], []
        for r in rets:
            if not isinstance(r, NkiTensor) or r._decl.space != "hbm":
                raise NkiError(
                    f"{kernel.fn.__name__} returns {r!r}: a kernel returns device (HBM) tensors"
                )
            mine.append(r._decl)
            views.append(_returned_view(kernel, r))
        if outputs is not None and [d.name for d in mine] != [d.name for d in outputs]:
            raise NkiError(
                f"{kernel.fn.__name__}: instance {position} of the grid {list(grid)} returns "
                f"{[d.name for d in mine]}, instance {instances[0][0]} "
                f"{[d.name for d in outputs]}: every instance returns the same shared tensors"
            )
        outputs = mine
    for d in outputs or ():
        if d.kind == "internal":
            d.kind = "output"
    try:
        program = builder.finish(
            inputs,
            outputs or [],
            hbm_internal_base=hbm_internal_base,
            core_id=program_id,
            logical_cores=num_programs,
        )
    except PlacementError as e:
        raise NkiError(str(e)) from None
    # the grid's instances this core ran: (position, first program position, end)
    program.grid = grid
    program.instances = instances
    # what the kernel returned of each output tensor: None (the tensor itself) or the view's
    # shape, dtype and flat element indices (``t.reshape(...)``, a slice, ``t.view(dtype)``)
    program.output_views = views if outputs else []
    _one_after_another(program, instances)
    return program


def _returned_view(kernel, t):
    """None when ``t`` is its tensor as made, else ``(shape, dtype, flat indices)`` of the
    elements the returned view holds (the access rules checked as for an operand)."""
    d = t._decl
    if t.shape == d.shape and t.dtype == d.dtype and t.offset == 0 and t.is_contiguous():
        return None
    if t._dyn is not None:
        raise NkiError(
            f"{kernel.fn.__name__} returns a view with a run-time offset of {d.name}: return "
            "the tensor, or a view fixed when the kernel is traced"
        )
    ref = t._operand(f"{kernel.fn.__name__}'s return value", "the returned view").view
    return tuple(t.shape), t.dtype, ref.indices().reshape(-1)


def _one_after_another(program, instances):
    """A core runs its instances one after another: each stream's first instruction of an
    instance waits for every stream to have completed the instances before it."""
    import bisect

    seqs = {n: [i.seq for i in s] for n, s in program.streams.items()}
    for _, first, _ in instances[1:]:
        before = {n: bisect.bisect_left(q, first) for n, q in seqs.items()}
        fence = {n: k for n, k in before.items() if k}
        for n, s in program.streams.items():
            k = before[n]
            if k < len(s):
                ins = s[k]
                waits = dict(fence)
                for w, c in ins.waits:
                    waits[w] = max(c, waits.get(w, 0))
                ins.waits = tuple(sorted(waits.items()))


@dataclass
class Result:
    """What :func:`run` gives: the outputs (golden values), the program, its timing report."""

    outputs: list
    program: object
    report: object = None
    state: object = None


def run(
    kernel,
    args,
    kwargs=None,
    *,
    core=None,
    timing=True,
    golden=True,
    trace_file=False,
    uninitialized="error",
    order="program",
):
    """Trace ``kernel`` and run its streams on the goldens (``golden``) and the timing model
    (``timing``; ``trace_file`` keeps the Perfetto trace in the report)."""
    program = trace(kernel, args, kwargs, core=core)
    outputs, state = [], None
    if golden:
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        outputs, state = kgolden.run(program, arrays, uninitialized=uninitialized, order=order)
        first = program[0] if isinstance(program, tuple) else program
        outputs = returned(program, outputs)
        st0 = state[0] if isinstance(state, list) else state
        for a, name in zip(arrays, first.inputs):  # inputs the kernel wrote, in place
            if a.flags.writeable:
                new = st0.tensor(name)
                if not np.array_equal(
                    new.view(np.uint8),
                    np.ascontiguousarray(a).view(np.uint8).reshape(new.view(np.uint8).shape),
                ):
                    a[...] = new.reshape(a.shape)
    if timing and not golden and kloops.dynamic(program):
        # dynamic loops: their trip counts from the instructions the registers depend on
        kloops.trip_counts(program, [a for a in args if isinstance(a, np.ndarray)])
    report = ktiming.simulate(program, trace=trace_file) if timing else None
    return Result(outputs, program, report, state)


def returned(program, outputs):
    """The kernel's return values from the golden's output tensors (``kgolden.run``): each as
    its dtype, through the view the kernel returned of it (a reshape, a slice, a
    reinterpretation)."""
    first = program[0] if isinstance(program, tuple) else program
    outputs = [_as_numpy(o, first.tensors[n].dtype) for o, n in zip(outputs, first.outputs)]
    views = getattr(first, "output_views", None) or [None] * len(outputs)
    return [o if v is None else _through(o, *v) for o, v in zip(outputs, views)]


def _through(arr, shape, dtype, indices):
    """The elements of a returned view of an output tensor, in the view's shape and dtype."""
    flat = np.ascontiguousarray(arr).reshape(-1).view(dtype_of(dtype).storage)
    return flat[indices].reshape(shape)


def _as_numpy(arr, dtype):
    return np.asarray(arr).view(dtype_of(dtype).storage)
