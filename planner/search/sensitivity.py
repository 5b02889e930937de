"""`search --sensitivity`: how robust the winner is to the model's uncertain assumptions.

The top plans are re-evaluated (memory and time) under each perturbation, re-ranked among
themselves by step time (plans that no longer fit drop out), and each row says whether the winner
changes. Perturbations, each +-20%: routing imbalance (tokens on the busiest EP rank; balanced
routing is the floor), achievable GEMM efficiency, and network (NVLink and NIC) bandwidth.
"""

from __future__ import annotations

import dataclasses

from planner.cost.memory import memory_report

from planner.cost.time import time_report


def _perturbations(base, moe: bool) -> list[tuple[str, dict]]:
    out = []
    for sign, f in (("+20%", 1.2), ("-20%", 0.8)) if moe else ():
        ri = max(1.0, base.routing_imbalance * f)
        if ri != base.routing_imbalance:
            out.append((f"routing imbalance {sign} ({ri:.2f})", {"routing_imbalance": ri}))
    for sign, f in (("+20%", 1.2), ("-20%", 0.8)):
        out.append((f"GEMM efficiency {sign}", {"gemm_efficiency_scale": base.gemm_efficiency_scale * f}))
    for sign, f in (("+20%", 1.2), ("-20%", 0.8)):
        out.append((f"network bandwidth {sign}", {"network_bandwidth_scale": base.network_bandwidth_scale * f}))
    return out


def sensitivity_report(result, assumptions) -> dict:
    rows = []
    winner = result.plans[0].plan.to_string() if result.plans else None
    changes = 0
    for name, change in _perturbations(assumptions, result.space.model.is_moe):
        a = assumptions.model_copy(update=change)
        ranked = []
        for r in result.plans:
            setup = dataclasses.replace(r.setup, assumptions=a)
            mem = memory_report(setup)
            if not mem.fits:
                continue
            ranked.append((time_report(setup).step_time_s, r.rank, r.plan.to_string()))
        ranked.sort()
        new = ranked[0] if ranked else None
        flips = new is None or new[2] != winner
        changes += flips
        rows.append({
            "name": name,
            "winner_changes": flips,
            "new_winner_rank": new[1] if new else None,
            "new_winner": new[2] if new else None,
            "new_winner_step_time_s": round(new[0], 6) if new else None,
            "plans_still_fitting": len(ranked),
            "order": [rank for _, rank, _ in ranked],
        })
    n = len(rows)
    summary = (f"the winner holds under all {n} perturbations" if changes == 0
               else f"the winner changes under {changes} of {n} perturbations")
    return {"winner": winner, "summary": summary, "perturbations": rows}
