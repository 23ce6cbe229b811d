"""``ncrtl.testbench``: cocotb testbenches on Verilator: runner glue, stream drivers and monitors,
scoreboards, conformance runs, lint and synthesis checks.

The folder ``testbench/`` of the source tree installs as ``ncrtl.testbench`` (``make install`` or
``pip install``); it is not a top-level package of its own.
"""

if __name__ != "ncrtl.testbench":
    raise ImportError(
        f"the folder 'testbench' is the package ncrtl.testbench: import ncrtl.testbench, "
        f"not {__name__} (install the project: 'make install' or 'pip install .')"
    )
