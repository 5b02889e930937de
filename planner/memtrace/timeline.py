"""Allocated and reserved bytes over the recorded window, and the allocator layout at any moment.

The trace is a ring buffer: a long run keeps only its last ``max_entries`` events, so the window
usually starts mid-run with weights, optimizer states and segments already live. Those are
recovered from two places: a free (or segment free) whose alloc is not in the window is an object
that was live at the start, and a dump-time block (or segment) that no event in the window created
was live through the whole window. The state at the start of the window is the sum of those, and
every later state follows by adding the events; at the end it must equal the dump-time segments,
which is checked and reported.

Moments are *states*: state 0 is before the first event, state ``k`` is after event ``k - 1``. An
allocation is counted as allocated in states ``[start, end)``, where ``end`` is the state after its
``free_requested`` (PyTorch's ``memory_allocated`` drops there) and occupies its block until
``end_done``, the state after ``free_completed`` (cross-stream frees wait for the other stream).

Byte counts are the sizes the trace records, which are the sizes the caller requested; the
allocator's rounding (to 512 bytes) therefore shows as a little free space, like fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import PlannerError
from planner.memtrace.loader import Segment, Snapshot, Trace
from planner.units import fmt_gib

MIN_BLOCK = 512
"""The allocator's smallest block and rounding unit: a gap smaller than this is rounding slack,
not a free block."""

TRIGGER_LOOKAHEAD = 16
"""How many events after a segment_alloc/segment_map to look for the allocation that needed it
(the allocator records the segment immediately before the alloc it serves)."""

# Event codes (int8 in the arrays below).
ALLOC, FREE_REQ, FREE_DONE, SEG_ALLOC, SEG_FREE, OOM, OTHER = range(7)
_CODES = {
    "alloc": ALLOC,
    "free_requested": FREE_REQ,
    "free_completed": FREE_DONE,
    "segment_alloc": SEG_ALLOC,
    "segment_map": SEG_ALLOC,
    "segment_free": SEG_FREE,
    "segment_unmap": SEG_FREE,
    "oom": OOM,
}


@dataclass
class Records:
    """Columnar records; one row per allocation (or per segment piece)."""

    addr: np.ndarray
    size: np.ndarray
    stream: np.ndarray
    """Index into :attr:`Timeline.streams`."""
    start: np.ndarray
    end: np.ndarray
    pre: np.ndarray
    """Live before the window started (created from a free without alloc, or from the dump)."""
    event: np.ndarray
    """Event index that created it in the window, or -1."""

    def __len__(self) -> int:
        return len(self.addr)


@dataclass
class Timeline:
    device: int
    n_events: int
    allocated: np.ndarray
    """Bytes allocated at each state (length n_events + 1)."""
    reserved: np.ndarray
    """Bytes reserved (segments) at each state."""
    time_us: np.ndarray | None
    """Time of each state in µs from the first event, or None when the trace has no timestamps."""
    time_origin_us: int | None
    """The first event's own timestamp (to place external annotations), or None."""
    codes: np.ndarray
    """Event codes (ALLOC, FREE_REQ, ...), length n_events."""
    streams: list[int]
    """Stream ids as recorded (0 is the default stream), indexed by the records' stream column."""
    allocs: Records
    alloc_end_done: np.ndarray
    alloc_free_event: np.ndarray
    """free_requested (or free_completed when that is all there is) event index, or -1."""
    alloc_frames: list[Any]
    """Stack recorded at allocation (None if not recorded or allocated before the window)."""
    alloc_free_frames: list[Any]
    segs: Records
    seg_expandable: np.ndarray
    seg_trigger: np.ndarray
    """For segments created in the window: the allocation that needed it (record index), or -1."""
    ooms: list[dict]
    window: dict
    dump: dict
    notes: list[str] = field(default_factory=list)

    @property
    def n_states(self) -> int:
        return self.n_events + 1

    def live_allocs(self, state: int) -> np.ndarray:
        """Indices of allocations counted as allocated at ``state``."""
        a = self.allocs
        return np.flatnonzero((a.start <= state) & (state < a.end))

    def state_of_event(self, event: int) -> int:
        return event + 1


def choose_device(snap: Snapshot, device: int | None) -> int:
    """The device to analyze: the one asked for, else the one with the most trace events (ties:
    most reserved bytes, then the lowest index)."""
    devices = snap.devices()
    if device is not None:
        if device not in devices:
            listed = ", ".join(map(str, devices)) or "none"
            raise PlannerError(f"The snapshot has no data for device {device} (devices with data: {listed}).")
        return device
    if not devices:
        raise PlannerError("The snapshot holds no segments and no trace events: there is nothing to analyze.")

    def weight(d: int) -> tuple:
        n = len(snap.traces[d]) if d < len(snap.traces) else 0
        return (n, sum(s.total_size for s in snap.segments if s.device == d), -d)

    return max(devices, key=weight)


class _Builder:
    """Accumulates records during the single pass over the events."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {k: [] for k in ("addr", "size", "stream", "start", "end", "pre", "event")}

    def add(self, addr: int, size: int, stream: int, start: int, end: int | None, pre: bool, event: int) -> int:
        c = self.cols
        c["addr"].append(addr)
        c["size"].append(size)
        c["stream"].append(stream)
        c["start"].append(start)
        c["end"].append(end)
        c["pre"].append(pre)
        c["event"].append(event)
        return len(c["addr"]) - 1

    def finish(self, open_end: int) -> Records:
        c = self.cols
        ends = [open_end if e is None else e for e in c["end"]]
        return Records(
            addr=_int_array(c["addr"]),
            size=_int_array(c["size"]),
            stream=np.asarray(c["stream"], dtype=np.int64),
            start=np.asarray(c["start"], dtype=np.int64),
            end=np.asarray(ends, dtype=np.int64),
            pre=np.asarray(c["pre"], dtype=bool),
            event=np.asarray(c["event"], dtype=np.int64),
        )


def _int_array(values: list[int]) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        raise PlannerError("The snapshot has an address or size beyond 64 bits; it is not a CUDA snapshot.") from None


def build_timeline(snap: Snapshot, device: int) -> Timeline:
    """Replay ``device``'s trace from the state the dump implies at its start."""
    trace = snap.traces[device] if device < len(snap.traces) else Trace()
    dump_segs = [s for s in snap.segments if s.device == device]
    n = len(trace)
    notes: list[str] = []

    stream_ix: dict[int, int] = {}

    def sidx(stream: int) -> int:
        return stream_ix.setdefault(stream, len(stream_ix))

    allocs, segs = _Builder(), _Builder()
    end_done: list[int | None] = []
    free_event: list[int] = []
    frames: list[Any] = []
    free_frames: list[Any] = []
    seg_expandable: list[bool] = []

    def new_alloc(addr, size, stream, start, pre, event, fr) -> int:
        end_done.append(None)
        free_event.append(-1)
        frames.append(fr)
        free_frames.append(None)
        return allocs.add(addr, size, stream, start, None, pre, event)

    def new_seg(addr, size, stream, start, end, pre, event, expandable) -> int:
        seg_expandable.append(expandable)
        return segs.add(addr, size, stream, start, end, pre, event)

    codes = np.full(n, OTHER, dtype=np.int8)
    d_alloc = np.zeros(n, dtype=np.int64)
    d_res = np.zeros(n, dtype=np.int64)
    live: dict[int, int] = {}  # addr -> allocation record not yet free_completed
    live_seg: dict[int, int] = {}  # addr -> segment piece still mapped
    ooms: list[dict] = []
    a_end = allocs.cols["end"]
    a_size = allocs.cols["size"]
    reused_live = 0
    unknown_actions: dict[str, int] = {}

    act, addrs, sizes, strs, frs = trace.action, trace.addr, trace.size, trace.stream, trace.frames
    # When free_requested is recorded at all, a lone free_completed belongs to a free requested
    # before the window: that block was awaiting its cross-stream free, not allocated, at the start.
    has_free_requested = "free_requested" in set(act)
    for i in range(n):
        a = act[i]
        code = _CODES.get(a, OTHER)
        codes[i] = code
        ad = addrs[i]
        if code == ALLOC:
            j = live.get(ad)
            if j is not None:
                # The address is handed out again while we think it is live: its free was not
                # recorded (skip_actions). Close it here so the books stay balanced.
                reused_live += 1
                if a_end[j] is None:
                    a_end[j] = i + 1
                    free_event[j] = i
                    d_alloc[i] -= a_size[j]
                end_done[j] = i + 1
            live[ad] = new_alloc(ad, sizes[i], sidx(strs[i]), i + 1, False, i, frs[i])
            d_alloc[i] += sizes[i]
        elif code == FREE_REQ or code == FREE_DONE:
            j = live.get(ad)
            if j is None:
                # Allocated before the window began.
                j = new_alloc(ad, sizes[i], sidx(strs[i]), 0, True, -1, None)
                live[ad] = j
                if code == FREE_DONE and has_free_requested:
                    a_end[j] = 0
            if a_end[j] is None:
                a_end[j] = i + 1
                free_event[j] = i
                d_alloc[i] -= a_size[j]
                free_frames[j] = frs[i]
            if code == FREE_DONE:
                end_done[j] = i + 1
                del live[ad]
        elif code == SEG_ALLOC:
            live_seg[ad] = new_seg(ad, sizes[i], sidx(strs[i]), i + 1, None, False, i, a == "segment_map")
            d_res[i] += sizes[i]
        elif code == SEG_FREE:
            _release_segment(ad, sizes[i], i, live_seg, segs, new_seg, sidx(strs[i]), a == "segment_unmap")
            d_res[i] -= sizes[i]
        elif code == OOM:
            ooms.append({"event": i, "size": sizes[i], "device_free": trace.device_free.get(i, 0), "stream": strs[i]})
        elif a != "snapshot":
            unknown_actions[a] = unknown_actions.get(a, 0) + 1

    if reused_live:
        notes.append(
            f"{reused_live} addresses were allocated again without a recorded free (free events skipped?); "
            "those allocations are taken as freed at the reuse."
        )
    if unknown_actions:
        listed = ", ".join(f"{k} ({v})" for k, v in sorted(unknown_actions.items()))
        notes.append(f"Trace actions this analysis does not use were skipped: {listed}.")

    # ---- anchor on the dump ------------------------------------------------------------------
    dump_alloc = sum(b.requested_size for s in dump_segs for b in s.blocks if b.allocated)
    dump_res = sum(s.total_size for s in dump_segs)
    pre_live = _anchor_allocations(dump_segs, live, a_end, end_done, new_alloc, sidx, n, notes)
    _anchor_segments(dump_segs, live_seg, segs, new_seg, sidx, n, notes)

    a_rec = allocs.finish(open_end=n + 1)
    s_rec = segs.finish(open_end=n + 1)
    done = np.asarray([n + 1 if e is None else e for e in end_done], dtype=np.int64)

    at_start = a_rec.pre & (a_rec.end > 0)
    a0 = int(a_rec.size[at_start].sum())
    r0 = int(s_rec.size[s_rec.pre].sum())
    allocated = np.concatenate(([a0], a0 + np.cumsum(d_alloc)))
    reserved = np.concatenate(([r0], r0 + np.cumsum(d_res)))

    window = {
        "events": n,
        "prewindow_allocations": int(at_start.sum()),
        "prewindow_allocated_bytes": a0,
        "prewindow_segments": int(s_rec.pre.sum()),
        "prewindow_reserved_bytes": r0,
        "starts_mid_run": bool(a0 or r0),
        "live_through_window_allocations": pre_live,
    }
    if n == 0:
        notes.append("The snapshot has no trace events for this device (history recording was off, or "
                     "enabled='state'): only the dump-time state is analyzed; there is no timeline.")
    elif a0 or r0:
        notes.append(
            f"The trace starts mid-run (the ring buffer keeps only the last max_entries events): "
            f"{window['prewindow_allocations']} allocations ({fmt_gib(a0, 2)}) and {window['prewindow_segments']} "
            f"segment pieces ({fmt_gib(r0, 2)}) were already live; the timeline starts from the state the "
            "dump-time segments and the window's frees imply."
        )
    dump = {
        "allocated_bytes": dump_alloc,
        "reserved_bytes": dump_res,
        "segments": len(dump_segs),
        "trace_end_allocated_bytes": int(allocated[-1]),
        "trace_end_reserved_bytes": int(reserved[-1]),
    }
    dump["reconciled"] = (
        bool(dump_segs)
        and dump_alloc == dump["trace_end_allocated_bytes"]
        and dump_res == dump["trace_end_reserved_bytes"]
    )
    if dump_segs and not dump["reconciled"]:
        notes.append(
            f"The replayed trace ends at {fmt_gib(allocated[-1], 3)} allocated / {fmt_gib(reserved[-1], 3)} reserved "
            f"but the dump-time segments hold {fmt_gib(dump_alloc, 3)} / {fmt_gib(dump_res, 3)}; the difference "
            "is events the trace did not record."
        )
    if not dump_segs and n:
        notes.append("The snapshot has no segments for this device; the start state cannot be anchored and is taken as empty.")
    if allocated.min() < 0 or reserved.min() < 0:
        notes.append("The replay went below zero bytes at some point: the trace and the segments disagree.")

    return Timeline(
        device=device,
        n_events=n,
        allocated=allocated,
        reserved=reserved,
        time_us=_state_times(trace),
        time_origin_us=trace.time_us[0] if _state_times(trace) is not None else None,
        codes=codes,
        streams=list(stream_ix),
        allocs=a_rec,
        alloc_end_done=done,
        alloc_free_event=np.asarray(free_event, dtype=np.int64),
        alloc_frames=frames,
        alloc_free_frames=free_frames,
        segs=s_rec,
        seg_expandable=np.asarray(seg_expandable, dtype=bool),
        seg_trigger=_segment_triggers(s_rec, a_rec, codes, n),
        ooms=ooms,
        window=window,
        dump=dump,
        notes=notes + list(snap.notes),
    )


def _release_segment(addr, size, i, live_seg, segs, new_seg, stream, expandable) -> None:
    """End the segment pieces a segment_free/segment_unmap covers, keeping any remainder mapped.

    cudaFree releases a whole segment (exact match). Expandable segments unmap page ranges that
    need not match the ranges mapped earlier, so overlapping pieces are cut and what the window
    never saw mapped is recorded as a piece that was live before the window."""
    k = live_seg.pop(addr, None)
    c = segs.cols
    if k is not None and c["size"][k] == size:
        c["end"][k] = i + 1
        return
    if k is not None:
        live_seg[addr] = k
    lo, hi = addr, addr + size
    covered = []
    for a0, k in list(live_seg.items()):
        b0, b1 = a0, a0 + c["size"][k]
        if b1 <= lo or b0 >= hi:
            continue
        del live_seg[a0]
        c["end"][k] = i + 1
        covered.append((max(b0, lo), min(b1, hi)))
        piece_stream = c["stream"][k]
        for r0, r1 in ((b0, lo), (hi, b1)):  # the parts outside the released range stay mapped
            if r1 > r0:
                live_seg[r0] = new_seg(r0, r1 - r0, piece_stream, i + 1, None, False, -1, True)
    for r0, r1 in _uncovered(lo, hi, covered):
        new_seg(r0, r1 - r0, stream, 0, i + 1, True, -1, expandable)


def _uncovered(lo: int, hi: int, intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Parts of [lo, hi) that no interval covers."""
    out, cur = [], lo
    for a, b in sorted(intervals):
        if a > cur:
            out.append((cur, min(a, hi)))
        cur = max(cur, b)
        if cur >= hi:
            break
    if cur < hi:
        out.append((cur, hi))
    return [(a, b) for a, b in out if b > a]


def _anchor_allocations(dump_segs: list[Segment], live, a_end, end_done, new_alloc, sidx, n, notes) -> int:
    """Add dump-time blocks no event created (live through the whole window); report mismatches."""
    created = 0
    seen: set[int] = set()
    for s in dump_segs:
        for b in s.blocks:
            if b.state == "inactive":
                continue
            seen.add(b.address)
            if b.address in live:
                continue
            pending = not b.allocated  # freed before the window but its cross-stream free is not done
            j = new_alloc(b.address, b.requested_size, sidx(s.stream), 0, True, -1, b.frames)
            if pending:
                a_end[j] = 0
            created += 0 if pending else 1
    if dump_segs:
        missing = [ad for ad, j in live.items() if a_end[j] is None and ad not in seen]
        if missing:
            notes.append(
                f"{len(missing)} allocations the trace leaves live are not in the dump-time segments "
                "(the segments may come from another moment or device)."
            )
    return created


def _anchor_segments(dump_segs: list[Segment], live_seg, segs, new_seg, sidx, n, notes) -> None:
    """Add the dump-time segment ranges no event in the window mapped (live before the window)."""
    c = segs.cols
    pieces = sorted((a, a + c["size"][k]) for a, k in live_seg.items())
    starts = [p[0] for p in pieces]
    matched = 0
    for s in dump_segs:
        lo, hi = s.address, s.address + s.total_size
        j = int(np.searchsorted(starts, lo, side="left")) if starts else 0
        inside = []
        while j < len(pieces) and pieces[j][0] < hi:
            inside.append(pieces[j])
            j += 1
        matched += len(inside)
        for r0, r1 in _uncovered(lo, hi, inside):
            new_seg(r0, r1 - r0, sidx(s.stream), 0, None, True, -1, s.is_expandable)
    if dump_segs and matched < len(pieces):
        notes.append(
            f"{len(pieces) - matched} segments the trace leaves mapped are not in the dump-time segments."
        )


def _segment_triggers(segs: Records, allocs: Records, codes: np.ndarray, n: int) -> np.ndarray:
    """For each segment created in the window, the allocation that needed it: the first alloc
    within :data:`TRIGGER_LOOKAHEAD` events that overlaps the new range."""
    trig = np.full(len(segs), -1, dtype=np.int64)
    if not len(segs) or not len(allocs):
        return trig
    by_event = np.full(n, -1, dtype=np.int64)
    made = allocs.event >= 0
    by_event[allocs.event[made]] = np.flatnonzero(made)
    for k in np.flatnonzero(segs.event >= 0):
        lo = int(segs.addr[k])
        hi = lo + int(segs.size[k])
        e0 = int(segs.event[k])
        for e in range(e0 + 1, min(n, e0 + 1 + TRIGGER_LOOKAHEAD)):
            r = by_event[e]
            if r < 0:
                continue
            ra = int(allocs.addr[r])
            if ra < hi and ra + int(allocs.size[r]) > lo:
                trig[k] = r
                break
    return trig


def _state_times(trace: Trace) -> np.ndarray | None:
    t = trace.time_us
    if not t or any(v is None for v in t):
        return None
    arr = np.asarray(t, dtype=np.int64)
    if arr.max() == arr.min():
        return None  # all zero: the version recorded no clock
    arr = arr - arr[0]
    return np.concatenate(([arr[0]], arr))


# ---- the allocator layout at one moment --------------------------------------------------------


@dataclass
class Layout:
    """Segments and free space at one state, reconstructed from the records."""

    state: int
    seg_stream: np.ndarray
    """Stream index per segment (expandable pieces merged into their segment)."""
    seg_size: np.ndarray
    seg_used: np.ndarray
    """Bytes occupied (allocated or awaiting a cross-stream free)."""
    seg_transient_share: np.ndarray
    """Fraction of each segment's bytes created for an allocation the caller classes as transient."""
    seg_largest_gap: np.ndarray
    seg_gaps: np.ndarray
    """Number of free blocks (gaps of at least MIN_BLOCK) per segment."""
    gap_sizes: np.ndarray
    gap_seg: np.ndarray
    pending_bytes: int
    orphan_bytes: int
    """Allocated bytes outside every known segment (trace and dump disagree)."""

    @property
    def seg_free(self) -> np.ndarray:
        return self.seg_size - self.seg_used


def layout_at(tl: Timeline, state: int, transient_alloc: np.ndarray | None = None) -> Layout:
    """The allocator's segments and free blocks at ``state``.

    ``transient_alloc`` (bool per allocation) marks allocations classed as transient; a segment a
    transient allocation caused is where a staircase step leaves its free bytes."""
    s, a = tl.segs, tl.allocs
    smask = np.flatnonzero((s.start <= state) & (state < s.end))
    order = smask[np.argsort(s.addr[smask], kind="stable")]
    lo, size, stream = s.addr[order], s.size[order], s.stream[order]
    expandable = tl.seg_expandable[order]
    trig = tl.seg_trigger[order]
    trans_bytes = np.zeros(len(order), dtype=np.float64)
    if transient_alloc is not None and len(trig):
        ok = trig >= 0
        hit = np.zeros(len(trig), dtype=bool)
        hit[ok] = transient_alloc[trig[ok]]
        trans_bytes = np.where(hit, size, 0).astype(np.float64)

    # Expandable segments arrive as mapped pieces; contiguous pieces of one stream are one segment.
    if len(order):
        joins = np.zeros(len(order), dtype=bool)
        joins[1:] = expandable[1:] & expandable[:-1] & (stream[1:] == stream[:-1]) & (lo[1:] == lo[:-1] + size[:-1])
        group = np.cumsum(~joins) - 1
        ng = int(group[-1]) + 1
        g_lo = lo[~joins]
        g_size = np.bincount(group, weights=size, minlength=ng).astype(np.int64)
        g_stream = stream[~joins]
        g_trans = np.bincount(group, weights=trans_bytes, minlength=ng)
    else:
        g_lo = g_size = g_stream = np.zeros(0, dtype=np.int64)
        g_trans = np.zeros(0)
        ng = 0

    occ = np.flatnonzero((a.start <= state) & (state < tl.alloc_end_done))
    pending = occ[a.end[occ] <= state]
    o_addr, o_size = a.addr[occ], a.size[occ]
    if ng:
        gi = np.searchsorted(g_lo, o_addr, side="right") - 1
        inside = (gi >= 0) & (o_addr + o_size <= g_lo[np.maximum(gi, 0)] + g_size[np.maximum(gi, 0)])
    else:
        gi = np.zeros(len(occ), dtype=np.int64)
        inside = np.zeros(len(occ), dtype=bool)
    orphan = int(o_size[~inside].sum())
    o_addr, o_size, gi = o_addr[inside], o_size[inside], gi[inside]
    k = np.lexsort((o_addr, gi))
    o_addr, o_size, gi = o_addr[k], o_size[k], gi[k]
    used = np.bincount(gi, weights=o_size, minlength=ng).astype(np.int64) if ng else np.zeros(0, dtype=np.int64)

    # Gaps: before each allocation (from the segment start or the previous allocation's end), and
    # after the last allocation of each segment; a segment with no allocation is one gap.
    first = np.ones(len(gi), dtype=bool)
    first[1:] = gi[1:] != gi[:-1]
    prev_end = np.empty(len(gi), dtype=np.int64)
    if len(gi):
        prev_end[1:] = o_addr[:-1] + o_size[:-1]
        prev_end[first] = g_lo[gi[first]]
    before = o_addr - prev_end
    last = np.ones(len(gi), dtype=bool)
    last[:-1] = gi[:-1] != gi[1:]
    tail_seg = gi[last]
    tail = (g_lo[tail_seg] + g_size[tail_seg]) - (o_addr[last] + o_size[last])
    empty = np.setdiff1d(np.arange(ng), gi, assume_unique=False)
    gap_sizes = np.concatenate((before, tail, g_size[empty]))
    gap_seg = np.concatenate((gi, tail_seg, empty))
    real = gap_sizes >= MIN_BLOCK
    gap_sizes, gap_seg = gap_sizes[real], gap_seg[real]
    largest = np.zeros(ng, dtype=np.int64)
    if len(gap_sizes):
        np.maximum.at(largest, gap_seg, gap_sizes)
    counts = np.bincount(gap_seg, minlength=ng) if ng else np.zeros(0, dtype=np.int64)

    return Layout(
        state=state,
        seg_stream=g_stream,
        seg_size=g_size,
        seg_used=used,
        seg_transient_share=np.divide(g_trans, g_size, out=np.zeros(ng), where=g_size > 0),
        seg_largest_gap=largest,
        seg_gaps=counts,
        gap_sizes=gap_sizes,
        gap_seg=gap_seg,
        pending_bytes=int(a.size[pending].sum()),
        orphan_bytes=orphan,
    )
