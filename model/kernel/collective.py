"""The golden of the instructions that several cores run together: ``core_barrier`` and the
collectives of ``nki.collectives`` (``all_reduce``, ``all_gather``, ``reduce_scatter``,
``all_to_all``, ``collective_permute``), on the cores of a logical core.

Each core's stream holds its side of the operation (op ``core_barrier`` or ``collective``);
``args["group"]`` names the cores taking part (sorted), ``args["turn"]`` counts the
operations of that group the core traced before it.  The golden run (:func:`ncrtl.model.kernel.golden.run`)
runs the sides together once every side is at the head of its stream with its waits met
(:func:`rendezvous`, :func:`execute`); the timing run moves each side's bytes on its core's DMA
engines (:func:`side_bytes`) once every side is ready.

Values: a reduction (``nl.add``, ``nl.maximum``, ``nl.minimum``) is computed over the ranks in
rank order in float32 for float tensors (integers in int64, exact), then converted once to
the destination's dtype (:func:`~ncrtl.model.kernel.values.convert`); gathers, scatters and
permutes move bits unchanged (docs/nki/multicore.md).
"""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.values import KernelError, convert, where

__all__ = ["GROUP_OPS", "REDUCE_OPS", "rendezvous", "members", "execute", "side_bytes"]

#: Operations several cores run together (sendrecv is the DMA golden's pair).
GROUP_OPS = ("sendrecv", "core_barrier", "collective")

#: The reductions a collective takes, by NKI name.
REDUCE_OPS = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum}


def rendezvous(ins):
    """The key that an operation's sides on the other cores share."""
    a = ins.args
    if ins.op == "sendrecv":
        return ("pipe", a["pipe_id"], a["turn"])
    return ("group", tuple(a["group"]), a["turn"])


def members(ins, core):
    """The other cores whose sides ``ins`` (on ``core``) runs with."""
    if ins.op == "sendrecv":
        return (1 - core,)
    return tuple(c for c in ins.args["group"] if c != core)


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


def side_bytes(ins):
    """Bytes one core's side of a group operation moves on its DMA engines: what it receives
    (every destination's bytes; a barrier none)."""
    if ins.op != "collective":
        return 0
    return sum(r.size * r.element.itemsize for r in ins.dsts)
