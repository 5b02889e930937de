"""config_registry functions for torchtitan 0.3.0 that its registry lacks, as a user would write
them and pass with `planner export --format torchtitan --torchtitan-config tt_configs:FUNCTION`
(ConfigManager imports a module path given to --module). Used by the CPU validation tests."""

import torchtitan.models.llama3.config_registry as llama3_configs
from torchtitan.models.deepseek_v3 import model_registry as deepseek_v3_registry
from torchtitan.models.deepseek_v3.config_registry import deepseek_v3_671b


def llama3_405b_bf16():
    """torchtitan's llama3_405b without its Float8 converters (a bf16 plan). The converters are
    dropped while the registry function runs: building them needs float8 hardware or emulation."""
    original = llama3_configs.model_registry

    def without_converters(flavor, **kwargs):
        kwargs.pop("converters", None)
        return original(flavor, **kwargs)

    llama3_configs.model_registry = without_converters
    try:
        return llama3_configs.llama3_405b()
    finally:
        llama3_configs.model_registry = original


def deepseek_v3_671b_mtp():
    """torchtitan's deepseek_v3_671b with DeepSeek-V3's one MTP module."""
    config = deepseek_v3_671b()
    config.model_spec = deepseek_v3_registry("671B", attn_backend="flex", num_mtp_layers=1)
    return config
