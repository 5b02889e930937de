"""Run an exported Megatron-Bridge 0.6.2 launch through Bridge's own config checks, on the CPU.

Runs inside the Bridge validation venv (scripts/setup_validation_env.sh builds .bridge-venv). What
run_recipe.py does before it trains, with Bridge's library functions: the recipe function (its
model built from the HuggingFace config.json in tests/fixtures/hf/, not downloaded), the mock
dataset (``build_dataset_config(recipe, "mock")``), the overrides
(``process_config_with_overrides``, Hydra grammar on the ConfigContainer), the runner's two syncs
(a recipe-owned layout rebuilt after a PP/VPP override without a layout override; model.seq_length
from the dataset), then ``runtime_config_update`` with WORLD_SIZE set: the mixed-precision recipe
resolved and set up, data-parallel size, the CommOverlapConfig setup and ``ConfigContainer.validate``
(which runs Megatron-Core's TransformerConfig, OptimizerConfig and DDP checks).

What a CPU cannot run is stubbed or switched off, and only for the validation step, after the
overridden values were read: Transformer Engine is a stub module (megatron.bridge imports it at
module level; Megatron-Core is imported first and takes its no-TE paths); the GPU probes answer the
hardware's compute capability; ``CPU_ONLY`` lists the TE-only settings switched off and why.

Reads a JSON object (or a list) on stdin: {"recipe", "overrides": [...], "world_size", "arch",
"hf": {hub id: folder}, "validate": true (false: only the values after the overrides)}; prints {"ok": true, "values": {...}} or {"ok": false, "stage", "error"}.
"""

import contextlib
import io
import json
import os
import sys
import traceback
import types
import typing
import warnings

if not hasattr(typing, "override"):  # Megatron-Core and Bridge use Python 3.12's typing.override
    typing.override = lambda f: f
warnings.filterwarnings("ignore")

CPU_ONLY = {
    # TransformerConfig: "apply_rope_fusion is not available. Please install TE >= 1.4."
    "model.apply_rope_fusion": False,
    # TransformerConfig: fused permutation needs TE >= 2.1.
    "model.moe_permute_fusion": False,
    # Bridge's CUDA-graph and TE-specific checks run on impl "none" anyway (planner writes none).
    "model.gradient_accumulation_fusion": False,
}

TE_VERSION = "2.12.0"
"""The Transformer Engine version the stub reports: version-gated checks (FP8 with moe_act or
layernorm recompute needs TE >= 2.6; delayed wgrad >= 2.7) then read as on a current install."""

FIELDS = (
    "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
    "model.virtual_pipeline_model_parallel_size", "model.context_parallel_size", "model.expert_model_parallel_size",
    "model.expert_tensor_parallel_size", "model.sequence_parallel", "model.pipeline_model_parallel_layout",
    "model.account_for_embedding_in_pipeline_split", "model.account_for_loss_in_pipeline_split",
    "model.num_layers_in_first_pipeline_stage", "model.num_layers_in_last_pipeline_stage",
    "model.recompute_granularity", "model.recompute_method", "model.recompute_num_layers", "model.recompute_modules",
    "model.fine_grained_activation_offloading", "model.offload_modules", "model.cuda_graph_impl",
    "model.moe_token_dispatcher_type", "model.moe_flex_dispatcher_backend", "model.overlap_moe_expert_parallel_comm",
    "model.mtp_num_layers", "model.seq_length", "model.num_layers", "model.hidden_size", "model.num_moe_experts",
    "optimizer.optimizer_cpu_offload", "optimizer.optimizer_offload_fraction",
    "optimizer.use_precision_aware_optimizer", "optimizer.exp_avg_dtype", "optimizer.exp_avg_sq_dtype",
    "optimizer.main_grads_dtype", "ddp.use_distributed_optimizer", "ddp.use_megatron_fsdp",
    "ddp.data_parallel_sharding_strategy", "ddp.num_distributed_optimizer_instances", "ddp.overlap_grad_reduce",
    "ddp.overlap_param_gather", "train.micro_batch_size", "train.global_batch_size", "dataset.seq_length",
    "checkpoint.ckpt_format", "mixed_precision",
)


def _stub_transformer_engine() -> None:
    """A transformer_engine module whose every attribute is a class that cannot be built: enough
    for Bridge's module-level imports, never used by the config checks."""
    import megatron.core  # noqa: F401 - first, so that Megatron-Core takes its no-TE paths
    import megatron.core.distributed  # noqa: F401
    import megatron.core.optimizer  # noqa: F401
    import megatron.core.transformer.transformer_config  # noqa: F401

    class _Meta(type):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Meta(name, (_Stub,), {})

    class _Stub(metaclass=_Meta):
        def __init__(self, *a, **k):
            raise RuntimeError("transformer_engine is a stub on this CPU")

    def _getattr(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Meta(name, (_Stub,), {})

    te = types.ModuleType("transformer_engine")
    te.__version__ = TE_VERSION
    te.__path__ = []
    tep = types.ModuleType("transformer_engine.pytorch")
    tep.__getattr__ = _getattr
    te.pytorch = tep

    class FusedAdam:
        """OptimizerConfig's precision-aware check reads FusedAdam's signature (TE >= 2.x)."""

        def __init__(self, params, master_weight_dtype=None, exp_avg_dtype=None, exp_avg_sq_dtype=None,
                     use_decoupled_grad=False):
            raise RuntimeError("transformer_engine is a stub on this CPU")

    opt = types.ModuleType("transformer_engine.pytorch.optimizers")
    opt.FusedAdam = FusedAdam
    tep.optimizers = opt
    sys.modules.setdefault("transformer_engine", te)
    sys.modules.setdefault("transformer_engine.pytorch", tep)
    sys.modules.setdefault("transformer_engine.pytorch.optimizers", opt)


def _plain(value):
    """A config value as JSON: dtypes by name, layouts and other objects as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    text = str(value)
    return {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(text, text)


def _get(cfg, path: str):
    obj = cfg
    for part in path.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return obj


def _set(cfg, path: str, value) -> None:
    *parents, last = path.split(".")
    obj = cfg
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, last, value)


def _redirect_hf(folders: dict) -> None:
    from megatron.bridge import AutoBridge

    original = AutoBridge.from_hf_pretrained.__func__

    def local(cls, path, *args, **kwargs):
        if path in folders:
            kwargs.pop("revision", None)
            path = folders[path]
        return original(cls, path, *args, **kwargs)

    AutoBridge.from_hf_pretrained = classmethod(local)


def check(req: dict) -> dict:
    import torch

    arch = int(req.get("arch", 9))
    torch.cuda.get_device_capability = lambda *a, **k: (arch, 0)
    props = types.SimpleNamespace(major=arch, minor=0, name=f"stub sm{arch}0", multi_processor_count=132,
                                  total_memory=80 * 2**30)
    torch.cuda.get_device_properties = lambda *a, **k: props
    os.environ.update({"WORLD_SIZE": str(int(req["world_size"])), "RANK": "0", "LOCAL_RANK": "0",
                       "HF_HUB_OFFLINE": "1"})
    for k in ("NVTE_CPU_OFFLOAD_V1",):
        os.environ.pop(k, None)
    os.environ.update(req.get("env") or {})

    import megatron.bridge.recipes as recipes
    from megatron.bridge.recipes.utils.dataset_utils import build_dataset_config
    from megatron.bridge.training.config import runtime_config_update
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    stage = "recipe"
    log = io.StringIO()
    overrides = list(req["overrides"])
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            cfg = getattr(recipes, req["recipe"])()
            stage = "dataset mock"
            cfg.dataset = build_dataset_config(cfg, "mock")
            stage = "overrides"
            cfg = process_config_with_overrides(cfg, cli_overrides=overrides)
            given = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
            builder = getattr(cfg.model, "_pipeline_model_parallel_layout_builder", None)
            if builder is not None and given & {"model.pipeline_model_parallel_size",
                                                "model.virtual_pipeline_model_parallel_size"} \
                    and "model.pipeline_model_parallel_layout" not in given:
                cfg.model.pipeline_model_parallel_layout = builder(cfg.model.pipeline_model_parallel_size,
                                                                   cfg.model.virtual_pipeline_model_parallel_size)
            if getattr(cfg.dataset, "seq_length", None) is not None:
                cfg.model.seq_length = cfg.dataset.seq_length
            values = {f: _plain(_get(cfg, f)) for f in FIELDS}
            values["comm_overlap"] = cfg.comm_overlap is not None
            if req.get("validate") is False:  # the recipe's own values (planner's RECIPE_DEFAULTS)
                return {"ok": True, "values": values}
            stage = "runtime_config_update"
            for path, value in CPU_ONLY.items():
                _set(cfg, path, value)
            runtime_config_update(cfg)
    except SystemExit as exc:
        return {"ok": False, "stage": stage, "error": f"SystemExit {exc.code}: {log.getvalue()[-800:]}"}
    except BaseException as exc:  # noqa: BLE001 - report every failure of Bridge's checks
        return {"ok": False, "stage": stage, "error": f"{type(exc).__name__}: {str(exc)[:1500]}",
                "trace": traceback.format_exc(limit=4)[-1500:]}
    mp = cfg.mixed_precision
    values["data_parallel_size"] = cfg.data_parallel_size
    values["fp8_recipe"] = getattr(mp, "fp8_recipe", None) if getattr(mp, "fp8", None) else None
    values["layout_stages"] = (None if cfg.model.pipeline_model_parallel_layout is None
                               else len(getattr(cfg.model.pipeline_model_parallel_layout, "layout",
                                                cfg.model.pipeline_model_parallel_layout)))
    values["overlap_moe_expert_parallel_comm_final"] = bool(getattr(cfg.model, "overlap_moe_expert_parallel_comm",
                                                                    False))
    return {"ok": True, "values": values}


def main() -> None:
    import logging

    logging.disable(logging.CRITICAL)
    req = json.load(sys.stdin)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        _stub_transformer_engine()
        import megatron.bridge  # noqa: F401
    reqs = req if isinstance(req, list) else [req]
    folders = {}
    for r in reqs:
        folders.update(r.get("hf") or {})
    _redirect_hf(folders)
    results = [check(r) for r in reqs]
    print(json.dumps(results if isinstance(req, list) else results[0]))


if __name__ == "__main__":
    main()
