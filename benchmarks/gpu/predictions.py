"""planner's predictions for a series of benchmarks/gpu/configs.py runs, written before the runs
into results/validation/gpu-<series>-predictions.json, for both GPUs the device may lend (an H100
or an H200: the lease's machine is known only when it starts). Held-out protocol: the file is
written once, committed, and only then is the series measured.

Per run and GPU: the step time (planner.cost.compose.costs_of), the allocated and reserved peaks
(planner.cost.memory.memory_report, as benchmarks.gpu.graph_memory predicts them), all from the
model at the commit named in the file.

    python -m benchmarks.gpu.predictions SERIES            # prints the JSON (SERIES: graphs4, mbs5, graphs6)
    python -m benchmarks.gpu.predictions SERIES --write    # writes it (refuses to overwrite)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPUS = ("h100", "h200")


def series(name: str) -> tuple:
    """The configurations of a held-out series by its name in benchmarks/gpu/configs.py."""
    from benchmarks.gpu import configs

    found = getattr(configs, name.upper(), None)
    if not isinstance(found, tuple) or not all(isinstance(c, configs.RunConfig) for c in found):
        raise SystemExit(f"no series '{name}' in benchmarks/gpu/configs.py (a tuple of RunConfig named "
                         f"{name.upper()}); try graphs4, mbs5 or graphs6")
    return found


def out_path(name: str) -> Path:
    return ROOT / "results" / "validation" / f"gpu-{name}-predictions.json"


def predictions(name: str) -> dict:
    from benchmarks.gpu.configs import planner_setup
    from planner.cost.compose import costs_of
    from planner.cost.memory import memory_report

    runs: dict = {}
    for cfg in series(name):
        runs[cfg.name] = {}
        for gpu in GPUS:
            setup = planner_setup(cfg, hardware=gpu)
            rep = memory_report(setup)
            runs[cfg.name][gpu] = {"step_s": float(costs_of(setup).step_s()[0]),
                                   "allocated_bytes": float(rep.worst.peak_bytes),
                                   "reserved_bytes": float(rep.reserved(rep.worst))}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"note": f"planner's predictions for benchmarks/gpu/configs.py {name.upper()}, written before the runs "
                    f"(model of commit {commit}; uncalibrated, as tests/test_cuda_graph_measured.py reads them)",
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = [a for a in argv if not a.startswith("--")]
    if len(names) != 1:
        print("usage: python -m benchmarks.gpu.predictions SERIES [--write]", file=sys.stderr)
        return 2
    text = json.dumps(predictions(names[0]), indent=1, sort_keys=True) + "\n"
    if "--write" in argv:
        out = out_path(names[0])
        if out.exists():
            print(f"{out} exists: the predictions are written once, before the run.", file=sys.stderr)
            return 1
        out.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
