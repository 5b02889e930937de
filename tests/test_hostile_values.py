"""Nonsense values and the exit codes (issue #17): every number checked once where it enters (finite,
in range, never a boolean), derived degrees checked against given ones, per-stage recompute and
layouts checked against the pipeline, saved searches validated and their predictions recomputed;
0 success, 1 a plan that breaks a rule or does not fit, 2 bad input, 3 nothing fits, 70 a bug."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from planner.cli import main
from planner.errors import PlannerError
from planner.specs.layout import MAX_LAYOUT_SYMBOLS, parse_layout

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--model", "llama3.1-8b", "--hw", "h100"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def paragraph(code: int, err: str, *words: str, status: int = 2) -> str:
    assert code == status, err
    assert "Traceback" not in err and err.startswith("Error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)
    return err


# ---- options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["search", "--model", "v3", "--hw", "nvl72", "--gpus", "1000000000000"], ["beyond any cluster", "2^20"]),
    (["search", *SMALL, "--seq-len", str(2**40)], ["--seq-len", "at most 16,777,216"]),
    (["search", *SMALL, "--global-batch", str(2**40)], ["--global-batch", "at most"]),
    (["search", *SMALL, "--memory-margin", "inf"], ["--memory-margin inf", "finite"]),
    (["search", *SMALL, "--memory-margin", "nan"], ["--memory-margin nan", "finite"]),
    (["search", *SMALL, "--memory-margin", "-5"], ["--memory-margin -5 is negative"]),
    (["search", *SMALL, "--time-limit", "nan"], ["--time-limit"]),
    (["search", *SMALL, "--time-limit", "inf"], ["--time-limit inf"]),
    (["search", *SMALL, "--routing-imbalance", "inf"], ["--routing-imbalance inf"]),
    (["compare", *SMALL, "--tokens", "nan"], ["--tokens nan"]),
    (["compare", *SMALL, "--tokens", "-1e12"], ["--tokens -1e+12 is negative", "must be positive"]),
    (["compare", *SMALL, "--sweep-gpus", "8,99999999999999"], ["is not a positive GPU count"]),
    (["memtrace", "x.pickle", "--capacity", "nan"], ["--capacity nan"]),
    (["memtrace", "x.pickle", "--capacity", "-80"], ["--capacity -80 is negative"]),
    (["export", *SMALL, "--plan", "tp=2", "--nproc-per-node", "-8"], ["--nproc-per-node -8"]),
    (["export", *SMALL, "--plan", "tp=2", "--nproc-per-node", "0"], ["--nproc-per-node 0"]),
    (["search", *SMALL, "--max", "tp=\u00b2"], ["a bound must be a positive integer"]),
    (["search", *SMALL, "--top", "0"], ["--top", "planner search --help"]),
])
def test_nonsense_options_are_refused_at_once(capsys, argv, words):
    t0 = time.perf_counter()
    code, _, err = run(capsys, *argv)
    paragraph(code, err, *words)
    assert time.perf_counter() - t0 < 5  # answered, not searched


def test_given_dp_and_edp_are_checked(capsys):
    code, _, err = run(capsys, "explain", *SMALL, "--gpus", "64", "--global-batch", "64", "--plan", "tp=2,dp=3")
    paragraph(code, err, "[dp-mismatch]", "dp=3", "= 32", status=1)
    # check lists it with every other broken rule, in its report
    code, out, err = run(capsys, "check", *SMALL, "--gpus", "64", "--global-batch", "64", "--plan", "tp=2,dp=3")
    assert code == 1 and err == "" and "[dp-mismatch] The plan gives dp=3, but 64 GPUs / (tp*cp*pp = 2) = 32." in out
    code, _, err = run(capsys, "explain", "--model", "v3", "--hw", "nvl72", "--plan", "ep=64,edp=2")
    paragraph(code, err, "[edp-mismatch]", "edp=2", "= 4", status=1)
    code, out, err = run(capsys, "explain", *SMALL, "--gpus", "64", "--global-batch", "64", "--plan", "tp=2,dp=32",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["plan"]["dp"] == 32


@pytest.mark.parametrize("plan, words", [
    ("pp=4,recompute=full,stage_recompute=1/2", ["[stage-recompute-stages]", "2 count(s) for 4"]),
    ("pp=4,recompute=full,stage_recompute=1/2/3/4/5", ["[stage-recompute-stages]", "5 count(s) for 4"]),
    ("pp=4,recompute=full,stage_recompute=9/0/0/0", ["[stage-recompute-layers]", "9 layers on pipeline stage 0",
                                                     "holds 8"]),
    ("pp=4,stage_recompute=1/1/1/1", ["[stage-recompute-needs-full]"]),
    ("pp=4,recompute=full,stage_recompute=\u00b9/1/1/1", ["stage_recompute must be '/'-separated layer counts"]),
    ("pp=2,layout=|Et*32L", ["[layout-empty-stage]", "Virtual stage 0"]),
    ("pp=2,layout=Et*16||t*16L", ["[layout-empty-stage]", "Virtual stage 1"]),
])
def test_stage_recompute_and_layout_stages(capsys, plan, words):
    code, _, err = run(capsys, "explain", *SMALL, "--plan", plan)
    status = 1 if words[0].startswith("[") else 2
    paragraph(code, err, *words, status=status)


def test_layout_expansion_is_bounded():
    for text in ["E((((((((t*9)*9)*9)*9)*9)*9)*9)*9)*9|L", "E" + "(" * 30 + "t" + ")*2" * 30 + "L",
                 "Et*999999999999|L", "(" * 10000 + ")" * 10000]:
        t0 = time.perf_counter()
        with pytest.raises(PlannerError):
            parse_layout(text)
        assert time.perf_counter() - t0 < 0.5
    assert len(parse_layout("E(t*9|)*2000L")) == 2001
    with pytest.raises(PlannerError, match=f"more than {MAX_LAYOUT_SYMBOLS:,} symbols"):
        parse_layout("E(t*9|)*8000L")


def test_megatrons_reading_of_a_layout_is_bounded_too():
    from planner.launchers.megatron.rules import _expand_like_megatron

    t0 = time.perf_counter()
    assert _expand_like_megatron("Et|" + "()*999999" * 3000 + "L") is None
    assert time.perf_counter() - t0 < 0.5


def test_booleans_are_not_counts(tmp_path, capsys):
    job = tmp_path / "j.yaml"
    job.write_text("gpus: true\nglobal_batch: 64\nseq_len: 4096\n")
    code, _, err = run(capsys, "check", *SMALL, "--plan", "tp=1", "--job", str(job))
    paragraph(code, err, "field 'gpus' = True", "is a boolean, not a number")
    code, _, err = run(capsys, "explain", *SMALL, "--plan", "tp=1", "--job", str(job))
    paragraph(code, err, "is a boolean")
    saved = tmp_path / "plans.json"
    saved.write_text(json.dumps({"model": "llama3.1-8b", "hardware": "h100", "plans": [{"plan": {"tp": True}}]}))
    code, _, err = run(capsys, "export", "--from", str(saved))
    paragraph(code, err, "'tp'", "boolean")


def test_a_runs_file_count_is_never_a_boolean(tmp_path, capsys):
    """RunSpec's gpus was a plain int field: 'gpus: true' in a validate runs file read as 1 GPU."""
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump({"runs": [{
        "name": "a", "source": {"where": "a test"}, "hardware": "h100", "model": "llama3.1-8b", "gpus": True,
        "global_batch": 64, "seq_len": 4096, "plan": "tp=1", "measured": {"tokens_per_s_per_gpu": 100.0}}]}))
    code, _, err = run(capsys, "validate", str(runs))
    paragraph(code, err, "field 'gpus' = True", "is a boolean, not a number")


def _spec_classes():
    import planner.calibrate.schema  # noqa: F401 - every module that defines specs
    import planner.specs.calibration  # noqa: F401
    import planner.specs.efficiency  # noqa: F401
    import planner.specs.hardware  # noqa: F401
    import planner.specs.job  # noqa: F401
    import planner.specs.model  # noqa: F401
    import planner.specs.plan  # noqa: F401
    import planner.validate.runs  # noqa: F401
    from planner.specs.common import Sourced, Spec

    found, todo = {Sourced[int], Sourced[float]}, [Spec]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.add(sub)
            todo.append(sub)
    return found


def test_no_spec_number_field_takes_a_boolean():
    """The Spec base class adds the boolean guard to every int/float field (and list/tuple of them)
    whether or not the field's type names NotBool: a field written as plain int cannot let
    'true' through as 1."""
    from planner.specs.common import _number_kind

    checked = 0
    for cls in _spec_classes():
        for name, field in cls.model_fields.items():
            kind = _number_kind(field.annotation)
            if kind is None:
                continue
            bad = True if kind == "scalar" else [1, True, 1]
            with pytest.raises(Exception) as info:
                cls.model_validate({name: bad})
            assert any(e["loc"][:1] == (name,) and "is a boolean" in e["msg"] for e in info.value.errors()), \
                (cls.__name__, name)
            checked += 1
    assert checked > 50


MEGATRON_8B = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
               "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64")


@pytest.mark.parametrize("name, text, flag, words", [
    ("o.txt", "model.tensor_model_parallel_size=\uff12\n", "--bridge",
     ["model.tensor_model_parallel_size='\uff12'", "ASCII digits"]),
    ("c.yaml", "model:\n  tensor_model_parallel_size: '\u0662'\n", "--bridge", ["ASCII digits"]),
    ("m.sh", f"torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size \uff12 {MEGATRON_8B}\n",
     "--megatron-args", ["--tensor-model-parallel-size \uff12"]),
    ("t.sh", "torchrun --nproc-per-node 8 -m torchtitan.train --module llama3 --config llama3_8b "
     "--parallelism.tensor_parallel_degree \uff12\n", "--torchtitan", ["tensor_parallel_degree", "integer"]),
])
def test_numbers_in_launch_text_are_ascii_digits(tmp_path, capsys, name, text, flag, words):
    """Python's int() reads '\uff12' (fullwidth 2) and '\u0662' (Arabic-Indic 2) as 2; Hydra's override
    grammar and YAML's numbers do not: a launch saying TP '\uff12' is refused, never read as TP 2."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    code, _, err = run(capsys, "check", flag, str(path), "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8")
    paragraph(code, err, *words)


def test_ascii_number_and_count():
    from planner.launchers.common import launch_world
    from planner.specs.common import ascii_number, is_ascii_count

    assert ascii_number("12") == 12 and ascii_number("1_000") == 1000 and ascii_number("2.5e3", float) == 2500.0
    for text in ("\uff12", "\u0662", "1\uff10", "\uff12.5"):
        with pytest.raises(ValueError):
            ascii_number(text, float if "." in text else int)
    assert is_ascii_count("16") and not is_ascii_count("\uff11\uff16") and not is_ascii_count("\u00b2")
    assert launch_world({"--nproc-per-node": "\uff18"}, {}) == (None, None)
    assert launch_world({"--nproc-per-node": "8"}, {})[0] == 8


def test_job_yaml_nonsense(tmp_path, capsys):
    for body, words in [("gpus: .inf\nglobal_batch: 8\nseq_len: 8\n", ["gpus"]),
                        ("gpus: 8\nglobal_batch: 8\nseq_len: 8\nmemory_margin_bytes: .nan\n", ["finite"]),
                        ("gpus: 8\nglobal_batch: 16777216\nseq_len: 16777216\n", ["tokens per step"])]:
        job = tmp_path / "j.yaml"
        job.write_text(body)
        code, _, err = run(capsys, "check", *SMALL, "--plan", "tp=1", "--job", str(job))
        paragraph(code, err, *words)


def test_tampered_saved_searches_are_refused_or_recomputed(tmp_path, capsys):
    base = {"model": "llama3.1-8b", "hardware": "h100", "job": {"gpus": 8, "global_batch": 64, "seq_len": 4096},
            "plans": [{"plan": {"tp": 2}, "memory": {"peak_bytes": 1.0}, "time": {"step_time_s": 1.0}}]}
    path = tmp_path / "plans.json"
    for change, words in [(("time", 5), ["'plans.0.time'"]), (("time", {"step_time_s": "$(reboot)"}), ["step_time_s"]),
                          (("time", {"step_time_s": -1}), ["greater than 0"]), (("memory", {"peak_bytes": "x"}), ["peak_bytes"])]:
        data = json.loads(json.dumps(base))
        data["plans"][0][change[0]] = change[1]
        path.write_text(json.dumps(data))
        for cmd in (["export", "--from", str(path)], ["explain", "--from", str(path)],
                    ["explain", *SMALL, "--plan", "tp=1", "--against", str(path)]):
            code, _, err = run(capsys, *cmd)
            paragraph(code, err, "is not a saved search planner can use", *words)
    # Edited but well-formed numbers: the export carries the recomputed predictions, and says so.
    path.write_text(json.dumps(base))
    code, out, err = run(capsys, "export", "--from", str(path))
    assert code == 0 and "differs from planner's recomputation" in err
    assert "step 1.00 s" not in out and "peak memory 0.0 GiB" not in out
    code, ref, _ = run(capsys, "explain", *SMALL, "--gpus", "8", "--global-batch", "64", "--seq-len", "4096",
                       "--plan", "tp=2", "--json")
    step = json.loads(ref)["time"]["step_time_s"]
    assert f"step {step:.2f} s" in out


def test_json_never_prints_infinity_or_nan(capsys):
    from planner.options import json_text

    assert json_text({"a": math.inf, "b": [math.nan, 1.5], "c": {"d": -math.inf}}) == json.dumps(
        {"a": None, "b": [None, 1.5], "c": {"d": None}}, indent=2, sort_keys=True)
    code, out, _ = run(capsys, "explain", *SMALL, "--plan", "tp=2", "--json")
    assert code == 0 and "Infinity" not in out and "NaN" not in out
    json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json"))


def test_a_step_time_beyond_the_tables_is_not_blamed_on_the_launcher(tmp_path, capsys):
    data = yaml.safe_load((REPO / "hw_specs" / "h100.yaml").read_text())
    for k in data["gpu"]["peak_flops"]:
        data["gpu"]["peak_flops"][k]["value"] = 1e9  # 1 GFLOP/s: a step takes years
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(data))
    code, _, err = run(capsys, "search", "--model", "llama3.1-8b", "--hw", str(path), "--gpus", "8")
    paragraph(code, err, "more than 9.5 hours per step", status=3)
    assert "start-up checks, although" not in err


# ---- exit codes ------------------------------------------------------------------------------

def test_exit_codes(capsys, monkeypatch):
    assert run(capsys, "explain", *SMALL, "--plan", "tp=2")[0] == 0
    big = ["--model", "llama3.1-70b", "--hw", "h100", "--gpus", "8", "--global-batch", "8"]
    code, out, _ = run(capsys, "explain", *big, "--plan", "sharding=ddp", "--json")
    assert code == 1 and json.loads(out)["memory"]["fits"] is False  # printed, and the status says so
    three = ["--gpus", "24", "--global-batch", "24"]
    paragraph(*run(capsys, "explain", *SMALL, *three, "--plan", "tp=3")[::2], "[heads-divisible-by-tp]", status=1)
    assert run(capsys, "check", *SMALL, *three, "--plan", "tp=3")[0] == 1
    paragraph(*run(capsys, "explain", *SMALL, "--plan", "tp=two")[::2], "Plan key 'tp'", status=2)
    code, _, err = run(capsys, "search", *big, "--fix", "tp=1,pp=1,sharding=ddp")
    paragraph(code, err, "Nothing fits", status=3)

    import planner.cost.memory as memory

    monkeypatch.setattr(memory, "memory_report", lambda *a, **k: 1 / 0)
    code, _, err = run(capsys, "explain", *SMALL, "--plan", "tp=2")
    paragraph(code, err, "unexpected ZeroDivisionError", "bug in planner", "--debug", status=70)
    code, _, err = run(capsys, "--debug", "explain", *SMALL, "--plan", "tp=2")
    assert code == 70 and "Traceback" in err and "ZeroDivisionError" in err
    code, _, err = run(capsys, "explain", *SMALL, "--plan", "tp=2", "--debug")
    assert code == 70 and "Traceback" in err


def test_errors_with_control_characters_stay_one_line(capsys):
    code, _, err = run(capsys, "explain", *SMALL, "--plan", "tp=1,\nfoo\x1b[31m")
    paragraph(code, err, "\\n")


def test_markup_in_a_name_is_text(tmp_path, capsys):
    data = yaml.safe_load((REPO / "models" / "llama3.1-8b.yaml").read_text())
    data.update(name="x[/]y[bold", display_name="[/bold] [@click=x]", aliases=[])
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run(capsys, "explain", "--model", str(path), "--hw", "h100", "--gpus", "8", "--global-batch", "64",
                         "--seq-len", "4096", "--plan", "tp=2")
    assert code == 0, err
    assert "[/bold] [@click=x] on h100" in out


def test_an_ascii_terminal_gets_ascii_not_a_crash():
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONIOENCODING="ascii", LANG="C", LC_ALL="C")
    proc = subprocess.run([sys.executable, "-m", "planner", "explain", *SMALL, "--plan", "tp=2"], capture_output=True,
                          env=env, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("ascii")
    assert " - 8 GPUs - global batch" in out and "\u00b7" not in out


def test_nothing_fits_for_a_model_too_large_for_any_gpu_count_answers_at_once(tmp_path, capsys):
    # Before: six more searches at 2x..64x the GPUs; now skipped when even the weights alone, fully
    # sharded at one byte per parameter, cannot fit at that count.
    src = json.loads((Path(__file__).parent / "fixtures" / "hf" / "llama3.1-8b" / "config.json").read_text())
    src.update(num_hidden_layers=256, hidden_size=2**20, intermediate_size=2**20, num_attention_heads=2**14,
               num_key_value_heads=2**14)
    (tmp_path / "giant").mkdir()
    cfg = tmp_path / "giant" / "config.json"
    cfg.write_text(json.dumps(src))
    t0 = time.perf_counter()
    code, _, err = run(capsys, "search", "--model", str(cfg), "--hw", "h100", "--gpus", "8", "--global-batch", "8",
                       "--seq-len", "4096")
    paragraph(code, err, "Nothing fits", status=3)
    assert time.perf_counter() - t0 < 10
    src["num_hidden_layers"] = 257
    cfg.write_text(json.dumps(src))
    paragraph(*run(capsys, "show-model", str(cfg))[::2], "num_layers", "less than or equal to 256")


def test_fix_edp_is_honoured(capsys):
    # --max pp=1: the fix is honoured whatever else the space holds (5.4 -> 0.9 s).
    code, out, err = run(capsys, "search", "--model", "mixtral-8x7b", "--hw", "h100", "--gpus", "32", "--fix", "edp=4",
                         "--max", "pp=1", "--top", "3", "--json")
    assert code == 0, err
    assert {p["plan"]["edp"] for p in json.loads(out)["plans"]} == {4}


def test_duplicate_yaml_keys_and_a_margin_larger_than_the_gpu(tmp_path, capsys):
    job = tmp_path / "j.yaml"
    job.write_text("gpus: 8\nglobal_batch: 64\nseq_len: 4096\ngpus: 16\n")
    code, _, err = run(capsys, "check", *SMALL, "--plan", "tp=1", "--job", str(job))
    paragraph(code, err, "line 4", "the key 'gpus' is given twice (first at line 1)")
    code, _, err = run(capsys, "search", *SMALL, "--memory-margin", "80")
    paragraph(code, err, "--memory-margin 80 GiB leaves nothing of h100's 79.6 GiB usable HBM")


def test_json_is_byte_identical_across_directories_and_locales(tmp_path, capsys, monkeypatch):
    argv = ["explain", *SMALL, "--plan", "tp=2,pp=2", "--json"]
    first = run(capsys, *argv)[1]
    monkeypatch.chdir(tmp_path)
    assert run(capsys, *argv)[1] == first
    env = dict(os.environ, PYTHONPATH=str(REPO), LANG="C", LC_ALL="C", PYTHONIOENCODING="ascii")
    proc = subprocess.run([sys.executable, "-m", "planner", *argv], capture_output=True, env=env, cwd=tmp_path,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.decode() == first


def test_results_check_needs_the_committed_folder(capsys, tmp_path):
    t0 = time.perf_counter()
    code, _, err = run(capsys, "results", "--check", "--out", str(tmp_path / "missing"), "--only", "seed-claims")
    paragraph(code, err, "which is not a folder")
    assert time.perf_counter() - t0 < 5  # refused before regenerating anything


@pytest.mark.parametrize("job, words", [
    ({"gpus": -64, "global_batch": 64, "seq_len": 4096}, ["'job.gpus' = -64", "greater than 0"]),
    ({"gpus": 8, "global_batch": 0, "seq_len": 4096}, ["'job.global_batch' = 0"]),
    ({"gpus": 8, "global_batch": 64, "seq_len": 2**40}, ["'job.seq_len'"]),
    ({"gpus": 8, "global_batch": 64, "seq_len": 4096, "domain_fill": -1}, ["'job.domain_fill' = -1"]),
])
def test_an_edited_job_in_a_saved_search_is_blamed_on_the_file_not_an_option(tmp_path, capsys, job, words):
    path = tmp_path / "plans.json"
    path.write_text(json.dumps({"model": "llama3.1-8b", "hardware": "h100", "job": job,
                                "plans": [{"plan": {"tp": 2}}]}))
    for cmd in (["export", "--from", str(path)], ["check", "--from", str(path)], ["explain", "--from", str(path)]):
        code, _, err = run(capsys, *cmd)
        paragraph(code, err, f"'{path}' is not a saved search planner can use", *words)
        assert "--gpus" not in err and "--global-batch" not in err and "--seq-len" not in err


def test_errors_quote_a_bounded_excerpt_of_a_plan_or_layout(capsys):
    from planner.errors import EXCERPT_CHARS, excerpt

    assert excerpt("x" * EXCERPT_CHARS) == "x" * EXCERPT_CHARS
    assert excerpt("x" * 1000) == "x" * EXCERPT_CHARS + "... (1,000 characters)"
    nested = "(" * 1000 + "t" + ")" * 1000
    for plan in (f"pp=2,layout={nested}", f"recompute={'y' * 3000}", f"{'z' * 3000}", f"{'k' * 3000}=1",
                 f"sharding={'q' * 3000}", f"stage_recompute={'1/' * 1500}"):
        code, _, err = run(capsys, "check", *SMALL, "--gpus", "64", "--plan", plan)
        paragraph(code, err)
        # The hint and the message's own words take ~300 characters; the quoted input at most two
        # excerpts of 80 (the layout parser's own error, inside the plan key's).
        assert len(err) < 700, (len(err), err[:200])


@pytest.mark.parametrize("body, words", [
    # torchtitan's Parallelism.tensor_parallel_degree is an int: an inline table was once flattened
    # into an unread key, and TP silently read as its default 1
    ("[parallelism]\ntensor_parallel_degree = { a = 1 }\n", ["tensor_parallel_degree", "{'a': 1}", "an integer"]),
    ("[parallelism]\ntensor_parallel_degree = 2.0\n", ["tensor_parallel_degree", "2.0", "an integer"]),
    ("[training]\nseq_len = true\n", ["seq_len", "True", "an integer"]),
    ('[model]\nconverters = ["nonsense"]\n', ["'nonsense'", "does not register"]),
    ('[model]\nconverters = [["float8"]]\n', ["model.converters", "a list of strings"]),
    ('[job]\nconfig_file = 3\n', ["job.config_file", "a string"]),
])
def test_torchtitan_toml_values_torchtitan_refuses(tmp_path, capsys, body, words):
    path = tmp_path / "job.toml"
    path.write_text(body)
    code, _, err = run(capsys, "check", "--torchtitan", str(path), "--model", "llama3.1-8b", "--hw", "h100",
                       "--gpus", "8")
    paragraph(code, err, *words)
