"""torchtitan's own rules follow the release (issue 39: the bundled torchtitan fp8 runs ran releases
that read TOML job files): FP8 is a [model] converter the job file names up to 0.2.2, and only
0.3.0 applies it inside a config_registry function (rule torchtitan-fp8). The search, validate
--search and export take the rules of the --software release."""

from __future__ import annotations

import pytest

from planner.cli import main
from planner.errors import PlannerError
from planner.launchers.registry import launcher_violations
from planner.search.driver import Options, run_search
from planner.search.space import Limits
from planner.specs.catalog import load_hardware, load_model, load_software
from planner.specs.job import Job
from planner.specs.plan import Plan

FP8_JOB = Job(gpus=8, global_batch=16, seq_len=8192, precisions=["fp8"])


def _rules(release: str | None, software: str | None = None) -> set[str]:
    plan = Plan.parse("sharding=fsdp,mbs=2,precision=fp8")
    found = launcher_violations(plan, model=load_model("llama3.1-8b"), job=FP8_JOB, hw=load_hardware("h100"),
                                target="torchtitan", release=release and load_software(release),
                                software=software and load_software(software))
    return {v.rule for v in found}


@pytest.mark.parametrize("release", ["torchtitan-0.1.0", "torchtitan-0.2.2"])
def test_a_toml_release_takes_fp8_as_a_converter(release):
    assert "torchtitan-fp8" not in _rules(release)
    assert "torchtitan-fp8" not in _rules(None, software=release)


def test_0_3_0_and_no_release_keep_the_config_registry_rule():
    assert "torchtitan-fp8" in _rules("torchtitan-0.3.0")
    assert "torchtitan-fp8" in _rules(None)
    # A Megatron release does not choose torchtitan's rules.
    assert "torchtitan-fp8" in _rules("megatron-core-0.19")


def _search(software: str):
    return run_search(load_model("llama3.1-8b"), load_hardware("h100"), FP8_JOB,
                      Options(target="torchtitan", top=1, software=load_software(software),
                              limits=Limits.parse("tp=1,cp=1,pp=1,vpp=1,ep=1", None)))


def test_the_search_ranks_fp8_plans_on_the_release_that_names_the_converter():
    found = _search("torchtitan-0.1.0")
    assert found.plans and found.plans[0].plan.precision == "fp8"
    with pytest.raises(PlannerError, match="passes the torchtitan launcher's start-up checks"):
        _search("torchtitan-0.3.0")  # every fp8 plan breaks torchtitan-fp8 there


def test_the_toml_export_writes_an_fp8_plan_and_refuses_a_release_it_cannot_write(capsys):
    argv = ["export", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch", "16",
            "--precision", "fp8", "--plan", "sharding=fsdp,mbs=2,precision=fp8", "--format", "torchtitan-toml"]
    assert main(argv) == 0
    assert 'converters = ["quantize.linear.float8"]' in capsys.readouterr().out
    assert main([*argv, "--software", "torchtitan-0.1.0"]) == 2
    assert "torchtitan 0.1.0 names differently" in capsys.readouterr().err
