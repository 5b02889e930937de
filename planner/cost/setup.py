"""A plan resolved against its model, hardware and job: the one object every cost function takes.

Resolution canonicalizes the plan, derives dp/edp and the micro-batch count, builds the pipeline
layout, and checks the model-shape rules (:mod:`planner.rules`); a plan the model cannot hold is a
:class:`~planner.errors.PlanRuleError` naming the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from pydantic import Field

from planner.rules import check_model_rules, shape_violations, stage_recompute_violations
from planner.specs.common import Spec
from planner.specs.efficiency import load_efficiency
from planner.specs.hardware import HardwareSpec
from planner.specs.job import Job
from planner.specs.layout import PipelineLayout, build_layout
from planner.specs.model import ModelSpec
from planner.specs.plan import GRAPH_MODULES, CudaGraphs, Degrees, Plan, Precision, Recompute, Sharding
from planner.specs.schedule import Schedule


class Assumptions(Spec):
    """Modeling assumptions a user may change (and `search --sensitivity` perturbs)."""

    implementation: Literal["te", "megatron-local", "megatron-local-fused-softmax"] = "te"
    """te: Megatron-Core with Transformer Engine and flash (cuDNN fused) attention, the production
    setup; megatron-local: the local layer spec without TE, unfused attention with torch's fp32
    softmax (what the single-GPU validation harness runs); megatron-local-fused-softmax: unfused
    attention with Megatron's fused scale-mask-softmax kernel keeping 16-bit probabilities (the
    2021-2022 GPT setups of Narayanan and Korthikanti)."""
    routing_imbalance: float = Field(1.0, ge=1.0, le=1000.0)
    """Tokens on the most loaded EP rank over the mean. 1.0 is perfect balance (what Table 3 of the
    Megatron-Core MoE report assumes); sensitivity analysis and `--routing-imbalance` raise it."""
    memory_efficient_permutation: bool = True
    """Megatron-Core's memory-efficient token permutation (default since 0.13: the routing
    probabilities are applied inside the expert activation, so the unpermute keeps no expert FC2
    output). False models the older standard permutation, which keeps the FC2 output for the
    probability gradient: the accounting of Table 3 of the Megatron-Core MoE report
    (docs/research/activation-inventory.md)."""
    gemm_efficiency_scale: float = Field(1.0, gt=0.0, le=100.0)
    """Multiplier on achievable GEMM throughput (sensitivity)."""
    network_bandwidth_scale: float = Field(1.0, gt=0.0, le=100.0)
    """Multiplier on NVLink and NIC bandwidths (sensitivity)."""
    sequence_parallel: bool = True
    """Pair TP with sequence parallelism (Megatron's recommended setting, and what planner's plans
    assume). False models pre-2022 setups that replicate the [tokens, h] tensors on TP ranks."""
    expandable_segments: bool | None = None
    """PyTorch allocator with expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
    set by Megatron-Bridge/NeMo training recipes). None: on for 'te' (production recipes), off for
    the megatron-local harness. Selects the measured allocator margin."""
    allocator_margin_bytes: float | None = Field(None, ge=0.0, le=2.0**50)
    """Reserved-over-allocated margin plus CUDA context; None uses the generation profile's default."""
    calibration: str | None = Field(None, max_length=4096)
    """Path of a calibration file from `planner calibrate` whose measured rates override the
    generation profile in the time model (see planner.specs.calibration)."""
    attention_kernel: Literal["fused", "flash2"] = "fused"
    """The fused attention kernel: 'fused' is Transformer Engine's cuDNN fused attention (Megatron-
    Core; FlashAttention-3-class on Hopper), 'flash2' PyTorch SDPA's FlashAttention-2 backend (what
    torchtitan's sdpa attention ran on Hopper with torch 2.5-2.7). Read from the launcher and
    software a run used; the rates are the generation profile's flash_* or flash2_* fractions."""
    expert_op_fuser: bool = False
    """The routed experts run through Transformer Engine's operation fuser (Megatron
    --use-transformer-engine-op-fuser with --moe-grouped-gemm; Megatron-Bridge's fused grouped MLP
    recipes): the bias is applied packed on the device and the gated unit inside the fused ops, so
    TEGroupedMLP's eager GLU clamps and per-expert fc2 bias loop do not run (planner.cost.flops).
    Read from a run's launch arguments."""
    tp_comm_overlap: bool | None = None
    """Overlap TP/SP all-gathers and reduce-scatters with the neighbouring GEMMs (Megatron
    --tp-comm-overlap, Transformer Engine userbuffers). None: on with implementation 'te', off
    with 'megatron-local' (2022-era Megatron overlapped only the backward's column-parallel
    gradient communication)."""
    dp_overlap: bool = True
    """Overlap the data-parallel gradient reduce-scatter with the backward and the parameter
    all-gather with the forward (Megatron --overlap-grad-reduce --overlap-param-gather)."""
    fp8_recipe: Literal["tensorwise", "delayed", "blockwise", "mxfp8", "rowwise"] | None = None
    """The FP8 recipe of fp8 plans (Megatron --fp8-recipe; read from a run's launch arguments by
    planner validate): its GEMM ceiling in the generation profile. None: the hardware's recipe
    (hardware catalog ``fp8_recipe``: blockwise on Hopper, MXFP8 on Blackwell). 'rowwise' is
    torchao's rowwise (axiswise) scaling, torchtitan's float8 recipe_name 'rowwise': its casts
    are costed as torchao casts them (planner.cost.flops)."""
    cross_entropy: Literal["fused", "torch", "torch_compiled"] | None = None
    """How the loss holds the logits (the head's memory): 'fused', Megatron's vocab-parallel
    cross-entropy, whose fp32 softmax replaces the bf16 logits; 'torch', torchtitan's
    ``cross_entropy(pred.float())`` run eager: the bf16 logits, their fp32 copy and the fp32
    log-softmax coexist, and the backward holds two fp32 gradients; 'torch_compiled', the same
    loss under torch.compile, which keeps only the bf16 logits (measured on one H200:
    tests/fixtures/h200_op_sac_memory.json). Both under torchtitan's loss parallel (TP > 1) run
    DTensor's decomposition, which keeps fp32 and holds more (planner.cost.pieces.head_transients,
    tests/fixtures/h100_loss_parallel_memory.json). None: 'fused', or 'torch' when the search targets
    torchtitan (planner's torchtitan job files leave compile off)."""
    fp8_attention: bool = False
    """Transformer Engine's FP8 fused attention (TransformerConfig.fp8_dot_product_attention,
    Megatron-Bridge's ``fp8_dot_product_attention``; no Megatron-LM flag in megatron-core 0.19):
    with an FP8 plan, QK^T, softmax and PV run in FP8 at the generation's measured speed-up
    (ComputeEfficiency.fp8_attention)."""
    offload_layers: int = Field(0, ge=0, le=100_000)
    """Layer-level CPU offload (Megatron --cpu-offloading-num-layers; read from a run's launch
    arguments): with an activation-offload plan, the saved activations of the model's first N
    decoder layers wait in host memory, the rest stay on the GPU (planner.cost.pieces
    .offloaded_to_host). 0: offload=activations is the fine-grained offload of whole chunks."""
    paged_stash_host_factor: float = Field(0.0, ge=0.0, le=100.0)
    """The MoE paged stash's pinned host buffer over the balanced load's peak stash (Megatron
    --moe-paged-stash-buffer-size-factor-cpu, magnitude; read from a run's launch arguments with a
    full-iteration graph): host memory each GPU holds for the stash's spill
    (megatron/core/transformer/moe/paged_stash.py allocate_stash_buffers). 0: no host buffer, what
    planner's launch writes and Megatron-Core 0.19's default."""
    cuda_graphs: Literal["none", "scoped", "full_iteration"] = "none"
    """CUDA graphs of the run (Megatron --cuda-graph-impl; read from a run's launch arguments):
    none (eager, Megatron's default), scoped (per-layer graphs of the modules in
    ``cuda_graph_modules``: --cuda-graph-impl local or transformer_engine) or full_iteration
    (the whole forward-backward captured: no host work per kernel)."""
    cuda_graph_modules: tuple[Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "layer"], ...] = ()
    """The captured modules of scoped graphs (--cuda-graph-modules / --cuda-graph-scope; empty:
    the whole layer)."""
    rank_order: str = Field("tp-cp-ep-dp-pp", pattern=r"^(tp|cp|ep|dp|pp)(-(tp|cp|ep|dp|pp)){4}$")
    """Order in which ranks are laid out over GPUs, fastest-varying first (Megatron --order);
    GPUs of one NVLink domain get consecutive ranks."""

    @property
    def torchtitan(self) -> bool:
        """The run is torchtitan's (FSDP2, DTensor TP, torchao FP8), not Megatron-Core's: the loss
        kind tells, as only torchtitan runs, read from a launch or searched for --target
        torchtitan, hold the logits as torch's cross_entropy does (``cross_entropy``)."""
        return self.cross_entropy in ("torch", "torch_compiled")


@dataclass(frozen=True)
class Setup:
    """Everything a cost function needs, checked and derived once."""

    model: ModelSpec
    hw: HardwareSpec
    job: Job
    plan: Plan
    """Canonical plan (dispatcher and precision explicit)."""
    deg: Degrees
    layout: PipelineLayout
    assumptions: Assumptions = field(default_factory=Assumptions)

    @property
    def sequence_parallel(self) -> bool:
        return self.deg.tp > 1 and self.assumptions.sequence_parallel

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per step: global batch / (mbs * dp)."""
        return self.job.global_batch // (self.plan.mbs * self.deg.dp)

    @property
    def precision(self) -> Precision:
        assert self.plan.precision is not None  # a canonical plan names its precision
        return self.plan.precision

    @property
    def recompute(self) -> Recompute:
        return self.plan.recompute

    @property
    def sharding(self) -> Sharding:
        return self.plan.sharding

    @property
    def seq_per_gpu(self) -> int:
        """Sequence length each GPU of a CP group holds."""
        return self.job.seq_len // self.deg.cp

    @property
    def tokens_per_microbatch(self) -> int:
        """Tokens of one micro-batch on one GPU before TP/SP splitting: mbs * seq / cp."""
        return self.plan.mbs * self.seq_per_gpu

    @cached_property
    def efficiency(self):
        return load_efficiency(self.hw.generation)

    @property
    def allocator_fraction(self) -> float:
        """Reserved-over-allocated fraction for this setup's allocator settings (0 when the user
        gives an explicit margin in bytes)."""
        return allocator_fraction(self.efficiency.memory, self.assumptions)

    @property
    def schedule(self) -> Schedule | None:
        """The record of the pipeline schedule the plan runs (its ``schedule``, or Megatron's
        default; None without pipeline parallelism)."""
        return self.plan.schedule_record

    def key(self) -> tuple:
        return (self.model.name, self.hw.name, self.job, self.plan)


def allocator_workload(mem, assumptions: Assumptions):
    """The workload model of the reserved-over-allocated gap (MemoryOverheads.allocator_workload)
    where it applies: the default caching allocator (expandable segments off), no margin given in
    bytes, and a profile that has it; else None (the allocated peak times one plus the fraction)."""
    if assumptions.allocator_margin_bytes is not None or mem.allocator_workload is None:
        return None
    expandable = assumptions.expandable_segments
    if expandable is None:
        expandable = assumptions.implementation == "te"
    return None if expandable else mem.allocator_workload


def allocator_fraction(mem, assumptions: Assumptions) -> float:
    if assumptions.allocator_margin_bytes is not None:
        return 0.0
    expandable = assumptions.expandable_segments
    if expandable is None:
        expandable = assumptions.implementation == "te"
    return (mem.allocator_fraction_expandable if expandable else mem.allocator_fraction).value


def resolve_setup(
    model: ModelSpec,
    hw: HardwareSpec,
    job: Job,
    plan: Plan,
    assumptions: Assumptions | None = None,
) -> Setup:
    """Canonicalize ``plan`` for this model/hardware/job and check the model-shape rules."""
    canon = plan.canonical_for(model, hw, job)
    # Rules about the model's shape come first: "256 experts cannot split 512 ways" says more than
    # the GPU-count arithmetic that also fails.
    early = shape_violations(model, plan)
    if early:
        raise early[0].error()
    deg = canon.degrees(job.gpus)
    plan.check_given_degrees(deg, job.gpus)  # the canonical plan drops a given dp/edp: check it here
    check_model_rules(model, hw, job, canon, deg)
    layout = build_layout(model, canon.pp, canon.vpp, canon.layout, canon.schedule_record)
    bad = stage_recompute_violations(canon, layout)
    if bad:
        raise bad[0].error()
    assumptions = assumptions or Assumptions()
    canon, assumptions = graphs_in_plan(canon, assumptions)
    return Setup(model, hw, job, canon, deg, layout, assumptions)


def graphs_in_plan(plan: Plan, assumptions: Assumptions) -> tuple[Plan, Assumptions]:
    """CUDA graphs are the plan's ``cuda_graphs`` key: graphs that the assumptions state (a launch
    read by ``assumptions_from_flags``, a validation run's settings) move into a plan that has none,
    and the assumptions keep none, so the cost model reads one place (the plan's key wins)."""
    if assumptions.cuda_graphs == "none":
        return plan, assumptions
    if not plan.cuda_graphs:
        mods = tuple(m for m in assumptions.cuda_graph_modules if m != "layer")
        if assumptions.cuda_graphs == "full_iteration":
            graphs = CudaGraphs("full_iteration")
        else:
            graphs = CudaGraphs("scoped", () if len(mods) < len(assumptions.cuda_graph_modules) or not mods
                                else tuple(m for m in GRAPH_MODULES if m in mods))
        plan = plan.replace(cuda_graphs=graphs)
    return plan, assumptions.model_copy(update={"cuda_graphs": "none", "cuda_graph_modules": ()})
