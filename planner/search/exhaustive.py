"""The exhaustive oracle: every structural key times every lever combination, over the same
integer tables as the CP-SAT model, vectorized with numpy. Tests compare the two rankings; the
search also uses it to bound each key's best plan."""

from __future__ import annotations

import numpy as np

from planner.search.space import LEVERS
from planner.search.tables import GROUPS, RULE_GROUPS, Tables
from planner.search.tables import MAX_TABLE_US

CHUNK = 1024


def group_index_vectors(tables: Tables) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """For every combination of the full lever product (LEVERS order, mixed radix), the index of
    its combination in each group's table."""
    space = tables.space
    sizes = [len(space.levers[k]) for k in LEVERS]
    grids = np.indices(sizes).reshape(len(LEVERS), -1)  # row i: index of lever i
    lever_idx = {k: grids[i] for i, k in enumerate(LEVERS)}
    out = {}
    for name, grp in {**GROUPS, **RULE_GROUPS}.items():
        idx = np.zeros(grids.shape[1], dtype=np.int64)
        for k in grp:
            idx = idx * len(space.levers[k]) + lever_idx[k]
        out[name] = idx
    return out, np.arange(grids.shape[1], dtype=np.int64)


def plan_costs(tables: Tables, rows: np.ndarray, gi: dict) -> tuple[np.ndarray, np.ndarray]:
    """(feasible, step time in us) for every lever combination of the keys ``rows``: arrays of
    shape (len(rows), lever product). Feasible: launcher rules, every stage's peak within the
    allocation limit, host memory within the host."""
    ok = tables.R1[rows][:, gi["R1"]] & tables.R2[rows][:, gi["R2"]]
    slots = max((len(tables.stages_kept[i]) for i in rows), default=0)
    for j in range(slots):
        r = np.array([tables.stages_kept[i][j] if j < len(tables.stages_kept[i]) else -1 for i in rows])
        live = r >= 0
        rr = np.where(live, r, 0)
        w = tables.W[rows, rr][:, gi["W"]]
        c = tables.C[rows, rr][:, gi["C"]]
        a = tables.A[rows, rr][:, gi["A"]]
        ot = tables.OT[rows, rr][:, gi["OT"]]
        fits = (w + c + np.maximum(a, ot)) <= tables.cap_mib
        host = (tables.HW[rows, rr][:, gi["W"]] + tables.HA[rows, rr][:, gi["A"]]) <= tables.host_cap_mib
        ok &= np.where(live[:, None], fits & host, True)
    t = tables.TP[rows][:, gi["TP"]] + tables.TD[rows][:, gi["TD"]] + tables.TO[rows][:, gi["TO"]]
    return ok, t


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


def solve_exhaustive(tables: Tables, top: int) -> list[tuple[int, int, int]]:
    """The ``top`` best plans as (objective key, global struct index, lever flat index). The key
    is step time (us), then the key's global index, then the lever combination's index: unique per
    plan, so the ranking has no ties and simpler plans (earlier options) win equal times."""
    gi, flat = group_index_vectors(tables)
    P = len(flat)
    radix = tables.n_total * P
    best: list[tuple[int, int, int]] = []
    for a in range(0, len(tables.structs), CHUNK):
        rows = np.arange(a, min(a + CHUNK, len(tables.structs)))
        ok, t = plan_costs(tables, rows, gi)
        si, li = np.nonzero(ok & (t < MAX_TABLE_US))
        if not len(si):
            continue
        keys = t[si, li] * radix + tables.ids[rows][si] * P + li
        order = np.argsort(keys, kind="stable")[:top]
        best += [(int(keys[o]), int(tables.ids[rows][si[o]]), int(li[o])) for o in order]
        best = sorted(best)[:top]
    return best
