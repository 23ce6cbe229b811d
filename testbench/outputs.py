"""The one rule for every path a command writes (``-o``, ``--out``, ``--junit``, ``--trace``).

* **Before any work**, :func:`check_output` tries what the write will do: it creates and removes
  a file in the folder the output goes to (or in the nearest folder that exists, when the
  missing ones will be created).  Permission bits say nothing for root, and a folder such as
  ``/proc`` refuses files whatever its bits say; a real attempt answers both.
* **Missing folders are created** for every output path, at the moment the output is written
  (:func:`write_output`), never before: a run that fails leaves nothing behind.
* **A write that still fails at the end** (the disk filled up meanwhile) is one line naming the
  flag, the path and the reason (:class:`OutputError`, exit status 2 in the CLI); what the run
  printed before stays printed.
* **A folder of a command's files** (``ncrtl run --out``: ``out<N>.npy``, ``report.json``) is
  written as one step (:func:`write_folder`): the files go into a fresh folder beside it, and
  only when all are written do they replace the previous run's files of those names, so the
  folder never holds a mix of two runs, nor a half-written run.  :func:`check_output` refuses
  beforehand a folder where one of those names is taken by something that is not a file.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["OutputError", "check_output", "write_output", "write_folder"]


class OutputError(ValueError):
    """An output path that cannot be written: the message names the flag, the path, why."""


def _reason(exc):
    return exc.strerror or str(exc)


def _existing_folder(path: Path, flag: str) -> Path:
    """The nearest folder at or above ``path`` that exists (``path`` itself excluded)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"{flag} {path}: {parent} is a file, not a folder")
    return parent


def _probe(folder: Path, flag: str, path: Path):
    """Create and remove a file in ``folder``: what writing ``path`` (or the folders missing
    above it) will do."""
    try:
        fd, name = tempfile.mkstemp(prefix=".ncrtl-probe-", dir=folder)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write in {folder}: {_reason(exc)}") from None
    os.close(fd)
    os.unlink(name)


def check_output(path, flag: str, *, folder: bool = False, owned: str | None = None) -> Path:
    """Check before any work that ``path`` can be written: a file (or with ``folder`` a
    folder the command writes files into; ``owned``: the regular expression of the names
    :func:`write_folder` writes there, each of which must be free or a file).  Returns the
    path; :class:`OutputError` otherwise.  Nothing is left behind."""
    p = Path(path)
    kind = "folder" if folder else "file"
    if str(path) == "":
        raise OutputError(f"{flag}: an empty path; give a {kind}")
    if p.exists():
        if folder != p.is_dir():
            what = "a folder" if p.is_dir() else "a file"
            raise OutputError(f"{flag} {path} is {what}; give a {kind}")
        if folder:
            _probe(p, flag, p)
            if owned:
                for entry in sorted(p.iterdir()):
                    # a folder cannot be replaced by a file (a link to one can)
                    if (
                        re.fullmatch(owned, entry.name)
                        and entry.is_dir()
                        and not entry.is_symlink()
                    ):
                        raise OutputError(
                            f"{flag} {path}: {entry.name} there is a folder, and the command "
                            f"writes its file {entry.name} in its place; remove it or give "
                            f"another folder"
                        )
        else:
            # Open the existing file for appending, without writing: refused exactly when the
            # write would be (a read-only file, a file in /proc), and its content is untouched.
            try:
                with open(p, "ab"):
                    pass
            except OSError as exc:
                raise OutputError(f"{flag} {path}: cannot write the file: {_reason(exc)}") from None
        return p
    _probe(_existing_folder(p, flag), flag, p)
    return p


def write_output(path, flag: str, write: Callable[[Path], None], *, folder: bool = False):
    """Create the folders missing above ``path`` (and ``path`` itself with ``folder``), then
    ``write(path)``; an ``OSError`` on the way is one :class:`OutputError` line."""
    p = Path(path)
    try:
        (p if folder else p.parent).mkdir(parents=True, exist_ok=True)
        write(p)
    except OSError as exc:
        raise OutputError(f"cannot write {flag} {path}: {_reason(exc)}") from None
    return p


def write_folder(path, flag: str, write: Callable[[Path], None], owned: str):
    """Write a command's files into the folder ``path`` as one step: ``write(tmp)`` fills a
    fresh folder beside it; then the files of the folder whose names match ``owned`` (a
    previous run's) are removed and the new ones moved in.  A write that fails leaves the
    folder, and the folders above it, as they were.  Returns ``(written, removed)``: the
    names.  An ``OSError`` on the way is one :class:`OutputError` line."""
    p = Path(path)
    missing = []  # the folders above ``path`` this write creates, removed again if it fails
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    tmp = None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{p.name}.ncrtl-", dir=p.parent))
        # mkdtemp's folder is private (0700); the folder it becomes gets the usual mode
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
        write(tmp)
        written = sorted(e.name for e in tmp.iterdir())
        if not p.exists():
            os.rename(tmp, p)
            tmp = None
            return written, []
        removed = sorted(
            e.name for e in p.iterdir() if re.fullmatch(owned, e.name) and e.name not in written
        )
        for name in removed:
            (p / name).unlink()
        for name in written:
            os.replace(tmp / name, p / name)
        return written, removed
    except OSError as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp = None
        for folder in missing:
            try:
                folder.rmdir()
            except OSError:
                pass
        raise OutputError(f"cannot write {flag} {path}: {_reason(exc)}") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
