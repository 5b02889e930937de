"""Planner's predictions against the committed H200 measurements.

    PYTHONPATH=$PWD python -m benchmarks.gpu.compare            # table on stdout
    PYTHONPATH=$PWD python -m benchmarks.gpu.compare --markdown # the tables of results/validation/gpu-memory.md
    PYTHONPATH=$PWD python -m benchmarks.gpu.compare --json     # rows as JSON

Measured: ``results/validation/gpu-raw/default-allocator/*.json`` (one file per configuration,
written by :mod:`benchmarks.gpu.harness` on the device). Predicted: ``planner_setup(cfg)`` (one GPU,
megatron-local, h200) through the memory report, and the time model with and without the committed
calibration file. No torch needed.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "results" / "validation" / "gpu-raw"
CALIBRATION = ROOT / "results" / "calibration" / "h200-2026-11-29.yaml"
GiB = 2**30


def measured(folder: str = "default-allocator") -> dict[str, dict]:
    """The measured runs of one folder by configuration; the default folder stands with the expert
    range (the EXPERTS configurations: 8, 64, 128 experts, measured by run_experts.sh), whose peaks
    come from its first lease (both leases' peaks agree within 1 MiB)."""
    from benchmarks.gpu.configs import EXPERTS

    out = {}
    files = sorted((RAW / folder).glob("*.json"))
    if folder == "default-allocator":
        files += [RAW / EXPERT_FOLDERS[0] / f"{c.name}-s100.json" for c in EXPERTS]
    for f in files:
        r = json.loads(f.read_text())
        if "error" not in r and "peak_allocated" in r:
            out[r["config"]] = r
    return out


EXPERT_FOLDERS = ("experts-lease1", "experts-lease2")
"""benchmarks/gpu/run_experts.sh on two leases (the EXPERTS configurations, 100 steps each)."""


# Step-time runs: the same configurations run longer (benchmarks/gpu/run_steptime*.sh), files named
# CONFIG-sN.json (N steps); CONFIG-routes/-gc/-fresh/-profile30 are diagnostics, not measurements.
STEP_FOLDERS = ("default-allocator", "steps-40", "steps-100", "steps-100-lease2") + EXPERT_FOLDERS


def step_runs(name: str) -> list[dict]:
    """Every timed run of a configuration with the default allocator, shortest first."""
    runs = []
    for folder in STEP_FOLDERS:
        for f in sorted((RAW / folder).glob(f"{name}*.json")):
            suffix = f.stem[len(name):]
            if suffix and not (suffix.startswith("-s") and suffix[2:].isdigit()):
                continue
            r = json.loads(f.read_text())
            if "error" not in r and r.get("config") == name and "step_time_s" in r:
                runs.append(r)
    return sorted(runs, key=_total_steps)


def _total_steps(run: dict) -> int:
    """Steps a run made (the five-step runs recorded only their timed steps, after step 1)."""
    return len(run.get("all_step_times_s") or []) or len(run["step_times_s"]) + 1


def measured_step(name: str) -> dict:
    """The step-time measurement of a configuration: its longest runs (several leases when it
    was repeated), each run's median over its steps after the warm-up (step 1 left out of the
    five-step runs, the first half of the 100-step runs), averaged over the runs. Host-bound steps on the device's VMs
    speed up for 50-100 steps and run at a different pace on each lease's machine, so the longest
    runs, pooled over leases, are the nearest to a training run's steady state on a typical host;
    kernel-bound steps are flat (1% between leases)."""
    runs = step_runs(name)
    longest = [r for r in runs if _total_steps(r) == _total_steps(runs[-1])]
    timed = [t for r in longest for t in r["step_times_s"]]
    per_run = [r["step_time_s"] for r in longest]
    return {"step_time_s": statistics.fmean(per_run), "steps": _total_steps(longest[0]),
            "warmup": longest[0].get("warmup_steps", 1), "timed": timed, "runs": len(longest),
            "per_run_s": per_run}


def rows(folder: str = "default-allocator", with_time: bool = True) -> list[dict]:
    from benchmarks.gpu.configs import by_name, planner_setup
    from planner.cost.memory import memory_report

    out = []
    for name, r in measured(folder).items():
        cfg = by_name(name)
        setup = planner_setup(cfg)
        rep = memory_report(setup)
        st = rep.worst
        pred_alloc = st.peak_bytes
        row = {
            "config": name,
            "holdout": name.startswith("holdout-"),
            "recompute": cfg.recompute,
            "sharding": "dist_opt" if cfg.dist_opt else "ddp",
            "seq": cfg.seq, "mbs": cfg.mbs, "micro_batches": cfg.micro_batches,
            "params": r["params"],
            "measured_allocated": r["peak_allocated"],
            "predicted_allocated": pred_alloc,
            "allocated_error": (pred_alloc - r["peak_allocated"]) / r["peak_allocated"],
            "measured_reserved": r["peak_reserved"],
            "predicted_reserved": rep.reserved(st),
            "reserved_within_margin": r["peak_reserved"] <= rep.reserved(st),
            "measured_reserved_over_allocated": r["peak_reserved"] / r["peak_allocated"] - 1,
            "measured_steady": r["steady_allocated"],
            "predicted_steady": st.constant.total + st.comm_buffers,
            "measured_optimizer_peak": r["optimizer_peak_allocated"],
            "predicted_optimizer_peak": st.constant.total + st.comm_buffers + st.optimizer_transient,
            "measured_context": r["context_bytes"],
            "predicted_context": rep.cuda_context,
            "peak_moment": st.peak_moment.get("window"),
            "measured_step_s": measured_step(name)["step_time_s"] if folder == "default-allocator" else r["step_time_s"],
        }
        if with_time:
            from planner.cost.time import step_time

            row["predicted_step_s"] = step_time(setup)
            row["calibrated_step_s"] = step_time(planner_setup(cfg, calibration=str(CALIBRATION)))
            row["calibrated_step_error"] = (row["calibrated_step_s"] - row["measured_step_s"]) / row["measured_step_s"]
        out.append(row)
    return out


def summary(rs: list[dict]) -> dict:
    errs = [r["allocated_error"] for r in rs]
    out = {
        "configs": len(rs),
        "allocated_error_median": statistics.median(errs),
        "allocated_abs_error_median": statistics.median(abs(e) for e in errs),
        "allocated_abs_error_max": max(abs(e) for e in errs),
        "reserved_within_margin": sum(r["reserved_within_margin"] for r in rs),
    }
    if rs and "calibrated_step_error" in rs[0]:
        t = [abs(r["calibrated_step_error"]) for r in rs]
        out.update(step_abs_error_median=statistics.median(t), step_abs_error_max=max(t))
    return out


def markdown(rs: list[dict]) -> str:
    g = lambda b: f"{b / GiB:.2f}"  # noqa: E731
    lines = [
        "| configuration | recompute | params | allocated meas. | allocated pred. | error | reserved meas. | reserved pred. | within margin | step meas. | step pred. (calibrated) | error |",
        "|---|---|---:|---:|---:|---:|---:|---:|:-:|---:|---:|---:|",
    ]
    for r in rs:
        lines.append(
            f"| {r['config']}{' (holdout)' if r['holdout'] else ''} | {r['recompute']}{', dist_opt' if r['sharding'] == 'dist_opt' else ''} "
            f"| {r['params'] / 1e9:.2f} B | {g(r['measured_allocated'])} | {g(r['predicted_allocated'])} "
            f"| {r['allocated_error'] * 100:+.1f}% | {g(r['measured_reserved'])} | {g(r['predicted_reserved'])} "
            f"| {'yes' if r['reserved_within_margin'] else 'no'} | {r['measured_step_s'] * 1e3:.0f} ms "
            f"| {r.get('calibrated_step_s', float('nan')) * 1e3:.0f} ms | {r.get('calibrated_step_error', float('nan')) * 100:+.0f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--folder", default="default-allocator")
    a = p.parse_args(argv)
    rs = rows(a.folder)
    if a.json:
        print(json.dumps({"rows": rs, "summary": summary(rs)}, indent=1))
    elif a.markdown:
        print(markdown(rs))
        print()
        print(json.dumps(summary(rs), indent=1))
    else:
        for r in rs:
            print(f"{r['config']:32s} alloc {r['measured_allocated'] / GiB:6.2f} pred {r['predicted_allocated'] / GiB:6.2f} "
                  f"({r['allocated_error'] * 100:+5.1f}%)  reserved {r['measured_reserved'] / GiB:6.2f} pred "
                  f"{r['predicted_reserved'] / GiB:6.2f}  step {r['measured_step_s'] * 1e3:6.1f} ms pred "
                  f"{r['calibrated_step_s'] * 1e3:6.1f} ms")
        print(json.dumps(summary(rs), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
