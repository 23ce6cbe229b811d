"""``ncrtl.hdl.sbuf``: the state buffer, a memory with a port per DMA engine and the compute
engines' port (:mod:`~ncrtl.hdl.sbuf.memory`), and its near-memory read-add-write adder
(:mod:`~ncrtl.hdl.sbuf.raw`)."""
