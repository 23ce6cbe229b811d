"""The kernel timing model (:mod:`ncrtl.model.kernel.timing`) at the RTL core's figures, so that
its cycles compare with the RTL's (``ncrtl run --rtl``; docs/kernels.md, "The timing model
against the RTL core").

The RTL core runs every engine on one clock, its per-transfer DMA cost is its two descriptor
generators (``ncrtl.hdl.dma.dge.Dge``, one transfer at a time each; the DMA engines themselves
have none) and its device memory answers after the testbench memory model's latency.  The
timing model is run with the same: one clock of :data:`RTL_MHZ` for every engine (a cycle is a
nanosecond), the DMA timing of the RTL's data word, reads in flight and memory latency, and
the descriptor generators as a stage in front of the DMA engines.  What still differs
is what the timing model approximates or what the RTL does not do yet; docs/kernels.md lists
each with its measured size.
"""

from __future__ import annotations

from dataclasses import replace

from ncrtl.model.dma.dge import DGE_CYCLES
from ncrtl.model.dma.timing import EngineTiming
from ncrtl.model.kernel import timing

__all__ = ["RTL_MHZ", "DGES", "rtl_params", "simulate_at_rtl"]

#: Descriptor generators of a core (``ncrtl.hdl.dma.core.DGES``, seed 000: two).
DGES = 2

#: The one clock of the RTL core, as the timing model's engine clocks: a cycle is 1 ns.
RTL_MHZ = 1000


def rtl_params(geo, latency, *, outstanding=8, dge_cycles=DGE_CYCLES, starts=None):
    """The timing model's :class:`~ncrtl.model.kernel.timing.Params` at the RTL core's DMA
    figures: ``geo.word_bytes`` data words, ``outstanding`` reads in flight, a device memory
    of ``latency`` cycles, no fixed per-transfer overhead (the RTL's DMA engines have none),
    and the RTL's two descriptor generators in front of the engines
    (:class:`~ncrtl.model.kernel.timing.DgeStage`: ``dge_cycles`` to a transfer's first part,
    one transfer at a time each, ``geo.dma_inflight`` transfers per queue); ``starts``: the
    cycle each stream may begin (:class:`~ncrtl.model.kernel.timing.Params`)."""
    dma = EngineTiming(
        word_bytes=geo.word_bytes,
        overhead=0,
        outstanding=outstanding,
        read_latency=latency,
        write_latency=latency,
    )
    dge = timing.DgeStage(
        cycles=dge_cycles, count=DGES, in_flight=geo.dma_inflight, queues=geo.dma_queues
    )
    # the RTL's own data path and its engines' rules: no documented costs, no warm-up throttle
    return timing.Params(
        dma=dma, dge=dge, starts=starts, dma_costs=None, throttle=None, compute=None
    )


def simulate_at_rtl(program, geo, latency, *, trace=False, starts=None):
    """The timing model's :class:`~ncrtl.model.kernel.timing.Report` of ``program`` with every
    engine on the RTL core's one clock and its DMA figures (:func:`rtl_params`); its
    ``total_ns`` is in RTL cycles.  ``starts``: the cycle each stream may take its first
    instruction, where the RTL's instruction fetch delivers it
    (``ncrtl.hdl.neuroncore.isa.fetch_starts``; every stream from 0 without)."""
    mhz = dict.fromkeys(
        ("tensor_mhz", "vector_mhz", "scalar_mhz", "gpsimd_mhz", "dma_mhz"), RTL_MHZ
    )
    at_rtl = replace(program, core=replace(program.core, **mhz))
    return timing.simulate(at_rtl, params=rtl_params(geo, latency, starts=starts), trace=trace)
