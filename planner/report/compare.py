"""`planner compare`'s prose and rendering: one job on several systems (Hopper against Blackwell, or
any list). The searches (each hardware's best plan and top K, the swap test, sweeps) are
:mod:`planner.search.compare`; here, sentences generated from their numbers say what changed and
why. The "why" comes from three checks, none of them specific to a
model:

- the swap test: each system's best plan is evaluated on the other system (same job). A plan that
  does not fit there says memory capacity is why the other system needed different degrees or
  levers; one that fits but runs slower names the time cause that grows the most (pipeline bubble,
  exposed all-to-all, ...), and the topology section says whether that group crosses NVLink
  domains there;
- the topology: whether each parallel group's traffic stays inside one NVLink domain;
- the step-time breakdown of both best plans, and how the top-K plans use each dimension.

Throughput per GPU factors exactly into the dense BF16 peak times MFU (the model FLOPs per token
are the same on every system), so the headline says how much of a speed-up is the datasheet and
how much is the plan.

Everything here returns plain dicts (the `--json` output); the rich tables and the Markdown are
rendered from those dicts, so the CLI, the JSON and results/ say the same thing.
"""

from __future__ import annotations

from rich.table import Table

from planner.cost.time import LABELS
from planner.report.tables import console
from planner.search.compare import DEGREES, LEVERS, SWEEP_BATCH_RULE, r6, run_compare, run_sweep  # noqa: F401 (the report's vocabulary)
from planner.units import GiB

CHANGE_DEGREES = ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs")
"""Degrees named in "what changed" (dp and edp follow from them and the GPU count)."""
USAGE_DIMS = ("pp", "tp", "cp", "ep", "recompute", "offload")
"""Dimensions whose spread among the top K the sentences report when two systems differ (the
tables show more)."""
MEMORY_LEVERS = ("recompute", "sharding", "offload", "precision", "moments")
"""Levers that change memory (the dispatcher and its overlap only change time)."""

# Which parallel group carries each communication cause of the time breakdown (the names of the
# time JSON's topology section).
CAUSE_GROUP = {"tp": "tp", "cp": "cp", "ep": "ep", "etp": "etp", "pp_p2p": "pp", "dp_grad": "dpcp",
               "dp_param": "dpcp", "fsdp": "dpcp"}
COMM_LABELS = {"tp": "TP", "cp": "CP", "ep": "EP", "etp": "expert-TP", "pp": "PP", "dpcp": "data-parallel",
               "edp": "expert data-parallel"}


def _infeasible_sentence(e: dict) -> str:
    what = "nothing fits" if e["status"] == "nothing_fits" else "the job is not valid"
    return f"{e['hardware']['name']}: {what}, so there is no plan to compare. {e['reason']}"


# ---------------------------------------------------------------------------------------------
# Sentences generated from the numbers.
# ---------------------------------------------------------------------------------------------
def _label(cause: str) -> str:
    return LABELS.get(cause, cause.replace("_", " "))


def _gib(x: float) -> str:
    return f"{x / GiB:.1f} GiB"


def _deg_name(k: str) -> str:
    return {"mbs": "micro-batch"}.get(k, k.upper())


def degree_changes(sb: dict, so: dict) -> list[str]:
    out = []
    for k in CHANGE_DEGREES:
        vb, vo = sb["degrees"].get(k), so["degrees"].get(k)
        if vb is not None and vo is not None and vb != vo:
            out.append(f"{_deg_name(k)} {vb} → {vo}")
    return out


def lever_changes(sb: dict, so: dict) -> list[str]:
    out = []
    for k in LEVERS:
        vb, vo = sb["levers"].get(k), so["levers"].get(k)
        if vb != vo:
            out.append(f"{k.replace('_', ' ')} {vb} → {vo}")
    return out


def _group_phrase(summary: dict, group: str, domain_size: int) -> str | None:
    """'its EP64 groups span 8 NVLink domains of 8 GPUs' or 'its EP64 groups stay inside one
    72-GPU NVLink domain' (None when the plan has no such group)."""
    g = summary["groups"].get(group)
    if not g:
        return None
    name = f"{COMM_LABELS.get(group, group)}{g['size']}" if group not in ("dpcp", "edp") else \
        f"{COMM_LABELS[group]} ({g['size']} GPUs)"
    if g["links"] == "nvlink":
        return f"its {name} groups stay inside one {domain_size}-GPU NVLink domain"
    return f"its {name} groups span {g['domains']} NVLink domains of {domain_size} GPUs and use the scale-out network"


def _largest_increase(slow: dict, fast: dict) -> tuple[str, float, float] | None:
    """The time cause that grows the most from ``fast`` to ``slow`` breakdowns (seconds)."""
    causes = set(slow) | set(fast)
    best = None
    for c in sorted(causes):
        d = slow.get(c, 0.0) - fast.get(c, 0.0)
        if best is None or d > best[1]:
            best = (c, d)
    if best is None or best[1] <= 0:
        return None
    return best[0], slow.get(best[0], 0.0), fast.get(best[0], 0.0)


def _swap_sentence(swap: dict, owner: str, host: str, host_best: dict, host_domain: int, distinct: list[str]) -> str:
    """What happens to ``owner``'s best plan on ``host``; ``distinct``: what ``host``'s own best
    plan does differently (degrees and levers), for the capacity explanation."""
    st = swap["status"]
    if st == "rule":
        return f"{owner}'s plan cannot run on {host}: {swap['reason']}"
    s = swap["summary"]
    if st == "does_not_fit":
        why = (f", so {host} needs a plan that holds less per GPU: its best plan differs by {', '.join(distinct)}"
               if distinct else "")
        return (f"{owner}'s plan does not fit on {host}: it would peak at {_gib(s['peak_bytes'])} per GPU against "
                f"{_gib(s['capacity_bytes'])} of capacity{why}.")
    tps, best_tps = s["tokens_per_s_per_gpu"], host_best["tokens_per_s_per_gpu"]
    slower = 1 - tps / best_tps
    head = (f"{owner}'s plan fits on {host} ({_gib(s['peak_bytes'])} of {_gib(s['capacity_bytes'])}) and runs at "
            f"{tps:,.0f} tokens/s/GPU there")
    if slower <= 1e-4:
        return head + f", as fast as {host}'s own best plan: the two plans tie on {host}."
    inc = _largest_increase(s["breakdown"], host_best["breakdown"])
    text = head + f", {slower:.0%} below {host}'s best"
    if inc:
        cause, a, b_ = inc
        text += f"; the largest loss is {_label(cause)} ({a:.2f} s per step against {b_:.2f} s)"
        group = CAUSE_GROUP.get(cause)
        phrase = _group_phrase(s, group, host_domain) if group else None
        if phrase:
            text += f": {phrase}"
    return text + "."


def explain_pair(base: dict, other: dict, swaps: dict, job) -> list[str]:
    """Sentences that say what changed from ``base`` to ``other`` and why (from numbers only)."""
    b, o = base["hardware"]["name"], other["hardware"]["name"]
    hb, ho = base["hardware"], other["hardware"]
    sb, so = base["summary"], other["summary"]
    out: list[str] = []
    # 1. Speed, factored into the datasheet peak and the plan's MFU.
    r = so["tokens_per_s_per_gpu"] / sb["tokens_per_s_per_gpu"]
    peak_r = so["peak_tflops"] / sb["peak_tflops"]
    mfu_r = so["mfu"] / sb["mfu"]
    out.append(
        f"{o} runs {r:.2f}x the tokens/s per GPU of {b} ({so['tokens_per_s_per_gpu']:,.0f} against "
        f"{sb['tokens_per_s_per_gpu']:,.0f}): the dense BF16 peak is {peak_r:.2f}x ({so['peak_tflops']:,.0f} against "
        f"{sb['peak_tflops']:,.0f} TFLOP/s) and the MFU {mfu_r:.2f}x ({so['mfu']:.1%} against {sb['mfu']:.1%})."
    )
    nb, no = sb.get("gpus"), so.get("gpus")
    counts_differ = nb is not None and no is not None and nb != no
    if counts_differ:
        out.append(f"The whole cluster: {no:,} {o} GPUs train {so['tokens_per_s_cluster']:,.0f} tokens/s, "
                   f"{so['tokens_per_s_cluster'] / sb['tokens_per_s_cluster']:.2f}x the {sb['tokens_per_s_cluster']:,.0f} "
                   f"of {nb:,} {b} GPUs.")
    # 2. The plan.
    deg = degree_changes(sb, so)
    lev = lever_changes(sb, so)
    if not deg and not lev:
        out.append(f"Both choose the same plan ({so['plan_string']}): the difference is the hardware's alone.")
    else:
        parts = []
        if deg:
            parts.append("degrees " + ", ".join(deg))
        if lev:
            parts.append("levers " + ", ".join(lev))
        out.append(f"The best plan changes from {b} to {o}: {'; '.join(parts)}.")
    # 3. Why: the swap test in both directions.
    if swaps:
        distinct_b = [f"{_deg_name(k)} {sb['degrees'][k]}" for k in CHANGE_DEGREES
                      if sb["degrees"].get(k) != so["degrees"].get(k) and k in sb["degrees"]]
        distinct_b += [f"{k.replace('_', ' ')} {sb['levers'][k]}" for k in MEMORY_LEVERS
                       if sb["levers"].get(k) != so["levers"].get(k) and k in sb["levers"]]
        distinct_o = [f"{_deg_name(k)} {so['degrees'][k]}" for k in CHANGE_DEGREES
                      if sb["degrees"].get(k) != so["degrees"].get(k) and k in so["degrees"]]
        distinct_o += [f"{k.replace('_', ' ')} {so['levers'][k]}" for k in MEMORY_LEVERS
                       if sb["levers"].get(k) != so["levers"].get(k) and k in so["levers"]]
        out.append("Why (swap test): " + _swap_sentence(swaps["other_plan_on_baseline"], o, b, sb, hb["domain_size"],
                                                       distinct_b))
        out.append("Why (swap test): " + _swap_sentence(swaps["baseline_plan_on_other"], b, o, so, ho["domain_size"],
                                                       distinct_o))
    elif counts_differ:
        out.append(f"No swap test: the two run different GPU counts ({nb:,} and {no:,}), and a plan's data-parallel "
                   "degree belongs to its count; give both the same count for the swap test's why.")
    # 4. Where the latency-critical groups run.
    for group in ("ep", "tp", "cp", "etp", "pp"):
        gb, go = sb["groups"].get(group), so["groups"].get(group)
        if not gb and not go:
            continue
        lb = gb["links"] if gb else None
        lo = go["links"] if go else None
        if lb == lo and (gb or {}).get("size") == (go or {}).get("size"):
            continue
        cause = {"pp": "pp_p2p"}.get(group, group)
        eb, eo = sb["breakdown"].get(cause, 0.0), so["breakdown"].get(cause, 0.0)
        pb = _group_phrase(sb, group, hb["domain_size"]) or f"it has no {COMM_LABELS[group]} groups"
        po = _group_phrase(so, group, ho["domain_size"]) or f"it has no {COMM_LABELS[group]} groups"
        # Only where the traffic costs something on either side (half a percent of a step).
        if max(eb / sb["step_time_s"], eo / so["step_time_s"]) < 0.005:
            continue
        if lb != lo or gb is None or go is None:
            out.append(f"{COMM_LABELS[group]} traffic: on {b} {pb}; on {o} {po} ({_label(cause)}: "
                       f"{eb:.2f} s against {eo:.2f} s per step).")
    # 5. The step's composition.
    shares = []
    step_b, step_o = sb["step_time_s"], so["step_time_s"]
    causes = sorted(set(sb["breakdown"]) | set(so["breakdown"]))
    deltas = []
    for c in causes:
        fb, fo = sb["breakdown"].get(c, 0.0) / step_b, so["breakdown"].get(c, 0.0) / step_o
        if max(fb, fo) >= 0.02:
            deltas.append((abs(fo - fb), c, fb, fo))
    for _, c, fb, fo in sorted(deltas, key=lambda x: (-x[0], x[1]))[:4]:
        shares.append(f"{_label(c)} {fb:.0%} → {fo:.0%}")
    out.append(f"Step time {step_b:.2f} s → {step_o:.2f} s; share of the step: {'; '.join(shares)}. "
               f"Bottleneck on {b}: {sb['bottleneck']}; on {o}: {so['bottleneck']}.")
    # 6. Memory.
    cap_r = ho["hbm_usable_bytes"] / hb["hbm_usable_bytes"]
    out.append(
        f"Memory per GPU: {_gib(sb['peak_bytes'])} of {_gib(sb['capacity_bytes'])} ({sb['peak_fraction']:.0%}) on {b}, "
        f"{_gib(so['peak_bytes'])} of {_gib(so['capacity_bytes'])} ({so['peak_fraction']:.0%}) on {o} "
        f"(HBM {cap_r:.2f}x); weights, gradients and optimizer states take {_gib(sb['constant_bytes'])} and "
        f"{_gib(so['constant_bytes'])} at the worst stage."
    )
    # 7. How the top K use each dimension, where the two systems differ.
    kb, ko = base["top_k"], other["top_k"]
    for dim in USAGE_DIMS:
        ub, uo = kb["dims"].get(dim), ko["dims"].get(dim)
        if ub is None or uo is None or ub == uo:
            continue
        out.append(f"{_deg_name(dim) if dim in DEGREES else dim.capitalize()} among the top {kb['plans']} "
                   f"on {b}: {usage_text(ub)}; top {ko['plans']} on {o}: {usage_text(uo)}.")
    # 8. Time to train.
    out.append(days_sentence(base, other, job))
    return out


def usage_text(counts: dict) -> str:
    def key(kv):
        k = kv[0]
        return (0, int(k), "") if k.isdigit() else (1, 0, k)

    return ", ".join(f"{k} ({n})" for k, n in sorted(counts.items(), key=key))


def days_sentence(base: dict, other: dict, job=None) -> str:
    sb, so = base["summary"], other["summary"]
    b, o = base["hardware"]["name"], other["hardware"]["name"]
    nb, no = sb.get("gpus", getattr(job, "gpus", None)), so.get("gpus", getattr(job, "gpus", None))
    idle = ""
    if sb["idle_gpus"] or so["idle_gpus"]:
        idle = (f" (with the GPUs left idle in partly used NVLink domains: {sb['gpu_hours_with_idle'] / 1e6:.2f}M and "
                f"{so['gpu_hours_with_idle'] / 1e6:.2f}M)")
    where_o = f"on {no:,} {o} GPUs" if nb != no else f"on {o}"
    text = (f"The token budget takes {sb['days']:.1f} days on {nb:,} {b} GPUs and {so['days']:.1f} days {where_o}: "
            f"{sb['gpu_hours'] / 1e6:.2f}M against {so['gpu_hours'] / 1e6:.2f}M GPU-hours{idle}")
    cb, co = sb.get("cost"), so.get("cost")
    if cb and co:
        text += (f"; at {_usd(cb['usd_per_gpu_hour'])} and {_usd(co['usd_per_gpu_hour'])} per GPU-hour"
                 f"{' (list-price estimates)' if cb['estimate'] or co['estimate'] else ''} the run costs "
                 f"{_usd(cb['usd_per_run'])} against {_usd(co['usd_per_run'])} ({_usd(cb['usd_per_million_tokens'])} "
                 f"against {_usd(co['usd_per_million_tokens'])} per million tokens)")
    return text + "."


def _usd(x: float) -> str:
    """Dollars at a readable precision: $1.23M, $45.6K, $7.89, $0.0123."""
    if x >= 1e9:
        return f"${x / 1e9:.2f}B"
    if x >= 1e6:
        return f"${x / 1e6:.2f}M"
    if x >= 1e4:
        return f"${x / 1e3:.1f}K"
    if x >= 1:
        return f"${x:,.2f}"
    return f"${x:.3g}"


def _tokens(x: float) -> str:
    return f"{x / 1e12:.2f}T" if x >= 1e11 else f"{x / 1e9:.1f}B"


def view_sentences(out: dict) -> list[str]:
    """The "same budget" and "same time" views against the baseline, and why one is missing."""
    views = out.get("views") or {}
    res = []
    sb = views.get("same_budget")
    tokens = out["token_budget"]["tokens"]
    if sb:
        parts = [f"{r['hardware']} ({r['gpus']:,} GPUs) {_tokens(r['tokens'])} tokens in {r['days']:.1f} days "
                 f"({r['fraction_of_budget']:.2f}x)" for r in sb["systems"]]
        res.append(f"Same budget ({_usd(sb['usd'])}, what the baseline spends on {_tokens(tokens)} tokens): "
                   + "; ".join(parts) + ".")
    else:
        missing = [e["hardware"]["name"] for e in out["hardware"]
                   if e["status"] == "ok" and e["summary"].get("cost") is None]
        if missing:
            res.append(f"No price for {', '.join(missing)}: give --price NAME=USD (per GPU-hour) for cost per token, "
                       "cost per run and the same-budget view.")
    st = views.get("same_time")
    if st:
        parts = [f"{r['hardware']} {r['gpus']:,} GPUs ({r['ratio_to_now']:.2f}x its {r['gpus_now']:,}; "
                 f"{r.get('nvlink_domains', 0):,} NVLink domains)"
                 for r in st["systems"]]
        res.append(f"Same time ({st['days']:.1f} days, the baseline's): " + "; ".join(parts)
                   + ", each at its best plan's tokens/s per GPU (a linear extrapolation: search at that count to check it).")
    return res


def overall_sentences(entries: list[dict], job) -> list[str]:
    """The ranking over every hardware, and the ones with no plan."""
    ok = [e for e in entries if e["status"] == "ok"]
    out = []
    if ok:
        ranked = sorted(ok, key=lambda e: (-e["summary"]["tokens_per_s_per_gpu"], e["hardware"]["name"]))
        first = ranked[0]
        parts = [f"{e['hardware']['name']} {e['summary']['tokens_per_s_per_gpu']:,.0f}" for e in ranked]
        counts = {e["summary"].get("gpus", job.gpus) for e in ok}
        where = f"on {job.gpus:,} GPUs" if counts == {job.gpus} else "each at its own GPU count"
        out.append(f"Tokens/s per GPU {where}, fastest first: {', '.join(parts)}; "
                   f"{first['hardware']['name']} is fastest with {first['summary']['plan_string']}.")
        if len(counts) > 1:
            ranked = sorted(ok, key=lambda e: (-e["summary"]["tokens_per_s_cluster"], e["hardware"]["name"]))
            parts = [f"{e['hardware']['name']} x {e['summary']['gpus']:,} {e['summary']['tokens_per_s_cluster']:,.0f}"
                     for e in ranked]
            out.append(f"Tokens/s of the whole cluster, fastest first: {', '.join(parts)}.")
    for e in entries:
        if e["status"] != "ok":
            out.append(_infeasible_sentence(e))
    return out


# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# The reports: the searches (planner.search.compare) with their sentences.
# ---------------------------------------------------------------------------------------------
def compare_report(model, hws: list, job, options, assumptions, *, tokens: float | None = None,
                   prices: dict | None = None, progress=None, workers: int | None = None) -> dict:
    """Search every hardware, swap-test the best plans against the baseline, and say why they
    differ. ``job``: one job for every system, or a list with one job per system (GPU counts may
    differ); ``prices``: {hardware name: planner.specs.prices.Price} for the cost columns; ``workers``:
    searches side by side (planner.search.compare.search_all)."""
    jobs = list(job) if isinstance(job, (list, tuple)) else [job] * len(hws)
    out = run_compare(model, hws, jobs, options, assumptions, tokens=tokens, prices=prices, progress=progress,
                      workers=workers)
    entries = {e["hardware"]["name"]: e for e in out["hardware"]}
    for change in out["changes"]:
        base, other = entries[change["baseline"]], entries[change["hardware"]]
        if base["status"] != "ok" or other["status"] != "ok":
            change["sentences"] = [_infeasible_sentence(e) for e in (base, other) if e["status"] != "ok"]
        else:
            change["sentences"] = explain_pair(base, other, change["swap"], jobs[0])
    out["summary"] = overall_sentences(out["hardware"], jobs[0]) + view_sentences(out)
    return out


def sweep_report(model, hws: list, base_job, gpus_list: list[int], options, assumptions, *,
                 user_batch: int | None = None, tokens: float | None = None, progress=None,
                 workers: int | None = None) -> dict:
    """The best plan per hardware at each GPU count, and what changes with scale."""
    out = run_sweep(model, hws, base_job, gpus_list, options, assumptions, user_batch=user_batch, tokens=tokens,
                    progress=progress, workers=workers)
    out["sentences"] = sweep_sentences(out)
    return out


def sweep_sentences(out: dict) -> list[str]:
    sentences = []
    for hw in out["hardware"]:
        rows = [r for r in out["rows"] if r["hardware"] == hw["name"]]
        ok = [r for r in rows if r["status"] == "ok"]
        none = [str(r["gpus"]) for r in rows if r["status"] != "ok"]
        if not ok:
            sentences.append(f"{hw['name']}: no feasible plan at any scale ({', '.join(none)} GPUs).")
            continue
        first, last = ok[0], ok[-1]
        a, z = first["summary"], last["summary"]
        text = f"{hw['name']}: {a['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU at {first['gpus']:,} GPUs"
        if last is not first:
            ch = z["tokens_per_s_per_gpu"] / a["tokens_per_s_per_gpu"] - 1
            text += f", {z['tokens_per_s_per_gpu']:,.0f} at {last['gpus']:,} ({ch:+.0%})"
            path = []
            for k in ("pp", "tp", "cp", "ep"):
                seq = [r["summary"]["degrees"].get(k) for r in ok]
                if any(v is not None for v in seq) and len(set(seq)) > 1:
                    path.append(f"{_deg_name(k)} " + " → ".join(str(v) for v in seq))
            if path:
                text += "; chosen degrees over the scales: " + ", ".join(path)
            else:
                text += "; the chosen degrees do not change"
            # What grows: the cause whose share of the step rises the most from the first scale to the last.
            fa = {c: v / a["step_time_s"] for c, v in a["breakdown"].items()}
            fz = {c: v / z["step_time_s"] for c, v in z["breakdown"].items()}
            grow = max(sorted(set(fa) | set(fz)), key=lambda c: fz.get(c, 0.0) - fa.get(c, 0.0))
            if fz.get(grow, 0.0) - fa.get(grow, 0.0) >= 0.01:
                text += (f"; the largest growth is {_label(grow)}, {fa.get(grow, 0.0):.0%} → {fz.get(grow, 0.0):.0%} of the "
                         f"step (micro-batches per pipeline {a['micro_batches']} → {z['micro_batches']})")
        if none:
            text += f"; nothing fits at {', '.join(none)} GPUs"
        sentences.append(text + ".")
    # At each scale, who leads and by how much over the first hardware.
    base = out["hardware"][0]["name"] if out["hardware"] else None
    for n in out["gpus"]:
        ok = [r for r in out["rows"] if r["gpus"] == n and r["status"] == "ok"]
        if len(ok) < 2:
            continue
        lead = max(ok, key=lambda r: (r["summary"]["tokens_per_s_per_gpu"], r["hardware"]))
        b = next((r for r in ok if r["hardware"] == base), None)
        if b is not None and lead is not b:
            sentences.append(f"At {n:,} GPUs {lead['hardware']} leads with {lead['summary']['tokens_per_s_per_gpu']:,.0f} "
                             f"tokens/s/GPU, {lead['summary']['tokens_per_s_per_gpu'] / b['summary']['tokens_per_s_per_gpu']:.2f}x "
                             f"{base}.")
    return sentences


def strip_private(obj):
    """Drop keys starting with '_' (wall-clock timings) so the JSON is byte-stable."""
    if isinstance(obj, dict):
        return {k: strip_private(v) for k, v in obj.items() if not k.startswith("_")}
    if isinstance(obj, list):
        return [strip_private(v) for v in obj]
    return obj


def timings_of(out: dict) -> dict:
    return {e["hardware"]["name"]: e.get("_timings") for e in out.get("hardware", []) if isinstance(e, dict)}


# ---------------------------------------------------------------------------------------------
# Rendering: rows shared by the rich table and the Markdown table.
# ---------------------------------------------------------------------------------------------
def degrees_text(s: dict) -> str:
    d = s["degrees"]
    parts = [f"{_deg_name(k)}{d[k]}" for k in ("tp", "cp", "pp", "vpp", "ep", "etp") if k in d]
    text = " ".join(parts) + f" · DP{d['dp']}" + (f" EDP{d['edp']}" if "edp" in d else "")
    return text + f" · mbs {d['mbs']} × {s['micro_batches']}"


def levers_text(s: dict) -> str:
    lv = s["levers"]
    parts = [f"recompute {lv.get('recompute', 'none')}", lv.get("sharding", ""), f"offload {lv.get('offload', 'none')}",
             lv.get("precision", "")]
    if lv.get("moments", "fp32") != "fp32":
        parts.append(f"{lv['moments']} moments")
    if "dispatcher" in lv:
        parts.append(f"{lv['dispatcher']}" + (" (overlap)" if lv.get("ep_overlap") == "on" else ""))
    return " · ".join(p for p in parts if p)


def table_rows(out: dict, dims: tuple[str, ...] = ("pp", "tp", "ep", "cp", "recompute", "offload")) -> tuple[list[str], list[list[str]]]:
    """(header, rows) with one column per hardware."""
    entries = out["hardware"]
    header = ["", *[e["hardware"]["name"] for e in entries]]
    K = out["top"]

    def cell(e, fn):
        if e["status"] != "ok":
            return "nothing fits" if e["status"] == "nothing_fits" else "invalid job"
        return fn(e)

    def gpus(e):
        return f"{e.get('gpus', out['job']['gpus']):,}"

    def cost(key: str, fmt):
        def f(e):
            c = e["summary"].get("cost")
            return "no price" if c is None else fmt(c[key]) + (" (est.)" if key == "usd_per_gpu_hour" and c["estimate"] else "")
        return f

    rows = [
        ["GPUs", *[gpus(e) for e in entries]],
        ["tokens/s (cluster)", *[cell(e, lambda e: f"{_cluster(e, out):,.0f}")
                                 for e in entries]],
        ["tokens/s per GPU", *[cell(e, lambda e: f"{e['summary']['tokens_per_s_per_gpu']:,.0f}") for e in entries]],
        ["MFU (dense BF16)", *[cell(e, lambda e: f"{e['summary']['mfu']:.1%}") for e in entries]],
        ["step time", *[cell(e, lambda e: f"{e['summary']['step_time_s']:.2f} s") for e in entries]],
        ["days to train", *[cell(e, lambda e: f"{e['summary']['days']:.1f}") for e in entries]],
        ["GPU-hours (M)", *[cell(e, lambda e: f"{e['summary']['gpu_hours'] / 1e6:.2f}"
                                 + (f" ({e['summary']['gpu_hours_with_idle'] / 1e6:.2f} with idle)"
                                    if e["summary"]["idle_gpus"] else "")) for e in entries]],
    ]
    if any(e["status"] == "ok" and e["summary"].get("cost") for e in entries):
        rows += [
            ["USD per GPU-hour", *[cell(e, cost("usd_per_gpu_hour", lambda v: f"{v:,.2f}")) for e in entries]],
            ["USD per 1M tokens", *[cell(e, cost("usd_per_million_tokens", _usd)) for e in entries]],
            ["USD per training run", *[cell(e, cost("usd_per_run", _usd)) for e in entries]],
        ]
    rows += [
        ["GPU", *[e["hardware"]["gpu"] for e in entries]],
        ["NVLink domain · HBM", *[f"{e['hardware']['domain_size']} · {e['hardware']['hbm_usable_bytes'] / GiB:.0f} GiB"
                                  for e in entries]],
        ["best plan: degrees", *[cell(e, lambda e: degrees_text(e["summary"])) for e in entries]],
        ["best plan: levers", *[cell(e, lambda e: levers_text(e["summary"])) for e in entries]],
        ["peak / capacity (GiB)", *[cell(e, lambda e: f"{e['summary']['peak_bytes'] / GiB:.1f} / "
                                           f"{e['summary']['capacity_bytes'] / GiB:.1f}") for e in entries]],
        ["bottleneck", *[cell(e, lambda e: e["summary"]["bottleneck"]) for e in entries]],
    ]
    for dim in dims:
        if not any(e["status"] == "ok" and dim in e["top_k"]["dims"] for e in entries):
            continue
        name = _deg_name(dim) if dim in DEGREES else dim
        rows.append([f"{name} in top {K}", *[cell(e, lambda e, dim=dim: usage_text(e["top_k"]["dims"].get(dim, {})))
                                             for e in entries]])
    return header, rows


def _cluster(e: dict, out: dict) -> float:
    """Tokens/s of the whole job (older JSON has only the per-GPU figure and one GPU count)."""
    s = e["summary"]
    return s.get("tokens_per_s_cluster", s["tokens_per_s_per_gpu"] * e.get("gpus", out["job"]["gpus"]))


def header_line(out: dict) -> str:
    j = out["job"]
    tb = out["token_budget"]
    counts = {e.get("gpus", j["gpus"]) for e in out["hardware"]}
    gpus = (f"{j['gpus']:,} GPUs" if counts == {j["gpus"]} else
            ", ".join(f"{e['hardware']['name']} x {e.get('gpus', j['gpus']):,}" for e in out["hardware"]) + " GPUs")
    return (f"{out['model']['name']} · {gpus} · global batch {j['global_batch']:,} × seq {j['seq_len']:,} · "
            f"precisions {', '.join(j['precisions'])} · target {out['target']} · token budget {tb['tokens'] / 1e12:g}T "
            f"({tb['source']})")


def print_compare(out: dict, plot=None) -> None:
    c = console()
    c.print(f"[bold]{header_line(out)}[/bold]")
    if out["job"].get("source"):
        c.print(f"job: {out['job']['source']}")
    header, rows = table_rows(out)
    t = Table(title="Best plan per hardware (same job; USD: per GPU-hour of every GPU held; peak = worst stage's estimated reserved memory; GiB = 2^30 B)")
    for i, h in enumerate(header):
        t.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
    for r in rows:
        t.add_row(*r)
    c.print(t)
    for s in out["summary"]:
        c.print(s)
    c.print("\n[bold]best plans in full[/bold] (for planner explain/export --plan)")
    for e in out["hardware"]:
        # soft_wrap: a plan string must stay on one line to be copied.
        c.print(f"  {e['hardware']['name']}: " + (e["summary"]["plan_string"] if e["status"] == "ok" else e["status"].replace("_", " ")),
                soft_wrap=True)
    for ch in out["changes"]:
        c.print(f"\n[bold]{ch['baseline']} → {ch['hardware']}[/bold]")
        for s in ch["sentences"]:
            c.print(f"  • {s}")
    if plot:
        c.print(f"\nplot written to {plot}")


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731 - plan layouts contain '|'
    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def markdown_compare(out: dict, *, title: str, plot_name: str | None = None, command: str | None = None) -> str:
    lines = [f"# {title}", "", header_line(out) + ".", ""]
    if out["job"].get("source"):
        lines += [f"Job: {out['job']['source']}.", ""]
    if command:
        lines += ["Reproduce:", "", "```", command, "```", ""]
    header, rows = table_rows(out)
    lines += [markdown_table(header, rows), ""]
    if plot_name:
        lines += [f"![{title}]({plot_name})", ""]
    lines += ["## Summary", ""] + [f"- {s}" for s in out["summary"]] + [""]
    for ch in out["changes"]:
        lines += [f"## {ch['baseline']} → {ch['hardware']}", ""] + [f"- {s}" for s in ch["sentences"]] + [""]
    lines += ["## Best plans in full", ""]
    for e in out["hardware"]:
        name = e["hardware"]["name"]
        if e["status"] == "ok":
            lines.append(f"- **{name}**: `{e['summary']['plan_string']}`")
        else:
            lines.append(f"- **{name}**: {e['reason']}")
    lines.append("")
    return "\n".join(lines)


def sweep_table(out: dict) -> tuple[list[str], list[list[str]]]:
    names = [h["name"] for h in out["hardware"]]
    header = ["GPUs", "global batch", *names]
    rows = []
    for n in out["gpus"]:
        cells = []
        gb = None
        for name in names:
            r = next(r for r in out["rows"] if r["gpus"] == n and r["hardware"] == name)
            gb = r["global_batch"]
            if r["status"] != "ok":
                cells.append("nothing fits" if r["status"] == "nothing_fits" else "invalid job")
                continue
            s = r["summary"]
            d = s["degrees"]
            deg = " ".join(f"{_deg_name(k)}{d[k]}" for k in ("tp", "cp", "pp", "ep") if k in d and d[k] > 1) or "DP only"
            cells.append(f"{s['tokens_per_s_per_gpu']:,.0f} ({deg}, MFU {s['mfu']:.0%})")
        rows.append([f"{n:,}", f"{gb:,}", *cells])
    return header, rows


def print_sweep(out: dict, plot=None) -> None:
    c = console()
    j = out["job"]
    c.print(f"[bold]{out['model']['name']} · seq {j['seq_len']:,} · precisions {', '.join(j['precisions'])} · "
            f"target {out['target']}[/bold]")
    c.print(f"global batch: {out['global_batch_rule']}")
    header, rows = sweep_table(out)
    t = Table(title="Tokens/s per GPU of the best plan (its TP, CP, PP, EP degrees above 1; MFU)")
    for h in header:
        t.add_column(h, justify="right", overflow="fold")
    for r in rows:
        t.add_row(*r)
    c.print(t)
    for s in out["sentences"]:
        c.print(f"  • {s}")
    for r in out["rows"]:
        if r["status"] != "ok":
            c.print(f"{r['hardware']} at {r['gpus']:,} GPUs: {r['reason']}")
    if plot:
        c.print(f"\nplot written to {plot}")


def markdown_sweep(out: dict, *, title: str, plot_name: str | None = None, command: str | None = None) -> str:
    j = out["job"]
    lines = [f"# {title}", "",
             f"{out['model']['name']} · seq {j['seq_len']:,} · precisions {', '.join(j['precisions'])} · target {out['target']}.",
             "", f"Global batch: {out['global_batch_rule']}.", ""]
    if command:
        lines += ["Reproduce:", "", "```", command, "```", ""]
    header, rows = sweep_table(out)
    lines += [markdown_table(header, rows), ""]
    if plot_name:
        lines += [f"![{title}]({plot_name})", ""]
    lines += [f"- {s}" for s in out["sentences"]] + [""]
    for r in out["rows"]:
        if r["status"] != "ok":
            lines.append(f"- {r['hardware']} at {r['gpus']:,} GPUs: {r['reason']}")
    lines.append("")
    return "\n".join(lines)
