"""``neuronxcc.nki.typing`` (``import neuronxcc.nki.typing as nt``): the annotation types of the
older API, ``nt.tensor[128, 512]`` / ``nt.tensor[shape, dtype]``.  As in the current API's
:mod:`ncrtl.nki.typing` (the same types), annotations are not checked: each type takes any
subscript, and ``isinstance`` answers for the values ncrtl passes (a tensor or tile, a shape, a
number, a dtype's name).  A name the module does not have is a stand-in that raises
``NotModelled`` naming it when the kernel uses it."""

from __future__ import annotations

from .. import _trace
from ..typing import dtype, mutable_tensor, scalar, shape, tensor

__all__ = ["tensor", "mutable_tensor", "scalar", "shape", "dtype"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _trace.stand_in("neuronxcc.nki.typing", "nt", name)
