"""The Tensor Engine RTL: the PE (:mod:`.pe`), the systolic array and its tiles (:mod:`.array`),
the LS / MM control (:mod:`.control`) and the top (:mod:`.top`); docs/tensor_engine.md."""

from pathlib import Path

#: Verilator control file that builds each PE tile as a hierarchical block (``--hierarchical``).
VERILATOR_CONFIG = Path(__file__).resolve().parent / "verilator.vlt"
