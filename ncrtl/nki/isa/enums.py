"""The enumerations of ``nki.isa`` (engines, matmul performance modes, descriptor generation,
out-of-bounds handling, accumulation commands, DMA paths, core versions) and
:func:`get_nc_version`."""

from __future__ import annotations

import enum

from .._trace import current


class engine(enum.IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


tensor_engine, scalar_engine, gpsimd_engine, vector_engine, unknown_engine = (
    engine.tensor,
    engine.scalar,
    engine.gpsimd,
    engine.vector,
    engine.unknown,
)


class matmul_perf_mode(str, enum.Enum):
    none = "none"
    double_row = "double_row"


class dge_mode(enum.IntEnum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.IntEnum):
    error = 0
    skip = 1


class reduce_cmd(enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dma_engine(enum.IntEnum):
    dma = 1
    gpsimd_dma = 2


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version():
    return nc_version(int(current("nisa.get_nc_version").core.name[1]))
