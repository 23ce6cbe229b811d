"""The one way to get Verilog out of the design: :func:`convert`.

A design that repeats a cell many times (a PE, a PSUM slot unit, a bank memory) places it with
``Instance`` and lists it in ``cells()``; :func:`convert` emits each listed cell module once,
then the top.  Amaranth alone would emit one module per submodule instance: 16,384 PE modules
for a 128 x 128 array.

The cell protocol: a component may define ``cells(self) -> list of Cell``.  :func:`convert`
asks the top only; a component that contains cell-placing components returns their cells
(``MatmulCore.cells()`` is the Tensor Engine's and PSUM's).

Verilog is emitted with ``emit_src=False``, so the text (and the simulation build cache key)
changes only when the hardware does.
"""

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil as _rtlil
from amaranth.back import verilog as _verilog
from amaranth.hdl import Shape
from amaranth.lib import wiring
from amaranth.lib.wiring import In

__all__ = ["Cell", "LINT_CONFIG", "convert", "flat_module", "blackbox_module", "loop_memory_inits"]

#: The Verilator configuration file with the lint waivers of the Verilog :func:`convert` emits
#: (each waiver and its reason: docs/hdl_fp.md, "Lint waivers").
LINT_CONFIG = Path(__file__).resolve().parent / "lint.vlt"


@dataclass(frozen=True)
class Cell:
    """A module a design places with ``Instance``, emitted once by :func:`convert`.

    Parameters
    ----------
    name : str
        Verilog module name (the ``Instance`` type).
    make : callable
        ``make() -> Component``: a fresh component of the cell.
    flat : bool
        Emit the cell as ONE module with its submodules inlined (:func:`flat_module`; a leaf
        cell such as the PE).  ``False``: emit it as Amaranth does (a cell that itself places
        other cells with ``Instance``, such as a tile of PEs).
    macro : bool
        The cell is a memory that a synthesis flow maps to an SRAM macro: with
        ``convert(..., synthesis=True)`` it is a ``(* blackbox *)`` declaration (Yosys has no
        memory library here and would build it from flip-flops).
    """

    name: str
    make: Callable
    flat: bool = True
    macro: bool = False


def convert(design, name, *, synthesis=False, blackbox: Iterable[str] = ()):
    """The complete Verilog of ``design`` with top module ``name``.

    Parameters
    ----------
    design : amaranth.lib.wiring.Component
        The top; its ``cells()`` (if it has one) lists the modules it places with ``Instance``.
    name : str
        Top module name.
    synthesis : bool
        The synthesis view: cells marked ``macro`` are ``(* blackbox *)`` declarations.
    blackbox : iterable of str
        More cell names to declare as ``(* blackbox *)`` (ports only), e.g. the PE for a quick
        synthesis check of everything around it.

    Returns
    -------
    str
        Every cell module once (in ``cells()`` order), then the top.
    """
    if not isinstance(getattr(design, "signature", None), wiring.Signature):
        raise TypeError(f"Design must be an amaranth.lib.wiring.Component, not {design!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"Top module name must be a Verilog identifier, not {name!r}")
    blackbox = set(blackbox)
    cells = list(design.cells()) if callable(getattr(design, "cells", None)) else []
    unknown = blackbox - {c.name for c in cells}
    if unknown:
        raise ValueError(
            f"blackbox names {sorted(unknown)!r} are not cells of {name}; cells: "
            f"{', '.join(c.name for c in cells) or 'none'}"
        )
    parts, seen = [], set()
    for cell in cells:
        if cell.name in seen:
            continue
        seen.add(cell.name)
        component = cell.make()
        if cell.name in blackbox or (synthesis and cell.macro):
            parts.append(blackbox_module(component, cell.name))
        elif cell.flat:
            parts.append(flat_module(component, cell.name))
        else:
            parts.append(_verilog.convert(component, name=cell.name, emit_src=False))
    parts.append(_verilog.convert(design, name=name, emit_src=False))
    return loop_memory_inits("".join(parts))


_INIT_BLOCK = re.compile(
    r"^(?P<indent>[ ]*)initial begin\n(?P<body>(?:[ ]*\\?[\w$.]+ ?\[\d+\] = [^;\n]+;\n)+)"
    r"(?P=indent)end\n",
    re.MULTILINE,
)
_INIT_LINE = re.compile(r"^[ ]*(?P<mem>\\?[\w$.]+ ?)\[(?P<index>\d+)\] = (?P<value>[^;\n]+);$")


def loop_memory_inits(text):
    """``text`` with every memory initialization that sets words ``0 .. n-1`` to one value
    written as a loop.

    Yosys writes a memory's initial contents a word per line; a partition memory of 14,336
    words placed 128 times is then 1.8 million statements, which Verilator holds in memory
    (over 20 GB) before it finds them equal.  A loop is the same contents in four lines."""

    def fold(match):
        lines = [_INIT_LINE.match(line) for line in match["body"].splitlines()]
        if any(line is None for line in lines):
            return match[0]
        mems = {line["mem"] for line in lines}
        values = {line["value"] for line in lines}
        indices = [int(line["index"]) for line in lines]
        if len(mems) != 1 or len(values) != 1 or indices != list(range(len(lines))):
            return match[0]
        if len(lines) < 16:
            return match[0]
        mem, value, ind = mems.pop(), values.pop(), match["indent"]
        var = "init_word_" + re.sub(r"\W", "_", mem.strip()).strip("_")
        return (
            f"{ind}integer {var};\n"
            f"{ind}initial begin\n"
            f"{ind}  for ({var} = 0; {var} < {len(lines)}; {var} = {var} + 1)\n"
            f"{ind}    {mem}[{var}] = {value};\n"
            f"{ind}end\n"
        )

    return _INIT_BLOCK.sub(fold, text)


def flat_module(component, name):
    """The Verilog of ``component`` as ONE flat module ``name``: the Yosys steps of
    ``amaranth.back.verilog.convert`` plus a ``flatten``, so that a simulator compiles one
    module definition of a cell placed many times."""
    from amaranth._toolchain.yosys import find_yosys

    text = _rtlil.convert(component, name=name, emit_src=False)
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    script = [
        f"read_rtlil <<rtlil\n{text}\nrtlil",
        "proc -nomux -norom",
        "memory_collect",
        f"hierarchy -top {name}",
        "flatten",
        "opt_clean",
        "write_verilog -norename",
    ]
    return yosys.run(["-q", "-"], "\n".join(script), ignore_warnings=True)


def blackbox_module(component, name):
    """A ``(* blackbox *)`` declaration of module ``name`` with the ports of ``component``
    (``clk`` and ``rst`` first, as Amaranth emits them): the cell as a macro the synthesis flow
    provides."""
    component._MustUse__silence = True  # only its signature is read
    ports, decls = ["clk", "rst"], ["  input clk;", "  input rst;"]
    for path, member, _ in component.signature.flatten(component):
        port = "__".join(str(part) for part in path)  # Amaranth's port naming
        width = Shape.cast(member.shape).width
        rng = f"[{width - 1}:0] " if width > 1 else ""
        ports.append(port)
        decls.append(f"  {'input' if member.flow == In else 'output'} {rng}{port};")
    # The outputs are the macro's: Verilator's linter would report them undriven.  Waived for
    # this declaration only, so that a top around black boxes lints like the whole design (its
    # port connections checked against the declared widths).
    return (
        "(* blackbox *)\n"
        + f"module {name}({', '.join(ports)});\n"
        + "  /* verilator lint_off UNDRIVEN */\n"
        + "\n".join(decls)
        + "\n  /* verilator lint_on UNDRIVEN */\nendmodule\n"
    )
