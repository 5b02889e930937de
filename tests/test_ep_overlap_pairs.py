"""Megatron-Core's EP all-to-all overlap against published A/B measurements (tests/data/ep_overlap_pairs.yaml).

Issue 39's search credits the overlap (ep_overlap: --overlap-moe-expert-parallel-comm, with or without
--delay-wgrad-compute) +13 % median over the recipes that leave it off; its host cost per MoE layer and
pass (Rates.ep_overlap_host_s, 0.8 ms) was fit on one published pair, the Megatron-MoE-ModelZoo
Qwen3-235B EP32 runs on 256 H100s (in published_runs.yaml). Two more pairs, Megatron-Bridge's own on
Qwen3-30B-A3B with 16 H100s (EP 16 over two nodes), were found after that fit; each compares planner's
predicted gain of the overlap (step off / step on) with the measured one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.validate.evaluate import evaluate_runs
from planner.validate.runs import load_runs

PAIRS = Path(__file__).parent / "data" / "ep_overlap_pairs.yaml"


@pytest.fixture(scope="module")
def steps() -> dict[str, tuple[float, float]]:
    """Run name -> (measured, predicted) step seconds."""
    runs = load_runs(PAIRS)
    out = {}
    for run, res in zip(runs, evaluate_runs(runs)):
        assert res.status == "evaluated", (run.name, res.reason)
        out[run.name] = (run.measured.step_time_s, res.predicted["step_time_s"])
    return out


def _gain(steps, off: str, on: str) -> tuple[float, float]:
    """(measured, predicted) speed-up of ``on`` over ``off``."""
    return steps[off][0] / steps[on][0], steps[off][1] / steps[on][1]


EAGER = "mbr-overlap-qwen3-30b-a3b-h100-bf16-16gpu-alltoall-eager-"
SCOPED = "mbr-overlap-qwen3-30b-a3b-h100-bf16-16gpu-hybridep-scoped-"


def test_eager_alltoall_overlap_gain_as_measured(steps):
    """Eager layers, NCCL all-to-all: the overlap measured 1.317x (41.25 -> 31.31 s), predicted 1.298x;
    delayed weight gradients on top measured 1.0035x, predicted 1.025x. Each within 3 %."""
    measured, predicted = _gain(steps, EAGER + "off", EAGER + "on")
    assert measured == pytest.approx(1.317, abs=0.001)
    assert predicted == pytest.approx(measured, rel=0.03)
    measured, predicted = _gain(steps, EAGER + "on", EAGER + "wgrad")
    assert predicted == pytest.approx(measured, rel=0.03)


def test_every_run_within_15_percent_but_the_scoped_overlap(steps):
    """The absolute steps: the eager runs 9-12 % slow, the scoped-graph run without the overlap 6.6 %
    slow (planner's eager-MoE host constants are Hopper fits of other jobs)."""
    for name, (measured, predicted) in steps.items():
        if name != SCOPED + "on":
            assert predicted == pytest.approx(measured, rel=0.15), name


@pytest.mark.xfail(strict=True, reason="the overlap's stage host time is added as exposed wait in every pass "
                   "(planner.cost.compute.with_stage_host): predicted 0.97x, measured 1.18x")
def test_scoped_graphs_hybridep_overlap_gain_as_measured(steps):
    """HybridEP with the router and dispatcher preprocessing captured in CUDA graphs: the overlap measured
    1.177x (24.71 -> 20.99 s); planner predicts a loss (26.46 -> 27.41 s): the 0.8 ms of stage host time
    per MoE layer and pass (4.9 s over 48 layers, two passes, 64 micro-batches) outweighs the 4.0 s of
    all-to-all it hides. Where the graphs leave the layer's host work below its GPU time, that stage
    time is host work the GPU need not wait for; the composition adds it as wait regardless."""
    measured, predicted = _gain(steps, SCOPED + "off", SCOPED + "on")
    assert measured == pytest.approx(1.177, abs=0.001)
    assert predicted == pytest.approx(measured, rel=0.05)
