"""The plan space: structural keys (parallel degrees, layout, micro-batch) and lever options
(recompute, precision, moments, sharding, offload, dispatcher, EP overlap, gradient-reduce and
parameter-gather dtypes).

A uniform plan is a structural key plus one value per lever. Costs are separable into tables over
lever *groups* (see tables.py), so the CP-SAT model and the oracle never need the full product.
Which lever values a launcher accepts is decided by the real rule functions
(:mod:`planner.rules`), evaluated once per structural *signature* (the few properties of the
degrees the lever rules look at), so the search never restates a rule.

The structural keys are every combination the target launcher can start, within the declared
scope below, held as integer columns (a DeepSeek-V3 job has a few hundred thousand of them; the
search bounds them without costing most, see planner.search.bounds):

- TP and expert TP up to the NVLink domain (their collectives run every layer), CP keeping at
  least 512 tokens per CP rank: the declared scope, lifted by ``--max``/``--fix``;
- PP up to the layer count, VPP up to (layers + 2) / PP (one-layer virtual chunks, the embedding
  and the loss in chunks of their own at the limit),
  every EP that divides the experts and the GPUs, every micro-batch size that divides the batch
  per data-parallel rank (the memory bound of planner.search.bounds leaves out the sizes at which
  nothing can fit, and every larger one);
- per (PP, VPP) the layout Megatron uses (an even split where the layers divide) or the
  balanced uneven layout of :func:`planner.specs.layout.suggest_layout`; a ``--fix layout=`` is
  used as given (the launcher rules validate it) and sets VPP from its stage count;
- per key, the pipeline schedules of ``--target`` that run its VPP (planner.specs.schedule.Schedule.searched_under):
  Megatron's default for the degrees, and under torchtitan and ``any`` the zero-bubble and
  DualPipe schedules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from functools import cached_property

import numpy as np

from planner.errors import PlanRuleError, PlannerError
from planner.rules import Target, fused_grouped_experts_missing, op_recompute_modeled, schedule_runs
from planner.search.rulecheck import struct_violations
from planner.specs.hardware import HardwareSpec
from planner.specs.job import Job
from planner.specs.layout import build_layout, parse_layout, suggest_layout
from planner.specs.model import ModelSpec
from planner.specs.plan import (
    EpOverlap, Offload, Plan, Precision, Sharding, parse_cuda_graphs, parse_pairs, parse_recompute,
)
from planner.specs.schedule import Schedule, schedule_named, searched
from planner.specs.schedule import default_schedule as default_record
from planner.specs.software import first_release_with, lever_features

LEVERS = ("recompute", "precision", "moments", "sharding", "offload", "dispatcher", "ep_overlap", "grad_reduce",
          "param_gather", "cuda_graphs")

KEY_COLUMNS = ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs", "dp", "edp", "micro_batches")
"""The integer columns of a structural key (the cost model's planner.cost.compose.KEY_FIELDS)."""
COL = {name: i for i, name in enumerate(KEY_COLUMNS)}

MIN_TOKENS_PER_CP_RANK = 512
"""Declared scope: CP splits the sequence so that each CP rank keeps at least this many tokens."""


def divisors(n: int) -> list[int]:
    out, i = [], 1
    while i * i <= n:
        if n % i == 0:
            out += [i] if i * i == n else [i, n // i]
        i += 1
    return sorted(out)


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
    schedule: Schedule | None = None
    """The pipeline schedule's record; None: Megatron's default for the degrees (1F1B, or
    interleaved with vpp > 1). It sets which rank holds each layout stage."""

    def plan_fields(self) -> dict:
        d: dict[str, int | str] = dict(tp=self.tp, cp=self.cp, pp=self.pp, vpp=self.vpp, ep=self.ep, etp=self.etp,
                                       mbs=self.mbs)
        if self.layout:
            d["layout"] = self.layout
        if self.schedule:
            d["schedule"] = self.schedule.name  # the plan's edge: a name
        return d

    def signature(self) -> tuple:
        """The structural properties lever rules depend on (ep>1, pp>1, vpp>1, tp>1, cp>1, etp>1,
        dp*cp>1, the schedule)."""
        return (self.ep > 1, self.pp > 1, self.vpp > 1, self.tp > 1, self.cp > 1, self.etp > 1, self.dp * self.cp > 1,
                self.schedule)


@dataclass(frozen=True)
class Limits:
    """--fix and --max from the command line, as plan-key -> value."""

    fix: dict = field(default_factory=dict)
    max: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, fix: str | None, maxes: str | None) -> Limits:
        """--fix as typed plan values (read as a plan is), --max as integer bounds on degrees."""
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

    def pins(self, key: str) -> bool:
        """Whether the user bounded ``key`` (a declared cap then gives way to the user's)."""
        return key in self.fix or key in self.max

    def mask(self, key: str, values: np.ndarray) -> np.ndarray:
        """:meth:`allows` over an integer column."""
        ok = np.ones(len(values), dtype=bool)
        if key in self.fix and self.fix[key] is not None:
            ok &= values == int(self.fix[key])
        if key in self.max:
            ok &= values <= self.max[key]
        return ok


@dataclass
class Space:
    """The structural keys (integer columns) and lever options for one model/hardware/job/target."""

    model: ModelSpec
    hw: HardwareSpec
    job: Job
    target: Target
    limits: Limits
    keys: np.ndarray
    """(keys, len(KEY_COLUMNS)) int64: each structural key's degrees, micro-batch size and count."""
    layout_of: np.ndarray
    """Each key's index into :attr:`layouts`."""
    layouts: tuple
    """Layout strings (None: Megatron's even split)."""
    levers: dict[str, tuple]
    """Option values per lever, preferred (simplest) first."""
    pruned: dict = field(default_factory=dict)
    """Structural candidates the launcher's divisibility and layout rules reject: rule -> count."""
    scope: dict = field(default_factory=dict)
    """What the space is (see :func:`describe_space`)."""
    fm_keys: np.ndarray | None = None
    """Each distinct (degrees, micro-batch size) once, VPP 1: what block costs depend on."""
    fm_of: np.ndarray | None = None
    """Each key's row in :attr:`fm_keys`."""
    messages: dict = field(default_factory=dict)
    torchtitan_config: str | None = None
    """--torchtitan-config: the user's torchtitan config_registry function (MODULE:FUNCTION), which
    the torchtitan rules read instead of planner's table (a custom model has no entry there)."""
    software: Any = None
    """The --software release (a SoftwareProfile or None): its lever options only, and its own
    launcher rules where they differ by release (torchtitan's TOML-era releases)."""
    """For a rule in :attr:`pruned`, the first message it gave (a fixed layout's, say)."""
    pinned: dict = field(default_factory=dict)
    """Plan keys the search does not vary but the user fixed (PINNED_KEYS): every plan carries them."""
    schedule_of: np.ndarray | None = None
    """Each key's index into :attr:`schedules` (None: every key runs the default schedule)."""
    schedules: tuple[Schedule | None, ...] = (None,)
    """Schedule records (None: Megatron's default for the degrees)."""

    def schedule(self, i: int) -> Schedule | None:
        return None if self.schedule_of is None else self.schedules[int(self.schedule_of[i])]

    def schedule_col(self) -> np.ndarray:
        return np.zeros(len(self), dtype=np.int64) if self.schedule_of is None else self.schedule_of

    def __len__(self) -> int:
        return len(self.keys)

    def col(self, name: str) -> np.ndarray:
        return self.keys[:, COL[name]]

    def struct(self, i: int) -> Struct:
        """Key ``i`` as a :class:`Struct` (built on first use)."""
        hit = self._structs.get(i)
        if hit is None:
            r = self.keys[i]
            tp, cp, pp, vpp, ep, etp, mbs = (int(r[COL[k]]) for k in ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs"))
            hit = self._structs[i] = Struct(tp, cp, pp, vpp, ep, etp, mbs,
                                            self.layouts[int(self.layout_of[i])], int(r[COL["dp"]]),
                                            int(r[COL["edp"]]), int(r[COL["micro_batches"]]), self.schedule(i))
        return hit

    @cached_property
    def _structs(self) -> dict[int, Struct]:
        return {}

    @property
    def structs(self) -> list[Struct]:
        """Every key as a Struct (small spaces: tests and diagnostics)."""
        return [self.struct(i) for i in range(len(self))]

    @cached_property
    def lever_product_size(self) -> int:
        n = 1
        for v in self.levers.values():
            n *= len(v)
        return n

    def groups(self) -> list[tuple[tuple, np.ndarray]]:
        """The pipeline layouts ``(pp, vpp, layout index, schedule)`` and their keys (ascending
        rows), in order of first appearance (the schedule places the layout's stages on ranks).
        Computed once per set of keys: the robust search's space shares the first one's
        (build_space's ``like``), and its branch and bound asks again (0.15 s on the default
        command's 408,000 keys)."""
        made = self.__dict__.get("_groups")
        if made is not None and all(a is b for a, b in zip(made[0], self._group_inputs())):
            return made[1]
        out = self._groups()
        self.__dict__["_groups"] = (self._group_inputs(), out)
        return out

    def _group_inputs(self) -> tuple:
        """What :meth:`groups` reads (compared by identity: a space of other keys has other arrays)."""
        return (self.keys, self.layout_of, self.layouts, self.schedule_of, self.schedules)

    def _groups(self) -> list[tuple[tuple, np.ndarray]]:
        pp, vpp, sc = self.col("pp"), self.col("vpp"), self.schedule_col()
        code = ((pp * 4096 + vpp) * (len(self.layouts) + 1) + self.layout_of) * len(self.schedules) + sc
        _, groups = group_rows(code)
        out = []
        for r in sorted(groups, key=lambda r: r[0]):
            i = r[0]
            out.append(((int(pp[i]), int(vpp[i]), int(self.layout_of[i]), self.schedule(i)), r))
        return out


def recompute_options(model, implementation: str = "te", target: str = "megatron") -> list[str]:
    """Recompute settings worth searching for this model, simplest first: Megatron's selective
    modules where they drop something real (torchtitan's per-op policy under --target torchtitan,
    on the dense GQA/MHA layers it is modeled for), then full recompute."""
    opts = ["none"]
    if target == "torchtitan":
        return opts + (["op"] if op_recompute_modeled(model) else []) + ["full"]
    if implementation != "te":
        opts.append("core_attn")  # unfused attention keeps the s^2 tensors
    if model.is_moe:
        opts += ["moe_act", "layernorm+moe_act"]
        if model.attention.kind == "mla":
            # The MLA up-projections alone (the Megatron-Bridge 26.06+ DeepSeek-V3 GB200 recipes), and
            # with the norms and the MoE activation (Megatron's DeepSeek-V3 recipe). mla_up_proj alone
            # is on the memory/step Pareto front on every bundled DeepSeek-V3 recipe's plan (most of
            # the MLA saving for a third of the recompute); mla_up_proj+mlp (26.04.01 B200) adds only
            # the few dense layers' MLP and is dominated by mla_up_proj, or nearly so, on those plans.
            opts += ["mla_up_proj", "mla_up_proj+layernorm+moe_act"]
        opts.append("moe")
    else:
        opts.append("mlp")
    opts.append("full")
    return opts


def schedule_options(target: str, pp: int, vpp: int) -> list[Schedule | None]:
    """The schedules of a structural key: the default (None), then those a ``target`` search tries
    (planner.specs.schedule.Schedule.searched_under: Megatron-Core 0.19.2 runs only 1F1B and
    interleaved, and its combined 1F1B as the ep_overlap lever; torch.distributed.pipelining, through
    torchtitan, also InterleavedZeroBubble, ZBVZeroBubble and DualPipeV; deepseek-ai/DualPipe's
    DualPipe runs under neither, so --target any) whose chunk count fits ``vpp`` (the launcher rules
    check the rest)."""
    if pp == 1:
        return [None]
    return [None, *(s for s in searched(target) if s.fits_vpp(vpp))]


def _with_schedules(rows: dict, layout_of: np.ndarray, fm_of: np.ndarray, target: str, limits: Limits,
                    pruned: dict) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray | None, tuple]:
    """Every key once per schedule of :func:`schedule_options` the user's limits allow: (columns,
    layout of each row, family index of each row, schedule index of each row, schedule records).
    Under Megatron, interleaved keys whose micro-batches are not whole groups of PP are dropped
    here, before the tables rank them (rule megatron-interleaved-groups, whatever the levers)."""
    pp, vpp, m = rows["pp"], rows["vpp"], rows["micro_batches"]
    if target == "megatron":
        ok = (vpp == 1) | (pp == 1) | (m % np.maximum(pp, 1) == 0)
        if (~ok).any():
            pruned["megatron-interleaved-groups"] = int((~ok).sum())
        rows, layout_of, fm_of = _take(rows, ok), layout_of[ok], fm_of[ok]
        pp, vpp = rows["pp"], rows["vpp"]
    names: list = [None]
    parts: list[tuple[np.ndarray, int]] = []
    fixed = limits.fix.get("schedule")
    fixed_record = None if fixed is None else schedule_named(fixed)  # --fix schedule=NAME enters here
    width = int(vpp.max()) + 1 if len(vpp) else 1
    codes, groups = group_rows(pp * width + vpp)
    m = rows["micro_batches"]
    for p, v, sel in zip((codes // width).tolist(), (codes % width).tolist(), groups):
        for sched in schedule_options(target, p, v):
            if fixed_record is not None and fixed_record is not (sched or default_record(p, v)):
                continue
            ok = np.asarray(schedule_runs(sched, p, m[sel]), dtype=bool)
            if sched is not None and (~ok).any():
                rule = f"{sched.name}-microbatches"
                pruned[rule] = pruned.get(rule, 0) + int((~ok).sum())
            if not ok.any():
                continue
            if sched not in names:
                names.append(sched)
            parts.append((sel[ok], names.index(sched)))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return _take(rows, empty), layout_of[empty], fm_of[empty], empty, tuple(names)
    idx = np.concatenate([sel for sel, _ in parts])
    sched_of = np.concatenate([np.full(len(sel), k, dtype=np.int64) for sel, k in parts])
    order = np.lexsort((sched_of, idx))  # keep the rows' own order, schedules side by side
    idx, sched_of = idx[order], sched_of[order]
    return _take(rows, idx), layout_of[idx], fm_of[idx], (sched_of if len(names) > 1 else None), tuple(names)


def layouts_for(model, pp: int, vpp: int) -> str | None:
    """The layout a structural key uses: None (even split) when the layers divide, else a balanced
    uneven layout with the embedding first and MTP/loss last."""
    if pp == 1 and vpp == 1:
        return None
    if model.num_layers % (pp * vpp) == 0:
        return None
    return suggest_layout(model, pp, vpp)


# ---------------------------------------------------------------------------------------------
# Degree options.
# ---------------------------------------------------------------------------------------------
def _capped(limits: Limits, key: str, values: list[int], cap: int | None) -> list[int]:
    """Values the user's limits allow; the declared ``cap`` applies unless the user bounds the key."""
    if cap is not None and not limits.pins(key):
        values = [v for v in values if v <= cap]
    return [v for v in values if limits.allows(key, v)]


def degree_options(model, hw, job, limits: Limits) -> dict[str, list[int]]:
    """The values each degree may take on its own (the model's shape rules and the declared scope)."""
    N, a = job.gpus, model.attention
    dense_ffn = any(k == "dense" for k in model.layer_kinds)
    tps = _capped(limits, "tp", [t for t in divisors(N) if t <= a.num_heads and a.num_heads % t == 0
                                 and (a.num_kv_heads % t == 0 or t % a.num_kv_heads == 0)
                                 and (not dense_ffn or model.ffn.hidden_size % t == 0)], hw.domain_size)
    cp_cap = max(1, job.seq_len // MIN_TOKENS_PER_CP_RANK)
    cps = _capped(limits, "cp", [c for c in divisors(N) if c == 1 or job.seq_len % (2 * c) == 0], cp_cap)
    pps = [p for p in divisors(N) if p <= model.num_layers and limits.allows("pp", p)]
    if model.is_moe:
        eps = [e for e in divisors(model.moe.num_experts) if N % e == 0 and limits.allows("ep", e)]
        etps = _capped(limits, "etp", [t for t in divisors(N) if model.moe.expert_hidden_size % t == 0], hw.domain_size)
    else:
        eps, etps = [1], []
    return {"tp": tps, "cp": cps, "pp": pps, "ep": eps, "etp": etps}


def _product(**cols: list[int]) -> dict[str, np.ndarray]:
    grids = np.meshgrid(*(np.asarray(v, dtype=np.int64) for v in cols.values()), indexing="ij")
    return {k: g.reshape(-1) for k, g in zip(cols, grids)}


def _take(cols: dict[str, np.ndarray], mask) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in cols.items()}


def _families(model, job, limits: Limits, opts: dict) -> dict[str, np.ndarray]:
    """Every (tp, cp, pp, ep, etp) the divisibility rules allow, with dp and edp."""
    N = job.gpus
    c = _product(tp=opts["tp"], cp=opts["cp"], pp=opts["pp"])
    c = _take(c, N % (c["tp"] * c["cp"] * c["pp"]) == 0)
    c["dp"] = N // (c["tp"] * c["cp"] * c["pp"])
    c = _take(c, limits.mask("dp", c["dp"]))
    if model.is_moe:
        e = _product(ep=opts["ep"], etp=opts["etp"])
        n = len(c["tp"])
        c = {**{k: np.repeat(v, len(e["ep"])) for k, v in c.items()}, "ep": np.tile(e["ep"], n),
             "etp": np.tile(e["etp"], n)}
    else:
        c.update(ep=np.ones_like(c["tp"]), etp=c["tp"].copy())
    c = _take(c, N % (c["etp"] * c["ep"] * c["pp"]) == 0)
    c["edp"] = N // (c["etp"] * c["ep"] * c["pp"])
    return _take(c, limits.mask("edp", c["edp"]))


def _with_mbs(fam: dict, job, limits: Limits) -> tuple[dict, int]:
    """Every family once per micro-batch size that divides its batch per data-parallel rank;
    also the number of families whose data-parallel degree does not divide the global batch."""
    gb = job.global_batch
    cands = np.array([b for b in divisors(gb) if limits.allows("mbs", b)], dtype=np.int64)
    divides = gb % fam["dp"] == 0
    per = np.where(divides, gb // fam["dp"], 1)
    fi, ci = np.nonzero(divides[:, None] & (per[:, None] % cands[None, :] == 0)) if len(cands) else ((), ())
    fm = _take(fam, np.asarray(fi, dtype=np.int64))
    fm["mbs"] = cands[np.asarray(ci, dtype=np.int64)] if len(cands) else np.zeros(0, dtype=np.int64)
    fm["micro_batches"] = gb // (fm["mbs"] * fm["dp"])
    fm["vpp"] = np.ones_like(fm["mbs"])
    return fm, int((~divides).sum())


def _with_vpp(fm: dict, pps: list[int], vpps: dict, layout_index: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """Every family and micro-batch size once per VPP of its PP: (columns, layout of each row,
    family-and-micro-batch index of each row)."""
    vmax = max((max(v) for v in vpps.values() if v), default=1)
    allowed = np.zeros((len(pps), vmax + 1), dtype=bool)
    lut = np.zeros((len(pps), vmax + 1), dtype=np.int64)
    for i, p in enumerate(pps):
        for v in vpps[p]:
            allowed[i, v] = True
            lut[i, v] = layout_index[p, v]
    pi = np.searchsorted(np.asarray(pps, dtype=np.int64), fm["pp"])
    fi, v = np.nonzero(allowed[pi])
    rows = _take(fm, fi)
    rows["vpp"] = v.astype(np.int64)
    return rows, lut[pi[fi], v], fi.astype(np.int64)


def _layout_options(model, limits: Limits, pps: list[int], pruned: dict) -> tuple[dict[int, list[int]], dict, list]:
    """Per pp, the vpp values; the layout of each (pp, vpp); the layout strings. A fixed layout
    is checked against the model as Megatron's validate_layer_layout does (``pruned`` counts the
    (pp, vpp) it rules out, by rule)."""
    L = model.num_layers
    fixed = limits.fix.get("layout")
    layouts: list = [None]
    index: dict[tuple[int, int], int] = {}
    vpps: dict[int, list[int]] = {}
    if fixed:
        stages = len(parse_layout(fixed))
        layouts.append(fixed)
        for p in pps:
            v = stages // p if stages % p == 0 else 0
            vpps[p] = [v] if v and (v == 1 or p > 1) and limits.allows("vpp", v) else []
            if vpps[p]:
                try:
                    build_layout(model, p, v, fixed)
                except PlanRuleError as exc:
                    pruned[exc.rule] = pruned.get(exc.rule, 0) + 1
                    pruned.setdefault("messages", {}).setdefault(exc.rule, exc.paragraph())
                    vpps[p] = []
                    continue
                index[p, v] = 1
        return vpps, index, layouts
    for p in pps:
        # At most L + 2 chunks: one decoder layer each, the embedding and the loss on their own
        # (Megatron refuses an empty virtual stage, planner.specs.layout.build_layout).
        vpps[p] = [v for v in (range(1, (L + 2) // p + 1) if p > 1 else [1]) if limits.allows("vpp", v)]
        for v in vpps[p]:
            text = layouts_for(model, p, v)
            if text not in layouts:
                layouts.append(text)
            index[p, v] = layouts.index(text)
    return vpps, index, layouts


PINNED_KEYS: tuple[str, ...] = ()
"""Plan keys the search leaves at their defaults unless ``--fix`` sets them (then every plan of the
space carries the fixed value). Empty since grad_reduce and param_gather became levers (issue 39)."""


STRUCTURAL_LIMITS = ("tp", "cp", "pp", "vpp", "ep", "etp", "dp", "edp", "mbs", "layout", "schedule")
"""The plan keys whose --fix/--max the structural enumeration reads (degree_options, _families,
_with_mbs, _layout_options, _with_schedules); the others (levers) only choose lever options."""


def structural_limits(limits: Limits) -> tuple:
    """What of ``limits`` the structural keys depend on (equal: the same keys, in the same order)."""
    return (sorted((k, str(v)) for k, v in limits.fix.items() if k in STRUCTURAL_LIMITS),
            sorted(limits.max.items()))


def build_space(model, hw, job, *, target: Target = "megatron", limits: Limits | None = None,
                implementation: str = "te", moments: tuple[str, ...] = ("fp32",),
                check_rules: bool = False, torchtitan_config: str | None = None, software=None,
                like: Space | None = None) -> Space:
    """Enumerate the structural keys that satisfy the divisibility and layout rules (and, with
    ``check_rules``, every launcher rule: small spaces only; the search checks those lazily, best
    candidates first), and the lever options (only those the ``software`` release offers, when given).
    ``like``: a space whose structural keys are these (same model, hardware, job, target and
    :func:`structural_limits`; without rule checks), read instead of enumerating them again (the
    robust search pins levers only: its enumeration was a quarter of its CPU time)."""
    limits = limits or Limits()
    if (like is not None and not check_rules and (like.model, like.hw, like.job, like.target) == (model, hw, job, target)
            and structural_limits(like.limits) == structural_limits(limits)):
        keys, layout_of, layouts, pruned = like.keys, like.layout_of, like.layouts, dict(like.pruned)
        messages, fm_keys, fm_of = dict(like.messages), like.fm_keys, like.fm_of
        schedule_of, schedules = like.schedule_of, like.schedules
    else:
        opts = degree_options(model, hw, job, limits)
        fam = _families(model, job, limits, opts)
        fm, bad = _with_mbs(fam, job, limits)
        pruned = {"global-batch-divisible": bad} if bad else {}
        vpps, layout_index, layout_list = _layout_options(model, limits, opts["pp"], pruned)
        layouts = tuple(layout_list)
        messages = pruned.pop("messages", {})
        rows, layout_of, fm_of = _with_vpp(fm, opts["pp"], vpps, layout_index)
        rows, layout_of, fm_of, schedule_of, schedules = _with_schedules(rows, layout_of, fm_of, target, limits, pruned)
        keys = np.stack([rows[k] for k in KEY_COLUMNS], axis=1).astype(np.int64).reshape(-1, len(KEY_COLUMNS))
        fm_keys = np.stack([fm[k] for k in KEY_COLUMNS], axis=1).astype(np.int64).reshape(-1, len(KEY_COLUMNS))
    levers = software_levers(lever_options(model, hw, job, target, limits, implementation, moments), software, limits)
    levers["ep_overlap"] = ep_overlap_options(levers["ep_overlap"], target)
    levers["cuda_graphs"] = static_moe_graphs(levers["cuda_graphs"], model, software, hw, target)
    space = Space(model, hw, job, target, limits, keys, layout_of, layouts, levers, pruned)
    space.messages = messages
    space.torchtitan_config = torchtitan_config
    space.software = software
    space.pinned = {k: limits.fix[k] for k in PINNED_KEYS if k in limits.fix}
    space.fm_keys = fm_keys
    space.fm_of = fm_of
    space.schedule_of, space.schedules = schedule_of, schedules
    if like is not None and keys is like.keys and "_groups" in like.__dict__:
        space.__dict__["_groups"] = like.__dict__["_groups"]  # checked against these keys by identity
    if check_rules:
        space = _rule_checked(space)
    space.scope = describe_space(space)
    return space


def _rule_checked(space: Space) -> Space:
    keep = []
    for i in range(len(space)):
        bad = struct_violations(space.model, space.hw, space.job, space.struct(i), space.target, space.torchtitan_config,
                                space.software)
        if bad:
            space.pruned[bad[0]] = space.pruned.get(bad[0], 0) + 1
        else:
            keep.append(i)
    assert space.fm_of is not None  # build_space sets it before checking rules
    return Space(space.model, space.hw, space.job, space.target, space.limits, space.keys[keep],
                 space.layout_of[keep], space.layouts, space.levers, space.pruned, fm_keys=space.fm_keys,
                 fm_of=space.fm_of[keep], pinned=space.pinned,
                 schedule_of=None if space.schedule_of is None else space.schedule_of[keep], schedules=space.schedules,
                 torchtitan_config=space.torchtitan_config, software=space.software)


def group_rows(code: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The distinct values of an integer column, ascending, and the rows holding each (ascending):
    one stable sort instead of a mask per value."""
    codes, inv = np.unique(code, return_inverse=True)
    if not len(codes):
        return codes, []
    inv = inv.reshape(-1)
    return codes, np.split(np.argsort(inv, kind="stable"), np.cumsum(np.bincount(inv, minlength=len(codes)))[:-1])


def _values(xs) -> list[int]:
    """The distinct values of a degree column, ascending (counted, not sorted: the columns hold
    hundreds of thousands of small positive integers)."""
    xs = np.asarray(xs)
    if len(xs) and xs.min() >= 0 and xs.max() < 1 << 20:
        return np.flatnonzero(np.bincount(xs)).tolist()
    return [int(x) for x in np.unique(xs)]


def describe_space(space: Space) -> dict:
    """What the space holds, for the status line and the JSON: each degree's values, the layouts,
    the levers, and the declared limits that are scope rather than proofs."""
    lim, hw, job = space.limits, space.hw, space.job
    degrees = {k: _values(space.col(k)) for k in ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs")}
    declared = []
    if not lim.pins("tp"):
        declared.append(f"tp <= {hw.domain_size} (the NVLink domain)")
    if space.model.is_moe and not lim.pins("etp"):
        declared.append(f"etp <= {hw.domain_size} (the NVLink domain)")
    if not lim.pins("cp"):
        declared.append(f"cp <= {max(1, job.seq_len // MIN_TOKENS_PER_CP_RANK)} "
                        f"(at least {MIN_TOKENS_PER_CP_RANK} tokens per CP rank)")
    if "layout" in lim.fix:
        layouts = f"the fixed layout {lim.fix['layout']}"
    else:
        layouts = ("per (pp, vpp): Megatron's even split where pp*vpp divides the layers, else the balanced "
                   "uneven layout (one-layer chunks and, past the layer count, the embedding and the loss in chunks "
                   "of their own)")
    levers = {k: [str(v) if v is not None else "-" for v in vals] for k, vals in space.levers.items()}
    levers.update({k: [str(v)] for k, v in space.pinned.items()})
    if "sharding" not in lim.fix:
        declared.append("sharding without ddp and hsdp (--fix sharding=... searches them)")
    schedules = sorted({str(space.schedule(i) or "default") for i in np.unique(space.schedule_col(), return_index=True)[1]})
    return {"keys": len(space), "degrees": degrees, "layouts": layouts, "schedules": schedules, "levers": levers,
            "declared": declared}


def lever_options(model, hw, job, target, limits: Limits, implementation: str, moments) -> dict[str, tuple]:
    """Each lever's typed values, simplest first (ties in step time go to earlier values)."""
    # A precision the GPU has no tensor cores for is dropped here (planner.rules refuses it on a plan).
    needs = {"fp8": "fp8", "nvfp4": "fp4"}
    precisions = [Precision(p) for p in job.precisions if p not in needs or needs[p] in hw.gpu.peak_flops]
    opts: dict[str, list] = {
        "recompute": [parse_recompute(r) for r in recompute_options(model, implementation, target)],
        "precision": precisions,
        "moments": list(moments),
        # ddp is never better than dist_opt (same traffic, more memory); hsdp:N only when fixed.
        "sharding": [Sharding("dist_opt"), Sharding("zero2"), Sharding("fsdp")],
        "offload": [Offload(), Offload(optimizer=True), Offload(activations=True)],
        "dispatcher": [hw.default_dispatcher] + [d for d in ("alltoall", "deepep", "hybridep") if d != hw.default_dispatcher]
        if model.is_moe else [None],
        # wgrad (--delay-wgrad-compute) is kept only where the release has it (software_levers) and
        # then replaces on under Megatron's schedules (ep_overlap_options).
        "ep_overlap": [EpOverlap.OFF, EpOverlap.ON, EpOverlap.WGRAD] if model.is_moe else [EpOverlap.OFF],
        # Megatron's --grad-reduce-in-bf16 (megatron/training/arguments.py) halves the main-gradient
        # buffer and its reduction; --fp8-param-gather gathers FP8 primary weights, only with an FP8
        # precision (the launcher rules, planner.rules param-gather-fp8 / -sharded, refuse the rest).
        "grad_reduce": ["fp32", "bf16"],
        "param_gather": ["bf16"] + (["fp8"] if Precision("fp8") in precisions else [])
        + (["fp4"] if Precision("nvfp4") in precisions else []),
        "cuda_graphs": [parse_cuda_graphs(g) for g in graph_options(model)],
    }
    for key, value in limits.fix.items():
        if key in opts:
            opts[key] = [value]
    return {k: tuple(v) for k, v in opts.items()}


def ep_overlap_options(values: tuple, target: str) -> tuple:
    """The EP-overlap values worth ranking, of those the release offers. ``wgrad`` (Megatron's
    --delay-wgrad-compute on top of the combined 1F1B) replaces ``on`` under --target megatron: it
    holds the same memory (the cost model keys memory on the overlap being on) and the walk only
    moves the experts' and attention's weight gradients behind the backward dispatch, so it is never
    slower (checked on every bundled MoE run with ep > 1: 78 runs, none slower;
    tests/test_search_space_levers.py keeps that rule checked). Under --target any both stay (the
    DualPipe schedules run ``on`` only: rule ep-overlap-wgrad); torchtitan has no ``wgrad``."""
    if target == "torchtitan":
        return tuple(v for v in values if v != EpOverlap.WGRAD)
    if target == "megatron" and EpOverlap.ON in values and EpOverlap.WGRAD in values:
        return tuple(v for v in values if v != EpOverlap.ON)
    return values


def graph_options(model) -> tuple[str, ...]:
    """The CUDA graphs the search tries, least captured first (ties go to eager): on MoE models
    the scope Megatron's MoE recipes capture (attention, router and dispatcher preprocessing:
    Megatron-Bridge DeepSeek-V3 perf recipes, software/megatron-bridge-0.6.yaml); the experts
    stay eager, as dropless routing has dynamic shapes (launcher rule cuda-graphs-dropless-moe);
    and the full iteration, which the 26.06+ Megatron-Bridge MoE recipes capture with static expert
    shapes (a per-rank token capacity and the paged stash: :func:`static_moe_graphs` keeps it where
    the release has them, launcher rule cuda-graphs-full-iteration-moe; in Transformer Engine's fused
    grouped experts, Blackwell or later with etp 1, rule cuda-graphs-static-experts). On dense models the whole
    layer and the full iteration (this one also with full recompute). The launcher rules and the
    --software release decide which of these a plan may use."""
    if model.is_moe:
        return ("none", "scoped:attn+moe_router+moe_preprocess", "full_iteration")
    return ("none", "scoped:layer", "full_iteration")


STATIC_MOE_FEATURES = ("expert_rank_capacity", "paged_stash")
"""What a full-iteration graph of a dropless MoE model needs besides the graph itself: static expert
shapes, the per-rank token capacity (--moe-expert-rank-capacity-factor) with the paged stash
(--moe-paged-stash), as the Megatron-Bridge 26.06+ MoE recipes set them (docs/research/levers-2026.md
section 2; megatron-core 0.18 and later)."""


def static_moe_graphs(values: tuple, model, software, hw=None, target: str = "megatron") -> tuple:
    """``values`` without full_iteration on an MoE model where the release lacks
    :data:`STATIC_MOE_FEATURES` (no release: kept, as every other lever is), or where the hardware
    cannot run the fused grouped experts such a graph captures (planner.rules.
    fused_grouped_experts_missing: Hopper and older with gated experts) under Megatron's rules. The
    value stays when it is all the user left (a --fix): the launcher rule then says why no plan runs."""
    no_release = model.is_moe and software is not None and not all(software.has(f) for f in STATIC_MOE_FEATURES)
    no_kernel = target != "torchtitan" and fused_grouped_experts_missing(model, hw) is not None
    if not (no_release or no_kernel):
        return values
    kept = tuple(v for v in values if v is None or str(v) != "full_iteration")
    return kept if kept or no_release else values


def software_levers(levers: dict[str, tuple], software, limits: Limits) -> dict[str, tuple]:
    """The lever options a release offers (planner.specs.software.SoftwareProfile.offers): the
    search never ranks a plan the chosen --software cannot launch. A --fix value the release lacks
    is refused here, naming the release, rather than leaving nothing to rank."""
    if software is None:
        return levers
    out = {}
    for key, values in levers.items():
        kept = tuple(v for v in values if v is None or software.offers(key, v))
        if not kept:
            shown = str(values[0]) if values else "?"
            firsts = [first_release_with(f, software) for f in lever_features(key, values[0])] if values else []
            since = ", ".join(f"first in {f.title}" for f in firsts if f is not None)
            raise PlannerError(
                f"--fix {key}={shown} is a lever {software.title} ({software.name}) does not have"
                + (f" ({since} among the releases planner knows)" if since else "") + ".",
                hint="Give --software a newer release (see 'planner software') or leave the lever to the search.")
        out[key] = kept
    return out


def make_plan(s: Struct, lever_values: dict) -> Plan:
    d = s.plan_fields()
    for k, v in lever_values.items():
        if v is not None:
            d[k] = v
    if s.ep == 1:
        d.pop("dispatcher", None)
        d["ep_overlap"] = EpOverlap.OFF
    return Plan.model_validate(d)
