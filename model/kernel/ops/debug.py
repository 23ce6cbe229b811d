"""The golden of the debugging instructions: ``device_print`` (``nl.device_print``), a DMA
transfer of a tensor into a device-memory buffer of its own that prints the prefix and the
values as the golden runs it (NKI's simulator prints them at once to standard output)."""

from __future__ import annotations

import sys

import numpy as np


def _device_print(st, ins):
    (dst,), (src,) = ins.dsts, ins.srcs
    values = st.read(src, ins)
    st.write(dst, values)
    with np.printoptions(threshold=1024):
        print(f"{ins.args['prefix']} {values}", file=sys.stdout, flush=True)


OPS = {"device_print": _device_print}
