"""One plan's full evaluation as the JSON objects of DESIGN.md section 6 (`plan`, `memory`,
`time`), shared by explain, search, compare and export."""

from __future__ import annotations

from planner import __version__


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
    from planner.cost.compose import batch_of_setup, evaluate_batch
    from planner.cost.memory import memory_report
    from planner.cost.time import time_report

    if costs is None and (memory is None or time):
        costs = evaluate_batch(batch_of_setup(setup))
    mem = memory if memory is not None else memory_report(setup, costs)
    out = {"plan": plan_json(setup), "plan_string": setup.plan.to_string(),
           "micro_batches": setup.micro_batches, "memory": mem.to_json()}
    if time:
        out["time"] = time_report(setup, costs=costs).to_json()
    return out


def context_json(model, hw, job, assumptions=None) -> dict:
    """What was evaluated: planner version, the resolved specs with a hash of each."""
    from planner.specs.catalog import spec_hash

    out = {
        "planner_version": __version__,
        "model": {"name": model.name, "spec_hash": spec_hash(model)},
        "hardware": {"name": hw.name, "spec_hash": spec_hash(hw)},
        "job": job.model_dump(mode="json"),
    }
    if assumptions is not None:
        out["assumptions"] = assumptions.model_dump(mode="json")
    return out
