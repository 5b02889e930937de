"""planner against published training runs (tests/data/published_runs.yaml): the validation numbers
per class are asserted at their current values, so a change to the model that moves them fails
here and has to update them on purpose (with the report: `planner results --only published-runs`).

Replaces the range checks of tests/test_time_sanity.py (0.15 < MFU < 0.7), which no model change
could fail. Issue 20's targets (validation subset: |signed error| median <= 10 %, worst <= 25 %,
every class median within +-10 %) are tested one by one: what holds is asserted, what does not
is a strict expected failure with its measured number.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from planner.validate import PUBLISHED_RUNS, validate_file
from tests._published import published_runs

RESULTS = Path(__file__).resolve().parents[1] / "results" / "validation"

# (runs counted, median signed error, median |error|, worst signed error) on tokens/s per GPU,
# predicted / measured - 1, at the model of this commit.
CURRENT = {
    "validation": {
        "all": (100, -0.0154, 0.0771, +0.3751),
        "MoE / Blackwell / bf16": (9, +0.0961, 0.1118, +0.3306),
        "MoE / Blackwell / fp8": (30, -0.0128, 0.0870, +0.3751),
        "MoE / Hopper / bf16": (10, -0.0814, 0.0814, -0.3013),
        "MoE / Hopper / fp8": (6, -0.0522, 0.0522, -0.2438),
        "dense / Blackwell / fp8": (15, -0.0170, 0.0307, -0.0975),
        # the three NVFP4 runs (issue 39): nothing fitted on them
        "dense / Blackwell / nvfp4": (3, -0.0698, 0.0698, -0.1165),
        "dense / Hopper / bf16": (10, +0.0341, 0.1189, -0.2585),
        "dense / Hopper / fp8": (17, +0.0040, 0.0772, +0.2313),
    },
    "calibration": {
        "all": (33, -0.0023, 0.0872, +0.5868),
        "MoE / Blackwell / bf16": (3, +0.1439, 0.1439, +0.5868),
        "MoE / Blackwell / fp8": (11, +0.0007, 0.0484, +0.3303),
        "MoE / Hopper / bf16": (5, -0.1069, 0.1069, -0.1678),
        "MoE / Hopper / fp8": (1, +0.4185, 0.4185, +0.4185),
        "dense / Blackwell / fp8": (7, -0.0125, 0.0660, +0.1420),
        "dense / Hopper / bf16": (1, +0.0035, 0.0035, +0.0035),
        "dense / Hopper / fp8": (5, +0.0471, 0.0872, +0.1728),
    },
}
MEDIAN_TOL = 0.005  # half a percentage point
WORST_TOL = 0.01

# Runs that anchor one mechanism each (signed error now): the Megatron-LM DeepSeek-V3 GB200 guide's
# launch script, the newest Megatron-Bridge DeepSeek-V3 GB200 row, the Llama 3 paper's 8,192-GPU run,
# a dense Blackwell FP8 run, cross-node EP over InfiniBand, a GB300 MoE run.
ANCHORS = {
    "mcg-dsv3-gb200-mxfp8-step13": +0.0193,
    "mb2608-deepseek-v3-gb200-fp8mx-256gpu": -0.0792,
    "llama3-405b-8k-h100-8192gpu": -0.0154,
    "mb2606-llama31-405b-gb200-fp8mx-256gpu": -0.0660,
    "zoo-qwen3-235b-h100-256gpu-bf16-deepep-crossnode-ep32": -0.1051,
    "mb2608-qwen3-235b-a22b-gb300-fp8mx-256gpu": +0.0664,
    # per-tensor current scaling (--fp8-recipe tensorwise) on GB200: -13.0 % when costed as MXFP8
    "mb2606-llama31-405b-gb200-fp8cs-256gpu": +0.0307,
    # eager Transformer Engine MoE (no CUDA graphs), host-bound: +23.4 % before the host term, +7.0 %
    # before gpt-oss's unfused RoPE (YaRN mscale), eager GLU clamps and per-expert fc2 bias
    "mb2602-gpt-oss-120b-h100-bf16-64gpu": -0.0577,
    # torchtitan's sdpa attention (FlashAttention-2) on 256K tokens with CP8: +114 % at TE's rates, +32.6 %
    # on the catalog's H100 SXM 80GB instead of the Grand Teton board it ran on (2.4 TB/s HBM2e, 500 W)
    "tt-llama31-8b-h100-8gpu-fsdp1-cp8-seq256k": +0.1749,
    # NCCL all-to-all across nodes at one NIC's rate (PXN forwarding): -17.1 % at the earlier 0.60;
    # +5.4 % before the combined 1F1B's stage host time (ep_overlap_host_s, eager layers)
    "mb260401-qwen3-235b-a22b-h100-fp8cs-256gpu": -0.0510,
    # torchtitan's per-op selective activation checkpointing (recompute=op), compiled: not evaluable before
    "tt-llama31-8b-h100-8gpu-fsdp-compile-bf16": -0.0155,
    "tt-llama31-8b-h100-128gpu-fsdp-compile-float8": -0.0103,
    # torchao's rowwise FP8 with its own casts and rescales: +29.7 % costed as Transformer Engine's casts
    "tt2506-llama31-70b-h100-256gpu-fsdp32-tp8-f8rowwise-vanillatp": +0.0786,
}


@pytest.fixture(scope="module")
def report() -> dict:
    return validate_file(PUBLISHED_RUNS)


def test_every_evaluable_run_is_evaluated_and_read_as_its_plan_says(report):
    failed = [(r["name"], r.get("reason")) for r in report["runs"] if r["status"] != "evaluated"]
    declared = {r.name for r in published_runs() if r.not_evaluable}
    assert [f for f in failed if f[0] not in declared] == []
    c = report["counts"]
    assert c["read_from_megatron_flags"] >= 100 and c["reader_disagreements"] == 0


@pytest.mark.parametrize("subset", ["validation", "calibration"])
def test_class_statistics_hold_at_their_current_values(report, subset):
    got = report["summary"][subset]
    seen = {"all": got["all"], **got["classes"]}
    assert set(seen) == set(CURRENT[subset])
    for name, (n, median, median_abs, worst) in CURRENT[subset].items():
        s = seen[name]
        assert s["n"] == n, name
        assert s["median_signed_error"] == pytest.approx(median, abs=MEDIAN_TOL), name
        assert s["median_abs_error"] == pytest.approx(median_abs, abs=MEDIAN_TOL), name
        assert s["worst_signed_error"] == pytest.approx(worst, abs=WORST_TOL), name


# Peak reserved memory where the source prints it (torchtitan's rows): (runs, median signed error,
# median |error|, worst signed error). The 70B FSDP32 x TP8 rows (one per subset) moved from
# -24.8 % / -20.1 % to -10.3 % / -4.6 % when the head got torchtitan's loss parallel (one more fp32
# logits tensor in the loss's backward, measured: tests/test_torchtitan_loss_memory.py) and the
# output linear's whole gathered input; the rest of the 70B gap (the vanilla-TP run 4.3 GiB above
# the async-TP one at the same plan) is not modeled.
MEMORY = {"validation": (12, -0.0177, 0.0352, -0.0635),
          "calibration": (2, -0.0730, 0.0730, -0.1026)}


@pytest.mark.parametrize("subset", ["validation", "calibration"])
def test_memory_statistics_hold_at_their_current_values(report, subset):
    n, median, median_abs, worst = MEMORY[subset]
    s = report["memory_summary"][subset]
    assert s["n"] == n
    assert s["median_signed_error"] == pytest.approx(median, abs=MEDIAN_TOL)
    assert s["median_abs_error"] == pytest.approx(median_abs, abs=MEDIAN_TOL)
    assert s["worst_signed_error"] == pytest.approx(worst, abs=WORST_TOL)


def test_anchor_runs(report):
    by = {r["name"]: r for r in report["runs"]}
    for name, err in ANCHORS.items():
        assert by[name]["errors"]["throughput"] == pytest.approx(err, abs=MEDIAN_TOL), name


# Ranking quality (issue 40): jobs that ran several plans (planner.validate.ranking), at the model of
# this commit. Issue 40's acceptance is at least 80 % of the pairs more than 5 % apart ordered right.
RANKING = {"series": 28, "configurations": 78, "pairs": 102, "decisive_pairs": 93, "ordered_right": 87}
RANKING_TAU_B = 0.866
# (measured faster, measured slower) that planner orders otherwise. Four are Qwen3-235B on 256 H100: the
# FSDP + EP8 run with full recompute (and the cross-node EP32 DeepEP run) measured faster than planner
# predicts (the same runs are planner's worst MoE / Hopper / bf16 errors, -30 % and -11 %). The other two
# are torchtitan rows of two releases (the newer one faster with the same settings; planner sees only the
# compiled cross entropy, a predicted tie) and bf16 async TP against fp8 tensorwise vanilla TP (5.6 %
# apart, predicted 4 % the other way).
MISORDERED = {
    ("zoo-qwen3-235b-h100-256gpu-bf16-deepep-crossnode-ep32", "mb2511-qwen3-235b-a22b-h100-fp8cs-256gpu"),
    ("zoo-qwen3-235b-h100-256gpu-bf16-deepep-intranode-ep8-fsdp", "mb2511-qwen3-235b-a22b-h100-fp8cs-256gpu"),
    ("zoo-qwen3-235b-h100-256gpu-bf16-deepep-intranode-ep8-fsdp", "zoo-qwen3-235b-h100-256gpu-bf16-deepep-crossnode-ep32"),
    ("zoo-qwen3-235b-h100-256gpu-bf16-deepep-intranode-ep8-fsdp", "zoo-qwen3-235b-h100-256gpu-bf16-a2a-intranode-ep8-pp32"),
    ("tt2506-llama31-70b-h100-256gpu-fsdp32-tp8-f8tensorwise-asynctp", "tt-llama31-70b-h100-256gpu-fsdp32-tp8-float8-asynctp"),
    ("tt2506-llama31-8b-h100-64gpu-fsdp8-tp8-f8tensorwise-vanillatp", "tt2506-llama31-8b-h100-64gpu-fsdp8-tp8-bf16-asynctp"),
}


def test_issue_40_ranking_orders_at_least_80_percent_of_the_pairs_right(report):
    assert report["ranking"]["overall"]["ordered_right_share"] >= 0.80


def test_ranking_holds_at_its_current_values(report):
    rk = report["ranking"]
    overall = rk["overall"]
    assert {k: overall[k] for k in RANKING} == RANKING
    assert overall["ordered_right_share"] == pytest.approx(RANKING["ordered_right"] / RANKING["decisive_pairs"])
    assert overall["kendall_tau_b"] == pytest.approx(RANKING_TAU_B, abs=0.005)
    wrong = {(m["faster_measured"], m["slower_measured"]) for s in rk["series"] for m in s["misordered"]}
    assert wrong == MISORDERED
    # a series is one job: every configuration of it ran the same model, hardware, GPUs, batch and length
    by = {r["name"]: r for r in report["runs"]}
    for s in rk["series"]:
        for c in s["configurations"]:
            run = by[c["run"]]
            assert (run["model"], run["hardware"], run["gpus"], run["global_batch"], run["seq_len"]) == (
                s["model"], s["hardware"], s["gpus"], s["global_batch"], s["seq_len"])


# Issue 20's targets on the validation subset, one test each. Classes whose median signed error
# is within +-10 % are asserted; the subset-wide targets not met are strict expected failures with
# the measured numbers (reaching one fails the suite until it becomes an assertion).
# MoE / Blackwell / bf16 is at +9.6 % since Blackwell's 256-wide GEMM tiles (gemm_tile) and measured
# window attention (flash_window_half_keys): five of its nine runs are gpt-oss-120b, still
# over-predicted on every Blackwell GPU by +10 to +33 %
# (docs/research/gpt-oss-blackwell.md); the other four are at -16 to +8 %.
CLASSES_MEETING_THE_MEDIAN_TARGET = ("MoE / Blackwell / bf16", "MoE / Blackwell / fp8", "MoE / Hopper / bf16",
                                     "MoE / Hopper / fp8", "dense / Blackwell / fp8", "dense / Hopper / bf16",
                                     "dense / Hopper / fp8", "dense / Blackwell / nvfp4")


@pytest.mark.parametrize("klass", CLASSES_MEETING_THE_MEDIAN_TARGET)
def test_issue_20_class_median_within_10_percent(report, klass):
    assert abs(report["summary"]["validation"]["classes"][klass]["median_signed_error"]) <= 0.10


def test_issue_20_median_abs_error(report):
    assert report["summary"]["validation"]["all"]["median_abs_error"] <= 0.10


@pytest.mark.xfail(strict=True, reason="worst signed error +37.5 % (mcg-dsv3-gb200-mxfp8-step03; target 25 %)")
def test_issue_20_worst_error(report):
    assert abs(report["summary"]["validation"]["all"]["worst_signed_error"]) <= 0.25


def test_issue_20_targets_as_the_report_states_them(report):
    met = report["targets"]["met_on_validation"]
    assert met == {"every class median within +-10%": True, "median_abs_error <= 10%": True,
                   "worst |error| <= 25%": False}


def _micro_batch(plan: str) -> int:
    """A plan string's micro-batch size (canonical plans leave out mbs=1)."""
    keys = dict(kv.split("=", 1) for kv in plan.split(",") if "=" in kv)
    return int(keys.get("mbs", "1"))


def mbs_pairs(report: dict) -> list[tuple[str, str, float, float]]:
    """(smaller-mbs run, larger-mbs run, measured ratio, predicted ratio) of tokens/s per GPU, larger
    over smaller, for every two counted runs of one job (model, hardware, GPUs, batch, sequence)
    that ran different micro-batch sizes (other levers may differ too)."""
    runs = [r for r in report["runs"] if r["status"] == "evaluated" and r["counted"]]
    jobs: dict[tuple, list[dict]] = {}
    for r in runs:
        jobs.setdefault((r["model"], r["hardware"], r["gpus"], r["global_batch"], r["seq_len"]), []).append(r)
    out = []
    for rs in jobs.values():
        for i, a in enumerate(rs):
            for b in rs[i + 1:]:
                if _micro_batch(a["plan"]) == _micro_batch(b["plan"]):
                    continue
                small, large = sorted((a, b), key=lambda r: _micro_batch(r["plan"]))
                meas, pred = (large[k]["tokens_per_s_per_gpu"] / small[k]["tokens_per_s_per_gpu"]
                              for k in ("measured", "predicted"))
                out.append((small["name"], large["name"], meas, pred))
    return out


def test_a_larger_micro_batch_is_credited_no_more_than_published_pairs_measured(report):
    """Issue 39's suspect: the search's plans gain most from a larger micro-batch (the host's issue
    time per micro-batch hidden behind more GPU work). Where one job ran two micro-batch sizes the
    model credits the larger one with no more than was measured: over the 18 pairs the median of
    predicted over measured ratio is 0.97 (0.61: Qwen3-235B on 256 B300, mbs 1 -> 2 measured
    +121 %; 1.11 at most: Llama 3 70B on GB200, pipeline mbs 1 -> FSDP mbs 2), and the largest
    change, Qwen3-30B-A3B on 8 B200 mbs 1 -> 4 (with HybridEP and attention graphs), is predicted
    +175 % against +192 % measured. A model change that charges more per micro-batch (the host
    constants, per-micro-batch communication) raises these ratios and fails here."""
    pairs = mbs_pairs(report)
    assert len(pairs) >= 15
    over = [pred / meas for _, _, meas, pred in pairs]
    assert statistics.median(over) <= 1.03 and max(over) <= 1.15, pairs  # 3 % and 15 %: room for noise, not for a trend
    by = {(s, big): (meas, pred) for s, big, meas, pred in pairs}
    meas, pred = by["mb2511-qwen3-30b-a3b-b200-fp8mx-8gpu", "mb260401-qwen3-30b-a3b-b200-fp8mx-8gpu"]
    assert meas == pytest.approx(27136 / 9299) and 0.9 <= pred / meas <= 1.05


def test_calibration_subset_follows_the_declared_rule():
    """The header's rule: per class (MoE|dense x Hopper|Blackwell x bf16|fp8), the evaluable runs of
    confidence H in name order, every third from the second; at most a third of the evaluable runs,
    at least one in every class with two or more such runs. Runs made evaluable later
    (``evaluable_since``) are validation runs, outside the rule, and never flagged."""
    from planner.specs.catalog import load_hardware, load_model

    runs = published_runs()
    classes: dict[tuple, list] = {}
    for r in runs:
        if r.not_evaluable or r.evaluable_since or r.confidence != "H":
            continue
        key = (load_model(r.model).is_moe, load_hardware(r.hardware).generation == "hopper", r.precision)
        classes.setdefault(key, []).append(r)
    expected = set()
    for members in classes.values():
        names = sorted(m.name for m in members)
        expected |= set(names[1::3])
        assert len(names) < 2 or set(names[1::3])
    flagged = {r.name for r in runs if r.calibration}
    assert flagged == expected
    assert not any(r.calibration for r in runs if r.evaluable_since)
    assert len(flagged) <= sum(not r.not_evaluable for r in runs) / 3


def test_committed_report_reproduces(report):
    """results/validation/published-runs.{md,json} are what the generator writes now (the same check
    as `planner results --check --only published-runs`, from the evaluation above)."""
    from planner.commands.validate import COMMAND
    from planner.report.results import dump_json
    from planner.validate.report import markdown

    assert (RESULTS / "published-runs.json").read_text() == dump_json(report)
    assert (RESULTS / "published-runs.md").read_text() == markdown(report, COMMAND)
    assert json.loads((RESULTS / "published-runs.json").read_text())["counts"] == report["counts"]
