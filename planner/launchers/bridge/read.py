"""Read a Megatron-Bridge launch back into planner's terms: a ``run_recipe.py`` script (read as
bash would, nothing run: :mod:`planner.launchers.bash`), a file of ``KEY=VALUE`` overrides, or a
ConfigContainer YAML (the nested override file Bridge's examples merge with ``--config-file``, or
the whole configuration ``--dry-run`` and ``logger.save_config_filepath`` save) -> recipe,
overrides -> job, plan and model.

Settings a file leaves out take the recipe's value (``RECIPE_DEFAULTS``, where planner knows the
recipe; otherwise Megatron-Core's default, with a note naming each). Nothing is dropped silently:
every override is used (it sets a plan, job or model value), ignored (data, logging, learning rate,
checkpoint paths: no effect on memory or time) or listed as not modeled by planner.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.files import MAX_SCRIPT_BYTES, read_text
from planner.launchers.bash import run_script
from planner.launchers.bridge.recipes import RECIPE_DEFAULTS, has_comm_overlap, model_for_recipe
from planner.launchers.common import (
    export_canonical,
    header_disagreement,
    launch_hardware,
    launch_world,
    torchrun_options,
)
from planner.launchers.megatron.read import (
    assumptions_from_flags,
    cuda_graphs_of,
    full_recompute,
    pipeline_from_flags,
    selective_recompute,
)
from planner.specs.catalog import catalog_names, load_model, parse_yaml_text
from planner.specs.common import ascii_number
from planner.specs.job_input import resolve_job
from planner.specs.plan import Offload, Plan

# run_recipe.py's convenience options and the ConfigContainer field each sets (COMMON_OVERRIDE_FIELDS).
CONVENIENCE = {
    "-ms": "train.train_iters", "--max_steps": "train.train_iters",
    "-gb": "train.global_batch_size", "--global_batch_size": "train.global_batch_size",
    "-mb": "train.micro_batch_size", "--micro_batch_size": "train.micro_batch_size",
    "-sl": "dataset.seq_length", "--seq_length": "dataset.seq_length",
    "-tp": "model.tensor_model_parallel_size", "--tensor_model_parallel_size": "model.tensor_model_parallel_size",
    "-pp": "model.pipeline_model_parallel_size", "--pipeline_model_parallel_size": "model.pipeline_model_parallel_size",
    "-cp": "model.context_parallel_size", "--context_parallel_size": "model.context_parallel_size",
    "-vp": "model.virtual_pipeline_model_parallel_size",
    "--virtual_pipeline_model_parallel_size": "model.virtual_pipeline_model_parallel_size",
    "-ep": "model.expert_model_parallel_size", "--expert_model_parallel_size": "model.expert_model_parallel_size",
    "-etp": "model.expert_tensor_parallel_size", "--expert_tensor_parallel_size": "model.expert_tensor_parallel_size",
    "--lr": "optimizer.lr", "--min_lr": "optimizer.min_lr", "--warmup_iters": "scheduler.lr_warmup_iters",
    "--pretrained_checkpoint": "checkpoint.pretrained_checkpoint", "--save_dir": "checkpoint.save",
    "--load_dir": "checkpoint.load", "--save_interval": "checkpoint.save_interval",
}
_RUNNER_VALUE_OPTS = {"--recipe", "--model", "--mode", "--step-func", "--step_func", "--dataset"}
_RUNNER_SWITCHES = {"--dry-run", "--dry_run", "--deterministic", "--dump-env", "--dump_env"}

USED = {
    "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
    "model.virtual_pipeline_model_parallel_size", "model.context_parallel_size", "model.expert_model_parallel_size",
    "model.expert_tensor_parallel_size", "model.sequence_parallel", "model.pipeline_model_parallel_layout",
    "model.num_layers_in_first_pipeline_stage", "model.num_layers_in_last_pipeline_stage",
    "model.account_for_embedding_in_pipeline_split", "model.account_for_loss_in_pipeline_split",
    "model.recompute_granularity", "model.recompute_method", "model.recompute_num_layers", "model.recompute_modules",
    "model.cpu_offloading", "model.cpu_offloading_num_layers", "model.fine_grained_activation_offloading",
    "model.offload_modules", "model.cuda_graph_impl", "model.cuda_graph_scope", "model.cuda_graph_modules",
    "model.moe_token_dispatcher_type", "model.moe_flex_dispatcher_backend", "model.overlap_moe_expert_parallel_comm",
    "comm_overlap.overlap_moe_expert_parallel_comm", "model.moe_shared_expert_overlap", "model.mtp_num_layers",
    "model.seq_length", "optimizer.optimizer_cpu_offload", "optimizer.optimizer_offload_fraction",
    "optimizer.use_precision_aware_optimizer", "optimizer.main_grads_dtype", "optimizer.main_params_dtype",
    "optimizer.exp_avg_dtype", "optimizer.exp_avg_sq_dtype", "optimizer.use_distributed_optimizer",
    "ddp.use_distributed_optimizer", "ddp.use_megatron_fsdp", "ddp.data_parallel_sharding_strategy",
    "ddp.num_distributed_optimizer_instances", "ddp.overlap_grad_reduce", "ddp.overlap_param_gather",
    "checkpoint.ckpt_format", "train.micro_batch_size", "train.global_batch_size", "dataset.seq_length",
    "mixed_precision", "model.fp8_dot_product_attention", "model.use_transformer_engine_op_fuser",
    "model.moe_grouped_gemm", "comm_overlap.delay_wgrad_compute", "model.delay_wgrad_compute",
    "model.moe_expert_rank_capacity_factor", "model.moe_paged_stash", "model.moe_paged_stash_buffer_size_factor_cuda",
}
_IGNORED_PREFIXES = ("logger.", "checkpoint.", "scheduler.", "tokenizer.", "profiling.", "rng.", "dist.",
                     "rerun_state_machine.", "straggler.", "ft.", "nvrx_straggler.", "validation.", "env_vars.",
                     "inprocess_restart.")
_IGNORED = {"train.train_iters", "train.eval_iters", "train.eval_interval", "train.manual_gc",
            "train.manual_gc_interval", "optimizer.lr", "optimizer.min_lr", "optimizer.weight_decay",
            "optimizer.adam_beta1", "optimizer.adam_beta2", "optimizer.adam_eps", "optimizer.clip_grad",
            "model.apply_rope_fusion", "model.moe_permute_fusion", "model.bias_activation_fusion",
            "model.cross_entropy_loss_fusion", "model.cross_entropy_fusion_impl", "model.gradient_accumulation_fusion",
            "model.init_method_std", "model.moe_aux_loss_coeff", "model.moe_router_load_balancing_type",
            "model.moe_z_loss_coeff", "model.mtp_loss_scaling_factor", "model.moe_router_bias_update_rate"}

MAX_VALUE_CHARS = 16384
_TOP_LEVEL_NAMES = "|".join(sorted(k for k in USED if "." not in k))
_TOP_LEVEL_OVERRIDE = re.compile(rf"({_TOP_LEVEL_NAMES})=[^\s'\"$`;|&<>()]+")


@dataclass
class BridgeArgs:
    """What a Megatron-Bridge launch says, before it meets a model."""

    kind: str
    """'script' (run_recipe.py under bash), 'overrides' (a bare KEY=VALUE list), 'yaml' (a whole
    ConfigContainer) or 'yaml-overrides' (a nested override file)."""
    recipe: str | None
    values: dict[str, Any]
    """ConfigContainer field path -> value (the last override of a field wins, as in Hydra)."""
    launcher: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# values: Hydra's override grammar (the part launches use), bounded
# ---------------------------------------------------------------------------------------------

def hydra_parse(text: str) -> Any:
    """A Hydra override value: null/true/false, numbers, quoted strings, [a, b] lists (nested),
    else the text as a string. Raises PlannerError on an unbalanced quote or bracket."""
    if len(text) > MAX_VALUE_CHARS:
        raise PlannerError(f"An override value is {len(text):,} characters long; planner reads up to {MAX_VALUE_CHARS:,}.")
    value, rest = _value(text.strip(), 0)
    if rest.strip():
        raise PlannerError(f"Override value {text!r} has text after its end: {rest.strip()!r}.")
    return value


def _value(s: str, depth: int) -> tuple[Any, str]:
    if depth > 8:
        raise PlannerError("An override value nests lists more than 8 deep.")
    if s.startswith("["):
        items: list = []
        s = s[1:].lstrip()
        if s.startswith("]"):
            return items, s[1:]
        while True:
            item, s = _value(s.lstrip(), depth + 1)
            items.append(item)
            s = s.lstrip()
            if s.startswith(","):
                s = s[1:]
                continue
            if s.startswith("]"):
                return items, s[1:]
            raise PlannerError("An override list is missing its closing ']'.")
    if s[:1] in ("'", '"'):
        q = s[0]
        out, i = [], 1
        while i < len(s):
            c = s[i]
            if c == "\\" and i + 1 < len(s):
                out.append(s[i + 1])
                i += 2
                continue
            if c == q:
                return "".join(out), s[i + 1:]
            out.append(c)
            i += 1
        raise PlannerError(f"An override value has an unclosed {q} quote.")
    m = re.match(r"[^,\[\]]*", s)
    word = m.group(0).strip() if m else ""
    return _scalar(word), s[len(m.group(0)) if m else 0:]


def _scalar(word: str) -> Any:
    low = word.lower()
    if low in ("null", "~", "none"):
        return None
    if low in ("true", "false"):
        return low == "true"
    if re.fullmatch(r"[-+]?[0-9]+", word):
        return int(word)
    if re.fullmatch(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+", word):
        return float(word)
    return word


# ---------------------------------------------------------------------------------------------
# sources: a script, an override list, a YAML
# ---------------------------------------------------------------------------------------------

def _is_runner(word: str) -> bool:
    base = word.rsplit("/", 1)[-1]
    return base in ("run_recipe.py", "run_script.py")


def read_bridge_text(text: str, label: str = "<file>", environ: dict | None = None, args=()) -> BridgeArgs:
    """The launch a file holds (script, override list or YAML), without choosing a model."""
    stripped = text.lstrip()
    if label.endswith((".yaml", ".yml")) or _looks_like_yaml(stripped):
        return _from_yaml(text, label)

    run = run_script(text, environ=environ, args=args)
    found = [(c, next(i for i, w in enumerate(c.argv) if _is_runner(w)))
             for c in run.commands if any(_is_runner(w) for w in c.argv)]
    notes = list(run.notes)
    if found:
        cmd, idx = found[0]
        if len(found) > 1:
            notes.append(f"the script starts {len(found)} Megatron-Bridge commands; planner reads the first (line {cmd.line})")
        launcher = torchrun_options(cmd.argv[:idx])
        out = _from_argv(cmd.argv[idx + 1:], "script")
        out.launcher, out.env = launcher, dict(cmd.env)
    else:
        # An override list is not a script: a line that is only NAME=VALUE (mixed_precision=...)
        # is an override of a top-level field, which bash would take as a variable assignment.
        words = [ln.strip() for ln in text.splitlines() if _TOP_LEVEL_OVERRIDE.fullmatch(ln.strip())]
        words += [w for c in run.commands for w in c.argv]
        if not words or not all("=" in w or w.startswith("-") or w in _runner_values(words) for w in words):
            raise PlannerError(
                "Found no Megatron-Bridge launch in the file: no command it runs starts run_recipe.py, it is not a "
                "list of KEY=VALUE overrides, and it is not a ConfigContainer YAML.",
                hint="Give the script that runs scripts/training/run_recipe.py, a file of overrides "
                "(model.tensor_model_parallel_size=2 ...), or a Bridge YAML.")
        out = _from_argv(words, "overrides")
        out.env = dict(run.commands[-1].env) if run.commands else {}
    out.unresolved, out.not_run = list(run.unresolved), list(run.not_run)
    out.notes = notes + out.notes
    return out


def _runner_values(words: list[str]) -> set[str]:
    return {words[i + 1] for i, w in enumerate(words[:-1]) if w in _RUNNER_VALUE_OPTS or w in CONVENIENCE}


def _looks_like_yaml(text: str) -> bool:
    first = next((ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    return bool(re.match(r"[A-Za-z_][A-Za-z0-9_]*:(\s|$)", first))


def _from_argv(argv: list[str], kind: str) -> BridgeArgs:
    recipe = model_stem = None
    common: list[tuple[str, str]] = []
    trailing: list[tuple[str, str]] = []
    unknown: list[str] = []
    i = 0
    while i < len(argv):
        w = argv[i]
        opt, eq, inline = w.partition("=")
        if opt in _RUNNER_VALUE_OPTS or opt in CONVENIENCE:
            val = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            i += 1 if eq else 2
            if val is None:
                unknown.append(f"{opt} (expects a value: run_recipe.py's parser refuses it)")
                continue
            if opt == "--recipe":
                recipe = val
            elif opt == "--model":
                model_stem = val
            elif opt in CONVENIENCE:
                common.append((CONVENIENCE[opt], val))
            continue
        i += 1
        if w in _RUNNER_SWITCHES:
            continue
        if w.startswith("-"):
            unknown.append(f"{w} (not a run_recipe.py option)")
            continue
        key, eq, val = w.partition("=")
        if not eq:
            unknown.append(f"{w} (not a KEY=VALUE override)")
            continue
        trailing.append((key, val))
    if recipe is None and model_stem is not None:
        recipe = f"{model_stem}_pretrain_config"
    values: dict[str, Any] = {}
    for key, val in common + trailing:  # run_recipe.py: the trailing override wins
        key = key.lstrip("+")
        if key.startswith("~"):
            values.pop(key[1:], None)
            continue
        values[key] = hydra_parse(val)
    return BridgeArgs(kind, recipe, values, unknown=unknown)


def _from_yaml(text: str, label: str) -> BridgeArgs:
    # The one YAML reader: nesting and aliases capped, a duplicate key refused (as OmegaConf's
    # loader refuses it).
    data = parse_yaml_text(text, label, not_mapping="is YAML but not a mapping of ConfigContainer sections (model:, "
                           "train:, ...)")
    values: dict[str, Any] = {}

    def walk(prefix: str, obj, depth: int) -> None:
        if depth > 12:
            raise PlannerError(f"'{label}' nests more than 12 levels deep.")
        if isinstance(obj, dict) and not (prefix and "_target_" in obj and str(obj["_target_"]).startswith("torch.")):
            for k, v in obj.items():
                if k == "_target_":
                    continue
                walk(f"{prefix}.{k}" if prefix else str(k), v, depth + 1)
        else:
            values[prefix] = _yaml_value(obj)

    walk("", data, 0)
    recipe = values.pop("recipe", None) if isinstance(values.get("recipe"), str) else None
    # A whole ConfigContainer (what --dry-run saves) names its class; an override file does not and
    # leaves the rest to its recipe.
    whole = "ConfigContainer" in str(data.get("_target_", ""))
    return BridgeArgs("yaml" if whole else "yaml-overrides", recipe, values)


def _yaml_value(obj):
    """A dtype written as {_target_: torch.bfloat16} reads as 'bf16'."""
    if isinstance(obj, dict) and "_target_" in obj:
        return {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(obj["_target_"],
                                                                                              obj["_target_"])
    return obj


# ---------------------------------------------------------------------------------------------
# values -> plan, job
# ---------------------------------------------------------------------------------------------

_DTYPES = {"fp32": "fp32", "float32": "fp32", "torch.float32": "fp32", "bf16": "bf16", "bfloat16": "bf16",
           "torch.bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "torch.float16": "fp16"}


@dataclass
class BridgeJob:
    """A Bridge launch in planner's terms (what check --bridge reports)."""

    source: str
    args: BridgeArgs
    model: Any
    model_source: str
    hardware: Any
    hardware_source: str
    job: Any
    plan: Any
    notes: list[str]
    defaults_used: list[str]
    """Plan-relevant fields the file leaves to the recipe (or to Megatron-Core's default)."""
    assumptions: dict
    """The Assumptions fields the launch sets (:func:`launch_assumptions`)."""
    gpus_source: str = "--gpus"
    """Where the job's GPU count came from (planner.launchers.common.launch_world)."""


def _int(values: dict, key: str, default=None):
    v = values.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            return int(ascii_number(str(v)))
        except ValueError:
            raise PlannerError(f"{key}={v!r}: Megatron-Bridge expects an integer there (ASCII digits 0-9: Hydra's "
                               "override grammar reads no other digits).") from None
    if v < 0 or v > 2**24:
        raise PlannerError(f"{key}={v} is out of range.")
    return v


def _int_at(val, key: str, default=None):
    """The integer a launch gives ``key`` (``val`` as :func:`_lookup` returns it), errors naming the key."""
    return _int({key: val(key, default)}, key, default)


def _lookup(args: BridgeArgs):
    """(value of a field: what the file gives, else its recipe's default, else ``fallback``; the
    fields read from the recipe's defaults, in order)."""
    given = args.values
    defaults = RECIPE_DEFAULTS.get(args.recipe or "", {}) if args.kind != "yaml" else {}
    used: list[str] = []

    def val(key, fallback=None):
        if key in given:
            return given[key]
        if key in defaults:
            used.append(key)
            return defaults[key]
        return fallback

    return val, used


# Megatron-Bridge's mixed-precision presets (megatron.bridge.training.mixed_precision) by the FP8
# recipe each runs, matched on the preset's name.
FP8_PRESET_RECIPES = (("mxfp8", "mxfp8"), ("subchannel", "blockwise"), ("blockwise", "blockwise"),
                      ("current_scaling", "tensorwise"), ("delayed", "delayed"))


def fp8_preset_recipe(name: str) -> str | None:
    """The FP8 recipe of a mixed-precision preset, None when the name says none planner knows."""
    return next((recipe for key, recipe in FP8_PRESET_RECIPES if key in name), None)


def mixed_precision_name(args: BridgeArgs, val) -> str:
    """The mixed-precision preset a launch trains with, 'fp32' for none.

    A recipe-built config (a run_recipe.py launch, an override list or an override YAML) has its
    recipe's value: every pretrain recipe starts from _pretrain_common (megatron/bridge/recipes/
    common.py, v0.6.0), which sets mixed_precision="bf16_mixed". A whole ConfigContainer YAML is
    the configuration itself: ConfigContainer.mixed_precision defaults to None
    (megatron/bridge/training/config.py), no mixed-precision config, so a file without one, or with
    null, keeps the model's dtype; a config written out as its fields names bf16 / fp16 / fp8."""
    given = args.values
    if args.kind != "yaml":
        mp = val("mixed_precision", "bf16_mixed")
        return mp if isinstance(mp, str) else "bf16_mixed"
    mp = given.get("mixed_precision")
    if isinstance(mp, str) and mp not in ("null", "None"):
        return mp
    fields = {k.split(".", 1)[1]: v for k, v in given.items() if k.startswith("mixed_precision.")}
    if fields.get("fp4"):
        return "bf16_with_nvfp4_mixed"
    if fields.get("fp8"):
        return "bf16_with_fp8_mixed" if fields.get("bf16", True) else "fp16_with_fp8_mixed"
    if fields.get("bf16") is True:
        return "bf16_mixed"
    if fields.get("fp16") is True:
        return "fp16_mixed"
    return "fp32"


def _model_half(given: dict) -> bool:
    """Whether a ConfigContainer YAML's model section trains in bf16 / fp16 by itself."""
    return (given.get("model.bf16") is True or given.get("model.fp16") is True
            or given.get("model.params_dtype") in ("bf16", "fp16"))


def launch_assumptions(args: BridgeArgs) -> dict:
    """The planner Assumptions a Bridge launch sets: its FP8 recipe, CUDA graphs and TE operation
    fuser through the Megatron reader's own rules (the Bridge fields are the TransformerConfig
    fields Megatron-LM's flags set), and FP8 attention (``model.fp8_dot_product_attention``, which
    megatron-core 0.19 has no flag for)."""
    val, _ = _lookup(args)
    name = mixed_precision_name(args, val)
    flags = {"fp8": "fp8" in name, "fp8_recipe": fp8_preset_recipe(name),
             "cuda_graph_impl": val("model.cuda_graph_impl", "none"), "cuda_graph_modules": val("model.cuda_graph_scope"),
             "use_transformer_engine_op_fuser": bool(val("model.use_transformer_engine_op_fuser", False)),
             "moe_grouped_gemm": bool(val("model.moe_grouped_gemm", False)),
             # TransformerConfig.cpu_offloading turns the layer-level offload on, of this many layers
             "cpu_offloading_num_layers": val("model.cpu_offloading_num_layers", 0) if val("model.cpu_offloading", False) else None}
    out = assumptions_from_flags({k: v for k, v in flags.items() if v is not None})
    if val("model.fp8_dot_product_attention", False) is True and flags["fp8"]:
        out["fp8_attention"] = True
    return out


def plan_values(args: BridgeArgs, model) -> tuple[dict, dict, list[str], list[str]]:
    """(plan mapping, job mapping, notes, fields taken from the recipe's defaults). The fields are read
    in a fixed order (the recipe-default list and the notes follow it), one helper per group."""
    given = args.values
    val, used_defaults = _lookup(args)
    notes: list[str] = []
    tp, pp, cp, vpp_v, ep, etp, mbs = _parallel_sizes(val, model)
    vpp, layout_text = _pipeline(args, val, model, pp, vpp_v, notes)
    recompute = _recompute(args, val, notes)
    offload = _offload(val, notes)
    precision, moments = _precision(args, val, notes)
    sharding, sharding_instances = _sharding(args, val, notes)
    grad_reduce, param_gather = grad_dtypes(args, precision, sharding)
    dispatcher = _dispatcher(val, model, notes)
    plan = dict(tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, sharding=sharding, recompute=recompute,
                offload=offload, precision=None if precision == "fp32" else precision, moments=moments, grad_reduce=grad_reduce,
                param_gather=param_gather, layout=layout_text, dispatcher=dispatcher,
                ep_overlap=_ep_overlap(args), cuda_graphs=cuda_graphs_of(launch_assumptions(args)))
    seq = _seq_len(given, val)
    job = {"global_batch": _int_at(val, "train.global_batch_size"), "seq_len": seq,
           "precisions": [precision], "_instances": sharding_instances}
    return plan, job, notes, used_defaults


def _parallel_sizes(val, model) -> tuple[int, int, int, Any, int, int | None, int]:
    """(tp, pp, cp, the VPP field as given, ep, etp, mbs): ModelParallelConfig's sizes
    (megatron/core/model_parallel_config.py, defaults 1; expert_tensor_parallel_size None) and
    TrainingConfig.micro_batch_size (megatron/bridge/training/config.py). A dense model has no experts."""
    tp = _int_at(val, "model.tensor_model_parallel_size", 1)
    pp = _int_at(val, "model.pipeline_model_parallel_size", 1)
    cp = _int_at(val, "model.context_parallel_size", 1)
    vpp_v = val("model.virtual_pipeline_model_parallel_size")
    ep = _int_at(val, "model.expert_model_parallel_size", 1) if model.is_moe else 1
    etp = _int_at(val, "model.expert_tensor_parallel_size") if model.is_moe else None
    mbs = _int_at(val, "train.micro_batch_size", 1)
    return tp, pp, cp, vpp_v, ep, etp, mbs


_LAYOUT_MODULES = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
"""A YAML layout's module names as Megatron-Core's layout string letters (PipelineParallelLayerLayout,
megatron/core/transformer/pipeline_parallel_layer_layout.py)."""


def _pipeline(args: BridgeArgs, val, model, pp: int, vpp_v, notes: list[str]) -> tuple[int, str | None]:
    """(vpp, layout) from the model's pipeline fields (pipeline_model_parallel_layout,
    num_layers_in_first/last_pipeline_stage, account_for_embedding/loss_in_pipeline_split:
    TransformerConfig, megatron/core/transformer/transformer_config.py), read as the Megatron reader
    reads the matching flags. The DeepSeek-V3 recipe computes its layout from PP and VPP
    (set_deepseek_v3_pipeline_model_parallel_layout), which planner does not repeat: noted."""
    given = args.values
    layout = val("model.pipeline_model_parallel_layout")
    if isinstance(layout, list):  # a YAML's layout as per-stage lists of module names
        layout = "|".join("".join(_LAYOUT_MODULES.get(str(x), "?") for x in stage) for stage in layout)
    if pp > 1 and layout is None and "model.pipeline_model_parallel_layout" not in given and \
            args.recipe == "deepseek_v3_pretrain_config" and ("model.pipeline_model_parallel_size" in given or
                                                              "model.virtual_pipeline_model_parallel_size" in given):
        notes.append("the recipe rebuilds its pipeline layout for the PP/VPP given (set_deepseek_v3_pipeline_model_"
                     "parallel_layout); planner reads Megatron's even split instead")
    mv = {
        "num_layers": str(model.num_layers), "mtp_num_layers": str(model.mtp_layers),
        "pipeline_model_parallel_layout": layout,
        "decoder_first_pipeline_num_layers": val("model.num_layers_in_first_pipeline_stage"),
        "decoder_last_pipeline_num_layers": val("model.num_layers_in_last_pipeline_stage"),
        "account_for_embedding_in_pipeline_split": val("model.account_for_embedding_in_pipeline_split", False),
        "account_for_loss_in_pipeline_split": val("model.account_for_loss_in_pipeline_split", False),
        "num_virtual_stages_per_pipeline_rank": vpp_v,
    }
    mv = {k: (str(v) if isinstance(v, int) and not isinstance(v, bool) else v) for k, v in mv.items() if v is not None}
    return pipeline_from_flags(mv, pp, notes) if pp > 1 else (1, None)


def _recompute(args: BridgeArgs, val, notes: list[str]) -> str:
    """TransformerConfig.recompute_granularity (megatron/core/transformer/transformer_config.py):
    None, "selective" (recompute_modules, default ["core_attn"]) or "full" (recompute_method and
    recompute_num_layers); anything else Megatron-Core refuses, and so does planner."""
    gran = val("model.recompute_granularity")
    if gran == "selective":
        mods = val("model.recompute_modules") or ["core_attn"]
        mods = [str(m) for m in (mods if isinstance(mods, list) else [mods])]
        return selective_recompute(mods, "model.recompute_modules", args.unknown)
    if gran == "full":
        return full_recompute(val("model.recompute_method"), _int_at(val, "model.recompute_num_layers"), notes)
    if gran not in (None, "null"):
        raise PlannerError(f"model.recompute_granularity={gran!r}: Megatron-Core accepts full, selective or null.")
    return "none"


def _offload(val, notes: list[str]) -> str:
    """OptimizerConfig.optimizer_cpu_offload / optimizer_offload_fraction (megatron/core/optimizer/
    optimizer_config.py; a fraction under 1 is modeled as all) and TransformerConfig's
    fine_grained_activation_offloading / cpu_offloading (both modeled as activation offload)."""
    opt_off = bool(val("optimizer.optimizer_cpu_offload", False))
    frac = val("optimizer.optimizer_offload_fraction", 0.0 if opt_off else None)
    if opt_off and (frac is None or float(frac) < 1.0):
        notes.append(f"optimizer.optimizer_offload_fraction={frac} (Bridge's default is 0.0) modeled as offloading "
                     "all of the optimizer")
    act_off = bool(val("model.fine_grained_activation_offloading", False)) or bool(val("model.cpu_offloading", False))
    if val("model.cpu_offloading", False):
        notes.append("model.cpu_offloading (layer-level offload) modeled as offload=activations")
    return str(Offload(optimizer=opt_off, activations=act_off))


def _precision(args: BridgeArgs, val, notes: list[str]) -> tuple[str, str]:
    """(precision, Adam moments' dtype): the mixed-precision preset (MixedPrecisionConfig,
    megatron/bridge/training/mixed_precision.py), then OptimizerConfig's exp_avg_dtype, exp_avg_sq_dtype
    and main_grads_dtype (the precision-aware optimizer; default fp32)."""
    given = args.values
    mp_name = mixed_precision_name(args, val)
    if mp_name == "fp32":
        # The dtype the model config keeps without a mixed-precision config: bf16 / fp16 when
        # the YAML's model section says so (its params_dtype), else TransformerConfig's fp32.
        mp_name = "bf16_mixed" if _model_half(given) else "fp32"
    # The NVFP4 presets (bf16_with_nvfp4_mixed, nemotron_3_super_bf16_with_nvfp4_mixed: fp4='e2m1',
    # fp4_recipe='nvfp4', src/megatron/bridge/training/mixed_precision.py) train NVFP4.
    fp4 = "fp4" in mp_name
    precision = "nvfp4" if fp4 else "fp8" if "fp8" in mp_name else "fp32" if mp_name == "fp32" else "bf16"
    if fp4 and mp_name != "bf16_with_nvfp4_mixed":
        notes.append(f"mixed_precision={mp_name} modeled as bf16_with_nvfp4_mixed (the NVFP4 recipe on every linear layer)")
    if "fp8" in mp_name and fp8_preset_recipe(mp_name) is None:
        notes.append(f"mixed_precision={mp_name}: planner models the hardware's FP8 recipe (blockwise on Hopper, "
                     "MXFP8 on Blackwell)")
    if mp_name.startswith("fp16"):
        notes.append("fp16 mixed precision modeled as bf16 (same bytes)")
    if args.kind == "yaml" and isinstance(given.get("mixed_precision.fp8"), str):
        precision = "fp8"
    if args.kind == "yaml" and isinstance(given.get("mixed_precision.fp4"), str):
        precision = "nvfp4"
    m1 = _DTYPES.get(str(val("optimizer.exp_avg_dtype", "fp32")), "fp32")
    m2 = _DTYPES.get(str(val("optimizer.exp_avg_sq_dtype", "fp32")), "fp32")
    moments = "bf16" if (m1, m2) == ("bf16", "bf16") else "fp32"
    if {m1, m2} != {moments}:
        notes.append("Adam moment dtypes other than both-fp32 or both-bf16 modeled as fp32")
    if _DTYPES.get(str(val("optimizer.main_grads_dtype", "fp32")), "fp32") != "fp32":
        notes.append("bf16 main gradients (precision-aware optimizer) modeled as fp32 gradients")
    return precision, moments


_FSDP_SHARDING = {"optim_grads_params": "fsdp", "optim_grads": "zero2", "optim": "dist_opt", "no_shard": "ddp"}
"""Megatron FSDP's data_parallel_sharding_strategy values (DistributedDataParallelConfig,
megatron/core/distributed/distributed_data_parallel_config.py) as planner's sharding."""


def _sharding(args: BridgeArgs, val, notes: list[str]) -> tuple[str, int]:
    """(sharding, the instances it shards over): DistributedDataParallelConfig's use_megatron_fsdp
    (with data_parallel_sharding_strategy), use_distributed_optimizer (Bridge also takes
    OptimizerConfig.use_distributed_optimizer) and num_distributed_optimizer_instances."""
    instances = _int_at(val, "ddp.num_distributed_optimizer_instances", 1) or 1
    if val("ddp.use_megatron_fsdp", False):
        # A recipe's DDP config sets optim_grads_params (recipes/common.py _pretrain_common); a whole
        # ConfigContainer without the field has MCore DistributedDataParallelConfig's 'no_shard'.
        strategy = val("ddp.data_parallel_sharding_strategy", "no_shard" if args.kind == "yaml" else "optim_grads_params")
        sharding = _FSDP_SHARDING.get(str(strategy))
        if sharding is None:
            raise PlannerError(f"ddp.data_parallel_sharding_strategy={strategy}: Megatron FSDP accepts no_shard, "
                               "optim, optim_grads or optim_grads_params.")
        return sharding, instances
    if val("ddp.use_distributed_optimizer", val("optimizer.use_distributed_optimizer", False)):
        if instances > 1:
            notes.append(f"partial distributed optimizer ({instances} instances) modeled as dist_opt over all of DP")
        return "dist_opt", 1
    return "ddp", 1


def _dispatcher(val, model, notes: list[str]) -> str | None:
    """A MoE's token dispatcher: TransformerConfig.moe_token_dispatcher_type (default "allgather",
    modeled as alltoall) and, for "flex", moe_flex_dispatcher_backend (default "deepep"; ncclep
    modeled as deepep). None for a dense model."""
    if not model.is_moe:
        return None
    kind = val("model.moe_token_dispatcher_type", "allgather")
    if kind == "flex":
        dispatcher = str(val("model.moe_flex_dispatcher_backend", "deepep") or "deepep")
        if dispatcher == "ncclep":
            notes.append("ncclep flex backend modeled as deepep")
            dispatcher = "deepep"
        return dispatcher
    if kind != "alltoall":
        notes.append(f"{kind} token dispatcher modeled as alltoall")
    return "alltoall"


def _ep_overlap(args: BridgeArgs) -> str:
    """Expert-parallel communication overlap as the launch gives it (no recipe default): a recipe with a
    CommOverlapConfig (megatron/bridge/training/comm_overlap.py) takes it there, else on the model;
    'wgrad' with delay_wgrad_compute (CommOverlapConfig / TransformerConfig) as well."""
    given = args.values
    on_comm = has_comm_overlap(args.recipe or "") is not False
    where = "comm_overlap" if on_comm else "model"
    on = bool(given.get(f"{where}.overlap_moe_expert_parallel_comm", given.get("model.overlap_moe_expert_parallel_comm", False)))
    delay = bool(given.get(f"{where}.delay_wgrad_compute", given.get("model.delay_wgrad_compute", False)))
    return ("wgrad" if delay else "on") if on else "off"


def _seq_len(given: dict, val) -> int | None:
    """The sequence length: the launch's dataset.seq_length (GPTDatasetConfig), else its model.seq_length,
    else the recipe's dataset.seq_length."""
    seq = _int({"dataset.seq_length": given.get("dataset.seq_length", given.get("model.seq_length"))},
               "dataset.seq_length")
    if seq is None:
        seq = _int_at(val, "dataset.seq_length")
    return seq


def grad_dtypes(args: BridgeArgs, precision: str, sharding: str) -> tuple[str, str]:
    """(grad_reduce, param_gather) of a whole ConfigContainer YAML, whose mixed_precision section
    holds the fields MixedPrecisionConfig.setup copies onto the DDP config (grad_reduce_in_fp32,
    fp8_param_gather / fp8_param: megatron/bridge/training/mixed_precision.py, v0.6.0). A launch
    built from a recipe names its preset, and every bf16 preset reduces in fp32; its FP8 gather is
    the preset's (planner writes only the Hopper one, which gathers bf16), read as bf16. FP8
    gathers need FP8 weights and a sharded optimizer, as in the Megatron reader."""
    given = args.values
    if args.kind != "yaml" or isinstance(given.get("mixed_precision"), str):
        return "fp32", "bf16"  # the preset decides: setup() overwrites the ddp.* fields with its own
    fp32 = given.get("mixed_precision.grad_reduce_in_fp32", given.get("ddp.grad_reduce_in_fp32", True))
    gather = given.get("mixed_precision.fp8_param_gather", given.get("ddp.fp8_param_gather", False))
    fp8_gather = gather is True and precision == "fp8" and sharding != "ddp"
    fp4 = given.get("mixed_precision.fp4_param_gather", given.get("ddp.fp4_param_gather", False))
    fp4_gather = fp4 is True and precision == "nvfp4" and sharding != "ddp"
    return ("fp32" if fp32 is not False else "bf16"), ("fp8" if fp8_gather else "fp4" if fp4_gather else "bf16")


def _classify(args: BridgeArgs) -> None:
    for key in args.values:
        if key in USED or key.startswith("model.") and key.split(".", 1)[1] in _ARCHITECTURE:
            continue
        if key in _IGNORED or key.startswith(_IGNORED_PREFIXES) or (key.startswith("dataset.") and key != "dataset.seq_length"):
            args.ignored.append(key)
        elif args.kind == "yaml":
            continue  # a whole ConfigContainer holds every field: only those planner reads matter
        else:
            args.unknown.append(f"{key} (not modeled by planner)")


_ARCHITECTURE = {"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                 "kv_channels", "num_moe_experts", "moe_ffn_hidden_size", "moe_router_topk", "vocab_size",
                 "moe_shared_expert_intermediate_size", "q_lora_rank", "kv_lora_rank"}


def _yaml_model(args: BridgeArgs):
    """The catalog model a whole-ConfigContainer YAML's model section describes (layers, width,
    heads, experts), or None."""
    v = args.values
    if v.get("model.num_layers") is None or v.get("model.hidden_size") is None:
        return None
    found = {}
    for name in catalog_names("models"):
        m = load_model(name)
        experts = m.moe.num_experts if m.moe else None
        if (m.num_layers, m.hidden_size, m.attention.num_heads, m.ffn.hidden_size) == (
                v.get("model.num_layers"), v.get("model.hidden_size"), v.get("model.num_attention_heads"),
                v.get("model.ffn_hidden_size", m.ffn.hidden_size)) and experts == (v.get("model.num_moe_experts") or None):
            found[m.name] = m
    return next(iter(found.values())) if len(found) == 1 else None


def read_source(source) -> tuple[str, str]:
    if not isinstance(source, Path):
        return source, "<file>"

    return read_text(source, "Megatron-Bridge launch", MAX_SCRIPT_BYTES), str(source)


def job_from_bridge(source, *, model: str | None = None, hw: str | None = None, gpus: int | None = None,
                    global_batch: int | None = None, seq_len: int | None = None, precision: str | None = None,
                    job_file=None, domain_fill: int | None = None, memory_margin_gib: float | None = None,
                    environ: dict | None = None, script_args=()) -> BridgeJob:
    """Read a Bridge launch (a Path, or its text) into the model, hardware, job and plan it runs;
    options given here win over what the file says."""
    text, label = read_source(source)
    args = read_bridge_text(text, label, environ, script_args)
    _classify(args)
    if model:
        m, model_source = load_model(model), "--model"
    else:
        name = model_for_recipe(args.recipe) if args.recipe else None
        m = load_model(name) if name else (_yaml_model(args) if args.kind == "yaml" else None)
        model_source = f"recipe {args.recipe}" if name else "the YAML's model section"
        if m is None:
            what = f"the recipe {args.recipe!r} is not one planner knows" if args.recipe else "it names no recipe"
            raise PlannerError(f"planner cannot tell which model '{label}' trains: {what}.",
                               hint="Pass --model (a catalog name, model YAML or config.json).")
    if args.recipe and args.recipe not in RECIPE_DEFAULTS and args.kind != "yaml":
        args.notes.append(f"{args.recipe} is not a recipe planner knows the defaults of: what the file leaves out is "
                          "read as Megatron-Core's default")
    h, hardware_source = launch_hardware(hw, m, "the launch", text=text, recipe=args.recipe)
    plan_map, job_map, notes, defaults_used = plan_values(args, m)
    world_source: str | None
    world, world_source = gpus, "--gpus"
    if world is None:
        world, world_source = launch_world(args.launcher, args.env, text)
    missing = [opt for key, opt, have in (("gpus", "--gpus", world), ("seq_len", "--seq-len", seq_len or job_map["seq_len"]))
               if have is None]
    if missing:
        raise PlannerError(f"The launch does not give the value of {' or '.join(missing)}.",
                           hint="Pass " + " and ".join(missing) + ".")
    gbs = global_batch or job_map["global_batch"]
    tp, pp, cp = plan_map["tp"], plan_map["pp"], plan_map["cp"]
    if gbs is None and world % (tp * pp * cp) == 0:
        gbs = plan_map["mbs"] * (world // (tp * pp * cp))
    instances = job_map["_instances"]
    if plan_map["sharding"] == "fsdp" and instances > 1 and world % (tp * pp) == 0:
        plan_map["sharding"] = f"hsdp:{world // (tp * pp) // instances}"
    if job_map["precisions"] == ["fp32"]:
        if precision is None:
            raise PlannerError(
                f"'{label}' trains in fp32: it is a whole ConfigContainer without a mixed-precision config "
                "(mixed_precision absent or null: ConfigContainer's default None) and its model section keeps fp32 "
                "parameters. planner models bf16, fp8 and nvfp4 training only, so it cannot predict this run.",
                hint="Add mixed_precision: bf16_mixed to the file if that is what you meant to run, or pass "
                "--precision bf16 to have planner cost it as bf16 training.")
        notes.append(f"the launch trains in fp32 (no mixed-precision config); costed as --precision {precision}")
    j = resolve_job(m, gpus=world, global_batch=gbs, seq_len=seq_len or job_map["seq_len"],
                    precision=precision or ",".join(job_map["precisions"]), job_file=job_file,
                    domain_fill=domain_fill, memory_margin_gib=memory_margin_gib)
    plan = Plan.from_mapping({k: v for k, v in plan_map.items() if v is not None})
    canon = export_canonical(plan, m, h, j)
    return BridgeJob(label, args, m, model_source, h, hardware_source, j, canon,
                     list(args.notes) + notes + header_disagreement(text, h, j.gpus), defaults_used,
                     launch_assumptions(args), world_source or "--gpus")
