"""cocotb testbench of the DMA engine with its SBUF (``ncrtl conformance dma``)."""
