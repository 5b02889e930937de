"""Read a Megatron-LM launch script (or a bare argument list) back into a planner job, plan and
model hints.

``plan_from_megatron_args(text_or_argv)`` understands what launch scripts are made of: ``\\`` line
continuations, comments, ``NAME=value`` and ``export`` assignments (used for later ``$NAME``,
``${NAME:-default}``, ``"${ARRAY[@]}"`` expansions), bash arrays, ``VAR=x cmd`` prefixes, and a
``torchrun``/``python -m torch.distributed.run`` prefix (its ``--nproc-per-node`` and ``--nnodes``
give the world size). Flag arities come from Megatron's own parser
(:mod:`planner.export.megatron_flags`), so a value is never mistaken for a flag.

Nothing is dropped silently: every flag ends up as used (it sets a plan, job or model value),
ignored (known not to change memory, time or validity: data, logging, learning rate...) or
unknown (listed: flags planner does not model, and flags that are not Megatron 0.19.2 flags at
all). ``$VARS`` that cannot be resolved are listed too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from planner.errors import PlannerError
from planner.launchers.megatron.flags import FLAGS

# ---------------------------------------------------------------------------------------------
# shell-ish reading
# ---------------------------------------------------------------------------------------------

_VAR = re.compile(r"\$(?:\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*|\d))")


class _Shell:
    """Just enough of bash to expand the variables of a launch script."""

    def __init__(self, environ: dict[str, str] | None = None):
        self.vars: dict[str, str | list[str]] = dict(environ or {})
        self.exported: dict[str, str] = {}
        self.unresolved: list[str] = []

    def _lookup(self, expr: str) -> str | list[str] | None:
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]", expr)
        if m:
            v = self.vars.get(m.group(1))
            if v is None:
                return None
            return v if isinstance(v, list) else [v]
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:?[-=])(.*)", expr)
        if m:
            name, op, default = m.groups()
            v = self.vars.get(name)
            if v is None or (op.startswith(":") and v == ""):
                val = self.expand_string(default)
                if op.endswith("="):
                    self.vars[name] = val
                return val
            return v
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", expr):
            return self.vars.get(expr)
        return None

    def expand_string(self, text: str) -> str:
        """Expand $VAR inside a (double-quoted) string; unknown ones stay literal and are listed."""

        def repl(m: re.Match) -> str:
            expr = m.group("braced") if m.group("braced") is not None else m.group("plain")
            v = self._lookup(expr)
            if v is None:
                self._unresolved(m.group(0))
                return m.group(0)
            return " ".join(v) if isinstance(v, list) else v

        text = re.sub(r"\$\(\(([^()]*)\)\)", lambda m: self._arith(m.group(0), m.group(1)), text)
        return _VAR.sub(repl, text)

    def _arith(self, whole: str, body: str) -> str:
        expanded = self.expand_string(body)
        expanded = re.sub(r"\b([A-Za-z_][A-Za-z0-9_]*)\b", lambda m: str(self.vars.get(m.group(1), m.group(0))), expanded)
        if re.fullmatch(r"[\d\s+\-*/()%]+", expanded):
            try:
                return str(int(eval(expanded.replace("/", "//"), {"__builtins__": {}})))  # noqa: S307 digits only
            except Exception:  # noqa: BLE001
                pass
        self._unresolved(whole)
        return whole

    def _unresolved(self, text: str) -> None:
        if text not in self.unresolved:
            self.unresolved.append(text)

    def words(self, line: str) -> list[str]:
        """Split one logical line into words with quotes, escapes and expansions applied."""
        out: list[str] = []
        cur: list[str] = []
        has_word = False
        i, n = 0, len(line)

        def flush():
            nonlocal cur, has_word
            if has_word:
                out.append("".join(cur))
            cur, has_word = [], False

        while i < n:
            c = line[i]
            if c in " \t":
                flush()
                i += 1
            elif c == "#" and not has_word:
                break
            elif c == "\\" and i + 1 < n:
                cur.append(line[i + 1])
                has_word = True
                i += 2
            elif c == "'":
                j = line.find("'", i + 1)
                j = n if j < 0 else j
                cur.append(line[i + 1 : j])
                has_word = True
                i = j + 1
            elif c == '"':
                j = i + 1
                buf = []
                while j < n and line[j] != '"':
                    if line[j] == "\\" and j + 1 < n and line[j + 1] in '"\\$`':
                        buf.append(line[j + 1])
                        j += 2
                    else:
                        buf.append(line[j])
                        j += 1
                inner = "".join(buf)
                m = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[@\]\}", inner)
                if m and not cur:
                    v = self._lookup(f"{m.group(1)}[@]")
                    if v is None:
                        self._unresolved(inner)
                        cur.append(inner)
                        has_word = True
                    else:  # "${ARR[@]}": one word per element
                        flush()
                        out.extend(v)
                else:
                    cur.append(self.expand_string(inner))
                    has_word = True
                i = j + 1
            elif c == "$":
                m = _VAR.match(line, i)
                m2 = re.compile(r"\$\(\([^()]*\)\)").match(line, i)
                if m2:
                    cur.append(self.expand_string(m2.group(0)))
                    has_word = True
                    i = m2.end()
                elif m:
                    expr = m.group("braced") if m.group("braced") is not None else m.group("plain")
                    v = self._lookup(expr)
                    if v is None:
                        self._unresolved(m.group(0))
                        cur.append(m.group(0))
                        has_word = True
                    else:  # unquoted: word splitting
                        parts = v if isinstance(v, list) else v.split()
                        if parts:
                            cur.append(parts[0])
                            has_word = True
                            for p in parts[1:]:
                                flush()
                                cur.append(p)
                                has_word = True
                    i = m.end()
                else:
                    cur.append(c)
                    has_word = True
                    i += 1
            else:
                cur.append(c)
                has_word = True
                i += 1
        flush()
        return out


def _logical_lines(text: str) -> list[str]:
    """Join backslash continuations and bash array bodies into single lines."""
    text = text.replace("\r\n", "\n").replace("\\\n", " ")
    lines: list[str] = []
    buf = ""
    depth = 0
    for raw in text.split("\n"):
        line = _strip_comment(raw).strip()
        if depth == 0 and (not line or line.startswith("#")):
            continue
        if depth > 0:
            if line.startswith("#"):
                continue
            buf += " " + line
        else:
            buf = line
        # An array assignment NAME=( ... ) may span lines; count unquoted parentheses.
        if re.match(r"^(export\s+)?[A-Za-z_][A-Za-z0-9_]*\+?=\(", buf):
            depth = _paren_depth(buf)
            if depth > 0:
                continue
        depth = 0
        lines.append(buf)
        buf = ""
    if buf:
        lines.append(buf)
    return lines


def _strip_comment(line: str) -> str:
    """Drop an unquoted '#' comment (at the start or after whitespace), as bash does."""
    q = None
    for i, c in enumerate(line):
        if q:
            if c == q:
                q = None
        elif c in "'\"":
            q = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _paren_depth(s: str) -> int:
    depth, q = 0, None
    for c in s:
        if q:
            if c == q:
                q = None
        elif c in "'\"":
            q = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
    return depth


_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
_TORCHRUN_VALUE_OPTS = {
    "--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank", "--master-addr",
    "--master_addr", "--master-port", "--master_port", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint",
    "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--max-restarts", "--max_restarts", "--log-dir", "--log_dir",
    "--redirects", "--tee", "--local-addr", "--local_addr", "--monitor-interval", "--rdzv-conf", "--role",
    "--start-method", "--local-ranks-filter",
}


@dataclass
class ScriptCommand:
    argv: list[str]
    env: dict[str, str]
    launcher: dict[str, str]
    unresolved: list[str]
    script: str | None


def read_script(text: str, environ: dict[str, str] | None = None) -> ScriptCommand:
    """The pretrain_*.py arguments of a launch script (or the text itself when it is a bare
    argument list), with the environment and torchrun options in force for that command."""
    sh = _Shell(environ)
    env: dict[str, str] = {}
    command: list[str] | None = None
    cmd_env: dict[str, str] = {}
    for line in _logical_lines(text):
        m = re.match(r"^(export\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=\((.*)\)\s*$", line)
        if m:  # array assignment
            items = sh.words(m.group(4))
            name = m.group(2)
            if m.group(3):
                prev = sh.vars.get(name, [])
                items = (prev if isinstance(prev, list) else [prev]) + items
            sh.vars[name] = items
            continue
        words = sh.words(line)
        if not words:
            continue
        if words[0] in ("export", "declare", "local", "readonly"):
            for w in words[1:]:
                if "=" in w and not w.startswith("-"):
                    k, v = w.split("=", 1)
                    sh.vars[k] = v
                    env[k] = v
            continue
        if words[0] == "unset":
            for w in words[1:]:
                sh.vars.pop(w, None)
                env.pop(w, None)
            continue
        prefix: dict[str, str] = {}
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            k, v = words.pop(0).split("=", 1)
            prefix[k] = v
        if not words:  # plain assignment
            sh.vars.update(prefix)
            if any(k in env for k in prefix):
                env.update({k: v for k, v in prefix.items() if k in env})
            continue
        if any(re.search(r"pretrain_[A-Za-z0-9_]*\.py$", w) for w in words):
            command, cmd_env = words, prefix
    if command is None:
        # A bare argument list (one or more lines of flags).
        words = [w for line in _logical_lines(text) for w in sh.words(line)]
        if words and words[0].startswith("-"):
            return ScriptCommand(words, env, {}, sh.unresolved, None)
        raise PlannerError(
            "Found no Megatron command in the file: no line runs a pretrain_*.py script, and the file "
            "is not a bare argument list (starting with --flags).",
            hint="Give the launch script that runs pretrain_gpt.py, or a file holding its arguments.",
        )
    idx = next(i for i, w in enumerate(command) if re.search(r"pretrain_[A-Za-z0-9_]*\.py$", w))
    launcher: dict[str, str] = {}
    head = command[:idx]
    if any(w.endswith(_LAUNCHERS) for w in head):
        j = 0
        while j < len(head):
            w = head[j]
            key, _, val = w.partition("=")
            if key in _TORCHRUN_VALUE_OPTS:
                if not val and j + 1 < len(head):
                    val = head[j + 1]
                    j += 1
                launcher[key.replace("_", "-")] = val
            j += 1
    return ScriptCommand(command[idx + 1 :], {**env, **cmd_env}, launcher, sh.unresolved, command[idx])


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
    """Options that are not megatron-core 0.19.2 flags."""


def parse_megatron_argv(argv: list[str]) -> ParsedArgs:
    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    bad: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            bad.append(tok)
            continue
        opt, eq, inline = tok.partition("=")
        if opt not in FLAGS:
            vals = [inline] if eq else []
            while i < len(argv) and not argv[i].startswith("--"):
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
        if isinstance(arity, int):
            while len(vals) < arity and i < len(argv):
                vals.append(argv[i])
                i += 1
            values[dest] = vals[0] if arity == 1 else vals
        else:
            while i < len(argv) and not (argv[i].startswith("--") and len(argv[i]) > 2):
                vals.append(argv[i])
                i += 1
            values[dest] = vals if arity in ("+", "*") else (vals[0] if vals else True)
        given[dest] = opt
    return ParsedArgs(values, given, bad)


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
    "moe_z_loss_coeff", "moe_input_jitter_eps", "mtp_loss_scaling_factor", "rotary_base", "rotary_percent",
    "rotary_scaling_factor", "rope_type", "mscale", "mscale_all_dim", "beta_fast", "beta_slow",
    "original_max_position_embeddings", "norm_epsilon", "make_vocab_size_divisible_by",
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
# not model (--moe-shared-expert-overlap, --tp-comm-overlap, --cp-comm-type, --fp8-param-gather...)
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
    "exp_avg_sq_dtype", "use_distributed_optimizer", "use_megatron_fsdp", "data_parallel_sharding_strategy",
    "num_distributed_optimizer_instances", "overlap_grad_reduce", "overlap_param_gather",
    "seq_length", "max_position_embeddings", "num_layers", "hidden_size", "ffn_hidden_size",
    "num_attention_heads", "group_query_attention", "num_query_groups", "kv_channels", "swiglu", "normalization",
    "position_embedding_type", "untie_embeddings_and_output_weights", "add_bias_linear", "add_qkv_bias",
    "qk_layernorm", "attention_dropout", "hidden_dropout", "vocab_size", "multi_latent_attention",
    "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "mtp_num_layers",
    "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_layer_freq",
    "moe_shared_expert_intermediate_size", "moe_grouped_gemm", "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend", "moe_enable_deepep",
    "moe_router_score_function", "moe_router_enable_expert_bias", "moe_router_num_groups",
    "moe_router_group_topk", "moe_router_topk_scaling_factor", "moe_router_pre_softmax",
    "micro_batch_size", "global_batch_size", "ckpt_format",
}


@dataclass
class MegatronArgs:
    """What a Megatron command line says, in planner's terms.

    Iterating yields ``(job, plan, model_hints, unknown_flags)``."""

    job: dict
    """gpus (None when the world size is unknown), global_batch, seq_len, precisions."""
    plan: Any
    """planner.specs.plan.Plan (not yet canonical: canonicalize with the model and hardware)."""
    model_hints: dict
    """Architecture read from the flags (ModelSpec-like keys; see model_from_hints)."""
    unknown_flags: list[str]
    """Flags planner does not model, and options that are not Megatron 0.19.2 flags."""
    ignored_flags: list[str] = field(default_factory=list)
    """Megatron flags known not to change memory, time or validity (data, logging, lr, ...)."""
    unresolved: list[str] = field(default_factory=list)
    """$VARIABLES the script uses but does not set."""
    env: dict = field(default_factory=dict)
    launcher: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """Where the plan approximates what the flags say."""
    values: dict = field(default_factory=dict)
    """argparse dest -> value, for args_violations."""

    def __iter__(self):
        return iter((self.job, self.plan, self.model_hints, self.unknown_flags))


def _int(v, default=None):
    if v is None or v is True:
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        raise PlannerError(f"Megatron flag value '{v}' is not an integer.") from None


def _moe_freq(text: str, num_layers: int | None) -> list[int] | int:
    """--moe-layer-freq: an int (every k-th layer) or a Python-list string like '([0]*3+[1]*58)'."""
    t = text.strip()
    if re.fullmatch(r"\d+", t):
        return int(t)
    if re.fullmatch(r"[\[\]\d\s*+(),]+", t):
        try:
            v = eval(t, {"__builtins__": {}})  # noqa: S307 digits, brackets, + and * only
            return list(v)
        except Exception:  # noqa: BLE001
            pass
    raise PlannerError(f"Cannot read --moe-layer-freq '{text}'.", hint="Use an int or a list such as '([0]*3+[1]*58)'.")


class _ShapeStub:
    """The two model attributes planner.specs.layout's uneven split needs."""

    def __init__(self, num_layers: int, mtp_layers: int):
        self.num_layers = num_layers
        self.mtp_layers = mtp_layers
        self.name = "the model"


def _layout_from_flags(v: dict, pp: int, vpp: int, notes: list[str]) -> str | None:
    from planner.specs.layout import format_layout, uneven_layout_symbols

    L = _int(v.get("num_layers"))
    mtp = _int(v.get("mtp_num_layers"), 0) or 0
    if v.get("pipeline_model_parallel_layout"):
        return str(v["pipeline_model_parallel_layout"]).replace(" ", "")
    first = _int(v.get("decoder_first_pipeline_num_layers"))
    last = _int(v.get("decoder_last_pipeline_num_layers"))
    if (first is not None or last is not None) and L:
        from planner.errors import PlanRuleError

        try:
            return format_layout(uneven_layout_symbols(_ShapeStub(L, mtp), pp, vpp, first, last))
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


def plan_from_megatron_args(text_or_argv: str | list[str], *, gpus: int | None = None,
                            environ: dict[str, str] | None = None) -> MegatronArgs:
    """Read a Megatron launch script (text) or argument list into planner terms.

    ``gpus`` overrides the world size (otherwise torchrun's --nproc-per-node x --nnodes, or
    WORLD_SIZE from the script, or None); ``environ`` seeds variables the script expects."""
    from planner.specs.plan import Plan

    if isinstance(text_or_argv, str):
        cmd = read_script(text_or_argv, environ)
    else:
        cmd = ScriptCommand(list(text_or_argv), {}, {}, [], None)
    parsed = parse_megatron_argv(cmd.argv)
    v = parsed.values
    notes: list[str] = []
    unknown = [f"{f} (not a megatron-core 0.19.2 flag)" for f in parsed.not_megatron]
    ignored = []
    for dest, opt in parsed.given.items():
        if dest in _USED_DESTS:
            continue
        if dest in _IGNORED_DESTS or dest.startswith(("log_", "wandb_", "tensorboard_", "ckpt_", "data_", "eval_")):
            ignored.append(opt)
        else:
            unknown.append(f"{opt} (not modeled by planner)")

    # ---- world size -------------------------------------------------------------------------
    world = gpus
    if world is None:
        nproc, nnodes = cmd.launcher.get("--nproc-per-node"), cmd.launcher.get("--nnodes", "1")
        if nproc and re.fullmatch(r"\d+", nproc) and re.fullmatch(r"\d+", nnodes or ""):
            world = int(nproc) * int(nnodes)
        elif str(cmd.env.get("WORLD_SIZE", "")).isdigit():
            world = int(cmd.env["WORLD_SIZE"])

    tp = _int(v.get("tensor_model_parallel_size"), 1)
    pp = _int(v.get("pipeline_model_parallel_size"), 1)
    cp = _int(v.get("context_parallel_size"), 1)
    ep = _int(v.get("expert_model_parallel_size"), 1)
    etp = _int(v.get("expert_tensor_parallel_size"))
    mbs = _int(v.get("micro_batch_size"), 1)
    L = _int(v.get("num_layers"))

    # ---- virtual pipeline --------------------------------------------------------------------
    from planner.specs.layout import parse_layout

    vpp = 1
    if v.get("pipeline_model_parallel_layout"):
        vpp = max(len(parse_layout(str(v["pipeline_model_parallel_layout"]))) // pp, 1)
    elif v.get("num_virtual_stages_per_pipeline_rank"):
        vpp = _int(v["num_virtual_stages_per_pipeline_rank"])
    elif v.get("num_layers_per_virtual_pipeline_stage") and L:
        k = _int(v["num_layers_per_virtual_pipeline_stage"])
        if L % pp == 0 and (L // pp) % k == 0:
            vpp = (L // pp) // k
    layout = _layout_from_flags(v, pp, vpp, notes) if pp > 1 or v.get("pipeline_model_parallel_layout") else None

    # ---- recompute ---------------------------------------------------------------------------
    gran = v.get("recompute_granularity")
    if v.get("recompute_activations"):
        gran = "selective"
    recompute = "none"
    if gran == "selective":
        mods = list(v.get("recompute_modules") or ["core_attn"])
        if v.get("moe_layer_recompute") and "moe" not in mods:
            mods.append("moe")
        from planner.specs.plan import RECOMPUTE_MODULES

        kept = [m for m in mods if m in RECOMPUTE_MODULES]
        for m in mods:
            if m not in RECOMPUTE_MODULES:
                unknown.append(f"--recompute-modules {m} (not modeled by planner)")
        recompute = "+".join(kept) if kept else "none"
    elif gran == "full":
        method, n = v.get("recompute_method"), _int(v.get("recompute_num_layers"))
        if method == "block" and n is not None:
            recompute = f"full:{n}"
        else:
            recompute = "full"
            if method == "uniform" and n and n > 1:
                notes.append(f"full recompute in uniform groups of {n} layers modeled as per-layer full recompute")
    elif v.get("moe_layer_recompute"):
        recompute = "moe"

    # ---- offload, precision, moments ---------------------------------------------------------
    opt_off = bool(v.get("optimizer_cpu_offload"))
    if opt_off and float(v.get("optimizer_offload_fraction") or 1.0) < 1.0:
        notes.append(f"--optimizer-offload-fraction {v['optimizer_offload_fraction']} modeled as offloading all of it")
    act_off = bool(v.get("fine_grained_activation_offloading")) or (_int(v.get("cpu_offloading_num_layers"), 0) or 0) > 0
    if _int(v.get("cpu_offloading_num_layers"), 0):
        notes.append("--cpu-offloading-num-layers (layer-level offload) modeled as offload=activations")
    offload = {(False, False): "none", (True, False): "optimizer", (False, True): "activations",
               (True, True): "optimizer+activations"}[(opt_off, act_off)]
    precision = "fp8" if v.get("fp8") else "bf16"
    if v.get("fp16"):
        notes.append("--fp16 modeled as bf16 (same bytes)")
    moments = "bf16" if (v.get("exp_avg_dtype") == "bf16" and v.get("exp_avg_sq_dtype") == "bf16") else "fp32"
    if {v.get("exp_avg_dtype"), v.get("exp_avg_sq_dtype")} - {None, "fp32", "bf16"} or (
            moments == "fp32" and "bf16" in (v.get("exp_avg_dtype"), v.get("exp_avg_sq_dtype"))):
        notes.append("Adam moment dtypes other than both-fp32 or both-bf16 modeled as fp32")

    # ---- sharding ----------------------------------------------------------------------------
    instances = _int(v.get("num_distributed_optimizer_instances"), 1) or 1
    if v.get("use_megatron_fsdp"):
        strategy = v.get("data_parallel_sharding_strategy") or "optim_grads_params"
        sharding = {"optim_grads_params": "fsdp", "optim_grads": "zero2", "optim": "dist_opt", "no_shard": "ddp"}[strategy]
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

    # ---- MoE dispatcher ----------------------------------------------------------------------
    dispatcher = None
    if v.get("num_experts"):
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
        tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, sharding=sharding, recompute=recompute,
        offload=offload, precision=precision, moments=moments, layout=layout, dispatcher=dispatcher,
        ep_overlap="on" if v.get("overlap_moe_expert_parallel_comm") else "off",
    )
    plan = Plan.from_mapping({k: val for k, val in plan_values.items() if val is not None})

    seq = _int(v.get("seq_length"))
    gbs = _int(v.get("global_batch_size"))
    if gbs is None and world and world % (tp * pp * cp) == 0:
        gbs = mbs * (world // (tp * pp * cp))  # validate_args's default: one micro-batch per DP rank
    job = {"gpus": world, "global_batch": gbs, "seq_len": seq, "precisions": [precision]}

    return MegatronArgs(job=job, plan=plan, model_hints=model_hints(v), unknown_flags=unknown,
                        ignored_flags=ignored, unresolved=list(cmd.unresolved), env=dict(cmd.env),
                        launcher=dict(cmd.launcher), notes=notes, values=dict(v))


def model_hints(v: dict) -> dict:
    """ModelSpec-shaped facts the flags state (only the keys the flags give)."""
    h: dict[str, Any] = {}
    for dest, key in (("num_layers", "num_layers"), ("hidden_size", "hidden_size"), ("vocab_size", "vocab_size"),
                      ("max_position_embeddings", "max_position_embeddings")):
        if v.get(dest) is not None:
            h[key] = _int(v[dest])
    if v.get("mtp_num_layers") is not None:
        h["mtp_layers"] = _int(v["mtp_num_layers"])
    if "untie_embeddings_and_output_weights" in v:
        h["tie_embeddings"] = not v["untie_embeddings_and_output_weights"]
    if v.get("normalization"):
        h["norm"] = "rmsnorm" if v["normalization"] == "RMSNorm" else "layernorm"
    if v.get("position_embedding_type"):
        h["position_embedding"] = "learned" if v["position_embedding_type"] == "learned_absolute" else "rope"
    for dest, key in (("attention_dropout", "attention_dropout"), ("hidden_dropout", "hidden_dropout")):
        if v.get(dest) is not None:
            h[key] = float(v[dest])
    heads = _int(v.get("num_attention_heads"))
    if v.get("multi_latent_attention"):
        h["attention"] = {k: val for k, val in dict(
            kind="mla", num_heads=heads, q_lora_rank=_int(v.get("q_lora_rank")),
            kv_lora_rank=_int(v.get("kv_lora_rank"), 512),
            qk_nope_head_dim=_int(v.get("qk_head_dim"), 128), qk_rope_head_dim=_int(v.get("qk_pos_emb_head_dim"), 64),
            v_head_dim=_int(v.get("v_head_dim"), 128)).items() if val is not None or k == "q_lora_rank"}
    elif heads:
        kv = _int(v.get("num_query_groups"), 1) if v.get("group_query_attention") else heads
        hd = _int(v.get("kv_channels")) or (_int(v.get("hidden_size"), 0) // heads if v.get("hidden_size") else None)
        h["attention"] = {k: val for k, val in dict(
            kind="gqa", num_heads=heads, num_kv_heads=kv, head_dim=hd, qk_norm=bool(v.get("qk_layernorm")),
            qkv_bias=bool(v.get("add_qkv_bias"))).items() if val is not None}
    ffn = _int(v.get("ffn_hidden_size"))
    h["ffn"] = {"activation": "swiglu" if v.get("swiglu") else "gelu"}
    if ffn:
        h["ffn"]["hidden_size"] = ffn
    if v.get("num_experts"):
        E = _int(v["num_experts"])
        moe: dict[str, Any] = {"num_experts": E, "top_k": _int(v.get("moe_router_topk"), 2),
                               "expert_hidden_size": _int(v.get("moe_ffn_hidden_size")) or ffn}
        shared = _int(v.get("moe_shared_expert_intermediate_size"))
        if shared:
            moe["shared_expert_hidden_size"] = shared
            moe["num_shared_experts"] = max(shared // moe["expert_hidden_size"], 1) if moe["expert_hidden_size"] else 1
        freq = _moe_freq(str(v.get("moe_layer_freq", "1")), h.get("num_layers"))
        if isinstance(freq, list):
            first_dense = next((i for i, x in enumerate(freq) if x), len(freq))
            moe["first_k_dense"] = first_dense
            rest = freq[first_dense:]
            if rest and not all(rest):
                moe["layer_pattern"] = freq  # not expressible as first_k_dense + layer_freq: kept raw
        elif freq > 1:
            moe["layer_freq"] = freq
        if v.get("moe_router_score_function"):
            moe["score_function"] = v["moe_router_score_function"]
        if v.get("moe_router_enable_expert_bias"):
            moe["router_bias"] = True
        if v.get("moe_router_num_groups"):
            moe["num_groups"] = _int(v["moe_router_num_groups"])
        if v.get("moe_router_group_topk"):
            moe["group_top_k"] = _int(v["moe_router_group_topk"])
        h["moe"] = moe
    return h


_COMPARED = ("num_layers", "hidden_size", "vocab_size", "mtp_layers", "tie_embeddings", "norm", "position_embedding")


def hint_mismatches(model, hints: dict) -> list[str]:
    """Where the flags disagree with a catalog model (each 'field: flags say X, model has Y')."""
    out = []
    for key in _COMPARED:
        if key in hints and getattr(model, key) != hints[key]:
            out.append(f"{key}: flags say {hints[key]}, {model.name} has {getattr(model, key)}")
    a = hints.get("attention") or {}
    for key, val in a.items():
        have = getattr(model.attention, key, None)
        if have is not None and have != val and not (key == "q_lora_rank" and val is None and have is None):
            out.append(f"attention.{key}: flags say {val}, {model.name} has {have}")
    f = hints.get("ffn") or {}
    if "hidden_size" in f and any(k == "dense" for k in model.layer_kinds) and f["hidden_size"] != model.ffn.hidden_size:
        out.append(f"ffn.hidden_size: flags say {f['hidden_size']}, {model.name} has {model.ffn.hidden_size}")
    if f.get("activation") and f["activation"] != model.ffn.activation:
        out.append(f"ffn.activation: flags say {f['activation']}, {model.name} has {model.ffn.activation}")
    m = hints.get("moe")
    if bool(m) != model.is_moe:
        out.append(f"moe: flags say {'MoE' if m else 'dense'}, {model.name} is {'MoE' if model.is_moe else 'dense'}")
    elif m:
        for key in ("num_experts", "top_k", "expert_hidden_size", "first_k_dense", "shared_expert_hidden_size"):
            have = model.moe.shared_hidden if key == "shared_expert_hidden_size" else getattr(model.moe, key)
            if key in m and m[key] != have:
                out.append(f"moe.{key}: flags say {m[key]}, {model.name} has {have}")
    return out


def match_catalog_model(hints: dict):
    """The catalog model the flags describe (no mismatch on the compared fields), or None."""
    from planner.specs.catalog import all_models

    for model in all_models():
        if not hint_mismatches(model, hints):
            return model
    return None


def model_from_hints(hints: dict, name: str = "megatron-args"):
    """A ModelSpec built from the flags alone (when no catalog model matches)."""
    from planner.specs.catalog import validate_spec
    from planner.specs.model import ModelSpec

    data = {k: v for k, v in hints.items() if k not in ("attention", "ffn", "moe")}
    data.update(name=name, source=["Megatron-LM command-line flags"])
    data["attention"] = dict(hints.get("attention") or {})
    data["ffn"] = dict(hints.get("ffn") or {})
    if "hidden_size" not in data["ffn"] and hints.get("hidden_size"):
        data["ffn"]["hidden_size"] = 4 * hints["hidden_size"]
    if hints.get("moe"):
        moe = dict(hints["moe"])
        if moe.pop("layer_pattern", None) is not None:
            raise PlannerError(
                "--moe-layer-freq mixes dense and MoE layers after the first MoE layer; planner models "
                "first_k_dense dense layers followed by every layer_freq-th layer MoE.",
                hint="Pass --model with a catalog model or a model YAML instead.",
            )
        data["moe"] = moe
    return validate_spec(ModelSpec, data, "model", "the Megatron flags")
