"""Combinational bit-manipulation helpers shared by the FP units.

Every helper adds its logic to a :class:`~amaranth.hdl.Module` passed in and returns a named
:class:`~amaranth.hdl.Signal`; the intermediate nodes are named signals too, so the generated
Verilog stays readable and each node is computed once (no duplicated expression trees).
"""

from amaranth.hdl import Cat, Const, Mux, Shape, Signal, Value, unsigned

__all__ = [
    "bits_for_range",
    "clamp",
    "count_leading_zeros",
    "shift_left",
    "shift_right_sticky",
    "equals",
    "span_mask",
    "pick",
    "decode",
]

#: Bits of the widest word a simulator evaluates as one machine word (Verilator's ``QData``).
WORD = 64

#: Low bits of a :func:`shift_left` amount shifted as a variable (the rest selects constants).
_SHL_FINE = 3


def bits_for_range(lo, hi):
    """Amaranth shape holding every integer of ``[lo, hi]`` (signed when ``lo < 0``)."""
    if lo > hi:
        raise ValueError(f"Empty integer range [{lo}, {hi}]")
    return Shape.cast(range(lo, hi + 1))


def clamp(m, value, lo, hi, *, name):
    """``min(max(value, lo), hi)`` as an unsigned signal of ``range(lo, hi + 1)``.

    ``value`` may be signed; ``0 <= lo <= hi`` are Python integers.  Used to bound shift amounts,
    so that a variable shifter never sees more select bits than it needs (and Amaranth never has
    to widen a left shift by ``2**len(amount)`` bits).
    """
    if not 0 <= lo <= hi:
        raise ValueError(f"Clamp bounds must satisfy 0 <= lo <= hi, not lo={lo}, hi={hi}")
    out = Signal(range(lo, hi + 1), name=name)
    # For lo == 0 the sign bit is the "below" test (avoids a compare against a 1-bit zero).
    below = value[-1] if (lo == 0 and value.shape().signed) else value < lo
    m.d.comb += out.eq(Mux(below, lo, Mux(value > hi, hi, value)))
    return out


def count_leading_zeros(m, value, *, name):
    """Number of leading zeros of ``value`` (``len(value)`` when it is zero), as a log-depth tree.

    The value is padded below its LSB with ``1, 0, 0, ...`` up to a power of two, so the padded
    word is never zero and the count of a zero ``value`` comes out as ``len(value)`` without a
    special case.  Each tree node combines a (high, low) pair of halves::

        zero = zero_hi & zero_lo
        count = zero_hi ? {1, count_lo} : {0, count_hi}
    """
    n = len(value)
    if n < 1:
        raise ValueError("Cannot count leading zeros of a zero-width value")
    size = 1 << n.bit_length()  # >= n + 1: at least one padding bit
    pad = size - n
    padded = Signal(size, name=f"{name}_pad")
    m.d.comb += padded.eq(Cat(Const(1 << (pad - 1), pad), value))
    # Level 0: one node per bit, LSB first; a node is (is_zero, count) with a 0-bit count.
    nodes = [(~padded[i], None) for i in range(size)]
    level = 0
    while len(nodes) > 1:
        level += 1
        nxt = []
        for j in range(len(nodes) // 2):
            (z_lo, c_lo), (z_hi, c_hi) = nodes[2 * j], nodes[2 * j + 1]
            z = Signal(name=f"{name}_z{level}_{j}")
            c = Signal(level, name=f"{name}_c{level}_{j}")
            m.d.comb += z.eq(z_hi & z_lo)
            if level == 1:
                m.d.comb += c.eq(z_hi)
            else:
                m.d.comb += c.eq(Mux(z_hi, Cat(c_lo, Const(1, 1)), Cat(c_hi, Const(0, 1))))
            nxt.append((z, c))
        nodes = nxt
    out = Signal(range(n + 1), name=name)
    m.d.comb += out.eq(nodes[0][1])
    return out


def shift_left(m, value, amount, *, name):
    """``value << amount`` cut to ``len(value)`` bits, as a signal, without a wider word.

    Amaranth widens a left shift by a signal to ``len(value) + 2**len(amount) - 1`` bits, and a
    simulator evaluates every word above 64 bits as an array (the rounding adder's normalizing
    shifts were 111 to 115-bit words).  Here the low bits of ``amount`` shift a word of
    ``len(value) + 7`` bits and the high bits select one of the constant shifts by multiples of
    8; a value too wide for that keeps the plain shift.  ``amount`` must be unsigned.
    """
    n = len(value)
    if amount.shape().signed:
        raise TypeError(f"Shift amount must be unsigned, not {amount.shape()!r}")
    out = Signal(n, name=name)
    fine = 1 << _SHL_FINE
    if n + fine - 1 > WORD or len(amount) <= _SHL_FINE:
        m.d.comb += out.eq(value << amount)
        return out
    low = Signal(n, name=f"{name}_fine")
    m.d.comb += low.eq(value << amount[:_SHL_FINE])
    with m.Switch(amount[_SHL_FINE:]):
        for k in range(1, -(-n // fine)):
            with m.Case(k):
                m.d.comb += out.eq(Cat(Const(0, fine * k), low[: n - fine * k]))
        with m.Case(0):
            m.d.comb += out.eq(low)
        with m.Default():  # shifted past the word
            m.d.comb += out.eq(0)
    return out


def shift_right_sticky(m, value, amount, *, name):
    """Logical right shift of ``value`` by ``amount`` with a sticky flag.

    Returns ``(shifted, sticky)``: ``shifted`` has ``len(value)`` bits, ``sticky`` is the OR of
    every bit shifted out.  ``amount`` must be unsigned; amounts ``>= len(value)`` shift
    everything out (clamp wider amounts with :func:`clamp` first).
    """
    n = len(value)
    if amount.shape().signed:
        raise TypeError(f"Shift amount must be unsigned, not {amount.shape()!r}")
    shifted = Signal(n, name=f"{name}_shr")
    sticky = Signal(name=f"{name}_sticky")
    # The mask of the bits that leave the word, ones below bit `amount`: an all-ones word
    # shifted right by the bits that stay (a left shift would widen by 2**len(amount) bits).
    stay = Signal(range(n + 1), name=f"{name}_stay")
    lost_mask = Signal(n, name=f"{name}_lost")
    m.d.comb += [
        shifted.eq(value >> amount),
        stay.eq(Mux(amount >= n, 0, n - amount)),
        lost_mask.eq(Const((1 << n) - 1, unsigned(n)) >> stay),
        sticky.eq((value & lost_mask).any()),
    ]
    return shifted, sticky


def equals(value, const):
    """``value == const`` for an integer ``const``; ``~value.any()`` when it is 0.

    Amaranth writes a multi-bit ``x == 0`` as ``!x``, which ``verilator -Wall`` reports
    (WIDTHTRUNC: LOGNOT expects 1 bit); ``~x.any()`` is the same logic, written as a reduction.
    """
    const = int(const)
    return ~value.any() if const == 0 else value == const


def span_mask(first, count, n):
    """``n`` bits, bit ``p`` set when ``first <= p < first + count``.

    A comparison that cannot fail for the width of ``first`` (``first <= p`` for ``p`` at its
    largest value) is left out: ``verilator -Wall`` reports it as CMPCONST.
    """
    end = first + count
    top = (1 << len(first)) - 1
    return Cat(*(((first <= p) if p < top else Const(1, 1)) & (end > p) for p in range(n)))


def pick(items, index):
    """``items[index]``, ``items`` values of one width; zero for an ``index`` past the end.

    Written as a tree of two-way multiplexers on the bits of ``index``, the least significant
    first (the items padded with zeros to a power of two): a cell per pair of items, whose
    output bits each depend on three inputs.  A shift of the items' concatenation (one cell
    whose every output bit depends on every input bit) costs the Verilog generator time in the
    square of the concatenation's width: over an hour for the full-size SBUF's selects; a
    variable ``word_select`` is that shift truncated by its assignment, which ``verilator
    -Wall`` reports (WIDTHTRUNC); a case statement per item is many times the C++ a simulator
    compiles."""
    items = [Value.cast(v) for v in items]
    width = len(items[0])
    if any(len(v) != width for v in items):
        raise ValueError(f"pick: items of one width, not {[len(v) for v in items]}")
    index = Value.cast(index)
    levels = (len(items) - 1).bit_length()  # the index bits the tree uses
    level = list(items)
    for k in range(levels):
        if len(level) % 2:
            level.append(Const(0, width))
        bit = index[k] if k < len(index) else Const(0, 1)
        level = [Mux(bit, level[j + 1], level[j]) for j in range(0, len(level), 2)]
    # Index bits above the tree's: any of them set is past the end.
    if len(index) > levels:
        return Mux(index[levels:].any(), 0, level[0])
    return level[0]


def decode(index, n):
    """``n`` bits, only bit ``index`` set (none for an ``index`` of ``n`` or more)."""
    return (Const(1, n) << index)[:n]
