"""A Megatron-Bridge 0.6.2 launch: ``run_recipe.py --recipe R --mode pretrain`` plus one Hydra
``KEY=VALUE`` override of the recipe's ConfigContainer for every setting a plan depends on.

Bridge runs Megatron-Core, so the plan must pass Megatron's rules (``--target megatron``); a plan
is written only for a model with a recipe (``planner.launchers.bridge.recipes``) or with
``--bridge-recipe NAME``. Every override is written, even where the recipe already has that
value, so that the launch does not depend on the recipe's defaults (they change between Bridge
releases and GPU variants). Mapping (field paths of Bridge 0.6.2's ConfigContainer):

- degrees: ``model.{tensor,pipeline,virtual_pipeline,context,expert,expert_tensor}_model_parallel_size``
  (``..._parallel_size`` for CP), ``model.sequence_parallel`` with TP > 1;
- layout: ``model.pipeline_model_parallel_layout`` (Megatron's layout grammar, quoted for Hydra)
  whenever PP > 1 (``run_recipe.py`` rebuilds a recipe-owned layout after a PP/VPP override
  unless the layout itself is overridden), null otherwise; the recipe's own uneven-split knobs
  (``num_layers_in_first/last_pipeline_stage``, ``account_for_*_in_pipeline_split``) switched off;
- recompute: ``model.recompute_granularity/method/num_layers/modules`` as Megatron's flags;
- offload: ``optimizer.optimizer_cpu_offload`` with ``optimizer_offload_fraction=1.0`` (the
  dataclass default is 0.0) and the precision-aware optimizer; activations:
  ``model.fine_grained_activation_offloading`` with ``model.offload_modules``;
- precision: ``mixed_precision=bf16_mixed``, ``bf16_with_nvfp4_mixed`` for nvfp4, or the hardware's FP8 recipe
  (``bf16_with_fp8_subchannel_scaling_mixed`` = blockwise on Hopper, ``bf16_with_mxfp8_mixed`` on
  Blackwell); Adam moments and main gradients/parameters through ``optimizer.*_dtype``;
- CUDA graphs: the plan's ``cuda_graphs`` as ``model.cuda_graph_impl`` (``none``,
  ``transformer_engine`` for scoped graphs with ``model.cuda_graph_scope``, ``full_iteration``);
- dispatcher: ``model.moe_token_dispatcher_type`` (``alltoall`` or ``flex``) and
  ``model.moe_flex_dispatcher_backend``;
- overlap: ``ddp.overlap_grad_reduce``/``overlap_param_gather``; EP all-to-all overlap through
  ``comm_overlap.overlap_moe_expert_parallel_comm`` where the recipe has a CommOverlapConfig
  (its setup copies the value onto the model), else ``model.overlap_moe_expert_parallel_comm``;
- sharding: ``ddp.use_distributed_optimizer``; Megatron FSDP ``ddp.use_megatron_fsdp`` with
  ``ddp.data_parallel_sharding_strategy`` and ``checkpoint.ckpt_format=fsdp_dtensor``;
  ``hsdp:N`` adds ``ddp.num_distributed_optimizer_instances``;
- batch: ``train.micro_batch_size``, ``train.global_batch_size``, ``dataset.seq_length`` and
  ``model.seq_length`` (run_recipe.py syncs the model's from the dataset's).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from planner import __version__
from planner.launchers.bridge.recipes import BRIDGE_VERSION, has_comm_overlap, recipe_for
from planner.launchers.bridge.rules import bridge_violations
from planner.launchers.checks import check_with
from planner.launchers.common import comment_text as _c
from planner.launchers.common import gpus_per_node, prediction_lines, script_opening
from planner.launchers.megatron.rules import megatron_offload_modules, own_violations
from planner.rules import violations_error
from planner.specs.layout import build_layout

FP8_RECIPES = {"blockwise": "bf16_with_fp8_subchannel_scaling_mixed", "mxfp8": "bf16_with_mxfp8_mixed"}
"""planner's FP8 recipe per hardware -> Bridge's mixed_precision recipe name."""
NVFP4_RECIPE = "bf16_with_nvfp4_mixed"
"""Bridge's NVFP4 preset: bf16 with fp4='e2m1', fp4_recipe='nvfp4' (src/megatron/bridge/training/
mixed_precision.py bf16_with_nvfp4_mixed)."""

@dataclass
class BridgeLaunch:
    recipe: str
    overrides: list[str]
    """Hydra ``KEY=VALUE`` strings in order (a later one wins in Hydra)."""
    nproc_per_node: int
    nnodes: int
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        """The arguments of run_recipe.py."""
        return ["--recipe", self.recipe, "--mode", "pretrain", "--dataset", "mock", *self.overrides]


def hydra_value(value) -> str:
    """A Python value as a Hydra override value: true/false/null, numbers, [a,b] lists, and strings
    quoted where Hydra would read them otherwise (a layout holds '|', '*' and parentheses)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", text) and text not in ("true", "false", "null"):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def bridge_settings(setup, recipe: str) -> list[tuple[str, object]]:
    """(ConfigContainer field path, value) for every plan-relevant setting, in script order."""
    model, job, plan = setup.model, setup.job, setup.plan
    out = _parallel_settings(setup) + _recompute_offload_settings(model, plan) + _optimizer_settings(plan)
    precision = plan.precision or job.default_precision
    out += [("mixed_precision", FP8_RECIPES[setup.hw.fp8_recipe] if precision == "fp8"
             else NVFP4_RECIPE if precision == "nvfp4" else "bf16_mixed")]
    out += _graph_settings(model, plan) + _moe_settings(model, plan, recipe) + _sharding_settings(plan, setup.deg)
    out += [
        ("train.micro_batch_size", plan.mbs),
        ("train.global_batch_size", job.global_batch),
        ("dataset.seq_length", job.seq_len),
        ("model.seq_length", job.seq_len),
    ]
    return out


def _parallel_settings(setup) -> list[tuple[str, object]]:
    """The degrees, sequence parallelism and the pipeline layout."""
    model, plan, deg = setup.model, setup.plan, setup.deg
    out: list[tuple[str, object]] = [
        ("model.tensor_model_parallel_size", plan.tp),
        ("model.pipeline_model_parallel_size", plan.pp),
        ("model.virtual_pipeline_model_parallel_size", plan.vpp if plan.pp > 1 and plan.vpp > 1 else None),
        ("model.context_parallel_size", plan.cp),
    ]
    if model.is_moe:
        out += [("model.expert_model_parallel_size", plan.ep), ("model.expert_tensor_parallel_size", deg.etp)]
    out += [("model.sequence_parallel", plan.tp > 1)]
    layout = None
    if plan.pp > 1:
        layout = build_layout(model, plan.pp, plan.vpp, plan.layout).to_string()
    return out + [
        ("model.pipeline_model_parallel_layout", layout),
        ("model.num_layers_in_first_pipeline_stage", None),
        ("model.num_layers_in_last_pipeline_stage", None),
        ("model.account_for_embedding_in_pipeline_split", False),
        ("model.account_for_loss_in_pipeline_split", False),
        ("model.mtp_num_layers", model.mtp_layers or None),
    ]


def _recompute_offload_settings(model, plan) -> list[tuple[str, object]]:
    rc = plan.recompute
    if rc.kind == "selective":
        out: list[tuple[str, object]] = [
            ("model.recompute_granularity", "selective"), ("model.recompute_method", None),
            ("model.recompute_num_layers", None), ("model.recompute_modules", list(rc.modules))]
    elif rc.kind == "full":
        method, n = ("uniform", 1) if rc.layers is None else ("block", rc.layers)
        out = [("model.recompute_granularity", "full"), ("model.recompute_method", method),
               ("model.recompute_num_layers", n)]
    else:
        out = [("model.recompute_granularity", None), ("model.recompute_method", None),
               ("model.recompute_num_layers", None)]
    off = plan.offload
    out += [("model.cpu_offloading", False), ("model.fine_grained_activation_offloading", off.activations)]
    if off.activations:
        out += [("model.offload_modules", megatron_offload_modules(model, plan))]
    return out


def _optimizer_settings(plan) -> list[tuple[str, object]]:
    off, bf16_moments = plan.offload, plan.moments == "bf16"
    return [
        ("optimizer.optimizer_cpu_offload", off.optimizer),
        ("optimizer.optimizer_offload_fraction", 1.0 if off.optimizer else 0.0),
        ("optimizer.use_precision_aware_optimizer", off.optimizer or bf16_moments),
        ("optimizer.main_grads_dtype", "fp32"), ("optimizer.main_params_dtype", "fp32"),
        ("optimizer.exp_avg_dtype", "bf16" if bf16_moments else "fp32"),
        ("optimizer.exp_avg_sq_dtype", "bf16" if bf16_moments else "fp32"),
    ]


def _graph_settings(model, plan) -> list[tuple[str, object]]:
    g = plan.cuda_graphs  # TransformerConfig.cuda_graph_impl / cuda_graph_scope (megatron-core 0.19)
    impl = {"none": "none", "scoped": "transformer_engine", "full_iteration": "full_iteration"}[g.kind]
    out: list[tuple[str, object]] = [("model.cuda_graph_impl", impl)]
    if g.kind == "scoped":
        out += [("model.cuda_graph_scope", list(g.modules))]
    if g.kind == "full_iteration":
        # ConfigContainer.validate refuses the loss's NaN check under a full-iteration graph
        # (megatron/bridge/training/config.py, Megatron-Bridge 0.6.2: "check_for_nan_in_loss must be
        # disabled when using full_iteration CUDA graph")
        out += [("rerun_state_machine.check_for_nan_in_loss", False)]
    if g.kind == "full_iteration" and model.is_moe:
        # Static expert shapes, as Bridge 0.6.0's HybridEP full-iteration recipes set them
        # (src/megatron/bridge/perf_recipes/deepseek/common.py; planner.launchers.megatron.write.STATIC_MOE_ARGS).
        out += [("model.moe_expert_rank_capacity_factor", 1.5), ("model.moe_paged_stash", True),
                ("model.moe_paged_stash_buffer_size_factor_cuda", 1.2), ("model.use_transformer_engine_op_fuser", True)]
    return out


def _moe_settings(model, plan, recipe: str) -> list[tuple[str, object]]:
    if not model.is_moe:
        return []
    d = plan.dispatcher or "alltoall"
    out: list[tuple[str, object]] = [
        ("model.moe_token_dispatcher_type", "alltoall" if d == "alltoall" else "flex"),
        ("model.moe_flex_dispatcher_backend", None if d == "alltoall" else d)]
    where = "comm_overlap" if has_comm_overlap(recipe) is not False else "model"
    out += [(f"{where}.overlap_moe_expert_parallel_comm", bool(plan.ep_overlap))]
    if plan.ep_overlap == "wgrad":  # CommOverlapConfig.delay_wgrad_compute (training/comm_overlap.py, v0.6.0)
        out += [(f"{where}.delay_wgrad_compute", True)]
    if plan.ep_overlap:
        out += [("model.moe_shared_expert_overlap", False)]  # Bridge's EP-overlap check
    return out


def _sharding_settings(plan, deg) -> list[tuple[str, object]]:
    sh = plan.sharding
    fsdp = sh.kind in ("fsdp", "zero2", "hsdp")
    out: list[tuple[str, object]] = [("ddp.use_distributed_optimizer", sh.kind != "ddp"), ("ddp.use_megatron_fsdp", fsdp)]
    if fsdp:
        out += [("ddp.data_parallel_sharding_strategy", "optim_grads" if sh.kind == "zero2" else "optim_grads_params"),
                ("checkpoint.ckpt_format", "fsdp_dtensor")]
    instances = deg.dp * deg.cp // sh.group if sh.kind == "hsdp" else 1
    out += [("ddp.num_distributed_optimizer_instances", instances)]
    return out + [("ddp.overlap_grad_reduce", True), ("ddp.overlap_param_gather", sh.kind != "ddp")]


def bridge_launch(setup, *, recipe: str | None = None, nproc_per_node: int | None = None) -> BridgeLaunch:
    """The run_recipe.py launch of a resolved setup; raises PlanRuleError naming the rule it breaks."""
    check_with(own_violations, "Megatron-LM", setup)
    found = bridge_violations(setup.model, recipe, setup.plan)
    if found:
        raise violations_error(found, "Megatron-Bridge")
    name = recipe_for(setup.model, recipe)
    assert name is not None, "bridge_violations refuses a model with no recipe (bridge-recipe)"
    overrides = [f"{k}={hydra_value(v)}" for k, v in bridge_settings(setup, name)]
    nproc = gpus_per_node(setup.hw, setup.job.gpus, nproc_per_node)
    env: dict[str, str] = {}
    notes: list[str] = []
    if setup.plan.offload.activations:
        env["NVTE_CPU_OFFLOAD_V1"] = "1"
    if has_comm_overlap(name) is None and setup.model.is_moe:
        notes.append(f"{name} is not a recipe planner knows: EP overlap is set through comm_overlap, which needs "
                     "the recipe to build a CommOverlapConfig")
    return BridgeLaunch(name, overrides, nproc, setup.job.gpus // nproc, env, notes)


def export_bridge(setup, *, predictions: dict | None = None, recipe: str | None = None,
                  nproc_per_node: int | None = None) -> str:
    """A bash script running Megatron-Bridge's run_recipe.py with the plan's overrides."""
    launch = bridge_launch(setup, recipe=recipe, nproc_per_node=nproc_per_node)
    about = [
        f"# recipe: {_c(launch.recipe)} builds the model from its HuggingFace config and sets the data, optimizer",
        "# and schedule; every override below sets what the plan depends on (later overrides win). Run on every",
        "# node with NODE_RANK, MASTER_ADDR and MASTER_PORT from your scheduler and MEGATRON_BRIDGE pointing at a",
        "# Megatron-Bridge checkout (its scripts/training/run_recipe.py); --dataset mock: put your data there.",
    ]
    lines = script_opening(setup, f"Megatron-Bridge {BRIDGE_VERSION} launch written by planner {_c(__version__)} "
                           "(planner export --format bridge).", setup.plan.to_string(),
                           prediction_lines(predictions or {}), about, launch.notes, launch.nnodes, 6000,
                           "MEGATRON_BRIDGE")
    for k, v in launch.env.items():
        lines += ["# Transformer Engine >= 2.10 needs it for fine-grained activation offloading",
                  f"export {k}={shlex.quote(v)}", ""]
    lines += ["OVERRIDES=("] + [f"    {shlex.quote(o)}" for o in launch.overrides] + [")", ""]
    lines += [
        f"torchrun --nproc-per-node {launch.nproc_per_node} --nnodes \"$NNODES\" --node-rank \"$NODE_RANK\" \\",
        "    --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\" \\",
        "    \"$MEGATRON_BRIDGE/scripts/training/run_recipe.py\" \\",
        f"    --recipe {shlex.quote(launch.recipe)} --mode pretrain --dataset mock \\",
        "    \"${OVERRIDES[@]}\"",
        "",
    ]
    return "\n".join(lines)
