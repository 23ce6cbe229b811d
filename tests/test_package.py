"""The project installs as ONE package, ``ncrtl``, from a regular wheel as well as editable.

The wheel is built from a copy of the sources, installed (without its dependencies, which come
from this environment's site-packages) into a fresh virtual environment, and used from a
directory outside the source tree: the subpackages import as ``ncrtl.model``, ``ncrtl.hdl`` and
``ncrtl.testbench``, the folder names do not import at all, the Verilator control files are in
the package, and one small conformance run passes.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("model", "hdl", "testbench", "ncrtl", "pyproject.toml", "setup.py", "README.md")


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    out = tmp_path_factory.mktemp("dist")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ]
    )
    (found,) = out.glob("ncrtl-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh virtual environment with the wheel; dependencies from this environment."""
    env_dir = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(env_dir)])
    python = env_dir / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    (site / "ncrtl_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)])
    return env_dir


def test_wheel_contents(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "ncrtl/hdl/lint.vlt" in names
    assert "ncrtl/hdl/tensor_engine/verilator.vlt" in names
    for module in (
        "ncrtl/cli/__init__.py",
        "ncrtl/cli/sim.py",
        "ncrtl/blocks.py",
        "ncrtl/model/fp/ops.py",
        "ncrtl/hdl/verilog.py",
        "ncrtl/testbench/sim.py",
        "ncrtl/testbench/fp/test_add.py",
    ):
        assert module in names
    assert not [n for n in names if n.split("/")[0] in ("model", "hdl", "testbench", "tests")]


@pytest.mark.sim
def test_installed_wheel_imports_and_runs_a_conformance(venv, tmp_path):
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NCRTL_BUILD_DIR")}
    env["NCRTL_BUILD_DIR"] = str(tmp_path / "build")
    code = (
        "import ncrtl, ncrtl.model.fp, ncrtl.hdl.fp, ncrtl.testbench, ncrtl.hdl.verilog as v; "
        "print(ncrtl.__file__); print(v.LINT_CONFIG.is_file())"
    )
    out = _run([python, "-c", code], cwd=tmp_path, env=env).stdout.split()
    assert Path(out[0]).is_relative_to(venv) and out[1] == "True"
    for folder in ("model", "hdl", "testbench"):
        proc = subprocess.run(
            [python, "-c", f"import {folder}"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr
    proc = _run(
        [
            str(venv / "bin" / "ncrtl"),
            "conformance",
            "fp.add",
            "--count",
            "300",
            "--junit",
            str(tmp_path / "junit.xml"),
        ],
        cwd=tmp_path,
        env=env,
    )
    assert "1/1 configurations passed" in proc.stdout, proc.stdout


def test_folders_do_not_import_as_packages():
    """In the source tree the folders are importable paths (pytest's rootdir), but each refuses
    to load under its folder name."""
    proc = subprocess.run(
        [sys.executable, "-c", "import model"], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode != 0
    assert "import ncrtl.model, not model" in proc.stderr
