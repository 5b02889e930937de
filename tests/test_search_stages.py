"""Search part 2: per-stage choices (uneven layouts, per-rank recompute) and sensitivity."""

from __future__ import annotations

import pytest

from planner.cost.memory import memory_report
from planner.cost.timeline import stage_timeline
from planner.search.driver import Options, run_search
from planner.search.space import Limits
from planner.search.stages import refine
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job

# moments and grad_reduce pinned to fp32: with the bf16 levers the even split fits on H100 too.
V3_FAMILY = ("tp=1,cp=1,pp=8,vpp=1,ep=32,etp=1,mbs=1,recompute=full,sharding=dist_opt,offload=none,precision=bf16,"
             "moments=fp32,grad_reduce=fp32")


def _v3_search(per_stage: bool, target: str = "megatron", hw: str = "gb200-nvl72"):
    job = Job(gpus=256, global_batch=4096, seq_len=4096)
    opts = Options(top=3, target=target, per_stage=per_stage, limits=Limits.parse(V3_FAMILY, None))
    return run_search(load_model("deepseek-v3"), load_hardware(hw), job, opts)


def test_an_uneven_layout_beats_every_uniform_one_for_deepseek_v3():
    """DeepSeek-V3 on 256 H100 with PP8/EP32 and full recompute: the first ranks hold the most
    in-flight micro-batches; moving layers off them lets the plan fit and balances time."""
    uniform = _v3_search(per_stage=False)
    staged = _v3_search(per_stage=True)
    best_uniform = uniform.plans[0].evaluation["time"]["step_time_s"]
    best = staged.plans[0]
    assert best.evaluation["time"]["step_time_s"] < best_uniform
    assert best.plan.layout != uniform.plans[0].plan.layout
    assert staged.solver["per_stage"]["improved"] >= 1


def test_per_stage_layouts_can_fit_where_no_uniform_split_does():
    """On 80 GB H100s no even split of this DeepSeek-V3 family fits; an uneven one does."""
    from planner.errors import NothingFitsError

    with pytest.raises(NothingFitsError):
        _v3_search(per_stage=False, hw="h100")
    staged = _v3_search(per_stage=True, hw="h100")
    assert staged.plans and memory_report(staged.plans[0].setup).fits
    assert staged.solver["status"] == "FEASIBLE"


@pytest.mark.parametrize("target", ["megatron", "any"])
def test_per_stage_plans_fit_under_the_timeline_and_are_never_slower(target):
    uniform = _v3_search(per_stage=False, target=target)
    staged = _v3_search(per_stage=True, target=target)
    assert staged.plans[0].evaluation["time"]["step_time_s"] <= uniform.plans[0].evaluation["time"]["step_time_s"]
    for p in staged.plans:
        rep = memory_report(p.setup)
        assert rep.fits
        for st in rep.stages:  # the memory model's own event walk agrees with the reported peak
            assert max(e.total for e in stage_timeline(p.setup, st.rank)) == pytest.approx(st.peak_bytes, rel=1e-9)


def test_per_rank_recompute_is_advisory_and_only_under_target_any():
    from tests._models import setup_for

    s = setup_for("deepseek-v3", "h100", "pp=8,ep=32,etp=1,mbs=1,recompute=full,layout=Etttttttt|(tttttttt|)*6tttttmL",
                  gpus=256, global_batch=8192, seq_len=4096)
    r = refine(s, stage_recompute=True)
    assert r.improved and r.setup.plan.stage_recompute is not None
    counts = r.setup.plan.stage_recompute
    assert len(set(counts)) > 1  # truly per stage: ranks recompute different numbers of layers
    assert memory_report(r.setup).fits
    megatron = _v3_search(per_stage=True, target="megatron")
    assert all(p.plan.stage_recompute is None for p in megatron.plans)


def test_sensitivity_names_for_each_perturbation_whether_the_winner_changes():
    from planner.search.sensitivity import sensitivity_report

    res = _v3_search(per_stage=False)
    rep = sensitivity_report(res, res.plans[0].setup.assumptions)
    names = [r["name"] for r in rep["perturbations"]]
    assert any("routing imbalance" in n for n in names)
    assert any("GEMM efficiency" in n for n in names) and any("network bandwidth" in n for n in names)
    for row in rep["perturbations"]:
        assert isinstance(row["winner_changes"], bool)
        assert row["winner_changes"] == (row["new_winner"] != rep["winner"])
    assert rep["summary"]


GATE_CASES = [  # (model, hardware, gpus, batch, seq, plan): pipelines of several depths and interleavings
    ("deepseek-v3", "gb200-nvl72", 256, 4096, 4096, "pp=8,ep=32,etp=1,recompute=full"),
    ("deepseek-v3", "gb200-nvl72", 256, 4096, 4096, "pp=4,vpp=15,ep=64,etp=1,sharding=zero2"),
    ("deepseek-v3", "gb200-nvl72", 256, 4096, 4096, "pp=4,vpp=2,ep=64,etp=1,recompute=moe_act"),
    ("llama3.1-70b", "h100", 64, 128, 4096, "tp=8,pp=4,vpp=5"),
    ("llama3.1-70b", "h100", 64, 128, 4096, "tp=8,pp=8,recompute=full"),
    ("gpt3-175b", "a100-80gb", 64, 256, 2048, "tp=8,pp=8,vpp=3"),
    ("qwen3-30b-a3b", "h100", 16, 128, 4096, "pp=4,vpp=3,ep=4,etp=1"),
]


@pytest.mark.parametrize("case", GATE_CASES, ids=lambda c: f"{c[0]}-{c[5]}")
def test_the_refinement_gate_never_skips_a_win(case, monkeypatch):
    """Where planner.search.bounds.refinement_can_win says the per-stage model cannot beat the
    plan's slowest rank, the ungated solver finds no faster layout either."""
    from planner.cost.setup import Assumptions, resolve_setup
    from planner.search import stages
    from planner.search.space import layouts_for
    from planner.specs.plan import Plan

    model, hw, gpus, gb, seq, plan = case
    m, p = load_model(model), Plan.parse(plan)
    layout = layouts_for(m, p.pp, p.vpp)  # the search's own layout for these degrees
    setup = resolve_setup(m, load_hardware(hw), Job(gpus=gpus, global_batch=gb, seq_len=seq),
                          p.replace(layout=layout) if layout else p, Assumptions())
    gated = refine(setup)
    monkeypatch.setattr(stages, "refinement_can_win", lambda *a, **k: True)  # the name refine() calls
    ungated = refine(setup)
    if gated.skipped:
        assert not ungated.improved, (plan, ungated.note)
    else:
        assert gated.improved == ungated.improved and gated.note == ungated.note


def _default_v3_plan(**changes):
    """The default search's leading DeepSeek-V3 plan on 256 GB200 (offloaded activations,
    interleaved PP2), with some keys changed."""
    from planner.cost.setup import Assumptions, resolve_setup
    from planner.specs.plan import Plan

    plan = Plan.parse("pp=2,vpp=16,ep=64,etp=1,mbs=2,sharding=zero2,recompute=moe_act,offload=activations,"
                      "precision=bf16,layout=Et|(tt|)*29t|tmL,dispatcher=hybridep,ep_overlap=on").replace(**changes)
    return resolve_setup(load_model("deepseek-v3"), load_hardware("gb200-nvl72"),
                         Job(gpus=256, global_batch=8192, seq_len=4096), plan, Assumptions())


def test_the_per_stage_memory_model_counts_offloaded_activations():
    """With activation offload only two held chunks stay on the GPU (planner.cost.pieces.offload_share);
    a per-stage model that held them all called this plan, 37 % under capacity, infeasible."""
    setup = _default_v3_plan(ep_overlap="off")
    assert memory_report(setup).fits
    res = refine(setup)
    assert "INFEASIBLE" not in res.note and not res.skipped, res.note
    assert memory_report(res.setup).fits


def test_a_fitting_plan_under_combined_1f1b_is_left_to_the_walk():
    """Under combined 1F1B a rank's time is not the sum of its layers' times: the layout the
    per-stage model would pick (slowest rank 6 % lower in its model) walks 15 % slower, so a plan
    that fits is not solved; with the overlap off, the same model and walk agree in direction."""
    from planner.cost.compose import costs_of

    paired = _default_v3_plan()
    res = refine(paired)
    assert res.paired and not res.improved and res.setup is paired
    uneven = "Et|tt|(t|)*14ttt|t|ttt|t|(ttt|)*11tttmL"
    on = [float(costs_of(s).step_s()[0]) for s in (paired, _default_v3_plan(layout=uneven))]
    off = [float(costs_of(s).step_s()[0]) for s in (_default_v3_plan(ep_overlap="off"),
                                                     _default_v3_plan(ep_overlap="off", layout=uneven))]
    assert on[1] > on[0] * 1.1 and off[1] < off[0]
