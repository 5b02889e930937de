"""The searches of `planner compare`: one job on several systems, the swap test between each
system's best plan and the baseline's, and sweeps over GPU counts.

Everything returns plain dicts (the `--json` output). The sentences that say what changed and why,
and the tables and Markdown, are generated from these dicts by :mod:`planner.report.compare`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.cost.evaluate import context_json, plan_evaluation
from planner.cost.memory import memory_report
from planner.cost.setup import resolve_setup
from planner.errors import NothingFitsError, PlannerError
from planner.parallel import auto_jobs, fork_map
from planner.rules import Target
from planner.search.driver import run_search
from planner.search.rulecheck import rule_violations
from planner.specs.catalog import spec_hash
from planner.specs.plan import Plan

DEGREES = ("tp", "cp", "pp", "vpp", "ep", "etp", "dp", "edp", "mbs")
"""Plan keys counted among the top K and compared between best plans (edp, ep, etp: MoE only)."""
LEVERS = ("recompute", "sharding", "offload", "precision", "moments", "dispatcher", "ep_overlap")

# Sweep: without --global-batch the batch is the reference job's, raised where needed so every GPU
# gets at least this many tokens per step (Llama 3's 16,384-GPU run: 2,048 sequences of 8,192
# tokens, 1,024 tokens per GPU; arXiv 2407.21783 Table 4).
MIN_TOKENS_PER_GPU = 1024
SWEEP_BATCH_RULE = (
    "the reference job's global batch, raised to the next power of two of at least "
    f"{MIN_TOKENS_PER_GPU:,} tokens per GPU where the GPU count needs more (Llama 3's 16,384-GPU run "
    "trained on 1,024 tokens per GPU per step)"
)


def r6(x: float) -> float:
    """Stable, compact numbers for JSON (six significant digits, as the time JSON)."""
    return float(f"{x:.6g}")



# ---------------------------------------------------------------------------------------------
# Job and token budget.
# ---------------------------------------------------------------------------------------------
def token_budget(model, tokens: float | None) -> dict:
    """Tokens to train: --tokens, else the model's published budget, else 1T (said so)."""
    if tokens is not None:
        return {"tokens": float(tokens), "source": "--tokens"}
    if model.training_tokens is not None:
        return {"tokens": float(model.training_tokens.value), "source": model.training_tokens.source}
    return {"tokens": 1e12, "source": f"{model.name} has no published token budget: 1T tokens assumed"}


def sweep_global_batch(reference_batch: int, seq_len: int, gpus: int) -> int:
    """The sweep's global batch at ``gpus`` GPUs (see SWEEP_BATCH_RULE)."""
    need = math.ceil(gpus * MIN_TOKENS_PER_GPU / seq_len)
    if need <= reference_batch:
        return reference_batch
    return 1 << (need - 1).bit_length()


# ---------------------------------------------------------------------------------------------
# One hardware.
# ---------------------------------------------------------------------------------------------
def hardware_json(hw) -> dict:
    return {
        "name": hw.name,
        "spec_hash": spec_hash(hw),
        "gpu": hw.gpu.name,
        "generation": hw.generation,
        "domain_size": hw.domain_size,
        "hbm_usable_bytes": hw.gpu.hbm_usable_bytes.value,
        "peak_bf16_flops": hw.peak("bf16"),
        "nvlink_bytes_per_s": hw.nvlink.bandwidth_per_direction.value,
        "network_bytes_per_s": hw.scale_out.bandwidth_per_direction.value,
        "host_link": hw.host.kind,
        "host_link_bytes_per_s": hw.host.bandwidth_per_direction.value,
    }


def plan_summary(ev: dict, gpus: int, tokens: float) -> dict:
    """The numbers a comparison shows for one evaluated plan (an `evaluation` dict)."""
    t, m = ev["time"], ev["memory"]
    tps = t["tokens_per_s_per_gpu"]
    topo = t["topology"]
    idle = topo["idle_gpus"]
    seconds = tokens / (tps * gpus)
    plan = ev["plan"]
    return {
        "gpus": gpus,
        "tokens_per_s_cluster": r6(tps * gpus),
        "plan_string": ev["plan_string"],
        "degrees": {k: plan[k] for k in DEGREES if k in plan},
        "levers": {k: plan[k] for k in LEVERS if k in plan},
        "micro_batches": ev["micro_batches"],
        "tokens_per_s_per_gpu": t["tokens_per_s_per_gpu"],
        "model_tflops_per_gpu": t["model_tflops_per_gpu"],
        "peak_tflops": r6(t["model_tflops_per_gpu"] / t["mfu"]) if t["mfu"] else None,
        "mfu": t["mfu"],
        "step_time_s": t["step_time_s"],
        "peak_bytes": m["peak_bytes"],
        "capacity_bytes": m["capacity_bytes"],
        "peak_fraction": r6(m["peak_bytes"] / m["capacity_bytes"]),
        "constant_bytes": sum(m["components"][k] for k in ("weights", "gradients", "optimizer")),
        "worst_stage": m["worst_stage"],
        "peak_moment": m["peak_moment"]["window"],
        "fits": m["fits"],
        "bottleneck": t["bottleneck"],
        "breakdown": t["breakdown"],
        "groups": {name: {"size": g["size"], "domains": g["domains"], "links": g["links"]}
                   for name, g in topo["groups"].items()},
        "domain_fill": topo["domain_fill"],
        "idle_gpus": idle,
        "days": r6(seconds / 86400),
        "gpu_hours": r6(seconds * gpus / 3600),
        "gpu_hours_with_idle": r6(seconds * (gpus + idle) / 3600),
    }


def top_k_usage(plans: list[dict]) -> dict:
    """How the ranked plans use each dimension: {dim: {value: count}} over the top K."""
    usage: dict[str, dict[str, int]] = {}
    for p in plans:
        plan = p["plan"]
        for k in DEGREES + LEVERS:
            if k in plan:
                v = str(plan[k])
                usage.setdefault(k, {})
                usage[k][v] = usage[k].get(v, 0) + 1
    return {"plans": len(plans), "dims": usage}



SOLVER_KEYS = ("name", "status", "objective_us", "kth_bound_us", "structural_keys", "lever_combinations", "keys_in_model")


def search_one(model, hw, job, options, assumptions, tokens: float, progress=None) -> dict:
    """Search one hardware; a hardware where nothing fits (or the job is invalid) gets a status
    and the one-paragraph reason instead of failing the whole comparison."""
    entry: dict = {"hardware": hardware_json(hw)}
    try:
        res = run_search(model, hw, job, options, assumptions=assumptions, progress=progress)
    except NothingFitsError as exc:
        entry.update(status="nothing_fits", reason=exc.paragraph())
        return entry
    except PlannerError as exc:
        entry.update(status="error", reason=exc.paragraph())
        return entry
    plans = [{"rank": r.rank, **r.evaluation} for r in res.plans]
    entry.update(
        status="ok",
        best=plans[0],
        summary=plan_summary(plans[0], job.gpus, tokens),
        top=[{"rank": p["rank"], "plan_string": p["plan_string"],
              "tokens_per_s_per_gpu": p["time"]["tokens_per_s_per_gpu"], "mfu": p["time"]["mfu"],
              "peak_bytes": p["memory"]["peak_bytes"]} for p in plans],
        top_k=top_k_usage(plans),
        # The search's status and size; `planner search --json` has the whole solver object.
        solver={k: res.solver[k] for k in SOLVER_KEYS if k in res.solver},
        _timings=res.timings,
    )
    return entry


def evaluate_elsewhere(plan_string: str, model, hw, job, assumptions, target: Target, tokens: float,
                       torchtitan_config: str | None = None) -> dict:
    """One system's best plan evaluated on another (the swap test)."""
    out: dict = {"plan_string": plan_string, "hardware": hw.name}
    try:
        plan = Plan.parse(plan_string)
        bad = rule_violations(model, hw, job, plan, target, torchtitan_config)
        if bad:
            out.update(status="rule", rule=bad[0].rule, reason=bad[0].message)
            return out
        setup = resolve_setup(model, hw, job, plan, assumptions)
        ev = plan_evaluation(setup)
    except PlannerError as exc:
        out.update(status="rule", rule=getattr(exc, "rule", "error"), reason=exc.paragraph())
        return out
    s = plan_summary(ev, job.gpus, tokens)
    out.update(status="fits" if ev["memory"]["fits"] else "does_not_fit", summary=s)
    if not ev["memory"]["fits"]:
        out["reason"] = memory_report(setup).reason()
    return out


# ---------------------------------------------------------------------------------------------
# Cost and time to train: arithmetic on one system's per-GPU throughput, its GPU count and a price.
# ---------------------------------------------------------------------------------------------
def cost_json(summary: dict, price) -> dict | None:
    """What training costs on one system at its GPU count (None without a price). Every GPU the job
    holds is paid for, the ones a partly filled NVLink domain leaves idle included (they are rented
    all the same): cost per token is the price of the billed GPUs over the cluster's tokens."""
    if price is None:
        return None
    billed = summary["gpus"] + summary["idle_gpus"]
    usd_per_s = price.usd_per_gpu_hour * billed / 3600
    cluster = summary["tokens_per_s_per_gpu"] * summary["gpus"]
    return {
        "usd_per_gpu_hour": price.usd_per_gpu_hour,
        "source": price.source,
        "estimate": price.estimate,
        "billed_gpus": billed,
        "usd_per_million_tokens": r6(usd_per_s / cluster * 1e6),
        "usd_per_run": r6(summary["gpu_hours_with_idle"] * price.usd_per_gpu_hour),
    }


def same_budget(entries: list[dict], tokens: float) -> dict | None:
    """What each system trains for the money the baseline spends on the token budget (None unless
    the baseline and at least one other system have a plan and a price)."""
    base = entries[0]
    if base["status"] != "ok" or base["summary"].get("cost") is None:
        return None
    usd = base["summary"]["cost"]["usd_per_run"]
    rows = []
    for e in entries:
        s = e["summary"] if e["status"] == "ok" else None
        if s is None or s.get("cost") is None:
            continue
        trained = usd / s["cost"]["usd_per_million_tokens"] * 1e6
        rows.append({"hardware": e["hardware"]["name"], "gpus": s["gpus"], "tokens": r6(trained),
                     "fraction_of_budget": r6(trained / tokens),
                     "days": r6(trained / s["tokens_per_s_cluster"] / 86400)})
    return {"usd": usd, "systems": rows} if len(rows) > 1 else None


def same_time(entries: list[dict], tokens: float) -> dict | None:
    """The GPUs each system needs to train the token budget in the baseline's time, at the per-GPU
    throughput of its best plan at its own GPU count: a linear extrapolation (per-GPU throughput
    falls with scale as communication grows; search at that count to check it). Rounded up to
    whole GPUs; the cost of the run is unchanged under that extrapolation."""
    base = entries[0]
    if base["status"] != "ok":
        return None
    seconds = tokens / base["summary"]["tokens_per_s_cluster"]
    rows = []
    for e in entries:
        if e["status"] != "ok":
            continue
        s = e["summary"]
        need = math.ceil(tokens / (s["tokens_per_s_per_gpu"] * seconds) - 1e-9)
        rows.append({"hardware": e["hardware"]["name"], "gpus_now": s["gpus"], "gpus": need,
                     "nvlink_domains": math.ceil(need / e["hardware"]["domain_size"]),
                     "ratio_to_now": r6(need / s["gpus"])})
    return {"days": r6(seconds / 86400), "systems": rows} if len(rows) > 1 else None


# ---------------------------------------------------------------------------------------------
# The comparison.
# ---------------------------------------------------------------------------------------------
def search_all(model, searches: list[tuple], options, assumptions, tokens: float, workers: int | None,
               progress=None) -> list[dict]:
    """:func:`search_one` of every (hardware, job, tag) in ``searches``, in that order: with more
    than one worker (None: one per search, at most one per CPU), side by side in forked processes
    (planner.parallel; the searches share nothing, so the entries are the same either way), each
    search's progress then reduced to its start and end."""
    say = progress or (lambda msg: None)
    workers = auto_jobs(len(searches)) if workers is None else workers
    if min(workers, len(searches)) <= 1:
        def one(i: int) -> dict:
            hw, job, tag = searches[i]
            say(f"searching {tag}")
            return search_one(model, hw, job, options, assumptions, tokens,
                              progress=lambda msg: say(f"{tag}: {msg}"))
        return fork_map(one, len(searches), 1)
    say(f"searching {len(searches)} systems, {min(workers, len(searches))} at a time")
    return fork_map(lambda i: search_one(model, searches[i][0], searches[i][1], options, assumptions, tokens),
                    len(searches), workers, lambda i, e: say(f"searched {searches[i][2]}"))


def run_compare(model, hws: list, jobs: list, options, assumptions, *, tokens: float | None = None,
                prices: dict | None = None, progress=None, workers: int | None = None) -> dict:
    """Search every hardware for its job (the same job; GPU counts may differ per system) and
    swap-test the best plans against the first hardware (the baseline) where the counts agree."""
    budget = token_budget(model, tokens)
    prices = prices or {}
    say = progress or (lambda msg: None)
    searches = [(hw, job, f"{hw.name} ({i + 1}/{len(hws)})") for i, (hw, job) in enumerate(zip(hws, jobs))]
    entries = []
    for e, (hw, job, _) in zip(search_all(model, searches, options, assumptions, budget["tokens"], workers, say),
                               searches):
        e["gpus"] = job.gpus
        if e["status"] == "ok":
            e["summary"]["cost"] = cost_json(e["summary"], prices.get(hw.name))
        entries.append(e)
    ctx = context_json(model, hws[0], jobs[0], assumptions)
    ctx.pop("hardware")
    out = {**ctx, "target": options.target, "top": options.top, "token_budget": budget,
           "hardware": entries, "changes": [],
           "views": {"same_budget": same_budget(entries, budget["tokens"]),
                     "same_time": same_time(entries, budget["tokens"])}}
    base = entries[0]
    for other, job in zip(entries[1:], jobs[1:]):
        say(f"swap test: {base['hardware']['name']} and {other['hardware']['name']}")
        if job.gpus != jobs[0].gpus:
            # A plan's data-parallel degree is tied to its GPU count: it has no place on the other
            # system's count, so the two best plans are compared by their numbers alone.
            out["changes"].append({"baseline": base["hardware"]["name"], "hardware": other["hardware"]["name"],
                                   "swap": {}})
            continue
        out["changes"].append(swap_tests(base, other, model, {h.name: h for h in hws}, job, assumptions,
                                         options.target, budget["tokens"], options.torchtitan_config))
    return out


def swap_tests(base: dict, other: dict, model, hw_by_name: dict, job, assumptions, target: Target,
               tokens: float, torchtitan_config: str | None = None) -> dict:
    """Each system's best plan evaluated on the other one (when both have a plan and they differ)."""
    b, o = base["hardware"]["name"], other["hardware"]["name"]
    swaps: dict = {}
    if base["status"] == "ok" and other["status"] == "ok" and base["summary"]["plan_string"] != other["summary"]["plan_string"]:
        swaps["other_plan_on_baseline"] = evaluate_elsewhere(other["summary"]["plan_string"], model, hw_by_name[b],
                                                             job, assumptions, target, tokens, torchtitan_config)
        swaps["baseline_plan_on_other"] = evaluate_elsewhere(base["summary"]["plan_string"], model, hw_by_name[o],
                                                             job, assumptions, target, tokens, torchtitan_config)
    return {"baseline": b, "hardware": o, "swap": swaps}


# The sweep over GPU counts.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepJob:
    gpus: int
    global_batch: int
    rule: str


def sweep_jobs(base_job, gpus_list: list[int], user_batch: int | None) -> list[SweepJob]:
    """One job per GPU count: the user's global batch if given, else SWEEP_BATCH_RULE."""
    out = []
    for n in gpus_list:
        if user_batch is not None:
            out.append(SweepJob(n, user_batch, f"--global-batch {user_batch:,} sequences at every scale"))
        else:
            out.append(SweepJob(n, sweep_global_batch(base_job.global_batch, base_job.seq_len, n), SWEEP_BATCH_RULE))
    return out


def run_sweep(model, hws: list, base_job, gpus_list: list[int], options, assumptions, *,
              user_batch: int | None = None, tokens: float | None = None, progress=None,
              workers: int | None = None) -> dict:
    say = progress or (lambda msg: None)
    budget = token_budget(model, tokens)
    jobs = sweep_jobs(base_job, gpus_list, user_batch)
    rows = []
    total = len(jobs) * len(hws)
    searches: list[tuple] = []
    scales: list[SweepJob] = []
    for sj in jobs:
        job = base_job.model_copy(update={"gpus": sj.gpus, "global_batch": sj.global_batch, "source": None})
        for hw in hws:
            searches.append((hw, job, f"{hw.name} at {sj.gpus} GPUs ({len(searches) + 1}/{total})"))
            scales.append(sj)
    for e, (hw, _, _), sj in zip(search_all(model, searches, options, assumptions, budget["tokens"], workers, say),
                                 searches, scales):
        row = {"hardware": hw.name, "gpus": sj.gpus, "global_batch": sj.global_batch, "status": e["status"]}
        if e["status"] == "ok":
            row["summary"] = e["summary"]
            row["top_k"] = e["top_k"]
        else:
            row["reason"] = e["reason"]
        rows.append(row)
    ctx = context_json(model, hws[0], base_job, assumptions)
    ctx.pop("hardware")
    ctx["job"].pop("gpus")
    ctx["job"].pop("global_batch")
    ctx["job"].pop("source", None)
    out = {**ctx, "target": options.target, "top": options.top, "token_budget": budget,
           "gpus": list(gpus_list), "global_batch_rule": jobs[0].rule if jobs else SWEEP_BATCH_RULE,
           "hardware": [hardware_json(h) for h in hws], "rows": rows}
    return out
