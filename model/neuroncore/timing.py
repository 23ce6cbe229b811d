"""The kernel timing model (:mod:`ncrtl.model.kernel.timing`) at the RTL core's figures, so that
its cycles compare with the RTL's (``ncrtl run --rtl``; docs/kernels.md, "The timing model
against the RTL core").

The RTL core runs every engine on one clock, its per-transfer DMA cost is its descriptor
generators' latency (``ncrtl.hdl.dma.dge.Dge``; the DMA engines themselves have none) and its
device memory answers after the testbench memory model's latency.  The timing model is run
with the same: one clock of :data:`RTL_MHZ` for every engine (a cycle is a nanosecond), the DMA
timing of the RTL's data word, reads in flight and memory latency, and the descriptor
generators' latency as the fixed per-transfer cost.  What still differs
is what the timing model approximates or what the RTL does not do yet; docs/kernels.md lists
each with its measured size.
"""

from __future__ import annotations

from dataclasses import replace

from ncrtl.model.dma.dge import DGE_CYCLES
from ncrtl.model.dma.timing import EngineTiming
from ncrtl.model.kernel import timing

__all__ = ["RTL_MHZ", "rtl_params", "simulate_at_rtl"]

#: The one clock of the RTL core, as the timing model's engine clocks: a cycle is 1 ns.
RTL_MHZ = 1000


def rtl_params(geo, latency, *, outstanding=8, dge_cycles=DGE_CYCLES):
    """The timing model's :class:`~ncrtl.model.kernel.timing.Params` at the RTL core's DMA
    figures: ``geo.word_bytes`` data words, ``outstanding`` reads in flight, a device memory
    of ``latency`` cycles, and as the per-transfer cost the descriptor generators' latency
    (``dge_cycles`` to the first part, one more cycle per DMA engine: the RTL's DMA engines
    themselves have none)."""
    dma = EngineTiming(
        word_bytes=geo.word_bytes,
        overhead=dge_cycles + geo.dma_engines,
        outstanding=outstanding,
        read_latency=latency,
        write_latency=latency,
    )
    return timing.Params(dma=dma)


def simulate_at_rtl(program, geo, latency, *, trace=False):
    """The timing model's :class:`~ncrtl.model.kernel.timing.Report` of ``program`` with every
    engine on the RTL core's one clock and its DMA figures (:func:`rtl_params`); its
    ``total_ns`` is in RTL cycles."""
    mhz = dict.fromkeys(
        ("tensor_mhz", "vector_mhz", "scalar_mhz", "gpsimd_mhz", "dma_mhz"), RTL_MHZ
    )
    at_rtl = replace(program, core=replace(program.core, **mhz))
    return timing.simulate(at_rtl, params=rtl_params(geo, latency), trace=trace)
