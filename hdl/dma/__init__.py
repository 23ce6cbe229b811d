"""``ncrtl.hdl.dma``: the DMA engine (address generators first)."""
