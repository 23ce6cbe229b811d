"""Golden model of the number formats and FP arithmetic of the datapath (docs/numerics.md)."""

from .codec import (
    QNAN,
    bits_to_float,
    decode,
    decode_fields,
    decode_float32,
    encode,
    fp32_sum_rounder,
    from_bits,
    round_fp32_pair,
    round_fp32_sum,
    round_to_format,
    to_bits,
)
from .formats import FORMATS, Format, format_of_dtype, get_format
from .ops import (
    MAX_SCALE_EXP,
    check_ieee_float32,
    exact_sum_round,
    fp32_add,
    fp32_dot_add,
    fp32_to_bf16,
    fp32_to_fp16,
    round_fp32,
    two_sum,
)
from .xorwow import Xorwow

__all__ = [
    "QNAN",
    "bits_to_float",
    "decode",
    "decode_fields",
    "decode_float32",
    "encode",
    "from_bits",
    "round_fp32_pair",
    "round_fp32_sum",
    "fp32_sum_rounder",
    "round_to_format",
    "to_bits",
    "FORMATS",
    "Format",
    "format_of_dtype",
    "get_format",
    "MAX_SCALE_EXP",
    "check_ieee_float32",
    "exact_sum_round",
    "fp32_add",
    "fp32_dot_add",
    "fp32_to_bf16",
    "fp32_to_fp16",
    "round_fp32",
    "two_sum",
    "Xorwow",
]
