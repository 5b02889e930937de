"""Shortcuts to a hardware's generation-wide constants."""

from __future__ import annotations


def memory_constants(hw):
    from planner.specs.efficiency import load_efficiency

    return load_efficiency(hw.generation).memory
