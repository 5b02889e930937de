"""planner's predictions for the fourth CUDA-graph lease (benchmarks/gpu/configs.py GRAPHS4: 8 and
256 routed experts, eager and graphed), written before the run to
results/validation/gpu-graphs4-predictions.json, for both GPUs the device may lend (an H100 or an
H200: the lease's machine is known only when it starts).

Per run and GPU: the step time (planner.cost.compose.costs_of, as tests/test_cuda_graph_measured.py
reads the graphed MoE steps), the allocated and reserved peaks (planner.cost.memory.memory_report,
as benchmarks.gpu.graph_memory predicts them), all from the model at the commit named in the file.

    python -m benchmarks.gpu.graphs4_predictions            # prints the JSON
    python -m benchmarks.gpu.graphs4_predictions --write    # writes it (refuses to overwrite)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "validation" / "gpu-graphs4-predictions.json"
GPUS = ("h100", "h200")


def predictions() -> dict:
    from benchmarks.gpu.configs import GRAPHS4, planner_setup
    from planner.cost.compose import costs_of
    from planner.cost.memory import memory_report

    runs: dict = {}
    for cfg in GRAPHS4:
        runs[cfg.name] = {}
        for gpu in GPUS:
            setup = planner_setup(cfg, hardware=gpu)
            rep = memory_report(setup)
            runs[cfg.name][gpu] = {"step_s": float(costs_of(setup).step_s()[0]),
                                   "allocated_bytes": float(rep.worst.peak_bytes),
                                   "reserved_bytes": float(rep.reserved(rep.worst))}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"note": "planner's predictions for benchmarks/gpu/configs.py GRAPHS4, written before the runs "
                    f"(model of commit {commit}; uncalibrated, as tests/test_cuda_graph_measured.py reads them)",
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = json.dumps(predictions(), indent=1, sort_keys=True) + "\n"
    if "--write" in argv:
        if OUT.exists():
            print(f"{OUT} exists: the predictions are written once, before the run.", file=sys.stderr)
            return 1
        OUT.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
