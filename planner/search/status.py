"""What a search proved: the solver object of ``search --json`` and its one-line summary."""

from __future__ import annotations

STATUS_SCOPE = (
    "OPTIMAL: proven best over every plan of the space under 'space' (each degree's values, the layouts, the levers, "
    "and the declared limits) by the walked step time the reports print; keys left out were proven dominated "
    "('dominated': 'memory', their largest chunk alone exceeds the allocation limit, which also ends the micro-batch "
    "sizes; 'step_time', their step-time floor exceeds the K-th plan's time), the rest's plans were enumerated in "
    "the order of the tables' estimate (a lower bound of the walked time; read from the integer tables when they "
    "hold at most 1,000,000 plans, by CP-SAT's solution enumeration of the same tables above that), and the plans were walked in that order "
    "until the K-th walked time was at or below the estimate of every plan not walked ('plans_walked'; "
    "'estimate_gap': the largest excess of a shown plan's walked time over its estimate). "
    "FEASIBLE: per-stage refinements (uneven layouts, per-rank recompute: a heuristic, optimal for each layout and "
    "levers but not searched over every layout) entered the ranking, or a time limit was hit, or the enumeration's "
    "cap was reached before the walked order was proven."
)


def solver_json(run, plans, status: str, bound, dropped: dict, estimate_gap: float = 0.0) -> dict:
    """The ``solver`` object: status, what it holds over, what was proven out, what was dropped
    (``estimate_gap``: the largest relative excess of a shown plan's walked step time over the
    tables' estimate the search ranked it by)."""
    sp, o, d = run.space, run.options, run.dominated
    return {
        "name": o.solver,
        "status": status,
        "objective_us": plans[0].objective_us,
        "kth_bound_us": bound if bound is not None else plans[-1].objective_us,
        "structural_keys": len(sp),
        "lever_combinations": sp.lever_product_size,
        "keys_in_model": run.keys_in_model,
        "keys_costed": d.get("costed", 0),
        "dominated": {"memory": d.get("memory", 0), "step_time": d.get("step_time", 0)},
        "rejected_by_rules": dict(sorted(sp.pruned.items())),
        **dropped,
        "per_stage": dict(run.info),
        "estimate_gap": round(estimate_gap, 4),
        "plans_walked": run.walked,
        "space": sp.scope,
        "status_scope": STATUS_SCOPE,
    }


def _values(vals: list[int]) -> str:
    if not vals:
        return "-"
    if len(vals) == 1:
        return str(vals[0])
    if vals == list(range(vals[0], vals[-1] + 1)):
        return f"{vals[0]}-{vals[-1]}"
    return f"{vals[0]}..{vals[-1]} ({len(vals)} values)"


def status_line(sv: dict) -> str:
    """One line: the status over exactly which space, and what dominance proved out."""
    space = sv.get("space", {})
    degrees = ", ".join(f"{k} {_values(v)}" for k, v in space.get("degrees", {}).items())
    dom = sv.get("dominated", {})
    per = sv.get("per_stage", {})
    refine = (f"per-stage refinement off{' (' + per['why'] + ')' if per.get('why') else ''}"
              if not per.get("enabled", True) else
              f"per-stage refinement: {per.get('improved', 0)} of {per.get('tried', 0)} seeds improved"
              f" ({per.get('skipped_by_bound', 0)} skipped by its bound"
              + (f", {per['paired']} fitting under combined 1F1B, outside its time model" if per.get("paired") else "")
              + ")")
    return (f"{sv['name']} {sv['status']} over {sv['structural_keys']:,} layouts x {sv['lever_combinations']} "
            f"lever combinations ({degrees}); proven out: {dom.get('memory', 0):,} by memory, "
            f"{dom.get('step_time', 0):,} by step time; {sv['keys_costed']:,} costed, {sv['keys_in_model']} in the "
            f"model; {refine}"
            + (f"; best-first over the walked step times: {sv['plans_walked']} plans walked in the order of the "
               f"tables' estimate (a lower bound; the walked times shown are up to {100 * sv['estimate_gap']:.1f}% "
               "above it)" if sv.get("plans_walked") else ""))


def status_brief(sv: dict) -> str:
    """The status in one short line for the first screen (the full text: status_line, shown
    with --verbose, and the JSON's solver object)."""
    dom = sv.get("dominated", {})
    text = (f"{sv['name']} {sv['status']} over {sv['structural_keys']:,} layouts x {sv['lever_combinations']} "
            f"levers; proven out {dom.get('memory', 0):,} by memory, {dom.get('step_time', 0):,} by step time")
    if sv.get("plans_walked"):
        text += f"; {sv['plans_walked']} plans walked"
    return text + " (--verbose: the full status)"
