"""The NeuronCore as one RTL block: what its instruction queues take and which kernels it runs
(:mod:`ncrtl.model.neuroncore.isa`)."""

from ncrtl.model.neuroncore.isa import (
    COUNT_BITS,
    SEM_BITS,
    CopyOp,
    DmaOp,
    Encoded,
    Geometry,
    MatmulOp,
    Unsupported,
    Wait,
    encode,
)

__all__ = [
    "COUNT_BITS",
    "SEM_BITS",
    "CopyOp",
    "DmaOp",
    "Encoded",
    "Geometry",
    "MatmulOp",
    "Unsupported",
    "Wait",
    "encode",
]
