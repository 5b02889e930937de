import os
import sys
from pathlib import Path

import pytest

# As the planner program does (planner.cli.entry): single-threaded BLAS for the many small matrix
# products of the cost tables, set before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# Test helpers (calibration_rows) live next to the tests.
sys.path.insert(0, str(Path(__file__).parent))


# The default run (`python -m pytest`, the README's test command) must take at most 4 minutes on a
# 2-core machine; CI runs these in a second step (`python -m pytest -m slow`), so what they check
# stays checked. Each is listed with its call time measured on the 2-core machine (pytest
# --durations, one serial run, 2026-12-05); each has a faster test in the default run that checks
# the same rule on a smaller case (named after the '#').
SLOW_TESTS = {
    # regenerates a full results/ report (five searches); the check's logic: test_check_reports_a_changed_and_a_missing_file
    "tests/test_results.py::test_committed_report_reproduces_byte_for_byte": 50.1,
    # the same command on six smaller HF families in the same parametrization
    "tests/test_hf_families.py::test_search_returns_plans[llama-4-scout-17b-16e-instruct-h100-64-256]": 36.1,
    "tests/test_hf_families.py::test_search_returns_plans[llama-4-maverick-17b-128e-instruct-gb200-nvl72-128-512]": 22.6,
    # the megatron target's case stays in the default run
    "tests/test_search.py::test_every_plan_passes_the_target_launchers_rules[any]": 28.0,
    "tests/test_search.py::test_every_plan_passes_the_target_launchers_rules[torchtitan]": 40.5,
    # 20 smaller oracle cases stay in the default run
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[deepseek-v3-gb200-nvl72-256]": 28.2,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[qwen3-30b-a3b-h100-16_0]": 49.0,
    # the other table cases (dense, MoE GQA, Hopper and Blackwell) stay in the default run
    "tests/test_cost_tables.py::test_table_entries_equal_the_one_plan_composition[moe-mla-nvl72]": 15.5,
    "tests/test_cost_tables.py::test_table_entries_equal_the_one_plan_composition[moe-gqa-h200]": 9.2,
    # the local implementations' search and sweep run in test_search_compare_and_sweep_run_with_local_implementations
    "tests/test_search_implementations.py::test_local_implementations_search_like_the_oracle_with_explains_numbers[mixtral-8x7b-megatron-local]": 5.2,
    "tests/test_search_implementations.py::test_local_implementations_search_like_the_oracle_with_explains_numbers[mixtral-8x7b-megatron-local-fused-softmax]": 13.5,
    # seven other searched jobs export and read back in the default run
    "tests/test_export_readback.py::test_searched_top_plans_export_and_read_back_unchanged[qwen3-235b-a22b-h100-256]": 30.3,
    # second round (the suite grew by ~250 tests; measured quiet, s): 14 oracle cases stay in the default run
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[gpt-oss-120b-h100-64]": 8.7,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[gpt-oss-120b-b200-16]": 12.9,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[qwen3-30b-a3b-gb200-nvl72-64]": 32.0,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[mixtral-8x7b-h100-32]": 18.3,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[qwen3-30b-a3b-h100-16_1]": 6.5,
    # the other schedules' oracle cases (megatron target) stay in the default run
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle_with_every_schedule[llama3.1-8b-torchtitan]": 7.3,
    "tests/test_cost_tables.py::test_table_entries_equal_the_one_plan_composition[moe-mla-h100-imbalance]": 6.7,
    # third round (2026-12-05, second session; 10.6 s loaded): the same search, compare and sweep with the
    # plain local spec stay in the default run (test_search_compare_and_sweep_run_with_local_implementations[megatron-local])
    "tests/test_search_implementations.py::test_search_compare_and_sweep_run_with_local_implementations[megatron-local-fused-softmax]": 46.4,
    # DeepSeek-V3 on five systems (an 11 s module fixture); the compare command, its JSON, economics and
    # plot run on the small counts_compare job in the default run
    # fourth round (2026-12-05, third session: the default run measured 242 s alone, limit 240): four
    # oracle cases of 5-6 s each; ten stay in the default run (dense and MoE, Hopper and Blackwell)
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[deepseek-v3-h100-1024]": 3.7,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[llama3.1-70b-h100-64]": 9.4,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[qwen3-235b-a22b-h100-256]": 6.1,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[deepseek-v2-h800-256]": 4.6,
    "tests/test_compare.py::test_acceptance_names_best_plans_and_changes": 56.5,
    "tests/test_compare.py::test_speedup_is_peak_times_mfu": 0.1,
    "tests/test_compare.py::test_swap_test_is_reported_both_ways": 0.1,
    "tests/test_compare.py::test_json_is_stable_and_has_no_timings": 25.5,
    "tests/test_compare.py::test_compare_plot_is_a_png": 1.2,
    # fifth round (2026-12-05, fifth session: the default run took 285 s on a fresh clone beside the slow
    # step): a DeepSeek-V3 oracle case (Kimi K2, the same MLA MoE architecture, stays on GB200), one HF family
    # search (six stay) and one bounds case (the dense and DeepSeek-V3 ones stay)
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[deepseek-v3-gb300-nvl72-512]": 8.9,
    "tests/test_hf_families.py::test_search_returns_plans[kimi-k2.5-gb200-nvl72-256-1024]": 14.2,
    "tests/test_search_space.py::test_bounds_never_exceed_what_the_tables_give[qwen3-30b-a3b-h100]": 7.0,
    # and after it the default run measured 261 s alone (limit 240): two more oracle cases (eight stay), two
    # more HF families (four stay), and the walk's first-plan check on the default command (its status-line
    # and --top tests stay)
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[mixtral-8x22b-h200-64]": 16.1,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[llama3.1-70b-b200-128]": 5.7,
    "tests/test_hf_families.py::test_search_returns_plans[glm-4.5-air-h100-64-256]": 12.9,
    "tests/test_hf_families.py::test_search_returns_plans[gemma-3-27b-h100-32-128]": 7.3,
    "tests/test_search_walked_order.py::test_the_search_first_plan_is_the_walks_best": 10.1,
    # sixth round (2026-12-05, sixth session: the default run measured 254 s alone on a fresh clone, limit
    # 240): parametrized cases whose siblings stay in the default run (five searched jobs export and read
    # back, seven oracle cases with Kimi K2 for the MLA MoE on GB200, three HF families, the other published
    # plans, the other table cases)
    "tests/test_export_readback.py::test_searched_top_plans_export_and_read_back_unchanged[deepseek-v3-h100-1024]": 6.1,
    "tests/test_export_readback.py::test_searched_top_plans_export_and_read_back_unchanged[llama3.1-405b-b200-512]": 8.0,
    "tests/test_export_readback.py::test_searched_top_plans_export_and_read_back_unchanged[kimi-k2-h200-512]": 4.3,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle[qwen3-235b-a22b-gb200-nvl72-256]": 4.9,
    "tests/test_hf_families.py::test_search_returns_plans[phi-4-h100-16-64]": 5.7,
    "tests/test_search_published.py::test_search_fix_returns_the_published_plan_or_a_faster_one_with_explains_numbers"
    "[zoo-qwen3-235b-h100-256gpu-bf16-a2a-intranode-ep8-pp32]": 3.5,
    "tests/test_cost_tables.py::test_table_entries_equal_the_one_plan_composition[moe-gqa-b200-order]": 6.5,
    # seventh round (2026-12-06, testspeed session: the default run measured 283 s alone, limit 240; most of
    # the cut is shared fixtures and smaller spaces, these two moved): the two issue-39 runs are searched
    # again by the slow all-runs test, and test_the_search_never_loses_to_the_recipe_unsaid_on_a_subset checks
    # the same rule on seven runs; Kimi K2 (the same MLA MoE) on GB200 exports and reads back in the default run
    "tests/test_validate_search.py::test_the_search_never_loses_to_a_recipe_inside_its_space": 4.3,
    "tests/test_export_readback.py::test_searched_top_plans_export_and_read_back_unchanged[deepseek-v3-gb200-nvl72-256]": 3.5,
    # eighth round (2026-12-06, ninth session: the default run measured 234 s alone, then 254 s twenty
    # minutes later, limit 240; 219 s after this round in that slower spell): parametrized cases whose
    # siblings stay (the dense local-spec table case, two wgrad recipes, the edited model's explain, export
    # and search), and the nothing-fits paragraph from the CLI (test_nothing_fits_says_what_binds and two
    # more check the same diagnosis through the API); test_search_published.py's SEARCH_EVERY moves more
    "tests/test_cost_tables.py::test_table_entries_equal_the_one_plan_composition[moe-gqa-h200-local]": 4.1,
    "tests/test_search_space_levers.py::test_the_model_never_credits_wgrad_less_than_on"
    "[zoo-qwen3-235b-h100-256gpu-bf16-a2a-intranode-ep8-pp32]": 4.0,
    "tests/test_model_overrides.py::test_compare_takes_the_edited_model": 3.8,
    "tests/test_search.py::test_nothing_fits_from_the_cli_is_one_paragraph_and_nonzero": 5.0,
}


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


# CI runs the slow step as two processes side by side on its 2 cores (.ci/run), each with
# PLANNER_TEST_SHARD=i/n: the selected tests, grouped where they share a module fixture (shard_group),
# are split by their measured times (SLOW_TESTS, MARKED_SLOW_S; 1 s for any other test), longest
# first onto the lighter shard, so that the shards end together (by module alone, the fresh-clone CI
# run of 865724f ended its shards at 717 and 1,181 s). The split is a pure function of the selection, so the n shards run
# every selected test exactly once (tests/test_conftest_shards.py).
MARKED_SLOW_S = {
    # the tests marked @pytest.mark.slow, call plus fixture setup, by node id or by function (every
    # parametrization alike), measured on the 2-core machine beside two other processes (pytest -m slow
    # --durations, 2026-12-05, sixth session: wall seconds, some 1.5x a quiet machine's)
    # the search mode over every bundled run (its module fixture, two worker processes): set so that the
    # fresh-clone CI run of e724a87 would have balanced (its shards ended at 881 s, with this at 400, and
    # 1,113 s: the other tests ran 1.99x their listed times beside the default run, this one 563 s)
    # (2026-12-06, seventh session: 231 s, then each search question once and the per-stage models
    # solved once each: the searches 257 -> 161 s of CPU in one process)
    "tests/test_validate_search.py::test_the_search_never_loses_to_the_recipe_unsaid_on_every_bundled_run": 150.0,
    # (these two and the first plan's walk measured beside one other process)
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle_with_every_schedule[deepseek-v3-any]": 53.7,
    "tests/test_search.py::test_cpsat_top_k_equals_the_oracle_with_every_schedule[qwen3-30b-a3b-any]": 37.0,
    # (measured 2026-12-06, seventh session, beside the other shard: the walk's slow jobs now search
    # --top 1 and 20 only, so about half the default's 89.8 s and mixtral's 47.3 s; the strict xfails
    # stop at their first search)
    "tests/test_search_optimal_walk.py::test_optimal_over_the_walk_and_one_first_plan_for_every_top[default]": 45.0,
    "tests/test_search_optimal_walk.py::test_optimal_over_the_walk_and_one_first_plan_for_every_top[mixtral-8x22b-h200]": 24.0,
    "tests/test_search_optimal_walk.py::test_optimal_over_the_walk_and_one_first_plan_for_every_top[qwen3-30b-h100-dualpipe]": 45.8,
    "tests/test_search_optimal_walk.py::test_optimal_over_the_walk_and_one_first_plan_for_every_top[llama3.1-70b-b200]": 38.1,
    "tests/test_search_optimal_walk.py::test_optimal_over_the_walk_and_one_first_plan_for_every_top[deepseek-v2-h800]": 17.2,
    # four of six tiny configurations now (test_gpu_harness.HARNESS_TINY)
    "tests/test_gpu_harness.py::test_harness_runs_megatron_on_the_cpu": 49.0,
    "tests/test_gpu_harness.py::test_harness_runs_megatron_in_parallel_on_the_cpu": 51.0,
    "tests/test_gpu_harness.py::test_harness_diagnostics_on_the_cpu": 20.9,
    "tests/test_rank_one_stable.py::test_the_first_plan_is_the_same_for_every_top": 30.0,
    "tests/test_rank_one_stable.py::test_the_first_plan_is_the_same_for_every_top[llama3.1-70b-h100-64-megatron]": 48.2,
    "tests/test_rank_one_stable.py::test_the_first_plan_is_the_same_for_every_top[qwen3-30b-a3b-h100-16-megatron]": 42.7,
    "tests/test_rank_one_stable.py::test_the_first_plan_is_the_same_for_every_top[mixtral-8x7b-h100-32-megatron]": 30.5,
    "tests/test_rank_one_stable.py::test_the_first_plan_is_the_same_for_every_top[qwen3-30b-a3b-gb200-nvl72-64-any]": 9.5,
    "tests/test_memory_margin_default.py::test_quick_start_first_plan_leaves_the_margin_free": 25.9,
    # (2026-12-06, eighth session: two searches, 7.1 and 2.5 s alone)
    "tests/test_rank_one_stable.py::test_a_max_that_keeps_the_first_tie_group_keeps_the_first_plan": 15.0,
    "tests/test_ties_brute_force.py::test_the_first_plan_is_the_brute_force_first_groups_most_robust": 110.0,
}
SHARD_ENV = "PLANNER_TEST_SHARD"


def measured_seconds(nodeid: str) -> float:
    """A test's measured time (s) for the shard split: SLOW_TESTS, else MARKED_SLOW_S by node id or
    by its function, else 1 s."""
    if nodeid in SLOW_TESTS:
        return SLOW_TESTS[nodeid]
    return MARKED_SLOW_S.get(nodeid, MARKED_SLOW_S.get(nodeid.split("[")[0], 1.0))


def shard_of(groups: dict[str, str], count: int) -> dict[str, int]:
    """Each node id's shard (0..count-1), given its group (``groups``: node id -> group; the tests of
    one group share a fixture and go together): the groups longest first onto the shard with the least
    time so far (ties: the lower shard; equal times: group name order)."""
    weight: dict[str, float] = {}
    for nodeid, group in groups.items():
        weight[group] = weight.get(group, 0.0) + measured_seconds(nodeid)
    load = [0.0] * count
    where: dict[str, int] = {}
    for group in sorted(weight, key=lambda g: (-weight[g], g)):
        i = min(range(count), key=lambda k: (load[k], k))
        where[group] = i
        load[i] += weight[group]
    return {nodeid: where[group] for nodeid, group in groups.items()}


def shard_group(item) -> str:
    """The test's module when it uses a fixture of that module wider than one test (the search mode's
    all-runs rows, compare's five systems: computed once per module, so its tests stay together),
    else the test itself."""
    module = item.nodeid.split("::")[0]
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    wide = any(d.scope != "function" and d.baseid == module for ds in defs.values() for d in ds)
    return module if wide else item.nodeid


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' (1 <= i <= n) -> (i - 1, n); a malformed value is a usage error that says the form."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        index = count = 0
    if not 1 <= index <= count:
        raise pytest.UsageError(f"{SHARD_ENV}={text!r}: expected i/n with 1 <= i <= n, e.g. 1/2.")
    return index - 1, count


class _Shard:
    """The shard selection, a plugin of its own (a module holds one implementation per hook name)."""

    def __init__(self, index: int, count: int):
        self.index, self.count = index, count

    @pytest.hookimpl(trylast=True)  # after the -m/-k selection: shard what is selected
    def pytest_collection_modifyitems(self, config, items):
        shard = shard_of({item.nodeid: shard_group(item) for item in items}, self.count)
        config.hook.pytest_deselected(items=[item for item in items if shard[item.nodeid] != self.index])
        items[:] = [item for item in items if shard[item.nodeid] == self.index]


def pytest_configure(config):
    text = os.environ.get(SHARD_ENV)
    if text:
        config.pluginmanager.register(_Shard(*parse_shard(text)), "planner-test-shard")
