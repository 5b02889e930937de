"""Files planner reads and writes, against a careless user (issue #17): no write loses data (atomic
replace, never over a file the same command read), every bad output path is one paragraph before
the expensive work, and no input can block or exhaust planner (FIFOs, devices, folders, huge or
deeply nested files, alias bombs, non-UTF-8 text, NaN and overflowing numbers)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from planner.cli import main
from planner.errors import PlannerError
from planner.files import MAX_SPEC_BYTES, check_output, write_text

REPO = Path(__file__).resolve().parents[1]
HF = Path(__file__).parent / "fixtures" / "hf"
SMALL = ["--model", "llama3.1-8b", "--hw", "h100"]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(autouse=True)
def hang_guard():
    """Each case here must answer at once; a regression that blocks fails instead of hanging CI."""
    def fail(*_):
        raise TimeoutError("planner blocked on a hostile file")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def paragraph(code: int, err: str, *words: str, status: int = 2) -> None:
    assert code == status, err
    assert "Traceback" not in err and err.startswith("Error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)


def no_temp_files(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".") and ".tmp" in p.name]


@pytest.fixture
def no_search(monkeypatch):
    """Output paths are checked before the search: it must never run in these cases."""
    import planner.search.driver as driver

    def boom(*a, **k):
        raise AssertionError("the search ran although the output path is bad")

    monkeypatch.setattr(driver, "run_search", boom)


def hf_config(tmp_path: Path, name: str = "own") -> Path:
    d = tmp_path / name
    d.mkdir()
    path = d / "config.json"
    path.write_text((HF / "llama3.1-8b" / "config.json").read_text())
    return path


# ---- writes never lose data ----------------------------------------------------------------------

def test_search_never_saves_over_its_own_model(tmp_path, capsys, no_search):
    cfg = hf_config(tmp_path)
    before = cfg.read_bytes()
    code, _, err = run(capsys, "search", "--model", str(cfg), "--hw", "h100", "--gpus", "8", "--global-batch", "64",
                       "--seq-len", "4096", "--save", str(cfg))
    paragraph(code, err, "it is the HuggingFace config file this command read", "never writes over its own input")
    assert cfg.read_bytes() == before


def test_search_never_saves_over_its_job_hardware_or_calibration(tmp_path, capsys, no_search):
    job = tmp_path / "j.yaml"
    job.write_text("gpus: 8\nglobal_batch: 64\nseq_len: 4096\n")
    hw = tmp_path / "hw.yaml"
    hw.write_text((REPO / "hw_specs" / "h100.yaml").read_text())
    cal = tmp_path / "cal.yaml"
    cal.write_text("hardware: h100\nsource: a test file\nhbm_bandwidth: 3.0e12\n")
    for target, kind in ((job, "job"), (hw, "hardware"), (cal, "calibration")):
        before = target.read_bytes()
        code, _, err = run(capsys, "search", "--model", "llama3.1-8b", "--hw", str(hw), "--job", str(job),
                           "--calibration", str(cal), "--save", str(target))
        paragraph(code, err, f"it is the {kind} file this command read")
        assert target.read_bytes() == before
    # The same file under another name (a hard link) is still the input.
    link = tmp_path / "link.yaml"
    os.link(job, link)
    code, _, err = run(capsys, "search", *SMALL, "--job", str(job), "--save", str(link))
    paragraph(code, err, "it is the job file this command read", f"(as '{job}')")


def test_export_never_overwrites_the_saved_search(tmp_path, capsys):
    saved = tmp_path / "plans.json"
    saved.write_text(json.dumps({"model": "llama3.1-8b", "hardware": "h100",
                                 "job": {"gpus": 8, "global_batch": 64, "seq_len": 4096},
                                 "plans": [{"plan": "tp=2"}]}))
    before = saved.read_bytes()
    code, _, err = run(capsys, "export", "--from", str(saved), "--format", "json", "--out", str(saved))
    paragraph(code, err, "it is the saved search file this command read")
    assert saved.read_bytes() == before


def test_memtrace_and_explain_never_plot_over_their_inputs(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "memtrace"))
    from memtrace_helpers import event, segment, write_pickle

    snap = write_pickle(tmp_path / "snap.png", {"segments": [segment(0, 1024, [(1024, 0, "inactive")])],
                                                "device_traces": [[event("alloc", 0, 512)]]})
    before = snap.read_bytes()
    code, _, err = run(capsys, "memtrace", str(snap), "--plot", str(snap))
    paragraph(code, err, "it is the snapshot file this command read")
    assert snap.read_bytes() == before
    script = tmp_path / "run.png"
    script.write_text("torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 --bf16\n")
    code, _, err = run(capsys, "explain", "--megatron-args", str(script), *SMALL, "--seq-len", "4096",
                       "--global-batch", "64", "--plot", str(script))
    paragraph(code, err, "it is the launch script file this command read")


@pytest.mark.parametrize("target, words", [
    ("missing/plans.json", ["the folder", "does not exist", "mkdir -p"]),
    (".", ["it is a folder"]),
    ("/dev/full", ["it is not a regular file"]),
    ("readonly.json", ["the file is read-only"]),
    ("rofolder/plans.json", ["is read-only"]),
])
def test_bad_save_paths_are_one_paragraph_before_the_search(tmp_path, capsys, no_search, target, words, monkeypatch):
    if target == "/dev/full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "readonly.json").write_text("{}")
    (tmp_path / "readonly.json").chmod(0o444)
    (tmp_path / "rofolder").mkdir()
    (tmp_path / "rofolder").chmod(0o555)
    try:
        code, _, err = run(capsys, "search", *SMALL, "--save", target)
        paragraph(code, err, f"Cannot write saved search '{target}'", *words)
    finally:
        (tmp_path / "rofolder").chmod(0o755)
    assert (tmp_path / "readonly.json").read_text() == "{}"


@pytest.mark.parametrize("argv", [
    ["explain", *SMALL, "--plan", "tp=2", "--plot", "{d}/missing/mem.png"],
    ["compare", "--model", "llama3.1-8b", "--hw", "h100", "--plot", "{d}/missing/cmp.png"],
    ["export", *SMALL, "--plan", "tp=2", "--out", "{d}/missing/run.sh"],
    ["explain", *SMALL, "--plan", "tp=2", "--plot", "{d}/folder.png"],
    ["memtrace", "{d}/snap.pickle", "--plot", "{d}/missing/m.png"],
])
def test_bad_plot_and_out_paths(tmp_path, capsys, argv):
    (tmp_path / "folder.png").mkdir()
    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "memtrace"))
    from memtrace_helpers import event, segment, write_pickle

    write_pickle(tmp_path / "snap.pickle", {"segments": [segment(0, 1024, [(1024, 0, "inactive")])],
                                           "device_traces": [[event("alloc", 0, 512)]]})
    code, _, err = run(capsys, *[a.format(d=tmp_path) for a in argv])
    paragraph(code, err, "Cannot write")


def test_results_out_must_be_a_writable_folder(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    code, _, err = run(capsys, "results", "--out", str(f), "--only", "seed-claims")
    paragraph(code, err, "it is a file, not a folder")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, _, err = run(capsys, "results", "--out", str(ro), "--only", "seed-claims")
        paragraph(code, err, "the folder is read-only")
    finally:
        ro.chmod(0o755)


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "run.sh"
    target.write_text("the user's own script\n")
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(PlannerError) as err:
        write_text(target, "#!/usr/bin/env bash\n" + "x" * 10_000, "export", executable=True)
    assert "the disk is full; it is unchanged" in err.value.paragraph()
    assert target.read_text() == "the user's own script\n"
    no_temp_files(tmp_path)
    monkeypatch.setattr(os, "fsync", real_fsync)
    write_text(target, "#!/usr/bin/env bash\n", "export", executable=True)
    assert target.read_text() == "#!/usr/bin/env bash\n" and os.access(target, os.X_OK)
    no_temp_files(tmp_path)


def test_export_out_full_disk_through_the_cli(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run.sh"
    out.write_text("old\n")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    code, _, err = run(capsys, "export", *SMALL, "--plan", "tp=2", "--out", str(out))
    paragraph(code, err, "the disk is full", "it is unchanged")
    assert out.read_text() == "old\n"
    no_temp_files(tmp_path)


def test_ctrl_c_during_search_writes_nothing(tmp_path, capsys, monkeypatch):
    import planner.search.driver as driver

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "run_search", interrupted)
    save = tmp_path / "plans.json"
    code, _, err = run(capsys, "search", *SMALL, "--save", str(save))
    assert code == 130 and "Traceback" not in err and not save.exists()
    no_temp_files(tmp_path)


def test_ctrl_c_as_a_signal_exits_130_with_nothing_half_written(tmp_path):
    save = tmp_path / "plans.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # Ctrl-C reaches a foreground job whose SIGINT is at its default; a shell starts a background
    # job (`pytest &`, CI's side steps) with SIGINT ignored, which the child inherits and Python then
    # keeps ignoring (as nohup wants): the child gets the terminal's disposition here.
    proc = subprocess.Popen([sys.executable, "-m", "planner", "search", "--model", "v3", "--hw", "nvl72",
                             "--gpus", "65536", "--solver", "exhaustive", "--save", str(save)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(2.5)  # imported and searching (the whole search takes several seconds)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err and not save.exists()
    no_temp_files(tmp_path)


def test_check_output_resolves_a_symlink_to_its_target(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, '{"new": 1}\n', "saved search")
    assert link.is_symlink() and real.read_text() == '{"new": 1}\n'
    assert check_output(tmp_path / "new.json", "x") == tmp_path / "new.json"


# ---- reading: bounded, regular files only --------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("argv", [
    ["show-model", "{f}.yaml"],
    ["show-hw", "{f}.yaml"],
    ["check", *SMALL, "--plan", "tp=1", "--job", "{f}.yaml"],
    ["explain", *SMALL, "--plan", "tp=1", "--calibration", "{f}.yaml"],
    ["export", "--from", "{f}.json"],
    ["check", "--megatron-args", "{f}.sh", "--hw", "h100"],
    ["explain", *SMALL, "--plan", "tp=1", "--against", "{f}.json"],
])
def test_a_fifo_blocks_nothing(tmp_path, capsys, argv):
    f = tmp_path / "pipe"
    for ext in ("yaml", "json", "sh"):
        os.mkfifo(f"{f}.{ext}")
    code, _, err = run(capsys, *[a.format(f=f) for a in argv])
    paragraph(code, err, "is not a regular file", "cannot block it")


def test_dev_zero_and_a_folder(tmp_path, capsys):
    code, _, err = run(capsys, "search", *SMALL, "--job", "/dev/zero")
    paragraph(code, err, "'/dev/zero' is not a regular file")
    code, _, err = run(capsys, "show-hw", str(tmp_path))
    paragraph(code, err, "is a folder, not a hardware file")
    code, _, err = run(capsys, "show-model", str(tmp_path))
    paragraph(code, err, "is a folder", "holds no config.json", "HuggingFace model folder")


def test_a_huggingface_model_folder_reads_its_config(tmp_path, capsys):
    cfg = hf_config(tmp_path, "Llama-3.1-8B")
    code, out, err = run(capsys, "show-model", str(cfg.parent), "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["name"] == "llama-3.1-8b"


def test_empty_model_and_hardware_names(capsys):
    code, _, err = run(capsys, "show-model", "")
    paragraph(code, err, "The model name is empty")
    code, _, err = run(capsys, "explain", "--model", "llama3.1-8b", "--hw", "", "--plan", "tp=1")
    paragraph(code, err, "The hardware name is empty")


def test_size_caps(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n" + "# padding\n" * (MAX_SPEC_BYTES // 10 + 1))
    code, _, err = run(capsys, "show-model", str(big))
    paragraph(code, err, "more than the 1.0 MiB planner reads from a model file")


@pytest.mark.parametrize("text, words", [
    ("a: " + "[" * 5000 + "]" * 5000, ["more than 32 levels deep"]),
    ("a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
                                            for p, c in zip("abcdefg", "bcdefgh")), ["YAML aliases", "counted as the copies"]),
    ("name: !!python/object/apply:os.system ['touch PWNED']\n", ["could not determine a constructor"]),
    ("num_layers: " + "9" * 5000 + "\n", ["a value planner cannot read"]),
])
def test_hostile_yaml(tmp_path, capsys, text, words, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code, _, err = run(capsys, "show-model", str(path))
    paragraph(code, err, *words)
    assert not (tmp_path / "PWNED").exists()


DEEP = 50_000


@pytest.mark.parametrize("name, text, argv", [
    ("deep.yaml", "model:\n  x: " + "[" * DEEP + "]" * DEEP + "\n", ["check", "--bridge", "{}", "-m", "llama3.1-8b"]),
    ("deep.yaml", "- " * DEEP + "1\n", ["check", "--bridge", "{}", "-m", "llama3.1-8b"]),
    ("deep.toml", "[parallelism]\nx = " + "[" * DEEP + "]" * DEEP + "\n", ["check", "--torchtitan", "{}", "-m", "llama3.1-8b"]),
    ("deep.toml", "x = " + "{a=" * DEEP + "1" + "}" * DEEP + "\n", ["check", "--torchtitan", "{}", "-m", "llama3.1-8b"]),
    ("deep.json", '{"plans": ' + "[" * DEEP + "]" * DEEP + "}", ["check", "--from", "{}"]),
    ("config.json", '{"model_type": "llama", "x": ' + "{\"a\": " * DEEP + "1" + "}" * DEEP + "}", ["show-model", "{}"]),
    ("runs.yaml", "runs: " + "[" * DEEP + "]" * DEEP + "\n", ["validate", "{}"]),
    ("job.yaml", "gpus:\n" + "".join(" " * i + "- \n" for i in range(0, 200)), ["check", "-m", "llama3.1-8b",
                                                                               "--job", "{}", "-p", "tp=1"]),
])
def test_every_structured_reader_refuses_deep_nesting(tmp_path, capsys, name, text, argv):
    """One depth guard (planner.files.MAX_NESTING, one paragraph) for YAML, TOML and JSON: a
    50,000-deep Bridge YAML or torchtitan TOML once ended in a RecursionError (exit 70)."""
    path = tmp_path / name
    path.write_text(text)
    code, _, err = run(capsys, *[a.replace("{}", str(path)) for a in argv])
    paragraph(code, err, f"'{path}' nests lists or mappings more than 32 levels deep")


def test_the_bracket_scan_skips_strings_and_comments():
    from planner.files import check_flow_nesting

    deep = "[" * 40
    check_flow_nesting(f'a = "{deep}"\nb = \'{deep}\'\n# {deep}\nc = """\n{deep}\n"""\nd = [[1], {{x = "]"}}]\n', "t")
    check_flow_nesting('{"k": "\\"' + deep + '"}', "t")  # an escaped quote does not end the string
    with pytest.raises(PlannerError, match="more than 32 levels deep"):
        check_flow_nesting("x = " + "[" * 33 + "]" * 33, "t")
    check_flow_nesting("x = " + "[" * 32 + "]" * 32, "t")


def test_non_utf8_text_names_the_line(tmp_path, capsys):
    path = tmp_path / "m.yaml"
    path.write_bytes(b"name: tiny\nsource: [caf\xe9]\n")
    code, _, err = run(capsys, "show-model", str(path))
    paragraph(code, err, "is not UTF-8 text", "byte 0xe9 at line 2")


@pytest.mark.parametrize("value, words", [
    ("NaN", ["NaN is not a number JSON allows"]),
    ("Infinity", ["Infinity is not a number JSON allows"]),
    ("-Infinity", ["-Infinity is not a number JSON allows"]),
    ("1e400", ["too large for a floating-point number"]),
    ("9" * 5000, ["is not valid JSON"]),
    ("1" + "0" * 30, ["Input should be less than or equal to"]),
    ("true", ["must be a whole number, not True"]),
    ("[" * 5000 + "]" * 5000, ["nests lists or mappings more than 32 levels deep"]),
])
def test_hostile_config_json_values(tmp_path, capsys, value, words):
    cfg = hf_config(tmp_path)
    text = cfg.read_text()
    data = json.loads(text)
    text = text.replace(f'"vocab_size": {data["vocab_size"]}', f'"vocab_size": {value}')
    assert value in text
    cfg.write_text(text)
    code, _, err = run(capsys, "show-model", str(cfg))
    paragraph(code, err, *words)


@pytest.mark.parametrize("change, words", [
    ({"topk_group": 9}, ["group_top_k (topk_group, 9) cannot exceed num_groups (n_group, 8)", "MoEGate"]),
    ({"n_group": 7, "topk_group": 4}, ["num_experts (256) must split into num_groups (n_group, 7) equal groups"]),
])
def test_group_limited_routing_needs_topk_group_within_n_group(tmp_path, capsys, change, words):
    d = tmp_path / "v3"
    d.mkdir()
    data = json.loads((HF / "deepseek-v3" / "config.json").read_text())
    assert (data["n_group"], data["topk_group"]) == (8, 4)
    (d / "config.json").write_text(json.dumps({**data, **change}))
    code, _, err = run(capsys, "show-model", str(d / "config.json"))
    paragraph(code, err, *words)


def test_hostile_saved_search_and_calibration_files(tmp_path, capsys):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"hardware": "h100", "source": "a test", "hbm_bandwidth": 1e300}))
    code, _, err = run(capsys, "explain", *SMALL, "--plan", "tp=1", "--calibration", str(cal))
    paragraph(code, err, "hbm_bandwidth", "less than or equal to")
    cal.write_text('{"hardware": "h100", "source": "a test", "hbm_bandwidth": Infinity}')
    code, _, err = run(capsys, "explain", *SMALL, "--plan", "tp=1", "--calibration", str(cal))
    paragraph(code, err, "Infinity is not a number JSON allows")
    cal2 = tmp_path / "cal.yaml"
    cal2.write_text("hardware: h100\nsource: a test\ngemm: [{m: 8192, n: 8192, k: 8192, tflops: .inf}]\n")
    code, _, err = run(capsys, "explain", *SMALL, "--plan", "tp=1", "--calibration", str(cal2))
    paragraph(code, err, "tflops", "finite")


def test_hostile_hardware_yaml_values(tmp_path, capsys):
    base = yaml.safe_load((REPO / "hw_specs" / "h100.yaml").read_text())
    cases = [
        (("nvlink", "bandwidth_per_direction", "value"), float("inf"), "finite"),
        (("gpu", "peak_flops", "bf16", "value"), float("nan"), "finite"),
        (("nvlink", "domain_size", "value"), True, "is a boolean, not a number"),
        (("nvlink", "domain_size", "value"), 10**30, "less than or equal to"),
        (("gpu", "hbm_usable_bytes", "value"), 80.0, "greater than or equal to"),
        (("scale_out", "latency_s", "value"), 1e9, "less than or equal to 1"),
    ]
    for keys, value, words in cases:
        data = json.loads(json.dumps(base))
        node = data
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
        path = tmp_path / "hw.yaml"
        path.write_text(yaml.safe_dump(data))
        code, _, err = run(capsys, "show-hw", str(path), "--json")
        paragraph(code, err, ".".join(keys), words)
