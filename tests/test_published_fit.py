"""Issue 41: published runs ran, so planner must predict that they fit (a run predicted out of
memory that ran is a silent wrong answer). Each run here is one a memory mechanism fixed."""

from __future__ import annotations

import pytest

from planner.validate.evaluate import evaluate_run

from tests._published import published_runs

# Layer-level CPU offload (--cpu-offloading-num-layers 40 on GB200, 20 on GB300): were predicted at 330 GiB.
RAN = ["mb2602-llama3-70b-gb200-fp8cs-64gpu-fsdp", "mb260401-llama3-70b-gb200-fp8cs-64gpu-fsdp",
       "mb2602-llama3-70b-gb300-fp8cs-64gpu-fsdp", "mb260401-llama3-70b-gb300-fp8cs-64gpu-fsdp"]


@pytest.fixture(scope="module")
def runs():
    return {r.name: r for r in published_runs()}


@pytest.mark.parametrize("name", RAN)
def test_the_run_is_predicted_to_fit(runs, name):
    res = evaluate_run(runs[name])
    assert res.status == "evaluated", res.reason
    assert res.predicted["fits"], f"{name}: {res.predicted['peak_reserved_gib']:.1f} GiB predicted"
