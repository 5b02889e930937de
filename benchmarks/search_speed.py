"""Search speed (issue 19's targets), all from one run:

    python benchmarks/search_speed.py            # everything below (several minutes on 2 cores)
    python benchmarks/search_speed.py --quick    # the two commands only, per-stage on and off
    python benchmarks/search_speed.py --json out.json

1. The default command, ``planner search --model v3 --hw nvl72``, as a user runs it (a fresh
   process: start-up, imports and output included, the modules' bytecode cached as Python keeps
   it; per-stage refinement on). Target: at most 2 s
   wall on an idle machine.
2. ``planner search --model v3 --hw nvl72 --gpus 65536`` likewise. Target: at most 5 s wall.
3. Both again with ``--no-per-stage``: the refinement's cost as the ratio on / off.
4. ``planner compare --model v3 --hw h100 --hw nvl72`` (two systems), as a user runs it (the two
   searches side by side, one process each) and with ``--jobs 1`` (one after the other): the ratio
   is what running them side by side gains on this machine. Target: at most 4 s wall (issue 40).
5. CP-SAT against the exhaustive oracle (``--solver exhaustive``) on the spaces of
   tests/test_search.py that the oracle enumerates in seconds: the ratio oracle / CP-SAT, and
   whether the two rank the same plans.

Each command runs ``--repeat`` times (default 3); the best wall time is reported, with the CPU
time (user + system) of that run beside it: on a machine shared with other work, wall time
includes waiting for a core, CPU time does not. Never a timed test: speed lives here.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the planner program runs (planner.cli.entry)

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

DEFAULT = ["--model", "v3", "--hw", "nvl72"]
SCALE = ["--model", "v3", "--hw", "nvl72", "--gpus", "65536"]
COMPARE = ["--model", "v3", "--hw", "h100", "--hw", "nvl72"]
TARGETS = {"default": 2.0, "65536": 5.0, "compare": 4.0}

# (model, hardware, gpus, global batch, seq, --max): from tests/test_search.py's CASES
ORACLE_CASES = [
    ("llama3.1-8b", "h100", 8, 64, 4096, "pp=2"),
    ("llama3.1-70b", "h100", 64, 128, 4096, "pp=8,mbs=2"),
    ("mixtral-8x7b", "h100", 32, 128, 4096, "pp=4,cp=1,mbs=4"),
    ("qwen3-30b-a3b", "gb200-nvl72", 64, 256, 4096, "pp=2,cp=1,mbs=4"),
    ("deepseek-v3", "gb200-nvl72", 256, 8192, 4096, "pp=4,tp=2,cp=1,etp=1,mbs=1"),
    ("korthikanti-megatron-22b", "a100-80gb", 8, 16, 2048, "pp=2"),
]


# A user's Python writes the modules' bytecode (__pycache__) on the first run and reads it after;
# a shell with PYTHONDONTWRITEBYTECODE set (some containers) compiles every module on every run
# instead, some 0.3 s of planner's start-up. The commands run as a user's do: bytecode on, after one
# warm-up run (main) that writes it.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def best_run(argv: list[str], repeat: int, read) -> dict:
    """Best wall time of ``planner ARGV`` in a fresh process over ``repeat`` runs, its CPU time
    (its worker processes' included: they are this process's children's children), and ``read``
    of its JSON output for that run."""
    best = None
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "planner", *argv], check=True, capture_output=True, text=True,
                             env=ENV).stdout
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if best is None or wall < best["wall_s"]:
            best = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), **read(json.loads(out))}
    assert best is not None
    return best


def command(args: list[str], repeat: int) -> dict:
    """``planner search ARGS --json --timings``: what the search reported (status, per-stage work,
    internal timings) beside its times (:func:`best_run`)."""
    return best_run(["search", *args, "--json", "--timings"], repeat, lambda data: {
        "status": data["solver"]["status"], "per_stage": data["solver"]["per_stage"], "timings": data["timings"],
        "best": data["plans"][0]["plan"]})


def compare_command(args: list[str], repeat: int) -> dict:
    """``planner compare ARGS --json``: each system's status beside its times (:func:`best_run`)."""
    return best_run(["compare", *args, "--json"], repeat, lambda data: {
        "status": {h["hardware"]["name"]: h.get("solver", {}).get("status", h["status"]) for h in data["hardware"]}})


def oracle_case(case: tuple) -> dict:
    from planner.search.driver import Options, run_search
    from planner.search.space import Limits
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.job import Job

    model, hw, gpus, gb, seq, maxes = case
    h = load_hardware(hw)
    job = Job(gpus=gpus, global_batch=gb, seq_len=seq, precisions=["bf16", "fp8"] if "fp8" in h.gpu.peak_flops
              else ["bf16"])
    row: dict = {"case": f"{model} {hw} {gpus} GPUs (--max {maxes})"}
    plans = {}
    for solver in ("cpsat", "exhaustive"):
        cpu0, t0 = time.process_time(), time.perf_counter()
        res = run_search(load_model(model), h, job, Options(solver=solver, per_stage=False,
                                                             limits=Limits.parse(None, maxes)))
        row[f"{solver}_s"] = round(time.perf_counter() - t0, 3)
        row[f"{solver}_cpu_s"] = round(time.process_time() - cpu0, 3)
        plans[solver] = [(p.plan.to_string(), p.objective_us) for p in res.plans]
        row["keys"] = res.solver["structural_keys"]
    row["agree"] = plans["cpsat"] == plans["exhaustive"]
    row["oracle_over_cpsat"] = round(row["exhaustive_cpu_s"] / max(row["cpsat_cpu_s"], 1e-9), 2)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the two commands only")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    subprocess.run([sys.executable, "-m", "planner", "search", *DEFAULT, "--no-per-stage"], check=True,
                   capture_output=True, env=ENV)  # warm-up: writes the bytecode (see ENV)
    out: dict = {"machine": {"cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}, "commands": {}}
    for name, argv in (("default", DEFAULT), ("65536", SCALE)):
        on = command(argv, args.repeat)
        off = command(argv + ["--no-per-stage"], args.repeat)
        out["commands"][name] = {"per_stage_on": on, "per_stage_off": off,
                                 "on_over_off_wall": round(on["wall_s"] / off["wall_s"], 2),
                                 "on_over_off_cpu": round(on["cpu_s"] / off["cpu_s"], 2), "target_wall_s": TARGETS[name]}
    side, serial = compare_command(COMPARE, args.repeat), compare_command(COMPARE + ["--jobs", "1"], args.repeat)
    out["commands"]["compare"] = {"side_by_side": side, "one_process": serial, "target_wall_s": TARGETS["compare"],
                                  "one_over_side_wall": round(serial["wall_s"] / side["wall_s"], 2)}
    if not args.quick:
        out["oracle"] = [oracle_case(c) for c in ORACLE_CASES]
    out["machine"]["load_1min_after"] = round(os.getloadavg()[0], 2)

    print(f"machine: {out['machine']['cpus']} CPUs, load average {out['machine']['load_1min']} before, "
          f"{out['machine']['load_1min_after']} after (wall time includes waiting for a core; CPU time does not)")
    print(f"{'command':<44} {'per-stage':>9} {'wall':>7} {'cpu':>7} {'target':>7}  status, refinement")
    for name, argv in (("default", DEFAULT), ("65536", SCALE)):
        c = out["commands"][name]
        for label, key in (("on", "per_stage_on"), ("off", "per_stage_off")):
            r = c[key]
            ps = r["per_stage"]
            ref = f"{ps.get('improved', 0)}/{ps.get('tried', 0)} improved, {ps.get('skipped_by_bound', 0)} skipped by bound, " \
                  f"{ps.get('paired', 0)} paired" \
                if ps.get("enabled") else "off"
            print(f"{'planner search ' + ' '.join(argv):<44} {label:>9} {r['wall_s']:>6.2f}s {r['cpu_s']:>6.2f}s "
                  f"{c['target_wall_s']:>6.1f}s  {r['status']}, {ref}")
        print(f"{'':<44} {'on/off':>9} {c['on_over_off_wall']:>6.2f}x {c['on_over_off_cpu']:>6.2f}x")
    c = out["commands"]["compare"]
    for label, key in (("jobs auto", "side_by_side"), ("jobs 1", "one_process")):
        r = c[key]
        print(f"{'planner compare ' + ' '.join(COMPARE):<44} {label:>9} {r['wall_s']:>6.2f}s {r['cpu_s']:>6.2f}s "
              f"{c['target_wall_s']:>6.1f}s  {', '.join(f'{k} {v}' for k, v in r['status'].items())}")
    print(f"{'':<44} {'1/auto':>9} {c['one_over_side_wall']:>6.2f}x")
    if "oracle" in out:
        print(f"\n{'CP-SAT against the oracle':<70} {'keys':>7} {'cpsat':>7} {'oracle':>7} {'ratio':>6} agree")
        for r in out["oracle"]:
            print(f"{r['case']:<70} {r['keys']:>7} {r['cpsat_cpu_s']:>6.2f}s {r['exhaustive_cpu_s']:>6.2f}s "
                  f"{r['oracle_over_cpsat']:>5.1f}x {'yes' if r['agree'] else 'NO'}")
        print("(CPU seconds in this process; ratio = oracle / CP-SAT)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
