"""Predict each run of a runs file with planner's cost model and compare with what was measured.

For one run: resolve the model, hardware, job and plan (from the plan string, or from the
Megatron flags through :func:`planner.launchers.megatron.read.job_from_script`, the route
``planner check --megatron-args`` takes), compose memory and time once
(:func:`planner.cost.compose.costs_of`), and compare:

- throughput: tokens/s per GPU. A source that prints only model TFLOP/s is converted with its own
  FLOPs convention (Megatron's formula, which planner computes, or the source's FLOPs per token);
  one that prints a step time is converted with the run's batch. The signed error is
  predicted / measured - 1: positive means planner predicts the run faster than it ran.
- step time (the same comparison, inverted: predicted / measured - 1, negative when planner is fast);
- model TFLOP/s per GPU in the source's convention;
- peak reserved memory where the source publishes it.

A run planner cannot express, or whose inputs planner refuses, gets a one-paragraph reason instead
of a prediction (never a traceback).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.cost.compose import costs_of
from planner.cost.flops import megatron_model_flops
from planner.cost.memory import memory_report
from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.time import time_report
from planner.errors import PlannerError
from planner.launchers.common import export_canonical
from planner.launchers.megatron.read import assumptions_from_flags, job_from_script
from planner.launchers.registry import default_software
from planner.specs.catalog import load_hardware, load_model, load_software, validate_spec
from planner.specs.job_input import resolve_job
from planner.specs.overrides import apply_overrides
from planner.specs.plan import Plan
from planner.specs.software import software_violations
from planner.validate.runs import HOPPER, RunSpec

GiB = 2**30


@dataclass
class Reader:
    """What the launch reader read from a run's Megatron flags."""

    plan: str
    """The plan read from the flags (export-canonical)."""
    model: str
    model_source: str
    disagreements: list[str] = field(default_factory=list)
    """Where the flags say something else than the run's plan string, job or model."""
    not_modeled_flags: list[str] = field(default_factory=list)
    """Flags the reader lists as not modeled by planner (the run's unexpressed levers) or unknown."""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"plan": self.plan, "model": self.model, "model_source": self.model_source,
                "disagreements": list(self.disagreements), "not_modeled_flags": list(self.not_modeled_flags),
                "notes": list(self.notes)}


@dataclass
class RunResult:
    name: str
    status: str
    """'evaluated' or 'not evaluated'."""
    reason: str | None
    run: RunSpec
    moe: bool | None = None
    generation: str | None = None
    """'Hopper' or 'Blackwell'."""
    plan: str | None = None
    """The plan evaluated (canonical)."""
    signature: tuple | None = None
    """The planner inputs (model, hardware, job, plan, assumptions): equal signatures predict the same."""
    predicted: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    bottleneck: str | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    reader: Reader | None = None
    counted: bool = True
    """Counted in the class statistics (False: a series run whose inputs equal a later run's)."""
    software: str | None = None
    """The software profile the run was evaluated with."""
    software_origin: str | None = None
    """'the runs file' (its software_profile) or 'default: ...' (the runs file states no release)."""
    software_lacks: list[str] = field(default_factory=list)
    """Levers of the evaluated plan that the run's release does not have (a runs-file or reader error)."""

    @property
    def evaluated(self) -> bool:
        return self.status == "evaluated"

    @property
    def klass(self) -> str | None:
        if self.moe is None:
            return None
        return f"{'MoE' if self.moe else 'dense'} / {self.generation} / {self.run.precision}"

    @property
    def subset(self) -> str:
        return "calibration" if self.run.calibration else "validation"

    @property
    def error(self) -> float | None:
        """The headline signed error: tokens/s per GPU, predicted / measured - 1."""
        return self.errors.get("throughput")

    def to_json(self) -> dict:
        r6 = _r6
        out: dict[str, Any] = {
            "name": self.name, "status": self.status, "subset": self.subset, "class": self.klass,
            "confidence": self.run.confidence, "hardware": self.run.hardware, "model": self.run.model,
            "gpus": self.run.gpus, "global_batch": self.run.global_batch, "seq_len": self.run.seq_len,
            "series": self.run.series, "counted": self.counted if self.evaluated else False,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.evaluated:
            out.update(plan=self.plan, predicted=_round(self.predicted), measured=_round(self.measured),
                       errors={k: r6(v) for k, v in self.errors.items()}, bottleneck=self.bottleneck,
                       breakdown_fraction={k: r6(v) for k, v in self.breakdown.items()})
        if self.reader is not None:
            out["reader"] = self.reader.to_json()
        if self.run.not_modeled:
            out["not_modeled"] = sorted(self.run.not_modeled)
        if self.software is not None:
            out["software"] = {"profile": self.software, "origin": self.software_origin}
            if self.software_lacks:
                out["software"]["lacks"] = list(self.software_lacks)
        return out


def _r6(x: float) -> float:
    return float(f"{x:.6g}")


PROVENANCE = ("name", "aliases", "display_name", "source", "notes")
"""A model spec's keys that name it and say where it comes from: no prediction reads them."""


def architecture(model) -> dict:
    """What a prediction depends on of a model spec: the architecture, not its names and provenance
    (two runs of one architecture under two names predict the same)."""
    return {k: v for k, v in model.model_dump(mode="json").items() if k not in PROVENANCE}


def _round(d: dict) -> dict:
    return {k: (_r6(v) if isinstance(v, float) else v) for k, v in d.items()}


# ---------------------------------------------------------------------------------------------
def _apply_overrides(model, overrides: dict):
    return apply_overrides(model, overrides, "the run's model_overrides")


def _has_architecture(text: str) -> bool:
    return "--num-layers " in text or "--num-layers=" in text


def _plan_disagreements(run: RunSpec, read_plan, model, hw, job) -> list[str]:
    """Keys of the run's plan string that the reader read differently from the flags."""
    given = Plan.parse(run.plan)
    keys = [part.split("=", 1)[0].strip() for part in run.plan.split(",") if "=" in part]
    try:
        canon = export_canonical(given, model, hw, job)
    except PlannerError as exc:
        return [f"the run's plan string is not valid for the model read from the flags: {exc.paragraph()}"]
    out = []
    for key in keys:
        if key == "dp":
            continue
        mine, theirs = getattr(canon, key, None), getattr(read_plan, key, None)
        if str(mine) != str(theirs):
            out.append(f"{key}: plan says {mine}, the flags say {theirs}")
    return out


def resolve_run(run: RunSpec):
    """(model, hardware, job, plan, assumptions, reader) of an evaluable run."""
    hw = load_hardware(run.hardware)
    assumptions = validate_spec(Assumptions, dict(run.assumptions), "assumptions", f"run '{run.name}'")
    missing = [k for k in ("gpus", "global_batch", "seq_len") if getattr(run, k) is None]
    if missing:
        raise PlannerError(f"The run does not give {', '.join(missing)}.")
    reader = None
    if run.megatron_args:
        arch = _has_architecture(run.megatron_args)
        # Runs that happened are predicted at the edge: the planning margin has no part in "did it fit".
        sj = job_from_script(run.megatron_args, model=None if arch else run.model, hw=run.hardware, gpus=run.gpus,
                             model_overrides=dict(run.model_overrides) or None, memory_margin_gib=0.0)
        model, job, plan = sj.model, sj.job, sj.plan

        flagged = {k: v for k, v in assumptions_from_flags(sj.args.values).items() if k not in run.assumptions}
        if flagged:
            assumptions = assumptions.model_copy(update=flagged)
        # Without architecture flags the reader's model hints are Megatron's defaults, not the run's.
        disagree = list(sj.mismatches) if arch else []
        base = model.name.split("-mtp")[0] if model.name.startswith(run.model) else model.name
        if base != run.model:
            disagree.append(f"model: the run names {run.model}, the flags describe {model.name}")
        for key in ("global_batch", "seq_len"):
            if getattr(job, key) != getattr(run, key):
                disagree.append(f"{key}: the run says {getattr(run, key)}, the flags say {getattr(job, key)}")
        if job.default_precision != run.precision:
            disagree.append(f"precision: the run says {run.precision}, the flags say {job.default_precision}")
        if run.plan:
            disagree += _plan_disagreements(run, plan, model, hw, job)
        flags = [f for f in sj.args.unknown_flags]
        reader = Reader(plan.to_string(), model.name, sj.model_source, disagree, flags, list(sj.notes))
        if job.global_batch != run.global_batch or job.seq_len != run.seq_len:
            job = resolve_job(model, gpus=run.gpus, global_batch=run.global_batch, seq_len=run.seq_len,
                              precision=job.default_precision, memory_margin_gib=0.0)
    else:
        model = _apply_overrides(load_model(run.model), dict(run.model_overrides))
        job = resolve_job(model, gpus=run.gpus, global_batch=run.global_batch, seq_len=run.seq_len,
                          precision=run.precision, memory_margin_gib=0.0)
        plan = Plan.parse(run.plan)
    return model, hw, job, plan, assumptions, reader


def measured_throughput(run: RunSpec, flops_per_token_megatron: float) -> tuple[float | None, str]:
    """(tokens/s per GPU, how it was obtained) from what the run publishes."""
    m = run.measured
    if m.tokens_per_s_per_gpu:
        return m.tokens_per_s_per_gpu, "published tokens/s/GPU"
    tokens = (run.global_batch or 0) * (run.seq_len or 0)
    step = m.step_time_s or m.step_time_s_derived
    if step and tokens and run.gpus:
        return tokens / run.gpus / step, "published step time"
    conv = run.flops_convention
    fpt = flops_per_token_megatron if conv.kind == "megatron" else conv.flops_per_token if conv.kind == "per_token" else None
    if m.tflops_per_gpu and fpt:
        return m.tflops_per_gpu * 1e12 / fpt, f"published TFLOP/s over the source's FLOPs per token ({conv.kind})"
    return None, "nothing comparable published"


def run_software(run: RunSpec, default: str | None = None):
    """(profile, origin) of the release a run is evaluated with: its ``software_profile``, else
    ``default`` (validate --software), else the newest release of its launcher (torchtitan where the
    run's software or plan is torchtitan's, Megatron-Core otherwise), said as a default."""
    if run.software_profile:
        profile = load_software(run.software_profile)
        return profile, profile.noted("the runs file")
    if default is not None:
        profile = load_software(default)
        return profile, profile.noted("default: --software (the runs file states no release)")
    titan = "torchtitan" in (run.software or "").lower() or "recompute=op" in (run.plan or "")
    profile = default_software("torchtitan" if titan else "megatron")
    return profile, f"default: the newest {profile.framework} release planner knows (the runs file states none)"


def evaluate_run(run: RunSpec, calibration=None, software: str | None = None) -> RunResult:
    """The prediction of one run against its measurement (or why it is not evaluated), with the
    release its runs file names (or the default, said so)."""
    try:
        profile, origin = run_software(run, software)
    except PlannerError as exc:
        return RunResult(run.name, "not evaluated", exc.paragraph(), run)
    if run.not_evaluable:
        res = RunResult(run.name, "not evaluated", run.not_evaluable, run)
    else:
        try:
            res = _evaluate(run, calibration)
        except PlannerError as exc:
            res = RunResult(run.name, "not evaluated", exc.paragraph(), run)
    res.software, res.software_origin = profile.name, origin
    if res.evaluated and res.plan is not None:
        res.software_lacks = [v.message for v in software_violations(Plan.parse(res.plan), profile)]
    return res


def _evaluate(run: RunSpec, calibration) -> RunResult:
    model, hw, job, plan, assumptions, reader = resolve_run(run)
    setup = resolve_setup(model, hw, job, plan, assumptions)
    costs = costs_of(setup, calibration)
    t = time_report(setup, costs=costs)
    mem = memory_report(setup, costs)
    ms = costs.ctx.ms
    fpt_megatron = megatron_model_flops(ms, 1, job.seq_len) / job.seq_len
    conv = run.flops_convention
    fpt_source = conv.flops_per_token if conv.kind == "per_token" else fpt_megatron
    tokens = job.global_batch * job.seq_len
    meas_tps, how = measured_throughput(run, fpt_megatron)
    if meas_tps is None:
        raise PlannerError("The run publishes no throughput, step time or TFLOP/s that planner can compare "
                           "(a TFLOP/s figure needs the source's FLOPs convention).")
    res = RunResult(run.name, "evaluated", None, run, moe=model.is_moe,
                    generation="Hopper" if hw.generation in HOPPER else "Blackwell",
                    plan=setup.plan.to_string(), reader=reader)
    res.signature = (repr(sorted(architecture(model).items())), hw.name, job.gpus, job.global_batch, job.seq_len,
                     setup.plan.to_string(), assumptions.model_dump_json())
    pred_tps = t.tokens_per_s_per_gpu
    res.predicted = {
        "step_time_s": t.step_time_s, "tokens_per_s_per_gpu": pred_tps,
        "model_tflops_per_gpu": pred_tps * fpt_source / 1e12,
        "model_tflops_per_gpu_megatron": t.model_tflops_per_gpu, "mfu": t.mfu,
        "peak_reserved_gib": mem.peak_bytes / GiB, "fits": bool(mem.fits),
        "flops_per_token_megatron": fpt_megatron,
    }
    res.measured = {"tokens_per_s_per_gpu": meas_tps, "from": how, "step_time_s": tokens / job.gpus / meas_tps}
    if run.measured.tflops_per_gpu:
        res.measured["model_tflops_per_gpu"] = run.measured.tflops_per_gpu
    if conv.kind == "per_token" and conv.flops_per_token:
        res.measured["flops_per_token_source"] = conv.flops_per_token
    res.errors = {"throughput": pred_tps / meas_tps - 1, "step_time": t.step_time_s / res.measured["step_time_s"] - 1}
    if run.measured.tflops_per_gpu and conv.kind != "none":
        res.errors["model_tflops"] = res.predicted["model_tflops_per_gpu"] / run.measured.tflops_per_gpu - 1
    if run.measured.peak_reserved_gib:
        res.measured["peak_reserved_gib"] = run.measured.peak_reserved_gib
        res.errors["peak_reserved"] = res.predicted["peak_reserved_gib"] / run.measured.peak_reserved_gib - 1
    res.bottleneck = t.bottleneck
    res.breakdown = {k: v / t.step_time_s for k, v in t.breakdown.items() if v > 0}
    return res


def evaluate_runs(runs: list[RunSpec], calibration=None, software: str | None = None) -> list[RunResult]:
    """Every run's result, with the class-statistics flag set: a run of a series whose planner
    inputs equal those of a later run of the same series is not counted (one configuration, one vote)."""
    results = [evaluate_run(r, calibration, software) for r in runs]
    later: dict[tuple, int] = {}
    for i, res in enumerate(results):
        if res.evaluated and res.run.series:
            later[(res.run.series, res.signature)] = i
    for i, res in enumerate(results):
        if res.evaluated and res.run.series:
            res.counted = later[(res.run.series, res.signature)] == i
    return results


__all__ = ["RunResult", "Reader", "architecture", "PROVENANCE", "evaluate_run", "evaluate_runs", "resolve_run", "measured_throughput"]
