"""The bundled published runs (tests/data/published_runs.yaml), read once per test session: reading
and checking the file takes about a second, and a dozen test modules read it as it stands. The run
specs are frozen; each caller gets a list of its own."""

from __future__ import annotations

from functools import lru_cache

from planner.validate import PUBLISHED_RUNS
from planner.validate.runs import RunSpec, load_runs


@lru_cache(maxsize=1)
def _loaded() -> tuple[RunSpec, ...]:
    return tuple(load_runs(PUBLISHED_RUNS))


def published_runs() -> list[RunSpec]:
    """load_runs(PUBLISHED_RUNS), shared by the whole test session."""
    return list(_loaded())
