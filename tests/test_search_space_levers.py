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
from planner.validate.evaluate import resolve_run
from tests._published import published_runs

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
    run = next(r for r in published_runs() if r.name == name)
    model, hw, job, plan, assumptions, _ = resolve_run(run)
    out = {}
    for value in (ON, WGRAD):
        ev = plan_evaluation(resolve_setup(model, hw, job, plan.replace(ep_overlap=value), assumptions))
        out[value] = ev["time"]["step_time_s"], ev["memory"]["peak_bytes"]
    assert out[WGRAD][1] == out[ON][1]
    assert out[WGRAD][0] <= out[ON][0] * (1 + 1e-9)
    if name.startswith("mb2608-qwen3"):  # where the walk overlaps the dispatch, wgrad pays
        assert out[WGRAD][0] < out[ON][0] * 0.99


def test_an_moe_full_iteration_export_writes_static_expert_shapes_and_reads_back():
    """Megatron captures a dropless MoE iteration only with static expert shapes: the export writes the
    rank capacity and paged stash the Bridge recipes set, and the read-back takes them as part of the
    plan's full_iteration (no flag left unmodeled)."""
    from planner.launchers.megatron.read import plan_from_megatron_args
    from planner.launchers.megatron.write import STATIC_MOE_ARGS, export_megatron
    from tests._export_specs import resolve

    *_, setup = resolve("qwen3-30b-a3b", "gb200-nvl72", 8, 256,
                        "ep=8,dispatcher=hybridep,ep_overlap=wgrad,cuda_graphs=full_iteration", seq_len=4096)
    text = export_megatron(setup)
    assert " ".join(STATIC_MOE_ARGS) in " ".join(text.split())
    back = plan_from_megatron_args(text)
    job, plan, hints, unknown = back
    assert unknown == [] and plan.to_string() == setup.plan.to_string()
    *_, dense = resolve("llama3.1-8b", "gb200-nvl72", 8, 64, "cuda_graphs=full_iteration", seq_len=4096)
    assert "--moe-paged-stash" not in export_megatron(dense)


def test_bridge_refuses_delayed_wgrad_with_graphed_biased_attention():
    from planner.launchers.bridge.rules import bridge_violations
    from planner.specs.plan import Plan

    gpt_oss, qwen = load_model("gpt-oss-120b"), load_model("qwen3-30b-a3b")
    graphed = Plan.parse("ep=8,dispatcher=hybridep,ep_overlap=wgrad,cuda_graphs=scoped:attn+moe_router+moe_preprocess")
    assert [v.rule for v in bridge_violations(gpt_oss, plan=graphed)] == ["bridge-wgrad-graph-bias"]
    assert bridge_violations(gpt_oss, plan=graphed.replace(ep_overlap=ON)) == []
    assert bridge_violations(qwen, plan=graphed) == []


def test_mla_up_proj_alone_is_searched_where_it_is_on_the_memory_step_front():
    """The 26.06 DeepSeek-V3 GB200 recipe recomputes the MLA up-projections alone: a candidate the
    search tries because no other candidate is both as fast and as small on that recipe's plan."""
    from planner.search.space import recompute_options
    from planner.specs.plan import parse_recompute

    v3 = load_model("deepseek-v3")
    opts = recompute_options(v3)
    assert "mla_up_proj" in opts and "mla_up_proj+mlp" not in opts
    assert "mla_up_proj" not in recompute_options(load_model("qwen3-30b-a3b"))  # no MLA
    run = next(r for r in published_runs() if r.name == "mb2606-deepseek-v3-gb200-fp8mx-256gpu")
    model, hw, job, plan, assumptions, _ = resolve_run(run)
    points = {}
    for text in opts:
        if text == "full":  # refused with the EP overlap (ep-overlap-recompute)
            continue
        ev = plan_evaluation(resolve_setup(model, hw, job, plan.replace(recompute=parse_recompute(text)), assumptions))
        points[text] = ev["time"]["step_time_s"], ev["memory"]["peak_bytes"]
    t, m = points["mla_up_proj"]
    assert not any(t2 <= t and m2 <= m for k, (t2, m2) in points.items() if k != "mla_up_proj")
