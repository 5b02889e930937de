"""Checks on the numbers a user types and the defaults they fall back on, below every layer that
reads them (the CLI options, the job's resolution): light, so that the CLI's start-up imports them."""

from __future__ import annotations

import math

from planner.errors import PlannerError

DEFAULT_MEMORY_MARGIN = 0.0217
"""The default memory margin: 2.17 % of the usable HBM kept free on every GPU, beyond the reserved
peak. Re-derived from the validated reserved error (issue 41): the largest held-out shortfall of
the predicted reserved peak over the 72 measured single- and 2-GPU runs (measured over predicted,
the allocator workload model refit without the run's configuration, or fitted without the run at
all: +2.17 % at most, graph2-moe128x2-s2k-b2-pad-none of the second lease, 2026-12-05; 0.27 % on
the 46 runs before it), rounded up at the fourth decimal (benchmarks/gpu/reserved_validation.py
REDERIVED_MARGIN, results/validation/gpu-memory.md "Reserved peak, validated"). A share of the
reserved peak is at most the same share of the usable HBM, so the margin covers that shortfall on
any plan that fits. It replaced 3 %, the largest allocated-peak error rounded up, from before
reserved memory was modelled from the workload. ``--memory-margin
0`` ranks plans up to the capacity."""


def finite_option(option: str, value: float, *, low: float | None = None, high: float | None = None,
                  unit: str = "", low_inclusive: bool = True, negative: str | None = None,
                  low_text: str | None = None) -> float:
    """A float from the command line must be a finite number in [low, high]: typer reads 'nan'
    and 'inf' as floats, so every float option is checked here, as one paragraph."""
    u = f" {unit}" if unit else ""
    if not math.isfinite(value):
        raise PlannerError(f"{option} {value} is not a number planner can use: give a finite number"
                           + (f" of {unit}" if unit else "") + ".")
    if low is not None and (value < low or (value == low and not low_inclusive)):
        if value < 0 and negative:
            raise PlannerError(f"{option} {value:g} is negative: {negative}.", hint=f"Give a value of at least {low:g}{u}.")
        shown = low_text or f"{low:g}{u}"
        bound = f"at least {shown}" if low_inclusive else f"more than {shown}"
        raise PlannerError(f"{option} {value:g} is out of range: it must be {bound}.")
    if high is not None and value > high:
        raise PlannerError(f"{option} {value:g} is out of range: it must be at most {high:g}{u}.")
    return value
