"""`planner validate --search`: each bundled run searched with its published degrees pinned, never
losing to the recipe's own plan without a named reason, and issue 39's acceptance as it stands."""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from planner.specs.plan import Plan
from planner.validate import PUBLISHED_RUNS
from planner.validate.evaluate import evaluate_run, evaluate_runs
from planner.validate.searched import (
    LOSS_TOLERANCE, PINNED, SearchedRun, build_search, changed_keys, outside_space, pinned_fix, search_run,
    search_markdown, search_runs, search_text, summarize_search, targets_met,
)
from tests._published import published_runs

SUBSET = (
    "llama3-405b-8k-h100-16384gpu",                 # dense / Hopper / bf16, Megatron, a pinned layout
    "mb2511-llama3-8b-b200-fp8cs-8gpu",             # dense / Blackwell / fp8: bf16 gradient reduction, fp8 gather
    "mb2602-qwen3-235b-a22b-gb300-fp8mx-256gpu",    # MoE / Blackwell / fp8
    "zoo-qwen3-235b-h100-256gpu-bf16-deepep-tp4-pp8-ep8",  # MoE / Hopper / bf16
    "mb2606-gpt-oss-120b-gb300-fp8mx-64gpu",        # MoE / Blackwell / fp8: its recipe's ep_overlap=wgrad
    "tt-llama31-8b-h100-8gpu-fsdp-bf16",            # torchtitan
    "tt-llama31-8b-h100-8gpu-fsdp-compile-float8",  # torchtitan fp8 on a TOML-era release (0.1.0)
)
"""A representative subset for the default run (a few seconds): each class the bundled runs span
but one, both launchers, a search that wins, one that ties and one that loses for a named reason."""


def _runs(names=None):
    return [r for r in published_runs() if names is None or r.name in names]


def _never_loses_unexplained(rows: list[SearchedRun]) -> None:
    for s in rows:
        if s.status == "not searched":
            continue
        if s.lost:
            assert s.losses, (f"{s.name}: the search's best ({s.best_plan}) is predicted {s.gain} below the recipe "
                              f"({s.recipe.plan}), whose plan is in the search's space: a search defect")
        else:
            assert s.searched and s.gain is not None and s.gain >= -LOSS_TOLERANCE
        if s.searched:
            best, recipe = Plan.parse(s.best_plan), Plan.parse(s.recipe.plan)
            for k in PINNED:  # the published degrees are kept
                assert getattr(best, k) == getattr(recipe, k) or getattr(recipe, k) is None, (s.name, k)


@pytest.fixture(scope="module")
def all_rows():
    """Every bundled run searched (8-11 minutes on 2 cores): computed once for the slow tests that
    read it (the CI's slow step ran it twice)."""
    return search_runs(evaluate_runs(_runs()), jobs=2)


@pytest.fixture(scope="module")
def subset_rows():
    results = [evaluate_run(r) for r in _runs(set(SUBSET))]
    assert len(results) == len(SUBSET)
    return search_runs(results)


def test_several_jobs_search_the_same_rows_in_the_same_order(subset_rows):
    """--jobs: worker processes give each run the row one process gives it, in the runs' order, with
    the caller's recipe object (the CI's slow step and planner results search with two or more)."""
    names = ("mb2511-llama3-8b-b200-fp8cs-8gpu", "tt-llama31-8b-h100-8gpu-fsdp-bf16")
    results = [evaluate_run(r) for r in _runs(set(names))]
    rows = search_runs(results, jobs=2)
    assert [s.name for s in rows] == [r.name for r in results]
    assert all(s.recipe is r for s, r in zip(rows, results))
    one = {s.name: s for s in subset_rows}
    for s in rows:
        assert s.to_json() == one[s.name].to_json() and s.question == one[s.name].question


def test_the_search_never_loses_to_the_recipe_unsaid_on_a_subset(subset_rows):
    _never_loses_unexplained(subset_rows)
    by = {s.name: s for s in subset_rows}
    # Where the search keeps Megatron's defaults (fp32 gradient reduction, bf16 parameter gather),
    # the recipe's bf16/fp8 is named as the reason it loses; where it searches them, it does not lose.
    lost = by["mb2511-llama3-8b-b200-fp8cs-8gpu"]
    assert any("grad_reduce=bf16" in why for why in lost.losses) or not lost.lost
    # The search tries ep_overlap=wgrad where the release has --delay-wgrad-compute: a recipe's wgrad
    # is never a reason it loses.
    wgrad = by["mb2606-gpt-oss-120b-gb300-fp8mx-64gpu"]
    assert "wgrad" in wgrad.space["levers"]["ep_overlap"]
    assert not any("ep_overlap" in why for why in wgrad.losses)
    # torchtitan 0.1.0 names Float8 as a converter in the job file: 0.3.0's config_registry rule
    # (torchtitan-fp8) is not its, so the run is searched with its release and never loses.
    fp8 = by["tt-llama31-8b-h100-8gpu-fsdp-compile-float8"]
    assert fp8.recipe.software == "torchtitan-0.1.0"
    assert fp8.searched and not fp8.lost and Plan.parse(fp8.best_plan).precision == "fp8"
    assert by["llama3-405b-8k-h100-16384gpu"].gain >= -LOSS_TOLERANCE


IN_SPACE_SINCE_ISSUE_39 = (
    "mb2606-deepseek-v3-gb200-fp8mx-256gpu",      # recompute=mla_up_proj, ep_overlap=wgrad, full-iteration graphs
    "mb2608-qwen3-235b-a22b-gb300-fp8mx-256gpu",  # ep_overlap=wgrad, full-iteration graphs (Bridge 0.6)
)
"""Recipes the search lost to (issue 39's list) whose plan, or one at least as good, is in its space now."""


def test_the_search_never_loses_to_a_recipe_inside_its_space():
    """Issue 39's acceptance on two runs the search used to lose (the slow test below runs every
    bundled run): their recipe's levers are in the space, so the search's first plan is predicted at
    least as fast as the recipe's."""
    rows = search_runs([evaluate_run(r) for r in _runs(set(IN_SPACE_SINCE_ISSUE_39))])
    assert len(rows) == len(IN_SPACE_SINCE_ISSUE_39)
    for s in rows:
        assert s.searched and s.gain is not None and s.gain >= -LOSS_TOLERANCE and not s.losses, (s.name, s.gain, s.losses)


@pytest.mark.slow
def test_the_search_never_loses_to_the_recipe_unsaid_on_every_bundled_run(all_rows):
    _never_loses_unexplained(all_rows)


def test_the_fix_pins_the_published_degrees_and_layout_only():
    plan = Plan.parse("tp=2,pp=4,vpp=2,ep=8,etp=1,mbs=2,recompute=full,layout=Et|(tt|)*7L")
    assert pinned_fix(plan) == "tp=2,cp=1,pp=4,vpp=2,ep=8,etp=1,layout=Et|(tt|)*7L"
    assert pinned_fix(Plan.parse("tp=8,mbs=4")) == "tp=8,cp=1,pp=1,vpp=1,ep=1"


def test_a_recipe_value_outside_the_space_is_named_and_one_inside_is_not():
    space = {"degrees": {"mbs": [1, 2]}, "schedules": ["default"],
             "levers": {"recompute": ["none", "full"], "moments": ["fp32"]}}
    inside = {"tp": 2, "mbs": 2, "recompute": "full", "moments": "fp32", "grad_reduce": "fp32"}
    assert outside_space(inside, space, {**inside, "recompute": "none"}) == []
    outside = {**inside, "mbs": 4, "moments": "bf16", "grad_reduce": "bf16", "schedule": "dualpipe"}
    named = " ".join(outside_space(outside, space, inside))
    for key in ("mbs=4", "moments=bf16", "schedule=dualpipe", "grad_reduce=bf16 (the search does not vary"):
        assert key in named
    assert changed_keys({"tp": 2, "mbs": 1, "schedule": None}, {"tp": 2, "mbs": 2, "schedule": None}) == {"mbs": [1, 2]}


def test_an_unevaluated_run_is_not_searched_and_says_why():
    run = next(r for r in _runs() if r.not_evaluable)
    s = search_run(evaluate_run(run))
    assert s.status == "not searched" and "not evaluated" in s.reason and not s.lost


def test_cli_search_json_markdown_and_text(capsys):
    name = "llama3-405b-8k-h100-16384gpu"
    assert main(["validate", str(PUBLISHED_RUNS), "--only", name, "--search", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    run = report["runs"][0]
    assert report["mode"] == "search" and run["name"] == name and run["status"] == "searched"
    assert run["fix"].startswith("tp=8,cp=1,pp=16,vpp=2") and "layout=" in run["fix"]
    assert run["error"] == pytest.approx(run["best"]["tokens_per_s_per_gpu"] / run["measured_tokens_per_s_per_gpu"] - 1,
                                         rel=1e-4, abs=1e-5)
    assert run["gain"] == pytest.approx(run["best"]["tokens_per_s_per_gpu"] / run["recipe_tokens_per_s_per_gpu"] - 1,
                                        rel=1e-4, abs=1e-5)
    assert report["summary"]["all"]["n"] == 1
    md = search_markdown(report, "planner validate --search --markdown")
    assert "# Published runs, searched" in md and name in md and "Issue 39's acceptance" in md
    assert name in search_text(report)
    assert main(["validate", str(PUBLISHED_RUNS), "--only", name, "--search", "--plot", "x.png"]) == 2
    assert "--plot" in capsys.readouterr().err


@pytest.mark.slow
def test_issue_39_acceptance_in_search_mode_as_it_stands(all_rows):
    """Issue 39: median |signed error| <= 10 %, each class's median within +-10 %, at most three runs
    beyond +-25 %, each with its mechanism suspected. NOT met yet (results/validation/published-runs-search.md):
    this asserts the measured values, so a change that moves them shows here; turn it into the
    acceptance's own assertions once they hold."""
    rows = all_rows
    s = summarize_search(rows)
    met = targets_met(s)
    assert all(why and why != "unknown" for _, _, why in s["beyond"])  # every run beyond +-25 % has a mechanism
    # Measured with main at 3475733 (grad_reduce, param_gather and moments searched): median |e| 10.8 %,
    # class medians from -1.6 % (dense / Hopper / fp8) to +53.5 % (MoE / Hopper / fp8), 38 runs beyond +-25 %.
    # At 61284e1 (MoE full-iteration graphs and ep_overlap=wgrad searched, the 18 torchtitan FP8 runs counted
    # under their release): 133 runs, median |e| 16.1 %, signed +13.2 %, 53 beyond +-25 %.
    # At a6a6ccf (one vote per search question, at its best measured): 131 runs ask 120 questions; per
    # question median |e| 13.1 %, signed +9.1 %, 36 beyond +-25 % (per run: 13.1 %, +8.9 %, 39 beyond).
    assert met == {"median |signed error| <= 10%": False, "every class median within +-10%": False,
                   "at most 3 questions beyond +-25%": False}
    assert 0.05 <= s["all"].median_abs <= 0.18
    assert 10 <= len(s["beyond"]) <= 60
    assert s["all"].n < s["per_run"]["all"].n  # the tuning series' untuned steps share their tuned step's question
    report = build_search(rows, "published_runs.yaml")
    assert report["counts"]["searched"] + report["counts"]["search_failed"] + report["counts"]["not_searched"] == \
        report["counts"]["runs"]


def test_the_gain_is_decomposed_one_changed_key_at_a_time():
    """Each key the search's plan changes is applied alone to the recipe's plan and evaluated as the
    whole plans are: full recompute alone costs time, a key the best plan keeps is not listed."""
    from planner.cost.evaluate import plan_evaluation
    from planner.cost.setup import resolve_setup
    from planner.validate.evaluate import resolve_run
    from planner.validate.searched import lever_decomposition

    run = _runs({"mb2511-llama3-8b-b200-fp8cs-8gpu"})[0]
    model, hw, job, plan, assumptions, _ = resolve_run(run)
    setup = resolve_setup(model, hw, job, plan, assumptions)
    best = setup.plan.replace(recompute="full", moments="bf16" if str(setup.plan.moments) == "fp32" else "fp32")
    d = lever_decomposition(setup, best)
    assert [lv["lever"] for lv in d["levers"]] == ["recompute", "moments"]
    full = d["levers"][0]
    assert full["from"] == str(setup.plan.recompute) and full["to"] == "full" and full["gain"] < 0
    alone = plan_evaluation(resolve_setup(model, hw, job, setup.plan.replace(recompute="full"), assumptions))
    assert full["gain"] == pytest.approx(alone["time"]["tokens_per_s_per_gpu"] / d["recipe"]["tokens_per_s_per_gpu"] - 1,
                                         rel=1e-4)
    assert d["recipe"]["fits"] and d["recipe"]["headroom_gib"] > 0 and d["best"]["headroom_gib"] > d["recipe"]["headroom_gib"]


def test_the_lever_table_pools_each_change_over_counted_runs():
    from planner.validate.searched import lever_table

    def row(name, *levers):
        return {"name": name, "decomposition": {"levers": [dict(zip(("lever", "from", "to", "gain", "fits"), lv))
                                                           for lv in levers]}}
    rows = [row("a", ("mbs", "1", "2", 0.10, True), ("moments", "fp32", "bf16", 0.0, False)),
            row("b", ("mbs", "1", "2", 0.50, False)), row("c", ("mbs", "1", "2", 0.20, True)),
            row("d", ("mbs", "1", "4", 0.90, True))]
    table = {(t["lever"], t["from"], t["to"]): t for t in lever_table(rows)}
    assert table["mbs", "1", "2"] == {"lever": "mbs", "from": "1", "to": "2", "runs": 3, "median_gain": 0.2,
                                      "max_gain": 0.5, "max_run": "b", "not_fitting": 1}
    assert table["mbs", "1", "4"]["runs"] == 1 and table["moments", "fp32", "bf16"]["not_fitting"] == 1
    # The most gain credited over all runs first: 1 -> 4 (0.9 on one run) before 1 -> 2 (0.8 on three).
    assert [(t["lever"], t["to"]) for t in lever_table(rows)] == [("mbs", "4"), ("mbs", "2"), ("moments", "bf16")]


def test_a_search_gain_is_checked_against_a_run_of_the_same_job_that_took_it():
    """The later recipe of the same job that takes the search's changes is found, and what it measured
    is set beside the search's gain; a run of another job (here another precision) is not."""
    from types import SimpleNamespace

    from planner.validate.searched import measured_elsewhere

    def row(name, plan, measured, predicted, precision="fp8", best=None):
        run = SimpleNamespace(model="m", hardware="h", gpus=8, global_batch=64, seq_len=4096, precision=precision)
        recipe = SimpleNamespace(run=run, evaluated=True, counted=True, measured={"tokens_per_s_per_gpu": measured},
                                 predicted={"tokens_per_s_per_gpu": predicted}, name=name)
        s = SearchedRun(recipe, "searched", recipe_plan_json=plan, best_plan_json=best or plan,
                        best={"tokens_per_s_per_gpu": predicted * 2})
        s.decomposition = {"levers": []} if best else {}
        return s
    old = row("old", {"tp": 1, "ep": 8, "mbs": 1, "dispatcher": "alltoall"}, 100, 110,
              best={"tp": 1, "ep": 8, "mbs": 4, "dispatcher": "hybridep"})
    later = row("later", {"tp": 1, "ep": 8, "mbs": 4, "dispatcher": "hybridep"}, 290, 300)
    other = row("bf16", {"tp": 1, "ep": 8, "mbs": 4, "dispatcher": "hybridep"}, 500, 500, precision="bf16")
    moved = row("tp2", {"tp": 2, "ep": 8, "mbs": 4, "dispatcher": "hybridep"}, 500, 500)
    (e,) = measured_elsewhere([old, later, other, moved])
    assert e["other"] == "later" and e["taken"] == ["mbs", "dispatcher"]
    assert e["measured_gain"] == pytest.approx(1.9) and e["predicted_gain"] == pytest.approx(300 / 110 - 1, rel=1e-5)
    assert e["search_gain"] == pytest.approx(1.0)
    assert measured_elsewhere([old, other, moved]) == []


def test_a_run_beyond_25_percent_names_the_run_that_measured_the_search_s_gain():
    """A search gain that a later recipe of the same job measured is said so, not called "a gain
    nobody measured" (Qwen3-30B-A3B on 8 B200: the search's mbs 1 -> 4 and HybridEP, +177 %
    predicted, were measured +192 % by the 26.04 recipe)."""
    from types import SimpleNamespace

    from planner.validate.searched import suspected

    run = SimpleNamespace(not_modeled={})
    recipe = SimpleNamespace(run=run, error=0.10, evaluated=True, bottleneck="host", predicted={"tokens_per_s_per_gpu": 100.0},
                             measured={"tokens_per_s_per_gpu": 91.0}, name="old")
    s = SearchedRun(recipe, "searched", recipe_plan_json={"mbs": 1, "dispatcher": "alltoall"},
                    best_plan_json={"mbs": 4, "dispatcher": "hybridep"}, best={"tokens_per_s_per_gpu": 277.0})
    alone = suspected(s)
    assert alone.startswith("the search's own plan, predicted +177% over the recipe (mbs 1 -> 4, dispatcher "
                            "alltoall -> hybridep)") and "a gain nobody measured" in alone
    told = suspected(s, {"name": "old", "other": "later", "taken": ["mbs", "dispatcher"], "measured_gain": 1.918,
                         "predicted_gain": 1.764, "search_gain": 1.77})
    assert "nobody" not in told
    assert "later, a recipe of the same job with mbs, dispatcher as the search's, measured +191.8% over this run" in told
    assert "(planner's recipes: +176.4%)" in told


def _voting_row(name, question, measured, best=150.0, klass="dense / Hopper / bf16"):
    """A searched run as summarize_search reads it: its question, what it measured, the best plan's prediction."""
    from types import SimpleNamespace

    run = SimpleNamespace(model="m", hardware="h", gpus=8, global_batch=64, seq_len=4096, precision="bf16",
                          not_modeled={})
    recipe = SimpleNamespace(run=run, name=name, evaluated=True, counted=True, klass=klass, error=best / measured - 1,
                             subset="validation", plan="tp=1",
                             bottleneck="compute", measured={"tokens_per_s_per_gpu": measured},
                             predicted={"tokens_per_s_per_gpu": best})
    return SearchedRun(recipe, "searched", recipe_plan_json={"tp": 1}, best_plan_json={"tp": 1},
                       best={"tokens_per_s_per_gpu": best}, best_plan="tp=1", question=question)


def test_one_search_question_votes_once_at_the_best_measured():
    """Two runs asking the search one question (an untuned step and the tuned one): one vote, against
    what the tuned run measured; each run keeps its row, the untuned one naming the run that votes;
    the per-run figures are kept beside. A third run asking another question votes for itself."""
    from planner.validate.searched import question_votes

    untuned, tuned, other = _voting_row("step03", "q", 60.0), _voting_row("step09", "q", 120.0), \
        _voting_row("other", "q2", 100.0)
    rows = [untuned, tuned, other]
    assert question_votes(rows) == {"step03": "step09", "step09": "step09", "other": "other"}
    s = summarize_search(rows)
    assert s["all"].n == 2 and s["per_run"]["all"].n == 3
    assert s["all"].worst_run == "other" and s["all"].worst == pytest.approx(0.5)
    assert s["all"].median_signed == pytest.approx((150 / 120 - 1 + 0.5) / 2)
    assert [n for n, _, _ in s["beyond"]] == ["other"]                 # +25.0 % is not beyond; +150 % untuned is not a vote
    assert s["per_run"]["beyond"] == ["step03", "other"]
    report = build_search(rows, "synthetic.yaml")
    assert report["counts"]["questions"] == 2 and report["summary"]["per_run"]["all"]["n"] == 3
    by = {r["name"]: r for r in report["runs"]}
    assert by["step03"]["votes"] is False and by["step03"]["voter"] == "step09" and by["step09"]["votes"] is True
    md = search_markdown(report, "planner validate --search --markdown")
    assert "| step03 | -> step09 |" in md and "one vote per search question" in md.lower()
    assert "-> step09" in search_text(report)
    # A tie in measured: the later run in the file votes, as a series' later run counts in recipe mode.
    assert question_votes([_voting_row("a", "q", 100.0), _voting_row("b", "q", 100.0)])["a"] == "b"


def test_a_pinned_degree_or_release_makes_another_question_and_a_lever_the_search_picks_does_not():
    """The question is what the search is handed: another pinned degree (tp) or another software
    release is another question; a lever the search chooses itself (mbs) is not, nor one planner
    does not model (torch.compile: the compiled and eager torchtitan runs ask one question)."""
    from planner.validate.searched import question_of, search_inputs

    eager, compiled = _runs({"tt-llama31-8b-h100-8gpu-fsdp-bf16", "tt-llama31-8b-h100-8gpu-fsdp-compile-bf16"})
    q = lambda run: question_of(search_inputs(evaluate_run(run))[0])  # noqa: E731
    base = q(eager)
    assert q(compiled) == base
    assert q(eager.model_copy(update={"plan": eager.plan.replace("mbs=2", "mbs=1"), "name": "x"})) == base
    assert q(eager.model_copy(update={"plan": eager.plan.replace("tp=1", "tp=2")})) != base
    assert q(eager.model_copy(update={"software_profile": "torchtitan-0.2.2"})) != base


def test_the_suspected_line_names_the_lever_credited_most_or_why_the_search_lost():
    """A search gain beyond +-25 % names the change the model credits most alone (the first suspect
    of an over-credit; gpt-oss-120b on B200: ep_overlap off -> wgrad, +37 % alone); a search that
    lost to the recipe (DeepSeek-V3's DualPipe run) says why, not "a gain nobody measured"."""
    from types import SimpleNamespace

    from planner.validate.searched import suspected

    recipe = SimpleNamespace(run=SimpleNamespace(not_modeled={}), error=0.10, evaluated=True, bottleneck="GEMM",
                             predicted={"tokens_per_s_per_gpu": 100.0}, measured={"tokens_per_s_per_gpu": 91.0})
    gain = SearchedRun(recipe, "searched", recipe_plan_json={"mbs": 4, "ep_overlap": "off"},
                       best_plan_json={"mbs": 2, "ep_overlap": "wgrad"}, best={"tokens_per_s_per_gpu": 160.0})
    gain.decomposition = {"levers": [{"lever": "mbs", "from": "4", "to": "2", "gain": -0.07},
                                     {"lever": "ep_overlap", "from": "off", "to": "wgrad", "gain": 0.37},
                                     {"lever": "x", "from": "a", "to": "b", "unevaluated": "breaks a rule"}]}
    assert suspected(gain).endswith("; credited most alone: ep_overlap off -> wgrad +37%")
    lost = SearchedRun(recipe, "searched", recipe_plan_json={"schedule": "dualpipe"},
                       best_plan_json={"schedule": None}, best={"tokens_per_s_per_gpu": 60.0},
                       losses=["the recipe uses schedule=dualpipe (the search tries default), outside the search's space"])
    told = suspected(lost)
    assert told.startswith("the search lost to the recipe: its plan is predicted -40%") and "nobody" not in told
    assert "schedule=dualpipe (the search tries default)" in told


def test_runs_asking_the_same_question_are_searched_once(monkeypatch):
    """search_runs searches each search question once (question_of): a run given twice gets two rows,
    equal but for the recipe object, from one search."""
    from planner.validate.searched import SearchInputs

    calls = []
    search = SearchInputs.search

    def counted(self):
        calls.append(1)
        return search(self)

    monkeypatch.setattr(SearchInputs, "search", counted)
    result = evaluate_run(_runs({"mb2511-llama3-8b-b200-fp8cs-8gpu"})[0])
    rows = search_runs([result, result])
    assert len(calls) == 1 and len(rows) == 2
    assert rows[0].to_json() == rows[1].to_json() and rows[0].best_plan
