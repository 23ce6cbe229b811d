"""Small helpers of the PSUM RTL."""

__all__ = ["equals"]


def equals(value, const):
    """``value == const`` for an integer ``const``; ``~value.any()`` when it is 0.

    Amaranth writes a multi-bit ``x == 0`` as ``!x``, which ``verilator -Wall`` reports
    (WIDTHTRUNC: LOGNOT expects 1 bit); ``~x.any()`` is the same logic, written as a reduction.
    """
    const = int(const)
    return ~value.any() if const == 0 else value == const
