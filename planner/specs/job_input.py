"""The job a command runs: the model's reference job, a job file and the options given, in
increasing priority (``resolve_job``), with the options' bounds (``count_option``). Below the
launchers, whose readers resolve a launch's job the same way."""

from __future__ import annotations

from pathlib import Path

from planner.errors import PlannerError
from planner.inputs import DEFAULT_MEMORY_MARGIN, finite_option
from planner.specs.catalog import read_yaml, validate_spec
from planner.specs.common import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_SEQ_LEN
from planner.specs.job import Job


def resolve_job(
    model,
    *,
    gpus: int | None = None,
    global_batch: int | None = None,
    seq_len: int | None = None,
    precision: str | None = None,
    job_file: Path | None = None,
    domain_fill: int | None = None,
    memory_margin_gib: float | None = None,
):
    """Job from (in increasing priority) the model's reference job, a job file, and options."""
    data: dict = {}
    origin = "the command line"
    if model.reference_job is not None:
        ref = model.reference_job
        data.update(gpus=ref.gpus, global_batch=ref.global_batch, seq_len=ref.seq_len, source=ref.source)
    if job_file is not None:
        data.update(read_yaml(Path(job_file), "job"))
        origin = str(job_file)
    overrides = dict(gpus=gpus, global_batch=global_batch, seq_len=seq_len, domain_fill=domain_fill)
    for key, value in overrides.items():
        if value is not None:
            data[key] = value
            data.pop("source", None) if key != "domain_fill" else None
    if precision:
        data["precisions"] = [p.strip() for p in precision.split(",") if p.strip()]
    if memory_margin_gib is not None:
        finite_option("--memory-margin", memory_margin_gib, low=0.0, high=2**20, unit="GiB",
                      negative="a negative margin would hand memory back that the GPU does not have")
        data["memory_margin_bytes"] = memory_margin_gib * 2**30
        data["memory_margin_fraction"] = 0.0
    elif "memory_margin_bytes" not in data and "memory_margin_fraction" not in data:
        data["memory_margin_fraction"] = DEFAULT_MEMORY_MARGIN
    for key, value in overrides.items():
        if value is not None:
            count_option(f"--{key.replace('_', '-')}", value)
    missing = [k for k in ("gpus", "global_batch", "seq_len") if k not in data]
    if missing:
        raise PlannerError(
            f"The job is missing {', '.join(missing)}: {model.name} has no reference job to fall back on.",
            hint="Give --gpus, --global-batch and --seq-len, or --job job.yaml.",
        )
    return validate_spec(Job, data, "job", origin)


def count_option(option: str, value: int) -> int:
    """An integer option (GPUs, batch, sequence length, domain fill) in the range the job allows,
    with the bound and its reason in the message."""
    if value < 1:
        raise PlannerError(f"{option} {value} must be a positive integer.")
    high, why = {
        "--gpus": (MAX_GPUS, "beyond any cluster built (the largest hold about 10^5 GPUs)"),
        "--domain-fill": (MAX_GPUS, "beyond any NVLink domain"),
        "--global-batch": (MAX_GLOBAL_BATCH, "beyond any training run (published runs use up to 16,384 sequences)"),
        "--seq-len": (MAX_SEQ_LEN, "beyond any training context (the longest are about 1M tokens)"),
    }.get(option, (None, ""))
    if high is not None and value > high:
        raise PlannerError(f"{option} {value:,} is {why}: planner accepts at most {high:,} "
                           f"(2^{high.bit_length() - 1}).")
    return value
