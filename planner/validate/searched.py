"""`planner validate --search`: each published run searched as a new user would, its published
degrees pinned, against what it measured and against the recipe's own plan.

For every evaluated run (its recipe predicted once, by :mod:`planner.validate.evaluate`): the search
(:func:`planner.search.driver.run_search`, its public entry point) on the run's model, hardware,
GPU count, global batch, sequence length, assumptions and software release, with the published
degrees pinned as ``--fix`` pins them (tp, cp, pp, vpp, ep, etp and the layout where the recipe has
one) and every other lever left to the search, top 1. Whatever levers the search offers are
searched: nothing here names a lever.

Per run: the best plan, its predicted tokens/s per GPU, the recipe's, the measured, the signed
error (best predicted / measured - 1, validate's convention) and the gain (best / recipe - 1).
Where the gain is negative the search lost to the recipe; :func:`loss_reasons` names why (the
recipe's plan breaks a launcher rule or does not fit by planner's memory model, or uses a lever
value or schedule outside the search's space); a loss with no such reason is a search defect and
is reported as one. Where the signed error passes +-25 %, :func:`suspected` names the larger of
its two factors (the cost model on the published plan; the search's own changes).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel

from planner import __version__
from planner.cost.evaluate import plan_evaluation
from planner.cost.setup import resolve_setup
from planner.errors import PlannerError
from planner.launchers.registry import launcher, launcher_violations
from planner.parallel import fork_map
from planner.search.driver import Options, run_search
from planner.search.space import Limits
from planner.specs.catalog import load_software
from planner.validate.evaluate import RunResult, architecture, resolve_run
from planner.validate.summary import Stats, class_order, stats_of
from planner.validate.summary import md_cell as _cell
from planner.validate.summary import pct_text as _pct

PINNED = ("tp", "cp", "pp", "vpp", "ep", "etp")
"""The published degrees the search keeps (the issue's user pins these with --fix; the layout too
where the recipe has one). dp and edp follow from them and the GPU count."""

LOSS_TOLERANCE = 1e-4
"""Relative shortfall below which the search's plan counts as fast as the recipe's: the search
ranks by its integer tables (one microsecond per term, planner.search.driver.ESTIMATE_TOLERANCE)."""

DECOMPOSE_ABOVE = 0.10
"""The gain over the recipe above which a run's search plan is decomposed lever by lever (issue 39:
NVIDIA's recipes are tuned, so a predicted gain this large is most likely a lever the model
over-credits, or one whose memory lets a plan fit that does not)."""

BEYOND = 0.25
TARGETS = {"median_abs": 0.10, "class_median": 0.10, "beyond": BEYOND, "max_beyond": 3}
"""Issue 39's acceptance for search mode on the bundled runs: median |signed error| <= 10 %, each
class's median signed error within +-10 %, at most three runs beyond +-25 %, each with the
mechanism suspected."""


@dataclass
class SearchedRun:
    """One run searched with its published degrees pinned (or why it was not)."""

    recipe: RunResult
    status: str
    """'searched', 'search failed' (the search refused or found nothing: ``reason``) or 'not
    searched' (the recipe side was not evaluated)."""
    reason: str | None = None
    fix: str | None = None
    """The --fix the search ran with."""
    target: str | None = None
    best_plan: str | None = None
    best: dict[str, Any] = field(default_factory=dict)
    """The best plan's predicted tokens_per_s_per_gpu, step_time_s, peak_reserved_gib."""
    recipe_plan_json: dict = field(default_factory=dict)
    best_plan_json: dict = field(default_factory=dict)
    space: dict = field(default_factory=dict)
    """The search's space (solver JSON ``space``: degrees, schedules, levers offered)."""
    losses: list[str] = field(default_factory=list)
    """Why the search could not find the recipe's plan, where it lost to it."""
    decomposition: dict = field(default_factory=dict)
    """Where the search gains more than :data:`DECOMPOSE_ABOVE`: :func:`lever_decomposition`."""
    seconds: float = 0.0
    """Wall time of the search (kept out of the JSON: the report is byte-stable)."""
    question: str | None = None
    """The search question it asked (:func:`question_of`; kept out of the JSON): runs with equal
    questions get the same answer from the search and vote once (:func:`question_votes`)."""

    @property
    def name(self) -> str:
        return self.recipe.name

    @property
    def searched(self) -> bool:
        return self.status == "searched"

    @property
    def recipe_tps(self) -> float | None:
        return self.recipe.predicted.get("tokens_per_s_per_gpu")

    @property
    def measured_tps(self) -> float | None:
        return self.recipe.measured.get("tokens_per_s_per_gpu")

    @property
    def error(self) -> float | None:
        """Best plan predicted / measured - 1 (tokens/s per GPU)."""
        if not self.searched or not self.measured_tps:
            return None
        return self.best["tokens_per_s_per_gpu"] / self.measured_tps - 1

    @property
    def gain(self) -> float | None:
        """How much faster than the recipe's plan planner predicts its own: best / recipe - 1."""
        if not self.searched or not self.recipe_tps:
            return None
        return self.best["tokens_per_s_per_gpu"] / self.recipe_tps - 1

    @property
    def lost(self) -> bool:
        """The search found nothing as fast as the recipe (or nothing at all, for a run whose recipe
        planner evaluates)."""
        if self.status == "search failed":
            return True
        g = self.gain
        return g is not None and g < -LOSS_TOLERANCE

    def to_json(self, elsewhere: dict | None = None, voter: str | None = None) -> dict:
        """The run's JSON; ``elsewhere``: its :func:`measured_elsewhere` entry, if any; ``voter``: the
        run that votes for its search question (:func:`question_votes`), if it is counted."""
        r = _r6
        out: dict[str, Any] = {"name": self.name, "status": self.status, "class": self.recipe.klass,
                               "subset": self.recipe.subset, "counted": self.recipe.counted and self.searched}
        if voter is not None:
            out["votes"] = voter == self.name
            out["voter"] = voter
        if self.reason:
            out["reason"] = self.reason
        if self.fix is not None:
            out["fix"] = self.fix
            out["target"] = self.target
            out["software"] = self.recipe.software
        if self.recipe.evaluated:
            out["recipe_plan"] = self.recipe.plan
            out["recipe_tokens_per_s_per_gpu"] = r(self.recipe_tps)
            out["measured_tokens_per_s_per_gpu"] = r(self.measured_tps)
            out["recipe_error"] = r(self.recipe.error)
        if self.searched:
            out.update(best_plan=self.best_plan, best={k: r(v) for k, v in self.best.items()},
                       error=r(self.error), gain=r(self.gain), changed=changed_keys(self.recipe_plan_json,
                                                                                     self.best_plan_json))
        if self.decomposition:
            out["decomposition"] = self.decomposition
        if self.lost:
            out["lost_to_recipe"] = True
            out["loss_reasons"] = list(self.losses)
        e = self.error
        if e is not None and abs(e) > BEYOND:
            out["suspected"] = suspected(self, elsewhere)
        return out


def _r6(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


# ---------------------------------------------------------------------------------------------
def pinned_fix(plan) -> str:
    """The --fix text that pins a plan's published degrees (and its layout where it has one), as a
    user would type it."""
    pairs = [f"{k}={getattr(plan, k)}" for k in PINNED if getattr(plan, k) is not None]
    if plan.layout:
        pairs.append(f"layout={plan.layout}")
    return ",".join(pairs)


def changed_keys(recipe: dict, best: dict) -> dict[str, list]:
    """The plan keys where the search's plan differs from the recipe's: key -> [recipe, best]."""
    keys = [k for k in best if k not in PINNED and k not in ("dp", "edp", "layout")]
    keys += [k for k in recipe if k not in best and k not in PINNED and k not in ("dp", "edp", "layout")]
    # A schedule the plan leaves unset is the launcher's default for its degrees.
    shown = lambda plan, k: plan.get(k) if k != "schedule" else plan.get(k) or "default"  # noqa: E731
    return {k: [shown(recipe, k), shown(best, k)] for k in dict.fromkeys(keys) if shown(recipe, k) != shown(best, k)}


def outside_space(recipe: dict, space: dict, best: dict | None = None) -> list[str]:
    """The recipe's plan keys whose value the search's space does not hold (space as the solver
    JSON's ``space``: degrees with mbs, schedules, levers). A plan key the space does not list as a
    lever is one the search leaves at its default: outside where the recipe's value differs from
    the best plan's (``best``)."""
    out = []
    degrees, levers = space.get("degrees", {}), space.get("levers", {})
    if "mbs" in degrees and recipe.get("mbs") not in degrees["mbs"]:
        out.append(f"mbs={recipe.get('mbs')} (the search tries {', '.join(map(str, degrees['mbs']))})")
    schedule = recipe.get("schedule") or "default"
    if space.get("schedules") and schedule not in space["schedules"]:
        out.append(f"schedule={schedule} (the search tries {', '.join(space['schedules'])})")
    for key, value in recipe.items():
        if key in PINNED or key in ("dp", "edp", "layout", "mbs", "schedule") or value is None:
            continue
        offered = levers.get(key)
        if offered is None:
            if best is not None and best.get(key) != value:
                out.append(f"{key}={value} (the search does not vary {key}: it keeps {best.get(key)})")
            continue
        if str(value) not in offered:
            out.append(f"{key}={value} (the search tries {', '.join(offered)})")
    return out


def loss_reasons(recipe: RunResult, recipe_plan: dict, space: dict, rule_breaks: list[str],
                 best_plan: dict | None = None) -> list[str]:
    """Why a search that lost could not find the recipe's plan (empty: the recipe's plan is in its
    space, so the loss is a search defect)."""
    out = [f"the recipe's plan breaks {b}" for b in rule_breaks]
    if recipe.predicted and not recipe.predicted.get("fits", True):
        out.append(f"planner's memory model puts the recipe's plan over the GPU's memory "
                   f"({recipe.predicted['peak_reserved_gib']:.1f} GiB reserved predicted), so the search cannot rank it")
    out += [f"the recipe uses {x}, outside the search's space" for x in outside_space(recipe_plan, space, best_plan)]
    return out


def suspected(s: SearchedRun, elsewhere: dict | None = None) -> str:
    """The mechanism suspected for a run beyond +-25 %: the larger of the error's two factors,
    1 + error = (recipe predicted / measured) x (best / recipe). ``elsewhere``: the run's
    :func:`measured_elsewhere` entry, where a bundled run of the same job took some of the search's
    changes: what it measured is said instead of "a gain nobody measured" (a gain a later recipe
    measured is no over-credit; the error then says this run's recipe left it on the table)."""
    re, g = s.recipe.error, s.gain
    if re is None or g is None:
        return "unknown"
    if abs(math.log1p(re)) >= abs(math.log1p(g)):
        what = (f"the cost model on the published plan itself: the recipe is predicted {100 * re:+.0f}% "
                f"(planner's bottleneck: {s.recipe.bottleneck})")
        nm = sorted(s.recipe.run.not_modeled)
        if re < 0 and nm:
            what += f"; the run uses optimizations planner does not model ({', '.join(nm)})"
        return what + f"; the search adds {100 * g:+.0f}%"
    changed = changed_keys(s.recipe_plan_json, s.best_plan_json)
    diff = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()) or "no key"
    if g < 0:
        # A loss is no over-credit: the search could not rank the recipe's plan, and its own is slower.
        why = "; ".join(s.losses) or "no reason named (a search defect)"
        return (f"the search lost to the recipe: its plan is predicted {100 * g:+.0f}% against the recipe's ({diff}) "
                f"because {why} (the recipe is predicted {100 * re:+.0f}%)")
    if elsewhere is None:
        measured = "a gain nobody measured"
    else:
        measured = (f"{elsewhere['other']}, a recipe of the same job with {', '.join(elsewhere['taken'])} as the "
                    f"search's, measured {_pct(elsewhere['measured_gain'])} over this run (planner's recipes: "
                    f"{_pct(elsewhere['predicted_gain'])})")
    return (f"the search's own plan, predicted {100 * g:+.0f}% over the recipe ({diff}): {measured} "
            f"(the recipe is predicted {100 * re:+.0f}%){_most_credited(s.decomposition)}")


def _most_credited(decomposition: dict) -> str:
    """The change the model credits most when applied alone (:func:`lever_decomposition`): the
    first suspect of an over-credit, said after a search gain ('' where none was decomposed)."""
    alone = [lv for lv in decomposition.get("levers", []) if lv.get("gain") is not None]
    if not alone:
        return ""
    lv = max(alone, key=lambda x: (x["gain"], x["lever"]))
    return f"; credited most alone: {lv['lever']} {lv['from']} -> {lv['to']} {100 * lv['gain']:+.0f}%"


def _fit_of(evaluation: dict) -> dict:
    """A plan evaluation's predicted tokens/s per GPU and whether (by how much) it fits."""
    mem = evaluation["memory"]
    return {"tokens_per_s_per_gpu": _r6(evaluation["time"]["tokens_per_s_per_gpu"]), "fits": bool(mem["fits"]),
            "headroom_gib": _r6(mem["headroom_bytes"] / 2**30)}


def lever_decomposition(setup, best_plan) -> dict:
    """The search's plan taken apart: each key where it differs from the recipe's plan applied alone
    to the recipe's plan, with the gain that one change is predicted to buy (its tokens/s per GPU
    over the recipe's - 1) and whether that plan fits; the recipe's and the best plan's fit beside.
    Every plan is evaluated the same way (planner.cost.evaluate.plan_evaluation), so a lever's gain
    is the model's credit for it alone; gains that multiply to far less than the whole point at an
    interaction instead. A change that cannot stand alone (it breaks a plan check) says why."""
    def evaluate(plan) -> dict:
        s = resolve_setup(setup.model, setup.hw, setup.job, plan, setup.assumptions)
        return _fit_of(plan_evaluation(s))

    recipe = _fit_of(plan_evaluation(setup))
    base = recipe["tokens_per_s_per_gpu"]
    levers = []
    for key, (was, now) in changed_keys(setup.plan.to_json(), best_plan.to_json()).items():
        row: dict[str, Any] = {"lever": key, "from": str(was), "to": str(now)}
        try:
            alone = evaluate(setup.plan.replace(**{key: getattr(best_plan, key)}))
        except PlannerError as exc:
            row["unevaluated"] = exc.paragraph().split(". ")[0]
        else:
            row.update(gain=_r6(alone["tokens_per_s_per_gpu"] / base - 1) if base else None,
                       fits=alone["fits"], headroom_gib=alone["headroom_gib"])
        levers.append(row)
    return {"recipe": recipe, "best": evaluate(best_plan), "levers": levers}


def lever_table(rows: list[dict]) -> list[dict]:
    """Per lever change (key, from -> to) over the decomposed runs: how many, the median and the
    largest gain the model credits it with alone (and on which run), how many of those one-change
    plans do not fit; the changes credited the most gain summed over the runs first."""
    by: dict[tuple[str, str, str], list[tuple[str, dict]]] = {}
    for r in rows:
        for lv in (r.get("decomposition") or {}).get("levers", []):
            if lv.get("gain") is not None:
                by.setdefault((lv["lever"], lv["from"], lv["to"]), []).append((r["name"], lv))
    out = []
    for (key, was, now), items in by.items():
        gains = [lv["gain"] for _, lv in items]
        worst_run, worst = max(items, key=lambda it: it[1]["gain"])
        out.append({"lever": key, "from": was, "to": now, "runs": len(items), "median_gain": _r6(statistics.median(gains)),
                    "max_gain": worst["gain"], "max_run": worst_run,
                    "not_fitting": sum(not lv["fits"] for _, lv in items), "total": sum(gains)})
    # The changes credited most over all runs first: the likeliest over-credits.
    out.sort(key=lambda x: (-x["total"], x["lever"], x["from"], x["to"]))
    return [{k: v for k, v in x.items() if k != "total"} for x in out]


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchInputs:
    """Exactly what :func:`search_run` hands :func:`planner.search.driver.run_search`, and nothing
    else: the search question a run asks. Its answer depends on these alone."""

    model: Any
    hw: Any
    job: Any
    options: Options
    assumptions: Any

    def search(self):
        return run_search(self.model, self.hw, self.job, self.options, assumptions=self.assumptions)


def search_inputs(recipe: RunResult, calibration: str | None = None):
    """(the search's inputs, the recipe's setup, its release) for an evaluated run: its model,
    hardware, job, assumptions and release, the published degrees pinned, top 1."""
    model, hw, job, plan, assumptions, _ = resolve_run(recipe.run)
    if calibration is not None:
        assumptions = assumptions.model_copy(update={"calibration": calibration})
    setup = resolve_setup(model, hw, job, plan, assumptions)
    profile = load_software(recipe.software) if recipe.software else None
    # Bridge's plans obey Megatron's rules: the search runs for the launcher whose rules apply.
    target = launcher(profile.launcher).rules_of if profile is not None else "megatron"
    # As `planner search` ranks (ties and families on): the plan judged is the first plan a user is shown.
    options = Options(target=target, top=1, limits=Limits.parse(pinned_fix(setup.plan), None), software=profile,
                      ties=True, families=True)
    return SearchInputs(model, hw, job, options, assumptions), setup, profile


def _canonical(x: Any) -> Any:
    """A value as plain JSON data, whatever spec or dataclass holds it (the question's text)."""
    if isinstance(x, BaseModel):
        return _canonical(x.model_dump(mode="json"))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _canonical(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): _canonical(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = [_canonical(v) for v in x]
        return sorted(items, key=repr) if isinstance(x, (set, frozenset)) else items
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


def question_of(inputs: SearchInputs) -> str:
    """The search question as text: every input the search reads (each field of
    :class:`SearchInputs`, so an input added there enters the question by itself), the model by its
    architecture (its names and provenance are read by no prediction, as in recipe mode's
    signature). Equal texts, equal answers."""
    parts = {f.name: _canonical(getattr(inputs, f.name)) for f in dataclasses.fields(inputs)}
    parts["model"] = _canonical(architecture(inputs.model))
    return json.dumps(parts, sort_keys=True)


def search_run(recipe: RunResult, calibration: str | None = None,
               answers: dict[str, Any] | None = None) -> SearchedRun:
    """The search for one evaluated run, its degrees pinned (or why it was not searched).
    ``answers`` (question text -> the search's result or its PlannerError), where given, is read
    before searching and written after: runs that ask the same question are searched once."""
    if not recipe.evaluated:
        return SearchedRun(recipe, "not searched", f"the recipe was not evaluated: {recipe.reason}")

    inputs, setup, profile = search_inputs(recipe, calibration)
    target = inputs.options.target
    fix = pinned_fix(setup.plan)
    out = SearchedRun(recipe, "searched", fix=fix, target=target, recipe_plan_json=setup.plan.to_json(),
                      question=question_of(inputs))
    breaks = [f"{v.rule} ({v.message.split('. ')[0].rstrip('.')})"
              for v in launcher_violations(setup, target=target, software=profile)]
    t0 = time.perf_counter()
    memo = answers if answers is not None else {}
    if out.question not in memo:
        try:
            memo[out.question] = inputs.search()
        except PlannerError as exc:
            memo[out.question] = exc
    found = memo[out.question]
    if isinstance(found, PlannerError):
        out.status, out.reason = "search failed", found.paragraph()
        out.losses = [f"the recipe's plan breaks {b}" for b in breaks]
        out.seconds = time.perf_counter() - t0
        return out
    out.seconds = time.perf_counter() - t0
    best = found.plans[0]
    ev = best.evaluation
    out.best_plan = best.plan.to_string()
    out.best_plan_json = best.plan.to_json()
    out.best = {"tokens_per_s_per_gpu": ev["time"]["tokens_per_s_per_gpu"], "step_time_s": ev["time"]["step_time_s"],
                "peak_reserved_gib": ev["memory"]["peak_bytes"] / 2**30}
    out.space = found.solver.get("space", {})
    if (out.gain or 0) > DECOMPOSE_ABOVE:
        out.decomposition = lever_decomposition(setup, best.plan)
    if out.lost:
        out.losses = loss_reasons(recipe, out.recipe_plan_json, out.space, breaks, out.best_plan_json)
    return out


def search_runs(results: list[RunResult], calibration: str | None = None,
                progress: Callable[[str], None] | None = None, jobs: int = 1) -> list[SearchedRun]:
    """Every run searched (the recipe side evaluated once, by the caller), with a progress line; with
    ``jobs`` > 1, that many worker processes search the runs side by side (each run's search is
    independent of the others; the rows come back in the runs' order, the same as with one job)."""
    say = progress or (lambda msg: None)
    todo = sum(r.evaluated for r in results)
    jobs = max(1, min(int(jobs), todo))
    count = [0]

    def done(i: int, row: SearchedRun) -> None:
        if results[i].evaluated:
            count[0] += 1
            say(f"searched {count[0]}/{todo}: {results[i].name}")

    # Runs that ask the same search question (question_of) go to one task, searched once: 149 runs
    # searched ask 122 questions.
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(results):
        key = question_of(search_inputs(r, calibration)[0]) if r.evaluated else f"not evaluated {i}"
        groups.setdefault(key, []).append(i)
    tasks = list(groups.values())

    def task(t: int) -> list[SearchedRun]:
        answers: dict[str, Any] = {}
        return [search_run(results[i], calibration, answers) for i in tasks[t]]

    def task_done(t: int, rows: list[SearchedRun]) -> None:
        for i, row in zip(tasks[t], rows):
            done(i, row)

    out: list[SearchedRun | None] = [None] * len(results)
    if jobs == 1:
        grouped = fork_map(task, len(tasks), 1, task_done)
    else:
        # Each worker sends back its rows without the recipe (the caller's object is put back).
        grouped = fork_map(lambda t: [replace(row, recipe=None) for row in task(t)], len(tasks), jobs, task_done)
    for t, rows in enumerate(grouped):
        for i, row in zip(tasks[t], rows):
            out[i] = replace(row, recipe=results[i])
    return [row for row in out if row is not None]


# ---------------------------------------------------------------------------------------------
QUESTION_RULE = (
    "One vote per search question: runs that hand the search the same inputs (model architecture, hardware, GPU "
    "count, global batch, sequence length, pinned degrees and layout, software release, assumptions) get the same "
    "best plan, so they are counted once, against the best tokens/s per GPU any of them measured: the best "
    "configuration its publishers reached for that question is what planner's best plan is compared with (an "
    "untuned step of a tuning series measured a configuration the search does not propose; a lever planner does "
    "not model, such as torch.compile, shows as the voting run's error). Another release or another pinned degree "
    "is another question. Every run keeps its row; the per-run figures are given beside.")
"""Why search mode counts questions (issue 39), said in the report's header and docs/validation.md."""


def question_votes(rows: list[SearchedRun]) -> dict[str, str]:
    """Each counted, searched run's name -> the run that votes for its search question
    (:attr:`SearchedRun.question`): of the counted runs asking it, the one that measured the most
    tokens/s per GPU (the later in the file on a tie, as a series' later run counts in recipe mode).
    Runs recipe mode does not count (a series run whose inputs a later run repeats) stay out."""
    groups: dict[str, list[tuple[float, int, SearchedRun]]] = {}
    for i, s in enumerate(rows):
        if s.searched and s.recipe.counted and s.error is not None and s.measured_tps and s.question is not None:
            groups.setdefault(s.question, []).append((s.measured_tps, i, s))
    out = {}
    for members in groups.values():
        voter = max(members, key=lambda m: (m[0], m[1]))[2]
        out.update({s.name: voter.name for _, _, s in members})
    return out


def _class_stats(rows: list[SearchedRun]) -> tuple[Stats, dict[str, Stats]]:
    classes: dict[str, list] = {}
    for s in rows:
        classes.setdefault(s.recipe.klass or "?", []).append((s.name, s.error))
    return (stats_of([(s.name, s.error) for s in rows if s.error is not None]),
            {k: stats_of(v) for k, v in sorted(classes.items(), key=lambda kv: class_order(kv[0]))})


def summarize_search(rows: list[SearchedRun]) -> dict:
    """Statistics over the search questions (:func:`question_votes`: one vote each, the acceptance's
    figures) and, beside, over the counted, searched runs: all, per class; questions beyond +-25 %
    (each with its suspected mechanism, :func:`suspected`, told what a run of the same job measured);
    losses."""
    elsewhere = {e["name"]: e for e in measured_elsewhere(rows)}
    votes = question_votes(rows)
    counted = [s for s in rows if s.name in votes]
    voting = [s for s in counted if votes[s.name] == s.name]
    q_all, q_classes = _class_stats(voting)
    r_all, r_classes = _class_stats(counted)
    beyond = [s for s in voting if abs(s.error or 0) > BEYOND]
    gains = [s.gain for s in voting if s.gain is not None]
    lost = [s for s in rows if s.lost]
    return {
        "all": q_all, "classes": q_classes,
        "per_run": {"all": r_all, "classes": r_classes,
                    "beyond": [s.name for s in counted if abs(s.error or 0) > BEYOND]},
        "votes": votes,
        "recipe_all": stats_of([(s.name, s.recipe.error) for s in voting if s.recipe.error is not None]),
        "median_gain": statistics.median(gains) if gains else None,
        "beyond": [(s.name, s.error, suspected(s, elsewhere.get(s.name))) for s in beyond],
        "lost": [(s.name, s.gain, s.losses or ["none named: the recipe's plan is in the search's space (a search "
                                               "defect)"]) for s in lost],
    }


def targets_met(summary: dict) -> dict[str, bool]:
    a: Stats = summary["all"]
    return {
        "median |signed error| <= 10%": a.median_abs is not None and a.median_abs <= TARGETS["median_abs"],
        "every class median within +-10%": all(s.median_signed is not None and abs(s.median_signed) <= TARGETS["class_median"]
                                               for s in summary["classes"].values()),
        "at most 3 questions beyond +-25%": len(summary["beyond"]) <= TARGETS["max_beyond"],
    }


def _same_job(a: SearchedRun, b: SearchedRun) -> bool:
    """Two runs of one model, system, GPU count, batch, sequence and precision with the same pinned
    degrees (precision too: a bf16 run against an fp8 one measures the precision, not the levers)."""
    ra, rb = a.recipe.run, b.recipe.run
    return ((ra.model, ra.hardware, ra.gpus, ra.global_batch, ra.seq_len, ra.precision) ==
            (rb.model, rb.hardware, rb.gpus, rb.global_batch, rb.seq_len, rb.precision)
            and all(a.recipe_plan_json.get(k) == b.recipe_plan_json.get(k) for k in PINNED))


def measured_elsewhere(rows: list[SearchedRun]) -> list[dict]:
    """For each decomposed run, the bundled run of the same job (:func:`_same_job`; a later
    release, a tuning step) whose own recipe takes the most of the search's changes: what that run
    measured over this one, beside what planner predicts for the two recipes and for the search's
    plan. A search gain a later recipe measured is no over-credit, whatever this run's measurement
    says; one no run took stays unmeasured."""
    out = []
    for x in rows:
        if not (x.decomposition and x.recipe.counted and x.measured_tps and x.recipe_tps):
            continue
        changed = changed_keys(x.recipe_plan_json, x.best_plan_json)
        best = None
        for y in rows:
            if y is x or not (y.recipe.evaluated and y.measured_tps and y.recipe_tps) or not _same_job(x, y):
                continue
            taken = [k for k, (_, now) in changed.items() if str(y.recipe_plan_json.get(k, "default" if k == "schedule"
                                                                                    else None)) == str(now)]
            if taken:
                rank = (len(taken), -len(changed_keys(y.recipe_plan_json, x.best_plan_json)), y.name)
                if best is None or rank > best[0]:
                    best = (rank, y, taken)
        if best is not None:
            _, y, taken = best
            out.append({"name": x.name, "other": y.name, "taken": taken,
                        "measured_gain": _r6(y.measured_tps / x.measured_tps - 1),
                        "predicted_gain": _r6(y.recipe_tps / x.recipe_tps - 1), "search_gain": _r6(x.gain)})
    return out


# ---------------------------------------------------------------------------------------------
SIGN = ("signed error = the best plan's predicted / measured - 1 on tokens/s per GPU (positive: planner predicts "
        "its plan faster than the run ran); gain = the best plan's predicted / the recipe's predicted - 1")


def build_search(rows: list[SearchedRun], runs_label: str) -> dict:
    """The search-mode report's JSON (no timings: same inputs, same bytes)."""
    s = summarize_search(rows)
    searched = [r for r in rows if r.searched]
    elsewhere = measured_elsewhere(rows)
    by_name = {e["name"]: e for e in elsewhere}
    votes = s["votes"]
    runs = [r.to_json(by_name.get(r.name), votes.get(r.name)) for r in rows]
    per_run = s["per_run"]
    return {
        "runs_file": runs_label,
        "planner_version": __version__,
        "mode": "search",
        "pinned": list(PINNED) + ["layout"],
        "sign_convention": SIGN,
        "counts": {"runs": len(rows), "searched": len(searched),
                   "search_failed": sum(r.status == "search failed" for r in rows),
                   "not_searched": sum(r.status == "not searched" for r in rows),
                   "counted": sum(r.recipe.counted for r in searched),
                   "questions": sum(v == k for k, v in votes.items()),
                   "lost_to_recipe": len(s["lost"])},
        "question_rule": QUESTION_RULE,
        "summary": {"all": s["all"].to_json(), "classes": {k: v.to_json() for k, v in s["classes"].items()},
                    "recipe_all": s["recipe_all"].to_json(), "median_gain": _r6(s["median_gain"]),
                    "per_run": {"all": per_run["all"].to_json(),
                                "classes": {k: v.to_json() for k, v in per_run["classes"].items()},
                                "beyond_25pct": per_run["beyond"]}},
        "beyond_25pct": [{"name": n, "error": _r6(e), "suspected": why} for n, e, why in s["beyond"]],
        "lost_to_recipe": [{"name": n, "gain": _r6(g), "why": why} for n, g, why in s["lost"]],
        "targets": {"definition": dict(TARGETS), "met": targets_met(s)},
        "levers": lever_table([j for j in runs if j["counted"]]),
        "measured_elsewhere": elsewhere,
        "runs": runs,
    }


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def _gib(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f} GiB"


def _lever_alone(lv: dict) -> str:
    head = f"{lv['lever']} {lv['from']} -> {lv['to']}"
    if "unevaluated" in lv:
        return f"{head}: not alone ({lv['unevaluated']})"
    return f"{head} {_pct(lv['gain'])}" + ("" if lv["fits"] else " (does not fit)")


def _lever_markdown(report: dict) -> list[str]:
    """The gains decomposed: per lever change over the runs, then per run."""
    decomposed = [r for r in report["runs"] if r.get("decomposition") and r["counted"]]
    lines = ["", "## Where the search's gains come from, lever by lever", "",
             f"For each counted run where the search's plan is predicted more than {100 * DECOMPOSE_ABOVE:.0f}% faster "
             f"than the recipe's ({len(decomposed)} runs), each key the search changed applied alone to the recipe's "
             "plan: the gain the model credits that change with by itself, and whether that plan fits (headroom: "
             "usable HBM less the predicted reserved peak; negative does not fit). A lever whose gain was never "
             "measured and is large here is the first suspect of an over-credit; the changes credited the most gain "
             "summed over the runs first.", "",
             "| lever change | runs | median gain alone | largest gain alone (run) | not fitting alone |",
             "|---|---:|---:|---|---:|"]
    lines += [f"| {lv['lever']} {_cell(lv['from'])} -> {_cell(lv['to'])} | {lv['runs']} | {_pct(lv['median_gain'])} | "
              f"{_pct(lv['max_gain'])} ({lv['max_run']}) | {lv['not_fitting']} |" for lv in report.get("levers", [])]
    elsewhere = report.get("measured_elsewhere", [])
    lines += ["", f"Gains another bundled run of the same job measured ({len(elsewhere)} of the {len(decomposed)} runs): "
              "the run of the same model, system, GPU count, batch, sequence, precision and pinned degrees (a later release, a "
              "tuning step) whose recipe takes the most of the search's changes; its measured throughput over this "
              "run's, beside planner's prediction for the two recipes and the search's gain. A gain another recipe "
              "measured is no over-credit.", "",
              "| run | other run | changes it takes | measured gain | predicted (recipes) | search's gain |",
              "|---|---|---|---:|---:|---:|"]
    lines += [f"| {e['name']} | {e['other']} | {', '.join(e['taken'])} | {_pct(e['measured_gain'])} | "
              f"{_pct(e['predicted_gain'])} | {_pct(e['search_gain'])} |" for e in elsewhere]
    lines += ["", "Per run (gain of the whole plan; each change alone; the recipe's and the search's headroom):", ""]
    for r in decomposed:
        d = r["decomposition"]
        parts = [_lever_alone(lv) for lv in d["levers"]]
        lines.append(f"- {r['name']}: {_pct(r['gain'])}; " + "; ".join(parts) + f"; headroom recipe "
                     f"{_gib(d['recipe']['headroom_gib'])}, search's plan {_gib(d['best']['headroom_gib'])}")
    return lines


def _vote(run: dict) -> str:
    """A run's vote as the run tables print it: yes, the run that votes for it, or none (not counted)."""
    if "voter" not in run:
        return "–"
    return "yes" if run["votes"] else f"-> {run['voter']}"


def _summary_table(a: dict, classes: dict, what: str) -> list[str]:
    lines = [f"| class | {what} | median abs. error | median signed error | worst signed error (run) |",
             "|---|---:|---:|---:|---|"]
    for name, st in [("all", a), *classes.items()]:
        label = "**all**" if name == "all" else name
        worst = f"{_pct(st['worst_signed_error'])} ({st['worst_run']})" if st["n"] else "–"
        lines.append(f"| {label} | {st['n']} | {_pct(st['median_abs_error']).lstrip('+')} | "
                     f"{_pct(st['median_signed_error'])} | {worst} |")
    return lines


def search_markdown(report: dict, command: str) -> str:
    c, s = report["counts"], report["summary"]
    lines = [
        "# Published runs, searched: planner's best plan with the published degrees pinned",
        "",
        f"Generated by `{command}` from `{report['runs_file']}`; planner {report['planner_version']}. For every run "
        "whose recipe planner evaluates, `planner search` on the run's model, hardware, GPU count, global batch, "
        "sequence length, assumptions and software release, with the published degrees pinned (`--fix` of "
        f"{', '.join(report['pinned'])} where the recipe has one) and every other lever left to the search, top 1; "
        f"{report['sign_convention']}. Series runs with the same planner inputs count once, as in "
        f"published-runs.md. {report['question_rule']}",
        "",
        f"{c['runs']} runs: {c['searched']} searched ({c['counted']} counted, asking {c['questions']} search "
        f"questions), {c['search_failed']} whose search failed, {c['not_searched']} not searched (their recipe is not "
        f"evaluated); the search lost to the recipe on {c['lost_to_recipe']}.",
        "",
        "## Summary by class, one vote per search question",
        "",
        *_summary_table(s["all"], s["classes"], "questions"),
        "",
        f"Per run (every counted run, {len(s['per_run']['beyond_25pct'])} beyond +-25 %):",
        "",
        *_summary_table(s["per_run"]["all"], s["per_run"]["classes"], "runs"),
    ]
    ra = s["recipe_all"]
    lines += ["", f"The recipes of the voting runs: median abs. error {_pct(ra['median_abs_error']).lstrip('+')}, "
              f"median signed {_pct(ra['median_signed_error'])}; median gain of the search's plan over the recipe's "
              f"{_pct(s['median_gain'])}.", ""]
    met = report["targets"]["met"]
    lines += ["Issue 39's acceptance (search mode): " + "; ".join(f"{k}: {'met' if v else 'not met'}"
                                                                  for k, v in met.items()) + ".", ""]
    lines += ["## Questions beyond +-25 % (the voting run's)", ""]
    lines += [f"- {b['name']}: {_pct(b['error'])}; suspected: {b['suspected']}" for b in report["beyond_25pct"]] or ["None."]
    lines += _lever_markdown(report)
    lines += ["", "## Where the search loses to the recipe", ""]
    lines += [f"- {x['name']}: gain {_pct(x['gain'])}; " + "; ".join(x["why"]) for x in report["lost_to_recipe"]] \
        or ["Nowhere: on every run the search finds a plan predicted at least as fast as the recipe's."]
    lines += ["", "## Every run", "",
              "°: series run not counted. Vote: \"yes\" where the run votes for its search question, else the run "
              "that does (\"-> run\": same question, a higher measured throughput). Gain: the best plan over the "
              "recipe's, both predicted.", "",
              "| run | vote | class | measured | recipe | best | error | gain | best plan |",
              "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in report["runs"]:
        if r["status"] != "searched":
            continue
        mark = "" if r["counted"] else " °"
        lines.append(f"| {r['name']}{mark} | {_vote(r)} | {r['class']} | {_num(r['measured_tokens_per_s_per_gpu'])} | "
                     f"{_num(r['recipe_tokens_per_s_per_gpu'])} | {_num(r['best']['tokens_per_s_per_gpu'])} | "
                     f"{_pct(r['error'])} | {_pct(r['gain'])} | `{_cell(r['best_plan'])}` |")
    failed = [r for r in report["runs"] if r["status"] == "search failed"]
    if failed:
        lines += ["", "## Searches that failed", ""]
        lines += [f"- {r['name']}: {r['reason']}" for r in failed]
    lines += ["", "---", "Numbers under \"recipe\" and \"best\" are planner's predictions (tokens/s per GPU); "
              "\"measured\" is as the sources publish it.", ""]
    return "\n".join(lines)


def search_text(report: dict) -> str:
    """The terminal view: the summary, one line per run, the runs beyond +-25 % and the losses."""
    s, c = report["summary"], report["counts"]
    out = [f"search mode ({c['counted']} runs counted, {c['questions']} search questions, one vote each; "
           f"pinned: {', '.join(report['pinned'])})"]
    for title, a, classes in (("per question", s["all"], s["classes"]),
                              ("per run", s["per_run"]["all"], s["per_run"]["classes"])):
        out.append(f"  {title:32} {'n':>3} {'median|e|':>10} {'median e':>9} {'worst':>8}  worst run")
        for name, st in [("all", a), *classes.items()]:
            out.append(f"  {name:32} {st['n']:>3} {_pct(st['median_abs_error']).lstrip('+'):>10} "
                       f"{_pct(st['median_signed_error']):>9} {_pct(st['worst_signed_error']):>8}  {st['worst_run'] or ''}")
    out += [f"  runs beyond +-25%: {len(s['per_run']['beyond_25pct'])}",
            "", f"{'run':58} {'measured':>9} {'recipe':>9} {'best':>9} {'error':>8} {'gain':>8}  vote"]
    for r in report["runs"]:
        if r["status"] == "searched":
            tag = " " if r["counted"] else "°"
            out.append(f"{r['name'][:57]:57}{tag} {_num(r['measured_tokens_per_s_per_gpu']):>9} "
                       f"{_num(r['recipe_tokens_per_s_per_gpu']):>9} {_num(r['best']['tokens_per_s_per_gpu']):>9} "
                       f"{_pct(r['error']):>8} {_pct(r['gain']):>8}  {_vote(r)}")
        elif r["status"] == "search failed":
            out.append(f"{r['name']}: search failed: {r['reason']}")
    out += ["", "questions beyond +-25% (the voting run's):"] + [f"  {b['name']}: {_pct(b['error'])}; suspected: {b['suspected']}"
                                    for b in report["beyond_25pct"]]
    out += ["lost to the recipe:"] + [f"  {x['name']}: {_pct(x['gain'])}; " + "; ".join(x["why"])
                                      for x in report["lost_to_recipe"]]
    out += ["", "targets (issue 39, search mode): " + "; ".join(f"{k}: {'met' if v else 'not met'}"
                                                                for k, v in report["targets"]["met"].items()),
            f"({report['sign_convention']}; °: series run not counted; vote: yes, or the run that votes for the "
            "run's search question)"]
    return "\n".join(out)


__all__ = ["SearchInputs", "search_inputs", "question_of", "question_votes", "QUESTION_RULE", "measured_elsewhere", "lever_decomposition", "lever_table", "DECOMPOSE_ABOVE", "build_search", "search_markdown", "search_text", "SearchedRun", "search_run", "search_runs", "summarize_search", "targets_met", "pinned_fix",
           "outside_space", "loss_reasons", "suspected", "changed_keys", "PINNED", "TARGETS", "LOSS_TOLERANCE"]
