"""Kernels on one NeuronCore: the per-engine instruction streams, their golden run and their
timing (docs/kernels.md).

* :mod:`.stream` -- the instruction envelope, operands, the program and its JSON form.
* :mod:`.build` -- a traced kernel's calls to streams: placement and semaphores.
* :mod:`.golden` -- the streams on the bit-exact goldens over one shared state.
* :mod:`.timing` -- the event-driven timing of the whole core.
* :mod:`.dtypes` -- the element types by their NKI names.
"""

from . import build, dtypes, golden, stream, timing
from .stream import CORES, Core, Instruction, Program, Ref

__all__ = [
    "build",
    "dtypes",
    "golden",
    "stream",
    "timing",
    "CORES",
    "Core",
    "Instruction",
    "Program",
    "Ref",
]
