"""Speed of the search's cost tables: the one composition evaluated on batches (one pipeline
layout's keys, lever variants side by side) against the same composition one plan at a time, as
ratios from one run.

    PYTHONPATH=$PWD python benchmarks/tables_speed.py [--model deepseek-v3] [--hw gb200-nvl72] [--sample 40]

Prints the table build (split into its terms), and the one-plan path's seconds per plan times the
plans the tables hold (keys x lever combinations), from a random sample of plans.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the planner program runs (planner.cli.entry)

import argparse  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="deepseek-v3")
    ap.add_argument("--hw", default="gb200-nvl72")
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--sample", type=int, default=40)
    args = ap.parse_args()

    from planner.cost.compose import costs_of
    from planner.cost.setup import resolve_setup
    from planner.errors import PlanRuleError
    from planner.search.space import build_space, make_plan
    from planner.search.tables import build_tables
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.job import Job

    model, hw = load_model(args.model), load_hardware(args.hw)
    job = Job(gpus=args.gpus, global_batch=8192, seq_len=4096, precisions=["bf16"])
    space = build_space(model, hw, job, check_rules=False)
    build_tables(space)  # warm caches and imports
    t0 = time.process_time()
    build_tables(space)
    batched = time.process_time() - t0
    entries = len(space.structs) * space.lever_product_size
    rnd = random.Random(0)
    t0, n = time.process_time(), 0
    while n < args.sample:
        s = rnd.choice(space.structs)
        levers = {k: rnd.choice(v) for k, v in space.levers.items()}
        try:
            setup = resolve_setup(model, hw, job, make_plan(s, levers))
        except PlanRuleError:
            continue
        c = costs_of(setup)
        c.step_s(), [c.peak_bytes(r) for r in range(s.pp)]
        n += 1
    per_plan = (time.process_time() - t0) / n
    print(f"{args.model} on {args.gpus} {args.hw}: {len(space.structs):,} keys x {space.lever_product_size} lever "
          f"combinations = {entries:,} plans")
    print(f"tables (batched composition): {batched:.2f} s CPU")
    print(f"one plan at a time: {per_plan * 1e3:.1f} ms per plan -> {per_plan * entries:,.0f} s for every plan "
          f"({per_plan * entries / batched:,.0f}x the tables)")


if __name__ == "__main__":
    main()
