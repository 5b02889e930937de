"""`explain --json` exposes the allocated peak of each phase of the step (issue 20): the
forward-backward passes and the optimizer step, per stage and for the worst stage, checked against
the phase peaks measured on one H200 (results/validation/gpu-raw: ``fwd_bwd_peak_allocated`` and
``optimizer_peak_allocated`` of every single-GPU run, megatron-local)."""

from __future__ import annotations

import json

import pytest

from benchmarks.gpu import compare
from benchmarks.gpu.configs import by_name, planner_setup
from planner.cli import main
from planner.cost.evaluate import plan_evaluation

MEASURED = compare.measured()


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_each_phase_peak_matches_the_h200_measurement(name):
    r = MEASURED[name]
    phases = plan_evaluation(planner_setup(by_name(name)), time=False)["memory"]["phase_peaks"]
    fb, opt = phases["forward_backward"]["allocated_peak_bytes"], phases["optimizer_step"]["allocated_peak_bytes"]
    assert fb == pytest.approx(r["fwd_bwd_peak_allocated"], rel=0.02)
    assert opt == pytest.approx(r["optimizer_peak_allocated"], rel=0.02)
    measured_phase = "optimizer_step" if r["optimizer_peak_allocated"] > r["fwd_bwd_peak_allocated"] else "forward_backward"
    assert phases["peak_phase"] == measured_phase


def test_some_measured_runs_peak_in_the_optimizer_step():
    """The check above can tell the phases apart: with full recompute and many experts the torch
    AdamW temporaries outgrow the activations (8 and 128 experts, full recompute)."""
    opt = {n for n, r in MEASURED.items() if r["optimizer_peak_allocated"] > r["fwd_bwd_peak_allocated"]}
    assert {"moe8-s2k-b2-full", "moe128-s2k-b4-full"} <= opt and len(opt) < len(MEASURED) // 4


def test_explain_json_has_the_phase_peaks_of_every_stage(capsys):
    code = main(["explain", "--model", "deepseek-v3", "--hw", "gb200-nvl72", "--plan",
                 "pp=4,vpp=4,ep=64,mbs=1,layout=Et*3|(tttt|)*14ttmL", "--json"])
    mem = json.loads(capsys.readouterr().out)["memory"]
    assert code in (0, 1)
    for stage in mem["stages"]:
        ph = stage["phase_peaks"]
        fb, opt = ph["forward_backward"]["allocated_peak_bytes"], ph["optimizer_step"]["allocated_peak_bytes"]
        assert max(fb, opt) == pytest.approx(stage["allocated_peak_bytes"], abs=2)
        assert ph["peak_phase"] == ("optimizer_step" if opt > fb else "forward_backward")
        assert ph["forward_backward"]["moment"]["phase"] in ("forward", "backward", "end_of_warmup", "recompute_window")
    worst = next(s for s in mem["stages"] if s["rank"] == mem["worst_stage"])
    assert mem["phase_peaks"] == worst["phase_peaks"]
    # the pipeline's first stage holds more in-flight activations than the last
    fbs = [s["phase_peaks"]["forward_backward"]["activations_bytes"] for s in mem["stages"]]
    assert fbs[0] > fbs[-1]
