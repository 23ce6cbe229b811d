"""The golden of selection, index generation, sorting and gathering."""

from __future__ import annotations

OPS = {}
