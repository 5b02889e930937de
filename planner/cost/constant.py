"""Constant memory: weights, gradients and optimizer states on each pipeline rank.

Each parameter group is sharded by its own group (parallel folding, Megatron-Core MoE report
sec. 3): dense parameters by TP (or replicated, see planner.specs.params) and PP, their optimizer
states by the distributed optimizer over DP*CP; expert parameters by ETP*EP and PP, their
optimizer states over expert-DP. Byte counts per parameter follow the precision recipe:

* Megatron default: bf16 weights (2 B), fp32 main gradients (4 B), fp32 master weights and Adam
  m and v (12 B) - the 6 + 12/d bytes of Megatron's theoretical-memory estimator.
* BF16 moments: m and v in bf16 (precision-aware optimizer, --exp-avg-dtype bf16): 4 + 4 B.
* FP8 (precision=fp8): FP8 primary weights (--fp8-param-gather) keep 1 B per GEMM weight plus the
  transposed (Hopper) or column-wise (Blackwell MXFP8) copy the backward GEMMs read, so GEMM
  weights still take about 2 B; the saving is in the DP all-gather, not in resident memory.
* NVFP4 (precision=nvfp4): NVFP4 primary weights (--fp4-param-gather, Megatron-Core
  fp4_utils.quantize_nvfp4_param_shard casts the fp32 master shard into them) replace the bf16
  weights of the GEMMs: a row-wise and a column-wise copy (NVFP4 GEMMs take only the TN layout,
  Transformer Engine docs/features/low_precision_training/nvfp4 "Handling transposes"), each half
  a byte per element plus an E4M3 scale per 16: 2 x 0.5625 = 1.125 B. The embedding and output
  layer stay bf16 (Transformer Engine casts neither); the fp32 master weights stay in the optimizer.

Gradients: the main-gradient buffer is fp32 (4 B) by default and bf16 (2 B) with
--grad-reduce-in-bf16 (grad_reduce=bf16); then the distributed optimizer's step casts its shard
to fp32 (an optimizer-step temporary, planner.cost.compose.Costs.optimizer_transient).

ZeRO-2 (Megatron-FSDP optim_grads) also shards gradients; FSDP (optim_grads_params) shards weights
too; HSDP shards over its sharding group only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.arrays import Num, hashable, maximum, minimum
from planner.cost.flops import NVFP4
from planner.specs.params import Block, embedding_block, head_block, layer_block, mtp_block


FP4_WEIGHT_BYTES = 2 * NVFP4
"""Bytes per GEMM weight with NVFP4 primary weights: the row-wise and the column-wise NVFP4 copy."""


@dataclass(frozen=True)
class RankParams:
    """Parameters held by one GPU of a pipeline rank, by optimizer group."""

    dense: Num
    """Non-expert parameters on this GPU (after TP sharding)."""
    expert: Num
    """Routed-expert parameters on this GPU (after ETP*EP sharding)."""
    largest_layer: Num
    """Parameters of the largest decoder layer on this GPU (FSDP gathers one layer at a time)."""


def _per_gpu(block: Block, tp, nkv: int, etp, ep) -> tuple[Num, Num]:
    """(dense, expert) parameters of ``block`` on one GPU, by Megatron's sharding of each
    component (planner.specs.params): TP-split linears and vocabulary-parallel tables / tp, K/V /
    min(tp, kv heads), replicated norms, routers and MLA down-projections whole, routed experts /
    (ep * etp). Degrees may be arrays."""
    dense: Num = 0.0
    expert: Num = 0.0
    for c in block.components:
        if c.shard == "expert":
            expert += c.params / (etp * ep)
        elif c.shard in ("tp", "vocab"):
            dense += c.params / tp
        elif c.shard == "tp_kv":
            dense += c.params / minimum(tp, nkv)
        else:
            dense += c.params
    return dense, expert


_BLOCKS: dict[tuple, tuple[object, tuple[Num, Num]]] = {}


def block_params(model, block: str, tp, ep, etp) -> tuple[Num, Num]:
    """:func:`_per_gpu` of one block by name ('dense'/'moe' layer, 'embedding', 'head', 'mtp'),
    cached per model object for scalar degrees (array degrees give arrays)."""
    key = (id(model), block, tp, ep, etp) if hashable(tp, ep, etp) else None
    hit = _BLOCKS.get(key) if key is not None else None
    if hit is not None and hit[0] is model:
        return hit[1]
    named = {"embedding": embedding_block, "head": head_block, "mtp": mtp_block}.get(block)
    out = _per_gpu(named(model) if named else layer_block(model, block), tp, model.attention.num_kv_heads, etp, ep)
    if key is not None:
        _BLOCKS[key] = (model, out)
    return out


def rank_params_of(model, layout, rank: int, tp, etp, ep) -> RankParams:
    """Parameters of pipeline rank ``rank`` per GPU.

    The embedding sits with 'E', the final norm and output head with 'L'. With tied embeddings
    and PP > 1, and for MTP modules on a rank without the embedding, Megatron builds a copy of the
    word embedding there (GPTModel builds ``embedding`` when pre_process or mtp_process), kept in
    sync through the embedding group."""
    nkv = model.attention.num_kv_heads
    blocks = {k: layer_block(model, k) for k in set(model.layer_kinds)}
    per_kind = {k: _per_gpu(b, tp, nkv, etp, ep) for k, b in blocks.items()}
    emb = embedding_block(model)
    dense: Num = 0.0
    expert: Num = 0.0
    largest = 0.0
    has_embedding = False
    needs_embedding_copy = False
    for st in layout.rank_stages(rank):
        for li in st.layers:
            d, e = per_kind[model.layer_kinds[li]]
            dense, expert = dense + d, expert + e
            largest = maximum(largest, d + e)
        if st.embedding:
            d, _ = _per_gpu(emb, tp, nkv, etp, ep)
            dense += d
            has_embedding = True
        if st.loss:
            d, _ = _per_gpu(head_block(model), tp, nkv, etp, ep)
            dense += d
            if model.tie_embeddings:
                needs_embedding_copy = True
        if st.mtp:
            d, e = _per_gpu(mtp_block(model), tp, nkv, etp, ep)
            dense, expert = dense + d * st.mtp, expert + e * st.mtp
            largest = maximum(largest, d + e)
            needs_embedding_copy = True
    if needs_embedding_copy and not has_embedding:
        dense += model.vocab_size * model.hidden_size / tp
    return RankParams(dense, expert, largest)


def embedding_head_params(model, layout, rank: int, tp) -> Num:
    """Dense parameters of the embedding and output-layer blocks one GPU of pipeline rank ``rank``
    holds, with the word-embedding copy :func:`rank_params_of` counts on a rank without the
    embedding (tied head, MTP): the parameters Transformer Engine does not cast to FP8."""
    out: Num = 0.0
    has_embedding = needs_copy = False
    for st in layout.rank_stages(rank):
        if st.embedding:
            out = out + block_params(model, "embedding", tp, 1, 1)[0]
            has_embedding = True
        if st.loss:
            out = out + block_params(model, "head", tp, 1, 1)[0]
            needs_copy = needs_copy or model.tie_embeddings
        if st.mtp:
            needs_copy = True
    if needs_copy and not has_embedding:
        out = out + model.vocab_size * model.hidden_size / tp
    return out


@dataclass(frozen=True)
class ConstantMemory:
    weights: Num
    gradients: Num
    optimizer: Num
    """Master weights and moments left on the GPU (0 when offloaded)."""
    host_optimizer: Num
    """Bytes of optimizer state (and the pinned gradient copy) kept in host memory."""
    fsdp_buffers: Num
    """FSDP/ZeRO buffers: gathered full layers (current and prefetched) and the unsharded gradient
    of the layer being reduce-scattered. Reported with the communication buffers (DESIGN.md 3.4)."""

    @property
    def total(self) -> Num:
        """Weights, gradients and optimizer states (the FSDP buffers count as communication)."""
        return self.weights + self.gradients + self.optimizer

    def at(self, i: int) -> ConstantMemory:
        """The bytes of plan ``i`` of a batch (fields may be arrays over plans)."""
        pick = lambda x: float(x[i]) if np.ndim(x) else float(x)  # noqa: E731
        return ConstantMemory(pick(self.weights), pick(self.gradients), pick(self.optimizer),
                              pick(self.host_optimizer), pick(self.fsdp_buffers))


def constant_bytes(rp: RankParams, *, dp, cp, edp, sharding, moments: str, offload_optimizer: bool,
                   grad_bytes: float = 4.0, fp4_weights: bool = False, bf16_dense: Num = 0.0) -> ConstantMemory:
    """Bytes of weights, gradients and optimizer states for a rank's parameters (scalars or
    arrays of degrees). ``grad_bytes`` is the main-gradient dtype's size: 4 (fp32, Megatron's
    default) or 2 (--grad-reduce-in-bf16, the plan's grad_reduce=bf16). ``fp4_weights``: NVFP4
    primary weights (--fp4-param-gather) for every parameter but ``bf16_dense`` (the embedding and
    output layer on this GPU), at :data:`FP4_WEIGHT_BYTES`."""
    d_dense = dp * cp  # Megatron's distributed optimizer shards over DP x CP
    d_expert = edp
    sh = sharding
    w_b, g_b = 2.0, grad_bytes
    o_b = 4.0 + (4.0 if moments == "bf16" else 8.0)

    def shard(kind: str, n_dense, n_expert):
        """Per-GPU parameter count of one state class under the sharding."""
        if sh.kind == "hsdp":
            return (n_dense + n_expert) / sh.group
        full = {"ddp": (), "dist_opt": ("opt",), "zero2": ("opt", "grad"), "fsdp": ("opt", "grad", "weight")}[sh.kind]
        if kind in full:
            return n_dense / d_dense + n_expert / d_expert
        return n_dense + n_expert

    weights = w_b * shard("weight", rp.dense, rp.expert)
    if fp4_weights:
        weights = weights - (w_b - FP4_WEIGHT_BYTES) * shard("weight", rp.dense - bf16_dense, rp.expert)
    grads = g_b * shard("grad", rp.dense, rp.expert)
    opt = o_b * shard("opt", rp.dense, rp.expert)
    host = 0.0 * opt
    if offload_optimizer:
        # Megatron --optimizer-cpu-offload (fraction 1.0): master weights and moments live in host
        # memory, with a pinned host copy of the fp32 gradient shard to update from.
        host = opt + 4.0 * shard("opt", rp.dense, rp.expert)
        opt = 0.0 * opt
    sharded_over = sh.group if sh.kind == "hsdp" else d_dense
    buffers = 0.0 * opt
    if sh.kind in ("fsdp", "hsdp"):
        # One layer gathered for compute and the next prefetched (Megatron-FSDP double buffer).
        buffers = buffers + 2 * w_b * rp.largest_layer * (sharded_over > 1)
    if sh.kind in ("zero2", "fsdp", "hsdp"):
        # A layer's full gradient exists until its reduce-scatter completes.
        buffers = buffers + g_b * rp.largest_layer * (sharded_over > 1)
    return ConstantMemory(weights, grads, opt, host, buffers)
