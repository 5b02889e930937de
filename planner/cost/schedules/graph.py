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
    """A task graph in array form: durations as sparse (variable, task, coefficient) terms plus a
    constant per task, each task's predecessors (its dependencies and the task before it on its
    stream), a topological order and each task's depth. Tuples rather than lists for what a graph
    keeps per task: the garbage collector stops tracking tuples of numbers, and cached graphs of
    lists made it sweep the search's whole heap (some 80 ms a sweep)."""

    variables: tuple
    terms: tuple[np.ndarray, np.ndarray, np.ndarray]
    """(variable, task, coefficient) of every term; a task names a variable at most once."""
    const: np.ndarray
    waits: tuple[tuple[int, ...], ...]
    """Each task's predecessors, then -1: the sentinel slot, finished at 0 (no task starts before
    the step does, as in the event walk)."""
    topo: list[int]
    """The tasks in a topological order."""
    depth: np.ndarray
    """Each task's level: 0 without predecessors, else one more than its deepest predecessor's."""
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
    def width(self) -> int:
        """Slots per task in :attr:`preds`."""
        return max(map(len, self.waits), default=1)

    @cached_property
    def preds(self) -> np.ndarray:
        """:attr:`waits` padded to :attr:`width` slots with the sentinel ``n`` (-1's slot)."""
        n, pl = self.n, self.waits
        sizes = np.fromiter(map(len, pl), dtype=np.int64, count=n)
        pad = np.full((n, self.width), n, dtype=np.int64)
        # Row t's first sizes[t] slots hold its waits (one scatter, not a loop of row writes).
        flat = np.fromiter((d for p in pl for d in p), dtype=np.int64, count=int(sizes.sum()))
        flat[flat < 0] = n
        pad[np.repeat(np.arange(n), sizes), np.arange(len(flat)) - np.repeat(np.cumsum(sizes) - sizes, sizes)] = flat
        return pad

    @cached_property
    def levels(self) -> tuple[np.ndarray, ...]:
        """The tasks grouped by depth: each level's finish times read only earlier levels'."""
        if not self.n:
            return ()
        by_depth = np.argsort(self.depth, kind="stable")
        return tuple(np.split(by_depth, np.cumsum(np.bincount(self.depth))[:-1]))

    @cached_property
    def coef(self) -> np.ndarray:
        """The durations' (variables x tasks) coefficient matrix."""
        rows, cols, vals = self.terms
        coef = np.zeros((len(self.variables), self.n))
        coef[rows, cols] += vals  # (variable, task) pairs are distinct: np.add.at's sums
        return coef

    @cached_property
    def select(self) -> np.ndarray | None:
        """Where every duration is one variable (coefficient 1) plus its constant, each task's
        variable (``len(variables)`` for none); None otherwise."""
        rows, cols, vals = self.terms
        if np.any(vals != 1.0) or len(np.unique(cols)) != len(cols):
            return None
        sel = np.full(self.n, len(self.variables), dtype=np.int64)
        sel[cols] = rows
        return sel

    @cached_property
    def order(self) -> tuple[list[int], tuple[tuple[int, ...], ...]]:
        """(tasks in topological order, :attr:`waits`), for walking one plan: a loop over a few
        thousand tasks beats a numpy call per level there."""
        return self.topo, self.waits


def graph_of(tasks: Tasks, marks: dict | None = None) -> Graph:
    """The array form of a task graph whose durations are :class:`Lin` (or numbers)."""
    preds = _preds(tasks)
    topo, depth = _topological(preds)
    names, terms, const = _terms(tasks.dur)
    on_compute = np.array([s == COMPUTE and c != "p2p" for s, c in zip(tasks.stream, tasks.cause)], dtype=bool)
    a2a = np.array([s == A2A for s in tasks.stream], dtype=bool)
    waits = tuple((*p, -1) for p in preds)
    return Graph(names, terms, const, waits, topo, np.array(depth, dtype=np.int64), np.array(tasks.rank),
                 on_compute, a2a, marks or {})


def _preds(tasks: Tasks) -> list[list[int]]:
    """Each task's dependencies, then the task before it on its rank's stream."""
    out: list[list[int]] = []
    prev: dict[tuple, int] = {}
    for t, key in enumerate(zip(tasks.rank, tasks.stream)):
        p = tasks.resolved(t)
        last = prev.get(key)
        if last is not None:
            p.append(last)
        prev[key] = t
        out.append(p)
    return out


def _topological(preds: list[list[int]]) -> tuple[list[int], list[int]]:
    """(a topological order, each task's depth) by Kahn's algorithm; a cycle is the walk's
    deadlock."""
    n = len(preds)
    after: list[list[int]] = [[] for _ in range(n)]
    for t, p in enumerate(preds):
        for d in p:
            after[d].append(t)
    waits = list(map(len, preds))
    depth = [0] * n
    order = [t for t in range(n) if not waits[t]]
    for t in order:  # a queue: tasks join it as their last predecessor leaves
        below = depth[t] + 1
        for u in after[t]:
            if depth[u] < below:
                depth[u] = below
            waits[u] -= 1
            if not waits[u]:
                order.append(u)
    if len(order) < n:
        raise ValueError(f"the schedule deadlocks: {n - len(order)} tasks never start")
    return order, depth


def _terms(durs: list) -> tuple[tuple, tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """(variables in order of first use, their (variable, task, coefficient) terms, constants)."""
    names: dict = {}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    at: list[int] = []
    consts: list[float] = []
    for t, d in enumerate(durs):
        if not isinstance(d, Lin):
            if d:  # a zero adds nothing to the constants' zeros
                at.append(t)
                consts.append(float(d))
            continue
        for name, c in d.terms.items():
            if name is None:
                at.append(t)
                consts.append(c)
            else:
                rows.append(names.setdefault(name, len(names)))
                cols.append(t)
                vals.append(c)
    const = np.zeros(len(durs))
    const[np.array(at, dtype=np.int64)] += consts  # one constant per task: np.add.at's sums
    terms = (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(vals, dtype=float))
    return tuple(names), terms, const


def durations(g: Graph, values: np.ndarray) -> np.ndarray:
    """(plans, tasks) durations for each row of ``values`` (plans x ``g.variables``)."""
    values = np.atleast_2d(np.asarray(values, dtype=float))
    if g.select is not None and np.isfinite(values).all():
        # Each task's duration is one variable or none: picking it is the product's exact value
        # (x times 1 plus zeros is x) without the dense matrix (46 MB for a coarse walk of
        # 12,000 tasks and 500 variables).
        return np.concatenate([values, np.zeros((len(values), 1))], axis=1)[:, g.select] + g.const
    return values @ g.coef + g.const


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
    fin = [0.0] * (g.n + 1)  # the last entry is the sentinel, finished at 0
    get = fin.__getitem__
    for t in order:
        fin[t] = max(map(get, preds[t])) + d[t]
    return np.array(fin)[None, :]
