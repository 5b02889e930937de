"""The catalog commands: `planner models`, `hw`, `show-model` (a name, an alias or a config.json),
`show-hw`, their --json output, and a CLI import that stays light."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


from planner.cli import main
from planner.specs.catalog import catalog_names

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def _ok(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_help_lists_the_catalog_commands(capsys):
    out = _ok(capsys, "--help")
    for cmd in ("models", "hw", "show-model", "show-hw"):
        assert cmd in out


def test_models_table_and_json(capsys):
    out = _ok(capsys, "models")
    assert "deepseek-v3" in out and "671.03B" in out
    rows = json.loads(_ok(capsys, "models", "--json"))["models"]
    assert {r["name"] for r in rows} == set(catalog_names("models"))
    v3 = next(r for r in rows if r["name"] == "deepseek-v3")
    assert (v3["total_params"], v3["mtp_params"], v3["experts"], v3["top_k"]) == (671_026_419_200, 11_610_068_224, 256, 8)


def test_hw_table_and_json(capsys):
    out = _ok(capsys, "hw")
    assert "gb200-nvl72" in out and "b300" in out
    rows = json.loads(_ok(capsys, "hw", "--json"))["hardware"]
    assert {r["name"] for r in rows} == set(catalog_names("hw_specs"))
    nvl72 = next(r for r in rows if r["name"] == "gb200-nvl72")
    assert nvl72["nvlink_domain"] == 72 and nvl72["peak_flops"]["bf16"] == 2.5e15


def test_show_model_by_alias(capsys):
    out = _ok(capsys, "show-model", "v3")
    assert "DeepSeek-V3" in out and "671,026,419,200" in out and "MTP modules (1): 11.61B" in out


def test_show_model_json_is_stable(capsys):
    first = _ok(capsys, "show-model", "kimi-k2", "--json")
    assert _ok(capsys, "show-model", "K2", "--json") == first  # same spec through an alias, same bytes
    data = json.loads(first)
    # One convention for every model: the input embedding counted (Kimi publishes 32B without it).
    assert data["params"]["active_convention"] == "incl_embedding"
    assert data["params"]["active"] == data["params"]["active_incl_embedding"]
    assert data["params"]["total"] == 1_026_408_232_448
    assert data["model"]["reference_job"]["gpus"] == 256 and len(data["spec_hash"]) == 12


def test_show_model_from_a_config_json(capsys):
    path = FIXTURES / "qwen3-235b-a22b" / "config.json"
    out = _ok(capsys, "show-model", str(path))
    assert "qwen3-235b-a22b" in out and "235,093,634,560" in out
    data = json.loads(_ok(capsys, "show-model", str(path), "--json"))
    assert data["params"]["total"] == 235_093_634_560
    assert data["model"]["source"][0].startswith(str(path))


def test_show_hw_lists_every_number_with_its_source(capsys):
    out = _ok(capsys, "show-hw", "b200")
    assert "183359 MiB" in out and "hybridep" in out and "mxfp8" in out
    data = json.loads(_ok(capsys, "show-hw", "nvl72", "--json"))
    assert data["hardware"]["name"] == "gb200-nvl72"
    assert data["hardware"]["gpu"]["hbm_usable_bytes"]["source"].startswith("nvidia-smi")


def test_importing_the_cli_stays_light():
    """`planner --help` must not pay for numpy, OR-Tools or matplotlib."""
    code = ("import sys, planner.cli; planner.cli._register(); "
            "print(sorted(m for m in ('numpy', 'ortools', 'matplotlib', 'networkx') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_active_counts_follow_one_rule_for_imported_and_catalog_models(capsys):
    # Issue 22: the importer's Llama 3.1 70B showed 69.50B active (input embedding left out), the
    # catalog's 70.55B. One rule now: the input embedding is in planner's active count for every
    # model; the publisher's figure keeps its own convention.
    imported = json.loads(_ok(capsys, "show-model", str(FIXTURES / "llama3.1-70b" / "config.json"), "--json"))
    catalog = json.loads(_ok(capsys, "show-model", "llama3.1-70b", "--json"))
    for data in (imported, catalog):
        p = data["params"]
        assert p["active_convention"] == "incl_embedding" and p["active"] == p["total"] == 70_553_706_496
    v3 = json.loads(_ok(capsys, "models", "--json"))["models"]
    row = next(r for r in v3 if r["name"] == "deepseek-v3")
    assert row["active_params"] > row["published_active_params"] == 37.0e9
    assert row["published_active_convention"] == "excl_input_embedding"
