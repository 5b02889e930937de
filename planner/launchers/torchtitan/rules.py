"""torchtitan 0.3.0: what a plan needs that torchtitan cannot express, and the checks it runs at
start-up (``ParallelDims._validate`` in torchtitan/distributed/parallel_dims.py, ``Trainer.Config``
and ``Trainer.__init__`` in torchtitan/trainer.py). The shared model-shape rules are in
:mod:`planner.rules`, which composes them with these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.errors import Violation
from planner.launchers.common import catalog_edits
from planner.rules import violations_error
from planner.specs.layout import build_layout
from planner.specs.plan import default_schedule
from planner.specs.schedule import REGISTRY, Schedule, schedule_named

if TYPE_CHECKING:
    from planner.rules import Checked
    from planner.specs.hardware import HardwareSpec
    from planner.specs.job import Job
    from planner.specs.model import ModelSpec
    from planner.specs.plan import Degrees, Plan

PLAN_RULES: dict[str, str] = {
    "torchtitan-model": "a torchtitan config_registry function exists for the model",
    "torchtitan-mtp": "the registry config builds no MTP modules",
    "torchtitan-etp": "torchtitan has no expert tensor parallelism (experts are never TP-sharded)",
    "torchtitan-ep-grid": "(dp_shard*cp*tp) % ep == 0 (ParallelDims: efsdp = dp_shard*cp*tp/ep)",
    "torchtitan-sharding": "Megatron's distributed optimizer (ZeRO-1) has no torchtitan equivalent",
    "torchtitan-hsdp": "hsdp:N maps to dp_shard = N/cp: N % cp == 0 and dp % dp_shard == 0",
    "torchtitan-recompute-modules": "torchtitan's selective AC is per-op, not Megatron's module list",
    "torchtitan-recompute-layers": "torchtitan's full AC recomputes every layer (no layer count)",
    "torchtitan-stage-recompute": "per-stage recompute counts have no torchtitan option",
    "torchtitan-offload": "torchtitan offloads params+grads+optimizer together (FSDP CPU offload) and has no activation offload",
    "torchtitan-fp8": "Float8/MXFP8 is a model converter in a config_registry function, not a flag",
    "torchtitan-nvfp4": "planner's NVFP4 is Transformer Engine's recipe (Megatron-Core); torchtitan's converters are Float8/MX",
    "torchtitan-precision": "the registry config applies Float8 converters itself (llama3_405b), so a bf16 plan needs another function",
    "torchtitan-dispatcher": "DeepEP/HybridEP backends are chosen in model_registry(), not on the command line",
    "torchtitan-ep-overlap": "torchtitan has no EP all-to-all / compute overlap schedule",
    "torchtitan-grad-reduce": "torchtitan reduces gradients in float32 only (training.mixed_precision_reduce)",
    "torchtitan-param-gather": "Float8 all-gathers are a converter setting in a config_registry function",
    "torchtitan-seq-divisor": "seq % (tp * 2cp) == 0 (Trainer: sequence/context-parallel evenness)",
    "torchtitan-batch": "global % (local_batch * dp) == 0 and local_batch % pp microbatch == 0 (Trainer)",
    "torchtitan-schedule": "torch.distributed.pipelining has no DualPipe (two directions, two parameter copies)",
    "torchtitan-stages-per-rank": "1F1B one stage per rank; Interleaved1F1B/InterleavedZeroBubble at least two (pipeline_parallel.py)",
}
"""torchtitan's own rules by name, with the check each mirrors."""


# torchtitan 0.3.0 config_registry functions for planner's catalog names.
TORCHTITAN_CONFIGS: dict[str, tuple[str, str]] = {
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
    "llama3.1-405b": ("llama3", "llama3_405b"),
    "llama3.1-70b": ("llama3", "llama3_70b"),
    "llama3.1-8b": ("llama3", "llama3_8b"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"),
    "qwen3-32b": ("qwen3", "qwen3_32b"),
    "gpt-oss-20b": ("gpt_oss", "gpt_oss_20b"),
    "gpt-oss-120b": ("gpt_oss", "gpt_oss_120b"),
}
"""Registry functions torchtitan 0.3.0 ships (models/<module>/config_registry.py). Models absent
here (kimi-k2, qwen3-235b-a22b: its '235B-A22B' flavor exists but no config function) need a
user-written config_registry function passed as --torchtitan-config MODULE:FUNCTION."""

TORCHTITAN_FP8_CONFIGS: set[str] = {"llama3_405b"}
"""Registry configs that convert linear layers to Float8 themselves (model_registry converters)."""

TORCHTITAN_MTP_CONFIGS: set[str] = set()
"""Registry configs that build MTP modules (none of the full-size ones in 0.3.0: only
deepseek_v3_debugmodel_mtp does)."""


def torchtitan_config_for(model: ModelSpec, override: str | None = None) -> tuple[str, str] | None:
    if override:
        mod, _, fn = override.partition(":")
        return (mod, fn or "")
    for name in [model.name, *model.aliases]:
        if name in TORCHTITAN_CONFIGS:
            return TORCHTITAN_CONFIGS[name]
    return None


def torchtitan_dims(plan: Plan, deg: Degrees) -> dict[str, int]:
    """planner degrees as torchtitan 0.3 ParallelDims (dp_replicate * dp_shard * cp * tp * pp = world).

    fsdp/zero2 shard over all of DP; ddp replicates; hsdp:N shards within N ranks of DP*CP
    (torchtitan's FSDP mesh is dp_shard*cp), replicating across the rest."""
    sh = plan.sharding
    if sh.kind == "ddp":
        rep, shard = deg.dp, 1
    elif sh.kind == "hsdp" and sh.group is not None:
        shard = max(sh.group // deg.cp, 1)
        rep = deg.dp // shard if deg.dp % shard == 0 else 0
    else:
        rep, shard = 1, deg.dp
    return {"dp_replicate": rep, "dp_shard": shard, "cp": deg.cp, "tp": deg.tp, "pp": deg.pp, "ep": deg.ep}


def own_violations(checked: Checked, torchtitan_config: str | None = None) -> list[Violation]:
    """torchtitan's own rules on a plan the shared rules have checked (its registry record's rules):
    none where the GPUs do not divide, since its device mesh needs every degree."""
    if not checked.degrees_ok:
        return []
    return plan_violations(checked.model, checked.hw, checked.job, checked.plan, checked.deg,
                           torchtitan_config=torchtitan_config)


@dataclass(frozen=True)
class _Case:
    """A plan as torchtitan's rules read it: ``cfg`` the config_registry function that builds the
    model (None: none known), ``custom`` whether the user named it (--torchtitan-config), so the
    rules on what the catalog's functions build do not apply."""

    model: ModelSpec
    job: Job
    plan: Plan
    deg: Degrees
    cfg: tuple[str, str] | None
    custom: bool


# torchtitan's plan rules, one function per rule or per coherent group, in the order their
# violations are reported; plan_violations runs PLAN_CHECKS in order.


def _config_function(c: _Case) -> list[Violation]:
    """torchtitan-model, torchtitan-mtp: a config_registry function (models/<module>/config_registry.py)
    builds this model, with its MTP modules (model_registry's num_mtp_layers)."""
    model, cfg = c.model, c.cfg
    if cfg is None:
        return [Violation(
            "torchtitan-model",
            f"torchtitan 0.3.0 ships no config_registry function for {model.name}.",
            hint="Write one (a function returning Trainer.Config with model_registry(...)) and pass "
            "--torchtitan-config MODULE:FUNCTION.",
        )]
    if not c.custom and (edits := catalog_edits(model)):
        return [Violation(
            "torchtitan-model",
            f"torchtitan's {cfg[0]}.{cfg[1]} builds the catalog's {model.name}, and this model differs from it ("
            + "; ".join(edits) + "): the launch would train the catalog model.",
            hint="Pass --torchtitan-config MODULE:FUNCTION naming a function that builds this model, or export "
            "--format megatron, whose flags state the architecture.",
        )]
    if model.mtp_layers and not c.custom and cfg[1] not in TORCHTITAN_MTP_CONFIGS:
        return [Violation(
            "torchtitan-mtp",
            f"torchtitan's {cfg[0]}.{cfg[1]} builds no MTP module, while {model.name} has {model.mtp_layers}; "
            "the number of MTP layers is a model_registry() argument, not a command-line option.",
            hint="Pass --torchtitan-config MODULE:FUNCTION naming a function that calls "
            "model_registry(..., num_mtp_layers=N).",
        )]
    return []


def _etp(c: _Case) -> list[Violation]:
    """torchtitan-etp: torchtitan 0.3.0 has no expert tensor parallelism (ParallelDims,
    torchtitan/distributed/parallel_dims.py: EP borrows ranks from FSDP and TP)."""
    if not (c.model.is_moe and c.deg.etp != 1):
        return []
    return [Violation(
        "torchtitan-etp",
        f"etp={c.deg.etp}: torchtitan 0.3.0 has no expert tensor parallelism (expert_tensor_parallel_degree "
        "was removed; EP borrows ranks from FSDP and TP, experts are never TP-sharded).",
        hint="Set etp=1.",
    )]


def _sharding(c: _Case) -> list[Violation]:
    """torchtitan-sharding, torchtitan-hsdp, torchtitan-ep-grid: FSDP2 only, and the meshes
    ParallelDims builds (dp_shard*cp the FSDP group, efsdp*ep over dp_shard*cp*tp)."""
    plan, deg, sh = c.plan, c.deg, c.plan.sharding
    dims = torchtitan_dims(plan, deg)
    out: list[Violation] = []
    if sh.kind == "dist_opt":
        out.append(Violation(
            "torchtitan-sharding",
            "sharding=dist_opt is Megatron's distributed optimizer (replicated bf16 weights, sharded "
            "optimizer state); torchtitan shards with FSDP2 only.",
            hint="Use sharding=fsdp, zero2 (FSDP without reshard after forward), hsdp:N or ddp.",
        ))
    if sh.kind == "hsdp" and sh.group is not None and (sh.group % deg.cp or dims["dp_replicate"] == 0):
        out.append(Violation(
            "torchtitan-hsdp",
            f"hsdp:{sh.group} with cp={deg.cp} and dp={deg.dp}: torchtitan's FSDP group is dp_shard*cp, so "
            "N must be a multiple of cp and dp a multiple of N/cp.",
        ))
    elif c.model.is_moe and deg.ep > 1 and (dims["dp_shard"] * deg.cp * deg.tp) % deg.ep:
        out.append(Violation(
            "torchtitan-ep-grid",
            f"ep={deg.ep} does not divide dp_shard*cp*tp = {dims['dp_shard']}*{deg.cp}*{deg.tp}: torchtitan's "
            "expert mesh is efsdp*ep over the same ranks (ParallelDims).",
        ))
    return out


def _most_layers_per_stage(c: _Case) -> int:
    """The most decoder layers a pipeline stage holds (0 where the layout does not build: the shared
    rules report that)."""
    plan = c.plan
    try:
        return max(s.num_layers for s in build_layout(c.model, plan.pp, plan.vpp, plan.layout, plan.schedule_record).stages)
    except Exception:
        return 0


def _recompute(c: _Case) -> list[Violation]:
    """torchtitan-recompute-modules, torchtitan-recompute-layers, torchtitan-stage-recompute:
    activation_checkpoint's modes (torchtitan/distributed/activation_checkpoint.py): selective is
    per-op, full recomputes every layer, neither takes per-stage counts."""
    plan, rc = c.plan, c.plan.recompute
    out: list[Violation] = []
    if rc.kind == "selective":
        out.append(Violation(
            "torchtitan-recompute-modules",
            f"recompute={plan.recompute}: torchtitan's activation_checkpoint:selective is per-op (it saves "
            "matmul outputs), not Megatron's module list.",
            hint="Use recompute=op (torchtitan's per-op selective AC), none or full.",
        ))
    elif rc.kind == "full" and rc.layers is not None and rc.layers < _most_layers_per_stage(c):
        out.append(Violation(
            "torchtitan-recompute-layers",
            f"recompute=full:{rc.layers}: torchtitan's activation_checkpoint:full recomputes every "
            "layer; it has no per-stage layer count.",
            hint="Use recompute=full.",
        ))
    if plan.stage_recompute:
        out.append(Violation(
            "torchtitan-stage-recompute",
            f"stage_recompute={plan.stage_recompute} has no torchtitan option.",
        ))
    return out


def _offload(c: _Case) -> list[Violation]:
    """torchtitan-offload: training.enable_cpu_offload (torchtitan/trainer.py) offloads parameters,
    gradients and optimizer state together; there is no activation offload."""
    plan = c.plan
    if not (plan.offload.optimizer or plan.offload.activations):
        return []
    return [Violation(
        "torchtitan-offload",
        f"offload={plan.offload}: torchtitan's training.enable_cpu_offload moves parameters, gradients "
        "and optimizer state together (FSDP CPU offload), and it has no activation offload.",
    )]


def _precision(c: _Case) -> list[Violation]:
    """torchtitan-fp8, torchtitan-precision: Float8/MXFP8 are model converters a config_registry
    function applies (model_registry converters), not a command-line option. torchtitan-nvfp4:
    planner costs precision=nvfp4 as Transformer Engine's NVFP4BlockScaling (random Hadamard
    transform, stochastic rounding, 2D weight scales), which torchtitan's converters (Float8, MX:
    planner.launchers.torchtitan.read FP8_CONVERTERS) do not run."""
    cfg, out = c.cfg, []
    precision = c.plan.precision  # the plan is canonical: its precision is explicit
    if precision == "nvfp4":
        return [Violation(
            "torchtitan-nvfp4",
            "precision=nvfp4: planner models Transformer Engine's NVFP4 recipe as Megatron-Core runs it "
            "(--fp4-format e2m1 --fp4-recipe nvfp4); torchtitan applies no such converter.",
            hint="Use --target megatron (or bridge) for NVFP4, or precision=fp8 / bf16 on torchtitan.",
        )]
    if precision == "fp8" and not c.custom:
        out.append(Violation(
            "torchtitan-fp8",
            "precision=fp8: torchtitan 0.3.0 applies Float8/MXFP8 as model converters inside a "
            "config_registry function, not through a command-line option.",
            hint="Pass --torchtitan-config MODULE:FUNCTION naming a function with the converters "
            "(e.g. deepseek_v3.deepseek_v3_671b_float8).",
        ))
    if precision != "fp8" and cfg is not None and not c.custom and cfg[1] in TORCHTITAN_FP8_CONFIGS:
        out.append(Violation(
            "torchtitan-precision",
            f"torchtitan's {cfg[0]}.{cfg[1]} applies Float8LinearConverter to the model, so it trains in "
            f"float8, while the plan is {precision}.",
            hint="Pass --torchtitan-config MODULE:FUNCTION naming a function without the converters.",
        ))
    return out


def _communication(c: _Case) -> list[Violation]:
    """torchtitan-grad-reduce (training.mixed_precision_reduce: float32 only), torchtitan-param-gather
    (the Float8 converter's enable_fsdp_float8_all_gather), torchtitan-dispatcher
    (model_registry(moe_comm_backend=...))."""
    plan, out = c.plan, []
    if plan.grad_reduce == "bf16":
        out.append(Violation(
            "torchtitan-grad-reduce",
            "grad_reduce=bf16: torchtitan 0.3.0 reduces gradients in float32 only "
            "(training.mixed_precision_reduce accepts 'float32').",
            hint="Set grad_reduce=fp32.",
        ))
    if plan.param_gather == "fp8" and not c.custom:
        out.append(Violation(
            "torchtitan-param-gather",
            "param_gather=fp8: torchtitan gathers Float8 weights through the Float8 converter's "
            "enable_fsdp_float8_all_gather, set in a config_registry function, not on the command line.",
            hint="Pass --torchtitan-config MODULE:FUNCTION naming such a function, or set param_gather=bf16.",
        ))
    if c.model.is_moe and c.deg.ep > 1 and plan.dispatcher in ("deepep", "hybridep") and not c.custom:
        out.append(Violation(
            "torchtitan-dispatcher",
            f"dispatcher={plan.dispatcher}: torchtitan selects DeepEP/HybridEP with "
            "model_registry(moe_comm_backend=...) in a config_registry function, not on the command line.",
            hint="Use dispatcher=alltoall, or pass --torchtitan-config with such a function.",
        ))
    return out


def _schedule(c: _Case) -> list[Violation]:
    """torchtitan-schedule, torchtitan-stages-per-rank (distributed/pipeline_parallel.py): see
    _schedule_violations."""
    return _schedule_violations(c.plan)


def _ep_overlap(c: _Case) -> list[Violation]:
    """torchtitan-ep-overlap: torchtitan 0.3.0 has no EP all-to-all/compute overlap schedule."""
    if not c.plan.ep_overlap:
        return []
    return [Violation(
        "torchtitan-ep-overlap",
        "ep_overlap=on: torchtitan 0.3.0 has no EP all-to-all/compute overlap schedule.",
        hint="Set ep_overlap=off.",
    )]


def _seq_divisor(c: _Case) -> list[Violation]:
    """torchtitan-seq-divisor: seq % (tp * 2cp) == 0 (Trainer, torchtitan/trainer.py:
    sequence/context-parallel evenness)."""
    deg, seq = c.deg, c.job.seq_len
    divisor = deg.tp * (2 * deg.cp if deg.cp > 1 else 1)
    if not seq % divisor:
        return []
    return [Violation(
        "torchtitan-seq-divisor",
        f"seq_len {seq} is not divisible by tp*2cp = {divisor} (torchtitan Trainer: "
        "sequence/context-parallel evenness).",
    )]


PLAN_CHECKS: tuple[Callable[[_Case], list[Violation]], ...] = (
    _config_function, _etp, _sharding, _recompute, _offload, _precision, _communication, _schedule, _ep_overlap,
    _seq_divisor,
)
"""torchtitan's plan rules in the order their violations are reported."""


def plan_violations(model: ModelSpec, hw: HardwareSpec | None, job: Job, plan: Plan, deg: Degrees,
                          *, torchtitan_config: str | None = None) -> list[Violation]:
    """What torchtitan 0.3.0 cannot express or rejects (plan must be canonical)."""
    case = _Case(model, job, plan, deg, torchtitan_config_for(model, torchtitan_config), torchtitan_config is not None)
    return [v for check in PLAN_CHECKS for v in check(case)]


TORCHTITAN_SCHEDULES = {s.name: s.torchtitan for s in REGISTRY if s.torchtitan is not None}
"""--parallelism.pipeline_parallel_schedule for planner's schedules (planner.specs.schedule.Schedule.torchtitan)."""


def torchtitan_schedule(schedule: Schedule | None) -> str:
    """--parallelism.pipeline_parallel_schedule for a plan's schedule record (its ``torchtitan``
    field; rule torchtitan-schedule has refused the plans on a schedule without one)."""
    if schedule is None or schedule.torchtitan is None:
        raise ValueError(f"no torchtitan schedule for {schedule}: rule torchtitan-schedule should have refused it")
    return schedule.torchtitan


def _schedule_violations(plan: Plan) -> list[Violation]:
    """torchtitan's schedule checks (distributed/pipeline_parallel.py 227-258): single-stage
    schedules (1F1B) need exactly one stage per rank, multi-stage ones at least two (ZBV and
    DualPipeV exactly two: the shared schedule-vpp rule); DualPipe is not among the schedules."""
    name = plan.schedule or default_schedule(plan.pp, plan.vpp)
    s = None if name is None else schedule_named(name)
    if s is not None and s.torchtitan is None:
        return [Violation("torchtitan-schedule", f"schedule={name}: torch.distributed.pipelining (and so torchtitan) "
                          f"does not ship it; it runs under {s.runs_under}.",
                          hint="Use schedule=dualpipev (vpp=2), or --target any.")]
    if s is not None and plan.vpp < s.torchtitan_min_vpp:
        return [Violation("torchtitan-stages-per-rank", f"schedule={name} with vpp={plan.vpp}: torchtitan's {s.torchtitan} is a "
                          f"multi-stage schedule and needs at least {s.torchtitan_min_vpp} stages per rank (the paper's "
                          "one-stage ZB-H1 runs only as a --parallelism.pipeline_parallel_schedule_csv).",
                          hint=f"Set vpp={s.torchtitan_min_vpp} or more.")]
    return []


def torchtitan_batch(plan, deg, job, where: str) -> tuple[int, int]:
    """(training.local_batch_size, parallelism.pipeline_parallel_microbatch_size) of a plan: with
    pipeline parallelism the data-parallel rank's whole batch split into micro-batches of mbs,
    else one micro-batch of mbs; refused (``where`` names the launcher in the message) when
    torchtitan's Trainer would refuse the split."""
    dims = torchtitan_dims(plan, deg)
    local, pp_micro = (job.global_batch // deg.dp, plan.mbs) if plan.pp > 1 else (plan.mbs, 1)
    batch = torchtitan_batch_violations(job.global_batch, local, dims["dp_replicate"] * dims["dp_shard"], plan.pp, pp_micro)
    if batch:
        raise violations_error(batch, where)
    return local, pp_micro


def torchtitan_batch_violations(global_batch: int, local_batch: int, batch_degree: int,
                                pp: int, pp_microbatch: int) -> list[Violation]:
    """torchtitan Trainer.Config.__post_init__ and Trainer.__init__ batch checks."""
    out = []
    if pp > 1 and local_batch % pp_microbatch:
        out.append(Violation(
            "torchtitan-batch",
            f"training.local_batch_size {local_batch} is not divisible by "
            f"parallelism.pipeline_parallel_microbatch_size {pp_microbatch} (Trainer.Config).",
        ))
    if global_batch % (local_batch * batch_degree):
        out.append(Violation(
            "torchtitan-batch",
            f"training.global_batch_size {global_batch} is not a multiple of local_batch_size*dp = "
            f"{local_batch}*{batch_degree} (Trainer).",
        ))
    return out
