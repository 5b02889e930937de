"""The time walk of many plans at once: the same task graph, durations as arrays.

A walk's finish times are a max-plus function of its durations: a task starts when its stream is
free and its dependencies are done (:func:`~planner.cost.schedules.walk.simulate`), so for a fixed
graph every finish time is the longest path to it. Plans that share a schedule, ``(p, v, m)`` and
which pieces are non-zero share one graph; their step times are one longest-path evaluation with a
column per plan (:func:`~planner.cost.schedules.graph.longest_paths`), no event queue.

Two levels keep the graphs small (the walk at p = 16, m = 120 with per-layer all-to-all has some
60,000 tasks):

- an *item* (an op, or an overlapped pair) starts once the rank's compute stream has reached it
  and its inputs have arrived (walk.py's module docstring: every framework issues an item after
  what came before it), and inside it nothing waits on the rest of the pipeline; so its duration
  and the moments its outputs are ready, counted from its start, are those of the item alone
  (:func:`item_graph`, the walk's own builder on an idle rank, durations kept symbolic);
- the pipeline walk (:class:`Coarse`) is then the walk's builder again with one task per item
  (its duration a variable per rank and item kind) and one per output (ready at an offset from
  the item's start): what it computes equals the full walk exactly (tests compare them on random
  durations for every schedule).

Durations are :class:`~planner.cost.schedules.graph.Lin`, linear forms over named variables with
a probe value (what the builder compares with zero to skip empty pieces); a graph
(:mod:`~planner.cost.schedules.graph`) is evaluated for a matrix of variable values, one row per
plan.
"""

from __future__ import annotations

import dataclasses
import gc
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from planner.cost.schedule import Op
from planner.cost.schedules import placement, rank_items
from planner.cost.schedules.graph import Graph, Lin, durations, graph_of, longest_paths
from planner.cost.schedules.ops import Commit, Pair, Placement, Post, ops_of
from planner.cost.schedules.timing import LayerTimes, StepTimes
from planner.cost.schedules.walk import COMPUTE, Tasks, _Builder, build, op_inputs, op_outputs
from planner.specs.schedule import Schedule


def symbolic_layers(prefix, probes: tuple[LayerTimes, ...]) -> tuple[LayerTimes, ...]:
    """Layers whose every field is the variable ``(*prefix, layer, field)``, probed at ``probes``."""
    return tuple(LayerTimes(**{f.name: Lin.var((*prefix, j, f.name), getattr(lt, f.name))
                               for f in dataclasses.fields(LayerTimes)})
                 for j, lt in enumerate(probes))


# ---------------------------------------------------------------------------------------------
# Items: an op or a pair on an idle rank.
# ---------------------------------------------------------------------------------------------
class _Alone(_Builder):
    """One item on an idle rank with its inputs ready; records which tasks make each op's output."""

    def inputs(self, rank: int, op) -> list:
        return []

    def produced(self, rank: int, op, done: list[int]) -> None:
        self.made[op] = list(done)


def item_key(item) -> tuple:
    """What an item's timing depends on besides its chunks' layers: op kinds and chunks."""
    if isinstance(item, Pair):
        return ("pair", item.fwd.chunk, item.bwd.kind, item.bwd.chunk)
    return ("op", item.kind, item.chunk)


def item_ops(key: tuple) -> tuple[str, ...]:
    """The output names of an item kind: 'F' and the backward's kind for a pair, else its kind."""
    return ("F", key[2]) if key[0] == "pair" else (key[1],)


@lru_cache(maxsize=4096)
def item_graph(key: tuple, probes: tuple[tuple[LayerTimes, ...], ...], delay_wgrad: bool, pair_overlap: bool) -> Graph:
    """The graph of one item kind on an idle rank, every piece of chunk c, layer j, field f the
    variable ``(c, j, f)``; ``probes`` are the chunks' layers at a representative plan (which
    pieces are empty). Marks: 'end' (the item's last task), and each output name (see
    :func:`item_ops`)."""
    chunks = tuple(symbolic_layers((c,), layers) for c, layers in enumerate(probes))
    times = StepTimes((chunks,), delay_wgrad=delay_wgrad, pair_overlap=pair_overlap)
    bld = _Alone(Tasks(), None, times)
    if key[0] == "pair":
        fwd, bwd = Op("F", key[1], 0), Op(key[2], key[3], 0)
        bld.pair(0, Pair(fwd, bwd))
        outs = {"F": bld.made[fwd], key[2]: bld.made[bwd]}
    else:
        op = Op(key[1], key[2], 0)
        bld.op(0, op)
        outs = {key[1]: bld.made[op]}
    return graph_of(bld.tasks, outs)


@dataclass(frozen=True)
class ItemTime:
    """One item kind on one rank, per plan (arrays): its duration, when each output is ready
    (from the item's start), its compute seconds and its all-to-all seconds. The compute stream
    of an item alone either computes or waits for one of its all-to-alls, so ``dur - compute`` is
    its exposed all-to-all and the rest of ``a2a`` is hidden."""

    dur: np.ndarray
    out: dict
    compute: np.ndarray
    a2a: np.ndarray

    @property
    def exposed(self) -> np.ndarray:
        return self.dur - self.compute

    @property
    def hidden(self) -> np.ndarray:
        return self.a2a - self.exposed


def _probe(chunks) -> tuple[tuple[LayerTimes, ...], ...]:
    """Which pieces are non-empty (1.0) in any plan: the graph's shape, shared by plans alike (a
    chunk repeats its block's LayerTimes object once per layer: each is read once)."""
    names = [f.name for f in dataclasses.fields(LayerTimes)]
    seen: dict[int, LayerTimes] = {}

    def one(lt: LayerTimes) -> LayerTimes:
        if id(lt) not in seen:
            seen[id(lt)] = LayerTimes(**{n: float((np.asarray(getattr(lt, n)) > 0.0).any()) for n in names})
        return seen[id(lt)]

    return tuple(tuple(one(lt) for lt in layers) for layers in chunks)


def item_time(key: tuple, chunks, delay_wgrad: bool = False, pair_overlap: bool = True, probe=None) -> ItemTime:
    """:class:`ItemTime` of item kind ``key`` on a rank whose chunks are ``chunks`` (each a tuple
    of :class:`LayerTimes` whose fields are numbers or arrays over plans); ``probe``: their
    :func:`_probe`, when the caller has it."""
    g = item_graph(key, probe if probe is not None else _probe(chunks), delay_wgrad, pair_overlap)
    cols = [getattr(chunks[c][j], f) for c, j, f in g.variables]
    n = max(map(np.size, cols), default=1)
    values = np.empty((n, len(cols)))
    for i, x in enumerate(cols):  # broadcast by the assignment: one call per variable, not three
        values[:, i] = x
    fin = longest_paths(g, values)
    dur = durations(g, values)
    out = {name: fin[:, tasks].max(axis=1) for name, tasks in g.marks.items()}
    return ItemTime(fin[:, :-1].max(axis=1), out, dur[:, g.compute].sum(axis=1), dur[:, g.a2a].sum(axis=1))


# ---------------------------------------------------------------------------------------------
# The pipeline: one task per item.
# ---------------------------------------------------------------------------------------------
class Coarse(_Builder):
    """The walk's builder with each item one task on the compute stream, its duration the
    variable ``('d', rank, item kind)``, and each op's output a task of its own that ends the
    variable ``('o', rank, item kind, output)`` after the item's start (what the item alone
    says). Sends, receives, posts and commits are the walk's own."""

    def op(self, rank: int, op, join: bool = True) -> None:
        key = item_key(op)
        deps = self.inputs(rank, op) + self.tasks.issue_point(rank)
        body = self.tasks.add(rank, COMPUTE, Lin.var(("d", rank, key), 1.0), deps, op.kind, op)
        self.produced(rank, op, [body])

    def pair(self, rank: int, item: Pair) -> None:
        if not self.times.pair_overlap:
            self.op(rank, item.fwd)
            self.op(rank, item.bwd)
            return
        if not self.times.p2p_overlap:
            raise ValueError("the coarse walk sends after a pair's last task; blocking sends start at its compute's end")
        key = item_key(item)
        deps = self.inputs(rank, item.fwd) + self.inputs(rank, item.bwd) + self.tasks.issue_point(rank)
        start = self.tasks.add(rank, COMPUTE, 0.0, deps, "start")
        outs = [(op, self.tasks.add(rank, f"out:{len(self.tasks.dur)}", Lin.var(("o", rank, key, name), 1.0),
                                    [start], "out"))
                for name, op in (("F", item.fwd), (item.bwd.kind, item.bwd))]
        self.tasks.add(rank, COMPUTE, Lin.var(("d", rank, key), 1.0), [start], "F&B", item.bwd)
        for op, t in outs:
            self.produced(rank, op, [t])


class _Direct:
    """:class:`Coarse`'s tasks straight into lists, for schedules whose items wait only for their
    inputs (no posted transfers) and whose sends leave the compute stream. Each rank's next item is
    issued once its inputs are made (:func:`direct_graph`), so every task's predecessors exist as
    it is added: task ids are a topological order and depths are known at once, with no sort
    afterwards. A duration is one variable or none (no :class:`Lin`)."""

    def __init__(self, place: Placement, p2p: bool):
        self.place, self.p2p = place, p2p
        self.made: dict[tuple, int] = {}
        """Output key -> the task that makes it (Tasks.outputs; one task each here)."""
        self.last: dict[tuple, int] = {}
        """(rank, stream) -> its latest task."""
        self.waits: list[tuple[int, ...]] = []
        """Graph.waits: each task's predecessors, then the sentinel -1."""
        self.depth: list[int] = []
        self.rank: list[int] = []
        self.var: list = []
        self.compute: list[bool] = []

    def add(self, rank: int, stream, var, preds: list[int], compute: bool) -> int:
        """Tasks.add with graph_of's predecessors: ``preds``, then the stream's previous task
        (``stream`` None: a stream of its own, as each output of a pair has)."""
        t = len(self.depth)
        if stream is not None:
            key = (rank, stream)
            last = self.last.get(key)
            if last is not None:
                preds.append(last)
            self.last[key] = t
        depth = self.depth
        depth.append(1 + max(map(depth.__getitem__, preds)) if preds else 0)
        self.waits.append((*preds, -1))
        self.rank.append(rank)
        self.var.append(var)
        self.compute.append(compute)
        return t

    def inputs(self, rank: int, item) -> list[int] | None:
        """The tasks that make the item's inputs; None while one is not made."""
        out = []
        for op in (item.fwd, item.bwd) if isinstance(item, Pair) else (item,):
            for key in op_inputs(self.place, rank, op):
                t = self.made.get(key)
                if t is None:
                    return None
                out.append(t)
        return out

    def issue(self, rank: int, item, deps: list[int]) -> None:
        """Coarse.op or Coarse.pair (overlapped): after the inputs ``deps`` and the rank's compute
        stream up to here (Tasks.issue_point)."""
        at = self.last.get((rank, COMPUTE))
        deps = deps if at is None else [*deps, at]
        key = item_key(item)
        if not isinstance(item, Pair):
            self.produced(rank, item, self.add(rank, COMPUTE, ("d", rank, key), deps, True))
            return
        start = self.add(rank, COMPUTE, None, deps, True)
        f = self.add(rank, None, ("o", rank, key, "F"), [start], False)
        b = self.add(rank, None, ("o", rank, key, item.bwd.kind), [start], False)
        self.add(rank, COMPUTE, ("d", rank, key), [start], True)
        self.produced(rank, item.fwd, f)
        self.produced(rank, item.bwd, b)

    def produced(self, rank: int, op, done: int) -> None:
        """_Builder.produced and hand_over: a send task on the stream to the peer when sends take
        time."""
        for key, dst in op_outputs(self.place, rank, op):
            if dst is None or dst == rank or not self.p2p:
                self.made[key] = done
            else:
                self.made[key] = self.add(rank, ("p2p", dst), ("p2p",), [done], False)

    def graph(self) -> Graph:
        n = len(self.depth)
        names: dict = {}
        cols = [t for t, v in enumerate(self.var) if v is not None]
        rows = [names.setdefault(self.var[t], len(names)) for t in cols]
        terms = (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.ones(len(cols)))
        return Graph(tuple(names), terms, np.zeros(n), tuple(self.waits), list(range(n)), np.array(self.depth, dtype=np.int64),
                     np.array(self.rank, dtype=np.int64), np.array(self.compute, dtype=bool), np.zeros(n, dtype=bool), {})


def direct_graph(items_per_rank, place: Placement, pair_overlap: bool, p2p: bool) -> Graph:
    """The graph :func:`coarse_graph` builds with :class:`Coarse` (sends off the compute stream, no
    posted transfers), through :class:`_Direct`: the same tasks, each rank's and each stream's in
    the same order, numbered so that every task comes after what it waits for."""
    bld = _Direct(place, p2p)
    # A pair that does not overlap is its forward then its backward (Coarse.pair).
    todo = [[x for item in items for x in ((item.fwd, item.bwd) if isinstance(item, Pair) and not pair_overlap
                                          else (item,))]
            for items in items_per_rank]
    at = [0] * len(todo)
    moved = True
    while moved:  # the ranks in turn, each as far as its inputs allow
        moved = False
        for r, items in enumerate(todo):
            i = at[r]
            while i < len(items) and (deps := bld.inputs(r, items[i])) is not None:
                bld.issue(r, items[i], deps)
                i += 1
            moved, at[r] = moved or i > at[r], i
    left = sum(len(items) - i for items, i in zip(todo, at))
    if left:
        raise ValueError(f"the schedule deadlocks: {left} items never start")
    return bld.graph()


@lru_cache(maxsize=256)
def coarse_graph(sched: Schedule, p: int, v: int, m: int, pair_overlap: bool, p2p: bool, p2p_overlap: bool = True) -> Graph:
    """The one-task-per-item graph of a step under ``sched`` (``p2p``: whether sends take
    time, the variable ``('p2p',)``)."""
    items = [rank_items(sched, p, v, m, r) for r in range(p)]
    times = StepTimes((), p2p=Lin.var(("p2p",), 1.0) if p2p else 0.0, p2p_overlap=p2p_overlap,
                      pair_overlap=pair_overlap)
    place = placement(sched, p, v, m)
    # The build makes some ten tuples per task and frees none of them: the garbage collector's
    # passes over them (each generation-0 overflow, the older generations as they fill) cost
    # about a third of the build, for cycles it cannot have.
    enabled = gc.isenabled()
    gc.disable()
    try:
        if p2p_overlap and not any(isinstance(i, (Post, Commit)) for r in items for i in r):
            return direct_graph(items, place, pair_overlap, p2p)
        return graph_of(build(items, place, times, Coarse))
    finally:
        if enabled:
            gc.enable()


@lru_cache(maxsize=1024)
def item_counts(sched: Schedule, p: int, v: int, m: int, rank: int, pair_overlap: bool) -> dict:
    """How many items of each kind rank ``rank`` runs in one step."""
    out: dict = {}
    for item in rank_items(sched, p, v, m, rank):
        parts = [item] if isinstance(item, Pair) and pair_overlap else ops_of(item)
        for x in parts:
            k = item_key(x)
            out[k] = out.get(k, 0) + 1
    return out


@dataclass(frozen=True)
class StepResult:
    """The walked forward/backward phase of many plans (arrays over plans)."""

    step: np.ndarray
    busy: tuple[np.ndarray, ...]
    """Per rank: the seconds its items take (compute, exposed all-to-all, interference)."""
    compute: tuple[np.ndarray, ...]
    a2a_exposed: tuple[np.ndarray, ...]
    a2a_hidden: tuple[np.ndarray, ...]

    @property
    def bubble(self) -> tuple[np.ndarray, ...]:
        """Per rank: the step less its items (waiting for other ranks, and for sends)."""
        return tuple(self.step - b for b in self.busy)


def _items(sched, p, v, m, chunks, delay_wgrad, pair_overlap) -> list[dict]:
    """Per rank, the :class:`ItemTime` of every item kind it runs."""
    return item_times(sched, p, v, (m,), chunks, delay_wgrad, pair_overlap)


def item_times(sched, p, v, ms, chunks, delay_wgrad, pair_overlap) -> list[dict]:
    """Per rank, the :class:`ItemTime` of every item kind it runs with any of the micro-batch
    counts ``ms`` (an item's timing does not depend on m). An item reads only the chunks it runs
    (:func:`local_item`): items whose chunks hold equal layer times, on any rank, share one
    timing."""
    seen: dict = {}
    out = []
    for r in range(p):
        kinds = dict.fromkeys(k for m in ms for k in item_counts(sched, p, v, m, r, pair_overlap))
        prints = [_fingerprint(ch) for ch in chunks[r]]
        one = [_one_plan(fp) for fp in prints]
        probe = None
        per = {}
        for k in kinds:
            local, used = local_item(k)
            key = (local, tuple(prints[c] for c in used), delay_wgrad, pair_overlap)
            if key not in seen:
                # One plan's items (the search walks its ranked plans one by one) are kept across
                # walks: plans of other layouts, micro-batch counts or memory levers often hold
                # chunks of equal layer times (222 of the default command's 659 item walks).
                shared = all(one[c] for c in used)
                hit = _ONE_PLAN_ITEMS.get(key) if shared else None
                if hit is None:
                    probe = _probe(chunks[r]) if probe is None else probe
                    hit = item_time(local, tuple(chunks[r][c] for c in used), delay_wgrad, pair_overlap,
                                    tuple(probe[c] for c in used))
                    if shared:
                        if len(_ONE_PLAN_ITEMS) >= ONE_PLAN_ITEMS_MAX:
                            _ONE_PLAN_ITEMS.clear()
                        _ONE_PLAN_ITEMS[key] = hit
                seen[key] = hit
            per[k] = seen[key]
        out.append(per)
    return out


_ONE_PLAN_ITEMS: dict = {}
"""(local item kind, its chunks' fingerprints, delay_wgrad, pair_overlap) -> ItemTime of one plan
(arrays of one value: read, never written, by the step's walk and totals)."""

ONE_PLAN_ITEMS_MAX = 4096
"""Entries :data:`_ONE_PLAN_ITEMS` holds before it starts over (one ItemTime of one plan is a few
hundred bytes)."""


def _one_plan(fingerprint: tuple) -> bool:
    """Whether a chunk's :func:`_fingerprint` holds numbers of at most one plan."""
    return all(shape in ((), (1,)) for layer in fingerprint for shape, _ in layer)


def local_item(key: tuple) -> tuple[tuple, tuple[int, ...]]:
    """An item kind with its chunks renumbered 0, 1 in the order it reads them, and those chunks:
    an item's graph reads its own chunks' layers only (:func:`item_graph`), so equal layers give
    equal timings whichever chunks hold them."""
    used = tuple(dict.fromkeys((key[1], key[3]) if key[0] == "pair" else (key[2],)))
    at = {c: i for i, c in enumerate(used)}
    local = ("pair", at[key[1]], key[2], at[key[3]]) if key[0] == "pair" else ("op", key[1], at[key[2]])
    return local, used


def _fingerprint(layers) -> tuple:
    """A chunk's layer times as a hashable value (fields' numbers, arrays by their bytes)."""
    def one(x):
        a = np.asarray(x, dtype=float)
        return (a.shape, a.tobytes())

    return tuple(tuple(one(getattr(lt, f.name)) for f in dataclasses.fields(LayerTimes)) for lt in layers)


def slice_items(items: list[dict], idx) -> list[dict]:
    """The items of some plans (an index array) of :func:`item_times`'s result."""
    def cut(x):
        x = np.asarray(x)
        return x[idx] if x.ndim and x.size > 1 else x

    memo: dict = {}
    out = []
    for per in items:
        row = {}
        for k, it in per.items():
            if id(it) not in memo:
                memo[id(it)] = ItemTime(cut(it.dur), {n: cut(o) for n, o in it.out.items()}, cut(it.compute), cut(it.a2a))
            row[k] = memo[id(it)]
        out.append(row)
    return out


def _result(step, sched, p, v, m, items, pair_overlap, interference, n) -> StepResult:
    per_rank = [_rank_totals(items[r], item_counts(sched, p, v, m, r, pair_overlap), interference, n) for r in range(p)]
    busy, compute, exposed, hidden = (tuple(x) for x in zip(*per_rank))
    return StepResult(np.broadcast_to(step, (n,)), busy, compute, exposed, hidden)


def _rank_totals(per: dict, counts: dict, interference, n: int) -> tuple:
    """A rank's (busy, compute, exposed, hidden) seconds: each item kind's ItemTime terms times its
    count, summed in ``counts``' order. The kinds are stacked (one numpy call per term, not one per
    kind and term); a cumulative sum adds row after row as Python's sum did, from 0 (np.sum's
    pairwise order would change the last digits)."""
    if not counts:
        return 0, 0, 0, 0
    dur, comp, a2a = (np.empty((len(counts), n)) for _ in range(3))
    for i, k in enumerate(counts):
        it = per[k]
        dur[i], comp[i], a2a[i] = it.dur, it.compute, it.a2a
    exposed = dur - comp  # ItemTime.exposed, .hidden, elementwise as there
    hidden = a2a - exposed
    c = np.array(list(counts.values()))[:, None]

    def total(x):
        return np.cumsum(np.concatenate([np.zeros((1, n)), c * x]), axis=0)[-1]

    return total(dur + interference * hidden), total(comp), total(exposed), total(hidden)


def pipeline_step(sched: Schedule, p: int, v: int, m: int, chunks, p2p, *, delay_wgrad: bool = False,
                  pair_overlap: bool = True, interference: float = 0.0, items=None) -> StepResult:
    """Walk ``sched`` for every plan at once: ``chunks[r][c]`` the layers of rank r's chunk
    c (LayerTimes with array fields), ``p2p`` one send's seconds (array or number). Each item's
    hidden all-to-all slows it by ``interference`` of those seconds (communication kernels take
    SMs and HBM bandwidth from the compute they hide behind)."""
    p2p = np.asarray(p2p, dtype=float)
    g = coarse_graph(sched, p, v, m, pair_overlap, bool(np.any(p2p > 0.0)))
    items = _items(sched, p, v, m, chunks, delay_wgrad, pair_overlap) if items is None else items
    n = max([np.size(p2p)] + [np.size(it.dur) for per in items for it in per.values()])
    step = longest_paths(g, _coarse_values(g, items, p2p, interference, n))[:, :-1].max(axis=1)
    return _result(step, sched, p, v, m, items, pair_overlap, interference, n)


def _coarse_values(g: Graph, items: list[dict], p2p: np.ndarray, interference: float, n: int) -> np.ndarray:
    """(plans x variables) of a coarse graph: an item's duration (its hidden all-to-all slowing
    it), the offsets of its outputs, a send's seconds."""
    values = np.empty((n, len(g.variables)))
    busy: dict[int, np.ndarray] = {}  # items of equal chunks share one ItemTime (item_times)
    for i, var in enumerate(g.variables):  # broadcast by the assignment
        if var[0] == "p2p":
            values[:, i] = p2p
            continue
        it = items[var[1]][var[2]]
        if var[0] == "o":
            values[:, i] = it.out[var[3]]
        else:
            if id(it) not in busy:
                busy[id(it)] = it.dur + interference * it.hidden
            values[:, i] = busy[id(it)]
    return values


def pipeline_estimate(sched: Schedule, p: int, v: int, m: int, chunks, p2p, *, delay_wgrad: bool = False,
                      pair_overlap: bool = True, interference: float = 0.0, items=None) -> StepResult:
    """The step of :func:`pipeline_step` from closed forms over the same items, for the search's
    tables (a walk per plan there would cost minutes): the busiest rank's items plus the bubble
    of the schedule's paper on stages averaged over the ranks, the fill and drain passing each
    boundary twice. Exact on uniform stages for combined 1F1B (its bubble, with the last rank's
    lone warm-up forwards and cool-down backwards: max over q of rank q's items plus the first
    forward and last backward of the ranks before it) and ZB-H1 ((p-1) max(F + I - W, F, I),
    Qi et al. 2023; torch's interleaved order alike per chunk); for ZB-V and DualPipe(V) an
    approximation (the ZB-H1 form, and the DualPipe README's (PP/2-1)(F&B + B - 3W)); tests bound
    each against the walk."""
    p2p = np.asarray(p2p, dtype=float)
    items = _items(sched, p, v, m, chunks, delay_wgrad, pair_overlap) if items is None else items
    n = max([np.size(p2p)] + [np.size(it.dur) for per in items for it in per.values()])
    res = _result(0.0, sched, p, v, m, items, pair_overlap, interference, n)
    busy = np.stack(res.busy)
    d = lambda r, k: items[r][k].dur + interference * items[r][k].hidden  # noqa: E731
    op = lambda kind, r: np.mean([d(r, k) for k in items[r] if k[:2] == ("op", kind)], axis=0)  # noqa: E731
    mean = lambda kind: np.mean([op(kind, r) for r in range(p)], axis=0)  # noqa: E731
    t = 2 * p2p
    if sched.bubble == "combined":
        fill = np.cumsum([np.zeros(n)] + [op("F", r) + op("B", r) + t for r in range(p - 1)], axis=0)
        return dataclasses.replace(res, step=(busy + fill).max(axis=0))
    bubble_of = BUBBLES[sched.bubble]
    step = busy.max(axis=0) + bubble_of(sched, p, mean, items, d, pair_overlap) + (p - 1) * t
    return dataclasses.replace(res, step=step)


def _zb_bubble(sched, p, mean, items, d, pair_overlap):
    f, i, w = mean("F"), mean("I"), mean("W")
    return (p - 1) * np.maximum(np.maximum(f + i - w, f), i)


def _dual_bubble(sched, p, mean, items, d, pair_overlap):
    stages = p if sched.placement == "dual" else 2 * p
    b, w = mean("B"), mean("W")
    if pair_overlap:
        fb = np.mean([np.mean([d(r, k) for k in items[r] if k[0] == "pair"], axis=0) for r in range(p)], axis=0)
    else:
        fb = mean("F") + b
    return (stages / 2 - 1) * np.maximum(fb + b - 3 * w, 0.0)


BUBBLES = {"zb": _zb_bubble, "dual": _dual_bubble}
"""The bubble closed form of each kind a schedule record names (planner.specs.schedule.BubbleKind;
Megatron's own and the combined 1F1B's fill are taken apart above)."""
