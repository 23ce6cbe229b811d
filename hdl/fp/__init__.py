"""Synthesizable FP datapath units (Amaranth), bit-exact with the golden model ``ncrtl.model.fp``.

See ``docs/hdl_fp.md`` for the units, their ports and latencies, and why the rounding is exact.
Import the units from their modules (``from ncrtl.hdl.fp.dot_add import FusedDotAdd``).
"""
