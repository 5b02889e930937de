"""Each synthetic case is diagnosed as the seed's section 04.3 says it should be."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "memtrace"))  # the synthetic-snapshot helpers
from memtrace_helpers import GiB, MiB, analyze_dict, event, segment, synth  # noqa: E402
from planner.memtrace.report import render_text  # noqa: E402

A = 0x7F00_0000_0000


def _present(diag: dict) -> list[str]:
    return [c["cause"] for c in diag["causes"] if c["present"]]


@pytest.fixture(scope="module")
def reports() -> dict:
    return {name: analyze_dict(build()).report for name, build in synth.CASES.items()}


def test_case_a_memory_really_used(reports):
    d = reports["case_a"]["diagnosis"]
    assert d["case"] == "A"
    assert d["moment"]["kind"] == "oom" and d["capacity_source"].startswith("first OOM event")
    assert d["capacity_bytes"] == 80 * GiB
    assert d["largest_class_at_peak"] == "optimizer"
    assert d["advice"][0].startswith("optimize the largest class at the peak, optimizer")
    assert _present(d) == []


def test_case_b_staircase(reports):
    d = reports["staircase"]["diagnosis"]
    assert d["case"] == "B"
    assert _present(d) == ["staircase"]
    stair = next(c for c in d["causes"] if c["cause"] == "staircase")
    assert stair["evidence"]["steps_from_transients"] >= 8 and stair["evidence"]["steps_still_reserved"] >= 4
    assert any("expandable_segments" in a for a in d["advice"])
    assert any("do not add recompute" in a for a in d["advice"])


def test_case_b_fragmentation(reports):
    d = reports["fragmentation"]["diagnosis"]
    assert d["case"] == "B"
    assert _present(d) == ["fragmentation"]
    frag = next(c for c in d["causes"] if c["cause"] == "fragmentation")["evidence"]
    assert frag["free_blocks_in_partial_segments"] >= 10 and frag["distinct_free_block_sizes"] >= 3
    assert frag["largest_free_block_bytes"] < d["moment"]["request_bytes"]  # no hole fits the request
    assert any("pad or bucket" in a for a in d["advice"])


def test_case_b_stream_split(reports):
    d = reports["stream_split"]["diagnosis"]
    assert d["case"] == "B"
    assert _present(d) == ["stream_split"]
    split = next(c for c in d["causes"] if c["cause"] == "stream_split")["evidence"]
    assert split["pool_stream"] == 0 and split["free_bytes_other_pools"] >= 7 * GiB
    assert reports["stream_split"]["peak"]["components"]["comm_buffers"] == GiB // 2
    assert any("main stream" in a for a in d["advice"])


def test_oom_under_a_per_process_limit():
    """set_per_process_memory_fraction: CUDA reports lots of free memory at the OOM. The limit is
    then reserved + request (not reserved + CUDA free), and the diagnosis stays case B."""
    d = analyze_dict(synth.case_stream_split(device_total=141 * GiB)).report["diagnosis"]
    assert d["moment"]["process_limited"] and "per-process limit" in d["capacity_source"]
    assert 80 * GiB <= d["capacity_bytes"] <= 80 * GiB + d["moment"]["request_bytes"]
    assert d["case"] == "B" and _present(d) == ["stream_split"]
    assert not analyze_dict(synth.case_stream_split()).report["diagnosis"]["moment"]["process_limited"]


@pytest.mark.parametrize("name", list(synth.CASES))
def test_gap_shares_partition_the_gap(reports, name):
    d = reports[name]["diagnosis"]
    assert abs(sum(d["gap_shares"].values()) - d["gap_bytes"]) <= 2


@pytest.mark.parametrize("name", list(synth.CASES))
def test_peak_classes_sum_to_allocated_peak(reports, name):
    p = reports[name]["peak"]
    assert sum(p["components"].values()) == p["allocated_bytes"] == reports[name]["timeline"]["allocated_peak_bytes"]


def test_limit_sources_and_the_no_oom_cases():
    snap = synth.case_fits()
    assert analyze_dict(snap).report["diagnosis"]["case"] == "unknown"
    d = analyze_dict(snap, capacity_bytes=80 * GiB).report["diagnosis"]
    assert (d["case"], d["capacity_source"]) == ("fits", "--capacity")
    d = analyze_dict(snap, fallback_capacity=(85.52e9, "usable HBM of h100")).report["diagnosis"]
    assert (d["case"], d["capacity_source"]) == ("fits", "usable HBM of h100")
    # The same run on a smaller GPU would sit at its limit with everything used: case A.
    d = analyze_dict(snap, capacity_bytes=60 * GiB).report["diagnosis"]
    assert d["case"] == "A" and d["moment"]["kind"] == "reserved_peak"


def test_case_b_without_an_oom_event():
    """Reserved at the limit with allocated far below it is case B even when the run survived."""
    raw = synth.case_fragmentation()
    trace = raw["device_traces"][0]
    assert trace[-1]["action"] == "oom"
    raw["device_traces"] = [trace[:-1]]
    d = analyze_dict(raw, capacity_bytes=80 * GiB).report["diagnosis"]
    assert d["moment"]["kind"] == "reserved_peak"
    assert d["case"] == "B" and _present(d) == ["fragmentation"]


def test_request_larger_than_everything_free_is_case_a():
    sim = synth.Sim(80 * GiB)
    synth.run_dsl("alloc w 40G param\nalloc a 6G\nfree a bwd\nalloc b 2G", sim)
    try:
        sim.alloc("huge", 50 * GiB)
    except synth.SimOOM:
        pass
    d = analyze_dict(sim.snapshot()).report["diagnosis"]
    assert d["case"] == "A" and "really missing" in d["reasons"][0]


@pytest.mark.parametrize(
    "raw",
    [
        {"segments": [], "device_traces": [[event("segment_alloc", A, 2 * MiB)]]},
        {"segments": [], "device_traces": [[event("oom", None, GiB, device_free=0)]]},
        {"segments": [], "device_traces": [[event("alloc", A, MiB), event("free_requested", A, MiB)]]},
        {"segments": [segment(A, 2 * MiB, [(2 * MiB, 0, "inactive")])], "device_traces": []},
        {"segments": [segment(A, 2 * MiB, [(MiB, MiB, "active_allocated"), (MiB, 0, "inactive")], stream=9)],
         "device_traces": [[event("free_requested", A + MiB, 4 * MiB, stream=9)]]},
    ],
    ids=["segments-no-allocs", "only-an-oom", "no-dump", "dump-only-empty", "inconsistent"],
)
def test_odd_snapshots_are_analyzed_without_crashing(raw):
    rep = analyze_dict(raw, capacity_bytes=GiB).report
    json.dumps(rep)  # JSON-safe
    assert render_text(rep)
    assert sum(rep["peak"]["components"].values()) == rep["peak"]["allocated_bytes"]


def test_optimizer_annotations_place_the_peak():
    """Newer PyTorch brackets Optimizer.step with external annotations; a peak inside one is in the
    optimizer phase even when no stack says so, and completed steps are counted."""
    sim = synth.Sim(80 * GiB)
    step = "Optimizer.step#Adam.step"
    synth.run_dsl("alloc w 4G param", sim)
    for k in range(2):
        synth.run_dsl(f"alloc a{k} 2G\nfree a{k} bwd", sim)
        sim.annotate("START", step)
        synth.run_dsl(f"alloc t{k} {3 + k}G none\nfree t{k}", sim)  # a stackless step temporary
        sim.annotate("END", step)
    peak = analyze_dict(sim.snapshot()).report["peak"]
    assert peak["allocated_bytes"] == 8 * GiB
    assert peak["phase"] == "optimizer"
    assert peak["annotations"] == {"open": [step], "completed_before": {step: 1}}
