"""A compiler-output cache for the Verilator runtime library (Verilator's ``OBJCACHE`` hook).

Every Verilator build compiles the same runtime objects before its model: ``verilated.o``,
``verilated_vpi.o``, ``verilated_dpi.o``, ``verilated_threads.o`` and cocotb's ``verilator.o``
(10-20 s of CPU a build, most of a small block's build).  ``verilated.mk`` runs each compile as
``$(OBJCACHE) $(CXX) ...``; :func:`ncrtl.testbench.sim.build` sets ``OBJCACHE`` to a wrapper
that runs this file, so those objects are compiled once per set of flags and copied afterwards.

What is cached, and why it is safe
----------------------------------
Only a compile of one source file given by an absolute path outside the build folder (the
runtime library's ``.cpp`` in the Verilator and cocotb packages), with ``-c`` and ``-o``: every
other command (the model's own C++, precompiled headers, links) runs the compiler unchanged.
The key is the compiler (path, size, modification time), the whole command line (defines,
optimisation, include folders) and the source's content.  An entry keeps the object, its
``-MMD`` dependency file and the size and modification time of every header the dependency file
names; a hit whose headers changed, or whose dependency file names a file in the build folder,
is a miss.  Entries are written to a temporary folder and renamed into place, so concurrent
builds (pytest-xdist workers) never see half an entry.

This file imports nothing from ``ncrtl``: it runs once per compile, in a fresh interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: Environment variable naming the cache folder (set by :func:`ncrtl.testbench.sim.build`).
ENV = "NCRTL_OBJCACHE"

_SOURCES = (".c", ".cc", ".cpp", ".cxx")


def _cacheable(args: list[str], cwd: Path) -> tuple[Path, Path] | None:
    """``(source, object)`` of a compile this cache serves, or None."""
    if "-c" not in args or args.count("-o") != 1:
        return None
    i = args.index("-o")
    if i + 1 >= len(args):
        return None
    target = Path(args[i + 1])
    sources = [a for a in args if a.endswith(_SOURCES) and not a.startswith("-")]
    if len(sources) != 1:
        return None
    source = Path(sources[0])
    if not source.is_absolute() or not source.is_file():
        return None
    if cwd == source.parent or cwd in source.parents:
        return None
    return source, target


def _dep_file(target: Path) -> Path:
    """The file ``-MMD`` writes beside ``-o target``."""
    return target.with_suffix(".d")


def _dependencies(text: str) -> list[str]:
    """The prerequisites of a make dependency file (its first rule)."""
    body = text.replace("\\\n", " ")
    _, _, deps = body.partition(":")
    return deps.split()


def _stamp(path: str):
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def _key(compiler: str, args: list[str], source: Path) -> str:
    key = hashlib.sha256()
    resolved = shutil.which(compiler) or compiler
    for part in (resolved, json.dumps(_stamp(resolved)), *args, source.read_bytes().hex()):
        key.update(part.encode())
        key.update(b"\0")
    return key.hexdigest()[:32]


def _hit(entry: Path, cwd: Path) -> bool:
    try:
        manifest = json.loads((entry / "manifest.json").read_text())
        for path, stamp in manifest["deps"]:
            p = Path(path)
            if not p.is_absolute() or cwd in p.parents or _stamp(path) != stamp:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return (entry / "object").is_file()


def _store(cache: Path, name: str, target: Path, cwd: Path) -> None:
    """Keep ``target`` and its dependency file under ``cache/name`` when every dependency is a
    file outside the build folder."""
    dep = _dep_file(target)
    if not dep.is_file():
        return
    deps = _dependencies(dep.read_text())
    if not deps or any(not Path(d).is_absolute() or cwd in Path(d).parents for d in deps):
        return
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=cache))
    try:
        shutil.copyfile(target, tmp / "object")
        shutil.copyfile(dep, tmp / "depend")
        manifest = {"deps": [[d, _stamp(d)] for d in deps], "object": target.name}
        (tmp / "manifest.json").write_text(json.dumps(manifest))
        try:
            os.rename(tmp, cache / name)
        except OSError:  # another build stored the same entry first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    if not argv:
        print("objcache: usage: objcache.py COMPILER ARGS...", file=sys.stderr)
        return 2
    cache_dir = os.environ.get(ENV)
    cwd = Path.cwd().resolve()
    found = _cacheable(argv[1:], cwd) if cache_dir else None
    if found is None:
        return subprocess.call(argv)
    source, target = found
    cache = Path(cache_dir)
    name = _key(argv[0], argv[1:], source)
    entry = cache / name
    if _hit(entry, cwd):
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.copyfile(entry / "object", tmp)
        os.replace(tmp, target)
        shutil.copyfile(entry / "depend", _dep_file(target))
        return 0
    rc = subprocess.call(argv)
    if rc == 0:
        try:
            _store(cache, name, target, cwd)
        except OSError:  # a full disk or a read-only cache costs the next build time, nothing more
            pass
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
