"""The plan space: structural keys (parallel degrees, layout, micro-batch) and lever options
(recompute, precision, moments, sharding, offload, dispatcher, EP overlap).

A uniform plan is a structural key plus one value per lever. Costs are separable into tables over
lever *groups* (see tables.py), so the CP-SAT model and the oracle never need the full product.
Which lever values a launcher accepts is decided by the real rule functions
(:mod:`planner.rules`), evaluated once per structural *signature* (the few properties of the
degrees the lever rules look at), so the search never restates a rule.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property

from planner.errors import PlannerError
from planner.specs.layout import even_layout_symbols, format_layout, suggest_layout
from planner.specs.plan import Plan

LEVERS = ("recompute", "precision", "moments", "sharding", "offload", "dispatcher", "ep_overlap")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class Struct:
    """A structural key: degrees, layout and micro-batch size (everything but the levers)."""

    tp: int
    """Tensor parallelism (with sequence parallelism)."""
    cp: int
    """Context parallelism."""
    pp: int
    """Pipeline stages."""
    vpp: int
    """Virtual stages (model chunks) per pipeline rank."""
    ep: int
    """Expert parallelism (1 for dense models)."""
    etp: int
    """Expert tensor parallelism (Megatron's default: tp)."""
    mbs: int
    """Micro-batch size in sequences."""
    layout: str | None
    """The Megatron pipeline layout string; None when the layers divide evenly."""
    dp: int
    """Data parallelism, derived: gpus / (tp * cp * pp)."""
    edp: int
    """Expert data parallelism, derived: gpus / (etp * ep * pp)."""
    micro_batches: int
    """Micro-batches per pipeline per step: global batch / (mbs * dp)."""

    def plan_fields(self) -> dict:
        d = dict(tp=self.tp, cp=self.cp, pp=self.pp, vpp=self.vpp, ep=self.ep, etp=self.etp, mbs=self.mbs)
        if self.layout:
            d["layout"] = self.layout
        return d

    def signature(self) -> tuple:
        """The structural properties lever rules depend on (ep>1, pp>1, vpp>1, tp>1, cp>1, etp>1)."""
        return (self.ep > 1, self.pp > 1, self.vpp > 1, self.tp > 1, self.cp > 1, self.etp > 1, self.dp * self.cp > 1)


@dataclass(frozen=True)
class Limits:
    """--fix and --max from the command line, as plan-key -> value."""

    fix: dict = field(default_factory=dict)
    max: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, fix: str | None, maxes: str | None) -> "Limits":
        """--fix as typed plan values (read as a plan is), --max as integer bounds on degrees."""
        from planner.specs.plan import parse_pairs

        m = parse_pairs(maxes, "--max")
        for k, v in m.items():
            if not (v.isascii() and v.isdigit() and len(v) <= 9 and int(v) >= 1):
                raise PlannerError(f"--max {k}={v}: a bound must be a positive integer.")
            if k not in ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs", "dp", "edp"):
                raise PlannerError(f"--max applies to degrees and mbs, not '{k}'.", hint="Use --fix for other keys.")
        return cls(Plan.given(fix or "", "--fix"), {k: int(v) for k, v in m.items()})

    def allows(self, key: str, value) -> bool:
        if key in self.fix and self.fix[key] != value:
            return False
        if key in self.max and value is not None and int(value) > self.max[key]:
            return False
        return True


@dataclass
class Space:
    """The structural keys and lever options for one model/hardware/job/target."""

    model: object
    hw: object
    job: object
    target: str
    limits: Limits
    structs: list[Struct]
    levers: dict[str, tuple]
    """Option values per lever, preferred (simplest) first: ties in step time go to earlier values."""
    pruned: dict = field(default_factory=dict)
    """Why structural candidates were dropped: rule name -> count."""

    @cached_property
    def lever_product_size(self) -> int:
        n = 1
        for v in self.levers.values():
            n *= len(v)
        return n


def recompute_options(model, implementation: str = "te") -> list[str]:
    """Recompute settings worth searching for this model, simplest first: Megatron's selective
    modules where they drop something real, then full recompute."""
    opts = ["none"]
    if implementation != "te":
        opts.append("core_attn")  # unfused attention keeps the s^2 tensors
    if model.is_moe:
        opts += ["moe_act", "layernorm+moe_act"]
        if model.attention.kind == "mla":
            opts.append("mla_up_proj+layernorm+moe_act")  # Megatron's DeepSeek-V3 recipe
        opts.append("moe")
    else:
        opts.append("mlp")
    opts.append("full")
    return opts


def _degree_options(n: int, cap: int) -> list[int]:
    return [d for d in divisors(n) if d <= cap]


def layouts_for(model, pp: int, vpp: int) -> str | None:
    """The layout a structural key uses: None (even split) when the layers divide, else a balanced
    uneven layout with the embedding first and MTP/loss last."""
    if pp == 1 and vpp == 1:
        return None
    if model.num_layers % (pp * vpp) == 0:
        return None
    return suggest_layout(model, pp, vpp)


def build_space(model, hw, job, *, target: str = "megatron", limits: Limits | None = None,
                implementation: str = "te", moments: tuple[str, ...] = ("fp32",),
                check_rules: bool = True) -> Space:
    """Enumerate the structural keys that satisfy the divisibility rules (and, with
    ``check_rules``, every launcher rule; the search checks those lazily, best candidates first),
    and the lever options. Degrees that can never be useful are bounded here with the reason stated:
    TP within one NVLink domain (TP all-reduces every layer), CP keeping at least 512 tokens per
    GPU, PP at most one layer per stage, VPP at most 8 chunks per rank."""
    from planner.search.rulecheck import struct_violations

    limits = limits or Limits()
    N = job.gpus
    D = hw.domain_size
    L = model.num_layers
    a = model.attention
    pruned: dict[str, int] = {}

    def count(rule: str) -> None:
        pruned[rule] = pruned.get(rule, 0) + 1

    # TP all-reduces activations in every layer: beyond 8 GPUs its messages shrink while their count
    # stays, and published recipes stop at 8 even inside NVL72; --max tp lifts the cap.
    tp_cap = min(D, a.num_heads, limits.max.get("tp", 8))
    nkv = a.num_kv_heads
    dense_ffn = any(k == "dense" for k in model.layer_kinds)
    tps = [t for t in _degree_options(N, tp_cap)
           if limits.allows("tp", t) and a.num_heads % t == 0 and (nkv % t == 0 or t % nkv == 0)
           and (not dense_ffn or model.ffn.hidden_size % t == 0)]
    cps = [c for c in _degree_options(N, 64)
           if job.seq_len // c >= 512 and (c == 1 or job.seq_len % (2 * c) == 0) and limits.allows("cp", c)]
    pps = [p for p in divisors(N) if p <= L and limits.allows("pp", p)]
    vpps = [v for v in range(1, 9) if limits.allows("vpp", v)]
    mbss = [b for b in (1, 2, 4) if limits.allows("mbs", b)]
    if model.is_moe:
        eps = [e for e in divisors(model.moe.num_experts) if N % e == 0 and limits.allows("ep", e)]
        etps = [t for t in _degree_options(N, min(D, 8))
                if limits.allows("etp", t) and model.moe.expert_hidden_size % t == 0]
    else:
        eps, etps = [1], [None]
    structs: list[Struct] = []
    for tp, cp, pp in itertools.product(tps, cps, pps):
        if N % (tp * cp * pp):
            continue
        dp = N // (tp * cp * pp)
        if not limits.allows("dp", dp):
            continue
        for vpp in vpps:
            if vpp > 1 and pp == 1:
                continue
            # At least two decoder layers per model chunk on average (Megatron's DeepSeek-V3 recipes
            # go down to two); smaller chunks only add pipeline communication.
            if pp * vpp * 2 > L:
                count("layers-per-chunk")
                continue
            layout = layouts_for(model, pp, vpp)
            for ep, etp in itertools.product(eps, etps):
                etp_ = tp if etp is None else etp
                if etp_ > tp:
                    continue  # expert TP wider than attention TP only thins the expert GEMMs further
                if N % (etp_ * ep * pp):
                    continue
                edp = N // (etp_ * ep * pp)
                if not limits.allows("edp", edp):
                    continue  # --fix/--max edp, like dp above
                for mbs in mbss:
                    if job.global_batch % (mbs * dp):
                        count("global-batch-divisible")
                        continue
                    m = job.global_batch // (mbs * dp)
                    s = Struct(tp, cp, pp, vpp, ep, etp_, mbs, layout, dp, edp, m)
                    if check_rules:
                        bad = struct_violations(model, hw, job, s, target)
                        if bad:
                            count(bad[0])
                            continue
                    if "layout" in limits.fix and s.layout != limits.fix["layout"]:
                        continue
                    structs.append(s)
    levers = lever_options(model, hw, job, target, limits, implementation, moments)
    return Space(model, hw, job, target, limits, structs, levers, pruned)


def lever_options(model, hw, job, target, limits: Limits, implementation: str, moments) -> dict[str, tuple]:
    """Each lever's typed values, simplest first (ties in step time go to earlier values)."""
    from planner.specs.plan import Offload, Precision, Sharding, parse_recompute

    precisions = [Precision(p) for p in job.precisions if p != "fp8" or "fp8" in hw.gpu.peak_flops]
    opts: dict[str, list] = {
        "recompute": [parse_recompute(r) for r in recompute_options(model, implementation)],
        "precision": precisions,
        "moments": list(moments),
        # ddp is never better than dist_opt (same traffic, more memory); hsdp:N only when fixed.
        "sharding": [Sharding("dist_opt"), Sharding("zero2"), Sharding("fsdp")],
        "offload": [Offload(), Offload(optimizer=True), Offload(activations=True)],
        "dispatcher": [hw.default_dispatcher] + [d for d in ("alltoall", "deepep", "hybridep") if d != hw.default_dispatcher]
        if model.is_moe else [None],
        "ep_overlap": [False, True] if model.is_moe else [False],
    }
    for key, value in limits.fix.items():
        if key in opts:
            opts[key] = [value]
    return {k: tuple(v) for k, v in opts.items()}


def make_plan(s: Struct, lever_values: dict) -> Plan:
    d = s.plan_fields()
    for k, v in lever_values.items():
        if v is not None:
            d[k] = v
    if s.ep == 1:
        d.pop("dispatcher", None)
        d["ep_overlap"] = False
    return Plan.model_validate(d)
