"""HuggingFace ``config.json`` -> :class:`~planner.specs.model.ModelSpec`.

Reads the configs of the llama, mistral, mixtral, qwen2 (Qwen2.5), qwen3, qwen3_moe, phi3
(Phi-3/Phi-4), gemma3, llama4, glm4_moe (GLM-4.5), deepseek_v2, deepseek_v3, kimi_k2 (the
DeepSeek-V3 architecture under its own model_type), kimi_k25 and gpt_oss families: the fields that
decide parameters, memory and FLOPs, and the architecture details a launcher needs to build the
same model (rotary base and scaling, sliding windows and their layer pattern, chunked attention,
no-RoPE layers, QK norms, soft-capping, shared experts, dense-first or interleaved MoE layers, the
routed scaling factor). Multimodal configs (gemma3, llama4, kimi_k25) nest the text model under
``text_config``: planner reads the text model (the vision tower is not planned). Tokenizer ids
and quantization are ignored. Defaults are those of the ``transformers`` config class of each
family (e.g. ``num_key_value_heads`` = ``num_attention_heads`` when absent; a Gemma 3 text config
lists only the fields that differ from ``Gemma3TextConfig``'s).

Any problem (unreadable JSON, an unsupported model_type, a missing, mistyped or out-of-range field,
a layer pattern planner cannot express) is a one-paragraph :class:`~planner.errors.PlannerError`
that names the file and the field; a config of an unknown family whose fields look like a Llama
decoder's says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
import re
from typing import Any

from planner.errors import PlannerError
from planner.specs.catalog import read_json, validate_spec
from planner.specs.model import ModelSpec

# model_type -> family reader; architectures[0] -> model_type for configs that omit model_type.
_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Phi3ForCausalLM": "phi3",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Llama4ForCausalLM": "llama4_text",
    "Llama4ForConditionalGeneration": "llama4",
    "Glm4MoeForCausalLM": "glm4_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "KimiK25ForConditionalGeneration": "kimi_k25",
    "GptOssForCausalLM": "gpt_oss",
}

# Multimodal configs: the text model's config is the 'text_config' mapping, read as this type.
_NESTED = {"gemma3": "gemma3_text", "llama4": "llama4_text", "kimi_k25": "kimi_k2"}

_MISSING = object()


def _short(value: Any) -> str:
    """repr of a config value for a message, cut short (a list may be long or nested deep)."""
    if isinstance(value, (list, dict)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Config:
    """Typed access to a config's fields; every error names the file and the field."""

    def __init__(self, path: Path, data: dict, model_type: str, prefix: str = "", defaults: dict | None = None):
        self.path = path
        self.data = data
        self.model_type = model_type
        self.prefix = prefix
        """'text_config.' when the fields are the nested text model's."""
        self.defaults = defaults or {}
        """The transformers config class's defaults for fields a config may leave out (Gemma 3)."""
        self.notes: list[str] = []

    def error(self, field: str, problem: str, hint: str | None = None) -> PlannerError:
        return PlannerError(
            f"HuggingFace config '{self.path}' (model_type {self.model_type}): field '{self.prefix}{field}' {problem}.",
            hint=hint or "Check the value against the model's published config.json.",
        )

    def has(self, field: str) -> bool:
        """Whether the file gives the field (or the config class has a default for it)."""
        return self.data.get(field) is not None or field in self.defaults

    def _get(self, field: str, default: Any):
        if field in self.data and self.data[field] is not None:
            return self.data[field]
        if field in self.defaults:  # the config class's default for a field the file leaves out
            return self.defaults[field]
        if default is _MISSING:
            raise self.error(field, "is missing", hint=f"A {self.model_type} config.json must give '{field}'.")
        return default

    def number(self, field: str, default: Any = _MISSING) -> float | None:
        """A finite number; None only when the field is absent and the default is None."""
        value = self._get(field, default)
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) > 1e30:
            raise self.error(field, f"must be a number, not {_short(value)}")
        return float(value)

    def mapping(self, field: str) -> dict | None:
        value = self._get(field, None)
        if value is not None and not isinstance(value, dict):
            raise self.error(field, f"must be a mapping, not {_short(value)}")
        return value

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

def _common(c: _Config, tie_default: bool = False) -> dict:
    """Width, depth, vocabulary, embeddings, positions, norm and rotary details of a RoPE/RMSNorm
    decoder."""
    spec = {
        "hidden_size": c.integer("hidden_size"),
        "num_layers": c.integer("num_hidden_layers"),
        "vocab_size": c.integer("vocab_size"),
        "tie_embeddings": c.boolean("tie_word_embeddings", tie_default),
        "position_embedding": "rope",
        "max_position_embeddings": c.optional_integer("max_position_embeddings"),
        "norm": "rmsnorm",
    }
    rope = _rope(c)
    if rope is not None:
        spec["rope"] = rope
    return spec


_ROPE_TYPES = {"default": "none", "linear": "linear", "llama3": "llama3", "yarn": "yarn"}


def _rope(c: _Config) -> dict | None:
    """rope_theta, partial_rotary_factor and rope_scaling (its rope_type or older 'type'); None
    when the config gives no rotary base. A scaling type planner does not name (longrope,
    dynamic) is kept out with a note: it changes neither memory nor time."""
    theta = c.number("rope_theta", None)
    if theta is None:
        return None
    if theta <= 0:
        raise c.error("rope_theta", f"must be positive, not {_short(theta)}")
    rope: dict[str, Any] = {"theta": theta}
    percent = c.number("partial_rotary_factor", None)
    if percent is not None:
        if not 0 < percent <= 1:
            raise c.error("partial_rotary_factor", f"must be in (0, 1], not {_short(percent)}")
        rope["percent"] = percent
    scaling = c.mapping("rope_scaling")
    if scaling:
        sc = _Config(c.path, scaling, c.model_type, f"{c.prefix}rope_scaling.")
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind not in _ROPE_TYPES:
            c.notes.append(f"rope_scaling type {_short(kind)} is not recorded (no effect on memory or time)")
            return rope
        rope["scaling"] = _ROPE_TYPES[kind]
        for field in ("factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale",
                      "mscale_all_dim"):
            value = sc.number(field, None)
            if value is not None:
                rope[field] = value
        omp = sc.optional_integer("original_max_position_embeddings")
        if omp is not None:
            rope["original_max_position_embeddings"] = omp
        if scaling.get("truncate") is not None:
            rope["truncate"] = sc.boolean("truncate")
    return rope


def _gated_ffn(c: _Config, width_field: str = "intermediate_size", bias: bool = False,
               act_field: str = "hidden_act", act_default: str = "silu") -> dict:
    """These families all use a gated MLP (gate, up, down): SiLU-gated (SwiGLU) or GELU-gated
    (GeGLU, Gemma's gelu_pytorch_tanh); the nonlinearity does not change the counts."""
    act = c.text(act_field, act_default)
    if act not in ("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new", "gelu_tanh"):
        raise c.error(act_field, f"is '{act}'; planner reads gated SiLU and gated GELU MLPs")
    return {"activation": "swiglu" if act in ("silu", "swish") else "geglu", "hidden_size": c.integer(width_field),
            "bias": bias}


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
    if c.has("head_dim"):
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


def _moe_layers(c: _Config, field: str, moe_layers: list[int], num_layers: int) -> dict:
    """The MoE layers (0-based indices) as planner's fields: first_k_dense (the layers from k on),
    layer_freq (DeepSeek's rule), or an explicit layer_pattern (Llama 4 Maverick, a Qwen3 config
    with scattered mlp_only_layers)."""
    layers = sorted(set(moe_layers))
    if any(i < 0 or i >= num_layers for i in layers):
        raise c.error(field, f"names a layer outside 0..{num_layers - 1}")
    if not layers:
        raise c.error(field, "leaves no MoE layer: the model would be dense",
                      hint="Import a dense model from a dense config.")
    if layers == list(range(layers[0], num_layers)):
        return {"first_k_dense": layers[0]} if layers[0] else {}
    return {"layer_pattern": [1 if i in set(layers) else 0 for i in range(num_layers)]}


# ---- families ------------------------------------------------------------------------------------

def _llama(c: _Config) -> dict:
    return {
        **_common(c),
        "attention": _gqa(c),
        "ffn": _gated_ffn(c, bias=c.boolean("mlp_bias", False)),
    }


def _every_layer_window(c: _Config, attention: dict) -> None:
    """Mistral's and Phi-3's sliding_window: every layer slides when it is set (Mistral 7B v0.1:
    4096, Phi-3-mini: 2047); null (Mistral NeMo, Phi-4) means full attention."""
    window = c.optional_integer("sliding_window")
    if window is not None:
        attention["sliding_window"] = window


def _mistral(c: _Config) -> dict:
    # MistralConfig: Llama's layers, an optional head_dim (NeMo: 128 for 5120 / 32 heads) and an
    # optional sliding window; no attention or MLP biases.
    attention = _gqa(c, bias_field=None)
    _every_layer_window(c, attention)
    return {**_common(c), "attention": attention, "ffn": _gated_ffn(c)}


def _qwen2(c: _Config) -> dict:
    # Qwen2 attention always has q/k/v biases (Qwen2Attention: bias=True) and an o_proj without.
    attention = _gqa(c, bias_field=None)
    attention["qkv_bias"], attention["output_bias"] = True, False
    if c.boolean("use_sliding_window", False):
        raise c.error("use_sliding_window", "is true: Qwen2 then slides from layer max_window_layers on, a pattern "
                      "planner cannot express (it models every n-th layer sliding)",
                      hint="Write a model YAML with the layers' attention as planner can express it.")
    return {**_common(c), "attention": attention, "ffn": _gated_ffn(c)}


def _phi3(c: _Config) -> dict:
    # Phi3Config: fused qkv_proj and gate_up_proj hold the same weights as separate ones; no
    # biases; partial rotary and an optional sliding window on every layer.
    attention = _gqa(c, bias_field=None)
    _every_layer_window(c, attention)
    return {**_common(c), "attention": attention, "ffn": _gated_ffn(c)}


# transformers' Gemma3TextConfig defaults (models/gemma3/configuration_gemma3.py): a Gemma 3 text
# config lists only the fields that differ (the 27B one gives 10).
_GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131072, "tie_word_embeddings": True, "rope_theta": 1_000_000.0,
    "attention_bias": False, "query_pre_attn_scalar": 256, "sliding_window": 4096, "sliding_window_pattern": 6,
    "rope_local_base_freq": 10_000.0,
}


def _gemma3(c: _Config) -> dict:
    """Gemma 3's text model: GQA with a head_dim override, q/k RMSNorms (always), four norms per
    layer, a GELU-gated MLP, sliding-window layers with one global layer in every
    sliding_window_pattern (layer_types when listed), scores scaled by query_pre_attn_scalar,
    optional soft-capping, tied embeddings."""
    c.defaults = _GEMMA3_TEXT_DEFAULTS
    spec = _common(c, tie_default=True)
    attention = _gqa(c, qk_norm=True)
    attention["sliding_window"] = c.integer("sliding_window")
    attention.update(_gemma_window_pattern(c, spec["num_layers"]))
    scale = c.integer("query_pre_attn_scalar")
    if scale != attention["head_dim"]:
        attention["softmax_scale_dim"] = scale
    spec["attention"] = attention
    spec["post_norms"] = True
    spec["ffn"] = _gated_ffn(c, act_field="hidden_activation", act_default="gelu_pytorch_tanh")
    for field, key in (("final_logit_softcapping", "logit_softcap"), ("attn_logit_softcapping", "attn_logit_softcap")):
        cap = c.number(field, None)
        if cap is not None:
            if cap <= 0:
                raise c.error(field, f"must be positive, not {_short(cap)}")
            spec[key] = cap
    if "rope" in spec:
        spec["rope"]["local_theta"] = c.number("rope_local_base_freq")
    return spec


def _gemma_window_pattern(c: _Config, num_layers: int) -> dict:
    """layer_types if listed (each 'sliding_attention' or 'full_attention'), else
    sliding_window_pattern: layer i (0-based) is global when (i + 1) % pattern == 0."""
    types = c._get("layer_types", None)
    if types is None:
        # transformers 4.50 writes sliding_window_pattern, later versions _sliding_window_pattern
        key = "_sliding_window_pattern" if c.data.get("_sliding_window_pattern") is not None else "sliding_window_pattern"
        return {"global_every": c.integer(key)}
    sliding = _layer_types(c, types, num_layers)
    full = [i for i in range(num_layers) if i not in set(sliding)]
    if not full:
        return {}
    step = full[0] + 1
    if full != list(range(step - 1, num_layers, step)):
        raise c.error("layer_types", "has global layers planner cannot express: it models one global layer in every "
                      "n (layers n-1, 2n-1, ...)")
    return {"global_every": step}


def _layer_types(c: _Config, types, num_layers: int) -> list[int]:
    """The sliding-window layers of a layer_types list."""
    if not isinstance(types, list) or len(types) != num_layers or not all(isinstance(t, str) for t in types):
        raise c.error("layer_types",
                      f"must list one type per layer ({num_layers}, each a string), not {_short(types)}")
    unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
    if unknown:
        raise c.error("layer_types", f"has unknown layer type '{unknown[0]}'")
    return [i for i, t in enumerate(types) if t == "sliding_attention"]


def _llama4(c: _Config) -> dict:
    """Llama 4's text model (Llama4TextConfig): MoE layers of top-1 sigmoid-routed experts plus a
    shared expert, every layer or interleaved (interleave_moe_layer_step, moe_layers), dense
    layers of intermediate_size_mlp, no-RoPE layers every no_rope_layer_interval (no_rope_layers
    when listed: 1 = RoPE), chunked attention on the RoPE layers, parameter-free L2 QK norm."""
    spec = _common(c)
    L = spec["num_layers"]
    attention = _gqa(c)
    attention["qk_l2_norm"] = c.boolean("use_qk_norm", True)
    listed = c._get("no_rope_layers", None)
    if listed:  # transformers: an empty or absent list means the default interval
        if not isinstance(listed, list) or len(listed) != L or any(x not in (0, 1) or isinstance(x, bool) for x in listed):
            raise c.error("no_rope_layers", f"must list 0 or 1 for each of the {L} layers, not {_short(listed)}")
        nope = [i for i, x in enumerate(listed) if x == 0]
        step = nope[0] + 1 if nope else None
        if step is not None and nope != list(range(step - 1, L, step)):
            raise c.error("no_rope_layers", "has no-RoPE layers planner cannot express: it models every n-th layer "
                          "(n-1, 2n-1, ...)")
    else:
        step = c.integer("no_rope_layer_interval", 4)
    if step is not None and step <= L:
        attention["no_rope_every"] = step
    chunk = c.optional_integer("attention_chunk_size")
    if chunk is not None:
        attention["attention_chunk"] = chunk
    spec["attention"] = attention
    spec["ffn"] = _gated_ffn(c, width_field="intermediate_size_mlp")
    _check_top_k(c, "num_experts_per_tok", "num_local_experts")
    moe_layers = c._get("moe_layers", None)
    if moe_layers is None:
        every = c.integer("interleave_moe_layer_step", 1)
        moe_layers = list(range(every - 1, L, every))
    else:
        moe_layers = c.index_list("moe_layers")
    width = c.integer("intermediate_size")
    spec["moe"] = {
        "num_experts": c.integer("num_local_experts"),
        "top_k": c.integer("num_experts_per_tok"),
        "expert_hidden_size": width,
        "num_shared_experts": 1,  # Llama4TextMoe: one shared expert of intermediate_size
        "score_function": "sigmoid",  # Llama4TextMoe: sigmoid of the top-k router logits
        **_moe_layers(c, "moe_layers", moe_layers, L),
    }
    return spec


def _glm4_moe(c: _Config) -> dict:
    """GLM-4.5 (Glm4MoeConfig): GQA with a head_dim override, q/k/v biases (attention_bias; the
    output projection has none), an optional QK norm (use_qk_norm), partial rotary, dense first
    layers, sigmoid routing with a score-correction bias, one shared expert, MTP."""
    spec = _common(c)
    attention = _gqa(c, qk_norm=c.boolean("use_qk_norm", False), bias_field=None)
    attention["qkv_bias"] = c.boolean("attention_bias", False)
    spec["attention"] = attention
    spec["ffn"] = _gated_ffn(c)
    _check_top_k(c, "num_experts_per_tok", "n_routed_experts")
    first_k = c.integer("first_k_dense_replace", 1, minimum=0)
    if first_k >= spec["num_layers"]:
        raise c.error("first_k_dense_replace", f"({first_k}) leaves no MoE layer of {spec['num_layers']}")
    shared = c.integer("n_shared_experts", 1, minimum=0)
    spec["moe"] = {
        "num_experts": c.integer("n_routed_experts"),
        "top_k": c.integer("num_experts_per_tok"),
        "expert_hidden_size": c.integer("moe_intermediate_size"),
        "num_shared_experts": shared,
        "first_k_dense": first_k,
        "router_bias": True,  # Glm4MoeTopkRouter's e_score_correction_bias
        "score_function": "sigmoid",
        "num_groups": c.optional_integer("n_group"),
        "group_top_k": c.optional_integer("topk_group"),
        **_scaling(c),
    }
    spec["mtp_layers"] = c.integer("num_nextn_predict_layers", 0, minimum=0)
    return spec


def _scaling(c: _Config) -> dict:
    """routed_scaling_factor when the config gives one other than 1 (no scaling)."""
    f = c.number("routed_scaling_factor", None)
    if f is None or f == 1.0:
        return {}
    if f <= 0:
        raise c.error("routed_scaling_factor", f"must be positive, not {_short(f)}")
    return {"routed_scaling_factor": f}


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
    L = spec["num_layers"]
    dense = set(c.index_list("mlp_only_layers", []))
    if any(i < 0 or i >= L for i in dense):
        raise c.error("mlp_only_layers", f"names a layer outside 0..{L - 1}")
    spec["moe"] = {
        "num_experts": c.integer("num_experts"),
        "top_k": c.integer("num_experts_per_tok"),
        "expert_hidden_size": c.integer("moe_intermediate_size"),
        "score_function": "softmax",
        **_moe_layers(c, "mlp_only_layers", [i for i in range(L) if i not in dense], L),
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
            **_scaling(c),
        }
    spec["mtp_layers"] = c.integer("num_nextn_predict_layers", 0, minimum=0)
    return spec


def _sliding_every(c: _Config, num_layers: int) -> int | None:
    """gpt-oss layer_types: the sliding-window layers must be every n-th layer from layer 0."""
    types = c._get("layer_types", None)
    if types is None:
        return 2  # GptOssConfig's default alternates, sliding first
    sliding = _layer_types(c, types, num_layers)
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
    if c.number("swiglu_limit", None):
        spec["ffn"]["clamp"] = c.number("swiglu_limit")
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
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "phi3": _phi3,
    "gemma3_text": _gemma3,
    "llama4_text": _llama4,
    "glm4_moe": _glm4_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gpt_oss": _gpt_oss,
}

SUPPORTED_MODEL_TYPES = tuple(_FAMILIES) + tuple(_NESTED)


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
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        llama_like = _looks_like_llama(data)
        raise PlannerError(
            f"HuggingFace config '{path}': field 'model_type' is {_short(model_type)}, which planner does not read"
            + (" (its fields look like a Llama-shaped decoder: hidden_size, num_hidden_layers, num_attention_heads, "
               "intermediate_size, vocab_size" + (", experts" if llama_like == "moe" else "") + ")" if llama_like else "")
            + ".",
            hint="Supported model_types: " + ", ".join(sorted(SUPPORTED_MODEL_TYPES))
            + (". If its layers are Llama's (RMSNorm, rotary embedding, a gated SiLU MLP, no biases), a copy with "
               "model_type 'llama' (or 'mixtral' for top-k experts) reads the same counts; check what the family "
               "adds (biases, QK norms, sliding windows, soft-capping) before trusting them. Otherwise"
               if llama_like else ". For another architecture")
            + " write a model YAML (see models/ and the README).",
        )
    return model_type


def _looks_like_llama(data: dict) -> str | None:
    """'dense' or 'moe' when a config has the fields of a Llama-shaped decoder, else None."""
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    nested = data.get("text_config")
    text = nested if isinstance(nested, dict) else data
    if not all(isinstance(text.get(k), int) and not isinstance(text.get(k), bool) for k in keys):
        return None
    return "moe" if any(k in text for k in ("num_local_experts", "num_experts", "n_routed_experts")) else "dense"


def _name(path: Path) -> str:
    """A catalog-style name: the folder of a config.json (as the hub lays models out), else the
    stem, lower-case, with anything but letters, digits and ._+- made a '-' (a folder name may
    hold a newline or shell syntax, and the name is printed in tables and launch scripts)."""
    stem = path.resolve().parent.name if path.name == "config.json" else path.stem
    name = re.sub(r"[^a-z0-9._+-]+", "-", stem.lower()).strip("-.")[:128]
    return name or "imported-model"


def _display_name(value, fallback: str) -> str:
    """config.json's _name_or_path as one line of at most 256 printable characters."""
    text = "".join(c for c in str(value) if c.isprintable())[:256].strip() if isinstance(value, str) else ""
    return text or fallback


def import_hf_config(path: str | Path):
    """Read a HuggingFace ``config.json`` into a :class:`ModelSpec` (see the module docstring)."""
    path = Path(path)
    data = read_json(path, "HuggingFace config")
    model_type = _model_type(path, data)
    family, text, prefix = model_type, data, ""
    if model_type in _NESTED:
        nested = data.get("text_config")
        if not isinstance(nested, dict):
            raise PlannerError(
                f"HuggingFace config '{path}' (model_type {model_type}): field 'text_config' is "
                + ("missing" if nested is None else f"{_short(nested)}, not a mapping")
                + f": a {model_type} config nests its text model there.",
                hint="Give the model's published config.json.")
        family, text, prefix = _NESTED[model_type], nested, "text_config."
        inner = text.get("model_type")
        if inner is not None and inner != family and not (family == "kimi_k2" and inner == "deepseek_v3"):
            raise PlannerError(
                f"HuggingFace config '{path}' (model_type {model_type}): field 'text_config.model_type' is "
                f"{_short(inner)}; a {model_type} config's text model is {family}.")
    c = _Config(path, text, family, prefix)
    spec = _FAMILIES[family](c)
    name = _name(path)
    what = f"model_type {model_type}" + (f", its text model ({family}) read from text_config" if prefix else "")
    notes = "Imported from a HuggingFace config.json: no published counts or reference job; give the job with " \
            "--gpus/--global-batch/--seq-len or --job."
    if prefix:
        notes += " The vision tower is not planned."
    if c.notes:
        notes += " " + "; ".join(c.notes) + "."
    spec.update(
        name=name,
        display_name=_display_name(data.get("_name_or_path") or text.get("_name_or_path"), name),
        source=[f"{path} (HuggingFace config.json, {what})"],
        notes=notes,
    )
    if spec.get("max_position_embeddings") is None:
        spec.pop("max_position_embeddings", None)
    return validate_spec(ModelSpec, spec, "model", str(path))
