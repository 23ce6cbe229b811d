"""QuantizeMX beats: packing source groups into ``src`` payloads, unpacking ``dst`` payloads, and
the golden output of each beat.  Shared by the cocotb testbench and the Amaranth-simulator tests.

The payload layouts are the RTL's (:func:`ncrtl.hdl.vector_engine.quantize_mx.src_layout`,
:func:`~ncrtl.hdl.vector_engine.quantize_mx.dst_layout`): the field offsets are read from them.
"""

from dataclasses import dataclass

import numpy as np

from ncrtl.hdl.vector_engine.quantize_mx import dst_layout, src_layout
from ncrtl.model.fp import from_bits
from ncrtl.model.vector_engine import (
    ELEMENT_FORMATS,
    GROUP_SIZE,
    SCALE_RULES,
    SOURCE_FORMATS,
    quantize_groups,
)
from ncrtl.testbench.stream import pack_lanes, unpack_lanes

__all__ = ["Beats", "pack_beats", "unpack_beats", "expected", "beats_of"]

#: The ``elem_fmt`` code with no element format: an invalid configuration.
INVALID_ELEM_FMT = len(ELEMENT_FORMATS)


@dataclass
class Beats:
    """Beats of one configuration.

    Attributes
    ----------
    codes : ndarray [B, groups * 32] of uint16
        Source encodings, beat ``b``'s group ``g`` in columns ``[32g, 32g + 32)``.
    src_fmt, elem_fmt, scale_rule : ndarray [B] of int
        The configuration codes of each beat.
    """

    codes: np.ndarray
    src_fmt: np.ndarray
    elem_fmt: np.ndarray
    scale_rule: np.ndarray

    def __len__(self):
        return len(self.codes)

    @staticmethod
    def concat(parts):
        return Beats(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


_FIELDS = ("codes", "src_fmt", "elem_fmt", "scale_rule")


def beats_of(groups_codes, groups, src_fmt, elem_fmt, scale_rule):
    """Beats carrying ``groups_codes`` ([N, 32] uint16, padded with all-zero groups to a whole
    beat) with one configuration (names or codes)."""
    codes = np.asarray(groups_codes, dtype=np.uint16).reshape(-1, GROUP_SIZE)
    pad = -len(codes) % groups
    codes = np.concatenate([codes, np.zeros((pad, GROUP_SIZE), np.uint16)])
    n = len(codes) // groups

    def code(value, names):
        return names.index(value) if isinstance(value, str) else int(value)

    return Beats(
        codes.reshape(n, groups * GROUP_SIZE),
        np.full(n, code(src_fmt, SOURCE_FORMATS)),
        np.full(n, code(elem_fmt, ELEMENT_FORMATS)),
        np.full(n, code(scale_rule, SCALE_RULES)),
    )


def pack_beats(beats, groups):
    """``src`` payload integers of ``beats``."""
    layout = src_layout(groups)
    words = pack_lanes(beats.codes, 16)
    cfg = np.zeros(len(beats), dtype=object)
    for name in ("src_fmt", "elem_fmt", "scale_rule"):
        cfg += np.asarray(getattr(beats, name)).astype(object) << layout[name].offset
    return [w | int(c) for w, c in zip(words, cfg)]


def unpack_beats(words, groups):
    """``(codes [B, groups * 32] uint8, scales [B, groups] uint8, error [B] uint8)`` of ``dst``
    payload integers."""
    layout = dst_layout(groups)
    words = [int(w) for w in words]

    def field(name):
        f = layout[name]
        mask = (1 << f.width) - 1
        return [(w >> f.offset) & mask for w in words]

    n = groups * GROUP_SIZE
    codes = unpack_lanes(field("data"), 8, n) if words else np.zeros((0, n), np.uint8)
    scales = unpack_lanes(field("scale"), 8, groups) if words else np.zeros((0, groups), np.uint8)
    return codes, scales, np.array(field("error"), dtype=np.uint8)


def expected(beats, groups):
    """The golden ``(codes, scales, error)`` of ``beats``, as :func:`unpack_beats` gives them:
    :func:`ncrtl.model.vector_engine.quantize_groups` per beat configuration; a beat with an
    invalid element format has ``error`` set and zero codes and scales."""
    n = len(beats)
    codes = np.zeros((n, groups * GROUP_SIZE), np.uint8)
    scales = np.zeros((n, groups), np.uint8)
    error = (np.asarray(beats.elem_fmt) >= INVALID_ELEM_FMT).astype(np.uint8)
    cfgs = np.stack([beats.src_fmt, beats.elem_fmt, beats.scale_rule], axis=1)
    for s, e, r in {tuple(int(x) for x in c) for c in cfgs}:
        if e >= INVALID_ELEM_FMT:
            continue
        sel = (cfgs == (s, e, r)).all(axis=1)
        src = SOURCE_FORMATS[s]
        values = from_bits(beats.codes[sel].reshape(-1, GROUP_SIZE), src)
        c, sc = quantize_groups(values, ELEMENT_FORMATS[e], scale_rule=SCALE_RULES[r])
        codes[sel] = c.reshape(-1, groups * GROUP_SIZE)
        scales[sel] = sc.reshape(-1, groups)
    return codes, scales, error
