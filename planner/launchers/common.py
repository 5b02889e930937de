"""What every exporter shares: the plan in its export-canonical form, predictions, and reading
plans from a ``planner search --save`` file.

``plans.json`` (written by ``planner search --save``; the minimal schema read here):

    {"model": "deepseek-v3" | {"name": ...},      # optional: used when --model is not given
     "hardware": "gb200-nvl72" | {"name": ...},   # optional: used when --hw is not given
     "job": {"gpus": 256, "global_batch": 8192, "seq_len": 4096, "precisions": ["bf16"]},  # optional
     "plans": [ {"plan": {"tp": 1, "pp": 4, ...} | "tp=1,pp=4,...",   # required, DESIGN.md §6 keys
                 "memory": {...}, "time": {...}},                       # optional predictions
               ... ]}

Plans are ranked in file order; ``--rank K`` is 1-based. The derived keys ``dp`` and ``edp`` may
be present: ``dp`` is checked, ``edp`` is recomputed and checked too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import PlannerError, PlanRuleError
from planner.specs.plan import Plan


@dataclass(frozen=True)
class SavedPlan:
    plan: Plan
    model: str | None
    hardware: str | None
    job: dict | None
    memory: dict | None
    time: dict | None
    edp: int | None


def _name(entry: Any) -> str | None:
    if entry is None:
        return None
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        return entry["name"]
    return None


def resolve_saved(path: Path, rank: int, *, model=None, hw=None, gpus=None, global_batch=None, seq_len=None,
                  precision=None, domain_fill=None) -> tuple["SavedPlan", tuple]:
    """Plan ``rank`` of a ``planner search --save`` file and what to run it with: the command
    line's model, hardware and job options where given, else the saved file's, as
    (model, hw, gpus, global_batch, seq_len, precision, domain_fill)."""
    saved = read_saved_plan(path, rank)
    sj = saved.job or {}
    if precision is None and sj.get("precisions"):
        precision = ",".join(sj["precisions"])
    pick = lambda given, key: given if given is not None else sj.get(key)  # noqa: E731
    return saved, (model or saved.model, hw or saved.hardware, pick(gpus, "gpus"),
                   pick(global_batch, "global_batch"), pick(seq_len, "seq_len"), precision,
                   pick(domain_fill, "domain_fill"))


def read_saved_plan(path: Path, rank: int) -> SavedPlan:
    """Plan number ``rank`` (1-based) of a ``planner search --save`` file."""
    from planner.specs.catalog import read_json

    data = read_json(Path(path))
    plans = data.get("plans")
    if not isinstance(plans, list) or not plans:
        raise PlannerError(
            f"'{path}' has no 'plans' list.",
            hint="Give a file written by 'planner search --save' (a JSON object whose 'plans' list holds "
            "objects with a 'plan' key).",
        )
    if not 1 <= rank <= len(plans):
        raise PlannerError(f"--rank {rank} is out of range: '{path}' holds {len(plans)} plans (ranks 1..{len(plans)}).")
    entry = plans[rank - 1]
    raw = entry.get("plan") if isinstance(entry, dict) else None
    if isinstance(raw, str):
        plan, edp = Plan.parse(raw), None
    elif isinstance(raw, dict):
        raw = dict(raw)
        edp = raw.pop("edp", None)
        plan = Plan.from_mapping(raw)
    else:
        raise PlannerError(f"Plan {rank} of '{path}' has no 'plan' object or string.")
    job = data.get("job") if isinstance(data.get("job"), dict) else None
    if job is not None:
        job = {k: v for k, v in job.items() if k in ("gpus", "global_batch", "seq_len", "precisions", "domain_fill")}
    return SavedPlan(plan, _name(data.get("model")), _name(data.get("hardware")), job,
                     entry.get("memory"), entry.get("time"), edp)


def export_canonical(plan: Plan, model, hw, job) -> Plan:
    """The canonical plan (Plan.canonical) with two more normalizations that export and read-back
    agree on: the layout written in planner's compact form, or dropped when it equals the even
    split; hsdp:N with N = dp*cp written as fsdp (one sharding group is full sharding)."""
    from planner.specs.layout import even_layout_symbols, format_layout, parse_layout

    canon = plan.canonical(is_moe=model.is_moe, default_dispatcher=hw.default_dispatcher,
                           default_precision=job.default_precision)
    changes: dict[str, Any] = {}
    if canon.layout is not None:
        syms = parse_layout(canon.layout)
        try:
            even = even_layout_symbols(model, canon.pp, canon.vpp)
        except PlanRuleError:
            even = None
        changes["layout"] = None if tuple(syms) == tuple(even or ()) else format_layout(syms)
    sh = canon.sharding
    if sh.kind == "hsdp":
        try:
            deg = canon.degrees(job.gpus)
            if sh.group == deg.dp * deg.cp:
                changes["sharding"] = "fsdp"
        except PlanRuleError:
            pass
    return canon.replace(**changes) if changes else canon


def predictions(setup) -> dict:
    """{'memory': ..., 'time': ...} from the cost model, each left out while its module is not
    installed (they land in parallel with the exporters)."""
    out: dict[str, Any] = {}
    try:
        from planner.cost.memory import memory_report
    except ImportError:
        memory_report = None
    if memory_report is not None:
        out["memory"] = memory_report(setup).to_json()
    try:
        from planner.cost.time import time_report
    except ImportError:
        time_report = None
    if time_report is not None:
        out["time"] = time_report(setup).to_json()
    return out


def prediction_lines(pred: dict) -> list[str]:
    """Human lines for a script header."""
    lines = []
    mem = pred.get("memory") or {}
    if "peak_bytes" in mem:
        cap = mem.get("capacity_bytes")
        stage = mem.get("worst_stage")
        text = f"peak memory {mem['peak_bytes'] / 2**30:.1f} GiB"
        if cap:
            text += f" of {cap / 2**30:.1f} GiB"
        if stage is not None:
            text += f" (worst stage {stage})"
        lines.append(text)
    t = pred.get("time") or {}
    if "step_time_s" in t:
        text = f"step {t['step_time_s']:.2f} s"
        if "tokens_per_s_per_gpu" in t:
            text += f", {t['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU"
        if "model_tflops_per_gpu" in t:
            text += f", {t['model_tflops_per_gpu']:.0f} TFLOP/s/GPU"
        if "mfu" in t:
            text += f", MFU {t['mfu']:.1%}"
        if t.get("bottleneck"):
            text += f", bottleneck {t['bottleneck']}"
        lines.append(text)
    return lines


def gpus_per_node(hw, gpus: int, override: int | None = None) -> int:
    """torchrun --nproc-per-node: GPUs per host. A spec field gpus_per_node wins; otherwise 4 for
    Grace-hosted NVL72 trays (2 superchips x 2 GPUs), else 8 (HGX boards), capped at the job."""
    if override:
        n = override
    else:
        n = getattr(hw, "gpus_per_node", None) or (4 if hw.host.kind == "nvlink-c2c" else min(8, hw.domain_size))
    n = min(n, gpus)
    if gpus % n:
        raise PlannerError(
            f"{gpus} GPUs do not fill whole nodes of {n} GPUs.",
            hint="Pass --nproc-per-node with the GPUs per node you launch on.",
        )
    return n


def plan_json(plan: Plan, deg) -> dict:
    """DESIGN.md §6 plan object: the keys with derived dp and edp filled in."""
    d = plan.to_json()
    d["dp"] = deg.dp
    d["edp"] = deg.edp
    return d


def to_json_text(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True)
