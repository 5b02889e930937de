"""--set KEY=VALUE: model fields changed on the command line, typed and validated as in a model YAML,
through one route (planner.specs.overrides) for search, explain, export, check and compare, the
launch reader and the runs file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from planner.errors import PlannerError
from planner.specs.catalog import load_model
from planner.specs.overrides import apply_overrides, parse_set_items

SCRIPTS = Path(__file__).parent / "fixtures" / "launch_scripts"


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_values_are_typed_as_in_a_model_yaml():
    sets = parse_set_items(["mtp_layers=0", "moe.num_experts=64", "moe.router_bias=false", "attention_dropout=0.1",
                            "display_name=My V3", "moe.num_groups=null"])
    assert sets == {"mtp_layers": 0, "moe": {"num_experts": 64, "router_bias": False, "num_groups": None},
                    "attention_dropout": 0.1, "display_name": "My V3"}
    m = apply_overrides(load_model("deepseek-v3"), sets)
    assert m.mtp_layers == 0 and m.moe.num_experts == 64 and m.moe.top_k == 8 and m.moe.num_groups is None
    assert m.params.mtp == 0 and m.params.total < load_model("deepseek-v3").params.total
    assert any("mtp_layers=0" in s for s in m.source)  # the edited model says what was set


@pytest.mark.parametrize("items, match", [
    (["mtp_layers"], "expected KEY=VALUE"),
    (["moe..num_experts=3"], "expected KEY=VALUE"),
    (["mtp_layers=0", "mtp_layers=1"], "twice"),
    (["moe=1", "moe.top_k=2"], "both 'moe' and fields inside it"),
    (["mtp_layers=[1"], "not one YAML value"),
])
def test_malformed_items_are_one_paragraph_errors(items, match):
    with pytest.raises(PlannerError, match=match):
        parse_set_items(items)


@pytest.mark.parametrize("items, match", [
    (["mtp_layers=-1"], r"field 'mtp_layers' = -1"),
    (["num_layers=abc"], r"field 'num_layers' = 'abc'"),
    (["no_such_field=1"], r"field 'no_such_field' is not a known model field"),
    (["hidden_size.x=1"], r"'hidden_size' is a value"),
    (["moe.top_k=300"], r"top_k \(300\) cannot exceed num_experts"),
])
def test_invalid_values_are_refused_like_a_yaml(items, match):
    with pytest.raises(PlannerError, match=match):
        apply_overrides(load_model("deepseek-v3"), parse_set_items(items))


def test_a_group_of_fields_on_a_dense_model_must_be_complete(capsys):
    code, _, err = _run(capsys, "explain", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--plan", "tp=2",
                        "--set", "moe.num_experts=8")
    assert code == 2 and "field 'moe.top_k' is missing" in err and "--set moe.num_experts=8" in err


def test_check_runs_the_gb200_guide_without_mtp_on_the_catalog_v3(capsys):
    # The DeepSeek-V3 GB200 guide trains without MTP; the catalog V3 has one MTP layer. With --model
    # deepseek-v3 the layout has no room for it ([layout-mtp]); --set mtp_layers=0 says "no MTP".
    opts = ["--megatron-args", str(SCRIPTS / "deepseek_v3_gb200_guide.sh"), "--gpus", "256", "--hw", "gb200-nvl72",
            "--model", "deepseek-v3", "--json"]
    _, out, _ = _run(capsys, "check", *opts)
    assert "layout-mtp" in [f["rule"] for f in json.loads(out)["failures"]]
    _, out, _ = _run(capsys, "check", *opts, "--set", "mtp_layers=0")
    data = json.loads(out)
    assert [f["rule"] for f in data["failures"]] == ["cross-entropy-te-fusion"]  # the guide's own flag, still refused
    assert data["model_mismatches"] == []


def test_explain_export_and_search_take_the_edited_model(capsys, tmp_path):
    base = ["--model", "mixtral-8x7b", "--hw", "h100", "--gpus", "16", "--global-batch", "64", "--seq-len", "4096"]
    edit = ["--set", "num_layers=16", "--set", "moe.top_k=1", "--set", "moe.score_function=sigmoid"]
    code, out, err = _run(capsys, "explain", *base, "--plan", "tp=2,ep=8,recompute=full", *edit, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["model"]["name"] == "mixtral-8x7b" and len(data["model"]["spec_hash"]) == 12
    assert data["model"]["spec_hash"] != json.loads(_run(capsys, "explain", *base, "--plan", "tp=2,ep=8,recompute=full",
                                                         "--json")[1])["model"]["spec_hash"]
    code, out, err = _run(capsys, "export", *base, "--plan", "tp=2,ep=8,recompute=full", *edit)
    assert code == 0, err
    assert "--num-layers 16" in out and "--moe-router-topk 1" in out and "--moe-router-score-function sigmoid" in out
    code, out, err = _run(capsys, "search", *base, *edit, "--top", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["spec_hash"] == data["model"]["spec_hash"]


def test_a_script_without_vocabulary_takes_set_vocab_size(capsys, tmp_path):
    args = tmp_path / "args.txt"
    args.write_text("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 1376 --swiglu "
                    "--normalization RMSNorm --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 "
                    "--global-batch-size 8 --untie-embeddings-and-output-weights --disable-bias-linear --bf16")
    code, _, err = _run(capsys, "check", "--megatron-args", str(args), "--hw", "h100", "--gpus", "8")
    assert code == 2 and "--set vocab_size=N" in err
    code, out, err = _run(capsys, "check", "--megatron-args", str(args), "--hw", "h100", "--gpus", "8",
                          "--set", "vocab_size=32000", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "OK"


def test_compare_takes_the_edited_model(capsys):
    code, out, err = _run(capsys, "compare", "--model", "mixtral-8x7b", "--hw", "h100", "--hw", "b200", "--gpus", "16",
                          "--global-batch", "64", "--seq-len", "4096", "--set", "num_layers=16", "--top", "1", "--json")
    assert code == 0, err
    edited = apply_overrides(load_model("mixtral-8x7b"), {"num_layers": 16})
    from planner.specs.catalog import spec_hash

    assert json.loads(out)["model"]["spec_hash"] == spec_hash(edited)
