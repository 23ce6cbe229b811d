"""The language's shared constants and memories (``nl.shared_identity_matrix``, ``nl.shared_constant``, ...)."""

from __future__ import annotations

__all__ = []
