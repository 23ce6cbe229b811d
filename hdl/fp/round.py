"""Round-to-nearest-even packing of a normalized significand into an IEEE format."""

import dataclasses

from amaranth.hdl import Cat, Mux, Signal

from ncrtl.hdl.common.bits import bits_for_range, clamp, shift_right_sticky
from ncrtl.model.fp import get_format

__all__ = ["round_pack", "rounding_grid"]


def rounding_grid(fmt):
    """The IEEE-style format :func:`round_pack` rounds a format without Inf on (e4m3fn, e2m1fn):
    the same bias, mantissa and subnormals, one more exponent bit.  Every finite value of
    ``fmt`` keeps its encoding; a value rounded past the top binade (e4m3fn's NaN code, e5m2's
    Inf, 8.0 for e2m1fn) becomes a code above :func:`ncrtl.model.vector_engine.max_code` instead
    of wrapping or being taken for a special, so saturation (or the NaN of an overflow) is one
    comparison."""
    fmt = get_format(fmt)
    return dataclasses.replace(
        fmt,
        name=f"{fmt.name}_grid",
        exp_bits=fmt.exp_bits + 1,
        special="ieee",
        overflow="inf",
        dtype=None,
        container_bits=0,
        aliases=(),
    )


def round_pack(m, fmt, e_top, sig, sticky_in, *, name):
    """Round ``sig * 2**(e_top - len(sig) + 1)`` (+ a sticky tail) once to ``fmt``, RNE.

    Builds combinational logic in ``m`` and returns ``(magnitude, overflow)``: the encoding of the
    rounded magnitude without its sign bit (``fmt.bits - 1`` bits; zero when the value rounds to
    zero) and a flag set when it rounds beyond the largest finite value (the caller substitutes
    Inf).  Gradual underflow: below ``2**fmt.emin`` the rounding position is pinned to the
    smallest subnormal's LSB.

    Parameters
    ----------
    fmt : Format
        An IEEE-style format (``special == "ieee"``).
    e_top : Value (signed)
        Exponent of the MSB of ``sig``.  Any width: results far outside the format's range
        overflow or round to zero correctly.
    sig : Value
        At least ``fmt.precision + 1`` bits.  Its MSB must be set whenever ``e_top >= fmt.emin``
        (a normal result); below that it may be unnormalized, since the value is then shifted
        right to the subnormal grid anyway.
    sticky_in : Value
        1 when the exact value has nonzero bits below the LSB of ``sig``.  The caller guarantees
        these never sit at or above the rounding position, and that ``sig``'s LSB is at least
        one bit below the round bit (true here: ``len(sig) >= precision + 1``).

    Notes
    -----
    The top ``precision`` bits of ``sig`` are the candidate result ``M``, the next bit the round
    bit, and everything below is ORed into a sticky bit.  Below the normal range the triple
    ``(M, round, sticky)`` is shifted right by ``emin - e_top`` with the shifted-out bits joining
    the sticky bit (exact: the sticky bit stays strictly below the round bit).  Then
    ``M += round & (sticky | M[0])``.  The encoding is formed as
    ``(max(e_top + bias - 1, 0) << man_bits) + M``: the implicit bit of a normal ``M`` adds the
    missing 1 to the exponent field, a rounding carry out of ``M`` bumps the exponent, and a
    subnormal that rounds up to ``2**emin`` becomes the smallest normal, all without muxes.
    """
    if fmt.special != "ieee":
        raise ValueError(f"round_pack supports IEEE-style formats, not {fmt.name!r}")
    p = fmt.precision
    n = len(sig)
    if n < p + 1:
        raise ValueError(
            f"round_pack needs at least {p + 1} significand bits for {fmt.name}, got {n}"
        )
    # Candidate significand, round bit and sticky bit at the normal-range rounding position.
    trio = Signal(p + 2, name=f"{name}_trio")
    rest_nonzero = sig[: n - p - 1].any() if n > p + 1 else 0
    m.d.comb += trio.eq(Cat(rest_nonzero | sticky_in, sig[n - p - 1], sig[n - p :]))
    # Extra right shift into the subnormal range: emin - e_top when positive.
    denorm = clamp(m, fmt.emin - e_top, 0, p + 2, name=f"{name}_denorm")
    shifted, lost = shift_right_sticky(m, trio, denorm, name=f"{name}_dn")
    mant = Signal(p, name=f"{name}_m")
    rnd = Signal(name=f"{name}_rnd")
    stk = Signal(name=f"{name}_stk")
    m.d.comb += [mant.eq(shifted[2:]), rnd.eq(shifted[1]), stk.eq(shifted[0] | lost)]
    rounded = Signal(p + 1, name=f"{name}_rounded")
    m.d.comb += rounded.eq(mant + (rnd & (stk | mant[0])))
    # Biased exponent minus one (the implicit bit adds it back); 0 in the subnormal range.
    e_lo, e_hi = _value_range(e_top)
    ebase = Signal(bits_for_range(0, max(e_hi + fmt.bias - 1, 0)), name=f"{name}_ebase")
    m.d.comb += ebase.eq(Mux(e_top < fmt.emin, 0, e_top + (fmt.bias - 1)))
    code = Signal(len(ebase) + fmt.man_bits + 1, name=f"{name}_code")
    m.d.comb += code.eq((ebase << fmt.man_bits) + rounded)
    inf_code = ((1 << fmt.exp_bits) - 1) << fmt.man_bits
    overflow = Signal(name=f"{name}_ovf")
    magnitude = Signal(fmt.bits - 1, name=f"{name}_mag")
    m.d.comb += [overflow.eq(code >= inf_code), magnitude.eq(code)]
    return magnitude, overflow


def _value_range(value):
    """``(lo, hi)`` of the integers a value of this shape can hold."""
    shape = value.shape()
    if shape.signed:
        return -(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1
    return 0, (1 << shape.width) - 1
