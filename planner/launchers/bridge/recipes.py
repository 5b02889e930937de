"""The Megatron-Bridge 0.6.2 recipes of planner's catalog models, and what each recipe sets that a
plan depends on.

A recipe (a function returning a ``ConfigContainer``) builds the model from its HuggingFace config
and sets parallelism, recompute, precision, dispatcher, CUDA graphs and overlap for the GPU count
in its name. ``planner export --format bridge`` overrides every one of those settings, so the plan
runs whatever the recipe's defaults are; ``planner check --bridge`` reads back a file that may set
only some of them, and takes the others from :data:`RECIPE_DEFAULTS` (the values each recipe
builds, checked against Megatron-Bridge itself by tests/megatron_validate/test_bridge.py).
"""

from __future__ import annotations

BRIDGE_RELEASE = "megatron-bridge-0.6"
"""The software profile (software/) the Bridge export is written for when none is given."""
BRIDGE_VERSION = "0.6.2"

BRIDGE_RECIPES: dict[str, str] = {
    "deepseek-v3": "deepseek_v3_pretrain_config",
    "kimi-k2": "kimi_k2_pretrain_config",
    "qwen3-235b-a22b": "qwen3_235b_a22b_pretrain_config",
    "qwen3-30b-a3b": "qwen3_30b_a3b_pretrain_config",
    "llama3.1-8b": "llama31_8b_pretrain_config",
    "llama3.1-70b": "llama31_70b_pretrain_config",
    "llama3.1-405b": "llama31_405b_pretrain_config",
    "gpt-oss-120b": "gpt_oss_120b_pretrain_config",
}
"""Catalog model -> the library recipe ``run_recipe.py --recipe`` finds for it
(``megatron.bridge.recipes.<name>``, the legacy alias of the H100 recipe, e.g.
``deepseek_v3_pretrain_config`` = ``deepseek_v3_pretrain_1024gpu_h100_bf16_config``)."""

RECIPE_HF_IDS: dict[str, str] = {
    "deepseek_v3_pretrain_config": "deepseek-ai/DeepSeek-V3",
    "kimi_k2_pretrain_config": "moonshotai/Kimi-K2-Instruct",
    "qwen3_235b_a22b_pretrain_config": "Qwen/Qwen3-235B-A22B",
    "qwen3_30b_a3b_pretrain_config": "Qwen/Qwen3-30B-A3B",
    "llama31_8b_pretrain_config": "meta-llama/Meta-Llama-3.1-8B",
    "llama31_70b_pretrain_config": "meta-llama/Meta-Llama-3.1-70B",
    "llama31_405b_pretrain_config": "meta-llama/Meta-Llama-3.1-405B",
    "gpt_oss_120b_pretrain_config": "openai/gpt-oss-120b",
}
"""The HuggingFace config each recipe builds its model from (it downloads it unless cached)."""

RECIPE_DEFAULTS: dict[str, dict[str, object]] = {
    "deepseek_v3_pretrain_config": {
        "model.tensor_model_parallel_size": 2, "model.pipeline_model_parallel_size": 16,
        "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 1,
        "model.expert_model_parallel_size": 64, "model.expert_tensor_parallel_size": 1,
        "model.recompute_granularity": None, "model.moe_token_dispatcher_type": "flex",
        "model.moe_flex_dispatcher_backend": "hybridep", "model.mtp_num_layers": 1,
        "optimizer.use_precision_aware_optimizer": True, "optimizer.exp_avg_dtype": "bf16",
        "optimizer.exp_avg_sq_dtype": "bf16", "ddp.use_distributed_optimizer": True,
        "ddp.use_megatron_fsdp": False, "train.micro_batch_size": 1, "train.global_batch_size": 4096,
        "dataset.seq_length": 4096, "comm_overlap": True,
    },
    "qwen3_235b_a22b_pretrain_config": {
        "model.tensor_model_parallel_size": 4, "model.pipeline_model_parallel_size": 16,
        "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 2,
        "model.expert_model_parallel_size": 8, "model.expert_tensor_parallel_size": 1,
        "model.account_for_embedding_in_pipeline_split": True, "model.account_for_loss_in_pipeline_split": True,
        "model.recompute_granularity": None, "model.moe_token_dispatcher_type": "flex",
        "model.moe_flex_dispatcher_backend": "deepep", "optimizer.use_precision_aware_optimizer": False,
        "optimizer.exp_avg_dtype": "fp32", "optimizer.exp_avg_sq_dtype": "fp32", "ddp.use_distributed_optimizer": True,
        "ddp.use_megatron_fsdp": False, "train.micro_batch_size": 1, "train.global_batch_size": 32,
        "dataset.seq_length": 4096, "comm_overlap": False,
    },
    "qwen3_30b_a3b_pretrain_config": {
        "model.tensor_model_parallel_size": 1, "model.pipeline_model_parallel_size": 1,
        "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 1,
        "model.expert_model_parallel_size": 16, "model.expert_tensor_parallel_size": 1,
        "model.recompute_granularity": None, "model.moe_token_dispatcher_type": "flex",
        "model.moe_flex_dispatcher_backend": "hybridep", "model.cuda_graph_impl": "transformer_engine",
        "optimizer.use_precision_aware_optimizer": True, "optimizer.exp_avg_dtype": "fp32",
        "optimizer.exp_avg_sq_dtype": "fp32", "ddp.use_distributed_optimizer": True, "ddp.use_megatron_fsdp": False,
        "train.micro_batch_size": 1, "train.global_batch_size": 1024, "dataset.seq_length": 4096,
        "comm_overlap": True,
    },
    "llama31_8b_pretrain_config": {
        "model.tensor_model_parallel_size": 1, "model.pipeline_model_parallel_size": 1,
        "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 2,
        "model.recompute_granularity": None, "optimizer.use_precision_aware_optimizer": False,
        "optimizer.exp_avg_dtype": "fp32", "optimizer.exp_avg_sq_dtype": "fp32",
        "ddp.use_distributed_optimizer": True, "ddp.use_megatron_fsdp": False, "train.micro_batch_size": 1,
        "train.global_batch_size": 512, "dataset.seq_length": 8192, "comm_overlap": False,
    },
    "llama31_70b_pretrain_config": {
        "model.tensor_model_parallel_size": 4, "model.pipeline_model_parallel_size": 4,
        "model.virtual_pipeline_model_parallel_size": 5, "model.context_parallel_size": 2,
        "model.recompute_granularity": None, "optimizer.use_precision_aware_optimizer": False,
        "optimizer.exp_avg_dtype": "fp32", "optimizer.exp_avg_sq_dtype": "fp32",
        "ddp.use_distributed_optimizer": True, "ddp.use_megatron_fsdp": False, "train.micro_batch_size": 1,
        "train.global_batch_size": 512, "dataset.seq_length": 131072, "comm_overlap": True,
    },
    "llama31_405b_pretrain_config": {
        "model.tensor_model_parallel_size": 8, "model.pipeline_model_parallel_size": 8,
        "model.virtual_pipeline_model_parallel_size": 2, "model.context_parallel_size": 4,
        "model.account_for_embedding_in_pipeline_split": True, "model.account_for_loss_in_pipeline_split": True,
        "model.recompute_granularity": None, "optimizer.use_precision_aware_optimizer": False,
        "optimizer.exp_avg_dtype": "fp32", "optimizer.exp_avg_sq_dtype": "fp32",
        "ddp.use_distributed_optimizer": True, "ddp.use_megatron_fsdp": False, "train.micro_batch_size": 1,
        "train.global_batch_size": 512, "dataset.seq_length": 131072, "comm_overlap": True,
    },
    "gpt_oss_120b_pretrain_config": {
        "model.tensor_model_parallel_size": 2, "model.pipeline_model_parallel_size": 4,
        "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 1,
        "model.expert_model_parallel_size": 16, "model.expert_tensor_parallel_size": 1,
        "model.recompute_granularity": None, "model.moe_token_dispatcher_type": "alltoall",
        "optimizer.use_precision_aware_optimizer": False, "optimizer.exp_avg_dtype": "fp32",
        "optimizer.exp_avg_sq_dtype": "fp32", "ddp.use_distributed_optimizer": True, "ddp.use_megatron_fsdp": False,
        "train.micro_batch_size": 1, "train.global_batch_size": 512, "dataset.seq_length": 4096,
        "comm_overlap": False,
    },
}
"""What each recipe builds for the plan-relevant fields (``comm_overlap``: whether it has a
CommOverlapConfig, which decides where EP overlap is set). The DeepSeek-V3 recipe's pipeline
layout is 16 stages built by ``set_deepseek_v3_pipeline_model_parallel_layout``; the recipes'
sequence parallelism follows TP > 1. Kimi-K2's recipe is listed without defaults: its model type
needs the model's own code (trust_remote_code), so Bridge cannot build it from a config file
alone here."""


def recipe_for(model, override: str | None = None) -> str | None:
    """The recipe name for a model (``override`` wins: a recipe function name)."""
    if override:
        return override
    for name in [model.name, *getattr(model, "aliases", [])]:
        if name in BRIDGE_RECIPES:
            return BRIDGE_RECIPES[name]
    return None


def model_for_recipe(recipe: str) -> str | None:
    """The catalog model a recipe builds (a library alias or its full H100/GPU-specific name)."""
    for model, name in BRIDGE_RECIPES.items():
        if recipe == name:
            return model
    stems = {
        "deepseek_v3_": "deepseek-v3", "kimi_k2_": "kimi-k2", "qwen3_235b_a22b_": "qwen3-235b-a22b",
        "qwen3_30b_a3b_": "qwen3-30b-a3b", "llama31_8b_": "llama3.1-8b", "llama31_70b_": "llama3.1-70b",
        "llama31_405b_": "llama3.1-405b", "gpt_oss_120b_": "gpt-oss-120b",
    }
    for stem, model in stems.items():
        if recipe.startswith(stem):
            return model
    return None


def has_comm_overlap(recipe: str) -> bool | None:
    """Whether the recipe builds a CommOverlapConfig (None: not known to planner)."""
    d = RECIPE_DEFAULTS.get(recipe)
    return None if d is None else bool(d["comm_overlap"])
