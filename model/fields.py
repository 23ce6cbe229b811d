"""Instruction words: fields packed LSB first, shared by every engine's instruction set."""

__all__ = ["pack_fields", "unpack_fields"]


def pack_fields(fields, obj, what):
    """The word (int) of ``obj``'s attributes laid out as ``fields`` = ``((name, width), ...)``
    LSB first; ``ValueError`` naming ``what`` and the field when a value does not fit."""
    word, pos = 0, 0
    for name, width in fields:
        v = int(getattr(obj, name))
        if not 0 <= v < 1 << width:
            raise ValueError(f"{what} field {name}={v} does not fit its {width} bits")
        word |= v << pos
        pos += width
    return word


def unpack_fields(fields, word):
    """``{name: value}`` of a word laid out as ``fields`` (LSB first)."""
    vals, pos = {}, 0
    for name, width in fields:
        vals[name] = (int(word) >> pos) & ((1 << width) - 1)
        pos += width
    return vals
