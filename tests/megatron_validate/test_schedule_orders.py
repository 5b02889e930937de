"""planner's schedule orders against torch.distributed.pipelining's own (torch 2.13 in the
validation venv, the schedules torchtitan 0.3.0 runs by name): ZBVZeroBubble, DualPipeV,
InterleavedZeroBubble identical for every case; Interleaved1F1B identical to Megatron-Core's
interleaved order exactly when the micro-batches are a multiple of PP (or one)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from planner.cost.schedules import rank_items
from planner.cost.schedules.ops import Commit, Pair, Post
from planner.specs.schedule import schedule_named as named

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = Path(os.environ.get("PLANNER_MEGATRON_VENV", ROOT / ".megatron-venv"))
PY = VENV / "bin" / "python"

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(not PY.exists(), reason=f"no validation venv at {VENV}: run scripts/setup_validation_env.sh "
                       "(or set PLANNER_MEGATRON_VENV)"),
]

TORCH_NAME = {"zbv": "ZBVZeroBubble", "dualpipev": "DualPipeV", "zb-h1": "InterleavedZeroBubble",
              "interleaved": "Interleaved1F1B"}


def _cases() -> list[tuple[str, int, int, int]]:
    out = []
    for p in (2, 3, 4, 5, 8):
        for m in (1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 24):
            out.append(("zbv", p, 2, m))
            if m >= 2 * p:
                out.append(("dualpipev", p, 2, m))
            if m % max(1, m // p) == 0:
                out += [("zb-h1", p, v, m) for v in (1, 2, 3)] + [("interleaved", p, v, m) for v in (2, 3)]
    return out


def _ours(item):
    if isinstance(item, Pair):
        return ["F&B", _ours(item.fwd), _ours(item.bwd)]
    return [item.kind, item.chunk, item.microbatch]


@pytest.fixture(scope="module")
def torch_orders():
    cases = _cases()
    reqs = [dict(schedule=TORCH_NAME[n], pp=p, stages_per_rank=v, microbatches=m) for n, p, v, m in cases]
    proc = subprocess.run([str(PY), str(HERE / "torch_schedule_orders.py")], input=json.dumps(reqs),
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(zip(cases, json.loads(proc.stdout.strip().splitlines()[-1])))


def test_orders_equal_torchs(torch_orders):
    differ = []
    for (name, p, v, m), ref in torch_orders.items():
        ours = [[_ours(i) for i in rank_items(named(name), p, v, m, r) if not isinstance(i, (Post, Commit))]
                for r in range(p)]
        if ours != ref:
            differ.append((name, p, v, m))
    assert all(n == "interleaved" and m % p and m > 1 for n, p, v, m in differ), differ
    assert len(differ) == sum(1 for n, p, v, m in torch_orders if n == "interleaved" and m % p and m > 1)
