"""Command-line options shared by several commands, declared once.

Also the resolve step every command starts with: names and files to specs, job options (or a job
file, or the model's reference job) to a :class:`~planner.specs.job.Job`.
"""

from __future__ import annotations

import dataclasses
import json as _json
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

# Every command imports this module while it parses its options, so the cost model, the search,
# the launchers and the spec catalogs (pydantic, numpy, OR-Tools: ~0.5 s) are imported inside the
# functions that resolve them (noqa PLC0415: start-up), as planner/commands/* do.
from planner.errors import PlannerError, PlanRuleError
from planner.inputs import DEFAULT_MEMORY_MARGIN, finite_option

ModelOpt = Annotated[
    str,
    typer.Option("--model", "-m", help="Catalog name or alias (see 'planner models'), a model YAML, or a HuggingFace config.json."),
]
HwOpt = Annotated[
    str,
    typer.Option("--hw", help="Hardware catalog name or alias (see 'planner hw'), or a hardware YAML."),
]
GpusOpt = Annotated[int | None, typer.Option("--gpus", "-n", help="GPUs in the job (default: the model's reference job).")]
GlobalBatchOpt = Annotated[
    int | None, typer.Option("--global-batch", help="Global batch per step, in sequences.")
]
SeqLenOpt = Annotated[int | None, typer.Option("--seq-len", help="Sequence length in tokens.")]
PrecisionOpt = Annotated[
    str | None, typer.Option("--precision", help="Allowed compute precisions, comma-separated: bf16, fp8, nvfp4 (first is the default; nvfp4 only when asked: it changes numerics).")
]
JobFileOpt = Annotated[
    Path | None, typer.Option("--job", help="A job YAML (gpus, global_batch, seq_len, precisions); options given on the line override it.")
]
DomainFillOpt = Annotated[
    int | None, typer.Option("--domain-fill", help="Use N GPUs of each NVLink domain (e.g. 64 of an NVL72 rack's 72); the rest stay idle.")
]

MemoryMarginOpt = Annotated[
    float | None, typer.Option(
        "--memory-margin",
        help=f"GiB kept free on every GPU, beyond the allocator margin. Default: {DEFAULT_MEMORY_MARGIN:.2%} of the "
        "usable HBM (planner's largest held-out reserved-peak shortfall on H200s, rounded up); 0 ranks plans up to the capacity.")
]
ExpandableOpt = Annotated[
    bool | None, typer.Option(
        "--expandable-segments/--no-expandable-segments",
        help="Cost reserved memory with PyTorch's expandable segments on or off (PYTORCH_CUDA_ALLOC_CONF); default: "
        "on with Transformer Engine, off for megatron-local, or as a read launch script sets it.")
]
PlanOpt = Annotated[str, typer.Option("--plan", "-p", help="Plan as key=value pairs, e.g. \"tp=2,pp=4,vpp=2,ep=8,mbs=1,recompute=full\".")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables (stable: same input, same bytes).")]
MarkdownOpt = Annotated[bool, typer.Option("--markdown", help="Print the report as Markdown (for a pull request or a design doc).")]
# The search space's bounds, shared by search and compare (compare applies them on every hardware).
MomentsOpt = Annotated[str, typer.Option("--moments", help="Allowed Adam moment precisions, comma-separated: fp32, bf16 (bf16: the precision-aware optimizer, searched where the --software release has it).")]
class Target(str, Enum):
    """The launcher a plan must run on (its start-up rules apply)."""

    megatron = "megatron"
    torchtitan = "torchtitan"
    any = "any"


class Implementation(str, Enum):
    """How the layers are built (planner.cost.setup.Assumptions.implementation)."""

    te = "te"
    megatron_local = "megatron-local"
    megatron_local_fused_softmax = "megatron-local-fused-softmax"


SearchTargetOpt = Annotated[Target, typer.Option("--target", help="Only plans this launcher can run.")]
CheckTargetOpt = Annotated[Target, typer.Option("--target", help="Launcher whose start-up checks apply.")]
RoutingOpt = Annotated[
    float | None,
    typer.Option("--routing-imbalance", help="Tokens on the busiest EP rank over the mean (1.0 = balanced)."),
]
ImplOpt = Annotated[
    Implementation,
    typer.Option("--implementation", help="te: Transformer Engine + flash attention (production); megatron-local: "
                 "the local spec, unfused attention with an fp32 softmax; megatron-local-fused-softmax: unfused "
                 "attention with Megatron's fused softmax (the 2021-22 GPT setups)."),
]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="Change a field of the model, KEY=VALUE typed as in a model YAML (repeatable): e.g. --set "
    "mtp_layers=0, --set moe.num_experts=64, --set vocab_size=128256.")]
FixOpt = Annotated[str | None, typer.Option("--fix", help="Pin plan keys (on every hardware), e.g. \"tp=2,recompute=full\".")]
MaxOpt = Annotated[str | None, typer.Option("--max", help="Upper bounds on degrees and mbs, e.g. \"pp=8,tp=4\".")]
TorchtitanConfigOpt = Annotated[str | None, typer.Option(
    "--torchtitan-config", help="torchtitan config_registry function as MODULE:FUNCTION (default: planner's table "
    "for the model); a model the table lacks needs one for --target torchtitan.")]
"""One option for export, check, search and compare: the torchtitan rules read the same function."""


def torchtitan_config_option(value: str | None, target: str | None = "torchtitan") -> str | None:
    """--torchtitan-config checked: MODULE:FUNCTION of Python names. A megatron search has
    nothing to apply it to, and saying so beats ignoring it."""
    if value is None:
        return None
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*", value):
        raise PlannerError(
            f"--torchtitan-config {value!r} is not MODULE:FUNCTION (Python names, e.g. deepseek_v3:deepseek_v3_671b).",
            hint="Name a torchtitan config_registry module and function.",
        )
    if target == "megatron":
        raise PlannerError(
            "--torchtitan-config applies to --target torchtitan (or any, where it decides which plans the torchtitan "
            "export takes), not --target megatron: only the torchtitan rules read it.",
            hint="Add --target torchtitan.")
    return value


CalibrationOpt = Annotated[
    Path | None, typer.Option("--calibration", help="A calibration file from 'planner calibrate' (measured GEMM, HBM and collective rates).")
]

SoftwareOpt = Annotated[str | None, typer.Option(
    "--software", help="The framework release the plan runs on (see 'planner software'), e.g. megatron-core-0.16, "
    "megatron-bridge-0.6, torchtitan-0.2.2; a lever the release lacks is refused. Default: the newest release of the "
    "--target launcher.")]



def check_margin(job, hw) -> None:
    """The job's --memory-margin must leave some of the GPU's memory once the CUDA context is
    taken: otherwise every answer would read 'exceeds the -3.0 GiB allocation limit'."""
    if not job.memory_margin_bytes:
        return
    from planner.cost.compose import margin_bytes  # noqa: PLC0415
    from planner.cost.efficiency_access import memory_constants  # noqa: PLC0415

    usable = hw.gpu.hbm_usable_bytes.value
    context = memory_constants(hw).cuda_context_bytes.value
    if margin_bytes(hw, job) >= usable - context:
        raise PlannerError(
            f"--memory-margin {job.memory_margin_bytes / 2**30:g} GiB leaves nothing of {hw.name}'s "
            f"{usable / 2**30:.1f} GiB usable HBM ({context / 2**30:.1f} GiB go to the CUDA context).",
            hint="Give a margin of a few GiB.",
        )


def _finite(obj):
    """The object with non-finite floats as None: JSON has no Infinity or NaN, so --json never
    prints them (the cost model does not produce them from validated input; this is the net)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def print_json(obj) -> None:
    """Stable JSON: sorted keys, fixed indentation, only finite numbers."""
    typer.echo(json_text(obj))


def json_text(obj) -> str:
    """The JSON text print_json prints (without its final newline)."""
    return _json.dumps(_finite(obj), indent=2, sort_keys=True, default=_json_default, allow_nan=False)


def _json_default(o):
    if hasattr(o, "model_dump"):
        return _finite(o.model_dump(mode="json"))
    if hasattr(o, "tolist"):
        return _finite(o.tolist())
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


# ---------------------------------------------------------------------------------------------
# The resolve step: names and options to specs, once.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobArgs:
    """The job options of a command line, before they meet a model (see :func:`planner.specs.job_input.resolve_job`)."""

    gpus: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    precision: str | None = None
    job_file: Path | None = None
    domain_fill: int | None = None
    memory_margin: float | None = None
    """GiB kept free on every GPU."""


def parse_moments(text: str) -> tuple[str, ...]:
    """--moments: the Adam moment precisions the search may use."""
    mom = tuple(x.strip() for x in text.split(",") if x.strip())
    if not mom or any(x not in ("fp32", "bf16") for x in mom):
        raise PlannerError(f"--moments '{text}' must list fp32 and/or bf16.")
    return mom


def search_options(target: Target, top: int, time_limit: float, fix: str | None, max_: str | None, moments: str,
                   per_stage: bool, solver: str = "cpsat", torchtitan_config: str | None = None):
    """The search's options from the flags 'planner search' and 'planner compare' share (--target,
    --top, --time-limit, --fix, --max, --moments, --per-stage, --torchtitan-config; --solver is
    search's alone)."""
    from planner.search.driver import Options  # noqa: PLC0415
    from planner.search.space import Limits  # noqa: PLC0415

    return Options(target=target.value, top=top, solver=solver, time_limit_s=time_limit,
                   limits=Limits.parse(fix, max_), moments=parse_moments(moments), per_stage=per_stage,
                   torchtitan_config=torchtitan_config_option(torchtitan_config, target.value))


def build_assumptions(routing_imbalance: float | None = None, implementation: str = "te", calibration: Path | None = None):
    """The modeling assumptions a command line sets, validated once."""
    from planner.cost.setup import Assumptions  # noqa: PLC0415
    from planner.specs.calibration import load_calibration  # noqa: PLC0415
    from planner.specs.catalog import validate_spec  # noqa: PLC0415

    data: dict = {"implementation": str(getattr(implementation, "value", implementation))}
    if routing_imbalance is not None:
        finite_option("--routing-imbalance", routing_imbalance, low=1.0, high=1000.0,
                      negative="it is the busiest EP rank's tokens over the mean, 1.0 or more")
        data["routing_imbalance"] = routing_imbalance
    a = validate_spec(Assumptions, data, "assumptions", "the command line")
    if calibration is not None:
        load_calibration(str(calibration))  # a bad file fails here, as one paragraph
        a = a.model_copy(update={"calibration": str(calibration)})
    return a


def resolve_model(model, model_set: list[str] | tuple[str, ...] | None = None):
    """A model from a name or file (or a spec), with the command line's --set overrides applied."""
    from planner.specs.catalog import load_model  # noqa: PLC0415
    from planner.specs.overrides import apply_overrides, parse_set_items  # noqa: PLC0415

    m = model if not isinstance(model, str) else load_model(model)
    return apply_overrides(m, parse_set_items(model_set))


def resolve_specs(model, hw, args: JobArgs, model_set: list[str] | tuple[str, ...] | None = None):
    """(model, hardware, job) from names or files: the model with its --set overrides; the hardware
    defaults to the model's reference job's; the job to the reference job, a job file and the
    options, in increasing priority."""
    from planner.specs.catalog import load_hardware  # noqa: PLC0415

    m = resolve_model(model, model_set)
    if hw is None:
        hw = m.reference_job.hardware if m.reference_job and m.reference_job.hardware else None
        if hw is None:
            raise PlannerError("No hardware given.", hint="Pass --hw (see 'planner hw').")
    h = hw if not isinstance(hw, str) else load_hardware(hw)
    from planner.specs.job_input import resolve_job  # noqa: PLC0415

    j = resolve_job(m, gpus=args.gpus, global_batch=args.global_batch, seq_len=args.seq_len, precision=args.precision,
                    job_file=args.job_file, domain_fill=args.domain_fill, memory_margin_gib=args.memory_margin)
    check_margin(j, h)
    return m, h, j


@dataclass(frozen=True)
class ReadLaunch:
    """A launch read back: its launcher's registry record (planner.launchers.registry.Launcher,
    whose ``reads`` hooks know its files) and what its reader returned (a ScriptJob, BridgeJob,
    TorchtitanJob, ...)."""

    launcher: Any
    job: Any


@dataclass(frozen=True)
class PlanSource:
    """A plan and what it runs on, from --plan, --from (a saved search) or a launch (--launch,
    --megatron-args, --bridge, --torchtitan)."""

    model: Any
    hw: Any
    job: Any
    plan: Any
    saved: Any = None
    """The saved search's entry (planner.launchers.common.SavedPlan) with --from."""
    launch: ReadLaunch | None = None
    """The launch read back, with its launcher's record."""
    provenance: dict = dataclasses.field(default_factory=dict)
    """Where the model, hardware and job came from, as words ('--hw', 'launch header', ...): check
    and explain report them, so that no default is taken unseen."""


def _read_launch(reader, path, model, hw, args, script_env, script_args, **extra):
    """A launch file through its launcher's reader (Megatron script, Bridge launch, torchtitan
    command or job file) with the job options the command line gave, the margin checked once."""
    from planner.launchers.megatron.read import script_inputs  # noqa: PLC0415

    environ, argv = script_inputs(script_env, script_args)
    read = reader(Path(path), model=model, hw=hw, gpus=args.gpus, global_batch=args.global_batch,
                  seq_len=args.seq_len, precision=args.precision, job_file=args.job_file, domain_fill=args.domain_fill,
                  memory_margin_gib=args.memory_margin, environ=environ, script_args=argv, **extra)
    check_margin(read.job, read.hardware)
    return read


def _launch_given(launch: Path | None, launch_format: str | None, aliases: dict[str, Path | None]):
    """(option as given, file, launcher record) of the one launch given, or None: ``--launch FILE``
    (its format sniffed, or --launch-format), or a launcher's own option (--megatron-args FILE is
    --launch FILE --launch-format megatron)."""
    if launch_format is not None and launch is None:
        raise PlannerError("--launch-format names the format of a --launch file, but no --launch is given.",
                           hint="Add --launch FILE, or leave --launch-format out.")
    named = [(opt, path) for opt, path in aliases.items() if path is not None]
    if launch is None and not named:
        return None
    from planner.launchers import registry  # noqa: PLC0415

    if launch is not None:
        return "--launch", launch, registry.launch_launcher(launch, launch_format)
    opt, path = named[0]
    return opt, path, next(x for x in registry.readable() if x.reads.option == opt)


def plan_source(*, plan: str | None, from_file: Path | None = None, rank: int = 1, megatron_args: Path | None = None,
                script_env=None, script_args=None, model: str | None, hw: str | None, args: JobArgs,
                command: str, model_set: list[str] | None = None, bridge: Path | None = None,
                torchtitan: Path | None = None, launch: Path | None = None,
                launch_format: str | None = None) -> PlanSource:
    """Read exactly one plan source and resolve it against its model (with the --set overrides),
    hardware and job. A launch is read by its launcher's registry record (``reads``): --launch
    FILE finds it by the file's text; --megatron-args, --bridge and --torchtitan name it."""
    aliases = {"--megatron-args": megatron_args, "--bridge": bridge, "--torchtitan": torchtitan}
    given = [name for name, v in (("--plan", plan), ("--from", from_file), ("--launch", launch), *aliases.items())
             if v is not None]
    allowed = "--plan \"tp=..,pp=..\", --from plans.json --rank K" + (
        ", --launch FILE, --megatron-args FILE, --bridge FILE or --torchtitan FILE"
        if command in ("explain", "check") else "")
    if len(given) != 1:
        raise PlannerError(f"{command} needs exactly one plan source" + (f", got {' and '.join(given)}" if given else "")
                           + ".", hint=f"Give {allowed}.")
    read_launch = _launch_given(launch, launch_format, aliases)
    if read_launch is not None:
        opt, path, launcher = read_launch
        reads = launcher.reads
        if model_set and not reads.model_set:
            from planner.launchers import registry  # noqa: PLC0415

            takes = " and ".join(x.reads.option for x in registry.readable() if x.reads.model_set)
            what = opt if opt != "--launch" else f"--launch ({launcher.label})"
            raise PlannerError(f"--set does not apply to {what} yet: the model overrides reach --plan, --from and "
                               f"{takes}.", hint="Edit the model in the launch (or a model file it names) instead.")
        extra = {}
        if reads.model_set:
            from planner.specs.overrides import parse_set_items  # noqa: PLC0415

            extra["model_overrides"] = parse_set_items(model_set)
        lj = _read_launch(reads.reader, path, model, hw, args, script_env, script_args, **extra)
        return PlanSource(lj.model, lj.hardware, lj.job, lj.plan, launch=ReadLaunch(launcher, lj),
                          provenance=_launch_provenance(lj, args))
    saved = None
    given_args, given_model, given_hw = args, model, hw  # before a saved search fills them in
    if from_file is not None:
        from planner.launchers.common import resolve_saved  # noqa: PLC0415

        saved, (model, hw, gpus, global_batch, seq_len, precision, domain_fill) = resolve_saved(
            from_file, rank, model=model, hw=hw, gpus=args.gpus, global_batch=args.global_batch, seq_len=args.seq_len,
            precision=args.precision, domain_fill=args.domain_fill)
        args = dataclasses.replace(args, gpus=gpus, global_batch=global_batch, seq_len=seq_len, precision=precision,
                                   domain_fill=domain_fill)
        p = saved.plan
    else:
        from planner.specs.plan import Plan  # noqa: PLC0415

        p = Plan.parse(plan)
    if model is None:
        raise PlannerError(f"{command} needs --model.", hint="Name a catalog model, a model YAML or a config.json.")
    m, h, j = resolve_specs(model, hw, args, model_set)
    if p.precision and p.precision not in j.precisions and args.precision is None:
        j = j.model_copy(update={"precisions": [p.precision, *[x for x in j.precisions if x != p.precision]]})
    if (p.dp is not None or p.edp is not None) and command != "check":
        # A given dp/edp (or a saved file's) must be what this job's GPU count gives; check lists
        # a mismatch with every other rule the plan breaks.
        from planner.launchers.common import export_canonical  # noqa: PLC0415

        p.check_given_degrees(export_canonical(p, m, h, j).degrees(j.gpus), j.gpus)
    return PlanSource(m, h, j, p, saved=saved, provenance=_plan_provenance(m, given_args, given_hw, given_model, saved, from_file))


def _job_provenance(gpus_source: str, args: JobArgs, launch: str) -> dict:
    """Where each job value came from: the command line's option, a job file, else ``launch``."""
    def one(option: str, value) -> str:
        if value is not None:
            return option
        return str(args.job_file) if args.job_file is not None else launch

    return {"gpus": gpus_source, "global_batch": one("--global-batch", args.global_batch),
            "seq_len": one("--seq-len", args.seq_len)}


def _launch_provenance(read, args: JobArgs) -> dict:
    """Provenance of a launch read back (a ScriptJob, BridgeJob or TorchtitanJob)."""
    return {"model": read.model_source, "hardware": read.hardware_source,
            "job": _job_provenance(read.gpus_source, args, "the launch")}


def _plan_provenance(m, args: JobArgs, hw_given, model_given, saved, from_file) -> dict:
    """Provenance of --plan / --from: the command line, the saved search, else the model's
    reference job (as resolve_specs and resolve_job take them)."""
    ref = "the model's reference job" if m.reference_job is not None else "the command line"
    if args.job_file is not None:
        ref = str(args.job_file)
    saved_job = (saved.job or {}) if saved is not None else {}

    def one(option: str, key: str) -> str:
        if getattr(args, key) is not None:
            return option
        return f"saved search {from_file}" if key in saved_job else ref

    hardware = ("--hw" if hw_given else f"saved search {from_file}" if saved is not None and saved.hardware
                else "the model's reference job")
    model = "--model" if model_given is not None or saved is None else f"saved search {from_file}"
    return {"model": model, "hardware": hardware,
            "job": {"gpus": one("--gpus", "gpus"), "global_batch": one("--global-batch", "global_batch"),
                    "seq_len": one("--seq-len", "seq_len")}}


def saved_assumptions(saved, from_file):
    """The modeling assumptions a saved search ran with (validated as on the command line), so
    that what explain and export recompute from it is the search's; None without them."""
    if saved is None or not saved.assumptions:
        return None
    from planner.cost.setup import Assumptions  # noqa: PLC0415
    from planner.specs.catalog import validate_spec  # noqa: PLC0415

    a = validate_spec(Assumptions, saved.assumptions, "assumptions", f"{from_file} (its 'assumptions')")
    if a.calibration is not None:
        from planner.specs.calibration import load_calibration  # noqa: PLC0415

        load_calibration(a.calibration)
    return a


def launch_assumptions(src: PlanSource, base, from_file=None):
    """``base`` (what the command line gave) with the Assumptions a read launch sets (its
    launcher's ``reads.assumptions``: a Megatron script's flags, FP8 recipe, CUDA graphs, TE
    operation fuser, allocator; a Bridge launch's matching fields, FP8 attention too; a torchtitan
    job's torchao float8 recipe); ``base`` as it is for a plan string.
    With --from (``from_file``), the saved search's own assumptions, under what the command line
    sets away from the defaults. The one route explain and check both take."""
    saved = saved_assumptions(src.saved, from_file)
    if saved is not None:
        defaults = type(base)()
        given = {k: getattr(base, k) for k in type(base).model_fields if getattr(base, k) != getattr(defaults, k)}
        return saved.model_copy(update=given)
    if src.launch is not None:
        return base.model_copy(update=src.launch.launcher.reads.assumptions(src.launch.job))
    return base


@contextmanager
def rule_failures_exit(code: int = 1):
    """A plan that breaks a rule is the command's 'does not work' answer (exit ``code``), not bad
    input (2)."""
    try:
        yield
    except PlanRuleError as exc:
        exc.exit_code = code
        raise
