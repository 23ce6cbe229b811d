"""The golden of the DMA engines' instructions."""

from __future__ import annotations

OPS = {}
