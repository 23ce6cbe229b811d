"""Tiles as values, the older API's way: a call returns a new tile (``x = nl.exp(a)``,
``y = nisa.tensor_scalar(...)``), Python's operators compute on tiles (``a + b``, ``a * 2``),
and an assignment writes a view (``t[...] = nl.load(...)``, ``psum += nisa.nc_matmul(...)``).

Each call emits its instructions at once, into a new tile (SBUF; PSUM for the Tensor Engine's
results): errors and instructions keep the kernel's line.  An assignment whose value is the
tile the last call made, with nothing emitted since, **writes the destination directly**: the
call's instructions are taken back and emitted again with the destination view in place of
the new tile (as NKI's compiler writes ``t[...] = f(...)`` without a copy), ``+=`` of a
matmul into PSUM with ``accumulate`` set.  Any other assignment copies the value
(``nisa.tensor_copy``; a number: ``nisa.memset``; device memory: a DMA).

Tensors with block dimensions (``nl.ndarray((n, nl.par_dim(128), 512), ...)``) are one tile per
block, each a tensor of its own to the allocator (its lifetime its own, as the older compiler
allocated blocks); a block is selected by integers (``t[i]``, ``t[i, j]``) before its tile is
indexed further.  docs/nki/legacy_language.md.
"""

from __future__ import annotations

import importlib
import math
import re

import numpy as np

from ncrtl.model.kernel.dtypes import dtype_of

from .. import _trace
from .. import isa as nisa
from .. import language as cnl
from .._trace import NkiTensor, current, fail

ix = importlib.import_module(f"{__package__}.index")  # the module, not the package's stand-in

__all__ = ["ParDim", "par_dim", "Tile", "BlockTensor", "tile_of", "produce", "assign"]


class ParDim(int):
    """``nl.par_dim(n)``: the partition dimension's size in a shape (an int, marked)."""

    def __repr__(self):
        return f"nl.par_dim({int(self)})"


def par_dim(size):
    """The partition dimension of an on-chip tensor's shape (``(n, nl.par_dim(128), 512)``:
    ``n`` blocks of ``[128, 512]``)."""
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
        fail("nl.par_dim", f"size must be an integer known when the kernel is traced, not {size!r}")
    return ParDim(int(size))


def _same_view(a, b):
    return (
        a._decl is b._decl
        and a.shape == b.shape
        and a.strides == b.strides
        and a.offset == b.offset
        and a.dtype == b.dtype
    )


class Tile(NkiTensor):
    """A tensor, a view or a tile of the older API: an :class:`NkiTensor` with that API's
    indexing (index expressions, block-free), operators and assignment.  ``_pdim`` is the
    position of its partition dimension (None in device memory)."""

    __array_ufunc__ = None  # numpy's operators defer to the tile's
    __array_priority__ = 1000
    _pdim = None

    @classmethod
    def of(cls, t, pdim=0):
        """``t`` (an NkiTensor) as a Tile."""
        if isinstance(t, Tile):
            return t
        out = cls(t._decl, t.shape, t.strides, t.offset, t.dtype)
        out._dyn = t._dyn
        out._pdim = pdim if t._decl.space != "hbm" else None
        return out

    def _view(self, shape, strides, offset, dtype=None):
        touch(self)
        view = Tile(self._decl, shape, strides, offset, dtype or self.dtype)
        view._dyn = self._dyn
        if self._decl.space != "hbm":
            view._pdim = self._pdim if len(shape) == len(self.shape) else 0
        return view

    def _become(self, view):
        self._decl, self.shape, self.strides = view._decl, view.shape, view.strides
        self.offset, self.dtype, self._pdim = view.offset, view.dtype, view._pdim

    def __repr__(self):
        return f"Tile({self.name}, {list(self.shape)}, {self.dtype}, {self.buffer})"

    # -- indexing ------------------------------------------------------------------------

    def __getitem__(self, key):
        call = f"{self.name}[...]"
        touch(self)
        keys = key if isinstance(key, tuple) else (key,)
        if any(isinstance(k, NkiTensor) for k in keys):
            return self._indirect(call, keys)
        shape, strides, offset, pdim = ix.resolve(
            call, self.shape, self.strides, self.offset, self._pdim, key
        )
        view = Tile(self._decl, shape, strides, offset, self.dtype)
        view._pdim = pdim
        return view

    def _indirect(self, call, keys):
        """``t[0, idx, i_f]`` with ``idx`` an SBUF tile of integers ``[P, 1]``: the view whose
        first axis is ``idx``'s partitions, row ``p`` at ``idx[p]`` times the dimension's
        stride, read when the DMA runs (a gather: the current API's ``vector_offset``)."""
        if self._decl.space != "hbm":
            fail(
                call,
                f"{self.name} is in {self.buffer}: a tile as an index gathers from device memory",
            )
        tiles = [(d, k) for d, k in enumerate(keys) if isinstance(k, NkiTensor)]
        if len(tiles) > 1:
            fail(call, "one tile as an index per view (a gather along one dimension)")
        d, idx = tiles[0]
        if any(not isinstance(k, (int, np.integer)) for k in keys[:d]):
            fail(call, "the dimensions before an index tile are indexed by integers")
        if free(idx) != 1:
            fail(call, f"the index tile {list(idx.shape)} must be one value per partition ([P, 1])")
        n = idx.shape[0]
        rows = ix.arange(n)[:, None]
        rest = [rows if i == d else k for i, k in enumerate(keys)]
        shape, strides, offset, _ = ix.resolve(
            call, self.shape, self.strides, self.offset, None, tuple(rest)
        )
        if shape[0] != n:
            fail(call, f"the index tile's {n} partitions must be the view's first axis")
        view = Tile(self._decl, shape, strides, offset, self.dtype)
        view._dyn = _trace._Dynamic("vector", idx, self.strides[d])
        view._static_check(call)
        return view

    def __setitem__(self, key, value):
        assign(f"{self.name}[...] =", self[key], value)

    # -- the older API's tile methods ---------------------------------------------------

    def broadcast_to(self, shape):
        """``nl.broadcast_to(self, shape)``."""
        from . import language

        return language.broadcast_to(self, shape)

    def reshape(self, shape):
        return Tile.of(NkiTensor.reshape(self, shape), self._pdim)

    def astype(self, dtype):
        from . import language

        return language.copy(self, dtype=dtype)

    # -- operators (docs/nki/legacy_language.md, "Operators") -----------------------------

    def _op(self, name, other, reverse=False):
        from . import language

        if not (isinstance(other, NkiTensor) or _number(other)):
            return NotImplemented
        fn = getattr(language, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, other):
        return self._op("add", other)

    def __radd__(self, other):
        return self._op("add", other, True)

    def __sub__(self, other):
        return self._op("subtract", other)

    def __rsub__(self, other):
        return self._op("subtract", other, True)

    def __mul__(self, other):
        return self._op("multiply", other)

    def __rmul__(self, other):
        return self._op("multiply", other, True)

    def __truediv__(self, other):
        return self._op("divide", other)

    def __rtruediv__(self, other):
        return self._op("divide", other, True)

    def __pow__(self, other):
        return self._op("power", other)

    def __rpow__(self, other):
        return self._op("power", other, True)

    def __mod__(self, other):
        return self._op("mod", other)

    def __and__(self, other):
        return self._op("bitwise_and", other)

    def __or__(self, other):
        return self._op("bitwise_or", other)

    def __xor__(self, other):
        return self._op("bitwise_xor", other)

    def __lshift__(self, other):
        return self._op("left_shift", other)

    def __rshift__(self, other):
        return self._op("right_shift", other)

    def __lt__(self, other):
        return self._op("less", other)

    def __le__(self, other):
        return self._op("less_equal", other)

    def __gt__(self, other):
        return self._op("greater", other)

    def __ge__(self, other):
        return self._op("greater_equal", other)

    def __matmul__(self, other):
        from . import language

        return language.matmul(self, other)

    def __neg__(self):
        from . import language

        return language.negative(self)

    def __invert__(self):
        from . import language

        return language.invert(self)

    def __abs__(self):
        from . import language

        return language.abs(self)

    def _inplace(self, name, other):
        """``self op= other``: the operation written into ``self`` (a matmul just made into a
        PSUM view: the matmul accumulates there)."""
        from . import language

        call = f"{self.name} {name}="
        if name == "add" and isinstance(other, Tile) and retarget(call, self, other, True):
            return self
        tr = current(call)
        spilled = tr.__dict__.get("legacy_spilled")
        if name == "add" and spilled and self._decl in spilled:
            written = tr.__dict__.setdefault("legacy_written", set())
            if self._decl not in written:  # the group's first write, as in PSUM
                assign(call, self, other)
                return self
        if not (isinstance(other, NkiTensor) or _number(other)):
            return NotImplemented
        language._binary_into(name, self, self, other)
        return self

    def __iadd__(self, other):
        return self._inplace("add", other)

    def __isub__(self, other):
        return self._inplace("subtract", other)

    def __imul__(self, other):
        return self._inplace("multiply", other)

    def __itruediv__(self, other):
        return self._inplace("divide", other)

    __hash__ = NkiTensor.__hash__


def _number(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
        v, (bool, np.bool_)
    )


def tile_of(t, pdim=0):
    """``t`` as a :class:`Tile` (an NkiTensor of the kernel's arguments, of the current API's
    calls); anything else as it is."""
    if isinstance(t, NkiTensor) and not isinstance(t, Tile):
        return Tile.of(t, pdim)
    return t


# -- tensors with block dimensions ----------------------------------------------------------------


#: Where the block tensors made at a kernel line live after a trace overflowed their memory
#: (``"sbuf"``, then ``"hbm"``): the next traces place them there (:func:`spill_after`).
SPILLED = {}
#: The block tiles' tensor names of the traces so far -> the kernel line that made their tensor.
_BLOCK_LINES = {}
_NEXT = {"psum": "sbuf", "sbuf": "hbm"}


def home_of(line, buffer):
    """Where the blocks of a tensor made at ``line`` in ``buffer`` live."""
    return SPILLED.get(line, str(buffer))


def spill_after(error):
    """After a trace's placement ``error`` (``PSUM overflow: ...``, ``SBUF overflow: ...``):
    move the block tensor most of whose blocks it names one memory further (PSUM to SBUF,
    SBUF to device memory), as the older compiler spilled what it could not hold; True where
    one moved (the kernel is traced again), False otherwise."""
    text = str(error)
    m = re.search(r"(PSUM|SBUF) overflow: ", text)
    if m is None:
        return False
    space = m.group(1).lower()
    counts = {}
    for name in re.findall(r"([\w.]+) \[", text[m.end() :]):
        line = _BLOCK_LINES.get(name)
        if line is not None and home_of(line[0], line[1]) == space:
            counts[line] = counts.get(line, 0) + 1
    if not counts:
        return False
    line, buffer = max(counts, key=counts.get)
    nxt = _NEXT.get(home_of(line, buffer))
    if nxt is None:
        return False
    SPILLED[line] = nxt
    return True


class BlockTensor:
    """An on-chip tensor with block dimensions: ``blocks`` (the leading sizes), one tile
    ``[P, free...]`` per block, made when first selected, each a tensor of its own.  Blocks
    that cannot all be in their memory at once live in another, as the older compiler spilled
    them: PSUM blocks in SBUF (a Tensor Engine result reaches its block through a PSUM tile and
    a copy), blocks too large for the SBUF in device memory (written by DMA, each read a DMA
    into a new SBUF tile).  ``home`` is where they live."""

    def __init__(
        self, blocks, tile_shape, dtype, buffer, name, home=None, made=None, prefix=(), line=""
    ):
        self.line = line
        self.blocks = tuple(blocks)
        self.tile_shape = tuple(tile_shape)
        self.dtype = dtype
        self._buffer = buffer
        self._name = name
        self.home = home or str(buffer)
        self._made = {} if made is None else made
        self._prefix = tuple(prefix)

    @property
    def shape(self):
        return self.blocks + self.tile_shape

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def buffer(self):
        return str(self._buffer)

    @property
    def name(self):
        return self._name

    def __len__(self):
        return self.blocks[0]

    def __repr__(self):
        return f"BlockTensor({self._name}, {list(self.shape)}, {self.dtype}, {self.buffer})"

    def block(self, index):
        """The tile of block ``index`` (a full tuple of integers under this tensor's)."""
        full = self._prefix + tuple(index)
        got = self._made.get(full)
        if got is None:
            tag = "_".join(map(str, full))
            space = cnl.private_hbm if self.home == "hbm" else self.home
            t = cnl.ndarray(self.tile_shape, self.dtype, buffer=space, name=f"{self._name}_b{tag}")
            if len(_BLOCK_LINES) > 1 << 16:
                _BLOCK_LINES.clear()
            _BLOCK_LINES[t.name] = (self.line, str(self._buffer))
            if self.home != str(self._buffer) and str(self._buffer) == "psum":
                # a spilled PSUM block: its first += is the accumulation group's first write
                current("nl.ndarray").__dict__.setdefault("legacy_spilled", set()).add(t._decl)
            got = self._made[full] = Tile.of(t, 0)
            got._pdim = 0  # a block in device memory keeps its tile's indexing
        return got

    def _select(self, call, key):
        if not isinstance(key, tuple):
            key = (key,)
        picked = []
        rest = list(key)
        while rest and len(picked) < len(self.blocks):
            k = rest[0]
            if isinstance(k, ix.Index) and not k.axes and not k.shape:
                k = k.const
            if not isinstance(k, (int, np.integer)) or isinstance(k, (bool, np.bool_)):
                if k is Ellipsis or (isinstance(k, slice) and k == slice(None)):
                    break
                fail(
                    call,
                    f"block dimension {len(picked)} of {self._name} {list(self.shape)} is indexed "
                    f"by {k!r}: a block is selected by an integer (t[i]) before its tile is "
                    "indexed further",
                )
            n = self.blocks[len(picked)]
            i = int(k) + (n if k < 0 else 0)
            if not 0 <= i < n:
                fail(call, f"block index {k} is outside block dimension {len(picked)} of size {n}")
            picked.append(i)
            rest.pop(0)
        return tuple(picked), tuple(rest)

    def _view_of(self, call, key):
        """The view ``key`` selects (a sub-tensor of blocks, or a view of one block's tile)."""
        picked, rest = self._select(call, key)
        if len(picked) < len(self.blocks):
            if rest and not all(k is Ellipsis or k == slice(None) for k in rest):
                fail(
                    call,
                    f"{self._name} {list(self.shape)}: select every block dimension with an "
                    f"integer ({len(self.blocks)} of them) before indexing the tile",
                )
            return BlockTensor(
                self.blocks[len(picked) :],
                self.tile_shape,
                self.dtype,
                self._buffer,
                self._name,
                self.home,
                self._made,
                self._prefix + picked,
                self.line,
            )
        t = self.block(picked)
        return t[rest] if rest else t

    def __getitem__(self, key):
        view = self._view_of(f"{self._name}[...]", key)
        if self.home == "hbm" and isinstance(view, Tile):
            from . import language

            return language.load(view)  # a spilled block is read back into SBUF
        return view

    def __setitem__(self, key, value):
        view = self._view_of(f"{self._name}[...] =", key)
        if isinstance(view, BlockTensor):
            fail(
                f"{self._name}[...] =",
                f"a write to {len(view.blocks)} block dimensions at once: write each block "
                "(t[i] = ...)",
            )
        assign(f"{self._name}[...] =", view, value)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        _trace.not_modelled(f"a block tensor's .{name}")

    def _operand(self, call, what):
        fail(
            call,
            f"{what} {self._name} {list(self.shape)} has block dimensions: select a block "
            f"(t[i]) to pass its [{', '.join(map(str, self.tile_shape))}] tile",
        )

    def all_blocks(self):
        """Every block's tile (made), in row-major order."""
        return [self.block(i) for i in np.ndindex(*self.blocks)]


# -- calls that make tiles, assignments -----------------------------------------------------------


class _Made:
    """What the last tile-making call left, to take it back on an assignment; ``used`` once
    the tile is read or viewed (its instructions then stay where they are)."""

    __slots__ = ("tile", "start", "end", "dma_next", "identities", "shared", "emitted")
    __slots__ += ("emit", "box", "spaces", "dtypes", "accumulates", "used")


def touch(t):
    """Note that ``t`` is read or viewed: if it is the last call's tile, an assignment no
    longer takes that call's instructions back (a view of it would lose its data)."""
    tr = _trace.current_or_none()
    m = getattr(tr, "legacy_made", None) if tr is not None else None
    if m is not None and m.tile is t:
        m.used = True


def _snapshot(tr):
    m = _Made()
    b = tr.builder
    m.start = len(b.pending)
    m.dma_next = b._dma_next
    m.identities = dict(tr.identities)
    m.shared = dict(tr.shared)
    m.emitted = tr.bounds.emitted if tr.bounds is not None else None
    return m


def _rollback(tr, m):
    b = tr.builder
    del b.pending[m.start :]
    b._dma_next = m.dma_next
    tr.identities = dict(m.identities)
    tr.shared = dict(m.shared)
    if m.emitted is not None:
        tr.bounds.emitted = m.emitted


class lowered:
    """``with lowered("nl.load"):`` -- an error of an instruction the call lowers to is the
    call's, ``file:line: nl.load: lowered to nisa.dma_copy: ...`` (the kernel's line)."""

    def __init__(self, call):
        self.call = call

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if not isinstance(exc, _trace.NkiError):
            return False
        text, at = str(exc), f"{_trace.caller_line()}: "
        if not text.startswith(at) or text.startswith(f"{at}{self.call}:"):
            return False
        raise type(exc)(f"{at}{self.call}: lowered to {text[len(at) :]}") from None


def new_tile(shape, dtype, buffer="sbuf", name=""):
    """A new on-chip tile ``shape`` (partitions first)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 1:
        shape = shape + (1,)
    return Tile.of(cnl.ndarray(shape, dtype, buffer=buffer, name=name), 0)


def produce(
    call,
    shape,
    dtype,
    emit,
    *,
    buffer="sbuf",
    name="",
    mask=None,
    spaces=("sbuf", "psum"),
    dtypes=None,
    accumulates=False,
):
    """A new tile ``shape`` of ``dtype`` in ``buffer`` that ``emit(dst, box, accumulate)``
    writes (``box`` the mask's box: :func:`ix.restrict` cuts each operand to it), emitted now.
    An assignment right after may take the instructions back and emit them again into its
    view (:func:`retarget`): one in ``spaces``, of a dtype in ``dtypes`` (None: any),
    accumulating when ``accumulates`` (a matmul's ``+=``)."""
    tr = current(call)
    box = ix.box_of(call, mask)
    m = _snapshot(tr)
    out = new_tile(shape, dtype, buffer, name)
    if not ix.empty(box):
        with lowered(call):
            emit(out, box, False)
    m.tile, m.end, m.emit, m.box = out, len(tr.builder.pending), emit, box
    m.spaces, m.dtypes, m.accumulates, m.used = spaces, dtypes, accumulates, False
    tr.legacy_made = m
    return out


def retarget(call, dst, value, accumulate=False):
    """Emit the last call's instructions again into ``dst`` where ``value`` is its tile and
    nothing was emitted since (True); else False."""
    tr = current(call)
    m = getattr(tr, "legacy_made", None)
    if m is None or m.tile is not value or m.used or len(tr.builder.pending) != m.end:
        return False
    if accumulate and not m.accumulates:
        return False
    if dst._decl.space not in m.spaces or (m.dtypes is not None and dst.dtype not in m.dtypes):
        return False
    if dst.dtype != value.dtype and value.dtype != "float32":
        # a result rounded to its narrower dtype, then converted: the rounding stays
        return False
    if dst.shape[0] != value.shape[0] or dst.size != value.size or dst._dyn is not None:
        return False
    target = dst
    if dst.shape != value.shape:
        try:
            target = dst.reshape(value.shape)
        except _trace.NkiError:
            return False
    _rollback(tr, m)
    tr.legacy_made = None
    if not ix.empty(m.box):
        with lowered(call):
            m.emit(target, m.box, accumulate)
    value._become(dst)
    return True


def assign(call, dst, value):
    """``dst[...] = value``: the last call's instructions into ``dst`` (:func:`retarget`), a
    copy of a tile (``nisa.tensor_copy`` on chip, a DMA to or from device memory), a number
    (``nisa.memset``)."""
    if isinstance(value, BlockTensor):
        fail(call, f"value {value.name} has block dimensions: assign one block at a time")
    tr = _trace.current_or_none()
    if tr is not None and tr.__dict__.get("legacy_spilled"):
        tr.__dict__.setdefault("legacy_written", set()).add(dst._decl)
    if isinstance(value, NkiTensor):
        if _same_view(dst, value):
            return  # t[i] += x writes t[i] in place; the store back is the same view
        if isinstance(value, Tile) and retarget(call, dst, value):
            return
        from . import language

        language._copy_into(call, dst, value)
        return
    if _number(value):
        if dst._decl.space == "hbm":
            fail(call, f"{dst.name} is in device memory: write it with nl.store")
        nisa.memset(dst=dst, value=value)
        return
    fail(call, f"the value must be a tile or a number, not {value!r}")


def free(t):
    return math.prod(t.shape[1:]) if len(t.shape) > 1 else 1


def dtype_name(call, dtype, default):
    if dtype is None:
        return default
    try:
        return dtype_of(dtype).name
    except ValueError as e:
        fail(call, f"dtype: {e}")
