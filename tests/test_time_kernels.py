"""Single-GPU kernel rates of the model against kernels measured on one H200.

tests/fixtures/h200_kernel_rates.json holds GEMM, FP8 GEMM, fused attention and copy rates
measured with tests/gpu/kernel_rates.py. On one GPU nothing else runs, so the model is compared
with its sustained fraction set to 1 (that factor is for full multi-GPU training steps).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from planner.cost.compute import attention_times, gemm_efficiency
from planner.cost.flops import FusedAttention
from planner.cost.rates import rates_for
from planner.cost.setup import resolve_setup
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.plan import Plan

DATA = json.loads((Path(__file__).parent / "fixtures" / "h200_kernel_rates.json").read_text())


@pytest.fixture(scope="module")
def hopper():
    s = resolve_setup(load_model("deepseek-v3"), load_hardware("h100"), Job(gpus=8, global_batch=8, seq_len=4096),
                      Plan.parse("tp=8,ep=8,etp=1"))
    return dataclasses.replace(rates_for(s), sustained=1.0)


@pytest.mark.parametrize("m,n,k,tflops", DATA["gemm_bf16"])
def test_bf16_gemm_shape_model(hopper, m, n, k, tflops):
    pred = gemm_efficiency(m, n, k, "bf16", hopper) * hopper.peak_bf16 / 1e12
    tol = 0.20 if min(m, n, k) <= 64 else 0.15
    assert pred == pytest.approx(tflops, rel=tol)


@pytest.mark.parametrize("m,n,k,tflops", DATA["gemm_fp8_tensorwise"])
def test_fp8_gemm_shape_model(hopper, m, n, k, tflops):
    pred = gemm_efficiency(m, n, k, "tensorwise", hopper) * hopper.peak_fp8 / 1e12
    # Few-row FP8 GEMMs are more memory-bound than the bf16-fitted curve says (weights are read
    # at 1 byte per element but the tile machinery is the same): 20% there.
    assert pred == pytest.approx(tflops, rel=0.20 if min(m, n, k) <= 128 else 0.15)


@pytest.mark.parametrize("seq,dim,fwd,bwd", [r for r in DATA["attention_causal_cudnn"] if r[1] == 128])
def test_fused_attention_rates(hopper, seq, dim, fwd, bwd):
    keys = (seq + 1) / 2
    a = FusedAttention("a", 16384, keys, 32, dim, dim, keys)
    t_f, t_b = attention_times(a, hopper)
    assert a.flops / t_f / 1e12 == pytest.approx(fwd, rel=0.15)
    assert 2.5 * a.flops / t_b / 1e12 == pytest.approx(bwd, rel=0.15)


HEAD_DIMS = json.loads((Path(__file__).parent / "fixtures" / "h200_attention_head_dims.json").read_text())["rows"]


def _single_gpu_rates(hw: str):
    s = resolve_setup(load_model("llama3-8b"), load_hardware(hw), Job(gpus=1, global_batch=1, seq_len=4096),
                      Plan.parse("tp=1"))
    return rates_for(s)


def _rates_at(rates, seq, heads, dim):
    keys = (seq + 1) / 2
    a = FusedAttention("a", 16384, keys, heads, dim, dim, keys)
    t_f, t_b = attention_times(a, rates)
    return a.flops / t_f / 1e12, 2.5 * a.flops / t_b / 1e12


@pytest.mark.parametrize("seq,heads,dim,fwd,bwd", [r[1:6] for r in HEAD_DIMS if r[0] == "cudnn" and r[4]])
def test_fused_attention_rate_across_head_dims_on_h200(seq, heads, dim, fwd, bwd):
    """cuDNN through SDPA on one H200, head dims 64-256 at one width: the forward within 10 % of
    the measured rate everywhere, the backward below 128 (above it the kernel loses 20-35 %, which
    the model does not hold). At head dim 128's rate head dim 64's forward would be 1.36x too fast."""
    p_fwd, p_bwd = _rates_at(_single_gpu_rates("h200"), seq, heads, dim)
    if dim != 96:  # an odd tile width: 0.78 of 128's forward measured, 0.9 modeled
        assert p_fwd == pytest.approx(fwd, rel=0.10)
    if dim <= 128:
        assert p_bwd == pytest.approx(bwd, rel=0.12)


# NVIDIA/cudnn-frontend's published gpt-oss benchmark (benchmark/attention_inference/results/gpt_oss/
# {gb200,gb300}: 64 query heads, 8 KV heads, learnable sinks, full causal at 8K, forward only). At head
# dim 128's rate head dim 64 would be 1.66x (GB200) and 1.31x (GB300) too fast.
@pytest.mark.parametrize("hw,fwd", [("gb200", 995.0), ("gb300", 1260.0)])
def test_fused_attention_head_dim_64_forward_on_blackwell(hw, fwd):
    p_fwd, _ = _rates_at(_single_gpu_rates(hw), 8192, 64, 64)
    assert p_fwd == pytest.approx(fwd, rel=0.12)


def test_streaming_bandwidth_below_measured_copy(hopper):
    """Element-wise kernels are costed at 0.8 of the datasheet bandwidth; a plain copy reached
    0.9 of the H200's 4.8 TB/s (the H100 spec used here has 3.35 TB/s: compare fractions)."""
    measured_fraction = DATA["hbm_copy_bytes_per_s"] / 4.8e12
    assert 0.75 * measured_fraction < hopper.hbm_bw / 3.35e12 <= measured_fraction


def test_flash2_attention_runs_at_the_flashattention2_rates_of_the_profile():
    """attention_kernel=flash2 (torchtitan's sdpa on Hopper with torch 2.5-2.7) reads the Hopper
    profile's FlashAttention-2 fractions (FlashAttention-3 paper Fig. 5-6); a generation without
    them refuses it."""
    from planner.errors import PlannerError
    from planner.specs.efficiency import load_efficiency
    from tests._models import setup_for

    plan = "tp=1,cp=1,pp=1,mbs=1"
    fused = rates_for(setup_for("llama3.1-8b", "h100", plan, gpus=8, global_batch=8, seq_len=8192))
    fa2 = rates_for(setup_for("llama3.1-8b", "h100", plan, gpus=8, global_batch=8, seq_len=8192,
                              attention_kernel="flash2"))
    c = load_efficiency("hopper").compute
    assert (fa2.flash_fwd, fa2.flash_bwd) == (c.flash2_fwd_fraction.value, c.flash2_bwd_fraction.value)
    assert (fused.flash_fwd, fused.flash_bwd) == (c.flash_fwd_fraction.value, c.flash_bwd_fraction.value)
    with pytest.raises(PlannerError, match="FlashAttention-2"):
        rates_for(setup_for("llama3.1-8b", "b200", plan, gpus=8, global_batch=8, seq_len=8192,
                            attention_kernel="flash2"))
