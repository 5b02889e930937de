"""Task graphs in array form and their longest paths: the max-plus evaluation of a walk.

A walk's finish times are a max-plus function of its durations (:mod:`~planner.cost.schedules.batch`'s
module docstring): for a fixed graph every finish time is the longest path to it. A graph's
durations are :class:`Lin`, linear forms over named variables; :func:`longest_paths` evaluates a
graph for a matrix of variable values, one row per plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner.cost.schedules.walk import A2A, COMPUTE, Tasks

class Lin:
    """A linear form ``sum coef * var`` (plus a constant) standing for a duration while a graph is
    built; comparisons read ``probe``, its value at a representative plan."""

    __slots__ = ("terms", "probe")

    def __init__(self, terms: dict | None = None, probe: float = 0.0):
        self.terms = terms or {}
        self.probe = probe

    @classmethod
    def var(cls, name, probe: float) -> Lin:
        return cls({name: 1.0}, probe)

    def _lift(self, other) -> Lin:
        if isinstance(other, Lin):
            return other
        return Lin({None: float(other)} if other else {}, float(other))

    def __add__(self, other) -> Lin:
        o = self._lift(other)
        terms = dict(self.terms)
        for k, c in o.terms.items():
            terms[k] = terms.get(k, 0.0) + c
        return Lin(terms, self.probe + o.probe)

    __radd__ = __add__

    def __mul__(self, k) -> Lin:
        k = float(k)
        return Lin({n: c * k for n, c in self.terms.items()} if k else {}, self.probe * k)

    __rmul__ = __mul__

    def __le__(self, x) -> bool:
        return self.probe <= x

    def __gt__(self, x) -> bool:
        return self.probe > x

    def __lt__(self, x) -> bool:
        return self.probe < x

    def __ge__(self, x) -> bool:
        return self.probe >= x


@dataclass(frozen=True)
class Graph:
    """A task graph in array form: durations as a (variables x tasks) coefficient matrix, each
    task's predecessors (its dependencies and the task before it on its stream) padded with the
    sentinel ``n``, and the tasks grouped by topological level."""

    variables: tuple
    coef: np.ndarray
    const: np.ndarray
    preds: np.ndarray
    levels: tuple[np.ndarray, ...]
    rank: np.ndarray
    compute: np.ndarray
    """Tasks of the compute stream (ops' work; not sends, posts or marks)."""
    a2a: np.ndarray
    """Tasks of the all-to-all stream."""
    marks: dict
    """Named tasks whose finish times a caller reads (an item's outputs)."""

    @property
    def n(self) -> int:
        return len(self.rank)

    @cached_property
    def order(self) -> tuple[list[int], list[list[int]]]:
        """(tasks in topological order, each task's predecessors) as Python lists, for walking one
        plan: a loop over a few thousand tasks beats a numpy call per level there."""
        return np.concatenate(self.levels).tolist() if self.levels else [], self.preds.tolist()


def graph_of(tasks: Tasks, marks: dict | None = None) -> Graph:
    """The array form of a task graph whose durations are :class:`Lin` (or numbers)."""
    n = len(tasks.dur)
    preds: list[list[int]] = []
    prev: dict[tuple, int] = {}
    for t in range(n):
        p = tasks.resolved(t)
        key = (tasks.rank[t], tasks.stream[t])
        if key in prev:
            p.append(prev[key])
        prev[key] = t
        preds.append(p)
    levels = _levels(preds)
    names: dict = {}
    rows, cols, vals, const = [], [], [], np.zeros(n)
    for t, d in enumerate(tasks.dur):
        for name, c in (d.terms.items() if isinstance(d, Lin) else [(None, float(d))]):
            if name is None:
                const[t] += c
            else:
                rows.append(names.setdefault(name, len(names)))
                cols.append(t)
                vals.append(c)
    coef = np.zeros((len(names), n))
    np.add.at(coef, (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)), vals)
    sizes = np.fromiter(map(len, preds), dtype=np.int64, count=n)
    width = int(sizes.max(initial=0)) or 1
    pad = np.full((n, width), n, dtype=np.int64)
    # Row t's first sizes[t] slots hold its predecessors (one scatter, not a loop of row writes).
    flat = np.fromiter((d for p in preds for d in p), dtype=np.int64, count=int(sizes.sum()))
    pad[np.repeat(np.arange(n), sizes), np.arange(len(flat)) - np.repeat(np.cumsum(sizes) - sizes, sizes)] = flat
    stream = np.array(tasks.stream, dtype=object)
    on_compute = (stream == COMPUTE) & (np.array(tasks.cause, dtype=object) != "p2p")
    return Graph(tuple(names), coef, const, pad, levels, np.array(tasks.rank), on_compute, stream == A2A, marks or {})


def _levels(preds: list[list[int]]) -> tuple[np.ndarray, ...]:
    """Tasks by topological level (Kahn); a cycle is the walk's deadlock."""
    n = len(preds)
    after: list[list[int]] = [[] for _ in range(n)]
    waits = [len(p) for p in preds]
    for t, p in enumerate(preds):
        for d in p:
            after[d].append(t)
    level = [0] * n
    ready = [t for t in range(n) if waits[t] == 0]
    out: list[list[int]] = []
    done = 0
    while ready:
        out.append(ready)
        done += len(ready)
        nxt = []
        for t in ready:
            for u in after[t]:
                level[u] = max(level[u], level[t] + 1)
                waits[u] -= 1
                if waits[u] == 0:
                    nxt.append(u)
        ready = nxt
    if done < n:
        raise ValueError(f"the schedule deadlocks: {n - done} tasks never start")
    return tuple(np.array(lv, dtype=np.int64) for lv in out)


def durations(g: Graph, values: np.ndarray) -> np.ndarray:
    """(plans, tasks) durations for each row of ``values`` (plans x ``g.variables``)."""
    return np.atleast_2d(np.asarray(values, dtype=float)) @ g.coef + g.const


MAX_CELLS = 2**24
"""Finish times held at once (plans x tasks, 128 MiB of float64); more plans are walked in
slices."""


def longest_paths(g: Graph, values: np.ndarray) -> np.ndarray:
    """Finish time of every task for each row of ``values`` (plans x ``g.variables``): (plans,
    tasks + 1), the last column the sentinel 0."""
    values = np.atleast_2d(np.asarray(values, dtype=float))
    rows = max(1, MAX_CELLS // (g.n + 1))
    if len(values) > rows:
        return np.concatenate([longest_paths(g, values[i:i + rows]) for i in range(0, len(values), rows)])
    dur = durations(g, values)
    if len(values) == 1:
        return _longest_path_one(g, dur[0])
    finish = np.zeros((len(values), g.n + 1))
    for lv in g.levels:
        finish[:, lv] = finish[:, g.preds[lv]].max(axis=2) + dur[:, lv]
    return finish


def _longest_path_one(g: Graph, dur: np.ndarray) -> np.ndarray:
    """:func:`longest_paths` of one plan, task by task (the same maxima and sums, so the same
    numbers)."""
    order, preds = g.order
    d = dur.tolist()
    fin = [0.0] * (g.n + 1)  # the last entry is the padding sentinel, finished at 0
    get = fin.__getitem__
    for t in order:
        fin[t] = max(map(get, preds[t])) + d[t]
    return np.array(fin)[None, :]
