"""Time-model mechanisms of the megatron-local implementation (Megatron-Core's local spec without
Transformer Engine or Apex) and the single-GPU rates, each against the framework behaviour or
measurement it follows (results/validation/gpu-memory.md, step-time section)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.gpu.configs import by_name, planner_setup
from planner.cost.compute import (
    KernelTime, block_time_of, gemm_efficiency, gemm_times, host_times, kernel_times, launches, stream_times,
)
from planner.cost.flops import (
    TORCH_SOFTMAX_BWD_BYTES, TORCH_SOFTMAX_FWD_BYTES, Gemm, Shard, Stream, block_kernels, core_attention, model_shape,
)
from planner.cost.pipeline import (
    TORCH_ADAMW_BYTES_PER_PARAM, optimizer_bytes_per_param, optimizer_time, param_tensors,
)
from planner.cost.rates import rates_for
from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.time import step_time, time_report
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.plan import Plan


def _setup(gpus=1, impl="megatron-local", plan="tp=1,pp=1,mbs=1", model="llama3.1-8b", hw="h200", gbs=None):
    job = Job(gpus=gpus, global_batch=gbs or gpus * 2, seq_len=4096)
    return resolve_setup(load_model(model), load_hardware(hw), job, Plan.parse(plan), Assumptions(implementation=impl))


# ---- single-GPU rates ---------------------------------------------------------------------------
def test_sustained_fraction_applies_to_multi_gpu_jobs_only():
    """The calibrated sustained fraction stands for multi-GPU losses (communication interference,
    rank skew); one GPU runs its kernels at the measured single-GPU rates."""
    one = rates_for(_setup(gpus=1))
    eight = rates_for(_setup(gpus=8, plan="tp=8,pp=1,mbs=1", gbs=8))
    assert one.sustained == 1.0
    assert eight.sustained == pytest.approx(0.73)
    for impl in ("te", "megatron-local-fused-softmax"):
        assert rates_for(_setup(gpus=1, impl=impl)).sustained == 1.0


def test_a_system_sustained_fraction_replaces_its_generations():
    """GB300 NVL72 carries its own sustained fraction (hw_specs/gb300-nvl72.yaml, fit on its
    calibration runs); B300, the same Blackwell Ultra generation, keeps the profile's; one GPU still
    runs at the single-GPU rates."""
    plan = "tp=8,pp=1,mbs=1"
    gb300 = rates_for(_setup(gpus=8, plan=plan, gbs=8, hw="gb300", impl="te"))
    b300 = rates_for(_setup(gpus=8, plan=plan, gbs=8, hw="b300", impl="te"))
    assert gb300.sustained == pytest.approx(load_hardware("gb300").gpu.sustained_fraction.value)
    assert b300.sustained == pytest.approx(0.73) != gb300.sustained
    assert rates_for(_setup(gpus=1, hw="gb300", impl="te")).sustained == 1.0


def test_local_only_rates_stay_off_for_other_implementations():
    for impl in ("te", "megatron-local-fused-softmax"):
        r = rates_for(_setup(impl=impl))
        assert r.linear_host_s == (0.0, 0.0) and not r.torch_optimizer
    r = rates_for(_setup())
    assert r.linear_host_s[0] > 0 and r.linear_host_s[1] > 0 and r.torch_optimizer
    assert 0.4 < r.unvectorized_fraction < 0.7


# ---- kernel inventory -----------------------------------------------------------------------------
def _shard(impl, seq=4096, mbs=1):
    return Shard(tp=1, cp=1, ep=1, etp=1, mbs=mbs, seq=seq, implementation=impl)


def _score_bytes(kernels, scores):
    streams = [k for k in kernels if isinstance(k, Stream) and k.name not in ("attn_layout", "causal_mask")]
    return sum(k.bytes_fwd for k in streams) / scores, sum(k.bytes_bwd for k in streams) / scores


def test_torch_softmax_moves_the_profiled_bytes_per_score_element():
    """.float(), masked_fill_, softmax, .bfloat16() and their backward (with masked_fill's clone and
    the extra fp32 multiply): 28 bytes forward, 52 backward, against 4/6 for the fused kernel."""
    ms = model_shape(load_model("llama3.1-8b"))
    scores = 32 * 4096 * 4096
    local = core_attention(ms, _shard("megatron-local"), False)
    assert _score_bytes(local, scores) == (sum(TORCH_SOFTMAX_FWD_BYTES.values()), sum(TORCH_SOFTMAX_BWD_BYTES.values()))
    assert _score_bytes(local, scores) == (28, 52)
    fused = core_attention(ms, _shard("megatron-local-fused-softmax"), False)
    assert _score_bytes(fused, scores) == (4, 6)
    assert [k.issue for k in local if isinstance(k, Gemm)] == ["batched", "batched"]
    assert [k.issue for k in fused if isinstance(k, Gemm)] == ["grouped", "grouped"]


def test_block_softmax_beyond_2048_keys_runs_on_the_slow_path():
    ms = model_shape(load_model("llama3.1-8b"))
    soft = {s: next(k for k in core_attention(ms, _shard("megatron-local", seq=s), False) if k.name == "softmax")
            for s in (2048, 4096)}
    assert soft[2048].slow_fwd == 0 and soft[4096].slow_fwd == soft[4096].bytes_fwd


def test_local_linears_accumulate_gradients_separately_and_cost_host_time():
    ms = model_shape(load_model("llama3.1-8b"))
    ks = block_kernels(ms, _shard("megatron-local"), "dense")
    gemms = [k for k in ks if isinstance(k, Gemm) and k.issue != "batched"]
    assert gemms and all(not g.fused_wgrad and g.linear_calls == 1 for g in gemms)
    accum = {k.name for k in ks if k.name.endswith(".grad_accum")}
    assert accum == {g.name + ".grad_accum" for g in gemms}
    te = block_kernels(ms, _shard("te"), "dense")
    assert all(g.fused_wgrad and g.linear_calls == 0 for g in te if isinstance(g, Gemm))
    assert not any(isinstance(k, Stream) and (k.slow_fwd or k.slow_bwd or k.host_sync) for k in te)


def test_sequential_experts_launch_one_kernel_each_after_a_host_sync():
    ms = model_shape(load_model("qwen3-30b-a3b"))
    sh = Shard(tp=1, cp=1, ep=1, etp=1, mbs=1, seq=4096, implementation="megatron-local", dispatcher="alltoall")
    ks = block_kernels(ms, sh, "moe")
    fc1 = next(k for k in ks if k.name == "experts.fc1")
    assert fc1.issue == "sequential" and fc1.linear_calls == ms.num_experts
    assert launches(fc1) == (ms.num_experts, 2 * ms.num_experts)
    names = [k.name for k in ks]
    sync = [k.name for k in ks if isinstance(k, Stream) and k.host_sync]
    assert sync == ["permute"] and names.index("permute") < names.index("experts.fc1")
    te = block_kernels(ms, dataclasses.replace(sh, implementation="te"), "moe")
    assert next(k for k in te if k.name == "experts.fc1").issue == "grouped"


# ---- rates ---------------------------------------------------------------------------------------
def test_a_batched_gemm_fills_the_gpu_with_its_batch():
    """One strided-batched kernel over 32 thin matrices runs like one wide GEMM, not like 32 thin
    ones; it is one launch per pass."""
    r = rates_for(_setup())
    b = Gemm("attn_values", 4096, 128, 4096, count=32, issue="batched")
    seq = dataclasses.replace(b, issue="sequential")
    assert launches(b) == (1, 2) and launches(seq) == (32, 64)
    assert gemm_times(b, False, r)[0] < 0.6 * gemm_times(seq, False, r)[0]
    assert gemm_efficiency(4096, 128, 4096, "bf16", r) < 0.5 * gemm_efficiency(4096, 4096, 4096, "bf16", r)


def test_unvectorized_bytes_run_at_the_profiled_fraction():
    r = rates_for(_setup())
    fast = Stream("s", 1e9, 1e9, kernels=0)
    slow = Stream("s", 1e9, 1e9, kernels=0, slow_fwd=1e9)
    f_fast, b_fast = stream_times(fast, r)
    f_slow, b_slow = stream_times(slow, r)
    assert f_slow == pytest.approx(f_fast / r.unvectorized_fraction) and b_slow == b_fast


def _kt(name, gpu, host, sync=False):
    return KernelTime(Stream(name, 0, 0, host_sync=sync), gpu, gpu, None, host, host)


def test_a_host_sync_keeps_host_work_from_overlapping_earlier_gpu_work():
    """GPU-heavy work before a sync and host-heavy work after it add up; without the sync the
    pass takes the longer of the two totals."""
    r = rates_for(_setup())
    kts = (_kt("attention", 4.0, 1.0), _kt("permute", 0.1, 0.1, sync=True), _kt("experts", 1.0, 6.0))
    free = tuple(dataclasses.replace(kt, kernel=dataclasses.replace(kt.kernel, host_sync=False)) for kt in kts)
    t_sync = block_time_of(kts, r, None)
    t_free = block_time_of(free, r, None)
    assert t_free.fwd == pytest.approx(max(5.1, 7.1))
    assert t_sync.fwd == pytest.approx(4.1 + 6.0)
    # backward: no sync, the longer of GPU and host
    assert t_sync.bwd == pytest.approx(7.1)
    # recomputing the synced part repeats its serialized forward inside the backward
    rc = dataclasses.replace(kts[0], kernel=dataclasses.replace(kts[0].kernel, module="core_attn"))
    t_rc = block_time_of((rc,) + kts[1:], r, "full")
    assert t_rc.bwd == pytest.approx(4.1 + max(1.0 + 5.1, 6.0 + 7.1))


def test_host_time_counts_launches_and_linear_calls():
    r = rates_for(_setup())
    g = Gemm("experts.fc1", 1024, 3072, 2048, count=16, issue="sequential", linear_calls=16)
    hf, hb = host_times(g, r)
    assert hf == pytest.approx(16 * r.host_launch_s + 16 * r.linear_host_s[0])
    assert hb == pytest.approx(32 * r.host_launch_s + 16 * r.linear_host_s[1])


# ---- blocks and steps ----------------------------------------------------------------------------
def test_dense_local_steps_are_kernel_bound_and_moe_local_steps_host_bound():
    """Profiled on the H200: a dense step was 247 of 259 ms GPU-busy, an MoE step 143 ms GPU-busy,
    where its steady state (steps 51-100, two leases) took 234 ms: about 40% of it host time."""
    dense = time_report(planner_setup(by_name("gqa-s4k-b1-none")))
    moe = time_report(planner_setup(by_name("moe-s4k-b1-none")))
    assert dense.breakdown["host"] < 0.02 * dense.step_time_s
    assert moe.breakdown["host"] > 0.3 * moe.step_time_s
    assert moe.bottleneck.startswith("host-bound")


def test_torch_adamw_and_its_per_tensor_fallbacks():
    """torch AdamW's foreach passes (80 B per parameter) and Megatron's per-tensor fallbacks around
    them cost several times the fused Adam's traffic; more tensors cost more host time."""
    r = rates_for(_setup())
    fused = dataclasses.replace(r, torch_optimizer=False)
    n = 1.14e9
    assert optimizer_time(n, n, "fp32", r, tensors=27) > 3 * optimizer_time(n, n, "fp32", fused)
    assert optimizer_time(n, n, "fp32", r, tensors=159) > optimizer_time(n, n, "fp32", r, tensors=27)
    assert TORCH_ADAMW_BYTES_PER_PARAM > 2.5 * optimizer_bytes_per_param("fp32")
    s = planner_setup(by_name("moe-s4k-b1-none"))
    assert param_tensors(s.model, s.layout.rank_stages(0), 1) == 159  # what the profile's per-tensor kernels count
    s = planner_setup(by_name("gqa-s4k-b1-none"))
    assert param_tensors(s.model, s.layout.rank_stages(0), 1) == 27


def test_kernel_times_carry_host_times_for_every_entry():
    s = planner_setup(by_name("moe-s2k-b4-none"))
    ms, r = model_shape(s.model), rates_for(s)
    from planner.cost.compose import plan_shard

    for kt in kernel_times(ms, plan_shard(s), "moe", r):
        assert (kt.host_f, kt.host_b) == host_times(kt.kernel, r)


def test_single_gpu_te_runs_faster_than_with_the_multi_gpu_fraction():
    s = _setup(impl="te")
    r = rates_for(s)
    assert step_time(s, rates=r) < step_time(s, rates=dataclasses.replace(r, sustained=0.73))
