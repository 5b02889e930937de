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
    assert s["model"]["converters"] == ["quantize.linear.mx"] and s["quantize.linear.mx"]["recipe_name"] == "mxfp8_cublas"


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


def job_toml(**extra: str) -> str:
    """A Llama 3.1 8B FSDP job; extra maps a section to lines added to it."""
    sections = {"model": 'name = "llama3"\nflavor = "8B"\n', "parallelism": "data_parallel_shard_degree = 8\n",
                "training": "local_batch_size = 2\nseq_len = 8192\n"}
    for name, lines in extra.items():
        sections[name.replace("__", ".")] = sections.get(name.replace("__", "."), "") + lines + "\n"
    return "".join(f"[{name}]\n{body}" for name, body in sections.items())


JOB = job_toml()


@pytest.mark.parametrize("extra,said", [
    # an inline table once flattened into an unread key and left TP at its default 1
    ({"parallelism": "tensor_parallel_degree = { a = 1 }"}, ["tensor_parallel_degree", "{'a': 1}", "an integer"]),
    ({"training": 'global_batch_size = "64"'}, ["global_batch_size", "'64'", "an integer"]),
    ({"compile": 'enable = "yes"'}, ["compile.enable", "true or false"]),
    ({"activation_checkpoint": "selective_ac_option = [1, 2]"}, ["selective_ac_option", "[1, 2]", "a string"]),
    ({"activation_checkpoint": 'selective_ac_option = "sometimes"'}, ["'sometimes'", "or a layer count"]),
    ({"activation_checkpoint": 'mode = "partial"'}, ["activation_checkpoint.mode", "'memory_budget'"]),
    ({"float8": "recipe_name = 7"}, ["float8.recipe_name", "'rowwise'"]),
    ({"parallelism": 'fsdp_reshard_after_forward = "sometimes"'}, ["fsdp_reshard_after_forward", "'never'"]),
    ({"optimizer": 'implementation = "fused_opt_states_bf16"'}, ["optimizer.implementation", "'foreach'"]),
    ({"parallelism": 'module_fqns_per_model_part = ["layers.0"]'}, ["module_fqns_per_model_part", "lists"]),
    ({"model": 'converters = "quantize.linear.float8"'}, ["model.converters", "a list of strings"]),
    ({"model": 'converters = ["nonsense"]'}, ["'nonsense'", "KeyError", "quantize.linear.float8"]),
    ({"model": 'converters = ["float8", "quantize.grouped_mm.float8"]'}, ["mixes", "0.1.0"]),
])
def test_toml_values_of_the_wrong_type_are_refused(tmp_path, capsys, extra, said):
    """A value torchtitan's dataclasses do not declare for its key (or a converter it does not
    register) is refused with the key, the value and the type, not read as a default."""
    f = tmp_path / "job.toml"
    f.write_text(job_toml(**extra))
    assert main(["check", "--torchtitan", str(f), "--hw", "h100"]) == 2
    err = capsys.readouterr().err
    assert all(s in err for s in said), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_huge_wrong_value_is_quoted_bounded(tmp_path, capsys):
    f = tmp_path / "job.toml"
    f.write_text(JOB.replace("seq_len = 8192", 'seq_len = "' + "9" * 100_000 + '"'))
    assert main(["check", "--torchtitan", str(f), "--hw", "h100"]) == 2
    err = capsys.readouterr().err
    assert "seq_len" in err and "characters)" in err and len(err) < 1000


@pytest.mark.parametrize("argv,said", [
    (["--compile.enable", "maybe"], ["compile.enable", "'maybe'", "true or false"]),
    (["--training.seq_len", "8k"], ["training.seq_len", "an integer"]),
    (["activation_checkpoint:sometimes"], ["activation_checkpoint.mode", "'sometimes'"]),
    (["--model.converters", "nonsense"], ["'nonsense'", "KeyError"]),
])
def test_cli_values_of_the_wrong_type_are_refused(tmp_path, capsys, argv, said):
    f = tmp_path / "run.sh"
    f.write_text("torchrun --nproc-per-node 8 -m torchtitan.train --module llama3 --config llama3_8b " + " ".join(argv) + "\n")
    assert main(["check", "--torchtitan", str(f), "--hw", "h100"]) == 2
    err = capsys.readouterr().err
    assert all(s in err for s in said), err


def test_cli_values_are_parsed_by_their_type():
    """tyro parses a value by the field's type: a string field keeps digits as text."""
    v = read_cli_argv(["--activation_checkpoint.selective_ac_option", "2", "--compile.enable", "False",
                       "--parallelism.tensor_parallel_degree", "4"]).values
    assert v == {"activation_checkpoint.selective_ac_option": "2", "compile.enable": False,
                 "parallelism.tensor_parallel_degree": 4}


@pytest.mark.parametrize("converters,precision", [
    ('["quantize.linear.float8"]', "fp8"), ('["float8"]', "fp8"), ('["quantize.linear.mx"]', "fp8"),
    ('["quantize.linear.float8", "quantize.grouped_mm.float8"]', "fp8"), ("[]", "bf16"),
])
def test_registered_converters_are_read(tmp_path, converters, precision):
    """torchtitan 0.2.x's converter names (and 0.1.0's) are FP8; a 0.2.x job with
    quantize.linear.float8 was once read as bf16."""
    f = tmp_path / "job.toml"
    f.write_text(job_toml(model=f"converters = {converters}"))
    tj = job_from_torchtitan(f, hw="h100")
    assert tj.plan.precision == precision


def test_experts_only_fp8_is_listed(tmp_path):
    f = tmp_path / "job.toml"
    f.write_text('[model]\nname = "qwen3"\nflavor = "30B-A3B"\nconverters = ["quantize.grouped_mm.float8"]\n'
                 '[parallelism]\ndata_parallel_shard_degree = 16\nexpert_parallel_degree = 8\n'
                 '[training]\nlocal_batch_size = 2\nseq_len = 4096\n[activation_checkpoint]\nmode = "full"\n')
    tj = job_from_torchtitan(f, hw="h100")
    assert tj.plan.precision == "bf16"
    assert any("grouped GEMMs only" in u for u in tj.args.unknown)


def test_absent_selective_ac_option_is_torchtitans_default(tmp_path):
    """torchtitan <= 0.2.2 reads a selective AC job without selective_ac_option as every second
    layer ("2", job_config.py); 0.3.0's activation_checkpoint:selective is per-op."""
    f = tmp_path / "job.toml"
    f.write_text(JOB)  # no [activation_checkpoint]: mode "selective", option "2"
    tj = job_from_torchtitan(f, hw="h100")
    assert "recompute" not in tj.plan.to_string() or "recompute=none" in tj.plan.to_string()
    assert any("selective every 2 layers" in u for u in tj.args.unknown)
    assert "activation_checkpoint.selective_ac_option" in tj.defaults_used
    g = tmp_path / "run.sh"
    g.write_text("torchrun --nproc-per-node 8 -m torchtitan.train --module llama3 --config llama3_8b "
                 "activation_checkpoint:selective --training.local_batch_size 2\n")
    assert "recompute=op" in job_from_torchtitan(g, hw="h100").plan.to_string()


def test_float8_recipe_planner_lacks_is_listed(tmp_path):
    """rowwise_with_gw_hp is a torchao recipe planner has no setting for: costed as the hardware's
    recipe and named with the unread keys."""
    f = tmp_path / "job.toml"
    f.write_text(job_toml(model='converters = ["quantize.linear.float8"]',
                          quantize__linear__float8='recipe_name = "rowwise_with_gw_hp"',
                          activation_checkpoint='mode = "selective"\nselective_ac_option = "op"'))
    tj = job_from_torchtitan(f, hw="h100")
    assert tj.plan.to_string() == "mbs=2,sharding=fsdp,recompute=op,precision=fp8"
    assert tj.assumptions == {"cross_entropy": "torch"}
    assert any("rowwise_with_gw_hp" in u for u in tj.args.unknown)
