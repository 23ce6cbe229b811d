"""The engines' registers: allocation, moves, loads and stores."""

from __future__ import annotations

__all__ = []
