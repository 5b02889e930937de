"""The search: build the space and its tables, find the top-K plans, explain infeasibility.

Exactness: structural keys are visited in order of a lower bound on their step time (each time
term at its minimum over the levers); CP-SAT ranks the plans of the keys visited so far; the search
stops once the K-th best plan is faster than the next key's bound, so no unvisited key can enter
the top K (branch and bound over keys, CP-SAT within). Launcher rules of each key are checked
when it is visited. ``--solver exhaustive`` enumerates every plan of every valid key instead.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from planner.errors import NothingFitsError, PlannerError
from planner.search.rulecheck import rule_violations, struct_violations
from planner.search.space import LEVERS, Limits, Space, build_space, make_plan
from planner.search.tables import MiB, Tables, build_tables, lever_indices, lever_values
from planner.search.tables import MAX_TABLE_US


@dataclass
class Options:
    target: str = "megatron"
    top: int = 10
    solver: str = "cpsat"
    time_limit_s: float = 60.0
    limits: Limits = field(default_factory=Limits)
    moments: tuple[str, ...] = ("fp32",)
    per_stage: bool = True
    """Refine layouts (and, for --target any, per-rank recompute) with the per-stage CP-SAT model."""
    per_stage_keys: int = 12
    """Layouts that do not fit uniformly but might with per-stage choices, tried in bound order."""


@dataclass
class Ranked:
    rank: int
    plan: object
    setup: object
    objective_us: int
    evaluation: dict


@dataclass
class SearchResult:
    space: Space
    tables: Tables
    plans: list[Ranked]
    solver: dict
    timings: dict


def _timed(timings: dict, name: str, t0: float) -> float:
    now = time.perf_counter()
    timings[name] = round(now - t0, 4)
    return now


def run_search(model, hw, job, options: Options | None = None, *, assumptions=None,
               progress=None) -> SearchResult:
    from planner.cost.setup import Assumptions

    options = options or Options()
    assumptions = assumptions or Assumptions()
    timings: dict[str, float] = {}
    say = progress or (lambda msg: None)
    t = t0 = time.perf_counter()
    say("enumerating the plan space")
    space = build_space(model, hw, job, target=options.target, limits=options.limits,
                        implementation=assumptions.implementation, moments=options.moments, check_rules=False)
    t = _timed(timings, "space_s", t)
    if not space.structs:
        raise _no_structure(space, options)
    say(f"cost tables for {len(space.structs)} structural keys x {space.lever_product_size} lever combinations")
    tables = build_tables(space, assumptions=assumptions)
    t = _timed(timings, "tables_s", t)
    # Each key's fastest feasible plan, from the tables (numpy over every lever combination).
    from planner.search.exhaustive import best_per_key

    best = best_per_key(tables)
    t = _timed(timings, "bound_s", t)
    order = [int(i) for i in np.argsort(best, kind="stable") if np.isfinite(best[i])]
    checked: dict[int, bool] = {}

    def valid(i: int) -> bool:
        if i not in checked:
            checked[i] = not struct_violations(model, hw, job, space.structs[i], options.target)
        return checked[i]

    P = space.lever_product_size
    radix = len(space.structs) * P
    # Enumerate twice the K asked for: plans that tie in step time without a lower peak (a
    # dispatcher that costs the same inside one NVLink domain, activation offload that does not
    # touch the peak moment) are dropped at the end, and the list still holds K.
    want = 2 * options.top
    say("solving")
    if options.solver == "exhaustive":
        from planner.search.exhaustive import solve_exhaustive

        cand = [i for i in order if valid(i)]
        found = solve_exhaustive(tables.subset(cand), want) if cand else []
        status, bound, solves, visited = "OPTIMAL", None, 0, len(cand)
    elif options.solver == "cpsat":
        from planner.search.cpsat import enumerate_cpsat

        # The K fastest valid keys each have a plan no slower than the K-th of them: the K-th best
        # plan overall is at most that fast (U). Only keys whose best plan is <= U can hold a
        # top-K plan; CP-SAT enumerates every feasible plan of those keys up to U.
        cand: list[int] = []
        for i in order:
            if len(cand) >= want and best[i] > best[cand[want - 1]]:
                break
            if valid(i):
                cand.append(i)
        found, status, bound, solves = [], "OPTIMAL", None, 0
        if cand:
            cap = int(best[cand[min(want, len(cand)) - 1]])
            remaining = options.time_limit_s - (time.perf_counter() - t0)
            res = enumerate_cpsat(tables.subset(cand), cap, want, time_limit_s=max(remaining, 0.5))
            found, status, solves = res.plans, res.status, res.solves
            bound = cap * radix
            if status == "INFEASIBLE":  # cannot happen with a valid bound; say so rather than hide it
                status = "UNKNOWN"
        visited = len(cand)
    else:
        raise PlannerError(f"Unknown solver '{options.solver}'.", hint="Use --solver cpsat or --solver exhaustive.")
    t = _timed(timings, "solve_s", t)
    say("evaluating the ranked plans")
    plans = [_ranked(space, tables, k + 1, key, gid, flat, radix, assumptions) for k, (key, gid, flat) in enumerate(found)]
    refined_info = {"tried": 0, "improved": 0}
    if options.per_stage and space.model.num_layers > 1:
        # Per-stage layouts can also rescue layouts that fit no uniform split.
        say("per-stage layouts (CP-SAT)")
        plans = _per_stage(space, tables, options, plans, best, order, valid, radix, assumptions, refined_info, want)
        t = _timed(timings, "per_stage_s", t)
    if not plans:
        rows = [i for i in order if checked.get(i)] or list(range(len(space.structs)))
        raise diagnose_nothing_fits(space, tables, options, rows, assumptions, say)
    if not found or any(p.objective_us != (k // radix) for p, (k, _, _) in zip(plans, found)) or len(plans) != len(found):
        # Per-stage refinements entered the ranking: each is optimal for its layout and levers
        # (CP-SAT), but the per-stage space was not searched over every layout.
        if status == "OPTIMAL":
            status = "FEASIBLE"
    bad = [p for p in plans if rule_violations(model, hw, job, p.plan, options.target)]
    if bad:  # a rule the per-signature tables missed: drop, and say so (tests keep this empty)
        plans = [p for p in plans if p not in bad]
    # The exact memory model has the last word (the tables leave out a few implementation-specific
    # temporaries, e.g. torch AdamW's step copy on the megatron-local path).
    unfit = [p for p in plans if not p.evaluation["memory"]["fits"]]
    plans = [p for p in plans if p not in unfit]
    plans, dominated = _drop_dominated(plans, options.top)
    _timed(timings, "evaluate_s", t)
    timings["total_s"] = round(time.perf_counter() - t0, 4)
    solver = {
        "name": options.solver,
        "status": status,
        "objective_us": plans[0].objective_us,
        "kth_bound_us": (bound // radix) if bound is not None else plans[-1].objective_us,
        "structural_keys": len(space.structs),
        "lever_combinations": P,
        "keys_in_model": visited,
        "dropped_by_rules": [p.plan.to_string() for p in bad],
        "dropped_by_exact_memory": [p.plan.to_string() for p in unfit],
        "dropped_as_dominated": dominated,
        "per_stage": refined_info,
        "status_scope": ("OPTIMAL: proven best over every uniform plan (CP-SAT enumeration under the bound); "
                         "FEASIBLE: per-stage refinements (uneven layouts, per-rank recompute) entered the ranking, "
                         "each optimal for its layout and levers, or a time limit was hit"),
    }
    return SearchResult(space, tables, plans, solver, timings)


def _per_stage(space, tables, options, plans, best, order, valid, radix, assumptions, info, top) -> list[Ranked]:
    """Refine the ranked plans' layouts, and try the fastest layouts that do not fit uniformly,
    with the per-stage CP-SAT model; return the top K of all, ranked by exact step time."""
    from planner.cost.evaluate import plan_evaluation
    from planner.search.exhaustive import group_index_vectors
    from planner.search.stages import refine

    stage_rc = options.target == "any"
    # Plans keyed by canonical string: (step time in us, order of arrival, setup, evaluation). Ties in
    # time keep the uniform ranking's order (simpler levers first); refinements follow their seeds.
    pool: dict[str, tuple[int, int, object, dict]] = {}
    for r in plans:
        pool[r.plan.to_string()] = (r.objective_us, len(pool), r.setup, r.evaluation)
    seeds = [r.setup for r in plans]
    # Layouts whose best lever choice, ignoring memory, could beat the K-th plan: the uniform split
    # may be what keeps them out (the first stages hold the most micro-batches).
    kth = max(v[0] for v in pool.values()) / 1e6 if len(pool) >= top else math.inf
    gi, _ = group_index_vectors(tables)
    tried = 0
    for i in np.argsort(tables.time_lower_bound(), kind="stable"):
        lower = tables.time_lower_bound()[i]
        if tried >= options.per_stage_keys or lower / 1e6 >= kth or lower >= MAX_TABLE_US:
            break
        if np.isfinite(best[i]) or space.structs[i].pp == 1 or not valid(int(i)):
            continue
        seed = _fastest_ignoring_memory(space, tables, int(i), gi, assumptions)
        if seed is not None:
            seeds.append(seed)
            tried += 1
    for setup in seeds:
        info["tried"] += 1
        # A deterministic budget per model (CP-SAT's deterministic time), not the wall clock, so
        # the same input ranks the same plans on a busy machine too.
        res = refine(setup, stage_recompute=stage_rc and setup.recompute.kind in ("none", "full"),
                     time_limit_s=5.0)
        if res.improved:
            ev = plan_evaluation(res.setup)
            key = res.setup.plan.to_string()
            if key not in pool and not rule_violations(space.model, space.hw, space.job, res.setup.plan, options.target):
                info["improved"] += 1
                pool[key] = (int(round(ev["time"]["step_time_s"] * 1e6)), len(pool), res.setup, ev)
    ranked = sorted(pool.values(), key=lambda v: (v[0], v[1]))[:top]
    return [Ranked(k + 1, s.plan, s, t, ev) for k, (t, _, s, ev) in enumerate(ranked)]


def _drop_dominated(plans: list[Ranked], top: int) -> tuple[list[Ranked], list[str]]:
    """Keep the first K plans that no earlier plan dominates: an earlier plan (simpler levers win
    ties in the ranking) with the same step time to the microsecond and no higher peak gives the
    user nothing to choose between. Returns the renumbered plans and the dropped plan strings."""
    kept: list[Ranked] = []
    dropped: list[str] = []
    for p in plans:
        if len(kept) == top:
            break
        peak = p.evaluation["memory"]["peak_bytes"]
        if any(k.objective_us == p.objective_us and k.evaluation["memory"]["peak_bytes"] <= peak for k in kept):
            dropped.append(p.plan.to_string())
        else:
            kept.append(p)
    return [replace(p, rank=i + 1) for i, p in enumerate(kept)], dropped


def _fastest_ignoring_memory(space, tables, i, gi, assumptions):
    """The launcher-valid lever choice with the fastest step for key ``i``, memory ignored."""
    from planner.cost.setup import resolve_setup

    ok = tables.R1[i][gi["R1"]] & tables.R2[i][gi["R2"]]
    if not ok.any():
        return None
    t = tables.TP[i][gi["TP"]] + tables.TD[i][gi["TD"]] + tables.TO[i][gi["TO"]]
    j = int(np.argmin(np.where(ok, t, np.iinfo(np.int64).max)))
    if t[j] >= MAX_TABLE_US:
        return None  # beyond what the tables encode: not a seed
    plan = make_plan(space.structs[i], lever_values(space, lever_indices(space, j)))
    return resolve_setup(space.model, space.hw, space.job, plan, assumptions)


def _ranked(space, tables, rank, key, gid, flat, radix, assumptions) -> Ranked:
    from planner.cost.evaluate import plan_evaluation
    from planner.cost.setup import resolve_setup

    s = space.structs[gid]
    plan = make_plan(s, lever_values(space, lever_indices(space, flat)))
    setup = resolve_setup(space.model, space.hw, space.job, plan, assumptions)
    return Ranked(rank, setup.plan, setup, key // radix, plan_evaluation(setup))


def _no_structure(space, options) -> PlannerError:
    pruned = ", ".join(f"{k} ({v})" for k, v in sorted(space.pruned.items())) or "none"
    lim = ""
    if options.limits.fix or options.limits.max:
        lim = f" Your limits: --fix {options.limits.fix or '-'} --max {options.limits.max or '-'}."
    return NothingFitsError(
        f"No parallel layout of {space.model.name} on {space.job.gpus} {space.hw.name} GPUs satisfies the "
        f"divisibility and layout rules (rejected by: {pruned}).{lim}",
        hint="Try a GPU count with more factors of 2, a global batch divisible by more data-parallel degrees, "
        "or looser --fix/--max.",
    )


def _smallest_peak(tables: Tables, rows: list[int]):
    """(peak MiB, key, lever index, components MiB) of the plan with the smallest peak over every
    lever combination of the keys in rows: the memory the search could not get under."""
    from planner.search.exhaustive import group_index_vectors

    gi, _ = group_index_vectors(tables)
    best = (math.inf, None, None, None)
    for s in rows:
        peak = np.zeros(len(gi["W"]), dtype=np.int64)
        parts = {}
        for r in tables.stages_kept[s]:
            ot = tables.OT[s, r][gi["OT"]]
            w, c, a = tables.W[s, r][gi["W"]], tables.C[s, r][gi["C"]], np.maximum(tables.A[s, r][gi["A"]], ot)
            tot = w + c + a
            higher = tot > peak
            peak = np.where(higher, tot, peak)
            for name, arr in (("constant (weights, gradients, optimizer)", w), ("communication buffers", c),
                              ("activations and transients", a)):
                parts[name] = np.where(higher, arr, parts.get(name, np.zeros_like(arr)))
        j = int(np.argmin(peak))
        if peak[j] < best[0]:
            best = (int(peak[j]), s, j, {k: int(v[j]) for k, v in parts.items()})
    return best


def _gpus_that_fit(space: Space, options: Options, assumptions, max_factor: int = 64) -> int | None:
    """The smallest power-of-two multiple of the job's GPU count (same batch per GPU) at which some
    plan's peak fits, searched with the same tables: replicated weights and gradients shrink only
    with TP, PP and EP, so a linear guess would promise too much."""
    from planner.specs.common import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_TOKENS_PER_STEP

    # Bounded work: no count beyond what planner accepts is tried, nor one at which even the
    # weights alone, fully sharded at one byte per parameter, would not fit (a model far too large
    # for any count would otherwise cost six full searches at up to 64x the GPUs).
    params = space.model.params.total + space.model.params.mtp
    usable = space.hw.gpu.hbm_usable_bytes.value
    f = 2
    while f <= max_factor:
        gpus, batch = space.job.gpus * f, space.job.global_batch * f
        if gpus > MAX_GPUS or batch > MAX_GLOBAL_BATCH or batch * space.job.seq_len > MAX_TOKENS_PER_STEP:
            break
        if params / gpus > usable:
            f *= 2
            continue
        job = space.job.model_copy(update={"gpus": gpus, "global_batch": batch})
        sp = build_space(space.model, space.hw, job, target=space.target, limits=space.limits,
                         implementation=assumptions.implementation, moments=options.moments, check_rules=False)
        if sp.structs:
            rows = [i for i, st in enumerate(sp.structs)
                    if not struct_violations(sp.model, sp.hw, job, st, options.target)]
            if rows:
                tables = build_tables(sp, assumptions=assumptions)
                if _smallest_peak(tables, rows)[0] <= tables.cap_mib:
                    return job.gpus
        f *= 2
    return None


def diagnose_nothing_fits(space: Space, tables: Tables, options: Options, rows: list[int],
                          assumptions=None, say=None) -> NothingFitsError:
    """Say plainly why nothing fits: the smallest achievable peak (over every lever combination of
    the keys considered), the class that dominates it, and what would make room."""
    best = _smallest_peak(tables, rows)
    peak_mib, s, j, parts = best
    cap = tables.cap_mib
    if s is not None and peak_mib <= cap:
        if _too_slow(tables, rows):
            return _step_too_long(space, options)
        return _rules_bind(space, options)
    from planner.search.tables import lever_indices as _li, lever_values as _lv

    plan = make_plan(space.structs[s], _lv(space, _li(space, j))) if s is not None else None
    if plan is not None:
        plan = plan.canonical_for(space.model, space.hw, space.job)
    dominant = max(parts, key=parts.get) if parts else "memory"
    gib = MiB / 2**30
    msg = (f"Nothing fits: every plan of {space.model.name} on {space.job.gpus} {space.hw.name} GPUs "
           f"({space.target} launcher) exceeds the {cap * gib:.1f} GiB per-GPU allocation limit. The smallest "
           f"achievable peak is {peak_mib * gib:.1f} GiB ({(peak_mib - cap) * gib:.1f} GiB over), with plan "
           f"{plan.to_string() if plan else '-'}; {dominant} dominate it "
           f"({', '.join(f'{k} {v * gib:.1f} GiB' for k, v in parts.items())}).")
    hints = []
    if options.limits.fix or options.limits.max:
        hints.append("relax your --fix/--max limits")
    if "constant" in dominant:
        grows = _constant_shards_with_gpus(space, plan)
        if grows:
            from planner.cost.setup import Assumptions

            if say:
                say("nothing fits: finding the GPU count at which a plan would")
            need = _gpus_that_fit(space, options, assumptions or Assumptions())
            named = ", ".join(grows[:-1]) + " and " + grows[-1] if len(grows) > 1 else grows[0]
            hints.append(f"more GPUs (constant memory shrinks as {named} grow"
                         + (f": {need} GPUs at the same batch per GPU fit)" if need else
                            f"; even {space.job.gpus * 64} GPUs do not fit under your limits)"))
        else:
            hints.append("allow ZeRO/FSDP sharding (--fix sharding=...) or more pipeline stages: under your "
                         "limits constant memory does not shrink with more GPUs, only data parallelism grows")
    else:
        hints.append("a shorter sequence or smaller global batch per GPU")
    larger = _larger_hardware(space.hw, peak_mib * MiB)
    if larger:
        hints.append(f"a larger GPU ({larger})")
    return NothingFitsError(msg, hint="To make room: " + "; ".join(hints) + ".",
                            details={"smallest_peak_bytes": peak_mib * MiB, "capacity_bytes": cap * MiB,
                                     "plan": plan.to_string() if plan else None, "dominant": dominant,
                                     "components_bytes": {k: v * MiB for k, v in parts.items()}})


def _constant_shards_with_gpus(space: Space, plan) -> list[str]:
    """Which degrees that divide the constant memory could still grow if the job had more GPUs,
    under the user's --fix/--max: data-parallel sharding (ZeRO/FSDP, Megatron's distributed
    optimizer), pipeline stages, and for MoE the expert-parallel degree. TP is left out: it is
    bounded by the NVLink domain and the head count, not by the GPU count."""
    lim = space.limits
    out = []
    if any(lim.allows("sharding", v) for v in ("dist_opt", "zero2", "fsdp")):
        out.append("the data-parallel shards")
    pp = plan.pp if plan is not None else 1
    if pp < space.model.num_layers and lim.allows("pp", pp * 2) and "pp" not in lim.fix:
        out.append("pipeline stages")
    ep = plan.ep if plan is not None else 1
    if space.model.is_moe and "ep" not in lim.fix and lim.allows("ep", ep * 2) \
            and ep * 2 <= space.model.moe.num_experts:
        out.append("expert parallelism")
    return out


def _too_slow(tables: Tables, rows: list[int]) -> bool:
    """Whether plans pass the rules and fit in memory, but every one of them has a step time at
    the tables' cap (MAX_TABLE_US): the job is too large for the hardware, not the rules too strict."""
    from planner.search.exhaustive import group_index_vectors, plan_costs

    gi, _ = group_index_vectors(tables)
    some_fit = False
    for a in range(0, len(rows), 1024):
        ok, t = plan_costs(tables, np.asarray(rows[a:a + 1024]), gi)
        if (ok & (t < MAX_TABLE_US)).any():
            return False
        some_fit = some_fit or bool(ok.any())
    return some_fit


def _step_too_long(space, options) -> NothingFitsError:
    hours = MAX_TABLE_US / 1e6 / 3600
    return NothingFitsError(
        f"Nothing fits: plans of {space.model.name} on {space.job.gpus} {space.hw.name} GPUs fit in memory and pass the "
        f"{options.target} launcher's checks, but every one takes more than {hours:.1f} hours per step, beyond the step "
        "times planner's search represents (its integer tables cap a step at 2^35 us): global batch "
        f"{space.job.global_batch:,} x seq {space.job.seq_len:,} is far more work per step than these GPUs do in that time.",
        hint="Use a smaller global batch or sequence length, more GPUs, or check the hardware's rates (FLOP/s, bandwidths).",
        details={"max_step_time_us": MAX_TABLE_US},
    )


def _rules_bind(space, options) -> NothingFitsError:
    """Memory is not the problem: every plan breaks a rule of the target launcher."""
    from collections import Counter

    counts: Counter = Counter()
    for st in space.structs[:2000]:
        bad = struct_violations(space.model, space.hw, space.job, st, options.target)
        counts.update(bad[:1])
    top = ", ".join(f"{rule} ({n} layouts)" for rule, n in counts.most_common(3)) or "the lever rules"
    return NothingFitsError(
        f"No plan of {space.model.name} on {space.job.gpus} {space.hw.name} GPUs passes the {options.target} "
        f"launcher's start-up checks, although some fit in memory: rejected by {top}.",
        hint="Try --target any (plans no launcher may run yet), another launcher, or fix the model spec "
        "('planner check' explains each rule).",
        details={"rules": dict(counts)},
    )


def _larger_hardware(hw, need_bytes: float) -> str:
    from planner.specs.catalog import all_hardware

    out = []
    for h in all_hardware():
        if h.gpu.hbm_usable_bytes.value > need_bytes * 1.1 and h.name != hw.name:
            out.append((h.gpu.hbm_usable_bytes.value, h.name))
    return ", ".join(n for _, n in sorted(out)[:3])
