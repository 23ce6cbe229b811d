"""``ncrtl.model.dma``: the DMA engine's golden model.

* :mod:`~ncrtl.model.dma.access`: NKI access patterns (``.ap``) on numpy tensors: which elements,
  in which order; dtype reinterpretation, scalar and vector dynamic offsets, the SBUF partition
  rule.
* :mod:`~ncrtl.model.dma.isa`: descriptors (copy, transpose, read-add-write between the SBUF and
  the device memory), their rules and error codes.
* :mod:`~ncrtl.model.dma.engine`: a descriptor applied to the memories, bit for bit, and the
  NKI-level ``dma_copy`` / ``dma_transpose`` / ``dma_add`` on numpy tensors.
* :mod:`~ncrtl.model.dma.timing`: a descriptor's cycles on the engine, cycle for cycle the
  RTL's (``transfer_cycles``).
* :mod:`~ncrtl.model.dma.qos`, :mod:`~ncrtl.model.dma.queues`: the queues' arbitration and
  timing; :mod:`~ncrtl.model.dma.dge`: the Descriptor Generation Engine;
  :mod:`~ncrtl.model.dma.core`: the timing of a core's engines together;
  :mod:`~ncrtl.model.dma.sendrecv`: the exchange between the two cores of a logical core.

See docs/dma.md.
"""

from .access import AccessPattern, ap_indices, ap_view, ap_write, reinterpret_shape
from .engine import Memories, dma_add, dma_copy, dma_transpose, execute
from .isa import AddDtype, Descriptor, Error, Geometry, Indirect, Op, Side, Space, check

__all__ = [
    "AccessPattern",
    "ap_indices",
    "ap_view",
    "ap_write",
    "reinterpret_shape",
    "Memories",
    "execute",
    "dma_copy",
    "dma_transpose",
    "dma_add",
    "AddDtype",
    "Descriptor",
    "Error",
    "Geometry",
    "Indirect",
    "Op",
    "Side",
    "Space",
    "check",
]
