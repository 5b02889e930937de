"""Validity rules every launcher shares (the model's shape, the job's batch), and the composition
with each launcher's own start-up checks.

Each rule has a name (shown in errors and exported with `planner export`) and cites the check it
mirrors. ``check_model_rules`` raises on the first shared violation; ``shared_violations`` lists
all of them. Each launcher's own rules are composed on top of these by
``planner.launchers.registry.launcher_violations`` (this module sits below the launchers and
imports none of them), so the search can filter and the exporter can refuse with the rule's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from planner.errors import PlanRuleError, Violation
from planner.specs.layout import build_layout
from planner.specs.plan import Plan, default_schedule
from planner.specs.schedule import Schedule, schedule_named

if TYPE_CHECKING:
    from planner.specs.hardware import HardwareSpec
    from planner.specs.job import Job
    from planner.specs.model import ModelSpec
    from planner.specs.plan import Degrees

Target = Literal["megatron", "torchtitan", "any"]


def shape_violations(model: ModelSpec, plan: Plan) -> list[Violation]:
    """Rules that need only the model and the plan's own degrees."""
    out: list[Violation] = []
    if model.is_moe and plan.ep > model.moe.num_experts:
        out.append(Violation("experts-divisible-by-ep",
                             f"ep={plan.ep} exceeds the {model.moe.num_experts} experts of {model.name}: each EP rank "
                             "needs at least one expert (Megatron validate_args: num_experts % ep == 0).",
                             hint=f"Use an ep that divides {model.moe.num_experts}."))
    if not model.is_moe and plan.ep > 1:
        out.append(Violation("ep-needs-moe", f"ep={plan.ep} on dense model {model.name}: there are no experts to split."))
    return out


def schedule_fits_vpp(schedule: str, vpp: int) -> bool:
    """Whether ``schedule`` runs ``vpp`` chunks per rank (planner.specs.schedule.Schedule.vpp)."""
    return schedule_named(schedule).fits_vpp(vpp)


def schedule_runs(schedule: Schedule | None, p: int, m):
    """Whether ``schedule`` (a record; None: Megatron's default) takes ``m`` micro-batches on ``p``
    stages, whatever the levers (an integer or an integer array: the search drops the keys before
    costing them); each schedule's own rule and its source: planner.specs.schedule.Schedule.runs."""
    return m == m if schedule is None else schedule.takes(p, m)


def schedule_violations(plan: Plan, deg: Degrees, micro_batches: int) -> list[Violation]:
    """A plan's schedule against its degrees and micro-batch count (the schedules' own checks)."""
    name = plan.schedule or default_schedule(plan.pp, plan.vpp)
    out: list[Violation] = []
    if name is not None and plan.pp == 1:
        return [Violation("schedule-needs-pp", f"schedule={plan.schedule} with pp=1: a pipeline schedule needs "
                          "pipeline stages.", hint="Set pp > 1, or leave schedule out.")]
    if name is None:
        return out
    p, m = plan.pp, micro_batches
    s = schedule_named(name)
    if not s.fits_vpp(plan.vpp):
        out.append(Violation("schedule-vpp", f"schedule={name} runs {s.vpp_text}; the plan has vpp={plan.vpp}.",
                             hint=f"Set {s.vpp_text}."))
    if s.runs is not None and not s.takes(p, m):
        out.append(Violation(s.runs.rule, s.runs.message(p, m)))
    if plan.ep_overlap and not s.overlap_pairs:
        out.append(Violation("ep-overlap-schedule", f"ep_overlap={plan.ep_overlap} with schedule={name}: the zero-bubble "
                             "schedules run one op at a time, with no forward-and-backward pair to hide an all-to-all in.",
                             hint="Set ep_overlap=off, or use interleaved, dualpipe or dualpipev."))
    if plan.ep_overlap and name == "interleaved" and m % p:
        out.append(Violation("ep-overlap-groups", f"ep_overlap={plan.ep_overlap} runs Megatron's combined 1F1B, whose "
                             f"interleaved order takes groups of pp={p} micro-batches; {m} is not a multiple of {p} "
                             "(forward_backward_pipelining_with_interleaving refuses it; the order deadlocks).",
                             hint=f"Choose a global batch, mbs or dp that gives a multiple of {p} micro-batches."))
    if plan.ep_overlap == "wgrad" and not s.megatron:
        out.append(Violation("ep-overlap-wgrad", f"ep_overlap=wgrad is Megatron's --delay-wgrad-compute; schedule={name} "
                             "splits weight gradients off by itself.", hint="Use ep_overlap=on."))
    return out


def fused_grouped_experts_missing(model: ModelSpec, hw: HardwareSpec | None) -> str | None:
    """Why a full-iteration CUDA graph of ``model``'s dropless MoE layers cannot run on ``hw`` at any
    degrees, or None: the graph needs Transformer Engine's fused grouped MLP, whose kernel for gated
    experts (the CuTe DSL grouped MLP) runs on SM100 and later only
    (transformer_engine/pytorch/ops/fused/forward_grouped_mlp.py, is_supported; Megatron's
    TEGroupedMLP._is_fused_impl_supported). The degree-dependent half (expert TP > 1) stays in the
    Megatron launcher rule cuda-graphs-static-experts, which reads this one; the search leaves the
    lever value out of a space where this holds (planner.search.space.static_moe_graphs): no plan
    could use it, and its time would only loosen every key's bound."""
    if model.is_moe and model.ffn.gated and hw is not None and hw.generation in ("ampere", "hopper"):
        return f"{hw.gpu.name} is {hw.generation}: the CuTe DSL grouped MLP of gated experts runs on Blackwell or later"
    return None


def op_recompute_modeled(model: ModelSpec) -> bool:
    """Whether planner models torchtitan's per-op selective AC (recompute=op) for this model: its
    inventory (planner.cost.activations.op_sac_terms) holds dense decoder layers with GQA or MHA."""
    return not model.is_moe and model.attention.kind != "mla"


# The shared rules, one function per rule or per coherent group, each taking (model, hw, job, plan,
# deg), in the order their violations are reported; model_violations runs MODEL_CHECKS in order.


def _tensor_split(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """heads-divisible-by-tp, kv-heads-tp (TransformerConfig.__post_init__,
    megatron/core/transformer/transformer_config.py), experts-divisible-by-ep (validate_args,
    megatron/training/arguments.py), expert-ffn-divisible-by-etp and ffn-divisible-by-tp (the
    column-parallel FC1 splits its width)."""
    out: list[Violation] = []
    a = model.attention
    if a.num_heads % plan.tp:
        out.append(Violation("heads-divisible-by-tp",
                             f"{a.num_heads} attention heads are not divisible by tp={plan.tp} (TransformerConfig)."))
    nkv = a.num_kv_heads
    if nkv % plan.tp and plan.tp % nkv:
        out.append(Violation("kv-heads-tp",
                             f"{nkv} key/value heads and tp={plan.tp}: one must divide the other (TransformerConfig)."))
    if model.is_moe:
        E = model.moe.num_experts
        if E % plan.ep and plan.ep <= E:
            out.append(Violation("experts-divisible-by-ep",
                                 f"{E} experts are not divisible by ep={plan.ep} (Megatron validate_args)."))
        if model.moe.expert_hidden_size % deg.etp:
            out.append(Violation("expert-ffn-divisible-by-etp",
                                 f"Expert width {model.moe.expert_hidden_size} is not divisible by etp={deg.etp}."))
    if model.ffn.hidden_size % plan.tp and any(k == "dense" for k in model.layer_kinds):
        out.append(Violation("ffn-divisible-by-tp",
                             f"FFN width {model.ffn.hidden_size} is not divisible by tp={plan.tp}."))
    return out


def _batch_and_sequence(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """global-batch-divisible (Megatron's num_microbatches_calculator), seq-divisible-by-2cp and
    vpp-needs-pp (validate_args)."""
    out: list[Violation] = []
    if deg.dp and job.global_batch % (plan.mbs * deg.dp):  # dp 0: world-divisibility is reported
        out.append(Violation(
            "global-batch-divisible",
            f"Global batch {job.global_batch} is not divisible by mbs*dp = {plan.mbs}*{deg.dp} = {plan.mbs * deg.dp} "
            "(Megatron num_microbatches_calculator).",
            hint="Change mbs, the degrees, or --global-batch.",
        ))
    if plan.cp > 1 and job.seq_len % (2 * plan.cp):
        out.append(Violation("seq-divisible-by-2cp",
                             f"Sequence length {job.seq_len} is not divisible by 2*cp = {2 * plan.cp} "
                             "(load-balanced causal CP, Megatron validate_args)."))
    if plan.vpp > 1 and plan.pp == 1:
        out.append(Violation("vpp-needs-pp", f"vpp={plan.vpp} needs pp > 1 (Megatron validate_args)."))
    return out


def _precision(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """precision-allowed (the job's own list), fp8-hardware (the GPU's FP8 tensor cores),
    nvfp4-hardware (FP4 tensor cores), param-gather-fp4 (NVFP4 weights), param-gather-fp8 and
    param-gather-sharded (validate_args: --fp8-param-gather needs FP8 weights and the distributed
    optimizer or FSDP), hsdp-group (the HSDP group divides dp*cp)."""
    out: list[Violation] = []
    precision = plan.precision  # the plan is canonical: its precision is explicit
    if precision not in job.precisions:
        out.append(Violation("precision-allowed",
                             f"Plan precision {precision} is not among the job's allowed precisions {job.precisions}.",
                             hint="Add it with --precision bf16,fp8."))
    if precision == "fp8" and "fp8" not in hw.gpu.peak_flops:
        out.append(Violation("fp8-hardware", f"{hw.gpu.name} has no FP8 tensor cores."))
    if precision == "nvfp4" and "fp4" not in hw.gpu.peak_flops:
        # Transformer Engine trains NVFP4 on SM 10.0 / 10.3 only (docs/features/low_precision_training/
        # nvfp4: "Supported devices"); the hardware catalog gives an fp4 peak exactly for those GPUs.
        out.append(Violation("nvfp4-hardware", f"{hw.gpu.name} has no FP4 tensor cores: Transformer Engine trains "
                             "NVFP4 on Blackwell (SM 10.0/10.3) only.", hint="Use precision=fp8 or bf16."))
    if plan.param_gather == "fp4" and precision != "nvfp4":
        out.append(Violation("param-gather-fp4", f"param_gather=fp4 gathers NVFP4 primary weights, which exist only "
                             f"with precision=nvfp4 (the plan's precision is {precision}).",
                             hint="Set precision=nvfp4, or param_gather=bf16."))
    if plan.param_gather == "fp8" and precision != "fp8":
        out.append(Violation("param-gather-fp8", f"param_gather=fp8 gathers FP8 primary weights, which exist only with "
                             f"precision=fp8 (the plan's precision is {precision}).",
                             hint="Set precision=fp8, or param_gather=bf16."))
    sh = plan.sharding
    if plan.param_gather != "bf16" and sh.kind == "ddp":
        flag = f"--{plan.param_gather}-param-gather"
        out.append(Violation("param-gather-sharded", f"param_gather={plan.param_gather} with sharding=ddp: DDP keeps whole "
                             f"parameters and gathers none (Megatron's {flag} needs the distributed optimizer or FSDP).",
                             hint="Use sharding=dist_opt (or fsdp/zero2/hsdp)."))
    if sh.kind == "hsdp" and deg.dp and (deg.dp * deg.cp) % sh.group:
        out.append(Violation("hsdp-group", f"hsdp:{sh.group} does not divide dp*cp = {deg.dp * deg.cp}."))
    return out


def _op_recompute(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """recompute-op-layers, recompute-op-offload: recompute=op is torchtitan's per-op selective AC
    (torchtitan/distributed/activation_checkpoint.py), modeled on the layers
    planner.cost.activations.op_sac_terms inventories, without Megatron's offload modules."""
    out: list[Violation] = []
    if plan.recompute.kind != "op":
        return out
    if not op_recompute_modeled(model):
        out.append(Violation(
            "recompute-op-layers",
            f"recompute=op (torchtitan's per-op selective AC) is modeled on dense decoder layers with "
            f"GQA or MHA attention; {model.name} has {'MoE' if model.is_moe else 'MLA'} layers, whose saved "
            "matmul outputs planner does not inventory.",
            hint="Use recompute=none or full.",
        ))
    if plan.offload.activations:
        out.append(Violation(
            "recompute-op-offload",
            "recompute=op with activation offload: planner's offload moves Megatron's modules, which "
            "torchtitan's per-op policy does not have.",
            hint="Use offload=none or optimizer with recompute=op.",
        ))
    return out


def _selective_recompute(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """recompute-mla, recompute-moe, recompute-shared: a recompute module the model has
    (TransformerConfig.__post_init__, recompute_modules)."""
    rc = plan.recompute
    out: list[Violation] = []
    if rc.kind != "selective":
        return out
    if "mla_up_proj" in rc.modules and model.attention.kind != "mla":
        out.append(Violation("recompute-mla", "recompute module mla_up_proj needs MLA attention (TransformerConfig)."))
    moe_mods = {"moe_act", "moe", "shared_experts"} & set(rc.modules)
    if moe_mods and not model.is_moe:
        out.append(Violation("recompute-moe", f"recompute module {sorted(moe_mods)[0]} needs an MoE model."))
    if "shared_experts" in rc.modules and model.is_moe and not model.moe.shared_hidden:
        out.append(Violation("recompute-shared", f"{model.name} has no shared experts to recompute."))
    return out


def _ep_overlap(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """ep-overlap-needs-ep, ep-overlap-needs-vpp, ep-overlap-recompute: what
    --overlap-moe-expert-parallel-comm needs (validate_args)."""
    out: list[Violation] = []
    if not plan.ep_overlap:
        return out
    if plan.ep == 1:
        out.append(Violation("ep-overlap-needs-ep", f"ep_overlap={plan.ep_overlap} needs ep > 1 (Megatron validate_args)."))
    if plan.pp > 1 and plan.vpp == 1 and plan.schedule in (None, "1f1b"):
        out.append(Violation("ep-overlap-needs-vpp", f"ep_overlap={plan.ep_overlap} with pp > 1 needs vpp > 1 "
                             "(Megatron validate_args)."))
    if plan.recompute.kind == "full":
        out.append(Violation("ep-overlap-recompute", f"ep_overlap={plan.ep_overlap} is incompatible with full "
                             "recompute (Megatron validate_args)."))
    return out


def _schedule(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """The schedule's own checks (schedule_violations), where the batch splits into micro-batches."""
    if not (deg.dp and job.global_batch % (plan.mbs * deg.dp) == 0):
        return []
    return schedule_violations(plan, deg, job.global_batch // (plan.mbs * deg.dp))


MODEL_CHECKS: tuple[Callable[[ModelSpec, HardwareSpec, Job, Plan, Degrees], list[Violation]], ...] = (
    _tensor_split, _batch_and_sequence, _precision, _op_recompute, _selective_recompute, _ep_overlap, _schedule,
)
"""The rules every launcher shares on a model and plan, in the order their violations are reported."""


def model_violations(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """Rules every launcher shares: the model's shape and the job's batch."""
    return [v for check in MODEL_CHECKS for v in check(model, hw, job, plan, deg)]


def stage_recompute_violations(plan: Plan, layout) -> list[Violation]:
    """A plan's per-stage full-recompute counts against its pipeline layout: one count per
    pipeline stage, none above the layers a chunk of that stage holds, with recompute=full."""
    counts = plan.stage_recompute
    if counts is None:
        return []
    if plan.recompute.kind != "full":
        return [Violation("stage-recompute-needs-full",
                          f"stage_recompute={plan.to_json()['stage_recompute']} gives per-stage full-recompute layer counts, but the plan's "
                          f"recompute is '{plan.recompute}'.",
                          hint="Add recompute=full, or leave stage_recompute out.")]
    if len(counts) != layout.pp:
        return [Violation("stage-recompute-stages",
                          f"stage_recompute={plan.stage_recompute} gives {len(counts)} count(s) for {layout.pp} pipeline "
                          "stage(s).", hint=f"Give one count per stage, e.g. stage_recompute={'/'.join(['1'] * layout.pp)}.")]
    out = []
    for r, n in enumerate(counts):
        most = max((ch.num_layers for ch in layout.rank_stages(r)), default=0)
        if n > most:
            per = " per virtual stage" if layout.vpp > 1 else ""
            out.append(Violation("stage-recompute-layers",
                                 f"stage_recompute={plan.stage_recompute} recomputes {n} layers on pipeline stage {r}, "
                                 f"which holds {most} decoder layer(s){per}.",
                                 hint=f"Use at most {most} for stage {r}."))
            break
    return out


def check_model_rules(model, hw, job, plan, deg) -> None:
    """Raise the first model-shape violation as a PlanRuleError."""
    found = shape_violations(model, plan) + model_violations(model, hw, job, plan, deg)
    if found:
        raise found[0].error()


SHARED_RULES: dict[str, str] = {
    "world-divisibility": "gpus % (tp*cp*pp) == 0 (megatron validate_args; torchtitan ParallelDims._validate)",
    "dp-mismatch": "a given dp equals gpus/(tp*cp*pp)",
    "expert-world-divisibility": "gpus % (etp*ep*pp) == 0 (megatron parallel_state.initialize_model_parallel)",
    "heads-divisible-by-tp": "heads % tp == 0 (TransformerConfig)",
    "kv-heads-tp": "query groups % tp == 0 or tp % groups == 0 (TransformerConfig)",
    "ep-needs-moe": "ep > 1 needs experts (validate_args, TransformerConfig)",
    "experts-divisible-by-ep": "num_experts % ep == 0 (validate_args)",
    "expert-ffn-divisible-by-etp": "expert width % etp == 0 (column-parallel expert FC1)",
    "ffn-divisible-by-tp": "dense FFN width % tp == 0 (column-parallel FC1)",
    "global-batch-divisible": "global batch % (mbs*dp) == 0 (num_microbatches_calculator)",
    "seq-divisible-by-2cp": "seq % (2*cp) == 0 when cp > 1 (validate_args)",
    "vpp-needs-pp": "virtual stages need pp > 1 (validate_args)",
    "precision-allowed": "the plan's precision is one the job allows",
    "fp8-hardware": "fp8 needs FP8 tensor cores",
    "param-gather-fp8": "param_gather=fp8 needs precision=fp8",
    "param-gather-fp4": "param_gather=fp4 needs precision=nvfp4",
    "nvfp4-hardware": "precision=nvfp4 needs FP4 tensor cores (Transformer Engine: Blackwell)",
    "param-gather-sharded": "param_gather=fp8/fp4 needs a sharded optimizer (validate_args: --fp8-param-gather)",
    "hsdp-group": "hsdp:N divides dp*cp",
    "recompute-mla": "mla_up_proj needs MLA (TransformerConfig)",
    "recompute-moe": "moe_act/moe/shared_experts recompute needs an MoE model",
    "recompute-shared": "shared_experts recompute needs shared experts",
    "recompute-op-layers": "recompute=op (torchtitan's per-op SAC) is modeled on dense GQA/MHA decoder layers",
    "recompute-op-offload": "recompute=op without activation offload (Megatron's offload modules)",
    "ep-overlap-needs-ep": "--overlap-moe-expert-parallel-comm needs EP > 1 (TransformerConfig)",
    "ep-overlap-needs-vpp": "EP A2A overlap with PP > 1 needs VPP (TransformerConfig)",
    "ep-overlap-recompute": "EP A2A overlap forbids full recompute (TransformerConfig)",
    "schedule-needs-pp": "a pipeline schedule needs pp > 1",
    "schedule-vpp": "1f1b one chunk per rank, interleaved several, zbv/dualpipev two, dualpipe vpp=1",
    "dualpipe-shape": "DualPipe: even pp, even micro-batches, m >= 2 pp (DualPipe.step asserts)",
    "dualpipev-microbatches": "DualPipeV: m >= 2 pp (DualPipeV.step; torch ScheduleDualPipeV)",
    "zero-bubble-rounds": "zb-h1: m a multiple of max(1, m // pp) rounds (torch ScheduleInterleavedZeroBubble)",
    "ep-overlap-schedule": "EP overlap needs a schedule with forward-and-backward pairs (not zb-h1, zbv)",
    "ep-overlap-groups": "EP overlap with interleaving: micro-batches a multiple of PP (Megatron's combined 1F1B)",
    "ep-overlap-wgrad": "ep_overlap=wgrad (--delay-wgrad-compute) only with Megatron's schedules",
    "layers-divisible": "layers split evenly over pp*vpp without a layout (validate_args)",
    "layout-stages": "layout stages % pp == 0 (validate_args)",
    "layout-vpp": "layout stages / pp == vpp (TransformerConfig)",
    "layout-embedding": "layout starts with E, once (validate_layer_layout)",
    "layout-loss": "layout ends with L, once (validate_layer_layout)",
    "layout-layers": "layout holds num_layers decoder layers (validate_layer_layout)",
    "layout-mtp": "layout MTP count, order and placement (validate_layer_layout)",
    "software-lever": "the --software release has every lever the plan uses (software/<name>.yaml features)",
}
"""The rules every launcher shares, by name (model_violations, Plan.degrees, build_layout). Each
launcher's own: planner.launchers.megatron.rules.PLAN_RULES (and ARGS_RULES for command lines),
planner.launchers.torchtitan.rules.PLAN_RULES."""


def _violation(exc: PlanRuleError) -> Violation:
    return Violation(exc.rule, exc.message.removeprefix(f"[{exc.rule}] "), exc.hint)


def _canonical(plan: Plan, model: ModelSpec, hw: HardwareSpec | None, job: Job) -> Plan:
    return plan.canonical_for(model, hw, job)


@dataclass(frozen=True)
class Checked:
    """A plan after the rules every launcher shares: the violations found, and what a launcher's
    own rules read (``degrees_ok``: the GPUs divide, so ``deg`` holds dp and edp)."""

    violations: list[Violation]
    model: ModelSpec
    hw: HardwareSpec | None
    job: Job
    plan: Plan
    deg: Degrees
    degrees_ok: bool


def shared_violations(setup_or_plan, model: ModelSpec | None = None, job: Job | None = None, *,
                      hw: HardwareSpec | None = None) -> Checked:
    """The rules every launcher shares, on a resolved :class:`planner.cost.setup.Setup` (model, hw
    and job are taken from it) or a :class:`Plan` with ``model``, ``job`` and ``hw`` given (it is
    canonicalized here; a Plan that resolve_setup would refuse still gets its full list). Each
    launcher's own rules are composed on top by ``planner.launchers.registry.launcher_violations``."""
    given: list[Violation] = []
    if isinstance(setup_or_plan, Plan):
        if model is None or job is None or hw is None:
            raise TypeError("launcher_violations(plan, ...) needs model, job and hw")
        if setup_or_plan.dp is not None or setup_or_plan.edp is not None:
            # canonical() drops a given dp and edp: check them first
            given = [_violation(e) for e in setup_or_plan.degree_errors(job.gpus)[0]]
        plan = _canonical(setup_or_plan, model, hw, job)
    else:
        s = setup_or_plan
        model, hw, job, plan = s.model, s.hw, s.job, s.plan
    assert model is not None and job is not None
    # Every rule is checked, not only the first: the degree rules, then the rules that need no
    # dp or edp where the GPUs do not divide (model_violations and Megatron's own skip what
    # needs them; torchtitan's mesh needs them all).
    errors, deg = plan.degree_errors(job.gpus)
    out = given + [_violation(e) for e in errors]
    out += shape_violations(model, plan)
    out += model_violations(model, hw, job, plan, deg)
    try:
        build_layout(model, plan.pp, plan.vpp, plan.layout, plan.schedule_record)
    except PlanRuleError as exc:
        out.append(_violation(exc))
    return Checked(out, model, hw, job, plan, deg, not errors)


def unique_violations(found: list[Violation]) -> list[Violation]:
    """``found`` without repeats (same rule and message), first kept."""
    seen, unique = set(), []
    for v in found:
        if (v.rule, v.message) not in seen:
            seen.add((v.rule, v.message))
            unique.append(v)
    return unique


def violations_error(found: list[Violation], launcher: str) -> PlanRuleError:
    """One PlanRuleError naming the first rule and listing the others (``launcher``: the name the
    message gives the launcher, e.g. ``Megatron-LM``)."""
    first = found[0]
    others = "; ".join(f"[{v.rule}] {v.message}" for v in found[1:])
    msg = f"{launcher} would reject this plan: {first.message}"
    if others:
        msg += f" Also: {others}"
    return PlanRuleError(first.rule, msg, hint=first.hint)
