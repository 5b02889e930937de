"""Generation-wide constants: what fraction of the datasheet peaks real kernels reach, and the
memory the software stack takes beside the model's tensors.

One profile per GPU generation (``hw_specs/efficiency/<generation>.yaml``), never per model: the
same constants must predict every model on that generation. Each number carries its source or says
'estimate' with the reasoning.
"""

from __future__ import annotations

from functools import lru_cache

from planner.specs.common import Sourced, Spec


class MemoryOverheads(Spec):
    """Device memory outside the model's tensors (framework, driver, libraries)."""

    cuda_context_bytes: Sourced[float]
    """CUDA context, cuBLAS/cuDNN handles and loaded kernels: taken before the caching allocator."""
    allocator_fraction: Sourced[float]
    """Reserved above allocated at the peak, as a fraction of the allocated peak (fragmentation and
    the 'staircase' of transient peaks the caching allocator keeps)."""
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


class ComputeEfficiency(Spec):
    """Achievable fractions of the dense peaks (owned by the time model; see planner.cost.compute)."""


class CommEfficiency(Spec):
    """Achievable fractions of link bandwidths and latencies (owned by the communication model)."""


class EfficiencyProfile(Spec):
    """All generation-wide constants of one GPU generation."""

    generation: str
    """ampere, hopper, blackwell or blackwell_ultra."""
    description: str
    """What hardware and software stack these constants describe."""
    memory: MemoryOverheads
    """Memory outside the model's tensors."""
    compute: ComputeEfficiency = ComputeEfficiency()
    """Kernel efficiencies for the time model."""
    comm: CommEfficiency = CommEfficiency()
    """Collective efficiencies for the communication model."""


@lru_cache(maxsize=None)
def load_efficiency(generation: str) -> EfficiencyProfile:
    from planner.errors import PlannerError
    from planner.specs.catalog import catalog_root, read_yaml, validate_spec

    path = catalog_root() / "hw_specs" / "efficiency" / f"{generation}.yaml"
    if not path.exists():
        raise PlannerError(f"No efficiency profile for GPU generation '{generation}' ({path}).")
    return validate_spec(EfficiencyProfile, read_yaml(path), "efficiency profile", str(path))
