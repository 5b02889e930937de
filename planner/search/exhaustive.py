"""The exhaustive oracle: every structural key times every lever combination, over the same
integer tables as the CP-SAT model, vectorized with numpy. Tests compare the two rankings; the
search also uses it to bound each key's best plan.

The ranking (both solvers): step time in microseconds (the tables' rounding), then, among equal
times, less offload (nothing, then one of optimizer/activations, then both), less recompute (the
recompute options in order: none, the selective module sets, full), the lower peak (the worst
stage's allocated MiB in the tables), fewer parallel dimensions (how many of TP, CP, PP, VPP, EP
and expert TP exceed 1), and last the key's and the levers' positions in the space (unique per
plan, so the order is total and deterministic).
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from planner.cost.compose import CostContext, KeyTable
from planner.search import tables as tb
from planner.search.space import LEVERS
from planner.search.tables import GROUPS, MAX_TABLE_US, RULE_GROUPS, Tables

CHUNK = 1024


def group_index_vectors(tables: Tables) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """For every combination of the full lever product (LEVERS order, mixed radix), the index of
    its combination in each group's table (and, under each lever's name, its own index)."""
    return space_index_vectors(tables.space)


def space_index_vectors(space) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """:func:`group_index_vectors` of a space's tables (they depend on its levers only)."""
    sizes = [len(space.levers[k]) for k in LEVERS]
    grids = np.indices(sizes).reshape(len(LEVERS), -1)  # row i: index of lever i
    lever_idx = {k: grids[i] for i, k in enumerate(LEVERS)}
    out = dict(lever_idx)
    for name, grp in {**GROUPS, **RULE_GROUPS}.items():
        idx = np.zeros(grids.shape[1], dtype=np.int64)
        for k in grp:
            idx = idx * len(space.levers[k]) + lever_idx[k]
        out[name] = idx
    return out, np.arange(grids.shape[1], dtype=np.int64)


def _stage_slots(tables: Tables, rows: np.ndarray):
    """Per slot j, (stage of each row's j-th kept stage or 0, whether the row has one)."""
    slots = max((len(tables.stages_kept[i]) for i in rows), default=0)
    for j in range(slots):
        r = np.array([tables.stages_kept[i][j] if j < len(tables.stages_kept[i]) else -1 for i in rows])
        yield np.where(r >= 0, r, 0), r >= 0


def plan_costs(tables: Tables, rows: np.ndarray, gi: dict) -> tuple[np.ndarray, np.ndarray]:
    """(feasible, step time in us) for every lever combination of the keys ``rows``: arrays of
    shape (len(rows), lever product). Feasible: launcher rules, every stage's peak within the
    allocation limit, host memory within the host."""
    ok = tables.R1[rows][:, gi["R1"]] & tables.R2[rows][:, gi["R2"]]
    for rr, live in _stage_slots(tables, rows):
        w = tables.W[rows, rr][:, gi["W"]]
        c = tables.C[rows, rr][:, gi["C"]] + tables.G[rows, rr][:, gi["G"]]
        a = tables.A[rows, rr][:, gi["A"]]
        ot = tables.OT[rows, rr][:, gi["OT"]]
        fits = (w + c + np.maximum(a, ot)) <= tables.cap_mib
        host = (tables.HW[rows, rr][:, gi["W"]] + tables.HA[rows, rr][:, gi["A"]]) <= tables.host_cap_mib
        ok &= np.where(live[:, None], fits & host, True)
    t = tables.TP[rows][:, gi["TP"]] + tables.TD[rows][:, gi["TD"]] + tables.TO[rows][:, gi["TO"]]
    return ok, t


FLOOR_CELLS = 1 << 22
"""Cells (keys x lever combinations) that :func:`rule_time_floor` sums at a time: its int64
temporaries stay near 100 MB however wide the lever product (about 40,000 combinations on
Qwen3-235B's space)."""


def rule_time_floor(time: dict[str, np.ndarray], r1: np.ndarray, r2: np.ndarray, gi: dict) -> np.ndarray:
    """Each key's least step time (us) over the lever combinations its launcher rules accept
    (``r1``, ``r2``: one row of the rule tables for every key; INF where none is accepted), from
    its time tables alone. A floor of every plan of the key that can run, tighter than each time
    term at its own minimum: those minima may sit on values the rules reject (for every key of a
    signature), or on combinations no one plan holds (TP's fastest recompute with TD's fastest
    sharding, say), which let keys with no plan under the bound into the memory tables."""
    inf = np.iinfo(np.int64).max
    n = len(r1)
    out = np.full(n, inf, dtype=np.int64)
    # Keys with the same rule rows share the accepted columns (the rules read a key's signature only).
    sig, inv = np.unique(np.concatenate([r1, r2], axis=1), axis=0, return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    for s in range(len(sig)):
        cols = np.flatnonzero(sig[s, :r1.shape[1]][gi["R1"]] & sig[s, r1.shape[1]:][gi["R2"]])
        rows = np.flatnonzero(inv == s)
        if not len(cols):
            continue
        tp, td, to = gi["TP"][cols], gi["TD"][cols], gi["TO"][cols]
        step = max(1, FLOOR_CELLS // len(cols))
        for a in range(0, len(rows), step):
            r = rows[a:a + step]
            t = time["TP"][r][:, tp] + time["TD"][r][:, td] + time["TO"][r][:, to]
            out[r] = t.min(axis=1)
    return out


def fitting_time_floor(time: dict[str, np.ndarray], W: np.ndarray, A: np.ndarray, cap_mib: int, r1: np.ndarray,
                       r2: np.ndarray, gi: dict) -> np.ndarray:
    """Each key's least step time (us) over the lever combinations its rules accept whose constant
    memory and activation peak fit together on every pipeline rank (``W``, ``A``: the tables' terms,
    (keys, ranks, group combinations) MiB); INF where none does. Every rank's peak in the tables is
    W + C + G + max(A, OT) with each term >= 0 (plan_costs), so a combination whose W + A alone
    exceeds the limit fits nowhere: a floor of every plan of the key that fits, from two of the
    seven memory terms."""
    inf = np.iinfo(np.int64).max
    n, pp = W.shape[0], W.shape[1]
    out = np.full(n, inf, dtype=np.int64)
    step = max(1, FLOOR_CELLS // max(1, len(gi["TP"]) * pp))
    for a in range(0, n, step):
        r = np.arange(a, min(a + step, n))
        ok = r1[r][:, gi["R1"]] & r2[r][:, gi["R2"]]
        for q in range(pp):
            ok &= (W[r, q][:, gi["W"]].astype(np.int64) + A[r, q][:, gi["A"]]) <= cap_mib
        t = time["TP"][r][:, gi["TP"]] + time["TD"][r][:, gi["TD"]] + time["TO"][r][:, gi["TO"]]
        out[r] = np.where(ok, t, inf).min(axis=1)
    return out


def best_per_key(tables: Tables) -> np.ndarray:
    """Each structural key's fastest feasible step time in us (inf when none fits)."""
    gi, _ = group_index_vectors(tables)
    out = np.full(len(tables.structs), np.inf)
    for a in range(0, len(tables.structs), CHUNK):
        rows = np.arange(a, min(a + CHUNK, len(tables.structs)))
        ok, t = plan_costs(tables, rows, gi)
        ok &= t < MAX_TABLE_US  # a step time at the tables' cap is beyond what the search encodes
        out[rows] = np.where(ok, t, np.iinfo(np.int64).max).min(axis=1)
    out[out >= np.iinfo(np.int64).max] = np.inf
    return out


def plan_peaks(tables: Tables, rows: np.ndarray, flats: np.ndarray, gi: dict) -> np.ndarray:
    """The worst stage's allocated MiB (tables) of each plan (key ``rows[i]``, levers ``flats[i]``)."""
    peak = np.zeros(len(rows), dtype=np.int64)
    if not len(rows):
        return peak
    for rr, live in _stage_slots(tables, rows):
        w = tables.W[rows, rr, gi["W"][flats]]
        c = tables.C[rows, rr, gi["C"][flats]] + tables.G[rows, rr, gi["G"][flats]]
        a = np.maximum(tables.A[rows, rr, gi["A"][flats]], tables.OT[rows, rr, gi["OT"][flats]])
        peak = np.where(live, np.maximum(peak, w.astype(np.int64) + c + a), peak)
    return peak


def rank_plans(tables: Tables, rows, flats, times, top: int) -> list[tuple[int, int, int]]:
    """The ``top`` first of these plans in the ranking's order (see the module docstring), as
    (step time us, global key index, lever index)."""
    rows, flats, times = (np.asarray(x, dtype=np.int64) for x in (rows, flats, times))
    if not len(rows):
        return []
    gi, _ = group_index_vectors(tables)
    space = tables.space
    offload = np.array([int(o.optimizer) + int(o.activations) for o in space.levers["offload"]])[gi["offload"][flats]]
    recompute = gi["recompute"][flats]
    dims = np.array([sum(int(getattr(s, k) > 1) for k in ("tp", "cp", "pp", "vpp", "ep", "etp"))
                     for s in tables.structs], dtype=np.int64)[rows]
    assert tables.ids is not None  # set in Tables.__post_init__
    gid = tables.ids[rows]
    peak = plan_peaks(tables, rows, flats, gi)
    order = np.lexsort((flats, gid, dims, peak, recompute, offload, times))[:top]
    return [(int(times[o]), int(gid[o]), int(flats[o])) for o in order]


def plans_up_to(tables: Tables, cap: int, top: int) -> list[tuple[int, int, int]]:
    """Every feasible plan of ``tables`` with step time <= ``cap`` (us), ranked, the first ``top``:
    what CP-SAT's enumeration returns for that cap, read from the tables directly (the search's
    second enumeration, planner.search.driver._Run._extend: its keys are few, and a second CP-SAT
    model of them cost more than the plans)."""
    gi, _ = group_index_vectors(tables)
    n = len(tables.structs)
    keep_r, keep_f, keep_t = [], [], []
    for a in range(0, n, CHUNK):
        rows = np.arange(a, min(a + CHUNK, n))
        ok, t = plan_costs(tables, rows, gi)
        si, li = np.nonzero(ok & (t <= cap) & (t < MAX_TABLE_US))
        keep_r.append(rows[si])
        keep_f.append(li)
        keep_t.append(t[si, li])
    if not keep_r:
        return []
    return rank_plans(tables, np.concatenate(keep_r), np.concatenate(keep_f), np.concatenate(keep_t), top)


def solve_exhaustive(tables: Tables, top: int) -> list[tuple[int, int, int]]:
    """The ``top`` best plans in the ranking's order, as (step time us, global key index, lever
    index): every feasible plan of every key, the ``top``-th fastest time found first, then every
    plan up to it ranked."""
    gi, _ = group_index_vectors(tables)
    n = len(tables.structs)
    cap = None
    fastest = np.zeros(0, dtype=np.int64)
    for a in range(0, n, CHUNK):
        rows = np.arange(a, min(a + CHUNK, n))
        ok, t = plan_costs(tables, rows, gi)
        t = t[ok & (t < MAX_TABLE_US)]
        fastest = np.sort(np.concatenate([fastest, np.partition(t, min(top, len(t)) - 1)[:top] if len(t) else t]))[:top]
    if not len(fastest):
        return []
    cap = int(fastest[-1])
    keep_r, keep_f, keep_t = [], [], []
    for a in range(0, n, CHUNK):
        rows = np.arange(a, min(a + CHUNK, n))
        ok, t = plan_costs(tables, rows, gi)
        si, li = np.nonzero(ok & (t <= cap))
        keep_r.append(rows[si])
        keep_f.append(li)
        keep_t.append(t[si, li])
    return rank_plans(tables, np.concatenate(keep_r), np.concatenate(keep_f), np.concatenate(keep_t), top)


def oracle(space, assumptions, want: int, valid, say=None, time_cap_us: int | None = None):
    """The oracle's search: every key of the space costed (no bound), layout by layout, and every
    feasible plan of every valid key enumerated. Returns (tables of the keys that can hold a
    top-``want`` plan, the ranked plans, tables of the key with the smallest peak when nothing
    fits). Keys are kept while their fastest plan is within the ``want``-th fastest plan seen so
    far (a running top-``want``: memory stays bounded however large the space). With
    ``time_cap_us``: the keys that hold a plan within it, and every plan up to it, the first ``want``
    (the search's second enumeration, planner.search.driver._Run._extend)."""
    cap = tb.capacities(space, assumptions)
    rules, plans = tb.RuleTables(space), tb.batch_plans(space)
    probe = CostContext.for_structs(space.model, space.hw, space.job, assumptions, space.fm_keys)
    top: list[int] = []  # max-heap (negated) of the want fastest plan times of valid keys
    kept: list[dict] = []
    smallest = None
    for (pp, vpp, li, sched), rows in space.groups():
        if say:
            say(f"oracle: layout pp={pp} vpp={vpp} ({len(rows):,} keys)")
        ctx = CostContext(space.model, space.hw, space.job, assumptions,
                          KeyTable(space.hw, space.job, assumptions, space.keys[rows]), probe.rates)
        # Block costs composed once in the probe, over every block key, and read by each layout's
        # context at its rows (as the branch and bound's contexts read theirs): composed per layout, the
        # DeepSeek-V3 oracle on 256 GB200s composed 118,440 block costs (175 s), now 1,260 (37 s).
        ctx.share_blocks(probe, compose_there=True)
        lay = tb.layout_of(space, pp, vpp, li, sched)
        local = np.arange(len(rows))
        # The layout's tables (arrays over its keys) and its 'structs', 'R1'/'R2', 'ids', 'kept', 'best'.
        part: dict[str, Any] = {**tb.time_phase(ctx, space, lay, local, plans), **tb.memory_phase(ctx, space, lay, local, plans)}
        part["structs"] = [space.struct(int(i)) for i in rows]
        part["R1"], part["R2"] = tb.rule_tables(rules, part["structs"])
        part["ids"] = np.asarray(rows)
        part["kept"] = tb.undominated_stages([pp] * len(rows), *(part[k] for k in tb.MEMORY_TERMS))
        t = tb.assemble(space, [part], cap)
        gi, _ = group_index_vectors(t)
        ok, times = plan_costs(t, np.arange(len(rows)), gi)
        times = np.where(ok & (times < MAX_TABLE_US), times, np.iinfo(np.int64).max)
        best = times.min(axis=1)
        for i in np.argsort(best, kind="stable"):
            if best[i] == np.iinfo(np.int64).max or (len(top) == want and best[i] > -top[0]):
                break
            if valid(int(rows[i])):
                for x in np.sort(times[i])[:want]:
                    if len(top) == want and x >= -top[0]:
                        break
                    heapq.heappush(top, -int(x)) if len(top) < want else heapq.heappushpop(top, -int(x))
        bound = -top[0] if len(top) == want else np.iinfo(np.int64).max
        if time_cap_us is not None:
            bound = time_cap_us
        sel = [i for i in np.flatnonzero((best <= bound) & (best < np.iinfo(np.int64).max)) if valid(int(rows[i]))]
        kept = [p for p in (_subset(p, p["best"] <= bound) for p in kept) if p is not None]
        if sel:
            part["best"] = best
            sub = _subset(part, np.isin(np.arange(len(rows)), sel))
            assert sub is not None  # sel is not empty
            kept.append(sub)
        if not top:
            smallest = _smaller_peak(smallest, part, t)
    tables = tb.assemble(space, kept, cap)
    assert tables.ids is not None  # set in Tables.__post_init__
    tables = tables.subset(np.argsort(tables.ids, kind="stable"))
    found = solve_exhaustive(tables, want) if time_cap_us is None else plans_up_to(tables, time_cap_us, want)
    return tables, found, smallest


def _subset(part: dict, mask: np.ndarray) -> dict | None:
    sel = np.flatnonzero(mask)
    if not len(sel):
        return None
    out = {k: (v[sel] if isinstance(v, np.ndarray) else v) for k, v in part.items()}
    out["structs"] = [part["structs"][i] for i in sel]
    out["kept"] = [part["kept"][i] for i in sel]
    return out


def _smaller_peak(current, part: dict, t: Tables):
    """The one-key tables of whichever of ``current`` and this layout's keys reaches the
    smallest peak over every lever choice (what the nothing-fits diagnosis reports)."""
    from planner.search.diagnose import smallest_peak  # noqa: PLC0415  # cycle: diagnose imports plan_costs from here

    peak, s, _, _ = smallest_peak(t, range(len(t.structs)))
    if s is None or (current is not None and current[0] <= peak):
        return current
    return peak, t.subset([s])
