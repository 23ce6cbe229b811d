"""``nki.isa`` as ncrtl models it: each call checks its operands against the ISA's rules when
the kernel is traced and appends one instruction to its engine's stream.

One module per engine family: :mod:`.tensor` (the Tensor Engine), :mod:`.vector` (the Vector,
Scalar and GpSimd engines' element-wise instructions), :mod:`.dma` (the DMA engines); the
enumerations are :mod:`.enums`, what every call shares (operands, the stream) :mod:`.operands`.
A name the reference has and ncrtl does not model is a stand-in that raises ``NotModelled``
naming it.  Every error starts with the kernel's ``file:line``.
"""

from __future__ import annotations

from .. import _trace
from . import collective, random, reduce, registers, select, vector
from .collective import *  # noqa: F403
from .dma import dma_compute, dma_copy, dma_transpose, get_nc_sub_version, sendrecv
from .enums import (
    dge_mode,
    dma_engine,
    engine,
    get_nc_version,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from .random import *  # noqa: F403
from .reduce import *  # noqa: F403
from .registers import *  # noqa: F403
from .select import *  # noqa: F403
from .tensor import nc_matmul, nc_matmul_mx, nc_matmul_sparse, nc_transpose
from .vector import *  # noqa: F403

__all__ = [
    "dma_compute",
    "dma_copy",
    "dma_transpose",
    "get_nc_sub_version",
    "sendrecv",
    "dge_mode",
    "dma_engine",
    "engine",
    "get_nc_version",
    "gpsimd_engine",
    "matmul_perf_mode",
    "nc_version",
    "oob_mode",
    "reduce_cmd",
    "scalar_engine",
    "tensor_engine",
    "unknown_engine",
    "vector_engine",
    "nc_matmul",
    "nc_matmul_mx",
    "nc_matmul_sparse",
    "nc_transpose",
]
__all__ += collective.__all__ + random.__all__ + reduce.__all__  # noqa: F405
__all__ += registers.__all__ + select.__all__ + vector.__all__  # noqa: F405


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _trace.stand_in("nki.isa", "nisa", name)


_trace.checked_module(globals(), "nisa")
