"""What the held-out GPU series' tests share (tests/test_gpu_graphs4.py, test_gpu_graphs6.py,
test_gpu_mbs5.py): each series was chosen, and planner's predictions committed
(results/validation/gpu-<series>-predictions.json, benchmarks/gpu/predictions.py), before it ran; its
raw JSON sits in results/validation/gpu-raw/<folder>/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.gpu.configs import by_name, planner_setup
from planner.cost.compose import costs_of

RAW = Path(__file__).resolve().parents[1] / "results" / "validation" / "gpu-raw"


def predictions(series: str) -> dict:
    """The predictions written before the series ran, by configuration and GPU."""
    return json.loads((RAW.parent / f"gpu-{series}-predictions.json").read_text())["runs"]


def measured_run(folder: str, name: str, tag: str = "") -> dict:
    return json.loads((RAW / folder / f"{name}{tag}.json").read_text())


def predicted_step(name: str, gpu: str) -> float:
    return float(costs_of(planner_setup(by_name(name), hardware=gpu)).step_s()[0])


def graph_rows(prefix: str) -> dict[str, dict]:
    """benchmarks.gpu.graph_memory's rows (each graphed run against its eager twin) of one series."""
    from benchmarks.gpu.graph_memory import rows

    return {r["config"]: r for r in rows() if r["config"].startswith(prefix)}


def known_misses(names, misses: dict[str, str]) -> list:
    """``names`` as pytest parameters, those in ``misses`` a strict xfail giving its numbers (a fix shows
    as XPASS and fails, so the record is updated with it)."""
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=misses[n])) if n in misses else n
            for n in names]


def check_series(series: str, configs, folder: str, gpu: str, warmup: int, timed: int) -> None:
    """Every run of ``configs`` measured in ``folder`` on the card predicted, with the protocol's warm-up
    and timed steps, and the step-time model the one the predictions were written with (nothing fitted
    to these runs: a deliberate change to the time model updates the check)."""
    assert gpu.upper() in (RAW / folder / "env.txt").read_text()
    before = predictions(series)
    for cfg in configs:
        r = measured_run(folder, cfg.name)
        assert "error" not in r and r["config"] == cfg.name and r["warmup_steps"] == warmup
        assert len(r["step_times_s"]) == timed
        assert predicted_step(cfg.name, gpu) == pytest.approx(before[cfg.name][gpu]["step_s"], rel=1e-9)
