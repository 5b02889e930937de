"""NVFP4 as a third precision (issue 39): Transformer Engine's NVFP4BlockScaling on the linear
layers, only on GPUs with FP4 tensor cores and only when the job asks for it."""

from __future__ import annotations

import pytest

from planner.cost.compose import costs_of
from planner.cost.compute import gemm_recipe, gemm_times, shape_factor
from planner.cost.constant import FP4_WEIGHT_BYTES
from planner.cost.flops import NVFP4, Gemm, Shard, _with_casts
from planner.cost.rates import rates_for
from planner.cost.setup import resolve_setup
from planner.rules import shared_violations
from planner.search.space import Limits, lever_options
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.plan import Plan, Precision

MODEL = "llama3.1-405b"
PLAN = "tp=4,cp=1,pp=16,vpp=8,mbs=1,recompute=none,layout=E|(t|)*126L,precision={p},param_gather={g}"


def _setup(precision: str, gather: str = "bf16", hw: str = "gb200-nvl72"):
    m, h = load_model(MODEL), load_hardware(hw)
    job = Job(gpus=256, global_batch=1536, seq_len=8192, precisions=[precision])
    plan = Plan.parse(PLAN.format(p=precision, g=gather)).canonical_for(m, h, job)
    return resolve_setup(m, h, job, plan)


def test_nvfp4_is_a_precision_and_never_a_default():
    assert Precision("nvfp4") is Precision.NVFP4
    assert Job(gpus=8, global_batch=8, seq_len=4096).precisions == ["bf16"]


def test_an_fp4_gemm_runs_at_the_fp4_peak_times_the_generation_ceiling():
    rates = rates_for(_setup("nvfp4"))
    # 405B's fc1 on TP 4 for one 8192-token micro-batch: 8192 x (2 x 53248 / 4) x 16384.
    g = Gemm("fc1", 8192, 2 * 53248 // 4, 16384)
    assert gemm_recipe(g, True, rates, fp4=True) == "nvfp4"
    assert rates.peak("nvfp4") == 10.0e15  # hw_specs/gb200-nvl72.yaml peak_flops.fp4
    assert rates.ceiling("nvfp4") == pytest.approx(0.604)  # hw_specs/efficiency/blackwell.yaml
    eff = min(1.0, 0.604 * shape_factor(g.m, g.n, g.k, rates.gemm_half_dim, rates.gemm_shape_exponent)
              * rates.gemm_scale * rates.sustained)
    by_hand = 2.0 * g.m * g.n * g.k / (10.0e15 * eff) + rates.kernel_overhead_s
    fwd, dgrad, _ = gemm_times(g, True, rates, fp4=True)
    assert fwd == pytest.approx(by_hand, rel=1e-9)
    fp8_fwd = gemm_times(g, True, rates)[0]  # the same GEMM in the hardware's FP8 recipe (MXFP8)
    assert fwd < 0.75 * fp8_fwd


def test_attention_router_and_head_gemms_stay_bf16_under_nvfp4():
    rates = rates_for(_setup("nvfp4"))
    scores = Gemm("attn_scores", 8192, 8192, 128, count=32, module="core_attn", fp8=False)
    assert gemm_recipe(scores, True, rates, fp4=True) == "bf16"


def test_nvfp4_casts_read_the_input_twice_for_the_hadamard_copy():
    g = Gemm("fc1", 1024, 4096, 2048)
    (cast,) = [k for k in _with_casts([g], Shard(tp=1, cp=1, ep=1, etp=1, mbs=1, seq=1024, fp8=True, fp4=True))
               if k.name.endswith("_cast")]
    assert cast.bytes_fwd == pytest.approx(1024 * 2048 * (2 * 2 + 2 * NVFP4))


def test_nvfp4_primary_weights_take_two_nvfp4_copies_and_keep_the_fp32_master():
    bf16 = costs_of(_setup("nvfp4")).constant(1).at(0)
    fp4 = costs_of(_setup("nvfp4", "fp4")).constant(1).at(0)
    assert FP4_WEIGHT_BYTES == pytest.approx(2 * (0.5 + 1 / 16))
    # Rank 1 holds decoder layers only: every weight byte scales by 1.125 / 2.
    assert float(fp4.weights) == pytest.approx(float(bf16.weights) * FP4_WEIGHT_BYTES / 2, rel=1e-6)
    assert float(fp4.optimizer) == pytest.approx(float(bf16.optimizer))  # fp32 master and moments stay
    assert float(fp4.gradients) == pytest.approx(float(bf16.gradients))


def test_nvfp4_steps_faster_than_fp8_than_bf16_on_gb200():
    steps = {p: float(costs_of(_setup(p)).step_s()[0]) for p in ("bf16", "fp8", "nvfp4")}
    assert steps["nvfp4"] < steps["fp8"] < steps["bf16"]


def test_nvfp4_is_refused_on_hopper_and_left_out_of_its_search():
    m, h = load_model(MODEL), load_hardware("h100")
    job = Job(gpus=256, global_batch=1536, seq_len=8192, precisions=["nvfp4"])
    rules = {v.rule for v in shared_violations(Plan.parse(PLAN.format(p="nvfp4", g="fp4")), m, job, hw=h).violations}
    assert "nvfp4-hardware" in rules
    both = Job(gpus=256, global_batch=1536, seq_len=8192, precisions=["bf16", "nvfp4"])
    hopper = lever_options(m, h, both, "megatron", Limits(), "te", ("fp32",))
    assert [str(p) for p in hopper["precision"]] == ["bf16"] and list(hopper["param_gather"]) == ["bf16"]
    gb200 = lever_options(m, load_hardware("gb200-nvl72"), both, "megatron", Limits(), "te", ("fp32",))
    assert "nvfp4" in [str(p) for p in gb200["precision"]] and "fp4" in gb200["param_gather"]


def test_fp4_gathers_need_nvfp4():
    m, h = load_model(MODEL), load_hardware("gb200-nvl72")
    job = Job(gpus=256, global_batch=1536, seq_len=8192, precisions=["bf16"])
    plan = Plan.parse(PLAN.format(p="bf16", g="fp4"))
    assert "param-gather-fp4" in {v.rule for v in shared_violations(plan, m, job, hw=h).violations}
