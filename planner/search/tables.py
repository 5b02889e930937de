"""Integer cost tables over structural keys and lever groups.

Memory and time separate into terms that each depend on the structural key and a few levers:

    peak(stage r) = W[r](sharding, moments, offload, grad_reduce)
                    + C[r](sharding, dispatcher, ep_overlap, grad_reduce)
                    + G[r](cuda_graphs, recompute, precision, ep_overlap)
                    + max(A[r](recompute, precision, offload, ep_overlap, cuda_graphs),
                          OT[r](sharding, moments, offload, precision, grad_reduce))
    step time     = TP(recompute, precision, dispatcher, ep_overlap, offload, cuda_graphs)
                    + TD(sharding, precision, recompute, dispatcher, ep_overlap, grad_reduce, param_gather,
                         cuda_graphs)
                    + TO(sharding, moments, offload, precision)

W is constant memory (weights, gradients, optimizer), C communication and FSDP buffers, G the
CUDA-graph static buffers and pools (with a full-iteration graph of MoE layers, the paged stash's
CUDA buffer, sized from the in-flight stash), A the
activation-and-transient peak over the schedule, OT optimizer-step temporaries; TP the pipeline
(compute, exposed TP/CP/EP/PP communication, bubble), TD exposed data-parallel communication, TO
the optimizer step and offload traffic. Every entry is read from the one composition
(:func:`planner.cost.compose.evaluate_batch`): per pipeline layout, one batch of some of its
structural keys per lever combination of the term's group. Memory is in MiB rounded up, time in
microseconds rounded; CP-SAT and the exhaustive oracle read the same integers.

The search fills the tables of a layout in phases (:func:`time_phase`, :func:`memory_phase`,
:func:`rule_tables`), each over the keys its bounds have not ruled out; :func:`build_tables`
fills every phase for given keys (the oracle, tests, the nothing-fits diagnosis).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.cost.compose import CostContext, Levers, PlanBatch, evaluate_batch, memory_limits
from planner.cost.setup import Assumptions
from planner.search.rulecheck import lever_allowed
from planner.search.space import COL, KEY_COLUMNS, LEVERS, Space, Struct
from planner.specs.layout import build_layout
from planner.specs.plan import CudaGraphs
from planner.specs.schedule import Schedule, default_schedule

if TYPE_CHECKING:
    from planner.specs.layout import PipelineLayout

MiB = 2**20

GROUPS: dict[str, tuple[str, ...]] = {
    # grad_reduce sets the main-gradient bytes (W), the reduce-scatter buffers of sharded
    # gradients (C), the fp32 gradient copy of the optimizer step (OT) and the reduction's bytes
    # (TD); param_gather the all-gather's bytes (TD) only; cuda_graphs the host work of the
    # pipeline phase (TP), the compute the data-parallel sync hides behind (TD) and the graph
    # pools (C), which hold per captured layer buffers of the precision and, with a full-iteration
    # graph of MoE layers, the paged stash's CUDA buffer, sized from the in-flight stash (recompute,
    # precision); and the activation peak (A), whose MoE layers stash their expert activations
    # in that buffer (inflight_memory.without_stash).
    "W": ("sharding", "moments", "offload", "grad_reduce"),
    "C": ("sharding", "dispatcher", "ep_overlap", "grad_reduce"),
    # The graph pools (G) apart from the other buffers (C): their levers are the in-flight memory's
    # (_memory_levers: recompute, precision, EP overlap) and the graph scope, the other buffers' the
    # sharding, dispatcher and gradient reduction. One table over the union (C held both until
    # this split) had 540 columns on Qwen3-235B on 256 H100s: 2.7 GiB of int32 for one term and a
    # 12 GB search; two tables over their own levers sum to the same peak.
    "G": ("cuda_graphs", "recompute", "precision", "ep_overlap"),
    "A": ("recompute", "precision", "offload", "ep_overlap", "cuda_graphs"),
    "OT": ("sharding", "moments", "offload", "precision", "grad_reduce"),
    "TP": ("recompute", "precision", "dispatcher", "ep_overlap", "offload", "cuda_graphs"),
    "TD": ("sharding", "precision", "recompute", "dispatcher", "ep_overlap", "grad_reduce", "param_gather",
           "cuda_graphs"),
    "TO": ("sharding", "moments", "offload", "precision"),
}
RULE_GROUPS = {
    "R1": ("recompute", "offload", "ep_overlap", "dispatcher", "cuda_graphs"),
    "R2": ("sharding", "precision", "moments", "offload", "grad_reduce", "param_gather"),
}
TIME_TERMS = ("TP", "TD", "TO")
MEMORY_TERMS = ("W", "C", "G", "A", "OT", "HW", "HA")
TERM_GROUP = {**{k: k for k in GROUPS}, "HW": "W", "HA": "A"}


def combos(space: Space, group: tuple[str, ...]) -> list[tuple]:
    """Value combinations of a lever group, in mixed-radix order (first lever most significant)."""
    return list(itertools.product(*(space.levers[k] for k in group)))


def combo_index(space: Space, group: tuple[str, ...], lever_idx: dict[str, int]) -> int:
    idx = 0
    for k in group:
        idx = idx * len(space.levers[k]) + lever_idx[k]
    return idx


@dataclass
class Tables:
    """The integer cost tables of a set of structural keys (see the module docstring): S keys,
    R pipeline ranks (the deepest key's), one column per value combination of each term's lever
    group (GROUPS, mixed radix, first lever most significant)."""

    space: Space
    structs: list[Struct]
    """The structural keys, one row each."""
    W: np.ndarray
    """(S, R, |W|) MiB: weights, gradients and optimizer states of each rank."""
    C: np.ndarray
    """(S, R, |C|) MiB: communication and FSDP buffers."""
    G: np.ndarray
    """(S, R, |G|) MiB: CUDA-graph static buffers and pools (0 without graphs)."""
    A: np.ndarray
    """(S, R, |A|) MiB: the activation-and-transient peak over the rank's schedule."""
    HW: np.ndarray
    """(S, R, |W|) MiB of host memory: offloaded optimizer state."""
    HA: np.ndarray
    """(S, R, |A|) MiB of host memory: offloaded activations in flight at the end of the warm-up."""
    OT: np.ndarray
    """(S, R, |OT|) MiB: the optimizer step's temporaries."""
    TP: np.ndarray
    """(S, |TP|) microseconds: the pipeline phase (compute, exposed TP/CP/EP/PP communication, bubble)."""
    TD: np.ndarray
    """(S, |TD|) microseconds: exposed data-parallel and FSDP communication."""
    TO: np.ndarray
    """(S, |TO|) microseconds: the optimizer step (or the offloaded one)."""
    R1: np.ndarray
    """(S, |R1|) bool: the launcher accepts this combination of its rule group's levers."""
    R2: np.ndarray
    """(S, |R2|) bool: the same for the second rule group."""
    cap_mib: int
    """Allocated-memory limit: (usable HBM - CUDA context - user margin) / (1 + allocator fraction)."""
    host_cap_mib: int
    """Host memory per GPU."""
    stages_kept: list[list[int]] = field(default_factory=list)
    """For each structural key, the pipeline ranks whose constraints are not dominated."""
    ids: np.ndarray | None = None
    """Global index of each structural key in the space (the ranking's last tie-break)."""

    def __post_init__(self):
        if self.ids is None:
            self.ids = np.arange(len(self.structs))

    def subset(self, rows) -> Tables:
        """The tables of some structural keys only (same global ids)."""
        rows = np.asarray(rows, dtype=int)
        assert self.ids is not None  # set in __post_init__
        return Tables(self.space, [self.structs[i] for i in rows], self.W[rows], self.C[rows], self.G[rows], self.A[rows],
                      self.HW[rows], self.HA[rows], self.OT[rows], self.TP[rows], self.TD[rows], self.TO[rows],
                      self.R1[rows], self.R2[rows], self.cap_mib, self.host_cap_mib,
                      [self.stages_kept[i] for i in rows], self.ids[rows])

    @property
    def n_total(self) -> int:
        """Structural keys in the whole space (the objective's radix)."""
        return len(self.space)

    def time_lower_bound(self) -> np.ndarray:
        """Per structural key, a lower bound on step time (us): each time term at its minimum."""
        return self.TP.min(axis=1) + self.TD.min(axis=1) + self.TO.min(axis=1)

    def may_fit(self) -> np.ndarray:
        """Per structural key, a necessary condition for some lever choice to fit: every kept
        stage's smallest constant, communication and activation terms within capacity."""
        ok = np.ones(len(self.structs), dtype=bool)
        for i, kept in enumerate(self.stages_kept):
            for r in kept:
                low = max(self.A[i, r].min(), self.OT[i, r].min())
                if self.W[i, r].min() + self.C[i, r].min() + self.G[i, r].min() + low > self.cap_mib:
                    ok[i] = False
                    break
        return ok

    @property
    def n_levers(self) -> int:
        return self.space.lever_product_size


MAX_TABLE_US = 2**35
"""Time entries are capped at 2^35 us (9.5 hours per step), and a plan at the cap is no plan: the
search's objective multiplies step time by up to 2^27 (layouts x lever combinations) and must stay
inside int64 and CP-SAT's range. A step that long means the job or hardware is far outside what
planner models (see planner.search.driver._too_slow for the message)."""

MAX_TABLE_MIB = 2**31 - 1
"""Memory entries (int32 MiB) are capped here (2 PiB, beyond any GPU): a term that overflows does
not wrap around into a small or negative number that would look like it fits."""


def _mib(x) -> np.ndarray:
    """Bytes to MiB, rounded up (the memory constraints never round a peak down), capped."""
    mib = np.ceil(np.asarray(x, dtype=float) / MiB - 1e-9)
    return _capped(mib, MAX_TABLE_MIB)


def _us(x) -> np.ndarray:
    """Seconds to microseconds, rounded to nearest (half to even), capped at MAX_TABLE_US."""
    us = np.rint(np.asarray(x, dtype=float) * 1e6)
    return _capped(us, MAX_TABLE_US)


def _capped(v: np.ndarray, cap: int) -> np.ndarray:
    """Whole numbers ``v`` as int64 at most ``cap``; NaN and +inf are ``cap``, -inf 0. (The check
    for non-finite entries first: nan_to_num's own costs some 20 us a call, ~17,000 calls a search.)"""
    if not np.isfinite(v).all():
        v = np.nan_to_num(v, nan=cap, posinf=cap, neginf=0.0)
    return np.minimum(v, cap).astype(np.int64)


def lever_setting(values: dict):
    """Typed levers from one value of each of the space's levers."""
    offload = values["offload"]
    return Levers(values["recompute"], values["precision"], values["moments"], values["sharding"], offload.optimizer,
                  offload.activations, values["dispatcher"], values["ep_overlap"],
                  grad_reduce=values.get("grad_reduce", "fp32"), param_gather=values.get("param_gather", "bf16"),
                  cuda_graphs=values.get("cuda_graphs", CudaGraphs()))


def base_levers(space: Space):
    return lever_setting({**space.pinned, **{k: v[0] for k, v in space.levers.items()}})


ROW = ("recompute", "precision", "dispatcher", "ep_overlap")
"""The levers a batch evaluates side by side (planner.cost.compose.ROW_LEVERS); the others are
looped over, one batch per value combination."""


def batch_plan(space: Space, group: tuple[str, ...]) -> list[tuple[list, np.ndarray]]:
    """How to fill a table over ``group``: per combination of its batch levers, the variants (typed
    levers of each combination of its row levers) and each variant's column in the table."""
    base = {**space.pinned, **{k: v[0] for k, v in space.levers.items()}}
    row = tuple(k for k in group if k in ROW)
    rest = tuple(k for k in group if k not in ROW)
    index = {values: ci for ci, values in enumerate(combos(space, group))}
    out = []
    for b in combos(space, rest):
        variants, cols = [], []
        for v in combos(space, row):
            values = {**base, **dict(zip(rest, b)), **dict(zip(row, v))}
            variants.append(lever_setting(values))
            cols.append(index[tuple(values[k] for k in group)])
        out.append((variants, np.array(cols)))
    return out


# ---------------------------------------------------------------------------------------------
# Filling the tables of one pipeline layout, phase by phase.
# ---------------------------------------------------------------------------------------------
@dataclass
class Layout:
    """The keys of one pipeline layout ``(pp, vpp, layout)`` in a cost context."""

    pp: int
    vpp: int
    text: str | None
    layout: PipelineLayout
    """The planner.specs.layout.PipelineLayout."""
    schedule: Schedule | None = None
    """The pipeline schedule's record (None: Megatron's default for the degrees)."""


def layout_of(space, pp: int, vpp: int, li: int, schedule: Schedule | None) -> Layout:
    """Group ``(pp, vpp, layout index, schedule)`` of :meth:`Space.groups` as a :class:`Layout`
    (the schedule resolved to Megatron's default when None, its placement in the layout)."""
    text = space.layouts[li]
    sched = schedule or default_schedule(pp, vpp)
    return Layout(pp, vpp, text, build_layout(space.model, pp, vpp, text, sched), sched)


_BATCHES = itertools.count()


def _batch(ctx, lay: Layout, rows: np.ndarray, base):
    """A batch of context rows ``rows`` (sorted by micro-batch count, as compose's own layout
    batches are) and the order that sorts them."""
    order = np.argsort(ctx.keys.col["micro_batches"][rows], kind="stable")
    group = (lay.pp, lay.vpp, lay.text, "search", next(_BATCHES))
    # The schedules the closed forms do not cover are estimated, not walked (planner.cost.walked);
    # the search re-evaluates the plans it ranks with the walk.
    return PlanBatch(ctx, np.asarray(rows)[order], lay.layout, (base,), group, lay.schedule, False), order


def _fill(batch, order, plans, fn, shape_tail: tuple, per_rank: bool) -> np.ndarray:
    """One table of the batch's keys (in the caller's row order): ``fn(costs)`` (or
    ``fn(costs, r)`` per rank) for every batch-lever combination, the row levers side by side."""
    n = batch.n_keys
    out = np.zeros((n, *shape_tail), dtype=np.int64)
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    for variants, cols in plans:
        c = evaluate_batch(batch.with_variants(variants))
        for r in (range(batch.pp) if per_rank else (None,)):
            vals = fn(c) if r is None else fn(c, r)
            vals = np.broadcast_to(vals, (len(cols) * n,)).reshape(len(cols), n)[:, back].T
            if r is None:
                out[:, cols] = vals
            else:
                out[:, r, cols] = vals
    return out


TIME_FNS = {
    "TP": lambda c: _us(c.pipeline_s()),
    "TD": lambda c: _us(c.data_parallel().exposed),
    "TO": lambda c: _us(c.optimizer().seconds),
}
MEMORY_FNS = {
    "W": lambda c, r: _mib(c.constant(r).total), "HW": lambda c, r: _mib(c.constant(r).host_optimizer),
    "C": lambda c, r: _mib(c.sync_buffers(r)), "G": lambda c, r: _mib(c.graph_pool(r)),
    "A": lambda c, r: _mib(c.activation_peak(r)), "OT": lambda c, r: _mib(c.optimizer_transient(r)),
    "HA": lambda c, r: _mib(c.host_activation_bytes(r)) if c.lv.offload_activations else 0,
}


def time_phase(ctx, space: Space, lay: Layout, rows: np.ndarray, plans: dict) -> dict[str, np.ndarray]:
    """TP, TD and TO (microseconds) of context rows ``rows`` of one layout."""
    batch, order = _batch(ctx, lay, rows, base_levers(space))
    try:
        return {k: _fill(batch, order, plans[k], TIME_FNS[k], (len(combos(space, GROUPS[k])),), False)
                for k in TIME_TERMS}
    finally:
        ctx.forget(batch.group)


def memory_phase(ctx, space: Space, lay: Layout, rows: np.ndarray, plans: dict,
                 terms: tuple[str, ...] = MEMORY_TERMS) -> dict[str, np.ndarray]:
    """W, C, A, OT, HW and HA (MiB, per pipeline rank) of context rows ``rows`` of one layout
    (``terms``: some of them only)."""
    batch, order = _batch(ctx, lay, rows, base_levers(space))
    try:
        return {k: _fill(batch, order, plans[TERM_GROUP[k]], MEMORY_FNS[k],
                         (lay.pp, len(combos(space, GROUPS[TERM_GROUP[k]]))), True).astype(np.int32)
                for k in terms}
    finally:
        ctx.forget(batch.group)


def batch_plans(space: Space) -> dict:
    return {name: batch_plan(space, grp) for name, grp in GROUPS.items()}


# ---------------------------------------------------------------------------------------------
# Launcher rules per signature.
# ---------------------------------------------------------------------------------------------
class RuleTables:
    """Which lever combinations the launcher accepts, per structural signature (planner.rules),
    computed when a signature is first met, from a key of it the launcher accepts."""

    def __init__(self, space: Space):
        self.space = space
        self.cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        # Dispatcher and EP overlap do nothing without EP: keys with ep=1 keep only their first
        # values, so the same canonical plan is not listed twice.
        r1 = [dict(zip(RULE_GROUPS["R1"], v)) for v in combos(space, RULE_GROUPS["R1"])]
        self.no_ep = np.array([v["dispatcher"] == space.levers["dispatcher"][0] and not v["ep_overlap"] for v in r1])

    def signature(self, s: Struct) -> tuple:
        return s.signature(), s.ep == 1 and self.space.model.is_moe

    def of(self, s: Struct) -> tuple[np.ndarray, np.ndarray]:
        sig = self.signature(s)
        if sig not in self.cache:
            r1 = np.array(list(lever_allowed(self.space, s, RULE_GROUPS["R1"]).values()), dtype=bool)
            self.cache[sig] = (r1 & self.no_ep if sig[1] else r1,
                               np.array(list(lever_allowed(self.space, s, RULE_GROUPS["R2"]).values()), dtype=bool))
        return self.cache[sig]

    def known(self, s: Struct) -> bool:
        return self.signature(s) in self.cache


def rule_tables(rules: RuleTables, structs: list[Struct]) -> tuple[np.ndarray, np.ndarray]:
    space = rules.space
    R1 = np.zeros((len(structs), len(combos(space, RULE_GROUPS["R1"]))), dtype=bool)
    R2 = np.zeros((len(structs), len(combos(space, RULE_GROUPS["R2"]))), dtype=bool)
    for i, s in enumerate(structs):
        R1[i], R2[i] = rules.of(s)
    return R1, R2


# ---------------------------------------------------------------------------------------------
# Whole tables.
# ---------------------------------------------------------------------------------------------
def key_rows(structs: list[Struct]) -> np.ndarray:
    return np.array([[getattr(s, f) for f in KEY_COLUMNS] for s in structs], dtype=np.int64).reshape(-1, len(KEY_COLUMNS))


def layouts_of(model, structs: list[Struct]) -> dict[tuple, tuple[Layout, np.ndarray]]:
    """The structs' pipeline layouts and each layout's structs (positions)."""
    out: dict[tuple, list[int]] = {}
    for i, s in enumerate(structs):
        out.setdefault((s.pp, s.vpp, s.layout, s.schedule or default_schedule(s.pp, s.vpp)), []).append(i)
    return {k: (Layout(k[0], k[1], k[2], build_layout(model, *k), k[3]), np.array(v)) for k, v in out.items()}


def assemble(space: Space, parts: list[dict], cap: tuple[int, int]) -> Tables:
    """One Tables from per-layout parts (each a dict of arrays over its keys, 'structs', 'ids',
    'kept'), memory arrays padded to the deepest pipeline."""
    structs = [s for p in parts for s in p["structs"]]
    maxR = max((s.pp for s in structs), default=1)
    T: dict[str, np.ndarray] = {}
    for k in MEMORY_TERMS:
        arrs = []
        for p in parts:
            a = p[k]
            pad = np.zeros((a.shape[0], maxR, a.shape[2]), dtype=np.int32)
            pad[:, :a.shape[1]] = a
            arrs.append(pad)
        T[k] = np.concatenate(arrs) if arrs else np.zeros((0, maxR, len(combos(space, GROUPS[TERM_GROUP[k]]))),
                                                            dtype=np.int32)
    for k in TIME_TERMS:
        T[k] = np.concatenate([p[k] for p in parts]) if parts else np.zeros((0, len(combos(space, GROUPS[k]))),
                                                                            dtype=np.int64)
    for k in RULE_GROUPS:
        T[k] = np.concatenate([p[k] for p in parts]) if parts else np.zeros((0, len(combos(space, RULE_GROUPS[k]))),
                                                                            dtype=bool)
    ids = np.concatenate([p["ids"] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    kept = [k for p in parts for k in p["kept"]]
    return Tables(space, structs, T["W"], T["C"], T["G"], T["A"], T["HW"], T["HA"], T["OT"], T["TP"], T["TD"], T["TO"],
                  T["R1"], T["R2"], cap[0], cap[1], kept, ids)


def build_tables(space: Space, *, assumptions=None, structs: list[Struct] | None = None, ids=None,
                 rules: RuleTables | None = None) -> Tables:
    """Evaluate the structural keys' lever-group tables with the cost model (every key of the
    space, or ``structs`` with their global ``ids``), in their order."""
    assumptions = assumptions or Assumptions()
    if structs is None:
        structs, ids = space.structs, np.arange(len(space))
    ids = np.arange(len(structs)) if ids is None else np.asarray(ids)
    rules = rules or RuleTables(space)
    cap = capacities(space, assumptions)
    if not structs:
        return assemble(space, [], cap)
    ctx = CostContext.for_structs(space.model, space.hw, space.job, assumptions, key_rows(structs))
    plans = batch_plans(space)
    parts, where = [], []
    for lay, pos in layouts_of(space.model, structs).values():
        # The layout's tables (arrays over its keys) and its 'structs', 'R1'/'R2', 'ids', 'kept'.
        part: dict[str, Any] = {**time_phase(ctx, space, lay, pos, plans), **memory_phase(ctx, space, lay, pos, plans)}
        part["structs"] = [structs[i] for i in pos]
        part["R1"], part["R2"] = rule_tables(rules, part["structs"])
        part["ids"] = ids[pos]
        part["kept"] = undominated_stages([lay.pp] * len(pos), *(part[k] for k in MEMORY_TERMS))
        parts.append(part)
        where.append(pos)
    tables = assemble(space, parts, cap)
    back = np.empty(len(structs), dtype=np.int64)
    back[np.concatenate(where)] = np.arange(len(structs))
    return tables.subset(back)


def undominated_stages(pps, W, C, G, A, OT, HW, HA, chunk: int = 256) -> list[list[int]]:
    """Per structural key, the pipeline ranks whose memory constraint another rank's does not
    imply: rank r is dropped when some rank q has every table entry >= r's (ties keep the lower
    rank). Vectorized over keys with the same pipeline depth."""
    out: list[list[int]] = [[] for _ in pps]
    by_pp: dict[int, list[int]] = {}
    for i, p in enumerate(pps):
        by_pp.setdefault(int(p), []).append(i)
    for pp, rows in by_pp.items():
        order = np.arange(pp)
        lower = order[:, None] < order[None, :]  # q < r
        for a in range(0, len(rows), chunk):
            idx = np.array(rows[a : a + chunk])
            X = np.concatenate([T[idx, :pp] for T in (W, C, G, A, OT, HW, HA)], axis=2)  # (n, pp, K)
            ge = (X[:, :, None, :] >= X[:, None, :, :]).all(axis=3)  # ge[i, q, r]: q >= r everywhere
            eq = (X[:, :, None, :] == X[:, None, :, :]).all(axis=3)
            beats = ge & (~eq | lower[None]) & ~np.eye(pp, dtype=bool)[None]
            dominated = beats.any(axis=1)  # (n, r)
            for k, i in enumerate(idx):
                out[i] = [r for r in range(pp) if not dominated[k, r]]
    return out


def capacities(space: Space, assumptions) -> tuple[int, int]:
    """(allocated-memory limit, host memory) in MiB: the reserved capacity of the composition over
    one plus the allocator fraction, rounded down."""
    capacity, fraction = memory_limits(space.hw, space.job, assumptions)
    cap = int(math.floor(capacity / (1 + fraction) / MiB))
    host = int(math.floor(space.hw.host.host_memory_bytes.value / MiB))
    return cap, host


def lever_indices(space: Space, flat: int) -> dict[str, int]:
    """Mixed-radix decode of a lever-product index (LEVERS order, first most significant)."""
    out = {}
    for k in reversed(LEVERS):
        n = len(space.levers[k])
        out[k] = flat % n
        flat //= n
    return out


def lever_values(space: Space, idx: dict[str, int]) -> dict:
    return {**space.pinned, **{k: space.levers[k][i] for k, i in idx.items()}}


__all__ = ["GROUPS", "RULE_GROUPS", "Tables", "build_tables", "combos", "lever_indices", "lever_values", "MiB", "COL"]
