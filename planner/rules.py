"""Validity rules: what the model's shape allows, and what each launcher accepts at startup.

Each rule has a name (shown in errors and exported with `planner export`) and cites the check it
mirrors. ``check_model_rules`` raises on the first violation; ``violations`` lists all of them for a
launcher target, so the search can filter and the exporter can refuse with the rule's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from planner.errors import PlanRuleError

if TYPE_CHECKING:
    from planner.specs.hardware import HardwareSpec
    from planner.specs.job import Job
    from planner.specs.model import ModelSpec
    from planner.specs.plan import Degrees, Plan

Target = Literal["megatron", "torchtitan", "any"]


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    hint: str | None = None

    def error(self) -> PlanRuleError:
        return PlanRuleError(self.rule, self.message, hint=self.hint)


def shape_violations(model: ModelSpec, plan: Plan) -> list[Violation]:
    """Rules that need only the model and the plan's own degrees."""
    out: list[Violation] = []
    if model.is_moe and plan.ep > model.moe.num_experts:
        out.append(Violation("experts-divisible-by-ep",
                             f"ep={plan.ep} exceeds the {model.moe.num_experts} experts of {model.name}: each EP rank "
                             "needs at least one expert (Megatron validate_args: num_experts % ep == 0).",
                             hint=f"Use an ep that divides {model.moe.num_experts}."))
    if not model.is_moe and plan.ep > 1:
        out.append(Violation("ep-needs-moe", f"ep={plan.ep} on dense model {model.name}: there are no experts to split."))
    return out


def model_violations(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """Rules every launcher shares: the model's shape and the job's batch."""
    out: list[Violation] = []
    a = model.attention
    if a.num_heads % plan.tp:
        out.append(Violation("heads-divisible-by-tp",
                             f"{a.num_heads} attention heads are not divisible by tp={plan.tp} (TransformerConfig)."))
    nkv = a.num_kv_heads
    if nkv % plan.tp and plan.tp % nkv:
        out.append(Violation("kv-heads-tp",
                             f"{nkv} key/value heads and tp={plan.tp}: one must divide the other (TransformerConfig)."))
    if model.is_moe:
        E = model.moe.num_experts
        if E % plan.ep and plan.ep <= E:
            out.append(Violation("experts-divisible-by-ep",
                                 f"{E} experts are not divisible by ep={plan.ep} (Megatron validate_args)."))
        if model.moe.expert_hidden_size % deg.etp:
            out.append(Violation("expert-ffn-divisible-by-etp",
                                 f"Expert width {model.moe.expert_hidden_size} is not divisible by etp={deg.etp}."))
    if model.ffn.hidden_size % plan.tp and any(k == "dense" for k in model.layer_kinds):
        out.append(Violation("ffn-divisible-by-tp",
                             f"FFN width {model.ffn.hidden_size} is not divisible by tp={plan.tp}."))
    if job.global_batch % (plan.mbs * deg.dp):
        out.append(Violation(
            "global-batch-divisible",
            f"Global batch {job.global_batch} is not divisible by mbs*dp = {plan.mbs}*{deg.dp} = {plan.mbs * deg.dp} "
            "(Megatron num_microbatches_calculator).",
            hint="Change mbs, the degrees, or --global-batch.",
        ))
    if plan.cp > 1 and job.seq_len % (2 * plan.cp):
        out.append(Violation("seq-divisible-by-2cp",
                             f"Sequence length {job.seq_len} is not divisible by 2*cp = {2 * plan.cp} "
                             "(load-balanced causal CP, Megatron validate_args)."))
    if plan.vpp > 1 and plan.pp == 1:
        out.append(Violation("vpp-needs-pp", f"vpp={plan.vpp} needs pp > 1 (Megatron validate_args)."))
    precision = plan.precision or job.default_precision
    if precision not in job.precisions:
        out.append(Violation("precision-allowed",
                             f"Plan precision {precision} is not among the job's allowed precisions {job.precisions}.",
                             hint="Add it with --precision bf16,fp8."))
    if precision == "fp8" and "fp8" not in hw.gpu.peak_flops:
        out.append(Violation("fp8-hardware", f"{hw.gpu.name} has no FP8 tensor cores."))
    sh = plan.sharding_spec
    if sh.kind == "hsdp" and (deg.dp * deg.cp) % sh.group:
        out.append(Violation("hsdp-group", f"hsdp:{sh.group} does not divide dp*cp = {deg.dp * deg.cp}."))
    rc = plan.recompute_spec
    if rc.kind == "selective":
        if "mla_up_proj" in rc.modules and model.attention.kind != "mla":
            out.append(Violation("recompute-mla", "recompute module mla_up_proj needs MLA attention (TransformerConfig)."))
        moe_mods = {"moe_act", "moe", "shared_experts"} & set(rc.modules)
        if moe_mods and not model.is_moe:
            out.append(Violation("recompute-moe", f"recompute module {sorted(moe_mods)[0]} needs an MoE model."))
        if "shared_experts" in rc.modules and model.is_moe and not model.moe.shared_hidden:
            out.append(Violation("recompute-shared", f"{model.name} has no shared experts to recompute."))
    if plan.ep_overlap == "on":
        if plan.ep == 1:
            out.append(Violation("ep-overlap-needs-ep", "ep_overlap=on needs ep > 1 (Megatron validate_args)."))
        if plan.pp > 1 and plan.vpp == 1:
            out.append(Violation("ep-overlap-needs-vpp", "ep_overlap=on with pp > 1 needs vpp > 1 (Megatron validate_args)."))
        if rc.kind == "full":
            out.append(Violation("ep-overlap-recompute", "ep_overlap=on is incompatible with full recompute (Megatron validate_args)."))
    return out


def stage_recompute_violations(plan: Plan, layout) -> list[Violation]:
    """A plan's per-stage full-recompute counts against its pipeline layout: one count per
    pipeline stage, none above the layers a chunk of that stage holds, with recompute=full."""
    counts = plan.stage_recompute_layers
    if counts is None:
        return []
    if plan.recompute_spec.kind != "full":
        return [Violation("stage-recompute-needs-full",
                          f"stage_recompute={plan.stage_recompute} gives per-stage full-recompute layer counts, but the plan's "
                          f"recompute is '{plan.recompute}'.",
                          hint="Add recompute=full, or leave stage_recompute out.")]
    if len(counts) != layout.pp:
        return [Violation("stage-recompute-stages",
                          f"stage_recompute={plan.stage_recompute} gives {len(counts)} count(s) for {layout.pp} pipeline "
                          "stage(s).", hint=f"Give one count per stage, e.g. stage_recompute={'/'.join(['1'] * layout.pp)}.")]
    out = []
    for r, n in enumerate(counts):
        most = max((ch.num_layers for ch in layout.rank_stages(r)), default=0)
        if n > most:
            per = " per virtual stage" if layout.vpp > 1 else ""
            out.append(Violation("stage-recompute-layers",
                                 f"stage_recompute={plan.stage_recompute} recomputes {n} layers on pipeline stage {r}, "
                                 f"which holds {most} decoder layer(s){per}.",
                                 hint=f"Use at most {most} for stage {r}."))
            break
    return out


def check_model_rules(model, hw, job, plan, deg) -> None:
    """Raise the first model-shape violation as a PlanRuleError."""
    found = shape_violations(model, plan) + model_violations(model, hw, job, plan, deg)
    if found:
        raise found[0].error()


# ======================================================================================
# Launcher startup checks (Megatron-LM / megatron-core 0.19.2, torchtitan 0.3.0)
# ======================================================================================
#
# Each rule below mirrors one check a launcher runs before (or in the first seconds of) training;
# the comment beside it names the file and check. ``launcher_violations`` lists every rule a plan
# breaks for a target, ``check_launcher_rules`` raises them as one PlanRuleError (export refuses),
# and the search filters with ``--target``. Rules that only a command line can break (flag
# combinations planner never emits) live in planner.export.megatron_args.args_violations.

RULES: dict[str, str] = {
    # shared (model_violations, Plan.degrees, build_layout)
    "world-divisibility": "gpus % (tp*cp*pp) == 0 (megatron validate_args; torchtitan ParallelDims._validate)",
    "dp-mismatch": "a given dp equals gpus/(tp*cp*pp)",
    "expert-world-divisibility": "gpus % (etp*ep*pp) == 0 (megatron parallel_state.initialize_model_parallel)",
    "heads-divisible-by-tp": "heads % tp == 0 (TransformerConfig)",
    "kv-heads-tp": "query groups % tp == 0 or tp % groups == 0 (TransformerConfig)",
    "ep-needs-moe": "ep > 1 needs experts (validate_args, TransformerConfig)",
    "experts-divisible-by-ep": "num_experts % ep == 0 (validate_args)",
    "expert-ffn-divisible-by-etp": "expert width % etp == 0 (column-parallel expert FC1)",
    "ffn-divisible-by-tp": "dense FFN width % tp == 0 (column-parallel FC1)",
    "global-batch-divisible": "global batch % (mbs*dp) == 0 (num_microbatches_calculator)",
    "seq-divisible-by-2cp": "seq % (2*cp) == 0 when cp > 1 (validate_args)",
    "vpp-needs-pp": "virtual stages need pp > 1 (validate_args)",
    "precision-allowed": "the plan's precision is one the job allows",
    "fp8-hardware": "fp8 needs FP8 tensor cores",
    "hsdp-group": "hsdp:N divides dp*cp",
    "recompute-mla": "mla_up_proj needs MLA (TransformerConfig)",
    "recompute-moe": "moe_act/moe/shared_experts recompute needs an MoE model",
    "recompute-shared": "shared_experts recompute needs shared experts",
    "ep-overlap-needs-ep": "--overlap-moe-expert-parallel-comm needs EP > 1 (TransformerConfig)",
    "ep-overlap-needs-vpp": "EP A2A overlap with PP > 1 needs VPP (TransformerConfig)",
    "ep-overlap-recompute": "EP A2A overlap forbids full recompute (TransformerConfig)",
    "layers-divisible": "layers split evenly over pp*vpp without a layout (validate_args)",
    "layout-stages": "layout stages % pp == 0 (validate_args)",
    "layout-vpp": "layout stages / pp == vpp (TransformerConfig)",
    "layout-embedding": "layout starts with E, once (validate_layer_layout)",
    "layout-loss": "layout ends with L, once (validate_layer_layout)",
    "layout-layers": "layout holds num_layers decoder layers (validate_layer_layout)",
    "layout-mtp": "layout MTP count, order and placement (validate_layer_layout)",
    # Megatron-LM
    "megatron-layout-syntax": "layout parses the same under Megatron's parse_str_to_list (no nested groups)",
    "layout-mtp-together": "all MTP modules in one virtual stage (validate_layer_layout)",
    "megatron-stage-recompute": "per-stage recompute counts have no Megatron flag",
    "ep-overlap-recompute-moe": "EP A2A overlap forbids 'moe' in --recompute-modules (TransformerConfig)",
    "ep-overlap-mtp": "EP A2A overlap supports at most one MTP layer (TransformerConfig)",
    "precision-aware-needs-dist-opt": "--use-precision-aware-optimizer needs the distributed optimizer (OptimizerConfig)",
    "activation-offload-empty": "fine-grained offload needs at least one module left to offload (TransformerConfig)",
    "fp8-delayed-recompute": "delayed-scaling FP8 forbids moe_act/layernorm recompute (TransformerConfig)",
    "expert-bias-score-function": "router expert bias needs sigmoid/sqrtsoftplus scores (TransformerConfig)",
    "router-groups": "experts % router groups == 0 and group top-k <= groups (TransformerConfig)",
    "moe-bias-etp": "biases in MoE experts need etp == 1 (TransformerConfig)",
    "mtp-position-embedding": "MTP needs rope/none position embeddings (validate_args)",
    "seq-exceeds-max-position": "max_position_embeddings >= seq_length (validate_args)",
    "hsdp-expert-dp": "expert-DP % distributed-optimizer instances == 0 (initialize_model_parallel)",
    "sp-seq-divisible": "seq/cp divisible by tp under sequence parallelism (scatter to SP region)",
    # torchtitan 0.3.0
    "torchtitan-model": "a torchtitan config_registry function exists for the model",
    "torchtitan-mtp": "the registry config builds no MTP modules",
    "torchtitan-etp": "torchtitan has no expert tensor parallelism (experts are never TP-sharded)",
    "torchtitan-ep-grid": "(dp_shard*cp*tp) % ep == 0 (ParallelDims: efsdp = dp_shard*cp*tp/ep)",
    "torchtitan-sharding": "Megatron's distributed optimizer (ZeRO-1) has no torchtitan equivalent",
    "torchtitan-hsdp": "hsdp:N maps to dp_shard = N/cp: N % cp == 0 and dp % dp_shard == 0",
    "torchtitan-recompute-modules": "torchtitan's selective AC is per-op, not Megatron's module list",
    "torchtitan-recompute-layers": "torchtitan's full AC recomputes every layer (no layer count)",
    "torchtitan-stage-recompute": "per-stage recompute counts have no torchtitan option",
    "torchtitan-offload": "torchtitan offloads params+grads+optimizer together (FSDP CPU offload) and has no activation offload",
    "torchtitan-fp8": "Float8/MXFP8 is a model converter in a config_registry function, not a flag",
    "torchtitan-precision": "the registry config applies Float8 converters itself (llama3_405b), so a bf16 plan needs another function",
    "torchtitan-dispatcher": "DeepEP/HybridEP backends are chosen in model_registry(), not on the command line",
    "torchtitan-ep-overlap": "torchtitan has no EP all-to-all / compute overlap schedule",
    "torchtitan-seq-divisor": "seq % (tp * 2cp) == 0 (Trainer: sequence/context-parallel evenness)",
    "torchtitan-batch": "global % (local_batch * dp) == 0 and local_batch % pp microbatch == 0 (Trainer)",
}
"""Every launcher rule by name, with the check it mirrors."""


def _canonical(plan: Plan, model: ModelSpec, hw: HardwareSpec | None, job: Job) -> Plan:
    return plan.canonical(
        is_moe=model.is_moe,
        default_dispatcher=hw.default_dispatcher if hw is not None else "alltoall",
        default_precision=job.default_precision,
    )


def _expand_like_megatron(layout: str) -> list[str] | None:
    """Expand a layout the way megatron PipelineParallelLayerLayout.parse_str_to_list does: drop
    commas, one pass of '(group)*n' with a group free of ')' characters, then 'x*n'. None when
    Megatron's reading would grow past planner's bound on layouts (it repeats whatever precedes
    a '*n', so a string planner reads as small can unroll to gigabytes there)."""
    import re

    from planner.specs.layout import MAX_LAYOUT_SYMBOLS

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


def megatron_offload_modules(model: ModelSpec, plan: Plan) -> list[str]:
    """--offload-modules for offload=activations: every module Megatron can offload whose input
    is not already dropped by recompute (offloading a recomputed tensor saves nothing, and
    TransformerConfig forbids offloading inside an MoE layer that 'moe' recompute wraps)."""
    rc = plan.recompute_spec
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
    from planner.specs.layout import even_layout_symbols, parse_layout

    if plan.layout:
        return list(parse_layout(plan.layout))
    return list(even_layout_symbols(model, plan.pp, plan.vpp))


def megatron_violations(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """Megatron-LM 0.19.2 checks beyond the shared model-shape rules (plan must be canonical)."""
    out: list[Violation] = []
    rc = plan.recompute_spec
    if plan.layout:
        from planner.specs.layout import expand_layout

        if _expand_like_megatron(plan.layout) != expand_layout(plan.layout).split("|"):
            out.append(Violation(
                "megatron-layout-syntax",
                f"Megatron's --pipeline-model-parallel-layout parser expands '{plan.layout}' differently "
                "from planner (it unrolls one level of '(..)*n' groups only; PipelineParallelLayerLayout."
                "parse_str_to_list).",
                hint="Write the layout without nested groups.",
            ))
        # validate_layer_layout: when a rank's last chunk holds MTP it must hold all of them.
        if model.mtp_layers > 1:
            syms = _layout_symbols(plan, model)
            if any(0 < s.count("m") < model.mtp_layers for s in syms):
                out.append(Violation(
                    "layout-mtp-together",
                    f"The layout splits {model.name}'s {model.mtp_layers} MTP modules over several stages; "
                    "Megatron requires them in one virtual stage (validate_layer_layout).",
                ))
    if plan.stage_recompute:
        out.append(Violation(
            "megatron-stage-recompute",
            f"stage_recompute={plan.stage_recompute}: Megatron's --recompute-num-layers is one count for "
            "every (virtual) stage; per-stage counts have no flag.",
            hint="Use recompute=full:N, or search with --target megatron.",
        ))
    if plan.ep_overlap == "on":
        # TransformerConfig.__post_init__, overlap_moe_expert_parallel_comm block.
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
    sh = plan.sharding_spec
    if sh.kind == "ddp" and (plan.moments == "bf16" or plan.offloads_optimizer):
        what = "moments=bf16" if plan.moments == "bf16" else "offload=optimizer"
        out.append(Violation(
            "precision-aware-needs-dist-opt",
            f"{what} needs --use-precision-aware-optimizer, which Megatron's OptimizerConfig allows only "
            "with the distributed optimizer; sharding=ddp has none.",
            hint="Use sharding=dist_opt (or fsdp/zero2/hsdp).",
        ))
    if plan.offloads_activations and not megatron_offload_modules(model, plan):
        out.append(Violation(
            "activation-offload-empty",
            f"offload=activations with recompute={plan.recompute}: every module Megatron can offload is "
            "already recomputed, and --fine-grained-activation-offloading needs a non-empty "
            "--offload-modules (TransformerConfig).",
            hint="Drop the activation offload or recompute fewer modules.",
        ))
    precision = plan.precision or job.default_precision
    if (precision == "fp8" and hw is not None and hw.fp8_recipe == "delayed" and rc.kind == "selective"
            and {"moe_act", "layernorm"} & set(rc.modules)):
        out.append(Violation(
            "fp8-delayed-recompute",
            "Delayed-scaling FP8 cannot recompute moe_act or layernorm (TransformerConfig).",
        ))
    if model.is_moe:
        m = model.moe
        if m.router_bias and m.score_function not in ("sigmoid", "sqrtsoftplus"):
            out.append(Violation(
                "expert-bias-score-function",
                f"{model.name} uses a router expert bias with {m.score_function} scores; Megatron's "
                "--moe-router-enable-expert-bias needs sigmoid or sqrtsoftplus (TransformerConfig).",
            ))
        if m.group_top_k and m.num_groups and (m.num_experts % m.num_groups or m.group_top_k > m.num_groups):
            out.append(Violation(
                "router-groups",
                f"{m.num_experts} experts in {m.num_groups} router groups with group top-k {m.group_top_k}: "
                "Megatron needs experts % groups == 0 and group top-k <= groups (TransformerConfig).",
            ))
        has_bias = m.expert_bias or model.ffn.bias
        if has_bias and deg.etp != 1:
            out.append(Violation(
                "moe-bias-etp",
                f"{model.name} has biases in its MoE MLPs; Megatron supports them only with etp=1 "
                f"(TransformerConfig: 'Bias in Moe is only supported when ETP==1'), the plan has etp={deg.etp}.",
                hint="Set etp=1.",
            ))
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
    if sh.kind == "hsdp" and (deg.dp * deg.cp) % sh.group == 0 and model.is_moe:
        instances = deg.dp * deg.cp // sh.group
        if deg.edp % instances:
            out.append(Violation(
                "hsdp-expert-dp",
                f"hsdp:{sh.group} means {instances} distributed-optimizer instances, which do not divide "
                f"expert-DP {deg.edp} (parallel_state.initialize_model_parallel).",
            ))
    if plan.tp > 1 and (job.seq_len // plan.cp) % plan.tp:
        out.append(Violation(
            "sp-seq-divisible",
            f"Sequence parallelism splits the {job.seq_len // plan.cp}-token sequence per CP rank over tp={plan.tp} "
            "ranks, which does not divide it (scatter_to_sequence_parallel_region).",
        ))
    return out


# torchtitan 0.3.0 config_registry functions for planner's catalog names.
TORCHTITAN_CONFIGS: dict[str, tuple[str, str]] = {
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
    "llama3.1-405b": ("llama3", "llama3_405b"),
    "llama3.1-70b": ("llama3", "llama3_70b"),
    "llama3.1-8b": ("llama3", "llama3_8b"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"),
    "qwen3-32b": ("qwen3", "qwen3_32b"),
    "gpt-oss-20b": ("gpt_oss", "gpt_oss_20b"),
    "gpt-oss-120b": ("gpt_oss", "gpt_oss_120b"),
}
"""Registry functions torchtitan 0.3.0 ships (models/<module>/config_registry.py). Models absent
here (kimi-k2, qwen3-235b-a22b: its '235B-A22B' flavor exists but no config function) need a
user-written config_registry function passed as --torchtitan-config MODULE:FUNCTION."""

TORCHTITAN_FP8_CONFIGS: set[str] = {"llama3_405b"}
"""Registry configs that convert linear layers to Float8 themselves (model_registry converters)."""

TORCHTITAN_MTP_CONFIGS: set[str] = set()
"""Registry configs that build MTP modules (none of the full-size ones in 0.3.0: only
deepseek_v3_debugmodel_mtp does)."""


def torchtitan_config_for(model: ModelSpec, override: str | None = None) -> tuple[str, str] | None:
    if override:
        mod, _, fn = override.partition(":")
        return (mod, fn or "")
    for name in [model.name, *model.aliases]:
        if name in TORCHTITAN_CONFIGS:
            return TORCHTITAN_CONFIGS[name]
    return None


def torchtitan_dims(plan: Plan, deg: Degrees) -> dict[str, int]:
    """planner degrees as torchtitan 0.3 ParallelDims (dp_replicate * dp_shard * cp * tp * pp = world).

    fsdp/zero2 shard over all of DP; ddp replicates; hsdp:N shards within N ranks of DP*CP
    (torchtitan's FSDP mesh is dp_shard*cp), replicating across the rest."""
    sh = plan.sharding_spec
    if sh.kind == "ddp":
        rep, shard = deg.dp, 1
    elif sh.kind == "hsdp":
        shard = max(sh.group // deg.cp, 1)
        rep = deg.dp // shard if deg.dp % shard == 0 else 0
    else:
        rep, shard = 1, deg.dp
    return {"dp_replicate": rep, "dp_shard": shard, "cp": deg.cp, "tp": deg.tp, "pp": deg.pp, "ep": deg.ep}


def torchtitan_violations(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees,
                          *, torchtitan_config: str | None = None) -> list[Violation]:
    """What torchtitan 0.3.0 cannot express or rejects (plan must be canonical)."""
    out: list[Violation] = []
    cfg = torchtitan_config_for(model, torchtitan_config)
    custom = torchtitan_config is not None
    if cfg is None:
        out.append(Violation(
            "torchtitan-model",
            f"torchtitan 0.3.0 ships no config_registry function for {model.name}.",
            hint="Write one (a function returning Trainer.Config with model_registry(...)) and pass "
            "--torchtitan-config MODULE:FUNCTION.",
        ))
    elif model.mtp_layers and not custom and cfg[1] not in TORCHTITAN_MTP_CONFIGS:
        out.append(Violation(
            "torchtitan-mtp",
            f"torchtitan's {cfg[0]}.{cfg[1]} builds no MTP module, while {model.name} has {model.mtp_layers}; "
            "the number of MTP layers is a model_registry() argument, not a command-line option.",
            hint="Pass --torchtitan-config MODULE:FUNCTION naming a function that calls "
            "model_registry(..., num_mtp_layers=N).",
        ))
    if model.is_moe and deg.etp != 1:
        out.append(Violation(
            "torchtitan-etp",
            f"etp={deg.etp}: torchtitan 0.3.0 has no expert tensor parallelism (expert_tensor_parallel_degree "
            "was removed; EP borrows ranks from FSDP and TP, experts are never TP-sharded).",
            hint="Set etp=1.",
        ))
    dims = torchtitan_dims(plan, deg)
    sh = plan.sharding_spec
    if sh.kind == "dist_opt":
        out.append(Violation(
            "torchtitan-sharding",
            "sharding=dist_opt is Megatron's distributed optimizer (replicated bf16 weights, sharded "
            "optimizer state); torchtitan shards with FSDP2 only.",
            hint="Use sharding=fsdp, zero2 (FSDP without reshard after forward), hsdp:N or ddp.",
        ))
    if sh.kind == "hsdp" and (sh.group % deg.cp or dims["dp_replicate"] == 0):
        out.append(Violation(
            "torchtitan-hsdp",
            f"hsdp:{sh.group} with cp={deg.cp} and dp={deg.dp}: torchtitan's FSDP group is dp_shard*cp, so "
            "N must be a multiple of cp and dp a multiple of N/cp.",
        ))
    elif model.is_moe and deg.ep > 1 and (dims["dp_shard"] * deg.cp * deg.tp) % deg.ep:
        out.append(Violation(
            "torchtitan-ep-grid",
            f"ep={deg.ep} does not divide dp_shard*cp*tp = {dims['dp_shard']}*{deg.cp}*{deg.tp}: torchtitan's "
            "expert mesh is efsdp*ep over the same ranks (ParallelDims).",
        ))
    rc = plan.recompute_spec
    if rc.kind == "selective":
        out.append(Violation(
            "torchtitan-recompute-modules",
            f"recompute={plan.recompute}: torchtitan's activation_checkpoint:selective is per-op (it saves "
            "matmul outputs), not Megatron's module list.",
            hint="Use recompute=none or full.",
        ))
    elif rc.kind == "full" and rc.layers is not None:
        from planner.specs.layout import build_layout

        try:
            most = max(s.num_layers for s in build_layout(model, plan.pp, plan.vpp, plan.layout).stages)
        except Exception:
            most = 0
        if rc.layers < most:
            out.append(Violation(
                "torchtitan-recompute-layers",
                f"recompute=full:{rc.layers}: torchtitan's activation_checkpoint:full recomputes every "
                "layer; it has no per-stage layer count.",
                hint="Use recompute=full.",
            ))
    if plan.stage_recompute:
        out.append(Violation(
            "torchtitan-stage-recompute",
            f"stage_recompute={plan.stage_recompute} has no torchtitan option.",
        ))
    if plan.offload != "none":
        out.append(Violation(
            "torchtitan-offload",
            f"offload={plan.offload}: torchtitan's training.enable_cpu_offload moves parameters, gradients "
            "and optimizer state together (FSDP CPU offload), and it has no activation offload.",
        ))
    precision = plan.precision or job.default_precision
    if precision == "fp8" and not custom:
        out.append(Violation(
            "torchtitan-fp8",
            "precision=fp8: torchtitan 0.3.0 applies Float8/MXFP8 as model converters inside a "
            "config_registry function, not through a command-line option.",
            hint="Pass --torchtitan-config MODULE:FUNCTION naming a function with the converters "
            "(e.g. deepseek_v3.deepseek_v3_671b_float8).",
        ))
    if precision != "fp8" and cfg is not None and not custom and cfg[1] in TORCHTITAN_FP8_CONFIGS:
        out.append(Violation(
            "torchtitan-precision",
            f"torchtitan's {cfg[0]}.{cfg[1]} applies Float8LinearConverter to the model, so it trains in "
            f"float8, while the plan is {precision}.",
            hint="Pass --torchtitan-config MODULE:FUNCTION naming a function without the converters.",
        ))
    if model.is_moe and deg.ep > 1 and plan.dispatcher in ("deepep", "hybridep") and not custom:
        out.append(Violation(
            "torchtitan-dispatcher",
            f"dispatcher={plan.dispatcher}: torchtitan selects DeepEP/HybridEP with "
            "model_registry(moe_comm_backend=...) in a config_registry function, not on the command line.",
            hint="Use dispatcher=alltoall, or pass --torchtitan-config with such a function.",
        ))
    if plan.ep_overlap == "on":
        out.append(Violation(
            "torchtitan-ep-overlap",
            "ep_overlap=on: torchtitan 0.3.0 has no EP all-to-all/compute overlap schedule.",
            hint="Set ep_overlap=off.",
        ))
    divisor = deg.tp * (2 * deg.cp if deg.cp > 1 else 1)
    if job.seq_len % divisor:
        out.append(Violation(
            "torchtitan-seq-divisor",
            f"seq_len {job.seq_len} is not divisible by tp*2cp = {divisor} (torchtitan Trainer: "
            "sequence/context-parallel evenness).",
        ))
    return out


def torchtitan_batch_violations(global_batch: int, local_batch: int, batch_degree: int,
                                pp: int, pp_microbatch: int) -> list[Violation]:
    """torchtitan Trainer.Config.__post_init__ and Trainer.__init__ batch checks."""
    out = []
    if pp > 1 and local_batch % pp_microbatch:
        out.append(Violation(
            "torchtitan-batch",
            f"training.local_batch_size {local_batch} is not divisible by "
            f"parallelism.pipeline_parallel_microbatch_size {pp_microbatch} (Trainer.Config).",
        ))
    if global_batch % (local_batch * batch_degree):
        out.append(Violation(
            "torchtitan-batch",
            f"training.global_batch_size {global_batch} is not a multiple of local_batch_size*dp = "
            f"{local_batch}*{batch_degree} (Trainer).",
        ))
    return out


def launcher_violations(setup_or_plan, model: ModelSpec | None = None, job: Job | None = None,
                        target: Target = "megatron", *, hw: HardwareSpec | None = None,
                        torchtitan_config: str | None = None) -> list[Violation]:
    """Every rule ``target`` breaks: the shared model/plan rules, then the launcher's own.

    ``setup_or_plan`` is a resolved :class:`planner.cost.setup.Setup` (model, hw and job are taken
    from it) or a :class:`Plan` with ``model``, ``job`` and ``hw`` given (it is canonicalized here;
    a Plan that resolve_setup would refuse still gets its full list of violations). ``target='any'``
    keeps only the shared rules (plans some launcher, or none yet, could run)."""
    from planner.errors import PlanRuleError
    from planner.specs.layout import build_layout
    from planner.specs.plan import Plan as _Plan

    if isinstance(setup_or_plan, _Plan):
        if model is None or job is None or hw is None:
            raise TypeError("launcher_violations(plan, ...) needs model, job and hw")
        if setup_or_plan.dp is not None:  # canonical() drops a given dp: check it first
            try:
                setup_or_plan.degrees(job.gpus)
            except PlanRuleError as exc:
                return [Violation(exc.rule, exc.message.removeprefix(f"[{exc.rule}] "), exc.hint)]
        plan = _canonical(setup_or_plan, model, hw, job)
    else:
        s = setup_or_plan
        model, hw, job, plan = s.model, s.hw, s.job, s.plan
    if target not in ("megatron", "torchtitan", "any"):
        raise ValueError(f"unknown launcher target {target!r}")
    try:
        deg = plan.degrees(job.gpus)
    except PlanRuleError as exc:
        return [Violation(exc.rule, exc.message.removeprefix(f"[{exc.rule}] "), exc.hint)]
    out = model_violations(model, hw, job, plan, deg)
    try:
        build_layout(model, plan.pp, plan.vpp, plan.layout)
    except PlanRuleError as exc:
        out.append(Violation(exc.rule, exc.message.removeprefix(f"[{exc.rule}] "), exc.hint))
    if target == "megatron":
        out += megatron_violations(model, hw, job, plan, deg)
    elif target == "torchtitan":
        out += torchtitan_violations(model, hw, job, plan, deg, torchtitan_config=torchtitan_config)
    seen, unique = set(), []
    for v in out:
        if (v.rule, v.message) not in seen:
            seen.add((v.rule, v.message))
            unique.append(v)
    return unique


violations = launcher_violations
"""Short name used by the search (``--target``) and ``planner check``."""


def violations_error(found: list[Violation], target: str) -> PlanRuleError:
    """One PlanRuleError naming the first rule and listing the others."""
    first = found[0]
    others = "; ".join(f"[{v.rule}] {v.message}" for v in found[1:])
    launcher = {"megatron": "Megatron-LM", "torchtitan": "torchtitan"}.get(target, target)
    msg = f"{launcher} would reject this plan: {first.message}"
    if others:
        msg += f" Also: {others}"
    return PlanRuleError(first.rule, msg, hint=first.hint)


def check_launcher_rules(setup_or_plan, model=None, job=None, target: Target = "megatron", **kw) -> None:
    """Raise every violation for ``target`` as one PlanRuleError naming the first rule."""
    found = launcher_violations(setup_or_plan, model, job, target, **kw)
    if found:
        raise violations_error(found, target)
