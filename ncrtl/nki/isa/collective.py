"""What the cores of a logical core do together: ``core_barrier`` (and, for ``nki.collectives``,
:func:`group_op`, the one way a collective's side is appended to a core's stream).

A group operation is one instruction on each core taking part; the golden and the timing run
run the sides together once each is at the head of its stream
(:mod:`ncrtl.model.kernel.collective`).  Its data operands give it its order on its own core:
the builder makes it wait for the core's earlier accesses of them and the later ones wait for
it (docs/nki/multicore.md)."""

from __future__ import annotations

import numpy as np

from .._trace import NkiTensor, current, fail
from .enums import engine
from .operands import emit, operand, pick_engine

__all__ = ["core_barrier"]


def run_core(tr, core):
    """The index of core ``core`` of the calling rank's logical core among the run's cores
    (rank ``r``'s core ``k`` is ``r * cores + k`` over N ranks; the core itself otherwise)."""
    return getattr(tr, "rank", 0) * tr.num_programs + core


def cores_of(call, what, cores, tr):
    """The cores ``cores`` names (an index or a sequence of them), sorted; each a core of the
    logical core the kernel was launched on."""
    items = cores if isinstance(cores, (tuple, list)) else (cores,)
    out = []
    for c in items:
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)):
            fail(call, f"{what} must hold core indices known when the kernel is traced, not {c!r}")
        if not 0 <= int(c) < tr.num_programs:
            fail(
                call,
                f"{what} {cores!r} names core {int(c)}; the kernel runs on "
                f"{tr.num_programs} core(s) (launch kernel[2] for the two cores of a logical core)",
            )
        out.append(int(c))
    if not out or len(set(out)) != len(out):
        fail(call, f"{what} {cores!r} must name distinct cores")
    if tr.program_id not in out:
        fail(call, f"{what} {cores!r} leaves out core {tr.program_id}, which calls it")
    return tuple(sorted(out))


def group_op(call, engine_name, op, group, dsts, srcs, args):
    """Append this core's side of a group operation of the cores ``group``."""
    tr = current(call)
    turn = tr.groups.get(group, 0)
    tr.groups[group] = turn + 1
    emit(engine_name, op, dsts, srcs, {**args, "group": group, "turn": turn}, call)


def core_barrier(data, cores, engine=engine.gpsimd, name=None):
    """Every core of ``cores`` reaches the barrier before any goes on: the accesses to ``data``
    before it (on any of them) come before the accesses after it."""
    call = "nisa.core_barrier"
    tr = current(call)
    if tr.core.name == "v2":
        fail(call, "core_barrier needs NeuronCore-v3 or later (a logical core of two)")
    which = pick_engine(call, engine, ("gpsimd", "vector", "scalar"), "gpsimd")
    if not isinstance(data, NkiTensor):
        fail(
            call, f"data must be a tensor (the shared data the cores synchronise on), not {data!r}"
        )
    d = operand(call, "data", data, ("hbm", "sbuf"))
    group = tuple(run_core(tr, c) for c in cores_of(call, "cores", cores, tr))
    group_op(call, which, "core_barrier", group, [d], [], {})
