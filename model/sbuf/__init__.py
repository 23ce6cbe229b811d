"""``ncrtl.model.sbuf``: the state buffer's storage, ports and arbitration
(:mod:`~ncrtl.model.sbuf.memory`), which the DMA engines and the compute engines share."""
