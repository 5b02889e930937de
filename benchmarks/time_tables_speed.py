"""How long the search's time tables take: TP, TD and TO for every structural key of a space.

Two reference spaces (check_rules=False, as the search builds them):
- DeepSeek-V3 on GB200 NVL72, 256 GPUs, global batch 8192, sequence 4096, bf16 + fp8 (~14,700 keys);
- Llama 3.1 405B on H100, 16,384 GPUs, same job shape (~1,300 keys).
Target: each under 1 s on a 2-core machine. ``--scalar N`` also times the scalar path
(tables.TimeTerms, one evaluate per entry) on N random keys and extrapolates; ``--profile`` prints
the top of a cProfile of one vectorized build.

    PYTHONPATH=$PWD python benchmarks/time_tables_speed.py [--repeat 3] [--scalar 10] [--profile]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CASES = [("deepseek-v3", "gb200-nvl72", 256), ("llama3.1-405b", "h100", 16384)]


def _space(model_name: str, hw_name: str, gpus: int):
    from planner.search.space import build_space
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.job import Job

    job = Job(gpus=gpus, global_batch=8192, seq_len=4096, precisions=["bf16", "fp8"])
    return build_space(load_model(model_name), load_hardware(hw_name), job, check_rules=False)


def _arrays(space, n: int):
    from planner.search.tables import GROUPS, combos

    return [np.zeros((n, len(combos(space, GROUPS[k]))), dtype=np.int64) for k in ("TP", "TD", "TO")]


def run_vectorized(space) -> float:
    from planner.cost.setup import Assumptions
    from planner.search.time_tables import time_tables

    TP, TD, TO = _arrays(space, len(space.structs))
    t0 = time.perf_counter()
    time_tables(space, space.structs, Assumptions(), TP, TD, TO)
    return time.perf_counter() - t0


def run_scalar(space, n: int) -> float:
    """Seconds of the scalar path (one evaluate per entry: tables.time_tables with a TimeTerms
    subclass) on n random keys, extrapolated to the whole space."""
    from planner.cost.setup import Assumptions
    from planner.search.tables import TimeTerms, time_tables

    class ScalarTerms(TimeTerms):
        pass

    structs = random.Random(0).sample(space.structs, n)
    TP, TD, TO = _arrays(space, n)
    t0 = time.perf_counter()
    time_tables(space, structs, Assumptions(), ScalarTerms(), TP, TD, TO)
    return (time.perf_counter() - t0) / n * len(space.structs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scalar", type=int, default=0, help="also time the scalar path on this many keys")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    for model_name, hw_name, gpus in CASES:
        space = _space(model_name, hw_name, gpus)
        from planner.search.tables import GROUPS, combos

        sizes = "x".join(str(len(combos(space, GROUPS[k]))) for k in ("TP", "TD", "TO"))
        print(f"{model_name} on {hw_name}, {gpus} GPUs: {len(space.structs)} structural keys, TP/TD/TO combos {sizes}")
        # The first build pays the memoized pieces shared with other spaces (rates, specs); report
        # it apart from the steady state.
        times = [run_vectorized(space) for _ in range(args.repeat)]
        print(f"  vectorized: first {times[0]:.3f} s, median {statistics.median(times):.3f} s, best {min(times):.3f} s")
        if args.scalar:
            print(f"  scalar (extrapolated from {args.scalar} keys): {run_scalar(space, args.scalar):.0f} s")
        if args.profile:
            import cProfile
            import pstats

            pr = cProfile.Profile()
            pr.enable()
            run_vectorized(space)
            pr.disable()
            pstats.Stats(pr).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
