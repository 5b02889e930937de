"""Run exported Megatron arguments through megatron-core's own start-up checks, on the CPU.

Runs inside the validation venv (scripts/setup_validation_env.sh), per launchers.md §2:
parse_args -> validate_args -> ConstantNumMicroBatchesCalculator -> core_transformer_config_from_args,
with the two GPU probes stubbed. Reads one JSON object on stdin:
    {"argv": [...pretrain_gpt.py flags...], "world_size": N, "arch": 9 | 10}
and prints one JSON object: {"ok": true, ...derived values...} or {"ok": false, "stage", "error"}.
A JSON list of such objects gives a list of results (one interpreter start for many plans).
The check appends CPU_FLAGS (--no-rope-fusion) to the arguments and says so in each result.
"env" in a request sets CUDA_DEVICE_MAX_CONNECTIONS / NVTE_CPU_OFFLOAD_V1 for it (unset when
absent): the test passes the exported script's own variables, so validate_args's environment
checks run on them too.
"""

import contextlib
import io
import json
import os
import sys
import traceback
import typing
import warnings

if not hasattr(typing, "override"):  # megatron.training uses Python 3.12's typing.override
    typing.override = lambda f: f
warnings.filterwarnings("ignore")

# Settings whose TransformerConfig checks import Transformer Engine (absent on the CPU): validated by
# parse_args/validate_args with the rest, then switched off before the config is built (launchers.md
# §2), and reported back as "te_flags".
TE_ONLY = ("fp8", "fp8_param_gather", "moe_permute_fusion")

# What the CPU check passes itself, after the exported arguments, and reports as "cpu_flags": RoPE
# fusion is Megatron's default (on unless --no-rope-fusion) and TransformerConfig needs Transformer
# Engine >= 1.4 for it when the config is built. The exported script leaves the fusion on, as a GPU
# with Transformer Engine runs it; only this check turns it off, and says so.
CPU_FLAGS = ["--no-rope-fusion"]

# The architecture as Megatron parsed it (args namespace), returned so the tests can compare it with
# the model planner exported.
ARCH = ("qk_layernorm", "qk_l2_norm", "add_qkv_bias", "add_bias_linear", "softmax_type", "window_size",
        "window_attn_skip_freq", "no_rope_freq", "position_embedding_type", "rotary_base", "rotary_percent",
        "use_rope_scaling", "rope_scaling_factor", "rope_type", "rotary_scaling_factor", "mscale", "mscale_all_dim",
        "yarn_original_max_position_embeddings", "yarn_beta_fast", "yarn_beta_slow",
        "yarn_correction_range_round_to_int", "moe_router_topk_scaling_factor", "moe_layer_freq",
        "moe_shared_expert_intermediate_size", "moe_router_score_function", "moe_router_enable_expert_bias",
        "mtp_num_layers", "kv_channels", "num_query_groups", "swiglu", "multi_latent_attention")


ENV_KEYS = ("CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_CPU_OFFLOAD_V1")


def main() -> None:
    import logging

    logging.disable(logging.CRITICAL)
    req = json.load(sys.stdin)
    results = [check(r) for r in req] if isinstance(req, list) else check(req)
    print(json.dumps(results))


def check(req: dict) -> dict:
    argv, world, arch = req["argv"], int(req["world_size"]), int(req.get("arch", 9))
    os.environ["WORLD_SIZE"] = str(world)
    os.environ["RANK"] = "0"
    for k in ENV_KEYS:
        os.environ.pop(k, None)
    os.environ.update(req.get("env") or {})

    import torch

    torch.cuda.get_device_capability = lambda *a, **k: (arch, 0)  # --moe-grouped-gemm probe
    import megatron.training.arguments as margs

    margs.get_device_arch_version = lambda: arch  # TP/CP>1 CUDA_DEVICE_MAX_CONNECTIONS probe
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
    from megatron.training.arguments import core_transformer_config_from_args, parse_args, validate_args

    stage = "parse_args"
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            sys.argv = ["pretrain_gpt.py", *argv, *CPU_FLAGS]
            args = parse_args()
            stage = "validate_args"
            validate_args(args)
            stage = "num_microbatches_calculator"
            calc = ConstantNumMicroBatchesCalculator(
                args.global_batch_size, args.micro_batch_size, args.data_parallel_size, False, 0)
            stage = "core_transformer_config_from_args"
            te = {k: getattr(args, k) for k in TE_ONLY}
            for k in TE_ONLY:
                setattr(args, k, None if k == "fp8" else False)  # then re-added: the command line keeps them
            cfg = core_transformer_config_from_args(args)
    except SystemExit as exc:  # argparse errors
        return {"ok": False, "stage": stage, "error": f"SystemExit {exc.code}: {log.getvalue()[-600:]}"}
    except BaseException as exc:  # noqa: BLE001 - report every failure of Megatron's checks
        tb = traceback.format_exc(limit=3)
        return {"ok": False, "stage": stage, "error": f"{type(exc).__name__}: {exc}", "trace": tb[-800:]}
    layout = cfg.pipeline_model_parallel_layout
    return {
        "ok": True,
        "config_class": type(cfg).__name__,
        "data_parallel_size": args.data_parallel_size,
        "virtual_pipeline_model_parallel_size": args.virtual_pipeline_model_parallel_size,
        "num_microbatches": calc.get(),
        "expert_tensor_parallel_size": args.expert_tensor_parallel_size,
        "sequence_parallel": cfg.sequence_parallel,
        "recompute_granularity": cfg.recompute_granularity,
        "recompute_modules": cfg.recompute_modules,
        "num_layers_in_first_pipeline_stage": cfg.num_layers_in_first_pipeline_stage,
        "num_layers_in_last_pipeline_stage": cfg.num_layers_in_last_pipeline_stage,
        "layout": None if layout is None else str(layout),
        "mtp_standalone": getattr(cfg, "mtp_standalone", None),
        "accumulate_allreduce_grads_in_fp32": args.accumulate_allreduce_grads_in_fp32,
        "te_flags": {k: (v if isinstance(v, (bool, str, type(None))) else str(v)) for k, v in te.items()},
        "cpu_flags": CPU_FLAGS,
        "arch": {k: _plain(getattr(args, k, None)) for k in ARCH},
        "config": {k: _plain(getattr(cfg, k, None)) for k in ("qk_layernorm", "qk_l2_norm", "window_size",
                                                               "window_attn_skip_freq", "no_rope_freq", "softmax_type",
                                                               "moe_router_topk_scaling_factor", "rotary_base",
                                                               "rotary_scaling_factor", "rope_type")},
    }


def _plain(v):
    """A value as JSON can carry it (tuples as lists, enums and callables as text)."""
    if isinstance(v, (bool, int, float, str, type(None))):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


if __name__ == "__main__":
    main()
