"""Package layout: the source folders ``model/``, ``hdl/`` and ``testbench/`` install as the
subpackages ``ncrtl.model``, ``ncrtl.hdl`` and ``ncrtl.testbench`` (metadata: pyproject.toml)."""

from setuptools import find_packages, setup

FOLDERS = ("model", "hdl", "testbench")

# ncrtl itself and its subpackages (the command line, ncrtl.cli), then the source folders.
packages = ["ncrtl"] + [f"ncrtl.{p}" for p in find_packages("ncrtl")]
packages += [f"ncrtl.{p}" for p in find_packages(include=[f"{f}*" for f in FOLDERS])]
setup(
    packages=packages,
    package_dir={"ncrtl": "ncrtl", **{f"ncrtl.{f}": f for f in FOLDERS}},
    # Verilator control files read at build time (lint waivers, hierarchical tile blocks).
    package_data={"": ["*.vlt"]},
)
