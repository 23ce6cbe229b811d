"""The kernel golden's operations by engine family, one module each; :data:`OPS` maps an
instruction's ``op`` to the function that applies it to a
:class:`~ncrtl.model.kernel.golden.CoreState` (``fn(state, ins)``), and :data:`STREAMS` an
``op`` whose Vector / Scalar / GpSimd cost is not the element-wise one to the function that
gives ``(elements per partition streamed, tensor inputs)`` for the timing run
(:mod:`ncrtl.model.kernel.timing`, docs/kernels.md "Costs").  The Tensor Engine operations
are :mod:`ncrtl.model.kernel.golden`'s own."""

from __future__ import annotations

from . import debug, dma, elementwise, random, reduce, registers, select, shared

__all__ = ["OPS", "STREAMS"]

_FAMILIES = (debug, dma, elementwise, random, reduce, registers, select, shared)

OPS = {}
STREAMS = {}
for _m in _FAMILIES:
    OPS.update(_m.OPS)
    STREAMS.update(getattr(_m, "STREAMS", {}))
