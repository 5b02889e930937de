"""How long `planner memtrace` takes on a snapshot of 100,000 trace events.

Builds a synthetic snapshot with the allocator model of the tests (constants, then steps of
forward activations, workspace spikes and backward traffic with varied shapes, stacks shared as
PyTorch shares them), pickles it, and times each stage of the analysis: load (restricted
unpickler + schema check), replay, classification, the rest of the report, and the PNG.
Target: under 10 s for the analysis on a 2-core machine.

    PYTHONPATH=$PWD python benchmarks/memtrace_speed.py [--events 100000] [--repeat 3] [--plot]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "memtrace"))
sys.path.insert(0, str(REPO))

import memtrace_synth  # noqa: E402


def _timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def run_once(path: Path, plot: bool) -> dict:
    from planner.memtrace import report as rep
    from planner.memtrace.classify import classify, components_at
    from planner.memtrace.diagnose import diagnose
    from planner.memtrace.loader import load_snapshot
    from planner.memtrace.timeline import build_timeline, choose_device

    t = {}
    snap, t["load"] = _timed(load_snapshot, path)
    dev = choose_device(snap, None)
    tl, t["replay"] = _timed(build_timeline, snap, dev)
    cl, t["classify"] = _timed(classify, tl)

    def rest():
        import numpy as np

        peak = int(np.argmax(tl.allocated))
        comps = components_at(tl, cl, peak)
        rep._peak_info(tl, cl, peak, comps, 10)
        rep.allocator_state(tl, cl, peak)
        diagnose(tl, cl, comps["components"], capacity_bytes=80 * 2**30)

    _, t["peak+allocator+diagnosis"] = _timed(rest)
    t["analysis total"] = sum(t.values())
    # The whole command path as the CLI runs it (analysis only, no plot), for comparison.
    _, t["analyze() end to end"] = _timed(lambda: rep.analyze(load_snapshot(path), source=str(path)))
    if plot:
        from planner.memtrace.plot import plot_timeline

        result = rep.analyze(snap, source=str(path))
        with tempfile.TemporaryDirectory() as d:
            _, t["plot (PNG)"] = _timed(plot_timeline, result.timeline, result.classification, result.report,
                                        Path(d) / "t.png")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--plot", action="store_true", help="also time the PNG")
    ap.add_argument("--deep-stacks", type=int, default=0, metavar="N",
                    help="give every event its own stack of N extra frames (worst case: no shared tracebacks)")
    args = ap.parse_args()

    snap_dict, build_s = _timed(memtrace_synth.big_snapshot, args.events, deep_stacks=args.deep_stacks)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.pickle"
        path.write_bytes(pickle.dumps(snap_dict))
        n = len(snap_dict["device_traces"][0])
        size_mb = path.stat().st_size / 1e6
        stacks = f", unshared stacks of {args.deep_stacks}+ frames" if args.deep_stacks else ", shared stacks"
        print(f"snapshot: {n:,} events, {len(snap_dict['segments'])} segments, {size_mb:.1f} MB pickle{stacks} "
              f"(built in {build_s:.1f} s)")
        runs = [run_once(path, args.plot) for _ in range(args.repeat)]
    for key in runs[0]:
        vals = [r[key] for r in runs]
        print(f"  {key:<26} median {statistics.median(vals):6.2f} s   (min {min(vals):.2f}, max {max(vals):.2f})")
    total = statistics.median(r["analyze() end to end"] for r in runs)
    print(f"target < 10 s on 2 cores: {'met' if total < 10 else 'NOT met'} ({total:.2f} s)")


if __name__ == "__main__":
    main()
