"""Valid/ready stream driver and monitor for cocotb 2.x, plus lane packing helpers.

A *stream* is three signals on one clock: ``valid`` (producer -> consumer), ``ready``
(consumer -> producer) and a packed ``payload`` word.  A word is transferred at a rising edge
where ``valid`` and ``ready`` are both 1.  Once the producer raises ``valid`` it holds ``valid``
and ``payload`` until that transfer happens.  Every stream of the design is an
:class:`amaranth.lib.stream.Signature`; a stream ``x`` of a Verilog top has the ports
``x__valid``, ``x__ready`` and ``x__payload``, which :meth:`StreamBus.from_prefix` finds.

:class:`StreamSource` plays the producer (drives ``valid``/``payload``, samples ``ready``) and
:class:`StreamSink` the consumer (drives ``ready``, samples ``valid``/``payload``), in the style
of cocotbext-axi: each takes a :class:`StreamBus`, the clock and optionally the reset, and runs
one background task started by its constructor, with a queue on the Python side and events to
wait on.  A new block's stream is one call::

    self.instr = StreamSource(StreamBus.from_prefix(dut, "instr"), dut.clk, dut.rst,
                              stall=0.2, seed=1)

Reset
-----
With a reset (active high), nothing transfers while it is asserted: a source drives ``valid``
low and keeps its words (the word it was presenting goes back to the head of its queue), and
presents them after the release; a sink drives ``ready`` low and records nothing.  Words the
DUT accepted before the reset are the DUT's to lose.  The reset is watched by its own task on
its edges, so it costs nothing per cycle.

Sampling contract
-----------------
Both tasks wake once per cycle on ``RisingEdge(clock)`` and read the handshake signals right
there, without ``ReadOnly``.  In cocotb's timing model an edge trigger returns before any HDL
reacts to the edge, so the values read are the ones the flops sampled at that edge, and writes
made then take effect after the edge, like a non-blocking assignment.  cocotb's documentation
warns that Verilator may run edge triggers after evaluating the edge instead; with cocotb 2.1,
Verilator 5.048 and ``COCOTB_TRUST_INERTIAL_WRITES=1`` (set by :mod:`ncrtl.testbench.sim`) it
does not: the clock write is applied between model evaluations, and the edge trigger fires
before the model evaluates the edge.  This was checked with both the C++ and the Python
:class:`cocotb.clock.Clock`, and the self-test (:mod:`ncrtl.testbench.selftest.test_stream`)
guards it with a loss/duplication scoreboard and a one-word-per-cycle throughput test.  Not
using ``ReadOnly`` halves the awaits per cycle, and awaits and VPI round-trips are what limit
cocotb's speed.

Lanes
-----
A word of ``lanes`` lanes of ``lane_bits`` bits has lane ``i`` in bits
``[i*lane_bits, (i+1)*lane_bits)`` (lane 0 in the LSBs), matching Amaranth's ``Cat(lane0, ...)``
and ``data[i*w:(i+1)*w]``.  :func:`pack_lanes` / :func:`unpack_lanes` convert between numpy
arrays of shape ``(n, lanes)`` and lists of Python ints, without a Python loop over lanes.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Iterable

import numpy as np

__all__ = ["pack_lanes", "unpack_lanes", "StreamBus", "StreamSource", "StreamSink"]


# --------------------------------------------------------------------------------------------
# Lane packing
# --------------------------------------------------------------------------------------------

_BYTE_LANES = {8: "<u1", 16: "<u2", 32: "<u4", 64: "<u8"}


def _check_lane_bits(lane_bits) -> None:
    if (
        not isinstance(lane_bits, (int, np.integer))
        or isinstance(lane_bits, bool)
        or not (1 <= lane_bits <= 64)
    ):
        raise ValueError(f"Lane bits must be an integer between 1 and 64, not {lane_bits!r}")


def _as_lane_bits(values, lane_bits: int) -> np.ndarray:
    """Return ``values`` as a 2-D uint64 array of lane bit patterns, checking the range."""
    arr = np.asarray(values)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"Lane values must be a 1-D or 2-D array, not {arr.ndim}-D")
    if arr.dtype.kind in "ui":
        if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
            raise ValueError("Lane values must be non-negative bit patterns")
        arr = arr.astype(np.uint64, copy=False)
    elif arr.dtype.kind == "b":
        arr = arr.astype(np.uint64)
    elif arr.dtype.itemsize * 8 == lane_bits and arr.dtype.itemsize in (1, 2, 4, 8):
        # Floating point (including ml_dtypes' bfloat16/float8): send the bit pattern.
        arr = np.ascontiguousarray(arr).view(f"<u{arr.dtype.itemsize}").astype(np.uint64)
    else:
        raise TypeError(
            f"Lane values must be integer bit patterns (or a {lane_bits}-bit type to reinterpret),"
            f" not {arr.dtype}"
        )
    if lane_bits < 64 and arr.size and int(arr.max()) >> lane_bits:
        raise ValueError(f"Lane value 0x{int(arr.max()):x} does not fit in {lane_bits} bits")
    return arr


def pack_lanes(values, lane_bits: int) -> list[int]:
    """Pack rows of lane values into one integer word per row.

    Parameters
    ----------
    values : array_like, shape (n, lanes) or (lanes,)
        Unsigned bit patterns (any integer dtype; floating dtypes whose width equals
        ``lane_bits``, such as ``ml_dtypes.bfloat16`` for 16, are reinterpreted bit for bit).
    lane_bits : int
        Bits per lane, 1 to 64.

    Returns
    -------
    list of int
        ``n`` words; lane ``i`` of a row sits in bits ``[i*lane_bits, (i+1)*lane_bits)``.

    Raises
    ------
    ValueError
        A value is negative or does not fit in ``lane_bits``.
    """
    _check_lane_bits(lane_bits)
    arr = _as_lane_bits(values, lane_bits)
    n, lanes = arr.shape
    if lane_bits in _BYTE_LANES:
        raw = arr.astype(_BYTE_LANES[lane_bits]).tobytes()
        step = lanes * lane_bits // 8
    else:
        # Any width: expand to a little-endian bit matrix, then let packbits build the bytes.
        bits = ((arr[:, :, None] >> np.arange(lane_bits, dtype=np.uint64)) & 1).astype(np.uint8)
        raw = np.packbits(bits.reshape(n, lanes * lane_bits), axis=1, bitorder="little").tobytes()
        step = (lanes * lane_bits + 7) // 8
    from_bytes = int.from_bytes
    return [from_bytes(raw[i : i + step], "little") for i in range(0, n * step, step)]


def unpack_lanes(words: Iterable[int], lane_bits: int, lanes: int) -> np.ndarray:
    """Split packed words into lanes; inverse of :func:`pack_lanes`.

    Parameters
    ----------
    words : iterable of int
        Non-negative words of at most ``lanes * lane_bits`` bits.
    lane_bits : int
        Bits per lane, 1 to 64.
    lanes : int
        Lanes per word.

    Returns
    -------
    numpy.ndarray, shape (n, lanes)
        Lane bit patterns in the smallest of uint8/16/32/64 that holds ``lane_bits``.

    Raises
    ------
    ValueError
        A word is negative or wider than ``lanes * lane_bits``.
    """
    _check_lane_bits(lane_bits)
    if not isinstance(lanes, (int, np.integer)) or isinstance(lanes, bool) or lanes < 1:
        raise ValueError(f"Lanes must be a positive integer, not {lanes!r}")
    words = list(words)
    width = lanes * lane_bits
    nbytes = (width + 7) // 8
    try:
        raw = b"".join(w.to_bytes(nbytes, "little") for w in words)
    except OverflowError:
        bad = next(w for w in words if w < 0 or w >> width)
        raise ValueError(f"Word 0x{bad:x} does not fit in {lanes} x {lane_bits} bits") from None
    if width % 8 and any(w >> width for w in words):
        bad = next(w for w in words if w >> width)
        raise ValueError(f"Word 0x{bad:x} does not fit in {lanes} x {lane_bits} bits")
    out_dtype = np.dtype(next(f"u{k // 8}" for k in (8, 16, 32, 64) if lane_bits <= k))
    n = len(words)
    if lane_bits in _BYTE_LANES:
        return np.frombuffer(raw, dtype=_BYTE_LANES[lane_bits]).reshape(n, lanes).astype(out_dtype)
    by = np.frombuffer(raw, dtype=np.uint8).reshape(n, nbytes)
    bits = np.unpackbits(by, axis=1, bitorder="little")[:, :width].reshape(n, lanes, lane_bits)
    weights = np.uint64(1) << np.arange(lane_bits, dtype=np.uint64)
    return (bits.astype(np.uint64) * weights).sum(axis=2, dtype=np.uint64).astype(out_dtype)


# --------------------------------------------------------------------------------------------
# Driver and monitor
# --------------------------------------------------------------------------------------------


def _check_probability(name: str, p) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability between 0 and 1, not {p!r}")
    return float(p)


def _check_signal(role: str, handle, width: int | None = None):
    if handle is None or not hasattr(handle, "value"):
        raise TypeError(f"{role} must be a simulator signal handle, not {handle!r}")
    if width is not None and len(handle) != width:
        raise ValueError(f"{role} must be {width} bit wide, not {len(handle)}")
    return handle


def _name_of(handle) -> str:
    return getattr(handle, "_path", None) or getattr(handle, "_name", None) or repr(handle)


class StreamBus:
    """The three signal handles of one stream of a DUT.

    Parameters
    ----------
    valid, ready, payload : cocotb signal handles
        ``valid`` and ``ready`` 1 bit wide.
    """

    def __init__(self, valid, ready, payload):
        self.valid = _check_signal("Valid", valid, 1)
        self.ready = _check_signal("Ready", ready, 1)
        self.payload = _check_signal("Payload", payload)

    @classmethod
    def from_prefix(cls, dut, prefix):
        """The stream ``prefix`` of a DUT: its ports ``prefix__valid``, ``prefix__ready`` and
        ``prefix__payload`` (how Amaranth names the members of an ``amaranth.lib.stream``
        interface).

        Raises
        ------
        AttributeError
            A port is missing; the message names the three ports looked for.
        """
        handles = []
        for member in ("valid", "ready", "payload"):
            try:
                handles.append(getattr(dut, f"{prefix}__{member}"))
            except AttributeError:
                raise AttributeError(
                    f"{_name_of(dut)} has no stream {prefix!r}: looked for the ports "
                    f"{prefix}__valid, {prefix}__ready and {prefix}__payload"
                ) from None
        return cls(*handles)

    def __repr__(self):
        return f"StreamBus({_name_of(self.payload)})"


class _ResetWatch:
    """Follow an active-high reset on its edges (no per-cycle cost): ``asserted`` and an event
    ``released`` set while it is deasserted."""

    def __init__(self, reset):
        import cocotb
        from cocotb.triggers import Event

        self.reset = reset
        self.released = Event()
        self.asserted = reset is not None and reset.value == 1
        if not self.asserted:
            self.released.set()
        self._task = cocotb.start_soon(self._run()) if reset is not None else None

    async def _run(self):
        while True:
            if self.asserted:
                await self.reset.falling_edge
                self.asserted = False
                self.released.set()
            else:
                await self.reset.rising_edge
                self.asserted = True
                self.released.clear()

    def stop(self):
        if self._task is not None:
            self._task.cancel()


class StreamSource:
    """Drive words into a DUT's stream input.

    Parameters
    ----------
    bus : StreamBus
        ``valid`` and ``payload`` driven by the source, ``ready`` by the DUT.
    clock : cocotb signal handle
        Clock; transfers happen at its rising edges.
    reset : cocotb signal handle, optional
        Active-high reset (see the module docstring).
    stall : float
        Probability that the source leaves ``valid`` low for a cycle although it has a word
        queued (a random idle cycle).  Never applied while a word is waiting for ``ready``.
    seed : int
        Seed of the private random generator deciding the idle cycles.

    Notes
    -----
    Construct it in a cocotb test (it starts its task with :func:`cocotb.start_soon`) and not in
    the ``ReadOnly`` phase.  Words are sent in queue order, each exactly once; ``payload`` is
    only written when a new word is presented and stays stable while ``valid and not ready``.  A
    word queued while the source is idle is presented immediately (in the current cycle) unless
    the stall draw says otherwise.  Without a reset, queue words once the DUT is out of reset:
    a DUT in reset may show ``ready`` high and swallow them.
    """

    def __init__(self, bus, clock, reset=None, *, stall=0.0, seed=0):
        import cocotb
        from cocotb.triggers import Event

        if not isinstance(bus, StreamBus):
            raise TypeError(f"Bus must be a StreamBus, not {bus!r}")
        self._clock = _check_signal("Clock", clock, 1)
        if reset is not None:
            _check_signal("Reset", reset, 1)
        self._valid, self._ready, self._data = bus.valid, bus.ready, bus.payload
        self.stall = stall
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"Seed must be an integer, not {seed!r}")
        self._rng = random.Random(seed)
        self._width = len(bus.payload)
        self._queue: collections.deque[int] = collections.deque()
        self._sent = 0
        self._idle = Event()
        self._idle.set()
        self._active = Event()
        self._valid.value = 0
        self._reset = _ResetWatch(reset)
        self._task = cocotb.start_soon(self._run())

    @property
    def stall(self) -> float:
        """Probability of a random idle cycle; may be changed while running."""
        return self._stall

    @stall.setter
    def stall(self, value) -> None:
        self._stall = _check_probability("Stall", value)

    @property
    def width(self) -> int:
        """Width of the payload in bits."""
        return self._width

    @property
    def sent(self) -> int:
        """Number of words accepted by the DUT so far."""
        return self._sent

    @property
    def pending(self) -> int:
        """Number of queued words not yet presented (the presented one excluded)."""
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """True when every queued word has been accepted."""
        return self._idle.is_set()

    def send(self, words) -> None:
        """Queue one word or an iterable of words (non-negative ints that fit the payload)."""
        if isinstance(words, (int, np.integer)):
            words = [words]
        words = [int(w) for w in words]
        width = self._width
        for w in words:
            if w < 0 or w >> width:
                raise ValueError(f"Word 0x{w:x} does not fit in {width}-bit {_name_of(self._data)}")
        if not words:
            return
        self._queue.extend(words)
        self._idle.clear()
        self._active.set()

    def send_lanes(self, values, lane_bits: int) -> None:
        """Queue one word per row of ``values`` (see :func:`pack_lanes`).

        Raises
        ------
        ValueError
            The packed rows do not fill the payload exactly.
        """
        arr = np.asarray(values)
        lanes = arr.shape[-1] if arr.ndim else 0
        if lanes * lane_bits != self._width:
            raise ValueError(
                f"{lanes} lanes x {lane_bits} bits do not match {self._width}-bit "
                f"{_name_of(self._data)}"
            )
        self.send(pack_lanes(arr, lane_bits))

    async def wait(self) -> None:
        """Wait until every queued word has been accepted."""
        if not self._idle.is_set():
            await self._idle.wait()

    def stop(self) -> None:
        """Cancel the driver task (``valid`` keeps its last value)."""
        self._task.cancel()
        self._reset.stop()

    async def _run(self) -> None:
        # Hot loop: locals only, one await and at most one VPI read per cycle; valid is only
        # written when it changes and data only when a new word is presented.
        edge = self._clock.rising_edge
        valid, ready, data = self._valid, self._ready, self._data
        queue, rng, reset = self._queue, self._rng, self._reset
        driving = False  # the valid we drive, i.e. a word is presented
        word = None  # the word presented
        while True:
            if not driving and not queue:
                self._idle.set()
                self._active.clear()
                await self._active.wait()
                # Present the new word right away: valid is low, so nothing is in flight.
            else:
                await edge
                if driving and not reset.asserted:
                    # Read at the edge = the value the DUT saw at this edge (module docstring).
                    if ready.value != 1:
                        continue  # not taken: hold valid and data
                    self._sent += 1
                    word = None
            if reset.asserted:
                # Nothing transfers in reset: the presented word goes back to the queue's head.
                if driving:
                    valid.value = 0
                    driving = False
                    queue.appendleft(word)
                    word = None
                await reset.released.wait()
            stall = self._stall
            if queue and not (stall and rng.random() < stall):
                word = queue.popleft()
                data.value = word
                if not driving:
                    valid.value = 1
                    driving = True
            elif driving:
                valid.value = 0
                driving = False


class StreamSink:
    """Accept words from a DUT's stream output and record them.

    Parameters
    ----------
    bus : StreamBus
        ``ready`` driven by the sink, ``valid`` and ``payload`` by the DUT.
    clock : cocotb signal handle
        Clock; transfers happen at its rising edges.
    reset : cocotb signal handle, optional
        Active-high reset: ``ready`` is low and nothing is accepted while it is asserted.
    backpressure : float
        Probability that ``ready`` is low in a cycle (drawn independently every cycle).
    seed : int
        Seed of the private random generator deciding ``ready``.

    Attributes
    ----------
    words : list of int
        Every accepted word, in order.
    cycles : list of int
        For each word, the cycle it was accepted at: the number of rising edges the sink has
        seen since it started, counting the accepting edge (so the first edge is cycle 1).

    Notes
    -----
    ``payload`` is only read at edges that transfer a word.  An X/Z bit in an accepted word
    raises :class:`ValueError` in the sink task, which fails the test.
    """

    def __init__(self, bus, clock, reset=None, *, backpressure=0.0, seed=0):
        import cocotb
        from cocotb.triggers import Event

        if not isinstance(bus, StreamBus):
            raise TypeError(f"Bus must be a StreamBus, not {bus!r}")
        self._clock = _check_signal("Clock", clock, 1)
        if reset is not None:
            _check_signal("Reset", reset, 1)
        self._valid, self._ready, self._data = bus.valid, bus.ready, bus.payload
        self.backpressure = backpressure
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"Seed must be an integer, not {seed!r}")
        self._rng = random.Random(seed)
        self._width = len(bus.payload)
        self.words: list[int] = []
        self.cycles: list[int] = []
        self._read = 0
        self._cycle = 0
        self._target: int | None = None
        self._timeout: int | None = None
        self._last_progress = 0
        self._timed_out = False
        self._event = Event()
        # In reset the sink drives ready low and records nothing; it keeps counting cycles.
        self._reset = _ResetWatch(reset)
        self._ready_driven = self._draw_ready()
        self._ready.value = int(self._ready_driven)
        self._task = cocotb.start_soon(self._run())

    @property
    def backpressure(self) -> float:
        """Probability of ``ready`` low in a cycle; may be changed while running."""
        return self._backpressure

    @backpressure.setter
    def backpressure(self, value) -> None:
        self._backpressure = _check_probability("Backpressure", value)

    @property
    def width(self) -> int:
        """Width of ``data`` in bits."""
        return self._width

    @property
    def count(self) -> int:
        """Number of words accepted so far."""
        return len(self.words)

    @property
    def cycle(self) -> int:
        """Rising edges seen since the sink started."""
        return self._cycle

    @property
    def available(self) -> int:
        """Accepted words not yet returned by :meth:`recv` / :meth:`recv_lanes`."""
        return len(self.words) - self._read

    def _draw_ready(self) -> bool:
        bp = self._backpressure
        return not (bp and self._rng.random() < bp) and not self._reset.asserted

    async def wait(self, n: int, *, timeout: int | None = 10_000) -> None:
        """Wait until at least ``n`` words have been accepted in total.

        Parameters
        ----------
        n : int
            Total word count to reach.
        timeout : int or None
            Give up after this many consecutive cycles without an accepted word; None waits
            forever.

        Raises
        ------
        TimeoutError
            No word arrived for ``timeout`` cycles: the DUT stopped producing.
        RuntimeError
            Another task is already waiting on this sink.
        """
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"Word count must be a non-negative integer, not {n!r}")
        if timeout is not None and (not isinstance(timeout, int) or timeout < 1):
            raise ValueError(
                f"Timeout must be a positive number of cycles or None, not {timeout!r}"
            )
        if len(self.words) >= n:
            return
        if self._target is not None:
            raise RuntimeError(
                f"{_name_of(self._data)}: another task is already waiting on this sink"
            )
        self._target, self._timeout = n, timeout
        self._last_progress = self._cycle
        self._timed_out = False
        self._event.clear()
        try:
            await self._event.wait()
        finally:
            self._target = None
        if self._timed_out:
            raise TimeoutError(
                f"{_name_of(self._data)}: received {len(self.words)} of {n} words; none for "
                f"{timeout} cycles (at cycle {self._cycle}, ready asserted "
                f"{'yes' if self._ready_driven else 'no'}, backpressure {self._backpressure})"
            )

    async def recv(self, n: int, *, timeout: int | None = 10_000) -> list[int]:
        """Return the next ``n`` unread words, waiting for them (see :meth:`wait`)."""
        await self.wait(self._read + n, timeout=timeout)
        out = self.words[self._read : self._read + n]
        self._read += n
        return out

    async def recv_lanes(
        self, n: int, lane_bits: int, lanes: int, *, timeout: int | None = 10_000
    ) -> np.ndarray:
        """Return the next ``n`` unread words unpacked to shape ``(n, lanes)`` (see :func:`unpack_lanes`)."""
        if lanes * lane_bits != self._width:
            raise ValueError(
                f"{lanes} lanes x {lane_bits} bits do not match {self._width}-bit "
                f"{_name_of(self._data)}"
            )
        return unpack_lanes(await self.recv(n, timeout=timeout), lane_bits, lanes)

    def stop(self) -> None:
        """Cancel the monitor task (``ready`` keeps its last value)."""
        self._task.cancel()
        self._reset.stop()

    async def _run(self) -> None:
        # Hot loop: one await, one VPI read of valid per cycle (plus data on a transfer).
        edge = self._clock.rising_edge
        valid, ready, data = self._valid, self._ready, self._data
        words, cycles, rng, reset = self.words, self.cycles, self._rng, self._reset
        driven = self._ready_driven
        cycle = self._cycle
        while True:
            await edge
            cycle += 1
            self._cycle = cycle
            if driven and not reset.asserted and valid.value == 1:
                value = data.value
                try:
                    words.append(value.to_unsigned())
                except ValueError:
                    raise ValueError(
                        f"{_name_of(data)}: non-0/1 data {value} accepted at cycle {cycle}"
                    ) from None
                cycles.append(cycle)
                self._last_progress = cycle
                if self._target is not None and len(words) >= self._target:
                    self._event.set()
            elif (
                self._target is not None
                and self._timeout is not None
                and (cycle - self._last_progress >= self._timeout)
            ):
                self._timed_out = True
                self._event.set()
            bp = self._backpressure
            r = not (bp and rng.random() < bp) and not reset.asserted
            if r != driven:
                ready.value = int(r)
                driven = r
                self._ready_driven = r
