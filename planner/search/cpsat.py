"""The CP-SAT model (OR-Tools) over the integer cost tables.

Variables: the structural key (an index into the enumerated keys) and one variable per lever.
Each lever group's combination is a linear mixed-radix expression of the lever variables; each
table lookup is an element constraint on (key, combination). Constraints: every non-dominated
pipeline stage's peak (constant + communication + max(activation peak, optimizer temporaries))
within the allocated-memory limit, host memory within the host, and the launcher's rule tables.
Top-K: the search bounds the K-th best step time from above (the K-th fastest plan of the keys
it costed, planner.search.bnb), and CP-SAT enumerates every feasible plan up to that bound; they
are ranked by step time and the tie order of planner.search.exhaustive (unique per plan, so the
ranking is deterministic and equal to the oracle's). A complete enumeration proves the ranking
(OPTIMAL).
"""

from __future__ import annotations

from dataclasses import dataclass
import time
from typing import TYPE_CHECKING

import numpy as np

from planner.search.exhaustive import rank_plans
from planner.search.space import LEVERS
from planner.search.tables import GROUPS, RULE_GROUPS, Tables

if TYPE_CHECKING:
    from ortools.sat.python.cp_model import IntVar


@dataclass
class CpSatResult:
    plans: list[tuple[int, int, int]]
    """(objective key, global struct index, lever flat index), best first."""
    status: str
    """OPTIMAL when every listed plan was proven optimal among the remaining ones, else FEASIBLE."""
    bound: int | None
    wall_s: float
    solves: int


def _build(tables: Tables, time_cap_us: int | None = None):
    """The model without an objective: variables, table constraints, memory and rule
    constraints. Returns (model, struct var, lever vars, time expression).

    With ``time_cap_us``, step time is bounded and table rows that cannot meet the bound (their
    value plus the other time terms' minima exceeds it) or the memory limit (likewise) are left
    out: the same feasible set below the cap, a much smaller model."""
    # Imported here, not at the top: OR-Tools' cp_model imports pandas (some 0.25 s) for helpers
    # planner never calls, so only a search that reaches CP-SAT pays for it.
    from ortools.sat.python import cp_model  # noqa: PLC0415  # start-up: pandas, see above

    space = tables.space
    nS = len(tables.structs)
    m = cp_model.CpModel()
    s = m.new_int_var(0, max(nS - 1, 0), "struct")
    lv = {k: m.new_int_var(0, len(space.levers[k]) - 1, k) for k in LEVERS}

    def lookup(name: str, table, grp, slack=None, cap=None) -> IntVar:
        """A variable equal to table[s, combination of grp's levers], as a table constraint over
        (struct, levers..., value): CP-SAT propagates those fully. Rows whose value plus
        ``slack[s]`` exceeds ``cap`` cannot be part of a solution and are left out."""
        table = np.asarray(table)
        shape = [len(space.levers[k]) for k in grp]
        combos = np.indices(shape).reshape(len(grp), -1).T  # rows: lever indices, mixed radix
        rows = []
        for si in range(nS):
            vals = table[si]
            keep = np.arange(len(combos)) if cap is None else np.flatnonzero(vals + slack[si] <= cap)
            rows += [(si, *combos[ci].tolist(), int(vals[ci])) for ci in keep]
        values = [r[-1] for r in rows] or [0]
        target = m.new_int_var(min(values), max(values), name)
        m.add_allowed_assignments([s, *(lv[k] for k in grp), target], rows)
        return target

    # Launcher rules: only the accepted (struct, levers) combinations.
    for name, grp in RULE_GROUPS.items():
        allowed = getattr(tables, name)
        shape = [len(space.levers[k]) for k in grp]
        combos = np.indices(shape).reshape(len(grp), -1).T
        rows = [(si, *combos[ci].tolist()) for si in range(nS) for ci in np.flatnonzero(allowed[si])]
        m.add_allowed_assignments([s, *(lv[k] for k in grp)], rows)
    slots = max((len(k) for k in tables.stages_kept), default=0)
    for j in range(slots):
        def slot_table(T, j=j):
            out = np.zeros((nS, T.shape[2]), dtype=np.int64)
            for si, kept in enumerate(tables.stages_kept):
                if j < len(kept):
                    out[si] = T[si, kept[j]]
            return out

        Wj, Cj, Gj, Aj, Oj = (slot_table(T) for T in (tables.W, tables.C, tables.G, tables.A, tables.OT))
        mins = [x.min(axis=1) for x in (Wj, Cj, Gj, Aj, Oj)]
        low = np.minimum(mins[3], mins[4])  # the smaller of the two terms either constraint has
        cap = tables.cap_mib
        w = lookup(f"W{j}", Wj, GROUPS["W"], mins[1] + mins[2] + low, cap)
        c = lookup(f"C{j}", Cj, GROUPS["C"], mins[0] + mins[2] + low, cap)
        g = lookup(f"G{j}", Gj, GROUPS["G"], mins[0] + mins[1] + low, cap)
        a = lookup(f"A{j}", Aj, GROUPS["A"], mins[0] + mins[1] + mins[2], cap)
        ot = lookup(f"OT{j}", Oj, GROUPS["OT"], mins[0] + mins[1] + mins[2], cap)
        m.add(w + c + g + a <= tables.cap_mib)
        m.add(w + c + g + ot <= tables.cap_mib)
        hw_ = lookup(f"HW{j}", slot_table(tables.HW), GROUPS["W"])
        ha = lookup(f"HA{j}", slot_table(tables.HA), GROUPS["A"])
        m.add(hw_ + ha <= tables.host_cap_mib)
    tmins = [x.min(axis=1) for x in (tables.TP, tables.TD, tables.TO)]
    step = (lookup("TP", tables.TP, GROUPS["TP"], tmins[1] + tmins[2], time_cap_us)
            + lookup("TD", tables.TD, GROUPS["TD"], tmins[0] + tmins[2], time_cap_us)
            + lookup("TO", tables.TO, GROUPS["TO"], tmins[0] + tmins[1], time_cap_us))
    if time_cap_us is not None:
        m.add(step <= time_cap_us)
    return m, s, lv, step


def enumerate_cpsat(tables: Tables, time_cap_us: int, top: int, *, time_limit_s: float = 30.0) -> CpSatResult:
    """Every feasible plan with step time <= ``time_cap_us`` (CP-SAT's solution enumeration over
    the pruned model), ranked by (time, tie-break); the first ``top`` are returned. Complete
    enumeration proves the ranking: status OPTIMAL."""
    from ortools.sat.python import cp_model as cp  # noqa: PLC0415  # start-up: see _build
    t0 = time.perf_counter()
    if not tables.structs:
        return CpSatResult([], "INFEASIBLE", None, 0.0, 0)
    m, s, lv, step = _build(tables, time_cap_us)
    space = tables.space
    decision = [s, *(lv[k] for k in LEVERS)]
    t_var = m.new_int_var(0, max(int(time_cap_us), 0), "step")
    m.add(t_var == step)
    seen: set[tuple[int, int, int]] = set()

    class Collect(cp.CpSolverSolutionCallback):
        def on_solution_callback(self):
            values = [self.value(v) for v in decision]
            flat = 0
            for k, v in zip(LEVERS, values[1:]):
                flat = flat * len(space.levers[k]) + int(v)
            seen.add((int(values[0]), flat, int(self.value(t_var))))

    solver = cp.CpSolver()
    solver.parameters.enumerate_all_solutions = True
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = time_limit_s
    st = solver.solve(m, Collect())
    status = {cp.OPTIMAL: "OPTIMAL", cp.FEASIBLE: "FEASIBLE", cp.INFEASIBLE: "INFEASIBLE"}.get(st, "UNKNOWN")
    # Every plan up to the cap is enumerated; the ranking's tie order is applied to all of them.
    rows, flats, times = zip(*sorted(seen)) if seen else ((), (), ())
    found = rank_plans(tables, rows, flats, times, top)
    return CpSatResult(found, status, found[0][0] if found else None, time.perf_counter() - t0, 1)
