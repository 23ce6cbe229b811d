"""Random numbers: the engines' generators, their state and dropout."""

from __future__ import annotations

__all__ = []
