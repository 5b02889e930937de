"""The search's second enumeration (issue 40, planner.search.driver._Run._extend): when the first
enumeration's walk does not prove the walked order, the branch and bound is continued up to a higher
cap (BranchAndBound.extend, no key costed twice) and the plans up to that cap are read from its
tables (exhaustive.plans_up_to). Both must give exactly what the exhaustive tables and CP-SAT give
up to the cap; the proof then reads the cap as the least estimate of a plan not enumerated."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.cost.setup import Assumptions
from planner.search.bnb import BranchAndBound
from planner.search.cpsat import enumerate_cpsat
from planner.search.driver import Ranked, _best_first
from planner.search.exhaustive import plans_up_to
from planner.search.space import Limits, build_space
from planner.search.tables import build_tables
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job


CASES = [
    pytest.param(("llama3.1-8b", 8, 64, "pp=2,cp=1,mbs=2"), id="llama3.1-8b"),
    # combined 1F1B (EP overlap with pipelines), as on the default command
    pytest.param(("qwen3-30b-a3b", 16, 128, "pp=4,tp=2,cp=1,ep=8"), id="qwen3-30b", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("case", CASES)
def test_an_extended_branch_and_bound_holds_every_plan_up_to_its_new_cap(case):
    model, gpus, gb, maxes = case
    job = Job(gpus=gpus, global_batch=gb, seq_len=4096, precisions=["bf16"])
    space = build_space(load_model(model), load_hardware("h100"), job, limits=Limits.parse(None, maxes))
    bb = BranchAndBound(space, Assumptions(), 10, lambda i: True)
    bb.run()
    first, near = sum(len(p["ids"]) for p in bb.parts()), int(bb.U * 1.01)
    cap = int(bb.U * 1.1)
    bb.extend(cap)
    assert bb.U == cap and sum(len(p["ids"]) for p in bb.parts()) > first  # the continuation costed more keys
    found = plans_up_to(bb.candidates(), cap, 10**6)
    assert len(found) > 10
    # every plan of the whole space up to the cap, and nothing above it: as the exhaustive tables say
    assert found == plans_up_to(build_tables(space), cap, 10**6)
    assert max(t for t, _, _ in found) <= cap
    # and as CP-SAT enumerates them over the same tables (up to a nearer cap: CP-SAT's enumeration of
    # hundreds of plans takes seconds)
    assert enumerate_cpsat(bb.candidates(), near, 10**6).plans == plans_up_to(bb.candidates(), near, 10**6) != []


def _plan(est: int, walked: int) -> Ranked:
    """A plan under Megatron's combined 1F1B (slack 1 %), already walked."""
    plan = SimpleNamespace(schedule_record=None, ep_overlap=True, pp=2)
    ev = {"memory": {"fits": True, "peak_bytes": 1}, "time": {"step_time_s": walked / 1e6}}
    return Ranked(0, plan, None, est, ev)  # type: ignore[arg-type]


def test_the_cap_of_a_complete_enumeration_bounds_the_plans_not_enumerated():
    plans = [_plan(100_000, 101_000), _plan(104_000, 105_000)]
    # the last estimate less 1 % (102,960 us) is below the 2nd walked time: not proven
    assert not _best_first(plans, 2, complete=False, unseen_slack=0.01)[1]
    # every plan up to 106,100 us enumerated: the rest are above it, and 1 % below that is 105,039
    assert _best_first(plans, 2, complete=False, unseen_slack=0.01, unseen_est=106_100)[1]
    assert not _best_first(plans, 2, complete=False, unseen_slack=0.01, unseen_est=106_000)[1]


def test_a_search_reads_its_first_enumeration_from_the_tables_as_cp_sat_would_give_it(monkeypatch):
    """Below driver.TABLE_READ_PLANS the first enumeration reads the tables too (CP-SAT cost the
    default command 1.1 s for the plans the tables give in milliseconds): the same ranked plans,
    walked the same, with the same status, as with CP-SAT's enumeration."""
    from planner.search import driver

    job = Job(gpus=8, global_batch=64, seq_len=4096, precisions=["bf16"])
    opts = driver.Options(top=3, limits=Limits.parse(None, "pp=2,cp=1,mbs=2"), per_stage=False, ties=False,
                          families=False)
    asked: list[int] = []
    cpsat = driver.enumerate_cpsat
    monkeypatch.setattr(driver, "enumerate_cpsat", lambda *a, **k: asked.append(1) or cpsat(*a, **k))

    def ranked():
        res = driver.run_search(load_model("llama3.1-8b"), load_hardware("h100"), job, opts)
        return [(p.plan.to_string(), p.objective_us, p.evaluation) for p in res.plans], res.solver["status"]

    read = ranked()
    assert not asked  # read from the tables
    monkeypatch.setattr(driver, "TABLE_READ_PLANS", 0)
    assert ranked() == read and asked  # CP-SAT's enumeration, the same answer
    assert read[1] == "OPTIMAL" and len(read[0]) == 3
