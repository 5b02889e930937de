"""Shortcuts to a hardware's generation-wide constants."""

from __future__ import annotations

from planner.specs.efficiency import load_efficiency


def memory_constants(hw):
    return load_efficiency(hw.generation).memory
