"""cocotb testbenches of the Vector Engine units (``ncrtl.hdl.vector_engine``)."""
