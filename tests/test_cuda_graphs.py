"""CUDA graphs read from a launch (issue 20 lever 1; docs/research/levers-2026.md section 1) and the
host-bound Transformer Engine MoE layer they remove: per MoE layer and pass the eager Python after
the dispatcher's host sync (ComputeEfficiency.te_moe_layer_host_s, fitted on the calibration subset
of the published runs), less with the router and dispatcher preprocessing captured, none with
full-iteration graphs."""

from __future__ import annotations

import pytest

from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.time import time_report
from planner.launchers.megatron.read import assumptions_from_flags
from planner.specs.job_input import resolve_job
from planner.specs.catalog import load_hardware, load_model
from planner.specs.plan import Plan


@pytest.mark.parametrize("values, expected", [
    ({}, {"cuda_graphs": "none"}),
    ({"cuda_graph_impl": "none", "cuda_graph_scope_deprecated": ["full"]}, {"cuda_graphs": "none"}),
    ({"cuda_graph_impl": "full_iteration"}, {"cuda_graphs": "full_iteration"}),
    ({"cuda_graph_impl": "local", "cuda_graph_scope_deprecated": ["full_iteration"]}, {"cuda_graphs": "full_iteration"}),
    ({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope_deprecated": ["attn", "moe_router", "moe_preprocess"]},
     {"cuda_graphs": "scoped", "cuda_graph_modules": ("attn", "moe_router", "moe_preprocess")}),
    ({"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["full"]}, {"cuda_graphs": "scoped", "cuda_graph_modules": ("layer",)}),
    ({"enable_cuda_graph": True}, {"cuda_graphs": "scoped", "cuda_graph_modules": ()}),
    ({"external_cuda_graph": True, "cuda_graph_modules": ["attn"]}, {"cuda_graphs": "scoped", "cuda_graph_modules": ("attn",)}),
])
def test_graphs_are_read_from_the_flags(values, expected):
    assert assumptions_from_flags(values) == expected


def _tokens(model: str, plan: str, **graphs) -> float:
    m, hw = load_model(model), load_hardware("gb200-nvl72")
    job = resolve_job(m, gpus=64, global_batch=512, seq_len=4096, precision="bf16")
    setup = resolve_setup(m, hw, job, Plan.parse(plan), Assumptions(**graphs))
    return time_report(setup).tokens_per_s_per_gpu


def test_graphs_speed_up_a_host_bound_moe_model_and_leave_a_dense_one():
    """GPT-OSS-120B (128 experts of width 2,880, 36 layers, EP64 on one GB200 rack) is host-bound
    eager: capturing router and preprocessing helps, full-iteration graphs help more; a dense 8B
    model's step is the GPU's either way."""
    plan = "ep=64,mbs=1,precision=bf16"
    eager = _tokens("gpt-oss-120b", plan)
    scoped = _tokens("gpt-oss-120b", plan, cuda_graphs="scoped", cuda_graph_modules=("attn", "moe_router", "moe_preprocess"))
    layer = _tokens("gpt-oss-120b", plan, cuda_graphs="scoped", cuda_graph_modules=("layer",))
    full = _tokens("gpt-oss-120b", plan, cuda_graphs="full_iteration")
    assert eager < scoped < full and layer == pytest.approx(full, rel=0.02)
    assert full / eager > 1.1
    dense = "tp=1,mbs=1,precision=bf16"
    assert _tokens("llama3.1-8b", dense) == pytest.approx(_tokens("llama3.1-8b", dense, cuda_graphs="full_iteration"), rel=0.01)


def test_published_runs_are_evaluated_with_their_graphs():
    from planner.validate.evaluate import resolve_run
    from tests._published import published_runs

    seen = set()
    for r in published_runs():
        if r.not_evaluable or not r.megatron_args:
            continue
        a = resolve_run(r)[4]
        if "--cuda-graph-impl full_iteration" in r.megatron_args:
            assert a.cuda_graphs == "full_iteration", r.name
        if "--cuda-graph-impl none" in r.megatron_args:
            assert a.cuda_graphs == "none", r.name
        seen.add(a.cuda_graphs)
    assert seen == {"none", "scoped", "full_iteration"}
