"""HardwareSpec: one GPU kind in its system (NVLink domain, scale-out NIC, host link).

All numbers are per GPU and dense (no 2:4 sparsity). Bandwidths are per direction. Each carries
its source; the generation-wide efficiency constants (achievable fractions of these peaks) live in
``hw_specs/efficiency/<generation>.yaml`` and are loaded by :mod:`planner.specs.efficiency`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from planner.specs.common import (
    Bandwidth, Bytes, Flops, GpuCount, Latency, NotBool, PositiveFloat, Sourced, Spec,
)
from planner.specs.model import Name

Generation = Literal["ampere", "hopper", "blackwell", "blackwell_ultra"]
Dtype = Literal["bf16", "fp16", "fp8", "fp4"]
Watts = Annotated[float, NotBool, Field(gt=0, le=1e6)]
"""Board power, W."""


class GPU(Spec):
    """The accelerator itself."""

    name: Name
    """Marketing name (e.g. 'H100 SXM5 80GB')."""
    generation: Generation
    """Architecture generation; selects the efficiency profile."""
    arch: str
    """Compute capability (sm90, sm100, ...)."""
    peak_flops: dict[Dtype, Sourced[Flops]]
    """Dense tensor-core peak per dtype, FLOP/s."""
    hbm_capacity_bytes: Sourced[Bytes]
    """HBM as the vendor states it (bytes; 'GB' on datasheets are 1e9)."""
    hbm_usable_bytes: Sourced[Bytes]
    """Device memory a process can allocate, as the driver reports it (total memory before the
    CUDA context and allocator margin are taken off)."""
    hbm_bandwidth: Sourced[Bandwidth]
    """Peak HBM bandwidth, bytes/s."""
    tdp_watts: Sourced[Watts] | None = None
    """Board power."""
    sustained_fraction: Sourced[float] | None = None
    """This system's sustained tensor-core fraction in multi-GPU training, where it differs from
    its generation's (ComputeEfficiency.sustained_fraction): boards of one generation at other
    power limits sustain other clocks. None: the generation's."""

    @model_validator(mode="after")
    def _bf16_present(self) -> GPU:
        if "bf16" not in self.peak_flops:
            raise ValueError("peak_flops must include bf16 (MFU is reported against the dense BF16 peak)")
        return self


class NVLinkDomain(Spec):
    """The scale-up domain: GPUs that reach each other over NVLink switches."""

    generation: Annotated[int, NotBool, Field(ge=1, le=100)]
    """NVLink generation (3: A100, 4: Hopper, 5: Blackwell)."""
    domain_size: Sourced[GpuCount]
    """GPUs per NVLink domain: 8 on HGX boards, 72 on an NVL72 rack."""
    bandwidth_per_direction: Sourced[Bandwidth]
    """Per-GPU NVLink bandwidth in one direction, bytes/s (half the 'bidirectional' figure)."""
    in_switch_reduction: Sourced[bool]
    """NVLink SHARP (NVLS): the switch reduces, halving all-reduce traffic per GPU."""


class ScaleOut(Spec):
    """The network between NVLink domains (rail-optimized fat tree, one NIC per GPU)."""

    nic: str
    """NIC model and speed."""
    bandwidth_per_direction: Sourced[Bandwidth]
    """Per-GPU NIC bandwidth in one direction, bytes/s (400 Gb/s = 50e9)."""
    latency_s: Sourced[Latency]
    """One-hop message latency across the fabric, seconds."""


class HostLink(Spec):
    """Link from each GPU to host memory (optimizer and activation offload)."""

    kind: Literal["pcie", "nvlink-c2c"]
    """PCIe (x86 hosts) or NVLink-C2C (Grace superchips)."""
    bandwidth_per_direction: Sourced[Bandwidth]
    """Per-GPU host-link bandwidth in one direction, bytes/s."""
    host_memory_bytes: Sourced[Bytes]
    """Host memory available per GPU, bytes."""
    host_memory_bandwidth: Sourced[Bandwidth] | None = None
    """Host DRAM bandwidth per GPU, bytes/s (bounds a CPU optimizer step)."""
    cpu_adam_params_per_s: Sourced[PositiveFloat] | None = None
    """Throughput of a CPU Adam step per GPU's share of host cores, parameters/s."""


class HardwareSpec(Spec):
    """A GPU in its system, as the planner sees it."""

    name: Name
    """Catalog name (e.g. 'h100', 'gb200-nvl72')."""
    aliases: list[Name] = Field([], max_length=64)
    """Other names that resolve to this hardware."""
    description: str
    """The system: board or rack, GPUs per node, network."""
    gpu: GPU
    """The accelerator."""
    nvlink: NVLinkDomain
    """The NVLink scale-up domain."""
    scale_out: ScaleOut
    """The scale-out network."""
    host: HostLink
    """The host link and memory."""
    fp8_recipe: Literal["tensorwise", "delayed", "blockwise", "mxfp8"] | None = None
    """The FP8 training recipe planner assumes on this GPU (blockwise on Hopper, MXFP8 on
    Blackwell); None when the GPU has no FP8 tensor cores."""
    default_dispatcher: Literal["alltoall", "deepep", "hybridep"] = "alltoall"
    """MoE token dispatcher a plan uses when it names none."""

    @property
    def generation(self) -> str:
        return self.gpu.generation

    @property
    def domain_size(self) -> int:
        return self.nvlink.domain_size.value

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; bf16 when the GPU lacks that dtype."""
        entry = self.gpu.peak_flops.get(dtype) or self.gpu.peak_flops["bf16"]  # type: ignore[call-overload]  # any name; unknown ones fall back
        return entry.value
