"""Pipeline schedules beyond Megatron's 1F1B: each schedule's op order per rank
(:mod:`~planner.cost.schedules.orders`), where its chunks sit (:mod:`~planner.cost.schedules.ops`),
a time walk over the ranks (:mod:`~planner.cost.schedules.walk`, a discrete-event simulation) and
the in-flight chunks over the step (:mod:`~planner.cost.schedules.inflight`).

Schedules by name (their records, every fact about each: planner.specs.schedule.REGISTRY;
docs/research/schedules.md says who runs each and with which flags):

====================  ==========================================================================
``1f1b``              Megatron-Core 1F1B (v = 1); torch ``1F1B``
``interleaved``       Megatron-Core interleaved 1F1B (v > 1); torch ``Interleaved1F1B``
``combined-1f1b``     Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): one more
                      warm-up forward, steady forward+backward pairs with the EP all-to-all of
                      one hidden under the other's compute
``zb-h1``             zero bubble H1 / ZB1P (torch ``InterleavedZeroBubble``)
``zbv``               zero bubble V (torch ``ZBVZeroBubble``), two chunks per rank in a V
``dualpipe``          DeepSeek's DualPipe: two directions, two parameter copies per PP group
``dualpipev``         DualPipe cut in half (torch ``DualPipeV``): a V over 2p stages, one copy
====================  ==========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from collections.abc import Callable

from planner.cost.schedules import orders
from planner.cost.schedules.ops import Placement, dual_placement, loop_placement, v_placement
from planner.cost.schedules.result import WalkResult, result_of
from planner.cost.schedules.timing import StepTimes
from planner.cost.schedules.walk import build, simulate
from planner.specs.schedule import REGISTRY
from planner.specs.schedule import Schedule as Record


@dataclass(frozen=True)
class Schedule:
    """A schedule's record (planner.specs.schedule.Schedule) with its order generator and
    placement resolved to the walk's functions."""

    record: Record
    generator: Callable[[int, int, int, int], tuple]
    """(p, chunks per rank, m, rank) -> the rank's items (orders.GENERATORS)."""

    def order(self, p: int, v: int, m: int, rank: int) -> tuple:
        """The rank's items for a requested v."""
        return self.generator(p, self.record.chunks(v), m, rank)

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def splits_backward(self) -> bool:
        return self.record.splits_backward

    @property
    def parameter_copies(self) -> int:
        return self.record.parameter_copies

    def chunks(self, v: int) -> int:
        """Chunks per rank for a requested v."""
        return self.record.chunks(v)

    def placement(self, p: int, v: int, m: int) -> Placement:
        """Where every chunk sits."""
        kind = self.record.placement
        if kind == "v":
            return v_placement(p, m)
        if kind == "dual":
            return dual_placement(p, m)
        return loop_placement(p, self.record.chunks(v), m)


SCHEDULES: dict[str, Schedule] = {r.name: Schedule(r, orders.GENERATORS[r.order]) for r in REGISTRY}
"""Every schedule of planner.specs.schedule.REGISTRY, by name."""


def schedule(name: str) -> Schedule:
    try:
        return SCHEDULES[name]
    except KeyError:
        raise ValueError(f"unknown pipeline schedule {name!r}; known: {', '.join(SCHEDULES)}") from None


@lru_cache(maxsize=4096)
def rank_items(name: str, p: int, v: int, m: int, rank: int) -> tuple:
    """The items (ops and overlapped pairs) rank ``rank`` runs in one step."""
    return tuple(schedule(name).order(p, v, m, rank))


def walk(name: str, p: int, v: int, m: int, times: StepTimes) -> WalkResult:
    """The time walk of one step's forward/backward phase under schedule ``name``."""
    s = schedule(name)
    items = [rank_items(name, p, v, m, r) for r in range(p)]
    tasks = build(items, s.placement(p, v, m), times)
    start, finish = simulate(tasks)
    return result_of(tasks, start, finish, p)


__all__ = ["SCHEDULES", "Schedule", "schedule", "rank_items", "walk", "StepTimes", "WalkResult"]
