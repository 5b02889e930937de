"""Families, not near-twins: the ranked plans in tie order (planner.search.ties), grouped by family.

A family is what an engineer chooses between: the parallel degrees (TP, CP, PP, EP, expert TP, DP),
the sharding and the precision. Inside a family the pipeline's virtual stages and layout, the
micro-batch size, recompute, offload and the dispatcher vary; those variants differ by a few per cent,
less than the model can tell apart, and ten of them filled the old top ten. ``search`` shows the first
plan of each family in tie order (its most robust plan among the fastest ties) with the family's
spread over the plans ranked; ``--all-variants`` shows every plan.

Pure functions over the ranked plans; the driver calls :func:`arrange` once, after the walked order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from planner.search.risks import Risk, plan_risks
from planner.search.space import Limits
from planner.search.ties import FSDP_SHARDINGS, NO_RESOLUTION, Resolution, job_resolution, robustness, tie_order
from planner.specs.plan import Plan

STABLE_POOL = 40
"""The plans a search ranks for any --top up to this many: the tie order and the families are formed
over the same pool whatever the --top, so the first plan (and each plan shown) does not depend on it
(issue 40: --top 1 and --top 10 once returned different first plans). 40 is four times the default
--top, so the ten families shown each have their variants and the first tie group its robust members."""
POOL_FACTOR = 4
"""Beyond STABLE_POOL, the search ranks this many times the plans asked for (at most MAX_POOL)."""
MAX_POOL = 100
"""The most plans a search ranks for families (search's --top bound)."""


def family_key(plan, gpus: int) -> str:
    """A typed ``Plan``'s family on ``gpus`` GPUs: its degrees above 1 (expert TP where it differs
    from TP), sharding and precision, e.g. 'pp2 ep64 dp128 zero2 bf16'."""
    d = plan.degrees(gpus)
    degrees = []
    for k in ("tp", "cp", "pp", "ep", "dp"):
        v = getattr(d, k)
        if v > 1:
            degrees.append(f"{k}{v}")
        if k == "ep" and d.etp != d.tp:
            degrees.append(f"etp{d.etp}")
    precision = [str(getattr(plan.precision, "value", plan.precision))] if plan.precision else []
    return " ".join([*(degrees or ["1 GPU"]), str(plan.sharding), *precision])


def pool_size(top: int) -> int:
    """How many plans to rank for ``top`` families (or plans): STABLE_POOL up to that many."""
    if top <= STABLE_POOL:
        return STABLE_POOL
    return max(top, min(POOL_FACTOR * top, MAX_POOL))


@dataclass(frozen=True)
class Family:
    key: str
    variants: int
    best_step_s: float
    worst_step_s: float

    def to_json(self) -> dict:
        return {"key": self.key, "variants": self.variants, "best_step_time_s": self.best_step_s,
                "worst_step_time_s": self.worst_step_s,
                "spread": round(self.worst_step_s / self.best_step_s - 1, 4) if self.best_step_s > 0 else 0.0}



def family_cell(family: dict) -> str:
    """The search table's family cell from a plan's ``family`` JSON: identity, and the spread of its
    variants over the plans ranked."""
    if family["variants"] == 1:
        return family["key"]
    return f"{family['key']}; {family['variants']} variants to +{100 * family['spread']:.1f}%"


def families_of(keys: Sequence[str], steps: Sequence[float]) -> dict[str, Family]:
    """Each family's variant count and best and worst step over the plans given."""
    out: dict[str, Family] = {}
    for k, s in zip(keys, steps):
        f = out.get(k)
        out[k] = Family(k, 1, s, s) if f is None else Family(k, f.variants + 1, min(f.best_step_s, s),
                                                                  max(f.worst_step_s, s))
    return out


def first_of_each(keys: Sequence[str]) -> list[int]:
    """Indices of the first item of each family, in order."""
    seen: set[str] = set()
    out = []
    for i, k in enumerate(keys):
        if k not in seen:
            seen.add(k)
            out.append(i)
    return out


ROBUST_CLASSES = ("sharding=dist_opt,offload=none,recompute=none", "sharding=dist_opt,offload=none")
"""The robust searches' classes, most robust first, by the tie order's criteria after the runtime
risks (planner.search.ties.ROBUSTNESS_ORDER: no offload, the distributed optimizer before FSDP
variants, less recompute). A plan's level is the first class it belongs to (:func:`robust_level`)."""


def robust_level(plan, risks: Sequence[Risk]) -> int:
    """The index of the first of ROBUST_CLASSES a typed ``Plan`` without runtime risks belongs to;
    len(ROBUST_CLASSES) for a plan in none (or on a risk). By the tie order's criteria, not the
    classes' pinned values: plain DDP counts as the distributed optimizer does (neither is a
    Megatron-FSDP variant), though the searches pin the distributed optimizer."""
    off = plan.offload
    if risks or off.optimizer or off.activations or plan.sharding.kind in FSDP_SHARDINGS:
        return len(ROBUST_CLASSES)
    return 0 if plan.recompute.kind == "none" else 1


@dataclass(frozen=True)
class RobustSearch:
    """One robust search: its class's level (index in ROBUST_CLASSES), that class as --fix text, and
    the limits it runs under (the user's --fix and --max with the class pinned)."""

    level: int
    fix: str
    limits: Limits


def robust_searches(limits: Limits) -> list[RobustSearch]:
    """The robust searches the user's --fix/--max allow, most robust class first: none where the user
    fixed the sharding or the offload (their choice wins), and not the no-recompute class where they
    fixed the recompute (the next class then pins what they fixed)."""
    if "sharding" in limits.fix or "offload" in limits.fix:
        return []
    out = []
    for level, text in enumerate(ROBUST_CLASSES):
        pinned = Plan.given(text, "--fix")
        if any(k in limits.fix and limits.fix[k] != v for k, v in pinned.items()):
            continue
        out.append(RobustSearch(level, text, Limits({**limits.fix, **pinned}, dict(limits.max))))
    return out


def group_level(plans: list, model, hw, job, target: str, resolution: Resolution | None = None) -> int | None:
    """The most robust level (:func:`robust_level`) among the first tie group of the ranked plans;
    None where there is nothing to search for: no plans, or not Megatron (torchtitan's data
    parallelism is FSDP2, no distributed optimizer to pin, and under --target any FSDP is what
    torchtitan's export takes). The group's plans in a search's pool are not all of the group's
    plans even where the pool ends beyond it: the search drops a plan that a faster one with less
    memory dominates (the distributed optimizer's twin of a Megatron-FSDP plan), so the robust
    searches run whatever the pool's extent."""
    if not plans or target != "megatron":
        return None
    if resolution is None:
        precision = plans[0].setup.plan.precision or job.default_precision
        resolution = job_resolution(model, hw, str(getattr(precision, "value", precision)))
    edge = min(float(p.evaluation["time"]["step_time_s"]) for p in plans) * (1 + resolution.relative)
    return min(robust_level(p.setup.plan, plan_risks(model, p.setup.plan, target))
               for p in plans if float(p.evaluation["time"]["step_time_s"]) <= edge)


def arrange(plans: list, model, hw, job, target: str, *, families: bool, shown: int, pool: int,
            risks: tuple[Risk, ...] | None = None, resolution: Resolution | None = None,
            searched: int | None = None) -> tuple[list, dict]:
    """The driver's ``Ranked`` plans (walked order) in tie order, renumbered, each evaluation given
    ``family``, ``tie_group`` and ``risks``; with ``families`` only the first plan of each family, at
    most ``shown``. ``pool``: how many plans the search asked for (fewer ranked: the space has no more);
    ``searched``: how many of ``plans`` (the first) that search ranked (the rest: the robust search's).
    Returns the plans and the ``ties`` JSON object."""
    if not plans:
        return plans, {}
    if resolution is None:
        precision = plans[0].setup.plan.precision or job.default_precision
        resolution = job_resolution(model, hw, str(getattr(precision, "value", precision))) if hw is not None \
            else NO_RESOLUTION
    found = {id(p): [r for r in plan_risks(model, p.setup.plan, target, risks)] for p in plans}

    def step(p) -> float:
        return float(p.evaluation["time"]["step_time_s"])

    def robust(p) -> tuple:
        mem = p.evaluation["memory"]
        return robustness(p.setup.plan, mem["headroom_bytes"], mem["capacity_bytes"],
                          [r.name for r in found[id(p)]], target).key()

    ordered = tie_order(plans, step, robust, resolution.relative)
    keys = [family_key(p.setup.plan, job.gpus) for _, p in ordered]
    fams = families_of(keys, [step(p) for _, p in ordered])
    pick = first_of_each(keys)[:shown] if families else list(range(min(len(ordered), shown)))
    fastest = min(step(p) for p in plans)
    last_in_first_group = max(step(p) for g, p in ordered if g == 1)
    out = []
    for rank, i in enumerate(pick, start=1):
        group, p = ordered[i]
        ev = {**p.evaluation, "family": fams[keys[i]].to_json(), "tie_group": group,
              "risks": [r.to_json() for r in found[id(p)]]}
        out.append(replace(p, rank=rank, evaluation=ev))
    main = plans[:searched] if searched is not None else plans
    slowest = max(step(p) for p in main)
    info = {**resolution.to_json(), "families": families, "plans_ranked": len(plans), "plans_searched": len(main), "families_found": len(fams),
            "first_group_size": sum(1 for g, _ in ordered if g == 1),
            "first_group_complete": slowest > fastest * (1 + resolution.relative) or len(main) < pool,
            "first_group_slowest_step_time_s": last_in_first_group}
    return out, info
