"""The tracing context of ``ncrtl.nki``: the kernel being traced, its tensors, its errors.

A kernel runs its Python once per trace; every NKI call lands here: a tensor creation becomes a
:class:`ncrtl.model.kernel.build.Decl`, an instruction an entry of the
:class:`~ncrtl.model.kernel.build.Builder`, with the kernel's ``file:line`` of the call.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import sysconfig
import threading
import time

import numpy as np

from ncrtl.model.kernel.build import Operand, collector_paused
from ncrtl.model.kernel.dtypes import DTYPES, dtype_of
from ncrtl.model.kernel.stream import Ref

__all__ = [
    "NkiError",
    "NotModelled",
    "TraceLimit",
    "Bounds",
    "NkiTensor",
    "current",
    "caller_line",
    "kernel_error",
    "kernel_code",
    "stand_in",
    "checked_call",
    "checked_module",
    "Trace",
]

_HERE = os.path.dirname(os.path.abspath(__file__))
_state = threading.local()


class NkiError(ValueError):
    """A kernel broke a rule of the NKI API or of the hardware: the message starts with the
    kernel's ``file:line`` and names the call, the operand and the rule."""


class NotModelled(NkiError):
    """A call of the NKI API that ncrtl does not model."""


class TraceLimit(NkiError):
    """A trace ran past one of its :class:`Bounds` (instructions, seconds)."""


_INSIDE = {}  # a code object's file -> whether it is ncrtl.nki's (asked once per file)
# Values every instruction carries that a kernel repeats (its lines, its views' patterns): one
# object per distinct value, not one per instruction (up to _SHARED_MAX of them)
_SHARED = {}
_SHARED_MAX = 1 << 16
_EXTENTS = {}  # a view (its tensor's space, shape and dtype) -> its extent at address 0


def _shared(value):
    got = _SHARED.get(value)
    if got is None:
        got = value
        if len(_SHARED) < _SHARED_MAX:
            _SHARED[value] = value
    return got


def _inside(path):
    inside = _INSIDE.get(path)
    if inside is None:
        d = os.path.dirname(os.path.abspath(path))
        inside = _INSIDE[path] = d == _HERE or os.path.dirname(d) == _HERE  # and nki.isa's
    return inside


def caller_line():
    """``file:line`` of the innermost frame outside ``ncrtl.nki`` (the kernel's call)."""
    f = sys._getframe(1)
    while f is not None and _inside(f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return "<unknown>"
    line = _SHARED.get((f.f_code.co_filename, f.f_lineno))
    if line is None:
        line = f"{f.f_code.co_filename}:{f.f_lineno}"
        if len(_SHARED) < _SHARED_MAX:
            _SHARED[(f.f_code.co_filename, f.f_lineno)] = line
    return line


def fail(call, message, cls=NkiError):
    """Raise ``cls`` with the kernel's line, the call and the message."""
    raise cls(f"{caller_line()}: {call}: {message}")


def not_modelled(name):
    raise NotModelled(
        f"{caller_line()}: {name} is not modelled by ncrtl (docs/kernels.md lists the supported "
        f"calls)"
    )


class _Unmodelled(type):
    """The type of a stand-in (:func:`stand_in`): the stand-in is a class, so that a kernel may
    subclass it as it subclasses ``nl.NKIObject``; calling or indexing the stand-in itself
    raises :class:`NotModelled` at the kernel's line."""

    def __call__(cls, *args, **kwargs):
        if "_nki_name" in cls.__dict__:
            not_modelled(cls._nki_name)
        return super().__call__(*args, **kwargs)

    def __getitem__(cls, key):
        if "_nki_name" in cls.__dict__:
            not_modelled(f"{cls._nki_name}[...]")
        raise TypeError(f"{cls.__name__} is not subscriptable")

    def __repr__(cls):
        return cls.__dict__.get("_nki_short") or super().__repr__()


_STAND_INS = {}


def stand_in(module, short, name):
    """The stand-in of ``module.name`` (``nki.language.divide``), a name of the NKI API that
    ncrtl does not model, shown as ``short.name`` (``nl.divide``); one object per name."""
    key = (module, name)
    if key not in _STAND_INS:
        _STAND_INS[key] = _Unmodelled(
            name,
            (),
            {
                "_nki_name": f"{module}.{name}",
                "_nki_short": f"{short}.{name}",
                "__module__": module,
                "__doc__": f"{module}.{name}: not modelled by ncrtl (docs/kernels.md)",
            },
        )
    return _STAND_INS[key]


def _signature_error(call, sig, args, kwargs):
    """The one-line rule a call's arguments break (``sig`` does not bind them), or None."""
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        pass
    else:
        return None
    params = sig.parameters
    names = ", ".join(params)
    positional = [
        p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    for k in kwargs:
        if k not in params:
            return f"no argument {k!r} (its arguments: {names})"
    if len(args) > len(positional):
        return f"takes at most {len(positional)} positional arguments ({names}), got {len(args)}"
    given = {p.name for p in positional[: len(args)]} | set(kwargs)
    for k in kwargs:
        if k in {p.name for p in positional[: len(args)]}:
            return f"argument {k!r} given twice (by position and by name)"
    missing = [
        p.name
        for p in params.values()
        if p.default is p.empty
        and p.kind != p.VAR_POSITIONAL
        and p.kind != p.VAR_KEYWORD
        and p.name not in given
    ]
    if missing:
        return f"missing argument {missing[0]!r} (its arguments: {names})"
    return f"arguments that do not fit ({names})"


def checked_call(call, fn):
    """``fn`` as the NKI call ``call`` (``"nisa.tensor_copy"``): arguments that do not fit its
    signature (an unknown keyword, a missing argument, too many) raise :class:`NkiError`
    naming the call and the argument at the kernel's line, never Python's own text.  The
    signature is bound only when the call raises ``TypeError``, so a call that fits costs
    nothing more."""
    import functools
    import inspect

    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError:
            bad = _signature_error(call, sig, args, kwargs)
            if bad is None:
                raise
        fail(call, bad)

    return checked


def checked_module(namespace, short):
    """Wrap every public function of a module's ``namespace`` (its ``__all__``) with
    :func:`checked_call`, named ``short.name``."""
    import types

    for name in namespace.get("__all__", ()):
        fn = namespace.get(name)
        if isinstance(fn, types.FunctionType) and not name.startswith("_"):
            namespace[name] = checked_call(f"{short}.{name}", fn)


# -- the kernel's own Python: its errors, its bounds -----------------------------------------------

# Frames of these folders are a library's (the standard library, installed packages), neither
# ncrtl's nor the kernel's: an error's line is the kernel's call into them.
_LIBRARIES = tuple(
    {
        os.path.join(os.path.realpath(p), "")
        for k, p in sysconfig.get_paths().items()
        if k in ("stdlib", "platstdlib", "purelib", "platlib")
    }
)


def _kind(frame):
    """``"ncrtl"``, ``"library"`` or ``"kernel"``: whose code ``frame`` runs.  ncrtl's modules
    go by their names (the shipped examples load as ``ncrtl_kernel_*``, kernels as any other)."""
    module = frame.f_globals.get("__name__") or ""
    if module == "ncrtl" or module.startswith("ncrtl."):
        return "ncrtl"
    path = frame.f_code.co_filename
    if path.startswith("<") or os.path.realpath(path).startswith(_LIBRARIES):
        return "library"
    return "kernel"


def _kernel_frame(frames):
    """``(frame, line)``: the innermost of ``frames`` (outermost first) that runs the kernel's
    code, else the innermost outside ncrtl; None if all are ncrtl's."""
    for wanted in (("kernel",), ("kernel", "library")):
        for frame, line in reversed(frames):
            if _kind(frame) in wanted:
                return frame, line
    return None


def _stack(frame, outer):
    """``(frame, line)`` from ``frame`` out to ``outer`` (not included), outermost first."""
    frames = []
    while frame is not None and frame is not outer:
        frames.append((frame, frame.f_lineno))
        frame = frame.f_back
    return frames[::-1]


def _one_line(text):
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def kernel_error(exc):
    """The one-line :class:`NkiError` that ``exc``, raised while ncrtl ran a kernel's own Python
    (its file imported, the kernel traced), is to the kernel's author:
    ``file:line: Type: message`` at the innermost frame of the kernel's code (its file, or any
    file that is neither ncrtl's nor an installed library's), never a line inside ncrtl; where
    ``exc`` was raised inside ncrtl, on the kernel's arguments, the message ends with where.
    An :class:`NkiError` is its own message.  None where no frame is the kernel's: ``exc`` is
    a bug in ncrtl, whose traceback belongs in a bug report."""
    if isinstance(exc, NkiError):
        return exc
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    found = _kernel_frame(frames)
    if found is None:
        return None
    frame, line = found
    path = frame.f_code.co_filename
    kind = type(exc).__name__
    message = _one_line(exc)
    if isinstance(exc, SystemExit):
        code = "" if exc.code is None else repr(exc.code)
        message = f"the kernel's code called sys.exit({code}); a kernel returns its tensors"
    elif isinstance(exc, AssertionError) and not message:
        import linecache

        message = f"the kernel's assertion failed: {linecache.getline(path, line).strip()}"
    text = f"{path}:{line}: {kind}: {message}" if message else f"{path}:{line}: {kind}"
    inner, at = frames[-1]
    if _kind(inner) == "ncrtl":
        text += f" (raised inside ncrtl: {inner.f_globals['__name__']} line {at})"
    return NkiError(text)


class kernel_code:
    """``with kernel_code():`` around ncrtl running a kernel's own Python (importing its file,
    tracing it): any exception of it, ``sys.exit`` too, leaves as :func:`kernel_error`'s
    :class:`NkiError`; a ``KeyboardInterrupt`` and a bug in ncrtl (no frame of the kernel) as
    they are."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, (KeyboardInterrupt, NkiError)):
            return False
        err = kernel_error(exc)
        if err is None:
            return False
        raise err from None


class Bounds:
    """What tracing a kernel may take: ``instructions`` (emitted by the whole trace, both cores
    of a ``kernel[2]``) and ``seconds`` (wall clock); None: no bound.  ``emitted`` counts the
    instructions so far (a progress display reads it from another thread: ``str(bounds)``).

    The time limit holds in the main thread by ``SIGALRM`` (a kernel looping in Python with no
    NKI call is stopped too); elsewhere at each instruction the kernel emits."""

    def __init__(self, instructions=None, seconds=None):
        self.instructions = instructions
        self.seconds = seconds
        self.emitted = 0
        self.deadline = None

    def __str__(self):
        return f"{self.emitted:,} instructions"

    def emit(self, call):
        """Count one instruction of ``call``; :class:`TraceLimit` past a bound."""
        self.emitted += 1
        if self.instructions is not None and self.emitted > self.instructions:
            raise TraceLimit(
                f"{caller_line()}: {call}: tracing stopped: the kernel emits more than "
                f"{self.instructions:,} instructions, the trace's instruction bound (ncrtl run "
                f"--max-instructions)"
            )
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise self._timeout(caller_line())

    def _timeout(self, where):
        return TraceLimit(
            (f"{where}: " if where else "")
            + f"tracing stopped after {self.seconds:g} s, the trace's time limit (ncrtl run "
            f"--trace-timeout), at {self.emitted:,} instructions"
            + ("" if where else ", after the kernel returned (placing its tensors)")
        )

    def __enter__(self):
        self._alarm = None
        if self.seconds is None:
            return self
        self.deadline = time.monotonic() + self.seconds
        if threading.current_thread() is not threading.main_thread() or not hasattr(
            signal, "setitimer"
        ):
            return self
        armed = [True]
        outer = sys._getframe(1)  # the trace's caller: its frames are not the kernel's

        def alarm(signum, frame):
            # a late signal, after the trace: nothing to stop
            if armed[0]:
                found = _kernel_frame(_stack(frame, outer))
                raise self._timeout(found and f"{found[0].f_code.co_filename}:{found[1]}")

        previous = signal.signal(signal.SIGALRM, alarm)
        # again every second: a kernel that catches the first one is stopped by the next
        other = signal.setitimer(signal.ITIMER_REAL, max(self.seconds, 1e-6), 1.0)
        self._alarm = (armed, previous, other, time.monotonic())
        return self

    def __exit__(self, *exc):
        self.deadline = None
        if self._alarm is None:
            return False
        armed, previous, other, t0 = self._alarm
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        # None: a handler installed from outside Python, which cannot be put back
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
        if other[0] > 0:  # an alarm someone else had set, less the time spent here
            signal.setitimer(
                signal.ITIMER_REAL, max(other[0] - (time.monotonic() - t0), 1e-6), other[1]
            )
        return False


class Trace:
    """One trace of a kernel: its builder, its core, its logical-core id."""

    def __init__(
        self, builder, core, program_id=0, num_programs=1, psum_rounding="rne", bounds=None
    ):
        self.builder = builder
        self.bounds = bounds  # a Bounds, or None
        self.psum_rounding = psum_rounding  # BF16 PSUM writes: "rne" or "sr" (NeuronCore-v4)
        self.core = core
        self.program_id = program_id
        self.num_programs = num_programs
        self.matmul_written = {}  # PSUM decl -> set of boxes a matmul wrote (accumulate=None)
        self.identities = {}  # (partitions, dtype) -> identity tensor for PE transposes
        self.pipes = {}  # sendrecv pipe_id -> sendrecvs posted on it so far
        # The launch grid (None: not launched, nl.program_ndim() 0) and this instance's
        # position in it; a core runs its instances one after another (ncrtl.nki.kernel).
        self.grid = None
        self.position = (0,)
        self.instance = 0  # this instance's place among its core's instances
        self.device = []  # the device tensors the core's first instance made, in order
        self.made = 0  # device tensors this instance has made so far
        self.groups = {}  # cores of a group operation -> its calls so far (their turn)
        self.loops = []  # the dynamic loops open (ncrtl.nki.control), innermost last
        self.registers = 0  # virtual registers allocated so far (their names)
        self.shared = {}  # ncrtl-side constants (shared identities, constants) by key

    def device_tensor(self, make, shape, dtype):
        """A device tensor of the instance: made by ``make()`` in the core's first instance;
        a later instance's ``n``-th is the first instance's ``n``-th (instances run one after
        another on the core: shared device memory is one tensor for all of them)."""
        n = self.made
        self.made += 1
        if self.instance == 0:
            decl = make()
            self.device.append(decl)
            return decl
        if n >= len(self.device):
            return make()
        decl = self.device[n]
        if decl.shape != tuple(shape) or decl.dtype != dtype:
            fail(
                "nl.ndarray",
                f"instance {self.position} makes device tensor {n} as {list(shape)} {dtype}, "
                f"instance 0 made it {list(decl.shape)} {decl.dtype}: a grid's instances make "
                f"the same device tensors in the same order",
            )
        return decl


def current(call="this call"):
    t = getattr(_state, "trace", None)
    if t is None:
        fail(call, "NKI calls run inside a kernel (call the @nki.jit kernel, or nki.simulate)")
    return t


def current_or_none():
    """The active trace, or None outside a kernel."""
    return getattr(_state, "trace", None)


class active:
    """``with active(trace):`` -- the trace NKI calls go to."""

    def __init__(self, trace):
        self.trace = trace

    def __enter__(self):
        self.prev = getattr(_state, "trace", None)
        _state.trace = self.trace
        self.paused = collector_paused()
        self.paused.__enter__()
        return self.trace

    def __exit__(self, *exc):
        _state.trace = self.prev
        self.paused.__exit__(*exc)
        if exc[0] is None and getattr(self.trace, "loops", None):
            self.trace.loops[-1].unclosed()  # the kernel returned inside a dynamic loop


class _DS:
    """``nl.ds(start, size)``: a slice of ``size`` elements from ``start``."""

    __slots__ = ("start", "size")

    def __init__(self, start, size):
        self.start, self.size = start, size


def _int(v, what, call):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        fail(call, f"{what} must be an integer known when the kernel is traced, not {v!r}")
    return int(v)


class NkiTensor:
    """A tensor or a view of one: ``offset + sum(strides[k] * i_k)`` of its storage (elements of
    ``dtype``), as NKI's tensors address theirs; ``_dyn`` a run-time offset (:class:`_Dynamic`)
    or None."""

    _dyn = None

    def __init__(self, decl, shape, strides, offset, dtype):
        self._decl = decl
        self.shape = tuple(map(int, shape))
        self.strides = tuple(map(int, strides))
        self.offset = int(offset)
        self.dtype = dtype if type(dtype) is str and dtype in DTYPES else dtype_of(dtype).name

    # -- attributes as NKI names them ------------------------------------------------------

    @property
    def buffer(self):
        return self._decl.space if self._decl.space != "hbm" else "shared_hbm"

    @property
    def name(self):
        return self._decl.name

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def itemsize(self):
        return dtype_of(self.dtype).itemsize

    @property
    def on_chip(self):
        return self._decl.space != "hbm"

    def __repr__(self):
        return f"NkiTensor({self.name}, {list(self.shape)}, {self.dtype}, {self.buffer})"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        not_modelled(f"NkiTensor.{name}")

    def __setitem__(self, key, value):
        not_modelled("NkiTensor.__setitem__ (write through nki.isa instructions)")

    def __len__(self):
        return self.shape[0]

    def __iter__(self):
        fail("iteration over a tensor", "a tensor is not iterable; index it or slice it")

    # -- views -----------------------------------------------------------------------------

    def _view(self, shape, strides, offset, dtype=None):
        view = NkiTensor(self._decl, shape, strides, offset, dtype or self.dtype)
        view._dyn = self._dyn
        return view

    # -- the reference's view methods ---------------------------------------------------------

    def is_contiguous(self):
        """Whether the view covers its storage in row-major order: each dimension of more than
        one element steps by the elements of the dimensions inside it (on chip the partition
        dimension apart: partitions are separate memories)."""
        if self.on_chip:
            return _contiguous(self.shape[1:], self.strides[1:])
        return _contiguous(self.shape, self.strides)

    def get_pattern(self):
        """The view's access pattern, ``[[stride, count], ...]`` per dimension."""
        return [[s, n] for s, n in zip(self.strides, self.shape)]

    def is_indirect(self):
        """Whether the view has a run-time offset (a dynamic ``select``, ``vector_select``,
        ``.ap`` with ``scalar_offset`` / ``vector_offset``, ``.indirect``)."""
        return self._dyn is not None

    def _dim(self, call, dim, what="dim", extra=0):
        d = _int(dim, what, call)
        n = self.ndim + extra
        if d < 0:
            d += n
        if not 0 <= d < n:
            fail(call, f"{what} {dim} is not a dimension of {list(self.shape)}")
        return d

    def _free_dim(self, call, d, rule):
        """Refuse dimension ``d`` where it is the partition dimension of an on-chip tensor, or
        the indirect dimension of a ``vector_select`` view (``rule``: what the call would do)."""
        if d == 0 and self.on_chip:
            fail(call, f"dim 0 is the partition dimension of an on-chip tensor: it cannot {rule}")
        if d == 0 and self._dyn is not None and self._dyn.kind == "vector":
            fail(call, f"dim 0 is the indirect dimension (vector_offset): it cannot {rule}")

    def _not_indirect(self, call, what):
        if self._dyn is not None and self._dyn.kind == "ti":
            fail(
                call, f"{what} of an indirect view (.indirect): pass it to an instruction as it is"
            )

    def permute(self, dims):
        """The view with its dimensions in the order ``dims`` (a permutation of
        ``range(ndim)``; on chip, and after ``vector_select``, ``dims[0]`` is 0)."""
        call = f"{self.name}.permute"
        self._not_indirect(call, "permute")
        try:
            order = [_int(d, "dims", call) for d in dims]
        except TypeError:
            fail(call, f"dims must be a tuple of dimensions, not {dims!r}")
        if sorted(order) != list(range(self.ndim)):
            fail(call, f"dims {tuple(dims)} is not a permutation of range({self.ndim})")
        if order[0] != 0:
            self._free_dim(call, 0, "move")
        return self._view(
            [self.shape[d] for d in order], [self.strides[d] for d in order], self.offset
        )

    def broadcast(self, dim, size):
        """Dimension ``dim`` (of size 1) repeated ``size`` times: its stride 0."""
        call = f"{self.name}.broadcast"
        self._not_indirect(call, "broadcast")
        d = self._dim(call, dim)
        size = _int(size, "size", call)
        if self.shape[d] != 1:
            fail(call, f"dimension {d} has size {self.shape[d]}; only a size-1 one broadcasts")
        if size < 1:
            fail(call, f"size {size} must be at least 1")
        self._free_dim(call, d, "broadcast")
        shape, strides = list(self.shape), list(self.strides)
        shape[d], strides[d] = size, 0
        return self._view(shape, strides, self.offset)

    def expand_dim(self, dim):
        """A new dimension of size 1 at position ``dim``."""
        call = f"{self.name}.expand_dim"
        self._not_indirect(call, "expand_dim")
        d = self._dim(call, dim, extra=1)
        self._free_dim(call, d, "take a new dimension before it")
        inner = self.strides[d] * self.shape[d] if d < self.ndim else 1
        return self._view(
            self.shape[:d] + (1,) + self.shape[d:],
            self.strides[:d] + (inner,) + self.strides[d:],
            self.offset,
        )

    def squeeze_dim(self, dim):
        """The view without dimension ``dim`` (of size 1)."""
        call = f"{self.name}.squeeze_dim"
        self._not_indirect(call, "squeeze_dim")
        d = self._dim(call, dim)
        if self.shape[d] != 1:
            fail(call, f"dimension {d} has size {self.shape[d]}; only a size-1 one is removed")
        self._free_dim(call, d, "be removed")
        if self.ndim == 1:
            fail(call, "the view's only dimension cannot be removed")
        return self._view(
            self.shape[:d] + self.shape[d + 1 :],
            self.strides[:d] + self.strides[d + 1 :],
            self.offset,
        )

    def reshape_dim(self, dim, shape):
        """Dimension ``dim`` split into ``shape`` (one entry may be -1, inferred)."""
        call = f"{self.name}.reshape_dim"
        self._not_indirect(call, "reshape_dim")
        d = self._dim(call, dim)
        sizes = _sizes(call, shape, self.shape[d])
        if len(sizes) > 1 or sizes[0] != self.shape[d]:
            self._free_dim(call, d, "be split")
        strides, step = [], self.strides[d]
        for n in reversed(sizes):
            strides.append(step)
            step *= n
        return self._view(
            self.shape[:d] + sizes + self.shape[d + 1 :],
            self.strides[:d] + tuple(reversed(strides)) + self.strides[d + 1 :],
            self.offset,
        )

    def flatten_dims(self, start_dim, end_dim):
        """Dimensions ``start_dim`` .. ``end_dim`` (inclusive) merged into one; they must be
        contiguous with each other in the storage."""
        call = f"{self.name}.flatten_dims"
        self._not_indirect(call, "flatten_dims")
        a = self._dim(call, start_dim, "start_dim")
        b = self._dim(call, end_dim, "end_dim")
        if b < a:
            fail(call, f"end_dim {end_dim} comes before start_dim {start_dim}")
        if a == b:
            return self._view(self.shape, self.strides, self.offset)
        self._free_dim(call, a, "be merged")
        n = math.prod(self.shape[a : b + 1])
        merged = _restride(self.shape[a : b + 1], self.strides[a : b + 1], (n,))
        if merged is None:
            fail(
                call,
                f"dimensions {a}..{b} (shape {list(self.shape[a : b + 1])}, strides "
                f"{list(self.strides[a : b + 1])}) are not contiguous with each other",
            )
        return self._view(
            self.shape[:a] + (n,) + self.shape[b + 1 :],
            self.strides[:a] + tuple(merged) + self.strides[b + 1 :],
            self.offset,
        )

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None):
        """einops-style: ``src_pattern`` names each dimension (a tuple of names splits it),
        ``dst_pattern`` orders the names (a tuple of names merges them); ``fixed_sizes`` gives
        the sizes of split names (one per split may be left to infer)."""
        call = f"{self.name}.rearrange"
        self._not_indirect(call, "rearrange")
        fixed = dict(fixed_sizes or {})
        src = [g if isinstance(g, (tuple, list)) else (g,) for g in src_pattern]
        dst = [g if isinstance(g, (tuple, list)) else (g,) for g in dst_pattern]
        if len(src) != self.ndim:
            fail(call, f"src_pattern has {len(src)} entries for {self.ndim} dimensions")
        names = [n for g in src for n in g]
        if len(set(names)) != len(names) or sorted(names) != sorted(n for g in dst for n in g):
            fail(
                call,
                f"src_pattern {src_pattern} and dst_pattern {dst_pattern} name different dimensions",
            )
        view = self
        at = 0
        for g in src:
            if len(g) > 1:
                sizes = tuple(fixed.get(n, -1) for n in g)
                view = view.reshape_dim(at, sizes)
            at += len(g)
        order = [names.index(n) for g in dst for n in g]
        if order != list(range(len(names))):
            view = view.permute(tuple(order))
        at = 0
        for g in dst:
            if len(g) > 1:
                view = view.flatten_dims(at, at + len(g) - 1)
            at += 1
        return view

    def slice(self, dim, start, end, step=1):
        """Elements ``start`` .. ``end - 1`` of dimension ``dim``, every ``step``-th."""
        call = f"{self.name}.slice"
        self._not_indirect(call, "slice")
        d = self._dim(call, dim)
        start, end, step = (
            _int(v, w, call) for v, w in ((start, "start"), (end, "end"), (step, "step"))
        )
        if not 0 <= start < end <= self.shape[d]:
            fail(call, f"[{start}, {end}) is not inside dimension {d} of size {self.shape[d]}")
        if step < 1:
            fail(call, f"step {step} must be at least 1")
        if self._dyn is not None and self._dyn.kind == "vector" and d == 0:
            fail(call, "dim 0 is the indirect dimension (vector_offset): it cannot be sliced")
        key = [slice(None)] * self.ndim
        key[d] = slice(start, end, step)
        return self[tuple(key)]

    def select(self, dim, index):
        """Dimension ``dim`` removed at ``index``: an integer (static), or a ``[1, 1]`` SBUF
        tensor of an integer dtype whose value is read when the instruction runs (dynamic: the
        view's offset moves by the value times the dimension's stride)."""
        call = f"{self.name}.select"
        self._not_indirect(call, "select")
        d = self._dim(call, dim)
        if not isinstance(index, NkiTensor):
            i = _int(index, "index", call)
            if not 0 <= i < self.shape[d]:
                fail(call, f"index {i} is outside dimension {d} of size {self.shape[d]}")
            if self._dyn is not None and self._dyn.kind == "vector" and d == 0:
                fail(call, "dim 0 is the indirect dimension (vector_offset): it cannot be selected")
            if d == 0 and self.on_chip:
                return self[i]  # the partition dimension stays, of size 1
            key = [slice(None)] * self.ndim
            key[d] = i
            return self[tuple(key)]
        if self._dyn is not None:
            fail(call, "the view already has a run-time offset: one dynamic select per tensor")
        if d == 0 and self.on_chip:
            fail(call, "a dynamic select of the partition dimension: only free dimensions")
        if self.ndim == 1:
            fail(call, "the view's only dimension cannot be selected dynamically")
        _index_tensor(call, "index", index, scalar=True)
        view = NkiTensor(
            self._decl,
            self.shape[:d] + self.shape[d + 1 :],
            self.strides[:d] + self.strides[d + 1 :],
            self.offset,
            self.dtype,
        )
        view._dyn = _Dynamic("scalar", index, self.strides[d])
        view._static_check(call)
        return view

    def vector_select(self, dim, vector_offset):
        """Per-partition indirect addressing: index ``i`` of the view's first dimension is
        ``vector_offset``'s ``i``-th value (read when the instruction runs, times the
        dimension's stride); the first dimension's size becomes ``vector_offset.shape[0]``.
        Device-memory tensors, dim 0 only."""
        call = f"{self.name}.vector_select"
        self._not_indirect(call, "vector_select")
        if _int(dim, "dim", call) != 0:
            fail(call, f"dim {dim}: vector_select indexes dim 0 only")
        if self._dyn is not None:
            fail(call, "the view already has a run-time offset: one dynamic select per tensor")
        if self.on_chip:
            fail(
                call,
                f"{self.name} is in {self.buffer}: vector_select is for device-memory (HBM) tensors",
            )
        if self.strides[0] == 0:
            fail(call, "dim 0 is broadcast (stride 0): nothing to select")
        _index_tensor(call, "vector_offset", vector_offset)
        view = NkiTensor(
            self._decl,
            (vector_offset.shape[0],) + self.shape[1:],
            self.strides,
            self.offset,
            self.dtype,
        )
        view._dyn = _Dynamic("vector", vector_offset, self.strides[0])
        view._static_check(call)
        return view

    def indirect(self, index, num_elem=None):
        """NeuronCore-v4 tensor indirection for the compute engines: the view ``[P, num_elem]``
        whose column ``i`` is column ``o_i`` of this ``[P, F]`` view, the offsets ``o_i`` read
        from ``index`` when the instruction runs (``index[i % G, i // G]``, ``G`` 16 for the
        Vector / Scalar / GpSimd engines, 32 for the Tensor Engine)."""
        call = f"{self.name}.indirect"
        if current(call).core.name not in ("v4",):
            fail(call, "tensor indirection (.indirect) is NeuronCore-v4 and later")
        if not self.on_chip:
            fail(call, f"{self.name} is in {self.buffer}: .indirect gathers SBUF or PSUM tensors")
        if self._dyn is not None:
            fail(call, "the view already has a run-time offset")
        _index_tensor(call, "index", index, scalar=False)
        if index.shape[0] != self.shape[0]:
            fail(
                call,
                f"index {list(index.shape)} must have the view's {self.shape[0]} partitions",
            )
        self._operand(call, "the view")  # the columns it gathers from lie in the tensor
        free = math.prod(self.shape[1:])
        step = _restride(self.shape[1:], self.strides[1:], (free,)) if self.ndim > 1 else (1,)
        if step is None:
            fail(call, f"the view's free dimensions {list(self.shape[1:])} are not one stride")
        num = index.size if num_elem is None else _int(num_elem, "num_elem", call)
        if num < 1:
            fail(call, f"num_elem {num} must be at least 1")
        view = NkiTensor(
            self._decl, (self.shape[0], num), (self.strides[0], 0), self.offset, self.dtype
        )
        view._dyn = _Dynamic("ti", index, step[0], num=num, free=free)
        return view

    def reinterpret_cast(self, dtype):
        """:meth:`view`."""
        return self.view(dtype)

    def __getitem__(self, key):
        call = f"{self.name}[...]"
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            i = key.index(Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:i] + (slice(None),) * fill + key[i + 1 :]
        if len(key) > self.ndim:
            fail(
                call,
                f"{len(key)} indices for a tensor of {self.ndim} dimensions {list(self.shape)}",
            )
        key = key + (slice(None),) * (self.ndim - len(key))
        if self._dyn is not None:
            self._not_indirect(call, "indexing")
            if self._dyn.kind == "vector" and not (
                isinstance(key[0], slice) and key[0].indices(self.shape[0]) == (0, self.shape[0], 1)
            ):
                fail(call, "dim 0 is the indirect dimension (vector_offset): it cannot be indexed")
        shape, strides, offset = [], [], self.offset
        for d, (k, n, s) in enumerate(zip(key, self.shape, self.strides)):
            if isinstance(k, _DS):
                start, size = _int(k.start, "nl.ds start", call), _int(k.size, "nl.ds size", call)
                if start < 0 or size < 1 or start + size > n:
                    fail(call, f"nl.ds({start}, {size}) leaves dimension {d} of size {n}")
                offset += start * s
                shape.append(size)
                strides.append(s)
            elif isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step < 1:
                    fail(call, f"slice step {step} on dimension {d}: only positive steps")
                size = max(0, -(-(stop - start) // step))
                if size < 1:
                    fail(call, f"slice {k} of dimension {d} (size {n}) is empty")
                offset += start * s
                shape.append(size)
                strides.append(s * step)
            else:
                i = _int(k, f"index of dimension {d}", call)
                if i < 0:
                    i += n
                if not 0 <= i < n:
                    fail(call, f"index {k} is outside dimension {d} of size {n}")
                offset += i * s
                if d == 0 and self.on_chip:
                    shape.append(1)  # the partition dimension stays
                    strides.append(s)
        if self.on_chip and len(shape) == 1:
            shape.append(1)
            strides.append(1)
        if not shape:
            shape, strides = [1], [1]
        return self._view(shape, strides, offset)

    def ap(
        self,
        pattern,
        offset=None,
        scalar_offset=None,
        vector_offset=None,
        indirect_dim=0,
        dtype=None,
    ):
        """``tensor.ap(pattern, offset=, scalar_offset=, vector_offset=, indirect_dim=,
        dtype=)``: the elements ``offset + sum(i_k * step_k)`` of the storage (elements of
        ``dtype``); ``offset`` is added to the view's own (None: the view's).  A
        ``scalar_offset`` (a ``[1, 1]`` SBUF tensor, or a register of ``nisa.register_alloc``)
        adds its value times the stride of
        dimension ``indirect_dim`` of the tensor ``ap`` is called on (a whole tensor's
        ``prod(shape[indirect_dim + 1:])``); a ``vector_offset`` (SBUF, one value per index of
        the first pattern entry, device-memory tensors, ``indirect_dim`` 0) replaces that
        entry's step by its values times that stride.  The values are
        read when the instruction runs (seed 003)."""
        call = f"{self.name}.ap"
        if self._dyn is not None:
            fail(call, "the view already has a run-time offset: it cannot be given another pattern")
        try:
            pat = [(int(s), int(n)) for s, n in pattern]
        except (TypeError, ValueError):
            fail(call, f"pattern must be [[step, num], ...], not {pattern!r}")
        if not pat:
            fail(call, "pattern is empty")
        dt = self.dtype if dtype is None else dtype_of(dtype).name
        off = self.offset
        if dt != self.dtype:
            ratio_from, ratio_to = dtype_of(self.dtype).itemsize, dtype_of(dt).itemsize
            off = off * ratio_from // ratio_to
        if offset is not None:
            off += _int(offset, "offset", call)
        view = NkiTensor(self._decl, [n for _, n in pat], [s for s, _ in pat], off, dt)
        if scalar_offset is not None and vector_offset is not None:
            fail(call, "scalar_offset and vector_offset: at most one of them")
        if scalar_offset is None and vector_offset is None:
            view._operand(call, "pattern")  # the access rules now, at the call
            return view
        dim = _int(indirect_dim, "indirect_dim", call)
        if not 0 <= dim < self.ndim:
            fail(call, f"indirect_dim {dim} is not a dimension of {self.name} {list(self.shape)}")
        # the dimension's stride in the tensor ap is called on (the seed's prod(shape[dim+1:])
        # of a whole tensor), in elements of the pattern's dtype
        stride = self.strides[dim] * dtype_of(self.dtype).itemsize // dtype_of(dt).itemsize
        if vector_offset is not None:
            if dim != 0:
                fail(call, f"indirect_dim {dim}: a vector_offset indexes dimension 0 only")
            if self.on_chip:
                fail(
                    call,
                    f"{self.name} is in {self.buffer}: a vector_offset indexes a device-memory "
                    "(HBM) tensor",
                )
            _index_tensor(call, "vector_offset", vector_offset)
            view._dyn = _Dynamic("vector", vector_offset, stride)
        else:
            if type(scalar_offset).__name__ != "VirtualRegister":  # a register: its value
                _index_tensor(call, "scalar_offset", scalar_offset, scalar=True)
            view._dyn = _Dynamic("scalar", scalar_offset, stride)
        view._static_check(call)
        return view

    def view(self, dtype):
        """The same bytes read as ``dtype`` (the last dimension scales)."""
        d = dtype_of(dtype)
        isz = dtype_of(self.dtype).itemsize
        if self._dyn is not None:
            fail(f"{self.name}.view", "a view with a run-time offset cannot be reinterpreted")
        if not self._contiguous():
            fail(f"{self.name}.view", "only a contiguous view can be reinterpreted")
        last = self.shape[-1] * isz
        if last % d.itemsize:
            fail(f"{self.name}.view", f"the last dimension holds {last} bytes, not whole {d.name}")
        shape = self.shape[:-1] + (last // d.itemsize,)
        strides = _contiguous_strides(shape)
        if self.on_chip:
            row = self._row_elements() * isz // d.itemsize
            strides = (row,) + strides[1:]
        return NkiTensor(self._decl, shape, strides, self.offset * isz // d.itemsize, d.name)

    def reshape(self, shape):
        """The view as ``shape`` (the same elements in row-major order, no copy): on chip the
        partition dimension stays first; refused where no strides read the view that way."""
        call = f"{self.name}.reshape"
        self._not_indirect(call, "reshape")
        shape = tuple(
            _int(s, "shape", call)
            for s in (shape if isinstance(shape, (tuple, list)) else (shape,))
        )
        if -1 in shape:
            shape = _sizes(call, shape, self.size)
        if math.prod(shape) != self.size:
            fail(call, f"{list(shape)} has {math.prod(shape)} elements, the tensor {self.size}")
        if self.on_chip or (self._dyn is not None and self._dyn.kind == "vector"):
            if shape[0] != self.shape[0]:
                fail(call, f"the partition dimension {self.shape[0]} must stay first")
            free = _restride(self.shape[1:], self.strides[1:], shape[1:])
            if free is None:
                fail(call, "the free dimensions are not contiguous enough to reshape")
            strides = (self.strides[0], *free)
        else:
            strides = _restride(self.shape, self.strides, shape)
            if strides is None:
                fail(
                    call,
                    f"the view {list(self.shape)} (strides {list(self.strides)}) cannot be read as {list(shape)}",
                )
        return self._view(shape, strides, self.offset)

    def _contiguous(self):
        return _contiguous(self.shape, self.strides)

    def _row_elements(self):
        shape = self._decl.shape
        return (
            math.prod(shape[1:])
            * dtype_of(self._decl.dtype).itemsize
            // dtype_of(self.dtype).itemsize
        )

    # -- to the model ----------------------------------------------------------------------

    def _static_check(self, call):
        """The access rules of a view with a run-time offset, on what is known when the kernel
        is traced: the view at offset value 0 (a ``vector_offset``: one index, row 0) lies in
        its tensor."""
        dyn = self._dyn
        strides, shape = self.strides, self.shape
        if dyn.kind == "vector":
            shape = (1,) + shape[1:]
        elif dyn.kind == "ti":
            return
        probe = NkiTensor(self._decl, shape, strides, self.offset, self.dtype)
        probe._operand(call, "the view at run-time offset 0")

    def _operand(self, call, what):
        """The :class:`Operand` of this view; the access rules checked (the view must address
        its tensor, an on-chip view stays in its partitions).  A view with a run-time offset is
        an :class:`IndirectOperand` whose extent is its whole tensor (any of it may be
        touched): its Ref is the static part (a ``vector_offset``'s first entry steps by the
        offset's stride, a ``.indirect`` view's columns repeat its first)."""
        d = self._decl
        if self._dyn is not None:
            strides = self.strides
            if self._dyn.kind == "vector":
                strides = (self._dyn.stride,) + strides[1:]
            pattern = _shared(tuple(zip(strides, self.shape)))
            ref = Ref.of(d.space, d.name, 0, d.shape, d.dtype, pattern, self.offset, self.dtype)
            shape = d.shape if len(d.shape) > 1 else (d.shape[0], 1)
            row = math.prod(shape[1:]) * dtype_of(d.dtype).itemsize
            if d.alias is not None:
                arena, ref, box = self._placed(call, ref, (0, shape[0], 0, row))
                return IndirectOperand(arena, ref, box, self._dyn)
            return IndirectOperand(d, ref, (0, shape[0], 0, row), self._dyn)
        pattern = _shared(tuple(zip(self.strides, self.shape)))
        ref = Ref.of(d.space, d.name, 0, d.shape, d.dtype, pattern, self.offset, self.dtype)
        # the rules and the extent follow from the view and its tensor's shape alone: a loop's
        # views of its fresh tiles are checked once
        key = (d.space, d.shape, d.dtype, pattern, self.offset, self.dtype)
        box = _EXTENTS.get(key)
        if box is None:
            try:
                box = ref.box()
                if box is None:  # not rows of the tensor: the rules on every index
                    box = ref.extent()
            except ValueError as e:
                fail(call, f"{what} {self.name}: {e}")
            if len(_EXTENTS) < _SHARED_MAX:
                _EXTENTS[key] = box
        if d.alias is not None:
            return Operand(*self._placed(call, ref, box))
        return Operand(d, ref, box)

    def _placed(self, call, ref, box):
        """A view of a tensor the kernel placed itself (``nl.ndarray(address=...)``), its
        rules checked on that tensor, as ``(placements tensor, Ref, box)``: the same elements
        of the memory's placements tensor (docs/kernels.md "Placement"), so that placements
        over the same bytes are one memory to the dependency analysis.  A step of whole
        partitions of the placed tensor steps whole partitions of the memory."""
        arena, p0, f0 = self._decl.alias
        isz = dtype_of(self.dtype).itemsize
        if f0 % isz:
            fail(call, f"{self.name} placed at byte {f0} cannot be read as {self.dtype}")
        row_t = self._row_elements()
        row_a = arena.shape[1] // isz
        pattern = tuple(
            [((s // row_t) * row_a if s and s % row_t == 0 else s, n) for s, n in ref.pattern]
        )
        p, c = divmod(self.offset, row_t)
        offset = (p0 + p) * row_a + f0 // isz + c
        view = Ref.of(
            arena.space,
            arena.name,
            0,
            arena.shape,
            arena.dtype,
            _shared(pattern),
            offset,
            self.dtype,
        )
        return arena, view, (box[0] + p0, box[1] + p0, box[2] + f0, box[3] + f0)


class _Dynamic:
    """A view's run-time offset: ``kind`` ``"scalar"`` (``index``, a ``[1, 1]`` SBUF tensor:
    its value times ``stride`` added to every element's position), ``"vector"`` (``index``
    holds one value per position of the view's first dimension, which replaces that
    dimension's step: value times ``stride``), or ``"ti"`` (NeuronCore-v4 tensor indirection:
    ``num`` columns at free offsets read from ``index``, each offset times ``stride``, inside
    ``free`` elements of a partition)."""

    __slots__ = ("kind", "index", "stride", "num", "free")

    def __init__(self, kind, index, stride, num=None, free=None):
        self.kind, self.index, self.stride, self.num, self.free = kind, index, stride, num, free


class IndirectOperand(Operand):
    """The :class:`Operand` of a view with a run-time offset: ``dyn`` its :class:`_Dynamic`;
    :func:`ncrtl.nki.isa.operands.emit` adds its index tensor to the instruction's sources
    and the offset's description to its arguments (``indirect``)."""

    __slots__ = ("dyn",)

    def __init__(self, decl, view, extent0, dyn):
        super().__init__(decl, view, extent0)
        self.dyn = dyn


def _index_tensor(call, what, t, scalar=False):
    """``t`` as a run-time index: an SBUF tensor (or view) of an integer dtype; ``scalar``:
    one element."""
    if not isinstance(t, NkiTensor):
        fail(call, f"{what} must be an SBUF tensor of integers (nl.ndarray or a view), not {t!r}")
    if t._decl.space != "sbuf":
        fail(call, f"{what} {t.name} is in {t.buffer}; run-time indices are read from the SBUF")
    if t._dyn is not None:
        fail(call, f"{what} {t.name} has a run-time offset itself")
    if dtype_of(t.dtype).storage.kind not in "iu" or dtype_of(t.dtype).is_float:
        fail(call, f"{what} {t.name} is {t.dtype}: run-time indices are an integer dtype")
    if scalar and t.size != 1:
        fail(call, f"{what} {t.name} {list(t.shape)} must be one element ([1, 1])")


def _sizes(call, shape, total):
    """``shape`` (one entry may be -1) as sizes of ``total`` elements."""
    try:
        sizes = [_int(s, "shape", call) for s in shape]
    except TypeError:
        fail(call, f"shape must be a tuple of sizes, not {shape!r}")
    if not sizes:
        fail(call, "shape is empty")
    if sizes.count(-1) > 1:
        fail(call, f"shape {tuple(shape)}: at most one -1")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if known < 1 or total % known:
            fail(call, f"shape {tuple(shape)} does not divide {total}")
        sizes[sizes.index(-1)] = total // known
    if any(s < 1 for s in sizes) or math.prod(sizes) != total:
        fail(call, f"shape {tuple(shape)} has {math.prod(sizes)} elements, the dimension {total}")
    return tuple(sizes)


def _restride(shape, strides, new_shape):
    """The strides that read the elements of a view (``shape``, ``strides``) in the same
    row-major order as ``new_shape``, or None where no strides do (numpy's no-copy reshape)."""
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    new = list(new_shape)
    out = [1] * len(new)
    oi = ni = 0
    while ni < len(new) and oi < len(old):
        nj, oj = ni + 1, oi + 1
        np_, op = new[ni], old[oi][0]
        while np_ != op:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, oi = nj, oj
    return out


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _contiguous(shape, strides):
    step = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n > 1 and s != step:
            return False
        step *= n
    return True


def tensor(decl):
    """The whole-tensor view of ``decl``."""
    shape = decl.shape
    return NkiTensor(decl, shape, _contiguous_strides(shape), 0, decl.dtype)
