"""``neuronxcc.nki.compiler``: the older API's compiler directives, as ncrtl takes them.

ncrtl has no compiler passes to steer, so the directives change nothing in the traced streams:
``@nki.compiler.skip_middle_end_transformations`` and ``@nki.compiler.force_auto_alloc``
return the kernel as it is, ``nki.compiler.no_reorder()`` is a directive object
``nl.sequential_range(..., directives=)`` accepts (the loop runs in program order anyway).

Manual allocation (``nki.compiler.sbuf.mod_alloc(base_addr=..., num_free_tiles=...)``,
``psum.mod_alloc(base_bank=..., num_bank_tiles=...)``, ``sbuf.alloc(func)``,
``psum.alloc(func)``, ``auto_alloc()``) names the buffer, SBUF or PSUM: the value is equal to
``nl.sbuf`` / ``nl.psum`` (a ``str``), so ``nl.ndarray(..., buffer=...)`` puts the tensor there,
and ncrtl's allocator places it from the tensors' lifetimes, as for ``buffer=nl.sbuf``.  The
addresses and tile counts are kept on the value (``.allocation``) and not honoured: a kernel
that places its tensors by hand is timed with the allocator's placement (docs/nki/legacy.md,
"Compiler directives").  Other names of the module are stand-ins that raise ``NotModelled``.
"""

from __future__ import annotations

import types

from .. import _trace

__all__ = [
    "skip_middle_end_transformations",
    "force_auto_alloc",
    "no_reorder",
    "sbuf",
    "psum",
    "Allocation",
]


def skip_middle_end_transformations(kernel):
    """A directive to NKI's compiler; the kernel as it is."""
    return kernel


def force_auto_alloc(kernel):
    """A directive to NKI's compiler (automatic allocation: ncrtl's own); the kernel as it is."""
    return kernel


class no_reorder:
    """``nki.compiler.no_reorder()``: a loop directive (``nl.sequential_range(n,
    directives=nki.compiler.no_reorder())``); ncrtl's loops keep program order."""

    def __repr__(self):
        return "nki.compiler.no_reorder()"


class Allocation(str):
    """A manual allocation of the older API: equal to the buffer it names (``"sbuf"`` or
    ``"psum"``), its arguments in ``.allocation`` (not honoured: the allocator places the
    tensor)."""

    def __new__(cls, buffer, call, **allocation):
        self = super().__new__(cls, buffer)
        self.call = call
        self.allocation = allocation
        return self

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.allocation.items())
        return f"{self.call}({args})"


def _space(buffer):
    short = f"nki.compiler.{buffer}"

    def mod_alloc(*args, **kwargs):
        """A modular allocation (its base address / bank and tile counts): the buffer."""
        if args:
            _trace.fail(
                f"{short}.mod_alloc",
                "give its arguments by name (base_addr=, num_free_tiles=, base_bank=, ...)",
            )
        return Allocation(buffer, f"{short}.mod_alloc", **kwargs)

    def alloc(func):
        """An allocation by a function of the block indices: the buffer."""
        if not callable(func):
            _trace.fail(f"{short}.alloc", f"{func!r} is not a function of the block indices")
        return Allocation(buffer, f"{short}.alloc", func=func)

    def auto_alloc():
        """The compiler's own allocation: the buffer."""
        return Allocation(buffer, f"{short}.auto_alloc")

    module = types.SimpleNamespace(mod_alloc=mod_alloc, alloc=alloc, auto_alloc=auto_alloc)
    module.__doc__ = f"``{short}``: manual {buffer.upper()} allocation (placed by ncrtl)."
    return module


sbuf = _space("sbuf")
psum = _space("psum")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _trace.stand_in("neuronxcc.nki.compiler", "nki.compiler", name)
