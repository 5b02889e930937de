"""Predicted single-GPU step time against the committed H200 measurements (issue #11).

Measured: Megatron-Core 0.19.2's local spec on one H200 (results/validation/gpu-raw/, written by
benchmarks/gpu/harness.py), each configuration's longest runs, the median of the steps after the
warm-up, averaged over leases where repeated (``compare.measured_step``); predicted: the time model
for the same run (benchmarks/gpu/configs.py: megatron-local, h200, one GPU) with the committed
calibration (results/calibration/h200-2026-11-29.yaml), as results/validation/gpu-memory.md reports.

Dense runs are kernel-bound: flat from step 2 and within 1.5% between leases. The MoE runs are
host-bound (SequentialMLP's Python loop over 16 experts): they speed up over their first 50-100
steps on the device's VMs (steps 2-6 take 1.2-1.6x as long as steps 51-100) and each lease's
machine runs them at its own pace (steady states 6-31% apart), so they were run for 100 steps on
two leases and measured on steps 51-100, averaged. The expert range (benchmarks/gpu/configs.py
EXPERTS: 8, 64 and 128 experts, issue 20 phase 2) was measured the same way; the host constants
(per linear call and per MoE layer) were fit to the six 16-expert runs and the six of the range
together, the MoE holdout was not used. No GPU needed.
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.gpu import compare
from benchmarks.gpu.configs import by_name, planner_setup
from planner.cost.time import step_time

MEASURED = compare.measured()
CALIBRATION = str(compare.CALIBRATION)
TOLERANCE = 0.10


def _measured(name: str) -> float:
    return compare.measured_step(name)["step_time_s"]


def _error(name: str, calibration: str | None = CALIBRATION) -> float:
    pred = step_time(planner_setup(by_name(name), calibration=calibration))
    return (pred - _measured(name)) / _measured(name)


CALIBRATION_SET = [n for n in MEASURED if not n.startswith("holdout-")]
HOLDOUTS = [n for n in MEASURED if n.startswith("holdout-")]
MOE = [n for n in MEASURED if "moe" in n]


EXPERT_RANGE = [n for n in MEASURED if n.startswith(("moe8-", "moe64-", "moe128-"))]


def test_every_configuration_was_measured():
    assert len(CALIBRATION_SET) == 24 and len(HOLDOUTS) == 4 and len(EXPERT_RANGE) == 6
    for name in MOE:  # the host-bound runs: the second half of a 100-step run, on two leases
        m = compare.measured_step(name)
        assert (m["steps"], m["warmup"], m["runs"], len(m["timed"])) == (100, 50, 2, 100), name
        assert m["step_time_s"] == pytest.approx(statistics.fmean(m["per_run_s"]))


@pytest.mark.parametrize("name", CALIBRATION_SET)
def test_step_time_within_10_percent(name):
    assert abs(_error(name)) <= TOLERANCE


@pytest.mark.parametrize("name", [n for n in EXPERT_RANGE if not n.startswith("moe8-")])
def test_64_and_128_experts_within_10_percent_on_each_lease_average(name):
    """Issue 20's acceptance: the host-bound runs at 64 and 128 experts within 10 % (the 16-expert
    fit alone over-predicted the 128-expert steps by 19-25 %: results/validation/gpu-experts-predictions.json)."""
    import json

    before = json.loads((compare.ROOT / "results" / "validation" / "gpu-experts-predictions.json").read_text())
    assert abs(_error(name)) <= TOLERANCE
    if name.startswith("moe128-"):
        assert before["runs"][name]["step_s_calibrated"] / _measured(name) - 1 > 0.15


@pytest.mark.parametrize("name", HOLDOUTS)
def test_holdout_step_time_within_10_percent(name):
    """Measured after the memory model was fixed, not used to set any time-model constant."""
    assert abs(_error(name)) <= TOLERANCE


@pytest.mark.parametrize("name", [n for n in MEASURED if "moe" not in n])
def test_kernel_bound_runs_within_10_percent_without_calibration(name):
    """The generation profile alone (no calibration file) predicts the dense runs as well."""
    assert abs(_error(name, None)) <= TOLERANCE


def test_kernel_bound_runs_repeat_between_leases():
    """Dense runs measured again in later leases (20 and 30 steps) repeat within 2%: the protocol
    change does not move them."""
    repeated = [n for n in MEASURED if "moe" not in n and len(compare.step_runs(n)) > 1]
    assert len(repeated) >= 2
    for name in repeated:
        medians = [r["step_time_s"] for r in compare.step_runs(name)]
        assert max(medians) / min(medians) < 1.02, (name, medians)


@pytest.mark.parametrize("name", [n for n in MOE if n not in EXPERT_RANGE])
def test_host_bound_runs_drift_faster_and_the_late_window_is_measured(name):
    """Why the MoE runs are measured late: in every 100-step run, steps 2-6 take at least 1.1x as
    long as steps 51-100 (1.20-1.63x on the first lease)."""
    for run in [r for r in compare.step_runs(name) if len(r.get("all_step_times_s") or []) == 100]:
        steps = run["all_step_times_s"]
        early, late = statistics.median(steps[1:6]), statistics.median(steps[50:])
        assert late == pytest.approx(run["step_time_s"])
        assert early > 1.10 * late, (name, early, late)


def test_the_expert_range_drifts_too():
    """Eleven of the twelve expert-range runs (two leases x six) ran steps 2-6 at least 1.2x as long
    as steps 51-100; one (moe64-s4k-b1-none, second lease) was flat (0.98x)."""
    ratios = []
    for name in EXPERT_RANGE:
        for run in compare.step_runs(name):
            steps = run["all_step_times_s"]
            ratios.append(statistics.median(steps[1:6]) / statistics.median(steps[50:]))
    assert len(ratios) == 12 and sum(r > 1.2 for r in ratios) == 11 and min(ratios) > 0.95


def test_host_bound_steady_state_differs_between_leases():
    """What the averaging is for: the same configuration's steps 51-100 ran up to 31% apart on two
    leases (dense runs: within 1.5%), more than the 10% bound, so one lease alone does not say
    how fast a typical host runs them; each prediction lies between the two leases' values or
    within 10% of the nearer. (The 128-expert runs happened to repeat within 10%.)"""
    spreads = []
    for name in MOE:
        per_run = compare.measured_step(name)["per_run_s"]
        spreads.append(max(per_run) / min(per_run) - 1)
        pred = step_time(planner_setup(by_name(name), calibration=CALIBRATION))
        assert min(per_run) / 1.1 <= pred <= max(per_run) * 1.1, name
    assert max(spreads) > 0.25 and sorted(spreads)[len(spreads) // 2] > 0.05


def test_the_five_step_times_would_miss():
    """The check can fail: against the first five timed steps of the first lease's 100-step runs,
    the prediction is more than 10% fast for most MoE runs."""
    misses = 0
    for name in MOE:
        first = next(r for r in compare.step_runs(name) if len(r.get("all_step_times_s") or []) == 100)
        early = statistics.median(first["all_step_times_s"][1:6])
        pred = step_time(planner_setup(by_name(name), calibration=CALIBRATION))
        misses += (early - pred) / early > TOLERANCE
    assert misses >= 4


def test_the_2022_fused_softmax_inventory_misses_the_local_runs():
    """The check can fail: the fused-softmax inventory (the 2021-22 Megatron the time model had
    for megatron-local before) predicts the dense local runs 13-30% too fast even on one GPU."""
    from dataclasses import replace

    from planner.cost.time import step_time as st

    errs = []
    for name in ("gqa-s4k-b1-none", "mha-s2k-b2-none", "gqa-s8k-b1-coreattn"):
        s = planner_setup(by_name(name), calibration=CALIBRATION)
        s = replace(s, assumptions=s.assumptions.model_copy(update={"implementation": "megatron-local-fused-softmax"}))
        errs.append((st(s) - _measured(name)) / _measured(name))
    assert all(e < -TOLERANCE for e in errs)
