"""Exported launch scripts with hostile names (issue #17): every value that reaches a script a user
runs is quoted, no comment can be broken out of, and running the script executes nothing but its
assignments and the launcher line, whose argv arrives intact.

Each script is checked with ``bash -n`` and then run for real with ``torchrun`` replaced by a stub
on PATH that records its argv (NUL-separated); a DEBUG trap logs every command bash executes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from planner.cli import main
from planner.cost.setup import resolve_setup
from planner.launchers.megatron.write import export_megatron, megatron_launch
from planner.launchers.torchtitan.write import export_torchtitan, torchtitan_launch
from planner.specs.job_input import resolve_job
from planner.specs.catalog import catalog_root, load_hardware, load_model
from planner.specs.plan import Plan

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")

# Layout with '(', ')', '*' and '|': glob and shell syntax that must reach Megatron as one word.
MEGATRON_PLAN = "pp=4,vpp=2,layout=Et*3|(tttt|)*6t*5L"
TT_PLAN = "tp=2,sharding=fsdp"
TT_CONFIG = "llama3:llama3_8b"
JOB = ["--gpus", "8", "--global-batch", "64", "--seq-len", "4096"]


def payloads(d: Path) -> list[str]:
    """Shell syntax that would create a file in ``d`` if it ever ran."""
    return [f"$(touch {d}/p1)", f"`touch {d}/p2`", f"'; touch {d}/p3; '", f'"; touch {d}/p4; "', f"x; touch {d}/p5 #",
            f"${{IFS}}$(touch {d}/p6)", "a'b\"c\\d"]


def hostile_model(tmp_path: Path, name: str) -> Path:
    data = yaml.safe_load((catalog_root() / "models" / "llama3.1-8b.yaml").read_text())
    data.update(name=name, display_name=name, aliases=[])
    data.pop("reference_job", None)
    path = tmp_path / "evil-model.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def stub_bin(tmp_path: Path) -> Path:
    b = tmp_path / "stub-bin"
    b.mkdir(exist_ok=True)
    stub = b / "torchrun"
    stub.write_text('#!/bin/sh\nprintf "%s\\0" "$@" >> "$ARGV_OUT"\necho call >> "$CALLS_OUT"\n')
    stub.chmod(0o755)
    return b


ALLOWED = ("set -euo pipefail", "export ", "unset ", "torchrun ")


def run_script(tmp_path: Path, script: Path) -> tuple[list[str], list[str]]:
    """(argv the stub torchrun received, every command bash executed)."""
    check = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True, timeout=10)
    assert check.returncode == 0, check.stderr
    argv_out, calls, log = tmp_path / "argv.bin", tmp_path / "calls.txt", tmp_path / "commands.log"
    for f in (argv_out, calls, log):
        f.unlink(missing_ok=True)
    env = {"PATH": f"{stub_bin(tmp_path)}:/usr/bin:/bin", "ARGV_OUT": str(argv_out), "CALLS_OUT": str(calls),
           "MEGATRON_LM": "/opt/megatron lm", "HOME": str(tmp_path)}
    # The DEBUG trap sees each simple command before it runs (assignments included).
    runner = f'trap \'printf "%s\\0" "$BASH_COMMAND" >> {log}\' DEBUG; . "$1"'
    proc = subprocess.run([BASH, "-c", runner, "run", str(script)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert calls.read_text().count("call") == 1, "the launcher ran more (or less) than once"
    commands = [c for c in log.read_text().split("\0") if c.strip()][1:]  # [0] is the '. "$1"' itself
    for c in commands:
        first = c.split("=", 1)[0]
        assert c.startswith(ALLOWED) or (first.isidentifier() and "=" in c), f"unexpected command ran: {c!r}"
    argv = argv_out.read_bytes().split(b"\0")[:-1]
    return [a.decode() for a in argv], commands


def nothing_ran(d: Path) -> None:
    assert not [p.name for p in d.glob("p[0-9]")], "a payload in a name was executed"


def _setup(model_path, plan: str, hw="h100"):
    m = load_model(str(model_path))
    h = load_hardware(hw)
    j = resolve_job(m, gpus=8, global_batch=64, seq_len=4096)
    return resolve_setup(m, h, j, Plan.parse(plan))


@pytest.mark.parametrize("k", range(7))
def test_hostile_model_name_in_megatron_script(tmp_path, capsys, k):
    name = "evil " + payloads(tmp_path)[k]
    model = hostile_model(tmp_path, name)
    out = tmp_path / "run.sh"
    assert main(["export", "--model", str(model), "--hw", "h100", *JOB, "--plan", MEGATRON_PLAN, "--out", str(out)]) == 0
    capsys.readouterr()
    text = out.read_text()
    assert f"# model: {name}   hardware: h100" in text  # in the comment, on its own line
    assert os.access(out, os.X_OK)
    argv, _ = run_script(tmp_path, out)
    nothing_ran(tmp_path)
    launch = megatron_launch(_setup(model, MEGATRON_PLAN))
    dist = ["--nproc-per-node", "8", "--nnodes", "1", "--node-rank", "0", "--master-addr", "localhost",
            "--master-port", "6000"]
    assert argv == dist + ["/opt/megatron lm/pretrain_gpt.py"] + launch.argv()
    assert "Et|ttt" not in " ".join(argv) and any("(tttt|)*" in a for a in argv)  # the layout, one word, intact


@pytest.mark.parametrize("k", [0, 1, 2, 3, 6])
def test_hostile_model_name_in_torchtitan_script(tmp_path, capsys, k):
    name = "evil " + payloads(tmp_path)[k]
    model = hostile_model(tmp_path, name)
    out = tmp_path / "tt.sh"
    code = main(["export", "--model", str(model), "--hw", "h100", *JOB, "--plan", TT_PLAN, "--format", "torchtitan",
                 "--torchtitan-config", TT_CONFIG, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    argv, _ = run_script(tmp_path, out)
    nothing_ran(tmp_path)
    launch = torchtitan_launch(_setup(model, TT_PLAN), torchtitan_config=TT_CONFIG)
    assert argv[argv.index("-m"):] == ["-m", "torchtitan.train", *launch.argv()]


def test_newline_in_a_model_file_name_is_refused(tmp_path, capsys):
    model = hostile_model(tmp_path, f"evil\ntouch {tmp_path}/p1")
    code = main(["export", "--model", str(model), "--hw", "h100", *JOB, "--plan", "tp=1"])
    err = capsys.readouterr().err
    assert code == 2 and "control character" in err and err.count("\n") == 1


def test_newline_in_a_huggingface_folder_name_cannot_break_out(tmp_path, capsys):
    folder = tmp_path / "evil\n$(touch p1)\ntouch p2;`touch p3`"  # run_script runs in tmp_path
    folder.mkdir()
    src = Path(__file__).parent / "fixtures" / "hf" / "llama3.1-8b" / "config.json"
    (folder / "config.json").write_text(src.read_text())
    out = tmp_path / "run.sh"
    assert main(["export", "--model", str(folder), "--hw", "h100", *JOB, "--plan", "tp=2", "--out", str(out)]) == 0
    capsys.readouterr()
    header = [ln for ln in out.read_text().splitlines() if ln.startswith("# model:")]
    assert len(header) == 1 and "\n" not in header[0]
    run_script(tmp_path, out)
    nothing_ran(tmp_path)


def test_comment_lines_escape_control_characters_whatever_the_spec_holds(tmp_path):
    """Defense in depth: a model object built past validation still cannot break a comment."""
    setup = _setup(hostile_model(tmp_path, "plain"), TT_PLAN)
    evil = setup.model.model_copy(update={"name": f"x\ntouch {tmp_path}/p1\r\x1b[2K\u2028y"})
    hw = setup.hw.model_copy(update={"name": f"h\ntouch {tmp_path}/p2"})
    import dataclasses

    bad = dataclasses.replace(setup, model=evil, hw=hw)
    for text in (export_megatron(bad, predictions={"time": {"step_time_s": 1.0, "bottleneck": f"b\ntouch {tmp_path}/p3"}}),
                 export_torchtitan(bad, torchtitan_config=TT_CONFIG)):
        script = tmp_path / "direct.sh"
        script.write_text(text)
        assert all(ln.startswith(("#", " ", ")")) or ln == "" or "=" in ln or ln.startswith(("set ", "export ",
                   "torchrun", "unset")) for ln in text.splitlines())
        run_script(tmp_path, script)
        nothing_ran(tmp_path)


def test_torchtitan_config_must_be_module_and_function(capsys):
    code = main(["export", "--model", "llama3.1-8b", "--hw", "h100", *JOB, "--plan", TT_PLAN, "--format", "torchtitan",
                 "--torchtitan-config", "llama3:llama3_8b\n$(reboot)"])
    err = capsys.readouterr().err
    assert code == 2 and "is not MODULE:FUNCTION" in err and err.count("\n") == 1


def test_reading_a_launch_script_back_executes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "theirs.sh"
    script.write_text("X=$(touch p1)\n`touch p2`\nexport Y=\"$(touch p3)\"\n"
                      "torchrun --nproc-per-node 8 --nnodes 1 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
                      "--num-attention-heads 32 --seq-length 4096 --global-batch-size 64 --micro-batch-size 1 "
                      "--tensor-model-parallel-size $(touch p4) --save \"$(touch p5)\" `touch p6`\n")
    code = main(["check", "--megatron-args", str(script), "--model", "llama3.1-8b", "--hw", "h100"])
    err = capsys.readouterr().err
    assert code in (1, 2) and "Traceback" not in err
    nothing_ran(tmp_path)
