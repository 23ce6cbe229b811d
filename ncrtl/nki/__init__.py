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
from .kernel import Kernel, PerRank, Result, jit, per_rank, run, simulate, trace
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
    "PerRank",
    "per_rank",
    "install_aliases",
]


def install_aliases():
    """Make ``import nki`` resolve to ``ncrtl.nki`` (the current API) and ``import
    neuronxcc.nki`` (with its ``language``, ``isa``, ``typing``, ``compiler``) to
    :mod:`ncrtl.nki.legacy` (the API before NKI 0.2), each a module of its own."""
    me = sys.modules[__name__]
    sys.modules.setdefault("nki", me)
    sys.modules.setdefault("nki.language", language)
    sys.modules.setdefault("nki.isa", isa)
    sys.modules.setdefault("nki.isa.constants", _constants)
    sys.modules.setdefault("nki.collectives", collectives)
    sys.modules.setdefault("nki.typing", typing)
    if not any(isinstance(f, _LegacyFinder) for f in sys.meta_path):
        ours = sys.modules.get("neuronxcc")
        if ours is None or getattr(ours, "__ncrtl__", False):
            sys.meta_path.insert(0, _LegacyFinder())


class _LegacyFinder:
    """Imports of ``neuronxcc`` and ``neuronxcc.nki[.x]``: ``neuronxcc`` is an empty package,
    ``neuronxcc.nki.x`` the module ``ncrtl.nki.legacy.x`` itself (one module under both names,
    imported when a kernel first imports it); a module the older API had and ncrtl does not
    model (``neuronxcc.nki.kernels``) raises :class:`NotModelled` naming it."""

    PREFIX = "neuronxcc"
    TARGET = __name__ + ".legacy"

    def find_spec(self, fullname, path=None, target=None):
        import importlib.util
        import types

        if fullname != self.PREFIX and not fullname.startswith(self.PREFIX + "."):
            return None
        if fullname == self.PREFIX:
            module = types.ModuleType(fullname)
            module.__path__ = []
            module.__ncrtl__ = True
        elif fullname == self.PREFIX + ".nki" or fullname.startswith(self.PREFIX + ".nki."):
            real = self.TARGET + fullname[len(self.PREFIX + ".nki") :]
            try:
                module = importlib.import_module(real)
            except ModuleNotFoundError as e:
                if e.name != real:
                    raise
                module = None
        else:
            module = None
        if module is None:
            raise NotModelled(
                f"{_import_line()}: {fullname} is not modelled by ncrtl (docs/nki/legacy.md)"
            )
        spec = importlib.util.spec_from_loader(
            fullname, self, is_package=hasattr(module, "__path__")
        )
        keep = ("__name__", "__loader__", "__package__", "__spec__", "__path__", "__file__")
        spec.loader_state = module, {k: module.__dict__[k] for k in keep if k in module.__dict__}
        return spec

    def create_module(self, spec):
        return spec.loader_state[0]

    def exec_module(self, module):
        # the import machinery set the alias's name and spec on the module: its own again
        module.__dict__.update(module.__spec__.loader_state[1])


def _import_line():
    """``file:line`` of the import statement (the innermost frame outside ncrtl.nki and the
    import machinery)."""
    f = sys._getframe(1)
    while f is not None and (
        f.f_code.co_filename.startswith("<frozen") or f.f_code.co_filename == __file__
    ):
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "<unknown>"
