"""Golden state model of PSUM: memory, accumulation groups, SR generators and the engine ports.

The contract is docs/psum.md.  :func:`read_add_write` is the pure function of one slot update
("Element semantics"); :class:`Psum` holds the state the RTL holds (the memory, one group per
bank, one XORWOW generator per partition) and changes it exactly as the RTL does, one write
instruction and one data beat at a time (:meth:`Psum.issue`, :meth:`Psum.beat`), or one whole
instruction at a time (:meth:`Psum.write`).  Accesses are atomic and in issue order, so replaying
the RTL's grant order (:class:`ncrtl.model.psum.Arbiter`) through this model predicts its memory.
"""

import ml_dtypes
import numpy as np

from ncrtl.model.fp import Xorwow, fp32_add, fp32_to_bf16
from ncrtl.model.fp.ops import check_rand

from .isa import FIELDS, Dtype, Geometry, GroupState, Rounding, Write, check

__all__ = ["read_add_write", "rand_states", "Psum"]

_U16 = np.uint32(0xFFFF)


def _int(v, what):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, not {v!r}")
    return int(v)


def _dtype(dtype):
    d = _int(dtype, "dtype")
    if d not in tuple(Dtype):
        raise ValueError(
            f"dtype {d} is not a PSUM element type; dtypes: "
            + ", ".join(f"{x.value}={x.name.lower()}" for x in Dtype)
        )
    return Dtype(d)


def _rounding(rounding):
    r = _int(rounding, "rounding")
    if r not in tuple(Rounding):
        raise ValueError(f"rounding {r} is neither 0 (rne) nor 1 (sr)")
    return Rounding(r)


def _bits32(x, what):
    """``x`` as uint32 bits: uint32 as is, float32 viewed as its bits."""
    a = np.asarray(x)
    if a.dtype == np.float32:
        return a.view(np.uint32)
    if a.dtype != np.uint32:
        raise ValueError(f"{what} must be uint32 bits (or float32), not dtype {a.dtype}")
    return a


def _bits16(x, what):
    """``x`` as uint16 bits: uint16 as is, bfloat16 viewed as its bits."""
    a = np.asarray(x)
    if a.dtype == ml_dtypes.bfloat16:
        return a.view(np.uint16)
    if a.dtype != np.uint16:
        raise ValueError(
            f"{what} must be uint16 bits (or bfloat16) for a 16-bit slot, not dtype {a.dtype}"
        )
    return a


def read_add_write(old, value, *, dtype, overwrite, rounding=Rounding.RNE, rand=None):
    """The new contents of PSUM slots after one beat (docs/psum.md, "Element semantics").

    ====== ============================== ====================================================
    dtype  overwrite                      accumulate
    ====== ============================== ====================================================
    FP32   ``value`` (the bits unchanged) ``fp32_add(old, value)`` (RNE)
    BF16   ``fp32_to_bf16(value, r)``     ``fp32_to_bf16(fp32_add(bf16_to_fp32(old), value), r)``
    RAW16  ``value & 0xFFFF``             illegal
    ====== ============================== ====================================================

    Parameters
    ----------
    old : ndarray
        Stored slot bits: uint32 (or float32) for FP32, uint16 (or bfloat16) for BF16 and RAW16.
        Ignored (may be ``None``) on overwrite.
    value : ndarray of uint32 (or float32)
        Beat bits, the FP32 Tensor Engine output; same shape as ``old``.
    dtype : Dtype
    overwrite : bool
        ``psum_accumulate_flag`` bit0.
    rounding : Rounding
        FP32 -> BF16 rounding of a BF16 write; SR only with BF16.
    rand : ndarray of int, optional
        Stochastic rounding values in ``[0, 65535]``, same shape as ``value``; required for SR,
        ignored otherwise.

    Returns
    -------
    ndarray
        New slot bits: uint32 for FP32, uint16 for BF16 and RAW16; the shape of ``value``.

    Raises
    ------
    ValueError
        RAW16 accumulate, SR with a non-BF16 dtype, SR without ``rand``, a reserved dtype, or
        operands of the wrong dtype or shape.
    """
    dtype = _dtype(dtype)
    rounding = _rounding(rounding)
    if not isinstance(overwrite, (bool, np.bool_, int, np.integer)) or int(overwrite) not in (0, 1):
        raise ValueError(f"overwrite must be a bool, not {overwrite!r}")
    overwrite = bool(overwrite)
    if dtype == Dtype.RAW16 and not overwrite:
        raise ValueError("raw16 slots can only be overwritten: a raw16 accumulate is illegal")
    if rounding == Rounding.SR and dtype != Dtype.BF16:
        raise ValueError(f"stochastic rounding needs a bf16 destination, not {dtype.name.lower()}")
    v = _bits32(value, "value")
    r = None
    if rounding == Rounding.SR:
        r = check_rand(rand, v.shape, "value")
    if not overwrite:
        o = (_bits32 if dtype == Dtype.FP32 else _bits16)(old, "old")
        if o.shape != v.shape:
            raise ValueError(f"old shape {o.shape} must equal value shape {v.shape}")

    if dtype == Dtype.FP32:
        if overwrite:
            # The beat's bits, NaN payloads included: the Tensor Engine output is stored as is.
            return v.astype(np.uint32, copy=True)
        # Slots may hold signalling NaNs (FP32 overwrite keeps the beat's bits); widening them is
        # not an error, the add gives the canonical NaN.
        with np.errstate(invalid="ignore"):
            return fp32_add(o.view(np.float32), v.view(np.float32)).view(np.uint32)
    if dtype == Dtype.RAW16:
        return (v & _U16).astype(np.uint16)
    mode = "sr" if rounding == Rounding.SR else "rne"
    if overwrite:
        x = v.view(np.float32)
    else:
        # bf16 -> fp32 is exact (the 16 bits in the upper half), then one FP32 RNE add.
        up = (o.astype(np.uint32) << np.uint32(16)).view(np.float32)
        with np.errstate(invalid="ignore"):  # signalling NaN beats: see the FP32 case
            x = fp32_add(up, v.view(np.float32))
    return fp32_to_bf16(x, mode, r).view(np.uint16)


def rand_states(seed, partitions):
    """Generator states of ``partitions`` partitions seeded from ``seed``.

    Returns
    -------
    ndarray of uint32, shape ``[partitions, 6]``
        Row ``p`` is ``Xorwow.seed_state(seed + p)``: the words ``(x, y, z, w, v, d)``.
    """
    seed = _int(seed, "seed")
    partitions = _int(partitions, "partitions")
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, not {partitions}")
    if seed < 0 or seed + partitions > 1 << 64:
        raise ValueError(
            f"seed {seed}: the per-partition seeds {seed}..{seed + partitions - 1} "
            f"must lie in [0, 2**64)"
        )
    return np.array([Xorwow.seed_state(seed + p) for p in range(partitions)], dtype=np.uint32)


class Psum:
    """Golden PSUM: the bit-exact state the RTL holds, changed as docs/psum.md says.

    Parameters
    ----------
    geometry : Geometry
        Partitions, banks and bank size (the hardware is 128 x 8 x 2 KiB).
    seed : int
        Out of reset, partition ``p``'s generator holds ``rand_states(seed, partitions)[p]``
        (seed 0 is the RTL's reset state).

    Attributes
    ----------
    geometry : Geometry
    mem : ndarray of uint32, shape ``[banks, rows, partitions]``
        ``mem[bank, row, p]`` is the 32-bit slot of partition ``p`` in memory word
        ``(bank, row)``; an FP32 element ``c`` is row ``c``, a 16-bit element ``c`` is half
        ``c % 2`` (half 0 = bits ``[0, 16)``) of row ``c // 2``.  Zero out of reset.
    groups : list of GroupState
        The accumulation group of each bank.

    Notes
    -----
    The write stream is :meth:`issue` (one instruction) followed by :attr:`pending` calls of
    :meth:`beat` (its data).  A legal instruction updates its bank's group at once: bit0 or bit2
    opens a group with the write's dtype (restarting an open one), bit1 closes it.  An illegal one
    (:func:`isa.check`) changes no state and its beats are consumed and ignored, as in the RTL.
    :meth:`write` is both steps for a whole instruction, raising on an illegal one.  The engine
    ports (:meth:`engine_write`, :meth:`engine_read`) are plain SRAM.

    Only a beat of a BF16 SR write advances the generators: every partition's once, its upper 16
    output bits being that partition's rounding value.
    """

    def __init__(self, geometry=Geometry(), seed=0):
        if not isinstance(geometry, Geometry):
            raise TypeError(f"geometry must be an isa.Geometry, not {geometry!r}")
        self.geometry = geometry
        g = geometry
        states = rand_states(seed, g.partitions)
        self._rng = Xorwow(np.zeros(g.partitions, dtype=object))
        self._load_states(states)
        self.mem = np.zeros((g.banks, g.rows, g.partitions), dtype=np.uint32)
        self.groups = [GroupState() for _ in range(g.banks)]
        self._current = None  # the legal write whose beats are pending (None: drain / idle)
        self._pending = 0
        self._beat_index = 0

    # -- generators --------------------------------------------------------------------------

    def _load_states(self, states):
        r = self._rng
        r.x, r.y, r.z, r.w, r.v, r.d = (states[:, i].astype(np.uint32) for i in range(6))

    def _partition(self, partition):
        p = _int(partition, "partition")
        if not 0 <= p < self.geometry.partitions:
            raise ValueError(
                f"partition {p} is out of range; PSUM has partitions "
                f"0..{self.geometry.partitions - 1}"
            )
        return p

    def set_rand_state(self, partition, words):
        """Load partition ``partition``'s generator with ``words`` = ``(x, y, z, w, v, d)``.

        Like the runtime writing the generator state (the RTL's seed port): any six 32-bit
        words are accepted.
        """
        p = self._partition(partition)
        try:
            words = list(words)
        except TypeError:
            raise ValueError(
                f"words must be six 32-bit integers (x, y, z, w, v, d), not {words!r}"
            ) from None
        if len(words) != 6:
            raise ValueError(
                f"words must be six 32-bit integers (x, y, z, w, v, d), got {len(words)}"
            )
        vals = []
        for name, v in zip("xyzwvd", words):
            v = _int(v, f"generator word {name}")
            if not 0 <= v < 1 << 32:
                raise ValueError(f"generator word {name}={v} is outside [0, 2**32)")
            vals.append(v)
        r = self._rng
        for arr, v in zip((r.x, r.y, r.z, r.w, r.v, r.d), vals):
            arr[p] = v

    def rand_state(self, partition):
        """Partition ``partition``'s generator state ``(x, y, z, w, v, d)`` as six ints."""
        p = self._partition(partition)
        r = self._rng
        return tuple(int(a[p]) for a in (r.x, r.y, r.z, r.w, r.v, r.d))

    # -- the write stream --------------------------------------------------------------------

    @property
    def pending(self):
        """Beats still expected for the current write (legal or rejected)."""
        return self._pending

    def _validate_write(self, w):
        # Not an instruction at all (a caller's programming error), as opposed to an instruction
        # that breaks a rule of isa.check, which the RTL reports and survives.
        if not isinstance(w, Write):
            raise ValueError(f"expected an isa.Write, not {w!r}")
        for name, _ in FIELDS:
            _int(getattr(w, name), f"PSUM write field {name}")
        if not 0 <= int(w.flags) < 8:
            raise ValueError(f"psum_accumulate_flag {w.flags} does not fit its 3 bits")
        _rounding(w.rounding)

    def _check_idle(self, what):
        if self._pending:
            raise ValueError(
                f"{what} while the current write still expects {self._pending} "
                f"beat(s): send them with beat() first"
            )

    def _check(self, w):
        bank_ok = 0 <= w.bank < self.geometry.banks
        return check(w, self.geometry, self.groups[w.bank] if bank_ok else None)

    def issue(self, w):
        """Take write instruction ``w``; its :attr:`pending` beats follow through :meth:`beat`.

        Returns
        -------
        (Error, str) or None
            ``None`` for a legal write, which becomes the current write and updates its bank's
            group state at once.  For an illegal one, the rule it breaks (:func:`isa.check`):
            nothing changes and its ``n`` beats will be consumed and ignored.

        Raises
        ------
        ValueError
            If the previous write still has beats pending, or ``w`` is not a :class:`Write` with
            integer fields, flags in 0..7 and rounding 0 or 1.
        """
        self._check_idle("issue")
        self._validate_write(w)
        err = self._check(w)
        self._beat_index = 0
        if err is not None:
            self._current = None
            self._pending = max(int(w.n), 0)
            return err
        g = self.groups[w.bank]
        if w.opens:
            g.open, g.dtype = True, Dtype(w.dtype)
        if w.closes:
            g.open = False
        self._current = w
        self._pending = int(w.n)
        return None

    def _beat_bits(self, data):
        d = _bits32(data, "beat data")
        if d.shape != (self.geometry.partitions,):
            raise ValueError(
                f"beat data must have shape ({self.geometry.partitions},) "
                f"(one value per partition), not {d.shape}"
            )
        return d

    def beat(self, data):
        """Apply the next beat of the current write.

        Parameters
        ----------
        data : ndarray of uint32 (or float32), shape ``[partitions]``
            One Tensor Engine output vector.  Beat ``j`` goes to column ``col + j`` of every
            partition.

        Returns
        -------
        int or None
            The bank, when this is the last beat of a legal write with bit1 (group complete).
        """
        if not self._pending:
            raise ValueError("beat with no write pending: issue a write first")
        d = self._beat_bits(data)
        self._pending -= 1
        w = self._current
        if w is None:  # a rejected write's beat: drained, nothing written, nothing drawn
            return None
        self._apply(w, w.col + self._beat_index, d)
        self._beat_index += 1
        if self._pending:
            return None
        self._current = None
        return int(w.bank) if w.closes else None

    def _apply(self, w, c, bits):
        sr = w.rounding == Rounding.SR
        # One draw per partition per SR beat, whatever the data: the RTL's generators step in
        # lock step with the beats, so the draw count depends on nothing else.
        rand = self._rng.next_u16() if sr else None
        kw = dict(dtype=w.dtype, overwrite=w.overwrite, rounding=w.rounding, rand=rand)
        if w.dtype == Dtype.FP32:
            self.mem[w.bank, c] = read_add_write(self.mem[w.bank, c], bits, **kw)
            return
        row, half = divmod(c, 2)
        shift = np.uint32(16 * half)
        word = self.mem[w.bank, row]
        old = ((word >> shift) & _U16).astype(np.uint16)
        new = read_add_write(old, bits, **kw).astype(np.uint32)
        self.mem[w.bank, row] = (word & ~(_U16 << shift)) | (new << shift)

    def write(self, w, beats, lanes=None):
        """Issue ``w`` and apply all its beats.

        Parameters
        ----------
        w : Write
        beats : ndarray of uint32 (or float32), shape ``[n, partitions]``
        lanes : slice or None
            The partitions the beats write (a column tile's outputs; None: all of them).  The
            others keep their slots; the SR generators of every partition still step once per
            beat, as they do in lock step with the beats.

        Returns
        -------
        int or None
            The completed bank (``w`` has bit1), else ``None``.

        Raises
        ------
        ValueError
            With the message of the broken rule when :func:`isa.check` rejects ``w``, or when
            ``beats`` has the wrong shape or dtype; nothing is changed then.
        """
        self._check_idle("write")
        self._validate_write(w)
        err = self._check(w)
        if err is not None:
            raise ValueError(err[1])
        b = _bits32(beats, "beats")
        if b.shape != (w.n, self.geometry.partitions):
            raise ValueError(
                f"beats must have shape ({w.n}, {self.geometry.partitions}) "
                f"(n beats of one value per partition), not {b.shape}"
            )
        self.issue(w)
        # The beats write distinct columns, so they apply together: the same slots, values and
        # (SR) draws, in beat order, as beat() one at a time.
        self._pending = 0
        self._current = None
        c0, n = int(w.col), int(w.n)
        sr = w.rounding == Rounding.SR
        rand = np.stack([self._rng.next_u16() for _ in range(n)]) if sr else None
        kw = dict(dtype=w.dtype, overwrite=w.overwrite, rounding=w.rounding, rand=rand)
        lanes = slice(None) if lanes is None else lanes
        mem = self.mem[w.bank][:, lanes]  # a view: written through
        b = b[:, lanes]
        if rand is not None:
            kw["rand"] = rand[:, lanes]
        if w.dtype == Dtype.FP32:
            mem[c0 : c0 + n] = read_add_write(mem[c0 : c0 + n], b, **kw)
        else:
            cols = np.arange(c0, c0 + n)
            rows, halves = np.divmod(cols, 2)
            shift = (np.uint32(16) * halves.astype(np.uint32))[:, None]
            old = ((mem[rows] >> shift) & _U16).astype(np.uint16)
            new = read_add_write(old, b, **kw).astype(np.uint32)
            for h in (0, 1):  # a word's two halves may both be written: one half at a time
                sel = halves == h
                word = mem[rows[sel]]
                sh = np.uint32(16 * h)
                mem[rows[sel]] = (word & ~(_U16 << sh)) | (new[sel] << sh)
        return int(w.bank) if w.closes else None

    # -- engine ports ------------------------------------------------------------------------

    def _address(self, bank, row):
        g = self.geometry
        bank = _int(bank, "bank")
        row = _int(row, "row")
        if not 0 <= bank < g.banks:
            raise ValueError(f"bank {bank} is out of range; PSUM has banks 0..{g.banks - 1}")
        if not 0 <= row < g.rows:
            raise ValueError(f"row {row} is out of range; a bank has rows 0..{g.rows - 1}")
        return bank, row

    def engine_write(self, bank, row, data, mask=3):
        """Engine-port write of memory word ``(bank, row)``: plain SRAM.

        Parameters
        ----------
        data : ndarray of uint32 (or float32), shape ``[partitions]``
        mask : int
            Half mask: bit0 writes bits ``[0, 16)``, bit1 bits ``[16, 32)`` of every slot.
        """
        bank, row = self._address(bank, row)
        mask = _int(mask, "mask")
        if not 0 <= mask <= 3:
            raise ValueError(f"mask {mask} is out of range; the half mask is 2 bits (0..3)")
        d = _bits32(data, "data")
        if d.shape != (self.geometry.partitions,):
            raise ValueError(f"data must have shape ({self.geometry.partitions},), not {d.shape}")
        keep = np.uint32((0 if mask & 1 else 0xFFFF) | (0 if mask & 2 else 0xFFFF0000))
        self.mem[bank, row] = (self.mem[bank, row] & keep) | (d & ~keep)

    def engine_read(self, bank, row):
        """Engine-port read of memory word ``(bank, row)``: uint32 ``[partitions]`` (a copy)."""
        bank, row = self._address(bank, row)
        return self.mem[bank, row].copy()

    # -- views -------------------------------------------------------------------------------

    def read(self, bank, col, n, dtype):
        """Elements ``col .. col + n - 1`` of ``dtype`` in ``bank``, shape ``[partitions, n]``.

        float32 for FP32, ``ml_dtypes.bfloat16`` for BF16, uint16 for RAW16; 16-bit element
        ``c`` is half ``c % 2`` of word ``c // 2``.  A copy; reading changes nothing.
        """
        g = self.geometry
        dtype = _dtype(dtype)
        bank = _int(bank, "bank")
        col = _int(col, "col")
        n = _int(n, "n")
        if not 0 <= bank < g.banks:
            raise ValueError(f"bank {bank} is out of range; PSUM has banks 0..{g.banks - 1}")
        cap = g.capacity(dtype)
        if n < 0 or col < 0 or col + n > cap:
            raise ValueError(
                f"columns {col}..{col + n - 1} do not fit a bank row of {cap} "
                f"{dtype.name.lower()} values"
            )
        words = self.mem[bank]
        if dtype == Dtype.FP32:
            return words[col : col + n].T.copy().view(np.float32)
        halves = np.stack([words & _U16, words >> np.uint32(16)], axis=1)
        halves = halves.reshape(2 * g.rows, g.partitions).astype(np.uint16)
        out = halves[col : col + n].T.copy()
        return out.view(ml_dtypes.bfloat16) if dtype == Dtype.BF16 else out
