"""One plan's full evaluation as the JSON objects of DESIGN.md section 6 (`plan`, `memory`,
`time`), shared by explain, search, compare and export."""

from __future__ import annotations

from planner import __version__
from planner.cost.compose import batch_of_setup, costs_of, evaluate_batch
from planner.cost.memory import memory_report
from planner.cost.setup import resolve_setup
from planner.cost.time import time_report
from planner.specs.catalog import spec_hash


def plan_json(setup) -> dict:
    """The plan's keys (DESIGN.md section 6), with the derived dp and, for MoE models, edp."""
    out = setup.plan.to_json()
    out.update(dp=setup.deg.dp, vpp=setup.deg.vpp)
    if setup.model.is_moe:
        out["edp"] = setup.deg.edp
    return {k: out[k] for k in sorted(out)}


def plan_evaluation(setup, *, costs=None, memory=None, time=True) -> dict:
    """The plan's JSON result: its keys, memory report and (with ``time``) time report, from one
    composition of its costs (``costs`` and ``memory`` when the caller already has them)."""
    if costs is None and (memory is None or time):
        costs = evaluate_batch(batch_of_setup(setup))
    mem = memory if memory is not None else memory_report(setup, costs)
    out = {"plan": plan_json(setup), "plan_string": setup.plan.to_string(),
           "micro_batches": setup.micro_batches, "memory": mem.to_json()}
    if time:
        out["time"] = time_report(setup, costs=costs).to_json()
    return out


LEVER_DEFAULTS = (("moments", "fp32"), ("grad_reduce", "fp32"), ("param_gather", "bf16"), ("cuda_graphs", "none"))
"""The levers explain accounts for one by one, each with Megatron's default (fp32 Adam moments,
fp32 gradient reduction, bf16 parameter gathers: megatron/training/arguments.py; no CUDA graphs:
--cuda-graph-impl none)."""


def lever_effects(setup) -> list[dict]:
    """Per lever of :data:`LEVER_DEFAULTS`: the plan's value and, where it is not the default, what
    it bought against the same plan with that lever at its default: the step seconds and the
    worst rank's allocated peak bytes it saves (negative: it costs). Both plans are composed the
    same way (planner.cost.compose.costs_of), so the differences are the lever's alone."""
    def step_and_peak(s) -> tuple[float, float]:
        c = costs_of(s)
        return float(c.step_s()[0]), max(float(c.peak_bytes(r)[0]) for r in range(s.plan.pp))

    out = []
    base = None
    for key, default in LEVER_DEFAULTS:
        value = getattr(setup.plan, key)
        row: dict = {"lever": key, "value": str(value), "default": default}
        if value != default:
            base = base or step_and_peak(setup)
            alt = step_and_peak(resolve_setup(setup.model, setup.hw, setup.job, setup.plan.replace(**{key: default}),
                                              setup.assumptions))
            row.update(step_saved_s=alt[0] - base[0], peak_saved_bytes=alt[1] - base[1])
        out.append(row)
    return out


def context_json(model, hw, job, assumptions=None) -> dict:
    """What was evaluated: planner version, the resolved specs with a hash of each."""
    out = {
        "planner_version": __version__,
        "model": {"name": model.name, "spec_hash": spec_hash(model)},
        "hardware": {"name": hw.name, "spec_hash": spec_hash(hw)},
        "job": job.model_dump(mode="json"),
    }
    if assumptions is not None:
        out["assumptions"] = assumptions.model_dump(mode="json")
    return out
