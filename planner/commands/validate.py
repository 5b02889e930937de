"""`planner validate RUNS.yaml`: planner's predictions against measured runs (yours or the bundled
published ones), signed error per run and per class, calibration and validation subsets apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli import app
from planner.options import CalibrationOpt, JsonOpt, SoftwareOpt, print_json
from planner.errors import excerpt

COMMAND = "planner validate tests/data/published_runs.yaml --markdown"
"""What the bundled report says generated it (`planner results` writes the same Markdown)."""
SEARCH_COMMAND = "planner validate tests/data/published_runs.yaml --search --markdown"
"""What the bundled search-mode report says generated it (`planner results --only published-runs-search`)."""


SHOWN_REASONS = 3
"""Runs whose reasons the error names when none could be evaluated (the rest are counted)."""


def no_run_evaluated(results, path) -> str:
    """The one paragraph for a runs file none of whose runs planner could evaluate."""
    shown = "; ".join(f"'{excerpt(r.name)}': {excerpt((r.reason or 'no reason given').rstrip('. '), 160)}"
                      for r in results[:SHOWN_REASONS])
    more = len(results) - SHOWN_REASONS
    rest = f"; and {more} more" if more > 0 else ""
    return (f"No run of '{path}' could be evaluated ({len(results)} run(s)), so there is nothing to compare: "
            f"{shown}{rest}.")


@app.command("validate")
def validate_cmd(
    runs: Annotated[Path, typer.Argument(help="A runs file (YAML, top key 'runs'; the schema of tests/data/published_runs.yaml).")],
    only: Annotated[list[str] | None, typer.Option("--only", help="Only this run (repeatable).")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write predicted against measured tokens/s per GPU as a PNG.")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the report as Markdown.")] = False,
    calibration: CalibrationOpt = None,
    software: SoftwareOpt = None,
    search: Annotated[bool, typer.Option("--search", help="Search each run as a new user would: its published degrees (tp, cp, pp, vpp, ep, etp, layout) pinned with --fix, every other lever left to the search (top 1, the run's software release); compare the best plan with the measured throughput and with the recipe's own plan. About 10 minutes on the bundled runs on one core (--jobs).")] = False,
    jobs: Annotated[int, typer.Option("--jobs", min=1, max=256, help="With --search: search this many runs side by side, one process each (the report is the same; each process needs up to a few GB for the largest MoE searches).")] = 1,
    json: JsonOpt = False,
) -> None:
    """Predict every run of a runs file and compare with what was measured: tokens/s and model TFLOP/s
    per GPU, step time and peak memory where published; signed error per run (predicted / measured - 1)
    and median, median |error| and worst per class (MoE/dense x Hopper/Blackwell x precision), the
    calibration and validation subsets apart; and, for jobs that ran several plans, how many pairs
    planner orders as measured and Kendall's tau-b. Runs planner cannot express get a line saying why.
    With --search, each run's best plan with its published degrees pinned instead (per run, per class,
    the runs beyond +-25 % with the mechanism suspected, and where the search loses to the recipe, why)."""
    from planner.errors import PlannerError
    from planner.validate import _label
    from planner.validate.evaluate import evaluate_runs
    from planner.validate.report import build, markdown as render_markdown, plot as render_plot, text_table
    from planner.validate.runs import load_runs

    cal = None
    if calibration is not None:
        from planner.specs.calibration import load_calibration

        cal = load_calibration(str(calibration))
    specs = load_runs(runs)
    if only:
        unknown = sorted(set(only) - {r.name for r in specs})
        if unknown:
            raise PlannerError(f"No run named {', '.join(unknown)} in '{runs}'.",
                               hint="Give names as the runs file spells them (see 'name:').")
        specs = [r for r in specs if r.name in set(only)]
    if software is not None:
        from planner.specs.catalog import load_software

        load_software(software)  # an unknown name fails here, once, not per run
    results = evaluate_runs(specs, cal, software)
    if not any(r.evaluated for r in results):
        # A report of only "not evaluated" lines compares nothing: exiting 0 would let a script
        # (or CI) take a runs file planner cannot read for a passed validation.
        raise PlannerError(no_run_evaluated(results, runs))
    if search:
        if plot is not None:
            raise PlannerError("--plot draws the recipes' predictions; it does not combine with --search.",
                               hint="Run 'planner validate' without --search for the figure.")
        _search_report(results, runs, calibration, json=json, markdown=markdown, jobs=jobs)
        return
    report = build(results, _label(runs))
    if plot is not None:
        render_plot(report, plot)
        report["plot"] = str(plot)
    if json:
        print_json(report)
    elif markdown:
        typer.echo(render_markdown(report, COMMAND))
    else:
        typer.echo(text_table(report))


def _search_report(results, runs: Path, calibration: Path | None, *, json: bool, markdown: bool, jobs: int = 1) -> None:
    """validate --search: every evaluated run searched with its degrees pinned, a progress line on stderr."""
    from rich.console import Console

    from planner.validate import _label
    from planner.validate.searched import build_search, search_markdown, search_runs, search_text

    err = Console(stderr=True, highlight=False)
    with err.status("searching", spinner="dots") as status:
        rows = search_runs(results, None if calibration is None else str(calibration),
                           progress=lambda msg: status.update(msg), jobs=jobs)
    report = build_search(rows, _label(runs))
    if json:
        print_json(report)
    elif markdown:
        typer.echo(search_markdown(report, SEARCH_COMMAND))
    else:
        typer.echo(search_text(report))
