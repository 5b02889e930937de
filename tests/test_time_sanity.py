"""Sanity report against published MoE and large dense runs that are not calibration data.

These are not accuracy assertions (the constants are not fitted to them); each test prints the
prediction next to the published figure (run with -s) and checks only that it is physically
plausible. Plans are the published ones where known; the rest are stated assumptions.
"""

from __future__ import annotations

import pytest

from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.time import time_report
from planner.specs.catalog import load_hardware, load_model
from planner.specs.hardware import HardwareSpec
from planner.specs.job import Job
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan


def _show(title, rep, published):
    print(f"\n{title}: {rep.model_tflops_per_gpu:.0f} model TFLOPS/GPU (MFU {rep.mfu:.1%}), "
          f"{rep.tokens_per_s_per_gpu:.0f} tokens/s/GPU, step {rep.step_time_s:.2f} s; published {published}")
    print(f"  bottleneck: {rep.bottleneck}")
    print("  breakdown:", {k: round(v / rep.step_time_s, 3) for k, v in rep.breakdown.items() if v > 0})


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_deepseek_v3_on_256_gb200(precision):
    """Megatron-Core MoE report (arXiv 2603.07685): DeepSeek-V3 at 1,048 TFLOPS/GPU on GB200
    (MXFP8, HybridEP; tp1 pp4 vpp4 ep64 etp1 mbs1, GBS 8192, seq 4096 per the seed/Table 17)."""
    job = Job(gpus=256, global_batch=8192, seq_len=4096, precisions=[precision])
    plan = Plan.parse("tp=1,pp=4,vpp=4,ep=64,etp=1,mbs=1,layout=Ettt|(tttt|)*14ttmL")
    rep = time_report(resolve_setup(load_model("deepseek-v3"), load_hardware("gb200-nvl72"), job, plan))
    _show(f"DeepSeek-V3, 256 GB200, {precision}", rep, "1,048 TFLOPS/GPU (MXFP8)")
    assert 0.2 < rep.mfu < 0.7


def test_deepseek_v3_on_2048_h800():
    """DeepSeek-V3 report: 2.664M H800 GPU-hours for 14.8T pre-training tokens = 1,543
    tokens/s/GPU on 2,048 H800 (FP8, PP16 DualPipe, EP64 over 8 nodes, ZeRO-1). DualPipe is
    approximated by interleaving (vpp 2) with EP overlap; batch 15,360 x 4,096."""
    h100 = load_hardware("h100").model_dump()
    h100["name"] = "h800"
    h100["nvlink"]["bandwidth_per_direction"] = {"value": 200e9, "source": "H800: NVLink 400 GB/s bidirectional"}
    hw = HardwareSpec.model_validate(h100)
    job = Job(gpus=2048, global_batch=15360, seq_len=4096, precisions=["fp8"])
    plan = Plan.parse("tp=1,pp=16,vpp=2,ep=64,etp=1,mbs=1,ep_overlap=on,dispatcher=deepep,layout=E|(tt|)*30tmL")
    rep = time_report(resolve_setup(load_model("deepseek-v3"), hw, job, plan))
    _show("DeepSeek-V3, 2048 H800, fp8", rep, "1,543 tokens/s/GPU (about 380-400 TFLOPS/GPU)")
    assert 0.15 < rep.mfu < 0.7


def test_llama3_405b_on_16k_h100():
    """Llama 3 paper Table 4: 405B on 16,384 H100, TP8 CP1 PP16 DP128, seq 8192, 16M tokens per
    batch: 400 TFLOPS/GPU (38-41% MFU); 430 on 8,192 GPUs (DP64). VPP assumed 2."""
    llama = ModelSpec.model_validate({
        "name": "llama3-405b", "source": ["Llama 3 paper"], "hidden_size": 16384, "num_layers": 126,
        "vocab_size": 128256, "attention": {"kind": "gqa", "num_heads": 128, "num_kv_heads": 8, "head_dim": 128},
        "ffn": {"activation": "swiglu", "hidden_size": 53248},
    })
    for gpus, published in ((16384, "400 TFLOPS/GPU"), (8192, "430 TFLOPS/GPU")):
        job = Job(gpus=gpus, global_batch=2048, seq_len=8192)
        plan = Plan.parse("tp=8,pp=16,vpp=2,mbs=1,layout=Et*3|(t*4|)*30t*3L")
        rep = time_report(resolve_setup(llama, load_hardware("h100"), job, plan))
        _show(f"Llama 3 405B, {gpus} H100", rep, published)
        assert 0.2 < rep.mfu < 0.7


def test_qwen3_235b_on_256_gb200():
    """Megatron-Core MoE report: Qwen3-235B-A22B at 919 TFLOPS/GPU on GB200 (974 on GB300); plan
    not published here: assumed tp1 pp4 vpp2 ep32, GBS 1024, seq 4096, MXFP8."""
    qwen = ModelSpec.model_validate({
        "name": "qwen3-235b", "source": ["HF config"], "hidden_size": 4096, "num_layers": 94, "vocab_size": 151936,
        "attention": {"kind": "gqa", "num_heads": 64, "num_kv_heads": 4, "head_dim": 128, "qk_norm": True},
        "ffn": {"activation": "swiglu", "hidden_size": 12288},
        "moe": {"num_experts": 128, "top_k": 8, "expert_hidden_size": 1536},
    })
    job = Job(gpus=256, global_batch=1024, seq_len=4096, precisions=["fp8"])
    plan = Plan.parse("tp=1,pp=4,vpp=2,ep=32,etp=1,mbs=1,layout=Et*11|(t*12|)*6t*11L")
    rep = time_report(resolve_setup(qwen, load_hardware("gb200-nvl72"), job, plan, Assumptions()))
    _show("Qwen3-235B, 256 GB200, fp8", rep, "919 TFLOPS/GPU")
    assert 0.15 < rep.mfu < 0.7
