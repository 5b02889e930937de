"""Calibration: rates measured on the user's own machine, overriding the generation profile.

`planner calibrate` (written separately) runs GEMM, HBM-stream, attention and collective
micro-benchmarks and writes this file; `--calibration FILE` (or ``Assumptions.calibration``) makes
the time model use the measured rates instead of the datasheet-times-profile ones. Every field is
optional: what was not measured falls back to ``hw_specs/efficiency/<generation>.yaml``.

Measured values are absolute (TFLOPS, bytes/s) where the benchmark measures absolute rates; the
time model turns them into fractions of the hardware spec's peaks, so a calibration taken on an
H200 still scales correctly if the user's hardware spec says H200.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from planner.specs.common import Spec


class GemmMeasurement(Spec):
    """One GEMM shape's measured throughput (torch.matmul / TE GEMM, L2 flushed)."""

    recipe: str = "bf16"
    """'bf16', or the FP8 recipe ('blockwise', 'mxfp8', 'tensorwise', 'delayed')."""
    m: PositiveInt
    n: PositiveInt
    k: PositiveInt
    tflops: PositiveFloat
    """Measured TFLOP/s (2*m*n*k per call)."""


class AttentionMeasurement(Spec):
    """Fused attention kernel throughput at long sequences (asymptotic rate)."""

    fwd_tflops: PositiveFloat
    """Forward TFLOP/s (4*b*s*s_kv*heads*dim per call, causal halved)."""
    bwd_tflops: PositiveFloat
    """Backward TFLOP/s counted as 2.5x the forward FLOPs."""
    keys_per_query: PositiveInt = 8192
    """Average keys per query of the measurement (the kernel-efficiency curve is rescaled from it)."""


class CollectiveMeasurement(Spec):
    """nccl-tests style bus bandwidth of one collective on one span."""

    op: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
    span: Literal["nvlink", "network"]
    """'nvlink': all ranks in one NVLink domain; 'network': one rank per domain (NIC-bound)."""
    ranks: PositiveInt
    busbw: PositiveFloat
    """Bus bandwidth in bytes/s at large messages (nccl-tests 'busbw')."""
    dispatcher: Literal["alltoall", "deepep", "hybridep"] | None = None
    """For all_to_all: which EP dispatcher was measured (NCCL when None)."""
    latency_s: NonNegativeFloat | None = None
    """Per-call time at vanishing size, from an alpha-beta fit over the measured sizes (time =
    latency_s + bytes x bus factor / busbw). It includes the framework's dispatch and NCCL's
    launch, which the profile's per-hop latency does not; see planner.cost.rates.build_rates."""


class Calibration(Spec):
    """Measured rates of one machine; each present field overrides the generation profile."""

    hardware: str
    """Catalog name of the hardware spec the measurements belong to (checked against the plan's)."""
    source: str = Field(min_length=3)
    """How and when it was measured (planner version, host, driver, library versions)."""
    gemm: list[GemmMeasurement] = []
    """GEMM measurements; the best one per recipe becomes that recipe's ceiling anchor."""
    hbm_bandwidth: PositiveFloat | None = None
    """Achieved streaming bandwidth, bytes/s (replaces hbm_fraction x datasheet bandwidth)."""
    attention: AttentionMeasurement | None = None
    """Fused attention rates."""
    collectives: list[CollectiveMeasurement] = []
    """Collective bus bandwidths."""
    kernel_overhead_s: PositiveFloat | None = None
    """Measured gap between back-to-back small kernels."""


@lru_cache(maxsize=32)
def load_calibration(path: str) -> Calibration:
    """Read a calibration YAML or JSON file (cached by path)."""
    from planner.specs.catalog import read_json, read_yaml, validate_spec

    p = Path(path)
    if not p.exists():
        from planner.errors import PlannerError

        raise PlannerError(f"Calibration file '{path}' does not exist.", hint="Create one with 'planner calibrate'.")
    data = read_json(p) if p.suffix == ".json" else read_yaml(p)
    return validate_spec(Calibration, data, "calibration", str(p))
