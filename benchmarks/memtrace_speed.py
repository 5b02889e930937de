"""How long `planner memtrace` takes on a snapshot of 100,000 trace events.

Builds a synthetic snapshot with the allocator model of the tests (constants, then steps of
forward activations, workspace spikes and backward traffic with varied shapes, stacks shared as
PyTorch shares them; the ring buffer keeps the last 100,000 events), pickles it, and times: the
load (restricted unpickler + schema check), the replay and the classification alone, the whole
analysis (replay, classification, peak, allocator state, diagnosis), and optionally the PNG.
Target: load + analysis under 10 s on a 2-core machine.

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
    from planner.memtrace.classify import classify
    from planner.memtrace.loader import load_snapshot
    from planner.memtrace.report import analyze
    from planner.memtrace.timeline import build_timeline, choose_device

    t = {}
    snap, t["load (unpickle + check)"] = _timed(load_snapshot, path)
    tl, t["replay"] = _timed(build_timeline, snap, choose_device(snap, None))
    _, t["classify"] = _timed(classify, tl)
    result, t["analyze (replay..report)"] = _timed(analyze, snap, source=str(path), capacity_bytes=80 * 2**30)
    t["load + analyze"] = t["load (unpickle + check)"] + t["analyze (replay..report)"]
    if plot:
        from planner.memtrace.plot import plot_timeline

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
    total = statistics.median(r["load + analyze"] for r in runs)
    print(f"target < 10 s on 2 cores: {'met' if total < 10 else 'NOT met'} ({total:.2f} s)")


if __name__ == "__main__":
    main()
