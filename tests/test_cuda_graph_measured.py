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
    rs = [r for r in rows() if r["cuda_graphs"] != "full_iteration" and not r["config"].startswith("graph4-")]
    assert len(rs) == 7  # four dense (first lease), three MoE (second); the fourth lease's: test_gpu_graphs4.py
    assert all(abs(r["reserved_error"]) <= 0.05 for r in rs), [(r["config"], r["reserved_error"]) for r in rs]


FULL_ITERATION_DERIVED = ("graph-gqa-s2k-b1-fulliter", "graph-gqa-s2k-b2-fulliter", "graph2-moe-s2k-b2-pad-fulliter")
"""The runs measured when the full-iteration rule was written (second lease); GRAPHS3's are held out."""


def _full_iteration_rows() -> list[dict]:
    return [r for r in rows() if r["cuda_graphs"] == "full_iteration"]


def test_full_iteration_reserved_within_five_percent():
    """Issue 39: the full-iteration graph (Megatron's FullCudaGraphWrapper: the whole forward-backward
    one graph with one private pool, the optimizer eager; torch empties the cache before capture)
    holds the activations' and the optimizer temporaries' working sets side by side without the
    eager fixed holding (peak_memory._fixed_held), and nothing stranded (peak_memory._strands, after
    the fourth lease). Reserved +2.2, +2.3, +1.1 % on the runs it was derived with (whole-layer rule
    before: +7.1, +6.4, +10.1 %; with stranded blocks +4.2 % on the MoE run), and on the safe side."""
    rs = [r for r in _full_iteration_rows() if r["config"] in FULL_ITERATION_DERIVED]
    assert {r["config"] for r in rs} == set(FULL_ITERATION_DERIVED)
    assert all(0 <= r["reserved_error"] <= 0.05 for r in rs), [(r["config"], r["reserved_error"]) for r in rs]


FULL_ITERATION_HELD_OUT = ("graph3-gqa-s4k-b1-fulliter", "graph3-mha-s2k-b1-m4-fulliter", "graph3-moe-s1k-b4-pad-fulliter")
"""GRAPHS3 (benchmarks/gpu/configs.py): chosen before any run, measured after the rule was written (third
lease, 2026-12-06, one H200; raw JSON in gpu-raw/cuda-graphs-3/)."""

HELD_OUT_RESERVED_MISSES: dict[str, str] = {}
"""Held-out runs beyond issue 39's 5 % (strict: a fix shows as XPASS)."""


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=HELD_OUT_RESERVED_MISSES[n]))
                                  if n in HELD_OUT_RESERVED_MISSES else n for n in FULL_ITERATION_HELD_OUT])
def test_full_iteration_reserved_within_five_percent_on_held_out_runs(name):
    """The same bound on the runs held out of the rule: -3.1 % (GQA, 4K tokens), -2.7 % (MHA, four
    micro-batches), +2.0 % (16-expert MoE, drop-and-pad; +5.4 % before peak_memory._strands, which was
    written after this run came in: no longer held out for that term)."""
    r = next(r for r in _full_iteration_rows() if r["config"] == name)
    assert abs(r["reserved_error"]) <= 0.05, (name, r["reserved_error"])


def test_full_iteration_adds_less_than_whole_layer_graphs():
    """The mechanism's signature, measured and predicted: on the same run, the full-iteration graph
    raises the reserved peak less than whole-layer graphs (2.5-3.3 against 4.0-6.0 GiB measured),
    by about the fixed holding the capture releases."""
    by = {r["config"]: r for r in rows()}
    for full, layer in (("graph-gqa-s2k-b2-fulliter", "graph-gqa-s2k-b2-layer"),
                        ("graph2-moe-s2k-b2-pad-fulliter", "graph2-moe-s2k-b2-pad-layer")):
        assert by[full]["measured_delta_reserved"] < by[layer]["measured_delta_reserved"]
        assert by[full]["predicted_delta_reserved"] < by[layer]["predicted_delta_reserved"]


DIFFERENCE_MISSES = {
    "graph-gqa-s2k-b1-fulliter": "graphs add +3019 MiB predicted, +2734 MiB measured (+10.4 %): the eager twin "
                                 "(first lease) is predicted +1.3 % above its measurement, the graphed run +2.2 %",
    # Held out (third lease): the rule adds the optimizer's temporaries less the released fixed holding
    # (+3019 MiB on every dense run of this model); the segments (gpu-memory.md, "Third lease") show the
    # graph's pool at 4K tokens 12.5 % above the eager activation peak (3-4 % at 2K): it is made of the
    # local spec's unfused attention scores, 2 GiB segments that TE's fused attention does not allocate.
    "graph3-gqa-s4k-b1-fulliter": "graphs add +3019 MiB predicted, +6472 MiB measured (-53 %): the pool packs "
                                  "the local spec's 2 GiB attention-score blocks",
    "graph3-mha-s2k-b1-m4-fulliter": "graphs add +1523 MiB predicted, +2068 MiB measured (-26 %)",
    # Without stranded blocks under the full iteration (peak_memory._strands) the graphed MoE runs land
    # within 1.1-2.0 % of their measurements, while their eager twins stay +5.1 / +5.5 % above theirs
    # (the workload model's slack, stranded blocks included): the difference falls short by that slack.
    "graph2-moe-s2k-b2-pad-fulliter": "graphs add +1625 MiB predicted, +2488 MiB measured (-35 %): the eager twin "
                                      "is predicted +5.1 %, the graphed run +1.1 %",
    "graph3-moe-s1k-b4-pad-fulliter": "graphs add +1301 MiB predicted, +1976 MiB measured (-34 %): the eager twin "
                                      "is predicted +5.5 %, the graphed run +2.0 %",
}
"""Runs where the predicted difference misses issue 39's 10 % bound (strict: a fix shows as XPASS)."""


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=DIFFERENCE_MISSES[n]))
                                  if n in DIFFERENCE_MISSES else n
                                  for n in FULL_ITERATION_DERIVED + FULL_ITERATION_HELD_OUT])
def test_full_iteration_difference_within_ten_percent_of_measured(name):
    """Issue 39's second bound: what the graph adds, predicted against measured (both against the
    eager twin, whose own prediction carries the workload model's fit slack: +1.3 to +5.1 %)."""
    r = next(r for r in _full_iteration_rows() if r["config"] == name)
    assert r["predicted_delta_reserved"] / r["measured_delta_reserved"] == pytest.approx(1, abs=0.1)


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
