"""The reserved breakdown in explain (issue 41): allocated peak plus the allocator's holding, the
buffers line by line, and the seed's case B per stage."""

from __future__ import annotations

import pytest

from planner.cost.compose import costs_of
from planner.cost.memory import memory_report
from planner.cost.pieces import NCCL_PROTOCOL_BYTES, comm_bytes
from planner.report.tables import reserved_lines

from tests._models import setup_for

MOE = "tp=2,pp=2,ep=8,mbs=1,recompute=full,dispatcher=deepep"
KW = dict(gpus=64, global_batch=512, seq_len=4096)


def _report(plan=MOE, model="qwen3-30b-a3b", **assumptions):
    rep = memory_report(setup_for(model, "h100", plan, **KW, **assumptions))
    return rep.add_reserved_json(rep.to_json())


def test_nccl_protocol_defaults_are_nccls():
    # device.h: DEFAULT_BUFFSIZE 1 << 22; LL: 8 lines x 512 threads x NCCL_STEPS 8 x 16 B; LL128:
    # 120 elements x 640 threads x 8 steps x 8 B.
    assert NCCL_PROTOCOL_BYTES == {"Simple": 4194304, "LL": 524288, "LL128": 4915200}


@pytest.mark.parametrize("impl", ["te", "megatron-local"])
def test_breakdown_lines_add_up_to_the_buffers_and_the_gap(impl):
    setup = setup_for("qwen3-30b-a3b", "h100", MOE, **KW, implementation=impl)
    costs = costs_of(setup)
    lines = costs.comm_lines()
    # The lines are the one composition of the buffers: their sum is comm_bytes, and with the
    # attention-score buffer the stage's comm_buffers.
    assert sum(float(ln.total[0]) if hasattr(ln.total, "__len__") else ln.total for ln in lines) == pytest.approx(
        float(costs.comm_buffers()[0]) - float(costs.attention_score_buffer()[0]), rel=1e-12)
    rep = memory_report(setup, costs)
    mj = rep.add_reserved_json(rep.to_json())
    assert "reserved_breakdown" not in rep.to_json()  # the search's plan JSON stays as it was
    for s in mj["stages"]:
        rb = s["reserved_breakdown"]
        assert rb["reserved_peak_bytes"] == s["peak_bytes"]
        assert rb["allocated_peak_bytes"] == s["allocated_peak_bytes"]
        assert sum(rb["allocator_holding_terms"].values()) == pytest.approx(rb["allocator_holding_bytes"], abs=8)
        assert s["case_b"]["gap_bytes"] == rb["allocator_holding_bytes"]
        groups = {c["group"] for c in rb["communicators"]}
        assert groups == {"tp", "dpcp", "pp", "ep", "edp", "etp"}  # cp = 1: no communicator
        assert rb["dispatcher"]["name"] == "deepep" and rb["dispatcher"]["count"] == 1
        assert rb["graph_pools"]["bytes"] == 0 and "0 without graphs" in rb["graph_pools"]["note"]
        assert rb["gemm_workspaces"]["streams"] == 2
        assert all(c["estimate"] and "NCCL_BUFFSIZE" in c["env"] for c in rb["communicators"])
    assert mj["reserved_breakdown"] == mj["stages"][mj["worst_stage"]]["reserved_breakdown"]


def test_comm_bytes_is_unchanged_by_the_lines():
    """comm_bytes sums the lines: a plan without pipeline, EP or a dispatcher keeps the former sum
    (communicators of groups larger than one, and the workspaces)."""
    from planner.specs.efficiency import load_efficiency
    from planner.specs.plan import Degrees

    mem = load_efficiency("hopper").memory
    m = setup_for("llama3.1-8b", "h100", "tp=2", gpus=8, global_batch=8, seq_len=4096).model
    d = Degrees(tp=2, cp=1, pp=1, vpp=1, dp=4, ep=1, etp=1, edp=4)
    got = comm_bytes(m, mem, d, crosses={}, dispatcher=None, tokens=4096, sp=True)
    # tp, dp x cp and edp communicators, and the workspaces
    want = 3 * mem.nccl_bytes_per_communicator.value + mem.gemm_workspace_bytes.value * mem.gemm_workspace_streams.value
    assert got == want


def test_case_b_terms_under_the_workload_model():
    mj = _report(implementation="megatron-local")
    cb = mj["case_b"]
    terms = {d["term"] for d in cb["drivers"]}
    assert {"stranded", "small_pool", "partial_segments", "recompute", "pipeline"} <= terms
    causes = {d["cause"] for d in cb["drivers"]}
    assert causes <= {"staircase", "fragmentation", "stream split"}
    levers = [x["lever"] for x in cb["shrink"]]
    assert levers[0] == "expandable_segments"
    assert cb["shrink"][0]["gap_bytes"] < cb["gap_bytes"]  # expandable segments shrink the gap
    assert {"fewer_streams", "bucket_sizes"} <= set(levers)


def test_expandable_segments_has_one_term_and_no_expandable_advice():
    cb = _report(implementation="megatron-local", expandable_segments=True)["case_b"]
    assert [d["term"] for d in cb["drivers"]] == ["allocator_fraction"]
    assert "expandable_segments" not in [x["lever"] for x in cb["shrink"]]


def test_case_b_flag_follows_memtraces_thresholds():
    """at_risk: reserved within NEAR_LIMIT of the capacity and the gap at least GAP_B of it; a
    plan far from the limit is not case B."""
    assert _report()["case_b"]["at_risk"] is False


def test_explain_prints_the_breakdown():
    mj = _report(implementation="megatron-local")
    text = "\n".join(reserved_lines(mj))
    assert "allocator holding" in text and "NCCL ep" in text and "CUDA-graph pools" in text
    assert "dispatcher buffers (deepep)" in text
    assert text.count("reserved - allocated") == len(mj["stages"])


@pytest.mark.parametrize("name", ["megatron-none", "megatron-full"])
def test_memtrace_reads_the_predicted_reserved_breakdown_less_the_fixed_term(tmp_path, name):
    """The bundled Megatron-Core snapshots (tests/fixtures/memtrace/real: local spec, 40 M
    parameters, one H200) against explain's reserved breakdown for their configuration. Allocated
    agrees within 5 %; reserved does NOT: planner predicts 2.6 GB against 1.1 GB, and the excess
    is the workload model's fixed small-pool term (1.45 GiB, an intercept fit on 16-78 GiB runs,
    hw_specs/efficiency/hopper.yaml allocator_workload.base_bytes): without it the prediction is
    within 5 % of the snapshot's reserved peak. A toy run's small pool is far smaller, so the term
    should scale with the workload; until it does, small plans read high (safe side)."""
    import gzip
    import json
    from pathlib import Path

    from benchmarks.gpu import configs
    from planner.memtrace.diagnose import peak_gap
    from planner.memtrace.loader import load_snapshot
    from planner.memtrace.report import analyze

    real = Path(__file__).parent / "fixtures" / "memtrace" / "real"
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(gzip.decompress((real / f"{name}.pickle.gz").read_bytes()))
    measured = analyze(load_snapshot(path), source=path.name).report["timeline"]
    run = json.loads((real / f"{name}.run.json").read_text())
    assert measured["reserved_peak_bytes"] == max(s["fwd_bwd_peak_reserved"] for s in run["steps"][-1:])
    # memtrace's gap reads the harness's own counters' gap (torch.cuda.max_memory_reserved less
    # max_memory_allocated of the same step; the trace misses 3-9 MB of the allocated peak, under
    # 1 % of the reserved peak), by the function explain's breakdown uses too.
    step = run["steps"][-1]
    counters_gap = step["fwd_bwd_peak_reserved"] - step["fwd_bwd_peak_allocated"]
    assert abs(measured["peak_gap"]["gap_bytes"] - counters_gap) < 0.01 * measured["reserved_peak_bytes"]
    rep = memory_report(configs.planner_setup(configs.by_name(run["config"])))
    mj = rep.add_reserved_json(rep.to_json())
    rb = mj["reserved_breakdown"]
    assert rb["allocator_holding_bytes"] == peak_gap(rb["reserved_peak_bytes"], rb["allocated_peak_bytes"])["gap_bytes"]
    assert mj["case_b"]["gap_bytes"] == rb["allocator_holding_bytes"]
    assert rb["allocated_peak_bytes"] == pytest.approx(measured["allocated_peak_bytes"], rel=0.05)
    assert rb["reserved_peak_bytes"] > 2 * measured["reserved_peak_bytes"]  # the disagreement, as it stands
    without_fixed = rb["reserved_peak_bytes"] - rb["allocator_holding_terms"]["small_pool"]
    assert without_fixed == pytest.approx(measured["reserved_peak_bytes"], rel=0.05)


def test_rederived_margin_is_the_held_out_reserved_shortfall():
    """benchmarks/gpu/reserved_validation.py: every measured H200 run predicted by the allocator
    model refit without its configuration; the largest measured-over-predicted excess, rounded up
    at the fourth decimal, is the re-derived memory margin (a refit or a new run that moves it
    fails here)."""
    import math

    from benchmarks.gpu.reserved_validation import REDERIVED_MARGIN, held_out, samples, summary

    rows = samples()
    held_out(rows)
    s = summary(rows)
    # 46 runs in the fit (each predicted by the fit without its configuration) and 26 held out of
    # every fit (issue 41's 2.4-13 GiB runs, the first CUDA-graph lease's eager runs; the second
    # lease's 12-30 GiB knee runs and eager drop-and-pad MoE runs): two of the second lease's below
    # their measured reserved peak (-1.9 %, -2.1 %), which sets the margin
    assert s["runs"] == 72 and s["held_out_below_measured"] == 6
    below = sorted(r["run"] for r in rows if r["kind"] == "held-out" and r["loo_error"] < 0)
    assert below == ["graph2-moe128x2-s2k-b2-pad-none", "knee-gqa2-s4k-b1-coreattn"]
    assert REDERIVED_MARGIN == math.ceil(s["held_out_worst_shortfall"] * 1e4) / 1e4
    assert s["in_fit_error_min"] >= 0  # the fit's own rule: none below its measurement
