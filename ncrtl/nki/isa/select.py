"""Selection, index generation, sorting and gathering on the Vector and GpSimd engines."""

from __future__ import annotations

__all__ = []
