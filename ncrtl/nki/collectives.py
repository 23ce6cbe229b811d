"""``nki.collectives`` as ncrtl models it: collectives over the ranks of a replica group, a rank
being a core of the logical core the kernel was launched on (``kernel[2]``: ranks 0 and 1), or,
over N simulated ranks (``ncrtl run --ranks N``, ``kernel.ranks(N)``), a device of its own (a
logical core of one or two cores, its own device memory and inputs).

Each call checks its tensors when the kernel is traced and appends this core's side of the
collective to one of its DMA queues (:func:`ncrtl.nki.isa.collective.group_op`); the golden
runs the sides together (:mod:`ncrtl.model.kernel.collective`: reductions in rank order in
float32, then one conversion to the destination), the timing run moves each side's
destination bytes on its core's DMA engines, and between devices no faster than their link.
docs/nki/multicore.md.
"""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.collective import REDUCE_OPS
from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.loops import TRACED

from . import _trace
from ._trace import NkiTensor, caller_line, current, fail
from .isa.collective import group_op
from .isa.operands import emit, op_name, operand

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


def _ranked(tr):
    """Whether the kernel runs over N simulated ranks (``ncrtl run --ranks N``): a rank is
    then a device of its own, else a core of the logical core."""
    return getattr(tr, "ranks", None) is not None


def _nranks(tr):
    return tr.ranks if _ranked(tr) else tr.num_programs


def _me(tr):
    """The calling rank."""
    return tr.rank if _ranked(tr) else tr.program_id


def _core(tr, r):
    """The run's core (:func:`ncrtl.nki.isa.collective.run_core`) of rank ``r``'s side: over
    N ranks the calling core's counterpart on rank ``r``, else the core ``r`` itself."""
    return r * tr.num_programs + tr.program_id if _ranked(tr) else r


def rank_id(name=None):
    """This rank's id: over N simulated ranks the rank (the device), else the core of the
    logical core the instance runs on."""
    tr = current("ncc.rank_id")
    return _me(tr)


def _where_ranks(tr):
    if _ranked(tr):
        return f"the kernel runs on {tr.ranks} rank(s) (ncrtl run --ranks N, kernel.ranks(N))"
    return (
        f"ncrtl's ranks are the {tr.num_programs} core(s) of the logical core the kernel runs "
        f"on (launch kernel[2] for two, or over N simulated ranks: ncrtl run --ranks N, "
        f"kernel.ranks(N))"
    )


def _ring(call, replica_group, tr):
    """The ranks of the calling rank's group, in the group's order."""
    if not isinstance(replica_group, ReplicaGroup):
        fail(call, f"replica_group must be an nki.collectives.ReplicaGroup, not {replica_group!r}")
    seen = set()
    mine = None
    n = _nranks(tr)
    for g in replica_group.groups:
        for r in g:
            if not isinstance(r, int) or isinstance(r, bool):
                fail(call, f"replica_group {replica_group.groups}: ranks are integers, not {r!r}")
            if r in seen:
                fail(call, f"replica_group {replica_group.groups}: rank {r} is in two groups")
            seen.add(r)
            if not 0 <= r < n:
                fail(
                    call, f"replica_group {replica_group.groups} names rank {r}; {_where_ranks(tr)}"
                )
        if _me(tr) in g:
            mine = list(g)
    if mine is None:
        fail(call, f"replica_group {replica_group.groups} has no group of rank {_me(tr)}")
    return mine


def _group(call, replica_group, tr):
    """The run's cores of the calling rank's group's sides, sorted (rank order)."""
    return tuple(sorted(_core(tr, r) for r in _ring(call, replica_group, tr)))


def _devices(tr, group):
    """The devices a group spans: its ranks over N ranks, one for a logical core's cores."""
    return len(group) if _ranked(tr) else 1


def _tensors(call, srcs, dsts, hbm_only=False, one=False, coalesced_ok=False):
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
    if space == "sbuf" and len(srcs) > 1 and not coalesced_ok:
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
    args = {"kind": "all_reduce", "op": opname, "devices": _devices(tr, group)}
    group_op(call, "dma", "collective", group, d, s, args)


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
    args = {"kind": "all_gather", "dim": dim, "devices": _devices(tr, group)}
    group_op(call, "dma", "collective", group, d, s, args)


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
    args = {"kind": "reduce_scatter", "op": opname, "dim": dim, "devices": _devices(tr, group)}
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
    args = {"kind": "all_to_all", "dim": dim, "devices": _devices(tr, group)}
    group_op(call, "dma", "collective", group, d, s, args)


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
    n = _nranks(tr)
    for a, b in pairs:
        for r in (a, b):
            if not 0 <= r < n:
                fail(call, f"source_target_pairs {pairs} names rank {r}; {_where_ranks(tr)}")
    group = tuple(_core(tr, r) for r in range(n))
    me = _me(tr)
    args = {
        "kind": "collective_permute",
        "pairs": [[_core(tr, a), _core(tr, b)] for a, b in pairs],
        "devices": _devices(tr, group),
        "received": any(b == me and a != me for a, b in pairs),
    }
    group_op(call, "dma", "collective", group, d, s, args)


# -- the ring collectives --------------------------------------------------------------------


def _channels(call, what, lists, k):
    """The one tensor of each channel's list (``[[t0], [t1], ...]``)."""
    if not isinstance(lists, (list, tuple)) or not lists:
        fail(call, f"{what} must be a non-empty list of one-tensor lists (one per channel)")
    out = []
    for c, inner in enumerate(lists):
        if isinstance(inner, NkiTensor) or not isinstance(inner, (list, tuple)) or len(inner) != 1:
            fail(
                call,
                f"{what}[{c}] must be a list of exactly one tensor (coalesced tensors are not "
                f"supported), not {inner!r}",
            )
        out.append(inner[0])
    if k is not None and len(out) != k:
        fail(call, f"{what} has {len(out)} channel(s), channel_ids {k}: one list per channel")
    return out


def _channel_ids(call, channel_ids):
    try:
        ids = [int(c) for c in channel_ids]
    except (TypeError, ValueError):
        fail(call, f"channel_ids must be a list of integers, not {channel_ids!r}")
    if ids != list(range(len(ids))) or not ids:
        fail(call, f"channel_ids {list(channel_ids)}: consecutive integers starting from 0")
    if len(ids) > MAX_CHANNELS:
        fail(call, f"channel_ids {ids}: at most {MAX_CHANNELS} channels")
    return len(ids)


#: The most channels a ring collective uses (the reference: 4 for a group of every device
#: of a node, 2 for the other groups; ncrtl does not model the node, so 4).
MAX_CHANNELS = 4


def _ring_args(call, replica_group, tr, kind):
    ring = _ring(call, replica_group, tr)
    cores = [_core(tr, r) for r in ring]
    group = tuple(sorted(cores))
    return group, {"kind": kind, "ring": cores, "devices": _devices(tr, group)}


def collective_permute_implicit(
    srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,), priority=None, name=None
):
    """Per channel, each rank sends its source to its successor in the ring (the replica
    group's order) and receives its predecessor's into its destination."""
    call = "ncc.collective_permute_implicit"
    tr = current(call)
    _check_priority(call, priority, tr)
    k = _channel_ids(call, channel_ids)
    srcs = _channels(call, "srcs_by_channel", srcs_by_channel, k)
    dsts = _channels(call, "dsts_by_channel", dsts_by_channel, k)
    s, d, _ = _tensors(call, srcs, dsts, coalesced_ok=True)
    _same_dtype(call, srcs, dsts)
    for c, (a, b) in enumerate(zip(srcs, dsts)):
        if a.size != b.size:
            fail(
                call,
                f"channel {c}: source {list(a.shape)} and destination {list(b.shape)} hold as "
                f"many elements",
            )
    group, args = _ring_args(call, replica_group, tr, "permute_implicit")
    group_op(call, "dma", "collective", group, d, s, args)


def collective_permute_implicit_reduce(
    srcs0_by_channel,
    srcs1_by_channel,
    dsts_by_channel,
    replica_group,
    op,
    channel_ids=(0,),
    priority=None,
    name=None,
):
    """Per channel, each rank sends ``op(srcs0, srcs1)`` to its successor in the ring; its
    destination receives its predecessor's (float32, one rounding to the destination)."""
    call = "ncc.collective_permute_implicit_reduce"
    tr = current(call)
    _check_priority(call, priority, tr)
    opname = op_name(call, "op", op, REDUCE_OPS)
    k = _channel_ids(call, channel_ids)
    s0 = _channels(call, "srcs0_by_channel", srcs0_by_channel, k)
    s1 = _channels(call, "srcs1_by_channel", srcs1_by_channel, k)
    dsts = _channels(call, "dsts_by_channel", dsts_by_channel, k)
    a_ops, d, _ = _tensors(call, s0, dsts, coalesced_ok=True)
    b_ops, _, _ = _tensors(call, s1, dsts, coalesced_ok=True)
    for c, (a, b, o) in enumerate(zip(s0, s1, dsts)):
        if not (a.size == b.size == o.size):
            fail(
                call,
                f"channel {c}: srcs0 {list(a.shape)}, srcs1 {list(b.shape)} and dsts "
                f"{list(o.shape)} hold as many elements",
            )
    srcs = [x for pair in zip(a_ops, b_ops) for x in pair]
    group, args = _ring_args(call, replica_group, tr, "permute_implicit_reduce")
    args["op"] = opname
    group_op(call, "dma", "collective", group, d, srcs, args)


def collective_permute_implicit_current_processing_rank_id(
    iteration_id, replica_group, channel_id=0, name=None
):
    """A register holding the rank whose data the ring's iteration ``iteration_id`` has
    here: the calling rank at 0, its predecessor's at 1, and so on around the ring."""
    call = "ncc.collective_permute_implicit_current_processing_rank_id"
    tr = current(call)
    from .isa.registers import VirtualRegister

    if isinstance(iteration_id, VirtualRegister):
        fail(
            call,
            "iteration_id is a register: ncrtl computes the ring position when the kernel is "
            "traced and needs the iteration as an integer (a Python loop or "
            "nl.sequential_range)",
        )
    if isinstance(iteration_id, np.integer):
        iteration_id = int(iteration_id)
    if isinstance(iteration_id, bool) or not isinstance(iteration_id, int) or iteration_id < 0:
        fail(call, f"iteration_id must be a non-negative integer, not {iteration_id!r}")
    if isinstance(channel_id, bool) or not isinstance(channel_id, (int, np.integer)):
        fail(call, f"channel_id must be an integer, not {channel_id!r}")
    if not 0 <= int(channel_id) < MAX_CHANNELS:
        fail(call, f"channel_id={channel_id}: 0 to {MAX_CHANNELS - 1}")
    ring = _ring(call, replica_group, tr)
    p = ring.index(_me(tr))
    rank = ring[(p - iteration_id) % len(ring)]
    r = VirtualRegister(tr, caller_line())
    emit(TRACED, "register_move", (), (), {"dst": r.name, "imm": rank}, call)
    return r


# -- variable-length collectives -------------------------------------------------------------


def _metadata(call, meta, rows, n, tr):
    """The metadata tensor's row views ``[row, columns]`` getter, checked: uint32, HBM
    ``(rows, n)`` or SBUF ``(1, rows, n)``."""
    if not isinstance(meta, NkiTensor):
        fail(call, f"metadata_tensor must be a tensor, not {meta!r}")
    if meta.dtype != "uint32":
        fail(call, f"metadata_tensor {meta.name} is {meta.dtype}, not uint32")
    space = meta._decl.space
    want = [rows, n] if space == "hbm" else [1, rows, n]
    if space not in ("hbm", "sbuf"):
        fail(call, f"metadata_tensor {meta.name} is in {space.upper()}: HBM or SBUF")
    if list(meta.shape) != want:
        fail(
            call,
            f"metadata_tensor {meta.name} {list(meta.shape)} must be {want} ({rows} rows, one "
            f"column per rank of the group; in SBUF one partition)",
        )

    def row(k, cols):
        v = meta[k : k + 1, 0:cols] if space == "hbm" else meta[0:1, k : k + 1, 0:cols]
        return operand(call, "metadata_tensor", v, ("hbm", "sbuf"))

    return row


def _variable(call, kind, srcs, dsts, replica_group, meta, recv_counts_known, has_rdispls, tr):
    s, d, _ = _tensors(call, srcs, dsts, hbm_only=True, one=True)
    _same_dtype(call, srcs, dsts)
    ring = _ring(call, replica_group, tr)
    for what, v in (("recv_counts_known", recv_counts_known), ("has_rdispls", has_rdispls)):
        if not isinstance(v, (bool, np.bool_)):
            fail(call, f"{what} must be True or False, not {v!r}")
    n = len(ring)
    rows = 4 if has_rdispls else 3
    row = _metadata(call, meta, rows, n, tr)
    cols = 1 if kind == "all_gather_v" else n
    srcs_ops = [s[0], row(0, cols), row(1, cols)]
    args = {"kind": kind, "order": [_core(tr, r) for r in ring], "send_counts": 1}
    args["send_displs"] = 2
    if has_rdispls:
        args["recv_displs"] = len(srcs_ops)
        srcs_ops.append(row(3, n))
    dsts_ops = list(d)
    if not recv_counts_known:
        args["recv_counts"] = len(dsts_ops)
        dsts_ops.append(row(2, n))
    group = tuple(sorted(args["order"]))
    args["devices"] = _devices(tr, group)
    group_op(call, "dma", "collective", group, dsts_ops, srcs_ops, args)


def all_gather_v(
    srcs,
    dsts,
    replica_group,
    metadata_tensor,
    recv_counts_known=False,
    has_rdispls=False,
    priority=None,
    name=None,
):
    """Each rank's chunk ``src[send_displ : send_displ + send_count]`` (metadata rows 0 and
    1, first column) to every rank of the group, rank ``k``'s at slot ``k`` of each ``dst``;
    row 2 gets the counts received unless ``recv_counts_known``."""
    call = "ncc.all_gather_v"
    tr = current(call)
    _check_priority(call, priority, tr)
    if has_rdispls is True:
        fail(call, "has_rdispls=True is not supported (the reference's current limitation)")
    if tr.num_programs != 2:
        fail(
            call,
            "only LNC=2 is supported (the reference's current limitation): launch the kernel "
            "as kernel[2]",
        )
    ring = _ring(call, replica_group, tr)
    if len(ring) != 4:
        fail(
            call,
            f"replica_group {replica_group.groups}: each rank list has exactly 4 ranks (the "
            f"reference's current limitation)",
        )
    _variable(
        call,
        "all_gather_v",
        srcs,
        dsts,
        replica_group,
        metadata_tensor,
        recv_counts_known,
        has_rdispls,
        tr,
    )


def all_to_all_v(
    srcs,
    dsts,
    replica_group,
    metadata_tensor,
    recv_counts_known=False,
    has_rdispls=False,
    priority=None,
    name=None,
):
    """Rank ``s``'s chunk for rank ``r`` (``send_counts[r]`` elements from
    ``send_displs[r]``) lands in ``r``'s ``dst`` at slot ``s`` (or ``recv_displs[s]``)."""
    call = "ncc.all_to_all_v"
    tr = current(call)
    _check_priority(call, priority, tr)
    if has_rdispls is True and tr.core.name != "v4":
        fail(
            call,
            "has_rdispls=True is supported on NeuronSwitch instances only (Trainium3, "
            "NeuronCore-v4)",
        )
    _variable(
        call,
        "all_to_all_v",
        srcs,
        dsts,
        replica_group,
        metadata_tensor,
        recv_counts_known,
        has_rdispls,
        tr,
    )


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _trace.stand_in("nki.collectives", "ncc", name)


_trace.checked_module(globals(), "ncc")
