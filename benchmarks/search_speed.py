"""Search speed: CP-SAT and the exhaustive oracle side by side, with agreement.

    python benchmarks/search_speed.py            # the full table (a few minutes)
    python benchmarks/search_speed.py --quick    # DeepSeek-V3 on nvl72 and h100 at 256 GPUs only

Cases: DeepSeek-V3 on GB200 NVL72 and HGX H100, and the dense Llama 3.1 405B on H100, at 256,
1,024, 4,096, 16,384 and 65,536 GPUs. Global batch: the reference job's up to 1,024 GPUs, then
four sequences per GPU (DeepSeek-V3, seq 4096) or one per eight GPUs at seq 8192 (Llama 3.1 405B,
as its 16K-GPU run), so that every data-parallel degree has work. Both solvers read the same
tables; "agree" means the same ranked plans in the same order. The default command's wall time
(start-up included) is measured in a subprocess. Times are wall-clock on the machine it runs on.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the planner program runs (planner.cli.entry)

import argparse  # noqa: E402
import subprocess
import sys
import time


def case_job(model: str, gpus: int):
    from planner.specs.job import Job

    if model == "deepseek-v3":
        return Job(gpus=gpus, global_batch=max(8192, 4 * gpus), seq_len=4096, precisions=["bf16", "fp8"])
    return Job(gpus=gpus, global_batch=max(2048, gpus // 8), seq_len=8192, precisions=["bf16", "fp8"])


def run_case(model: str, hw: str, gpus: int, top: int = 10) -> dict:
    from planner.errors import NothingFitsError
    from planner.search.driver import Options, run_search
    from planner.specs.catalog import load_hardware, load_model

    m, h = load_model(model), load_hardware(hw)
    job = case_job(model, gpus)
    row = {"model": model, "hw": hw, "gpus": gpus, "global_batch": job.global_batch}
    results = {}
    for solver in ("cpsat", "exhaustive"):
        t0 = time.perf_counter()
        try:
            res = run_search(m, h, job, Options(top=top, solver=solver, per_stage=False))
            plans = [p.plan.to_string() for p in res.plans]
            row[f"{solver}_s"] = time.perf_counter() - t0
            row[f"{solver}_timings"] = res.timings
            results[solver] = plans
            row["keys"] = res.solver["structural_keys"]
            row["levers"] = res.solver["lever_combinations"]
            row["best"] = plans[0]
            row["status"] = res.solver["status"] if solver == "cpsat" else row.get("status")
        except NothingFitsError:
            row[f"{solver}_s"] = time.perf_counter() - t0
            results[solver] = []
            row["best"] = "(nothing fits)"
    row["agree"] = results["cpsat"] == results["exhaustive"]
    return row


def default_command_wall() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "planner", "search", "--model", "v3", "--hw", "nvl72"],
                   check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    scales = [256] if args.quick else [256, 1024, 4096, 16384, 65536]
    cases = [("deepseek-v3", "gb200-nvl72"), ("deepseek-v3", "h100"), ("llama3.1-405b", "h100")]
    if args.quick:
        cases = cases[:2]
    rows = [run_case(m, h, n) for m, h in cases for n in scales]
    hdr = f"{'model':<14} {'hw':<12} {'GPUs':>6} {'keys':>6} {'levers':>6} {'tables':>7} {'cpsat':>7} {'oracle':>7} agree  best plan"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        tb = r.get("cpsat_timings", {})
        tables = tb.get("space_s", 0) + tb.get("tables_s", 0) + tb.get("bound_s", 0)
        print(f"{r['model']:<14} {r['hw']:<12} {r['gpus']:>6} {r.get('keys', 0):>6} {r.get('levers', 0):>6} "
              f"{tables:>6.2f}s {r['cpsat_s']:>6.2f}s {r['exhaustive_s']:>6.2f}s {'yes' if r['agree'] else 'NO':<5}  {r['best']}")
    wall = default_command_wall()
    print(f"\n`planner search --model v3 --hw nvl72` (reference job, per-stage refinement on): {wall:.2f} s wall, start-up included")


if __name__ == "__main__":
    main()
