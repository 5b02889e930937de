"""The search: build the space, bound and cost it, rank the top-K plans, explain infeasibility.

Exactness: the branch and bound of planner.search.bnb costs the structural keys whose lower bounds
(memory, step time: planner.search.bounds) can reach the K-th best plan found so far, best first;
CP-SAT then enumerates every feasible plan of the costed keys up to that K-th time and ranks them
(planner.search.exhaustive gives the order), so no key left out can enter the top K. Launcher
rules of each key are checked when it is used. ``--solver exhaustive`` costs every key of the
space with no bound and enumerates every plan instead (the oracle).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from planner.cost.compose import batch_of_setup, evaluate_batch
from planner.cost.evaluate import plan_evaluation
from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.time import time_report
from planner.errors import PlannerError
from planner.rules import Target
from planner.search.bnb import BranchAndBound, INF
from planner.search.bounds import WALK_SLACK, plan_walk_slack, space_walk_slack, walked_floor_us
from planner.search.cpsat import enumerate_cpsat
from planner.search.diagnose import diagnose_nothing_fits, no_structure
from planner.search.exhaustive import best_per_key, group_index_vectors, oracle, plans_up_to
from planner.search.families import STABLE_POOL, arrange, group_level, pool_size, robust_searches
from planner.search.rulecheck import rule_violations, struct_violations
from planner.search.space import Limits, Space, build_space, make_plan
from planner.search.stages import refine
from planner.search.status import solver_json
from planner.search.ties import job_resolution
from planner.search.tables import MAX_TABLE_US, Tables, lever_indices, lever_values
from planner.specs.plan import Plan

if TYPE_CHECKING:
    from planner.cost.compose import Costs
    from planner.cost.setup import Setup


@dataclass
class Options:
    target: Target = "megatron"
    top: int = 10
    solver: str = "cpsat"
    time_limit_s: float = 60.0
    limits: Limits = field(default_factory=Limits)
    moments: tuple[str, ...] = ("fp32", "bf16")
    """Adam moment dtypes the search may use; the release's profile keeps those it offers
    (bf16: Megatron's precision-aware optimizer, --use-precision-aware-optimizer)."""
    per_stage: bool = True
    """Refine layouts (and, for --target any, per-rank recompute) with the per-stage CP-SAT model."""
    per_stage_keys: int = 12
    """Layouts that do not fit uniformly but might with per-stage choices, tried in bound order."""
    torchtitan_config: str | None = None
    """--torchtitan-config MODULE:FUNCTION: the torchtitan rules read it as export and check do."""
    ties: bool = False
    """Order plans the model cannot tell apart robust-first (planner.search.ties; ``search`` sets it)."""
    families: bool = False
    """Show the first plan of each family, ``top`` families out of a larger ranking
    (planner.search.families; ``search`` sets it unless --all-variants). Implies ``ties``."""
    max_step_us: int | None = None
    """Plans slower than this (microseconds, the tables' step estimate) are not wanted: the
    robust search's bound (see _tied_search). None: no bound."""
    software: Any = None
    """The release the plans run on (planner.specs.software.SoftwareProfile): the search offers only
    its levers. None: no release (--target any, or a caller that names none)."""


@dataclass
class Ranked:
    rank: int
    plan: Plan
    setup: Setup
    objective_us: int
    evaluation: dict
    """plan_evaluation's JSON; while ranking, memory only (the time report, with its schedule walk,
    is added by :func:`_with_time` to the plans that are kept); empty until the best-first walk
    reaches the plan (:func:`_with_memory`)."""
    costs: Costs | None = field(default=None, repr=False, compare=False)
    """The plan's composed costs, kept until its time report is written."""
    compose: Callable[[], Costs] | None = field(default=None, repr=False, compare=False)
    """Composes the plan's costs for :func:`_with_memory` while ``evaluation`` is empty."""


@dataclass
class SearchResult:
    space: Space
    tables: Tables
    plans: list[Ranked]
    solver: dict
    timings: dict


@dataclass
class Costed:
    """What the solve left for the steps after it: the tables of the keys costed in full, each's
    fastest feasible plan (us), and each timed key's exact time floor."""

    tables: Tables
    best: dict
    floors: list
    """(time floor us, global key index), ascending."""
    row_tables: Callable[[int], Tables | None]
    """gid -> Tables of that key, or None."""
    exact_peak: bool = True
    """Whether ``tables`` hold the space's smallest peak (when nothing fits)."""


def run_search(model, hw, job, options: Options | None = None, *, assumptions=None,
               progress=None) -> SearchResult:
    options = options or Options()
    assumptions = target_assumptions(assumptions or Assumptions(), options.target)
    if not (options.ties or options.families):
        return _Run(model, hw, job, options, assumptions, progress).search()
    return _tied_search(model, hw, job, options, assumptions, progress)


def _tied_search(model, hw, job, options: Options, assumptions, progress) -> SearchResult:
    """The search with ties and families (planner.search.families.arrange, the one place they are
    applied): it ranks the same pool of plans for every --top up to families.STABLE_POOL (so the first
    plan does not depend on --top), more than it shows, so each family has its variants and the first
    tie group its members. Where the pool's plans of that group hold none of the most robust class,
    the robust searches (families.ROBUST_CLASSES, the user's --fix and --max kept) add the
    fastest plans of each class in turn, most robust first, until one lands in the group: the first
    plan is then the group's most robust by risk, offload, sharding and recompute, whatever --max
    removes from the space around it."""
    inner = replace(options, ties=False, families=False, top=pool_size(options.top))
    first = _Run(model, hw, job, inner, assumptions, progress)
    result = first.search()
    plans = list(result.plans)
    searched = len(plans)
    robust: list[dict] = []
    level = group_level(plans, model, hw, job, options.target)
    bound = _robust_bound(plans, model, hw, job) if level else None  # the first search's group, once
    for rs in robust_searches(options.limits):
        if level is None or level <= rs.level:
            break
        (progress or (lambda msg: None))(f"searching the robust plans ({rs.fix})")
        entry: dict = {"fix": rs.fix, "plans": 0}
        robust.append(entry)
        try:
            second = _Run(model, hw, job, replace(inner, limits=rs.limits, top=ROBUST_TOPS[rs.level],
                                                  max_step_us=bound),
                          assumptions, progress)
            second.probe, second.like, second.known = first.probe, first.space, first.known
            extra = second.search()
        except PlannerError as exc:  # nothing of this class fits: the ranking stands, and says why
            entry["none_because"] = str(exc).split("\n")[0][:200]
            continue
        have = {p.plan.to_string() for p in plans}
        new = [p for p in extra.plans if p.plan.to_string() not in have]
        entry["plans"], entry["status"] = len(new), extra.solver.get("status")
        plans += new
        # the group's most robust level now (the bound is the first search's fastest plan's)
        level = group_level(plans, model, hw, job, options.target)
    plans, ties = arrange(plans, model, hw, job, options.target, families=options.families, shown=options.top,
                          pool=inner.top, searched=searched)
    if robust:
        ties["robust_search"] = robust
    result.solver["ties"] = ties
    return replace(result, plans=plans)


ROBUST_TOP = STABLE_POOL
"""The plans the robust search of the distributed optimizer without offload (any recompute) ranks,
whatever the --top (so that the first plan does not depend on --top), within the first tie group's
band (_robust_bound): as many as the first search, because the tables' estimate orders the VPP
variants of one family unlike their walks (a coarse VPP 4 layout walked fastest of the robust plans
of DeepSeek-V3 on 256 GB200s while ten finer layouts came before it by the estimate), and the group's
order after the class (less recompute, headroom, dimensions) reaches past the fastest few."""
NO_RECOMPUTE_TOP = 10
"""The plans the no-recompute robust search ranks, whatever the --top: its class already holds the
group's most robust recompute, so what is left to choose (headroom not tight, fewer dimensions, the
step) is among its fastest; its walk is proven over the walked step (best-first, as any search's
top K). Ten, not ROBUST_TOP: on the default command the search with 40 walked 161 plans, 31 of them
combined-1F1B pipelines (7.3 s of CPU, 2.0x the dist_opt search it replaces); with 10, 2.1 s, and
the same first plan."""
ROBUST_TOPS = (NO_RECOMPUTE_TOP, ROBUST_TOP)
"""Per robust search level (planner.search.families.ROBUST_CLASSES)."""
ESTIMATE_SLACK = 0.09
"""The tables rank schedules they do not walk (combined 1F1B, zero bubble, DualPipe) by an estimate
that walked steps exceeded by up to 8.7 % (the default command's shown plans, issue 40); the robust
search's bound allows that much on either side so that no robust plan of the first tie group is
left out by its estimate."""


def _robust_bound(plans: list, model, hw, job) -> int:
    """The robust search's step-time bound (us): a robust plan can be ranked first only as a tie of
    the fastest plan, so plans slower than its tie group (the model's resolution, planner.search.ties)
    are not searched for; the tables' estimate is allowed ESTIMATE_SLACK."""
    precision = plans[0].setup.plan.precision or job.default_precision
    res = job_resolution(model, hw, str(getattr(precision, "value", precision))).relative
    fastest = min(max(float(p.evaluation["time"]["step_time_s"]), p.objective_us / 1e6) for p in plans)
    return int(math.ceil(fastest * 1e6 * (1 + res) * (1 + ESTIMATE_SLACK)))


def target_assumptions(assumptions, target: str):
    """The assumptions a search for ``target`` costs with: what the user left open set as the
    launcher runs it (torchtitan's loss upcasts the logits to fp32, eager: planner's torchtitan
    job files leave compile off)."""
    if target == "torchtitan" and assumptions.cross_entropy is None:
        return assumptions.model_copy(update={"cross_entropy": "torch"})
    return assumptions


class PerStageInfo(TypedDict):
    """What the per-stage refinement did (the solver JSON's ``per_stage``)."""

    enabled: bool
    tried: int
    skipped_by_bound: int
    paired: int
    """Seeds that fit under combined 1F1B, left as they are (planner.search.stages.paired_overlap)."""
    improved: int
    why: NotRequired[str]


class _Run:
    """One search: its space, its timings and its cache of launcher checks per key."""

    def __init__(self, model, hw, job, options: Options, assumptions, progress):
        self.model, self.hw, self.job, self.options, self.assumptions = model, hw, job, options, assumptions
        self.say = progress or (lambda msg: None)
        self.timings: dict[str, float] = {}
        self.t0 = self.t = time.perf_counter()
        self.checked: dict[int, bool] = {}
        self.info: PerStageInfo = {"enabled": options.per_stage, "tried": 0, "skipped_by_bound": 0, "paired": 0,
                                      "improved": 0}
        self.dominated: dict = {}
        self.walked = 0
        self.bb: BranchAndBound | None = None
        self.known: dict[str, Ranked] = {}
        """Ranked plans by the string of the plan the enumeration built (see :meth:`_ranked`)."""
        """The CP-SAT search's branch and bound (its second enumeration continues it)."""
        """Plans whose schedule the best-first loop walked (its last round)."""
        self.probe: tuple | None = None
        """(structural keys, block-cost context) of the search's bounds: given, an earlier search's to
        reuse (the robust search reads the first search's); after a CP-SAT search, its own."""
        self.block_sources: list = []
        """The search's cost contexts, whose block costs a ranked plan's reports read."""
        self.like: Space | None = None
        """An earlier search's space whose structural keys this one shares, if its limits allow
        (planner.search.space.build_space's ``like``: the robust search pins levers only)."""

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(now - self.t, 4)
        self.t = now

    def valid(self, i: int) -> bool:
        if i not in self.checked:
            self.checked[i] = not struct_violations(self.model, self.hw, self.job, self.space.struct(i),
                                                    self.options.target, self.options.torchtitan_config,
                                                    self.options.software)
        return self.checked[i]

    def search(self) -> SearchResult:
        o = self.options
        if o.solver not in ("cpsat", "exhaustive"):
            raise PlannerError(f"Unknown solver '{o.solver}'.", hint="Use --solver cpsat or --solver exhaustive.")
        self.say("enumerating the plan space")
        self.space = build_space(self.model, self.hw, self.job, target=o.target, limits=o.limits,
                                 implementation=self.assumptions.implementation, moments=o.moments,
                                 torchtitan_config=o.torchtitan_config, software=o.software, like=self.like)
        self.lap("space_s")
        if not len(self.space):
            raise no_structure(self.space, o)
        # Best-first over the walked step time (issue 40): CP-SAT enumerates plans by the tables'
        # estimate, which is a lower bound of the walked time (tests/test_search_walked_bound.py
        # checks it by brute force over every schedule); the plans are walked in that order until the
        # K-th walked time is at or below the estimate of every plan not walked (the next enumerated
        # one, and for the plans CP-SAT did not enumerate, its last one), else more are enumerated.
        # K counts plans the exact memory model keeps and no faster one dominates (_drop_dominated).
        want = WANT_FACTOR * o.top
        slack = space_walk_slack(self.space)
        while True:
            found, status, bound, costed = (self._exhaustive if o.solver == "exhaustive" else self._cpsat)(want)
            self.say("evaluating the ranked plans")
            ranked = [self._ranked(k + 1, t, gid, flat) for k, (t, gid, flat) in enumerate(found)]
            plans, exact = _best_first(ranked, o.top, complete=len(found) < want, unseen_slack=slack)
            self._remember(found, ranked, plans)
            self.walked = len(plans)
            self.lap("rank_s")
            fitting = sum(bool(p.evaluation["memory"]["fits"]) for p in plans)
            if exact or want >= MAX_WANT_FACTOR * o.top:
                break
            if fitting >= o.top and slack <= WALK_SLACK["combined-1f1b"]:
                # The K-th walked time is known but above the bound of the plans not enumerated:
                # enumerate up to where it would be proven, from the same branch and bound. Not
                # under zero bubble or DualPipe: their slacks (5-15 %) would cost most of the space.
                ext = self._extend(plans, slack)
                if ext is not None:
                    found, status, bound, costed, ranked, unseen_est, within = ext
                    plans, exact = _best_first(ranked, o.top, complete=within, unseen_slack=slack,
                                               unseen_est=unseen_est)
                    self._remember(found, ranked, plans)
                    self.walked = len(plans)
                    self.lap("rank_s")
                break  # else the walked order holds among the enumerated plans only (FEASIBLE)
            if fitting >= o.top and (want >= MAX_WALK_FACTOR * o.top or slack > WALK_SLACK["combined-1f1b"]):
                break  # the walked order holds among the enumerated plans only (FEASIBLE): MAX_WALK_FACTOR
            want *= 4
        if not exact and status == "OPTIMAL":
            status = "FEASIBLE"  # the enumeration's cap was reached before the walk's order was proven
        uniform = {p.plan.to_string() for p in plans}
        if "layout" in o.limits.fix:  # what the user pins wins: the layout is used as given
            self.info["enabled"], self.info["why"] = False, "the layout is fixed"
        elif o.per_stage and self.model.num_layers > 1:
            self.say("per-stage layouts (CP-SAT)")
            plans = self._per_stage(costed, plans, want)
            self.lap("per_stage_s")
        if not plans and status == "UNKNOWN":
            # CP-SAT ran out of the time limit before it found a plan: that is not "nothing fits",
            # and blaming a rule or memory for it would be a wrong answer.
            raise PlannerError(
                f"The solver's time limit ({o.time_limit_s:g} s, wall clock, tables included) ran out before it "
                f"found a plan of {self.model.name} on {self.job.gpus} {self.hw.name} GPUs; the plans are not "
                "known not to fit.",
                hint="Give it more time with --time-limit SECONDS (a loaded machine needs more), or narrow the "
                     "space with --max / --fix.")
        if not plans:
            rows = [i for i, s in enumerate(costed.tables.ids) if self.checked.get(int(s))] or \
                list(range(len(costed.tables.structs)))
            raise diagnose_nothing_fits(self.space, costed.tables, o, rows, self.assumptions, self.say,
                                        exact=costed.exact_peak)
        if any(p.plan.to_string() not in uniform for p in plans) and status == "OPTIMAL":
            # Per-stage refinements entered the ranking: each is optimal for its layout and levers
            # (CP-SAT), but the per-stage space was not searched over every layout.
            status = "FEASIBLE"
        return self._finish(plans, status, bound, costed)

    # ---- solving ----------------------------------------------------------------------------
    def _cpsat(self, want: int):
        bb = BranchAndBound(self.space, self.assumptions, want, self.valid, self.say,
                            max_step_us=self.options.max_step_us, probe=self.probe)
        bb.run()
        self.bb = bb
        self.probe = (self.space.fm_keys, bb.probe)
        self.lap("tables_s")
        # With fewer than K feasible plans in the whole space, every one of them is in the pool.
        cap = bb.U if bb.U < INF else (-min(bb.pool) if bb.pool else None)
        return self._enumerate(bb, cap, want)

    def _enumerate(self, bb: BranchAndBound, cap: int | None, want: int, tables_only: bool = False):
        """CP-SAT's enumeration of the costed keys' plans up to ``cap`` (us), the first ``want``
        (``tables_only``: the same plans read from the tables, exhaustive.plans_up_to)."""
        self.dominated = dict(bb.dominated)
        self.dominated["costed"] = sum(len(p["ids"]) for p in bb.parts())
        tables = bb.candidates()
        self.block_sources = bb.contexts()
        self.keys_in_model = len(tables.structs)
        found, status, bound = [], "OPTIMAL", None
        if len(tables.structs) and cap is not None:
            self.say("solving")
            remaining = self.options.time_limit_s - (time.perf_counter() - self.t0)
            if tables_only or len(tables.structs) * self.space.lever_product_size <= TABLE_READ_PLANS:
                found, status, bound = plans_up_to(tables, int(cap), want), "OPTIMAL", int(cap)
            else:
                res = enumerate_cpsat(tables, int(cap), want, time_limit_s=max(remaining, 0.5))
                found, status, bound = res.plans, res.status, int(cap)
            if status == "INFEASIBLE":  # cannot happen with a valid bound; say so rather than hide it
                status = "UNKNOWN"
        self.lap("solve_s")
        tables = bb.all_costed()
        return found, status, bound, Costed(tables, bb.best_of(), bb.timed_floors(), bb.row_tables, bb.exact_peak)

    def _extend(self, walked: list[Ranked], slack: float):
        """The second enumeration when the first did not prove the walked order: the K-th walked
        time ``kth`` is above the bound of the plans not enumerated (their estimate less ``slack``),
        so every plan whose estimate is within kth / (1 - slack) is enumerated from the same branch
        and bound, continued up to that cap (BranchAndBound.extend: no key is costed twice), and
        the plans already walked keep their walks. Returns (found, status, bound, costed, ranked,
        unseen estimate) or None when it cannot prove (fewer than K walked plans fit, or more than
        MAX_EXTEND_FACTOR x K plans within the cap)."""
        o, bb = self.options, self.bb
        kth = _kth_walked(walked, o.top)
        if kth is None or slack >= 1:
            return None
        cap = int(math.ceil(kth / (1.0 - slack)))
        last = max((p.objective_us for p in walked), default=0)
        if cap > last * (1 + MAX_EXTEND_REACH):
            return None  # too far: the branch and bound's continuation would cost more than the search
        within = o.max_step_us is not None and cap >= o.max_step_us
        if o.max_step_us is not None and within:  # plans beyond the search's own bound are not asked for
            cap = int(o.max_step_us)  # (the robust search's)
        self.say("enumerating up to the walked order's bound")
        limit = MAX_EXTEND_FACTOR * o.top
        if bb is None:  # the oracle: every key costed again, every plan up to the cap
            found2, status, bound, costed = self._exhaustive(limit + 1, cap)
        else:
            bb.extend(cap)
            self.lap("tables_s")
            found2, status, bound, costed = self._enumerate(bb, cap, limit + 1, tables_only=True)
        if status != "OPTIMAL" or len(found2) > limit:
            return None
        # The plans the first enumeration ranked keep their walks (_ranked reads self.known).
        ranked = [self._ranked(k + 1, t, gid, flat) for k, (t, gid, flat) in enumerate(found2)]
        # Every plan whose estimate is at most the cap is enumerated: the rest's are above it.
        return found2, status, bound, costed, ranked, cap + 1, within

    def _exhaustive(self, want: int, cap: int | None = None):
        self.say(f"oracle: every plan of {len(self.space):,} structural keys x {self.space.lever_product_size} levers")
        tables, found, smallest = oracle(self.space, self.assumptions, want, self.valid, self.say, time_cap_us=cap)
        self.lap("tables_s")
        self.keys_in_model = len(tables.structs)
        self.dominated = {"memory": 0, "step_time": 0, "costed": len(self.space)}
        if not len(tables.structs) and smallest is not None:
            tables = smallest[1]  # nothing fits: the key that comes closest, for the diagnosis
        best = best_per_key(tables)
        best_of = {int(g): (int(b) if np.isfinite(b) else np.iinfo(np.int64).max) for g, b in zip(tables.ids, best)}
        floors = sorted(zip(tables.time_lower_bound().tolist(), tables.ids.tolist()))
        index = {int(g): i for i, g in enumerate(tables.ids)}
        rows = lambda gid: tables.subset([index[gid]]) if gid in index else None  # noqa: E731
        return found, "OPTIMAL", None, Costed(tables, best_of, floors, rows)

    def _ranked(self, rank: int, t: int, gid: int, flat: int) -> Ranked:
        """One ranked plan with its memory report; its time report waits until it is kept (the
        walk of a pipeline schedule is most of a plan's evaluation, and of the 2K plans ranked
        only K are shown). A plan an earlier enumeration of this search, or the search this one
        follows (the robust search), already ranked is reused with its walk: its reports depend on
        the plan and the assumptions only."""
        sp = self.space
        plan = make_plan(sp.struct(gid), lever_values(sp, lever_indices(sp, flat)))
        known = self.known.get(plan.to_string())
        if known is not None:
            return replace(known, rank=rank, objective_us=t)
        setup = resolve_setup(sp.model, sp.hw, sp.job, plan, self.assumptions)
        # The costs and the memory report wait for the best-first walk (_with_memory): it stops
        # short of the last enumerated plans (91 of the default command's 334 fresh ones), whose
        # reports nothing reads. The contexts are this enumeration's, as they were when it ranked.
        sources = self.block_sources
        return Ranked(rank, setup.plan, setup, t, {}, compose=lambda: self._costs(setup, sources))

    def _remember(self, found: list, ranked: list[Ranked], walked: list[Ranked]) -> None:
        """Keep the enumeration's ranked plans (walked ones with their walks) for :meth:`_ranked`."""
        sp = self.space
        for (_, gid, flat), r in zip(found, walked + ranked[len(walked):]):
            self.known[make_plan(sp.struct(gid), lever_values(sp, lever_indices(sp, flat))).to_string()] = r

    def _costs(self, setup: Setup, sources: list | None = None) -> Costs:
        """The composition of one plan of the space, reading the block costs the search's tables
        composed (planner.cost.compose.CostContext.share_blocks_with_any; ``sources``: those
        contexts, else the search's latest)."""
        batch = batch_of_setup(setup)
        batch.ctx.share_blocks_with_any(self.block_sources if sources is None else sources)
        return evaluate_batch(batch)

    # ---- the per-stage refinement -----------------------------------------------------------
    def _per_stage(self, costed: Costed, plans: list[Ranked], top: int) -> list[Ranked]:
        """Refine the ranked plans' layouts, and try the fastest layouts that do not fit uniformly,
        with the per-stage CP-SAT model; return the top K of all, ranked by exact step time."""
        stage_rc = self.options.target == "any"
        # Plans keyed by canonical string: (step time in us, order of arrival, plan).
        # Ties in time keep the uniform ranking's order; refinements follow their seeds.
        pool: dict[str, tuple[int, int, Ranked]] = {}
        for r in plans:
            pool[r.plan.to_string()] = (_walked_us(r), len(pool), r)
        kth = max(v[0] for v in pool.values()) / 1e6 if len(pool) >= top else math.inf
        # Seeds: the fastest walked plans, as many as the enumeration held before the best-first walk
        # (PER_STAGE_SEED_FACTOR x K): every walked plan (4 K, twice per default search) made the
        # refinement most of the default command's time (6.8 -> 15 s CPU, 2026-12-05).
        fastest = sorted(plans, key=_walked_us)[: PER_STAGE_SEED_FACTOR * self.options.top]
        seeds = [(r.setup, r.costs) for r in fastest] + [(s, self._costs(s)) for s in self._rescue_seeds(costed, kth)]
        for setup, own in seeds:
            self.info["tried"] += 1
            # A deterministic budget per model (CP-SAT's deterministic time), not the wall clock,
            # so the same input ranks the same plans on a busy machine too.
            res = refine(setup, stage_recompute=stage_rc and setup.recompute.kind in ("none", "full"),
                         time_limit_s=5.0, own=own)
            self.info["skipped_by_bound"] += res.skipped
            self.info["paired"] += res.paired
            if res.improved:
                ev = plan_evaluation(res.setup)
                key = res.setup.plan.to_string()
                if key not in pool and not rule_violations(self.model, self.hw, self.job, res.setup.plan,
                                                           self.options.target, self.options.torchtitan_config,
                                                           self.options.software):
                    self.info["improved"] += 1
                    t = int(round(ev["time"]["step_time_s"] * 1e6))
                    pool[key] = (t, len(pool), Ranked(0, res.setup.plan, res.setup, t, ev))
        ranked = sorted(pool.values(), key=lambda v: (v[0], v[1]))[:top]
        return [replace(r, rank=k + 1) for k, (_, _, r) in enumerate(ranked)]

    def _rescue_seeds(self, costed: Costed, kth: float) -> list[Setup]:
        """Layouts whose best lever choice, ignoring memory, could beat the K-th plan: the uniform
        split may be what keeps them out (the first stages hold the most micro-batches)."""
        seeds: list[Setup] = []
        for lower, gid in costed.floors:
            if len(seeds) >= self.options.per_stage_keys or lower / 1e6 >= kth or lower >= MAX_TABLE_US:
                break
            if costed.best.get(gid, np.iinfo(np.int64).max) < MAX_TABLE_US or self.space.struct(gid).pp == 1:
                continue
            # The key's tables first (a lookup; most keys below the K-th plan were never costed), its
            # launcher checks only then (a quarter of a millisecond each: on Llama 4 Scout on 256
            # GB200s, 173,000 keys checked for none of them to have tables took 22 s).
            t = costed.row_tables(gid)
            if t is None or not self.valid(gid):
                continue
            seed = _fastest_ignoring_memory(self.space, t, self.assumptions)
            if seed is not None:
                seeds.append(seed)
        return seeds

    # ---- the result -------------------------------------------------------------------------
    def _finish(self, plans: list[Ranked], status: str, bound, costed: Costed) -> SearchResult:
        o = self.options
        bad = [p for p in plans if rule_violations(self.model, self.hw, self.job, p.plan, o.target, o.torchtitan_config,
                                                   o.software)]
        # a rule the per-signature tables missed: drop, and say so (tests keep this empty)
        plans = [p for p in plans if p not in bad]
        # The exact memory model has the last word (the tables leave out a few implementation-specific
        # temporaries, e.g. torch AdamW's step copy on the megatron-local path).
        unfit = [p for p in plans if not p.evaluation["memory"]["fits"]]
        plans = [p for p in plans if p not in unfit]
        if not plans:
            raise diagnose_nothing_fits(self.space, costed.tables, o, list(range(len(costed.tables.structs))),
                                        self.assumptions, self.say, exact=costed.exact_peak)
        plans, gap = _walked_order([_with_time(p) for p in plans])
        plans, dominated = _drop_dominated(plans, o.top)
        self.lap("evaluate_s")
        self.timings["total_s"] = round(time.perf_counter() - self.t0, 4)
        solver = solver_json(self, plans, status, bound, estimate_gap=gap, dropped={
            "dropped_by_rules": [p.plan.to_string() for p in bad],
            "dropped_by_exact_memory": [p.plan.to_string() for p in unfit],
            "dropped_as_dominated": dominated})
        return SearchResult(self.space, costed.tables, plans, solver, self.timings)


WANT_FACTOR = 4
"""The first enumeration holds this many times K plans: the default command walks some 3.4 K plans
before the K-th walked time is proven (the walk exceeds the estimate by up to 4.6 % there), and a
second enumeration costs the branch and bound again."""
PER_STAGE_SEED_FACTOR = 2
"""The per-stage refinement starts from this many times K of the walked plans, fastest first."""

TABLE_READ_PLANS = 1_000_000
"""Up to this many plans (keys in the model x lever combinations), the enumeration reads the
tables (exhaustive.plans_up_to: every plan's time and fit, a few milliseconds per 100,000 plans)
instead of asking CP-SAT, which returns the same plans in the same order (tests/test_search_extend.py)
and cost the default command 1.1 s CPU for its two enumerations (13 and 57 keys x 4,536 lever
combinations: 0.46 s and 0.64 s against 4 ms and 2 ms read from the tables, identical plans; the
Qwen3-30B-A3B and Llama 3.1 70B commands of docs/speed.md alike). Past it CP-SAT's model, with its
time limit, is the cheaper enumeration."""

MAX_WALK_FACTOR = WANT_FACTOR
"""At most this many times K plans are enumerated by CP-SAT for the best-first walk; when their walk
does not prove the order, the second enumeration (_Run._extend) continues the branch and bound up to
the cap that would prove it (the default command: 40th walked time 0.7 % above the bound of the plans
not enumerated, 97 more plans, 88 more walked, OPTIMAL), else the walked order holds among the
enumerated plans only (FEASIBLE). A new CP-SAT search at 4x the plans costs the branch and bound again
(after main's memory and rule changes of 2026-12-05 the default command did not prove its order even at
16 K that way, 640 plans walked). Zero-bubble or DualPipe spaces would walk most of the space with their slacks
(planner.search.bounds.WALK_SLACK, 5-15 %: Llama 3.1 8B on 8 H100s under torchtitan, 640 plans
walked, still not proven, some 7 times the search's CPU time)."""
MAX_EXTEND_REACH = 0.02
"""The second enumeration (_Run._extend) is tried only when its cap is within this much above the
estimate of the last plan walked (twice combined 1F1B's slack): the default command needs 0.7 % (its
robust search 0.05 %), DeepSeek-V3 on 256 GB200s at --top 10 without ties 1.1 %;
DeepSeek-V2 on 256 H800s (tests/test_search_optimal_walk.py) needed 4.2 %, which costs the branch
and bound thousands of keys and walks 936 plans (3.7 s CPU) in its robust search alone."""
MAX_EXTEND_FACTOR = 32
"""The second enumeration (_Run._extend) walks at most this many times K plans in all; beyond it the
walked order holds among the enumerated plans only (FEASIBLE)."""
MAX_WANT_FACTOR = 128
"""At most this many times K plans are enumerated while the exact memory model rejects the tables'."""

ESTIMATE_TOLERANCE = 1e-4
"""Relative difference between a plan's walked step time and its table time above the tables'
rounding (each term to the microsecond)."""


def _walked_order(plans: list[Ranked]) -> tuple[list[Ranked], float]:
    """The plans by their exact (walked) step time, ties in the search's order, and the largest
    relative excess of a walked time over its table time. The tables estimate the schedules the
    closed forms do not cover (Megatron's combined 1F1B under EP overlap, zero bubble, DualPipe:
    planner.cost.walked); the walk can put a plan above the estimate (on uneven chunks, such as
    one-layer chunks next to the embedding, dense or MTP ones, its stalls grow with VPP), so the
    estimate's order is not the walk's."""
    walked = [int(round(p.evaluation["time"]["step_time_s"] * 1e6)) for p in plans]
    gap = max((w / p.objective_us - 1 for w, p in zip(walked, plans) if p.objective_us > 0), default=0.0)
    order = sorted(range(len(plans)), key=lambda i: (walked[i], i))
    return [replace(plans[i], rank=k + 1) for k, i in enumerate(order)], max(gap, 0.0)


def _with_memory(r: Ranked) -> Ranked:
    """The ranked plan with its costs composed and its memory report written (see _Run._ranked)."""
    if r.evaluation or r.compose is None:
        return r
    costs = r.compose()
    return replace(r, evaluation=plan_evaluation(r.setup, costs=costs, time=False), costs=costs, compose=None)


def _with_time(r: Ranked) -> Ranked:
    """The plan with its time report (from the costs composed when it was ranked)."""
    if "time" in r.evaluation:
        return r
    ev = {**r.evaluation, "time": time_report(r.setup, costs=r.costs).to_json()}
    return replace(r, evaluation=ev, costs=None)


def _walked_us(r: Ranked) -> int:
    """The plan's walked step time (us), the objective the search proves (a plan the exact memory
    model rejects is not walked: its estimate, for the order it is dropped in)."""
    if "time" not in r.evaluation:
        return r.objective_us
    return int(round(r.evaluation["time"]["step_time_s"] * 1e6))


def _dominated_by(p: Ranked, kept: list[Ranked]) -> bool:
    """An earlier plan with the same walked step time to the microsecond and no higher peak gives
    the user nothing to choose between."""
    peak = p.evaluation["memory"]["peak_bytes"]
    return any(_walked_us(k) == _walked_us(p) and k.evaluation["memory"]["peak_bytes"] <= peak for k in kept)


def _drop_dominated(plans: list[Ranked], top: int) -> tuple[list[Ranked], list[str]]:
    """Keep the first K plans (in walked order) that no earlier plan dominates (_dominated_by: a
    dispatcher that costs the same inside one NVLink domain, activation offload that does not touch
    the peak moment). Returns the renumbered plans and the dropped plan strings."""
    kept: list[Ranked] = []
    dropped: list[str] = []
    for p in plans:
        if len(kept) == top:
            break
        if _dominated_by(p, kept):
            dropped.append(p.plan.to_string())
        else:
            kept.append(p)
    return [replace(p, rank=i + 1) for i, p in enumerate(kept)], dropped


def _kth_walked(walked: list[Ranked], k: int) -> int | None:
    """The K-th walked step time (us) among the plans that fit and no faster one dominates, None
    while fewer than K."""
    # _dominated_by over the kept plans, as the least peak kept at each walked time: the best-first
    # walk asks after every plan it walks (hundreds of times), and the pairwise scan made it
    # quadratic in the plans walked (770,000 _walked_us calls in the default search).
    least_peak: dict[int, int] = {}
    kept = 0
    for w, i in sorted((_walked_us(p), i) for i, p in enumerate(walked)):  # ties: walked order, as a stable sort
        mem = walked[i].evaluation["memory"]
        if not mem["fits"]:
            continue
        least = least_peak.get(w)
        if least is not None and least <= mem["peak_bytes"]:
            continue
        least_peak[w] = mem["peak_bytes"]
        kept += 1
        if kept == k:
            return w
    return None


def _best_first(plans: list[Ranked], k: int, complete: bool, unseen_slack: float,
                unseen_est: int | None = None) -> tuple[list[Ranked], bool]:
    """Walk ``plans`` (ranked by the tables' estimate) in order until the K-th walked time is at or
    below the lower bound of the walked time of every plan not walked: each enumerated one's estimate
    less its schedule's slack (planner.search.bounds.WALK_SLACK), and for the plans not enumerated,
    whose estimates are at least the last one's, that estimate less the space's largest slack.
    Returns the walked plans and whether that was proven (also when ``complete``: the enumeration
    holds every plan of the space). Plans the exact memory model rejects are not walked and do not
    count towards K (_finish drops them and lists them). ``unseen_est``: the least estimate of a plan
    not enumerated, when known (an enumeration of every plan up to a cap); else the last one's."""
    floors = [walked_floor_us(p.objective_us, plan_walk_slack(p.plan)) for p in plans]
    least = unseen_est if unseen_est is not None else (plans[-1].objective_us if plans else 0)
    unseen = walked_floor_us(least, unseen_slack) if not complete else None
    # rest[i]: the least bound of plan i and everything after it
    rest = list(itertools.accumulate(reversed(floors + ([unseen] if unseen is not None else [])), min))[::-1]
    walked: list[Ranked] = []
    kth: int | None = None
    for i, p in enumerate(plans):
        if kth is not None and kth <= rest[i]:
            return walked, True
        p = _with_memory(p)
        walked.append(_with_time(p) if p.evaluation["memory"]["fits"] else p)
        kth = _kth_walked(walked, k)
    return walked, complete or (kth is not None and unseen is not None and kth <= unseen)


def _fastest_ignoring_memory(space, tables: Tables, assumptions) -> Setup | None:
    """The launcher-valid lever choice with the fastest step for the one key of ``tables``,
    memory ignored."""
    gi, _ = group_index_vectors(tables)
    ok = tables.R1[0][gi["R1"]] & tables.R2[0][gi["R2"]]
    if not ok.any():
        return None
    t = tables.TP[0][gi["TP"]] + tables.TD[0][gi["TD"]] + tables.TO[0][gi["TO"]]
    j = int(np.argmin(np.where(ok, t, np.iinfo(np.int64).max)))
    if t[j] >= MAX_TABLE_US:
        return None  # beyond what the tables encode: not a seed
    plan = make_plan(tables.structs[0], lever_values(space, lever_indices(space, j)))
    return resolve_setup(space.model, space.hw, space.job, plan, assumptions)
