"""The golden of the language's shared constants: ``shared_constant`` writes a device tensor's
bytes, as the runtime loads a constant the compiled kernel embeds before the kernel starts
(``args["hex"]``: its bytes; ``args["identity"]``: an ``n x n`` identity of the tensor's
dtype).  The timing run gives it no time (it is loaded with the model, not by the kernel)."""

from __future__ import annotations

import numpy as np

from ncrtl.model.kernel.values import KernelError, convert, where

__all__ = ["OPS", "LOADED"]

#: Operations the runtime does before the kernel runs: no time in the timing run.
LOADED = ("shared_constant",)


def _shared_constant(st, ins):
    (dst,) = ins.dsts
    a = ins.args
    if "identity" in a:
        v = convert(np.eye(a["identity"], dtype=np.float32), dst.view_dtype)
    else:
        v = np.frombuffer(bytes.fromhex(a["hex"]), dst.element.storage)
    if v.size != dst.size:
        raise KernelError(f"{where(ins)}{v.size} constant values for {dst.size} elements")
    st.write(dst, v.reshape(dst.view_shape))


OPS = {"shared_constant": _shared_constant}
