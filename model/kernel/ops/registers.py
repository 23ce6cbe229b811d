"""The golden of the engines' register instructions."""

from __future__ import annotations

OPS = {}
