"""One answer you can launch (issue 40): the first plan a search shows does not depend on --top. The
search ranks the same pool for every --top up to families.STABLE_POOL and the robust search the same
ROBUST_TOP plans, so --top only decides how many are shown."""

from __future__ import annotations

import pytest

from planner.launchers.registry import resolve_software
from planner.options import JobArgs, resolve_specs
from planner.search.driver import ROBUST_TOP, ROBUST_TOPS, Options, run_search
from planner.search.families import ROBUST_CLASSES, STABLE_POOL, pool_size

TOPS = (1, 3, 10, 20)


def test_every_top_up_to_the_stable_pool_ranks_the_same_pool():
    assert {pool_size(t) for t in range(1, STABLE_POOL + 1)} == {STABLE_POOL}
    assert pool_size(STABLE_POOL + 1) > STABLE_POOL and max(TOPS) <= STABLE_POOL
    assert ROBUST_TOP == STABLE_POOL and len(ROBUST_TOPS) == len(ROBUST_CLASSES) and ROBUST_TOPS[-1] == ROBUST_TOP


def _first(model: str, hw: str, job: JobArgs, top: int, target: str = "megatron") -> str:
    """The first plan of `planner search --model MODEL --hw HW (job) --top TOP --target TARGET`."""
    m, h, j = resolve_specs(model, hw, job)
    profile, _ = resolve_software(None, target)
    opts = Options(target=target, top=top, ties=True, families=True, software=profile)  # as the command sets them
    return run_search(m, h, j, opts).plans[0].plan.to_string()


def test_a_small_job_shows_the_same_first_plan_for_every_top():
    job = JobArgs(gpus=8, global_batch=64)
    firsts = {t: _first("llama3.1-8b", "h100", job, t) for t in (1, 10)}
    assert len(set(firsts.values())) == 1, firsts


# The default command and five other bundled jobs: dense and MoE, Hopper and Blackwell, one with
# DualPipe allowed (--target any).
# The README's command (v3 on nvl72) is tests/test_search_optimal_walk.py's first job, which checks
# the same first plan for every --top and its OPTIMAL status.
JOBS = [
    ("llama3.1-70b", "h100", JobArgs(gpus=64, global_batch=128), "megatron"),
    ("qwen3-30b-a3b", "h100", JobArgs(gpus=16, global_batch=128), "megatron"),
    ("llama3.1-8b", "gb200-nvl72", JobArgs(gpus=16, global_batch=64), "megatron"),
    ("mixtral-8x7b", "h100", JobArgs(gpus=32, global_batch=128), "megatron"),
    ("qwen3-30b-a3b", "gb200-nvl72", JobArgs(gpus=64, global_batch=256), "any"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", JOBS, ids=lambda c: f"{c[0]}-{c[1]}-{c[2].gpus}-{c[3]}")
def test_the_first_plan_is_the_same_for_every_top(case):
    model, hw, job, target = case
    # The extremes of TOPS: every --top between ranks the same pool (the first test above).
    firsts = {t: _first(model, hw, job, t, target) for t in (min(TOPS), max(TOPS))}
    assert len(set(firsts.values())) == 1, firsts


@pytest.mark.slow
def test_a_max_that_keeps_the_first_tie_group_keeps_the_first_plan():
    """Issue 40, the first tie group whole down to recompute: Mixtral 8x7B on 32 H100s with --fix
    edp=4. Before the no-recompute robust search, the first plan was tp2 ep8 mbs2 with moe_act
    recompute and scoped graphs (the most robust of the main search's pool, which ended inside the
    tie group) without a limit and ep8 dp32 without recompute under --max pp=1, although both are
    pp=1 plans of the first group. Now both searches rank the group's no-recompute plans and agree."""
    from planner.search.space import Limits

    m, h, j = resolve_specs("mixtral-8x7b", "h100", JobArgs(gpus=32, global_batch=128))
    profile, _ = resolve_software(None, "megatron")
    firsts = []
    for maxes in (None, "pp=1"):
        opts = Options(target="megatron", top=10, ties=True, families=True, software=profile,
                       limits=Limits.parse("edp=4", maxes))
        result = run_search(m, h, j, opts)
        firsts.append(result.plans[0].plan)
        assert result.solver["ties"]["robust_search"][0]["fix"].endswith("recompute=none")
    assert firsts[0].to_string() == firsts[1].to_string(), firsts
    assert str(firsts[0].recompute) == "none" and str(firsts[0].sharding) == "dist_opt"
