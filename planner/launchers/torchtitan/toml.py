"""torchtitan job files (TOML) for torchtitan <= 0.2.2.

torchtitan 0.3.0 reads no TOML: its config system was replaced by Python ``config_registry``
functions plus ``--module/--config`` and CLI overrides (upstream commit 9810191, "[BC Breaking]
Config System Refactor: TOML to Python Dataclass Registry", after tag v0.2.2; 0.3.0's
``ConfigManager`` answers ``--job.config_file`` with "--module is required"). So planner writes two
forms: the 0.3.0 invocation (:mod:`planner.launchers.torchtitan.write`, ``--format torchtitan``)
and this legacy TOML (``--format torchtitan-toml``, ``torchrun ... -m torchtitan.train
--job.config_file FILE`` on torchtitan 0.2.x). ``planner check --torchtitan FILE`` reads both back
(:mod:`planner.launchers.torchtitan.read`).

The TOML holds the plan's sections only ([model] name/flavor/converters, [training] batch and
sequence, [parallelism], [activation_checkpoint], [quantize.linear.*] for FP8); the rest (dataset,
optimizer hyperparameters, checkpointing) keeps torchtitan's defaults: add yours. Differences from
0.3.0 that matter here: FP8 is a converter listed in [model] (``quantize.linear.float8`` with
torchao's float8 recipe on Hopper, ``quantize.linear.mx`` with MXFP8 on Blackwell: the names 0.2.x
registers, :data:`FP8_CONVERTER`), the pipeline parts' last module is ``output`` (0.3.0:
``lm_head``), DeepEP is ``expert_parallel_comm_backend = "deepep"``, and there are no bf16 Adam
states and no CUDA graphs.
"""

from __future__ import annotations

import json

from planner import __version__
from planner.errors import PlannerError, Violation
from planner.launchers.checks import violations_with
from planner.launchers.common import catalog_edits, prediction_lines
from planner.launchers.common import comment_text as _c
from planner.launchers.torchtitan.rules import own_violations, torchtitan_batch, torchtitan_dims, torchtitan_schedule
from planner.launchers.torchtitan.write import _fqns
from planner.rules import violations_error

TORCHTITAN_TOML_VERSION = "0.2.2"
TOML_RELEASE = "torchtitan-0.2.2"
"""The release --format torchtitan-toml is written for by default: the last that reads TOML job files."""


def check_toml_release(profile) -> None:
    """Refuse a release that no longer reads TOML job files (0.3.0 launches with --module/--config)."""
    if profile.version_tuple > (0, 2, 2):
        raise PlannerError(f"--format torchtitan-toml writes a TOML job file, which {profile.title} no longer reads "
                           "(torchtitan 0.3.0 launches with --module/--config).",
                           hint="Use --format torchtitan, or --software torchtitan-0.2.2.")
    if profile.version_tuple < (0, 2, 0):
        # torchtitan/config_manager.py at v0.1.0: Float8 is [float8] with the converter 'float8', MXFP8
        # [mx] with 'mx', compile is training.compile, pipeline stages are pipeline_parallel_split_points,
        # and there is no expert parallelism: the 0.2.x job file this writer writes is not its.
        raise PlannerError(f"--format torchtitan-toml writes a torchtitan 0.2.x job file, whose sections {profile.title} "
                           "names differently ([float8] and the converter 'float8', training.compile, "
                           "pipeline_parallel_split_points).",
                           hint="Use --software torchtitan-0.2.2, or write the 0.1.0 job file by hand from the plan.")

FLAVORS: dict[str, tuple[str, str]] = {
    "llama3.1-8b": ("llama3", "8B"),
    "llama3.1-70b": ("llama3", "70B"),
    "llama3.1-405b": ("llama3", "405B"),
    "deepseek-v3": ("deepseek_v3", "671B"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B"),
    "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
    "gpt-oss-120b": ("gpt_oss", "120b"),
}
"""Catalog model -> torchtitan 0.2.2's [model] name and flavor (torchtitan/models/<name>/__init__.py)."""

FP8_CONVERTER = {"mxfp8": "quantize.linear.mx", None: "quantize.linear.float8"}
"""The [model] converter of an FP8 plan, by the hardware's FP8 recipe (MXFP8, else torchao's
float8): the names torchtitan 0.2.0-0.2.2 register (register_model_converter in
torchtitan/components/quantization/float8.py and mx.py). 0.1.0's ``float8``/``mx`` are a KeyError
in 0.2.x's ModelConvertersContainer."""

# 0.3.0 rules that the TOML form replaces with its own (model by flavor, FP8 by converter, DeepEP).
_REPLACED = {"torchtitan-model", "torchtitan-fp8", "torchtitan-precision", "torchtitan-dispatcher"}


def flavor_for(model) -> tuple[str, str] | None:
    for name in [model.name, *getattr(model, "aliases", [])]:
        if name in FLAVORS:
            return FLAVORS[name]
    return None


def toml_own_violations(checked, torchtitan_config: str | None = None) -> list[Violation]:
    """torchtitan's own rules for a release that reads TOML job files (<= 0.2.2): the 0.3.0 rules
    it shares (not the config_registry ones: there FP8 is a [model] converter, the model a
    name and flavor, DeepEP a [parallelism] option), and its own. The registry's rules for
    --software of such a release (planner.launchers.registry.launcher_violations)."""
    out = [v for v in own_violations(checked, torchtitan_config) if v.rule not in _REPLACED]
    model, plan = checked.model, checked.plan
    if flavor_for(model) is None:
        out.append(Violation("torchtitan-model", f"torchtitan {TORCHTITAN_TOML_VERSION} has no model flavor for "
                             f"{model.name}.", hint="Use --format megatron or bridge."))
    elif (edits := catalog_edits(model)) and (found := flavor_for(model)):
        name, flavor = found
        out.append(Violation("torchtitan-model", f"torchtitan's {name} {flavor} flavor builds the catalog's {model.name}, "
                             "and this model differs from it (" + "; ".join(edits) + "): the job would train the "
                             "catalog model.", hint="Use --format megatron, whose flags state the architecture."))
    if plan.moments == "bf16":
        out.append(Violation("torchtitan-moments", "moments=bf16: torchtitan 0.2.2's optimizer keeps fp32 Adam states "
                             "(implementation for-loop, foreach or fused).", hint="Set moments=fp32."))
    if model.is_moe and plan.dispatcher == "hybridep" and checked.deg.ep > 1:
        out.append(Violation("torchtitan-dispatcher", "dispatcher=hybridep: torchtitan 0.2.2's expert_parallel_comm_backend "
                             "is standard or deepep.", hint="Use dispatcher=alltoall or deepep."))
    return out


def reads_toml(profile) -> bool:
    """Whether a torchtitan release launches from a TOML job file (every release up to 0.2.2)."""
    return profile is not None and profile.launcher == "torchtitan" and profile.version_tuple <= (0, 2, 2)


def toml_violations(setup) -> list[Violation]:
    """What torchtitan 0.2.2 cannot run of a plan: the 0.3.0 rules it shares, and its own."""
    return violations_with(toml_own_violations, setup)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=True)  # a TOML basic string: quotes and controls escaped


def toml_sections(setup) -> dict[str, dict[str, object]]:
    """The job file as {section: {key: value}} (section names dotted as in TOML)."""
    found = toml_violations(setup)
    if found:
        raise violations_error(found, f"torchtitan {TORCHTITAN_TOML_VERSION}")
    model, hw, job, plan, deg = setup.model, setup.hw, setup.job, setup.plan, setup.deg
    flavor_found = flavor_for(model)
    assert flavor_found is not None, "toml_violations refuses a model with no flavor (torchtitan-model)"
    name, flavor = flavor_found
    dims = torchtitan_dims(plan, deg)
    local, pp_micro = torchtitan_batch(plan, deg, job, f"torchtitan {TORCHTITAN_TOML_VERSION}")
    fp8 = (plan.precision or job.default_precision) == "fp8"
    sections: dict[str, dict[str, object]] = {
        "job": {"dump_folder": "./outputs", "description": f"{model.name}: {plan.to_string()} (planner)"},
        "model": {"name": name, "flavor": flavor, "converters": [FP8_CONVERTER.get(hw.fp8_recipe, FP8_CONVERTER[None])]
                  if fp8 else []},
        "training": {"local_batch_size": local, "global_batch_size": job.global_batch, "seq_len": job.seq_len},
        "parallelism": {
            "data_parallel_replicate_degree": dims["dp_replicate"],
            "data_parallel_shard_degree": dims["dp_shard"],
            "fsdp_reshard_after_forward": "never" if plan.sharding.kind == "zero2" else "default",
            "tensor_parallel_degree": dims["tp"],
            "context_parallel_degree": dims["cp"],
            "pipeline_parallel_degree": dims["pp"],
            "expert_parallel_degree": dims["ep"] if model.is_moe else 1,
            "expert_tensor_parallel_degree": 1,
        },
        "activation_checkpoint": ({"mode": "selective", "selective_ac_option": "op"} if plan.recompute.kind == "op"
                                  else {"mode": "full" if plan.recompute.kind == "full" else "none"}),
        "compile": {"enable": False},
    }
    p = sections["parallelism"]
    if model.is_moe:
        p["expert_parallel_comm_backend"] = "deepep" if plan.dispatcher == "deepep" else "standard"
    if plan.pp > 1:
        # The plan's own schedule (zero bubble, DualPipeV included): 0.2.2 looks the name up in
        # torch.distributed.pipelining (get_schedule_class), as 0.3.0 does.
        p["pipeline_parallel_schedule"] = torchtitan_schedule(setup.schedule)
        p["pipeline_parallel_microbatch_size"] = pp_micro
        p["module_fqns_per_model_part"] = [part.replace("lm_head", "output").split(",") for part in _fqns(setup)]
    if fp8 and hw.fp8_recipe == "mxfp8":
        sections["quantize.linear.mx"] = {"recipe_name": "mxfp8_cublas", "filter_fqns": ["output"]}
    elif fp8:
        # torchao's recipe the plan was costed with: rowwise when assumed, else tensorwise (the per-tensor
        # scaling whose GEMM ceiling planner's Hopper blockwise and per-tensor recipes share).
        recipe = "rowwise" if setup.assumptions.fp8_recipe == "rowwise" else "tensorwise"
        sections["quantize.linear.float8"] = {"recipe_name": recipe, "filter_fqns": ["output"]}
    return sections


def export_torchtitan_toml(setup, *, predictions: dict | None = None, torchtitan_config: str | None = None) -> str:
    """The TOML job file text (``torchtitan_config`` is 0.3.0's and has no use here)."""
    sections = toml_sections(setup)
    job = setup.job
    lines = [
        f"# torchtitan <= {TORCHTITAN_TOML_VERSION} job file written by planner {_c(__version__)} "
        "(planner export --format torchtitan-toml).",
        "# torchtitan 0.3.0 reads no TOML: for it use planner export --format torchtitan (--module/--config).",
        f"# model: {_c(setup.model.name)}   hardware: {_c(setup.hw.name)}   job: {job.gpus} GPUs, global batch "
        f"{job.global_batch}, seq {job.seq_len}",
        f"# plan: {_c(setup.plan.to_string())}",
    ]
    lines += [f"# predicted: {_c(ln)}" for ln in prediction_lines(predictions or {})]
    if (setup.plan.precision or job.default_precision) == "fp8" and setup.hw.fp8_recipe == "blockwise" \
            and setup.assumptions.fp8_recipe is None:
        lines.append("# note: torchao's tensorwise float8 here; planner costed Hopper's blockwise FP8 recipe, at the "
                     "same GEMM ceiling, with Transformer Engine's casts")
    lines += [f"# run: torchrun --nproc-per-node N --nnodes M ... -m torchtitan.train --job.config_file THIS_FILE "
              f"({job.gpus} GPUs); add your dataset, optimizer and checkpoint sections.", ""]
    for name, body in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml(v)}" for k, v in body.items()]
        lines.append("")
    return "\n".join(lines)
