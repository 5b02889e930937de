"""`planner explain`: one plan in depth: memory per stage and over time, its peak moment, and
(once modeled) step time, throughput and the bottleneck."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from planner.cli import app
from planner.commands.export import ScriptArgsOpt, ScriptEnvOpt
from planner.options import (
    CalibrationOpt, DomainFillOpt, GlobalBatchOpt, GpusOpt, JobFileOpt, JsonOpt, MemoryMarginOpt,
    PrecisionOpt, SeqLenOpt, print_json, resolve_job,
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

    from planner.options import finite_option

    data: dict = {"implementation": implementation}
    if routing_imbalance is not None:
        finite_option("--routing-imbalance", routing_imbalance, low=1.0, high=1000.0,
                      negative="it is the busiest EP rank's tokens over the mean, 1.0 or more")
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
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Catalog name or alias, a model YAML, or a HuggingFace config.json (default: from --from, or built from --megatron-args).")] = None,
    hw: Annotated[Optional[str], typer.Option("--hw", help="Hardware catalog name or alias, or a hardware YAML (default: from --from).")] = None,
    plan: Annotated[Optional[str], typer.Option("--plan", "-p", help="Plan as key=value pairs, e.g. \"tp=2,pp=4,vpp=2,ep=8,mbs=1,recompute=full\".")] = None,
    from_file: Annotated[Optional[Path], typer.Option("--from", help="A 'planner search --save' file; explain its plan --rank.")] = None,
    rank: Annotated[int, typer.Option("--rank", "-k", help="Which plan of --from, 1-based.")] = 1,
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
    script_env: ScriptEnvOpt = None,
    script_args: ScriptArgsOpt = None,
    against: Annotated[Optional[Path], typer.Option("--against", help="A 'planner search --save' file: compare this plan with its top plan.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write the worst stage's memory over one step as a PNG.")] = None,
    json: JsonOpt = False,
) -> None:
    """Explain one plan: per-stage memory by class, the peak moment, headroom; time and bottleneck.
    Exit status 1 when the plan breaks a rule or does not fit in memory."""
    from planner.errors import PlanRuleError

    try:
        _explain(model, hw, plan, from_file, rank, gpus, global_batch, seq_len, precision, job, domain_fill,
                 memory_margin, routing_imbalance, implementation, calibration, megatron_args, script_env, script_args,
                 against, plot, json)
    except PlanRuleError as exc:
        exc.exit_code = 1  # the plan breaks a rule: explain's "does not work" status
        raise


def _explain(model, hw, plan, from_file, rank, gpus, global_batch, seq_len, precision, job, domain_fill,
             memory_margin, routing_imbalance, implementation, calibration, megatron_args, script_env, script_args,
             against, plot, json) -> None:
    from planner.cost.compose import batch_of_setup, evaluate_batch
    from planner.cost.evaluate import context_json, plan_evaluation
    from planner.cost.memory import memory_report
    from planner.cost.setup import resolve_setup
    from planner.errors import PlannerError
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.plan import Plan

    unknown_flags: list[str] = []
    given = sum(x is not None for x in (plan, from_file, megatron_args))
    if given != 1:
        raise PlannerError("explain needs exactly one plan source.",
                           hint="Give --plan \"tp=..,pp=..\", or --from plans.json --rank K, or --megatron-args FILE.")
    m = None
    if megatron_args is not None:
        from planner.launchers.megatron.read import job_from_script, script_inputs

        environ, argv = script_inputs(script_env, script_args)
        sj = job_from_script(Path(megatron_args), model=model, hw=hw, gpus=gpus, global_batch=global_batch,
                             seq_len=seq_len, precision=precision, job_file=job, domain_fill=domain_fill,
                             memory_margin_gib=memory_margin, environ=environ, script_args=argv)
        m, h, j, p = sj.model, sj.hardware, sj.job, sj.plan
        unknown_flags = list(sj.args.unknown_flags)
    elif from_file is not None:
        from planner.launchers.common import resolve_saved

        saved, (model, hw, gpus, global_batch, seq_len, precision, domain_fill) = resolve_saved(
            from_file, rank, model=model, hw=hw, gpus=gpus, global_batch=global_batch, seq_len=seq_len,
            precision=precision, domain_fill=domain_fill)
        p = saved.plan
    else:
        p = Plan.parse(plan)
    if m is None:
        if model is None:
            raise PlannerError("explain needs --model.", hint="Name a catalog model, a model YAML or a config.json.")
        m = load_model(model)
        if hw is None:
            raise PlannerError("explain needs --hw.", hint="Name a catalog system (see 'planner hw') or a hardware YAML.")
        h = load_hardware(hw)
        j = resolve_job(m, gpus=gpus, global_batch=global_batch, seq_len=seq_len, precision=precision, job_file=job,
                        domain_fill=domain_fill, memory_margin_gib=memory_margin)
    from planner.options import check_margin

    check_margin(j, h)
    assumptions = build_assumptions(routing_imbalance, implementation, calibration)
    top = _top_of(against) if against is not None else None
    if plot is not None:
        from planner.files import check_output

        check_output(plot, "plot", suffixes=(".png",))  # before the work, and never over an input
    setup = resolve_setup(m, h, j, p, assumptions)
    costs = evaluate_batch(batch_of_setup(setup))
    mem = memory_report(setup, costs)
    result = plan_evaluation(setup, costs=costs, memory=mem)
    if unknown_flags:
        result["unknown_megatron_flags"] = unknown_flags
    if top is not None:
        result["versus_top_plan"] = _versus(result, top)
    if plot is not None:
        from planner.report.plots import plot_memory_timeline

        plot_memory_timeline(setup, mem, plot)
        result["plot"] = str(plot)
    if json:
        print_json({**context_json(m, h, j, assumptions), **result})
    else:
        from planner.report.tables import print_explain

        print_explain(setup, mem, result, unknown_flags=unknown_flags)
    if not result["memory"]["fits"]:
        raise typer.Exit(1)  # does not fit: the report is printed, the status says so


def _top_of(path: Path) -> dict:
    """The top plan of a saved search, its predictions checked (finite, positive)."""
    from planner.launchers.common import read_saved_search

    saved = read_saved_search(path)
    top = saved.plans[0]
    if top.time is None or top.time.step_time_s is None or top.time.tokens_per_s_per_gpu is None:
        from planner.errors import PlannerError

        raise PlannerError(f"Plan 1 of '{path}' has no predicted step time to compare with.",
                           hint="Give a file from 'planner search --save'.")
    return {"plan": top.plan_text, "step_time_s": top.time.step_time_s,
            "tokens_per_s_per_gpu": top.time.tokens_per_s_per_gpu}


def _versus(result: dict, top: dict) -> dict:
    """This plan's predicted speed against the top plan of a saved search."""
    mine, theirs = result["time"]["step_time_s"], top["step_time_s"]
    return {
        "top_plan": top["plan"],
        "top_step_time_s": theirs,
        "step_time_s": mine,
        "slower_by": round(mine / theirs - 1, 6),
        "top_tokens_per_s_per_gpu": top["tokens_per_s_per_gpu"],
    }
