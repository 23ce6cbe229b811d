"""Golden models of the Tensor Engine (docs/tensor_engine.md).

* :mod:`.isa` — instructions, validation rules (:func:`isa.check`) and the instruction word.
* :mod:`.matmul` — bit-exact values of one matmul / transpose (:func:`matmul`) and of one MX
  matmul (:func:`matmul_mx`, ``nc_matmul_mx``).
* :mod:`.sparse` — the M:N structured-sparse matmul (:func:`matmul_sparse`,
  ``nc_matmul_sparse``), its tags and the compression helpers.
* :mod:`.timing` — the cycle-level schedule of an instruction stream (:func:`timing.simulate`).
"""

from . import isa, sparse, timing
from .matmul import (
    OPERAND_FORMATS,
    PERF_MODES,
    InstructionError,
    matmul,
    matmul_bits,
    matmul_mx,
    matmul_mx_rows,
    mode_of,
    mx_row_scales,
    mx_scale_partitions,
    result_bits,
)
from .sparse import compress, decompress, matmul_sparse, squeeze_tags
from .timing import P_PREFIX, latency, simulate

__all__ = [
    "isa",
    "sparse",
    "timing",
    "matmul_sparse",
    "compress",
    "decompress",
    "squeeze_tags",
    "matmul",
    "matmul_bits",
    "matmul_mx",
    "matmul_mx_rows",
    "mx_row_scales",
    "mx_scale_partitions",
    "result_bits",
    "mode_of",
    "InstructionError",
    "OPERAND_FORMATS",
    "PERF_MODES",
    "P_PREFIX",
    "latency",
    "simulate",
]
