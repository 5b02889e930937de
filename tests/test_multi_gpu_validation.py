"""Megatron-Core on two H200s against planner, per rank (issue 13).

Measured: results/validation/multi-gpu-raw/megatron/ (benchmarks/gpu/harness.py under torchrun,
local spec, 20 steps with the first 10 left out; every rank's max_memory_allocated/reserved and
median step); predicted: planner_setup(cfg) for the same degrees on 2 GPUs, the memory report's
stage for the rank's pipeline rank and the time model's step. No GPU needed.
"""

from __future__ import annotations

import pytest

from benchmarks.gpu import compare_parallel

ROWS = compare_parallel.rows(compare_parallel.RAW / "megatron")
CONFIGS = sorted({r["config"] for r in ROWS})
# Host-bound EP runs: the local spec's alltoall dispatcher with EP > 1 (token-count exchange and
# host syncs each MoE layer, two all-to-alls each way) is not in the host model, and the runs had
# only 20 steps (single-GPU MoE runs kept speeding up past step 50).
HOST_BOUND_EP = {"x2-ep2-moe-s4k-b1", "x2-tp2-ep2-moe-s4k-b2-full"}


def test_every_parallel_configuration_ran_on_both_gpus():
    assert len(CONFIGS) == 6 and len(ROWS) == 12
    assert {r["pp_rank"] for r in ROWS if "pp2" in r["config"]} == {0, 1}


@pytest.mark.parametrize("config", CONFIGS)
def test_per_rank_allocated_peak_within_8_percent(config):
    for r in (r for r in ROWS if r["config"] == config):
        assert abs(r["allocated_error"]) <= 0.08, r


@pytest.mark.parametrize("config", CONFIGS)
def test_per_rank_reserved_peak_from_the_workload(config):
    """The caching allocator's gap from the workload (hopper.yaml allocator_workload, fit on these
    ranks and the single-GPU runs): every rank at or above its measured reserved peak, within 10 %."""
    for r in (r for r in ROWS if r["config"] == config):
        assert r["reserved_within_margin"], r
        assert r["predicted_reserved"] <= 1.10 * r["measured_reserved"], r


def test_pipeline_ranks_differ_as_predicted():
    """The first pipeline rank holds more in-flight micro-batches (and the embedding), the last the
    output layer: the measured gap between the two ranks is the predicted one within 10%."""
    for config in ("x2-pp2-gqa-s4k-b1-m4", "x2-pp2-vpp2-gqa-s4k-b1-m4"):
        r0, r1 = sorted((r for r in ROWS if r["config"] == config), key=lambda r: r["pp_rank"])
        measured = r0["measured_allocated"] - r1["measured_allocated"]
        predicted = r0["predicted_allocated"] - r1["predicted_allocated"]
        assert measured > 0 and predicted == pytest.approx(measured, rel=0.10)


@pytest.mark.parametrize("config", [pytest.param(c, marks=pytest.mark.xfail(
    strict=True, reason="host-bound EP dispatcher not modeled; measured 30-38% slower than predicted"))
    if c in HOST_BOUND_EP else c for c in CONFIGS])
def test_step_time_within_15_percent(config):
    r = next(r for r in ROWS if r["config"] == config)
    assert abs(r["step_error"]) <= 0.15, r
