"""``nki.isa.constants``: the enumerations of ``nki.isa`` under the module the library imports
them from (``from nki.isa.constants import oob_mode, dge_mode``); the same objects as
``nisa.oob_mode`` ... (:mod:`.enums`)."""

from __future__ import annotations

from .enums import (
    dge_mode,
    dma_engine,
    engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
)

__all__ = [
    "dge_mode",
    "dma_engine",
    "engine",
    "matmul_perf_mode",
    "nc_version",
    "oob_mode",
    "reduce_cmd",
]
