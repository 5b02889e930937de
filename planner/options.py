"""Command-line options shared by several commands, declared once.

Also the resolve step every command starts with: names and files to specs, job options (or a job
file, or the model's reference job) to a :class:`~planner.specs.job.Job`.
"""

from __future__ import annotations

import json as _json
from pathlib import Path
from typing import Annotated, Optional

import typer

from planner.errors import PlannerError

ModelOpt = Annotated[
    str,
    typer.Option("--model", "-m", help="Catalog name or alias (see 'planner models'), a model YAML, or a HuggingFace config.json."),
]
HwOpt = Annotated[
    str,
    typer.Option("--hw", help="Hardware catalog name or alias (see 'planner hw'), or a hardware YAML."),
]
GpusOpt = Annotated[Optional[int], typer.Option("--gpus", "-n", help="GPUs in the job (default: the model's reference job).")]
GlobalBatchOpt = Annotated[
    Optional[int], typer.Option("--global-batch", help="Global batch per step, in sequences.")
]
SeqLenOpt = Annotated[Optional[int], typer.Option("--seq-len", help="Sequence length in tokens.")]
PrecisionOpt = Annotated[
    Optional[str], typer.Option("--precision", help="Allowed compute precisions, comma-separated: bf16, fp8 (first is the default).")
]
JobFileOpt = Annotated[
    Optional[Path], typer.Option("--job", help="A job YAML (gpus, global_batch, seq_len, precisions); options given on the line override it.")
]
DomainFillOpt = Annotated[
    Optional[int], typer.Option("--domain-fill", help="Use N GPUs of each NVLink domain (e.g. 64 of an NVL72 rack's 72); the rest stay idle.")
]
MemoryMarginOpt = Annotated[
    Optional[float], typer.Option("--memory-margin", help="Extra GiB kept free on every GPU, beyond the allocator margin.")
]
PlanOpt = Annotated[str, typer.Option("--plan", "-p", help="Plan as key=value pairs, e.g. \"tp=2,pp=4,vpp=2,ep=8,mbs=1,recompute=full\".")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables (stable: same input, same bytes).")]
# The search space's bounds, shared by search and compare (compare applies them on every hardware).
MomentsOpt = Annotated[str, typer.Option("--moments", help="Allowed Adam moment precisions, comma-separated: fp32, bf16.")]
SearchTargetOpt = Annotated[str, typer.Option("--target", help="Only plans this launcher can run: megatron, torchtitan or any.")]
FixOpt = Annotated[Optional[str], typer.Option("--fix", help="Pin plan keys (on every hardware), e.g. \"tp=2,recompute=full\".")]
MaxOpt = Annotated[Optional[str], typer.Option("--max", help="Upper bounds on degrees and mbs, e.g. \"pp=8,tp=4\".")]
CalibrationOpt = Annotated[
    Optional[Path], typer.Option("--calibration", help="A calibration file from 'planner calibrate' (measured GEMM, HBM and collective rates).")
]


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
    from planner.specs.catalog import read_yaml, validate_spec
    from planner.specs.job import Job

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


def check_margin(job, hw) -> None:
    """The job's --memory-margin must leave some of the GPU's memory once the CUDA context is
    taken: otherwise every answer would read 'exceeds the -3.0 GiB allocation limit'."""
    if not job.memory_margin_bytes:
        return
    from planner.cost.efficiency_access import memory_constants

    usable = hw.gpu.hbm_usable_bytes.value
    context = memory_constants(hw).cuda_context_bytes.value
    if job.memory_margin_bytes >= usable - context:
        raise PlannerError(
            f"--memory-margin {job.memory_margin_bytes / 2**30:g} GiB leaves nothing of {hw.name}'s "
            f"{usable / 2**30:.1f} GiB usable HBM ({context / 2**30:.1f} GiB go to the CUDA context).",
            hint="Give a margin of a few GiB.",
        )


def finite_option(option: str, value: float, *, low: float | None = None, high: float | None = None,
                  unit: str = "", low_inclusive: bool = True, negative: str | None = None,
                  low_text: str | None = None) -> float:
    """A float from the command line must be a finite number in [low, high]: typer reads 'nan'
    and 'inf' as floats, so every float option is checked here, as one paragraph."""
    import math

    u = f" {unit}" if unit else ""
    if not math.isfinite(value):
        raise PlannerError(f"{option} {value} is not a number planner can use: give a finite number"
                           + (f" of {unit}" if unit else "") + ".")
    if low is not None and (value < low or (value == low and not low_inclusive)):
        if value < 0 and negative:
            raise PlannerError(f"{option} {value:g} is negative: {negative}.", hint=f"Give a value of at least {low:g}{u}.")
        shown = low_text or f"{low:g}{u}"
        bound = f"at least {shown}" if low_inclusive else f"more than {shown}"
        raise PlannerError(f"{option} {value:g} is out of range: it must be {bound}.")
    if high is not None and value > high:
        raise PlannerError(f"{option} {value:g} is out of range: it must be at most {high:g}{u}.")
    return value


def count_option(option: str, value: int) -> int:
    """An integer option (GPUs, batch, sequence length, domain fill) in the range the job allows,
    with the bound and its reason in the message."""
    from planner.specs.common import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_SEQ_LEN

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


def _finite(obj):
    """The object with non-finite floats as None: JSON has no Infinity or NaN, so --json never
    prints them (the cost model does not produce them from validated input; this is the net)."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def print_json(obj) -> None:
    """Stable JSON: sorted keys, fixed indentation, only finite numbers."""
    typer.echo(json_text(obj))


def json_text(obj) -> str:
    """The JSON text print_json prints (without its final newline)."""
    return _json.dumps(_finite(obj), indent=2, sort_keys=True, default=_json_default, allow_nan=False)


def _json_default(o):
    if hasattr(o, "model_dump"):
        return _finite(o.model_dump(mode="json"))
    if hasattr(o, "tolist"):
        return _finite(o.tolist())
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
