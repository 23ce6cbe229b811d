"""Reusable RTL building blocks: bit-manipulation helpers, the stream wrapper, lint/synth checks."""
