"""The allocator setting a plan's reserved memory was costed with goes into the launch script and
comes back from it (issue 41): export writes PYTORCH_CUDA_ALLOC_CONF and NCCL_BUFFSIZE, check and
explain read PYTORCH_CUDA_ALLOC_CONF back, explain's --expandable-segments overrides it."""

from __future__ import annotations

import json

import pytest

from planner.launchers.allocator_env import allocator_environment, expandable_from_env

from tests._models import setup_for

KW = dict(gpus=8, global_batch=8, seq_len=4096)


@pytest.mark.parametrize("conf, want", [
    ("expandable_segments:True", True), ("expandable_segments:False", False),
    ("max_split_size_mb:128,expandable_segments:True", True),
    ("expandable_segments:True,expandable_segments:False", False),  # the last one wins, as in PyTorch
    ("max_split_size_mb:128", None), ("expandable_segments:true", False),  # PyTorch accepts only True/False
])
def test_expandable_from_env(conf, want):
    assert expandable_from_env({"PYTORCH_CUDA_ALLOC_CONF": conf}) is want


def test_not_set_is_none():
    assert expandable_from_env({}) is None


@pytest.mark.parametrize("impl, flag, want", [("te", None, "True"), ("megatron-local", None, "False"),
                                              ("te", False, "False"), ("megatron-local", True, "True")])
def test_environment_follows_the_costed_setting(impl, flag, want):
    env, why = allocator_environment(setup_for("llama3.1-8b", "h100", "tp=2", **KW, implementation=impl,
                                               expandable_segments=flag))
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == f"expandable_segments:{want}"
    assert env["NCCL_BUFFSIZE"] == str(4 * 2**20)
    assert set(why) == set(env)


def test_an_explicit_margin_writes_no_allocator_setting():
    env, _ = allocator_environment(setup_for("llama3.1-8b", "h100", "tp=2", **KW, allocator_margin_bytes=1e9))
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env


def _cli(*args):
    from typer.testing import CliRunner

    from planner.cli import _register, app

    _register()
    return CliRunner().invoke(app, list(args))


def test_export_then_check_reads_the_setting_back(tmp_path):
    script = tmp_path / "run.sh"
    r = _cli("export", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--plan", "tp=2,mbs=1", "-o", str(script))
    assert r.exit_code == 0, r.output
    text = script.read_text()
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert "export NCCL_BUFFSIZE=4194304" in text
    on = json.loads(_cli("check", "--megatron-args", str(script), "--json").output)
    assert on["expandable_segments"] is True
    off_script = tmp_path / "off.sh"
    off_script.write_text(text.replace("expandable_segments:True", "expandable_segments:False"))
    off = json.loads(_cli("check", "--megatron-args", str(off_script), "--json").output)
    assert off["expandable_segments"] is False
    # The default allocator is costed by the workload model, not the 8 % margin: another reserved peak.
    assert off["memory"]["peak_bytes"] != on["memory"]["peak_bytes"]
    assert off["memory"]["allocated_peak_bytes"] == on["memory"]["allocated_peak_bytes"]
    # explain's option wins over the script's setting.
    ex = json.loads(_cli("explain", "--megatron-args", str(off_script), "--expandable-segments", "--json").output)
    assert ex["assumptions"]["expandable_segments"] is True
    assert ex["memory"]["peak_bytes"] == on["memory"]["peak_bytes"]
