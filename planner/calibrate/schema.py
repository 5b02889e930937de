"""The calibration file `planner calibrate` writes.

Two documents:

* ``<out>`` (YAML or JSON by suffix): the :class:`Calibration` the time model reads through
  ``--calibration FILE`` -- the hardware it belongs to, how it was measured, the GEMM table
  (recipe, m, n, k, TFLOP/s), the streaming HBM bandwidth, the fused-attention rates and the
  back-to-back kernel gap, in the time model's own schema (``planner.specs.calibration``), so the
  file is exactly what ``--calibration`` validates.
* ``<out stem>-raw.json``: :class:`CalibrationRaw`, every measurement with its timing (all GEMM
  shapes and dtypes, each attention backend, head dim and sequence length, copy sizes), the device
  and software versions. It is for people and for refitting; nothing reads it automatically.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

# One schema: the time model's (planner.specs.calibration) is what --calibration validates.
from planner.specs.calibration import (  # noqa: F401  (re-exported for planner calibrate)
    AttentionMeasurement,
    Calibration,
    CollectiveMeasurement,
    GemmMeasurement,
)


class _Raw(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


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
