"""`planner export` and `planner check` end to end through the CLI."""

from __future__ import annotations

import json

import pytest

from planner.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


V3 = ["--model", "deepseek-v3", "--hw", "gb200-nvl72"]
PLAN = "pp=4,vpp=4,ep=64,mbs=1,recompute=mla_up_proj+moe_act,layout=Et*3|(tttt|)*14ttmL"


def _saved(tmp_path, plans):
    path = tmp_path / "plans.json"
    path.write_text(json.dumps({
        "model": "deepseek-v3", "hardware": {"name": "gb200-nvl72"},
        "job": {"gpus": 256, "global_batch": 8192, "seq_len": 4096, "precisions": ["bf16"]},
        "plans": plans,
    }))
    return path


def test_export_megatron_to_stdout(capsys):
    code, out, err = _run(capsys, "export", *V3, "--plan", PLAN)
    assert code == 0, err
    assert out.startswith("#!/usr/bin/env bash") and "pretrain_gpt.py" in out


def test_export_from_saved_file_and_check_it(capsys, tmp_path):
    path = _saved(tmp_path, [
        {"plan": {"tp": 1, "pp": 4, "vpp": 4, "ep": 64, "mbs": 1, "dp": 64, "edp": 1, "layout": "Et*3|(tttt|)*14ttmL"},
         "memory": {"peak_bytes": 100 * 2**30, "capacity_bytes": 186e9, "worst_stage": 3},
         "time": {"step_time_s": 20.0, "tokens_per_s_per_gpu": 6553.6, "mfu": 0.25}},
        {"plan": "tp=2,pp=4,ep=32,etp=1,layout=Et*14|(t*16|)*2t*15mL"},
    ])
    script = tmp_path / "run.sh"
    code, _, err = _run(capsys, "export", "--from", str(path), "--rank", "1", "--out", str(script))
    assert code == 0, err
    text = script.read_text()
    # The saved predictions (made up here) are never copied: the header carries the recomputed ones.
    code, out, _ = _run(capsys, "explain", *V3, "--plan", "pp=4,vpp=4,ep=64,mbs=1,layout=Et*3|(tttt|)*14ttmL", "--json")
    peak = json.loads(out)["memory"]["peak_bytes"]
    assert f"# predicted: peak memory {peak / 2**30:.1f} GiB" in text and "step 20.00 s" not in text
    assert "differs from planner's recomputation" in err
    code, out, _ = _run(capsys, "check", "--megatron-args", str(script), "--hw", "gb200-nvl72")
    # The script passes Megatron's start-up checks, but this layout's rank 1 holds about 206 GiB (the
    # DeepSeek-V3 Table 3 layout without recompute): check says FAIL and exits 1 on the predicted OOM.
    assert code == 1 and "catalog match" in out and "[out-of-memory]" in out and "FAIL" in out
    assert "[argparse]" not in out and "rule(s) broken" not in out
    code, out, _ = _run(capsys, "export", "--from", str(path), "--rank", "2", "--format", "json")
    data = json.loads(out)
    assert data["plan"]["tp"] == 2 and data["plan"]["dp"] == 32 and data["plan"]["edp"] == 2
    assert data["launchers"]["megatron"]["exportable"] is True
    assert data["launchers"]["torchtitan"]["exportable"] is False


def test_saved_file_errors(capsys, tmp_path):
    path = _saved(tmp_path, [{"plan": "tp=1,ep=64"}])
    code, _, err = _run(capsys, "export", "--from", str(path), "--rank", "3")
    assert code == 2 and "out of range" in err and "Traceback" not in err
    (tmp_path / "bad.json").write_text("{}")
    code, _, err = _run(capsys, "export", "--from", str(tmp_path / "bad.json"))
    assert code == 2 and "no 'plans' list" in err
    bad_edp = _saved(tmp_path, [{"plan": {"ep": 64, "edp": 2}}])
    code, _, err = _run(capsys, "export", "--from", str(bad_edp))
    assert code == 2 and "edp=2" in err


def test_export_refusal_names_the_rule(capsys):
    code, out, err = _run(capsys, "export", *V3, "--plan", "pp=4,ep=64")
    assert code == 2 and out == ""
    assert err.startswith("Error: [layers-divisible]") and "\n" == err[-1] and err.count("\n") == 1
    code, _, err = _run(capsys, "export", *V3, "--plan", PLAN, "--format", "torchtitan")
    assert code == 2 and "[torchtitan-mtp]" in err and "[torchtitan-sharding]" in err


def test_gradient_and_gather_dtypes_reach_megatron_not_bridge(capsys):
    code, out, err = _run(capsys, "export", *V3, "--plan", PLAN + ",grad_reduce=bf16")
    assert code == 0, err
    assert "--grad-reduce-in-bf16" in out and "--fp8-param-gather" not in out
    code, out, err = _run(capsys, "export", *V3, "--plan", PLAN + ",grad_reduce=bf16", "--format", "bridge")
    assert code == 2 and out == "" and "[bridge-grad-dtypes]" in err and "--format megatron" in err
    code, out, err = _run(capsys, "explain", *V3, "--plan", PLAN + ",param_gather=fp8", "--json")
    assert code == 1 and "[param-gather-fp8]" in err  # no FP8 weights to gather in a bf16 plan


def test_set_is_refused_with_a_launch_it_cannot_edit(capsys, tmp_path):
    launch = tmp_path / "run.sh"
    launch.write_text("python run_recipe.py --recipe deepseek_v3_pretrain_config\n")
    code, out, err = _run(capsys, "check", "--bridge", str(launch), "--hw", "gb200-nvl72", "--set", "mtp_layers=0")
    assert code == 2 and "--set does not apply to --bridge" in err and "Traceback" not in err


def test_check_lists_violations_and_exits_1(capsys):
    code, out, _ = _run(capsys, "check", *V3, "--plan", "pp=4,ep=64,stage_recompute=1/0/0/0,layout=Et*15|t*15|t*15|t*16mL")
    assert code == 1 and "[megatron-stage-recompute]" in out
    code, out, _ = _run(capsys, "check", *V3, "--plan", "pp=4,ep=64,stage_recompute=1/0/0/0,layout=Et*15|t*15|t*15|t*16mL",
                        "--target", "any", "--json")
    # No launcher rule breaks, but the cost model cannot run per-stage counts without full recompute.
    data = json.loads(out)
    assert code == 1 and data["violations"] == [] and data["status"] == "FAIL"
    assert [f["rule"] for f in data["failures"]] == ["stage-recompute-needs-full"]
    code, out, _ = _run(capsys, "check", *V3, "--plan", "pp=4,vpp=4,ep=64,layout=Et*3|(tttt|)*14ttmL", "--target", "any",
                        "--json")
    data = json.loads(out)  # this plan keeps every activation of V3 on 64 GPUs: it does not fit
    assert code == 1 and data["violations"] == [] and data["status"] == "FAIL"
    assert [f["rule"] for f in data["failures"]] == ["out-of-memory"] and not data["memory"]["fits"]
    code, out, _ = _run(capsys, "check", *V3, "--plan", "pp=4,vpp=4,ep=64,recompute=full,layout=Et*3|(tttt|)*14ttmL",
                        "--json")
    data = json.loads(out)
    assert code == 0 and data["status"] == "OK" and data["failures"] == [] and data["memory"]["fits"]


def test_check_megatron_args_reports_unknown_and_env(capsys, tmp_path):
    script = tmp_path / "mine.sh"
    script.write_text(
        "torchrun --nproc-per-node 8 --nnodes 4 pretrain_gpt.py --num-layers 126 --hidden-size 16384 "
        "--num-attention-heads 128 --group-query-attention --num-query-groups 8 --kv-channels 128 "
        "--ffn-hidden-size 53248 --swiglu --seq-length 4096 --max-position-embeddings 131072 "
        "--vocab-size 128256 --untie-embeddings-and-output-weights --normalization RMSNorm "
        "--position-embedding-type rope --disable-bias-linear "
        "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --micro-batch-size 1 "
        "--global-batch-size 64 --bf16 --use-distributed-optimizer --overlap-param-gather --frobnicate\n")
    code, out, _ = _run(capsys, "check", "--megatron-args", str(script), "--hw", "h100", "--json")
    data = json.loads(out)
    assert code == 1
    rules = {v["rule"] for v in data["violations"]}
    assert {"cuda-device-max-connections", "overlap-param-gather-needs-grad-reduce", "layers-divisible"} <= rules
    assert "--frobnicate (not a megatron-core 0.19.2 flag)" in data["unknown_flags"]
    assert data["job"]["gpus"] == 32 and data["plan"].startswith("tp=8,pp=4")


def test_check_megatron_args_needs_world_size(capsys, tmp_path):
    script = tmp_path / "args.txt"
    script.write_text("--tensor-model-parallel-size 2 --micro-batch-size 1\n")
    code, _, err = _run(capsys, "check", "--megatron-args", str(script), "--model", "deepseek-v3", "--hw", "h100")
    assert code == 2 and "--gpus" in err


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan", "json"])
def test_formats_write_files(capsys, tmp_path, fmt):
    out = tmp_path / f"out.{fmt}"
    plan = "tp=8,mbs=1,sharding=fsdp" if fmt == "torchtitan" else "tp=8,mbs=1"
    code, _, err = _run(capsys, "export", "--model", "deepseek-v3", "--hw", "h100",
                        "--gpus", "512", "--global-batch", "512",
                        "--plan", plan.replace("tp=8", "tp=8,ep=64,etp=1") if fmt != "torchtitan" else plan,
                        "--format", fmt, "--out", str(out), "--torchtitan-config", "deepseek_v3:deepseek_v3_671b")
    if fmt == "torchtitan":
        # deepseek-v3 plan with tp=8 and the default etp=tp: torchtitan has no expert TP.
        assert code == 2 and "[torchtitan-etp]" in err
        return
    assert code == 0, err
    assert out.exists() and out.read_text()


def test_check_and_explain_cost_a_megatron_launch_with_its_own_flags(capsys, tmp_path):
    """One route from a script to a job: check's prediction reads the launch's CUDA graphs (and FP8
    recipe) as explain's does, so an eager and a graphed launch of the same plan differ in both. (HybridEP
    on a Blackwell GPU: a full-iteration graph of a dropless MoE layer needs its static expert shapes,
    rule cuda-graphs-full-iteration-moe, and the fused grouped experts, rule cuda-graphs-static-experts.)"""
    code, out, err = _run(capsys, "export", "--model", "qwen3-30b-a3b", "--hw", "b200", "--gpus", "16",
                          "--global-batch", "256", "--plan", "ep=16,mbs=1,sharding=zero2,recompute=moe_act,dispatcher=hybridep")
    assert code == 0, err
    eager = tmp_path / "eager.sh"
    eager.write_text(out)
    graphed = tmp_path / "graphed.sh"
    assert "--cuda-graph-impl" not in out and "PRECISION_ARGS=(\n    --bf16\n" in out
    graphed.write_text(out.replace("PRECISION_ARGS=(\n    --bf16\n", "PRECISION_ARGS=(\n    --bf16\n    --cuda-graph-impl full_iteration\n"))
    steps = {}
    for f in (eager, graphed):
        for cmd in ("check", "explain"):
            code, text, err = _run(capsys, cmd, "--megatron-args", str(f), "--json")
            assert code == 0, err
            steps[f.name, cmd] = json.loads(text)["time"]["step_time_s"]
    assert steps["eager.sh", "check"] == steps["eager.sh", "explain"]
    assert steps["graphed.sh", "check"] == steps["graphed.sh", "explain"] < steps["eager.sh", "check"]
