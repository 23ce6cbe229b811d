"""Kernels for the RTL NeuronCore tests (docs/neuroncore.md): an instruction it refuses."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def uses_activation(x):
    P, F = x.shape
    a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    b = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=b, op=nl.exp, data=a)  # LINE activation
    o = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=b)
    return o
