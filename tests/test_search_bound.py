"""The robust search's step-time bound (planner.search.driver._robust_bound, Options.max_step_us): a
bounded search returns exactly the unbounded search's plans at or under the bound, and the bound is the
first tie group's edge plus the estimate's slack."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.search.driver import ESTIMATE_SLACK, Options, _robust_bound, run_search
from planner.search.space import Limits
from planner.search.ties import job_resolution
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job

CASES = [
    ("llama3.1-8b", "h100", 8, 64, 4096, "pp=2"),
    ("mixtral-8x7b", "h100", 32, 128, 4096, "pp=4,cp=1,mbs=4"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[2]}")
def test_a_bounded_search_keeps_exactly_the_plans_under_its_bound(case):
    model, hw, gpus, gb, seq, maxes = case
    job = Job(gpus=gpus, global_batch=gb, seq_len=seq, precisions=["bf16"])
    opts = Options(top=12, limits=Limits.parse(None, maxes), per_stage=False)
    free = run_search(load_model(model), load_hardware(hw), job, opts)
    times = [p.objective_us for p in free.plans]
    bound = times[len(times) // 2]  # half of the plans are under it
    capped = run_search(load_model(model), load_hardware(hw), job, replace(opts, max_step_us=bound))
    want = [p.plan.to_string() for p in free.plans if p.objective_us <= bound]
    assert 0 < len(want) < len(times)
    assert [p.plan.to_string() for p in capped.plans] == want


def test_the_robust_bound_is_the_first_tie_groups_edge_with_the_estimates_slack():
    model, hw = load_model("mixtral-8x7b"), load_hardware("h100")
    job = Job(gpus=32, global_batch=128, seq_len=4096, precisions=["bf16"])
    plans = run_search(model, hw, job, Options(top=3, limits=Limits.parse(None, "pp=4,cp=1,mbs=4"),
                                               per_stage=False)).plans
    res = job_resolution(model, hw, "bf16").relative
    fastest = min(max(float(p.evaluation["time"]["step_time_s"]), p.objective_us / 1e6) for p in plans)
    assert _robust_bound(plans, model, hw, job) == pytest.approx(fastest * 1e6 * (1 + res) * (1 + ESTIMATE_SLACK),
                                                                 abs=1)
