"""Job: what is being trained, independent of how it is parallelized."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from planner.specs.common import Spec

Precision = Literal["bf16", "fp8"]


class Job(Spec):
    """GPUs, global batch and sequence length of a training run."""

    gpus: PositiveInt
    """GPUs in the job (all of them, including any left idle by --domain-fill)."""
    global_batch: PositiveInt
    """Global batch per optimizer step, in sequences."""
    seq_len: PositiveInt
    """Tokens per sequence."""
    precisions: list[Precision] = Field(default_factory=lambda: ["bf16"], min_length=1)
    """Compute precisions the job allows; the first is the default of a plan that names none."""
    domain_fill: PositiveInt | None = None
    """Use only this many GPUs of each NVLink domain (e.g. 64 of an NVL72 rack's 72); None lets
    planner choose the largest count that keeps NVLink-bound groups whole."""
    memory_margin_bytes: float = Field(0.0, ge=0.0)
    """Extra memory the user keeps free on every GPU, bytes (on top of the allocator margin)."""
    source: str | None = None
    """Where this job comes from (a paper's run), if anywhere."""

    @model_validator(mode="after")
    def _unique_precisions(self) -> "Job":
        if len(set(self.precisions)) != len(self.precisions):
            raise ValueError(f"precisions lists a value twice: {self.precisions}")
        return self

    @property
    def default_precision(self) -> str:
        return self.precisions[0]

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len
