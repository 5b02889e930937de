"""The model families of issue 22, each from a public copy of its config.json
(tests/fixtures/hf_public/, every folder's README names its source and the published figures):
parameter counts within 1 % of the published totals, the architecture details that change memory,
time or the launch, and plans from the search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.specs.hf_import import import_hf_config

PUBLIC = Path(__file__).parent / "fixtures" / "hf_public"


def _model(name: str):
    return import_hf_config(PUBLIC / name / "config.json")


def _llama4_vision_tower(cfg: dict) -> int:
    """Parameters of Llama 4's vision tower and projector (transformers 5.12.1 modeling_llama4.py:
    Llama4UnfoldConvolution's bias-free patch linear, the class and position embeddings,
    layernorm_pre/post, per encoder layer q/k/v/o and fc1/fc2 with biases and two LayerNorms, the
    pixel-shuffle MLP's fc1 (intermediate -> projector_input) and fc2 (projector_output square),
    and Llama4MultiModalProjector's bias-free linear to the text width)."""
    v, h = cfg["vision_config"], cfg["text_config"]["hidden_size"]
    d, f, patch = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    patches = (v["image_size"] // patch) ** 2 + 1
    layer = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d
    return (v["num_channels"] * patch * patch * d + d + patches * d + 2 * 2 * d + v["num_hidden_layers"] * layer
            + f * v["projector_input_dim"] + v["projector_output_dim"] ** 2 + v["vision_output_dim"] * h)


# name -> (model_type of the file, published total the count is compared with, what it is)
PUBLISHED = {
    "mistral-nemo-base-2407": ("mistral", 12.2e9, "12.2B (fitmygpu; Mistral AI rounds to 12B)"),
    "qwen2.5-7b": ("qwen2", 7.61e9, "7.61B (Qwen2.5-7B model card)"),
    "qwen2.5-72b-instruct": ("qwen2", 72.7e9, "72.7B (Qwen2.5 model card)"),
    "qwen3-8b": ("qwen3", 8.2e9, "8.2B (Qwen3-8B model card)"),
    "qwen3-32b": ("qwen3", 32.8e9, "32.8B (Qwen3-32B model card)"),
    "phi-4": ("phi3", 14.66e9, "14.66B (ai-nexus listing; the card rounds to 14B)"),
    "glm-4.5-air": ("glm4_moe", 106e9, "106B (transformers' glm4_moe docs)"),
    "gemma-3-27b": ("gemma3_text", 27_009_002_240, "keras-hub's gemma3_27b_text preset"),
    "llama-4-scout-17b-16e-instruct": ("llama4", 109e9, "109B with the vision tower (Llama 4 model card)"),
    "llama-4-maverick-17b-128e-instruct": ("llama4", 400e9, "~400B (Llama 4 model card)"),
    "kimi-k2.5": ("kimi_k25", 1.0265e12, "1026.5B, Kimi K2's text model (the card rounds to 1T)"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_count_is_within_one_percent_of_the_published_total(name):
    model_type, total, _ = PUBLISHED[name]
    cfg = json.loads((PUBLIC / name / "config.json").read_text())
    assert cfg["model_type"] == model_type
    m = _model(name)
    count = m.params.total
    if name.startswith("llama-4-scout"):
        count += _llama4_vision_tower(cfg)  # Meta's 109B is the multimodal model's
    assert abs(count / total - 1) <= 0.01, (name, count, total)
    readme = (PUBLIC / name / "README.md").read_text()
    assert "Published:" in readme and ("commit" in readme or "file id" in readme)  # the figure and the copy's source


def test_every_family_of_the_issue_is_covered():
    types = {json.loads((PUBLIC / n / "config.json").read_text())["model_type"] for n in PUBLISHED}
    assert {"mistral", "qwen2", "phi3", "glm4_moe", "llama4", "kimi_k25"} <= types
    assert "gemma3_text" in types  # and gemma3 itself through the nesting test below


def test_exact_counts_where_the_checkpoint_is_summed():
    # The Qwen2.5-72B-Instruct report sums the checkpoint's safetensors to 72,706,203,648.
    assert _model("qwen2.5-72b-instruct").params.total == 72_706_203_648
    # Kimi K2.5's active count is NVIDIA's 32.86B with the input embedding counted.
    assert round(_model("kimi-k2.5").params.active_incl_embedding / 1e7) == 3286


def test_mistral_head_dim_override():
    m = _model("mistral-nemo-base-2407")
    assert m.attention.head_dim == 128 and m.attention.q_width == 4096 < m.hidden_size == 5120
    assert m.attention.sliding_window is None and not m.attention.qkv_bias
    assert m.rope.theta == 1e6


def test_qwen2_biases():
    m = _model("qwen2.5-7b")
    assert m.attention.qkv_bias and not m.attention.output_bias and not m.attention.qk_norm
    assert (m.attention.num_heads, m.attention.num_kv_heads) == (28, 4) and not m.tie_embeddings


def test_phi4_reads_as_a_llama_shaped_phi3():
    m = _model("phi-4")
    a = m.attention
    assert (a.num_heads, a.num_kv_heads, a.head_dim) == (40, 10, 128) and not a.qkv_bias
    assert m.ffn.hidden_size == 17920 and m.rope.theta == 250000


def test_glm45_air_details():
    m = _model("glm-4.5-air")
    a, moe = m.attention, m.moe
    assert a.qkv_bias and not a.output_bias and not a.qk_norm and a.head_dim == 128 and a.q_width == 12288
    assert m.rope.percent == 0.5 and moe.first_k_dense == 1 and moe.num_shared_experts == 1
    assert moe.router_bias and moe.score_function == "sigmoid" and moe.routed_scaling_factor is None  # 1.0: none
    assert m.mtp_layers == 1 and m.layer_kinds[:2] == ("dense", "moe")
    # GLM-4.5 (355B) is the same family with QK norm and a routed scaling of 2.5.
    cfg = json.loads((PUBLIC / "glm-4.5-air" / "config.json").read_text())
    assert "use_qk_norm" not in cfg or cfg["use_qk_norm"] is False


def test_glm_qk_norm_and_scaling(tmp_path):
    cfg = json.loads((PUBLIC / "glm-4.5-air" / "config.json").read_text())
    cfg.update(use_qk_norm=True, routed_scaling_factor=2.5)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = import_hf_config(path)
    assert m.attention.qk_norm and m.moe.routed_scaling_factor == 2.5
    assert m.params.per_layer["moe"] - _model("glm-4.5-air").params.per_layer["moe"] == 2 * 128


def test_gemma3_text_details():
    m = _model("gemma-3-27b")
    a = m.attention
    assert m.vocab_size == 262208 and m.tie_embeddings  # Gemma3TextConfig defaults the file leaves out
    assert m.ffn.activation == "geglu" and m.ffn.gated and m.post_norms
    assert (a.num_heads, a.num_kv_heads, a.head_dim) == (32, 16, 128) and a.qk_norm
    assert a.sliding_window == 1024 and a.global_every == 6 and a.softmax_scale_dim == 168
    local = [i for i in range(m.num_layers) if a.local_layer(i)]
    assert len(local) == 52 and [i for i in range(m.num_layers) if i not in local] == list(range(5, 62, 6))
    assert m.rope.scaling == "linear" and m.rope.factor == 8 and m.rope.local_theta == 10000
    assert m.logit_softcap is None and m.attn_logit_softcap is None
    # Four norms per layer: two more than a Llama layer of the same shape.
    assert m.params.per_layer["dense"] == (5376 * 4096 + 2 * 5376 * 2048 + 4096 * 5376 + 2 * 128 + 4 * 5376
                                           + 3 * 5376 * 21504)


def test_gemma3_nested_in_the_published_multimodal_layout(tmp_path):
    """The published google/gemma-3-27b config.json nests the text config under text_config with
    model_type gemma3 (research/artifacts/hf/gemma-3-27b/SOURCE.md): the same text model."""
    text = json.loads((PUBLIC / "gemma-3-27b" / "config.json").read_text())
    text.pop("architectures")
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
           "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152}}
    path = tmp_path / "gemma-3-27b-it" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    m = import_hf_config(path)
    assert m.params.total == _model("gemma-3-27b").params.total and m.name == "gemma-3-27b-it"
    assert "text_config" in m.source[0] and "vision tower is not planned" in m.notes
    # a layer_types list says the same as the pattern
    text["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(62)]
    path.write_text(json.dumps(cfg))
    assert import_hf_config(path).attention.global_every == 6


def test_gemma3_softcap_changes_time_and_memory(tmp_path):
    from planner.cost.flops import Shard, block_kernels, model_shape

    text = json.loads((PUBLIC / "gemma-3-27b" / "config.json").read_text())
    text["final_logit_softcapping"] = 30.0
    path = tmp_path / "config.json"
    path.write_text(json.dumps(text))
    capped = import_hf_config(path)
    assert capped.logit_softcap == 30.0
    sh = Shard(tp=1, cp=1, ep=1, etp=1, mbs=1, seq=4096)
    names = [k.name for k in block_kernels(model_shape(capped), sh, "head")]
    assert "logit_softcap" in names
    assert "logit_softcap" not in [k.name for k in block_kernels(model_shape(_model("gemma-3-27b")), sh, "head")]


def test_llama4_scout_details():
    m = _model("llama-4-scout-17b-16e-instruct")
    a, moe = m.attention, m.moe
    assert m.layer_kinds == ("moe",) * 48 and moe.num_experts == 16 and moe.top_k == 1
    assert moe.num_shared_experts == 1 and moe.shared_hidden == 8192 and moe.score_function == "sigmoid"
    assert m.ffn.hidden_size == 16384 and moe.expert_hidden_size == 8192
    assert a.no_rope_every == 4 and a.attention_chunk == 8192 and a.qk_l2_norm and not a.qk_norm
    assert [i for i in range(48) if not a.uses_rope(i)] == list(range(3, 48, 4))
    assert [i for i in range(48) if a.local_layer(i)] == [i for i in range(48) if a.uses_rope(i)]
    assert m.rope.scaling == "llama3" and m.rope.factor == 16 and m.rope.high_freq_factor == 1
    # Active parameters: Meta's 17B counts the embedding (17.17B with it, 16.14B without).
    assert round(m.params.active_incl_embedding / 1e9) == 17


def test_llama4_maverick_interleaves_moe_layers():
    m = _model("llama-4-maverick-17b-128e-instruct")
    assert m.moe.layer_pattern == [i % 2 for i in range(48)]
    assert m.layer_kinds[:4] == ("dense", "moe", "dense", "moe") and m.num_moe_layers == 24
    assert not m.attention.qk_l2_norm and m.moe.num_experts == 128


def test_chunked_attention_counts_keys_within_chunks():
    from planner.cost.flops import attention_keys, model_shape

    ms = model_shape(_model("llama-4-scout-17b-16e-instruct"))
    assert ms.local_kind == "chunked" and ms.sliding_window == 8192
    assert attention_keys(ms, 8192, swa=True) == attention_keys(ms, 8192, swa=False)  # one chunk: causal
    assert attention_keys(ms, 32768, swa=True) == pytest.approx(8193 / 2)  # four chunks, each causal
    assert attention_keys(ms, 32768, swa=False) == pytest.approx(32769 / 2)  # the no-RoPE layers


def test_sliding_window_pattern_of_gemma_reaches_the_cost_model():
    from planner.cost.flops import attention_keys, model_shape

    ms = model_shape(_model("gemma-3-27b"))
    assert ms.layer_kinds.count("dense_swa") == 52 and ms.layer_kinds.count("dense") == 10
    assert attention_keys(ms, 8192, swa=True) < 1024 < attention_keys(ms, 8192, swa=False)


def test_kimi_k25_reads_its_text_config():
    m = _model("kimi-k2.5")
    assert m.attention.kind == "mla" and m.moe.num_experts == 384 and m.moe.first_k_dense == 1
    assert m.moe.routed_scaling_factor == pytest.approx(2.827) and m.mtp_layers == 0
    assert m.rope.scaling == "yarn" and m.rope.factor == 64
    from planner.specs.catalog import load_model

    k2 = load_model("kimi-k2")
    assert m.attention == k2.attention and m.ffn == k2.ffn  # Kimi K2's text model


@pytest.mark.parametrize("name, hw, gpus, batch", [
    ("mistral-nemo-base-2407", "h100", 16, 64),
    ("qwen2.5-7b", "h100", 8, 64),
    ("phi-4", "h100", 16, 64),
    ("glm-4.5-air", "h100", 64, 256),
    ("gemma-3-27b", "h100", 32, 128),
    ("llama-4-scout-17b-16e-instruct", "h100", 64, 256),
    ("llama-4-maverick-17b-128e-instruct", "gb200-nvl72", 128, 512),
    ("kimi-k2.5", "gb200-nvl72", 256, 1024),
])
def test_search_returns_plans(capsys, name, hw, gpus, batch):
    from planner.cli import main

    code = main(["search", "--model", str(PUBLIC / name / "config.json"), "--hw", hw, "--gpus", str(gpus),
                 "--global-batch", str(batch), "--seq-len", "4096", "--top", "2", "--json",
                 # The two MoE families here take 60-80 s wall on the 2-core machine since 2026-12-05's
                 # search changes (17 s before: the best-first walk, the paged stash): the default
                 # 60 s limit cut them off before a plan (exit 2). A speed regression, not the rule
                 # this test checks (docs/speed.md).
                 "--time-limit", "300"])
    out = capsys.readouterr().out
    assert code == 0, out
    plans = json.loads(out)["plans"]
    assert plans and all(p["memory"]["fits"] for p in plans)


def test_a_llama_shaped_unknown_family_is_named(tmp_path):
    cfg = json.loads((PUBLIC / "qwen2.5-7b" / "config.json").read_text())
    cfg.update(model_type="olmo2", architectures=["Olmo2ForCausalLM"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(PlannerError) as info:
        import_hf_config(path)
    text = str(info.value)
    assert "'olmo2'" in text and "Llama-shaped" in text and "model_type 'llama'" in text
    cfg = {"model_type": "mamba", "d_model": 768}
    path.write_text(json.dumps(cfg))
    with pytest.raises(PlannerError) as info:
        import_hf_config(path)
    assert "Llama-shaped" not in str(info.value) and "write a model YAML" in str(info.value)


def test_a_nested_family_without_its_text_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "kimi_k25", "vision_config": {}}))
    with pytest.raises(PlannerError, match="'text_config' is missing"):
        import_hf_config(path)
    path.write_text(json.dumps({"model_type": "llama4", "text_config": {"model_type": "qwen2"}}))
    with pytest.raises(PlannerError, match="text_config.model_type"):
        import_hf_config(path)
