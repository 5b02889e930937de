"""Job: what is being trained, independent of how it is parallelized."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from planner.specs.common import (
    MAX_GLOBAL_BATCH, MAX_SEQ_LEN, MAX_TOKENS_PER_STEP, ByteMargin, GpuCount, NotBool, Spec,
)

Precision = Literal["bf16", "fp8", "nvfp4"]


class Job(Spec):
    """GPUs, global batch and sequence length of a training run."""

    gpus: GpuCount
    """GPUs in the job (all of them, including any left idle by --domain-fill); at most 2^20
    (planner.specs.common.MAX_GPUS)."""
    global_batch: Annotated[int, NotBool, Field(gt=0, le=MAX_GLOBAL_BATCH)]
    """Global batch per optimizer step, in sequences (at most 2^24)."""
    seq_len: Annotated[int, NotBool, Field(gt=0, le=MAX_SEQ_LEN)]
    """Tokens per sequence (at most 2^24)."""
    precisions: list[Precision] = Field(default_factory=lambda: list[Precision](["bf16"]), min_length=1)
    """Compute precisions the job allows; the first is the default of a plan that names none."""
    domain_fill: GpuCount | None = None
    """Use only this many GPUs of each NVLink domain (e.g. 64 of an NVL72 rack's 72); None lets
    planner choose the largest count that keeps NVLink-bound groups whole."""
    memory_margin_bytes: ByteMargin = 0.0
    """Extra memory the user keeps free on every GPU, bytes (on top of the allocator margin)."""
    memory_margin_fraction: Annotated[float, NotBool, Field(ge=0.0, le=0.5)] = 0.0
    """Part of the usable HBM kept free on every GPU besides ``memory_margin_bytes`` (the command
    line's default margin, :data:`planner.inputs.DEFAULT_MEMORY_MARGIN`; 0 in a Job built in
    Python: plans may then reach the capacity)."""
    source: str | None = Field(None, max_length=4096)
    """Where this job comes from (a paper's run), if anywhere."""

    @model_validator(mode="after")
    def _unique_precisions(self) -> Job:
        if len(set(self.precisions)) != len(self.precisions):
            raise ValueError(f"precisions lists a value twice: {self.precisions}")
        return self

    @model_validator(mode="after")
    def _tokens_bounded(self) -> Job:
        if self.global_batch * self.seq_len > MAX_TOKENS_PER_STEP:
            raise ValueError(
                f"global_batch x seq_len = {self.global_batch} x {self.seq_len} = {self.global_batch * self.seq_len:,} "
                f"tokens per step is beyond any training run (planner's limit: 2^36 = {MAX_TOKENS_PER_STEP:,})"
            )
        return self

    @property
    def default_precision(self) -> str:
        return self.precisions[0]

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len
