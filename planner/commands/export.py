"""`planner export` (a plan to a Megatron-LM script, a torchtitan invocation or JSON) and
`planner check` (a plan, or an existing Megatron launch script, against the launchers' start-up
checks)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli import app
from planner.errors import PlannerError
from planner.options import (
    DomainFillOpt, GlobalBatchOpt, GpusOpt, JobArgs, JobFileOpt, JsonOpt, PrecisionOpt, SeqLenOpt,
    SetOpt, SoftwareOpt, TorchtitanConfigOpt, plan_source, print_json, rule_failures_exit, torchtitan_config_option,
)

FromOpt = Annotated[Path | None, typer.Option("--from", help="A 'planner search --save' file (JSON with a 'plans' list).")]
RankOpt = Annotated[int, typer.Option("--rank", "-k", help="Which plan of --from, 1-based (file order).")]
PlanOptional = Annotated[str | None, typer.Option("--plan", "-p", help="Plan as key=value pairs, e.g. \"tp=2,pp=4,ep=8,mbs=1\".")]
ModelOptional = Annotated[str | None, typer.Option("--model", "-m", help="Catalog model, model YAML or HF config.json (default: the --from file's, or read from --megatron-args).")]
HwOptional = Annotated[str | None, typer.Option("--hw", help="Hardware catalog name or YAML (default: the --from file's, else the model's reference job's).")]
NprocOpt = Annotated[int | None, typer.Option("--nproc-per-node", help="GPUs per node for torchrun (default: from the hardware).")]
BridgeRecipeOpt = Annotated[str | None, typer.Option(
    "--bridge-recipe", help="Megatron-Bridge recipe function for --format bridge (default: planner's table for the model).")]
BridgeFileOpt = Annotated[Path | None, typer.Option(
    "--bridge", help="A Megatron-Bridge launch to read back: a run_recipe.py script, a file of KEY=VALUE overrides, "
    "or a ConfigContainer YAML.")]
TorchtitanFileOpt = Annotated[Path | None, typer.Option(
    "--torchtitan", help="A torchtitan job to read back: a TOML job file (torchtitan <= 0.2.2), or a 0.3.0 launch script "
    "or argument list (--module M --config F with overrides).")]
LaunchFileOpt = Annotated[Path | None, typer.Option(
    "--launch", help="A launch to read back, its launcher found from the file (a Megatron-LM script or argument list, "
    "a Megatron-Bridge launch, a torchtitan job; see --launch-format).")]
LaunchFormatOpt = Annotated[str | None, typer.Option(
    "--launch-format", help="The launcher of the --launch file when planner cannot tell or should not guess: "
    "megatron, bridge or torchtitan (each also has its own option: --megatron-args, --bridge, --torchtitan).")]
ScriptEnvOpt = Annotated[list[str] | None, typer.Option(
    "--script-env", help="NAME=VALUE the --megatron-args script finds in its environment (repeatable).")]
ScriptArgsOpt = Annotated[str | None, typer.Option(
    "--script-args", help="The --megatron-args script's own arguments ($1 $2 ...), quoted as in a shell.")]


def _check_nproc(nproc_per_node: int | None) -> None:
    from planner.specs.common import MAX_GPUS

    if nproc_per_node is not None and not 1 <= nproc_per_node <= MAX_GPUS:
        raise PlannerError(f"--nproc-per-node {nproc_per_node} must be a positive number of GPUs per node.",
                           hint="Give the GPUs per host you launch on, e.g. --nproc-per-node 8.")


def _check_torchtitan_config(value: str | None) -> None:
    torchtitan_config_option(value, target=None)  # export and check: the format or --target decides its use


def _check_recipe(value: str | None) -> None:
    import re

    if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,200}", value):
        raise PlannerError(f"--bridge-recipe {value!r} is not a recipe function name (a Python name, e.g. "
                           "llama31_405b_pretrain_config).", hint="Name a function run_recipe.py --recipe finds.")


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
    fmt: Annotated[str, typer.Option("--format", "-f", help="megatron (bash script for pretrain_gpt.py), bridge (Megatron-Bridge run_recipe.py with overrides), torchtitan (0.3 --module/--config with overrides), torchtitan-toml (a job file for torchtitan <= 0.2.2), or json.")] = "megatron",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here instead of stdout.")] = None,
    nproc_per_node: NprocOpt = None,
    torchtitan_config: TorchtitanConfigOpt = None,
    bridge_recipe: BridgeRecipeOpt = None,
    gpus: GpusOpt = None,
    global_batch: GlobalBatchOpt = None,
    seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None,
    job: JobFileOpt = None,
    domain_fill: DomainFillOpt = None,
    model_set: SetOpt = None,
    software: SoftwareOpt = None,
) -> None:
    """Write what a launcher runs for a plan. A plan the launcher would reject is not exported: the
    error names the rule (see 'planner check'). Predictions in the output are always recomputed."""
    from planner.cost.setup import resolve_setup
    from planner.launchers import registry
    from planner.launchers.common import export_canonical, predictions
    from planner.rules import violations_error

    chosen = registry.format_named(fmt)
    if chosen is None:
        names = [f.name for f, _ in registry.formats()]
        raise PlannerError(f"Unknown --format '{fmt}'.", hint="Choose " + ", ".join(names[:-1]) + f" or {names[-1]}.")
    form, launcher = chosen
    _check_nproc(nproc_per_node)
    _check_torchtitan_config(torchtitan_config)
    _check_recipe(bridge_recipe)
    src = plan_source(plan=plan, from_file=from_file, rank=rank, model=model, hw=hw, command="export",
                      args=JobArgs(gpus, global_batch, seq_len, precision, job, domain_fill), model_set=model_set)
    m, h, j, p, saved = src.model, src.hw, src.job, src.plan, src.saved
    if out is not None:
        from planner.files import check_output

        check_output(out, "export")  # never over the saved search, model, job or hardware it read
    canon = export_canonical(p, m, h, j)
    target = launcher.rules_of if launcher is not None else registry.ANY  # the rules the launch obeys
    profile = _export_software(form, launcher, software, saved)
    request = registry.ExportRequest({}, nproc_per_node, torchtitan_config, bridge_recipe)
    if launcher is not None:
        # A format whose writer checks its release's own rules when it writes (the TOML writer:
        # torchtitan.toml.toml_violations) has the release's levers checked after them, so that
        # those keep their own words.
        found = registry.launcher_violations(canon, m, j, target, hw=h, torchtitan_config=torchtitan_config,
                                             software=profile if form.release_in_rules else None, release=profile)
        if form.extra_rules is not None:
            found += form.extra_rules(m, canon, request)
        if found:
            raise violations_error(found, launcher.label)
    from planner.cost.setup import Assumptions
    from planner.options import saved_assumptions
    from planner.search.driver import target_assumptions

    assumptions = saved_assumptions(saved, from_file) or target_assumptions(Assumptions(), target)
    setup = resolve_setup(m, h, j, canon, assumptions)
    pred = predictions(setup)
    if saved is not None:
        differ = _saved_predictions_differ(saved, pred)
        if differ:
            typer.echo(f"note: plan {rank} of '{from_file}': {differ}.", err=True)
    from dataclasses import replace

    text = form.write(setup, replace(request, predictions=pred))
    if form.written_rules is not None and launcher is not None:
        late = form.written_rules(text, canon, profile)
        if late:
            raise violations_error(late, launcher.label)
    _write(_with_software(text, form, profile), out)


def _export_software(form, launcher, given: str | None, saved):
    """The release an export is written for: --software, the saved search's, else the format's own
    release (Format.release) or the newest release of the format's launcher. json names a release
    only when one is given."""
    from planner.launchers.registry import ANY
    from planner.launchers.registry import resolve_software
    from planner.specs.catalog import load_software

    saved_name = saved.software if saved is not None else None
    target = launcher.rules_of if launcher is not None else ANY
    if given is not None or saved_name is not None:
        profile, _ = resolve_software(given, target, saved=saved_name)
        if form.check_release is not None:
            form.check_release(profile)
        return profile
    if form.release is not None:
        return load_software(form.release)
    return resolve_software(None, target)[0]


def _with_software(text: str, form, profile) -> str:
    """The export with the release it was written for: a '# software:' line after the script
    header's model line (check reads it back), a 'software' key in JSON."""
    if profile is None:
        return text
    if form.json:
        import json as _json

        from planner.launchers.common import software_record
        from planner.options import json_text

        data = _json.loads(text)
        data["software"] = software_record(profile)
        return json_text(data) + ("\n" if text.endswith("\n") else "")
    lines = text.split("\n")
    for i, line in enumerate(lines[:20]):
        if line.startswith("# model: "):
            lines.insert(i + 1, f"# software: {profile.name} ({profile.title})")
            break
    return "\n".join(lines)


@app.command("check")
def check_cmd(
    plan: PlanOptional = None,
    from_file: FromOpt = None,
    rank: RankOpt = 1,
    launch: LaunchFileOpt = None,
    launch_format: LaunchFormatOpt = None,
    megatron_args: Annotated[Path | None, typer.Option(
        "--megatron-args", help="An existing Megatron-LM launch script or argument list to read back and check.")] = None,
    bridge: BridgeFileOpt = None,
    torchtitan: TorchtitanFileOpt = None,
    script_env: ScriptEnvOpt = None,
    script_args: ScriptArgsOpt = None,
    model: ModelOptional = None,
    hw: HwOptional = None,
    target: Annotated[str | None, typer.Option(
        "--target", help="Launcher whose start-up checks apply: megatron, torchtitan or any (default: the read "
        "launch's, torchtitan for a torchtitan job; else megatron).")] = None,
    torchtitan_config: TorchtitanConfigOpt = None,
    gpus: GpusOpt = None,
    global_batch: GlobalBatchOpt = None,
    seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None,
    job: JobFileOpt = None,
    domain_fill: DomainFillOpt = None,
    model_set: SetOpt = None,
    software: SoftwareOpt = None,
    json: JsonOpt = False,
) -> None:
    """Check a plan (or a Megatron launch script) against the launchers' start-up checks and planner's
    memory prediction; list every rule it breaks and every argument the launcher would refuse. FAIL and
    exit status 1 when a rule is broken or the plan does not fit in memory."""
    with rule_failures_exit(1):
        _check_torchtitan_config(torchtitan_config)
        src = plan_source(plan=plan, from_file=from_file, rank=rank, megatron_args=megatron_args, script_env=script_env,
                          script_args=script_args, model=model, hw=hw, command="check", bridge=bridge, torchtitan=torchtitan,
                          launch=launch, launch_format=launch_format,
                          args=JobArgs(gpus, global_batch, seq_len, precision, job, domain_fill), model_set=model_set)
        from planner.launchers import registry

        names = registry.targets()
        if target is not None and target not in names:
            raise PlannerError(f"Unknown --target '{target}'.", hint="Choose " + ", ".join(names[:-1]) + f" or {names[-1]}.")
        # The launch's launcher's rules apply by default (a plan's: Megatron's).
        read = src.launch.launcher if src.launch is not None else registry.launcher("megatron")
        chosen = target or read.rules_of
        report = _check_report(src, chosen, torchtitan_config, software)
    if json:
        print_json(report)
    else:
        _print_report(report)
    if report["status"] == "FAIL":
        raise typer.Exit(1)  # planner.cli.main returns it as the exit status


def _check_report(src, target: str, torchtitan_config, software: str | None = None) -> dict:
    """Every rule the plan (and a launch script's own flags) breaks, with the predictions when none."""
    from planner.launchers.common import export_canonical, predictions
    from planner.launchers.registry import launcher_violations
    from planner.launchers.registry import launch_choice

    choice = launch_choice(src, target, software)

    reads = src.launch.launcher.reads if src.launch is not None else None
    canon = src.plan if reads is not None else export_canonical(src.plan, src.model, src.hw, src.job)
    if reads is not None and reads.torchtitan_config is not None and torchtitan_config is None:
        torchtitan_config = reads.torchtitan_config(src.launch.job, src.model)
    found = launcher_violations(canon, src.model, src.job, target, hw=src.hw, torchtitan_config=torchtitan_config,
                                software=choice.profile) + choice.violations()
    if reads is None and (src.plan.dp is not None or src.plan.edp is not None):
        # The canonical plan drops a given dp and edp (plan_source leaves them to this report).
        from planner.rules import Violation

        found = [Violation(e.rule, e.message.removeprefix(f"[{e.rule}] "), e.hint) for e in
                 src.plan.degree_errors(src.job.gpus)[0] if e.rule in ("dp-mismatch", "edp-mismatch")] + found
    report = {"model": src.model.name, "hardware": src.hw.name, "job": src.job.model_dump(mode="json", exclude_none=True),
              "plan": canon.to_string(), "target": target,
              "provenance": {**src.provenance, "software": _software_words(choice)}}
    if choice.profile is not None:
        report["software"] = choice.record()
    if reads is not None and reads.check is not None:
        # The launch's own fields (source, flags planner does not model, notes) and rules on its text.
        from planner.launchers.registry import CheckContext

        fields, found = reads.check(src.launch.job, found, CheckContext(src.model, src.hw, src.job, canon, target,
                                                                        choice.profile))
        report.update(fields)
    report["violations"] = [{"rule": v.rule, "message": v.message, "hint": v.hint} for v in found]
    failures = list(report["violations"])
    if not found:
        from planner.cost.setup import Assumptions, resolve_setup
        from planner.errors import PlanRuleError
        from planner.options import launch_assumptions

        try:
            # The launch's optimizations (FP8 recipe, CUDA graphs, ...) as explain reads them.
            report.update(predictions(resolve_setup(src.model, src.hw, src.job, canon,
                                                    launch_assumptions(src, Assumptions()))))
        except PlanRuleError as exc:  # a rule of the cost model itself (not a launcher's)
            failures.append({"rule": exc.rule, "message": exc.message.removeprefix(f"[{exc.rule}] "),
                             "hint": getattr(exc, "hint", None)})
        else:
            oom = _memory_failure(report["memory"])
            if oom:
                failures.append(oom)
    report["failures"] = failures
    report["status"] = "FAIL" if failures else "OK"
    return report


def _memory_failure(mem: dict) -> dict | None:
    """The failure entry of a plan whose predicted peak does not fit, or None."""
    if mem.get("fits", True):
        return None
    peak, cap = mem["peak_bytes"] / 2**30, mem["capacity_bytes"] / 2**30
    return {"rule": "out-of-memory",
            "message": f"Predicted peak memory {peak:.1f} GiB on pipeline stage {mem.get('worst_stage', 0)} exceeds the "
                       f"{cap:.1f} GiB available (usable HBM less the CUDA context and any --memory-margin): the run "
                       "would run out of memory.",
            "hint": "'planner explain' with the same arguments shows what fills it; 'planner search' finds plans "
                    "that fit."}


def _software_words(choice) -> str:
    """Where check's release came from, in words ('megatron-core-0.19 (assumed: ...)')."""
    if choice.profile is None:
        return choice.origin
    return f"{choice.profile.name} ({choice.origin})"


def provenance_line(prov: dict) -> str:
    """'from: model --model, hardware launch header, GPUs torchrun ...': where each value came from."""
    job = prov.get("job") or {}
    parts = [f"{label} {where}" for label, where in (("model", prov.get("model")), ("hardware", prov.get("hardware")),
                                                      ("GPUs", job.get("gpus")), ("global batch", job.get("global_batch")),
                                                      ("seq", job.get("seq_len")),
                                                      ("software", prov.get("software"))) if where]
    return "from: " + ", ".join(parts) if parts else ""


def _print_report(r: dict) -> None:
    echo = typer.echo
    if "source" in r:
        echo(f"{r['source']}: {r['model']} ({r['model_source']}) on {r['hardware']}")
    else:
        echo(f"{r['model']} on {r['hardware']}")
    jb = r["job"]
    echo(f"job: {jb.get('gpus')} GPUs, global batch {jb.get('global_batch')}, seq {jb.get('seq_len')}")
    line = provenance_line(r.get("provenance") or {})
    if line:
        echo(line)
    echo(f"plan: {r['plan']}")
    if r.get("recipe"):
        echo(f"recipe: {r['recipe']}" + (f" (its values for: {', '.join(r['recipe_defaults_used'])})"
                                         if r.get("recipe_defaults_used") else ""))
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
    from planner.launchers.registry import label

    target = label(r["target"])
    if r.get("launcher") == "megatron-bridge" and r["target"] == "megatron":
        target = "Megatron-Bridge (Megatron-Core)"
    if r["status"] == "FAIL":
        n = len(r["failures"])
        what = (f"{len(r['violations'])} rule(s) broken for {target}" if r["violations"] else
                "the plan does not fit in memory")
        echo(f"FAIL: {what} ({n} problem{'s' if n > 1 else ''}):")
        for v in r["failures"]:
            echo(f"  [{v['rule']}] {v['message']}" + (f" {v['hint']}" if v.get("hint") else ""))
    else:
        echo(f"OK: passes {target}'s start-up checks and fits in memory.")
