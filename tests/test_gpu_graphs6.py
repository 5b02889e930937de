"""The full iteration without stranded blocks, held out (issue 39): GRAPHS6 of benchmarks/gpu/configs.py,
chosen after planner.cost.terms.peak_memory._strands was written and before the run, planner's
predictions committed before it (results/validation/gpu-graphs6-predictions.json, model of 55fa1a9),
measured on one H100 (2026-12-06, Megatron-Core 0.19.2's local spec; raw JSON in
results/validation/gpu-raw/cuda-graphs-6/). Nothing was changed after they came in: every bound is issue
39's (or the earlier graph tests'), each miss a strict xfail that says by how much. Written up in
results/validation/gpu-memory.md, "Fifth lease"."""

from __future__ import annotations

import pytest

from benchmarks.gpu.configs import GRAPHS6
from tests._gpu_series import check_series, graph_rows, known_misses, measured_run, predicted_step, predictions

GPU = "h100"  # the lease's card (cuda-graphs-6/env.txt)
GRAPHED = [c.name for c in GRAPHS6 if c.cuda_graphs != "none"]
EAGER = [c.name for c in GRAPHS6 if c.cuda_graphs == "none"]


def _measured(name: str) -> dict:
    return measured_run("cuda-graphs-6", name)


def _step(name: str) -> float:
    return predicted_step(name, GPU)


def _rows() -> dict[str, dict]:
    return graph_rows("graph6-")


def test_every_run_was_measured_on_the_card_predicted_and_the_predictions_stand():
    check_series("graphs6", GRAPHS6, "cuda-graphs-6", GPU, warmup=8, timed=12)
    by, before = _rows(), predictions("graphs6")
    assert set(by) == set(GRAPHED)
    for name in GRAPHED:
        assert by[name]["predicted_reserved"] == pytest.approx(before[name][GPU]["reserved_bytes"], rel=1e-9)


@pytest.mark.parametrize("name", GRAPHED)
def test_reserved_with_graphs_within_five_percent(name):
    """Issue 39's first bound, held out: -1.3 % (64 experts), -2.4 % (128), +3.3 % (8), -2.4 % (256).
    Three below the measurement, by 0.27-1.41 GiB: inside the default margin (2.17 % of usable HBM,
    1.6 GiB of an H100's)."""
    assert abs(_rows()[name]["reserved_error"]) <= 0.05


DIFFERENCE_MISSES = {
    "graph6-moe64x2-s2k-b2-pad-fulliter": "graphs add +382 MiB predicted, +1462 measured (-74 %): the eager twin is "
                                          "predicted +4.1 %, the graphed run -1.3 %",
    "graph6-moe128x2-s1k-b4-pad-fulliter": "graphs add +710 MiB predicted, +920 measured (-23 %)",
    "graph6-moe8x2-s4k-b1-pad-fulliter": "graphs add +534 MiB predicted, +750 measured (-29 %): the eager twin is "
                                         "predicted +4.8 %",
    "graph6-moe256x2-s2k-b1-pad-fulliter": "graphs add +557 MiB predicted, +626 measured (-11 %)",
}


@pytest.mark.parametrize("name", known_misses(GRAPHED, DIFFERENCE_MISSES))
def test_the_difference_graphs_make_within_ten_percent(name):
    """Issue 39's second bound: none of four (the eager twins' own errors, -2.3 to +4.8 %, are 0.5-2.9
    times the 0.6-1.4 GiB the graphs add)."""
    r = _rows()[name]
    assert r["predicted_delta_reserved"] / r["measured_delta_reserved"] == pytest.approx(1, abs=0.10)


@pytest.mark.parametrize("name", GRAPHED)
def test_graphed_steps_within_fifteen_percent(name):
    """The graphed MoE runs' bound (tests/test_cuda_graph_measured.py): +5.5, +2.6, +13.1, +2.4 %."""
    assert _step(name) / _measured(name)["step_time_s"] - 1 == pytest.approx(0, abs=0.15)


EAGER_MISSES = {
    "graph6-moe64x2-s2k-b2-pad-none": "314.5 ms predicted, 197.8 measured (+59 %); the same configuration took 319.9 ms "
                                      "on the second lease (graph2-moe64x2-s2k-b2-pad-none, -2 % there)",
    "graph6-moe128x2-s1k-b4-pad-none": "568.5 ms predicted, 363.7 measured (+56 %)",
    "graph6-moe8x2-s4k-b1-pad-none": "119.4 ms predicted, 89.8 measured (+33 %)",
    "graph6-moe256x2-s2k-b1-pad-none": "1078.0 ms predicted, 687.1 measured (+57 %)",
}


@pytest.mark.parametrize("name", known_misses(EAGER, EAGER_MISSES))
def test_eager_steps_within_ten_percent(name):
    """The host-bound eager steps on this lease's machine: +33 to +59 % (EAGER_MISSES). One configuration
    is GRAPHS2's exactly (64 experts, 2K x 2): 197.8 ms here, 319.9 ms on the second lease's H100, the same
    bytes reserved to the byte: the host's own speed, which planner cannot see, moved it 1.6x."""
    assert _step(name) / _measured(name)["step_time_s"] - 1 == pytest.approx(0, abs=0.10)
