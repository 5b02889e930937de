"""PNG figures (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

from planner.units import GiB


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path, float(total[i] * GiB)
