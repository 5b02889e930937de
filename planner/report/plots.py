"""PNG figures (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

from planner.units import GiB


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    # Names and paths in titles are text, never mathtext: a '$' in a model name must not make
    # matplotlib parse (and fail on) a formula.
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, what: str = "plot") -> Path:
    """Write ``fig`` as a PNG through planner.files (atomic, never over an input), then close it."""
    from planner.files import write_with

    plt = _plt()
    try:
        write_with(path, what, lambda tmp: fig.savefig(tmp, format="png"), suffixes=(".png",))
    finally:
        plt.close(fig)
    return Path(path)


def plot_memory_timeline(setup, mem, path: Path) -> tuple[Path, float]:
    """Memory over one step for the worst stage: stacked by class (constant, communication
    buffers, activations, transient), the estimated reserved line, capacity, and the peak marked
    at the value the JSON reports as the worst stage's allocated peak. Returns the file and the
    marked value in bytes."""
    import numpy as np

    from planner.cost.timeline import stage_timeline

    plt = _plt()
    worst = mem.worst
    events = stage_timeline(setup, worst.rank)
    x = np.arange(len(events))
    const = np.array([e.constant for e in events]) / GiB
    comm = np.array([e.comm_buffers for e in events]) / GiB
    acts = np.array([e.activations for e in events]) / GiB
    trans = np.array([e.transient for e in events]) / GiB
    total = const + comm + acts + trans
    reserved_line = np.maximum.accumulate(total) * (1 + mem.allocator_fraction)
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=110)
    ax.stackplot(x, const, comm, acts, trans, labels=["constant (weights, grads, optimizer)", "communication buffers",
                                                       "activations", "transient"],
                 colors=["#4c72b0", "#8172b2", "#55a868", "#dd8452"], alpha=0.85, step="post")
    ax.plot(x, reserved_line, color="black", lw=1.2, label="reserved (estimate: running peak + allocator margin)")
    cap = mem.capacity_bytes / GiB
    ax.axhline(cap, color="red", ls="--", lw=1, label=f"capacity {cap:.1f} GiB")
    i = int(np.argmax(total))
    peak = worst.peak_bytes / GiB
    ax.plot([i], [peak], marker="v", color="crimson", ms=10, zorder=5)
    ax.annotate(f"peak {peak:.1f} GiB allocated\n{events[i].phase}, {events[i].layer}", (i, peak),
                textcoords="offset points", xytext=(10, 8), fontsize=9)
    ax.set_xlabel("events through one step (forward and backward layers in schedule order, then the optimizer)")
    ax.set_ylabel("GiB (2^30 bytes) per GPU")
    ax.set_title(f"{setup.model.name} on {setup.hw.name}: stage {worst.rank} of {setup.deg.pp}, plan {setup.plan.to_string()}",
                 fontsize=9)
    ax.set_ylim(0, max(cap, reserved_line.max()) * 1.08)
    ax.legend(loc="lower center", fontsize=8, framealpha=0.9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = save_figure(fig, path)
    return path, float(total[i] * GiB)


# Step-time causes in the order the compare figure stacks them (compute first, then what is
# exposed), each with a fixed colour so that figures of different runs read the same.
_CAUSE_COLORS = {
    "gemm": "#4c72b0", "attention": "#64b5cd", "memory_bound": "#8c8c8c", "recompute": "#937860",
    "tp": "#dd8452", "cp": "#da8bc3", "ep": "#c44e52", "etp": "#e17c05", "pp_p2p": "#8172b2",
    "pipeline_bubble": "#ccb974", "dp_grad": "#55a868", "dp_param": "#2ca02c", "fsdp": "#17becf",
    "optimizer": "#7f7f7f", "optimizer_offload": "#bcbd22", "activation_offload": "#9edae5",
}


def plot_compare(out: dict, path: Path) -> Path:
    """`planner compare --plot`: per hardware, tokens/s per GPU (MFU on the bar), the best plan's
    step time by cause, and peak memory against capacity. A hardware with no plan keeps its place
    on the axis and says why not."""
    import numpy as np

    from planner.cost.time import LABELS

    plt = _plt()
    entries = out["hardware"]
    names = [e["hardware"]["name"] for e in entries]
    x = np.arange(len(names))
    ok = [e["status"] == "ok" for e in entries]
    fig, axes = plt.subplots(1, 3, figsize=(15, 6.4), dpi=110)
    ax = axes[0]
    tps = [e["summary"]["tokens_per_s_per_gpu"] if k else 0.0 for e, k in zip(entries, ok)]
    bars = ax.bar(x, tps, color="#4c72b0")
    for i, (e, k) in enumerate(zip(entries, ok)):
        if k:
            s = e["summary"]
            d = s["degrees"]
            deg = " ".join(f"{n.upper()}{d[n]}" for n in ("tp", "cp", "pp", "ep") if n in d and d[n] > 1) or "DP"
            ax.annotate(f"MFU {s['mfu']:.0%}\n{deg}", (i, tps[i]), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 2), textcoords="offset points")
        else:
            ax.text(i, 0, "nothing fits" if e["status"] == "nothing_fits" else "invalid", rotation=90, ha="center",
                    va="bottom", fontsize=8, color="crimson")
    ax.set_ylabel("tokens/s per GPU")
    ax.set_title("throughput of the best plan", fontsize=10)
    ax.set_ylim(0, max(tps + [1.0]) * 1.25)
    del bars
    ax = axes[1]
    # Causes under half a percent of every step would only crowd the legend.
    causes = [c for c in _CAUSE_COLORS
              if any(k and e["summary"]["breakdown"].get(c, 0) > 0.005 * e["summary"]["step_time_s"]
                     for e, k in zip(entries, ok))]
    bottom = np.zeros(len(entries))
    for c in causes:
        v = np.array([e["summary"]["breakdown"].get(c, 0.0) if k else 0.0 for e, k in zip(entries, ok)])
        ax.bar(x, v, bottom=bottom, color=_CAUSE_COLORS[c], label=LABELS.get(c, c))
        bottom += v
    ax.set_ylabel("seconds per step (critical path)")
    ax.set_title("step time by cause", fontsize=10)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax = axes[2]
    cap = [e["hardware"]["hbm_usable_bytes"] / GiB for e in entries]
    peak = [e["summary"]["peak_bytes"] / GiB if k else 0.0 for e, k in zip(entries, ok)]
    capacity = [e["summary"]["capacity_bytes"] / GiB if k else c for e, k, c in zip(entries, ok, cap)]
    ax.bar(x - 0.2, peak, width=0.4, color="#55a868", label="peak (worst stage, reserved estimate)")
    ax.bar(x + 0.2, capacity, width=0.4, color="#cccccc", label="capacity")
    ax.set_ylabel("GiB (2^30 bytes) per GPU")
    ax.set_title("memory", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    for a in axes:
        a.set_xticks(x)
        a.set_xticklabels(names, rotation=20, fontsize=8)
        a.grid(axis="y", alpha=0.3)
    j = out["job"]
    fig.suptitle(f"{out['model']['name']}: {j['gpus']:,} GPUs, global batch {j['global_batch']:,} x seq {j['seq_len']:,}",
                 fontsize=11)
    fig.tight_layout()
    path = save_figure(fig, path)
    return path


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
    from matplotlib.ticker import FixedLocator, NullLocator

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
