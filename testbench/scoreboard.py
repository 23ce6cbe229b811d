"""Bit-exact scoreboard: compare DUT output bit patterns with the golden model's.

The scoreboard never applies a tolerance: the RTL is specified to be bit-exact with the numpy
golden model, so any differing bit is a mismatch.  It is format-agnostic; give it a ``decode``
function (bits -> value) to make reports readable, e.g. ``decode=lambda b: fmt.decode(b)``.

Results travel from the simulator process back to the caller through :meth:`Scoreboard.write_json`
and :func:`write_counters` (the ``NCRTL_SUMMARY`` environment variable names the file), since
cocotb runs in a separate process.  The file is ``{"scoreboards": [summary, ...], "cycles": n,
...}``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["Scoreboard", "write_counters", "write_timings"]


def _hex(value, digits: int) -> str:
    value = int(value)
    return f"{'-' if value < 0 else ''}0x{abs(value):0{digits}x}"


def _digits(*arrays) -> int:
    """Hex digits for the widest dtype (or widest value of object arrays) among ``arrays``."""
    bits = 1
    for a in arrays:
        if a.dtype == object:
            bits = max(bits, max((int(v).bit_length() for v in a.reshape(-1)), default=1))
        else:
            bits = max(bits, a.dtype.itemsize * 8)
    return (bits + 3) // 4


def _operands(inputs, vectors: int) -> list[np.ndarray]:
    """Input operands as ``(vectors, k)`` arrays; a tuple/list holds one array per operand."""
    if inputs is None:
        return []
    ops = []
    for n, op in enumerate(inputs if isinstance(inputs, (tuple, list)) else (inputs,)):
        a = _as_bits(f"Input operand {n}", op)
        if vectors and (a.size == 0 or a.size % vectors):
            raise ValueError(
                f"Input operand {n} has {a.size} elements, which do not align with {vectors} vectors"
            )
        ops.append(a.reshape(vectors, -1) if vectors else a)
    return ops


def _as_bits(name: str, arr) -> np.ndarray:
    a = np.asarray(arr)
    if a.dtype.kind not in "uib" and a.dtype != object:
        raise TypeError(f"{name} must hold integer bit patterns, not {a.dtype}")
    return a


class Scoreboard:
    """Count vectors and bit-exact mismatches, keeping the first few mismatches for the report.

    Parameters
    ----------
    name : str
        Name in reports and in the JSON summary (the merge key).
    fmt : str, optional
        Format label shown in the report (e.g. ``"bf16"``); informational only.
    decode : callable, optional
        ``decode(bits: numpy.ndarray) -> array_like`` giving the value each bit pattern stands
        for; called on the got and want bits of kept mismatches only.
    keep : int
        Number of mismatches kept with details (all are counted).
    bits : int, optional
        Width used to zero-pad hex dumps; inferred from the dtype when not given.

    Notes
    -----
    :meth:`compare` takes any shape; vectors are the elements of the flattened arrays and
    indices in the report count vectors over all ``compare`` calls (the running index).
    """

    def __init__(
        self,
        name: str,
        fmt: str | None = None,
        *,
        decode: Callable | None = None,
        keep: int = 10,
        bits: int | None = None,
    ):
        if not isinstance(name, str) or not name:
            raise TypeError(f"Name must be a non-empty string, not {name!r}")
        if fmt is not None and not isinstance(fmt, str):
            raise TypeError(f"Format must be a string or None, not {fmt!r}")
        if decode is not None and not callable(decode):
            raise TypeError(f"Decode must be callable or None, not {decode!r}")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"Keep must be a non-negative integer, not {keep!r}")
        if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int) or bits < 1):
            raise ValueError(f"Bits must be a positive integer or None, not {bits!r}")
        self.name = name
        self.fmt = fmt
        self._decode = decode
        self._keep = keep
        self._bits = bits
        self.vectors = 0
        self.mismatches = 0
        self.first: list[dict] = []

    def compare(self, got_bits, want_bits, *, inputs=None) -> int:
        """Compare two arrays of bit patterns element by element.

        Parameters
        ----------
        got_bits, want_bits : array_like of int
            DUT and golden bit patterns with the same number of elements (unsigned, signed or
            Python-int object arrays; compared as integers).
        inputs : array_like or tuple/list of array_like, optional
            Input words that produced the vectors, one array per operand (a tuple or list means
            several operands, so pass a single operand as an array).  Each is reshaped to
            ``(vectors, -1)``: row ``i`` is reported with vector ``i``.

        Returns
        -------
        int
            Mismatches found by this call.
        """
        got = _as_bits("Got bits", got_bits).reshape(-1)
        want = _as_bits("Want bits", want_bits).reshape(-1)
        if got.shape != want.shape:
            raise ValueError(f"Got {got.shape[0]} vectors but want {want.shape[0]}")
        ops = _operands(inputs, got.size)
        base = self.vectors
        self.vectors += got.size
        bad = np.flatnonzero(got != want)
        self.mismatches += bad.size
        room = self._keep - len(self.first)
        if bad.size and room > 0:
            self._keep_details(bad[:room], base, got, want, ops)
        return int(bad.size)

    def compare_sequence(self, got, want) -> int:
        """Compare two sequences of integer events (error codes, cycles, flags) that may differ
        in length: the first vector is the number of events, then the events in order, a
        missing one counted as -1.  So even two empty sequences compare one vector, and a
        missing or an extra event is a mismatch.

        Returns
        -------
        int
            Mismatches found by this call.
        """
        got = [int(v) for v in got]
        want = [int(v) for v in want]
        n = max(len(got), len(want))
        pad = lambda v: np.array(v + [-1] * (n - len(v)), dtype=np.int64)  # noqa: E731
        return self.compare(np.array([len(got)]), np.array([len(want)])) + self.compare(
            pad(got), pad(want)
        )

    def _keep_details(self, idx, base, got, want, ops) -> None:
        digits = (self._bits + 3) // 4 if self._bits else _digits(got, want)
        g, w = got[idx], want[idx]
        gv = wv = None
        if self._decode is not None:
            gv = np.asarray(self._decode(g)).reshape(-1)
            wv = np.asarray(self._decode(w)).reshape(-1)
        op_digits = [_digits(op) for op in ops]
        for k, i in enumerate(idx):
            entry = {"index": int(base + i), "got": _hex(g[k], digits), "want": _hex(w[k], digits)}
            if gv is not None:
                entry["got_value"] = _jsonable(gv[k])
                entry["want_value"] = _jsonable(wv[k])
            if ops:
                entry["inputs"] = [
                    _hex(op[i, 0], d) if op.shape[1] == 1 else [_hex(x, d) for x in op[i]]
                    for op, d in zip(ops, op_digits)
                ]
            self.first.append(entry)

    def summary(self) -> dict:
        """Return ``{"name", "vectors", "mismatches", "first": [...]}`` (plus ``"fmt"`` if set)."""
        out = {
            "name": self.name,
            "vectors": self.vectors,
            "mismatches": self.mismatches,
            "first": list(self.first),
        }
        if self.fmt is not None:
            out["fmt"] = self.fmt
        return out

    def report(self) -> str:
        """Return a readable multi-line report."""
        label = f"{self.name}" + (f" [{self.fmt}]" if self.fmt else "")
        if not self.mismatches:
            return f"{label}: {self.vectors} vectors, all bit-exact"
        lines = [
            f"{label}: {self.mismatches} of {self.vectors} vectors mismatch "
            f"(first {len(self.first)} shown)"
        ]
        for e in self.first:
            line = f"  #{e['index']}: got {e['got']} want {e['want']}"
            if "got_value" in e:
                line += f"  ({e['got_value']!r} vs {e['want_value']!r})"
            if "inputs" in e:
                line += "  inputs " + " | ".join(
                    " ".join(op) if isinstance(op, list) else op for op in e["inputs"]
                )
            lines.append(line)
        return "\n".join(lines)

    def assert_clean(self) -> None:
        """Raise :class:`AssertionError` carrying :meth:`report` if any vector mismatched, or if
        no vector was compared at all (a check of nothing proves nothing)."""
        if self.mismatches:
            raise AssertionError(self.report())
        if not self.vectors:
            raise AssertionError(
                f"{self.name}: no vectors were compared; a scoreboard that "
                f"checked nothing cannot pass"
            )

    def write_json(self, path: str | os.PathLike | None = None) -> Path | None:
        """Merge :meth:`summary` into a JSON summary file.

        Parameters
        ----------
        path : path-like, optional
            Target file; defaults to ``$NCRTL_SUMMARY``.  Without either nothing is written.

        Returns
        -------
        Path or None
            The file written.

        Notes
        -----
        The file holds ``{"scoreboards": [summary, ...], ...}``, one entry per scoreboard name in
        order of first write; other top-level keys (see :func:`write_counters`) are kept.  A
        summary whose name is already there is merged into it: counts add up and ``first``
        keeps the first ``keep`` entries.
        """

        def merge(data):
            boards = data.setdefault("scoreboards", [])
            mine = self.summary()
            old = next((b for b in boards if b.get("name") == self.name), None)
            if old is None:
                boards.append(mine)
            else:
                old["vectors"] = old.get("vectors", 0) + mine["vectors"]
                old["mismatches"] = old.get("mismatches", 0) + mine["mismatches"]
                old["first"] = (old.get("first", []) + mine["first"])[: self._keep]
                if self.fmt is not None:
                    old.setdefault("fmt", self.fmt)

        return _update_json(path, merge)


def write_counters(path: str | os.PathLike | None = None, **counters: int) -> Path | None:
    """Add integer counters (e.g. ``cycles=n``) to the top level of a JSON summary file.

    Counts add up over calls, so several tests of one run report their total.  ``path``
    defaults to ``$NCRTL_SUMMARY``; without either nothing is written.

    Returns
    -------
    Path or None
        The file written.
    """
    for key, value in counters.items():
        if key == "scoreboards":
            raise ValueError("Counter name 'scoreboards' is reserved")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"Counter {key} must be an integer, not {value!r}")

    def merge(data):
        for key, value in counters.items():
            data[key] = int(data.get(key, 0)) + int(value)

    return _update_json(path, merge)


def write_timings(path: str | os.PathLike | None = None, **seconds: float) -> Path | None:
    """Record wall-clock figures of the testbench (seconds, or a ``time.time()`` reading) under
    ``timings`` in the JSON summary file: ``*_s`` values add up over calls, others keep the
    first value written (a start time).  Same file rules as :func:`write_counters`."""
    for key, value in seconds.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
            raise TypeError(f"Timing {key} must be a number, not {value!r}")

    def merge(data):
        t = data.setdefault("timings", {})
        for key, value in seconds.items():
            if key.endswith("_s"):
                t[key] = float(t.get(key, 0.0)) + float(value)
            else:
                t.setdefault(key, float(value))

    return _update_json(path, merge)


def _update_json(path, merge) -> Path | None:
    """Read-modify-write the JSON file at ``path`` (or ``$NCRTL_SUMMARY``) under an ``flock``."""
    if path is None:
        path = os.environ.get("NCRTL_SUMMARY")
        if not path:
            return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+") as lock:
        # Several simulator processes (xdist workers, parallel conformance runs) may share a file.
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = {}
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            data = json.loads(path.read_text())
        merge(data)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
        os.replace(tmp, path)
    return path


def _jsonable(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) or isinstance(v, (int, str, bool)) or v is None:
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)
