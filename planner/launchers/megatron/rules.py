"""Megatron-LM (megatron-core 0.19.2) start-up checks: what a plan breaks (``plan_violations``) and
what only a hand-written command line can break (``args_violations``).

Each rule mirrors one check Megatron runs before (or in the first seconds of) training; the comment
or message beside it names the file and check (``validate_args`` in megatron/training/arguments.py,
``TransformerConfig.__post_init__`` in megatron/core/transformer/transformer_config.py,
``OptimizerConfig``, ``parallel_state.initialize_model_parallel``). The rules every launcher shares
(model shape, batch) are in :mod:`planner.rules`, which composes them with these.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from planner.errors import PlanRuleError, Violation
from planner.rules import fused_grouped_experts_missing
from planner.launchers.megatron.model import flag_int as _int
from planner.launchers.megatron.model import int_value, pattern_has_foreign_chars
from planner.launchers.megatron.read import LayerCounts
from planner.specs.layout import (
    MAX_LAYOUT_SYMBOLS,
    even_layout_symbols,
    expand_layout,
    parse_layout,
    uneven_layout_symbols,
)
from planner.specs.schedule import schedule_named

if TYPE_CHECKING:
    from planner.launchers.megatron.read import MegatronArgs
    from planner.rules import Checked
    from planner.specs.hardware import HardwareSpec
    from planner.specs.job import Job
    from planner.specs.model import ModelSpec
    from planner.specs.plan import Degrees, Plan

PLAN_RULES: dict[str, str] = {
    "megatron-layout-syntax": "layout parses the same under Megatron's parse_str_to_list (no nested groups)",
    "layout-mtp-together": "all MTP modules in one virtual stage (validate_layer_layout)",
    "megatron-stage-recompute": "per-stage recompute counts have no Megatron flag",
    "megatron-recompute-op": "recompute=op (torchtitan's per-op selective AC) has no Megatron flag (--recompute-modules is a module list)",
    "ep-overlap-recompute-moe": "EP A2A overlap forbids 'moe' in --recompute-modules (TransformerConfig)",
    "ep-overlap-mtp": "EP A2A overlap supports at most one MTP layer (TransformerConfig)",
    "precision-aware-needs-dist-opt": "--use-precision-aware-optimizer needs the distributed optimizer (OptimizerConfig)",
    "offload-fp8-param-gather": "optimizer CPU offload with --fp8-param-gather needs --fp8-recipe delayed (validate_args)",
    "activation-offload-empty": "fine-grained offload needs at least one module left to offload (TransformerConfig)",
    "fp8-delayed-recompute": "delayed-scaling FP8 forbids moe_act/layernorm recompute (TransformerConfig)",
    "expert-bias-score-function": "router expert bias needs sigmoid/sqrtsoftplus scores (TransformerConfig)",
    "moe-bias-etp": "biases in MoE experts need etp == 1 (TransformerConfig)",
    "mtp-position-embedding": "MTP needs rope/none position embeddings (validate_args)",
    "seq-exceeds-max-position": "max_position_embeddings >= seq_length (validate_args)",
    "hsdp-expert-dp": "expert-DP % distributed-optimizer instances == 0 (initialize_model_parallel)",
    "sp-seq-divisible": "seq/cp divisible by tp under sequence parallelism (scatter to SP region)",
    "megatron-schedule": "Megatron-Core 0.19.2 runs 1F1B and interleaved 1F1B only (pipeline_parallel/schedules.py)",
    "megatron-interleaved-groups": "interleaved: micro-batches a multiple of PP (forward_backward_pipelining_with_interleaving)",
    "cuda-graphs-full-recompute": "full recompute only with full-iteration CUDA graphs (TransformerConfig)",
    "cuda-graphs-full-iteration-moe": "full-iteration graphs of dropless MoE need the rank capacity and paged stash: hybridep, no layer offload (TransformerConfig)",
    "cuda-graphs-static-experts": "full-iteration graphs of dropless MoE need Transformer Engine's fused grouped experts: expert TP 1, the CuTe DSL grouped MLP of Blackwell or later (TEGroupedMLP._is_fused_impl_supported)",
    "cuda-graphs-dropless-moe": "the moe graph scope (and whole-layer capture of MoE layers) needs static shapes: drop-and-pad MoE (TransformerConfig)",
    "cuda-graphs-preprocess-router": "the moe_preprocess graph scope needs moe_router (TransformerConfig)",
    "cuda-graphs-module-absent": "a graph scope names a module the model has (mlp: dense layers, mamba: Mamba layers; TransformerConfig)",
    "cuda-graphs-ep-overlap": "EP A2A overlap with Transformer Engine graphs forbids the moe and mlp scopes (TransformerConfig)",
}
"""Megatron's own plan rules by name, with the check each mirrors (the shared ones: planner.rules.SHARED_RULES)."""


def _expand_like_megatron(layout: str) -> list[str] | None:
    """Expand a layout the way megatron PipelineParallelLayerLayout.parse_str_to_list does: drop
    commas, one pass of '(group)*n' with a group free of ')' characters, then 'x*n'. None when
    Megatron's reading would grow past planner's bound on layouts (it repeats whatever precedes
    a '*n', so a string planner reads as small can unroll to gigabytes there)."""
    budget = [MAX_LAYOUT_SYMBOLS]

    class _TooLong(Exception):
        pass

    def rep(m: re.Match) -> str:
        n = int(m.group(2)) if len(m.group(2)) <= 7 else MAX_LAYOUT_SYMBOLS + 1
        budget[0] -= len(m.group(1)) * n
        if budget[0] < 0:
            raise _TooLong()
        return m.group(1) * n

    s = layout.replace(",", "")
    try:
        s = re.sub(r"\(([^)]+)\)\*(\d+)", rep, s)
        s = re.sub(r"(.)\*(\d+)", rep, s)
    except _TooLong:
        return None
    return s.split("|")


@lru_cache(maxsize=4096)
def _megatron_reads_as_planner(layout: str) -> bool:
    """Whether Megatron's parser expands ``layout`` to the stages planner reads (cached: the
    search checks every lever combination of one layout against the rules)."""
    return _expand_like_megatron(layout) == expand_layout(layout).split("|")


def megatron_offload_modules(model: ModelSpec, plan: Plan) -> list[str]:
    """--offload-modules for offload=activations: every module Megatron can offload whose input
    is not already dropped by recompute (offloading a recomputed tensor saves nothing, and
    TransformerConfig forbids offloading inside an MoE layer that 'moe' recompute wraps)."""
    rc = plan.recompute
    mods = set(rc.modules) if rc.kind == "selective" else set()
    out = []
    if "layernorm" not in mods:
        out += ["attn_norm"]
    out += ["qkv_linear"]
    if "core_attn" not in mods:
        out += ["core_attn", "attn_proj"]  # attn_proj only together with core_attn (TransformerConfig)
    if "layernorm" not in mods:
        out += ["mlp_norm"]
    if model.is_moe and "moe" not in mods:
        out += ["expert_fc1"]
        if "moe_act" not in mods:
            out += ["moe_act"]
    if rc.kind == "full":
        out = []  # full recompute keeps only each layer's input: nothing inside a layer to offload
    return out


def _layout_symbols(plan: Plan, model: ModelSpec):
    if plan.layout:
        return list(parse_layout(plan.layout))
    return list(even_layout_symbols(model, plan.pp, plan.vpp))


def interleaved_groups_fit(pp: int, vpp: int, micro_batches: int) -> bool:
    """Whether Megatron's interleaved schedule takes ``micro_batches``: whole groups of PP
    (rule megatron-interleaved-groups; always with one chunk per rank)."""
    return vpp == 1 or pp == 1 or micro_batches % pp == 0


def _schedule_violations(plan: Plan, job: Job, deg: Degrees) -> list[Violation]:
    """Megatron-Core's schedules: 1F1B and interleaved only; interleaving in whole groups of PP
    micro-batches (schedules.py 1133-1154: ValueError when PP exceeds the micro-batches,
    RuntimeError when 0 < m % PP < PP, the group defaulting to PP, model_parallel_config.py
    567-568). The combined 1F1B of --overlap-moe-expert-parallel-comm runs inside the same function."""
    out: list[Violation] = []
    s = None if plan.schedule is None else schedule_named(plan.schedule)
    if s is not None and not s.megatron:
        runs = s.runs_under
        out.append(Violation(
            "megatron-schedule",
            f"schedule={plan.schedule}: Megatron-Core 0.19.2 runs 1F1B and interleaved 1F1B only (its combined 1F1B "
            f"is ep_overlap=on); this schedule runs under {runs}.",
            hint="Search with --target torchtitan or --target any, or drop schedule.",
        ))
    if plan.pp > 1 and plan.vpp > 1 and deg.dp and job.global_batch % (plan.mbs * deg.dp) == 0:
        m = job.global_batch // (plan.mbs * deg.dp)
        if not interleaved_groups_fit(plan.pp, plan.vpp, m):
            out.append(Violation(
                "megatron-interleaved-groups",
                f"{m} micro-batches with pp={plan.pp}, vpp={plan.vpp}: Megatron's interleaved schedule runs groups of PP "
                "micro-batches through the virtual stages and refuses a last group shorter than PP "
                "(forward_backward_pipelining_with_interleaving: 'The remainder of M ... should be 0').",
                hint=f"Choose a global batch, mbs or dp that gives a multiple of {plan.pp} micro-batches.",
            ))
    return out


def own_violations(checked: Checked, torchtitan_config: str | None = None) -> list[Violation]:
    """Megatron-LM's own rules on a plan the shared rules have checked (its registry record's rules;
    the torchtitan config is not Megatron's to read)."""
    return plan_violations(checked.model, checked.hw, checked.job, checked.plan, checked.deg)


def graph_violations(model: ModelSpec, plan: Plan) -> list[Violation]:
    """Megatron-Core 0.19's CUDA-graph checks (TransformerConfig.__post_init__,
    megatron/core/transformer/transformer_config.py; docs/research/levers-2026.md section 1) on
    the plan's ``cuda_graphs``. planner's MoE plans are dropless (no capacity factor, no padding
    to capacity), so graphs that would capture the experts' dynamic shapes are refused."""
    g = plan.cuda_graphs
    if not g:
        return []
    out: list[Violation] = []
    if plan.recompute.kind == "full" and g.kind != "full_iteration":
        out.append(Violation(
            "cuda-graphs-full-recompute",
            f"cuda_graphs={g} with recompute={plan.recompute}: Megatron captures fully recomputed layers only in "
            "full-iteration graphs (TransformerConfig).",
            hint="Use selective recompute, cuda_graphs=full_iteration, or cuda_graphs=none."))
    # Full-iteration graphs of dropless MoE need static expert shapes: the per-rank capacity
    # (--moe-expert-rank-capacity-factor) with the paged stash, as the Megatron-Bridge 26.06+ recipes
    # set them (levers-2026.md section 2) and planner's export writes them
    # (planner.launchers.megatron.write.cuda_graph_args). TransformerConfig.__post_init__ refuses the
    # rank capacity without the flex dispatcher's hybridep (or ncclep, no planner value) backend, and
    # the paged stash with cpu_offloading (layer-wise activation offload).
    if model.is_moe and g.kind == "full_iteration" and (plan.dispatcher != "hybridep" or plan.offload.activations):
        out.append(Violation(
            "cuda-graphs-full-iteration-moe",
            f"cuda_graphs=full_iteration on {model.name} with dispatcher={plan.dispatcher}, offload={plan.offload}: "
            "a dropless MoE layer is captured with static shapes only under the per-rank expert capacity and the "
            "paged stash, which need the hybridep dispatcher and no layer-wise activation offload (TransformerConfig).",
            hint="Use dispatcher=hybridep without offload=activations, or cuda_graphs=scoped:attn+moe_router+moe_preprocess."))
    if model.is_moe and g.kind == "scoped" and (g.layers_captured or "moe" in g.modules):
        out.append(Violation(
            "cuda-graphs-dropless-moe",
            f"cuda_graphs={g} on {model.name}: capturing the MoE layer's experts needs static shapes, which "
            "Megatron has only with drop-and-pad routing (--moe-expert-capacity-factor with "
            "--moe-pad-expert-input-to-capacity), and planner's MoE plans are dropless (TransformerConfig).",
            hint="Capture attn+moe_router+moe_preprocess (cuda_graphs=scoped:attn+moe_router+moe_preprocess)."))
    if "moe_preprocess" in g.modules and "moe_router" not in g.modules:
        out.append(Violation(
            "cuda-graphs-preprocess-router",
            "cuda_graphs captures moe_preprocess without moe_router; Megatron needs both (TransformerConfig).",
            hint="Add moe_router to the scope."))
    absent = [m for m, has in (("mlp", "dense" in model.layer_kinds), ("moe", model.is_moe),
                               ("moe_router", model.is_moe), ("moe_preprocess", model.is_moe), ("mamba", False))
              if m in g.modules and not has]
    if absent:
        out.append(Violation(
            "cuda-graphs-module-absent",
            f"cuda_graphs captures {', '.join(absent)}, which {model.name} has none of (TransformerConfig).",
            hint="Name only modules the model has."))
    if plan.ep_overlap and g.kind == "scoped" and ({"moe", "mlp"} & set(g.modules) or g.layers_captured):
        out.append(Violation(
            "cuda-graphs-ep-overlap",
            f"cuda_graphs={g} with ep_overlap={plan.ep_overlap}: the EP overlap with Transformer Engine graphs "
            "forbids the moe and mlp scopes (TransformerConfig).",
            hint="Capture attn+moe_router+moe_preprocess, or turn the overlap off."))
    return out


# Megatron's plan rules, one function each (or one per coherent group), in the order the checks
# are reported. Each takes (model, hw, job, plan, deg) and returns the violations it finds; the
# search and the exporter read them through plan_violations, which runs PLAN_CHECKS in order.


def _layout_syntax(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """megatron-layout-syntax: Megatron's parser (PipelineParallelLayerLayout.parse_str_to_list,
    megatron/core/transformer/pipeline_parallel_layer_layout.py) reads the layout as planner does."""
    if not plan.layout or _megatron_reads_as_planner(plan.layout):
        return []
    return [Violation(
        "megatron-layout-syntax",
        f"Megatron's --pipeline-model-parallel-layout parser expands '{plan.layout}' differently "
        "from planner (it unrolls one level of '(..)*n' groups only; PipelineParallelLayerLayout."
        "parse_str_to_list).",
        hint="Write the layout without nested groups.",
    )]


def _layout_mtp_together(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan,
                         deg: Degrees) -> list[Violation]:
    """layout-mtp-together: when a rank's last chunk holds MTP it must hold all of them
    (PipelineParallelLayerLayout.validate_layer_layout)."""
    if not plan.layout or model.mtp_layers <= 1:
        return []
    if not any(0 < s.count("m") < model.mtp_layers for s in _layout_symbols(plan, model)):
        return []
    return [Violation(
        "layout-mtp-together",
        f"The layout splits {model.name}'s {model.mtp_layers} MTP modules over several stages; "
        "Megatron requires them in one virtual stage (validate_layer_layout).",
    )]


def _schedules(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """megatron-schedule, megatron-interleaved-groups (pipeline_parallel/schedules.py): see
    _schedule_violations."""
    return _schedule_violations(plan, job, deg)


def _graphs(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """cuda-graphs-* (TransformerConfig.__post_init__): see graph_violations."""
    return graph_violations(model, plan)


def _static_experts(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """cuda-graphs-static-experts: the experts of a full-iteration graph of dropless MoE layers run
    sync-free only in Transformer Engine's fused grouped MLP. Megatron-Core 0.19 sizes them with the
    rank capacity, which with hybridep needs --use-transformer-engine-op-fuser
    (TransformerConfig.__post_init__); TEGroupedMLP then asserts _is_fused_impl_supported
    (megatron/core/transformer/moe/experts.py), false with expert TP > 1 and, for gated experts,
    without NVTE_CUTEDSL_FUSED_GROUPED_MLP: the CuTe DSL grouped MLP, which Transformer Engine runs
    on SM100 and later only (transformer_engine/pytorch/ops/fused/forward_grouped_mlp.py,
    ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8.is_supported); TransformerConfig's doc of the sibling
    static-shape path (moe_ncclep_static_shape) says the same: "sm100+ (Blackwell or later); on
    older GPUs leave it False". The unfused TEGroupedMLP.forward reads tokens_per_expert.tolist(),
    a host sync no graph can capture. Every Megatron-Bridge recipe that captures a full MoE
    iteration (26.06, 26.08) runs on GB200, GB300 or B300 with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1,
    while the same releases' H100 MoE recipes stay eager."""
    if not (model.is_moe and plan.cuda_graphs and plan.cuda_graphs.kind == "full_iteration"):
        return []
    if deg.etp > 1:
        why: str | None = f"etp={deg.etp}: the fused grouped MLP runs without expert tensor parallelism"
    else:
        why = fused_grouped_experts_missing(model, hw)
    if why is None:
        return []
    return [Violation(
        "cuda-graphs-static-experts",
        f"cuda_graphs=full_iteration on {model.name}: a dropless MoE layer is captured only with Transformer Engine's "
        f"fused grouped experts (TEGroupedMLP._is_fused_impl_supported), and {why}.",
        hint="Use cuda_graphs=scoped:attn+moe_router+moe_preprocess" + (", or etp=1." if deg.etp > 1 else "."))]


def _recompute_op(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """megatron-recompute-op: Megatron-Core's selective recompute takes a module list
    (--recompute-modules, megatron/training/arguments.py), not torchtitan's per-op policy."""
    if plan.recompute.kind != "op":
        return []
    return [Violation(
        "megatron-recompute-op",
        "recompute=op is torchtitan's per-op selective activation checkpointing; Megatron-Core's "
        "selective recompute takes a module list (--recompute-modules), not a per-op policy.",
        hint="Use recompute=none, full, or modules such as core_attn+mlp; or search with --target torchtitan.",
    )]


def _stage_recompute(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """megatron-stage-recompute: --recompute-num-layers is one count for every (virtual) stage
    (TransformerConfig.recompute_num_layers)."""
    if not plan.stage_recompute:
        return []
    return [Violation(
        "megatron-stage-recompute",
        f"stage_recompute={plan.stage_recompute}: Megatron's --recompute-num-layers is one count for "
        "every (virtual) stage; per-stage counts have no flag.",
        hint="Use recompute=full:N, or search with --target megatron.",
    )]


def _ep_overlap(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """ep-overlap-recompute-moe, ep-overlap-mtp: TransformerConfig.__post_init__, its
    overlap_moe_expert_parallel_comm block."""
    if not plan.ep_overlap:
        return []
    out: list[Violation] = []
    rc = plan.recompute
    if rc.kind == "selective" and "moe" in rc.modules:
        out.append(Violation(
            "ep-overlap-recompute-moe",
            "ep_overlap=on with 'moe' in the recompute modules: Megatron requires 'moe' out of "
            "--recompute-modules with --overlap-moe-expert-parallel-comm (TransformerConfig).",
        ))
    if model.mtp_layers > 1:
        out.append(Violation(
            "ep-overlap-mtp",
            f"ep_overlap=on with {model.mtp_layers} MTP layers: Megatron supports at most one MTP layer "
            "with --overlap-moe-expert-parallel-comm (TransformerConfig).",
        ))
    return out


def _precision_aware_dist_opt(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan,
                              deg: Degrees) -> list[Violation]:
    """precision-aware-needs-dist-opt: bf16 moments and optimizer offload need
    --use-precision-aware-optimizer, which OptimizerConfig (megatron/core/optimizer/optimizer_config.py)
    allows only with the distributed optimizer."""
    if plan.sharding.kind != "ddp" or not (plan.moments == "bf16" or plan.offload.optimizer):
        return []
    what = "moments=bf16" if plan.moments == "bf16" else "offload=optimizer"
    return [Violation(
        "precision-aware-needs-dist-opt",
        f"{what} needs --use-precision-aware-optimizer, which Megatron's OptimizerConfig allows only "
        "with the distributed optimizer; sharding=ddp has none.",
        hint="Use sharding=dist_opt (or fsdp/zero2/hsdp).",
    )]


def _offload_fp8_param_gather(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan,
                              deg: Degrees) -> list[Violation]:
    """offload-fp8-param-gather: optimizer CPU offload takes --fp8-param-gather only with
    --fp8-recipe delayed (validate_args, megatron/training/arguments.py)."""
    if not (plan.param_gather == "fp8" and plan.offload.optimizer and hw is not None and hw.fp8_recipe != "delayed"):
        return []
    return [Violation(
        "offload-fp8-param-gather",
        f"param_gather=fp8 with offload=optimizer: Megatron's optimizer CPU offload takes --fp8-param-gather "
        f"only with --fp8-recipe delayed, and {hw.name}'s FP8 recipe is {hw.fp8_recipe} (validate_args).",
        hint="Set param_gather=bf16 or drop the optimizer offload.",
    )]


def _activation_offload_empty(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan,
                              deg: Degrees) -> list[Violation]:
    """activation-offload-empty: --fine-grained-activation-offloading needs a non-empty
    --offload-modules (TransformerConfig.__post_init__)."""
    if not plan.offload.activations or megatron_offload_modules(model, plan):
        return []
    return [Violation(
        "activation-offload-empty",
        f"offload=activations with recompute={plan.recompute}: every module Megatron can offload is "
        "already recomputed, and --fine-grained-activation-offloading needs a non-empty "
        "--offload-modules (TransformerConfig).",
        hint="Drop the activation offload or recompute fewer modules.",
    )]


def _fp8_delayed_recompute(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan,
                           deg: Degrees) -> list[Violation]:
    """fp8-delayed-recompute: delayed-scaling FP8 cannot recompute moe_act or layernorm
    (TransformerConfig.__post_init__)."""
    rc = plan.recompute
    precision = plan.precision  # the plan is canonical: its precision is explicit
    if not (precision == "fp8" and hw is not None and hw.fp8_recipe == "delayed" and rc.kind == "selective"
            and {"moe_act", "layernorm"} & set(rc.modules)):
        return []
    return [Violation(
        "fp8-delayed-recompute",
        "Delayed-scaling FP8 cannot recompute moe_act or layernorm (TransformerConfig).",
    )]


def _moe_router_and_bias(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan,
                         deg: Degrees) -> list[Violation]:
    """expert-bias-score-function, moe-bias-etp (TransformerConfig.__post_init__). Router groups
    (experts % groups == 0, group top-k <= groups) are the model's own rule (planner.specs.model,
    MoE validation): no ModelSpec breaks it, whatever the launcher."""
    m = model.moe
    if m is None:
        return []
    out: list[Violation] = []
    if m.router_bias and m.score_function not in ("sigmoid", "sqrtsoftplus"):
        out.append(Violation(
            "expert-bias-score-function",
            f"{model.name} uses a router expert bias with {m.score_function} scores; Megatron's "
            "--moe-router-enable-expert-bias needs sigmoid or sqrtsoftplus (TransformerConfig).",
        ))
    if (m.expert_bias or model.ffn.bias) and deg.etp != 1:
        out.append(Violation(
            "moe-bias-etp",
            f"{model.name} has biases in its MoE MLPs; Megatron supports them only with etp=1 "
            f"(TransformerConfig: 'Bias in Moe is only supported when ETP==1'), the plan has etp={deg.etp}.",
            hint="Set etp=1.",
        ))
    return out


def _learned_positions(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan,
                       deg: Degrees) -> list[Violation]:
    """mtp-position-embedding, seq-exceeds-max-position: validate_args (megatron/training/arguments.py)
    on learned absolute position embeddings."""
    out: list[Violation] = []
    if model.mtp_layers and model.position_embedding == "learned":
        out.append(Violation(
            "mtp-position-embedding",
            "Multi-token prediction with learned absolute position embeddings is rejected by "
            "validate_args (MTP needs rope or none).",
        ))
    if model.position_embedding == "learned" and model.max_position_embeddings and job.seq_len > model.max_position_embeddings:
        out.append(Violation(
            "seq-exceeds-max-position",
            f"seq_len {job.seq_len} exceeds {model.name}'s {model.max_position_embeddings} learned positions "
            "(validate_args: max_position_embeddings >= seq_length).",
        ))
    return out


def _hsdp_expert_dp(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """hsdp-expert-dp: the distributed-optimizer instances divide expert-DP
    (parallel_state.initialize_model_parallel, megatron/core/parallel_state.py)."""
    sh = plan.sharding
    if not (sh.kind == "hsdp" and sh.group is not None and deg.dp and deg.edp and (deg.dp * deg.cp) % sh.group == 0
            and model.is_moe):
        return []
    instances = deg.dp * deg.cp // sh.group
    if deg.edp % instances == 0:
        return []
    return [Violation(
        "hsdp-expert-dp",
        f"hsdp:{sh.group} means {instances} distributed-optimizer instances, which do not divide "
        f"expert-DP {deg.edp} (parallel_state.initialize_model_parallel).",
    )]


def _sp_seq_divisible(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """sp-seq-divisible: sequence parallelism scatters each CP rank's sequence over TP
    (scatter_to_sequence_parallel_region, megatron/core/tensor_parallel/mappings.py)."""
    if not (plan.tp > 1 and (job.seq_len // plan.cp) % plan.tp):
        return []
    return [Violation(
        "sp-seq-divisible",
        f"Sequence parallelism splits the {job.seq_len // plan.cp}-token sequence per CP rank over tp={plan.tp} "
        "ranks, which does not divide it (scatter_to_sequence_parallel_region).",
    )]


PlanCheck = Callable[["ModelSpec", "HardwareSpec | None", "Job", "Plan", "Degrees"], list[Violation]]
"""One of Megatron's plan rules (or a coherent group of them)."""

PLAN_CHECKS: tuple[PlanCheck, ...] = (
    _layout_syntax, _layout_mtp_together, _schedules, _graphs, _static_experts, _recompute_op, _stage_recompute, _ep_overlap,
    _precision_aware_dist_opt, _offload_fp8_param_gather, _activation_offload_empty, _fp8_delayed_recompute,
    _moe_router_and_bias, _learned_positions, _hsdp_expert_dp, _sp_seq_divisible,
)
"""Megatron's plan rules in the order their violations are reported."""


def plan_violations(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """Megatron-LM 0.19.2 checks beyond the shared model-shape rules (plan must be canonical)."""
    return [v for check in PLAN_CHECKS for v in check(model, hw, job, plan, deg)]


# ---------------------------------------------------------------------------------------------
# start-up checks that only a command line can break
# ---------------------------------------------------------------------------------------------

ARGS_RULES: dict[str, str] = {
    "vpp-args-exclusive": "at most one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout (validate_args)",
    "vpp-layers-per-stage-uneven": "--num-layers-per-virtual-pipeline-stage cannot be combined with first/last stage counts (validate_args)",
    "vpp-layers-per-stage": "(L/PP) % layers-per-virtual-stage == 0 (validate_args)",
    "uneven-pp": "first/last stage counts leave middle layers divisible over middle stages (TransformerConfig)",
    "uneven-pp-vpp": "first/last/middle rank layer counts divisible by VPP (TransformerConfig)",
    "layout-conflict": "--pipeline-model-parallel-layout excludes first/last counts and account-for flags (TransformerConfig)",
    "account-for-conflict": "first/last stage counts exclude --account-for-* (TransformerConfig)",
    "overlap-param-gather-needs-grad-reduce": "--overlap-param-gather needs --overlap-grad-reduce (validate_args)",
    "overlap-param-gather-needs-dist-opt": "--overlap-param-gather needs the distributed optimizer or Megatron FSDP (validate_args)",
    "optimizer-offload-needs-precision-aware": "--optimizer-cpu-offload needs --use-precision-aware-optimizer (validate_args)",
    "optimizer-offload-fp8-param-gather": "--optimizer-cpu-offload with --fp8-param-gather needs --fp8-recipe delayed (validate_args)",
    "precision-aware-needs-dist-opt": "--use-precision-aware-optimizer needs the distributed optimizer (OptimizerConfig)",
    "moments-dtype-needs-precision-aware": "non-fp32 --exp-avg(-sq)-dtype needs --use-precision-aware-optimizer (OptimizerConfig)",
    "fp8-param-gather-needs-dist-opt": "--fp8-param-gather needs the distributed optimizer or FSDP (validate_args)",
    "recompute-selective-method": "selective recompute takes no --recompute-method (validate_args)",
    "recompute-selective-num-layers": "selective recompute takes no --recompute-num-layers (TransformerConfig)",
    "recompute-full-method": "full recompute needs --recompute-method block|uniform (TransformerConfig)",
    "recompute-full-num-layers": "full recompute needs --recompute-num-layers (TransformerConfig)",
    "recompute-moe-act-grouped-gemm": "moe_act recompute needs --moe-grouped-gemm (TransformerConfig)",
    "moe-layer-recompute-full": "--moe-layer-recompute is illegal with full recompute (TransformerConfig)",
    "distribute-saved-activations": "--distribute-saved-activations needs full recompute, TP > 1 and no SP (validate_args, TransformerConfig)",
    "tp-comm-overlap-needs-sp": "--tp-comm-overlap needs --sequence-parallel (validate_args)",
    "megatron-fsdp-ckpt-format": "Megatron FSDP needs --ckpt-format fsdp_dtensor (validate_args)",
    "megatron-fsdp-cuda-connections": "Megatron FSDP needs CUDA_DEVICE_MAX_CONNECTIONS unset or > 1 (validate_args)",
    "cuda-device-max-connections": "TP/CP > 1 before Blackwell needs CUDA_DEVICE_MAX_CONNECTIONS=1 (validate_args)",
    "fine-grained-offload-env": "fine-grained activation offloading needs NVTE_CPU_OFFLOAD_V1=1 with TE >= 2.10 (validate_args)",
    "fine-grained-offload-modules": "--offload-modules non-empty, attn_proj with core_attn, nothing inside a recomputed MoE (TransformerConfig)",
    "fine-grained-offload-with-cpu-offloading": "fine-grained offload excludes --cpu-offloading-num-layers (TransformerConfig)",
    "cpu-offloading-layers": "--cpu-offloading-num-layers: < num_layers, PP == 1, no recompute (TransformerConfig)",
    "deepep-needs-flex": "DeepEP (--moe-enable-deepep / flex backends) needs --moe-token-dispatcher-type flex (TransformerConfig)",
    "shared-expert-overlap-dispatcher": "--moe-shared-expert-overlap needs alltoall or flex (TransformerConfig)",
    "ep-overlap-shared-expert-overlap": "EP A2A overlap excludes --moe-shared-expert-overlap (TransformerConfig)",
    "delay-wgrad-needs-ep-overlap": "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm (TransformerConfig)",
    "router-topk1-pre-softmax": "top-1 softmax routing needs --moe-router-pre-softmax (TransformerConfig)",
    "hierarchical-cp": "a2a+p2p CP needs --hierarchical-context-parallel-sizes multiplying to CP (validate_args)",
    "expert-dp-order": "with --use-tp-pp-dp-mapping and PP > 1 expert-DP must equal DP (initialize_model_parallel)",
    "mla-gqa-exclusive": "--multi-latent-attention excludes --group-query-attention (validate_args)",
    "sequence-parallel-needs-tp": "--sequence-parallel with TP = 1 is silently turned off by validate_args (reported, not fatal)",
    "moe-layer-freq-syntax": "a --moe-layer-freq pattern holds only ,0-9[]()+* (arguments.py _eval_pattern)",
}


@dataclass(frozen=True)
class _Flags:
    """A command line as the flag rules read it: the argparse values and the degrees, recompute
    granularity and optimizer choices several rules share, read once (in the order validate_args
    reads them, so a bad integer is reported for the same flag as before)."""

    args: MegatronArgs
    hw: HardwareSpec | None
    v: dict
    env: dict
    tp: int
    pp: int
    cp: int
    layers: int | None
    gran: str | None
    """Recompute granularity: --recompute-activations means selective (validate_args)."""
    dist_opt: bool
    pao: bool
    fsdp: bool

    @classmethod
    def of(cls, args: MegatronArgs, hw: HardwareSpec | None) -> _Flags:
        v = args.values
        tp = _int(v, "tensor_model_parallel_size", 1)
        pp = _int(v, "pipeline_model_parallel_size", 1)
        cp = _int(v, "context_parallel_size", 1)
        layers = _int(v, "num_layers")
        return cls(args, hw, v, args.env, tp, pp, cp, layers,
                   gran="selective" if v.get("recompute_activations") else v.get("recompute_granularity"),
                   dist_opt=bool(v.get("use_distributed_optimizer") or v.get("use_megatron_fsdp")),
                   pao=bool(v.get("use_precision_aware_optimizer")), fsdp=bool(v.get("use_megatron_fsdp")))

    @property
    def first_last(self) -> bool:
        """Whether --decoder-first/last-pipeline-num-layers is given."""
        return self.v.get("decoder_first_pipeline_num_layers") is not None or \
            self.v.get("decoder_last_pipeline_num_layers") is not None


# Megatron's command-line rules, one function per rule or per coherent group, in the order their
# violations are reported; args_violations runs ARGS_CHECKS in order.


def _argparse(f: _Flags) -> list[Violation]:
    """argparse: what Megatron's argument parser refuses (megatron/training/arguments.py parse_args)."""
    out = []
    for problem in f.args.refused:
        hint = ("Remove the flag or use its megatron-core 0.19.2 name (planner check lists the parser's flags in "
                "planner/launchers/megatron/flags.py)." if "unrecognized arguments" in problem else
                "Give one of the values listed." if "invalid choice" in problem else
                "Give the flag its value (a variable the script leaves empty?).")
        out.append(Violation("argparse", f"Megatron's argument parser refuses {problem}.", hint))
    return out


def _cross_entropy_te_fusion(f: _Flags) -> list[Violation]:
    """cross-entropy-te-fusion: validate_args rejects Transformer Engine's cross-entropy fusion."""
    if not (f.v.get("cross_entropy_loss_fusion") and f.v.get("cross_entropy_fusion_impl") == "te"):
        return []
    return [Violation(
        "cross-entropy-te-fusion", "--cross-entropy-loss-fusion with --cross-entropy-fusion-impl te: "
        "validate_args rejects Transformer Engine's cross-entropy fusion ('disabled due to stability issues', "
        "arguments.py).", "Use --cross-entropy-fusion-impl native, or omit --cross-entropy-loss-fusion.")]


def _vpp_args(f: _Flags) -> list[Violation]:
    """vpp-args-exclusive, vpp-layers-per-stage-uneven, vpp-layers-per-stage: the three ways to ask
    for virtual stages (validate_args)."""
    v, out = f.v, []
    styles = [name for name in ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                                "pipeline_model_parallel_layout") if v.get(name)]
    if len(styles) > 1:
        out.append(Violation(
            "vpp-args-exclusive", "Megatron accepts only one of --num-layers-per-virtual-pipeline-stage, "
            "--num-virtual-stages-per-pipeline-rank and --pipeline-model-parallel-layout; the flags give "
            + ", ".join(args_flag(f.args, name) for name in styles) + " (validate_args)."))
    if v.get("num_layers_per_virtual_pipeline_stage") and not v.get("num_virtual_stages_per_pipeline_rank"):
        if f.first_last:
            out.append(Violation(
                "vpp-layers-per-stage-uneven", "--num-layers-per-virtual-pipeline-stage cannot be combined with "
                "--decoder-first/last-pipeline-num-layers (validate_args).",
                "Use --num-virtual-stages-per-pipeline-rank."))
        elif f.layers:
            k = _int(v, "num_layers_per_virtual_pipeline_stage")
            if f.layers % f.pp or (f.layers // f.pp) % k:
                out.append(Violation("vpp-layers-per-stage", f"{f.layers} layers over PP={f.pp} do not give a whole "
                                     f"number of {k}-layer virtual stages per rank (validate_args)."))
    return out


def _stage_counts(f: _Flags) -> list[Violation]:
    """layout-conflict, account-for-conflict, uneven-pp, uneven-pp-vpp: a layout, first/last stage
    counts and --account-for-* exclude one another (TransformerConfig.__post_init__); the counts
    leave whole middle stages (planner.specs.layout.uneven_layout_symbols names the rule)."""
    v = f.v
    account = v.get("account_for_embedding_in_pipeline_split") or v.get("account_for_loss_in_pipeline_split")
    if v.get("pipeline_model_parallel_layout") and (f.first_last or account):
        return [Violation("layout-conflict", "--pipeline-model-parallel-layout cannot be combined with first/last "
                          "stage counts or --account-for-* (TransformerConfig).")]
    if f.first_last and account:
        return [Violation("account-for-conflict", "--decoder-first/last-pipeline-num-layers cannot be combined with "
                          "--account-for-embedding/loss-in-pipeline-split (TransformerConfig).")]
    if f.first_last and f.layers and not v.get("pipeline_model_parallel_layout"):
        try:
            uneven_layout_symbols(LayerCounts(f.layers, _int(v, "mtp_num_layers", 0) or 0), f.pp, f.args.plan.vpp,
                                  _int(v, "decoder_first_pipeline_num_layers"),
                                  _int(v, "decoder_last_pipeline_num_layers"))
        except PlanRuleError as exc:
            return [Violation(exc.rule, exc.message.removeprefix(f"[{exc.rule}] "))]
    return []


def _overlap_param_gather(f: _Flags) -> list[Violation]:
    """overlap-param-gather-needs-grad-reduce, overlap-param-gather-needs-dist-opt (validate_args)."""
    v, out = f.v, []
    if not v.get("overlap_param_gather"):
        return []
    if not v.get("overlap_grad_reduce"):
        out.append(Violation("overlap-param-gather-needs-grad-reduce",
                             "--overlap-param-gather needs --overlap-grad-reduce (validate_args)."))
    if not f.dist_opt:
        out.append(Violation("overlap-param-gather-needs-dist-opt", "--overlap-param-gather needs "
                             "--use-distributed-optimizer or --use-megatron-fsdp (validate_args)."))
    return out


def _optimizer_offload(f: _Flags) -> list[Violation]:
    """optimizer-offload-needs-precision-aware, optimizer-offload-fp8-param-gather (validate_args)."""
    v, out = f.v, []
    if not v.get("optimizer_cpu_offload"):
        return []
    if not f.pao:
        out.append(Violation("optimizer-offload-needs-precision-aware", "--optimizer-cpu-offload needs "
                             "--use-precision-aware-optimizer (validate_args)."))
    if v.get("fp8_param_gather") and (v.get("fp8_recipe") or "delayed") != "delayed":
        out.append(Violation("optimizer-offload-fp8-param-gather", "--optimizer-cpu-offload with "
                             "--fp8-param-gather needs --fp8-recipe delayed (validate_args)."))
    return out


def _precision_aware(f: _Flags) -> list[Violation]:
    """precision-aware-needs-dist-opt, moments-dtype-needs-precision-aware (OptimizerConfig,
    megatron/core/optimizer/optimizer_config.py); fp8-param-gather-needs-dist-opt (validate_args)."""
    v, out = f.v, []
    if f.pao and not f.dist_opt:
        out.append(Violation("precision-aware-needs-dist-opt", "--use-precision-aware-optimizer needs the "
                             "distributed optimizer (OptimizerConfig)."))
    low = [name for name in ("exp_avg_dtype", "exp_avg_sq_dtype", "main_grads_dtype", "main_params_dtype")
           if v.get(name) not in (None, "fp32")]
    if low and not f.pao:
        out.append(Violation("moments-dtype-needs-precision-aware", ", ".join(args_flag(f.args, name) for name in low)
                             + " below fp32 need --use-precision-aware-optimizer (OptimizerConfig)."))
    if v.get("fp8_param_gather") and not f.dist_opt:
        out.append(Violation("fp8-param-gather-needs-dist-opt",
                             "--fp8-param-gather needs the distributed optimizer or FSDP (validate_args)."))
    return out


def _recompute(f: _Flags) -> list[Violation]:
    """recompute-selective-*, recompute-moe-act-grouped-gemm, recompute-full-*, moe-layer-recompute-full:
    the flags each recompute granularity takes (validate_args, TransformerConfig.__post_init__)."""
    v, out = f.v, []
    if f.gran == "selective":
        if v.get("recompute_method"):
            out.append(Violation("recompute-selective-method",
                                 "Selective recompute takes no --recompute-method (validate_args)."))
        if v.get("recompute_num_layers") is not None:
            out.append(Violation("recompute-selective-num-layers",
                                 "Selective recompute takes no --recompute-num-layers (TransformerConfig)."))
        if "moe_act" in (v.get("recompute_modules") or []) and not v.get("moe_grouped_gemm"):
            out.append(Violation("recompute-moe-act-grouped-gemm",
                                 "Recompute module moe_act needs --moe-grouped-gemm (TransformerConfig)."))
    elif f.gran == "full":
        if not v.get("recompute_method"):
            out.append(Violation("recompute-full-method",
                                 "Full recompute needs --recompute-method block or uniform (TransformerConfig)."))
        if v.get("recompute_num_layers") is None:
            out.append(Violation("recompute-full-num-layers",
                                 "Full recompute needs --recompute-num-layers (TransformerConfig)."))
        if v.get("moe_layer_recompute"):
            out.append(Violation("moe-layer-recompute-full",
                                 "--moe-layer-recompute is illegal with full recompute (TransformerConfig)."))
    return out


def _tensor_parallel_extras(f: _Flags) -> list[Violation]:
    """distribute-saved-activations (validate_args, TransformerConfig), tp-comm-overlap-needs-sp,
    sequence-parallel-needs-tp (validate_args: turned off silently with TP = 1)."""
    v, out = f.v, []
    if v.get("distribute_saved_activations") and (f.gran != "full" or f.tp == 1 or v.get("sequence_parallel")):
        out.append(Violation("distribute-saved-activations", "--distribute-saved-activations needs full recompute, "
                             "TP > 1 and no sequence parallelism (validate_args, TransformerConfig)."))
    if v.get("tp_comm_overlap") and not (v.get("sequence_parallel") and f.tp > 1):
        out.append(Violation("tp-comm-overlap-needs-sp", "--tp-comm-overlap needs --sequence-parallel (validate_args)."))
    if v.get("sequence_parallel") and f.tp == 1:
        out.append(Violation("sequence-parallel-needs-tp",
                             "--sequence-parallel with TP=1: validate_args turns it off silently."))
    return out


def _megatron_fsdp(f: _Flags) -> list[Violation]:
    """megatron-fsdp-ckpt-format, megatron-fsdp-cuda-connections (validate_args)."""
    out = []
    if not f.fsdp:
        return []
    if f.v.get("ckpt_format") != "fsdp_dtensor":
        out.append(Violation("megatron-fsdp-ckpt-format",
                             "--use-megatron-fsdp needs --ckpt-format fsdp_dtensor (validate_args)."))
    if f.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        out.append(Violation("megatron-fsdp-cuda-connections", "Megatron FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is "
                             "unset or > 1; the script sets it to 1 (validate_args)."))
    return out


def _cuda_device_max_connections(f: _Flags) -> list[Violation]:
    """cuda-device-max-connections: validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or
    CP > 1 before Blackwell (needs the hardware)."""
    v, hw = f.v, f.hw
    if not (hw is not None and (f.tp > 1 or f.cp > 1) and hw.generation in ("ampere", "hopper") and not f.fsdp
            and not v.get("use_torch_fsdp2") and not v.get("overlap_moe_expert_parallel_comm")
            and f.env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1"):
        return []
    return [Violation("cuda-device-max-connections", f"TP={f.tp}, CP={f.cp} on {hw.gpu.name}: validate_args asserts "
                      "CUDA_DEVICE_MAX_CONNECTIONS=1, which the script does not set.",
                      "export CUDA_DEVICE_MAX_CONNECTIONS=1 before torchrun.")]


def _fine_grained_offload(f: _Flags) -> list[Violation]:
    """fine-grained-offload-env (validate_args), fine-grained-offload-modules and
    fine-grained-offload-with-cpu-offloading (TransformerConfig.__post_init__)."""
    v, out = f.v, []
    if not v.get("fine_grained_activation_offloading"):
        return []
    if f.env.get("NVTE_CPU_OFFLOAD_V1") != "1":
        out.append(Violation("fine-grained-offload-env", "--fine-grained-activation-offloading needs "
                             "NVTE_CPU_OFFLOAD_V1=1 with Transformer Engine >= 2.10 (validate_args).",
                             "export NVTE_CPU_OFFLOAD_V1=1."))
    mods = list(v.get("offload_modules") or [])
    rmods = list(v.get("recompute_modules") or []) if f.gran == "selective" else []
    if not mods or ("attn_proj" in mods and "core_attn" not in mods) or (
            "moe" in rmods and {"moe_act", "expert_fc1", "fused_group_mlp"} & set(mods)):
        out.append(Violation("fine-grained-offload-modules", "--offload-modules must be non-empty, offload attn_proj "
                             "only with core_attn, and nothing inside an MoE layer that 'moe' recompute wraps "
                             "(TransformerConfig)."))
    if _int(v, "cpu_offloading_num_layers", 0):
        out.append(Violation("fine-grained-offload-with-cpu-offloading", "--fine-grained-activation-offloading "
                             "cannot be combined with --cpu-offloading-num-layers (TransformerConfig)."))
    return out


def _cpu_offloading_layers(f: _Flags) -> list[Violation]:
    """cpu-offloading-layers: fewer layers than the model, PP = 1 and no recompute
    (TransformerConfig.__post_init__)."""
    n_off = _int(f.v, "cpu_offloading_num_layers", 0) or 0
    if not (n_off and ((f.layers is not None and n_off >= f.layers) or f.pp > 1 or f.gran is not None)):
        return []
    return [Violation("cpu-offloading-layers", "--cpu-offloading-num-layers needs fewer layers than the model, PP=1 "
                      "and no recompute (TransformerConfig).")]


def _moe_dispatch(f: _Flags) -> list[Violation]:
    """deepep-needs-flex, shared-expert-overlap-dispatcher, ep-overlap-shared-expert-overlap,
    delay-wgrad-needs-ep-overlap: the MoE dispatcher and its overlaps (TransformerConfig.__post_init__)."""
    v, out = f.v, []
    disp = v.get("moe_token_dispatcher_type") or "allgather"
    if v.get("moe_enable_deepep") and disp != "flex":
        out.append(Violation("deepep-needs-flex",
                             "--moe-enable-deepep needs --moe-token-dispatcher-type flex (TransformerConfig)."))
    if v.get("moe_shared_expert_overlap") and v.get("moe_shared_expert_intermediate_size") and \
            disp not in ("alltoall", "flex"):
        out.append(Violation("shared-expert-overlap-dispatcher", "--moe-shared-expert-overlap needs the alltoall or "
                             "flex dispatcher (TransformerConfig)."))
    if v.get("overlap_moe_expert_parallel_comm") and v.get("moe_shared_expert_overlap"):
        out.append(Violation("ep-overlap-shared-expert-overlap", "--overlap-moe-expert-parallel-comm excludes "
                             "--moe-shared-expert-overlap (TransformerConfig)."))
    if v.get("delay_wgrad_compute") and not v.get("overlap_moe_expert_parallel_comm"):
        out.append(Violation("delay-wgrad-needs-ep-overlap", "--delay-wgrad-compute needs "
                             "--overlap-moe-expert-parallel-comm (TransformerConfig)."))
    return out


def _router_topk1(f: _Flags) -> list[Violation]:
    """router-topk1-pre-softmax: top-1 softmax routing needs --moe-router-pre-softmax
    (TransformerConfig.__post_init__)."""
    v = f.v
    if not (v.get("num_experts") and _int(v, "moe_router_topk", 2) == 1
            and (v.get("moe_router_score_function") or "softmax") == "softmax" and not v.get("moe_router_pre_softmax")
            and v.get("moe_router_load_balancing_type") not in ("sinkhorn", ["sinkhorn"])):
        return []
    return [Violation("router-topk1-pre-softmax",
                      "Top-1 softmax routing needs --moe-router-pre-softmax (TransformerConfig).")]


def _hierarchical_cp(f: _Flags) -> list[Violation]:
    """hierarchical-cp: a2a+p2p context parallelism needs hierarchical sizes multiplying to CP
    (validate_args)."""
    v = f.v
    hier = v.get("hierarchical_context_parallel_sizes")
    if "a2a+p2p" in (v.get("cp_comm_type") or ["p2p"]) and not hier:
        return [Violation("hierarchical-cp",
                          "--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes (validate_args).")]
    if not hier:
        return []
    prod = 1
    for x in hier:
        prod *= int_value("--hierarchical-context-parallel-sizes", x)
    if prod == f.cp:
        return []
    return [Violation("hierarchical-cp",
                      f"--hierarchical-context-parallel-sizes multiply to {prod}, not CP={f.cp} (validate_args).")]


def _expert_dp_order(f: _Flags) -> list[Violation]:
    """expert-dp-order: with --use-tp-pp-dp-mapping and PP > 1 expert-DP equals DP
    (parallel_state.initialize_model_parallel, megatron/core/parallel_state.py)."""
    v, tp, pp, cp = f.v, f.tp, f.pp, f.cp
    world = f.args.job.get("gpus")
    if not (v.get("use_tp_pp_dp_mapping") and pp > 1 and world and v.get("num_experts")):
        return []
    etp = _int(v, "expert_tensor_parallel_size", tp)
    ep = _int(v, "expert_model_parallel_size", 1)
    if world % (tp * pp * cp) or world % (etp * ep * pp):
        return []
    dp, edp = world // (tp * pp * cp), world // (etp * ep * pp)
    if dp == edp:
        return []
    return [Violation("expert-dp-order", f"--use-tp-pp-dp-mapping with PP={pp}: expert-DP {edp} must equal DP {dp} "
                      "(initialize_model_parallel).")]


def _mla_gqa(f: _Flags) -> list[Violation]:
    """mla-gqa-exclusive: --multi-latent-attention excludes --group-query-attention (validate_args)."""
    if not (f.v.get("multi_latent_attention") and f.v.get("group_query_attention")):
        return []
    return [Violation("mla-gqa-exclusive", "--multi-latent-attention excludes --group-query-attention (validate_args).")]


def _moe_layer_freq(f: _Flags) -> list[Violation]:
    """moe-layer-freq-syntax: Megatron's _eval_pattern (megatron/training/arguments.py) accepts only
    ,0-9[]()+* in a --moe-layer-freq pattern."""
    v = f.v
    if not (v.get("num_experts") and pattern_has_foreign_chars(str(v.get("moe_layer_freq", "")))):
        return []
    return [Violation("moe-layer-freq-syntax", f"--moe-layer-freq {v['moe_layer_freq']!r}: Megatron's _eval_pattern "
                      "accepts only digits, commas, brackets, parentheses, + and * (no spaces) and raises 'Invalid "
                      "pattern' (arguments.py).", "Remove the spaces (or other characters) from the pattern.")]


ARGS_CHECKS: tuple[Callable[[_Flags], list[Violation]], ...] = (
    _argparse, _cross_entropy_te_fusion, _vpp_args, _stage_counts, _overlap_param_gather, _optimizer_offload,
    _precision_aware, _recompute, _tensor_parallel_extras, _megatron_fsdp, _cuda_device_max_connections,
    _fine_grained_offload, _cpu_offloading_layers, _moe_dispatch, _router_topk1, _hierarchical_cp,
    _expert_dp_order, _mla_gqa, _moe_layer_freq,
)
"""Megatron's command-line rules, the parser's own refusals first, in the order they are reported."""


def args_violations(args: MegatronArgs, hw=None) -> list[Violation]:
    """Start-up checks on the flags themselves (what planner never emits but a hand-written
    script can contain). ``hw`` enables the environment checks that depend on the GPU."""
    flags = _Flags.of(args, hw)
    return [v for check in ARGS_CHECKS for v in check(flags)]


def args_flag(args: MegatronArgs, dest: str) -> str:
    return "--" + dest.replace("_", "-")
