"""Read a torchtitan job back into planner's terms: a TOML job file (torchtitan <= 0.2.2), or a
torchtitan 0.3.0 launch (``torchrun ... -m torchtitan.train --module M --config F`` plus
``--section.key VALUE`` overrides and an ``activation_checkpoint:MODE`` subcommand; a script read
as bash would, nothing run, or a bare argument list). A 0.2.x launch script that names its TOML
with ``--job.config_file`` is read with the TOML under its CLI overrides (CLI > TOML, as
ConfigManager merges them).

What a file leaves out takes torchtitan's dataclass default (0.3.0: the registry function's value,
which planner does not know; each such key is listed). Per-op selective AC is recompute=op,
torchao's float8 recipe and the loss's compilation are assumptions (:func:`launch_assumptions`).
Settings planner does not model (compile's other fusions, CUDA graphs, layer-frequency AC, CPU
offload of FSDP) are listed, never dropped silently.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import PlannerError, excerpt
from planner.files import MAX_SCRIPT_BYTES, check_flow_nesting, nesting_error, read_text
from planner.launchers.bash import run_script
from planner.launchers.common import (
    export_canonical,
    header_disagreement,
    launch_hardware,
    launch_world,
    torchrun_options,
)
from planner.launchers.torchtitan.rules import TORCHTITAN_CONFIGS
from planner.launchers.torchtitan.toml import FLAVORS
from planner.specs.catalog import load_model
from planner.specs.job_input import resolve_job
from planner.specs.layout import format_layout
from planner.specs.plan import Plan
from planner.specs.schedule import REGISTRY, by_torchtitan_name

# planner's reading of each key, the 0.2.2 / 0.3.0 dataclass default where a file leaves it out.
DEFAULTS = {
    "parallelism.data_parallel_replicate_degree": 1, "parallelism.data_parallel_shard_degree": -1,
    "parallelism.fsdp_reshard_after_forward": "default", "parallelism.tensor_parallel_degree": 1,
    "parallelism.context_parallel_degree": 1, "parallelism.pipeline_parallel_degree": 1,
    "parallelism.expert_parallel_degree": 1, "parallelism.expert_tensor_parallel_degree": 1,
    "parallelism.pipeline_parallel_schedule": "1F1B", "parallelism.pipeline_parallel_microbatch_size": 1,
    "parallelism.module_fqns_per_model_part": None, "parallelism.pipeline_parallel_layers_per_stage": None,
    "parallelism.expert_parallel_comm_backend": "standard", "training.local_batch_size": 8,
    "training.global_batch_size": -1, "training.seq_len": 2048, "activation_checkpoint.mode": "selective",
    "model.converters": [], "optimizer.implementation": "fused", "compile.enable": False,
    "training.enable_cpu_offload": False, "training.disable_cuda_graphs": False,
}
TOML_SELECTIVE_AC_OPTION = "2"
"""torchtitan <= 0.2.2's selective_ac_option when a job leaves it out: every second layer fully
recomputed (v0.2.2 torchtitan/config/job_config.py ActivationCheckpoint.selective_ac_option; v0.1.0
torchtitan/config_manager.py, the same). 0.3.0's activation_checkpoint:selective has no option: it
is per-op (SelectiveAC in torchtitan/distributed/activation_checkpoint.py)."""
USED = set(DEFAULTS) | {"model.name", "model.flavor", "job.config_file", "activation_checkpoint.selective_ac_option",
                        "quantize.linear.float8.recipe_name", "float8.recipe_name"}

# The types torchtitan's config dataclasses declare for the keys planner reads: v0.2.2
# torchtitan/config/job_config.py (Model, Training, Parallelism, ActivationCheckpoint, Compile,
# Optimizer, Float8Linear, Job), v0.1.0 torchtitan/config_manager.py (Float8.recipe_name), 0.3.0
# torchtitan/config/configs.py (TrainingConfig, ParallelismConfig, CompileConfig). A tuple is a
# Literal's values; "int|None" fields (layers_per_stage) have no None in TOML or on the command line.
_INT, _BOOL, _STR, _STRS, _PARTS = "int", "bool", "str", "list[str]", "list[list[str]]"
_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
TYPES: dict[str, object] = {
    **{f"parallelism.{k}": _INT for k in (
        "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
        "context_parallel_degree", "pipeline_parallel_degree", "expert_parallel_degree",
        "expert_tensor_parallel_degree", "pipeline_parallel_microbatch_size", "pipeline_parallel_layers_per_stage")},
    **{f"training.{k}": _INT for k in ("local_batch_size", "global_batch_size", "seq_len")},
    "parallelism.fsdp_reshard_after_forward": ("default", "always", "never"),
    "parallelism.pipeline_parallel_schedule": _STR,
    "parallelism.module_fqns_per_model_part": _PARTS,
    "parallelism.expert_parallel_comm_backend": ("standard", "deepep"),
    "training.enable_cpu_offload": _BOOL, "training.disable_cuda_graphs": _BOOL, "compile.enable": _BOOL,
    "activation_checkpoint.mode": ("selective", "full", "memory_budget", "none"),
    "activation_checkpoint.selective_ac_option": _STR,
    "model.name": _STR, "model.flavor": _STR, "model.converters": _STRS, "job.config_file": _STR,
    "quantize.linear.float8.recipe_name": _RECIPES, "float8.recipe_name": _RECIPES,
}
OPTIMIZER_IMPLEMENTATIONS = {
    "toml": ("for-loop", "foreach", "fused"),  # v0.2.2 job_config.py Optimizer.implementation
    "cli": ("for-loop", "foreach", "fused", "fused_opt_states_bf16"),  # 0.3.0 optimizer.py OptimizersContainer.Config
}

CONVERTERS = {
    "0.1.0": ("float8", "mx"),
    "0.2.x": ("quantize.linear.float8", "quantize.grouped_mm.float8", "quantize.linear.mx", "quantize.grouped_mm.mx"),
}
"""The model converters torchtitan registers (register_model_converter in
torchtitan/components/quantization/float8.py and mx.py, v0.1.0 and v0.2.0-v0.2.2); any other name
is a KeyError in ModelConvertersContainer (torchtitan/protocols/model_converter.py)."""
FP8_CONVERTERS = {"float8", "mx", "quantize.linear.float8", "quantize.linear.mx"}
"""Converters that put the linear layers in FP8/MXFP8 (planner's precision=fp8). The grouped_mm
ones convert only the MoE experts' grouped GEMMs."""
IGNORED_SECTIONS = ("job.", "profiling.", "metrics.", "optimizer.", "lr_scheduler.", "checkpoint.", "validation.",
                    "comm.", "debug.", "dataloader.", "fault_tolerance.", "experimental.", "memory_estimation.",
                    "quantize.", "lr-scheduler.", "hf_assets_path", "dump_folder", "metrics", "model.hf_assets_path",
                    "training.dataset", "training.steps", "training.max_norm", "training.dataset_path",
                    "training.gc_freq", "training.dtype", "training.mixed_precision", "training.seed")
SINGLE_STAGE = {"gpipe"} | {s.torchtitan.lower() for s in REGISTRY if s.torchtitan is not None and s.vpp[1] == 1
                             and s.torchtitan_min_vpp == 1}
"""torch.distributed.pipelining's single-stage schedules: GPipe, which planner does not model, and
those of the records that run one stage per rank."""
MULTI_STAGE = {"loopedbfs"} | {s.torchtitan.lower() for s in REGISTRY
                              if s.torchtitan is not None and (s.vpp[0] > 1 or s.torchtitan_min_vpp > 1)}
"""torch.distributed.pipelining's multi-stage schedules: LoopedBFS, which planner does not model,
and those of the records that run two or more stages per rank."""


@dataclass
class TorchtitanArgs:
    kind: str
    """'toml' (<= 0.2.2) or 'cli' (0.3.0)."""
    values: dict[str, Any]
    """section.key -> value (dashes in CLI keys read as underscores)."""
    module: str | None = None
    config: str | None = None
    launcher: dict[str, str] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)


def read_toml_text(text: str, label: str) -> TorchtitanArgs:
    check_flow_nesting(text, label)  # tomllib recurses once per bracket
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlannerError(f"'{label}' is not TOML planner can read: {exc}.") from None
    except RecursionError:  # what the scan cannot see (none known): the same paragraph
        raise nesting_error(label) from None
    values: dict[str, Any] = {}

    def walk(prefix, obj, depth):
        if depth > 8:
            raise PlannerError(f"'{label}' nests tables more than 8 deep.")
        for k, v in obj.items():
            key = f"{prefix}.{k}" if prefix else k
            if isinstance(v, dict) and key not in TYPES:  # a key planner reads keeps a table, refused below
                walk(key, v, depth + 1)
            else:
                values[key] = v

    walk("", data, 0)
    return TorchtitanArgs("toml", values)


def _type_text(kind) -> str:
    if isinstance(kind, tuple):
        return "one of " + ", ".join(repr(c) for c in kind)
    return {_INT: "an integer", _BOOL: "true or false", _STR: "a string", _STRS: "a list of strings",
            _PARTS: "a list of lists of module names"}[kind]


def _has_type(value, kind) -> bool:
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _STR:
        return isinstance(value, str)
    if kind == _STRS:
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    if kind == _PARTS:
        return isinstance(value, list) and all(_has_type(x, _STRS) for x in value)
    return isinstance(value, str) and value in kind


def _shown(value) -> str:
    return excerpt(repr(value))


def check_types(args: TorchtitanArgs) -> None:
    """Refuse a value of a key planner reads that is not of the type torchtitan declares for it
    (:data:`TYPES`): torchtitan would refuse it too (tyro on the command line; on a TOML, the code
    that uses the value), or, worse, planner would read a default in its place. Converter names
    must be registered ones of one torchtitan version (:data:`CONVERTERS`); a selective_ac_option
    must be 'op' or a layer count (v0.2.2 _apply_ac_to_transformer_block's ValueError)."""
    where = "torchtitan <= 0.2.2's job_config.py" if args.kind == "toml" else "torchtitan's config dataclasses"
    kinds = {**TYPES, "optimizer.implementation": OPTIMIZER_IMPLEMENTATIONS[args.kind]}
    for key, kind in kinds.items():
        if key in args.values and not _has_type(args.values[key], kind):
            raise PlannerError(f"{key} = {_shown(args.values[key])}: {where} declares it {_type_text(kind)}, and "
                               "planner will not guess what the job trains with.", hint=f"Give {key} {_type_text(kind)}.")
    option = args.values.get("activation_checkpoint.selective_ac_option")
    if option is not None and option != "op" and not option.isdigit():
        raise PlannerError(f"activation_checkpoint.selective_ac_option = {_shown(option)}: torchtitan accepts 'op' "
                           "(per-op selective AC) or a layer count N (every N-th layer), and refuses anything else "
                           "(ValueError in _apply_ac_to_transformer_block).", hint="Give \"op\" or a number as a string.")
    converters = args.values.get("model.converters") or []
    unknown = [c for c in converters if not any(c in names for names in CONVERTERS.values())]
    if unknown:
        known = "; ".join(f"{v}: {', '.join(names)}" for v, names in CONVERTERS.items())
        raise PlannerError(f"model.converters names {_shown(unknown[0])}, a converter torchtitan does not register "
                           f"(KeyError in ModelConvertersContainer). Registered: {known}.",
                           hint="Name a registered converter, or drop it.")
    if not any(set(converters) <= set(names) for names in CONVERTERS.values()):
        raise PlannerError(f"model.converters = {_shown(converters)} mixes torchtitan 0.1.0's names (float8, mx) with "
                           "0.2.x's (quantize.linear.*, quantize.grouped_mm.*): no torchtitan version registers both.",
                           hint="Use the names of the torchtitan version the job runs on.")


def _is_trainer(word: str) -> bool:
    return word == "torchtitan.train" or word.endswith("torchtitan/train.py")


def read_cli_argv(argv: list[str]) -> TorchtitanArgs:
    """A 0.3.0 (or 0.2.x) trainer command line: --module/--config, --section.key VALUE (or =VALUE),
    --section.flag / --section.no-flag switches, and the activation_checkpoint:MODE subcommand."""
    values: dict[str, Any] = {}
    out = TorchtitanArgs("cli", values)
    i = 0
    while i < len(argv):
        w = argv[i]
        i += 1
        m = re.fullmatch(r"activation[-_]checkpoint:([a-z_-]+)", w)
        if m:
            values["activation_checkpoint.mode"] = m.group(1).replace("-", "_")
            continue
        if not w.startswith("--"):
            out.unknown.append(f"{w} (not a torchtitan option)")
            continue
        key, eq, inline = w[2:].partition("=")
        key = key.replace("-", "_")
        has_value = eq or (i < len(argv) and not argv[i].startswith("--")
                           and not re.fullmatch(r"activation[-_]checkpoint:.*", argv[i]))
        if key in ("module", "config"):
            if not has_value:
                raise PlannerError(f"--{key} needs a value (ConfigManager requires --module and --config).")
            val = inline if eq else argv[i]
            i += 0 if eq else 1
            setattr(out, key, val)
            continue
        if key == "parallelism.module_fqns_per_model_part":
            parts = []
            if eq:
                parts.append(inline)
            while i < len(argv) and not argv[i].startswith("--") and ":" not in argv[i]:
                parts.append(argv[i])
                i += 1
            values[key] = [p.split(",") for p in parts]
            continue
        if not has_value:
            section, _, name = key.rpartition(".")
            if name.startswith("no_"):
                values[f"{section}.{name[3:]}"] = False
            else:
                values[key] = True
            continue
        val = inline if eq else argv[i]
        i += 0 if eq else 1
        values[key] = _scalar(val, key)
    return out


def _scalar(text: str, key: str):
    """A command-line value as tyro parses it for the field's declared type; text that does not
    parse stays text, for :func:`check_types` to refuse."""
    kind = TYPES.get(key)
    if kind == _INT:
        return int(text) if re.fullmatch(r"-?[0-9]+", text) else text
    if kind == _BOOL:
        return text.lower() == "true" if text.lower() in ("true", "false") else text
    if isinstance(kind, tuple) or kind == _STR:
        return text
    if kind == _STRS:
        return [t for t in text.split(",") if t]
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if key in ("model.converters", "compile.components"):
        return [t for t in text.split(",") if t]
    return text


def read_torchtitan_text(text: str, label: str, environ=None, args=()) -> TorchtitanArgs:
    if label.endswith(".toml") or re.match(r"\s*(#.*\n\s*)*\[[A-Za-z_.]+\]", text):
        return read_toml_text(text, label)

    run = run_script(text, environ=environ, args=args)
    found = []
    for c in run.commands:
        for i, w in enumerate(c.argv):
            if _is_trainer(w):
                found.append((c, i))
                break
    if found:
        cmd, idx = found[0]
        out = read_cli_argv(cmd.argv[idx + 1:])
        out.launcher.update(torchrun_options(cmd.argv[:idx]))
        if len(found) > 1:
            out.notes.append(f"the script starts {len(found)} torchtitan trainers; planner reads the first")
    else:
        words = [w for c in run.commands for w in c.argv]
        if not words or not words[0].startswith("--"):
            raise PlannerError(
                "Found no torchtitan job in the file: it is not TOML, no command it runs starts torchtitan.train, and it "
                "is not an argument list (--module M --config F ...).",
                hint="Give a TOML job file (torchtitan <= 0.2.2), the launch script, or the trainer's arguments.")
        out = read_cli_argv(words)
    out.unresolved = list(run.unresolved)
    out.notes = list(run.notes) + out.notes
    return out


@dataclass
class TorchtitanJob:
    source: str
    args: TorchtitanArgs
    model: Any
    model_source: str
    hardware: Any
    job: Any
    plan: Any
    notes: list[str]
    defaults_used: list[str]
    assumptions: dict = field(default_factory=dict)
    """What the job sets of planner's Assumptions (:func:`launch_assumptions`)."""
    hardware_source: str = "--hw"
    """Where the hardware came from (planner.launchers.common.launch_hardware)."""
    gpus_source: str = "--gpus"
    """Where the job's GPU count came from (planner.launchers.common.launch_world, or the degrees)."""


def _model_for(args: TorchtitanArgs):
    if args.kind == "toml" or "model.name" in args.values:
        key = (args.values.get("model.name"), args.values.get("model.flavor"))
        for name, pair in FLAVORS.items():
            if pair == key:
                return name, f"[model] {key[0]} {key[1]}"
    if args.module and args.config:
        for name, pair in TORCHTITAN_CONFIGS.items():
            if pair == (args.module.rsplit(".", 1)[-1], args.config):
                return name, f"--module {args.module} --config {args.config}"
        stem = {"llama3_8b": "llama3.1-8b", "llama3_70b": "llama3.1-70b", "llama3_405b": "llama3.1-405b",
                "deepseek_v3_671b": "deepseek-v3", "qwen3_30b_a3b": "qwen3-30b-a3b"}
        for prefix, name in stem.items():
            if args.config.startswith(prefix):
                return name, f"--config {args.config}"
    return None, None


class _Fields:
    """A launch's values, each key it leaves out read as DEFAULTS (torchtitan's dataclass default) and
    recorded in ``used``, once per read and in order (the list reported as defaults follows it)."""

    def __init__(self, values: dict[str, Any]):
        self.values = values
        self.used: list[str] = []

    def val(self, key: str):
        if key in self.values:
            return self.values[key]
        self.used.append(key)
        return DEFAULTS[key]

    def num(self, key: str) -> int:
        """An integer field (torchtitan's config declares these int; a bool is not one)."""
        x = self.val(key)
        if isinstance(x, bool) or not isinstance(x, int):
            raise PlannerError(f"{key} = {x!r}: torchtitan expects an integer.")
        return x


def plan_values(args: TorchtitanArgs, model, world: int) -> tuple[dict, dict, list[str], list[str]]:
    """(plan mapping, job mapping, notes, keys read as torchtitan's defaults). One helper per group
    of config fields, called in a fixed order (the defaults list and notes follow it)."""
    f = _Fields(args.values)
    notes: list[str] = []
    rep, shard, tp, cp, pp, ep = _degrees(f, model, world)
    etp = _expert_tp(f, model, notes)
    dp = rep * shard
    sharding = _sharding(f, rep, shard, cp)
    schedule, vpp, layout = _pipeline(f, model, pp, notes)
    # a pipeline's micro-batch is its own field; without one, torchtitan runs the local batch at once
    mbs = f.num("parallelism.pipeline_parallel_microbatch_size") if pp > 1 else f.num("training.local_batch_size")
    gbs = _global_batch(f, dp)
    recompute = _recompute(args, f)
    fp8 = _fp8(args, f)
    # 0.3.0's OptimizersContainer.Config implementation "fused_opt_states_bf16" keeps Adam's states in bf16
    moments = "bf16" if f.val("optimizer.implementation") == "fused_opt_states_bf16" else "fp32"
    dispatcher = _dispatcher(args, f, model)
    _not_modeled(args, f)
    plan = dict(tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, etp=etp, mbs=mbs,
                sharding=sharding, recompute=recompute, precision="fp8" if fp8 else "bf16", moments=moments,
                layout=layout, dispatcher=dispatcher, schedule=plan_schedule(schedule) if pp > 1 else None)
    job = {"global_batch": gbs, "seq_len": f.num("training.seq_len"), "precisions": ["fp8" if fp8 else "bf16"]}
    used_defaults = f.used
    if args.kind == "cli":  # listed as not modeled instead (_not_modeled, _fp8)
        used_defaults = [k for k in used_defaults if k not in ("training.disable_cuda_graphs", "compile.enable", "model.converters",
                                                               "training.enable_cpu_offload")]
    return plan, job, notes, used_defaults


def _degrees(f: _Fields, model, world: int) -> tuple[int, int, int, int, int, int]:
    """(replicate, shard, tp, cp, pp, ep) from Parallelism's *_degree fields (v0.2.2
    torchtitan/config/job_config.py Parallelism; 0.3.0 ParallelismConfig). data_parallel_shard_degree
    -1 takes the GPUs the other degrees leave, which must divide evenly (ParallelDims,
    torchtitan/distributed/parallel_dims.py). A dense model has no expert parallelism."""
    rep, shard = f.num("parallelism.data_parallel_replicate_degree"), f.num("parallelism.data_parallel_shard_degree")
    tp, cp, pp = f.num("parallelism.tensor_parallel_degree"), f.num("parallelism.context_parallel_degree"), \
        f.num("parallelism.pipeline_parallel_degree")
    ep = f.num("parallelism.expert_parallel_degree") if model.is_moe else 1
    if min(rep, tp, cp, pp, ep) < 1 or (shard < 1 and shard != -1):
        raise PlannerError("A torchtitan parallel degree is below 1 (only data_parallel_shard_degree may be -1).")
    if shard == -1:
        rest = rep * cp * tp * pp
        if world % rest:
            raise PlannerError(f"data_parallel_shard_degree -1 leaves {world} GPUs / {rest} (replicate*cp*tp*pp): not whole "
                               "(ParallelDims).")
        shard = world // rest
    return rep, shard, tp, cp, pp, ep


def _expert_tp(f: _Fields, model, notes: list[str]) -> int | None:
    """Parallelism.expert_tensor_parallel_degree (v0.2.2; 0.3.0 has none, so other than 1 is noted)."""
    etp = f.num("parallelism.expert_tensor_parallel_degree") if model.is_moe else None
    if etp not in (None, 1):
        notes.append(f"expert_tensor_parallel_degree {etp}: torchtitan 0.3.0 has none")
    return etp


def _sharding(f: _Fields, rep: int, shard: int, cp: int) -> str:
    """planner's sharding of torchtitan's data-parallel mesh: replicas of unsharded copies are DDP,
    replicas of shards HSDP (FSDP's mesh spans shard x cp, ParallelDims' dp_shard_cp), else FSDP, which
    Parallelism.fsdp_reshard_after_forward = "never" turns into ZeRO-2 (parameters kept after forward)."""
    if shard == 1 and rep > 1:
        return "ddp"
    if rep > 1:
        return f"hsdp:{shard * cp}"
    return "zero2" if f.val("parallelism.fsdp_reshard_after_forward") == "never" else "fsdp"


def _pipeline(f: _Fields, model, pp: int, notes: list[str]) -> tuple[str, int, str | None]:
    """(schedule name, vpp, layout) from Parallelism's pipeline_parallel_schedule and
    module_fqns_per_model_part (one list of module names per stage). Without the list torchtitan
    splits the layers itself (pipeline_module_split, torchtitan/distributed/pipeline_parallel.py):
    planner reads two stages per rank for a multi-stage schedule and Megatron's even split. A schedule
    name torch.distributed.pipelining does not know is refused, as get_schedule_class refuses it."""
    schedule = str(f.val("parallelism.pipeline_parallel_schedule"))
    vpp, layout = 1, None
    if pp <= 1:
        return schedule, vpp, layout
    fqns = f.val("parallelism.module_fqns_per_model_part")
    if fqns:
        layout = format_layout(tuple(_stage_symbols(part, model) for part in fqns))
        vpp = max(len(fqns) // pp, 1)
    elif schedule.lower() in MULTI_STAGE:
        vpp = 2
        notes.append("no module_fqns_per_model_part: torchtitan splits the layers itself (two stages per rank for "
                     "a multi-stage schedule); planner reads Megatron's even split")
    if schedule.lower() not in SINGLE_STAGE | MULTI_STAGE:
        raise PlannerError(f"pipeline_parallel_schedule {schedule!r} is not a torch.distributed.pipelining schedule "
                           "torchtitan accepts.")
    if plan_schedule(schedule) is None:
        notes.append(f"schedule {schedule} modeled as {'interleaved 1F1B' if vpp > 1 else '1F1B'} (planner has no "
                     "GPipe or looped breadth-first schedule)")
    return schedule, vpp, layout


def _global_batch(f: _Fields, dp: int) -> int:
    """Training.global_batch_size; -1 (the default) is local_batch_size x the data-parallel degree."""
    local = f.num("training.local_batch_size")
    gbs = f.num("training.global_batch_size")
    return local * dp if gbs == -1 else gbs


def _recompute(args: TorchtitanArgs, f: _Fields) -> str:
    """ActivationCheckpoint.mode: full, none, or selective per op; selective every N-th layer and
    memory_budget are not modeled (listed, read as none)."""
    mode = str(f.val("activation_checkpoint.mode"))
    # torchtitan 0.3's activation_checkpoint:selective is per-op (SelectiveAC); 0.1-0.2 choose it with
    # selective_ac_option = "op" (digits: every N-th layer fully), and leave out means "2".
    option = f.values.get("activation_checkpoint.selective_ac_option")
    if option is None and mode == "selective":
        option = "op" if args.kind == "cli" else TOML_SELECTIVE_AC_OPTION
        if args.kind != "cli":
            f.used.append("activation_checkpoint.selective_ac_option")
    if mode in ("full", "none"):
        return mode
    if mode == "selective" and option == "op":
        return "op"
    what = f"selective every {option} layers" if mode == "selective" else mode
    args.unknown.append(f"activation_checkpoint {what} (torchtitan's layer-frequency or budgeted AC: not modeled "
                        "by planner, read as none)")
    return "none"


def _fp8(args: TorchtitanArgs, f: _Fields) -> bool:
    """Whether the linear layers train in FP8: a Model.converters entry of FP8_CONVERTERS, or a 0.3.0
    config whose name says float8/mxfp8/fp8 (llama3_405b's too: TORCHTITAN_CONFIGS). Grouped-GEMM-only
    converters are listed as not modeled."""
    converters = f.val("model.converters") or []
    if any(c.startswith("quantize.grouped_mm.") for c in converters) and not FP8_CONVERTERS & set(converters):
        args.unknown.append("model.converters " + ", ".join(converters) + " (FP8 for the MoE experts' grouped GEMMs "
                            "only: not modeled by planner, read as bf16)")
    return bool(FP8_CONVERTERS & set(converters)) or bool(
        args.config and re.search(r"float8|mxfp8|fp8", args.config)) or (
        args.kind == "cli" and args.config == "llama3_405b")


def _dispatcher(args: TorchtitanArgs, f: _Fields, model) -> str | None:
    """A MoE's token dispatcher: Parallelism.expert_parallel_comm_backend "deepep" or a 0.3.0 config named
    for DeepEP / HybridEP, else all-to-all. None for a dense model."""
    if not model.is_moe:
        return None
    if f.val("parallelism.expert_parallel_comm_backend") == "deepep" or (args.config and "deepep" in args.config):
        return "deepep"
    return "hybridep" if args.config and "hybridep" in args.config else "alltoall"


def _not_modeled(args: TorchtitanArgs, f: _Fields) -> None:
    """Lists what the launch turns on that planner does not model: Compile.enable (torch.compile),
    Training.enable_cpu_offload (FSDP's CPU offload) and, on 0.3.0, CUDA graphs (on unless
    training.disable_cuda_graphs)."""
    if f.val("compile.enable"):
        args.unknown.append("compile.enable (torch.compile: not modeled by planner)")
    if f.val("training.enable_cpu_offload"):
        args.unknown.append("training.enable_cpu_offload (FSDP CPU offload of parameters, gradients and optimizer: "
                            "not modeled by planner)")
    if args.kind == "cli" and not f.val("training.disable_cuda_graphs"):
        args.unknown.append("CUDA graphs (torchtitan 0.3.0's default, training.disable_cuda_graphs false): not modeled "
                            "by planner")


def plan_schedule(name: str) -> str | None:
    """planner's schedule for a torch.distributed.pipelining schedule name (matched without case,
    as torchtitan's get_schedule_class does), the inverse of the writers' torchtitan_schedule;
    None for the schedules planner does not model (GPipe, LoopedBFS)."""
    s = by_torchtitan_name(name)
    return None if s is None else s.name


FLOAT8_RECIPE_KEYS = ("quantize.linear.float8.recipe_name", "float8.recipe_name")
"""Where a torchtitan job names torchao's float8 recipe: [quantize.linear.float8] (0.2-0.3) or
[float8] (0.1)."""


def launch_assumptions(args: TorchtitanArgs, fp8: bool) -> dict:
    """The planner Assumptions a torchtitan job sets: its loss (cross_entropy over the upcast
    logits, compiled with the model when compile.enable is on, as torchtitan 0.2-0.3 do) and, for
    an FP8 plan, torchao's float8 recipe (recipe_name 'rowwise' -> fp8_recipe rowwise;
    'tensorwise' -> tensorwise, Float8LinearConfig's default). rowwise_with_gw_hp has no planner
    recipe: listed with the unread keys."""
    out: dict = {"cross_entropy": "torch_compiled" if args.values.get("compile.enable") else "torch"}
    name = next((args.values[k] for k in FLOAT8_RECIPE_KEYS if k in args.values), None)
    if not fp8 or name is None:
        return out
    if name in ("rowwise", "tensorwise"):
        return {**out, "fp8_recipe": name}
    args.unknown.append(f"float8 recipe_name {name!r} (torchao: not modeled by planner, costed as the hardware's "
                        "FP8 recipe)")
    return out


def _stage_symbols(part: list[str], model) -> str:
    out = ""
    for name in part:
        name = name.strip()
        if name == "tok_embeddings":
            out += "E"
        elif re.fullmatch(r"layers\.[0-9]+", name):
            out += "t"
        elif name in ("norm",):
            continue
        elif name in ("output", "lm_head"):
            out += "L"
        else:
            raise PlannerError(f"module_fqns_per_model_part names {name!r}, a module planner does not place "
                               "(tok_embeddings, layers.N, norm, output/lm_head).")
    return out


def _classify(args: TorchtitanArgs) -> None:
    for key in args.values:
        if key in USED:
            continue
        if key.startswith(IGNORED_SECTIONS):
            args.ignored.append(key)
        else:
            args.unknown.append(f"{key} (not modeled by planner)")


def job_from_torchtitan(source, *, model: str | None = None, hw: str | None = None, gpus: int | None = None,
                        global_batch: int | None = None, seq_len: int | None = None, precision: str | None = None,
                        job_file=None, domain_fill=None, memory_margin_gib=None, environ=None,
                        script_args=()) -> TorchtitanJob:
    if isinstance(source, Path):
        text, label = read_text(source, "torchtitan job", MAX_SCRIPT_BYTES), str(source)
    else:
        text, label = source, "<file>"
    args = read_torchtitan_text(text, label, environ, script_args)
    cfg_file = args.values.get("job.config_file")
    if args.kind == "cli" and isinstance(cfg_file, str):
        path = Path(cfg_file)
        if not path.is_absolute() and isinstance(source, Path):
            path = source.parent / path if (source.parent / path).exists() else path
        if path.exists():
            base = read_toml_text(read_text(path, "torchtitan job", MAX_SCRIPT_BYTES), str(path))
            args.values = {**base.values, **args.values}
            args.kind = "toml"
            args.notes.append(f"--job.config_file {cfg_file}: its TOML read under the command line's overrides")
        else:
            args.notes.append(f"--job.config_file {cfg_file} not found: only the command line's overrides are read")
    check_types(args)
    _classify(args)
    if model:
        m, model_source = load_model(model), "--model"
    else:
        name, model_source = _model_for(args)
        if name is None:
            raise PlannerError(f"planner cannot tell which model '{label}' trains.",
                               hint="Pass --model (a catalog name, model YAML or config.json).")
        m = load_model(name)
    h, hardware_source = launch_hardware(hw, m, "the job", text=text)
    world, world_source = gpus, "--gpus"
    if world is None:
        world, launch_source = launch_world(args.launcher, {}, text)
        world_source = launch_source or "the parallelism degrees' product"  # None with world None
    if world is None:
        v = args.values
        degrees = [v.get(f"parallelism.{k}", DEFAULTS[f"parallelism.{k}"]) for k in (
            "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
            "context_parallel_degree", "pipeline_parallel_degree")]
        if all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in degrees):
            world = 1
            for d in degrees:
                world *= d  # ParallelDims: dp_replicate * dp_shard * cp * tp * pp = world
    if world is None:
        raise PlannerError("The job does not give the number of GPUs (no torchrun line with numeric --nproc-per-node "
                           "and --nnodes).", hint="Pass --gpus.")
    plan_map, job_map, notes, defaults_used = plan_values(args, m, world)
    if args.kind == "cli" and defaults_used:
        notes.append("the command line leaves " + ", ".join(defaults_used) + " to the registry function "
                     f"{args.module}.{args.config}; planner reads torchtitan's dataclass defaults for them")
    j = resolve_job(m, gpus=world, global_batch=global_batch or job_map["global_batch"],
                    seq_len=seq_len or job_map["seq_len"], precision=precision or ",".join(job_map["precisions"]),
                    job_file=job_file, domain_fill=domain_fill, memory_margin_gib=memory_margin_gib)
    plan = Plan.from_mapping({k: v for k, v in plan_map.items() if v is not None})
    canon = export_canonical(plan, m, h, j)
    return TorchtitanJob(label, args, m, model_source, h, j, canon,
                         list(args.notes) + notes + header_disagreement(text, h, j.gpus), defaults_used,
                         launch_assumptions(args, canon.precision == "fp8"), hardware_source, world_source)
