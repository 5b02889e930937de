"""Integer cost tables over structural keys and lever groups.

Memory and time separate into terms that each depend on the structural key and a few levers:

    peak(stage r) = W[r](sharding, moments, offload) + C[r](sharding, dispatcher, ep_overlap)
                    + max(A[r](recompute, precision, offload, ep_overlap), OT(moments, precision))
    step time     = TP(recompute, precision, dispatcher, ep_overlap, offload)
                    + TD(sharding, precision, recompute, dispatcher, ep_overlap)
                    + TO(sharding, moments, offload, precision)

W is constant memory (weights, gradients, optimizer), C communication and FSDP buffers, A the
activation-and-transient peak over the schedule, OT optimizer-step temporaries; TP the pipeline
(compute, exposed TP/CP/EP/PP communication, bubble), TD exposed data-parallel communication, TO
the optimizer step and offload traffic. Each entry is computed with the cost model's own functions
(planner.cost) on a setup carrying those lever values, so the tables and `explain` agree. Memory is
in MiB rounded up, time in microseconds rounded; CP-SAT and the exhaustive oracle read the same
integers.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from planner.search.space import LEVERS, Space, Struct, make_plan

MiB = 2**20

GROUPS: dict[str, tuple[str, ...]] = {
    "W": ("sharding", "moments", "offload"),
    "C": ("sharding", "dispatcher", "ep_overlap"),
    "A": ("recompute", "precision", "offload", "ep_overlap"),
    "OT": ("moments", "precision"),
    "TP": ("recompute", "precision", "dispatcher", "ep_overlap", "offload"),
    "TD": ("sharding", "precision", "recompute", "dispatcher", "ep_overlap"),
    "TO": ("sharding", "moments", "offload", "precision"),
}
RULE_GROUPS = {
    "R1": ("recompute", "offload", "ep_overlap", "dispatcher"),
    "R2": ("sharding", "precision", "moments", "offload"),
}


def combos(space: Space, group: tuple[str, ...]) -> list[tuple]:
    """Value combinations of a lever group, in mixed-radix order (first lever most significant)."""
    return list(itertools.product(*(space.levers[k] for k in group)))


def combo_index(space: Space, group: tuple[str, ...], lever_idx: dict[str, int]) -> int:
    idx = 0
    for k in group:
        idx = idx * len(space.levers[k]) + lever_idx[k]
    return idx


class TimeTerms:
    """Splits the time model's step time into the pipeline, data-parallel and optimizer terms
    (scalar, one plan at a time; the vectorized tables come from planner.search.time_tables)."""

    def terms(self, setup) -> tuple[float, float, float]:
        from planner.cost.time import evaluate

        e = evaluate(setup)
        return e.pipeline_s, e.dp_grad_exposed + e.dp_param_exposed + e.fsdp_exposed, e.optimizer_s


@dataclass
class Tables:
    space: Space
    structs: list[Struct]
    W: np.ndarray  # (S, R, |W|) MiB
    C: np.ndarray  # (S, R, |C|) MiB
    A: np.ndarray  # (S, R, |A|) MiB
    HW: np.ndarray  # (S, R, |W|) MiB of host memory
    HA: np.ndarray  # (S, R, |A|) MiB of host memory
    OT: np.ndarray  # (|OT|,) MiB
    TP: np.ndarray  # (S, |TP|) microseconds
    TD: np.ndarray  # (S, |TD|)
    TO: np.ndarray  # (S, |TO|)
    R1: np.ndarray  # (S, |R1|) bool: launcher accepts
    R2: np.ndarray  # (S, |R2|) bool
    cap_mib: int
    """Allocated-memory limit: (usable HBM - CUDA context - user margin) / (1 + allocator fraction)."""
    host_cap_mib: int
    stages_kept: list[list[int]] = field(default_factory=list)
    """For each structural key, the pipeline ranks whose constraints are not dominated."""
    ids: np.ndarray | None = None
    """Global index of each structural key in the space (the objective's tie-break)."""

    def __post_init__(self):
        if self.ids is None:
            self.ids = np.arange(len(self.structs))

    def subset(self, rows) -> "Tables":
        """The tables of some structural keys only (same global ids)."""
        rows = np.asarray(rows, dtype=int)
        return Tables(self.space, [self.structs[i] for i in rows], self.W[rows], self.C[rows], self.A[rows],
                      self.HW[rows], self.HA[rows], self.OT, self.TP[rows], self.TD[rows], self.TO[rows],
                      self.R1[rows], self.R2[rows], self.cap_mib, self.host_cap_mib,
                      [self.stages_kept[i] for i in rows], self.ids[rows])

    @property
    def n_total(self) -> int:
        """Structural keys in the whole space (the objective's radix)."""
        return len(self.space.structs)

    def time_lower_bound(self) -> np.ndarray:
        """Per structural key, a lower bound on step time (us): each time term at its minimum."""
        return self.TP.min(axis=1) + self.TD.min(axis=1) + self.TO.min(axis=1)

    def may_fit(self) -> np.ndarray:
        """Per structural key, a necessary condition for some lever choice to fit: every kept
        stage's smallest constant, communication and activation terms within capacity."""
        ok = np.ones(len(self.structs), dtype=bool)
        ot = self.OT.min() if len(self.OT) else 0
        for i, kept in enumerate(self.stages_kept):
            for r in kept:
                if self.W[i, r].min() + self.C[i, r].min() + max(self.A[i, r].min(), ot) > self.cap_mib:
                    ok[i] = False
                    break
        return ok

    @property
    def n_levers(self) -> int:
        return self.space.lever_product_size


def _variant(setup, **changes):
    """The setup with some plan keys changed (no re-validation: the values come from the
    space's own option lists, already checked)."""
    d = {k: v for k, v in setup.plan.__dict__.items() if k in type(setup.plan).model_fields}
    d.update(changes)
    from planner.specs.plan import Plan

    return dataclasses.replace(setup, plan=Plan.model_construct(**d))


def _mib(x: float) -> int:
    return int(math.ceil(x / MiB - 1e-9))


def _us(x: float) -> int:
    from planner.search.time_tables import MAX_TABLE_US

    return int(round(x * 1e6)) if math.isfinite(x) and x * 1e6 < MAX_TABLE_US else MAX_TABLE_US


@dataclass(frozen=True)
class _Degrees:
    """Degrees of a group of structural keys, as arrays (the cost functions accept either)."""

    tp: np.ndarray
    cp: np.ndarray
    pp: int
    vpp: int
    dp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    edp: np.ndarray


def _groups(structs: list[Struct]) -> dict[tuple, np.ndarray]:
    """Structural keys sharing a layout (pp, vpp, layout): common chunk composition; the degrees,
    micro-batch size and count vary elementwise."""
    out: dict[tuple, list[int]] = {}
    for i, s in enumerate(structs):
        out.setdefault((s.pp, s.vpp, s.layout), []).append(i)
    return {k: np.array(v) for k, v in out.items()}


def _composition(model, layout, rank: int) -> tuple:
    """What a rank's chunks hold, in order: ranks with equal compositions have equal per-chunk
    memory (only their in-flight counts differ)."""
    return tuple((st.embedding, tuple(model.layer_kinds[i] for i in st.layers), st.mtp, st.loss)
                 for st in layout.rank_stages(rank))


def memory_tables(space: Space, structs: list[Struct], assumptions, W, C, A, HW, HA) -> None:
    """Fill the memory tables with the memory model's own functions (planner.cost.memory,
    constant, activations), vectorized: per layout group, per distinct rank composition and per
    lever combination, the chunk memories are arrays over the group's plans; the peak over each
    rank's schedule is one matrix product over all of them."""
    from planner.cost import activations as act
    from planner.cost.constant import constant_bytes, rank_params_of
    from planner.cost.efficiency_access import memory_constants
    from planner.cost.memory import _PieceMemory, chunks_from_pieces, comm_bytes, peak_over_profiles
    from planner.cost.schedule import max_inflight
    from planner.specs.layout import build_layout
    from planner.specs.plan import parse_recompute, parse_sharding

    model, hw, job = space.model, space.hw, space.job
    mem = memory_constants(hw)
    gW, gC, gA = (combos(space, GROUPS[k]) for k in ("W", "C", "A"))
    col_all = lambda f: np.array([getattr(s, f) for s in structs])  # noqa: E731
    tp_all, cp_all, mbs_all, etp_all, ep_all, dp_all, edp_all, m_all = (
        col_all(f) for f in ("tp", "cp", "mbs", "etp", "ep", "dp", "edp", "micro_batches"))
    sp_all = (tp_all > 1) & assumptions.sequence_parallel
    tokens_all = mbs_all * job.seq_len // cp_all
    # Per-piece memories for every plan at once, per (recompute, precision, ep_overlap).
    rpv = sorted({(r, p, v) for r, p, _, v in gA}, key=lambda x: gA.index(next(c for c in gA if (c[0], c[1], c[3]) == x)))
    pieces = {}
    for recompute, precision, overlap in rpv:
        sh = act.ActShape(tokens=tokens_all, seq=job.seq_len // cp_all, mbs=mbs_all, tp=tp_all, sp=sp_all,
                          etp=etp_all, ep=ep_all, routing_imbalance=assumptions.routing_imbalance,
                          implementation=assumptions.implementation,
                          memory_efficient_permutation=assumptions.memory_efficient_permutation,
                          ep_overlap=overlap == "on")
        rc = parse_recompute(recompute)
        pieces[(recompute, precision, overlap)] = (rc, _PieceMemory(model, sh, rc, precision == "fp8", tp_all))
    keys = list(pieces)
    a_maps = {}
    for offload_act in (False, True):
        pairs = [(ci, keys.index((r_, p_, v_))) for ci, (r_, p_, o_, v_) in enumerate(gA)
                 if (o_ in ("activations", "optimizer+activations")) == offload_act]
        a_maps[offload_act] = (np.array([c for c, _ in pairs], dtype=int), np.array([k for _, k in pairs], dtype=int))
    for (pp, vpp, layout_str), idx in _groups(structs).items():
        idx = idx[np.argsort(m_all[idx], kind="stable")]  # equal micro-batch counts side by side
        layout = build_layout(model, pp, vpp, layout_str)
        deg = _Degrees(tp_all[idx], cp_all[idx], pp, vpp, dp_all[idx], ep_all[idx], etp_all[idx], edp_all[idx])
        ms = m_all[idx]  # sorted
        crosses = _crossings([structs[i] for i in idx], hw, job, assumptions)
        comm = {(d, v): comm_bytes(model, mem, deg, crosses=crosses, dispatcher=d, tokens=tokens_all[idx], sp=sp_all[idx])
                for _, d, v in gC}
        if assumptions.implementation != "te":
            # The local spec's persistent attention-score buffer (memory.attention_score_buffer).
            scores = 2.0 * mbs_all[idx] * model.attention.num_heads / deg.tp * (job.seq_len // deg.cp) ** 2
            comm = {k: v + scores for k, v in comm.items()}
        sliced = {k: (rc, pc.sliced(idx)) for k, (rc, pc) in pieces.items()}
        by_comp: dict[tuple, tuple] = {}
        for r in range(pp):
            comp = _composition(model, layout, r)
            if comp not in by_comp:
                rp = rank_params_of(model, layout, r, deg.tp, deg.etp, deg.ep)
                w, hwo, fsdp = {}, {}, {}
                for ci, (sharding, moments, offload) in enumerate(gW):
                    cm = constant_bytes(rp, dp=deg.dp, cp=deg.cp, edp=deg.edp, sharding=parse_sharding(sharding),
                                        moments=moments,
                                        offload_optimizer=offload in ("optimizer", "optimizer+activations"))
                    w[ci], hwo[ci], fsdp[sharding] = _mib_arr(cm.total), _mib_arr(cm.host_optimizer), cm.fsdp_buffers
                chunk_arrays = {}
                for key, (rc, pc) in sliced.items():
                    chunks = chunks_from_pieces(pc, model, layout, r, rc, None)
                    n = len(idx)
                    chunk_arrays[key] = tuple(
                        np.array([np.broadcast_to(np.asarray(getattr(c, f), dtype=float), (n,)) for c in chunks])
                        for f in ("kept", "fwd_rise", "bwd_rise"))
                by_comp[comp] = (w, hwo, fsdp, chunk_arrays)
            w, hwo, fsdp, chunk_arrays = by_comp[comp]
            for ci in w:
                W[idx, r, ci], HW[idx, r, ci] = w[ci], hwo[ci]
            for ci, (sharding, dispatcher, overlap) in enumerate(gC):
                C[idx, r, ci] = _mib_arr(comm[(dispatcher, overlap)] + fsdp[sharding])
            # All (recompute, precision, overlap) combinations side by side: one matrix product per
            # micro-batch count and offload setting.
            n = len(idx)
            # (chunks, keys, plans): all (recompute, precision, overlap) combinations side by side.
            # float32 is exact to ~1e-7 relative: far below the tables' MiB rounding.
            kept = np.stack([chunk_arrays[k][0] for k in keys], axis=1).astype(np.float32)
            fwd = np.stack([chunk_arrays[k][1] for k in keys], axis=1).astype(np.float32)
            bwd = np.stack([chunk_arrays[k][2] for k in keys], axis=1).astype(np.float32)
            bounds = np.flatnonzero(np.diff(ms[np.argsort(ms, kind="stable")])) + 1
            for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(idx)]):
                m = int(ms[a])
                shape = (kept.shape[0], -1)
                k_, f_, b_ = (x[:, :, a:b].reshape(shape) for x in (kept, fwd, bwd))
                rows = idx[a:b]
                for offload_act in (False, True):
                    cis, kis = a_maps[offload_act]
                    if not len(cis):
                        continue
                    peak = _mib_arr(peak_over_profiles(k_, f_, b_, pp, vpp, m, r, offload_act)).reshape(len(keys), b - a)
                    A[rows[None, :], r, cis[:, None]] = peak[kis]
                    if offload_act:
                        biggest = k_.max(axis=0).reshape(len(keys), b - a)
                        HA[rows[None, :], r, cis[:, None]] = _mib_arr(max_inflight(pp, vpp, m, r) * biggest)[kis]


def _crossings(structs, hw, job, assumptions) -> dict[str, np.ndarray]:
    """Per communicator, which keys' groups cross NVLink domains (planner.cost.topology, the same
    spans the time model uses; memoized per dimension)."""
    from planner.cost.memory import span_crossings
    from planner.cost.topology import group_spans, resolve_domain_fill

    rows = []
    for s in structs:
        fill = resolve_domain_fill(hw.domain_size, job.domain_fill, s.tp, s.cp, s.ep, s.etp)
        rows.append(span_crossings(group_spans(assumptions.rank_order, fill, s.tp, s.cp, s.dp, s.pp, s.etp, s.ep, s.edp)))
    return {name: np.array([r[name] for r in rows]) for name in rows[0]} if rows else {}


MAX_TABLE_MIB = 2**40
"""Memory entries are capped here (2^40 MiB = 1 EiB, beyond any GPU): a term that overflows no
longer wraps around int64 into a small or negative number that would look like it fits."""


def _mib_arr(x) -> np.ndarray:
    mib = np.ceil(np.asarray(x, dtype=float) / MiB - 1e-9)
    return np.minimum(np.nan_to_num(mib, nan=MAX_TABLE_MIB, posinf=MAX_TABLE_MIB, neginf=0.0),
                      MAX_TABLE_MIB).astype(np.int64)


def time_tables(space: Space, structs: list[Struct], assumptions, time_terms, TP, TD, TO) -> None:
    """Fill the time tables from the time model's pipeline, data-parallel and optimizer terms: the
    time model's own functions on arrays (planner.search.time_tables) for the model's terms
    (TimeTerms itself); any other ``time_terms`` (a stand-in, a subclass) is asked plan by plan."""
    if type(time_terms) is TimeTerms:
        from planner.search.time_tables import time_tables as vectorized

        vectorized(space, structs, assumptions, TP, TD, TO)
        return
    from planner.cost.setup import resolve_setup

    base_levers = {k: v[0] for k, v in space.levers.items()}
    g = {name: combos(space, GROUPS[name]) for name in ("TP", "TD", "TO")}
    for si, s in enumerate(structs):
        setup = resolve_setup(space.model, space.hw, space.job, make_plan(s, base_levers), assumptions)
        for name, table in (("TP", TP), ("TD", TD), ("TO", TO)):
            part = {"TP": 0, "TD": 1, "TO": 2}[name]
            for ci, values in enumerate(g[name]):
                v = _variant(setup, **dict(zip(GROUPS[name], values)))
                table[si, ci] = _us(time_terms.terms(v)[part])


def rule_tables(space: Space, structs: list[Struct], R1, R2) -> None:
    """Which lever combinations the launcher accepts, per structural signature (planner.rules)."""
    from planner.search.rulecheck import lever_allowed

    cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    # Dispatcher and EP overlap do nothing without EP: keys with ep=1 keep only their first values,
    # so the same canonical plan is not listed twice.
    no_ep = np.array([d == space.levers["dispatcher"][0] and o == "off"
                      for d, o in (tuple(dict(zip(RULE_GROUPS["R1"], v))[k] for k in ("dispatcher", "ep_overlap"))
                                   for v in combos(space, RULE_GROUPS["R1"]))], dtype=bool)
    for si, s in enumerate(structs):
        sig = (s.signature(), s.ep == 1 and space.model.is_moe)
        if sig not in cache:
            r1 = np.array(list(lever_allowed(space, s, RULE_GROUPS["R1"]).values()), dtype=bool)
            cache[sig] = (r1 & no_ep if sig[1] else r1,
                          np.array(list(lever_allowed(space, s, RULE_GROUPS["R2"]).values()), dtype=bool))
        R1[si], R2[si] = cache[sig]


def build_tables(space: Space, *, assumptions=None, time_terms: TimeTerms | None = None,
                 structs: list[Struct] | None = None) -> Tables:
    """Evaluate the structural keys' lever-group tables with the cost model."""
    from planner.cost.memory import optimizer_transient_bytes
    from planner.cost.setup import Assumptions

    assumptions = assumptions or Assumptions()
    time_terms = time_terms or TimeTerms()
    structs = space.structs if structs is None else structs
    g = {name: combos(space, grp) for name, grp in GROUPS.items()}
    nS = len(structs)
    maxR = max((s.pp for s in structs), default=1)
    W = np.zeros((nS, maxR, len(g["W"])), dtype=np.int64)
    C = np.zeros((nS, maxR, len(g["C"])), dtype=np.int64)
    A = np.zeros((nS, maxR, len(g["A"])), dtype=np.int64)
    HW = np.zeros_like(W)
    HA = np.zeros_like(A)
    TP = np.zeros((nS, len(g["TP"])), dtype=np.int64)
    TD = np.zeros((nS, len(g["TD"])), dtype=np.int64)
    TO = np.zeros((nS, len(g["TO"])), dtype=np.int64)
    R1 = np.zeros((nS, len(combos(space, RULE_GROUPS["R1"]))), dtype=bool)
    R2 = np.zeros((nS, len(combos(space, RULE_GROUPS["R2"]))), dtype=bool)
    memory_tables(space, structs, assumptions, W, C, A, HW, HA)
    time_tables(space, structs, assumptions, time_terms, TP, TD, TO)
    rule_tables(space, structs, R1, R2)
    OT = np.array([_mib(optimizer_transient_bytes(space.hw, moments, precision)) for moments, precision in g["OT"]],
                  dtype=np.int64)
    kept = undominated_stages(structs, W, C, A, HW, HA)
    cap, host_cap = _capacities(space, assumptions)
    return Tables(space, structs, W, C, A, HW, HA, OT, TP, TD, TO, R1, R2, cap, host_cap, kept)


def undominated_stages(structs, W, C, A, HW, HA, chunk: int = 256) -> list[list[int]]:
    """Per structural key, the pipeline ranks whose memory constraint another rank's does not
    imply: rank r is dropped when some rank q has every table entry >= r's (ties keep the lower
    rank). Vectorized over keys with the same pipeline depth."""
    out: list[list[int]] = [[] for _ in structs]
    by_pp: dict[int, list[int]] = {}
    for i, s in enumerate(structs):
        by_pp.setdefault(s.pp, []).append(i)
    for pp, rows in by_pp.items():
        order = np.arange(pp)
        lower = order[:, None] < order[None, :]  # q < r
        for a in range(0, len(rows), chunk):
            idx = np.array(rows[a : a + chunk])
            X = np.concatenate([T[idx, :pp] for T in (W, C, A, HW, HA)], axis=2)  # (n, pp, K)
            ge = (X[:, :, None, :] >= X[:, None, :, :]).all(axis=3)  # ge[i, q, r]: q >= r everywhere
            eq = (X[:, :, None, :] == X[:, None, :, :]).all(axis=3)
            beats = ge & (~eq | lower[None]) & ~np.eye(pp, dtype=bool)[None]
            dominated = beats.any(axis=1)  # (n, r)
            for k, i in enumerate(idx):
                out[i] = [r for r in range(pp) if not dominated[k, r]]
    return out


def _capacities(space: Space, assumptions) -> tuple[int, int]:
    from planner.cost.efficiency_access import memory_constants

    mem = memory_constants(space.hw)
    from planner.cost.setup import allocator_fraction

    usable = space.hw.gpu.hbm_usable_bytes.value - mem.cuda_context_bytes.value - space.job.memory_margin_bytes
    frac = allocator_fraction(mem, assumptions)
    if assumptions.allocator_margin_bytes is not None:
        usable -= assumptions.allocator_margin_bytes
    cap = int(math.floor(usable / (1 + frac) / MiB))
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
    return {k: space.levers[k][i] for k, i in idx.items()}
