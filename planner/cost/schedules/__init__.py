"""Pipeline schedules beyond Megatron's 1F1B: each schedule's op order per rank
(:mod:`~planner.cost.schedules.orders`), where its chunks sit (:mod:`~planner.cost.schedules.ops`),
a time walk over the ranks (:mod:`~planner.cost.schedules.walk`, a discrete-event simulation) and
the in-flight chunks over the step (:mod:`~planner.cost.schedules.inflight`).

Schedules by name (docs/research/schedules.md says who runs each and with which flags):

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


@dataclass(frozen=True)
class Schedule:
    name: str
    order: Callable[[int, int, int, int], tuple]
    """(p, v, m, rank) -> the rank's items."""
    placement: Callable[[int, int, int], Placement]
    """(p, v, m) -> where every chunk sits."""
    chunks: Callable[[int], int]
    """Chunks per rank for a requested v."""
    splits_backward: bool
    """Whether weight gradients run as their own W ops (and hold memory between I and W)."""
    parameter_copies: int
    """Copies of the model's parameters the PP group holds."""


def _fixed(n: int) -> Callable[[int], int]:
    return lambda v: n


SCHEDULES: dict[str, Schedule] = {
    "1f1b": Schedule("1f1b", lambda p, v, m, r: orders.megatron_1f1b(p, 1, m, r),
                     lambda p, v, m: loop_placement(p, 1, m), _fixed(1), False, 1),
    "interleaved": Schedule("interleaved", orders.megatron_1f1b, loop_placement, lambda v: v, False, 1),
    "combined-1f1b": Schedule("combined-1f1b", orders.megatron_overlap, loop_placement, lambda v: v, False, 1),
    "zb-h1": Schedule("zb-h1", orders.zb_h1, loop_placement, lambda v: v, True, 1),
    "zbv": Schedule("zbv", lambda p, v, m, r: orders.zbv(p, m, r), lambda p, v, m: v_placement(p, m),
                    _fixed(2), True, 1),
    "dualpipe": Schedule("dualpipe", lambda p, v, m, r: orders.dualpipe(p, m, r),
                         lambda p, v, m: dual_placement(p, m), _fixed(2), True, 2),
    "dualpipev": Schedule("dualpipev", lambda p, v, m, r: orders.dualpipev(p, m, r),
                          lambda p, v, m: v_placement(p, m), _fixed(2), True, 1),
}


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
