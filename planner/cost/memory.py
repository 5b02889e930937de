"""Memory model: per pipeline stage, the constant memory, the activations held at the end of the
warm-up, and the true peak over one training step.

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
exact maximum over a handful of dot products.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from planner.cost import activations as act
from planner.cost.constant import ConstantMemory, constant_memory
from planner.cost.schedule import inflight_profiles, max_inflight, warmup_count

BF16 = 2


@dataclass(frozen=True)
class LayerMemory:
    """One decoder layer (or the embedding/head/MTP piece) of a chunk, for one micro-batch."""

    name: str
    kept: float
    """Bytes held from forward to backward."""
    fwd_transient: float
    """Peak temporary bytes while its forward runs (dispatch buffers, gathered SP inputs...)."""
    bwd_transient: float
    """Peak temporary bytes while its backward runs: incoming gradient, recompute window,
    gradient buffers."""
    full: float
    """Bytes it would keep without recompute (what the recompute window re-creates)."""


@dataclass(frozen=True)
class ChunkMemory:
    """A virtual stage (model chunk) on one rank, for one micro-batch."""

    index: int
    layers: tuple[LayerMemory, ...]

    @property
    def kept(self) -> float:
        return sum(l.kept for l in self.layers)

    @property
    def fwd_rise(self) -> float:
        """Max over its layers of (kept by earlier layers + this layer's transient + its kept)."""
        best = run = 0.0
        for l in self.layers:
            best = max(best, run + l.fwd_transient + l.kept)
            run += l.kept
        return best

    @property
    def fwd_rise_at(self) -> int:
        best = run = 0.0
        at = 0
        for i, l in enumerate(self.layers):
            if run + l.fwd_transient + l.kept > best:
                best, at = run + l.fwd_transient + l.kept, i
            run += l.kept
        return at

    @property
    def bwd_rise(self) -> float:
        """Max over layers, last first, of (this layer's transient - layers already freed)."""
        best = float("-inf")
        freed = 0.0
        for l in reversed(self.layers):
            best = max(best, l.bwd_transient - freed)
            freed += l.kept
        return best if self.layers else 0.0

    @property
    def bwd_rise_at(self) -> int:
        best = float("-inf")
        freed = 0.0
        at = len(self.layers) - 1
        for i in range(len(self.layers) - 1, -1, -1):
            l = self.layers[i]
            if l.bwd_transient - freed > best:
                best, at = l.bwd_transient - freed, i
            freed += l.kept
        return at


def _blocks(terms) -> dict[str, list]:
    out: dict[str, list] = {}
    for t in terms:
        block = "attn" if t.name.startswith("attn.") else t.name.split(".")[0]
        out.setdefault(block, []).append(t)
    return out


def _layer_memory(name: str, terms, *, rc_kind: str, drop: frozenset, fp8: bool,
                  fwd_trans: dict[str, float], grad_trans: dict[str, float], grad_out: float,
                  ordered: bool = False) -> LayerMemory:
    """Kept bytes and transients of one layer from its inventory.

    ``ordered`` (the megatron-local profile, checked against H200 measurements) places each
    block's transient at its moment inside the layer: in forward, block b's transient sits on the
    bytes kept by the blocks before it plus all of b's own intermediates (those recompute drops
    too: they exist until the block returns), not on the whole layer's kept bytes; in backward,
    the blocks after b have already released what they kept when b's backward runs. Without it,
    both transients sit on the whole layer's kept bytes (an upper bound)."""
    full_rc = rc_kind == "full"
    kept = act.kept_bytes(terms, full=full_rc, drop=drop, fp8=fp8)
    full = act.kept_bytes(terms, full=False, drop=frozenset(), fp8=fp8)
    blocks = list(_blocks(terms).items())
    kept_b = {b: act.kept_bytes(tuple(bt), full=full_rc, drop=drop, fp8=fp8) for b, bt in blocks}
    # Forward: the largest block transient on top of what the layer has saved so far.
    fwd = max(fwd_trans.values(), default=0.0)
    if ordered:
        peak = prefix = 0.0
        for b, bt in blocks:
            full_bytes = act.kept_bytes(tuple(bt), full=False, drop=frozenset(), fp8=fp8)
            peak = max(peak, prefix + full_bytes + fwd_trans.get(b, 0.0))
            prefix += kept_b[b]
        fwd = max(0.0, peak - kept)
    # Backward. Full recompute re-runs the whole layer's forward before its backward, so while
    # block b's forward is re-run or its backward runs, the re-created intermediates of b and of
    # the blocks before it are alive, with the incoming gradient (the seed's recompute window:
    # saved inputs + re-created intermediates + new gradients together). Selective recompute
    # re-creates one module just before its own backward.
    recreated = {
        b: act.kept_bytes(tuple(bt), full=False, drop=frozenset(), fp8=fp8)
        - act.kept_bytes(tuple(bt), full=full_rc, drop=drop, fp8=fp8)
        for b, bt in blocks
    }
    bwd = 0.0
    alive = 0.0
    for i, (b, _) in enumerate(blocks):
        alive = alive + recreated[b] if full_rc else recreated[b]
        window = grad_out + alive + grad_trans.get(b, 0.0)
        if recreated[b] > 0:
            window = max(window, grad_out + alive + fwd_trans.get(b, 0.0))
        if ordered:
            window -= sum(kept_b[later] for later, _ in blocks[i + 1:])
        bwd = max(bwd, window)
    return LayerMemory(name, kept, fwd, bwd, full)


def layer_transients(model, sh: act.ActShape, kind: str, setup_tp: int) -> tuple[dict, dict]:
    """Forward and gradient transients per block of a decoder layer (bytes), beyond saved tensors.

    Forward: with SP the column-parallel GEMMs read an all-gathered [tokens, h] input; MoE dispatch
    holds the permuted tokens and the received tokens at once, and the combine holds the expert
    output and the returned tokens (the seed's 'entry/exit tensors scaled by top-k'); the attention
    projections' outputs exist before RoPE/concat produce Q and K.
    Backward: gradient tensors of the block's largest intermediates live together (expert FC2
    input gradient, SwiGLU gradient of FC1's output width, FC1 input gradient); flash attention's
    backward keeps dQ, dK, dV and an fp32 dQ accumulator."""
    h = model.hidden_size
    seq_div = sh.tp if sh.sp else 1
    T = sh.tokens
    gathered = BF16 * T * h if sh.sp and sh.tp > 1 else 0.0
    a = model.attention
    nh = a.num_heads / sh.tp
    if a.kind == "mla":
        proj_out = BF16 * T * nh * (a.qk_head_dim + a.qk_nope_head_dim + a.v_head_dim)
        qkv = BF16 * T * nh * (2 * a.qk_head_dim + a.v_head_dim)
        qk_dim = a.qk_head_dim
    else:
        kvh = a.num_kv_heads / min(sh.tp, a.num_kv_heads)
        proj_out = BF16 * T * (nh + 2 * kvh) * a.head_dim
        qkv = proj_out
        qk_dim = a.head_dim
    attn_fwd = gathered + proj_out
    attn_grad = gathered + qkv + 2 * T * nh * qk_dim * 2 + BF16 * T * h / seq_div
    if sh.implementation != "te":
        # Unfused attention: the raw scores (and their fp32 copy for the fp32 softmax) exist
        # transiently in forward; the backward holds the score gradient.
        s2 = sh.mbs * nh * sh.seq * sh.seq
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
        gated = 2 if model.ffn.activation == "swiglu" else 1
        fwd["moe"] = gathered + BF16 * h * (src + Tk)
        grad["moe"] = BF16 * Tk * (h + fe + gated * fe) + BF16 * h * src
    else:
        f = model.ffn.hidden_size / sh.tp
        gated = 2 if model.ffn.activation == "swiglu" else 1
        fwd["mlp"] = gathered + BF16 * T * h / seq_div
        grad["mlp"] = gathered + BF16 * T * (f + gated * f) + BF16 * T * h / seq_div
    return fwd, grad


@lru_cache(maxsize=16384)
def chunk_memories(model, layout, rank: int, sh: act.ActShape, recompute, fp8: bool, vocab_div: int,
                   full_layers: int | None) -> tuple[ChunkMemory, ...]:
    """Per-micro-batch memory of each chunk of pipeline rank ``rank``.

    ``full_layers``: with full recompute, how many layers per chunk are recomputed (Megatron's
    block method recomputes the first N layers of each virtual stage); None means all."""
    drop = frozenset(act.dropped_modules("", recompute.modules)) if recompute.kind == "selective" else frozenset()
    grad_out = BF16 * sh.tokens * model.hidden_size / (sh.tp if sh.sp else 1)
    chunks = []
    for st in layout.rank_stages(rank):
        layers: list[LayerMemory] = []
        if st.embedding:
            layers.append(LayerMemory("embedding", act.kept_bytes(act.embedding_terms(model, sh), full=False, drop=frozenset(), fp8=False), 0.0, 0.0, 0.0))
        for pos, li in enumerate(st.layers):
            kind = model.layer_kinds[li]
            terms = act.layer_terms(model, sh, kind)
            fwd_t, grad_t = layer_transients(model, sh, kind, sh.tp)
            rc_kind = recompute.kind
            if rc_kind == "full" and full_layers is not None and pos >= full_layers:
                rc_kind = "none"
            layers.append(_layer_memory(f"layer {li} ({kind})", terms, rc_kind=rc_kind,
                                        drop=drop if rc_kind == "selective" else frozenset(), fp8=fp8,
                                        fwd_trans=fwd_t, grad_trans=grad_t, grad_out=grad_out,
                                        ordered=sh.implementation == "megatron-local"))
        for _ in range(st.mtp):
            terms = act.mtp_terms(model, sh, vocab_div)
            fwd_t, grad_t = layer_transients(model, sh, model.mtp_kind, sh.tp)
            fwd_t["head"] = BF16 * sh.tokens * model.vocab_size / vocab_div
            grad_t["head"] = BF16 * sh.tokens * model.vocab_size / vocab_div
            layers.append(_layer_memory("mtp", terms, rc_kind=recompute.kind if recompute.kind == "full" else "none",
                                        drop=frozenset(), fp8=fp8, fwd_trans=fwd_t, grad_trans=grad_t, grad_out=grad_out))
        if st.loss:
            terms = act.head_terms(model, sh, vocab_div)
            # The logits exist in bf16 before the fp32 softmax replaces them; in backward the
            # logits gradient is formed in fp32 and cast to bf16 for the output GEMMs.
            logits = BF16 * sh.tokens * model.vocab_size / vocab_div
            layers.append(_layer_memory("output+loss", terms, rc_kind="none", drop=frozenset(), fp8=fp8,
                                        fwd_trans={"head": logits}, grad_trans={"head": logits}, grad_out=0.0))
        chunks.append(ChunkMemory(st.vpp_rank, tuple(layers)))
    return tuple(chunks)


@dataclass(frozen=True)
class StageMemory:
    """One pipeline rank's memory."""

    rank: int
    constant: ConstantMemory
    comm_buffers: float
    chunks: tuple[ChunkMemory, ...]
    inflight_end_of_warmup: tuple[int, ...]
    """Chunks held per virtual stage at the end of the warm-up (warm-up count plus one)."""
    activations_end_of_warmup: float
    peak_bytes: float
    """Allocated peak over the step."""
    peak_components: dict[str, float]
    peak_moment: dict
    optimizer_transient: float

    @property
    def max_inflight(self) -> int:
        return sum(self.inflight_end_of_warmup)


def comm_buffers(setup) -> float:
    """NCCL communicators of this GPU's process groups, EP dispatcher staging, PP send/receive.

    A communicator costs its buffers only if its group has more than one rank (NCCL initializes
    lazily). Groups that fit in one NVLink domain use the intra-domain size."""
    from planner.cost.topology_groups import group_spans_domains

    mem = setup.efficiency.memory
    deg = setup.deg
    groups = {"tp": deg.tp, "cp": deg.cp, "dp": deg.dp * deg.cp, "pp": deg.pp, "ep": deg.ep, "edp": deg.edp}
    if setup.model.is_moe and deg.etp > 1:
        groups["etp"] = deg.etp
    total = 0.0
    for name, size in groups.items():
        if size <= 1:
            continue
        cross = group_spans_domains(setup, name)
        total += (mem.nccl_bytes_per_communicator_internode if cross else mem.nccl_bytes_per_communicator).value
    if setup.model.is_moe and deg.ep > 1 and setup.plan.dispatcher in ("deepep", "hybridep"):
        total += mem.ep_a2a_staging_bytes.value * setup.model.hidden_size / 7168
    if deg.pp > 1:
        # Megatron allocates receive buffers per in-flight transfer: forward and backward, and two
        # of each when P2P overlaps with compute (interleaved schedule).
        slots = 4 if deg.vpp > 1 else 2
        total += slots * BF16 * setup.tokens_per_microbatch * setup.model.hidden_size / (deg.tp if setup.sequence_parallel else 1)
    total += mem.gemm_workspace_bytes.value * mem.gemm_workspace_streams.value
    total += attention_score_buffer(setup)
    return total


def attention_score_buffer(setup) -> float:
    """Megatron's unfused ``DotProductAttention`` (local spec) takes the baddbmm input buffer for the
    [b * heads, s, s] scores from the global memory buffer ('mpu'), which keeps it for the rest of
    the run: bf16 scores of one micro-batch, measured on an H200 as the steady memory above
    weights and optimizer states (results/validation/gpu-memory.md)."""
    if setup.assumptions.implementation == "te":
        return 0.0
    heads = setup.model.attention.num_heads / setup.deg.tp
    return BF16 * setup.plan.mbs * heads * setup.seq_per_gpu ** 2


def _locate_moment(setup, rank, chunks, held, peak: float, *, recomputes: bool) -> dict:
    """The first op of the step (in time order) whose rise reaches the peak, named the way the
    seed does: 'end_of_warmup' (the activation peak: the forward that completes the warm-up, or
    the first backward before anything is freed), 'recompute_window' (a backward re-creating
    forward intermediates), another 'forward'/'backward' moment, or the 'optimizer' step."""
    from planner.cost.schedule import rank_ops

    deg = setup.deg
    ops = rank_ops(deg.pp, deg.vpp, setup.micro_batches, rank)
    counts = [0] * len(chunks)
    most = 0.0
    tol = 1e-9 * max(peak, 1.0)
    for op in ops:
        ch = chunks[op.chunk]
        h = held(counts)
        if op.kind == "F":
            counts[op.chunk] += 1
            most = max(most, held(counts))
            if h + ch.fwd_rise >= peak - tol:
                window = "end_of_warmup" if held(counts) >= most - tol and _is_warmup_end(ops, op) else "forward"
                return _moment("forward", op, counts, ch.layers[ch.fwd_rise_at].name, h, ch.fwd_rise, window)
        else:
            if h + ch.bwd_rise >= peak - tol:
                layer = ch.layers[ch.bwd_rise_at]
                if recomputes and layer.full > layer.kept + 1e-9:
                    window = "recompute_window"
                elif h >= most - tol:
                    window = "end_of_warmup"
                else:
                    window = "backward"
                return _moment("backward", op, counts, layer.name, h, ch.bwd_rise, window)
            counts[op.chunk] -= 1
    return {"phase": "optimizer", "chunk": None, "microbatch": None, "inflight": [0] * len(chunks), "layer": None,
            "held": 0.0, "rise": 0.0, "window": "optimizer"}


def _is_warmup_end(ops, op) -> bool:
    """Whether ``op`` is the last forward before the first backward."""
    i = ops.index(op)
    return i + 1 < len(ops) and ops[i + 1].kind == "B"


def _moment(phase, op, counts, layer, held_bytes, rise, window) -> dict:
    return {"phase": phase, "chunk": op.chunk, "microbatch": op.microbatch, "inflight": list(counts), "layer": layer,
            "held": held_bytes, "rise": rise, "window": window}


def held_function(setup, kept: list[float]):
    """Activation bytes on the GPU for an in-flight count vector (chunks held per virtual stage).

    With activation offload, only the chunk being computed and the next one (being prefetched
    back) stay on the GPU; the rest waits in host memory (Megatron fine-grained activation
    offloading overlaps the copies with compute)."""
    offload = setup.plan.offloads_activations

    def held(vec) -> float:
        total = sum(n * k for n, k in zip(vec, kept))
        if offload:
            n = sum(vec)
            total = total * min(n, 2) / n if n else 0.0
        return total

    return held


def _vocab_div(setup) -> int:
    return setup.deg.tp


def optimizer_transient(setup, const: ConstantMemory) -> float:
    """Optimizer-step temporaries: the fused multi-tensor Adam works in place on chunks, but the
    precision-aware paths (bf16 moments, FP8 primary weights) upcast one parameter bucket to fp32
    at a time; Megatron's distributed optimizer also all-gathers updated parameters into the
    (already allocated) parameter buffer. Estimate: one DDP bucket of fp32 temporaries when
    upcasting, else none."""
    if setup.plan.moments == "bf16" or setup.precision == "fp8":
        return 3 * setup.efficiency.memory.dp_bucket_bytes.value
    if setup.assumptions.implementation == "megatron-local":
        # Without Transformer Engine or Apex, Megatron-Core falls back to torch.optim.AdamW, whose
        # foreach step builds sqrt(v) for every parameter at once: one fp32 copy of the optimizer's
        # parameters (measured on an H200: the optimizer-step peak is 4 B per parameter above the
        # steady memory, results/validation/gpu-memory.md).
        return 4.0 * const.optimizer / (4.0 + 8.0)
    return 0.0


def stage_memory(setup, rank: int) -> StageMemory:
    deg = setup.deg
    sh = act.shape_of(setup)
    rc = setup.recompute
    fp8 = setup.precision == "fp8"
    full_layers = rc.layers if rc.kind == "full" else None
    if setup.plan.stage_recompute_layers is not None and rc.kind == "full":
        full_layers = setup.plan.stage_recompute_layers[rank]
    chunks = chunk_memories(setup.model, setup.layout, rank, sh, rc, fp8, _vocab_div(setup), full_layers)
    const = constant_memory(setup, rank)
    comm = comm_buffers(setup) + const.fsdp_buffers
    p, v, m = deg.pp, deg.vpp, setup.micro_batches
    before_f, before_b = inflight_profiles(p, v, m, rank)
    kept = [c.kept for c in chunks]

    held = held_function(setup, kept)

    base = const.total + comm
    # Exact peak from the distinct in-flight vectors (fast path shared with the search).
    best = max(
        [held(vec) + chunk.fwd_rise for c, chunk in enumerate(chunks) for vec in before_f[c]]
        + [held(vec) + chunk.bwd_rise for c, chunk in enumerate(chunks) for vec in before_b[c]],
        default=0.0,
    )
    moment = _locate_moment(setup, rank, chunks, held, best, recomputes=rc.kind != "none")
    opt_t = optimizer_transient(setup, const)
    if opt_t > best:
        best = opt_t
        moment = {"phase": "optimizer", "chunk": None, "microbatch": None, "inflight": [0] * len(chunks), "layer": None,
                  "held": 0.0, "rise": opt_t, "window": "optimizer"}
    peak = base + best
    # Activations vs transient at the peak moment: what is stored (including the current chunk's
    # stored part) vs the current op's temporaries.
    acts_at_peak = moment["held"]
    transient_at_peak = moment["rise"]
    if moment["phase"] == "forward":
        ch = chunks[moment["chunk"]]
        idx = ch.fwd_rise_at
        stored_prefix = sum(l.kept for l in ch.layers[: idx + 1])
        acts_at_peak += stored_prefix
        transient_at_peak -= stored_prefix
    components = {
        "weights": const.weights,
        "gradients": const.gradients,
        "optimizer": const.optimizer,
        "activations": acts_at_peak,
        "transient": transient_at_peak,
        "comm_buffers": comm,
    }
    w = warmup_count(p, v, m, rank)
    # Chunks held at the end of the warm-up: the warm-up forwards plus the first steady-state one.
    end_vec = [0] * len(chunks)
    from planner.cost.schedule import rank_ops
    ops = rank_ops(p, v, m, rank)
    held_now = [0] * len(chunks)
    for op in ops[: min(w + 1, len(ops))]:
        if op.kind != "F":
            break
        held_now[op.chunk] += 1
    end_vec = held_now
    acts_warm = held(end_vec)
    return StageMemory(rank, const, comm, chunks, tuple(end_vec), acts_warm, peak, components, moment, opt_t)


@dataclass(frozen=True)
class MemoryReport:
    setup: object
    stages: tuple[StageMemory, ...]
    allocator_fraction: float
    cuda_context: float
    capacity_bytes: float
    """Usable HBM less the CUDA context and the user's margin (the allocator margin is counted in
    the peak)."""
    host_needed_bytes: float
    host_capacity_bytes: float

    @property
    def worst(self) -> StageMemory:
        return max(self.stages, key=lambda s: (self.reserved(s), -s.rank))

    def reserved(self, stage: StageMemory) -> float:
        return stage.peak_bytes * (1 + self.allocator_fraction)

    @property
    def peak_bytes(self) -> float:
        """Estimated reserved peak of the worst stage (allocated peak plus allocator margin)."""
        return self.reserved(self.worst)

    def reason(self) -> str:
        """Why the plan does not fit (empty when it fits)."""
        out = []
        if self.peak_bytes > self.capacity_bytes:
            out.append(f"stage {self.worst.rank} peaks at {self.peak_bytes / 2**30:.1f} GiB, "
                       f"{(self.peak_bytes - self.capacity_bytes) / 2**30:.1f} GiB above the {self.capacity_bytes / 2**30:.1f} GiB capacity")
        if self.host_needed_bytes > self.host_capacity_bytes:
            out.append(f"offload needs {self.host_needed_bytes / 2**30:.1f} GiB of host memory per GPU, more than the "
                       f"{self.host_capacity_bytes / 2**30:.1f} GiB the host has")
        return "; ".join(out)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes and self.host_needed_bytes <= self.host_capacity_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.peak_bytes

    def stage_json(self, s: StageMemory) -> dict:
        comps = dict(s.peak_components)
        comps["allocator"] = s.peak_bytes * self.allocator_fraction
        return {
            "rank": s.rank,
            "peak_bytes": round(self.reserved(s)),
            "allocated_peak_bytes": round(s.peak_bytes),
            "components": {k: round(v) for k, v in comps.items()},
            "peak_moment": _moment_json(s.peak_moment),
            "activations_end_of_warmup_bytes": round(s.activations_end_of_warmup),
            "inflight_chunks_end_of_warmup": s.max_inflight,
            "layers": sum(len([l for l in c.layers if l.name.startswith("layer")]) for c in s.chunks),
            "host_optimizer_bytes": round(s.constant.host_optimizer),
        }

    def to_json(self) -> dict:
        w = self.worst
        worst = self.stage_json(w)
        return {
            "peak_bytes": worst["peak_bytes"],
            "allocated_peak_bytes": worst["allocated_peak_bytes"],
            "capacity_bytes": round(self.capacity_bytes),
            "fits": self.fits,
            "headroom_bytes": round(self.headroom_bytes),
            "worst_stage": w.rank,
            "peak_moment": worst["peak_moment"],
            "components": worst["components"],
            "stages": [self.stage_json(s) for s in self.stages],
            "host": {"needed_bytes": round(self.host_needed_bytes), "capacity_bytes": round(self.host_capacity_bytes)},
            "assumptions": {
                "allocator_fraction": self.allocator_fraction,
                "cuda_context_bytes": round(self.cuda_context),
                "note": "peak_bytes estimates reserved memory: the allocated peak plus the allocator margin; "
                        "capacity is usable HBM less the CUDA context and the user margin",
            },
        }


def _moment_json(m: dict) -> dict:
    out = {"phase": m.get("phase"), "chunk": m.get("chunk"), "microbatch": m.get("microbatch"), "layer": m.get("layer"),
           "window": m.get("window")}
    if m.get("inflight") is not None:
        out["inflight_chunks"] = sum(m["inflight"])
    return out


def memory_report(setup) -> MemoryReport:
    mem = setup.efficiency.memory
    stages = tuple(stage_memory(setup, r) for r in range(setup.deg.pp))
    frac = mem.allocator_fraction.value if setup.assumptions.allocator_margin_bytes is None else 0.0
    ctx = mem.cuda_context_bytes.value
    capacity = setup.hw.gpu.hbm_usable_bytes.value - ctx - setup.job.memory_margin_bytes
    if setup.assumptions.allocator_margin_bytes is not None:
        capacity -= setup.assumptions.allocator_margin_bytes
    host_needed = max(s.constant.host_optimizer for s in stages)
    if setup.plan.offloads_activations:
        host_needed += max(sum(n * c.kept for n, c in zip(s.inflight_end_of_warmup, s.chunks)) for s in stages)
    return MemoryReport(setup, stages, frac, ctx, capacity, host_needed, setup.hw.host.host_memory_bytes.value)
