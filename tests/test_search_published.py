"""Published runs are inside the search's space (issue 19): every plan of
tests/data/published_runs.yaml whose degrees are known is a key of the default space for its job,
and ``search --fix`` on its keys returns it, or a faster plan, with exactly explain's memory and
time. Only the file's keys name/hardware/model/gpus/global_batch/seq_len/plan are read (others are
ignored, so runs can carry more)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.cost.evaluate import plan_evaluation
from planner.cost.setup import Assumptions, resolve_setup
from planner.errors import NothingFitsError, PlanRuleError, PlannerError
from planner.rules import launcher_violations
from planner.search.driver import Options, run_search
from planner.search.space import COL, Limits, build_space
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.plan import Plan, parse_pairs

RUNS = yaml.safe_load((Path(__file__).parent / "data" / "published_runs.yaml").read_text())["runs"]


def _known(run: dict):
    """(model, hw, job, stated plan keys) of a run whose degrees are known, else None: the
    hardware and model are in the catalog, the job is given, and the plan states TP and PP (and
    EP on MoE models; unstated CP, VPP, ETP and micro-batch size take Megatron's defaults)."""
    try:
        model, hw = load_model(str(run.get("model"))), load_hardware(str(run.get("hardware")))
    except PlannerError:
        return None
    if not all(isinstance(run.get(k), int) for k in ("gpus", "global_batch", "seq_len")):
        return None
    pairs = parse_pairs(run.get("plan") or "")
    if not {"tp", "pp"} <= set(pairs) or (model.is_moe and "ep" not in pairs):
        return None
    plan = Plan.from_mapping(pairs)
    job = Job(gpus=run["gpus"], global_batch=run["global_batch"], seq_len=run["seq_len"],
              precisions=[str(plan.precision or "bf16")])
    return model, hw, job, pairs


KNOWN = [r for r in RUNS if _known(r) is not None]


def test_most_published_runs_state_their_degrees():
    assert len(KNOWN) >= 20 and len(KNOWN) >= len(RUNS) - 8


@pytest.mark.parametrize("run", KNOWN, ids=lambda r: r["name"])
def test_every_published_plan_is_inside_the_default_space(run):
    model, hw, job, pairs = _known(run)
    plan = Plan.from_mapping(pairs)
    space = build_space(model, hw, job)
    want = (plan.tp, plan.cp, plan.pp, plan.vpp if plan.pp > 1 else 1, plan.ep, plan.expert_tp if model.is_moe
            else plan.tp, plan.mbs)
    cols = [COL[k] for k in ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs")]
    assert (space.keys[:, cols] == want).all(axis=1).any(), (run["name"], want)


def _explain(model, hw, job, plan):
    try:
        setup = resolve_setup(model, hw, job, plan, Assumptions())
    except PlanRuleError:
        return None
    return plan_evaluation(setup)


@pytest.mark.parametrize("run", KNOWN, ids=lambda r: r["name"])
def test_search_fix_returns_the_published_plan_or_a_faster_one_with_explains_numbers(run):
    model, hw, job, pairs = _known(run)
    fixed = ",".join(f"{k}={v}" for k, v in pairs.items())
    given = Plan.from_mapping(pairs)  # unstated keys at their defaults: the plan explain accepts
    ref = _explain(model, hw, job, given)
    ok = ref is not None and ref["memory"]["fits"] and not launcher_violations(given, model=model, job=job, hw=hw,
                                                                               target="megatron")
    try:
        res = run_search(model, hw, job, Options(top=1, per_stage=False, limits=Limits.parse(fixed, None)))
    except NothingFitsError:
        assert not ok, f"{run['name']}: explain says {given} fits and passes the rules, search found nothing"
        return
    best = res.plans[0]
    for k, v in pairs.items():
        if k not in ("dp", "edp"):
            assert getattr(best.plan, k) == getattr(Plan.from_mapping({k: v}), k), (k, best.plan)
    again = _explain(model, hw, job, best.plan)
    assert again["memory"] == best.evaluation["memory"] and again["time"] == best.evaluation["time"]
    if ok:  # rounding of the tables' three time terms: at most a few microseconds
        assert best.evaluation["time"]["step_time_s"] <= ref["time"]["step_time_s"] + 5e-6
