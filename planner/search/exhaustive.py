"""The exhaustive oracle: every structural key times every lever combination, over the same
integer tables as the CP-SAT model, vectorized with numpy. Tests compare the two rankings."""

from __future__ import annotations

import numpy as np

from planner.search.space import LEVERS
from planner.search.tables import GROUPS, RULE_GROUPS, Tables


def _group_index_vectors(tables: Tables) -> tuple[dict[str, np.ndarray], np.ndarray]:
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
    flat = np.arange(grids.shape[1], dtype=np.int64)
    return out, flat


def feasible_keys(tables: Tables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(objective keys, struct index, lever flat index) of every feasible plan, unsorted.

    The objective key is step time in microseconds, then the structural key's index, then the
    lever combination's index: unique per plan, so the ranking has no ties and simpler plans
    (earlier options) win equal times."""
    gi, flat = _group_index_vectors(tables)
    P = len(flat)
    nS = tables.n_total
    keys, ss, ls = [], [], []
    for s in range(len(tables.structs)):
        ok = tables.R1[s][gi["R1"]] & tables.R2[s][gi["R2"]]
        ot = tables.OT[gi["OT"]]
        for r in tables.stages_kept[s]:
            w = tables.W[s, r][gi["W"]]
            c = tables.C[s, r][gi["C"]]
            a = tables.A[s, r][gi["A"]]
            ok &= (w + c + np.maximum(a, ot)) <= tables.cap_mib
            ok &= (tables.HW[s, r][gi["W"]] + tables.HA[s, r][gi["A"]]) <= tables.host_cap_mib
        if not ok.any():
            continue
        t = tables.TP[s][gi["TP"]] + tables.TD[s][gi["TD"]] + tables.TO[s][gi["TO"]]
        sel = np.nonzero(ok)[0]
        gid = int(tables.ids[s])
        keys.append(t[sel] * (nS * P) + gid * P + flat[sel])
        ss.append(np.full(len(sel), gid))
        ls.append(flat[sel])
    if not keys:
        e = np.zeros(0, dtype=np.int64)
        return e, e, e
    return np.concatenate(keys), np.concatenate(ss), np.concatenate(ls)


def solve_exhaustive(tables: Tables, top: int) -> list[tuple[int, int, int]]:
    """The ``top`` best plans as (objective key, global struct index, lever flat index)."""
    keys, ss, ls = feasible_keys(tables)
    order = np.argsort(keys, kind="stable")[:top]
    return [(int(keys[i]), int(ss[i]), int(ls[i])) for i in order]
