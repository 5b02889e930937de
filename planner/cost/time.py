"""Step time of a plan, composed from its blocks, and the explanation (DESIGN.md sec. 4 and 6).

How a plan's time is composed:

1. Each pipeline rank's chunks hold blocks (decoder layers by kind, embedding, head and loss, MTP).
   A block's time for one micro-batch is the sum of its kernels' times
   (:mod:`planner.cost.compute`, memoized on a small key: model, tp/cp/ep/etp, mbs, seq,
   precision, recompute, dispatcher, rates) plus its communication's exposed part
   (:mod:`planner.cost.comm`, group spans from :mod:`planner.cost.topology`).
2. A rank's time per micro-batch t_r is the sum over its blocks, plus exposed pipeline p2p.
3. The schedule (:mod:`planner.cost.pipeline`) gives the forward/backward phase from the t_r,
   the micro-batch count m and vpp.
4. After it: the exposed data-parallel gradient sync and parameter gather, and the optimizer step
   (or the offloaded one) of the slowest rank.

``stage_times``/``step_time`` expose the pieces for the search's cost tables; ``time_report`` adds
FLOPs, throughput, the breakdown by cause (exposed and hidden communication) and the bottleneck.

The pieces ``evaluate`` composes (kernel inventory and times, block time under a recompute setting,
each cause's collectives and exposure, rank p2p, activation offload, the schedule, the
data-parallel exposure and optimizer step) take numpy arrays for the degrees, micro-batch size and
count and group spans as well as numbers (memoized only on hashable arguments);
planner.search.time_tables runs them over many structural keys at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.cost.arrays import maximum
from planner.cost.comm import CommFlags
from planner.cost.flops import BF16, FP32, Shard, megatron_model_flops, model_shape
from planner.cost.pipeline import (
    RankCost, Spans, data_parallel, dp_exposure, local_params, offloaded_optimizer_time, optimizer_shard,
    optimizer_step_time, pipeline_time, rank_cost, sync_kind,
)
from planner.cost.rates import Rates, rates_for
from planner.cost.topology import GroupSpan, group_spans, idle_gpus, resolve_domain_fill

# Bytes of saved activations per token per layer used to size activation offload when the memory
# model's figure is not passed in: Korthikanti et al. 2022 eq. 2 with sequence parallelism and
# selective recompute, 34 * s * b * h / t.
OFFLOAD_ACT_BYTES_PER_TOKEN_HIDDEN = 34

LABELS = {
    "gemm": "GEMM compute",
    "attention": "attention kernels",
    "memory_bound": "memory-bound kernels (norms, element-wise, permutation, loss)",
    "recompute": "activation recompute",
    "tp": "exposed TP/SP communication",
    "cp": "exposed CP ring-attention communication",
    "ep": "exposed EP all-to-all",
    "etp": "exposed expert-TP communication",
    "pp_p2p": "exposed pipeline send/receive",
    "pipeline_bubble": "pipeline bubble",
    "dp_grad": "exposed data-parallel gradient reduce-scatter",
    "dp_param": "exposed data-parallel parameter all-gather",
    "fsdp": "exposed FSDP parameter gathers and gradient reduce-scatters",
    "optimizer": "optimizer step",
    "optimizer_offload": "optimizer step offloaded to the host",
    "activation_offload": "activation offload traffic over the host link",
}

NOT_MODELED = (
    "host (CPU) launch overhead beyond a fixed per-kernel gap; CUDA graphs",
    "network congestion between concurrent groups sharing NICs",
    "tied-embedding gradient all-reduce between first and last pipeline stages",
    "stragglers, clock throttling and failures",
)


@dataclass(frozen=True)
class Evaluation:
    """Everything one evaluation of a plan computes (internal; time_report explains it)."""

    rates: Rates
    ranks: tuple[RankCost, ...]
    micro_batches: int
    vpp: int
    pipeline_s: float
    dp_grad_total: float
    dp_grad_exposed: float
    dp_param_total: float
    dp_param_exposed: float
    fsdp_total: float
    fsdp_exposed: float
    optimizer_s: float
    optimizer_offload: dict | None
    act_offload: dict | None
    act_offload_exposed: float
    step_s: float
    spans: dict[str, GroupSpan]
    domain_fill: int
    slowest: int
    extra: dict = field(default_factory=dict)


def recompute_setting(setup) -> tuple[str | tuple[str, ...] | None, int | None]:
    """(setting for every layer, fully recomputed layers per chunk or None)."""
    rc = setup.recompute
    if setup.plan.stage_recompute_layers is not None and rc.kind == "full":
        return None, 0  # per-stage counts: see full_layers_per_chunk
    if rc.kind == "none":
        return None, None
    if rc.kind == "selective":
        return tuple(rc.modules), None
    if rc.layers is None:
        return "full", None
    return None, rc.layers


def full_layers_per_chunk(setup, rank: int, chunks) -> tuple[int, ...]:
    """Fully recomputed layers in each chunk of a rank: the first N layers of every chunk (Megatron's
    block method; with VPP, N per virtual stage), N from full:N or the plan's per-stage counts (the
    same semantics as the memory model's planner.cost.memory.stage_chunks)."""
    per_stage = setup.plan.stage_recompute_layers
    if per_stage and setup.recompute.kind == "full":
        n = per_stage[rank] if rank < len(per_stage) else 0
        return tuple(min(n, ch.num_layers) for ch in chunks)
    _, n = recompute_setting(setup)
    return tuple(min(n or 0, ch.num_layers) for ch in chunks)


def plan_shard(setup) -> Shard:
    plan, deg, a = setup.plan, setup.deg, setup.assumptions
    return Shard(
        tp=deg.tp, cp=deg.cp, ep=deg.ep, etp=deg.etp, mbs=plan.mbs, seq=setup.job.seq_len,
        implementation=a.implementation, dispatcher=plan.dispatcher if deg.ep > 1 else None,
        imbalance=a.routing_imbalance if deg.ep > 1 else 1.0,
        fp8=setup.precision == "fp8",
    )


def plan_spans(setup) -> tuple[dict[str, GroupSpan], int]:
    deg = setup.deg
    fill = resolve_domain_fill(setup.hw.domain_size, setup.job.domain_fill, deg.tp, deg.cp, deg.ep, deg.etp)
    spans = group_spans(setup.assumptions.rank_order, fill, deg.tp, deg.cp, deg.dp, deg.pp, deg.etp, deg.ep, deg.edp)
    return spans, fill


def comm_flags(setup, sh: Shard) -> CommFlags:
    """The plan-level switches of its communication (TP overlap by implementation unless set, EP
    overlap, recompute, FP8 dispatch with DeepEP/HybridEP in FP8 training)."""
    a = setup.assumptions
    recompute, _ = recompute_setting(setup)
    return CommFlags(
        tp_overlap=a.tp_comm_overlap if a.tp_comm_overlap is not None else a.implementation == "te",
        ep_overlap=setup.plan.ep_overlap == "on",
        recompute=recompute,
        fp8_dispatch=sh.fp8 and sh.dispatcher in ("deepep", "hybridep"),
    )


def p2p_overlaps(setup) -> bool:
    """Megatron-Core overlaps pipeline send/receive with compute in the interleaved schedule
    (overlap_p2p_comm); 2021-22 Megatron (megatron-local) blocked on it."""
    return setup.deg.vpp > 1 and setup.assumptions.implementation == "te"


def activation_offload(layers: int, sp_tokens: float, hidden: int, fwd: float, bwd: float,
                       rates: Rates) -> tuple[float, float]:
    """(bytes per micro-batch, seconds added per micro-batch) of offloading a rank's saved
    activations over the host link, behind its forward (copy out) and backward (copy in)."""
    nbytes = layers * OFFLOAD_ACT_BYTES_PER_TOKEN_HIDDEN * sp_tokens * hidden
    extra = maximum(0.0, nbytes / rates.host_bw - fwd) + maximum(0.0, nbytes / rates.host_bw - bwd)
    return nbytes, extra


def pipeline_phase(times, micro_batches: int, vpp: int, pp: int, p2p_total: float, p2p_overlap: bool) -> float:
    """The forward/backward phase: the schedule over the ranks' per-micro-batch times, plus the
    fill and drain passing each boundary once more with latency on the path (plain 1F1B already
    has its exposed p2p inside every t_r; interleaved hides it in the steady state but not while the
    first micro-batch travels down and the last one back up). Scalars or arrays."""
    pipe = pipeline_time(times, micro_batches, vpp)
    if p2p_overlap:
        pipe += 2 * (pp - 1) * p2p_total / (2 * vpp)
    return pipe


def evaluate(setup, calibration=None, rates: Rates | None = None) -> Evaluation:
    """Evaluate a plan (see the module docstring for the composition)."""
    rates = rates or rates_for(setup, calibration)
    ms = model_shape(setup.model)
    sh = plan_shard(setup)
    spans, fill = plan_spans(setup)
    deg, plan, a = setup.deg, setup.plan, setup.assumptions
    recompute, _ = recompute_setting(setup)
    flags = comm_flags(setup, sh)
    sp = Spans(spans["tp"], spans["cp"], spans["ep"], spans["etp"], spans["pp"])
    p2p_overlap = p2p_overlaps(setup)
    ranks = []
    for r in range(deg.pp):
        chunks = setup.layout.rank_stages(r)
        ranks.append(rank_cost(ms, sh, r, chunks, rates, recompute, sp, flags,
                               full_layers_per_chunk(setup, r, chunks), deg.vpp, p2p_overlap))
    m = setup.micro_batches
    times = [rc.per_microbatch for rc in ranks]

    # Data-parallel sync and optimizer per rank; the slowest rank gates the step.
    sharding = setup.sharding
    moments = plan.moments
    dp_g_tot = dp_g_exp = dp_p_tot = dp_p_exp = fsdp_tot = fsdp_exp = opt = 0.0
    opt_off = None
    for r, rc in enumerate(ranks):
        dense, expert = local_params(setup.model, setup.layout.rank_stages(r), deg.tp, deg.ep, deg.etp, deg.pp)
        shard = optimizer_shard(sharding, dense, expert, deg.dp, deg.cp, deg.edp)
        kind, fsdp = sync_kind(sharding)
        grad, param = data_parallel(dense, expert, spans, kind, rates, BF16)
        grad, g_exp, param, p_exp, f_tot, f_exp = dp_exposure(grad, param, fsdp, m, rc.fwd, rc.bwd, rates, a.dp_overlap)
        if f_exp >= fsdp_exp:
            fsdp_tot, fsdp_exp = f_tot, f_exp
        if g_exp + p_exp >= dp_g_exp + dp_p_exp:
            dp_g_tot, dp_g_exp, dp_p_tot, dp_p_exp = grad, g_exp, param, p_exp
        opt = max(opt, optimizer_step_time(shard, dense + expert, moments, plan.offloads_optimizer, rates,
                                           _opt_override(setup)))
        if plan.offloads_optimizer:
            total, transfer, cpu = offloaded_optimizer_time(shard, rates)
            if opt_off is None or total > opt_off["time_s"]:
                opt_off = {"time_s": total, "transfer_s": transfer, "cpu_s": cpu,
                           "bytes_per_step": shard * (FP32 + BF16), "link": rates.host_kind,
                           "link_bytes_per_s": rates.host_bw}

    # Activation offload: the bandwidth it needs and any time it adds.
    act_off, act_exp = None, 0.0
    if plan.offloads_activations:
        worst = max(ranks, key=lambda rc: rc.per_microbatch)
        layers = sum(ch.num_layers for ch in setup.layout.rank_stages(worst.rank))
        nbytes, extra = activation_offload(layers, sh.sp_tokens, ms.hidden, worst.fwd, worst.bwd, rates)
        need = nbytes / max(worst.fwd, 1e-12)
        act_off = {"bytes_per_microbatch": nbytes, "required_bytes_per_s": need,
                   "link_bytes_per_s": rates.host_bw, "link": rates.host_kind,
                   "estimate": "34*tokens*hidden/tp bytes per layer (Korthikanti et al. 2022, SP + selective)"}
        act_exp = m * extra
        times = [t + (extra if rc.rank == worst.rank else 0.0) for t, rc in zip(times, ranks)]

    pipe = pipeline_phase(times, m, deg.vpp, deg.pp, ranks[0].p2p_total, p2p_overlap)
    step = pipe + dp_g_exp + dp_p_exp + fsdp_exp + opt
    slowest = max(range(len(times)), key=lambda i: times[i])
    return Evaluation(
        rates=rates, ranks=tuple(ranks), micro_batches=m, vpp=deg.vpp, pipeline_s=pipe,
        dp_grad_total=dp_g_tot, dp_grad_exposed=dp_g_exp, dp_param_total=dp_p_tot, dp_param_exposed=dp_p_exp,
        fsdp_total=fsdp_tot, fsdp_exposed=fsdp_exp, optimizer_s=opt, optimizer_offload=opt_off,
        act_offload=act_off, act_offload_exposed=act_exp, step_s=step, spans=spans, domain_fill=fill,
        slowest=slowest,
    )


def _opt_override(setup) -> float | None:
    c = setup.efficiency.compute
    return c.optimizer_bytes_per_param.value if c is not None and c.optimizer_bytes_per_param else None


# ---------------------------------------------------------------------------------------------
# Building blocks for the search.
# ---------------------------------------------------------------------------------------------
def layer_times(setup, calibration=None) -> dict[str, dict[str, float]]:
    """Per-micro-batch seconds of each block kind of this plan on one GPU (the memoized unit the
    search tabulates): forward, backward (with the plan's recompute), and exposed/total
    communication. Keys: decoder-layer kinds ('dense', 'moe', ...), 'embedding', 'head', 'mtp'."""
    from planner.cost.pipeline import block_cost

    rates = rates_for(setup, calibration)
    ms, sh = model_shape(setup.model), plan_shard(setup)
    spans, _ = plan_spans(setup)
    recompute, _ = recompute_setting(setup)
    flags = comm_flags(setup, sh)
    sp = Spans(spans["tp"], spans["cp"], spans["ep"], spans["etp"], spans["pp"])
    names = sorted(set(ms.layer_kinds)) + ["embedding", "head"] + (["mtp"] if ms.mtp_layers else [])
    out = {}
    for name in names:
        rc = recompute if name not in ("embedding", "head", "mtp") else None
        bc = block_cost(ms, sh, name, 1, rates, rc, sp, flags)
        out[name] = {"fwd_s": bc.time.fwd, "bwd_s": bc.time.bwd,
                     "comm_exposed_s": sum(c.exposed for c in bc.comm), "comm_total_s": sum(c.total for c in bc.comm)}
    return out


def stage_times(setup, calibration=None) -> list[float]:
    """Seconds per micro-batch of each pipeline rank (compute plus exposed communication)."""
    return [rc.per_microbatch for rc in evaluate(setup, calibration).ranks]


def step_time(setup, calibration=None) -> float:
    """Seconds per optimizer step."""
    return evaluate(setup, calibration).step_s


# ---------------------------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimeReport:
    """DESIGN.md sec. 6 ``time`` object, plus hardware FLOPs and the pieces behind the breakdown."""

    step_time_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    """Megatron's model FLOPs (causal attention, no recompute) per GPU per second, in TFLOP/s."""
    hardware_tflops_per_gpu: float
    """FLOPs the GPUs execute (recompute, duplicated MLA down-projections, masked attention
    squares, imbalance included), averaged over the working GPUs."""
    mfu: float
    """Model TFLOPS over the dense BF16 peak."""
    hfu: float
    breakdown: dict[str, float]
    """Seconds of the step by cause on the critical path; they sum to step_time_s."""
    hidden: dict[str, float]
    """Communication seconds hidden behind compute (not in the step time)."""
    bottleneck: str
    pipeline: dict
    topology: dict
    offload: dict
    not_modeled: tuple[str, ...]

    def to_json(self) -> dict:
        r6 = lambda x: float(f"{x:.6g}")  # noqa: E731 - stable, compact numbers
        return {
            "step_time_s": r6(self.step_time_s),
            "tokens_per_s_per_gpu": r6(self.tokens_per_s_per_gpu),
            "model_tflops_per_gpu": r6(self.model_tflops_per_gpu),
            "hardware_tflops_per_gpu": r6(self.hardware_tflops_per_gpu),
            "mfu": r6(self.mfu),
            "hfu": r6(self.hfu),
            "breakdown": {k: r6(v) for k, v in self.breakdown.items()},
            "hidden_communication": {k: r6(v) for k, v in self.hidden.items()},
            "bottleneck": self.bottleneck,
            "pipeline": _round_tree(self.pipeline, r6),
            "topology": _round_tree(self.topology, r6),
            "offload": _round_tree(self.offload, r6),
            "not_modeled": list(self.not_modeled),
        }


def _round_tree(obj, r6):
    if isinstance(obj, dict):
        return {k: _round_tree(v, r6) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round_tree(v, r6) for v in obj]
    if isinstance(obj, float):
        return r6(obj)
    return obj


def bottleneck_sentence(breakdown: dict[str, float], step: float, spans: dict[str, GroupSpan]) -> str:
    """Names the largest cause: '<cause>, NN% of the step'."""
    cause, seconds = max(breakdown.items(), key=lambda kv: kv[1])
    label = LABELS.get(cause, cause)
    span = {"ep": "ep", "tp": "tp", "cp": "cp", "dp_grad": "dpcp", "dp_param": "dpcp", "pp_p2p": "pp"}.get(cause)
    if span and span in spans and spans[span].size > 1:
        label += " across domains" if spans[span].cross_domain else " inside an NVLink domain"
    return f"{label}, {100 * seconds / step:.0f}% of the step"


def time_report(setup, calibration=None) -> TimeReport:
    """The time model's answer for one plan (see the module docstring)."""
    ev = evaluate(setup, calibration)
    ms = model_shape(setup.model)
    job, deg, m = setup.job, setup.deg, ev.micro_batches
    gpus = job.gpus
    step = ev.step_s
    slow = ev.ranks[ev.slowest]

    breakdown: dict[str, float] = {
        "gemm": m * slow.sum("gemm_fwd") + m * slow.sum("gemm_bwd"),
        "attention": m * (slow.sum("attn_fwd") + slow.sum("attn_bwd")),
        "memory_bound": m * (slow.sum("mem_fwd") + slow.sum("mem_bwd")),
        "recompute": m * slow.sum("recompute"),
    }
    hidden: dict[str, float] = {}
    exposed_comm = slow.comm(exposed=True)
    total_comm = slow.comm(exposed=False)
    for cause in ("tp", "cp", "ep", "etp"):
        if cause in total_comm:
            breakdown[cause] = m * exposed_comm[cause]
            hidden[cause] = m * (total_comm[cause] - exposed_comm[cause])
    if deg.pp > 1:
        breakdown["pp_p2p"] = m * slow.p2p_exposed
        hidden["pp_p2p"] = m * (slow.p2p_total - slow.p2p_exposed)
    if ev.act_offload_exposed:
        breakdown["activation_offload"] = ev.act_offload_exposed
    critical = sum(breakdown.values())
    breakdown["pipeline_bubble"] = max(0.0, ev.pipeline_s - critical)
    if ev.dp_grad_total:
        breakdown["dp_grad"] = ev.dp_grad_exposed
        hidden["dp_grad"] = ev.dp_grad_total - ev.dp_grad_exposed
    if ev.dp_param_total:
        breakdown["dp_param"] = ev.dp_param_exposed
        hidden["dp_param"] = ev.dp_param_total - ev.dp_param_exposed
    if ev.fsdp_total:
        breakdown["fsdp"] = ev.fsdp_exposed
        hidden["fsdp"] = ev.fsdp_total - ev.fsdp_exposed
    breakdown["optimizer_offload" if ev.optimizer_offload else "optimizer"] = ev.optimizer_s

    model_flops = megatron_model_flops(ms, job.global_batch, job.seq_len)
    hw_flops = 0.0
    for rc in ev.ranks:
        per_mb = sum(b.count * (b.time.hw_flops_fwd + b.time.hw_flops_bwd + b.time.recompute_flops) for b in rc.blocks)
        hw_flops += per_mb * m * deg.tp * deg.cp * deg.dp  # every GPU of this pipeline rank
    model_tflops = model_flops / gpus / step / 1e12
    hw_tflops = hw_flops / gpus / step / 1e12
    peak = ev.rates.peak_bf16

    rank_rows = [
        {"rank": rc.rank, "per_microbatch_s": rc.per_microbatch, "fwd_s": rc.fwd, "bwd_s": rc.bwd,
         "layers": sum(ch.num_layers for ch in setup.layout.rank_stages(rc.rank))}
        for rc in ev.ranks
    ]
    ideal = m * max(r["per_microbatch_s"] for r in rank_rows)
    pipeline = {
        "schedule": "interleaved-1f1b" if deg.vpp > 1 else ("1f1b" if deg.pp > 1 else "none"),
        "micro_batches": m,
        "pp": deg.pp,
        "vpp": deg.vpp,
        "bubble_fraction": (ev.pipeline_s - ideal) / ideal if ideal else 0.0,
        "slowest_rank": ev.slowest,
        "ranks": rank_rows,
    }
    topology = {
        "domain_size": setup.hw.domain_size,
        "domain_fill": ev.domain_fill,
        "idle_gpus": idle_gpus(gpus, ev.domain_fill, setup.hw.domain_size),
        "rank_order": setup.assumptions.rank_order,
        "groups": {
            name: {"size": s.size, "groups": s.groups, "domains": s.domains, "crossing_groups": s.crossing,
                   "links": "nvlink" if not s.cross_domain else "nvlink+network",
                   "worst_group_members": list(s.members[:16]) + (["..."] if len(s.members) > 16 else [])}
            for name, s in ev.spans.items()
            if s.size > 1 and (setup.model.is_moe or name not in ("ep", "etp", "edp"))
        },
    }
    offload = {}
    if ev.optimizer_offload:
        offload["optimizer"] = ev.optimizer_offload
    if ev.act_offload:
        offload["activations"] = ev.act_offload
    return TimeReport(
        step_time_s=step,
        tokens_per_s_per_gpu=job.global_batch * job.seq_len / gpus / step,
        model_tflops_per_gpu=model_tflops,
        hardware_tflops_per_gpu=hw_tflops,
        mfu=model_tflops * 1e12 / peak,
        hfu=hw_tflops * 1e12 / peak,
        breakdown=breakdown,
        hidden=hidden,
        bottleneck=bottleneck_sentence(breakdown, step, ev.spans),
        pipeline=pipeline,
        topology=topology,
        offload=offload,
        not_modeled=NOT_MODELED,
    )


def time_section(setup, calibration=None) -> dict:
    """The ``time`` JSON object for `planner explain` (called by the explain command)."""
    return time_report(setup, calibration).to_json()


__all__ = ["TimeReport", "time_report", "time_section", "layer_times", "stage_times", "step_time", "evaluate"]
