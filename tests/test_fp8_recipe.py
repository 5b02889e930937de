"""The FP8 recipe a launch states (--fp8-recipe) costs the GEMMs at that recipe's ceiling in the
generation profile (issue 20 lever 5; docs/research/levers-2026.md section 5). Megatron-Bridge's
"FP8-CS" rows run per-tensor current scaling (tensorwise) on Blackwell, where planner had costed
every FP8 plan as MXFP8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.time import time_report
from planner.launchers.megatron.read import assumptions_from_flags
from planner.specs.job_input import resolve_job
from planner.specs.catalog import load_hardware, load_model
from planner.specs.efficiency import load_efficiency
from planner.specs.plan import Plan

ROOT = Path(__file__).resolve().parents[1]


def test_the_recipe_is_read_from_the_flags():
    recipe = lambda v: assumptions_from_flags(v).get("fp8_recipe")  # noqa: E731
    assert recipe({"fp8": "hybrid", "fp8_recipe": "tensorwise"}) == "tensorwise"
    assert recipe({"fp8": "e4m3"}) == "delayed"  # Megatron's default recipe
    assert recipe({"bf16": True, "fp8_recipe": "mxfp8"}) is None  # no FP8: nothing to cost
    assert recipe({"fp8": "hybrid", "fp8_recipe": "custom"}) is None


def _step(hw: str, recipe: str | None) -> float:
    model, hw_spec = load_model("llama3.1-70b"), load_hardware(hw)
    job = resolve_job(model, gpus=64, global_batch=128, seq_len=8192, precision="fp8")
    setup = resolve_setup(model, hw_spec, job, Plan.parse("tp=4,pp=4,vpp=5,precision=fp8"), Assumptions(fp8_recipe=recipe))
    return time_report(setup).step_time_s


def test_tensorwise_on_blackwell_runs_at_its_own_ceiling():
    """blackwell.yaml: MXFP8 0.604, tensorwise 0.763 of the FP8 peak: the GEMM-bound step of a
    dense 70B model is faster with tensorwise, by less than the ceilings' ratio (not everything
    is a GEMM); the hardware's recipe (None) is MXFP8."""
    g = load_efficiency("blackwell").compute.gemm
    assert g["tensorwise"].fraction / g["mxfp8"].fraction == pytest.approx(1.263, abs=0.01)
    mx, cs = _step("gb200-nvl72", "mxfp8"), _step("gb200-nvl72", "tensorwise")
    assert _step("gb200-nvl72", None) == mx
    assert 1.08 < mx / cs < 1.263


def test_on_hopper_blockwise_pays_the_split_accumulator_in_the_forward_too():
    """The two recipes share Hopper's FP8 ceiling; block scaling also runs its forward GEMMs with the
    split accumulator (planner.cost.compute.SPLIT_ACCUMULATOR), per-tensor scaling only the backward's:
    the step is slower by less than that accumulator's 5 % over a third of the GEMM time."""
    g = load_efficiency("hopper").compute.gemm
    assert g["tensorwise"].fraction == g["blockwise"].fraction
    tensorwise, blockwise = _step("h100", "tensorwise"), _step("h100", "blockwise")
    assert 1.0 < blockwise / tensorwise < 1.0 + 0.05 / 3


def test_explain_reads_the_recipe_from_a_launch_script(tmp_path, capsys):
    script = tmp_path / "run.sh"
    base = ("torchrun pretrain_gpt.py --tensor-model-parallel-size 4 --pipeline-model-parallel-size 4 "
            "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
            "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
            "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
            "--seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 128 "
            "--vocab-size 128256 --use-distributed-optimizer --bf16 --fp8-format hybrid ")
    steps = {}
    for recipe in ("mxfp8", "tensorwise"):
        script.write_text(base + f"--fp8-recipe {recipe}\n")
        main(["explain", "--megatron-args", str(script), "--hw", "gb200-nvl72", "--gpus", "64", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert out["assumptions"]["fp8_recipe"] == recipe
        steps[recipe] = out["time"]["step_time_s"]
    assert steps["tensorwise"] < steps["mxfp8"] / 1.08


def test_published_fp8_cs_runs_are_costed_as_tensorwise():
    """Every Blackwell run of the published set whose launch says --fp8-recipe tensorwise is
    evaluated with that recipe (the committed report's assumptions)."""
    from planner.validate.evaluate import resolve_run
    from tests._published import published_runs

    runs = [r for r in published_runs() if r.megatron_args and "--fp8-recipe tensorwise" in r.megatron_args
            and not r.not_evaluable and "gb" in r.hardware]
    assert len(runs) >= 8
    for r in runs:
        assert resolve_run(r)[4].fp8_recipe == "tensorwise", r.name
