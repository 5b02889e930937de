"""`planner memtrace` end to end: text, stable JSON, the PNG, one-paragraph errors, and planner's
prediction beside the measurement (with the memory model absent and with a stand-in)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "memtrace"))  # the synthetic-snapshot helpers
from memtrace_helpers import GiB, synth, write_pickle  # noqa: E402
from planner.cli import main  # noqa: E402
from planner.errors import PlannerError  # noqa: E402
from planner.memtrace.predict import UNAVAILABLE, compare  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    return synth.write_files(tmp_path_factory.mktemp("memtrace"))


def _run(capsys, *args) -> tuple[int, str, str]:
    code = main(["memtrace", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_report(capsys, files):
    code, out, err = _run(capsys, files["staircase"])
    assert code == 0, err
    for part in ("Timeline:", "OOM at event", "Peak:", "Allocator at the peak:", "Diagnosis: Case B", "cause: staircase"):
        assert part in out


def test_json_is_stable_and_sorted(capsys, files):
    code, first, _ = _run(capsys, files["fragmentation"], "--json")
    _, second, _ = _run(capsys, files["fragmentation"], "--json")
    assert code == 0 and first == second
    data = json.loads(first)
    assert first.strip() == json.dumps(data, indent=2, sort_keys=True)
    assert {"snapshot", "timeline", "peak", "allocator_at_peak", "diagnosis", "notes", "planner_version"} <= set(data)
    assert data["diagnosis"]["case"] == "B"
    assert set(data["peak"]["components"]) == {"weights", "gradients", "optimizer", "activations", "transient",
                                               "comm_buffers", "unknown"}


def test_plot_writes_a_png(capsys, files, tmp_path):
    png = tmp_path / "timeline.png"
    code, out, err = _run(capsys, files["stream_split"], "--plot", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    code, _, err = _run(capsys, files["stream_split"], "--plot", tmp_path / "t.jpg")
    assert code == 2 and "PNG" in err


def test_capacity_option(capsys, files):
    code, out, _ = _run(capsys, files["fits"], "--capacity", "80", "--json")
    d = json.loads(out)["diagnosis"]
    assert (d["case"], d["capacity_bytes"], d["capacity_source"]) == ("fits", 80 * GiB, "--capacity")
    code, _, err = _run(capsys, files["fits"], "--capacity", "-1")
    assert code == 2 and "positive" in err


def test_transient_window_option(capsys, files):
    _, out, _ = _run(capsys, files["case_a"], "--json")
    _, wide, _ = _run(capsys, files["case_a"], "--json", "--transient-window", "0")
    base, zero = json.loads(out)["peak"], json.loads(wide)["peak"]
    assert base["classification"]["transient_max_allocs"] == 8 and zero["classification"]["transient_max_allocs"] == 0
    assert base["components"]["transient"] > 0
    # With a zero window only allocations freed before any other allocation count as transient.
    assert zero["components"]["transient"] <= base["components"]["transient"]


def test_hw_gives_the_limit(capsys, files):
    code, out, err = _run(capsys, files["fits"], "--hw", "h100", "--json")
    assert code == 0, err
    d = json.loads(out)["diagnosis"]
    assert d["capacity_source"] == "usable HBM of h100" and d["case"] == "fits"


@pytest.mark.parametrize("name", ["empty.pickle", "truncated.pickle", "not_a_snapshot.pickle", "bad_event.pickle"])
def test_bad_files_give_one_paragraph_and_exit_2(capsys, files, name):
    code, out, err = _run(capsys, files[name])
    assert code == 2 and out == ""
    assert err.startswith("Error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_malicious_file_via_cli(capsys, tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pickle"
    path.write_bytes(synth.malicious_bytes(marker))
    code, _, err = _run(capsys, path)
    assert code == 2 and "Refused to load" in err and not marker.exists()


def test_model_options_must_come_together(capsys, files):
    code, _, err = _run(capsys, files["fits"], "--model", "v3")
    assert code == 2 and "--hw and --plan" in err
    code, _, err = _run(capsys, files["fits"], "--plan", "pp=4")
    assert code == 2 and "--model" in err
    code, _, err = _run(capsys, files["fits"], "--model", "v3", "--hw", "h100", "--plan", "pp=4,vpp=4,ep=64")
    assert code == 2 and "[layers-divisible]" in err  # the plan is checked even without the memory model


PLAN = "pp=4,vpp=4,ep=64,mbs=1,layout=Ettt|(tttt|)*13ttt|tttmL"  # DeepSeek-V3 reference (61 layers)


def test_prediction_not_available_yet(capsys, files, monkeypatch):
    monkeypatch.setitem(sys.modules, "planner.cost.memory", None)  # import fails as before the model lands
    code, out, err = _run(capsys, files["case_a"], "--model", "v3", "--hw", "h100", "--plan", PLAN)
    assert code == 0, err
    assert "Prediction not available yet: planner.cost.memory.memory_report" in out
    code, out, _ = _run(capsys, files["case_a"], "--model", "v3", "--hw", "h100", "--plan", PLAN, "--json")
    assert json.loads(out)["prediction"] == {"available": False, "reason": UNAVAILABLE}


def _fake_memory(components: dict, stages: list | None = None) -> types.ModuleType:
    mod = types.ModuleType("planner.cost.memory")
    seen = []

    class _Report:
        def to_json(self):
            return {"peak_bytes": sum(components.values()), "capacity_bytes": 80 * GiB, "worst_stage": 0,
                    "components": components, "stages": stages or [{"peak_bytes": sum(components.values()),
                                                                    "components": components}]}

    def memory_report(setup):
        seen.append(setup)
        return _Report()

    mod.memory_report = memory_report
    mod.seen = seen
    return mod


def test_prediction_beside_the_measurement(capsys, files, monkeypatch):
    comps = {"weights": 10 * GiB, "gradients": 20 * GiB, "optimizer": 28 * GiB, "activations": 14 * GiB,
             "transient": 2 * GiB, "comm_buffers": GiB, "allocator": 3 * GiB}
    fake = _fake_memory(comps)
    monkeypatch.setitem(sys.modules, "planner.cost.memory", fake)
    code, out, err = _run(capsys, files["case_a"], "--model", "v3", "--hw", "h100", "--plan", PLAN, "--json")
    assert code == 0, err
    setup = fake.seen[0]
    assert (setup.model.name, setup.hw.name, setup.plan.pp, setup.job.gpus) == ("deepseek-v3", "h100", 4, 256)
    pred = json.loads(out)["prediction"]
    rows = {r["class"]: r for r in pred["rows"]}
    assert rows["optimizer"] == {"class": "optimizer", "predicted_bytes": 28 * GiB, "measured_bytes": 30 * GiB,
                                 "delta_bytes": 2 * GiB, "ratio": round(30 / 28, 4)}
    assert rows["unknown"]["predicted_bytes"] is None
    code, out, _ = _run(capsys, files["case_a"], "--model", "v3", "--hw", "h100", "--plan", PLAN)
    assert "Prediction vs measurement (worst stage)" in out


def test_compare_on_plain_dicts():
    measured = {"components": {"weights": 5, "gradients": 6, "optimizer": 7, "activations": 8, "transient": 1,
                               "comm_buffers": 0, "unknown": 3}, "allocated_bytes": 30, "reserved_bytes": 34}
    predicted = {"peak_bytes": 40, "components": {"weights": 5, "gradients": 5, "optimizer": 8, "activations": 10,
                                                  "transient": 2, "comm_buffers": 1, "allocator": 9},
                 "stages": [{"peak_bytes": 40, "components": {"weights": 4}}, {"peak_bytes": 20, "components": {"weights": 1}}]}
    out = compare(measured, predicted)
    rows = {r["class"]: r for r in out["rows"]}
    assert rows["allocator"]["measured_bytes"] == 4 and rows["allocator"]["delta_bytes"] == -5
    assert rows["unknown"]["measured_bytes"] == 3 and any("lower bounds" in n for n in out["notes"])
    assert out["total"]["predicted_bytes"] == 40 and out["total"]["measured_bytes"] == 34
    st1 = compare(measured, predicted, stage=1)
    assert st1["stage_label"] == "stage 1" and {r["class"]: r for r in st1["rows"]}["weights"]["predicted_bytes"] == 1
    assert {r["class"]: r for r in st1["rows"]}["gradients"]["predicted_bytes"] is None
    with pytest.raises(PlannerError, match="--stage 5"):
        compare(measured, predicted, stage=5)
    with pytest.raises(PlannerError, match="no 'components'"):
        compare(measured, {"peak_bytes": 1})


def test_help_stays_light():
    code = ("import sys; from planner.cli import main; main(['--help']); "
            "print([m for m in ('numpy', 'matplotlib', 'planner.memtrace.timeline') if m in sys.modules])")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert "memtrace" in res.stdout
    assert res.stdout.strip().splitlines()[-1] == "[]"


def test_snapshot_written_by_the_test_helper_round_trips(tmp_path, capsys):
    path = write_pickle(tmp_path / "x.pickle", synth.case_a())
    code, out, _ = _run(capsys, path, "--json", "--top", "3")
    assert code == 0 and len(json.loads(out)["peak"]["top_allocations"]) == 3
