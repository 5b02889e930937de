"""torchtitan job files through torchtitan's own ConfigManagers, on the CPU: the 0.3.0 invocation
(--module/--config with overrides) through 0.3.0's, the TOML job file through 0.2.2's (the last
release that reads TOML; scripts/setup_validation_env.sh unzips it into the venv). The plans are the
round-trip set of tests/test_export_torchtitan_files.py: Llama 3.1 8B and 70B with FSDP, HSDP, ZeRO-2,
DDP, TP, CP, PP with the 1F1B and interleaved schedules, Qwen3-30B-A3B with EP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))

from tests.test_export_torchtitan_files import CASES, setup_of  # noqa: E402

from planner.launchers.torchtitan.toml import export_torchtitan_toml, flavor_for  # noqa: E402
from planner.launchers.torchtitan.write import torchtitan_launch  # noqa: E402

VENV = Path(os.environ.get("PLANNER_MEGATRON_VENV", ROOT / ".megatron-venv"))
PY = VENV / "bin" / "python"
TT022 = Path(os.environ.get("PLANNER_TORCHTITAN_022", VENV / "torchtitan-0.2.2"))

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(not PY.exists(), reason=f"no validation venv at {VENV}: run scripts/setup_validation_env.sh"),
]


def _run(script: str, requests: list[dict], extra_env: dict | None = None) -> list[dict]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(HERE), **(extra_env or {})}
    proc = subprocess.run([str(PY), str(HERE / script)], input=json.dumps(requests), capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cli_form_passes_torchtitan_0_3_config_manager():
    setups = [setup_of(c) for c in CASES]
    reqs = [{"argv": torchtitan_launch(s).argv(), "world_size": s.job.gpus} for s in setups]
    for s, r in zip(setups, _run("torchtitan_check.py", reqs)):
        assert r["ok"], (s.plan.to_string(), r)
        assert r["dp_replicate"] * r["dp_shard"] == s.deg.dp
        assert (r["tp"], r["cp"], r["pp"]) == (s.deg.tp, s.deg.cp, s.deg.pp)
        assert r["global_batch_size"] == s.job.global_batch and r["seq_len"] == s.job.seq_len
        if s.plan.pp > 1:
            assert r["schedule"] == ("Interleaved1F1B" if s.plan.vpp > 1 else "1F1B")
            assert len(r["module_fqns_per_model_part"]) == s.deg.pp * s.deg.vpp


@pytest.mark.skipif(not TT022.exists(), reason=f"no torchtitan 0.2.2 at {TT022}: run scripts/setup_validation_env.sh")
def test_toml_passes_torchtitan_0_2_2_config_manager(tmp_path):
    setups = [setup_of(c) for c in CASES]
    reqs = []
    for i, s in enumerate(setups):
        f = tmp_path / f"job{i}.toml"
        f.write_text(export_torchtitan_toml(s))
        reqs.append({"toml": str(f), "world_size": s.job.gpus})
    for s, r in zip(setups, _run("torchtitan_toml_check.py", reqs, {"TORCHTITAN_022": str(TT022)})):
        assert r["ok"], (s.plan.to_string(), r)
        assert r["torchtitan_file"].startswith(str(TT022))  # 0.2.2's code, not 0.3.0's
        assert r["model"] == list(flavor_for(s.model))
        assert r["dp_replicate"] * r["dp_shard"] == s.deg.dp
        assert (r["tp"], r["cp"], r["pp"]) == (s.deg.tp, s.deg.cp, s.deg.pp)
        assert r["ac_mode"] == {"full": "full", "op": "selective"}.get(s.plan.recompute.kind, "none")
        if s.plan.recompute.kind == "op":
            assert r["ac_option"] == "op"  # per-op selective AC (digits would be every N-th layer)
        assert r["global_batch_size"] == s.job.global_batch and r["seq_len"] == s.job.seq_len
        if s.plan.pp > 1:
            assert len(r["module_fqns_per_model_part"]) == s.deg.pp * s.deg.vpp


@pytest.mark.skipif(not TT022.exists(), reason=f"no torchtitan 0.2.2 at {TT022}")
def test_torchtitan_0_2_2_rejects_a_bad_toml(tmp_path):
    s = setup_of(CASES[3])
    good = export_torchtitan_toml(s)
    bad = {
        "world": good.replace("data_parallel_shard_degree = 4", "data_parallel_shard_degree = 3"),
        "schedule-stages": good.replace('"Interleaved1F1B"', '"1F1B"'),
        "unknown-key": good.replace("[compile]", "[compile]\nnot_a_key = 1"),
    }
    reqs = []
    for name, text in bad.items():
        f = tmp_path / f"{name}.toml"
        f.write_text(text)
        reqs.append({"toml": str(f), "world_size": s.job.gpus})
    results = dict(zip(bad, _run("torchtitan_toml_check.py", reqs, {"TORCHTITAN_022": str(TT022)})))
    assert not [k for k, r in results.items() if r["ok"]], results
