"""Framework behaviours that cost one model family more than its FLOPs say (gpt-oss-120b on
Megatron-Core with Transformer Engine): RoPE falls back to the unfused path where YaRN's
concentration factor is not 1, the clamped gated unit runs its clamps eagerly, and fc2's expert bias
is added per expert from Python (unless the experts run through TE's operation fuser). Each is
asserted on the kernel inventory, and a model without the feature keeps none of them."""

from __future__ import annotations

import math

import pytest

from planner.cost.flops import ROPE_FWD_BYTES, Shard, Stream, block_kernels, model_shape
from planner.specs.catalog import load_model


def _streams(model: str, dispatcher: str = "alltoall", op_fuser: bool = False) -> dict[str, Stream]:
    ms = model_shape(load_model(model))
    sh = Shard(tp=1, cp=1, ep=8, etp=1, mbs=1, seq=4096, dispatcher=dispatcher, expert_op_fuser=op_fuser)
    kind = next(k for k in ms.layer_kinds if k.startswith("moe"))
    return {k.name: k for k in block_kernels(ms, sh, kind) if isinstance(k, Stream)}


def test_yarn_concentration_follows_megatron():
    assert load_model("gpt-oss-120b").rope.yarn_concentration == pytest.approx(0.1 * math.log(32) + 1)  # 1.347
    assert load_model("deepseek-v3").rope.yarn_concentration == 1.0  # mscale = mscale_all_dim = 1
    assert load_model("llama3.1-8b").rope.yarn_concentration == 1.0  # not YaRN


def test_gpt_oss_pays_unfused_rope_clamps_and_the_expert_bias_loop():
    s = _streams("gpt-oss-120b")
    ms = model_shape(load_model("gpt-oss-120b"))
    e = 4096 * (ms.heads + ms.kv_heads) * ms.rope_dim  # q and k elements of one sequence
    assert s["rope"].bytes_fwd == pytest.approx(e * ROPE_FWD_BYTES)
    assert "experts.act_clamp" in s and s["experts.act_clamp"].module == "moe_act"  # recomputed with moe_act
    bf16, fp32 = s["experts.fc2_bias"], _streams("gpt-oss-120b", "hybridep")["experts.fc2_bias"]
    assert bf16.bytes_fwd / bf16.bytes_bwd == pytest.approx(16 / 12)
    assert fp32.bytes_fwd / bf16.bytes_fwd == pytest.approx(28 / 16)  # HybridEP's float32 probabilities
    assert bf16.kernels == 2 * (ms.num_experts // 8) + 2


def test_models_without_the_features_keep_the_fused_paths():
    s = _streams("qwen3-30b-a3b")
    assert "experts.act_clamp" not in s and "experts.fc2_bias" not in s
    ms = model_shape(load_model("qwen3-30b-a3b"))
    assert s["rope"].bytes_fwd == pytest.approx(4096 * (ms.heads + ms.kv_heads) * ms.rope_dim * 4)  # one pass


def test_experts_through_te_op_fuser_skip_the_eager_fallbacks():
    """--use-transformer-engine-op-fuser with --moe-grouped-gemm (Megatron-Bridge's fused grouped MLP
    recipes): the bias is packed on the device and the gated unit fused, so neither fallback runs;
    the reader takes it from the flags."""
    from planner.launchers.megatron.read import assumptions_from_flags

    s = _streams("gpt-oss-120b", op_fuser=True)
    assert "experts.act_clamp" not in s and "experts.fc2_bias" not in s
    assert "rope" in s  # the attention's RoPE is not the experts' business
    flags = {"use_transformer_engine_op_fuser": True, "moe_grouped_gemm": True}
    assert assumptions_from_flags(flags)["expert_op_fuser"] is True
    assert "expert_op_fuser" not in assumptions_from_flags({"use_transformer_engine_op_fuser": True})
