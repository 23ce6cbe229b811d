"""Golden model of the Vector Engine's MX quantization (docs/vector_engine.md).

* :func:`quantize_mx` — the QuantizeMX instruction: BF16/FP16 ``[P, F]`` to MX element codes
  ``[P, F/4, 4]`` and E8M0 scales in the Tensor Engine's quadrant layout.
* :func:`quantize_groups` — the same rule on groups of 32 values given in group order (what one
  beat of the RTL carries).
* :func:`sbuf_groups` / :func:`sbuf_tiles` — an SBUF tile as groups in beat order, and back.
"""

from .quantize_mx import (
    ELEMENT_FORMATS,
    GROUP_COLS,
    GROUP_ROWS,
    GROUP_SIZE,
    QUADRANT,
    SCALE_NAN,
    SCALE_RULES,
    SOURCE_FORMATS,
    element_format,
    group_nan_code,
    max_code,
    quantize_groups,
    quantize_mx,
    sbuf_groups,
    sbuf_tiles,
    scale_emax,
    scale_partition,
)

__all__ = [
    "sbuf_groups",
    "sbuf_tiles",
    "ELEMENT_FORMATS",
    "GROUP_COLS",
    "GROUP_ROWS",
    "GROUP_SIZE",
    "QUADRANT",
    "SCALE_NAN",
    "SCALE_RULES",
    "SOURCE_FORMATS",
    "element_format",
    "group_nan_code",
    "max_code",
    "quantize_groups",
    "quantize_mx",
    "scale_emax",
    "scale_partition",
]
