"""Planner against Megatron-Core on several GPUs, per rank (issue 13).

    PYTHONPATH=$PWD python -m benchmarks.gpu.compare_parallel [FOLDER] [--markdown]

Measured: ``results/validation/multi-gpu-raw/*.json`` written by ``benchmarks.gpu.harness`` under
torchrun (every rank's ``max_memory_allocated`` / ``max_memory_reserved`` over the timed steps and
its median step). Predicted: ``planner_setup(cfg)`` (megatron-local, h200, the run's GPUs and
degrees): the memory report's stage for the rank's pipeline rank, and the time model's step
(a step ends with the slowest rank, so it is compared with the slowest rank's median).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "results" / "validation" / "multi-gpu-raw"
GiB = 2**30


def rows(folder: Path = RAW) -> list[dict]:
    from benchmarks.gpu.configs import by_name, planner_setup
    from planner.cost.memory import memory_report
    from planner.cost.time import step_time

    out = []
    for f in sorted(folder.glob("x*.json")):
        r = json.loads(f.read_text())
        if "ranks" not in r or "error" in r:
            continue
        cfg = by_name(r["config"])
        setup = planner_setup(cfg)
        rep = memory_report(setup)
        pred_step = step_time(setup)
        for rank in r["ranks"]:
            st = rep.stages[rank["rank"]["pp"]]
            meas = rank["peak_allocated"]
            out.append({
                "config": cfg.name, "rank": rank["rank"]["global"], "pp_rank": rank["rank"]["pp"],
                "measured_allocated": meas, "predicted_allocated": st.peak_bytes,
                "allocated_error": st.peak_bytes / meas - 1,
                "measured_reserved": rank["peak_reserved"], "predicted_reserved": rep.reserved(st),
                "reserved_within_margin": rank["peak_reserved"] <= rep.reserved(st),
                "measured_step_s": r["step_time_s"], "predicted_step_s": pred_step,
                "step_error": pred_step / r["step_time_s"] - 1,
            })
    return out


def markdown(rs: list[dict]) -> str:
    lines = ["| configuration | rank (pp) | allocated meas. | pred. | error | reserved meas. | pred. | step meas. | pred. | error |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rs:
        lines.append(f"| {r['config']} | {r['rank']} ({r['pp_rank']}) | {r['measured_allocated'] / GiB:.2f} | "
                     f"{r['predicted_allocated'] / GiB:.2f} | {r['allocated_error'] * 100:+.1f}% | "
                     f"{r['measured_reserved'] / GiB:.2f} | {r['predicted_reserved'] / GiB:.2f} | "
                     f"{r['measured_step_s'] * 1e3:.0f} ms | {r['predicted_step_s'] * 1e3:.0f} ms | {r['step_error'] * 100:+.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", nargs="?", default=str(RAW))
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args(argv)
    rs = rows(Path(a.folder))
    print(markdown(rs) if a.markdown else json.dumps(rs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
