"""Ranking quality in `planner validate` (planner.validate.ranking): Kendall's tau-b against a
brute-force count of concordant, discordant and tied pairs, the series found from the runs, and the
'ordered right' share of the pairs more than 5 % apart. The bundled runs' numbers are asserted in
tests/test_published_runs.py (one evaluation)."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from planner.validate.evaluate import RunResult, evaluate_runs
from planner.validate.ranking import (Config, decisive_pairs, kendall_tau_b, ranking_json, ranking_series,
                                      tau_terms)
from planner.validate.runs import RunSpec


def brute_tau_b(x: list[float], y: list[float]) -> float | None:
    """Tau-b by its textbook definition: (C - D) / sqrt((n0 - n1)(n0 - n2)), n1 and n2 the pairs tied
    in x and in y, every pair classified one by one."""
    conc = disc = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        tied_x += dx == 0
        tied_y += dy == 0
        if dx * dy > 0:
            conc += 1
        elif dx * dy < 0:
            disc += 1
    n0 = len(x) * (len(x) - 1) // 2
    den = (n0 - tied_x) * (n0 - tied_y)
    return None if den == 0 else (conc - disc) / math.sqrt(den)


@pytest.mark.parametrize("seed", range(40))
def test_tau_b_equals_the_brute_force_pair_count(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 12)
    # few distinct values, so that ties in x, in y and in both occur
    x = [float(rng.randint(0, 4)) for _ in range(n)]
    y = [float(rng.randint(0, 4)) for _ in range(n)]
    want = brute_tau_b(x, y)
    got = kendall_tau_b(x, y)
    assert (got is None) == (want is None)
    if want is not None:
        assert got == pytest.approx(want, abs=1e-12)


def test_tau_b_known_values():
    assert kendall_tau_b([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau_b([1, 2, 3, 4], [40, 30, 20, 10]) == -1.0
    # one discordant pair of six, no ties: (5 - 1) / 6
    assert kendall_tau_b([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(4 / 6)
    # a tie in y: C = 2, D = 0, n0 = 3, ties in y 1: 2 / sqrt(3 * 2)
    assert kendall_tau_b([1, 2, 3], [1, 1, 2]) == pytest.approx(2 / math.sqrt(6))
    assert kendall_tau_b([1, 2, 3], [5, 5, 5]) is None


def test_pooled_terms_are_tau_b_over_the_pairs_within_each_sample():
    a, b = ([1, 2, 3], [1, 3, 2]), ([1, 2, 2, 5], [4, 3, 1, 1])
    pooled = (tau_terms(*a) + tau_terms(*b)).tau_b
    pairs = [(p, q) for xs, ys in (a, b) for p, q in itertools.combinations(zip(xs, ys), 2)]
    conc = sum((p[0] - q[0]) * (p[1] - q[1]) > 0 for p, q in pairs)
    disc = sum((p[0] - q[0]) * (p[1] - q[1]) < 0 for p, q in pairs)
    untied_x = sum(p[0] != q[0] for p, q in pairs)
    untied_y = sum(p[1] != q[1] for p, q in pairs)
    assert pooled == pytest.approx((conc - disc) / math.sqrt(untied_x * untied_y))


def test_only_pairs_more_than_5_percent_apart_count_and_a_predicted_tie_is_not_an_order():
    cs = [Config("a", 100.0, 10.0), Config("b", 104.0, 5.0), Config("c", 120.0, 10.0), Config("d", 200.0, 30.0)]
    dec = decisive_pairs(cs)
    # a-b is 4 % apart: not counted, although planner orders it the other way
    assert {(p.faster.name, p.slower.name) for p in dec} == {("c", "a"), ("c", "b"), ("d", "a"), ("d", "b"),
                                                             ("d", "c")}
    assert {(p.faster.name, p.slower.name) for p in dec if not p.right} == {("c", "a")}


DENSE = {
    "name": "x", "source": {"where": "our cluster"}, "confidence": "H", "hardware": "h100", "model": "llama3.1-8b",
    "gpus": 8, "global_batch": 64, "seq_len": 8192, "precision": "bf16", "plan": "tp=1,pp=1,mbs=1,recompute=full",
    "measured": {"tokens_per_s_per_gpu": 5000},
}


def _fake(name: str, plan: str, measured: float, predicted: float, **job) -> RunResult:
    """A result as evaluate_runs leaves it, without the cost model: the signature stands for the inputs."""
    run = RunSpec.model_validate(dict(DENSE, name=name, plan=plan, **job))
    return RunResult(name, "evaluated", None, run, moe=False, generation="Hopper", plan=plan,
                     signature=(plan, tuple(sorted(job.items()))),
                     predicted={"tokens_per_s_per_gpu": predicted}, measured={"tokens_per_s_per_gpu": measured})


def test_series_are_found_by_the_job_and_equal_inputs_vote_once_as_the_newest():
    results = [
        _fake("a-old", "tp=1", 900, 1000), _fake("b", "tp=2", 1200, 900), _fake("a-new", "tp=1", 1000, 1000),
        _fake("other-batch", "tp=4", 10, 10, global_batch=128),  # another job, alone: no series
        _fake("lone-1", "tp=1", 5, 5, gpus=16), _fake("lone-2", "tp=1", 6, 5, gpus=16),  # one configuration
    ]
    (s,) = ranking_series(results)
    assert [(c.name, c.same_inputs) for c in s.configs] == [("a-new", ("a-old",)), ("b", ())]
    out = ranking_json(results)
    assert out["overall"] == {"series": 1, "configurations": 2, "pairs": 1, "decisive_pairs": 1, "ordered_right": 0,
                              "ordered_right_share": 0.0, "kendall_tau_b": -1.0}
    assert out["series"][0]["misordered"] == [{"faster_measured": "b", "slower_measured": "a-new",
                                               "measured_ratio": 1.2, "predicted_ratio": 0.9}]


def test_no_series_reports_no_share():
    out = ranking_json([_fake("a", "tp=1", 900, 1000)])
    assert out["series"] == [] and out["overall"]["ordered_right_share"] is None
    assert out["overall"]["kendall_tau_b"] is None


def test_validate_prints_the_ranking_in_every_output(tmp_path, capsys):
    import yaml

    from planner.cli import main

    runs = [dict(DENSE, name="full"), dict(DENSE, name="sel", plan="tp=1,pp=1,mbs=1,recompute=core_attn",
                                           measured={"tokens_per_s_per_gpu": 6000})]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": runs}))
    assert main(["validate", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rk = report["ranking"]
    assert rk["overall"]["series"] == 1 and rk["overall"]["decisive_pairs"] == 1
    # whether planner orders these two as measured is the cost model's business; the count follows it
    by = {r.name: r for r in evaluate_runs([RunSpec.model_validate(r) for r in runs])}
    right = by["sel"].predicted["tokens_per_s_per_gpu"] > by["full"].predicted["tokens_per_s_per_gpu"]
    assert rk["overall"]["ordered_right"] == int(right)
    assert main(["validate", str(path), "--markdown"]) == 0
    md = capsys.readouterr().out
    assert "## Ranking" in md and "| llama3.1-8b, 8 x h100, 64 x 8192 | 2 | 1 |" in md
    assert main(["validate", str(path)]) == 0
    assert "ranking (1 series" in capsys.readouterr().out
