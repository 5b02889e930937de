"""When nothing fits: say which constraint binds, by how much, and what would make room."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from planner.cost.setup import Assumptions
from planner.errors import NothingFitsError, PlannerError
from planner.search.bnb import BranchAndBound, INF
from planner.search.exhaustive import group_index_vectors, plan_costs
from planner.search.rulecheck import struct_violations
from planner.search.space import Space, build_space, make_plan
from planner.search.tables import MAX_TABLE_US, MiB, Tables, lever_indices, lever_values
from planner.specs.catalog import all_hardware
from planner.specs.common import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_TOKENS_PER_STEP


def no_structure(space, options) -> PlannerError:
    pruned = ", ".join(f"{k} ({v})" for k, v in sorted(space.pruned.items())) or "none"
    why = " ".join(space.messages.values())
    pruned += f"; {why}" if why else ""
    lim = ""
    if options.limits.fix or options.limits.max:
        lim = f" Your limits: --fix {options.limits.fix or '-'} --max {options.limits.max or '-'}."
    return NothingFitsError(
        f"No parallel layout of {space.model.name} on {space.job.gpus} {space.hw.name} GPUs satisfies the "
        f"divisibility and layout rules (rejected by: {pruned}).{lim}",
        hint="Try a GPU count with more factors of 2, a global batch divisible by more data-parallel degrees, "
        "or looser --fix/--max.",
    )


def smallest_peak(tables: Tables, rows):
    """(peak MiB, key, lever index, components MiB) of the plan with the smallest peak over every
    lever combination of the keys in rows: the memory the search could not get under."""
    gi, _ = group_index_vectors(tables)
    best: tuple[float, int | None, int | None, dict[str, int] | None] = (math.inf, None, None, None)
    for s in rows:
        peak = np.zeros(len(gi["W"]), dtype=np.int64)
        parts: dict[str, np.ndarray] = {}
        for r in tables.stages_kept[s]:
            ot = tables.OT[s, r][gi["OT"]]
            w, c, a = tables.W[s, r][gi["W"]], tables.C[s, r][gi["C"]] + tables.G[s, r][gi["G"]], np.maximum(tables.A[s, r][gi["A"]], ot)
            tot = w.astype(np.int64) + c + a
            higher = tot > peak
            peak = np.where(higher, tot, peak)
            for name, arr in (("constant (weights, gradients, optimizer)", w), ("communication buffers and CUDA-graph pools", c),
                              ("activations and transients", a)):
                parts[name] = np.where(higher, arr, parts.get(name, np.zeros_like(arr)))
        j = int(np.argmin(peak))
        if peak[j] < best[0]:
            best = (int(peak[j]), s, j, {k: int(v[j]) for k, v in parts.items()})
    return best


def gpus_that_fit(space: Space, options, assumptions, max_factor: int = 64) -> int | None:
    """The smallest power-of-two multiple of the job's GPU count (same batch per GPU) at which some
    plan fits, searched with the same bounds and tables: replicated weights and gradients shrink
    only with TP, PP and EP, so a linear guess would promise too much."""
    # Bounded work: no count beyond what planner accepts is tried, nor one at which even the
    # weights alone, fully sharded at one byte per parameter, would not fit (a model far too large
    # for any count would otherwise cost six full searches at up to 64x the GPUs).
    params = space.model.params.total + space.model.params.mtp
    usable = space.hw.gpu.hbm_usable_bytes.value
    f = 2
    while f <= max_factor:
        gpus, batch = space.job.gpus * f, space.job.global_batch * f
        if gpus > MAX_GPUS or batch > MAX_GLOBAL_BATCH or batch * space.job.seq_len > MAX_TOKENS_PER_STEP:
            break
        if params / gpus > usable:
            f *= 2
            continue
        job = space.job.model_copy(update={"gpus": gpus, "global_batch": batch})
        sp = build_space(space.model, space.hw, job, target=space.target, limits=space.limits,
                         implementation=assumptions.implementation, moments=options.moments,
                         torchtitan_config=space.torchtitan_config, software=options.software)
        if len(sp):
            valid = lambda i, sp=sp: not struct_violations(sp.model, sp.hw, sp.job, sp.struct(i), sp.target,  # noqa: E731
                                                           sp.torchtitan_config, sp.software)
            bb = BranchAndBound(sp, assumptions, 1, valid, first_fit=True)
            bb.run()
            if bb.U < INF:
                return job.gpus
        f *= 2
    return None


def diagnose_nothing_fits(space: Space, tables: Tables, options, rows, assumptions=None, say=None,
                          exact: bool = True) -> NothingFitsError:
    """Say plainly why nothing fits: the smallest achievable peak (over every lever combination of
    the keys considered, rows of ``tables``; ``exact``: they hold the space's smallest, else it is
    the smallest of the keys costed), the class that dominates it, and what would make room."""
    best = smallest_peak(tables, rows)
    peak_mib, s, j, parts = best
    cap = tables.cap_mib
    if s is not None and peak_mib <= cap:
        if too_slow(tables, rows):
            return step_too_long(space, options)
        return rules_bind(space, options)
    plan = make_plan(tables.structs[s], lever_values(space, lever_indices(space, j))) if s is not None else None
    if plan is not None:
        plan = plan.canonical_for(space.model, space.hw, space.job)
    dominant = max(parts, key=parts.get) if parts else "memory"
    gib = MiB / 2**30
    if peak_mib is math.inf:
        msg = (f"Nothing fits: every plan of {space.model.name} on {space.job.gpus} {space.hw.name} GPUs "
               f"({space.target} launcher) exceeds the {cap * gib:.1f} GiB per-GPU allocation limit.")
    else:
        msg = (f"Nothing fits: every plan of {space.model.name} on {space.job.gpus} {space.hw.name} GPUs "
               f"({space.target} launcher) exceeds the {cap * gib:.1f} GiB per-GPU allocation limit. The smallest "
               f"{'achievable peak' if exact else 'peak of the layouts with the lowest memory bounds'} is "
               f"{peak_mib * gib:.1f} GiB ({(peak_mib - cap) * gib:.1f} GiB over), with plan "
               f"{plan.to_string() if plan else '-'}; {dominant} dominate it "
               f"({', '.join(f'{k} {v * gib:.1f} GiB' for k, v in parts.items())}).")
    hints = _room(space, options, plan, dominant, assumptions, say, peak_mib)
    return NothingFitsError(msg, hint="To make room: " + "; ".join(hints) + ".",
                            details={"smallest_peak_bytes": peak_mib * MiB if s is not None else None,
                                     "capacity_bytes": cap * MiB,
                                     "plan": plan.to_string() if plan else None, "dominant": dominant,
                                     "components_bytes": {k: v * MiB for k, v in (parts or {}).items()}})


def _room(space, options, plan, dominant, assumptions, say, peak_mib) -> list[str]:
    hints = []
    if options.limits.fix or options.limits.max:
        hints.append("relax your --fix/--max limits")
    if "constant" in dominant:
        grows = constant_shards_with_gpus(space, plan)
        if grows:
            if say:
                say("nothing fits: finding the GPU count at which a plan would")
            need = gpus_that_fit(space, options, assumptions or Assumptions())
            named = ", ".join(grows[:-1]) + " and " + grows[-1] if len(grows) > 1 else grows[0]
            hints.append(f"more GPUs (constant memory shrinks as {named} grow"
                         + (f": {need} GPUs at the same batch per GPU fit)" if need else
                            f"; even {space.job.gpus * 64} GPUs do not fit under your limits)"))
        else:
            hints.append("allow ZeRO/FSDP sharding (--fix sharding=...) or more pipeline stages: under your "
                         "limits constant memory does not shrink with more GPUs, only data parallelism grows")
    else:
        hints.append("a shorter sequence or smaller global batch per GPU")
    if peak_mib is not math.inf:
        larger = larger_hardware(space.hw, peak_mib * MiB)
        if larger:
            hints.append(f"a larger GPU ({larger})")
    return hints


def constant_shards_with_gpus(space: Space, plan) -> list[str]:
    """Which degrees that divide the constant memory could still grow if the job had more GPUs,
    under the user's --fix/--max: data-parallel sharding (ZeRO/FSDP, Megatron's distributed
    optimizer), pipeline stages, and for MoE the expert-parallel degree. TP is left out: it is
    bounded by the NVLink domain and the head count, not by the GPU count."""
    lim = space.limits
    out = []
    if any(lim.allows("sharding", v) for v in ("dist_opt", "zero2", "fsdp")):
        out.append("the data-parallel shards")
    pp = plan.pp if plan is not None else 1
    if pp < space.model.num_layers and lim.allows("pp", pp * 2) and "pp" not in lim.fix:
        out.append("pipeline stages")
    ep = plan.ep if plan is not None else 1
    if space.model.moe is not None and "ep" not in lim.fix and lim.allows("ep", ep * 2) \
            and ep * 2 <= space.model.moe.num_experts:
        out.append("expert parallelism")
    return out


def too_slow(tables: Tables, rows) -> bool:
    """Whether plans pass the rules and fit in memory, but every one of them has a step time at
    the tables' cap (MAX_TABLE_US): the job is too large for the hardware, not the rules too strict."""
    gi, _ = group_index_vectors(tables)
    rows = list(rows)
    some_fit = False
    for a in range(0, len(rows), 1024):
        ok, t = plan_costs(tables, np.asarray(rows[a:a + 1024]), gi)
        if (ok & (t < MAX_TABLE_US)).any():
            return False
        some_fit = some_fit or bool(ok.any())
    return some_fit


def step_too_long(space, options) -> NothingFitsError:
    hours = MAX_TABLE_US / 1e6 / 3600
    return NothingFitsError(
        f"Nothing fits: plans of {space.model.name} on {space.job.gpus} {space.hw.name} GPUs fit in memory and pass the "
        f"{options.target} launcher's checks, but every one takes more than {hours:.1f} hours per step, beyond the step "
        "times planner's search represents (its integer tables cap a step at 2^35 us): global batch "
        f"{space.job.global_batch:,} x seq {space.job.seq_len:,} is far more work per step than these GPUs do in that time.",
        hint="Use a smaller global batch or sequence length, more GPUs, or check the hardware's rates (FLOP/s, bandwidths).",
        details={"max_step_time_us": MAX_TABLE_US},
    )


def rules_bind(space, options) -> NothingFitsError:
    """Memory is not the problem: every plan breaks a rule of the target launcher."""
    counts: Counter = Counter()
    for i in range(min(len(space), 2000)):
        bad = struct_violations(space.model, space.hw, space.job, space.struct(i), options.target,
                                space.torchtitan_config, space.software)
        counts.update(bad[:1])
    top = ", ".join(f"{rule} ({n} layouts)" for rule, n in counts.most_common(3)) or "the lever rules"
    if counts and counts.most_common(1)[0][0] in ("torchtitan-model", "torchtitan-mtp"):
        # A model planner's torchtitan table does not know: --target any would rank plans the
        # torchtitan export then refuses; the config function is what the torchtitan rules need.
        hint = ("Name the torchtitan config_registry function that builds this model: --torchtitan-config "
                "MODULE:FUNCTION (as export and check take it).")
    else:
        hint = ("Try --target any (plans no launcher may run yet: the exports may refuse them), another launcher, "
                "or fix the model spec ('planner check' explains each rule).")
    return NothingFitsError(
        f"No plan of {space.model.name} on {space.job.gpus} {space.hw.name} GPUs passes the {options.target} "
        f"launcher's start-up checks, although some fit in memory: rejected by {top}.",
        hint=hint,
        details={"rules": dict(counts)},
    )


def larger_hardware(hw, need_bytes: float) -> str:
    out = []
    for h in all_hardware():
        if h.gpu.hbm_usable_bytes.value > need_bytes * 1.1 and h.name != hw.name:
            out.append((h.gpu.hbm_usable_bytes.value, h.name))
    return ", ".join(n for _, n in sorted(out)[:3])
