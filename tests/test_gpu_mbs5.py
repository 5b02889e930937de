"""The micro-batch lever on host-bound eager MoE (issue 39, search mode's largest credited lever):
MBS5 of benchmarks/gpu/configs.py, chosen before the run, planner's predictions committed before it
(results/validation/gpu-mbs5-predictions.json), measured on one H100 (2026-12-06, Megatron-Core
0.19.2's local spec, dropless alltoall dispatcher; two back-to-back calls on one machine and a third call
on another, raw JSON in results/validation/gpu-raw/mbs5/, mbs5-run2/ and mbs5-machine2/). The same tokens per step as 4 x 1, 2 x 2
and 1 x 4 sequences of 2K: what the search's mbs 1 -> 2 gain rests on (the host's per-layer work
after the dispatcher's sync hidden behind more GPU work, planner.cost.compute.block_time_of).
Nothing was changed after the runs came in. Written up in results/validation/gpu-memory.md,
"The micro-batch lever"."""

from __future__ import annotations

import pytest

from benchmarks.gpu.configs import MBS5, by_name, planner_setup
from planner.cost.memory import memory_report
from planner.inputs import DEFAULT_MEMORY_MARGIN
from tests._gpu_series import check_series, measured_run, predicted_step, predictions

BEFORE = predictions("mbs5")
GPU = "h100"  # the lease's card (mbs5/env.txt)
RUNS = ("mbs5", "mbs5-run2", "mbs5-machine2")
"""Two calls on one warm machine, a third on another machine (all H100): host-bound steps vary 10-30 %
from call to call and step to step (dropless routing and the host's own pace), so each run's step is the
three calls' mean, as the expert range's are two leases'."""
MODELS = ("moe", "moe128x2")


def _measured(name: str, folder: str) -> dict:
    return measured_run(folder, name)


def _name(model: str, mbs: int) -> str:
    return f"mbs5-{model}-s2k-b{mbs}-m{4 // mbs}"


def _step(name: str) -> float:
    return predicted_step(name, GPU)


def _measured_step(name: str) -> float:
    return sum(_measured(name, f)["step_time_s"] for f in RUNS) / len(RUNS)


def test_every_run_was_measured_on_the_card_predicted_and_the_predictions_stand():
    for folder in RUNS:
        check_series("mbs5", MBS5, folder, GPU, warmup=30, timed=30)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mbs", (2, 4))
def test_the_micro_batch_gain_within_ten_percent(model, mbs):
    """The step at micro-batch ``mbs`` over the step at micro-batch 1, same tokens: predicted 0.578 /
    0.387 at 16 experts (measured 0.620 / 0.372), 0.543 / 0.317 at 128 (measured 0.523 / 0.318). On the
    second machine alone the 16-expert 1 -> 2 ratio is 0.697 (-17 %); on the first, 0.578."""
    base, other = _name(model, 1), _name(model, mbs)
    predicted = _step(other) / _step(base)
    measured = _measured_step(other) / _measured_step(base)
    assert predicted / measured - 1 == pytest.approx(0, abs=0.10)


@pytest.mark.parametrize("name", [c.name for c in MBS5])
def test_eager_steps_within_ten_percent(name):
    """Each step against the three calls' mean: -4.0 to +7.2 % (the expert range's bound, 10 %)."""
    assert _step(name) / _measured_step(name) - 1 == pytest.approx(0, abs=0.10)


@pytest.mark.parametrize("name", [c.name for c in MBS5])
def test_reserved_peak_covered_by_the_margin_and_at_most_ten_percent_above(name):
    """Issue 41's bounds on held-out eager runs: the prediction at most DEFAULT_MEMORY_MARGIN below the
    measured reserved peak (-1.4 % at worst here) and at most 10 % above it (+9.9 % at worst: 16
    experts at micro-batch 4)."""
    rep = memory_report(planner_setup(by_name(name), hardware=GPU))
    predicted = rep.reserved(rep.worst)
    measured = max(_measured(name, f)["peak_reserved"] for f in RUNS)
    assert predicted == pytest.approx(BEFORE[name][GPU]["reserved_bytes"], rel=1e-9)
    assert measured * (1 - DEFAULT_MEMORY_MARGIN) <= predicted <= measured * 1.10
