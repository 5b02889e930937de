"""`planner memtrace`: read a PyTorch CUDA memory snapshot and say why the run runs out of memory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli import app
from planner.errors import PlannerError
from planner.options import (
    GlobalBatchOpt,
    GpusOpt,
    JobFileOpt,
    JsonOpt,
    PrecisionOpt,
    SeqLenOpt,
    print_json,
)

SnapshotArg = Annotated[Path, typer.Argument(help="The pickle torch.cuda.memory._dump_snapshot wrote.", show_default=False)]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write the allocated/reserved timeline to this PNG.")]
CapacityOpt = Annotated[
    float | None,
    typer.Option("--capacity", help="The memory limit in GiB (default: from an OOM event in the trace, else --hw, else unknown)."),
]
DeviceOpt = Annotated[int | None, typer.Option("--device", help="Device to analyze (default: the one with the most trace events).")]
TopOpt = Annotated[int, typer.Option("--top", min=0, help="Largest live allocations listed at the peak.")]
TransientOpt = Annotated[
    int,
    typer.Option("--transient-window", min=0,
                 help="An allocation freed after at most this many other allocations is transient (one op)."),
]
ModelOptional = Annotated[str | None, typer.Option("--model", "-m", help="With --hw and --plan: show planner's prediction beside the measurement.")]
HwOptional = Annotated[str | None, typer.Option("--hw", help="Hardware of the run (also gives the limit when the trace has no OOM).")]
PlanOptional = Annotated[str | None, typer.Option("--plan", "-p", help="Plan of the run, e.g. \"tp=2,pp=4,ep=8,mbs=1\".")]
StageOpt = Annotated[int | None, typer.Option("--stage", help="Pipeline stage of the rank the snapshot comes from (default: the worst stage).")]


@app.command("memtrace")
def memtrace_cmd(
    snapshot: SnapshotArg,
    plot: PlotOpt = None,
    capacity: CapacityOpt = None,
    device: DeviceOpt = None,
    top: TopOpt = 10,
    transient_window: TransientOpt = 8,
    model: ModelOptional = None,
    hw: HwOptional = None,
    plan: PlanOptional = None,
    stage: StageOpt = None,
    gpus: GpusOpt = None,
    global_batch: GlobalBatchOpt = None,
    seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None,
    job: JobFileOpt = None,
    json: JsonOpt = False,
) -> None:
    """Read a CUDA memory snapshot: timeline, peak by class, allocator state, case A or B, and why."""
    from planner.memtrace.loader import load_snapshot
    from planner.memtrace.report import analyze, render_text

    from planner.inputs import finite_option

    if plot is not None and plot.suffix.lower() != ".png":
        raise PlannerError(f"--plot writes PNG files; '{plot}' does not end in .png.")
    if capacity is not None:
        finite_option("--capacity", capacity, low=2**-10, high=2**20, unit="GiB", low_text="1 MiB (0.001 GiB)",
                      negative="a memory limit is a positive number of GiB")
    if device is not None and not 0 <= device < 2**16:
        raise PlannerError(f"--device {device} is not a device index (0, 1, ...).")
    if stage is not None and not 0 <= stage < 2**20:
        raise PlannerError(f"--stage {stage} is not a pipeline stage (0, 1, ...).")
    if model is not None and (hw is None or plan is None):
        raise PlannerError("--model needs --hw and --plan too, to predict the same configuration the snapshot ran.")
    if plan is not None and model is None:
        raise PlannerError("--plan needs --model and --hw: the prediction is for a model on hardware.")
    hw_spec = None
    fallback = None
    if hw is not None:
        from planner.specs.catalog import load_hardware

        hw_spec = load_hardware(hw)
        fallback = (float(hw_spec.gpu.hbm_usable_bytes.value), f"usable HBM of {hw_spec.name}")

    if plot is not None:
        from planner.files import check_output, note_input

        note_input(snapshot, "snapshot")  # so that the plot can never replace it
        check_output(plot, "plot", suffixes=(".png",))  # before loading and analysis
    snap = load_snapshot(snapshot)
    result = analyze(
        snap,
        source=str(snapshot),
        device=device,
        capacity_bytes=None if capacity is None else capacity * 2**30,
        fallback_capacity=fallback,
        transient_max_allocs=transient_window,
        top=top,
    )
    rep = result.report
    if model is not None:
        rep["prediction"] = _prediction(rep, model, hw_spec, plan, stage,
                                        dict(gpus=gpus, global_batch=global_batch, seq_len=seq_len,
                                             precision=precision, job_file=job))
    if plot is not None:
        from planner.memtrace.plot import plot_timeline

        plot_timeline(result.timeline, result.classification, rep, plot)
        rep["plot"] = str(plot)
    if json:
        print_json(rep)
    else:
        typer.echo(render_text(rep))
        if plot is not None:
            typer.echo(f"\nPlot written to {plot}.")


def _prediction(rep: dict, model_name: str, hw_spec, plan_text: str, stage: int | None, job_opts: dict) -> dict:
    from planner.memtrace.predict import compare, predicted_memory
    from planner.specs.job_input import resolve_job
    from planner.specs.catalog import load_model
    from planner.specs.plan import Plan

    model = load_model(model_name)
    job = resolve_job(model, **job_opts)
    predicted, why_not = predicted_memory(model, hw_spec, job, Plan.parse(plan_text))
    if predicted is None:
        return {"available": False, "reason": why_not}
    peak = rep["peak"]
    measured = {"components": peak["components"], "allocated_bytes": peak["allocated_bytes"],
                "reserved_bytes": peak["reserved_bytes"]}
    return compare(measured, predicted, stage)
