"""Job resolution: the model's reference job, a job file, command-line options (in that order of
priority, lowest first), and one-paragraph errors for what is missing or wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.specs.job_input import resolve_job
from planner.specs.catalog import load_model

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def test_reference_job_is_the_default():
    job = resolve_job(load_model("v3"))
    assert (job.gpus, job.global_batch, job.seq_len, job.precisions) == (256, 8192, 4096, ["bf16"])
    assert "Table 17" in job.source
    assert job.tokens_per_step == 8192 * 4096


def test_options_override_and_drop_the_reference_source():
    job = resolve_job(load_model("v3"), gpus=512, precision="fp8,bf16", memory_margin_gib=2)
    assert (job.gpus, job.global_batch, job.seq_len) == (512, 8192, 4096)
    assert job.precisions == ["fp8", "bf16"] and job.default_precision == "fp8"
    assert job.memory_margin_bytes == 2 * 2**30
    assert job.source is None  # no longer the published run


def test_job_file_then_options(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("gpus: 1024\nglobal_batch: 2048\nseq_len: 8192\nprecisions: [bf16, fp8]\n")
    job = resolve_job(load_model("llama3.1-70b"), job_file=path, seq_len=4096)
    assert (job.gpus, job.global_batch, job.seq_len, job.precisions) == (1024, 2048, 4096, ["bf16", "fp8"])


@pytest.mark.parametrize("text, words", [
    ("gpus: -8\n", "field 'gpus' = -8"),
    ("gpus: 8\nbatch: 16\n", "field 'batch' is not a known job field"),
    ("gpus: 8\nprecisions: [bf16, bf16]\n", "precisions lists a value twice"),
    ("gpus: [8\n", "is not valid YAML at line"),
    ("- 8\n", "must hold a YAML mapping"),
])
def test_bad_job_files_name_file_and_field(tmp_path, text, words):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(PlannerError) as info:
        resolve_job(load_model("v3"), job_file=path)
    msg = info.value.paragraph()
    assert words in msg and str(path) in msg and "\n" not in msg


def test_a_model_without_reference_job_needs_the_job_spelled_out():
    imported = load_model(str(FIXTURES / "llama3.1-8b" / "config.json"))
    with pytest.raises(PlannerError, match="missing gpus, global_batch, seq_len.*--gpus"):
        resolve_job(imported)
    job = resolve_job(imported, gpus=8, global_batch=128, seq_len=8192)
    assert job.gpus == 8
