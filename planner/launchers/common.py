"""What every exporter shares: the plan in its export-canonical form, predictions, and reading
plans from a ``planner search --save`` file.

``plans.json`` (written by ``planner search --save``; the minimal schema read here):

    {"model": "deepseek-v3" | {"name": ...,       # optional: used when --model is not given
               "spec_hash": ..., "spec": {...},   #   the model the search planned (search --save writes it)
               "file": ..., "file_sha256": ...},  #   the model file it was read from, and its content hash
     "hardware": "gb200-nvl72" | {"name": ...},   # optional: used when --hw is not given
     "job": {"gpus": 256, "global_batch": 8192, "seq_len": 4096, "precisions": ["bf16"]},  # optional
     "plans": [ {"plan": {"tp": 1, "pp": 4, ...} | "tp=1,pp=4,...",   # required, DESIGN.md §6 keys
                 "memory": {...}, "time": {...}},                       # optional predictions
               ... ]}

Plans are ranked in file order; ``--rank K`` is 1-based. The derived keys ``dp`` and ``edp`` may
be present: ``dp`` is checked, ``edp`` is recomputed and checked too.

The model of a saved search is the spec it stores (checked against its hash), so ``export --from``
exports the model the search planned, a model file or a catalog model edited with ``--set``
alike; when the search read a model file that has changed since, the saved search is refused
(its plans were ranked for the old file). A file with only a model name (older saves) resolves
the name through the catalog.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from planner.errors import PlannerError, PlanRuleError, excerpt
from planner.files import MAX_SAVED_BYTES, MAX_SPEC_BYTES, read_bytes
from planner.specs.catalog import load_hardware, load_model, model_file, read_json, spec_hash, validate_spec
from planner.specs.common import MAX_GLOBAL_BATCH, MAX_SEQ_LEN, GpuCount, NotBool, is_ascii_count
from planner.specs.layout import even_layout_symbols, format_layout, parse_layout
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

if TYPE_CHECKING:
    from planner.specs.hardware import HardwareSpec


class _Saved(BaseModel):
    """Base of the saved-search schema: finite numbers, booleans never numbers; keys planner does
    not read are kept (a saved search carries solver and timing details too)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)


_Num = Annotated[float, NotBool, Field(ge=0.0, le=1e30)]


class SavedTime(_Saved):
    """The `time` object of a saved plan: the numbers a script header shows."""

    step_time_s: Annotated[float, NotBool, Field(gt=0.0, le=1e12)] | None = None
    tokens_per_s_per_gpu: _Num | None = None
    model_tflops_per_gpu: _Num | None = None
    mfu: Annotated[float, NotBool, Field(ge=0.0, le=100.0)] | None = None
    bottleneck: Annotated[str, Field(max_length=200)] | None = None


class SavedMemory(_Saved):
    """The `memory` object of a saved plan."""

    peak_bytes: _Num | None = None
    capacity_bytes: _Num | None = None
    worst_stage: Annotated[int, NotBool, Field(ge=0, le=2**20)] | None = None
    fits: StrictBool | None = None


class SavedEntry(_Saved):
    plan: dict[str, Any] | Annotated[str, Field(max_length=16384)]
    memory: SavedMemory | None = None
    time: SavedTime | None = None

    @property
    def plan_text(self) -> str:
        if isinstance(self.plan, str):
            return self.plan
        return ",".join(f"{k}={v}" for k, v in self.plan.items())


class SavedName(_Saved):
    name: Annotated[str, Field(min_length=1, max_length=4096)]


class SavedModel(SavedName):
    """The model of a saved search: its name, and (from search --save) the spec it planned, the
    spec's hash and the file it was read from with that file's SHA-256."""

    spec_hash: Annotated[str, Field(max_length=64)] | None = None
    spec: dict[str, Any] | None = None
    file: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    file_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None


class SavedJob(_Saved):
    """The job of a saved search, bounded as JobSpec bounds the same fields (planner.specs.job):
    checked here, an edited count is blamed on the file and its field, not on a command-line
    option the user never gave."""

    gpus: GpuCount | None = None
    global_batch: Annotated[int, NotBool, Field(gt=0, le=MAX_GLOBAL_BATCH)] | None = None
    seq_len: Annotated[int, NotBool, Field(gt=0, le=MAX_SEQ_LEN)] | None = None
    precisions: list[Annotated[str, Field(max_length=16)]] | None = Field(None, max_length=8)
    domain_fill: GpuCount | None = None


class SavedSearch(_Saved):
    """A ``planner search --save`` file, as far as explain and export read it."""

    model: SavedModel | Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    hardware: SavedName | Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    job: SavedJob | None = None
    assumptions: dict[str, Any] | None = None
    software: SavedName | None = None
    """The release the search planned for (its --software, or the default it assumed); None in
    files written before planner knew releases, and for --target any."""
    plans: list[SavedEntry] = Field(min_length=1, max_length=10000)


@dataclass(frozen=True)
class SavedPlan:
    plan: Plan
    model: Any
    """The saved model entry (SavedModel, a name, or None); :func:`saved_model` resolves it."""
    hardware: str | None
    job: dict | None
    memory: dict | None
    time: dict | None
    edp: int | None
    assumptions: dict | None = None
    software: str | None = None
    """The saved search's software profile name (explain and export default to it)."""


def _name(entry: Any) -> str | None:
    if entry is None:
        return None
    if isinstance(entry, str):
        return entry
    return entry.name


def resolve_saved(path: Path, rank: int, *, model=None, hw=None, gpus=None, global_batch=None, seq_len=None,
                  precision=None, domain_fill=None) -> tuple[SavedPlan, tuple]:
    """Plan ``rank`` of a ``planner search --save`` file and what to run it with: the command
    line's model, hardware and job options where given, else the saved file's, as
    (model, hw, gpus, global_batch, seq_len, precision, domain_fill)."""
    saved = read_saved_plan(path, rank)
    if model is None:
        model = saved_model(saved.model, path)
    sj = saved.job or {}
    if precision is None and sj.get("precisions"):
        precision = ",".join(sj["precisions"])
    pick = lambda given, key: given if given is not None else sj.get(key)  # noqa: E731
    return saved, (model, hw or saved.hardware, pick(gpus, "gpus"),
                   pick(global_batch, "global_batch"), pick(seq_len, "seq_len"), precision,
                   pick(domain_fill, "domain_fill"))


_SAVED_HINT = ("Give a file written by 'planner search --save' (a JSON object whose 'plans' list holds objects "
               "with a 'plan' key).")


def read_saved_search(path: Path) -> SavedSearch:
    """A ``planner search --save`` file, checked against :class:`SavedSearch` (every number
    finite and in range) before anything of it is used."""
    data = read_json(Path(path), "saved search", MAX_SAVED_BYTES)
    if not isinstance(data.get("plans"), list) or not data["plans"]:
        raise PlannerError(f"'{path}' has no 'plans' list.", hint=_SAVED_HINT)
    try:
        return SavedSearch.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "constrained-")))
        value = err.get("input")
        shown = f" = {excerpt(repr(value))}" if isinstance(value, (int, float, bool, str)) else ""
        raise PlannerError(
            f"'{path}' is not a saved search planner can use: '{loc}'{shown}: "
            f"{err['msg'].removeprefix('Value error, ')}.",
            hint=_SAVED_HINT + " planner recomputes predictions; it never copies edited ones.",
        ) from None


def read_saved_plan(path: Path, rank: int) -> SavedPlan:
    """Plan number ``rank`` (1-based) of a ``planner search --save`` file."""
    saved = read_saved_search(path)
    plans = saved.plans
    if not 1 <= rank <= len(plans):
        raise PlannerError(f"--rank {rank} is out of range: '{path}' holds {len(plans)} plans (ranks 1..{len(plans)}).")
    entry = plans[rank - 1]
    raw = entry.plan
    if isinstance(raw, str):
        plan, edp = Plan.parse(raw), None
    else:
        plan = Plan.from_mapping(dict(raw))
        edp = plan.edp
    job = saved.job.model_dump(exclude_none=True, include={"gpus", "global_batch", "seq_len", "precisions",
                                                            "domain_fill"}) if saved.job else None
    return SavedPlan(plan, saved.model, _name(saved.hardware), job,
                     entry.memory.model_dump(exclude_none=True) if entry.memory else None,
                     entry.time.model_dump(exclude_none=True) if entry.time else None, edp, saved.assumptions,
                     _name(saved.software))


def _sha256(path: Path) -> str:
    return hashlib.sha256(read_bytes(path, "model", MAX_SPEC_BYTES)).hexdigest()


def model_record(model, given) -> dict:
    """The saved search's 'model' object for a model given as ``given`` (a name or a path, or a
    spec): its name and hash, the spec itself, and the file it was read from with its SHA-256."""
    out: dict[str, Any] = {"name": model.name, "spec_hash": spec_hash(model), "spec": model.model_dump(mode="json")}
    path = model_file(given) if isinstance(given, str) else None
    if path is not None:
        out["file"] = str(path.resolve())
        out["file_sha256"] = _sha256(path)
    return out


def saved_model(m, path: Path):
    """The model a saved search planned, from its 'model' entry (see the module docstring): a
    ModelSpec, a catalog name (a file with only a name), or None."""
    if m is None or isinstance(m, str):
        return m
    if m.file and m.file_sha256:
        f = Path(m.file)
        if f.exists():
            now = _sha256(f)
            if now != m.file_sha256:
                raise PlannerError(
                    f"'{path}' holds plans searched for the model in '{m.file}', which has changed since the search "
                    f"(SHA-256 {m.file_sha256[:12]}... then, {now[:12]}... now): its plans were ranked for the old "
                    "model, and exporting them would launch the new one.",
                    hint=f"Run 'planner search --model {m.file} ... --save {path}' again, or give --model to "
                    "export a plan of the file as it is now (predictions are recomputed for it).")
    if m.spec is None:
        return m.name

    spec = validate_spec(ModelSpec, m.spec, "model", f"{path} (its 'model.spec')")
    if m.spec_hash is not None and spec_hash(spec) != m.spec_hash:
        raise PlannerError(
            f"'{path}': the model spec it stores does not match its spec_hash ({m.spec_hash}, the spec now hashes "
            f"to {spec_hash(spec)}): the file was edited after the search.",
            hint="Run the search again, or give --model to choose the model.")
    return spec


# ---------------------------------------------------------------------------------------------
# What a launch states of its hardware and GPU count (check and explain never assume either).
# ---------------------------------------------------------------------------------------------

_HEADER_LINE = re.compile(r"^# model: (?P<model>.+?)   hardware: (?P<hw>.+?)   job: (?P<gpus>[0-9]+) GPUs, ")
"""The model/hardware/job line :func:`script_header` (and the torchtitan TOML header) writes."""


def header_facts(text: str) -> dict[str, Any]:
    """What planner's own export header says ({'model', 'hardware', 'gpus'}), from the comment
    block a planner export opens with; empty for any other file. Only the leading comment lines
    are read, so a line further down (a pasted header, a heredoc) is never taken for it."""
    for line in text.splitlines()[:20]:
        if line and not line.startswith("#"):
            break
        m = _HEADER_LINE.match(line)
        if m:
            return {"model": m["model"], "hardware": m["hw"], "gpus": int(m["gpus"])}
    return {}


# Megatron-Bridge names its performance recipes <model>_pretrain_<N>gpu_<system>_<precision>_config
# (megatron/bridge/recipes/deepseek/h100/deepseek_v3.py: deepseek_v3_pretrain_1024gpu_h100_bf16_config;
# the gb200, gb300, b200, b300 and h100 packages beside it). The plain <model>_pretrain_config names no system.
_RECIPE_SYSTEM = re.compile(r"_[0-9]+gpus?_(?P<system>[a-z0-9]+)_")


def recipe_system(recipe: str | None) -> str | None:
    """The system a Megatron-Bridge recipe name names (``h100`` of
    ``deepseek_v3_pretrain_1024gpu_h100_bf16_config``), or None."""
    m = _RECIPE_SYSTEM.search(recipe or "")
    return m["system"] if m else None


def slurm_facts(text: str) -> dict[str, Any]:
    """What a batch script's ``#SBATCH`` directives say of its GPUs: 'nodes', 'gpus_per_node',
    'gpus' (a total) and 'gpu_type' (the type of ``--gres=gpu:TYPE:N`` / ``--gpus-per-node=TYPE:N``).
    sbatch reads directives only until the first command line (sbatch(1), "#SBATCH"); so does
    this. Values that are not plain counts (node ranges such as 2-4) are left out."""
    out: dict[str, Any] = {}
    lines = text.splitlines()
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if not stripped.startswith("#SBATCH"):
            continue
        words = stripped[len("#SBATCH"):].split("#", 1)[0].split()
        i = 0
        while i < len(words):
            key, eq, val = words[i].partition("=")
            if not eq and key in ("-N", "-G", "--nodes", "--gpus", "--gpus-per-node", "--gres") and i + 1 < len(words):
                val = words[i + 1]
                i += 1
            elif not eq and key.startswith(("-N", "-G")) and len(key) > 2:
                key, val = key[:2], key[2:]
            _slurm_option(out, key, val)
            i += 1
    return out


def _slurm_option(out: dict, key: str, val: str) -> None:
    def count(text: str) -> int | None:
        return int(text) if is_ascii_count(text) and 0 < int(text) <= 2**20 else None

    if key in ("-N", "--nodes"):
        if count(val):
            out["nodes"] = count(val)
        return
    if key == "--gres":
        val = next((g for g in val.split(",") if g.startswith("gpu")), "")
        parts = val.split(":")[1:]  # gpu[:TYPE]:COUNT
    elif key in ("-G", "--gpus", "--gpus-per-node"):
        parts = val.split(":")  # [TYPE:]COUNT
    else:
        return
    if not parts or count(parts[-1]) is None:
        return
    if len(parts) == 2:
        out["gpu_type"] = parts[0]
    out["gpus" if key in ("-G", "--gpus") else "gpus_per_node"] = count(parts[-1])


def launch_hardware(hw: str | None, model, what: str, *, text: str = "", recipe: str | None = None
                    ) -> tuple[HardwareSpec, str]:
    """(HardwareSpec, where it came from) for a launch read back: ``--hw``, else what the launch
    states (planner's export header, a Megatron-Bridge recipe that names a system, a Slurm
    ``--gres``/``--gpus-per-node`` GPU type); else refused. A launch is never costed on the
    model's reference system: memory and step time depend on the GPUs it runs on, and a default
    the user does not see passes a plan that runs out of memory (issue 42)."""
    if hw:
        return load_hardware(hw), "--hw"
    stated = [(header_facts(text).get("hardware"), "launch header"),
              (recipe_system(recipe), f"recipe {recipe}"),
              (slurm_facts(text).get("gpu_type"), "#SBATCH GPU type")]
    for name, source in stated:
        if name:
            try:
                return load_hardware(name), source
            except PlannerError as exc:
                raise PlannerError(
                    f"{what.capitalize()} names hardware {name!r} ({source}), which planner cannot load: "
                    f"{exc.message}", hint="Pass --hw with its catalog name or hardware YAML (see 'planner hw').",
                ) from None
    ref = model.reference_job.hardware if model.reference_job and model.reference_job.hardware else None
    also = f" nor {model.name}'s reference system ({ref})" if ref else ""
    raise PlannerError(
        f"{what.capitalize()} does not say which hardware it runs on (planner reads it from its own export header, "
        "a Megatron-Bridge recipe name that names a system, or a Slurm --gres/--gpus-per-node GPU type), and planner "
        f"assumes no default{also}: memory and step time depend on the GPUs.",
        hint="Pass --hw with the GPUs the launch runs on, e.g. --hw h100 (see 'planner hw').")


def launch_world(launcher: dict[str, str], env: dict[str, str], text: str = "") -> tuple[int | None, str | None]:
    """(GPUs, where the count came from) of a launch: torchrun's ``--nproc-per-node`` x
    ``--nnodes`` (torch.distributed.run; --nnodes defaults to 1), else ``WORLD_SIZE`` in the
    launch's environment, else the ``#SBATCH`` node and GPU counts, else planner's export
    header; (None, None) when none says."""
    nproc, nnodes = launcher.get("--nproc-per-node"), launcher.get("--nnodes", "1")
    if nproc and is_ascii_count(nproc) and is_ascii_count(nnodes or ""):
        return int(nproc) * int(nnodes), f"torchrun --nproc-per-node {nproc} x --nnodes {nnodes}"
    if is_ascii_count(str(env.get("WORLD_SIZE", ""))) and not nproc:
        return int(env["WORLD_SIZE"]), "WORLD_SIZE"
    slurm = slurm_facts(text)
    if slurm.get("gpus"):
        return slurm["gpus"], "#SBATCH --gpus"
    if slurm.get("gpus_per_node"):
        nodes = slurm.get("nodes", 1)  # sbatch allocates one node unless told otherwise
        return nodes * slurm["gpus_per_node"], f"#SBATCH {nodes} node(s) x {slurm['gpus_per_node']} GPUs"
    gpus = header_facts(text).get("gpus")
    if gpus:
        return gpus, "launch header"
    return None, None


def header_disagreement(text: str, hw, gpus: int) -> list[str]:
    """Notes where planner's export header names other hardware or another GPU count than the
    ones checked (the launch edited since, or --hw / --gpus given on purpose)."""
    head = header_facts(text)
    out = []
    if head.get("hardware") and head["hardware"] != hw.name:
        out.append(f"the launch header says hardware {head['hardware']}; planner checks {hw.name}")
    if head.get("gpus") and head["gpus"] != gpus:
        out.append(f"the launch header says {head['gpus']} GPUs; planner checks {gpus}")
    return out


def export_canonical(plan: Plan, model, hw, job) -> Plan:
    """The canonical plan (Plan.canonical) with two more normalizations that export and read-back
    agree on: the layout written in planner's compact form, or dropped when it equals the even
    split; hsdp:N with N = dp*cp written as fsdp (one sharding group is full sharding)."""
    canon = plan.canonical_for(model, hw, job)
    changes: dict[str, Any] = {}
    if canon.layout is not None:
        syms = parse_layout(canon.layout)
        try:
            even = even_layout_symbols(model, canon.pp, canon.vpp)
        except PlanRuleError:
            even = None
        changes["layout"] = None if tuple(syms) == tuple(even or ()) else format_layout(syms)
    sh = canon.sharding
    if sh.kind == "hsdp":
        try:
            deg = canon.degrees(job.gpus)
            if sh.group == deg.dp * deg.cp:
                changes["sharding"] = "fsdp"
        except PlanRuleError:
            pass
    return canon.replace(**changes) if changes else canon


def predictions(setup) -> dict:
    """{'memory': ..., 'time': ...} of one plan, from one composition of its costs."""
    # Local (start-up): 'planner software' and 'show-software' read the launchers' rules through this
    # package, and the cost model (numpy, ~0.4 s) loads only when a plan is costed.
    from planner.cost.compose import costs_of  # noqa: PLC0415
    from planner.cost.memory import memory_report  # noqa: PLC0415
    from planner.cost.time import time_report  # noqa: PLC0415

    costs = costs_of(setup)
    return {"memory": memory_report(setup, costs).to_json(), "time": time_report(setup, costs=costs).to_json()}


def comment_text(text: str) -> str:
    """Text made safe for one ``#`` comment line of a script: a newline (or any other control or
    line-separating character) would end the comment and make the rest a command, so each is
    shown escaped (\\n, \\x1b, ...) instead."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else (repr(c)[1:-1] if c != " " else c) for c in text)


def script_header(setup, title: str, plan_text: str, pred_lines: list[str]) -> list[str]:
    """The first lines every exported launch script starts with: what wrote it (``title``), the
    model, hardware and job, the plan, its degrees and planner's predictions, each value through
    :func:`comment_text` so that none ends its comment line early."""
    job = setup.job
    out = [
        "#!/usr/bin/env bash",
        f"# {title}",
        f"# model: {comment_text(setup.model.name)}   hardware: {comment_text(setup.hw.name)}   job: {job.gpus} GPUs, "
        f"global batch {job.global_batch}, seq {job.seq_len}",
        f"# plan: {comment_text(plan_text)}",
        f"# degrees: dp={setup.deg.dp} edp={setup.deg.edp}, {setup.micro_batches} micro-batches per step",
    ]
    return out + [f"# predicted: {comment_text(ln)}" for ln in pred_lines]


def script_opening(setup, title: str, plan_text: str, pred_lines: list[str], about: list[str], notes: list[str],
                   nnodes: int, master_port: int, checkout: str | None = None) -> list[str]:
    """How the Megatron-LM and Megatron-Bridge scripts open: :func:`script_header`, the comment
    lines ``about`` (what the script runs and how to run it), a ``# note:`` line per launch note,
    then :func:`node_lines`."""
    return (script_header(setup, title, plan_text, pred_lines) + about
            + [f"# note: {comment_text(n)}" for n in notes] + node_lines(nnodes, master_port, checkout))


def node_lines(nnodes: int, master_port: int, checkout: str | None = None) -> list[str]:
    """Strict mode and the rendezvous variables a multi-node launch reads from the scheduler
    (defaults for one node), with the launcher checkout's variable first where the script needs one."""
    out = ["set -euo pipefail", ""]
    if checkout:
        out.append(f"{checkout}=${{{checkout}:-.}}")
    return out + [f"NNODES=${{NNODES:-{nnodes}}}", "NODE_RANK=${NODE_RANK:-0}", "MASTER_ADDR=${MASTER_ADDR:-localhost}",
                  f"MASTER_PORT=${{MASTER_PORT:-{master_port}}}", ""]


def prediction_lines(pred: dict) -> list[str]:
    """Human lines for a script header."""
    lines = []
    mem = pred.get("memory") or {}
    if "peak_bytes" in mem:
        cap = mem.get("capacity_bytes")
        stage = mem.get("worst_stage")
        text = f"peak memory {mem['peak_bytes'] / 2**30:.1f} GiB"
        if cap:
            text += f" of {cap / 2**30:.1f} GiB"
        if stage is not None:
            text += f" (worst stage {stage})"
        lines.append(text)
    t = pred.get("time") or {}
    if "step_time_s" in t:
        text = f"step {t['step_time_s']:.2f} s"
        if "tokens_per_s_per_gpu" in t:
            text += f", {t['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU"
        if "model_tflops_per_gpu" in t:
            text += f", {t['model_tflops_per_gpu']:.0f} TFLOP/s/GPU"
        if "mfu" in t:
            text += f", MFU {t['mfu']:.1%}"
        if t.get("bottleneck"):
            text += f", bottleneck {t['bottleneck']}"
        lines.append(text)
    return lines


# torchrun's own options that take a value (torch.distributed.run's argument parser), so that a
# launch line's `torchrun --nproc-per-node 8 pretrain_gpt.py ...` is read as the launcher's
# geometry and not as the training program's arguments.
TORCH_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
TORCHRUN_VALUE_OPTIONS = {
    "--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank", "--master-addr",
    "--master_addr", "--master-port", "--master_port", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint",
    "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--max-restarts", "--max_restarts", "--log-dir", "--log_dir",
    "--redirects", "--tee", "--local-addr", "--local_addr", "--monitor-interval", "--rdzv-conf", "--role",
    "--start-method", "--local-ranks-filter",
}


def torchrun_options(head: list[str]) -> dict[str, str]:
    """torchrun's valued options among the words before the training program (names with '-'),
    when those words start a torch launcher; empty otherwise."""
    out: dict[str, str] = {}
    if not any(w.rsplit("/", 1)[-1] in TORCH_LAUNCHERS or w in TORCH_LAUNCHERS for w in head):
        return out
    j = 0
    while j < len(head):
        key, eq, val = head[j].partition("=")
        if key in TORCHRUN_VALUE_OPTIONS:
            if not eq and j + 1 < len(head):
                val = head[j + 1]
                j += 1
            out[key.replace("_", "-")] = val
        j += 1
    return out


def gpus_per_node(hw, gpus: int, override: int | None = None) -> int:
    """torchrun --nproc-per-node: GPUs per host. A spec field gpus_per_node wins; otherwise 4 for
    Grace-hosted NVL72 trays (2 superchips x 2 GPUs), else 8 (HGX boards), capped at the job."""
    if override:
        n = override
    else:
        n = getattr(hw, "gpus_per_node", None) or (4 if hw.host.kind == "nvlink-c2c" else min(8, hw.domain_size))
    n = min(n, gpus)
    if gpus % n:
        raise PlannerError(
            f"{gpus} GPUs do not fill whole nodes of {n} GPUs.",
            hint="Pass --nproc-per-node with the GPUs per node you launch on.",
        )
    return n


def plan_json(plan: Plan, deg) -> dict:
    """DESIGN.md §6 plan object: the keys with derived dp and edp filled in."""
    d = plan.to_json()
    d["dp"] = deg.dp
    d["edp"] = deg.edp
    return d


def to_json_text(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True)


def catalog_edits(model, settable: tuple[str, ...] = ("mtp_layers",)) -> list[str]:
    """The architecture fields where ``model`` differs from the catalog model of its name ('field:
    catalog X, this model Y'), for the launchers that build the model themselves from its name (a
    Megatron-Bridge recipe's HuggingFace config, a torchtitan registry function or flavor): an
    edited model (--set, a model file reusing a catalog name) would silently train as the catalog's.
    ``settable`` are the fields the launch writes itself. Empty when the name is not in the catalog."""
    try:
        base = load_model(model.name)
    except PlannerError:
        return []
    skip = {"name", "aliases", "display_name", "source", "published", "reference_job", "training_tokens", "notes",
            *settable}
    mine, theirs = model.model_dump(exclude=skip), base.model_dump(exclude=skip)
    out: list[str] = []

    def walk(a, b, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{path}.{k}" if path else k)
        elif a != b:
            out.append(f"{path}: catalog {b}, this model {a}")

    walk(mine, theirs, "")
    return out


def software_record(profile, origin: str | None = None) -> dict:
    """How a JSON output (a saved search, check's report, an export) names the release a plan is
    for: its name (what --software and a saved search's 'software' read back), framework and
    version, and where the choice came from."""
    out = {"name": profile.name, "framework": profile.framework, "version": profile.version}
    if origin:
        out["origin"] = origin
    return out
