"""What the time model credits a full-iteration CUDA graph with, against the published pairs that
isolate it (issue 39): two Megatron-Bridge recipes of one job (model, GPU, GPU count, batch) where
the later one captures the full iteration with the EP overlap's delayed wgrad (26.06+: rank
capacity, paged stash, HybridEP, the CuTe DSL grouped MLP), the earlier one scoped graphs.

The pairs also span software releases (kernels got faster between them), so a model that credited
the graphs alone with the whole measured gain would be right; one that credits more is the
over-credit the search-mode validation suspected (results/validation/published-runs-search.md).
Measured at this file's commit: the model credits the pairs +15 to +51 % where they measured +22
to +68 %, a median 7 points short; only qwen3-235b on GB200 (which also changed its layout and
VPP) is credited more than measured. Since the EP exchange is BF16 (planner.cost.comm.fp8_dispatch,
issue 39): +19 to +56 % where they measured +22 to +68 %, a median 4 points short; qwen3-235b on
GB200 +56 % / +34 %, on GB300 +40 % / +34 %."""

from __future__ import annotations

import statistics

import pytest

from planner.validate.evaluate import evaluate_run
from tests._published import published_runs

GRAPH_PAIRS = (
    ("mb2511-qwen3-30b-a3b-gb200-fp8mx-8gpu", "mb2608-qwen3-30b-a3b-gb200-fp8mx-8gpu"),
    ("mb2602-qwen3-30b-a3b-b300-fp8mx-8gpu", "mb2606-qwen3-30b-a3b-b300-fp8mx-8gpu"),
    ("mb2602-qwen3-30b-a3b-gb300-fp8mx-8gpu", "mb2608-qwen3-30b-a3b-gb300-fp8mx-8gpu"),
    ("mb260201-deepseek-v3-gb200-fp8mx-256gpu", "mb2608-deepseek-v3-gb200-fp8mx-256gpu"),
    ("mb2602-qwen3-235b-a22b-gb300-fp8mx-256gpu", "mb2608-qwen3-235b-a22b-gb300-fp8mx-256gpu"),
    ("mb2602-qwen3-235b-a22b-gb200-fp8mx-256gpu", "mb2608-qwen3-235b-a22b-gb200-fp8mx-256gpu"),
)
"""(scoped graphs, full-iteration graphs with ep_overlap=wgrad) recipes of one job."""


@pytest.fixture(scope="module")
def runs() -> dict:
    names = {n for pair in GRAPH_PAIRS for n in pair}
    return {r.name: r for r in published_runs() if r.name in names}


@pytest.fixture(scope="module")
def gains(runs) -> dict[tuple[str, str], tuple[float, float]]:
    results = {name: evaluate_run(r) for name, r in runs.items()}
    out = {}
    for before, after in GRAPH_PAIRS:
        a, b = results[before], results[after]
        assert a.status == b.status == "evaluated", (before, after)
        out[before, after] = (b.predicted["tokens_per_s_per_gpu"] / a.predicted["tokens_per_s_per_gpu"] - 1,
                              b.measured["tokens_per_s_per_gpu"] / a.measured["tokens_per_s_per_gpu"] - 1)
    return out


def test_the_pairs_are_scoped_against_full_iteration_graphs(runs):
    for before, after in GRAPH_PAIRS:
        assert "full_iteration" not in (runs[before].plan or "") + (runs[before].megatron_args or "")
        assert "--cuda-graph-impl full_iteration" in (runs[after].megatron_args or "")


def test_the_model_credits_full_iteration_graphs_no_more_than_the_pairs_measured(gains):
    """The median credit stays at or below the measured gain: the graph lever is not what makes the
    search's plans too fast on Blackwell MXFP8 (where every one of these recipes runs)."""
    short = [measured - predicted for predicted, measured in gains.values()]
    assert statistics.median(short) >= 0.0, gains
    # Each pair within 25 points above its measurement (qwen3-235b on GB200 changed layout and VPP too,
    # and is credited 22 points over since DeepEP/HybridEP stopped being credited an FP8 dispatch that no
    # release sends, planner.cost.comm.fp8_dispatch: the BF16 exchange its EP overlap hides is larger).
    assert all(predicted <= measured + 0.25 for predicted, measured in gains.values()), gains
    # ... and none credited nothing: the graph (and the wgrad overlap) still win.
    assert all(predicted > 0.05 for predicted, _ in gains.values()), gains
