"""Reading a launch back goes through the launcher registry (issue 44): ``--launch FILE`` finds the
launcher by its record's sniffer, ``--launch-format`` names it, the launchers' own options are
aliases, and a launcher registered in the table alone is read by check and explain."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from planner.cli import main
from planner.errors import PlannerError
from planner.launchers import registry

JOB = ["--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch", "64", "--seq-len", "8192"]
OPTION = {"megatron": "--megatron-args", "bridge": "--bridge", "torchtitan": "--torchtitan",
          "torchtitan-toml": "--torchtitan"}


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _export(capsys, tmp_path: Path, fmt: str) -> Path:
    path = tmp_path / (f"launch-{fmt}.toml" if fmt.endswith("toml") else f"launch-{fmt}.sh")
    plan = "tp=2,mbs=1" + (",sharding=fsdp" if fmt.startswith("torchtitan") else "")
    code, _, err = _run(capsys, "export", *JOB, "--plan", plan, "--format", fmt, "--out", str(path))
    assert code == 0, err
    return path


@pytest.mark.parametrize("fmt", list(OPTION))
def test_launch_reads_as_the_launchers_own_option(capsys, tmp_path, fmt):
    path = _export(capsys, tmp_path, fmt)
    text = path.read_text()
    sniffed = [x.name for x in registry.readable() if x.reads is not None and x.reads.sniff(text, path.name)]
    assert sniffed == [fmt.removesuffix("-toml")]
    code, by_launch, err = _run(capsys, "check", "--launch", str(path), "--json")
    assert code == 0, err
    code, by_option, err = _run(capsys, "check", OPTION[fmt], str(path), "--json")
    assert code == 0, err
    assert by_launch == by_option
    assert json.loads(by_launch)["source"] == str(path)


def test_launch_format_forces_the_reader(capsys, tmp_path):
    # A Megatron script read as a Bridge launch: the Bridge reader refuses it, as --bridge does.
    path = _export(capsys, tmp_path, "megatron")
    code, _, err = _run(capsys, "check", "--launch", str(path), "--launch-format", "bridge")
    assert code == 2 and "no Megatron-Bridge launch" in err
    code, out, err = _run(capsys, "check", "--launch", str(path), "--launch-format", "megatron", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "OK"


def test_no_or_several_formats_is_one_paragraph_listing_them(capsys, tmp_path):
    plain = tmp_path / "x.sh"
    plain.write_text("echo hello\n")
    code, _, err = _run(capsys, "check", "--launch", str(plain))
    assert code == 2 and "matches none of the launch formats" in err
    for x in registry.readable():
        assert f"{x.name}: " in err and x.reads is not None and x.reads.option in err
    both = tmp_path / "both.sh"  # Megatron flags and a run_recipe.py line
    both.write_text("python pretrain_gpt.py --num-layers 2\npython run_recipe.py --recipe r\n")
    code, _, err = _run(capsys, "check", "--launch", str(both))
    assert code == 2 and "more than one launch format: megatron and bridge" in err and "--launch-format" in err
    code, _, err = _run(capsys, "check", "--launch", str(plain), "--launch-format", "nope")
    assert code == 2 and "'nope' is not a launch format" in err
    code, _, err = _run(capsys, "check", *JOB, "--plan", "tp=2", "--launch-format", "megatron")
    assert code == 2 and "no --launch is given" in err
    code, _, err = _run(capsys, "check", "--launch", str(plain), "--megatron-args", str(plain))
    assert code == 2 and "exactly one plan source, got --launch and --megatron-args" in err


def test_set_reaches_only_the_launchers_that_take_it(capsys, tmp_path):
    path = _export(capsys, tmp_path, "bridge")
    code, _, err = _run(capsys, "check", "--launch", str(path), "--set", "vocab_size=128256")
    assert code == 2 and "--set does not apply to --launch (Megatron-Bridge)" in err and "--megatron-args" in err


# A throw-away launcher: a JSON file naming the model, hardware, job and plan. It is registered in
# the registry's table only; check and explain read it with no other edit.

@dataclass
class _JsonJob:
    model: object
    hardware: object
    job: object
    plan: object
    source: Path
    model_source: str = "the JSON launch"
    hardware_source: str = "the JSON launch"
    gpus_source: str = "the JSON launch"


def _read_json_launch(path: Path, *, model=None, hw=None, gpus=None, global_batch=None, seq_len=None, precision=None,
                      job_file=None, domain_fill=None, memory_margin_gib=None, environ=None, script_args=()):
    from planner.launchers.common import export_canonical
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.job_input import resolve_job
    from planner.specs.plan import Plan

    data = json.loads(path.read_text())
    m, h = load_model(data["model"]), load_hardware(data["hardware"])
    j = resolve_job(m, gpus=data["gpus"], global_batch=data["global_batch"], seq_len=data["seq_len"])
    return _JsonJob(m, h, j, export_canonical(Plan.parse(data["plan"]), m, h, j), path)


JSON_LAUNCHER = registry.Launcher(
    "jsonlaunch", "JSON launch", None, "megatron", (),
    registry.ReadBack(_read_json_launch, "--jsonlaunch", lambda text, name: text.lstrip().startswith('{"jsonlaunch"'),
                      "JSON launch files"),
    None)


def test_a_launcher_registered_in_the_table_alone_is_read(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "LAUNCHERS", (*registry.LAUNCHERS, JSON_LAUNCHER))
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"jsonlaunch": 1, "model": "llama3.1-8b", "hardware": "h100", "gpus": 8,
                                "global_batch": 64, "seq_len": 8192, "plan": "tp=2,mbs=1"}))
    assert registry.launch_launcher(path) is JSON_LAUNCHER
    code, out, err = _run(capsys, "check", "--launch", str(path), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["status"] == "OK" and report["target"] == "megatron" and report["plan"].startswith("tp=2,")
    assert report["provenance"]["model"] == "the JSON launch"
    code, out, err = _run(capsys, "explain", "--launch", str(path))
    assert code == 0, err
    assert out.startswith("Llama 3.1 8B on h100") and "plan: tp=2," in out
    code, _, err = _run(capsys, "check", "--launch", str(tmp_path / "job.json"), "--launch-format", "megatron")
    assert code == 2  # forced to Megatron's reader, which finds no flags


def test_without_the_record_the_json_launch_is_refused(tmp_path):
    path = tmp_path / "job.json"
    path.write_text('{"jsonlaunch": 1}')
    with pytest.raises(PlannerError, match="matches none of the launch formats"):
        registry.launch_launcher(path)
