"""JSON export: the plan (DESIGN.md §6 keys, derived dp/edp filled in), its predictions, and which
launcher rules it breaks (so a script can tell whether 'export --format megatron' would work)."""

from __future__ import annotations


def export_json(setup, *, predictions: dict | None = None, torchtitan_config: str | None = None) -> str:
    from planner import __version__
    from planner.launchers.common import plan_json, to_json_text
    from planner.rules import launcher_violations
    from planner.specs.catalog import spec_hash

    launchers = {}
    for target in ("megatron", "torchtitan"):
        found = launcher_violations(setup, target=target, torchtitan_config=torchtitan_config)
        launchers[target] = {"exportable": not found, "violations": [{"rule": v.rule, "message": v.message} for v in found]}
    obj = {
        "planner_version": __version__,
        "model": {"name": setup.model.name, "spec_hash": spec_hash(setup.model)},
        "hardware": {"name": setup.hw.name, "spec_hash": spec_hash(setup.hw)},
        "job": setup.job.model_dump(mode="json", exclude_none=True),
        "plan": plan_json(setup.plan, setup.deg),
        "micro_batches": setup.micro_batches,
        "launchers": launchers,
    }
    obj.update(predictions or {})
    return to_json_text(obj) + "\n"
