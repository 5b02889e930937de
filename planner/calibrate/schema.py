"""The calibration file `planner calibrate` writes.

Two documents:

* ``<out>`` (YAML or JSON by suffix): the :class:`Calibration` the time model reads through
  ``--calibration FILE`` -- the hardware it belongs to, how it was measured, the GEMM table
  (recipe, m, n, k, TFLOP/s), the streaming HBM bandwidth, the fused-attention rates and the
  back-to-back kernel gap. When the time model's own schema (``planner.specs.calibration``) is
  present it is used, so the file is exactly what ``--calibration`` validates; otherwise the copy
  below, with the same fields, stands in.
* ``<out stem>-raw.json``: :class:`CalibrationRaw`, every measurement with its timing (all GEMM
  shapes and dtypes, each attention backend, head dim and sequence length, copy sizes), the device
  and software versions. It is for people and for refitting; nothing reads it automatically.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

try:  # the time model's schema, when this build has it
    from planner.specs.calibration import (  # type: ignore[import-not-found]
        AttentionMeasurement,
        Calibration,
        CollectiveMeasurement,
        GemmMeasurement,
    )
except ModuleNotFoundError:  # pragma: no cover - exercised only before the time model lands
    from planner.specs.common import Spec

    class GemmMeasurement(Spec):
        """One GEMM shape's measured throughput."""

        recipe: str = "bf16"
        """'bf16', or the FP8 recipe ('tensorwise' for torch._scaled_mm with per-tensor scales)."""
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
        """Average keys per query of the measurement."""

    class CollectiveMeasurement(Spec):
        """nccl-tests style bus bandwidth (not measured on one GPU)."""

        op: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
        span: Literal["nvlink", "network"]
        ranks: PositiveInt
        busbw: PositiveFloat
        dispatcher: Literal["alltoall", "deepep", "hybridep"] | None = None

    class Calibration(Spec):
        """Measured rates of one machine; each present field overrides the generation profile."""

        hardware: str
        """Catalog name of the hardware spec the measurements belong to."""
        source: str = Field(min_length=3)
        """How and when it was measured (planner version, host, driver, library versions)."""
        gemm: list[GemmMeasurement] = []
        hbm_bandwidth: PositiveFloat | None = None
        """Achieved streaming bandwidth, bytes/s (read + write of a device-to-device copy)."""
        attention: AttentionMeasurement | None = None
        collectives: list[CollectiveMeasurement] = []
        kernel_overhead_s: PositiveFloat | None = None
        """Measured gap between back-to-back small kernels."""


class _Raw(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceInfo(_Raw):
    name: str
    """torch.cuda.get_device_name()."""
    capability: tuple[int, int]
    sm_count: int
    total_memory_bytes: int
    torch: str
    cuda: str | None
    cudnn: int | None
    driver: str | None = None
    """nvidia-smi's driver version, when nvidia-smi answers."""


class GemmRow(_Raw):
    dtype: Literal["bf16", "fp8_tensorwise"]
    m: int
    n: int
    k: int
    seconds: float
    """Median time of one call."""
    tflops: float


class CopyRow(_Raw):
    bytes: int
    """Size of the buffer copied (read once, written once)."""
    seconds: float
    bandwidth: float
    """2 * bytes / seconds, bytes/s."""


class AttentionRow(_Raw):
    backend: str
    """flash, cudnn or efficient (torch.nn.attention.SDPBackend)."""
    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool
    fwd_s: float
    fwd_bwd_s: float
    fwd_tflops: float
    """4*b*h*s*s*d (halved when causal) over the forward time."""
    bwd_tflops: float
    """2.5x the forward FLOPs over (fwd+bwd - fwd) time."""


class CalibrationRaw(_Raw):
    schema_version: int = 1
    date: str
    """UTC date and time of the run (ISO 8601)."""
    device: DeviceInfo
    gemm: list[GemmRow] = []
    copy_rows: list[CopyRow] = []
    attention: list[AttentionRow] = []
    kernel_overhead_s: float | None = None
    errors: list[str] = []
    """Sections that failed (e.g. FP8 unsupported by this torch build), one line each."""
