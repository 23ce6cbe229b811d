"""ncrtl: a cycle-accurate, synthesizable RTL model of the NeuronCore Tensor Engine datapath, its
PSUM accumulation and its DMA engines, with a bit-exact golden model.

Subpackages, layered so that each imports only those before it:

* :mod:`ncrtl.model`: the golden and timing models and the numeric tables (the source folder
  ``model/``);
* :mod:`ncrtl.hdl`: the synthesizable Amaranth design and its Verilog (``hdl/``);
* :mod:`ncrtl.blocks`: the registry of generatable, testable blocks;
* :mod:`ncrtl.testbench`: cocotb testbenches, runner glue, conformance, lint and synthesis
  checks (``testbench/``);
* :mod:`ncrtl.cli`: the ``ncrtl`` command line.
"""
