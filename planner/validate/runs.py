"""The runs file `planner validate` reads: published (or your own) training runs with their
settings and what was measured.

One YAML file, top key ``runs``, one entry per run (:class:`RunSpec`; every key is documented on
its field). The bundled file is ``tests/data/published_runs.yaml``; its header says how its runs
and its calibration subset were chosen. A run gives its settings as a planner plan string
(``plan``), as a Megatron-LM launch (``megatron_args``: a script or a flag list, read by the same
reader as ``planner check --megatron-args``), or both (then every key of ``plan`` is compared
with what the reader reads from the flags).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from planner.errors import PlannerError
from planner.specs.catalog import read_yaml, validate_spec
from planner.specs.common import Spec
from planner.specs.model import Name

HOPPER = ("hopper",)
"""GPU generations (hardware catalog ``gpu.generation``) reported as Hopper; the rest count as Blackwell."""


class RunSource(Spec):
    where: str = Field(min_length=3)
    """Repository and path, paper, or page the run is published in."""
    commit: str | None = None
    """The commit (or version) of the source that was read."""
    row: str | None = None
    """The table row, section or figure."""


class FlopsConvention(Spec):
    kind: Literal["megatron", "per_token", "none"] = "none"
    """How the source counts model FLOPs: 'megatron' = Megatron-LM's num_floating_point_operations
    (planner computes the same formula, so a published TFLOP/s converts to tokens/s exactly);
    'per_token' = the source's FLOPs per token (give flops_per_token); 'none' = the source gives
    no FLOPs figure."""
    flops_per_token: float | None = Field(None, gt=0)
    """The source's model FLOPs per token (its TFLOP/s over its tokens/s), for kind 'per_token'."""
    note: str | None = None


class Measured(Spec):
    """What the source measured, as published (``*_derived``: computed from published numbers)."""

    tokens_per_s_per_gpu: float | None = Field(None, gt=0)
    tflops_per_gpu: float | None = Field(None, gt=0)
    """Model TFLOP/s per GPU in the source's FLOPs convention (see flops_convention)."""
    step_time_s: float | None = Field(None, gt=0)
    step_time_s_derived: float | None = Field(None, gt=0)
    mfu: float | None = Field(None, gt=0, le=1)
    peak_reserved_gib: float | None = Field(None, gt=0)
    """Peak reserved memory per GPU (PyTorch max_reserved), GiB."""
    peak_allocated_gib: float | None = Field(None, gt=0)
    """Peak allocated memory per GPU (PyTorch max_allocated), GiB."""


class RunSpec(Spec):
    name: Name
    """Unique name of the run: one line of printable text, as a model's name (it is printed in
    the report's tables; an escape sequence or carriage return would drive the terminal)."""
    source: RunSource
    recipe: str | None = None
    """The recipe or script the settings were read from, when it is not the source itself."""
    software: str | None = None
    """Container, framework commit or release the run used."""
    software_profile: str | None = Field(None, max_length=200)
    """The planner software profile (``planner software``) of the release the run used, where its
    source states it; None: the default release of its launcher (validate --software), which the
    report says."""
    confidence: Literal["H", "M", "L"] = "M"
    """H: primary source read and settings matched exactly; M: derived or partly stated; L: unsure."""
    hardware: str
    """Hardware catalog name (see 'planner hw') or a hardware YAML."""
    model: str
    """Model catalog name, a model YAML or a config.json; a description when planner lacks the model
    (then give not_evaluable)."""
    model_overrides: dict[str, Any] = Field(default_factory=dict)
    """ModelSpec fields to change for this run, e.g. {mtp_layers: 0} for a run trained without MTP."""
    gpus: int | None = Field(None, gt=0)
    global_batch: int | None = Field(None, gt=0)
    """Sequences per optimizer step."""
    seq_len: int | None = Field(None, gt=0)
    precision: Literal["bf16", "fp8", "nvfp4"] = "bf16"
    """Compute precision of the run (planner evaluates all three)."""
    plan: str | None = None
    """planner plan string (the keys the source states)."""
    megatron_args: str | None = None
    """The Megatron-LM launch: a script, or the flags of pretrain_gpt.py."""
    args_origin: str | None = None
    """Where the flags come from (published script, a recipe translated to flags, ...)."""
    assumptions: dict[str, Any] = Field(default_factory=dict)
    """planner Assumptions fields the run sets (tp_comm_overlap, dp_overlap, routing_imbalance, ...)."""
    not_modeled: dict[str, Any] = Field(default_factory=dict)
    """The run's levers planner cannot express yet (CUDA graphs, paged stash, ...), as data."""
    measured: Measured
    flops_convention: FlopsConvention = Field(default_factory=FlopsConvention)
    series: str | None = None
    """Runs of one configuration across software versions or optimization steps share a series."""
    calibration: bool = False
    """In the declared calibration subset (constants may be fitted on these runs only)."""
    not_evaluable: str | None = None
    """Why planner cannot evaluate this run (printed instead of a prediction)."""
    evaluable_since: str | None = None
    """When a planner change made this run evaluable after the calibration subset was drawn (a
    date, and what changed): such a run stays in the validation subset, outside the rule that
    drew the calibration subset."""
    notes: str | None = None

    @field_validator("model_overrides")
    @classmethod
    def _overrides(cls, v: dict) -> dict:
        allowed = {"mtp_layers", "vocab_size"}
        bad = set(v) - allowed
        if bad:
            raise ValueError(f"model_overrides may set {', '.join(sorted(allowed))}; not {', '.join(sorted(bad))}")
        return v


class RunsFile(Spec):
    runs: list[RunSpec] = Field(min_length=1)


def load_runs(path: Path | str) -> list[RunSpec]:
    """The runs of a runs file; a malformed file is a one-paragraph PlannerError naming the run and key."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict) or "runs" not in data:
        raise PlannerError(f"'{path}' holds no 'runs' list.",
                           hint="A runs file is YAML with a top-level 'runs:' list; see tests/data/published_runs.yaml.")
    runs = data.get("runs")
    if isinstance(runs, list):
        for i, run in enumerate(runs):
            label = run.get("name", f"#{i + 1}") if isinstance(run, dict) else f"#{i + 1}"
            validate_spec(RunSpec, run, f"run '{label}'", str(path)) if isinstance(run, dict) else None
    parsed = validate_spec(RunsFile, data, "runs file", str(path))
    seen: set[str] = set()
    for run in parsed.runs:
        if run.name in seen:
            raise PlannerError(f"'{path}': two runs are named '{run.name}'.", hint="Give every run a unique name.")
        seen.add(run.name)
        if not run.not_evaluable and not (run.plan or run.megatron_args):
            raise PlannerError(f"'{path}', run '{run.name}': neither a plan nor megatron_args is given.",
                               hint="Give the run's settings as a planner plan string, as its Megatron flags, or "
                                    "say why it cannot be evaluated (not_evaluable).")
    return list(parsed.runs)


__all__ = ["RunSpec", "RunSource", "Measured", "FlopsConvention", "load_runs", "HOPPER"]
