"""Generate results/: Hopper against Blackwell per model at two cluster sizes, a DeepSeek-V3 sweep
over GPU counts, and the seed article's claims checked with planner.

    PYTHONPATH=. python -m planner.report.results            # write results/ (a few minutes)
    PYTHONPATH=. python -m planner.report.results --check    # regenerate into a temporary folder and
                                                             # compare Markdown and JSON byte for byte
    PYTHONPATH=. python -m planner.report.results --only qwen3-235b-a22b-256 --check

(`planner results` runs the same.) Every number comes from planner's search and cost model; the
Markdown is rendered from the JSON written beside it, and neither holds timings, so the same code
and catalogs give the same bytes. The PNG figures are regenerated too but not compared (matplotlib
versions render differently).

Settings shared by every report: the Megatron launcher (its start-up rules), BF16 compute
(Hopper's and Blackwell's FP8 recipes differ; BF16 keeps MFU comparable), FP32 Adam moments,
Transformer Engine with flash attention, balanced routing, the model's reference job (sequence
length and global batch) at each GPU count, and the top 10 plans per hardware.
"""

from __future__ import annotations

import os

import argparse
import difflib
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from planner.commands.validate import COMMAND as VALIDATE_COMMAND
from planner.commands.validate import SEARCH_COMMAND
from planner.cost.setup import Assumptions
from planner.files import MAX_SAVED_BYTES, prepare_folder, read_text, write_text
from planner.options import _json_default
from planner.report import readme_figures
from planner.report.compare import compare_report as run_compare
from planner.report.compare import markdown_compare, markdown_sweep, markdown_table, strip_private
from planner.report.compare import sweep_report as run_sweep
from planner.report.plots import plot_compare, plot_sweep
from planner.search.compare import sweep_global_batch
from planner.search.driver import Options
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job_input import resolve_job
from planner.specs.prices import prices_for
from planner.validate import PUBLISHED_RUNS as RUNS_FILE
from planner.validate import search_file, validate_file
from planner.validate.bands import bands_from_report
from planner.validate.report import markdown, plot
from planner.validate.searched import search_markdown

HOPPER = ("h100", "h200")
BLACKWELL = ("b200", "gb200-nvl72", "gb300-nvl72")
TOP = 10
# Generous: the search's time limits are wall-clock, so a limit that binds on a slow machine would
# change the answer. None of these searches comes near it.
TIME_LIMIT_S = 600.0
# The search's per-stage layout refinement is deterministic (one CP-SAT worker, fixed seed,
# canonical tie-break), so the reports include its uneven layouts and stay byte-stable.
PER_STAGE = True


@dataclass(frozen=True)
class Report:
    name: str
    model: str
    kind: str  # "compare" or "sweep"
    hardware: tuple[str, ...]
    gpus: tuple[int, ...]
    note: str = ""


REPORTS: tuple[Report, ...] = (
    # DeepSeek-V3 was trained on H800s (reduced NVLink bandwidth): include it.
    Report("deepseek-v3-256", "deepseek-v3", "compare", ("h100", "h800", "h200", *BLACKWELL), (256,),
           "the reference job's size (Megatron-Core MoE report, Table 17)"),
    Report("deepseek-v3-1024", "deepseek-v3", "compare", ("h100", "h800", "h200", *BLACKWELL), (1024,)),
    Report("kimi-k2-256", "kimi-k2", "compare", (*HOPPER, *BLACKWELL), (256,), "the reference job's size"),
    Report("kimi-k2-1024", "kimi-k2", "compare", (*HOPPER, *BLACKWELL), (1024,)),
    Report("qwen3-235b-a22b-256", "qwen3-235b-a22b", "compare", (*HOPPER, *BLACKWELL), (256,), "the reference job's size"),
    Report("qwen3-235b-a22b-1024", "qwen3-235b-a22b", "compare", (*HOPPER, *BLACKWELL), (1024,)),
    Report("llama3.1-405b-2048", "llama3.1-405b", "compare", (*HOPPER, *BLACKWELL), (2048,)),
    Report("llama3.1-405b-16384", "llama3.1-405b", "compare", (*HOPPER, *BLACKWELL), (16384,),
           "the Llama 3 paper's run (16,384 H100s)"),
    Report("deepseek-v3-sweep", "deepseek-v3", "sweep", ("h100", *BLACKWELL), (256, 1024, 4096, 16384)),
)
SEED_CLAIMS = "seed-claims"
README = "README"
FIGURES = "readme-figures"
"""The figures the top-level README quotes (planner.report.readme_figures): readme-figures.md."""
PUBLISHED_RUNS = "published-runs"
"""planner validate on the bundled published runs: validation/published-runs.{md,json,png}."""
PUBLISHED_RUNS_SEARCH = "published-runs-search"
"""planner validate --search on the bundled published runs (published degrees pinned, the rest
searched): validation/published-runs-search.{md,json}."""
ERROR_BANDS = "error-bands"
"""The validation error band per class, from the published-runs report: validation/error-bands.json."""
COMMAND = "PYTHONPATH=. python -m planner.report.results"


def report_names() -> list[str]:
    return [r.name for r in REPORTS] + [SEED_CLAIMS, PUBLISHED_RUNS, PUBLISHED_RUNS_SEARCH, README, FIGURES]


# ---------------------------------------------------------------------------------------------
# Building one report.
# ---------------------------------------------------------------------------------------------
def _options():
    # As `planner compare` and `planner search` rank (ties and families on): each system's best plan is the
    # first plan its search shows.
    return Options(target="megatron", top=TOP, time_limit_s=TIME_LIMIT_S, per_stage=PER_STAGE, ties=True,
                   families=True)


def report_job(model, gpus: int):
    """The model's reference job at ``gpus`` GPUs; the global batch follows compare's sweep rule
    (the reference batch unless the GPU count needs more tokens per step)."""
    ref = resolve_job(model)
    gb = sweep_global_batch(ref.global_batch, ref.seq_len, gpus)
    if gpus == ref.gpus and gb == ref.global_batch:
        return ref
    return resolve_job(model, gpus=gpus, global_batch=gb)


def compare_command(r: Report, job) -> str:
    hw = " ".join(f"--hw {h}" for h in r.hardware)
    return (f"planner compare --model {r.model} {hw} --gpus {job.gpus} --global-batch {job.global_batch} "
            f"--seq-len {job.seq_len}{_per_stage_flag()} --json")


def _per_stage_flag() -> str:
    return "" if PER_STAGE else " --no-per-stage"


def sweep_command(r: Report) -> str:
    hw = " ".join(f"--hw {h}" for h in r.hardware)
    return f"planner compare --model {r.model} {hw} --sweep-gpus {','.join(map(str, r.gpus))}{_per_stage_flag()} --json"


def build_report(r: Report, progress=None) -> dict:
    """The JSON of one report (no timings)."""
    model = load_model(r.model)
    hws = [load_hardware(h) for h in r.hardware]
    if r.kind == "compare":
        job = report_job(model, r.gpus[0])

        # The bundled on-demand list prices (estimates, labelled so): the same as the command's default.
        out = run_compare(model, hws, job, _options(), Assumptions(), prices=prices_for(list(r.hardware), None),
                          progress=progress)
        out["command"] = compare_command(r, job)
    else:
        out = run_sweep(model, hws, resolve_job(model), list(r.gpus), _options(), Assumptions(), progress=progress)
        out["command"] = sweep_command(r)
    out["report"] = r.name
    return strip_private(out)


def title_of(r: Report, out: dict) -> str:
    if r.kind == "sweep":
        return f"{out['model']['name']}: Hopper against Blackwell from {r.gpus[0]:,} to {r.gpus[-1]:,} GPUs"
    return f"{out['model']['name']} on {r.gpus[0]:,} GPUs: Hopper against Blackwell"


def render_report(r: Report, out: dict) -> str:
    title = title_of(r, out)
    plot = f"{r.name}.png"
    cmd = out["command"]
    if r.kind == "sweep":
        text = markdown_sweep(out, title=title, plot_name=plot, command=cmd)
    else:
        text = markdown_compare(out, title=title, plot_name=plot, command=cmd)
    foot = (f"\n---\nGenerated by `{COMMAND}` from `{r.name}.json` (same folder); planner "
            f"{out['planner_version']}, model spec {out['model']['spec_hash']}. Numbers are planner's predictions, "
            "not measurements.\n")
    return text + foot


def plot_report(r: Report, out: dict, folder: Path) -> None:
    (plot_sweep if r.kind == "sweep" else plot_compare)(out, folder / f"{r.name}.png")


def dump_json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"


# ---------------------------------------------------------------------------------------------
# README: how to regenerate, and the headline table over every report.
# ---------------------------------------------------------------------------------------------
def render_readme(outs: dict[str, dict]) -> str:
    lines = [
        "# results/",
        "",
        "Planner's answers to the questions the seed article raises: how the best parallel plan and its speed change",
        "from Hopper (H100, H800, H200) to Blackwell (B200, GB200 NVL72, GB300 NVL72), and whether the article's",
        "quantitative claims hold. Everything here except `calibration/` and the GPU measurements under `validation/`",
        "(owned by the measurement work) is written by one command and committed exactly as it writes it:",
        "",
        "```",
        f"{COMMAND}            # regenerate (a few minutes; also: planner results)",
        f"{COMMAND} --check    # regenerate into a temporary folder, compare Markdown and JSON byte for byte",
        f"{COMMAND} --only deepseek-v3-256 --check   # one report",
        "```",
        "",
        "Each report is Markdown with a PNG figure, and the JSON it is rendered from (the `planner compare --json`",
        "output). Settings: Megatron launcher rules, BF16 compute, FP32 Adam moments, Transformer Engine with flash",
        "attention, balanced MoE routing, each model's reference job (sequence length, global batch; raised only where",
        f"a GPU count needs at least 1,024 tokens per GPU), the top {TOP} plans per hardware"
        + ("." if PER_STAGE else ", and the search's uniform and standard uneven pipeline layouts (`--no-per-stage`: "
           "the per-stage layout refinement is not yet deterministic, so its layouts could change from run to run; "
           "with it, PP plans on B200 and Hopper can gain a few percent)."),
        "The explanations",
        "(\"what changed and why\") are generated from the numbers: the speed-up split into datasheet peak and MFU, a",
        "swap test (each system's best plan evaluated on the other), which parallel groups cross NVLink domains, the",
        "step-time breakdown and the top-K plans' use of each dimension.",
        "",
        "| report | what |",
        "|---|---|",
    ]
    for r in REPORTS:
        what = (f"{r.model}, {', '.join(r.hardware)}, " +
                (f"{r.gpus[0]:,} GPUs" if r.kind == "compare" else f"sweep over {', '.join(f'{g:,}' for g in r.gpus)} GPUs"))
        if r.note:
            what += f" ({r.note})"
        lines.append(f"| [{r.name}]({r.name}.md) | {what} |")
    lines.append(f"| [{SEED_CLAIMS}]({SEED_CLAIMS}.md) | every quantitative claim of the seed article, checked |")
    lines.append(f"| [validation/{PUBLISHED_RUNS}](validation/{PUBLISHED_RUNS}.md) | planner's predictions against "
                 "published training runs (`planner validate`), per class, calibration and validation subsets apart |")
    lines += ["", "## Headline: tokens/s per GPU of the best plan (speed-up over h100)", ""]
    hw_all: list[str] = []
    for r in REPORTS:
        if r.kind == "compare":
            for h in r.hardware:
                if h not in hw_all:
                    hw_all.append(h)
    rows = []
    for r in REPORTS:
        if r.kind != "compare" or r.name not in outs:
            continue
        out = outs[r.name]
        by = {e["hardware"]["name"]: e for e in out["hardware"]}
        base = by.get("h100")
        base_tps = base["summary"]["tokens_per_s_per_gpu"] if base and base["status"] == "ok" else None
        cells = []
        for h in hw_all:
            e = by.get(h)
            if e is None:
                cells.append("–")
            elif e["status"] != "ok":
                cells.append("nothing fits")
            else:
                s = e["summary"]
                d = s["degrees"]
                tag = f"{s['tokens_per_s_per_gpu']:,.0f}"
                if base_tps:
                    tag += f" ({s['tokens_per_s_per_gpu'] / base_tps:.2f}x)"
                tag += f" PP{d.get('pp', 1)}"
                cells.append(tag)
        rows.append([f"[{r.model}, {r.gpus[0]:,} GPUs]({r.name}.md)", *cells])
    lines += [markdown_table(["model, GPUs", *hw_all], rows), "",
              "PPn: the pipeline-parallel degree of the best plan. Each report says what else changed and why.", ""]
    for r in REPORTS:
        if r.name in outs:
            # One sentence per report: the ranking for a comparison, the lead at the largest scale for
            # a sweep.
            ssum = outs[r.name]["summary"][:1] if r.kind == "compare" else outs[r.name]["sentences"][-1:]
            if ssum:
                lines += [f"- **{r.name}**: {ssum[0]}"]
    lines += ["", "---", f"Generated by `{COMMAND}`. Numbers are planner's predictions, not measurements.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Writing and checking.
# ---------------------------------------------------------------------------------------------
@dataclass
class Generated:
    files: dict[str, str] = field(default_factory=dict)
    """Text files (Markdown, JSON) by name: what --check compares."""
    outs: dict[str, dict] = field(default_factory=dict)


def generate(folder: Path, names: list[str], progress=None, plots: bool = True) -> Generated:
    say = progress or (lambda msg: None)
    gen = Generated()
    prepare_folder(folder, "reports")

    wanted = [r for r in REPORTS if r.name in names or README in names
              or (FIGURES in names and r.name in readme_figures.HEADLINE_REPORTS)]
    for r in wanted:
        say(f"[{r.name}] searching")
        out = build_report(r, progress=lambda msg, n=r.name: say(f"[{n}] {msg}"))
        gen.outs[r.name] = out
        if r.name in names:
            gen.files[f"{r.name}.json"] = dump_json(out)
            gen.files[f"{r.name}.md"] = render_report(r, out)
            if plots:
                plot_report(r, out, folder)
    if SEED_CLAIMS in names:
        # Local: seed_claims imports this module's REPORTS and build_report (a cycle at module level).
        from planner.report.seed_claims import build_claims, markdown_claims  # noqa: PLC0415

        say("[seed-claims] computing")
        claims = build_claims(progress=lambda msg: say(f"[seed-claims] {msg}"), compares=gen.outs)
        gen.files[f"{SEED_CLAIMS}.json"] = dump_json(claims)
        gen.files[f"{SEED_CLAIMS}.md"] = markdown_claims(claims)
    validation = None
    if PUBLISHED_RUNS in names or FIGURES in names:
        say("[published-runs] evaluating")
        report = validate_file(RUNS_FILE)
        validation = json.loads(dump_json(report))
    if PUBLISHED_RUNS in names:
        (folder / "validation").mkdir(parents=True, exist_ok=True)
        gen.files[f"validation/{PUBLISHED_RUNS}.json"] = dump_json(report)
        gen.files[f"validation/{PUBLISHED_RUNS}.md"] = markdown(report, VALIDATE_COMMAND)

        # What explain and search print next to a predicted step time (planner.validate.bands).
        gen.files[f"validation/{ERROR_BANDS}.json"] = dump_json(bands_from_report(validation))
        if plots:
            plot(report, folder / "validation" / f"{PUBLISHED_RUNS}.png")
    if PUBLISHED_RUNS_SEARCH in names:
        say("[published-runs-search] searching")
        # Its 149 searches are independent: one process per core (the report is the same).
        searched = search_file(RUNS_FILE, progress=lambda msg: say(f"[published-runs-search] {msg}"),
                               jobs=min(os.cpu_count() or 1, 4))
        (folder / "validation").mkdir(parents=True, exist_ok=True)
        gen.files[f"validation/{PUBLISHED_RUNS_SEARCH}.json"] = dump_json(searched)
        gen.files[f"validation/{PUBLISHED_RUNS_SEARCH}.md"] = search_markdown(searched, SEARCH_COMMAND)
    if README in names:
        gen.files["README.md"] = render_readme(gen.outs)
    if FIGURES in names:
        # From the JSON as written (what the README test reads back from results/).
        outs = {n: json.loads(dump_json(gen.outs[n])) for n in readme_figures.HEADLINE_REPORTS}
        gen.files[readme_figures.FILE] = readme_figures.render(validation, outs)

    for name, text in gen.files.items():
        write_text(folder / name, text, "report")
    return gen


def check(committed: Path, names: list[str], progress=None) -> list[str]:
    """Regenerate into a temporary folder; the names of the files that differ (with a diff)."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="planner-results-") as tmp:
        gen = generate(Path(tmp), names, progress=progress, plots=False)
        for name, text in sorted(gen.files.items()):
            path = committed / name
            if not path.exists():
                problems.append(f"{path}: missing (the generator writes it)")
                continue

            old = read_text(path, "committed report", MAX_SAVED_BYTES)
            if old != text:
                diff = list(difflib.unified_diff(old.splitlines(), text.splitlines(), f"committed/{name}",
                                                 f"regenerated/{name}", lineterm="", n=1))
                shown = "\n".join(diff[:40]) + ("\n..." if len(diff) > 40 else "")
                problems.append(f"{path}: differs from what the generator writes now\n{shown}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m planner.report.results", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results"), help="folder of the reports (default: results)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary folder and compare Markdown and JSON with --out; exit 1 on a difference")
    ap.add_argument("--only", action="append", default=None,
                    help=f"only this report (repeatable): {', '.join(report_names())}")
    args = ap.parse_args(argv)
    names = args.only or report_names()
    unknown = [n for n in names if n not in report_names()]
    if unknown:
        print(f"Error: unknown report {', '.join(unknown)}. Known: {', '.join(report_names())}.", file=sys.stderr)
        return 2

    err = Console(stderr=True, highlight=False)
    with err.status("results", spinner="dots") as status:
        progress = lambda msg: status.update(msg)  # noqa: E731
        if args.check:
            problems = check(args.out, names, progress=progress)
        else:
            generate(args.out, names, progress=progress)
            problems = []
    if args.check:
        if problems:
            for p in problems:
                print(p, file=sys.stderr)
            print(f"{len(problems)} file(s) of {args.out} differ from a fresh run: regenerate with `{COMMAND}` "
                  "and commit, or find what made the output change.", file=sys.stderr)
            return 1
        print(f"{args.out}: {', '.join(names)} reproduce byte for byte (Markdown and JSON).")
        return 0
    print(f"wrote {', '.join(names)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
