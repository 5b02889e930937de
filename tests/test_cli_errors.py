"""Bad input on the command line: a clear one-paragraph error on stderr and a non-zero exit, never a
traceback. One test per case of issue #2 (unknown names, malformed YAML or JSON, missing or negative
fields, heads not divisible by kv heads, top-k above the expert count), through planner.cli.main
and, for the exit code as a shell sees it, through a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


from planner.cli import main

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "hf"

GOOD_MODEL_YAML = """\
name: tiny
source: [a test]
hidden_size: 64
num_layers: 2
vocab_size: 1000
attention: {kind: gqa, num_heads: 8, num_kv_heads: 4, head_dim: 8}
ffn: {activation: swiglu, hidden_size: 128}
moe: {num_experts: 8, top_k: 2, expert_hidden_size: 32}
"""


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_paragraph(code: int, err: str, *words: str) -> str:
    assert code != 0
    assert "Traceback" not in err
    text = err.strip()
    assert text.startswith("Error: ") and "\n" not in text, err
    for w in words:
        assert w in text, f"{w!r} not in {text!r}"
    return text


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _hf(tmp_path: Path, base: str, **changes) -> Path:
    cfg = json.loads((FIXTURES / base / "config.json").read_text())
    cfg.update(changes)
    d = tmp_path / base
    d.mkdir()
    path = d / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_good_yaml_passes(tmp_path, capsys):
    # The base of the YAML cases below is itself valid, so each case fails for its one change.
    code, out, _ = _run(capsys, "show-model", str(_write(tmp_path, "tiny.yaml", GOOD_MODEL_YAML)), "--json")
    assert code == 0 and json.loads(out)["model"]["name"] == "tiny"


# ---- unknown names ------------------------------------------------------------------------------

def test_unknown_model_suggests_the_closest_names(capsys):
    code, _, err = _run(capsys, "show-model", "deepseek-v4")
    _one_paragraph(code, err, "Unknown model 'deepseek-v4'", "Did you mean 'deepseek-v3' or 'deepseek-v2'?",
                   "planner models")


def test_unknown_hardware_suggests_the_closest_names(capsys):
    code, _, err = _run(capsys, "show-hw", "gb200-nvl36")
    _one_paragraph(code, err, "Unknown hardware 'gb200-nvl36'", "Did you mean 'gb200-nvl72'", "planner hw")


def test_hardware_name_given_as_model(capsys):
    code, _, err = _run(capsys, "show-model", "h100")
    _one_paragraph(code, err, "'h100' is a hardware name")


def test_missing_file(capsys):
    code, _, err = _run(capsys, "show-model", "no/such/model.yaml")
    _one_paragraph(code, err, "'no/such/model.yaml' does not exist")


# ---- malformed files ----------------------------------------------------------------------------

def test_malformed_yaml_names_file_and_line(tmp_path, capsys):
    path = _write(tmp_path, "bad.yaml", GOOD_MODEL_YAML.replace("num_layers: 2", "num_layers: [2"))
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "is not valid YAML at line")


def test_malformed_json_names_file_and_position(tmp_path, capsys):
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text('{"model_type": "llama", "hidden_size": 4096,\n "num_hidden_layers": 32,, }')
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "is not valid JSON", "line 2, column")


def test_mistyped_yaml_field_is_named(tmp_path, capsys):
    path = _write(tmp_path, "bad.yaml", GOOD_MODEL_YAML.replace("vocab_size: 1000", "vocab_size: lots"))
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "field 'vocab_size' = 'lots'")


def test_mistyped_json_field_is_named(tmp_path, capsys):
    path = _hf(tmp_path, "llama3.1-8b", hidden_size="4096px")
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "field 'hidden_size' must be a whole number")


def test_unknown_yaml_field_is_named(tmp_path, capsys):
    path = _write(tmp_path, "bad.yaml", GOOD_MODEL_YAML + "num_experts: 8\n")
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "field 'num_experts' is not a known model field")


# ---- missing and negative fields ----------------------------------------------------------------

def test_missing_yaml_field(tmp_path, capsys):
    path = _write(tmp_path, "bad.yaml", GOOD_MODEL_YAML.replace("hidden_size: 64\n", ""))
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "field 'hidden_size' is missing")


def test_missing_nested_yaml_field(tmp_path, capsys):
    path = _write(tmp_path, "bad.yaml", GOOD_MODEL_YAML.replace(" head_dim: 8", " kv: 1"))
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, "field 'attention.head_dim' is missing", "field 'attention.kv' is not a known")


def test_missing_json_field(tmp_path, capsys):
    cfg = json.loads((FIXTURES / "qwen3-235b-a22b" / "config.json").read_text())
    del cfg["moe_intermediate_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "field 'moe_intermediate_size' is missing")


def test_negative_yaml_field(tmp_path, capsys):
    path = _write(tmp_path, "bad.yaml", GOOD_MODEL_YAML.replace("num_layers: 2", "num_layers: -2"))
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, "field 'num_layers' = -2: Input should be greater than 0")


def test_negative_json_field(tmp_path, capsys):
    path = _hf(tmp_path, "mixtral-8x22b", num_local_experts=-8)
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "field 'num_local_experts' must be at least 1, not -8")


def test_negative_dropout(tmp_path, capsys):
    path = _write(tmp_path, "bad.yaml", GOOD_MODEL_YAML + "attention_dropout: -0.1\n")
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, "field 'attention_dropout' = -0.1")


# ---- shape rules --------------------------------------------------------------------------------

def test_heads_not_divisible_by_kv_heads_yaml(tmp_path, capsys):
    path = _write(tmp_path, "bad.yaml", GOOD_MODEL_YAML.replace("num_heads: 8,", "num_heads: 10,"))
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, "field 'attention'", "num_heads (10) must be divisible by num_kv_heads (4)")


def test_heads_not_divisible_by_kv_heads_json(tmp_path, capsys):
    path = _hf(tmp_path, "llama3.1-70b", num_key_value_heads=7)
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "'num_key_value_heads' (7) must divide num_attention_heads (64)")


def test_top_k_above_expert_count_yaml(tmp_path, capsys):
    path = _write(tmp_path, "bad.yaml", GOOD_MODEL_YAML.replace("top_k: 2", "top_k: 9"))
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, "field 'moe'", "top_k (9) cannot exceed num_experts (8)")


def test_top_k_above_expert_count_json(tmp_path, capsys):
    path = _hf(tmp_path, "deepseek-v3", num_experts_per_tok=257)
    code, _, err = _run(capsys, "show-model", str(path))
    _one_paragraph(code, err, str(path), "'num_experts_per_tok' (257) exceeds n_routed_experts (256)")


def test_bad_hardware_yaml(tmp_path, capsys):
    text = (REPO / "hw_specs" / "h100.yaml").read_text().replace("value: 450.0e9", "value: -450.0e9")
    path = _write(tmp_path, "hw.yaml", text)
    code, _, err = _run(capsys, "show-hw", str(path))
    _one_paragraph(code, err, str(path), "Hardware spec")


def test_usage_errors_exit_non_zero_without_traceback(capsys):
    code = main(["show-model"])
    _, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and "Missing argument" in err


# ---- as a shell sees it -------------------------------------------------------------------------

def _subprocess(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "planner", *argv], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=60)


def test_subprocess_unknown_model_exit_code_and_paragraph():
    proc = _subprocess("show-model", "mixtral-8x9b")
    assert proc.returncode == 2 and proc.stdout == ""
    _one_paragraph(proc.returncode, proc.stderr, "Unknown model 'mixtral-8x9b'", "Did you mean 'mixtral-8x7b'")


def test_subprocess_malformed_json(tmp_path):
    path = _hf(tmp_path, "gpt-oss-120b", num_attention_heads=0)
    proc = _subprocess("show-model", str(path), "--json")
    _one_paragraph(proc.returncode, proc.stderr, str(path), "'num_attention_heads' must be at least 1")
