"""``nki.jit``, ``nki.simulate`` and ncrtl's own entry points: trace a kernel into streams, run
them on the goldens and on the timing model."""

from __future__ import annotations

import functools
import math
import os
import warnings
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

__all__ = [
    "jit",
    "simulate",
    "Kernel",
    "trace",
    "run",
    "Result",
    "core_of",
    "returned",
    "unwritten_outputs",
    "UnwrittenOutput",
    "PerRank",
    "per_rank",
]

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

    def ranks(self, n):
        """The kernel run over ``n`` simulated ranks (``ncrtl run --ranks N``): each rank a
        device of its own (its own device memory and inputs, a logical core of this kernel's
        cores), ``nki.collectives`` between them; a call returns rank 0's outputs
        (docs/nki/multicore.md, "Ranks")."""
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
            raise NkiError(f"{self.fn.__name__}.ranks({n!r}): the ranks are a positive integer")
        return Kernel(self.fn, self.platform_target, self.lnc, **{**self.options, "_ranks": int(n)})

    @property
    def num_ranks(self):
        """The simulated ranks of :meth:`ranks` (None: the kernel runs on one device)."""
        return self.options.get("_ranks")

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

    def replan(self, error):
        """Whether to trace the kernel again after ``error`` (a trace's placement overflow the
        older API's compiler would have spilled: ``ncrtl.nki.legacy``'s kernel); False."""
        return False

    def argument(self, t):
        """A device tensor ``t`` as the kernel receives it (the older API's kernels take tensors
        of that API: ``ncrtl.nki.legacy``'s kernel converts it)."""
        return t


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


class PerRank:
    """One array per rank for one device tensor of a run over N ranks (:func:`per_rank`)."""

    def __init__(self, arrays):
        self.arrays = [np.asarray(a) for a in arrays]
        if not self.arrays:
            raise NkiError("per_rank([]): one array per rank")

    def __repr__(self):
        return f"per_rank({len(self.arrays)} arrays)"


def per_rank(arrays):
    """A device tensor whose value differs per rank (``arrays[r]`` rank ``r``'s) in a run
    over N ranks (``kernel.ranks(N)``, ``run(..., ranks=N)``); a plain array is every rank's."""
    return PerRank(arrays)


def rank_args(args, rank, ranks):
    """``args`` as rank ``rank`` of ``ranks`` sees them (each :class:`PerRank` its array)."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, PerRank):
            if ranks is None:
                raise NkiError(
                    f"argument {i}: per-rank arrays need a run over ranks (kernel.ranks(N), "
                    f"ncrtl run --ranks N)"
                )
            if len(a.arrays) != ranks:
                raise NkiError(f"argument {i}: {len(a.arrays)} per-rank arrays for {ranks} ranks")
            a = a.arrays[rank]
        out.append(a)
    return out


def _ranks_of(kernel, ranks):
    n = kernel.num_ranks if ranks is None else ranks
    if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
        raise NkiError(f"ranks={n!r}: a positive integer")
    return None if n is None else int(n)


def trace(kernel, args, kwargs=None, *, core=None, bounds=None, ranks=None):
    """Trace ``kernel`` on ``args`` (numpy arrays: the device tensors; other values passed as
    they are) into a :class:`~ncrtl.model.kernel.stream.Program`; ``kernel[2]`` gives the two
    cores' programs (a tuple), sharing the device tensors.  Over ``ranks`` simulated ranks
    (or ``kernel.ranks(N)``'s), the programs of every rank's cores, rank by rank (a tuple;
    each program's ``rank`` its rank; a :class:`PerRank` argument gives each rank its own
    array).  ``bounds``: a :class:`~ncrtl.nki.Bounds` on the instructions and the seconds the
    trace may take (:class:`~ncrtl.nki.TraceLimit` past one)."""
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    n = _ranks_of(kernel, ranks)
    if n is None:
        args = rank_args(args, 0, None)  # refuses per-rank arrays
    while True:
        try:
            if bounds is None:
                return _over_ranks(kernel, args, kwargs, core, None, n)
            with bounds:
                return _over_ranks(kernel, args, kwargs, core, bounds, n)
        except NkiError as e:
            if not kernel.replan(e):
                raise
            if bounds is not None:
                bounds.emitted = 0


def _over_ranks(kernel, args, kwargs, core, bounds, ranks):
    if ranks is None:
        return _traced(kernel, args, kwargs, core, bounds)
    programs = []
    for r in range(ranks):
        got = _traced(kernel, rank_args(args, r, ranks), kwargs, core, bounds, r, ranks)
        got = got if isinstance(got, tuple) else (got,)
        for p in got:
            p.rank = r
        if r:
            first = programs[0]
            mine = [(first.tensors[n].shape, first.tensors[n].dtype) for n in first.outputs]
            theirs = [(got[0].tensors[n].shape, got[0].tensors[n].dtype) for n in got[0].outputs]
            if mine != theirs:
                raise NkiError(
                    f"{kernel.fn.__name__}: rank {r} returns {theirs}, rank 0 {mine}: every "
                    f"rank returns tensors of the same shapes and dtypes"
                )
        programs += got
    return tuple(programs)


def _traced(kernel, args, kwargs, core, bounds, rank=0, ranks=None):
    grid = kernel.grid or ((2,) if kernel.lnc == 2 else None)
    if kernel.lnc == 1:
        return _trace_one(kernel, args, kwargs, core, 0, 1, 0, bounds, grid, rank, ranks)
    first = _trace_one(kernel, args, kwargs, core, 0, 2, 0, bounds, grid, rank, ranks)
    end = max((t.base + t.nbytes for t in first.tensors.values() if t.space == "hbm"), default=0)
    second = _trace_one(kernel, args, kwargs, core, 1, 2, end, bounds, grid, rank, ranks)
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
    kernel,
    args,
    kwargs,
    core,
    program_id,
    num_programs,
    hbm_internal_base,
    bounds,
    grid=None,
    rank=0,
    ranks=None,
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
    tr.rank, tr.ranks = rank, ranks  # over N simulated ranks (nki.collectives): this one
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
            call_args.append(kernel.argument(_trace.tensor(decl)))
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
    """What :func:`run` gives: the outputs (golden values), the program, its timing report;
    over N ranks, ``outputs`` are rank 0's and ``rank_outputs[r]`` rank ``r``'s."""

    outputs: list
    program: object
    report: object = None
    state: object = None
    rank_outputs: list = None


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
    ranks=None,
    params=None,
):
    """Trace ``kernel`` and run its streams on the goldens (``golden``) and the timing model
    (``timing``; ``trace_file`` keeps the Perfetto trace in the report; ``params`` the timing
    model's :class:`~ncrtl.model.kernel.timing.Params`).  ``ranks``: run over N simulated
    ranks (default ``kernel.ranks(N)``'s; docs/nki/multicore.md, "Ranks")."""
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    n = _ranks_of(kernel, ranks)
    program = trace(kernel, args, kwargs, core=core, ranks=n)
    if n is not None:
        return _run_ranks(
            kernel, program, args, n, timing, golden, trace_file, uninitialized, order, params
        )
    outputs, state = [], None
    if golden:
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        outputs, state = kgolden.run(program, arrays, uninitialized=uninitialized, order=order)
        first = program[0] if isinstance(program, tuple) else program
        outputs = returned(program, outputs)
        unwritten_outputs(program, state)
        st0 = state[0] if isinstance(state, list) else state
        _write_back(arrays, first.inputs, st0)
    if timing and not golden and kloops.dynamic(program):
        # dynamic loops: their trip counts from the instructions the registers depend on
        kloops.trip_counts(program, [a for a in args if isinstance(a, np.ndarray)])
    report = ktiming.simulate(program, params=params, trace=trace_file) if timing else None
    return Result(outputs, program, report, state)


def _write_back(arrays, names, st):
    """Inputs the kernel wrote, in place."""
    for a, name in zip(arrays, names):
        if a.flags.writeable:
            new = st.tensor(name)
            if not np.array_equal(
                new.view(np.uint8),
                np.ascontiguousarray(a).view(np.uint8).reshape(new.view(np.uint8).shape),
            ):
                a[...] = new.reshape(a.shape)


def rank_arrays(args, ranks):
    """Per rank, the device tensors of ``args`` (numpy arrays and :class:`PerRank`)."""
    return [
        [a for a in rank_args(args, r, ranks) if isinstance(a, np.ndarray)] for r in range(ranks)
    ]


def rank_programs(programs, rank):
    """The programs of rank ``rank``'s cores (a tuple) of a run over ranks."""
    return tuple(p for p in programs if p.rank == rank)


def golden_ranks(programs, per_rank_arrays, *, uninitialized="error", order="program"):
    """The golden run over ranks: ``(outputs per rank, states)``, each rank a device of its
    own holding ``per_rank_arrays[rank]``."""
    from ncrtl.model.kernel.collective import rank_states

    states = rank_states(programs, per_rank_arrays, uninitialized=uninitialized)
    kgolden.run(programs, None, state=states, order=order)
    outs = []
    for r in range(len(per_rank_arrays)):
        k = next(i for i, p in enumerate(programs) if p.rank == r)
        mine = rank_programs(programs, r)
        outs.append(returned(mine, [states[k].tensor(n) for n in programs[k].outputs]))
        unwritten_outputs(mine, states[k])
    return outs, states


def _run_ranks(kernel, programs, args, n, timing, golden, trace_file, uninitialized, order, params):
    from ncrtl.model.kernel.collective import rank_trip_counts

    per = rank_arrays(args, n)
    outputs, states, rank_outputs = [], None, None
    if golden:
        rank_outputs, states = golden_ranks(programs, per, uninitialized=uninitialized, order=order)
        outputs = rank_outputs[0]
        for r in range(n):  # inputs the kernel wrote: rank 0's of a shared array
            k = next(i for i, p in enumerate(programs) if p.rank == r)
            arrays = [a for a in args if isinstance(a, (np.ndarray, PerRank))]
            mine = [a.arrays[r] if isinstance(a, PerRank) else a for a in arrays]
            keep = [a if (isinstance(o, PerRank) or r == 0) else None for a, o in zip(mine, arrays)]
            for a, name in zip(keep, programs[k].inputs):
                if a is not None:
                    _write_back([a], [name], states[k])
    if timing and not golden and kloops.dynamic(programs):
        rank_trip_counts(programs, per)
    report = ktiming.simulate(programs, params=params, trace=trace_file) if timing else None
    return Result(outputs, programs, report, states, rank_outputs)


def returned(program, outputs):
    """The kernel's return values from the golden's output tensors (``kgolden.run``): each as
    its dtype, through the view the kernel returned of it (a reshape, a slice, a
    reinterpretation)."""
    first = program[0] if isinstance(program, tuple) else program
    outputs = [_as_numpy(o, first.tensors[n].dtype) for o, n in zip(outputs, first.outputs)]
    views = getattr(first, "output_views", None) or [None] * len(outputs)
    return [o if v is None else _through(o, *v) for o, v in zip(outputs, views)]


class UnwrittenOutput(kgolden.UninitializedRead):
    """A kernel output with elements no instruction wrote (:func:`unwritten_outputs`)."""


def unwritten_outputs(program, state):
    """Warn (:class:`UnwrittenOutput`, one line each) of every returned output with elements
    that no instruction of the kernel wrote: the hardware returns whatever the device memory
    held there, the golden 0, so a value compared there compares nothing (a kernel whose loops
    ran no iteration at the shape it was given, a shape that leaves a tile to no core).
    Returns the messages."""
    first = program[0] if isinstance(program, tuple) else program
    st0 = state[0] if isinstance(state, list) else state
    views = getattr(first, "output_views", None) or [None] * len(first.outputs)
    messages = []
    for k, (name, view) in enumerate(zip(first.outputs, views)):
        t = first.tensors[name]
        done = st0.hbm_written[t.base : t.base + t.nbytes]
        if view is None:
            shape, isz = tuple(t.shape), dtype_of(t.dtype).itemsize
            mask = done.reshape(-1, isz).all(axis=1).reshape(shape)
        else:
            shape, dtype, indices = view
            isz = dtype_of(dtype).itemsize
            mask = done.reshape(-1, isz).all(axis=1)[indices].reshape(shape)
        if mask.all():
            continue
        missing = int(mask.size - np.count_nonzero(mask))
        at = [int(i) for i in np.argwhere(~mask)[0]]
        name = f"{name} {list(shape)}" + (f" ({t.line})" if t.line else "")
        if missing == mask.size:
            msg = (
                f"{first.kernel}: output {k} ({name}): no instruction wrote it; "
                f"the hardware returns what the device memory held, ncrtl 0"
            )
        else:
            msg = (
                f"{first.kernel}: output {k} ({name}): {missing} of its "
                f"{mask.size} elements written by no instruction (the first at {at}); the "
                f"hardware returns what the device memory held there, ncrtl 0"
            )
        messages.append(msg)
        warnings.warn(msg, UnwrittenOutput, stacklevel=2)
    return messages


def _through(arr, shape, dtype, indices):
    """The elements of a returned view of an output tensor, in the view's shape and dtype."""
    flat = np.ascontiguousarray(arr).reshape(-1).view(dtype_of(dtype).storage)
    return flat[indices].reshape(shape)


def _as_numpy(arr, dtype):
    return np.asarray(arr).view(dtype_of(dtype).storage)
