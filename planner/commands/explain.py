"""`planner explain`: one plan in depth: memory per stage and over time, its peak moment, and
(once modeled) step time, throughput and the bottleneck."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli import app
from planner.commands.export import (
    BridgeFileOpt, FromOpt, HwOptional, LaunchFileOpt, LaunchFormatOpt, ModelOptional, PlanOptional, ScriptArgsOpt,
    ScriptEnvOpt, TorchtitanFileOpt,
)
from planner.options import (
    CalibrationOpt, DomainFillOpt, ExpandableOpt, GlobalBatchOpt, GpusOpt, ImplOpt, JobArgs, JobFileOpt, JsonOpt, MarkdownOpt, MemoryMarginOpt,
    PrecisionOpt, RoutingOpt, SeqLenOpt, SetOpt, SoftwareOpt, build_assumptions, launch_assumptions, plan_source, print_json,
    rule_failures_exit,
)


@app.command("explain")
def explain_cmd(
    model: ModelOptional = None,
    hw: HwOptional = None,
    plan: PlanOptional = None,
    from_file: FromOpt = None,
    rank: Annotated[int, typer.Option("--rank", "-k", help="Which plan of --from, 1-based.")] = 1,
    gpus: GpusOpt = None,
    global_batch: GlobalBatchOpt = None,
    seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None,
    job: JobFileOpt = None,
    domain_fill: DomainFillOpt = None,
    memory_margin: MemoryMarginOpt = None,
    model_set: SetOpt = None,
    routing_imbalance: RoutingOpt = None,
    implementation: ImplOpt = "te",
    calibration: CalibrationOpt = None,
    expandable_segments: ExpandableOpt = None,
    software: SoftwareOpt = None,
    launch: LaunchFileOpt = None,
    launch_format: LaunchFormatOpt = None,
    megatron_args: Annotated[Path | None, typer.Option("--megatron-args", help="Read the plan (and job) from a Megatron-LM launch script or argument file.")] = None,
    bridge: BridgeFileOpt = None,
    torchtitan: TorchtitanFileOpt = None,
    script_env: ScriptEnvOpt = None,
    script_args: ScriptArgsOpt = None,
    against: Annotated[Path | None, typer.Option("--against", help="A 'planner search --save' file: compare this plan with its top plan.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the worst stage's memory over one step as a PNG.")] = None,
    json: JsonOpt = False,
    markdown: MarkdownOpt = False,
) -> None:
    """Explain one plan: per-stage memory by class, the peak moment, headroom; time and bottleneck.
    Exit status 1 when the plan breaks a rule or does not fit in memory."""
    from planner.cost.setup import resolve_setup

    with rule_failures_exit(1):
        src = plan_source(plan=plan, from_file=from_file, rank=rank, megatron_args=megatron_args, script_env=script_env,
                          script_args=script_args, model=model, hw=hw, command="explain", bridge=bridge, torchtitan=torchtitan,
                          launch=launch, launch_format=launch_format,
                          args=JobArgs(gpus, global_batch, seq_len, precision, job, domain_fill, memory_margin),
                          model_set=model_set)
        assumptions = launch_assumptions(src, build_assumptions(routing_imbalance, implementation, calibration), from_file)
        if expandable_segments is not None:  # the command line over a script's or saved search's setting
            assumptions = assumptions.model_copy(update={"expandable_segments": expandable_segments})
        software_rec = _software(src, software)
        top = _top_of(against) if against is not None else None
        if plot is not None:
            from planner.files import check_output

            check_output(plot, "plot", suffixes=(".png",))  # before the work, and never over an input
        setup = resolve_setup(src.model, src.hw, src.job, src.plan, assumptions)
    result, mem = _evaluate(setup, src, top, plot)
    from planner.search.risks import plan_risks

    # The documented run-time failures this plan's combination is known for (software/risks/runtime.yaml),
    # for the launcher it was read from, or for every launcher when it was given as a plan.
    from planner.launchers import registry

    target = src.launch.launcher.rules_of if src.launch is not None else registry.ANY
    result["risks"] = [r.to_json() for r in plan_risks(src.model, setup.plan, target)]
    if software_rec is not None:
        result["software"] = software_rec
    if json:
        from planner.cost.evaluate import context_json

        print_json({**context_json(src.model, src.hw, src.job, assumptions), **result})
    elif markdown:
        from planner.cost.evaluate import context_json
        from planner.report.markdown import explain_markdown

        typer.echo(explain_markdown(context_json(src.model, src.hw, src.job, assumptions), result))
    else:
        from planner.report.tables import print_explain

        print_explain(setup, mem, result, unknown_flags=result.get("unknown_megatron_flags", []))
    if not result["memory"]["fits"]:
        raise typer.Exit(1)  # does not fit: the report is printed, the status says so


def _software(src, given: str | None) -> dict | None:
    """The release explain prices the plan for, when one is named (--software, the saved search's,
    or a read launch's): a plan lever it lacks is refused as check refuses it (exit 1). A plan
    string without --software names none, and explain prices it as before."""
    read = src.launch is not None
    saved = src.saved.software if src.saved is not None else None
    if given is None and saved is None and not read:
        return None
    from planner.launchers.registry import launch_choice
    from planner.rules import violations_error
    from planner.specs.software import software_violations

    target = src.launch.launcher.rules_of if src.launch is not None else "megatron"
    if not read:
        # A plan from a saved search (or a plan string with --software) is checked for the launcher
        # of the release it names: a torchtitan search's plans are torchtitan plans.
        from planner.specs.catalog import load_software

        target = load_software(given if given is not None else saved).launcher
    choice = launch_choice(src, target, given)
    if choice.profile is None:
        return None
    found = software_violations(src.plan, choice.profile) + choice.violations()
    if found:
        raise violations_error(found, target)
    return choice.record()


def _evaluate(setup, src, top, plot) -> tuple[dict, object]:
    """The plan's result (one composition of its costs), with the comparison and the plot."""
    from planner.cost.compose import costs_of
    from planner.cost.evaluate import plan_evaluation
    from planner.cost.memory import memory_report

    costs = costs_of(setup)
    mem = memory_report(setup, costs)
    result = plan_evaluation(setup, costs=costs, memory=mem)
    from planner.cost.evaluate import lever_effects

    result["levers"] = lever_effects(setup)
    from planner.validate.bands import attach_band

    attach_band(result, setup)
    mem.add_reserved_json(result["memory"])
    reads = src.launch.launcher.reads if src.launch is not None else None
    if reads is not None and reads.explain is not None:
        result.update(reads.explain(src.launch.job))
    if top is not None:
        result["versus_top_plan"] = _versus(result, top)
    if plot is not None:
        from planner.report.plots import plot_memory_timeline

        plot_memory_timeline(setup, mem, plot)
        result["plot"] = str(plot)
    return result, mem


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
