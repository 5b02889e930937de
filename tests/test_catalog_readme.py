"""docs/usage.md's catalog tables are generated from the YAML (and fail here when stale), the README's
quick start's test command is the one .ci/run runs, and .ci/run is a runnable bash script.

Regenerate the tables after changing models/ or hw_specs/:

    PYTHONPATH=. python tests/test_catalog_readme.py
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CATALOG_DOC = REPO / "docs" / "usage.md"
CI = REPO / ".ci" / "run"

QUICK_START_TEST = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest"
QUICK_START_SEARCH = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && planner search --model v3 --hw nvl72"


def _count(n: float) -> str:
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= div:
            return f"{n / div:.2f}{suf}"
    return f"{n:.0f}"


def models_table() -> str:
    from planner.specs.catalog import all_models

    lines = [
        "| name | aliases | layers | hidden | attention (heads/kv) | experts | total | active | published active (convention) | reference job |",
        "|---|---|---:|---:|---|---|---:|---:|---|---|",
    ]
    for m in all_models():
        p = m.params
        conv = m.published.active_convention
        pub = m.published.active_params
        experts = f"{m.moe.num_experts} top-{m.moe.top_k}" + (
            f" +{m.moe.num_shared_experts} shared" if m.moe.num_shared_experts else "") if m.moe else "dense"
        mtp = f" + MTP {_count(p.mtp)}" if p.mtp else ""
        short = "excl. emb." if conv == "excl_input_embedding" else "incl. emb."
        a = m.attention
        attn = "MLA" if a.kind == "mla" else ("MHA" if a.num_kv_heads == a.num_heads else f"GQA {a.num_heads}/{a.num_kv_heads}")
        job = m.reference_job
        where = f" {job.hardware}" if job.hardware else ""
        lines.append(
            f"| `{m.name}` | {', '.join(m.aliases[:3])} | {m.num_layers} | {m.hidden_size} | {attn} "
            f"| {experts} | {_count(p.total)}{mtp} | {_count(p.active())} "
            f"| {_count(pub.value) + ' (' + short + ')' if pub else '-'} "
            f"| {job.gpus} GPUs{where}, GBS {job.global_batch} x {job.seq_len} |"
        )
    return "\n".join(lines)


def hardware_table() -> str:
    from planner.specs.catalog import all_hardware

    lines = [
        "| name | aliases | GPU | BF16 / FP8 TFLOP/s | HBM GiB usable | HBM TB/s | NVLink domain x GB/s | NIC GB/s | host link GB/s | FP8 recipe | dispatcher |",
        "|---|---|---|---:|---:|---:|---|---:|---|---|---|",
    ]
    for h in all_hardware():
        g = h.gpu
        fp8 = f"{g.peak_flops['fp8'].value / 1e12:,.0f}" if "fp8" in g.peak_flops else "-"
        lines.append(
            f"| `{h.name}` | {', '.join(h.aliases[:3])} | {g.name} | {g.peak_flops['bf16'].value / 1e12:,.0f} / {fp8} "
            f"| {g.hbm_usable_bytes.value / 2**30:.1f} | {g.hbm_bandwidth.value / 1e12:.2f} "
            f"| {h.domain_size} x {h.nvlink.bandwidth_per_direction.value / 1e9:.0f} "
            f"| {h.scale_out.bandwidth_per_direction.value / 1e9:.0f} "
            f"| {h.host.kind} {h.host.bandwidth_per_direction.value / 1e9:.0f} | {h.fp8_recipe or '-'} | {h.default_dispatcher} |"
        )
    return "\n".join(lines)


TABLES = {"models": models_table, "hardware": hardware_table}


def _section(text: str, name: str) -> re.Match:
    m = re.search(rf"<!-- BEGIN {name} table.*?-->\n(.*?)<!-- END {name} table -->", text, re.S)
    assert m, f"docs/usage.md lacks the markers of the {name} table"
    return m


def regenerate() -> None:
    text = CATALOG_DOC.read_text()
    for name, make in TABLES.items():
        m = _section(text, name)
        text = text[: m.start(1)] + make() + "\n" + text[m.end(1):]
    CATALOG_DOC.write_text(text)


def test_readme_catalog_tables_are_current():
    text = CATALOG_DOC.read_text()
    for name, make in TABLES.items():
        assert _section(text, name).group(1) == make() + "\n", (
            f"the {name} table in docs/usage.md is stale: run PYTHONPATH=. python tests/test_catalog_readme.py")


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    text = README.read_text()
    block = re.search(r"## Quick start\n.*?```(?:bash|sh)?\n(.*?)```", text, re.S)
    assert block, "README.md has a Quick start section with a code block"
    commands = [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]
    assert commands == [QUICK_START_SEARCH, QUICK_START_TEST]
    ci = CI.read_text()
    # .ci/run performs command 2 step by step (venv, install with test extras, the test command).
    assert "-m venv" in ci and '. "$VENV/bin/activate"' in ci
    assert "pip install --progress-bar off -e '.[test]'" in ci
    # ... then the README's test command, after the install, with the slow step's two shards started
    # just before it (they run beside it); then the launcher validators' tests once the validation venvs
    # are built, each shard's result (a failed shard fails the run), and the lint checks' result.
    lines = ci.rstrip().splitlines()
    test_cmd = QUICK_START_TEST.split(" && ")[-1]
    assert test_cmd == "python -m pytest" and test_cmd in lines
    before, after = lines[:lines.index(test_cmd)], lines[lines.index(test_cmd) + 1:]
    assert lines.index(test_cmd) > lines.index("python -m pip install --progress-bar off -e '.[test]'")
    assert "for shard in 1 2; do" in before and \
        '  PLANNER_TEST_SHARD="$shard/2" python -m pytest -m slow >".ci-logs/slow-tests-$shard.log" 2>&1 &' in before
    assert [ln for ln in after if ln and not ln.lstrip().startswith("#")] == [
        'for pid in "${pids[@]}"; do wait "$pid"; done', "tail -n 2 .ci-logs/*-venv.log 2>/dev/null || true",
        "python -m pytest -m megatron",
        "for shard in 1 2; do",
        '  if ! wait "${shard_pids[$((shard - 1))]}"; then',
        '    cat ".ci-logs/slow-tests-$shard.log"',
        '    echo ".ci/run: the slow tests of shard $shard/2 failed (above)." >&2',
        "    exit 1",
        "  fi",
        '  tail -n 3 ".ci-logs/slow-tests-$shard.log"',
        "done",
        'if ! wait "$lint_pid"; then',
        "  cat .ci-logs/lint.log",
        '  echo ".ci/run: lint or type checks failed (above)." >&2',
        "  exit 1",
        "fi",
        "tail -n 3 .ci-logs/lint.log"]
    # the lint checks run in the background from the install on (their result read last, above)
    assert "( ruff check planner tests scripts benchmarks && lint-imports && mypy ) >.ci-logs/lint.log 2>&1 &" in before


def test_ci_script_is_executable_bash():
    assert CI.stat().st_mode & stat.S_IXUSR
    assert CI.read_text().startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in CI.read_text()
    subprocess.run(["bash", "-n", str(CI)], check=True)


def test_ci_script_fails_without_a_suitable_python(tmp_path):
    env = dict(os.environ, PYTHON="false")  # a 'python' that fails: the venv step must stop the run
    proc = subprocess.run(["bash", str(CI)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode != 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    regenerate()
    print("docs/usage.md tables regenerated")
