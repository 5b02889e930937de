"""Published runs are inside the search's space (issue 19).

Every run of tests/data/published_runs.yaml that planner can evaluate (``planner validate`` reads
it: model, hardware, job and plan from its plan string or its Megatron launch, through
:func:`planner.validate.evaluate.resolve_run`) has degrees and a micro-batch size that are a key of
the default search space for its job, and ``search --fix`` on every key of its plan (degrees,
layout, levers) returns that plan, or a faster one, with exactly explain's memory and time
(:func:`planner.cost.evaluate.plan_evaluation`, what ``planner explain`` prints).

Runs that share model, hardware, job, plan and assumptions (a container series) are searched once.
"""

from __future__ import annotations

import pytest

from planner.cost.evaluate import plan_evaluation
from planner.cost.setup import resolve_setup
from planner.errors import NothingFitsError, PlannerError
from planner.launchers.registry import launcher_violations
from planner.search.driver import Options, run_search
from planner.search.space import COL, Limits, build_space
from planner.validate.evaluate import resolve_run
from tests._published import published_runs

RUNS = published_runs()
DEGREES = ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs")


def _resolved():
    out, seen = [], set()
    for run in RUNS:
        if run.not_evaluable:
            continue
        try:
            model, hw, job, plan, assumptions, _ = resolve_run(run)
        except PlannerError:
            continue
        sig = (model.model_dump_json(), hw.name, job.model_dump_json(), plan.to_string(),
               assumptions.model_dump_json())
        if sig not in seen:
            seen.add(sig)
            out.append((run.name, model, hw, job, plan, assumptions))
    return out


KNOWN = _resolved()


def _target(model, hw, job, plan) -> str:
    """The launcher the run's plan starts under: Megatron where it accepts the plan, else torchtitan."""
    for target in ("megatron", "torchtitan"):
        if not launcher_violations(plan, model=model, job=job, hw=hw, target=target):
            return target
    return "any"


def _degrees(model, plan) -> tuple:
    return (plan.tp, plan.cp, plan.pp, plan.vpp if plan.pp > 1 else 1, plan.ep,
            plan.expert_tp if model.is_moe else plan.tp, plan.mbs)


def test_most_published_runs_are_searched():
    """The evaluable runs are the validation set (131 of 169 when this test was written); a reader
    change that drops many of them would silently empty the tests below."""
    assert len(KNOWN) >= 60


@pytest.mark.parametrize("case", KNOWN, ids=lambda c: c[0])
def test_every_published_plan_is_inside_the_default_space(case):
    name, model, hw, job, plan, _ = case
    space = build_space(model, hw, job, target=_target(model, hw, job, plan))
    cols = [COL[k] for k in DEGREES]
    want = _degrees(model, plan)
    assert (space.keys[:, cols] == want).all(axis=1).any(), (name, dict(zip(DEGREES, want)))


SEARCH_EVERY = 3
"""The default run searches every third published plan (dense and MoE, each launcher and release in
turn as the runs file lists them); the slow step searches the rest (each search 0.1-0.3 s, one per distinct published plan: 112 when this was written)."""
SEARCHED = [pytest.param(case, id=case[0], marks=() if i % SEARCH_EVERY == 0 else pytest.mark.slow)
            for i, case in enumerate(KNOWN)]


@pytest.mark.parametrize("case", SEARCHED)
def test_search_fix_returns_the_published_plan_or_a_faster_one_with_explains_numbers(case):
    name, model, hw, job, plan, assumptions = case
    target = _target(model, hw, job, plan)
    given = plan.canonical_for(model, hw, job)
    ref = plan_evaluation(resolve_setup(model, hw, job, given, assumptions))
    ok = ref["memory"]["fits"] and target != "any"
    # Every degree written out (the plan string leaves out those at their defaults), then the rest.
    pairs = dict(zip(DEGREES, _degrees(model, given)))
    if not model.is_moe:
        pairs.pop("etp")
    pairs.update(kv.split("=", 1) for kv in given.to_string().split(",") if kv)
    fixed = ",".join(f"{k}={v}" for k, v in pairs.items())
    try:
        res = run_search(model, hw, job, Options(top=1, target=target, limits=Limits.parse(fixed, None)),
                         assumptions=assumptions)
    except NothingFitsError:
        assert not ok, f"{name}: explain says {fixed} fits and passes the {target} rules; search found nothing"
        return
    best = res.plans[0]
    for k in DEGREES:
        assert getattr(best.plan, k) == getattr(given, k), (k, best.plan.to_string(), fixed)
    if given.layout:
        assert best.plan.layout == given.layout, (best.plan.to_string(), fixed)
    again = plan_evaluation(resolve_setup(model, hw, job, best.plan, assumptions))
    assert again["memory"] == best.evaluation["memory"] and again["time"] == best.evaluation["time"]
    if ok:  # the tables round each of three time terms to the microsecond
        assert best.evaluation["time"]["step_time_s"] <= ref["time"]["step_time_s"] + 5e-6, (name, best.plan)
