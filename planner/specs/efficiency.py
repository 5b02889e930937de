"""Generation-wide constants: what fraction of the datasheet peaks real kernels reach, and the
memory the software stack takes beside the model's tensors.

One profile per GPU generation (``hw_specs/efficiency/<generation>.yaml``), never per model: the
same constants must predict every model on that generation. Each number carries its source or says
'estimate' with the reasoning.
"""

from __future__ import annotations

from functools import cache

from pydantic import Field

from planner.errors import PlannerError
from planner.specs.catalog import catalog_root, read_yaml, validate_spec
from planner.specs.common import Sourced, Spec


class AllocatorWorkload(Spec):
    """The caching allocator's reserved-over-allocated gap from what drives it (default settings,
    PyTorch's CUDACachingAllocator: requests up to 1 MiB from 2 MiB segments, 1-10 MiB from 20 MiB
    segments, larger ones rounded to 2 MiB in their own segments; a cached block serves a later
    request only if it is at least as large). Reserved peak = max(forward-backward peak + stranded
    blocks, optimizer-step peak) x (1 + ``peak_fraction``) + ``base_bytes`` + (``recompute_fraction``
    when layers recompute + ``pipeline_fraction`` with pipeline parallelism) x the activation peak. Stranded blocks: per-expert tensors the step frees
    before its activation peak (the optimizer's per-tensor temporaries, the weight gradients written
    before their accumulation) that the activation blocks, sequence x hidden in bf16, are too large
    to reuse: a block of size b strands 1 / (1 + (b / (``stranding_ratio`` x activation block))^2)
    of itself. See planner.cost.compose.Costs.reserved_bytes."""

    base_bytes: Sourced[float]
    """Cached blocks of the small pool and the allocator's rounding, whatever the workload."""
    peak_fraction: Sourced[float]
    """Share of the peak the allocator keeps in partially used segments."""
    recompute_fraction: Sourced[float]
    """Share of the activation peak re-created in the backward that recompute adds (the recomputed
    forward allocates while the backward's gradient blocks are cached)."""
    pipeline_fraction: Sourced[float]
    """Share of the activation peak a pipeline schedule adds (1F1B interleaves micro-batches: the
    blocks one micro-batch's backward frees sit between the later ones' activations)."""
    stranding_ratio: Sourced[float]
    """Block size over the activation block at which half of a freed block is stranded."""


class MemoryOverheads(Spec):
    """Device memory outside the model's tensors (framework, driver, libraries)."""

    cuda_context_bytes: Sourced[float]
    """CUDA context, cuBLAS/cuDNN handles and loaded kernels: taken before the caching allocator."""
    allocator_fraction: Sourced[float]
    """Reserved above allocated at the peak, as a fraction of the allocated peak (fragmentation and
    the 'staircase' of transient peaks the caching allocator keeps), default allocator settings."""
    allocator_fraction_expandable: Sourced[float]
    """The same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow in place, so
    transient peaks leave far less stranded memory)."""
    allocator_workload: AllocatorWorkload | None = None
    """Reserved above allocated as a function of the workload, default allocator settings (where
    measured); None: ``allocator_fraction`` of the allocated peak."""
    gemm_workspace_bytes: Sourced[float]
    """cuBLAS/cuBLASLt workspace per stream that runs GEMMs (Transformer Engine's size)."""
    gemm_workspace_streams: Sourced[int]
    """Streams with their own GEMM workspace (compute, plus communication-overlap streams)."""
    nccl_bytes_per_communicator: Sourced[float]
    """NCCL buffers of one communicator inside an NVLink domain: channels x NCCL_BUFFSIZE per peer
    link, for the protocols NCCL keeps."""
    nccl_bytes_per_communicator_internode: Sourced[float]
    """NCCL buffers of one communicator spanning NVLink domains (network proxies, more channels)."""
    ep_a2a_staging_bytes: Sourced[float]
    """DeepEP/HybridEP-like dispatcher buffers (NVLink + RDMA), per GPU, when EP > 1."""
    dp_bucket_bytes: Sourced[float]
    """Megatron DDP gradient bucket size (elements x 4 bytes fp32); buckets in flight use
    communication buffers of this size."""


class GemmCeiling(Spec):
    """A measured GEMM rate of large shapes (planner.cost.compute.gemm_efficiency): the fraction of
    the datasheet peak that shapes of 8192 and more in every dimension reach; smaller dimensions
    lose from it by ComputeEfficiency.gemm_half_dim."""

    fraction: float
    """Achieved TFLOPS / dense datasheet peak of the same dtype at ``shape``."""
    shape: tuple[int, int, int]
    """(M, N, K) of the measurement (informational: MAMF shapes are large)."""
    source: str
    """Where the measurement comes from."""
    note: str | None = None
    """Caveats (unrecorded shape, recipe differences)."""


class WindowHalfKeys(Spec):
    """Keys per query at which a sliding-window fused attention kernel reaches half its asymptotic
    rate, forward and backward, counting the whole key tiles it computes
    (planner.cost.compute.attention_times): short windowed rows pay each query tile's setup,
    softmax rescaling and output write over only a few key tiles."""

    fwd: float = Field(gt=0.0, le=1.0e5)
    bwd: float = Field(gt=0.0, le=1.0e5)
    source: str
    note: str | None = None


class Fp8AttentionSpeedup(Spec):
    """Transformer Engine's FP8 fused attention against its BF16 kernel at one shape: time ratios
    BF16 / FP8 of the forward and of the backward (planner.cost.compute.attention_times)."""

    fwd: float = Field(gt=0.0, le=10.0)
    bwd: float = Field(gt=0.0, le=10.0)
    source: str
    note: str | None = None


class ComputeEfficiency(Spec):
    """Achievable fractions of the dense peaks (owned by the time model; see planner.cost.compute).

    One set per GPU generation; the GEMM ceilings are per precision recipe because FP8 GEMMs on a
    given generation run at their own fraction of the FP8 peak."""

    gemm: dict[str, GemmCeiling]
    """GEMM ceilings by recipe: 'bf16' (also fp16), and the FP8 recipe names this generation runs
    ('blockwise', 'mxfp8', 'tensorwise', 'delayed'), and 'nvfp4' (a fraction of the FP4 peak) where the
    generation trains NVFP4."""
    gemm_half_dim: Sourced[int]
    """Size at which one GEMM dimension (M, N or K) costs half the rate: each dimension d keeps
    x / (1 + x) of it with x = (d / half_dim)^exponent (tile quantization and SM fill for M and N,
    pipeline fill and epilogue against the K loop). The ceiling above is the rate of large shapes
    (8192^3 reaches it)."""
    gemm_shape_exponent: Sourced[float]
    """Exponent of that curve (how sharply small dimensions fall off)."""
    gemm_tile: Sourced[int] | None = None
    """Rows and columns of the output tile the generation's large GEMM kernels compute (Blackwell's
    two-SM MMA: 256 x 256): an output dimension of at least one tile that is not a multiple of it
    leaves its last tile partly empty, paid at full cost (planner.cost.compute.tile_fill). None:
    the smooth shape curve above holds alone (Hopper, where it was fit to measured shapes)."""
    fp8_k_depth: Sourced[float] | None = None
    """How much deeper an FP8 GEMM's K loop runs before its pipeline fill and epilogue weigh as a
    BF16 GEMM's do: the K dimension enters the shape curve above as K / fp8_k_depth for FP8 recipes
    (and the large reference shape's too, so large shapes keep the ceiling). None: 1 (the BF16
    curve; not measured on this generation)."""
    fp8_split_accumulator: Sourced[float] | None = None
    """Rate of an FP8 GEMM that promotes its partial sums to FP32 as it goes (cuBLASLt without fast
    accumulation: Transformer Engine's 'split accumulator') over the same GEMM with fast
    accumulation; planner.cost.compute.SPLIT_ACCUMULATOR says which passes of which recipe run
    that way. None: 1 (not measured on this generation)."""
    flash_fwd_fraction: Sourced[float]
    """Fused (flash) attention forward: asymptotic fraction of the BF16 peak at long sequences."""
    flash_bwd_fraction: Sourced[float]
    """Fused attention backward, counting the backward as 2.5x the forward FLOPs (FlashAttention's
    convention: it recomputes QK^T and runs four more matmuls)."""
    flash_half_keys: Sourced[float]
    """Keys per query at which the fused attention kernel reaches half its asymptotic rate (tile
    setup, softmax rescaling and the causal diagonal dominate short rows)."""
    softmax_exp_flops: Sourced[float] | None = None
    """Dense BF16 tensor-core FLOPs per exponential the special-function units (MUFU.EX2) return,
    per SM and clock: how much matrix work one score's softmax exponential costs in the fused
    attention kernel. The flash fractions are measured at head dim 128; smaller head dims slow the
    forward and backward by the exponential's larger share (planner.cost.compute.exp_share_factor).
    None: no head-dim effect on this generation."""
    flash_key_tile: Sourced[int] | None = None
    """Keys per tile of the fused attention kernel: a sliding window of w keys makes each query
    tile compute every key tile its rows touch, ceil((w + tile - 1) / tile) tiles. None: the
    window's keys alone are costed."""
    flash_window_half_keys: WindowHalfKeys | None = None
    """The half-rate point of the sliding-window kernel (with ``flash_key_tile``); None: windowed
    rows use ``flash_half_keys`` on the window's keys alone."""
    fp8_attention: dict[str, Fp8AttentionSpeedup] | None = None
    """FP8 fused attention (Assumptions.fp8_attention: QK^T, softmax and PV in FP8) by the run's
    FP8 recipe ('mxfp8', 'tensorwise', 'delayed'): how much faster than BF16. None: not measured
    on this generation (planner refuses the assumption there)."""
    fp8_attention_window_bwd_full: Sourced[bool] | None = None
    """Whether FP8 attention's backward computes every causal tile under a sliding window (no
    masked-tile skipping): its time then follows the causal row, not the window."""
    flash2_fwd_fraction: Sourced[float] | None = None
    """FlashAttention-2's forward (PyTorch SDPA's flash backend, what torchtitan's sdpa attention
    ran on this generation before cuDNN attention became its default): fraction of the BF16 peak
    at long sequences. None: not measured on this generation."""
    flash2_bwd_fraction: Sourced[float] | None = None
    """FlashAttention-2's backward, with the 2.5x-forward FLOPs convention."""
    hbm_fraction: Sourced[float]
    """Achievable fraction of the HBM bandwidth for streaming element-wise, norm, permute, softmax
    and optimizer kernels."""
    kernel_overhead_s: Sourced[float]
    """Idle time per kernel between back-to-back kernels on one stream (launch gap and tail), added
    to every kernel; makes many small kernels cost more than their bytes or FLOPs."""
    host_launch_s: Sourced[float]
    """CPU time to issue one kernel from eager PyTorch/Transformer Engine (Python, dispatcher,
    autograd, launch). A block whose kernels the host issues slower than the GPU runs them is
    host-bound: it takes the host's time (what CUDA graphs remove)."""
    sustained_fraction: Sourced[float]
    """Tensor-core rate sustained inside a multi-GPU training step relative to the isolated
    benchmarks above (clock derating at the board power limit with every GPU of the node busy,
    SMs and L2 shared with overlapped communication kernels). Applied to GEMM and attention math."""
    unvectorized_fraction: Sourced[float] | None = None
    """Share of the streaming bandwidth that PyTorch's non-vectorized element-wise kernels reach
    (TensorIterator's unrolled/strided path: dtype-converting copies, operands broadcast over a
    dimension, mixed-dtype arithmetic), which the local spec's unfused softmax and gradient
    accumulation run on. None: as vectorized kernels."""
    linear_host_fwd_s: Sourced[float] | None = None
    """Host (Python) seconds of one Megatron local linear-layer call in the forward beyond its
    kernel launches (the module's forward and its autograd function; with it, its share of the
    MLP's activation function); what makes the local spec's SequentialMLP experts host-bound.
    None: 0."""
    linear_host_bwd_s: Sourced[float] | None = None
    """The same in the backward (the autograd function's Python backward, DDP's per-parameter
    gradient hook, the compiled activation's backward wrapper). None: 0."""
    moe_layer_host_fwd_s: Sourced[float] | None = None
    """Host (Python) seconds of one local-spec MoE layer in the forward beyond its linear calls and
    kernel launches: TopKRouter (scores, top-k, aux-loss tracker), the alltoall dispatcher's
    permutation bookkeeping and SequentialMLP's split and concatenation around its experts; fixed
    per layer, whatever the expert count. None: 0."""
    moe_layer_host_bwd_s: Sourced[float] | None = None
    """The same in the backward (the autograd nodes of those modules). None: 0."""
    te_moe_layer_host_s: Sourced[float] | None = None
    """Host seconds per MoE layer and pass with Transformer Engine when nothing of the layer is
    captured in a CUDA graph (eager router, dispatcher preprocessing and bookkeeping, permutation,
    grouped-GEMM splits, unpermutation), after the dispatcher's host sync."""
    te_moe_layer_host_scoped_s: Sourced[float] | None = None
    """The same with the router and the dispatcher preprocessing captured (CUDA graph scopes
    moe_router and moe_preprocess): the dispatch, experts and unpermutation stay eager."""
    ep_overlap_host_s: Sourced[float] | None = None
    """Host seconds per MoE layer and pass that Megatron's combined 1F1B (the ep_overlap lever,
    --overlap-moe-expert-parallel-comm) adds on the compute stream when the layers are not
    replayed as CUDA graphs: it issues each layer as separate stages (attention, dispatch, experts,
    combine) of two micro-batches with stream synchronization between them, so the host cannot run
    ahead of the GPU across a layer. None: 0."""
    optimizer_bytes_per_param: Sourced[float] | None = None
    """Override of the optimizer-step HBM traffic per locally updated parameter (otherwise derived
    from the precision of master weights, gradients and moments)."""


class CommEfficiency(Spec):
    """Achievable fractions of link bandwidths and latencies (owned by the communication model)."""

    nvlink_fraction: Sourced[float]
    """Bus bandwidth of NCCL ring/tree collectives inside an NVLink domain over the per-direction
    NVLink bandwidth (nccl-tests busbw / link)."""
    nvls_fraction: Sourced[float]
    """Same for all-reduce with in-switch reduction (NVLink SHARP), where the hardware has it:
    algorithm bandwidth per GPU over the per-direction NVLink bandwidth."""
    nic_fraction: Sourced[float]
    """Bus bandwidth of collectives across domains over the per-GPU NIC bandwidth."""
    nvlink_latency_s: Sourced[float]
    """Per-step latency of a collective inside an NVLink domain (one ring hop or tree level)."""
    a2a_nvlink_fraction: dict[str, Sourced[float]]
    """EP dispatch/combine achievable bandwidth inside a domain over the per-direction NVLink
    bandwidth, by dispatcher: 'alltoall' (NCCL), 'deepep', 'hybridep'."""
    a2a_nic_fraction: dict[str, Sourced[float]]
    """Same across domains over the NIC bandwidth (RDMA part of the dispatch)."""
    a2a_peer_latency_s: Sourced[float]
    """Extra latency per peer of an all-to-all (NCCL issues one send/receive per peer)."""
    p2p_fraction: Sourced[float]
    """Pipeline send/receive achievable bandwidth over the link bandwidth."""
    overlap_interference: Sourced[float]
    """Fraction of the hidden (overlapped) communication time that still slows the compute it hides
    behind (SMs and HBM bandwidth taken by communication kernels)."""


class EfficiencyProfile(Spec):
    """All generation-wide constants of one GPU generation."""

    generation: str
    """ampere, hopper, blackwell or blackwell_ultra."""
    description: str
    """What hardware and software stack these constants describe."""
    memory: MemoryOverheads
    """Memory outside the model's tensors."""
    compute: ComputeEfficiency | None = None
    """Kernel efficiencies for the time model (required by planner.cost.time)."""
    comm: CommEfficiency | None = None
    """Collective efficiencies for the communication model (required by planner.cost.time)."""


@cache
def load_efficiency(generation: str) -> EfficiencyProfile:
    path = catalog_root() / "hw_specs" / "efficiency" / f"{generation}.yaml"
    if not path.exists():
        raise PlannerError(f"No efficiency profile for GPU generation '{generation}' ({path}).")
    return validate_spec(EfficiencyProfile, read_yaml(path, "efficiency profile"), "efficiency profile", str(path))
