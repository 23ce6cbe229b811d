"""Reductions, scans and statistics on the Vector, Scalar and GpSimd engines."""

from __future__ import annotations

__all__ = []
