"""HuggingFace config.json import: the fixtures (written from the published configs; the hub is not
reachable here) import to the same architecture and counts as the bundled YAML, and every malformed
or unsupported config is a one-paragraph error naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.specs.catalog import load_model
from planner.specs.hf_import import SUPPORTED_MODEL_TYPES, import_hf_config

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").exists())

ARCHITECTURE_FIELDS = [
    "hidden_size", "num_layers", "vocab_size", "tie_embeddings", "position_embedding",
    "max_position_embeddings", "norm", "attention", "ffn", "moe", "mtp_layers", "rope", "post_norms", "logit_softcap",
    "attn_logit_softcap",
]


def test_the_issue_fixtures_exist():
    # Issue #2: DeepSeek-V3, Llama 3.1 405B, Qwen3-235B-A22B and Mixtral 8x22B at least.
    assert {"deepseek-v3", "llama3.1-405b", "qwen3-235b-a22b", "mixtral-8x22b"} <= set(FIXTURE_NAMES)
    # ... and one of every model_type the importer reads.
    from planner.specs.hf_import import _NESTED

    types = {json.loads((FIXTURES / n / "config.json").read_text())["model_type"] for n in FIXTURE_NAMES}
    public = {json.loads(p.read_text())["model_type"] for p in (FIXTURES.parent / "hf_public").glob("*/config.json")}
    covered = types | public | {_NESTED[t] for t in public if t in _NESTED}
    # gemma3's nesting is tested in test_hf_families.py (dense Qwen3: hf_public/qwen3-32b).
    assert covered == set(SUPPORTED_MODEL_TYPES) - {"gemma3"}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_imports_to_the_bundled_spec(name):
    imported = import_hf_config(FIXTURES / name / "config.json")
    bundled = load_model(name)
    assert imported.name == name
    for field in ARCHITECTURE_FIELDS:
        assert getattr(imported, field) == getattr(bundled, field), field
    a, b = imported.params, bundled.params
    assert (a.total, a.mtp, a.active_incl_embedding, a.active_excl_input_embedding, a.mtp_active) == (
        b.total, b.mtp, b.active_incl_embedding, b.active_excl_input_embedding, b.mtp_active)
    assert a.components == b.components and a.per_layer == b.per_layer


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_folder_says_it_was_written_by_hand(name):
    readme = (FIXTURES / name / "README.md").read_text()
    assert "not downloaded" in readme and "not" in readme and "reachable" in readme


def test_load_model_dispatches_a_config_json_path():
    m = load_model(str(FIXTURES / "deepseek-v3" / "config.json"))
    assert m.attention.kind == "mla" and m.mtp_layers == 1
    assert m.reference_job is None and m.published is None


# ---- variations of a fixture -----------------------------------------------------------------------

def _write(tmp_path: Path, base: str, folder: str = "model", **changes) -> Path:
    cfg = json.loads((FIXTURES / base / "config.json").read_text())
    for k, v in changes.items():
        if v is _DROP:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    path = d / "config.json"
    path.write_text(json.dumps(cfg))
    return path


_DROP = object()


def test_dense_qwen3_gets_qk_norm(tmp_path):
    path = _write(tmp_path, "qwen3-30b-a3b", model_type="qwen3", architectures=["Qwen3ForCausalLM"])
    m = import_hf_config(path)
    assert m.moe is None and m.attention.qk_norm and m.attention.head_dim == 128
    assert m.params.per_layer["dense"] == (2048 * 32 * 128 + 2 * 2048 * 4 * 128 + 32 * 128 * 2048 + 2 * 128
                                           + 2 * 2048 + 3 * 2048 * 6144)


def test_model_type_from_architectures_when_absent(tmp_path):
    path = _write(tmp_path, "mixtral-8x7b", model_type=_DROP)
    assert import_hf_config(path).params.total == load_model("mixtral-8x7b").params.total


def test_llama_defaults_kv_heads_and_head_dim(tmp_path):
    path = _write(tmp_path, "llama3.1-8b", num_key_value_heads=_DROP)
    m = import_hf_config(path)
    assert m.attention.num_kv_heads == 32 and m.attention.head_dim == 128


def test_whole_floats_are_accepted(tmp_path):
    path = _write(tmp_path, "llama3.1-8b", hidden_size=4096.0)
    assert import_hf_config(path).hidden_size == 4096


def test_leading_dense_layers_of_qwen3_moe(tmp_path):
    path = _write(tmp_path, "qwen3-30b-a3b", mlp_only_layers=[0, 1])
    m = import_hf_config(path)
    assert m.moe.first_k_dense == 2 and m.layer_kinds[:3] == ("dense", "dense", "moe")


def test_scattered_dense_layers_of_qwen3_moe_are_a_layer_pattern(tmp_path):
    path = _write(tmp_path, "qwen3-30b-a3b", mlp_only_layers=[5, 7])
    m = import_hf_config(path)
    assert m.moe.layer_pattern == [0 if i in (5, 7) else 1 for i in range(48)]
    assert m.layer_kinds[4:8] == ("moe", "dense", "moe", "dense") and m.num_moe_layers == 46


def test_gpt_oss_without_sliding_layers(tmp_path):
    path = _write(tmp_path, "gpt-oss-120b", layer_types=["full_attention"] * 36)
    m = import_hf_config(path)
    assert m.attention.sliding_window is None and m.attention.sliding_window_every is None


def test_deepseek_v2_lite_style_full_rank_query(tmp_path):
    path = _write(tmp_path, "deepseek-v2", q_lora_rank=None)
    m = import_hf_config(path)
    assert m.attention.q_lora_rank is None
    q_proj = 5120 * 128 * (128 + 64)                 # full-rank query projection
    kv_down = 5120 * (512 + 64) + 512                # compressed KV, decoupled RoPE key, latent norm
    kv_up, out = 512 * 128 * (128 + 128), 128 * 128 * 5120
    assert m.params.components["attention"] == 60 * (q_proj + kv_down + kv_up + out)


def _error(path: Path) -> str:
    with pytest.raises(PlannerError) as info:
        import_hf_config(path)
    text = info.value.paragraph()
    assert "\n" not in text and str(path) in text
    return text


@pytest.mark.parametrize(
    "base, changes, field, words",
    [
        ("llama3.1-8b", {"hidden_size": _DROP}, "hidden_size", "missing"),
        ("llama3.1-8b", {"num_hidden_layers": "thirty-two"}, "num_hidden_layers", "whole number"),
        ("llama3.1-8b", {"num_hidden_layers": True}, "num_hidden_layers", "whole number"),
        ("llama3.1-8b", {"intermediate_size": 14336.5}, "intermediate_size", "whole number"),
        ("llama3.1-8b", {"num_attention_heads": -32}, "num_attention_heads", "at least 1"),
        ("llama3.1-8b", {"vocab_size": 0}, "vocab_size", "at least 1"),
        ("llama3.1-8b", {"num_key_value_heads": 5}, "num_key_value_heads", "must divide num_attention_heads"),
        ("llama3.1-8b", {"tie_word_embeddings": "no"}, "tie_word_embeddings", "true or false"),
        ("mixtral-8x7b", {"num_experts_per_tok": 9}, "num_experts_per_tok", "exceeds num_local_experts"),
        ("deepseek-v3", {"num_experts_per_tok": 300}, "num_experts_per_tok", "exceeds n_routed_experts"),
        ("deepseek-v3", {"kv_lora_rank": _DROP}, "kv_lora_rank", "missing"),
        ("deepseek-v3", {"scoring_func": "relu"}, "scoring_func", "softmax and sigmoid"),
        ("deepseek-v3", {"first_k_dense_replace": 99}, "first_k_dense_replace", "exceeds num_hidden_layers"),
        ("qwen3-235b-a22b", {"num_experts_per_tok": 129}, "num_experts_per_tok", "exceeds num_experts"),
        ("qwen3-235b-a22b", {"decoder_sparse_step": 2}, "decoder_sparse_step", "every layer"),
        ("qwen3-235b-a22b", {"mlp_only_layers": [5, 99]}, "mlp_only_layers", "outside 0..93"),
        ("qwen3-235b-a22b", {"mlp_only_layers": list(range(94))}, "mlp_only_layers", "no MoE layer"),
        ("qwen3-235b-a22b", {"head_dim": _DROP, "hidden_size": 4100}, "head_dim", "not divisible"),
        ("gpt-oss-120b", {"layer_types": ["full_attention", "sliding_attention"] * 18}, "layer_types", "every n-th layer"),
        ("gpt-oss-120b", {"layer_types": ["local"] * 36}, "layer_types", "unknown layer type"),
        ("gpt-oss-120b", {"layer_types": ["full_attention"] * 3}, "layer_types", "one type per layer"),
        ("llama3.1-8b", {"model_type": "falcon"}, "model_type", "Supported model_types"),
    ],
)
def test_bad_fields_are_named(tmp_path, base, changes, field, words):
    text = _error(_write(tmp_path, base, **changes))
    assert f"'{field}'" in text and words in text


def test_no_model_type_and_unknown_architecture(tmp_path):
    text = _error(_write(tmp_path, "llama3.1-8b", model_type=_DROP, architectures=["FalconForCausalLM"]))
    assert "model_type" in text and "llama" in text


def test_json_syntax_error_names_file_and_position(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n "hidden_size": 4096,, }')
    text = _error(path)
    assert "not valid JSON" in text and "line 2" in text


def test_json_that_is_not_an_object(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    assert "JSON object" in _error(path)


def test_missing_file_through_load_model():
    with pytest.raises(PlannerError, match="does not exist"):
        load_model("no/such/config.json")
