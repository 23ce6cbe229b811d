"""``nki.typing`` (``import nki.typing as nt``) and ``nki.dtype``: the types kernels write in
their annotations.  Annotations are not checked (NKI's are hints to its tracer); each type
takes the subscripts kernels give it (``nt.tensor[shape, dtype]``) and ``isinstance`` answers
for the values ncrtl passes (an :class:`~ncrtl.nki._trace.NkiTensor`, a dtype's name)."""

from __future__ import annotations

from ncrtl.model.kernel.dtypes import DTYPES

from ._trace import NkiTensor

__all__ = ["tensor", "mutable_tensor", "shape", "scalar", "dtype"]


class _Subscriptable(type):
    def __getitem__(cls, params):
        return cls

    def __instancecheck__(cls, value):
        return cls._accepts(value)


class tensor(metaclass=_Subscriptable):
    """A kernel argument or tile: an NKI tensor (``nt.tensor[shape, dtype]`` alike)."""

    @staticmethod
    def _accepts(value):
        return isinstance(value, NkiTensor)


class mutable_tensor(tensor):
    """A tensor the kernel writes in place (an input it updates)."""


class shape(metaclass=_Subscriptable):
    """A tensor's shape: a tuple of integers."""

    @staticmethod
    def _accepts(value):
        return isinstance(value, tuple) and all(isinstance(v, int) for v in value)


class scalar(metaclass=_Subscriptable):
    """A number known when the kernel is traced."""

    @staticmethod
    def _accepts(value):
        return isinstance(value, (int, float)) and not isinstance(value, bool)


class dtype(metaclass=_Subscriptable):
    """``nki.dtype``: a data type (ncrtl's are their NKI names, ``nl.float32 == "float32"``)."""

    @staticmethod
    def _accepts(value):
        return isinstance(value, str) and value in DTYPES
