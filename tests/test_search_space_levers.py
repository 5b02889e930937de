"""The lever values the search tries for the recipes' 2026 optimizations (issue 39, "never lose to
the recipe"): ep_overlap=wgrad where the release has --delay-wgrad-compute, in place of ``on`` under
Megatron only while the cost model never credits it less than ``on``."""

from __future__ import annotations

import pytest

from planner.cost.evaluate import plan_evaluation
from planner.cost.setup import resolve_setup
from planner.search.space import Limits, build_space, ep_overlap_options
from planner.specs.catalog import load_hardware, load_model, load_software
from planner.specs.job import Job
from planner.specs.plan import EpOverlap
from planner.validate import PUBLISHED_RUNS
from planner.validate.evaluate import resolve_run
from planner.validate.runs import load_runs

OFF, ON, WGRAD = EpOverlap.OFF, EpOverlap.ON, EpOverlap.WGRAD


def _overlap(software: str | None, target: str = "megatron", fix: str | None = None) -> tuple:
    job = Job(gpus=64, global_batch=512, seq_len=4096, precisions=["bf16"])
    space = build_space(load_model("qwen3-30b-a3b"), load_hardware("gb200-nvl72"), job, target=target,  # type: ignore[arg-type]
                        limits=Limits.parse(fix, None), software=None if software is None else load_software(software))
    return space.levers["ep_overlap"]


def test_wgrad_replaces_on_under_megatron_where_the_release_has_it():
    assert _overlap("megatron-core-0.19") == (OFF, WGRAD)
    assert _overlap(None) == (OFF, WGRAD)
    # Megatron-Core 0.13 has neither (both came in 0.14); a release with the overlap only keeps on.
    assert _overlap("megatron-core-0.13") == (OFF,)
    assert ep_overlap_options((OFF, ON), "megatron") == (OFF, ON)
    # A user's --fix is kept as given.
    assert _overlap("megatron-core-0.19", fix="ep_overlap=on") == (ON,)


def test_wgrad_sits_beside_on_where_another_schedule_needs_on():
    # --target any also ranks DualPipe, which runs the overlap without delayed weight gradients.
    assert ep_overlap_options((OFF, ON, WGRAD), "any") == (OFF, ON, WGRAD)
    assert ep_overlap_options((OFF, ON, WGRAD), "torchtitan") == (OFF, ON)
    assert ep_overlap_options((OFF,), "megatron") == (OFF,)


_RUNS = ("mb2608-qwen3-235b-a22b-gb300-fp8mx-256gpu", "zoo-qwen3-235b-h100-256gpu-bf16-a2a-intranode-ep8-pp32",
         "mb2606-gpt-oss-120b-gb300-fp8mx-64gpu")


@pytest.mark.parametrize("name", _RUNS)
def test_the_model_never_credits_wgrad_less_than_on(name):
    """The premise of trying wgrad in place of on (planner.search.space.ep_overlap_options): the
    same memory, a step no longer. If a change to the EP-overlap terms breaks it, the search must
    try both values again."""
    run = next(r for r in load_runs(PUBLISHED_RUNS) if r.name == name)
    model, hw, job, plan, assumptions, _ = resolve_run(run)
    out = {}
    for value in (ON, WGRAD):
        ev = plan_evaluation(resolve_setup(model, hw, job, plan.replace(ep_overlap=value), assumptions))
        out[value] = ev["time"]["step_time_s"], ev["memory"]["peak_bytes"]
    assert out[WGRAD][1] == out[ON][1]
    assert out[WGRAD][0] <= out[ON][0] * (1 + 1e-9)
    if name.startswith("mb2608-qwen3"):  # where the walk overlaps the dispatch, wgrad pays
        assert out[WGRAD][0] < out[ON][0] * 0.99
