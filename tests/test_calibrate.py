"""`planner calibrate` (issue #11): the committed H200 calibration, the summary the time model reads,
the one-paragraph error without PyTorch/CUDA, and the micro-benchmarks on the CPU with tiny shapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from planner.calibrate import bench
from planner.calibrate.schema import Calibration, CalibrationRaw
from planner.cli import main

ROOT = Path(__file__).resolve().parents[1]
CAL = ROOT / "results" / "calibration" / "h200-2026-11-29.yaml"
RAW = ROOT / "results" / "calibration" / "h200-2026-11-29-raw.json"


def test_committed_h200_calibration_loads_for_the_time_model():
    from planner.specs.calibration import load_calibration

    cal = load_calibration(str(CAL))
    assert cal.hardware == "h200" and "NVIDIA H200" in cal.source
    recipes = {g.recipe for g in cal.gemm}
    assert recipes == {"bf16", "tensorwise"}
    best_bf16 = max(g.tflops for g in cal.gemm if g.recipe == "bf16")
    assert 600 < best_bf16 < 990  # below the 989 TFLOP/s datasheet peak
    assert max(g.tflops for g in cal.gemm if g.recipe == "tensorwise") > 1.5 * best_bf16
    assert 3.5e12 < cal.hbm_bandwidth < 4.8e12
    assert cal.attention is not None and cal.attention.fwd_tflops > 300


def test_raw_tables_cover_the_time_models_shapes():
    raw = CalibrationRaw.model_validate_json(RAW.read_text())
    assert raw.device.name == "NVIDIA H200" and raw.device.capability == (9, 0) and not raw.errors
    ms = {r.m for r in raw.gemm}
    assert {256, 16384} <= ms
    assert {r.head_dim for r in raw.attention} == {64, 128, 192}
    assert {r.backend for r in raw.attention} == {"flash", "cudnn", "efficient"}


def test_from_raw_rebuilds_the_same_calibration(tmp_path):
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--out", str(out), "--from-raw", str(RAW), "--hw", "h200"]) == 0
    import yaml

    rebuilt = Calibration.model_validate(yaml.safe_load(out.read_text()))
    committed = Calibration.model_validate(yaml.safe_load(CAL.read_text()))
    assert rebuilt.gemm == committed.gemm and rebuilt.attention == committed.attention
    assert (tmp_path / "cal-raw.json").exists()


def test_summary_picks_the_best_long_sequence_attention():
    raw = {"date": "2026-01-01T00:00:00+00:00",
           "device": {"name": "X", "capability": [9, 0], "sm_count": 1, "total_memory_bytes": 1, "torch": "t", "cuda": "c",
                      "cudnn": 1},
           "gemm": [{"dtype": "bf16", "m": 1, "n": 1, "k": 1, "seconds": 1.0, "tflops": 5.0}],
           "copy_rows": [{"bytes": 1, "seconds": 1.0, "bandwidth": 3.0e12}, {"bytes": 2, "seconds": 1.0, "bandwidth": 4.0e12}],
           "attention": [
               {"backend": "flash", "batch": 1, "heads": 1, "seq": 4096, "head_dim": 128, "causal": True, "fwd_s": 1,
                "fwd_bwd_s": 2, "fwd_tflops": 900, "bwd_tflops": 900},
               {"backend": "flash", "batch": 1, "heads": 1, "seq": 8192, "head_dim": 128, "causal": True, "fwd_s": 1,
                "fwd_bwd_s": 2, "fwd_tflops": 300, "bwd_tflops": 250},
               {"backend": "cudnn", "batch": 1, "heads": 1, "seq": 8192, "head_dim": 128, "causal": True, "fwd_s": 1,
                "fwd_bwd_s": 2, "fwd_tflops": 500, "bwd_tflops": 450}],
           "kernel_overhead_s": 5e-6}
    cal = Calibration.model_validate(bench.summarize(raw, "h200", "0"))
    assert cal.hbm_bandwidth == 4.0e12
    assert (cal.attention.fwd_tflops, cal.attention.keys_per_query) == (500, 4096)
    assert cal.kernel_overhead_s == 5e-6


def test_without_torch_the_error_is_one_paragraph(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ModuleNotFoundError
    code = main(["calibrate", "--out", str(tmp_path / "c.yaml")])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert err.startswith("Error: planner calibrate measures a GPU with PyTorch") and err.count("\n") == 1
    assert not (tmp_path / "c.yaml").exists()


def test_without_cuda_the_error_is_one_paragraph(capsys, tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    code = main(["calibrate", "--out", str(tmp_path / "c.yaml")])
    err = capsys.readouterr().err
    assert code != 0 and "needs a CUDA GPU" in err and err.count("\n") == 1


def test_benchmarks_run_on_the_cpu_with_tiny_shapes(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (pip install torch for the CPU smoke test)")
    out = tmp_path / "cpu.json"
    assert main(["calibrate", "--device", "cpu", "--out", str(out), "--hw", "h200"]) == 0
    cal = Calibration.model_validate(json.loads(out.read_text()))
    raw = CalibrationRaw.model_validate_json((tmp_path / "cpu-raw.json").read_text())
    assert len(raw.gemm) == len(bench.tiny_options().m_values) * len(bench.tiny_options().nk_pairs)
    assert cal.gemm and cal.hbm_bandwidth and cal.attention
