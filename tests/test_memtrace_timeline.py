"""The replay of allocated and reserved bytes, its anchoring on the dump when the ring buffer
dropped early events, and the allocator layout at a moment."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "memtrace"))  # the synthetic-snapshot helpers
from memtrace_helpers import GiB, MiB, event, segment, synth  # noqa: E402
from planner.errors import PlannerError  # noqa: E402
from planner.memtrace.loader import parse_snapshot  # noqa: E402
from planner.memtrace.timeline import build_timeline, choose_device, layout_at  # noqa: E402

A, B = 0x7F00_0000_0000, 0x7F10_0000_0000


def _timeline(raw: dict, device: int = 0):
    return build_timeline(parse_snapshot(raw), device)


def test_replay_by_hand():
    trace = [
        event("segment_alloc", A, 4096),
        event("alloc", A, 1000),
        event("alloc", A + 1024, 2000),
        event("free_requested", A, 1000),
        event("free_completed", A, 1000),
        event("segment_alloc", B, 8192),
        event("alloc", B, 8192),
        event("oom", None, 9999, device_free=5),
    ]
    segs = [segment(A, 4096, [(1024, 0, "inactive"), (2048, 2000, "active_allocated"), (1024, 0, "inactive")]),
            segment(B, 8192, [(8192, 8192, "active_allocated")])]
    tl = _timeline({"segments": segs, "device_traces": [trace]})
    assert tl.allocated.tolist() == [0, 0, 1000, 3000, 2000, 2000, 2000, 10192, 10192]
    assert tl.reserved.tolist() == [0, 4096, 4096, 4096, 4096, 4096, 12288, 12288, 12288]
    assert tl.dump["reconciled"] and not tl.window["starts_mid_run"]
    assert tl.ooms == [{"event": 7, "size": 9999, "device_free": 5, "stream": 0}]
    assert tl.seg_trigger.tolist() == [0, 2]  # each segment served the alloc right after it


@pytest.mark.parametrize("keep", [40, 90, 150])
def test_dropped_early_events_are_recovered_from_the_dump(keep):
    """A truncated ring buffer must replay to the same bytes as the full trace over the same
    events: the missing start state comes from the dump and the window's frees."""
    full_raw = synth.case_a()
    cut_raw = dict(full_raw, device_traces=[full_raw["device_traces"][0][-keep:]])
    full, cut = _timeline(full_raw), _timeline(cut_raw)
    assert np.array_equal(cut.allocated, full.allocated[-(keep + 1):])
    assert np.array_equal(cut.reserved, full.reserved[-(keep + 1):])
    assert cut.window["starts_mid_run"] and cut.dump["reconciled"]
    assert any("starts mid-run" in n for n in cut.notes)


def test_skipped_free_requested_events():
    sim = synth.Sim(record_free_requested=False)
    synth.run_dsl("alloc w 1G param\nalloc a 512M\nfree a bwd\nalloc b 256M\nfree b", sim)
    tl = _timeline(sim.snapshot())
    assert tl.allocated.max() == GiB + 512 * MiB
    assert tl.allocated[-1] == GiB and tl.dump["reconciled"]


def test_alloc_at_a_live_address_closes_the_old_allocation():
    trace = [event("segment_alloc", A, 4096), event("alloc", A, 1000), event("alloc", A, 500)]
    segs = [segment(A, 4096, [(512, 500, "active_allocated"), (3584, 0, "inactive")])]
    tl = _timeline({"segments": segs, "device_traces": [trace]})
    assert tl.allocated.tolist() == [0, 0, 1000, 500]
    assert any("without a recorded free" in n for n in tl.notes)


def test_pending_cross_stream_free_occupies_its_block():
    trace = [event("segment_alloc", A, 4096), event("alloc", A, 2048), event("free_requested", A, 2048)]
    segs = [segment(A, 4096, [(2048, 2048, "active_pending_free"), (2048, 0, "inactive")])]
    tl = _timeline({"segments": segs, "device_traces": [trace]})
    assert tl.allocated[-1] == 0
    lay = layout_at(tl, tl.n_events)
    assert lay.pending_bytes == 2048 and lay.seg_used.tolist() == [2048]
    assert lay.seg_largest_gap.tolist() == [2048]


def test_free_completed_of_a_free_requested_before_the_window():
    trace = [event("free_completed", A, 2048), event("alloc", A + 2048, 1024), event("free_requested", A + 2048, 1024)]
    segs = [segment(A, 4096, [(2048, 0, "inactive"), (1024, 0, "active_pending_free"), (1024, 0, "inactive")])]
    tl = _timeline({"segments": segs, "device_traces": [trace]})
    # The first block was awaiting its free, not allocated, when the window began.
    assert tl.allocated.tolist() == [0, 0, 1024, 0]
    assert tl.alloc_end_done.tolist()[0] == 1


def test_expandable_segments_map_and_partial_unmap():
    trace = [
        event("segment_map", A, 2 * MiB),
        event("alloc", A, 3 * MiB // 2),
        event("segment_map", A + 2 * MiB, 2 * MiB),
        event("alloc", A + 3 * MiB // 2, 2 * MiB),  # spans the two mapped pieces
        event("free_requested", A, 3 * MiB // 2),
        event("free_completed", A, 3 * MiB // 2),
        event("segment_unmap", A, MiB),
    ]
    half = MiB // 2
    segs = [segment(A + MiB, 3 * MiB, [(half, 0, "inactive"), (2 * MiB, 2 * MiB, "active_allocated"), (half, 0, "inactive")],
                    expandable=True)]
    tl = _timeline({"segments": segs, "device_traces": [trace]})
    assert (tl.reserved / MiB).tolist() == [0, 2, 2, 4, 4, 4, 4, 3]
    assert tl.dump["reconciled"]
    lay = layout_at(tl, tl.n_events)
    assert lay.seg_size.tolist() == [3 * MiB]  # remaining pieces merge into one segment
    assert sorted(lay.gap_sizes.tolist()) == [half, half]
    assert lay.orphan_bytes == 0


def test_unmap_of_a_range_mapped_before_the_window():
    trace = [event("segment_unmap", A, 2 * MiB)]
    segs = [segment(A + 2 * MiB, 2 * MiB, [(2 * MiB, 2 * MiB, "active_allocated")], expandable=True)]
    tl = _timeline({"segments": segs, "device_traces": [trace]})
    assert (tl.reserved / MiB).tolist() == [4, 2]
    assert tl.window["prewindow_segments"] == 2 and tl.dump["reconciled"]


def test_segments_only_snapshot_is_the_dump_state():
    raw = {"segments": [segment(A, 4096, [(1024, 1000, "active_allocated"), (3072, 0, "inactive")])], "device_traces": []}
    tl = _timeline(raw)
    assert tl.n_events == 0 and tl.allocated.tolist() == [1000] and tl.reserved.tolist() == [4096]
    assert any("no trace events" in n for n in tl.notes)


def test_mismatched_dump_is_reported():
    trace = [event("segment_alloc", A, 4096), event("alloc", A, 1000)]
    segs = [segment(B, 8192, [(8192, 8192, "active_allocated")])]  # another moment entirely
    tl = _timeline({"segments": segs, "device_traces": [trace]})
    assert not tl.dump["reconciled"]
    assert any("not in the dump-time segments" in n for n in tl.notes)


def test_layout_at_the_dump_matches_the_dump_blocks():
    raw = synth.case_fragmentation()
    tl = _timeline(raw)
    lay = layout_at(tl, tl.n_events)
    free_dump = [b["size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "inactive"]
    assert len(lay.seg_size) == len(raw["segments"])
    assert int(lay.seg_free.sum()) == sum(s["total_size"] for s in raw["segments"]) - tl.allocated[-1]
    # Reconstruction sees the allocator's unsplit remainders (< 1 MiB) as free; nothing else differs.
    assert max(free_dump) <= lay.gap_sizes.max() <= max(free_dump) + MiB + 512


def test_time_axis_is_relative_and_optional():
    sim = synth.Sim(t0=5_000_000, dt=7)
    synth.run_dsl("alloc a 1M\nfree a", sim)
    tl = _timeline(sim.snapshot())
    assert tl.time_us.tolist() == [0, 0, 7, 14, 21]
    sim = synth.Sim(time=False)
    synth.run_dsl("alloc a 1M", sim)
    assert _timeline(sim.snapshot()).time_us is None


def test_choose_device():
    seg1 = segment(B, 4096, [(4096, 4096, "active_allocated")], device=1)
    raw = {"segments": [seg1], "device_traces": [[], [event("segment_alloc", B, 4096), event("alloc", B, 4096)]]}
    snap = parse_snapshot(raw)
    assert choose_device(snap, None) == 1
    with pytest.raises(PlannerError, match="no data for device 3"):
        choose_device(snap, 3)
    with pytest.raises(PlannerError, match="nothing to analyze"):
        choose_device(parse_snapshot({"segments": [], "device_traces": [[]]}), None)
