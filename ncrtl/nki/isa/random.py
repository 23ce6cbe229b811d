"""Random numbers: the engines' generators, their state and dropout (``rng``, ``rand2``,
``dropout``, ``set_rng_seed``, ``rand_set_state``, ``rand_get_state``); the generators' stream
is :mod:`ncrtl.model.kernel.ops.random`'s (docs/nki/multicore.md)."""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.ops.random import GENERATORS

from .._trace import NkiTensor, current, fail
from .enums import engine
from .operands import emit, free_size, operand, pick_engine, same_layout

__all__ = ["rng", "rand2", "dropout", "set_rng_seed", "rand_set_state", "rand_get_state"]

_INTS = ("int8", "int16", "int32", "uint8", "uint16", "uint32")
_RAND2 = (
    "float8_e4m3",
    "float8_e5m2",
    "float16",
    "bfloat16",
    "float32",
    "tfloat32",
    *_INTS,
)


def _no_gpsimd_psum(call, which, *ts):
    if which == "gpsimd" and any(t._decl.space == "psum" for t in ts):
        fail(call, "the GpSimd engine cannot access PSUM")


def _scalar(call, what, value, srcs, p):
    """A number, or a ``[P, 1]`` tensor (its source index) of the instruction."""
    if isinstance(value, NkiTensor):
        if value.shape[0] != p or free_size(value) != 1:
            fail(call, f"{what} {list(value.shape)} must be a number or a [{p}, 1] tensor")
        srcs.append(operand(call, what, value, ("sbuf", "psum")))
        return {"tensor": len(srcs) - 1}
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    fail(call, f"{what} must be a number or a [P, 1] tensor, not {value!r}")


def rng(dst, engine=engine.vector, name=None):
    """32 random bits per element of ``dst`` (an integer type: their low bits)."""
    call = "nisa.rng"
    tr = current(call)
    allowed = ("vector",) if tr.core.name == "v2" else ("vector", "gpsimd")
    which = pick_engine(call, engine, allowed, "vector")
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    _no_gpsimd_psum(call, which, dst)
    if dst.dtype not in _INTS:
        fail(call, f"dst dtype {dst.dtype} must be an integer type ({', '.join(_INTS)})")
    emit(which, "rng", [d], [], {}, call)


def rand2(dst, min, max, name=None):  # noqa: A002 (the reference's names)
    """Uniform random values in ``[min, max]`` (NeuronCore-v4, Vector Engine)."""
    call = "nisa.rand2"
    tr = current(call)
    if tr.core.name != "v4":
        fail(call, f"rand2 needs NeuronCore-v4, the kernel targets {tr.core.name}")
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    if dst.dtype not in _RAND2:
        fail(call, f"dst dtype {dst.dtype} must be one of {', '.join(_RAND2)}")
    srcs = []
    p = dst.shape[0]
    lo = _scalar(call, "min", min, srcs, p)
    hi = _scalar(call, "max", max, srcs, p)
    if isinstance(lo, float) and isinstance(hi, float) and not lo < hi:
        fail(call, f"min {lo} must be below max {hi}")
    emit("vector", "rand2", [d], srcs, {"min": lo, "max": hi}, call)


def dropout(dst, data, prob, name=None):
    """``data`` with each element zeroed with probability ``prob`` (a number or a ``[P, 1]``
    tensor), on the Vector Engine."""
    call = "nisa.dropout"
    srcs = [operand(call, "data", data, ("sbuf", "psum"))]
    d = operand(call, "dst", dst, ("sbuf", "psum"))
    same_layout(call, dst, ("data", data))
    if dst.dtype != data.dtype:
        fail(call, f"dst dtype {dst.dtype} must be data's {data.dtype}")
    if isinstance(prob, NkiTensor):
        ints = dtype_of(data.dtype).fmt is None
        if ints and prob.dtype != "float32":
            fail(call, f"prob is {prob.dtype}; with integer data it must be float32")
        if not ints and dtype_of(prob.dtype).fmt is None:
            fail(call, f"prob is {prob.dtype}; it must be a float type")
    elif isinstance(prob, (int, float, np.integer, np.floating)) and not 0 <= float(prob) <= 1:
        fail(call, f"prob {prob} must be a probability in [0, 1]")
    pr = _scalar(call, "prob", prob, srcs, data.shape[0])
    emit("vector", "dropout", [d], srcs, {"prob": pr}, call)


def _seed_words(call, src, which):
    if src.dtype != "uint32":
        fail(call, f"the seeds are uint32, not {src.dtype}")
    want = 6 * GENERATORS[which]
    if len(src.shape) != 2 or src.shape[1] != want:
        fail(
            call,
            f"{list(src.shape)}: the {which} engine's XORWOW state is {want} uint32 words per "
            f"partition ([P, {want}])",
        )


def set_rng_seed(src_seeds, name=None):
    """Seed the Vector Engine's generators from a ``[1, 1]`` 32-bit value."""
    call = "nisa.set_rng_seed"
    s = operand(call, "src_seeds", src_seeds, ("sbuf", "psum"))
    if tuple(src_seeds.shape) != (1, 1):
        fail(call, f"src_seeds {list(src_seeds.shape)} must be a [1, 1] tensor")
    if dtype_of(src_seeds.dtype).itemsize != 4 or dtype_of(src_seeds.dtype).packed != 1:
        fail(call, f"src_seeds is {src_seeds.dtype}; the seed is a 32-bit value")
    emit("vector", "set_rng_seed", [], [s], {}, call)


def _state_engine(call, value, tr):
    if tr.core.name == "v2":
        fail(call, "the generators' state is NeuronCore-v3 and later")
    allowed = ("gpsimd",) if tr.core.name == "v3" else ("gpsimd", "vector")
    return pick_engine(call, value, allowed, "gpsimd")


def rand_set_state(src_seeds, engine=engine.gpsimd, name=None):
    """Load the generators' state of each lane from ``src_seeds`` ``[P, 6]`` (GpSimd) or
    ``[P, 24]`` (Vector, NeuronCore-v4) uint32."""
    call = "nisa.rand_set_state"
    which = _state_engine(call, engine, current(call))
    s = operand(call, "src_seeds", src_seeds, ("sbuf",))
    _seed_words(call, src_seeds, which)
    emit(which, "rand_set_state", [], [s], {}, call)


def rand_get_state(dst, engine=engine.gpsimd, name=None):
    """Store the generators' state of each lane in ``dst`` (the layout of
    :func:`rand_set_state`)."""
    call = "nisa.rand_get_state"
    tr = current(call)
    which = _state_engine(call, engine, tr)
    spaces = ("sbuf",) if tr.core.name == "v3" else ("sbuf", "psum")
    d = operand(call, "dst", dst, spaces)
    _no_gpsimd_psum(call, which, dst)
    _seed_words(call, dst, which)
    emit(which, "rand_get_state", [d], [], {}, call)
