"""Kernels for the RTL NeuronCore tests (docs/neuroncore.md): the eviction engine's
conversions, and instructions it refuses."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def evictions(x):
    """x (float32 [P, F]) into SBUF, rounded to bfloat16 and float16 and copied as it is by the
    eviction engine (SBUF -> SBUF), the three back to the device memory."""
    P, F = x.shape
    a = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    outs = []
    for dt in (nl.bfloat16, nl.float16, nl.float32):
        b = nl.ndarray((P, F), dtype=dt, buffer=nl.sbuf)
        nisa.tensor_copy(dst=b, src=a)
        o = nl.ndarray((P, F), dtype=dt, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=b)
        outs.append(o)
    return tuple(outs)


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
