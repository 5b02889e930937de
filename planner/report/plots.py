"""PNG figures (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from planner.cost.time import LABELS
from planner.cost.timeline import stage_timeline
from planner.files import write_with
from planner.units import GiB


def _plt():
    # matplotlib loads only when a plot is drawn (start-up: plots are optional output).
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    # Names and paths in titles are text, never mathtext: a '$' in a model name must not make
    # matplotlib parse (and fail on) a formula.
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def save_figure(fig, path, what: str = "plot") -> Path:
    """Write ``fig`` as a PNG through planner.files (atomic, never over an input), then close it."""
    plt = _plt()
    try:
        write_with(path, what, lambda tmp: fig.savefig(tmp, format="png"), suffixes=(".png",))
    finally:
        plt.close(fig)
    return Path(path)


def wrap_title(text: str, width: int) -> str:
    """A long title broken into lines of at most ``width`` characters, at spaces, and inside a word
    longer than that (a plan string: one word of commas) after its commas."""
    out: list[str] = []
    for para in text.split("\n"):
        pieces: list[str] = []
        for word in para.split(" "):
            while len(word) > width and "," in word[:width]:
                cut = word[:width].rindex(",") + 1
                pieces.append(word[:cut])
                word = word[cut:]
            pieces.append(word)
        line = ""
        for piece in pieces:
            glue = "" if line.endswith(",") and piece and not para.count(line + " " + piece) else " "
            cand = line + glue + piece if line else piece
            if len(cand) > width and line:
                out.append(line)
                line = piece
            else:
                line = cand
        out.append(line)
    return "\n".join(out)


def layout_problems(fig) -> list[str]:
    """What a reader would stumble on, measured on the drawn figure: text outside the figure
    (clipped titles, labels, legends), and titles, annotations and legends on top of each other or a
    legend over a plotting area. Empty when the figure is clean (tests assert it)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    items: list[tuple[str, object]] = []
    for t in fig.texts:
        if t.get_visible() and t.get_text():
            items.append((f"figure text {t.get_text()[:40]!r}", t.get_window_extent(renderer)))
    for leg in fig.legends:
        items.append(("figure legend", leg.get_window_extent(renderer)))
    axes_boxes = []
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        axes_boxes.append((i, ax.get_window_extent(renderer)))
        for name, t in (("title", ax.title), ("left title", ax._left_title), ("right title", ax._right_title),
                        ("x label", ax.xaxis.label), ("y label", ax.yaxis.label)):
            if t.get_visible() and t.get_text():
                items.append((f"axes {i} {name} {t.get_text()[:40]!r}", t.get_window_extent(renderer)))
        for t in ax.texts:
            if t.get_visible() and t.get_text():
                items.append((f"axes {i} text {t.get_text()[:40]!r}", t.get_window_extent(renderer)))
        leg = ax.get_legend()
        if leg is not None and leg.get_visible():
            items.append((f"axes {i} legend", leg.get_window_extent(renderer)))
    out = []
    for name, b in items:
        if b.x0 < box.x0 - 1 or b.x1 > box.x1 + 1 or b.y0 < box.y0 - 1 or b.y1 > box.y1 + 1:
            out.append(f"{name} is clipped by the figure's edge")
    for a in range(len(items)):
        for b in range(a + 1, len(items)):
            (na, ba), (nb, bb) = items[a], items[b]
            if ba.overlaps(bb) and min(ba.x1, bb.x1) - max(ba.x0, bb.x0) > 1 and min(ba.y1, bb.y1) - max(ba.y0, bb.y0) > 1:
                out.append(f"{na} overlaps {nb}")
    for name, b in items:
        if "legend" in name and name.startswith("figure"):
            for i, ab in axes_boxes:
                if b.overlaps(ab) and min(b.y1, ab.y1) - max(b.y0, ab.y0) > 1 and min(b.x1, ab.x1) - max(b.x0, ab.x0) > 1:
                    out.append(f"{name} covers axes {i}")
    return out


STAGE_COLORS = ["#4c72b0", "#8172b2", "#55a868", "#dd8452"]
STAGE_LABELS = ["constant (weights, grads, optimizer)", "communication buffers", "activations", "transient"]


def memory_timeline_figure(setup, mem):
    """The figure of `explain --plot`: one panel per pipeline stage (small multiples on a shared
    memory axis), each with its memory over one step stacked by class, the estimated reserved line,
    the capacity, and its peak marked (the worst stage's panel in red); the plan in a wrapped title,
    one legend under the panels. Returns (figure, the worst stage's marked allocated peak, bytes)."""
    plt = _plt()
    pp = setup.deg.pp
    ncols = 1 if pp == 1 else min(4 if pp <= 16 else 8, pp)
    nrows = math.ceil(pp / ncols)
    width = 11 if pp == 1 else 13
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, 2.2 + (4.3 if pp == 1 else 2.3) * nrows), dpi=110,
                             sharex=False, sharey=True, squeeze=False, layout="constrained")
    cap = mem.capacity_bytes / GiB
    worst = mem.worst
    marked = 0.0
    top = cap
    drawn = []
    for rank in range(pp):
        ax = axes[rank // ncols][rank % ncols]
        events = stage_timeline(setup, rank)
        x = np.arange(len(events))
        parts = [np.array([getattr(e, k) for e in events]) / GiB
                 for k in ("constant", "comm_buffers", "activations", "transient")]
        total = sum(parts)
        reserved = np.maximum.accumulate(total) * (1 + mem.allocator_fraction)
        top = max(top, float(reserved.max()))
        ax.stackplot(x, *parts, labels=STAGE_LABELS, colors=STAGE_COLORS, alpha=0.85, step="post")
        ax.plot(x, reserved, color="black", lw=1.1, label="reserved (estimate: running peak + allocator margin)")
        ax.axhline(cap, color="red", ls="--", lw=1, label=f"capacity {cap:.1f} GiB (usable HBM less context and margin)")
        i = int(np.argmax(total))
        stage = mem.stages[rank]
        is_worst = rank == worst.rank
        ax.plot([i], [stage.peak_bytes / GiB], marker="v", color="crimson" if is_worst else "#444444",
                ms=8 if pp > 1 else 10, zorder=5, label="peak (allocated)")
        peak_reserved = mem.reserved(stage) / GiB
        title = f"stage {rank}: peak {peak_reserved:.1f} GiB" + (" (worst)" if is_worst else "")
        if pp == 1:
            e = events[i]
            title += f", allocated {stage.peak_bytes / GiB:.1f} GiB at the {e.phase} of {e.layer or 'the step'}"
        ax.set_title(title, fontsize=9 if pp > 1 else 10, color="crimson" if is_worst else "black",
                     fontweight="bold" if is_worst else "normal")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7 if pp > 4 else 9)
        if is_worst:
            marked = float(total[i] * GiB)
        drawn.append(ax)
    for k in range(pp, nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    for ax in drawn:
        ax.set_ylim(0, top * 1.08)
    for r in range(nrows):
        axes[r][0].set_ylabel("GiB per GPU", fontsize=9)
    for ax in drawn:  # the lowest panel of each column names the x axis
        below = [o for o in drawn if o is not ax and o.get_subplotspec().colspan == ax.get_subplotspec().colspan
                 and o.get_subplotspec().rowspan.start > ax.get_subplotspec().rowspan.start]
        if not below:
            ax.set_xlabel("events: each layer's forward and backward in schedule order, then the optimizer"
                          if pp == 1 else "events in schedule order", fontsize=8 if pp > 1 else 9)
    handles, labels = drawn[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4 if pp > 1 else 3, fontsize=9, frameon=False)
    head = (f"{setup.model.name} on {setup.hw.name}, {setup.job.gpus:,} GPUs: memory per GPU over one step, "
            f"{'every pipeline stage' if pp > 1 else 'one stage'} (GiB = 2^30 bytes)")
    fig.suptitle(head + "\n" + wrap_title("plan " + setup.plan.to_string(), 130 if pp > 1 else 110), fontsize=10)
    return fig, marked


def plot_memory_timeline(setup, mem, path: Path) -> tuple[Path, float]:
    """Write `explain --plot`'s PNG (:func:`memory_timeline_figure`). Returns the file and the worst
    stage's marked allocated peak in bytes (the JSON's ``allocated_peak_bytes``)."""
    fig, marked = memory_timeline_figure(setup, mem)
    return save_figure(fig, path), marked


# Step-time causes in the order the compare figure stacks them (compute first, then host time, then
# what is exposed), each with a fixed colour so that figures of different runs read the same. A cause
# the time model adds later and this table lacks still gets drawn (OTHER_COLORS), never dropped.
_CAUSE_COLORS = {
    "gemm": "#4c72b0", "attention": "#64b5cd", "memory_bound": "#8c8c8c", "recompute": "#937860",
    "host": "#e5ae38", "tp": "#dd8452", "cp": "#da8bc3", "ep": "#c44e52", "etp": "#e17c05", "pp_p2p": "#8172b2",
    "pipeline_bubble": "#ccb974", "dp_grad": "#55a868", "dp_param": "#2ca02c", "fsdp": "#17becf",
    "optimizer": "#7f7f7f", "optimizer_offload": "#bcbd22", "activation_offload": "#9edae5",
}
_OTHER_COLORS = ("#a6761d", "#666666", "#e7298a", "#66a61e")
SMALL_CAUSE = 0.005
"""Causes under this share of every step are stacked as one "other" segment (named in the legend),
so every second of the step is drawn without a legend entry per sliver."""


def step_segments(entries: list[dict]) -> list[tuple[str, str, list[float]]]:
    """(label, colour, seconds per system) for the step-time bars: every cause of the breakdowns, in
    the fixed order; the ones under SMALL_CAUSE of every step summed into one "other" segment. Each
    system's segments add up to its whole breakdown (the step time)."""
    ok = [e["status"] == "ok" for e in entries]
    found = sorted({c for e, k in zip(entries, ok) if k for c in e["summary"]["breakdown"]})
    order = [c for c in _CAUSE_COLORS if c in found] + [c for c in found if c not in _CAUSE_COLORS]

    def secs(c):
        return [e["summary"]["breakdown"].get(c, 0.0) if k else 0.0 for e, k in zip(entries, ok)]

    steps = [max(sum(e["summary"]["breakdown"].values()), 1e-30) if k else 1.0 for e, k in zip(entries, ok)]
    big = [c for c in order if any(v > SMALL_CAUSE * t for v, t in zip(secs(c), steps))]
    small = [c for c in order if c not in big and any(v > 0 for v in secs(c))]
    out = []
    extra = iter(_OTHER_COLORS)
    for c in big:
        out.append((LABELS.get(c, c.replace("_", " ")), _CAUSE_COLORS.get(c) or next(extra, "#999999"), secs(c)))
    if small:
        total = [sum(vs) for vs in zip(*(secs(c) for c in small))]
        names = ", ".join(c.replace("_", " ") for c in small)
        out.append((f"other, under {SMALL_CAUSE:.1%} of the step each ({names})", "#c9b3e6", total))
    return out


def compare_figure(out: dict):
    """`planner compare --plot`: per hardware, the whole cluster's tokens/s (its GPU count, tokens/s
    per GPU and MFU on the bar), the best plan's step time by cause (every cause, host time
    included), peak memory against capacity, and the days and cost to train the token budget. A
    hardware with no plan keeps its place on the axis and says why not."""
    plt = _plt()
    entries = out["hardware"]
    names = [e["hardware"]["name"] for e in entries]
    x = np.arange(len(names))
    ok = [e["status"] == "ok" for e in entries]
    job_gpus = out["job"]["gpus"]
    counts = [e.get("gpus", job_gpus) for e in entries]
    fig, grid = plt.subplots(2, 2, figsize=(15, 10.5), dpi=110, layout="constrained")
    axes = grid.ravel()

    def no_plan(ax, i, e):
        ax.text(i, 0, "nothing fits" if e["status"] == "nothing_fits" else "invalid", rotation=90, ha="center",
                va="bottom", fontsize=8, color="crimson")

    ax = axes[0]
    cluster = [(e["summary"].get("tokens_per_s_cluster", e["summary"]["tokens_per_s_per_gpu"] * n) if k else 0.0)
               for e, k, n in zip(entries, ok, counts)]
    ax.bar(x, np.array(cluster) / 1e3, color="#4c72b0")
    for i, (e, k) in enumerate(zip(entries, ok)):
        if k:
            s = e["summary"]
            d = s["degrees"]
            deg = " ".join(f"{n.upper()}{d[n]}" for n in ("tp", "cp", "pp", "ep") if n in d and d[n] > 1) or "DP"
            ax.annotate(f"{counts[i]:,} GPUs x {s['tokens_per_s_per_gpu']:,.0f}\nMFU {s['mfu']:.0%}, {deg}",
                        (i, cluster[i] / 1e3), ha="center", va="bottom", fontsize=7, xytext=(0, 2),
                        textcoords="offset points")
        else:
            no_plan(ax, i, e)
    ax.set_ylabel("thousand tokens/s, whole cluster")
    ax.set_title("cluster throughput of the best plan (GPUs x tokens/s per GPU)", fontsize=10)
    ax.set_ylim(0, max(cluster + [1.0]) / 1e3 * 1.3)
    ax = axes[1]
    bottom = np.zeros(len(entries))
    for label, color, secs in step_segments(entries):
        v = np.array(secs)
        ax.bar(x, v, bottom=bottom, color=color, label=label)
        bottom += v
    ax.set_ylabel("seconds per step (critical path)")
    ax.set_title("step time by cause (every cause, host time included)", fontsize=10)
    ax = axes[2]
    cap = [e["hardware"]["hbm_usable_bytes"] / GiB for e in entries]
    peak = [e["summary"]["peak_bytes"] / GiB if k else 0.0 for e, k in zip(entries, ok)]
    capacity = [e["summary"]["capacity_bytes"] / GiB if k else c for e, k, c in zip(entries, ok, cap)]
    ax.bar(x - 0.2, peak, width=0.4, color="#1b9e77", label="peak memory (worst stage, reserved estimate)")
    ax.bar(x + 0.2, capacity, width=0.4, color="#cccccc", label="memory capacity")
    ax.set_ylabel("GiB (2^30 bytes) per GPU")
    ax.set_title("memory", fontsize=10)
    ax = axes[3]
    days = [e["summary"]["days"] if k else 0.0 for e, k in zip(entries, ok)]
    ax.bar(x, days, color="#8172b2")
    estimate = False
    for i, (e, k) in enumerate(zip(entries, ok)):
        if not k:
            no_plan(ax, i, e)
            continue
        c = e["summary"].get("cost")
        text = f"{e['summary']['gpu_hours'] / 1e6:.2f}M GPU-h"
        if c:
            estimate = estimate or c["estimate"]
            text += f"\n${c['usd_per_run'] / 1e6:,.2f}M, ${c['usd_per_million_tokens']:.3g}/M tok"
        ax.annotate(text, (i, days[i]), ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    tb = out["token_budget"]["tokens"]
    ax.set_ylabel("days")
    ax.set_title(f"time and cost to train {tb / 1e12:g}T tokens" + (" (USD: list-price estimates)" if estimate else ""),
                 fontsize=10)
    ax.set_ylim(0, max(days + [1.0]) * 1.3)
    for a in axes:
        a.set_xticks(x)
        a.set_xticklabels([f"{n}\n{c:,} GPUs" for n, c in zip(names, counts)], fontsize=8)
        a.grid(axis="y", alpha=0.3)
    j = out["job"]
    who = f"{j['gpus']:,} GPUs" if len(set(counts)) == 1 else "GPUs per system as labelled"
    fig.suptitle(f"{out['model']['name']}: {who}, global batch {j['global_batch']:,} x seq {j['seq_len']:,}",
                 fontsize=11)
    # One legend for the step-time causes and the memory bars, under the panels at a readable size.
    handles, labels = [], []
    for a in (axes[1], axes[2]):
        h, lab = a.get_legend_handles_labels()
        handles += h
        labels += lab
    # Two columns: the labels name whole causes ("host-bound issue (the GPU waits for ...)").
    fig.legend(handles, labels, loc="outside lower center", ncol=min(2, max(len(labels), 1)), fontsize=9,
               frameon=False)
    return fig


def plot_compare(out: dict, path: Path) -> Path:
    """Write `planner compare --plot`'s PNG (:func:`compare_figure`)."""
    return save_figure(compare_figure(out), path)




def plot_sweep(out: dict, path: Path) -> Path:
    """`planner compare --sweep-gpus --plot`: tokens/s per GPU against the GPU count per hardware,
    and the chosen PP and EP (or TP for dense models) degrees."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), dpi=110)
    moe = any("ep" in r.get("summary", {}).get("degrees", {}) for r in out["rows"])
    second = "ep" if moe else "tp"
    markers = "osD^v<>px*"
    for i, h in enumerate(out["hardware"]):
        rows = [r for r in out["rows"] if r["hardware"] == h["name"] and r["status"] == "ok"]
        if not rows:
            continue
        g = [r["gpus"] for r in rows]
        kw = dict(marker=markers[i % len(markers)], label=h["name"])
        axes[0].plot(g, [r["summary"]["tokens_per_s_per_gpu"] for r in rows], **kw)
        # Degrees of different hardware often coincide: nudge each line a little (multiplicative,
        # on the log axis) so that none hides another.
        nudge = 1 + 0.04 * (i - (len(out["hardware"]) - 1) / 2)
        axes[1].plot(g, [r["summary"]["degrees"].get("pp", 1) * nudge for r in rows], **kw)
        axes[2].plot(g, [r["summary"]["degrees"].get(second, 1) * nudge for r in rows], **kw)
    titles = ("tokens/s per GPU of the best plan", "pipeline-parallel degree chosen",
              f"{'expert' if moe else 'tensor'}-parallel degree chosen")
    for a, t in zip(axes, titles):
        a.set_xscale("log", base=2)
        a.set_xticks(out["gpus"])
        a.set_xticklabels([f"{n:,}" for n in out["gpus"]], fontsize=8)
        a.set_xlabel("GPUs")
        a.set_title(t, fontsize=10)
        a.grid(alpha=0.3)
    from matplotlib.ticker import FixedLocator, NullLocator  # noqa: PLC0415  # start-up, as _plt()

    for a, key in ((axes[1], "pp"), (axes[2], second)):
        vals = [r["summary"]["degrees"].get(key, 1) for r in out["rows"] if r["status"] == "ok"] or [1]
        top = max(vals)
        ticks = [2**k for k in range(0, top.bit_length() + 1)]
        a.set_yscale("log", base=2)
        a.yaxis.set_major_locator(FixedLocator(ticks))
        a.yaxis.set_minor_locator(NullLocator())
        a.set_yticklabels([str(t) for t in ticks])
        a.set_ylim(0.8, ticks[-1] * 1.25)
    axes[0].set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{out['model']['name']}: the best plan against scale (lines nudged apart where degrees coincide)",
                 fontsize=11)
    fig.tight_layout()
    path = save_figure(fig, path)
    return path
