"""Access patterns: which elements of a tensor an instruction or a DMA descriptor touches.

The semantics are NKI's ``.ap`` (seed 003, "NKI Access Patterns"): the tensor is flattened to
one dimension of elements; a pattern ``[[step0, num0], [step1, num1], ...]`` is a loop nest,
outermost first, and element ``[i0, i1, ...]`` of the view is element
``offset + i0 * step0 + i1 * step1 + ...`` of the flattened tensor.  The view's shape is the
pattern's ``num`` list.  On top of that:

* ``dtype`` reinterprets the tensor's bytes: steps, nums and the offset then count elements of
  the new dtype (an ``int32 [128, 256]`` tensor read as ``bfloat16`` is ``[128, 512]``); the
  tensor's innermost dimension must hold a whole number of the new elements.
* ``scalar_offset`` (an integer read at run time) adds ``scalar_offset * prod(shape[d+1:])`` for
  ``indirect_dim = d``, the shape being the base tensor's (reinterpreted), not the pattern's.
* ``vector_offset`` (one integer per index of the outermost pattern dimension, only
  ``indirect_dim = 0``) replaces ``i0 * step0`` by ``vector_offset[i0] * prod(shape[1:])``: the
  step of the leading dimension is read from the base tensor, the pattern's is ignored.
* In SBUF and PSUM the first pattern entry is the partition dimension, and it must be
  contiguous: ``step0 == prod(shape[1:])``, the elements of one partition of the tensor.  And
  an access stays inside its partition row: the free address of every element (its index
  minus its partition's first element) lies in ``[0, row)``; in the flattened view a free
  address past the row would be the next partition's element, which the hardware's
  per-partition access cannot reach.  :func:`ap_indices` states both rules (``partition_rule``);
  the descriptor-level golden (:func:`ncrtl.model.dma.isa.side_addresses`) uses it.

Steps may be negative (a reversed walk) and zero (a broadcast read); every address the pattern
forms must lie inside the tensor, checked for all of them before anything is read or written.

Every field is an integer (Python or numpy; not a bool, not a float even when integral) and is
checked, with its range, when the :class:`AccessPattern` is made, before any index is built; a
view has at most :data:`MAX_VIEW_ELEMENTS` elements (the golden model builds one 64-bit index
per element).

This module works on element indices of a flattened tensor (:func:`ap_indices`) and on numpy
tensors (:func:`ap_view`, :func:`ap_write`).  :mod:`ncrtl.model.dma.memory` places tensors in
the SBUF and the device memory by bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "AccessPattern",
    "MAX_DIMS",
    "MAX_VIEW_ELEMENTS",
    "check_pattern",
    "pattern_bounds",
    "ap_indices",
    "ap_view",
    "ap_write",
    "reinterpret_shape",
]

#: Pattern entries: the partition (or outermost) dimension plus up to 4 free dimensions.
MAX_DIMS = 5

#: Elements of the largest view the golden model takes (2^26: its indices alone are 512 MiB).
#: A larger transfer is split into several.
MAX_VIEW_ELEMENTS = 1 << 26


def integer(value, field):
    """``value`` as an int: a Python or numpy integer (not a bool); ``ValueError`` naming
    ``field`` otherwise (a float is refused even when integral: a step of 1.5 is no step)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{field} must be an integer, not {value!r}")
    return int(value)


def check_pattern(pattern, what="pattern"):
    """``pattern`` as a tuple of ``(step, num)`` int pairs: 1 to :data:`MAX_DIMS` entries of two
    integers each, every num >= 1, at most :data:`MAX_VIEW_ELEMENTS` elements in all.  One
    ``ValueError`` naming the entry and the rule otherwise, before any index is built."""
    if isinstance(pattern, (str, bytes)) or not hasattr(pattern, "__iter__"):
        raise ValueError(f"{what} must be a list of [step, num] pairs, not {pattern!r}")
    entries = list(pattern)
    if not 1 <= len(entries) <= MAX_DIMS:
        raise ValueError(
            f"{what} {entries} has {len(entries)} entries; an access pattern has 1 to "
            f"{MAX_DIMS} (the partition or outermost dimension and up to 4 free ones)"
        )
    out = []
    for d, entry in enumerate(entries):
        if isinstance(entry, (str, bytes)) or not hasattr(entry, "__len__") or len(entry) != 2:
            raise ValueError(f"{what} entry {d} ({entry!r}) is not a [step, num] pair")
        step = integer(entry[0], f"{what} entry {d} step")
        num = integer(entry[1], f"{what} entry {d} num")
        if num < 1:
            raise ValueError(f"{what} entry {d} [{step}, {num}]: num must be >= 1")
        out.append((step, num))
    size = 1
    for _, num in out:
        size *= num
    if size > MAX_VIEW_ELEMENTS:
        raise ValueError(
            f"{what} {[list(e) for e in out]} addresses {size} elements; a view has at most "
            f"{MAX_VIEW_ELEMENTS} (2^26) in this model: split the transfer"
        )
    return tuple(out)


@dataclass(frozen=True)
class AccessPattern:
    """An access pattern as NKI's ``tensor.ap(...)`` takes it.

    Parameters
    ----------
    pattern : tuple of (step, num)
        Loop nest, outermost first, steps and counts in elements; 1 to 5 entries.
    offset : int
        First element, counted from the start of the tensor.
    scalar_offset : int or None
        Run-time index on ``indirect_dim`` (the value the SBUF ``(1, 1)`` tensor holds).
    vector_offset : sequence of int or None
        Run-time indices of the leading dimension, one per ``num0`` (``indirect_dim`` 0 only).
    indirect_dim : int
        Dimension of the base tensor the dynamic offset indexes.
    dtype : numpy dtype or None
        Element type the tensor is read as (None: the tensor's own).
    """

    pattern: tuple
    offset: int = 0
    scalar_offset: int | None = None
    vector_offset: tuple | None = None
    indirect_dim: int = 0
    dtype: object = None

    def __post_init__(self):
        pat = check_pattern(self.pattern)
        object.__setattr__(self, "pattern", pat)
        object.__setattr__(self, "offset", integer(self.offset, "offset"))
        object.__setattr__(self, "indirect_dim", integer(self.indirect_dim, "indirect_dim"))
        if self.scalar_offset is not None and self.vector_offset is not None:
            raise ValueError("at most one of scalar_offset and vector_offset can be given")
        if self.scalar_offset is not None:
            object.__setattr__(self, "scalar_offset", integer(self.scalar_offset, "scalar_offset"))
        if self.vector_offset is not None:
            raw = np.asarray(self.vector_offset)
            if raw.dtype.kind not in "iu":
                raise ValueError(
                    f"vector_offset must hold integers, not {raw.dtype} values "
                    f"({self.vector_offset!r})"
                )
            vec = tuple(int(v) for v in raw.ravel())
            object.__setattr__(self, "vector_offset", vec)
            if self.indirect_dim != 0:
                raise ValueError(
                    f"vector_offset supports only indirect_dim=0, got indirect_dim="
                    f"{self.indirect_dim}"
                )
            if len(vec) != pat[0][1]:
                raise ValueError(
                    f"vector_offset has {len(vec)} indices; the leading pattern dimension has "
                    f"num {pat[0][1]}"
                )
        elif self.indirect_dim < 0:
            raise ValueError(f"indirect_dim must be >= 0, got {self.indirect_dim}")

    @property
    def shape(self):
        """The view's shape: the pattern's nums."""
        return tuple(num for _, num in self.pattern)

    @property
    def size(self):
        return int(np.prod(self.shape))


def reinterpret_shape(shape, itemsize, new_itemsize):
    """Shape of a tensor of ``shape`` and element size ``itemsize`` read as elements of
    ``new_itemsize`` bytes: the innermost dimension scales, and must hold whole elements."""
    shape = tuple(int(s) for s in shape)
    if new_itemsize == itemsize:
        return shape
    if not shape:
        raise ValueError("a scalar tensor cannot be reinterpreted as another dtype")
    inner = shape[-1] * itemsize
    if inner % new_itemsize:
        raise ValueError(
            f"dtype reinterpretation: the innermost dimension holds {inner} bytes "
            f"({shape[-1]} x {itemsize}), not a multiple of the new element size {new_itemsize}"
        )
    return shape[:-1] + (inner // new_itemsize,)


def ap_indices(shape, ap, *, partition_rule=False):
    """Flat element indices a pattern addresses, in loop order, shape ``ap.shape``.

    Parameters
    ----------
    shape : tuple of int
        The base tensor's shape, in elements of the pattern's dtype (see
        :func:`reinterpret_shape`).
    ap : AccessPattern
    partition_rule : bool
        The tensor is in SBUF or PSUM: the leading pattern entry is the partition dimension and
        must step by a whole partition of the tensor (``prod(shape[1:])``), and every element's
        free address stays in its partition row (the module's rules).

    Raises
    ------
    ValueError
        A partition step that is not contiguous, a dynamic offset on a dimension the tensor does
        not have, any address outside the tensor, or (``partition_rule``) a free address
        outside its partition row; the first such view index is named.
    """
    shape = tuple(int(s) for s in shape)
    total = int(np.prod(shape)) if shape else 1
    row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    pat = ap.pattern
    if partition_rule and pat[0][1] > 1 and pat[0][0] != row and ap.vector_offset is None:
        raise ValueError(
            f"pattern {list(map(list, pat))}: the partition step {pat[0][0]} must be the "
            f"elements of one partition of the tensor, {row} (partition access is contiguous)"
        )
    base = int(ap.offset)  # the first element, dynamic scalar offset included
    _check_magnitude(shape, ap, total, row)
    idx = np.full(ap.shape, base, dtype=np.int64)
    for d, (step, num) in enumerate(pat):
        view = [1] * len(pat)
        view[d] = num
        if d == 0 and ap.vector_offset is not None:
            lead = np.asarray(ap.vector_offset, dtype=np.int64) * row
        else:
            lead = np.arange(num, dtype=np.int64) * step
        idx = idx + lead.reshape(view)
    if ap.scalar_offset is not None:
        if not 0 <= ap.indirect_dim < max(len(shape), 1):
            raise ValueError(
                f"indirect_dim {ap.indirect_dim} is not a dimension of the tensor of shape "
                f"{list(shape)}"
            )
        base += int(ap.scalar_offset) * int(np.prod(shape[ap.indirect_dim + 1 :]))
        idx = idx + (base - int(ap.offset))
    where = (
        f"access pattern {list(map(list, pat))} with offset {ap.offset}"
        + (f", scalar_offset {ap.scalar_offset}" if ap.scalar_offset is not None else "")
        + (", vector_offset" if ap.vector_offset is not None else "")
    )
    bad = (idx < 0) | (idx >= total)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{where} reads element {int(idx[first])} at view index {list(first)}, outside the "
            f"tensor's {total} elements (shape {list(shape)})"
        )
    if partition_rule:
        # The partition of every element is the one its outer index names (the first
        # partition, plus i0 or the vector's index): a free address outside [0, row) would land
        # in another partition.
        lead = (
            np.asarray(ap.vector_offset, dtype=np.int64)
            if ap.vector_offset is not None
            else np.arange(pat[0][1], dtype=np.int64)
        )
        want = base // row + lead.reshape((-1,) + (1,) * (len(pat) - 1))
        off = idx // row != want
        if off.any():
            first = tuple(int(i) for i in np.argwhere(off)[0])
            raise ValueError(
                f"{where}: the free address of view index {list(first)} leaves its partition "
                f"row of {row} elements (an SBUF or PSUM access stays inside its partition)"
            )
    return idx


def pattern_bounds(pattern, first=0):
    """``(lo, hi)``: the smallest and largest of ``sum(i_d * step_d)`` over the pattern's
    dimensions from ``first`` on (the corners of the loop nest), in exact integers."""
    lo = sum(min(0, s * (n - 1)) for s, n in pattern[first:])
    hi = sum(max(0, s * (n - 1)) for s, n in pattern[first:])
    return lo, hi


def _check_magnitude(shape, ap, total, row):
    """Refuse, from the pattern's corners in exact integers, a pattern whose addresses leave
    the tensor by more than a 64-bit index holds (a step of 10^30): the index arrays of
    :func:`ap_indices` could not even be formed."""
    lo = hi = int(ap.offset)
    first = 0
    if ap.vector_offset is not None:
        lo += min(ap.vector_offset) * row
        hi += max(ap.vector_offset) * row
        first = 1
    if ap.scalar_offset is not None and 0 <= ap.indirect_dim < max(len(shape), 1):
        extra = ap.scalar_offset * int(np.prod(shape[ap.indirect_dim + 1 :]))
        lo, hi = lo + extra, hi + extra
    corner_lo, corner_hi = pattern_bounds(ap.pattern, first)
    lo, hi = lo + corner_lo, hi + corner_hi
    if max(abs(lo), abs(hi)) >= 1 << 62:
        raise ValueError(
            f"access pattern {list(map(list, ap.pattern))} with offset {ap.offset} addresses "
            f"elements {lo} to {hi}, outside the tensor's {total} elements (shape "
            f"{list(shape)})"
        )


def _as_dtype(tensor, dtype):
    """The tensor's bytes as a flat array of ``dtype`` (the tensor's own when None), and the
    reinterpreted shape."""
    t = np.ascontiguousarray(tensor)
    if dtype is None:
        return t.reshape(-1), t.shape
    new = np.dtype(dtype)
    shape = reinterpret_shape(t.shape, t.dtype.itemsize, new.itemsize)
    return t.reshape(-1).view(np.uint8).view(new), shape


def ap_view(tensor, ap, *, partition_rule=False):
    """The elements ``ap`` addresses in ``tensor``, in loop order: an array of shape
    ``ap.shape`` (of ``ap.dtype`` when given; the bits are kept, NaN payloads included)."""
    flat, shape = _as_dtype(tensor, ap.dtype)
    return flat[ap_indices(shape, ap, partition_rule=partition_rule)]


def ap_write(tensor, ap, values, *, partition_rule=False):
    """A copy of ``tensor`` with ``values`` (shape ``ap.shape``, or as many elements) written
    where ``ap`` points, in loop order: where the pattern visits an element twice, the later
    write is the one that stays, as the hardware's sequential writes leave it."""
    t = np.array(tensor, copy=True, order="C")
    flat, shape = _as_dtype(t, ap.dtype)
    idx = ap_indices(shape, ap, partition_rule=partition_rule).reshape(-1)
    vals = np.asarray(values)
    if vals.size != idx.size:
        raise ValueError(f"{vals.size} values for an access pattern of {idx.size} elements")
    vals = vals.reshape(-1)
    if vals.dtype.itemsize != flat.dtype.itemsize:
        raise ValueError(
            f"values of {vals.dtype.itemsize}-byte elements written through a pattern of "
            f"{flat.dtype.itemsize}-byte elements"
        )
    vals = vals.view(flat.dtype)
    # The last visit of each element wins: keep the last occurrence of every index.
    _, last = np.unique(idx[::-1], return_index=True)
    keep = idx.size - 1 - last
    flat[idx[keep]] = vals[keep]
    return t
