"""Time model: schedule, monotonicity, report contents, calibration hook, offload."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost.compute import gemm_efficiency
from planner.cost.pipeline import bubble_fraction, pipeline_time
from planner.cost.rates import rates_for, with_peak_scale
from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.compose import costs_of
from planner.cost.time import LABELS, stage_times, step_time, time_report, time_section
from planner.specs.calibration import Calibration
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.plan import Plan

DSV3_PLAN = "tp=1,pp=4,vpp=4,ep=64,etp=1,mbs=1,layout=Ettt|(tttt|)*14ttmL"


def setup_for(model="deepseek-v3", hw="gb200-nvl72", gpus=256, plan=DSV3_PLAN, gbs=8192, seq=4096,
              precision="bf16", assumptions=None, fill=None):
    job = Job(gpus=gpus, global_batch=gbs, seq_len=seq, precisions=[precision], domain_fill=fill)
    return resolve_setup(load_model(model), load_hardware(hw), job, Plan.parse(plan), assumptions)


# ---- the schedule -------------------------------------------------------------------------------
@pytest.mark.parametrize("p,v,m", [(4, 1, 8), (8, 3, 64), (35, 3, 280), (4, 4, 128), (16, 7, 64)])
def test_interleaved_bubble_fraction(p, v, m):
    assert bubble_fraction(p, v, m) == pytest.approx((p - 1) / (v * m))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 64), st.integers(1, 8), st.integers(1, 512), st.integers(1, 64))
def test_more_micro_batches_never_lengthen_the_bubble_share(p, v, m, extra):
    assert bubble_fraction(p, v, m + extra) <= bubble_fraction(p, v, m) + 1e-15


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=16), st.integers(1, 256))
def test_slowest_stage_sets_the_pace(times, m):
    t = pipeline_time(times, m, 1)
    assert t >= m * max(times) - 1e-9
    assert t == pytest.approx(sum(times) + (m - 1) * max(times))


def test_uneven_stages_cost_more_than_even_ones():
    assert pipeline_time([1.0, 1.2, 0.8, 1.0], 32, 2) > pipeline_time([1.0] * 4, 32, 2)


# ---- monotonicity -------------------------------------------------------------------------------
PLANS = [
    dict(),  # DeepSeek-V3 on GB200
    dict(hw="h100"),
    dict(precision="fp8", plan=DSV3_PLAN + ",ep_overlap=on"),
    dict(model="deepseek-v3", hw="h100", plan="tp=2,pp=8,vpp=2,ep=16,etp=1,mbs=1,cp=2,recompute=core_attn+moe_act,"
         "layout=Ettt|(tttt|)*14ttmL", gbs=2048, gpus=512),
]


@pytest.mark.parametrize("kw", PLANS)
def test_doubling_peak_flops_never_slows_a_step(kw):
    s = setup_for(**kw)
    r = rates_for(s)
    assert step_time(s, rates=with_peak_scale(r, 2.0)) <= step_time(s, rates=r)


LINK_FIELDS = ["nvlink_bw", "nvlink_busbw", "nvls_algbw", "nic_bw", "nic_busbw", "a2a_nvlink", "a2a_nic", "host_bw"]


@pytest.mark.parametrize("kw", PLANS)
@pytest.mark.parametrize("field", LINK_FIELDS)
def test_doubling_any_link_bandwidth_never_slows_a_step(kw, field):
    s = setup_for(**kw)
    r = rates_for(s)
    v = getattr(r, field)
    if v is None:
        pytest.skip("no in-switch reduction on this hardware")
    doubled = tuple((k, x * 2) for k, x in v) if isinstance(v, tuple) else v * 2
    faster = dataclasses.replace(r, **{field: doubled})
    assert step_time(s, rates=faster) <= step_time(s, rates=r)


def test_network_and_gemm_scales_act():
    base = step_time(setup_for(hw="h100"))
    slow_net = step_time(setup_for(hw="h100", assumptions=Assumptions(network_bandwidth_scale=0.5)))
    fast_gemm = step_time(setup_for(hw="h100", assumptions=Assumptions(gemm_efficiency_scale=1.2)))
    assert slow_net > base * 1.02
    assert fast_gemm < base * 0.97


def test_thin_shards_and_few_tokens_per_expert_run_less_efficiently():
    r = rates_for(setup_for(hw="h100"))
    big = gemm_efficiency(8192, 7168, 7168, "bf16", r)
    assert gemm_efficiency(8192, 7168 // 16, 7168, "bf16", r) < big  # thin TP shard
    assert gemm_efficiency(64, 4096, 7168, "bf16", r) < 0.7 * big  # few tokens per expert


def test_fp8_speeds_up_gemms_only():
    bf = time_report(setup_for())
    f8 = time_report(setup_for(precision="fp8"))
    assert f8.breakdown["gemm"] < 0.85 * bf.breakdown["gemm"]
    assert f8.breakdown["attention"] == pytest.approx(bf.breakdown["attention"])
    assert f8.step_time_s < bf.step_time_s


def test_routing_imbalance_slows_the_heaviest_rank():
    base = step_time(setup_for())
    skewed = step_time(setup_for(assumptions=Assumptions(routing_imbalance=1.5)))
    assert skewed > base * 1.05


# ---- report -------------------------------------------------------------------------------------
def test_report_json_has_design_keys_and_breakdown_sums_to_step():
    rep = time_report(setup_for())
    j = rep.to_json()
    for key in ("step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "breakdown", "bottleneck",
                "hardware_tflops_per_gpu", "hidden_communication"):
        assert key in j
    assert sum(rep.breakdown.values()) == pytest.approx(rep.step_time_s, rel=1e-9)
    assert rep.mfu == pytest.approx(rep.model_tflops_per_gpu * 1e12 / 2.5e15)
    assert rep.hardware_tflops_per_gpu >= rep.model_tflops_per_gpu * 0.99
    json.dumps(j)  # serializable
    assert time_section(setup_for()) == j  # stable: same input, same output


def test_bottleneck_names_the_largest_cause():
    for kw in PLANS + [dict(hw="h100", fill=None, plan=DSV3_PLAN)]:
        rep = time_report(setup_for(**kw))
        cause = max(rep.breakdown, key=rep.breakdown.get)
        assert rep.bottleneck.startswith(LABELS[cause])
        pct = round(100 * rep.breakdown[cause] / rep.step_time_s)
        assert f"{pct}% of the step" in rep.bottleneck


def test_bottleneck_is_ep_all_to_all_across_domains_when_the_network_is_slow():
    rep = time_report(setup_for(hw="h100", assumptions=Assumptions(network_bandwidth_scale=0.05)))
    assert rep.bottleneck.startswith("exposed EP all-to-all across domains")


def test_recompute_adds_backward_work():
    from calibration_rows import korthikanti_setup

    full = time_report(korthikanti_setup("gpt3-175B", "full"))
    sel = time_report(korthikanti_setup("gpt3-175B", "seqsel"))
    assert full.breakdown["recompute"] > 0.15 * full.step_time_s
    assert 0 < sel.breakdown["recompute"] < 0.05 * sel.step_time_s
    assert full.hardware_tflops_per_gpu > full.model_tflops_per_gpu * 1.25
    assert sel.step_time_s < full.step_time_s


def test_layer_times_compose_the_stage_times():
    s = setup_for()
    costs = costs_of(s)
    # rank 1 holds 16 MoE layers (layout Ettt|(tttt|)*14ttmL): its per-micro-batch time is theirs
    rank1 = costs.ranks()[1]
    moe = costs.block("moe", None, None)
    per_layer = float((moe.compute + moe.exposed)[0])
    assert float(rank1.per_microbatch[0]) == pytest.approx(16 * per_layer + float(rank1.p2p_exposed[0]))


def test_stage_times_and_step_time_are_consistent():
    s = setup_for()
    ts = stage_times(s)
    assert len(ts) == 4
    costs = costs_of(s)
    expected = pipeline_time(ts, s.micro_batches, 4) + 2 * 3 * float(costs.ranks()[0].p2p_total[0]) / 8
    assert float(costs.pipeline_s()[0]) == pytest.approx(expected)


# ---- calibration hook and offload ---------------------------------------------------------------
def test_calibration_overrides_profile_rates(tmp_path):
    s = setup_for(hw="h100")
    base = time_report(s)
    cal = Calibration(hardware="h100", source="test", gemm=[{"m": 8192, "n": 8192, "k": 8192, "tflops": 500.0}],
                      hbm_bandwidth=2.0e12)
    slower = time_report(s, calibration=cal)
    assert slower.step_time_s > base.step_time_s
    path = tmp_path / "cal.yaml"
    path.write_text("hardware: h100\nsource: test\ngemm: [{m: 8192, n: 8192, k: 8192, tflops: 500.0}]\nhbm_bandwidth: 2.0e12\n")
    via_assumptions = time_report(setup_for(hw="h100", assumptions=Assumptions(calibration=str(path))))
    assert via_assumptions.step_time_s == pytest.approx(slower.step_time_s)


def test_calibration_for_other_hardware_is_refused():
    from planner.errors import PlannerError

    with pytest.raises(PlannerError):
        time_report(setup_for(hw="h100"), calibration=Calibration(hardware="gb200-nvl72", source="test"))


def test_optimizer_offload_reports_host_traffic_and_time():
    plan = DSV3_PLAN + ",offload=optimizer"
    on_gpu = time_report(setup_for())
    off = time_report(setup_for(plan=plan))
    info = off.offload["optimizer"]
    assert info["link"] == "nvlink-c2c"
    assert info["bytes_per_step"] > 0 and info["time_s"] >= info["transfer_s"]
    assert off.breakdown["optimizer_offload"] > on_gpu.breakdown["optimizer"]


def test_activation_offload_reports_required_bandwidth():
    rep = time_report(setup_for(hw="h100", plan=DSV3_PLAN + ",offload=activations"))
    a = rep.offload["activations"]
    assert a["required_bytes_per_s"] > 0 and a["link_bytes_per_s"] == 64e9


def test_activation_offload_moves_what_the_memory_model_keeps():
    """The bytes offload streams per micro-batch are the streaming rank's kept activation bytes
    (the memory model's chunks, under the plan's recompute), not a per-layer rule of thumb."""
    for rc in ("none", "moe_act", "moe_act+layernorm"):
        costs = costs_of(setup_for(hw="h100", plan=DSV3_PLAN + f",recompute={rc},offload=activations"))
        off = costs.activation_offload()
        r = int(np.ravel(off.rank)[0])
        kept = sum(float(np.ravel(c.kept)[0]) for c in costs.chunks(r))
        assert float(np.ravel(off.bytes_per_microbatch)[0]) == pytest.approx(kept, rel=1e-12)


def test_activation_offload_time_counts_under_a_walked_schedule():
    """Combined 1F1B is walked; the copies that outlast a micro-batch's compute delay the walked
    step as they delay the closed form's (the streaming rank's extra seconds, every micro-batch)."""
    plan = ("pp=2,vpp=16,ep=64,etp=1,mbs=2,sharding=zero2,recompute=moe_act,precision=bf16,"
            "layout=Et|(tt|)*29t|tmL,dispatcher=hybridep,ep_overlap=on")
    on, off = (costs_of(setup_for(plan=plan + f",offload={o}")) for o in ("activations", "none"))
    assert on.walked()  # the schedule is walked, not a closed form
    extra = float(np.ravel(on.activation_offload().extra_s)[0])
    assert extra > 0
    m = on.batch.micro_batches
    gap = float(on.pipeline_s()[0] - off.pipeline_s()[0])
    assert gap == pytest.approx(float(np.ravel(m)[0]) * extra, rel=1e-9)
