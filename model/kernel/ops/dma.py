"""The golden of the DMA engines' instructions: ``dma_copy`` (bytes moved unchanged, or a
dtype conversion through float32, or the SBUF read-add-write) and ``dma_transpose``, on the DMA
block's golden (:func:`ncrtl.model.dma.engine.dma_copy`, :func:`~ncrtl.model.dma.engine.dma_transpose`,
the access-pattern and partition rules of :mod:`ncrtl.model.dma.access`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ncrtl.model.dma import engine as dma_golden
from ncrtl.model.dma.access import AccessPattern
from ncrtl.model.dma.engine import AddDtype, add_elements
from ncrtl.model.kernel.stream import Ref
from ncrtl.model.kernel.values import KernelError, convert
from ncrtl.model.kernel.values import where as _where


def _dma_copy(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    vals = st.read(src, ins)
    if src.view_dtype != dst.view_dtype:
        # A DMA with a dtype conversion: src -> float32 -> dst (functional, docs/kernels.md).
        if not (src.element.is_float or src.element.fmt is None) or dst.element.packed != 1:
            raise KernelError(
                f"{_where(ins)}copies {src.view_dtype} into {dst.view_dtype}: only unpacked "
                f"types convert"
            )
        st.write(dst, convert(vals.astype(np.float32), dst.view_dtype))
        return
    if ins.args.get("rmw") == "add":
        kinds = {"float32": AddDtype.FP32, "bfloat16": AddDtype.BF16}
        kind = kinds.get(dst.view_dtype)
        if kind is None or src.view_dtype != dst.view_dtype:
            raise KernelError(
                f"{_where(ins)}read-add-write needs float32 or bfloat16 on both sides, got "
                f"{src.view_dtype} and {dst.view_dtype}"
            )
        cur = st.read(dst, ins)
        isz = vals.dtype.itemsize
        out = add_elements(
            cur.reshape(-1).view(np.uint8).reshape(-1, isz),
            vals.reshape(-1).view(np.uint8).reshape(-1, isz),
            kind,
        )
        st.write(dst, out.reshape(-1).view(dst.element.storage))
        return
    if vals.size == dst.size:
        # The DMA golden's copy between two flat views of one size moves each element to its
        # own place: the bytes in source order, which the write puts through the destination
        # view (later visits stay).
        st.write(dst, vals.reshape(-1))
        return
    out = dma_golden.dma_copy(  # the DMA golden's rule for views of different sizes
        np.zeros(dst.size, vals.dtype),
        _flat_ap(dst.size),
        vals.reshape(-1),
        _flat_ap(vals.size),
    )
    st.write(dst, out)


def _flat_ap(n):
    return AccessPattern(((1, n),))


def _dma_transpose(st, ins):
    """``dst = src`` transposed: 2-D views through the DMA golden (bytes unchanged), 3-D and
    4-D by the permutation ``axes`` (``dst.shape[i] == src.shape[axes[i]]``), elements moved
    unchanged; ``keep`` (a skipped gather row's elements, in ``dst``'s shape) writes only the
    elements kept."""
    (dst,), (src,) = ins.dsts, ins.srcs
    vals = st.read(src, ins)
    axes = ins.args.get("axes")
    if axes is None or len(axes) == 2:
        if vals.ndim != 2:
            vals = vals.reshape(vals.shape[0], -1)
        out = dma_golden.dma_transpose(
            np.zeros(vals.shape[::-1], vals.dtype),
            _ap2(vals.shape[::-1]),
            vals,
            _ap2(vals.shape),
        )
    else:
        if vals.ndim != len(axes):
            raise KernelError(f"{_where(ins)}transposes a {vals.ndim}-D view by axes {axes}")
        out = np.ascontiguousarray(np.transpose(vals, axes))
    if dst.size != out.size:
        raise KernelError(f"{_where(ins)}transposes {vals.shape} into a view of {dst.view_shape}")
    keep = ins.args.get("keep")
    if keep is not None:
        flat = np.asarray(keep).reshape(-1)
        dst = _Gathered.of(dst, dst.indices().reshape(-1)[flat])
        out = out.reshape(-1)[flat]
    st.write(dst, out)


def _ap2(shape):
    return AccessPattern(((shape[1], shape[0]), (1, shape[1])))


# -- run-time offsets ---------------------------------------------------------------------------


class _Gathered(Ref):
    """A view whose flat element indices were found when its instruction ran (a run-time
    offset read, or some elements skipped): ``indices()`` gives them, shape ``view_shape``;
    :meth:`CoreState.read <ncrtl.model.kernel.golden.CoreState.read>` and ``write`` go
    through them as through any view's."""

    __slots__ = ("_idx",)

    @classmethod
    def of(cls, ref, idx):
        g = object.__new__(cls)
        for f in ("space", "tensor", "base", "shape", "dtype", "pattern", "offset", "view_dtype"):
            object.__setattr__(g, f, getattr(ref, f))
        object.__setattr__(g, "size", int(idx.size))
        object.__setattr__(g, "_idx", idx)
        return g

    @property
    def view_shape(self):
        return self._idx.shape

    def indices(self):
        return self._idx

    def box(self):
        return None


class _Named:
    """Where an offset came from, for a message (``.tensor``: a register's name)."""

    def __init__(self, tensor):
        self.tensor = tensor


def _raw(pattern, offset):
    """Flat indices of ``pattern`` from ``offset``, no rule checked (the caller checks)."""
    idx = np.full(tuple(n for _, n in pattern), offset, np.int64)
    for d, (step, num) in enumerate(pattern):
        shape = [1] * len(pattern)
        shape[d] = num
        idx = idx + (np.arange(num, dtype=np.int64) * step).reshape(shape)
    return idx


def _column_major(values, n):
    """The first ``n`` index values of an index view: down its partitions, then across its
    columns (``index.T.flatten()``, the reference's order for a vector of offsets)."""
    v = np.asarray(values)
    v = v.reshape(v.shape[0], -1).T.reshape(-1)
    return v[:n].astype(np.int64)


def _offsets(st, ins, ref, spec, skip):
    """``(indices, kept)`` of the view ``ref`` with the run-time offset ``spec`` (the
    ``indirect`` argument's entry), its index values read from the state now: the flat
    element indices, shape ``view_shape``, and where ``skip`` (``oob_mode=skip``) a mask of
    the elements whose access lies inside the tensor (None: all do).  An access outside it
    raises unless skipped."""
    if "register" in spec:  # a scalar offset held in a register of the stream's sequencer
        from ncrtl.model.kernel.ops import registers

        index = _Named(f"register {spec['register']}")
        values = np.array([registers.read(st, ins, spec["register"])], np.int64)
    else:
        index = ins.srcs[spec["index"]]
        values = st.read(index, ins, matters="offset")
    shape = ref.tensor_shape()
    total = int(np.prod(shape))
    kind, stride = spec["kind"], spec["stride"]
    name = f"{ref.space.upper()} tensor {ref.tensor}"
    if kind in ("scalar", "vector"):
        n0 = ref.pattern[0][1]
        rest = (1,) * (len(ref.pattern) - 1)
        if kind == "scalar":
            v = np.int64(np.asarray(values).reshape(-1)[0])
            idx = _raw(ref.pattern, ref.offset + int(v) * stride)
            what = f"the run-time offset {int(v)} (read from {index.tensor})"
        else:
            if values.size < n0:
                raise KernelError(
                    f"{_where(ins)}vector_offset {index.tensor} holds {values.size} indices for "
                    f"{n0} rows"
                )
            v = _column_major(values, n0)
            inner = _raw(((0, 1), *ref.pattern[1:]), ref.offset)
            idx = inner + (v * stride).reshape((n0, *rest))
        # a row (an index of the first dimension: one descriptor) is inside the tensor, on
        # chip inside one partition of it
        flat = idx.reshape(n0, -1)
        ok = (flat >= 0).all(axis=1) & (flat < total).all(axis=1)
        if ref.on_chip:
            width = int(np.prod(shape[1:]))
            ok &= (flat // width == flat[:, :1] // width).all(axis=1)
        if kind == "vector":
            ok &= v >= 0
        if ok.all():
            return idx, None
        if not skip:
            r = int(np.argmin(ok))
            if kind == "vector":
                what = f"vector_offset {index.tensor}'s index {int(v[r])} for row {r}"
            raise KernelError(
                f"{_where(ins)}{what} takes the access of {name} outside it (row {r} of the "
                f"view; oob_mode=skip skips such rows)"
            )
        keep = np.broadcast_to(ok.reshape((n0, *rest)), idx.shape)
        return np.where(keep, idx, 0), keep
    # "ti": NeuronCore-v4 tensor indirection, column i at free offset index[i % G, i // G]
    group, num = spec["group"], ref.pattern[1][1]
    grid = np.asarray(values).reshape(values.shape[0], -1)
    i = np.arange(num)
    o = grid[i % group, i // group].astype(np.int64)
    if ((o < 0) | (o >= spec["free"])).any():
        k = int(np.argmax((o < 0) | (o >= spec["free"])))
        raise KernelError(
            f"{_where(ins)}index {index.tensor} gives column {k} the free offset {int(o[k])}, "
            f"outside the view's {spec['free']} elements per partition"
        )
    p0, n_p = ref.pattern[0]
    idx = ref.offset + (np.arange(n_p, dtype=np.int64) * p0)[:, None] + (o * stride)[None, :]
    return idx, None  # inside the view .indirect was made of: checked when traced


def resolve(st, ins):
    """``ins`` with its views of run-time offsets (its ``indirect`` argument) as
    :class:`_Gathered` views of the index values the state holds now, its index tensors taken
    out of its sources; None where ``oob_mode=skip`` skips every element.  Elements skipped
    are left out of every data operand of a copy-like transfer (element ``k`` of each with
    element ``k`` of the others) and carried to ``dma_transpose`` as ``keep``."""
    specs = ins.args["indirect"]
    dsts, srcs = list(ins.dsts), list(ins.srcs)
    data = min((s["index"] for s in specs if "index" in s), default=len(srcs))
    skip = ins.args.get("oob_mode") == "skip"
    keep = None
    for spec in specs:
        refs = dsts if spec["side"] == "dst" else srcs
        ref = refs[spec["at"]]
        idx, ok = _offsets(st, ins, ref, spec, skip)
        refs[spec["at"]] = _Gathered.of(ref, idx)
        if ok is not None:
            if ins.op == "dma_transpose" and spec["side"] == "src":
                ok = np.transpose(ok, ins.args.get("axes") or tuple(range(ok.ndim))[::-1])
            keep = ok if keep is None else keep & ok.reshape(keep.shape)
    srcs = srcs[:data]
    args = {k: v for k, v in ins.args.items() if k != "indirect"}
    if keep is not None:
        if not keep.any():
            return None
        if ins.op == "dma_transpose":
            args["keep"] = keep
        elif not keep.all():
            flat = keep.reshape(-1)
            dsts = [_Gathered.of(r, r.indices().reshape(-1)[flat]) for r in dsts]
            srcs = [_Gathered.of(r, r.indices().reshape(-1)[flat]) for r in srcs]
    return replace(ins, dsts=tuple(dsts), srcs=tuple(srcs), args=args)


#: The canonical quiet NaN of a float32 result of the DMA's arithmetic (the SBUF
#: read-add-write unit's, docs/dma.md).
_QNAN32 = np.uint32(0x7FC00000).view(np.float32)


def _dma_compute(st, ins):
    """``dst = srcs[0] * scales[0] + srcs[1] * scales[1] + ...``: each source read as float32
    (its dtype converted exactly where float32 holds it, an integer above 2^24 rounded to
    nearest even), scaled, and added in source order in float32 (one rounding per addition,
    the sources' order), the sum rounded once to ``dst``'s dtype; a NaN sum is the canonical
    quiet NaN."""
    (dst,), srcs = ins.dsts, ins.srcs
    scales = ins.args.get("scales")
    acc = None
    for k, src in enumerate(srcs):
        if src.element.packed != 1:
            raise KernelError(f"{_where(ins)}arithmetic on the packed type {src.view_dtype}")
        v = st.read(src, ins).astype(np.float32).reshape(-1)
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are values here
            if scales is not None and scales[k] != 1.0:
                v = v * np.float32(scales[k])
            acc = v if acc is None else acc + v
    acc = np.where(np.isnan(acc), _QNAN32, acc)
    st.write(dst, convert(acc, dst.view_dtype))


OPS = {"dma_copy": _dma_copy, "dma_transpose": _dma_transpose, "dma_compute": _dma_compute}
