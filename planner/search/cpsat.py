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
    """(objective key, global struct index, lever flat index), best first."""
    status: str
    """OPTIMAL when every listed plan was proven optimal among the remaining ones, else FEASIBLE."""
    bound: int | None
    wall_s: float
    solves: int


def _build(tables: Tables):
    """The model without an objective: variables, table constraints, memory and rule
    constraints. Returns (model, struct var, lever vars, time expression, tie-break expression)."""
    from ortools.sat.python import cp_model

    import numpy as np

    space = tables.space
    nS = len(tables.structs)
    P = space.lever_product_size
    m = cp_model.CpModel()
    s = m.new_int_var(0, max(nS - 1, 0), "struct")
    lv = {k: m.new_int_var(0, len(space.levers[k]) - 1, k) for k in LEVERS}

    def lookup(name: str, table, grp) -> "cp_model.IntVar":
        """A variable equal to table[s, combination of grp's levers], as a table constraint over
        (struct, levers..., value): CP-SAT propagates those fully."""
        table = np.asarray(table)
        shape = [len(space.levers[k]) for k in grp]
        target = m.new_int_var(int(table.min()), int(table.max()), name)
        combos = np.indices(shape).reshape(len(grp), -1).T  # rows: lever indices, mixed radix
        rows = []
        for si in range(nS):
            vals = table[si]
            for ci, combo in enumerate(combos):
                rows.append((si, *combo.tolist(), int(vals[ci])))
        m.add_allowed_assignments([s, *(lv[k] for k in grp), target], rows)
        return target

    # Launcher rules: only the accepted (struct, levers) combinations.
    for name, grp in RULE_GROUPS.items():
        allowed = getattr(tables, name)
        shape = [len(space.levers[k]) for k in grp]
        combos = np.indices(shape).reshape(len(grp), -1).T
        rows = [(si, *combos[ci].tolist()) for si in range(nS) for ci in np.flatnonzero(allowed[si])]
        m.add_allowed_assignments([s, *(lv[k] for k in grp)], rows)
    ot = None
    if len(tables.OT):
        grp = GROUPS["OT"]
        combos = np.indices([len(space.levers[k]) for k in grp]).reshape(len(grp), -1).T
        ot = m.new_int_var(int(tables.OT.min()), int(tables.OT.max()), "OT")
        m.add_allowed_assignments([*(lv[k] for k in grp), ot],
                                  [(*combos[ci].tolist(), int(tables.OT[ci])) for ci in range(len(combos))])
    slots = max((len(k) for k in tables.stages_kept), default=0)
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
        hw_ = lookup(f"HW{j}", slot_table(tables.HW), GROUPS["W"])
        ha = lookup(f"HA{j}", slot_table(tables.HA), GROUPS["A"])
        m.add(hw_ + ha <= tables.host_cap_mib)
    step = lookup("TP", tables.TP, GROUPS["TP"]) + lookup("TD", tables.TD, GROUPS["TD"]) + lookup("TO", tables.TO, GROUPS["TO"])
    gid = m.new_int_var(0, max(tables.n_total - 1, 0), "struct_id")
    m.add_element(s, [int(x) for x in tables.ids], gid)
    lever_flat = 0
    for k in LEVERS:
        lever_flat = lever_flat * len(space.levers[k]) + lv[k]
    tiebreak = gid * P + lever_flat
    return m, s, lv, step, tiebreak


def solve_cpsat(tables: Tables, top: int, *, time_limit_s: float = 30.0, workers: int = 2, seed: int = 0) -> CpSatResult:
    """Top ``top`` plans: each by two solves (fastest step time, then the smallest tie-break
    among plans of that time), after which the found assignment is forbidden. Each plan's
    (time, tie-break) is unique, so the ranking is deterministic whatever the worker count."""
    import time

    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    if not tables.structs:
        return CpSatResult([], "INFEASIBLE", None, 0.0, 0)
    m, s, lv, step, tiebreak = _build(tables)
    space = tables.space
    P = space.lever_product_size
    radix = tables.n_total * P
    found: list[tuple[int, int, int]] = []
    status_all = "OPTIMAL"
    bound = None
    solves = 0
    decision = [s, *(lv[k] for k in LEVERS)]
    forbidden: list[tuple[int, ...]] = []

    def run(model):
        nonlocal solves
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = seed
        solver.parameters.max_time_in_seconds = max(time_limit_s - (time.perf_counter() - t0), 0.05)
        st = solver.solve(model)
        solves += 1
        return solver, st

    for _ in range(top):
        model = m.clone()
        if forbidden:
            model.add_forbidden_assignments(decision, forbidden)
        model.minimize(step)
        solver, st = run(model)
        if st == cp_model.INFEASIBLE:
            break
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            status_all = "FEASIBLE" if found else "UNKNOWN"
            break
        best_time = int(solver.objective_value)
        if bound is None:
            bound = int(solver.best_objective_bound) * radix
        if st != cp_model.OPTIMAL:
            status_all = "FEASIBLE"
        model.clear_objective()
        model.add(step == best_time)
        model.minimize(tiebreak)
        solver2, st2 = run(model)
        if st2 not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            solver2 = solver  # keep the first solve's plan
        elif st2 != cp_model.OPTIMAL:
            status_all = "FEASIBLE"
        values = tuple(int(solver2.value(v)) for v in decision)
        forbidden.append(values)
        si = int(tables.ids[values[0]])
        flat = 0
        for k, v in zip(LEVERS, values[1:]):
            flat = flat * len(space.levers[k]) + v
        found.append((best_time * radix + si * P + flat, si, flat))
        if status_all != "OPTIMAL":
            break
    if not found and status_all == "OPTIMAL":
        status_all = "INFEASIBLE"
    return CpSatResult(found, status_all, bound, time.perf_counter() - t0, solves)
