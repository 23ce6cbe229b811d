"""The language's control flow: loops whose trip count the hardware reads at run time."""

from __future__ import annotations

__all__ = []
