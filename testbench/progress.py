"""Progress of a running simulation: the testbench writes it, the command line draws it.

The simulator runs in its own process with its output in a log file, so the two sides meet in a
small file named by ``NCRTL_PROGRESS``:

* inside the simulation, :func:`watch` starts a cocotb task that wakes on a timer (never on the
  clock: a per-edge callback would cost what the stream players save), reads the cycle count
  and the work done, and rewrites the file about four times a second of wall time;
* in the command line, :class:`ProgressBar` polls the file from a thread while the simulator
  runs and draws ``[####....] 45%  1,234 / 2,750 output vectors  3,810 cycles/s  7 s left`` on
  stderr, once the simulation has run for :data:`SHOW_AFTER` seconds (a short run prints
  nothing).  On a terminal the bar is redrawn in place; in a log one line is written every
  :data:`LOG_EVERY` seconds.

The steps before a simulation (Verilog generation, the Verilator build) say what they do with
:func:`step`: a line when the step starts, its elapsed time while it runs (redrawn on a terminal,
a line every :data:`STEP_LOG_EVERY` seconds in a log) and a line with its time when it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

__all__ = [
    "watch",
    "ProgressBar",
    "step",
    "say",
    "say_pe_build",
    "SHOW_AFTER",
    "LOG_EVERY",
    "STEP_LOG_EVERY",
    "ENV",
]

#: Environment variable naming the progress file.
ENV = "NCRTL_PROGRESS"
#: Seconds of simulation before the bar appears.
SHOW_AFTER = 2.0
#: Seconds between two lines when stderr is not a terminal.
LOG_EVERY = 10.0
#: Seconds between two elapsed-time lines of a :func:`step` when stderr is not a terminal.
STEP_LOG_EVERY = 30.0

# Steps running now (several when conformance configurations build side by side): a step redraws
# its line in place only while it is the only one, so that two never overwrite each other.
_active = []
_lock = threading.Lock()


def _write(path, data):
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def watch(read, total, *, unit="output vectors", period_ns=10):
    """Start the progress task of a cocotb test, if ``NCRTL_PROGRESS`` asks for one; return the
    task (``task.cancel()`` it when the run is over) or None.

    ``read() -> (cycle, done)``: the simulated cycle and the work done so far (out of ``total``
    ``unit``); ``period_ns``: the clock period, to turn cycles into a timer.
    """
    path = os.environ.get(ENV)
    if not path:
        return None
    import cocotb
    from cocotb.triggers import Timer

    async def task():
        chunk, t_last = 256, time.perf_counter()
        while True:
            await Timer(chunk * period_ns, "ns")
            cycle, done = read()
            _write(
                path, {"cycle": int(cycle), "done": int(done), "total": int(total), "unit": unit}
            )
            now = time.perf_counter()
            # About 0.25 s of wall time between two updates, whatever the model's speed; the
            # step changes at most 2x at a time (the first chunk also holds the testbench's
            # own start).
            want = int(chunk / max(now - t_last, 1e-6) * 0.25)
            chunk, t_last = max(16, chunk // 2, min(2 * chunk, want)), now

    return cocotb.start_soon(task())


class ProgressBar:
    """Draw the progress file ``path`` on ``stream`` while a simulation runs (a context
    manager: the polling thread starts on entry and stops, clearing the bar, on exit).

    A testbench that writes no progress file gets the elapsed time instead
    (``label ... 12 s``).  The bar is redrawn in place only on a terminal and while no other
    bar or :func:`step` runs beside it; otherwise a line is written every :data:`LOG_EVERY`
    seconds."""

    def __init__(self, path, *, label="simulating", stream=None, width=24):
        self.path, self.label, self.width = Path(path), label, width
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._drawn = False
        self._first = None  # (wall time, cycle, done) of the first reading

    def __enter__(self):
        self._t0 = time.perf_counter()
        with _lock:
            _active.append(self)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        with _lock:
            _active.remove(self)
            if self._drawn and self._tty():
                cols = shutil.get_terminal_size((100, 24)).columns - 1
                self.stream.write("\r" + " " * cols + "\r")
                self.stream.flush()

    def _tty(self):
        return hasattr(self.stream, "isatty") and self.stream.isatty()

    def line(self, data, now):
        """The bar's text for one reading ``data`` at wall time ``now``."""
        cycle, done, total = data["cycle"], data["done"], max(1, data["total"])
        if self._first is None:
            self._first = (now, cycle, done)
        t0, c0, d0 = self._first
        dt = now - t0
        rate = (cycle - c0) / dt if dt > 0 else 0.0
        left = "estimating"
        if done > d0 and dt > 0:
            left = f"{(total - done) / ((done - d0) / dt):.0f} s left"
        filled = int(self.width * min(done, total) / total)
        bar = "#" * filled + "." * (self.width - filled)
        return (
            f"  {self.label} [{bar}] {100 * done / total:3.0f}%  {done:,} / {total:,} "
            f"{data.get('unit', '')}  {rate:,.0f} cycles/s  {left}"
        )

    def _run(self):
        last_log = None
        while not self._stop.wait(0.25):
            now = time.perf_counter()
            try:
                text = self.line(json.loads(self.path.read_text()), now)
            except (OSError, ValueError, KeyError):
                text = f"  {self.label} ... {now - self._t0:.0f} s"
            if now - self._t0 < SHOW_AFTER:
                continue
            with _lock:
                if self._tty() and _active == [self]:
                    cols = shutil.get_terminal_size((100, 24)).columns - 1
                    self.stream.write("\r" + text.ljust(cols)[:cols])
                    self.stream.flush()
                    self._drawn = True
                    continue
            if last_log is None or now - last_log >= LOG_EVERY:
                say(text, self.stream)
                last_log = now


def say(text, stream=None):
    """Write one line of progress ``text`` on ``stream`` (stderr), flushed at once."""
    stream = stream or sys.stderr
    with _lock:
        stream.write(text + "\n")
        stream.flush()


def say_pe_build(why, flag, stream=None):
    """Say in one line which PE build a simulation chose and why (``why`` of
    :meth:`ncrtl.blocks.Block.resolve_run`; nothing when the user named the build), and the
    command's ``flag`` that names another."""
    if why is not None:
        say(f"PE build {why}; {flag} names another (all: the reference design)", stream)


@contextlib.contextmanager
def step(text, *, stream=None, done="done in {seconds:.1f} s", after=None):
    """Say what a long step does while it runs.

    Once the step has run for ``after`` seconds (default :data:`SHOW_AFTER`; a shorter step
    says nothing): ``text ...``, then its elapsed time (redrawn in place on a terminal once a
    second; a new line every :data:`STEP_LOG_EVERY` seconds in a log or while other steps run
    beside it), and at the end ``text: <done>`` (``done`` formatted with ``seconds``; the
    context's value may replace it: ``with step(...) as s: s["done"] = ...``; ``s["detail"]``
    set while it runs, such as ``"12,000 / 40,000 instructions"``, follows the elapsed time).
    A step that raises ends with ``text: failed after N s``.
    """
    stream = stream or sys.stderr
    after = SHOW_AFTER if after is None else after
    tty = hasattr(stream, "isatty") and stream.isatty()
    state = {"done": done, "shown": False, "drawn": 0}
    t0 = time.perf_counter()
    stop = threading.Event()

    def detail():
        return f"  {state['detail']}" if state.get("detail") else ""

    def show():
        if not state["shown"]:
            say(f"{text} ...", stream)
            state["shown"] = True

    def tick():
        last_log = time.perf_counter()
        while not stop.wait(min(1.0, max(after, 0.01))):
            now = time.perf_counter()
            if now - t0 < after:
                continue
            if not state["shown"]:
                show()
                last_log = now
                continue
            with _lock:
                if tty and _active == [state]:
                    line = f"{text} ... {now - t0:.0f} s{detail()}"
                    stream.write("\r" + line)
                    stream.flush()
                    state["drawn"] = len(line)
                    continue
            if now - last_log >= STEP_LOG_EVERY:
                say(f"{text} ... {now - t0:.0f} s{detail()}", stream)
                last_log = now

    if after <= 0:
        show()
    with _lock:
        _active.append(state)
    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    ok = False
    try:
        yield state
        ok = True
    finally:
        stop.set()
        thread.join()
        with _lock:
            _active.remove(state)
            if state["drawn"]:
                stream.write("\r" + " " * state["drawn"] + "\r")
        seconds = time.perf_counter() - t0
        if state["shown"]:
            end = state["done"].format(seconds=seconds) if ok else f"failed after {seconds:.1f} s"
            say(f"{text}: {end}", stream)
