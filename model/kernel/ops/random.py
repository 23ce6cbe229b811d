"""The golden of the engines' random-number generators."""

from __future__ import annotations

OPS = {}
