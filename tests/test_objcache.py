"""The runtime-object cache behind every Verilator build (:mod:`ncrtl.testbench.objcache`),
driven with a stand-in compiler that counts its calls: what is cached, what is not, and when an
entry is no longer used."""

import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from ncrtl.testbench import objcache

# A compiler stand-in: `cc [-c] -o OUT SRC [-MMD]` writes OUT (the source's text and the
# arguments) and, like gcc's -MMD, OUT with .d listing the source and the headers named in
# `// dep: PATH` lines; every call appends a line to $CALLS.
FAKE_CC = textwrap.dedent(
    f"""\
    #!{sys.executable}
    import os, sys
    args = sys.argv[1:]
    out = args[args.index("-o") + 1]
    src = [a for a in args if a.endswith(".cpp")][0]
    text = open(src).read()
    deps = [src] + [l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("// dep:")]
    open(out, "w").write(text + repr(args))
    open(out[:-2] + ".d", "w").write(out + ": " + " \\\\\\n ".join(deps) + "\\n")
    open(os.environ["CALLS"], "a").write(out + "\\n")
    """
)


@pytest.fixture
def env(tmp_path, monkeypatch):
    cc = tmp_path / "cc"
    cc.write_text(FAKE_CC)
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    lib = tmp_path / "lib"  # the runtime library: outside every build folder
    lib.mkdir()
    (lib / "rt.h").write_text("// header\n")
    (lib / "rt.cpp").write_text(f"// dep: {lib / 'rt.h'}\nint rt;\n")
    calls = tmp_path / "calls"
    calls.write_text("")
    monkeypatch.setenv("CALLS", str(calls))
    monkeypatch.setenv(objcache.ENV, str(tmp_path / "cache"))
    return cc, lib, calls


def _compile(cc, build, *args):
    build.mkdir(exist_ok=True)
    here = os.getcwd()
    os.chdir(build)
    try:
        return objcache.main([str(cc), *args])
    finally:
        os.chdir(here)


def _calls(calls):
    return len(calls.read_text().splitlines())


def test_a_runtime_object_compiles_once_and_is_copied_after(env, tmp_path):
    cc, lib, calls = env
    args = ["-O1", "-MMD", "-c", "-o", "rt.o", str(lib / "rt.cpp")]
    assert _compile(cc, tmp_path / "b1", *args) == 0
    assert _compile(cc, tmp_path / "b2", *args) == 0
    assert _calls(calls) == 1
    one, two = tmp_path / "b1", tmp_path / "b2"
    assert (one / "rt.o").read_bytes() == (two / "rt.o").read_bytes()
    assert (one / "rt.d").read_text() == (two / "rt.d").read_text()
    # Other flags are another entry.
    assert _compile(cc, tmp_path / "b3", "-O2", *args[1:]) == 0
    assert _calls(calls) == 2


def test_a_changed_header_or_source_compiles_again(env, tmp_path):
    cc, lib, calls = env
    args = ["-MMD", "-c", "-o", "rt.o", str(lib / "rt.cpp")]
    _compile(cc, tmp_path / "b1", *args)
    header = lib / "rt.h"
    header.write_text("// header, edited\n")
    os.utime(header, ns=(header.stat().st_atime_ns, header.stat().st_mtime_ns + 10**9))
    _compile(cc, tmp_path / "b2", *args)
    assert _calls(calls) == 2
    (lib / "rt.cpp").write_text(f"// dep: {header}\nint rt2;\n")
    _compile(cc, tmp_path / "b3", *args)
    assert _calls(calls) == 3
    assert "rt2" in (tmp_path / "b3" / "rt.o").read_text()


def test_the_model_and_what_it_includes_are_never_cached(env, tmp_path):
    cc, lib, calls = env
    build = tmp_path / "b1"
    build.mkdir()
    # The model's own source (in the build folder): compiled every time.
    (build / "Vtop.cpp").write_text("int top;\n")
    for _ in range(2):
        _compile(cc, build, "-MMD", "-c", "-o", "Vtop.o", "Vtop.cpp")
    # A library source that includes a header of the build folder (cocotb's main includes the
    # model's header): compiled every time.
    (lib / "main.cpp").write_text(f"// dep: {build / 'Vtop.h'}\nint main;\n")
    (build / "Vtop.h").write_text("// model\n")
    for _ in range(2):
        _compile(cc, build, "-MMD", "-c", "-o", "main.o", str(lib / "main.cpp"))
    # No -c (a link, a precompiled header): passed through.
    _compile(cc, build, "-o", "rt.o", str(lib / "rt.cpp"))
    assert _calls(calls) == 5
    assert not (tmp_path / "cache").exists() or not any(
        p.is_dir() for p in (tmp_path / "cache").iterdir()
    )


def test_without_a_cache_folder_every_compile_runs(env, tmp_path, monkeypatch):
    cc, lib, calls = env
    monkeypatch.delenv(objcache.ENV)
    for build in ("b1", "b2"):
        _compile(cc, tmp_path / build, "-MMD", "-c", "-o", "rt.o", str(lib / "rt.cpp"))
    assert _calls(calls) == 2


def test_compile_env_sets_make_objcache(tmp_path, monkeypatch):
    from ncrtl.testbench.sim import VerilatorInstall, compile_env

    install = VerilatorInstall(Path("/v"), "5.048", {"MAKEFLAGS": "OPT_FAST=-O1"})
    monkeypatch.setenv("NCRTL_OBJCACHE", str(tmp_path / "oc"))
    env = compile_env(install)
    wrapper = tmp_path / "oc" / "cc"
    assert env["MAKEFLAGS"] == f"OPT_FAST=-O1 OBJCACHE={wrapper}"
    assert env["NCRTL_OBJCACHE"] == str(tmp_path / "oc")
    assert os.access(wrapper, os.X_OK) and "objcache.py" in wrapper.read_text()
    monkeypatch.setenv("NCRTL_OBJCACHE", "off")
    assert compile_env(install) == {"MAKEFLAGS": "OPT_FAST=-O1"}
