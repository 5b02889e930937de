"""Communication: collective costs on the links a group spans, and what Megatron overlaps.

Collectives (bytes are the full buffer, per GPU):

- ring all-reduce moves 2(n-1)/n of the buffer per rank, reduce-scatter and all-gather (n-1)/n,
  all-to-all (n-1)/n (Thakur, Rabenseifner & Gropp 2005; NCCL's busbw convention); the latency
  term is per ring step, or per tree level for all-reduce when that is smaller (NCCL tree);
- inside an NVLink domain with in-switch reduction (NVLS / NVLink SHARP) an all-reduce sends and
  receives the buffer once, at the NVLS algorithm bandwidth;
- a group spanning k domains with g members each runs hierarchically (NCCL's intra-node then
  inter-node phases on a rail-optimized fabric): NVLink for the intra-domain part, the g members'
  NICs in parallel for the (k-1)/k inter-domain part on 1/g of the buffer;
- EP dispatch/combine follow DeepEP's scheme: traffic to peers in the same domain over NVLink, to
  other domains over RDMA, concurrently; DeepEP/HybridEP send a token once per destination domain
  (then forward over NVLink), NCCL all-to-all once per destination expert.

Per-layer traffic (Megatron-Core with sequence parallelism): TP all-gather before each
column-parallel block and reduce-scatter after each row-parallel one, mirrored in the backward,
plus the backward re-gather of the input for the weight gradient; CP ring passes K/V (and dK/dV in
the backward) around the CP group during attention; EP dispatch and combine around the experts.

Overlap (only the exposed part adds time; a fraction ``overlap_interference`` of the hidden part
still slows the compute it hides behind):

- TP: with --tp-comm-overlap each collective hides behind its neighbouring GEMM; without it only
  the backward's column-parallel re-gather (behind dgrad) and input-gradient reduce-scatter (behind
  wgrad) are asynchronous (Megatron's LinearWithGradAccumulationAndAsyncCommunication);
- CP: each ring step's transfer hides behind the previous step's attention block;
- EP: with ep_overlap=on (Megatron --overlap-moe-expert-parallel-comm, combined 1F1B) dispatch and
  combine of one micro-batch hide behind the other micro-batch's layer compute; otherwise exposed.
  The overlap is not free: besides the interference, the combined 1F1B's stage scheduling adds
  host seconds to every MoE layer and pass unless CUDA graphs replay whole layers
  (planner.cost.rates.combined_stage_host_s, added to the block's compute in planner.cost.compose);
- DP: gradient reduce-scatter bucketed behind the last micro-batch's backward, parameter
  all-gather behind the first micro-batch's forward (--overlap-grad-reduce/--overlap-param-gather);
- PP: send/receive is exposed for plain 1F1B; the interleaved schedule overlaps it with compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.arrays import Num, any_true, ceil_log2, maximum, minimum, where
from planner.cost.compute import BlockTime
from planner.cost.flops import BF16, ModelShape, Shard
from planner.cost.rates import Rates
from planner.cost.topology import GroupSpan


# ---------------------------------------------------------------------------------------------
# Collective primitives (pure): time for one GPU of an n-rank group.
# ---------------------------------------------------------------------------------------------
def ring_all_reduce_volume(nbytes: Num, n: int) -> Num:
    """Bytes each rank sends (and receives) in a ring all-reduce: 2(n-1)/n of the buffer."""
    return 2.0 * (n - 1) / n * nbytes


def ring_gather_volume(nbytes: Num, n: int) -> Num:
    """Bytes each rank sends in a ring reduce-scatter or all-gather of an n-rank buffer: (n-1)/n."""
    return (n - 1) / n * nbytes


def all_to_all_volume(nbytes: Num, n: int) -> Num:
    """Bytes each rank sends in an all-to-all of its ``nbytes``: everything but its own share."""
    return (n - 1) / n * nbytes


def all_reduce_time(nbytes: Num, n: int, busbw: Num, latency: Num) -> Num:
    """Ring all-reduce bandwidth term plus the smaller of the ring (2(n-1) steps) and tree
    (2 log2 n levels) latency terms (NCCL picks the tree for small messages)."""
    steps = minimum(2 * (n - 1), 2 * ceil_log2(n))
    return where(n <= 1, 0.0, ring_all_reduce_volume(nbytes, n) / busbw + steps * latency)


def gather_time(nbytes: Num, n: int, busbw: Num, latency: Num) -> Num:
    """Ring reduce-scatter or all-gather of an ``nbytes`` buffer."""
    return where(n <= 1, 0.0, ring_gather_volume(nbytes, n) / busbw + (n - 1) * latency)


def nvls_all_reduce_time(nbytes: Num, n: int, algbw: Num, latency: Num) -> Num:
    """All-reduce with in-switch reduction: each GPU sends its buffer to the switch once and
    receives the reduced buffer once."""
    return where(n <= 1, 0.0, nbytes / algbw + 2 * latency)


def p2p_time(nbytes: Num, bw: Num, latency: Num) -> Num:
    return nbytes / bw + latency


def collective_time(op: str, nbytes: Num, span: GroupSpan, rates: Rates) -> Num:
    """Time of 'all_reduce', 'reduce_scatter' or 'all_gather' of an ``nbytes`` buffer on a group
    with this span: flat on NVLink inside one domain, hierarchical across domains. The span's
    fields and the size may be arrays (elementwise)."""
    n = span.size
    lat_nv, lat_net = rates.nvlink_latency_s, rates.nic_latency_s
    # Inside one domain.
    if op == "all_reduce":
        flat = all_reduce_time(nbytes, n, rates.ring_busbw(op), lat_nv)
        if rates.nvls_algbw:
            flat = minimum(nvls_all_reduce_time(nbytes, n, rates.nvls_algbw, lat_nv), flat)
    else:
        flat = gather_time(nbytes, n, rates.ring_busbw(op), lat_nv)
    # Across k domains with g members each: NVLink inside, the g NICs in parallel across.
    k, g = span.domains, span.per_domain
    intra = gather_time(nbytes, g, rates.nvlink_busbw, lat_nv)  # zero when g == 1
    part = nbytes / g
    if op == "all_reduce":
        hier = 2 * intra + all_reduce_time(part, k, rates.nic_busbw, lat_net)
    else:
        hier = intra + gather_time(part, k, rates.nic_busbw, lat_net)
    # A calibrated fixed cost per call (dispatch and launch), zero from the profile alone.
    return where((n <= 1) | (nbytes <= 0), 0.0, where(span.cross_domain, hier, flat) + rates.call(op))


def a2a_latency(n: int, hop_s: Num, peer_s: Num) -> Num:
    """Latency of one all-to-all on ``n`` ranks: one hop plus a per-peer term (one message to each
    other rank)."""
    return hop_s + (n - 1) * peer_s


def a2a_time(bytes_per_token: Num, tokens: Num, top_k: int, span: GroupSpan, rates: Rates,
             dispatcher: str | None, max_domains: int | None = None) -> Num:
    """One EP dispatch (or combine) on the worst group: ``tokens`` tokens of this GPU each going
    to ``top_k`` experts spread evenly over the group. NVLink and network parts run concurrently.

    Remote-domain copies per token: NCCL all-to-all sends one per expert, top_k (n-g)/n; DeepEP and
    HybridEP one per destination domain, (k-1)(1-(1-1/k)^top_k) (capped by node-limited routing),
    then forward over NVLink inside the destination domain."""
    n = span.size
    k = span.domains
    cross = k > 1
    g = where(cross, span.per_domain, n)
    local_copies = top_k * (g - 1) / n
    remote_copies = top_k * (n - g) / n
    nvl_copies = local_copies
    net_copies = remote_copies
    if dispatcher in ("deepep", "hybridep"):
        distinct = (k - 1) * (1 - (1 - 1 / k) ** top_k)
        if max_domains:
            distinct = minimum(distinct, max_domains)
        net_copies = where(cross, minimum(remote_copies, distinct), net_copies)
        # forwarding in the destination domain
        nvl_copies = where(cross, local_copies + remote_copies * (g - 1) / g, nvl_copies)
    t_nvl = tokens * nvl_copies * bytes_per_token / rates.a2a_bw(dispatcher, False)
    t_net = where(cross, tokens * net_copies * bytes_per_token / rates.a2a_bw(dispatcher, True), 0.0)
    latency = a2a_latency(n, where(cross, rates.nic_latency_s, rates.nvlink_latency_s), rates.a2a_peer_latency_s)
    latency = latency + rates.call("all_to_all")
    return where((n <= 1) | (tokens <= 0), 0.0, maximum(t_nvl, t_net) + latency)


# ---------------------------------------------------------------------------------------------
# Per-layer communication with overlap.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommCost:
    """Seconds of one cause's communication per micro-batch on one GPU: total and the part that
    adds to the step (exposed); the rest is hidden behind compute."""

    cause: str
    total: Num
    exposed: Num

    @property
    def hidden(self) -> Num:
        return self.total - self.exposed


def overlapped(comm: Num, capacity: Num, interference: Num) -> Num:
    """Exposed time of ``comm`` seconds overlapped with ``capacity`` seconds of compute: what does
    not fit, plus the interference of what does."""
    hidden = minimum(comm, capacity)
    return comm - hidden + interference * hidden


@dataclass(frozen=True)
class CommFlags:
    """Plan-level switches that decide what communication a block does and what overlaps."""

    tp_overlap: bool
    ep_overlap: bool
    recompute: str | tuple[str, ...] | None
    fp8_dispatch: bool
    """DeepEP/HybridEP dispatch FP8 tokens (with scales) in FP8 training."""


def comm_causes(ms: ModelShape, block: str, spans: dict[str, GroupSpan]) -> tuple[str, ...]:
    """Which communication a block does ('tp', 'cp', 'ep', 'etp'). With array spans, a cause is
    listed when some plan of the batch has the group (the others get zero for it)."""
    base = block.removesuffix("_swa")
    is_moe = base == "moe" or (base == "mtp" and ms.mtp_kind == "moe")
    out = []
    if any_true(spans["tp"].size > 1):
        out.append("tp")
    if any_true(spans["cp"].size > 1) and base in ("dense", "moe", "mtp"):
        out.append("cp")
    if is_moe and any_true(spans["ep"].size > 1):
        out.append("ep")
    if is_moe and any_true(spans["etp"].size > 1):
        out.append("etp")
    return tuple(out)


def cause_transfers(ms: ModelShape, sh: Shard, cause: str, spans: dict[str, GroupSpan], rates: Rates,
                    fp8_dispatch: bool):
    """What one cause's collectives cost for one micro-batch, before any overlap (the same for
    every block with that cause; the expert-TP traffic is never overlapped: its CommCost)."""
    if cause == "tp":
        return tp_collectives(ms, sh, spans["tp"], rates)
    if cause == "cp":
        return cp_transfers(ms, sh, spans["cp"], rates)
    if cause == "ep":
        return ep_transfers(ms, sh, spans["ep"], rates, fp8_dispatch)
    return etp_comm(ms, sh, spans["etp"], rates)


def block_comm(ms: ModelShape, sh: Shard, block: str, bt: BlockTime, spans: dict[str, GroupSpan],
               rates: Rates, flags: CommFlags, transfers: dict | None = None) -> tuple[CommCost, ...]:
    """Communication of one block for one micro-batch (forward and backward together): each
    cause's collectives (what they cost, :func:`cause_transfers`; ``transfers`` keeps them for
    the blocks that share ``sh`` and ``spans``) and their exposure (what overlaps)."""
    out: list[CommCost] = []
    full = flags.recompute == "full"
    # torchtitan's per-op selective AC recomputes the TP all-gathers (not in its save list) and
    # keeps the reduce-scatters' outputs.
    regather = full or flags.recompute == "op"
    transfers = {} if transfers is None else transfers
    for cause in comm_causes(ms, block, spans):
        if cause not in transfers:
            transfers[cause] = cause_transfers(ms, sh, cause, spans, rates, flags.fp8_dispatch)
        t = transfers[cause]
        if cause == "tp":
            out.append(tp_comm(ms, block, bt, t, rates, flags.tp_overlap, regather, full))
        elif cause == "cp":
            out.append(cp_comm(bt, t, rates, full))
        elif cause == "ep":
            out.append(ep_comm(bt, t, rates, flags))
        else:
            out.append(t)
    return tuple(out)


def tp_collectives(ms: ModelShape, sh: Shard, span: GroupSpan, rates: Rates) -> tuple[Num, Num]:
    """(all-gather, reduce-scatter) seconds of one micro-batch's activation over the TP group."""
    act = sh.tokens * ms.hidden * BF16  # the gathered activation of one micro-batch
    return collective_time("all_gather", act, span, rates), collective_time("reduce_scatter", act, span, rates)


def tp_comm(ms: ModelShape, block: str, bt: BlockTime, collectives: tuple[Num, Num], rates: Rates,
            tp_overlap: bool, regather: bool, rescatter: bool) -> CommCost:
    """TP/SP communication of one block: an all-gather in front of each column-parallel GEMM and a
    reduce-scatter after each row-parallel one, their backward mirrors, and the recomputed forward's
    again (its all-gathers when ``regather``, its reduce-scatters when ``rescatter``: both under
    full recompute); each hides behind its neighbouring GEMM (``bt``'s GEMM times)."""
    interf = rates.overlap_interference
    ag, rs = collectives

    def tp_pair(pre: str, post: str | None) -> tuple[Num, Num]:
        """AG in front of GEMM ``pre`` and RS after GEMM ``post``, forward and backward mirrors."""
        f_pre, d_pre, w_pre = bt.gemm(pre)
        f_post, d_post, _ = bt.gemm(post) if post else (0.0, 0.0, 0.0)
        ov = tp_overlap
        total = ag + (rs if post else 0.0)  # forward
        exposed = overlapped(ag, f_pre if ov else 0.0, interf)
        if post:
            exposed += overlapped(rs, f_post if ov else 0.0, interf)
            # Backward: AG mirror of the forward RS (before the row-parallel dgrad).
            total += ag
            exposed += overlapped(ag, d_post if ov else 0.0, interf)
        # Backward of the column-parallel GEMM: re-gather its input (async, behind dgrad) and
        # reduce-scatter the input gradient (async, behind wgrad).
        total += ag + rs
        exposed += overlapped(ag, d_pre, interf) + overlapped(rs, w_pre, interf)
        if regather:  # the recomputed forward gathers again (and scatters again under full recompute)
            again = rescatter and post
            total += ag + (rs if again else 0.0)
            exposed += overlapped(ag, f_pre if ov else 0.0, interf) + (overlapped(rs, f_post if ov else 0.0, interf) if again else 0.0)
        return total, exposed

    base = block.removesuffix("_swa")
    tot: Num = 0.0
    exp: Num = 0.0
    if base in ("dense", "moe", "mtp"):
        first = "q_down" if ms.attn_kind == "mla" and ms.q_lora else ("kv_down" if ms.attn_kind == "mla" else "qkv")
        t, e = tp_pair(first, "proj")
        tot, exp = tot + t, exp + e
        if base == "dense" or (base == "mtp" and ms.mtp_kind == "dense"):
            t, e = tp_pair("mlp.fc1", "mlp.fc2")
            tot, exp = tot + t, exp + e
        elif ms.shared_ffn:
            t, e = tp_pair("shared.fc1", "shared.fc2")
            tot, exp = tot + t, exp + e
    if base in ("head", "mtp"):
        t, e = tp_pair("output", None)
        tot, exp = tot + t, exp + e
    if base in ("embedding", "mtp"):
        # Vocabulary-parallel embedding: partial sums reduce-scattered forward, gathered back.
        tot, exp = tot + rs + ag, exp + rs + ag
    return CommCost("tp", tot, exp)


def cp_transfers(ms: ModelShape, sh: Shard, span: GroupSpan, rates: Rates) -> tuple[Num, Num, Num]:
    """(forward, backward, share of the attention they hide behind) seconds of ring attention's transfers (Megatron context parallelism):
    cp-1 steps passing this rank's K and V; the backward passes K, V and their gradients."""
    heads = ms.heads // sh.tp
    kv_heads = heads if ms.attn_kind == "mla" else maximum(1, ms.kv_heads // sh.tp)
    kv_bytes = sh.tokens * kv_heads * (ms.qk_dim + ms.v_dim) * BF16
    cp = span.size
    bw = where(span.cross_domain, rates.nic_bw, rates.nvlink_bw)
    bw *= rates.p2p_fraction
    lat = where(span.cross_domain, rates.nic_latency_s, rates.nvlink_latency_s) + rates.call("send_recv")
    fwd = (cp - 1) * p2p_time(kv_bytes, bw, lat)
    bwd = (cp - 1) * p2p_time(2 * kv_bytes, bw, lat)
    return fwd, bwd, (cp - 1) / cp


def cp_comm(bt: BlockTime, transfers: tuple[Num, Num, Num], rates: Rates, full: bool) -> CommCost:
    """Ring attention's exposure: each of the cp-1 steps (``share`` of the attention) hides behind
    one step of attention (``bt``)."""
    fwd, bwd, share = transfers
    exposed = overlapped(fwd, bt.attn_fwd * share, rates.overlap_interference)
    exposed += overlapped(bwd, bt.attn_bwd * share, rates.overlap_interference)
    total = fwd + bwd
    if full:
        total += fwd
        exposed += overlapped(fwd, bt.attn_fwd * share, rates.overlap_interference)
    return CommCost("cp", total, exposed)


def fp8_dispatch(sh: Shard) -> bool:
    """Whether the EP dispatch sends FP8 tokens: never, in every release planner models, whatever
    the training precision or dispatcher (issue 39: crediting it halved DeepEP's and HybridEP's
    dispatch bytes in FP8 plans, a gain no published pair measured).

    Megatron-Core's HybridEP wrapper fixes ``fp8_dispatch = False  # Currently, we do not support
    fp8 dispatch`` (megatron/core/transformer/moe/fused_a2a.py HybridEPDispatch.forward, core_v0.16.0
    through core_v0.19.0 and the 2026-08 main), and its DeepEP path hands the BF16 hidden states to
    ``fused_dispatch`` unquantized (token_dispatcher.py _DeepepManager.dispatch): Transformer Engine
    quantizes after the exchange, in the expert GEMM. Only main's 'ncclep' backend has an MXFP8 wire
    dtype (transformer_config.py moe_dispatch_fwd_dtype, default 'bf16'), a dispatcher planner does
    not offer. The DeepSeek-V3 GB200 guide (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization,
    sec. 3.2) left FP8 dispatch off: the re-quantization for the backward offsets what it saves.
    torchtitan's HybridEP raises on it and its DeepEP defaults it off with no caller setting it
    (torchtitan/distributed/deepep/hybridep.py, deepep.py use_fp8_dispatch, main b5bcd76)."""
    del sh  # the answer depends on no plan key today; the shard is where a release's switch would be read
    return False


def ep_dispatch_combine(ms: ModelShape, sh: Shard, span: GroupSpan, rates: Rates,
                        fp8_dispatch: bool) -> tuple[Num, Num]:
    """(dispatch, combine) seconds for the heaviest receiver (routing imbalance). FP8 dispatch
    sends 1 byte per element plus 1/128 scales; the combine is BF16."""
    h = ms.hidden
    disp_bytes = h * (1 + 4 / 128) if fp8_dispatch else h * BF16
    comb_bytes = h * BF16
    tokens = sh.sp_tokens * sh.imbalance
    disp = a2a_time(disp_bytes, tokens, ms.top_k, span, rates, sh.dispatcher, ms.group_top_k)
    comb = a2a_time(comb_bytes, tokens, ms.top_k, span, rates, sh.dispatcher, ms.group_top_k)
    return disp, comb


def ep_transfers(ms: ModelShape, sh: Shard, span: GroupSpan, rates: Rates, fp8_dispatch: bool) -> Num:
    """Seconds of one dispatch plus one combine (:func:`ep_dispatch_combine`)."""
    disp, comb = ep_dispatch_combine(ms, sh, span, rates, fp8_dispatch)
    return disp + comb


def ep_comm(bt: BlockTime, once: Num, rates: Rates, flags: CommFlags) -> CommCost:
    """Dispatch and combine, forward and backward (the backward mirrors them), again in a
    recomputed MoE forward; with EP overlap hidden behind the other micro-batch's layer (``bt``)."""
    total = 2 * once  # forward dispatch+combine, backward combine-grad+dispatch-grad
    rec = flags.recompute == "full" or (isinstance(flags.recompute, tuple) and "moe" in flags.recompute)
    if rec:
        total += once
    if flags.ep_overlap:
        capacity = bt.fwd + bt.bwd
        exposed = overlapped(total, capacity, rates.overlap_interference)
    else:
        exposed = total
    return CommCost("ep", total, exposed)


def etp_comm(ms: ModelShape, sh: Shard, span: GroupSpan, rates: Rates) -> CommCost:
    """Expert-TP all-gather and reduce-scatter of the routed tokens, forward and backward (exposed)."""
    routed = sh.sp_tokens * ms.top_k * sh.etp * ms.hidden * BF16
    ag = collective_time("all_gather", routed, span, rates)
    rs = collective_time("reduce_scatter", routed, span, rates)
    return CommCost("etp", 2 * (ag + rs), 2 * (ag + rs))


# ---------------------------------------------------------------------------------------------
# Pipeline and data-parallel communication.
# ---------------------------------------------------------------------------------------------
def pp_p2p_time(ms: ModelShape, sh: Shard, span: GroupSpan, rates: Rates) -> Num:
    """One activation (or gradient) transfer between pipeline neighbours: each TP rank sends its
    sequence-parallel slice [s/tp, b, h] over its own link."""
    nbytes = sh.sp_tokens * ms.hidden * BF16
    cross = span.cross_domain
    bw = where(cross, rates.nic_bw, rates.nvlink_bw) * rates.p2p_fraction
    t = p2p_time(nbytes, bw, where(cross, rates.nic_latency_s, rates.nvlink_latency_s) + rates.call("send_recv"))
    return where(span.size <= 1, 0.0, t)


def dp_time(grad_bytes: Num, param_bytes: Num, span: GroupSpan, sharded: bool, rates: Rates) -> tuple[Num, Num]:
    """(gradient sync, parameter gather) seconds for one rank's local parameters: reduce-scatter
    plus all-gather when the optimizer is sharded (distributed optimizer, ZeRO), all-reduce when
    it is not (DDP); zero without data parallelism."""
    if sharded:
        return (collective_time("reduce_scatter", grad_bytes, span, rates),
                collective_time("all_gather", param_bytes, span, rates))
    return collective_time("all_reduce", grad_bytes, span, rates), 0.0
