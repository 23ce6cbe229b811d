"""The language's shared constants and its random numbers: ``nl.shared_constant``,
``nl.shared_identity_matrix``, ``nl.rand``, ``nl.random_seed`` and ``nl.dropout``
(docs/nki/multicore.md).

A shared constant is a device tensor the runtime fills before the kernel runs (an instruction
``shared_constant`` that the golden applies and the timing run gives no time); the identity
matrix is one such constant copied to SBUF by one DMA transfer, made once per ``(n, dtype)``
and core and then reused, as NKI's compiler reuses it.
"""

from __future__ import annotations

import os

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of

from . import _trace
from ._trace import NkiTensor, caller_line, current, fail

__all__ = ["shared_constant", "shared_identity_matrix", "rand", "random_seed", "dropout"]

_CONSTANT_DTYPES = (
    "float32",
    "float16",
    "bfloat16",
    "int32",
    "int16",
    "int8",
    "uint32",
    "uint16",
    "uint8",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3",
)


def _constant_tensor(call, shape, dtype, args, key):
    """The device tensor of a constant (one per ``key`` and core), filled before the kernel."""
    tr = current(call)
    got = tr.shared.get(key)
    if got is not None:
        return got
    from .isa.operands import emit

    decl = tr.builder.tensor(
        "hbm", shape, dtype, name="shared_constant", kind="internal", line=caller_line()
    )
    t = _trace.tensor(decl)
    emit("dma", "shared_constant", [t._operand(call, "constant")], [], args, call)
    tr.shared[key] = t
    return t


def shared_constant(constant):
    """A device tensor holding ``constant`` (a numpy array, or the path of a ``.npy`` file)."""
    call = "nl.shared_constant"
    if isinstance(constant, (str, os.PathLike)):
        try:
            constant = np.load(constant)
        except (OSError, ValueError) as e:
            fail(call, f"constant {str(constant)!r}: {e}")
    if not isinstance(constant, np.ndarray):
        fail(call, f"constant must be a numpy array or a .npy file's path, not {constant!r}")
    try:
        d = dtype_of(constant.dtype)
    except ValueError as e:
        fail(call, str(e))
    if d.name not in _CONSTANT_DTYPES:
        fail(call, f"a constant of {d.name}: one of {', '.join(_CONSTANT_DTYPES)}")
    a = np.ascontiguousarray(constant)
    data = a.reshape(-1).view(np.uint8).tobytes()
    key = ("constant", a.shape or (1,), d.name, data)
    return _constant_tensor(call, a.shape or (1,), d.name, {"hex": data.hex()}, key)


def shared_identity_matrix(n, dtype="uint8", dst=None):
    """An ``n x n`` identity of ``dtype`` in SBUF (``dst``: written there instead)."""
    call = "nl.shared_identity_matrix"
    tr = current(call)
    n = _trace._int(n, "n", call)
    if not 1 <= n <= tr.core.partitions:
        fail(call, f"n={n}: an SBUF identity has 1 to {tr.core.partitions} rows")
    try:
        d = dtype_of(dtype)
    except ValueError as e:
        fail(call, str(e))
    if d.packed != 1:
        fail(call, f"dtype {d.name}: an identity of a packed type is not defined")
    from . import isa, language

    if dst is not None:
        if not isinstance(dst, NkiTensor) or dst._decl.space != "sbuf":
            fail(call, f"dst must be an SBUF tensor, not {dst!r}")
        if tuple(dst.shape) != (n, n) or dst.dtype != d.name:
            fail(call, f"dst {list(dst.shape)} {dst.dtype} must be [{n}, {n}] {d.name}")
    key = ("identity", n, d.name)
    src = _constant_tensor(call, (n, n), d.name, {"identity": n}, key)
    if dst is not None:
        isa.dma_copy(dst=dst, src=src)
        return dst
    tile = tr.shared.get(("identity sbuf", n, d.name))
    if tile is None:
        tile = language.ndarray((n, n), d.name, buffer=language.sbuf, name="identity")
        isa.dma_copy(dst=tile, src=src)
        tr.shared[("identity sbuf", n, d.name)] = tile
    return tile


def rand(shape, dtype, buffer="sbuf", name=""):
    """A new on-chip tensor of uniform random values in ``[0, 1)``: one Vector Engine
    ``rand2`` instruction (min 0, max 1) on every core version."""
    call = "nl.rand"
    from . import language
    from .isa.operands import emit, operand

    if buffer not in (language.sbuf, language.psum):
        fail(call, f"buffer must be nl.sbuf or nl.psum (an engine writes it), not {buffer!r}")
    t = language.ndarray(shape, dtype, buffer=buffer, name=name)
    if dtype_of(t.dtype).packed != 1:
        fail(call, f"dtype {t.dtype}: random values of a packed type are not defined")
    emit(
        "vector",
        "rand2",
        [operand(call, "dst", t, ("sbuf", "psum"))],
        [],
        {"min": 0.0, "max": 1.0},
        call,
    )
    return t


def random_seed(seed):
    """Seed the random numbers (``nisa.set_rng_seed``) from a ``[1, 1]`` 32-bit tensor."""
    from . import isa

    isa.set_rng_seed(seed)


def dropout(x, rate, dtype=None):
    """A new SBUF tile: ``x`` with each element zeroed with probability ``rate``
    (``nisa.dropout``), converted to ``dtype`` when given (``nisa.tensor_copy``)."""
    call = "nl.dropout"
    from . import isa, language

    if not isinstance(x, NkiTensor):
        fail(call, f"x must be a tile, not {x!r}")
    out = language.ndarray(tuple(x.shape), x.dtype, buffer=language.sbuf)
    isa.dropout(dst=out, data=x, prob=rate)
    if dtype is None or dtype_of(dtype).name == x.dtype:
        return out
    conv = language.ndarray(tuple(x.shape), dtype, buffer=language.sbuf)
    isa.tensor_copy(dst=conv, src=out)
    return conv
