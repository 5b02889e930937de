"""The default memory margin: 2.17 % of usable HBM kept free (planner.inputs.DEFAULT_MEMORY_MARGIN,
the largest held-out shortfall of the reserved peak on H200s, issue 41), the quick start's first plan leaving it free, and the plan
at the edge still reachable with --memory-margin 0."""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from planner.inputs import DEFAULT_MEMORY_MARGIN
from planner.specs.job_input import resolve_job
from planner.specs.catalog import load_hardware, load_model


def _search(capsys, *extra):
    assert main(["search", "--model", "v3", "--hw", "nvl72", "--top", "1", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_default_is_the_rederived_reserved_shortfall():
    # benchmarks/gpu/reserved_validation.py derives it from the 46 H200 runs held out one
    # configuration at a time (tests/test_reserved_breakdown.py checks that derivation).
    from benchmarks.gpu.reserved_validation import REDERIVED_MARGIN

    assert DEFAULT_MEMORY_MARGIN == REDERIVED_MARGIN
    job = resolve_job(load_model("v3"))
    assert job.memory_margin_fraction == DEFAULT_MEMORY_MARGIN and job.memory_margin_bytes == 0
    given = resolve_job(load_model("v3"), memory_margin_gib=2.0)
    assert given.memory_margin_fraction == 0 and given.memory_margin_bytes == 2 * 2**30


@pytest.mark.slow
def test_quick_start_first_plan_leaves_the_margin_free(capsys):
    usable = load_hardware("nvl72").gpu.hbm_usable_bytes.value
    out = _search(capsys)
    mem = out["plans"][0]["memory"]
    assert mem["margin_bytes"] == pytest.approx(DEFAULT_MEMORY_MARGIN * usable, abs=1)
    assert mem["headroom_bytes"] >= 0 and mem["peak_bytes"] <= mem["capacity_bytes"]
    assert out["job"]["memory_margin_fraction"] == DEFAULT_MEMORY_MARGIN
    edge = [p["memory"] for p in _search(capsys, "--memory-margin", "0", "--top", "10", "--all-variants")["plans"]]
    assert all(e["margin_bytes"] == 0 for e in edge)
    # --memory-margin 0 gives the margin back to the plans: the capacity grows by exactly it. (With the
    # 3 % default of before 2e3e259, 5.6 GiB here, some of the fastest plans sat in that band; at 2.17 %,
    # 4.0 GiB, none of the ten need to.)
    assert all(e["capacity_bytes"] == pytest.approx(mem["capacity_bytes"] + mem["margin_bytes"], abs=1)
               for e in edge)


def test_headroom_column_in_search_table(capsys):
    code = main(["search", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch", "64",
                 "--seq-len", "4096", "--top", "2", "--max", "pp=1"])
    out = capsys.readouterr().out
    assert code == 0 and "headroom" in out and "memory margin" in out and "2.17% of usable HBM" in out
