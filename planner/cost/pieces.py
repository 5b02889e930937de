"""Per-micro-batch memory of a chunk's pieces and the peak over a pipeline schedule.

The seed's central lesson drives the structure: OOM is decided by what is held at the same moment.
Each rank's step is the op sequence of its pipeline schedule (planner.cost.schedule); at every op
the GPU holds constant memory + communication buffers + the activations of the micro-batch chunks
in flight + the op's own transient memory. The peak is the maximum of that sum over the step
(and over the optimizer step), never the sum of each class's maximum.

Per chunk (virtual stage) we precompute, from the activation inventory (planner.cost.activations):
* ``kept``: bytes the chunk holds from its forward until its backward (after recompute drops);
* ``fwd_rise``: the highest point above the memory before a forward of that chunk, reached while
  it runs (stored activations so far plus the current layer's transient buffers);
* ``bwd_rise``: the same for its backward: the incoming gradient, the recompute window (forward
  intermediates re-created, and their gradients of the same shape) and gradient buffers, while
  layers after the current one have already been freed.
The schedule gives the distinct in-flight count vectors before each op, so a rank's peak is an
exact maximum over a handful of dot products (:func:`peak_over_profiles`). The composition of a
plan's memory from these pieces is :mod:`planner.cost.compose`; its report is
:mod:`planner.cost.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from planner.cost import activations as act
from planner.cost.arrays import Num, _scalar, maximum, where
from planner.cost.efficiency_access import memory_constants
from planner.cost.flops import Shard
from planner.cost.schedule import inflight_table, offload_share, profile_microbatches
from planner.cost.schedules import inflight as schedule_inflight
from planner.specs.schedule import Schedule

BF16 = 2
FP32 = 4


@dataclass(frozen=True)
class LayerMemory:
    """One decoder layer (or the embedding/head/MTP piece) of a chunk, for one micro-batch."""

    name: str
    kept: Num
    """Bytes held from forward to backward."""
    fwd_transient: Num
    """Peak temporary bytes while its forward runs (dispatch buffers, gathered SP inputs...)."""
    bwd_transient: Num
    """Peak temporary bytes while its backward runs: incoming gradient, recompute window,
    gradient buffers."""
    full: Num
    """Bytes it would keep without recompute (what the recompute window re-creates)."""
    piece: object = None
    """Identity of the numbers: consecutive layers with the same piece form a run."""
    host: Num = 0.0
    """Bytes it keeps in host memory from forward to backward instead (layer-level CPU offload:
    :func:`offloaded_to_host`)."""

    def at(self, i: int) -> LayerMemory:
        """The numbers of plan ``i`` of a batch (fields may be arrays over plans)."""
        return LayerMemory(self.name, _at(self.kept, i), _at(self.fwd_transient, i), _at(self.bwd_transient, i),
                           _at(self.full, i), self.piece, _at(self.host, i))


def _at(x, i: int) -> Num:
    if type(x) is float:  # most of a chunk's fields in a memory report (zero transients, scalars)
        return x
    return float(x[i]) if np.ndim(x) else float(x)


@dataclass(frozen=True)
class ChunkMemory:
    """A virtual stage (model chunk) on one rank, for one micro-batch."""

    index: int
    layers: tuple[LayerMemory, ...]

    def at(self, i: int) -> ChunkMemory:
        """The chunk of plan ``i`` of a batch."""
        if i == 0:
            return self._first
        return ChunkMemory(self.index, tuple(layer.at(i) for layer in self.layers))

    @cached_property
    def _first(self) -> ChunkMemory:
        # A memory report reads its one plan's chunks twice (the pair rises and the stage).
        return ChunkMemory(self.index, tuple(layer.at(0) for layer in self.layers))

    def runs(self) -> tuple[tuple[LayerMemory, int], ...]:
        """Consecutive layers with identical numbers, as (layer, count)."""
        return self._runs

    @cached_property
    def _runs(self) -> tuple[tuple[LayerMemory, int], ...]:
        # Once per chunk: a memory report's pair rises read each chunk's runs some 30 times.
        out: list[list] = []
        for layer in self.layers:
            if out and layer.piece is not None and out[-1][0].piece == layer.piece:
                out[-1][1] += 1
            else:
                out.append([layer, 1])
        return tuple((layer, n) for layer, n in out)

    @cached_property
    def scalar(self) -> bool:
        """Whether its runs' kept and transient bytes are plain scalars (one plan's chunk)."""
        return all(_scalar(layer.kept) and _scalar(layer.fwd_transient) and _scalar(layer.bwd_transient)
                   for layer, _ in self._runs)

    def _run_sum(self, field: str) -> Num:
        total: Num = 0.0
        for layer, n in self.runs():
            total = total + n * getattr(layer, field)
        return total

    @cached_property
    def kept(self):
        return self._run_sum("kept")

    @cached_property
    def host_kept(self):
        """Bytes its layers keep in host memory for one micro-batch (layer-level CPU offload)."""
        return self._run_sum("host")

    @cached_property
    def fwd_rise(self):
        """Max over its layers of (kept by earlier layers + this layer's transient + its kept).
        Within a run of identical layers the last one is highest (kept bytes are >= 0)."""
        best: Num = 0.0
        run: Num = 0.0
        for layer, n in self.runs():
            run = run + n * layer.kept
            best = maximum(best, run + layer.fwd_transient)
        return best

    @property
    def fwd_rise_at(self) -> int:
        best: Num = 0.0
        run: Num = 0.0
        at = 0
        for i, layer in enumerate(self.layers):
            if run + layer.fwd_transient + layer.kept > best:
                best, at = run + layer.fwd_transient + layer.kept, i
            run += layer.kept
        return at

    @cached_property
    def bwd_rise(self):
        """Max over layers, last first, of (this layer's transient - layers already freed).
        Within a run the last layer (first in backward) is highest."""
        if not self.layers:
            return 0.0
        best = None
        freed: Num = 0.0
        for layer, n in reversed(self.runs()):
            best = layer.bwd_transient - freed if best is None else maximum(best, layer.bwd_transient - freed)
            freed = freed + n * layer.kept
        return best

    @property
    def bwd_rise_at(self) -> int:
        best: Num = float("-inf")
        freed: Num = 0.0
        at = len(self.layers) - 1
        for i in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[i]
            if layer.bwd_transient - freed > best:
                best, at = layer.bwd_transient - freed, i
            freed += layer.kept
        return at


def _blocks(terms) -> dict[str, list]:
    out: dict[str, list] = {}
    for t in terms:
        block = "attn" if t.name.startswith("attn.") else t.name.split(".")[0]
        out.setdefault(block, []).append(t)
    return out


def _layer_memory(name: str, terms, *, rc_kind: str, drop: frozenset, fp8: bool, fp4: bool = False,
                  fwd_trans: dict[str, Num], grad_trans: dict[str, Num], grad_out: Num,
                  ordered: bool = False, saved_terms=None) -> LayerMemory:
    """Kept bytes and transients of one layer from its inventory.

    ``ordered`` (the megatron-local profile, checked against H200 measurements) places each
    block's transient at its moment inside the layer: in forward, block b's transient sits on the
    bytes kept by the blocks before it plus all of b's own intermediates (those recompute drops
    too: they exist until the block returns), not on the whole layer's kept bytes; in backward,
    the blocks after b have already released what they kept when b's backward runs. Without it,
    both transients sit on the whole layer's kept bytes (an upper bound).

    ``saved_terms`` (torchtitan's per-op selective AC, rc_kind 'op'): what the policy keeps, in
    place of the inventory filtered by recompute; the rest of ``terms`` is re-created by a re-run
    of the layer's forward before its backward, as under full recompute (torch.utils.checkpoint)."""
    full_rc = rc_kind == "full"
    rerun = full_rc or saved_terms is not None
    ordered = ordered and saved_terms is None  # the per-op inventory holds no block order
    saved = terms if saved_terms is None else saved_terms
    kept = act.kept_bytes(saved, full=full_rc, drop=drop, fp8=fp8, fp4=fp4)
    full = act.kept_bytes(terms, full=False, drop=frozenset(), fp8=fp8, fp4=fp4)
    blocks = list(_blocks(terms).items())
    saved_b = _blocks(saved)
    kept_b = {b: act.kept_bytes(tuple(saved_b.get(b, ())), full=full_rc, drop=drop, fp8=fp8, fp4=fp4) for b, _ in blocks}
    # Forward: the largest block transient on top of what the layer has saved so far.
    fwd = maximum(*fwd_trans.values()) if fwd_trans else 0.0
    if ordered:
        peak: Num = 0.0
        prefix: Num = 0.0
        for b, bt in blocks:
            full_bytes = act.kept_bytes(tuple(bt), full=False, drop=frozenset(), fp8=fp8, fp4=fp4)
            peak = maximum(peak, prefix + full_bytes + fwd_trans.get(b, 0.0))
            prefix = prefix + kept_b[b]
        fwd = maximum(0.0, peak - kept)
    # Backward. Full recompute re-runs the whole layer's forward before its backward, so while
    # block b's forward is re-run or its backward runs, the re-created intermediates of b and of
    # the blocks before it are alive, with the incoming gradient (the seed's recompute window:
    # saved inputs + re-created intermediates + new gradients together). Selective recompute
    # re-creates one module just before its own backward.
    recreated = {b: act.kept_bytes(tuple(bt), full=False, drop=frozenset(), fp8=fp8, fp4=fp4) - kept_b[b] for b, bt in blocks}
    if saved_terms is not None:  # a saved matmul output need not be in the inventory's shape
        recreated = {b: maximum(0.0, r) for b, r in recreated.items()}
    # Megatron's full recompute (CheckpointFunction) re-runs the layer and back-propagates through
    # the re-run: the re-computed layer output, a fresh tensor of the output's shape, lives beside
    # the original (kept as the next layer's input) for the whole window. Selective recompute
    # re-creates discarded outputs into their own storage (CheckpointWithoutOutput).
    rerun_output = grad_out if rerun else 0.0
    bwd = 0.0
    alive: Num = 0.0
    for i, (b, _) in enumerate(blocks):
        alive = alive + recreated[b] if rerun else recreated[b]
        window = grad_out + rerun_output + alive + grad_trans.get(b, 0.0)
        window = where(recreated[b] > 0, maximum(window, grad_out + rerun_output + alive + fwd_trans.get(b, 0.0)), window)
        if ordered:
            for later, _ in blocks[i + 1:]:
                window = window - kept_b[later]
        bwd = maximum(bwd, window)
    return LayerMemory(name, kept, fwd, bwd, full)


def head_transients(cross_entropy: str, logits: Num, loss_parallel: Num = False) -> tuple[Num, Num]:
    """(forward, backward) bytes the loss holds beyond what it keeps, for ``logits`` logits on
    this GPU. Megatron's fused loss: the bf16 logits exist until the fp32 softmax replaces them,
    and its backward forms the fp32 gradient in place and casts it to bf16. torchtitan's
    ``cross_entropy(pred.float())`` eager: the bf16 logits and their fp32 copy beside the fp32
    log-softmax it keeps (10 bytes per logit at the forward's peak), then the log-softmax's and
    the copy's fp32 gradients (12 with the kept one); compiled, nothing beyond the bf16 logits it
    keeps, and their bf16 gradient. Measured on one H200 at 8,192 tokens and 128,256 logits each
    (tests/fixtures/h200_op_sac_memory.json, 'loss': peaks of 10.51 / 12.61 GB eager and 2.10 /
    4.20 GB compiled, 2.10 GB of bf16 logits).

    ``loss_parallel`` (torchtitan with TP > 1: ParallelDims.loss_parallel_enabled, the logits
    sharded over the vocabulary and the loss run inside torch's loss_parallel() context,
    torchtitan utils.get_train_context) replaces the fused aten kernels by DTensor's decomposition
    (torch/distributed/tensor/parallel/loss.py). Eager, ``_log_softmax`` holds the fp32 copy,
    ``shifted`` and ``exp(shifted)`` at once: 2 fp32 beside the bf16 logits beyond the kept
    log-softmax; the fused backward ``_nll_loss_and_log_softmax_backward`` holds ``zeros_like(x)``,
    ``exp(x)`` and their sum, then the sum and the product: 3 fp32 beyond the kept one (the aten
    kernels: 2). Compiled, the graph keeps an fp32 tensor (not the bf16 logits) and holds the bf16
    logits and one fp32 more in the forward, the bf16 gradient in the backward. Measured on one
    H100 at 32,768 tokens x 16,032 logits, a TP-8 rank of Llama 3.1 (benchmarks/gpu/
    loss_parallel_memory.py, tests/fixtures/h100_loss_parallel_memory.json): 14 / 16 bytes per
    logit at the forward / backward peak eager (10 / 12 without loss parallel), 10 / 6 compiled
    (2 / 4 without), 4 kept in both."""
    if cross_entropy == "torch":
        return (where(loss_parallel, BF16 + 2 * FP32, BF16 + FP32) * logits,
                where(loss_parallel, 3 * FP32, 2 * FP32) * logits)
    if cross_entropy == "torch_compiled":
        return where(loss_parallel, BF16 + FP32, 0.0) * logits, BF16 * logits
    return BF16 * logits, BF16 * logits


def layer_transients(model, sh: Shard, kind: str, setup_tp: int) -> tuple[dict, dict]:
    """Forward and gradient transients per block of a decoder layer (bytes), beyond saved tensors.

    Forward: with SP the column-parallel GEMMs read an all-gathered [tokens, h] input; MoE dispatch
    holds the permuted tokens and the received tokens at once, and the combine holds the expert
    output and the returned tokens (the seed's 'entry/exit tensors scaled by top-k'); the attention
    projections' outputs exist before RoPE/concat produce Q and K.
    Backward: gradient tensors of the block's largest intermediates live together (expert FC2
    input gradient, SwiGLU gradient of FC1's output width, FC1 input gradient); flash attention's
    backward keeps dQ, dK, dV and an fp32 dQ accumulator."""
    h = model.hidden_size
    seq_div = where(sh.sp, sh.tp, 1)
    T = sh.tokens
    gathered = where(sh.sp, BF16 * T * h, 0.0)
    a = model.attention
    nh = a.num_heads / sh.tp
    if a.kind == "mla":
        proj_out = BF16 * T * nh * (a.qk_head_dim + a.qk_nope_head_dim + a.v_head_dim)
        qkv = BF16 * T * nh * (2 * a.qk_head_dim + a.v_head_dim)
        qk_dim = a.qk_head_dim
    else:
        kvh = act.local_kv_heads(a, sh.tp)
        proj_out = BF16 * T * (nh + 2 * kvh) * a.head_dim
        qkv = proj_out
        qk_dim = a.head_dim
    attn_fwd = gathered + proj_out
    attn_grad = gathered + qkv + 2 * T * nh * qk_dim * 2 + BF16 * T * h / seq_div
    if sh.implementation != "te":
        # Unfused attention: the raw scores (and their fp32 copy for the fp32 softmax) exist
        # transiently in forward; the backward holds the score gradient.
        s2 = sh.mbs * nh * sh.local_seq * sh.local_seq
        attn_fwd += s2 * (BF16 + (4 if sh.implementation == "megatron-local" else 0))
        if sh.implementation == "megatron-local":
            # Measured (H200 memory snapshot, results/validation/gpu-memory.md): the bf16 probs
            # gradient is cast to fp32 (4), the softmax backward writes its fp32 output and one
            # more fp32 buffer of the same shape (4 + 4) while the saved fp32 probs are alive; the
            # bf16 probs (2) were already released by the probs @ V backward.
            attn_grad += s2 * (4 + 4 + 4 - BF16)
        else:
            attn_grad += s2 * 4
    fwd = {"attn": attn_fwd}
    grad = {"attn": attn_grad}
    if kind == "moe":
        m = model.moe
        Tk = act.expert_tokens(model, sh)
        src = T / seq_div * m.top_k
        fe = m.expert_hidden_size / sh.etp
        gated = 2 if model.ffn.gated else 1
        fwd["moe"] = gathered + BF16 * h * (src + Tk)
        grad["moe"] = BF16 * Tk * (h + fe + gated * fe) + BF16 * h * src
        # Megatron's EP overlap interleaves a forward micro-batch with a backward one, layer by
        # layer: the forward's dispatch buffers live beside the backward's gradients.
        grad["moe"] = grad["moe"] + where(sh.ep_overlap, fwd["moe"], 0.0)
    else:
        f = model.ffn.hidden_size / sh.tp
        gated = 2 if model.ffn.gated else 1
        fwd["mlp"] = gathered + BF16 * T * h / seq_div
        grad["mlp"] = gathered + BF16 * T * (f + gated * f) + BF16 * T * h / seq_div
    return fwd, grad


def pair_steps(f: ChunkMemory, b: ChunkMemory):
    """The steps of one overlapped forward+backward of Megatron's combined 1F1B, in order: (f's
    layer or None, b's layer or None). Megatron runs f's pre-process with b's post-process, then
    forward layer i beside backward layer L-1-i, then what is left of either side, then f's
    post-process (megatron/core/models/common/model_chunk_schedule_plan.py
    TransformerModelChunkSchedulePlan.run): f's pieces in order beside b's in reverse, index by
    index (the embedding with the head's backward, the head's forward last)."""
    fl, bl = f.layers, b.layers[::-1]
    for i in range(max(len(fl), len(bl))):
        yield (fl[i] if i < len(fl) else None), (bl[i] if i < len(bl) else None)


def pair_rise(f: ChunkMemory, b: ChunkMemory) -> Num:
    """The highest point of one overlapped step of the combined 1F1B above the bytes held before
    it (b's micro-batch whole among them). At step i, f has stored its first i pieces and runs
    piece i (its kept bytes and forward transient), b has released its last i pieces (each backward
    layer's state is released once it is done: TransformerModelChunkSchedulePlan.run's
    release_state) and runs the next one (its backward transient); the two transients are summed,
    an upper bound on two streams' temporaries. Closed form over runs of identical steps: within
    one the point moves linearly, so its ends bound it. Equals the maximum over
    :func:`pair_steps` (a test checks it)."""
    f_runs, b_runs = f.runs(), b.runs()[::-1]
    # maximum() tests its arguments for scalars at every step; on one plan's chunks it is max().
    most = max if f.scalar and b.scalar else maximum
    f_left = [n for _, n in f_runs]
    b_left = [n for _, n in b_runs]
    best: Num = 0.0
    added: Num = 0.0
    freed: Num = 0.0
    i = j = 0
    while i < len(f_runs) or j < len(b_runs):
        fl = f_runs[i][0] if i < len(f_runs) else None
        bl = b_runs[j][0] if j < len(b_runs) else None
        count = min(f_left[i] if fl is not None else float("inf"), b_left[j] if bl is not None else float("inf"))
        kf, tf = (fl.kept, fl.fwd_transient) if fl is not None else (0.0, 0.0)
        kb, tb = (bl.kept, bl.bwd_transient) if bl is not None else (0.0, 0.0)
        first = added - freed + kf + tf + tb
        best = most(best, first + most(0.0, (count - 1) * (kf - kb)))
        added, freed = added + count * kf, freed + count * kb
        if fl is not None:
            f_left[i] -= int(count)
            i += f_left[i] == 0
        if bl is not None:
            b_left[j] -= int(count)
            j += b_left[j] == 0
    return best


def chunks_from_pieces(pieces, model, layout, rank: int, full_layers, host_layers: int = 0) -> tuple[ChunkMemory, ...]:
    """Assemble a rank's chunks from per-piece memories, in layout order. ``full_layers``: with
    full recompute, how many layers per chunk recompute (Megatron's block method recomputes the
    first N layers of each virtual stage); None means all. ``host_layers``: the model's first
    decoder layers whose saved activations layer-level CPU offload keeps on the host
    (:func:`offloaded_to_host`)."""
    chunks = []
    for st in layout.rank_stages(rank):
        layers: list[LayerMemory] = []
        if st.embedding:
            layers.append(pieces.embedding())
        for pos, li in enumerate(st.layers):
            kind = model.layer_kinds[li]
            layer = pieces.layer_at(kind, pos, full_layers, f"layer {li} ({kind})")
            layers.append(offloaded_to_host(layer) if li < host_layers else layer)
        for _ in range(st.mtp):
            layers.append(pieces.mtp())
        if st.loss:
            layers.append(pieces.head())
        chunks.append(ChunkMemory(st.vpp_rank, tuple(layers)))
    return tuple(chunks)


def offloaded_to_host(layer: LayerMemory) -> LayerMemory:
    """A decoder layer under Megatron's layer-level CPU offload (--cpu-offloading-num-layers N,
    PP = 1 only: megatron/core/transformer/transformer_block.py wraps each layer's forward in
    Transformer Engine's get_cpu_offload_context). TE's AsyncDoubleBufferGroupOffloadHandler
    (transformer_engine/pytorch/cpu_offload.py) offloads the saved tensors of the first N layer
    groups on a copy stream and frees each on the GPU before a later layer (layer_window_map);
    the backward reloads a group while the group above it runs (double buffering). So the layer
    keeps nothing on the GPU between its forward and backward: its saved bytes are on the host;
    they stay on the GPU while its own forward's copy runs, and while its backward runs they are
    there with the group below being reloaded (two groups; the first group has none below, the
    bound stays)."""
    return LayerMemory(layer.name, layer.kept * 0.0, layer.fwd_transient + layer.kept,
                       layer.bwd_transient + 2 * layer.kept, layer.full, ("host", layer.piece), layer.kept)


def layer_rc_kind(recompute, full_layers, pos: int) -> str:
    """What a layer at position ``pos`` of its chunk recomputes: the plan's recompute kind, except
    that full:N (or per-stage counts) recomputes only the first N layers of each chunk."""
    if recompute.kind == "full" and full_layers is not None and pos >= full_layers:
        return "none"
    return recompute.kind


class StackedPieces:
    """The pieces of several lever settings side by side (plan order: each setting's keys in a
    row), with the same interface as :class:`PieceMemory`; ``full_layers`` is per setting."""

    def __init__(self, parts: list, n: int):
        self.parts, self.n = parts, n
        self.cache: dict[tuple | str, LayerMemory] = {}
        self.kinds = tuple(p.rc.kind for p in parts)
        """Each setting's recompute kind: what every layer recomputes unless full:N limits it."""
        self.limited: dict[tuple, bool] = {}
        """Per ``full_layers``: whether some setting recomputes only the first N layers of a chunk."""

    def _stack(self, layers: list[LayerMemory]) -> LayerMemory:
        piece = tuple(x.piece for x in layers)
        if piece not in self.cache:
            cols = lambda x: x if isinstance(x, np.ndarray) and x.shape == (self.n,) else np.full(self.n, x, dtype=float)  # noqa: E731
            kept, fwd, bwd, full = (np.concatenate([cols(getattr(x, f)) for x in layers])
                                    for f in ("kept", "fwd_transient", "bwd_transient", "full"))
            self.cache[piece] = LayerMemory(layers[0].name, kept, fwd, bwd, full, piece)
        hit = self.cache[piece]
        return hit if hit.name == layers[0].name else LayerMemory(layers[0].name, hit.kept, hit.fwd_transient,
                                                                  hit.bwd_transient, hit.full, piece)

    def _once(self, which: str) -> LayerMemory:
        if which not in self.cache:
            self.cache[which] = self._stack([getattr(p, which)() for p in self.parts])
        return self.cache[which]

    def embedding(self):
        return self._once("embedding")

    def layer_at(self, kind, pos, full_layers, name):
        limited = self.limited.get(full_layers)
        if limited is None:
            limited = self.limited[full_layers] = any(
                k == "full" and f is not None for k, f in zip(self.kinds, full_layers))
        # Without full:N every layer of a setting recomputes the same (layer_rc_kind).
        rcs = tuple(layer_rc_kind(p.rc, f, pos) for p, f in zip(self.parts, full_layers)) if limited else self.kinds
        hit = self.cache.get((kind, rcs))
        if hit is None:
            hit = self.cache[kind, rcs] = self._stack([p.layer(kind, rc, name) for p, rc in zip(self.parts, rcs)])
        return hit if hit.name == name else LayerMemory(name, hit.kept, hit.fwd_transient, hit.bwd_transient, hit.full,
                                                        hit.piece)

    def mtp(self):
        return self._once("mtp")

    def head(self):
        return self._once("head")


class PieceMemory:
    """Memory of the repeated pieces of a chunk (a decoder layer of each kind, MTP, the head),
    computed once per piece: every layer of a kind has the same numbers."""

    def __init__(self, model, sh, recompute, fp8, vocab_div):
        self.model, self.sh, self.rc, self.fp8, self.vocab_div = model, sh, recompute, fp8, vocab_div
        self.drop = frozenset(act.dropped_modules("", recompute.modules)) if recompute.kind == "selective" else frozenset()
        self.grad_out = BF16 * sh.tokens * model.hidden_size / where(sh.sp, sh.tp, 1)
        self.cache: dict = {}

    def embedding(self) -> LayerMemory:
        if "E" not in self.cache:
            kept = act.kept_bytes(act.embedding_terms(self.model, self.sh), full=False, drop=frozenset(), fp8=False)
            self.cache["E"] = LayerMemory("embedding", kept, 0.0, 0.0, 0.0, "E")
        return self.cache["E"]

    def layer(self, kind: str, rc_kind: str, name: str) -> LayerMemory:
        key = (kind, rc_kind)
        if key not in self.cache:
            terms = act.layer_terms(self.model, self.sh, kind)
            fwd_t, grad_t = layer_transients(self.model, self.sh, kind, self.sh.tp)
            lm = _layer_memory(name, terms, rc_kind=rc_kind,
                               drop=self.drop if rc_kind == "selective" else frozenset(), fp8=self.fp8, fp4=bool(self.sh.fp4),
                               fwd_trans=fwd_t, grad_trans=grad_t, grad_out=self.grad_out,
                               ordered=self.sh.implementation == "megatron-local",
                               saved_terms=act.op_sac_terms(self.model, self.sh) if rc_kind == "op" else None)
            self.cache[key] = LayerMemory(name, lm.kept, lm.fwd_transient, lm.bwd_transient, lm.full, key)
        m = self.cache[key]
        return m if m.name == name else LayerMemory(name, m.kept, m.fwd_transient, m.bwd_transient, m.full, m.piece)

    def layer_at(self, kind: str, pos: int, full_layers, name: str) -> LayerMemory:
        """The layer at position ``pos`` of its chunk (see :func:`layer_rc_kind`)."""
        return self.layer(kind, layer_rc_kind(self.rc, full_layers, pos), name)

    def mtp(self) -> LayerMemory:
        if "m" not in self.cache:
            model, sh = self.model, self.sh
            terms = act.mtp_terms(model, sh, self.vocab_div)
            fwd_t, grad_t = layer_transients(model, sh, model.mtp_kind, sh.tp)
            fwd_t["head"] = BF16 * sh.tokens * model.vocab_size / self.vocab_div
            grad_t["head"] = BF16 * sh.tokens * model.vocab_size / self.vocab_div
            lm = _layer_memory("mtp", terms, rc_kind=self.rc.kind if self.rc.kind == "full" else "none",
                               drop=frozenset(), fp8=self.fp8, fp4=bool(self.sh.fp4), fwd_trans=fwd_t, grad_trans=grad_t,
                               grad_out=self.grad_out)
            self.cache["m"] = LayerMemory("mtp", lm.kept, lm.fwd_transient, lm.bwd_transient, lm.full, "m")
        return self.cache["m"]

    def head(self) -> LayerMemory:
        if "L" not in self.cache:
            model, sh = self.model, self.sh
            terms = act.head_terms(model, sh, self.vocab_div)
            # torchtitan shards the logits over the vocabulary exactly when it runs loss parallel
            # (apply_tp: the output's output_layouts Shard(-1) iff loss_parallel)
            fwd_t, grad_t = head_transients(sh.cross_entropy, sh.tokens * model.vocab_size / self.vocab_div,
                                            loss_parallel=self.vocab_div > 1)
            lm = _layer_memory("output+loss", terms, rc_kind="none", drop=frozenset(), fp8=self.fp8, fp4=bool(self.sh.fp4),
                               fwd_trans={"head": fwd_t}, grad_trans={"head": grad_t}, grad_out=0.0)
            self.cache["L"] = LayerMemory("output+loss", lm.kept, lm.fwd_transient, lm.bwd_transient, lm.full, "L")
        return self.cache["L"]

    def sliced(self, idx) -> _SlicedPieces:
        """The same pieces for a subset of the plans (array entries ``idx``)."""
        return _SlicedPieces(self, idx)


class _SlicedPieces:
    """View of a PieceMemory's (array) numbers restricted to some plans."""

    def __init__(self, base: PieceMemory, idx):
        self.base, self.idx = base, idx
        self.cache: dict = {}

    @property
    def rc(self):
        return self.base.rc

    def _cut(self, lm: LayerMemory, name: str | None = None) -> LayerMemory:
        key = lm.piece
        if key not in self.cache:
            pick = lambda x: x[self.idx] if np.ndim(x) else x  # noqa: E731
            self.cache[key] = LayerMemory(lm.name, pick(lm.kept), pick(lm.fwd_transient), pick(lm.bwd_transient),
                                          pick(lm.full), key)
        c = self.cache[key]
        return c if name is None or c.name == name else LayerMemory(name, c.kept, c.fwd_transient, c.bwd_transient, c.full, key)

    def embedding(self):
        return self._cut(self.base.embedding())

    def layer(self, kind, rc_kind, name):
        hit = self.cache.get((kind, rc_kind))
        if hit is None:
            hit = self.cache[kind, rc_kind] = self._cut(self.base.layer(kind, rc_kind, name))
        return hit if hit.name == name else LayerMemory(name, hit.kept, hit.fwd_transient, hit.bwd_transient, hit.full,
                                                        hit.piece)

    def layer_at(self, kind, pos, full_layers, name):
        return self.layer(kind, layer_rc_kind(self.base.rc, full_layers, pos), name)

    def mtp(self):
        return self._cut(self.base.mtp())

    def head(self):
        return self._cut(self.base.head())


# The process groups whose NCCL communicators a GPU holds (names of planner.cost.topology's
# spans; 'dpcp' is the distributed optimizer's DP x CP group) and the degree that sizes each.
COMMUNICATOR_GROUPS = {"tp": "tp", "cp": "cp", "dpcp": None, "pp": "pp", "ep": "ep", "edp": "edp", "etp": "etp"}


def span_crossings(spans) -> dict[str, bool]:
    """Whether the worst group of each communicator crosses NVLink domains."""
    return {name: spans[name].domains > 1 for name in COMMUNICATOR_GROUPS if name in spans}


# NCCL's documented per-connection buffer defaults (NCCL docs, Environment Variables; NVIDIA/nccl
# src/include/device.h DEFAULT_BUFFSIZE, DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE): Simple
# 4 MiB (NCCL_BUFFSIZE), LL 8 lines x 512 threads x 8 steps x 16 B = 512 KiB, LL128 120 elements
# x 640 threads x 8 steps x 8 B = 4.69 MiB, per channel and peer. What they explain of the profile's
# per-communicator estimate (hw_specs/efficiency, nccl_bytes_per_communicator) is said in explain;
# the estimate itself stays the profile's number.
NCCL_PROTOCOL_BYTES = {"Simple": 4 * 2**20, "LL": 8 * 512 * 8 * 16, "LL128": 120 * 640 * 8 * 8}
NCCL_ENV = ("NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
            "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_PROTO")
"""The environment variables that change a communicator's buffers (NCCL docs, Environment
Variables): the per-protocol sizes, the channel counts and the protocols set up."""
GROUP_PURPOSE = {"tp": "tensor parallel", "cp": "context parallel", "dpcp": "data parallel x CP (gradients, "
                 "distributed optimizer)", "pp": "pipeline send/receive", "ep": "expert parallel all-to-all",
                 "edp": "expert data parallel", "etp": "expert tensor parallel"}


@dataclass(frozen=True)
class CommLine:
    """One line of the communication buffers a GPU holds: ``count`` x ``each`` bytes (numbers or
    per-plan arrays). ``kind``: 'nccl' (a communicator of process group ``name``), 'dispatcher',
    'p2p', 'workspace' or 'graph_pool'; ``estimate``: not measured."""

    kind: str
    name: str
    count: Num
    each: Num
    source: str
    estimate: bool = True
    env: tuple[str, ...] = ()

    @property
    def total(self) -> Num:
        return self.count * self.each


def comm_lines(model, mem, deg, *, crosses: dict, dispatcher, tokens, sp) -> list[CommLine]:
    """What :func:`comm_bytes` sums, one line per communicator group, dispatcher buffer, PP
    receive slots, GEMM workspaces and CUDA-graph pools. Degrees and ``crosses`` entries may be
    arrays.

    A communicator costs its buffers only if its group has more than one rank (NCCL initializes
    lazily); groups inside one NVLink domain use the intra-domain size."""
    sizes = {"tp": deg.tp, "cp": deg.cp, "dpcp": np.asarray(deg.dp) * np.asarray(deg.cp), "pp": deg.pp,
             "ep": deg.ep, "edp": deg.edp, "etp": deg.etp}
    lines = []
    for name in COMMUNICATOR_GROUPS:
        if name == "etp" and not model.is_moe:
            continue
        cross = crosses.get(name, False)
        per = where(cross, mem.nccl_bytes_per_communicator_internode.value, mem.nccl_bytes_per_communicator.value)
        src = where(cross, 1, 0)
        source = (mem.nccl_bytes_per_communicator_internode if np.all(src) else mem.nccl_bytes_per_communicator).source
        lines.append(CommLine("nccl", name, (np.asarray(sizes[name]) > 1) * 1, per, source, env=NCCL_ENV))
    # Megatron's flex dispatcher keeps one DeepEP/HybridEP buffer per EP group, sized at first use
    # from DeepEP's dispatch and combine configs (megatron/core/transformer/moe/fused_a2a.py
    # get_buffer: Buffer.get_*_config(group.size()).get_nvl/rdma_buffer_size_hint(hidden_bytes)),
    # so it grows with the hidden size.
    flex = model.is_moe and dispatcher in ("deepep", "hybridep")
    lines.append(CommLine("dispatcher", str(dispatcher) if flex else "none", (np.asarray(deg.ep) > 1) * 1 if flex else 0,
                          mem.ep_a2a_staging_bytes.value * model.hidden_size / 7168,
                          mem.ep_a2a_staging_bytes.source, env=("NUM_SMS",) if flex else ()))
    # Megatron allocates receive buffers per in-flight transfer: forward and backward, and two of
    # each when P2P overlaps with compute (interleaved schedule).
    slots = where(np.asarray(deg.vpp) > 1, 4, 2) * (np.asarray(deg.pp) > 1)
    lines.append(CommLine("p2p", "pp", slots, BF16 * tokens * model.hidden_size / where(sp, deg.tp, 1),
                          "one micro-batch's activation (tokens x hidden / SP, bf16) per in-flight transfer "
                          "(megatron/core/pipeline_parallel/p2p_communication.py)", estimate=False))
    lines.append(CommLine("workspace", "cublas", mem.gemm_workspace_streams.value, mem.gemm_workspace_bytes.value,
                          mem.gemm_workspace_bytes.source + "; streams: " + mem.gemm_workspace_streams.source,
                          env=("CUBLAS_WORKSPACE_CONFIG",)))
    # CUDA-graph pools differ per pipeline rank (its captured layers and micro-batches in flight):
    # planner.cost.compose.Costs.graph_pool fills this line per stage (planner.cost.memory).
    lines.append(CommLine("graph_pool", "cuda_graphs", 0, 0.0, GRAPH_POOL_SOURCE))
    return lines


GRAPH_POOL_SOURCE = (
    "estimate from the mechanism, not measured: per captured scope (Transformer Engine "
    "make_graphed_callables, one graph per layer and micro-batch slot; Megatron TECudaGraphHelper) its static "
    "inputs and outputs, forward and backward (4 x tokens x hidden, bf16, split by SP; the router's input and "
    "fp32 probabilities, their gradients and the routing map with moe_router), per micro-batch in flight at "
    "the rank's peak and per chunk. The graphs' private pools for their intermediates are not counted: "
    "NVIDIA-NeMo/Automodel PR 2932 measured +6.5 GB for an attention scope over 48 layers of 2 x 1024 tokens "
    "on H100 (this estimate: about 1.5 GiB there, 4x under) and +15 GB for a moe scope; on DeepSeek-V3 "
    "PP4/VPP4 EP64 on GB200 (attn+moe_router+moe_preprocess, 16 layers a rank, 2-4 micro-batches in flight "
    "per chunk) it gives 18-24 GiB a rank, above the several GiB to 15 GiB public MoE reports state "
    "(capture OOMs: TransformerEngine issue 2543, Megatron-Bridge issue 3500). A full-iteration graph "
    "(megatron/core/full_cuda_graph.py) has no per-layer buffers: only the step's inputs are static (on an MoE "
    "model with the paged stash's CUDA buffer, 1.2 x the peak in-flight expert activations at the balanced load: "
    "megatron/core/transformer/moe/paged_stash.py allocate_stash_buffers), and its "
    "private pool keeps the activations' segments through the optimizer step (the reserved peak)")
"""Where the CUDA-graph pool line's number comes from (explain's memory breakdown)."""


def graph_scope_bytes(model, sh, kind: str, graphs) -> Num:
    """Static bytes per micro-batch slot of one captured decoder layer of ``kind`` ('dense' or
    'moe') under ``graphs`` (planner.specs.plan.CudaGraphs), on one GPU with the shard ``sh``
    (sequence parallel under TP, as planner's plans run). See GRAPH_POOL_SOURCE."""
    tokens = sh.mbs * sh.seq / sh.cp / sh.tp  # [tokens, hidden] tensors are split by SP
    hidden = BF16 * tokens * model.hidden_size
    io = 4 * hidden  # forward input and output, backward output gradient and input gradient
    if graphs.layers_captured:
        return io
    static: Num = 0.0
    if graphs.captures("attn"):
        static = static + io
    if kind == "dense" and graphs.captures("mlp"):
        static = static + io
    if kind == "moe" and graphs.captures("moe"):
        static = static + io
    elif kind == "moe" and graphs.captures("moe_router"):
        # the router's input and its gradient, and per token and expert the fp32 probabilities,
        # their gradient and the boolean routing map
        static = static + 2 * hidden + tokens * model.moe.num_experts * (FP32 + FP32 + 1)
    return static


def comm_bytes(model, mem, deg, *, crosses: dict, dispatcher, tokens, sp):
    """NCCL communicators of this GPU's process groups, EP dispatcher staging, PP send/receive
    buffers and GEMM workspaces: the sum of :func:`comm_lines`, in their order."""
    total: float | np.ndarray = 0.0
    for line in comm_lines(model, mem, deg, crosses=crosses, dispatcher=dispatcher, tokens=tokens, sp=sp):
        if line.kind != "graph_pool":  # nothing yet: keeps the sum's terms as they were
            total = total + line.total
    return total if np.ndim(total) else float(total)


def held_of(kept: list, offload: bool):
    """Activation bytes on the GPU for an in-flight count vector (chunks held per virtual stage).

    With activation offload, only the chunk being computed and the next one (being prefetched
    back) stay on the GPU; the rest waits in host memory (Megatron fine-grained activation
    offloading overlaps the copies with compute)."""

    def held(vec):
        total = 0.0
        for n, k in zip(vec, kept):
            if n:
                total = total + n * k
        return total * offload_share(sum(vec)) if offload else total

    return held


def attention_score_bytes(model, implementation: str, mbs, tp, seq_per_gpu):
    """Megatron's unfused ``DotProductAttention`` (local spec) takes the baddbmm input buffer for the
    [b * heads, s, s] scores from the global memory buffer ('mpu'), which keeps it for the rest of
    the run: bf16 scores of one micro-batch, measured on an H200 as the steady memory above
    weights and optimizer states (results/validation/gpu-memory.md). Counted with the buffers."""
    if implementation == "te":
        return 0.0
    return BF16 * mbs * model.attention.num_heads / tp * seq_per_gpu ** 2


def optimizer_transient_of(hw, assumptions, moments: str, precision: str, optimizer_bytes):
    """Optimizer-step temporaries above constant memory, given the GPU's optimizer-state bytes."""
    if assumptions.implementation == "megatron-local" and moments != "bf16" and precision != "fp8":
        # Without Transformer Engine or Apex, Megatron-Core falls back to torch.optim.AdamW, whose
        # foreach step builds sqrt(v) for every parameter at once: one fp32 copy of the optimizer's
        # parameters (measured on an H200: the optimizer-step peak is 4 B per parameter above the
        # steady memory, results/validation/gpu-memory.md).
        return 4.0 * optimizer_bytes / (4.0 + 8.0)
    return optimizer_transient_bytes(hw, moments, precision)


def stranded_expert_bytes(model, moe_layers, ep, etp, sp_tokens, ratio: float, temporaries: tuple[float, ...]):
    """Freed blocks the caching allocator cannot reuse for the activation peak (default allocator
    settings; MemoryOverheads.allocator_workload): each local expert's weight-sized temporaries,
    ``temporaries`` bytes per parameter each (the local spec's torch AdamW foreach sqrt(v), 4 B, and
    its weight gradient written before the main-gradient add, 2 B), whose blocks are small against the step's
    activation blocks (sp_tokens x hidden, bf16) once experts are fine-grained. A block of size b
    strands 1 / (1 + (b / (ratio x activation block))^2) of itself."""
    moe = model.moe
    if moe is None or not temporaries:
        return 0.0
    h = model.hidden_size
    width = moe.expert_hidden_size / etp
    block = maximum(1.0, sp_tokens * h * BF16)
    total = 0.0
    for numel in ((2 if model.ffn.activation == "swiglu" else 1) * width * h, width * h):
        for b in temporaries:
            size = b * numel
            total = total + size / (1.0 + (size / (ratio * block)) ** 2)
    return moe_layers * (moe.num_experts // ep) * total


def workload_reserved(workload, fwd_bwd_peak, optimizer_peak, activation_peak, stranded, *, recomputes, pipelined,
                      fixed_held: bool = True):
    """Reserved peak of the default caching allocator from what drives the gap
    (MemoryOverheads.allocator_workload): the larger phase peak, the forward-backward one with the
    stranded blocks on top, its segments' partial use, the fixed small-pool and rounding bytes, and
    shares of the activation peak where layers recompute (the re-created forward allocates while
    the backward's gradient blocks are cached) and where a pipeline schedule interleaves
    micro-batches (one micro-batch's backward frees blocks between the later ones' activations).
    ``recomputes`` and ``pipelined`` are booleans or per-plan boolean arrays; ``fixed_held`` False
    leaves out the fixed small-pool bytes (a full-iteration graph's capture releases them:
    planner.cost.terms.peak_memory.PeakMemory._fixed_held)."""
    base = maximum(fwd_bwd_peak + stranded, optimizer_peak)
    share = (workload.recompute_fraction.value * np.asarray(recomputes, dtype=float)
             + workload.pipeline_fraction.value * np.asarray(pipelined, dtype=float))
    fixed = workload.base_bytes.value if fixed_held else 0.0
    return base * (1.0 + workload.peak_fraction.value) + fixed + share * activation_peak


def optimizer_transient_bytes(hw, moments: str, precision: str) -> Num:
    """Optimizer-step temporaries: the fused multi-tensor Adam works in place on chunks, but the
    precision-aware paths (bf16 moments, FP8 primary weights) upcast one parameter bucket to fp32
    at a time; Megatron's distributed optimizer all-gathers updated parameters into the (already
    allocated) parameter buffer. Estimate: three fp32 copies of one DDP bucket when upcasting."""
    if moments == "bf16" or precision in ("fp8", "nvfp4"):  # NVFP4 weights cast from fp32 as FP8 ones do
        return 3 * memory_constants(hw).dp_bucket_bytes.value
    return 0.0


def peak_over_profiles(kept, fwd_rise, bwd_rise, pp: int, vpp: int, m: int, rank: int, offload: bool,
                       schedule: Schedule | None = None, pair_rises=None):
    """max over the rank's in-flight vectors n before each op of (n . kept + rise of the op's
    chunk), as matrix products; ``kept``, ``fwd_rise``, ``bwd_rise`` are (chunks, X) arrays and
    the result has shape (X,). ``schedule`` is the record of the schedule (None: Megatron's
    1F1B or interleaved by ``vpp``, as always); for a schedule that splits the backward ``kept``
    has a second row per chunk, the bytes held between its input- and weight-gradient passes.
    ``pair_rises(f, b)``: under the combined 1F1B, the (X,) rise of an overlapped step of chunk
    f's forward with chunk b's backward (:func:`pair_rise`); without it the pair counts as its
    forward, then its backward (an upper bound)."""
    best = None
    if schedule is None or schedule.order in ("megatron", "combined"):
        # Megatron's orders repeat: a capped count shows the same vectors (planner.cost.schedule
        # .profile_microbatches), so keys with many micro-batch counts share one matrix.
        m = int(profile_microbatches(pp, vpp if schedule is None else schedule.chunks(vpp), m))
    if schedule is not None and schedule.order == "combined" and pair_rises is not None:
        # The combined 1F1B's overlapped steps: the vector before the pair plus the pair's rise
        # (:func:`pair_rise`), the pair's backward no moment of its own.
        fwd_profile, bwd_profile, (P, idx) = pair_profile_matrices(pp, vpp, m, rank, offload, schedule)
        if P is not None:
            kept = np.ascontiguousarray(kept)
            held = P.astype(kept.dtype, copy=False) @ kept
            if offload:
                held *= offload_share(P.sum(axis=1, keepdims=True))
            n = schedule.chunks(vpp)
            # Each distinct pair's rise once, spread to its steps by index (a stack per step was
            # a third of this function's time in the default search).
            pairs, step_pair = np.unique(idx, return_inverse=True)
            # Rows filled in place: a broadcast view and a stack per pair cost more than the copy.
            each = [pair_rises(k // n, k % n) for k in pairs.tolist()]
            rises = np.empty((len(each), *held.shape[1:]), dtype=np.result_type(*each))
            for row, rise in enumerate(each):
                rises[row] = rise
            held += rises[step_pair.reshape(-1)]
            best = held.max(axis=0)
    else:
        fwd_profile, bwd_profile = profile_matrices(pp, vpp, m, rank, offload, schedule)
    # Callers pass column selections (kept[:, cols]), laid out column-major, on which numpy's
    # matmul is slower than on a row-major copy: 40 -> 30 us a product with single-threaded BLAS
    # (the CLI's), 15 ms -> 50 us with multithreaded BLAS on 2 busy cores (in-process callers; the
    # default search makes ~2000 products). The entries are whole bytes (every product of the
    # default search), so the result is exact whichever kernel sums it.
    kept = np.ascontiguousarray(kept)
    for (N, chunk), rise in ((fwd_profile, fwd_rise), (bwd_profile, bwd_rise)):
        if N is None:
            continue
        N = N.astype(kept.dtype, copy=False)  # float32 tables in the search, exact float64 in explain
        held = N @ kept
        if offload:
            held *= offload_share(N.sum(axis=1, keepdims=True))
        held += rise[chunk]
        top = held.max(axis=0)
        best = top if best is None else np.maximum(best, top)
    return best if best is not None else np.zeros(kept.shape[1:])


@lru_cache(maxsize=4096)
def pair_profile_matrices(pp: int, vpp: int, m: int, rank: int, offload: bool, schedule: Schedule):
    """(forward, backward, pair) profiles of the combined 1F1B with its overlapped steps apart
    (planner.cost.schedules.inflight.pair_profile_table): each (vectors, chunk), the pairs' chunk
    ``f * n + b``; (None, None) where a kind has no row."""
    table = schedule_inflight.pair_profile_table(schedule, pp, vpp, m, rank)
    kinds, chunk, vecs = table[:, 0], table[:, 1].astype(np.int64), table[:, 2:].astype(float)
    if not offload and len(vecs) > 1:
        keep = _maximal(vecs, kinds.astype(np.int64) * (int(chunk.max()) + 1) + chunk)
        kinds, chunk, vecs = kinds[keep], chunk[keep], vecs[keep]
    out = []
    for kind in (0, 1, 2):
        sel = kinds == kind
        out.append((vecs[sel].astype(np.float32), chunk[sel]) if sel.any() else (None, None))
    return tuple(out)


def profile_matrix(pp: int, vpp: int, m: int, rank: int, kind: int, offload: bool, schedule: Schedule | None = None):
    """The in-flight vectors seen before the rank's forwards (kind 0) or backwards (kind 1), as a
    matrix, with the chunk of the op each precedes (``schedule``: see :func:`peak_over_profiles`)."""
    return profile_matrices(pp, vpp, m, rank, offload, schedule)[kind]


@lru_cache(maxsize=8192)
def profile_matrices(pp: int, vpp: int, m: int, rank: int, offload: bool, schedule: Schedule | None = None):
    """:func:`profile_matrix` of both kinds, (forward, backward), from one pass over the rank's
    table (a schedule's table holds both; the search reads both for every profile)."""
    if schedule is None:
        table = inflight_table(pp, vpp, m, rank)
    else:
        table = schedule_inflight.profile_table(schedule, pp, vpp, m, rank)
    table = table[table[:, 0] <= 1]
    kinds, chunk, vecs = table[:, 0], table[:, 1].astype(np.int64), table[:, 2:].astype(float)
    if not offload and len(vecs) > 1:
        # Without offload, a vector no larger than another (entry by entry) before the same kind
        # of op of the same chunk can never be the peak, since held bytes grow with every count:
        # keep maximal ones. (The table is sorted by kind, then chunk: groups are contiguous.)
        keep = _maximal(vecs, kinds.astype(np.int64) * (int(chunk.max()) + 1) + chunk)
        kinds, chunk, vecs = kinds[keep], chunk[keep], vecs[keep]
    out = []
    for kind in (0, 1):
        sel = kinds == kind
        out.append((vecs[sel].astype(np.float32), chunk[sel]) if sel.any() else (None, None))
    return tuple(out)


def _maximal(vecs: np.ndarray, chunk: np.ndarray) -> np.ndarray:
    """Which rows no other row of the same chunk dominates (entry by entry at least as large, and
    different). Rows come grouped by chunk, a few to a few tens per chunk: they are compared in one
    padded (chunks x rows x rows) array, the padding at -inf so that it dominates nothing."""
    starts = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1]])
    sizes = np.diff(np.r_[starts, len(chunk)])
    group = np.repeat(np.arange(len(starts)), sizes)
    slot = np.arange(len(chunk)) - np.repeat(starts, sizes)
    padded = np.full((len(starts), int(sizes.max()), vecs.shape[1]), -np.inf)
    padded[group, slot] = vecs
    le = (padded[:, :, None, :] <= padded[:, None, :, :]).all(axis=3)
    ne = (padded[:, :, None, :] != padded[:, None, :, :]).any(axis=3)
    return ~(le & ne).any(axis=2)[group, slot]


