"""Write tests/data/published_runs.yaml from the research data set of published runs.

    python scripts/import_published_runs.py /path/to/research/runs.yaml [--zoo PATH-TO-ModelZoo-git-dir]

The research file (369 runs, each with its source, software version, degrees, the levers its
recipe sets and its measured numbers) was collected from stored snapshots of Megatron-Bridge,
Megatron-LM, Megatron-MoE-ModelZoo, torchtitan, MLPerf and the DeepSeek report; its NOTES.md says
how. This script selects runs (the rule is in HEADER), turns each into the runs-file schema
(planner/validate/runs.py), and writes the launch arguments as Megatron-LM flags:

- Megatron-Bridge rows: the recipe's config fields translated field for flag (a Bridge field
  ``section.name`` is Megatron-LM's argparse dest ``name`` in nearly every case: the flag is the
  one planner's flag table gives for that dest; the few renamed fields are in BRIDGE_RENAMED).
  Architecture flags are not in the recipe (the model provider sets them): those runs name the
  catalog model.
- Megatron-MoE-ModelZoo rows: the model YAML's MODEL_ARGS plus what sbatch_benchmarking.sh adds for
  the row's DISPATCHER / PR / A2A_OVERLAP, plus the row's extra command-line flags (the ModelZoo
  repository at the commit given in ZOO_COMMIT).
- The Megatron-LM DeepSeek-V3 GB200 guide: its published launch script (the last step); the
  earlier steps are planner plan strings with the levers the guide's text states.

It also applies the calibration rule and writes the flags. Run it again after changing it; do not
edit the output by hand.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.launchers.megatron.flags import FLAGS  # noqa: E402

OUT = ROOT / "tests" / "data" / "published_runs.yaml"
ZOO_COMMIT = "e8650517d60d71ab73fc6b3b0388cac4ba435181"
ZOO_MODEL_YAML = "model_configs/benchmarking/Qwen3-235B-A22B.yaml"

HW = {"h100": "h100", "h200": "h200", "h800": "h800", "b200": "b200", "b300": "b300",
      "gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}
# Research model names -> planner catalog names (None: not in the catalog).
MODELS = {
    "deepseek-v3": "deepseek-v3", "kimi-k2": "kimi-k2", "qwen3-235b-a22b": "qwen3-235b-a22b",
    "qwen3-30b-a3b": "qwen3-30b-a3b", "gpt-oss-120b": "gpt-oss-120b", "llama3.1-405b": "llama3.1-405b",
    "llama3-70b": "llama3.1-70b", "llama3-8b": "llama3.1-8b", "llama3.1-8b": "llama3.1-8b",
    "llama3.1-70b": "llama3.1-70b", "llama4-scout": "llama4-scout",
}
LLAMA3_NOTE = ("Llama 3 (not 3.1) in the source: the same architecture as the catalog's Llama 3.1 entry except the "
               "RoPE frequency scaling, which changes neither memory nor time.")

SCOUT_NOTE = (
    "Plan as the doc's Parallelisms list gives it (EP 16 on the routed experts, FSDP over all 256 GPUs elsewhere, no "
    "activation checkpointing); dispatcher=alltoall and ep_overlap=off because the doc's torchtitan commit predates "
    "expert_parallel_comm_backend (only the standard all-to-all dispatch) and torchtitan has no EP overlap schedule. "
    "Incomplete for planner in two ways. The doc's 'FSDP 256/4=64 on routed experts' is not the efsdp 256/16 = 16 that "
    "torchtitan's ParallelDims builds for EP 16. Local batch 10 x 8192 tokens without activation checkpointing is far "
    "over a GB200's 186 GB in planner's memory model (about 770 GiB predicted), and the doc does not say how the local "
    "batch was split into micro-batches, so the prediction is of the plan as written.")

SCOUT_INCOMPLETE = (
    "the configuration as published cannot have run as planner would cost it: a local batch of 10 x 8192 tokens "
    "without activation checkpointing is about 770 GiB a GPU in planner's memory model (a GB200 holds 186 GB), and the "
    "doc states neither how that batch was split into micro-batches nor the expert FSDP that torchtitan's ParallelDims "
    "builds (it says 64; EP 16 on 256 GPUs gives 16): a prediction of the plan as written would measure the gap, "
    "not the model (evaluated that way: +65 % bf16, +73 % MXFP8)")

HEADER = """\
# Published training runs with their launch settings and measured throughput: what `planner validate`
# compares planner's predictions with (results/validation/published-runs.md is generated from this file).
#
# Written by scripts/import_published_runs.py from a research data set of 369 published runs (sources read
# from stored public snapshots; each run names its source, commit and table row). Edit the script, not
# this file.
#
# Schema (planner/validate/runs.py; a user's own runs file uses the same keys):
#   name, source {where, commit, row}, software (container / commit), software_profile (the planner software
#   profile of the release the software states, software/<name>.yaml; absent: the launcher's default), confidence (H: primary source read and
#   settings matched exactly; M: derived or partly stated; L: unsure), hardware (catalog name), model (catalog
#   name, or a description when planner's catalog lacks it), model_overrides (ModelSpec fields, e.g. the MTP
#   depth the run trained with), gpus, global_batch (sequences), seq_len, precision (bf16 | fp8 | nvfp4),
#   plan (planner plan string, the keys the source states), megatron_args (the Megatron-LM launch: a script
#   or a flag list; read through planner's launch reader, the same as `planner check --megatron-args`),
#   args_origin (where the flags come from), assumptions (planner Assumptions fields the run sets:
#   tp_comm_overlap, dp_overlap, routing_imbalance, expandable_segments), not_modeled (the run's levers
#   planner cannot express yet, as data), measured (as published; *_derived computed from published
#   numbers), flops_convention (megatron: Megatron-LM's num_floating_point_operations, which planner
#   computes; per_token: the source's FLOPs per token, implied by its TFLOP/s over its tokens/s; none),
#   series (runs of one configuration across software versions or optimization steps), calibration,
#   not_evaluable (why planner cannot evaluate the run; the validator prints it), notes.
#
# Where both `plan` and `megatron_args` are given, the validator evaluates the plan read from the flags
# and reports every key of `plan` that the reader reads differently (a reader or import bug).
#
# Selection (chosen before any prediction was computed):
#   - Megatron-Bridge performance tables (25.11 to 26.08 containers), the rows joined exactly to their
#     recipe (confidence H), pre-training only: for every (model, system, precision recipe) the oldest and
#     the newest container that has the row; every container for the DeepSeek-V3 GB200 and GB300 layouts
#     (the software-version series); one newest row per model or precision planner cannot evaluate
#     (Nemotron 3, DeepSeek-V4, NVFP4), so the report shows why.
#   - The 25.09 DeepSeek-V3 H100 rows and the 25.11 rows that the previous version of this file held (their
#     levers are not stated: confidence M).
#   - Every step of the Megatron-LM DeepSeek-V3 GB200 guide; every Megatron-MoE-ModelZoo Qwen3-235B row.
#   - torchtitan: every Llama row of its published benchmarks (per-op selective activation checkpointing
#     and an unstated interleaving are recorded as not evaluable), Llama 4 Scout (its EP 16 from the doc's
#     Parallelisms list; the all-to-all dispatch, the only one at the doc's commit).
#     Its H100 rows (torch of 2024-12 and 2025-06) set attention_kernel: flash2: torchtitan's sdpa
#     attention ran PyTorch's FlashAttention-2 backend there, not Transformer Engine's cuDNN kernel
#     (an input from the launcher and software the run names; the H200 and Blackwell rows, on newer
#     torch, keep the default). Those H100 rows ran on Meta's Grand Teton H100 (96 GB HBM2e at 2.4 TB/s,
#     500 W, its published hardware): hardware h100-96gb-500w.
#   - The Llama 3 paper's Table 4, the DeepSeek-V3 report, MLPerf v5.1 Llama 3.1 405B, the Megatron-Core
#     MoE report's headline numbers.
#
# Calibration subset (the rule, applied by the import script before any prediction was computed; nothing
# is fitted to the other runs): classes are (MoE | dense) x (Hopper | Blackwell) x (bf16 | fp8). Within
# each class, take the evaluable runs of confidence H in name order and flag every third one starting with
# the second (positions 2, 5, 8, ...); a class with fewer than two such runs gets none. That is at most a
# third of the evaluable runs and spreads over sources and software versions. Constants may be fitted
# only on runs with `calibration: true`; the report shows the calibration and the validation subsets
# separately.
#
# Class summaries count each configuration once: a run of a `series` whose planner inputs (model, hardware,
# job, plan, assumptions) equal those of a later run of the same series is listed in its series but left
# out of the class statistics (the validator decides this from the inputs, not from the errors).
"""


# ---------------------------------------------------------------------------------------------
# Megatron-Bridge config fields -> Megatron-LM flags
# ---------------------------------------------------------------------------------------------
BRIDGE_SECTIONS = ("model", "ddp", "optimizer", "comm_overlap", "train")
# Bridge fields whose Megatron-LM argparse dest has another name.
BRIDGE_RENAMED = {
    "num_layers_in_first_pipeline_stage": "decoder_first_pipeline_num_layers",
    "num_layers_in_last_pipeline_stage": "decoder_last_pipeline_num_layers",
    "cuda_graph_scope": "cuda_graph_scope_deprecated",
    "virtual_pipeline_model_parallel_size": "num_virtual_stages_per_pipeline_rank",
    "seq_length": "seq_length",
}
# Fields that are no launch lever (or that the Bridge sets for its own bookkeeping).
BRIDGE_SKIP = {
    "init_method_std", "load_weights", "pipeline_dtype", "should_pad_vocab", "train_iters", "eval_iters",
    "eval_interval", "manual_gc_eval", "lr", "min_lr", "adam_beta1", "adam_beta2", "adam_eps", "weight_decay",
    "clip_grad", "bf16", "fp16", "rotary_base", "rotary_scaling_factor", "check_for_large_grads",
    "check_for_nan_in_grad", "average_in_collective", "tp_comm_overlap_cfg", "tp_comm_bootstrap_backend",
    "mtp_loss_scaling_factor",
}

TRUE_FLAG: dict[str, str] = {}
FALSE_FLAG: dict[str, str] = {}
VALUE_FLAG: dict[str, tuple[str, object]] = {}
for _opt, (_dest, _arity) in FLAGS.items():
    if _arity == 0:
        on = not _opt.startswith(("--no-", "--disable-")) or _dest.startswith(("no_", "disable_"))
        (TRUE_FLAG if on else FALSE_FLAG).setdefault(_dest, _opt)
    else:
        VALUE_FLAG.setdefault(_dest, (_opt, _arity))


def _literal(text: str):
    text = text.strip()
    m = re.fullmatch(r"torch\.(\w+)", text)
    if m:
        return {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}.get(m.group(1), m.group(1))
    if text.startswith(("megatron.", "<")):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def bridge_fields(args_text: str) -> tuple[dict[str, object], dict[str, object], dict]:
    """(section.field -> value, mixed_precision fields, env vars) of a research `args` blob."""
    fields, mp, env = {}, {}, {}
    for line in args_text.splitlines():
        key, eq, value = line.partition("=")
        if not eq:
            continue
        if key == "mixed_precision":
            body = value[value.index("(") + 1: value.rindex(")")]
            for part in re.findall(r"(\w+)=('[^']*'|[^,]+)", body):
                mp[part[0]] = _literal(part[1])
        elif key == "env_vars":
            env = ast.literal_eval(value)
        else:
            fields[key] = _literal(value)
    layout = fields.get("model.pipeline_model_parallel_layout")
    if isinstance(layout, list):
        fields["model.pipeline_model_parallel_layout"] = layout_string(layout)
    return fields, mp, env


LAYOUT_SYMBOLS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


def layout_string(stages: list[list[str]]) -> str:
    """Megatron's list-of-stages layout (what a Bridge recipe sets) as the --pipeline-model-parallel-layout string."""
    return "|".join("".join(LAYOUT_SYMBOLS[x] for x in stage) for stage in stages)


def _emit(argv: list[str], dest: str, value) -> bool:
    if value is None or value == [] or value == "":
        return False
    if isinstance(value, bool):
        flag = TRUE_FLAG.get(dest) if value else FALSE_FLAG.get(dest)
        if flag:
            argv.append(flag)
            return True
        return False
    if dest not in VALUE_FLAG:
        return False
    opt, arity = VALUE_FLAG[dest]
    values = value if isinstance(value, (list, tuple)) else [value]
    argv.append(opt)
    argv.extend(_shell(str(v)) for v in values)
    return True


def _shell(word: str) -> str:
    return word if re.fullmatch(r"[A-Za-z0-9_.,:+\-/=]+", word) else "'" + word.replace("'", "'\\''") + "'"


def bridge_argv(fields: dict, mp: dict, gbs: int) -> list[str]:
    """Megatron-LM flags for a Megatron-Bridge recipe's fields."""
    argv: list[str] = []
    layout = fields.get("model.pipeline_model_parallel_layout")
    for key in sorted(fields):
        section, _, name = key.partition(".")
        if section not in BRIDGE_SECTIONS or name in BRIDGE_SKIP:
            continue
        value = fields[key]
        if name == "virtual_pipeline_model_parallel_size" and (layout or not value or value == 1):
            continue
        if name == "global_batch_size":
            value = gbs
        if name == "optimizer" and value == "adam":
            continue
        if section == "optimizer" and name in ("use_distributed_optimizer", "overlap_param_gather_with_optimizer_step"):
            continue  # the ddp section sets the same ones
        if section == "comm_overlap" and name in ("overlap_grad_reduce", "overlap_param_gather"):
            continue
        if name == "recompute_granularity" and (value is None or (
                value == "selective" and fields.get("model.recompute_modules") == [])):
            continue  # selective with no modules: nothing is recomputed (Megatron's default list is core_attn)
        if name == "grad_reduce_in_fp32":
            if value is False:
                argv.append("--grad-reduce-in-bf16")
            continue
        dest = BRIDGE_RENAMED.get(name, name)
        _emit(argv, dest, value)
    # mixed precision
    if mp.get("bf16"):
        argv.append("--bf16")
    if mp.get("fp8"):
        argv += ["--fp8-format", str(mp["fp8"]), "--fp8-recipe", str(mp.get("fp8_recipe") or "delayed")]
        if mp.get("fp8_param_gather"):
            argv.append("--fp8-param-gather")
        if mp.get("reuse_grad_buf_for_mxfp8_param_ag"):
            argv.append("--reuse-grad-buf-for-mxfp8-param-ag")
        if mp.get("first_last_layers_bf16"):
            argv.append("--first-last-layers-bf16")
            for k, flag in (("num_layers_at_start_in_bf16", "--num-layers-at-start-in-bf16"),
                            ("num_layers_at_end_in_bf16", "--num-layers-at-end-in-bf16")):
                if mp.get(k):
                    argv += [flag, str(mp[k])]
    if mp.get("fp4"):
        argv += ["--fp4-format", str(mp["fp4"]), "--fp4-recipe", str(mp.get("fp4_recipe") or "nvfp4")]
        if mp.get("fp4_param_gather"):
            argv.append("--fp4-param-gather")
    return argv


def wrap(argv: list[str], width: int = 110) -> str:
    lines, cur = [], ""
    i = 0
    while i < len(argv):
        word = argv[i]
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            word += " " + argv[j]
            j += 1
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = (cur + " " + word) if cur else word
        i = j
    if cur:
        lines.append(cur)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Levers as data
# ---------------------------------------------------------------------------------------------
def recompute_string(lv: dict) -> str | None:
    gran = lv.get("recompute_granularity")
    if gran in (None, "none"):
        return "none" if "recompute_granularity" in lv else None
    if gran == "full":
        method, n = lv.get("recompute_method"), lv.get("recompute_num_layers")
        return f"full:{n}" if method == "block" and n else "full"
    mods = lv.get("recompute_modules")
    if mods is None:
        return "core_attn"
    mods = [{"up_proj": "mla_up_proj"}.get(m, m) for m in mods]
    return "+".join(mods) if mods else "none"


def dispatcher_of(lv: dict, is_moe: bool) -> str | None:
    if not is_moe:
        return None
    kind = lv.get("moe_token_dispatcher_type")
    if kind == "flex":
        return lv.get("moe_flex_dispatcher_backend") or "deepep"
    if kind in ("alltoall", "allgather"):
        return "alltoall"
    return "alltoall"  # Megatron-Bridge model providers default moe_token_dispatcher_type to 'alltoall'


def cuda_graphs_of(lv: dict) -> str | None:
    eff = lv.get("cuda_graphs_effective")
    impl = lv.get("cuda_graph_impl")
    scope = lv.get("cuda_graph_scope")
    if isinstance(eff, str) and eff.startswith("full"):
        return "full_iteration"
    if impl in ("transformer_engine", "local") or (isinstance(eff, str) and eff not in ("none", "?")):
        kind = "te" if impl == "transformer_engine" or (isinstance(eff, str) and eff.startswith("transformer")) else "local"
        if isinstance(scope, list) and scope:
            return f"{kind}: {'+'.join(scope)}"
        return f"{kind}: per-layer (scope not stated)" if isinstance(scope, str) else f"{kind}: whole layer"
    if eff == "none" or impl in (None, "none"):
        return "none" if ("cuda_graphs_effective" in lv or "cuda_graph_impl" in lv) else None
    return str(eff)


def not_modeled_of(lv: dict, is_moe: bool, precision: str, fp8_recipe: str | None) -> dict:
    out: dict = {}
    cg = cuda_graphs_of(lv)
    if cg is not None:
        out["cuda_graphs"] = cg
    if lv.get("moe_paged_stash"):
        out["paged_stash"] = {"expert_rank_capacity_factor": lv.get("moe_expert_rank_capacity_factor"),
                              "buffer_factor_cuda": lv.get("moe_paged_stash_buffer_size_factor_cuda"),
                              "buffer_factor_cpu": lv.get("moe_paged_stash_buffer_size_factor_cpu")}
    elif lv.get("moe_expert_rank_capacity_factor"):
        out["expert_rank_capacity_factor"] = lv["moe_expert_rank_capacity_factor"]
    if lv.get("fine_grained_activation_offloading"):
        out["offload_modules"] = list(lv.get("offload_modules") or [])
    if lv.get("cpu_offloading"):
        out["layer_offload"] = {"layers": lv.get("cpu_offloading_num_layers"),
                                "weights": bool(lv.get("cpu_offloading_weights"))}
    if lv.get("delay_wgrad_compute"):
        out["delay_wgrad_compute"] = True
    if is_moe and lv.get("moe_hybridep_num_sms") and lv.get("moe_flex_dispatcher_backend") == "hybridep":
        out["hybridep_sms"] = lv["moe_hybridep_num_sms"]
    if precision == "fp8" and fp8_recipe:
        out["fp8_recipe"] = fp8_recipe
    fpg = lv.get("mixed_precision.fp8_param_gather", lv.get("fp8_param_gather"))
    if precision == "fp8" and fpg:
        out["fp8_param_gather"] = True
    grad32 = lv.get("ddp.grad_reduce_in_fp32", lv.get("mixed_precision.grad_reduce_in_fp32"))
    if grad32 is False:
        out["grad_reduce_in_bf16"] = True
    if lv.get("use_precision_aware_optimizer"):
        out["precision_aware_optimizer"] = {"main_grads": lv.get("main_grads_dtype"),
                                            "main_params": lv.get("main_params_dtype")}
    if lv.get("optimizer") not in (None, "adam"):
        out["optimizer"] = lv["optimizer"]
    fused = []
    for key, label in (("moe_permute_fusion", "permute"), ("moe_router_fusion", "router"),
                       ("cutedsl_fused_grouped_mlp", "cutedsl_grouped_mlp"),
                       ("use_transformer_engine_op_fuser", "te_op_fuser")):
        if is_moe and lv.get(key):
            fused.append(label)
    if fused:
        out["fusions"] = fused
    if lv.get("mixed_precision.fp8_dot_product_attention"):
        out["fp8_attention"] = True
    if lv.get("fp8_output_proj"):
        out["fp8_output_proj"] = True
    if is_moe and lv.get("moe_shared_expert_overlap"):
        out["shared_expert_overlap"] = True
    if lv.get("high_priority_a2a_comm_stream"):
        out["high_priority_a2a_stream"] = True
    if lv.get("cpu_binding"):
        out["cpu_binding"] = lv["cpu_binding"]
    env = lv.get("env_vars") or {}
    keep = {k: env[k] for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN",
                                "NVTE_CUTEDSL_FUSED_GROUPED_MLP") if k in env}
    if keep:
        out["env"] = keep
    return out


def fp8_recipe_of(precision_text: str, lv: dict) -> str | None:
    rec = lv.get("mixed_precision.fp8_recipe")
    if rec:
        return {"tensorwise": "tensorwise (per-tensor current scaling)"}.get(rec, rec)
    t = precision_text.lower()
    if "mxfp8" in t:
        return "mxfp8"
    if "per-tensor" in t or "tensorwise" in t or "fp8-cs" in t:
        return "tensorwise (per-tensor current scaling)"
    if "rowwise" in t:
        return "rowwise"
    if "blockwise" in t or "128x128" in t or "1x128" in t:
        return "blockwise"
    return None


def precision_of(text: str) -> str:
    t = text.lower()
    if "nvfp4" in t or t.startswith("fp4"):
        return "nvfp4"
    if "fp8" in t or "float8" in t:
        return "fp8"
    return "bf16"


def source_of(text: str) -> dict:
    m = re.search(r"@ ?([0-9a-f]{7,40})", text)
    where, _, row = text.partition(":")
    return {"where": where.split(" @")[0].strip(), "commit": m.group(1) if m else None, "row": row.strip() or None}


def measured_of(meas: dict) -> dict:
    keep = {}
    for k in ("tokens_per_s_per_gpu", "tflops_per_gpu", "step_time_s", "step_time_s_derived", "mfu", "memory_gib"):
        if meas.get(k) is not None:
            keep[{"memory_gib": "peak_reserved_gib"}.get(k, k)] = meas[k]
    return keep


def container_key(name: str) -> int:
    tag = name.split("-")[0][2:]
    return int(tag) * 100 if len(tag) == 4 else int(tag)


# ---------------------------------------------------------------------------------------------
# Rows of each source
# ---------------------------------------------------------------------------------------------
def plan_string(parts: dict) -> str:
    order = ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs", "sharding", "recompute", "offload", "precision", "moments",
             "dispatcher", "ep_overlap", "layout")
    return ",".join(f"{k}={parts[k]}" for k in order if parts.get(k) is not None)


def mb_run(r: dict, series: str | None) -> dict:
    lv = r.get("levers") or {}
    model = MODELS.get(r["model"])
    prec = precision_of(r["precision"])
    is_moe = r["model_class"] == "moe"
    g = r["degrees"]
    fields, mp, env = bridge_fields(r.get("args") or "")
    rec = fp8_recipe_of(r["precision"], lv)
    parts = {
        "tp": g.get("tp"), "cp": g.get("cp"), "pp": g.get("pp"),
        "vpp": g.get("vpp") if (g.get("vpp") or 1) > 1 else None,
        "ep": g.get("ep") if is_moe else None,
        "etp": fields.get("model.expert_tensor_parallel_size") if is_moe else None,
        "mbs": r["micro_batch"],
        "precision": prec if prec != "nvfp4" else None,
        "recompute": recompute_string(lv),
        "dispatcher": dispatcher_of(lv, is_moe),
        "ep_overlap": ("on" if lv.get("overlap_moe_expert_parallel_comm") else "off") if is_moe else None,
        "moments": "bf16" if lv.get("exp_avg_dtype") == "bf16" and lv.get("exp_avg_sq_dtype") == "bf16" else None,
        "layout": fields.get("model.pipeline_model_parallel_layout") or None,
    }
    if lv.get("use_megatron_fsdp"):
        parts["sharding"] = {"optim_grads_params": "fsdp", "optim_grads": "zero2", "optim": "dist_opt"}.get(
            lv.get("data_parallel_sharding_strategy"), "fsdp")
    if lv.get("fine_grained_activation_offloading") or lv.get("cpu_offloading"):
        parts["offload"] = "activations"
    run = {
        "name": r["name"],
        "source": source_of(r["source"]),
        "recipe": r.get("recipe_source"),
        "software": r["software"],
        "confidence": r["confidence"],
        "hardware": HW[r["gpu"]],
        "model": model or f"{r['model']} (not in planner's catalog)",
        "gpus": r["gpus"], "global_batch": r["global_batch"], "seq_len": r["seq_len"],
        "precision": prec,
    }
    without_mtp = "w/o MTP" in r["source"] or "nomtp" in r["name"]
    if without_mtp:
        # The table's "(w/o MTP)" runs disabled the recipe's MTP module.
        fields.pop("model.mtp_num_layers", None)
        if fields.get("model.pipeline_model_parallel_layout"):
            fields["model.pipeline_model_parallel_layout"] = fields["model.pipeline_model_parallel_layout"].replace("m", "")
            parts["layout"] = fields["model.pipeline_model_parallel_layout"]
    mtp = fields.get("model.mtp_num_layers")
    if model == "deepseek-v3" and not mtp:
        run["model_overrides"] = {"mtp_layers": 0}
    if is_moe and not fields.get("model.moe_token_dispatcher_type"):
        fields["model.moe_token_dispatcher_type"] = "alltoall"  # the model provider's default (see dispatcher_of)
    run["plan"] = plan_string(parts)
    if r.get("args"):
        argv = bridge_argv(fields, mp, r["global_batch"])
        run["megatron_args"] = wrap(argv)
        run["args_origin"] = ("Megatron-Bridge recipe fields (the recipe named in `recipe`, evaluated at the container's "
                              "release tag) translated field for flag to Megatron-LM flags; the model provider's "
                              "architecture is the catalog model")
    assumptions = {}
    if is_moe:
        assumptions["routing_imbalance"] = 1.0
    tpo = fields.get("comm_overlap.tp_comm_overlap")
    if (g.get("tp") or 1) > 1 and tpo is not None:
        assumptions["tp_comm_overlap"] = bool(tpo)
    if lv.get("ddp.overlap_grad_reduce") is False:
        assumptions["dp_overlap"] = False
    if assumptions:
        run["assumptions"] = assumptions
    nm = not_modeled_of({**lv, "env_vars": lv.get("env_vars") or env}, is_moe, prec, rec)
    if is_moe:
        nm["routing"] = "force-balanced, dropless (table footnote)"
    run["not_modeled"] = nm
    run["measured"] = measured_of(r["measured"])
    run["flops_convention"] = {"kind": "per_token", "flops_per_token": r["measured"].get("implied_flops_per_token"),
                               "note": "Megatron-Bridge 'Model TFLOP/sec/GPU' over its tokens/s/GPU"}
    if series:
        run["series"] = series
    reasons = []
    if model is None:
        family = r["model"].split(" (")[0]
        why = ("hybrid Mamba-Transformer MoE layers, which planner does not model" if family.startswith("nemotron")
               else "an architecture newer than the catalog")
        reasons.append(f"model {family} is not in planner's catalog ({why})")
    if reasons:
        run["not_evaluable"] = "; ".join(reasons)
    notes = [r.get("notes") or ""]
    if r["model"] in ("llama3-70b", "llama3-8b"):
        notes.append(LLAMA3_NOTE)
    run["notes"] = " ".join(n for n in notes if n).strip()
    return run


def select_mb(research: list[dict]) -> list[dict]:
    mb = [r for r in research if r["name"].startswith("mb") and r.get("args") and r["confidence"] == "H"
          and not r.get("closest_recipe_levers") and r["task"] == "pretrain" and not r["name"].startswith("mb2509")]
    groups: dict[tuple, list[dict]] = {}
    for r in mb:
        tag = r["name"].split("-", 1)[1]
        tag = re.sub(r"-gbs\d+$", "", tag)
        groups.setdefault(tag, []).append(r)
    out = []
    for tag, rows in sorted(groups.items()):
        rows.sort(key=lambda r: container_key(r["name"]))
        model = MODELS.get(rows[0]["model"])
        nvfp4 = precision_of(rows[0]["precision"]) == "nvfp4"
        series = None
        if tag in ("deepseek-v3-gb200-fp8mx-256gpu", "deepseek-v3-gb300-fp8mx-256gpu"):
            chosen, series = rows, f"mb-{tag}"
        elif model is None or nvfp4:
            continue  # one per family below
        else:
            chosen = [rows[0], rows[-1]] if len(rows) > 1 else rows
        out += [mb_run(r, series) for r in chosen]
    # One newest row per family planner cannot evaluate.
    for want in ("nemotron-3-super-gb200-fp8mx", "deepseek-v4-flash-gb200-fp8mx", "llama31-405b-gb200-nvfp4",
                 "nemotron-3-nano-h100-fp8cs"):
        rows = [r for r in mb if want in r["name"]]
        if rows:
            out.append(mb_run(max(rows, key=lambda r: container_key(r["name"])), None))
    return out


LEGACY_LAYOUTS = {
    "mb2509-deepseek-v3-h100-fp8cs-1024gpu": (
        "Et|(tt|)*30mL", "not stated; assumed the one Megatron-Bridge's DeepSeek-V3 recipes use for 32 virtual stages "
        "with MTP (the embedding with one layer, 30 stages of two, the MTP module with the loss)"),
    "mb2509-deepseek-v3-h100-fp8sc-1024gpu-alt": (
        "Et|(tt|)*30mL", "not stated; assumed as for mb2509-deepseek-v3-h100-fp8cs-1024gpu"),
    "mb2511-deepseek-v3-gb300-bf16-256gpu": (
        "Ettttttt|(tttttttt|)*5ttttttt|tttttttL", "not stated; 61 layers over 8 virtual stages need an uneven layout: "
        "planner's suggestion (seven layers on the first and the last two stages) is used"),
    "mb2511-qwen3-235b-a22b-gb300-bf16-256gpu": (
        "Et|(tt|)*46tL", "not stated; 94 layers over 48 virtual stages need an uneven layout: planner's suggestion "
        "(one layer with the embedding and one with the loss) is used"),
}


def mb_legacy(research: list[dict]) -> list[dict]:
    """25.09 DeepSeek-V3 H100 rows and the 25.11 rows of the previous file (levers not stated)."""
    names = ["mb2509-deepseek-v3-h100-fp8cs-1024gpu", "mb2509-deepseek-v3-h100-fp8sc-1024gpu-alt",
             "mb2511-deepseek-v3-gb300-bf16-256gpu", "mb2511-deepseek-v3-gb200-bf16-256gpu",
             "mb2511-qwen3-235b-a22b-gb300-bf16-256gpu"]
    by = {r["name"]: r for r in research}
    out = []
    for n in names:
        r = by[n]
        g = r["degrees"]
        is_moe = r["model_class"] == "moe"
        prec = precision_of(r["precision"])
        parts = {"tp": g.get("tp"), "cp": g.get("cp"), "pp": g.get("pp"),
                 "vpp": g.get("vpp") if (g.get("vpp") or 1) > 1 else None, "ep": g.get("ep"),
                 "mbs": r["micro_batch"], "precision": prec}
        lv = r.get("levers") or {}
        if lv.get("recompute_granularity"):
            parts["recompute"] = recompute_string(lv)
        run = {
            "name": n, "source": source_of(r["source"]), "software": r["software"], "confidence": "M",
            "hardware": HW[r["gpu"]], "model": MODELS[r["model"]], "gpus": r["gpus"],
            "global_batch": r["global_batch"], "seq_len": r["seq_len"], "precision": prec,
        }
        if "w/o MTP" in r["source"] or "nomtp" in n or "bf16" in n:
            run["model_overrides"] = {"mtp_layers": 0}
        layout, why = LEGACY_LAYOUTS.get(n, (None, None))
        if layout:
            parts["layout"] = layout
        if r.get("args"):
            fields, mp, env = bridge_fields(r["args"])
            fields.pop("model.mtp_num_layers", None)  # "(w/o MTP)"
            if fields.get("model.pipeline_model_parallel_layout"):
                fields["model.pipeline_model_parallel_layout"] = fields["model.pipeline_model_parallel_layout"].replace("m", "")
                parts["layout"] = fields["model.pipeline_model_parallel_layout"]
            parts["recompute"] = recompute_string(lv)
            parts["dispatcher"] = dispatcher_of(lv, is_moe)
            run["megatron_args"] = wrap(bridge_argv(fields, mp, r["global_batch"]))
            run["args_origin"] = ("Megatron-Bridge recipe fields translated to Megatron-LM flags; the recipe matches "
                                  "the table except where the notes say")
        run["plan"] = plan_string(parts)
        run["assumptions"] = {"routing_imbalance": 1.0}
        rec = fp8_recipe_of(r["precision"], lv)
        run["not_modeled"] = {**({"fp8_recipe": rec} if prec == "fp8" and rec else {}),
                              "levers": "not stated (table row without a matching recipe)"}
        run["measured"] = measured_of(r["measured"])
        run["flops_convention"] = {"kind": "per_token",
                                   "flops_per_token": r["measured"].get("implied_flops_per_token"),
                                   "note": "Megatron-Bridge 'Model TFLOP/sec/GPU' over its tokens/s/GPU"}
        run["notes"] = ((r.get("notes") or "").strip() + " Levers the table does not state take planner's defaults."
                        + (f" Layout: {why}." if why else ""))
        out.append(run)
    return out


def mcg_runs(research: list[dict]) -> list[dict]:
    guide = [r for r in research if r["name"].startswith("mcg-")]
    out = []
    script = GUIDE_SCRIPT
    for r in guide:
        lv = r["levers"]
        parts = {"tp": 1, "cp": 1, "pp": 8, "vpp": 4, "ep": 32, "etp": 1, "mbs": 1, "precision": "fp8",
                 "recompute": recompute_string(lv), "moments": "bf16", "dispatcher": dispatcher_of(lv, True),
                 "ep_overlap": "off", "layout": "Et|(tt|)*30L"}
        run = {
            "name": r["name"], "source": source_of(r["source"]), "software": r["software"],
            "confidence": r["confidence"], "hardware": "gb200-nvl72", "model": "deepseek-v3",
            "model_overrides": {"mtp_layers": 0}, "gpus": 256, "global_batch": 2048, "seq_len": 4096,
            "precision": "fp8", "plan": plan_string(parts),
        }
        if r["name"].endswith("step13"):
            run["megatron_args"] = script
            run["args_origin"] = ("the guide's launch script (deepseek-v3-gb200-reproduce-guide.md, Section 4), verbatim "
                                  "but for the path placeholders and the quoting of --moe-layer-freq, which bash "
                                  "needs; the architecture flags select the catalog model")
            del run["model_overrides"]  # the script's flags give the model (no --mtp-num-layers: no MTP)
        run["assumptions"] = {"routing_imbalance": 1.0}
        run["not_modeled"] = {**not_modeled_of(lv, True, "fp8", "mxfp8"), "routing": "force-balanced"}
        run["measured"] = {"tflops_per_gpu": r["measured"]["tflops_per_gpu"]}
        run["flops_convention"] = {"kind": "megatron", "note": "Megatron-LM --log-throughput (num_floating_point_operations)"}
        run["series"] = "mcg-dsv3-gb200-guide"
        run["notes"] = r["notes"]
        out.append(run)
    return out


GUIDE_SCRIPT = """\
# DeepSeek-V3 on 256 GB200 (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, reproduce guide, Section 4)
export CUDA_DEVICE_MAX_CONNECTIONS=1 NVTE_FWD_LAYERNORM_SM_MARGIN=0 NVTE_BWD_LAYERNORM_SM_MARGIN=0
export NVLINK_DOMAIN_SIZE=72 NVTE_ALLOW_NONDETERMINISTIC_ALGO=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export NCCL_NVLS_ENABLE=0 NVTE_FUSED_ATTN=1 NVTE_NORM_FWD_USE_CUDNN=1 NVTE_NORM_BWD_USE_CUDNN=1 NCCL_GRAPH_REGISTER=0
/path/to/bindpcie \\
/path/to/megatron-lm/pretrain_gpt.py \\
--distributed-timeout-minutes 60 \\
--tensor-model-parallel-size 1 \\
--pipeline-model-parallel-size 8 \\
--expert-model-parallel-size 32 \\
--context-parallel-size 1 \\
--expert-tensor-parallel-size 1 \\
--use-distributed-optimizer \\
--overlap-grad-reduce \\
--overlap-param-gather \\
--use-mcore-models \\
--sequence-parallel \\
--use-flash-attn \\
--disable-bias-linear \\
--micro-batch-size 1 \\
--global-batch-size 2048 \\
--train-samples 585937500 \\
--exit-duration-in-mins 220 \\
--no-save-optim \\
--no-check-for-nan-in-loss-and-grad \\
--cross-entropy-loss-fusion \\
--cross-entropy-fusion-impl te \\
--manual-gc \\
--manual-gc-interval 10 \\
--enable-experimental \\
--transformer-impl transformer_engine \\
--seq-length 4096 \\
--data-cache-path /path/to/data_cache \\
--tokenizer-type HuggingFaceTokenizer \\
--tokenizer-model unsloth/DeepSeek-V3 \\
--data-path /path/to/data \\
--split 99,1,0 \\
--no-mmap-bin-files \\
--no-create-attention-mask-in-dataloader \\
--num-workers 6 \\
--num-layers 61 \\
--hidden-size 7168 \\
--ffn-hidden-size 18432 \\
--num-attention-heads 128 \\
--kv-channels 128 \\
--max-position-embeddings 4096 \\
--position-embedding-type rope \\
--rotary-base 10000 \\
--make-vocab-size-divisible-by 3232 \\
--normalization RMSNorm \\
--norm-epsilon 1e-6 \\
--swiglu \\
--untie-embeddings-and-output-weights \\
--multi-latent-attention \\
--attention-dropout 0.0 \\
--hidden-dropout 0.0 \\
--clip-grad 1.0 \\
--weight-decay 0.1 \\
--qk-layernorm \\
--lr-decay-samples 584765624 \\
--lr-warmup-samples 1536000 \\
--lr-warmup-init 3.9e-7 \\
--lr 3.9e-6 \\
--min-lr 3.9e-7 \\
--lr-decay-style cosine \\
--adam-beta1 0.9 \\
--adam-beta2 0.95 \\
--num-experts 256 \\
--moe-layer-freq "([0]*3+[1]*58)" \\
--moe-ffn-hidden-size 2048 \\
--moe-shared-expert-intermediate-size 2048 \\
--moe-router-load-balancing-type seq_aux_loss \\
--moe-router-topk 8 \\
--moe-grouped-gemm \\
--moe-aux-loss-coeff 1e-4 \\
--moe-router-group-topk 4 \\
--moe-router-num-groups 8 \\
--moe-router-pre-softmax \\
--moe-router-padding-for-quantization \\
--moe-router-topk-scaling-factor 2.5 \\
--moe-router-score-function sigmoid \\
--moe-router-enable-expert-bias \\
--moe-router-bias-update-rate 1e-3 \\
--moe-router-dtype fp32 \\
--moe-permute-fusion \\
--moe-router-fusion \\
--q-lora-rank 1536 \\
--kv-lora-rank 512 \\
--qk-head-dim 128 \\
--qk-pos-emb-head-dim 64 \\
--v-head-dim 128 \\
--rotary-scaling-factor 40 \\
--mscale 1.0 \\
--mscale-all-dim 1.0 \\
--eval-iters 32 \\
--eval-interval 200 \\
--no-load-optim \\
--no-load-rng \\
--auto-detect-ckpt-format \\
--load None \\
--save /path/to/checkpoints \\
--save-interval 500 \\
--dist-ckpt-strictness log_all \\
--init-method-std 0.02 \\
--log-timers-to-tensorboard \\
--log-memory-to-tensorboard \\
--log-validation-ppl-to-tensorboard \\
--log-throughput \\
--log-interval 1 \\
--logging-level 40 \\
--tensorboard-dir /path/to/tensorboard \\
--wandb-project deepseek-v3-benchmarking-v0.15 \\
--wandb-exp-name DeepSeek-V3-TP1PP8EP32CP1VPP4-MBS1GBS2048-v0.15 \\
--bf16 \\
--enable-experimental \\
--recompute-granularity selective \\
--recompute-modules moe_act mlp \\
--cuda-graph-impl transformer_engine \\
--cuda-graph-scope attn moe_router moe_preprocess \\
--te-rng-tracker \\
--pipeline-model-parallel-layout "Et|(tt|)*30L" \\
--moe-router-force-load-balancing \\
--moe-token-dispatcher-type flex \\
--moe-flex-dispatcher-backend hybridep \\
--moe-hybridep-num-sms 32 \\
--fp8-recipe mxfp8 \\
--fp8-format e4m3 \\
--fp8-param-gather \\
--reuse-grad-buf-for-mxfp8-param-ag \\
--use-precision-aware-optimizer \\
--main-grads-dtype fp32 \\
--main-params-dtype fp32 \\
--exp-avg-dtype bf16 \\
--exp-avg-sq-dtype bf16
"""


def zoo_defaults(zoo_git: Path | None) -> list[str]:
    """The MODEL_ARGS of the ModelZoo's Qwen3-235B-A22B YAML as flags (what sbatch_benchmarking.sh
    passes: a 'true' value is a bare switch, 'false' is dropped), with the substitutions left as
    ${VAR} for the row to fill."""
    text = subprocess.run(["git", "--git-dir", str(zoo_git), "show", f"{ZOO_COMMIT}:{ZOO_MODEL_YAML}"],
                          check=True, capture_output=True, text=True).stdout
    args = yaml.safe_load(text)["MODEL_ARGS"]
    argv = []
    for key, value in args.items():
        if value is False or str(value) == "false":
            continue
        argv.append(key)
        if value is not True and str(value) != "true":
            argv.append(str(value))
    return argv


def zoo_runs(research: list[dict], zoo_git: Path) -> list[dict]:
    base = zoo_defaults(zoo_git)
    out = []
    for r in research:
        if not r["name"].startswith("zoo-"):
            continue
        g, lv = r["degrees"], r["levers"]
        tp, pp, vpp, ep, cp = g["tp"], g["pp"], g.get("vpp") or 1, g["ep"], g.get("cp") or 1
        prec = precision_of(r["precision"])
        pr = "mxfp8" if prec == "fp8" else "bf16"
        subst = {"TP": tp, "PP": pp, "EP": ep, "CP": cp, "MBS": r["micro_batch"], "GBS": r["global_batch"],
                 "SEQ_LEN": r["seq_len"], "VPP": vpp, "MOE_GROUPED_GEMM": "true",
                 "LAYERS_PER_VP": (96 // pp // vpp) if vpp > 1 else "false"}
        argv: list[str] = []
        i = 0
        while i < len(base):
            word = base[i]
            nxt = base[i + 1] if i + 1 < len(base) and not base[i + 1].startswith("--") else None
            if nxt is not None:
                val = re.sub(r"\$\{(\w+)\}", lambda m, subst=subst: str(subst.get(m.group(1), "/path/to/" + m.group(1).lower())), nxt)
                if val == "false":
                    i += 2
                    continue
                if val == "true":
                    argv.append(word)
                else:
                    argv += [word, val]
                i += 2
            else:
                argv.append(word)
                i += 1
        disp = lv.get("moe_flex_dispatcher_backend") if lv.get("moe_token_dispatcher_type") == "flex" else "alltoall"
        if disp == "alltoall":
            argv += ["--moe-token-dispatcher-type", "alltoall"]
        elif disp == "deepep":
            argv += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
        else:
            argv += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep",
                     "--moe-hybridep-num-sms", "32"]
        if pr == "bf16":
            argv.append("--tp-comm-overlap")
        else:
            argv += ["--fp8-recipe", "mxfp8", "--fp8-format", "e4m3", "--fp8-param-gather",
                     "--reuse-grad-buf-for-mxfp8-param-ag", "--overlap-grad-reduce", "--overlap-param-gather",
                     "--use-precision-aware-optimizer", "--main-grads-dtype", "fp32", "--main-params-dtype", "fp32",
                     "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16", "--moe-router-padding-for-quantization"]
        a2a = bool(lv.get("overlap_moe_expert_parallel_comm"))
        if a2a:
            argv += ["--delay-wgrad-compute", "--overlap-moe-expert-parallel-comm"]
        gran = lv.get("recompute_granularity")
        if gran == "selective":
            argv += ["--recompute-granularity", "selective", "--recompute-modules", *lv["recompute_modules"]]
        elif gran == "full":
            argv += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
        if lv.get("use_megatron_fsdp"):
            argv += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
        if lv.get("moe_router_force_load_balancing"):
            argv.append("--moe-router-force-load-balancing")
        if lv.get("cuda_graph_impl"):
            argv += ["--cuda-graph-impl", lv["cuda_graph_impl"], "--cuda-graph-scope", *lv["cuda_graph_scope"]]
        if lv.get("fine_grained_activation_offloading"):
            argv += ["--fine-grained-activation-offloading", "--offload-modules", *lv["offload_modules"],
                     "--delay-offload-until-cuda-graph", "--use-separate-send-recv-groups"]
        if vpp > 1 and not any(w in argv for w in ("--num-layers-per-virtual-pipeline-stage",)):
            argv += ["--num-virtual-stages-per-pipeline-rank", str(vpp)]
        env = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        recompute = recompute_string(lv) if gran != "none" else "none"
        parts = {"tp": tp, "cp": cp, "pp": pp, "vpp": vpp if vpp > 1 else None, "ep": ep, "etp": 1,
                 "mbs": r["micro_batch"], "precision": prec, "recompute": recompute,
                 "dispatcher": disp, "ep_overlap": "on" if a2a else "off",
                 "sharding": "fsdp" if lv.get("use_megatron_fsdp") else None,
                 "moments": "bf16" if prec == "fp8" else None,
                 "offload": "activations" if lv.get("fine_grained_activation_offloading") else None}
        forced = bool(lv.get("moe_router_force_load_balancing"))
        run = {
            "name": r["name"], "source": {**source_of(r["source"]), "row": r["notes"].split(";")[0].split(". ")[0]},
            "software": r["software"], "confidence": "H", "hardware": HW[r["gpu"]], "model": "qwen3-235b-a22b", "gpus": r["gpus"],
            "global_batch": r["global_batch"], "seq_len": r["seq_len"], "precision": prec,
            "plan": plan_string(parts),
            "megatron_args": f"# env: {env} CUDA_DEVICE_MAX_CONNECTIONS={32 if a2a else 1}\n" + wrap(argv),
            "args_origin": (f"yanring/Megatron-MoE-ModelZoo @ {ZOO_COMMIT[:8]}: {ZOO_MODEL_YAML} MODEL_ARGS with the row's "
                            "TP/PP/VPP/EP/CP/MBS/GBS/SEQ_LEN, plus what sbatch_benchmarking.sh adds for the row's "
                            "DISPATCHER, PR and A2A_OVERLAP, plus the row's extra flags (readme command); the YAML "
                            "at that commit, which may differ from the code version the row was measured with"),
            "assumptions": {"routing_imbalance": 1.0, **({"tp_comm_overlap": True} if pr == "bf16" and tp > 1 else {})},
        }
        nm = not_modeled_of(lv, True, prec, "mxfp8" if prec == "fp8" else None)
        nm["fusions"] = ["permute", "router"]
        nm["routing"] = ("force-balanced" if forced else
                         "dropless with real routing (aux-loss balanced): the busiest expert rank's load is not published")
        if prec == "fp8":
            nm["fp8_param_gather"] = True
            nm["precision_aware_optimizer"] = {"main_grads": "fp32", "main_params": "fp32"}
        if a2a:
            nm["env"] = {"CUDA_DEVICE_MAX_CONNECTIONS": 32}
        run["not_modeled"] = nm
        meas = {"tflops_per_gpu": r["measured"]["tflops_per_gpu"]}
        if r["measured"].get("step_time_s"):
            meas["step_time_s"] = r["measured"]["step_time_s"]
        run["measured"] = meas
        run["flops_convention"] = {"kind": "megatron", "note": "Megatron-LM --log-throughput (num_floating_point_operations)"}
        run["notes"] = r["notes"]
        out.append(run)
    return out


def hand_runs(research: list[dict]) -> list[dict]:
    by = {r["name"]: r for r in research}
    out: list[dict] = []
    # ---- torchtitan ------------------------------------------------------------------------
    for r in research:
        if not r["name"].startswith("tt"):
            continue
        g, lv = r["degrees"], r["levers"]
        model = MODELS.get(r["model"].split(" (")[0])
        prec = precision_of(r["precision"])
        ac = str(lv.get("activation_checkpointing", ""))
        parts = {"tp": g.get("tp", 1), "cp": g.get("cp", 1), "pp": g.get("pp", 1), "mbs": None,
                 "sharding": "fsdp", "precision": prec, "recompute": "full" if ac == "full" else None}
        pp = g.get("pp", 1)
        if pp > 1:
            parts["mbs"] = 1  # torchtitan's pipeline micro-batches: local batch / pipeline micro-batch count (not stated)
        else:
            parts["mbs"] = r["micro_batch"]
        if model == "llama4-scout":
            # torchtitan's mxfp8.md, Parallelisms: EP=16 on the routed experts. The doc's commit predates
            # expert_parallel_comm_backend: the standard all-to-all dispatch; torchtitan has no EP overlap.
            parts.update(ep=g.get("ep") or 16, dispatcher="alltoall", ep_overlap="off")
        reasons = []
        if model is None:
            reasons.append(f"model {r['model'].split(' (')[0]} is not in planner's catalog")
        if ac.startswith("selective"):
            reasons.append("torchtitan's per-op selective activation checkpointing (saves matmul and attention outputs "
                           "but recomputes every second matmul and all element-wise ops) has no planner recompute setting")
        if "Interleaved" in str(lv.get("pipeline_schedule", "")):
            reasons.append("interleaved 1F1B with an unstated number of stages per rank")
        if pp > 1 and not reasons:
            reasons.append("torchtitan's pipeline micro-batch count is not stated (local batch 32 or 8 split into an "
                           "unstated number of micro-batches)")
        if model == "llama4-scout":
            reasons.append(SCOUT_INCOMPLETE)
        run = {
            "name": r["name"], "source": source_of(r["source"]), "software": r["software"],
            "confidence": r["confidence"], "hardware": HW[r["gpu"]],
            "model": model or f"{r['model']} (not in planner's catalog)",
            "gpus": r["gpus"], "global_batch": r["global_batch"], "seq_len": r["seq_len"], "precision": prec,
            "plan": plan_string(parts),
        }
        nm = {"launcher": "torchtitan (FSDP2, DTensor TP)", "torch_compile": bool(lv.get("torch_compile"))}
        if prec == "fp8":
            nm["fp8_recipe"] = fp8_recipe_of(r["precision"], {}) or "tensorwise (torchao float8)"
        if lv.get("async_tp") is not None:
            nm["async_tp"] = bool(lv["async_tp"])
        if ac.startswith("selective"):
            nm["activation_checkpointing"] = "per-op selective (every second matmul recomputed)"
        if "Grand Teton" in r["hardware"] or "96GB" in r["hardware"] or "500 W" in r["notes"]:
            # Meta's Grand Teton H100 (96 GB HBM2e at 2.4 TB/s, 500 W): its own catalog spec.
            run["hardware"] = "h100-96gb-500w"
        if r["gpu"] == "b200":
            nm["hardware"] = "B200 at an unstated power limit"
        run["not_modeled"] = nm
        if g.get("tp", 1) > 1:
            run["assumptions"] = {"tp_comm_overlap": bool(lv.get("async_tp"))}
        run["measured"] = measured_of(r["measured"])
        run["flops_convention"] = {"kind": "none", "note": "tokens/s/GPU only"}
        if reasons:
            run["not_evaluable"] = "; ".join(reasons)
        run["notes"] = r["notes"] + (" " + LLAMA3_NOTE if r["model"].startswith("llama3-") else "") + (
            " " + SCOUT_NOTE if model == "llama4-scout" else "")
        out.append(run)
    # ---- Llama 3 paper -----------------------------------------------------------------------
    llama = [("llama3-405b-8k-h100-8192gpu", 8192, 2048, 8192, "tp=8,cp=1,pp=16,vpp=2,mbs=1,precision=bf16,layout=Et*3|(t*4|)*30t*3L", 430, 0.43, "Table 4 row 1"),
             ("llama3-405b-8k-h100-16384gpu", 16384, 2048, 8192, "tp=8,cp=1,pp=16,vpp=2,mbs=1,precision=bf16,layout=Et*3|(t*4|)*30t*3L", 400, 0.41, "Table 4 row 2"),
             ("llama3-405b-128k-h100-16384gpu-cp16", 16384, 128, 131072, "tp=8,cp=16,pp=16,vpp=2,mbs=1,precision=bf16,layout=Et*3|(t*4|)*30t*3L", 380, 0.38,
              "Table 4 row 3")]
    for name, gpus, gbs, seq, plan, tfl, mfu, row in llama:
        out.append({
            "name": name,
            "source": {"where": "Llama Team, The Llama 3 Herd of Models, arXiv 2407.21783", "commit": None, "row": row},
            "software": "Meta's training stack (not public)", "confidence": "M", "hardware": "h100",
            "model": "llama3.1-405b", "gpus": gpus, "global_batch": gbs, "seq_len": seq, "precision": "bf16",
            "plan": plan,
            "assumptions": {},
            "not_modeled": {"launcher": "Meta's own (not Megatron)",
                            "pipeline": "interleaved schedule with a tuned micro-batch count and one layer fewer on the "
                                        "first and last stages; VPP and micro-batch size not stated",
                            **({"context_parallel": "all-gather based CP, not ring attention"} if "cp16" in name else {})},
            "measured": {"tflops_per_gpu": tfl, "mfu": mfu},
            "flops_convention": {"kind": "megatron",
                                 "note": "Meta's model TFLOPs/GPU; the convention is not spelled out (read as Megatron's, "
                                         "causal attention); at 128K the attention share makes this uncertain"},
            "notes": "Plan keys beyond TP/CP/PP/DP are not stated. The paper trains with an interleaved schedule and one "
                     "layer fewer on the first and the last pipeline stage without giving the number of virtual stages: "
                     "VPP 2 (126 layers as 32 virtual stages of four, three on the first and the last) and micro-batch "
                     "size 1 are assumed. RoCE 400 Gb/s per GPU.",
        })
    # ---- DeepSeek-V3 report --------------------------------------------------------------------
    r = by["deepseek-v3-report-h800-2048gpu-pretrain-average"]
    out.append({
        "name": "deepseek-v3-report-h800-2048gpu", "source": source_of(r["source"]), "software": r["software"],
        "confidence": "M", "hardware": "h800", "model": "deepseek-v3", "gpus": 2048, "global_batch": 15360,
        "seq_len": 4096, "precision": "fp8",
        "plan": "tp=1,pp=16,ep=64,etp=1,sharding=dist_opt,recompute=layernorm+mla_up_proj,precision=fp8",
        "not_modeled": {"pipeline": "DualPipe (bidirectional pipeline with overlapped forward/backward chunks)",
                        "fp8_recipe": "blockwise (1x128 activations, 128x128 weights)",
                        "routing": "node-limited (at most 4 nodes per token), real routing",
                        "dispatcher": "DeepSeek's own all-to-all kernels (DeepEP's precursor) on 20 SMs"},
        "measured": {"tokens_per_s_per_gpu": r["measured"]["tokens_per_s_per_gpu"]},
        "flops_convention": {"kind": "none", "note": "tokens/s/GPU derived from 180K H800 GPU-hours per trillion tokens"},
        "not_evaluable": "DualPipe pipeline schedule: planner models 1F1B and interleaved 1F1B only (issue 21)",
        "notes": r["notes"],
    })
    # ---- MLPerf ----------------------------------------------------------------------------------
    for n in ("mlperf51-llama31-405b-gb200-512gpu-nvfp4", "mlperf51-llama31-405b-gb200-2560gpu-nvfp4"):
        r = by[n]
        g = r["degrees"]
        out.append({
            "name": n, "source": source_of(r["source"]), "software": r["software"], "confidence": r["confidence"],
            "hardware": "gb200-nvl72", "model": "llama3.1-405b", "gpus": r["gpus"], "global_batch": r["global_batch"],
            "seq_len": r["seq_len"], "precision": "nvfp4",
            # 126 layers do not split over pp*vpp = 64 stages: the layout is Megatron's
            # --account-for-embedding/loss-in-pipeline-split split (126 layers + embedding + loss, two
            # per stage), which the Megatron-Bridge Llama 3.1 405B recipe sets (the MLPerf config's
            # own flags were not read).
            "plan": f"tp={g['tp']},cp={g['cp']},pp={g['pp']},vpp={g['vpp']},mbs=1,layout=Et|(tt|)*62tL",
            "not_modeled": {"cuda_graphs": "on (config_common_cg.sh, not read)", "fp8_param_gather": True,
                            "precision": "NVFP4 with an FP8 tensorwise base recipe"},
            "measured": measured_of(r["measured"]),
            "flops_convention": {"kind": "none", "note": "step time from the MLLOG result file"},
            "notes": r["notes"],
        })
    # ---- MoE report headlines ---------------------------------------------------------------------
    heads = [("mcore-moe-report-dsv3-gb200-headline", "gb200-nvl72", 1048,
              "configuration not published in a readable table (the closest published layout is "
              "mb260201-deepseek-v3-gb200-fp8mx-256gpu at 1,046 TFLOP/s)"),
             ("mcore-moe-report-dsv3-gb300-headline", "gb300-nvl72", 1233,
              "configuration not published in a readable table (the closest is mb260201-deepseek-v3-gb300-fp8mx-256gpu, "
              "1,219 TFLOP/s)"),
             ("mcore-moe-report-qwen3-235b-gb200-headline", "gb200-nvl72", 919,
              "the same run as zoo-qwen3-235b-gb200-256gpu-mxfp8-hybridep-offload (919 TFLOP/s, same authors), "
              "evaluated there"),
             ("mcore-moe-report-qwen3-235b-gb300-headline", "gb300-nvl72", 974,
              "the same run as mb2602-qwen3-235b-a22b-gb300-fp8mx-256gpu (974 TFLOP/s), evaluated there")]
    for n, hw, tfl, why in heads:
        r = by[n]
        out.append({
            "name": n, "source": source_of(r["source"]), "software": r["software"], "confidence": r["confidence"],
            "hardware": hw, "model": "qwen3-235b-a22b" if "qwen" in n else "deepseek-v3", "gpus": 256,
            "global_batch": r["global_batch"], "seq_len": 4096, "precision": "fp8",
            "measured": {"tflops_per_gpu": tfl},
            "flops_convention": {"kind": "megatron", "note": "Megatron model TFLOP/s/GPU"},
            "not_evaluable": why, "notes": r["notes"],
        })
    # ---- torchtitan DeepSeek-V3 blog ------------------------------------------------------------------
    out.append({
        "name": "tt-dsv3-671b-b200-256gpu-mxfp8-deepep",
        "source": {"where": "PyTorch blog, 'Enabling Up to 41% Faster Pre-training: MXFP8 and DeepEP for DeepSeek-V3 on "
                            "B200 with TorchTitan'", "commit": None, "row": "TL;DR"},
        "software": "torchtitan (2026)", "confidence": "L", "hardware": "b200", "model": "deepseek-v3", "gpus": 256,
        "global_batch": None, "seq_len": None, "precision": "fp8",
        "measured": {"tokens_per_s_per_gpu": 918},
        "flops_convention": {"kind": "none", "note": "tokens/sec as printed; per GPU assumed"},
        "not_evaluable": "parallel layout, global batch and sequence length not published",
        "notes": "BF16 baseline 651, DeepEP 859, DeepEP + MXFP8 on the routed-expert GEMMs 918 tokens/s.",
    })
    return out


# ---------------------------------------------------------------------------------------------
# Calibration rule
# ---------------------------------------------------------------------------------------------
HOPPER = {"h100", "h200", "h800"}


def run_class(run: dict, moe_models: set[str]) -> tuple[str, str, str]:
    moe = "moe" if run["model"] in moe_models else "dense"
    gen = "hopper" if run["hardware"] in HOPPER else "blackwell"
    return moe, gen, run["precision"]


def flag_calibration(runs: list[dict]) -> None:
    from planner.specs.catalog import load_model

    moe_models = {r["model"] for r in runs if not r.get("not_evaluable") and load_model(r["model"]).is_moe}
    classes: dict[tuple, list[dict]] = {}
    for run in runs:
        run["calibration"] = False
        if run.get("not_evaluable") or run["confidence"] != "H":
            continue
        classes.setdefault(run_class(run, moe_models), []).append(run)
    for members in classes.values():
        members.sort(key=lambda r: r["name"])
        for i in range(1, len(members), 3):
            members[i]["calibration"] = True


# ---------------------------------------------------------------------------------------------
_RELEASE_OF_SOFTWARE = (
    # (pattern in the run's 'software' text, planner software profile): the release the source
    # states. NeMo containers name their Megatron-Core release (docs/releases/software-versions.md of
    # Megatron-Bridge); 26.08 ships Megatron-Bridge 0.6.0; the 26.02.01, 26.04.01 and 26.06.01 patches
    # keep their base container's MCore (NeMo 25.09: MCore 0.14). Development builds ('MCore dev 0.15.0'
    # of NeMo 25.11, the dev-branch commit the Megatron-LM DeepSeek-V3 GB200 guide pins) are no release:
    # they ran HybridEP, which the core_v0.15.0 tag lacks...
    (r"Megatron-Bridge 0\.6\.", "megatron-bridge-0.6"),
    # ...but a development build offers at most what the first release after it does: the dev builds
    # after core_v0.15.0 ran HybridEP, first released in core_v0.16.0 (software/megatron-core-0.16.yaml),
    # so 0.16's features bound theirs. The default (the newest release) offered them levers of 2026
    # releases (static-shape MoE graphs, paged stash) no Nov. 2025 build had.
    (r"MCore dev 0\.15\.|Megatron-Core dev branch .*~v0\.15", "megatron-core-0.16"),
    (r"NeMo 26\.02\.01 ", "megatron-core-0.16"),
    # NVIDIA's MLPerf Training v5.1 submission ran this container's Megatron in NVFP4 (--fp4-format), which
    # megatron-core 0.14 (the container's release) lacks and core_v0.15.0 first has: a build on the way to
    # 0.15, bounded by it (as the dev builds above by 0.16). Its only runs here are the two NVFP4 405B rows.
    (r"NGC 25\.09 NeMo container \(MLPerf Training v5\.1", "megatron-core-0.15"),
    (r"NGC 25\.09 NeMo container", "megatron-core-0.14"),
    (r"MCore (?:main )?0\.(1[2-9])\.", "megatron-core-0.{}"),
    (r"NeMo 26\.04\.01 ", "megatron-core-0.17"),
    (r"NeMo 26\.06\.01 ", "megatron-core-0.18"),
    # torchtitan benchmark rows name commits: e7c0cae and 820504e (June 2025) precede the tag v0.1.0,
    # 6fc499f6 (August 2025) follows it and precedes v0.2.0; all three register the Float8 converter as
    # 'float8' (torchtitan/components/quantization/float8.py), as 0.1.0 does. 9dec370 (2024-12) is
    # before any release: Float8 is a job-file option there too (--float8.enable_float8_linear,
    # torchtitan/config_manager.py), so the 0.1.0 rules (no config_registry) are the nearest release's.
    (r"torchtitan (?:9dec370|820504e|e7c0cae|6fc499f6)", "torchtitan-0.1.0"),
    # Megatron-MoE-ModelZoo Qwen3-235B H100 rows without a per-row commit: the long-context table,
    # added on 2025-11-04 (ModelZoo b0b92ff, 'update Qwen3-Next best practice'), run from a
    # Megatron-LM checkout mounted into dockers/H100.Dockerfile (which deletes /opt/megatron-lm and
    # pins no Megatron-LM). A build no newer than its publication offers at most what the first
    # release after it does, core_v0.15.0 (2025-12-05); everything its command runs (DeepEP, selective
    # recompute of layernorm and moe, CP up to 8) is in it. 0.15 against the default 0.19: no paged
    # stash, CUDA-graph modules, HybridEP or fine-grained offloading, all released in 2026.
    (r"or not stated; H100 docker per ModelZoo dockers/H100\.Dockerfile", "megatron-core-0.15"),
    # ModelZoo GB200/GB300 rows: published together on 2026-05-13 (ModelZoo 020b813, 'Update GB200/300
    # benchmark scripts and results') on one image (dockers/GB200.Dockerfile: pytorch 25.12, TE
    # 99df881, Megatron-LM mounted, the README's 'Megatron-Core DEV branch'). The MXFP8 row's
    # --delay-offload-until-cuda-graph is Megatron-LM PR #3219 (dev branch 0c306dc, 2026-03-30;
    # main #3697, 2026-07-02), first released in core_v0.19.0 (transformer_config.py
    # delay_offload_until_cuda_graph; absent at core_v0.18.0): the first release with every feature
    # the build ran is 0.19, the newest (stated here so validate says 'the runs file', not 'default').
    (r"Megatron-LM \(commit per row where given, else not stated\), ModelZoo dockers/\*\.Dockerfile",
     "megatron-core-0.19"),
    # torchtitan's MXFP8 doc (torchtitan/components/quantization/mxfp8.md) gives the Llama4 Scout GB200
    # rows since torchtitan commit b3da1a2 (2025-12-03, #2096), first in the tag v0.2.1 (2025-12-26).
    # planner has no 0.2.1 profile; v0.2.1..v0.2.2 adds no lever planner models to
    # torchtitan/config/job_config.py (total_steps, context_parallel_load_balancer only), so 0.2.2's
    # features are 0.2.1's, except that the doc's commit predates expert_parallel_comm_backend
    # ('deepep', added before v0.2.1): their plans state dispatcher=alltoall; validate --search does not
    # pin the dispatcher, so a search may offer DeepEP the doc's build did not have (it has to pass the
    # torchtitan launcher's checks first: 0.2.2 names no Llama 4 flavor planner knows).
    (r"torchtitan/torchao versions not stated for this run \(torchao >= 0\.14 for MXFP8 MoE", "torchtitan-0.2.2"),
    # Left to the default (validate says 'default'), their sources stating no release planner has:
    # Meta's and DeepSeek's own stacks (Llama 3 report, DeepSeek-V3 report); the Megatron-Core MoE
    # report's headlines (arXiv 2603.07685, 'Megatron-Core', no version; the Qwen3 GB200 919 TFLOPS
    # equals the ModelZoo row above that needs a core_v0.19.0 feature, so the default is its bound
    # too); the torchtitan DeepSeek-V3 B200 blog (pytorch.org, 2026-03-26, no commit: after v0.2.2 of
    # 2026-02-20, so the first release after it is planner's newest torchtitan profile, the default).
)

# Megatron-MoE-ModelZoo rows name the Megatron-LM code they ran per row, as the readme's 'Code' column
# 'branch(commit)' (best_practice/qwen3/readme.md, kept in the run's notes and source row). A stated
# commit decides over the row group's shared 'software' text. Its release: the first tag containing it,
# or, for a commit not on any public branch, the first release with every feature its rows ran.
_ZOO_CODE = r"\b(?:moe_dev|main|dev)\(([0-9a-f]{6,40})\)"
_RELEASE_OF_COMMIT = (
    # main 1e057005 (2025-05-24, 'Merge branch ko3n1g/tests/moe-memory'): first in core_v0.13.0rc0
    # (2025-06-27), core_v0.13.0; core_v0.12.x lack it (git tag --contains).
    ("1e057005", "megatron-core-0.13"),
    # moe_dev f3e6c5: not in NVIDIA/Megatron-LM's public history; the rows were published 2025-05-27
    # (ModelZoo 8017e11). Its '+1f1b overlap' row runs EP A2A overlap with PP 8 / VPP 4, merged to main
    # 2025-08-01 (!3470, PP=1) and 2025-08-26 (!3074, interleaved PP): first released in core_v0.14.0
    # (--overlap-moe-expert-parallel-comm, arguments.py), so 0.14 bounds that build, both its rows.
    ("f3e6c5", "megatron-core-0.14"),
)


def stated_commit(run: dict) -> str | None:
    """The Megatron-LM commit a ModelZoo row states ('main(1e057005)'), None where none is stated."""
    for text in ((run.get("source") or {}).get("row"), run.get("notes")):
        m = re.search(_ZOO_CODE, text or "")
        if m:
            return m.group(1)
    return None


def software_profile(text: str | None, commit: str | None = None) -> str | None:
    """The software profile (software/<name>.yaml) of the release a run's 'software' text states (or
    the commit its row states, where planner knows that commit's release), None where it states none
    planner has a profile for ('not stated', other stacks)."""
    for prefix, name in _RELEASE_OF_COMMIT:
        if commit and (commit.startswith(prefix) or prefix.startswith(commit)):
            return name
    for pattern, name in _RELEASE_OF_SOFTWARE:
        m = re.search(pattern, text or "")
        if m:
            return name.format(*m.groups())
    return None


def order_keys(run: dict) -> dict:
    run = {**run, "software_profile": software_profile(run.get("software"), stated_commit(run))}
    order = ("name", "source", "recipe", "software", "software_profile", "confidence", "hardware", "model", "model_overrides", "gpus",
             "global_batch", "seq_len", "precision", "plan", "megatron_args", "args_origin", "assumptions",
             "not_modeled", "measured", "flops_convention", "series", "calibration", "not_evaluable", "notes")
    out = {k: run[k] for k in order if k in run and run[k] is not None and run[k] != {}}
    extra = set(run) - set(order)
    assert not extra, extra
    return out


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, data: str):
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("research", type=Path, help="the research runs.yaml")
    ap.add_argument("--zoo", type=Path, required=True, help="git dir of yanring/Megatron-MoE-ModelZoo")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    research = yaml.safe_load(a.research.read_text())["runs"]
    runs = mcg_runs(research) + select_mb(research) + mb_legacy(research) + zoo_runs(research, a.zoo) + hand_runs(research)
    names = [r["name"] for r in runs]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, dup
    flag_calibration(runs)
    body = yaml.dump({"runs": [order_keys(r) for r in runs]}, Dumper=_Dumper, sort_keys=False, width=120,
                     allow_unicode=True)
    a.out.write_text(HEADER + "\n" + body)
    n_eval = sum(not r.get("not_evaluable") for r in runs)
    n_cal = sum(r["calibration"] for r in runs)
    print(f"wrote {a.out}: {len(runs)} runs, {n_eval} evaluable, {n_cal} calibration")
    return 0


if __name__ == "__main__":
    sys.exit(main())
