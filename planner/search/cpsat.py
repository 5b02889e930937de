"""The CP-SAT model (OR-Tools) over the integer cost tables.

Variables: the structural key (an index into the enumerated keys) and one variable per lever.
Each lever group's combination is a linear mixed-radix expression of the lever variables; each
table lookup is an element constraint on (key, combination). Constraints: every non-dominated
pipeline stage's peak (constant + communication + max(activation peak, optimizer temporaries))
within the allocated-memory limit, host memory within the host, and the launcher's rule tables.
Objective: step time in microseconds, made unique per plan by the key's and levers' indices (so
the ranking is deterministic and equal to the oracle's). Top-K: solve, then require a strictly
larger objective and solve again (each plan has its own objective value).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.search.space import LEVERS
from planner.search.tables import GROUPS, RULE_GROUPS, Tables


@dataclass
class CpSatResult:
    plans: list[tuple[int, int, int]]
    """(objective key, struct index, lever flat index), best first."""
    status: str
    """OPTIMAL when every listed plan was proven optimal among the remaining ones, else FEASIBLE."""
    bound: int | None
    wall_s: float
    solves: int


def _build(tables: Tables):
    from ortools.sat.python import cp_model

    space = tables.space
    nS = len(tables.structs)
    P = space.lever_product_size
    m = cp_model.CpModel()
    s = m.new_int_var(0, max(nS - 1, 0), "struct")
    lv = {k: m.new_int_var(0, len(space.levers[k]) - 1, k) for k in LEVERS}

    def group_expr(grp):
        expr = 0
        for k in grp:
            expr = expr * len(space.levers[k]) + lv[k]
        return expr

    def size(grp):
        n = 1
        for k in grp:
            n *= len(space.levers[k])
        return n

    def lookup(name: str, table, grp) -> "cp_model.IntVar":
        """table: (nS, |grp|) ints -> variable equal to table[s, combination]."""
        n = size(grp)
        idx = m.new_int_var(0, nS * n - 1, f"{name}_idx")
        m.add(idx == s * n + group_expr(grp))
        flat = [int(x) for x in table.reshape(-1)]
        target = m.new_int_var(min(flat), max(flat), name)
        m.add_element(idx, flat, target)
        return target

    # Launcher rules.
    for name, grp in RULE_GROUPS.items():
        allowed = lookup(name, getattr(tables, name).astype(int), grp)
        m.add(allowed == 1)
    # Memory: one constraint per non-dominated stage slot.
    slots = max((len(k) for k in tables.stages_kept), default=0)
    ot = None
    if len(tables.OT):
        n_ot = size(GROUPS["OT"])
        ot = m.new_int_var(int(tables.OT.min()), int(tables.OT.max()), "OT")
        m.add_element(group_expr(GROUPS["OT"]), [int(x) for x in tables.OT], ot)
    import numpy as np

    for j in range(slots):
        def slot_table(T):
            out = np.zeros((nS, T.shape[2]), dtype=np.int64)
            for si, kept in enumerate(tables.stages_kept):
                if j < len(kept):
                    out[si] = T[si, kept[j]]
            return out

        w = lookup(f"W{j}", slot_table(tables.W), GROUPS["W"])
        c = lookup(f"C{j}", slot_table(tables.C), GROUPS["C"])
        a = lookup(f"A{j}", slot_table(tables.A), GROUPS["A"])
        m.add(w + c + a <= tables.cap_mib)
        if ot is not None:
            m.add(w + c + ot <= tables.cap_mib)
        hw = lookup(f"HW{j}", slot_table(tables.HW), GROUPS["W"])
        ha = lookup(f"HA{j}", slot_table(tables.HA), GROUPS["A"])
        m.add(hw + ha <= tables.host_cap_mib)
    # Objective.
    tp = lookup("TP", tables.TP, GROUPS["TP"])
    td = lookup("TD", tables.TD, GROUPS["TD"])
    to = lookup("TO", tables.TO, GROUPS["TO"])
    lever_flat = group_expr(LEVERS)
    objective = (tp + td + to) * (nS * P) + s * P + lever_flat
    return m, s, lv, objective


def solve_cpsat(tables: Tables, top: int, *, time_limit_s: float = 30.0, workers: int = 1, seed: int = 0) -> CpSatResult:
    import time

    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    if not tables.structs:
        return CpSatResult([], "INFEASIBLE", None, 0.0, 0)
    m, s, lv, objective = _build(tables)
    m.minimize(objective)
    space = tables.space
    P = space.lever_product_size
    found: list[tuple[int, int, int]] = []
    status_all = "OPTIMAL"
    bound = None
    solves = 0
    for _ in range(top):
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = seed
        remaining = time_limit_s - (time.perf_counter() - t0)
        if remaining <= 0:
            status_all = "FEASIBLE" if found else "UNKNOWN"
            break
        solver.parameters.max_time_in_seconds = remaining
        st = solver.solve(m)
        solves += 1
        if st == cp_model.OPTIMAL or st == cp_model.FEASIBLE:
            key = int(solver.objective_value)
            if st != cp_model.OPTIMAL:
                status_all = "FEASIBLE"
            si = int(solver.value(s))
            flat = 0
            for k in LEVERS:
                flat = flat * len(space.levers[k]) + int(solver.value(lv[k]))
            found.append((key, si, flat))
            if bound is None:
                bound = int(solver.best_objective_bound)
            if st != cp_model.OPTIMAL:
                break
            m.add(objective >= key + 1)
            m.clear_hints()
        elif st == cp_model.INFEASIBLE:
            break
        else:
            status_all = "FEASIBLE" if found else "UNKNOWN"
            break
    if not found and status_all == "OPTIMAL":
        status_all = "INFEASIBLE"
    return CpSatResult(found, status_all, bound, time.perf_counter() - t0, solves)
