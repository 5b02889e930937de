"""Step time of one plan and its explanation (DESIGN.md sec. 4 and 6).

The numbers come from the one composition (:mod:`planner.cost.compose`, a batch of one plan):

1. Each pipeline rank's chunks hold blocks (decoder layers by kind, embedding, head and loss, MTP).
   A block's time for one micro-batch is the sum of its kernels' times (:mod:`planner.cost.compute`)
   plus its communication's exposed part (:mod:`planner.cost.comm`, group spans from
   :mod:`planner.cost.topology`).
2. A rank's time per micro-batch t_r is the sum over its blocks, plus exposed pipeline p2p.
3. The schedule (:mod:`planner.cost.pipeline`) gives the forward/backward phase from the t_r,
   the micro-batch count m and vpp.
4. After it: the exposed data-parallel gradient sync and parameter gather, and the optimizer step
   (or the offloaded one) of the slowest rank.

This module adds FLOPs, throughput, the breakdown by cause (exposed and hidden communication) and
the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.compose import Costs, at, batch_of_setup, evaluate_batch
from planner.cost.flops import BF16, FP32, megatron_model_flops
from planner.cost.pipeline import offloaded_optimizer_time
from planner.cost.topology import GroupSpan, idle_gpus

LABELS = {
    "gemm": "GEMM compute",
    "attention": "attention kernels",
    "memory_bound": "memory-bound kernels (norms, element-wise, permutation, loss)",
    "recompute": "activation recompute",
    "host": "host-bound issue (the GPU waits for Python and kernel launches)",
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
    "host (CPU) time beyond a fixed cost per kernel launch (and, for megatron-local, per linear-layer "
    "call); CUDA graphs",
    "network congestion between concurrent groups sharing NICs",
    "tied-embedding gradient all-reduce between first and last pipeline stages",
    "stragglers, clock throttling and failures",
)


def _one(x) -> float:
    """The value of a batch of one plan."""
    return float(np.asarray(x, dtype=float).reshape(-1)[0])


def step_time(setup, calibration=None, rates=None) -> float:
    """Seconds per optimizer step of one plan (``rates``: achievable rates to use instead of the
    hardware's, for what-if checks)."""
    return _one(evaluate_batch(batch_of_setup(setup, calibration, rates)).step_s())


def stage_times(setup, calibration=None) -> list[float]:
    """Seconds per micro-batch of each pipeline rank (compute plus exposed communication)."""
    return [_one(t) for t in evaluate_batch(batch_of_setup(setup, calibration)).rank_times()]


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


def time_report(setup, calibration=None, costs: Costs | None = None) -> TimeReport:
    """The time model's answer for one plan (``costs``: its composition, when already built)."""
    costs = costs or evaluate_batch(batch_of_setup(setup, calibration))
    ctx, job, deg = costs.ctx, setup.job, setup.deg
    m = setup.micro_batches
    passes = setup.layout.passes(m)
    ranks = [at(rc, 0) for rc in costs.ranks()]
    pipe, dp, opt = _one(costs.pipeline_s()), at(costs.data_parallel(), 0), at(costs.optimizer(), 0)
    act_off = costs.activation_offload()
    step = pipe + dp.exposed + opt.seconds
    walked = costs.walked()
    if walked:
        res = at(walked[0].result, 0)
        slowest = max(range(deg.pp), key=lambda i: float(res.busy[i]))
        breakdown, hidden = _breakdown(ranks[slowest], passes, deg.pp, pipe, dp, opt, act_off,
                                       setup.plan.offload.optimizer, res, slowest)
    else:
        times = [_one(t) for t in costs.step_rank_times()]
        slowest = max(range(len(times)), key=lambda i: times[i])
        breakdown, hidden = _breakdown(ranks[slowest], m, deg.pp, pipe, dp, opt, act_off, setup.plan.offload.optimizer)

    model_flops = megatron_model_flops(ctx.ms, job.global_batch, job.seq_len)
    hw_flops = 0.0
    for rc in ranks:
        per_mb = sum(b.count * (b.time.hw_flops_fwd + b.time.hw_flops_bwd + b.time.recompute_flops) for b in rc.blocks)
        hw_flops += per_mb * passes * deg.tp * deg.cp * deg.dp  # every GPU of this pipeline rank
    model_tflops = model_flops / job.gpus / step / 1e12
    hw_tflops = hw_flops / job.gpus / step / 1e12
    peak = ctx.rates.peak_bf16
    spans = ctx.keys.worst_spans(0)
    return TimeReport(
        step_time_s=step,
        tokens_per_s_per_gpu=job.global_batch * job.seq_len / job.gpus / step,
        model_tflops_per_gpu=model_tflops,
        hardware_tflops_per_gpu=hw_tflops,
        mfu=model_tflops * 1e12 / peak,
        hfu=hw_tflops * 1e12 / peak,
        breakdown=breakdown,
        hidden=hidden,
        bottleneck=bottleneck_sentence(breakdown, step, spans),
        pipeline=_pipeline_json(setup, ranks, pipe, slowest, walked),
        topology=_topology_json(setup, spans, int(ctx.keys.fill[0])),
        offload=_offload_json(costs, opt, act_off),
        not_modeled=NOT_MODELED,
    )


def _breakdown(slow, m: int, pp: int, pipe: float, dp, opt, act_off, offloads_optimizer: bool, walk=None,
               rank: int = 0):
    """Seconds of the step by cause on the slowest rank's critical path (they sum to the step),
    and the communication seconds hidden behind compute. ``m``: micro-batches each chunk of the
    rank runs. With a walked schedule (``walk``, its result for this plan), the EP all-to-all
    exposed and hidden are the walk's (interference included), pipeline sends are hidden or wait
    in the bubble, and the bubble is the rest."""
    breakdown: dict[str, float] = {
        "gemm": m * slow.sum("gemm_fwd") + m * slow.sum("gemm_bwd"),
        "attention": m * (slow.sum("attn_fwd") + slow.sum("attn_bwd")),
        "memory_bound": m * (slow.sum("mem_fwd") + slow.sum("mem_bwd")),
        "recompute": m * slow.sum("recompute"),
        "host": m * (slow.sum("host_fwd") + slow.sum("host_bwd")),
    }
    hidden: dict[str, float] = {}
    exposed_comm, total_comm = slow.comm(exposed=True), slow.comm(exposed=False)
    for cause in ("tp", "cp", "ep", "etp"):
        if cause in total_comm:
            breakdown[cause] = m * exposed_comm[cause]
            hidden[cause] = m * (total_comm[cause] - exposed_comm[cause])
    if walk is not None and "ep" in total_comm:
        # The walk's busy seconds are its compute, exposed all-to-all and interference.
        exposed = float(walk.busy[rank] - walk.compute[rank])
        breakdown["ep"], hidden["ep"] = exposed, float(walk.a2a_hidden[rank])
    if pp > 1 and walk is not None:
        breakdown["pp_p2p"], hidden["pp_p2p"] = 0.0, m * slow.p2p_total
    elif pp > 1:
        breakdown["pp_p2p"] = m * slow.p2p_exposed
        hidden["pp_p2p"] = m * (slow.p2p_total - slow.p2p_exposed)
    act_exposed = m * _one(act_off.extra_s) if act_off is not None else 0.0
    if act_exposed:
        breakdown["activation_offload"] = act_exposed
    bubble = pipe - sum(breakdown.values())
    # Rounding of the sums above leaves ~1e-15 s where there is no bubble: report zero there.
    breakdown["pipeline_bubble"] = bubble if bubble > 1e-12 * pipe else 0.0
    for name, total, exposed in (("dp_grad", dp.grad, dp.grad_exposed), ("dp_param", dp.param, dp.param_exposed),
                                 ("fsdp", dp.fsdp, dp.fsdp_exposed)):
        if total:
            breakdown[name] = float(exposed)
            hidden[name] = float(total - exposed)
    breakdown["optimizer_offload" if offloads_optimizer else "optimizer"] = float(opt.seconds)
    return {k: float(v) for k, v in breakdown.items()}, {k: float(v) for k, v in hidden.items()}


def _pipeline_json(setup, ranks, pipe: float, slowest: int, walked=None) -> dict:
    deg, m = setup.deg, setup.micro_batches
    rows = [{"rank": r, "per_microbatch_s": float(rc.per_microbatch), "fwd_s": float(rc.fwd),
             "bwd_s": float(rc.bwd), "layers": sum(ch.num_layers for ch in setup.layout.rank_stages(r))}
            for r, rc in enumerate(ranks)]
    if walked:
        return _walked_json(setup, rows, pipe, slowest, walked[0])
    ideal = m * max(r["per_microbatch_s"] for r in rows)
    return {
        "schedule": "interleaved-1f1b" if deg.vpp > 1 else ("1f1b" if deg.pp > 1 else "none"),
        "micro_batches": m,
        "pp": deg.pp,
        "vpp": deg.vpp,
        "bubble_fraction": (pipe - ideal) / ideal if ideal else 0.0,
        "slowest_rank": slowest,
        "ranks": rows,
    }


def _walked_json(setup, rows: list[dict], pipe: float, slowest: int, walked) -> dict:
    """The walked schedule's pipeline section: each rank's busy seconds (its items: compute,
    exposed all-to-all, interference), its bubble (waiting for other ranks and for sends), its
    all-to-all exposed and hidden; the bubble fraction is the busiest rank's bubble over its busy
    seconds (as the closed forms' (pipe - m max) / (m max))."""
    res = at(walked.result, 0)
    for r, row in enumerate(rows):
        row.update(busy_s=float(res.busy[r]), bubble_s=float(pipe - res.busy[r]), compute_s=float(res.compute[r]),
                   a2a_exposed_s=float(res.a2a_exposed[r]), a2a_hidden_s=float(res.a2a_hidden[r]))
    busy = float(res.busy[slowest])
    return {
        "schedule": walked.schedule.name,
        "walked": not walked.estimate,
        "micro_batches": setup.micro_batches,
        "pp": setup.deg.pp,
        "vpp": setup.deg.vpp,
        "bubble_fraction": (pipe - busy) / busy if busy else 0.0,
        "bubble_share": (pipe - busy) / pipe if pipe else 0.0,
        "slowest_rank": slowest,
        "ranks": rows,
    }


def _topology_json(setup, spans: dict[str, GroupSpan], fill: int) -> dict:
    return {
        "domain_size": setup.hw.domain_size,
        "domain_fill": fill,
        "idle_gpus": idle_gpus(setup.job.gpus, fill, setup.hw.domain_size),
        "rank_order": setup.assumptions.rank_order,
        "groups": {
            name: {"size": s.size, "groups": s.groups, "domains": s.domains, "crossing_groups": s.crossing,
                   "links": "nvlink" if not s.cross_domain else "nvlink+network",
                   "worst_group_members": list(s.members[:16]) + (["..."] if len(s.members) > 16 else [])}
            for name, s in spans.items()
            if s.size > 1 and (setup.model.is_moe or name not in ("ep", "etp", "edp"))
        },
    }


def _offload_json(costs: Costs, opt, act_off) -> dict:
    rates = costs.ctx.rates
    out = {}
    if costs.lv.offload_optimizer:
        total, transfer, cpu = offloaded_optimizer_time(float(opt.shard_params), rates)
        out["optimizer"] = {"time_s": float(total), "transfer_s": float(transfer), "cpu_s": float(cpu),
                            "bytes_per_step": float(opt.shard_params) * (FP32 + BF16), "link": rates.host_kind,
                            "link_bytes_per_s": rates.host_bw}
    if act_off is not None:
        nbytes = _one(act_off.bytes_per_microbatch)
        out["activations"] = {"bytes_per_microbatch": nbytes,
                              "required_bytes_per_s": nbytes / max(_one(act_off.fwd_s), 1e-12),
                              "link_bytes_per_s": rates.host_bw, "link": rates.host_kind,
                              "estimate": "the rank's kept activation bytes of one micro-batch (the memory model's chunks), "
                                          "out in the forward and back in the backward"}
    return out


def time_section(setup, calibration=None) -> dict:
    """The ``time`` JSON object for `planner explain` (called by the explain command)."""
    return time_report(setup, calibration).to_json()


__all__ = ["TimeReport", "time_report", "time_section", "stage_times", "step_time", "LABELS"]
