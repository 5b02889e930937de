"""`planner explain`: one plan in depth: memory per stage and over time, its peak moment, and
(once modeled) step time, throughput and the bottleneck."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from planner.cli import app
from planner.options import (
    CalibrationOpt, DomainFillOpt, GlobalBatchOpt, GpusOpt, HwOpt, JobFileOpt, JsonOpt, MemoryMarginOpt,
    ModelOpt, PrecisionOpt, SeqLenOpt, print_json, resolve_job,
)
from planner.units import GiB

RoutingOpt = Annotated[
    Optional[float],
    typer.Option("--routing-imbalance", help="Tokens on the busiest EP rank over the mean (1.0 = balanced)."),
]
ImplOpt = Annotated[
    str,
    typer.Option("--implementation", help="te (Transformer Engine + flash attention) or megatron-local (unfused attention, fp32 softmax)."),
]


def build_assumptions(routing_imbalance: float | None = None, implementation: str = "te", calibration: Path | None = None):
    from planner.cost.setup import Assumptions
    from planner.specs.catalog import validate_spec

    data: dict = {"implementation": implementation}
    if routing_imbalance is not None:
        data["routing_imbalance"] = routing_imbalance
    a = validate_spec(Assumptions, data, "assumptions", "the command line")
    if calibration is not None:
        try:
            from planner.specs.calibration import load_calibration  # written with the time model
        except ModuleNotFoundError:
            from planner.errors import PlannerError

            raise PlannerError("--calibration needs the time model's calibration support, which this build lacks.")
        load_calibration(str(calibration))  # a bad file fails here, as one paragraph
        a = a.model_copy(update={"calibration": str(calibration)})
    return a


@app.command("explain")
def explain_cmd(
    model: ModelOpt,
    hw: HwOpt,
    plan: Annotated[Optional[str], typer.Option("--plan", "-p", help="Plan as key=value pairs, e.g. \"tp=2,pp=4,vpp=2,ep=8,mbs=1,recompute=full\".")] = None,
    gpus: GpusOpt = None,
    global_batch: GlobalBatchOpt = None,
    seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None,
    job: JobFileOpt = None,
    domain_fill: DomainFillOpt = None,
    memory_margin: MemoryMarginOpt = None,
    routing_imbalance: RoutingOpt = None,
    implementation: ImplOpt = "te",
    calibration: CalibrationOpt = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", help="Read the plan (and job) from a Megatron-LM launch script or argument file.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write the worst stage's memory over one step as a PNG.")] = None,
    json: JsonOpt = False,
) -> None:
    """Explain one plan: per-stage memory by class, the peak moment, headroom; time when modeled."""
    from planner.cost.evaluate import context_json, evaluate
    from planner.cost.memory import memory_report
    from planner.cost.setup import resolve_setup
    from planner.errors import PlannerError
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.plan import Plan

    m = load_model(model)
    h = load_hardware(hw)
    unknown_flags: list[str] = []
    if megatron_args is not None:
        try:
            from planner.export.megatron_args import plan_from_megatron_args
        except ModuleNotFoundError:
            raise PlannerError("--megatron-args needs the Megatron exporter, which this build lacks.") from None
        parsed = plan_from_megatron_args(Path(megatron_args).read_text())
        p = parsed.plan
        gpus = gpus or parsed.job.get("gpus")
        global_batch = global_batch or parsed.job.get("global_batch")
        seq_len = seq_len or parsed.job.get("seq_len")
        unknown_flags = list(parsed.unknown_flags)
    elif plan is None:
        raise PlannerError("explain needs a plan.", hint="Give --plan \"tp=..,pp=..\" or --megatron-args FILE.")
    else:
        p = Plan.parse(plan)
    j = resolve_job(m, gpus=gpus, global_batch=global_batch, seq_len=seq_len, precision=precision, job_file=job,
                    domain_fill=domain_fill, memory_margin_gib=memory_margin)
    assumptions = build_assumptions(routing_imbalance, implementation, calibration)
    setup = resolve_setup(m, h, j, p, assumptions)
    mem = memory_report(setup)
    result = evaluate(setup, memory=mem)
    if unknown_flags:
        result["unknown_megatron_flags"] = unknown_flags
    if plot is not None:
        from planner.report.plots import plot_memory_timeline

        plot_memory_timeline(setup, mem, plot)
        result["plot"] = str(plot)
    if json:
        print_json({**context_json(m, h, j, assumptions), **result})
        return
    from planner.report.tables import print_explain

    print_explain(setup, mem, result, unknown_flags=unknown_flags)
