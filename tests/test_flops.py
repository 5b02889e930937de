"""FLOP counts: Megatron's model-FLOPs formula, Narayanan's closed form, and the kernel inventory."""

from __future__ import annotations

import pytest

from calibration_rows import gpt
from planner.cost.flops import (
    FusedAttention, Gemm, Shard, block_kernels, hardware_flops, megatron_model_flops, model_flops_of,
    model_shape, narayanan_flops,
)
from planner.specs.catalog import load_model
from planner.specs.model import ModelSpec


@pytest.mark.parametrize("hidden,layers,heads,seq,vocab", [(12288, 96, 96, 2048, 51200), (2048, 24, 16, 4096, 131072)])
def test_megatron_full_attention_matches_narayanan_72(hidden, layers, heads, seq, vocab):
    """Without recompute and counting the full attention square, Megatron's formula is
    72 B s l h^2 (1 + s/6h + V/12lh) for a GPT with a 4h GELU MLP."""
    ms = model_shape(gpt("g", hidden, layers, heads, vocab, seq))
    ours = megatron_model_flops(ms, 8, seq, attention="full")
    assert ours == pytest.approx(narayanan_flops(8, seq, layers, hidden, vocab, recompute=False), rel=1e-12)


def test_causal_counts_half_the_square():
    ms = model_shape(gpt("g", 4096, 32, 32, 51200, 8192))
    full = megatron_model_flops(ms, 1, 8192, attention="full")
    causal = megatron_model_flops(ms, 1, 8192, attention="causal")
    # attention scores + values: 6 * 2 * s * h per token per layer, halved
    assert full - causal == pytest.approx(6 * 8192 * 32 * (8192 * 4096), rel=1e-12)


def test_deepseek_v3_megatron_flops_per_token():
    """DeepSeek-V3 per-token model FLOPs: 6 x (active matmul parameters) plus attention over s/2
    keys, with the MTP layer and its head (Megatron's num_floating_point_operations, MLA branch).
    Cross-check against the parameter count: the MLA and MoE matmul weights per layer."""
    ms = model_shape(load_model("deepseek-v3"))
    seq = 4096
    per_token = megatron_model_flops(ms, 1, seq) / seq
    h = 7168
    mla = (1536 * (h + 128 * 192 + 1) + 512 * (h + 128 * 256 + 1) + h * 64 + 128 * 128 * h)
    attn = seq / 2 * 128 * (192 + 128)
    dense_ffn = 3 * h * 18432
    moe_ffn = 3 * h * (2048 * 8 + 2048)
    layers = 3 * (mla + attn + dense_ffn) + (58 + 1) * (mla + attn + moe_ffn)
    expected = 6 * (layers + (3 * h + 2 * h * h) + h * 129280 * 2)
    assert per_token == pytest.approx(expected, rel=1e-12)
    # about 6 x 37B active parameters plus attention: sanity band
    assert 2.3e11 < per_token < 3.3e11


def _step_model_flops_from_kernels(model, tp, ep, etp, cp, seq, mbs, implementation="te"):
    """Sum of every GPU's kernel model FLOPs for one micro-batch per data-parallel replica."""
    ms = model_shape(model)
    sh = Shard(tp=tp, cp=cp, ep=ep, etp=etp, mbs=mbs, seq=seq, implementation=implementation)
    total = 0.0
    for kind in ms.layer_kinds:
        total += model_flops_of(block_kernels(ms, sh, kind))
    total += model_flops_of(block_kernels(ms, sh, "head"))
    for _ in range(ms.mtp_layers):
        total += model_flops_of(block_kernels(ms, sh, "mtp"))
    # Every GPU of a TP x CP group computes its share; EP ranks split the tokens' experts.
    return total * tp * cp


@pytest.mark.parametrize("tp,cp", [(1, 1), (4, 1), (2, 2)])
def test_kernel_inventory_model_flops_match_megatron_dense(tp, cp):
    """The kernel inventory, counted once over TP/CP ranks, reproduces Megatron's formula for GQA
    + SwiGLU (Llama-like) models up to the router/norms Megatron leaves out."""
    llama = ModelSpec.model_validate({
        "name": "llama-like", "source": ["test"], "hidden_size": 4096, "num_layers": 4, "vocab_size": 128256,
        "attention": {"kind": "gqa", "num_heads": 32, "num_kv_heads": 8, "head_dim": 128},
        "ffn": {"activation": "swiglu", "hidden_size": 14336},
    })
    seq, mbs = 8192, 2
    ours = _step_model_flops_from_kernels(llama, tp, 1, 1, cp, seq, mbs)
    ref = megatron_model_flops(model_shape(llama), mbs, seq)
    assert ours == pytest.approx(ref, rel=2e-3)


def test_kernel_inventory_model_flops_match_megatron_moe_mla():
    """DeepSeek-V3 with EP: experts on each rank cover top_k/E of the routed work; summed over the
    EP group and counted with MLA down-projections once, the inventory matches Megatron's formula
    (the router GEMM is the only extra)."""
    model = load_model("deepseek-v3")
    ms = model_shape(model)
    seq, ep, tp = 4096, 8, 2
    sh = Shard(tp=tp, cp=1, ep=ep, etp=1, mbs=1, seq=seq)
    total = 0.0
    for kind in ms.layer_kinds:
        ks = block_kernels(ms, sh, kind)
        total += model_flops_of(tuple(k for k in ks if not (isinstance(k, Gemm) and k.name == "router")))
    total += model_flops_of(block_kernels(ms, sh, "head"))
    total += model_flops_of(tuple(k for k in block_kernels(ms, sh, "mtp") if not (isinstance(k, Gemm) and k.name == "router")))
    total *= tp  # each TP rank holds 1/tp of the tokens' routed work and its TP share of the rest
    assert total == pytest.approx(megatron_model_flops(ms, 1, seq), rel=2e-3)


def test_hardware_flops_with_full_recompute_match_narayanan_96():
    """With full recompute and the full attention square (unfused), executed FLOPs per step are
    Narayanan's 96 B s l h^2 (1 + s/6h + V/16lh)."""
    from planner.cost.compute import block_time
    from calibration_rows import a100, narayanan_setup, NARAYANAN_ROWS
    from planner.cost.rates import rates_for
    from planner.cost.compose import plan_shard

    setup = narayanan_setup(NARAYANAN_ROWS[0])
    ms, sh, r = model_shape(setup.model), plan_shard(setup), rates_for(setup)
    layer = block_time(ms, sh, "dense", r, "full")
    head = block_time(ms, sh, "head", r, None)
    per_mb = 24 * (layer.hw_flops_fwd + layer.hw_flops_bwd + layer.recompute_flops) + head.hw_flops_fwd + head.hw_flops_bwd
    ref = narayanan_flops(setup.plan.mbs, 2048, 24, 2304, 51200, recompute=True)
    assert per_mb == pytest.approx(ref, rel=0.01)
    assert a100().gpu.generation == "ampere"


def test_fused_attention_backward_is_two_and_a_half_forward():
    a = FusedAttention("x", 4096, 2048.5, 8, 128, 128, 2048.5)
    fwd, bwd = hardware_flops((a,))
    assert bwd == pytest.approx(2.5 * fwd)
    assert model_flops_of((a,)) == pytest.approx(3 * fwd)


def test_sliding_window_cuts_attention_flops():
    base = {
        "name": "swa", "source": ["test"], "hidden_size": 2880, "num_layers": 2, "vocab_size": 201088,
        "attention": {"kind": "gqa", "num_heads": 64, "num_kv_heads": 8, "head_dim": 64,
                      "sliding_window": 128, "sliding_window_every": 2},
        "ffn": {"activation": "swiglu", "hidden_size": 2880},
    }
    model = ModelSpec.model_validate(base)
    ms = model_shape(model)
    assert ms.layer_kinds == ("dense_swa", "dense")
    sh = Shard(tp=1, cp=1, ep=1, etp=1, mbs=1, seq=8192)
    swa = [k for k in block_kernels(ms, sh, "dense_swa") if isinstance(k, FusedAttention)][0]
    full = [k for k in block_kernels(ms, sh, "dense") if isinstance(k, FusedAttention)][0]
    assert swa.keys_per_query < 128 < full.keys_per_query
