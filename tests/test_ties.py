"""Ties are ties, runtime risks and families (planner.search.ties, risks, families)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from planner.search.families import arrange, families_of, family_cell, family_key, first_of_each
from planner.search.risks import load_risks, parse_risks, plan_risks
from planner.search.ties import ROBUSTNESS_ORDER, load_report, resolution_of, robustness, tie_order
from planner.specs.catalog import load_model
from planner.specs.plan import Plan

GiB = 2**30


def test_ties_group_from_the_fastest_and_order_robust_first():
    # steps and robustness keys (smaller is more robust)
    items = [("a", 1.00, (1,)), ("b", 1.02, (0,)), ("c", 1.05, (0,)), ("d", 1.30, (0,)), ("e", 1.35, (1,))]
    out = tie_order(items, step=lambda x: x[1], robust=lambda x: x[2], resolution=0.10)
    # 1.00 .. 1.10 tie: the robust b and c first (faster first), then a; 1.30 starts the next group
    assert [(g, x[0]) for g, x in out] == [(1, "b"), (1, "c"), (1, "a"), (2, "d"), (2, "e")]
    # no resolution: the step order
    assert [x[0] for _, x in tie_order(items, lambda x: x[1], lambda x: x[2], 0.0)] == ["a", "b", "c", "d", "e"]


def test_a_robust_plan_outside_the_resolution_stays_behind():
    items = [("fast", 1.00, (1,)), ("robust", 1.11, (0,))]
    assert [x[0] for _, x in tie_order(items, lambda x: x[1], lambda x: x[2], 0.10)] == ["fast", "robust"]


def _plan(**kw) -> Plan:
    return Plan(**kw)


def test_robustness_order_is_the_documented_one():
    cap = 100 * GiB
    base = robustness(_plan(), 50 * GiB, cap)
    worse = {
        "no runtime risk": robustness(_plan(), 50 * GiB, cap, ["r"]),
        "no offload": robustness(_plan(offload="optimizer"), 50 * GiB, cap),
        "distributed optimizer or DDP before FSDP variants (Megatron)": robustness(_plan(sharding="zero2"), 50 * GiB, cap),
        "less recompute": robustness(_plan(recompute="full"), 50 * GiB, cap),
        "headroom not tight": robustness(_plan(), 1 * GiB, cap),
        "fewer parallel dimensions": robustness(_plan(tp=2), 50 * GiB, cap),
    }
    assert list(worse) == list(ROBUSTNESS_ORDER[:-1])
    keys = list(worse.values())
    for i, w in enumerate(keys):
        assert base.key() < w.key()
        # each criterion outranks every later one
        for later in keys[i + 1:]:
            assert w.key() > later.key()
    assert robustness(_plan(recompute="core_attn"), 50 * GiB, cap).key() < robustness(_plan(recompute="full"), 50 * GiB, cap).key()


def _report(series_pairs, runs):
    return {"ranking": {"series": series_pairs}, "runs": runs}


def _cfg(pred, meas):
    return {"predicted_tokens_per_s_per_gpu": pred, "measured_tokens_per_s_per_gpu": meas}


def _run(e, klass="K", subset="validation"):
    return {"status": "evaluated", "errors": {"throughput": e}, "class": klass, "subset": subset, "counted": True}


def test_resolution_is_the_class_pair_error_times_the_within_job_factor():
    # one series: predicted ratio 1.1 against measured 1.0 -> within = log 1.1
    series = [{"configurations": [_cfg(110, 100), _cfg(100, 100)]}]
    runs = [_run(0.0), _run(0.2), _run(-0.2, "L")]
    rep = _report(series, runs)
    across = sorted(abs(math.log1p(a) - math.log1p(b)) for a, b in [(0.0, 0.2), (0.0, -0.2), (0.2, -0.2)])[1]
    factor = math.log(1.1) / across
    r = resolution_of(rep, "K")
    assert r.klass == "K" and r.factor == pytest.approx(factor, rel=1e-3)
    assert r.relative == pytest.approx(math.expm1(math.log1p(0.2) * factor), rel=2e-3)
    # a class with no validation runs: the pooled runs, said so
    pooled = resolution_of(rep, "none of these")
    assert pooled.klass is None and "has none" in pooled.basis
    # no series: no resolution (every difference counts)
    assert resolution_of(_report([], runs), "K").relative == 0.0


def test_bundled_resolution_is_below_the_per_run_spread():
    report = load_report()
    assert report is not None
    r = resolution_of(report, "MoE / Blackwell / fp8")
    # plans of one job share much of their error: the resolution is a fraction of two unrelated runs'
    assert 0.0 < r.factor < 1.0 and r.series >= 10
    assert 0.0 < r.relative < math.expm1(r.class_pair_error)


def test_the_bundled_risk_list_cites_its_sources():
    risks = load_risks()
    assert risks and all(r.source for r in risks)
    fsdp = next(r for r in risks if r.name == "megatron-fsdp-pp-fp32-router")
    assert "github.com/NVIDIA/Megatron-LM/issues/1643" in fsdp.source


def test_the_fsdp_pipeline_router_risk_matches_only_its_combination():
    moe, dense = load_model("qwen3-235b-a22b"), load_model("llama3.1-8b")
    risky = _plan(pp=2, ep=8, sharding="zero2")
    names = lambda m, p, t: [r.name for r in plan_risks(m, p, t)]  # noqa: E731
    assert names(moe, risky, "megatron") == ["megatron-fsdp-pp-fp32-router"]
    assert names(moe, risky, "any") == ["megatron-fsdp-pp-fp32-router"]
    assert names(moe, _plan(pp=2, ep=8, sharding="fsdp"), "megatron")
    assert names(moe, risky, "torchtitan") == []  # FSDP2 there, not Megatron-FSDP
    assert names(moe, _plan(pp=1, ep=8, sharding="zero2"), "megatron") == []
    assert names(moe, _plan(pp=2, ep=8), "megatron") == []  # the distributed optimizer
    assert names(dense, _plan(pp=2, sharding="zero2"), "megatron") == []


def test_a_malformed_risk_is_refused_with_its_name():
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match="unknown 'when' keys"):
        parse_risks({"risks": [{"name": "x", "text": "t", "source": "s", "when": {"vpp": 2}}]}, "f.yaml")
    with pytest.raises(PlannerError, match="needs a name, a text and a source"):
        parse_risks({"risks": [{"name": "x", "text": "t"}]}, "f.yaml")


def test_family_is_degrees_sharding_and_precision_not_vpp_layout_or_mbs():
    a = _plan(pp=2, vpp=4, ep=8, mbs=1, precision="bf16")
    b = _plan(pp=2, vpp=2, ep=8, mbs=2, recompute="full", precision="bf16")
    assert family_key(a, 64) == family_key(b, 64) == "pp2 ep8 dp32 dist_opt bf16"
    assert family_key(_plan(pp=2, ep=8, sharding="zero2"), 64) != family_key(a, 64)
    assert family_key(_plan(tp=2, ep=8, etp=1), 16) == "tp2 ep8 etp1 dp8 dist_opt"
    assert family_key(_plan(), 1) == "1 GPU dist_opt"


def test_families_keep_the_first_of_each_with_its_spread():
    keys = ["A", "A", "B", "A", "C", "B"]
    assert first_of_each(keys) == [0, 2, 4]
    fams = families_of(keys, [1.0, 1.1, 1.05, 1.2, 2.0, 1.5])
    assert fams["A"].to_json()["variants"] == 3 and fams["A"].to_json()["spread"] == pytest.approx(0.2)
    assert family_cell(fams["A"].to_json()) == "A; 3 variants to +20.0%"
    assert family_cell(fams["C"].to_json()) == "C"


@dataclass
class _Setup:
    plan: Plan


@dataclass
class _Ranked:
    rank: int
    plan: Plan
    setup: _Setup
    evaluation: dict = field(default_factory=dict)


def _ranked(plan: Plan, step: float, room: float) -> _Ranked:
    ev = {"time": {"step_time_s": step}, "memory": {"headroom_bytes": room * GiB, "capacity_bytes": 80 * GiB}}
    return _Ranked(0, plan, _Setup(plan), ev)


@dataclass
class _Job:
    gpus: int = 64
    default_precision: str = "bf16"


def test_arrange_shows_the_robust_plan_of_a_tie_and_one_plan_per_family():
    from planner.search.ties import Resolution

    moe = load_model("qwen3-235b-a22b")
    risky_fast = _ranked(_plan(pp=2, ep=8, sharding="zero2"), 1.000, 1.0)
    risky_twin = _ranked(_plan(pp=2, vpp=2, ep=8, sharding="zero2"), 1.005, 1.0)
    robust = _ranked(_plan(pp=2, ep=8), 1.02, 18.0)
    slow = _ranked(_plan(pp=4, ep=8), 1.50, 30.0)
    res = Resolution(0.05, "K", 0.1, 0.5, 3, "test")
    plans, info = arrange([risky_fast, risky_twin, robust, slow], moe, None, _Job(), "megatron", families=True,
                          shown=10, pool=40, resolution=res)
    assert [p.evaluation["family"]["key"] for p in plans] == ["pp2 ep8 dp32 dist_opt", "pp2 ep8 dp32 zero2",
                                                             "pp4 ep8 dp16 dist_opt"]
    assert [p.rank for p in plans] == [1, 2, 3] and [p.evaluation["tie_group"] for p in plans] == [1, 1, 2]
    assert plans[1].evaluation["risks"][0]["name"] == "megatron-fsdp-pp-fp32-router"
    assert plans[1].evaluation["family"]["variants"] == 2
    assert info["resolution"] == 0.05 and info["families_found"] == 3 and info["first_group_complete"]
    every, _ = arrange([risky_fast, risky_twin, robust, slow], moe, None, _Job(), "megatron", families=False,
                       shown=10, pool=40, resolution=res)
    assert len(every) == 4 and every[0].plan is robust.plan


def test_a_robust_plan_is_risk_free_without_offload_or_fsdp_and_its_tie_decides_the_searches():
    from planner.search.families import ROBUST_CLASSES, group_level, robust_level
    from planner.search.ties import Resolution

    moe = load_model("qwen3-235b-a22b")
    assert robust_level(_plan(pp=2, ep=8), []) == 0 and robust_level(_plan(pp=2, offload="optimizer"), []) == len(ROBUST_CLASSES)
    res = Resolution(0.05, "K", 0.1, 0.5, 3, "test")
    risky = _ranked(_plan(pp=2, ep=8, sharding="zero2"), 1.0, 10.0)
    robust_far = _ranked(_plan(pp=2, ep=8), 1.2, 10.0)
    robust_near = _ranked(_plan(pp=2, ep=8), 1.04, 10.0)
    assert group_level([risky, robust_far], moe, None, _Job(), "megatron", res) == 2  # searched for
    assert group_level([risky, robust_near], moe, None, _Job(), "megatron", res) == 0  # none needed
    assert group_level([risky], moe, None, _Job(), "torchtitan", res) is None
    assert group_level([risky], moe, None, _Job(), "any", res) is None
    # the sharding counts against a plan for Megatron only (torchtitan's FSDP2 is its plain path)
    cap = 100 * GiB
    assert robustness(_plan(sharding="fsdp"), 50 * GiB, cap, target="any").key() == robustness(_plan(), 50 * GiB, cap, target="any").key()


def test_the_robust_searches_go_most_robust_class_first_and_keep_the_users_choices():
    """Issue 40, the first tie group whole down to recompute: the searches pin no recompute first, then
    any recompute; a user's --fix of the sharding or the offload stops them, of the recompute skips
    the first (the second then pins what the user fixed)."""
    from planner.search.families import ROBUST_CLASSES, robust_level, robust_searches
    from planner.search.space import Limits

    both = robust_searches(Limits.parse("tp=2", "pp=4"))
    assert [s.level for s in both] == [0, 1] and [s.fix for s in both] == list(ROBUST_CLASSES)
    assert str(both[0].limits.fix["recompute"]) == "none" and "recompute" not in both[1].limits.fix
    assert all(s.limits.fix["tp"] == 2 and s.limits.max == {"pp": 4} for s in both)
    kept = robust_searches(Limits.parse("recompute=full", None))
    assert [s.level for s in kept] == [1] and str(kept[0].limits.fix["recompute"]) == "full"
    assert robust_searches(Limits.parse("sharding=zero2", None)) == []
    assert robust_searches(Limits.parse("offload=optimizer", None)) == []
    assert robust_level(_plan(pp=2), []) == 0
    assert robust_level(_plan(recompute="moe_act"), []) == robust_level(_plan(recompute="full"), []) == 1
    assert robust_level(_plan(sharding="zero2"), []) == robust_level(_plan(offload="optimizer"), []) == 2
    assert robust_level(_plan(), ["a runtime risk"]) == 2


def test_the_first_groups_most_robust_level_decides_the_robust_searches():
    """The group's plans in the pool decide, whatever the pool's extent: the search drops a plan a
    faster one with less memory dominates (the distributed optimizer's twin of a Megatron-FSDP plan),
    so a pool that ends beyond the group does not hold all of it (a Qwen3-235B run of the search mode
    kept only Megatron-FSDP plans, each on a runtime risk, in a pool of fewer than 40)."""
    from planner.search.families import group_level
    from planner.search.ties import Resolution

    moe = load_model("qwen3-235b-a22b")
    res = Resolution(0.05, "K", 0.1, 0.5, 3, "test")
    fast = _ranked(_plan(pp=2, ep=8, sharding="zero2"), 1.00, 10.0)
    near = _ranked(_plan(pp=2, ep=8, recompute="moe_act"), 1.04, 10.0)
    beyond = _ranked(_plan(pp=4, ep=8), 1.20, 10.0)

    def level(plans, target="megatron"):
        return group_level(plans, moe, None, _Job(), target, res)

    assert level([fast, near, beyond]) == 1 and level([fast, beyond]) == 2
    assert level([beyond, near]) == 1  # the group starts at the fastest plan given: near, not beyond
    assert level([beyond, _ranked(_plan(pp=4, ep=8), 1.19, 10.0)]) == 0
    assert level([fast, near], "torchtitan") is None and level([], "megatron") is None
