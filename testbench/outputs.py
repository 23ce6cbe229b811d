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
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["OutputError", "check_output", "write_output"]


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


def check_output(path, flag: str, *, folder: bool = False) -> Path:
    """Check before any work that ``path`` can be written: a file (or with ``folder`` a
    folder the command writes files into).  Returns the path; :class:`OutputError` otherwise."""
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
