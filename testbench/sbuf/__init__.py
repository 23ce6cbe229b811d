"""The state buffer's ports in cocotb testbenches (:mod:`~ncrtl.testbench.sbuf.port`)."""
