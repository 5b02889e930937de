"""How check reads a Megatron-Bridge launch back (the registry's ``ReadBack`` record's hooks)."""

from __future__ import annotations

import re
from planner.errors import Violation
from planner.launchers.bridge.read import BridgeJob
from planner.launchers.bridge.recipes import BRIDGE_RELEASE

# A Bridge launch runs scripts/training/run_recipe.py (or run_script.py), or is a list of its
# KEY=VALUE overrides, or a ConfigContainer YAML: its sections are ConfigContainer's fields
# (Megatron-Bridge src/megatron/bridge/training/config.py, ConfigContainer).
_SECTIONS = ("model|train|optimizer|ddp|dataset|scheduler|checkpoint|logger|tokenizer|mixed_precision|comm_overlap|"
             "rng|dist|profiling|ft|straggler|nvrx_straggler|rerun_state_machine|inprocess_restart")
_RUNNER = re.compile(r"\brun_(?:recipe|script)\.py\b")
_OVERRIDE = re.compile(rf"(?m)^\s*[+~]?(?:{_SECTIONS})\.[A-Za-z_][\w.]*=")
_YAML = re.compile(rf"(?m)^(?:{_SECTIONS}):[ \t]*(?:#.*)?$")


def sniff(text: str, name: str) -> bool:
    """Whether ``text`` is a run_recipe.py launch, an override list or a ConfigContainer YAML."""
    return bool(_RUNNER.search(text) or _OVERRIDE.search(text) or _YAML.search(text))


def release(bj: BridgeJob) -> tuple[str, str]:
    return BRIDGE_RELEASE, "a Megatron-Bridge launch: planner reads it as Megatron-Bridge 0.6 (give --software otherwise)"


def check(bj: BridgeJob, found: list[Violation], ctx) -> tuple[dict, list[Violation]]:
    """check's fields of a read Bridge launch; run_recipe.py refuses a launch that names no recipe."""
    a = bj.args
    fields = {
        "source": str(bj.source), "model_source": bj.model_source, "launcher": "megatron-bridge",
        "recipe": a.recipe, "unknown_flags": a.unknown, "ignored_flags": a.ignored,
        "unresolved_variables": a.unresolved, "not_run": a.not_run, "notes": bj.notes,
        "recipe_defaults_used": bj.defaults_used}
    if a.recipe is None and a.kind != "yaml":
        found = found + [Violation("bridge-recipe", "the launch names no recipe (--recipe or --model): run_recipe.py "
                                   "refuses it.", "Add --recipe RECIPE_FUNCTION.")]
    return fields, found
