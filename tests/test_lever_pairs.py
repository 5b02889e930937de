"""What the time model credits the levers the search changes with, against the published pairs that
isolate them (issue 39; tests/test_graph_lever_pairs.py does the same for full-iteration CUDA graphs,
tests/test_published_runs.py for every pair of micro-batch sizes).

A pair is two published runs of one job (model, GPU, GPU count, batch, sequence) whose plans differ
in the lever (and a few others, said per family). The model must not credit a lever family more
than its pairs measured: the median of predicted over measured throughput ratio at most 1.03 (room
for noise, not for a trend, as the micro-batch test) and no pair far above. That is the over-credit
the search-mode validation suspected where the search's plan beats the recipe by "a gain nobody
measured" (results/validation/published-runs-search.md).

Measured at this file's commit (predicted / measured gain of the second run over the first):
- dispatcher, the Megatron-LM DeepSeek-V3 GB200 guide (EP32 over MNNVL, nothing else changed):
  alltoall -> deepep (steps 03 -> 04) +2.3 % / +4.8 %; deepep -> hybridep (steps 10 -> 11)
  +21.7 % / +13.7 % (not fixed: the strict expected failure below). Before this commit DeepEP and
  HybridEP were credited an FP8 dispatch that no release sends (planner.cost.comm.fp8_dispatch) and
  NCCL's all-to-all over MNNVL ran at 0.45 of NVLink, above DeepEP's measured 0.33
  (hw_specs/efficiency/blackwell.yaml): +1.7 % / +4.8 % and +17.2 % / +13.7 %; with the BF16
  dispatch alone the DeepEP step was predicted 5.7 % slower than the all-to-all one.
- micro-batch size (with the dispatcher, graph scope or pipeline depth that came with it in the
  newer recipe): DeepSeek-V3 on 256 B300 mbs 1 -> 2 (PP 16 -> 8, scoped graphs) +11.2 % / +18.7 %;
  Qwen3-30B-A3B on 8 B200 mbs 1 -> 4 (alltoall -> hybridep, attention scope) +175 % / +192 %;
  Qwen3-235B-A22B on 256 B300 mbs 1 -> 2 (alltoall -> hybridep, VPP 4 and the EP overlap dropped)
  +35 % / +121 %. The model credits the larger micro-batch less than the pairs measured.
- EP overlap (--overlap-moe-expert-parallel-comm, nothing else changed): Qwen3-235B-A22B on 256 H100
  (ModelZoo, DeepEP EP32; the pair hopper.yaml's ep_overlap_host_s is fit to) +11.8 % / +11.9 %;
  GPT-OSS-120B BF16 on 64 GB200 (Megatron-Bridge 26.02 -> 26.04.01, NCCL all-to-all EP64)
  +8.8 % / +5.4 % (+4.9 % before NCCL's all-to-all got DeepEP's rate: the overlap hides more).
No published pair isolates bf16 moments, fp8 parameter gather, the gradient-reduce dtype or a
recompute module set on an MoE job; the model credits the first three about nothing in time
(validate --search's lever table), which no measurement contradicts."""

from __future__ import annotations

import statistics

import pytest

from planner.cost.compose import costs_of
from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.time import time_report
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job_input import resolve_job
from planner.specs.plan import Plan
from planner.validate.evaluate import evaluate_run
from tests._published import published_runs

DISPATCHER_PAIRS = (
    ("mcg-dsv3-gb200-mxfp8-step03", "mcg-dsv3-gb200-mxfp8-step04"),
    ("mcg-dsv3-gb200-mxfp8-step10", "mcg-dsv3-gb200-mxfp8-step11"),
)
"""(before, after) of one job where only the MoE dispatcher changed."""

MBS_PAIRS = (
    ("mb2602-deepseek-v3-b300-fp8mx-256gpu", "mb2606-deepseek-v3-b300-fp8mx-256gpu"),
    ("mb2511-qwen3-30b-a3b-b200-fp8mx-8gpu", "mb260401-qwen3-30b-a3b-b200-fp8mx-8gpu"),
    ("mb2602-qwen3-235b-a22b-b300-fp8mx-256gpu", "mb260401-qwen3-235b-a22b-b300-fp8mx-256gpu"),
)
"""(smaller, larger micro-batch) recipes of one job."""

EP_OVERLAP_PAIRS = (
    ("zoo-qwen3-235b-h100-256gpu-bf16-deepep-crossnode-ep32",
     "zoo-qwen3-235b-h100-256gpu-bf16-deepep-crossnode-ep32-1f1b-overlap"),
    ("mb2602-gpt-oss-120b-gb200-bf16-64gpu", "mb260401-gpt-oss-120b-gb200-bf16-64gpu"),
)
"""(without, with) the EP all-to-all overlap, nothing else changed."""

FAMILIES = {"dispatcher": DISPATCHER_PAIRS, "mbs": MBS_PAIRS, "ep_overlap": EP_OVERLAP_PAIRS}


@pytest.fixture(scope="module")
def results() -> dict:
    names = {n for pairs in FAMILIES.values() for pair in pairs for n in pair}
    out = {r.name: evaluate_run(r) for r in published_runs() if r.name in names}
    assert set(out) == names, names - set(out)
    assert all(res.status == "evaluated" for res in out.values()), [n for n, r in out.items() if not r.evaluated]
    return out


def _gains(results: dict, pairs) -> dict[tuple[str, str], tuple[float, float]]:
    """(predicted, measured) gain of each pair's second run over its first, in tokens/s per GPU."""
    out = {}
    for before, after in pairs:
        a, b = results[before], results[after]
        out[before, after] = (b.predicted["tokens_per_s_per_gpu"] / a.predicted["tokens_per_s_per_gpu"] - 1,
                              b.measured["tokens_per_s_per_gpu"] / a.measured["tokens_per_s_per_gpu"] - 1)
    return out


def _differing(results: dict, before: str, after: str) -> set[str]:
    a, b = Plan.parse(results[before].plan).to_json(), Plan.parse(results[after].plan).to_json()
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)}


def test_the_pairs_change_the_lever_they_stand_for(results):
    for before, after in DISPATCHER_PAIRS:
        assert _differing(results, before, after) == {"dispatcher"}, (before, after)
    for before, after in EP_OVERLAP_PAIRS:
        assert _differing(results, before, after) == {"ep_overlap"}, (before, after)
    for before, after in MBS_PAIRS:
        assert Plan.parse(results[after].plan).mbs > Plan.parse(results[before].plan).mbs, (before, after)


def _over(gains: dict) -> list[float]:
    """Predicted over measured throughput ratio of each pair (1 = credited exactly what was measured)."""
    return [(1 + predicted) / (1 + measured) for predicted, measured in gains.values()]


@pytest.mark.parametrize("family, most", [("dispatcher", 1.10), ("mbs", 1.15), ("ep_overlap", 1.10)])
def test_the_model_credits_each_lever_no_more_than_its_pairs_measured(results, family, most):
    """The median ratio stays at most 1.03 and no pair above ``most`` (the mbs pairs carry other
    changes of the newer recipe)."""
    gains = _gains(results, FAMILIES[family])
    over = _over(gains)
    assert statistics.median(over) <= 1.03 and max(over) <= most, gains


def test_deepep_is_credited_no_more_than_measured_over_nccl_all_to_all(results):
    """The guide's alltoall -> deepep step: the fused permute and DeepEP's MNNVL rate, no more."""
    (predicted, measured), = _gains(results, DISPATCHER_PAIRS[:1]).values()
    assert 0.0 < predicted <= measured, (predicted, measured)


@pytest.mark.xfail(strict=True, reason="deepep -> hybridep on 256 GB200 (EP32) credited +21.7 % where the guide measured "
                   "+13.7 %: DeepEP's Blackwell rate is its untuned figure (dispatch 400 / combine 190 GB/s), the guide "
                   "tuned it (step 07, SMs and chunking unstated) before HybridEP replaced it; no published rate of the tuned "
                   "DeepEP or of HybridEP at EP32 to set either from")
def test_hybridep_is_credited_no_more_than_measured_over_deepep(results):
    (predicted, measured), = _gains(results, DISPATCHER_PAIRS[1:]).values()
    assert predicted <= measured, (predicted, measured)


def test_the_ep_overlap_is_credited_at_all(results):
    """... and the overlap still wins where it measured a gain (the bound above is not met by
    crediting nothing)."""
    gains = _gains(results, EP_OVERLAP_PAIRS)
    assert all(predicted > 0.02 for predicted, _ in gains.values()), gains


def test_deepep_and_hybridep_dispatch_bf16_tokens_in_fp8_training():
    """Megatron-Core's DeepEP and HybridEP paths send BF16 tokens whatever the training precision
    (planner.cost.comm.fp8_dispatch): an FP8 plan's EP exchange takes as long as the BF16 plan's."""
    model, hw = load_model("qwen3-30b-a3b"), load_hardware("b200")
    job = resolve_job(model, gpus=8, global_batch=512, seq_len=4096, precision="bf16,fp8")
    for dispatcher in ("deepep", "hybridep"):
        ep = {}
        for precision in ("bf16", "fp8"):
            plan = Plan.parse(f"tp=1,pp=1,ep=8,mbs=1,precision={precision},dispatcher={dispatcher}")
            setup = resolve_setup(model, hw, job, plan, Assumptions())
            ep[precision] = time_report(setup, costs=costs_of(setup)).breakdown["ep"]
        assert ep["fp8"] > 0
        assert ep["fp8"] == pytest.approx(ep["bf16"], rel=1e-9), (dispatcher, ep)
