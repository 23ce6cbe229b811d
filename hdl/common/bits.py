"""Combinational bit-manipulation helpers shared by the FP units.

Every helper adds its logic to a :class:`~amaranth.hdl.Module` passed in and returns a named
:class:`~amaranth.hdl.Signal`; the intermediate nodes are named signals too, so the generated
Verilog stays readable and each node is computed once (no duplicated expression trees).
"""

from amaranth.hdl import Cat, Const, Mux, Shape, Signal, unsigned

__all__ = ["bits_for_range", "clamp", "count_leading_zeros", "shift_right_sticky", "equals"]


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
    # The mask of the bits that leave the word: ones below bit `amount`.
    keep_mask = Signal(n, name=f"{name}_keep")
    m.d.comb += [
        shifted.eq(value >> amount),
        keep_mask.eq(Const((1 << n) - 1, unsigned(n)) << amount),
        sticky.eq((value & ~keep_mask).any()),
    ]
    return shifted, sticky


def equals(value, const):
    """``value == const`` for an integer ``const``; ``~value.any()`` when it is 0.

    Amaranth writes a multi-bit ``x == 0`` as ``!x``, which ``verilator -Wall`` reports
    (WIDTHTRUNC: LOGNOT expects 1 bit); ``~x.any()`` is the same logic, written as a reduction.
    """
    const = int(const)
    return ~value.any() if const == 0 else value == const
