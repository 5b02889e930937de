"""Achievable rates of one GPU and its links: datasheet peaks times the generation profile's
fractions, overridden by a calibration file, scaled by the sensitivity assumptions.

This is the one place where hardware spec, efficiency profile (``hw_specs/efficiency/``),
calibration (:mod:`planner.specs.calibration`) and :class:`~planner.cost.setup.Assumptions` meet;
every time-model function takes the resulting :class:`Rates` (hashable, so costs memoize on it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.errors import PlannerError
from planner.specs.calibration import load_calibration


@dataclass(frozen=True)
class Rates:
    """Per-GPU rates in FLOP/s, bytes/s and seconds."""

    generation: str
    peak_bf16: float
    """Dense BF16 peak (MFU denominator)."""
    peak_fp8: float
    fp8_recipe: str | None
    gemm_ceiling: tuple[tuple[str, float], ...]
    """(recipe, large-shape fraction of that dtype's peak); see planner.cost.compute.gemm_efficiency."""
    gemm_scale: float
    """Assumptions.gemm_efficiency_scale (sensitivity)."""
    gemm_half_dim: int
    gemm_shape_exponent: float
    gemm_tile: int
    """Output tile of the generation's GEMM kernels (ComputeEfficiency.gemm_tile); 0: none."""
    flash_fwd: float
    flash_bwd: float
    flash_half_keys: float
    fp8_attention: tuple[float, float] | None
    """(forward, backward) speed-up of FP8 fused attention over BF16 under the run's FP8 recipe
    (ComputeEfficiency.fp8_attention), None unless the run sets Assumptions.fp8_attention."""
    fp8_attention_window_full: bool
    flash_key_tile: int
    """Keys per tile of the fused attention kernel (ComputeEfficiency.flash_key_tile); 0: none."""
    flash_window_half_keys: tuple[float, float] | None
    """(forward, backward) half-rate keys of the sliding-window kernel over the key tiles it
    computes (ComputeEfficiency.flash_window_half_keys); None: windows costed as any short row."""
    """FP8 attention's backward computes the whole causal row under a sliding window."""
    softmax_exp_flops: float
    """Tensor-core FLOPs per softmax exponential (ComputeEfficiency.softmax_exp_flops); 0 where the
    profile has none or the run's kernel is FlashAttention-2 (see :func:`build_rates`)."""
    hbm_bw: float
    """Achievable streaming HBM bandwidth, bytes/s."""
    kernel_overhead_s: float
    host_launch_s: float
    """CPU seconds to issue one kernel (eager mode)."""
    sustained: float
    """Sustained tensor-core fraction in training (ComputeEfficiency.sustained_fraction) for jobs
    of more than one GPU; 1 for a job on one GPU (see :func:`build_rates`)."""
    nvlink_bw: float
    """Per-direction NVLink bandwidth per GPU (datasheet, times the network scale)."""
    nvlink_busbw: float
    """Achievable ring bus bandwidth inside a domain."""
    nvls_algbw: float | None
    """All-reduce algorithm bandwidth with in-switch reduction; None without NVLS."""
    nic_bw: float
    nic_busbw: float
    """Achievable per-GPU bus bandwidth across domains."""
    nvlink_latency_s: float
    nic_latency_s: float
    a2a_nvlink: tuple[tuple[str, float], ...]
    """EP all-to-all achievable bandwidth inside a domain, bytes/s, by dispatcher."""
    a2a_nic: tuple[tuple[str, float], ...]
    a2a_peer_latency_s: float
    p2p_fraction: float
    overlap_interference: float
    domain_size: int
    host_kind: str
    host_bw: float
    """Per-direction host link bandwidth per GPU, bytes/s."""
    cpu_adam_params_per_s: float
    """CPU Adam throughput for one GPU's share of the host, parameters/s."""
    unvectorized_fraction: float = 1.0
    """Share of ``hbm_bw`` that PyTorch's non-vectorized element-wise kernels reach
    (ComputeEfficiency.unvectorized_fraction)."""
    linear_host_s: tuple[float, float] = (0.0, 0.0)
    """Host seconds per Megatron local linear-layer call in the forward and in the backward
    (ComputeEfficiency.linear_host_fwd_s / linear_host_bwd_s); 0 unless the implementation is
    'megatron-local'."""
    moe_layer_host_s: tuple[float, float] = (0.0, 0.0)
    """Host seconds per local-spec MoE layer in the forward and in the backward beyond its linear
    calls and launches (ComputeEfficiency.moe_layer_host_fwd_s / _bwd_s); 0 unless the
    implementation is 'megatron-local'."""
    host_launch_eager_s: float = 0.0
    """``host_launch_s`` without CUDA graphs (what :func:`under_graphs` starts from)."""
    te_moe_host_eager_s: float = 0.0
    """Transformer Engine MoE layer host seconds per pass, eager (ComputeEfficiency.te_moe_layer_host_s)."""
    te_moe_host_scoped_s: float = 0.0
    """The same with the router and dispatcher preprocessing captured (te_moe_layer_host_scoped_s)."""
    nvlink_op_busbw: tuple[tuple[str, float], ...] = ()
    """Bus bandwidth inside a domain by collective where a calibration file measured it (on two
    H200s NCCL's all-reduce ran at 1.2x the bus bandwidth of all-gather and reduce-scatter);
    the others use ``nvlink_busbw``."""
    call_s: tuple[tuple[str, float], ...] = ()
    """Calibrated fixed seconds per collective call on NVLink, by operation, above the per-hop
    latency terms (the dispatch and launch a benchmark with a synchronize before each call sees);
    empty without a calibration file: the profile's latencies only."""
    torch_optimizer: bool = False
    """The optimizer step is torch.optim.AdamW with Megatron's torch fallbacks of the multi-tensor
    kernels (the local spec without Apex or Transformer Engine): see
    planner.cost.pipeline.optimizer_time."""
    ep_overlap_host_s: float = 0.0
    """Host seconds per MoE layer and pass of Megatron's combined 1F1B with eager layers
    (ComputeEfficiency.ep_overlap_host_s); planner.cost.compose drops it where CUDA graphs
    replay whole layers."""
    fp8_k_depth: float = 1.0
    """ComputeEfficiency.fp8_k_depth (1 where the profile has none)."""
    fp8_split_accumulator: float = 1.0
    """ComputeEfficiency.fp8_split_accumulator (1 where the profile has none)."""
    peak_fp4: float = 0.0
    """Dense FP4 peak (hardware catalog ``peak_flops.fp4``); 0 on GPUs without FP4 tensor cores,
    whose plans planner.rules refuses precision=nvfp4."""

    def __hash__(self) -> int:
        # Memoized costs hash Rates on every lookup; hash the fields that differ between setups.
        return hash((self.generation, self.peak_bf16, self.peak_fp8, self.peak_fp4, self.gemm_scale, self.hbm_bw, self.nvlink_bw,
                     self.nic_bw, self.sustained, self.domain_size))

    def ceiling(self, recipe: str) -> float:
        """Large-shape GEMM fraction of the recipe's peak."""
        for name, value in self.gemm_ceiling:
            if name == recipe:
                return value
        raise PlannerError(f"The {self.generation} efficiency profile has no GEMM ceiling for '{recipe}'.")

    def ring_busbw(self, op: str) -> float:
        """NVLink bus bandwidth of one ring collective ('all_reduce', 'all_gather', 'reduce_scatter')."""
        for name, bw in self.nvlink_op_busbw:
            if name == op:
                return bw
        return self.nvlink_busbw

    def call(self, op: str) -> float:
        """Calibrated fixed seconds per call of ``op`` (0 when not calibrated)."""
        for name, sec in self.call_s:
            if name == op:
                return sec
        return 0.0

    def a2a_bw(self, dispatcher: str | None, cross_domain: bool) -> float:
        table = self.a2a_nic if cross_domain else self.a2a_nvlink
        key = dispatcher or "alltoall"
        for name, value in table:
            if name == key:
                return value
        return dict(table)["alltoall"]

    def peak(self, recipe: str) -> float:
        if recipe == "nvfp4":
            return self.peak_fp4
        return self.peak_bf16 if recipe in ("bf16", "fp16") else self.peak_fp8


# CPU Adam streams fp32 master weights, both moments and the gradient in and out of host DRAM:
# read 16 bytes, write 12 bytes per parameter (DeepSpeed CPUAdam / Megatron HybridDeviceOptimizer).
CPU_ADAM_BYTES_PER_PARAM = 28.0


def build_rates(hw, profile, assumptions, calibration=None, gpus: int = 2) -> Rates:
    """Combine the hardware spec, its generation profile, an optional calibration and the
    sensitivity scales into :class:`Rates`.

    ``gpus``: the job's GPU count. The profile's ``sustained_fraction`` was calibrated end to end on
    multi-GPU runs and stands for what those lose against single-GPU kernel rates: communication
    kernels sharing SMs and HBM with the compute they overlap, rank skew at every collective, clocks
    under node-wide power and thermal load. A job on one GPU has none of the communication part:
    its kernels run at the measured single-GPU rates (profiled Megatron-Core steps on one H200: all
    GEMMs together at 750-770 TFLOPS, 0.76-0.78 of the BF16 peak, against 0.80 for the isolated
    MAMF benchmark; gpu-memory.md), so there the fraction is 1. What a GEMM-bound step loses to
    the board power limit on one GPU is what a calibration file's back-to-back GEMM loop measures
    (``planner calibrate`` on that H200: 0.72 of the peak, where the profiled steps, two thirds
    element-wise work, ran their GEMMs near the MAMF rate)."""
    if profile.compute is None or profile.comm is None:
        raise PlannerError(
            f"The '{profile.generation}' efficiency profile has no compute/comm section; the time model "
            "needs them (hw_specs/efficiency/<generation>.yaml)."
        )
    c, m = profile.compute, profile.comm
    gemm_half, gemm_exp = c.gemm_half_dim.value, c.gemm_shape_exponent.value
    gemm_tile = c.gemm_tile.value if c.gemm_tile else 0
    fp8_depth = c.fp8_k_depth.value if c.fp8_k_depth else 1.0
    fp8_split = c.fp8_split_accumulator.value if c.fp8_split_accumulator else 1.0
    peak_bf16 = hw.peak("bf16")
    peak_fp8 = hw.gpu.peak_flops["fp8"].value if "fp8" in hw.gpu.peak_flops else peak_bf16
    half = c.flash_half_keys.value
    nv = hw.nvlink.bandwidth_per_direction.value
    nic = hw.scale_out.bandwidth_per_direction.value
    r = _measurable(hw, profile, assumptions)
    if calibration is not None:
        _calibrate(r, calibration, hw, m, (gemm_half, gemm_exp, gemm_tile), (peak_bf16, peak_fp8), half,
                   fp8_depth, fp8_split)
    s_net = assumptions.network_bandwidth_scale
    return Rates(
        generation=hw.generation,
        peak_bf16=peak_bf16,
        peak_fp8=peak_fp8,
        peak_fp4=hw.gpu.peak_flops["fp4"].value if "fp4" in hw.gpu.peak_flops else 0.0,
        fp8_recipe=(assumptions.fp8_recipe or hw.fp8_recipe) if hw.fp8_recipe else None,
        gemm_ceiling=tuple(sorted(r.ceilings.items())),
        gemm_scale=assumptions.gemm_efficiency_scale,
        gemm_half_dim=gemm_half,
        gemm_shape_exponent=gemm_exp,
        gemm_tile=gemm_tile,
        fp8_k_depth=fp8_depth,
        fp8_split_accumulator=fp8_split,
        flash_fwd=r.flash_fwd, flash_bwd=r.flash_bwd, flash_half_keys=half,
        fp8_attention=_fp8_attention(profile, hw, assumptions),
        fp8_attention_window_full=bool(c.fp8_attention_window_bwd_full and c.fp8_attention_window_bwd_full.value),
        # The window constants are cuDNN's (Transformer Engine's fused attention); FlashAttention-2 keeps the plain rows.
        flash_key_tile=(c.flash_key_tile.value if c.flash_key_tile and c.flash_window_half_keys
                        and assumptions.attention_kernel != "flash2" else 0),
        flash_window_half_keys=((c.flash_window_half_keys.fwd, c.flash_window_half_keys.bwd)
                                if c.flash_key_tile and c.flash_window_half_keys and assumptions.attention_kernel != "flash2"
                                else None),
        # FlashAttention-2 does not follow the exponentials' share: on one H200 its forward and backward
        # at head dims 64-256 run at 0.85-1.0 of head dim 128's (tests/fixtures/h200_attention_head_dims.json).
        softmax_exp_flops=(c.softmax_exp_flops.value if c.softmax_exp_flops and assumptions.attention_kernel != "flash2"
                           else 0.0),
        hbm_bw=r.hbm_bw,
        kernel_overhead_s=r.kernel_overhead,
        host_launch_s=0.0 if layers_captured(assumptions) else c.host_launch_s.value,
        host_launch_eager_s=c.host_launch_s.value,
        sustained=(hw.gpu.sustained_fraction or c.sustained_fraction).value if gpus > 1 else 1.0,
        nvlink_bw=nv * s_net,
        nvlink_busbw=r.nvlink_busbw * s_net,
        nvls_algbw=r.nvls * s_net if r.nvls else None,
        nic_bw=nic * s_net,
        nic_busbw=r.nic_busbw * s_net,
        nvlink_latency_s=m.nvlink_latency_s.value,
        nic_latency_s=hw.scale_out.latency_s.value,
        a2a_nvlink=tuple(sorted((k, v * s_net) for k, v in r.a2a_nvl.items())),
        a2a_nic=tuple(sorted((k, v * s_net) for k, v in r.a2a_nic.items())),
        a2a_peer_latency_s=m.a2a_peer_latency_s.value,
        p2p_fraction=r.p2p_fraction,
        overlap_interference=m.overlap_interference.value,
        domain_size=hw.domain_size,
        **_host_rates(hw, c, assumptions),
        nvlink_op_busbw=tuple(sorted((k, v * s_net) for k, v in r.op_busbw.items())),
        call_s=tuple(sorted(r.call_s.items())),
    )


def _measurable(hw, profile, assumptions) -> _Measurable:
    """The profile's rates that a calibration file may replace."""
    c, m = profile.compute, profile.comm
    flash = _flash_fractions(profile, assumptions)
    nv = hw.nvlink.bandwidth_per_direction.value
    nic = hw.scale_out.bandwidth_per_direction.value
    return _Measurable(
        ceilings={recipe: g.fraction for recipe, g in c.gemm.items()},
        hbm_bw=hw.gpu.hbm_bandwidth.value * c.hbm_fraction.value,
        flash_fwd=flash[0], flash_bwd=flash[1],
        kernel_overhead=c.kernel_overhead_s.value,
        nvlink_busbw=nv * m.nvlink_fraction.value,
        nvls=nv * m.nvls_fraction.value if hw.nvlink.in_switch_reduction.value else None,
        nic_busbw=nic * m.nic_fraction.value,
        a2a_nvl={d: nv * f.value for d, f in m.a2a_nvlink_fraction.items()},
        a2a_nic={d: nic * f.value for d, f in m.a2a_nic_fraction.items()},
        p2p_fraction=m.p2p_fraction.value,
    )


def _host_rates(hw, c, assumptions) -> dict:
    """The host side of :class:`Rates`: the host link, CPU Adam, and the per-call host costs of
    the implementation (the local spec's linear and MoE-layer launches, Transformer Engine's eager
    MoE layer)."""
    host = hw.host
    local = assumptions.implementation == "megatron-local"
    cpu_rate = (
        host.cpu_adam_params_per_s.value if host.cpu_adam_params_per_s is not None
        else (host.host_memory_bandwidth.value if host.host_memory_bandwidth else 50e9) / CPU_ADAM_BYTES_PER_PARAM
    )
    te_moe = te_moe_host_s(c, assumptions)
    scoped = c.te_moe_layer_host_scoped_s
    return dict(
        te_moe_host_eager_s=c.te_moe_layer_host_s.value if c.te_moe_layer_host_s else 0.0,
        te_moe_host_scoped_s=scoped.value if scoped else 0.0,
        ep_overlap_host_s=c.ep_overlap_host_s.value if c.ep_overlap_host_s else 0.0,
        host_kind=host.kind,
        host_bw=host.bandwidth_per_direction.value,
        cpu_adam_params_per_s=cpu_rate,
        unvectorized_fraction=c.unvectorized_fraction.value if c.unvectorized_fraction else 1.0,
        linear_host_s=((c.linear_host_fwd_s.value if c.linear_host_fwd_s else 0.0,
                        c.linear_host_bwd_s.value if c.linear_host_bwd_s else 0.0) if local else (0.0, 0.0)),
        moe_layer_host_s=((c.moe_layer_host_fwd_s.value if c.moe_layer_host_fwd_s else 0.0,
                           c.moe_layer_host_bwd_s.value if c.moe_layer_host_bwd_s else 0.0) if local
                          else (te_moe,) * 2),
        torch_optimizer=local,
    )


@dataclass
class _Measurable:
    """The rates a calibration file can replace: the efficiency profile's until it does."""

    ceilings: dict[str, float]
    hbm_bw: float
    flash_fwd: float
    flash_bwd: float
    kernel_overhead: float
    nvlink_busbw: float
    nvls: float | None
    nic_busbw: float
    a2a_nvl: dict[str, float]
    a2a_nic: dict[str, float]
    p2p_fraction: float
    op_busbw: dict[str, float] = field(default_factory=dict)
    call_s: dict[str, float] = field(default_factory=dict)


def _calibrate(r: _Measurable, calibration, hw, m, gemm_shape: tuple[float, float, int], peaks: tuple[float, float],
               half_keys: float, fp8_k_depth: float = 1.0, fp8_split: float = 1.0) -> None:
    """Replace the profile's rates in ``r`` by what a calibration file measured on this hardware."""
    from planner.cost.compute import is_fp8, shape_factor  # noqa: PLC0415  # cycle: compute imports Rates from here

    if calibration.hardware.lower() != hw.name.lower() and calibration.hardware.lower() not in [a.lower() for a in hw.aliases]:
        raise PlannerError(
            f"Calibration file was measured on '{calibration.hardware}', but the plan runs on '{hw.name}'.",
            hint="Use a calibration taken on this hardware, or drop --calibration.",
        )
    peak_bf16, peak_fp8 = peaks
    # Each measurement implies a large-shape ceiling through the shape factor; take the median.
    implied: dict[str, list[float]] = {}
    for g in calibration.gemm:
        peak = peak_bf16 if g.recipe in ("bf16", "fp16") else peak_fp8
        # planner calibrate times FP8 with torch._scaled_mm's default, no fast accumulation (the split
        # accumulator): its ceiling is that rate over the split accumulator's fraction.
        depth, acc = (fp8_k_depth, fp8_split) if is_fp8(g.recipe) else (1.0, 1.0)
        implied.setdefault(g.recipe, []).append(g.tflops * 1e12 / peak / acc / shape_factor(g.m, g.n, g.k, *gemm_shape,
                                                                                               k_depth=depth))
    r.ceilings.update({recipe: sorted(v)[len(v) // 2] for recipe, v in implied.items()})
    if calibration.hbm_bandwidth:
        r.hbm_bw = calibration.hbm_bandwidth
    if calibration.attention:
        at = calibration.attention
        rescale = at.keys_per_query / (at.keys_per_query + half_keys)
        r.flash_fwd = at.fwd_tflops * 1e12 / peak_bf16 / rescale
        r.flash_bwd = at.bwd_tflops * 1e12 / peak_bf16 / rescale
    if calibration.kernel_overhead_s:
        r.kernel_overhead = calibration.kernel_overhead_s
    nv = hw.nvlink.bandwidth_per_direction.value
    for col in calibration.collectives:
        n = col.ranks
        if col.op == "all_to_all":
            table = r.a2a_nvl if col.span == "nvlink" else r.a2a_nic
            table[col.dispatcher or "alltoall"] = col.busbw
        elif col.span == "nvlink":
            if col.op == "all_reduce" and r.nvls is not None:
                r.nvls = col.busbw * n / (2 * (n - 1))  # busbw -> algbw
            elif col.op in ("all_gather", "reduce_scatter", "all_reduce"):
                r.op_busbw[col.op] = col.busbw
            elif col.op == "send_recv":
                r.p2p_fraction = col.busbw / nv
        elif col.op != "send_recv":
            r.nic_busbw = col.busbw
        if col.span == "nvlink" and col.latency_s is not None:
            # The fit's intercept less the hops the model already charges for this call.
            hops = _latency_hops(col.op, n, m.nvlink_latency_s.value, m.a2a_peer_latency_s.value)
            r.call_s[col.op] = max(0.0, col.latency_s - hops)
    if r.op_busbw:  # the other ring collectives (and the hierarchical ones' NVLink part)
        vals = sorted(r.op_busbw.values())
        r.nvlink_busbw = vals[len(vals) // 2]


def _latency_hops(op: str, n: int, hop_s: float, a2a_peer_s: float) -> float:
    """Seconds of per-hop latency planner.cost.comm charges one call of ``op`` on ``n`` ranks
    inside a domain: its own formulas at zero bytes."""
    from planner.cost import comm  # noqa: PLC0415  # cycle: comm imports Rates from here

    if op == "all_reduce":
        return float(comm.all_reduce_time(0.0, n, 1.0, hop_s))
    if op in ("all_gather", "reduce_scatter"):
        return float(comm.gather_time(0.0, n, 1.0, hop_s))
    if op == "all_to_all":
        return float(comm.a2a_latency(n, hop_s, a2a_peer_s))
    return float(comm.p2p_time(0.0, 1.0, hop_s))


_RATES: dict[tuple, tuple[object, object, Rates]] = {}


def layers_captured(assumptions) -> bool:
    """Whether CUDA graphs replay whole decoder layers (full-iteration graphs, or scoped graphs of
    the layer: Megatron's default scope when none is named), so the host launches none of their
    kernels one by one; the few kernels outside the layers (embedding, loss) are left in."""
    g, mods = assumptions.cuda_graphs, set(assumptions.cuda_graph_modules)
    return g == "full_iteration" or (g == "scoped" and (not mods or "layer" in mods))


def te_moe_host_s(c, assumptions) -> float:
    """Host seconds per Transformer Engine MoE layer and pass (ComputeEfficiency.te_moe_layer_host_s)
    under the run's CUDA graphs: all of it eager; the scoped value where the router and the
    dispatcher preprocessing are captured; none with full-iteration graphs or a captured layer."""
    g, mods = assumptions.cuda_graphs, set(assumptions.cuda_graph_modules)
    if layers_captured(assumptions) or (g == "scoped" and "moe" in mods):
        return 0.0
    if g == "scoped" and "moe_router" in mods:
        v = c.te_moe_layer_host_scoped_s
        return v.value if v else 0.0
    v = c.te_moe_layer_host_s
    return v.value if v else 0.0


def under_graphs(rates: Rates, graphs) -> Rates:
    """``rates`` with the host costs a plan's ``cuda_graphs`` leaves (planner.specs.plan.CudaGraphs):
    captured kernels issue no host work (docs/research/levers-2026.md section 1); with whole layers
    captured (full iteration, scoped:layer) no kernel of a layer is launched one by one, and the
    Transformer Engine MoE layer's eager Python (after its host sync on the token counts) runs
    only where its router and preprocessing are not captured (the scoped constant where they
    are, none with the moe module captured). On the local spec a replayed layer runs none of its
    Python either (the linear calls' and the MoE layer's per-call costs): measured on one H100
    with Megatron-Core's local graphs of whole drop-and-pad MoE layers, 16-128 experts, the step
    fell from 209-557 ms eager to 115-174 ms (results/validation/gpu-memory.md, CUDA graphs, second
    lease). Absolute: the result depends on ``graphs``, not on the assumptions ``rates`` were built
    with."""
    captured = graphs.layers_captured
    launch = 0.0 if captured else rates.host_launch_eager_s
    moe = rates.moe_layer_host_s
    linear = rates.linear_host_s
    if not rates.torch_optimizer:  # Transformer Engine (the local spec sets torch_optimizer)
        te = (0.0 if captured or graphs.captures("moe") else
              rates.te_moe_host_scoped_s if graphs.captures("moe_router") else rates.te_moe_host_eager_s)
        moe = (te, te)
    elif captured:
        moe, linear = (0.0, 0.0), (0.0, 0.0)
    if launch == rates.host_launch_s and moe == rates.moe_layer_host_s and linear == rates.linear_host_s:
        return rates
    return replace(rates, host_launch_s=launch, moe_layer_host_s=moe, linear_host_s=linear)


def combined_stage_host_s(rates: Rates, graphs) -> float:
    """Host seconds per MoE layer and pass that Megatron's combined 1F1B (ep_overlap) adds under a
    plan's ``cuda_graphs``: the eager constant (Rates.ep_overlap_host_s), none where graphs replay
    whole layers (full iteration, scoped:layer), whose stages then issue no Python per layer."""
    return 0.0 if graphs.layers_captured else rates.ep_overlap_host_s


def _fp8_attention(profile, hw, assumptions) -> tuple[float, float] | None:
    """(forward, backward) speed-up of FP8 fused attention for the run's FP8 recipe, when the run
    sets Assumptions.fp8_attention."""
    if not assumptions.fp8_attention:
        return None
    recipe = assumptions.fp8_recipe or hw.fp8_recipe
    table = profile.compute.fp8_attention or {}
    if recipe not in table:
        raise PlannerError(
            f"fp8_attention: the '{profile.generation}' efficiency profile has no FP8 attention rates for the "
            f"{recipe} recipe (measured: {', '.join(sorted(table)) or 'none'}).",
            hint="Leave fp8_attention off (attention in BF16), or add the measured speed-ups with their source to "
                 f"hw_specs/efficiency/{profile.generation}.yaml (compute.fp8_attention).")
    return table[recipe].fwd, table[recipe].bwd


def _flash_fractions(profile, assumptions) -> tuple[float, float]:
    """(forward, backward) fraction of the BF16 peak of the run's fused attention kernel."""
    c = profile.compute
    if assumptions.attention_kernel == "flash2":
        if c.flash2_fwd_fraction is None or c.flash2_bwd_fraction is None:
            raise PlannerError(
                f"attention_kernel=flash2: the '{profile.generation}' efficiency profile has no FlashAttention-2 "
                "rates (flash2_fwd_fraction, flash2_bwd_fraction).",
                hint="Use attention_kernel=fused, or add the measured fractions with their source to "
                     f"hw_specs/efficiency/{profile.generation}.yaml.")
        return c.flash2_fwd_fraction.value, c.flash2_bwd_fraction.value
    return c.flash_fwd_fraction.value, c.flash_bwd_fraction.value


def rates_for(setup, calibration=None) -> Rates:
    """Rates of a setup: cached per hardware spec object, assumptions and calibration object (the
    cache holds references, so an id is never reused while its entry lives)."""
    a = setup.assumptions
    if calibration is None and a.calibration:
        calibration = load_calibration(a.calibration)
    gpus = setup.job.gpus
    key = (id(setup.hw), a, id(calibration), gpus > 1)
    hit = _RATES.get(key)
    if hit is not None and hit[0] is setup.hw and hit[1] is calibration:
        return hit[2]
    r = build_rates(setup.hw, setup.efficiency, a, calibration, gpus)
    _RATES[key] = (setup.hw, calibration, r)
    return r


def with_peak_scale(r: Rates, factor: float) -> Rates:
    """Rates with every compute peak scaled (what-if and monotonicity checks)."""
    return replace(r, peak_bf16=r.peak_bf16 * factor, peak_fp8=r.peak_fp8 * factor, peak_fp4=r.peak_fp4 * factor)
