"""torchao's rowwise FP8 recipe (Assumptions.fp8_recipe 'rowwise', torchtitan's float8 recipe_name
'rowwise'): its casts and rescales as torchao's own roofline counts them, and the speed-ups torchao
publishes for it."""

from __future__ import annotations

import pytest

from planner.cost.flops import Gemm, Shard, _fp8_casts
from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.time import time_report
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.plan import Plan


def test_cast_bytes_follow_torchaos_roofline():
    """torchao/testing/training/roofline_utils.py, 'rowwise': an input or output gradient costs
    8 bytes per element (two kernels), a weight 10 (three); per linear of a fused entry; the
    backward GEMMs' outputs are scaled after cuBLAS (read and write, 4 bytes per element)."""
    m, n, k = 4096, 3072, 1024
    g = Gemm("qkv", m, n, k, linears=3)
    rowwise = _fp8_casts(g, Shard(tp=1, cp=1, ep=1, etp=1, mbs=1, seq=m, fp8=True, fp8_rowwise=True))
    assert rowwise.bytes_fwd + rowwise.bytes_bwd == 3 * 8 * m * k + 8 * m * n + 10 * k * n + 3 * 4 * m * k + 4 * k * n
    te = _fp8_casts(g, Shard(tp=1, cp=1, ep=1, etp=1, mbs=1, seq=m, fp8=True))
    assert (te.bytes_fwd, te.bytes_bwd) == (4 * m * k, 4 * m * n)  # Transformer Engine: one cast each way


def _tokens(plan: str, recipe: str | None) -> float:
    job = Job(gpus=8, global_batch=8, seq_len=8192, precisions=("bf16", "fp8"))
    setup = resolve_setup(load_model("llama3.1-8b"), load_hardware("h100-96gb-500w"), job, Plan.parse(plan),
                          Assumptions(fp8_recipe=recipe, attention_kernel="flash2"))
    return time_report(setup).to_json()["tokens_per_s_per_gpu"]


def test_speed_ups_torchao_publishes_for_llama3_8b():
    """torchao float8 README (before pytorch/ao#3791), Llama3-8B on 8 H100, FSDP2, per-op SAC,
    torch.compile, batch 1 x 8192: bf16 6,150 tokens/s, tensorwise 7,689.5 (+25.0 %), rowwise
    6,768 (+10.1 %). Not in the calibration subset."""
    base = "mbs=1,sharding=fsdp,recompute=op"
    bf16 = _tokens(base + ",precision=bf16", None)
    tensorwise = _tokens(base + ",precision=fp8", "tensorwise") / bf16
    rowwise = _tokens(base + ",precision=fp8", "rowwise") / bf16
    assert tensorwise == pytest.approx(7689.5 / 6150, abs=0.05)
    assert rowwise == pytest.approx(6768 / 6150, abs=0.05)


@pytest.mark.parametrize("recipe", ["rowwise", "tensorwise"])
def test_the_torchtitan_job_file_carries_the_recipe_both_ways(tmp_path, recipe):
    """export --format torchtitan-toml writes the recipe the plan was costed with, and the reader
    (check/explain --torchtitan) takes it back as the run's assumption."""
    from planner.launchers.torchtitan.read import job_from_torchtitan
    from planner.launchers.torchtitan.toml import export_torchtitan_toml

    job = Job(gpus=64, global_batch=96, seq_len=8192, precisions=("fp8",))
    setup = resolve_setup(load_model("llama3.1-8b"), load_hardware("h100"), job,
                          Plan.parse("tp=8,mbs=12,sharding=fsdp,recompute=op,precision=fp8"), Assumptions(fp8_recipe=recipe))
    f = tmp_path / "job.toml"
    f.write_text(export_torchtitan_toml(setup))
    assert f'recipe_name = "{recipe}"' in f.read_text()
    tj = job_from_torchtitan(f, hw="h100")
    assert tj.assumptions == {"cross_entropy": "torch", "fp8_recipe": recipe}  # the file leaves compile off
    assert tj.plan.to_string() == setup.plan.to_string()
