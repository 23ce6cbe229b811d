"""``ncrtl.nki``: NKI kernels, as kernel authors write them, on ncrtl's NeuronCore models.

``import ncrtl.nki as nki`` (or, under ``ncrtl run``, plain ``import nki``): ``nki.jit``,
``nki.simulate``, ``nki.language`` (``nl``) and ``nki.isa`` (``nisa``) with the public NKI API's
names and argument conventions.  A kernel call traces the kernel into per-engine instruction
streams (:mod:`ncrtl.model.kernel.stream`), runs them on the bit-exact goldens and returns numpy
arrays; :func:`run` also runs the timing model.  See docs/kernels.md.
"""

import importlib
import sys

from . import collectives, isa, language, typing
from ._trace import Bounds, NkiError, NotModelled, TraceLimit, kernel_code, kernel_error
from .kernel import Kernel, Result, jit, run, simulate, trace
from .typing import dtype

# nki.isa.constants, a module of its own (nki.isa answers unknown names with stand-ins, so
# ``from .isa import constants`` would find one)
_constants = importlib.import_module(f"{__name__}.isa.constants")

__all__ = [
    "jit",
    "simulate",
    "language",
    "isa",
    "collectives",
    "typing",
    "dtype",
    "Kernel",
    "NkiError",
    "NotModelled",
    "TraceLimit",
    "Bounds",
    "kernel_code",
    "kernel_error",
    "run",
    "trace",
    "Result",
    "install_aliases",
]


def install_aliases():
    """Make ``import nki`` (and the older ``neuronxcc.nki``) resolve to ``ncrtl.nki``."""
    me = sys.modules[__name__]
    sys.modules.setdefault("nki", me)
    sys.modules.setdefault("nki.language", language)
    sys.modules.setdefault("nki.isa", isa)
    sys.modules.setdefault("nki.isa.constants", _constants)
    sys.modules.setdefault("nki.collectives", collectives)
    sys.modules.setdefault("nki.typing", typing)
    import types

    if "neuronxcc" not in sys.modules:
        pkg = types.ModuleType("neuronxcc")
        pkg.__path__ = []
        pkg.nki = me
        sys.modules["neuronxcc"] = pkg
    sys.modules.setdefault("neuronxcc.nki", me)
    sys.modules.setdefault("neuronxcc.nki.language", language)
    sys.modules.setdefault("neuronxcc.nki.isa", isa)
    sys.modules.setdefault("neuronxcc.nki.isa.constants", _constants)
    sys.modules.setdefault("neuronxcc.nki.collectives", collectives)
    sys.modules.setdefault("neuronxcc.nki.typing", typing)
