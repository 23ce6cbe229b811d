"""``ncrtl.nki``: NKI kernels, as kernel authors write them, on ncrtl's NeuronCore models.

``import ncrtl.nki as nki`` (or, under ``ncrtl run``, plain ``import nki``): ``nki.jit``,
``nki.simulate``, ``nki.language`` (``nl``) and ``nki.isa`` (``nisa``) with the public NKI API's
names and argument conventions.  A kernel call traces the kernel into per-engine instruction
streams (:mod:`ncrtl.model.kernel.stream`), runs them on the bit-exact goldens and returns numpy
arrays; :func:`run` also runs the timing model.  See docs/kernels.md.
"""

import sys

from . import isa, language
from ._trace import Bounds, NkiError, NotModelled, TraceLimit, kernel_code, kernel_error
from .kernel import Kernel, Result, jit, run, simulate, trace

__all__ = [
    "jit",
    "simulate",
    "language",
    "isa",
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
    import types

    if "neuronxcc" not in sys.modules:
        pkg = types.ModuleType("neuronxcc")
        pkg.__path__ = []
        pkg.nki = me
        sys.modules["neuronxcc"] = pkg
    sys.modules.setdefault("neuronxcc.nki", me)
    sys.modules.setdefault("neuronxcc.nki.language", language)
    sys.modules.setdefault("neuronxcc.nki.isa", isa)
