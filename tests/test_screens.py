"""The first screens of `search` and `explain` read at 80 and at 200 columns (issue 43): lines fit
the width (the full plan string, meant to be copied whole, is the one line allowed past it),
text wraps at spaces only (no word is cut), the status is one short line, `--help` piped keeps a
sane width, and no number prints as a negative zero. One definition of the predicted step and its
band (planner.validate.bands.step_band) serves the table, explain, --markdown and the JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli import main
from planner.search.status import status_brief, status_line
from planner.units import fmt_time
from planner.validate.bands import band_text, step_band

ROOT = Path(__file__).resolve().parents[1]
SEARCH = ["search", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch", "64", "--top", "3"]
EXPLAIN = ["explain", "--model", "qwen3-30b-a3b", "--hw", "h100", "--gpus", "16", "--global-batch", "256",
           "--seq-len", "4096", "--precision", "bf16", "--plan", "pp=2,ep=8,mbs=1,recompute=full"]


def _run(capsys, monkeypatch, argv, columns=None):
    if columns is not None:
        monkeypatch.setenv("COLUMNS", str(columns))
    code = main(list(argv))
    return code, capsys.readouterr().out


def _flat(text: str) -> str:
    return " ".join(text.split())


def _assert_fits(out: str, width: int, whole: list[str]) -> None:
    """Every line within ``width`` except those that are one of ``whole`` (plan strings), each of
    which must stand on a line of its own."""
    stripped = [line.strip() for line in out.splitlines()]
    for w in whole:
        assert w in stripped, f"plan {w!r} is not on a line of its own"
    long = [line for line in out.splitlines() if len(line.rstrip()) > width and line.strip() not in whole]
    assert not long, f"lines over {width} columns: {long}"


_SEARCH_JSON: dict[str, str] = {}
"""SEARCH's --json output, the same at every width: searched once for both widths."""


@pytest.mark.parametrize("width", [80, 200])
def test_search_first_screen_fits_and_cuts_no_word(capsys, monkeypatch, width):
    if "out" not in _SEARCH_JSON:
        _SEARCH_JSON["out"] = _run(capsys, monkeypatch, [*SEARCH, "--json"])[1]
    data = json.loads(_SEARCH_JSON["out"])
    plans = [p["plan_string"] for p in data["plans"]]
    _, out = _run(capsys, monkeypatch, SEARCH, columns=width)
    _assert_fits(out, width, plans)
    # Wrapped text joins back to the one it was: a word cut by a line end would not.
    flat = _flat(out)
    assert _flat(status_brief(data["solver"])) in flat
    top = data["plans"][0]
    assert _flat(band_text(top["time"]["error_band"], top["time"]["step_time_s"])) in flat
    # The status is one short line: the full status only with --verbose (its tail: the JSON
    # sorts the space's degrees, which the full line lists in the space's order).
    full = _flat(status_line(data["solver"]).split("proven out:")[1])
    assert full not in flat
    _, verbose = _run(capsys, monkeypatch, [*SEARCH, "--verbose"], columns=width)
    assert full in _flat(verbose)
    assert "-0%" not in out and "-0 %" not in out and "-0.00" not in out


def test_search_rows_fit_80_columns_for_a_moe_plan_with_every_lever():
    """A long MoE row wraps its levers and degrees at spaces to fit, never cutting a word."""
    from planner.report.tables import ranked_table_lines, search_rows

    plan = {"tp": 1, "cp": 1, "pp": 2, "vpp": 31, "ep": 64, "etp": 1, "dp": 128, "mbs": 4, "sharding": "zero2",
            "precision": "fp8", "recompute": "mla_up_proj+layernorm+moe_act", "offload": "activations",
            "ep_overlap": "on", "moments": "bf16"}
    p = {"rank": 1, "plan": plan, "plan_string": "pp=2,vpp=31,ep=64,mbs=4,recompute=mla_up_proj+layernorm+moe_act",
         "memory": {"peak_bytes": 114.3 * 2**30, "headroom_bytes": 64.5 * 2**30},
         "time": {"step_time_s": 31.22, "tokens_per_s_per_gpu": 4198.0}}
    rows = search_rows([p])
    lines = ranked_table_lines(rows, 80)
    assert all(len(t) <= 80 for kind, t in lines if kind != "plan")
    words = _flat(" ".join(t for kind, t in lines if kind == "row")).split()
    for cell in rows[0][0]:
        assert all(w in words for w in cell.split()), cell
    assert [t.strip() for kind, t in lines if kind == "plan"] == [p["plan_string"]]


@pytest.mark.parametrize("width", [80, 200])
def test_explain_first_screen_fits_and_cuts_no_word(capsys, monkeypatch, width):
    _, js = _run(capsys, monkeypatch, [*EXPLAIN, "--json"])
    data = json.loads(js)
    _, out = _run(capsys, monkeypatch, EXPLAIN, columns=width)
    plan_line = f"plan: {data['plan_string']}"
    _assert_fits(out, width, [plan_line])
    tj = data["time"]
    assert _flat(band_text(tj["error_band"], tj["step_time_s"])) in _flat(out)
    for window in ("recompute window", "end of warmup"):  # the moment column wraps at spaces only
        assert window.split()[0] in out.split()
    assert "…" not in out


def test_help_piped_keeps_a_sane_width():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-m", "planner", "search", "--help"], capture_output=True, text=True,
                         env=env, cwd=ROOT, check=True).stdout
    from planner.cli import HELP_WIDTH_PIPED

    widths = [len(line) for line in out.splitlines()]
    assert max(widths) == HELP_WIDTH_PIPED
    assert "--verbose" in out and "--torchtitan-config" in out


@pytest.mark.parametrize("low, median, high", [(-0.02, 0.03, 0.13), (-0.2154, -0.08139, -0.02495), (0.05, 0.1, 0.2)])
def test_the_band_holds_the_expectation_and_says_when_it_misses_the_prediction(low, median, high):
    band = {"n": 10, "class": "MoE / Hopper / bf16", "median_signed_error": median, "p25_signed_error": low,
            "p75_signed_error": high, "min_signed_error": low - 0.1, "max_signed_error": high + 0.1}
    sb = step_band(16.28, band)
    assert sb.low_s <= sb.expected_s <= sb.high_s
    assert sb.expected_s == pytest.approx(16.28 * (1 + median))
    assert sb.contains_prediction == (low <= 0 <= high)
    text = band_text(band, 16.28)
    assert fmt_time(16.28) in text and fmt_time(sb.low_s) in text and fmt_time(sb.high_s) in text
    if not sb.contains_prediction:
        word = "faster" if high < 0 else "slower"
        assert f"ran {word} than predicted" in text and f"expected near {fmt_time(sb.expected_s)}" in text


def test_explain_json_and_markdown_carry_the_one_band(capsys, monkeypatch):
    _, js = _run(capsys, monkeypatch, [*EXPLAIN, "--json"])
    tj = json.loads(js)["time"]
    eb = tj["error_band"]
    sb = step_band(tj["step_time_s"], eb)
    assert eb["measured_step_time_s_p25_p75"] == [sb.low_s, sb.high_s]
    assert eb["expected_step_time_s"] == sb.expected_s and eb["contains_prediction"] == sb.contains_prediction
    _, md = _run(capsys, monkeypatch, [*EXPLAIN, "--markdown"])
    assert sb.sentence() in md
    _, md = _run(capsys, monkeypatch, [*SEARCH, "--markdown"])
    assert "measured step likely" in md and "predicted step" in md


def test_no_negative_zero():
    assert fmt_time(-1e-9) == "0 µs" and fmt_time(-0.0) == "0 µs" and fmt_time(-2.5) == "-2.50 s"
    band = {"n": 3, "class": "c", "median_signed_error": -0.004, "p25_signed_error": -0.004, "p75_signed_error": 0.1,
            "min_signed_error": -0.001, "max_signed_error": 0.2}
    assert "-0 %" not in band_text(band) and "+0 %" in band_text(band)


# ---- --torchtitan-config on search (and compare, through planner.options) -----------------------
def _custom_model(tmp_path: Path) -> Path:
    """llama3.1-8b under a name planner's torchtitan table does not know (a user's own model)."""
    import yaml

    data = yaml.safe_load((ROOT / "models" / "llama3.1-8b.yaml").read_text())
    data.update(name="my-llama", display_name="My Llama", aliases=[])
    path = tmp_path / "my-llama.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_custom_model_targets_torchtitan_through_its_config(tmp_path, capsys, monkeypatch):
    model = _custom_model(tmp_path)
    job = ["--hw", "h100", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096", "--top", "3"]
    # --max pp=1: the unlimited search's three plans (none pipelined), in a tenth of the time.
    small = ["--max", "pp=1"]
    # Without the function the torchtitan rules reject every plan, and the hint names the option
    # (not --target any, whose plans the torchtitan export would refuse).
    code = main(["search", "--model", str(model), *job, *small, "--target", "torchtitan"])
    err = capsys.readouterr().err
    assert code == 3 and "torchtitan-model" in err and "--torchtitan-config" in err
    code = main(["search", "--model", str(model), *job, *small, "--target", "torchtitan", "--torchtitan-config",
                 "my_models:my_llama", "--json"])
    assert code == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert plans
    for p in plans:  # the export takes every plan the search proposed
        assert main(["export", "--model", str(model), *job[:-2], "--plan", p["plan_string"], "--format",
                     "torchtitan", "--torchtitan-config", "my_models:my_llama"]) == 0, capsys.readouterr().err
        assert "torchtitan.train" in capsys.readouterr().out


def test_target_any_says_which_plans_each_export_takes(tmp_path, capsys):
    """--target any ranks by the shared rules only; each plan then names the rules each export
    would refuse it by, and the torchtitan export takes exactly the plans said to pass."""
    model = _custom_model(tmp_path)
    job = ["--hw", "h100", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096"]
    tt = ["--torchtitan-config", "my_models:my_llama"]
    # every variant (the families shown by default may all be of one kind)
    assert main(["search", "--model", str(model), *job, "--top", "6", "--target", "any", "--all-variants", *tt,
                 "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    verdicts = set()
    for p in plans:
        code = main(["export", "--model", str(model), *job, "--plan", p["plan_string"], "--format", "torchtitan", *tt])
        capsys.readouterr()
        assert (code == 0) == (not p["launchers"]["torchtitan"]), (p["plan_string"], p["launchers"])
        verdicts.add(code == 0)
    assert verdicts == {True, False}  # the case has plans of both kinds: the check can fail
    assert main(["search", "--model", str(model), *job, "--top", "6", "--target", "any", *tt]) == 0
    assert "the exports take #1" in _flat(capsys.readouterr().out)


def test_torchtitan_config_with_target_megatron_is_refused(capsys):
    code = main([*SEARCH, "--target", "megatron", "--torchtitan-config", "llama3:llama3_8b"])
    err = capsys.readouterr().err
    assert code == 2 and "--target torchtitan" in err and "Traceback" not in err


def test_a_malformed_torchtitan_config_is_refused_on_search(capsys):
    code = main([*SEARCH, "--target", "torchtitan", "--torchtitan-config", "not a function"])
    assert code == 2 and "MODULE:FUNCTION" in capsys.readouterr().err


def test_compare_takes_the_torchtitan_config_for_a_custom_model(tmp_path, capsys):
    """compare searches every system under the same option, and its swap tests read it too."""
    model = _custom_model(tmp_path)
    # --max pp=1: the unlimited compare's plans and swap test (no pipelined plan), in a third of the time.
    code = main(["compare", "--model", str(model), "--hw", "h100", "--hw", "h200", "--gpus", "8", "--global-batch", "64",
                 "--seq-len", "4096", "--top", "2", "--tokens", "1e12", "--target", "torchtitan", "--torchtitan-config",
                 "my_models:my_llama", "--max", "pp=1", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    swaps = [s for c in json.loads(out.out)["changes"] for s in c.get("swap", {}).values()]
    assert swaps and all(s.get("rule") != "torchtitan-model" for s in swaps)
