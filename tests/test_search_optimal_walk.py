"""Issue 40's first acceptance point: the search is exact over the walked step times the reports
print (best-first, planner.search.driver._best_first), so its status is OPTIMAL and the first plan
is the same for --top 1, 3, 10 and 20, on the default command and five other bundled jobs (dense
and MoE, Hopper and Blackwell, one with DualPipe allowed)."""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from planner.search.status import status_line

TOPS = ("1", "3", "10", "20")

JOBS = [
    # proven by the second enumeration (driver._Run._extend): the first walks its 160 plans with the
    # 40th walked time 0.7 % above the bound of the plans not enumerated (the robust search's 0.05 %)
    pytest.param(("--model", "v3", "--hw", "nvl72"), id="default", marks=pytest.mark.slow),
    pytest.param(("--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096",
                  "--max", "pp=2"), id="llama3.1-8b-h100"),
    # DualPipe allowed: zero-bubble and DualPipe spaces enumerate once (driver.MAX_WALK_FACTOR), so
    # the walked order is not proven there yet (issue 40 left open). Measured 2026-12-06: none of the
    # 160 plans walked is zero bubble or DualPipe (pp = 1 walks 0-5.4 % above its estimate, combined
    # 1F1B 4.3-10.9 %); the 40th walked time is 4.3 % above the last estimate, so even a zero slack
    # exceeds driver.MAX_EXTEND_REACH. At a 1 % slack for every walked schedule the proof enumerates
    # 2,436 plans and walks 1,140 (OPTIMAL, same first plan, 49 s against 34 s); at WALK_SLACK's 15 %
    # it would enumerate 40,586 (the branch and bound's continuation alone 21 s) and walk them all.
    # The proven bound (planner.search.bounds.bubble_ratio) is 0 for two-rank DualPipe but looser
    # than the empirical slacks elsewhere in this space (ZB-H1 at pp = 2, m = 8: 11 %).
    pytest.param(("--model", "qwen3-30b-a3b", "--hw", "h100", "--gpus", "16", "--global-batch", "128", "--seq-len",
                  "4096", "--target", "any", "--max", "pp=4,cp=1,mbs=2"), id="qwen3-30b-h100-dualpipe",
                 marks=[pytest.mark.slow, pytest.mark.xfail(strict=True, reason="DualPipe's walk is not proven yet")]),
    pytest.param(("--model", "llama3.1-70b", "--hw", "b200", "--gpus", "128", "--global-batch", "256", "--seq-len",
                  "4096", "--max", "pp=4,cp=1,mbs=4"), id="llama3.1-70b-b200",
                 # FEASIBLE on main at 8fecf8d too: 54 per-stage refinements enter the ranking
                 marks=[pytest.mark.slow, pytest.mark.xfail(strict=True, reason="per-stage plans enter")]),
    pytest.param(("--model", "mixtral-8x22b", "--hw", "h200", "--gpus", "64", "--global-batch", "256", "--seq-len",
                  "4096", "--max", "pp=4,cp=1"), id="mixtral-8x22b-h200", marks=pytest.mark.slow),
    pytest.param(("--model", "deepseek-v2", "--hw", "h800", "--gpus", "256", "--global-batch", "1024", "--seq-len",
                  "4096", "--max", "pp=8,cp=1,tp=2"), id="deepseek-v2-h800",
                 # FEASIBLE on main at 8fecf8d too: the combined 1F1B walks 3-17 % above the estimate and the
                 # 40th walked time is 4.2 % beyond the last enumerated plan (driver.MAX_EXTEND_REACH: 2 %)
                 marks=[pytest.mark.slow, pytest.mark.xfail(strict=True, reason="not proven within the reach")]),
]


def _search(capsys, args, top):
    assert main(["search", *args, "--top", top, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


EXTREMES = (TOPS[0], TOPS[-1])
"""Every --top up to families.STABLE_POOL ranks the same pool (tests/test_rank_one_stable.py
test_every_top_up_to_the_stable_pool_ranks_the_same_pool), so --top 1 and 20 decide for the slow
jobs; the small job of the default run searches every one of TOPS."""


@pytest.mark.parametrize("args", JOBS)
def test_optimal_over_the_walk_and_one_first_plan_for_every_top(capsys, request, args):
    out = {}
    tops = TOPS if request.node.get_closest_marker("slow") is None else EXTREMES
    for top in tops:  # each status checked as it comes: an unproven job fails at its first search
        res = out[top] = _search(capsys, args, top)
        assert res["solver"]["status"] == "OPTIMAL", (top, status_line(res["solver"]))
        assert res["solver"]["plans_walked"] >= 1
    firsts = {top: json.dumps(res["plans"][0]["plan"], sort_keys=True) for top, res in out.items()}
    assert len(set(firsts.values())) == 1, firsts
