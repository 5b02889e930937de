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
from dataclasses import dataclass
from functools import lru_cache

from planner.cost.arrays import hashable, maximum, minimum
from planner.cost.comm import CommCost, CommFlags, block_comm, dp_time, overlapped, pp_p2p_time
from planner.cost.compute import BlockTime, block_time
from planner.cost.flops import FP32, ModelShape, Shard
from planner.cost.rates import Rates
from planner.cost.topology import GroupSpan


# ---------------------------------------------------------------------------------------------
# The schedule (pure).
# ---------------------------------------------------------------------------------------------
def pipeline_time(rank_times: list[float] | tuple[float, ...], micro_batches: int, vpp: int = 1) -> float:
    """Time of the forward/backward phase of one step: ``m * max + (sum - max) / v`` (equals the
    1F1B ``sum + (m - 1) * max`` when v = 1). Rank times and m may be arrays (elementwise)."""
    slowest = maximum(*rank_times)
    return micro_batches * slowest + (sum(rank_times) - slowest) / vpp


def bubble_fraction(pp: int, vpp: int, micro_batches: int) -> float:
    """Idle share relative to the ideal time for uniform stages: (p - 1) / (v m)."""
    t = pipeline_time([1.0] * pp, micro_batches, vpp)
    return (t - micro_batches) / micro_batches


# ---------------------------------------------------------------------------------------------
# What each chunk holds.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockCost:
    """One block's time for one micro-batch, with its communication."""

    name: str
    count: int
    time: BlockTime
    comm: tuple[CommCost, ...]

    @property
    def compute(self) -> float:
        return self.count * (self.time.fwd + self.time.bwd)


@dataclass(frozen=True)
class RankCost:
    """One pipeline rank, one micro-batch: its chunks' blocks, pipeline p2p, and per-step terms."""

    rank: int
    blocks: tuple[BlockCost, ...]
    p2p_total: float
    p2p_exposed: float

    def sum(self, attr: str) -> float:
        return sum(b.count * getattr(b.time, attr) for b in self.blocks)

    @property
    def fwd(self) -> float:
        return self.sum("fwd")

    @property
    def bwd(self) -> float:
        return self.sum("bwd")

    def comm(self, exposed: bool = True) -> dict[str, float]:
        out: dict[str, float] = {}
        for b in self.blocks:
            for c in b.comm:
                out[c.cause] = out.get(c.cause, 0.0) + b.count * (c.exposed if exposed else c.total)
        return out

    @property
    def per_microbatch(self) -> float:
        """Seconds per micro-batch on this rank: compute plus exposed communication."""
        return self.fwd + self.bwd + sum(self.comm().values()) + self.p2p_exposed


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


@dataclass(frozen=True)
class Spans:
    """The group spans a block's communication needs (hashable, for memoization)."""

    tp: GroupSpan
    cp: GroupSpan
    ep: GroupSpan
    etp: GroupSpan
    pp: GroupSpan

    def as_dict(self) -> dict[str, GroupSpan]:
        return {"tp": self.tp, "cp": self.cp, "ep": self.ep, "etp": self.etp, "pp": self.pp}


@lru_cache(maxsize=65536)
def block_cost(ms: ModelShape, sh: Shard, name: str, count: int, rates: Rates, recompute, spans: Spans,
               flags: CommFlags) -> BlockCost:
    bt = block_time(ms, sh, name, rates, recompute)
    comm = block_comm(ms, sh, name, bt, spans.as_dict(), rates, flags)
    return BlockCost(name, count, bt, comm)


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


def full_flags(flags: CommFlags) -> CommFlags:
    """The switches of a fully recomputed layer inside a plan with other settings."""
    return CommFlags(flags.tp_overlap, flags.ep_overlap, "full", flags.fp8_dispatch)


def rank_cost(ms: ModelShape, sh: Shard, rank: int, chunks, rates: Rates, recompute, spans: Spans,
              flags: CommFlags, full_layers_per_chunk: tuple[int, ...], vpp: int, p2p_overlap: bool) -> RankCost:
    """Cost of pipeline rank ``rank`` for one micro-batch. ``chunks`` are its VirtualStages;
    ``p2p_overlap``: send/receive runs behind compute (interleaved schedule in Megatron-Core)."""
    blocks = [block_cost(ms, sh, name, count, rates, rc, spans, full_flags(flags) if is_full else flags)
              for name, count, rc, is_full in rank_blocks(ms, chunks, recompute, full_layers_per_chunk)]
    compute = sum(b.compute for b in blocks)
    p2p_total, p2p_exposed = rank_p2p(pp_p2p_time(ms, sh, spans.pp, rates), spans.pp.size, vpp, compute,
                                      p2p_overlap, rates)
    return RankCost(rank, tuple(blocks), p2p_total, p2p_exposed)


def rank_p2p(t_p2p: float, pp: int, vpp: int, compute: float, p2p_overlap: bool, rates: Rates) -> tuple[float, float]:
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
_PARAMS: dict[tuple, tuple[object, tuple[float, float]]] = {}


def block_params(model, block: str, tp: int, ep: int, etp: int) -> tuple[float, float]:
    """(dense, expert) parameters of one block ('dense'/'moe' layer, 'embedding', 'head', 'mtp') on
    one GPU, by Megatron's sharding of each component (planner.specs.params): TP-split linears /
    tp, K/V / min(tp, kv heads), replicated norms/router/MLA down-projections whole,
    vocabulary-parallel tables / tp, experts / (ep*etp). Cached per model object for scalar
    degrees; array degrees give arrays."""
    cache = hashable(tp, ep, etp)
    key = (id(model), block, tp, ep, etp) if cache else None
    hit = _PARAMS.get(key) if cache else None
    if hit is not None and hit[0] is model:
        return hit[1]
    from planner.specs import params as P

    b = {"embedding": P.embedding_block, "head": P.head_block, "mtp": P.mtp_block}.get(block)
    blk = b(model) if b else P.layer_block(model, block)
    kv = model.attention.num_kv_heads
    div = {"tp": tp, "tp_kv": minimum(tp, kv), "replicated": 1, "vocab": tp}
    dense = sum(c.params / div[c.shard] for c in blk.components if c.shard != "expert")
    expert = sum(c.params / (ep * etp) for c in blk.components if c.shard == "expert")
    if cache:
        _PARAMS[key] = (model, (dense, expert))
    return dense, expert


def local_params(model, chunks, tp: int, ep: int, etp: int, pp: int) -> tuple[float, float]:
    """(dense, expert) parameters one GPU of a pipeline rank holds (see :func:`block_params`).
    A tied output head keeps its own copy on the last stage when pp > 1. tp, ep and etp may be
    arrays."""
    kinds = model.layer_kinds
    dense = expert = 0.0
    for ch in chunks:
        names = [kinds[i] for i in ch.layers]
        if ch.embedding:
            names.append("embedding")
        if ch.loss:
            names.append("head")
            if model.tie_embeddings and pp > 1:
                dense += model.vocab_size * model.hidden_size / tp
        names += ["mtp"] * ch.mtp
        for name, n in Counter(names).items():
            d, e = block_params(model, name, tp, ep, etp)
            dense += n * d
            expert += n * e
    return dense, expert


def optimizer_bytes_per_param(moments: str) -> float:
    """HBM bytes per updated parameter of a mixed-precision Adam step (Megatron's fused Adam over
    the distributed-optimizer shard): read and write the fp32 master weight and both moments, read
    the fp32 gradient, write the bf16 model weight."""
    m = 2 if moments == "bf16" else FP32
    return 2 * FP32 + 2 * 2 * m + FP32 + 2


def optimizer_time(shard_params: float, local_params_: float, moments: str, rates: Rates,
                   override: float | None = None) -> float:
    """Memory-bound optimizer step on the GPU: the shard's update plus zeroing the local fp32
    gradient buffer; a few hundred multi-tensor-apply launches."""
    per = override if override is not None else optimizer_bytes_per_param(moments)
    nbytes = shard_params * per + local_params_ * FP32
    return nbytes / rates.hbm_bw + 200 * rates.kernel_overhead_s


def offloaded_optimizer_time(shard_params: float, rates: Rates) -> tuple[float, float, float]:
    """(total, transfer, cpu) seconds of an optimizer step on the host (Megatron's
    --optimizer-cpu-offload with --overlap-cpu-optimizer-d2h-h2d): fp32 gradients down and bf16
    weights up the host link (full duplex, pipelined with the CPU Adam of earlier buckets)."""
    transfer = shard_params * FP32 / rates.host_bw
    cpu = shard_params / rates.cpu_adam_params_per_s
    return maximum(transfer, cpu), transfer, cpu


def optimizer_step_time(shard_params: float, local_params_: float, moments: str, offload: bool, rates: Rates,
                        override: float | None = None) -> float:
    """Seconds of the optimizer step: on the host with optimizer offload, else on the GPU."""
    if offload:
        return offloaded_optimizer_time(shard_params, rates)[0]
    return optimizer_time(shard_params, local_params_, moments, rates, override)


def sync_kind(sharding) -> tuple[str, bool]:
    """How a sharding setting syncs data-parallel replicas: the :func:`data_parallel` mode ('ddp':
    all-reduce, 'sharded': reduce-scatter and all-gather) and whether parameters are gathered per
    micro-batch (FSDP, HSDP)."""
    return ("ddp" if sharding.kind == "ddp" else "sharded"), sharding.kind in ("fsdp", "hsdp")


def optimizer_shard(sharding, dense: float, expert: float, dp: int, cp: int, edp: int) -> float:
    """Parameters whose optimizer state one GPU updates: everything with DDP, the sharding group's
    share with HSDP, else dense parameters over DP x CP and experts over expert-DP (degrees may be
    arrays)."""
    if sharding.kind == "ddp":
        return dense + expert
    if sharding.kind == "hsdp":
        return dense / sharding.group + expert / maximum(1, minimum(sharding.group, edp))
    return dense / (dp * cp) + expert / edp


def data_parallel(dense: float, expert: float, spans: dict[str, GroupSpan], sharding: str, rates: Rates,
                  param_bytes: float) -> tuple[float, float]:
    """(gradient, parameter-gather) seconds of one rank's data-parallel sync per step: dense
    parameters over DP x CP, experts over expert-DP; fp32 gradients (Megatron reduces the fp32
    main-grad buffer), parameters gathered in their training dtype."""
    sharded = sharding != "ddp"
    g1, p1 = dp_time(dense * FP32, dense * param_bytes, spans["dpcp"], sharded, rates)
    g2, p2 = dp_time(expert * FP32, expert * param_bytes, spans["edp"], sharded, rates)
    return g1 + g2, p1 + p2


def dp_exposure(grad: float, param: float, fsdp: bool, micro_batches: int, fwd: float, bwd: float, rates: Rates,
                dp_overlap: bool) -> tuple[float, float, float, float, float, float]:
    """(gradient, its exposed part, parameter gather, its exposed part, FSDP traffic, its exposed
    part) seconds of one rank's data-parallel sync per step, from its :func:`data_parallel` times
    and its forward/backward seconds per micro-batch (scalars or arrays).

    Distributed optimizer / ZeRO: the gradient reduce-scatter hides behind the last backward and
    the parameter all-gather behind the first forward (with ``dp_overlap``). FSDP/HSDP gathers the
    parameters before each micro-batch's forward and backward and reduce-scatters the gradients
    after each backward, prefetched behind the rank's compute."""
    interf = rates.overlap_interference
    fsdp_tot = fsdp_exp = 0.0
    if fsdp:
        fsdp_tot = micro_batches * (2 * param + grad)
        fsdp_exp = overlapped(fsdp_tot, micro_batches * (fwd + bwd), interf)
        grad = param = 0.0
    cap_g = bwd if dp_overlap else 0.0
    cap_p = fwd if dp_overlap else 0.0
    return grad, overlapped(grad, cap_g, interf), param, overlapped(param, cap_p, interf), fsdp_tot, fsdp_exp
