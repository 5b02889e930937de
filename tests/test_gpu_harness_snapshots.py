"""The two real Megatron-Core memory snapshots (issue #11; tests/fixtures/memtrace/real/megatron-*):
they load with planner's memtrace reader, replay to the recorded peak, and show full recompute
lowering the forward/backward peak of the same step."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from planner.memtrace.loader import load_snapshot
from planner.memtrace.report import analyze

REAL = Path(__file__).parent / "fixtures" / "memtrace" / "real"


@pytest.fixture(scope="module")
def snaps(tmp_path_factory):
    out = {}
    folder = tmp_path_factory.mktemp("megatron")
    for kind in ("none", "full"):
        gz = REAL / f"megatron-{kind}.pickle.gz"
        assert gz.stat().st_size < 5 << 20
        path = folder / f"megatron-{kind}.pickle"
        path.write_bytes(gzip.decompress(gz.read_bytes()))
        run = json.loads((REAL / f"megatron-{kind}.run.json").read_text())
        out[kind] = (analyze(load_snapshot(path), source=path.name).report, run)
    return out


def test_snapshots_replay_to_the_measured_peak(snaps):
    for kind, (report, run) in snaps.items():
        assert report["timeline"]["dump"]["reconciled"], kind
        assert run["megatron_core"] == "0.19.2" and run["gpu"] == "NVIDIA H200"
        # The harness's peak covers the same step (forward, backward, optimizer).
        assert report["peak"]["allocated_bytes"] == pytest.approx(run["peak_allocated"], rel=0.02), kind


def test_full_recompute_lowers_the_backward_peak(snaps):
    none, full = snaps["none"][1], snaps["full"][1]
    assert full["fwd_bwd_peak_allocated"] < none["fwd_bwd_peak_allocated"]
    assert full["spec"]["recompute"] == "full" and none["spec"]["recompute"] == "none"
