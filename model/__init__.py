"""``ncrtl.model``: numpy golden model and timing model: number formats, exact rounding, the mode
table, the Tensor Engine, PSUM and the matmul path.

The folder ``model/`` of the source tree installs as ``ncrtl.model`` (``make install`` or
``pip install``); it is not a top-level package of its own.
"""

if __name__ != "ncrtl.model":
    raise ImportError(
        f"the folder 'model' is the package ncrtl.model: import ncrtl.model, "
        f"not {__name__} (install the project: 'make install' or 'pip install .')"
    )
