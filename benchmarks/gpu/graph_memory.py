"""CUDA-graph memory (issue 39): planner's predicted peaks with and without graphs against the
H200 and H100 runs of benchmarks/gpu/configs.py GRAPHS, GRAPHS2 and GRAPHS3 (results/validation/gpu-raw/
cuda-graphs, cuda-graphs-2 and cuda-graphs-3, measured by run_graphs_small.sh, run_graphs2_knee.sh and
run_graphs3.sh with Megatron-Core's local graphs and its full-iteration wrapper).

    PYTHONPATH=$PWD python -m benchmarks.gpu.graph_memory [--markdown]

For every run with graphs: its measured and predicted allocated and reserved peaks, and the
difference graphs make (the run less its eager twin, the configuration named ``...-none``),
measured against predicted. Acceptance (issue 39): predicted peak within 5 % with graphs on, the
difference within 10 % of the measured difference.
"""

from __future__ import annotations

import argparse
import json

GiB = 2**30
FOLDERS = ("cuda-graphs", "cuda-graphs-2", "cuda-graphs-3", "cuda-graphs-4", "cuda-graphs-6")
"""The leases: GRAPHS (2026-12-05, first), GRAPHS2 (full iteration, drop-and-pad MoE; second), GRAPHS3
(full iteration, held out of its memory rule; third), GRAPHS4 (8 and 256 experts, held out; fourth) and
GRAPHS6 (the full iteration without stranded blocks, held out; fifth).
A run measured in both counts from the later lease; a failed run (its JSON holds the error) from
neither."""


def eager_twin(name: str) -> str:
    """graph-gqa-s2k-b1-layer -> graph-gqa-s2k-b1-none."""
    return name.rsplit("-", 1)[0] + "-none"


def predicted(name: str) -> tuple[float, float]:
    """(allocated peak, reserved peak) planner predicts for a configuration. Megatron's local
    implementation graphs the whole layer for cuda_graph_modules=[attn] too (TransformerLayer's
    create_mcore_cudagraph_manager wraps the layer; the attn run's peaks equal the whole-layer run's
    to the byte), so those runs are predicted as scoped:layer."""
    from dataclasses import replace

    from benchmarks.gpu.configs import by_name, planner_setup
    from planner.cost.memory import memory_report

    cfg = by_name(name)
    if cfg.cuda_graphs.startswith("scoped:") and cfg.cuda_graphs != "scoped:layer":
        cfg = replace(cfg, cuda_graphs="scoped:layer")
    rep = memory_report(planner_setup(cfg))
    return rep.worst.peak_bytes, rep.reserved(rep.worst)


def rows() -> list[dict]:
    from benchmarks.gpu.compare import measured

    runs = {name: r for folder in FOLDERS for name, r in measured(folder).items()}
    out = []
    for name, r in sorted(runs.items()):
        twin = runs.get(eager_twin(name))
        if name == eager_twin(name) or twin is None:
            continue
        pa, pr = predicted(name)
        ta, tr = predicted(twin["config"])
        row = {"config": name, "cuda_graphs": r["spec"]["cuda_graphs"],
               "measured_allocated": r["peak_allocated"], "predicted_allocated": pa,
               "measured_reserved": r["peak_reserved"], "predicted_reserved": pr,
               "eager_measured_allocated": twin["peak_allocated"], "eager_predicted_allocated": ta,
               "eager_measured_reserved": twin["peak_reserved"], "eager_predicted_reserved": tr,
               "step_time_s": r["step_time_s"], "eager_step_time_s": twin["step_time_s"]}
        row["allocated_error"] = pa / r["peak_allocated"] - 1
        row["reserved_error"] = pr / r["peak_reserved"] - 1
        row["measured_delta_allocated"] = r["peak_allocated"] - twin["peak_allocated"]
        row["predicted_delta_allocated"] = pa - ta
        row["measured_delta_reserved"] = r["peak_reserved"] - twin["peak_reserved"]
        row["predicted_delta_reserved"] = pr - tr
        out.append(row)
    return out


def markdown(rs: list[dict]) -> str:
    g = lambda b: f"{b / GiB:.2f}"  # noqa: E731
    m = lambda b: f"{b / 2**20:+.0f}"  # noqa: E731
    lines = ["| run | graphs | allocated meas. / pred. (GiB) | error | reserved meas. / pred. (GiB) | error | "
             "graphs add, allocated meas. / pred. (MiB) | reserved meas. / pred. (MiB) | step eager / graphs (ms) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rs:
        lines.append(
            f"| {r['config']} | {r['cuda_graphs']} | {g(r['measured_allocated'])} / {g(r['predicted_allocated'])} | "
            f"{r['allocated_error'] * 100:+.1f}% | {g(r['measured_reserved'])} / {g(r['predicted_reserved'])} | "
            f"{r['reserved_error'] * 100:+.1f}% | {m(r['measured_delta_allocated'])} / "
            f"{m(r['predicted_delta_allocated'])} | {m(r['measured_delta_reserved'])} / "
            f"{m(r['predicted_delta_reserved'])} | {r['eager_step_time_s'] * 1e3:.0f} / {r['step_time_s'] * 1e3:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    rs = rows()
    print(markdown(rs) if a.markdown else json.dumps(rs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
