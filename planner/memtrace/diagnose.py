"""Case A or case B, and why (the seed article, section 04.3).

*Case A*: reserved and allocated are both near the limit. The bytes are really used; the fix is to
shrink the largest class at the peak (recompute only helps when that class is activations).

*Case B*: reserved is at the limit but allocated is several GB lower. Reserved was inflated by:

- a **staircase** of transient peaks: a short-lived allocation found no free block and got a new
  segment; the segment stays cached (the caching allocator returns a segment only when all of it is
  free) and later long-lived blocks split it, so reserved rises in steps and never falls. Measured
  as the free bytes, at the critical moment, in segments that a transient allocation caused;
- **shape-churn fragmentation**: many free blocks of varied sizes in partially used segments, none
  large enough for the request. Measured as the remaining free bytes in partially used segments of
  the main stream's pool;
- a **stream-pool split**: a pool serves one stream only, so free bytes in another stream's
  segments (and blocks awaiting a cross-stream free) cannot serve the main stream. Measured as the
  free bytes outside the pool in question: the failing request's stream at an OOM, else the main
  stream (the one with the most allocations).

The four shares (the three causes plus idle whole segments of the main pool) partition the gap
reserved − allocated at the critical moment: the first OOM event if the trace has one, else the
moment reserved peaks (the one with the most allocated, if reserved stays at its peak).
Recomputation does not help case B: it shrinks allocated, which is not what binds.
"""

from __future__ import annotations

import numpy as np

from planner.memtrace.classify import Classification
from planner.memtrace.timeline import Layout, Timeline, layout_at
from planner.units import fmt_gib

NEAR_LIMIT = 0.05
"""Reserved within this fraction of the limit counts as 'at the limit'."""
GAP_B = 0.05
"""Reserved − allocated of at least this fraction of the limit is 'several GB' (4 GB of 80)."""
CAUSE_SHARE = 0.2
"""A cause is reported as present when it holds at least this share of the gap."""
SEGMENT_ROUNDING = 20 << 20
"""The most a new segment exceeds the request that needs it (1-10 MiB requests get 20 MiB)."""
MIN_FREE_BLOCKS = 3
"""Fragmentation needs several free blocks, not one hole."""

REMEDIES = {
    "staircase": [
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow and shrink by mapping pages, so a "
        "transient spike no longer leaves a whole segment behind",
        "shrink the spikes with fused kernels (flash attention, fused cross-entropy over the vocabulary, "
        "fused MoE permute/unpermute, grouped GEMM) so their intermediates stay in SRAM",
        "cap cuBLAS workspaces with CUBLAS_WORKSPACE_CONFIG=:4096:8 (a few GiB across many handles)",
    ],
    "fragmentation": [
        "keep shapes fixed: pad or bucket sequence lengths, pack sequences, pad MoE expert inputs to a capacity",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb so large cached blocks are "
        "not split by small requests; garbage_collection_threshold to return cached blocks earlier)",
        "torch.cuda.empty_cache() only returns whole free segments; it does not defragment",
    ],
    "stream_split": [
        "keep communication on the main stream where there is little to overlap: its buffers then come "
        "from the main pool and the pool does not split",
        "allocate communication buffers once at start-up and reuse them (NCCL buffer registration, fixed "
        "bucket sizes) instead of allocating on the comm stream every step",
        "check record_stream uses: a block used by another stream waits for that stream before it is free",
    ],
}

CLASS_REMEDIES = {
    "weights": "shard the weights further (more TP/PP/EP, FSDP/ZeRO-3) or keep FP8 primary weights",
    "gradients": "shard the gradients (distributed optimizer / ZeRO-2, FSDP) or use BF16 gradient buffers",
    "optimizer": "shard the optimizer states over more data-parallel ranks (distributed optimizer), use "
    "BF16 moments, or offload the optimizer to the host",
    "activations": "recompute (selective modules or full layers), store activations in FP8, offload them, or "
    "split them with more TP (with SP) or CP; fewer micro-batches in flight on the first pipeline stage",
    "transient": "use fused kernels for the largest transient (attention, cross-entropy, MoE permute), a smaller "
    "micro-batch, or a capped CUBLAS_WORKSPACE_CONFIG",
    "comm_buffers": "smaller NCCL buffers (NCCL_BUFFSIZE, fewer channels), smaller gradient buckets, fewer "
    "communicators, symmetric-memory all-to-all (DeepEP) instead of staging copies",
    "unknown": "record stacks so the peak can be attributed: _record_memory_history(context='all', "
    "stacks='python')",
}


def peak_gap(reserved_peak: float, allocated_peak: float) -> dict:
    """What the caching allocator holds beyond what is allocated, over a step: the reserved peak
    less the allocated peak (each the step's own maximum; the two need not fall at the same
    moment) and its share of the reserved peak. The one formula for both sides of issue 41's
    comparison: memtrace's timeline (a snapshot) and explain's reserved breakdown and case B (a
    prediction, planner.cost.memory), so the two read the same quantity."""
    gap = reserved_peak - allocated_peak
    return {"gap_bytes": round(gap), "gap_share_of_reserved": round(gap / reserved_peak, 4) if reserved_peak else 0.0}


def process_limited(oom: dict) -> bool:
    """CUDA still had room for the request, so a per-process limit refused it
    (set_per_process_memory_fraction, or an allocator limit), not the device. The margin covers
    the segment rounding (a request may need a 20 MiB segment)."""
    return oom["device_free"] >= oom["size"] + SEGMENT_ROUNDING


def resolve_limit(tl: Timeline, capacity_bytes: float | None, fallback: tuple[float, str] | None) -> tuple[int | None, str]:
    """The memory limit and where it comes from: --capacity; else the first OOM event (what was
    reserved then plus what CUDA reported free, or, when CUDA had room, reserved plus the request,
    the per-process limit lying within one segment below that); else the hardware spec; else
    unknown."""
    if capacity_bytes is not None:
        return int(capacity_bytes), "--capacity"
    if tl.ooms:
        o = tl.ooms[0]
        reserved = int(tl.reserved[o["event"] + 1])
        if process_limited(o):
            return reserved + int(o["size"]), "first OOM event (CUDA had room: a per-process limit; reserved + request)"
        return reserved + int(o["device_free"]), "first OOM event (reserved + CUDA free)"
    if fallback is not None:
        return int(fallback[0]), fallback[1]
    return None, "unknown"


def critical_moment(tl: Timeline) -> dict:
    """The first OOM event if any, else the reserved peak (the state there with the most allocated)."""
    if tl.ooms:
        o = tl.ooms[0]
        state = o["event"] + 1
        return {"kind": "oom", "state": state, "event": o["event"], "request_bytes": int(o["size"]),
                "device_free_bytes": int(o["device_free"]), "process_limited": process_limited(o),
                "stream": o["stream"]}
    # Among the states where reserved is at its maximum, the one with the most allocated: the
    # tightest moment at the top, where "reserved inflated" must be judged.
    top = np.flatnonzero(tl.reserved == tl.reserved.max())
    state = int(top[np.argmax(tl.allocated[top])])
    return {"kind": "reserved_peak", "state": state, "event": state - 1 if state else None}


def gap_shares(lay: Layout, pool_stream: int) -> dict:
    """Split reserved − allocated at a moment into the causes (bytes)."""
    free = lay.seg_free
    main = lay.seg_stream == pool_stream
    partial = main & (lay.seg_used > 0)
    share = lay.seg_transient_share
    other = int(free[~main].sum())
    return {
        "stream_split": other + lay.pending_bytes,
        "staircase": int(np.rint((free * share)[main].sum())),
        "fragmentation": int(np.rint((free * (1 - share))[partial].sum())),
        "idle_segments": int(np.rint((free * (1 - share))[main & (lay.seg_used == 0)].sum())),
    }


def _staircase_evidence(tl: Timeline, cl: Classification, state: int) -> dict:
    s = tl.segs
    made = np.flatnonzero((s.event >= 0) & (s.event < state))
    trig = tl.seg_trigger[made]
    hit = np.zeros(len(made), dtype=bool)
    hit[trig >= 0] = cl.transient_mask[trig[trig >= 0]]
    by_transient = made[hit]
    kept = by_transient[s.end[by_transient] > state]
    return {
        "steps_from_transients": int(len(by_transient)),
        "steps_still_reserved": int(len(kept)),
        "bytes_still_reserved": int(s.size[kept].sum()),
        "segment_releases_before_moment": int((s.end <= state).sum()),
    }


def _fragmentation_evidence(tl: Timeline, lay: Layout, pool_stream: int) -> dict:
    main_segs = np.flatnonzero((lay.seg_stream == pool_stream) & (lay.seg_used > 0))
    in_partial = np.isin(lay.gap_seg, main_segs)
    gaps = lay.gap_sizes[in_partial]
    a = tl.allocs
    # Shape churn shows as many distinct sizes among the allocations that come and go.
    churn = (a.event >= 0) & (a.end <= tl.n_events)
    return {
        "free_blocks_in_partial_segments": int(len(gaps)),
        "distinct_free_block_sizes": int(len(np.unique(gaps // (1 << 20)))) if len(gaps) else 0,
        "largest_free_block_bytes": int(gaps.max()) if len(gaps) else 0,
        "free_bytes_in_partial_segments": int(gaps.sum()),
        "freed_allocations": int(churn.sum()),
        "distinct_freed_sizes": int(len(np.unique(a.size[churn]))),
    }


def diagnose(
    tl: Timeline,
    cl: Classification,
    peak_components: dict,
    *,
    capacity_bytes: float | None = None,
    fallback_capacity: tuple[float, str] | None = None,
) -> dict:
    """The diagnosis object of the report (see the module docstring for the rules)."""
    limit, source = resolve_limit(tl, capacity_bytes, fallback_capacity)
    crit = critical_moment(tl)
    st = crit["state"]
    reserved, allocated = int(tl.reserved[st]), int(tl.allocated[st])
    pool = cl.main_stream
    if crit["kind"] == "oom" and crit["stream"] in tl.streams:
        pool = tl.streams.index(crit["stream"])  # the pool the failing request was served from
    gap = reserved - allocated
    lay = layout_at(tl, st, cl.transient_mask)
    shares = gap_shares(lay, pool)
    # Causes must matter against the limit (1% of it); with no limit, against what was reserved,
    # as much as case B's gap would (5%), so a healthy run's crumbs are not called causes.
    min_bytes = 0.01 * limit if limit else GAP_B * reserved

    evidence = {
        "staircase": _staircase_evidence(tl, cl, st),
        "fragmentation": _fragmentation_evidence(tl, lay, pool),
        "stream_split": {
            "pool_stream": tl.streams[pool] if tl.streams else 0,
            "free_bytes_other_pools": shares["stream_split"] - lay.pending_bytes,
            "awaiting_cross_stream_free_bytes": lay.pending_bytes,
        },
    }
    causes = []
    for name in ("staircase", "fragmentation", "stream_split"):
        b = shares[name]
        present = gap > 0 and b >= CAUSE_SHARE * gap and b >= min_bytes
        if name == "staircase":
            present = present and evidence[name]["steps_from_transients"] > 0
        if name == "fragmentation":
            present = present and evidence[name]["free_blocks_in_partial_segments"] >= MIN_FREE_BLOCKS
        causes.append({"cause": name, "bytes": b, "present": bool(present), "evidence": evidence[name],
                       "remedies": REMEDIES[name] if present else []})
    causes.sort(key=lambda c: (-c["bytes"], c["cause"]))

    comps = {k: v for k, v in peak_components.items() if k != "unknown"}
    largest = max(comps, key=lambda k: (comps[k], k)) if any(comps.values()) else "unknown"
    if peak_components.get("unknown", 0) > comps.get(largest, 0):
        largest = "unknown"

    case, reasons = _case(crit, limit, reserved, allocated, gap)
    present = [c for c in causes if c["present"]]
    advice = _advice(case, largest, present, crit, limit, reserved, gap)
    return {
        "case": case,
        "reasons": reasons,
        "capacity_bytes": limit,
        "capacity_source": source,
        "moment": {k: v for k, v in crit.items() if k != "stream"} | {"time_s": _time_s(tl, st)},
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "gap_bytes": gap,
        "gap_shares": shares,
        "causes": causes,
        "largest_class_at_peak": largest,
        "advice": advice,
        "summary": _summary(case, largest, present, limit, reserved, allocated, gap, crit),
    }


def _time_s(tl: Timeline, state: int) -> float | None:
    return None if tl.time_us is None else round(float(tl.time_us[state]) / 1e6, 6)


def _case(crit: dict, limit, reserved: int, allocated: int, gap: int) -> tuple[str, list[str]]:
    if crit["kind"] == "oom":
        request = crit["request_bytes"]
        # Under a per-process limit the device's free memory was not the process's to take.
        can_use = gap + (0 if crit["process_limited"] else crit["device_free_bytes"])
        if request > can_use:
            return "A", [f"the failing request of {fmt_gib(request, 2)} exceeds everything it could use "
                         f"({fmt_gib(can_use, 2)} reserved-but-free and free under the limit): the bytes are really missing"]
        if limit and gap >= GAP_B * limit:
            return "B", [f"{fmt_gib(gap, 2)} was reserved but free when a {fmt_gib(request, 2)} request failed: "
                         "reserved is inflated, not used"]
        return "A", [f"reserved and allocated were within {fmt_gib(gap, 2)} of each other at the OOM"]
    if not limit:
        return "unknown", ["the limit is unknown (no OOM event; give --capacity GiB or --hw)"]
    if reserved < (1 - NEAR_LIMIT) * limit:
        return "fits", [f"reserved peaks at {fmt_gib(reserved, 2)}, {fmt_gib(limit - reserved, 2)} below the limit"]
    if gap >= GAP_B * limit:
        return "B", [f"reserved reaches {fmt_gib(reserved, 2)} of {fmt_gib(limit, 2)} while allocated peaks "
                     f"{fmt_gib(gap, 2)} lower"]
    return "A", [f"reserved ({fmt_gib(reserved, 2)}) and allocated ({fmt_gib(allocated, 2)}) are both near the "
                 f"{fmt_gib(limit, 2)} limit"]


def _advice(case: str, largest: str, present: list[dict], crit: dict, limit, reserved: int, gap: int) -> list[str]:
    if case == "A":
        out = [f"optimize the largest class at the peak, {largest}: {CLASS_REMEDIES[largest]}"]
        if largest != "activations":
            out.append("recompute helps only as far as activations are part of the peak")
        return out
    if case == "B":
        out = [r for c in present for r in c["remedies"]]
        if not present:
            out.append("the gap is in whole idle segments or spread thin; expandable_segments:True still applies")
        out.append("do not add recompute to fix this: it shrinks allocated, which is not what binds")
        return out
    if case == "fits":
        return [f"no action needed; the reserved-over-allocated gap is {fmt_gib(gap, 2)}"]
    return ["give --capacity GiB (or --hw) to tell case A from case B"] + [r for c in present for r in c["remedies"]]


def _summary(case, largest, present, limit, reserved, allocated, gap, crit) -> str:
    at = "at the OOM" if crit["kind"] == "oom" else "at the reserved peak"
    lim = f" of {fmt_gib(limit, 1)}" if limit else ""
    base = f"{at}: reserved {fmt_gib(reserved, 2)}{lim}, allocated {fmt_gib(allocated, 2)} (gap {fmt_gib(gap, 2)})"
    if case == "A":
        return f"Case A (memory really used) {base}; the largest class is {largest}."
    if case == "B":
        names = ", ".join(c["cause"].replace("_", " ") for c in present) or "no single cause"
        return f"Case B (reserved inflated) {base}; cause: {names}."
    if case == "fits":
        return f"Fits {base}."
    return f"Limit unknown {base}."
