"""Megatron-Bridge's own rules on a plan, on top of Megatron's (Bridge runs Megatron-Core, so a
Bridge launch passes ``planner.launchers.megatron.rules`` first): the export needs a recipe that
builds the model, and writes the recipe's gradient dtypes."""

from __future__ import annotations

from planner.errors import Violation
from planner.launchers.bridge.recipes import BRIDGE_VERSION, recipe_for
from planner.launchers.common import catalog_edits

PLAN_RULES: dict[str, str] = {
    "bridge-recipe": "Megatron-Bridge has a recipe for the model (or --bridge-recipe names one)",
    "bridge-wgrad-graph-bias": "delayed weight gradients with graphed attention need attention without bias (CommOverlapConfig)",
}


def bridge_violations(model, recipe_override: str | None = None, plan=None) -> list[Violation]:
    g = plan.cuda_graphs if plan is not None else None
    if (plan is not None and g is not None and plan.ep_overlap == "wgrad" and g.kind == "scoped"
            and ("attn" in g.modules or g.layers_captured)
            and (model.attention.qkv_bias or model.attention.output_bias)):
        return [Violation(
            "bridge-wgrad-graph-bias",
            f"ep_overlap=wgrad with cuda_graphs={g} on {model.name}: Megatron-Bridge 0.6 refuses delayed weight "
            "gradients with graphed attention that has a bias (CommOverlapConfig, megatron/bridge/training/"
            "comm_overlap.py: 'CUDA graph with delay_wgrad_compute does not support attention bias for now').",
            hint="Use ep_overlap=on, or export --format megatron.")]
    if plan is not None and (plan.grad_reduce != "fp32" or plan.param_gather != "bf16"):
        return [Violation(
            "bridge-grad-dtypes",
            f"grad_reduce={plan.grad_reduce}, param_gather={plan.param_gather}: a Megatron-Bridge 0.6 launch cannot set "
            "them. MixedPrecisionConfig.setup (megatron/bridge/training/mixed_precision.py, "
            "update_config_with_precision_overrides) copies the preset's grad_reduce_in_fp32 and fp8_param_gather onto "
            "the DDP and model configs, overwriting ddp.* overrides; the recipes name their preset as a string "
            "(mixed_precision=bf16_mixed), whose fields run_recipe.py's Hydra overrides cannot reach; and the Hopper "
            "FP8 preset (bf16_with_fp8_subchannel_scaling_mixed) gathers bf16, every bf16 preset reduces in fp32.",
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
