"""Validity rules: what the model's shape allows, and what each launcher accepts at startup.

Each rule has a name (shown in errors and exported with `planner export`) and cites the check it
mirrors. ``check_model_rules`` raises on the first violation; ``violations`` lists all of them for a
launcher target, so the search can filter and the exporter can refuse with the rule's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from planner.errors import PlanRuleError

if TYPE_CHECKING:
    from planner.specs.hardware import HardwareSpec
    from planner.specs.job import Job
    from planner.specs.model import ModelSpec
    from planner.specs.plan import Degrees, Plan

Target = Literal["megatron", "torchtitan", "any"]


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    hint: str | None = None

    def error(self) -> PlanRuleError:
        return PlanRuleError(self.rule, self.message, hint=self.hint)


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


def model_violations(model: ModelSpec, hw: HardwareSpec, job: Job, plan: Plan, deg: Degrees) -> list[Violation]:
    """Rules every launcher shares: the model's shape and the job's batch."""
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
    if job.global_batch % (plan.mbs * deg.dp):
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
    precision = plan.precision or job.default_precision
    if precision not in job.precisions:
        out.append(Violation("precision-allowed",
                             f"Plan precision {precision} is not among the job's allowed precisions {job.precisions}.",
                             hint="Add it with --precision bf16,fp8."))
    if precision == "fp8" and "fp8" not in hw.gpu.peak_flops:
        out.append(Violation("fp8-hardware", f"{hw.gpu.name} has no FP8 tensor cores."))
    sh = plan.sharding_spec
    if sh.kind == "hsdp" and (deg.dp * deg.cp) % sh.group:
        out.append(Violation("hsdp-group", f"hsdp:{sh.group} does not divide dp*cp = {deg.dp * deg.cp}."))
    rc = plan.recompute_spec
    if rc.kind == "selective":
        if "mla_up_proj" in rc.modules and model.attention.kind != "mla":
            out.append(Violation("recompute-mla", "recompute module mla_up_proj needs MLA attention (TransformerConfig)."))
        moe_mods = {"moe_act", "moe", "shared_experts"} & set(rc.modules)
        if moe_mods and not model.is_moe:
            out.append(Violation("recompute-moe", f"recompute module {sorted(moe_mods)[0]} needs an MoE model."))
        if "shared_experts" in rc.modules and model.is_moe and not model.moe.shared_hidden:
            out.append(Violation("recompute-shared", f"{model.name} has no shared experts to recompute."))
    if plan.ep_overlap == "on":
        if plan.ep == 1:
            out.append(Violation("ep-overlap-needs-ep", "ep_overlap=on needs ep > 1 (Megatron validate_args)."))
        if plan.pp > 1 and plan.vpp == 1:
            out.append(Violation("ep-overlap-needs-vpp", "ep_overlap=on with pp > 1 needs vpp > 1 (Megatron validate_args)."))
        if rc.kind == "full":
            out.append(Violation("ep-overlap-recompute", "ep_overlap=on is incompatible with full recompute (Megatron validate_args)."))
    return out


def check_model_rules(model, hw, job, plan, deg) -> None:
    """Raise the first model-shape violation as a PlanRuleError."""
    found = shape_violations(model, plan) + model_violations(model, hw, job, plan, deg)
    if found:
        raise found[0].error()
