"""Activation inventory: the tensors each sub-layer saves for backward, in bytes per micro-batch
on one GPU.

Each saved tensor is an :class:`ActTerm` tagged with the recompute module that drops it
(Megatron-Core's ``--recompute-modules`` names) so selective recompute is a filter, not a formula.
Shapes follow what Megatron-Core saves with the Transformer Engine layer spec (TE LayerNormLinear
saves its input and normalized output, TE Linear its input, cuDNN/flash attention Q, K, V after
RoPE, the output and an fp32 log-sum-exp; the alltoall MoE dispatcher's unpermute keeps the expert
output to form the routing-probability gradient), and, for the ``megatron-local`` profile, the
local spec's unfused attention with an fp32 softmax. The 2022 GPT path reproduces Korthikanti et
al. 2022 (34·s·b·h + 5·a·s²·b per layer without parallelism).

Under sequence parallelism every [tokens, h] tensor is split by TP, and the TP-region tensors
(heads, FFN width) are split by TP anyway, so the whole layer divides by TP; without SP the
[tokens, h] tensors are replicated on every TP rank (Korthikanti eq. 2). CP divides the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from planner.cost.arrays import Num, hashable, minimum, where
from planner.cost.flops import NVFP4, Shard, op_sac_shares

if TYPE_CHECKING:
    from planner.specs.model import ModelSpec

BF16 = 2
FP32 = 4

# Which modules each recompute option drops. "layer" terms are dropped only by full recompute;
# "input" terms (the layer input) are what full recompute keeps.
SELECTIVE_DROPS = {
    "core_attn": {"core_attn"},
    "mla_up_proj": {"mla_up_proj"},
    "layernorm": {"layernorm"},
    "moe_act": {"moe_act"},
    "mlp": {"mlp", "mlp_act"},
    "moe": {"moe", "moe_act", "router", "moe_out"},
    "shared_experts": {"shared_experts"},
}


@dataclass(frozen=True)
class ActTerm:
    """One saved tensor of one layer for one micro-batch on one GPU."""

    name: str
    bytes: Num
    module: str
    """The recompute module that drops it: 'input' (kept even by full recompute), 'layer'
    (dropped only by full recompute), or a Megatron selective-recompute module name."""
    linear_input: bool = False
    """Saved as the input of a linear layer: stored in FP8 when the layer runs in FP8 (TE)."""


def local_kv_heads(a, tp: Num) -> Num:
    """K/V heads on one TP rank: Megatron and torchtitan replicate them when TP exceeds them."""
    return a.num_kv_heads / minimum(tp, a.num_kv_heads)


def _split(sh: Shard):
    """(divisor of [tokens, h] tensors, divisor of TP-region tensors). Fields may be numpy arrays
    (the search evaluates many degrees at once through the same formulas)."""
    return where(sh.sp, sh.tp, 1), sh.tp


def attention_terms(model: ModelSpec, sh: Shard) -> list[ActTerm]:
    """Input norm, projections and core attention of one layer."""
    h = model.hidden_size
    a = model.attention
    seq_div, tp = _split(sh)
    T = sh.tokens
    nh = a.num_heads / tp
    terms = [
        # The residual stream entering the layer: the input norm keeps it, and it is all that
        # full recompute keeps (Megatron's checkpointed layer input).
        ActTerm("attn.norm_input", BF16 * T * h / seq_div, "input"),
    ]
    dropout_mask = model.hidden_dropout > 0
    if a.kind == "mla":
        # MLA (Megatron MultiLatentAttention, TE spec): a separate TENorm, then q_down/kv_down
        # (TELinear) read the normalized input; q_up/kv_up are TELayerNormColumnParallelLinear
        # fusing the latent norms (they save the latent and its normalized copy).
        q_lat = a.q_lora_rank or 0
        terms += [
            ActTerm("attn.norm_output", BF16 * T * h / seq_div, "layernorm", linear_input=True),
            ActTerm("attn.q_latent", BF16 * T * q_lat, "layer"),
            ActTerm("attn.q_latent_norm", BF16 * T * q_lat, "mla_up_proj", linear_input=True),
            ActTerm("attn.kv_latent", BF16 * T * a.kv_lora_rank, "layer"),
            ActTerm("attn.kv_latent_norm", BF16 * T * a.kv_lora_rank, "mla_up_proj", linear_input=True),
            ActTerm("attn.q", BF16 * T * nh * a.qk_head_dim, "mla_up_proj"),
            ActTerm("attn.k", BF16 * T * nh * a.qk_head_dim, "mla_up_proj"),
            ActTerm("attn.v", BF16 * T * nh * a.v_head_dim, "mla_up_proj"),
        ]
        v_dim = a.v_head_dim
    else:
        # GQA with TE: the input norm is fused into linear_qkv (TELayerNormColumnParallelLinear),
        # which saves its input (counted above) and the normalized output; Q, K, V after RoPE are
        # saved by the attention kernel. K/V heads are replicated when tp exceeds them.
        kv_heads = local_kv_heads(a, tp)
        fused_norm = sh.implementation == "te"
        terms += [
            ActTerm("attn.norm_output", BF16 * T * h / seq_div, "layer" if fused_norm else "layernorm", linear_input=True),
            ActTerm("attn.q", BF16 * T * nh * a.head_dim, "layer"),
        ]
        if sh.implementation == "megatron-local":
            terms += local_kv_terms(sh, nh, kv_heads, a.head_dim)
        else:
            terms.append(ActTerm("attn.kv", 2 * BF16 * T * kv_heads * a.head_dim, "layer"))
        v_dim = a.head_dim
    terms += core_attention_terms(model, sh, nh)
    # The attention output feeds the output projection (saved once, shared with the kernel).
    terms.append(ActTerm("attn.output", BF16 * T * nh * v_dim, "layer", linear_input=True))
    if model.post_norms:
        # Gemma's post-attention norm keeps its input, the output projection's result.
        terms.append(ActTerm("attn.post_norm_input", BF16 * T * h / seq_div, "layer"))
    if dropout_mask:
        terms.append(ActTerm("attn.dropout_mask", 1 * T * h / seq_div, "layer"))
    return terms


def local_kv_terms(sh: Shard, nh: Num, kv_heads: Num, head_dim: int) -> list[ActTerm]:
    """K and V as Megatron-Core 0.19's local ``DotProductAttention`` keeps them (measured on an
    H200, results/validation/gpu-memory.md).

    GQA: key and value are ``repeat_interleave``-d to all query heads before the two batched
    matmuls, which save the repeated copies: 2 x nh heads, not 2 x kv_heads. MHA: the key after
    RoPE is a new tensor, but the value stays a strided view of ``linear_qkv``'s output, so the
    probs @ V matmul keeps that whole [tokens, (nq + 2 nkv) d] output alive. The unfused RoPE keeps
    its cos and sin tables ([s, 1, 1, d] bf16, for Q and for K)."""
    T = sh.tokens
    # Elementwise over a batch of plans: GQA plans (nh > kv heads) keep the repeated copies, MHA
    # plans the key and the projection output; each term is zero where it does not apply.
    gqa = nh > kv_heads
    kv = [ActTerm("attn.k_repeated", where(gqa, BF16 * T * nh * head_dim, 0.0), "layer"),
          ActTerm("attn.v_repeated", where(gqa, BF16 * T * nh * head_dim, 0.0), "layer"),
          ActTerm("attn.k", where(gqa, 0.0, BF16 * T * nh * head_dim), "layer"),
          ActTerm("attn.qkv_projection", where(gqa, 0.0, BF16 * T * (nh + 2 * kv_heads) * head_dim), "layer")]
    return kv + [ActTerm("attn.rope_cos_sin", 2 * 2 * BF16 * sh.local_seq * head_dim, "layer")]


def core_attention_terms(model: ModelSpec, sh: Shard, nh: Num) -> list[ActTerm]:
    """What the attention kernel keeps beyond Q, K, V and its output."""
    if sh.implementation == "te":
        # Flash / cuDNN fused attention: only the fp32 log-sum-exp per head and query.
        return [ActTerm("attn.softmax_lse", FP32 * sh.tokens * nh, "core_attn")]
    # Unfused attention. Korthikanti et al. 2022 (fp16 softmax): softmax output 2·a·s²·b, dropout
    # mask a·s²·b and dropout output 2·a·s²·b. The megatron-local profile computes the softmax in
    # fp32 (attention_softmax_in_fp32, no fused kernel): torch's softmax keeps its fp32 output and
    # the bf16 copy feeds the probs @ V matmul.
    s2 = sh.mbs * nh * sh.local_seq * sh.local_seq
    p = model.attention_dropout
    terms = []
    if sh.implementation == "megatron-local":
        terms.append(ActTerm("attn.softmax_fp32", FP32 * s2, "core_attn"))
        terms.append(ActTerm("attn.probs", BF16 * s2, "core_attn"))
        # Megatron-Core 0.19 builds the causal mask anew in every layer (get_default_causal_mask is
        # not cached) and masked_fill_ keeps it: one bool per (query, key) pair of a sequence.
        terms.append(ActTerm("attn.causal_mask", 1 * sh.local_seq * sh.local_seq, "core_attn"))
    else:  # megatron-local-fused-softmax: the fused kernel keeps its 16-bit output
        terms.append(ActTerm("attn.softmax", BF16 * s2, "core_attn"))
    if p > 0:
        terms.append(ActTerm("attn.probs_dropout_mask", 1 * s2, "core_attn"))
        terms.append(ActTerm("attn.probs_dropout_out", BF16 * s2, "core_attn"))
    return terms


def dense_mlp_terms(model: ModelSpec, sh: Shard) -> list[ActTerm]:
    h, f = model.hidden_size, model.ffn.hidden_size
    seq_div, tp = _split(sh)
    T = sh.tokens
    gated = model.ffn.gated
    terms = [
        ActTerm("mlp.norm_input", BF16 * T * h / seq_div, "layer"),
        # TE fuses pre_mlp_layernorm into fc1 (LayerNormLinear): its normalized output is saved.
        ActTerm("mlp.norm_output", BF16 * T * h / seq_div, "mlp", linear_input=True),
        ActTerm("mlp.fc1_output", BF16 * T * f * (2 if gated else 1) / tp, "mlp"),
        ActTerm("mlp.act_output", BF16 * T * f / tp, "mlp_act", linear_input=True),
    ]
    if model.hidden_dropout > 0:
        terms.append(ActTerm("mlp.dropout_mask", 1 * T * h / seq_div, "layer"))
    return terms


def op_sac_terms(model: ModelSpec, sh: Shard) -> tuple[ActTerm, ...]:
    """What torchtitan's per-op selective activation checkpointing (recompute='op') keeps of one
    dense decoder layer between its forward and its backward: the block input, and the outputs
    of the ops its policy saves (torchtitan parallelize_llama.py ``_save_list``): the matmuls
    except every second one of the block (:func:`planner.cost.flops.op_sac_shares`: wq, wv, w1,
    w2 of a SwiGLU block), SDPA's output and log-sum-exp, and under TP the reduce-scatters after
    wo and w2. A matmul output is the whole micro-batch's (w2's partial sums before TP's
    reduce-scatter too). Everything else is recomputed. The amax scalars FP8 saves are left out."""
    h, a, T = model.hidden_size, model.attention, sh.tokens
    if a.kind == "mla":  # planner.rules refuses recompute=op there (recompute-op-layers)
        raise ValueError("torchtitan's per-op selective AC is modeled on GQA/MHA layers only")
    seq_div, tp = _split(sh)
    nh = a.num_heads / tp
    kvh = local_kv_heads(a, tp)
    widths = {"wq": ("attn", nh * a.head_dim), "wk": ("attn", kvh * a.head_dim), "wv": ("attn", kvh * a.head_dim),
              "wo": ("attn", h), "w1": ("mlp", model.ffn.hidden_size / tp), "w3": ("mlp", model.ffn.hidden_size / tp),
              "w2": ("mlp", h)}
    scattered = where(tp > 1, BF16 * T * h / seq_div, 0.0)
    terms = [ActTerm("attn.norm_input", BF16 * T * h / seq_div, "input"),
             ActTerm("attn.sdpa_output", BF16 * T * nh * a.head_dim, "op"),
             ActTerm("attn.sdpa_lse", FP32 * T * nh, "op"),
             ActTerm("attn.wo_reduce_scatter", scattered, "op"),
             ActTerm("mlp.w2_reduce_scatter", scattered, "op")]
    for name, share in op_sac_shares(model.ffn.gated).items():
        if not share:
            block, width = widths[name]
            terms.append(ActTerm(f"{block}.{name}_output", BF16 * T * width, "op"))
    return tuple(terms)


def expert_tokens(model: ModelSpec, sh: Shard) -> Num:
    """Token copies one GPU's experts process per micro-batch on the heaviest EP rank.

    Each GPU of the expert grid originates tokens/tp * top_k assignments (sequence parallel);
    balanced routing spreads them evenly over the EP ranks, and an expert-TP group of etp GPUs
    all process its experts' tokens (each a slice of the FFN width)."""
    m = model.moe
    assert m is not None
    origin = sh.tokens / where(sh.sp, sh.tp, 1)
    return origin * m.top_k * sh.etp * sh.imbalance


def moe_terms(model: ModelSpec, sh: Shard) -> list[ActTerm]:
    h = model.hidden_size
    m = model.moe
    assert m is not None
    seq_div, tp = _split(sh)
    T = sh.tokens
    Tk = expert_tokens(model, sh)
    fe = m.expert_hidden_size / sh.etp
    gated = model.ffn.gated
    terms = [
        ActTerm("moe.norm_input", BF16 * T * h / seq_div, "layer"),
        # MoE cannot fuse its norm into a linear: a separate TENorm whose output the router,
        # the dispatcher and the shared experts read.
        ActTerm("moe.norm_output", BF16 * T * h / seq_div, "layernorm", linear_input=True),
        # Router (Megatron TopKRouter, fp32 router dtype): fp32 logits and scores over all experts
        # and the boolean routing map, for the tokens this GPU routes.
        ActTerm("moe.router", (FP32 + FP32 + 1) * (T / seq_div) * m.num_experts, "router"),
        ActTerm("moe.fc1_input", BF16 * Tk * h, "moe", linear_input=True),
        ActTerm("moe.fc1_output", BF16 * Tk * fe * (2 if gated else 1), "moe"),
        ActTerm("moe.act_output", BF16 * Tk * fe, "moe_act", linear_input=True),
    ]
    if not sh.memory_efficient_permutation:
        # The unpermute multiplies expert outputs by routing probabilities; its backward needs
        # the expert outputs, kept on the source rank (balanced: tokens/tp * top_k).
        origin = T / seq_div
        terms.append(ActTerm("moe.expert_output", BF16 * origin * m.top_k * h, "moe_out"))
    if m.shared_hidden:
        fs = m.shared_hidden / tp
        terms += [
            ActTerm("moe.shared_fc1_output", BF16 * T * fs * (2 if gated else 1), "shared_experts"),
            ActTerm("moe.shared_act_output", BF16 * T * fs, "shared_experts", linear_input=True),
        ]
    if model.hidden_dropout > 0:
        terms.append(ActTerm("moe.dropout_mask", 1 * T * h / seq_div, "layer"))
    return terms


def post_mlp_terms(model: ModelSpec, sh: Shard) -> list[ActTerm]:
    """Gemma's post-MLP norm keeps its input (the MLP's or MoE block's output)."""
    if not model.post_norms:
        return []
    seq_div, _ = _split(sh)
    return [ActTerm("mlp.post_norm_input", BF16 * sh.tokens * model.hidden_size / seq_div, "layer")]


def layer_terms(model: ModelSpec, sh: Shard, kind: str) -> tuple[ActTerm, ...]:
    """Every tensor one decoder layer of ``kind`` ('dense' or 'moe') saves, no recompute."""
    if hashable(sh):
        return _layer_terms_cached(model, sh, kind)
    return _layer_terms(model, sh, kind)


def _layer_terms(model, sh, kind):
    ffn = moe_terms(model, sh) if kind == "moe" else dense_mlp_terms(model, sh)
    terms = tuple(attention_terms(model, sh) + ffn + post_mlp_terms(model, sh))
    return torchtitan_terms(model, sh, terms) if torchtitan_blocks(sh) else terms


def torchtitan_blocks(sh: Shard) -> bool:
    """The decoder blocks are torchtitan's (DTensor TP, torchao FP8), not Megatron-Core's with TE:
    the loss kind tells (planner.cost.setup.Assumptions.torchtitan)."""
    return sh.cross_entropy in ("torch", "torch_compiled")


# The inputs of the column-parallel linears torchtitan's block keeps whole on every TP rank: its
# attention and feed-forward modules are prepared with desired_input_layouts=(Replicate(),) from
# the sequence-sharded norm output (torchtitan models/llama3/parallelize_llama.py apply_tp), so wq,
# wk, wv (and w1, w3) run F.linear on the all-gathered [tokens, h] tensor and autograd saves that
# tensor for their weight gradients. Megatron/TE saves the local shard and all-gathers it again in
# the backward. torch.compile does not change it: the min-cut partitioner recomputes only ops in
# its allowlist (torch/_functorch/partitioners.py should_ban_recomputation,
# ban_recompute_not_in_allowlist), which holds no collective, so the gathered tensor is saved.
GATHERED_LINEAR_INPUTS = {"attn.norm_output", "mlp.norm_output"}


def torchtitan_terms(model: ModelSpec, sh: Shard, terms: tuple[ActTerm, ...]) -> tuple[ActTerm, ...]:
    """Megatron's inventory of one layer turned into what torchtitan's block keeps without
    activation checkpointing: the column-parallel linears' input whole per TP rank
    (:data:`GATHERED_LINEAR_INPUTS`), and every linear input in bf16 under FP8: torchao's
    Float8Linear saves its high-precision input and casts again in the backward (torchao
    float8/float8_linear.py matmul_with_hp_or_float8_args.forward, save_for_backward(input_hp,
    weight_hp_t)), where TE keeps the FP8 copy."""
    whole = BF16 * sh.tokens * model.hidden_size
    return tuple(ActTerm(t.name, whole if t.name in GATHERED_LINEAR_INPUTS else t.bytes, t.module)
                 for t in terms)


_layer_terms_cached = lru_cache(maxsize=4096)(_layer_terms)


def mtp_terms(model: ModelSpec, sh: Shard, vocab_div: int) -> tuple[ActTerm, ...]:
    """An MTP module: its two input norms and the 2h->h projection input, a decoder layer, and
    its own output head and loss (DeepSeek-V3 sec. 2.2; Megatron MultiTokenPredictionLayer)."""
    h = model.hidden_size
    seq_div, _ = _split(sh)
    T = sh.tokens
    extra = (
        ActTerm("mtp.norm_inputs", 2 * BF16 * T * h / seq_div, "input"),
        ActTerm("mtp.eh_proj_input", 2 * BF16 * T * h / seq_div, "layer", linear_input=True),
    )
    return extra + layer_terms(model, sh, model.mtp_kind) + head_terms(model, sh, vocab_div)


def head_terms(model: ModelSpec, sh: Shard, vocab_div: int) -> tuple[ActTerm, ...]:
    """Final norm, output projection and cross-entropy on the last stage.

    Megatron's vocab-parallel cross-entropy keeps the fp32 softmax of the logits for its backward
    (megatron/core/tensor_parallel/cross_entropy.py); the output layer keeps its input."""
    h = model.hidden_size
    seq_div, _ = _split(sh)
    T = sh.tokens
    # torch.compile'd cross_entropy(pred.float()) keeps the bf16 logits, not an fp32 softmax
    # (measured: tests/fixtures/h200_op_sac_memory.json, 'loss').
    # Under torchtitan's loss parallel (TP > 1: the logits sharded over the vocabulary) the compiled
    # loss keeps an fp32 tensor like the eager one (measured: tests/fixtures/
    # h100_loss_parallel_memory.json; planner.cost.pieces.head_transients).
    compiled = sh.cross_entropy == "torch_compiled"
    kept_per_logit = where(vocab_div == 1, BF16, FP32) if compiled else FP32
    # torchtitan's output linear is ColwiseParallel(input_layouts=Shard(1)) (parallelize_llama.py
    # apply_tp): like wq or w1 it all-gathers the sequence-sharded norm output and F.linear saves
    # the whole [tokens, h] tensor on every TP rank, in bf16 (its float8 conversion skips
    # "output": torchtitan float8.py module_filter_fn).
    norm_output = (ActTerm("head.norm_output", BF16 * T * h, "layer") if torchtitan_blocks(sh) else
                   ActTerm("head.norm_output", BF16 * T * h / seq_div, "layer", linear_input=True))
    terms: tuple[ActTerm, ...] = (
        ActTerm("head.norm_input", BF16 * T * h / seq_div, "input"),
        norm_output,
        ActTerm("head.logits" if compiled else "head.softmax_fp32", kept_per_logit * T * model.vocab_size / vocab_div,
                "layer"),
    )
    if model.logit_softcap is not None:
        # cap * tanh(logits / cap): tanh keeps its output for the backward.
        terms += (ActTerm("head.softcap_tanh", BF16 * T * model.vocab_size / vocab_div, "layer"),)
    return terms


def embedding_terms(model: ModelSpec, sh: Shard) -> tuple[ActTerm, ...]:
    """The embedding keeps only the token ids (its output is the first layer's input)."""
    seq_div, _ = _split(sh)
    terms = [ActTerm("embedding.ids", 8 * sh.tokens / seq_div, "input")]
    if model.hidden_dropout > 0:
        terms.append(ActTerm("embedding.dropout_mask", 1 * sh.tokens * model.hidden_size / seq_div, "input"))
    return tuple(terms)


def dropped_modules(kind: str, modules: tuple[str, ...]) -> set[str]:
    """Inventory tags a selective-recompute module list drops."""
    out: set[str] = set()
    for m in modules:
        out |= SELECTIVE_DROPS.get(m, set())
    return out


def kept_bytes(terms: tuple[ActTerm, ...], *, full: bool, drop: frozenset[str] | set[str], fp8: bool,
               fp4: bool = False) -> Num:
    """Bytes kept after recompute drops, with FP8 storage of linear inputs (1 byte per element
    plus block scales: TE keeps the FP8 copy it made for the GEMM), or NVFP4 storage where ``fp4``
    (TE keeps the column-wise NVFP4 copy the weight-gradient GEMM reads: half a byte per element
    plus one E4M3 scale per 16)."""
    total: Num = 0.0
    for t in terms:
        if full and t.module != "input":
            continue
        if t.module in drop:
            continue
        b = t.bytes
        if fp8 and fp4 and t.linear_input:
            b = b / 2 * NVFP4
        elif fp8 and t.linear_input:
            b = b / 2 * (1 + 1 / 32)
        total += b
    return total
