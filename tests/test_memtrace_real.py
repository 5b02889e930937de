"""`planner memtrace` on real snapshots recorded with torch 2.11 on an H200 (tests/fixtures/memtrace/real)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from planner.memtrace.loader import load_snapshot
from planner.memtrace.report import analyze

REAL = Path(__file__).parent / "fixtures" / "memtrace" / "real"
GiB = 1 << 30


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    out = {}
    folder = tmp_path_factory.mktemp("real")
    for gz in sorted(REAL.glob("*.pickle.gz")):
        path = folder / gz.name[: -len(".gz")]
        path.write_bytes(gzip.decompress(gz.read_bytes()))
        out[path.stem] = analyze(load_snapshot(path), source=path.name).report
    return out


def test_the_census_found_plain_values_only():
    facts = json.loads((REAL / "facts.json").read_text())
    for name, f in facts.items():
        assert not set(f["ops"]) & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ"}, name
        assert set(f["types"]) <= {"bool", "dict", "float", "int", "list", "str", "tuple"}, name


@pytest.mark.parametrize("name", ["train", "ring_buffer", "cpp_stacks", "oom", "side_stream", "expandable"])
def test_replay_reconciles_and_classes_sum(reports, name):
    r = reports[name]
    assert r["timeline"]["dump"]["reconciled"]
    assert r["snapshot"]["window"]["starts_mid_run"] == (name == "ring_buffer")
    p = r["peak"]
    assert sum(p["components"].values()) == p["allocated_bytes"]
    assert p["components"]["unknown"] <= 0.01 * p["allocated_bytes"]
    # The model's fp32 weights, 48M parameters, and Adam's two moments of the same size.
    assert p["components"]["weights"] == pytest.approx(0.188 * GiB, rel=0.01)
    assert p["components"]["optimizer"] >= 2 * p["components"]["weights"] * 0.99


def test_optimizer_step_peak_with_cpp_stacks(reports):
    p = reports["cpp_stacks"]["peak"]
    assert p["phase"] == "optimizer" and p["annotations"]["open"] == ["Optimizer.step#Adam.step"]
    assert p["components"]["gradients"] == pytest.approx(p["components"]["weights"], rel=0.01)
    assert p["components"]["transient"] >= 64 << 20  # two cuBLAS workspaces, named by their C++ frames


def test_oom_under_a_process_limit_is_case_a(reports):
    d = reports["oom"]["diagnosis"]
    assert d["case"] == "A" and d["moment"]["process_limited"]
    assert 6 * GiB <= d["capacity_bytes"] <= 6 * GiB + d["moment"]["request_bytes"] + (20 << 20)
    assert d["largest_class_at_peak"] == "activations"


def test_side_stream_pool_is_case_b(reports):
    d = reports["side_stream"]["diagnosis"]
    assert d["case"] == "B" and [c["cause"] for c in d["causes"] if c["present"]] == ["stream_split"]
    assert reports["side_stream"]["peak"]["components"]["comm_buffers"] == 128 << 20


def test_expandable_segments_merge(reports):
    assert reports["expandable"]["allocator_at_peak"]["segments"] <= 3
    assert reports["oom"]["allocator_at_peak"]["segments"] > 20
    assert reports["expandable"]["diagnosis"]["case"] == "A"


@pytest.mark.parametrize("name", ["megatron-none", "megatron-full"])
def test_megatron_snapshots_decompose_and_compare_with_the_prediction(reports, name):
    """The GPU ground-truth snapshots (issue 11: Megatron-Core, local spec, one H200, no recompute
    and full recompute): the classes sum to the measured allocated peak, and the report sets them
    beside planner's prediction for the same configuration."""
    from benchmarks.gpu import configs
    from planner.cost.memory import memory_report
    from planner.memtrace.predict import compare

    r = reports[name]
    peak = r["peak"]
    assert sum(peak["components"].values()) == peak["allocated_bytes"]
    run = json.loads((REAL / f"{name}.run.json").read_text())
    setup = configs.planner_setup(configs.by_name(run["config"]))
    predicted = memory_report(setup).to_json()
    rows = compare({"components": peak["components"], "allocated_bytes": peak["allocated_bytes"],
                    "reserved_bytes": peak["reserved_bytes"]}, predicted)
    assert rows["available"] and {row["class"] for row in rows["rows"]} >= {"weights", "activations", "optimizer"}
    # The allocated peak the snapshot shows and planner's prediction agree within 10%.
    assert predicted["allocated_peak_bytes"] == pytest.approx(peak["allocated_bytes"], rel=0.10)
