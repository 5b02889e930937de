"""Issue 39: each published run is evaluated on the release it ran. The runs file's
``software_profile`` lines are what scripts/import_published_runs.py derives from each run's
``software`` text (and the Megatron-LM commit a ModelZoo row states); the lines are edited by hand
(the importer drifts elsewhere), so this holds the two together."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import pytest
import yaml

from planner.specs.catalog import load_software
from planner.validate.evaluate import evaluate_run
from tests._published import published_runs

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "tests" / "data" / "published_runs.yaml"


@cache
def _importer():
    spec = importlib.util.spec_from_file_location("import_published_runs", ROOT / "scripts" / "import_published_runs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def _raw_runs() -> dict[str, dict]:
    return {r["name"]: r for r in yaml.safe_load(RUNS.read_text())["runs"]}


def _mapped(run: dict) -> str | None:
    imp = _importer()
    return imp.software_profile(run.get("software"), imp.stated_commit(run))


def test_every_run_s_profile_is_the_importer_s_mapping_of_its_software():
    wrong = {n: (r.get("software_profile"), _mapped(r)) for n, r in _raw_runs().items()
             if r.get("software_profile") != _mapped(r)}
    assert not wrong, wrong
    for name in {r["software_profile"] for r in _raw_runs().values() if r.get("software_profile")}:
        assert load_software(name).name == name


# (run, profile): one run per group the ModelZoo and torchtitan sources were read for (the mapping's
# comments in the importer say from what); None: the source states no release, the default applies.
EXPECTED = {
    # one ModelZoo 'software' text for 13 H100 rows: the row's commit decides
    "zoo-qwen3-235b-h100-256gpu-bf16-deepep-intranode-ep8-fsdp": "megatron-core-0.13",  # main(1e057005)
    "zoo-qwen3-235b-h100-256gpu-bf16-a2a-intranode-ep8-pp32": "megatron-core-0.13",
    "zoo-qwen3-235b-h100-256gpu-bf16-deepep-crossnode-ep32": "megatron-core-0.14",  # moe_dev(f3e6c5)
    "zoo-qwen3-235b-h100-256gpu-bf16-deepep-crossnode-ep32-1f1b-overlap": "megatron-core-0.14",
    "zoo-qwen3-235b-h100-256gpu-bf16-seq128k-dropless": "megatron-core-0.15",  # no commit, 2025-11-04
    "zoo-qwen3-235b-gb200-256gpu-mxfp8-hybridep-offload": "megatron-core-0.19",
    "zoo-qwen3-235b-gb300-64gpu-mxfp8-hybridep-ep64": "megatron-core-0.19",
    "tt-llama4-scout-gb200-256gpu-mxfp8": "torchtitan-0.2.2",
    "llama3-405b-8k-h100-8192gpu": None,  # Meta's own stack
    "deepseek-v3-report-h800-2048gpu": None,  # DeepSeek's HAI-LLM
    "mcore-moe-report-qwen3-235b-gb200-headline": None,  # the report names no version
    "tt-dsv3-671b-b200-256gpu-mxfp8-deepep": None,  # blog of 2026-03-26, no commit: newest release
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_runs_map_to_the_release_their_source_states(name):
    run = _raw_runs()[name]
    assert _mapped(run) == run.get("software_profile") == EXPECTED[name]


def test_a_row_s_stated_commit_decides_over_the_shared_software_text():
    imp = _importer()
    text = _raw_runs()["zoo-qwen3-235b-h100-256gpu-bf16-seq16k-forcebal"]["software"]
    assert imp.software_profile(text) == "megatron-core-0.15"
    assert imp.software_profile(text, "1e057005") == "megatron-core-0.13"
    assert imp.software_profile(text, "f3e6c5") == "megatron-core-0.14"
    assert imp.software_profile(text, "bbc762d5") == "megatron-core-0.15"  # a commit planner has not dated
    assert imp.stated_commit({"notes": "Row \"A2A\", main(1e057005). GA=512"}) == "1e057005"
    assert imp.stated_commit({"notes": "Long-context table (H100, DeepEP, bf16)"}) is None


def test_mapped_runs_use_nothing_their_release_lacks():
    """A release older than a feature the published recipe ran would be the wrong release."""
    runs = {r.name: r for r in published_runs()}
    checked = 0
    for name, raw in _raw_runs().items():
        if not name.startswith("zoo-qwen3-235b"):
            continue
        res = evaluate_run(runs[name])
        assert res.evaluated and res.software == raw["software_profile"], (name, res.status)
        assert res.software_origin == "the runs file"
        assert not res.software_lacks, (name, res.software_lacks)
        checked += 1
    assert checked == 17
