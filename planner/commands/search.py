"""`planner search`: rank the feasible plans for a model on a cluster (CP-SAT over the cost
tables; `--solver exhaustive` enumerates them instead)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli import app
from planner.options import (
    CalibrationOpt, DomainFillOpt, FixOpt, GlobalBatchOpt, GpusOpt, HwOpt, ImplOpt, JobArgs, JobFileOpt, JsonOpt,
    MarkdownOpt, MaxOpt, MemoryMarginOpt, ModelOpt, MomentsOpt, PrecisionOpt, RoutingOpt, SearchTargetOpt, SeqLenOpt,
    SetOpt, SoftwareOpt, TorchtitanConfigOpt, build_assumptions, print_json, resolve_specs, search_options,
)


@app.command("search")
def search_cmd(
    model: ModelOpt,
    hw: HwOpt,
    gpus: GpusOpt = None,
    global_batch: GlobalBatchOpt = None,
    seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None,
    job: JobFileOpt = None,
    domain_fill: DomainFillOpt = None,
    memory_margin: MemoryMarginOpt = None,
    model_set: SetOpt = None,
    moments: MomentsOpt = "fp32,bf16",
    target: SearchTargetOpt = "megatron",
    torchtitan_config: TorchtitanConfigOpt = None,
    software: SoftwareOpt = None,
    fix: FixOpt = None,
    max_: MaxOpt = None,
    top: Annotated[int, typer.Option("--top", "-k", min=1, max=100, help="How many plans (families, unless --all-variants) to show.")] = 10,
    solver: Annotated[str, typer.Option("--solver", help="cpsat (default) or exhaustive (the enumeration oracle).")] = "cpsat",
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.1, help="Seconds the solver may take.")] = 60.0,
    per_stage: Annotated[bool, typer.Option("--per-stage/--no-per-stage", help="Refine pipeline layouts stage by stage where a bound says it can win (deterministic; FEASIBLE when a refinement enters the ranking). --no-per-stage keeps the uniform and standard uneven layouts.")] = True,
    sensitivity: Annotated[bool, typer.Option("--sensitivity", help="Re-rank the top plans under perturbed assumptions.")] = False,
    routing_imbalance: RoutingOpt = None,
    implementation: ImplOpt = "te",
    calibration: CalibrationOpt = None,
    save: Annotated[Path | None, typer.Option("--save", help="Write the ranked plans as JSON (for explain and export).")] = None,
    timings: Annotated[bool, typer.Option("--timings", help="Include wall-clock timings (JSON output is otherwise byte-stable).")] = False,
    json: JsonOpt = False,
    markdown: MarkdownOpt = False,
    all_variants: Annotated[bool, typer.Option("--all-variants", help="Show every ranked plan, not the best of each family (degrees, sharding, precision; VPP, layout, micro-batch, recompute and offload vary inside one).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print the solver's full status (what it proved over which space), not its one-line summary.")] = False,
) -> None:
    """Rank feasible plans: parallel degrees, layout, recompute, offload, precision, sharding."""
    from planner.errors import PlannerError
    from planner.inputs import finite_option
    from planner.search.driver import target_assumptions

    finite_option("--time-limit", time_limit, low=0.1, high=86400.0, unit="seconds")
    if solver not in ("cpsat", "exhaustive"):
        raise PlannerError(f"Unknown --solver '{solver}'.", hint="Use --solver cpsat or --solver exhaustive.")
    m, h, j = resolve_specs(model, hw, JobArgs(gpus, global_batch, seq_len, precision, job, domain_fill, memory_margin),
                            model_set)
    assumptions = build_assumptions(routing_imbalance, implementation, calibration)
    if save is not None:
        from planner.files import check_output

        check_output(save, "saved search")  # before the search runs, and never over a file it read
    from dataclasses import replace

    from planner.launchers.registry import resolve_software

    profile, origin = resolve_software(software, target)
    opts = search_options(target, top, time_limit, fix, max_, moments, per_stage, solver, torchtitan_config)
    # Ties are ties (planner.search.ties) and families are shown unless every variant is asked for.
    opts = replace(opts, ties=True, families=not all_variants, software=profile)
    assumptions = target_assumptions(assumptions, opts.target)
    result, sens = _run(m, h, j, opts, assumptions, sensitivity)
    _output(m, h, j, opts, assumptions, result, sens, save=save, timings=timings, json=json, markdown=markdown,
            given=model, verbose=verbose, software_origin=origin)


def _run(m, h, j, opts, assumptions, sensitivity: bool):
    """The search (and, when asked, its sensitivity report), with a progress line on stderr."""
    from rich.console import Console

    from planner.search.driver import run_search

    err = Console(stderr=True, highlight=False)
    with err.status("searching", spinner="dots") as status:
        result = run_search(m, h, j, opts, assumptions=assumptions, progress=lambda msg: status.update(msg))
        sens = None
        if sensitivity:
            from planner.search.sensitivity import sensitivity_report

            status.update("sensitivity: re-ranking the top plans under perturbed assumptions")
            sens = sensitivity_report(result, assumptions)
    return result, sens


def launchers_of(setup, torchtitan_config: str | None = None) -> dict[str, list[str]]:
    """Under --target any (the shared rules only), which launcher's export takes a plan: per
    launcher, the rules that would refuse it (empty: the export takes it), so that no plan is
    proposed for torchtitan or Megatron-LM that its export then refuses unsaid."""
    from planner.launchers.registry import verdicts

    return {t: [v.rule for v in found] for t, found in verdicts(setup, torchtitan_config).items()}


def _output(m, h, j, opts, assumptions, result, sens, *, save, timings: bool, json: bool, markdown: bool = False,
            given=None, verbose: bool = False, software_origin: str | None = None) -> None:
    from planner.cost.evaluate import context_json
    from planner.launchers.common import model_record, software_record
    from planner.validate.bands import attach_band

    out = {**context_json(m, h, j, assumptions), "target": opts.target, "solver": result.solver,
           "plans": [attach_band({"rank": r.rank, **r.evaluation, "time": dict(r.evaluation["time"])}, r.setup)
                     for r in result.plans]}
    # The model the plans were ranked for (spec, and the file it came from with its hash): what
    # 'export --from' exports, whatever the catalog or that file holds later.
    out["model"] = {**out["model"], **model_record(m, given if given is not None else m)}
    if opts.target == "any":
        for entry, r in zip(out["plans"], result.plans):
            entry["launchers"] = launchers_of(r.setup, opts.torchtitan_config)
    if opts.software is not None:
        # The release the plans were ranked for: explain and export --from take it from here.
        out["software"] = software_record(opts.software, software_origin)
    if sens is not None:
        out["sensitivity"] = sens
    if timings:
        out["timings"] = result.timings
    if save is not None:
        from planner.files import write_text
        from planner.options import json_text

        write_text(save, json_text(out) + "\n", "saved search")
    if json:
        print_json(out)
        return
    if markdown:
        from planner.report.markdown import search_markdown

        typer.echo(search_markdown(out))
        return
    from planner.report.tables import print_search

    print_search(result, out, saved=save, verbose=verbose)
