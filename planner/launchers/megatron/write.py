"""Megatron-LM launch script for ``pretrain_gpt.py`` (megatron-core 0.19.2 flags).

Every flag name below is one of megatron-core 0.19.2's own option strings (the table in
:mod:`planner.launchers.megatron.flags`, dumped from its argparse parser; a test checks that each
emitted flag is in it). Plans Megatron would refuse never reach this module: :func:`megatron_launch`
runs Megatron's rules (:func:`planner.launchers.checks.check_with`) first and raises the violated rule.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from planner import __version__
from planner.errors import PlanRuleError
from planner.launchers.allocator_env import allocator_environment
from planner.launchers.checks import check_with
from planner.launchers.common import comment_text as _c
from planner.launchers.common import gpus_per_node, prediction_lines, script_opening
from planner.launchers.megatron.rules import megatron_offload_modules, own_violations
from planner.specs.layout import even_layout_symbols, format_layout, parse_layout, uneven_layout_symbols

# Flags that need Transformer Engine at config time (TransformerConfig imports TE for them); the
# CPU validation harness drops these and re-adds them, as launchers.md §2 recommends.
TE_ONLY_FLAGS = {"--fp8-format": 1, "--fp8-recipe": 1, "--fp8-param-gather": 0, "--fp4-format": 1, "--fp4-recipe": 1,
                 "--fp4-param-gather": 0, "--moe-permute-fusion": 0}


@dataclass
class MegatronLaunch:
    """The pieces of a Megatron launch: environment, torchrun geometry and argument groups."""

    env: dict[str, str]
    env_notes: dict[str, str]
    """Why each environment variable is set (the check that requires it)."""
    nproc_per_node: int
    nnodes: int
    groups: list[tuple[str, list[str]]] = field(default_factory=list)
    """(bash array name, arguments) in script order."""
    notes: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        """The arguments of pretrain_gpt.py, in order."""
        return [a for _, args in self.groups for a in args]

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


def _pattern(flags: list[int]) -> str:
    """A per-layer 0/1 list as the Python-list string Megatron's moe_freq_type evaluates, run-length
    encoded ('([0]*3+[1]*58)'; only the characters _eval_pattern allows)."""
    runs: list[tuple[int, int]] = []
    for k in flags:
        if runs and runs[-1][0] == k:
            runs[-1] = (k, runs[-1][1] + 1)
        else:
            runs.append((k, 1))
    return "(" + "+".join(f"[{k}]*{n}" for k, n in runs) + ")"


def _layer_freq(model) -> str:
    """--moe-layer-freq: 1 when every layer is MoE, else a Python-list string such as
    '([0]*3+[1]*58)' (validate_args evaluates it with moe_freq_type)."""
    kinds = [1 if k == "moe" else 0 for k in model.layer_kinds]
    if all(kinds):
        return "1"
    return _pattern(kinds)


def _number(x: float) -> str:
    """A float flag value without a trailing '.0' where it is whole (Megatron reads it with float())."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def rope_args(model, notes: list[str]) -> list[str]:
    """Rotary flags: base, partial rotation, and the context-extension scaling (Llama 3's bands,
    YaRN for MLA through MLATransformerConfig's fields or for GQA through GPTModel's yarn branch,
    linear interpolation); what Megatron-LM cannot express is a note."""
    r = model.rope
    a = model.attention
    mla = a.kind == "mla"
    if r is None:
        return []  # not stated (a model YAML without rope): Megatron's defaults
    args: list[str] = []
    if float(r.theta).is_integer():
        args += ["--rotary-base", str(int(r.theta))]  # argparse type=int
    else:
        notes.append(f"rope_theta {r.theta} is not an integer; Megatron's --rotary-base takes one (default 10000 kept)")
    if r.percent != 1.0:
        args += ["--rotary-percent", repr(float(r.percent))]
    if r.scaling == "llama3":
        args += ["--use-rope-scaling", "--rope-scaling-factor", _number(r.factor or 8.0)]
        fixed = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        off = [f"{k} {getattr(r, k)}" for k, v in fixed.items() if getattr(r, k) is not None and getattr(r, k) != v]
        if off:
            notes.append("Llama 3 RoPE scaling with " + ", ".join(off) + ": Megatron's apply_rope_scaling fixes "
                         "low_freq_factor 1, high_freq_factor 4 and 8192 original positions")
    elif r.scaling == "yarn":
        args += ["--rotary-scaling-factor", _number(r.factor or 1.0)]
        if r.mscale is not None:
            args += ["--mscale", _number(r.mscale)]
        if r.mscale_all_dim is not None:
            args += ["--mscale-all-dim", _number(r.mscale_all_dim)]
        if mla:
            # MLATransformerConfig reads original_max_position_embeddings, beta_fast and beta_slow
            # from no flag: its defaults (4096, 32, 1) stand.
            args += ["--rope-type", "yarn"]
            fixed = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}
            off = [f"{k} {getattr(r, k):g}" for k, v in fixed.items() if getattr(r, k) is not None and getattr(r, k) != v]
            if off:
                notes.append("YaRN " + ", ".join(off) + ": MLATransformerConfig takes these from no flag (its "
                             "defaults 4096, 32, 1 stand)")
        else:
            if r.original_max_position_embeddings is not None:
                args += ["--yarn-original-max-position-embeddings", str(r.original_max_position_embeddings)]
            if r.beta_fast is not None:
                args += ["--yarn-beta-fast", _number(r.beta_fast)]
            if r.beta_slow is not None:
                args += ["--yarn-beta-slow", _number(r.beta_slow)]
            if r.truncate is False:
                args += ["--no-yarn-correction-range-round-to-int"]
    elif r.scaling == "linear":
        if r.factor is not None and float(r.factor).is_integer():
            args += ["--rotary-seq-len-interpolation-factor", str(int(r.factor))]  # argparse type=int
        else:
            notes.append(f"linear RoPE scaling factor {r.factor}: --rotary-seq-len-interpolation-factor takes an integer")
    elif mla:
        args += ["--rope-type", "rope"]
    if r.local_theta is not None:
        notes.append(f"the sliding-window layers' RoPE base {r.local_theta:g}" + (" (without the scaling)" if
                     r.scaling != "none" else "") + " has no Megatron-LM flag: one base and one scaling for every layer")
    return args


def _not_expressible(model, notes: list[str]) -> None:
    """Architecture details planner models that megatron-core 0.19.2's command line cannot state."""
    a = model.attention
    if model.ffn.activation == "geglu":
        notes.append("GeGLU MLP: Megatron-LM has no flag for a GELU-gated MLP (--quick-geglu is another GELU); "
                     "--swiglu builds the same three matrices with SiLU")
    if model.post_norms:
        notes.append("post-attention and post-MLP norms (Gemma's four norms per layer) have no Megatron-LM flag")
    if model.logit_softcap is not None:
        notes.append(f"final logit soft-capping ({model.logit_softcap:g}) has no Megatron-LM flag")
    if model.attn_logit_softcap is not None:
        notes.append(f"attention logit soft-capping ({model.attn_logit_softcap:g}) has no Megatron-LM flag")
    if a.kind == "gqa":
        if a.softmax_scale_dim is not None:
            notes.append(f"attention scale 1/sqrt({a.softmax_scale_dim}) (query_pre_attn_scalar): TransformerConfig's "
                         "softmax_scale has no command-line flag (1/sqrt(kv-channels) is used)")
        if a.attention_chunk is not None:
            notes.append(f"chunked attention ({a.attention_chunk}-token chunks on the RoPE layers) has no Megatron-LM "
                         "flag: those layers attend globally")


def window_args(model) -> list[str]:
    """Sliding-window flags: --window-size as Transformer Engine's (left, right) window, W-1
    earlier keys for config.json's W (a query attends itself and W-1 before it; Megatron-Bridge's
    Gemma 3 and gpt-oss providers map it so), and which layers slide (--window-attn-skip-freq: N
    gives SWA iff layer_number % N != 0, counted from 1; a list gives 1 = SWA)."""
    a = model.attention
    if a.kind != "gqa" or a.sliding_window is None:
        return []
    args = ["--window-size", f"{a.sliding_window - 1},0"]
    flags = [1 if a.local_layer(i) else 0 for i in range(model.num_layers)]
    if all(flags):
        return args
    n = a.global_every or (2 if a.sliding_window_every == 2 else None)
    if n is not None and flags == [1 if (i + 1) % n else 0 for i in range(model.num_layers)]:
        return args + ["--window-attn-skip-freq", str(n)]
    return args + ["--window-attn-skip-freq", _pattern(flags)]


def activation_args(model) -> list[str]:
    """The MLP's activation flags. A clamped gated unit is gpt-oss's: Megatron-Bridge's
    GPTOSSProvider builds it as quick_gelu, gated, glu_linear_offset 1.0 and
    activation_func_clamp_value 7.0, the three flags below (core_transformer_config_from_args maps
    --quick-geglu to the gated quick_gelu); the grouped experts fuse it
    (weighted_bias_quick_geglu_impl), the dense MLP fuses only GELU and SwiGLU (mlp.py), so a dense
    or shared-expert MLP runs it unfused."""
    f = model.ffn
    if not f.gated:
        return []
    if f.clamp is None:
        return ["--swiglu"]
    args = ["--quick-geglu", "--glu-linear-offset", "1.0", "--activation-func-clamp-value", _number(f.clamp)]
    if any(k == "dense" for k in model.layer_kinds) or (model.moe is not None and model.moe.shared_hidden):
        args += ["--no-bias-gelu-fusion"]  # a dense or shared-expert MLP: mlp.py refuses to fuse quick_gelu
    return args


def architecture_args(model, job, notes: list[str] | None = None) -> list[str]:
    """Model-shape flags: the same for every plan of a model. Details Megatron-LM's command line
    cannot state are appended to ``notes``."""
    notes = notes if notes is not None else []
    a = model.attention
    args = [
        "--num-layers", str(model.num_layers),
        "--hidden-size", str(model.hidden_size),
        "--ffn-hidden-size", str(model.ffn.hidden_size),
        "--num-attention-heads", str(a.num_heads),
    ]
    if a.kind == "mla":
        args += ["--multi-latent-attention"]
        if a.q_lora_rank:
            args += ["--q-lora-rank", str(a.q_lora_rank)]
        args += [
            "--kv-lora-rank", str(a.kv_lora_rank),
            # Megatron's qk_head_dim is the no-rope part; qk_pos_emb_head_dim the rotary part.
            "--qk-head-dim", str(a.qk_nope_head_dim),
            "--qk-pos-emb-head-dim", str(a.qk_rope_head_dim),
            "--v-head-dim", str(a.v_head_dim),
            "--kv-channels", str(a.v_head_dim),
            # The RMSNorms on the query and key/value latents (q_a_layernorm, kv_a_layernorm) that
            # planner counts: MLA builds them only with --qk-layernorm.
            "--qk-layernorm",
        ]
    else:
        args += ["--kv-channels", str(a.head_dim)]
        if a.num_kv_heads != a.num_heads:
            # Without --group-query-attention Megatron ignores --num-query-groups (MHA).
            args += ["--group-query-attention", "--num-query-groups", str(a.num_kv_heads)]
        if a.qk_norm:
            args += ["--qk-layernorm"]
        if a.qk_l2_norm:
            args += ["--qk-l2-norm"]
        if a.qkv_bias:
            args += ["--add-qkv-bias"]
        if a.sinks:
            args += ["--softmax-type", "learnable"]  # gpt-oss's learned per-head sinks
        args += window_args(model)
        if a.no_rope_every is not None:
            flags = [0 if a.uses_rope(i) else 1 for i in range(model.num_layers)]
            every = model.num_layers % a.no_rope_every == 0  # TransformerConfig: an int N must divide the layers
            args += ["--no-rope-freq", str(a.no_rope_every) if every else _pattern(flags)]
    args += activation_args(model)
    args += ["--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"]
    yarn_gqa = a.kind == "gqa" and model.rope is not None and model.rope.scaling == "yarn"
    args += ["--position-embedding-type", "learned_absolute" if model.position_embedding == "learned" else
             "yarn" if yarn_gqa else "rope"]
    if model.position_embedding == "rope":
        args += rope_args(model, notes)
    _not_expressible(model, notes)
    if not model.tie_embeddings:
        args += ["--untie-embeddings-and-output-weights"]


    has_bias = model.ffn.bias or (a.kind == "gqa" and a.output_bias) or (model.moe is not None and (
        model.moe.expert_bias or model.moe.router_linear_bias))
    if not has_bias:
        args += ["--disable-bias-linear"]  # Megatron's default adds biases to every linear
    # Megatron defaults both dropouts to 0.1; the model's values are what planner's memory model uses.
    args += ["--attention-dropout", repr(float(model.attention_dropout)),
             "--hidden-dropout", repr(float(model.hidden_dropout))]
    args += ["--vocab-size", str(model.vocab_size)]
    max_pos = max(model.max_position_embeddings or job.seq_len, job.seq_len)
    args += ["--seq-length", str(job.seq_len), "--max-position-embeddings", str(max_pos)]
    if model.mtp_layers:
        args += ["--mtp-num-layers", str(model.mtp_layers)]
    return args


def moe_args(model, plan) -> list[str]:
    m = model.moe
    if m is None:
        return []
    args = [
        "--num-experts", str(m.num_experts),
        "--moe-ffn-hidden-size", str(m.expert_hidden_size),
        "--moe-router-topk", str(m.top_k),
        "--moe-layer-freq", _layer_freq(model),
    ]
    if m.shared_hidden:
        args += ["--moe-shared-expert-intermediate-size", str(m.shared_hidden)]
    args += ["--moe-router-score-function", m.score_function]
    if m.router_bias:
        args += ["--moe-router-enable-expert-bias"]
    if m.num_groups and m.group_top_k:
        args += ["--moe-router-num-groups", str(m.num_groups), "--moe-router-group-topk", str(m.group_top_k)]
    if m.routed_scaling_factor is not None:
        args += ["--moe-router-topk-scaling-factor", repr(float(m.routed_scaling_factor))]
    if m.top_k == 1 and m.score_function == "softmax":
        args += ["--moe-router-pre-softmax"]  # TransformerConfig: topk 1 with softmax needs it
    # fp32 routing: TransformerConfig warns for >= 32 experts without it.
    args += ["--moe-router-dtype", "fp32", "--moe-grouped-gemm", "--moe-permute-fusion"]
    dispatcher = plan.dispatcher or "alltoall"
    if dispatcher == "alltoall":
        args += ["--moe-token-dispatcher-type", "alltoall"]
    else:
        args += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", dispatcher]
    return args


def layout_args(model, plan) -> tuple[list[str], str]:
    """Pipeline layout flags per launchers.md §6 rec. 1: nothing (or only the VPP count) for the
    even split; --decoder-first/last-pipeline-num-layers (+ --num-virtual-stages-per-pipeline-rank)
    when the layout is exactly such an uneven split; --pipeline-model-parallel-layout otherwise.
    Returns the flags and the style name."""
    pp, vpp = plan.pp, plan.vpp
    if pp == 1:
        return [], "none"
    vpp_flag = ["--num-virtual-stages-per-pipeline-rank", str(vpp)] if vpp > 1 else []
    try:
        even = even_layout_symbols(model, pp, vpp)
    except PlanRuleError:
        even = None
    syms = tuple(parse_layout(plan.layout)) if plan.layout else even
    if syms is None or syms == even:  # None: no layout given and no even split either
        return vpp_flag, "even"
    per_rank = [sum(s.count("t") for s in syms[r::pp]) for r in range(pp)]
    first, last = per_rank[0], per_rank[-1]
    for f, la in ((first, last), (first, None), (None, last)):
        try:
            if uneven_layout_symbols(model, pp, vpp, f, la) == syms:
                args = []
                if f is not None:
                    args += ["--decoder-first-pipeline-num-layers", str(f)]
                if la is not None:
                    args += ["--decoder-last-pipeline-num-layers", str(la)]
                return args + vpp_flag, "first-last"
        except PlanRuleError:
            continue
    # The layout flag sets VPP itself (stages / PP); giving a VPP flag too is an error (validate_args).
    return ["--pipeline-model-parallel-layout", format_layout(syms)], "layout"


def parallel_args(model, plan, deg) -> list[str]:
    args = [
        "--tensor-model-parallel-size", str(plan.tp),
        "--pipeline-model-parallel-size", str(plan.pp),
        "--context-parallel-size", str(plan.cp),
    ]
    if model.is_moe:
        args += ["--expert-model-parallel-size", str(plan.ep), "--expert-tensor-parallel-size", str(deg.etp)]
    if plan.tp > 1:
        args += ["--sequence-parallel"]  # planner pairs TP with SP; validate_args drops SP at TP=1
    args += layout_args(model, plan)[0]
    if plan.ep_overlap:
        args += ["--overlap-moe-expert-parallel-comm"]  # Megatron's combined 1F1B (TransformerConfig)
    if plan.ep_overlap == "wgrad":
        args += ["--delay-wgrad-compute"]  # the experts' weight gradient after the backward dispatch
    return args


def memory_args(model, plan) -> list[str]:
    """Recompute and offload."""
    rc = plan.recompute
    args: list[str] = []
    if rc.kind == "selective":
        # TransformerConfig: selective takes no method and no layer count.
        args += ["--recompute-granularity", "selective", "--recompute-modules", *rc.modules]
    elif rc.kind == "full":
        if rc.layers is None:
            # uniform with groups of one layer: every layer keeps only its input.
            args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
        else:
            # block: the first N layers of each (virtual) stage are recomputed.
            args += ["--recompute-granularity", "full", "--recompute-method", "block",
                     "--recompute-num-layers", str(rc.layers)]
    if plan.offload.optimizer:
        # validate_args: --optimizer-cpu-offload needs --use-precision-aware-optimizer.
        args += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0", "--use-precision-aware-optimizer"]
    if plan.offload.activations:
        args += ["--fine-grained-activation-offloading", "--offload-modules", *megatron_offload_modules(model, plan)]
    return args


def precision_args(hw, plan, job) -> list[str]:
    args = ["--bf16"]
    if plan.precision == "fp8":  # the setup's plan is canonical
        args += ["--fp8-format", "e4m3", "--fp8-recipe", hw.fp8_recipe]
    if plan.precision == "nvfp4":  # Transformer Engine's NVFP4BlockScaling (megatron/core/fp4_utils.py)
        args += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    if plan.param_gather == "fp8":
        args += ["--fp8-param-gather"]
    if plan.param_gather == "fp4":
        args += ["--fp4-param-gather"]
    if plan.grad_reduce == "bf16":
        args += ["--grad-reduce-in-bf16"]
    if plan.moments == "bf16":
        if not plan.offload.optimizer:
            args += ["--use-precision-aware-optimizer"]
        args += ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    return args


STATIC_MOE_ARGS = ("--moe-expert-rank-capacity-factor", "1.5", "--moe-paged-stash",
                   "--moe-paged-stash-buffer-size-factor-cuda", "1.2", "--use-transformer-engine-op-fuser")
"""Static expert shapes for a full-iteration graph of dropless MoE, as Megatron-Bridge 0.6.0's
HybridEP full-iteration recipes set them (src/megatron/bridge/perf_recipes/deepseek/common.py:
moe_expert_rank_capacity_factor 1.5, moe_paged_stash with a CUDA buffer 1.2 x the balanced load,
use_transformer_engine_op_fuser, which TransformerConfig requires with the rank capacity under
hybridep). Tokens over a rank's capacity are dropped by hybridep (TransformerConfig docstring)."""


def cuda_graph_args(model, plan) -> list[str]:
    """The plan's cuda_graphs as Megatron flags (megatron/training/arguments.py, megatron-core
    0.19): scoped graphs through Transformer Engine (--cuda-graph-impl transformer_engine, the
    modules with --cuda-graph-modules; none named captures the whole layer), the full iteration
    with --cuda-graph-impl full_iteration and --no-check-for-nan-in-loss-and-grad, which
    validate_args requires with it (on MoE models with :data:`STATIC_MOE_ARGS`)."""
    g = plan.cuda_graphs
    if g.kind == "full_iteration":
        static = list(STATIC_MOE_ARGS) if model.is_moe else []
        return ["--cuda-graph-impl", "full_iteration", "--no-check-for-nan-in-loss-and-grad", *static]
    if g.kind == "scoped":
        return ["--cuda-graph-impl", "transformer_engine"] + (["--cuda-graph-modules", *g.modules] if g.modules else [])
    return []


def sharding_args(plan, deg) -> list[str]:
    sh = plan.sharding
    if sh.kind == "ddp":
        return ["--overlap-grad-reduce"]
    if sh.kind == "dist_opt":
        return ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    strategy = "optim_grads" if sh.kind == "zero2" else "optim_grads_params"
    # Megatron FSDP: validate_args forces the distributed optimizer and requires fsdp_dtensor ckpts.
    args = ["--use-megatron-fsdp", "--use-distributed-optimizer", "--data-parallel-sharding-strategy", strategy,
            "--ckpt-format", "fsdp_dtensor"]
    if sh.kind == "hsdp":
        instances = deg.dp * deg.cp // sh.group
        if instances > 1:
            args += ["--num-distributed-optimizer-instances", str(instances)]
    return args + ["--overlap-grad-reduce", "--overlap-param-gather"]


def environment(hw, plan) -> tuple[dict[str, str], dict[str, str]]:
    env: dict[str, str] = {}
    why: dict[str, str] = {}
    fsdp = plan.sharding.kind in ("fsdp", "zero2", "hsdp")
    pre_blackwell = hw.generation in ("ampere", "hopper")
    if (plan.tp > 1 or plan.cp > 1) and pre_blackwell and not fsdp:
        if plan.ep_overlap:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"
            why["CUDA_DEVICE_MAX_CONNECTIONS"] = (
                "EP A2A overlap wants more than one hardware queue; validate_args only warns with TP/CP>1")
        else:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
            why["CUDA_DEVICE_MAX_CONNECTIONS"] = "validate_args asserts it for TP/CP > 1 before Blackwell"
    if plan.offload.activations:
        env["NVTE_CPU_OFFLOAD_V1"] = "1"
        why["NVTE_CPU_OFFLOAD_V1"] = "validate_args requires it for fine-grained activation offloading with TE >= 2.10"
    return env, why


def megatron_launch(setup, *, nproc_per_node: int | None = None) -> MegatronLaunch:
    """All flags for a resolved setup; raises PlanRuleError naming the rule Megatron would break."""
    check_with(own_violations, "Megatron-LM", setup)
    model, hw, job, plan, deg = setup.model, setup.hw, setup.job, setup.plan, setup.deg
    nproc = gpus_per_node(hw, job.gpus, nproc_per_node)
    env, why = environment(hw, plan)

    alloc_env, alloc_why = allocator_environment(setup)
    env, why = {**env, **alloc_env}, {**why, **alloc_why}
    launch = MegatronLaunch(env=env, env_notes=why, nproc_per_node=nproc, nnodes=job.gpus // nproc)
    launch.groups = [
        ("MODEL_ARGS", architecture_args(model, job, launch.notes)),
        ("MOE_ARGS", moe_args(model, plan)),
        ("PARALLEL_ARGS", parallel_args(model, plan, deg)),
        ("MEMORY_ARGS", memory_args(model, plan)),
        ("PRECISION_ARGS", precision_args(hw, plan, job)),
        ("CUDA_GRAPH_ARGS", cuda_graph_args(model, plan)),
        ("OPTIMIZER_ARGS", sharding_args(plan, deg) + ["--optimizer", "adam"]),
        ("TRAINING_ARGS", [
            "--micro-batch-size", str(plan.mbs),
            "--global-batch-size", str(job.global_batch),
            "--train-iters", "1000",
            "--lr", "1.0e-4", "--min-lr", "1.0e-5", "--lr-decay-style", "cosine", "--lr-warmup-iters", "100",
            "--weight-decay", "0.1", "--clip-grad", "1.0", "--log-interval", "1",
        ]),
        ("DATA_ARGS", ["--mock-data", "--tokenizer-type", "NullTokenizer"]),
    ]
    launch.groups = [(n, a) for n, a in launch.groups if a]
    return launch


_SHELL_VAR = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*")


def _quote(token: str) -> str:
    # "$VAR" (an ASCII variable name, nothing else) stays expandable; everything else is
    # single-quoted where the shell needs it, so no value can run a command or split a word.
    if _SHELL_VAR.fullmatch(token):
        return f'"{token}"'
    return shlex.quote(token)


def _env_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"not an environment variable name: {name!r}")
    return name


def _bash_array(name: str, args: list[str]) -> str:
    """NAME=( ... ) with one flag and its values per line."""
    lines: list[str] = []
    for a in args:
        if a.startswith("--") or not lines:
            lines.append(_quote(a))
        else:
            lines[-1] += " " + _quote(a)
    body = "\n".join("    " + ln for ln in lines)
    return f"{name}=(\n{body}\n)"


def render_script(setup, launch: MegatronLaunch, plan_text: str, pred_lines: list[str], version: str) -> str:
    about = [
        "# Flags as in megatron-core 0.19.2. Run on every node with NODE_RANK, MASTER_ADDR and MASTER_PORT",
        "# set by your scheduler, and MEGATRON_LM pointing at a Megatron-LM checkout. DATA_ARGS uses mock",
        "# data: put your --data-path and tokenizer there; TRAINING_ARGS holds placeholder hyperparameters.",
    ]
    out = script_opening(setup, f"Megatron-LM launch script written by planner {_c(version)} "
                         "(planner export --format megatron).", plan_text, pred_lines, about, launch.notes,
                         launch.nnodes, 6000, "MEGATRON_LM")
    for k, v in launch.env.items():
        out.append(f"# {_c(launch.env_notes.get(k, ''))}")
        out.append(f"export {_env_name(k)}={shlex.quote(v)}")
    if launch.env:
        out.append("")
    if "CUDA_DEVICE_MAX_CONNECTIONS" not in launch.env and setup.plan.sharding.kind in ("fsdp", "zero2", "hsdp"):
        out += ["# Megatron FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is unset or > 1.",
                "unset CUDA_DEVICE_MAX_CONNECTIONS", ""]
    out.append(_bash_array("DISTRIBUTED_ARGS", [
        "--nproc-per-node", str(launch.nproc_per_node), "--nnodes", "$NNODES", "--node-rank", "$NODE_RANK",
        "--master-addr", "$MASTER_ADDR", "--master-port", "$MASTER_PORT",
    ]))
    for name, args in launch.groups:
        out.append(_bash_array(name, args))
    arrays = " ".join(f'"${{{n}[@]}}"' for n, _ in launch.groups)
    out += ["", 'torchrun "${DISTRIBUTED_ARGS[@]}" "$MEGATRON_LM/pretrain_gpt.py" \\', f"    {arrays}", ""]
    return "\n".join(out)


def export_megatron(setup, *, predictions: dict | None = None, nproc_per_node: int | None = None) -> str:
    """The launch script text for a resolved setup."""
    launch = megatron_launch(setup, nproc_per_node=nproc_per_node)
    return render_script(setup, launch, setup.plan.to_string(), prediction_lines(predictions or {}), __version__)
