"""Issue 39's CUDA-graph measurements (results/validation/gpu-raw/cuda-graphs and cuda-graphs-2,
Megatron-Core 0.19.2's local graphs on one H200 and one H100; results/validation/gpu-memory.md,
"CUDA graphs"): planner's reserved peak with graphs against every graphed run, and its step time
for the graphed drop-and-pad MoE layers of 16 to 128 experts, whose eager steps are host-bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.gpu.configs import by_name, planner_setup
from benchmarks.gpu.graph_memory import rows
from planner.cost.compose import costs_of

RAW = Path(__file__).resolve().parents[1] / "results" / "validation" / "gpu-raw" / "cuda-graphs-2"
MOE = ("graph2-moe-s2k-b2-pad", "graph2-moe64x2-s2k-b2-pad", "graph2-moe128x2-s2k-b2-pad")


def test_reserved_with_graphs_within_five_percent_of_every_graphed_run():
    """Issue 39: predicted peak within 5 % with graphs on (dense GQA/MHA and MoE of 16, 64 and 128
    experts: the graphs' pool keeps the activations through the optimizer step, whose temporaries
    and per-expert blocks take segments of their own, peak_memory._optimizer_top)."""
    rs = [r for r in rows() if r["cuda_graphs"] != "full_iteration"]
    assert len(rs) == 7  # four dense (first lease), three MoE (second)
    assert all(abs(r["reserved_error"]) <= 0.05 for r in rs), [(r["config"], r["reserved_error"]) for r in rs]


def test_full_iteration_reserved_is_over_predicted_by_the_whole_layer_rule():
    """The full-iteration graph (Megatron's FullCudaGraphWrapper, measured on the third call of the
    second lease) adds 2.5-3.3 GiB where whole-layer graphs add 4.0-6.0: predicted with the
    whole-layer rule, +6.4 to +10.1 % (issue 39's 5 % not met; on the safe side). A model that
    starts under-predicting it, or gets worse, fails here."""
    rs = [r for r in rows() if r["cuda_graphs"] == "full_iteration"]
    assert len(rs) == 3
    assert all(0 <= r["reserved_error"] <= 0.11 for r in rs), [(r["config"], r["reserved_error"]) for r in rs]


def _step(name: str) -> tuple[float, float]:
    measured = json.loads((RAW / f"{name}.json").read_text())["step_time_s"]
    return measured, float(costs_of(planner_setup(by_name(name), hardware="h100")).step_s()[0])


@pytest.mark.parametrize("base", MOE)
def test_graphed_local_moe_layers_issue_no_host_work(base):
    """The runs were on an H100 (the lease's machine), predicted for it. Eager, the local spec's
    MoE steps are host-bound (linear calls and the MoE layer's Python, rates.linear_host_s /
    moe_layer_host_s); replayed as graphs of whole layers they run none of it (rates.under_graphs):
    measured 209 -> 140, 320 -> 115 and 557 -> 174 ms. Without that rule the graphed steps were
    predicted +48 %, +124 % and +167 % slow."""
    eager_m, eager_p = _step(f"{base}-none")
    graph_m, graph_p = _step(f"{base}-layer")
    assert graph_p / graph_m - 1 == pytest.approx(0, abs=0.15)
    # the speed-up graphs give, predicted against measured (1.5x to 3.2x measured)
    assert (eager_p / graph_p) / (eager_m / graph_m) == pytest.approx(1, abs=0.2)
