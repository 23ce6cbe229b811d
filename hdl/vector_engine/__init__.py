"""Synthesizable Vector Engine units (Amaranth), bit-exact with ``ncrtl.model.vector_engine``.

See ``docs/vector_engine.md``.  Import the units from their modules
(``from ncrtl.hdl.vector_engine.quantize_mx import QuantizeMX``).
"""
