"""Synchronization between the cores of a logical core."""

from __future__ import annotations

__all__ = []
