"""Fuzzing the edges (issue #17): plan strings, layouts, model / hardware / job YAML, config.json
values, launch scripts and command-line options. Whatever the input: no traceback, never the
internal-error status 70, an error is one paragraph, and an input known to be invalid never exits 0.

Deterministic (derandomize) and bounded (max_examples) so that CI stays fast; each case runs under
a 10 s alarm, only as a hang guard."""

from __future__ import annotations

import contextlib
import io
import json
import math
import signal
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli import main
from planner.errors import PlannerError
from planner.specs.catalog import catalog_root
from planner.specs.layout import parse_layout
from planner.specs.plan import Plan

HF = Path(__file__).parent / "fixtures" / "hf" / "llama3.1-8b" / "config.json"
SMALL = ["--model", "llama3.1-8b", "--hw", "h100"]
BASE = settings(derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def fuzz(examples: int) -> settings:
    return settings(BASE, max_examples=examples)


@contextlib.contextmanager
def hang_guard(seconds: int = 10):
    def fail(*_):
        raise TimeoutError(f"a fuzz case ran for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def call(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with hang_guard(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def sane(code: int, err: str, *, invalid: bool = False) -> None:
    assert "Traceback" not in err, err
    assert code in (0, 1, 2, 3), err  # 70 would be a bug in planner
    lines = [ln for ln in err.splitlines() if ln.startswith("Error: ")]
    if code in (2, 3) or lines:  # (1 without an error is a plan that does not fit: the report says so)
        assert len(lines) == 1 and lines[0] == err.strip().splitlines()[-1], err
    if invalid:
        assert code != 0, f"invalid input accepted: {err}"


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory(prefix="planner-fuzz-") as d:
        yield Path(d)


# ---- hostile values --------------------------------------------------------------------------

BAD_INTS = [0, -1, True, False, 2.5, math.nan, math.inf, -math.inf, 10**30, "x", "", [1], {"a": 1}, [[[[[[1]]]]]]]
BAD_FLOATS = [math.nan, math.inf, -math.inf, -1.0, True, "x", 1e300, [1.0], {"v": 1}]
BAD_JSON_TOKENS = ["NaN", "Infinity", "-Infinity", "1e400", "0", "-5", "true", "false", "2.5", '"x"', "[1]",
                   "1" + "0" * 30, "{}", "9" * 5000, "[" * 200 + "]" * 200]
HOSTILE_TEXT = st.sampled_from(["", " ", "\n", "\x00", "\x1b[31m", "$(id)", "`id`", "'", '"', ";", "|", "&", "[/]",
                                "[bold]", "\u00b7", "\u2028", "\ud7ff", "\U0001f600", "%s", "{}", "\\", "*", "(", ")",
                                "9" * 40, "-1", "nan", "inf", "1e400", "true", "=", ",", "/"])


# ---- plan strings and layouts ----------------------------------------------------------------

PLAN_KEYS = sorted(Plan.model_fields) + ["edp", "foo", "", "TP", " tp"]
PLAN_VALUES = st.one_of(
    st.sampled_from(["1", "2", "4", "8", "0", "-1", "3", "full", "full:2", "none", "core_attn+mlp", "hsdp:4", "fsdp",
                     "optimizer", "fp8", "bf16", "on", "off", "deepep", "E|t*32L", "Et*16|t*16L", "|Et*32L",
                     "Et|(tt|)*15tL", "1/1/1/1", "2/0", "99999999999", "\u00b2", "1e3", "nan"]),
    HOSTILE_TEXT,
)


@st.composite
def plan_strings(draw) -> str:
    pairs = draw(st.lists(st.tuples(st.sampled_from(PLAN_KEYS), PLAN_VALUES), max_size=5))
    text = ",".join(f"{k}={v}" for k, v in pairs)
    if draw(st.booleans()):
        text += draw(HOSTILE_TEXT)
    return text


@fuzz(30)
@given(plan_strings())
def test_plan_strings(text):
    code, out, err = call("explain", *SMALL, "--plan", text, "--json")
    sane(code, err)
    if code == 0:
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json"))


@fuzz(30)
@given(st.sampled_from(["tp", "pp", "cp", "vpp", "ep", "mbs", "dp", "etp"]),
       st.sampled_from(["0", "-1", "nan", "inf", "1e3", "2.5", "\u0663", "\u00b2", "true", "", "99999999999999999999"]))
def test_invalid_degrees_never_exit_0(key, value):
    code, _, err = call("check", *SMALL, "--plan", f"{key}={value}")
    sane(code, err, invalid=True)


@fuzz(300)
@given(st.text(alphabet="Etml|()*0123456789, x", max_size=60))
def test_layout_strings(text):
    with hang_guard(5):
        try:
            stages = parse_layout(text)
        except PlannerError as exc:
            assert "\n" not in exc.paragraph()
        else:
            assert sum(len(s) for s in stages) <= 2**16


# ---- spec files ------------------------------------------------------------------------------

TINY = {"name": "tiny", "source": ["a test"], "hidden_size": 64, "num_layers": 2, "vocab_size": 1000,
        "attention": {"kind": "gqa", "num_heads": 8, "num_kv_heads": 4, "head_dim": 8},
        "ffn": {"activation": "swiglu", "hidden_size": 128},
        "moe": {"num_experts": 8, "top_k": 2, "expert_hidden_size": 32}}
MODEL_INTS = [("hidden_size",), ("num_layers",), ("vocab_size",), ("attention", "num_heads"),
              ("attention", "num_kv_heads"), ("attention", "head_dim"), ("ffn", "hidden_size"),
              ("moe", "num_experts"), ("moe", "top_k"), ("moe", "expert_hidden_size")]


def _set(data: dict, path: tuple, value) -> dict:
    data = json.loads(json.dumps(data))
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return data


def _yaml_file(scratch: Path, name: str, data) -> Path:
    path = scratch / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


def test_the_fuzz_bases_are_valid(scratch):
    assert call("show-model", str(_yaml_file(scratch, "tiny.yaml", TINY)), "--json")[0] == 0
    assert call("show-hw", str(catalog_root() / "hw_specs" / "h100.yaml"), "--json")[0] == 0


@fuzz(30)
@given(st.sampled_from(MODEL_INTS), st.sampled_from(BAD_INTS))
def test_model_yaml_numbers(scratch, path, value):
    code, _, err = call("show-model", str(_yaml_file(scratch, "m.yaml", _set(TINY, path, value))), "--json")
    sane(code, err, invalid=True)


@fuzz(25)
@given(st.sampled_from(["name", "display_name", "aliases", "source", "notes"]), HOSTILE_TEXT, HOSTILE_TEXT)
def test_model_yaml_text(scratch, key, a, b):
    value = [a + b] if key in ("aliases", "source") else a + "x" + b
    code, out, err = call("show-model", str(_yaml_file(scratch, "t.yaml", {**TINY, key: value})), "--json")
    sane(code, err)


HW_NUMBERS = [("gpu", "peak_flops", "bf16", "value"), ("gpu", "hbm_usable_bytes", "value"), ("gpu", "hbm_bandwidth", "value"),
              ("nvlink", "domain_size", "value"), ("nvlink", "bandwidth_per_direction", "value"),
              ("scale_out", "bandwidth_per_direction", "value"), ("scale_out", "latency_s", "value"),
              ("host", "bandwidth_per_direction", "value"), ("host", "host_memory_bytes", "value")]


@fuzz(30)
@given(st.sampled_from(HW_NUMBERS), st.sampled_from(BAD_FLOATS + [0, 10**30]))
def test_hardware_yaml_numbers(scratch, path, value):
    base = yaml.safe_load((catalog_root() / "hw_specs" / "h100.yaml").read_text())
    code, out, err = call("show-hw", str(_yaml_file(scratch, "hw.yaml", _set(base, path, value))), "--json")
    sane(code, err, invalid=True)


@fuzz(30)
@given(st.sampled_from(["hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "intermediate_size",
                        "num_key_value_heads"]), st.sampled_from(BAD_JSON_TOKENS))
def test_config_json_values(scratch, field, token):
    data = json.loads(HF.read_text())
    data[field] = "@@VALUE@@"
    folder = scratch / "hfmodel"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data).replace('"@@VALUE@@"', token))
    code, _, err = call("show-model", str(folder / "config.json"), "--json")
    sane(code, err, invalid=True)


BAD_MARGINS = [-1, -0.5, True, math.nan, math.inf, 2**70, "x", [1]]


@fuzz(20)
@given(st.sampled_from(["gpus", "global_batch", "seq_len", "domain_fill", "memory_margin_bytes"]), st.data())
def test_job_yaml(scratch, key, data):
    value = data.draw(st.sampled_from(BAD_MARGINS if key == "memory_margin_bytes" else BAD_INTS + [2**70]))
    job = {"gpus": 8, "global_batch": 64, "seq_len": 4096, key: value}
    code, _, err = call("check", *SMALL, "--plan", "tp=1", "--job", str(_yaml_file(scratch, "j.yaml", job)))
    sane(code, err, invalid=True)


# ---- launch scripts --------------------------------------------------------------------------

FLAGS = ["--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers", "--hidden-size",
         "--num-attention-heads", "--micro-batch-size", "--global-batch-size", "--seq-length", "--bf16",
         "--use-distributed-optimizer", "--recompute-granularity", "--frobnicate", "--context-parallel-size"]
WORDS = ["1", "2", "8", "32", "0", "-3", "x", "$TP", "${TP:-4}", "${UNSET}", '"${ARR[@]}"', "'a b'", '"$(id)"', "`id`",
         "\\", "#c", "\u00e9", "1e3", "99999999999999999999", "--", "'", '"', ";", "|", "&&", "(", ")"]
LINES = ["TP=2", "export TP=4", "ARR=(--a 1)", "X=$TP", "set -e", "# comment", "", "cd /tmp"]


@st.composite
def scripts(draw) -> str:
    lines = draw(st.lists(st.sampled_from(LINES), max_size=3))
    args = draw(st.lists(st.one_of(st.sampled_from(FLAGS), st.sampled_from(WORDS)), max_size=12))
    sep = draw(st.sampled_from([" ", " \\\n    "]))
    launcher = draw(st.sampled_from(["torchrun --nproc-per-node 8 --nnodes 1 pretrain_gpt.py",
                                     "python pretrain_gpt.py", "torchrun --nproc-per-node $N pretrain_gpt.py", ""]))
    return "\n".join(lines + [sep.join([launcher, *args])]) + "\n"


@fuzz(30)
@given(scripts())
def test_launch_scripts(scratch, text):
    path = scratch / "run.sh"
    path.write_text(text)
    code, _, err = call("check", "--megatron-args", str(path), "--model", "llama3.1-8b", "--hw", "h100",
                        "--gpus", "8", "--seq-len", "4096", "--json")
    sane(code, err)


# ---- command-line options ----------------------------------------------------------------------

INT_OPTIONS = ["--gpus", "--global-batch", "--seq-len", "--domain-fill"]
BAD_INT_TEXT = ["0", "-1", "nan", "inf", "1e3", "2.5", "", "99999999999999999999", "0x10", "\u0663"]
FLOAT_OPTIONS = [("explain", "--memory-margin"), ("explain", "--routing-imbalance"), ("compare", "--tokens"),
                 ("search", "--time-limit")]
BAD_FLOAT_TEXT = ["nan", "inf", "-inf", "-1", "1e400", "x", "", "1e30"]


@fuzz(25)
@given(st.sampled_from(INT_OPTIONS), st.sampled_from(BAD_INT_TEXT))
def test_integer_options(option, value):
    code, _, err = call("check", *SMALL, "--plan", "tp=1", option, value)
    sane(code, err, invalid=True)


@fuzz(25)
@given(st.sampled_from(FLOAT_OPTIONS), st.sampled_from(BAD_FLOAT_TEXT))
def test_float_options(cmd_option, value):
    cmd, option = cmd_option
    extra = ["--plan", "tp=1"] if cmd == "explain" else []
    code, _, err = call(cmd, *SMALL, *extra, option, value)
    sane(code, err, invalid=True)


@fuzz(15)
@given(st.sampled_from(["--capacity", "--device", "--stage", "--top"]), st.sampled_from(BAD_FLOAT_TEXT + ["-5"]))
def test_memtrace_options(scratch, option, value):
    path = scratch / "snap.pickle"
    if not path.exists():
        import pickle

        path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    code, _, err = call("memtrace", str(path), option, value)
    sane(code, err, invalid=option != "--top" or value not in ("1e30",))
