"""The engines' registers: ``nisa.register_alloc``, ``register_move``, ``register_load``,
``register_store`` (docs/nki/control.md).

A :class:`VirtualRegister` is a 32-bit integer the engines' sequencers hold, read when the
streams run: a dynamic loop's bound or condition (:mod:`ncrtl.nki.control`), a run-time
offset.  The tracer gives its instructions to no engine: the builder puts a copy on every
stream that reads the register (``ncrtl.model.kernel.loops.expand``), as NKI's compiler
allocates a virtual register on the engine sequencers that use it.  Its value is never known
when the kernel is traced: using it as a Python number (a shape, an index, ``int(r)``,
``r + 1``) is refused at the kernel's line.
"""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of
from ncrtl.model.kernel.loops import TRACED

from .._trace import NkiTensor, caller_line, current, fail
from .operands import emit, operand

__all__ = ["register_alloc", "register_move", "register_load", "register_store"]

_LOW, _HIGH = -(1 << 31), 1 << 32


class VirtualRegister:
    """A register of the engines' sequencers (``nisa.register_alloc``): ``name`` (``r0``
    ...), unique in its trace.  Its truth is a ``while reg:`` loop's condition
    (:func:`ncrtl.nki.control.truth`); any other use as a Python value is refused."""

    __slots__ = ("name", "_trace", "line")

    def __init__(self, trace, line):
        self.name = f"r{trace.registers}"
        trace.registers += 1
        self._trace = trace
        self.line = line

    def __repr__(self):
        return f"VirtualRegister({self.name})"

    def __bool__(self):
        from ..control import truth

        return truth(self)

    def _static(self, *_):
        fail(
            f"register {self.name}",
            "a register holds a value read when the streams run, not when the kernel is traced: "
            "it cannot be a shape, an index, a slice bound or a Python number (pass it to a "
            "dynamic loop, register_move or register_store, or use an SBUF tensor for arithmetic)",
        )

    __index__ = __int__ = __float__ = __iter__ = __len__ = _static
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _static
    __floordiv__ = __rfloordiv__ = __truediv__ = __rtruediv__ = __mod__ = __rmod__ = _static
    __lt__ = __le__ = __gt__ = __ge__ = __neg__ = __lshift__ = __rshift__ = _static
    __and__ = __or__ = __xor__ = __rand__ = __ror__ = __rxor__ = _static


def register(call, what, r):
    """``r`` as a register of the current trace (its name)."""
    tr = current(call)
    if not isinstance(r, VirtualRegister):
        fail(call, f"{what} must be a register (nisa.register_alloc()), not {r!r}")
    if r._trace is not tr:
        fail(
            call,
            f"{what} {r.name} was allocated by another trace ({r.line}): a register belongs to "
            f"the kernel (and core) that allocated it",
        )
    return r.name


def value(call, what, v):
    """``v`` as a register's name or a 32-bit immediate (an int)."""
    if isinstance(v, VirtualRegister):
        return register(call, what, v)
    if isinstance(v, np.integer):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        fail(call, f"{what} must be an integer or a register, not {v!r}")
    if not _LOW <= v < _HIGH:
        fail(call, f"{what}={v} does not fit a 32-bit register")
    return v


def _scalar(call, what, t, store):
    """The operand of the one-element tensor ``t`` a register is loaded from or stored to."""
    o = operand(call, what, t, ("sbuf", "hbm"))
    if t.size != 1:
        fail(call, f"{what} {t.name} {list(t.shape)} must hold one element ([1] or [1, 1])")
    d = dtype_of(t.dtype)
    if d.fmt is not None or d.packed != 1 or d.itemsize > 4:
        fail(call, f"{what} {t.name} is {t.dtype}: a register holds an integer of up to 32 bits")
    if store and d.itemsize != 4:
        fail(call, f"{what} {t.name} is {t.dtype}: a register is stored as int32 or uint32")
    return o


def register_alloc(x=None):
    """A new register: uninitialized (``None``), set to the integer ``x``, or loaded from the
    one-element tensor ``x`` (as the public kernels pass it)."""
    call = "nisa.register_alloc"
    tr = current(call)
    r = VirtualRegister(tr, caller_line())
    if x is None:
        return r
    if isinstance(x, NkiTensor):
        _load(call, "x", r.name, x)
        return r
    if isinstance(x, VirtualRegister):
        fail(
            call,
            "x must be an integer, a one-element tensor or None (copy a register with "
            "nisa.register_move)",
        )
    emit(TRACED, "register_move", (), (), {"dst": r.name, "imm": value(call, "x", x)}, call)
    return r


def register_move(dst, src):
    """``dst`` = ``src`` (an integer or another register)."""
    call = "nisa.register_move"
    d = register(call, "dst", dst)
    s = value(call, "src", src)
    args = {"dst": d, "src": s} if isinstance(s, str) else {"dst": d, "imm": s}
    emit(TRACED, "register_move", (), (), args, call)


def _load(call, what, name, src):
    o = _scalar(call, what, src, store=False)
    emit(TRACED, "register_load", (), (o,), {"dst": name}, call)


def register_load(dst, src):
    """``dst`` = the one integer element of ``src`` (SBUF or device memory), read when the
    streams run."""
    call = "nisa.register_load"
    _load(call, "src", register(call, "dst", dst), src)


def register_store(dst, src):
    """The one element of ``dst`` (int32 / uint32, SBUF or device memory) = register ``src``."""
    call = "nisa.register_store"
    name = register(call, "src", src)
    o = _scalar(call, "dst", dst, store=True)
    emit(TRACED, "register_store", (o,), (), {"src": name}, call)
