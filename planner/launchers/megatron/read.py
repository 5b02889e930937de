"""Read a Megatron-LM launch back into planner's terms: script -> the Megatron command -> flags ->
job, plan and model.

- :func:`job_from_script` is the one route from a launch script to a job: ``planner check
  --megatron-args`` and ``planner explain --megatron-args`` both call it, so they read the same
  model, hardware, job and plan from the same script.
- :func:`plan_from_megatron_args` reads the flags alone (job, plan, model hints, used / ignored /
  unknown flags), without choosing a model or hardware.
- :func:`read_script` finds the ``pretrain_*.py`` command a script starts, reading the script as
  bash would (:mod:`planner.launchers.bash`: quoting, variables, arrays, conditions, loops,
  ``printf -v``, ``eval``, ``bash -c`` and sbatch here-documents; nothing is executed), with the
  environment and torchrun options in force for it.
- :func:`parse_megatron_argv` splits the arguments with the arities of Megatron's own parser
  (:mod:`planner.launchers.megatron.flags`), as argparse does: a value never starts with '-'
  unless it is a negative number, so a flag whose value a script left empty is reported, never
  mistaken for the next flag.

Nothing is dropped silently: every flag ends up as used (it sets a plan, job or model value),
ignored (known not to change memory, time or validity: data, logging, learning rate...) or
unknown (listed: flags planner does not model, and options that are not Megatron 0.19.2 flags).
Variables the script uses but does not set, and command substitutions it would run, are listed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import PlannerError, PlanRuleError
from planner.files import MAX_SCRIPT_BYTES, read_text
from planner.launchers.bash import run_script
from planner.launchers.common import (
    export_canonical,
    header_disagreement,
    launch_hardware,
    launch_world,
    torchrun_options,
)
from planner.launchers.megatron.flags import CHOICES, FLAGS, NUMERIC
from planner.launchers.megatron.model import flag_int as _int
from planner.launchers.megatron.model import hint_mismatches, match_catalog_model, model_from_hints, model_hints
from planner.specs.catalog import load_model
from planner.specs.common import ascii_number
from planner.specs.job_input import resolve_job
from planner.specs.layout import format_layout, parse_layout, uneven_layout_symbols
from planner.specs.overrides import apply_overrides
from planner.specs.plan import RECOMPUTE_MODULES, Offload, Plan

if TYPE_CHECKING:
    from planner.specs.hardware import HardwareSpec
    from planner.specs.job import Job
    from planner.specs.model import ModelSpec
    from planner.specs.plan import Plan

# ---------------------------------------------------------------------------------------------
# the Megatron command of a script
# ---------------------------------------------------------------------------------------------



def _is_pretrain(word: str) -> bool:
    base = word.rsplit("/", 1)[-1]
    return base.startswith("pretrain_") and base.endswith(".py") and len(base) > 12


@dataclass
class ScriptCommand:
    argv: list[str]
    """The arguments after pretrain_*.py."""
    env: dict[str, str]
    launcher: dict[str, str]
    """torchrun options (dashes normalized: --nproc-per-node, --nnodes, ...)."""
    unresolved: list[str]
    script: str | None
    unknown: set[int] = field(default_factory=set)
    """Indices of argv words that hold an unresolved value."""
    not_run: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    line: int | None = None


def read_script(text: str, environ: dict[str, str] | None = None, args: list[str] | tuple = ()) -> ScriptCommand:
    """The pretrain_*.py arguments of a launch script (or the text itself when it is a bare
    argument list), with the environment and torchrun options in force for that command.
    ``environ`` and ``args`` are the script's environment and its $1, $2, ..."""
    run = run_script(text, environ=environ, args=args)
    notes = list(run.notes)
    found = [(c, next(i for i, w in enumerate(c.argv) if _is_pretrain(w)))
             for c in run.commands if any(_is_pretrain(w) for w in c.argv)]
    if not found:
        bare = [c for c in run.commands if c.argv and c.argv[0].startswith("-")]
        if bare:
            argv = [w for c in bare for w in c.argv]
            unknown = set()
            k = 0
            for c in bare:
                unknown |= {k + i for i, u in enumerate(c.unknown) if u}
                k += len(c.argv)
            return ScriptCommand(argv, dict(bare[-1].env), {}, run.unresolved, None, unknown, run.not_run, notes)
        if run.stopped is not None:
            raise run.stopped
        if run.exit is not None:
            raise PlannerError(f"The script exits at line {run.exit[0]} (status {run.exit[1]}) before it runs a "
                               "Megatron command (pretrain_*.py).",
                               hint="Give the script the arguments and environment it checks for (--script-args, "
                               "--script-env), or give the Megatron arguments as a plain list.")
        raise PlannerError(
            "Found no Megatron command in the file: no command it runs starts a pretrain_*.py script, and the file "
            "is not a bare argument list (starting with --flags).",
            hint="Give the launch script that runs pretrain_gpt.py, or a file holding its arguments.")
    cmd, idx = found[0]
    if len(found) > 1:
        notes.append(f"the script starts {len(found)} Megatron commands; planner reads the first (line {cmd.line})")
    if run.stopped is not None:
        notes.append(f"after the Megatron command: {run.stopped.message}")
    if cmd.where:
        notes.append(f"the Megatron command runs inside {cmd.where}")
    launcher = torchrun_options(cmd.argv[:idx])
    unknown = {i - idx - 1 for i, u in enumerate(cmd.unknown) if u and i > idx}
    return ScriptCommand(cmd.argv[idx + 1:], dict(cmd.env), launcher, run.unresolved, cmd.argv[idx], unknown,
                         run.not_run, notes, cmd.line)


# ---------------------------------------------------------------------------------------------
# argument parsing with Megatron's own arities
# ---------------------------------------------------------------------------------------------


@dataclass
class ParsedArgs:
    values: dict[str, Any]
    """argparse dest -> value (str, list[str] or True/False for switches)."""
    given: dict[str, str]
    """dest -> the option string that set it."""
    not_megatron: list[str]
    """Options that are not megatron-core 0.19.2 flags (with the values that follow them), and stray words."""
    problems: list[str] = field(default_factory=list)
    """Flags argparse would refuse (a value missing) and words holding an unresolved value, each with why."""


def _is_value(tok: str) -> bool:
    """argparse takes a token as a value unless it starts with '-' and is not a negative number."""
    if not tok.startswith("-") or tok == "-":
        return True
    body = tok[1:]
    return body.replace(".", "", 1).isdigit() or (body[:1] == "." and body[1:].isdigit())


def _value_problem(opt: str, value: str) -> str | None:
    """Why Megatron's argparse would refuse ``value`` for ``opt`` (a choice it does not list, a
    number int() or float() cannot read), or None."""
    allowed = CHOICES.get(opt)
    if allowed is not None and value not in allowed:
        return (f"{opt} {value} (invalid choice: megatron-core 0.19.2 accepts {', '.join(allowed)}; argparse "
                "refuses it)")
    kind = NUMERIC.get(opt)
    if kind is not None:
        try:
            ascii_number(value, int if kind == "int" else float)
        except ValueError:
            if not value.isascii():  # argparse's int() would read it; planner takes ASCII digits only
                return f"{opt} {value} (not a number written in ASCII digits 0-9)"
            return f"{opt} {value} (not {'an integer' if kind == 'int' else 'a number'}: argparse refuses it)"
    return None


def parse_megatron_argv(argv: list[str], unknown: set[int] | frozenset = frozenset()) -> ParsedArgs:
    """``unknown``: indices of words holding an unresolved value (a '$VAR' standing alone is not
    mistaken for an option and is reported by its name). Values are checked against the parser's
    choices and numeric types (:data:`~planner.launchers.megatron.flags.CHOICES`, ``NUMERIC``);
    a value the script leaves to its environment is not."""
    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    bad: list[str] = []
    problems: list[str] = []

    def check(opt: str, vals: list[str], first: int) -> None:
        for k, val in enumerate(vals):
            if first + k in unknown or "$" in val or "`" in val:
                continue
            why = _value_problem(opt, val)
            if why:
                problems.append(why)

    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            if i - 1 in unknown:
                problems.append(f"{tok} (unresolved: whatever it holds is not read)")
            else:
                bad.append(tok)
            continue
        opt, eq, inline = tok.partition("=")
        if opt not in FLAGS:
            vals = [inline] if eq else []
            while i < len(argv) and _is_value(argv[i]):
                vals.append(argv[i])
                i += 1
            bad.append(opt + ("" if not vals else " " + " ".join(vals)))
            continue
        dest, arity = FLAGS[opt]
        if arity == 0:
            # store_true / store_false: the dest's value is whether the switch says "on".
            values[dest] = not opt.startswith(("--no-", "--disable-")) or dest.startswith(("no_", "disable_"))
            given[dest] = opt
            continue
        vals = [inline] if eq else []
        first = i - 1 if eq else i  # argv index of the first value (an inline one is the flag's word)
        if isinstance(arity, int):
            while len(vals) < arity and i < len(argv) and _is_value(argv[i]):
                vals.append(argv[i])
                i += 1
            if len(vals) < arity:
                nxt = f"the next word is {argv[i]}" if i < len(argv) else "it ends the command"
                problems.append(f"{opt} (expects {arity} value{'s' if arity > 1 else ''}, {nxt}: argparse "
                                "refuses it; an empty variable?)")
                continue
            values[dest] = vals[0] if arity == 1 else vals
        else:
            while i < len(argv) and _is_value(argv[i]) and (arity != "?" or not vals):
                vals.append(argv[i])
                i += 1
            if arity == "+" and not vals:
                problems.append(f"{opt} (expects at least one value: argparse refuses it)")
                continue
            values[dest] = vals if arity in ("+", "*") else (vals[0] if vals else True)
        check(opt, vals, first)
        given[dest] = opt
    return ParsedArgs(values, given, bad, problems)


# ---------------------------------------------------------------------------------------------
# flags -> plan, job, model hints
# ---------------------------------------------------------------------------------------------

# Megatron flags that do not change memory, step time or start-up validity (optimizer
# hyperparameters, data, tokenizer, logging, checkpoint paths, init, fault tolerance...).
_IGNORED_DESTS = {
    "train_iters", "train_samples", "lr", "min_lr", "lr_decay_style", "lr_decay_iters", "lr_decay_samples",
    "lr_warmup_iters", "lr_warmup_samples", "lr_warmup_fraction", "lr_warmup_init", "weight_decay",
    "start_weight_decay", "end_weight_decay", "weight_decay_incr_style", "clip_grad", "adam_beta1",
    "adam_beta2", "adam_eps", "sgd_momentum", "init_method_std", "seed", "log_interval", "save_interval",
    "eval_interval", "eval_iters", "save", "load", "data_path", "split", "vocab_file", "merge_file",
    "tokenizer_type", "tokenizer_model", "mock_data", "tensorboard_dir", "wandb_project", "wandb_exp_name",
    "wandb_save_dir", "log_throughput", "log_timers_to_tensorboard", "log_memory_to_tensorboard",
    "log_validation_ppl_to_tensorboard", "log_params_norm", "log_num_zeros_in_grad", "timing_log_level",
    "tensorboard_log_interval", "distributed_timeout_minutes", "exit_interval", "exit_duration_in_mins",
    "exit_signal_handler", "no_load_optim", "no_load_rng", "finetune", "use_checkpoint_args",
    "dist_ckpt_strictness", "ckpt_fully_parallel_load", "async_save", "use_persistent_ckpt_worker",
    "auto_detect_ckpt_format", "num_workers", "dataloader_type", "data_cache_path", "no_mmap_bin_files",
    "moe_aux_loss_coeff", "moe_router_load_balancing_type", "moe_router_bias_update_rate",
    "moe_z_loss_coeff", "moe_input_jitter_eps", "mtp_loss_scaling_factor", "norm_epsilon",
    "make_vocab_size_divisible_by",
    "manual_gc", "manual_gc_interval", "manual_gc_eval", "cross_entropy_loss_fusion",
    "cross_entropy_fusion_impl", "moe_permute_fusion", "moe_router_fusion", "apply_rope_fusion",
    "masked_softmax_fusion", "bias_gelu_fusion", "bias_swiglu_fusion", "bias_dropout_fusion",
    "gradient_accumulation_fusion", "attention_backend", "use_flash_attn", "transformer_impl",
    "attention_softmax_in_fp32", "accumulate_allreduce_grads_in_fp32", "check_for_nan_in_loss_and_grad",
    "ckpt_format", "no_persist_layer_norm", "profile", "profile_step_start", "profile_step_end",
    "use_pytorch_profiler", "profile_ranks", "eod_mask_loss", "reset_position_ids", "reset_attention_mask",
    "override_opt_param_scheduler", "use_checkpoint_opt_param_scheduler", "optimizer",
    "high_priority_stream_groups", "no_check_for_nan_in_loss_and_grad", "use_mcore_models",
    "moe_router_topk_scaling_factor", "moe_router_pre_softmax", "moe_router_dtype",
    "moe_router_score_function", "moe_router_enable_expert_bias", "moe_router_num_groups",
    "moe_router_group_topk", "micro_batch_size", "global_batch_size",
}

# Flags read into the plan, job or model hints. Flags that args_violations checks but planner does
# not model (--moe-shared-expert-overlap, --tp-comm-overlap, --cp-comm-type, --fp8-output-proj...)
# are not here: they are listed as "not modeled by planner" and still checked.
_USED_DESTS = {
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
    "num_virtual_stages_per_pipeline_rank", "num_layers_per_virtual_pipeline_stage",
    "pipeline_model_parallel_layout", "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
    "overlap_moe_expert_parallel_comm", "recompute_granularity", "recompute_method", "recompute_num_layers",
    "recompute_modules", "recompute_activations", "moe_layer_recompute", "optimizer_cpu_offload",
    "optimizer_offload_fraction", "use_precision_aware_optimizer", "fine_grained_activation_offloading",
    "offload_modules", "cpu_offloading_num_layers", "bf16", "fp16", "fp8", "fp8_recipe", "exp_avg_dtype",
    "exp_avg_sq_dtype", "grad_reduce_in_bf16", "fp8_param_gather", "fp4", "fp4_recipe", "fp4_param_gather",
    "use_distributed_optimizer", "use_megatron_fsdp", "data_parallel_sharding_strategy",
    "num_distributed_optimizer_instances", "overlap_grad_reduce", "overlap_param_gather",
    "cuda_graph_impl", "cuda_graph_modules", "cuda_graph_scope_deprecated", "enable_cuda_graph", "external_cuda_graph",
    "seq_length", "max_position_embeddings", "num_layers", "hidden_size", "ffn_hidden_size",
    "num_attention_heads", "group_query_attention", "num_query_groups", "kv_channels", "swiglu", "normalization",
    "position_embedding_type", "untie_embeddings_and_output_weights", "add_bias_linear", "add_qkv_bias",
    "qk_layernorm", "qk_l2_norm", "softmax_type", "window_size", "window_attn_skip_freq", "no_rope_freq",
    "attention_dropout", "hidden_dropout", "vocab_size", "multi_latent_attention",
    "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "mtp_num_layers",
    "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_layer_freq",
    "moe_shared_expert_intermediate_size", "moe_grouped_gemm", "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend", "moe_enable_deepep",
    "moe_router_score_function", "moe_router_enable_expert_bias", "moe_router_num_groups",
    "moe_router_group_topk", "moe_router_topk_scaling_factor", "moe_router_pre_softmax",
    "micro_batch_size", "global_batch_size", "ckpt_format", "padded_vocab_size",
    # the model's RoPE and MLP activation (planner.launchers.megatron.model rope_hints, _activation)
    "rotary_base", "rotary_percent", "rotary_scaling_factor", "rope_type", "mscale", "mscale_all_dim",
    "use_rope_scaling", "rope_scaling_factor", "yarn_original_max_position_embeddings", "yarn_beta_fast",
    "yarn_beta_slow", "yarn_correction_range_round_to_int", "rotary_seq_len_interpolation_factor",
    "use_rotary_position_embeddings", "quick_geglu", "glu_linear_offset", "activation_func_clamp_value",
    # ep_overlap=wgrad (read below); the experts through TE's op fuser (Assumptions.expert_op_fuser)
    "delay_wgrad_compute", "use_transformer_engine_op_fuser",
}

_STATIC_MOE_DESTS = {"moe_expert_rank_capacity_factor", "moe_paged_stash", "moe_paged_stash_buffer_size_factor_cuda",
                     "moe_paged_stash_buffer_size_factor_cpu"}
"""With --cuda-graph-impl full_iteration, part of the plan's cuda_graphs=full_iteration on a dropless MoE
model (the static expert shapes the writer writes with it: write.STATIC_MOE_ARGS; the host buffer's factor
as Assumptions.paged_stash_host_factor, assumptions_from_flags); elsewhere not modeled."""


@dataclass
class MegatronArgs:
    """What a Megatron command line says, in planner's terms.

    Iterating yields ``(job, plan, model_hints, unknown_flags)``."""

    job: dict
    """gpus (None when the world size is unknown), global_batch, seq_len, precisions."""
    plan: Any
    """planner.specs.plan.Plan (not yet canonical: canonicalize with the model and hardware)."""
    model_hints: dict
    """Architecture read from the flags (ModelSpec-like keys; see planner.launchers.megatron.model)."""
    unknown_flags: list[str]
    """Flags planner does not model, and options that are not Megatron 0.19.2 flags."""
    ignored_flags: list[str] = field(default_factory=list)
    """Megatron flags known not to change memory, time or validity (data, logging, lr, ...)."""
    unresolved: list[str] = field(default_factory=list)
    """$VARIABLES the script uses but does not set."""
    env: dict = field(default_factory=dict)
    launcher: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """Where the plan approximates what the flags say, and what the script reader could not decide."""
    values: dict = field(default_factory=dict)
    """argparse dest -> value, for args_violations."""
    used_flags: list[str] = field(default_factory=list)
    """Megatron flags that set a plan, job or model value."""
    not_run: list[str] = field(default_factory=list)
    """Command substitutions the script would run (planner never runs them)."""
    fp8: dict | None = None
    """{'format': ..., 'recipe': ...} when the flags train in FP8 (Megatron's default recipe: delayed)."""
    script_line: int | None = None
    refused: list[str] = field(default_factory=list)
    """Arguments Megatron's parser itself would refuse (a flag without its value...)."""
    gpus_source: str | None = None
    """Where ``job['gpus']`` came from (planner.launchers.common.launch_world), None when unknown."""

    def __iter__(self):
        return iter((self.job, self.plan, self.model_hints, self.unknown_flags))


class LayerCounts:
    """The two model attributes planner.specs.layout's uneven split needs."""

    def __init__(self, num_layers: int, mtp_layers: int):
        self.num_layers = num_layers
        self.mtp_layers = mtp_layers
        self.name = "the model"


def _layout_from_flags(v: dict, pp: int, vpp: int, notes: list[str]) -> str | None:
    L = _int(v, "num_layers")
    mtp = _int(v, "mtp_num_layers", 0) or 0
    if v.get("pipeline_model_parallel_layout"):
        return str(v["pipeline_model_parallel_layout"]).replace(" ", "")
    first = _int(v, "decoder_first_pipeline_num_layers")
    last = _int(v, "decoder_last_pipeline_num_layers")
    if (first is not None or last is not None) and L:
        try:
            return format_layout(uneven_layout_symbols(LayerCounts(L, mtp), pp, vpp, first, last))
        except PlanRuleError:
            return None  # args_violations names the uneven-PP rule the counts break
    emb, loss = bool(v.get("account_for_embedding_in_pipeline_split")), bool(v.get("account_for_loss_in_pipeline_split"))
    if (emb or loss) and L and pp > 1:
        total = L + emb + loss
        chunks = pp * vpp
        if total % chunks:
            return None  # the rule check reports it
        per = total // chunks
        counts = [per] * chunks
        if emb:
            counts[0] -= 1
        if loss:
            counts[-1] -= 1
        syms = ["t" * c for c in counts]
        syms[0] = "E" + syms[0]
        syms[-1] = syms[-1] + "m" * mtp + "L"
        notes.append("--account-for-embedding/loss-in-pipeline-split read as the equivalent layout")
        return format_layout(syms)
    return None


def pipeline_from_flags(v: dict, pp: int, notes: list[str]) -> tuple[int, str | None]:
    """(vpp, layout) the pipeline flags give, as Megatron's validate_args derives them:
    --num-layers-per-virtual-pipeline-stage divides the layers per stage counting the embedding and
    the loss when --account-for-embedding/loss-in-pipeline-split count them."""
    L = _int(v, "num_layers")
    vpp = 1
    if v.get("pipeline_model_parallel_layout"):
        vpp = max(len(parse_layout(str(v["pipeline_model_parallel_layout"]))) // pp, 1)
    elif v.get("num_virtual_stages_per_pipeline_rank"):
        vpp = _int(v, "num_virtual_stages_per_pipeline_rank")
    elif v.get("num_layers_per_virtual_pipeline_stage") and L:
        k = _int(v, "num_layers_per_virtual_pipeline_stage")
        total = L + bool(v.get("account_for_embedding_in_pipeline_split")) + bool(v.get("account_for_loss_in_pipeline_split"))
        if total % pp == 0 and (total // pp) % k == 0:
            vpp = (total // pp) // k
    layout = _layout_from_flags(v, pp, vpp, notes) if pp > 1 or v.get("pipeline_model_parallel_layout") else None
    return vpp, layout


def selective_recompute(mods: list[str], flag: str, unknown: list[str]) -> str:
    """The plan's recompute for Megatron-Core's selective recompute of ``mods`` (what
    --recompute-modules gives; Megatron-Bridge passes model.recompute_modules to the same
    TransformerConfig): the modules planner models joined by '+', each other one added to
    ``unknown`` under ``flag``."""
    kept = [m for m in mods if m in RECOMPUTE_MODULES]
    unknown += [f"{flag} {m} (not modeled by planner)" for m in mods if m not in kept]
    return "+".join(kept) if kept else "none"


def full_recompute(method, n: int | None, notes: list[str]) -> str:
    """The plan's recompute for Megatron-Core's full recompute with ``method`` and ``n`` layers
    (--recompute-method / --recompute-num-layers; Bridge's model.recompute_method and
    model.recompute_num_layers): block recompute of N layers per stage is 'full:N'; otherwise
    every layer, uniform groups of more than one layer noted as modeled per layer."""
    if method == "block" and n is not None:
        return f"full:{n}"
    if method == "uniform" and n and n > 1:
        notes.append(f"full recompute in uniform groups of {n} layers modeled as per-layer full recompute")
    return "full"


def _needs_layer_count(v: dict, pp: int) -> bool:
    """Whether the pipeline flags need --num-layers, which the flags lack (a launch whose model
    comes from elsewhere, e.g. a Megatron-Bridge recipe's model provider)."""
    return (_int(v, "num_layers") is None and pp > 1 and not v.get("pipeline_model_parallel_layout") and any(
        v.get(k) for k in ("num_layers_per_virtual_pipeline_stage", "decoder_first_pipeline_num_layers",
                           "decoder_last_pipeline_num_layers", "account_for_embedding_in_pipeline_split",
                           "account_for_loss_in_pipeline_split")))


def plan_from_megatron_args(text_or_argv: str | list[str], *, gpus: int | None = None,
                            environ: dict[str, str] | None = None, args: list[str] | tuple = ()) -> MegatronArgs:
    """Read a Megatron launch script (text) or argument list into planner terms.

    ``gpus`` overrides the world size (otherwise torchrun's --nproc-per-node x --nnodes, or
    WORLD_SIZE from the script, or None); ``environ`` and ``args`` are the script's environment
    and positional arguments."""
    if isinstance(text_or_argv, str):
        cmd = read_script(text_or_argv, environ, args)
    else:
        cmd = ScriptCommand(list(text_or_argv), {}, {}, [], None)
    parsed = parse_megatron_argv(cmd.argv, cmd.unknown)
    v = parsed.values
    notes: list[str] = list(cmd.notes)
    unknown = [f"{f} (not a megatron-core 0.19.2 flag)" for f in parsed.not_megatron] + parsed.problems
    ignored, used = [], []
    for dest, opt in parsed.given.items():
        if dest in _USED_DESTS or (dest in _STATIC_MOE_DESTS and v.get("cuda_graph_impl") == "full_iteration"):
            used.append(opt)
        elif dest in _IGNORED_DESTS or dest.startswith(("log_", "wandb_", "tensorboard_", "ckpt_", "data_", "eval_")):
            ignored.append(opt)
        else:
            unknown.append(f"{opt} (not modeled by planner)")

    # ---- world size -------------------------------------------------------------------------
    world, world_source = gpus, "--gpus" if gpus is not None else None
    if world is None:
        world, world_source = launch_world(cmd.launcher, cmd.env, text_or_argv if isinstance(text_or_argv, str) else "")

    tp = _int(v, "tensor_model_parallel_size", 1)
    pp = _int(v, "pipeline_model_parallel_size", 1)
    cp = _int(v, "context_parallel_size", 1)
    ep = _int(v, "expert_model_parallel_size", 1)
    etp = _int(v, "expert_tensor_parallel_size")
    mbs = _int(v, "micro_batch_size", 1)
    if v.get("micro_batch_size") is None:
        # Megatron has no default here: TrainingConfig.micro_batch_size is None and validate_args
        # asserts it is set (arguments.py, core_v0.19.0).
        notes.append("--micro-batch-size not given: Megatron's validate_args asserts it is set, so this launch does "
                     "not start as written; read as 1")
    _int(v, "num_layers")  # refused here when not an integer; the layer count is read with the model

    # ---- virtual pipeline --------------------------------------------------------------------
    vpp, layout = pipeline_from_flags(v, pp, notes)

    # ---- recompute ---------------------------------------------------------------------------
    gran = v.get("recompute_granularity")
    if v.get("recompute_activations"):
        gran = "selective"
    recompute = "none"
    if gran == "selective":
        mods = list(v.get("recompute_modules") or ["core_attn"])
        if v.get("moe_layer_recompute") and "moe" not in mods:
            mods.append("moe")
        recompute = selective_recompute(mods, "--recompute-modules", unknown)
    elif gran == "full":
        recompute = full_recompute(v.get("recompute_method"), _int(v, "recompute_num_layers"), notes)
    elif v.get("moe_layer_recompute"):
        recompute = "moe"

    # ---- offload, precision, moments ---------------------------------------------------------
    opt_off = bool(v.get("optimizer_cpu_offload"))
    if opt_off and _fraction(v.get("optimizer_offload_fraction")) < 1.0:
        notes.append(f"--optimizer-offload-fraction {v['optimizer_offload_fraction']} modeled as offloading all of it")
    act_off = bool(v.get("fine_grained_activation_offloading")) or (_int(v, "cpu_offloading_num_layers", 0) or 0) > 0
    if _int(v, "cpu_offloading_num_layers", 0):
        notes.append("--cpu-offloading-num-layers (layer-level offload) modeled as offload=activations")
    offload = str(Offload(optimizer=opt_off, activations=act_off))
    # Without --bf16 or --fp16 Megatron-LM trains in fp32: validate_args sets params_dtype =
    # torch.float and changes it only for those two switches (megatron/training/arguments.py,
    # core_v0.19.0). --fp8-format runs FP8 GEMMs over whichever of them the script chose.
    precision = "fp8" if v.get("fp8") else "bf16" if v.get("bf16") or v.get("fp16") else "fp32"
    # --fp4-format e2m1 runs the linear layers under Transformer Engine's NVFP4 recipe
    # (megatron/core/fp4_utils.py get_fp4_recipe: --fp4-recipe nvfp4, the default, is
    # NVFP4BlockScaling; 'custom' is a user quantizer factory planner cannot see).
    if v.get("fp4"):
        precision = "nvfp4"
        if v.get("fp4_recipe") == "custom":
            notes.append("--fp4-recipe custom: a user quantizer factory, modeled as the NVFP4 recipe")
    fp8 = {"format": v["fp8"], "recipe": v.get("fp8_recipe") or "delayed"} if v.get("fp8") else None
    if fp8 and not v.get("fp8_recipe"):
        notes.append("--fp8-recipe not given: Megatron's default is delayed scaling; planner models the hardware's FP8 "
                     "recipe (blockwise on Hopper, MXFP8 on Blackwell)")
    if v.get("fp16"):
        notes.append("--fp16 modeled as bf16 (same bytes)")
    moments = "bf16" if (v.get("exp_avg_dtype") == "bf16" and v.get("exp_avg_sq_dtype") == "bf16") else "fp32"
    if {v.get("exp_avg_dtype"), v.get("exp_avg_sq_dtype")} - {None, "fp32", "bf16"} or (
            moments == "fp32" and "bf16" in (v.get("exp_avg_dtype"), v.get("exp_avg_sq_dtype"))):
        notes.append("Adam moment dtypes other than both-fp32 or both-bf16 modeled as fp32")

    # ---- sharding ----------------------------------------------------------------------------
    instances = _int(v, "num_distributed_optimizer_instances", 1) or 1
    if v.get("use_megatron_fsdp"):
        strategy = v.get("data_parallel_sharding_strategy") or "optim_grads_params"
        sharding = _FSDP_STRATEGIES.get(strategy)
        if sharding is None:
            raise PlannerError(f"--data-parallel-sharding-strategy {strategy}: Megatron accepts "
                               + ", ".join(_FSDP_STRATEGIES) + ".")
        if strategy == "optim_grads_params" and instances > 1:
            if world and world % (tp * pp * cp) == 0 and (world // (tp * pp) // instances):
                sharding = f"hsdp:{world // (tp * pp) // instances}"
            else:
                notes.append("HSDP group size unknown without the world size: modeled as fsdp")
    elif v.get("use_distributed_optimizer"):
        sharding = "dist_opt"
        if instances > 1:
            notes.append(f"partial distributed optimizer ({instances} instances) modeled as dist_opt over all of DP")
    else:
        sharding = "ddp"

    grad_reduce = "bf16" if v.get("grad_reduce_in_bf16") else "fp32"
    # --fp8-param-gather without FP8 or without a sharded optimizer has no FP8 gather to model
    # (validate_args refuses the second: args_violations names it).
    param_gather = "fp8" if v.get("fp8_param_gather") and fp8 and sharding != "ddp" else "bf16"
    if v.get("fp8_param_gather") and not fp8:
        notes.append("--fp8-param-gather without --fp8-format: no FP8 weights to gather, modeled as bf16 gathers")
    if v.get("fp4_param_gather"):  # Megatron's fp4_param (training/arguments.py core_transformer_config_from_args)
        if precision == "nvfp4" and sharding != "ddp":
            param_gather = "fp4"
        else:
            notes.append("--fp4-param-gather without --fp4-format or a sharded optimizer: no NVFP4 weights to gather, "
                         "modeled as bf16 gathers")

    # ---- MoE dispatcher ----------------------------------------------------------------------
    dispatcher = None
    if v.get("num_experts") or v.get("moe_token_dispatcher_type"):
        kind = v.get("moe_token_dispatcher_type") or "allgather"
        if kind == "flex":
            dispatcher = "deepep" if v.get("moe_enable_deepep") else (v.get("moe_flex_dispatcher_backend") or "deepep")
            if dispatcher == "ncclep":
                notes.append("ncclep flex backend modeled as deepep")
                dispatcher = "deepep"
        elif kind == "alltoall":
            dispatcher = "alltoall"
        else:
            notes.append("allgather token dispatcher (Megatron's default) modeled as alltoall")
            dispatcher = "alltoall"

    plan_values = dict(
        cuda_graphs=cuda_graphs_from_flags(v),
        tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, sharding=sharding, recompute=recompute,
        offload=offload, precision=None if precision == "fp32" else precision, moments=moments, grad_reduce=grad_reduce, param_gather=param_gather,
        layout=layout, dispatcher=dispatcher,
        ep_overlap=("wgrad" if v.get("delay_wgrad_compute") else "on") if v.get("overlap_moe_expert_parallel_comm")
        else "off",
    )
    plan = Plan.from_mapping({k: val for k, val in plan_values.items() if val is not None})

    seq = _int(v, "seq_length")
    gbs = _int(v, "global_batch_size")
    if gbs is None and world and world % (tp * pp * cp) == 0:
        gbs = mbs * (world // (tp * pp * cp))  # validate_args's default: one micro-batch per DP rank
    job = {"gpus": world, "global_batch": gbs, "seq_len": seq, "precisions": [precision]}

    return MegatronArgs(job=job, plan=plan, model_hints=model_hints(v), unknown_flags=unknown,
                        ignored_flags=ignored, unresolved=list(cmd.unresolved), env=dict(cmd.env),
                        launcher=dict(cmd.launcher), notes=notes, values=dict(v), used_flags=used,
                        not_run=list(cmd.not_run), fp8=fp8, script_line=cmd.line,
                        refused=[_unrecognized(f) for f in parsed.not_megatron]
                        + [p for p in parsed.problems if "argparse refuses it" in p], gpus_source=world_source)


def _unrecognized(word: str) -> str:
    what = "not a megatron-core 0.19.2 flag" if word.startswith("-") else "a word that is no flag's value"
    return f"{word} ({what}: argparse exits with 'unrecognized arguments')"


_FSDP_STRATEGIES = {"optim_grads_params": "fsdp", "optim_grads": "zero2", "optim": "dist_opt", "no_shard": "ddp"}


def _fraction(value) -> float:
    if value is None:
        return 1.0
    try:
        return float(ascii_number(value, float))
    except ValueError:
        raise PlannerError(f"--optimizer-offload-fraction {value}: Megatron expects a number there.") from None


# ---------------------------------------------------------------------------------------------
# the one route from a script to a job
# ---------------------------------------------------------------------------------------------

@dataclass
class ScriptJob:
    """A launch script in planner's terms: what check --megatron-args and explain --megatron-args
    both work from."""

    source: str
    args: MegatronArgs
    """The flags read (plan, job, hints, used/ignored/unknown flags, unresolved variables, notes)."""
    model: ModelSpec
    model_source: str
    """'--model', 'catalog match' or 'built from the flags'."""
    hardware: HardwareSpec
    hardware_source: str
    """'--hw' or what the script states (planner.launchers.common.launch_hardware)."""
    job: Job
    plan: Plan
    """Export-canonical (planner.launchers.common.export_canonical), as the launcher runs it."""
    mismatches: list[str]
    """Where the flags disagree with a --model given on the command line."""
    notes: list[str]
    gpus_source: str = "--gpus"
    """Where the job's GPU count came from (planner.launchers.common.launch_world)."""


def read_source(source: str | Path) -> tuple[str, str]:
    """(text, label) of a launch script: a Path is read through planner.files (a regular file of
    at most 4 MiB of UTF-8, remembered as an input of the command), a str is the script itself."""
    if not isinstance(source, Path):
        return source, "<script>"

    return read_text(source, "launch script", MAX_SCRIPT_BYTES), str(source)


def resolve_model(args: MegatronArgs, model_name: str | None = None, overrides: dict | None = None):
    """(model, how it was chosen, note): --model when given, else the catalog model the flags
    match, else a model built from the flags (asking for the vocabulary when they lack it); the
    ``overrides`` (nested model fields, planner.specs.overrides) applied to whichever it is."""
    note = None
    if model_name:
        model, source = load_model(model_name), "--model"
    else:
        found = match_catalog_model(args.model_hints)
        if found is not None:
            (model, note), source = found, "catalog match"
        else:
            tokenizer = args.values.get("tokenizer_model") or args.values.get("vocab_file")
            model = model_from_hints(args.model_hints, tokenizer=tokenizer, overrides=overrides)
            return model, "built from the flags", None
    return apply_overrides(model, overrides), source, note


def script_inputs(env: list[str] | None, args_text: str | None) -> tuple[dict[str, str], list[str]]:
    """--script-env NAME=VALUE items and --script-args text as the script's environment and $1..."""
    environ = {}
    for item in env or []:
        name, eq, value = item.partition("=")
        if not eq or not name or not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c == "_" for c in name):
            raise PlannerError(f"--script-env {item!r}: expected NAME=VALUE with a shell variable name.")
        environ[name] = value
    try:
        argv = shlex.split(args_text) if args_text else []
    except ValueError as exc:
        raise PlannerError(f"--script-args {args_text!r}: {exc} (quote as in a shell).") from None
    return environ, argv


def job_from_script(source: str | Path, *, model: str | None = None, hw: str | None = None,
                    gpus: int | None = None, global_batch: int | None = None, seq_len: int | None = None,
                    precision: str | None = None, job_file: Path | None = None, domain_fill: int | None = None,
                    memory_margin_gib: float | None = None, environ: dict[str, str] | None = None,
                    script_args: list[str] | tuple = (), model_overrides: dict | None = None) -> ScriptJob:
    """Read a launch script (a Path, or its text) into the model, hardware, job and plan it runs.

    Options given here win over what the script says; ``environ`` and ``script_args`` are the
    script's environment and $1, $2, ...; ``model_overrides`` sets model fields (vocab_size)."""
    text, label = read_source(source)
    args = plan_from_megatron_args(text, gpus=gpus, environ=environ, args=script_args)
    m, model_source, note = resolve_model(args, model, model_overrides)
    notes = list(args.notes) + ([note] if note else [])
    mismatches = hint_mismatches(m, args.model_hints) if model_source == "--model" else []
    h, hardware_source = launch_hardware(hw, m, "the script", text=text)
    pj = args.job
    missing = [opt for key, opt, given in (("gpus", "--gpus", gpus), ("seq_len", "--seq-len", seq_len))
               if pj.get(key) is None and given is None]
    if missing:
        why = ""
        if "--gpus" in missing:
            nproc = args.launcher.get("--nproc-per-node")
            why = (f" (torchrun's --nproc-per-node is {nproc})" if nproc else
                   " (no torchrun line with numeric --nproc-per-node and --nnodes, no WORLD_SIZE, no #SBATCH GPU "
                   "counts)")
        raise PlannerError(f"The script does not give the value of {' or '.join(missing)}{why}.",
                           hint="Pass " + " and ".join(missing) + ".")
    if pj["precisions"] == ["fp32"]:
        if precision is None:
            raise PlannerError(
                "The script trains in fp32: it gives neither --bf16 nor --fp16, and Megatron-LM then keeps fp32 "
                "parameters and runs fp32 GEMMs (validate_args: params_dtype torch.float). planner models bf16, fp8 and nvfp4 "
                "training only, so it cannot predict this run.",
                hint="Add --bf16 to the script if that is what you meant to run, or pass --precision bf16 to have "
                "planner cost it as bf16 training (an fp32 run needs about twice the activation memory and is slower).")
        notes.append(f"the script trains in fp32 (no --bf16 or --fp16); costed as --precision {precision}")
    j = resolve_job(m, gpus=gpus or pj["gpus"], global_batch=global_batch or pj["global_batch"],
                    seq_len=seq_len or pj["seq_len"], precision=precision or ",".join(pj["precisions"]),
                    job_file=job_file, domain_fill=domain_fill, memory_margin_gib=memory_margin_gib)
    plan = args.plan
    if _needs_layer_count(args.values, plan.pp):
        # The pipeline flags count layers the flags do not give: count the model's.
        v = {**args.values, "num_layers": str(m.num_layers), "mtp_num_layers": str(m.mtp_layers)}
        vpp, layout = pipeline_from_flags(v, plan.pp, notes)
        plan = plan.replace(vpp=vpp, layout=layout)
    canon = export_canonical(plan, m, h, j)
    notes += header_disagreement(text, h, j.gpus)
    return ScriptJob(label, args, m, model_source, h, hardware_source, j, canon, mismatches, notes,
                     args.gpus_source or "--gpus")


def cuda_graphs_from_flags(values: dict) -> str:
    """The plan's cuda_graphs from a launch's graph flags (as :func:`assumptions_from_flags` reads
    them): 'none', 'full_iteration' or 'scoped:<modules>' ('scoped:layer' for the whole layer)."""
    return cuda_graphs_of(assumptions_from_flags(values))


def cuda_graphs_of(found: dict) -> str:
    """The plan's cuda_graphs from Assumptions fields (``cuda_graphs``, ``cuda_graph_modules``)."""
    if found.get("cuda_graphs") == "full_iteration":
        return "full_iteration"
    if found.get("cuda_graphs") == "scoped":
        mods = found.get("cuda_graph_modules") or ()
        return "scoped:" + ("layer" if not mods or "layer" in mods else "+".join(mods))
    return "none"


def assumptions_from_flags(values: dict) -> dict:
    """The planner Assumptions fields a Megatron launch sets (lever specs in
    docs/research/levers-2026.md): ``fp8_recipe`` from ``--fp8-recipe`` when FP8 is on (Megatron's
    default recipe is delayed scaling), the CUDA graphs, and whether the experts run through TE's
    operation fuser. Only what the flags state; the caller's own settings win."""
    out: dict = {}
    if values.get("fp8"):
        recipe = values.get("fp8_recipe") or "delayed"
        if recipe in ("tensorwise", "delayed", "blockwise", "mxfp8"):
            out["fp8_recipe"] = recipe
    impl = values.get("cuda_graph_impl")
    if impl is None and values.get("enable_cuda_graph"):
        impl = "local"
    if impl is None and values.get("external_cuda_graph"):
        impl = "transformer_engine"
    if impl == "full_iteration":
        out["cuda_graphs"] = "full_iteration"
        cpu = values.get("moe_paged_stash_buffer_size_factor_cpu")
        if values.get("moe_paged_stash") and cpu:
            # the sign only picks the sizing rule (avg- or max-based); planner sizes from the average
            out["paged_stash_host_factor"] = abs(float(cpu))
    elif impl in ("local", "transformer_engine"):
        mods = values.get("cuda_graph_modules") or values.get("cuda_graph_scope_deprecated") or []
        mods = [mods] if isinstance(mods, str) else list(mods)
        mods = ["layer" if m == "full" else m for m in mods]  # the older scope name of the whole layer
        if "full_iteration" in mods:
            out["cuda_graphs"] = "full_iteration"
        else:
            out["cuda_graphs"] = "scoped"
            out["cuda_graph_modules"] = tuple(m for m in mods if m in ("attn", "mlp", "moe", "moe_router",
                                                                       "moe_preprocess", "mamba", "layer"))
    else:
        out["cuda_graphs"] = "none"
    layers = _int(values, "cpu_offloading_num_layers", 0) or 0
    if layers > 0:
        out["offload_layers"] = layers  # layer-level CPU offload: the first N layers' activations
    if values.get("use_transformer_engine_op_fuser") and values.get("moe_grouped_gemm"):
        out["expert_op_fuser"] = True  # Megatron turns the grouped-tensor expert path on with both
    return out

