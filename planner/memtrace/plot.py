"""The MemTrace timeline as a PNG: allocated stacked by class, reserved as a line, the limit, the
peak and any OOM marked (the seed's section 04.2 figure)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from planner.errors import PlannerError
from planner.memtrace import CLASSES
from planner.memtrace.classify import Classification, class_series
from planner.memtrace.timeline import Timeline
from planner.report.plots import _plt, save_figure, wrap_title
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

MAX_POINTS = 4000
"""States plotted at most (the figure is about 1,300 pixels wide); longer traces keep the per-bucket
maxima so peaks stay visible."""

CASE_TEXT = {
    "A": "case A: reserved and allocated are both near the limit: the bytes are really used (shrink the largest "
         "class at the peak)",
    "B": "case B: reserved is at the limit while allocated is lower: the caching allocator holds the gap "
         "(fragmentation, transient staircase or stream pools; recompute does not help)",
    "fits": "fits: the peak stays under the limit",
    "unknown": "no limit known: give --capacity GiB or --hw to tell case A from case B",
}
"""What each diagnosis means, in the figure's title (planner.memtrace.diagnose)."""

IDLE_SHARE = 0.3
"""A time axis whose longest pause between two events exceeds this share of the trace is replaced by
evenly spaced events (a real OOM trace spent 3.5 of its 4.2 s on one flat stretch)."""

OFF_SCALE = 1.6
"""A limit above this many times the highest reserved value is named, not drawn: drawn, it would
squash the trace into a flat line at the bottom."""


def timeline_figure(tl: Timeline, cl: Classification, report: dict):
    """The figure of `memtrace --plot` (matplotlib imported here so the CLI starts fast)."""
    plt = _plt()
    series = class_series(tl, cl) / GiB
    reserved = tl.reserved / GiB
    x, xlabel = np.arange(tl.n_states, dtype=float), "trace event"
    if tl.time_us is not None:
        t = tl.time_us / 1e6
        span = float(t[-1] - t[0]) if len(t) > 1 else 0.0
        gap = float(np.diff(t).max()) if len(t) > 1 else 0.0
        if span > 0 and gap > IDLE_SHARE * span:
            # Drawn against time, the trace would be a flat line across the idle stretch: space the
            # events evenly instead, and say how long the stretch was.
            xlabel = (f"trace event (evenly spaced: {gap:.2f} s of the trace's {span:.2f} s pass between two "
                      "events with nothing allocated or freed)")
        else:
            x, xlabel = t, "time since the first recorded event (s)"
    keep = _thin(series.sum(axis=0), MAX_POINTS)
    fig, ax = plt.subplots(figsize=(12, 6), dpi=110, layout="constrained")
    ax.stackplot(x[keep], series[:, keep], labels=list(CLASSES), colors=[COLORS[c] for c in CLASSES],
                 step="post", alpha=0.85, linewidth=0)
    ax.step(x[keep], reserved[keep], where="post", color="black", linewidth=1.4, label="reserved")
    diag = report["diagnosis"]
    top = float(reserved.max()) if len(reserved) else 1.0
    limit_note = ""
    if diag.get("capacity_bytes"):
        cap = diag["capacity_bytes"] / GiB
        if cap <= OFF_SCALE * max(top, 1e-9):
            ax.axhline(cap, color="#aa0000", linestyle="--", linewidth=1, label=f"limit ({diag['capacity_source']})")
            top = max(top, cap)
        else:
            limit_note = (f"; the limit, {cap:.1f} GiB ({diag['capacity_source']}), is off the scale: the reserved peak "
                          f"is {top / cap:.0%} of it")
    ax.set_ylim(0, top * 1.12)
    peak = report["peak"]
    px, py = x[peak["state"]], peak["allocated_bytes"] / GiB
    ax.axvline(px, color="#333333", linestyle=":", linewidth=1)
    ax.plot([px], [py], marker="v", color="#333333", markersize=8, zorder=5)
    for o in report["timeline"]["oom_events"]:
        ax.plot([x[o["event"] + 1]], [o["reserved_bytes"] / GiB], marker="x", color="#aa0000", markersize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("GiB (2^30 bytes)")
    case = diag["case"]
    name = Path(report["snapshot"]["path"]).name
    head = f"{name}, device {report['snapshot']['device']}"
    peak_text = (f"peak {py:.2f} GiB allocated, {peak['reserved_bytes'] / GiB:.2f} GiB reserved "
                 "(the dotted line)")
    ax.set_title(wrap_title(head + ": " + CASE_TEXT.get(case, str(case)) + limit_note, 120) + "\n" + peak_text,
                 fontsize=10)
    fig.legend(loc="outside lower center", ncol=5, fontsize=9, frameon=False)
    ax.grid(alpha=0.3)
    return fig


def plot_timeline(tl: Timeline, cl: Classification, report: dict, path: str | Path) -> Path:
    """Write the PNG of :func:`timeline_figure`."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise PlannerError(f"--plot writes PNG files; '{path}' does not end in .png.")
    save_figure(timeline_figure(tl, cl, report), path)
    return path


def _thin(total, max_points: int):
    """Indices to plot: all of them, or per bucket the state with the largest total (so spikes
    survive thinning) plus the first and last state."""
    n = len(total)
    if n <= max_points:
        return np.arange(n)
    edges = np.linspace(0, n, max_points + 1).astype(int)
    picks = [e0 + int(np.argmax(total[e0:e1])) for e0, e1 in zip(edges[:-1], edges[1:]) if e1 > e0]
    return np.unique(np.concatenate(([0], picks, [n - 1])))
