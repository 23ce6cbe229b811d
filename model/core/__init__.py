"""Golden model of the NeuronCore matmul path: Tensor Engine matmuls written into PSUM."""

from .matmul import chunk_flags, nc_matmul

__all__ = ["nc_matmul", "chunk_flags"]
