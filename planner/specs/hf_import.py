"""HuggingFace ``config.json`` -> :class:`~planner.specs.model.ModelSpec`.

Reads the configs of the llama, mixtral, qwen3, qwen3_moe, deepseek_v2, deepseek_v3 (and kimi_k2,
which is the DeepSeek-V3 architecture under its own model_type) and gpt_oss families: the fields
that decide parameters, memory and FLOPs. Everything else in the file (tokenizer ids, rope scaling,
quantization) is ignored. Defaults are those of the ``transformers`` config class of each family
(e.g. ``num_key_value_heads`` = ``num_attention_heads`` when absent).

Any problem (unreadable JSON, an unsupported model_type, a missing, mistyped or out-of-range field,
a layer pattern planner cannot express) is a one-paragraph :class:`~planner.errors.PlannerError`
that names the file and the field.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import PlannerError

# model_type -> family reader; architectures[0] -> model_type for configs that omit model_type.
_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MixtralForCausalLM": "mixtral",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
}

_MISSING = object()


def _short(value: Any) -> str:
    """repr of a config value for a message, cut short (a list may be long or nested deep)."""
    if isinstance(value, (list, dict)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Config:
    """Typed access to a config's fields; every error names the file and the field."""

    def __init__(self, path: Path, data: dict, model_type: str):
        self.path = path
        self.data = data
        self.model_type = model_type

    def error(self, field: str, problem: str, hint: str | None = None) -> PlannerError:
        return PlannerError(
            f"HuggingFace config '{self.path}' (model_type {self.model_type}): field '{field}' {problem}.",
            hint=hint or "Check the value against the model's published config.json.",
        )

    def _get(self, field: str, default: Any):
        if field in self.data and self.data[field] is not None:
            return self.data[field]
        if default is _MISSING:
            raise self.error(field, "is missing", hint=f"A {self.model_type} config.json must give '{field}'.")
        return default

    def integer(self, field: str, default: Any = _MISSING, minimum: int = 1) -> int:
        value = self.optional_integer(field, minimum) if default is None else self._whole(field, default, minimum)
        assert value is not None  # only a None default gives None, and optional_integer returns it
        return value

    def optional_integer(self, field: str, minimum: int = 1) -> int | None:
        return None if self._get(field, None) is None else self._whole(field, _MISSING, minimum)

    def _whole(self, field: str, default: Any, minimum: int) -> int:
        value = self._get(field, default)
        # JSON has one number type: accept 4096.0, refuse True and 4096.5.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise self.error(field, f"must be a whole number, not {_short(value)}")
        if value < minimum:
            raise self.error(field, f"must be at least {minimum}, not {_short(value)}")
        return int(value)

    def boolean(self, field: str, default: Any = _MISSING) -> bool:
        value = self._get(field, default)
        if not isinstance(value, bool):
            raise self.error(field, f"must be true or false, not {_short(value)}")
        return value

    def text(self, field: str, default: Any = _MISSING) -> str:
        value = self._get(field, default)
        if not isinstance(value, str):
            raise self.error(field, f"must be a string, not {_short(value)}")
        return value

    def index_list(self, field: str, default: Any = _MISSING) -> list[int]:
        value = self._get(field, default)
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.error(field, f"must be a list of layer indices, not {_short(value)}")
        return value


# ---- pieces shared by the families ---------------------------------------------------------------

def _common(c: _Config) -> dict:
    """Width, depth, vocabulary, embeddings, positions and norm of a RoPE/RMSNorm decoder."""
    return {
        "hidden_size": c.integer("hidden_size"),
        "num_layers": c.integer("num_hidden_layers"),
        "vocab_size": c.integer("vocab_size"),
        "tie_embeddings": c.boolean("tie_word_embeddings", False),
        "position_embedding": "rope",
        "max_position_embeddings": c.optional_integer("max_position_embeddings"),
        "norm": "rmsnorm",
    }


def _gated_ffn(c: _Config, width_field: str = "intermediate_size", bias: bool = False) -> dict:
    """These families all use a gated MLP (gate, up, down); hidden_act only names its nonlinearity."""
    c.text("hidden_act", "silu")  # silu in all of them; a gated GELU would count the same
    return {"activation": "swiglu", "hidden_size": c.integer(width_field), "bias": bias}


def _gqa(c: _Config, *, qk_norm: bool = False, bias_field: str | None = "attention_bias") -> dict:
    heads = c.integer("num_attention_heads")
    kv_heads = c.integer("num_key_value_heads", heads)
    hidden = c.integer("hidden_size")
    if heads % kv_heads:
        raise c.error(
            "num_key_value_heads",
            f"({kv_heads}) must divide num_attention_heads ({heads}): each key/value head serves a whole "
            "group of query heads",
        )
    if "head_dim" in c.data and c.data["head_dim"] is not None:
        head_dim = c.integer("head_dim")
    else:
        if hidden % heads:
            raise c.error(
                "head_dim",
                f"is absent and hidden_size ({hidden}) is not divisible by num_attention_heads ({heads})",
                hint="Give head_dim explicitly.",
            )
        head_dim = hidden // heads
    bias = c.boolean(bias_field, False) if bias_field else False
    return {
        "kind": "gqa",
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "qk_norm": qk_norm,
        "qkv_bias": bias,
        "output_bias": bias,
    }


def _check_top_k(c: _Config, top_k_field: str, experts_field: str) -> None:
    top_k, experts = c.integer(top_k_field), c.integer(experts_field)
    if top_k > experts:
        raise c.error(
            top_k_field,
            f"({top_k}) exceeds {experts_field} ({experts}): a token cannot be routed to more experts than exist",
        )


def _first_k_dense(c: _Config, field: str, num_layers: int) -> int:
    """A list of dense layer indices planner can express only as a prefix 0..k-1."""
    layers = sorted(set(c.index_list(field, [])))
    if layers != list(range(len(layers))) or (layers and layers[-1] >= num_layers):
        raise c.error(
            field,
            f"lists {_short(layers) if len(layers) > 16 else layers}: planner models dense layers only as the first "
            "k layers (0..k-1)",
            hint="Convert the model to a YAML spec by hand if its dense layers are interleaved.",
        )
    return len(layers)


# ---- families ------------------------------------------------------------------------------------

def _llama(c: _Config) -> dict:
    return {
        **_common(c),
        "attention": _gqa(c),
        "ffn": _gated_ffn(c, bias=c.boolean("mlp_bias", False)),
    }


def _mixtral(c: _Config) -> dict:
    _check_top_k(c, "num_experts_per_tok", "num_local_experts")
    width = c.integer("intermediate_size")
    return {
        **_common(c),
        "attention": _gqa(c, bias_field=None),
        "ffn": _gated_ffn(c),
        "moe": {
            "num_experts": c.integer("num_local_experts"),
            "top_k": c.integer("num_experts_per_tok"),
            "expert_hidden_size": width,
            "score_function": "softmax",
        },
    }


def _qwen3(c: _Config) -> dict:
    # Qwen3 attention always carries per-head RMSNorm on queries and keys (q_norm, k_norm).
    return {
        **_common(c),
        "attention": _gqa(c, qk_norm=True),
        "ffn": _gated_ffn(c),
    }


def _qwen3_moe(c: _Config) -> dict:
    spec = _qwen3(c)
    _check_top_k(c, "num_experts_per_tok", "num_experts")
    if c.integer("decoder_sparse_step", 1) != 1:
        raise c.error(
            "decoder_sparse_step",
            f"is {c.data['decoder_sparse_step']}: planner models MoE layers from the first sparse layer on, "
            "every layer (step 1)",
        )
    spec["moe"] = {
        "num_experts": c.integer("num_experts"),
        "top_k": c.integer("num_experts_per_tok"),
        "expert_hidden_size": c.integer("moe_intermediate_size"),
        "first_k_dense": _first_k_dense(c, "mlp_only_layers", spec["num_layers"]),
        "score_function": "softmax",
    }
    return spec


def _deepseek(c: _Config) -> dict:
    """DeepSeek-V2/V3 and Kimi K2: MLA attention, DeepSeekMoE with shared experts, MTP (V3)."""
    spec = _common(c)
    spec["attention"] = {
        "kind": "mla",
        "num_heads": c.integer("num_attention_heads"),
        "q_lora_rank": c.optional_integer("q_lora_rank"),
        "kv_lora_rank": c.integer("kv_lora_rank"),
        "qk_nope_head_dim": c.integer("qk_nope_head_dim"),
        "qk_rope_head_dim": c.integer("qk_rope_head_dim"),
        "v_head_dim": c.integer("v_head_dim"),
    }
    spec["ffn"] = _gated_ffn(c)
    if c.optional_integer("n_routed_experts") is not None:
        _check_top_k(c, "num_experts_per_tok", "n_routed_experts")
        scoring = c.text("scoring_func", "softmax")
        if scoring not in ("softmax", "sigmoid"):
            raise c.error("scoring_func", f"is '{scoring}'; planner knows softmax and sigmoid routers")
        first_k = c.integer("first_k_dense_replace", 0, minimum=0)
        if first_k > spec["num_layers"]:
            raise c.error(
                "first_k_dense_replace",
                f"({first_k}) exceeds num_hidden_layers ({spec['num_layers']})",
            )
        spec["moe"] = {
            "num_experts": c.integer("n_routed_experts"),
            "top_k": c.integer("num_experts_per_tok"),
            "expert_hidden_size": c.integer("moe_intermediate_size"),
            "num_shared_experts": c.integer("n_shared_experts", 0, minimum=0),
            "first_k_dense": first_k,
            "layer_freq": c.integer("moe_layer_freq", 1),
            # noaux_tc routing adds e_score_correction_bias (one per expert) to the router.
            "router_bias": c.text("topk_method", "greedy") == "noaux_tc",
            "score_function": scoring,
            "num_groups": c.optional_integer("n_group"),
            "group_top_k": c.optional_integer("topk_group"),
        }
    spec["mtp_layers"] = c.integer("num_nextn_predict_layers", 0, minimum=0)
    return spec


def _sliding_every(c: _Config, num_layers: int) -> int | None:
    """gpt-oss layer_types: the sliding-window layers must be every n-th layer from layer 0."""
    types = c._get("layer_types", None)
    if types is None:
        return 2  # GptOssConfig's default alternates, sliding first
    if not isinstance(types, list) or len(types) != num_layers or not all(isinstance(t, str) for t in types):
        raise c.error("layer_types",
                      f"must list one type per layer ({num_layers}, each a string), not {_short(types)}")
    unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
    if unknown:
        raise c.error("layer_types", f"has unknown layer type '{unknown[0]}'")
    sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
    if not sliding:
        return None
    step = sliding[1] - sliding[0] if len(sliding) > 1 else num_layers
    if sliding != list(range(0, num_layers, step)):
        raise c.error(
            "layer_types",
            "has sliding-window layers planner cannot express: it models every n-th layer from layer 0",
        )
    return step


def _gpt_oss(c: _Config) -> dict:
    spec = _common(c)
    _check_top_k(c, "num_experts_per_tok", "num_local_experts")
    attention = _gqa(c)
    attention["qkv_bias"] = attention["output_bias"] = c.boolean("attention_bias", True)
    attention["sinks"] = True  # learned per-head sinks are part of the gpt-oss architecture
    every = _sliding_every(c, spec["num_layers"])
    if every is not None:
        attention["sliding_window"] = c.integer("sliding_window")
        attention["sliding_window_every"] = every
    spec["attention"] = attention
    spec["ffn"] = _gated_ffn(c)
    spec["moe"] = {
        "num_experts": c.integer("num_local_experts"),
        "top_k": c.integer("num_experts_per_tok"),
        "expert_hidden_size": c.integer("intermediate_size"),
        "router_linear_bias": True,  # the router is a linear layer with a bias
        "expert_bias": True,  # gate_up_proj_bias and down_proj_bias
        "score_function": "softmax",
    }
    return spec


_FAMILIES: dict[str, Callable[[_Config], dict]] = {
    "llama": _llama,
    "mixtral": _mixtral,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gpt_oss": _gpt_oss,
}

SUPPORTED_MODEL_TYPES = tuple(_FAMILIES)


def _model_type(path: Path, data: dict) -> str:
    model_type = data.get("model_type")
    if model_type is None:
        archs = data.get("architectures") or []
        archs = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
        model_type = next((_ARCHITECTURES[a] for a in archs if a in _ARCHITECTURES), None)
        if model_type is None:
            raise PlannerError(
                f"HuggingFace config '{path}' has no 'model_type' field (nor a known 'architectures' entry).",
                hint="planner reads the model_types " + ", ".join(SUPPORTED_MODEL_TYPES) + ".",
            )
    if not isinstance(model_type, str) or model_type not in _FAMILIES:
        raise PlannerError(
            f"HuggingFace config '{path}': field 'model_type' is {_short(model_type)}, which planner does not read.",
            hint="Supported model_types: " + ", ".join(SUPPORTED_MODEL_TYPES)
            + ". For another architecture write a model YAML (see models/ and the README).",
        )
    return model_type


def _name(path: Path) -> str:
    """A catalog-style name: the folder of a config.json (as the hub lays models out), else the
    stem, lower-case, with anything but letters, digits and ._+- made a '-' (a folder name may
    hold a newline or shell syntax, and the name is printed in tables and launch scripts)."""
    import re

    stem = path.resolve().parent.name if path.name == "config.json" else path.stem
    name = re.sub(r"[^a-z0-9._+-]+", "-", stem.lower()).strip("-.")[:128]
    return name or "imported-model"


def _display_name(value, fallback: str) -> str:
    """config.json's _name_or_path as one line of at most 256 printable characters."""
    text = "".join(c for c in str(value) if c.isprintable())[:256].strip() if isinstance(value, str) else ""
    return text or fallback


def import_hf_config(path: str | Path):
    """Read a HuggingFace ``config.json`` into a :class:`ModelSpec` (see the module docstring)."""
    from planner.specs.catalog import read_json, validate_spec
    from planner.specs.model import ModelSpec

    path = Path(path)
    data = read_json(path, "HuggingFace config")
    model_type = _model_type(path, data)
    c = _Config(path, data, model_type)
    spec = _FAMILIES[model_type](c)
    name = _name(path)
    spec.update(
        name=name,
        display_name=_display_name(data.get("_name_or_path"), name),
        source=[f"{path} (HuggingFace config.json, model_type {model_type})"],
        notes="Imported from a HuggingFace config.json: no published counts or reference job; give the job "
        "with --gpus/--global-batch/--seq-len or --job.",
    )
    if spec.get("max_position_embeddings") is None:
        spec.pop("max_position_embeddings", None)
    return validate_spec(ModelSpec, spec, "model", str(path))
