"""The golden of the instructions that several cores run together: ``core_barrier`` and the
collectives of ``nki.collectives`` (``all_reduce``, ``all_gather``, ``reduce_scatter``,
``all_to_all``, ``collective_permute``, the ring permutes ``collective_permute_implicit`` and
``collective_permute_implicit_reduce``, and the variable-length ``all_gather_v`` and
``all_to_all_v``), on the cores of a logical core or over N simulated ranks.

Each core's stream holds its side of the operation (op ``core_barrier`` or ``collective``);
``args["group"]`` names the cores taking part (sorted), ``args["turn"]`` counts the
operations of that group the core traced before it.  A core is named by its index in the
run's list of programs: with N ranks (``ncrtl run --ranks N``), core ``k`` of rank ``r`` is
``r * cores_per_rank + k``, so the sorted group is in rank order.  The golden run
(:func:`ncrtl.model.kernel.golden.run`) runs the sides together once every side is at the
head of its stream with its waits met (:func:`rendezvous`, :func:`execute`); the timing run
moves each side's bytes on its core's DMA engines (:func:`side_bytes`) once every side is
ready, and a collective between devices no sooner than the link between them carries it
(:func:`link_ns`).

Values: a reduction (``nl.add``, ``nl.maximum``, ``nl.minimum``) is computed over the ranks in
rank order in float32 for float tensors (integers in int64, exact), then converted once to
the destination's dtype (:func:`~ncrtl.model.kernel.values.convert`); gathers, scatters and
permutes move bits unchanged (docs/nki/multicore.md).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ncrtl.model.kernel.values import KernelError, convert, where

__all__ = [
    "GROUP_OPS",
    "REDUCE_OPS",
    "LINKS",
    "Link",
    "rendezvous",
    "members",
    "execute",
    "side_bytes",
    "link_ns",
    "rank_states",
    "rank_trip_counts",
]

#: Operations several cores run together (sendrecv is the DMA golden's pair).
GROUP_OPS = ("sendrecv", "core_barrier", "collective")

#: The reductions a collective takes, by NKI name.
REDUCE_OPS = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum}


@dataclass(frozen=True)
class Link:
    """The device-to-device link a collective between ranks crosses: ``gbps`` the bytes per
    ns a device receives, ``latency_ns`` each step of the collective's ring pays."""

    gbps: float
    latency_ns: float = 1000.0


#: Per core version, the NeuronLink of its devices (docs/nki/multicore.md, "Timing"): the
#: documented device-to-device bandwidth per device (Trn1.32xlarge's NeuronLink-v2 384 GiB/s,
#: Trainium2's NeuronLink-v3 1.28 TB/s, Trainium3's NeuronLink-v4 2.56 TB/s: AWS Neuron's
#: architecture pages); the latency per step is ncrtl's stated default (none is documented).
LINKS = {
    "v2": Link(384 * 1.073741824),
    "v3": Link(1280.0),
    "v4": Link(2560.0),
}


def rendezvous(ins):
    """The key that an operation's sides on the other cores share."""
    a = ins.args
    if ins.op == "sendrecv":
        return ("pipe", a["pipe_id"], a["turn"])
    return ("group", tuple(a["group"]), a["turn"])


def members(ins, core):
    """The other cores whose sides ``ins`` (on ``core``) runs with (a sendrecv's partner is
    the other core of the same logical core)."""
    if ins.op == "sendrecv":
        return (core ^ 1,)
    return tuple(c for c in ins.args["group"] if c != core)


def rank_states(programs, inputs, *, seed=0, uninitialized="error"):
    """The golden's :class:`~ncrtl.model.kernel.golden.CoreState` of each of ``programs``
    (the cores of N ranks, rank by rank: ``program.rank``), each rank a device of its own:
    its cores share one device memory holding ``inputs[rank]``."""
    from ncrtl.model.kernel.golden import core_states

    states, group = [], []
    for k, p in enumerate(programs):
        group.append(p)
        last = k + 1 == len(programs) or programs[k + 1].rank != p.rank
        if last:
            states += core_states(group, inputs[p.rank], seed=seed, uninitialized=uninitialized)
            group = []
    return states


def _values(st, ref, ins):
    v = st.read(ref, ins)
    if ref.element.packed != 1:
        raise KernelError(f"{where(ins)}a collective on the packed type {ref.view_dtype}")
    return v


def _reduce(op, arrays, dtype, ins):
    fn = REDUCE_OPS[op]
    first = arrays[0]
    if first.dtype.kind in "iub":
        acc = first.astype(np.int64)
        for a in arrays[1:]:
            acc = fn(acc, a.astype(np.int64))
    else:
        acc = first.astype(np.float32)
        for a in arrays[1:]:
            acc = fn(acc, a.astype(np.float32))
    return convert(acc, dtype)


def execute(states, sides):
    """Run one group operation: ``sides`` maps each core taking part to its instruction."""
    cores = sorted(sides)
    first = sides[cores[0]]
    for c in cores:
        i = sides[c]
        if i.op != first.op or i.args.get("kind") != first.args.get("kind"):
            raise KernelError(
                f"{where(i)}core {c} reaches {i.args.get('kind', i.op)} where core "
                f"{cores[0]} reaches {first.args.get('kind', first.op)} ({first.line}): the "
                f"cores' collectives go in one order"
            )
    if first.op == "core_barrier":
        return  # an ordering point only: the data is the memory's own
    kind = first.args["kind"]
    if kind in ("all_gather_v", "all_to_all_v"):
        _variable(kind, states, sides, cores)
        return
    if kind in ("permute_implicit", "permute_implicit_reduce"):
        _ring(kind, states, sides)
        return
    n = len(first.srcs)
    for t in range(n):
        srcs = {c: _values(states[c], sides[c].srcs[t], sides[c]) for c in cores}
        dsts = {c: sides[c].dsts[t] for c in cores}
        out = _one(kind, first, cores, srcs, dsts)
        for c, v in out.items():
            states[c].write(dsts[c], np.asarray(v).reshape(dsts[c].view_shape))


def _split(a, parts, dim, ins):
    if a.shape[dim] % parts:
        raise KernelError(
            f"{where(ins)}dimension {dim} of {list(a.shape)} does not split into {parts} ranks"
        )
    return np.split(a, parts, axis=dim)


def _one(kind, ins, cores, srcs, dsts):
    """The destination values of one (src, dst) pair of each core."""
    r = len(cores)
    a = ins.args
    if kind == "all_reduce":
        total = _reduce(a["op"], [srcs[c] for c in cores], dsts[cores[0]].view_dtype, ins)
        return {c: total for c in cores}
    if kind == "reduce_scatter":
        d0 = dsts[cores[0]]
        total = _reduce(a["op"], [srcs[c] for c in cores], d0.view_dtype, ins)
        pieces = _split(total, r, a["dim"], ins)
        return {c: pieces[k] for k, c in enumerate(cores)}
    if kind == "all_gather":
        whole = np.concatenate([srcs[c] for c in cores], axis=a["dim"])
        return {c: whole for c in cores}
    if kind == "all_to_all":
        pieces = {c: _split(srcs[c], r, a["dim"], ins) for c in cores}
        return {
            c: np.concatenate([pieces[s][k] for s in cores], axis=a["dim"])
            for k, c in enumerate(cores)
        }
    if kind == "collective_permute":
        return {t: srcs[s] for s, t in a["pairs"] if s in srcs and t in dsts}
    raise KernelError(f"{where(ins)}the golden has no collective {kind!r}")


def _ring(kind, states, sides):
    """``collective_permute_implicit`` (``_reduce``): per channel, each core's destination is
    its predecessor's source in the ring (``args["ring"]``, the replica group's order), or
    its predecessor's ``op(srcs0, srcs1)`` (float32, one rounding to the destination)."""
    ring = sides[min(sides)].args["ring"]
    pred = {c: ring[(k - 1) % len(ring)] for k, c in enumerate(ring)}
    per = 2 if kind == "permute_implicit_reduce" else 1
    for ch in range(len(sides[ring[0]].dsts)):
        sent = {}
        for c in ring:
            i = sides[c]
            if per == 1:
                sent[c] = _values(states[c], i.srcs[ch], i)
            else:
                a = _values(states[c], i.srcs[2 * ch], i)
                b = _values(states[c], i.srcs[2 * ch + 1], i)
                sent[c] = (a, b)
        for c in ring:
            i = sides[c]
            d = i.dsts[ch]
            v = sent[pred[c]]
            if per == 2:
                v = _reduce(i.args["op"], list(v), d.view_dtype, i)
            states[c].write(d, np.asarray(v).reshape(d.view_shape))


def _flat(st, ref, ins, lo, n, what):
    """Elements ``lo .. lo + n`` of the view ``ref`` (in its element order) as bytes
    positions in device memory, checked to lie in it."""
    if lo < 0 or n < 0 or lo + n > ref.size:
        raise KernelError(
            f"{where(ins)}{what}: elements {lo} to {lo + n} of {ref.tensor} "
            f"({ref.size} elements): outside the tensor (the metadata's counts and "
            f"displacements are checked when the collective runs)"
        )
    _, byte = st._positions(ref)
    isz = ref.element.itemsize
    return byte.reshape(-1, isz)[lo : lo + n].reshape(-1)


def _flat_read(st, ref, ins, lo, n, what):
    pos = _flat(st, ref, ins, lo, n, what)
    if not st.hbm_written[pos].all():
        msg = f"{where(ins)}{what} reads device tensor {ref.tensor} where nothing wrote"
        if st.uninitialized == "error":
            raise KernelError(msg)
        from ncrtl.model.kernel.golden import UninitializedRead

        warnings.warn(msg, UninitializedRead, stacklevel=2)
    return st.hbm[pos].copy()


def _flat_write(st, ref, ins, lo, data, what):
    isz = ref.element.itemsize
    pos = _flat(st, ref, ins, lo, data.size // isz, what)
    st.hbm[pos] = data
    st.hbm_written[pos] = True


def _meta(st, ins, key):
    ref = ins.srcs[ins.args[key]]
    return st.read(ref, ins).astype(np.int64).reshape(-1)


def _variable(kind, states, sides, cores):
    """``all_gather_v`` / ``all_to_all_v``: the chunks the metadata tensors name, read when
    the collective runs (docs/nki/multicore.md)."""
    group = sides[cores[0]].args["order"]  # the rank list: metadata column k is rank group[k]
    n = len(group)
    counts, displs = {}, {}
    for c in group:
        i = sides[c]
        counts[c] = _meta(states[c], i, "send_counts")
        displs[c] = _meta(states[c], i, "send_displs")
    recv = {c: np.zeros(n, np.int64) for c in group}
    for k, s in enumerate(group):
        si = sides[s]
        for j, r in enumerate(group):
            ri = sides[r]
            if kind == "all_gather_v":
                cnt, disp = int(counts[s][0]), int(displs[s][0])
            else:
                cnt, disp = int(counts[s][j]), int(displs[s][j])
            what = f"the chunk rank {k} sends rank {j}"
            data = _flat_read(states[s], si.srcs[0], si, disp, cnt, what)
            dst = ri.dsts[0]
            slot = dst.size // n
            if "recv_displs" in ri.args:
                at = int(_meta(states[r], ri, "recv_displs")[k])
            else:
                at = slot * k
                if cnt > slot:
                    raise KernelError(
                        f"{where(ri)}{what}: {cnt} elements for a slot of {slot} "
                        f"({dst.tensor}'s {dst.size} elements over {n} ranks)"
                    )
            _flat_write(states[r], dst, ri, at, data, what)
            recv[r][k] = cnt
    for r in group:
        i = sides[r]
        if "recv_counts" in i.args:
            ref = i.dsts[i.args["recv_counts"]]
            states[r].write(ref, recv[r].astype(ref.element.storage).reshape(ref.view_shape))


def side_bytes(ins):
    """Bytes one core's side of a group operation moves on its DMA engines: what it receives
    (every destination's bytes but a metadata row; a barrier none)."""
    if ins.op != "collective":
        return 0
    data = ins.dsts[:1] if ins.args["kind"].endswith("_v") else ins.dsts
    return sum(r.size * r.element.itemsize for r in data)


def link_ns(ins, link):
    """The time one side's collective needs on the links between devices (``link``: a
    :class:`Link`), from the moment every side is ready: ``steps * latency + bytes / gbps``,
    the steps and the bytes it receives of a ring over the group's ``n`` ranks
    (docs/nki/multicore.md, "Timing"); 0 where the group is one device's cores."""
    a = ins.args
    n = a.get("devices", 1)
    if ins.op != "collective" or n < 2 or link is None:
        return 0.0
    kind = a["kind"]
    dst = side_bytes(ins)
    if kind == "all_reduce":
        steps, nbytes = 2 * (n - 1), 2 * (n - 1) * dst / n
    elif kind == "reduce_scatter":
        steps, nbytes = n - 1, (n - 1) * dst
    elif kind in ("all_gather", "all_to_all", "all_gather_v", "all_to_all_v"):
        steps, nbytes = n - 1, (n - 1) * dst / n
    elif kind == "collective_permute":
        steps, nbytes = 1, dst if a.get("received") else 0
    else:  # the ring permutes: one step from the predecessor
        steps, nbytes = 1, dst
    return steps * link.latency_ns + nbytes / link.gbps


def rank_trip_counts(programs, inputs):
    """:func:`ncrtl.model.kernel.loops.trip_counts` over N ranks: the golden run of the
    instructions the registers depend on, each rank a device of its own holding
    ``inputs[rank]``."""
    from ncrtl.model.kernel import loops

    states = rank_states(programs, inputs, uninitialized="warn")
    only = loops._slice(programs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return loops.run(programs, states, only=only)
