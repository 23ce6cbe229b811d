"""``ncrtl.hdl``: synthesizable Amaranth: the FP units, the Tensor Engine, PSUM, the matmul path,
and the one Verilog emitter (:mod:`ncrtl.hdl.verilog`).

The folder ``hdl/`` of the source tree installs as ``ncrtl.hdl`` (``make install`` or
``pip install``); it is not a top-level package of its own.
"""

if __name__ != "ncrtl.hdl":
    raise ImportError(
        f"the folder 'hdl' is the package ncrtl.hdl: import ncrtl.hdl, "
        f"not {__name__} (install the project: 'make install' or 'pip install .')"
    )
