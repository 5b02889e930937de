"""What one GPU computes for one micro-batch: an inventory of kernels per layer kind.

Each pipeline chunk is a sum of *blocks* (a decoder layer of one kind, the embedding, the output
head and loss, an MTP module); each block is a tuple of kernels of three classes:

- :class:`Gemm`: a matrix multiply (M tokens x K -> N features), FLOPs 2*M*N*K per pass; the
  backward runs the data-gradient and the weight-gradient GEMMs of the same size (Narayanan et al.
  2021, appendix: "each GEMM is performed 3 times");
- :class:`FusedAttention`: flash-style attention (FlashAttention / cuDNN fused attention), forward
  2*q*keys*(d_qk + d_v) per head; the kernel's backward recomputes QK^T and runs 2.5x the forward
  FLOPs (Dao 2023, FlashAttention-2, sec. 3), while model FLOPs count it as 2x like any GEMM;
- :class:`Stream`: a memory-bound kernel (norm, residual/dropout, activation, RoPE, softmax,
  permute, cross-entropy, FP8 casts) costed by the bytes it reads and writes.

Shapes follow Megatron-Core's sharding: sequence parallelism whenever tp > 1 (norms and residuals
on s/tp tokens, an all-gather in front of each column-parallel GEMM), column/row-parallel linears
split by tp, MLA down-projections duplicated on every TP rank, experts split by ep (grouped GEMM,
one per local expert) and etp, the output head vocabulary-parallel. Communication is not here
(see :mod:`planner.cost.comm`); neither are rates (see :mod:`planner.cost.compute`).

Every kernel carries the Megatron ``--recompute-modules`` name it belongs to, so selective
recompute repeats exactly the kernels Megatron repeats.

Model FLOPs (what Megatron logs and what MFU counts) come from :func:`megatron_model_flops`, an
implementation of ``num_floating_point_operations`` in megatron/training/training.py; the kernel
inventory gives hardware FLOPs (what the GPU executes, with recompute and duplicated work).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from planner.cost.arrays import Flag, as_int, hashable, maximum, round_int, where

if TYPE_CHECKING:
    from planner.specs.model import ModelSpec

# Bytes per element.
BF16 = 2
FP32 = 4
FP8 = 1
# NVFP4 (Transformer Engine docs/features/low_precision_training/nvfp4): a 4-bit E2M1 value plus
# one FP8 E4M3 scale per 16 elements (the one FP32 scale per tensor is negligible).
NVFP4 = 0.5 + 1 / 16

# Backward bytes of an element-wise kernel relative to its forward: it reads the saved input and the
# incoming gradient and writes the input gradient (plus weight-gradient partials for norms).
STREAM_BWD_FACTOR = 1.5
# Cross-entropy over the vocabulary-parallel logits, unfused (megatron/core/tensor_parallel/
# cross_entropy.py): cast the bf16 logits to fp32 (2+4), max (4), subtract in place (4+4), exp in
# place (4+4), sum (4), divide in place into the saved softmax (4+4): 38 bytes per logit; the
# backward scales the saved softmax (4+4) and casts the gradient to bf16 (4+2): 14.
CE_FWD_BYTES_PER_LOGIT = 38
CE_BWD_BYTES_PER_LOGIT = 14
# Router of an MoE layer: fp32 scores over the experts (--moe-router-dtype fp32), sigmoid/softmax,
# top-k, score normalization and the aux-loss statistics: about five fp32 passes over T x E.
ROUTER_PASSES = 5

# ---- Megatron-Core's local layer spec without Transformer Engine or Apex ('megatron-local') ----
# Every number below follows what megatron-core 0.19.2 runs there (eager PyTorch 2.11) and was
# checked against torch.profiler's kernel list of one training step on an H200
# (results/validation/gpu-raw/profile/: gqa-s4k-b1-none, mha-s2k-b2-none, moe-s2k-b4-none,
# moe-s4k-b1-none; results/validation/gpu-memory.md).
#
# Unfused attention (DotProductAttention, masked_softmax_fusion off: FusedScaleMaskSoftmax's
# forward_torch_softmax), bytes per score element (heads x s x s per sequence):
#   forward: .float() (read bf16 2, write fp32 4; a dtype-converting copy), masked_fill_ with the
#   broadcast causal mask in place (4 + 4), softmax (4 + 4), .bfloat16() (4 + 2);
#   backward: the .bfloat16()'s gradient cast up (2 + 4), softmax backward (read gradient and output,
#   write: 12), one more fp32 multiply over the score gradient (12: a BinaryFunctor<float>
#   MulFunctor kernel scaling with heads x s^2, once per layer and micro-batch in every profile; the
#   kernel name does not say which op issues it), masked_fill's gradient
#   grad.masked_fill(mask, 0) = a clone (4 + 4, a device copy) and masked_fill_ (4 + 4), the
#   .float()'s gradient cast down (4 + 2).
# Profiled per score element on the H200: forward 11.3 ps (4096 keys), backward 12.8-14.6 ps.
TORCH_SOFTMAX_FWD_BYTES = {"to_fp32": 6, "mask_fill": 8, "softmax": 8, "to_bf16": 6}
TORCH_SOFTMAX_BWD_BYTES = {"to_fp32": 6, "mask_fill": 16, "softmax": 24, "to_bf16": 6}
# torch's softmax runs one warp per row up to 2048 fp32 elements (softmax_warp_forward) and a
# block per row beyond (cunn_SoftMaxForward): profiled 3.2 TB/s at 2048 keys, 2.2 TB/s at 4096.
TORCH_WARP_SOFTMAX_MAX = 2048
# megatron-core 0.19.2's get_default_causal_mask builds the s x s mask per layer and micro-batch:
# torch.ones fp32 (4), triu (4 + 4), .bool() (4 + 1).
CAUSAL_MASK_BYTES = 17
# Unfused rotary embedding (apply_rope_fusion off: _apply_rotary_pos_emb_bshd) per rotated element:
# t * cos (2 + 2), -x2 of half the elements (1 + 1), cat (2 + 2), * sin (2 + 2), add (4 + 2),
# the final cat (2 + 2): 24 bytes; the backward multiplies, negates, concatenates and adds: 20.
# Per tensor (q, k): 6 kernels plus cos/sin of the position table (6 small kernels); 5 backward.
ROPE_FWD_BYTES, ROPE_BWD_BYTES = 24, 20
ROPE_KERNELS_FWD, ROPE_KERNELS_BWD = 12, 5
# Without gradient-accumulation fusion (it needs Apex or TE) the weight-gradient GEMM writes a bf16
# gradient and Megatron's DDP hook adds it into the fp32 main gradient: read 4 + 2, write 4, one
# mixed-dtype kernel per weight and micro-batch (profiled: CUDAFunctor_add<float>, 54 calls per
# step for 27 weights x 2 micro-batches, 2.7 TB/s).
GRAD_ACCUM_BYTES_PER_PARAM = 10
# Routing on the local spec (TopKRouter, fp32 router, aux-loss statistics and tracker, the
# alltoall dispatcher's preprocessing): small kernels over T x E, about 20 forward and 15 backward
# (estimate from the code; the inventory counts 74-79% of the profiled launches overall).
LOCAL_ROUTER_KERNELS = (20, 15)
# Unfused permutation (moe_permute_fusion off): the routing map transposed, two masked_selects
# (token indices and probabilities: each reads its output size back on the host) and the token
# index_select; backward: index_add and masked_scatter. Unpermutation: zeros + scatter_add;
# backward: a gather (kernel counts estimated from the code).
LOCAL_PERMUTE_KERNELS = (9, 5)
LOCAL_UNPERMUTE_KERNELS = (2, 1)


@dataclass(frozen=True)
class Gemm:
    """One GEMM (or ``count`` identical ones, e.g. the local experts of a grouped GEMM)."""

    name: str
    m: int
    """Rows: tokens (or query positions for the batched attention GEMMs)."""
    n: int
    """Output features (the weight's columns on this GPU)."""
    k: int
    """Reduction dimension."""
    count: int = 1
    module: str = ""
    """Megatron recompute module this GEMM belongs to ('' when only full recompute repeats it)."""
    fp8: bool = True
    """Runs in the FP8 recipe when the plan's precision is fp8 (Transformer Engine quantizes every
    linear layer; attention, router, embedding and output head stay in BF16)."""
    model_fraction: float = 1.0
    """Share of these FLOPs that model FLOPs count: 1/tp for GEMMs every TP rank duplicates,
    1/imbalance for experts on the most loaded rank, 1/2 for unfused causal attention scores."""
    issue: str = "grouped"
    """How ``count`` > 1 matrices are issued: 'grouped' (Transformer Engine's GroupedLinear: one
    cuBLAS call per expert spread over several streams), 'batched' (one strided-batched kernel over
    all of them: torch.bmm/baddbmm of the unfused attention), 'sequential' (one call per matrix, one
    after another from a Python loop: Megatron-Core's SequentialMLP)."""
    linear_calls: int = 0
    """Python-level Megatron linear-layer calls this entry stands for in each pass (the local
    spec's host cost, :mod:`planner.cost.compute`); 0 where the host cost is not modeled per call."""
    fused_wgrad: bool = True
    """The weight-gradient GEMM accumulates into the fp32 main gradient (gradient-accumulation
    fusion, Apex/Transformer Engine). False: it writes a bf16 gradient that Megatron's DDP hook
    adds to the main gradient afterwards (a separate element-wise kernel, see ``grad_accum``)."""
    linears: int = 1
    """torchtitan nn.Linear modules this entry stands for (wq, wk, wv for 'qkv'; w1, w3 for a
    gated 'fc1'): each casts the shared input itself under torchao's FP8 (:func:`_torchao_rowwise_casts`)."""
    op_sac_recompute: float = 1.0
    """Share of this entry's forward that torchtitan's per-op selective activation checkpointing
    repeats in the backward (recompute='op'): its policy saves every matmul output except every
    second aten.mm of a block, counted in call order (:func:`op_sac_shares`)."""

    @property
    def flops(self) -> float:
        """Forward FLOPs (the backward runs twice this)."""
        return 2.0 * self.m * self.n * self.k * self.count


@dataclass(frozen=True)
class FusedAttention:
    """Flash-style fused attention for the local heads of one micro-batch."""

    name: str
    queries: int
    """Query positions on this GPU (mbs * seq / cp)."""
    keys_per_query: float
    """Average keys each query attends (causal: about seq/2; sliding window: about the window)."""
    heads: int
    """Query heads on this GPU (heads / tp)."""
    qk_dim: int
    v_dim: int
    kernel_keys: float
    """Keys per query inside one kernel call (CP splits a row over cp ring steps): sets the kernel's
    efficiency."""
    module: str = "core_attn"
    fp8: bool = False
    """Runs in FP8 (Assumptions.fp8_attention with an FP8 plan): planner.cost.compute.attention_times."""
    causal_keys: float | None = None
    """Under a sliding window, the keys per query of the whole causal row (what a kernel that does not
    skip the masked tiles computes); None without a window."""

    @property
    def flops(self) -> float:
        """Forward FLOPs: QK^T and PV over the attended keys."""
        return 2.0 * self.queries * self.keys_per_query * self.heads * (self.qk_dim + self.v_dim)


@dataclass(frozen=True)
class Stream:
    """A memory-bound kernel, costed by bytes moved through HBM."""

    name: str
    bytes_fwd: float
    bytes_bwd: float
    module: str = ""
    kernels: int = 1
    """Kernels per pass (each pays the per-kernel overhead)."""
    kernels_bwd: int | None = None
    """Kernels of the backward when they differ from the forward's (None: ``kernels``)."""
    slow_fwd: float = 0.0
    """Bytes of ``bytes_fwd`` moved by kernels on PyTorch's non-vectorized element-wise path
    (dtype-converting copies, operands broadcast over a dimension, mixed-dtype arithmetic), costed at
    the generation's ``unvectorized_fraction`` of the streaming bandwidth."""
    slow_bwd: float = 0.0
    """The same for ``bytes_bwd``."""
    host_sync: bool = False
    """The host waits for the GPU after issuing this kernel in the forward (it reads a
    data-dependent size back): work issued after it cannot overlap the GPU work before it."""
    module_calls: int = 0
    """Python bodies of Megatron modules other than linear layers that this entry stands for in
    each pass (the local spec's MoE layer: TopKRouter, the token dispatcher and SequentialMLP's
    bookkeeping around its experts), each costing the profile's ``moe_layer_host_*_s`` on the
    host (:mod:`planner.cost.compute`); 0 where not modeled."""

    @property
    def launches_bwd(self) -> int:
        return self.kernels if self.kernels_bwd is None else self.kernels_bwd


Kernel = Gemm | FusedAttention | Stream


# ---------------------------------------------------------------------------------------------
# A hashable digest of the model: everything the kernel inventory needs, nothing else.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    vocab: int
    norm: str
    learned_positions: bool
    attn_kind: Literal["gqa", "mla"]
    heads: int
    kv_heads: int
    qk_dim: int
    v_dim: int
    rope_dim: int
    """Per-head width carrying rotary embedding (0 with learned positions)."""
    q_lora: int | None
    kv_lora: int
    qkv_bias: bool
    sliding_window: int | None
    """Window of the local-attention layers (the '_swa' kinds): a sliding window, or the chunk of
    chunked attention (``local_kind``)."""
    sliding_every: int | None
    gated: bool
    """SwiGLU (three matrices) vs GELU (two)."""
    ffn: int
    ffn_bias: bool
    num_experts: int
    top_k: int
    expert_ffn: int
    shared_ffn: int
    group_top_k: int | None
    attention_dropout: bool
    hidden_dropout: bool
    mtp_layers: int
    layer_kinds: tuple[str, ...]
    """Block kind of each decoder layer: 'dense' / 'moe', with '_swa' for local-attention layers
    (a sliding window or a chunk, ``local_kind``)."""
    local_kind: Literal["sliding", "chunked"] = "sliding"
    """How the '_swa' layers attend: a window of the last w keys (gpt-oss, Gemma 3), or only the
    keys of their own chunk of w tokens (Llama 4's chunked attention)."""
    post_norms: bool = False
    """Norms on the attention and MLP outputs too (Gemma 2/3)."""
    logit_softcap: bool = False
    """The final logits are soft-capped (three element-wise passes over them)."""
    rope_unfused: bool = False
    """Megatron-Core applies RoPE unfused although fusion is on: TE's fused RoPE takes no mscale,
    and YaRN's concentration factor is not 1 (gpt-oss; rope_utils.apply_rotary_pos_emb, core 0.16-0.18:
    'mscale=... is not supported by TE's fused RoPE. Using unfused implementation.')."""
    glu_clamp: bool = False
    """The experts' gated unit is clamped (gpt-oss): the clamps run eagerly before the fused
    activation (Megatron-Core fused_bias_geglu.weighted_bias_quick_geglu_impl)."""
    expert_bias: bool = False
    """Routed experts carry biases: fc1's is in the grouped GEMM's epilogue, fc2's is added with
    the routing weights per expert from Python (Megatron-Core TEGroupedMLP._apply_bias)."""

    @property
    def mtp_kind(self) -> str:
        return self.layer_kinds[-1].removesuffix("_swa")

    def __hash__(self) -> int:
        # Memoized costs hash this on every lookup; the layer-kind tuple makes the generated hash
        # slow, and name plus sizes already separate models (equality still compares all fields).
        return hash((self.name, self.hidden, self.vocab, self.heads, self.ffn, self.num_experts, len(self.layer_kinds)))


_SHAPES: dict[int, tuple[object, ModelShape]] = {}


def model_shape(model: ModelSpec) -> ModelShape:
    """The model's :class:`ModelShape`, cached per spec object (specs are immutable)."""
    hit = _SHAPES.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    a = model.attention
    moe = model.moe
    local: Literal["sliding", "chunked"] = "sliding"
    if a.kind == "mla":
        qk, v, rope = a.qk_head_dim, a.v_head_dim, a.qk_rope_head_dim
        q_lora, kv_lora, bias, swa, every = a.q_lora_rank, a.kv_lora_rank, False, None, None
        unfused_rope = False  # MLA applies its rope part in its own kernels (mla_up_proj below)
    else:
        qk = v = a.head_dim
        # partial rotary (GLM-4.5's partial_rotary_factor): the RoPE kernel rotates that share
        share = model.rope.percent if model.rope is not None else 1.0
        rope = max(1, round(a.head_dim * share)) if model.position_embedding == "rope" else 0
        q_lora, kv_lora, bias = None, 0, a.qkv_bias
        swa, every = a.sliding_window, a.sliding_window_every
        unfused_rope = rope > 0 and model.rope is not None and model.rope.yarn_concentration != 1.0
        if a.attention_chunk is not None:
            swa, local = a.attention_chunk, "chunked"
    kinds = [kind + ("_swa" if model.attention.local_layer(i) else "") for i, kind in enumerate(model.layer_kinds)]
    shape = ModelShape(
        name=model.name, hidden=model.hidden_size, vocab=model.vocab_size, norm=model.norm,
        learned_positions=model.position_embedding == "learned", attn_kind=a.kind,
        heads=a.num_heads, kv_heads=a.num_kv_heads, qk_dim=qk, v_dim=v, rope_dim=rope,
        q_lora=q_lora, kv_lora=kv_lora, qkv_bias=bias, sliding_window=swa, sliding_every=every,
        local_kind=local, post_norms=model.post_norms, logit_softcap=model.logit_softcap is not None,
        gated=model.ffn.gated, ffn=model.ffn.hidden_size, ffn_bias=model.ffn.bias,
        num_experts=moe.num_experts if moe else 0, top_k=moe.top_k if moe else 0,
        expert_ffn=moe.expert_hidden_size if moe else 0, shared_ffn=moe.shared_hidden if moe else 0,
        group_top_k=moe.group_top_k if moe else None,
        attention_dropout=model.attention_dropout > 0, hidden_dropout=model.hidden_dropout > 0,
        mtp_layers=model.mtp_layers, layer_kinds=tuple(kinds),
        rope_unfused=unfused_rope, glu_clamp=moe is not None and model.ffn.clamp is not None,
        expert_bias=moe is not None and moe.expert_bias,
    )
    _SHAPES[id(model)] = (model, shape)
    return shape


# ---------------------------------------------------------------------------------------------
# Sharding context of one micro-batch on one GPU.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shard:
    """The degrees and sizes of one micro-batch on one GPU: what fixes every kernel shape of a block
    (the memoization key) and every activation of the memory inventory (planner.cost.activations).
    The degrees, mbs and flags may be numpy arrays (the search evaluates many shardings at once
    through the same formulas); the other fields are scalars."""

    tp: int
    cp: int
    ep: int
    etp: int
    mbs: int
    seq: int
    implementation: str = "te"
    """'te' (fused attention, Transformer Engine) or 'megatron-local' (unfused attention)."""
    dispatcher: str | None = None
    """MoE token dispatcher: 'alltoall' permutes globally before and locally after the exchange;
    'deepep'/'hybridep' fuse the global permutation into the communication kernel."""
    imbalance: float = 1.0
    """Routed tokens on the most loaded EP rank over the mean."""
    fp8: bool = False
    """The linear layers' GEMMs run quantized (Gemm.fp8): in the hardware's FP8 recipe, or in
    NVFP4 where ``fp4`` is set too."""
    fp4: bool = False
    """The quantized linears run Transformer Engine's NVFP4 recipe (precision=nvfp4)."""
    sp: Flag = True
    """Sequence parallelism: [tokens, h] tensors between TP regions are split over TP (the kernel
    inventory assumes it; the activation inventory reads it, set where TP > 1 and the run uses it)."""
    memory_efficient_permutation: Flag = True
    """MoE permutation that keeps no copy of the permuted tokens for the backward (activation
    inventory)."""
    ep_overlap: Flag = False
    """EP all-to-all overlapped with compute (Megatron --overlap-moe-expert-parallel-comm): a
    forward micro-batch runs beside a backward one, so their transients coexist (activation
    inventory)."""
    expert_op_fuser: bool = False
    """The experts run through TE's operation fuser (Assumptions.expert_op_fuser): no eager GLU
    clamps or per-expert bias loop."""
    fp8_attention: bool = False
    """Fused attention runs in FP8 when the plan does (Assumptions.fp8_attention)."""
    cross_entropy: str = "fused"
    """The loss's kind (Assumptions.cross_entropy): what the head keeps of the logits (memory)."""
    fp8_rowwise: bool = False
    """FP8 linears are torchao's Float8Linear with rowwise scaling (Assumptions.fp8_recipe
    'rowwise'): :func:`_torchao_rowwise_casts`."""

    @property
    def local_seq(self) -> int:
        """Sequence length attention sees on this GPU (seq / cp): the s of the s^2 terms."""
        return self.seq // self.cp

    @property
    def tokens(self) -> int:
        """Tokens of the micro-batch on this GPU before TP splitting: mbs * seq / cp."""
        return self.mbs * self.seq // self.cp

    @property
    def sp_tokens(self) -> float:
        """Tokens held between TP regions under sequence parallelism (tokens / tp)."""
        return self.tokens / self.tp


def _norm(name: str, tokens: float, width: int, module: str, sh: Shard | None = None) -> Stream:
    """LayerNorm/RMSNorm: read and write each element once (bf16). On the local spec (torch's
    norm modules) the backward runs the input gradient, the weight-gradient reduction and the
    main-gradient accumulation of the weight as separate kernels."""
    b = tokens * width * 2 * BF16
    return Stream(name, b, b * STREAM_BWD_FACTOR, module, kernels_bwd=3 if sh is not None and torch_eager(sh) else None)


def _elementwise(name: str, elements: float, reads: float, writes: float, module: str = "", kernels: int = 1) -> Stream:
    """An element-wise kernel reading ``reads`` and writing ``writes`` bytes per element."""
    b = elements * (reads + writes)
    return Stream(name, b, b * STREAM_BWD_FACTOR, module, kernels)


def _fp8_casts(g: Gemm, sh: Shard) -> Stream:
    """FP8 quantization around one GEMM (Transformer Engine): the forward casts the input
    activation (read bf16, write fp8 row- and column-wise for the weight gradient); the backward
    casts the output gradient the same way. Weight casts are cached across micro-batches."""
    if sh.fp8_rowwise:
        return _torchao_rowwise_casts(g)
    if sh.fp4:
        return _nvfp4_casts(g)
    fwd = g.count * g.m * g.k * (BF16 + 2 * FP8)
    bwd = g.count * g.m * g.n * (BF16 + 2 * FP8)
    return Stream(g.name + ".fp8_cast", fwd, bwd, g.module, kernels=1)


def _nvfp4_casts(g: Gemm) -> Stream:
    """NVFP4 quantization around one GEMM (Transformer Engine's NVFP4BlockScaling,
    docs/features/low_precision_training/nvfp4): the forward quantizes the input row-wise (1x16
    blocks, for the forward GEMM) and column-wise after a random Hadamard transform (for the
    weight-gradient GEMM); the backward the output gradient the same way, with stochastic
    rounding. The transform is supported only on BF16 input and rotates the column-wise copy
    only, so each tensor is read twice: a row-wise cast and a fused transform-and-cast (2 kernels).
    The 16x16 transform's FLOPs (32 per element, on tensor cores) and the rounding (a Blackwell
    instruction) cost nothing beside the bytes. Weights (2D 16x16 scaling) are quantized once per
    step, as FP8 weights are (cached across micro-batches)."""
    fwd = g.count * g.m * g.k * (2 * BF16 + 2 * NVFP4)
    bwd = g.count * g.m * g.n * (2 * BF16 + 2 * NVFP4)
    return Stream(g.name + ".fp4_cast", fwd, bwd, g.module, kernels=2)


def _torchao_rowwise_casts(g: Gemm) -> Stream:
    """torchao's rowwise FP8 around one GEMM entry, by its roofline's kernels
    (torchao/testing/training/roofline_utils.py, get_tensor_memory_traffic_ovhd_s, 'rowwise'):
    each linear casts its input along rows while writing a bf16 transposed copy (2 + 1 + 2 bytes
    per element), then that copy along columns for the weight gradient (2 + 1); the output
    gradient the same (8); the weight every micro-batch (3 forward, 4 + 3 backward). Its backward
    GEMMs run without fast accumulation, where torchao takes cuBLAS's per-tensor kernel and scales
    the output afterwards (torchao float8_ops.py addmm_float8_unwrapped: read and write it, 2 + 2
    bytes). A fused entry's linears (``Gemm.linears``: torchtitan's wq, wk, wv) each cast and
    scale the input they share: the torchtitan RCA of its flat rowwise throughput with TP found
    the casts of wk and wv costing more than their GEMMs saved (pytorch/torchtitan#1207,
    pytorch/ao#2410). Kernels per linear: the input's and the weight's first casts forward; the
    input's second, the output gradient's two, the weight's other two and the two rescales
    backward."""
    x, w, dy = g.count * g.m * g.k, g.count * g.k * g.n, g.count * g.m * g.n
    fwd = g.linears * x * (BF16 + FP8 + BF16) + w * (BF16 + FP8)
    bwd = (g.linears * x * (BF16 + FP8) + dy * (BF16 + FP8 + BF16 + BF16 + FP8)
           + w * (2 * BF16 + BF16 + FP8) + g.linears * x * 2 * BF16 + w * 2 * BF16)
    return Stream(g.name + ".fp8_cast", fwd, bwd, g.module, kernels=2 * g.linears, kernels_bwd=7 * g.linears)


def torch_eager(sh: Shard) -> bool:
    """Megatron-Core's local layer spec without Transformer Engine or Apex ('megatron-local'):
    unfused attention with torch's fp32 softmax, unfused RoPE, Megatron's local linear layers
    without gradient-accumulation fusion, SequentialMLP experts, torch AdamW. The 2021-22 setups
    ('megatron-local-fused-softmax') had Megatron's and Apex's fused kernels instead."""
    return sh.implementation == "megatron-local"


def _grad_accum(g: Gemm) -> Stream:
    """Megatron DDP's ``main_grad.add_(grad)`` after a weight-gradient GEMM that could not
    accumulate in place (:data:`GRAD_ACCUM_BYTES_PER_PARAM`): backward only, one kernel per weight,
    on the non-vectorized (mixed-dtype) path."""
    b = GRAD_ACCUM_BYTES_PER_PARAM * g.n * g.k * g.count
    return Stream(g.name + ".grad_accum", 0.0, b, g.module, kernels=0, kernels_bwd=g.count, slow_bwd=b)


def _with_casts(gemms: list[Gemm], sh: Shard) -> list[Kernel]:
    """Linear layers with what runs around them: FP8 casts (Transformer Engine), or on the local
    spec one Python linear-layer call per matrix and the separate main-gradient accumulation."""
    out: list[Kernel] = []
    for g in gemms:
        if torch_eager(sh):
            g = replace(g, linear_calls=g.count, fused_wgrad=False, issue="sequential")
        out.append(g)
        if sh.fp8 and g.fp8:
            out.append(_fp8_casts(g, sh))
        if not g.fused_wgrad:
            out.append(_grad_accum(g))
    return out


def attention_keys(ms: ModelShape, seq: int, swa: bool, causal_executed: bool = True) -> float:
    """Average keys per query of one sequence: causal (seq+1)/2; a sliding window w
    (w - w(w-1)/(2 seq) for seq >= w); chunked attention in chunks of c (causal within each: n
    whole chunks of c(c+1)/2 key-query pairs and a last one of r(r+1)/2, seq = n c + r); the whole
    row when the kernel computes the masked half too (unfused attention)."""
    if not causal_executed:
        return float(seq)
    if swa and ms.sliding_window and ms.sliding_window < seq:
        w = ms.sliding_window
        if ms.local_kind == "chunked":
            n, r = divmod(seq, w)
            return (n * w * (w + 1) / 2.0 + r * (r + 1) / 2.0) / seq
        return w - w * (w - 1) / (2.0 * seq)
    return (seq + 1) / 2.0


def attention_block(ms: ModelShape, sh: Shard, swa: bool) -> list[Kernel]:
    """Input norm, projections, rotary embedding, core attention and output projection."""
    h, T, Tsp, tp = ms.hidden, sh.tokens, sh.sp_tokens, sh.tp
    heads = ms.heads // tp
    ks: list[Kernel] = [_norm("input_norm", Tsp, h, "layernorm", sh)]
    gemms: list[Gemm] = []
    if ms.attn_kind == "mla":
        # Megatron MLA (megatron/core/transformer/multi_latent_attention.py): the down projections
        # are 'duplicated' linears every TP rank computes in full on the gathered tokens.
        if ms.q_lora:
            gemms.append(Gemm("q_down", T, ms.q_lora, h, model_fraction=1.0 / tp))
        kv_down_n = ms.kv_lora + ms.rope_dim
        gemms.append(Gemm("kv_down", T, kv_down_n, h, model_fraction=1.0 / tp))
        ks += _with_casts(gemms, sh)
        up: list[Gemm] = []
        if ms.q_lora:
            ks.append(_norm("q_norm", T, ms.q_lora, "layernorm"))
            up.append(Gemm("q_up", T, heads * ms.qk_dim, ms.q_lora, module="mla_up_proj"))
        else:
            up.append(Gemm("q_proj", T, heads * ms.qk_dim, h))
        ks.append(_norm("kv_norm", T, ms.kv_lora, "layernorm"))
        up.append(Gemm("kv_up", T, heads * (ms.qk_dim - ms.rope_dim + ms.v_dim), ms.kv_lora, module="mla_up_proj"))
        ks += _with_casts(up, sh)
        # RoPE on the query rope part and the shared key rope part, then Q/K assembly (copy).
        rope_elems = T * (heads * ms.rope_dim + ms.rope_dim)
        ks.append(_elementwise("rope", rope_elems, BF16, BF16, "mla_up_proj"))
        qk_elems = T * heads * (2 * ms.qk_dim)
        ks.append(_elementwise("qk_assemble", qk_elems, BF16, BF16, "mla_up_proj"))
    else:
        kv_local = maximum(1, ms.kv_heads // tp)  # Megatron replicates K/V heads when tp > kv heads
        gemms.append(Gemm("qkv", T, (heads + 2 * kv_local) * ms.qk_dim, h, linears=3,
                          op_sac_recompute=op_sac_shares(ms.gated)["wk"] * kv_local / (heads + 2 * kv_local)))
        ks += _with_casts(gemms, sh)
        if ms.qkv_bias:
            ks.append(_elementwise("qkv_bias", T * (heads + 2 * kv_local) * ms.qk_dim, BF16, BF16))
        if ms.rope_dim:
            if torch_eager(sh) or ms.rope_unfused:
                e = T * (heads + kv_local) * ms.rope_dim
                ks.append(Stream("rope", e * ROPE_FWD_BYTES, e * ROPE_BWD_BYTES, kernels=2 * ROPE_KERNELS_FWD,
                                 kernels_bwd=2 * ROPE_KERNELS_BWD))
            else:
                ks.append(_elementwise("rope", T * (heads + kv_local) * ms.rope_dim, BF16, BF16))
    ks += core_attention(ms, sh, swa)
    proj = Gemm("proj", T, h, heads * ms.v_dim, op_sac_recompute=op_sac_shares(ms.gated)["wo"])
    ks += _with_casts([proj], sh)
    if ms.post_norms:
        ks.append(_norm("post_attn_norm", Tsp, h, "", sh))
    ks.append(_residual("attn_residual", ms, sh))
    return ks


def core_attention(ms: ModelShape, sh: Shard, swa: bool) -> list[Kernel]:
    """Fused attention, or the unfused path of 2022-era Megatron: batched QK^T, a fused
    scale-mask-softmax, attention dropout and batched PV (Korthikanti et al. 2022, sec. 4), or the
    local spec's unfused attention with torch's fp32 softmax (:func:`_torch_attention`)."""
    heads = ms.heads // sh.tp
    if sh.implementation == "te":
        keys = attention_keys(ms, sh.seq, swa)
        causal = attention_keys(ms, sh.seq, False)
        return [
            FusedAttention("core_attention", sh.tokens, keys, heads, ms.qk_dim, ms.v_dim,
                           kernel_keys=keys / sh.cp, fp8=bool(sh.fp8 and sh.fp8_attention),
                           causal_keys=causal if causal != keys else None)
        ]
    s, b = sh.seq // sh.cp, sh.mbs * heads
    if torch_eager(sh):
        return _torch_attention(ms, sh, s, b, heads)
    scores = b * s * s
    # The masked upper triangle is computed too; model FLOPs count half of it (causal).
    ks: list[Kernel] = [
        Gemm("attn_scores", s, s, ms.qk_dim, count=b, module="core_attn", fp8=False, model_fraction=0.5),
        _elementwise("softmax", scores, BF16, BF16, "core_attn"),
    ]
    if ms.attention_dropout:
        ks.append(_elementwise("attn_dropout", scores, BF16, BF16 + 1, "core_attn"))
    ks.append(Gemm("attn_values", s, ms.v_dim, s, count=b, module="core_attn", fp8=False, model_fraction=0.5))
    return ks


def _torch_attention(ms: ModelShape, sh: Shard, s: int, b: int, heads: int) -> list[Kernel]:
    """megatron-core 0.19's DotProductAttention without fusions: K and V repeated to every query
    head (GQA), one strided-batched baddbmm for the scores, the causal mask built per call, torch's
    fp32 softmax chain (:data:`TORCH_SOFTMAX_FWD_BYTES`), one batched bmm for the context and
    its [b, np, s, d] -> [s, b, h] copy. Bytes per kernel with the share on PyTorch's
    non-vectorized path (dtype-converting copies, the broadcast mask, block softmax over long rows)."""
    scores = b * s * s
    kv = maximum(1, ms.kv_heads // sh.tp) if ms.attn_kind != "mla" else heads
    gqa = 1 if ms.attn_kind != "mla" and ms.kv_heads < ms.heads else 0
    q_elems = sh.mbs * s * heads * ms.qk_dim
    # Layout copies: the context's permute().contiguous() (2 + 2) and, for GQA, the query's
    # reshape out of the QKV split (2 + 2) and repeat_interleave of K and V (read kv heads, write
    # all heads); the backward concatenates the Q/K/V gradients into the QKV projection's gradient
    # and sums the repeated K/V gradients back.
    qkv_elems = sh.mbs * s * ms.qk_dim * (heads + 2 * kv)
    kv_rep = 2 * sh.mbs * s * ms.qk_dim * (heads + kv) * BF16
    layout_f = q_elems * 2 * BF16 + gqa * (q_elems * 2 * BF16 + kv_rep)
    layout_b = qkv_elems * 2 * BF16 + gqa * kv_rep
    fb, bb = TORCH_SOFTMAX_FWD_BYTES, TORCH_SOFTMAX_BWD_BYTES
    long_rows = where(s > TORCH_WARP_SOFTMAX_MAX, 1, 0)
    ks: list[Kernel] = [
        Stream("attn_layout", layout_f, layout_b, "core_attn", kernels=1 + 3 * gqa, kernels_bwd=1 + 2 * gqa),
        Gemm("attn_scores", s, s, ms.qk_dim, count=b, module="core_attn", fp8=False, model_fraction=0.5,
             issue="batched"),
        Stream("causal_mask", CAUSAL_MASK_BYTES * s * s, 0.0, "core_attn", kernels=3, kernels_bwd=0),
        Stream("scores_to_fp32", fb["to_fp32"] * scores, bb["to_bf16"] * scores, "core_attn",
               slow_fwd=fb["to_fp32"] * scores),
        Stream("mask_fill", fb["mask_fill"] * scores, bb["mask_fill"] * scores, "core_attn", kernels_bwd=2,
               slow_fwd=fb["mask_fill"] * scores, slow_bwd=bb["mask_fill"] / 2 * scores),
        Stream("softmax", fb["softmax"] * scores, bb["softmax"] * scores, "core_attn", kernels_bwd=2,
               slow_fwd=long_rows * fb["softmax"] * scores),
        Stream("probs_to_bf16", fb["to_bf16"] * scores, bb["to_fp32"] * scores, "core_attn",
               slow_bwd=bb["to_fp32"] * scores),
    ]
    if ms.attention_dropout:
        ks.append(_elementwise("attn_dropout", scores, BF16, BF16 + 1, "core_attn"))
    ks.append(Gemm("attn_values", s, ms.v_dim, s, count=b, module="core_attn", fp8=False, model_fraction=0.5,
                   issue="batched"))
    return ks


def _residual(name: str, ms: ModelShape, sh: Shard) -> Stream:
    """Bias + dropout + residual add on the sequence-parallel tokens (one fused kernel)."""
    writes = BF16 + (1 if ms.hidden_dropout else 0)  # dropout keeps a 1-byte mask
    return _elementwise(name, sh.sp_tokens * ms.hidden, 2 * BF16, writes)


# torchtitan's Llama block issues its linear layers in this order (torchtitan models/llama3/model.py:
# wq, wk, wv in Attention.forward; w2(silu(w1(x)) * w3(x)) in FeedForward.forward).
OP_SAC_MM_ORDER = {True: ("wq", "wk", "wv", "wo", "w1", "w3", "w2"), False: ("wq", "wk", "wv", "wo", "w1", "w2")}


@lru_cache(maxsize=2)
def op_sac_shares(gated: bool) -> dict[str, float]:
    """1 for each linear layer of a decoder block that torchtitan's per-op selective AC recomputes,
    0 for those it saves: its policy (torchtitan parallelize_llama.py ``_save_list`` and
    ``_custom_policy``, 2024-12 to 2026) counts aten.mm calls per block and recomputes every
    second one, while SDPA outputs and TP reduce-scatters are saved and every other op (norms,
    RoPE, SiLU, FP8 casts, TP all-gathers) is recomputed."""
    return {name: float(i % 2 == 0) for i, name in enumerate(OP_SAC_MM_ORDER[gated], start=1)}


def _activation(name: str, tokens: float, width: float, gated: bool, module: str) -> Stream:
    """SwiGLU reads gate and up and writes one; GELU (with its fused bias) reads and writes one."""
    return _elementwise(name, tokens * width, (2 if gated else 1) * BF16, BF16, module)


def mlp_block(ms: ModelShape, sh: Shard, width: int, module: str, name: str = "mlp") -> list[Kernel]:
    """A TP-split MLP (dense FFN or shared experts): fc1, activation, fc2."""
    T, w = sh.tokens, width / sh.tp
    n_in = 2 if ms.gated else 1
    op = op_sac_shares(ms.gated)
    fc1 = Gemm(f"{name}.fc1", T, as_int(n_in * w), ms.hidden, module=module, linears=n_in,
               op_sac_recompute=(op["w1"] + op["w3"]) / 2 if ms.gated else op["w1"])
    fc2 = Gemm(f"{name}.fc2", T, ms.hidden, as_int(w), module=module, op_sac_recompute=op["w2"])
    ks: list[Kernel] = _with_casts([fc1], sh)
    ks.append(_activation(f"{name}.act", T, w, ms.gated, module))
    ks += _with_casts([fc2], sh)
    return ks


def routed_tokens(ms: ModelShape, sh: Shard) -> float:
    """Token copies one GPU's experts process per micro-batch: its EP group's tokens times top-k
    spread over the experts, gathered over expert-TP, times the imbalance of the heaviest rank."""
    return sh.sp_tokens * ms.top_k * sh.etp * sh.imbalance


def moe_block(ms: ModelShape, sh: Shard) -> list[Kernel]:
    """Router, token permutation, routed experts (grouped GEMM) and shared experts."""
    if torch_eager(sh):
        return _local_moe_block(ms, sh)
    h, Tsp, E = ms.hidden, sh.sp_tokens, ms.num_experts
    ks: list[Kernel] = [
        Gemm("router", as_int(Tsp), E, h, module="moe", fp8=False),
        _elementwise("router_topk", Tsp * E, FP32 * ROUTER_PASSES / 2, FP32 * ROUTER_PASSES / 2, "moe", kernels=ROUTER_PASSES),
    ]
    R = routed_tokens(ms, sh)
    copies = Tsp * ms.top_k
    # Permutation: alltoall permutes globally (T x h -> T*k x h) before the exchange and locally
    # after it; DeepEP/HybridEP fuse the global permutation into their dispatch kernel.
    global_perm = sh.dispatcher in (None, "alltoall")
    perm_bytes = (copies * h * 2 * BF16 if global_perm else 0) + R * h * 2 * BF16
    # The dispatcher reads the per-expert token counts back on the host (dropless): a host sync,
    # after which the layer's eager Python runs (ComputeEfficiency.te_moe_layer_host_s).
    ks.append(Stream("permute", perm_bytes, perm_bytes, "moe", kernels=2 if global_perm else 1, host_sync=True,
                     module_calls=1))
    local, w, fc1, fc2 = _expert_gemms(ms, sh, R)
    ks += _with_casts([fc1], sh)
    if ms.glu_clamp and not sh.expert_op_fuser:
        ks.append(_glu_clamp(R, w))
    ks.append(_activation("experts.act", R, w, ms.gated, "moe_act"))
    ks += _with_casts([fc2], sh)
    if ms.expert_bias and not sh.expert_op_fuser:
        ks.append(_expert_output_bias(R, h, local, sh.dispatcher))
    # Unpermute and the weighted sum of the k expert outputs per token.
    ks.append(Stream("unpermute", perm_bytes + copies * h * BF16, perm_bytes + copies * h * BF16, "moe",
                     kernels=2 if global_perm else 1))
    if ms.shared_ffn:
        ks += mlp_block(ms, sh, ms.shared_ffn, "shared_experts", "shared")
    return ks


# The clamped gated unit (Megatron-Core weighted_bias_quick_geglu_impl): the gate half clamped
# from above and the linear half to [-limit, limit], each a new bf16 tensor (read 2 + write 2 bytes
# per element of its half), then concatenated back (read 4 + write 4 per element of a half): 16
# bytes per element of one half forward; backward, each clamp's masked gradient (read the gradient
# and the input, write: 6 per element of each half) and the gradient of the two halves copied
# into the fc1 output's (4 + 4): 20. Estimate from the code, not profiled.
GLU_CLAMP_FWD_BYTES, GLU_CLAMP_BWD_BYTES = 16, 20


def _glu_clamp(routed, width) -> Stream:
    """The eager clamps and concatenation before a clamped gated activation (module moe_act: they
    are recomputed with it)."""
    e = routed * width
    return Stream("experts.act_clamp", e * GLU_CLAMP_FWD_BYTES, e * GLU_CLAMP_BWD_BYTES, "moe_act", kernels=3,
                  kernels_bwd=3)


def _expert_output_bias(routed, hidden: int, local, dispatcher: str | None) -> Stream:
    """fc2's bias, added per local expert from Python: ``t + b * p`` on each expert's rows (``p``
    the routing weights, float32 from HybridEP, whose dispatch only takes float32 probabilities,
    else bf16: the sum takes their type), the outputs concatenated and cast back to bf16
    (Megatron-Core TEGroupedMLP._apply_bias). Per element of the [tokens, h] output, with p bytes
    per weight: b * p written (p), added to t (read 2 + p, write p), concatenated (p + p) and cast
    (p + 2): 6p + 4 bytes forward; backward, the cast's and the sum's gradients (2 + p, p + 2) and
    the two reductions for the bias and weight gradients (p each): 4p + 4. Two kernels per local
    expert and the cat and cast; about twice that backward. Estimate from the code, not profiled."""
    p = FP32 if dispatcher == "hybridep" else BF16
    e = routed * hidden
    return Stream("experts.fc2_bias", e * (6 * p + 4), e * (4 * p + 4), "moe", kernels=2 * local + 2,
                  kernels_bwd=4 * local + 2)


def _expert_gemms(ms: ModelShape, sh: Shard, routed) -> tuple[int, float, Gemm, Gemm]:
    """(local experts, expert width per GPU, fc1, fc2) of a rank's routed experts: ``routed``
    token copies spread over E/ep local experts (at least one row each), the width split by
    expert TP, fc1 doubled for gated activations; the busiest expert's share of the rows
    (``sh.imbalance``) only moves time, not model FLOPs (model_fraction)."""
    h, local = ms.hidden, ms.num_experts // sh.ep
    m_e = maximum(1, round_int(routed / local))
    w = ms.expert_ffn / sh.etp
    n_in = 2 if ms.gated else 1
    fc1 = Gemm("experts.fc1", m_e, as_int(n_in * w), h, count=local, module="moe", model_fraction=1.0 / sh.imbalance)
    fc2 = Gemm("experts.fc2", m_e, h, as_int(w), count=local, module="moe", model_fraction=1.0 / sh.imbalance)
    return local, w, fc1, fc2


def _local_moe_block(ms: ModelShape, sh: Shard) -> list[Kernel]:
    """megatron-core 0.19's MoE layer on the local spec: TopKRouter with the fp32 router (the
    input cast to fp32), the alltoall dispatcher's unfused permutation, whose masked_select and the
    experts' ``tokens_per_expert.tolist()`` read sizes back on the host (a host sync every layer),
    SequentialMLP running each local expert as its own MLP module from a Python loop (two linear
    layers and the weighted SwiGLU per expert, one after another), the concatenation of their
    outputs, the unpermutation (zeros + scatter_add) and the shared experts."""
    h, Tsp, E = ms.hidden, sh.sp_tokens, ms.num_experts
    ks: list[Kernel] = _with_casts([Gemm("router", as_int(Tsp), E, h, module="moe", fp8=False)], sh)
    route = Tsp * h * (BF16 + FP32) + Tsp * E * FP32 * ROUTER_PASSES
    ks.append(Stream("router_topk", route, route, "moe", kernels=LOCAL_ROUTER_KERNELS[0],
                     kernels_bwd=LOCAL_ROUTER_KERNELS[1], slow_fwd=Tsp * h * (BF16 + FP32)))
    R = routed_tokens(ms, sh)
    copies = Tsp * ms.top_k
    # Permute globally (T x h -> T*k x h) and sort the chunks by local expert after the exchange
    # (split + cat, also with one rank): as the alltoall path of moe_block.
    perm = copies * h * 2 * BF16 + R * h * 2 * BF16
    ks.append(Stream("permute", perm, perm, "moe", kernels=LOCAL_PERMUTE_KERNELS[0],
                     kernels_bwd=LOCAL_PERMUTE_KERNELS[1], host_sync=True))
    local, w, fc1, fc2 = _expert_gemms(ms, sh, R)
    ks += _with_casts([fc1], sh)
    ks.append(replace(_activation("experts.act", R, w, ms.gated, "moe_act"), kernels=local))
    ks += _with_casts([fc2], sh)
    # torch.cat of the expert outputs, the chunk sort back, then zeros + scatter_add into the
    # token order (the routing probabilities are applied inside the expert activation).
    unperm = R * h * 2 * BF16 + perm + copies * h * BF16
    ks.append(Stream("unpermute", unperm, unperm, "moe", kernels=LOCAL_UNPERMUTE_KERNELS[0] + 2,
                     kernels_bwd=LOCAL_UNPERMUTE_KERNELS[1] + 1, module_calls=1))
    if ms.shared_ffn:
        ks += mlp_block(ms, sh, ms.shared_ffn, "shared_experts", "shared")
    return ks


def layer_block(ms: ModelShape, sh: Shard, kind: str) -> tuple[Kernel, ...]:
    """One decoder layer of ``kind`` ('dense'/'moe', optional '_swa' suffix)."""
    swa = kind.endswith("_swa")
    base = kind.removesuffix("_swa")
    ks = attention_block(ms, sh, swa)
    ks.append(_norm("pre_mlp_norm", sh.sp_tokens, ms.hidden, "layernorm", sh))
    if base == "dense":
        ks += mlp_block(ms, sh, ms.ffn, "mlp")
    else:
        ks += moe_block(ms, sh)
    if ms.post_norms:
        ks.append(_norm("post_mlp_norm", sh.sp_tokens, ms.hidden, "", sh))
    ks.append(_residual("mlp_residual", ms, sh))
    return tuple(ks)


def embedding_block(ms: ModelShape, sh: Shard) -> tuple[Kernel, ...]:
    """Vocabulary-parallel embedding lookup on every token (then reduce-scattered over TP), plus the
    learned position table and embedding dropout where the model has them."""
    T, h = sh.tokens, ms.hidden
    ks: list[Kernel] = [_elementwise("embedding", T * h, BF16, BF16)]
    if ms.learned_positions:
        ks.append(_elementwise("position_embedding", sh.sp_tokens * h, 2 * BF16, BF16 + (1 if ms.hidden_dropout else 0)))
    if torch_eager(sh):
        # The table's dense gradient (embedding_dense_backward: zero the bf16 vocab x h gradient,
        # sort the token ids, sum rows) and its main-gradient accumulation (no fusion on the local spec).
        table = ms.vocab / sh.tp * h
        acc = GRAD_ACCUM_BYTES_PER_PARAM * table
        ks.append(Stream("embedding.grad", 0.0, table * BF16 + T * h * 2 * BF16 + acc, kernels=0, kernels_bwd=7,
                         slow_bwd=acc))
    return tuple(ks)


def head_block(ms: ModelShape, sh: Shard) -> tuple[Kernel, ...]:
    """Final norm, output projection (vocabulary-parallel, BF16) and cross-entropy."""
    T = sh.tokens
    logits = T * ms.vocab / sh.tp
    if torch_eager(sh):
        # cross_entropy_loss_fusion off: the same bytes, in about a dozen torch kernels; the
        # logits' cast to fp32 (6) and the max-subtract and normalizing divide over a broadcast
        # row statistic (8 + 8) run on the non-vectorized path, as does the backward's broadcast
        # scaling (8).
        ce = Stream("cross_entropy", logits * CE_FWD_BYTES_PER_LOGIT, logits * CE_BWD_BYTES_PER_LOGIT,
                    kernels=12, kernels_bwd=6, slow_fwd=22 * logits, slow_bwd=8 * logits)
        return (_norm("final_norm", sh.sp_tokens, ms.hidden, "", sh),
                *_with_casts([Gemm("output", T, ms.vocab // sh.tp, ms.hidden, fp8=False)], sh), ce)
    ks: list[Kernel] = [
        _norm("final_norm", sh.sp_tokens, ms.hidden, ""),
        Gemm("output", T, ms.vocab // sh.tp, ms.hidden, fp8=False),
    ]
    if ms.logit_softcap:
        ks.append(logit_softcap(logits))
    ks.append(Stream("cross_entropy", logits * CE_FWD_BYTES_PER_LOGIT, logits * CE_BWD_BYTES_PER_LOGIT))
    return tuple(ks)


def logit_softcap(logits: float) -> Stream:
    """Gemma 2's final_logit_softcapping, cap * tanh(logits / cap): three element-wise passes over
    the bf16 logits (divide, tanh, multiply; transformers' Gemma2ForCausalLM.forward)."""
    return _elementwise("logit_softcap", 3 * logits, BF16, BF16, kernels=3)


def mtp_block(ms: ModelShape, sh: Shard) -> tuple[Kernel, ...]:
    """One MTP module (DeepSeek-V3 sec. 2.2; Megatron multi_token_prediction.py): embedding of the
    shifted tokens, two norms, the 2h -> h projection, a decoder layer, and its own output head and
    loss (the head weights are shared, its FLOPs are not)."""
    T, Tsp, h = sh.tokens, sh.sp_tokens, ms.hidden
    ks: list[Kernel] = list(embedding_block(ms, sh))
    ks += [_norm("mtp.enorm", Tsp, h, "layernorm"), _norm("mtp.hnorm", Tsp, h, "layernorm")]
    ks += _with_casts([Gemm("mtp.eh_proj", T, h // sh.tp, 2 * h)], sh)
    ks += layer_block(ms, sh, ms.mtp_kind)
    ks += head_block(ms, sh)
    return tuple(ks)


def block_kernels(ms: ModelShape, sh: Shard, block: str) -> tuple[Kernel, ...]:
    """Kernels of one block: a decoder layer kind ('dense', 'moe', '..._swa'), 'embedding',
    'head' (final norm, output layer, loss) or 'mtp'. Memoized for scalar shards; with array
    degrees each kernel's sizes are arrays."""
    if hashable(sh):
        return _block_kernels_cached(ms, sh, block)
    return _block_kernels(ms, sh, block)


def _block_kernels(ms: ModelShape, sh: Shard, block: str) -> tuple[Kernel, ...]:
    if block == "embedding":
        return embedding_block(ms, sh)
    if block == "head":
        return head_block(ms, sh)
    if block == "mtp":
        return mtp_block(ms, sh)
    return layer_block(ms, sh, block)


_block_kernels_cached = lru_cache(maxsize=4096)(_block_kernels)


def hardware_flops(kernels: tuple[Kernel, ...]) -> tuple[float, float]:
    """(forward, backward) FLOPs the GPU executes for these kernels (backward of fused attention at
    2.5x its forward, of GEMMs at 2x)."""
    fwd = bwd = 0.0
    for k in kernels:
        if isinstance(k, Gemm):
            fwd += k.flops
            bwd += 2 * k.flops
        elif isinstance(k, FusedAttention):
            fwd += k.flops
            bwd += 2.5 * k.flops
    return fwd, bwd


def model_flops_of(kernels: tuple[Kernel, ...]) -> float:
    """Model FLOPs (forward + backward, 3x the forward) of these kernels on one GPU, counting
    duplicated and imbalanced work once and causal attention as half the square."""
    total = 0.0
    for k in kernels:
        if isinstance(k, Gemm):
            total += 3 * k.flops * k.model_fraction
        elif isinstance(k, FusedAttention):
            total += 3 * k.flops
    return total


# ---------------------------------------------------------------------------------------------
# Megatron's model-FLOPs formula (what MFU counts).
# ---------------------------------------------------------------------------------------------
def megatron_model_flops(ms: ModelShape, sequences: float, seq: int, attention: Literal["causal", "full"] = "causal") -> float:
    """Model FLOPs of ``sequences`` sequences, forward and backward, no recompute: Megatron-LM's
    ``num_floating_point_operations`` (megatron/training/training.py, transformer branch):
    3 passes x 2 FLOPs per multiply-add over every GEMM (projections, MLP/experts with top-k and
    shared experts, MLA low-rank projections), attention scores and values over seq/2 keys
    (causal; 'full' counts seq keys, as Megatron did until 2025 and Narayanan et al. 2021 do),
    MTP projections and layers, and the logits of the main head and each MTP head. Sliding-window
    layers count their window. The router, norms and element-wise work are not counted."""
    h = ms.hidden
    tokens = sequences * seq
    per_token = 0.0
    kinds = list(ms.layer_kinds) + [ms.layer_kinds[-1]] * ms.mtp_layers
    for kind in kinds:
        swa = kind.endswith("_swa")
        keys = attention_keys(ms, seq, swa) if attention == "causal" else float(seq)
        if attention == "causal" and not swa:
            keys = seq / 2.0  # Megatron's exact convention (seq/2, not (seq+1)/2)
        per_token += _attention_weight_macs(ms) + keys * ms.heads * (ms.qk_dim + ms.v_dim)
        n_in = 3 if ms.gated else 2
        if kind.startswith("dense"):
            per_token += n_in * h * ms.ffn
        else:
            per_token += n_in * h * (ms.expert_ffn * ms.top_k + ms.shared_ffn)
    per_token += ms.mtp_layers * (3 * h + 2 * h * h)  # MTP norms (as Megatron writes them) and eh_proj
    per_token += h * ms.vocab * (1 + ms.mtp_layers)
    return 6.0 * tokens * per_token


def _attention_weight_macs(ms: ModelShape) -> float:
    """Multiply-adds per token of the attention projections."""
    h = ms.hidden
    if ms.attn_kind == "mla":
        q = ms.q_lora * (h + ms.heads * ms.qk_dim + 1) if ms.q_lora else h * ms.heads * ms.qk_dim
        kv_nope = ms.qk_dim - ms.rope_dim
        kv = ms.kv_lora * (h + ms.heads * (kv_nope + ms.v_dim) + 1) + h * ms.rope_dim
        return q + kv + ms.heads * ms.v_dim * h
    q = ms.heads * ms.qk_dim
    kv = 2 * ms.kv_heads * ms.qk_dim
    return h * (q + kv) + q * h


def narayanan_flops(batch: float, seq: int, layers: int, hidden: int, vocab: int, recompute: bool) -> float:
    """Narayanan et al. 2021 (arXiv 2104.04473, appendix) closed form for GPT models:
    96*B*s*l*h^2*(1 + s/6h + V/16lh) with full recompute, 72*B*s*l*h^2*(1 + s/6h + V/12lh) without
    (full attention square, 4x MLP, tied vocabulary head)."""
    base = batch * seq * layers * hidden**2
    if recompute:
        return 96 * base * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    return 72 * base * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def block_names(ms: ModelShape) -> tuple[str, ...]:
    """Distinct decoder-layer block kinds of the model."""
    return tuple(sorted(set(ms.layer_kinds)))


__all__ = [
    "Gemm", "FusedAttention", "Stream", "Kernel", "ModelShape", "Shard", "model_shape", "block_kernels",
    "hardware_flops", "model_flops_of", "megatron_model_flops", "narayanan_flops", "attention_keys",
    "routed_tokens", "block_names",
]
