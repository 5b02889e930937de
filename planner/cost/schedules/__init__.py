"""Pipeline schedules beyond Megatron's 1F1B: each schedule's op order per rank
(:mod:`~planner.cost.schedules.orders`), where its chunks sit (:mod:`~planner.cost.schedules.ops`),
a time walk over the ranks (:mod:`~planner.cost.schedules.walk`, a discrete-event simulation) and
the in-flight chunks over the step (:mod:`~planner.cost.schedules.inflight`).

Schedules by name (their records, every fact about each: planner.specs.schedule.REGISTRY, passed
as the record, never looked up by name here;
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

from functools import lru_cache

from planner.cost.schedules import orders
from planner.cost.schedules.ops import Placement, dual_placement, loop_placement, v_placement
from planner.cost.schedules.result import WalkResult, result_of
from planner.cost.schedules.timing import StepTimes
from planner.cost.schedules.walk import build, simulate
from planner.specs.schedule import REGISTRY, Schedule


def order(sched: Schedule, p: int, v: int, m: int, rank: int) -> tuple:
    """The rank's items for a requested v: the generator of the record's order kind
    (orders.GENERATORS) on its chunks per rank."""
    return orders.GENERATORS[sched.order](p, sched.chunks(v), m, rank)


def placement(sched: Schedule, p: int, v: int, m: int) -> Placement:
    """Where every chunk of ``sched`` sits (its record's placement kind)."""
    if sched.placement == "v":
        return v_placement(p, m)
    if sched.placement == "dual":
        return dual_placement(p, m)
    return loop_placement(p, sched.chunks(v), m)


SCHEDULES: tuple[Schedule, ...] = REGISTRY
"""Every schedule the walk runs: every record of planner.specs.schedule.REGISTRY (a test checks
each order kind has its generator)."""


@lru_cache(maxsize=4096)
def rank_items(sched: Schedule, p: int, v: int, m: int, rank: int) -> tuple:
    """The items (ops and overlapped pairs) rank ``rank`` runs in one step."""
    return tuple(order(sched, p, v, m, rank))


def walk(sched: Schedule, p: int, v: int, m: int, times: StepTimes) -> WalkResult:
    """The time walk of one step's forward/backward phase under ``sched``."""
    items = [rank_items(sched, p, v, m, r) for r in range(p)]
    tasks = build(items, placement(sched, p, v, m), times)
    start, finish = simulate(tasks)
    return result_of(tasks, start, finish, p)


__all__ = ["SCHEDULES", "Schedule", "order", "placement", "rank_items", "walk", "StepTimes", "WalkResult"]
