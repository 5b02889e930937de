"""Megatron-Bridge's own rules on a plan, on top of Megatron's (Bridge runs Megatron-Core, so a
Bridge launch passes ``planner.launchers.megatron.rules`` first): the export needs a recipe that
builds the model, and writes the recipe's gradient dtypes."""

from __future__ import annotations

from planner.errors import Violation
from planner.launchers.bridge.recipes import BRIDGE_VERSION, recipe_for
from planner.launchers.common import catalog_edits

PLAN_RULES: dict[str, str] = {
    "bridge-recipe": "Megatron-Bridge has a recipe for the model (or --bridge-recipe names one)",
}


def bridge_violations(model, recipe_override: str | None = None, plan=None) -> list[Violation]:
    if plan is not None and (plan.grad_reduce != "fp32" or plan.param_gather != "bf16"):
        return [Violation(
            "bridge-grad-dtypes",
            f"grad_reduce={plan.grad_reduce}, param_gather={plan.param_gather}: the Megatron-Bridge export writes fp32 "
            "gradient reduction and bf16 parameter gathers only (the recipe's mixed-precision settings decide them).",
            hint="Export --format megatron, which writes --grad-reduce-in-bf16 and --fp8-param-gather, or use the "
            "defaults (grad_reduce=fp32, param_gather=bf16).")]
    edits = catalog_edits(model) if recipe_override is None else []
    if recipe_for(model, recipe_override) is not None and edits:
        return [Violation(
            "bridge-recipe",
            f"the recipe {recipe_for(model)} builds the catalog's {model.name} from its HuggingFace config, and this "
            "model differs from it (" + "; ".join(edits) + "): the launch would train the catalog model.",
            hint="Name a recipe that builds this model with --bridge-recipe, or export --format megatron, whose "
            "flags state the architecture.")]
    if recipe_for(model, recipe_override) is None:
        return [Violation(
            "bridge-recipe",
            f"Megatron-Bridge {BRIDGE_VERSION} has no recipe for {model.name} that planner knows.",
            hint="Name one with --bridge-recipe RECIPE_FUNCTION (e.g. a recipe you wrote, registered where "
            "run_recipe.py finds it), or export --format megatron.")]
    return []
