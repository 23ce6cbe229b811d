"""``nki.collectives`` as ncrtl models it: collectives over the ranks of a replica group, a rank
being a core of the logical core the kernel was launched on (``kernel[2]``: ranks 0 and 1).

Each call checks its tensors when the kernel is traced and appends this core's side of the
collective to one of its DMA queues (:func:`ncrtl.nki.isa.collective.group_op`); the golden
runs the sides together (:mod:`ncrtl.model.kernel.collective`: reductions in rank order in
float32, then one conversion to the destination), the timing run moves each side's
destination bytes on its core's DMA engines.  docs/nki/multicore.md.
"""

from __future__ import annotations

from ncrtl.model.kernel.collective import REDUCE_OPS
from ncrtl.model.kernel.dtypes import dtype_of

from . import _trace
from ._trace import NkiTensor, current, fail, not_modelled
from .isa.collective import group_op
from .isa.operands import op_name, operand

__all__ = [
    "ReplicaGroup",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "collective_permute",
    "rank_id",
    "all_gather_v",
    "all_to_all_v",
    "collective_permute_implicit",
    "collective_permute_implicit_reduce",
    "collective_permute_implicit_current_processing_rank_id",
]


class ReplicaGroup:
    """The groups of ranks a collective runs over: ``ReplicaGroup([[0, 1]])`` (the groups do
    not overlap; a collective runs within the group of the calling rank)."""

    def __init__(self, replica_groups=None, **kwargs):
        groups = kwargs.pop("groups", replica_groups)
        if kwargs:
            raise _trace.NkiError(f"ReplicaGroup: no argument {sorted(kwargs)[0]!r}")
        self.groups = [list(g) for g in (groups if groups is not None else [[0, 1]])]

    def __repr__(self):
        return f"ReplicaGroup({self.groups!r})"


def rank_id(name=None):
    """This rank's id: the core of the logical core the instance runs on."""
    return current("ncc.rank_id").program_id


def _group(call, replica_group, tr):
    """The ranks of the calling rank's group, sorted."""
    if not isinstance(replica_group, ReplicaGroup):
        fail(call, f"replica_group must be an nki.collectives.ReplicaGroup, not {replica_group!r}")
    seen = set()
    mine = None
    for g in replica_group.groups:
        for r in g:
            if not isinstance(r, int) or isinstance(r, bool):
                fail(call, f"replica_group {replica_group.groups}: ranks are integers, not {r!r}")
            if r in seen:
                fail(call, f"replica_group {replica_group.groups}: rank {r} is in two groups")
            seen.add(r)
            if not 0 <= r < tr.num_programs:
                fail(
                    call,
                    f"replica_group {replica_group.groups} names rank {r}; ncrtl's ranks are the "
                    f"{tr.num_programs} core(s) of the logical core the kernel runs on (launch "
                    f"kernel[2] for two)",
                )
        if tr.program_id in g:
            mine = tuple(sorted(g))
    if mine is None:
        fail(call, f"replica_group {replica_group.groups} has no group of rank {tr.program_id}")
    return mine


def _tensors(call, srcs, dsts, hbm_only=False, one=False):
    """``(srcs, dsts, space)``: the operand lists, checked: as many of each, all tensors in
    one memory (device memory or SBUF; several only in device memory)."""
    for what, ts in (("srcs", srcs), ("dsts", dsts)):
        if not isinstance(ts, (list, tuple)) or not ts:
            fail(call, f"{what} must be a non-empty list of tensors, not {ts!r}")
        for t in ts:
            if not isinstance(t, NkiTensor):
                fail(call, f"{what} must hold tensors, not {t!r}")
    if len(srcs) != len(dsts):
        fail(call, f"{len(srcs)} srcs and {len(dsts)} dsts: one destination per source")
    spaces = {t._decl.space for t in (*srcs, *dsts)}
    if len(spaces) > 1:
        fail(call, "the tensors are all in device memory (HBM) or all in SBUF, not a mix")
    space = spaces.pop()
    allowed = ("hbm",) if hbm_only else ("hbm", "sbuf")
    if space not in allowed:
        where = "device memory (HBM)" if hbm_only else "device memory (HBM) or SBUF"
        fail(call, f"the tensors are in {space.upper()}; this collective takes them in {where}")
    if one and len(srcs) > 1:
        fail(call, "one tensor per list (coalesced tensors are not supported for this collective)")
    if space == "sbuf" and len(srcs) > 1:
        fail(call, "several tensors in one collective only in device memory (HBM), not SBUF")
    s = [operand(call, f"srcs[{k}]", t, (space,)) for k, t in enumerate(srcs)]
    d = [operand(call, f"dsts[{k}]", t, (space,)) for k, t in enumerate(dsts)]
    for t in (*srcs, *dsts):
        if dtype_of(t.dtype).packed != 1:
            fail(call, f"{t.name} is of the packed type {t.dtype}")
    return s, d, space


def _dim(call, dim, space, tr_allowed):
    if isinstance(dim, bool) or not isinstance(dim, int):
        fail(call, f"collective_dim must be an integer, not {dim!r}")
    if dim not in tr_allowed:
        fail(
            call,
            f"collective_dim={dim}: {' or '.join(map(str, tr_allowed))} for tensors in "
            f"{'SBUF' if space == 'sbuf' else 'device memory'}",
        )
    return dim


def _same_dtype(call, srcs, dsts):
    for k, (s, d) in enumerate(zip(srcs, dsts)):
        if s.dtype != d.dtype:
            fail(call, f"srcs[{k}] is {s.dtype}, dsts[{k}] {d.dtype}: the data moves unchanged")


def _check_priority(call, priority, tr):
    if priority is None:
        return
    if isinstance(priority, bool) or priority not in (0, 1, 2, 3):
        fail(call, f"priority={priority!r}: 0 to 3 (lower is higher priority)")
    if tr.core.name != "v4":
        fail(call, "priority: DMA quality of service is NeuronCore-v4 and later")


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None):
    """Each rank's ``dsts[k]`` = ``op`` over the group's ``srcs[k]`` (rank order)."""
    call = "ncc.all_reduce"
    tr = current(call)
    _check_priority(call, priority, tr)
    group = _group(call, replica_group, tr)
    opname = op_name(call, "op", op, REDUCE_OPS)
    s, d, _ = _tensors(call, srcs, dsts)
    for k, (a, b) in enumerate(zip(srcs, dsts)):
        if tuple(a.shape) != tuple(b.shape):
            fail(call, f"srcs[{k}] {list(a.shape)} and dsts[{k}] {list(b.shape)}: one shape")
    group_op(call, "dma", "collective", group, d, s, {"kind": "all_reduce", "op": opname})


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Each rank's ``dsts[k]`` = the group's ``srcs[k]`` concatenated along
    ``collective_dim`` in rank order."""
    call = "ncc.all_gather"
    tr = current(call)
    _check_priority(call, priority, tr)
    group = _group(call, replica_group, tr)
    s, d, space = _tensors(call, srcs, dsts)
    dim = _dim(call, collective_dim, space, (0, 1) if space == "sbuf" else (0,))
    _same_dtype(call, srcs, dsts)
    r = len(group)
    for k, (a, b) in enumerate(zip(srcs, dsts)):
        if space == "sbuf" and (len(a.shape) != 2 or len(b.shape) != 2):
            fail(call, "SBUF collectives take 2-D tensors [partitions, elements]")
        want = list(a.shape)
        want[dim] *= r
        if list(b.shape) != want:
            fail(
                call,
                f"dsts[{k}] {list(b.shape)} must be {want}: srcs[{k}] {list(a.shape)} from "
                f"each of the {r} ranks along dimension {dim}",
            )
        if space == "sbuf" and dim == 0 and want[0] > tr.core.partitions:
            fail(call, f"dsts[{k}] {want} has more than {tr.core.partitions} partitions")
    group_op(call, "dma", "collective", group, d, s, {"kind": "all_gather", "dim": dim})


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None):
    """Rank ``r`` (the ``r``-th of its group) gets piece ``r`` along ``collective_dim`` of
    ``op`` over the group's ``srcs[k]``."""
    call = "ncc.reduce_scatter"
    tr = current(call)
    _check_priority(call, priority, tr)
    group = _group(call, replica_group, tr)
    opname = op_name(call, "op", op, REDUCE_OPS)
    s, d, space = _tensors(call, srcs, dsts)
    dim = _dim(call, collective_dim, space, (0,))
    r = len(group)
    for k, (a, b) in enumerate(zip(srcs, dsts)):
        want = list(a.shape)
        if want[dim] % r:
            fail(call, f"srcs[{k}] {list(a.shape)}: dimension {dim} does not split into {r} ranks")
        want[dim] //= r
        if list(b.shape) != want:
            fail(call, f"dsts[{k}] {list(b.shape)} must be {want} (a {r}-th of srcs[{k}])")
    args = {"kind": "reduce_scatter", "op": opname, "dim": dim}
    group_op(call, "dma", "collective", group, d, s, args)


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Rank ``r``'s ``dsts[k]`` = piece ``r`` of every rank's ``srcs[k]`` (split along
    ``collective_dim``), concatenated in rank order."""
    call = "ncc.all_to_all"
    tr = current(call)
    _check_priority(call, priority, tr)
    group = _group(call, replica_group, tr)
    s, d, space = _tensors(call, srcs, dsts, hbm_only=True)
    dim = _dim(call, collective_dim, space, (0,))
    _same_dtype(call, srcs, dsts)
    for k, (a, b) in enumerate(zip(srcs, dsts)):
        if tuple(a.shape) != tuple(b.shape) or a.shape[dim] % len(group):
            fail(
                call,
                f"srcs[{k}] {list(a.shape)} and dsts[{k}] {list(b.shape)}: one shape, dimension "
                f"{dim} a multiple of the {len(group)} ranks",
            )
    group_op(call, "dma", "collective", group, d, s, {"kind": "all_to_all", "dim": dim})


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None):
    """For each ``(source, target)`` pair, the target rank's ``dsts[0]`` = the source rank's
    ``srcs[0]``; a rank no pair targets keeps its ``dsts[0]``."""
    call = "ncc.collective_permute"
    tr = current(call)
    _check_priority(call, priority, tr)
    s, d, _ = _tensors(call, srcs, dsts, hbm_only=True, one=True)
    _same_dtype(call, srcs, dsts)
    if tuple(srcs[0].shape) != tuple(dsts[0].shape):
        fail(call, f"srcs[0] {list(srcs[0].shape)} and dsts[0] {list(dsts[0].shape)}: one shape")
    try:
        pairs = [(int(a), int(b)) for a, b in source_target_pairs]
    except (TypeError, ValueError):
        fail(
            call,
            f"source_target_pairs must be [(source, target), ...], not {source_target_pairs!r}",
        )
    targets = [b for _, b in pairs]
    if len(set(targets)) != len(targets):
        fail(call, f"source_target_pairs {pairs}: a rank is the target of two pairs")
    for a, b in pairs:
        for r in (a, b):
            if not 0 <= r < tr.num_programs:
                fail(
                    call,
                    f"source_target_pairs {pairs} names rank {r}; the kernel runs on "
                    f"{tr.num_programs} core(s) (launch kernel[2] for two)",
                )
    group = tuple(range(tr.num_programs))
    args = {"kind": "collective_permute", "pairs": [list(p) for p in pairs]}
    group_op(call, "dma", "collective", group, d, s, args)


def _unmodelled(name):
    def stand_in(*args, **kwargs):
        not_modelled(f"nki.collectives.{name}")

    stand_in.__name__ = name
    return stand_in


# Variable-length and ring collectives: their counts and ring position are run-time register
# values across devices, which ncrtl's ranks (the cores of one logical core) do not model.
all_gather_v = _unmodelled("all_gather_v")
all_to_all_v = _unmodelled("all_to_all_v")
collective_permute_implicit = _unmodelled("collective_permute_implicit")
collective_permute_implicit_reduce = _unmodelled("collective_permute_implicit_reduce")
collective_permute_implicit_current_processing_rank_id = _unmodelled(
    "collective_permute_implicit_current_processing_rank_id"
)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _trace.stand_in("nki.collectives", "ncc", name)


_trace.checked_module(globals(), "ncc")
