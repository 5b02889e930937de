"""The walk of many plans at once (planner.cost.schedules.batch) against the walk itself: the same
step on random durations for every schedule (one task per item is exact because an item starts
where its rank's compute stream reached it and once its inputs arrived), the longest path equal
to the event simulation, and an item's duration its compute plus its exposed all-to-all."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cost.schedule import Op
from planner.cost.schedules import SCHEDULES, StepTimes, placement, walk
from planner.cost.schedules.batch import graph_of, item_time, longest_paths, pipeline_estimate, pipeline_step
from planner.cost.schedules.ops import Pair
from planner.cost.schedules.timing import LayerTimes
from planner.cost.schedules.walk import build, item_seconds, simulate
from planner.specs.schedule import schedule_named as named

SHAPES = {"1f1b": (4, 1, 8), "interleaved": (4, 2, 8), "combined-1f1b": (4, 2, 8), "zb-h1": (4, 2, 8),
          "zbv": (4, 2, 8), "dualpipe": (4, 2, 12), "dualpipev": (3, 2, 8)}


def _layers(rng, n: int, plans: int, a2a: bool = True):
    scale = (1.0, 1.0, 0.5, 1.5, 1.5, 0.7) + ((0.6,) * 4 if a2a else (0.0,) * 4)
    return tuple(LayerTimes(*(rng.uniform(0.2, 1.0, plans) * s for s in scale)) for _ in range(n))


def _plan(chunks, i: int):
    """Plan ``i``'s chunks with scalar fields."""
    return tuple(tuple(tuple(LayerTimes(*(float(getattr(lt, f)[i]) for f in LayerTimes.__dataclass_fields__))
                             for lt in c) for c in r) for r in chunks)


@pytest.mark.parametrize("name", [s.name for s in SCHEDULES])
@pytest.mark.parametrize("pair_overlap,delay", [(True, False), (True, True), (False, False)])
def test_one_task_per_item_walks_every_plan_as_the_walk_does(name, pair_overlap, delay):
    p, v, m = SHAPES[name]
    rng = np.random.default_rng(len(name) + 10 * pair_overlap + delay)
    n = 6
    chunks = tuple(tuple(_layers(rng, 2, n) for _ in range(named(name).chunks(v))) for _ in range(p))
    p2p = rng.uniform(0.0, 0.3, n)
    got = pipeline_step(named(name), p, v, m, chunks, p2p, delay_wgrad=delay, pair_overlap=pair_overlap)
    for i in range(n):
        ref = walk(named(name), p, v, m, StepTimes(_plan(chunks, i), p2p=float(p2p[i]), delay_wgrad=delay,
                                           pair_overlap=pair_overlap))
        assert got.step[i] == pytest.approx(ref.step, rel=1e-12)
        for r in range(p):  # the items' bubble is all waiting, for other ranks and for sends
            rt = ref.ranks[r]
            assert got.bubble[r][i] == pytest.approx(ref.step - rt.compute - rt.exposed.get("a2a", 0.0), abs=1e-9)
            assert got.compute[r][i] == pytest.approx(rt.compute, abs=1e-9)


def test_longest_paths_equal_the_event_simulation():
    rng = np.random.default_rng(3)
    name, p, v, m = "dualpipe", 4, 2, 12
    chunks = tuple(tuple(_layers(rng, 2, 1) for _ in range(2)) for _ in range(p))
    times = StepTimes(_plan(chunks, 0), p2p=0.1)
    from planner.cost.schedules import rank_items

    tasks = build([rank_items(named(name), p, v, m, r) for r in range(p)], placement(named(name), p, v, m), times)
    _, finish = simulate(tasks)
    fin = longest_paths(graph_of(tasks), np.zeros((1, 0)))
    assert fin[0, :-1] == pytest.approx(finish)


@pytest.mark.parametrize("item", [Op("F", 0, 0), Op("B", 1, 0), Op("I", 0, 0), Op("W", 1, 0),
                                  Pair(Op("F", 0, 0), Op("B", 1, 0)), Pair(Op("F", 1, 0), Op("I", 0, 0))])
def test_an_item_takes_its_compute_and_its_exposed_all_to_all(item):
    rng = np.random.default_rng(5)
    chunks = (_layers(rng, 3, 8), _layers(rng, 2, 8))
    key = ("pair", item.fwd.chunk, item.bwd.kind, item.bwd.chunk) if isinstance(item, Pair) else ("op", item.kind, item.chunk)
    it = item_time(key, chunks)
    for i in range(8):
        one = tuple(tuple(LayerTimes(*(float(getattr(lt, f)[i]) for f in LayerTimes.__dataclass_fields__)) for lt in c)
                    for c in chunks)
        assert it.dur[i] == pytest.approx(item_seconds(item, one))
    assert np.all(it.exposed >= -1e-12) and np.all(it.hidden >= -1e-12)
    assert np.all(it.compute + it.a2a >= it.dur - 1e-12)  # nothing but compute and all-to-all in an item


@pytest.mark.parametrize("name,p,v,m", [("combined-1f1b", 4, 2, 16), ("zb-h1", 4, 1, 16), ("zb-h1", 4, 2, 16)])
def test_the_tables_closed_forms_are_the_walk_on_uniform_stages(name, p, v, m):
    """Combined 1F1B: max over q of rank q's items plus the lone first forward and last backward of
    the ranks before it; ZB-H1 (torch's order, per chunk): (p-1) max(F + I - W, F, I)."""
    rng = np.random.default_rng(7)
    n = 32
    one = _layers(rng, 2, n)
    chunks = tuple(tuple(one for _ in range(named(name).chunks(v))) for _ in range(p))
    walked = pipeline_step(named(name), p, v, m, chunks, 0.0)
    closed = pipeline_estimate(named(name), p, v, m, chunks, 0.0)
    assert closed.step == pytest.approx(walked.step, rel=1e-9)


@pytest.mark.parametrize("name,p,v,m,bound", [("zbv", 4, 2, 16, 0.06), ("dualpipe", 8, 2, 32, 0.12),
                                              ("dualpipev", 4, 2, 16, 0.12), ("combined-1f1b", 8, 2, 32, 0.03)])
def test_the_tables_closed_forms_stay_near_the_walk(name, p, v, m, bound):
    """Where no closed form is exact (ZB-V, DualPipe(V)) or the stages differ (a heavier last rank,
    as the head and MTP make it), the tables' estimate stays within ``bound`` of the walk."""
    rng = np.random.default_rng(11)
    n = 64
    chunks = []
    for r in range(p):
        heavy = 1.6 if r == p - 1 else 1.0
        chunks.append(tuple(tuple(LayerTimes(*(np.asarray(getattr(lt, f)) * heavy for f in LayerTimes.__dataclass_fields__))
                                  for lt in _layers(rng, 2, n)) for _ in range(named(name).chunks(v))))
    p2p = rng.uniform(0.0, 0.05, n)
    walked = pipeline_step(named(name), p, v, m, chunks, p2p)
    closed = pipeline_estimate(named(name), p, v, m, chunks, p2p)
    err = np.abs(closed.step / walked.step - 1)
    assert err.max() <= bound, err.max()
