"""The analysis end to end: the JSON object (``--json``) and the human report.

The JSON object is deterministic (no wall-clock values; lists in a defined order) so the same
snapshot gives the same bytes. Bytes are ints, times seconds from the first recorded event.

- ``snapshot``: path, layout, device, streams, trace size, ``window`` (what was live before the
  trace started), ``allocator_settings`` as recorded;
- ``timeline``: allocated and reserved peaks (with their states), start, end, the dump-time check
  (``dump.reconciled``), segment allocations/releases, ``oom_events``;
- ``peak``: the moment allocated peaks, its ``phase`` and annotated ``annotations`` regions,
  ``components`` by class (weights, gradients, optimizer, activations, transient, comm_buffers,
  unknown; they sum to ``allocated_bytes``), ``lifetimes``, ``evidence`` (bytes per class per
  kind of evidence), ``top_allocations``;
- ``allocator_at_peak``: reserved − allocated, segments, free blocks and the largest,
  ``free_bytes_by_stream``;
- ``diagnosis``: ``case`` (A, B, fits or unknown), ``capacity_bytes`` and its source, the
  critical ``moment``, ``gap_bytes`` and its ``gap_shares``, ``causes`` with evidence and
  remedies, ``largest_class_at_peak``, ``advice``, ``summary``;
- ``prediction`` (with --model/--hw/--plan): rows of predicted vs measured bytes per class, or
  ``available: false`` and the reason;
- ``notes``, ``planner_version``, and ``plot`` when a PNG was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from planner import __version__
from planner.memtrace import CLASSES
from planner.memtrace.classify import (
    EVIDENCE,
    LIFETIMES,
    TRANSIENT_MAX_ALLOCS,
    Classification,
    classify,
    components_at,
    peak_phase,
    where_of,
)
from planner.memtrace.diagnose import diagnose, peak_gap
from planner.memtrace.loader import Snapshot
from planner.memtrace.timeline import SEG_ALLOC, SEG_FREE, Timeline, build_timeline, choose_device, layout_at
from planner.units import GiB, fmt_gib


@dataclass
class Analysis:
    timeline: Timeline
    classification: Classification
    report: dict


def analyze(
    snap: Snapshot,
    *,
    source: str = "snapshot",
    device: int | None = None,
    capacity_bytes: float | None = None,
    fallback_capacity: tuple[float, str] | None = None,
    transient_max_allocs: int = TRANSIENT_MAX_ALLOCS,
    top: int = 10,
) -> Analysis:
    """Timeline, peak decomposition, allocator state and diagnosis of one device."""
    dev = choose_device(snap, device)
    tl = build_timeline(snap, dev)
    cl = classify(tl, transient_max_allocs)
    peak_state = int(np.argmax(tl.allocated))
    comps = components_at(tl, cl, peak_state)
    report = {
        "planner_version": __version__,
        "snapshot": _snapshot_info(snap, tl, source),
        "timeline": _timeline_info(tl),
        "peak": _peak_info(tl, cl, peak_state, comps, top, snap.annotations),
        "allocator_at_peak": allocator_state(tl, cl, peak_state),
        "diagnosis": diagnose(tl, cl, comps["components"], capacity_bytes=capacity_bytes,
                              fallback_capacity=fallback_capacity),
        "notes": list(tl.notes),
    }
    report["notes"].append(
        "Bytes are the sizes callers requested (what the trace records); the allocator's rounding shows "
        "as a little reserved-but-free space. NCCL's own buffers and the CUDA context are not in a snapshot."
    )
    return Analysis(tl, cl, report)


def _time_s(tl: Timeline, state: int) -> float | None:
    return None if tl.time_us is None else round(float(tl.time_us[state]) / 1e6, 6)


def _plain(v: Any) -> Any:
    """JSON-safe copy of allocator settings (tuples to lists, keys to str, odd values to str)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _snapshot_info(snap: Snapshot, tl: Timeline, source: str) -> dict:
    return {
        "path": source,
        "layout": snap.layout,
        "device": tl.device,
        "devices_with_data": snap.devices(),
        "trace_events": tl.n_events,
        "has_timestamps": tl.time_us is not None,
        "duration_s": _time_s(tl, tl.n_states - 1) if tl.n_events else None,
        "window": tl.window,
        "allocator_settings": _plain(snap.allocator_settings),
        "streams": [int(s) for s in tl.streams],
    }


def _timeline_info(tl: Timeline) -> dict:
    ap, rp = int(np.argmax(tl.allocated)), int(np.argmax(tl.reserved))
    return {
        "states": tl.n_states,
        "allocated_peak_bytes": int(tl.allocated[ap]),
        "allocated_peak_state": ap,
        "reserved_peak_bytes": int(tl.reserved[rp]),
        "reserved_peak_state": rp,
        # Comparable with explain's allocator_holding_bytes / case_b.gap_bytes (the same function).
        "peak_gap": peak_gap(int(tl.reserved[rp]), int(tl.allocated[ap])),
        "start": {"allocated_bytes": int(tl.allocated[0]), "reserved_bytes": int(tl.reserved[0])},
        "end": {"allocated_bytes": int(tl.allocated[-1]), "reserved_bytes": int(tl.reserved[-1])},
        "dump": tl.dump,
        "segment_allocs": int((tl.codes == SEG_ALLOC).sum()),
        "segment_frees": int((tl.codes == SEG_FREE).sum()),
        "oom_events": [
            {
                "event": o["event"],
                "time_s": _time_s(tl, o["event"] + 1),
                "request_bytes": int(o["size"]),
                "device_free_bytes": int(o["device_free"]),
                "allocated_bytes": int(tl.allocated[o["event"] + 1]),
                "reserved_bytes": int(tl.reserved[o["event"] + 1]),
                "stream": int(o["stream"]),
            }
            for o in tl.ooms
        ],
    }


def annotations_at(annotations: list[dict], device: int, t_us: int) -> dict:
    """Annotated regions (START/END pairs) open at ``t_us``, and how many of each ended before."""
    opened: dict[str, int] = {}
    done: dict[str, int] = {}
    for a in sorted((a for a in annotations if a["device"] == device), key=lambda a: a["time_us"]):
        if a["time_us"] > t_us:
            break
        if a["stage"] == "START":
            opened[a["name"]] = opened.get(a["name"], 0) + 1
        else:
            opened[a["name"]] = max(opened.get(a["name"], 0) - 1, 0)
            done[a["name"]] = done.get(a["name"], 0) + 1
    return {"open": sorted(k for k, v in opened.items() if v), "completed_before": dict(sorted(done.items()))}


def _peak_info(tl: Timeline, cl: Classification, state: int, comps: dict, top: int, annotations: list[dict]) -> dict:
    live = tl.live_allocs(state)
    a = tl.allocs
    order = live[np.lexsort((live, -a.size[live]))][:top]
    tops = [
        {
            "bytes": int(a.size[r]),
            "class": CLASSES[cl.cls[r]],
            "lifetime": LIFETIMES[cl.lifetime[r]],
            "evidence": EVIDENCE[cl.evidence[r]],
            "stream": int(tl.streams[a.stream[r]]),
            "allocated_at_event": int(a.event[r]) if a.event[r] >= 0 else None,
            "where": where_of(tl.alloc_frames[r]),
        }
        for r in order
    ]
    regions = None
    phase = peak_phase(tl, cl, state)
    if annotations and tl.time_origin_us is not None:
        regions = annotations_at(annotations, tl.device, tl.time_origin_us + int(tl.time_us[state]))
        if any("optimizer" in r.lower() for r in regions["open"]):
            phase = "optimizer"  # inside an annotated Optimizer.step, whatever the stacks say
    return {
        "state": state,
        "event": state - 1 if state else None,
        "time_s": _time_s(tl, state),
        "phase": phase,
        "annotations": regions,
        "allocated_bytes": int(tl.allocated[state]),
        "reserved_bytes": int(tl.reserved[state]),
        "allocations": int(len(live)),
        "components": comps["components"],
        "lifetimes": comps["lifetimes"],
        "evidence": comps["evidence"],
        "top_allocations": tops,
        "classification": {"main_stream": int(tl.streams[cl.main_stream]) if tl.streams else 0,
                           "transient_max_allocs": cl.transient_max_allocs},
    }


def allocator_state(tl: Timeline, cl: Classification, state: int) -> dict:
    lay = layout_at(tl, state, cl.transient_mask)
    by_stream = np.bincount(lay.seg_stream, weights=lay.seg_free, minlength=len(tl.streams)) if len(lay.seg_size) else []
    present = set(int(s) for s in lay.seg_stream)
    return {
        "state": state,
        "reserved_minus_allocated_bytes": int(tl.reserved[state] - tl.allocated[state]),
        "segments": int(len(lay.seg_size)),
        "largest_free_block_bytes": int(lay.gap_sizes.max()) if len(lay.gap_sizes) else 0,
        "free_blocks": int(len(lay.gap_sizes)),
        "free_bytes_by_stream": {str(tl.streams[i]): int(by_stream[i]) for i in sorted(present)},
        "awaiting_free_bytes": lay.pending_bytes,
        "unplaced_allocated_bytes": lay.orphan_bytes,
    }


# ---- human report ----------------------------------------------------------------------------


def _g(n: float | None) -> str:
    return "-" if n is None else f"{n / GiB:8.2f}"


def _stream_label(s: str, main: str) -> str:
    tag = " (default)" if s == "0" else ""
    return f"stream {s}{tag}" + (" [main]" if s == main else "")


def render_text(rep: dict) -> str:
    """The report for a terminal: sections in the order an engineer reads them."""
    out: list[str] = []
    s, t, p, al, d = rep["snapshot"], rep["timeline"], rep["peak"], rep["allocator_at_peak"], rep["diagnosis"]
    span = f" over {s['duration_s']:.3f} s" if s.get("duration_s") else ""
    out.append(f"Snapshot {s['path']}: device {s['device']}, {s['trace_events']:,} trace events{span} ({s['layout']} layout).")
    out.append(
        f"Timeline: allocated peaks at {fmt_gib(t['allocated_peak_bytes'], 2)} (state {t['allocated_peak_state']:,}), "
        f"reserved at {fmt_gib(t['reserved_peak_bytes'], 2)}; at the dump {fmt_gib(t['end']['allocated_bytes'], 2)} "
        f"allocated, {fmt_gib(t['end']['reserved_bytes'], 2)} reserved; {t['segment_allocs']} segment allocations, "
        f"{t['segment_frees']} releases."
    )
    for o in t["oom_events"]:
        out.append(
            f"OOM at event {o['event']:,}: {fmt_gib(o['request_bytes'], 2)} requested with {fmt_gib(o['allocated_bytes'], 2)} "
            f"allocated, {fmt_gib(o['reserved_bytes'], 2)} reserved, {fmt_gib(o['device_free_bytes'], 2)} free in CUDA."
        )
    when = f", t = {p['time_s']:.3f} s" if p.get("time_s") is not None else ""
    out.append("")
    regions = ""
    if p.get("annotations"):
        inside = ", ".join(p["annotations"]["open"])
        done = ", ".join(f"{v} x {k}" for k, v in p["annotations"]["completed_before"].items())
        regions = (f" (inside {inside})" if inside else "") + (f", after {done}" if done else "")
    out.append(f"Peak: {fmt_gib(p['allocated_bytes'], 2)} allocated at state {p['state']:,}{when}, phase {p['phase']}"
               f"{regions}; {p['allocations']:,} live allocations.")
    out.append(f"  {'class':<13} {'GiB':>8} {'share':>6}  evidence")
    total = p["allocated_bytes"] or 1
    for c in CLASSES:
        b = p["components"][c]
        ev = ", ".join(f"{k} {fmt_gib(v, 2)}" for k, v in sorted(p["evidence"].get(c, {}).items()))
        out.append(f"  {c:<13} {_g(b)} {100 * b / total:5.1f}%  {ev}")
    out.append(f"  {'sum':<13} {_g(sum(p['components'].values()))} 100.0%")
    lt = ", ".join(f"{k} {fmt_gib(v, 2)}" for k, v in p["lifetimes"].items())
    out.append(f"  by lifetime: {lt}")
    if p["top_allocations"]:
        out.append("  largest live allocations:")
        for a in p["top_allocations"][:5]:
            out.append(f"    {_g(a['bytes'])} GiB  {a['class']:<12} {a['lifetime']:<9} {a['where'] or '(no stack)'}")
    out.append("")
    main = str(next(c for c in d["causes"] if c["cause"] == "stream_split")["evidence"]["pool_stream"])
    pools = "; ".join(f"{_stream_label(k, main)} {fmt_gib(v, 2)}" for k, v in al["free_bytes_by_stream"].items()) or "none"
    out.append(
        f"Allocator at the peak: reserved - allocated {fmt_gib(al['reserved_minus_allocated_bytes'], 2)}; "
        f"{al['segments']} segments; {al['free_blocks']} free blocks, the largest {fmt_gib(al['largest_free_block_bytes'], 2)}; "
        f"free per stream pool: {pools}."
    )
    out.append("")
    cap = f"{fmt_gib(d['capacity_bytes'], 2)} ({d['capacity_source']})" if d["capacity_bytes"] else "unknown"
    out.append(f"Diagnosis: {d['summary']}")
    out.append(f"  limit {cap}; " + "; ".join(d["reasons"]))
    if d["gap_bytes"] > 0:
        sh = ", ".join(f"{k.replace('_', ' ')} {fmt_gib(v, 2)}" for k, v in d["gap_shares"].items())
        out.append(f"  reserved-but-free {fmt_gib(d['gap_bytes'], 2)} splits into: {sh}")
    for c in d["causes"]:
        if c["present"]:
            out.append(f"  cause: {c['cause'].replace('_', ' ')} ({fmt_gib(c['bytes'], 2)}) - {_cause_line(c)}")
    for a in d["advice"]:
        out.append(f"  - {a}")
    pred = rep.get("prediction")
    if pred is not None:
        out.append("")
        if not pred.get("available"):
            out.append(pred["reason"][:1].upper() + pred["reason"][1:] + ".")
        else:
            out.append(f"Prediction vs measurement ({pred['stage_label']}), GiB:")
            out.append(f"  {'class':<16} {'predicted':>9} {'measured':>9} {'delta':>9}")
            for r in pred["rows"] + [pred["total"]]:
                out.append(f"  {r['class']:<16} {_g(r['predicted_bytes']):>9} {_g(r['measured_bytes']):>9} {_g(r['delta_bytes']):>9}")
            for n in pred["notes"]:
                out.append(f"  note: {n}")
    if rep["notes"]:
        out.append("")
        out.extend(f"Note: {n}" for n in rep["notes"])
    return "\n".join(out)


def _cause_line(c: dict) -> str:
    e = c["evidence"]
    if c["cause"] == "staircase":
        return (f"{e['steps_from_transients']} reserved steps came from transient allocations, {e['steps_still_reserved']} "
                f"still reserved ({fmt_gib(e['bytes_still_reserved'], 2)}); {e['segment_releases_before_moment']} segments released")
    if c["cause"] == "fragmentation":
        return (f"{e['free_blocks_in_partial_segments']} free blocks in partially used segments, "
                f"{e['distinct_free_block_sizes']} distinct sizes (MiB), the largest {fmt_gib(e['largest_free_block_bytes'], 2)}; "
                f"{e['distinct_freed_sizes']} distinct sizes among the {e['freed_allocations']} allocations freed in the window")
    return (f"{fmt_gib(e['free_bytes_other_pools'], 2)} free in other streams' pools, "
            f"{fmt_gib(e['awaiting_cross_stream_free_bytes'], 2)} awaiting cross-stream frees "
            f"(the pool in question: stream {e['pool_stream']})")
