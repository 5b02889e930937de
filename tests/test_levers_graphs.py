"""CUDA graphs as a plan key and a searched lever (issue 39, part 2; docs/research/levers-2026.md
section 1): parsed and canonical, taken from the assumptions a launch states, searched within the
release's profile and Megatron's rules, priced by the host-time model (captured kernels issue no
host work) and by the static buffers of the captured scopes (an estimate, per micro-batch in flight)."""

from __future__ import annotations

import pytest

from planner.cost.compose import costs_of
from planner.cost.setup import Assumptions, resolve_setup
from planner.search.driver import Options, run_search
from planner.search.space import Limits
from planner.specs.catalog import load_hardware, load_model, load_software
from planner.specs.job import Job
from planner.specs.plan import CudaGraphs, Plan


@pytest.mark.parametrize("text, canonical", [
    ("none", "none"), ("full_iteration", "full_iteration"), ("layer", "scoped:layer"), ("scoped:layer", "scoped:layer"),
    ("moe_preprocess+attn+moe_router", "scoped:attn+moe_router+moe_preprocess"),
    ("scoped-te:attn+moe_router+moe_preprocess", "scoped:attn+moe_router+moe_preprocess"),
])
def test_the_key_reads_to_its_canonical_form(text, canonical):
    assert str(Plan.parse(f"cuda_graphs={text}").cuda_graphs) == canonical
    assert "cuda_graphs" not in Plan.parse("tp=2").to_string()  # eager is the default, never written


def test_an_unknown_scope_is_refused():
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match="cuda_graphs"):
        Plan.parse("cuda_graphs=scoped:router")


def _search(name: str, job: Job, fix: str, **kw):
    return run_search(load_model(name), load_hardware("h100"), job,
                      Options(top=2, per_stage=False, limits=Limits.parse(fix, "pp=2"), **kw))


def test_graphs_are_searched_and_win_where_the_host_bounds_the_step():
    """Small kernels (TP8, 1K tokens) leave a dense step host-bound: graphs of whole layers (per
    layer, or the full iteration, whose only static buffers are the step's inputs) win; on an
    MoE model the TE layer's eager Python after the dispatcher's host sync goes with the router and
    preprocessing captured, or with the full iteration (static expert shapes, with hybridep: rule
    cuda-graphs-full-iteration-moe). Pinned eager, both are slower."""
    dense = Job(gpus=8, global_batch=8, seq_len=1024)
    best = _search("llama3.1-8b", dense, "tp=8,mbs=1").plans[0]
    eager = _search("llama3.1-8b", dense, "tp=8,mbs=1,cuda_graphs=none").plans[0]
    assert best.plan.cuda_graphs.layers_captured and best.objective_us < eager.objective_us
    moe = Job(gpus=8, global_batch=64, seq_len=2048)
    res = _search("qwen3-30b-a3b", moe, "ep=8,recompute=none")
    # H100: no full-iteration graph of gated dropless experts (no fused grouped MLP before SM100:
    # planner.rules.fused_grouped_experts_missing), so the space leaves it out
    assert res.space.scope["levers"]["cuda_graphs"] == ["none", "scoped:attn+moe_router+moe_preprocess"]
    eager = _search("qwen3-30b-a3b", moe, "ep=8,recompute=none,cuda_graphs=none").plans[0]
    scoped = _search("qwen3-30b-a3b", moe, "ep=8,recompute=none,cuda_graphs=scoped:attn+moe_router+moe_preprocess")
    assert scoped.plans[0].objective_us < eager.objective_us
    best = res.plans[0]
    assert best.plan.cuda_graphs != "none" and best.objective_us <= scoped.plans[0].objective_us


def test_the_space_offers_the_full_iteration_moe_graph_only_where_a_plan_can_run_it():
    """A value no plan of the space can launch is left out of it (its time only loosens every key's
    bound: Qwen3-235B on 256 H100s costed 79,367 keys with it, 60,071 without, same plans): Hopper
    with gated experts has no fused grouped MLP; Blackwell keeps it; a --fix keeps it, so that the
    launcher rule says why; torchtitan's rules are not Megatron's."""
    from planner.search.space import static_moe_graphs
    from planner.specs.plan import parse_cuda_graphs

    values = tuple(parse_cuda_graphs(g) for g in ("none", "scoped:attn+moe_router+moe_preprocess", "full_iteration"))
    qwen, h100, gb200 = load_model("qwen3-30b-a3b"), load_hardware("h100"), load_hardware("gb200-nvl72")
    assert [str(v) for v in static_moe_graphs(values, qwen, None, h100)] == ["none", "scoped:attn+moe_router+moe_preprocess"]
    assert static_moe_graphs(values, qwen, None, gb200) == values
    assert static_moe_graphs(values[2:], qwen, None, h100) == values[2:]
    assert static_moe_graphs(values, qwen, None, h100, "torchtitan") == values
    assert static_moe_graphs(values, load_model("llama3.1-8b"), None, h100) == values


def test_graphs_are_not_searched_where_the_release_or_the_rules_forbid():
    """torchtitan 0.3.0's profile has none of Megatron's graph implementations; Megatron refuses
    scoped graphs with full recompute (cuda-graphs-full-recompute), so a full-recompute search
    keeps those plans eager or captures the full iteration; a release without the static MoE
    shapes (megatron-core 0.17: no rank capacity, no paged stash) has no MoE full-iteration graph."""
    titan = load_software("torchtitan-0.3.0")
    res = _search("llama3.1-8b", Job(gpus=8, global_batch=8, seq_len=1024), "tp=8,mbs=1",
                  target="torchtitan", software=titan)
    assert res.space.scope["levers"]["cuda_graphs"] == ["none"]
    full = _search("qwen3-30b-a3b", Job(gpus=8, global_batch=64, seq_len=2048), "ep=8,recompute=full")
    assert all(p.plan.cuda_graphs in ("none", "full_iteration") for p in full.plans)
    older = _search("qwen3-30b-a3b", Job(gpus=8, global_batch=64, seq_len=2048), "ep=8",
                    software=load_software("megatron-core-0.17"))
    assert "full_iteration" not in older.space.scope["levers"]["cuda_graphs"]


def _pool(plan_text: str, gpus: int = 64) -> list[float]:
    m, h = load_model("llama3.1-70b"), load_hardware("h100")
    setup = resolve_setup(m, h, Job(gpus=gpus, global_batch=256, seq_len=4096), Plan.parse(plan_text))
    c = costs_of(setup)
    return [float(c.graph_pool(r) if not setup.plan.cuda_graphs else c.graph_pool(r)[0]) for r in range(setup.plan.pp)]


def test_graph_memory_grows_with_the_micro_batches_in_flight():
    """1F1B: rank r holds pp - r micro-batches at its peak, so with the same layers per rank the
    first rank's static buffers are pp times the last's; without graphs there are none; each
    captured layer holds 4 x tokens x hidden bf16 per slot (tokens split by TP under SP)."""
    pools = _pool("tp=8,pp=4,cuda_graphs=scoped:layer")
    assert pools == sorted(pools, reverse=True) and pools[0] == pytest.approx(4 * pools[-1])
    per_slot = 4 * 2 * 4096 * 8192 / 8
    assert pools[-1] == pytest.approx(20 * per_slot)  # 80 layers over 4 ranks, one micro-batch in flight
    assert _pool("tp=8,pp=4") == [0.0] * 4


def test_explain_shows_the_pool_and_the_peak_counts_it():
    from planner.cost.memory import memory_report

    m, h, j = load_model("llama3.1-70b"), load_hardware("h100"), Job(gpus=64, global_batch=256, seq_len=4096)
    eager = memory_report(resolve_setup(m, h, j, Plan.parse("tp=8,pp=4")))
    graphs = memory_report(resolve_setup(m, h, j, Plan.parse("tp=8,pp=4,cuda_graphs=scoped:layer")))
    line = {ln.kind: ln for ln in graphs.stages[0].comm_lines}["graph_pool"]
    assert line.each == pytest.approx(_pool("tp=8,pp=4,cuda_graphs=scoped:layer")[0]) and line.estimate
    assert graphs.stages[0].peak_bytes == pytest.approx(eager.stages[0].peak_bytes + line.each)


def test_graphs_the_assumptions_state_become_the_plan_key():
    """A launch read with graphs (Assumptions, as validate and explain --megatron-args set them)
    costs the same as the plan key saying it: the setup carries it as the key."""
    m, h, j = load_model("deepseek-v3"), load_hardware("gb200-nvl72"), Job(gpus=256, global_batch=8192, seq_len=4096)
    plan = Plan.parse("pp=4,vpp=4,ep=64,layout=Ettt|(tttt|)*13ttt|tttmL")
    via = resolve_setup(m, h, j, plan, Assumptions(cuda_graphs="scoped",
                                                   cuda_graph_modules=("attn", "moe_router", "moe_preprocess")))
    key = resolve_setup(m, h, j, plan.replace(cuda_graphs="scoped:attn+moe_router+moe_preprocess"))
    assert via.plan == key.plan and via.assumptions.cuda_graphs == "none"
    assert float(costs_of(via).step_s()[0]) == float(costs_of(key).step_s()[0])
    eager = resolve_setup(m, h, j, plan)
    assert float(costs_of(key).step_s()[0]) < float(costs_of(eager).step_s()[0])
    assert CudaGraphs() == "none"


def test_the_search_table_names_the_levers_off_their_defaults():
    from planner.report.tables import plan_levers

    plan = Plan.parse("moments=bf16,grad_reduce=bf16,precision=fp8,param_gather=fp8,"
                      "cuda_graphs=attn+moe_router+moe_preprocess").to_json()
    assert plan_levers(plan).split()[-4:] == ["m:bf16", "gr:bf16", "pg:fp8", "cg:scoped"]
    assert "cg:" not in plan_levers(Plan.parse("tp=2").to_json())
