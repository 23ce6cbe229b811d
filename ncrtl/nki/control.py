"""The language's dynamic control flow: ``nl.dynamic_range``, ``nl.fori_loop``,
``nl.while_loop`` and ``while reg:`` (docs/nki/control.md).

A dynamic loop runs on the device: its trip count is read from a register when the streams
run, never when the kernel is traced.  Its body is traced once, between a ``loop_open`` and a
``loop_close`` the builder turns into a ``loop_begin`` and a ``loop_end`` on every stream of
the body (``ncrtl.model.kernel.loops``).  The static loops (``nl.affine_range``,
``nl.sequential_range``, ``nl.static_range``, ``range``) stay unrolled.
"""

from __future__ import annotations

import sys

from ncrtl.model.kernel.loops import TRACED

from . import _trace
from ._trace import NkiError, _int, caller_line, current, fail
from .isa.operands import emit
from .isa.registers import VirtualRegister, register, value

__all__ = ["dynamic_range", "fori_loop", "while_loop"]


class _Loop:
    """A dynamic loop being traced: its id, its call and line, its arguments; for a ``while
    reg:`` the register and the kernel's frame and line of the statement."""

    def __init__(self, trace, call, args, line, reg=None, frame=None):
        self.trace, self.call, self.line = trace, call, line
        self.id = getattr(trace, "_loop_ids", 0)
        trace._loop_ids = self.id + 1
        self.args = {"loop": self.id, **args}
        self.reg, self.frame = reg, frame
        self.lineno = frame.f_lineno if frame is not None else None
        emit(TRACED, "loop_open", (), (), self.args, call)
        trace.loops.append(self)

    def close(self, **args):
        tr = self.trace
        if not tr.loops or tr.loops[-1] is not self:
            inner = tr.loops[-1] if tr.loops else None
            fail(
                self.call,
                f"the dynamic loop of {inner.line} is still open inside this one (a `break` out "
                f"of it, or an `if reg:`): dynamic loops end innermost first",
            )
        tr.loops.pop()
        emit(TRACED, "loop_close", (), (), {"loop": self.id, **args}, self.call)

    def unclosed(self):
        """Raise: the kernel returned with this loop open."""
        if self.reg is not None:
            rule = (
                f"the truth of register {self.reg.name} opened a dynamic while loop that never "
                f"closed: a register's truth is only a `while reg:` loop's condition (`if "
                f"reg:`, `not reg`, `and` / `or` are not modelled), and a dynamic loop has no "
                f"`break`"
            )
        else:
            rule = (
                "the dynamic loop never ended: a loop on a run-time count runs its whole body "
                "each iteration (no `break`, no `return` out of it)"
            )
        raise NkiError(f"{self.line}: {self.call}: {rule}")


class _Range:
    """The iterator of ``nl.dynamic_range``: the first ``next`` opens the loop and gives its
    induction register; the second closes it."""

    __slots__ = ("call", "args", "loop", "state")

    def __init__(self, call, args):
        self.call, self.args = call, args
        self.loop, self.state = None, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.state == 0:
            self.state = 1
            tr = current(self.call)
            var = VirtualRegister(tr, caller_line())
            self.loop = _Loop(tr, self.call, {**self.args, "var": var.name}, caller_line())
            return var
        if self.state == 1:
            self.state = 2
            self.loop.close()
        raise StopIteration

    def __repr__(self):
        a = self.args
        return f"nl.dynamic_range({a['start']}, {a['stop']}, {a['step']})"


def _bounds(call, start, stop, step):
    if stop is None:
        start, stop = 0, start
    lo, hi = value(call, "start", start), value(call, "stop", stop)
    if isinstance(step, VirtualRegister):
        fail(
            call, "step must be a positive integer known when the kernel is traced, not a register"
        )
    step = _int(step, "step", call)
    if step < 1:
        fail(call, f"step must be a positive integer, not {step}")
    return {"kind": "range", "start": lo, "stop": hi, "step": step}


def dynamic_range(start, stop=None, step=1):
    """A loop run on the device from ``start`` to ``stop`` (exclusive) by ``step``: ``start``
    and ``stop`` integers or registers (read when the loop begins, ``stop`` at every test),
    ``step`` a positive integer.  ``for i in nl.dynamic_range(...)`` gives ``i``, the induction
    register."""
    call = "nl.dynamic_range"
    current(call)
    return _Range(call, _bounds(call, start, stop, step))


def fori_loop(lower, upper, body_fun, step=1):
    """``for i in range(lower, upper, step): body_fun(i)`` on the device: ``body_fun`` is
    traced once with the induction register ``i``."""
    call = "nl.fori_loop"
    current(call)
    args = _bounds(call, lower, upper, step)
    if not callable(body_fun):
        fail(call, f"body_fun must be a function of the induction register, not {body_fun!r}")
    loop = _Range(call, args)
    i = next(loop)
    body_fun(i)
    for _ in loop:  # closes it
        pass


def while_loop(init, body_fun):
    """``r = init; while r != 0: r = body_fun(r)`` on the device: ``body_fun`` is traced once
    with the condition register and returns the register of the next condition."""
    call = "nl.while_loop"
    tr = current(call)
    first = value(call, "init", init)
    if not callable(body_fun):
        fail(call, f"body_fun must be a function of the condition register, not {body_fun!r}")
    r = VirtualRegister(tr, caller_line())
    loop = _Loop(tr, call, {"kind": "while", "init": first, "var": r.name}, caller_line())
    nxt = body_fun(r)
    if not isinstance(nxt, VirtualRegister):
        fail(call, f"body_fun returns {nxt!r}: it returns the register of the next condition")
    loop.close(next=register(call, "body_fun's result", nxt))


def truth(reg):
    """The truth of register ``reg`` in the kernel's ``while reg:``: the first time at a
    statement it opens a dynamic while loop on ``reg`` (True: Python traces the body once);
    at the same statement again (the loop's next test) it closes it (False)."""
    tr = current("while reg")
    name = register("while reg", "the condition", reg)
    call = f"while {name}"
    f = sys._getframe(1)
    while f is not None and _trace._inside(f.f_code.co_filename):
        f = f.f_back
    top = tr.loops[-1] if tr.loops else None
    if (
        top is not None
        and top.reg is reg
        and top.frame is f
        and f is not None
        and top.lineno == f.f_lineno
    ):
        top.close(next=name)
        top.frame = None
        return False
    _Loop(tr, call, {"kind": "while", "init": name, "var": name}, caller_line(), reg=reg, frame=f)
    return True
