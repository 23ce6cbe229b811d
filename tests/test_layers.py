"""The package's layers point one way: model <- hdl <- blocks <- testbench <- cli; the kernel
front end (``ncrtl.nki``, ``ncrtl.kernels``) sits on the model only.

Every ``import`` of every module under ``model/``, ``hdl/``, ``testbench/`` and ``ncrtl/`` is
parsed (including imports inside functions) and mapped to its layer; a module may import its own
layer and the layers below it, never one above.  Third-party packages have a floor too: the golden
model is numpy only (no Amaranth, no cocotb), the RTL never imports cocotb.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Source folder -> installed package.
FOLDERS = {
    "model": "ncrtl.model",
    "hdl": "ncrtl.hdl",
    "testbench": "ncrtl.testbench",
    "ncrtl": "ncrtl",
}

#: Layers, lowest first; a module name maps to the longest prefix listed.
LAYERS = [
    ("ncrtl.model", 0),
    ("ncrtl.hdl", 1),
    ("ncrtl.blocks", 2),
    ("ncrtl.testbench", 3),
    ("ncrtl.cli", 4),
    ("ncrtl.nki", 0.5),
    ("ncrtl.kernels", 0.5),
]
LAYER_NAMES = {0: "model", 0.5: "kernel front end", 1: "hdl", 2: "blocks", 3: "testbench", 4: "cli"}

#: Third-party packages a layer must not import.
FORBIDDEN = {
    0: ("amaranth", "cocotb", "cocotb_tools"),
    0.5: ("amaranth", "cocotb", "cocotb_tools"),
    1: ("cocotb", "cocotb_tools"),
    2: ("cocotb", "cocotb_tools"),
}


def layer_of(module):
    best = None
    for prefix, layer in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer)
    return None if best is None else best[1]


def modules():
    """``(module name, path)`` of every Python module of the package."""
    out = []
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out.append((".".join([package, *parts]), path))
    return out


def imports(module, path):
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - node.level + 1]
                name = ".".join(parent + ([node.module] if node.module else []))
            else:
                name = node.module
            out.append((name, node.lineno))
            # `from ncrtl import blocks` imports the module ncrtl.blocks.
            out += [(f"{name}.{a.name}", node.lineno) for a in node.names]
    return out


def test_every_module_has_a_layer():
    found = modules()
    assert len(found) > 40
    assert all(layer_of(m) is not None or m == "ncrtl" for m, _ in found)


@pytest.mark.parametrize("module,path", modules(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_upward_import(module, path):
    own = layer_of(module)
    if own is None:  # ncrtl/__init__.py imports nothing of its own
        own = -1
    bad = []
    for name, line in imports(module, path):
        target = layer_of(name)
        if target is not None and target > own:
            bad.append(
                f"{path.relative_to(ROOT)}:{line} imports {name} "
                f"({LAYER_NAMES[target]}, above {LAYER_NAMES.get(own, 'the package')})"
            )
        top = name.split(".")[0]
        if top in FORBIDDEN.get(own, ()):
            bad.append(
                f"{path.relative_to(ROOT)}:{line} imports {name} (not allowed in "
                f"{LAYER_NAMES[own]})"
            )
        if top in FOLDERS and top != "ncrtl":
            bad.append(
                f"{path.relative_to(ROOT)}:{line} imports the folder name {name}; "
                f"import {FOLDERS[top]}"
            )
    if own == 0.5:  # the kernel front end: the model and itself, nothing else of ncrtl
        bad += [
            f"{path.relative_to(ROOT)}:{line} imports {name} (the kernel front end sits on the "
            f"model only)"
            for name, line in imports(module, path)
            if layer_of(name) not in (None, 0, 0.5)
        ]
    assert not bad, "\n".join(bad)


def test_imports_are_resolved(tmp_path):
    path = tmp_path / "x.py"
    path.write_text(
        "def f():\n    from ncrtl.testbench import sim\nfrom ..fp import add\nimport numpy\n"
    )
    found = set(imports("ncrtl.hdl.common.x", path))
    assert ("ncrtl.testbench.sim", 2) in found  # inside a function, names expanded
    assert ("ncrtl.hdl.fp.add", 3) in found  # relative, resolved
    assert ("numpy", 4) in found
    assert layer_of("ncrtl.testbench.sim") > layer_of("ncrtl.hdl.common.x")
    assert layer_of("ncrtl.blocks") > layer_of("ncrtl.hdl.fp")
    assert layer_of("ncrtl.cli") > layer_of("ncrtl.testbench.conformance")
