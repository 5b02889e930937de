"""The fourth CUDA-graph lease (issue 39: "model both, eager and graphed, from 8 to 256 experts"):
GRAPHS4 of benchmarks/gpu/configs.py, chosen before the run, planner's predictions committed before
it (results/validation/gpu-graphs4-predictions.json), measured on one H100 (2026-12-06, Megatron-Core
0.19.2's local spec; raw JSON in results/validation/gpu-raw/cuda-graphs-4/, the eager 256-expert
runs again for 100 steps, the first 50 left out, on two leases: cuda-graphs-4-s100/ and
cuda-graphs-4-s100-lease2/). Nothing was changed after
they came in: every bound is issue 39's (or the earlier graph tests'), each miss a strict xfail that
says by how much. Written up in results/validation/gpu-memory.md, "Fourth lease"."""

from __future__ import annotations

import pytest

from benchmarks.gpu.configs import GRAPHS4
from tests._gpu_series import check_series, graph_rows, known_misses, measured_run, predicted_step

GPU = "h100"  # the lease's card (cuda-graphs-4/env.txt)
GRAPHED = [c.name for c in GRAPHS4 if c.cuda_graphs != "none"]


def _measured(name: str, folder: str = "cuda-graphs-4") -> dict:
    return measured_run(folder, name, "-s100" if folder.endswith("-s100") else "")


def _step(name: str) -> float:
    return predicted_step(name, GPU)


def _rows() -> dict[str, dict]:
    return graph_rows("graph4-")


def test_every_run_was_measured_on_the_card_predicted_and_the_predictions_stand():
    check_series("graphs4", GRAPHS4, "cuda-graphs-4", GPU, warmup=8, timed=12)
    assert set(_rows()) == set(GRAPHED)


RESERVED_MISSES: dict[str, str] = {}
"""Graphed runs beyond issue 39's 5 %: none since peak_memory._strands (the full iteration at 256 experts was
+8.1 %, -2.7 % now; that term was written after this lease, so the run no longer holds it out)."""


@pytest.mark.parametrize("name", known_misses(GRAPHED, RESERVED_MISSES))
def test_reserved_with_graphs_within_five_percent(name):
    """Issue 39's first bound, held out: +2.2 % (256 experts, whole layers), +4.6 % (256 experts, 1K
    tokens, micro-batch 4), +2.3 % (8 experts); the full iteration -2.7 % (+8.1 % as held out, before
    peak_memory._strands)."""
    assert abs(_rows()[name]["reserved_error"]) <= 0.05


DIFFERENCE_MISSES = {
    "graph4-moe256x2-s2k-b2-pad-layer": "graphs add +10293 MiB predicted, +5814 measured (+77 %): the eager twin is "
                                        "predicted -4.9 %, the graphed run +2.2 %",
    "graph4-moe256x2-s1k-b4-pad-layer": "graphs add +9268 MiB predicted, +4474 measured (+107 %)",
    "graph4-moe256x2-s2k-b2-pad-fulliter": "graphs add +2547 MiB predicted, +1196 measured (+113 %; +670 % as held "
                                           "out, before peak_memory._strands): the eager twin is predicted -4.9 %",
    "graph4-moe8x2-s2k-b2-pad-layer": "graphs add +1939 MiB predicted, +2768 measured (-30 %): the eager twin is "
                                      "predicted +9.5 %",
}


@pytest.mark.parametrize("name", known_misses(GRAPHED, DIFFERENCE_MISSES))
def test_the_difference_graphs_make_within_ten_percent(name):
    """Issue 39's second bound, held out: missed on all four (DIFFERENCE_MISSES). At 256 experts the
    rule's per-expert blocks beside the pool (derived at 16-128 experts) overshoot what the graphs
    add by 4.5-8 GiB; at 8 experts it falls short by 0.8 GiB."""
    r = _rows()[name]
    assert r["predicted_delta_reserved"] / r["measured_delta_reserved"] == pytest.approx(1, abs=0.1)


@pytest.mark.parametrize("name", GRAPHED)
def test_graphed_steps_within_fifteen_percent(name):
    """The graphed MoE layers issue no host work (rates.under_graphs), as at 16-128 experts
    (tests/test_cuda_graph_measured.py, the same 15 %): -3.3 and -4.3 % (256 experts, whole layers
    and the full iteration), -13.7 % (256 experts, 1K tokens, micro-batch 4), +6.3 % (8 experts)."""
    assert _step(name) / _measured(name)["step_time_s"] - 1 == pytest.approx(0, abs=0.15)


EAGER_MISSES = {
    "graph4-moe256x2-s2k-b2-pad-none": "942.0 ms measured over steps 51-100 (949.7 and 934.2 on two leases), 1087.8 "
                                       "predicted (+15.5 %); over steps 9-20 of the 20-step run 1230.0 ms (-11.6 %): "
                                       "the host-bound step was still speeding up",
    "graph4-moe256x2-s1k-b4-pad-none": "930.3 ms measured over steps 51-100 (1023.0 and 837.6 on two leases), 1084.0 "
                                       "predicted (+16.5 %)",
}
LEASES_S100 = ("cuda-graphs-4-s100", "cuda-graphs-4-s100-lease2")
"""The eager 256-expert runs for 100 steps on two leases (the second call's and a fourth call's machine,
both H100), averaged as the expert range's are (benchmarks.gpu.compare.measured_step)."""


def _eager_s100(name: str) -> float:
    return sum(_measured(name, folder)["step_time_s"] for folder in LEASES_S100) / len(LEASES_S100)


@pytest.mark.parametrize("name", known_misses(("graph4-moe256x2-s2k-b2-pad-none", "graph4-moe256x2-s1k-b4-pad-none"),
                                              EAGER_MISSES))
def test_eager_256_expert_steps_within_ten_percent(name):
    """The host-bound eager model (fit at 16 experts and the 8-128 range, tests/test_gpu_step_time.py's
    10 %) at 256 experts, on the range's protocol (100 steps, the first 50 left out, two leases
    averaged): +15.5 % at 2K tokens and micro-batch 2, +16.5 % at 1K tokens and micro-batch 4
    (EAGER_MISSES; on the first lease alone +14.5 and +6.0 %)."""
    for folder in LEASES_S100:
        r = _measured(name, folder)
        assert "error" not in r and r["warmup_steps"] == 50 and len(r["step_times_s"]) == 50
    assert _step(name) / _eager_s100(name) - 1 == pytest.approx(0, abs=0.10)


@pytest.mark.xfail(strict=True, reason="97.9 ms predicted, 81.4 measured over steps 9-20 (+20.3 %)")
def test_eight_expert_eager_step_within_ten_percent():
    """The other end of the range, eager (20 steps; the EXPERTS range's 8-expert runs, 3072 wide and
    4 layers, are within 10 %): +20.3 %, recorded as it is."""
    err = _step("graph4-moe8x2-s2k-b2-pad-none") / _measured("graph4-moe8x2-s2k-b2-pad-none")["step_time_s"] - 1
    assert abs(err) <= 0.10
