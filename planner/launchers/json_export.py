"""JSON export: the plan (DESIGN.md §6 keys, derived dp/edp filled in), its predictions, and which
launcher rules it breaks (so a script can tell whether 'export --format megatron' would work)."""

from __future__ import annotations

from planner import __version__
from planner.errors import Violation
from planner.launchers.common import plan_json, to_json_text
from planner.specs.catalog import spec_hash


def export_json(setup, *, verdicts: dict[str, list[Violation]], predictions: dict | None = None) -> str:
    """``verdicts``: per launcher, the rules it would refuse the plan by
    (planner.launchers.registry.verdicts: every searchable launcher, in registry order)."""
    launchers = {name: {"exportable": not found, "violations": [{"rule": v.rule, "message": v.message} for v in found]}
                 for name, found in verdicts.items()}
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
