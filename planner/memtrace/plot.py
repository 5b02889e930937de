"""The MemTrace timeline as a PNG: allocated stacked by class, reserved as a line, the limit, the
peak and any OOM marked (the seed's section 04.2 figure)."""

from __future__ import annotations

from pathlib import Path

from planner.errors import PlannerError
from planner.memtrace import CLASSES
from planner.memtrace.classify import Classification, class_series
from planner.memtrace.timeline import Timeline
from planner.units import GiB

COLORS = {
    "weights": "#4c72b0",
    "gradients": "#55a868",
    "optimizer": "#8172b2",
    "activations": "#dd8452",
    "transient": "#c44e52",
    "comm_buffers": "#64b5cd",
    "unknown": "#b0b0b0",
}

MAX_POINTS = 20000
"""States plotted at most; longer traces keep the per-bucket maxima so peaks stay visible."""


def plot_timeline(tl: Timeline, cl: Classification, report: dict, path: str | Path) -> Path:
    """Write the PNG; matplotlib is imported here so the CLI starts fast."""
    import numpy as np

    from planner.report.plots import _plt, save_figure

    plt = _plt()

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise PlannerError(f"--plot writes PNG files; '{path}' does not end in .png.")
    series = class_series(tl, cl) / GiB
    reserved = tl.reserved / GiB
    if tl.time_us is not None:
        x, xlabel = tl.time_us / 1e6, "time since the first recorded event (s)"
    else:
        x, xlabel = np.arange(tl.n_states, dtype=float), "trace event"
    keep = _thin(series.sum(axis=0), MAX_POINTS)
    fig, ax = plt.subplots(figsize=(12, 5.5), dpi=110)
    ax.stackplot(x[keep], series[:, keep], labels=list(CLASSES), colors=[COLORS[c] for c in CLASSES],
                 step="post", alpha=0.85, linewidth=0)
    ax.step(x[keep], reserved[keep], where="post", color="black", linewidth=1.4, label="reserved")
    diag = report["diagnosis"]
    if diag.get("capacity_bytes"):
        ax.axhline(diag["capacity_bytes"] / GiB, color="#aa0000", linestyle="--", linewidth=1,
                   label=f"limit ({diag['capacity_source']})")
    peak = report["peak"]
    ax.axvline(x[peak["state"]], color="#333333", linestyle=":", linewidth=1)
    ax.annotate(f"peak {peak['allocated_bytes'] / GiB:.1f} GiB", (x[peak["state"]], peak["allocated_bytes"] / GiB),
                xytext=(5, 5), textcoords="offset points", fontsize=8)
    for o in report["timeline"]["oom_events"]:
        ax.plot([x[o["event"] + 1]], [o["reserved_bytes"] / GiB], marker="x", color="#aa0000", markersize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("GiB")
    ax.set_ylim(bottom=0)
    case = diag["case"]
    ax.set_title(f"{Path(report['snapshot']['path']).name}, device {report['snapshot']['device']}: "
                 f"case {case}" if case in ("A", "B") else f"{Path(report['snapshot']['path']).name}: {case}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    return path


def _thin(total, max_points: int):
    """Indices to plot: all of them, or per bucket the state with the largest total (so spikes
    survive thinning) plus the first and last state."""
    import numpy as np

    n = len(total)
    if n <= max_points:
        return np.arange(n)
    edges = np.linspace(0, n, max_points + 1).astype(int)
    picks = [e0 + int(np.argmax(total[e0:e1])) for e0, e1 in zip(edges[:-1], edges[1:]) if e1 > e0]
    return np.unique(np.concatenate(([0], picks, [n - 1])))
