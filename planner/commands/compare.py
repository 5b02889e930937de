"""`planner compare`: the best plan for one job on several systems, side by side, with what changed
and why; `--sweep-gpus` for how it changes with scale. `planner results` regenerates results/."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli import app
from planner.options import (
    CalibrationOpt, DomainFillOpt, FixOpt, GlobalBatchOpt, ImplOpt, JobArgs, JobFileOpt, JsonOpt, MarkdownOpt, MaxOpt,
    MemoryMarginOpt, ModelOpt, MomentsOpt, PrecisionOpt, RoutingOpt, SearchTargetOpt, SeqLenOpt, build_assumptions,
    SetOpt, SoftwareOpt, TorchtitanConfigOpt, print_json, resolve_model, resolve_specs, search_options,
)

DEFAULT_HW = ("h100", "h200", "b200", "gb200-nvl72", "gb300-nvl72")


@app.command("compare")
def compare_cmd(
    model: ModelOpt,
    hw: Annotated[list[str] | None, typer.Option(
        "--hw", help="A hardware to compare, NAME or NAME:COUNT with its own GPU count; repeat it "
        "(--hw h100:512 --hw nvl72:128). The first is the baseline the others are explained against. "
        f"Default: {', '.join(DEFAULT_HW)}.")] = None,
    gpus: Annotated[list[int] | None, typer.Option(
        "--gpus", "-n", help="GPUs in the job of every system without a count in --hw (default: the model's "
        "reference job). Give it once; per-system counts go in --hw NAME:COUNT.")] = None,
    global_batch: GlobalBatchOpt = None,
    seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None,
    job: JobFileOpt = None,
    domain_fill: DomainFillOpt = None,
    memory_margin: MemoryMarginOpt = None,
    model_set: SetOpt = None,
    tokens: Annotated[float | None, typer.Option(
        "--tokens", help="Token budget for GPU-hours and days to train, e.g. 15e12 (default: the model's "
        "published pre-training budget).")] = None,
    price: Annotated[list[str] | None, typer.Option(
        "--price", help="USD per GPU-hour of a compared system, NAME=USD (repeat it); overrides the bundled "
        "on-demand list-price estimates (hw_specs/prices/on_demand.yaml).")] = None,
    sweep_gpus: Annotated[str | None, typer.Option(
        "--sweep-gpus", help="GPU counts, comma-separated (e.g. 256,1024,4096,16384): the best plan per hardware "
        "at each scale. Without --global-batch the batch is the reference job's, raised to a power of two with "
        "at least 1,024 tokens per GPU where the count needs more (Llama 3's 16K-GPU run).")] = None,
    moments: MomentsOpt = "fp32,bf16",
    target: SearchTargetOpt = "megatron",
    torchtitan_config: TorchtitanConfigOpt = None,
    software: SoftwareOpt = None,
    fix: FixOpt = None,
    max_: MaxOpt = None,
    top: Annotated[int, typer.Option("--top", "-k", min=1, max=100, help="Plans ranked per hardware (the top-K usage counts these).")] = 10,
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.1, help="Seconds the solver may take per hardware.")] = 120.0,
    per_stage: Annotated[bool, typer.Option("--per-stage/--no-per-stage", help="Refine pipeline layouts stage by stage (the search's default; deterministic). --no-per-stage keeps the uniform and standard uneven layouts.")] = True,
    routing_imbalance: RoutingOpt = None,
    implementation: ImplOpt = "te",
    calibration: CalibrationOpt = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG: throughput, step-time breakdown and memory per hardware (with --sweep-gpus: throughput and degrees against the GPU count).")] = None,
    timings: Annotated[bool, typer.Option("--timings", help="Include wall-clock search timings (JSON output is otherwise byte-stable).")] = False,
    jobs: Annotated[int | None, typer.Option("--jobs", min=1, max=256, help="Systems (with --sweep-gpus: searches) searched side by side, one process each; the output is the same for any count. Default: one per search, at most one per CPU. Each process holds its own search (up to a few GB on the largest MoE jobs): --jobs 1 keeps one.")] = None,
    json: JsonOpt = False,
    markdown: MarkdownOpt = False,
) -> None:
    """Compare the best plan of one job across hardware (Hopper vs Blackwell): speed, memory, cost to train, and why the plans differ."""
    from planner.inputs import finite_option

    finite_option("--time-limit", time_limit, low=0.1, high=86400.0, unit="seconds")
    if tokens is not None:
        finite_option("--tokens", tokens, low=1.0, high=1e18, unit="tokens",
                      negative="it must be positive (a token budget counts the tokens to train on)")
    one_gpus = _one_gpus(gpus)
    args = JobArgs(one_gpus, global_batch, seq_len, precision, job, domain_fill, memory_margin)
    m, hws, system_jobs = _systems(resolve_model(model, model_set), hw, args, sweep=sweep_gpus is not None)
    counts = parse_gpu_list(sweep_gpus) if sweep_gpus else None
    from planner.specs.prices import prices_for

    prices = prices_for([h.name for h in hws], price)
    assumptions = build_assumptions(routing_imbalance, implementation, calibration)
    if plot is not None:
        from planner.files import check_output

        check_output(plot, "plot", suffixes=(".png",))  # before the searches run
    import dataclasses

    from planner.launchers.registry import resolve_software

    profile, origin = resolve_software(software, target)
    # Ranked as `planner search` ranks (ties and families on): each system's best plan is the first plan its
    # search shows.
    opts = dataclasses.replace(search_options(target, top, time_limit, fix, max_, moments, per_stage,
                                              torchtitan_config=torchtitan_config), software=profile, ties=True,
                               families=True)
    out = _run(m, hws, system_jobs, opts, assumptions, counts, tokens, global_batch, plot, prices, workers=jobs)
    if software is not None:  # the default release offers every lever the search ranks: its reports stay as they were
        from planner.launchers.common import software_record

        out["software"] = software_record(profile, origin)
    _output(out, counts, plot, timings, json, markdown)


def _one_gpus(gpus: list[int] | None) -> int | None:
    """The one --gpus for every system; repeating it is refused (typer would keep the last one
    silently, and 'compare --gpus 512 --gpus 128' reads as a count per system)."""
    from planner.errors import PlannerError
    from planner.specs.job_input import count_option

    if not gpus:
        return None
    if len(gpus) > 1:
        raise PlannerError(
            f"--gpus is given {len(gpus)} times ({', '.join(map(str, gpus))}); compare takes one --gpus for every "
            "system. Give each system its own count as --hw NAME:COUNT, e.g. --hw h100:512 --hw nvl72:128.")
    return count_option("--gpus", gpus[0])


def parse_hw(text: str) -> tuple[str, int | None]:
    """'--hw NAME' or '--hw NAME:COUNT' -> (NAME, COUNT or None). A hardware YAML path that exists
    is a name even if it holds ':'."""
    from planner.errors import PlannerError
    from planner.specs.job_input import count_option

    name, sep, count = text.rpartition(":")
    if not sep or Path(text).exists():
        return text, None
    c = count.strip().replace("_", "")
    if not name or not c.isascii() or not c.isdigit() or len(c) > 12:
        raise PlannerError(f"--hw '{text}': '{count}' is not a positive GPU count.",
                           hint="Give NAME or NAME:COUNT, e.g. --hw h100:512 --hw nvl72:128.")
    return name, count_option("--gpus", int(c))


def _systems(model, hw: list[str] | None, args: JobArgs, *, sweep: bool = False):
    """(model, hardware list, one job per hardware): each --hw once, the job checked against every
    system at its GPU count (--hw NAME:COUNT, else --gpus, else the reference job's)."""
    import dataclasses

    from planner.errors import PlannerError
    from planner.specs.catalog import load_hardware

    names = list(hw) if hw else list(DEFAULT_HW)
    if len(names) > 32:
        raise PlannerError(f"--hw is given {len(names)} times; compare takes at most 32 systems (each is a search).")
    parsed = [parse_hw(n) for n in names]
    if sweep and any(c is not None for _, c in parsed):
        raise PlannerError("--sweep-gpus sets the GPU counts of every system; --hw NAME:COUNT gives one.",
                           hint="Give --hw NAME without a count with --sweep-gpus.")
    hws = [load_hardware(n) for n, _ in parsed]
    if len({h.name for h in hws}) < len(hws):
        twice = next(h.name for i, h in enumerate(hws) if h.name in {x.name for x in hws[:i]})
        raise PlannerError(f"--hw names {twice} twice.", hint="Give each hardware once.")
    m = None
    jobs = []
    for h, (_, count) in zip(hws, parsed):
        a = args if count is None else dataclasses.replace(args, gpus=count)
        m, _, j = resolve_specs(m or model, h, a)
        jobs.append(j)
    return m, hws, jobs


def _run(m, hws, jobs, opts, assumptions, counts, tokens, global_batch, plot, prices=None,
         workers: int | None = None) -> dict:
    from rich.console import Console

    from planner.report.compare import compare_report, sweep_report

    err = Console(stderr=True, highlight=False)
    with err.status("comparing", spinner="dots") as status:
        if counts:
            out = sweep_report(m, hws, jobs[0], counts, opts, assumptions, user_batch=global_batch, tokens=tokens,
                               progress=lambda msg: status.update(msg), workers=workers)
        else:
            out = compare_report(m, hws, jobs, opts, assumptions, tokens=tokens, prices=prices,
                                 progress=lambda msg: status.update(msg), workers=workers)
        if plot is not None:
            status.update("plotting")
            from planner.report.plots import plot_compare, plot_sweep

            (plot_sweep if counts else plot_compare)(out, plot)
    return out


def _output(out: dict, counts, plot, timings: bool, json: bool, markdown: bool = False) -> None:
    from planner.report.compare import print_compare, print_sweep, strip_private, timings_of

    clean = strip_private(out)
    if timings and not counts:
        clean["timings"] = timings_of(out)
    if plot is not None:
        clean["plot"] = str(plot)
    if json:
        print_json(clean)
        return
    if markdown:
        from planner.report.compare import markdown_compare, markdown_sweep

        names = " vs ".join((h["hardware"] if "hardware" in h else h)["name"] for h in clean["hardware"])
        title = f"{clean['model']['name']}: {names}" + (" against the GPU count" if counts else "")
        typer.echo((markdown_sweep if counts else markdown_compare)(clean, title=title,
                                                                    plot_name=str(plot) if plot else None))
        return
    (print_sweep if counts else print_compare)(clean, plot=plot)


def parse_gpu_list(text: str) -> list[int]:
    from planner.errors import PlannerError

    out = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not part:
            continue
        if not part.isascii() or not part.isdigit() or len(part) > 12 or int(part) < 1:
            raise PlannerError(f"--sweep-gpus '{text}': '{part}' is not a positive GPU count.",
                               hint="Give counts separated by commas, e.g. --sweep-gpus 256,1024,4096.")
        from planner.specs.job_input import count_option

        out.append(count_option("--gpus", int(part)))
    if not out:
        raise PlannerError("--sweep-gpus lists no GPU count.", hint="Give counts separated by commas, e.g. 256,1024.")
    if len(set(out)) != len(out):
        raise PlannerError(f"--sweep-gpus '{text}' lists a count twice.")
    if len(out) > 64:
        raise PlannerError(f"--sweep-gpus lists {len(out)} GPU counts; planner sweeps at most 64 (each is a search).")
    return sorted(out)


@app.command("results")
def results_cmd(
    out: Annotated[Path, typer.Option("--out", help="Folder to write the reports into.")] = Path("results"),
    check: Annotated[bool, typer.Option("--check", help="Regenerate into a temporary folder and compare the Markdown and JSON with --out byte for byte; exit 1 on any difference.")] = False,
    only: Annotated[list[str] | None, typer.Option("--only", help="Only this report (repeatable), e.g. qwen3-235b-a22b-256 or seed-claims.")] = None,
) -> None:
    """Regenerate the reports of results/ (Hopper vs Blackwell per model, seed claims, the published-runs validation), or --check them."""
    from planner.errors import PlannerError
    from planner.report.results import main as results_main

    from planner.files import prepare_folder

    if not check:
        prepare_folder(out, "reports")  # a clean error before hours of searches, not after
    elif not out.is_dir():
        raise PlannerError(f"results --check compares with the reports in '{out}', which is not a folder.",
                           hint="Give the folder of the committed reports (default: results).")
    args = ["--out", str(out)] + (["--check"] if check else [])
    for o in only or []:
        args += ["--only", o]
    code = results_main(args)
    if code:
        raise typer.Exit(code)
