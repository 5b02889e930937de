"""`planner validate` on a user's own runs file: the schema, the per-run comparison, the class
summaries, the outputs (table, --json, --markdown, --plot) and one-paragraph errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.cli import main
from planner.errors import PlannerError
from planner.validate.evaluate import evaluate_run, evaluate_runs
from planner.validate.runs import load_runs
from planner.validate.summary import stats_of

DENSE = {
    "name": "my-llama-8b", "source": {"where": "our cluster, job 1234"}, "confidence": "H", "hardware": "h100",
    "model": "llama3.1-8b", "gpus": 8, "global_batch": 64, "seq_len": 8192, "precision": "bf16",
    "plan": "tp=1,pp=1,mbs=1,recompute=full", "measured": {"tokens_per_s_per_gpu": 5000, "peak_reserved_gib": 40.0},
}
FLAGS = {
    "name": "my-qwen3-30b", "source": {"where": "our cluster, job 1235"}, "confidence": "H", "hardware": "h100",
    "model": "qwen3-30b-a3b", "gpus": 8, "global_batch": 256, "seq_len": 4096, "precision": "bf16",
    "plan": "tp=1,pp=1,ep=8,dispatcher=alltoall",
    "megatron_args": ("--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --seq-length 4096 "
                      "--global-batch-size 256 --micro-batch-size 1 --bf16 --use-distributed-optimizer "
                      "--cuda-graph-impl transformer_engine"),
    "measured": {"tflops_per_gpu": 150}, "flops_convention": {"kind": "megatron"}, "calibration": True,
}
NOT = {
    "name": "my-nemotron", "source": {"where": "a blog"}, "hardware": "gb200-nvl72", "model": "nemotron-h (not in the catalog)",
    "measured": {"tokens_per_s_per_gpu": 1000}, "not_evaluable": "hybrid Mamba layers",
}


def _file(tmp_path: Path, runs: list[dict]) -> Path:
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump({"runs": runs}))
    return p


def test_one_run_is_compared_on_throughput_step_time_and_memory(tmp_path):
    (run,) = load_runs(_file(tmp_path, [DENSE]))
    res = evaluate_run(run)
    assert res.evaluated and res.klass == "dense / Hopper / bf16" and res.subset == "validation"
    p, m = res.predicted, res.measured
    assert res.errors["throughput"] == pytest.approx(p["tokens_per_s_per_gpu"] / 5000 - 1)
    # the same comparison seen as step time: predicted / measured - 1 has the opposite sign
    assert res.errors["step_time"] == pytest.approx(m["tokens_per_s_per_gpu"] / p["tokens_per_s_per_gpu"] - 1)
    assert res.errors["peak_reserved"] == pytest.approx(p["peak_reserved_gib"] / 40.0 - 1)


def test_flags_are_read_by_the_launch_reader_and_tflops_convert_with_megatron_flops(tmp_path):
    (run,) = load_runs(_file(tmp_path, [FLAGS]))
    res = evaluate_run(run)
    assert res.evaluated and res.reader is not None and res.reader.disagreements == []
    # the launch's CUDA graphs are the plan's cuda_graphs key (no capture scope named: the whole layer)
    assert res.reader.plan.endswith("cuda_graphs=scoped:layer") and not res.reader.not_modeled_flags
    fpt = res.predicted["flops_per_token_megatron"]
    assert res.measured["tokens_per_s_per_gpu"] == pytest.approx(150e12 / fpt)
    assert res.errors["model_tflops"] == pytest.approx(res.errors["throughput"])
    # a plan string that says something else than the flags is reported
    other = dict(FLAGS, plan="tp=1,pp=1,ep=8,dispatcher=deepep")
    (run,) = load_runs(_file(tmp_path, [other]))
    assert evaluate_run(run).reader.disagreements == ["dispatcher: plan says deepep, the flags say alltoall"]


def test_not_evaluable_and_refused_runs_get_a_reason_not_a_traceback(tmp_path):
    bad_plan = dict(DENSE, name="odd", plan="tp=3")
    results = evaluate_runs(load_runs(_file(tmp_path, [NOT, bad_plan])))
    assert [r.status for r in results] == ["not evaluated", "not evaluated"]
    assert results[0].reason == "hybrid Mamba layers"
    assert "tp" in results[1].reason and "\n" not in results[1].reason


def test_series_runs_with_equal_inputs_count_once():
    a = dict(DENSE, name="v1", series="s")
    b = dict(DENSE, name="v2", series="s", measured={"tokens_per_s_per_gpu": 6000})
    c = dict(DENSE, name="v3", series="s", plan="tp=2,pp=1,mbs=1,recompute=full")
    from planner.validate.runs import RunSpec

    results = evaluate_runs([RunSpec.model_validate(x) for x in (a, b, c)])
    assert [r.counted for r in results] == [False, True, True]


def test_stats_worst_is_the_largest_magnitude_with_its_sign():
    s = stats_of([("a", 0.05), ("b", -0.30), ("c", 0.20)])
    assert (s.n, s.worst, s.worst_run) == (3, -0.30, "b")
    assert s.median_abs == pytest.approx(0.20) and s.median_signed == pytest.approx(0.05)


def test_cli_outputs(tmp_path, capsys):
    path = _file(tmp_path, [DENSE, FLAGS, NOT])
    assert main(["validate", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"runs": 3, "evaluated": 2, "not_evaluated": 1, "calibration": 1, "counted": 2,
                                "read_from_megatron_flags": 1, "reader_disagreements": 0}
    assert report["summary"]["validation"]["classes"]["dense / Hopper / bf16"]["n"] == 1
    assert report["summary"]["calibration"]["classes"]["MoE / Hopper / bf16"]["n"] == 1
    png = tmp_path / "v.png"
    assert main(["validate", str(path), "--markdown", "--plot", str(png)]) == 0
    md = capsys.readouterr().out
    assert "## Summary by class" in md and "- my-nemotron: not evaluated: hybrid Mamba layers" in md
    assert png.stat().st_size > 10_000
    assert main(["validate", str(path), "--only", "my-llama-8b"]) == 0
    text = capsys.readouterr().out
    assert "my-llama-8b" in text and "my-qwen3-30b" not in text
    assert main(["validate", str(path), "--plot", str(tmp_path / "no-such-dir" / "v.png")]) == 2
    assert "Cannot write the plot" in capsys.readouterr().err
    assert main(["validate", str(path), "--only", "nobody"]) == 2
    assert "No run named nobody" in capsys.readouterr().err


@pytest.mark.parametrize("runs, words", [
    ([dict(DENSE, speed=3)], ["my-llama-8b", "speed"]),
    ([DENSE, DENSE], ["two runs are named 'my-llama-8b'"]),
    ([{k: v for k, v in DENSE.items() if k != "plan"}], ["neither a plan nor megatron_args"]),
])
def test_bad_runs_files_are_one_paragraph(tmp_path, capsys, runs, words):
    path = _file(tmp_path, runs)
    with pytest.raises(PlannerError):
        load_runs(path)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error:") and "Traceback" not in err
    for w in words:
        assert w in err


@pytest.mark.parametrize("name", ["evil\x1b[2J", "a\rb", "tab\there", "line\u2028sep"])
def test_control_characters_in_a_run_name_are_refused_as_in_a_model_name(tmp_path, capsys, name):
    path = _file(tmp_path, [dict(DENSE, name=name)])
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "contains the control character" in err and err.count("\n") == 1
    assert "\x1b" not in err and "\r" not in err  # the name is quoted escaped, never raw


def test_a_runs_file_with_no_evaluable_run_exits_2_saying_why_each_failed(tmp_path, capsys):
    bad_plan = dict(DENSE, name="odd", plan="tp=3")
    more = [dict(NOT, name=f"other-{i}") for i in range(3)]
    path = _file(tmp_path, [NOT, bad_plan, *more])
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: No run of") and err.count("\n") == 1, err
    assert "(5 run(s))" in err and "'my-nemotron': hybrid Mamba layers" in err and "'odd': " in err
    assert "and 2 more" in err and "other-2" not in err
    # One evaluable run is enough for a report.
    assert main(["validate", str(_file(tmp_path, [NOT, DENSE]))]) == 0
