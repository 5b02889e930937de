"""Pipeline ranks, the schedule, the optimizer step and offload.

A pipeline rank's time per micro-batch is the sum over its virtual stages (chunks) of their blocks'
forward, backward, recompute and exposed communication. The schedule combines the ranks:

- 1F1B (Narayanan et al. 2021, sec. 2.2): the pipeline fills through every stage once and then
  runs at the pace of the slowest stage, ``T = sum_r t_r + (m - 1) * max_r t_r``; for uniform
  stages the bubble is (p - 1)/m of the ideal time;
- interleaved 1F1B with v chunks per rank: the fill and drain pass chunks of 1/v the size,
  ``T = m * max_r t_r + (sum_r t_r - max_r t_r) / v``, which for uniform stages gives Narayanan's
  bubble fraction (p - 1)/(v m).

After the last backward come the exposed part of the data-parallel gradient reduce-scatter and the
optimizer step (memory bound: the local shard's master weights, moments and gradients streamed
through HBM once), or, with optimizer offload, the gradient/parameter transfers over the host link
and the CPU Adam step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from planner.cost.arrays import Count, Num, maximum, minimum
from planner.cost.comm import CommCost, dp_time, overlapped
from planner.cost.compute import BlockTime
from planner.cost.flops import BF16, FP8, FP32, NVFP4, ModelShape
from planner.cost.rates import Rates
from planner.cost.topology import GroupSpan


# ---------------------------------------------------------------------------------------------
# The schedule (pure).
# ---------------------------------------------------------------------------------------------
def pipeline_time(rank_times: Sequence[Num], micro_batches: Count, vpp: int = 1) -> Num:
    """Time of the forward/backward phase of one step: ``m * max + (sum - max) / v`` (equals the
    1F1B ``sum + (m - 1) * max`` when v = 1). Rank times and m may be arrays (elementwise)."""
    slowest = maximum(*rank_times)
    return micro_batches * slowest + (sum(rank_times) - slowest) / vpp


def bubble_fraction(pp: int, vpp: int, micro_batches: int) -> Num:
    """Idle share relative to the ideal time for uniform stages: (p - 1) / (v m)."""
    t = pipeline_time([1.0] * pp, micro_batches, vpp)
    return (t - micro_batches) / micro_batches


# ---------------------------------------------------------------------------------------------
# What each chunk holds.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockCost:
    """One block's time for one micro-batch, with its communication (``count`` blocks alike)."""

    name: str
    count: Count
    time: BlockTime
    comm: tuple[CommCost, ...]
    layer: Any = None
    """The block's pieces as the schedule walk cuts them (planner.cost.phases.block_layer): a
    LayerTimes whose fields are arrays over block keys like ``time``'s."""
    wgrad_kept: Any = 0.0
    """Bytes one micro-batch holds between the block's input- and weight-gradient passes under a
    schedule that splits them (planner.cost.phases.wgrad_bytes)."""

    @cached_property
    def compute(self) -> Num:
        return self.count * (self.time.fwd + self.time.bwd)

    @cached_property
    def exposed(self) -> Num:
        """Exposed communication seconds of the ``count`` blocks."""
        return self.count * sum(c.exposed for c in self.comm)


@dataclass(frozen=True)
class RankCost:
    """One pipeline rank, one micro-batch: its chunks' blocks, pipeline p2p, and per-step terms.

    With ``keys``, the blocks' numbers are arrays over distinct block keys (what a block's cost
    depends on) and ``keys`` maps each plan of the batch to its block key: sums are formed over
    the blocks first and then read for the plans. Without it they are the plans' own numbers."""

    rank: int
    """The first rank with these blocks (ranks with equal blocks share one RankCost)."""
    blocks: tuple[BlockCost, ...]
    p2p_total: Num
    p2p_exposed: Num
    keys: Any = None

    def _plans(self, x):
        return x[self.keys] if self.keys is not None and np.ndim(x) else x

    def sum(self, attr: str) -> Num:
        return self._plans(sum(b.count * getattr(b.time, attr) for b in self.blocks))

    @cached_property
    def fwd(self) -> Num:
        return self.sum("fwd")

    @cached_property
    def bwd(self) -> Num:
        return self.sum("bwd")

    @cached_property
    def compute(self) -> Num:
        """Forward and backward seconds per micro-batch, recompute included."""
        return self._plans(sum(b.compute for b in self.blocks))

    def comm(self, exposed: bool = True) -> dict[str, Num]:
        out: dict[str, Num] = {}
        for b in self.blocks:
            for c in b.comm:
                out[c.cause] = out.get(c.cause, 0.0) + b.count * (c.exposed if exposed else c.total)
        return {k: self._plans(v) for k, v in out.items()}

    @cached_property
    def per_microbatch(self) -> Num:
        """Seconds per micro-batch on this rank: compute plus exposed communication."""
        return self._plans(sum(b.compute + b.exposed for b in self.blocks)) + self.p2p_exposed


@lru_cache(maxsize=65536)
def chunk_blocks(ms: ModelShape, layers: tuple[int, ...], embedding: bool, loss: bool, mtp: int,
                 full_layers: int) -> tuple[tuple[str, int, bool], ...]:
    """(block, count, fully recomputed) of one chunk; the first ``full_layers`` decoder layers are
    fully recomputed (Megatron's block method)."""
    out: list[tuple[str, int, bool]] = []
    if embedding:
        out.append(("embedding", 1, False))
    full = Counter(ms.layer_kinds[i] for i in layers[:full_layers])
    rest = Counter(ms.layer_kinds[i] for i in layers[full_layers:])
    out += [(k, n, True) for k, n in sorted(full.items())]
    out += [(k, n, False) for k, n in sorted(rest.items())]
    if mtp:
        out.append(("mtp", mtp, False))
    if loss:
        out.append(("head", 1, False))
    return tuple(out)


def rank_blocks(ms: ModelShape, chunks, recompute, full_layers_per_chunk: tuple[int, ...]) -> list[tuple[str, int, object, bool]]:
    """(block, count, recompute setting of its compute, fully recomputed) of every block of a rank's
    chunks, in order. Recompute covers decoder layers (Megatron recomputes inside TransformerBlock);
    the embedding, the output layer/loss and the MTP head are never recomputed."""
    out = []
    for chunk, n_full in zip(chunks, full_layers_per_chunk):
        for name, count, is_full in chunk_blocks(ms, chunk.layers, chunk.embedding, chunk.loss, chunk.mtp, n_full):
            rc = "full" if is_full else (recompute if name not in ("embedding", "head", "mtp") else None)
            out.append((name, count, rc, is_full))
    return out


def rank_p2p(t_p2p: Num, pp: int, vpp: int, compute: Num, p2p_overlap: bool, rates: Rates) -> tuple[Num, Num]:
    """(total, exposed) pipeline send/receive seconds of one rank per micro-batch: each micro-batch
    crosses each of the rank's chunk boundaries forward and backward (``t_p2p`` each); with
    ``p2p_overlap`` it runs behind the rank's ``compute``."""
    p2p_total = 2 * vpp * t_p2p if pp > 1 else 0.0
    if p2p_overlap:
        p2p_exposed = overlapped(p2p_total, compute, rates.overlap_interference)
    else:
        p2p_exposed = p2p_total
    return p2p_total, p2p_exposed


# ---------------------------------------------------------------------------------------------
# Local parameters and the optimizer step.
# ---------------------------------------------------------------------------------------------
def param_tensors(model, chunks, ep) -> Num:
    """Parameter tensors one GPU of a pipeline rank holds, as Megatron-Core's modules keep them
    (fused QKV weight, fc1 with gate and up together, one weight and bias per norm, two or four
    tensors per expert); what the local spec's per-tensor optimizer loops iterate. ``ep`` may be an
    array."""
    a, ffn, moe = model.attention, model.ffn, model.moe
    norm = 2 if model.norm == "layernorm" else 1
    if a.kind == "mla":
        attn = (2 + norm if a.q_lora_rank else 1) + 2 + norm + 1  # q down/up/norm or q; kv down/up/norm; out
    else:
        attn = 2 + a.qkv_bias + a.output_bias + 2 * a.qk_norm
    mlp = 2 * (2 if ffn.bias else 1)
    n = 0.0
    for ch in chunks:
        for i in ch.layers:
            kind = model.layer_kinds[i]
            n += attn + 2 * norm
            if kind == "dense":
                n += mlp
            else:
                n += 1 + moe.router_bias + moe.router_linear_bias
                n += moe.num_experts / ep * 2 * (2 if moe.expert_bias else 1) + (2 if moe.shared_hidden else 0)
        if ch.embedding:
            n += 1 + (model.position_embedding == "learned")
        if ch.loss:
            n += norm + 1
    return n


# torch.optim.AdamW (foreach; what get_megatron_optimizer builds without Apex or Transformer
# Engine) per fp32 parameter: decoupled weight decay p *= 1 - lr wd (4 + 4), m.lerp_(g) (4 + 4 + 4),
# v *= beta2 (4 + 4), v.addcmul_(g, g) (4 + 4 + 4), sqrt(v) into a temporary (4 + 4), its division by
# the bias correction (4 + 4) and the eps add (4 + 4), p.addcdiv_(m, denominator) (4 + 4 + 4 + 4):
# 80 bytes in eight multi-tensor passes. Profiled on one H200 (1.14 B parameters): 24.3 ms of these
# kernels, 3.8 TB/s.
TORCH_ADAMW_BYTES_PER_PARAM = 80
# Megatron's torch fallbacks of the Apex multi-tensor kernels around it: the gradient L2 norm
# (torch.norm of each tensor: read 4), the clip (local_multi_tensor_scale, dst.copy_(src * scale):
# 4 + 4 and a device copy 4 + 4) and the copy of the updated fp32 main parameters into the bf16
# model parameters (4 + 2); one op per tensor for each, and the norm fallback turns the list of
# per-tensor norms into a host tensor (a device-to-host read per tensor): profiled 27 reduce, 27
# scale, 27 device-copy and 27 fp32->bf16 kernels per step for the 27 tensors of the dense model.
TORCH_OPT_EXTRA_BYTES_PER_PARAM = 4 + 8 + 8 + 6
TORCH_OPT_KERNELS_PER_TENSOR = 4
# torch's multi_tensor_apply launches one kernel per 320 chunks of 65536 elements (or per 110
# tensors): eight foreach ops over the parameters (profiled: 56 launches per op for 1.14 B).
FOREACH_ELEMENTS_PER_LAUNCH = 320 * 65536
FOREACH_TENSORS_PER_LAUNCH = 110
TORCH_ADAMW_FOREACH_OPS = 8


def optimizer_bytes_per_param(moments: str) -> Num:
    """HBM bytes per updated parameter of a mixed-precision Adam step (Megatron's fused Adam over
    the distributed-optimizer shard): read and write the fp32 master weight and both moments, read
    the fp32 gradient, write the bf16 model weight."""
    m = 2 if moments == "bf16" else FP32
    return 2 * FP32 + 2 * 2 * m + FP32 + 2


def optimizer_time(shard_params: Num, local_params_: Num, moments: str, rates: Rates,
                   override: Num | None = None, tensors: Num = 0.0) -> Num:
    """Memory-bound optimizer step on the GPU: the shard's update plus zeroing the local fp32
    gradient buffer; a few hundred multi-tensor-apply launches. With ``rates.torch_optimizer``
    (the local spec): torch AdamW's foreach passes and Megatron's per-tensor torch fallbacks
    (:data:`TORCH_ADAMW_BYTES_PER_PARAM`), their launches, and per tensor the host's issue time,
    which the norm's read-back of every tensor keeps from overlapping (``tensors``: parameter
    tensors of the shard, :func:`param_tensors`). Profiled on one H200: 34.8 / 24.4 / 36 ms for
    1.14 B (27 tensors) / 0.76 B (36) / 0.86 B (159 tensors) parameters."""
    if rates.torch_optimizer and override is None:
        per_t = TORCH_ADAMW_BYTES_PER_PARAM + TORCH_OPT_EXTRA_BYTES_PER_PARAM
        foreach = TORCH_ADAMW_FOREACH_OPS * (shard_params / FOREACH_ELEMENTS_PER_LAUNCH
                                             + tensors / FOREACH_TENSORS_PER_LAUNCH)
        kernels = foreach + TORCH_OPT_KERNELS_PER_TENSOR * tensors
        nbytes = shard_params * per_t + local_params_ * FP32
        return nbytes / rates.hbm_bw + kernels * rates.kernel_overhead_s + tensors * rates.host_launch_s
    per: Num = override if override is not None else optimizer_bytes_per_param(moments)
    nbytes = shard_params * per + local_params_ * FP32
    return nbytes / rates.hbm_bw + 200 * rates.kernel_overhead_s


def offloaded_optimizer_time(shard_params: Num, rates: Rates) -> tuple[Num, Num, Num]:
    """(total, transfer, cpu) seconds of an optimizer step on the host (Megatron's
    --optimizer-cpu-offload with --overlap-cpu-optimizer-d2h-h2d): fp32 gradients down and bf16
    weights up the host link (full duplex, pipelined with the CPU Adam of earlier buckets)."""
    transfer = shard_params * FP32 / rates.host_bw
    cpu = shard_params / rates.cpu_adam_params_per_s
    return maximum(transfer, cpu), transfer, cpu


def optimizer_step_time(shard_params: Num, local_params_: Num, moments: str, offload: bool, rates: Rates,
                        override: Num | None = None, tensors: Num = 0.0) -> Num:
    """Seconds of the optimizer step: on the host with optimizer offload, else on the GPU."""
    if offload:
        return offloaded_optimizer_time(shard_params, rates)[0]
    return optimizer_time(shard_params, local_params_, moments, rates, override, tensors)


def sync_kind(sharding, fsdp2: bool = False) -> tuple[str, bool]:
    """How a sharding setting syncs data-parallel replicas: the :func:`data_parallel` mode ('ddp':
    all-reduce, 'sharded': reduce-scatter and all-gather) and whether it syncs per micro-batch
    (FSDP, HSDP; and ZeRO-2 where ``fsdp2``, see :func:`fsdp_gathers`)."""
    per_micro_batch = sharding.kind in ("fsdp", "hsdp") or (fsdp2 and sharding.kind == "zero2")
    return ("ddp" if sharding.kind == "ddp" else "sharded"), per_micro_batch


def fsdp_gathers(sharding) -> int:
    """Parameter all-gathers per micro-batch of a sharding that syncs per micro-batch: FSDP/HSDP
    gather before the forward and again before the backward (resharded after forward); torchtitan's
    ZeRO-2 (FSDP2 with fsdp_reshard_after_forward 'never') keeps the parameters from the forward to
    the backward but still reshards after each backward (fully_shard's reshard_after_backward
    default), so it gathers once per micro-batch. Its gradients are reduce-scattered after every
    micro-batch's backward like FSDP's: torchtitan's train_step runs the micro-batches of gradient
    accumulation as plain forward-backward steps and never turns off FSDP2's gradient sync
    (torchtitan/train.py Trainer.train_step, v0.1.0 to v0.2.2: no set_requires_gradient_sync)."""
    return 1 if sharding.kind == "zero2" else 2


def optimizer_shard(sharding, dense: Num, expert: Num, dp: int, cp: int, edp: int) -> Num:
    """Parameters whose optimizer state one GPU updates: everything with DDP, the sharding group's
    share with HSDP, else dense parameters over DP x CP and experts over expert-DP (degrees may be
    arrays)."""
    if sharding.kind == "ddp":
        return dense + expert
    if sharding.kind == "hsdp":
        return dense / sharding.group + expert / maximum(1, minimum(sharding.group, edp))
    return dense / (dp * cp) + expert / edp


GATHER_BYTES: dict[str, float] = {"bf16": BF16, "fp8": FP8, "fp4": NVFP4}
"""Bytes per parameter of the data-parallel parameter all-gather by the plan's param_gather:
Megatron gathers its parameter buffer, which --fp8-param-gather / --fp4-param-gather make the
quantized row-wise weights (megatron/core/fp8_utils.py, fp4_utils.py quantize_*_param_shard)."""


def data_parallel(dense: Num, expert: Num, spans: dict[str, GroupSpan], sharding: str, rates: Rates,
                  param_bytes: Num, grad_bytes: Num = FP32, bf16_dense: Num = 0.0) -> tuple[Num, Num]:
    """(gradient, parameter-gather) seconds of one rank's data-parallel sync per step: dense
    parameters over DP x CP, experts over expert-DP. Megatron reduces the main-grad buffer in its
    dtype (``grad_bytes``: fp32, or bf16 with --grad-reduce-in-bf16) and gathers parameters in
    ``param_bytes`` (bf16, or 1 B with --fp8-param-gather); ``bf16_dense`` of the dense parameters
    (the embedding and output layer, which Transformer Engine does not cast) are gathered in bf16
    whatever ``param_bytes`` is. Norm weights and biases count at ``param_bytes``."""
    sharded = sharding != "ddp"
    dense_param = (dense - bf16_dense) * param_bytes + bf16_dense * BF16
    g1, p1 = dp_time(dense * grad_bytes, dense_param, spans["dpcp"], sharded, rates)
    g2, p2 = dp_time(expert * grad_bytes, expert * param_bytes, spans["edp"], sharded, rates)
    return g1 + g2, p1 + p2


def dp_exposure(grad: Num, param: Num, fsdp: bool, micro_batches: Count, fwd: Num, bwd: Num, rates: Rates,
                dp_overlap: bool, gathers: int = 2) -> tuple[Num, Num, Num, Num, Num, Num]:
    """(gradient, its exposed part, parameter gather, its exposed part, FSDP traffic, its exposed
    part) seconds of one rank's data-parallel sync per step, from its :func:`data_parallel` times
    and its forward/backward seconds per micro-batch (scalars or arrays).

    Distributed optimizer / ZeRO: the gradient reduce-scatter hides behind the last backward and
    the parameter all-gather behind the first forward (with ``dp_overlap``). FSDP/HSDP gathers the
    parameters before each micro-batch's forward and backward and reduce-scatters the gradients
    after each backward, prefetched behind the rank's compute (``gathers`` parameter all-gathers
    per micro-batch: :func:`fsdp_gathers`)."""
    interf = rates.overlap_interference
    fsdp_tot: Num = 0.0
    fsdp_exp: Num = 0.0
    if fsdp:
        fsdp_tot = micro_batches * (gathers * param + grad)
        fsdp_exp = overlapped(fsdp_tot, micro_batches * (fwd + bwd), interf)
        grad = param = 0.0
    cap_g = bwd if dp_overlap else 0.0
    cap_p = fwd if dp_overlap else 0.0
    return grad, overlapped(grad, cap_g, interf), param, overlapped(param, cap_p, interf), fsdp_tot, fsdp_exp
