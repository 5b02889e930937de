"""torchtitan job files out and in. torchtitan 0.3.0 reads no TOML (its ConfigManager takes
--module/--config and CLI overrides), so planner writes the 0.3.0 invocation (--format torchtitan)
and the legacy TOML job file of torchtitan <= 0.2.2 (--format torchtitan-toml), and `check
--torchtitan` reads both back to the same plan. torchtitan's own ConfigManagers check them in
tests/megatron_validate/test_torchtitan_files.py (the validation venv)."""

from __future__ import annotations

import json
import tomllib

import pytest

from planner.cli import main
from planner.launchers.torchtitan.read import job_from_torchtitan, read_cli_argv
from planner.launchers.torchtitan.toml import export_torchtitan_toml, toml_sections
from planner.launchers.torchtitan.write import export_torchtitan, torchtitan_launch
from tests._export_specs import resolve

# The round trip: Llama 3.1 8B/70B with FSDP, TP, CP, PP with a schedule; Qwen3-30B-A3B.
CASES = [
    ("llama3.1-8b", "h100", 8, 128, "sharding=fsdp,mbs=2", 8192),
    ("llama3.1-8b", "h100", 16, 128, "tp=2,cp=2,sharding=fsdp,recompute=full", 8192),
    ("llama3.1-8b", "h100", 16, 128, "tp=2,sharding=hsdp:4", 8192),
    ("llama3.1-70b", "h100", 64, 128, "tp=4,pp=4,vpp=2,sharding=fsdp,recompute=full", 8192),
    ("llama3.1-70b", "h100", 64, 128, "tp=8,pp=2,sharding=zero2,recompute=full", 8192),
    ("llama3.1-70b", "h100", 64, 128, "tp=8,pp=4,sharding=ddp,recompute=full", 4096),
    ("qwen3-30b-a3b", "h100", 16, 1024, "ep=8,sharding=fsdp,dispatcher=alltoall", 4096),
    ("qwen3-30b-a3b", "h100", 32, 1024, "tp=2,ep=8,etp=1,pp=2,sharding=fsdp,dispatcher=alltoall,recompute=full", 4096),
    ("llama3.1-8b", "h100", 8, 128, "sharding=fsdp,mbs=2,recompute=op", 8192),  # per-op selective AC
    ("llama3.1-8b", "h100", 16, 128, "tp=2,sharding=fsdp,recompute=op", 8192),
]
IDS = [f"{c[0]}-{c[4]}" for c in CASES]


def setup_of(case):
    name, hw, gpus, gbs, plan, seq = case
    return resolve(name, hw, gpus, gbs, plan, seq_len=seq)[-1]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_toml_round_trip(case, tmp_path):
    setup = setup_of(case)
    f = tmp_path / "job.toml"
    f.write_text(export_torchtitan_toml(setup))
    tomllib.loads(f.read_text())  # valid TOML
    tj = job_from_torchtitan(f, hw=case[1])
    assert tj.args.kind == "toml" and tj.model.name == setup.model.name
    assert tj.plan.to_string() == setup.plan.to_string()
    assert (tj.job.gpus, tj.job.global_batch, tj.job.seq_len) == (setup.job.gpus, setup.job.global_batch, setup.job.seq_len)
    assert tj.args.unknown == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cli_round_trip(case, tmp_path):
    setup = setup_of(case)
    f = tmp_path / "run.sh"
    f.write_text(export_torchtitan(setup))
    tj = job_from_torchtitan(f, hw=case[1])
    assert tj.args.kind == "cli"
    assert tj.plan.to_string() == setup.plan.to_string()
    assert (tj.job.gpus, tj.job.global_batch, tj.job.seq_len) == (setup.job.gpus, setup.job.global_batch, setup.job.seq_len)
    launch = torchtitan_launch(setup)
    assert read_cli_argv(launch.argv()).values["parallelism.tensor_parallel_degree"] == setup.plan.tp


def test_toml_keeps_the_schedule_and_stages():
    setup = setup_of(CASES[3])
    p = toml_sections(setup)["parallelism"]
    assert p["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert len(p["module_fqns_per_model_part"]) == 8 and p["module_fqns_per_model_part"][-1][-1] == "output"


def test_toml_fp8_is_a_converter():
    setup = resolve("llama3.1-8b", "gb200-nvl72", 8, 128, "precision=fp8,sharding=fsdp", seq_len=8192)[-1]
    s = toml_sections(setup)
    assert s["model"]["converters"] == ["mx"] and s["quantize.linear.mx"]["recipe_name"] == "mxfp8_cublas"


def test_toml_values_are_quoted():
    """Strings are TOML basic strings (a quote or newline in a description cannot start a key)."""
    data = tomllib.loads(export_torchtitan_toml(setup_of(CASES[0])))
    assert data["job"]["description"].startswith("llama3.1-8b: ")


def test_toml_refuses_what_0_2_2_lacks(capsys):
    code = main(["export", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch", "128",
                 "--plan", "sharding=fsdp,moments=bf16", "--format", "torchtitan-toml"])
    assert code == 2 and "[torchtitan-moments]" in capsys.readouterr().err


@pytest.mark.parametrize("option,recompute", [("op", "op"), ("2", None)])
def test_selective_ac_is_read_and_compile_listed(tmp_path, option, recompute):
    """Per-op selective AC becomes recompute=op; layer-frequency AC (every N-th layer fully) has no
    planner setting and is listed with the other unread keys."""
    f = tmp_path / "job.toml"
    f.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ndata_parallel_shard_degree = 8\n'
                 '[training]\nlocal_batch_size = 2\nseq_len = 8192\n[activation_checkpoint]\nmode = "selective"\n'
                 f'selective_ac_option = "{option}"\n[compile]\nenable = true\n[float8]\nnew_key = 1\n')
    tj = job_from_torchtitan(f, hw="h100")
    assert tj.plan.to_string() == "mbs=2,sharding=fsdp" + (f",recompute={recompute}" if recompute else "") + ",precision=bf16"
    assert tj.job.gpus == 8 and tj.job.global_batch == 16
    text = " ".join(tj.args.unknown)
    assert ("selective every 2 layers" in text) == (recompute is None)
    assert "compile.enable" in text and "float8.new_key" in text


def test_check_torchtitan_cli(tmp_path, capsys):
    setup = setup_of(CASES[3])
    f = tmp_path / "job.toml"
    f.write_text(export_torchtitan_toml(setup))
    assert main(["check", "--torchtitan", str(f), "--hw", "h100", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["plan"] == setup.plan.to_string() and r["target"] == "torchtitan" and r["violations"] == []
    assert r["launcher"].startswith("torchtitan <= 0.2.2")


def test_not_a_torchtitan_job(tmp_path, capsys):
    f = tmp_path / "x.sh"
    f.write_text("echo hi\n")
    assert main(["check", "--torchtitan", str(f), "--hw", "h100"]) == 2
    assert "no torchtitan job" in capsys.readouterr().err


def test_odd_ac_and_float8_values_are_listed_not_read(tmp_path):
    """A selective_ac_option or float8 recipe_name planner has no setting for (a list, a number)
    is read as no recompute and the hardware's recipe, and named with the unread keys."""
    f = tmp_path / "job.toml"
    f.write_text('[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["float8"]\n[float8]\nrecipe_name = 7\n'
                 '[parallelism]\ndata_parallel_shard_degree = 8\n[training]\nlocal_batch_size = 2\nseq_len = 8192\n'
                 '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = [1, 2]\n')
    tj = job_from_torchtitan(f, hw="h100")
    assert tj.plan.to_string() == "mbs=2,sharding=fsdp,precision=fp8"
    assert tj.assumptions == {"cross_entropy": "torch"}
    text = " ".join(tj.args.unknown)
    assert "selective every [1, 2] layers" in text and "float8 recipe_name 7" in text
