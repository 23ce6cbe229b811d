"""The golden of reductions, scans and statistics."""

from __future__ import annotations

OPS = {}
