"""Planner's reserved peak against every measured H200 run (issue 41), with a leave-one-out check
of the allocator workload model's fit.

    PYTHONPATH=$PWD python -m benchmarks.gpu.reserved_validation [--markdown] [--json]

Runs: the 28 single-GPU runs with the default allocator (results/validation/gpu-raw:
default-allocator and the expert range), the 12 ranks of the six 2-GPU runs
(multi-gpu-raw/megatron) and the 6 runs with expandable segments (gpu-raw/expandable-segments).
Predicted: ``benchmarks.gpu.configs.planner_setup`` (megatron-local, h200), the stage of the
rank's pipeline rank; expandable runs with ``expandable_segments=True``.

The workload model (hopper.yaml memory.allocator_workload) was fit on all 40 default-allocator
measurements, so its error there is in-sample. The leave-one-out column refits its four linear
terms (peak_fraction, base_bytes, recompute_fraction, pipeline_fraction; the stranding ratio and
the model's other constants fixed) by the same rule (least largest excess, none below the measured
peak: a linear program, GLOP) on every configuration but one, both ranks of a 2-GPU run left out
together, and predicts the one left out: a held-out error for every run. The expandable runs'
bound (allocator_fraction_expandable) is held out the same way: the largest ratio of the other five.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REDERIVED_MARGIN = 0.0217
"""The memory margin the held-out shortfall gives (summary()['held_out_worst_shortfall'] rounded
up at the fourth decimal): see planner/inputs.py DEFAULT_MEMORY_MARGIN."""
MULTI = ROOT / "results" / "validation" / "multi-gpu-raw" / "megatron"
GiB = 2**30


def samples() -> list[dict]:
    """One row per measured rank: the measurement and the workload model's inputs."""
    from benchmarks.gpu.compare import measured
    from benchmarks.gpu.configs import by_name, planner_setup

    runs = [(name, r, 0, "single") for name, r in measured("default-allocator").items()]
    for f in sorted(MULTI.glob("x*.json")):
        r = json.loads(f.read_text())
        if "ranks" in r and "error" not in r:
            runs += [(r["config"], rank, rank["rank"]["pp"], "2-GPU") for rank in r["ranks"]]
    runs += [(name, r, 0, "expandable") for name, r in measured("expandable-segments").items()]
    # Issue 41's small peaks (2.4-13 GiB, 2026-12-05) and the eager runs of the CUDA-graph lease:
    # predicted by the fit on the 40 runs above, held out of it. (SMALL was chosen as a fit set and
    # SMALL_HOLDOUT as its check before the run; refitting on them trades the large runs' bound for
    # the small ones', results/validation/gpu-memory.md "Small peaks", so the fit stays as it was.)
    runs += [(name, r, 0, "held-out") for name, r in measured("small-peaks").items()]
    runs += [(name, r, 0, "held-out") for name, r in measured("cuda-graphs").items() if name.endswith("-none")]
    # The second lease (2026-12-05, an H100 80GB: the same caching allocator, torch and Megatron-Core):
    # issue 41's knee runs (KNEE_HOLDOUT, 12-30 GiB) and the eager runs of GRAPHS2, held out likewise.
    runs += [(name, r, 0, "held-out") for name, r in measured("knee").items()]
    runs += [(name, r, 0, "held-out") for name, r in measured("cuda-graphs-2").items() if name.endswith("-none")]
    out = []
    for name, r, pp_rank, kind in runs:
        setup = planner_setup(by_name(name))
        if kind == "expandable":
            setup = _expandable(setup)
        out.append(_row(name, r, pp_rank, kind, setup))
    return out


def _expandable(setup):
    from planner.cost.setup import resolve_setup

    return resolve_setup(setup.model, setup.hw, setup.job, setup.plan,
                         setup.assumptions.model_copy(update={"expandable_segments": True}))


def _row(name, r, pp_rank, kind, setup) -> dict:
    import numpy as np

    from planner.cost.compose import costs_of

    costs = costs_of(setup)
    peak = float(costs.peak_bytes(pp_rank)[0])
    reserved = float(costs.reserved_bytes(pp_rank)[0])
    terms = {k: float(np.asarray(v)[0]) for k, v in costs.reserved_terms(pp_rank).items()}
    label = name if kind != "2-GPU" else f"{name} rank {r['rank']['global']}"
    return {"run": label, "config": name, "kind": kind, "measured_allocated": r["peak_allocated"],
            "measured_reserved": r["peak_reserved"], "predicted_allocated": peak, "predicted_reserved": reserved,
            "error": reserved / r["peak_reserved"] - 1,
            # The workload model's inputs: the phase peak carrying the stranded blocks, the
            # activation peak, and whether layers recompute / the schedule pipelines.
            "top": peak + terms.get("stranded", 0.0), "act": float(costs.activation_peak(pp_rank)[0]),
            "recompute": setup.plan.recompute.kind != "none", "pipelined": setup.deg.pp > 1}


def fit(rows: list[dict]) -> tuple[float, float, float, float]:
    """(peak_fraction, base_bytes, recompute_fraction, pipeline_fraction) minimizing the largest
    relative excess with every prediction at or above its measurement (the published rule)."""
    from ortools.linear_solver import pywraplp

    s = pywraplp.Solver.CreateSolver("GLOP")
    p, b, rc, pl, t = (s.NumVar(0, s.infinity(), n) for n in ("p", "b", "r", "q", "t"))
    for row in rows:
        m = row["measured_reserved"] / GiB  # GiB keeps the program well scaled
        pred = row["top"] / GiB * (1 + p) + b + (rc * row["recompute"] + pl * row["pipelined"]) * (row["act"] / GiB)
        s.Add(pred >= m)
        s.Add(pred <= m + m * t)
    s.Minimize(t)
    assert s.Solve() == pywraplp.Solver.OPTIMAL
    return p.solution_value(), b.solution_value() * GiB, rc.solution_value(), pl.solution_value()


def predict(row: dict, params) -> float:
    p, b, rc, pl = params
    return row["top"] * (1 + p) + b + (rc * row["recompute"] + pl * row["pipelined"]) * row["act"]


def held_out(rows: list[dict]) -> None:
    """Each row's leave-one-configuration-out prediction and error ('loo', 'loo_error')."""
    default = [r for r in rows if r["kind"] not in ("expandable", "held-out")]
    for r in default:
        params = fit([o for o in default if o["config"] != r["config"]])
        r["loo"] = predict(r, params)
        r["loo_error"] = r["loo"] / r["measured_reserved"] - 1
    params = fit(default)  # runs held out of every fit: predicted by the fit on all the others
    for r in rows:
        if r["kind"] == "held-out":
            r["loo"] = predict(r, params)
            r["loo_error"] = r["loo"] / r["measured_reserved"] - 1
    exp = [r for r in rows if r["kind"] == "expandable"]
    for r in exp:
        bound = max(o["measured_reserved"] / o["measured_allocated"] - 1 for o in exp if o is not r)
        r["loo"] = r["predicted_allocated"] * (1 + bound)
        r["loo_error"] = r["loo"] / r["measured_reserved"] - 1


def summary(rows: list[dict]) -> dict:
    errs = [r["error"] for r in rows if r["kind"] != "held-out"]  # the runs the workload model was fit on
    loo = [r["loo_error"] for r in rows]
    under = [e for e in loo if e < 0]
    return {"runs": len(rows), "in_fit_error_min": min(errs), "in_fit_error_max": max(errs),
            "held_out_error_min": min(loo), "held_out_error_max": max(loo), "held_out_below_measured": len(under),
            # What a plan predicted at the capacity may overrun by: the held-out measured/predicted - 1.
            "held_out_worst_shortfall": max(r["measured_reserved"] / r["loo"] - 1 for r in rows)}


def markdown(rows: list[dict]) -> str:
    g = lambda b: f"{b / GiB:.2f}"  # noqa: E731
    lines = ["| run | kind | allocated meas. | reserved meas. | reserved pred. | error (in fit) | held out pred. | "
             "error (held out) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['kind']} | {g(r['measured_allocated'])} | {g(r['measured_reserved'])} | "
                     f"{g(r['predicted_reserved'])} | {r['error'] * 100:+.1f}% | {g(r['loo'])} | "
                     f"{r['loo_error'] * 100:+.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    rows = samples()
    held_out(rows)
    if args.markdown:
        print(markdown(rows))
    print(json.dumps(summary(rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
