"""`planner export` (a plan to a Megatron-LM script, a torchtitan invocation or JSON) and
`planner check` (a plan, or an existing Megatron launch script, against the launchers' start-up
checks)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from planner.cli import app
from planner.errors import PlannerError
from planner.options import (
    DomainFillOpt,
    GlobalBatchOpt,
    GpusOpt,
    JobFileOpt,
    JsonOpt,
    PrecisionOpt,
    SeqLenOpt,
    print_json,
)

FromOpt = Annotated[Optional[Path], typer.Option("--from", help="A 'planner search --save' file (JSON with a 'plans' list).")]
RankOpt = Annotated[int, typer.Option("--rank", "-k", help="Which plan of --from, 1-based (file order).")]
PlanOptional = Annotated[Optional[str], typer.Option("--plan", "-p", help="Plan as key=value pairs, e.g. \"tp=2,pp=4,ep=8,mbs=1\".")]
ModelOptional = Annotated[Optional[str], typer.Option("--model", "-m", help="Catalog model, model YAML or HF config.json (default: the --from file's).")]
HwOptional = Annotated[Optional[str], typer.Option("--hw", help="Hardware catalog name or YAML (default: the --from file's).")]
NprocOpt = Annotated[Optional[int], typer.Option("--nproc-per-node", help="GPUs per node for torchrun (default: from the hardware).")]
TTConfigOpt = Annotated[Optional[str], typer.Option(
    "--torchtitan-config", help="torchtitan config_registry function as MODULE:FUNCTION (default: planner's table for the model).")]
TargetOpt = Annotated[str, typer.Option("--target", help="Launcher whose start-up checks apply: megatron, torchtitan or any.")]
ScriptEnvOpt = Annotated[Optional[list[str]], typer.Option(
    "--script-env", help="NAME=VALUE the --megatron-args script finds in its environment (repeatable).")]
ScriptArgsOpt = Annotated[Optional[str], typer.Option(
    "--script-args", help="The --megatron-args script's own arguments ($1 $2 ...), quoted as in a shell.")]


def _resolve(plan_text, from_file, rank, model_name, hw_name, gpus, global_batch, seq_len, precision, job_file, domain_fill):
    """model, hw, job, plan and the saved entry (or None) from the shared options."""
    from planner.launchers.common import resolve_saved
    from planner.options import resolve_job
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.plan import Plan

    saved = None
    if from_file is not None:
        if plan_text:
            raise PlannerError("Give either --plan or --from, not both.")
        saved, (model_name, hw_name, gpus, global_batch, seq_len, precision, domain_fill) = resolve_saved(
            from_file, rank, model=model_name, hw=hw_name, gpus=gpus, global_batch=global_batch, seq_len=seq_len,
            precision=precision, domain_fill=domain_fill)
        plan = saved.plan
    elif plan_text is not None:
        plan = Plan.parse(plan_text)
    else:
        raise PlannerError("No plan given.", hint="Pass --plan \"tp=...,pp=...\" or --from plans.json --rank K.")
    if model_name is None:
        raise PlannerError("No model given.", hint="Pass --model (or a --from file that names its model).")
    model = load_model(model_name)
    if not hw_name:
        hw_name = model.reference_job.hardware if model.reference_job and model.reference_job.hardware else None
    if not hw_name:
        raise PlannerError("No hardware given.", hint="Pass --hw (see 'planner hw').")
    hw = load_hardware(hw_name)
    job = resolve_job(model, gpus=gpus, global_batch=global_batch, seq_len=seq_len, precision=precision,
                      job_file=job_file, domain_fill=domain_fill)
    if plan.precision and plan.precision not in job.precisions and precision is None:
        job = job.model_copy(update={"precisions": [plan.precision, *[p for p in job.precisions if p != plan.precision]]})
    if plan.dp is not None or plan.edp is not None:
        # A given dp/edp (or a saved file's) must be what this job's GPU count gives.
        from planner.launchers.common import export_canonical

        plan.check_given_degrees(export_canonical(plan, model, hw, job).degrees(job.gpus), job.gpus)
    return model, hw, job, plan, saved


def _check_nproc(nproc_per_node: int | None) -> None:
    from planner.specs.common import MAX_GPUS

    if nproc_per_node is not None and not 1 <= nproc_per_node <= MAX_GPUS:
        raise PlannerError(f"--nproc-per-node {nproc_per_node} must be a positive number of GPUs per node.",
                           hint="Give the GPUs per host you launch on, e.g. --nproc-per-node 8.")


def _check_torchtitan_config(value: str | None) -> None:
    import re

    if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*",
                                               value):
        raise PlannerError(
            f"--torchtitan-config {value!r} is not MODULE:FUNCTION (Python names, e.g. deepseek_v3:deepseek_v3_671b).",
            hint="Name a torchtitan config_registry module and function.",
        )


def _write(text: str, out: Path | None) -> None:
    if out is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    from planner.files import write_text

    write_text(out, text, "export", executable=text.startswith("#!"))
    typer.echo(f"wrote {out}", err=True)


def _saved_predictions_differ(saved, pred: dict) -> str | None:
    """A sentence when the saved file's predictions disagree with the recomputed ones by over 1%
    (an edited file, another planner version, or other assumptions)."""
    pairs = (("memory", "peak_bytes", "peak memory"), ("time", "step_time_s", "step time"))
    for part, key, label in pairs:
        old = (getattr(saved, part) or {}).get(key)
        new = (pred.get(part) or {}).get(key)
        if old is not None and new and abs(old - new) > 0.01 * abs(new):
            return (f"the saved {label} ({old:.6g}) differs from planner's recomputation ({new:.6g}); "
                    "the export carries the recomputed predictions")
    return None


@app.command("export")
def export_cmd(
    plan: PlanOptional = None,
    from_file: FromOpt = None,
    rank: RankOpt = 1,
    model: ModelOptional = None,
    hw: HwOptional = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="megatron (bash script for pretrain_gpt.py), torchtitan, or json.")] = "megatron",
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write here instead of stdout.")] = None,
    nproc_per_node: NprocOpt = None,
    torchtitan_config: TTConfigOpt = None,
    gpus: GpusOpt = None,
    global_batch: GlobalBatchOpt = None,
    seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None,
    job: JobFileOpt = None,
    domain_fill: DomainFillOpt = None,
) -> None:
    """Write what a launcher runs for a plan. A plan the launcher would reject is not exported: the
    error names the rule (see 'planner check'). Predictions in the output are always recomputed."""
    from planner.cost.setup import resolve_setup
    from planner.launchers.common import export_canonical, predictions
    from planner.rules import launcher_violations, violations_error

    if fmt not in ("megatron", "torchtitan", "json"):
        raise PlannerError(f"Unknown --format '{fmt}'.", hint="Choose megatron, torchtitan or json.")
    _check_nproc(nproc_per_node)
    _check_torchtitan_config(torchtitan_config)
    m, h, j, p, saved = _resolve(plan, from_file, rank, model, hw, gpus, global_batch, seq_len, precision, job, domain_fill)
    if out is not None:
        from planner.files import check_output

        check_output(out, "export")  # never over the saved search, model, job or hardware it read
    canon = export_canonical(p, m, h, j)
    if fmt != "json":
        found = launcher_violations(canon, m, j, fmt, hw=h, torchtitan_config=torchtitan_config)
        if found:
            raise violations_error(found, fmt)
    assumptions = _saved_assumptions(saved, from_file)
    setup = resolve_setup(m, h, j, canon, assumptions)
    pred = predictions(setup)
    if saved is not None:
        differ = _saved_predictions_differ(saved, pred)
        if differ:
            typer.echo(f"note: plan {rank} of '{from_file}': {differ}.", err=True)
    if fmt == "megatron":
        from planner.launchers.megatron.write import export_megatron

        text = export_megatron(setup, predictions=pred, nproc_per_node=nproc_per_node)
    elif fmt == "torchtitan":
        from planner.launchers.torchtitan.write import export_torchtitan

        text = export_torchtitan(setup, predictions=pred, torchtitan_config=torchtitan_config,
                                 nproc_per_node=nproc_per_node)
    else:
        from planner.launchers.json_export import export_json

        text = export_json(setup, predictions=pred, torchtitan_config=torchtitan_config)
    _write(text, out)


def _saved_assumptions(saved, from_file):
    """The modeling assumptions the saved search ran with (validated as on the command line), so
    that the recomputed predictions are the search's."""
    if saved is None or not saved.assumptions:
        return None
    from planner.cost.setup import Assumptions
    from planner.specs.catalog import validate_spec

    a = validate_spec(Assumptions, saved.assumptions, "assumptions", f"{from_file} (its 'assumptions')")
    if a.calibration is not None:
        from planner.specs.calibration import load_calibration

        load_calibration(a.calibration)
    return a


@app.command("check")
def check_cmd(
    plan: PlanOptional = None,
    from_file: FromOpt = None,
    rank: RankOpt = 1,
    megatron_args: Annotated[Optional[Path], typer.Option(
        "--megatron-args", help="An existing Megatron-LM launch script or argument list to read back and check.")] = None,
    script_env: ScriptEnvOpt = None,
    script_args: ScriptArgsOpt = None,
    model: ModelOptional = None,
    hw: HwOptional = None,
    target: TargetOpt = "megatron",
    torchtitan_config: TTConfigOpt = None,
    gpus: GpusOpt = None,
    global_batch: GlobalBatchOpt = None,
    seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None,
    job: JobFileOpt = None,
    domain_fill: DomainFillOpt = None,
    json: JsonOpt = False,
) -> None:
    """Check a plan (or a Megatron launch script) against the launchers' start-up checks; list every
    rule it breaks. Exit status 1 when a rule is broken."""
    from planner.errors import PlanRuleError

    try:
        _check(plan, from_file, rank, megatron_args, model, hw, target, torchtitan_config, gpus, global_batch, seq_len,
               precision, job, domain_fill, json, script_env, script_args)
    except PlanRuleError as exc:
        exc.exit_code = 1  # the plan breaks a rule: check's "does not work" status
        raise


def _check(plan, from_file, rank, megatron_args, model, hw, target, torchtitan_config, gpus, global_batch, seq_len,
           precision, job, domain_fill, json, script_env=None, script_args=None) -> None:
    from planner.rules import launcher_violations

    if target not in ("megatron", "torchtitan", "any"):
        raise PlannerError(f"Unknown --target '{target}'.", hint="Choose megatron, torchtitan or any.")
    _check_torchtitan_config(torchtitan_config)
    if megatron_args is not None:
        report = _check_megatron_args(megatron_args, model, hw, target, torchtitan_config, gpus, global_batch,
                                      seq_len, precision, job, domain_fill, script_env, script_args)
    else:
        from planner.launchers.common import export_canonical

        m, h, j, p, _ = _resolve(plan, from_file, rank, model, hw, gpus, global_batch, seq_len, precision, job, domain_fill)
        canon = export_canonical(p, m, h, j)
        found = launcher_violations(canon, m, j, target, hw=h, torchtitan_config=torchtitan_config)
        report = {"model": m.name, "hardware": h.name, "job": j.model_dump(mode="json", exclude_none=True),
                  "plan": canon.to_string(), "target": target,
                  "violations": [{"rule": v.rule, "message": v.message, "hint": v.hint} for v in found]}
    if json:
        print_json(report)
    else:
        _print_report(report)
    if report["violations"]:
        raise typer.Exit(1)  # planner.cli.main returns it as the exit status


def _check_megatron_args(path, model_name, hw_name, target, torchtitan_config, gpus, global_batch, seq_len,
                         precision, job_file, domain_fill, script_env=None, script_args=None) -> dict:
    from planner.launchers.common import predictions
    from planner.launchers.megatron.read import job_from_script, script_inputs
    from planner.launchers.megatron.rules import args_violations
    from planner.rules import launcher_violations

    environ, argv = script_inputs(script_env, script_args)
    sj = job_from_script(Path(path), model=model_name, hw=hw_name, gpus=gpus, global_batch=global_batch,
                         seq_len=seq_len, precision=precision, job_file=job_file, domain_fill=domain_fill,
                         environ=environ, script_args=argv)
    found = launcher_violations(sj.plan, sj.model, sj.job, target, hw=sj.hardware, torchtitan_config=torchtitan_config)
    flag_rules = args_violations(sj.args, sj.hardware)
    found += [v for v in flag_rules if v.rule != "sequence-parallel-needs-tp"]
    warnings = [v.message for v in flag_rules if v.rule == "sequence-parallel-needs-tp"]
    report = {
        "source": str(path), "model": sj.model.name, "model_source": sj.model_source, "hardware": sj.hardware.name,
        "job": sj.job.model_dump(mode="json", exclude_none=True), "plan": sj.plan.to_string(), "target": target,
        "unknown_flags": sj.args.unknown_flags, "ignored_flags": sj.args.ignored_flags,
        "unresolved_variables": sj.args.unresolved, "not_run": sj.args.not_run, "notes": sj.notes + warnings,
        "model_mismatches": sj.mismatches,
        "violations": [{"rule": v.rule, "message": v.message, "hint": v.hint} for v in found],
    }
    if not found:
        from planner.cost.setup import resolve_setup

        report.update(predictions(resolve_setup(sj.model, sj.hardware, sj.job, sj.plan)))
    return report


def _print_report(r: dict) -> None:
    echo = typer.echo
    if "source" in r:
        echo(f"{r['source']}: {r['model']} ({r['model_source']}) on {r['hardware']}")
    else:
        echo(f"{r['model']} on {r['hardware']}")
    jb = r["job"]
    echo(f"job: {jb.get('gpus')} GPUs, global batch {jb.get('global_batch')}, seq {jb.get('seq_len')}")
    echo(f"plan: {r['plan']}")
    for key, title in (("model_mismatches", "model mismatches"), ("unknown_flags", "flags planner does not model"),
                       ("unresolved_variables", "unresolved variables"),
                       ("not_run", "command substitutions (never run)"), ("notes", "approximations and notes")):
        if r.get(key):
            echo(f"{title}:")
            for item in r[key]:
                echo(f"  - {item}")
    if r.get("ignored_flags"):
        echo(f"ignored (no effect on memory or time): {' '.join(r['ignored_flags'])}")
    from planner.launchers.common import prediction_lines

    for ln in prediction_lines(r):
        echo(f"predicted: {ln}")
    target = {"megatron": "Megatron-LM", "torchtitan": "torchtitan", "any": "the shared rules"}[r["target"]]
    if r["violations"]:
        echo(f"{len(r['violations'])} rule(s) broken for {target}:")
        for v in r["violations"]:
            echo(f"  [{v['rule']}] {v['message']}" + (f" {v['hint']}" if v.get("hint") else ""))
    else:
        echo(f"OK: passes {target}'s start-up checks.")
