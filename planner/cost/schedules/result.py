"""What a time walk says about each rank: when it finished, how long it computed, how much of
its communication ran while the compute stream idled (exposed) or behind compute (hidden), and
the bubble (the rest of the step: waiting for other ranks)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.schedules.timing import seconds
from planner.cost.schedules.walk import COMPUTE, Tasks


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted disjoint intervals covering the same time."""
    out: list[list[float]] = []
    for s, f in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], f)
        else:
            out.append([s, f])
    return [(s, f) for s, f in out]


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(f - s for s, f in intervals)


def overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Time covered by both of two disjoint sorted interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class RankTime:
    """One rank's forward/backward phase (seconds from the step's start)."""

    rank: int
    end: float
    """When its last task finished."""
    compute: float
    """Seconds its compute stream ran ops (F, I, W, B)."""
    by_kind: dict[str, float]
    comm: dict[str, float]
    """Seconds of each communication cause ('a2a', 'p2p'), wherever it ran."""
    exposed: dict[str, float]
    """Of those, the seconds no compute ran at the same time."""
    exposed_total: float
    """Time some communication ran and no compute did (causes overlapping each other counted once)."""
    bubble: float
    """Step time less compute less exposed communication: the rank waits for others."""

    @property
    def hidden(self) -> dict[str, float]:
        return {k: self.comm[k] - self.exposed[k] for k in self.comm}


@dataclass(frozen=True)
class WalkResult:
    step: float
    """The forward/backward phase: when the last rank finished."""
    ranks: tuple[RankTime, ...]
    tasks: Tasks
    start: list[float]
    finish: list[float]

    @property
    def bubble(self) -> tuple[float, ...]:
        return tuple(r.bubble for r in self.ranks)


def _is_compute(tasks: Tasks, t: int) -> bool:
    return tasks.stream[t] == COMPUTE and tasks.cause[t] != "p2p"


def rank_time(tasks: Tasks, start: list[float], finish: list[float], rank: int, mine: list[int],
              step: float) -> RankTime:
    """One rank's times from the intervals of its tasks ``mine``."""
    busy = union([(start[t], finish[t]) for t in mine if _is_compute(tasks, t)])
    by_kind: dict[str, float] = {}
    comm: dict[str, list[tuple[float, float]]] = {}
    for t in mine:
        if _is_compute(tasks, t):
            if tasks.cause[t] not in ("post", "wait", "join"):  # zero-length synchronisation points
                by_kind[tasks.cause[t]] = by_kind.get(tasks.cause[t], 0.0) + seconds(tasks.dur[t])
        else:
            comm.setdefault(tasks.cause[t], []).append((start[t], finish[t]))
    spans = {k: union(v) for k, v in comm.items()}
    all_comm = union([i for v in spans.values() for i in v])
    exposed_total = length(all_comm) - overlap(all_comm, busy)
    compute = sum(by_kind.values())
    return RankTime(rank, max((finish[t] for t in mine), default=0.0), compute, by_kind,
                    {k: sum(f - s for s, f in comm[k]) for k in comm},
                    {k: length(v) - overlap(v, busy) for k, v in spans.items()},
                    exposed_total, step - compute - exposed_total)


def result_of(tasks: Tasks, start: list[float], finish: list[float], p: int) -> WalkResult:
    step = max(finish, default=0.0)
    mine: list[list[int]] = [[] for _ in range(p)]
    for t, r in enumerate(tasks.rank):
        mine[r].append(t)
    ranks = tuple(rank_time(tasks, start, finish, r, mine[r], step) for r in range(p))
    return WalkResult(step, ranks, tasks, start, finish)
