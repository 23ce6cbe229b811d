"""The language's high-level functions (``nl.load``, ``nl.add``, ``nl.matmul``, ...), each lowered to instructions of the ISA."""

from __future__ import annotations

__all__ = []

#: The operator tokens' functions (``nl.add(x, y)``), by token name.
FUNCTIONS = {}
