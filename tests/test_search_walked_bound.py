"""The best-first search (issue 40) walks plans in the order of the tables' step estimate and stops
once the K-th walked time is at or below a lower bound of the walked time of every plan not walked:
the estimate less its schedule's slack (planner.search.bounds.WALK_SLACK). These tests check that
bound by brute force on the bundled jobs, for every schedule the walk covers (Megatron's combined
1F1B under EP overlap, ZB-H1, ZB-V, DualPipe, DualPipeV): plans drawn at random from each space
(launcher-valid ones; memory ignored, the bound is about time). The estimate alone is no bound
(a DualPipeV plan of Llama 3.1 8B walks 8 % below it)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cost.compose import costs_of
from planner.cost.setup import Assumptions, resolve_setup
from planner.errors import PlannerError
from planner.search.bounds import plan_walk_slack, walked_floor_us
from planner.search.rulecheck import rule_violations
from planner.search.space import Limits, build_space, make_plan
from planner.search.tables import lever_indices, lever_values
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.plan import Plan

ROUNDING = 1e-4
"""The tables round each time term to the microsecond (driver.ESTIMATE_TOLERANCE)."""


def _sampled(model, hw, job, target, maxes, n, seed):
    """(walked, estimated) step seconds of ``n`` launcher-valid plans drawn from the space."""
    m, h = load_model(model), load_hardware(hw)
    sp = build_space(m, h, job, target=target, limits=Limits.parse(None, maxes))
    rng = np.random.default_rng(seed)
    out, names = [], set()
    for _ in range(40 * n):
        if len(out) == n:
            break
        plan = make_plan(sp.struct(int(rng.integers(len(sp)))),
                         lever_values(sp, lever_indices(sp, int(rng.integers(sp.lever_product_size)))))
        try:
            if rule_violations(m, h, job, plan, target, None, None):
                continue
            s = resolve_setup(m, h, job, plan, Assumptions())
            pair = (float(costs_of(s).step_s()[0]), float(costs_of(s, walk=False).step_s()[0]))
        except PlannerError:
            continue
        if s.plan.to_string() not in names:
            names.add(s.plan.to_string())
            out.append((s.plan, pair))
    return out


def _walked_schedules(plans) -> set[str]:
    names = set()
    for p, _ in plans:
        if p.schedule is not None and str(p.schedule) not in ("1f1b", "interleaved", "megatron"):
            names.add(str(p.schedule))
        elif p.ep_overlap and str(p.ep_overlap) != "off" and p.pp > 1:
            names.add("combined-1f1b")
    return names


def _assert_lower_bound(plans):
    bad = [(p.to_string(), w, e) for p, (w, e) in plans
           if walked_floor_us(int(round(e * 1e6)), plan_walk_slack(p)) > w * 1e6 * (1 + ROUNDING)]
    assert not bad, bad[:3]


def test_the_estimate_alone_is_no_bound_of_the_walk():
    """Why the slack: the estimate reads the bubble from the ranks' mean op times, which uneven
    chunks' walk can beat (the plan the brute force found)."""
    m, h = load_model("llama3.1-8b"), load_hardware("h100")
    job = Job(gpus=8, global_batch=64, seq_len=4096, precisions=["bf16"])
    plan = Plan.parse("tp=2,pp=2,vpp=2,mbs=8,sharding=zero2,recompute=op,precision=bf16,schedule=dualpipev,"
                      "cuda_graphs=scoped:layer")
    s = resolve_setup(m, h, job, plan, Assumptions())
    walked, estimate = float(costs_of(s).step_s()[0]), float(costs_of(s, walk=False).step_s()[0])
    assert estimate > walked * 1.05
    assert walked_floor_us(int(round(estimate * 1e6)), plan_walk_slack(s.plan)) <= walked * 1e6


def test_the_estimate_is_below_the_walk_on_sampled_plans_of_a_small_space():
    job = Job(gpus=8, global_batch=64, seq_len=4096, precisions=["bf16"])
    plans = _sampled("llama3.1-8b", "h100", job, "torchtitan", "pp=4", 25, seed=1)
    assert len(plans) == 25
    _assert_lower_bound(plans)
    assert _walked_schedules(plans) & {"zb-h1", "zbv", "dualpipev"}  # the walked schedules are sampled


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    ("deepseek-v3", "gb200-nvl72", 256, 8192, 4096, None, "megatron"),
    ("qwen3-30b-a3b", "h100", 16, 128, 4096, "pp=4,cp=1,mbs=2", "any"),
    ("mixtral-8x22b", "h200", 64, 256, 4096, "pp=4,cp=1", "megatron"),
    ("qwen3-235b-a22b", "h100", 256, 1024, 4096, "pp=8,cp=1,tp=4", "megatron"),
    ("llama3.1-70b", "h100", 64, 128, 4096, "pp=8", "any"),
], ids=lambda c: f"{c[0]}-{c[1]}-{c[6]}")
def test_the_estimate_is_below_the_walk_on_sampled_plans(case):
    model, hw, gpus, gb, seq, maxes, target = case
    job = Job(gpus=gpus, global_batch=gb, seq_len=seq, precisions=["bf16", "fp8"])
    plans = _sampled(model, hw, job, target, maxes, 40, seed=2)
    assert len(plans) >= 30
    _assert_lower_bound(plans)


# ---------------------------------------------------------------------------------------------
# The proven bound (planner.search.bounds.bubble_ratio): walked >= (estimate - sends) / (1 + θ).
# ---------------------------------------------------------------------------------------------
PROVEN_SHAPES = [("zb-h1", 2, 1, 8), ("zb-h1", 4, 2, 16), ("zbv", 2, 2, 8), ("zbv", 4, 2, 16),
                 ("dualpipe", 2, 2, 8), ("dualpipe", 4, 2, 16), ("dualpipe", 4, 2, 64), ("dualpipev", 2, 2, 8),
                 ("dualpipev", 2, 2, 64), ("dualpipev", 4, 2, 16)]


def _uneven_chunks(rng, sched, p, v, n):
    """Random layer times for ``n`` plans, each rank's chunks scaled 0.2-3x on their own (far more
    uneven than a layout makes them: the bound must hold for any durations), with all-to-all."""
    from planner.cost.schedules.timing import LayerTimes

    def chunk():
        scale = rng.uniform(0.2, 3.0, n)
        return tuple(LayerTimes(*(rng.uniform(0.1, 1.0, n) * scale * s for s in (1.0, 1.0, 0.5, 1.5, 1.5, 0.7, 0.6, 0.6,
                                                                                    0.6, 0.6)))
                     for _ in range(int(rng.integers(1, 3))))
    return tuple(tuple(chunk() for _ in range(sched.chunks(v))) for _ in range(p))


def _proven_excess(name, p, v, m, pair_overlap, seed, n=48, theta=None, delay=False):
    """Per random plan, (proven floor - walked) / walked: <= 0 where the bound holds."""
    from planner.cost.schedules.batch import pipeline_estimate, pipeline_step
    from planner.search.bounds import bubble_ratio
    from planner.specs.schedule import schedule_named

    sched = schedule_named(name)
    rng = np.random.default_rng(seed)
    chunks = _uneven_chunks(rng, sched, p, v, n)
    p2p = rng.uniform(0.0, 0.4, n)
    kw = dict(pair_overlap=pair_overlap, interference=0.15, delay_wgrad=delay)
    walked = pipeline_step(sched, p, v, m, chunks, p2p, **kw).step
    est = pipeline_estimate(sched, p, v, m, chunks, p2p, **kw).step
    th = bubble_ratio(sched, p, v, m, pair_overlap) if theta is None else theta
    return ((est - 2 * (p - 1) * p2p) / (1 + th) - walked) / walked


@pytest.mark.parametrize("name,p,v,m", PROVEN_SHAPES)
@pytest.mark.parametrize("pair_overlap,delay", [(True, False), (True, True), (False, False)])
def test_the_proven_bound_holds_on_random_uneven_stages(name, p, v, m, pair_overlap, delay):
    excess = _proven_excess(name, p, v, m, pair_overlap, seed=p * 100 + m + pair_overlap + 7 * delay, delay=delay)
    assert excess.max() <= 1e-12, excess.max()


def test_the_brute_force_can_fail_without_the_bubble_ratio():
    """The same brute force with θ = 0 (the estimate less its sends taken as a bound): the walk
    beats it on uneven stages, so the checks above can fail and θ is what makes them hold."""
    worst = max(_proven_excess(name, p, v, m, True, seed=p * 100 + m + 1, theta=0.0).max()
                for name, p, v, m in PROVEN_SHAPES if not (name == "dualpipe" and p == 2))
    assert worst > 0.01, worst


def test_dualpipe_on_two_ranks_can_beat_its_estimate_by_its_sends_only():
    """Two-rank DualPipe has no bubble term (stages / 2 - 1 = 0): θ = 0, and the walk is at least
    the estimate less the sends it adds."""
    from planner.search.bounds import bubble_ratio
    from planner.specs.schedule import schedule_named

    assert bubble_ratio(schedule_named("dualpipe"), 2, 2, 16) == 0.0
    assert _proven_excess("dualpipe", 2, 2, 16, True, seed=5).max() <= 1e-12


def test_the_bubble_ratio_follows_the_item_counts():
    """θ = factor x mean over ranks of max_g w_g / (kinds_g x least count_g): ZB-H1 on 2 ranks, one
    chunk, 8 micro-batches: (2 - 1) x 1 / (1 x 8); halved with twice the micro-batches; combined
    1F1B is not of that form."""
    from planner.search.bounds import bubble_ratio
    from planner.specs.schedule import schedule_named

    assert bubble_ratio(schedule_named("zb-h1"), 2, 1, 8) == pytest.approx(1 / 8)
    assert bubble_ratio(schedule_named("zb-h1"), 2, 1, 16) == pytest.approx(1 / 16)
    assert bubble_ratio(schedule_named("zbv"), 2, 2, 8) == pytest.approx(1 / 16)
    assert bubble_ratio(schedule_named("combined-1f1b"), 2, 2, 8) == float("inf")


def test_the_proven_bound_holds_on_sampled_plans_of_a_dualpipe_space():
    """The proven floor of the real plans of the DualPipe-allowed job (tests/test_search_optimal_walk.py,
    --target any), each with its own micro-batches and send time, is at or below its walk."""
    from planner.search.bounds import bubble_ratio, proven_walked_floor_us

    job = Job(gpus=16, global_batch=128, seq_len=4096, precisions=["bf16", "fp8"])
    m, h = load_model("qwen3-30b-a3b"), load_hardware("h100")
    sp = build_space(m, h, job, target="any", limits=Limits.parse(None, "pp=4,cp=1,mbs=2"))
    rng = np.random.default_rng(4)
    checked = set()
    for _ in range(4000):
        if len(checked) == 24:
            break
        plan = make_plan(sp.struct(int(rng.integers(len(sp)))),
                         lever_values(sp, lever_indices(sp, int(rng.integers(sp.lever_product_size)))))
        rec = plan.schedule_record
        if rec is None or rec.bubble not in ("zb", "dual") or plan.to_string() in checked:
            continue
        try:
            if rule_violations(m, h, job, plan, "any", None, None):
                continue
            s = resolve_setup(m, h, job, plan, Assumptions())
            walked_costs = costs_of(s)
            walked, est = float(walked_costs.step_s()[0]), float(costs_of(s, walk=False).step_s()[0])
        except PlannerError:
            continue
        pair = bool(s.plan.ep_overlap) and s.plan.ep > 1
        theta = bubble_ratio(rec, s.plan.pp, s.plan.vpp, s.micro_batches, pair)
        sends = 2 * (s.plan.pp - 1) * float(walked_costs.p2p_seconds()[0]) * 1e6
        floor = proven_walked_floor_us(int(round(est * 1e6)), theta, sends)
        assert floor <= walked * 1e6 * (1 + ROUNDING), (plan.to_string(), floor, walked, est, theta)
        checked.add(plan.to_string())
    assert len(checked) >= 16
