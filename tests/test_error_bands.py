"""`explain` and `search` print the validation error band of a plan's class next to its
predicted step time (issue 20): results/validation/error-bands.json, written by `planner
results` from the published-runs report (planner.validate.bands)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from planner.report.results import dump_json
from planner.units import fmt_time
from planner.validate.bands import BANDS_FILE, band_of, bands_from_report, load_bands

ROOT = Path(__file__).resolve().parents[1]
REPORT = json.loads((ROOT / "results" / "validation" / "published-runs.json").read_text())


def _run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_the_committed_bands_are_those_of_the_committed_report():
    assert (ROOT / BANDS_FILE).read_text() == dump_json(bands_from_report(REPORT))


def test_each_band_agrees_with_the_report_summary_of_its_class():
    """Same runs as the report's validation summary (counted, evaluated), same median; the
    calibration subset (which constants may be fit on) is not in any band."""
    bands = load_bands()
    summary = REPORT["summary"]["validation"]
    assert set(bands["classes"]) == set(summary["classes"])
    for klass, s in summary["classes"].items():
        b = bands["classes"][klass]
        assert b["n"] == s["n"] and b["median_signed_error"] == pytest.approx(s["median_signed_error"], rel=1e-3)
        assert b["min_signed_error"] <= b["p25_signed_error"] <= b["median_signed_error"] <= b["p75_signed_error"]
        assert max(abs(b["min_signed_error"]), abs(b["max_signed_error"])) == pytest.approx(abs(s["worst_signed_error"]), rel=1e-3)
    assert bands["all"]["n"] == summary["all"]["n"] < REPORT["counts"]["counted"]


def test_quartiles_of_a_known_sample():
    b = band_of([-0.2, -0.1, 0.0, 0.1, 0.6])
    assert (b["median_signed_error"], b["p25_signed_error"], b["p75_signed_error"]) == (0.0, -0.1, 0.1)
    assert (b["min_signed_error"], b["max_signed_error"], b["n"]) == (-0.2, 0.6, 5)


def test_explain_prints_and_returns_the_band_of_the_plans_class(capsys):
    args = ["explain", "--model", "deepseek-v3", "--hw", "gb200-nvl72", "--precision", "fp8", "--plan",
            "pp=4,vpp=4,ep=64,mbs=1,layout=Et*3|(tttt|)*14ttmL"]
    _, out = _run(capsys, *args, "--json")
    tj = json.loads(out)["time"]
    band = tj["error_band"]
    ref = load_bands()["classes"]["MoE / Blackwell / fp8"]
    assert band["class"] == "MoE / Blackwell / fp8" and band["median_signed_error"] == ref["median_signed_error"]
    lo, hi = band["measured_step_time_s_p25_p75"]
    assert lo == pytest.approx(tj["step_time_s"] * (1 + ref["p25_signed_error"]))
    assert hi == pytest.approx(tj["step_time_s"] * (1 + ref["p75_signed_error"]))
    _, text = _run(capsys, *args)
    assert "error band (MoE / Blackwell / fp8" in text.replace("\n", " ")


def test_search_puts_the_band_next_to_each_step_time(capsys):
    args = ["search", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch", "64", "--top", "2"]
    _, out = _run(capsys, *args, "--json")
    plans = json.loads(out)["plans"]
    ref = load_bands()["classes"]["dense / Hopper / bf16"]
    assert plans and all(p["time"]["error_band"]["class"] == "dense / Hopper / bf16" for p in plans)
    assert all(p["time"]["error_band"]["n"] == ref["n"] for p in plans)
    _, text = _run(capsys, *args)
    # The band cell: where the measured step likely falls (planner.validate.bands.step_band).
    for p in plans:
        low, high = p["time"]["error_band"]["measured_step_time_s_p25_p75"]
        assert f"{fmt_time(low).split()[0]}-{fmt_time(high)}" in text
    assert "error band" in text


def test_a_generation_without_published_runs_has_no_band(capsys):
    _, out = _run(capsys, "explain", "--model", "llama3.1-8b", "--hw", "a100", "--gpus", "8", "--global-batch", "64",
                  "--plan", "tp=8", "--json")
    band = json.loads(out)["time"]["error_band"]
    assert band["class"] is None and band["n"] == 0
