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

from typing import Annotated

from pydantic import Field

from planner.files import check_input, note_input
from planner.specs.catalog import read_json, read_yaml, validate_spec
from planner.specs.common import Bandwidth, Latency, NotBool, PositiveInt, Spec

Tflops = Annotated[float, NotBool, Field(gt=0, le=1e6)]
"""TFLOP/s as measured: at most 10^6 (1 EFLOP/s)."""


class GemmMeasurement(Spec):
    """One GEMM shape's measured throughput (torch.matmul / TE GEMM, L2 flushed)."""

    recipe: str = "bf16"
    """'bf16', or the FP8 recipe ('blockwise', 'mxfp8', 'tensorwise', 'delayed')."""
    m: PositiveInt
    n: PositiveInt
    k: PositiveInt
    tflops: Tflops
    """Measured TFLOP/s (2*m*n*k per call)."""


class AttentionMeasurement(Spec):
    """Fused attention kernel throughput at long sequences (asymptotic rate)."""

    fwd_tflops: Tflops
    """Forward TFLOP/s (4*b*s*s_kv*heads*dim per call, causal halved)."""
    bwd_tflops: Tflops
    """Backward TFLOP/s counted as 2.5x the forward FLOPs."""
    keys_per_query: PositiveInt = 8192
    """Average keys per query of the measurement (the kernel-efficiency curve is rescaled from it)."""


class CollectiveMeasurement(Spec):
    """nccl-tests style bus bandwidth of one collective on one span."""

    op: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
    span: Literal["nvlink", "network"]
    """'nvlink': all ranks in one NVLink domain; 'network': one rank per domain (NIC-bound)."""
    ranks: PositiveInt
    busbw: Bandwidth
    """Bus bandwidth in bytes/s at large messages (nccl-tests 'busbw')."""
    dispatcher: Literal["alltoall", "deepep", "hybridep"] | None = None
    """For all_to_all: which EP dispatcher was measured (NCCL when None)."""
    latency_s: Annotated[float, NotBool, Field(ge=0.0, le=1.0)] | None = None
    """Per-call time at vanishing size, from an alpha-beta fit over the measured sizes (time =
    latency_s + bytes x bus factor / busbw). It includes the framework's dispatch and NCCL's
    launch, which the profile's per-hop latency does not; see planner.cost.rates.build_rates."""


class Calibration(Spec):
    """Measured rates of one machine; each present field overrides the generation profile."""

    hardware: str = Field(max_length=256)
    """Catalog name of the hardware spec the measurements belong to (checked against the plan's)."""
    source: str = Field(min_length=3)
    """How and when it was measured (planner version, host, driver, library versions)."""
    gemm: list[GemmMeasurement] = []
    """GEMM measurements; the best one per recipe becomes that recipe's ceiling anchor."""
    hbm_bandwidth: Bandwidth | None = None
    """Achieved streaming bandwidth, bytes/s (replaces hbm_fraction x datasheet bandwidth)."""
    attention: AttentionMeasurement | None = None
    """Fused attention rates."""
    collectives: list[CollectiveMeasurement] = []
    """Collective bus bandwidths."""
    kernel_overhead_s: Latency | None = None
    """Measured gap between back-to-back small kernels."""


def load_calibration(path: str) -> Calibration:
    """Read a calibration YAML or JSON file (cached by path; noted as this command's input)."""
    check_input(path, "calibration", folder_hint="Give the file 'planner calibrate --out' wrote.")
    note_input(path, "calibration")
    return _load_calibration(str(path))


@lru_cache(maxsize=32)
def _load_calibration(path: str) -> Calibration:
    p = Path(path)
    data = read_json(p, "calibration") if p.suffix.lower() == ".json" else read_yaml(p, "calibration")
    return validate_spec(Calibration, data, "calibration", str(p))
