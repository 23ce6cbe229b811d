"""What every ``nki.isa`` call shares: its operands checked against their rules (a tensor in the
right memory, a known engine, an operation the golden has, the same partitions and elements)
and the one way an instruction is appended to its engine's stream (:func:`emit`).  Each
error names the call and starts with the kernel's ``file:line`` (:func:`~.._trace.fail`)."""

from __future__ import annotations

import math

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of

from .. import _trace
from .._trace import NkiTensor, caller_line, current, fail
from .enums import engine


def need_tensor(call, what, t):
    if not isinstance(t, NkiTensor):
        fail(call, f"{what} must be a tensor (nl.ndarray or a view of one), not {t!r}")


def int_pair(call, what, v):
    """``tile_position`` / ``tile_size``: a tuple of integers, or None where not given."""
    if v is None or (isinstance(v, (tuple, list)) and not v):
        return None
    if not isinstance(v, (tuple, list)):
        fail(call, f"{what} must be a tuple of integers, not {v!r}")
    return tuple(_trace._int(i, what, call) for i in v)


def operand(call, what, t, spaces):
    """The operand of argument ``what``: an NkiTensor in one of ``spaces``."""
    need_tensor(call, what, t)
    if t._decl.space not in spaces:
        where = " or ".join(s.upper() if s != "hbm" else "device memory (HBM)" for s in spaces)
        fail(call, f"{what} {t.name} is in {t.buffer}; it must be in {where}")
    return t._operand(call, what)


def emit(engine_name, op, dsts, srcs, args, call):
    tr = current(call)
    if tr.bounds is not None:
        tr.bounds.emit(call)
    if any(type(o) is _trace.IndirectOperand for o in (*dsts, *srcs)):
        from .dma import indirect_args

        srcs, args = indirect_args(engine_name, dsts, srcs, args, call)
    if op not in ("matmul", "matmul_mx", "matmul_sparse"):
        # Another engine reading (an eviction) or writing a PSUM location ends its matmul
        # accumulation there: with accumulate=None the next matmul into it overwrites.
        for o in (*dsts, *srcs):
            seen = tr.matmul_written.get(o.decl)
            if seen:
                box = o.extent0
                seen.difference_update([b for b in seen if overlaps(b, box)])
    return tr.builder.emit(engine_name, op, dsts, srcs, args, line=caller_line(), call=call)


def overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def pick_engine(call, value, allowed, default):
    if value in (None, engine.unknown):
        return default
    names = {
        engine.vector: "vector",
        engine.scalar: "scalar",
        engine.gpsimd: "gpsimd",
        engine.tensor: "tensor",
    }
    name = names.get(value)
    if name not in allowed:
        fail(call, f"engine={value!r}: this instruction runs on {', '.join(allowed)}")
    return name


def free_size(t):
    return math.prod(t.shape[1:]) if len(t.shape) > 1 else 1


#: numpy ufuncs whose names differ from NKI's operator names
_NUMPY_NAMES = {"absolute": "abs", "remainder": "mod", "true_divide": "divide"}


def op_token(op):
    """The NKI name of an operator passed as ``op=``: an ``nl`` token (``nl.add``), an ``nl``
    name ncrtl does not model as a function (a stand-in: ``nl.divide``), an ``nl`` function,
    a numpy ufunc (``np.add``) or a name; None for anything else."""
    if isinstance(op, str):
        return op
    name = getattr(op, "name", None)
    if isinstance(name, str):
        return name
    stand_in = getattr(op, "__dict__", {}).get("_nki_name")
    if isinstance(stand_in, str):
        return stand_in.rsplit(".", 1)[-1]
    if isinstance(op, np.ufunc):
        return _NUMPY_NAMES.get(op.__name__, op.__name__)
    if callable(op) and str(getattr(op, "__module__", "")).startswith("ncrtl.nki"):
        return getattr(op, "__name__", None)
    return None


def op_name(call, what, op, table):
    name = op_token(op)
    if name is None or name not in table:
        fail(call, f"{what}={op!r} is not modelled; modelled: {', '.join(sorted(table))}")
    return name


def zeros_of(dtype, shape):
    d = dtype_of(dtype)
    return np.broadcast_to(np.zeros((), d.storage), shape)


def at_most_one_psum(call, *ts):
    if sum(1 for t in ts if isinstance(t, NkiTensor) and t._decl.space == "psum") > 1:
        fail(call, "at most one input may be in PSUM")


def same_layout(call, dst, *srcs):
    for what, s in srcs:
        if s.shape[0] != dst.shape[0] or free_size(s) != free_size(dst):
            fail(
                call,
                f"{what} {list(s.shape)} and dst {list(dst.shape)} must have the same partitions "
                f"and elements per partition",
            )
