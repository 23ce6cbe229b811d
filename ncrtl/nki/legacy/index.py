"""Index expressions of the older ``neuronxcc.nki`` API: ``nl.arange``, ``nl.mgrid``, the affine
index tensors made from them (``offset + nl.arange(128)[:, None]``), the views they index
(``a[ix, iy]``, mixed with slices and integers) and the ``mask=`` predicates on them.

An index expression is **affine**: ``const + sum_k coef_k * i_k`` over the axes ``i_k`` of its
shape (numpy's broadcasting shape; an axis of size 1 has no variable).  Indexing a tensor with
expressions is a view whose axes are the expressions' broadcast axes: each axis steps by the
sum over the tensor's dimensions of its coefficient times the dimension's stride, so any
affine indexing is one access pattern, no copy.  A product of two expressions, a division, a
modulo are not affine and are refused (one line naming the operation).

A mask (``i_p < n``, ``(i_p < n) & (i_f >= 2)``) is a conjunction of comparisons; each must
bound one axis (a comparison of several axes, ``i_p + i_f < n``, is not a box and is refused:
``nisa.affine_select`` takes those).  An instruction with a mask runs on the box of its
iteration space the comparisons leave: every operand, and the destination, sliced to it
(docs/nki/legacy_language.md, "Masks").
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .._trace import _DS, fail

__all__ = ["Index", "Predicate", "arange", "mgrid", "is_index", "resolve", "box_of", "restrict"]


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _broadcast(call, a, b):
    """The broadcast of shapes ``a`` and ``b`` (numpy's rule, aligned from the last)."""
    try:
        return tuple(int(n) for n in np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        fail(call, f"index expressions of shapes {list(a)} and {list(b)} do not broadcast")


def _aligned(coefs, shape, n):
    """``coefs`` of an expression of ``shape`` read in a rank ``n`` space (leading axes 0)."""
    return (0,) * (n - len(shape)) + tuple(coefs)


class Index:
    """An affine index expression: ``const + sum(coefs[a] * i_a)``, ``i_a`` in
    ``range(shape[a])`` (a coefficient on an axis of size 1 is 0)."""

    __slots__ = ("shape", "const", "coefs")
    __array_priority__ = 1000  # numpy integers defer to the expression's operators

    def __init__(self, shape, const, coefs):
        self.shape = tuple(int(n) for n in shape)
        self.const = int(const)
        self.coefs = tuple(0 if n == 1 else int(c) for n, c in zip(self.shape, coefs))

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def axes(self):
        """The axes the expression varies along."""
        return [a for a, c in enumerate(self.coefs) if c]

    def values(self):
        """The expression's values (a numpy array of its shape): for messages and tests."""
        out = np.full(self.shape, self.const, np.int64)
        for a, c in enumerate(self.coefs):
            if c:
                shape = [1] * self.ndim
                shape[a] = self.shape[a]
                out = out + c * np.arange(self.shape[a]).reshape(shape)
        return out

    def bounds(self):
        """``(lowest, highest)`` value."""
        lo = hi = self.const
        for n, c in zip(self.shape, self.coefs):
            lo += min(0, c * (n - 1))
            hi += max(0, c * (n - 1))
        return lo, hi

    def __repr__(self):
        terms = [f"{c}*i{a}" for a, c in enumerate(self.coefs) if c]
        return f"Index({' + '.join(terms + [str(self.const)])}, shape={list(self.shape)})"

    # -- arithmetic: affine only ----------------------------------------------------------------

    def _combine(self, other, sign, call):
        if _is_int(other):
            return Index(self.shape, self.const + sign * int(other), self.coefs)
        if isinstance(other, Index):
            shape = _broadcast(call, self.shape, other.shape)
            n = len(shape)
            a = _aligned(self.coefs, self.shape, n)
            b = _aligned(other.coefs, other.shape, n)
            coefs = [x + sign * y for x, y in zip(a, b)]
            return Index(shape, self.const + sign * other.const, coefs)
        return NotImplemented

    def __add__(self, other):
        return self._combine(other, 1, "index expression +")

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1, "index expression -")

    def __rsub__(self, other):
        got = self._combine(other, -1, "index expression -")
        return got if got is NotImplemented else -got

    def __neg__(self):
        return Index(self.shape, -self.const, [-c for c in self.coefs])

    def __pos__(self):
        return self

    def __mul__(self, other):
        if _is_int(other):
            k = int(other)
            return Index(self.shape, self.const * k, [c * k for c in self.coefs])
        if isinstance(other, Index):
            if not other.axes:
                return self * other.const
            if not self.axes:
                return other * self.const
            fail(
                "index expression *",
                f"{self!r} * {other!r}: the product of two index expressions is not affine "
                "(an index is const + sum(coef * i))",
            )
        if isinstance(other, (float, np.floating)):
            fail("index expression *", f"{self!r} * {other!r}: index coefficients are integers")
        return NotImplemented

    __rmul__ = __mul__

    def _not_affine(self, what, other):
        fail(
            f"index expression {what}",
            f"{self!r} {what} {other!r} is not affine (an index is const + sum(coef * i)); "
            "index with a step instead (nl.arange(start, stop, step))",
        )

    def __floordiv__(self, other):
        if not self.axes and _is_int(other):
            return Index(self.shape, self.const // int(other), self.coefs)
        self._not_affine("//", other)

    def __truediv__(self, other):
        self._not_affine("/", other)

    def __mod__(self, other):
        if not self.axes and _is_int(other):
            return Index(self.shape, self.const % int(other), self.coefs)
        self._not_affine("%", other)

    def __rfloordiv__(self, other):
        self._not_affine("//", other)

    def __rtruediv__(self, other):
        self._not_affine("/", other)

    def __rmod__(self, other):
        self._not_affine("%", other)

    # -- views of the expression (numpy's basic indexing) -------------------------------------

    def __getitem__(self, key):
        call = "index expression [...]"
        if not isinstance(key, tuple):
            key = (key,)
        real = [k for k in key if k is not None and k is not Ellipsis]
        if sum(k is Ellipsis for k in key) > 1:
            fail(call, "at most one ...")
        if len(real) > self.ndim:
            fail(call, f"{len(real)} indices for an expression of {self.ndim} dimensions")
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - len(real)) + key[i + 1 :]
        else:
            key = key + (slice(None),) * (self.ndim - len(real))
        shape, coefs, const, d = [], [], self.const, 0
        for k in key:
            if k is None:
                shape.append(1)
                coefs.append(0)
                continue
            n, c = self.shape[d], self.coefs[d]
            d += 1
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step < 1:
                    fail(call, f"slice {k}: only positive steps")
                size = max(0, -(-(stop - start) // step))
                const += start * c
                shape.append(size)
                coefs.append(c * step)
            elif _is_int(k):
                i = int(k) + (n if k < 0 else 0)
                if not 0 <= i < n:
                    fail(call, f"index {k} is outside an axis of size {n}")
                const += i * c
            else:
                fail(call, f"{k!r}: an index expression is indexed by slices, integers and None")
        return Index(shape, const, coefs)

    # -- comparisons: mask predicates --------------------------------------------------------

    def _compare(self, other, op):
        if not (_is_int(other) or isinstance(other, Index)):
            return NotImplemented
        return Predicate([(self - other, op)])

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    def __bool__(self):
        fail(
            "index expression",
            f"{self!r} has no truth value when the kernel is traced (use it as a mask=)",
        )

    def __index__(self):
        fail("index expression", f"{self!r} is not one integer (index a tensor with it)")

    def __len__(self):
        return self.shape[0] if self.shape else 1

    def __iter__(self):
        fail("index expression", "an index expression is not iterable")


_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
}


class Predicate:
    """A conjunction of comparisons ``expr op 0`` (``i_p < n`` is ``i_p - n < 0``): a mask, or
    the predicate of ``nisa.affine_select``."""

    __slots__ = ("terms",)

    def __init__(self, terms):
        self.terms = tuple(terms)

    def __and__(self, other):
        if not isinstance(other, Predicate):
            return NotImplemented
        return Predicate(self.terms + other.terms)

    def __or__(self, other):
        fail("mask |", "a mask is a conjunction (&) of comparisons; | is not modelled")

    def __invert__(self):
        if len(self.terms) != 1:
            fail("mask ~", "~ of a conjunction is not a conjunction")
        e, op = self.terms[0]
        flip = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
        if op not in flip:
            fail("mask ~", f"~ of {op}")
        return Predicate([(e, flip[op])])

    def __bool__(self):
        fail("mask", "a mask has no truth value when the kernel is traced (pass it as mask=)")

    def __repr__(self):
        return " & ".join(f"({e!r} {op} 0)" for e, op in self.terms)


def is_index(v):
    return isinstance(v, Index)


def arange(start, stop=None, step=1):
    """``nl.arange(start, stop, step)``: the 1-D index expression of ``range(start, stop,
    step)`` (``nl.arange(n)``: ``0 .. n - 1``)."""
    call = "nl.arange"
    if stop is None:
        start, stop = 0, start
    for v, what in ((start, "start"), (stop, "stop"), (step, "step")):
        if not _is_int(v):
            fail(call, f"{what} must be an integer known when the kernel is traced, not {v!r}")
    start, stop, step = int(start), int(stop), int(step)
    if step == 0:
        fail(call, "step must not be 0")
    n = len(range(start, stop, step))
    if n < 1:
        fail(call, f"nl.arange({start}, {stop}, {step}) is empty")
    return Index((n,), start, (step,))


class _Grid(tuple):
    """What ``nl.mgrid[...]`` gives: one expression per axis, also as ``.p`` (the first) and
    ``.x``, ``.y``, ``.z`` (the next ones)."""

    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]

    @property
    def y(self):
        return self[2]

    @property
    def z(self):
        return self[3]


class _MGrid:
    """``nl.mgrid[0:128, 0:512]``: one index expression per slice, each varying along its own
    axis of the grid (numpy's ``mgrid``, as expressions: no array)."""

    def __getitem__(self, key):
        call = "nl.mgrid"
        if not isinstance(key, tuple):
            key = (key,)
        n = len(key)
        out = []
        for a, k in enumerate(key):
            if not isinstance(k, slice):
                fail(call, f"nl.mgrid[...] takes slices (0:n), not {k!r}")
            start = 0 if k.start is None else k.start
            step = 1 if k.step is None else k.step
            if not all(_is_int(v) for v in (start, k.stop, step)):
                fail(call, f"{k}: its bounds must be integers known when the kernel is traced")
            size = len(range(start, k.stop, step))
            if size < 1 or step < 1:
                fail(call, f"{k} is empty")
            shape = [1] * n
            shape[a] = size
            coefs = [0] * n
            coefs[a] = step
            out.append(Index(shape, start, coefs))
        return out[0] if n == 1 else _Grid(out)

    def __repr__(self):
        return "nl.mgrid"


mgrid = _MGrid()


# -- views ----------------------------------------------------------------------------------------


def resolve(call, shape, strides, offset, pdim, key):
    """The view ``key`` selects of a view (``shape``, ``strides``, ``offset``; ``pdim`` the
    position of its partition dimension, None in device memory): ``(shape, strides, offset,
    pdim)``.  Without index expressions, numpy's basic indexing (an integer removes its
    dimension, except the partition dimension, which stays of size 1); with them, the view's
    axes are the expressions' broadcast axes (a slice among them takes the axis of its
    position).  Bounds are checked where the view is used (a mask may cut them first)."""
    if not isinstance(key, tuple):
        key = (key,)
    ndim = len(shape)
    real = [k for k in key if k is not None and k is not Ellipsis]
    if sum(k is Ellipsis for k in key) > 1:
        fail(call, "at most one ... in an index")
    if len(real) > ndim:
        fail(call, f"{len(real)} indices for a tensor of {ndim} dimensions {list(shape)}")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(real)) + key[i + 1 :]
    else:
        key = key + (slice(None),) * (ndim - len(real))
    if any(isinstance(k, Index) for k in key):
        return _affine(call, shape, strides, offset, pdim, key)
    return _basic(call, shape, strides, offset, pdim, key)


def _slice_of(call, k, n, d):
    """``(start, size, step)`` of a slice or ``nl.ds`` on dimension ``d`` of size ``n``."""
    if isinstance(k, _DS):
        start, size = k.start, k.size
        if not (_is_int(start) and _is_int(size)):
            fail(call, f"nl.ds({start!r}, {size!r}): integers known when the kernel is traced")
        if start < 0 or size < 1 or start + size > n:
            fail(call, f"nl.ds({start}, {size}) leaves dimension {d} of size {n}")
        return int(start), int(size), 1
    for v in (k.start, k.stop, k.step):
        if v is not None and not _is_int(v):
            fail(call, f"slice {k} of dimension {d}: bounds are integers known when traced")
    start, stop, step = k.indices(n)
    if step < 1:
        fail(call, f"slice step {step} on dimension {d}: only positive steps")
    size = max(0, -(-(stop - start) // step))
    if size < 1:
        fail(call, f"slice {k} of dimension {d} (size {n}) is empty")
    return start, size, step


def _basic(call, shape, strides, offset, pdim, key):
    out_shape, out_strides, out_pdim = [], [], None
    d = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            out_strides.append(0)
            continue
        n, s = shape[d], strides[d]
        if isinstance(k, (slice, _DS)):
            start, size, step = _slice_of(call, k, n, d)
            offset += start * s
            if d == pdim:
                out_pdim = len(out_shape)
            out_shape.append(size)
            out_strides.append(s * step)
        elif _is_int(k):
            i = int(k) + (n if k < 0 else 0)
            if not 0 <= i < n:
                fail(call, f"index {k} is outside dimension {d} of size {n}")
            offset += i * s
            if d == pdim:  # the partition dimension stays, of size 1
                out_pdim = len(out_shape)
                out_shape.append(1)
                out_strides.append(s)
        else:
            fail(
                call,
                f"{k!r} indexes dimension {d}: an index is an integer, a slice, nl.ds or an "
                "index expression (nl.arange, nl.mgrid)",
            )
        d += 1
    return _finish(out_shape, out_strides, offset, pdim, out_pdim)


def _finish(shape, strides, offset, pdim, out_pdim):
    if pdim is not None and len(shape) == 1 and out_pdim == 0:
        shape.append(1)  # a tile keeps a free dimension
        strides.append(1)
    if not shape:
        shape, strides = [1], [1]
    return tuple(shape), tuple(strides), offset, out_pdim


def _affine(call, shape, strides, offset, pdim, key):
    exprs = [k for k in key if isinstance(k, Index)]
    spans = [k for k in key if isinstance(k, (slice, _DS))]
    rank = max(e.ndim for e in exprs)
    if spans:
        free = [k for k in key if k is not None and not _is_int(k)]
        if len(free) != rank and any(e.ndim > 1 for e in exprs):
            fail(
                call,
                f"slices mixed with index expressions of {rank} dimensions: give one index "
                f"per axis ({len(free)} non-integer indices for {rank} axes), or index every "
                "dimension with expressions",
            )
        rank = len(free)
    out = [1] * rank
    steps = [0] * rank
    out_pdim = None
    pos = 0  # the axis a slice takes: its position among the non-integer indices
    d = 0
    for k in key:
        if k is None:
            fail(call, "None (a new axis) among index expressions: add it to the expression")
        n, s = shape[d], strides[d]
        if isinstance(k, Index):
            coefs = _aligned(k.coefs, k.shape, rank)
            sizes = (1,) * (rank - k.ndim) + k.shape
            for a in range(rank):
                if sizes[a] > 1:
                    if out[a] not in (1, sizes[a]):
                        fail(
                            call,
                            f"index expressions of shapes that do not broadcast on axis {a} "
                            f"({out[a]} and {sizes[a]})",
                        )
                    out[a] = sizes[a]
                    steps[a] += coefs[a] * s
                    if d == pdim and coefs[a] and out_pdim is None:
                        out_pdim = a
            offset += k.const * s
            pos += 1
        elif isinstance(k, (slice, _DS)):
            start, size, step = _slice_of(call, k, n, d)
            if out[pos] not in (1, size):
                fail(call, f"slice {k} on axis {pos}: {size} elements, the expressions {out[pos]}")
            out[pos] = size
            steps[pos] += step * s
            offset += start * s
            if d == pdim:
                out_pdim = pos
            pos += 1
        elif _is_int(k):
            i = int(k) + (n if k < 0 else 0)
            offset += i * s
        else:
            fail(
                call,
                f"{k!r} indexes dimension {d}: an index is an integer, a slice, nl.ds or an "
                "index expression (nl.arange, nl.mgrid)",
            )
        d += 1
    steps = [st if n > 1 else 0 for st, n in zip(steps, out)]
    if pdim is not None and out_pdim is None:
        # the partition dimension indexed by a constant: one partition, the first axis
        if out and out[0] == 1:
            out_pdim = 0
            steps[0] = strides[pdim]
        else:
            out = [1] + out
            steps = [strides[pdim]] + steps
            out_pdim = 0
    return _finish(out, steps, offset, pdim, out_pdim)


# -- masks ----------------------------------------------------------------------------------------


def box_of(call, mask):
    """The box a mask leaves: ``{axis: (lo, hi)}`` with axes counted from the last (-1, -2,
    ...), or None for no mask.  Each comparison must bound one axis."""
    if mask is None:
        return None
    if isinstance(mask, (bool, np.bool_)):
        return {} if mask else {"empty": True}
    if not isinstance(mask, Predicate):
        fail(call, f"mask={mask!r}: a mask is a comparison of index expressions (i_p < n)")
    box = {}
    for e, op in mask.terms:
        axes = e.axes
        if len(axes) > 1:
            fail(
                call,
                f"mask ({e!r} {op} 0) compares {len(axes)} index axes: a mask bounds one axis "
                "per comparison (nisa.affine_select selects on several)",
            )
        if not axes:
            if not _OPS[op](e.const, 0):
                box["empty"] = True
            continue
        a = axes[0]
        n, c = e.shape[a], e.coefs[a]
        ok = [k for k in range(n) if _OPS[op](e.const + c * k, 0)]
        lo, hi = (ok[0], ok[-1] + 1) if ok else (0, 0)
        key = a - e.ndim
        plo, phi = box.get(key, (0, n))
        box[key] = (max(lo, plo), min(hi, phi))
        if box[key][0] >= box[key][1]:
            box["empty"] = True
    return box


def empty(box):
    return box is not None and box.get("empty", False)


def restrict(t, box):
    """The view ``t`` (an NkiTensor) cut to ``box`` (its axes aligned from the last; an axis
    of size 1 in ``t`` is broadcast and stays); numbers and None as they are."""
    if not box or not hasattr(t, "_decl"):
        return t
    shape, strides, offset = list(t.shape), list(t.strides), t.offset
    changed = False
    for a, bounds in box.items():
        if a == "empty":
            continue
        d = len(shape) + a
        if d < 0 or shape[d] == 1:
            continue
        lo, hi = bounds
        hi = min(hi, shape[d])
        if (lo, hi) == (0, shape[d]):
            continue
        offset += lo * strides[d]
        shape[d] = max(hi - lo, 1)
        changed = True
    if not changed:
        return t
    return t._view(tuple(shape), tuple(strides), offset)


def count(shape):
    return math.prod(shape)
