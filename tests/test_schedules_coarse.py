"""The coarse walk's graph built directly (planner.cost.schedules.batch.direct_graph) against the
walk's own builder with the coarse items: the same finish times, task for task up to numbering."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cost.schedules import SCHEDULES, StepTimes, placement, rank_items
from planner.cost.schedules.batch import Coarse, direct_graph
from planner.cost.schedules.graph import Lin, graph_of, longest_paths
from planner.cost.schedules.ops import Commit, Post
from planner.cost.schedules.walk import build
from planner.specs.schedule import schedule_named as named

DIRECT = [s.name for s in SCHEDULES if not any(isinstance(i, (Post, Commit)) for i in rank_items(s, 4, 2, 8, 0))]


@pytest.mark.parametrize("name", DIRECT)
@pytest.mark.parametrize("pair_overlap,p2p", [(True, True), (True, False), (False, True)])
def test_direct_graph_walks_as_the_builder_does(name, pair_overlap, p2p):
    p, v, m = 4, 2, 8
    items = [rank_items(named(name), p, v, m, r) for r in range(p)]
    place = placement(named(name), p, v, m)
    times = StepTimes((), p2p=Lin.var(("p2p",), 1.0) if p2p else 0.0, pair_overlap=pair_overlap)
    ref = graph_of(build(items, place, times, Coarse))
    got = direct_graph(items, place, pair_overlap, p2p)
    assert sorted(got.variables) == sorted(ref.variables) and got.n == ref.n
    rng = np.random.default_rng(len(name))
    values = {var: x for var, x in zip(ref.variables, rng.uniform(0.1, 1.0, len(ref.variables)))}
    fin = {}
    for g in (ref, got):
        f = longest_paths(g, np.array([[values[var] for var in g.variables]]))[0, :-1]
        fin[g is got] = (np.sort(f), f.max(), np.sort(f[g.compute]), np.sort(g.depth))
    for a, b in zip(fin[False], fin[True]):
        assert np.array_equal(a, b)
