"""Reads of memory nothing wrote, as the hardware has them: per-element taint in the golden.

The hardware reads whatever an unwritten SBUF / PSUM / device-memory byte holds and computes on
it; kernels do so on purpose where they discard the result (nki-library's
``find_nonzero_indices`` transposes a tile whose columns it wrote only in part, and never looks
at the rows of the result that came from the unwritten columns).  So a read of unwritten bytes
is no error by itself: the results of the instruction that *depend* on them are marked
unwritten too (tainted) in the destination's written-mask, element by element.  Tainted data
in the kernel's outputs (the device tensors it returns) is a warning when the run ends
(:func:`check_outputs`: the output, how many elements and the first, and the instruction that
first read the unwritten memory on that path, with its kernel line), as the hardware returns
it; an error (a warning with ``uninitialized="warn"``) comes where tainted data steers the run:

* a register (``register_load``), a run-time offset or index (an indirect DMA's index tensor or
  scalar offset, ``local_gather`` / ``nc_n_gather`` indices), a predicate (``select_reduce``,
  ``tensor_copy_predicated``), the random generators' seed or state: the instruction's read
  itself (``CoreState.read(..., matters=...)``);
* a collective's source (the group operations move data between cores: refused, conservatively).

**How the golden finds an instruction's dependencies without restating every operation.**  An
instruction runs first as always.  Where it reads nothing unwritten, that is all (the fast
paths of ``CoreState.read`` stay: no extra work).  Its first read of an unwritten element
raises :class:`Tainted` before the operation has changed anything (the operations read their
operands before they write; the random operations draw after they read), and the instruction
is run again, from a checkpoint of what it may change (its destinations' bytes, their written
and origin masks, PSUM, the engines' accumulator registers, the registers and generators), three
or four times over the same state:

* *probe* runs, in which every unwritten element an operand read returns holds a fill:
  every byte ``0xFF`` (a NaN in every float format, -1 / all ones as an integer; in this run
  the float32 comparison and logical operators and ``abs_max`` / ``abs_min`` give NaN where an
  operand is NaN, so that the NaN goes through them as through arithmetic), the memory's own
  bytes complemented (every moved byte differs), and, only where a tainted element read is an
  integer, every byte ``0x7F`` (a large positive integer);
* then the *real* run, whose unwritten elements hold the memory's own bytes (what the hardware
  would compute on), which stays.

A destination element (or accumulator lane) whose bytes differ between the real run and any
probe run depends on the unwritten data: it is marked unwritten, with the *origin* of the taint
(the first instruction that read never-written memory among those the instruction's tainted
inputs came from; the instruction itself where it read never-written bytes).  Every other
element is as the real run wrote it.  A probe run that fails (a value check the probe's values
break) taints every destination element of the instruction.

This is exact for float arithmetic (NaN reaches every float32 result that depends on a NaN
operand: the element-wise operations, a matmul's ``out[m, n]`` from ``stationary[:, m]`` and
``moving[:, n]``, reductions, scans), for every move of bytes (copies, transposes, DMA,
gathers, selections: the moved bytes differ), and for integer and bit arithmetic whose result
changes with its operand (``x & 0`` is rightly independent).  It can miss a dependency where
the memory's bytes and every fill give one result: an integer equality with a value none of
them is (``x == 5`` of int32), a search for a value (``nc_find_index8``,
``nc_match_replace8``) or a range test (``range_select``'s bounds) that comes out alike under
each.  Tainted data in a predicate, an index or a register is refused, never
probed.

A PSUM matmul accumulating (``accumulate=True``) onto tainted PSUM elements, and an instruction
of an engine whose accumulator registers are tainted, take the same path (the tainted PSUM
elements and lanes hold the fill in the probe runs).  Never-written PSUM under an accumulating
matmul is the PSUM's own zeros, as before (no taint).
"""

from __future__ import annotations

import copy
import io
import math
import warnings
from contextlib import contextmanager, redirect_stdout

import numpy as np

from ncrtl.model.kernel import values
from ncrtl.model.kernel.values import KernelError, where

__all__ = [
    "Tainted",
    "FILLS",
    "REAL",
    "MATTERS",
    "unwritten_read",
    "origins",
    "raw",
    "need",
    "forget",
    "precheck",
    "slow",
    "sendrecv_masks",
    "group_check",
    "check_outputs",
    "share",
]

#: The probe runs' fills, in order: every byte ``0xFF``; the complement of the memory's own
#: bytes; every byte ``0x7F`` (run only where a tainted element read is an integer).
INVERT = "invert"
FILLS = (0xFF, INVERT, 0x7F)
#: The mode of the real run of an instruction that read unwritten memory.
REAL = "real"
#: What a read that must not see tainted data feeds (``CoreState.read(matters=...)``).
MATTERS = {
    "register": "as a register value",
    "offset": "as a run-time offset",
    "index": "as an index",
    "predicate": "as a predicate",
    "seed": "as a random generator's seed or state",
    "collective": "as a collective's source",
}
#: Operations that may use their engine's accumulator registers.
ACC_OPS = frozenset(
    (
        "accumulator_read",
        "activation",
        "activate2",
        "exponential",
        "tensor_scalar_reduce",
        "tensor_scalar_cumulative",
        "select_reduce",
        "range_select",
    )
)
#: Tensor Engine operations that may add into their PSUM destination.
PSUM_ACC_OPS = frozenset(("matmul", "matmul_mx", "matmul_sparse"))

#: State attributes a checkpoint leaves alone (the memories are saved where the instruction
#: writes; the taint bookkeeping is this module's).
_BIG = frozenset(
    (
        "program",
        "sbuf",
        "sbuf_written",
        "psum",
        "psum_written",
        "hbm",
        "hbm_written",
        "uninitialized",
        "taint",
        "acc_taint",
        "origin_sbuf",
        "origin_psum",
        "_probe",
        "_ids",
        "_new",
        "_said",
        "_ints",
    )
)


class Tainted(KernelError):
    """An instruction's operand read memory nothing wrote (or data that depends on it):
    :func:`ncrtl.model.kernel.golden.execute` catches it and runs the instruction again with
    the taint followed (:func:`slow`); a read outside an instruction's run is the error it
    says."""


class Table:
    """The origins of taint of one run (shared by the cores and ranks of a run): text ``i - 1``
    describes origin ``i`` (the first read of never-written memory on a path)."""

    def __init__(self):
        self.texts = []
        self.hbm = {}  # id(hbm_written) -> origin per device-memory byte

    def add(self, text):
        self.texts.append(text)
        return len(self.texts)

    def text(self, oid):
        if 0 < oid <= len(self.texts):
            return self.texts[oid - 1]
        return "an earlier read of memory nothing wrote"


def share(states):
    """One :class:`Table` for ``states`` (the cores of a run)."""
    t = next((s.taint for s in states if getattr(s, "taint", None) is not None), None) or Table()
    for s in states:
        s.taint = t
    return t


def _table(st):
    t = getattr(st, "taint", None)
    if t is None:
        t = st.taint = Table()
    return t


def _origin(st, space, create=False):
    """The origin id of each byte of ``space`` (int32, 0 = none), None until a taint is made."""
    if space == "hbm":
        t = _table(st) if create else getattr(st, "taint", None)
        if t is None:
            return None
        arr = t.hbm.get(id(st.hbm_written))
        if arr is None and create:
            arr = t.hbm[id(st.hbm_written)] = np.zeros(st.hbm_written.shape, np.int32)
        return arr
    name = f"origin_{space}"
    arr = st.__dict__.get(name)
    if arr is None and create:
        shape = st.sbuf_written.shape if space == "sbuf" else st.psum_written.shape
        arr = np.zeros(shape, np.int32)
        setattr(st, name, arr)
    return arr


def origins(st, space):
    """The origin id of each byte of memory ``space`` (int32, 0 = none), or None: no taint
    made there yet."""
    return _origin(st, space)


def at(arr, layout):
    """``golden._at`` for an array of any item size (the origins, int32): the bytes of a
    layout as a numpy view of ``arr``, one item per byte of memory."""
    p0, byte, shape, steps = layout
    isz = arr.itemsize
    inner = tuple(s * isz for s in steps)
    if p0 is None:
        return np.ndarray(shape, arr.dtype, arr, byte * isz, inner)
    return np.ndarray(
        shape, arr.dtype, arr, p0 * arr.strides[0] + byte * isz, (arr.strides[0],) + inner
    )


def _sel(part, byte):
    return byte if part is None else (part, byte)


def _element_origins(w, org, bad=None):
    """Per element the origin of its unwritten bytes (0: never written); ``w`` the written mask
    and ``org`` the origins (or None) of its bytes, ``[..., itemsize]``; ``bad``: the elements
    with unwritten bytes, where known."""
    if org is None:
        return np.zeros(w.shape[:-1], np.int32)
    if bad is None:
        bad = _bad(w)
    # a taint marks every byte of an element alike: its first byte's origin, but where that
    # byte is written and another not (an element written in part)
    out = np.where(bad, org[..., 0], 0)
    part = bad & w[..., 0]
    if part.any():
        out[part] = np.where(w[part], 0, org[part]).max(axis=-1)
    return out


# -- where a view's bytes are: a strided numpy view of each memory (a view that is rows of its
# tensor, golden._layout) or the index of every byte ---------------------------------------


def _loc(st, ref):
    from ncrtl.model.kernel.golden import _layout

    lay = _layout(ref)
    if lay is not None:
        return True, lay
    return False, _sel(*st._positions(ref))


def _written(st, space):
    return (
        st.sbuf_written
        if space == "sbuf"
        else st.psum_written
        if space == "psum"
        else st.hbm_written
    )


def _get(st, ref, loc, which):
    """The view's bytes (``view_shape + (itemsize,)``) of the memory (``"mem"``), its written
    mask (``"written"``) or its origins (``"origin"``; None before any taint): a numpy view
    where ``loc`` is a layout (not for PSUM's memory), else a copy."""
    from ncrtl.model.kernel.golden import _at

    is_lay, where_ = loc
    if which == "mem":
        if ref.space == "psum":
            if is_lay:
                mem, origin = st._psum_banks(where_)
                return _at(mem, where_, origin)
            return st.psum_bytes()[where_]
        arr = st.sbuf if ref.space == "sbuf" else st.hbm
    elif which == "written":
        arr = _written(st, ref.space)
    else:
        arr = _origin(st, ref.space)
        if arr is None:
            return None
    return at(arr, where_) if is_lay else arr[where_]


def _put(st, ref, loc, which, value, mask=None):
    """Set the view's bytes of ``which`` (not PSUM's memory) to ``value``, or only its elements
    where ``mask`` (``view_shape``)."""
    is_lay, where_ = loc
    if which == "mem":
        arr = st.sbuf if ref.space == "sbuf" else st.hbm
    elif which == "written":
        arr = _written(st, ref.space)
    else:
        arr = _origin(st, ref.space, create=True)
    if is_lay:
        v = at(arr, where_)
        if mask is None:
            v[...] = value
        else:
            v[mask] = value
        return
    if mask is not None:
        where_ = tuple(w[mask] for w in where_) if isinstance(where_, tuple) else where_[mask]
    arr[where_] = value


def _text(ref, ins, at):
    return (
        f"{where(ins)}reads {ref.space.upper()} tensor {ref.tensor} at view index "
        f"{[int(i) for i in at]}, which nothing wrote"
    )


def _record(st, ref, ins, bad, org):
    """In the real run: the origins the instruction's tainted reads carry (a new one for the
    first read of never-written bytes)."""
    if getattr(st, "_probe", None) != REAL:
        return
    ids = st.__dict__.setdefault("_ids", set())
    old = np.unique(org[bad & (org > 0)])
    ids.update(int(i) for i in old)
    fresh = bad & (org == 0)
    if fresh.any() and getattr(st, "_new", None) is None:
        st._new = _table(st).add(_text(ref, ins, np.argwhere(fresh)[0]))


def _strict(st, ref, ins, bad, org, matters):
    """A tainted read where taint must not go: the error, or the warning (once)."""
    at = np.argwhere(bad)[0]
    where_ = [int(i) for i in at]
    o = int(org[tuple(at)])
    what = MATTERS.get(matters, f"as {matters}")
    head = (
        f"{where(ins)}reads {ref.space.upper()} tensor {ref.tensor} at view index {where_} {what}"
    )
    if o == 0:
        msg = f"{head}, which nothing wrote"
    else:
        msg = f"{head}, which depends on memory nothing wrote ({_table(st).text(o)})"
    if st.uninitialized == "error":
        raise KernelError(msg)
    if getattr(st, "_probe", None) not in (None, REAL):
        return  # a probe run: the real run says it
    said = st.__dict__.get("_said")
    if said is None:
        said = st._said = set()
    if msg in said:
        return
    said.add(msg)
    from ncrtl.model.kernel.golden import UninitializedRead

    warnings.warn(msg, UninitializedRead, stacklevel=4)


def _fill(st, ref, data, bad):
    """``data`` (uint8 ``[..., itemsize]``, a copy) with the elements ``bad`` as the probe run
    has them; notes an integer element among them (the third probe's cue)."""
    fill = st._probe
    isz = data.shape[-1]
    if isz in (1, 2, 4, 8):  # one word per element
        flat = data.reshape(-1, isz).view(f"u{isz}").reshape(-1)
        if fill == INVERT:
            np.copyto(flat, np.invert(flat), where=bad.reshape(-1))
        else:
            word = int.from_bytes(bytes([fill] * isz), "little")
            np.copyto(flat, np.array(word, flat.dtype), where=bad.reshape(-1))
    else:
        flat = data.reshape(-1, isz)
        where_ = bad.reshape(-1, 1)
        if fill == INVERT:
            np.copyto(flat, np.invert(flat), where=where_)
        else:
            np.copyto(flat, np.uint8(fill), where=where_)
    if not ref.element.is_float:
        st._ints = True
    return data


def _bad(w):
    """Per element whether any of its bytes is unwritten (``w``: ``[..., itemsize]``)."""
    isz = w.shape[-1]
    wc = np.ascontiguousarray(w)
    if isz in (1, 2, 4, 8):
        full = int.from_bytes(b"\x01" * isz, "little")
        return wc.view(f"u{isz}").reshape(w.shape[:-1]) != full
    return ~wc.all(axis=-1)


def unwritten_read(st, ref, ins, data, w, org, matters=None):
    """``CoreState.read``'s slow path for a view some of whose bytes are unwritten: ``data``,
    ``w`` and ``org`` its bytes, their written mask and their origins (or None), each
    ``view_shape + (itemsize,)``; the values as the mode has them."""
    bad = _bad(w)
    probe = getattr(st, "_probe", None)
    if matters is not None or probe in (None, REAL):
        org = _element_origins(w, org, bad)
    data = np.array(data)
    if matters is not None:
        _strict(st, ref, ins, bad, org, matters)
    elif probe is None:
        raise Tainted(_text(ref, ins, np.argwhere(bad)[0]))
    else:
        _record(st, ref, ins, bad, org)
        if probe != REAL:
            _fill(st, ref, data, bad)
    return np.ascontiguousarray(data).view(ref.element.storage).reshape(ref.view_shape)


def raw(st, ref):
    """``(values, written)`` of a view, each element's written-or-not, the values as the mode
    has them (a probe's fill in every unwritten element); no rule applied (:func:`need`)."""
    mem, written = st._memory(ref.space)
    part, byte = st._positions(ref)
    sel = _sel(part, byte)
    data = np.array(mem[sel])
    w = written[sel]
    ok = w.all(axis=-1)
    probe = getattr(st, "_probe", None)
    if probe not in (None, REAL) and not ok.all():
        _fill(st, ref, data, ~ok)
    data = np.ascontiguousarray(data).view(ref.element.storage).reshape(ref.view_shape)
    return data, ok.reshape(ref.view_shape)


def need(st, ins, ref, written, used):
    """The elements ``used`` of a view (read by :func:`raw`) that are unwritten: outside a
    probe a :class:`Tainted` read, in the real run their origins recorded."""
    missing = np.asarray(used) & ~written
    if not missing.any():
        return
    if getattr(st, "_probe", None) is None:
        raise Tainted(_text(ref, ins, np.argwhere(missing)[0]))
    loc = _loc(st, ref)
    org = _get(st, ref, loc, "origin")
    _record(st, ref, ins, missing, _element_origins(_get(st, ref, loc, "written"), org))


def forget(st, ref, mask):
    """Mark the view's elements where ``mask`` as written by nothing (never written: no
    origin)."""
    mask = np.asarray(mask, bool).reshape(-1)
    if not mask.any():
        return
    isz = ref.element.itemsize
    part, byte = st._positions(ref)
    byte = byte.reshape(-1, isz)[mask]
    written = _written(st, ref.space)
    org = _origin(st, ref.space)
    if part is None:
        written[byte] = False
        if org is not None:
            org[byte] = 0
        return
    part = part.reshape(-1, isz)[mask]
    written[part, byte] = False
    if org is not None:
        org[part, byte] = 0


# -- inputs that are not reads: accumulator registers and PSUM accumulation -------------------


def _acc_tainted(st, ins):
    if ins.op not in ACC_OPS:
        return None
    t = st.__dict__.get("acc_taint", {}).get(ins.engine)
    return t if t is not None and t.any() else None


def _psum_acc_taint(st, ins):
    """``(sel, tainted elements, their origins)`` of an accumulating matmul's PSUM destination
    where it holds tainted elements, else None."""
    if ins.op not in PSUM_ACC_OPS or not ins.args.get("accumulate") or not ins.dsts:
        return None
    org = _origin(st, "psum")
    if org is None:
        return None
    (dst,) = ins.dsts[:1]
    if dst.space != "psum":
        return None
    try:
        part, byte = st._positions(dst)
    except KernelError:
        return None
    sel = (part, byte)
    w = st.psum_written[sel]
    if w.all():
        return None
    o = np.where(w, 0, org[sel]).max(axis=-1)
    bad = o > 0
    return (sel, bad, o) if bad.any() else None


def precheck(st, ins):
    """Whether ``ins`` must take the taint path although its reads may all be written: its
    engine's accumulator registers or its PSUM accumulation hold tainted values (only after a
    taint was made: ``st.taint``)."""
    return _acc_tainted(st, ins) is not None or _psum_acc_taint(st, ins) is not None


# -- the taint path ----------------------------------------------------------------------------


class _Checkpoint:
    """What an instruction may change, to run it again from the same state: its destinations'
    bytes, written masks and origins (``locs``: where each destination's bytes are), PSUM's
    state where it writes PSUM, and the state's small parts (registers, generators,
    accumulators)."""

    def __init__(self, st, ins, locs):
        self.small = {k: copy.deepcopy(v) for k, v in vars(st).items() if k not in _BIG}
        self.regions = []
        self.psum = None
        for ref, loc in zip(ins.dsts, locs):
            parts = ("written", "origin") if ref.space == "psum" else ("mem", "written", "origin")
            saved = {w: _get(st, ref, loc, w) for w in parts}
            self.regions.append(
                (ref, loc, {w: None if v is None else v.copy() for w, v in saved.items()})
            )
            if ref.space == "psum" and self.psum is None:
                self.psum = {
                    k: (v.copy() if k == "mem" else copy.deepcopy(v))
                    for k, v in vars(st.psum).items()
                }

    def restore(self, st):
        for k in [k for k in vars(st) if k not in _BIG and k not in self.small]:
            delattr(st, k)
        for k, v in self.small.items():
            setattr(st, k, copy.deepcopy(v))
        if self.psum is not None:
            for k, v in self.psum.items():
                if k == "mem":
                    st.psum.mem[...] = v
                else:
                    setattr(st.psum, k, copy.deepcopy(v))
        for ref, loc, saved in reversed(self.regions):
            for which, v in saved.items():
                if v is None:  # origins made since: none here
                    if _origin(st, ref.space) is not None:
                        _put(st, ref, loc, which, 0)
                else:
                    _put(st, ref, loc, which, v)


def _capture(st, ins, locs):
    """The bytes each destination element holds (``[elements, itemsize]`` per destination) and
    the engine's accumulator registers' bytes."""
    out = [
        np.array(_get(st, ref, loc, "mem")).reshape(ref.size, -1)
        for ref, loc in zip(ins.dsts, locs)
    ]
    acc = st.__dict__.get("accumulators", {}).get(ins.engine)
    return out, None if acc is None else acc.copy().view(np.uint32)


def _nan_through():
    """The float32 comparison / logical operators and abs_max / abs_min giving NaN where an
    operand is NaN (the ``0xFF`` probe run's)."""
    names = (
        "equal",
        "not_equal",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
        "logical_and",
        "logical_or",
        "logical_xor",
        "abs_max",
        "abs_min",
    )

    def through(fn):
        def op(a, b):
            a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
            with np.errstate(all="ignore"):
                r = np.asarray(fn(a, b), np.float32)
                return np.where(np.isnan(a32) | np.isnan(b32), np.float32(np.nan), r)

        return op

    @contextmanager
    def patched():
        saved = {k: values.ALU_OPS[k] for k in names if k in values.ALU_OPS}
        try:
            for k, fn in saved.items():
                values.ALU_OPS[k] = through(fn)
            yield
        finally:
            values.ALU_OPS.update(saved)

    return patched()


def _fill_inputs(st, ins, fill, psum_taint):
    """Before a probe run: the tainted accumulator lanes and accumulating PSUM elements as the
    probe has them."""
    t = _acc_tainted(st, ins)
    if t is not None:
        acc = st.__dict__.get("accumulators", {}).get(ins.engine)
        if acc is not None:
            lanes = t[: acc.size] > 0
            bits = acc.view(np.uint32)
            if fill == INVERT:
                bits[lanes] = ~bits[lanes]
            else:
                bits[lanes] = np.uint32(int.from_bytes(bytes([fill] * 4), "little"))
    if psum_taint is not None:
        sel, bad, _ = psum_taint
        b = st.psum_bytes()
        data = b[sel]
        st._probe = fill
        try:
            _fill(st, ins.dsts[0], data, bad)
        finally:
            st._probe = None
        b[sel] = data
        st._store_psum(b)


def slow(st, fn, ins):
    """Run ``fn`` (``ins``'s operation) with the taint followed: the probe runs, then the real
    run, then the destinations' elements that depend on unwritten data marked unwritten."""
    psum_taint = _psum_acc_taint(st, ins)
    acc_t = _acc_tainted(st, ins)
    try:
        locs = [_loc(st, ref) for ref in ins.dsts]
        ck = _Checkpoint(st, ins, locs)
    except KernelError:
        ck = None
    if ck is None:  # a destination the operation itself refuses: its own message
        st._probe = REAL
        try:
            fn(st, ins)
        finally:
            st._probe = None
        raise KernelError(f"{where(ins)}cannot follow its reads of unwritten memory")
    probes = []
    st._ints = False
    for fill in FILLS:
        if fill == 0x7F and not st.__dict__.pop("_ints", False):
            break  # no integer among the tainted elements: NaN and the complement suffice
        ck.restore(st)
        _fill_inputs(st, ins, fill, psum_taint)
        st._probe = fill
        try:
            with redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if fill == 0xFF:
                    with _nan_through():
                        fn(st, ins)
                else:
                    fn(st, ins)
            probes.append(_capture(st, ins, locs))
        except (KernelError, ValueError, IndexError, ArithmeticError):
            probes.append(None)
        finally:
            st._probe = None
        if probes[-1] is None:
            break  # every destination element is taken as tainted
    ck.restore(st)
    st._probe, st._ids, st._new = REAL, set(), None
    try:
        fn(st, ins)
        real = _capture(st, ins, locs)
        ids = set(st._ids)
        new = st._new
    finally:
        st._probe, st._ids, st._new = None, None, None
    if acc_t is not None:
        ids.update(int(i) for i in np.unique(acc_t[acc_t > 0]))
    if psum_taint is not None:
        ids.update(int(i) for i in np.unique(psum_taint[2][psum_taint[1]]))
    if new is not None:
        ids.add(new)
    oid = min(ids) if ids else _table(st).add(f"{where(ins)}reads memory nothing wrote")
    _mark(st, ins, locs, real, probes, oid)


def _mark(st, ins, locs, real, probes, oid):
    outs, acc = real
    for k, (ref, loc) in enumerate(zip(ins.dsts, locs)):
        diff = np.zeros(ref.size, bool)
        for p in probes:
            if p is None:
                diff[:] = True
                break
            diff |= (p[0][k] != outs[k]).any(axis=1)
        if diff.any():
            mask = diff.reshape(ref.view_shape)
            _put(st, ref, loc, "written", False, mask)
            _put(st, ref, loc, "origin", oid, mask)
    if acc is None:
        return
    lanes = np.zeros(acc.size, bool)
    for p in probes:
        if p is None or p[1] is None:
            lanes[:] = True
            break
        lanes |= p[1] != acc
    table = st.__dict__.setdefault("acc_taint", {})
    t = table.get(ins.engine)
    if t is None:
        if not lanes.any():
            return
        t = table[ins.engine] = np.zeros(acc.size, np.int32)
    t[:] = np.where(lanes, oid, 0)


# -- several cores ------------------------------------------------------------------------------


def sendrecv_masks(states, pair, tiles):
    """After a sendrecv pair: each receiver's destination tile gets the written mask (and
    origins) of the tile the other core sent, as the bytes went (``tiles[r] = (src, dst)``, each a
    :class:`ncrtl.model.dma.sendrecv.Tile`); never-written bytes sent are tainted from the
    sendrecv that read them."""
    got = {}
    for r in (0, 1):
        s = 1 - r  # a pair: each core receives what the other sends
        src = tiles[s][0]
        dst = tiles[r][1]
        ps = slice(src.partition, src.partition + src.partitions)
        bs = slice(src.byte, src.byte + src.nbytes)
        w = states[s].sbuf_written[ps, bs].copy()
        org = _origin(states[s], "sbuf")
        o = np.zeros(w.shape, np.int32) if org is None else org[ps, bs].copy()
        got[r] = (dst, w, o, s, src)
    for r, (dst, w, o, s, src) in got.items():
        pd = slice(dst.partition, dst.partition + dst.partitions)
        bd = slice(dst.byte, dst.byte + dst.nbytes)
        if states[r].sbuf_written[pd, bd].shape != w.shape:
            states[r].sbuf_written[pd, bd] = True
            continue
        states[r].sbuf_written[pd, bd] = w
        if w.all():
            org = _origin(states[r], "sbuf")
            if org is not None:
                org[pd, bd] = 0
            continue
        fresh = ~w & (o == 0)
        if fresh.any():
            p, b = np.argwhere(fresh)[0]
            ref = pair[s].srcs[0]
            at = [int(p), int(b) // src.esize]
            o = np.where(fresh, _table(states[s]).add(_text(ref, pair[s], at)), o)
        org = _origin(states[r], "sbuf", create=True)
        org[pd, bd] = np.where(w, 0, o)


def group_check(states, sides):
    """A group operation's sources must be written (taint is not followed across a collective:
    refused, or warned)."""
    for c, ins in sides.items():
        for ref in ins.srcs:
            states[c].read(ref, ins, matters="collective")


# -- the outputs ----------------------------------------------------------------------------------


def check_outputs(states):
    """The run's end: a device tensor the kernel returns that holds tainted elements is a
    warning line: its name, how many elements and the first, and the instruction that first
    read the unwritten memory on that path.  The tainted elements then count as written (with
    what the golden computed from the memory's bytes)."""
    seen = set()
    for st in states:
        org = _origin(st, "hbm")
        if org is None:
            continue
        for k, name in enumerate(st.program.outputs):
            key = (id(st.hbm_written), name)
            if key in seen:
                continue
            seen.add(key)
            t = st.program.tensors[name]
            w = st.hbm_written[t.base : t.base + t.nbytes]
            if w.all():
                continue
            o = np.where(w, 0, org[t.base : t.base + t.nbytes])
            n = math.prod(t.shape) or 1
            per = o.reshape(n, -1).max(axis=1)
            if not (per > 0).any():
                continue
            i = int(np.argmax(per > 0))
            first = [int(x) for x in np.unravel_index(i, tuple(t.shape))] if t.shape else []
            line = f", {t.line}" if getattr(t, "line", None) else ""
            count = int((per > 0).sum())
            msg = (
                f"{_table(st).text(int(per[i]))}; the kernel's output {k} ({name} "
                f"{list(t.shape)}{line}) depends on it at {count:,} of its {n:,} elements, the "
                f"first at index {first}"
            )
            from ncrtl.model.kernel.golden import UninitializedRead

            # a warning, as for an output's elements nothing wrote: a kernel may leave garbage
            # in an output's padding on purpose (nki-library's MoE keeps a sink row for dropped
            # tokens), and the hardware returns it; what steers the run is refused instead
            warnings.warn(msg, UninitializedRead, stacklevel=3)
            # the elements hold what the golden computed from the memory's bytes (no "unwritten
            # output" warning too)
            w[o > 0] = True
