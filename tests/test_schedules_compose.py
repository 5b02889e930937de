"""The schedules in the composition (issue 21): DeepSeek-V3's DualPipe run against its published
throughput, DualPipe's two parameter copies in the constant memory, and the walked plans against
the closed forms the search's tables read."""

from __future__ import annotations

import pytest

from planner.cost.compose import costs_of
from planner.cost.memory import stage_memory
from planner.cost.schedules.inflight import max_inflight
from planner.cost.time import time_report
from tests._models import setup_for

V3_PUBLISHED = 1543
"""DeepSeek-V3 technical report (arXiv 2412.19437): 2.664M H800 GPU-hours for 14.8T tokens on
2,048 H800 = 1,543 tokens/s/GPU (tests/data/published_runs.yaml, deepseek-v3-report-h800-2048gpu)."""
V3_LAYOUT = "Et*3|(t*4|)*14t*2mL"
"""61 layers over 16 stages; DualPipe puts stage 0 (embedding) and stage 15 (head, MTP) on one rank
(report sec. 3.2.3: "the shallowest layers (including the embedding layer) and deepest layers
(including the output head) of the model on the same PP rank")."""
V3_PLAN = f"tp=1,pp=16,ep=64,etp=1,recompute=layernorm+mla_up_proj,precision=fp8,layout={V3_LAYOUT}"


def v3_h800(extra: str):
    return setup_for("deepseek-v3", "h800", f"{V3_PLAN},{extra}", gpus=2048, global_batch=15360, seq_len=4096)


def test_deepseek_v3_dualpipe_on_2048_h800_is_within_10_percent_of_the_report():
    """PP16 DualPipe, EP64 over 8 nodes, FP8, 15,360 x 4,096, ZeRO-1: the walk of DualPipe with
    each forward-and-backward pair's all-to-all under the other's compute."""
    rep = time_report(v3_h800("schedule=dualpipe,ep_overlap=on"))
    tok = rep.tokens_per_s_per_gpu
    assert abs(tok / V3_PUBLISHED - 1) < 0.10, tok
    pipe = rep.pipeline
    assert pipe["schedule"] == "dualpipe" and pipe["walked"]
    # The bubble share of the step the walk predicts (explain prints it): about 9 %, close to the
    # DualPipe README's (PP/2 - 1)(F&B + B - 3W) over this step (7 pair-and-backward gaps).
    assert 0.05 < pipe["bubble_share"] < 0.13, pipe["bubble_share"]
    # Without the pair overlap the all-to-all of EP64 across 8 nodes is exposed: DualPipe's gain
    # is that overlap, not its bubble.
    plain = time_report(v3_h800("schedule=dualpipe")).tokens_per_s_per_gpu
    assert plain < 0.85 * tok, (plain, tok)


def test_dualpipe_holds_two_copies_of_the_parameters():
    """Rank r of DualPipe holds stage r and stage pp-1-r (deepseek-ai/DualPipe example: full_modules[r]
    and full_modules[pp-1-r]): weights and gradients of both, the optimizer state of the pair
    sharded over both holders' data-parallel replicas."""
    dual, single = costs_of(v3_h800("schedule=dualpipe")), costs_of(v3_h800("schedule=1f1b"))
    p = 16
    for r in (3, 7):
        d, a, b = dual.constant(r).at(0), single.constant(r).at(0), single.constant(p - 1 - r).at(0)
        assert d.weights == pytest.approx(a.weights + b.weights, rel=1e-12)
        assert d.gradients == pytest.approx(a.gradients + b.gradients, rel=1e-12)
        assert d.optimizer == pytest.approx((a.optimizer + b.optimizer) / 2, rel=1e-12)
    # Rank 0 holds the embedding and, as stage 15's holder, the MTP module that reads it: the copy
    # of the word embedding 1F1B's last rank builds for MTP is not needed (the report's "physical
    # sharing of parameters and gradients ... between the MTP module and the main model").
    d, a, b = dual.constant(0).at(0), single.constant(0).at(0), single.constant(p - 1).at(0)
    m = v3_h800("schedule=dualpipe").model
    assert a.weights + b.weights - d.weights == pytest.approx(2 * m.vocab_size * m.hidden_size, rel=1e-12)


def test_walked_schedules_hold_their_in_flight_counts():
    """The composition's peak moment lies within each schedule's in-flight count per rank
    (DualPipe: PP + 1 chunk-micro-batches; ZB-V and DualPipeV 2 PP + 1 or 2 PP; the phase-1 walk
    counts them, tests/test_schedules_memory.py)."""
    cases = {"dualpipe": "schedule=dualpipe,ep_overlap=on"}
    for name, extra in cases.items():
        s = v3_h800(extra)
        for r in (0, 5, 15):
            st = stage_memory(s, r)
            held = sum(st.peak_moment["inflight"][:2]) + (st.peak_moment["phase"] == "forward")
            assert held <= max_inflight(name, 16, 1, 120, r, with_w=False) == 17
